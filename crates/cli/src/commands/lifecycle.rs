//! `trantor up`, `trantor down`, `trantor seat-why`: start, stop and explain seats.

use super::seats::{self, SeatRecord};
use super::{Common, print_json, usage};
use serde_json::{Value, json};
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::{ExitCode, Stdio};
use std::time::{Duration, Instant};
use trantor_proto::{HubClient, Peer, RegisterRequest, now_ms};
use trantor_runner::park;

pub(crate) const UP_HELP: &str = concat!(
    "\
Each argument is an agent CLI, optionally with a model: claude, codex:gpt-5, kimi, opencode,
gemini, dsh, or `command` (any CLI, given as a template in CREW_COMMAND). A second seat of the
same agent gets the persona <agent>-2.

Seats run `trantor runner <agent> <dir>` for this project: in tmux when it is installed (session
trantor-<project>, one window per seat; output also in the log), otherwise as background
processes with logs under <bus dir>/logs/runner-<persona>-<project>.log. If no hub answers at
the hub URL and it is local, one is started first (log: <bus dir>/logs/hub.log). Each seat must
show up live on the hub's /peers within --wait seconds; a seat that does not is named with the
reason `trantor seat-why` finds. Exits 1 when any seat did not come up.

Examples:
  trantor up claude                     one Claude Code seat for the current project
  trantor up claude codex:gpt-5 kimi    three seats, codex on gpt-5
  CREW_COMMAND='my-agent --prompt-file {P}' trantor up command
  trantor up claude --no-tmux --wait 90

",
    exit_codes!()
);

pub(crate) const DOWN_HELP: &str = concat!(
    "\
Stops seats started by `trantor up`: SIGTERM to each runner (it finishes cleanly; a turn in
flight is stopped and its message stays queued), then the tmux window closes.

Examples:
  trantor down                 every seat of this project
  trantor down codex           one seat (a persona, or persona:project)
  trantor down --all           every project's seats
  trantor down --all --hub     and the hub `trantor up` started

",
    exit_codes!()
);

pub(crate) const SEAT_WHY_HELP: &str = concat!(
    "\
Reads the evidence for one seat and says what state it is in, with the advice that fits:
  live            the runner is up and the hub sees it
  parked          the runner stopped redelivering (reason, until, evidence in the park file)
  dead (quota)    parked on an exhausted quota until it resets
  dead (auth)     parked because the CLI's credentials were refused
  crashed         `trantor up` started it and its runner is gone (log tail shown)
  no runner       it ran here before and was stopped
  never started   no trace of it on this machine
Evidence: the hub's /peers row, park-<persona>-<project>.json, err-<persona>-<project>.txt,
logs/<persona>-<project>.jsonl (the runner's ledger), the turn-state file and the runner's pid.
Exits 0 when the seat is live, 1 otherwise.

Examples:
  trantor seat-why claude
  trantor seat-why codex:web --json

",
    exit_codes!()
);

/// `trantor up` options.
#[derive(Debug, clap::Args)]
pub struct UpArgs {
    /// Seats to start: <agent[:model]>…
    #[arg(required = true, value_name = "AGENT[:MODEL]")]
    pub seats: Vec<String>,
    /// Directory the seats work in [default: the current directory].
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Seconds to wait for each seat to show up live.
    #[arg(long, default_value_t = 60)]
    pub wait: u64,
    /// Run seats as background processes even when tmux is installed (also TRANTOR_NO_TMUX=1).
    #[arg(long)]
    pub no_tmux: bool,
    #[command(flatten)]
    pub common: Common,
    /// Set by `trantor duty up`: the persona of the (single) seat and extra runner variables.
    #[arg(skip)]
    pub seat_override: Option<(String, Vec<(String, String)>)>,
}

/// `trantor down` options.
#[derive(Debug, clap::Args)]
pub struct DownArgs {
    /// Seats to stop (persona or persona:project) [default: all of this project's].
    pub seats: Vec<String>,
    /// Stop the seats of every project.
    #[arg(long, conflicts_with = "seats")]
    pub all: bool,
    /// Also stop the hub that `trantor up` started.
    #[arg(long)]
    pub hub: bool,
    #[command(flatten)]
    pub common: Common,
}

/// `trantor seat-why` options.
#[derive(Debug, clap::Args)]
pub struct SeatWhyArgs {
    /// The seat: a persona (claude), or persona:project.
    pub seat: String,
    #[command(flatten)]
    pub common: Common,
}

/// A seat's state, from evidence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    Live,
    Parked,
    DeadQuota,
    DeadAuth,
    Crashed,
    NoRunner,
    NeverStarted,
}

impl Verdict {
    fn word(self) -> &'static str {
        match self {
            Verdict::Live => "live",
            Verdict::Parked => "parked",
            Verdict::DeadQuota => "dead (quota)",
            Verdict::DeadAuth => "dead (auth)",
            Verdict::Crashed => "crashed",
            Verdict::NoRunner => "no runner",
            Verdict::NeverStarted => "never started",
        }
    }
}

/// What `seat-why` found.
#[derive(Debug, Clone)]
pub(crate) struct Diagnosis {
    pub session: String,
    pub verdict: Verdict,
    pub summary: String,
    pub evidence: Vec<String>,
    pub advice: Vec<String>,
}

impl Diagnosis {
    fn json(&self) -> Value {
        json!({
            "session": self.session,
            "state": self.verdict.word(),
            "summary": self.summary,
            "evidence": self.evidence,
            "advice": self.advice,
        })
    }

    fn print(&self) {
        say!(
            "{} — {}: {}",
            self.session,
            self.verdict.word(),
            self.summary
        );
        for e in &self.evidence {
            say!("  evidence: {e}");
        }
        for a in &self.advice {
            say!("  advice:   {a}");
        }
    }
}

fn last_turn(ledger: &std::path::Path) -> Option<Value> {
    let text = std::fs::read_to_string(ledger).ok()?;
    text.lines()
        .rev()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|r| r.get("turn").is_some())
}

fn boot_agent(ledger: &std::path::Path) -> Option<String> {
    let text = std::fs::read_to_string(ledger).ok()?;
    text.lines()
        .rev()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|r| r.get("boot").and_then(Value::as_bool) == Some(true))
        .and_then(|r| r.get("agent").and_then(Value::as_str).map(str::to_string))
}

/// Explain a seat from the files on this machine and the hub's presence row.
pub(crate) async fn diagnose(persona: &str, project: &str, hub: &HubClient) -> Diagnosis {
    let session = format!("{persona}:{project}");
    let paths = seats::runner_paths(persona, project);
    let record = seats::load_record(persona, project);
    let now = now_ms();
    let mut evidence = Vec::new();

    let peer: Option<Peer> = match hub.peers().await {
        Ok(r) => r.peers.into_iter().find(|p| p.session == session),
        Err(e) => {
            evidence.push(format!("hub: cannot read /peers at {} ({e})", hub.base()));
            None
        }
    };
    if let Some(p) = &peer {
        let mut s = format!(
            "hub: {} (last seen {} ago)",
            if p.online { "online" } else { "offline" },
            trantor_mcp::render::age(p.last_seen, now)
        );
        if !p.status.is_empty() {
            s.push_str(&format!(", status \"{}\"", p.status));
        }
        if let Some(ph) = p.phase.as_deref().filter(|ph| !ph.is_empty()) {
            s.push_str(&format!(", phase {ph}"));
        }
        evidence.push(s);
    } else if evidence.is_empty() {
        evidence.push(format!(
            "hub: {} has no presence row for {session}",
            hub.base()
        ));
    }

    let pid = seats::runner_pid(persona, project);
    let stopped = record.as_ref().and_then(|r| r.stopped);
    match pid {
        Some(p) => evidence.push(format!("runner: pid {p} is running")),
        None if stopped.is_some() => evidence.push(format!(
            "runner: stopped by `trantor down` {} ago",
            trantor_mcp::render::age(stopped.unwrap_or(now), now)
        )),
        None => {
            if let Some(r) = &record {
                evidence.push(format!(
                    "runner: `trantor up` started it {} ago{} and no runner process is alive",
                    trantor_mcp::render::age(r.started, now),
                    r.pid.map(|p| format!(" (pid {p})")).unwrap_or_default()
                ));
            }
        }
    }

    let park = park::read(&paths.park).filter(|p| p.until > now);
    if let Some(pk) = &park {
        let until = if pk.until == park::NEVER {
            "until an operator acts".to_string()
        } else {
            format!("until {}", park::fmt_time(pk.until))
        };
        evidence.push(format!(
            "park file {}: reason {}, since {} ago, {until}{}, {} message(s) held{}",
            paths.park.display(),
            pk.reason,
            trantor_mcp::render::age(pk.ts, now),
            if pk.bounded {
                " (a direct message ends it)"
            } else {
                ""
            },
            pk.held,
            if pk.evidence.is_empty() {
                String::new()
            } else {
                format!(" — {}", pk.evidence)
            }
        ));
    }
    let turn = last_turn(&paths.ledger);
    let last_failed = turn
        .as_ref()
        .and_then(|t| t.get("outcome").and_then(Value::as_str))
        .is_some_and(|o| o != "completed");
    // The err file holds the last turn's output, whatever it was; it is evidence only when
    // something went wrong.
    let err_tail = seats::tail(&paths.err, 4);
    if !err_tail.is_empty() && (park.is_some() || last_failed) {
        evidence.push(format!(
            "err file {}: {}",
            paths.err.display(),
            err_tail.join(" ⏎ ")
        ));
    }
    if let Some(t) = &turn {
        evidence.push(format!(
            "ledger {}: last turn {} ({}) ended {} ago: {} — {}",
            paths.ledger.display(),
            t.get("turn").map(|v| v.to_string()).unwrap_or_default(),
            t.get("trigger").and_then(Value::as_str).unwrap_or("?"),
            trantor_mcp::render::age(t.get("ts").and_then(Value::as_i64).unwrap_or(now), now),
            t.get("outcome").and_then(Value::as_str).unwrap_or("?"),
            t.get("verdict").and_then(Value::as_str).unwrap_or("")
        ));
    } else if paths.ledger.exists() {
        evidence.push(format!(
            "ledger {}: booted, no turn finished yet",
            paths.ledger.display()
        ));
    }
    let turn_phase = std::fs::read(&paths.turnstate)
        .ok()
        .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
        .and_then(|v| v.get("phase").and_then(Value::as_str).map(str::to_string));

    let agent = record
        .as_ref()
        .map(|r| match &r.model {
            Some(m) => format!("{}:{m}", r.agent),
            None => r.agent.clone(),
        })
        .or_else(|| park.as_ref().map(|p| p.agent.clone()))
        .or_else(|| boot_agent(&paths.ledger))
        .unwrap_or_else(|| persona.to_string());
    let seat_arg = if persona.contains(':') {
        session.clone()
    } else {
        persona.to_string()
    };
    let restart = format!("trantor down {seat_arg} && trantor up {agent}");

    let (verdict, summary, advice): (Verdict, String, Vec<String>) = if let Some(pk) = &park {
        let when = if pk.until == park::NEVER {
            "no reset time known".to_string()
        } else {
            format!("resets {}", park::fmt_time(pk.until))
        };
        match pk.reason.as_str() {
            "exhausted" => (
                Verdict::DeadQuota,
                format!("the {} quota is exhausted ({when})", pk.agent),
                vec![
                    format!(
                        "wait for the reset, or move the work to another agent: trantor up <other-agent> && trantor down {seat_arg}"
                    ),
                    "its held messages are delivered when it resumes".into(),
                ],
            ),
            "auth" | "provider-rejected" => (
                Verdict::DeadAuth,
                format!("{} refused the seat's credentials", pk.agent),
                vec![format!(
                    "sign the CLI in again (run `{}` by hand and log in), then: {restart}",
                    pk.agent
                )],
            ),
            other => (
                Verdict::Parked,
                format!("redelivery stopped after failures ({other})"),
                if pk.bounded {
                    vec![format!(
                        "a direct message ends the park now: trantor send {session} \"resume\""
                    )]
                } else {
                    vec![format!("restart it: {restart}")]
                },
            ),
        }
    } else if pid.is_some() {
        let online = peer.as_ref().is_some_and(|p| p.online);
        let phase = peer
            .as_ref()
            .and_then(|p| p.phase.clone())
            .filter(|p| !p.is_empty())
            .or(turn_phase.clone())
            .unwrap_or_else(|| "running".into());
        if online {
            let mut advice = vec![format!("send it work: trantor send {session} \"…\"")];
            if last_failed {
                advice.push(format!(
                    "its last turn failed (see the ledger and err file above); if it keeps failing: {restart}"
                ));
            }
            (Verdict::Live, format!("{phase} on the bus"), advice)
        } else {
            (
                Verdict::Live,
                format!("the runner is running ({phase}) but the hub does not see it online"),
                vec![format!(
                    "check that the seat's hub is {} (trantor doctor), or look at its log",
                    hub.base()
                )],
            )
        }
    } else if stopped.is_none() && (record.is_some() || turn_phase.as_deref() == Some("working")) {
        let log = record.as_ref().map(|r| r.log.clone());
        if let Some(l) = &log {
            let t = seats::tail(l, 6);
            if !t.is_empty() {
                evidence.push(format!("log {}: {}", l.display(), t.join(" ⏎ ")));
            }
        }
        (
            Verdict::Crashed,
            "its runner is gone without `trantor down`".into(),
            vec![
                match &log {
                    Some(l) => format!("read the log: {}", l.display()),
                    None => "read the runner's output".into(),
                },
                format!("start it again: trantor up {agent}"),
            ],
        )
    } else if stopped.is_some() || paths.ledger.exists() || peer.is_some() {
        (
            Verdict::NoRunner,
            "no runner for it is running on this machine".into(),
            vec![format!("start it: trantor up {agent}")],
        )
    } else {
        (
            Verdict::NeverStarted,
            format!("no trace of {session} here or on the hub"),
            vec![
                format!("start it: trantor up {agent}"),
                "check the set-up first: trantor doctor".into(),
            ],
        )
    };
    Diagnosis {
        session,
        verdict,
        summary,
        evidence,
        advice,
    }
}

pub(crate) async fn seat_why(a: SeatWhyArgs) -> anyhow::Result<ExitCode> {
    let (id, hub) = a.common.connect();
    let (persona, project) = seats::parse_seat(&a.seat, &id.project);
    if persona.is_empty() {
        return Err(usage(
            "name a seat: a persona like claude, or persona:project",
        ));
    }
    let d = diagnose(&persona, &project, &hub).await;
    if a.common.json {
        print_json(&d.json())?;
    } else {
        d.print();
    }
    Ok(ExitCode::from(if d.verdict == Verdict::Live {
        0
    } else {
        1
    }))
}

/// One requested seat.
struct Spec {
    persona: String,
    agent: String,
    model: Option<String>,
    /// Extra runner variables (the duty seat's `RUNNER_DUTY_NUDGES=1`).
    env: Vec<(String, String)>,
}

fn parse_specs(args: &[String]) -> anyhow::Result<Vec<Spec>> {
    let mut out: Vec<Spec> = Vec::new();
    for a in args {
        let (agent, model) = match a.split_once(':') {
            Some((ag, m)) => (
                ag.trim(),
                Some(m.trim().to_string()).filter(|m| !m.is_empty()),
            ),
            None => (a.trim(), None),
        };
        if agent.is_empty()
            || !agent
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        {
            return Err(usage(format!(
                "'{a}' is not an agent: use a CLI name like claude, codex or kimi, optionally with :model"
            )));
        }
        let mut persona = agent.to_string();
        let mut n = 1;
        while out.iter().any(|s| s.persona == persona) {
            n += 1;
            persona = format!("{agent}-{n}");
        }
        out.push(Spec {
            persona,
            agent: agent.to_string(),
            model,
            env: Vec::new(),
        });
    }
    Ok(out)
}

/// The variables a seat needs from this shell. Passed explicitly because a tmux window gets the
/// tmux server's environment, not ours.
fn forwarded_env() -> Vec<(String, String)> {
    std::env::vars()
        .filter(|(k, _)| {
            ["RELAY_", "CREW_", "TRANTOR_", "AGENT_BUS_", "FAKE_AGENT_"]
                .iter()
                .any(|p| k.starts_with(p))
                || matches!(k.as_str(), "HOME" | "PATH" | "USER" | "LANG")
        })
        .collect()
}

fn seat_env(spec: &Spec, url: &str, project: &str) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = forwarded_env()
        .into_iter()
        .filter(|(k, _)| {
            !matches!(
                k.as_str(),
                "CREW_PERSONA"
                    | "CREW_MODEL"
                    | "RELAY_SESSION"
                    | "RUNNER_SESSION"
                    | "CREW_AGENT"
                    | "TMUX"
            )
        })
        .collect();
    env.retain(|(k, _)| k != "RELAY_URL" && k != "RELAY_PROJECT");
    env.push(("RELAY_URL".into(), url.into()));
    env.push(("RELAY_PROJECT".into(), project.into()));
    if spec.persona != spec.agent {
        env.push(("CREW_PERSONA".into(), spec.persona.clone()));
    }
    if let Some(m) = &spec.model {
        env.push(("CREW_MODEL".into(), m.clone()));
    }
    env.extend(spec.env.iter().cloned());
    env
}

fn launch(
    spec: &Spec,
    url: &str,
    project: &str,
    dir: &std::path::Path,
    use_tmux: bool,
) -> Result<SeatRecord, String> {
    use std::os::unix::process::CommandExt;
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this binary: {e}"))?;
    let log = seats::log_path(&spec.persona, project);
    if let Some(d) = log.parent() {
        std::fs::create_dir_all(d).map_err(|e| format!("cannot create {}: {e}", d.display()))?;
    }
    // One log per start (the previous one kept as .1), so a crash's tail is this start's.
    if log.exists() {
        let _ = std::fs::rename(&log, log.with_extension("log.1"));
    }
    let env = seat_env(spec, url, project);
    let mut rec = SeatRecord {
        persona: spec.persona.clone(),
        agent: spec.agent.clone(),
        model: spec.model.clone(),
        project: project.to_string(),
        session: format!("{}:{project}", spec.persona),
        dir: dir.to_path_buf(),
        log: log.clone(),
        pid: None,
        tmux: None,
        started: now_ms(),
        hub: url.to_string(),
        stopped: None,
    };
    if use_tmux {
        let session = seats::tmux_session(project);
        let window = trantor_runner::paths::safe(&spec.persona);
        let target = format!("{session}:{window}");
        if seats::tmux_has(&target) {
            // A window left from a crashed seat: replace it.
            let _ = seats::tmux(&["kill-window", "-t", &format!("={target}")]);
        }
        let vars: Vec<String> = env
            .iter()
            .map(|(k, v)| format!("{k}={}", seats::shell_quote(v)))
            .collect();
        // The pipe keeps a copy of everything the pane shows in the log, so `seat-why` can
        // quote a runner that died before anyone looked at the window.
        let cmd = format!(
            "env {} {} runner {} {} 2>&1 | tee -a {}",
            vars.join(" "),
            seats::shell_quote(&exe.to_string_lossy()),
            seats::shell_quote(&spec.agent),
            seats::shell_quote(&dir.to_string_lossy()),
            seats::shell_quote(&log.to_string_lossy())
        );
        let dir_s = dir.to_string_lossy().to_string();
        // Open the window on an idle shell, keep it after its process exits, then swap the
        // runner in: a runner that dies at once leaves its last words on screen (and does not
        // take the whole tmux session, and the next seat's window, down with it).
        let opened = if seats::tmux_has(&session) {
            seats::tmux(&[
                "new-window",
                "-d",
                "-t",
                &format!("={session}:"),
                "-n",
                &window,
                "-c",
                &dir_s,
            ])
        } else {
            seats::tmux(&[
                "new-session",
                "-d",
                "-s",
                &session,
                "-n",
                &window,
                "-c",
                &dir_s,
                "-x",
                "200",
                "-y",
                "50",
            ])
        };
        let exact = format!("={session}:{window}");
        opened
            .and_then(|_| seats::tmux(&["set-option", "-w", "-t", &exact, "remain-on-exit", "on"]))
            .and_then(|_| seats::tmux(&["respawn-window", "-k", "-t", &exact, "-c", &dir_s, &cmd]))
            .map_err(|e| format!("tmux refused to open {target}: {e}"))?;
        rec.tmux = Some(target);
    } else {
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .map_err(|e| format!("cannot open {}: {e}", log.display()))?;
        let err = out
            .try_clone()
            .map_err(|e| format!("cannot open {}: {e}", log.display()))?;
        let mut cmd = std::process::Command::new(&exe);
        cmd.arg("runner")
            .arg(&spec.agent)
            .arg(dir)
            .current_dir(dir)
            .env_remove("CREW_PERSONA")
            .env_remove("CREW_MODEL")
            .env_remove("RELAY_SESSION")
            .env_remove("RUNNER_SESSION")
            .env_remove("CREW_AGENT")
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            // Its own process group: the seat outlives this command and a Ctrl-C here.
            .process_group(0);
        for (k, v) in &env {
            cmd.env(k, v);
        }
        let child = cmd
            .spawn()
            .map_err(|e| format!("cannot start the runner: {e}"))?;
        rec.pid = Some(child.id());
        // The child is deliberately not waited on: it is a daemon now. Reaping happens when
        // this short-lived command exits and init adopts it.
        drop(child);
    }
    seats::save_record(&rec).map_err(|e| format!("cannot save the seat record: {e}"))?;
    Ok(rec)
}

/// Make sure a hub answers at `hub`; start one when it is local and silent.
async fn ensure_hub(hub: &HubClient, json: bool) -> anyhow::Result<()> {
    if hub.health().await.is_ok() {
        if !json {
            say!("hub {} answers", hub.base());
        }
        return Ok(());
    }
    if seats::local_port(hub.base()).is_none() {
        return Err(super::VerbError::Hub {
            message: format!(
                "no hub answers at {}, and it is not on this machine, so `trantor up` cannot start \
                 it: start the hub there, or point RELAY_URL / --url at one that runs",
                hub.base()
            ),
            unreachable: true,
        }
        .into());
    }
    let log = seats::bus_dir().join("logs").join("hub.log");
    let pid = seats::spawn_hub(hub.base(), &log, &[]).map_err(|e| super::VerbError::Hub {
        message: e,
        unreachable: true,
    })?;
    if !json {
        say!(
            "no hub answered at {}: started one (pid {pid}, log {})",
            hub.base(),
            log.display()
        );
    }
    if !seats::wait_for_hub(hub, Duration::from_secs(20)).await {
        let t = seats::tail(&log, 5).join("\n  ");
        return Err(super::VerbError::Hub {
            message: format!(
                "the hub started at {} did not answer; its log says:\n  {t}",
                hub.base()
            ),
            unreachable: true,
        }
        .into());
    }
    let _ = seats::save_hub_record(&seats::HubRecord {
        pid,
        url: hub.base().to_string(),
        log,
        started: now_ms(),
    });
    Ok(())
}

pub(crate) async fn up(a: UpArgs) -> anyhow::Result<ExitCode> {
    let (id, hub) = a.common.connect();
    let json_out = a.common.json;
    let mut specs = parse_specs(&a.seats)?;
    if let Some((persona, env)) = &a.seat_override {
        for s in &mut specs {
            s.persona = persona.clone();
            s.env = env.clone();
        }
    }
    let dir = match a.dir {
        Some(d) => d,
        None => std::env::current_dir()?,
    };
    let dir = std::fs::canonicalize(&dir).map_err(|e| usage(format!("{}: {e}", dir.display())))?;
    // The seats' project follows the directory they work in, not the shell's.
    let mut id = id;
    if a.common.project.is_none() {
        id.project = trantor_mcp::identity::project_for(&dir);
    }
    ensure_hub(&hub, json_out).await?;
    let use_tmux = seats::use_tmux(a.no_tmux);
    if !json_out {
        if use_tmux {
            say!(
                "starting {} seat(s) for {} in tmux session {} (attach: tmux attach -t {})",
                specs.len(),
                id.project,
                seats::tmux_session(&id.project),
                seats::tmux_session(&id.project)
            );
        } else {
            say!(
                "starting {} seat(s) for {} as background processes (logs under {})",
                specs.len(),
                id.project,
                seats::bus_dir().join("logs").display()
            );
        }
    }

    let mut results: Vec<Value> = Vec::new();
    let mut pending: Vec<SeatRecord> = Vec::new();
    for spec in &specs {
        let session = format!("{}:{}", spec.persona, id.project);
        if let Some(pid) = seats::runner_pid(&spec.persona, &id.project) {
            if !json_out {
                say!("  {session:<24} already running (pid {pid})");
            }
            results.push(json!({"session": session, "state": "already-running", "pid": pid}));
            continue;
        }
        match launch(spec, hub.base(), &id.project, &dir, use_tmux) {
            Ok(rec) => {
                if !json_out {
                    let place = rec
                        .tmux
                        .as_ref()
                        .map(|t| format!("tmux window {t}"))
                        .or_else(|| rec.pid.map(|p| format!("pid {p}")))
                        .unwrap_or_default();
                    say!(
                        "  {session:<24} starting ({place}, log {})",
                        rec.log.display()
                    );
                }
                pending.push(rec);
            }
            Err(e) => {
                if !json_out {
                    say!("  {session:<24} ✗ could not start: {e}");
                }
                results.push(json!({"session": session, "state": "failed", "detail": e}));
            }
        }
    }

    // Wait for each seat to appear live on the hub; a runner that dies meanwhile is a no-show
    // at once rather than at the deadline.
    let started = Instant::now();
    let deadline = started + Duration::from_secs(a.wait.max(1));
    let tty = std::io::stdout().is_terminal() && !json_out;
    let mut failed = results.iter().filter(|r| r["state"] == "failed").count();
    while !pending.is_empty() {
        let peers = hub.peers().await.map(|r| r.peers).unwrap_or_default();
        let mut still = Vec::new();
        for rec in pending.drain(..) {
            let live = peers.iter().find(|p| {
                // Seen since this launch, and not the "down" mark `trantor down` leaves.
                p.session == rec.session
                    && p.online
                    && p.last_seen >= rec.started
                    && !p.status.starts_with("down")
            });
            let alive = match rec.pid {
                Some(pid) => seats::process_alive(pid, "runner"),
                None => rec.tmux.as_deref().is_none_or(seats::tmux_pane_alive),
            };
            if let Some(p) = live {
                let secs = started.elapsed().as_secs_f32();
                if tty {
                    print!("\r\x1b[K");
                }
                if !json_out {
                    say!(
                        "  {:<24} ✓ live after {secs:.1}s{}",
                        rec.session,
                        if p.status.is_empty() {
                            String::new()
                        } else {
                            format!(" ({})", p.status)
                        }
                    );
                }
                results.push(json!({"session": rec.session, "state": "live", "seconds": secs}));
            } else if !alive || Instant::now() >= deadline {
                let d = diagnose(&rec.persona, &rec.project, &hub).await;
                if tty {
                    print!("\r\x1b[K");
                }
                if !json_out {
                    say!(
                        "  {:<24} ✗ no-show{}: {} — {}",
                        rec.session,
                        if alive {
                            format!(" after {}s", a.wait)
                        } else {
                            String::new()
                        },
                        d.verdict.word(),
                        d.summary
                    );
                    for e in &d.evidence {
                        say!("  {:<24}   evidence: {e}", "");
                    }
                    for adv in &d.advice {
                        say!("  {:<24}   advice:   {adv}", "");
                    }
                }
                failed += 1;
                results.push(json!({"session": rec.session, "state": "no-show", "why": d.json()}));
            } else {
                still.push(rec);
            }
        }
        pending = still;
        if !pending.is_empty() {
            if tty {
                let names: Vec<&str> = pending.iter().map(|r| r.session.as_str()).collect();
                print!(
                    "\r\x1b[K  waiting for {} … {}s",
                    names.join(", "),
                    started.elapsed().as_secs()
                );
                let _ = std::io::stdout().flush();
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    let live = results
        .iter()
        .filter(|r| r["state"] == "live" || r["state"] == "already-running")
        .count();
    if json_out {
        print_json(
            &json!({"project": id.project, "hub": hub.base(), "tmux": use_tmux, "seats": results}),
        )?;
    } else {
        say!("{live} of {} seat(s) up for {}", results.len(), id.project);
    }
    Ok(ExitCode::from(if failed > 0 { 1 } else { 0 }))
}

pub(crate) async fn down(a: DownArgs) -> anyhow::Result<ExitCode> {
    let (id, hub) = a.common.connect();
    let hub = hub.with_timeout(Duration::from_secs(2));
    let targets: Vec<(String, String)> = if !a.seats.is_empty() {
        a.seats
            .iter()
            .map(|s| seats::parse_seat(s, &id.project))
            .collect()
    } else {
        seats::all_records()
            .into_iter()
            .filter(|r| r.stopped.is_none() && (a.all || r.project == id.project))
            .map(|r| (r.persona, r.project))
            .collect()
    };
    let mut report = Vec::new();
    for (persona, project) in &targets {
        let session = format!("{persona}:{project}");
        let rec = seats::load_record(persona, project).filter(|r| r.stopped.is_none());
        let pid = seats::runner_pid(persona, project);
        let mut done = Vec::new();
        if let Some(p) = pid {
            let gone = tokio::task::spawn_blocking(move || {
                seats::stop_process(p, Duration::from_secs(15))
            })
            .await
            .unwrap_or(false);
            done.push(if gone {
                format!("runner pid {p} stopped")
            } else {
                format!("runner pid {p} did not stop")
            });
        }
        if let Some(t) = rec.as_ref().and_then(|r| r.tmux.clone())
            && seats::tmux_has(&t)
        {
            let _ = seats::tmux(&["kill-window", "-t", &format!("={t}")]);
            done.push(format!("tmux window {t} closed"));
        }
        let state = if rec.is_none() && pid.is_none() {
            "not-running"
        } else {
            // Say so on the bus too, so peers and the board read the seat as down at once
            // instead of after the presence window.
            let _ = hub
                .register(&RegisterRequest {
                    session: session.clone(),
                    project: Some(project.clone()),
                    status: Some("down: stopped by trantor down".into()),
                    ..Default::default()
                })
                .await;
            seats::mark_stopped(persona, project);
            "stopped"
        };
        if !a.common.json {
            if state == "stopped" {
                say!(
                    "{session:<24} stopped{}",
                    if done.is_empty() {
                        String::new()
                    } else {
                        format!(" ({})", done.join(", "))
                    }
                );
            } else {
                say!("{session:<24} was not running");
            }
        }
        report.push(json!({"session": session, "state": state, "detail": done}));
    }
    if targets.is_empty() && !a.common.json {
        say!(
            "no seats recorded for {} (trantor up records the seats it starts)",
            if a.all {
                "any project"
            } else {
                id.project.as_str()
            }
        );
    }
    let mut hub_state = Value::Null;
    if a.hub {
        hub_state = match seats::load_hub_record() {
            Some(h) if seats::process_alive(h.pid, "hub") => {
                let pid = h.pid;
                let gone = tokio::task::spawn_blocking(move || {
                    seats::stop_process(pid, Duration::from_secs(10))
                })
                .await
                .unwrap_or(false);
                seats::remove_hub_record();
                if !a.common.json {
                    say!(
                        "hub {} (pid {pid}) {}",
                        h.url,
                        if gone { "stopped" } else { "did not stop" }
                    );
                }
                json!({"url": h.url, "pid": pid, "stopped": gone})
            }
            _ => {
                seats::remove_hub_record();
                if !a.common.json {
                    say!("no hub started by trantor up is running");
                }
                json!({"stopped": false})
            }
        };
    }
    if a.common.json {
        print_json(&json!({"seats": report, "hub": hub_state}))?;
    }
    Ok(ExitCode::SUCCESS)
}

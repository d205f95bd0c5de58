//! `trantor up`: start seats for a project (and a local hub when none answers).

use super::seat_why::diagnose;
use super::seats::{self, SeatRecord};
use super::{Common, print_json, usage};
use serde_json::{Value, json};
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::{ExitCode, Stdio};
use std::time::{Duration, Instant};
use trantor_proto::{HubClient, now_ms};

pub(crate) const UP_HELP: &str = concat!(
    "\
Each argument is an agent CLI, optionally with a model: claude, codex:gpt-5, kimi, opencode,
gemini, dsh, or `command` (any CLI, given as a template in CREW_COMMAND). A second seat of the
same agent gets the persona <agent>-2.

Seats run `trantor runner <agent> <dir>` for this project: in tmux when it is installed (session
trantor-<project>, one window per seat; output also in the log), otherwise as background
processes with logs under <bus dir>/logs/runner-<persona>-<project>.log. If no hub answers at
the hub URL and it is local, one is started first (log: <bus dir>/logs/hub.log). A seat gets
this shell's environment (its CLI needs the same login, API keys and base URLs), less what is
per seat (RELAY_SESSION, RELAY_AGENT, CREW_PERSONA, TRANTOR_SEAT, …), in tmux and in the
background alike. A seat is live when the hub sees its runner polling AND its kickoff turn
finished (the runner's ledger): within --wait seconds. A seat whose CLI cannot run a turn (not
logged in, a missing CLI, credentials refused) is named with the reason at once; one that does
not come up is named with the reason `trantor seat-why` finds, and so is a seat already running
whose latest turn failed. Exits 1 when any seat is not live.

Examples:
  trantor up claude                     one Claude Code seat for the current project
  trantor up claude codex:gpt-5 kimi    three seats, codex on gpt-5
  CREW_COMMAND='my-agent --prompt-file {P}' trantor up command
  trantor up claude --no-tmux --wait 90
  trantor up claude --credential work   a seat on a named credential (trantor credentials add)
  trantor up claude --pool work,alt     a seat on a pool: each turn takes the first with quota

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
    /// Run the seats on this named credential (`trantor credentials add`): its variables go in
    /// their CLIs' environment and its name on their turns' cost.
    #[arg(long, value_name = "NAME")]
    pub credential: Option<String>,
    /// Run the seats on a pool of named credentials, comma-separated: before each turn a seat
    /// takes the first with quota (docs/runner.md §12.5).
    #[arg(long, value_name = "A,B", conflicts_with = "credential")]
    pub pool: Option<String>,
    #[command(flatten)]
    pub common: Common,
    /// Set by `trantor duty up`: the persona of the (single) seat and extra runner variables.
    #[arg(skip)]
    pub seat_override: Option<(String, Vec<(String, String)>)>,
}

/// One requested seat.
pub(crate) struct Spec {
    pub persona: String,
    pub agent: String,
    pub model: Option<String>,
    /// Extra variables for this seat's runner (a swap's staging variables).
    pub env: Vec<(String, String)>,
}

pub(crate) fn parse_specs(args: &[String]) -> anyhow::Result<Vec<Spec>> {
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

/// Variables that are per seat, never inherited from the person's shell: who the seat is (the
/// runner derives them for each seat) and what marks a process as being inside one.
const PER_SEAT: [&str; 17] = [
    "RELAY_SESSION",
    "CREW_CREDENTIAL",
    "CREW_POOL",
    "RELAY_AGENT",
    "RUNNER_SESSION",
    "CREW_PERSONA",
    "CREW_MODEL",
    "CREW_AGENT",
    "CREW_RELEASE_STATE",
    "TRANTOR_SEAT",
    "TRANTOR_PERSONA",
    "TRANTOR_TURN",
    "TRANTOR_TURN_FRESH",
    "TRANTOR_SESSION_ID",
    "TRANTOR_PROMPT_FILE",
    "TMUX",
    "TMUX_PANE",
];

/// Whether `k` can be passed through a shell (`export K=...`).
fn is_env_name(k: &str) -> bool {
    let mut c = k.chars();
    c.next()
        .is_some_and(|f| f.is_ascii_alphabetic() || f == '_')
        && c.all(|x| x.is_ascii_alphanumeric() || x == '_')
}

/// The environment a seat gets: the person's own (its CLI needs the same login, API keys, base
/// URLs and proxies the person's would), less what must be per seat ([`PER_SEAT`]). Passed
/// explicitly to tmux, whose windows get the tmux server's environment, not ours.
fn forwarded_env() -> Vec<(String, String)> {
    std::env::vars()
        .filter(|(k, _)| is_env_name(k) && !PER_SEAT.contains(&k.as_str()))
        .collect()
}

fn seat_env(spec: &Spec, url: &str, project: &str) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = forwarded_env();
    env.retain(|(k, _)| k != "RELAY_URL" && k != "RELAY_PROJECT");
    env.push(("RELAY_URL".into(), url.into()));
    env.push(("RELAY_PROJECT".into(), project.into()));
    if spec.persona != spec.agent {
        env.push(("CREW_PERSONA".into(), spec.persona.clone()));
    }
    if let Some(m) = &spec.model {
        env.push(("CREW_MODEL".into(), m.clone()));
    }
    env.retain(|(k, _)| !spec.env.iter().any(|(x, _)| x == k));
    env.extend(spec.env.iter().cloned());
    env
}

/// A shell script that makes the environment exactly `env` (on top of the tmux server's, whose
/// per-seat variables are removed first), then deletes itself: the seat's secrets do not stay on
/// disk, nor on a command line anyone can read in `ps`.
fn env_script(env: &[(String, String)], path: &std::path::Path) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut body = String::new();
    for k in PER_SEAT {
        body.push_str(&format!("unset {k}\n"));
    }
    for (k, v) in env {
        body.push_str(&format!("export {k}={}\n", seats::shell_quote(v)));
    }
    body.push_str(&format!(
        "rm -f {}\n",
        seats::shell_quote(&path.to_string_lossy())
    ));
    let _ = std::fs::remove_file(path);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(body.as_bytes())
}

pub(crate) fn launch(
    spec: &Spec,
    url: &str,
    project: &str,
    dir: &std::path::Path,
    use_tmux: bool,
) -> Result<SeatRecord, String> {
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
        rec.tmux = Some(launch_in_tmux(spec, project, dir, &exe, &log, &env)?);
    } else {
        rec.pid = Some(launch_in_background(spec, dir, &exe, &log, &env)?);
    }
    seats::save_record(&rec).map_err(|e| format!("cannot save the seat record: {e}"))?;
    Ok(rec)
}

/// Start the seat's runner in a window of the project's tmux session; returns the window.
fn launch_in_tmux(
    spec: &Spec,
    project: &str,
    dir: &std::path::Path,
    exe: &std::path::Path,
    log: &std::path::Path,
    env: &[(String, String)],
) -> Result<String, String> {
    let session = seats::tmux_session(project);
    let window = trantor_runner::paths::safe(&spec.persona);
    let target = format!("{session}:{window}");
    if seats::tmux_has(&target) {
        // A window left from a crashed seat: replace it.
        let _ = seats::tmux(&["kill-window", "-t", &format!("={target}")]);
    }
    let script = log.with_extension("env.sh");
    env_script(env, &script).map_err(|e| format!("cannot write {}: {e}", script.display()))?;
    // The pipe keeps a copy of everything the pane shows in the log, so `seat-why` can
    // quote a runner that died before anyone looked at the window.
    let inner = format!(
        ". {} && {} runner {} {} 2>&1 | tee -a {}",
        seats::shell_quote(&script.to_string_lossy()),
        seats::shell_quote(&exe.to_string_lossy()),
        seats::shell_quote(&spec.agent),
        seats::shell_quote(&dir.to_string_lossy()),
        seats::shell_quote(&log.to_string_lossy())
    );
    // Through sh whatever the person's login shell is (tmux runs the command with it).
    let cmd = format!("sh -c {}", seats::shell_quote(&inner));
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
    Ok(target)
}

/// Start the seat's runner as a background process writing to its log; returns its pid.
fn launch_in_background(
    spec: &Spec,
    dir: &std::path::Path,
    exe: &std::path::Path,
    log: &std::path::Path,
    env: &[(String, String)],
) -> Result<u32, String> {
    use std::os::unix::process::CommandExt;
    let (out, err) = seats::log_handles(log)?;
    let mut cmd = std::process::Command::new(exe);
    cmd.arg("runner")
        .arg(&spec.agent)
        .arg(dir)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        // Its own process group: the seat outlives this command and a Ctrl-C here.
        .process_group(0);
    for k in PER_SEAT {
        cmd.env_remove(k);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let child = cmd
        .spawn()
        .map_err(|e| format!("cannot start the runner: {e}"))?;
    let pid = child.id();
    // The child is deliberately not waited on: it is a daemon now. Reaping happens when
    // this short-lived command exits and init adopts it.
    drop(child);
    Ok(pid)
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
    let (id, hub) = a.common.connect()?;
    let json_out = a.common.json;
    let mut specs = parse_specs(&a.seats)?;
    if let Some((persona, env)) = &a.seat_override {
        for s in &mut specs {
            s.persona = persona.clone();
            s.env = env.clone();
        }
    }
    attach_credentials(&a, &mut specs)?;
    let dir = match a.dir {
        Some(d) => d,
        None => std::env::current_dir()?,
    };
    let dir = std::fs::canonicalize(&dir).map_err(|e| usage(format!("{}: {e}", dir.display())))?;
    // The seats' project follows the directory they work in, not the shell's.
    let mut id = id;
    if a.common.project.is_none() {
        id.project =
            trantor_proto::identity::project_for(&trantor_proto::identity::ProcessEnv, &dir);
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

    let (mut results, pending) =
        launch_all(&specs, &hub, &id.project, &dir, use_tmux, json_out).await;
    let mut failed = results
        .iter()
        .filter(|r| r["state"] == "failed" || r["state"] == "cannot-work")
        .count();
    failed += wait_live(&hub, pending, a.wait, json_out, &mut results).await;
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

/// Check `--credential` / `--pool` against the credential file (each named, for the seats'
/// agent) and put the choice in each seat's runner variables.
fn attach_credentials(a: &UpArgs, specs: &mut [Spec]) -> anyhow::Result<()> {
    let pool: Vec<String> = a
        .pool
        .as_deref()
        .unwrap_or("")
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(String::from)
        .collect();
    if a.pool.is_some() && pool.is_empty() {
        return Err(usage("--pool: name at least one credential (a,b)"));
    }
    let names: Vec<String> = a.credential.iter().cloned().chain(pool.clone()).collect();
    if names.is_empty() {
        return Ok(());
    }
    let bus = trantor_proto::identity::bus_dir(&trantor_proto::identity::ProcessEnv);
    let file = trantor_proto::credentials::CredentialFile::load(&bus)?;
    for name in &names {
        let Some(c) = file.credentials.get(name) else {
            return Err(usage(format!(
                "no credential {name} in {} (trantor credentials add {name} --agent … --env KEY=VALUE)",
                trantor_proto::credentials::CredentialFile::path(&bus).display()
            )));
        };
        if let Some(s) = specs.iter().find(|s| s.agent != c.agent) {
            return Err(usage(format!(
                "credential {name} is for {}, not {}",
                c.agent, s.agent
            )));
        }
    }
    for s in specs {
        match &a.credential {
            Some(name) => s.env.push(("CREW_CREDENTIAL".into(), name.clone())),
            None => s.env.push(("CREW_POOL".into(), pool.join(","))),
        }
    }
    Ok(())
}

/// Launch every seat not already running: the result lines of those that did not start (or
/// were running, with a running seat whose latest turn failed as `cannot-work`), and the
/// records of those started.
async fn launch_all(
    specs: &[Spec],
    hub: &HubClient,
    project: &str,
    dir: &std::path::Path,
    use_tmux: bool,
    json_out: bool,
) -> (Vec<Value>, Vec<SeatRecord>) {
    let mut results: Vec<Value> = Vec::new();
    let mut pending: Vec<SeatRecord> = Vec::new();
    for spec in specs {
        let session = format!("{}:{}", spec.persona, project);
        if let Some(pid) = seats::runner_pid(&spec.persona, project) {
            // Running is not live: a seat whose latest turn failed (a missing CLI, a login
            // refused) is named with its reason, as at its first start.
            let ledger = seats::runner_paths(&spec.persona, project).ledger;
            let failing = super::seat_why::turns_since_boot(&ledger, 0)
                .and_then(|turns| turns.last().cloned())
                .filter(super::seat_why::turn_failed);
            match failing {
                Some(turn) => {
                    let reason = super::seat_why::turn_reason(&turn);
                    let d = diagnose(&spec.persona, project, hub).await;
                    if !json_out {
                        say!(
                            "  {session:<24} ✗ already running (pid {pid}), but its last turn failed: {reason}"
                        );
                        say_diagnosis(&d);
                    }
                    results.push(json!({"session": session, "state": "cannot-work",
                        "pid": pid, "reason": reason, "why": d.json()}));
                }
                None => {
                    if !json_out {
                        say!("  {session:<24} already running (pid {pid})");
                    }
                    results
                        .push(json!({"session": session, "state": "already-running", "pid": pid}));
                }
            }
            continue;
        }
        match launch(spec, hub.base(), project, dir, use_tmux) {
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
    (results, pending)
}

/// Where a launched seat stands on one look.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Arrival {
    /// Its kickoff turn ran and failed.
    CannotWork,
    /// Online on the hub since this launch, and its kickoff turn ran.
    Live,
    /// Its runner died, or the deadline passed.
    NoShow,
    /// Look again.
    Waiting,
}

/// Decide a seat's arrival: `online` (seen since launch, not marked down), `alive` (its
/// process or pane), `kicked` (its kickoff turn finished), `cannot` (that turn failed), `late`
/// (the deadline passed).
fn arrival(online: bool, alive: bool, kicked: bool, cannot: bool, late: bool) -> Arrival {
    if cannot {
        Arrival::CannotWork
    } else if online && kicked {
        Arrival::Live
    } else if !alive || late {
        Arrival::NoShow
    } else {
        Arrival::Waiting
    }
}

/// A diagnosis's evidence and advice, indented under the seat's line.
fn say_diagnosis(d: &super::seat_why::Diagnosis) {
    for e in &d.evidence {
        say!("  {:<24}   evidence: {e}", "");
    }
    for adv in &d.advice {
        say!("  {:<24}   advice:   {adv}", "");
    }
}

/// Wait for each seat to appear live on the hub; a runner that dies meanwhile is a no-show at
/// once rather than at the deadline. Pushes one result per seat; returns how many failed.
async fn wait_live(
    hub: &HubClient,
    mut pending: Vec<SeatRecord>,
    wait: u64,
    json_out: bool,
    results: &mut Vec<Value>,
) -> usize {
    let started = Instant::now();
    let deadline = started + Duration::from_secs(wait.max(1));
    let tty = std::io::stdout().is_terminal() && !json_out;
    let mut failed = 0;
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
            // Live means the runner polls AND its kickoff turn ran: the runner's own ledger
            // says how the first turn since this launch ended.
            let ledger = seats::runner_paths(&rec.persona, &rec.project).ledger;
            let turns = super::seat_why::turns_since_boot(&ledger, rec.started).unwrap_or_default();
            let kicked = turns.first();
            let cannot = kicked.is_some_and(super::seat_why::turn_failed);
            let state = arrival(
                live.is_some(),
                alive,
                kicked.is_some(),
                cannot,
                Instant::now() >= deadline,
            );
            if state != Arrival::Waiting && tty {
                print!("\r\x1b[K");
            }
            match state {
                Arrival::CannotWork => {
                    let d = diagnose(&rec.persona, &rec.project, hub).await;
                    let reason = kicked.map(super::seat_why::turn_reason).unwrap_or_default();
                    if !json_out {
                        say!("  {:<24} ✗ cannot run a turn: {reason}", rec.session);
                        say_diagnosis(&d);
                    }
                    failed += 1;
                    results.push(json!({"session": rec.session, "state": "cannot-work",
                        "reason": reason, "why": d.json()}));
                }
                Arrival::Live => {
                    let secs = started.elapsed().as_secs_f32();
                    let status = live.map(|p| p.status.as_str()).unwrap_or("");
                    if !json_out {
                        say!(
                            "  {:<24} ✓ live after {secs:.1}s{}",
                            rec.session,
                            if status.is_empty() {
                                String::new()
                            } else {
                                format!(" ({status})")
                            }
                        );
                    }
                    results.push(json!({"session": rec.session, "state": "live", "seconds": secs}));
                }
                Arrival::NoShow => {
                    let d = diagnose(&rec.persona, &rec.project, hub).await;
                    if !json_out {
                        say_no_show(&rec, &d, alive, kicked.is_none(), wait);
                    }
                    failed += 1;
                    results
                        .push(json!({"session": rec.session, "state": "no-show", "why": d.json()}));
                }
                Arrival::Waiting => still.push(rec),
            }
        }
        pending = still;
        if !pending.is_empty() {
            if tty {
                let names: Vec<&str> = pending.iter().map(|r| r.session.as_str()).collect();
                print!(
                    "\r\x1b[K  waiting for {} … {}s",
                    trantor_proto::text::sanitize(&names.join(", ")),
                    started.elapsed().as_secs()
                );
                let _ = std::io::stdout().flush();
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    failed
}

/// A no-show, for a person: why, from its diagnosis.
fn say_no_show(
    rec: &SeatRecord,
    d: &super::seat_why::Diagnosis,
    alive: bool,
    unkicked: bool,
    wait: u64,
) {
    if alive && unkicked {
        say!(
            "  {:<24} ✗ its kickoff turn has not finished after {}s (`trantor seat-why {}` tells more later)",
            rec.session,
            wait,
            rec.persona
        );
    }
    say!(
        "  {:<24} ✗ no-show{}: {} — {}",
        rec.session,
        if alive {
            format!(" after {wait}s")
        } else {
            String::new()
        },
        d.verdict.word(),
        d.summary
    );
    say_diagnosis(d);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrival_table() {
        use Arrival::*;
        // (online, alive, kicked, cannot, late) → arrival
        let cases = [
            ((true, true, true, true, false), CannotWork),
            ((false, false, true, true, true), CannotWork),
            ((true, true, true, false, false), Live),
            ((true, true, true, false, true), Live),
            ((true, true, false, false, false), Waiting),
            ((true, true, false, false, true), NoShow),
            ((false, true, true, false, false), Waiting),
            ((false, false, false, false, false), NoShow),
            ((false, true, false, false, true), NoShow),
        ];
        for ((online, alive, kicked, cannot, late), want) in cases {
            assert_eq!(
                arrival(online, alive, kicked, cannot, late),
                want,
                "online {online} alive {alive} kicked {kicked} cannot {cannot} late {late}"
            );
        }
    }
}

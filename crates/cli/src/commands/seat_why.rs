//! `trantor seat-why`: read the evidence for one seat and say what state it is in.

use super::seats;
use super::{Common, print_json, usage};
use serde_json::{Value, json};
use std::process::ExitCode;
use trantor_proto::{HubClient, Peer, now_ms};
use trantor_runner::park;

pub(crate) const SEAT_WHY_HELP: &str = concat!(
    "\
Reads the evidence for one seat and says what state it is in, with the advice that fits:
  live            the runner is up and the hub sees it
  parked          the runner stopped redelivering (reason, until, evidence in the park file)
  dead (quota)    parked on an exhausted quota until it resets
  dead (auth)     parked because the CLI's credentials were refused
  crashed         `trantor up` started it and its runner is gone (log tail shown)
  cannot run a turn  the runner is up but every turn since its boot failed (not logged in,
                  a missing CLI, credentials refused): the reason and the err file are shown
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
    CannotWork,
    NoRunner,
    NeverStarted,
}

impl Verdict {
    pub(crate) fn word(self) -> &'static str {
        match self {
            Verdict::Live => "live",
            Verdict::Parked => "parked",
            Verdict::DeadQuota => "dead (quota)",
            Verdict::DeadAuth => "dead (auth)",
            Verdict::Crashed => "crashed",
            Verdict::CannotWork => "cannot run a turn",
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
    pub(crate) fn json(&self) -> Value {
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

/// Whether a ledger turn row says the CLI could not do the turn (a non-zero exit, or an exit 0
/// the runner judged a failure, such as "Not logged in"). A turn that exited 0 did what it was
/// asked, whatever its outcome word (`no-commit` included).
pub(crate) fn turn_failed(row: &Value) -> bool {
    let code = |k: &str| row.get(k).and_then(Value::as_i64).unwrap_or(0);
    code("exit") != 0 || code("effExit") != 0 || row.get("authFailed") == Some(&Value::Bool(true))
}

/// The turns the runner finished since its latest boot at or after `since_ms` (ms), oldest
/// first: the evidence for "can this seat run a turn".
pub(crate) fn turns_since_boot(ledger: &std::path::Path, since_ms: i64) -> Option<Vec<Value>> {
    let text = std::fs::read_to_string(ledger).ok()?;
    let rows: Vec<Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .collect();
    let boot = rows.iter().rposition(|r| {
        r.get("boot") == Some(&Value::Bool(true))
            && r.get("ts").and_then(Value::as_i64).unwrap_or(0) >= since_ms
    })?;
    Some(
        rows[boot + 1..]
            .iter()
            .filter(|r| r.get("turn").is_some() && r.get("exit").is_some())
            .cloned()
            .collect(),
    )
}

/// What a failed turn row says, for a person: the runner's verdict, else the exit status.
pub(crate) fn turn_reason(row: &Value) -> String {
    let verdict = row
        .get("verdict")
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|v| !v.is_empty());
    let exit = row.get("exit").and_then(Value::as_i64).unwrap_or(0);
    match verdict {
        Some(v) => format!("{v} (exit {exit})"),
        None => format!("the agent CLI exited {exit}"),
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

    let peer = peer_evidence(hub, &session, now, &mut evidence).await;

    let pid = seats::runner_pid(persona, project);
    let stopped = record.as_ref().and_then(|r| r.stopped);
    evidence.extend(runner_line(pid, stopped, record.as_ref(), now));

    let park = park::read(&paths.park).filter(|p| p.until > now);
    if let Some(pk) = &park {
        evidence.push(park_line(pk, &paths.park, now));
    }
    let turn = last_turn(&paths.ledger);
    let last_failed = turn
        .as_ref()
        .and_then(|t| t.get("outcome").and_then(Value::as_str))
        .is_some_and(|o| o != "completed");
    // The err file holds the last turn's output, whatever it was; it is evidence only when
    // something went wrong.
    let err_tail = seats::tail(&paths.err, 4);
    if park.is_some() || last_failed {
        evidence.extend(tail_line("err file", &paths.err, &err_tail));
    }
    if let Some(t) = &turn {
        evidence.push(turn_line(t, &paths.ledger, now));
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

    let agent = seat_agent(record.as_ref(), park.as_ref(), &paths.ledger, persona);
    let seat_arg = if persona.contains(':') {
        session.clone()
    } else {
        persona.to_string()
    };
    let names = Names {
        restart: format!("trantor down {seat_arg} && trantor up {agent}"),
        session: &session,
        seat_arg: &seat_arg,
        agent: &agent,
    };

    let (verdict, summary, advice) = if let Some(pk) = &park {
        park_verdict(pk, &names)
    } else if let Some(failed) = pid
        .is_some()
        .then(|| turns_since_boot(&paths.ledger, 0))
        .flatten()
        .filter(|t| !t.is_empty() && t.iter().all(turn_failed))
    {
        // The runner polls, but its CLI has not done one turn since it booted: not live.
        if err_tail.is_empty() {
            evidence.extend(tail_line(
                "err file",
                &paths.err,
                &seats::tail(&paths.err, 4),
            ));
        }
        let dir = record.as_ref().map(|r| r.dir.display().to_string());
        cannot_work_verdict(&failed, dir, &names)
    } else if pid.is_some() {
        let phase = peer
            .as_ref()
            .and_then(|p| p.phase.clone())
            .filter(|p| !p.is_empty())
            .or(turn_phase.clone())
            .unwrap_or_else(|| "running".into());
        let online = peer.as_ref().is_some_and(|p| p.online);
        live_verdict(online, &phase, last_failed, hub.base(), &names)
    } else if stopped.is_none() && (record.is_some() || turn_phase.as_deref() == Some("working")) {
        let log = record.as_ref().map(|r| r.log.clone());
        if let Some(l) = &log {
            evidence.extend(tail_line("log", l, &seats::tail(l, 6)));
        }
        crashed_verdict(log.as_deref(), &names)
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

/// The hub's presence row of `session`, and what it says (or why it cannot be read) as
/// evidence.
async fn peer_evidence(
    hub: &HubClient,
    session: &str,
    now: i64,
    evidence: &mut Vec<String>,
) -> Option<Peer> {
    let peer = match hub.peers().await {
        Ok(r) => r.peers.into_iter().find(|p| p.session == session),
        Err(e) => {
            evidence.push(format!("hub: cannot read /peers at {} ({e})", hub.base()));
            return None;
        }
    };
    match &peer {
        Some(p) => evidence.push(peer_line(p, now)),
        None => evidence.push(format!(
            "hub: {} has no presence row for {session}",
            hub.base()
        )),
    }
    peer
}

/// The agent (with its model) the seat runs: from its record, its park file, its ledger's boot
/// row, else its persona.
fn seat_agent(
    record: Option<&seats::SeatRecord>,
    park: Option<&park::Park>,
    ledger: &std::path::Path,
    persona: &str,
) -> String {
    record
        .map(|r| match &r.model {
            Some(m) => format!("{}:{m}", r.agent),
            None => r.agent.clone(),
        })
        .or_else(|| park.map(|p| p.agent.clone()))
        .or_else(|| boot_agent(ledger))
        .unwrap_or_else(|| persona.to_string())
}

/// A file's last lines as evidence (none when there are none).
fn tail_line(label: &str, path: &std::path::Path, tail: &[String]) -> Option<String> {
    (!tail.is_empty()).then(|| format!("{label} {}: {}", path.display(), tail.join(" ⏎ ")))
}

/// The names the advice lines use.
struct Names<'a> {
    /// The command that restarts the seat.
    restart: String,
    session: &'a str,
    /// How the seat is named on the command line.
    seat_arg: &'a str,
    /// The agent (with its model) the seat runs.
    agent: &'a str,
}

/// The hub's presence row, as evidence.
fn peer_line(p: &Peer, now: i64) -> String {
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
    s
}

/// The runner process, as evidence (none when there is no pid and no record).
fn runner_line(
    pid: Option<u32>,
    stopped: Option<i64>,
    record: Option<&seats::SeatRecord>,
    now: i64,
) -> Option<String> {
    match pid {
        Some(p) => Some(format!("runner: pid {p} is running")),
        None if stopped.is_some() => Some(format!(
            "runner: stopped by `trantor down` {} ago",
            trantor_mcp::render::age(stopped.unwrap_or(now), now)
        )),
        None => record.map(|r| {
            format!(
                "runner: `trantor up` started it {} ago{} and no runner process is alive",
                trantor_mcp::render::age(r.started, now),
                r.pid.map(|p| format!(" (pid {p})")).unwrap_or_default()
            )
        }),
    }
}

/// The park file, as evidence.
fn park_line(pk: &park::Park, path: &std::path::Path, now: i64) -> String {
    let until = if pk.until == park::NEVER {
        "until an operator acts".to_string()
    } else {
        format!("until {}", park::fmt_time(pk.until))
    };
    format!(
        "park file {}: reason {}, since {} ago, {until}{}, {} message(s) held{}",
        path.display(),
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
    )
}

/// The ledger's last turn, as evidence.
fn turn_line(t: &Value, ledger: &std::path::Path, now: i64) -> String {
    format!(
        "ledger {}: last turn {} ({}) ended {} ago: {} — {}",
        ledger.display(),
        t.get("turn").map(|v| v.to_string()).unwrap_or_default(),
        t.get("trigger").and_then(Value::as_str).unwrap_or("?"),
        trantor_mcp::render::age(t.get("ts").and_then(Value::as_i64).unwrap_or(now), now),
        t.get("outcome").and_then(Value::as_str).unwrap_or("?"),
        t.get("verdict").and_then(Value::as_str).unwrap_or("")
    )
}

/// The verdict on a parked seat, by the park's reason.
fn park_verdict(pk: &park::Park, n: &Names) -> (Verdict, String, Vec<String>) {
    let (seat_arg, restart, session) = (n.seat_arg, &n.restart, n.session);
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
}

/// The verdict on a running seat whose CLI has failed every turn since boot (`failed`, not
/// empty); `dir` is the folder it runs in.
fn cannot_work_verdict(
    failed: &[Value],
    dir: Option<String>,
    n: &Names,
) -> (Verdict, String, Vec<String>) {
    let agent = n.agent;
    let last = failed.last().cloned().unwrap_or_default();
    (
        Verdict::CannotWork,
        format!(
            "its {} CLI cannot run a turn: {} ({} turn(s) since boot, none succeeded)",
            agent,
            turn_reason(&last),
            failed.len()
        ),
        vec![format!(
            "run `{}` by hand in {} with the same environment (a login, an API key or \
                 base URL the seat must inherit), then: {}",
            agent.split(':').next().unwrap_or(agent),
            dir.unwrap_or_else(|| "the project".into()),
            n.restart
        )],
    )
}

/// The verdict on a seat whose runner is running and whose CLI can work.
fn live_verdict(
    online: bool,
    phase: &str,
    last_failed: bool,
    hub_base: &str,
    n: &Names,
) -> (Verdict, String, Vec<String>) {
    if online {
        let mut advice = vec![format!("send it work: trantor send {} \"…\"", n.session)];
        if last_failed {
            advice.push(format!(
                "its last turn failed (see the ledger and err file above); if it keeps failing: {}",
                n.restart
            ));
        }
        (Verdict::Live, format!("{phase} on the bus"), advice)
    } else {
        (
            Verdict::Live,
            format!("the runner is running ({phase}) but the hub does not see it online"),
            vec![format!(
                "check that the seat's hub is {hub_base} (trantor doctor), or look at its log"
            )],
        )
    }
}

/// The verdict on a seat whose runner is gone without `trantor down`; `log` is its log file.
fn crashed_verdict(log: Option<&std::path::Path>, n: &Names) -> (Verdict, String, Vec<String>) {
    (
        Verdict::Crashed,
        "its runner is gone without `trantor down`".into(),
        vec![
            match log {
                Some(l) => format!("read the log: {}", l.display()),
                None => "read the runner's output".into(),
            },
            format!("start it again: trantor up {}", n.agent),
        ],
    )
}

pub(crate) async fn seat_why(a: SeatWhyArgs) -> anyhow::Result<ExitCode> {
    let (id, hub) = a.common.connect()?;
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

//! The turn executor (docs/runner.md §7): one agent CLI run in its own process group, stdin
//! on /dev/null, cwd the seat worktree, output captured line by line and redacted before anything
//! is written; the time box with liveness extensions; the cut (WIP snapshot while the CLI is
//! still alive, then SIGTERM to the group, then SIGKILL); and the backstop.
//!
//! The original ran the box as a bash subshell beside the CLI and needed a node-side backstop for
//! when that shell wedged. Here the box is a timer in the runner itself, so the backstop guards
//! the cut sequence instead: if the cut has not finished by the hard deadline (box or ceiling
//! plus 30 s) — a snapshot wedged on git, a group that will not die — the group is killed and
//! the backstop snapshot is taken.

use crate::sys::redact::LineRedactor;
use crate::turn::drivers::Invocation;
use crate::turn::snapshot::{SnapshotOutcome, SnapshotWhy, snapshot_wip};
use crate::turn::watchdog::{BoxTick, TurnBox, Watchdog, WatchdogConfig};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use std::io::Write;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::AsyncReadExt;
use tokio::sync::mpsc::UnboundedSender;
use tokio::time::Instant;

/// How much captured output is kept in memory (the tail).
const CAPTURE_CAP: usize = 256 * 1024;
/// How long the readers may drain after the CLI exited.
const DRAIN: Duration = Duration::from_secs(3);
/// Between a committed cut snapshot and the SIGTERM: the CLI is still alive, and a moment lets
/// whatever watches the branch (the agent itself, its hooks, a drill) see the work saved.
const SNAPSHOT_SETTLE: Duration = Duration::from_millis(1000);
/// The backstop fires this long after the last possible box deadline.
const BACKSTOP_MARGIN: Duration = Duration::from_secs(30);

/// The process group of the turn running now (0 = none), so a stopping runner can end it: the
/// CLI leads its own group and would otherwise outlive the runner.
static CURRENT_GROUP: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// End the running turn's process group (SIGTERM, then SIGKILL after a grace), if any.
pub async fn stop_current_turn() {
    let pid = CURRENT_GROUP.swap(0, std::sync::atomic::Ordering::SeqCst);
    if pid == 0 {
        return;
    }
    signal_group(pid, Signal::SIGTERM);
    for _ in 0..30 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let alive = i32::try_from(pid)
            .ok()
            .is_some_and(|p| killpg(Pid::from_raw(p), None).is_ok());
        if !alive {
            return;
        }
    }
    signal_group(pid, Signal::SIGKILL);
}

/// Everything needed to run one turn.
#[derive(Debug, Clone)]
pub struct TurnSpec {
    /// The command line.
    pub invocation: Invocation,
    /// The working directory (the seat worktree).
    pub cwd: PathBuf,
    /// Extra environment for the CLI.
    pub env: Vec<(String, String)>,
    /// The redacted output file (truncated at the start of the turn).
    pub err_file: PathBuf,
    /// The time box in ms (0 = off).
    pub max_ms: i64,
    /// The extension ceiling in ms.
    pub ceiling_ms: i64,
    /// The liveness watcher's configuration (None = no watchdog).
    pub watchdog: Option<WatchdogConfig>,
    /// The worktree and persona a cut snapshots (None = not a seat worktree: no snapshot).
    pub snapshot: Option<(PathBuf, String)>,
    /// Between SIGTERM and SIGKILL on a cut.
    pub kill_grace: Duration,
    /// Echo the redacted output to the runner's stdout (the seat's window).
    pub echo: bool,
    /// Run the CLI under the turn wrapper (docs/runner.md §24.2), so its exit status and the
    /// worktree's CLI lock outlive this runner.
    pub wrap: Option<Wrap>,
}

/// The turn wrapper: a `/bin/sh` that leads the turn's process group, holds the worktree's CLI
/// lock as its stdin for as long as it lives, writes its own pid to `pid_file`, runs the CLI
/// (stdin `/dev/null`) and waits for it, then writes the CLI's exit status to `status_file`
/// (temp + rename). SIGTERM/SIGINT/SIGHUP to the group end the CLI; the wrapper waits them out
/// and still writes the status. A SIGKILL of the group leaves no status: the turn died.
#[derive(Debug, Clone)]
pub struct Wrap {
    /// Where the CLI's exit status goes.
    pub status_file: PathBuf,
    /// Where the wrapper writes its pid.
    pub pid_file: PathBuf,
    /// The held CLI lock's open file (a handle on it becomes the wrapper's stdin).
    pub hold: Arc<std::fs::File>,
}

/// The wrapper script (`$0` is `trantor-turn`, `"$@"` the CLI and its arguments).
const WRAPPER: &str = r#"trap : TERM INT HUP
printf '%s
' "$$" > "$TRANTOR_TURN_PID.tmp" && mv -f "$TRANTOR_TURN_PID.tmp" "$TRANTOR_TURN_PID"
"$@" </dev/null
s=$?
printf '%s
' "$s" > "$TRANTOR_TURN_STATUS.tmp" && mv -f "$TRANTOR_TURN_STATUS.tmp" "$TRANTOR_TURN_STATUS"
exit $s"#;

/// Something the runner should tell the bus while the turn runs.
#[derive(Debug, Clone)]
pub enum TurnEvent {
    /// The CLI process started.
    Spawned {
        /// Its pid (the process group id too).
        pid: u32,
        /// When the spawn returned.
        at: std::time::Instant,
    },
    /// The box was extended because the agent is visibly alive.
    Extended {
        /// Which extension (1-based).
        n: u32,
        /// How many are possible.
        of: u32,
        /// The new deadline, ms since the epoch.
        until_ms: i64,
        /// The channels that showed life.
        alive: Vec<&'static str>,
    },
    /// The watchdog's one stall report.
    Stalled {
        /// The report text.
        report: String,
    },
}

/// What a finished turn looked like from the outside.
#[derive(Debug, Clone, Default)]
pub struct TurnRun {
    /// Exit status (128+signal when killed; 127 when the CLI is missing).
    pub exit: i32,
    /// Killed by this signal, if any.
    pub signal: Option<i32>,
    /// The turn was cut (box, stall or backstop).
    pub cut: bool,
    /// The cut was a stall.
    pub stalled: bool,
    /// The backstop ended the turn.
    pub backstop: bool,
    /// Liveness extensions granted.
    pub extensions: u32,
    /// The box granted in total, ms (0 = no box).
    pub box_ms: i64,
    /// Redacted stdout+stderr (the tail).
    pub output: String,
    /// Redacted stdout alone (the tail), for session-id scraping.
    pub stdout: String,
    /// WIP snapshots taken around the cut.
    pub snapshots: Vec<SnapshotOutcome>,
}

#[derive(Default)]
struct Capture {
    all: String,
    stdout: String,
}

fn push_capped(buf: &mut String, s: &str) {
    buf.push_str(s);
    if buf.len() > CAPTURE_CAP {
        let mut cut = buf.len() - CAPTURE_CAP;
        while !buf.is_char_boundary(cut) {
            cut += 1;
        }
        buf.drain(..cut);
    }
}

struct Sink {
    file: Option<std::fs::File>,
    capture: Capture,
    echo: bool,
}

impl Sink {
    fn write(&mut self, text: &str, is_stdout: bool) {
        if text.is_empty() {
            return;
        }
        if let Some(f) = self.file.as_mut() {
            let _ = f.write_all(text.as_bytes());
        }
        if self.echo {
            let _ = std::io::stdout().lock().write_all(text.as_bytes());
        }
        push_capped(&mut self.capture.all, text);
        if is_stdout {
            push_capped(&mut self.capture.stdout, text);
        }
    }
}

async fn pump<R: tokio::io::AsyncRead + Unpin>(mut r: R, sink: Arc<Mutex<Sink>>, is_stdout: bool) {
    let mut lr = LineRedactor::default();
    let mut buf = vec![0u8; 8192];
    loop {
        match r.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let text = lr.feed(&buf[..n]);
                if let Ok(mut s) = sink.lock() {
                    s.write(&text, is_stdout);
                }
            }
        }
    }
    let rest = lr.finish();
    if let Ok(mut s) = sink.lock() {
        s.write(&rest, is_stdout);
    }
}

fn signal_group(pid: u32, sig: Signal) {
    if let Ok(p) = i32::try_from(pid) {
        let _ = killpg(Pid::from_raw(p), sig);
    }
}

async fn snapshot(spec: &TurnSpec, why: SnapshotWhy) -> Option<SnapshotOutcome> {
    let (dir, persona) = spec.snapshot.clone()?;
    tokio::task::spawn_blocking(move || snapshot_wip(&dir, &persona, why))
        .await
        .ok()
}

fn exit_of(st: std::process::ExitStatus) -> (i32, Option<i32>) {
    match (st.code(), st.signal()) {
        (Some(c), _) => (c, None),
        (None, Some(s)) => (128 + s, Some(s)),
        (None, None) => (1, None),
    }
}

enum Stop {
    Exited(std::process::ExitStatus),
    Cut {
        stall: bool,
    },
    /// The CLI's own log reported a provider limit it would retry for hours (docs/runner.md §8.4).
    Provider(String),
    Backstop,
}

/// Run one turn to its end. Events (spawn, extensions, the stall report) go to `events` as
/// they happen so the runner can tell the bus without waiting for the turn.
pub async fn run_turn(spec: TurnSpec, events: UnboundedSender<TurnEvent>) -> TurnRun {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .open(&spec.err_file)
        .map_err(|e| tracing::warn!("cannot write {}: {e}", spec.err_file.display()))
        .ok();
    let sink = Arc::new(Mutex::new(Sink {
        file,
        capture: Capture::default(),
        echo: spec.echo,
    }));
    let mut cmd = turn_command(&spec);
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => return spawn_failed(&spec, &sink, &e),
    };
    let pid = child.id().unwrap_or(0);
    CURRENT_GROUP.store(pid, std::sync::atomic::Ordering::SeqCst);
    let _ = events.send(TurnEvent::Spawned {
        pid,
        at: std::time::Instant::now(),
    });
    let readers = [
        child
            .stdout
            .take()
            .map(|o| tokio::spawn(pump(o, sink.clone(), true))),
        child
            .stderr
            .take()
            .map(|e| tokio::spawn(pump(e, sink.clone(), false))),
    ];
    let t0 = trantor_proto::now_ms();
    let wd = match spec.watchdog.clone() {
        Some(cfg) => tokio::task::spawn_blocking(move || Watchdog::start(cfg))
            .await
            .ok(),
        None => None,
    };
    let mut tbox = TurnBox::new(spec.max_ms, spec.ceiling_ms, t0);
    let backstop_at = tbox.as_ref().map(|b| {
        let last = if b.extensions_max > 0 {
            spec.ceiling_ms
        } else {
            spec.max_ms
        };
        Instant::now() + Duration::from_millis(last.max(0) as u64) + BACKSTOP_MARGIN
    });
    let stop = watch(&mut child, wd.as_ref(), tbox.as_mut(), backstop_at, &events).await;
    let mut run = TurnRun {
        ..Default::default()
    };
    let status = match stop {
        Stop::Exited(st) => Some(st),
        Stop::Cut { stall } => end_cut(&spec, &mut child, pid, stall, backstop_at, &mut run).await,
        Stop::Provider(evidence) => {
            tracing::warn!("ending the turn: {evidence}");
            // Into the turn's output, where the classifier reads it (a usage limit → exhausted,
            // with the reset when the provider's message names one).
            if let Ok(mut s) = sink.lock() {
                s.write(&format!("\n[trantor] {evidence}\n"), false);
            }
            end_gracefully(&mut child, pid, spec.kill_grace).await
        }
        Stop::Backstop => {
            run.cut = true;
            run.backstop = true;
            tracing::warn!(
                "turn backstop: the cut did not happen in time — snapshot, then SIGKILL"
            );
            run.snapshots
                .extend(snapshot(&spec, SnapshotWhy::Backstop).await);
            signal_group(pid, Signal::SIGKILL);
            child.wait().await.ok()
        }
    };
    if run.cut {
        // The second pass of docs/runner.md §9.1: whatever the CLI wrote between the snapshot and its death.
        run.snapshots.extend(
            snapshot(
                &spec,
                if run.stalled {
                    SnapshotWhy::Stall
                } else {
                    SnapshotWhy::Cut
                },
            )
            .await,
        );
        signal_group(pid, Signal::SIGKILL);
    }
    CURRENT_GROUP.store(0, std::sync::atomic::Ordering::SeqCst);
    (run.exit, run.signal) = turn_exit(status, spec.wrap.is_some());
    for r in readers.into_iter().flatten() {
        let abort = r.abort_handle();
        if tokio::time::timeout(DRAIN, r).await.is_err() {
            // A grandchild that escaped the group still holds the pipe; the turn is over anyway.
            abort.abort();
        }
    }
    if let Some(w) = wd {
        let _ = tokio::task::spawn_blocking(move || w.stop()).await;
    }
    if let Some(b) = &tbox {
        run.extensions = b.extensions;
        run.box_ms = b.box_ms();
    }
    if let Ok(s) = sink.lock() {
        run.output = s.capture.all.clone();
        run.stdout = s.capture.stdout.clone();
    }
    run
}

/// The command of one turn: the CLI (or the wrapper that runs it holding the CLI lock) in its
/// own process group, cwd the seat worktree, output piped.
fn turn_command(spec: &TurnSpec) -> tokio::process::Command {
    let mut cmd = match &spec.wrap {
        Some(w) => {
            let mut c = tokio::process::Command::new("/bin/sh");
            c.arg("-c")
                .arg(WRAPPER)
                .arg("trantor-turn")
                .arg(&spec.invocation.program)
                .env("TRANTOR_TURN_STATUS", &w.status_file)
                .env("TRANTOR_TURN_PID", &w.pid_file);
            match w.hold.try_clone() {
                Ok(f) => c.stdin(Stdio::from(f)),
                Err(e) => {
                    tracing::warn!("CLI lock handle for the wrapper: {e}");
                    c.stdin(Stdio::null())
                }
            };
            c
        }
        None => {
            let mut c = tokio::process::Command::new(&spec.invocation.program);
            c.stdin(Stdio::null());
            c
        }
    };
    cmd.args(&spec.invocation.args)
        .current_dir(&spec.cwd)
        .envs(spec.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .env_remove(crate::periphery::release::RELEASE_STATE_ENV)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(false);
    cmd
}

/// A CLI that could not start: exit 127 (not found) or 126, the reason in the turn's output.
fn spawn_failed(spec: &TurnSpec, sink: &Mutex<Sink>, e: &std::io::Error) -> TurnRun {
    let exit = if e.kind() == std::io::ErrorKind::NotFound {
        127
    } else {
        126
    };
    let msg = format!("{}: cannot start: {e}\n", spec.invocation.program);
    if let Ok(mut s) = sink.lock() {
        s.write(&msg, false);
    }
    tracing::warn!("{}", msg.trim_end());
    let output = sink.lock().map(|s| s.capture.all.clone()).unwrap_or(msg);
    TurnRun {
        exit,
        output,
        ..Default::default()
    }
}

/// Watch a running turn until it stops: the CLI exits, the backstop passes, the watchdog sees
/// the provider stop it or a stall, or the time box cuts it (extensions and stall reports go to
/// `events` as they happen).
async fn watch(
    child: &mut tokio::process::Child,
    wd: Option<&Watchdog>,
    mut tbox: Option<&mut TurnBox>,
    backstop_at: Option<Instant>,
    events: &UnboundedSender<TurnEvent>,
) -> Stop {
    let ticking = tbox.is_some() || wd.is_some();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let far = Instant::now() + Duration::from_secs(365 * 24 * 3600);
    loop {
        tokio::select! {
            st = child.wait() => match st {
                Ok(st) => break Stop::Exited(st),
                Err(e) => {
                    tracing::warn!("waiting for the CLI failed: {e}");
                    break Stop::Backstop;
                }
            },
            _ = tokio::time::sleep_until(backstop_at.unwrap_or(far)), if backstop_at.is_some() => {
                break Stop::Backstop;
            }
            _ = tick.tick(), if ticking => {
                let now = trantor_proto::now_ms();
                if let Some(w) = wd {
                    if let Some(evidence) = w.take_provider_stop() {
                        break Stop::Provider(evidence);
                    }
                    if let Some(report) = w.take_stall_report() {
                        let _ = events.send(TurnEvent::Stalled { report });
                    }
                    if tbox.is_some() && w.is_stalled() {
                        break Stop::Cut { stall: true };
                    }
                }
                if let Some(b) = tbox.as_deref_mut() {
                    let alive = wd.is_some_and(|w| w.is_alive());
                    match b.tick(now, alive, Duration::from_millis(1500)) {
                        BoxTick::Running => {}
                        BoxTick::Extended { n, of, until_ms } => {
                            let alive = wd.map(|w| w.fresh_channels()).unwrap_or_default();
                            let _ = events.send(TurnEvent::Extended { n, of, until_ms, alive });
                        }
                        BoxTick::Cut => break Stop::Cut { stall: false },
                    }
                }
            }
        }
    }
}

/// The turn's exit code and signal from the CLI's status (`wrapped`: through the wrapper, which
/// reports a CLI killed by a signal as 128 + signal, the shell's way); no status is a SIGKILL.
fn turn_exit(status: Option<std::process::ExitStatus>, wrapped: bool) -> (i32, Option<i32>) {
    match status {
        Some(st) if wrapped => match exit_of(st) {
            (c, None) if (129..160).contains(&c) => (c, Some(c - 128)),
            other => other,
        },
        Some(st) => exit_of(st),
        None => (137, Some(9)),
    }
}

/// SIGTERM to the turn's process group, SIGKILL after `grace`; the CLI's exit status.
async fn end_gracefully(
    child: &mut tokio::process::Child,
    pid: u32,
    grace: Duration,
) -> Option<std::process::ExitStatus> {
    signal_group(pid, Signal::SIGTERM);
    match tokio::time::timeout(grace, child.wait()).await {
        Ok(st) => st.ok(),
        Err(_) => {
            signal_group(pid, Signal::SIGKILL);
            child.wait().await.ok()
        }
    }
}

/// A cut (the time box, or a stall): snapshot the worktree, then end the process group — all
/// before the backstop, which otherwise kills the group and snapshots what is left.
async fn end_cut(
    spec: &TurnSpec,
    child: &mut tokio::process::Child,
    pid: u32,
    stall: bool,
    backstop_at: Option<Instant>,
    run: &mut TurnRun,
) -> Option<std::process::ExitStatus> {
    run.cut = true;
    run.stalled = stall;
    let why = if stall {
        SnapshotWhy::Stall
    } else {
        SnapshotWhy::Cut
    };
    tracing::info!(
        "{} — snapshotting the worktree, then ending the CLI's process group",
        if stall {
            "turn stalled"
        } else {
            "turn hit its time box"
        }
    );
    let hard = backstop_at.unwrap_or_else(|| Instant::now() + BACKSTOP_MARGIN);
    let cut_seq = async {
        let snap = snapshot(spec, why).await;
        if matches!(snap, Some(SnapshotOutcome::Committed { .. })) {
            tokio::time::sleep(SNAPSHOT_SETTLE).await;
        }
        let st = end_gracefully(child, pid, spec.kill_grace).await;
        (snap, st)
    };
    let outcome = tokio::select! {
        r = cut_seq => Some(r),
        _ = tokio::time::sleep_until(hard.max(Instant::now() + BACKSTOP_MARGIN)) => None,
    };
    match outcome {
        Some((snap, st)) => {
            run.snapshots.extend(snap);
            st
        }
        None => {
            run.backstop = true;
            signal_group(pid, Signal::SIGKILL);
            run.snapshots
                .extend(snapshot(spec, SnapshotWhy::Backstop).await);
            child.wait().await.ok()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(dir: &std::path::Path, script: &str, max_ms: i64) -> TurnSpec {
        TurnSpec {
            invocation: Invocation {
                program: "/bin/bash".into(),
                args: vec!["-c".into(), script.into()],
            },
            cwd: dir.to_path_buf(),
            env: vec![("T_VAR".into(), "hello".into())],
            err_file: dir.join("err.txt"),
            max_ms,
            ceiling_ms: max_ms,
            watchdog: None,
            snapshot: None,
            kill_grace: Duration::from_millis(500),
            echo: false,
            wrap: None,
        }
    }

    #[tokio::test]
    async fn the_wrapper_leaves_the_exit_status_and_holds_the_cli_lock_while_it_lives() {
        let d = tempfile::tempdir().expect("tmp");
        // The lock file's handle, as the seat's CLI lock passes it (this layer knows only the fd).
        let lock = std::fs::File::create(d.path().join("cli.lock")).expect("lock file");
        let mut s = spec(
            d.path(),
            "echo \"$T_VAR\"; read -t 1 x && echo stdin-had-data; exit 5",
            0,
        );
        s.wrap = Some(Wrap {
            status_file: d.path().join("status"),
            pid_file: d.path().join("pid"),
            hold: Arc::new(lock.try_clone().expect("handle")),
        });
        drop(lock);
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let r = run_turn(s, tx).await;
        assert_eq!(r.exit, 5);
        assert!(r.output.contains("hello") && !r.output.contains("stdin-had-data"));
        let status = std::fs::read_to_string(d.path().join("status")).expect("status file");
        assert_eq!(status.trim().parse::<i32>().ok(), Some(5));
        let pid: u32 = std::fs::read_to_string(d.path().join("pid"))
            .expect("pid file")
            .trim()
            .parse()
            .expect("a pid");
        match rx.try_recv() {
            Ok(TurnEvent::Spawned { pid: spawned, .. }) => assert_eq!(spawned, pid),
            other => panic!("expected the spawn event, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn captures_and_redacts_output() {
        let d = tempfile::tempdir().expect("tmp");
        let key = format!("sk-ant-api03-{}", "c".repeat(40));
        let script = format!(
            "echo \"$T_VAR out\"; echo '{key}' >&2; read -t 1 x && echo stdin-had-data; exit 3"
        );
        let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
        let r = run_turn(spec(d.path(), &script, 0), tx).await;
        assert_eq!(r.exit, 3);
        assert!(!r.cut);
        assert!(r.output.contains("hello out"));
        assert!(!r.output.contains("stdin-had-data"));
        assert!(!r.output.contains(&key));
        let file = std::fs::read_to_string(d.path().join("err.txt")).expect("err file");
        assert!(file.contains("hello out") && !file.contains(&key));
        assert_eq!(r.stdout.trim(), "hello out");
    }

    #[tokio::test]
    async fn missing_cli_is_127() {
        let d = tempfile::tempdir().expect("tmp");
        let mut s = spec(d.path(), "", 0);
        s.invocation.program = "/nonexistent/agent-cli".into();
        let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
        let r = run_turn(s, tx).await;
        assert_eq!(r.exit, 127);
    }

    #[tokio::test]
    async fn the_box_cuts_the_whole_group() {
        let d = tempfile::tempdir().expect("tmp");
        let marker = d.path().join("grandchild-alive");
        let script = format!(
            "(sleep 30; touch '{}') & trap '' TERM; echo started; sleep 30",
            marker.display()
        );
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let r = run_turn(spec(d.path(), &script, 1000), tx).await;
        assert!(r.cut && !r.stalled);
        assert_eq!(r.exit, 137, "SIGTERM was ignored, so SIGKILL ended it");
        assert_eq!(r.box_ms, 1000);
        assert!(r.output.contains("started"));
        // The grandchild was in the group and died with it (allow a moment for reaping).
        let mut group = String::new();
        while let Ok(ev) = rx.try_recv() {
            if let TurnEvent::Spawned { pid, .. } = ev {
                group = pid.to_string();
            }
        }
        assert!(!group.is_empty(), "the turn reported its CLI's pid");
        let mut alive = String::new();
        for _ in 0..50 {
            let out = std::process::Command::new("pgrep")
                .args(["-g", &group])
                .output()
                .expect("pgrep");
            alive = String::from_utf8_lossy(&out.stdout).trim().to_string();
            if alive.is_empty() {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        assert!(alive.is_empty(), "group {group} still has {alive}");
    }
}

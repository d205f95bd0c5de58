//! What `up`, `down`, `seat-why` and `demo` share: seat records, process checks, tmux, and
//! starting a hub when none answers.
//!
//! `trantor up` leaves one record per seat under `<bus>/seats/<persona>-<project>.json` saying
//! how it was started (pid, tmux window, log). The runner's own files (park, err, ledger) are
//! read through the runner crate's `Paths`, so there is one definition of where they live.

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use trantor_proto::HubClient;

/// The bus directory, resolved exactly as the runner resolves it.
pub(crate) fn bus_dir() -> PathBuf {
    trantor_proto::identity::bus_dir(&trantor_proto::identity::ProcessEnv)
}

/// The runner's files for one seat.
pub(crate) fn runner_paths(persona: &str, project: &str) -> trantor_runner::paths::Paths {
    trantor_runner::paths::Paths::new(&bus_dir(), persona, project)
}

/// How `trantor up` started a seat.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct SeatRecord {
    /// Who the seat is (files, bus name).
    pub persona: String,
    /// The CLI driver.
    pub agent: String,
    /// The model asked for (`agent:model`), if any.
    #[serde(default)]
    pub model: Option<String>,
    /// Project.
    pub project: String,
    /// Bus address.
    pub session: String,
    /// Working directory handed to the runner.
    pub dir: PathBuf,
    /// Where the runner's output goes.
    pub log: PathBuf,
    /// The runner's process id.
    #[serde(default)]
    pub pid: Option<u32>,
    /// `session:window` when it runs in tmux.
    #[serde(default)]
    pub tmux: Option<String>,
    /// When it was started, ms.
    pub started: i64,
    /// The hub it was pointed at.
    pub hub: String,
    /// When `trantor down` stopped it, ms (a stopped seat is not a crashed one).
    #[serde(default)]
    pub stopped: Option<i64>,
}

/// A hub `trantor up` started because none answered.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct HubRecord {
    /// Its process id.
    pub pid: u32,
    /// Its URL.
    pub url: String,
    /// Its log.
    pub log: PathBuf,
    /// When, ms.
    pub started: i64,
}

fn seats_dir() -> PathBuf {
    bus_dir().join("seats")
}

/// Where the record of `persona` on `project` lives.
pub(crate) fn record_path(persona: &str, project: &str) -> PathBuf {
    seats_dir().join(format!(
        "{}-{}.json",
        trantor_runner::paths::safe(persona),
        trantor_runner::paths::safe(project)
    ))
}

/// Where `trantor up` writes a seat's output.
pub(crate) fn log_path(persona: &str, project: &str) -> PathBuf {
    bus_dir().join("logs").join(format!(
        "runner-{}-{}.log",
        trantor_runner::paths::safe(persona),
        trantor_runner::paths::safe(project)
    ))
}

fn hub_record_path() -> PathBuf {
    seats_dir().join("hub.json")
}

fn write_json<T: Serialize>(path: &Path, v: &T) -> std::io::Result<()> {
    let bytes = serde_json::to_vec_pretty(v).map_err(std::io::Error::other)?;
    trantor_proto::fsx::write_atomic(path, &bytes)
}

/// Save a seat record.
pub(crate) fn save_record(r: &SeatRecord) -> std::io::Result<()> {
    write_json(&record_path(&r.persona, &r.project), r)
}

/// The record of a seat, if `up` started it.
pub(crate) fn load_record(persona: &str, project: &str) -> Option<SeatRecord> {
    serde_json::from_slice(&std::fs::read(record_path(persona, project)).ok()?).ok()
}

/// Every seat record (all projects).
pub(crate) fn all_records() -> Vec<SeatRecord> {
    let Ok(rd) = std::fs::read_dir(seats_dir()) else {
        return Vec::new();
    };
    let mut out: Vec<SeatRecord> = rd
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name() != "hub.json")
        .filter_map(|e| serde_json::from_slice(&std::fs::read(e.path()).ok()?).ok())
        .collect();
    out.sort_by(|a: &SeatRecord, b| (&a.project, &a.persona).cmp(&(&b.project, &b.persona)));
    out
}

/// Mark a seat record as stopped by `trantor down`.
pub(crate) fn mark_stopped(persona: &str, project: &str) {
    if let Some(mut r) = load_record(persona, project) {
        r.stopped = Some(trantor_proto::now_ms());
        let _ = save_record(&r);
    }
}

/// Save the record of a hub `up` started.
pub(crate) fn save_hub_record(r: &HubRecord) -> std::io::Result<()> {
    write_json(&hub_record_path(), r)
}

/// The hub `up` started, if any.
pub(crate) fn load_hub_record() -> Option<HubRecord> {
    serde_json::from_slice(&std::fs::read(hub_record_path()).ok()?).ok()
}

/// Forget the hub record.
pub(crate) fn remove_hub_record() {
    let _ = std::fs::remove_file(hub_record_path());
}

/// Whether `pid` is a live process (not a zombie) whose command line mentions `word`.
///
/// A process caught in the middle of its exec (its new command line not yet set up: the
/// spawner returns as soon as the old image is gone) has an empty command line and counts as
/// alive, so a runner `trantor up` has just started is not taken for a dead one; a kernel
/// thread, the other owner of an empty command line, does not count.
pub(crate) fn process_alive(pid: u32, word: &str) -> bool {
    let proc_dir = PathBuf::from(format!("/proc/{pid}"));
    let Ok(stat) = std::fs::read_to_string(proc_dir.join("stat")) else {
        return false;
    };
    // The state letter follows the parenthesised command name; the flags are the seventh
    // field after it.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let state = fields.first().copied().unwrap_or("");
    if state == "Z" || state == "X" {
        return false;
    }
    let cmdline = std::fs::read(proc_dir.join("cmdline")).unwrap_or_default();
    if cmdline.is_empty() {
        const PF_KTHREAD: u64 = 0x0020_0000;
        let flags: u64 = fields.get(6).and_then(|f| f.parse().ok()).unwrap_or(0);
        return flags & PF_KTHREAD == 0;
    }
    String::from_utf8_lossy(&cmdline).contains(word)
}

/// The runner's pid from the newest boot row of its ledger (`{boot:true, pid}`), if any row is
/// newer than `since` ms.
pub(crate) fn ledger_boot_pid(ledger: &Path, since: i64) -> Option<u32> {
    let text = std::fs::read_to_string(ledger).ok()?;
    text.lines()
        .rev()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|row| row.get("boot").and_then(|b| b.as_bool()) == Some(true))
        .filter(|row| row.get("ts").and_then(|t| t.as_i64()).unwrap_or(0) >= since)
        .and_then(|row| row.get("pid").and_then(|p| p.as_u64()))
        .map(|p| p as u32)
}

/// The live runner process of a seat: the recorded pid, else the ledger's boot pid.
pub(crate) fn runner_pid(persona: &str, project: &str) -> Option<u32> {
    let rec = load_record(persona, project);
    let candidates = [
        rec.as_ref().and_then(|r| r.pid),
        ledger_boot_pid(&runner_paths(persona, project).ledger, 0),
    ];
    candidates
        .into_iter()
        .flatten()
        .find(|p| process_alive(*p, "runner"))
}

/// Ask `pid` to stop (SIGTERM), escalate to SIGKILL after `grace`. True when it is gone.
pub(crate) fn stop_process(pid: u32, grace: Duration) -> bool {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    let p = Pid::from_raw(pid as i32);
    if kill(p, Signal::SIGTERM).is_err() {
        return !process_alive(pid, "");
    }
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        if !process_alive(pid, "") {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = kill(p, Signal::SIGKILL);
    std::thread::sleep(Duration::from_millis(100));
    !process_alive(pid, "")
}

/// The last `n` lines of a file (empty when unreadable).
pub(crate) fn tail(path: &Path, n: usize) -> Vec<String> {
    let text = std::fs::read(path)
        .map(|b| String::from_utf8_lossy(&b).to_string())
        .unwrap_or_default();
    let lines: Vec<String> = text
        .lines()
        .map(|l| trantor_proto::text::strip_ansi(l).trim_end().to_string())
        .filter(|l| !l.trim().is_empty())
        .collect();
    lines[lines.len().saturating_sub(n)..].to_vec()
}

/// Quote a string for a POSIX shell.
pub(crate) fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// Whether tmux should be used: installed, and not turned off with `TRANTOR_NO_TMUX=1`.
pub(crate) fn use_tmux(no_tmux: bool) -> bool {
    !no_tmux
        && std::env::var("TRANTOR_NO_TMUX").ok().as_deref() != Some("1")
        && super::find_on_path("tmux").is_some()
}

/// Run tmux with `args`; its stdout on success.
pub(crate) fn tmux(args: &[&str]) -> Result<String, String> {
    let out = Command::new("tmux")
        .args(args)
        .env_remove("TMUX")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run tmux: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
    }
}

/// The tmux session of a project's seats.
pub(crate) fn tmux_session(project: &str) -> String {
    format!("trantor-{}", trantor_runner::paths::safe(project))
}

/// Whether the tmux target (`session` or `session:window`) exists.
pub(crate) fn tmux_has(target: &str) -> bool {
    match target.split_once(':') {
        None => tmux(&["has-session", "-t", &format!("={target}")]).is_ok(),
        Some((session, window)) => tmux(&[
            "list-windows",
            "-t",
            &format!("={session}"),
            "-F",
            "#{window_name}",
        ])
        .map(|names| names.lines().any(|n| n == window))
        .unwrap_or(false),
    }
}

/// Whether the tmux target's pane still runs its process (a kept, dead pane does not).
pub(crate) fn tmux_pane_alive(target: &str) -> bool {
    let Some((session, window)) = target.split_once(':') else {
        return tmux_has(target);
    };
    tmux(&[
        "list-panes",
        "-t",
        &format!("={session}:{window}"),
        "-F",
        "#{pane_dead}",
    ])
    .map(|out| out.lines().any(|l| l.trim() == "0"))
    .unwrap_or(false)
}

/// Whether the URL names this machine (so `up` may start a hub for it).
pub(crate) fn local_port(url: &str) -> Option<u16> {
    let rest = url.strip_prefix("http://")?;
    let authority = rest.split('/').next()?;
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) => (h, p.parse().ok()?),
        None => (authority, 80),
    };
    matches!(host, "127.0.0.1" | "localhost" | "[::1]").then_some(port)
}

/// Wait until the hub answers `/health`, up to `within`.
pub(crate) async fn wait_for_hub(client: &HubClient, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if client.health().await.is_ok() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `log` opened for appending (created if missing), twice: the stdout and the stderr of a
/// process started in the background.
pub(crate) fn log_handles(log: &Path) -> Result<(std::fs::File, std::fs::File), String> {
    let cannot = |e: std::io::Error| format!("cannot open {}: {e}", log.display());
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .map_err(cannot)?;
    let err = out.try_clone().map_err(cannot)?;
    Ok((out, err))
}

/// Start `trantor hub` in the background for `url` (which must be local), with its output in
/// `log`. `env` adds variables (e.g. a data directory). The hub is in its own session so it
/// outlives this command.
pub(crate) fn spawn_hub(url: &str, log: &Path, env: &[(&str, &Path)]) -> Result<u32, String> {
    use std::os::unix::process::CommandExt;
    let port = local_port(url).ok_or_else(|| {
        format!(
            "no hub answers at {url}, and it is not on this machine, so it cannot be started here"
        )
    })?;
    if let Some(d) = log.parent() {
        std::fs::create_dir_all(d).map_err(|e| format!("cannot create {}: {e}", d.display()))?;
    }
    let (out, err) = log_handles(log)?;
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this binary: {e}"))?;
    let mut cmd = Command::new(exe);
    cmd.arg("hub")
        .env("RELAY_PORT", port.to_string())
        .env("RELAY_HOST", "127.0.0.1")
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .process_group(0);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let child = cmd
        .spawn()
        .map_err(|e| format!("cannot start the hub: {e}"))?;
    Ok(child.id())
}

/// `persona` and `project` from a seat argument: `claude`, `claude:web`, or a session.
pub(crate) fn parse_seat(arg: &str, default_project: &str) -> (String, String) {
    match arg.rsplit_once(':') {
        Some((p, proj)) if !p.is_empty() && !proj.is_empty() => (p.to_string(), proj.to_string()),
        _ => (
            arg.trim_end_matches(':').to_string(),
            default_project.to_string(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_live_process_is_alive_and_a_kernel_thread_never_is() {
        assert!(process_alive(std::process::id(), ""));
        assert!(!process_alive(
            std::process::id(),
            "no-such-word-in-a-cmdline"
        ));
        // Kernel threads (when this machine shows any) have empty command lines, like a process
        // mid-exec, but are never taken for one.
        for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
                continue;
            };
            let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
            let flags: u64 = stat
                .rsplit_once(')')
                .and_then(|(_, r)| r.split_whitespace().nth(6))
                .and_then(|f| f.parse().ok())
                .unwrap_or(0);
            if flags & 0x0020_0000 != 0 {
                assert!(!process_alive(pid, ""), "kernel thread {pid}");
            }
        }
    }

    #[test]
    fn local_urls() {
        assert_eq!(local_port("http://127.0.0.1:4477"), Some(4477));
        assert_eq!(local_port("http://localhost:9/"), Some(9));
        assert_eq!(local_port("http://hub.example:4477"), None);
        assert_eq!(local_port("https://127.0.0.1:1"), None);
    }

    #[test]
    fn seats_parse() {
        assert_eq!(parse_seat("claude", "web"), ("claude".into(), "web".into()));
        assert_eq!(
            parse_seat("claude:api", "web"),
            ("claude".into(), "api".into())
        );
    }

    #[test]
    fn quoting_and_ansi() {
        assert_eq!(shell_quote("it's"), "'it'\\''s'");
        assert_eq!(
            trantor_proto::text::strip_ansi("\u{1b}[32m INFO\u{1b}[0m x"),
            " INFO x"
        );
    }

    #[test]
    fn boot_pid_from_ledger() {
        let d = tempfile::tempdir().expect("tmp");
        let l = d.path().join("l.jsonl");
        std::fs::write(
            &l,
            "{\"ts\":5,\"boot\":true,\"pid\":11}\n{\"turn\":1}\n{\"ts\":9,\"boot\":true,\"pid\":12}\n{\"turn\":2}\n",
        )
        .expect("w");
        assert_eq!(ledger_boot_pid(&l, 0), Some(12));
        assert_eq!(ledger_boot_pid(&l, 10), None);
    }
}

//! The turn watchdog (docs/runner.md §8): a thread of the runner that watches a turn's liveness —
//! output growth, worktree changes, the agent CLI's own session files — so the runner can extend
//! the time box while the agent is visibly working, and end a turn that has been silent for the
//! whole stall window.
//!
//! The original ran this as a detached process that had to guard against speaking for a previous
//! runner. Here it is a thread, so it dies with its runner (and with an exec); it still checks on
//! every poll that its owner pid is this process and that the turn-state file has not moved on to
//! another turn, and goes quiet when either fails.
//!
//! The liveness rules live in [`Liveness`], a pure state machine fed with samples and a clock, so
//! they are tested without sleeping; the thread only samples the filesystem.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Output below this much growth since arming is the CLI's banner, not work (docs/runner.md §8.1).
const OUTPUT_GRACE_BYTES: u64 = 200;
/// At most this many entries are looked at per scan of a tree (docs/runner.md §8.1).
const SCAN_CAP: usize = 20_000;
/// A channel still counts as fresh this long past the window (docs/runner.md §8.1).
const FRESH_SLACK_MS: i64 = 2_000;

/// What the watchdog watches for one turn.
#[derive(Debug, Clone)]
pub struct WatchdogConfig {
    /// The turn's working directory (the seat worktree); its newest mtime is a liveness channel.
    pub worktree: PathBuf,
    /// The file the turn's output is captured to; its growth is a liveness channel.
    pub output_file: PathBuf,
    /// The agent CLI's session/transcript directories; their newest file mtime is a channel.
    pub session_dirs: Vec<PathBuf>,
    /// Quiet for this long on every channel = stalled (`Config::watchdog_ms`).
    pub stall_after: Duration,
    /// The runner process that owns the turn; the watchdog never acts for another.
    pub owner_pid: u32,
    /// The turn this watchdog belongs to (the `turn` of the turn-state file).
    pub turn_id: String,
    /// The turn-state file; the watchdog refreshes `lastBytesAt` / `lastTranscriptAt` in it.
    pub turn_state_file: PathBuf,
    /// Directories of the CLI's own log files where it records provider errors it retries on
    /// its own (OpenCode); a usage limit there ends the turn (docs/runner.md §8.4).
    pub provider_logs: Vec<PathBuf>,
}

/// One sample of every channel.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sample {
    /// Size of the output file (0 when missing).
    pub output_len: u64,
    /// Newest mtime in the worktree, ms (0 when nothing).
    pub tree_mtime_ms: i64,
    /// Newest mtime among the session files, ms (0 when nothing).
    pub session_mtime_ms: i64,
}

/// The liveness rules, free of threads and clocks.
#[derive(Debug, Clone)]
pub struct Liveness {
    armed_at: i64,
    window_ms: i64,
    output_base: u64,
    output_seen: u64,
    tree_seen: i64,
    session_seen: i64,
    /// Last activity per channel, ms (0 = none since arming).
    pub last_output_at: i64,
    /// Last worktree change, ms.
    pub last_tree_at: i64,
    /// Last session-file change, ms.
    pub last_session_at: i64,
}

impl Liveness {
    /// Arm at `now_ms` with the channels as they are (`base`): only what moves afterwards counts.
    pub fn arm(now_ms: i64, window: Duration, base: Sample) -> Liveness {
        Liveness {
            armed_at: now_ms,
            window_ms: i64::try_from(window.as_millis()).unwrap_or(i64::MAX),
            output_base: base.output_len,
            output_seen: base.output_len,
            tree_seen: base.tree_mtime_ms.max(now_ms),
            session_seen: base.session_mtime_ms.max(now_ms),
            last_output_at: 0,
            last_tree_at: 0,
            last_session_at: 0,
        }
    }

    /// Feed one sample taken at `now_ms`.
    pub fn observe(&mut self, now_ms: i64, s: Sample) {
        if s.output_len > self.output_seen
            && s.output_len.saturating_sub(self.output_base) > OUTPUT_GRACE_BYTES
        {
            self.last_output_at = now_ms;
        }
        // A truncated file restarts the count; it is not activity.
        self.output_seen = s.output_len;
        if s.tree_mtime_ms > self.tree_seen {
            self.tree_seen = s.tree_mtime_ms;
            self.last_tree_at = s.tree_mtime_ms.min(now_ms);
        }
        if s.session_mtime_ms > self.session_seen {
            self.session_seen = s.session_mtime_ms;
            self.last_session_at = s.session_mtime_ms.min(now_ms);
        }
    }

    /// The newest activity on any channel, or the arming time when nothing moved.
    pub fn last_activity(&self) -> i64 {
        self.armed_at
            .max(self.last_output_at)
            .max(self.last_tree_at)
            .max(self.last_session_at)
    }

    /// Whether every channel has been quiet for the whole window.
    pub fn stalled(&self, now_ms: i64) -> bool {
        now_ms.saturating_sub(self.last_activity()) >= self.window_ms
    }

    /// The channels that moved after arming and within the window (+2 s), by name.
    pub fn fresh_channels(&self, now_ms: i64) -> Vec<&'static str> {
        let fresh = |at: i64| at > 0 && now_ms - at <= self.window_ms + FRESH_SLACK_MS;
        let mut out = Vec::new();
        if fresh(self.last_output_at) {
            out.push("output");
        }
        if fresh(self.last_tree_at) {
            out.push("worktree");
        }
        if fresh(self.last_session_at) {
            out.push("session");
        }
        out
    }
}

/// The poll interval for a window: max(250 ms, min(window / 4, 10 s)) (docs/runner.md §8.1).
pub fn poll_interval(window: Duration) -> Duration {
    (window / 4)
        .min(Duration::from_secs(10))
        .max(Duration::from_millis(250))
}

struct Shared {
    last_activity: AtomicI64,
    stalled: AtomicBool,
    report: Mutex<Option<String>>,
    provider_stop: Mutex<Option<String>>,
    fresh: Mutex<Vec<&'static str>>,
    stop: Mutex<bool>,
    wake: Condvar,
}

/// A running watchdog thread for one turn. Stop it (which joins the thread) before writing any
/// phase transition to the turn-state file, so its liveness refresh can never overwrite one.
pub struct Watchdog {
    shared: Arc<Shared>,
    handle: Option<std::thread::JoinHandle<()>>,
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

impl Watchdog {
    /// Arm the watchdog now and start its thread.
    pub fn start(cfg: WatchdogConfig) -> Watchdog {
        let armed_at = now_ms();
        let window = cfg.stall_after;
        let shared = Arc::new(Shared {
            last_activity: AtomicI64::new(armed_at),
            stalled: AtomicBool::new(false),
            report: Mutex::new(None),
            provider_stop: Mutex::new(None),
            fresh: Mutex::new(Vec::new()),
            stop: Mutex::new(false),
            wake: Condvar::new(),
        });
        let thread_shared = shared.clone();
        // The output size is taken here (one stat), so output written right after arming counts.
        // The tree scans run on the watchdog's thread: a large worktree must not delay the CLI's
        // spawn, and whatever is written after `armed_at` still counts because the baseline
        // mtimes are clamped up to it.
        let output_len = output_len(&cfg.output_file);
        // The log offsets too: the CLI's first log lines (which name its directory) come after.
        let logs = ProviderLogs::arm(&cfg.provider_logs, &cfg.worktree);
        let handle = std::thread::Builder::new()
            .name(format!("watchdog-{}", cfg.turn_id))
            .spawn(move || {
                let base = Sample {
                    output_len,
                    ..sample(&cfg)
                };
                let live = Liveness::arm(armed_at, window, base);
                run(cfg, live, logs, thread_shared)
            })
            .map_err(|e| tracing::warn!("watchdog thread could not start: {e}"))
            .ok();
        Watchdog { shared, handle }
    }

    /// The newest activity seen on any channel (ms since the epoch; the arming time if none).
    #[cfg(test)]
    pub fn last_activity_ms(&self) -> i64 {
        self.shared.last_activity.load(Ordering::SeqCst)
    }

    /// Whether the turn has been quiet on every channel for the whole stall window.
    pub fn is_stalled(&self) -> bool {
        self.shared.stalled.load(Ordering::SeqCst)
    }

    /// Whether some channel moved since arming and within the window (the box may extend).
    pub fn is_alive(&self) -> bool {
        !self.fresh_channels().is_empty()
    }

    /// The channels fresh at the last poll ("output", "worktree", "session"), for the
    /// extension note ("alive: …").
    pub fn fresh_channels(&self) -> Vec<&'static str> {
        self.shared
            .fresh
            .lock()
            .map(|f| f.clone())
            .unwrap_or_default()
    }

    /// The one stall report ("turn STALLED — N min with no activity …"), handed out once so the
    /// runner sends exactly one message per stall.
    pub fn take_stall_report(&self) -> Option<String> {
        self.shared.report.lock().ok().and_then(|mut r| r.take())
    }

    /// The provider error the CLI's own log reported for this turn (a usage limit the CLI would
    /// keep retrying), handed out once: the runner ends the turn and classifies this text.
    pub fn take_provider_stop(&self) -> Option<String> {
        self.shared
            .provider_stop
            .lock()
            .ok()
            .and_then(|mut r| r.take())
    }

    /// Stop the thread and wait for it (at most one poll's worth of work).
    pub fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        if let Ok(mut stop) = self.shared.stop.lock() {
            *stop = true;
        }
        self.shared.wake.notify_all();
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.halt();
    }
}

fn run(cfg: WatchdogConfig, mut live: Liveness, mut logs: ProviderLogs, shared: Arc<Shared>) {
    let interval = poll_interval(cfg.stall_after);
    let mut last_written: (i64, i64) = (0, 0);
    loop {
        // Sleep one poll, waking at once on stop.
        {
            let Ok(guard) = shared.stop.lock() else {
                return;
            };
            let Ok((guard, _)) = shared.wake.wait_timeout_while(guard, interval, |s| !*s) else {
                return;
            };
            if *guard {
                return;
            }
        }
        if !owns_turn(&cfg) {
            tracing::debug!("watchdog for turn {} stands down (not ours)", cfg.turn_id);
            return;
        }
        let now = now_ms();
        live.observe(now, sample(&cfg));
        shared
            .last_activity
            .store(live.last_activity(), Ordering::SeqCst);
        if let Ok(mut f) = shared.fresh.lock() {
            *f = live.fresh_channels(now);
        }
        if let Some(evidence) = logs.scan() {
            tracing::warn!("turn {}: the CLI's log reports {evidence}", cfg.turn_id);
            if let Ok(mut p) = shared.provider_stop.lock() {
                *p = Some(evidence);
            }
            // Reported once; the runner ends the turn.
            return;
        }
        let stamps = (live.last_output_at, live.last_session_at);
        if stamps != last_written {
            refresh_turn_state(&cfg, stamps.0, stamps.1);
            last_written = stamps;
        }
        if live.stalled(now) {
            let mins = cfg.stall_after.as_secs().div_ceil(60);
            let text = format!(
                "turn {} STALLED — {mins}m with no activity (no output, no file changes, no session writes)",
                cfg.turn_id
            );
            tracing::warn!("{text}");
            if let Ok(mut r) = shared.report.lock() {
                *r = Some(text);
            }
            shared.stalled.store(true, Ordering::SeqCst);
            // Reported once; the runner ends the turn.
            return;
        }
    }
}

/// The watchdog acts only for its own runner process and only while the turn-state file still
/// names its turn (a missing or unreadable file does not end it: the runner may write it late).
fn owns_turn(cfg: &WatchdogConfig) -> bool {
    if cfg.owner_pid != std::process::id() {
        return false;
    }
    match read_turn_state(&cfg.turn_state_file) {
        Some(state) => match state.get("turn") {
            Some(turn) => json_scalar(turn) == cfg.turn_id,
            None => true,
        },
        None => true,
    }
}

fn json_scalar(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn read_turn_state(path: &Path) -> Option<serde_json::Map<String, serde_json::Value>> {
    let bytes = std::fs::read(path).ok()?;
    match serde_json::from_slice(&bytes).ok()? {
        serde_json::Value::Object(m) => Some(m),
        _ => None,
    }
}

/// Merge the liveness stamps into the turn-state file (docs/runner.md §8.3): never writes `phase`,
/// and refuses when the file's turn or phase has moved on.
fn refresh_turn_state(cfg: &WatchdogConfig, bytes_at: i64, transcript_at: i64) {
    let Some(mut state) = read_turn_state(&cfg.turn_state_file) else {
        return;
    };
    let same_turn = state
        .get("turn")
        .is_some_and(|t| json_scalar(t) == cfg.turn_id);
    let working = state.get("phase").and_then(|p| p.as_str()) == Some("working");
    if !same_turn || !working {
        return;
    }
    if bytes_at > 0 {
        state.insert("lastBytesAt".into(), bytes_at.into());
    }
    if transcript_at > 0 {
        state.insert("lastTranscriptAt".into(), transcript_at.into());
    }
    if let Err(e) = crate::sys::fsx::write_json_atomic(&cfg.turn_state_file, &state) {
        tracing::debug!("watchdog turn-state refresh: {e}");
    }
}

fn output_len(path: &Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

fn sample(cfg: &WatchdogConfig) -> Sample {
    let output_len = output_len(&cfg.output_file);
    let tree_mtime_ms = newest_mtime(&cfg.worktree, 64);
    let session_mtime_ms = cfg
        .session_dirs
        .iter()
        .map(|d| newest_mtime(d, 4))
        .max()
        .unwrap_or(0);
    Sample {
        output_len,
        tree_mtime_ms,
        session_mtime_ms,
    }
}

/// The newest mtime (ms) of `root` — a file, or anything under a directory, directories
/// included, since creating or
/// deleting a file touches its directory — skipping `.git` and `node_modules`, looking at no
/// more than 20 000 entries and `max_depth` levels.
pub fn newest_mtime(root: &Path, max_depth: usize) -> i64 {
    let mut newest = 0;
    let mut seen = 0usize;
    let mut stack = vec![(root.to_path_buf(), 0usize)];
    while let Some((dir, depth)) = stack.pop() {
        if let Some(m) = mtime_ms(&dir) {
            newest = newest.max(m);
        }
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            seen += 1;
            if seen > SCAN_CAP {
                return newest;
            }
            let name = entry.file_name();
            if name == ".git" || name == "node_modules" {
                continue;
            }
            // file_type does not follow symlinks, so a link cycle cannot trap the scan.
            let Ok(ft) = entry.file_type() else {
                continue;
            };
            if ft.is_dir() {
                if depth < max_depth {
                    stack.push((entry.path(), depth + 1));
                }
            } else if let Some(m) = entry.metadata().ok().and_then(|m| m.modified().ok()) {
                newest = newest.max(system_ms(m));
            }
        }
    }
    newest
}

fn mtime_ms(p: &Path) -> Option<i64> {
    std::fs::symlink_metadata(p)
        .and_then(|m| m.modified())
        .ok()
        .map(system_ms)
}

fn system_ms(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Read at most this much new log per file and poll; a flood beyond it is skipped, not parsed.
const LOG_READ_CAP: u64 = 4 * 1024 * 1024;

/// The CLI's own log files, read on from where they stood at arming (docs/runner.md §8.4).
///
/// OpenCode retries a provider's 429 by itself, waiting as long as the provider's `retry-after`
/// says (hours, for a usage limit) and printing nothing to `opencode run`'s output; the only
/// trace is a `level=ERROR … message="stream error" … error.error="…"` line in its log. The log
/// is shared by every OpenCode process of the user, so a line counts only when its `run=` id
/// is a process that opened this turn's directory; the title agent's errors (`small=true`) do
/// not count.
struct ProviderLogs {
    dirs: Vec<PathBuf>,
    offsets: std::collections::HashMap<PathBuf, u64>,
    partial: std::collections::HashMap<PathBuf, String>,
    turn_dirs: Vec<String>,
    ours: std::collections::HashSet<String>,
}

impl ProviderLogs {
    fn arm(dirs: &[PathBuf], turn_dir: &Path) -> ProviderLogs {
        let mut offsets = std::collections::HashMap::new();
        for d in dirs {
            for f in log_files(d) {
                offsets.insert(f.clone(), output_len(&f));
            }
        }
        let mut turn_dirs = vec![turn_dir.to_string_lossy().to_string()];
        if let Ok(real) = std::fs::canonicalize(turn_dir) {
            turn_dirs.push(real.to_string_lossy().to_string());
        }
        ProviderLogs {
            dirs: dirs.to_vec(),
            offsets,
            partial: Default::default(),
            turn_dirs,
            ours: Default::default(),
        }
    }

    /// New complete lines since the last scan; the first usage-limit error of this turn's CLI.
    fn scan(&mut self) -> Option<String> {
        let mut found = None;
        for d in self.dirs.clone() {
            for f in log_files(&d) {
                for line in self.new_lines(&f) {
                    if found.is_none() {
                        found = self.judge_line(&line);
                    }
                }
            }
        }
        found
    }

    fn new_lines(&mut self, f: &Path) -> Vec<String> {
        use std::io::{Read, Seek, SeekFrom};
        let len = output_len(f);
        let mut from = self.offsets.get(f).copied().unwrap_or(0);
        if len < from {
            // Truncated or replaced: start over.
            from = 0;
            self.partial.remove(f);
        }
        if len == from {
            return Vec::new();
        }
        if len - from > LOG_READ_CAP {
            from = len - LOG_READ_CAP;
            self.partial.remove(f);
        }
        let mut buf = Vec::new();
        let read = std::fs::File::open(f).and_then(|mut h| {
            h.seek(SeekFrom::Start(from))?;
            h.take(len - from).read_to_end(&mut buf)
        });
        if read.is_err() {
            return Vec::new();
        }
        self.offsets
            .insert(f.to_path_buf(), from + buf.len() as u64);
        let mut text = self.partial.remove(f).unwrap_or_default();
        text.push_str(&String::from_utf8_lossy(&buf));
        let mut lines: Vec<String> = text.split('\n').map(str::to_string).collect();
        let rest = lines.pop().unwrap_or_default();
        if !rest.is_empty() {
            self.partial.insert(f.to_path_buf(), rest);
        }
        lines
    }

    fn judge_line(&mut self, line: &str) -> Option<String> {
        let kv = logfmt(line);
        let get = |k: &str| kv.iter().find(|(key, _)| key == k).map(|(_, v)| v.as_str());
        let run = get("run")?.to_string();
        if let Some(dir) = get("directory")
            && self.turn_dirs.iter().any(|d| d == dir)
        {
            self.ours.insert(run.clone());
        }
        if get("level") != Some("ERROR")
            || get("message") != Some("stream error")
            || get("small") == Some("true")
            || !self.ours.contains(&run)
        {
            return None;
        }
        let err = get("error.error")?;
        crate::triage::classify::usage_limit(err)?;
        Some(format!(
            "provider error (the CLI's log, retried by the CLI): {err}"
        ))
    }
}

fn log_files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    out.sort();
    out
}

/// `key=value key="quoted \"value\""` pairs of one logfmt line.
fn logfmt(line: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut chars = line.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        let mut key = String::new();
        while let Some(&c) = chars.peek() {
            if c == '=' || c.is_whitespace() {
                break;
            }
            key.push(c);
            chars.next();
        }
        if key.is_empty() && chars.peek().is_none() {
            return out;
        }
        if chars.peek() != Some(&'=') {
            if chars.peek().is_none() {
                return out;
            }
            continue;
        }
        chars.next();
        let mut value = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            while let Some(c) = chars.next() {
                match c {
                    '\\' => {
                        if let Some(n) = chars.next() {
                            value.push(n);
                        }
                    }
                    '"' => break,
                    c => value.push(c),
                }
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c.is_whitespace() {
                    break;
                }
                value.push(c);
                chars.next();
            }
        }
        out.push((key, value));
    }
}

/// The time box of a turn with its liveness extensions (docs/runner.md §7.2, §8.1).
///
/// `TRANTOR_TURN_MAX_MS` (default 20 min, 0 = off), ceiling `TRANTOR_TURN_CEILING_MS` (default
/// 60 min), step `ceil(max/2)`, at most `floor((ceiling − max)/step)` extensions. The runner ticks
/// it about once a second with the watchdog's liveness.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnBox {
    /// The initial box, ms.
    pub max_ms: i64,
    /// One extension, ms.
    pub step_ms: i64,
    /// How many extensions are possible.
    pub extensions_max: u32,
    /// Extensions granted so far.
    pub extensions: u32,
    /// The current deadline, ms since the epoch.
    pub deadline_ms: i64,
}

/// What the box says at a tick.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BoxTick {
    /// Keep going.
    Running,
    /// The box was extended: extension `n` of `of`, new deadline `until_ms`.
    Extended {
        /// Which extension this is (1-based).
        n: u32,
        /// How many are possible.
        of: u32,
        /// The new deadline, ms since the epoch.
        until_ms: i64,
    },
    /// The deadline passed: cut the turn.
    Cut,
}

impl TurnBox {
    /// A box of `max_ms` with ceiling `ceiling_ms` started at `start_ms`; `None` when `max_ms`
    /// is 0 (the box is off).
    pub fn new(max_ms: i64, ceiling_ms: i64, start_ms: i64) -> Option<TurnBox> {
        if max_ms <= 0 {
            return None;
        }
        let step_ms = (max_ms + 1) / 2;
        let extensions_max = if ceiling_ms > max_ms {
            u32::try_from((ceiling_ms - max_ms) / step_ms).unwrap_or(u32::MAX)
        } else {
            0
        };
        Some(TurnBox {
            max_ms,
            step_ms,
            extensions_max,
            extensions: 0,
            deadline_ms: start_ms.saturating_add(max_ms),
        })
    }

    /// The total box granted so far (`max + extensions·step`), for the telemetry row's `boxMs`.
    pub fn box_ms(&self) -> i64 {
        self.max_ms + i64::from(self.extensions) * self.step_ms
    }

    /// Advance to `now_ms`. `alive` is the watchdog's [`Watchdog::is_alive`]; `lookahead` is how
    /// close the deadline must be before an extension is granted (one poll).
    pub fn tick(&mut self, now_ms: i64, alive: bool, lookahead: Duration) -> BoxTick {
        let look = i64::try_from(lookahead.as_millis()).unwrap_or(i64::MAX);
        if alive && self.extensions < self.extensions_max && self.deadline_ms - now_ms <= look {
            self.extensions += 1;
            self.deadline_ms += self.step_ms;
            return BoxTick::Extended {
                n: self.extensions,
                of: self.extensions_max,
                until_ms: self.deadline_ms,
            };
        }
        if now_ms >= self.deadline_ms {
            BoxTick::Cut
        } else {
            BoxTick::Running
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    const MIN: i64 = 60_000;

    #[test]
    fn poll_interval_bounds() {
        assert_eq!(
            poll_interval(Duration::from_secs(600)),
            Duration::from_secs(10)
        );
        assert_eq!(
            poll_interval(Duration::from_millis(400)),
            Duration::from_millis(250)
        );
        assert_eq!(
            poll_interval(Duration::from_secs(20)),
            Duration::from_secs(5)
        );
    }

    #[test]
    fn quiet_for_the_window_is_a_stall() {
        let t0 = 1_000 * MIN;
        let base = Sample {
            output_len: 50,
            tree_mtime_ms: t0 - 5 * MIN,
            session_mtime_ms: 0,
        };
        let mut l = Liveness::arm(t0, Duration::from_secs(600), base);
        l.observe(t0 + 9 * MIN, base);
        assert!(!l.stalled(t0 + 9 * MIN));
        assert!(
            l.fresh_channels(t0 + 9 * MIN).is_empty(),
            "nothing moved since arming"
        );
        l.observe(t0 + 10 * MIN, base);
        assert!(l.stalled(t0 + 10 * MIN));
    }

    #[test]
    fn each_channel_keeps_the_turn_alive() {
        let t0 = 1_000 * MIN;
        let w = Duration::from_secs(600);
        let base = Sample {
            output_len: 0,
            tree_mtime_ms: t0 - MIN,
            session_mtime_ms: t0 - MIN,
        };

        // Output: the banner's first 200 bytes do not count, growth after that does.
        let mut l = Liveness::arm(t0, w, base);
        l.observe(
            t0 + MIN,
            Sample {
                output_len: 150,
                ..base
            },
        );
        assert_eq!(l.last_activity(), t0);
        l.observe(
            t0 + 8 * MIN,
            Sample {
                output_len: 400,
                ..base
            },
        );
        assert_eq!(l.last_activity(), t0 + 8 * MIN);
        assert!(!l.stalled(t0 + 17 * MIN));
        assert_eq!(l.fresh_channels(t0 + 17 * MIN), vec!["output"]);
        assert!(l.stalled(t0 + 18 * MIN));

        // Worktree: a change after arming.
        let mut l = Liveness::arm(t0, w, base);
        l.observe(
            t0 + 5 * MIN,
            Sample {
                tree_mtime_ms: t0 + 4 * MIN,
                ..base
            },
        );
        assert_eq!(l.last_tree_at, t0 + 4 * MIN);
        assert!(!l.stalled(t0 + 13 * MIN));
        assert!(l.stalled(t0 + 14 * MIN));

        // Session files: a write after arming; an mtime from the future is clamped to now.
        let mut l = Liveness::arm(t0, w, base);
        l.observe(
            t0 + 2 * MIN,
            Sample {
                session_mtime_ms: t0 + 99 * MIN,
                ..base
            },
        );
        assert_eq!(l.last_session_at, t0 + 2 * MIN);
        assert_eq!(l.fresh_channels(t0 + 3 * MIN), vec!["session"]);
    }

    #[test]
    fn box_extends_while_alive_up_to_the_ceiling() {
        let t0 = 0;
        let mut b = TurnBox::new(20 * MIN, 60 * MIN, t0).expect("box on");
        assert_eq!(b.step_ms, 10 * MIN);
        assert_eq!(b.extensions_max, 4);
        let look = Duration::from_secs(10);
        assert_eq!(b.tick(10 * MIN, true, look), BoxTick::Running);
        // Quiet near the deadline: no extension, then the cut.
        assert_eq!(b.tick(20 * MIN - 5_000, false, look), BoxTick::Running);
        let mut alive = b.clone();
        assert_eq!(b.tick(20 * MIN, false, look), BoxTick::Cut);
        // Alive near the deadline: four extensions, then the cut at the ceiling.
        for n in 1..=4 {
            let now = alive.deadline_ms - 1_000;
            assert!(matches!(
                alive.tick(now, true, look),
                BoxTick::Extended { n: got, of: 4, .. } if got == n
            ));
        }
        assert_eq!(alive.box_ms(), 60 * MIN);
        assert_eq!(alive.tick(60 * MIN, true, look), BoxTick::Cut);
        // Off, and no extensions when the ceiling is not above the box.
        assert!(TurnBox::new(0, 60 * MIN, t0).is_none());
        let mut tight = TurnBox::new(3_000, 3_000, t0).expect("box on");
        assert_eq!(tight.extensions_max, 0);
        assert_eq!(tight.tick(3_000, true, look), BoxTick::Cut);
    }

    fn cfg(tmp: &Path, window: Duration) -> WatchdogConfig {
        let wt = tmp.join("wt");
        std::fs::create_dir_all(&wt).expect("mkdir");
        WatchdogConfig {
            worktree: wt,
            output_file: tmp.join("out.txt"),
            session_dirs: vec![tmp.join("sessions")],
            stall_after: window,
            owner_pid: std::process::id(),
            turn_id: "7".into(),
            turn_state_file: tmp.join("turnstate.json"),
            provider_logs: vec![tmp.join("log")],
        }
    }

    fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !f() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    #[test]
    fn the_thread_marks_a_quiet_turn_stalled_and_reports_once() {
        let tmp = tempfile::tempdir().expect("tmp");
        // The floor applies to the env setting only; a config can carry a short window.
        let c = cfg(tmp.path(), Duration::from_millis(300));
        std::fs::write(
            &c.turn_state_file,
            r#"{"turn":7,"phase":"working","since":1}"#,
        )
        .expect("state");
        let wd = Watchdog::start(c);
        wait_for("stall", || wd.is_stalled());
        let report = wd.take_stall_report().expect("one report");
        assert!(report.contains("STALLED"));
        assert!(wd.take_stall_report().is_none(), "reported once");
        wd.stop();
    }

    #[test]
    fn the_thread_refreshes_liveness_in_the_turn_state() {
        let tmp = tempfile::tempdir().expect("tmp");
        // An 8 s window polls every 2 s; activity stays fresh for 10 s, ample for the checks.
        let c = cfg(tmp.path(), Duration::from_secs(8));
        let state = c.turn_state_file.clone();
        std::fs::write(&state, r#"{"turn":7,"phase":"working","since":1,"card":3}"#)
            .expect("state");
        let out = c.output_file.clone();
        let wd = Watchdog::start(c);
        std::fs::write(&out, "x".repeat(1000)).expect("output");
        wait_for("lastBytesAt", || {
            std::fs::read_to_string(&state).is_ok_and(|s| s.contains("lastBytesAt"))
        });
        let s: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&state).expect("read")).expect("json");
        assert_eq!(
            s["phase"], "working",
            "phase is never written by the watchdog"
        );
        assert_eq!(s["card"], 3, "a merge, not an overwrite");
        assert!(wd.is_alive());
        assert!(wd.last_activity_ms() >= s["lastBytesAt"].as_i64().expect("ms"));
        wd.stop();
    }

    #[test]
    fn it_stands_down_for_another_runner_or_turn() {
        let tmp = tempfile::tempdir().expect("tmp");
        // Another turn owns the state file: never marks a stall for it.
        let c = cfg(tmp.path(), Duration::from_millis(300));
        std::fs::write(&c.turn_state_file, r#"{"turn":8,"phase":"working"}"#).expect("state");
        assert!(!owns_turn(&c));
        let mut other = cfg(tmp.path(), Duration::from_millis(300));
        other.owner_pid = std::process::id().wrapping_add(1);
        std::fs::remove_file(&other.turn_state_file).expect("rm");
        assert!(!owns_turn(&other));
        other.owner_pid = std::process::id();
        assert!(
            owns_turn(&other),
            "a missing state file does not end the watch"
        );

        std::fs::write(&c.turn_state_file, r#"{"turn":8,"phase":"working"}"#).expect("state");
        let mut handle = Watchdog::start(c);
        // The thread exits on its first poll; joining proves it ended without a stall.
        let h = handle.handle.take().expect("thread");
        h.join().expect("join");
        assert!(!handle.is_stalled());
        assert!(handle.take_stall_report().is_none());
    }

    #[test]
    fn newest_mtime_skips_git_and_is_bounded() {
        let tmp = tempfile::tempdir().expect("tmp");
        let root = tmp.path();
        std::fs::create_dir_all(root.join(".git")).expect("mkdir");
        std::fs::create_dir_all(root.join("src/deep")).expect("mkdir");
        let old = SystemTime::now() - Duration::from_secs(3600);
        for p in ["src/a.rs", "src/deep/b.rs"] {
            std::fs::write(root.join(p), "x").expect("write");
            std::fs::File::options()
                .write(true)
                .open(root.join(p))
                .and_then(|f| f.set_modified(old))
                .expect("age");
        }
        for d in ["src/deep", "src", ".git", ""] {
            std::fs::File::open(root.join(d))
                .and_then(|f| f.set_modified(old))
                .expect("age dir");
        }
        std::fs::write(root.join(".git/index"), "fresh").expect("write");
        std::fs::File::open(root.join(".git"))
            .and_then(|f| f.set_modified(old))
            .expect("age dir");
        let m = newest_mtime(root, 64);
        assert!(m <= system_ms(old) + 1000, "a .git write is not activity");
        std::fs::write(root.join("src/deep/b.rs"), "y").expect("write");
        assert!(newest_mtime(root, 64) > system_ms(old) + 1000);
        // A single file (OpenCode's database) is its own mtime.
        assert!(newest_mtime(&root.join("src/deep/b.rs"), 4) > system_ms(old) + 1000);
        assert_eq!(newest_mtime(&root.join("missing"), 4), 0);
    }

    #[test]
    fn logfmt_reads_quoted_values() {
        let kv = logfmt(
            r#"timestamp=2026-11-30T20:24:37.700Z level=ERROR run=4497 message="stream error" error.error="AI_APICallError: say \"hi\" later""#,
        );
        let get = |k: &str| kv.iter().find(|(a, _)| a == k).map(|(_, v)| v.clone());
        assert_eq!(get("level").as_deref(), Some("ERROR"));
        assert_eq!(get("message").as_deref(), Some("stream error"));
        assert_eq!(
            get("error.error").as_deref(),
            Some(r#"AI_APICallError: say "hi" later"#)
        );
        assert!(logfmt("").is_empty());
        assert_eq!(logfmt("lonely words here").len(), 0);
    }

    #[test]
    fn a_usage_limit_in_this_turns_cli_log_is_reported_once() {
        let tmp = tempfile::tempdir().expect("tmp");
        let log = tmp.path().join("log");
        std::fs::create_dir_all(&log).expect("mkdir");
        let file = log.join("opencode.log");
        let wt = tmp.path().join("wt");
        std::fs::create_dir_all(&wt).expect("mkdir");
        // Before arming: an old limit of this directory does not count.
        let dir = wt.display().to_string();
        std::fs::write(
            &file,
            format!(
                "level=INFO run=old message=\"creating instance\" directory={dir}\n\
                 level=ERROR run=old message=\"stream error\" small=false error.error=\"AI_APICallError: The usage limit has been reached\"\n"
            ),
        )
        .expect("log");
        let mut logs = ProviderLogs::arm(std::slice::from_ref(&log), &wt);
        assert_eq!(logs.scan(), None);
        let append = |text: &str| {
            use std::io::Write;
            let mut f = std::fs::OpenOptions::new()
                .append(true)
                .open(&file)
                .expect("open");
            f.write_all(text.as_bytes()).expect("append");
        };
        // Another seat's process, the title agent, a transient error, half a line: nothing.
        append(&format!(
            "level=INFO run=other message=\"creating instance\" directory=/elsewhere\n\
             level=ERROR run=other message=\"stream error\" small=false error.error=\"AI_APICallError: Rate limit reached\"\n\
             level=INFO run=mine message=\"creating instance\" directory={dir}\n\
             level=ERROR run=mine message=\"stream error\" small=true error.error=\"AI_RetryError: The usage limit has been reached\"\n\
             level=ERROR run=mine message=\"stream error\" small=false error.error=\"AI_APICallError: Overloaded\"\n\
             level=ERROR run=mine message=\"stream error\" small=false error.error=\"AI_APICallError: Rate limit"
        ));
        assert_eq!(logs.scan(), None);
        append(" reached. Please try again in 1h59m59.5s.\"\n");
        let got = logs.scan().expect("the limit");
        assert!(
            got.contains("Rate limit reached. Please try again in 1h59m59.5s."),
            "{got}"
        );
        assert_eq!(logs.scan(), None, "read once");
    }
}

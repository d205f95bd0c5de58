//! Self-restart onto a newer installed version (docs/runner.md §21, §3).
//!
//! The *installed path* is the path the runner was started from (argv\[0\] resolved against the
//! cwd and `PATH`, symlinks kept). `/proc/self/exe` is deliberately not used: after a package
//! manager replaces the file it names the old, deleted inode, so it can never show an upgrade.
//! The installed version is what `<installed path> --version` prints; it is probed again only
//! when the file's (dev, inode, size, mtime) changed, so the check at the top of every loop pass
//! costs one `stat`.
//!
//! A newer version (semver ordering, prereleases included; docs/runner.md §21) that this runner lineage has not tried
//! yet is `execve`d in place: same PID, argv and environment kept, plus `CREW_RELEASE_STATE`
//! carrying the state of docs/runner.md §21. The new image calls [`take_release_state`] once at startup, which
//! also removes the variable so no child and no later exec inherits it.

use std::collections::BTreeSet;
use std::ffi::{CString, OsString};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The environment variable that carries [`ReleaseState`] across the exec.
pub const RELEASE_STATE_ENV: &str = "CREW_RELEASE_STATE";

/// How long `<installed> --version` may take.
const VERSION_PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// Above this size the bulky optional fields are dropped from the carried state: one environment
/// string is limited to 128 KiB by the kernel, and the pending file carries the queues anyway.
const MAX_STATE_ENV_BYTES: usize = 96 * 1024;

/// One entry of the seen ledger (docs/runner.md §5.4).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct SeenId {
    /// Message id.
    pub id: i64,
    /// When it was seen, ms.
    #[serde(default)]
    pub ts: i64,
}

/// Everything a runner carries across a self-restart exec (docs/runner.md §21).
///
/// Field names on the wire follow the original runner (camelCase), so the JSON in
/// `CREW_RELEASE_STATE` stays readable by both. Every field defaults when missing (docs/runner.md §21). The
/// queues also live in the pending file, which the core must write unconditionally right before
/// [`ReleaseWatcher::exec`] (docs/runner.md §5.2); the copies here are a convenience and are dropped when the
/// state would not fit in one environment string.
#[derive(Serialize, Deserialize, Default, Clone, Debug, PartialEq)]
#[serde(default, rename_all = "camelCase")]
pub struct ReleaseState {
    /// The poll cursor (highest message id handled).
    pub cursor: i64,
    /// The turn counter.
    pub turn: u64,
    /// The agent CLI's session id for the current card.
    pub sid: String,
    /// The card the current CLI session belongs to (0 = none).
    pub session_card: i64,
    /// Session ids per card, for drivers that keep one CLI session per card.
    pub card_sessions: std::collections::BTreeMap<String, String>,
    /// Earliest time (ms) the held wake may be redelivered (0 = at once).
    pub retry_at: i64,
    /// Consecutive failed deliveries of the held batch.
    pub delivery_fails: u32,
    /// Consecutive failures counted towards a park.
    pub consec_fails: u32,
    /// How many times this seat parked in this lineage.
    pub parks: u32,
    /// A no-delivery outcome asked for a retry of the held batch.
    pub no_delivery_retry: bool,
    /// An answered ask released the held contract.
    pub ask_released: bool,
    /// When the last turn ended, ms.
    pub last_turn_at: i64,
    /// The held wake messages (also in the pending file).
    pub wake: Vec<serde_json::Value>,
    /// The held broadcast context (also in the pending file).
    pub bcast: Vec<serde_json::Value>,
    /// The seen ledger (also in the pending file).
    pub seen: Vec<SeenId>,
    /// Every version this lineage tried to exec (each is tried once).
    pub attempted: Vec<String>,
    /// The version the previous image ran, for the "restarted onto" notice.
    pub from_version: String,
    /// Fields a newer or older image wrote that this one does not know: kept, not dropped.
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

static TAKEN: OnceLock<Option<ReleaseState>> = OnceLock::new();

/// The release state this process image was started with, or `None` on a normal boot.
///
/// The first call parses `CREW_RELEASE_STATE` and removes it from the process environment, so no
/// child (the agent CLI, git, docker) and no later exec inherits it by accident; later calls
/// return the same value. A state that does not parse is logged and treated as a normal boot.
///
/// Call it first thing at startup — before the first hub call or child spawn — because changing
/// the environment while another thread reads it through libc is not thread-safe on Unix.
pub fn take_release_state() -> Option<ReleaseState> {
    TAKEN
        .get_or_init(|| take_state_from(RELEASE_STATE_ENV))
        .clone()
}

/// Parse and remove the state in the environment variable `name`.
fn take_state_from(name: &str) -> Option<ReleaseState> {
    let raw = std::env::var_os(name)?;
    // SAFETY: runs once (the OnceLock above), at boot, before the runner makes any call that
    // reads the environment from another thread (DNS resolution, child spawns). Rust's own
    // environment accessors are serialised by std; only concurrent libc `getenv` could race.
    unsafe { std::env::remove_var(name) };
    match serde_json::from_slice::<ReleaseState>(raw.as_bytes()) {
        Ok(state) => Some(state),
        Err(e) => {
            tracing::warn!("ignoring unreadable {name}: {e}");
            None
        }
    }
}

/// The path this runner was started from: argv\[0\] made absolute (relative to the cwd when it
/// contains a `/`, else looked up on `PATH`), symlinks kept. Falls back to the current
/// executable only when argv\[0\] cannot be resolved.
pub fn installed_path() -> anyhow::Result<PathBuf> {
    let argv0 = std::env::args_os().next().unwrap_or_default();
    if let Some(p) = resolve_argv0(&argv0, std::env::var_os("PATH").as_deref()) {
        return Ok(p);
    }
    let exe = std::env::current_exe()?;
    tracing::warn!(
        "could not resolve argv[0] {:?}; watching {} for upgrades",
        argv0,
        exe.display()
    );
    Ok(exe)
}

fn resolve_argv0(argv0: &std::ffi::OsStr, path_var: Option<&std::ffi::OsStr>) -> Option<PathBuf> {
    if argv0.is_empty() {
        return None;
    }
    let p = Path::new(argv0);
    if argv0.as_bytes().contains(&b'/') {
        return std::path::absolute(p).ok().filter(|p| p.is_file());
    }
    std::env::split_paths(path_var?).find_map(|dir| {
        let candidate = dir.join(p);
        let meta = std::fs::metadata(&candidate).ok()?;
        // Executable by someone, as a shell's PATH lookup would require.
        (meta.is_file() && meta.mode() & 0o111 != 0)
            .then(|| std::path::absolute(&candidate).ok())
            .flatten()
    })
}

/// Parse the first semver-looking token out of `--version` output (e.g. `trantor 0.2.0`).
pub fn parse_version_output(text: &str) -> Option<semver::Version> {
    text.split_whitespace()
        .map(|w| w.trim_start_matches('v'))
        .find_map(|w| semver::Version::parse(w).ok())
}

/// Whether `candidate` is a newer version than `previous`: semver precedence (build metadata
/// ignored; equal is not newer).
fn is_newer(candidate: &semver::Version, previous: &semver::Version) -> bool {
    candidate.cmp_precedence(previous).is_gt()
}

/// The identity of the installed file as far as an upgrade is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileStamp {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: i64,
    mtime_nsec: i64,
}

fn stamp(path: &Path) -> Option<FileStamp> {
    let m = std::fs::metadata(path).ok()?;
    Some(FileStamp {
        dev: m.dev(),
        ino: m.ino(),
        size: m.size(),
        mtime: m.mtime(),
        mtime_nsec: m.mtime_nsec(),
    })
}

/// Ask `path --version` for its version (bounded; `None` when it fails or prints no version).
pub fn probe_version(path: &Path) -> Option<semver::Version> {
    let mut cmd = std::process::Command::new(path);
    cmd.arg("--version").env_remove(RELEASE_STATE_ENV);
    match crate::sys::cmd::run_bounded(cmd, VERSION_PROBE_TIMEOUT) {
        Ok(out) if out.status.success() => {
            let v = parse_version_output(&String::from_utf8_lossy(&out.stdout));
            if v.is_none() {
                tracing::debug!("{} --version printed no version", path.display());
            }
            v
        }
        Ok(out) => {
            tracing::debug!("{} --version exited {}", path.display(), out.status);
            None
        }
        Err(e) => {
            tracing::debug!("{} --version: {e}", path.display());
            None
        }
    }
}

/// Watches the installed executable for a newer version and restarts onto it in place.
///
/// Call [`ReleaseWatcher::newer_available`] at the top of every loop pass and at the start of
/// each delivery — never mid-turn — and, when it returns a version, write the pending file and
/// call [`ReleaseWatcher::exec`].
pub struct ReleaseWatcher {
    installed: PathBuf,
    running: semver::Version,
    last_stamp: Option<FileStamp>,
    installed_version: Option<semver::Version>,
    /// Interior mutability because `exec` takes `&self` and must record the attempt before it
    /// tries (docs/runner.md §21), so a failed exec is never retried for that version.
    attempted: Mutex<BTreeSet<String>>,
}

impl ReleaseWatcher {
    /// Watch `installed` (see [`installed_path`]). The running version is what the file reports
    /// now (the new image learns its own version this way); if the probe fails it falls back to
    /// this build's version. Versions this lineage already tried are taken from the release state
    /// this image was started with ([`take_release_state`]).
    pub fn new(installed: PathBuf) -> anyhow::Result<ReleaseWatcher> {
        let last_stamp = stamp(&installed);
        if last_stamp.is_none() {
            anyhow::bail!("installed runner {} is not readable", installed.display());
        }
        let running = match probe_version(&installed) {
            Some(v) => v,
            None => {
                let own = semver::Version::parse(env!("CARGO_PKG_VERSION"))?;
                tracing::warn!(
                    "{} --version gave no version; assuming {own}",
                    installed.display()
                );
                own
            }
        };
        let attempted = take_release_state()
            .map(|s| s.attempted.into_iter().collect())
            .unwrap_or_default();
        Ok(ReleaseWatcher {
            installed,
            installed_version: Some(running.clone()),
            running,
            last_stamp,
            attempted: Mutex::new(attempted),
        })
    }

    /// The versions tried so far in this lineage.
    #[cfg(test)]
    pub fn attempted(&self) -> Vec<String> {
        self.attempted
            .lock()
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// The version this process image runs (as probed at start).
    pub fn running_version(&self) -> &semver::Version {
        &self.running
    }

    /// A newer, not yet tried version installed at the path, if any. Costs one `stat` unless the
    /// file changed, in which case `--version` runs again. A downgrade or the same version never
    /// qualifies.
    pub fn newer_available(&mut self) -> Option<semver::Version> {
        let now = stamp(&self.installed);
        if now != self.last_stamp {
            self.last_stamp = now;
            self.installed_version = now.and_then(|_| probe_version(&self.installed));
            if let Some(v) = &self.installed_version {
                tracing::debug!("installed runner now reports {v}");
            }
        }
        let v = self.installed_version.as_ref()?;
        if !is_newer(v, &self.running) {
            return None;
        }
        let tried = self
            .attempted
            .lock()
            .map(|s| s.contains(&v.to_string()))
            .unwrap_or(true);
        (!tried).then(|| v.clone())
    }

    /// Replace this process image with the installed executable (same PID): argv and the
    /// environment are kept, `CREW_RELEASE_STATE` carries `state` (with `attempted` and
    /// `from_version` filled in). argv\[0\] becomes the absolute installed path so the new image
    /// resolves the same installed path even if the cwd or `PATH` differ.
    ///
    /// `target` is recorded as attempted *before* the exec, so it is never tried twice. Returns
    /// only when the exec failed; the runner should log the error and keep running.
    pub fn exec(&self, target: &semver::Version, state: &ReleaseState) -> anyhow::Error {
        let mut state = state.clone();
        if let Ok(mut set) = self.attempted.lock() {
            set.insert(target.to_string());
            set.extend(state.attempted.iter().cloned());
            state.attempted = set.iter().cloned().collect();
        } else {
            state.attempted.push(target.to_string());
        }
        state.from_version = self.running.to_string();
        tracing::info!(
            "runner restarting onto {target} (from {}) — exec {}",
            self.running,
            self.installed.display()
        );
        match self.try_exec(&state) {
            Ok(never) => match never {},
            Err(e) => {
                tracing::warn!("runner restart failed: {e:#}");
                e
            }
        }
    }

    fn try_exec(&self, state: &ReleaseState) -> anyhow::Result<std::convert::Infallible> {
        let json = encode_state(state)?;
        let path = CString::new(self.installed.as_os_str().as_bytes())?;
        let mut argv: Vec<CString> = vec![path.clone()];
        for arg in std::env::args_os().skip(1) {
            argv.push(CString::new(arg.as_bytes())?);
        }
        let mut env: Vec<CString> = Vec::new();
        for (k, v) in std::env::vars_os() {
            if k == RELEASE_STATE_ENV {
                continue;
            }
            let mut kv = OsString::with_capacity(k.len() + v.len() + 1);
            kv.push(&k);
            kv.push("=");
            kv.push(&v);
            env.push(CString::new(kv.as_bytes())?);
        }
        env.push(CString::new(format!("{RELEASE_STATE_ENV}={json}"))?);
        Ok(nix::unistd::execve(&path, &argv, &env)?)
    }
}

/// Serialise the state for the environment, dropping the queue copies when too big (the pending
/// file, written right before the exec, carries them).
fn encode_state(state: &ReleaseState) -> anyhow::Result<String> {
    let json = serde_json::to_string(state)?;
    if json.len() <= MAX_STATE_ENV_BYTES {
        return Ok(json);
    }
    let mut slim = state.clone();
    slim.wake.clear();
    slim.bcast.clear();
    slim.seen.clear();
    tracing::info!(
        "release state is {} bytes; queues ride the pending file only",
        json.len()
    );
    let json = serde_json::to_string(&slim)?;
    anyhow::ensure!(
        json.len() <= MAX_STATE_ENV_BYTES,
        "release state too large for the environment ({} bytes)",
        json.len()
    );
    Ok(json)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// [`is_newer`] on two strings; a side that is not a version is never newer.
    fn newer_str(a: &str, b: &str) -> bool {
        match (semver::Version::parse(a), semver::Version::parse(b)) {
            (Ok(a), Ok(b)) => is_newer(&a, &b),
            _ => false,
        }
    }

    #[test]
    fn semver_ordering_of_the_reference() {
        let newer = [
            ("1.0.1", "1.0.0"),
            ("1.0.0", "1.0.0-rc.1"),
            ("1.0.0-rc.2", "1.0.0-rc.1"),
            ("1.0.0-rc.10", "1.0.0-rc.9"),
            ("1.0.0-alpha.beta", "1.0.0-alpha.1"),
            ("1.0.0-alpha.1", "1.0.0-alpha"),
            ("1.0.0-beta", "1.0.0-alpha"),
            ("2.0.0", "1.99.99"),
            ("0.10.0", "0.9.0"),
            ("1.2.0", "1.1.0"),
        ];
        for (a, b) in newer {
            assert!(newer_str(a, b), "{a} should be newer than {b}");
            assert!(!newer_str(b, a), "{b} should not be newer than {a}");
        }
        let not_newer = [
            ("1.0.0", "1.0.0"),
            ("1.0.0+b2", "1.0.0+b1"),
            ("1.0.0-rc.1", "1.0.0-rc.1"),
            ("", "1.0.0"),
            ("1.0", "0.9.0"),
            ("1.0.0", ""),
            ("1.1.0", "1.2.0"),
            ("v2.0.0", "1.0.0"),
            ("1.0.0-", "0.1.0"),
            // Past u64 is not a version semver reads.
            ("100000000000000000000.0.0", "99999999999999999999.0.0"),
        ];
        for (a, b) in not_newer {
            assert!(!newer_str(a, b), "{a} should not be newer than {b}");
        }
    }

    #[test]
    fn version_output_parsing() {
        assert_eq!(
            parse_version_output("trantor 0.2.0\n"),
            Some(semver::Version::new(0, 2, 0))
        );
        assert_eq!(
            parse_version_output("trantor v1.0.0-rc.1"),
            semver::Version::parse("1.0.0-rc.1").ok()
        );
        assert_eq!(parse_version_output("trantor (dev)"), None);
        assert_eq!(parse_version_output(""), None);
    }

    #[test]
    fn state_round_trips_with_original_field_names_and_unknown_fields() {
        let json = r#"{"cursor":41,"turn":3,"sid":"s1","sessionCard":7,"retryAt":0,
            "deliveryFails":1,"noDeliveryRetry":true,"askReleased":false,"lastTurnAt":5,
            "attempted":["1.2.0"],"futureField":{"x":1}}"#;
        let s: ReleaseState = serde_json::from_str(json).expect("parse");
        assert_eq!(s.cursor, 41);
        assert_eq!(s.session_card, 7);
        assert_eq!(s.delivery_fails, 1);
        assert!(s.no_delivery_retry);
        assert_eq!(s.attempted, vec!["1.2.0".to_string()]);
        let back = serde_json::to_value(&s).expect("ser");
        assert_eq!(back["futureField"]["x"], 1);
        assert_eq!(back["sessionCard"], 7);
        // Missing everything is a default state.
        let empty: ReleaseState = serde_json::from_str("{}").expect("parse");
        assert_eq!(empty, ReleaseState::default());
    }

    #[test]
    fn taking_the_state_removes_it_from_the_environment() {
        // A name of its own so no other test's environment is touched.
        let name = "CREW_RELEASE_STATE_UNIT_TEST";
        // SAFETY: this variable is only read by this test.
        unsafe { std::env::set_var(name, r#"{"cursor":9,"attempted":["0.2.0"]}"#) };
        let s = take_state_from(name).expect("state");
        assert_eq!(s.cursor, 9);
        assert!(std::env::var_os(name).is_none());
        // A child does not inherit it.
        let out = std::process::Command::new("sh")
            .args(["-c", &format!("printf %s \"${name}\"")])
            .output()
            .expect("sh");
        assert!(out.stdout.is_empty());
        assert!(take_state_from(name).is_none());
        // A broken value is removed too and reads as a normal boot.
        unsafe { std::env::set_var(name, "{not json") };
        assert!(take_state_from(name).is_none());
        assert!(std::env::var_os(name).is_none());
    }

    #[test]
    fn oversized_state_drops_the_queue_copies() {
        let mut s = ReleaseState {
            cursor: 5,
            ..Default::default()
        };
        s.wake = (0..100)
            .map(|i| serde_json::json!({"id": i, "text": "x".repeat(2000)}))
            .collect();
        let json = encode_state(&s).expect("encode");
        assert!(json.len() <= MAX_STATE_ENV_BYTES);
        let back: ReleaseState = serde_json::from_str(&json).expect("parse");
        assert_eq!(back.cursor, 5);
        assert!(back.wake.is_empty());
    }

    fn write_script(path: &Path, version: &str) {
        let tmp = path.with_extension("tmp");
        std::fs::write(
            &tmp,
            format!(
                "#!/bin/sh\n[ \"$1\" = --version ] && echo 'trantor {version}' && exit 0\nexit 3\n"
            ),
        )
        .expect("write");
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        std::fs::rename(&tmp, path).expect("rename");
    }

    #[test]
    fn watcher_sees_upgrades_but_never_downgrades_or_repeats() {
        let tmp = tempfile::tempdir().expect("tmp");
        let bin = tmp.path().join("trantor");
        write_script(&bin, "1.1.0");
        let mut w = ReleaseWatcher::new(bin.clone()).expect("watch");
        assert_eq!(w.running_version(), &semver::Version::new(1, 1, 0));
        assert_eq!(w.newer_available(), None, "same version never restarts");

        write_script(&bin, "1.0.9");
        assert_eq!(w.newer_available(), None, "a downgrade never restarts");

        write_script(&bin, "1.1.0");
        assert_eq!(w.newer_available(), None);

        write_script(&bin, "1.2.0-rc.1");
        assert_eq!(
            w.newer_available(),
            semver::Version::parse("1.2.0-rc.1").ok()
        );

        write_script(&bin, "1.2.0");
        let target = w.newer_available().expect("newer");
        assert_eq!(target, semver::Version::new(1, 2, 0));
        // Make the exec fail (a file that is not executable): it must return, remember the
        // version and never offer it again.
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        let err = w.exec(&target, &ReleaseState::default());
        assert!(!err.to_string().is_empty());
        assert!(w.attempted().contains(&"1.2.0".to_string()));
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        assert_eq!(w.newer_available(), None, "a tried version is not retried");
        // A yet newer version can still be tried.
        write_script(&bin, "1.3.0");
        assert_eq!(w.newer_available(), Some(semver::Version::new(1, 3, 0)));
    }

    const EXEC_CHILD_DIR: &str = "TRANTOR_RELEASE_TEST_EXEC_DIR";

    /// Body of the child process of `exec_replaces_the_image_with_the_same_pid`; a no-op in a
    /// normal test run. It watches a wrapper, sees it upgraded, and execs it.
    #[test]
    fn release_exec_child() {
        let Some(dir) = std::env::var_os(EXEC_CHILD_DIR) else {
            return;
        };
        let dir = PathBuf::from(dir);
        let bin = dir.join("trantor");
        let mut w = ReleaseWatcher::new(bin.clone()).expect("watch");
        assert_eq!(w.running_version(), &semver::Version::new(0, 1, 0));
        // The upgraded image records what it was given instead of running a runner.
        let record = dir.join("record");
        let script = format!(
            "#!/bin/sh\n[ \"$1\" = --version ] && echo 'trantor 0.2.0' && exit 0\n\
             {{ echo \"pid=$$\"; echo \"argv=$0 $*\"; echo \"state=$CREW_RELEASE_STATE\"; \
             echo \"keep=$KEEP_ME\"; }} > '{}'\n",
            record.display()
        );
        let tmp = dir.join("trantor.new");
        std::fs::write(&tmp, script).expect("write");
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        std::fs::rename(&tmp, &bin).expect("rename");
        let target = w.newer_available().expect("newer");
        let state = ReleaseState {
            cursor: 77,
            turn: 3,
            ..Default::default()
        };
        let err = w.exec(&target, &state);
        panic!("exec returned: {err:#}");
    }

    #[test]
    fn exec_replaces_the_image_with_the_same_pid() {
        let tmp = tempfile::tempdir().expect("tmp");
        write_script(&tmp.path().join("trantor"), "0.1.0");
        let exe = std::env::current_exe().expect("exe");
        let child = std::process::Command::new(&exe)
            .args([
                "--exact",
                "periphery::release::tests::release_exec_child",
                "--nocapture",
            ])
            .env(EXEC_CHILD_DIR, tmp.path())
            .env("KEEP_ME", "kept")
            .env(RELEASE_STATE_ENV, r#"{"attempted":["0.0.9"]}"#)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn");
        let pid = child.id();
        let out = child.wait_with_output().expect("wait");
        assert!(out.status.success(), "the exec'd image failed");
        let record = std::fs::read_to_string(tmp.path().join("record")).expect("record");
        let field = |k: &str| {
            record
                .lines()
                .find_map(|l| l.strip_prefix(&format!("{k}=")))
                .unwrap_or("")
                .to_string()
        };
        assert_eq!(field("pid"), pid.to_string(), "same PID");
        assert!(
            field("argv").starts_with(&format!(
                "{} --exact periphery::release::tests::release_exec_child",
                tmp.path().join("trantor").display()
            )),
            "argv kept, argv[0] the installed path: {record}"
        );
        assert_eq!(field("keep"), "kept", "environment kept");
        let state: ReleaseState = serde_json::from_str(&field("state")).expect("state json");
        assert_eq!(state.cursor, 77);
        assert_eq!(state.turn, 3);
        assert_eq!(state.from_version, "0.1.0");
        assert_eq!(
            state.attempted,
            vec!["0.0.9".to_string(), "0.2.0".to_string()]
        );
    }

    #[test]
    fn unchanged_file_is_not_probed_again() {
        let tmp = tempfile::tempdir().expect("tmp");
        let bin = tmp.path().join("trantor");
        let log = tmp.path().join("probes");
        let script = format!(
            "#!/bin/sh\necho x >> '{}'\necho 'trantor 0.1.0'\n",
            log.display()
        );
        std::fs::write(&bin, script).expect("write");
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let mut w = ReleaseWatcher::new(bin).expect("watch");
        for _ in 0..5 {
            assert_eq!(w.newer_available(), None);
        }
        let probes = std::fs::read_to_string(&log).expect("log");
        assert_eq!(probes.lines().count(), 1, "only the start-up probe ran");
    }

    #[test]
    fn argv0_resolution() {
        let tmp = tempfile::tempdir().expect("tmp");
        let bin = tmp.path().join("mytool");
        std::fs::write(&bin, "#!/bin/sh\n").expect("write");
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let path_var = std::env::join_paths([Path::new("/nonexistent"), tmp.path()]).expect("join");
        assert_eq!(
            resolve_argv0(std::ffi::OsStr::new("mytool"), Some(&path_var)),
            Some(bin.clone())
        );
        assert_eq!(
            resolve_argv0(bin.as_os_str(), None),
            Some(bin.clone()),
            "an absolute argv[0] is kept"
        );
        assert_eq!(
            resolve_argv0(std::ffi::OsStr::new("nope-xyz"), Some(&path_var)),
            None
        );
        assert_eq!(
            resolve_argv0(std::ffi::OsStr::new(""), Some(&path_var)),
            None
        );
    }
}

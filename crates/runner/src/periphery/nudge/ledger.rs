//! The shared nudge ledger (docs/runner.md §16).
//!
//! Several senders may nudge a seat about the same unread message: this runner's duty turns and
//! the wake-nudge daemon (which may be the original JavaScript one). The ledger makes exactly one
//! of them send per id: a sender *reserves* ids before sending (check-and-stamp in one locked
//! step), *releases* them when the send could not be verified, and *confirms* them when it landed.
//! Stamps expire after 10 minutes, so a still-unread id can be nudged again later.
//!
//! Locking is two-layered. Our own processes serialise on an `flock` of `<file>.flock`, which the
//! kernel releases when a holder dies, so a crashed runner can never wedge the ledger. Inside that,
//! the original's `<file>.lock` (created O_EXCL, removed after) is taken too, so a JavaScript
//! wake daemon sharing the bus directory is excluded as well; a `.lock` older than 30 s is a
//! leftover of a crashed writer and is broken. If either lock cannot be had within 100 × 10 ms,
//! nothing is reserved and the failure is logged: a lock problem never stops the runner.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// How long a stamp keeps other senders off an id (docs/runner.md §16).
pub const NUDGE_TTL: Duration = Duration::from_secs(10 * 60);
/// Lock acquisition attempts and their spacing (docs/runner.md §16).
pub(super) const LOCK_ATTEMPTS: u32 = 100;
const LOCK_RETRY: Duration = Duration::from_millis(10);
/// A `.lock` file older than this belongs to a writer that died holding it.
const STALE_LOCK: Duration = Duration::from_secs(30);

/// Why a ledger operation failed.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    /// The lock could not be taken within the attempts.
    #[error("could not lock {0}")]
    Locked(PathBuf),
    /// Reading or writing the ledger failed.
    #[error("nudge ledger {path}: {source}")]
    Io {
        /// The file involved.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
}

/// One stamp: who reserved an id and when.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Stamp {
    /// When it was stamped, ms since the epoch.
    pub at: i64,
    /// The holder that stamped it.
    #[serde(default)]
    pub by: String,
    /// Set once the holder confirmed the send landed; a confirmed stamp is never released.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sent: bool,
}

/// The file content: `{version:1, nudged:{"<id>":{at, by}}}` (docs/runner.md §16).
#[derive(Serialize, Deserialize, Clone, Debug, Default)]
struct LedgerFile {
    #[serde(default = "one")]
    version: u32,
    #[serde(default)]
    nudged: BTreeMap<String, Stamp>,
    /// Anything another writer put there is preserved.
    #[serde(flatten)]
    extra: serde_json::Map<String, serde_json::Value>,
}

pub(super) fn one() -> u32 {
    1
}

/// The result of a reservation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reservation {
    /// Ids this holder may now send (stamped by it).
    pub allowed: Vec<i64>,
    /// Ids someone stamped within the TTL: do not send.
    pub skipped: Vec<i64>,
}

/// The shared nudge ledger under the bus directory.
#[derive(Debug, Clone)]
pub struct NudgeLedger {
    path: PathBuf,
    ttl: Duration,
    attempts: u32,
}

impl NudgeLedger {
    /// The crew-wide ledger `<bus>/nudged.json`. Message ids are hub-global, so one file can
    /// serve every recipient; use [`NudgeLedger::for_recipient`] to share the per-recipient file
    /// the original's wake daemon stamps.
    pub fn open(bus_dir: &Path) -> NudgeLedger {
        NudgeLedger {
            path: bus_dir.join("nudged.json"),
            ttl: NUDGE_TTL,
            attempts: LOCK_ATTEMPTS,
        }
    }

    /// The per-recipient ledger `<bus>/nudged-<recipient>.json` of docs/runner.md §16 (characters
    /// outside `[A-Za-z0-9_.-]` become `_`), shared with the wake-nudge daemon.
    pub fn for_recipient(self, recipient: &str) -> NudgeLedger {
        let safe = trantor_proto::fsx::safe_file_name(recipient);
        let dir = self
            .path
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default();
        NudgeLedger {
            path: dir.join(format!("nudged-{safe}.json")),
            ..self
        }
    }

    /// How many 10 ms attempts to make for the lock (default 100).
    #[cfg(test)]
    pub fn with_lock_attempts(self, attempts: u32) -> NudgeLedger {
        NudgeLedger {
            attempts: attempts.max(1),
            ..self
        }
    }

    /// The ledger file.
    #[cfg(test)]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reserve `ids` for `holder` before sending; returns the ids it may send. Ids stamped by
    /// anyone within the TTL are left out (logged "already nudged #id"). Of several concurrent
    /// reservers of one id — threads or processes — exactly one gets it. If the lock cannot be
    /// taken, nothing is reserved and the failure is logged.
    pub fn reserve(&self, ids: &[i64], holder: &str) -> Vec<i64> {
        match self.try_reserve(ids, holder) {
            Ok(r) => r.allowed,
            Err(e) => {
                tracing::warn!("nudge ledger: {e} — reserving nothing");
                Vec::new()
            }
        }
    }

    /// [`NudgeLedger::reserve`] with the skipped ids and the error made visible.
    pub fn try_reserve(&self, ids: &[i64], holder: &str) -> Result<Reservation, LedgerError> {
        self.reserve_at(ids, holder, trantor_proto::now_ms())
    }

    fn reserve_at(&self, ids: &[i64], holder: &str, now: i64) -> Result<Reservation, LedgerError> {
        let ids: BTreeSet<i64> = ids.iter().copied().collect();
        if ids.is_empty() {
            return Ok(Reservation::default());
        }
        let ttl = ttl_ms(self.ttl);
        self.with_locked(|file| {
            let mut res = Reservation::default();
            for id in &ids {
                let key = id.to_string();
                match file.nudged.get(&key) {
                    Some(s) if now - s.at < ttl => {
                        tracing::info!("already nudged #{id} (by {})", s.by);
                        res.skipped.push(*id);
                    }
                    _ => {
                        file.nudged.insert(
                            key,
                            Stamp {
                                at: now,
                                by: holder.to_string(),
                                sent: false,
                            },
                        );
                        res.allowed.push(*id);
                    }
                }
            }
            file.nudged.retain(|_, s| now - s.at < ttl);
            (res, true)
        })
    }

    /// Give back `ids` after a send that could not be verified, so another sender may nudge them
    /// at once. Only this holder's unconfirmed stamps within the TTL are removed (an empty
    /// `holder` matches any); another sender's stamp is never stolen. Failures are logged.
    pub fn release(&self, ids: &[i64], holder: &str) {
        if let Err(e) = self.release_at(ids, holder, trantor_proto::now_ms()) {
            tracing::warn!("nudge ledger release: {e}");
        }
    }

    fn release_at(&self, ids: &[i64], holder: &str, now: i64) -> Result<(), LedgerError> {
        if ids.is_empty() {
            return Ok(());
        }
        let ttl = ttl_ms(self.ttl);
        self.with_locked(|file| {
            let mut changed = false;
            for id in ids {
                let key = id.to_string();
                let mine = file.nudged.get(&key).is_some_and(|s| {
                    now - s.at < ttl && !s.sent && (holder.is_empty() || s.by == holder)
                });
                if mine {
                    file.nudged.remove(&key);
                    changed = true;
                }
            }
            ((), changed)
        })
    }

    /// Record that the sends of `ids` landed: this holder's stamps are marked sent and their TTL
    /// restarts now, so the recipient gets the full quiet period after the actual nudge.
    pub fn confirm(&self, ids: &[i64], holder: &str) {
        if let Err(e) = self.confirm_at(ids, holder, trantor_proto::now_ms()) {
            tracing::warn!("nudge ledger confirm: {e}");
        }
    }

    fn confirm_at(&self, ids: &[i64], holder: &str, now: i64) -> Result<(), LedgerError> {
        if ids.is_empty() {
            return Ok(());
        }
        self.with_locked(|file| {
            let mut changed = false;
            for id in ids {
                if let Some(s) = file.nudged.get_mut(&id.to_string())
                    && (holder.is_empty() || s.by == holder)
                {
                    s.at = now;
                    s.sent = true;
                    changed = true;
                }
            }
            ((), changed)
        })
    }

    /// The current stamps (a missing or malformed file reads as empty). For diagnostics.
    #[cfg(test)]
    pub fn stamps(&self) -> BTreeMap<i64, Stamp> {
        read_file(&self.path)
            .nudged
            .into_iter()
            .filter_map(|(k, v)| k.trim().parse().ok().map(|id| (id, v)))
            .collect()
    }

    /// Run `f` on the file content under both locks; write it back atomically when `f` says so.
    fn with_locked<T>(
        &self,
        f: impl FnOnce(&mut LedgerFile) -> (T, bool),
    ) -> Result<T, LedgerError> {
        let _guard = LedgerLock::acquire(&self.path, self.attempts)?;
        let mut file = read_file(&self.path);
        #[cfg(test)]
        overlap::after_read(&self.path);
        let (out, changed) = f(&mut file);
        if changed {
            file.version = 1;
            write_atomic(&self.path, &file)?;
        }
        Ok(out)
    }
}

fn ttl_ms(ttl: Duration) -> i64 {
    i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX)
}

fn read_file(path: &Path) -> LedgerFile {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_else(|e| {
            tracing::warn!(
                "nudge ledger {} unreadable ({e}); starting empty",
                path.display()
            );
            LedgerFile::default()
        }),
        Err(_) => LedgerFile::default(),
    }
}

pub(super) fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> LedgerError + '_ {
    move |source| LedgerError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn write_atomic(path: &Path, file: &LedgerFile) -> Result<(), LedgerError> {
    crate::sys::fsx::write_json_atomic(path, file).map_err(io_err(path))
}

/// Both locks of a ledger file, released on drop.
pub(super) struct LedgerLock {
    _flock: nix::fcntl::Flock<File>,
    excl: PathBuf,
}

impl LedgerLock {
    pub(super) fn acquire(path: &Path, attempts: u32) -> Result<LedgerLock, LedgerError> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(io_err(dir))?;
        }
        let with_ext = |ext: &str| {
            let mut s = path.as_os_str().to_owned();
            s.push(ext);
            PathBuf::from(s)
        };
        let flock_path = with_ext(".flock");
        let excl = with_ext(".lock");
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&flock_path)
            .map_err(io_err(&flock_path))?;
        let mut tries = 0;
        let flock = loop {
            match nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock) {
                Ok(l) => break l,
                Err((f, _)) => {
                    #[cfg(test)]
                    overlap::lock_busy(path);
                    tries += 1;
                    if tries >= attempts {
                        return Err(LedgerError::Locked(path.to_path_buf()));
                    }
                    file = f;
                    std::thread::sleep(LOCK_RETRY);
                }
            }
        };
        // The original's lock, for a JavaScript writer on the same bus directory. We already
        // exclude our own processes, so breaking a stale one cannot race another runner.
        loop {
            match OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&excl)
            {
                Ok(mut f) => {
                    let _ = write!(f, "{}", std::process::id());
                    break;
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    let stale = std::fs::metadata(&excl)
                        .and_then(|m| m.modified())
                        .ok()
                        .and_then(|t| t.elapsed().ok())
                        .is_some_and(|age| age > STALE_LOCK);
                    if stale {
                        tracing::warn!("breaking stale nudge ledger lock {}", excl.display());
                        let _ = std::fs::remove_file(&excl);
                        continue;
                    }
                    tries += 1;
                    if tries >= attempts {
                        return Err(LedgerError::Locked(path.to_path_buf()));
                    }
                    std::thread::sleep(LOCK_RETRY);
                }
                Err(e) => return Err(io_err(&excl)(e)),
            }
        }
        Ok(LedgerLock {
            _flock: flock,
            excl,
        })
    }
}

impl Drop for LedgerLock {
    fn drop(&mut self) {
        // Removed while the flock is still held (fields drop after this), so no other runner can
        // be between its create_new and this remove.
        let _ = std::fs::remove_file(&self.excl);
    }
}

/// A test-only rendezvous that forces concurrent ledger operations on one file to overlap, so
/// a test of the lock cannot pass by the racers simply missing each other.
#[cfg(test)]
mod overlap {
    use std::collections::HashMap;
    use std::path::{Path, PathBuf};
    use std::sync::{Arc, Condvar, Mutex};
    use std::time::Duration;

    /// The state of one file's rendezvous.
    #[derive(Default)]
    pub struct Probe {
        /// (reads seen, lock contention seen).
        state: Mutex<(usize, bool)>,
        cv: Condvar,
    }

    impl Probe {
        /// Whether a second racer reached the file (read it or found it locked) while the first
        /// held its read.
        pub fn overlapped(&self) -> bool {
            self.state.lock().map(|s| s.0 >= 2 || s.1).unwrap_or(false)
        }
    }

    static PROBES: Mutex<Option<HashMap<PathBuf, Arc<Probe>>>> = Mutex::new(None);

    fn get(path: &Path) -> Option<Arc<Probe>> {
        PROBES.lock().ok()?.as_ref()?.get(path).cloned()
    }

    /// Start forcing overlaps on the ledger file `path`.
    pub fn install(path: &Path) -> Arc<Probe> {
        let probe = Arc::new(Probe::default());
        if let Ok(mut map) = PROBES.lock() {
            map.get_or_insert_with(HashMap::new)
                .insert(path.to_path_buf(), probe.clone());
        }
        probe
    }

    /// Called between the read and the write: the first reader waits (up to 30 s) until
    /// another racer has read too or has found the lock taken.
    pub fn after_read(path: &Path) {
        let Some(p) = get(path) else { return };
        let Ok(mut s) = p.state.lock() else { return };
        s.0 += 1;
        p.cv.notify_all();
        let _ =
            p.cv.wait_timeout_while(s, Duration::from_secs(30), |s| s.0 < 2 && !s.1);
    }

    /// Called when an attempt finds the lock taken.
    pub fn lock_busy(path: &Path) {
        let Some(p) = get(path) else { return };
        if let Ok(mut s) = p.state.lock() {
            s.1 = true;
            p.cv.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserve_then_skip_then_expire() {
        let tmp = tempfile::tempdir().expect("tmp");
        let l = NudgeLedger::open(tmp.path()).for_recipient("codex:p");
        assert!(l.path().ends_with("nudged-codex_p.json"));
        let t0 = 1_000_000;
        let r = l.reserve_at(&[5, 6, 5], "a", t0).expect("reserve");
        assert_eq!(r.allowed, vec![5, 6]);
        let r = l.reserve_at(&[5, 7], "b", t0 + 1000).expect("reserve");
        assert_eq!(r.allowed, vec![7]);
        assert_eq!(r.skipped, vec![5]);
        // After the TTL the id can be nudged again.
        let ttl = ttl_ms(NUDGE_TTL);
        let r = l.reserve_at(&[5], "b", t0 + ttl).expect("reserve");
        assert_eq!(r.allowed, vec![5]);
        // Expired stamps are pruned (6 from t0), live ones kept.
        let stamps = l.stamps();
        assert!(!stamps.contains_key(&6));
        assert_eq!(stamps.get(&5).map(|s| s.by.as_str()), Some("b"));
        // Mode 0600.
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(l.path())
            .expect("meta")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        // Empty ids reserve nothing and write nothing.
        assert_eq!(l.reserve(&[], "a"), Vec::<i64>::new());
    }

    #[test]
    fn release_only_frees_the_holders_live_unconfirmed_stamps() {
        let tmp = tempfile::tempdir().expect("tmp");
        let l = NudgeLedger::open(tmp.path());
        let t0 = 5_000_000;
        l.reserve_at(&[1, 2, 3], "a", t0).expect("reserve");
        l.reserve_at(&[4], "b", t0).expect("reserve");
        l.confirm_at(&[3], "a", t0 + 10).expect("confirm");
        l.release_at(&[1, 3, 4], "a", t0 + 20).expect("release");
        let stamps = l.stamps();
        assert!(!stamps.contains_key(&1), "released");
        assert!(stamps.contains_key(&2), "not asked");
        assert!(stamps.get(&3).is_some_and(|s| s.sent), "confirmed stays");
        assert!(
            stamps.contains_key(&4),
            "another holder's stamp is never stolen"
        );
        // Released ids are free for another sender at once.
        let r = l.reserve_at(&[1], "b", t0 + 30).expect("reserve");
        assert_eq!(r.allowed, vec![1]);
    }

    #[test]
    fn malformed_file_reads_as_empty() {
        let tmp = tempfile::tempdir().expect("tmp");
        let l = NudgeLedger::open(tmp.path());
        std::fs::write(l.path(), "{garbage").expect("write");
        assert_eq!(l.reserve(&[9], "a"), vec![9]);
    }

    #[test]
    fn unavailable_lock_reserves_nothing_and_does_not_panic() {
        let tmp = tempfile::tempdir().expect("tmp");
        let l = NudgeLedger::open(tmp.path()).with_lock_attempts(5);
        // Another holder (a separate open file description, as another process would have).
        let holder = LedgerLock::acquire(l.path(), 1).expect("lock");
        assert_eq!(l.reserve(&[1, 2], "a"), Vec::<i64>::new());
        assert!(matches!(
            l.try_reserve(&[1], "a"),
            Err(LedgerError::Locked(_))
        ));
        l.release(&[1], "a");
        l.confirm(&[1], "a");
        drop(holder);
        assert_eq!(l.reserve(&[1, 2], "a"), vec![1, 2]);
    }

    #[test]
    fn a_stale_original_lock_is_broken_a_fresh_one_respected() {
        let tmp = tempfile::tempdir().expect("tmp");
        let l = NudgeLedger::open(tmp.path()).with_lock_attempts(3);
        let excl = tmp.path().join("nudged.json.lock");
        std::fs::write(&excl, "123").expect("write");
        assert_eq!(
            l.reserve(&[1], "a"),
            Vec::<i64>::new(),
            "a live JS writer holds it"
        );
        let old = std::time::SystemTime::now() - Duration::from_secs(120);
        File::options()
            .write(true)
            .open(&excl)
            .and_then(|f| f.set_modified(old))
            .expect("age");
        assert_eq!(l.reserve(&[1], "a"), vec![1]);
        assert!(!excl.exists(), "our own .lock is removed after use");
    }

    const CHILD_DIR: &str = "TRANTOR_NUDGE_TEST_CHILD_DIR";
    const CHILD_NAME: &str = "TRANTOR_NUDGE_TEST_CHILD_NAME";

    /// Body of a child process of `one_winner_across_processes`; a no-op in a normal test run.
    #[test]
    fn ledger_child_process() {
        let (Some(dir), Some(name)) = (std::env::var_os(CHILD_DIR), std::env::var_os(CHILD_NAME))
        else {
            return;
        };
        let dir = PathBuf::from(dir);
        let name = name.to_string_lossy().into_owned();
        let go = dir.join("go");
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while !go.exists() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        let ids: Vec<i64> = (1..=20).collect();
        // A generous lock budget: under a 12-process stampede on a loaded machine 1 s is tight.
        let l = NudgeLedger::open(&dir)
            .for_recipient("codex:p")
            .with_lock_attempts(3000);
        let won = l.try_reserve(&ids, &name).expect("reserve");
        let text: Vec<String> = won.allowed.iter().map(i64::to_string).collect();
        std::fs::write(dir.join(format!("won-{name}")), text.join(",")).expect("result");
    }

    #[test]
    fn one_winner_across_processes() {
        let tmp = tempfile::tempdir().expect("tmp");
        let exe = std::env::current_exe().expect("exe");
        let n = 12;
        let mut children = Vec::new();
        for i in 0..n {
            let child = std::process::Command::new(&exe)
                .args([
                    "--exact",
                    "periphery::nudge::ledger::tests::ledger_child_process",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(CHILD_DIR, tmp.path())
                .env(CHILD_NAME, format!("p{i}"))
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .expect("spawn child");
            children.push(child);
        }
        std::fs::write(tmp.path().join("go"), "").expect("go");
        for mut c in children {
            assert!(c.wait().expect("wait").success(), "a child failed");
        }
        let mut owners: BTreeMap<i64, Vec<String>> = BTreeMap::new();
        for i in 0..n {
            let name = format!("p{i}");
            let text = std::fs::read_to_string(tmp.path().join(format!("won-{name}")))
                .expect("child result");
            for id in text.split(',').filter(|s| !s.is_empty()) {
                owners
                    .entry(id.parse().expect("id"))
                    .or_default()
                    .push(name.clone());
            }
        }
        assert_eq!(owners.len(), 20, "every id was won: {owners:?}");
        for (id, who) in &owners {
            assert_eq!(who.len(), 1, "id {id} won by {who:?}");
        }
        let stamps = NudgeLedger::open(tmp.path())
            .for_recipient("codex:p")
            .stamps();
        for (id, who) in &owners {
            assert_eq!(stamps.get(id).map(|s| &s.by), Some(&who[0]));
        }
    }

    /// The racers are forced to overlap: the first reader waits, between its read and its write,
    /// until another racer has read the file too (an unlocked ledger: both then stamp the id and
    /// both win) or has found the lock taken (a locked ledger: it waits its turn and skips).
    #[test]
    fn one_winner_across_threads() {
        let tmp = tempfile::tempdir().expect("tmp");
        let dir = tmp.path().to_path_buf();
        let probe = overlap::install(&dir.join("nudged.json"));
        let handles: Vec<_> = (0..8)
            .map(|i| {
                let dir = dir.clone();
                std::thread::spawn(move || {
                    let l = NudgeLedger::open(&dir).with_lock_attempts(3000);
                    (i, l.reserve(&[42], &format!("t{i}")))
                })
            })
            .collect();
        let winners: Vec<_> = handles
            .into_iter()
            .map(|h| h.join().expect("join"))
            .filter(|(_, won)| !won.is_empty())
            .collect();
        assert_eq!(winners.len(), 1, "{winners:?}");
        assert!(probe.overlapped(), "the racers never met inside the ledger");
    }
}

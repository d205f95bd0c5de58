//! The shared nudge ledger (reference §15) and duty-nudge planning (reference §14).
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

/// How long a stamp keeps other senders off an id (reference §15.3).
pub const NUDGE_TTL: Duration = Duration::from_secs(10 * 60);
/// Lock acquisition attempts and their spacing (reference §15.2).
const LOCK_ATTEMPTS: u32 = 100;
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

/// The file content: `{version:1, nudged:{"<id>":{at, by}}}` (reference §15.1).
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

fn one() -> u32 {
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

    /// The per-recipient ledger `<bus>/nudged-<recipient>.json` of reference §15.1 (characters
    /// outside `[A-Za-z0-9_.-]` become `_`), shared with the wake-nudge daemon.
    pub fn for_recipient(self, recipient: &str) -> NudgeLedger {
        let safe: String = recipient
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-') {
                    c
                } else {
                    '_'
                }
            })
            .collect();
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

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> LedgerError + '_ {
    move |source| LedgerError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Write `value` as JSON to `path` through `<path>.<pid>.tmp` + rename, mode 0600.
pub(crate) fn write_json_atomic<T: Serialize>(path: &Path, value: &T) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let bytes = serde_json::to_vec(value).map_err(std::io::Error::other)?;
    let mut tmp_name = path.as_os_str().to_owned();
    tmp_name.push(format!(".{}.tmp", std::process::id()));
    let tmp = PathBuf::from(tmp_name);
    let result = (|| {
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(&bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

fn write_atomic(path: &Path, file: &LedgerFile) -> Result<(), LedgerError> {
    write_json_atomic(path, file).map_err(io_err(path))
}

/// Both locks of a ledger file, released on drop.
struct LedgerLock {
    _flock: nix::fcntl::Flock<File>,
    excl: PathBuf,
}

impl LedgerLock {
    fn acquire(path: &Path, attempts: u32) -> Result<LedgerLock, LedgerError> {
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

// ---------------------------------------------------------------------------------------------
// Duty nudges (reference §14), only when RUNNER_DUTY_NUDGES=1.
// ---------------------------------------------------------------------------------------------

/// How a duty nudge message starts; [`observed_duty_nudge_ids`] only counts messages that do.
pub const NUDGE_PREFIX: &str = "Trantor delivery nudge from the duty seat:";

/// The ids (`#N`) of the duty nudges a claude turn sent: `SendMessage` tool calls in the
/// transcripts under `transcript_dir` written since `since_ms` whose text starts with
/// [`NUDGE_PREFIX`]. Unreadable files and lines are skipped.
#[cfg(test)]
pub fn observed_duty_nudge_ids(transcript_dir: &Path, since_ms: i64) -> BTreeSet<i64> {
    let mut ids = BTreeSet::new();
    let Ok(entries) = std::fs::read_dir(transcript_dir) else {
        return ids;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().and_then(|e| e.to_str()) != Some("jsonl") {
            continue;
        }
        let fresh = entry
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .is_some_and(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX) >= since_ms);
        if !fresh {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let Ok(row) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            let mut uses = Vec::new();
            collect_send_message_uses(&row, &mut uses);
            for input in uses {
                let text = input
                    .get("message")
                    .or_else(|| input.get("content"))
                    .and_then(|v| v.as_str())
                    .unwrap_or("");
                if text.starts_with(NUDGE_PREFIX) {
                    ids.extend(hash_ids(text));
                }
            }
        }
    }
    ids
}

#[cfg(test)]
fn collect_send_message_uses<'a>(v: &'a serde_json::Value, out: &mut Vec<&'a serde_json::Value>) {
    match v {
        serde_json::Value::Object(map) => {
            if map.get("type").and_then(|t| t.as_str()) == Some("tool_use")
                && map.get("name").and_then(|n| n.as_str()) == Some("SendMessage")
                && let Some(input) = map.get("input")
            {
                out.push(input);
            }
            for child in map.values() {
                collect_send_message_uses(child, out);
            }
        }
        serde_json::Value::Array(items) => {
            for child in items {
                collect_send_message_uses(child, out);
            }
        }
        _ => {}
    }
}

/// Every `#N` in `text`.
#[cfg(test)]
fn hash_ids(text: &str) -> Vec<i64> {
    text.match_indices('#')
        .filter_map(|(i, _)| {
            let digits: String = text[i + 1..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            digits.parse().ok()
        })
        .collect()
}

/// One undelivered message a `hub:duty` escalation names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Escalation {
    /// The id of the escalation message that named it.
    pub escalation_id: i64,
    /// The undelivered message's id.
    pub id: i64,
    /// Who sent it.
    pub sender: String,
    /// Who has not read it.
    pub recipient: String,
    /// The recipient's project (its suffix after the last `:`).
    pub project: String,
}

/// Parse the escalations in a `hub:duty` message: `UNDELIVERED … #<id> <sender> -> <recipient>`
/// (`→` works too; reference §14.1). Every such triple after `UNDELIVERED` counts (the original
/// read only the first). Messages from anyone else, or without `UNDELIVERED`, give nothing.
pub fn duty_escalations(msg: &trantor_proto::Message) -> Vec<Escalation> {
    if msg.from != "hub:duty" {
        return Vec::new();
    }
    let Some(pos) = msg.text.find("UNDELIVERED") else {
        return Vec::new();
    };
    let rest = &msg.text[pos..];
    let mut out = Vec::new();
    for (i, _) in rest.match_indices('#') {
        let tail = &rest[i + 1..];
        let digits: String = tail.chars().take_while(char::is_ascii_digit).collect();
        let Ok(id) = digits.parse::<i64>() else {
            continue;
        };
        let mut words = tail[digits.len()..].split_whitespace();
        let (Some(sender), Some(arrow), Some(recipient)) =
            (words.next(), words.next(), words.next())
        else {
            continue;
        };
        if arrow != "->" && arrow != "→" {
            continue;
        }
        // The recipient ends at an em dash or trailing punctuation.
        let recipient = recipient
            .split('—')
            .next()
            .unwrap_or("")
            .trim_end_matches([',', ';', '.', ')'])
            .to_string();
        if recipient.is_empty() {
            continue;
        }
        let project = trantor_proto::session_project(&recipient).to_string();
        if out.iter().any(|e: &Escalation| e.id == id) {
            continue;
        }
        out.push(Escalation {
            escalation_id: msg.id,
            id,
            sender: sender.to_string(),
            recipient,
            project,
        });
    }
    out
}

/// How a recipient stands when a duty turn plans its nudges.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecipientState {
    /// Mid-turn: it will read its inbox anyway; nudging is a no-op.
    Busy,
    /// No such session here; nudging cannot help.
    Unknown(String),
    /// Idle and known: a nudge is owed.
    Actionable,
}

/// One recipient and the ids a duty turn must nudge it about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NudgeTarget {
    /// The recipient session.
    pub recipient: String,
    /// Its project.
    pub project: String,
    /// The unread ids to nudge about.
    pub ids: Vec<i64>,
}

/// What a duty turn owes, after claims and the ledger.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DutyPlan {
    /// The claim owner (`<runner id>:<turn+1>`).
    pub owner: String,
    /// Targets the turn must nudge (mandatory directive).
    pub targets: Vec<NudgeTarget>,
    /// Recipients that are busy (no-op).
    pub noop: Vec<NudgeTarget>,
    /// Recipients that cannot be nudged, with the reason (terminal).
    pub terminal: Vec<(NudgeTarget, String)>,
    /// Ids the ledger said someone else already nudged.
    pub skipped: Vec<i64>,
    /// Escalation message ids whose ids are all handled elsewhere (their wakes drop from the
    /// turn, reference §14.7).
    pub dropped_escalations: Vec<i64>,
}

impl DutyPlan {
    /// Every id the turn is told to nudge.
    pub fn claimed_ids(&self) -> BTreeSet<i64> {
        self.targets
            .iter()
            .flat_map(|t| t.ids.iter().copied())
            .collect()
    }
}

/// A planned claim in the duty state file.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DutyClaim {
    /// The claiming owner.
    pub owner: String,
    /// Its process id (a dead pid frees the claim).
    pub pid: u32,
    /// The recipient.
    pub recipient: String,
    /// The recipient's project.
    pub project: String,
    /// When it was planned, ms.
    pub planned_at: i64,
    /// `duty:` (a runner's duty turn) or `wake:` (the wake daemon).
    #[serde(default)]
    pub source: String,
}

/// A verified nudge in the duty state file (the original's shape).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
struct NudgedRecord {
    #[serde(default)]
    recipient: String,
    #[serde(default)]
    project: String,
    #[serde(default)]
    nudged_at: i64,
}

/// `{version:1, nudged:{"<id>":{recipient, project, nudgedAt}}, planned:{…}}`; `nudged` is the
/// original's shape, `planned` holds the claims of reference §14.2.
#[derive(Serialize, Deserialize, Clone, Debug, Default)]
struct DutyStateFile {
    #[serde(default = "one")]
    version: u32,
    /// Ids already nudged.
    #[serde(default)]
    nudged: BTreeMap<String, NudgedRecord>,
    /// Planned claims: id → claim.
    #[serde(default)]
    planned: BTreeMap<String, DutyClaim>,
    #[serde(flatten)]
    extra: serde_json::Map<String, serde_json::Value>,
}

/// Planned claims older than this are dropped (reference §14.2).
const CLAIM_MAX_AGE_MS: i64 = 30 * 60 * 1000;
/// A `wake:` claimant may steal a duty claim younger than this.
const WAKE_STEAL_MS: i64 = 20_000;

fn pid_alive(pid: u32) -> bool {
    let Ok(pid) = i32::try_from(pid) else {
        return false;
    };
    match nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None) {
        Ok(()) => true,
        // The process exists but belongs to someone else.
        Err(nix::errno::Errno::EPERM) => true,
        Err(_) => false,
    }
}

/// Plan the duty nudges of a wake (reference §14.2 and §15.5).
///
/// `escalations` come from [`duty_escalations`] over the wake's `hub:duty` messages;
/// `delivered_up_to(recipient)` is the recipient's `/peer` `deliveredUpTo` (None when unknown);
/// `resolve(recipient)` says whether it is busy, unknown or actionable. Claims are taken under
/// the lock of the duty state file at `state_path`, then the ids are reserved in each
/// recipient's nudge ledger under `bus_dir`; ids the ledger refuses are dropped from the plan
/// and their planned claims released. A lock that cannot be taken claims nothing (logged).
pub fn plan_duty_nudges(
    bus_dir: &Path,
    state_path: &Path,
    owner: &str,
    escalations: &[Escalation],
    mut delivered_up_to: impl FnMut(&str) -> Option<i64>,
    mut resolve: impl FnMut(&str) -> RecipientState,
) -> DutyPlan {
    let mut plan = DutyPlan {
        owner: owner.to_string(),
        ..Default::default()
    };
    // Group the still-unread ids per recipient.
    let mut per: BTreeMap<String, NudgeTarget> = BTreeMap::new();
    let mut read_cache: BTreeMap<String, Option<i64>> = BTreeMap::new();
    for e in escalations {
        let upto = *read_cache
            .entry(e.recipient.clone())
            .or_insert_with(|| delivered_up_to(&e.recipient));
        if upto.is_some_and(|u| u >= e.id) {
            continue;
        }
        let t = per
            .entry(e.recipient.clone())
            .or_insert_with(|| NudgeTarget {
                recipient: e.recipient.clone(),
                project: e.project.clone(),
                ids: Vec::new(),
            });
        if !t.ids.contains(&e.id) {
            t.ids.push(e.id);
        }
    }
    let mut actionable = Vec::new();
    for (_, t) in per {
        match resolve(&t.recipient) {
            RecipientState::Busy => plan.noop.push(t),
            RecipientState::Unknown(reason) => plan.terminal.push((t, reason)),
            RecipientState::Actionable => actionable.push(t),
        }
    }
    let now = trantor_proto::now_ms();
    let claims = DutyClaims::new(state_path);
    if !plan.terminal.is_empty()
        && let Err(e) = claims.record_terminal(&plan.terminal, now)
    {
        tracing::warn!("duty nudge state: {e}");
    }
    let mut claimed = match claims.claim(owner, &actionable, now) {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!("duty nudge claim: {e} — claiming nothing");
            Vec::new()
        }
    };
    // The shared pre-send ledger: exactly one nudger per unread id (reference §15.5).
    let mut skipped = Vec::new();
    for t in &mut claimed {
        let ledger = NudgeLedger::open(bus_dir).for_recipient(&t.recipient);
        let allowed = ledger.reserve(&t.ids, owner);
        skipped.extend(t.ids.iter().copied().filter(|id| !allowed.contains(id)));
        t.ids = allowed;
    }
    claimed.retain(|t| !t.ids.is_empty());
    if !skipped.is_empty()
        && let Err(e) = claims.release_planned(&skipped, owner)
    {
        tracing::warn!("duty nudge release: {e}");
    }
    plan.skipped = skipped;
    plan.targets = claimed;
    let kept = plan.claimed_ids();
    let mut dropped: BTreeSet<i64> = escalations.iter().map(|e| e.escalation_id).collect();
    for e in escalations {
        if kept.contains(&e.id) {
            dropped.remove(&e.escalation_id);
        }
    }
    plan.dropped_escalations = dropped.into_iter().collect();
    plan
}

/// The prompt block a duty turn carries (reference §14.3). Empty when there is nothing to say.
pub fn duty_directive(plan: &DutyPlan) -> String {
    let mut s = String::new();
    if !plan.targets.is_empty() {
        s.push_str("MECHANICAL DUTY NUDGE REQUIREMENT (runner-enforced):\n");
        for t in &plan.targets {
            let ids: Vec<String> = t.ids.iter().map(|i| format!("#{i}")).collect();
            s.push_str(&format!("- {}: unread {}\n", t.recipient, ids.join(", ")));
        }
        s.push_str(&format!(
            "Every id above is new and has no verified nudge yet. Before ending this turn, nudge each listed seat once per id; the message must start with \"{NUDGE_PREFIX}\" and name the ids (#N). The runner checks the sends and reports every id left out.\n"
        ));
    }
    if !plan.noop.is_empty() {
        s.push_str(
            "NO-OP — these seats are mid-turn and will read their inbox; do not nudge them:\n",
        );
        for t in &plan.noop {
            s.push_str(&format!("- {}\n", t.recipient));
        }
    }
    if !plan.terminal.is_empty() {
        s.push_str("TERMINAL — these cannot be nudged; do not try:\n");
        for (t, why) in &plan.terminal {
            s.push_str(&format!("- {} ({why})\n", t.recipient));
        }
    }
    s
}

/// After a clean duty turn: the targets whose ids were neither observed sent (`observed`) nor
/// recorded as nudged in the duty state (reference §14.5). Releases this owner's planned claims
/// and ledger stamps for the missing ids (§15.6) and records the observed ones as nudged.
pub fn audit_duty_nudges(
    bus_dir: &Path,
    state_path: &Path,
    plan: &DutyPlan,
    observed: &BTreeSet<i64>,
) -> Vec<NudgeTarget> {
    let claims = DutyClaims::new(state_path);
    let now = trantor_proto::now_ms();
    let seen: Vec<(i64, &NudgeTarget)> = plan
        .targets
        .iter()
        .flat_map(|t| t.ids.iter().map(move |id| (*id, t)))
        .filter(|(id, _)| observed.contains(id))
        .collect();
    if let Err(e) = claims.record_nudged(&seen, now) {
        tracing::warn!("duty nudge record: {e}");
    }
    let recorded = claims.nudged_ids();
    let mut missing = Vec::new();
    for t in &plan.targets {
        let ids: Vec<i64> = t
            .ids
            .iter()
            .copied()
            .filter(|id| !observed.contains(id) && !recorded.contains(id))
            .collect();
        let ledger = NudgeLedger::open(bus_dir).for_recipient(&t.recipient);
        let sent: Vec<i64> = t
            .ids
            .iter()
            .copied()
            .filter(|id| !ids.contains(id))
            .collect();
        ledger.confirm(&sent, &plan.owner);
        if ids.is_empty() {
            continue;
        }
        if let Err(e) = claims.release_planned(&ids, &plan.owner) {
            tracing::warn!("duty nudge release: {e}");
        }
        ledger.release(&ids, &plan.owner);
        missing.push(NudgeTarget {
            recipient: t.recipient.clone(),
            project: t.project.clone(),
            ids,
        });
    }
    missing
}

/// The duty claim state file (`duty-nudged.json`), locked like the nudge ledger.
struct DutyClaims {
    path: PathBuf,
}

impl DutyClaims {
    fn new(path: &Path) -> DutyClaims {
        DutyClaims {
            path: path.to_path_buf(),
        }
    }

    fn locked<T>(&self, f: impl FnOnce(&mut DutyStateFile) -> T) -> Result<T, LedgerError> {
        let _guard = LedgerLock::acquire(&self.path, LOCK_ATTEMPTS)?;
        let mut file: DutyStateFile = std::fs::read(&self.path)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default();
        let out = f(&mut file);
        file.version = 1;
        write_json_atomic(&self.path, &file).map_err(io_err(&self.path))?;
        Ok(out)
    }

    fn claim(
        &self,
        owner: &str,
        targets: &[NudgeTarget],
        now: i64,
    ) -> Result<Vec<NudgeTarget>, LedgerError> {
        if targets.is_empty() {
            return Ok(Vec::new());
        }
        let source = if owner.starts_with("wake:") {
            "wake:"
        } else {
            "duty:"
        };
        self.locked(|file| {
            file.planned
                .retain(|_, c| now - c.planned_at < CLAIM_MAX_AGE_MS && pid_alive(c.pid));
            let mut out = Vec::new();
            for t in targets {
                let mut ids = Vec::new();
                for id in &t.ids {
                    let key = id.to_string();
                    if file.nudged.contains_key(&key) {
                        continue;
                    }
                    if let Some(c) = file.planned.get(&key)
                        && c.owner != owner
                    {
                        let steal = source == "wake:"
                            && c.source != "wake:"
                            && now - c.planned_at < WAKE_STEAL_MS;
                        if !steal {
                            continue;
                        }
                    }
                    file.planned.insert(
                        key,
                        DutyClaim {
                            owner: owner.to_string(),
                            pid: std::process::id(),
                            recipient: t.recipient.clone(),
                            project: t.project.clone(),
                            planned_at: now,
                            source: source.to_string(),
                        },
                    );
                    ids.push(*id);
                }
                if !ids.is_empty() {
                    out.push(NudgeTarget { ids, ..t.clone() });
                }
            }
            out
        })
    }

    fn release_planned(&self, ids: &[i64], owner: &str) -> Result<(), LedgerError> {
        self.locked(|file| {
            for id in ids {
                let key = id.to_string();
                if file.planned.get(&key).is_some_and(|c| c.owner == owner) {
                    file.planned.remove(&key);
                }
            }
        })
    }

    fn record_nudged(&self, items: &[(i64, &NudgeTarget)], now: i64) -> Result<(), LedgerError> {
        if items.is_empty() {
            return Ok(());
        }
        self.locked(|file| {
            for (id, t) in items {
                file.nudged.insert(
                    id.to_string(),
                    NudgedRecord {
                        recipient: t.recipient.clone(),
                        project: t.project.clone(),
                        nudged_at: now,
                    },
                );
                file.planned.remove(&id.to_string());
            }
        })
    }

    fn record_terminal(
        &self,
        terminal: &[(NudgeTarget, String)],
        now: i64,
    ) -> Result<(), LedgerError> {
        self.locked(|file| {
            let list = file
                .extra
                .entry("terminal")
                .or_insert_with(|| serde_json::Value::Object(Default::default()));
            if let serde_json::Value::Object(map) = list {
                for (t, why) in terminal {
                    for id in &t.ids {
                        map.insert(
                            id.to_string(),
                            serde_json::json!({"recipient": t.recipient, "reason": why, "at": now}),
                        );
                    }
                }
            }
        })
    }

    fn nudged_ids(&self) -> BTreeSet<i64> {
        std::fs::read(&self.path)
            .ok()
            .and_then(|b| serde_json::from_slice::<DutyStateFile>(&b).ok())
            .map(|f| f.nudged.keys().filter_map(|k| k.parse().ok()).collect())
            .unwrap_or_default()
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
                    "periphery::nudge::tests::ledger_child_process",
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

    #[test]
    fn one_winner_across_threads() {
        let tmp = tempfile::tempdir().expect("tmp");
        let dir = tmp.path().to_path_buf();
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
    }

    fn duty(id: i64, text: &str) -> trantor_proto::Message {
        trantor_proto::Message {
            id,
            ts: 0,
            from: "hub:duty".into(),
            to: "claude:p".into(),
            project: "p".into(),
            text: text.into(),
            re: None,
            kind: Some("alert".into()),
            wake: None,
        }
    }

    #[test]
    fn escalations_are_parsed() {
        let m = duty(
            100,
            "⚠ UNDELIVERED 2 message(s): #12 claude:p -> codex:p, #13 kimi:p -> reviewer:q",
        );
        let e = duty_escalations(&m);
        assert_eq!(e.len(), 2);
        assert_eq!(e[0].id, 12);
        assert_eq!(e[0].sender, "claude:p");
        assert_eq!(e[0].recipient, "codex:p");
        assert_eq!(e[1].project, "q");
        assert_eq!(e[1].escalation_id, 100);
        let mut other = m.clone();
        other.from = "claude:p".into();
        assert!(duty_escalations(&other).is_empty());
        assert!(duty_escalations(&duty(1, "#12 a -> b")).is_empty());
        let arrow = duty_escalations(&duty(2, "UNDELIVERED #40 a:p → codex:p— since 5m"));
        assert_eq!(arrow.len(), 1);
        assert_eq!(arrow[0].recipient, "codex:p");
    }

    #[test]
    fn observed_nudges_come_from_send_message_calls() {
        let tmp = tempfile::tempdir().expect("tmp");
        let row = |text: &str| {
            serde_json::json!({"message": {"content": [{"type": "tool_use", "name": "SendMessage",
                "input": {"message": text}}]}})
            .to_string()
        };
        let lines = [
            row(&format!("{NUDGE_PREFIX} read your inbox (#12, #13)")),
            row("unrelated #99"),
            "not json".to_string(),
        ];
        std::fs::write(tmp.path().join("s.jsonl"), lines.join("\n")).expect("write");
        std::fs::write(
            tmp.path().join("x.txt"),
            row(&format!("{NUDGE_PREFIX} #77")),
        )
        .expect("w");
        let ids = observed_duty_nudge_ids(tmp.path(), 0);
        assert_eq!(ids.into_iter().collect::<Vec<_>>(), vec![12, 13]);
        assert!(observed_duty_nudge_ids(tmp.path(), i64::MAX).is_empty());
    }

    #[test]
    fn plan_claims_reserves_and_audits() {
        let tmp = tempfile::tempdir().expect("tmp");
        let bus = tmp.path();
        let state = bus.join("duty-nudged.json");
        let esc = duty_escalations(&duty(
            100,
            "UNDELIVERED: #12 a:p -> codex:p #13 a:p -> codex:p #14 a:p -> busy:p #15 a:p -> gone:p #16 a:p -> read:p",
        ));
        // Another nudger already stamped #13.
        NudgeLedger::open(bus)
            .for_recipient("codex:p")
            .reserve(&[13], "wake:daemon");
        let plan = plan_duty_nudges(
            bus,
            &state,
            "r1:1",
            &esc,
            |r| (r == "read:p").then_some(99),
            |r| match r {
                "busy:p" => RecipientState::Busy,
                "gone:p" => RecipientState::Unknown("no local session".into()),
                _ => RecipientState::Actionable,
            },
        );
        assert_eq!(plan.targets.len(), 1);
        assert_eq!(plan.targets[0].ids, vec![12]);
        assert_eq!(plan.skipped, vec![13]);
        assert_eq!(plan.noop.len(), 1);
        assert_eq!(plan.terminal.len(), 1);
        let d = duty_directive(&plan);
        assert!(d.contains("MECHANICAL DUTY NUDGE REQUIREMENT"));
        assert!(d.contains("codex:p: unread #12"));
        assert!(d.contains("TERMINAL"));
        // A second planner (another owner) cannot claim #12.
        let again = plan_duty_nudges(
            bus,
            &state,
            "r2:1",
            &esc,
            |_| None,
            |_| RecipientState::Actionable,
        );
        assert!(!again.claimed_ids().contains(&12));
        // The turn did not send: #12 is missing, and both the claim and the stamp are released.
        let missing = audit_duty_nudges(bus, &state, &plan, &BTreeSet::new());
        assert_eq!(missing.len(), 1);
        assert_eq!(missing[0].ids, vec![12]);
        assert!(
            !NudgeLedger::open(bus)
                .for_recipient("codex:p")
                .stamps()
                .contains_key(&12)
        );
        // An observed send is recorded and confirmed.
        let plan3 = plan_duty_nudges(
            bus,
            &state,
            "r3:1",
            &esc,
            |_| None,
            |_| RecipientState::Actionable,
        );
        assert!(plan3.claimed_ids().contains(&12));
        let missing = audit_duty_nudges(bus, &state, &plan3, &plan3.claimed_ids());
        assert!(missing.is_empty());
        let stamp = NudgeLedger::open(bus).for_recipient("codex:p").stamps();
        assert!(stamp.get(&12).is_some_and(|s| s.sent));
    }
}

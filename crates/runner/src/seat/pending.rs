//! The durable pending queue `pending-<persona>-<project>.json` (docs/runner.md §5).
//!
//! The hub hands a message to a poller once; if the turn it woke dies, the wake would die with
//! it. So the runner owns delivery: a wake is written here *before* any turn runs and leaves only
//! when a turn consumes it (success, blocked, or the duty/base rules). The file also carries the
//! batched context, the seen ledger (ids a clean turn already read) and the held ask.

use crate::sys::fsx;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::path::Path;
use trantor_proto::Message;

/// The most wakes one turn carries (the oldest first). The queue itself has no cap: past this
/// count the rest wait for the next turn, so no wake is ever dropped to bound a count
/// (docs/runner.md (pending queue)).
pub const BATCH_MAX: usize = 60;
/// The most context messages kept (only the last 10 ride a prompt).
pub const CONTEXT_CAP: usize = 50;
/// The most seen-ledger ids kept.
pub const SEEN_CAP: usize = 500;
/// The widest gap the seen ledger reconciles in one step.
pub const RECONCILE_SPAN: i64 = 10_000;

/// One id a clean turn already read through the session's own inbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Seen {
    /// Message id.
    pub id: i64,
    /// When it was marked, ms.
    pub ts: i64,
}

/// The owner labels written into the file for readers like `trantor seat-why`.
#[derive(Debug, Clone, Default)]
pub struct Owner {
    /// PERSONA.
    pub persona: String,
    /// AGENT.
    pub agent: String,
    /// Project.
    pub project: String,
}

/// The queue's in-memory state.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Pending {
    /// Undelivered wake messages, oldest first.
    pub wake: Vec<Message>,
    /// Context that rides the next real turn.
    pub bcast: Vec<Message>,
    /// The seen ledger.
    pub seen: Vec<Seen>,
    /// The held ask's message id (0 = none).
    pub ask: i64,
    /// Who the held ask went to.
    pub ask_to: String,
}

#[derive(Serialize)]
struct FileOut<'a> {
    persona: &'a str,
    agent: &'a str,
    project: &'a str,
    ts: i64,
    wake: &'a [Message],
    bcast: &'a [Message],
    seen: &'a [Seen],
    ask: i64,
    #[serde(rename = "askTo")]
    ask_to: &'a str,
}

fn messages(v: Option<&Value>) -> Vec<Message> {
    v.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|m| serde_json::from_value::<Message>(m.clone()).ok())
                .collect()
        })
        .unwrap_or_default()
}

fn number(v: Option<&Value>) -> Option<i64> {
    match v? {
        Value::Number(n) => n.as_i64().or_else(|| n.as_f64().map(|f| f as i64)),
        Value::String(s) => s
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|f| f.is_finite())
            .map(|f| f as i64),
        _ => None,
    }
}

impl Pending {
    /// Load the queue; a missing file gives empty queues, and seen entries without a finite id
    /// are dropped (docs/runner.md §5.2). A corrupt or truncated file is moved aside
    /// (`.corrupt-<ms>`) and named in the returned message; the caller re-reads what it held
    /// from the hub (docs/runner.md §24.4).
    pub fn load(path: &Path) -> (Pending, Option<String>) {
        let Ok(text) = std::fs::read_to_string(path) else {
            return (Pending::default(), None);
        };
        let v = match serde_json::from_str::<Value>(&text) {
            Ok(v) if v.is_object() => v,
            Ok(_) | Err(_) => {
                let why = serde_json::from_str::<Value>(&text)
                    .err()
                    .map(|e| e.to_string())
                    .unwrap_or_else(|| "not a JSON object".into());
                let aside = fsx::keep_aside(path);
                return (
                    Pending::default(),
                    Some(format!(
                        "pending file {} is corrupt ({why}) — kept aside as {aside}",
                        path.display()
                    )),
                );
            }
        };
        let seen = v
            .get("seen")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|e| {
                        let id = match e.get("id") {
                            Some(Value::Number(n)) => n.as_i64(),
                            _ => None,
                        }?;
                        Some(Seen {
                            id,
                            ts: number(e.get("ts")).unwrap_or(0),
                        })
                    })
                    .collect()
            })
            .unwrap_or_default();
        let q = Pending {
            wake: messages(v.get("wake")),
            bcast: messages(v.get("bcast")),
            seen,
            ask: number(v.get("ask")).unwrap_or(0).max(0),
            ask_to: v
                .get("askTo")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
        };
        (q, None)
    }

    /// Nothing queued, nothing seen, no ask held.
    pub fn is_empty(&self) -> bool {
        self.wake.is_empty() && self.bcast.is_empty() && self.seen.is_empty() && self.ask == 0
    }

    /// Persist: delete the file when everything is empty (unless `force`, the pre-exec write of
    /// docs/runner.md §5.2), else replace it atomically. The fsync follows in the background:
    /// for saves nothing is acknowledged on (see [`Pending::save_durable`]).
    pub fn save(&self, path: &Path, owner: &Owner, force: bool) -> std::io::Result<()> {
        match self.bytes(owner, force)? {
            None => match std::fs::remove_file(path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
                _ => Ok(()),
            },
            Some(bytes) => fsx::write_atomic_sync_later(path, &bytes),
        }
    }

    /// Persist durably before the runner relies on the queue (docs/runner.md §24.4): the temp
    /// file is fsync'd, renamed over the queue, and the directory fsync'd, all before this
    /// returns — so a `claimed` mark sent after it, or a cursor saved past the wake, never
    /// outlives the wake in a crash. Blocking: call it off the async workers.
    pub fn save_durable(
        &self,
        path: &Path,
        owner: &Owner,
        force: bool,
    ) -> std::io::Result<fsx::Synced> {
        match self.bytes(owner, force)? {
            None => fsx::remove_durable(path),
            Some(bytes) => fsx::write_durable(path, &bytes),
        }
    }

    /// The file's bytes; `None` when the queue is empty and the file is to be deleted.
    fn bytes(&self, owner: &Owner, force: bool) -> std::io::Result<Option<Vec<u8>>> {
        if self.is_empty() && !force {
            return Ok(None);
        }
        let body = FileOut {
            persona: &owner.persona,
            agent: &owner.agent,
            project: &owner.project,
            ts: trantor_proto::now_ms(),
            wake: &self.wake,
            bcast: &self.bcast,
            seen: &self.seen,
            ask: self.ask,
            ask_to: &self.ask_to,
        };
        serde_json::to_vec(&body)
            .map(Some)
            .map_err(std::io::Error::other)
    }

    /// Queue wake messages (deduped by id), oldest first. Nothing is dropped: a long queue is
    /// carried by several turns ([`crate::seat::rules::turn_batch`]).
    pub fn push_wakes(&mut self, msgs: Vec<Message>) {
        for m in msgs {
            if !self.wake.iter().any(|w| w.id == m.id) {
                self.wake.push(m);
            }
        }
    }

    /// Remove the wakes a turn consumed (by id); the rest stay queued for the next turn.
    pub fn consume_wakes(&mut self, ids: &[i64]) {
        self.wake.retain(|m| !ids.contains(&m.id));
    }

    /// Queue context messages (deduped by id), keeping the newest [`CONTEXT_CAP`].
    pub fn push_context(&mut self, msgs: Vec<Message>) {
        for m in msgs {
            if !self.bcast.iter().any(|w| w.id == m.id) && !self.wake.iter().any(|w| w.id == m.id) {
                self.bcast.push(m);
            }
        }
        let over = self.bcast.len().saturating_sub(CONTEXT_CAP);
        self.bcast.drain(..over);
    }

    /// Whether `id` is in the seen ledger.
    pub fn is_seen(&self, id: i64) -> bool {
        self.seen.iter().any(|s| s.id == id)
    }

    /// Mark the ids `cursor+1 ..= delivered_up_to` as seen (bounded by [`RECONCILE_SPAN`]) and
    /// prune the ledger to ids above `cursor`, at most [`SEEN_CAP`] (docs/runner.md §5.4).
    pub fn reconcile_seen(&mut self, cursor: i64, delivered_up_to: i64, now: i64) {
        if delivered_up_to > cursor && delivered_up_to - cursor <= RECONCILE_SPAN {
            for id in cursor + 1..=delivered_up_to {
                if !self.is_seen(id) {
                    self.seen.push(Seen { id, ts: now });
                }
            }
        }
        self.prune_seen(cursor);
    }

    /// Drop seen entries at or below `cursor` and keep the newest [`SEEN_CAP`].
    pub fn prune_seen(&mut self, cursor: i64) {
        self.seen.retain(|s| s.id > cursor);
        self.seen.sort_by_key(|s| s.id);
        let over = self.seen.len().saturating_sub(SEEN_CAP);
        self.seen.drain(..over);
    }
}

/// The wait before attempt `attempt` (1-based) on `ladder`.
pub fn backoff_ms(ladder: &[u64], attempt: u32) -> u64 {
    if ladder.is_empty() {
        return crate::config::DEFAULT_RETRY_LADDER_MS[0];
    }
    let i = (attempt.max(1) as usize - 1).min(ladder.len() - 1);
    ladder[i]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(id: i64) -> Message {
        Message {
            id,
            ts: 1,
            from: "orch:p".into(),
            to: "claude:p".into(),
            project: "p".into(),
            text: format!("m{id}"),
            re: None,
            kind: None,
            wake: None,
        }
    }

    fn owner() -> Owner {
        Owner {
            persona: "claude".into(),
            agent: "claude".into(),
            project: "p".into(),
        }
    }

    #[test]
    fn round_trip_and_delete_when_empty() {
        let d = tempfile::tempdir().expect("tmp");
        let path = d.path().join("pending-claude-p.json");
        let mut q = Pending::default();
        q.push_wakes(vec![msg(3), msg(3), msg(4)]);
        q.ask = 9;
        q.ask_to = "orch:p".into();
        q.save(&path, &owner(), false).expect("save");
        let back = Pending::load(&path).0;
        assert_eq!(back, q);
        let raw: Value =
            serde_json::from_str(&std::fs::read_to_string(&path).expect("r")).expect("j");
        assert_eq!(raw["persona"], "claude");
        assert_eq!(raw["askTo"], "orch:p");
        Pending::default()
            .save(&path, &owner(), false)
            .expect("save");
        assert!(!path.exists());
        Pending::default()
            .save(&path, &owner(), true)
            .expect("forced");
        assert!(path.exists());
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .expect("ls")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().to_string())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn a_durable_save_syncs_the_file_and_its_directory_and_a_crash_mid_write_leaves_the_last_whole_queue()
     {
        let d = tempfile::tempdir().expect("tmp");
        let path = d.path().join("pending-claude-p.json");
        let mut q = Pending::default();
        q.push_wakes(vec![msg(3), msg(4)]);
        let synced = q.save_durable(&path, &owner(), false).expect("save");
        assert_eq!(
            synced,
            fsx::Synced {
                file: true,
                dir: true
            }
        );
        assert_eq!(Pending::load(&path).0, q);
        assert_eq!(
            names(d.path()),
            ["pending-claude-p.json"],
            "no temp file left"
        );

        // A runner killed between writing the temp file and the rename leaves a torn temp file
        // beside the queue: the queue itself is the last whole one, and the next save is whole.
        let torn = d.path().join(format!(
            ".pending-claude-p.json.{}.99.tmp",
            std::process::id()
        ));
        std::fs::write(&torn, br#"{"wake":[{"id":5"#).expect("torn temp");
        assert_eq!(Pending::load(&path).0, q, "the torn write is not the queue");
        q.push_wakes(vec![msg(5)]);
        q.save_durable(&path, &owner(), false).expect("save");
        assert_eq!(Pending::load(&path).0, q);

        // Emptied: the file goes, and the removal is synced too.
        let synced = Pending::default()
            .save_durable(&path, &owner(), false)
            .expect("remove");
        assert_eq!(
            synced,
            fsx::Synced {
                file: true,
                dir: true
            }
        );
        assert!(!path.exists());

        // A write that cannot land (the target is a directory) fails and leaves no temp file.
        let blocked = d.path().join("blocked");
        std::fs::create_dir_all(blocked.join("x")).expect("dir");
        assert!(q.save_durable(&blocked, &owner(), false).is_err());
        assert!(
            !names(d.path()).iter().any(|n| n.starts_with(".blocked")),
            "{:?}",
            names(d.path())
        );
    }

    #[test]
    fn corrupt_or_odd_files_load_tolerantly() {
        let d = tempfile::tempdir().expect("tmp");
        let path = d.path().join("p.json");
        std::fs::write(&path, "{not json").expect("w");
        let (q, why) = Pending::load(&path);
        assert_eq!(q, Pending::default());
        assert!(why.expect("reported").contains("kept aside"));
        assert!(!path.exists(), "moved aside, not left to be overwritten");
        // Truncated mid-write.
        std::fs::write(&path, r#"{"wake":[{"id":1,"ts":1,"fr"#).expect("w");
        assert!(Pending::load(&path).1.is_some());
        std::fs::write(
            &path,
            r#"{"wake":[{"id":1,"ts":1,"from":"a:p","to":"b:p","text":"x"},{"bogus":true}],
                "seen":[{"id":5,"ts":"7"},{"id":"x"},{"ts":3}],"ask":"2"}"#,
        )
        .expect("w");
        let (q, why) = Pending::load(&path);
        assert!(why.is_none());
        assert_eq!(q.wake.len(), 1);
        assert_eq!(q.seen, vec![Seen { id: 5, ts: 7 }]);
        assert_eq!(q.ask, 2);
    }

    #[test]
    fn nothing_is_dropped_past_a_count_and_batches_take_the_oldest() {
        let mut q = Pending::default();
        q.push_wakes((1..=130).map(msg).collect());
        assert_eq!(q.wake.len(), 130, "no cap drops a wake");
        let first: Vec<i64> = crate::seat::rules::turn_batch(&q.wake)
            .iter()
            .map(|m| m.id)
            .collect();
        assert_eq!(first, (1..=BATCH_MAX as i64).collect::<Vec<_>>());
        q.consume_wakes(&first);
        // A wake that arrived while the turn ran stays behind the rest.
        q.push_wakes(vec![msg(131)]);
        let second: Vec<i64> = crate::seat::rules::turn_batch(&q.wake)
            .iter()
            .map(|m| m.id)
            .collect();
        assert_eq!(second[0], BATCH_MAX as i64 + 1);
        q.consume_wakes(&second);
        let third: Vec<i64> = crate::seat::rules::turn_batch(&q.wake)
            .iter()
            .map(|m| m.id)
            .collect();
        assert_eq!(
            third,
            vec![121, 122, 123, 124, 125, 126, 127, 128, 129, 130, 131]
        );
        q.consume_wakes(&third);
        assert!(q.wake.is_empty());
    }

    #[test]
    fn seen_reconcile_is_bounded_and_pruned() {
        let mut q = Pending::default();
        q.reconcile_seen(10, 13, 99);
        assert_eq!(
            q.seen.iter().map(|s| s.id).collect::<Vec<_>>(),
            vec![11, 12, 13]
        );
        q.prune_seen(12);
        assert_eq!(q.seen.len(), 1);
        let mut q = Pending::default();
        q.reconcile_seen(0, 20_000, 1);
        assert_eq!(q.seen.len(), 0, "a gap wider than the span marks nothing");
        q.reconcile_seen(0, 600, 1);
        assert_eq!(q.seen.len(), SEEN_CAP);
        assert_eq!(q.seen[0].id, 101);
    }

    #[test]
    fn backoff_follows_the_ladder() {
        let l = [30_000, 60_000, 120_000, 300_000, 900_000];
        assert_eq!(backoff_ms(&l, 1), 30_000);
        assert_eq!(backoff_ms(&l, 3), 120_000);
        assert_eq!(backoff_ms(&l, 99), 900_000);
        assert_eq!(backoff_ms(&[], 1), 30_000);
    }
}

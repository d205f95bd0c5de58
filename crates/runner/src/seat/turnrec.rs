//! The durable turn record `turnrec-<persona>-<project>.json` (docs/runner.md §24.2, §24.3).
//!
//! Before a CLI is spawned the runner writes `started` here (the contract ids the turn carries,
//! its number, the runner instance, the worktree HEAD it starts from, its card), replaced
//! atomically and fsync'd; the spawned wrapper's process group follows once it is known. The
//! turn's wrapper leaves the CLI's exit status in `turnexit-<persona>-<project>.txt`, where the
//! next runner can read it even when this one was killed. When the turn is judged, `ended` says
//! whether its contracts were consumed — written before the pending queue drops them, so a crash
//! between the two is finished by the next boot — and `idle` closes the record. The file also
//! keeps the newest consumed ids ([`DONE_CAP`]), so a contract whose turn completed is never
//! started again, even when the poll hands it over a second time.

use crate::sys::fsx;
use serde::{Deserialize, Serialize};
use std::path::Path;
use trantor_proto::CardStatus;

/// The most consumed ids remembered.
pub const DONE_CAP: usize = 2000;

/// Where a turn record stands.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RecState {
    /// No turn in flight.
    #[default]
    Idle,
    /// A turn was recorded and its CLI spawned, or about to be.
    Started,
    /// The turn was judged; `consumed` says what became of its contracts.
    Ended,
}

/// One seat's turn record.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct TurnRecord {
    /// Where the turn stands.
    pub state: RecState,
    /// The runner instance that ran it.
    pub instance: String,
    /// The runner's turn number.
    pub turn: u64,
    /// `kickoff`, `wake`, `pulse` or `follow-up`.
    pub kind: String,
    /// The contract (message) ids the turn carries.
    pub ids: Vec<i64>,
    /// When it was recorded, ms since the epoch.
    pub started_at: i64,
    /// The wrapper's process group (the pid of its leader), once spawned.
    pub pgid: Option<u32>,
    /// The worktree HEAD the turn started from.
    pub head: Option<String>,
    /// The card the turn is bound to (0 = none).
    pub card: i64,
    /// The card's status before the turn.
    pub card_status: Option<CardStatus>,
    /// `ended`: the contracts were consumed (else they stay owed).
    pub consumed: bool,
    /// `ended`: the verdict.
    pub outcome: String,
    /// The newest consumed contract ids, oldest first.
    pub done: Vec<i64>,
}

/// Why a turn record could not be read.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// The file is not a turn record; it was moved aside to the path given.
    #[error("turn record {path} is corrupt ({why}); kept aside as {aside}")]
    Corrupt {
        /// The record's path.
        path: String,
        /// The parse error.
        why: String,
        /// Where it was moved.
        aside: String,
    },
}

impl TurnRecord {
    /// Load the record; a missing file is an idle record. A corrupt one is renamed aside
    /// (`.corrupt-<ms>`) and reported, so nothing is silently lost.
    pub fn load(path: &Path) -> (TurnRecord, Option<RecordError>) {
        let Ok(bytes) = std::fs::read(path) else {
            return (TurnRecord::default(), None);
        };
        match serde_json::from_slice::<TurnRecord>(&bytes) {
            Ok(r) => (r, None),
            Err(e) => {
                let aside = fsx::keep_aside(path);
                (
                    TurnRecord::default(),
                    Some(RecordError::Corrupt {
                        path: path.display().to_string(),
                        why: e.to_string(),
                        aside,
                    }),
                )
            }
        }
    }

    /// Replace the record atomically and durably (temp file, fsync, rename, directory fsync).
    pub fn save(&self, path: &Path) -> std::io::Result<()> {
        fsx::write_json_atomic(path, self)
    }

    /// Replace it atomically; the fsync follows in the background (for the pgid update, which
    /// only has to survive the runner's own death).
    pub fn save_soon(&self, path: &Path) -> std::io::Result<()> {
        let bytes = serde_json::to_vec(self).map_err(std::io::Error::other)?;
        fsx::write_atomic_sync_later(path, &bytes)
    }

    /// Whether `id` belongs to a turn that completed (consumed).
    pub fn is_done(&self, id: i64) -> bool {
        self.done.contains(&id)
    }

    /// Mark the carried contracts consumed (state `ended`) and remember their ids.
    pub fn end(&mut self, consumed: bool, outcome: &str) {
        self.state = RecState::Ended;
        self.consumed = consumed;
        self.outcome = outcome.to_string();
        if consumed {
            for id in &self.ids {
                if !self.done.contains(id) {
                    self.done.push(*id);
                }
            }
            let over = self.done.len().saturating_sub(DONE_CAP);
            self.done.drain(..over);
        }
    }

    /// Close the record: no turn in flight (the done ids stay).
    pub fn idle(&mut self) {
        self.state = RecState::Idle;
        self.ids.clear();
        self.pgid = None;
        self.consumed = false;
        self.outcome.clear();
    }
}

/// Read the exit status the turn wrapper left (`None`: the wrapper never got to write it — it
/// was killed, or is still running).
pub fn read_status(path: &Path) -> Option<i32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_round_trips_and_ending_remembers_consumed_ids() {
        let d = tempfile::tempdir().expect("tempdir");
        let p = d.path().join("turnrec-x-p.json");
        let mut r = TurnRecord {
            state: RecState::Started,
            instance: "1.2".into(),
            turn: 3,
            kind: "wake".into(),
            ids: vec![7, 8],
            ..Default::default()
        };
        r.save(&p).expect("save");
        assert_eq!(TurnRecord::load(&p).0, r);
        r.end(true, "delivered");
        r.idle();
        assert!(r.is_done(7) && r.is_done(8));
        r.ids = vec![9];
        r.end(false, "no-delivery");
        assert!(!r.is_done(9));
    }

    #[test]
    fn a_corrupt_record_is_kept_aside_and_reported() {
        let d = tempfile::tempdir().expect("tempdir");
        let p = d.path().join("turnrec-x-p.json");
        std::fs::write(&p, b"{\"state\":\"started\",\"ids\":[1,").expect("write");
        let (r, err) = TurnRecord::load(&p);
        assert_eq!(r, TurnRecord::default());
        let err = err.expect("reported");
        assert!(err.to_string().contains("kept aside"), "{err}");
        assert!(!p.exists());
        let kept = std::fs::read_dir(d.path())
            .expect("dir")
            .filter_map(Result::ok)
            .any(|e| e.file_name().to_string_lossy().contains(".corrupt-"));
        assert!(kept);
    }
}

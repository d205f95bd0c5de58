//! Verification gates' rules (docs/protocol.md §9.5): the gates document, the open gate that
//! holds a card, and the 409 a done move gets while one is open.

use crate::error::ApiError;
use crate::state::KvDoc;
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use trantor_proto::VerifyGate;
use trantor_store::StoreError;

/// The kv key of the gates document.
pub const GATES_KEY: &str = "verify-gates";

/// The stored document.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct GatesDoc {
    /// The last id given.
    #[serde(default)]
    pub seq: i64,
    /// The gates, oldest first.
    #[serde(default)]
    pub gates: Vec<VerifyGate>,
}

/// Gates kept; past it the oldest 100 are dropped.
pub const CAP: usize = 500;

/// The statuses a resolution may give a gate.
pub fn is_resolution(status: &str) -> bool {
    matches!(status, "verified" | "failed" | "waived")
}

impl GatesDoc {
    /// The open gate of `project` (any case) with exactly this claim: adding it again is a
    /// dedup.
    pub fn open_with_claim(&self, project: &str, claim: &str) -> Option<&VerifyGate> {
        self.gates.iter().find(|g| {
            g.status == "open" && g.project.eq_ignore_ascii_case(project) && g.claim == claim
        })
    }

    /// Adds `gate` with the next id (dropping the oldest 100 past [`CAP`]); returns it as kept.
    pub fn add(&mut self, mut gate: VerifyGate) -> VerifyGate {
        self.seq += 1;
        gate.id = self.seq;
        self.gates.push(gate.clone());
        if self.gates.len() > CAP {
            self.gates.drain(..100);
        }
        gate
    }

    /// Resolves gate `id` of `project` (any case) as `status`, by `by` with `note` at `now`;
    /// returns it as resolved, or `None` when the project has no such gate.
    pub fn resolve(
        &mut self,
        id: i64,
        project: &str,
        status: String,
        by: &str,
        note: &str,
        now: i64,
    ) -> Option<VerifyGate> {
        let g = self
            .gates
            .iter_mut()
            .find(|g| g.id == id && g.project.eq_ignore_ascii_case(project))?;
        g.status = status;
        g.resolved_by = Some(by.to_string());
        g.resolved_note = Some(note.to_string());
        g.resolved_ts = Some(now);
        Some(g.clone())
    }
}

impl KvDoc for GatesDoc {
    const KEY: &'static str = GATES_KEY;
    const WHAT: &'static str = "verify gates";
}

/// The gates document a kv value holds (empty when absent or unreadable).
pub fn load(v: Option<Value>) -> GatesDoc {
    GatesDoc::from_kv(v)
}

/// The open gate holding `card`, if any (for the done refusal).
pub fn open_gate_for_card(
    tx: &(impl trantor_store::ReadTx + ?Sized),
    card: i64,
) -> Result<Option<VerifyGate>, StoreError> {
    Ok(GatesDoc::load(tx)?
        .gates
        .into_iter()
        .find(|g| g.status == "open" && g.card == Some(card)))
}

/// The 409 a done move gets while a gate is open.
pub fn done_refusal(card: i64, g: &VerifyGate) -> ApiError {
    ApiError::with(
        StatusCode::CONFLICT,
        format!(
            "card #{card} has an open verification gate #{}: \"{}\" — verify it (relay_verify_gate \
             action resolve, id {}) before moving the card to done",
            g.id, g.claim, g.id
        ),
        json!({ "id": card, "gate": g }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gate(project: &str, claim: &str) -> VerifyGate {
        VerifyGate {
            project: project.into(),
            claim: claim.into(),
            status: "open".into(),
            ..VerifyGate::default()
        }
    }

    #[test]
    fn gates_are_numbered_deduplicated_resolved_and_capped() {
        let mut doc = GatesDoc::default();
        assert_eq!(doc.add(gate("P", "c")).id, 1);
        assert_eq!(doc.add(gate("p", "d")).id, 2);
        assert_eq!(doc.open_with_claim("p", "c").map(|g| g.id), Some(1));
        assert!(
            doc.open_with_claim("p", "C").is_none(),
            "the claim is exact"
        );
        assert!(doc.resolve(1, "q", "failed".into(), "b", "n", 9).is_none());
        let r = doc.resolve(1, "p", "failed".into(), "b", "n", 9);
        let r = r.map(|g| (g.status, g.resolved_by, g.resolved_note, g.resolved_ts));
        let want = ("failed".into(), Some("b".into()), Some("n".into()), Some(9));
        assert_eq!(r, Some(want));
        assert!(
            doc.open_with_claim("p", "c").is_none(),
            "resolved is not open"
        );
        for _ in 2..CAP {
            doc.add(gate("p", "x"));
        }
        assert_eq!(doc.gates.len(), CAP);
        assert_eq!(doc.add(gate("p", "y")).id, CAP as i64 + 1);
        assert_eq!(doc.gates.len(), CAP + 1 - 100);
        assert_eq!(doc.gates.first().map(|g| g.id), Some(101));
    }

    #[test]
    fn resolutions() {
        for (s, ok) in [
            ("verified", true),
            ("failed", true),
            ("waived", true),
            ("open", false),
        ] {
            assert_eq!(is_resolution(s), ok, "{s}");
        }
    }
}

//! Verification gates' rules (docs/protocol.md §9.5): the gates document, the open gate that
//! holds a card, and the 409 a done move gets while one is open.

use crate::error::ApiError;
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

/// Read the gates document (empty when absent or unreadable).
pub fn load(v: Option<Value>) -> GatesDoc {
    v.and_then(|v| serde_json::from_value(v).ok())
        .unwrap_or_default()
}

/// The open gate holding `card`, if any (for the done refusal).
pub fn open_gate_for_card(
    tx: &(impl trantor_store::ReadTx + ?Sized),
    card: i64,
) -> Result<Option<VerifyGate>, StoreError> {
    Ok(load(tx.kv(GATES_KEY)?)
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

//! The delivery record's rules (docs/protocol.md "Delivery"): every direct message gets a
//! `stored` state in the same commit as the message ([`record_stored`]), and a message older
//! than the record reads back as `stored` ([`record_of`]).

use trantor_proto::{BROADCAST, DeliveryEntry, DeliveryRecord, DeliveryState, Message};
use trantor_store::{ReadTx, StoreError, WriteTx};

/// Whether `to` names one session (not the broadcast address, not `*`), so a message to it has
/// a delivery record.
pub fn is_direct(to: &str) -> bool {
    !to.is_empty() && to != BROADCAST && to != "*"
}

/// Append the hub's `stored` state for a message just inserted in this transaction (nothing for
/// a broadcast).
pub fn record_stored(tx: &mut dyn WriteTx, msg: &Message) -> Result<(), StoreError> {
    if !is_direct(&msg.to) {
        return Ok(());
    }
    tx.append_delivery(msg.id, &stored_entry(msg))
}

/// The `stored` state of message `msg`: its time and recipient, nothing else known yet.
fn stored_entry(msg: &Message) -> DeliveryEntry {
    DeliveryEntry {
        state: DeliveryState::Stored,
        ts: msg.ts,
        session: msg.to.clone(),
        instance: None,
        turn: None,
        pid: None,
        outcome: None,
        reason: None,
    }
}

/// The record of message `msg`: its stored states, or — for a message older than the record —
/// a `stored` state made from the message itself.
pub fn record_of(tx: &dyn ReadTx, msg: &Message) -> Result<DeliveryRecord, StoreError> {
    let mut states = tx.delivery_states(msg.id)?;
    if states.is_empty() && is_direct(&msg.to) {
        states.push(stored_entry(msg));
    }
    Ok(DeliveryRecord {
        id: msg.id,
        to: msg.to.clone(),
        states,
    })
}

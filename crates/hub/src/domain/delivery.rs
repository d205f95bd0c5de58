//! The delivery record's rules (docs/protocol.md "Delivery"): every direct message gets a
//! `stored` state in the same commit as the message ([`record_stored`]); the store reads that
//! state back from the message itself, also for a message older than the record ([`record_of`]).

use trantor_proto::{BROADCAST, DeliveryEntry, DeliveryRecord, DeliveryState, Message};
use trantor_store::{ReadTx, StoreError, WriteTx};

/// Whether `to` names one session (not the broadcast address, not `*`), so a message to it has
/// a delivery record. The store's reading of the record (`DELIVERY_STATES` in
/// `trantor_store::sql`) applies the same rule.
pub fn is_direct(to: &str) -> bool {
    !to.is_empty() && to != BROADCAST && to != "*"
}

/// Open the hub's `stored` state for a message just inserted in this transaction (nothing for
/// a broadcast): the message joins its recipient's open list.
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

/// The record of message `msg`: `stored` (made from the message), then its logged states.
pub fn record_of(tx: &dyn ReadTx, msg: &Message) -> Result<DeliveryRecord, StoreError> {
    let states = tx.delivery_states(msg.id)?;
    Ok(DeliveryRecord {
        id: msg.id,
        to: msg.to.clone(),
        states,
    })
}

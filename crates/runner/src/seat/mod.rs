//! The seat: its state, its boot, the poll loop, one delivery and one turn as the seat runs
//! them, and the seat's own files (the pending queue, the park file, the telemetry ledger).
//! Everything here is `impl Seat` or state the seat owns; it orchestrates the other layers.

pub(crate) mod adopt;
pub(crate) mod boot;
pub(crate) mod deliver;
pub(crate) mod fence;
pub(crate) mod idle;
pub(crate) mod ledger;
pub(crate) mod machine;
pub mod park;
pub(crate) mod pending;
pub(crate) mod poll;
pub(crate) mod quota;
pub(crate) mod rules;
mod state;
pub(crate) mod turnflow;
pub(crate) mod turnrec;

pub(crate) use state::{
    CliSession, Delivery, Fencing, HUB_BACKOFF_START, Health, HubLink, Seat, Workspace,
};

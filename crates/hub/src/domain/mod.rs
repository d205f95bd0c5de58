//! The hub's rules, as plain code over a store transaction: what a card move may do (the drill
//! gate, the assignee freeze) and the verification gates, the dispatch ledger, the delivery
//! record, file claims, named credentials, who is on duty, and the policy with its project
//! aliases. Route handlers, the reaper, the duty and overseer passes and the auth layer all call
//! these; none of them reaches into another's handler. Nothing here knows HTTP beyond the
//! refusal a rule gives (an [`crate::error::ApiError`]).

pub mod cards;
pub mod claims;
pub mod contracts;
pub mod credentials;
pub mod delivery;
pub mod duty;
pub mod gates;
pub mod ledger;
pub mod policy;

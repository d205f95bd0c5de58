//! Nudges about unread mail: the ledger every sender shares ([`ledger`], docs/runner.md §16) and
//! the duty seat's planning on top of it ([`duty`], docs/runner.md §17).

mod duty;
mod ledger;

pub use duty::*;

//! Pure decisions, no I/O: what a poll batch means (wake, context, refusal), which card and
//! session a wake belongs to, what the turn is told (the prompt), what its result means (the
//! verdict and failure class), and what each assigner hears back (receipts).

pub(crate) mod classify;
pub(crate) mod prompt;
pub(crate) mod receipt;
pub(crate) mod session;
pub(crate) mod wake;

//! What surrounds the seat without being its loop: the seat's git worktree, the docker janitor,
//! the self-restart onto a newer release, and the nudge ledger shared with other senders.

pub(crate) mod docker;
pub(crate) mod nudge;
pub(crate) mod release;
pub(crate) mod worktree;

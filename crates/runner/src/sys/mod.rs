//! Small helpers every layer uses: the bounded-command runner, atomic and append-only files,
//! the bounded git reads on the one git command builder (`trantor_proto::git`), the per-seat file layout, and
//! output redaction.

pub(crate) mod cmd;
pub(crate) mod fsx;
pub(crate) mod gitx;
pub mod paths;
pub(crate) mod redact;

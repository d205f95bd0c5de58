//! Small helpers every layer uses: atomic and append-only files, bounded git reads, the
//! per-seat file layout, and output redaction.

pub(crate) mod fsx;
pub(crate) mod gitx;
pub mod paths;
pub(crate) mod redact;

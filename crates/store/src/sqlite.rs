//! The embedded SQLite (WAL) store. (Being written.)

/// The embedded SQLite store handle.
#[derive(Debug, Clone)]
pub struct SqliteStore;

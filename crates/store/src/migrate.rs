//! The schema migration runner both backends share.
//!
//! A backend keeps its migrations as SQL scripts, entry `i` bringing a database from version `i`
//! to `i + 1`, and the version in a table of its own. It opens one transaction that holds off
//! every other opener (SQLite's `BEGIN IMMEDIATE`, PostgreSQL's advisory lock), wraps it in a
//! [`SchemaTx`], and calls [`migrate`], which refuses a version it cannot understand and applies
//! the missing scripts in order. The backend commits afterwards (or rolls back on an error),
//! so a failed migration leaves nothing behind.

use crate::StoreError;

/// The statements the runner needs inside the backend's migration transaction.
pub trait SchemaTx {
    /// The stored schema version: `None` on a database without one (new), an error when what
    /// is stored does not read as one version.
    fn stored_version(&mut self) -> Result<Option<i64>, StoreError>;
    /// Run one migration script.
    fn apply(&mut self, sql: &str) -> Result<(), StoreError>;
    /// Record `version` as the stored schema version.
    fn record_version(&mut self, version: i64) -> Result<(), StoreError>;
}

/// Bring the database behind `tx` (at `path`, for errors) to version `migrations.len()`, or
/// explain why it cannot be: a version newer than this build's is refused untouched.
pub fn migrate(tx: &mut dyn SchemaTx, path: &str, migrations: &[&str]) -> Result<(), StoreError> {
    let latest = i64::try_from(migrations.len()).unwrap_or(i64::MAX);
    let refuse = |context: String| StoreError::Open {
        path: path.to_string(),
        context,
        source: None,
    };
    let current = tx.stored_version()?.unwrap_or(0);
    if current > latest {
        return Err(refuse(format!(
            "the database has schema version {current}, newer than this build's {latest}; run a \
             newer trantor (the store was left untouched)"
        )));
    }
    if current < 0 {
        return Err(refuse(format!(
            "the stored schema version {current} is invalid"
        )));
    }
    for (from, sql) in migrations.iter().enumerate().skip(current as usize) {
        tx.apply(sql).map_err(|e| match e {
            StoreError::Open { source, .. } | StoreError::Db { source, .. } => StoreError::Open {
                path: path.to_string(),
                context: format!("migration {from} -> {}", from + 1),
                source,
            },
            other => other,
        })?;
        tracing::info!(from, to = from + 1, "store schema migrated");
    }
    if current < latest {
        tx.record_version(latest)?;
    }
    Ok(())
}

//! The hub's [`Store`] in an embedded SQLite (WAL) file.
//!
//! Threads:
//! - **One writer thread** owns the only read-write connection. [`Store::write`] hands it a
//!   closure; the writer drains every closure queued at that moment and runs them in one
//!   `BEGIN IMMEDIATE … COMMIT`, each inside its own `SAVEPOINT` so a closure that fails rolls
//!   back alone (group commit: one WAL append for many writes). Results are sent back only after
//!   the `COMMIT` succeeded, so no reply ever acknowledges an uncommitted write.
//! - **A few reader threads**, each owning a read-only connection; WAL lets them read while the
//!   writer writes. Each [`Store::read`] runs in its own deferred transaction, i.e. on one
//!   consistent snapshot taken after every write whose `write()` already returned.
//!
//! Durability is chosen by [`SqliteOptions::sync_full`] (`trantor hub --sync`): `FULL` (the
//! default) fsyncs the WAL on every commit, so an acknowledged write survives power loss and an
//! OS crash; `NORMAL` in WAL mode fsyncs only at checkpoints, so an acknowledged write survives
//! the hub process being killed but the last commits before a power loss may be rolled back.

mod schema;
mod statements;
mod tx;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, mpsc};
use std::time::Duration;

use rusqlite::config::DbConfig;
use rusqlite::{Connection, OpenFlags};
use trantor_store::worker::{self, Backend, BoxedWriteJob, Shared, Workers};
use trantor_store::{ReadTx, StoreError};

pub use schema::SCHEMA_VERSION;
use tx::SqlTx;

/// The path this crate had inside `trantor-store` before the backends got crates of their own.
pub mod sqlite {
    pub use super::{SCHEMA_VERSION, SqliteOptions, SqliteStore};
}

/// How to open a [`SqliteStore`].
#[derive(Debug, Clone)]
pub struct SqliteOptions {
    /// `synchronous=FULL` (fsync on every commit: durable against power loss; the default)
    /// instead of `NORMAL` (durable against a process kill only, cheaper).
    pub sync_full: bool,
    /// Read-only connections (and reader threads). At least 1.
    pub readers: usize,
    /// Page cache of the writer connection, KiB. It holds the hot index leaves every insert
    /// touches. Kept small: the hub's memory bar is 30 MB in total.
    pub cache_kib: u32,
    /// Page cache of each reader connection, KiB (every reader fills its own).
    pub reader_cache_kib: u32,
    /// How long a statement waits for a lock held by another process before failing.
    pub busy_timeout: Duration,
    /// The most write closures grouped into one commit (bounds the latency of a batch).
    pub max_batch: usize,
    /// Page size of a newly created database, bytes (a power of two, 512 to 65536; an
    /// existing database keeps its own).
    pub page_size: u32,
    /// WAL size (in pages) at which the writer copies the log into the database file.
    /// Larger means fewer, better-deduplicated checkpoints, a bigger `-wal` and a longer pause
    /// of the writer when one runs.
    pub checkpoint_pages: u32,
    /// Cap on the database size in pages (`PRAGMA max_page_count`); writes that would grow it
    /// further fail as on a full disk. `None`: SQLite's own limit.
    pub max_pages: Option<u32>,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        SqliteOptions {
            sync_full: true,
            readers: 3,
            cache_kib: 2048,
            reader_cache_kib: 1024,
            busy_timeout: Duration::from_secs(5),
            max_batch: 2048,
            checkpoint_pages: 32_000,
            page_size: 1024,
            max_pages: None,
        }
    }
}

/// The embedded SQLite store handle: cheap to clone, shared by every request handler.
///
/// The worker threads stop when the last handle is dropped (after finishing queued writes).
#[derive(Clone)]
pub struct SqliteStore {
    inner: Arc<Inner>,
}

struct Inner {
    path: PathBuf,
    stats: Arc<WriteStats>,
    /// The queues, `sqlite:<path>`, `PRAGMA synchronous` of the writer connection (read back
    /// after setting it) and the threads. Dropping it closes the queues and joins the threads,
    /// so "drop, then reopen the file" is deterministic (the writer's final checkpoint is done).
    shared: Shared<Connection>,
}

impl fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.inner.path)
            .finish_non_exhaustive()
    }
}

/// Counters kept by the writer thread.
#[derive(Default)]
struct WriteStats {
    batches: AtomicU64,
    jobs: AtomicU64,
}

fn open_error(
    path: &Path,
    what: &str,
    e: impl std::error::Error + Send + Sync + 'static,
) -> StoreError {
    StoreError::Open {
        path: path.display().to_string(),
        context: what.to_string(),
        source: Some(Arc::new(e)),
    }
}

/// Pragmas every connection gets.
fn configure(
    conn: &Connection,
    path: &Path,
    cache_kib: u32,
    opts: &SqliteOptions,
) -> Result<(), StoreError> {
    conn.busy_timeout(opts.busy_timeout)
        .map_err(|e| open_error(path, "busy_timeout", e))?;
    conn.set_prepared_statement_cache_capacity(64);
    // Plans from the SQL alone, never from bound values. Otherwise every statement that can
    // use a partial index (`contracts_open`, `events_cards`, `events_task`) has its parameters
    // compared with the index's WHERE while planning, and is re-prepared each time the cache
    // hands it out: on the writer, a reply's contract match was re-parsed for every `/send`
    // (10 % of the hub's CPU under load). Every query names its partial index's condition
    // literally, so none loses its index.
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)
        .map_err(|e| open_error(path, "cannot configure the connection", e))?;
    let cache = -i64::from(cache_kib.max(64));
    conn.execute_batch(&format!(
        "PRAGMA cache_size = {cache};
         PRAGMA foreign_keys = OFF;
         PRAGMA temp_store = MEMORY;"
    ))
    .map_err(|e| open_error(path, "cannot configure the connection", e))
}

impl SqliteStore {
    /// Open (creating the file and its directories if needed) the store at `path` with the
    /// default options: WAL, `synchronous=FULL`, 3 readers.
    pub fn open(path: &Path) -> Result<SqliteStore, StoreError> {
        Self::open_with(path, SqliteOptions::default())
    }

    /// Open the store at `path` with explicit options.
    ///
    /// Fails (and leaves the file untouched) when the file is not a SQLite database, is
    /// corrupt, or has a schema newer than this build's.
    pub fn open_with(path: &Path, opts: SqliteOptions) -> Result<SqliteStore, StoreError> {
        if let Some(dir) = path.parent()
            && !dir.as_os_str().is_empty()
        {
            std::fs::create_dir_all(dir)
                .map_err(|e| open_error(path, "cannot create the directory", e))?;
        }
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let writer = Connection::open_with_flags(path, flags)
            .map_err(|e| open_error(path, "cannot open", e))?;
        configure(&writer, path, opts.cache_kib, &opts)?;
        // Only takes effect on a database without tables yet (i.e. before the schema).
        writer
            .execute_batch(&format!("PRAGMA page_size = {};", opts.page_size))
            .map_err(|e| open_error(path, "not a usable SQLite database", e))?;
        // journal_mode is the first statement that reads the header: a file that is not a
        // database fails here ("file is not a database"), before anything is written.
        let mode: String = writer
            .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
            .map_err(|e| open_error(path, "not a usable SQLite database", e))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(StoreError::Open {
                path: path.display().to_string(),
                context: format!("cannot enable WAL: mode is {mode}"),
                source: None,
            });
        }
        let sync = if opts.sync_full { "FULL" } else { "NORMAL" };
        writer
            .execute_batch(&format!(
                "PRAGMA synchronous = {sync};
                 PRAGMA journal_size_limit = 67108864;"
            ))
            .map_err(|e| open_error(path, "cannot configure the writer", e))?;
        let level: i64 = writer
            .query_row("PRAGMA synchronous", [], |r| r.get(0))
            .map_err(|e| open_error(path, "cannot read the sync level back", e))?;
        let synchronous = match level {
            0 => "off",
            1 => "normal",
            2 => "full",
            _ => "extra",
        };
        schema::migrate(&writer, &path.display().to_string())?;
        if let Some(n) = opts.max_pages {
            let _: i64 = writer
                .query_row(&format!("PRAGMA max_page_count = {n}"), [], |r| r.get(0))
                .map_err(|e| open_error(path, "cannot cap the database size", e))?;
        }

        // The checkpoint (copying the log into the database file, then one fsync) runs in the
        // writer between commits, every `checkpoint_pages` frames: SQLite's own auto-checkpoint.
        // A background checkpointer was tried and dropped: under continuous writes it never
        // catches up with the whole log, so the log never restarts from the top (measured: a
        // 1.6 GB WAL after 100k inserts, every append paying for new file blocks).
        writer
            .execute_batch(&format!(
                "PRAGMA wal_autocheckpoint = {};",
                opts.checkpoint_pages.max(100)
            ))
            .map_err(|e| open_error(path, "cannot configure the checkpoint", e))?;

        let mut readers = Vec::new();
        for _ in 0..opts.readers.max(1) {
            let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
            let conn = Connection::open_with_flags(path, flags)
                .map_err(|e| open_error(path, "cannot open a reader", e))?;
            configure(&conn, path, opts.reader_cache_kib, &opts)?;
            readers.push(conn);
        }

        let (workers, wrx, rrx) = Workers::new();
        let mut threads = Vec::new();
        let max_batch = opts.max_batch.max(1);
        let stats = Arc::new(WriteStats::default());
        let wstats = Arc::clone(&stats);
        threads.push(
            std::thread::Builder::new()
                .name("store-writer".into())
                .spawn(move || writer_loop(writer, wrx, max_batch, wstats))
                .map_err(|e| open_error(path, "cannot start the writer thread", e))?,
        );
        for (i, conn) in readers.into_iter().enumerate() {
            let rx = Arc::clone(&rrx);
            threads.push(
                std::thread::Builder::new()
                    .name(format!("store-reader-{i}"))
                    .spawn(move || worker::reader_loop(conn, rx))
                    .map_err(|e| open_error(path, "cannot start a reader thread", e))?,
            );
        }
        tracing::debug!(path = %path.display(), sync, "sqlite store open");
        Ok(SqliteStore {
            inner: Arc::new(Inner {
                path: path.to_path_buf(),
                stats,
                shared: Shared {
                    workers,
                    describe: format!("sqlite:{}", path.display()),
                    synchronous,
                    changes: None,
                    lease: None,
                    threads,
                },
            }),
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Write transactions committed (or failed) and write closures run since open: their
    /// ratio is the average group-commit size (for `/metrics`).
    pub fn write_stats(&self) -> (u64, u64) {
        (
            self.inner.stats.batches.load(Ordering::Relaxed),
            self.inner.stats.jobs.load(Ordering::Relaxed),
        )
    }
}

fn writer_loop(
    conn: Connection,
    rx: mpsc::Receiver<BoxedWriteJob>,
    max_batch: usize,
    stats: Arc<WriteStats>,
) {
    let mut batch: Vec<BoxedWriteJob> = Vec::with_capacity(64);
    while let Ok(first) = rx.recv() {
        batch.push(first);
        worker::pull(&rx, &mut batch, max_batch);
        if batch.len() > 1 && batch.len() < max_batch {
            // Under load (writes were already queued behind the first): let the threads
            // producing them run once more, so this commit is shared by more writes. A lone
            // write (an idle hub) is committed at once.
            std::thread::yield_now();
            worker::pull(&rx, &mut batch, max_batch);
        }
        stats.batches.fetch_add(1, Ordering::Relaxed);
        stats.jobs.fetch_add(batch.len() as u64, Ordering::Relaxed);
        let outcome = run_batch(&conn, &mut batch);
        worker::finish_batch(&mut batch, outcome);
    }
    // Leaves a small WAL behind for the next open; errors only mean a bigger WAL.
    if let Err(e) = conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)") {
        tracing::debug!(error = %e, "final checkpoint skipped");
    }
}

/// Run every job of the batch in one transaction; `Err` when the transaction as a whole did
/// not commit (then no job's changes are kept).
fn run_batch(conn: &Connection, batch: &mut [BoxedWriteJob]) -> Result<(), StoreError> {
    let step = |sql: &str| {
        conn.prepare_cached(sql)
            .and_then(|mut st| st.execute([]))
            .map_err(|e| StoreError::db_from(sql, e))
    };
    step("BEGIN IMMEDIATE")?;
    let mut body = || -> Result<(), StoreError> {
        let mut tx = SqlTx::new(conn);
        if let [job] = batch {
            // Alone in its batch, a job needs no savepoint: its failure rolls back the whole
            // transaction, which holds nothing else. This is the common case (and the wake
            // path) whenever the hub is not saturated; a savepoint makes SQLite copy every
            // page the job touches into the sub-journal.
            if job.run(&mut tx) {
                step("COMMIT")?;
            } else {
                step("ROLLBACK")?;
            }
            return Ok(());
        }
        for job in batch.iter_mut() {
            tx.next_job();
            step("SAVEPOINT job")?;
            if job.run(&mut tx) {
                step("RELEASE job")?;
            } else {
                step("ROLLBACK TO job")?;
                step("RELEASE job")?;
            }
        }
        step("COMMIT")?;
        Ok(())
    };
    let result = body();
    if result.is_err() && !conn.is_autocommit() {
        // Some errors (disk full, I/O) already rolled back; otherwise roll back ourselves.
        if let Err(e) = conn.execute_batch("ROLLBACK") {
            tracing::error!(error = %e, "rollback of a failed write batch failed");
        }
    }
    result
}

impl Backend for SqliteStore {
    type Conn = Connection;

    fn shared(&self) -> &Shared<Connection> {
        &self.inner.shared
    }

    fn read_on<R>(
        conn: &mut Connection,
        f: impl FnOnce(&dyn ReadTx) -> Result<R, StoreError>,
    ) -> Result<R, StoreError> {
        conn.execute_batch("BEGIN DEFERRED")
            .map_err(|e| StoreError::db_from("begin read", e))?;
        let out = worker::run_read_closure(&SqlTx::new(conn), f);
        // A read transaction has nothing to keep; ending it releases the snapshot so the WAL can
        // be checkpointed past it.
        if let Err(e) = conn.execute_batch("COMMIT") {
            tracing::warn!(error = %e, "ending a read transaction failed");
            let _ = conn.execute_batch("ROLLBACK");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Map, Value, json};
    use trantor_store::{EventFilter, NewEvent, NewMessage, Store};

    fn message_event(msg_id: i64, to: &str, text: &str) -> NewEvent {
        let mut data = Map::new();
        data.insert("msgId".into(), json!(msg_id));
        data.insert("toSession".into(), json!(to));
        data.insert("text".into(), json!(text));
        data.insert("refs".into(), json!([7]));
        NewEvent {
            ts: 1,
            kind: "message".into(),
            project: "p".into(),
            by: "a-p".into(),
            task_id: None,
            refs: vec![7],
            data,
        }
    }

    /// A `message` event keeps a reference, not a copy, when its text is a prefix of the
    /// message's; what `events()` returns is the same as for a copy.
    #[tokio::test]
    async fn message_events_are_stored_by_reference() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("hub.db");
        let store = SqliteStore::open(&path).expect("open");
        let long: String = "é".repeat(3000);
        let cut: String = long.chars().take(2000).collect();
        let (written, expected) = store
            .write(move |tx| {
                let mut written = Vec::new();
                let mut expected = Vec::new();
                for (text, event_text) in [
                    ("hello #7".to_string(), "hello #7".to_string()),
                    (long.clone(), cut.clone()),
                    // Not a prefix of the message: stored as a copy.
                    ("original".to_string(), "edited".to_string()),
                ] {
                    let m = tx.insert_message(
                        NewMessage {
                            ts: 1,
                            from: "a-p".into(),
                            to: "b-p".into(),
                            project: "p".into(),
                            text,
                            ..Default::default()
                        },
                        &[7],
                    )?;
                    let e = tx.insert_event(message_event(m.id, "b-p", &event_text))?;
                    written.push(e.clone());
                    expected.push(e);
                }
                Ok((written, expected))
            })
            .await
            .expect("write");
        // The returned events carry the text.
        assert_eq!(written, expected);
        assert_eq!(
            written[1].data["text"].as_str().map(|t| t.chars().count()),
            Some(2000)
        );
        let read = store
            .read(|tx| {
                tx.events(&EventFilter {
                    limit: 100,
                    ..EventFilter::default()
                })
            })
            .await
            .expect("read");
        assert_eq!(read, expected, "events read back as written");
        let by_card = store
            .read(|tx| {
                tx.events(&EventFilter {
                    task_id: Some(7),
                    limit: 100,
                    ..EventFilter::default()
                })
            })
            .await
            .expect("read");
        assert_eq!(by_card, expected);
        drop(store);
        // On disk: the first two hold no text, the third its own copy.
        let conn = Connection::open(&path).expect("raw open");
        let rows: Vec<(String, Option<i64>)> = conn
            .prepare("SELECT data, text_chars FROM events ORDER BY id")
            .and_then(|mut st| {
                st.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
                    .collect::<Result<Vec<_>, _>>()
            })
            .expect("rows");
        let text_of = |s: &str| serde_json::from_str::<Value>(s).expect("json")["text"].clone();
        assert_eq!(text_of(&rows[0].0), Value::Null);
        assert_eq!(rows[0].1, Some(8));
        assert_eq!(text_of(&rows[1].0), Value::Null);
        assert_eq!(rows[1].1, Some(2000));
        assert_eq!(text_of(&rows[2].0), json!("edited"));
        assert_eq!(rows[2].1, None);
    }

    /// A cached statement that can use a partial index is not re-prepared when it is handed
    /// out again with other values: the planner does not look at bound values (QPSG).
    #[tokio::test]
    async fn partial_index_statements_stay_prepared() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("hub.db");
        drop(SqliteStore::open(&path).expect("open creates the schema"));
        let conn = Connection::open(&path).expect("raw open");
        configure(&conn, &path, 64, &SqliteOptions::default()).expect("configure");
        let statements = [
            // The contract match of a plain reply (tx.rs), on `contracts_open`.
            "SELECT id FROM contracts INDEXED BY contracts_open
               WHERE sender = ?1 AND assignee = ?2 AND answer_id IS NULL AND ack = 0
                 AND ts >= ?3 AND id < ?4
             ORDER BY ts, id LIMIT 1",
            // A card's events, on `events_task`.
            "SELECT id FROM events WHERE task_id = ?1 AND id > ?2 AND ts > ?3 AND by_s != ?4
             ORDER BY id LIMIT 1",
        ];
        for sql in statements {
            for i in 0..4i64 {
                let who = format!("s{i}");
                let _ = conn
                    .prepare_cached(sql)
                    .expect("prepare")
                    .query_row(rusqlite::params![who, i, i * 7, who], |r| {
                        r.get::<_, i64>(0)
                    });
            }
            let st = conn.prepare_cached(sql).expect("prepare");
            assert_eq!(
                st.get_status(rusqlite::StatementStatus::RePrepare),
                0,
                "re-prepared on every use: {sql}"
            );
        }
    }

    /// A version-1 database (events with their text copies) opens, migrates to version 2, and
    /// its old events read back unchanged.
    #[tokio::test]
    async fn v1_database_migrates() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("hub.db");
        {
            let conn = Connection::open(&path).expect("raw open");
            conn.execute_batch(
                "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;",
            )
            .expect("meta");
            conn.execute_batch(schema::V1).expect("v1");
            conn.execute_batch(
                "INSERT INTO meta VALUES ('schema_version', '1');
                 INSERT INTO events(ts, type, project, by_s, data)
                     VALUES (1, 'message', 'p', 'a-p', '{\"msgId\":1,\"text\":\"old copy\"}');",
            )
            .expect("v1 rows");
        }
        let store = SqliteStore::open(&path).expect("open migrates");
        let read = store
            .read(|tx| {
                tx.events(&EventFilter {
                    limit: 10,
                    ..EventFilter::default()
                })
            })
            .await
            .expect("read");
        assert_eq!(read.len(), 1);
        assert_eq!(read[0].data["text"], json!("old copy"));
        drop(store);
        let conn = Connection::open(&path).expect("raw open");
        let v: String = conn
            .query_row(
                "SELECT value FROM meta WHERE key = 'schema_version'",
                [],
                |r| r.get(0),
            )
            .expect("version");
        assert_eq!(v, SCHEMA_VERSION.to_string());
    }
}

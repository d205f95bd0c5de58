//! The hub's [`Store`] on PostgreSQL, so several hubs can serve one crew from one database.
//!
//! Design (mirrors the embedded SQLite store, so the hub's domain logic is unchanged):
//! - **Connections on store-owned threads.** The `Store` trait runs synchronous closures over a
//!   transaction: one writer thread and a few reader threads each own one connection (a
//!   `tokio-postgres` client driven by a current-thread runtime private to that thread) and take
//!   closures from a queue. No async pool is needed, and no closure ever blocks a tokio worker.
//!   Driving the async client directly lets savepoint commands, and the writer's inserts whose
//!   only answer would be an id it chose itself, be pipelined with the next statement or with
//!   `COMMIT` instead of costing round trips of their own: a batch of `/send`s is two round
//!   trips (see `run_batch`).
//! - **Writes are serialised across every hub** by a transaction-scoped advisory lock taken at
//!   the start of each write transaction. That keeps the contract the SQLite store gives for
//!   free: message ids increase in commit order (a `/poll` cursor never skips a message that
//!   commits late with a smaller id), and read-modify-write closures (the card gate, `_op`
//!   records, delivery ledgers) never interleave. The writer groups the closures queued at that
//!   moment into one transaction (a failing one undone alone, see `run_batch`), so one commit
//!   (one WAL flush) serves many writes, and their inserts go out as one multi-row statement
//!   per table (`batch`). [`Store::write`] resolves only after `COMMIT` returned, and with
//!   `synchronous_commit = on` (the default, `--sync full`) a committed write is on disk.
//! - **Reads** run in `REPEATABLE READ READ ONLY` transactions: one consistent snapshot each.
//! - **The contract ledger** is kept after the commit, by a pass thread (`ledger`): a pass
//!   applies every message committed since the last, in one transaction, about `ledger_pace`
//!   after a commit; [`trantor_store::Store::ledger_current`] asks for a pass and waits for
//!   it, so a ledger read sees every message committed before it, on any hub.
//! - **Cross-hub wake:** inserting a message also runs `pg_notify` (delivered at commit) with
//!   its id and recipient (a writer batch's messages in one notification, `announced`). A
//!   listener thread `LISTEN`s on its own connection and publishes [`Change`]s through
//!   [`Store::watch`]; it re-reads the tip every `catchup` interval and after every reconnect,
//!   so a lost notification delays a wake by at most that interval and loses nothing.
//!   Messages found that way have their recipients read back (up to 1,024 of them; past that,
//!   every held poll is woken), so only their polls look again.
//! - **Periodic-work lease:** a lease thread holds `pg_try_advisory_lock` on its own connection;
//!   the session-scoped lock dies with the connection, so when the holding hub dies another hub
//!   takes the lease on its next check. [`Store::lease`] says whether this hub holds it and who
//!   does (the holder's `application_name`).
//! - **Losing the database:** a connection that fails is dropped and reopened on the next
//!   request; failures in between are [`StoreError::Unavailable`] (the hub answers 503). A
//!   transaction whose `BEGIN` fails on a dead connection is retried once on a fresh one.

mod batch;
mod ledger;
mod schema;
mod statements;
mod tx;

pub use schema::SCHEMA_VERSION;

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::task::Poll;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use postgres::fallible_iterator::FallibleIterator;
use postgres::{Client, NoTls, Statement};
use tokio::sync::broadcast;
use trantor_store::worker::{self, Backend, BoxedWriteJob, Shared, Workers};
use trantor_store::{Change, LeaseStatus, ReadTx, StoreError};

use tx::PgTx;

/// Advisory-lock keys (bigint), "trantor" in ASCII plus a suffix: writes, lease, migrations.
pub(crate) const K_WRITE: i64 = 0x7472_616e_746f_7201;
/// The periodic-work lease.
pub(crate) const K_LEASE: i64 = 0x7472_616e_746f_7202;
/// Schema migrations.
pub(crate) const K_MIGRATE: i64 = 0x7472_616e_746f_7203;
/// The contract ledger's writes (its passes, imports, the reaper's records, retention); the
/// schema's functions carry it as a literal (`schema`, version 8).
pub(crate) const K_LEDGER: i64 = 0x7472_616e_746f_7204;
/// The channel new messages are announced on: a JSON array of `[id, recipient]` pairs (a
/// writer batch's), or `<id> <recipient>` (one message; and what hubs before schema 8 sent).
pub(crate) const NOTIFY_CHANNEL: &str = "trantor_msg";

/// Prepared statements kept per connection before the cache is cleared (dynamic filters can
/// produce many shapes).
const STATEMENT_CACHE: usize = 256;

/// Options of [`PgStore::open_with`].
#[derive(Debug, Clone)]
pub struct PgOptions {
    /// Reader threads (one connection each).
    pub readers: usize,
    /// `synchronous_commit = on` (true) or `off` (false: an acknowledged write survives the hub
    /// being killed, but the last commits may be lost if the database server crashes).
    pub sync_full: bool,
    /// How often the listener re-reads the tip, bounding the delay a lost notification causes.
    pub catchup: Duration,
    /// How often the lease thread checks (or tries to take) the periodic-work lease.
    pub lease_check: Duration,
    /// Connect timeout for every connection.
    pub connect_timeout: Duration,
    /// This process's label, shown as the lease holder (`application_name`).
    pub node: String,
    /// Run the listener, lease and ledger-pass threads (a hub does; `import`/`export` tools do
    /// not: their ledger reads run a pass themselves).
    pub background: bool,
    /// How long after a commit the ledger pass thread waits before its pass, so one pass takes
    /// the batches of that time together (a reader never waits for it: it asks for a pass).
    pub ledger_pace: Duration,
}

impl Default for PgOptions {
    fn default() -> Self {
        PgOptions {
            readers: 3,
            sync_full: true,
            catchup: Duration::from_millis(1000),
            lease_check: Duration::from_millis(1000),
            connect_timeout: Duration::from_secs(3),
            node: format!("trantor pid {}", std::process::id()),
            background: true,
            ledger_pace: Duration::from_millis(50),
        }
    }
}

/// A PostgreSQL-backed store handle; cheap to clone.
#[derive(Clone)]
pub struct PgStore {
    inner: Arc<Inner>,
}

struct Inner {
    url: String,
    /// The queues, `postgres:<url>`, the `synchronous_commit` the server applied, the changes
    /// the listener hears, the lease thread's status and the threads.
    shared: Shared<Slot>,
    stop: Arc<AtomicBool>,
    /// The ledger pass thread's signals (`None` without background threads).
    ledger: Option<Arc<ledger::Ledger>>,
    /// How to reach the database, for a ledger pass run without the thread.
    connector: Arc<Connector>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // The listener and lease threads end at their next check, the ledger pass thread at
        // once; the worker threads when `shared` closes their queues, and then it joins them.
        self.stop.store(true, Ordering::SeqCst);
        if let Some(l) = &self.ledger {
            l.close();
        }
    }
}

impl fmt::Debug for PgStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgStore")
            .field("url", &self.inner.url)
            .finish_non_exhaustive()
    }
}

/// An owned statement parameter, for a statement that goes out after its caller returned.
pub(crate) type OwnedParam = Box<dyn postgres::types::ToSql + Sync + Send>;

/// Work queued on a connection to go out ahead of its next statement, in order.
enum Pending {
    /// Simple-protocol commands (`;`-separated): savepoints, `setval`.
    Simple(String),
    /// A row whose insert nobody waits for (its id chosen by the writer); the rows queued
    /// between two commands go out as a few multi-row statements ([`batch::statements`]). If
    /// one fails, the transaction is aborted, so the batch is rolled back as a whole.
    Row(batch::Row),
}

/// A request on its way: what [`Pending`] becomes when it is sent.
enum Request {
    /// Simple-protocol commands.
    Simple(String),
    /// A prepared statement whose reply nobody waits for.
    Exec(Statement, Vec<OwnedParam>, Origin),
}

/// The write job running on the writer's connection (see [`run_batch`]): where its queued work
/// starts in [`Conn::pending`], and whether it opened a savepoint (on its first round trip:
/// work that was never sent is simply dropped if the job fails, and needs none).
#[derive(Debug, Clone, Copy)]
struct JobMark {
    start: usize,
    in_savepoint: bool,
}

/// The table and operation of a statement, for its error.
pub(crate) type Origin = (&'static str, &'static str);

/// The ids the writer hands out inside its locked transaction (see [`run_batch`]): the next
/// message and event ids, read from their sequences when the batch began, and where they
/// started (so the sequences are moved past what was used before `COMMIT`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ids {
    pub(crate) next_msg: i64,
    start_msg: i64,
    pub(crate) next_event: i64,
    start_event: i64,
}

/// One connection of a worker thread, with its prepared-statement cache.
///
/// It drives the asynchronous client on a runtime of its own (current-thread, only ever run by
/// the owning thread's calls), so work can be *deferred*: transaction-control commands and the
/// writer's inserts whose reply nobody needs are sent in the same round trip as the next
/// statement that must be answered (pipelined), or with `COMMIT`, instead of one round trip each.
pub(crate) struct Conn {
    rt: tokio::runtime::Runtime,
    client: tokio_postgres::Client,
    stmts: HashMap<String, Statement>,
    /// What goes out ahead of the next statement.
    pending: Vec<Pending>,
    /// Deferred work failed (what it was): the savepoints are not what the writer thinks, so
    /// the whole transaction must be abandoned (see [`run_batch`]).
    deferred_failed: Option<Origin>,
    /// Inside the writer's locked transaction: the ids it hands out (None elsewhere).
    pub(crate) ids: Option<Ids>,
    /// The write job running now, if any.
    job: Option<JobMark>,
}

/// A deferred request on its way (its reply read when it comes).
type Sent<'a> = Pin<Box<dyn Future<Output = Result<(), postgres::Error>> + 'a>>;

/// Send `pending` (when not empty) and then run `fut`, all in one round trip; the first error
/// wins (a failed deferred statement aborts the transaction, so what follows fails too) and
/// sets `failed` to what failed.
fn pipelined<T>(
    rt: &tokio::runtime::Runtime,
    client: &tokio_postgres::Client,
    pending: Vec<Request>,
    failed: &mut Option<Origin>,
    fut: impl Future<Output = Result<T, postgres::Error>>,
) -> Result<T, postgres::Error> {
    if pending.is_empty() {
        return rt.block_on(fut);
    }
    let (ahead, out) = rt.block_on(async move {
        // Each request is queued on the connection at its future's first poll, and every poll
        // below goes in order, so the server receives (and runs) them in this order.
        let mut ahead: Vec<Sent<'_>> = pending
            .iter()
            .map(|p| -> Sent<'_> {
                match p {
                    Request::Simple(sql) => Box::pin(client.batch_execute(sql)),
                    Request::Exec(st, params, _) => Box::pin(async move {
                        client
                            .execute_raw(
                                st,
                                params
                                    .iter()
                                    .map(|p| p.as_ref() as &(dyn postgres::types::ToSql + Sync)),
                            )
                            .await
                            .map(|_| ())
                    }),
                }
            })
            .collect();
        let mut done: Vec<Option<Result<(), postgres::Error>>> =
            ahead.iter().map(|_| None).collect();
        let mut fut = std::pin::pin!(fut);
        let mut slot = None;
        let out = std::future::poll_fn(|cx| {
            for (f, d) in ahead.iter_mut().zip(done.iter_mut()) {
                if d.is_none()
                    && let Poll::Ready(r) = f.as_mut().poll(cx)
                {
                    *d = Some(r);
                }
            }
            if slot.is_none()
                && let Poll::Ready(r) = fut.as_mut().poll(cx)
            {
                slot = Some(r);
            }
            if !done.iter().all(Option::is_some) {
                return Poll::Pending;
            }
            match slot.take() {
                Some(r) => Poll::Ready(r),
                None => Poll::Pending,
            }
        })
        .await;
        let ahead = done.into_iter().zip(&pending).find_map(|(d, p)| match d {
            Some(Err(e)) => Some((e, p.origin())),
            _ => None,
        });
        (ahead, out)
    });
    if let Some((e, origin)) = ahead {
        *failed = Some(origin);
        return Err(e);
    }
    out
}

impl Request {
    fn origin(&self) -> Origin {
        match self {
            Request::Simple(_) => ("transaction", "savepoint"),
            Request::Exec(_, _, origin) => *origin,
        }
    }
}

impl Conn {
    /// Open a connection with `config` (`url` is the masked address, for errors).
    fn connect(config: &tokio_postgres::Config, url: &str) -> Result<Conn, StoreError> {
        let context = || format!("cannot connect to {url}");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| StoreError::Unavailable {
                context: context(),
                source: Some(Arc::new(e)),
            })?;
        let (client, connection) =
            rt.block_on(config.connect(NoTls))
                .map_err(|e| StoreError::Unavailable {
                    context: context(),
                    source: Some(Arc::new(e)),
                })?;
        rt.spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "store connection ended");
            }
        });
        Ok(Conn {
            rt,
            client,
            stmts: HashMap::new(),
            pending: Vec::new(),
            deferred_failed: None,
            ids: None,
            job: None,
        })
    }

    /// Whether the connection is gone.
    fn is_closed(&self) -> bool {
        self.client.is_closed()
    }

    /// Queue simple-protocol commands to go out with the next statement.
    fn defer(&mut self, sql: &str) {
        if let Some(Pending::Simple(s)) = self.pending.last_mut() {
            s.push_str("; ");
            s.push_str(sql);
        } else {
            self.pending.push(Pending::Simple(sql.to_string()));
        }
    }

    /// Queue a row to be inserted with the next round trip (its reply is not waited for; a
    /// failure fails the transaction).
    pub(crate) fn defer_row(&mut self, row: batch::Row) {
        self.pending.push(Pending::Row(row));
    }

    /// A write job begins: what it queues from here on is its own.
    fn job_start(&mut self) {
        self.job = Some(JobMark {
            start: self.pending.len(),
            in_savepoint: false,
        });
    }

    /// The write job ends, kept (`ok`) or not: what it queued and never sent is dropped if
    /// not, and a savepoint it opened is released or rolled back to, with the next round trip.
    fn job_end(&mut self, ok: bool) {
        let Some(job) = self.job.take() else {
            return;
        };
        if !ok {
            self.pending.truncate(job.start);
        }
        if job.in_savepoint {
            self.defer(if ok {
                "RELEASE SAVEPOINT job"
            } else {
                "ROLLBACK TO SAVEPOINT job; RELEASE SAVEPOINT job"
            });
        }
    }

    /// Take what is queued, as requests to send now: a job's first round trip opens its
    /// savepoint ahead of its own work, and the rows between two commands become one statement
    /// per table. A statement that cannot be prepared fails the transaction like a failed
    /// deferred one.
    fn take_pending(&mut self) -> Result<Vec<Request>, postgres::Error> {
        if let Some(job) = self.job.as_mut() {
            if !job.in_savepoint {
                self.pending
                    .insert(job.start, Pending::Simple("SAVEPOINT job".into()));
                job.in_savepoint = true;
            }
            job.start = 0;
        }
        let mut out = Vec::new();
        let mut rows = Vec::new();
        for p in std::mem::take(&mut self.pending) {
            match p {
                Pending::Row(r) => rows.push(r),
                Pending::Simple(sql) => {
                    self.rows_out(std::mem::take(&mut rows), &mut out)?;
                    out.push(Request::Simple(sql));
                }
            }
        }
        self.rows_out(rows, &mut out)?;
        Ok(out)
    }

    /// Append the statements that insert `rows` to `out`.
    fn rows_out(
        &mut self,
        rows: Vec<batch::Row>,
        out: &mut Vec<Request>,
    ) -> Result<(), postgres::Error> {
        for (sql, params, origin) in batch::statements(rows) {
            let st = self.prepare(sql).inspect_err(|_| {
                self.deferred_failed = Some(origin);
            })?;
            out.push(Request::Exec(st, params, origin));
        }
        Ok(())
    }

    /// Send what is queued and then `call`'s request, in one round trip.
    pub(crate) fn send<'a, T, F>(
        &'a mut self,
        call: impl FnOnce(&'a tokio_postgres::Client) -> F,
    ) -> Result<T, postgres::Error>
    where
        F: Future<Output = Result<T, postgres::Error>> + 'a,
    {
        let pending = self.take_pending()?;
        let Conn {
            rt,
            client,
            deferred_failed,
            ..
        } = self;
        let client: &'a tokio_postgres::Client = client;
        pipelined(rt, client, pending, deferred_failed, call(client))
    }

    /// The store error for `e`, raised by a statement of `table`/`op` — or by the deferred
    /// work that went out ahead of it, when that is what failed.
    pub(crate) fn blame(
        &self,
        table: &'static str,
        op: &'static str,
        e: postgres::Error,
    ) -> StoreError {
        let (table, op) = self.deferred_failed.unwrap_or((table, op));
        map_pg(table, op)(e)
    }

    /// Drop the deferred work unsent (the transaction is being abandoned, or a new one begins).
    fn discard_deferred(&mut self) {
        self.pending.clear();
        self.deferred_failed = None;
        self.ids = None;
        self.job = None;
    }

    /// Run simple-protocol commands (after any deferred work, in the same round trip).
    pub(crate) fn batch_execute(&mut self, sql: &str) -> Result<(), postgres::Error> {
        self.defer(sql);
        self.send(|_| std::future::ready(Ok(())))
    }

    /// Run simple-protocol commands with nothing deferred ahead, and return the rows they
    /// produced (a transaction's start).
    fn simple_rows(
        &mut self,
        sql: &str,
    ) -> Result<Vec<tokio_postgres::SimpleQueryRow>, postgres::Error> {
        self.pending.clear();
        let msgs = self.rt.block_on(self.client.simple_query(sql))?;
        Ok(msgs
            .into_iter()
            .filter_map(|m| match m {
                tokio_postgres::SimpleQueryMessage::Row(r) => Some(r),
                _ => None,
            })
            .collect())
    }

    /// The prepared statement for `sql`, preparing it on first use.
    pub(crate) fn prepare(&mut self, sql: &str) -> Result<Statement, postgres::Error> {
        if let Some(st) = self.stmts.get(sql) {
            return Ok(st.clone());
        }
        if self.stmts.len() >= STATEMENT_CACHE {
            self.stmts.clear();
        }
        let st = self.rt.block_on(self.client.prepare(sql))?;
        self.stmts.insert(sql.to_string(), st.clone());
        Ok(st)
    }
}

/// The one URL masker (`trantor_proto::text::mask_url`), here too for this crate's users.
pub use trantor_proto::text::mask_url;

/// Whether a driver error means the connection (or the server) is gone rather than the
/// statement being wrong.
pub(crate) fn is_connection_error(e: &postgres::Error) -> bool {
    if e.is_closed() {
        return true;
    }
    if let Some(code) = e.code() {
        let c = code.code();
        // 08: connection exception; 57P: operator intervention (shutdown, terminated backend).
        return c.starts_with("08") || c.starts_with("57P");
    }
    let mut cur: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(s) = cur {
        if s.is::<std::io::Error>() {
            return true;
        }
        cur = s.source();
    }
    false
}

/// Map a driver error of a statement on `table` (doing `op`) to a [`StoreError`].
pub(crate) fn map_pg(
    table: &'static str,
    op: &'static str,
) -> impl Fn(postgres::Error) -> StoreError {
    move |e| {
        if is_connection_error(&e) {
            StoreError::Unavailable {
                context: format!("{table}: {op}"),
                source: Some(Arc::new(e)),
            }
        } else {
            StoreError::db_from(format!("{table}: {op}"), e)
        }
    }
}

/// An error while opening the store at `url`.
pub(crate) fn unavailable_or_open(url: &str, what: &str, e: postgres::Error) -> StoreError {
    StoreError::Open {
        path: url.to_string(),
        context: what.to_string(),
        source: Some(Arc::new(e)),
    }
}

/// Makes connections to the database with the configured options.
struct Connector {
    config: postgres::Config,
    /// The same settings for the worker connections ([`Conn`]).
    async_config: tokio_postgres::Config,
    url: String,
}

impl Connector {
    /// A worker connection labelled `app`.
    fn conn(&self, app: &str) -> Result<Conn, StoreError> {
        let mut c = self.async_config.clone();
        c.application_name(app);
        Conn::connect(&c, &self.url)
    }

    fn connect(&self, app: &str) -> Result<Client, StoreError> {
        let mut c = self.config.clone();
        c.application_name(app);
        c.connect(NoTls).map_err(|e| StoreError::Unavailable {
            context: format!("cannot connect to {}", self.url),
            source: Some(Arc::new(e)),
        })
    }
}

/// Session set-up run on each new connection of a worker.
type SessionSetup = Box<dyn Fn(&mut Conn) -> Result<(), postgres::Error> + Send>;

/// A worker thread's connection, opened on demand and dropped when it fails. Public only as
/// what [`PgStore`]'s reader threads own ([`Backend::Conn`]); nothing outside the crate can make
/// or use one.
pub struct Slot {
    conn: Option<Conn>,
    connector: Arc<Connector>,
    app: String,
    /// Session set-up run on every new connection.
    setup: Option<SessionSetup>,
}

impl Slot {
    fn get(&mut self) -> Result<&mut Conn, StoreError> {
        if self.conn.as_ref().is_some_and(|c| c.is_closed()) {
            self.conn = None;
        }
        if self.conn.is_none() {
            let mut conn = self.connector.conn(&self.app)?;
            if let Some(setup) = &self.setup {
                setup(&mut conn).map_err(map_pg("session", "set-up"))?;
            }
            self.conn = Some(conn);
        }
        match self.conn.as_mut() {
            Some(c) => Ok(c),
            None => Err(StoreError::db("no connection")),
        }
    }

    /// Drop the connection if it is dead, so the next request reconnects.
    fn check(&mut self) {
        if self.conn.as_ref().is_some_and(|c| c.is_closed()) {
            self.conn = None;
        }
    }

    /// Start a transaction with `sql`, retrying once on a fresh connection when the held one
    /// turns out to be dead (the server restarted, or the backend was terminated).
    /// Its rows are what the commands returned (the writer reads the next ids there).
    fn begin(&mut self, sql: &str) -> Result<Vec<tokio_postgres::SimpleQueryRow>, StoreError> {
        let mut attempt = 0;
        loop {
            let conn = self.get()?;
            conn.discard_deferred();
            match conn.simple_rows(sql) {
                Ok(rows) => return Ok(rows),
                Err(e) if is_connection_error(&e) => {
                    self.conn = None;
                    if attempt > 0 {
                        return Err(map_pg("transaction", "begin")(e));
                    }
                    tracing::info!(error = %e, "store connection lost; reconnecting");
                }
                Err(e) => {
                    // A batch that began and then failed leaves an aborted transaction behind.
                    if let Some(c) = self.conn.as_mut()
                        && c.batch_execute("ROLLBACK").is_err()
                    {
                        self.conn = None;
                    }
                    return Err(map_pg("transaction", "begin")(e));
                }
            }
            attempt += 1;
        }
    }
}

/// The writer thread: batches of the queued jobs, each one transaction; after each commit the
/// ledger pass thread (when there is one) is told a pass is due.
fn writer_loop(
    mut slot: Slot,
    rx: mpsc::Receiver<BoxedWriteJob>,
    max_batch: usize,
    ledger: Option<Arc<ledger::Ledger>>,
) {
    let mut batch: Vec<BoxedWriteJob> = Vec::with_capacity(64);
    while let Ok(first) = rx.recv() {
        batch.push(first);
        worker::pull(&rx, &mut batch, max_batch);
        let outcome = run_batch(&mut slot, &mut batch, &rx, max_batch);
        if let (Ok(()), Some(l)) = (&outcome, &ledger) {
            l.kick();
        }
        worker::finish_batch(&mut batch, outcome);
    }
}

/// Run every job of the batch in one transaction under the write lock; `Err` when the
/// transaction as a whole did not commit (then no job's changes are kept).
///
/// Round trips per batch: two when the jobs only insert (a `/send`). The first is `BEGIN`, the
/// lock and the next message and event ids: the writer holds the lock that serialises every
/// write, so it hands out the ids itself ([`Ids`]), and an insert whose only answer was its id
/// costs no round trip — its row is queued on the connection ([`Conn::defer_row`]). The second
/// carries everything queued, as one multi-row statement per table (`batch`), the sequences
/// moved past the ids used, and `COMMIT`. A job that must read (a card, a peer) sends what is
/// queued ahead of its read, in the same round trip. Jobs queued while the batch runs are
/// pulled into it before it commits.
///
/// A job is undone alone when it fails: what it queued and never sent is dropped; a job that
/// made a round trip opened a savepoint ahead of its own work with it, and is rolled back to
/// that. A job that only queued rows (a `/send`) needs no savepoint at all.
///
/// A queued insert that fails is seen at the next round trip; the savepoints are then unknown,
/// so the whole batch is rolled back and every job in it gets the error (inserts with ids the
/// writer chose, into tables without unique keys other than those ids, do not fail short of the
/// server failing).
fn run_batch(
    slot: &mut Slot,
    batch: &mut Vec<BoxedWriteJob>,
    rx: &mpsc::Receiver<BoxedWriteJob>,
    max_batch: usize,
) -> Result<(), StoreError> {
    let next = |seq: &str| {
        format!("(SELECT CASE WHEN is_called THEN last_value + 1 ELSE last_value END FROM {seq})")
    };
    let begin = format!(
        "BEGIN; SELECT pg_advisory_xact_lock({K_WRITE}); SELECT {}, {}",
        next("messages_id_seq"),
        next("events_id_seq")
    );
    let rows = slot.begin(&begin)?;
    let result = (|| -> Result<(), StoreError> {
        let conn = slot.get()?;
        conn.ids = Some(read_ids(&rows)?);
        let mut i = 0;
        while i < batch.len() {
            conn.job_start();
            let ok = batch[i].run(&mut PgTx::new(conn));
            conn.job_end(ok);
            i += 1;
            if i == batch.len() {
                // Writes that arrived while these ran join this transaction, so one commit
                // serves them too instead of each waiting for a commit of its own.
                worker::pull(rx, batch, max_batch);
            }
        }
        if conn.deferred_failed.is_some() {
            // A closure went on (and returned Ok) after one of its statements failed: the
            // savepoint commands sent after it failed too, so which changes a rollback would
            // undo is unknown. Keep none of them.
            return Err(StoreError::db(
                "transaction: a savepoint command failed; the batch is rolled back",
            ));
        }
        let commit = format!("{}COMMIT", move_sequences(conn));
        let r = conn.batch_execute(&commit);
        r.map_err(|e| conn.blame("transaction", "commit", e))
    })();
    if result.is_err() {
        slot.check();
        if let Some(conn) = slot.conn.as_mut()
            && let Err(e) = {
                conn.discard_deferred();
                conn.batch_execute("ROLLBACK")
            }
        {
            tracing::debug!(error = %e, "rollback of a failed write batch failed");
            slot.conn = None;
        }
    }
    result
}

/// The next message and event ids, from the row the batch's `BEGIN` returned.
fn read_ids(rows: &[tokio_postgres::SimpleQueryRow]) -> Result<Ids, StoreError> {
    let bad = || StoreError::db("transaction: the next ids were not returned");
    let row = rows.iter().rev().find(|r| r.len() == 2).ok_or_else(bad)?;
    let col = |i: usize| -> Result<i64, StoreError> {
        row.get(i)
            .and_then(|v| v.parse::<i64>().ok())
            .ok_or_else(bad)
    };
    let (msg, event) = (col(0)?, col(1)?);
    Ok(Ids {
        next_msg: msg,
        start_msg: msg,
        next_event: event,
        start_event: event,
    })
}

/// The commands (each ending in `; `) that move the id sequences past the ids this batch
/// handed out, so a `nextval` elsewhere never returns one of them.
fn move_sequences(conn: &Conn) -> String {
    let Some(ids) = conn.ids else {
        return String::new();
    };
    let mut sql = String::new();
    if ids.next_msg > ids.start_msg {
        sql.push_str(&format!(
            "SELECT setval('messages_id_seq', {}); ",
            ids.next_msg - 1
        ));
    }
    if ids.next_event > ids.start_event {
        sql.push_str(&format!(
            "SELECT setval('events_id_seq', {}); ",
            ids.next_event - 1
        ));
    }
    sql
}

/// Sleep up to `d`, waking early when `stop` is set; `false` when stopped.
fn nap(stop: &AtomicBool, d: Duration) -> bool {
    let until = Instant::now() + d;
    while Instant::now() < until {
        if stop.load(Ordering::SeqCst) {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50).min(until - Instant::now()));
    }
    !stop.load(Ordering::SeqCst)
}

fn backend_pid(client: &mut Client) -> Result<i32, postgres::Error> {
    client.query_one("SELECT pg_backend_pid()", &[])?.try_get(0)
}

fn read_tip(client: &mut Client) -> Result<i64, postgres::Error> {
    client
        .query_one("SELECT n FROM counters WHERE name = 'messages_tip'", &[])?
        .try_get(0)
}

/// The most messages a catch-up reads the recipients of; past it, every held poll is woken.
const MISSED_READ_MAX: i64 = 1024;

/// What a catch-up read of the message tip calls for, given the highest id announced so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CatchUp {
    /// Nothing was missed (or nothing is known yet: the first read only sets the mark).
    Nothing,
    /// Read the recipients of the messages after `after`, up to the tip, and wake theirs.
    Read {
        /// The highest id announced.
        after: i64,
    },
    /// Too many were missed to read back: wake every held poll.
    Everyone,
}

fn catch_up(last: Option<i64>, tip: i64) -> CatchUp {
    match last {
        None => CatchUp::Nothing,
        Some(l) if tip <= l => CatchUp::Nothing,
        Some(l) if tip - l > MISSED_READ_MAX => CatchUp::Everyone,
        Some(l) => CatchUp::Read { after: l },
    }
}

/// The recipients, each once, of the messages with ids in `(after, through]`.
fn recipients(
    client: &mut Client,
    after: i64,
    through: i64,
) -> Result<Vec<String>, postgres::Error> {
    client
        .query(
            "SELECT DISTINCT to_s FROM messages WHERE id > $1 AND id <= $2",
            &[&after, &through],
        )?
        .iter()
        .map(|r| r.try_get(0))
        .collect()
}

/// Listen for messages committed by other hubs and publish them; re-read the tip every
/// `catchup` and after every reconnect so nothing a lost notification announced is missed.
fn listener_loop(
    connector: Arc<Connector>,
    app: String,
    catchup: Duration,
    changes: broadcast::Sender<Change>,
    writer_pid: Arc<AtomicI32>,
    stop: Arc<AtomicBool>,
) {
    let mut last: Option<i64> = None;
    let mut backoff = Duration::from_millis(100);
    while !stop.load(Ordering::SeqCst) {
        let mut client = match connector.connect(&app) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e.report(), "store listener cannot connect; retrying");
                if !nap(&stop, backoff) {
                    return;
                }
                backoff = (backoff * 2).min(Duration::from_secs(2));
                continue;
            }
        };
        if let Err(e) = client.batch_execute(&format!("LISTEN {NOTIFY_CHANNEL}")) {
            tracing::warn!(error = %e, "store listener cannot LISTEN; retrying");
            continue;
        }
        backoff = Duration::from_millis(100);
        tracing::debug!("store listener connected");
        let mut next_catchup = Instant::now();
        loop {
            if stop.load(Ordering::SeqCst) {
                return;
            }
            let now = Instant::now();
            if now >= next_catchup {
                match read_tip(&mut client) {
                    Ok(tip) => {
                        // Notifications buffered while the query ran are older than the tip
                        // just read: account for them first.
                        let mut pending = Vec::new();
                        {
                            let mut queued = client.notifications();
                            let mut it = queued.iter();
                            while let Ok(Some(n)) = it.next() {
                                pending.push(n);
                            }
                        }
                        for n in pending {
                            on_notification(&n, &changes, &writer_pid, &mut last);
                        }
                        match catch_up(last, tip) {
                            CatchUp::Nothing => {}
                            CatchUp::Read { after } => {
                                tracing::debug!(tip, after, "catch-up read found new messages");
                                let change = match recipients(&mut client, after, tip) {
                                    Ok(to) => Change::Missed { through: tip, to },
                                    Err(e) => {
                                        tracing::debug!(error = %e, "cannot read the missed recipients; waking every held poll");
                                        Change::Tip(tip)
                                    }
                                };
                                let _ = changes.send(change);
                            }
                            CatchUp::Everyone => {
                                tracing::debug!(tip, "catch-up read found many new messages");
                                let _ = changes.send(Change::Tip(tip));
                            }
                        }
                        last = Some(last.map_or(tip, |l| l.max(tip)));
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "store listener lost its connection");
                        break;
                    }
                }
                next_catchup = now + catchup;
            }
            let wait = next_catchup
                .saturating_duration_since(Instant::now())
                .min(Duration::from_millis(100));
            let got = client.notifications().timeout_iter(wait).next();
            match got {
                Ok(Some(n)) => on_notification(&n, &changes, &writer_pid, &mut last),
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "store listener lost its connection");
                    break;
                }
            }
        }
    }
}

/// The messages a notification announces, `(id, recipient)` in order; `None` when it cannot be
/// read.
fn announced(payload: &str) -> Option<Vec<(i64, String)>> {
    if payload.starts_with('[') {
        return serde_json::from_str(payload).ok();
    }
    let (id, to) = payload.split_once(' ')?;
    Some(vec![(id.parse().ok()?, to.to_string())])
}

fn on_notification(
    n: &postgres::Notification,
    changes: &broadcast::Sender<Change>,
    writer_pid: &AtomicI32,
    last: &mut Option<i64>,
) {
    let Some(messages) = announced(n.payload()) else {
        tracing::warn!(payload = n.payload(), "unreadable store notification");
        return;
    };
    if let Some(top) = messages.iter().map(|(id, _)| *id).max() {
        *last = Some(last.map_or(top, |l| l.max(top)));
    }
    // Our own writer's messages were rung in-process already.
    if n.process_id() == writer_pid.load(Ordering::Relaxed) {
        return;
    }
    for (id, to) in messages {
        let _ = changes.send(Change::Message { id, to });
    }
}

/// Hold (or try to take) the periodic-work lease and keep its status current.
fn lease_loop(
    connector: Arc<Connector>,
    app: String,
    every: Duration,
    status: Arc<Mutex<LeaseStatus>>,
    stop: Arc<AtomicBool>,
) {
    let hi = (K_LEASE >> 32) as u32;
    let lo = (K_LEASE & 0xffff_ffff) as u32;
    let holder_sql = format!(
        "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
           WHERE l.locktype = 'advisory' AND l.granted AND l.classid = {hi} AND l.objid = {lo}
             AND l.objsubid = 1
             AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
           LIMIT 1"
    );
    let mut client: Option<Client> = None;
    let mut held = false;
    while !stop.load(Ordering::SeqCst) {
        let pass = (|| -> Result<Option<String>, StoreError> {
            if client.as_ref().is_none_or(|c| c.is_closed()) {
                held = false;
                client = Some(connector.connect(&app)?);
            }
            let Some(c) = client.as_mut() else {
                return Err(StoreError::db("no lease connection"));
            };
            let e = map_pg("lease", "check");
            if held {
                c.batch_execute("SELECT 1").map_err(&e)?;
            } else {
                held = c
                    .query_one("SELECT pg_try_advisory_lock($1)", &[&K_LEASE])
                    .and_then(|r| r.try_get(0))
                    .map_err(&e)?;
                if held {
                    tracing::info!(node = %app, "took the periodic-work lease");
                }
            }
            let holder = c
                .query_opt(&holder_sql, &[])
                .map_err(&e)?
                .and_then(|r| r.try_get::<_, Option<String>>(0).ok().flatten());
            Ok(holder)
        })();
        let next = match pass {
            Ok(holder) => LeaseStatus { held, holder },
            Err(e) => {
                if held {
                    tracing::warn!(error = %e.report(), "lost the periodic-work lease");
                }
                held = false;
                client = None;
                LeaseStatus::default()
            }
        };
        match status.lock() {
            Ok(mut g) => *g = next,
            Err(p) => *p.into_inner() = next,
        }
        if !nap(&stop, every) {
            break;
        }
    }
}

impl PgStore {
    /// Open the store at `url` with the default options.
    pub fn open(url: &str) -> Result<PgStore, StoreError> {
        Self::open_with(url, PgOptions::default())
    }

    /// Connect to `url`, apply the schema migrations (refusing a newer schema), and start the
    /// worker threads (plus, with `opts.background`, the listener and the lease threads).
    pub fn open_with(url: &str, opts: PgOptions) -> Result<PgStore, StoreError> {
        let masked = mask_url(url);
        let connector = Arc::new(Connector::parse(url, &masked, opts.connect_timeout)?);
        let app = |role: &str| app_name(&opts.node, role);
        // Held open until the store is up, as the migrations' connection.
        let (_first, first) = first_connection(&connector, &app("writer"), &masked, &opts)?;
        let writer_pid = Arc::new(AtomicI32::new(first.pid));
        let stop = Arc::new(AtomicBool::new(false));
        let (changes, _) = broadcast::channel(4096);
        let ledger = opts.background.then(ledger::Ledger::new);
        let (workers, mut threads) = spawn_workers(
            &connector,
            &app,
            first.sync,
            &writer_pid,
            &opts,
            &masked,
            ledger.clone(),
        )?;
        let mut lease = None;
        if let Some(ledger) = &ledger {
            let status = Arc::new(Mutex::new(LeaseStatus::default()));
            let background = Background {
                connector: &connector,
                changes: &changes,
                writer_pid: &writer_pid,
                stop: &stop,
                status: &status,
                ledger,
            };
            threads.extend(background.spawn(&app, &opts, &masked)?);
            lease = Some(status);
        }
        let synchronous = first.synchronous;
        tracing::debug!(url = %masked, synchronous, "postgres store open");
        Ok(PgStore {
            inner: Arc::new(Inner {
                shared: Shared {
                    workers,
                    describe: format!("postgres:{masked}"),
                    synchronous,
                    changes: Some(changes),
                    lease,
                    threads,
                },
                url: masked,
                stop,
                ledger,
                connector,
            }),
        })
    }
}

/// A connection's `application_name`: this process's label and the connection's role, cut to
/// PostgreSQL's 63 bytes.
fn app_name(node: &str, role: &str) -> String {
    let mut s = format!("{node} {role}");
    s.truncate(63);
    s
}

impl Connector {
    /// The connector of `url` (`masked` is its printable form), with `connect_timeout` on
    /// every connection.
    fn parse(url: &str, masked: &str, connect_timeout: Duration) -> Result<Connector, StoreError> {
        let invalid = |e: postgres::Error| StoreError::Open {
            path: masked.to_string(),
            context: "not a valid PostgreSQL URL".into(),
            source: Some(Arc::new(e)),
        };
        let mut config: postgres::Config = url.parse().map_err(invalid)?;
        config.connect_timeout(connect_timeout);
        let mut async_config: tokio_postgres::Config = url.parse().map_err(invalid)?;
        async_config.connect_timeout(connect_timeout);
        Ok(Connector {
            config,
            async_config,
            url: masked.to_string(),
        })
    }
}

/// What the first connection settled: the `synchronous_commit` value sent, the mode the
/// server applied (`full` or `normal`), and the connection's backend pid.
struct FirstConnection {
    sync: &'static str,
    synchronous: &'static str,
    pid: i32,
}

/// Open the first connection (labelled `app`), apply the schema migrations on it, set
/// `synchronous_commit` and read back what the server applied.
fn first_connection(
    connector: &Connector,
    app: &str,
    masked: &str,
    opts: &PgOptions,
) -> Result<(Client, FirstConnection), StoreError> {
    let mut first = connector.connect(app).map_err(|e| StoreError::Open {
        path: masked.to_string(),
        context: "cannot connect".into(),
        source: std::error::Error::source(&e).map(|_| Arc::new(e.clone()) as _),
    })?;
    schema::migrate(&mut first, masked)?;
    let sync = if opts.sync_full { "on" } else { "off" };
    first
        .batch_execute(&format!("SET synchronous_commit = {sync}"))
        .map_err(|e| unavailable_or_open(masked, "cannot set synchronous_commit", e))?;
    let applied: String = first
        .query_one("SHOW synchronous_commit", &[])
        .and_then(|r| r.try_get(0))
        .map_err(|e| unavailable_or_open(masked, "cannot read synchronous_commit", e))?;
    let synchronous = if applied == "off" { "normal" } else { "full" };
    let pid = backend_pid(&mut first)
        .map_err(|e| unavailable_or_open(masked, "cannot read the backend pid", e))?;
    Ok((
        first,
        FirstConnection {
            sync,
            synchronous,
            pid,
        },
    ))
}

/// Start a store thread called `name`; `masked` names the store in the error.
fn spawn_thread(
    name: String,
    masked: &str,
    body: impl FnOnce() + Send + 'static,
) -> Result<JoinHandle<()>, StoreError> {
    std::thread::Builder::new()
        .name(name)
        .spawn(body)
        .map_err(|e| StoreError::Open {
            path: masked.to_string(),
            context: "cannot start a store thread".into(),
            source: Some(Arc::new(e)),
        })
}

/// Start the writer thread (its connection sets `synchronous_commit = <sync>` and stores its
/// backend pid in `writer_pid`) and `opts.readers` reader threads (at least one).
fn spawn_workers(
    connector: &Arc<Connector>,
    app: &dyn Fn(&str) -> String,
    sync: &'static str,
    writer_pid: &Arc<AtomicI32>,
    opts: &PgOptions,
    masked: &str,
    ledger: Option<Arc<ledger::Ledger>>,
) -> Result<(Workers<Slot>, Vec<JoinHandle<()>>), StoreError> {
    let (workers, wrx, rrx) = Workers::new();
    let pid_slot = Arc::clone(writer_pid);
    let writer = Slot {
        // The writer thread opens its own connection (set up below) on its first job.
        conn: None,
        connector: Arc::clone(connector),
        app: app("writer"),
        setup: Some(Box::new(move |c: &mut Conn| {
            c.batch_execute(&format!("SET synchronous_commit = {sync}"))?;
            let st = c.prepare("SELECT pg_backend_pid()")?;
            let pid: i32 = match c.send(|c| c.query_opt(&st, &[]))? {
                Some(row) => row.try_get(0)?,
                None => 0,
            };
            pid_slot.store(pid, Ordering::Relaxed);
            Ok(())
        })),
    };
    let mut threads = vec![spawn_thread("pg-writer".into(), masked, move || {
        writer_loop(writer, wrx, 256, ledger)
    })?];
    for i in 0..opts.readers.max(1) {
        let slot = Slot {
            conn: None,
            connector: Arc::clone(connector),
            app: app("reader"),
            setup: None,
        };
        let rx = Arc::clone(&rrx);
        threads.push(spawn_thread(format!("pg-reader-{i}"), masked, move || {
            worker::reader_loop(slot, rx)
        })?);
    }
    Ok((workers, threads))
}

/// What the listener and lease threads share with the store.
struct Background<'a> {
    connector: &'a Arc<Connector>,
    changes: &'a broadcast::Sender<Change>,
    writer_pid: &'a Arc<AtomicI32>,
    stop: &'a Arc<AtomicBool>,
    status: &'a Arc<Mutex<LeaseStatus>>,
    ledger: &'a Arc<ledger::Ledger>,
}

impl Background<'_> {
    /// Start the listener thread (cross-hub wake), the lease thread (periodic-work lease) and
    /// the ledger pass thread.
    fn spawn(
        &self,
        app: &dyn Fn(&str) -> String,
        opts: &PgOptions,
        masked: &str,
    ) -> Result<[JoinHandle<()>; 3], StoreError> {
        let (c, a, tx, pid, s) = (
            Arc::clone(self.connector),
            app("listener"),
            self.changes.clone(),
            Arc::clone(self.writer_pid),
            Arc::clone(self.stop),
        );
        let catchup = opts.catchup;
        let listener = spawn_thread("pg-listener".into(), masked, move || {
            listener_loop(c, a, catchup, tx, pid, s)
        })?;
        let (c, a, st, s) = (
            Arc::clone(self.connector),
            app("lease"),
            Arc::clone(self.status),
            Arc::clone(self.stop),
        );
        let every = opts.lease_check;
        let lease = spawn_thread("pg-lease".into(), masked, move || {
            lease_loop(c, a, every, st, s)
        })?;
        let (c, a, l) = (
            Arc::clone(self.connector),
            app("ledger"),
            Arc::clone(self.ledger),
        );
        let (pace, idle) = (opts.ledger_pace, opts.catchup);
        let passes = spawn_thread("pg-ledger".into(), masked, move || {
            ledger::pass_loop(c, a, l, pace, idle)
        })?;
        Ok([listener, lease, passes])
    }
}

impl Backend for PgStore {
    type Conn = Slot;

    fn shared(&self) -> &Shared<Slot> {
        &self.inner.shared
    }

    /// A pass of the ledger thread begun after the call, or (without that thread, as in the
    /// import and export tools) one run here on a connection of its own.
    fn ledger_current(&self) -> impl Future<Output = Result<(), StoreError>> + Send {
        let inner = Arc::clone(&self.inner);
        async move {
            if let Some(l) = &inner.ledger {
                return l.current().await;
            }
            let connector = Arc::clone(&inner.connector);
            tokio::task::spawn_blocking(move || {
                let mut c = connector.connect("trantor ledger pass")?;
                ledger::pass(&mut c).map(|_| ())
            })
            .await
            .map_err(|e| StoreError::db(format!("ledger pass task failed: {e}")))?
        }
    }

    fn read_on<R>(
        slot: &mut Slot,
        f: impl FnOnce(&dyn ReadTx) -> Result<R, StoreError>,
    ) -> Result<R, StoreError> {
        slot.begin("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")?;
        let conn = slot.get()?;
        let out = worker::run_read_closure(&PgTx::new(conn), f);
        if let Some(conn) = slot.conn.as_mut()
            && let Err(e) = conn.batch_execute("COMMIT")
        {
            tracing::debug!(error = %e, "ending a read transaction failed");
        }
        slot.check();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A notification names its messages as a JSON array of pairs (a batch) or as `id recipient`
    /// (one message, and hubs before schema 8); anything else is unreadable.
    #[test]
    fn notifications_name_their_messages_either_way() {
        type Announced = Option<Vec<(i64, String)>>;
        let pair = |id: i64, to: &str| (id, to.to_string());
        let cases: [(&str, Announced); 7] = [
            (r#"[[7,"bob"]]"#, Some(vec![pair(7, "bob")])),
            (
                r#"[[7,"bob"],[8,"a b\nc"]]"#,
                Some(vec![pair(7, "bob"), pair(8, "a b\nc")]),
            ),
            ("7 bob", Some(vec![pair(7, "bob")])),
            (
                "7 a name with spaces",
                Some(vec![pair(7, "a name with spaces")]),
            ),
            ("seven bob", None),
            ("[[7]]", None),
            ("", None),
        ];
        for (payload, want) in cases {
            assert_eq!(announced(payload), want, "{payload:?}");
        }
    }

    /// The catch-up's decision from the highest id announced and the tip read.
    #[test]
    fn catch_up_reads_back_what_it_can_and_wakes_everyone_past_that() {
        let cases: [(Option<i64>, i64, CatchUp); 7] = [
            // The first read sets the mark: nothing is known to be missed yet.
            (None, 0, CatchUp::Nothing),
            (None, 5_000, CatchUp::Nothing),
            // Every message up to the tip was announced, or more (a notification ahead of the
            // tip's read).
            (Some(10), 10, CatchUp::Nothing),
            (Some(12), 10, CatchUp::Nothing),
            // A few missed: their recipients are read back.
            (Some(10), 11, CatchUp::Read { after: 10 }),
            (Some(10), 10 + MISSED_READ_MAX, CatchUp::Read { after: 10 }),
            // Too many to read back.
            (Some(10), 11 + MISSED_READ_MAX, CatchUp::Everyone),
        ];
        for (last, tip, want) in cases {
            assert_eq!(catch_up(last, tip), want, "last {last:?}, tip {tip}");
        }
    }
}

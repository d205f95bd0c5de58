//! The `Store` trait the hub persists through, and what its backends share.
//!
//! The hub keeps no authoritative state in memory: every route runs a closure against a
//! transaction of the store. Reads see a consistent snapshot; writes are committed (durable
//! against a process kill) before [`Store::write`] returns, so the HTTP reply that follows never
//! acknowledges something a `kill -9` could lose.
//!
//! The closures are synchronous on purpose: a backend runs them on its own writer thread
//! (grouping concurrent writes into one commit) and reader threads, and the domain logic in the
//! hub stays a plain function of a transaction.
//!
//! # Layout
//!
//! As atuin keeps its server database trait apart from each database, this crate holds what
//! every backend shares and one crate per backend stands beside it, holding only what differs:
//!
//! - here: the traits ([`Store`], [`ReadTx`], [`WriteTx`]) and their types; every query and
//!   write that is the same in every backend, as the transaction traits' default methods over
//!   the backend's statements ([`sql`]: its SQL text for each statement and its driver, the
//!   dynamic filters built once); [`rows`], the decoding of the rows read; [`worker`], the job
//!   queues and loops of the writer and reader threads, and the [`Store`] of a backend that
//!   runs its transactions on them; [`tally`], how the ledger's split is counted from the kept
//!   tally; [`migrate`], the schema migration runner; and (feature `conformance`) the
//!   conformance suite every backend runs, [`conformance_suite!`].
//! - `trantor-store-sqlite`: the embedded file (WAL), the default.
//! - `trantor-store-postgres`: PostgreSQL, for several hubs on one database.
//!
//! A backend crate holds its SQL (a table from [`sql::Stmt`] to its dialect), its driver (how
//! a statement runs, its parameters bind and its columns read), the writes whose steps differ
//! (inserting a message, an event or a delivery state, and retention), its worker threads'
//! transactions, and its schema.

#[cfg(feature = "conformance")]
pub mod conformance;
pub mod migrate;
pub mod rows;
pub mod sql;
pub mod tally;
mod tx;
pub mod worker;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::future::Future;
use trantor_proto::{CardStatus, Event, Message};

pub use tx::{ReadTx, WriteTx};
pub use worker::panic_message;

/// The underlying error of a [`StoreError`], shared so a batch that failed as a whole can give
/// the same error to each of its jobs.
pub type ErrorSource = std::sync::Arc<dyn std::error::Error + Send + Sync + 'static>;

/// What a store operation can fail with. The underlying error (SQLite's, serde's, the OS's)
/// stays reachable through [`std::error::Error::source`]; [`StoreError::report`] prints the chain.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// The database reported an error.
    #[error("database error: {context}")]
    Db {
        /// What was being done.
        context: String,
        /// The underlying error, if any.
        #[source]
        source: Option<ErrorSource>,
    },
    /// A stored row could not be decoded.
    #[error("corrupt row in {table}: {context}")]
    Corrupt {
        /// The table.
        table: &'static str,
        /// Which row, or what failed.
        context: String,
        /// The underlying error, if any.
        #[source]
        source: Option<ErrorSource>,
    },
    /// The store could not be opened.
    #[error("cannot open store at {path}: {context}")]
    Open {
        /// Path or URL of the store.
        path: String,
        /// What failed.
        context: String,
        /// The underlying error, if any.
        #[source]
        source: Option<ErrorSource>,
    },
    /// The store's worker threads are gone (the hub is shutting down).
    #[error("store is closed")]
    Closed,
    /// The database server cannot be reached right now (connection refused or lost); the
    /// store reconnects by itself, so the request may be retried.
    #[error("database unavailable: {context}")]
    Unavailable {
        /// What was being done.
        context: String,
        /// The underlying error, if any.
        #[source]
        source: Option<ErrorSource>,
    },
}

impl StoreError {
    /// A database error with no underlying error.
    pub fn db(context: impl Into<String>) -> StoreError {
        StoreError::Db {
            context: context.into(),
            source: None,
        }
    }

    /// A database error caused by `source`.
    pub fn db_from(
        context: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> StoreError {
        StoreError::Db {
            context: context.into(),
            source: Some(std::sync::Arc::new(source)),
        }
    }

    /// The message followed by every underlying error, `a: b: c`, for logs and replies.
    pub fn report(&self) -> String {
        let mut out = self.to_string();
        let mut cur = std::error::Error::source(self);
        while let Some(e) = cur {
            out.push_str(": ");
            out.push_str(&e.to_string());
            cur = e.source();
        }
        out
    }
}

/// A message about to be stored: everything but the id, which the store assigns.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NewMessage {
    /// Hub time at receipt, ms.
    pub ts: i64,
    /// Sender session.
    pub from: String,
    /// Recipient or `all`.
    pub to: String,
    /// Project.
    pub project: String,
    /// Text.
    pub text: String,
    /// Answered message id.
    pub re: Option<i64>,
    /// Kind.
    pub kind: Option<String>,
    /// `Some(false)` for context-only messages.
    pub wake: Option<bool>,
}

impl NewMessage {
    /// The stored message, once the store has assigned `id`.
    pub fn stored_as(self, id: i64) -> Message {
        Message {
            id,
            ts: self.ts,
            from: self.from,
            to: self.to,
            project: self.project,
            text: self.text,
            re: self.re,
            kind: self.kind,
            wake: self.wake,
        }
    }
}

/// An event about to be stored: everything but the id.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NewEvent {
    /// When, ms.
    pub ts: i64,
    /// Event type.
    pub kind: String,
    /// Project.
    pub project: String,
    /// Actor.
    pub by: String,
    /// The card this event is about (card events), indexed for `/card` and `/events?taskId=`.
    pub task_id: Option<i64>,
    /// Card ids cited (message events), indexed for `/events?taskId=`.
    pub refs: Vec<i64>,
    /// Type-specific fields, flattened into the event on the wire.
    pub data: serde_json::Map<String, Value>,
}

impl NewEvent {
    /// The stored event, once the store has assigned `id`.
    pub fn stored_as(self, id: i64) -> Event {
        Event {
            id,
            ts: self.ts,
            kind: self.kind,
            project: self.project,
            by: self.by,
            data: self.data,
        }
    }
}

/// Which cards to list.
#[derive(Debug, Clone, Default)]
pub struct CardFilter {
    /// Only this project.
    pub project: Option<String>,
    /// Only these ids.
    pub ids: Option<Vec<i64>>,
    /// Only these statuses.
    pub statuses: Option<Vec<CardStatus>>,
    /// Only this assignee.
    pub assignee: Option<String>,
}

/// Which events to list (all filters combine with AND).
#[derive(Debug, Clone, Default)]
pub struct EventFilter {
    /// Only this project.
    pub project: Option<String>,
    /// Event types; an entry ending in `.` matches as a prefix.
    pub types: Option<Vec<String>>,
    /// Only this actor.
    pub by: Option<String>,
    /// Card events of this card plus message events citing it.
    pub task_id: Option<i64>,
    /// With `task_id`: only the card's own events, not the message events citing it (an
    /// indexed read whose cost does not grow with the messages that cite the card).
    pub card_events_only: bool,
    /// Only events about a card (those carrying a card id): read on the cards' own index, so
    /// the cost does not grow with the project's message events.
    pub of_cards: bool,
    /// Only ids greater than this.
    pub since: Option<i64>,
    /// Keep the newest `limit` of the matches (returned oldest first).
    pub limit: usize,
}

/// The recorded outcome of a write carrying `_op`, for replay and `GET /_op`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OpRecord {
    /// The op's key (the hub keys ops by route and type: `POST /send s:<op>`).
    pub id: String,
    /// When it was recorded, ms.
    pub ts: i64,
    /// HTTP status of the first run; 0 marks a committed write whose reply is not recorded yet.
    pub code: u16,
    /// Reply body of the first run.
    pub body: Value,
}

/// Row counts for `/health` and `/metrics`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Counts {
    /// Stored messages.
    pub messages: i64,
    /// Known peers.
    pub peers: i64,
    /// Cards.
    pub cards: i64,
    /// Events.
    pub events: i64,
    /// Lessons.
    pub lessons: i64,
}

/// What a retention pass removed, so pruning is reported rather than silent.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PruneReport {
    /// Read (or broadcast) messages older than the cut-off that were removed.
    pub messages: i64,
    /// Non-card events older than the cut-off that were removed.
    pub events: i64,
    /// Expired `_op` records removed.
    pub ops: i64,
}

/// How long after a contract a plain reply (no `re`) from its assignee can still answer it
/// (docs/protocol.md §5.6). The ledger is kept as messages commit, so this horizon is the
/// store's, not a request's `windowMs`.
pub const CONTRACT_MATCH_MS: i64 = 86_400_000;

/// Whether `m` is direct traffic between two real sessions: a contract of its sender and a
/// possible reply to its recipient's contracts (docs/protocol.md §5.6).
pub fn is_ledger_traffic(m: &Message) -> bool {
    !m.from.is_empty()
        && !m.to.is_empty()
        && m.to != trantor_proto::BROADCAST
        && m.to != m.from
        && !m.from.starts_with("hub:")
        && !m.to.starts_with("hub:")
}

/// Whether nothing is owed on contract `m` (sent as context, a receipt or a status).
pub fn is_ack_contract(m: &Message) -> bool {
    m.wake == Some(false) || matches!(m.kind.as_deref(), Some("receipt" | "status"))
}

/// Whether `m` is an ask (it never answers a contract).
pub fn is_ask(m: &Message) -> bool {
    m.kind.as_deref() == Some("ask")
}

/// What a read of the contract ledger (the `contracts` table kept as messages commit) asks for.
#[derive(Debug, Clone, Default)]
pub struct LedgerQuery {
    /// The dispatcher.
    pub sender: String,
    /// Only contracts whose message project is exactly this.
    pub project: Option<String>,
    /// Only contracts sent at or after this, ms (the window).
    pub since_ts: i64,
    /// An open contract sent at or before this is overdue (`None`: no overdue split).
    pub overdue_cut: Option<i64>,
    /// An open contract sent before this that later traffic with its assignee overtook (a newer
    /// answered contract to it, or a later message from it) is superseded.
    pub supersede_cut: i64,
}

impl LedgerQuery {
    /// The tally bucket the window starts in: the buckets after it are summed from the kept
    /// tally, this one is counted row by row from its `ts` on.
    pub fn edge_bucket(&self) -> i64 {
        self.since_ts.div_euclid(TALLY_BUCKET_MS)
    }

    /// The first `ts` after the edge bucket.
    pub fn edge_end(&self) -> i64 {
        self.edge_bucket()
            .saturating_add(1)
            .saturating_mul(TALLY_BUCKET_MS)
    }
}

/// The width of a contract tally bucket, ms: the ledger's counts are kept per
/// (sender, hour of `ts`, assignee, project) as contracts commit, are answered and are pruned
/// (the `contract_tally` table, schema version 6 of SQLite, 6 of PostgreSQL), so a window's
/// counts sum at most a day's buckets and count one bucket's rows, whatever the traffic. The
/// migrations write `ts / 3600000`: change both with this.
pub const TALLY_BUCKET_MS: i64 = 3_600_000;

/// S's open (unanswered, owed) contracts to one assignee, counted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OpenGroup {
    /// The assignee.
    pub assignee: String,
    /// Open contracts to it in the window.
    pub open: i64,
    /// Of those, the ones superseded (see [`LedgerQuery::supersede_cut`]); filled by
    /// [`ReadTx::ledger_split`], 0 until then.
    pub superseded: i64,
    /// Of the rest, the overdue ones (see [`LedgerQuery::overdue_cut`]); as `superseded`.
    pub overdue: i64,
}

/// Closed contracts of S in the window, counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LedgerCounts {
    /// Answered (by `re` or by a plain reply).
    pub answered: i64,
    /// Nothing owed (sent as context, a receipt or a status) and not answered.
    pub ack: i64,
}

/// A contract the reaper recorded as abandoned (for `hub export`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReapedContract {
    /// The dispatcher.
    pub sender: String,
    /// The contract's message id.
    pub id: i64,
    /// The assignee.
    pub assignee: String,
    /// When the contract was sent, ms.
    pub ts: i64,
    /// When the reaper recorded it, ms.
    pub reaped_ts: i64,
    /// Why.
    pub reason: String,
}

/// One contract of the ledger with what the store knows about it.
#[derive(Debug, Clone, PartialEq)]
pub struct ContractRow {
    /// The contract's message (its text empty if the message was pruned).
    pub contract: Message,
    /// Nothing owed on it.
    pub ack: bool,
    /// The answer: id, ts, text.
    pub answer: Option<(i64, i64, String)>,
    /// Later traffic with the assignee overtook it (see [`LedgerQuery::supersede_cut`]).
    pub overtaken: bool,
    /// The reaper's record: when, why.
    pub reaped: Option<(i64, String)>,
}

/// A change another process committed to a shared store, seen through [`Store::watch`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// Message `id`, addressed to `to`, was committed by another hub.
    Message {
        /// The message id.
        id: i64,
        /// Its recipient (or `all`).
        to: String,
    },
    /// A catch-up read found messages above the last one announced here (a notification lost
    /// across a reconnect, or one still on its way when the tip was read), up to `through`, and
    /// read their recipients back: those recipients' held readers should look.
    Missed {
        /// The tip the catch-up read.
        through: i64,
        /// The recipients, each once (`all` for a broadcast).
        to: Vec<String>,
    },
    /// The message tip reached this id through more messages than a catch-up reads back, so
    /// their recipients are unknown here: every held reader should look.
    Tip(i64),
}

/// Who runs the periodic work (reaper, duty, retention) over a store shared by several hubs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseStatus {
    /// Whether this process holds the lease now.
    pub held: bool,
    /// The holder's label as the database reports it (`None` when nobody holds it or it is
    /// unknown).
    pub holder: Option<String>,
}

/// Which recorded turns a cost read adds up (all filters combine with AND).
#[derive(Debug, Clone, Default)]
pub struct CostQuery {
    /// Only turns that worked on this card.
    pub card: Option<i64>,
    /// Only turns that worked on one of these cards.
    pub cards: Option<Vec<i64>>,
    /// Only this seat's turns.
    pub session: Option<String>,
    /// Only this project's turns.
    pub project: Option<String>,
    /// Only turns recorded at or after this, ms.
    pub since_ts: Option<i64>,
}

/// How a cost read groups the turns it adds up.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum CostBy {
    /// One group of everything (key `""`).
    #[default]
    Total,
    /// Per card (key: the id; turns on no card are card `0`).
    Card,
    /// Per seat session.
    Seat,
    /// Per UTC day (key `YYYY-MM-DD`).
    Day,
    /// Per credential (key: its name, `""` when none was named).
    Credential,
}

/// A persistent store for the hub.
///
/// Implementations are cheap to clone (a handle) and safe to share between request handlers.
pub trait Store: Clone + Send + Sync + 'static {
    /// Run `f` against a consistent read snapshot.
    fn read<R, F>(&self, f: F) -> impl Future<Output = Result<R, StoreError>> + Send
    where
        F: FnOnce(&dyn ReadTx) -> Result<R, StoreError> + Send + 'static,
        R: Send + 'static;

    /// Run `f` in a write transaction. When the future resolves `Ok`, the changes are committed
    /// and durable against a kill of the process (and against power loss at the default
    /// `full` sync level; see [`Store::synchronous`]). A closure returning `Err` has its changes
    /// rolled back (other writers grouped into the same commit are unaffected).
    fn write<R, F>(&self, f: F) -> impl Future<Output = Result<R, StoreError>> + Send
    where
        F: FnOnce(&mut dyn WriteTx) -> Result<R, StoreError> + Send + 'static,
        R: Send + 'static;

    /// A short description for `/health` and logs (e.g. `sqlite:/home/u/.agent-bus/hub.db`).
    fn describe(&self) -> String;

    /// The durability level in force, as read back from the store (`full` or `normal`), so
    /// `/health` reports what the store applied rather than what was asked.
    fn synchronous(&self) -> &'static str;

    /// Changes committed by other processes sharing this store, for waking held readers.
    /// `None` (the default) when no other process can write to it, as for the embedded file.
    fn watch(&self) -> Option<tokio::sync::broadcast::Receiver<Change>> {
        None
    }

    /// The periodic-work lease over a shared store. `None` (the default) when this process is
    /// the only writer and so always runs the periodic work itself.
    fn lease(&self) -> Option<LeaseStatus> {
        None
    }

    /// Resolves once the contract ledger holds every message committed before the call, on
    /// any process sharing the store: call it before a read of the ledger ([`ReadTx`]'s
    /// `ledger_*` methods). Ready at once (the default) where the ledger is kept inside each
    /// commit, as in the embedded file; PostgreSQL keeps it after the commit
    /// (docs/protocol.md §5.6, "Cost").
    fn ledger_current(&self) -> impl Future<Output = Result<(), StoreError>> + Send {
        std::future::ready(Ok(()))
    }
}

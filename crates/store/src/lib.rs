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
//! - here: the traits ([`Store`], [`ReadTx`], [`WriteTx`]) and their types; [`worker`], the
//!   job queues and loops of the writer and reader threads; [`migrate`], the schema migration
//!   runner; [`rows`], the decoding of stored rows; and (feature `conformance`) the conformance
//!   suite every backend runs, [`conformance_suite!`].
//! - `trantor-store-sqlite`: the embedded file (WAL), the default.
//! - `trantor-store-postgres`: PostgreSQL, for several hubs on one database.

#[cfg(feature = "conformance")]
pub mod conformance;
pub mod migrate;
pub mod rows;
pub mod worker;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::future::Future;
use trantor_proto::{
    Card, CardStatus, CostSummary, DeliveryEntry, DeliveryOpenItem, Event, Lesson, Message, Peer,
    TurnReport,
};

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

/// S's open (unanswered, owed) contracts to one assignee, counted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OpenGroup {
    /// The assignee.
    pub assignee: String,
    /// Open contracts to it in the window.
    pub open: i64,
    /// Of those, the ones superseded (see [`LedgerQuery::supersede_cut`]).
    pub superseded: i64,
    /// Of the rest, the overdue ones (see [`LedgerQuery::overdue_cut`]).
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
    /// The message tip reached this id through messages whose recipients are unknown here (a
    /// catch-up read after a lost notification or a reconnect): every held reader should look.
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

/// Add one row of a grouped cost read to `s` (the backends read the sums as i64 and a few
/// flags; this is where they become a [`CostSummary`]).
#[allow(clippy::too_many_arguments)]
pub fn cost_summary_of(
    input: i64,
    output: i64,
    cache_read: i64,
    cache_write: i64,
    usd: f64,
    turns: i64,
    unknown: i64,
    estimated: bool,
) -> CostSummary {
    let u = |v: i64| u64::try_from(v).unwrap_or(0);
    CostSummary {
        tokens_in: u(input)
            .saturating_add(u(cache_read))
            .saturating_add(u(cache_write)),
        tokens_out: u(output),
        cache_read: u(cache_read),
        cache_write: u(cache_write),
        usd,
        turns: u(turns),
        unknown: u(unknown),
        estimated,
    }
}

/// The UTC day (`YYYY-MM-DD`) of day number `day` (days since the epoch), for [`CostBy::Day`].
pub fn day_key(day: i64) -> String {
    let (y, m, d) = trantor_proto::date::civil_from_days(day);
    format!("{y:04}-{m:02}-{d:02}")
}

/// Queries available inside any transaction.
pub trait ReadTx {
    /// The highest message id ever assigned (0 when none), even if that message was pruned.
    fn tip(&self) -> Result<i64, StoreError>;
    /// Messages deliverable to `session` (to it or to `all`, not from it) with `id > since`,
    /// oldest first, at most `limit`.
    fn messages_for(
        &self,
        session: &str,
        since: i64,
        limit: usize,
    ) -> Result<Vec<Message>, StoreError>;
    /// One message.
    fn message(&self, id: i64) -> Result<Option<Message>, StoreError>;
    /// The newest `limit` messages of every kind, oldest first.
    fn recent_messages(&self, limit: usize) -> Result<Vec<Message>, StoreError>;
    /// Direct messages (not to `all`) sent by or to `session` with `ts >= since_ts`, oldest first.
    fn direct_messages_involving(
        &self,
        session: &str,
        since_ts: i64,
    ) -> Result<Vec<Message>, StoreError>;
    /// Direct messages with `from_ts <= ts <= until_ts` that their recipient has not read yet
    /// (its `deliveredUpTo` is below the id, or it has no peer row), oldest first, at most
    /// `limit`. Broadcasts, messages to or from `hub:*`, `wake:false`, `status` and `receipt`
    /// messages are left out (for the duty service).
    fn undelivered_direct(
        &self,
        from_ts: i64,
        until_ts: i64,
        limit: usize,
    ) -> Result<Vec<Message>, StoreError>;
    /// Sessions that sent a direct message with `ts >= since_ts` (for the contract reaper).
    fn dispatchers_since(&self, since_ts: i64) -> Result<Vec<String>, StoreError>;
    /// Senders with open contracts sent at or after `since_ts` (for the contract reaper; costs
    /// the open contracts, not the traffic).
    fn ledger_senders(&self, since_ts: i64) -> Result<Vec<String>, StoreError>;
    /// Every contract the reaper recorded (a full scan: for `hub export`, not a route).
    fn ledger_reaped(&self) -> Result<Vec<ReapedContract>, StoreError>;
    /// The sender's open contracts in the window, counted per assignee (ordered by assignee).
    fn ledger_groups(&self, q: &LedgerQuery) -> Result<Vec<OpenGroup>, StoreError>;
    /// The sender's answered and ack contracts in the window, counted.
    fn ledger_counts(&self, q: &LedgerQuery) -> Result<LedgerCounts, StoreError>;
    /// Up to `limit` of the sender's contracts in the window with ids above `after`, oldest
    /// first; `open_only` keeps the unanswered owed ones.
    fn ledger_rows(
        &self,
        q: &LedgerQuery,
        after: i64,
        limit: usize,
        open_only: bool,
    ) -> Result<Vec<ContractRow>, StoreError>;
    /// The newest `limit` messages citing card `#card`, oldest first.
    fn messages_citing(&self, card: i64, limit: usize) -> Result<Vec<Message>, StoreError>;
    /// One peer row.
    fn peer(&self, session: &str) -> Result<Option<Peer>, StoreError>;
    /// Every peer row.
    fn peers(&self) -> Result<Vec<Peer>, StoreError>;
    /// One card.
    fn card(&self, id: i64) -> Result<Option<Card>, StoreError>;
    /// Cards matching the filter, by id ascending.
    fn cards(&self, filter: &CardFilter) -> Result<Vec<Card>, StoreError>;
    /// Events matching the filter, oldest first.
    fn events(&self, filter: &EventFilter) -> Result<Vec<Event>, StoreError>;
    /// The newest event id (0 when none).
    fn latest_event_id(&self) -> Result<i64, StoreError>;
    /// Lessons whose scope is one of `scopes`, oldest first.
    fn lessons(&self, scopes: &[String]) -> Result<Vec<Lesson>, StoreError>;
    /// A small named JSON document (policy, project briefs, phase goals, …).
    fn kv(&self, key: &str) -> Result<Option<Value>, StoreError>;
    /// Every small document whose key starts with `prefix`, ordered by key (a project's phase
    /// goals).
    fn kv_prefix(&self, prefix: &str) -> Result<Vec<(String, Value)>, StoreError>;
    /// The recorded outcome of an `_op`.
    fn op(&self, id: &str) -> Result<Option<OpRecord>, StoreError>;
    /// Row counts.
    fn counts(&self) -> Result<Counts, StoreError>;
    /// Every lesson, oldest first (for `trantor hub export`).
    fn all_lessons(&self) -> Result<Vec<Lesson>, StoreError>;
    /// The delivery record of message `id`, in append order (empty when none was written: a
    /// broadcast, or a message older than the record).
    fn delivery_states(&self, id: i64) -> Result<Vec<DeliveryEntry>, StoreError>;
    /// The direct messages to `session` whose latest delivery state is not terminal (`consumed`,
    /// `failed`), oldest first, at most `limit` (0: no limit), with how many there are in all.
    fn delivery_open(
        &self,
        session: &str,
        limit: usize,
    ) -> Result<(Vec<DeliveryOpenItem>, i64), StoreError>;
    /// The runner instance `session` is fenced to, if any.
    fn delivery_fence(&self, session: &str) -> Result<Option<String>, StoreError>;
    /// Every recorded turn with its hub time, oldest first (a full scan: for `hub export`, not
    /// a route).
    fn all_turns(&self) -> Result<Vec<(i64, TurnReport)>, StoreError>;
    /// The recorded turns matching `q`, added up per `by` group, at most `limit` groups (0: no
    /// limit), largest dollars first (then key). [`CostBy::Total`] is one group (all zeros when
    /// nothing matches).
    fn cost(
        &self,
        q: &CostQuery,
        by: CostBy,
        limit: usize,
    ) -> Result<Vec<(String, CostSummary)>, StoreError>;
}

/// Changes available inside a write transaction.
pub trait WriteTx: ReadTx {
    /// Store a message, assigning the next id; `refs` are the card ids it cites.
    fn insert_message(&mut self, msg: NewMessage, refs: &[i64]) -> Result<Message, StoreError>;
    /// Insert or replace a peer row (the `deliveredUpTo` stored never decreases).
    fn put_peer(&mut self, peer: &Peer) -> Result<(), StoreError>;
    /// Raise a session's delivery ledger to `up_to` (never lowers it); returns the new value.
    fn raise_delivered(&mut self, session: &str, up_to: i64) -> Result<i64, StoreError>;
    /// Delete peers last seen before `last_seen`; returns their sessions.
    fn delete_peers_before(&mut self, last_seen: i64) -> Result<Vec<String>, StoreError>;
    /// Delete peers that never registered (`registered` unset) last seen before `last_seen`;
    /// returns their sessions.
    fn delete_anonymous_peers_before(&mut self, last_seen: i64) -> Result<Vec<String>, StoreError>;
    /// Store a new card, assigning the next id (the given id is ignored).
    fn insert_card(&mut self, card: Card) -> Result<Card, StoreError>;
    /// Replace an existing card.
    fn put_card(&mut self, card: &Card) -> Result<(), StoreError>;
    /// Delete a card.
    fn delete_card(&mut self, id: i64) -> Result<(), StoreError>;
    /// Append an event, assigning the next id.
    fn insert_event(&mut self, event: NewEvent) -> Result<Event, StoreError>;
    /// Append a lesson, assigning the next id (ids are never reused).
    fn insert_lesson(&mut self, lesson: Lesson) -> Result<Lesson, StoreError>;
    /// Set a named JSON document.
    fn set_kv(&mut self, key: &str, value: &Value) -> Result<(), StoreError>;
    /// Record an `_op` outcome. The first final record (code ≠ 0) wins; a code-0 record is a
    /// marker ("committed, reply pending") that a later record replaces.
    fn put_op(&mut self, op: &OpRecord) -> Result<(), StoreError>;
    /// Store a message under the id it already has (`trantor hub import`), with the card ids
    /// it cites; `false` (and nothing changed) when a message with that id exists. Later
    /// [`WriteTx::insert_message`] ids continue above the highest id, and the tip and counts
    /// stay exact.
    fn put_message(&mut self, msg: &Message, refs: &[i64]) -> Result<bool, StoreError>;
    /// Record the reaper's verdict on contract `id` of `sender` (first record wins); returns
    /// whether it was recorded now.
    fn mark_reaped(
        &mut self,
        sender: &str,
        id: i64,
        ts: i64,
        reason: &str,
    ) -> Result<bool, StoreError>;
    /// Append one state to message `id`'s delivery record (`entry.session` is its recipient).
    /// The record is only ever appended to; a terminal state closes the message for
    /// [`ReadTx::delivery_open`].
    fn append_delivery(&mut self, id: i64, entry: &DeliveryEntry) -> Result<(), StoreError>;
    /// Fence `session` to runner `instance` at `ts`; returns the instance it replaced (`None`
    /// when there was none).
    fn set_delivery_fence(
        &mut self,
        session: &str,
        instance: &str,
        ts: i64,
    ) -> Result<Option<String>, StoreError>;
    /// Record one finished turn's cost at hub time `ts`; `false` (and nothing changed) when a
    /// turn with the same `(session, instance, turn)` is already recorded.
    fn record_turn(&mut self, ts: i64, turn: &TurnReport) -> Result<bool, StoreError>;
    /// Retention: remove messages older than `before_ts` that every recipient has read
    /// (broadcasts, or direct messages at or below the recipient's `deliveredUpTo`) with their
    /// delivery records, non-card events older than `before_ts`, and `_op` records older than
    /// `ops_before_ts`.
    fn prune(&mut self, before_ts: i64, ops_before_ts: i64) -> Result<PruneReport, StoreError>;
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
}

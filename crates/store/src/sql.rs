//! The statement layer both backends share: what a backend gives ([`Statements`]: its SQL text
//! for each [`Dialect`] statement, and running one statement with its driver), and what is
//! written here over it, once for every backend: the SQL every dialect writes alike
//! ([`Common`]), the arguments of each statement ([`Arg`]), the dynamic filters ([`Query`]:
//! cards, events, lessons, cost), and reading the rows back (through [`Columns`], decoded in
//! [`crate::rows`]). [`crate::ReadTx`] and [`crate::WriteTx`] are default methods over these
//! primitives, so a backend writes only its own SQL and the writes that differ.

use std::borrow::Cow;

use crate::{CardFilter, CostBy, CostQuery, EventFilter, StoreError};

/// The table and operation of a statement, for its error.
pub type Origin = (&'static str, &'static str);

/// Each row of a query, handed to the caller as it is read.
pub type Visit<'v> = &'v mut dyn FnMut(&dyn Columns) -> Result<(), StoreError>;

/// The columns of a message row, as a literal for `concat!`.
macro_rules! msg_cols {
    () => {
        "id, ts, from_s, to_s, project, text, re, kind, wake"
    };
}

/// The columns of a message row ([`crate::rows::message`]).
pub const MSG_COLS: &str = msg_cols!();

/// A statement each backend writes in its own dialect ([`Statements::sql`]). The comment of
/// each names its parameters, in order, and what its rows hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// (): the highest message id ever assigned, one row (none or NULL: 0).
    Tip,
    /// (): the highest event id ever assigned, as [`Dialect::Tip`].
    LatestEventId,
    /// (session, since, limit): message rows deliverable to the session, by id.
    MessagesFor,
    /// (session, since_ts): direct message rows sent by or to the session, by id.
    DirectMessagesInvolving,
    /// (from_ts, until_ts, limit): unread direct message rows (see the trait), by id.
    UndeliveredDirect,
    /// (since_ts): senders of direct messages, one text column, ordered.
    DispatchersSince,
    /// (since_ts): senders with open contracts, one text column, ordered.
    LedgerSenders,
    /// (sender, edge bucket, project): the sender's tally rows from the edge bucket on:
    /// assignee, bucket, open, ack, answered, min id, max id (one per project; any order).
    LedgerTally,
    /// (sender, since_ts, project, edge bucket, edge end): the edge bucket's contracts from
    /// `since_ts` counted per assignee: assignee, open, answered, ack (any order).
    LedgerEdge,
    /// (sender, assignee, from ts, until ts, below id, project): how many of the sender's open
    /// contracts to the assignee were sent in `[from ts, until ts)` with an id below `below id`,
    /// one range of the open index.
    LedgerCountOpen,
    /// (sender, since_ts, project, after, limit): contract rows ([`crate::rows::contract`]).
    LedgerRows {
        /// Only the unanswered owed ones.
        open_only: bool,
    },
    /// (sender, since_ts, assignee, after ts, after id, limit): the sender's open contracts in
    /// the window to the assignee that the reaper has not recorded, after (ts, id), in (ts, id)
    /// order (the open index's order: a page costs the page) ([`crate::rows::contract`]).
    LedgerUnreaped,
    /// (sender, since_ts, assignee, after ts, after id, limit): the (ts, id) of the sender's open
    /// contracts in the window to the assignee after (ts, id), the first `limit` in (ts, id)
    /// order, from the open index alone.
    LedgerOpenIds,
    /// (sender, id): one contract row ([`crate::rows::contract`]).
    LedgerRow,
    /// `SELECT` of the event columns ([`crate::rows::event`]) `FROM events WHERE 1 = 1`, to
    /// which the filter is appended.
    EventsSelect,
    /// (): messages, events, peers, cards, lessons.
    Counts,
    /// `SELECT` of the group key and sums ([`crate::rows::cost`]) for the grouping
    /// `FROM turns WHERE 1 = 1`, to which the filter is appended.
    CostSelect(CostBy),
    /// (session, last seen, delivered up to, data): insert or replace the peer, never lowering
    /// its delivered up to.
    PutPeer,
    /// (session, up to): raise the session's ledger (a bare row when unknown); one row, the
    /// new value.
    RaiseDelivered,
    /// (last seen): delete the peers never registered last seen before; the sessions.
    DeleteAnonymousPeersBefore,
    /// (): the next card id, one row (a backend may hold it with a placeholder row that the
    /// [`Dialect::PutCard`] that follows replaces).
    ReserveCardId,
    /// (id, project, status, assignee, updated, data): insert or replace the card; later
    /// reserved ids stay above the id.
    PutCard,
    /// (the eighteen turn columns of [`crate::rows::turn`]): record the turn unless its
    /// (session, instance, turn) is there.
    RecordTurn,
}

impl Dialect {
    /// The table and operation, for the statement's errors.
    pub fn origin(self) -> Origin {
        match self {
            Dialect::Tip => ("messages", "tip"),
            Dialect::LatestEventId => ("events", "latest_event_id"),
            Dialect::MessagesFor => ("messages", "messages_for"),
            Dialect::DirectMessagesInvolving => ("messages", "direct_messages_involving"),
            Dialect::UndeliveredDirect => ("messages", "undelivered_direct"),
            Dialect::DispatchersSince => ("messages", "dispatchers_since"),
            Dialect::LedgerSenders => ("contracts", "ledger_senders"),
            Dialect::LedgerTally => ("contract_tally", "ledger_tally"),
            Dialect::LedgerEdge => ("contracts", "ledger_edge"),
            Dialect::LedgerCountOpen => ("contracts", "ledger_count_open"),
            Dialect::LedgerRows { .. } => ("contracts", "ledger_rows"),
            Dialect::LedgerUnreaped => ("contracts", "ledger_unreaped"),
            Dialect::LedgerOpenIds => ("contracts", "ledger_open_ids"),
            Dialect::LedgerRow => ("contracts", "ledger_row"),
            Dialect::EventsSelect => ("events", "events"),
            Dialect::Counts => ("counters", "counts"),
            Dialect::CostSelect(_) => ("turns", "cost"),
            Dialect::PutPeer => ("peers", "put_peer"),
            Dialect::RaiseDelivered => ("peers", "raise_delivered"),
            Dialect::DeleteAnonymousPeersBefore => ("peers", "delete_anonymous_peers_before"),
            Dialect::ReserveCardId => ("cards", "insert_card"),
            Dialect::PutCard => ("cards", "put_card"),
            Dialect::RecordTurn => ("turns", "record"),
        }
    }
}

/// A statement every dialect writes alike but for how parameters are named: its SQL is here
/// (parameters `?N`), rendered for the backend by [`ParamStyle::render`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Common {
    /// (id): the message row.
    Message,
    /// (limit): the newest message rows, newest first.
    RecentMessages,
    /// (card, limit): the message rows citing the card, by id.
    MessagesCiting,
    /// (): reaped contracts: sender, id, assignee, ts, reaped ts, reason.
    LedgerReaped,
    /// (sender, peer): the pair's newest reply from the peer and newest answered contract to it.
    LedgerPeerCut,
    /// (session): the peer row ([`crate::rows::peer`]).
    Peer,
    /// (): every peer row, by session.
    Peers,
    /// (id): the card row: id, data.
    Card,
    /// (key): the document's JSON.
    Kv,
    /// (from, to): key and JSON of the documents with `from <= key < to`, by key.
    KvPrefix,
    /// (id): the op row: id, ts, code, body.
    Op,
    /// (): every lesson row ([`crate::rows::lesson`]), by id.
    AllLessons,
    /// (msg id): the delivery entries ([`crate::rows::delivery_entry`]), in append order.
    DeliveryStates,
    /// (session, limit): open items ([`crate::rows::delivery_open_item`]), by message id.
    DeliveryOpen,
    /// (session): how many messages to the session are open.
    DeliveryOpenCount,
    /// (session): the instance the session is fenced to.
    DeliveryFence,
    /// (): every turn row ([`crate::rows::turn`]), by ts, session, instance, turn.
    AllTurns,
    /// (last seen): delete the peers last seen before; the sessions.
    DeletePeersBefore,
    /// (session, last seen): raise the peer's `last_seen` to the value (never lowers it; no
    /// row, no change).
    TouchPeer,
    /// (id): delete the card.
    DeleteCard,
    /// (scope, text, by, ts, project): append the lesson; one row, its id.
    InsertLesson,
    /// (key, value): set the document.
    SetKv,
    /// (id, ts, code, body): record the op unless a final one (code ≠ 0) is there.
    PutOp,
    /// (sender, id, ts, reason): record the reaper's verdict unless one is there.
    MarkReaped,
    /// (session, instance, ts): fence the session to the instance.
    SetDeliveryFence,
    /// (msg id, session): open a message as `stored` (`seq` 0), unless it is open already.
    OpenStored,
}

impl Common {
    /// The table and operation, for the statement's errors.
    pub fn origin(self) -> Origin {
        match self {
            Common::Message => ("messages", "message"),
            Common::RecentMessages => ("messages", "recent_messages"),
            Common::MessagesCiting => ("messages", "messages_citing"),
            Common::LedgerReaped => ("contracts", "ledger_reaped"),
            Common::LedgerPeerCut => ("contract_peers", "ledger_peer_cut"),
            Common::Peer => ("peers", "peer"),
            Common::Peers => ("peers", "peers"),
            Common::Card => ("cards", "card"),
            Common::Kv => ("kv", "kv"),
            Common::KvPrefix => ("kv", "kv_prefix"),
            Common::Op => ("ops", "op"),
            Common::AllLessons => ("lessons", "all_lessons"),
            Common::DeliveryStates => ("delivery", "states"),
            Common::DeliveryOpen => ("delivery", "open"),
            Common::DeliveryOpenCount => ("delivery", "open count"),
            Common::DeliveryFence => ("delivery_fence", "fence"),
            Common::AllTurns => ("turns", "all"),
            Common::DeletePeersBefore => ("peers", "delete_peers_before"),
            Common::TouchPeer => ("peers", "touch_peer"),
            Common::DeleteCard => ("cards", "delete_card"),
            Common::InsertLesson => ("lessons", "insert_lesson"),
            Common::SetKv => ("kv", "set_kv"),
            Common::PutOp => ("ops", "put_op"),
            Common::MarkReaped => ("contracts", "mark_reaped"),
            Common::SetDeliveryFence => ("delivery_fence", "set"),
            Common::OpenStored => ("delivery_open", "stored"),
        }
    }

    /// The SQL, parameters written `?N`.
    pub fn sql(self) -> &'static str {
        match self {
            Common::Message => concat!("SELECT ", msg_cols!(), " FROM messages WHERE id = ?1"),
            Common::RecentMessages => {
                concat!(
                    "SELECT ",
                    msg_cols!(),
                    " FROM messages ORDER BY id DESC LIMIT ?1"
                )
            }
            Common::MessagesCiting => MESSAGES_CITING,
            Common::LedgerReaped => LEDGER_REAPED,
            Common::LedgerPeerCut => {
                "SELECT last_reply, last_answered FROM contract_peers WHERE sender = ?1 AND peer = ?2"
            }
            Common::Peer => {
                "SELECT session, last_seen, delivered_up_to, data FROM peers WHERE session = ?1"
            }
            Common::Peers => {
                "SELECT session, last_seen, delivered_up_to, data FROM peers ORDER BY session"
            }
            Common::Card => "SELECT id, data FROM cards WHERE id = ?1",
            Common::Kv => "SELECT value FROM kv WHERE key = ?1",
            Common::KvPrefix => {
                "SELECT key, value FROM kv WHERE key >= ?1 AND key < ?2 ORDER BY key"
            }
            Common::Op => "SELECT id, ts, code, body FROM ops WHERE id = ?1",
            Common::AllLessons => {
                "SELECT id, scope, text, by_s, ts, project FROM lessons ORDER BY id"
            }
            Common::DeliveryStates => DELIVERY_STATES,
            Common::DeliveryOpen => DELIVERY_OPEN,
            Common::DeliveryOpenCount => "SELECT count(*) FROM delivery_open WHERE session = ?1",
            Common::DeliveryFence => "SELECT instance FROM delivery_fence WHERE session = ?1",
            Common::AllTurns => ALL_TURNS,
            Common::DeletePeersBefore => "DELETE FROM peers WHERE last_seen < ?1 RETURNING session",
            Common::TouchPeer => {
                "UPDATE peers SET last_seen = ?2 WHERE session = ?1 AND last_seen < ?2"
            }
            Common::DeleteCard => "DELETE FROM cards WHERE id = ?1",
            Common::InsertLesson => INSERT_LESSON,
            Common::SetKv => SET_KV,
            Common::PutOp => PUT_OP,
            Common::MarkReaped => MARK_REAPED,
            Common::SetDeliveryFence => SET_DELIVERY_FENCE,
            Common::OpenStored => {
                "INSERT INTO delivery_open(msg_id, session, seq) VALUES (?1, ?2, 0)
                 ON CONFLICT (msg_id) DO NOTHING"
            }
        }
    }
}

const MESSAGES_CITING: &str = concat!(
    "SELECT ",
    msg_cols!(),
    " FROM messages WHERE id IN (
         SELECT msg_id FROM message_refs WHERE card_id = ?1
         ORDER BY msg_id DESC LIMIT ?2)
     ORDER BY id"
);

const LEDGER_REAPED: &str =
    "SELECT sender, id, assignee, ts, reaped_ts, COALESCE(reaped_reason, '')
   FROM contracts WHERE reaped_ts IS NOT NULL ORDER BY id";

/// A direct message's `stored` state is the message itself (its time and recipient), ahead of
/// its logged states; a store written before `stored` stopped being logged has a logged one,
/// which is read instead. The recipients that are not one session (`all`, `*`, empty) have no
/// record.
const DELIVERY_STATES: &str = "SELECT state, ts, session, instance, turn, pid, outcome, reason
   FROM (SELECT 0 AS k, 'stored' AS state, m.ts AS ts, m.to_s AS session, NULL AS instance,
                NULL AS turn, NULL AS pid, NULL AS outcome, NULL AS reason
           FROM messages m
          WHERE m.id = ?1 AND m.to_s NOT IN ('all', '*', '')
            AND NOT EXISTS (SELECT 1 FROM delivery WHERE msg_id = ?1 AND state = 'stored')
         UNION ALL
         SELECT seq, state, ts, session, instance, turn, pid, outcome, reason
           FROM delivery WHERE msg_id = ?1) r
  ORDER BY k";

/// An open entry whose `seq` is 0 is a message still only `stored` (no logged state): its time
/// is the message's.
const DELIVERY_OPEN: &str = "SELECT o.msg_id, COALESCE(d.state, 'stored'), COALESCE(d.ts, m.ts),
        d.turn, d.instance, d.reason
   FROM delivery_open o LEFT JOIN delivery d ON d.seq = o.seq
        LEFT JOIN messages m ON o.seq = 0 AND m.id = o.msg_id
  WHERE o.session = ?1 ORDER BY o.msg_id LIMIT ?2";

const ALL_TURNS: &str = "SELECT session, instance, turn, ts, project, card, agent, model,
        credential, outcome, has_usage, input, output, cache_read, cache_write, usd, estimated,
        source
   FROM turns ORDER BY ts, session, instance, turn";

const INSERT_LESSON: &str = "INSERT INTO lessons(scope, text, by_s, ts, project)
     VALUES (?1, ?2, ?3, ?4, ?5) RETURNING id";

const SET_KV: &str = "INSERT INTO kv(key, value) VALUES (?1, ?2)
 ON CONFLICT(key) DO UPDATE SET value = excluded.value";

/// First final record wins; a pending marker (code 0) is replaced by the reply.
const PUT_OP: &str = "INSERT INTO ops(id, ts, code, body) VALUES (?1, ?2, ?3, ?4)
 ON CONFLICT(id) DO UPDATE SET ts = excluded.ts, code = excluded.code, body = excluded.body
 WHERE ops.code = 0";

const MARK_REAPED: &str = "UPDATE contracts SET reaped_ts = ?3, reaped_reason = ?4
  WHERE sender = ?1 AND id = ?2 AND reaped_ts IS NULL";

const SET_DELIVERY_FENCE: &str = "INSERT INTO delivery_fence(session, instance, ts)
     VALUES (?1, ?2, ?3)
 ON CONFLICT(session) DO UPDATE SET instance = excluded.instance, ts = excluded.ts";

/// A statement the shared code runs: one of the backend's or one written here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stmt {
    /// Written by each backend.
    Dialect(Dialect),
    /// Written here.
    Common(Common),
}

impl From<Dialect> for Stmt {
    fn from(d: Dialect) -> Stmt {
        Stmt::Dialect(d)
    }
}

impl From<Common> for Stmt {
    fn from(c: Common) -> Stmt {
        Stmt::Common(c)
    }
}

impl Stmt {
    /// The table and operation, for the statement's errors.
    pub fn origin(self) -> Origin {
        match self {
            Stmt::Dialect(d) => d.origin(),
            Stmt::Common(c) => c.origin(),
        }
    }
}

/// A statement ready to run: what it is (for its errors), its SQL and its parameters.
#[derive(Debug, Clone, Copy)]
pub struct Run<'s, 'a> {
    /// The table and operation.
    pub origin: Origin,
    /// The SQL in the backend's dialect.
    pub sql: &'s str,
    /// The parameters, in order.
    pub args: &'s [Arg<'a>],
}

/// One statement parameter, as the shared code hands it to a backend to bind.
#[derive(Debug, Clone, PartialEq)]
pub enum Arg<'a> {
    /// An integer.
    Int(i64),
    /// An integer or NULL.
    OptInt(Option<i64>),
    /// A text.
    Text(&'a str),
    /// A text or NULL.
    OptText(Option<&'a str>),
    /// A text made for this statement.
    Owned(String),
    /// A boolean.
    Bool(bool),
    /// A boolean or NULL.
    OptBool(Option<bool>),
    /// A float or NULL.
    OptReal(Option<f64>),
    /// A row limit, `0` meaning none (each dialect says "no limit" its own way).
    Limit(usize),
    /// A list of integers, bound as one array ([`ParamStyle::Dollar`] only).
    Ints(&'a [i64]),
    /// A list of texts, bound as one array ([`ParamStyle::Dollar`] only).
    Texts(Vec<&'a str>),
}

impl Arg<'_> {
    /// A count kept as an unsigned number (the wire bounds keep every one far below
    /// `i64::MAX`).
    pub fn count(v: u64) -> Arg<'static> {
        Arg::Int(i64::try_from(v).unwrap_or(i64::MAX))
    }
}

/// How a backend writes its parameters, for the statements built here ([`Query`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParamStyle {
    /// `?1, ?2, …`; a list is one parameter per element, `col IN (?1, ?2)` (SQLite).
    Numbered,
    /// `$1, $2, …`; a list is one array parameter, `col = ANY($1)` (PostgreSQL).
    Dollar,
}

impl ParamStyle {
    /// `sql`, written with `?N` parameters (and no other `?`), in this style.
    pub fn render(self, sql: &'static str) -> Cow<'static, str> {
        match self {
            ParamStyle::Numbered => Cow::Borrowed(sql),
            ParamStyle::Dollar => Cow::Owned(sql.replace('?', "$")),
        }
    }
}

/// One column's value, as a driver read it.
#[derive(Debug, Clone, PartialEq)]
pub enum Cell {
    /// NULL.
    Null,
    /// An integer (SQLite also stores booleans so).
    Int(i64),
    /// A float.
    Real(f64),
    /// A text.
    Text(String),
    /// A boolean.
    Bool(bool),
}

impl Cell {
    /// What kind of value this is, for errors.
    fn kind(&self) -> &'static str {
        match self {
            Cell::Null => "NULL",
            Cell::Int(_) => "an integer",
            Cell::Real(_) => "a float",
            Cell::Text(_) => "a text",
            Cell::Bool(_) => "a boolean",
        }
    }
}

/// The columns of the row being read, by index: a backend reads one column's value ([`Cell`]);
/// what it is read as is decided here, once. A value of another kind (or a NULL where one is not
/// allowed) is a corrupt row of the statement's table.
pub trait Columns {
    /// The statement's table, for errors.
    fn table(&self) -> &'static str;
    /// Column `i`'s value.
    fn cell(&self, i: usize) -> Result<Cell, StoreError>;

    /// An integer column, or NULL.
    fn opt_int(&self, i: usize) -> Result<Option<i64>, StoreError> {
        int_cell(self.table(), i, self.cell(i)?)
    }
    /// A text column, or NULL.
    fn opt_text(&self, i: usize) -> Result<Option<String>, StoreError> {
        text_cell(self.table(), i, self.cell(i)?)
    }
    /// A boolean column (an integer: not 0), or NULL.
    fn opt_bool(&self, i: usize) -> Result<Option<bool>, StoreError> {
        match self.cell(i)? {
            Cell::Null => Ok(None),
            Cell::Bool(v) => Ok(Some(v)),
            Cell::Int(v) => Ok(Some(v != 0)),
            other => Err(mismatch(self.table(), i, "a boolean", &other)),
        }
    }
    /// A float column (an integer converted), or NULL.
    fn opt_real(&self, i: usize) -> Result<Option<f64>, StoreError> {
        match self.cell(i)? {
            Cell::Null => Ok(None),
            Cell::Real(v) => Ok(Some(v)),
            Cell::Int(v) => Ok(Some(v as f64)),
            other => Err(mismatch(self.table(), i, "a float", &other)),
        }
    }
    /// An integer column that may not be NULL.
    fn int(&self, i: usize) -> Result<i64, StoreError> {
        self.opt_int(i)?
            .ok_or_else(|| mismatch(self.table(), i, "an integer", &Cell::Null))
    }
    /// A text column that may not be NULL.
    fn text(&self, i: usize) -> Result<String, StoreError> {
        self.opt_text(i)?
            .ok_or_else(|| mismatch(self.table(), i, "a text", &Cell::Null))
    }
    /// A text column that may not be NULL, lent to `f` instead of copied where the backend
    /// can: a row loop that sees few distinct texts (a tally's assignees, every hour again)
    /// copies each once.
    fn with_text(&self, i: usize, f: &mut dyn FnMut(&str)) -> Result<(), StoreError> {
        f(&self.text(i)?);
        Ok(())
    }
    /// A boolean column that may not be NULL.
    fn bool(&self, i: usize) -> Result<bool, StoreError> {
        self.opt_bool(i)?
            .ok_or_else(|| mismatch(self.table(), i, "a boolean", &Cell::Null))
    }
    /// A float column that may not be NULL.
    fn real(&self, i: usize) -> Result<f64, StoreError> {
        self.opt_real(i)?
            .ok_or_else(|| mismatch(self.table(), i, "a float", &Cell::Null))
    }
}

/// Column `i` of a row of `table` read as an integer or NULL ([`Columns::opt_int`]): a backend
/// that reads its integers without a [`Cell`] hands the other values here.
pub fn int_cell(table: &'static str, i: usize, cell: Cell) -> Result<Option<i64>, StoreError> {
    match cell {
        Cell::Null => Ok(None),
        Cell::Int(v) => Ok(Some(v)),
        other => Err(mismatch(table, i, "an integer", &other)),
    }
}

/// Column `i` of a row of `table` read as a text or NULL ([`Columns::opt_text`]); see
/// [`int_cell`].
pub fn text_cell(table: &'static str, i: usize, cell: Cell) -> Result<Option<String>, StoreError> {
    match cell {
        Cell::Null => Ok(None),
        Cell::Text(v) => Ok(Some(v)),
        other => Err(mismatch(table, i, "a text", &other)),
    }
}

/// Column `i` of a row of `table` holds `found` where `wanted` was expected.
fn mismatch(table: &'static str, i: usize, wanted: &str, found: &Cell) -> StoreError {
    StoreError::Corrupt {
        table,
        context: format!("column {i}: {} where {wanted} was expected", found.kind()),
        source: None,
    }
}

/// What a backend gives the shared code: its SQL and its driver. Every call runs inside the
/// transaction the backend opened, and a statement goes through its statement cache.
pub trait Statements {
    /// The SQL text of `stmt` in this backend's dialect.
    fn sql(&self, stmt: Dialect) -> Cow<'static, str>;
    /// How this backend writes parameters.
    fn param_style(&self) -> ParamStyle;
    /// Run `run` and hand each row to `each`, in order.
    fn each_row(&self, run: &Run<'_, '_>, each: Visit<'_>) -> Result<(), StoreError>;
    /// Run `run`; the number of rows it changed.
    fn execute(&self, run: &Run<'_, '_>) -> Result<u64, StoreError>;

    /// The SQL text of any statement, for this backend.
    fn statement(&self, stmt: Stmt) -> Cow<'static, str> {
        match stmt {
            Stmt::Dialect(d) => self.sql(d),
            Stmt::Common(c) => self.param_style().render(c.sql()),
        }
    }
}

/// A statement bound to its transaction and parameters, ready to run.
pub struct Bound<'t, 'a, S: ?Sized> {
    tx: &'t S,
    origin: Origin,
    sql: Cow<'t, str>,
    args: &'t [Arg<'a>],
}

/// `stmt` with `args`, on `tx`.
pub fn bind<'t, 'a, S: Statements + ?Sized>(
    tx: &'t S,
    stmt: impl Into<Stmt>,
    args: &'t [Arg<'a>],
) -> Bound<'t, 'a, S> {
    let stmt = stmt.into();
    Bound {
        tx,
        origin: stmt.origin(),
        sql: tx.statement(stmt),
        args,
    }
}

impl<S: Statements + ?Sized> Bound<'_, '_, S> {
    fn run(&self) -> Run<'_, '_> {
        Run {
            origin: self.origin,
            sql: &self.sql,
            args: self.args,
        }
    }

    /// Every row, decoded by `decode`.
    pub fn all<T>(
        &self,
        mut decode: impl FnMut(&dyn Columns) -> Result<T, StoreError>,
    ) -> Result<Vec<T>, StoreError> {
        let mut out = Vec::new();
        self.tx.each_row(&self.run(), &mut |c| {
            out.push(decode(c)?);
            Ok(())
        })?;
        Ok(out)
    }

    /// The row of a statement that returns at most one, decoded by `decode`.
    pub fn one<T>(
        &self,
        decode: impl Fn(&dyn Columns) -> Result<T, StoreError>,
    ) -> Result<Option<T>, StoreError> {
        Ok(self.all(decode)?.into_iter().next())
    }

    /// The integer in the first column of the row (0 when there is none or it is NULL).
    pub fn number(&self) -> Result<i64, StoreError> {
        Ok(self.one(|c| c.opt_int(0))?.flatten().unwrap_or(0))
    }

    /// Run it for the rows it changes.
    pub fn execute(&self) -> Result<u64, StoreError> {
        self.tx.execute(&self.run())
    }
}

/// A statement built clause by clause, with its parameters numbered as the backend writes them.
#[derive(Debug)]
pub struct Query<'a> {
    /// The SQL so far.
    pub sql: String,
    /// Its parameters, in order.
    pub args: Vec<Arg<'a>>,
    style: ParamStyle,
}

/// A list bound by [`Query::any`].
pub enum List<'a> {
    /// Integers.
    Ints(&'a [i64]),
    /// Texts.
    Texts(Vec<&'a str>),
}

impl<'a> Query<'a> {
    /// A statement starting with `sql`, for a backend writing parameters in `style`.
    pub fn new(style: ParamStyle, sql: impl Into<String>) -> Query<'a> {
        Query {
            sql: sql.into(),
            args: Vec::new(),
            style,
        }
    }

    /// The statement on `tx`, run as `origin`.
    pub fn bind<'t, S: Statements + ?Sized>(
        &'t self,
        tx: &'t S,
        origin: Origin,
    ) -> Bound<'t, 'a, S> {
        Bound {
            tx,
            origin,
            sql: Cow::Borrowed(&self.sql),
            args: &self.args,
        }
    }

    /// Add a parameter; returns how the SQL names it.
    pub fn arg(&mut self, v: Arg<'a>) -> String {
        self.args.push(v);
        match self.style {
            ParamStyle::Numbered => format!("?{}", self.args.len()),
            ParamStyle::Dollar => format!("${}", self.args.len()),
        }
    }

    /// Append ` AND <clause>`, where `clause` holds `{}` for the parameter `v`.
    pub fn and(&mut self, clause: &str, v: Arg<'a>) {
        let n = self.arg(v);
        self.sql.push_str(" AND ");
        self.sql.push_str(&clause.replace("{}", &n));
    }

    /// The condition "`column` is one of `list`", binding the list.
    pub fn any(&mut self, column: &str, list: List<'a>) -> String {
        match (self.style, list) {
            (ParamStyle::Dollar, List::Ints(v)) => {
                format!("{column} = ANY({})", self.arg(Arg::Ints(v)))
            }
            (ParamStyle::Dollar, List::Texts(v)) => {
                format!("{column} = ANY({})", self.arg(Arg::Texts(v)))
            }
            (ParamStyle::Numbered, List::Ints(v)) => {
                let marks: Vec<String> = v.iter().map(|i| self.arg(Arg::Int(*i))).collect();
                format!("{column} IN ({})", marks.join(","))
            }
            (ParamStyle::Numbered, List::Texts(v)) => {
                let marks: Vec<String> = v.into_iter().map(|t| self.arg(Arg::Text(t))).collect();
                format!("{column} IN ({})", marks.join(","))
            }
        }
    }
}

/// The statement listing the cards `filter` matches, by id.
pub fn cards_query<'a>(style: ParamStyle, filter: &'a CardFilter) -> Query<'a> {
    let mut q = Query::new(style, "SELECT id, data FROM cards WHERE 1 = 1");
    if let Some(p) = &filter.project {
        q.and("project = {}", Arg::Text(p));
    }
    if let Some(a) = &filter.assignee {
        q.and("assignee = {}", Arg::Text(a));
    }
    if let Some(ids) = &filter.ids {
        let c = q.any("id", List::Ints(ids));
        q.sql.push_str(&format!(" AND {c}"));
    }
    if let Some(statuses) = &filter.statuses {
        let names = statuses.iter().map(|s| s.as_str()).collect();
        let c = q.any("status", List::Texts(names));
        q.sql.push_str(&format!(" AND {c}"));
    }
    q.sql.push_str(" ORDER BY id");
    q
}

/// The statement listing the events `filter` matches, newest first, after `select` (the
/// backend's [`Dialect::EventsSelect`]); `None` when it matches nothing (an empty type list).
pub fn events_query<'a>(
    style: ParamStyle,
    select: &str,
    filter: &'a EventFilter,
) -> Option<Query<'a>> {
    let mut q = Query::new(style, select);
    if let Some(p) = &filter.project {
        q.and("project = {}", Arg::Text(p));
    }
    if let Some(by) = &filter.by {
        q.and("by_s = {}", Arg::Text(by));
    }
    if let Some(since) = filter.since {
        q.and("id > {}", Arg::Int(since));
    }
    if filter.of_cards {
        q.sql.push_str(" AND task_id IS NOT NULL");
    }
    if let Some(types) = &filter.types {
        // Exact names in one list; `presence.`-style prefixes as index ranges.
        let mut alts: Vec<String> = Vec::new();
        let mut exact: Vec<&str> = Vec::new();
        for t in types {
            if !t.ends_with('.') {
                exact.push(t);
                continue;
            }
            let lo = q.arg(Arg::Text(t));
            match crate::rows::prefix_upper_bound(t) {
                Some(hi) => {
                    let hi = q.arg(Arg::Owned(hi));
                    alts.push(format!("(type >= {lo} AND type < {hi})"));
                }
                None => alts.push(format!("type >= {lo}")),
            }
        }
        if !exact.is_empty() {
            alts.push(q.any("type", List::Texts(exact)));
        }
        if alts.is_empty() {
            return None;
        }
        q.sql.push_str(&format!(" AND ({})", alts.join(" OR ")));
    }
    if let Some(task) = filter.task_id {
        let n = q.arg(Arg::Int(task));
        if filter.card_events_only {
            q.sql.push_str(&format!(" AND task_id = {n}"));
        } else {
            q.sql.push_str(&format!(
                " AND (task_id = {n} OR id IN (SELECT event_id FROM event_refs WHERE card_id = {n}))"
            ));
        }
    }
    let n = q.arg(Arg::Limit(filter.limit));
    q.sql.push_str(&format!(" ORDER BY id DESC LIMIT {n}"));
    Some(q)
}

/// The statement listing the lessons of `scopes`, by id.
pub fn lessons_query<'a>(style: ParamStyle, scopes: &'a [String]) -> Query<'a> {
    let mut q = Query::new(
        style,
        "SELECT id, scope, text, by_s, ts, project FROM lessons",
    );
    let c = q.any(
        "scope",
        List::Texts(scopes.iter().map(String::as_str).collect()),
    );
    q.sql.push_str(&format!(" WHERE {c} ORDER BY id"));
    q
}

/// The statement adding up the turns `cq` matches per `by` group, after `select` (the
/// backend's [`Dialect::CostSelect`]); `None` when it matches nothing (an empty card list).
pub fn cost_query<'a>(
    style: ParamStyle,
    select: &str,
    cq: &'a CostQuery,
    by: CostBy,
    limit: usize,
) -> Option<Query<'a>> {
    let mut q = Query::new(style, select);
    if let Some(c) = cq.card {
        q.and("card = {}", Arg::Int(c));
    }
    if let Some(cs) = &cq.cards {
        if cs.is_empty() {
            return None;
        }
        let c = q.any("card", List::Ints(cs));
        q.sql.push_str(&format!(" AND {c}"));
    }
    if let Some(s) = &cq.session {
        q.and("session = {}", Arg::Text(s));
    }
    if let Some(p) = &cq.project {
        q.and("project = {}", Arg::Text(p));
    }
    if let Some(t) = cq.since_ts {
        q.and("ts >= {}", Arg::Int(t));
    }
    if by != CostBy::Total {
        let n = q.arg(Arg::Limit(limit));
        q.sql
            .push_str(&format!(" GROUP BY 1 ORDER BY 6 DESC, 1 LIMIT {n}"));
    }
    Some(q)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_per_style() {
        let filter = CardFilter {
            project: Some("p".into()),
            ids: Some(vec![3, 4]),
            statuses: Some(vec![trantor_proto::CardStatus::Todo]),
            ..CardFilter::default()
        };
        let q = cards_query(ParamStyle::Numbered, &filter);
        assert_eq!(
            q.sql,
            "SELECT id, data FROM cards WHERE 1 = 1 AND project = ?1 AND id IN (?2,?3) \
             AND status IN (?4) ORDER BY id"
        );
        assert_eq!(q.args.len(), 4);
        let q = cards_query(ParamStyle::Dollar, &filter);
        assert_eq!(
            q.sql,
            "SELECT id, data FROM cards WHERE 1 = 1 AND project = $1 AND id = ANY($2) \
             AND status = ANY($3) ORDER BY id"
        );
        assert_eq!(q.args[2], Arg::Texts(vec!["todo"]));
    }

    #[test]
    fn empty_lists_match_nothing() {
        let filter = EventFilter {
            types: Some(Vec::new()),
            ..EventFilter::default()
        };
        assert!(events_query(ParamStyle::Dollar, "SELECT", &filter).is_none());
        let cq = CostQuery {
            cards: Some(Vec::new()),
            ..CostQuery::default()
        };
        assert!(cost_query(ParamStyle::Numbered, "SELECT", &cq, CostBy::Card, 0).is_none());
    }
}

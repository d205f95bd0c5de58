//! The SQLite driver under the shared statements ([`Statements`] over one connection that is
//! inside a transaction), and the writes whose steps are SQLite's own: a message keeps the
//! contract ledger as it commits, a `message` event is stored as a reference to its message's
//! text, and counts are kept by AUTOINCREMENT marks and delete triggers.
//!
//! The transaction itself (BEGIN, savepoints, COMMIT) is managed by the writer and reader threads
//! in the crate root; this type only runs the statements. Every statement goes through the
//! connection's prepared-statement cache.

use std::borrow::Cow;

use rusqlite::types::{ToSqlOutput, Value as SqlValue, ValueRef};
use rusqlite::{CachedStatement, Connection, OptionalExtension, Params, Row, ToSql, params};
use serde_json::Value;
use trantor_proto::{BROADCAST, DeliveryEntry, DeliveryState, Event, Message};

use trantor_store::rows::encode;
use trantor_store::rows::{corrupt, message_args};
use trantor_store::sql::{
    Arg, Cell, Columns, Common, Dialect, Origin, ParamStyle, Run, Statements, Visit, bind,
    int_cell, text_cell,
};
use trantor_store::{
    CONTRACT_MATCH_MS, NewEvent, NewMessage, PruneReport, ReadTx, StoreError, WriteTx,
    is_ack_contract, is_ask, is_ledger_traffic,
};

use crate::statements;

/// Statements of a transaction on `conn` (read-only or read-write, as the connection is).
pub(crate) struct SqlTx<'c> {
    conn: &'c Connection,
    /// The message the current write job inserted last (id, text), so its `message` event can
    /// be stored by reference without reading the row back. Cleared between jobs
    /// ([`SqlTx::next_job`]): a job rolled back to its savepoint may have its id reused.
    last_message: Option<(i64, String)>,
}

impl<'c> SqlTx<'c> {
    /// Wrap a connection that is already inside a transaction.
    pub(crate) fn new(conn: &'c Connection) -> Self {
        SqlTx {
            conn,
            last_message: None,
        }
    }

    /// Start the next write job of a batch: forget what the previous one inserted.
    pub(crate) fn next_job(&mut self) {
        self.last_message = None;
    }
}

/// Turn a rusqlite error of a statement on `origin` into a [`StoreError`]: a value that does
/// not decode is a corrupt row, anything else a database error, both with the table and the
/// operation for context.
pub(crate) fn map_err((table, op): Origin) -> impl Fn(rusqlite::Error) -> StoreError {
    move |e| match e {
        rusqlite::Error::FromSqlConversionFailure(..)
        | rusqlite::Error::InvalidColumnType(..)
        | rusqlite::Error::IntegralValueOutOfRange(..)
        | rusqlite::Error::Utf8Error(..) => StoreError::Corrupt {
            table,
            context: op.to_string(),
            source: Some(std::sync::Arc::new(e)),
        },
        other => StoreError::db_from(format!("{table}: {op}"), other),
    }
}

/// SQLite's LIMIT: `0` means "no limit" here (LIMIT -1), so a caller that leaves the filter's
/// default gets everything rather than a silent empty page.
fn sql_limit(limit: usize) -> i64 {
    if limit == 0 {
        -1
    } else {
        i64::try_from(limit).unwrap_or(i64::MAX)
    }
}

/// A shared statement's parameter, bound as SQLite takes it.
struct Bind<'b, 'a>(&'b Arg<'a>);

impl ToSql for Bind<'_, '_> {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        fn text(s: &str) -> ToSqlOutput<'_> {
            ToSqlOutput::Borrowed(ValueRef::Text(s.as_bytes()))
        }
        Ok(match self.0 {
            Arg::Int(v) => ToSqlOutput::from(*v),
            Arg::OptInt(v) => v.map_or(ToSqlOutput::Owned(SqlValue::Null), ToSqlOutput::from),
            Arg::Text(s) => text(s),
            Arg::OptText(s) => s.map_or(ToSqlOutput::Owned(SqlValue::Null), text),
            Arg::Owned(s) => text(s),
            Arg::Bool(b) => ToSqlOutput::from(*b),
            Arg::OptBool(b) => b.map_or(ToSqlOutput::Owned(SqlValue::Null), ToSqlOutput::from),
            Arg::OptReal(f) => f.map_or(ToSqlOutput::Owned(SqlValue::Null), ToSqlOutput::from),
            Arg::Limit(n) => ToSqlOutput::from(sql_limit(*n)),
            Arg::Ints(_) | Arg::Texts(_) => {
                return Err(rusqlite::Error::ToSqlConversionFailure(
                    "a list is bound one parameter per element in SQLite".into(),
                ));
            }
        })
    }
}

/// The row being read, for the shared decoding.
struct SqlRow<'r, 's> {
    row: &'r Row<'s>,
    origin: Origin,
}

impl Columns for SqlRow<'_, '_> {
    fn table(&self) -> &'static str {
        self.origin.0
    }

    fn cell(&self, i: usize) -> Result<Cell, StoreError> {
        Ok(match self.row.get_ref(i).map_err(map_err(self.origin))? {
            ValueRef::Null => Cell::Null,
            ValueRef::Integer(v) => Cell::Int(v),
            ValueRef::Real(v) => Cell::Real(v),
            ValueRef::Text(t) => match std::str::from_utf8(t) {
                Ok(t) => Cell::Text(t.to_owned()),
                Err(e) => return Err(corrupt(self.origin.0, format!("column {i}"), e)),
            },
            ValueRef::Blob(_) => {
                return Err(StoreError::Corrupt {
                    table: self.origin.0,
                    context: format!("column {i}: a blob, which nothing stores"),
                    source: None,
                });
            }
        })
    }

    // The two reads every row decodes most, straight from SQLite's value: no `Cell` in
    // between (a tally read decodes six integers a row, a thousand rows a request).
    fn opt_int(&self, i: usize) -> Result<Option<i64>, StoreError> {
        match self.row.get_ref(i).map_err(map_err(self.origin))? {
            ValueRef::Null => Ok(None),
            ValueRef::Integer(v) => Ok(Some(v)),
            _ => int_cell(self.origin.0, i, self.cell(i)?),
        }
    }

    fn with_text(&self, i: usize, f: &mut dyn FnMut(&str)) -> Result<(), StoreError> {
        match self.row.get_ref(i).map_err(map_err(self.origin))? {
            ValueRef::Text(t) => match std::str::from_utf8(t) {
                Ok(t) => f(t),
                Err(e) => return Err(corrupt(self.origin.0, format!("column {i}"), e)),
            },
            _ => f(&self.text(i)?),
        }
        Ok(())
    }

    fn opt_text(&self, i: usize) -> Result<Option<String>, StoreError> {
        match self.row.get_ref(i).map_err(map_err(self.origin))? {
            ValueRef::Null => Ok(None),
            ValueRef::Text(t) => match std::str::from_utf8(t) {
                Ok(t) => Ok(Some(t.to_owned())),
                Err(e) => Err(corrupt(self.origin.0, format!("column {i}"), e)),
            },
            _ => text_cell(self.origin.0, i, self.cell(i)?),
        }
    }
}

impl Statements for SqlTx<'_> {
    fn sql(&self, stmt: Dialect) -> Cow<'static, str> {
        statements::text(stmt)
    }

    fn param_style(&self) -> ParamStyle {
        ParamStyle::Numbered
    }

    fn each_row(&self, run: &Run<'_, '_>, each: Visit<'_>) -> Result<(), StoreError> {
        let origin = run.origin;
        let mut st = self.cached(origin, run.sql)?;
        let mut rows = st.query(binds(run.args)).map_err(map_err(origin))?;
        while let Some(row) = rows.next().map_err(map_err(origin))? {
            each(&SqlRow { row, origin })?;
        }
        Ok(())
    }

    fn execute(&self, run: &Run<'_, '_>) -> Result<u64, StoreError> {
        let n = self.exec(run.origin, run.sql, binds(run.args))?;
        Ok(u64::try_from(n).unwrap_or(u64::MAX))
    }
}

/// `args` as the parameters of a statement.
fn binds<'b, 'a>(args: &'b [Arg<'a>]) -> impl Params + 'b {
    rusqlite::params_from_iter(args.iter().map(Bind))
}

/// A table of the cards a row cites, and its statement: `(card, row id)`.
type RefTable = (Origin, &'static str);

const MESSAGE_REFS: RefTable = (
    ("message_refs", "insert"),
    "INSERT OR IGNORE INTO message_refs(card_id, msg_id) VALUES (?1, ?2)",
);

const EVENT_REFS: RefTable = (
    ("event_refs", "insert"),
    "INSERT OR IGNORE INTO event_refs(card_id, event_id) VALUES (?1, ?2)",
);

impl SqlTx<'_> {
    /// The cached statement for `sql`; a failure names `origin`.
    fn cached(&self, origin: Origin, sql: &str) -> Result<CachedStatement<'_>, StoreError> {
        self.conn.prepare_cached(sql).map_err(map_err(origin))
    }

    /// Run a cached query expected to return at most one row.
    fn row<T, P: Params>(
        &self,
        origin: Origin,
        sql: &str,
        params: P,
        f: impl FnOnce(&Row<'_>) -> rusqlite::Result<T>,
    ) -> Result<Option<T>, StoreError> {
        let row = self.cached(origin, sql)?.query_row(params, f).optional();
        row.map_err(map_err(origin))
    }

    /// Run a cached statement; returns the number of rows changed.
    fn exec<P: Params>(&self, origin: Origin, sql: &str, params: P) -> Result<usize, StoreError> {
        self.cached(origin, sql)?
            .execute(params)
            .map_err(map_err(origin))
    }

    /// Run a cached INSERT of one row; returns its rowid. (Cheaper than `RETURNING`, which
    /// makes SQLite buffer the result; the writer connection is used by one thread only.)
    fn insert<P: Params>(&self, origin: Origin, sql: &str, params: P) -> Result<i64, StoreError> {
        match self.exec(origin, sql, params)? {
            1 => Ok(self.conn.last_insert_rowid()),
            n => Err(StoreError::db(format!(
                "{}: {}: inserted {n} rows",
                origin.0, origin.1
            ))),
        }
    }

    /// Record that row `id` cites each of `cards`, in `table`.
    fn insert_refs(
        &self,
        (origin, sql): RefTable,
        id: i64,
        cards: &[i64],
    ) -> Result<(), StoreError> {
        for card in cards {
            self.exec(origin, sql, params![card, id])?;
        }
        Ok(())
    }

    /// The AUTOINCREMENT high-water mark of `table` (0 before its first row).
    fn sequence(&self, table: &'static str) -> Result<i64, StoreError> {
        let seq = self.row(
            (table, "sequence"),
            "SELECT seq FROM sqlite_sequence WHERE name = ?1",
            [table],
            |r| r.get::<_, i64>(0),
        )?;
        Ok(seq.unwrap_or(0))
    }

    /// For a `message` event (`data.msgId` names a stored message and `data.text` is a prefix
    /// of that message's text): the message id and the prefix length in characters, so the
    /// event can be stored without a second copy of the text. `None` stores the event as is.
    fn message_text_ref(&self, event: &NewEvent) -> Result<Option<(i64, i64)>, StoreError> {
        if event.kind != "message" {
            return Ok(None);
        }
        let (Some(msg), Some(text)) = (
            event.data.get("msgId").and_then(Value::as_i64),
            event.data.get("text").and_then(Value::as_str),
        ) else {
            return Ok(None);
        };
        let chars = i64::try_from(text.chars().count()).unwrap_or(i64::MAX);
        // The common case: the job just inserted this message (no read needed).
        if let Some((id, full)) = &self.last_message
            && *id == msg
        {
            return Ok(full.starts_with(text).then_some((msg, chars)));
        }
        let same: Option<bool> = self.row(
            ("messages", "insert_event"),
            "SELECT substr(text, 1, ?2) = ?3 FROM messages WHERE id = ?1",
            params![msg, chars, text],
            |r| r.get(0),
        )?;
        Ok((same == Some(true)).then_some((msg, chars)))
    }
}

impl SqlTx<'_> {
    /// Keep the contract ledger as message `m` commits (docs/protocol.md §5.6): `m` is a
    /// contract of its sender, and a reply that may answer one of its recipient's contracts to
    /// the sender (by `re`, or as the oldest open one within [`CONTRACT_MATCH_MS`]).
    pub(crate) fn ledger_on_message(&self, m: &Message) -> Result<(), StoreError> {
        if !is_ledger_traffic(m) {
            return Ok(());
        }
        let mut answered: i64 = 0;
        if !is_ask(m) {
            if let Some(re) = m.re {
                let row = self.row(
                    ("contracts", "answer by re"),
                    "SELECT assignee, answer_id, by_re FROM contracts
                       WHERE sender = ?1 AND id = ?2",
                    params![m.to, re],
                    |r| {
                        Ok((
                            r.get::<_, String>(0)?,
                            r.get::<_, Option<i64>>(1)?,
                            r.get::<_, bool>(2)?,
                        ))
                    },
                )?;
                if let Some((assignee, answer, by_re)) = row
                    && !(answer.is_some() && by_re)
                {
                    self.exec(
                        ("contracts", "answer by re"),
                        "UPDATE contracts SET answer_id = ?3, by_re = 1
                           WHERE sender = ?1 AND id = ?2",
                        params![m.to, re, m.id],
                    )?;
                    self.bump_contract_peer(&m.to, &assignee, 0, re)?;
                    // A plain reply this one displaced answers the next open contract.
                    if let Some(plain) = answer {
                        let ts = self.row(
                            ("messages", "answer by re"),
                            "SELECT ts FROM messages WHERE id = ?1",
                            [plain],
                            |r| r.get::<_, i64>(0),
                        )?;
                        if let Some(ts) = ts {
                            let c = self.match_plain(&m.to, &assignee, plain, ts)?;
                            if c > 0 {
                                self.bump_contract_peer(&m.to, &assignee, 0, c)?;
                            }
                        }
                    }
                }
            } else {
                answered = self.match_plain(&m.to, &m.from, m.id, m.ts)?;
            }
        }
        self.bump_contract_peer(&m.to, &m.from, m.id, answered)?;
        self.exec(
            ("contracts", "insert"),
            "INSERT OR IGNORE INTO contracts(sender, id, assignee, ts, project, ack)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![m.from, m.id, m.to, m.ts, m.project, is_ack_contract(m)],
        )?;
        Ok(())
    }

    /// Let plain reply `reply` (sent at `ts` by `assignee`) answer `sender`'s oldest open
    /// contract to `assignee` sent before it within the match horizon; returns the contract's
    /// id (0: none).
    fn match_plain(
        &self,
        sender: &str,
        assignee: &str,
        reply: i64,
        ts: i64,
    ) -> Result<i64, StoreError> {
        let c = self.row(
            ("contracts", "answer by reply"),
            "SELECT id FROM contracts INDEXED BY contracts_open
               WHERE sender = ?1 AND assignee = ?2 AND answer_id IS NULL AND ack = 0
                 AND ts >= ?3 AND id < ?4
             ORDER BY ts, id LIMIT 1",
            params![sender, assignee, ts - CONTRACT_MATCH_MS, reply],
            |r| r.get::<_, i64>(0),
        )?;
        let Some(c) = c else { return Ok(0) };
        self.exec(
            ("contracts", "answer by reply"),
            "UPDATE contracts SET answer_id = ?3, by_re = 0 WHERE sender = ?1 AND id = ?2",
            params![sender, c, reply],
        )?;
        Ok(c)
    }

    /// Raise what the ledger knows about traffic between `sender` and `peer`.
    fn bump_contract_peer(
        &self,
        sender: &str,
        peer: &str,
        last_reply: i64,
        last_answered: i64,
    ) -> Result<(), StoreError> {
        self.exec(
            ("contract_peers", "upsert"),
            "INSERT INTO contract_peers(sender, peer, last_reply, last_answered)
                 VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT(sender, peer) DO UPDATE SET
                 last_reply = max(last_reply, excluded.last_reply),
                 last_answered = max(last_answered, excluded.last_answered)",
            params![sender, peer, last_reply, last_answered],
        )?;
        Ok(())
    }
}

impl ReadTx for SqlTx<'_> {}

impl WriteTx for SqlTx<'_> {
    fn insert_message(&mut self, msg: NewMessage, refs: &[i64]) -> Result<Message, StoreError> {
        let mut stored = msg.stored_as(0);
        stored.id = self.insert(
            ("messages", "insert_message"),
            "INSERT INTO messages(ts, from_s, to_s, project, text, re, kind, wake)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            binds(&message_args(&stored)),
        )?;
        self.last_message = Some((stored.id, stored.text.clone()));
        self.ledger_on_message(&stored)?;
        self.insert_refs(MESSAGE_REFS, stored.id, refs)?;
        Ok(stored)
    }

    fn put_message(&mut self, msg: &Message, refs: &[i64]) -> Result<bool, StoreError> {
        let before = self.sequence("messages")?;
        let id = [Arg::Int(msg.id)];
        let args = message_args(msg);
        let n = self.exec(
            ("messages", "put_message"),
            "INSERT OR IGNORE INTO messages(id, ts, from_s, to_s, project, text, re, kind, wake)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
            rusqlite::params_from_iter(id.iter().chain(&args).map(Bind)),
        )?;
        if n == 0 {
            return Ok(false);
        }
        self.ledger_on_message(msg)?;
        // The count is the high-water mark minus the deleted counter: an id that leaves a gap
        // above the mark, or fills a hole below it, shifts the counter so the count stays exact.
        let after = self.sequence("messages")?;
        let shift = (after - before) - 1;
        if shift != 0 {
            self.exec(
                ("counters", "put_message"),
                "UPDATE counters SET n = n + ?1 WHERE name = 'messages_deleted'",
                [shift],
            )?;
        }
        self.insert_refs(MESSAGE_REFS, msg.id, refs)?;
        Ok(true)
    }

    fn insert_event(&mut self, mut event: NewEvent) -> Result<Event, StoreError> {
        // A `message` event whose text is a prefix of its stored message's text keeps only a
        // reference (schema v2): `"text": null` in data, the message id and the prefix length.
        let by_ref = self.message_text_ref(&event)?;
        let (msg_id, text_chars, held) = match by_ref {
            Some((msg, chars)) => (
                Some(msg),
                Some(chars),
                event.data.insert("text".into(), Value::Null),
            ),
            None => (None, None, None),
        };
        let data = encode("events", &event.data)?;
        if let Some(text) = held {
            event.data.insert("text".into(), text);
        }
        let id: i64 = self.insert(
            ("events", "insert_event"),
            "INSERT INTO events(ts, type, project, by_s, task_id, data, msg_id, text_chars)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            params![
                event.ts,
                event.kind,
                event.project,
                event.by,
                event.task_id,
                data,
                msg_id,
                text_chars
            ],
        )?;
        self.insert_refs(EVENT_REFS, id, &event.refs)?;
        Ok(event.stored_as(id))
    }

    fn append_delivery(&mut self, id: i64, e: &DeliveryEntry) -> Result<(), StoreError> {
        if e.state == DeliveryState::Stored {
            // Not logged: the message is its own `stored` state; it only opens (seq 0).
            let args = [Arg::Int(id), Arg::Text(&e.session)];
            return bind(self, Common::OpenStored, &args).execute().map(drop);
        }
        let seq = self.insert(
            ("delivery", "append"),
            "INSERT INTO delivery(msg_id, state, ts, session, instance, turn, pid, outcome, reason)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
            params![
                id,
                e.state.as_str(),
                e.ts,
                e.session,
                e.instance,
                e.turn.map(|t| i64::try_from(t).unwrap_or(i64::MAX)),
                e.pid.map(i64::from),
                e.outcome,
                e.reason
            ],
        )?;
        if e.state.is_terminal() {
            self.exec(
                ("delivery_open", "close"),
                "DELETE FROM delivery_open WHERE msg_id = ?1",
                [id],
            )?;
        } else {
            self.exec(
                ("delivery_open", "open"),
                "INSERT INTO delivery_open(msg_id, session, seq) VALUES (?1, ?2, ?3)
                 ON CONFLICT(msg_id) DO UPDATE SET seq = excluded.seq",
                params![id, e.session, seq],
            )?;
        }
        Ok(())
    }

    fn prune(&mut self, before_ts: i64, ops_before_ts: i64) -> Result<PruneReport, StoreError> {
        // A direct message is read when its recipient's ledger has passed it; a recipient with
        // no peer row makes the subquery NULL, so its messages are kept (never read = never
        // pruned).
        let messages = self.exec(
            ("messages", "prune"),
            &format!(
                "DELETE FROM messages WHERE ts < ?1 AND (
                     to_s = '{BROADCAST}'
                     OR id <= (SELECT delivered_up_to FROM peers WHERE session = messages.to_s))"
            ),
            [before_ts],
        )?;
        // INDEXED BY: the planner would otherwise pick the task_id index (IS NULL), which walks
        // every non-card event instead of the old ones.
        let events = self.exec(
            ("events", "prune"),
            "DELETE FROM events INDEXED BY events_ts WHERE ts < ?1 AND task_id IS NULL",
            [before_ts],
        )?;
        let ops = self.exec(
            ("ops", "prune"),
            "DELETE FROM ops WHERE ts < ?1",
            [ops_before_ts],
        )?;
        let n = |x: usize| i64::try_from(x).unwrap_or(i64::MAX);
        Ok(PruneReport {
            messages: n(messages),
            events: n(events),
            ops: n(ops),
        })
    }
}

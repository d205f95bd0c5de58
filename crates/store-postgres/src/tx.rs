//! The PostgreSQL driver under the shared statements ([`Statements`] over one connection that
//! is inside a transaction), and the writes whose steps are PostgreSQL's own: inside the
//! writer's batch the inserts of messages, events and delivery states need no answer (the
//! writer chose their ids) and are deferred, and counters are kept in the statements that
//! change what they count.
//!
//! The transaction itself (BEGIN, the write lock, savepoints, COMMIT) is managed by the worker
//! threads in the crate root; this type only runs the statements, each through the
//! connection's prepared-statement cache. A statement whose answer is needed is one round trip,
//! carrying any deferred work with it.

use std::borrow::Cow;
use std::cell::RefCell;
use std::error::Error;

use postgres::Row;
use postgres::types::private::BytesMut;
use postgres::types::{FromSql, IsNull, ToSql, Type};
use trantor_proto::{BROADCAST, DeliveryEntry, DeliveryState, Event, Message};
use trantor_store::rows::encode;
use trantor_store::rows::message_args;
use trantor_store::sql::{
    Arg, Cell, Columns, Common, Dialect, ParamStyle, Run, Statements, Visit, bind,
};
use trantor_store::{NewEvent, NewMessage, PruneReport, ReadTx, StoreError, WriteTx};

use crate::{Conn, K_LEDGER, NOTIFY_CHANNEL, batch, map_pg, statements};

/// A statement parameter.
type Param<'a> = &'a (dyn ToSql + Sync);

/// Statement runners over [`PgTx::call`]: `name(table, op, sql, params)` runs the connection's
/// `method` with the prepared statement.
macro_rules! via_call {
    ($($(#[$doc:meta])* $name:ident -> $t:ty = $method:ident;)+) => {
        $(
            $(#[$doc])*
            fn $name(
                &self,
                table: &'static str,
                op: &'static str,
                sql: &str,
                params: &[Param<'_>],
            ) -> Result<$t, StoreError> {
                self.call(table, op, sql, |c, st| c.send(|c| c.$method(st, params)))
            }
        )+
    };
}

/// Statements of a transaction on one connection (read-only or read-write, as it was begun).
pub(crate) struct PgTx<'c> {
    conn: RefCell<&'c mut Conn>,
}

impl<'c> PgTx<'c> {
    /// Wrap a connection that is already inside a transaction.
    pub(crate) fn new(conn: &'c mut Conn) -> Self {
        PgTx {
            conn: RefCell::new(conn),
        }
    }

    /// Run `call` with the prepared statement for `sql` (after any deferred work, in the same
    /// round trip); a failure names `table`/`op`, or the deferred work when that is what failed.
    fn call<T>(
        &self,
        table: &'static str,
        op: &'static str,
        sql: &str,
        call: impl FnOnce(&mut Conn, &postgres::Statement) -> Result<T, postgres::Error>,
    ) -> Result<T, StoreError> {
        let mut c = self.conn.borrow_mut();
        let st = c.prepare(sql).map_err(map_pg(table, op))?;
        let r = call(&mut c, &st);
        r.map_err(|e| c.blame(table, op, e))
    }

    via_call! {
        /// Rows of a statement.
        query -> Vec<Row> = query;
        /// At most one row of a statement.
        query_opt -> Option<Row> = query_opt;
        /// Rows changed by a statement.
        exec -> u64 = execute;
    }

    /// Queue a row whose insert nobody waits for, to go out with the next round trip (see
    /// `run_batch` in the crate root: a failure then fails the whole batch).
    fn defer(&self, row: batch::Row) {
        self.conn.borrow_mut().defer_row(row);
    }

    /// The next message id, when the writer hands ids out (inside its locked batch).
    fn take_message_id(&self) -> Option<i64> {
        let mut c = self.conn.borrow_mut();
        let ids = c.ids.as_mut()?;
        let id = ids.next_msg;
        ids.next_msg += 1;
        Some(id)
    }

    /// The next event id, when the writer hands ids out (inside its locked batch).
    fn take_event_id(&self) -> Option<i64> {
        let mut c = self.conn.borrow_mut();
        let ids = c.ids.as_mut()?;
        let id = ids.next_event;
        ids.next_event += 1;
        Some(id)
    }

    /// One number from a one-row query (0 when no row).
    fn scalar(
        &self,
        table: &'static str,
        op: &'static str,
        sql: &str,
        params: &[Param<'_>],
    ) -> Result<i64, StoreError> {
        match self.query_opt(table, op, sql, params)? {
            Some(r) => get(&r, 0, table),
            None => Ok(0),
        }
    }

    /// Record that row `id` cites each of `cards`, in `table` (one statement for all).
    fn insert_refs(
        &self,
        (table, sql): RefTable,
        id: i64,
        cards: &[i64],
    ) -> Result<(), StoreError> {
        if cards.is_empty() {
            return Ok(());
        }
        self.exec(table, "insert", sql, &[&cards, &id])?;
        Ok(())
    }
}

/// A table of the cards a row cites, and its statement: `(cards, row id)`.
type RefTable = (&'static str, &'static str);

const MESSAGE_REFS: RefTable = (
    "message_refs",
    "INSERT INTO message_refs(card_id, msg_id) SELECT unnest($1::bigint[]), $2
     ON CONFLICT DO NOTHING",
);

const EVENT_REFS: RefTable = (
    "event_refs",
    "INSERT INTO event_refs(card_id, event_id) SELECT unnest($1::bigint[]), $2
     ON CONFLICT DO NOTHING",
);

/// A column of a row; a value that does not decode is a corrupt row of `table`.
fn get<'a, T: FromSql<'a>>(row: &'a Row, idx: usize, table: &'static str) -> Result<T, StoreError> {
    row.try_get(idx).map_err(|e| StoreError::Corrupt {
        table,
        context: format!("column {idx}"),
        source: Some(std::sync::Arc::new(e)),
    })
}

/// A shared statement's parameter, bound as PostgreSQL takes it: an integer given for an
/// `INTEGER` column is narrowed to it; a limit of 0 is `LIMIT NULL` (none).
#[derive(Debug)]
struct Bind<'b, 'a>(&'b Arg<'a>);

impl ToSql for Bind<'_, '_> {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut BytesMut,
    ) -> Result<IsNull, Box<dyn Error + Sync + Send>> {
        self.to_sql_checked(ty, out)
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    fn to_sql_checked(
        &self,
        ty: &Type,
        out: &mut BytesMut,
    ) -> Result<IsNull, Box<dyn Error + Sync + Send>> {
        match self.0 {
            Arg::Int(v) if *ty == Type::INT4 => i32::try_from(*v)?.to_sql_checked(ty, out),
            Arg::Int(v) => v.to_sql_checked(ty, out),
            Arg::OptInt(v) => v.to_sql_checked(ty, out),
            Arg::Text(s) => s.to_sql_checked(ty, out),
            Arg::OptText(s) => s.to_sql_checked(ty, out),
            Arg::Owned(s) => s.to_sql_checked(ty, out),
            Arg::Bool(b) => b.to_sql_checked(ty, out),
            Arg::OptBool(b) => b.to_sql_checked(ty, out),
            Arg::OptReal(f) => f.to_sql_checked(ty, out),
            Arg::Limit(0) => None::<i64>.to_sql_checked(ty, out),
            Arg::Limit(n) => i64::try_from(*n)
                .unwrap_or(i64::MAX)
                .to_sql_checked(ty, out),
            Arg::Ints(v) => v.to_sql_checked(ty, out),
            Arg::Texts(v) => v.to_sql_checked(ty, out),
        }
    }
}

/// Run `f` with `args` bound.
fn bound<T>(args: &[Arg<'_>], f: impl FnOnce(&[Param<'_>]) -> T) -> T {
    let binds: Vec<Bind<'_, '_>> = args.iter().map(Bind).collect();
    let params: Vec<Param<'_>> = binds.iter().map(|b| b as Param<'_>).collect();
    f(&params)
}

/// The row being read, for the shared decoding.
struct PgRow<'r> {
    row: &'r Row,
    table: &'static str,
}

impl Columns for PgRow<'_> {
    fn table(&self) -> &'static str {
        self.table
    }

    fn cell(&self, i: usize) -> Result<Cell, StoreError> {
        let (row, t) = (self.row, self.table);
        let ty = row.columns().get(i).map(|c| c.type_().clone());
        let cell = match ty {
            Some(Type::INT8) => get::<Option<i64>>(row, i, t)?.map(Cell::Int),
            Some(Type::INT4) => get::<Option<i32>>(row, i, t)?.map(|v| Cell::Int(v.into())),
            Some(Type::FLOAT8) => get::<Option<f64>>(row, i, t)?.map(Cell::Real),
            Some(Type::BOOL) => get::<Option<bool>>(row, i, t)?.map(Cell::Bool),
            // Text, and any type this crate never selects (its decoding error says which).
            _ => get::<Option<String>>(row, i, t)?.map(Cell::Text),
        };
        Ok(cell.unwrap_or(Cell::Null))
    }

    fn with_text(&self, i: usize, f: &mut dyn FnMut(&str)) -> Result<(), StoreError> {
        match self.row.try_get::<_, Option<&str>>(i) {
            Ok(Some(t)) => f(t),
            // NULL, another type, no such column: the copying read says which.
            _ => f(&self.text(i)?),
        }
        Ok(())
    }
}

impl Statements for PgTx<'_> {
    fn sql(&self, stmt: Dialect) -> Cow<'static, str> {
        statements::text(stmt)
    }

    fn param_style(&self) -> ParamStyle {
        ParamStyle::Dollar
    }

    fn each_row(&self, run: &Run<'_, '_>, each: Visit<'_>) -> Result<(), StoreError> {
        let (table, op) = run.origin;
        for row in bound(run.args, |p| self.query(table, op, run.sql, p))? {
            each(&PgRow { row: &row, table })?;
        }
        Ok(())
    }

    fn execute(&self, run: &Run<'_, '_>) -> Result<u64, StoreError> {
        let (table, op) = run.origin;
        bound(run.args, |p| self.exec(table, op, run.sql, p))
    }
}

impl ReadTx for PgTx<'_> {}

impl WriteTx for PgTx<'_> {
    /// One statement for all of them: a flush lists every session with a held poll, thousands
    /// on a busy hub, and each round trip would hold the write lock the hubs share.
    fn touch_peers(&mut self, seen: &[(String, i64)]) -> Result<(), StoreError> {
        if seen.is_empty() {
            return Ok(());
        }
        let (sessions, ts): (Vec<&str>, Vec<i64>) =
            seen.iter().map(|(s, t)| (s.as_str(), *t)).unzip();
        self.exec(
            "peers",
            "touch_peers",
            "UPDATE peers p SET last_seen = v.ts
               FROM unnest($1::text[], $2::bigint[]) AS v(session, ts)
              WHERE p.session = v.session AND p.last_seen < v.ts",
            &[&sessions, &ts],
        )?;
        Ok(())
    }

    fn put_message(&mut self, msg: &Message, refs: &[i64]) -> Result<bool, StoreError> {
        let args: Vec<Arg<'_>> = [Arg::Int(msg.id)]
            .into_iter()
            .chain(message_args(msg))
            .collect();
        let added = bound(&args, |p| {
            self.scalar(
                "messages",
                "put_message",
                "WITH m AS (
                 INSERT INTO messages(id, ts, from_s, to_s, project, text, re, kind, wake)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
                 ON CONFLICT (id) DO NOTHING RETURNING id),
             c AS (UPDATE counters
                     SET n = CASE name WHEN 'messages_tip' THEN GREATEST(n, (SELECT id FROM m))
                                       ELSE n + 1 END
                     WHERE name IN ('messages_tip', 'messages_count')
                       AND EXISTS (SELECT 1 FROM m))
             SELECT count(*) FROM m",
                p,
            )
        })?;
        if added == 0 {
            return Ok(false);
        }
        if let Some(ids) = self.conn.borrow_mut().ids.as_mut() {
            ids.next_msg = ids.next_msg.max(msg.id + 1);
        }
        // Move the sequence past the id so insert_message never hands it out again.
        self.query(
            "messages",
            "put_message",
            "SELECT setval('messages_id_seq', $1::bigint) FROM messages_id_seq
               WHERE $1::bigint >= CASE WHEN is_called THEN last_value + 1 ELSE last_value END",
            &[&msg.id],
        )?;
        self.insert_refs(MESSAGE_REFS, msg.id, refs)?;
        // Its contract ledger, in this transaction (schema version 8: a pass first, then the
        // message alone when its id is below what the passes already took).
        self.query(
            "contracts",
            "put_message",
            "SELECT trantor_ledger_put($1)",
            &[&msg.id],
        )?;
        Ok(true)
    }

    fn lock_ledger(&mut self) -> Result<(), StoreError> {
        // The ledger's lock, so a ledger pass and this write never wait on each other's rows.
        self.query(
            "contracts",
            "lock_ledger",
            "SELECT pg_advisory_xact_lock($1)",
            &[&K_LEDGER],
        )
        .map(|_| ())
    }

    fn insert_message(&mut self, msg: NewMessage, refs: &[i64]) -> Result<Message, StoreError> {
        if let Some(id) = self.take_message_id() {
            // The writer's id: the row, the tip counter and the notification other hubs wake
            // on go out with the next round trip (NOTIFY is delivered at COMMIT, or never).
            self.defer(batch::Row::Message(batch::MessageRow {
                id,
                ts: msg.ts,
                from: msg.from.clone(),
                to: msg.to.clone(),
                project: msg.project.clone(),
                text: msg.text.clone(),
                re: msg.re,
                kind: msg.kind.clone(),
                wake: msg.wake,
                refs: refs.to_vec(),
            }));
            return Ok(msg.stored_as(id));
        }
        // One round trip: the row, the tip counter, and the notification other hubs wake on
        // (NOTIFY is transactional: it is delivered at COMMIT, or never if this rolls back).
        let sql = format!(
            "WITH m AS (
                 INSERT INTO messages(ts, from_s, to_s, project, text, re, kind, wake)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING id),
             c AS (UPDATE counters
                     SET n = CASE name WHEN 'messages_tip' THEN (SELECT id FROM m) ELSE n + 1 END
                     WHERE name IN ('messages_tip', 'messages_count'))
             SELECT id, pg_notify('{NOTIFY_CHANNEL}', id::text || ' ' || $3) FROM m"
        );
        let mut stored = msg.stored_as(0);
        let row = bound(&message_args(&stored), |p| {
            self.query_opt("messages", "insert_message", &sql, p)
        })?;
        let Some(row) = row else {
            return Err(StoreError::db("messages: insert returned no id"));
        };
        stored.id = get(&row, 0, "messages")?;
        self.insert_refs(MESSAGE_REFS, stored.id, refs)?;
        Ok(stored)
    }

    fn insert_event(&mut self, event: NewEvent) -> Result<Event, StoreError> {
        let data = encode("events", &event.data)?;
        if let Some(id) = self.take_event_id() {
            // The writer's id: the row and its counters go out with the next round trip.
            self.defer(batch::Row::Event(batch::EventRow {
                id,
                ts: event.ts,
                kind: event.kind.clone(),
                project: event.project.clone(),
                by: event.by.clone(),
                task_id: event.task_id,
                data,
                refs: event.refs.clone(),
            }));
            return Ok(event.stored_as(id));
        }
        let id = self.scalar(
            "events",
            "insert_event",
            "WITH e AS (
                 INSERT INTO events(ts, type, project, by_s, task_id, data)
                 VALUES ($1, $2, $3, $4, $5, $6) RETURNING id),
             c AS (UPDATE counters
                     SET n = CASE name WHEN 'events_tip' THEN (SELECT id FROM e) ELSE n + 1 END
                     WHERE name IN ('events_tip', 'events_count'))
             SELECT id FROM e",
            &[
                &event.ts,
                &event.kind,
                &event.project,
                &event.by,
                &event.task_id,
                &data,
            ],
        )?;
        self.insert_refs(EVENT_REFS, id, &event.refs)?;
        Ok(event.stored_as(id))
    }

    fn append_delivery(&mut self, id: i64, e: &DeliveryEntry) -> Result<(), StoreError> {
        let turn = e.turn.map(|t| i64::try_from(t).unwrap_or(i64::MAX));
        let pid = e.pid.map(i64::from);
        let st = e.state.as_str();
        if e.state == DeliveryState::Stored {
            // Not logged: the message is its own `stored` state; it only opens (seq 0).
            if self.conn.borrow().ids.is_some() {
                self.defer(batch::Row::Stored(batch::StoredRow {
                    msg_id: id,
                    session: e.session.clone(),
                }));
                return Ok(());
            }
            let args = [Arg::Int(id), Arg::Text(&e.session)];
            return bind(self, Common::OpenStored, &args).execute().map(drop);
        }
        // One round trip: the row, then the open index (kept or closed by the state).
        let sql = if e.state.is_terminal() {
            "WITH d AS (
                 INSERT INTO delivery(msg_id, state, ts, session, instance, turn, pid, outcome, reason)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING seq)
             DELETE FROM delivery_open WHERE msg_id = $1 AND EXISTS (SELECT 1 FROM d)"
        } else {
            "WITH d AS (
                 INSERT INTO delivery(msg_id, state, ts, session, instance, turn, pid, outcome, reason)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING seq)
             INSERT INTO delivery_open(msg_id, session, seq) SELECT $1, $4, seq FROM d
             ON CONFLICT (msg_id) DO UPDATE SET seq = excluded.seq"
        };
        if self.conn.borrow().ids.is_some() {
            // Inside the writer's batch: nothing is read back, so it goes out with the next
            // round trip (an insert without a key of its own to conflict on).
            self.defer(batch::Row::Delivery(batch::DeliveryRow {
                msg_id: id,
                state: st.to_string(),
                terminal: e.state.is_terminal(),
                ts: e.ts,
                session: e.session.clone(),
                instance: e.instance.clone(),
                turn,
                pid,
                outcome: e.outcome.clone(),
                reason: e.reason.clone(),
            }));
            return Ok(());
        }
        self.exec(
            "delivery",
            "append",
            sql,
            &[
                &id,
                &st,
                &e.ts,
                &e.session,
                &e.instance,
                &turn,
                &pid,
                &e.outcome,
                &e.reason,
            ],
        )?;
        Ok(())
    }

    fn prune(&mut self, before_ts: i64, ops_before_ts: i64) -> Result<PruneReport, StoreError> {
        // The ledger first holds every message it deletes from (a pass, under the ledger's
        // lock until this commits).
        self.query(
            "contracts",
            "prune",
            "SELECT trantor_ledger_catch_up()",
            &[],
        )?;
        // A direct message is read when its recipient's ledger has passed it; a recipient with
        // no peer row makes the subquery NULL, so its messages are kept.
        let messages = self.scalar(
            "messages",
            "prune",
            &format!(
                "WITH d AS (
                     DELETE FROM messages WHERE ts < $1 AND (
                         to_s = '{BROADCAST}'
                         OR id <= (SELECT p.delivered_up_to FROM peers p
                                     WHERE p.session = messages.to_s))
                     RETURNING id),
                 r AS (DELETE FROM message_refs WHERE msg_id IN (SELECT id FROM d)),
                 k AS (DELETE FROM contracts WHERE id IN (SELECT id FROM d)),
                 dl AS (DELETE FROM delivery WHERE msg_id IN (SELECT id FROM d)),
                 dlo AS (DELETE FROM delivery_open WHERE msg_id IN (SELECT id FROM d)),
                 c AS (UPDATE counters SET n = n - (SELECT count(*) FROM d)
                         WHERE name = 'messages_count')
                 SELECT count(*) FROM d"
            ),
            &[&before_ts],
        )?;
        let events = self.scalar(
            "events",
            "prune",
            "WITH d AS (DELETE FROM events WHERE ts < $1 AND task_id IS NULL RETURNING id),
                 r AS (DELETE FROM event_refs WHERE event_id IN (SELECT id FROM d)),
                 c AS (UPDATE counters SET n = n - (SELECT count(*) FROM d)
                         WHERE name = 'events_count')
             SELECT count(*) FROM d",
            &[&before_ts],
        )?;
        let ops = self.exec(
            "ops",
            "prune",
            "DELETE FROM ops WHERE ts < $1",
            &[&ops_before_ts],
        )?;
        Ok(PruneReport {
            messages,
            events,
            ops: i64::try_from(ops).unwrap_or(i64::MAX),
        })
    }
}

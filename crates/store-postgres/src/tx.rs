//! [`ReadTx`] and [`WriteTx`] over one PostgreSQL connection that is inside a transaction.
//!
//! The transaction itself (BEGIN, the write lock, savepoints, COMMIT) is managed by the worker
//! threads in the crate root; this type only runs the statements, each through the
//! connection's prepared-statement cache. A statement whose answer is needed is one round trip,
//! carrying any deferred work with it; inside the writer's batch the inserts of messages, events
//! and delivery states need no answer (the writer chose their ids) and are deferred.

use std::cell::RefCell;

use postgres::Row;
use postgres::types::{FromSql, ToSql};
use serde_json::Value;
use trantor_proto::{BROADCAST, Card, Event, Lesson, Message, Peer};
use trantor_store::rows::{
    EventColumns, decode_card, decode_event, decode_json, decode_kv, decode_op, decode_peer,
    encode, prefix_upper_bound,
};
use trantor_store::{
    CardFilter, ContractRow, Counts, EventFilter, LedgerCounts, LedgerQuery, NewEvent, NewMessage,
    OpRecord, OpenGroup, PruneReport, ReadTx, ReapedContract, StoreError, WriteTx,
};

use crate::{Conn, NOTIFY_CHANNEL, batch, map_pg};

mod cost;
mod delivery;

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
                self.call(table, op, sql, |c, st| c.$method(st, params))
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

    fn counter(&self, name: &str) -> Result<i64, StoreError> {
        self.scalar(
            "counters",
            "counter",
            "SELECT n FROM counters WHERE name = $1",
            &[&name],
        )
    }
}

/// A column of a row; a value that does not decode is a corrupt row of `table`.
fn get<'a, T: FromSql<'a>>(row: &'a Row, idx: usize, table: &'static str) -> Result<T, StoreError> {
    row.try_get(idx).map_err(|e| StoreError::Corrupt {
        table,
        context: format!("column {idx}"),
        source: Some(std::sync::Arc::new(e)),
    })
}

/// PostgreSQL's LIMIT: `0` means "no limit" here (`LIMIT NULL`).
fn sql_limit(limit: usize) -> Option<i64> {
    if limit == 0 {
        None
    } else {
        Some(i64::try_from(limit).unwrap_or(i64::MAX))
    }
}

const MSG_COLS: &str = "id, ts, from_s, to_s, project, text, re, kind, wake";

fn message_row(r: &Row) -> Result<Message, StoreError> {
    let t = "messages";
    Ok(Message {
        id: get(r, 0, t)?,
        ts: get(r, 1, t)?,
        from: get(r, 2, t)?,
        to: get(r, 3, t)?,
        project: get(r, 4, t)?,
        text: get(r, 5, t)?,
        re: get(r, 6, t)?,
        kind: get(r, 7, t)?,
        wake: get(r, 8, t)?,
    })
}

/// The lowest message id a window starting at `$2` can hold: the smallest id among the first
/// messages in ts order at or after it (two probes of the ts index). Ids are assigned in commit
/// order under the write lock, so a sender's window is the id range from here.
const WINDOW_FIRST_ID: &str = "COALESCE((SELECT min(id) FROM messages WHERE ts =
     (SELECT min(ts) FROM messages WHERE ts >= $2)), 9223372036854775807)";

/// Whether a contract row was overtaken by later traffic with its assignee (supersession).
const OVERTAKEN: &str = "c.id < GREATEST(COALESCE(p.last_reply, 0), COALESCE(p.last_answered, 0))";

fn contract_row(r: &Row) -> Result<ContractRow, StoreError> {
    let t = "contracts";
    let answer_id: Option<i64> = get(r, 10, t)?;
    let reaped_ts: Option<i64> = get(r, 13, t)?;
    Ok(ContractRow {
        contract: Message {
            id: get(r, 0, t)?,
            ts: get(r, 1, t)?,
            from: get(r, 2, t)?,
            to: get(r, 3, t)?,
            project: get(r, 4, t)?,
            text: get::<Option<String>>(r, 5, t)?.unwrap_or_default(),
            re: get(r, 6, t)?,
            kind: get(r, 7, t)?,
            wake: get(r, 8, t)?,
        },
        ack: get(r, 9, t)?,
        answer: match answer_id {
            Some(id) => Some((
                id,
                get::<Option<i64>>(r, 11, t)?.unwrap_or(0),
                get::<Option<String>>(r, 12, t)?.unwrap_or_default(),
            )),
            None => None,
        },
        reaped: match reaped_ts {
            Some(ts) => Some((ts, get::<Option<String>>(r, 14, t)?.unwrap_or_default())),
            None => None,
        },
        overtaken: get(r, 15, t)?,
    })
}

fn messages(rows: Vec<Row>) -> Result<Vec<Message>, StoreError> {
    rows.iter().map(message_row).collect()
}

fn peer_row(r: &Row) -> Result<Peer, StoreError> {
    let t = "peers";
    let data: String = get(r, 3, t)?;
    decode_peer(get(r, 0, t)?, get(r, 1, t)?, get(r, 2, t)?, &data)
}

fn card_row(r: &Row) -> Result<Card, StoreError> {
    let data: String = get(r, 1, "cards")?;
    decode_card(get(r, 0, "cards")?, &data)
}

fn event_row(r: &Row) -> Result<Event, StoreError> {
    let t = "events";
    let cols = EventColumns {
        id: get(r, 0, t)?,
        ts: get(r, 1, t)?,
        kind: get(r, 2, t)?,
        project: get(r, 3, t)?,
        by: get(r, 4, t)?,
        data: get(r, 5, t)?,
    };
    decode_event(cols, None)
}

fn lesson_row(r: &Row) -> Result<Lesson, StoreError> {
    let t = "lessons";
    Ok(Lesson {
        id: get(r, 0, t)?,
        scope: get(r, 1, t)?,
        text: get(r, 2, t)?,
        by: get(r, 3, t)?,
        ts: get(r, 4, t)?,
        project: get(r, 5, t)?,
    })
}

/// Dynamic WHERE clauses with numbered parameters.
#[derive(Default)]
struct Query {
    sql: String,
    args: Vec<Box<dyn ToSql + Sync>>,
}

impl Query {
    /// Add a parameter; returns its `$n`.
    fn arg(&mut self, v: impl ToSql + Sync + 'static) -> String {
        self.args.push(Box::new(v));
        format!("${}", self.args.len())
    }

    fn params(&self) -> Vec<Param<'_>> {
        self.args.iter().map(|b| b.as_ref() as Param<'_>).collect()
    }
}

impl ReadTx for PgTx<'_> {
    fn delivery_states(&self, id: i64) -> Result<Vec<trantor_proto::DeliveryEntry>, StoreError> {
        self.delivery_states_impl(id)
    }

    fn delivery_open(
        &self,
        session: &str,
        limit: usize,
    ) -> Result<(Vec<trantor_proto::DeliveryOpenItem>, i64), StoreError> {
        self.delivery_open_impl(session, limit)
    }

    fn delivery_fence(&self, session: &str) -> Result<Option<String>, StoreError> {
        self.delivery_fence_impl(session)
    }

    fn all_turns(&self) -> Result<Vec<(i64, trantor_proto::TurnReport)>, StoreError> {
        self.all_turns_impl()
    }

    fn cost(
        &self,
        q: &trantor_store::CostQuery,
        by: trantor_store::CostBy,
        limit: usize,
    ) -> Result<Vec<(String, trantor_proto::CostSummary)>, StoreError> {
        self.cost_impl(q, by, limit)
    }

    fn tip(&self) -> Result<i64, StoreError> {
        self.counter("messages_tip")
    }

    fn messages_for(
        &self,
        session: &str,
        since: i64,
        limit: usize,
    ) -> Result<Vec<Message>, StoreError> {
        // Two ordered index ranges (direct and broadcast), each cut at the page size, merged.
        let sql = format!(
            "SELECT {MSG_COLS} FROM (
               (SELECT {MSG_COLS} FROM messages
                  WHERE to_s = $1 AND $1 <> '{BROADCAST}' AND from_s <> $1 AND id > $2
                  ORDER BY id LIMIT $3)
               UNION ALL
               (SELECT {MSG_COLS} FROM messages
                  WHERE to_s = '{BROADCAST}' AND from_s <> $1 AND id > $2
                  ORDER BY id LIMIT $3)
             ) m ORDER BY id LIMIT $3"
        );
        let rows = self.query(
            "messages",
            "messages_for",
            &sql,
            &[&session, &since, &sql_limit(limit)],
        )?;
        messages(rows)
    }

    fn message(&self, id: i64) -> Result<Option<Message>, StoreError> {
        let sql = format!("SELECT {MSG_COLS} FROM messages WHERE id = $1");
        self.query_opt("messages", "message", &sql, &[&id])?
            .as_ref()
            .map(message_row)
            .transpose()
    }

    fn recent_messages(&self, limit: usize) -> Result<Vec<Message>, StoreError> {
        let sql = format!("SELECT {MSG_COLS} FROM messages ORDER BY id DESC LIMIT $1");
        let mut v =
            messages(self.query("messages", "recent_messages", &sql, &[&sql_limit(limit)])?)?;
        v.reverse();
        Ok(v)
    }

    fn direct_messages_involving(
        &self,
        session: &str,
        since_ts: i64,
    ) -> Result<Vec<Message>, StoreError> {
        let sql = format!(
            "SELECT {MSG_COLS} FROM messages
               WHERE from_s = $1 AND ts >= $2 AND to_s <> '{BROADCAST}'
             UNION
             SELECT {MSG_COLS} FROM messages
               WHERE to_s = $1 AND ts >= $2 AND $1 <> '{BROADCAST}'
             ORDER BY id"
        );
        messages(self.query(
            "messages",
            "direct_messages_involving",
            &sql,
            &[&session, &since_ts],
        )?)
    }

    fn undelivered_direct(
        &self,
        from_ts: i64,
        until_ts: i64,
        limit: usize,
    ) -> Result<Vec<Message>, StoreError> {
        let sql = format!(
            "SELECT {MSG_COLS} FROM messages m
               WHERE ts >= $1 AND ts <= $2
                 AND to_s <> '{BROADCAST}' AND to_s NOT LIKE 'hub:%' AND from_s NOT LIKE 'hub:%'
                 AND (wake IS NULL OR wake)
                 AND (kind IS NULL OR kind NOT IN ('status', 'receipt'))
                 AND id > COALESCE(
                       (SELECT p.delivered_up_to FROM peers p WHERE p.session = m.to_s), 0)
             ORDER BY id LIMIT $3"
        );
        messages(self.query(
            "messages",
            "undelivered_direct",
            &sql,
            &[&from_ts, &until_ts, &sql_limit(limit)],
        )?)
    }

    fn dispatchers_since(&self, since_ts: i64) -> Result<Vec<String>, StoreError> {
        let sql = format!(
            "SELECT DISTINCT from_s FROM messages
               WHERE ts >= $1 AND to_s <> '{BROADCAST}' ORDER BY from_s"
        );
        self.query("messages", "dispatchers_since", &sql, &[&since_ts])?
            .iter()
            .map(|r| get(r, 0, "messages"))
            .collect()
    }

    fn ledger_senders(&self, since_ts: i64) -> Result<Vec<String>, StoreError> {
        self.query(
            "contracts",
            "ledger_senders",
            "SELECT DISTINCT sender FROM contracts
               WHERE answer_id IS NULL AND NOT ack AND ts >= $1 ORDER BY sender",
            &[&since_ts],
        )?
        .iter()
        .map(|r| get(r, 0, "contracts"))
        .collect()
    }

    fn ledger_reaped(&self) -> Result<Vec<ReapedContract>, StoreError> {
        self.query(
            "contracts",
            "ledger_reaped",
            "SELECT sender, id, assignee, ts, reaped_ts, COALESCE(reaped_reason, '')
               FROM contracts WHERE reaped_ts IS NOT NULL ORDER BY id",
            &[],
        )?
        .iter()
        .map(|r| {
            let t = "contracts";
            Ok(ReapedContract {
                sender: get(r, 0, t)?,
                id: get(r, 1, t)?,
                assignee: get(r, 2, t)?,
                ts: get(r, 3, t)?,
                reaped_ts: get(r, 4, t)?,
                reason: get(r, 5, t)?,
            })
        })
        .collect()
    }

    fn ledger_groups(&self, q: &LedgerQuery) -> Result<Vec<OpenGroup>, StoreError> {
        let sql = format!(
            "SELECT c.assignee, count(*)::BIGINT,
                    count(*) FILTER (WHERE c.ts < $4 AND {OVERTAKEN})::BIGINT,
                    count(*) FILTER (WHERE NOT (c.ts < $4 AND {OVERTAKEN})
                                       AND $5::BIGINT IS NOT NULL AND c.ts <= $5)::BIGINT
               FROM contracts c
               LEFT JOIN contract_peers p ON p.sender = c.sender AND p.peer = c.assignee
              WHERE c.sender = $1 AND c.answer_id IS NULL AND NOT c.ack AND c.ts >= $2
                AND ($3::TEXT IS NULL OR c.project = $3)
              GROUP BY c.assignee ORDER BY c.assignee"
        );
        self.query(
            "contracts",
            "ledger_groups",
            &sql,
            &[
                &q.sender,
                &q.since_ts,
                &q.project,
                &q.supersede_cut,
                &q.overdue_cut,
            ],
        )?
        .iter()
        .map(|r| {
            Ok(OpenGroup {
                assignee: get(r, 0, "contracts")?,
                open: get(r, 1, "contracts")?,
                superseded: get(r, 2, "contracts")?,
                overdue: get(r, 3, "contracts")?,
            })
        })
        .collect()
    }

    fn ledger_counts(&self, q: &LedgerQuery) -> Result<LedgerCounts, StoreError> {
        let row = self.query_opt(
            "contracts",
            "ledger_counts",
            &format!(
                "SELECT count(answer_id)::BIGINT,
                    count(*) FILTER (WHERE answer_id IS NULL AND ack)::BIGINT
               FROM contracts
              WHERE sender = $1 AND ts >= $2 AND ($3::TEXT IS NULL OR project = $3)
                AND id >= {WINDOW_FIRST_ID}
                AND (answer_id IS NOT NULL OR ack)"
            ),
            &[&q.sender, &q.since_ts, &q.project],
        )?;
        match row {
            Some(r) => Ok(LedgerCounts {
                answered: get(&r, 0, "contracts")?,
                ack: get(&r, 1, "contracts")?,
            }),
            None => Ok(LedgerCounts::default()),
        }
    }

    fn ledger_rows(
        &self,
        q: &LedgerQuery,
        after: i64,
        limit: usize,
        open_only: bool,
    ) -> Result<Vec<ContractRow>, StoreError> {
        let filter = if open_only {
            "AND c.answer_id IS NULL AND NOT c.ack"
        } else {
            ""
        };
        let sql = format!(
            "SELECT c.id, c.ts, c.sender, c.assignee, c.project, m.text, m.re, m.kind, m.wake,
                    c.ack, c.answer_id, a.ts, a.text, c.reaped_ts, c.reaped_reason, {OVERTAKEN}
               FROM contracts c
               LEFT JOIN messages m ON m.id = c.id
               LEFT JOIN messages a ON a.id = c.answer_id
               LEFT JOIN contract_peers p ON p.sender = c.sender AND p.peer = c.assignee
              WHERE c.sender = $1 AND c.ts >= $2 AND ($3::TEXT IS NULL OR c.project = $3)
                AND c.id > GREATEST($4, {WINDOW_FIRST_ID} - 1) {filter}
              ORDER BY c.id LIMIT $5"
        );
        self.query(
            "contracts",
            "ledger_rows",
            &sql,
            &[
                &q.sender,
                &q.since_ts,
                &q.project,
                &after,
                &sql_limit(limit),
            ],
        )?
        .iter()
        .map(contract_row)
        .collect()
    }

    fn messages_citing(&self, card: i64, limit: usize) -> Result<Vec<Message>, StoreError> {
        let sql = format!(
            "SELECT {MSG_COLS} FROM messages WHERE id IN (
                 SELECT msg_id FROM message_refs WHERE card_id = $1
                 ORDER BY msg_id DESC LIMIT $2)
             ORDER BY id"
        );
        messages(self.query(
            "messages",
            "messages_citing",
            &sql,
            &[&card, &sql_limit(limit)],
        )?)
    }

    fn peer(&self, session: &str) -> Result<Option<Peer>, StoreError> {
        self.query_opt(
            "peers",
            "peer",
            "SELECT session, last_seen, delivered_up_to, data FROM peers WHERE session = $1",
            &[&session],
        )?
        .as_ref()
        .map(peer_row)
        .transpose()
    }

    fn peers(&self) -> Result<Vec<Peer>, StoreError> {
        self.query(
            "peers",
            "peers",
            "SELECT session, last_seen, delivered_up_to, data FROM peers ORDER BY session",
            &[],
        )?
        .iter()
        .map(peer_row)
        .collect()
    }

    fn card(&self, id: i64) -> Result<Option<Card>, StoreError> {
        self.query_opt(
            "cards",
            "card",
            "SELECT id, data FROM cards WHERE id = $1",
            &[&id],
        )?
        .as_ref()
        .map(card_row)
        .transpose()
    }

    fn cards(&self, filter: &CardFilter) -> Result<Vec<Card>, StoreError> {
        let mut q = Query {
            sql: "SELECT id, data FROM cards WHERE true".into(),
            ..Default::default()
        };
        if let Some(p) = &filter.project {
            let n = q.arg(p.clone());
            q.sql.push_str(&format!(" AND project = {n}"));
        }
        if let Some(a) = &filter.assignee {
            let n = q.arg(a.clone());
            q.sql.push_str(&format!(" AND assignee = {n}"));
        }
        if let Some(ids) = &filter.ids {
            let n = q.arg(ids.clone());
            q.sql.push_str(&format!(" AND id = ANY({n})"));
        }
        if let Some(statuses) = &filter.statuses {
            let names: Vec<String> = statuses.iter().map(|s| s.as_str().to_string()).collect();
            let n = q.arg(names);
            q.sql.push_str(&format!(" AND status = ANY({n})"));
        }
        q.sql.push_str(" ORDER BY id");
        self.query("cards", "cards", &q.sql, &q.params())?
            .iter()
            .map(card_row)
            .collect()
    }

    fn events(&self, filter: &EventFilter) -> Result<Vec<Event>, StoreError> {
        let mut q = Query {
            sql: "SELECT id, ts, type, project, by_s, data FROM events WHERE true".into(),
            ..Default::default()
        };
        if let Some(p) = &filter.project {
            let n = q.arg(p.clone());
            q.sql.push_str(&format!(" AND project = {n}"));
        }
        if let Some(by) = &filter.by {
            let n = q.arg(by.clone());
            q.sql.push_str(&format!(" AND by_s = {n}"));
        }
        if let Some(since) = filter.since {
            let n = q.arg(since);
            q.sql.push_str(&format!(" AND id > {n}"));
        }
        if let Some(types) = &filter.types {
            let mut alts: Vec<String> = Vec::new();
            let mut exact: Vec<String> = Vec::new();
            for t in types {
                if t.ends_with('.') {
                    let lo = q.arg(t.clone());
                    match prefix_upper_bound(t) {
                        Some(hi) => {
                            let hi = q.arg(hi);
                            alts.push(format!("(type >= {lo} AND type < {hi})"));
                        }
                        None => alts.push(format!("type >= {lo}")),
                    }
                } else {
                    exact.push(t.clone());
                }
            }
            if !exact.is_empty() {
                let n = q.arg(exact);
                alts.push(format!("type = ANY({n})"));
            }
            if alts.is_empty() {
                return Ok(Vec::new());
            }
            q.sql.push_str(&format!(" AND ({})", alts.join(" OR ")));
        }
        if let Some(task) = filter.task_id {
            let n = q.arg(task);
            if filter.card_events_only {
                q.sql.push_str(&format!(" AND task_id = {n}"));
            } else {
                q.sql.push_str(&format!(
                    " AND (task_id = {n} OR id IN (SELECT event_id FROM event_refs WHERE card_id = {n}))"
                ));
            }
        }
        let n = q.arg(sql_limit(filter.limit));
        q.sql.push_str(&format!(" ORDER BY id DESC LIMIT {n}"));
        let mut events = self
            .query("events", "events", &q.sql, &q.params())?
            .iter()
            .map(event_row)
            .collect::<Result<Vec<_>, _>>()?;
        events.reverse();
        Ok(events)
    }

    fn latest_event_id(&self) -> Result<i64, StoreError> {
        self.counter("events_tip")
    }

    fn lessons(&self, scopes: &[String]) -> Result<Vec<Lesson>, StoreError> {
        if scopes.is_empty() {
            return Ok(Vec::new());
        }
        let scopes = scopes.to_vec();
        self.query(
            "lessons",
            "lessons",
            "SELECT id, scope, text, by_s, ts, project FROM lessons
               WHERE scope = ANY($1) ORDER BY id",
            &[&scopes],
        )?
        .iter()
        .map(lesson_row)
        .collect()
    }

    fn kv(&self, key: &str) -> Result<Option<Value>, StoreError> {
        let row = self.query_opt("kv", "kv", "SELECT value FROM kv WHERE key = $1", &[&key])?;
        row.map(|r| {
            let s: String = get(&r, 0, "kv")?;
            decode_json("kv", key, &s)
        })
        .transpose()
    }

    fn kv_prefix(&self, prefix: &str) -> Result<Vec<(String, Value)>, StoreError> {
        // Keys compare bytewise (COLLATE "C"): every key starting with `prefix` sorts in
        // [prefix, prefix + U+10FFFF).
        let upper = format!("{prefix}\u{10FFFF}");
        self.query(
            "kv",
            "kv_prefix",
            "SELECT key, value FROM kv WHERE key >= $1 AND key < $2 ORDER BY key",
            &[&prefix, &upper],
        )?
        .iter()
        .map(|r| {
            let v: String = get(r, 1, "kv")?;
            decode_kv(get(r, 0, "kv")?, &v)
        })
        .collect()
    }

    fn op(&self, id: &str) -> Result<Option<OpRecord>, StoreError> {
        let row = self.query_opt(
            "ops",
            "op",
            "SELECT id, ts, code, body FROM ops WHERE id = $1",
            &[&id],
        )?;
        row.map(|r| {
            let id: String = get(&r, 0, "ops")?;
            let ts: i64 = get(&r, 1, "ops")?;
            let code: i32 = get(&r, 2, "ops")?;
            let body: String = get(&r, 3, "ops")?;
            decode_op(id, ts, i64::from(code), &body)
        })
        .transpose()
    }

    fn all_lessons(&self) -> Result<Vec<Lesson>, StoreError> {
        self.query(
            "lessons",
            "all_lessons",
            "SELECT id, scope, text, by_s, ts, project FROM lessons ORDER BY id",
            &[],
        )?
        .iter()
        .map(lesson_row)
        .collect()
    }

    fn counts(&self) -> Result<Counts, StoreError> {
        let r = self.query_opt(
            "counters",
            "counts",
            "SELECT
               (SELECT n FROM counters WHERE name = 'messages_count'),
               (SELECT n FROM counters WHERE name = 'events_count'),
               (SELECT count(*) FROM peers),
               (SELECT count(*) FROM cards),
               (SELECT count(*) FROM lessons)",
            &[],
        )?;
        let Some(r) = r else {
            return Err(StoreError::db("counts: no row"));
        };
        let t = "counters";
        Ok(Counts {
            messages: get::<Option<i64>>(&r, 0, t)?.unwrap_or(0),
            events: get::<Option<i64>>(&r, 1, t)?.unwrap_or(0),
            peers: get(&r, 2, t)?,
            cards: get(&r, 3, t)?,
            lessons: get(&r, 4, t)?,
        })
    }
}

impl WriteTx for PgTx<'_> {
    fn record_turn(
        &mut self,
        ts: i64,
        turn: &trantor_proto::TurnReport,
    ) -> Result<bool, StoreError> {
        self.record_turn_impl(ts, turn)
    }

    fn append_delivery(
        &mut self,
        id: i64,
        entry: &trantor_proto::DeliveryEntry,
    ) -> Result<(), StoreError> {
        self.append_delivery_impl(id, entry)
    }

    fn set_delivery_fence(
        &mut self,
        session: &str,
        instance: &str,
        ts: i64,
    ) -> Result<Option<String>, StoreError> {
        self.set_delivery_fence_impl(session, instance, ts)
    }

    fn put_message(&mut self, msg: &Message, refs: &[i64]) -> Result<bool, StoreError> {
        let added = self.scalar(
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
            &[
                &msg.id,
                &msg.ts,
                &msg.from,
                &msg.to,
                &msg.project,
                &msg.text,
                &msg.re,
                &msg.kind,
                &msg.wake,
            ],
        )?;
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
        if !refs.is_empty() {
            let refs = refs.to_vec();
            self.exec(
                "message_refs",
                "insert",
                "INSERT INTO message_refs(card_id, msg_id) SELECT unnest($1::bigint[]), $2
                 ON CONFLICT DO NOTHING",
                &[&refs, &msg.id],
            )?;
        }
        Ok(true)
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
        let row = self.query_opt(
            "messages",
            "insert_message",
            &sql,
            &[
                &msg.ts,
                &msg.from,
                &msg.to,
                &msg.project,
                &msg.text,
                &msg.re,
                &msg.kind,
                &msg.wake,
            ],
        )?;
        let Some(row) = row else {
            return Err(StoreError::db("messages: insert returned no id"));
        };
        let id: i64 = get(&row, 0, "messages")?;
        if !refs.is_empty() {
            let refs = refs.to_vec();
            self.exec(
                "message_refs",
                "insert",
                "INSERT INTO message_refs(card_id, msg_id) SELECT unnest($1::bigint[]), $2
                 ON CONFLICT DO NOTHING",
                &[&refs, &id],
            )?;
        }
        Ok(msg.stored_as(id))
    }

    fn put_peer(&mut self, peer: &Peer) -> Result<(), StoreError> {
        let data = encode("peers", peer)?;
        self.exec(
            "peers",
            "put_peer",
            "INSERT INTO peers(session, last_seen, delivered_up_to, data) VALUES ($1, $2, $3, $4)
             ON CONFLICT(session) DO UPDATE SET
                 last_seen = excluded.last_seen,
                 data = excluded.data,
                 delivered_up_to = GREATEST(peers.delivered_up_to, excluded.delivered_up_to)",
            &[&peer.session, &peer.last_seen, &peer.delivered_up_to, &data],
        )?;
        Ok(())
    }

    fn raise_delivered(&mut self, session: &str, up_to: i64) -> Result<i64, StoreError> {
        self.scalar(
            "peers",
            "raise_delivered",
            "INSERT INTO peers(session, last_seen, delivered_up_to, data) VALUES ($1, 0, $2, '{}')
             ON CONFLICT(session) DO UPDATE SET
                 delivered_up_to = GREATEST(peers.delivered_up_to, excluded.delivered_up_to)
             RETURNING delivered_up_to",
            &[&session, &up_to],
        )
    }

    fn delete_peers_before(&mut self, last_seen: i64) -> Result<Vec<String>, StoreError> {
        self.query(
            "peers",
            "delete_peers_before",
            "DELETE FROM peers WHERE last_seen < $1 RETURNING session",
            &[&last_seen],
        )?
        .iter()
        .map(|r| get(r, 0, "peers"))
        .collect()
    }

    fn delete_anonymous_peers_before(&mut self, last_seen: i64) -> Result<Vec<String>, StoreError> {
        self.query(
            "peers",
            "delete_anonymous_peers_before",
            "DELETE FROM peers WHERE last_seen < $1
                 AND COALESCE((data::jsonb) -> 'registered', 'null'::jsonb)
                     IN ('null'::jsonb, 'false'::jsonb, '0'::jsonb)
             RETURNING session",
            &[&last_seen],
        )?
        .iter()
        .map(|r| get(r, 0, "peers"))
        .collect()
    }

    fn insert_card(&mut self, mut card: Card) -> Result<Card, StoreError> {
        let id = self.scalar(
            "cards",
            "insert_card",
            "SELECT nextval(pg_get_serial_sequence('cards', 'id'))",
            &[],
        )?;
        card.id = id;
        let data = encode("cards", &card)?;
        self.exec(
            "cards",
            "insert_card",
            "INSERT INTO cards(id, project, status, assignee, updated, data)
             VALUES ($1, $2, $3, $4, $5, $6)",
            &[
                &id,
                &card.project,
                &card.status.as_str(),
                &card.assignee,
                &card.updated,
                &data,
            ],
        )?;
        Ok(card)
    }

    fn put_card(&mut self, card: &Card) -> Result<(), StoreError> {
        // An upsert: replacing a missing id inserts it (how an import keeps the original ids);
        // the sequence is then moved past it so a later insert_card never reuses it.
        let data = encode("cards", card)?;
        self.exec(
            "cards",
            "put_card",
            "INSERT INTO cards(id, project, status, assignee, updated, data)
             VALUES ($1, $2, $3, $4, $5, $6)
             ON CONFLICT(id) DO UPDATE SET
                 project = excluded.project, status = excluded.status,
                 assignee = excluded.assignee, updated = excluded.updated, data = excluded.data",
            &[
                &card.id,
                &card.project,
                &card.status.as_str(),
                &card.assignee,
                &card.updated,
                &data,
            ],
        )?;
        self.query(
            "cards",
            "put_card",
            "SELECT setval('cards_id_seq', $1::bigint) FROM cards_id_seq
               WHERE $1::bigint >= CASE WHEN is_called THEN last_value + 1 ELSE last_value END",
            &[&card.id],
        )?;
        Ok(())
    }

    fn delete_card(&mut self, id: i64) -> Result<(), StoreError> {
        self.exec(
            "cards",
            "delete_card",
            "DELETE FROM cards WHERE id = $1",
            &[&id],
        )?;
        Ok(())
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
            return Ok(Event {
                id,
                ts: event.ts,
                kind: event.kind,
                project: event.project,
                by: event.by,
                data: event.data,
            });
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
        if !event.refs.is_empty() {
            self.exec(
                "event_refs",
                "insert",
                "INSERT INTO event_refs(card_id, event_id) SELECT unnest($1::bigint[]), $2
                 ON CONFLICT DO NOTHING",
                &[&event.refs, &id],
            )?;
        }
        Ok(Event {
            id,
            ts: event.ts,
            kind: event.kind,
            project: event.project,
            by: event.by,
            data: event.data,
        })
    }

    fn insert_lesson(&mut self, mut lesson: Lesson) -> Result<Lesson, StoreError> {
        lesson.id = self.scalar(
            "lessons",
            "insert_lesson",
            "INSERT INTO lessons(scope, text, by_s, ts, project) VALUES ($1, $2, $3, $4, $5)
             RETURNING id",
            &[
                &lesson.scope,
                &lesson.text,
                &lesson.by,
                &lesson.ts,
                &lesson.project,
            ],
        )?;
        Ok(lesson)
    }

    fn set_kv(&mut self, key: &str, value: &Value) -> Result<(), StoreError> {
        let data = encode("kv", value)?;
        self.exec(
            "kv",
            "set_kv",
            "INSERT INTO kv(key, value) VALUES ($1, $2)
             ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            &[&key, &data],
        )?;
        Ok(())
    }

    fn put_op(&mut self, op: &OpRecord) -> Result<(), StoreError> {
        let body = encode("ops", &op.body)?;
        let code = i32::from(op.code);
        self.exec(
            "ops",
            "put_op",
            // First final record wins; a pending marker (code 0) is replaced by the reply.
            "INSERT INTO ops(id, ts, code, body) VALUES ($1, $2, $3, $4)
             ON CONFLICT(id) DO UPDATE SET ts = excluded.ts, code = excluded.code,
                 body = excluded.body
             WHERE ops.code = 0",
            &[&op.id, &op.ts, &code, &body],
        )?;
        Ok(())
    }

    fn mark_reaped(
        &mut self,
        sender: &str,
        id: i64,
        ts: i64,
        reason: &str,
    ) -> Result<bool, StoreError> {
        let n = self.exec(
            "contracts",
            "mark_reaped",
            "UPDATE contracts SET reaped_ts = $3, reaped_reason = $4
               WHERE sender = $1 AND id = $2 AND reaped_ts IS NULL",
            &[&sender, &id, &ts, &reason],
        )?;
        Ok(n > 0)
    }

    fn prune(&mut self, before_ts: i64, ops_before_ts: i64) -> Result<PruneReport, StoreError> {
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

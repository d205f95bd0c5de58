//! [`ReadTx`] and [`WriteTx`] over one SQLite connection that is inside a transaction.
//!
//! The transaction itself (BEGIN, savepoints, COMMIT) is managed by the writer and reader threads
//! in the parent module; this type only runs the statements. Every statement goes through the
//! connection's prepared-statement cache.

use rusqlite::types::Value as SqlValue;
use rusqlite::{Connection, OptionalExtension, Params, Row, params, params_from_iter};
use serde_json::Value;
use trantor_proto::{BROADCAST, Card, Event, Lesson, Message, Peer};

use trantor_store::rows::{
    EventColumns, decode_card, decode_event, decode_json, decode_kv, decode_op, decode_peer,
    encode, prefix_upper_bound,
};
use trantor_store::{
    CONTRACT_MATCH_MS, CardFilter, ContractRow, Counts, EventFilter, LedgerCounts, LedgerQuery,
    NewEvent, NewMessage, OpRecord, OpenGroup, PruneReport, ReadTx, ReapedContract, StoreError,
    WriteTx, is_ack_contract, is_ask, is_ledger_traffic,
};

mod cost;
mod delivery;

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

/// Turn a rusqlite error into a [`StoreError`]: a value that does not decode is a corrupt row,
/// anything else a database error, both with the table and the operation for context.
pub(crate) fn map_err(
    table: &'static str,
    op: &'static str,
) -> impl Fn(rusqlite::Error) -> StoreError {
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

const MSG_COLS: &str = "id, ts, from_s, to_s, project, text, re, kind, wake";

pub(crate) fn message_row(r: &Row<'_>) -> rusqlite::Result<Message> {
    Ok(Message {
        id: r.get(0)?,
        ts: r.get(1)?,
        from: r.get(2)?,
        to: r.get(3)?,
        project: r.get(4)?,
        text: r.get(5)?,
        re: r.get(6)?,
        kind: r.get(7)?,
        wake: r.get(8)?,
    })
}

/// Raw peer columns; the JSON is decoded after the statement is done.
type PeerRow = (String, i64, i64, String);

fn peer_row((session, last_seen, delivered, data): PeerRow) -> Result<Peer, StoreError> {
    decode_peer(session, last_seen, delivered, &data)
}

fn card_row((id, data): (i64, String)) -> Result<Card, StoreError> {
    decode_card(id, &data)
}

/// Raw event columns: id, ts, type, project, by, data, and for a `message` event stored by
/// reference, how many characters of its message's text it carries and that text.
type EventRow = (
    i64,
    i64,
    String,
    String,
    String,
    String,
    Option<i64>,
    Option<String>,
);

/// The event columns [`event_row`] reads: the message text of an event stored by reference
/// comes from the messages table (a rowid lookup), cut to the characters the event holds.
const EVENT_COLS: &str = "id, ts, type, project, by_s, data, text_chars,
    (SELECT substr(m.text, 1, events.text_chars) FROM messages m WHERE m.id = events.msg_id)";

fn event_row(
    (id, ts, kind, project, by, data, text_chars, text): EventRow,
) -> Result<Event, StoreError> {
    let cols = EventColumns {
        id,
        ts,
        kind,
        project,
        by,
        data,
    };
    // A message pruned under its event (retention removes events first) reads as "".
    decode_event(cols, text_chars.map(|_| text.unwrap_or_default()))
}

fn lesson_row(r: &Row<'_>) -> rusqlite::Result<Lesson> {
    Ok(Lesson {
        id: r.get(0)?,
        scope: r.get(1)?,
        text: r.get(2)?,
        by: r.get(3)?,
        ts: r.get(4)?,
        project: r.get(5)?,
    })
}

impl SqlTx<'_> {
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
            "messages",
            "insert_event",
            "SELECT substr(text, 1, ?2) = ?3 FROM messages WHERE id = ?1",
            params![msg, chars, text],
            |r| r.get(0),
        )?;
        Ok((same == Some(true)).then_some((msg, chars)))
    }

    /// Run a cached query and collect its rows.
    fn rows<T, P, F>(
        &self,
        table: &'static str,
        op: &'static str,
        sql: &str,
        params: P,
        f: F,
    ) -> Result<Vec<T>, StoreError>
    where
        P: Params,
        F: FnMut(&Row<'_>) -> rusqlite::Result<T>,
    {
        let err = map_err(table, op);
        let mut st = self.conn.prepare_cached(sql).map_err(&err)?;
        let rows = st.query_map(params, f).map_err(&err)?;
        rows.collect::<Result<Vec<T>, _>>().map_err(&err)
    }

    /// Run a cached query expected to return at most one row.
    fn row<T, P, F>(
        &self,
        table: &'static str,
        op: &'static str,
        sql: &str,
        params: P,
        f: F,
    ) -> Result<Option<T>, StoreError>
    where
        P: Params,
        F: FnOnce(&Row<'_>) -> rusqlite::Result<T>,
    {
        let err = map_err(table, op);
        let mut st = self.conn.prepare_cached(sql).map_err(&err)?;
        st.query_row(params, f).optional().map_err(&err)
    }

    /// Run a cached INSERT of one row; returns its rowid. (Cheaper than `RETURNING`, which
    /// makes SQLite buffer the result; the writer connection is used by one thread only.)
    fn insert<P: Params>(
        &self,
        table: &'static str,
        op: &'static str,
        sql: &str,
        params: P,
    ) -> Result<i64, StoreError> {
        match self.exec(table, op, sql, params)? {
            1 => Ok(self.conn.last_insert_rowid()),
            n => Err(StoreError::db(format!("{table}: {op}: inserted {n} rows"))),
        }
    }

    /// Run a cached statement; returns the number of rows changed.
    fn exec<P: Params>(
        &self,
        table: &'static str,
        op: &'static str,
        sql: &str,
        params: P,
    ) -> Result<usize, StoreError> {
        let err = map_err(table, op);
        let mut st = self.conn.prepare_cached(sql).map_err(&err)?;
        st.execute(params).map_err(&err)
    }

    fn sequence(&self, table: &'static str) -> Result<i64, StoreError> {
        Ok(self
            .row(
                table,
                "sequence",
                "SELECT seq FROM sqlite_sequence WHERE name = ?1",
                [table],
                |r| r.get::<_, i64>(0),
            )?
            .unwrap_or(0))
    }
}

/// The lowest message id a window starting at `?2` can hold: the first message in ts order at
/// or after it (one probe of the ts index). Ids are assigned in commit order and ts is taken
/// when a write is made, so a sender's window is the id range from here.
const WINDOW_FIRST_ID: &str = "COALESCE((SELECT id FROM messages INDEXED BY messages_ts
     WHERE ts >= ?2 ORDER BY ts, id LIMIT 1), 9223372036854775807)";

/// Whether a contract row was overtaken by later traffic with its assignee (supersession).
const OVERTAKEN: &str = "c.id < max(COALESCE(p.last_reply, 0), COALESCE(p.last_answered, 0))";

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
                    "contracts",
                    "answer by re",
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
                        "contracts",
                        "answer by re",
                        "UPDATE contracts SET answer_id = ?3, by_re = 1
                           WHERE sender = ?1 AND id = ?2",
                        params![m.to, re, m.id],
                    )?;
                    self.bump_contract_peer(&m.to, &assignee, 0, re)?;
                    // A plain reply this one displaced answers the next open contract.
                    if let Some(plain) = answer {
                        let ts = self.row(
                            "messages",
                            "answer by re",
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
            "contracts",
            "insert",
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
            "contracts",
            "answer by reply",
            "SELECT id FROM contracts INDEXED BY contracts_open
               WHERE sender = ?1 AND assignee = ?2 AND answer_id IS NULL AND ack = 0
                 AND ts >= ?3 AND id < ?4
             ORDER BY ts, id LIMIT 1",
            params![sender, assignee, ts - CONTRACT_MATCH_MS, reply],
            |r| r.get::<_, i64>(0),
        )?;
        let Some(c) = c else { return Ok(0) };
        self.exec(
            "contracts",
            "answer by reply",
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
            "contract_peers",
            "upsert",
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

fn contract_row(r: &Row<'_>) -> rusqlite::Result<ContractRow> {
    let answer_id: Option<i64> = r.get(10)?;
    let reaped_ts: Option<i64> = r.get(13)?;
    Ok(ContractRow {
        contract: Message {
            id: r.get(0)?,
            ts: r.get(1)?,
            from: r.get(2)?,
            to: r.get(3)?,
            project: r.get(4)?,
            text: r.get::<_, Option<String>>(5)?.unwrap_or_default(),
            re: r.get(6)?,
            kind: r.get(7)?,
            wake: r.get(8)?,
        },
        ack: r.get(9)?,
        answer: match answer_id {
            Some(id) => Some((
                id,
                r.get::<_, Option<i64>>(11)?.unwrap_or(0),
                r.get::<_, Option<String>>(12)?.unwrap_or_default(),
            )),
            None => None,
        },
        reaped: match reaped_ts {
            Some(ts) => Some((ts, r.get::<_, Option<String>>(14)?.unwrap_or_default())),
            None => None,
        },
        overtaken: r.get(15)?,
    })
}

impl ReadTx for SqlTx<'_> {
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
        self.sequence("messages")
    }

    fn messages_for(
        &self,
        session: &str,
        since: i64,
        limit: usize,
    ) -> Result<Vec<Message>, StoreError> {
        // Two ordered index ranges (direct: to_s = session; broadcast: to_s = 'all') merged by
        // id, so the cost is the page size, not the mailbox size. `?1 != 'all'` keeps a session
        // literally named `all` from reading the broadcasts twice.
        let sql = format!(
            "SELECT {MSG_COLS} FROM messages
               WHERE to_s = ?1 AND ?1 != '{BROADCAST}' AND from_s != ?1 AND id > ?2
             UNION ALL
             SELECT {MSG_COLS} FROM messages
               WHERE to_s = '{BROADCAST}' AND from_s != ?1 AND id > ?2
             ORDER BY id LIMIT ?3"
        );
        self.rows(
            "messages",
            "messages_for",
            &sql,
            params![session, since, sql_limit(limit)],
            message_row,
        )
    }

    fn message(&self, id: i64) -> Result<Option<Message>, StoreError> {
        let sql = format!("SELECT {MSG_COLS} FROM messages WHERE id = ?1");
        self.row("messages", "message", &sql, [id], message_row)
    }

    fn recent_messages(&self, limit: usize) -> Result<Vec<Message>, StoreError> {
        let sql = format!("SELECT {MSG_COLS} FROM messages ORDER BY id DESC LIMIT ?1");
        let mut v = self.rows(
            "messages",
            "recent_messages",
            &sql,
            [sql_limit(limit)],
            message_row,
        )?;
        v.reverse();
        Ok(v)
    }

    fn direct_messages_involving(
        &self,
        session: &str,
        since_ts: i64,
    ) -> Result<Vec<Message>, StoreError> {
        // Sent by the session: the (from_s, ts) index. Sent to it: its (to_s, id) range,
        // starting at the lowest id of any message in the window — found on the ts index, so
        // it costs the window's traffic, not the store's history (walking the whole mailbox
        // made `/contracts` grow with every message ever received). The ts filter still applies
        // to each row, so the answer is exact even where ids and ts are not in the same order.
        // A (to_s, ts) index would do the same but cost every insert one more index page. A
        // self-addressed message matches both arms, hence UNION rather than UNION ALL.
        let sql = format!(
            "SELECT {MSG_COLS} FROM messages
               WHERE from_s = ?1 AND ts >= ?2 AND to_s != '{BROADCAST}'
             UNION
             SELECT {MSG_COLS} FROM messages INDEXED BY messages_to_id
               WHERE to_s = ?1 AND ?1 != '{BROADCAST}' AND ts >= ?2
                 AND id >= (SELECT min(id) FROM messages INDEXED BY messages_ts WHERE ts >= ?2)
             ORDER BY id"
        );
        self.rows(
            "messages",
            "direct_messages_involving",
            &sql,
            params![session, since_ts],
            message_row,
        )
    }

    fn undelivered_direct(
        &self,
        from_ts: i64,
        until_ts: i64,
        limit: usize,
    ) -> Result<Vec<Message>, StoreError> {
        // The ts range is small (the duty window); the ledger lookup is one primary-key probe
        // per row.
        let sql = format!(
            "SELECT {MSG_COLS} FROM messages INDEXED BY messages_ts
               WHERE ts >= ?1 AND ts <= ?2
                 AND to_s != '{BROADCAST}' AND to_s NOT LIKE 'hub:%' AND from_s NOT LIKE 'hub:%'
                 AND (wake IS NULL OR wake != 0)
                 AND (kind IS NULL OR kind NOT IN ('status', 'receipt'))
                 AND id > COALESCE(
                       (SELECT delivered_up_to FROM peers WHERE session = messages.to_s), 0)
             ORDER BY id LIMIT ?3"
        );
        self.rows(
            "messages",
            "undelivered_direct",
            &sql,
            params![from_ts, until_ts, sql_limit(limit)],
            message_row,
        )
    }

    fn dispatchers_since(&self, since_ts: i64) -> Result<Vec<String>, StoreError> {
        // Without ANALYZE statistics the planner prefers walking the (from_s, ts) index for the
        // DISTINCT, i.e. every message; the ts range is the small side.
        let sql = format!(
            "SELECT DISTINCT from_s FROM messages INDEXED BY messages_ts
               WHERE ts >= ?1 AND to_s != '{BROADCAST}' ORDER BY from_s"
        );
        self.rows("messages", "dispatchers_since", &sql, [since_ts], |r| {
            r.get(0)
        })
    }

    fn ledger_senders(&self, since_ts: i64) -> Result<Vec<String>, StoreError> {
        self.rows(
            "contracts",
            "ledger_senders",
            "SELECT DISTINCT sender FROM contracts INDEXED BY contracts_open
               WHERE answer_id IS NULL AND ack = 0 AND ts >= ?1 ORDER BY sender",
            [since_ts],
            |r| r.get(0),
        )
    }

    fn ledger_reaped(&self) -> Result<Vec<ReapedContract>, StoreError> {
        self.rows(
            "contracts",
            "ledger_reaped",
            "SELECT sender, id, assignee, ts, reaped_ts, COALESCE(reaped_reason, '')
               FROM contracts WHERE reaped_ts IS NOT NULL ORDER BY id",
            [],
            |r| {
                Ok(ReapedContract {
                    sender: r.get(0)?,
                    id: r.get(1)?,
                    assignee: r.get(2)?,
                    ts: r.get(3)?,
                    reaped_ts: r.get(4)?,
                    reason: r.get(5)?,
                })
            },
        )
    }

    fn ledger_groups(&self, q: &LedgerQuery) -> Result<Vec<OpenGroup>, StoreError> {
        // Counted per assignee on the open index, which covers every column used unless a
        // project is asked for (then each row is read): the supersession cut is looked up once
        // per assignee, not per row.
        let project = if q.project.is_some() {
            "AND c.project = ?3"
        } else {
            "AND ?3 IS NULL"
        };
        let open = format!(
            "FROM contracts c INDEXED BY contracts_open
              WHERE c.sender = ?1 AND c.assignee = g.assignee AND c.answer_id IS NULL
                AND c.ack = 0 AND c.ts >= ?2 {project}"
        );
        let cut = "max(COALESCE(p.last_reply, 0), COALESCE(p.last_answered, 0))";
        let sql = format!(
            "WITH g AS (
                 SELECT c.assignee AS assignee, count(*) AS n
                   FROM contracts c INDEXED BY contracts_open
                  WHERE c.sender = ?1 AND c.answer_id IS NULL AND c.ack = 0 AND c.ts >= ?2
                        {project}
                  GROUP BY c.assignee)
             SELECT g.assignee, g.n,
                    (SELECT count(*) {open} AND c.ts < ?4 AND c.id < {cut}),
                    CASE WHEN ?5 IS NULL THEN 0 ELSE
                      (SELECT count(*) {open} AND c.ts <= ?5
                          AND NOT (c.ts < ?4 AND c.id < {cut})) END
               FROM g LEFT JOIN contract_peers p ON p.sender = ?1 AND p.peer = g.assignee
              ORDER BY g.assignee"
        );
        self.rows(
            "contracts",
            "ledger_groups",
            &sql,
            params![
                q.sender,
                q.since_ts,
                q.project,
                q.supersede_cut,
                q.overdue_cut
            ],
            |r| {
                Ok(OpenGroup {
                    assignee: r.get(0)?,
                    open: r.get(1)?,
                    superseded: r.get(2)?,
                    overdue: r.get(3)?,
                })
            },
        )
    }

    fn ledger_counts(&self, q: &LedgerQuery) -> Result<LedgerCounts, StoreError> {
        let sql = format!(
            "SELECT count(answer_id), COALESCE(sum(answer_id IS NULL AND ack = 1), 0)
               FROM contracts
              WHERE sender = ?1 AND id >= {WINDOW_FIRST_ID} AND ts >= ?2
                AND (?3 IS NULL OR project = ?3)
                AND (answer_id IS NOT NULL OR ack = 1)"
        );
        Ok(self
            .row(
                "contracts",
                "ledger_counts",
                &sql,
                params![q.sender, q.since_ts, q.project],
                |r| {
                    Ok(LedgerCounts {
                        answered: r.get(0)?,
                        ack: r.get(1)?,
                    })
                },
            )?
            .unwrap_or_default())
    }

    fn ledger_rows(
        &self,
        q: &LedgerQuery,
        after: i64,
        limit: usize,
        open_only: bool,
    ) -> Result<Vec<ContractRow>, StoreError> {
        let (from, filter) = if open_only {
            (
                "contracts c INDEXED BY contracts_open",
                "AND c.answer_id IS NULL AND c.ack = 0",
            )
        } else {
            ("contracts c", "")
        };
        let sql = format!(
            "SELECT c.id, c.ts, c.sender, c.assignee, c.project, m.text, m.re, m.kind, m.wake,
                    c.ack, c.answer_id, a.ts, a.text, c.reaped_ts, c.reaped_reason, {OVERTAKEN}
               FROM {from}
               LEFT JOIN messages m ON m.id = c.id
               LEFT JOIN messages a ON a.id = c.answer_id
               LEFT JOIN contract_peers p ON p.sender = c.sender AND p.peer = c.assignee
              WHERE c.sender = ?1 AND c.ts >= ?2 AND (?3 IS NULL OR c.project = ?3)
                AND c.id > max(?4, {WINDOW_FIRST_ID} - 1) {filter}
              ORDER BY c.id LIMIT ?5"
        );
        self.rows(
            "contracts",
            "ledger_rows",
            &sql,
            params![q.sender, q.since_ts, q.project, after, sql_limit(limit)],
            contract_row,
        )
    }

    fn messages_citing(&self, card: i64, limit: usize) -> Result<Vec<Message>, StoreError> {
        let sql = format!(
            "SELECT {MSG_COLS} FROM messages WHERE id IN (
                 SELECT msg_id FROM message_refs WHERE card_id = ?1
                 ORDER BY msg_id DESC LIMIT ?2)
             ORDER BY id"
        );
        self.rows(
            "messages",
            "messages_citing",
            &sql,
            params![card, sql_limit(limit)],
            message_row,
        )
    }

    fn peer(&self, session: &str) -> Result<Option<Peer>, StoreError> {
        let row = self.row(
            "peers",
            "peer",
            "SELECT session, last_seen, delivered_up_to, data FROM peers WHERE session = ?1",
            [session],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )?;
        row.map(peer_row).transpose()
    }

    fn peers(&self) -> Result<Vec<Peer>, StoreError> {
        let rows: Vec<PeerRow> = self.rows(
            "peers",
            "peers",
            "SELECT session, last_seen, delivered_up_to, data FROM peers ORDER BY session",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )?;
        rows.into_iter().map(peer_row).collect()
    }

    fn card(&self, id: i64) -> Result<Option<Card>, StoreError> {
        let row = self.row(
            "cards",
            "card",
            "SELECT id, data FROM cards WHERE id = ?1",
            [id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        row.map(card_row).transpose()
    }

    fn cards(&self, filter: &CardFilter) -> Result<Vec<Card>, StoreError> {
        let mut sql = String::from("SELECT id, data FROM cards WHERE 1 = 1");
        let mut args: Vec<SqlValue> = Vec::new();
        if let Some(p) = &filter.project {
            args.push(SqlValue::Text(p.clone()));
            sql.push_str(&format!(" AND project = ?{}", args.len()));
        }
        if let Some(a) = &filter.assignee {
            args.push(SqlValue::Text(a.clone()));
            sql.push_str(&format!(" AND assignee = ?{}", args.len()));
        }
        if let Some(ids) = &filter.ids {
            sql.push_str(" AND id IN (");
            for (i, id) in ids.iter().enumerate() {
                args.push(SqlValue::Integer(*id));
                sql.push_str(&format!("{}?{}", if i == 0 { "" } else { "," }, args.len()));
            }
            sql.push(')');
        }
        if let Some(statuses) = &filter.statuses {
            sql.push_str(" AND status IN (");
            for (i, s) in statuses.iter().enumerate() {
                args.push(SqlValue::Text(s.as_str().to_string()));
                sql.push_str(&format!("{}?{}", if i == 0 { "" } else { "," }, args.len()));
            }
            sql.push(')');
        }
        sql.push_str(" ORDER BY id");
        let rows: Vec<(i64, String)> =
            self.rows("cards", "cards", &sql, params_from_iter(args), |r| {
                Ok((r.get(0)?, r.get(1)?))
            })?;
        rows.into_iter().map(card_row).collect()
    }

    fn events(&self, filter: &EventFilter) -> Result<Vec<Event>, StoreError> {
        let mut sql = format!("SELECT {EVENT_COLS} FROM events WHERE 1 = 1");
        let mut args: Vec<SqlValue> = Vec::new();
        if let Some(p) = &filter.project {
            args.push(SqlValue::Text(p.clone()));
            sql.push_str(&format!(" AND project = ?{}", args.len()));
        }
        if let Some(by) = &filter.by {
            args.push(SqlValue::Text(by.clone()));
            sql.push_str(&format!(" AND by_s = ?{}", args.len()));
        }
        if let Some(since) = filter.since {
            args.push(SqlValue::Integer(since));
            sql.push_str(&format!(" AND id > ?{}", args.len()));
        }
        if let Some(types) = &filter.types {
            // Exact names in one IN list; `presence.`-style prefixes as index ranges.
            let mut alts: Vec<String> = Vec::new();
            let mut exact: Vec<String> = Vec::new();
            for t in types {
                if t.ends_with('.') {
                    args.push(SqlValue::Text(t.clone()));
                    let lo = args.len();
                    match prefix_upper_bound(t) {
                        Some(hi) => {
                            args.push(SqlValue::Text(hi));
                            alts.push(format!("(type >= ?{lo} AND type < ?{})", args.len()));
                        }
                        None => alts.push(format!("type >= ?{lo}")),
                    }
                } else {
                    args.push(SqlValue::Text(t.clone()));
                    exact.push(format!("?{}", args.len()));
                }
            }
            if !exact.is_empty() {
                alts.push(format!("type IN ({})", exact.join(",")));
            }
            if alts.is_empty() {
                // An empty type list matches nothing.
                return Ok(Vec::new());
            }
            sql.push_str(&format!(" AND ({})", alts.join(" OR ")));
        }
        if let Some(task) = filter.task_id {
            args.push(SqlValue::Integer(task));
            let n = args.len();
            if filter.card_events_only {
                sql.push_str(&format!(" AND task_id = ?{n}"));
            } else {
                sql.push_str(&format!(
                    " AND (task_id = ?{n} OR id IN (SELECT event_id FROM event_refs WHERE card_id = ?{n}))"
                ));
            }
        }
        args.push(SqlValue::Integer(sql_limit(filter.limit)));
        sql.push_str(&format!(" ORDER BY id DESC LIMIT ?{}", args.len()));
        let rows: Vec<EventRow> =
            self.rows("events", "events", &sql, params_from_iter(args), |r| {
                EventRow::try_from(r)
            })?;
        let mut events = rows
            .into_iter()
            .map(event_row)
            .collect::<Result<Vec<_>, _>>()?;
        events.reverse();
        Ok(events)
    }

    fn latest_event_id(&self) -> Result<i64, StoreError> {
        self.sequence("events")
    }

    fn lessons(&self, scopes: &[String]) -> Result<Vec<Lesson>, StoreError> {
        if scopes.is_empty() {
            return Ok(Vec::new());
        }
        let marks: Vec<String> = (1..=scopes.len()).map(|i| format!("?{i}")).collect();
        let sql = format!(
            "SELECT id, scope, text, by_s, ts, project FROM lessons
               WHERE scope IN ({}) ORDER BY id",
            marks.join(",")
        );
        self.rows(
            "lessons",
            "lessons",
            &sql,
            params_from_iter(scopes.iter()),
            lesson_row,
        )
    }

    fn kv_prefix(&self, prefix: &str) -> Result<Vec<(String, Value)>, StoreError> {
        // Every key starting with `prefix` sorts in [prefix, prefix + U+10FFFF).
        let upper = format!("{prefix}\u{10FFFF}");
        let raw: Vec<(String, String)> = self.rows(
            "kv",
            "kv_prefix",
            "SELECT key, value FROM kv WHERE key >= ?1 AND key < ?2 ORDER BY key",
            [prefix, upper.as_str()],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        raw.into_iter().map(|(k, v)| decode_kv(k, &v)).collect()
    }

    fn kv(&self, key: &str) -> Result<Option<Value>, StoreError> {
        let raw: Option<String> = self.row(
            "kv",
            "kv",
            "SELECT value FROM kv WHERE key = ?1",
            [key],
            |r| r.get(0),
        )?;
        raw.map(|s| decode_json("kv", key, &s)).transpose()
    }

    fn op(&self, id: &str) -> Result<Option<OpRecord>, StoreError> {
        let row: Option<(String, i64, i64, String)> = self.row(
            "ops",
            "op",
            "SELECT id, ts, code, body FROM ops WHERE id = ?1",
            [id],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )?;
        row.map(|(id, ts, code, body)| decode_op(id, ts, code, &body))
            .transpose()
    }

    fn all_lessons(&self) -> Result<Vec<Lesson>, StoreError> {
        self.rows(
            "lessons",
            "all_lessons",
            "SELECT id, scope, text, by_s, ts, project FROM lessons ORDER BY id",
            [],
            lesson_row,
        )
    }

    fn counts(&self) -> Result<Counts, StoreError> {
        let count = |table: &'static str, sql: &str| -> Result<i64, StoreError> {
            Ok(self
                .row(table, "counts", sql, [], |r| r.get(0))?
                .unwrap_or(0))
        };
        let deleted = |name: &str| -> Result<i64, StoreError> {
            Ok(self
                .row(
                    "counters",
                    "counts",
                    "SELECT n FROM counters WHERE name = ?1",
                    [name],
                    |r| r.get(0),
                )?
                .unwrap_or(0))
        };
        Ok(Counts {
            messages: self.sequence("messages")? - deleted("messages_deleted")?,
            events: self.sequence("events")? - deleted("events_deleted")?,
            peers: count("peers", "SELECT count(*) FROM peers")?,
            cards: count("cards", "SELECT count(*) FROM cards")?,
            lessons: count("lessons", "SELECT count(*) FROM lessons")?,
        })
    }
}

impl WriteTx for SqlTx<'_> {
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
        let before = self.sequence("messages")?;
        let n = self.exec(
            "messages",
            "put_message",
            "INSERT OR IGNORE INTO messages(id, ts, from_s, to_s, project, text, re, kind, wake)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
            params![
                msg.id,
                msg.ts,
                msg.from,
                msg.to,
                msg.project,
                msg.text,
                msg.re,
                msg.kind,
                msg.wake
            ],
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
                "counters",
                "put_message",
                "UPDATE counters SET n = n + ?1 WHERE name = 'messages_deleted'",
                [shift],
            )?;
        }
        for card in refs {
            self.exec(
                "message_refs",
                "insert",
                "INSERT OR IGNORE INTO message_refs(card_id, msg_id) VALUES (?1, ?2)",
                params![card, msg.id],
            )?;
        }
        Ok(true)
    }

    fn insert_message(&mut self, msg: NewMessage, refs: &[i64]) -> Result<Message, StoreError> {
        let id: i64 = self.insert(
            "messages",
            "insert_message",
            "INSERT INTO messages(ts, from_s, to_s, project, text, re, kind, wake)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            params![
                msg.ts,
                msg.from,
                msg.to,
                msg.project,
                msg.text,
                msg.re,
                msg.kind,
                msg.wake
            ],
        )?;
        self.last_message = Some((id, msg.text.clone()));
        let stored = msg.stored_as(id);
        self.ledger_on_message(&stored)?;
        for card in refs {
            self.exec(
                "message_refs",
                "insert",
                "INSERT OR IGNORE INTO message_refs(card_id, msg_id) VALUES (?1, ?2)",
                params![card, id],
            )?;
        }
        Ok(stored)
    }

    fn put_peer(&mut self, peer: &Peer) -> Result<(), StoreError> {
        let data = encode("peers", peer)?;
        self.exec(
            "peers",
            "put_peer",
            "INSERT INTO peers(session, last_seen, delivered_up_to, data) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT(session) DO UPDATE SET
                 last_seen = excluded.last_seen,
                 data = excluded.data,
                 delivered_up_to = max(peers.delivered_up_to, excluded.delivered_up_to)",
            params![peer.session, peer.last_seen, peer.delivered_up_to, data],
        )?;
        Ok(())
    }

    fn raise_delivered(&mut self, session: &str, up_to: i64) -> Result<i64, StoreError> {
        // An unknown session gets a bare row (last_seen 0) so its ledger is never lost; the
        // hub's peer TTL keeps such a row out of `/peers`.
        let v: Option<i64> = self.row(
            "peers",
            "raise_delivered",
            "INSERT INTO peers(session, last_seen, delivered_up_to, data) VALUES (?1, 0, ?2, '{}')
             ON CONFLICT(session) DO UPDATE SET
                 delivered_up_to = max(peers.delivered_up_to, excluded.delivered_up_to)
             RETURNING delivered_up_to",
            params![session, up_to],
            |r| r.get(0),
        )?;
        v.ok_or_else(|| StoreError::db("peers: raise_delivered returned no row"))
    }

    fn delete_anonymous_peers_before(&mut self, last_seen: i64) -> Result<Vec<String>, StoreError> {
        self.rows(
            "peers",
            "delete_anonymous_peers_before",
            "DELETE FROM peers WHERE last_seen < ?1
                 AND coalesce(json_extract(data, '$.registered'), 0) = 0
             RETURNING session",
            [last_seen],
            |r| r.get(0),
        )
    }

    fn delete_peers_before(&mut self, last_seen: i64) -> Result<Vec<String>, StoreError> {
        self.rows(
            "peers",
            "delete_peers_before",
            "DELETE FROM peers WHERE last_seen < ?1 RETURNING session",
            [last_seen],
            |r| r.get(0),
        )
    }

    fn insert_card(&mut self, mut card: Card) -> Result<Card, StoreError> {
        // The id is only known after the insert, so the JSON is written in a second statement
        // (cards are rare writes; the JSON copy of the id is overridden by the column on read
        // anyway).
        let id: i64 = self.insert(
            "cards",
            "insert_card",
            "INSERT INTO cards(project, status, assignee, updated, data)
                 VALUES (?1, ?2, ?3, ?4, '{}')",
            params![
                card.project,
                card.status.as_str(),
                card.assignee,
                card.updated
            ],
        )?;
        card.id = id;
        let data = encode("cards", &card)?;
        self.exec(
            "cards",
            "insert_card",
            "UPDATE cards SET data = ?2 WHERE id = ?1",
            params![id, data],
        )?;
        Ok(card)
    }

    fn put_card(&mut self, card: &Card) -> Result<(), StoreError> {
        // An upsert: replacing a missing id inserts it (how an import keeps the original ids;
        // AUTOINCREMENT then continues above the highest id).
        let data = encode("cards", card)?;
        self.exec(
            "cards",
            "put_card",
            "INSERT INTO cards(id, project, status, assignee, updated, data)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)
             ON CONFLICT(id) DO UPDATE SET
                 project = excluded.project, status = excluded.status,
                 assignee = excluded.assignee, updated = excluded.updated, data = excluded.data",
            params![
                card.id,
                card.project,
                card.status.as_str(),
                card.assignee,
                card.updated,
                data
            ],
        )?;
        Ok(())
    }

    fn delete_card(&mut self, id: i64) -> Result<(), StoreError> {
        self.exec(
            "cards",
            "delete_card",
            "DELETE FROM cards WHERE id = ?1",
            [id],
        )?;
        Ok(())
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
            "events",
            "insert_event",
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
        for card in &event.refs {
            self.exec(
                "event_refs",
                "insert",
                "INSERT OR IGNORE INTO event_refs(card_id, event_id) VALUES (?1, ?2)",
                params![card, id],
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
        let id: i64 = self.insert(
            "lessons",
            "insert_lesson",
            "INSERT INTO lessons(scope, text, by_s, ts, project)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
            params![
                lesson.scope,
                lesson.text,
                lesson.by,
                lesson.ts,
                lesson.project
            ],
        )?;
        lesson.id = id;
        Ok(lesson)
    }

    fn set_kv(&mut self, key: &str, value: &Value) -> Result<(), StoreError> {
        let data = encode("kv", value)?;
        self.exec(
            "kv",
            "set_kv",
            "INSERT INTO kv(key, value) VALUES (?1, ?2)
             ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            params![key, data],
        )?;
        Ok(())
    }

    fn put_op(&mut self, op: &OpRecord) -> Result<(), StoreError> {
        let body = encode("ops", &op.body)?;
        self.exec(
            "ops",
            "put_op",
            // First final record wins; a pending marker (code 0) is replaced by the reply.
            "INSERT INTO ops(id, ts, code, body) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT(id) DO UPDATE SET ts = excluded.ts, code = excluded.code,
                 body = excluded.body
             WHERE ops.code = 0",
            params![op.id, op.ts, op.code, body],
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
            "UPDATE contracts SET reaped_ts = ?3, reaped_reason = ?4
               WHERE sender = ?1 AND id = ?2 AND reaped_ts IS NULL",
            params![sender, id, ts, reason],
        )?;
        Ok(n > 0)
    }

    fn prune(&mut self, before_ts: i64, ops_before_ts: i64) -> Result<PruneReport, StoreError> {
        // A direct message is read when its recipient's ledger has passed it; a recipient with
        // no peer row makes the subquery NULL, so its messages are kept (never read = never
        // pruned).
        let messages = self.exec(
            "messages",
            "prune",
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
            "events",
            "prune",
            "DELETE FROM events INDEXED BY events_ts WHERE ts < ?1 AND task_id IS NULL",
            [before_ts],
        )?;
        let ops = self.exec(
            "ops",
            "prune",
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

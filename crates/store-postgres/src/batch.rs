//! The writer's deferred inserts, sent as a few multi-row statements.
//!
//! Inside its locked batch the writer hands out message and event ids itself, so an insert whose
//! only answer was its id needs no answer at all: the row is kept here ([`Row`]) until the next
//! round trip. Then the rows gathered since the last command that must keep its place (a
//! savepoint command) go out together ([`statements`]), each table's rows as arrays (`unnest`):
//! a batch of sixteen `/send`s is one statement (their messages, open delivery entries and
//! events, [`ROWS`]) instead of forty-eight, and the counters are moved once per table instead
//! of once per row.
//!
//! Moving rows of different tables past each other is safe: no trigger or key makes one of these
//! inserts read another's table (the contract ledger is kept by passes after the commit, schema
//! version 8). Rows of one table keep their order; a message's delivery states end in
//! `delivery_open` as the last of them says, as one insert after another would.

use crate::{Origin, OwnedParam};

/// A row the writer inserts without waiting for an answer.
pub(crate) enum Row {
    /// A message (its id chosen by the writer) with the cards it mentions.
    Message(MessageRow),
    /// A message's `stored` state: its open entry, nothing logged.
    Stored(StoredRow),
    /// A delivery state of a message (any but `stored`).
    Delivery(DeliveryRow),
    /// An event (its id chosen by the writer) with the cards it mentions.
    Event(EventRow),
}

/// The columns of a `messages` row, and the cards it mentions (`message_refs`).
pub(crate) struct MessageRow {
    pub(crate) id: i64,
    pub(crate) ts: i64,
    pub(crate) from: String,
    pub(crate) to: String,
    pub(crate) project: String,
    pub(crate) text: String,
    pub(crate) re: Option<i64>,
    pub(crate) kind: Option<String>,
    pub(crate) wake: Option<bool>,
    pub(crate) refs: Vec<i64>,
}

/// A message opened as `stored` (`delivery_open` with `seq` 0: no logged state yet).
pub(crate) struct StoredRow {
    pub(crate) msg_id: i64,
    pub(crate) session: String,
}

/// The columns of a `delivery` row, and whether its state is terminal (closes the message's
/// `delivery_open` entry).
pub(crate) struct DeliveryRow {
    pub(crate) msg_id: i64,
    pub(crate) state: String,
    pub(crate) terminal: bool,
    pub(crate) ts: i64,
    pub(crate) session: String,
    pub(crate) instance: Option<String>,
    pub(crate) turn: Option<i64>,
    pub(crate) pid: Option<i64>,
    pub(crate) outcome: Option<String>,
    pub(crate) reason: Option<String>,
}

/// The columns of an `events` row, and the cards it mentions (`event_refs`).
pub(crate) struct EventRow {
    pub(crate) id: i64,
    pub(crate) ts: i64,
    pub(crate) kind: String,
    pub(crate) project: String,
    pub(crate) by: String,
    pub(crate) task_id: Option<i64>,
    pub(crate) data: String,
    pub(crate) refs: Vec<i64>,
}

/// One multi-row statement: its SQL, its array parameters, and what it is (for its error).
pub(crate) type Statement = (&'static str, Vec<OwnedParam>, Origin);

/// A batch's messages, their `stored` open entries and its events, in one statement (the three
/// tables have no trigger or key between them, and a `stored` is a message's first state, so
/// it goes out before the logged states): each insert with its tip and count counters moved
/// once for all its rows (and not at all when it has none), and the notifications (delivered at
/// COMMIT) for the other hubs' listeners: a JSON array of `[id, recipient]` in id order, a new
/// notification each time the JSON passes 6,000 bytes (one pair is at most 1,224: a
/// 200-character name, each character escaped), so none reaches PostgreSQL's 8,000. Any part
/// may be empty arrays.
const ROWS: &str = "WITH m AS (
     INSERT INTO messages(id, ts, from_s, to_s, project, text, re, kind, wake)
     SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::text[], $5::text[],
                          $6::text[], $7::bigint[], $8::text[], $9::boolean[])
     RETURNING id, to_s),
 mc AS (UPDATE counters
         SET n = CASE name WHEN 'messages_tip' THEN GREATEST(n, (SELECT max(id) FROM m))
                           ELSE n + (SELECT count(*) FROM m) END
         WHERE name IN ('messages_tip', 'messages_count') AND EXISTS (SELECT 1 FROM m)),
 o AS (INSERT INTO delivery_open(msg_id, session, seq)
     SELECT u.msg, u.sess, 0 FROM unnest($10::bigint[], $11::text[]) AS u(msg, sess)
     ON CONFLICT (msg_id) DO NOTHING),
 e AS (
     INSERT INTO events(id, ts, type, project, by_s, task_id, data)
     SELECT * FROM unnest($12::bigint[], $13::bigint[], $14::text[], $15::text[], $16::text[],
                          $17::bigint[], $18::text[])
     RETURNING id),
 ec AS (UPDATE counters
     SET n = CASE name WHEN 'events_tip' THEN GREATEST(n, (SELECT max(id) FROM e))
                       ELSE n + (SELECT count(*) FROM e) END
     WHERE name IN ('events_tip', 'events_count') AND EXISTS (SELECT 1 FROM e))
 SELECT pg_notify('trantor_msg', json_agg(json_build_array(id, to_s) ORDER BY id)::text)
   FROM (SELECT id, to_s,
                sum(octet_length(to_json(to_s)::text) + 24) OVER (ORDER BY id) / 6000 AS part
           FROM m) parts
  GROUP BY part ORDER BY part";

/// Card references of messages or events: `(card, row id)` pairs.
const MESSAGE_REFS: &str = "INSERT INTO message_refs(card_id, msg_id)
 SELECT * FROM unnest($1::bigint[], $2::bigint[]) ON CONFLICT DO NOTHING";
const EVENT_REFS: &str = "INSERT INTO event_refs(card_id, event_id)
 SELECT * FROM unnest($1::bigint[], $2::bigint[]) ON CONFLICT DO NOTHING";

/// The delivery states in order (`seq` ascending), then each message's open entry as its last
/// state says: kept (pointing at that state) or, for the messages whose last state is terminal
/// (`$10`), removed.
const DELIVERY: &str = "WITH d AS (
     INSERT INTO delivery(msg_id, state, ts, session, instance, turn, pid, outcome, reason)
     SELECT * FROM unnest($1::bigint[], $2::text[], $3::bigint[], $4::text[], $5::text[],
                          $6::bigint[], $7::bigint[], $8::text[], $9::text[])
     RETURNING seq, msg_id, session),
 last AS (SELECT DISTINCT ON (msg_id) msg_id, session, seq FROM d ORDER BY msg_id, seq DESC),
 gone AS (DELETE FROM delivery_open WHERE msg_id = ANY($10::bigint[]))
 INSERT INTO delivery_open(msg_id, session, seq)
 SELECT msg_id, session, seq FROM last WHERE msg_id <> ALL($10::bigint[])
 ON CONFLICT (msg_id) DO UPDATE SET seq = excluded.seq";

/// The array parameters of `rows`: one array per named field, in row order.
macro_rules! columns {
    ($rows:expr; $($field:ident),+) => {
        vec![$(Box::new($rows.iter().map(|r| r.$field.clone()).collect::<Vec<_>>()) as OwnedParam),+]
    };
}

/// The `(card, row id)` pairs of rows that mention cards, as `INSERT … unnest` into `sql`.
fn refs<'a>(
    rows: impl Iterator<Item = (i64, &'a [i64])>,
    sql: &'static str,
    origin: Origin,
) -> Option<Statement> {
    let (card, row): (Vec<i64>, Vec<i64>) = rows
        .flat_map(|(id, cards)| cards.iter().map(move |&c| (c, id)))
        .unzip();
    (!card.is_empty()).then(|| {
        (
            sql,
            vec![Box::new(card) as OwnedParam, Box::new(row)],
            origin,
        )
    })
}

/// The statements that insert `rows`: the messages, their `stored` open entries and the events
/// in one ([`ROWS`]), then the messages' card references, the other delivery states and the
/// events' card references.
pub(crate) fn statements(rows: Vec<Row>) -> Vec<Statement> {
    let (mut m, mut st, mut d, mut e) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for row in rows {
        match row {
            Row::Message(r) => m.push(r),
            Row::Stored(r) => st.push(r),
            Row::Delivery(r) => d.push(r),
            Row::Event(r) => e.push(r),
        }
    }
    let mut out = Vec::new();
    if !(m.is_empty() && st.is_empty() && e.is_empty()) {
        let mut params = columns!(m; id, ts, from, to, project, text, re, kind, wake);
        params.extend(columns!(st; msg_id, session));
        params.extend(columns!(e; id, ts, kind, project, by, task_id, data));
        out.push((ROWS, params, ("messages/events", "insert_rows")));
    }
    out.extend(refs(
        m.iter().map(|r| (r.id, r.refs.as_slice())),
        MESSAGE_REFS,
        ("message_refs", "insert"),
    ));
    if !d.is_empty() {
        // Per message, whether its last state here is terminal.
        let mut last: Vec<(i64, bool)> = Vec::new();
        for r in &d {
            match last.iter_mut().find(|(id, _)| *id == r.msg_id) {
                Some(l) => l.1 = r.terminal,
                None => last.push((r.msg_id, r.terminal)),
            }
        }
        let closed: Vec<i64> = last.iter().filter_map(|&(id, t)| t.then_some(id)).collect();
        let mut params =
            columns!(d; msg_id, state, ts, session, instance, turn, pid, outcome, reason);
        params.push(Box::new(closed));
        out.push((DELIVERY, params, ("delivery", "append")));
    }
    out.extend(refs(
        e.iter().map(|r| (r.id, r.refs.as_slice())),
        EVENT_REFS,
        ("event_refs", "insert"),
    ));
    out
}

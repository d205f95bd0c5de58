//! The writer's deferred inserts, sent as one multi-row statement per table.
//!
//! Inside its locked batch the writer hands out message and event ids itself, so an insert whose
//! only answer was its id needs no answer at all: the row is kept here ([`Row`]) until the next
//! round trip. Then the rows gathered since the last command that must keep its place (a
//! savepoint command) go out as one statement per table ([`statements`]), each carrying its
//! rows as arrays (`unnest`): a batch of sixteen `/send`s is three inserts (messages, delivery
//! states, events) instead of forty-eight, the counters are moved once per statement instead of
//! once per row, and the contract ledger's trigger runs once over the set (schema version 5).
//!
//! Moving rows of different tables past each other is safe: no trigger or key makes one of these
//! inserts read another's table, except the ledger trigger reading `messages`, whose rows keep
//! their order in their own statement. Rows of one table keep their order; a message's delivery
//! states end in `delivery_open` as the last of them says, as one insert after another would.

use crate::{OwnedParam, Origin};

/// A row the writer inserts without waiting for an answer.
pub(crate) enum Row {
    /// A message (its id chosen by the writer) with the cards it mentions.
    Message {
        id: i64,
        ts: i64,
        from: String,
        to: String,
        project: String,
        text: String,
        re: Option<i64>,
        kind: Option<String>,
        wake: Option<bool>,
        refs: Vec<i64>,
    },
    /// A delivery state of a message.
    Delivery {
        msg_id: i64,
        state: String,
        terminal: bool,
        ts: i64,
        session: String,
        instance: Option<String>,
        turn: Option<i64>,
        pid: Option<i64>,
        outcome: Option<String>,
        reason: Option<String>,
    },
    /// An event (its id chosen by the writer) with the cards it mentions.
    Event {
        id: i64,
        ts: i64,
        kind: String,
        project: String,
        by: String,
        task_id: Option<i64>,
        data: String,
        refs: Vec<i64>,
    },
}

/// One multi-row statement: its SQL, its array parameters, and what it is (for its error).
pub(crate) type Statement = (&'static str, Vec<OwnedParam>, Origin);

/// The messages, the tip and count counters once for all of them, and one notification each
/// (in id order; delivered at COMMIT) for the other hubs' listeners.
const MESSAGES: &str = "WITH m AS (
     INSERT INTO messages(id, ts, from_s, to_s, project, text, re, kind, wake)
     SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::text[], $5::text[],
                          $6::text[], $7::bigint[], $8::text[], $9::boolean[])
     RETURNING id, to_s),
 c AS (UPDATE counters
         SET n = CASE name WHEN 'messages_tip' THEN GREATEST(n, (SELECT max(id) FROM m))
                           ELSE n + (SELECT count(*) FROM m) END
         WHERE name IN ('messages_tip', 'messages_count'))
 SELECT pg_notify('trantor_msg', id::text || ' ' || to_s) FROM m ORDER BY id";

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

/// The events, with the tip and count counters once for all of them.
const EVENTS: &str = "WITH e AS (
     INSERT INTO events(id, ts, type, project, by_s, task_id, data)
     SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::text[], $5::text[],
                          $6::bigint[], $7::text[])
     RETURNING id)
 UPDATE counters
     SET n = CASE name WHEN 'events_tip' THEN GREATEST(n, (SELECT max(id) FROM e))
                       ELSE n + (SELECT count(*) FROM e) END
     WHERE name IN ('events_tip', 'events_count') AND EXISTS (SELECT 1 FROM e)";

/// Columns of one table's rows, gathered in order.
#[derive(Default)]
struct Messages {
    id: Vec<i64>,
    ts: Vec<i64>,
    from: Vec<String>,
    to: Vec<String>,
    project: Vec<String>,
    text: Vec<String>,
    re: Vec<Option<i64>>,
    kind: Vec<Option<String>>,
    wake: Vec<Option<bool>>,
}

#[derive(Default)]
struct Deliveries {
    msg_id: Vec<i64>,
    state: Vec<String>,
    ts: Vec<i64>,
    session: Vec<String>,
    instance: Vec<Option<String>>,
    turn: Vec<Option<i64>>,
    pid: Vec<Option<i64>>,
    outcome: Vec<Option<String>>,
    reason: Vec<Option<String>>,
    /// Per message, whether its last state so far is terminal.
    terminal: Vec<(i64, bool)>,
}

#[derive(Default)]
struct Events {
    id: Vec<i64>,
    ts: Vec<i64>,
    kind: Vec<String>,
    project: Vec<String>,
    by: Vec<String>,
    task_id: Vec<Option<i64>>,
    data: Vec<String>,
}

/// `(card, row id)` pairs.
#[derive(Default)]
struct Refs {
    card: Vec<i64>,
    row: Vec<i64>,
}

impl Refs {
    fn add(&mut self, row: i64, cards: Vec<i64>) {
        for c in cards {
            self.card.push(c);
            self.row.push(row);
        }
    }

    fn statement(self, sql: &'static str, origin: Origin) -> Option<Statement> {
        (!self.card.is_empty()).then(|| {
            (
                sql,
                vec![Box::new(self.card) as OwnedParam, Box::new(self.row)],
                origin,
            )
        })
    }
}

/// The statements that insert `rows`: at most one per table, messages first (their trigger
/// keeps the contract ledger), then their card references, the delivery states, the events and
/// theirs.
pub(crate) fn statements(rows: Vec<Row>) -> Vec<Statement> {
    let (mut m, mut mr, mut d, mut e, mut er) = (
        Messages::default(),
        Refs::default(),
        Deliveries::default(),
        Events::default(),
        Refs::default(),
    );
    for row in rows {
        match row {
            Row::Message {
                id,
                ts,
                from,
                to,
                project,
                text,
                re,
                kind,
                wake,
                refs,
            } => {
                m.id.push(id);
                m.ts.push(ts);
                m.from.push(from);
                m.to.push(to);
                m.project.push(project);
                m.text.push(text);
                m.re.push(re);
                m.kind.push(kind);
                m.wake.push(wake);
                mr.add(id, refs);
            }
            Row::Delivery {
                msg_id,
                state,
                terminal,
                ts,
                session,
                instance,
                turn,
                pid,
                outcome,
                reason,
            } => {
                d.msg_id.push(msg_id);
                d.state.push(state);
                match d.terminal.iter_mut().find(|(id, _)| *id == msg_id) {
                    Some(last) => last.1 = terminal,
                    None => d.terminal.push((msg_id, terminal)),
                }
                d.ts.push(ts);
                d.session.push(session);
                d.instance.push(instance);
                d.turn.push(turn);
                d.pid.push(pid);
                d.outcome.push(outcome);
                d.reason.push(reason);
            }
            Row::Event {
                id,
                ts,
                kind,
                project,
                by,
                task_id,
                data,
                refs,
            } => {
                e.id.push(id);
                e.ts.push(ts);
                e.kind.push(kind);
                e.project.push(project);
                e.by.push(by);
                e.task_id.push(task_id);
                e.data.push(data);
                er.add(id, refs);
            }
        }
    }
    let mut out = Vec::new();
    if !m.id.is_empty() {
        let params: Vec<OwnedParam> = vec![
            Box::new(m.id),
            Box::new(m.ts),
            Box::new(m.from),
            Box::new(m.to),
            Box::new(m.project),
            Box::new(m.text),
            Box::new(m.re),
            Box::new(m.kind),
            Box::new(m.wake),
        ];
        out.push((MESSAGES, params, ("messages", "insert_message")));
    }
    out.extend(mr.statement(MESSAGE_REFS, ("message_refs", "insert")));
    if !d.msg_id.is_empty() {
        let closed: Vec<i64> = d
            .terminal
            .iter()
            .filter_map(|&(id, t)| t.then_some(id))
            .collect();
        let params: Vec<OwnedParam> = vec![
            Box::new(d.msg_id),
            Box::new(d.state),
            Box::new(d.ts),
            Box::new(d.session),
            Box::new(d.instance),
            Box::new(d.turn),
            Box::new(d.pid),
            Box::new(d.outcome),
            Box::new(d.reason),
            Box::new(closed),
        ];
        out.push((DELIVERY, params, ("delivery", "append")));
    }
    if !e.id.is_empty() {
        let params: Vec<OwnedParam> = vec![
            Box::new(e.id),
            Box::new(e.ts),
            Box::new(e.kind),
            Box::new(e.project),
            Box::new(e.by),
            Box::new(e.task_id),
            Box::new(e.data),
        ];
        out.push((EVENTS, params, ("events", "insert_event")));
    }
    out.extend(er.statement(EVENT_REFS, ("event_refs", "insert")));
    out
}

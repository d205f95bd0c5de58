//! The SQL text of each statement the shared code leaves to the dialect ([`Dialect`]), in
//! PostgreSQL's: parameters `$N`, lists as arrays, counts cast to `BIGINT`, counters kept in
//! the same statement as the rows they count, and sequences moved past imported ids.

use std::borrow::Cow;

use trantor_proto::BROADCAST;
use trantor_store::CostBy;
use trantor_store::sql::{Dialect, MSG_COLS};

/// The lowest message id a window starting at `$2` can hold: the smallest id among the first
/// messages in ts order at or after it (two probes of the ts index). Ids are assigned in commit
/// order under the write lock, so a sender's window is the id range from here.
const WINDOW_FIRST_ID: &str = "COALESCE((SELECT min(id) FROM messages WHERE ts =
     (SELECT min(ts) FROM messages WHERE ts >= $2)), 9223372036854775807)";

/// The SQL of `stmt`.
pub(crate) fn text(stmt: Dialect) -> Cow<'static, str> {
    match stmt {
        Dialect::Tip => "SELECT n FROM counters WHERE name = 'messages_tip'".into(),
        Dialect::LatestEventId => "SELECT n FROM counters WHERE name = 'events_tip'".into(),
        Dialect::MessagesFor => messages_for().into(),
        Dialect::DirectMessagesInvolving => direct_messages_involving().into(),
        Dialect::UndeliveredDirect => undelivered_direct().into(),
        Dialect::DispatchersSince => format!(
            "SELECT DISTINCT from_s FROM messages
               WHERE ts >= $1 AND to_s <> '{BROADCAST}' ORDER BY from_s"
        )
        .into(),
        Dialect::LedgerSenders => LEDGER_SENDERS.into(),
        Dialect::LedgerTally => LEDGER_TALLY.into(),
        Dialect::LedgerEdge => ledger_edge().into(),
        Dialect::LedgerCountOpen => LEDGER_COUNT_OPEN.into(),
        Dialect::LedgerRows { open_only } => ledger_rows(open_only).into(),
        Dialect::LedgerUnreaped => ledger_unreaped().into(),
        Dialect::LedgerOpenIds => LEDGER_OPEN_IDS.into(),
        Dialect::LedgerRow => ledger_row().into(),
        Dialect::EventsSelect => EVENTS_SELECT.into(),
        Dialect::Counts => COUNTS.into(),
        Dialect::CostSelect(by) => cost_select(by).into(),
        Dialect::PutPeer => PUT_PEER.into(),
        Dialect::RaiseDelivered => RAISE_DELIVERED.into(),
        Dialect::DeleteAnonymousPeersBefore => DELETE_ANONYMOUS_PEERS.into(),
        Dialect::ReserveCardId => "SELECT nextval(pg_get_serial_sequence('cards', 'id'))".into(),
        Dialect::PutCard => PUT_CARD.into(),
        Dialect::RecordTurn => RECORD_TURN.into(),
    }
}

fn messages_for() -> String {
    // Two ordered index ranges (direct and broadcast), each cut at the page size, merged.
    format!(
        "SELECT {MSG_COLS} FROM (
           (SELECT {MSG_COLS} FROM messages
              WHERE to_s = $1 AND $1 <> '{BROADCAST}' AND from_s <> $1 AND id > $2
              ORDER BY id LIMIT $3)
           UNION ALL
           (SELECT {MSG_COLS} FROM messages
              WHERE to_s = '{BROADCAST}' AND from_s <> $1 AND id > $2
              ORDER BY id LIMIT $3)
         ) m ORDER BY id LIMIT $3"
    )
}

fn direct_messages_involving() -> String {
    format!(
        "SELECT {MSG_COLS} FROM messages
           WHERE from_s = $1 AND ts >= $2 AND to_s <> '{BROADCAST}'
         UNION
         SELECT {MSG_COLS} FROM messages
           WHERE to_s = $1 AND ts >= $2 AND $1 <> '{BROADCAST}'
         ORDER BY id"
    )
}

fn undelivered_direct() -> String {
    format!(
        "SELECT {MSG_COLS} FROM messages m
           WHERE ts >= $1 AND ts <= $2
             AND to_s <> '{BROADCAST}' AND to_s NOT LIKE 'hub:%' AND from_s NOT LIKE 'hub:%'
             AND (wake IS NULL OR wake)
             AND (kind IS NULL OR kind NOT IN ('status', 'receipt'))
             AND id > COALESCE(
                   (SELECT p.delivered_up_to FROM peers p WHERE p.session = m.to_s), 0)
         ORDER BY id LIMIT $3"
    )
}

const LEDGER_SENDERS: &str = "SELECT DISTINCT sender FROM contracts
   WHERE answer_id IS NULL AND NOT ack AND ts >= $1 ORDER BY sender";

/// The id range of the window's first tally bucket (`$4`): the rows a read counts one by one.
const EDGE: &str = "e AS (SELECT min(min_id) AS lo, max(max_id) AS hi FROM contract_tally
                   WHERE sender = $1 AND bucket = $4)";

/// The window's first bucket's contracts from `$2` on, with `{cols}` selected.
fn edge_rows(cols: &str) -> String {
    format!(
        "SELECT {cols} FROM contracts c, e
          WHERE c.sender = $1 AND c.id BETWEEN e.lo AND e.hi AND c.ts >= $2 AND c.ts < $5
            AND ($3::TEXT IS NULL OR c.project = $3)"
    )
}

/// The window's open tally rows of the sender ([`trantor_store::tally`] folds and plans them).
const LEDGER_TALLY: &str = "SELECT assignee, bucket, open, ack, answered, min_id, max_id
   FROM contract_tally WHERE sender = $1 AND bucket >= $2 AND ($3::TEXT IS NULL OR project = $3)";

fn ledger_edge() -> String {
    let edge = edge_rows(
        "c.assignee, (c.answer_id IS NULL AND NOT c.ack)::INT AS o,
         (c.answer_id IS NOT NULL)::INT AS a, (c.answer_id IS NULL AND c.ack)::INT AS k",
    );
    format!(
        "WITH {EDGE} SELECT assignee, sum(o)::BIGINT, sum(a)::BIGINT, sum(k)::BIGINT
           FROM ({edge}) t GROUP BY assignee"
    )
}

/// One range of an assignee's open contracts, counted on the open index.
const LEDGER_COUNT_OPEN: &str = "SELECT count(*) FROM contracts c
   WHERE c.sender = $1 AND c.assignee = $2 AND c.answer_id IS NULL AND NOT c.ack
     AND c.ts >= $3 AND c.ts < $4 AND c.id < $5 AND ($6::TEXT IS NULL OR c.project = $6)";

/// The columns of a ledger row ([`trantor_store::rows::contract`]), over `contracts c` and
/// [`CONTRACT_JOINS`]; the last says whether later traffic with the assignee overtook the
/// contract (supersession).
const CONTRACT_COLS: &str = "c.id, c.ts, c.sender, c.assignee, c.project, m.text, m.re, m.kind,
    m.wake, c.ack, c.answer_id, a.ts, a.text, c.reaped_ts, c.reaped_reason, c.id < GREATEST(COALESCE(p.last_reply, 0), COALESCE(p.last_answered, 0))";

/// What a ledger row joins: its message, its answer, the pair's supersession marks.
const CONTRACT_JOINS: &str = "LEFT JOIN messages m ON m.id = c.id
    LEFT JOIN messages a ON a.id = c.answer_id
    LEFT JOIN contract_peers p ON p.sender = c.sender AND p.peer = c.assignee";

const LEDGER_OPEN_IDS: &str = "SELECT c.ts, c.id FROM contracts c
   WHERE c.sender = $1 AND c.assignee = $3 AND c.answer_id IS NULL AND NOT c.ack
     AND c.ts >= $2 AND (c.ts, c.id) > ($4, $5)
   ORDER BY c.ts, c.id LIMIT $6";

fn ledger_row() -> String {
    format!(
        "SELECT {CONTRACT_COLS} FROM contracts c {CONTRACT_JOINS} WHERE c.sender = $1 AND c.id = $2"
    )
}

fn ledger_unreaped() -> String {
    format!(
        "SELECT {CONTRACT_COLS}
           FROM contracts c {CONTRACT_JOINS}
          WHERE c.sender = $1 AND c.assignee = $3 AND c.answer_id IS NULL AND NOT c.ack
            AND c.ts >= $2 AND (c.ts, c.id) > ($4, $5) AND c.reaped_ts IS NULL
          ORDER BY c.ts, c.id LIMIT $6"
    )
}

fn ledger_rows(open_only: bool) -> String {
    let filter = if open_only {
        "AND c.answer_id IS NULL AND NOT c.ack"
    } else {
        ""
    };
    format!(
        "SELECT {CONTRACT_COLS}
           FROM contracts c {CONTRACT_JOINS}
          WHERE c.sender = $1 AND c.ts >= $2 AND ($3::TEXT IS NULL OR c.project = $3)
            AND c.id > GREATEST($4, {WINDOW_FIRST_ID} - 1) {filter}
          ORDER BY c.id LIMIT $5"
    )
}

/// Every event keeps its own text here: no message reference ([`trantor_store::rows::event`]).
const EVENTS_SELECT: &str = "SELECT id, ts, type, project, by_s, data, NULL::BIGINT, NULL::TEXT
   FROM events WHERE 1 = 1";

const COUNTS: &str = "SELECT
   (SELECT n FROM counters WHERE name = 'messages_count'),
   (SELECT n FROM counters WHERE name = 'events_count'),
   (SELECT count(*) FROM peers),
   (SELECT count(*) FROM cards),
   (SELECT count(*) FROM lessons)";

fn cost_select(by: CostBy) -> String {
    let key = match by {
        CostBy::Total => "''::text",
        CostBy::Card => "card::text",
        CostBy::Seat => "session::text",
        CostBy::Day => "(ts / 86400000)::text",
        CostBy::Credential => "credential::text",
    };
    format!(
        "SELECT {key}, COALESCE(SUM(input), 0)::BIGINT, COALESCE(SUM(output), 0)::BIGINT,
                COALESCE(SUM(cache_read), 0)::BIGINT, COALESCE(SUM(cache_write), 0)::BIGINT,
                COALESCE(SUM(usd), 0)::DOUBLE PRECISION, count(*)::BIGINT,
                COALESCE(SUM(CASE WHEN usd IS NULL THEN 1 ELSE 0 END), 0)::BIGINT,
                COALESCE(BOOL_OR(estimated), false)
           FROM turns WHERE 1 = 1"
    )
}

const PUT_PEER: &str = "INSERT INTO peers(session, last_seen, delivered_up_to, data)
     VALUES ($1, $2, $3, $4)
 ON CONFLICT(session) DO UPDATE SET
     last_seen = excluded.last_seen,
     data = excluded.data,
     delivered_up_to = GREATEST(peers.delivered_up_to, excluded.delivered_up_to)";

const RAISE_DELIVERED: &str = "INSERT INTO peers(session, last_seen, delivered_up_to, data)
     VALUES ($1, 0, $2, '{}')
 ON CONFLICT(session) DO UPDATE SET
     delivered_up_to = GREATEST(peers.delivered_up_to, excluded.delivered_up_to)
 RETURNING delivered_up_to";

const DELETE_ANONYMOUS_PEERS: &str = "DELETE FROM peers WHERE last_seen < $1
     AND COALESCE((data::jsonb) -> 'registered', 'null'::jsonb)
         IN ('null'::jsonb, 'false'::jsonb, '0'::jsonb)
 RETURNING session";

/// The card, and the id sequence moved past its id (an imported card keeps its id, and a later
/// reserved id never reuses it).
const PUT_CARD: &str = "WITH c AS (
     INSERT INTO cards(id, project, status, assignee, updated, data)
     VALUES ($1, $2, $3, $4, $5, $6)
     ON CONFLICT(id) DO UPDATE SET
         project = excluded.project, status = excluded.status,
         assignee = excluded.assignee, updated = excluded.updated, data = excluded.data)
 SELECT setval('cards_id_seq', $1::bigint) FROM cards_id_seq
  WHERE $1::bigint >= CASE WHEN is_called THEN last_value + 1 ELSE last_value END";

const RECORD_TURN: &str = "INSERT INTO turns(session, instance, turn, ts, project, card, agent,
     model, credential, outcome, has_usage, input, output, cache_read, cache_write, usd,
     estimated, source)
 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18)
 ON CONFLICT (session, instance, turn) DO NOTHING";

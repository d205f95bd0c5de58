//! The SQL text of each statement the shared code leaves to the dialect ([`Dialect`]), in
//! SQLite's: parameters `?N`, `INDEXED BY` where the planner, without statistics, would pick a
//! worse index, and counts kept as AUTOINCREMENT marks.

use std::borrow::Cow;

use trantor_proto::BROADCAST;
use trantor_store::CostBy;
use trantor_store::sql::{Dialect, MSG_COLS};

/// The lowest message id a window starting at `?2` can hold: the first message in ts order at
/// or after it (one probe of the ts index). Ids are assigned in commit order and ts is taken
/// when a write is made, so a sender's window is the id range from here.
const WINDOW_FIRST_ID: &str = "COALESCE((SELECT id FROM messages INDEXED BY messages_ts
     WHERE ts >= ?2 ORDER BY ts, id LIMIT 1), 9223372036854775807)";

/// The SQL of `stmt`.
pub(crate) fn text(stmt: Dialect) -> Cow<'static, str> {
    match stmt {
        Dialect::Tip => "SELECT seq FROM sqlite_sequence WHERE name = 'messages'".into(),
        Dialect::LatestEventId => "SELECT seq FROM sqlite_sequence WHERE name = 'events'".into(),
        Dialect::MessagesFor => messages_for().into(),
        Dialect::DirectMessagesInvolving => direct_messages_involving().into(),
        Dialect::UndeliveredDirect => undelivered_direct().into(),
        Dialect::DispatchersSince => dispatchers_since().into(),
        Dialect::LedgerSenders => LEDGER_SENDERS.into(),
        Dialect::LedgerTally => LEDGER_TALLY.into(),
        Dialect::LedgerEdge => ledger_edge().into(),
        Dialect::LedgerCountOpen => LEDGER_COUNT_OPEN.into(),
        Dialect::LedgerRows { open_only } => ledger_rows(open_only).into(),
        Dialect::LedgerUnreaped => ledger_unreaped().into(),
        Dialect::LedgerOpenIds => LEDGER_OPEN_IDS.into(),
        Dialect::LedgerRow => ledger_row().into(),
        Dialect::EventsSelect => format!("SELECT {EVENT_COLS} FROM events WHERE 1 = 1").into(),
        Dialect::Counts => COUNTS.into(),
        Dialect::CostSelect(by) => cost_select(by).into(),
        Dialect::PutPeer => PUT_PEER.into(),
        Dialect::RaiseDelivered => RAISE_DELIVERED.into(),
        Dialect::DeleteAnonymousPeersBefore => DELETE_ANONYMOUS_PEERS.into(),
        Dialect::ReserveCardId => RESERVE_CARD_ID.into(),
        Dialect::PutCard => PUT_CARD.into(),
        Dialect::RecordTurn => RECORD_TURN.into(),
    }
}

fn messages_for() -> String {
    // Two ordered index ranges (direct: to_s = session; broadcast: to_s = 'all') merged by id,
    // so the cost is the page size, not the mailbox size. `?1 != 'all'` keeps a session
    // literally named `all` from reading the broadcasts twice.
    format!(
        "SELECT {MSG_COLS} FROM messages
           WHERE to_s = ?1 AND ?1 != '{BROADCAST}' AND from_s != ?1 AND id > ?2
         UNION ALL
         SELECT {MSG_COLS} FROM messages
           WHERE to_s = '{BROADCAST}' AND from_s != ?1 AND id > ?2
         ORDER BY id LIMIT ?3"
    )
}

fn direct_messages_involving() -> String {
    // Sent by the session: the (from_s, ts) index. Sent to it: its (to_s, id) range, starting
    // at the lowest id of any message in the window — found on the ts index, so it costs the
    // window's traffic, not the store's history (walking the whole mailbox made `/contracts`
    // grow with every message ever received). The ts filter still applies to each row, so the
    // answer is exact even where ids and ts are not in the same order. A (to_s, ts) index would
    // do the same but cost every insert one more index page. A self-addressed message matches
    // both arms, hence UNION rather than UNION ALL.
    format!(
        "SELECT {MSG_COLS} FROM messages
           WHERE from_s = ?1 AND ts >= ?2 AND to_s != '{BROADCAST}'
         UNION
         SELECT {MSG_COLS} FROM messages INDEXED BY messages_to_id
           WHERE to_s = ?1 AND ?1 != '{BROADCAST}' AND ts >= ?2
             AND id >= (SELECT min(id) FROM messages INDEXED BY messages_ts WHERE ts >= ?2)
         ORDER BY id"
    )
}

fn undelivered_direct() -> String {
    // The ts range is small (the duty window); the ledger lookup is one primary-key probe per
    // row.
    format!(
        "SELECT {MSG_COLS} FROM messages INDEXED BY messages_ts
           WHERE ts >= ?1 AND ts <= ?2
             AND to_s != '{BROADCAST}' AND to_s NOT LIKE 'hub:%' AND from_s NOT LIKE 'hub:%'
             AND (wake IS NULL OR wake != 0)
             AND (kind IS NULL OR kind NOT IN ('status', 'receipt'))
             AND id > COALESCE(
                   (SELECT delivered_up_to FROM peers WHERE session = messages.to_s), 0)
         ORDER BY id LIMIT ?3"
    )
}

fn dispatchers_since() -> String {
    // Without ANALYZE statistics the planner prefers walking the (from_s, ts) index for the
    // DISTINCT, i.e. every message; the ts range is the small side.
    format!(
        "SELECT DISTINCT from_s FROM messages INDEXED BY messages_ts
           WHERE ts >= ?1 AND to_s != '{BROADCAST}' ORDER BY from_s"
    )
}

const LEDGER_SENDERS: &str = "SELECT DISTINCT sender FROM contracts INDEXED BY contracts_open
   WHERE answer_id IS NULL AND ack = 0 AND ts >= ?1 ORDER BY sender";

/// The id range of the window's first tally bucket (`?4`): the rows a read counts one by one.
const EDGE: &str = "e AS (SELECT min(min_id) AS lo, max(max_id) AS hi FROM contract_tally
                   WHERE sender = ?1 AND bucket = ?4)";

/// The window's first bucket's contracts from `?2` on, with `{cols}` selected.
fn edge_rows(cols: &str) -> String {
    format!(
        "SELECT {cols} FROM contracts c, e
          WHERE c.sender = ?1 AND c.id BETWEEN e.lo AND e.hi AND c.ts >= ?2 AND c.ts < ?5
            AND (?3 IS NULL OR c.project = ?3)"
    )
}

/// The window's open tally rows of the sender ([`trantor_store::tally`] folds and plans them).
const LEDGER_TALLY: &str = "SELECT assignee, bucket, open, ack, answered, min_id, max_id
   FROM contract_tally WHERE sender = ?1 AND bucket >= ?2 AND (?3 IS NULL OR project = ?3)";

fn ledger_edge() -> String {
    let edge = edge_rows(
        "c.assignee, c.answer_id IS NULL AND c.ack = 0 AS o, c.answer_id IS NOT NULL AS a,
         c.answer_id IS NULL AND c.ack != 0 AS k",
    );
    format!("WITH {EDGE} SELECT assignee, sum(o), sum(a), sum(k) FROM ({edge}) GROUP BY assignee")
}

/// One range of an assignee's open contracts, counted on the open index.
const LEDGER_COUNT_OPEN: &str = "SELECT count(*) FROM contracts c INDEXED BY contracts_open
   WHERE c.sender = ?1 AND c.assignee = ?2 AND c.answer_id IS NULL AND c.ack = 0
     AND c.ts >= ?3 AND c.ts < ?4 AND c.id < ?5 AND (?6 IS NULL OR c.project = ?6)";

/// The columns of a ledger row ([`trantor_store::rows::contract`]), over `contracts c` and
/// [`CONTRACT_JOINS`]; the last says whether later traffic with the assignee overtook the
/// contract (supersession).
const CONTRACT_COLS: &str = "c.id, c.ts, c.sender, c.assignee, c.project, m.text, m.re, m.kind,
    m.wake, c.ack, c.answer_id, a.ts, a.text, c.reaped_ts, c.reaped_reason, c.id < max(COALESCE(p.last_reply, 0), COALESCE(p.last_answered, 0))";

/// What a ledger row joins: its message, its answer, the pair's supersession marks.
const CONTRACT_JOINS: &str = "LEFT JOIN messages m ON m.id = c.id
    LEFT JOIN messages a ON a.id = c.answer_id
    LEFT JOIN contract_peers p ON p.sender = c.sender AND p.peer = c.assignee";

const LEDGER_OPEN_IDS: &str = "SELECT c.ts, c.id FROM contracts c INDEXED BY contracts_open
   WHERE c.sender = ?1 AND c.assignee = ?3 AND c.answer_id IS NULL AND c.ack = 0
     AND c.ts >= max(?2, ?4) AND (c.ts > ?4 OR c.id > ?5)
   ORDER BY c.ts, c.id LIMIT ?6";

fn ledger_row() -> String {
    format!(
        "SELECT {CONTRACT_COLS} FROM contracts c {CONTRACT_JOINS} WHERE c.sender = ?1 AND c.id = ?2"
    )
}

fn ledger_unreaped() -> String {
    format!(
        "SELECT {CONTRACT_COLS}
           FROM contracts c INDEXED BY contracts_open {CONTRACT_JOINS}
          WHERE c.sender = ?1 AND c.assignee = ?3 AND c.answer_id IS NULL AND c.ack = 0
            AND c.ts >= max(?2, ?4) AND (c.ts > ?4 OR c.id > ?5) AND c.reaped_ts IS NULL
          ORDER BY c.ts, c.id LIMIT ?6"
    )
}

fn ledger_rows(open_only: bool) -> String {
    let (from, filter) = if open_only {
        (
            "contracts c INDEXED BY contracts_open",
            "AND c.answer_id IS NULL AND c.ack = 0",
        )
    } else {
        ("contracts c", "")
    };
    format!(
        "SELECT {CONTRACT_COLS}
           FROM {from} {CONTRACT_JOINS}
          WHERE c.sender = ?1 AND c.ts >= ?2 AND (?3 IS NULL OR c.project = ?3)
            AND c.id > max(?4, {WINDOW_FIRST_ID} - 1) {filter}
          ORDER BY c.id LIMIT ?5"
    )
}

/// The event columns [`trantor_store::rows::event`] reads: the message text of an event stored
/// by reference comes from the messages table (a rowid lookup), cut to the characters the event
/// holds.
const EVENT_COLS: &str = "id, ts, type, project, by_s, data, text_chars,
    (SELECT substr(m.text, 1, events.text_chars) FROM messages m WHERE m.id = events.msg_id)";

/// The big tables are counted as their AUTOINCREMENT high-water mark minus the rows ever
/// deleted (schema version 1); the small ones row by row.
const COUNTS: &str = "SELECT
    COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'messages'), 0)
      - COALESCE((SELECT n FROM counters WHERE name = 'messages_deleted'), 0),
    COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'events'), 0)
      - COALESCE((SELECT n FROM counters WHERE name = 'events_deleted'), 0),
    (SELECT count(*) FROM peers),
    (SELECT count(*) FROM cards),
    (SELECT count(*) FROM lessons)";

fn cost_select(by: CostBy) -> String {
    let key = match by {
        CostBy::Total => "''",
        CostBy::Card => "CAST(card AS TEXT)",
        CostBy::Seat => "session",
        CostBy::Day => "CAST(ts / 86400000 AS TEXT)",
        CostBy::Credential => "credential",
    };
    format!(
        "SELECT {key}, COALESCE(SUM(input), 0), COALESCE(SUM(output), 0),
                COALESCE(SUM(cache_read), 0), COALESCE(SUM(cache_write), 0),
                COALESCE(SUM(usd), 0.0), count(*), COALESCE(SUM(usd IS NULL), 0),
                COALESCE(MAX(estimated), 0)
           FROM turns WHERE 1 = 1"
    )
}

const PUT_PEER: &str = "INSERT INTO peers(session, last_seen, delivered_up_to, data)
     VALUES (?1, ?2, ?3, ?4)
 ON CONFLICT(session) DO UPDATE SET
     last_seen = excluded.last_seen,
     data = excluded.data,
     delivered_up_to = max(peers.delivered_up_to, excluded.delivered_up_to)";

const RAISE_DELIVERED: &str = "INSERT INTO peers(session, last_seen, delivered_up_to, data)
     VALUES (?1, 0, ?2, '{}')
 ON CONFLICT(session) DO UPDATE SET
     delivered_up_to = max(peers.delivered_up_to, excluded.delivered_up_to)
 RETURNING delivered_up_to";

const DELETE_ANONYMOUS_PEERS: &str = "DELETE FROM peers WHERE last_seen < ?1
     AND coalesce(json_extract(data, '$.registered'), 0) = 0
 RETURNING session";

/// A placeholder row that the `PUT_CARD` which follows fills (cards are rare writes); its
/// AUTOINCREMENT id is the card's, and continues above an imported card's.
const RESERVE_CARD_ID: &str = "INSERT INTO cards(project, status, assignee, updated, data)
     VALUES ('', '', '', 0, '{}') RETURNING id";

const PUT_CARD: &str = "INSERT INTO cards(id, project, status, assignee, updated, data)
     VALUES (?1, ?2, ?3, ?4, ?5, ?6)
 ON CONFLICT(id) DO UPDATE SET
     project = excluded.project, status = excluded.status,
     assignee = excluded.assignee, updated = excluded.updated, data = excluded.data";

const RECORD_TURN: &str = "INSERT OR IGNORE INTO turns(session, instance, turn, ts, project,
     card, agent, model, credential, outcome, has_usage, input, output, cache_read,
     cache_write, usd, estimated, source)
 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18)";

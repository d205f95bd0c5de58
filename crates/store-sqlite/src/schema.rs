//! The SQLite schema and its migrations.
//!
//! The schema version lives in the `meta` table. Opening a database written by a newer build is
//! refused (its tables may mean something this build does not know), and every migration runs in
//! one `BEGIN IMMEDIATE` transaction so two processes opening the same file cannot both apply it.

use rusqlite::{Connection, OptionalExtension};
use trantor_store::StoreError;
use trantor_store::migrate::{self, SchemaTx};
use trantor_store::rows;
use trantor_store::sql::{Run, Statements};

/// The schema version this build writes and understands.
pub const SCHEMA_VERSION: i64 = 7;

/// Version 1: every table the `Store` trait needs, with one index per query shape.
///
/// Decisions worth knowing:
/// - `AUTOINCREMENT` on every id table so ids are never reused after pruning, and the high-water
///   mark (`sqlite_sequence`) is the message "tip" even when the newest rows are gone.
/// - The big tables (messages, events) are never counted row by row (`/health` must not walk a
///   million rows): their count is the AUTOINCREMENT high-water mark minus the rows ever
///   deleted, kept in `counters` by a delete trigger. Exact because their ids are only ever
///   assigned by SQLite (and a rolled-back insert rolls the high-water mark back too). Inserts
///   carry no counting work at all: an `AFTER INSERT` trigger made every message insert 3-4x
///   slower (measured: 22 µs vs 7 µs). Deletes are rare (retention); the same trigger removes
///   the card references, which keeps pruning a single `DELETE`. The small tables (peers,
///   cards, lessons) are counted.
pub(crate) const V1: &str = r#"
CREATE TABLE messages (
    id      INTEGER PRIMARY KEY AUTOINCREMENT,
    ts      INTEGER NOT NULL,
    from_s  TEXT    NOT NULL,
    to_s    TEXT    NOT NULL,
    project TEXT    NOT NULL,
    text    TEXT    NOT NULL,
    re      INTEGER,
    kind    TEXT,
    wake    INTEGER
);
CREATE INDEX messages_to_id   ON messages(to_s, id);
CREATE INDEX messages_from_ts ON messages(from_s, ts);
CREATE INDEX messages_ts      ON messages(ts);

CREATE TABLE message_refs (
    card_id INTEGER NOT NULL,
    msg_id  INTEGER NOT NULL,
    PRIMARY KEY (card_id, msg_id)
) WITHOUT ROWID;
CREATE INDEX message_refs_msg ON message_refs(msg_id);

CREATE TABLE peers (
    session         TEXT    PRIMARY KEY,
    last_seen       INTEGER NOT NULL,
    delivered_up_to INTEGER NOT NULL DEFAULT 0,
    data            TEXT    NOT NULL
);
CREATE INDEX peers_last_seen ON peers(last_seen);

CREATE TABLE cards (
    id       INTEGER PRIMARY KEY AUTOINCREMENT,
    project  TEXT    NOT NULL,
    status   TEXT    NOT NULL,
    assignee TEXT    NOT NULL,
    updated  INTEGER NOT NULL,
    data     TEXT    NOT NULL
);
CREATE INDEX cards_project  ON cards(project, id);
CREATE INDEX cards_status   ON cards(status, id);
CREATE INDEX cards_assignee ON cards(assignee, id);

CREATE TABLE events (
    id      INTEGER PRIMARY KEY AUTOINCREMENT,
    ts      INTEGER NOT NULL,
    type    TEXT    NOT NULL,
    project TEXT    NOT NULL,
    by_s    TEXT    NOT NULL,
    task_id INTEGER,
    data    TEXT    NOT NULL
);
-- Partial: most events (messages, presence) are about no card and would only crowd it.
CREATE INDEX events_task    ON events(task_id, id) WHERE task_id IS NOT NULL;
CREATE INDEX events_by      ON events(by_s, id);
CREATE INDEX events_project ON events(project, id);
CREATE INDEX events_type    ON events(type, id);
CREATE INDEX events_ts      ON events(ts);

CREATE TABLE event_refs (
    card_id  INTEGER NOT NULL,
    event_id INTEGER NOT NULL,
    PRIMARY KEY (card_id, event_id)
) WITHOUT ROWID;
CREATE INDEX event_refs_event ON event_refs(event_id);

CREATE TABLE lessons (
    id      INTEGER PRIMARY KEY AUTOINCREMENT,
    scope   TEXT    NOT NULL,
    text    TEXT    NOT NULL,
    by_s    TEXT    NOT NULL,
    ts      INTEGER NOT NULL,
    project TEXT    NOT NULL
);
CREATE INDEX lessons_scope ON lessons(scope, id);

CREATE TABLE kv (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
) WITHOUT ROWID;

CREATE TABLE ops (
    id   TEXT    PRIMARY KEY,
    ts   INTEGER NOT NULL,
    code INTEGER NOT NULL,
    body TEXT    NOT NULL
) WITHOUT ROWID;
CREATE INDEX ops_ts ON ops(ts);

CREATE TABLE counters (
    name TEXT    PRIMARY KEY,
    n    INTEGER NOT NULL
) WITHOUT ROWID;
INSERT INTO counters(name, n) VALUES ('messages_deleted', 0), ('events_deleted', 0);

CREATE TRIGGER messages_ad AFTER DELETE ON messages BEGIN
    UPDATE counters SET n = n + 1 WHERE name = 'messages_deleted';
    DELETE FROM message_refs WHERE msg_id = old.id;
END;
CREATE TRIGGER events_ad AFTER DELETE ON events BEGIN
    UPDATE counters SET n = n + 1 WHERE name = 'events_deleted';
    DELETE FROM event_refs WHERE event_id = old.id;
END;
"#;

/// Version 2: a `message` event can be stored as a reference to its message instead of a second
/// copy of the text (the write path's largest cost after the message row itself).
///
/// `msg_id` names the message; `text_chars` is how many characters of its text the event's
/// `text` field holds (the hub cuts long texts). Such a row keeps `"text": null` in `data` and
/// the text is read back as `substr(messages.text, 1, text_chars)`. Rows written before (both
/// columns NULL) keep their copy and are read as before.
const V2: &str = r#"
ALTER TABLE events ADD COLUMN msg_id INTEGER;
ALTER TABLE events ADD COLUMN text_chars INTEGER;
"#;

/// Version 3: the delivery record (docs/protocol.md "Delivery").
///
/// - `delivery` is append-only: one row per state of a direct message, in `seq` order. (Since
///   2026-12-08 `stored` is no longer a row: the message itself is that state, and its open
///   entry has `seq` 0. Rows written before are read as they are.)
/// - `delivery_open` holds, per message not yet consumed or failed, the `seq` of its latest
///   state, so a seat's open list is an index range, not a scan of its history.
/// - `delivery_fence` names each session's current runner instance.
/// - The message delete trigger also removes a pruned message's record (retention removes only
///   messages their recipient has read).
///
/// Messages stored before this version have no rows; the store reports a `stored` state from the
/// message itself for them.
const V3: &str = r#"
CREATE TABLE delivery (
    seq      INTEGER PRIMARY KEY AUTOINCREMENT,
    msg_id   INTEGER NOT NULL,
    state    TEXT    NOT NULL,
    ts       INTEGER NOT NULL,
    session  TEXT    NOT NULL,
    instance TEXT,
    turn     INTEGER,
    pid      INTEGER,
    outcome  TEXT,
    reason   TEXT
);
CREATE INDEX delivery_msg ON delivery(msg_id, seq);

CREATE TABLE delivery_open (
    msg_id  INTEGER PRIMARY KEY,
    session TEXT    NOT NULL,
    seq     INTEGER NOT NULL
);
CREATE INDEX delivery_open_session ON delivery_open(session, msg_id);

CREATE TABLE delivery_fence (
    session  TEXT    PRIMARY KEY,
    instance TEXT    NOT NULL,
    ts       INTEGER NOT NULL
) WITHOUT ROWID;

DROP TRIGGER messages_ad;
CREATE TRIGGER messages_ad AFTER DELETE ON messages BEGIN
    UPDATE counters SET n = n + 1 WHERE name = 'messages_deleted';
    DELETE FROM message_refs WHERE msg_id = old.id;
    DELETE FROM delivery WHERE msg_id = old.id;
    DELETE FROM delivery_open WHERE msg_id = old.id;
END;
"#;

/// Version 4: the contract ledger, kept as messages commit (docs/protocol.md §5.6), so
/// `/contracts` and the reaper cost the open contracts and the page, not the session's traffic.
///
/// - `contracts`: one row per contract (a direct message between two real sessions), clustered
///   by (sender, id) so a sender's window is one contiguous range; `answer_id` is the answering
///   message (`by_re` when it named the contract), `reaped_*` the reaper's verdict.
/// - `contracts_open`: the owed, unanswered rows by (sender, assignee, ts): a plain reply finds
///   the oldest open contract to its sender in one probe, and the per-assignee counts walk only
///   open rows (covering since version 7).
/// - `contract_peers`: per (sender, peer) the newest message from the peer to the sender and the
///   newest answered contract to the peer (supersession).
/// - The message delete trigger also drops the message's contract row (retention).
///
/// Rows for the messages already stored are filled in by [`backfill_contracts`].
const V4: &str = r#"
CREATE TABLE contracts (
    sender        TEXT    NOT NULL,
    id            INTEGER NOT NULL,
    assignee      TEXT    NOT NULL,
    ts            INTEGER NOT NULL,
    project       TEXT    NOT NULL,
    ack           INTEGER NOT NULL,
    answer_id     INTEGER,
    by_re         INTEGER NOT NULL DEFAULT 0,
    reaped_ts     INTEGER,
    reaped_reason TEXT,
    PRIMARY KEY (sender, id)
) WITHOUT ROWID;
CREATE INDEX contracts_open ON contracts(sender, assignee, ts)
    WHERE answer_id IS NULL AND ack = 0;

CREATE TABLE contract_peers (
    sender        TEXT    NOT NULL,
    peer          TEXT    NOT NULL,
    last_reply    INTEGER NOT NULL DEFAULT 0,
    last_answered INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (sender, peer)
) WITHOUT ROWID;

DROP TRIGGER messages_ad;
CREATE TRIGGER messages_ad AFTER DELETE ON messages BEGIN
    UPDATE counters SET n = n + 1 WHERE name = 'messages_deleted';
    DELETE FROM message_refs WHERE msg_id = old.id;
    DELETE FROM delivery WHERE msg_id = old.id;
    DELETE FROM delivery_open WHERE msg_id = old.id;
    DELETE FROM contracts WHERE sender = old.from_s AND id = old.id;
END;
"#;

/// Version 5: the cost ledger (docs/protocol.md §7.6): one row per finished turn of a seat,
/// keyed by `(session, instance, turn)` so a repeated report is recorded once. `has_usage = 0`
/// is a turn whose usage was unknown (its counts are zero and not meant as zero); `usd` is NULL
/// when the dollars are unknown. Kept whole by retention: a row per turn is small, and what a
/// card cost must not shrink when its messages are pruned.
const V5: &str = r#"
CREATE TABLE turns (
    session     TEXT    NOT NULL,
    instance    TEXT    NOT NULL,
    turn        INTEGER NOT NULL,
    ts          INTEGER NOT NULL,
    project     TEXT    NOT NULL,
    card        INTEGER NOT NULL,
    agent       TEXT    NOT NULL,
    model       TEXT    NOT NULL,
    credential  TEXT    NOT NULL,
    outcome     TEXT    NOT NULL,
    has_usage   INTEGER NOT NULL,
    input       INTEGER NOT NULL,
    output      INTEGER NOT NULL,
    cache_read  INTEGER NOT NULL,
    cache_write INTEGER NOT NULL,
    usd         REAL,
    estimated   INTEGER NOT NULL,
    source      TEXT    NOT NULL,
    PRIMARY KEY (session, instance, turn)
) WITHOUT ROWID;
CREATE INDEX turns_card    ON turns(card, ts);
CREATE INDEX turns_ts      ON turns(ts);
CREATE INDEX turns_project ON turns(project, ts);
"#;

/// Version 6: the contract tally (docs/protocol.md §5.6), so a window's counts cost its
/// buckets, not its traffic. Per (sender, hour of `ts`, assignee, project): the open, ack and
/// answered contracts, and the lowest and highest id seen in the bucket (the id range a read
/// walks to count the window's first bucket row by row from its start). Kept by triggers on
/// `contracts`, so every write path (a send, an answer, the reaper's mark, retention) keeps it;
/// a bucket whose counts all reach 0 by deletion is dropped. The hour is
/// `trantor_store::TALLY_BUCKET_MS`.
/// Also `events_cards`: a project's card events by id, so the catch-up's card events cost
/// those, not the project's message events.
const V6: &str = r#"
CREATE TABLE contract_tally (
    sender   TEXT    NOT NULL,
    bucket   INTEGER NOT NULL,
    assignee TEXT    NOT NULL,
    project  TEXT    NOT NULL,
    open     INTEGER NOT NULL,
    ack      INTEGER NOT NULL,
    answered INTEGER NOT NULL,
    min_id   INTEGER NOT NULL,
    max_id   INTEGER NOT NULL,
    PRIMARY KEY (sender, bucket, assignee, project)
) WITHOUT ROWID;

INSERT INTO contract_tally
SELECT sender, ts / 3600000, assignee, project,
       sum(answer_id IS NULL AND ack = 0), sum(answer_id IS NULL AND ack != 0),
       count(answer_id), min(id), max(id)
  FROM contracts GROUP BY sender, ts / 3600000, assignee, project;

CREATE TRIGGER contracts_tally_ai AFTER INSERT ON contracts BEGIN
    INSERT INTO contract_tally
    VALUES (new.sender, new.ts / 3600000, new.assignee, new.project,
            new.answer_id IS NULL AND new.ack = 0, new.answer_id IS NULL AND new.ack != 0,
            new.answer_id IS NOT NULL, new.id, new.id)
    ON CONFLICT (sender, bucket, assignee, project) DO UPDATE SET
        open = open + excluded.open, ack = ack + excluded.ack,
        answered = answered + excluded.answered,
        min_id = min(min_id, excluded.min_id), max_id = max(max_id, excluded.max_id);
END;

CREATE TRIGGER contracts_tally_au AFTER UPDATE OF answer_id, ack ON contracts
  WHEN (old.answer_id IS NULL) != (new.answer_id IS NULL) OR old.ack != new.ack BEGIN
    UPDATE contract_tally SET
        open = open + (new.answer_id IS NULL AND new.ack = 0)
                    - (old.answer_id IS NULL AND old.ack = 0),
        ack = ack + (new.answer_id IS NULL AND new.ack != 0)
                  - (old.answer_id IS NULL AND old.ack != 0),
        answered = answered + (new.answer_id IS NOT NULL) - (old.answer_id IS NOT NULL)
     WHERE sender = new.sender AND bucket = new.ts / 3600000 AND assignee = new.assignee
       AND project = new.project;
END;

CREATE TRIGGER contracts_tally_ad AFTER DELETE ON contracts BEGIN
    UPDATE contract_tally SET
        open = open - (old.answer_id IS NULL AND old.ack = 0),
        ack = ack - (old.answer_id IS NULL AND old.ack != 0),
        answered = answered - (old.answer_id IS NOT NULL)
     WHERE sender = old.sender AND bucket = old.ts / 3600000 AND assignee = old.assignee
       AND project = old.project;
    DELETE FROM contract_tally
     WHERE sender = old.sender AND bucket = old.ts / 3600000 AND assignee = old.assignee
       AND project = old.project AND open = 0 AND ack = 0 AND answered = 0;
END;

-- A project's card events newest first (the catch-up's), on an index the message events stay
-- out of.
CREATE INDEX events_cards ON events(project, id) WHERE task_id IS NOT NULL;
"#;

/// Version 7: `contracts_open` covers what its readers filter on. Its rows also hold
/// `answer_id` and `ack` (the index's own condition, so always NULL and 0: a byte each) and
/// `project`: without them SQLite counts the index as not covering and seeks the table row
/// for every index row it walks, even when no column of it is read, so counting a cut bucket's
/// open contracts or listing an assignee's open ids cost a table seek per contract (measured:
/// 50 assignees' cut buckets of ~130 rows each, 6.5 ms before, 1.7 ms after).
const V7: &str = r#"
DROP INDEX contracts_open;
CREATE INDEX contracts_open ON contracts(sender, assignee, ts, answer_id, ack, project)
    WHERE answer_id IS NULL AND ack = 0;
"#;

/// Fill the contract ledger from the messages already stored (migration to version 4), in id
/// order, as if each had just committed.
fn backfill_contracts(conn: &Connection) -> Result<usize, StoreError> {
    let sql = format!(
        "SELECT id, ts, from_s, to_s, project, '', re, kind, wake FROM messages
           WHERE to_s != '{}' ORDER BY id",
        trantor_proto::BROADCAST
    );
    let tx = super::tx::SqlTx::new(conn);
    let mut n = 0;
    let run = Run {
        origin: ("messages", "backfill contracts"),
        sql: &sql,
        args: &[],
    };
    tx.each_row(&run, &mut |c| {
        tx.ledger_on_message(&rows::message(c)?)?;
        n += 1;
        Ok(())
    })?;
    Ok(n)
}

/// Migrations in order: entry `i` brings a database from version `i` to `i + 1`.
const MIGRATIONS: [&str; SCHEMA_VERSION as usize] = [V1, V2, V3, V4, V5, V6, V7];

/// Bring the database behind `conn` to [`SCHEMA_VERSION`], or explain why it cannot be.
pub(crate) fn migrate(conn: &Connection, path: &str) -> Result<(), StoreError> {
    // IMMEDIATE takes the write lock first, so a concurrent opener waits (busy_timeout) and then
    // sees the version this one wrote instead of racing to create the same tables.
    conn.execute_batch("BEGIN IMMEDIATE")
        .map_err(|e| open_err(path, "cannot lock the database", e))?;
    let result = conn
        .execute_batch(
            "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) \
             WITHOUT ROWID",
        )
        .map_err(|e| {
            open_err(
                path,
                "cannot read the schema (is this a trantor database?)",
                e,
            )
        })
        .and_then(|()| migrate::migrate(&mut Meta { conn, path }, path, &MIGRATIONS));
    match result {
        Ok(()) => conn
            .execute_batch("COMMIT")
            .map_err(|e| open_err(path, "cannot commit the schema", e)),
        Err(e) => {
            if let Err(rb) = conn.execute_batch("ROLLBACK") {
                tracing::warn!(error = %rb, "rollback after a failed migration failed");
            }
            Err(e)
        }
    }
}

fn open_err(path: &str, what: &str, e: rusqlite::Error) -> StoreError {
    StoreError::Open {
        path: path.to_string(),
        context: what.to_string(),
        source: Some(std::sync::Arc::new(e)),
    }
}

/// The version row of the `meta` table, inside the migration transaction.
struct Meta<'c> {
    conn: &'c Connection,
    path: &'c str,
}

impl SchemaTx for Meta<'_> {
    fn stored_version(&mut self) -> Result<Option<i64>, StoreError> {
        let stored: Option<String> = self
            .conn
            .query_row(
                "SELECT value FROM meta WHERE key = 'schema_version'",
                [],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| open_err(self.path, "cannot read the schema version", e))?;
        stored
            .map(|s| {
                s.trim().parse::<i64>().map_err(|_| StoreError::Open {
                    path: self.path.to_string(),
                    context: format!("the stored schema version {s:?} is not a number"),
                    source: None,
                })
            })
            .transpose()
    }

    fn apply(&mut self, sql: &str) -> Result<(), StoreError> {
        self.conn
            .execute_batch(sql)
            .map_err(|e| open_err(self.path, "migration", e))?;
        if sql == V4 {
            let n = backfill_contracts(self.conn)?;
            tracing::info!(
                messages = n,
                "contract ledger filled from the stored messages"
            );
        }
        Ok(())
    }

    fn record_version(&mut self, version: i64) -> Result<(), StoreError> {
        self.conn
            .execute(
                "INSERT INTO meta(key, value) VALUES ('schema_version', ?1)
                 ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                [version.to_string()],
            )
            .map(|_| ())
            .map_err(|e| open_err(self.path, "cannot record the schema version", e))
    }
}

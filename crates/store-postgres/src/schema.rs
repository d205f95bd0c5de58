//! The PostgreSQL schema and its versioned migrations.
//!
//! The version lives in the one-row `schema_version` table. Migrations run in one transaction
//! under a transaction-scoped advisory lock, so two hubs starting on the same empty database
//! cannot both create the tables; PostgreSQL's DDL is transactional, so a failed migration
//! leaves nothing behind. A database whose version is newer than this build's is refused.

use postgres::{Client, Transaction};

use crate::{K_MIGRATE, unavailable_or_open};
use trantor_store::StoreError;
use trantor_store::migrate::{self, SchemaTx};

/// The schema version this build writes and understands.
pub const SCHEMA_VERSION: i32 = 8;

/// Version 1: every table the `Store` trait needs.
///
/// - Every text column is `COLLATE "C"` (byte order), as SQLite compares: ordered listings and
///   the event-type prefix ranges must not depend on the server's locale.
/// - Ids come from `BIGSERIAL` sequences. Writes are serialised by an advisory lock (see the
///   crate docs), which makes ids increase in commit order, the property `/poll`'s `since`
///   cursor relies on; inside its locked batch the writer hands out the next message and event
///   ids itself (read from the sequences when the batch began, which are moved past them before
///   `COMMIT`), so two hubs never hand out the same id and a `nextval` never returns one.
/// - The message and event "tips" (highest id ever assigned, even when pruned) and their row
///   counts live in `counters`, updated in the same statement as the insert or delete, so what
///   a reader sees always matches the rows of its snapshot (a sequence is not transactional:
///   a rolled-back insert leaves a gap in it). Counting a million rows is never needed.
const V1: &str = r#"
CREATE TABLE messages (
    id      BIGSERIAL PRIMARY KEY,
    ts      BIGINT  NOT NULL,
    from_s  TEXT COLLATE "C" NOT NULL,
    to_s    TEXT COLLATE "C" NOT NULL,
    project TEXT COLLATE "C" NOT NULL,
    text    TEXT    NOT NULL,
    re      BIGINT,
    kind    TEXT COLLATE "C",
    wake    BOOLEAN
);
CREATE INDEX messages_to_id   ON messages(to_s, id);
CREATE INDEX messages_from_ts ON messages(from_s, ts);
CREATE INDEX messages_ts      ON messages(ts);

CREATE TABLE message_refs (
    card_id BIGINT NOT NULL,
    msg_id  BIGINT NOT NULL,
    PRIMARY KEY (card_id, msg_id)
);
CREATE INDEX message_refs_msg ON message_refs(msg_id);

CREATE TABLE peers (
    session         TEXT COLLATE "C" PRIMARY KEY,
    last_seen       BIGINT NOT NULL,
    delivered_up_to BIGINT NOT NULL DEFAULT 0,
    data            TEXT   NOT NULL
);
CREATE INDEX peers_last_seen ON peers(last_seen);

CREATE TABLE cards (
    id       BIGSERIAL PRIMARY KEY,
    project  TEXT COLLATE "C" NOT NULL,
    status   TEXT COLLATE "C" NOT NULL,
    assignee TEXT COLLATE "C" NOT NULL,
    updated  BIGINT NOT NULL,
    data     TEXT   NOT NULL
);
CREATE INDEX cards_project  ON cards(project, id);
CREATE INDEX cards_status   ON cards(status, id);
CREATE INDEX cards_assignee ON cards(assignee, id);

CREATE TABLE events (
    id      BIGSERIAL PRIMARY KEY,
    ts      BIGINT NOT NULL,
    type    TEXT COLLATE "C" NOT NULL,
    project TEXT COLLATE "C" NOT NULL,
    by_s    TEXT COLLATE "C" NOT NULL,
    task_id BIGINT,
    data    TEXT   NOT NULL
);
CREATE INDEX events_task    ON events(task_id, id) WHERE task_id IS NOT NULL;
CREATE INDEX events_by      ON events(by_s, id);
CREATE INDEX events_project ON events(project, id);
CREATE INDEX events_type    ON events(type, id);
CREATE INDEX events_ts      ON events(ts) WHERE task_id IS NULL;

CREATE TABLE event_refs (
    card_id  BIGINT NOT NULL,
    event_id BIGINT NOT NULL,
    PRIMARY KEY (card_id, event_id)
);
CREATE INDEX event_refs_event ON event_refs(event_id);

CREATE TABLE lessons (
    id      BIGSERIAL PRIMARY KEY,
    scope   TEXT COLLATE "C" NOT NULL,
    text    TEXT   NOT NULL,
    by_s    TEXT COLLATE "C" NOT NULL,
    ts      BIGINT NOT NULL,
    project TEXT COLLATE "C" NOT NULL
);
CREATE INDEX lessons_scope ON lessons(scope, id);

CREATE TABLE kv (
    key   TEXT COLLATE "C" PRIMARY KEY,
    value TEXT NOT NULL
);

CREATE TABLE ops (
    id   TEXT COLLATE "C" PRIMARY KEY,
    ts   BIGINT  NOT NULL,
    code INTEGER NOT NULL,
    body TEXT    NOT NULL
);
CREATE INDEX ops_ts ON ops(ts);

CREATE TABLE counters (
    name TEXT COLLATE "C" PRIMARY KEY,
    n    BIGINT NOT NULL
);
INSERT INTO counters(name, n) VALUES
    ('messages_tip', 0), ('messages_count', 0), ('events_tip', 0), ('events_count', 0);
"#;

/// Version 2: the delivery record (docs/protocol.md "Delivery"), as in the SQLite schema's
/// version 3: the append-only `delivery` rows, `delivery_open` (the latest state of each message
/// not yet consumed or failed) and `delivery_fence` (each session's current runner instance).
/// Retention deletes a pruned message's rows with it (see `prune`). Since 2026-12-08 `stored` is
/// not a `delivery` row: the message is that state, and its `delivery_open` entry has `seq` 0.
const V2: &str = r#"
CREATE TABLE delivery (
    seq      BIGSERIAL PRIMARY KEY,
    msg_id   BIGINT NOT NULL,
    state    TEXT COLLATE "C" NOT NULL,
    ts       BIGINT NOT NULL,
    session  TEXT COLLATE "C" NOT NULL,
    instance TEXT COLLATE "C",
    turn     BIGINT,
    pid      BIGINT,
    outcome  TEXT,
    reason   TEXT
);
CREATE INDEX delivery_msg ON delivery(msg_id, seq);

CREATE TABLE delivery_open (
    msg_id  BIGINT PRIMARY KEY,
    session TEXT COLLATE "C" NOT NULL,
    seq     BIGINT NOT NULL
);
CREATE INDEX delivery_open_session ON delivery_open(session, msg_id);

CREATE TABLE delivery_fence (
    session  TEXT COLLATE "C" PRIMARY KEY,
    instance TEXT COLLATE "C" NOT NULL,
    ts       BIGINT NOT NULL
);
"#;

/// Version 3: the contract ledger, kept as messages commit (docs/protocol.md §5.6), so
/// `/contracts` and the reaper cost the open contracts and the page, not the session's traffic.
/// The same tables and rules as the embedded store (crates/store-sqlite, schema v4), kept by an
/// `AFTER INSERT` trigger on `messages` so a `/send` costs no extra round trip; the messages
/// already stored are replayed through the same function, in id order. The plain-reply
/// horizon (86,400,000 ms) is `trantor_store::CONTRACT_MATCH_MS`.
const V3: &str = r#"
CREATE TABLE contracts (
    id            BIGINT PRIMARY KEY,
    sender        TEXT COLLATE "C" NOT NULL,
    assignee      TEXT COLLATE "C" NOT NULL,
    ts            BIGINT  NOT NULL,
    project       TEXT COLLATE "C" NOT NULL,
    ack           BOOLEAN NOT NULL,
    answer_id     BIGINT,
    by_re         BOOLEAN NOT NULL DEFAULT false,
    reaped_ts     BIGINT,
    reaped_reason TEXT
);
CREATE INDEX contracts_sender ON contracts(sender, id);
CREATE INDEX contracts_open ON contracts(sender, assignee, ts, id)
    WHERE answer_id IS NULL AND NOT ack;

CREATE TABLE contract_peers (
    sender        TEXT COLLATE "C" NOT NULL,
    peer          TEXT COLLATE "C" NOT NULL,
    last_reply    BIGINT NOT NULL DEFAULT 0,
    last_answered BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (sender, peer)
);

CREATE FUNCTION trantor_ledger_peer(s TEXT, p TEXT, reply BIGINT, answered BIGINT)
RETURNS void LANGUAGE sql AS $$
    INSERT INTO contract_peers(sender, peer, last_reply, last_answered)
    VALUES (s, p, reply, answered)
    ON CONFLICT (sender, peer) DO UPDATE SET
        last_reply = GREATEST(contract_peers.last_reply, excluded.last_reply),
        last_answered = GREATEST(contract_peers.last_answered, excluded.last_answered)
$$;

CREATE FUNCTION trantor_ledger_match(s TEXT, a TEXT, reply BIGINT, reply_ts BIGINT)
RETURNS BIGINT LANGUAGE plpgsql AS $$
DECLARE
    c BIGINT;
BEGIN
    SELECT id INTO c FROM contracts
     WHERE sender = s AND assignee = a AND answer_id IS NULL AND NOT ack
       AND ts >= reply_ts - 86400000 AND id < reply
     ORDER BY ts, id LIMIT 1;
    IF c IS NULL THEN
        RETURN 0;
    END IF;
    UPDATE contracts SET answer_id = reply, by_re = false WHERE id = c;
    RETURN c;
END $$;

CREATE FUNCTION trantor_ledger_apply(m_id BIGINT, m_ts BIGINT, m_from TEXT, m_to TEXT,
                                     m_project TEXT, m_re BIGINT, m_kind TEXT, m_wake BOOLEAN)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    c_assignee TEXT;
    c_answer   BIGINT;
    c_by_re    BOOLEAN;
    p_ts       BIGINT;
    c_id       BIGINT;
    answered   BIGINT := 0;
BEGIN
    IF m_from = '' OR m_to = '' OR m_to = 'all' OR m_to = m_from
       OR m_from LIKE 'hub:%' OR m_to LIKE 'hub:%' THEN
        RETURN;
    END IF;
    IF m_kind IS DISTINCT FROM 'ask' THEN
        IF m_re IS NOT NULL THEN
            SELECT assignee, answer_id, by_re INTO c_assignee, c_answer, c_by_re
              FROM contracts WHERE id = m_re AND sender = m_to;
            IF FOUND AND NOT (c_answer IS NOT NULL AND c_by_re) THEN
                UPDATE contracts SET answer_id = m_id, by_re = true WHERE id = m_re;
                PERFORM trantor_ledger_peer(m_to, c_assignee, 0, m_re);
                IF c_answer IS NOT NULL THEN
                    SELECT ts INTO p_ts FROM messages WHERE id = c_answer;
                    IF FOUND THEN
                        c_id := trantor_ledger_match(m_to, c_assignee, c_answer, p_ts);
                        IF c_id > 0 THEN
                            PERFORM trantor_ledger_peer(m_to, c_assignee, 0, c_id);
                        END IF;
                    END IF;
                END IF;
            END IF;
        ELSE
            answered := trantor_ledger_match(m_to, m_from, m_id, m_ts);
        END IF;
    END IF;
    PERFORM trantor_ledger_peer(m_to, m_from, m_id, answered);
    INSERT INTO contracts(id, sender, assignee, ts, project, ack)
    VALUES (m_id, m_from, m_to, m_ts, m_project,
            m_wake IS NOT DISTINCT FROM false OR COALESCE(m_kind IN ('receipt', 'status'), false))
    ON CONFLICT (id) DO NOTHING;
END $$;

CREATE FUNCTION trantor_ledger_on_message() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM trantor_ledger_apply(NEW.id, NEW.ts, NEW.from_s, NEW.to_s, NEW.project, NEW.re,
                                 NEW.kind, NEW.wake);
    RETURN NULL;
END $$;

CREATE TRIGGER messages_ledger AFTER INSERT ON messages
    FOR EACH ROW EXECUTE FUNCTION trantor_ledger_on_message();

DO $$
DECLARE
    m RECORD;
BEGIN
    FOR m IN SELECT id, ts, from_s, to_s, project, re, kind, wake FROM messages
              WHERE to_s <> 'all' ORDER BY id LOOP
        PERFORM trantor_ledger_apply(m.id, m.ts, m.from_s, m.to_s, m.project, m.re, m.kind,
                                     m.wake);
    END LOOP;
END $$;
"#;

/// Version 4: the cost ledger (docs/protocol.md §7.6): one row per finished turn of a seat,
/// keyed by `(session, instance, turn)` so a repeated report is recorded once; `has_usage`
/// false is a turn whose usage was unknown, `usd` NULL unknown dollars. Kept whole by retention.
const V4: &str = r#"
CREATE TABLE turns (
    session     TEXT COLLATE "C" NOT NULL,
    instance    TEXT COLLATE "C" NOT NULL,
    turn        BIGINT  NOT NULL,
    ts          BIGINT  NOT NULL,
    project     TEXT COLLATE "C" NOT NULL,
    card        BIGINT  NOT NULL,
    agent       TEXT COLLATE "C" NOT NULL,
    model       TEXT COLLATE "C" NOT NULL,
    credential  TEXT COLLATE "C" NOT NULL,
    outcome     TEXT COLLATE "C" NOT NULL,
    has_usage   BOOLEAN NOT NULL,
    input       BIGINT  NOT NULL,
    output      BIGINT  NOT NULL,
    cache_read  BIGINT  NOT NULL,
    cache_write BIGINT  NOT NULL,
    usd         DOUBLE PRECISION,
    estimated   BOOLEAN NOT NULL,
    source      TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (session, instance, turn)
);
CREATE INDEX turns_card    ON turns(card, ts);
CREATE INDEX turns_ts      ON turns(ts);
CREATE INDEX turns_project ON turns(project, ts);
"#;

/// Version 5: the contract ledger kept once per statement instead of once per row, so the
/// writer's one multi-row insert of a batch's messages (crates/store-postgres, `batch`) costs
/// one trigger call. The rules are version 3's, applied in id order; when no message of the
/// statement is a reply by `re` and no two of its ledger messages are between the same two
/// sessions (a batch of `/send`s from different senders), no message's ledger work reads or
/// writes what another's does, and they are applied as sets: each plain message answers the
/// oldest open contract of its recipient's to its sender within the horizon, every message
/// raises its pair's peer row and opens its own contract. Otherwise each row goes through
/// `trantor_ledger_apply` in turn, as before. `trantor_ledger_peer` becomes PL/pgSQL, whose
/// plan is kept between calls (a SQL function called from PL/pgSQL is planned on every call).
const V5: &str = r#"
DROP TRIGGER messages_ledger ON messages;
DROP FUNCTION trantor_ledger_on_message();

CREATE OR REPLACE FUNCTION trantor_ledger_peer(s TEXT, p TEXT, reply BIGINT, answered BIGINT)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO contract_peers(sender, peer, last_reply, last_answered)
    VALUES (s, p, reply, answered)
    ON CONFLICT (sender, peer) DO UPDATE SET
        last_reply = GREATEST(contract_peers.last_reply, excluded.last_reply),
        last_answered = GREATEST(contract_peers.last_answered, excluded.last_answered);
END $$;

CREATE FUNCTION trantor_ledger_on_messages() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    m RECORD;
BEGIN
    IF NOT EXISTS (
        SELECT 1 FROM new_messages
         WHERE NOT (from_s = '' OR to_s = '' OR to_s = 'all' OR to_s = from_s
                    OR from_s LIKE 'hub:%' OR to_s LIKE 'hub:%')
         GROUP BY LEAST(from_s, to_s), GREATEST(from_s, to_s)
        HAVING count(*) > 1
            OR bool_or(re IS NOT NULL AND kind IS DISTINCT FROM 'ask')) THEN
        WITH k AS (
            SELECT id, ts, from_s, to_s, project, kind, wake FROM new_messages
             WHERE NOT (from_s = '' OR to_s = '' OR to_s = 'all' OR to_s = from_s
                        OR from_s LIKE 'hub:%' OR to_s LIKE 'hub:%')),
        hit AS (
            SELECT k.id AS reply, c.id AS contract FROM k
             CROSS JOIN LATERAL (
                 SELECT id FROM contracts
                  WHERE sender = k.to_s AND assignee = k.from_s AND answer_id IS NULL
                    AND NOT ack AND ts >= k.ts - 86400000 AND id < k.id
                  ORDER BY ts, id LIMIT 1) c
             WHERE k.kind IS DISTINCT FROM 'ask'),
        answered AS (
            UPDATE contracts SET answer_id = hit.reply, by_re = false
              FROM hit WHERE contracts.id = hit.contract),
        peers AS (
            INSERT INTO contract_peers(sender, peer, last_reply, last_answered)
            SELECT k.to_s, k.from_s, k.id, COALESCE(hit.contract, 0)
              FROM k LEFT JOIN hit ON hit.reply = k.id
            ON CONFLICT (sender, peer) DO UPDATE SET
                last_reply = GREATEST(contract_peers.last_reply, excluded.last_reply),
                last_answered = GREATEST(contract_peers.last_answered, excluded.last_answered))
        INSERT INTO contracts(id, sender, assignee, ts, project, ack)
        SELECT id, from_s, to_s, ts, project,
               wake IS NOT DISTINCT FROM false OR COALESCE(kind IN ('receipt', 'status'), false)
          FROM k
        ON CONFLICT (id) DO NOTHING;
    ELSE
        FOR m IN SELECT id, ts, from_s, to_s, project, re, kind, wake FROM new_messages
                  WHERE to_s <> 'all' ORDER BY id LOOP
            PERFORM trantor_ledger_apply(m.id, m.ts, m.from_s, m.to_s, m.project, m.re,
                                         m.kind, m.wake);
        END LOOP;
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER messages_ledger AFTER INSERT ON messages
    REFERENCING NEW TABLE AS new_messages
    FOR EACH STATEMENT EXECUTE FUNCTION trantor_ledger_on_messages();
"#;

/// Version 6: the contract tally (docs/protocol.md §5.6), the embedded store's schema v6: per
/// (sender, hour of `ts`, assignee, project) the open, ack and answered contracts and the id
/// range seen in the bucket, so a window's counts cost its buckets, not its traffic. Kept by
/// statement triggers on `contracts` over their transition tables (one upsert per statement,
/// whether the ledger's set path or its row path wrote), so every write path keeps it; a bucket
/// whose counts all reach 0 by deletion is dropped. The hour is `trantor_store::TALLY_BUCKET_MS`.
/// Also `events_cards`: a project's card events by id, so the catch-up's card events cost
/// those, not the project's message events.
const V6: &str = r#"
CREATE TABLE contract_tally (
    sender   TEXT COLLATE "C" NOT NULL,
    bucket   BIGINT NOT NULL,
    assignee TEXT COLLATE "C" NOT NULL,
    project  TEXT COLLATE "C" NOT NULL,
    open     BIGINT NOT NULL,
    ack      BIGINT NOT NULL,
    answered BIGINT NOT NULL,
    min_id   BIGINT NOT NULL,
    max_id   BIGINT NOT NULL,
    PRIMARY KEY (sender, bucket, assignee, project)
);

INSERT INTO contract_tally
SELECT sender, ts / 3600000, assignee, project,
       count(*) FILTER (WHERE answer_id IS NULL AND NOT ack),
       count(*) FILTER (WHERE answer_id IS NULL AND ack),
       count(answer_id), min(id), max(id)
  FROM contracts GROUP BY sender, ts / 3600000, assignee, project;

CREATE FUNCTION trantor_tally_on_contracts() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO contract_tally AS t
        SELECT sender, ts / 3600000, assignee, project,
               count(*) FILTER (WHERE answer_id IS NULL AND NOT ack),
               count(*) FILTER (WHERE answer_id IS NULL AND ack),
               count(answer_id), min(id), max(id)
          FROM tally_new GROUP BY sender, ts / 3600000, assignee, project
        ON CONFLICT (sender, bucket, assignee, project) DO UPDATE SET
            open = t.open + excluded.open, ack = t.ack + excluded.ack,
            answered = t.answered + excluded.answered,
            min_id = LEAST(t.min_id, excluded.min_id), max_id = GREATEST(t.max_id, excluded.max_id);
    ELSIF TG_OP = 'UPDATE' THEN
        UPDATE contract_tally t SET open = t.open + d.o, ack = t.ack + d.k,
               answered = t.answered + d.a
          FROM (SELECT n.sender, n.ts / 3600000 AS bucket, n.assignee, n.project,
                       sum((n.answer_id IS NULL AND NOT n.ack)::INT
                           - (o.answer_id IS NULL AND NOT o.ack)::INT) AS o,
                       sum((n.answer_id IS NULL AND n.ack)::INT
                           - (o.answer_id IS NULL AND o.ack)::INT) AS k,
                       sum((n.answer_id IS NOT NULL)::INT - (o.answer_id IS NOT NULL)::INT) AS a
                  FROM tally_new n JOIN tally_old o ON o.id = n.id
                 GROUP BY n.sender, n.ts / 3600000, n.assignee, n.project) d
         WHERE t.sender = d.sender AND t.bucket = d.bucket AND t.assignee = d.assignee
           AND t.project = d.project AND (d.o <> 0 OR d.k <> 0 OR d.a <> 0);
    ELSE
        UPDATE contract_tally t SET open = t.open - d.o, ack = t.ack - d.k,
               answered = t.answered - d.a
          FROM (SELECT sender, ts / 3600000 AS bucket, assignee, project,
                       count(*) FILTER (WHERE answer_id IS NULL AND NOT ack) AS o,
                       count(*) FILTER (WHERE answer_id IS NULL AND ack) AS k,
                       count(answer_id) AS a
                  FROM tally_old GROUP BY sender, ts / 3600000, assignee, project) d
         WHERE t.sender = d.sender AND t.bucket = d.bucket AND t.assignee = d.assignee
           AND t.project = d.project;
        DELETE FROM contract_tally t
         USING (SELECT DISTINCT sender, ts / 3600000 AS bucket, assignee, project
                  FROM tally_old) d
         WHERE t.sender = d.sender AND t.bucket = d.bucket AND t.assignee = d.assignee
           AND t.project = d.project AND t.open = 0 AND t.ack = 0 AND t.answered = 0;
    END IF;
    RETURN NULL;
END $$;

-- Each trigger declares the transition tables its branch of the function reads.
CREATE TRIGGER contracts_tally_ai AFTER INSERT ON contracts
    REFERENCING NEW TABLE AS tally_new
    FOR EACH STATEMENT EXECUTE FUNCTION trantor_tally_on_contracts();
CREATE TRIGGER contracts_tally_au AFTER UPDATE ON contracts
    REFERENCING OLD TABLE AS tally_old NEW TABLE AS tally_new
    FOR EACH STATEMENT EXECUTE FUNCTION trantor_tally_on_contracts();
CREATE TRIGGER contracts_tally_ad AFTER DELETE ON contracts
    REFERENCING OLD TABLE AS tally_old
    FOR EACH STATEMENT EXECUTE FUNCTION trantor_tally_on_contracts();

-- A project's card events newest first (the catch-up's), on an index the message events stay
-- out of.
CREATE INDEX events_cards ON events(project, id) WHERE task_id IS NOT NULL;
"#;

/// Version 7: the ledger trigger's set path in waves. A batch whose ledger messages shared a pair
/// of sessions (a contract and its answer, two contracts to one seat) or held a reply by `re`
/// went row by row through `trantor_ledger_apply`, several statements per message: under a
/// `/send` load whose batches often held one repeated pair, about a quarter of the rate. Now:
///
/// - The replies by `re` cut the batch into segments (a reply may answer any contract of its
///   recipient's, so it keeps its place): each reply goes through `trantor_ledger_apply`
///   alone, after the segment before it.
/// - Inside a segment the ledger messages are numbered within their pair in id order, and the
///   set statement runs once per number: each run holds at most one message per pair, and a
///   pair's messages run in id order, each seeing what the earlier runs wrote (a PL/pgSQL
///   statement sees the statements before it). Pairs do not read each other's rows there, so
///   this is what one write each gives.
/// - `trantor_ledger_traffic(from, to)` names the test of a ledger message the three
///   statements share.
const V7: &str = r#"
-- Whether a message from f to t is ledger traffic (a contract or an answer): not a broadcast,
-- not to oneself, no hub system session. A SQL function the planner inlines.
CREATE FUNCTION trantor_ledger_traffic(f TEXT, t TEXT) RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$
    SELECT NOT (f = '' OR t = '' OR t = 'all' OR t = f OR f LIKE 'hub:%' OR t LIKE 'hub:%')
$$;

CREATE OR REPLACE FUNCTION trantor_ledger_on_messages() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    r RECORD;
    lo BIGINT := 0;
    hi BIGINT;
    waves BIGINT;
BEGIN
    FOR r IN
        SELECT id, ts, from_s, to_s, project, re, kind, wake FROM new_messages
         WHERE trantor_ledger_traffic(from_s, to_s)
           AND re IS NOT NULL AND kind IS DISTINCT FROM 'ask'
        UNION ALL
        SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
         ORDER BY id NULLS LAST
    LOOP
        -- The segment before this reply (or the rest of the batch), in waves.
        hi := COALESCE(r.id, 9223372036854775807);
        SELECT max(n) INTO waves FROM (
            SELECT count(*) AS n FROM new_messages
             WHERE id >= lo AND id < hi
               AND trantor_ledger_traffic(from_s, to_s)
             GROUP BY LEAST(from_s, to_s), GREATEST(from_s, to_s)) pairs;
        FOR w IN 1..COALESCE(waves, 0) LOOP
            WITH k AS (
                SELECT id, ts, from_s, to_s, project, kind, wake FROM (
                    SELECT id, ts, from_s, to_s, project, kind, wake,
                           row_number() OVER (PARTITION BY LEAST(from_s, to_s),
                                                           GREATEST(from_s, to_s)
                                              ORDER BY id) AS wave
                      FROM new_messages
                     WHERE id >= lo AND id < hi
                       AND trantor_ledger_traffic(from_s, to_s)) numbered
                 WHERE wave = w),
            hit AS (
                SELECT k.id AS reply, c.id AS contract FROM k
                 CROSS JOIN LATERAL (
                     SELECT id FROM contracts
                      WHERE sender = k.to_s AND assignee = k.from_s AND answer_id IS NULL
                        AND NOT ack AND ts >= k.ts - 86400000 AND id < k.id
                      ORDER BY ts, id LIMIT 1) c
                 WHERE k.kind IS DISTINCT FROM 'ask'),
            answered AS (
                UPDATE contracts SET answer_id = hit.reply, by_re = false
                  FROM hit WHERE contracts.id = hit.contract),
            peers AS (
                INSERT INTO contract_peers(sender, peer, last_reply, last_answered)
                SELECT k.to_s, k.from_s, k.id, COALESCE(hit.contract, 0)
                  FROM k LEFT JOIN hit ON hit.reply = k.id
                ON CONFLICT (sender, peer) DO UPDATE SET
                    last_reply = GREATEST(contract_peers.last_reply, excluded.last_reply),
                    last_answered = GREATEST(contract_peers.last_answered,
                                             excluded.last_answered))
            INSERT INTO contracts(id, sender, assignee, ts, project, ack)
            SELECT id, from_s, to_s, ts, project,
                   wake IS NOT DISTINCT FROM false
                   OR COALESCE(kind IN ('receipt', 'status'), false)
              FROM k
            ON CONFLICT (id) DO NOTHING;
        END LOOP;
        -- Then the reply by `re` itself.
        IF r.id IS NOT NULL THEN
            PERFORM trantor_ledger_apply(r.id, r.ts, r.from_s, r.to_s, r.project, r.re,
                                         r.kind, r.wake);
            lo := r.id + 1;
        END IF;
    END LOOP;
    RETURN NULL;
END $$;
"#;

/// Version 8: the contract ledger kept after the commit instead of inside it (docs/protocol.md
/// §5.6, "Cost"). The trigger on `messages` ran inside every `/send` batch, and its statements
/// (planned on every call, each firing the tally's triggers) were a third of a send's time;
/// now a *ledger pass* applies the messages committed since the last one, in id order, in one
/// transaction that raises the `ledger_tip` counter to the `messages_tip` it read:
///
/// - `trantor_ledger_catch_up()` is the pass: under the ledger's advisory lock (the literal is
///   `K_LEDGER` in the crate root) it applies the ids above `ledger_tip` up to `messages_tip`
///   and returns the tip it reached. Ids commit in order (the write lock, see version 1), so
///   every id up to the tip read under the lock is committed and seen.
/// - `trantor_ledger_range(lo, hi)` applies the ids in `(lo, hi]`: the replies by `re` cut it
///   into segments as in version 7 (each reply through `trantor_ledger_apply` alone); a
///   segment's contracts are inserted in one statement (one tally trigger call), then only the
///   messages that can answer (plain, with a contract of their recipient's to them open below
///   them) are matched, in waves by pair as in version 7 (answering only closes contracts, so
///   no other message can), and the peers rows are raised once per pair. Its plans are custom
///   (`plan_cache_mode`): a generic plan of its id-range statements, cached after five calls on
///   the pass's connection, was slower by more than ten times.
/// - `trantor_ledger_put(id)` is the ledger of a message stored with its own id (an import),
///   in its transaction: above `ledger_tip` nothing (the next pass takes it in id order, so an
///   import of many messages costs one pass, not one each); at or below it, which no pass will
///   take, a pass first and then the message alone, as the trigger did.
const V8: &str = r#"
DROP TRIGGER messages_ledger ON messages;
DROP FUNCTION trantor_ledger_on_messages();

INSERT INTO counters(name, n)
SELECT 'ledger_tip', COALESCE((SELECT n FROM counters WHERE name = 'messages_tip'), 0)
ON CONFLICT (name) DO NOTHING;

CREATE FUNCTION trantor_ledger_range(p_lo BIGINT, p_hi BIGINT) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    r RECORD;
    lo BIGINT := p_lo + 1;
    hi BIGINT;
    waves BIGINT;
    cs BIGINT[];
    rs BIGINT[];
    answered BIGINT[];
    cand BIGINT[];
BEGIN
    FOR r IN
        SELECT id, ts, from_s, to_s, project, re, kind, wake FROM messages
         WHERE id > p_lo AND id <= p_hi AND trantor_ledger_traffic(from_s, to_s)
           AND re IS NOT NULL AND kind IS DISTINCT FROM 'ask'
        UNION ALL
        SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
         ORDER BY id NULLS LAST
    LOOP
        hi := COALESCE(r.id, p_hi + 1);
        IF hi > lo THEN
            INSERT INTO contracts(id, sender, assignee, ts, project, ack)
            SELECT id, from_s, to_s, ts, project,
                   wake IS NOT DISTINCT FROM false
                   OR COALESCE(kind IN ('receipt', 'status'), false)
              FROM messages
             WHERE id >= lo AND id < hi AND trantor_ledger_traffic(from_s, to_s)
            ON CONFLICT (id) DO NOTHING;
            answered := '{}';
            -- The messages that can answer: plain (not asks), with a contract of their
            -- recipient's to their sender open below them now. Answering only closes
            -- contracts, so no other message of the segment can.
            -- (A lateral probe with LIMIT, not EXISTS: the planner may turn EXISTS into a hash
            -- of every open contract, a cost that follows the open contracts, not the pass.)
            cand := ARRAY(
                SELECT m.id FROM messages m
                 CROSS JOIN LATERAL (
                     SELECT 1 FROM contracts c
                      WHERE c.sender = m.to_s AND c.assignee = m.from_s
                        AND c.answer_id IS NULL AND NOT c.ack AND c.id < m.id
                      LIMIT 1) open_below
                 WHERE m.id >= lo AND m.id < hi AND trantor_ledger_traffic(m.from_s, m.to_s)
                   AND m.kind IS DISTINCT FROM 'ask');
            SELECT max(n) INTO waves FROM (
                SELECT count(*) AS n FROM messages
                 WHERE id = ANY(cand)
                 GROUP BY LEAST(from_s, to_s), GREATEST(from_s, to_s)) pairs;
            FOR w IN 1..COALESCE(waves, 0) LOOP
                SELECT array_agg(c.id), array_agg(k.id) INTO cs, rs FROM (
                    SELECT id, ts, from_s, to_s FROM (
                        SELECT m.id, m.ts, m.from_s, m.to_s,
                               row_number() OVER (PARTITION BY LEAST(m.from_s, m.to_s),
                                                               GREATEST(m.from_s, m.to_s)
                                                  ORDER BY m.id) AS wave
                          FROM messages m
                         WHERE m.id = ANY(cand)) numbered
                     WHERE wave = w) k
                 CROSS JOIN LATERAL (
                     SELECT id FROM contracts
                      WHERE sender = k.to_s AND assignee = k.from_s AND answer_id IS NULL
                        AND NOT ack AND ts >= k.ts - 86400000 AND id < k.id
                      ORDER BY ts, id LIMIT 1) c;
                IF cs IS NOT NULL THEN
                    UPDATE contracts SET answer_id = u.reply, by_re = false
                      FROM unnest(cs, rs) AS u(contract, reply) WHERE contracts.id = u.contract;
                    answered := answered || cs;
                END IF;
            END LOOP;
            INSERT INTO contract_peers AS p(sender, peer, last_reply, last_answered)
            SELECT s, a, max(reply), max(ans) FROM (
                SELECT to_s AS s, from_s AS a, id AS reply, 0::BIGINT AS ans FROM messages
                 WHERE id >= lo AND id < hi AND trantor_ledger_traffic(from_s, to_s)
                UNION ALL
                SELECT sender, assignee, 0, id FROM contracts WHERE id = ANY(answered)) x
             GROUP BY s, a
            ON CONFLICT (sender, peer) DO UPDATE SET
                last_reply = GREATEST(p.last_reply, excluded.last_reply),
                last_answered = GREATEST(p.last_answered, excluded.last_answered);
        END IF;
        IF r.id IS NOT NULL THEN
            PERFORM trantor_ledger_apply(r.id, r.ts, r.from_s, r.to_s, r.project, r.re,
                                         r.kind, r.wake);
            lo := r.id + 1;
        END IF;
    END LOOP;
END $$;
ALTER FUNCTION trantor_ledger_range(BIGINT, BIGINT) SET plan_cache_mode = force_custom_plan;

CREATE FUNCTION trantor_ledger_catch_up() RETURNS BIGINT LANGUAGE plpgsql AS $$
DECLARE
    done BIGINT;
    tip BIGINT;
    step BIGINT;
BEGIN
    SELECT n INTO tip FROM counters WHERE name = 'messages_tip';
    SELECT n INTO done FROM counters WHERE name = 'ledger_tip';
    IF done >= tip THEN
        RETURN done;
    END IF;
    PERFORM pg_advisory_xact_lock(8390876182772412932);
    SELECT n INTO done FROM counters WHERE name = 'ledger_tip';
    SELECT n INTO tip FROM counters WHERE name = 'messages_tip';
    WHILE done < tip LOOP
        -- At most 10,000 ids a range, so a long backlog's waves stay short.
        step := LEAST(tip, done + 10000);
        PERFORM trantor_ledger_range(done, step);
        done := step;
    END LOOP;
    UPDATE counters SET n = done WHERE name = 'ledger_tip' AND n < done;
    RETURN done;
END $$;

CREATE FUNCTION trantor_ledger_put(m_id BIGINT) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    done BIGINT;
    m RECORD;
BEGIN
    PERFORM pg_advisory_xact_lock(8390876182772412932);
    SELECT n INTO done FROM counters WHERE name = 'ledger_tip';
    -- Above the tip, the next pass takes it in id order. At or below it no pass will: the
    -- messages committed before it first (a pass), then it alone, as the trigger did.
    IF m_id <= done THEN
        PERFORM trantor_ledger_catch_up();
        SELECT id, ts, from_s, to_s, project, re, kind, wake INTO m FROM messages
         WHERE id = m_id AND to_s <> 'all';
        IF FOUND THEN
            PERFORM trantor_ledger_apply(m.id, m.ts, m.from_s, m.to_s, m.project, m.re,
                                         m.kind, m.wake);
        END IF;
    END IF;
END $$;
"#;

/// Migrations in order: entry `i` brings a database from version `i` to `i + 1`.
const MIGRATIONS: [&str; SCHEMA_VERSION as usize] = [V1, V2, V3, V4, V5, V6, V7, V8];

/// Bring the database to [`SCHEMA_VERSION`], or explain why it cannot be.
pub(crate) fn migrate(client: &mut Client, url: &str) -> Result<(), StoreError> {
    let mut tx = client
        .transaction()
        .map_err(err(url, "cannot begin the migration"))?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&K_MIGRATE])
        .map_err(err(url, "cannot lock the database for migration"))?;
    tx.batch_execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
        .map_err(err(
            url,
            "cannot read the schema (is this database writable by this user?)",
        ))?;
    migrate::migrate(&mut Versioned { tx: &mut tx, url }, url, &MIGRATIONS)?;
    tx.commit().map_err(err(url, "cannot commit the schema"))
}

fn err(url: &str, what: &str) -> impl Fn(postgres::Error) -> StoreError {
    let (url, what) = (url.to_string(), what.to_string());
    move |e| unavailable_or_open(&url, &what, e)
}

/// The `schema_version` table, inside the migration transaction.
struct Versioned<'a, 't> {
    tx: &'a mut Transaction<'t>,
    url: &'a str,
}

impl SchemaTx for Versioned<'_, '_> {
    fn stored_version(&mut self) -> Result<Option<i64>, StoreError> {
        let rows = self
            .tx
            .query("SELECT version FROM schema_version", &[])
            .map_err(err(self.url, "cannot read the schema version"))?;
        match rows.as_slice() {
            [] => Ok(None),
            [row] => row
                .try_get::<_, i32>(0)
                .map(|v| Some(i64::from(v)))
                .map_err(err(self.url, "the stored schema version is not a number")),
            _ => Err(StoreError::Open {
                path: self.url.to_string(),
                context: format!(
                    "schema_version holds {} rows instead of one; refusing to guess",
                    rows.len()
                ),
                source: None,
            }),
        }
    }

    fn apply(&mut self, sql: &str) -> Result<(), StoreError> {
        self.tx
            .batch_execute(sql)
            .map_err(err(self.url, "migration"))
    }

    fn record_version(&mut self, version: i64) -> Result<(), StoreError> {
        let version = i32::try_from(version)
            .map_err(|e| StoreError::db_from("schema version out of range", e))?;
        self.tx
            .execute("DELETE FROM schema_version", &[])
            .and_then(|_| {
                self.tx.execute(
                    "INSERT INTO schema_version(version) VALUES ($1)",
                    &[&version],
                )
            })
            .map(|_| ())
            .map_err(err(self.url, "cannot record the schema version"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The ledger's functions lock the key the crate's Rust locks with (SQL cannot name the
    /// constant, so version 8 carries it as a literal).
    #[test]
    fn the_ledger_functions_lock_the_crates_ledger_key() {
        let literal = format!("pg_advisory_xact_lock({})", crate::K_LEDGER);
        assert_eq!(V8.matches(&literal).count(), 2, "{literal} in V8");
        assert_eq!(V8.matches("pg_advisory_xact_lock(").count(), 2);
    }
}

//! The PostgreSQL store: the conformance suite every backend runs, each test in a database of
//! its own created for it and dropped after it, plus what only a shared database does (two
//! stores on one database, the lease, a newer schema refused). The server is `TRANTOR_TEST_PG`
//! (default `postgres://postgres@127.0.0.1:5432`); without one the tests skip with a message,
//! and fail under `CI=true`.

use std::sync::atomic::{AtomicU32, Ordering};
use trantor_store::Store;
use trantor_store::conformance::{self, Fixture};
use trantor_store_postgres::{PgOptions, PgStore};

/// A database for one test; dropped (with any connections left) when this is dropped.
pub struct PgDb {
    admin: String,
    name: String,
    /// URL of the test database.
    pub url: String,
}

fn server() -> String {
    std::env::var("TRANTOR_TEST_PG")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432".into())
        .trim_end_matches('/')
        .to_string()
}

fn ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0")
}

/// Run blocking driver work off the async runtime (the blocking client refuses to run on
/// one).
pub fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::spawn(f)
        .join()
        .expect("blocking helper thread")
}

/// A fresh database, or `None` (after saying why) when no server answers outside CI.
pub fn pg_db() -> Option<PgDb> {
    static N: AtomicU32 = AtomicU32::new(0);
    let admin = format!("{}/postgres", server());
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let name = format!(
        "trantor_test_{}_{}_{}",
        std::process::id(),
        nanos,
        N.fetch_add(1, Ordering::Relaxed)
    );
    let (a, n) = (admin.clone(), name.clone());
    let made = blocking(move || -> Result<(), String> {
        let mut c = postgres::Client::connect(&a, postgres::NoTls).map_err(|e| e.to_string())?;
        c.batch_execute(&format!("CREATE DATABASE {n}"))
            .map_err(|e| e.to_string())
    });
    match made {
        Ok(()) => Some(PgDb {
            url: format!("{}/{name}", server()),
            admin,
            name,
        }),
        Err(e) if ci() => panic!("PostgreSQL is required under CI ({admin}): {e}"),
        Err(e) => {
            eprintln!("SKIP: no PostgreSQL at {admin} ({e}); set TRANTOR_TEST_PG");
            None
        }
    }
}

impl PgDb {
    /// Open the store on this database (listener, lease and ledger threads included).
    pub fn open(&self) -> PgStore {
        self.open_with(PgOptions {
            catchup: std::time::Duration::from_millis(200),
            lease_check: std::time::Duration::from_millis(200),
            ..Default::default()
        })
    }

    /// Open the store on this database with `opts`.
    pub fn open_with(&self, opts: PgOptions) -> PgStore {
        let url = self.url.clone();
        blocking(move || PgStore::open_with(&url, opts)).expect("open the postgres store")
    }

    /// Run SQL on this database directly.
    pub fn sql(&self, sql: &str) -> Result<(), String> {
        let (url, sql) = (self.url.clone(), sql.to_string());
        blocking(move || {
            let mut c =
                postgres::Client::connect(&url, postgres::NoTls).map_err(|e| e.to_string())?;
            c.batch_execute(&sql).map_err(|e| e.to_string())
        })
    }
}

impl Drop for PgDb {
    fn drop(&mut self) {
        let (a, n) = (self.admin.clone(), self.name.clone());
        let r = blocking(move || -> Result<(), String> {
            let mut c =
                postgres::Client::connect(&a, postgres::NoTls).map_err(|e| e.to_string())?;
            c.batch_execute(&format!("DROP DATABASE IF EXISTS {n} WITH (FORCE)"))
                .map_err(|e| e.to_string())
        });
        if let Err(e) = r {
            eprintln!("cannot drop test database {}: {e}", self.name);
        }
    }
}

impl Fixture for PgDb {
    type S = PgStore;
    fn open(&self) -> PgStore {
        PgDb::open(self)
    }
    fn close(&self, s: PgStore) {
        blocking(move || drop(s));
    }
}

trantor_store::conformance_suite!(pg_db());

/// What only this backend says about itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_describes_itself() {
    let Some(db) = pg_db() else { return };
    let s = db.open();
    assert!(s.describe().starts_with("postgres:"), "{}", s.describe());
    assert_eq!(s.synchronous(), "full");
    blocking(move || drop(s));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_refuses_a_newer_schema() {
    let Some(db) = pg_db() else { return };
    drop(db.open());
    db.sql("UPDATE schema_version SET version = 999")
        .expect("bump");
    let url = db.url.clone();
    let err = blocking(move || PgStore::open(&url)).expect_err("newer schema refused");
    let msg = err.to_string();
    assert!(msg.contains("999") && msg.contains("newer"), "{msg}");
}

/// Send a message to `zed` through `a` and wait (5 s at most) until `watch` announces it;
/// returns its id.
async fn heard(
    a: &PgStore,
    watch: &mut tokio::sync::broadcast::Receiver<trantor_store::Change>,
) -> i64 {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
    let m = conformance::new_msg("a", "zed", 99, "wake b");
    let id = a
        .write(move |tx| tx.insert_message(m, &[]))
        .await
        .expect("send")
        .id;
    let want = trantor_store::Change::Message {
        id,
        to: "zed".into(),
    };
    loop {
        let got = tokio::time::timeout_at(deadline, watch.recv())
            .await
            .expect("the watcher is told within the deadline")
            .expect("watch open");
        if got == want {
            return id;
        }
    }
}

/// Two stores on one database (two hubs): ids never collide, each sees the other's writes,
/// and a message committed through one is announced to the other's watcher.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pg_two_stores_share_one_database() {
    let Some(db) = pg_db() else { return };
    let a = db.open();
    let b = db.open();
    let mut watch_b = b.watch().expect("postgres stores are watchable");
    let mut sent = Vec::new();
    for i in 0..20 {
        let (x, y) = (a.clone(), b.clone());
        let m1 = conformance::new_msg("a", "r", i, "via a");
        let m2 = conformance::new_msg("b", "r", i, "via b");
        let (r1, r2) = tokio::join!(
            x.write(move |tx| tx.insert_message(m1, &[])),
            y.write(move |tx| tx.insert_message(m2, &[]))
        );
        sent.push(r1.expect("a").id);
        sent.push(r2.expect("b").id);
    }
    let mut sorted = sent.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), sent.len(), "ids never collide");
    let seen: Vec<i64> = b
        .read(|tx| tx.messages_for("r", 0, 0))
        .await
        .expect("read")
        .into_iter()
        .map(|m| m.id)
        .collect();
    assert_eq!(seen, sorted);
    // The watcher on b hears a's messages (its own are rung in-process, not echoed).
    heard(&a, &mut watch_b).await;
    // Exactly one of the two holds the periodic-work lease.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let (la, lb) = (a.lease().expect("lease"), b.lease().expect("lease"));
        if la.held != lb.held && la.holder.is_some() && la.holder == lb.holder {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "one lease holder: {la:?} {lb:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    blocking(move || {
        drop(a);
        drop(b);
    });
}

/// Two hubs' writers under load at once, their batches serialised by the write lock: both
/// finish (the lock changes hands), and the ids commit in order — a reader following a cursor
/// (`id > last seen`) throughout, as a `/poll` does, ends with every message and no id skipped.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pg_two_busy_writers_take_turns_and_commit_ids_in_order() {
    let Some(db) = pg_db() else { return };
    let (a, b, reader) = (db.open(), db.open(), db.open());
    const PER_TASK: i64 = 40;
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let follow = {
        let (reader, done) = (reader.clone(), done.clone());
        tokio::spawn(async move {
            let (mut cursor, mut seen) = (0i64, Vec::new());
            loop {
                let last = done.load(std::sync::atomic::Ordering::SeqCst);
                let page = reader
                    .read(move |tx| tx.messages_for("r", cursor, 0))
                    .await
                    .expect("read");
                for m in page {
                    assert!(m.id > cursor, "ids come in order");
                    cursor = m.id;
                    seen.push(m.id);
                }
                if last {
                    return seen;
                }
                tokio::task::yield_now().await;
            }
        })
    };
    let mut writers = tokio::task::JoinSet::new();
    for (hub, store) in [("a", &a), ("b", &b)] {
        for t in 0..8 {
            let store = store.clone();
            writers.spawn(async move {
                let mut ids = Vec::new();
                for i in 0..PER_TASK {
                    let m = conformance::new_msg(hub, "r", i, &format!("{hub}{t}-{i}"));
                    let msg = store
                        .write(move |tx| tx.insert_message(m, &[]))
                        .await
                        .expect("write");
                    ids.push(msg.id);
                }
                ids
            });
        }
    }
    let mut written = Vec::new();
    let all = async {
        while let Some(r) = writers.join_next().await {
            written.extend(r.expect("writer task"));
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(120), all)
        .await
        .expect("both hubs' writes finish: the lock changes hands");
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    let seen = follow.await.expect("reader task");
    written.sort_unstable();
    assert_eq!(written.len(), 2 * 8 * PER_TASK as usize);
    assert_eq!(
        seen, written,
        "the cursor saw every message once, none skipped"
    );
    blocking(move || {
        drop(a);
        drop(b);
        drop(reader);
    });
}

/// Messages no notification announced (written here straight into the tables, as a notification
/// lost across a reconnect leaves them) are found by the catch-up read, which reads their
/// recipients back: the watcher is told whose polls to wake, not to wake every one; past what a
/// catch-up reads back, it is told to wake every one.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pg_catch_up_names_the_recipients_it_missed() {
    let Some(db) = pg_db() else { return };
    let a = db.open();
    let b = db.open();
    let mut watch_b = b.watch().expect("postgres stores are watchable");
    async fn next(
        watch: &mut tokio::sync::broadcast::Receiver<trantor_store::Change>,
    ) -> trantor_store::Change {
        tokio::time::timeout(std::time::Duration::from_secs(5), watch.recv())
            .await
            .expect("b is told within the deadline")
            .expect("watch open")
    }
    // b's listener is connected (and has read the tip) once it hears a's message.
    let id = heard(&a, &mut watch_b).await;
    let silent = |n: u32, to: &str| {
        format!(
            "INSERT INTO messages(ts, from_s, to_s, project, text)
               SELECT 1, 'x', '{to}', 'p', 'unannounced ' || i FROM generate_series(1, {n}) i;
             UPDATE counters SET n = (SELECT max(id) FROM messages) WHERE name = 'messages_tip';"
        )
    };
    db.sql(&format!("{}{}", silent(2, "bob"), silent(1, "all")))
        .expect("insert without notifying");
    let tip = id + 3;
    match next(&mut watch_b).await {
        trantor_store::Change::Missed { through, mut to } => {
            to.sort();
            assert_eq!((through, to), (tip, vec!["all".to_string(), "bob".into()]));
        }
        other => panic!("expected the missed recipients, got {other:?}"),
    }
    db.sql(&silent(1100, "carol"))
        .expect("insert many without notifying");
    assert_eq!(
        next(&mut watch_b).await,
        trantor_store::Change::Tip(tip + 1100)
    );
    blocking(move || {
        drop(a);
        drop(b);
    });
}

/// The writer hands out message and event ids itself inside its locked batch (so an insert
/// costs no round trip): the ids of concurrent writes are distinct and increasing, what commits
/// is what each write was told, and the id sequences are moved past them, so an insert taking
/// its id from the sequence (a tool on the database) never collides with one.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pg_writer_ids_move_the_sequences() {
    let Some(db) = pg_db() else { return };
    let s = db.open();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..32 {
        let s = s.clone();
        tasks.spawn(async move {
            let m = conformance::new_msg("a", "r", i, &format!("m{i}"));
            s.write(move |tx| {
                let msg = tx.insert_message(m, &[7])?;
                let ev = tx.insert_event(trantor_store::NewEvent {
                    ts: i,
                    kind: "message".into(),
                    refs: vec![7],
                    ..Default::default()
                })?;
                Ok((msg.id, ev.id, msg.text))
            })
            .await
        });
    }
    let mut got = Vec::new();
    while let Some(r) = tasks.join_next().await {
        got.push(r.expect("task").expect("write"));
    }
    let mut ids: Vec<i64> = got.iter().map(|g| g.0).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 32, "message ids are distinct: {got:?}");
    let stored = s.read(|tx| tx.messages_for("r", 0, 0)).await.expect("read");
    for (id, _, text) in &got {
        assert!(
            stored.iter().any(|m| m.id == *id && &m.text == text),
            "message {id} ({text}) committed as told"
        );
    }
    let counts = s.read(|tx| tx.counts()).await.expect("counts");
    assert_eq!(counts.messages, 32, "{counts:?}");
    assert_eq!(counts.events, 32, "{counts:?}");
    // A raw insert takes its id from the sequence: past every id the writer handed out.
    db.sql(
        "INSERT INTO messages(ts, from_s, to_s, project, text) VALUES (1, 'x', 'r', 'p', 'raw');
         INSERT INTO events(ts, type, project, by_s, data) VALUES (1, 't', 'p', 'x', '{}')",
    )
    .expect("the sequences are past the writer's ids");
    let m = conformance::new_msg("a", "r", 99, "after");
    let last = s
        .write(move |tx| tx.insert_message(m, &[]))
        .await
        .expect("write after");
    let raw_max = ids.last().copied().unwrap_or(0) + 1;
    assert!(last.id > raw_max, "{} after the raw insert's id", last.id);
    blocking(move || drop(s));
}

/// A write whose queued insert fails (here: a constraint added behind the store's back) is
/// seen at the batch's next round trip: the whole batch is rolled back, each of its writes gets
/// an error and keeps nothing, and the next batch works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_a_failed_queued_insert_rolls_the_batch_back() {
    let Some(db) = pg_db() else { return };
    let s = db.open();
    db.sql("ALTER TABLE events ADD CONSTRAINT no_boom CHECK (type <> 'boom')")
        .expect("constraint");
    let m = conformance::new_msg("a", "r", 1, "doomed");
    let err = s
        .write(move |tx| {
            tx.insert_message(m, &[])?;
            tx.insert_event(trantor_store::NewEvent {
                ts: 1,
                kind: "boom".into(),
                ..Default::default()
            })?;
            Ok(())
        })
        .await
        .expect_err("the batch fails");
    // The error names the statement that failed, not the COMMIT that found out.
    let report = err.report();
    assert!(
        report.contains("insert_rows") && report.contains("no_boom"),
        "{report}"
    );
    let m = conformance::new_msg("a", "r", 2, "kept");
    let kept = s
        .write(move |tx| tx.insert_message(m, &[]))
        .await
        .expect("the next write works");
    let stored = s.read(|tx| tx.messages_for("r", 0, 0)).await.expect("read");
    assert_eq!(
        stored
            .iter()
            .map(|m| (m.id, m.text.as_str()))
            .collect::<Vec<_>>(),
        vec![(kept.id, "kept")],
        "nothing of the failed batch is kept"
    );
    blocking(move || drop(s));
}

/// A database written while `stored` was still logged as a `delivery` row reads that row once
/// (`conformance::a_logged_stored_state_is_read_once`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_a_logged_stored_state_is_read_once() {
    let Some(db) = pg_db() else { return };
    let s = db.open();
    let id = s
        .write(|tx| tx.insert_message(conformance::new_msg("boss", "seat", 10, "old"), &[]))
        .await
        .expect("send")
        .id;
    let opened = db.dump(&format!(
        "WITH d AS (INSERT INTO delivery(msg_id, state, ts, session)
                    VALUES ({id}, 'stored', 11, 'seat') RETURNING seq)
         INSERT INTO delivery_open(msg_id, session, seq) SELECT {id}, 'seat', seq FROM d
         RETURNING msg_id::text"
    ));
    assert_eq!(opened, id.to_string());
    conformance::a_logged_stored_state_is_read_once(&s, id).await;
    blocking(move || drop(s));
}

impl PgDb {
    /// The first column of every row `sql` returns, one line each.
    fn dump(&self, sql: &str) -> String {
        let (url, sql) = (self.url.clone(), sql.to_string());
        blocking(move || {
            let mut c = postgres::Client::connect(&url, postgres::NoTls).expect("connect");
            c.query(&sql, &[])
                .expect("dump query")
                .iter()
                .map(|r| r.get::<_, String>(0))
                .collect::<Vec<_>>()
                .join("\n")
        })
    }
}

/// The contract ledger kept over many messages at once (schema version 8: a ledger pass takes
/// every message committed since the last, in segments cut by the replies by `re`, and in each
/// the contracts in one statement and the answers in waves by pair) ends exactly as the same
/// messages written one write each, with a pass after each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_ledger_over_a_batch_matches_one_write_each() {
    let (Some(one), Some(many)) = (pg_db(), pg_db()) else {
        return;
    };
    let msg = |from: &str, to: &str, ts: i64, kind: Option<&str>, re: Option<i64>| {
        let mut m = conformance::new_msg(from, to, ts, &format!("{from}>{to}@{ts}"));
        m.kind = kind.map(str::to_string);
        m.re = re;
        m
    };
    // Ids are handed out in order from 1 in both databases, so `re` can name them.
    let steps: Vec<Vec<trantor_store::NewMessage>> = vec![
        vec![
            msg("a", "b", 1, None, None),
            msg("c", "d", 2, Some("ask"), None),
            msg("e", "f", 3, None, None),
            msg("g", "h", 4, None, None),
        ],
        // The set path: distinct pairs, no `re`: answers (b→a, d→c), an ack, a status, an
        // ask, a broadcast and a message to oneself (kept out of the ledger).
        vec![
            msg("b", "a", 10, None, None),
            msg("d", "c", 11, None, None),
            {
                let mut m = msg("f", "e", 12, None, None);
                m.wake = Some(false);
                m
            },
            msg("h", "i", 13, Some("status"), None),
            msg("x", "y", 14, Some("ask"), Some(1)),
            msg("z", "all", 15, None, None),
            msg("q", "q", 16, None, None),
        ],
        // In waves (schema 7): pairs repeated, no `re`: a contract, its answer and the next
        // contract on one pair, two contracts to one seat and its answer on another, an ask
        // among them (it answers nothing), each pair's messages apart in the batch.
        vec![
            msg("m", "n", 17, None, None),
            msg("o", "p", 17, None, None),
            msg("n", "m", 18, None, None),
            msg("o", "p", 18, None, None),
            msg("m", "n", 19, None, None),
            msg("p", "o", 19, Some("ask"), None),
            msg("p", "o", 19, None, None),
            msg("r", "s", 19, None, None),
            msg("n", "m", 19, None, None),
        ],
        // Segments: replies by `re` among repeated pairs, each after the messages before it;
        // one answers a contract its sender sent to someone else (another pair), and the
        // messages after it see what it wrote.
        vec![
            msg("t", "u", 30, None, None),
            msg("t", "v", 30, None, None),
            msg("u", "t", 31, None, None),
            msg("v", "t", 31, None, Some(21)),
            msg("t", "u", 32, None, None),
            msg("u", "t", 32, None, None),
            msg("v", "t", 33, None, None),
            msg("t", "v", 33, None, None),
            msg("u", "t", 34, None, Some(25)),
            msg("t", "u", 35, None, None),
        ],
        // A pair twice, and a reply by `re`.
        vec![
            msg("a", "b", 20, None, None),
            msg("b", "a", 21, None, None),
            msg("h", "g", 22, None, Some(4)),
            msg("a", "b", 23, None, None),
        ],
    ];
    let (s1, s2) = (one.open(), many.open_with(rare_passes()));
    for step in &steps {
        for m in step.clone() {
            s1.write(move |tx| tx.insert_message(m, &[]))
                .await
                .expect("one write each");
            s1.ledger_current().await.expect("a pass after each");
        }
        let batch = step.clone();
        s2.write(move |tx| {
            for m in batch {
                tx.insert_message(m, &[])?;
            }
            Ok(())
        })
        .await
        .expect("one write for the step");
    }
    s2.ledger_current().await.expect("one pass for every step");
    blocking(move || drop((s1, s2)));
    for sql in [
        "SELECT row_to_json(c)::text FROM contracts c ORDER BY id",
        "SELECT row_to_json(p)::text FROM contract_peers p ORDER BY sender, peer",
        "SELECT row_to_json(t)::text FROM contract_tally t
          ORDER BY sender, bucket, assignee, project",
    ] {
        let (a, b) = (one.dump(sql), many.dump(sql));
        assert!(!a.is_empty(), "{sql}: the ledger has rows");
        assert_eq!(a, b, "{sql}");
    }
    // The tally kept through the set path and the row path is the contracts counted.
    let kept = "SELECT sender || ' ' || bucket || ' ' || assignee || ' ' || project || ' '
                       || open || ' ' || ack || ' ' || answered
                  FROM contract_tally ORDER BY sender, bucket, assignee, project";
    let counted = "SELECT sender || ' ' || ts / 3600000 || ' ' || assignee || ' ' || project
                          || ' ' || count(*) FILTER (WHERE answer_id IS NULL AND NOT ack)
                          || ' ' || count(*) FILTER (WHERE answer_id IS NULL AND ack)
                          || ' ' || count(answer_id)
                     FROM contracts GROUP BY sender, ts / 3600000, assignee, project
                    ORDER BY sender, ts / 3600000, assignee, project";
    assert_eq!(many.dump(kept), many.dump(counted), "the kept tally");
    // The answers the steps were made for are there.
    let answered = many.dump(
        "SELECT id || '>' || answer_id FROM contracts WHERE answer_id IS NOT NULL ORDER BY id",
    );
    assert!(
        answered.contains("1>5") && answered.contains("2>6"),
        "{answered}"
    );
    // The waves: each answer went to its pair's oldest open contract as it stood.
    // The segments: 21 answered by 23, then taken over by the reply by `re` (24); the rest
    // answered by the messages after it as one write each answers them.
    for a in [
        "12>14", "13>18", "16>20", "21>24", "23>25", "22>27", "24>28", "25>29", "26>30",
    ] {
        assert!(answered.lines().any(|l| l == a), "{a} in {answered}");
    }
}

/// Writes that share one batch are undone alone when they fail: one that only queued rows (its
/// rows never sent) and one that made a round trip first (rolled back to its savepoint); the
/// others commit, and a message's delivery states end in `delivery_open` as its last one says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_a_failed_write_in_a_batch_is_undone_alone() {
    use trantor_proto::{DeliveryEntry, DeliveryState};
    let Some(db) = pg_db() else { return };
    let s = db.open();
    let state = |state: DeliveryState| DeliveryEntry {
        state,
        ts: 1,
        session: "r".into(),
        instance: None,
        turn: None,
        pid: None,
        outcome: None,
        reason: None,
    };
    // Hold the store's write lock (crates/store-postgres K_WRITE) from another connection so
    // every write below is queued before the writer's first batch can begin.
    let (locked_tx, locked_rx) = std::sync::mpsc::channel();
    let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
    let url = db.url.clone();
    let holder = std::thread::spawn(move || {
        let mut c = postgres::Client::connect(&url, postgres::NoTls).expect("connect");
        c.execute("SELECT pg_advisory_lock($1)", &[&0x7472_616e_746f_7201_i64])
            .expect("lock");
        locked_tx.send(()).expect("say locked");
        let _ = release_rx.recv();
        c.execute(
            "SELECT pg_advisory_unlock($1)",
            &[&0x7472_616e_746f_7201_i64],
        )
        .expect("unlock");
    });
    locked_rx.recv().expect("locked");
    let first = s.write(|tx| tx.insert_message(conformance::new_msg("a", "r", 1, "first"), &[]));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while db.dump("SELECT count(*)::text FROM pg_locks WHERE locktype = 'advisory' AND NOT granted")
        == "0"
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the writer never waited for the lock"
        );
        std::thread::yield_now();
    }
    let queued_only = s.write(move |tx| {
        let m = tx.insert_message(conformance::new_msg("a", "r", 2, "queued, refused"), &[])?;
        tx.append_delivery(m.id, &state(DeliveryState::Stored))?;
        Err::<(), _>(trantor_store::StoreError::db("refused after queueing"))
    });
    let kept = s.write(move |tx| {
        let a = tx.insert_message(conformance::new_msg("a", "r", 3, "consumed"), &[])?;
        tx.append_delivery(a.id, &state(DeliveryState::Stored))?;
        tx.append_delivery(a.id, &state(DeliveryState::Consumed))?;
        let b = tx.insert_message(conformance::new_msg("a", "r", 4, "parked"), &[])?;
        tx.append_delivery(b.id, &state(DeliveryState::Stored))?;
        tx.append_delivery(b.id, &state(DeliveryState::Parked))?;
        Ok((a.id, b.id))
    });
    let read_then_refused = s.write(move |tx| {
        let m = tx.insert_message(conformance::new_msg("a", "r", 5, "read, refused"), &[])?;
        // A read: a round trip, with a savepoint ahead of this write's rows.
        tx.message(m.id)?;
        tx.insert_message(conformance::new_msg("a", "r", 6, "read, refused 2"), &[])?;
        Err::<(), _>(trantor_store::StoreError::db("refused after a read"))
    });
    let read_then_kept = s.write(move |tx| {
        let m = tx.insert_message(conformance::new_msg("a", "r", 7, "read, kept"), &[])?;
        let seen = tx.message(m.id)?.map(|m| m.text);
        Ok(seen)
    });
    release_tx.send(()).expect("release");
    let (first, queued_only, kept, read_then_refused, read_then_kept) =
        tokio::join!(first, queued_only, kept, read_then_refused, read_then_kept);
    holder.join().expect("lock holder");
    first.expect("first");
    assert!(queued_only.is_err());
    assert!(read_then_refused.is_err());
    let (consumed, parked) = kept.expect("kept");
    assert_eq!(
        read_then_kept.expect("read, kept").as_deref(),
        Some("read, kept"),
        "a write reads its own queued rows"
    );
    let texts: Vec<String> = s
        .read(|tx| tx.messages_for("r", 0, 0))
        .await
        .expect("read")
        .into_iter()
        .map(|m| m.text)
        .collect();
    assert_eq!(texts, ["first", "consumed", "parked", "read, kept"]);
    let counts = s.read(|tx| tx.counts()).await.expect("counts");
    assert_eq!(counts.messages, 4, "{counts:?}");
    let (open, total) = s.read(|tx| tx.delivery_open("r", 0)).await.expect("open");
    assert_eq!(total, 1);
    assert_eq!(
        open.iter().map(|o| (o.id, o.state)).collect::<Vec<_>>(),
        vec![(parked, DeliveryState::Parked)]
    );
    let states = s
        .read(move |tx| tx.delivery_states(consumed))
        .await
        .expect("states");
    assert_eq!(
        states.iter().map(|e| e.state).collect::<Vec<_>>(),
        vec![DeliveryState::Stored, DeliveryState::Consumed]
    );
    blocking(move || drop(s));
}

/// Options whose ledger pass thread runs a pass only when a reader asks for one.
fn rare_passes() -> PgOptions {
    PgOptions {
        ledger_pace: std::time::Duration::from_secs(3600),
        catchup: std::time::Duration::from_secs(3600),
        ..Default::default()
    }
}

/// The ledger's three tables, row by row, for comparing two databases.
fn ledger_dump(db: &PgDb) -> String {
    [
        "SELECT row_to_json(c)::text FROM contracts c ORDER BY id",
        "SELECT row_to_json(p)::text FROM contract_peers p ORDER BY sender, peer",
        "SELECT row_to_json(t)::text FROM contract_tally t WHERE open + ack + answered > 0
          ORDER BY sender, bucket, assignee, project",
    ]
    .map(|sql| db.dump(sql))
    .join("\n--\n")
}

/// The same random traffic (contracts and their plain answers, replies by `re`, asks,
/// receipts, `wake:false`, broadcasts, hours and days between messages) kept by a pass after
/// every message and by passes at random points over random batches: the ledgers are equal,
/// row for row. A small deterministic generator, so a failing seed is reproducible.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_ledger_passes_at_any_points_match_a_pass_per_message() {
    for seed in 1..=4u64 {
        let (Some(one), Some(many)) = (pg_db(), pg_db()) else {
            return;
        };
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut rnd = move |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        let who = ["a", "b", "c", "d", "e"];
        let (mut ts, mut msgs) = (1_700_000_000_000i64, Vec::new());
        for id in 1..=300i64 {
            ts += match rnd(40) {
                0 => 90_000_000,
                1 => -5_000,
                n => [1, 1_000, 60_000, 3_600_000][(n % 4) as usize],
            };
            let from = who[rnd(3 + 2 * (id % 2) as u64) as usize];
            let to = match rnd(12) {
                0 => "all",
                n => who[(n % 5) as usize],
            };
            let mut m = conformance::new_msg(from, to, ts, &format!("m{id}"));
            m.kind = match rnd(9) {
                0 => Some("ask".into()),
                1 => Some("receipt".into()),
                2 => Some("status".into()),
                _ => None,
            };
            m.wake = match rnd(7) {
                0 => Some(false),
                1 => Some(true),
                _ => None,
            };
            if id > 1 && rnd(4) == 0 {
                m.re = Some(id - 1 - rnd((id - 1).min(30) as u64) as i64);
            }
            msgs.push(m);
        }
        let (s1, s2) = (one.open(), many.open_with(rare_passes()));
        for m in msgs.clone() {
            s1.write(move |tx| tx.insert_message(m, &[]))
                .await
                .expect("one write each");
            s1.ledger_current().await.expect("a pass after each");
        }
        let mut rest = msgs.as_slice();
        while !rest.is_empty() {
            let n = [1, 2, 5, 16, 40][rnd(5) as usize].min(rest.len());
            let batch = rest[..n].to_vec();
            rest = &rest[n..];
            s2.write(move |tx| {
                batch
                    .into_iter()
                    .try_for_each(|m| tx.insert_message(m, &[]).map(|_| ()))
            })
            .await
            .expect("a batch");
            if rnd(3) == 0 {
                s2.ledger_current().await.expect("a pass");
            }
        }
        s2.ledger_current().await.expect("the last pass");
        blocking(move || drop((s1, s2)));
        let (a, b) = (ledger_dump(&one), ledger_dump(&many));
        let answered = one.dump("SELECT count(answer_id)::text FROM contracts");
        assert!(
            answered.parse::<i64>().is_ok_and(|n| n > 20),
            "seed {seed}: the traffic answers contracts ({answered})"
        );
        assert_eq!(a, b, "seed {seed}");
    }
}

/// A hub that committed messages and died before its ledger pass leaves them to the next pass
/// of any hub: another store's reader asks for one and sees every contract, each once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_messages_a_dead_hub_left_unledgered_are_taken_by_the_next_pass() {
    let Some(db) = pg_db() else {
        return;
    };
    let dead = db.open_with(rare_passes());
    for i in 0..50i64 {
        let m = conformance::new_msg("orch", &format!("w{}", i % 5), 1_000 + i, "do it");
        conformance::send(&dead, m).await;
    }
    blocking(move || drop(dead));
    assert_eq!(db.dump("SELECT count(*)::text FROM contracts"), "0");
    let other = db.open_with(rare_passes());
    other.ledger_current().await.expect("a pass");
    let q = trantor_store::LedgerQuery {
        sender: "orch".into(),
        since_ts: 0,
        ..Default::default()
    };
    let rows = other
        .read(move |tx| tx.ledger_rows(&q, 0, 0, true))
        .await
        .expect("open rows");
    assert_eq!(rows.len(), 50, "every contract, once");
    assert_eq!(
        db.dump(
            "SELECT string_agg(n::text, ' ' ORDER BY name) FROM counters
                  WHERE name IN ('ledger_tip', 'messages_tip')"
        ),
        "50 50"
    );
    blocking(move || drop(other));
}

/// A pass that dies mid-way (its connection closed before `COMMIT`) is undone whole: the
/// reader waiting behind its lock gets a pass that does all of it, and nothing is counted twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_a_pass_that_dies_is_undone_and_done_again_once() {
    let Some(db) = pg_db() else {
        return;
    };
    let s = db.open_with(rare_passes());
    for i in 0..40i64 {
        let (from, to) = if i % 4 == 3 {
            ("w", "orch")
        } else {
            ("orch", "w")
        };
        conformance::send(&s, conformance::new_msg(from, to, 1_000 + i, "x")).await;
    }
    // A pass on a connection of its own, left open inside its transaction.
    let url = db.url.clone();
    let (held_tx, held_rx) = std::sync::mpsc::channel::<()>();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<String>();
    let dying = std::thread::spawn(move || {
        let mut c = postgres::Client::connect(&url, postgres::NoTls).expect("connect");
        c.batch_execute("BEGIN; SELECT trantor_ledger_catch_up()")
            .expect("a pass");
        let seen: i64 = c
            .query_one("SELECT count(*) FROM contracts", &[])
            .and_then(|r| r.try_get(0))
            .expect("its contracts");
        done_tx.send(seen.to_string()).expect("report");
        // Dropped without COMMIT: the server rolls the pass back.
        let _ = held_rx.recv();
        drop(c);
    });
    let seen_inside = done_rx.recv().expect("the dying pass ran");
    assert_eq!(seen_inside, "40", "the dying pass wrote the contracts");
    let waiting = {
        let s = s.clone();
        tokio::spawn(async move { s.ledger_current().await })
    };
    let _ = held_tx.send(());
    dying.join().expect("the dying pass's thread");
    waiting.await.expect("join").expect("the pass after it");
    let counts = db.dump(
        "SELECT count(*) || ' ' || count(answer_id) || ' '
                || (SELECT sum(open + ack + answered) FROM contract_tally)
           FROM contracts",
    );
    // Ten answers to orch's contracts (w's replies), nine to w's (orch's next message).
    assert_eq!(
        counts, "40 19 40",
        "each contract once, each answer once, tallied once"
    );
    blocking(move || drop(s));
}

/// An imported message (stored with its own id) whose id is below what the passes took is
/// applied at once, in its transaction; one above is left to the next pass, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_an_import_below_the_ledger_tip_is_applied_in_its_transaction() {
    let Some(db) = pg_db() else {
        return;
    };
    let s = db.open_with(rare_passes());
    let put = |id: i64, from: &str, to: &str, ts: i64| {
        let m = trantor_proto::Message {
            id,
            ts,
            from: from.into(),
            to: to.into(),
            project: "p".into(),
            text: format!("m{id}"),
            re: None,
            kind: None,
            wake: None,
        };
        let s = s.clone();
        async move {
            s.write(move |tx| tx.put_message(&m, &[]))
                .await
                .expect("put")
        }
    };
    assert!(put(10, "orch", "w", 1_000).await);
    assert!(put(20, "orch", "v", 2_000).await);
    // Above the tip: left to the next pass, which takes both in order.
    assert_eq!(db.dump("SELECT count(*)::text FROM contracts"), "0");
    s.ledger_current().await.expect("a pass");
    assert_eq!(
        db.dump("SELECT string_agg(id::text, ' ' ORDER BY id) FROM contracts"),
        "10 20"
    );
    // Below the tip (20): w answers contract 10 at once, without a pass.
    assert!(put(15, "w", "orch", 1_500).await);
    assert_eq!(
        db.dump(
            "SELECT string_agg(id || '>' || COALESCE(answer_id::text, '-'), ' ' ORDER BY id)
                   FROM contracts"
        ),
        "10>15 15>- 20>-"
    );
    blocking(move || drop(s));
}

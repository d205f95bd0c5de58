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
    /// Open the store on this database (listener and lease threads included).
    pub fn open(&self) -> PgStore {
        let url = self.url.clone();
        blocking(move || {
            PgStore::open_with(
                &url,
                PgOptions {
                    catchup: std::time::Duration::from_millis(200),
                    lease_check: std::time::Duration::from_millis(200),
                    ..Default::default()
                },
            )
        })
        .expect("open the postgres store")
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
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
    let m = conformance::new_msg("a", "zed", 99, "wake b");
    let id = a
        .write(move |tx| tx.insert_message(m, &[]))
        .await
        .expect("send")
        .id;
    loop {
        let got = tokio::time::timeout_at(deadline, watch_b.recv())
            .await
            .expect("b is told within the deadline")
            .expect("watch open");
        if got
            == (trantor_store::Change::Message {
                id,
                to: "zed".into(),
            })
        {
            break;
        }
    }
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
        report.contains("insert_event") && report.contains("no_boom"),
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

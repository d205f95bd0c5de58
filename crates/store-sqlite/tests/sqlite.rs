//! The SQLite store: the conformance suite every backend runs, and the checks that only make
//! sense for an embedded file (schema version, a corrupt file, `kill -9` while writing, page
//! size), plus throughput numbers run by hand.

use serde_json::json;
use std::collections::HashSet;
use trantor_store::conformance::{self, Fixture};
use trantor_store::{NewEvent, NewMessage, Store, StoreError};
use trantor_store_sqlite::{SqliteOptions, SqliteStore};

/// A fresh store in a temporary directory (in a subdirectory the store must create).
struct Sqlite(tempfile::TempDir);

impl Sqlite {
    fn new() -> Option<Sqlite> {
        Some(Sqlite(tempfile::tempdir().expect("tempdir")))
    }
}

impl Fixture for Sqlite {
    type S = SqliteStore;
    fn open(&self) -> SqliteStore {
        sqlite(&self.0)
    }
}

trantor_store::conformance_suite!(Sqlite::new());

fn sqlite(dir: &tempfile::TempDir) -> SqliteStore {
    SqliteStore::open(&dir.path().join("sub/hub.db")).expect("open")
}

#[test]
fn sqlite_refuses_a_newer_schema() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("hub.db");
    drop(SqliteStore::open(&path).expect("open"));
    {
        let conn = rusqlite::Connection::open(&path).expect("raw open");
        conn.execute(
            "UPDATE meta SET value = '999' WHERE key = 'schema_version'",
            [],
        )
        .expect("bump");
    }
    let err = SqliteStore::open(&path).expect_err("newer schema must be refused");
    let msg = err.to_string();
    assert!(msg.contains("999") && msg.contains("newer"), "{msg}");
}

/// A store written while `stored` was still logged as a `delivery` row reads that row once
/// (`conformance::a_logged_stored_state_is_read_once`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_logged_stored_state_is_read_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("hub.db");
    let s = SqliteStore::open(&path).expect("open");
    let id = s
        .write(|tx| tx.insert_message(conformance::new_msg("boss", "seat", 10, "old"), &[]))
        .await
        .expect("send")
        .id;
    drop(s);
    {
        let conn = rusqlite::Connection::open(&path).expect("raw open");
        conn.execute_batch(&format!(
            "INSERT INTO delivery(msg_id, state, ts, session) VALUES ({id}, 'stored', 11, 'seat');
             INSERT INTO delivery_open(msg_id, session, seq) VALUES ({id}, 'seat', last_insert_rowid());"
        ))
        .expect("the old shape");
    }
    let s = SqliteStore::open(&path).expect("reopen");
    conformance::a_logged_stored_state_is_read_once(&s, id).await;
}

/// A version-5 database (contracts, no tally) migrates to version 6 with the tally filled from
/// the contracts already there, and keeps it from then on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_migration_to_v6_fills_the_tally_from_the_contracts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("hub.db");
    let s = SqliteStore::open(&path).expect("open");
    for i in 0..40i64 {
        let m = if i % 4 == 3 {
            conformance::new_msg("w", "orch", 1_000_000 * i, "done")
        } else {
            conformance::new_msg("orch", "w", 1_000_000 * i, "do it")
        };
        conformance::send(&s, m).await;
    }
    drop(s);
    let tally = |conn: &rusqlite::Connection, sql: &str| -> Vec<String> {
        let mut stmt = conn.prepare(sql).expect("prepare");
        stmt.query_map([], |r| r.get::<_, String>(0))
            .expect("query")
            .collect::<Result<_, _>>()
            .expect("rows")
    };
    let kept = "SELECT sender || ' ' || bucket || ' ' || assignee || ' ' || open || ' ' || ack
                       || ' ' || answered FROM contract_tally ORDER BY sender, bucket, assignee";
    let counted = "SELECT sender || ' ' || (ts / 3600000) || ' ' || assignee || ' '
                          || sum(answer_id IS NULL AND ack = 0) || ' '
                          || sum(answer_id IS NULL AND ack != 0) || ' ' || count(answer_id)
                     FROM contracts GROUP BY sender, ts / 3600000, assignee
                    ORDER BY sender, ts / 3600000, assignee";
    {
        let conn = rusqlite::Connection::open(&path).expect("raw open");
        let before = tally(&conn, counted);
        assert!(before.len() > 5, "{before:?}");
        assert_eq!(
            tally(&conn, kept),
            before,
            "kept as the contracts were written"
        );
        conn.execute_batch(
            "DROP TRIGGER contracts_tally_ai; DROP TRIGGER contracts_tally_au;
             DROP TRIGGER contracts_tally_ad; DROP TABLE contract_tally; DROP INDEX events_cards;
             UPDATE meta SET value = '5' WHERE key = 'schema_version';",
        )
        .expect("back to version 5");
    }
    let s = SqliteStore::open(&path).expect("migrate");
    conformance::send(
        &s,
        conformance::new_msg("w", "orch", 41_000_000, "done too"),
    )
    .await;
    drop(s);
    let conn = rusqlite::Connection::open(&path).expect("raw open");
    assert_eq!(
        tally(&conn, kept),
        tally(&conn, counted),
        "filled, then kept"
    );
}

#[test]
fn sqlite_refuses_a_corrupt_file_and_leaves_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("hub.db");
    let junk = b"this is not a database, it is a bus.json or worse ".repeat(100);
    std::fs::write(&path, &junk).expect("write junk");
    let err = SqliteStore::open(&path).expect_err("a corrupt file is an error");
    assert!(matches!(err, StoreError::Open { .. }), "{err}");
    // SQLite's own error stays reachable as the source, not just flattened into the message.
    let source = std::error::Error::source(&err).expect("the SQLite error is the source");
    assert!(
        source.to_string().contains("not a database"),
        "source is SQLite's error: {source:?}"
    );
    assert!(
        !err.to_string().contains("not a database"),
        "not flattened: {err}"
    );
    assert!(
        err.report().contains(&source.to_string()),
        "{}",
        err.report()
    );
    assert_eq!(std::fs::read(&path).expect("read"), junk, "file untouched");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_full_sync_and_describe() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("hub.db");
    let s = SqliteStore::open_with(
        &path,
        SqliteOptions {
            sync_full: true,
            readers: 1,
            ..Default::default()
        },
    )
    .expect("open");
    assert!(s.describe().starts_with("sqlite:"));
    conformance::send(&s, conformance::new_msg("a", "b", 1, "x")).await;
    assert_eq!(s.read(|tx| tx.tip()).await.expect("tip"), 1);
}

/// CPU seconds (user + system) this process has used, from /proc (Linux only; 0 elsewhere).
fn cpu_seconds() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    let Some(rest) = stat.rsplit(')').next() else {
        return 0.0;
    };
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // Fields 14 and 15 of the stat line (utime, stime) are at 11 and 12 after the ')'.
    (ticks(11) + ticks(12)) / 100.0
}

/// Sanity numbers, not a check: `cargo test -p trantor-store-sqlite --release -- --ignored --nocapture`.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "throughput numbers; run by hand in release"]
async fn sqlite_throughput_numbers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = sqlite(&dir);
    let total = 100_000usize;
    let tasks = 16usize;
    let cpu0 = cpu_seconds();
    let start = std::time::Instant::now();
    let mut handles = Vec::new();
    for t in 0..tasks {
        let s = s.clone();
        handles.push(tokio::spawn(async move {
            for i in 0..total / tasks {
                let m = conformance::new_msg(
                    &format!("s{t}"),
                    &format!("r{}", i % 50),
                    i as i64,
                    "a typical message of about sixty bytes of text, give or take",
                );
                s.write(move |tx| tx.insert_message(m, &[]))
                    .await
                    .expect("insert");
            }
        }));
    }
    for h in handles {
        h.await.expect("join");
    }
    let el = start.elapsed();
    let cpu = cpu_seconds() - cpu0;
    println!(
        "{total} inserts from {tasks} tasks: {:?} ({:.0}/s), {:.1} us CPU per insert",
        el,
        total as f64 / el.as_secs_f64(),
        cpu * 1e6 / total as f64
    );
    let start = std::time::Instant::now();
    let n = 20_000;
    for i in 0..n {
        let who = format!("r{}", i % 50);
        s.read(move |tx| tx.messages_for(&who, 90_000, 100))
            .await
            .expect("read");
    }
    let el = start.elapsed();
    println!(
        "{n} sequential messages_for reads: {:?} ({:.1} us each)",
        el,
        el.as_micros() as f64 / n as f64
    );
    let start = std::time::Instant::now();
    for i in 0..2_000 {
        let m = conformance::new_msg("a", "b", i, "x");
        s.write(move |tx| tx.insert_message(m, &[]))
            .await
            .expect("insert");
    }
    let el = start.elapsed();
    println!(
        "2000 sequential single writes: {:?} ({:.1} us each)",
        el,
        el.as_micros() as f64 / 2000.0
    );
}

/// The store side of one hub `/send` (peer lookup, message, `message` event), from 16 tasks:
/// `cargo test -p trantor-store-sqlite --release -- --ignored --nocapture send_like`.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "throughput numbers; run by hand in release"]
async fn sqlite_send_like_numbers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = |k: &str, d: u32| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    // PAGE_SIZE and CKPT override the defaults, for comparing settings; NO_TALLY=1 drops the
    // contract tally's triggers first (what keeping the tally costs a send).
    let defaults = SqliteOptions::default();
    if std::env::var("NO_TALLY").is_ok_and(|v| v == "1") {
        drop(SqliteStore::open(&dir.path().join("hub.db")).expect("create"));
        rusqlite::Connection::open(dir.path().join("hub.db"))
            .expect("raw open")
            .execute_batch(
                "DROP TRIGGER contracts_tally_ai; DROP TRIGGER contracts_tally_au;
                 DROP TRIGGER contracts_tally_ad;",
            )
            .expect("drop the tally triggers");
    }
    let s = SqliteStore::open_with(
        &dir.path().join("hub.db"),
        SqliteOptions {
            page_size: env("PAGE_SIZE", defaults.page_size),
            checkpoint_pages: env("CKPT", defaults.checkpoint_pages),
            ..defaults
        },
    )
    .expect("open");
    let total = 50_000usize;
    let tasks = 16usize;
    let cpu0 = cpu_seconds();
    let start = std::time::Instant::now();
    let mut handles = Vec::new();
    for t in 0..tasks {
        let s = s.clone();
        handles.push(tokio::spawn(async move {
            for i in 0..total / tasks {
                let from = format!("bench-c{t}");
                let to = format!("bench-c{}", (t + 1) % tasks);
                s.write(move |tx| {
                    let project = tx
                        .peer(&from)?
                        .map(|p| p.project)
                        .unwrap_or_else(|| "bench".into());
                    let text = "a benchmark message of roughly the size agents send each other";
                    let m = tx.insert_message(
                        NewMessage {
                            ts: i as i64,
                            from: from.clone(),
                            to: to.clone(),
                            project: project.clone(),
                            text: text.into(),
                            ..Default::default()
                        },
                        &[12],
                    )?;
                    tx.insert_event(NewEvent {
                        ts: i as i64,
                        kind: "message".into(),
                        project,
                        by: from,
                        task_id: None,
                        refs: vec![12],
                        data: json!({"msgId": m.id, "toSession": to, "text": text, "refs": [12]})
                            .as_object()
                            .cloned()
                            .unwrap_or_default(),
                    })?;
                    Ok(m.id)
                })
                .await
                .expect("send");
            }
        }));
    }
    for h in handles {
        h.await.expect("join");
    }
    let el = start.elapsed();
    let cpu = cpu_seconds() - cpu0;
    let (batches, jobs) = s.write_stats();
    println!(
        "{total} send-like writes from {tasks} tasks: {:?} ({:.0}/s), {:.1} us CPU each, \
         {:.1} jobs per commit",
        el,
        total as f64 / el.as_secs_f64(),
        cpu * 1e6 / total as f64,
        jobs as f64 / batches.max(1) as f64
    );
}

#[test]
fn sqlite_new_database_uses_the_configured_page_size() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("hub.db");
    drop(SqliteStore::open(&path).expect("open"));
    let conn = rusqlite::Connection::open(&path).expect("raw open");
    let ps: i64 = conn
        .query_row("PRAGMA page_size", [], |r| r.get(0))
        .expect("page size");
    assert_eq!(ps, i64::from(SqliteOptions::default().page_size));
}

/// The child side of `sqlite_survives_kill_9`: writes messages until killed, printing the id
/// of each one whose `write()` returned (acknowledged). Does nothing unless run by that test.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "child process of sqlite_survives_kill_9"]
async fn kill9_child_writer() {
    let Ok(path) = std::env::var("TRANTOR_STORE_KILL9_DB") else {
        return;
    };
    use std::io::Write as _;
    let sync_full = std::env::var("TRANTOR_STORE_KILL9_SYNC").as_deref() != Ok("normal");
    let s = SqliteStore::open_with(
        std::path::Path::new(&path),
        SqliteOptions {
            sync_full,
            ..Default::default()
        },
    )
    .expect("open");
    assert_eq!(
        s.synchronous(),
        if sync_full { "full" } else { "normal" },
        "the level asked for is the level in force"
    );
    let mut out = std::io::stdout();
    for i in 0.. {
        // A few concurrent writes per round so kills also land inside grouped commits.
        let writes: Vec<_> = (0..4)
            .map(|k| {
                let m = conformance::new_msg("w", "r", i, &format!("m{i}-{k}"));
                s.write(move |tx| tx.insert_message(m, &[]))
            })
            .collect();
        for w in writes {
            let m = w.await.expect("write");
            writeln!(out, "acked {}", m.id).expect("stdout");
        }
        out.flush().expect("flush");
    }
}

/// A `kill -9` of the writing process loses no acknowledged write (docs/architecture.md §6), at
/// both sync levels (`trantor hub --sync full|normal`).
#[test]
fn sqlite_survives_kill_9() {
    kill_9_at("full");
    kill_9_at("normal");
}

fn kill_9_at(sync: &str) {
    use std::io::BufRead as _;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("hub.db");
    let mut child = std::process::Command::new(std::env::current_exe().expect("test binary"))
        .args(["--exact", "kill9_child_writer", "--ignored", "--nocapture"])
        .env("TRANTOR_STORE_KILL9_DB", &path)
        .env("TRANTOR_STORE_KILL9_SYNC", sync)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn child");
    let stdout = child.stdout.take().expect("child stdout");
    let mut acked = Vec::new();
    for line in std::io::BufReader::new(stdout).lines() {
        let line = line.expect("line");
        if let Some(id) = line.strip_prefix("acked ") {
            acked.push(id.parse::<i64>().expect("id"));
            if acked.len() >= 2_000 {
                break;
            }
        }
    }
    child.kill().expect("kill -9");
    child.wait().expect("reap");
    assert!(acked.len() >= 2_000, "the child stopped early ({sync})");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let s = SqliteStore::open(&path).expect("reopen after kill");
    let stored: HashSet<i64> = rt
        .block_on(s.read(|tx| tx.messages_for("r", 0, 0)))
        .expect("read")
        .into_iter()
        .map(|m| m.id)
        .collect();
    let lost: Vec<i64> = acked
        .iter()
        .copied()
        .filter(|id| !stored.contains(id))
        .collect();
    assert!(
        lost.is_empty(),
        "sync {sync}: acknowledged but lost: {lost:?}"
    );
}

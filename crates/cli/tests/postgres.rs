//! Several `trantor hub` processes on one PostgreSQL database (docs/architecture.md): a message
//! sent through one hub wakes a poll held on the other, a `kill -9` of one loses nothing it
//! acknowledged (nor its contracts, which the other hub's ledger pass takes) and hands the
//! periodic-work lease over, a lost notification is made good by the
//! catch-up read, and a hub whose database goes away answers 503 and recovers by itself.
//!
//! Each test creates its own database on the server at `TRANTOR_TEST_PG` (default
//! `postgres://postgres@127.0.0.1:5432`) and drops it after; without a server the tests skip
//! (and fail under `CI=true`).

mod common;
#[path = "support/pg.rs"]
mod pg;

use common::{hub_request, hub_send, wait_until};
use pg::{Db, admin, server};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// Terminate the backends whose application name contains `hub_port` and ends with `role`
/// (`writer`, `reader`, `listener`, `lease`, or empty for all); returns how many.
fn terminate(db: &Db, hub_port: u16, role: &str) -> i64 {
    let mut c = postgres::Client::connect(&format!("{}/postgres", server()), postgres::NoTls)
        .expect("admin connection");
    let pattern = format!("%:{hub_port} pid %{role}");
    c.query_one(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
           WHERE datname = $1 AND application_name LIKE $2",
        &[&db.name, &pattern],
    )
    .and_then(|r| r.try_get(0))
    .expect("terminate")
}

fn health(port: u16) -> (u16, Value) {
    hub_request(port, "GET", "/health", None).unwrap_or((0, Value::Null))
}

/// Hold `/poll` for `session` on `port` in a thread; returns the reply and how long it took.
fn hold_poll(port: u16, session: &str, since: i64) -> std::thread::JoinHandle<(Value, Duration)> {
    let q = format!(
        "/poll?session={}&since={since}&wait=20",
        common::url_encode(session)
    );
    std::thread::spawn(move || {
        let t = Instant::now();
        let (status, v) = hub_request(port, "GET", &q, None).expect("poll");
        assert_eq!(status, 200, "{v}");
        (v, t.elapsed())
    })
}

/// Two hubs on `db`, each with its own state directory (kept for as long as the hubs).
fn two_hubs(db: &Db) -> (common::Hub, common::Hub, [tempfile::TempDir; 2]) {
    let dirs = [
        tempfile::tempdir().expect("dir"),
        tempfile::tempdir().expect("dir"),
    ];
    let a = db.hub(&dirs[0], &[]);
    let b = db.hub(&dirs[1], &[]);
    (a, b, dirs)
}

/// Hold `/poll` for `session` after `since` on `port`, run `send` once the hub holds it, and
/// check the reply carries the id `send` returns; gives that id and how long the poll took.
fn woken_by(port: u16, session: &str, since: i64, send: impl FnOnce() -> i64) -> (i64, Duration) {
    let poll = hold_poll(port, session, since);
    common::wait_polls_held(port, 1);
    let id = send();
    let (reply, took) = poll.join().expect("poll thread");
    assert!(ids(&reply).contains(&id), "#{id} for {session}: {reply}");
    (id, took)
}

fn ids(v: &Value) -> Vec<i64> {
    v["messages"]
        .as_array()
        .map(|a| a.iter().filter_map(|m| m["id"].as_i64()).collect())
        .unwrap_or_default()
}

#[test]
fn a_message_sent_through_one_hub_wakes_a_poll_held_on_the_other() {
    let Some(db) = Db::create() else { return };
    let (a, b, _dirs) = two_hubs(&db);
    let (_, h) = health(b.port);
    assert!(
        h["store"]
            .as_str()
            .is_some_and(|s| s.starts_with("postgres:")),
        "{h}"
    );
    let mut since = 0;
    for round in 0..3 {
        let (id, took) = woken_by(b.port, "bob:p", since, || {
            hub_send(a.port, "alice:p", "bob:p", "p", &format!("hello {round}"))
        });
        // Woken by the notification, not by the 20 s hold running out.
        assert!(took < Duration::from_secs(15), "round {round}: {took:?}");
        since = id;
    }
    // One hub holds the periodic-work lease, and both say which.
    wait_until("one lease holder", Duration::from_secs(10), || {
        let (_, ha) = health(a.port);
        let (_, hb) = health(b.port);
        let held = [&ha, &hb]
            .iter()
            .filter(|h| h["lease"]["held"] == json!(true))
            .count();
        held == 1
            && ha["lease"]["holder"].is_string()
            && ha["lease"]["holder"] == hb["lease"]["holder"]
    });
}

#[test]
fn kill_9_of_one_hub_mid_burst_loses_nothing_acknowledged_and_moves_the_lease() {
    let Some(db) = Db::create() else { return };
    let (da, dbb) = (
        tempfile::tempdir().expect("dir"),
        tempfile::tempdir().expect("dir"),
    );
    let mut a = db.hub(&da, &[]);
    wait_until("hub a holds the lease", Duration::from_secs(10), || {
        health(a.port).1["lease"]["held"] == json!(true)
    });
    let b = db.hub(&dbb, &[]);
    let port = a.port;
    let (tx, rx) = std::sync::mpsc::channel::<i64>();
    let sender = std::thread::spawn(move || {
        for i in 0.. {
            let body = json!({"from": "w:p", "to": "r:p", "project": "p", "text": format!("m{i}")});
            match hub_request(port, "POST", "/send", Some(&body)) {
                Ok((200, v)) => {
                    if let Some(id) = v["id"].as_i64()
                        && tx.send(id).is_err()
                    {
                        return;
                    }
                }
                _ => return,
            }
        }
    });
    let mut acked = Vec::new();
    while acked.len() < 200 {
        acked.push(rx.recv_timeout(Duration::from_secs(30)).expect("acks"));
    }
    a.kill9();
    let _ = sender.join();
    acked.extend(rx.try_iter());
    let (status, v) = hub_request(b.port, "GET", "/inbox?session=r:p&since=0&peek=1", None)
        .expect("read through b");
    assert_eq!(status, 200, "{v}");
    let stored = ids(&v);
    let lost: Vec<i64> = acked
        .iter()
        .filter(|id| !stored.contains(id))
        .copied()
        .collect();
    assert!(lost.is_empty(), "acknowledged by a, missing on b: {lost:?}");
    // The contract ledger holds every stored message once, whatever a's last ledger pass did
    // before it died: the read through b waits for a pass of b's own.
    let (status, l) = hub_request(b.port, "GET", "/contracts?session=w:p&limit=5000", None)
        .expect("contracts through b");
    assert_eq!(status, 200, "{l}");
    let mut listed: Vec<i64> = [
        "contracts",
        "abandonedContracts",
        "supersededContracts",
        "ackContracts",
    ]
    .iter()
    .filter_map(|k| l[*k].as_array())
    .flatten()
    .filter_map(|c| c["id"].as_i64())
    .collect();
    listed.sort_unstable();
    let mut want = stored.clone();
    want.sort_unstable();
    assert_eq!(listed, want, "each stored message a contract, once");
    assert_eq!(l["total"], json!(want.len()), "{l}");
    wait_until("the lease moves to hub b", Duration::from_secs(15), || {
        health(b.port).1["lease"]["held"] == json!(true)
    });
}

#[test]
fn a_lost_notification_is_made_good_by_the_catch_up_read() {
    let Some(db) = Db::create() else { return };
    let (a, b, _dirs) = two_hubs(&db);
    let (_, took) = woken_by(b.port, "bob:p", 0, || {
        // Drop b's listener connection, then send while it reconnects.
        assert!(terminate(&db, b.port, "listener") >= 1, "b has a listener");
        hub_send(a.port, "alice:p", "bob:p", "p", "while b was deaf")
    });
    assert!(took < Duration::from_secs(15), "{took:?}");
    // The listener is back: the next message wakes b again.
    woken_by(b.port, "carol:p", 0, || {
        hub_send(a.port, "alice:p", "carol:p", "p", "after")
    });
}

#[test]
fn a_hub_whose_database_goes_away_answers_503_and_recovers_without_restart() {
    let Some(db) = Db::create() else { return };
    let da = tempfile::tempdir().expect("dir");
    let a = db.hub(&da, &[]);
    let before = hub_send(a.port, "x:p", "y:p", "p", "before");
    // Killed connections alone: the next request reconnects and succeeds.
    assert!(terminate(&db, a.port, "") >= 1);
    let after_kill = hub_send(a.port, "x:p", "y:p", "p", "after the kill");
    assert!(after_kill > before);
    // The database refuses connections (as while it restarts): clear 503s.
    admin(&format!(
        "ALTER DATABASE {} ALLOW_CONNECTIONS false",
        db.name
    ))
    .expect("close the database");
    terminate(&db, a.port, "");
    let body = json!({"from": "x:p", "to": "y:p", "project": "p", "text": "while down"});
    let (status, v) = hub_request(a.port, "POST", "/send", Some(&body)).expect("send");
    assert_eq!(status, 503, "{v}");
    assert!(
        v["error"]
            .as_str()
            .is_some_and(|e| e.contains("unavailable")),
        "{v}"
    );
    let (status, h) = health(a.port);
    assert_eq!(status, 503, "{h}");
    // Back: the same process serves again, with everything acknowledged before.
    admin(&format!(
        "ALTER DATABASE {} ALLOW_CONNECTIONS true",
        db.name
    ))
    .expect("reopen");
    wait_until("the hub reconnects", Duration::from_secs(15), || {
        hub_request(a.port, "POST", "/send", Some(&body)).is_ok_and(|(s, _)| s == 200)
    });
    let (_, v) =
        hub_request(a.port, "GET", "/inbox?session=y:p&since=0&peek=1", None).expect("read");
    let got = ids(&v);
    assert!(got.contains(&before) && got.contains(&after_kill), "{v}");
    // LISTEN resumed too: a second hub's message wakes a poll on this one.
    let dbb = tempfile::tempdir().expect("dir");
    let b = db.hub(&dbb, &[]);
    woken_by(a.port, "zed:p", 0, || {
        hub_send(b.port, "x:p", "zed:p", "p", "wake a")
    });
}

#[test]
fn an_op_retried_through_the_other_hub_replays_instead_of_sending_twice() {
    let Some(db) = Db::create() else { return };
    let (a, b, _dirs) = two_hubs(&db);
    let body = json!({"from": "x:p", "to": "y:p", "project": "p", "text": "once", "_op": "op-1"});
    let (s1, r1) = hub_request(a.port, "POST", "/send", Some(&body)).expect("send on a");
    let (s2, r2) = hub_request(b.port, "POST", "/send", Some(&body)).expect("retry on b");
    assert_eq!((s1, s2), (200, 200), "{r1} {r2}");
    assert_eq!(r1["id"], r2["id"], "the retry replays the first outcome");
    let (_, v) =
        hub_request(b.port, "GET", "/inbox?session=y:p&since=0&peek=1", None).expect("read");
    assert_eq!(ids(&v).len(), 1, "{v}");
}

#[test]
fn the_contract_ledger_is_kept_in_postgres_and_paged_through_either_hub() {
    let Some(db) = Db::create() else { return };
    let (a, b, _dirs) = two_hubs(&db);
    let o = "orch:p";
    let (s, _) = hub_request(
        a.port,
        "POST",
        "/register",
        Some(&json!({"session": "w:p", "status": "idle"})),
    )
    .expect("register");
    assert_eq!(s, 200);
    let mut ids = Vec::new();
    for i in 0..7 {
        ids.push(hub_send(a.port, o, "w:p", "p", &format!("job {i}")));
    }
    for i in 0..3 {
        ids.push(hub_send(b.port, o, "ghost:p", "p", &format!("lost {i}")));
    }
    // A plain reply answers the oldest open one; a `re` reply takes over #2 of them.
    let plain = hub_send(b.port, "w:p", o, "p", "done");
    let (s, v) = hub_request(
        a.port,
        "POST",
        "/send",
        Some(&json!({"from": "w:p", "to": o, "text": "that one", "re": ids[3]})),
    )
    .expect("send");
    assert_eq!(s, 200, "{v}");
    let (s, l) =
        hub_request(b.port, "GET", &format!("/contracts?session={o}"), None).expect("contracts");
    assert_eq!(s, 200, "{l}");
    assert_eq!(
        (
            l["total"].clone(),
            l["answered"].clone(),
            l["waiting"].clone(),
            l["abandoned"].clone()
        ),
        (json!(10), json!(2), json!(5), json!(3)),
        "{l}"
    );
    let first = l["contracts"]
        .as_array()
        .and_then(|a| a.iter().find(|c| c["id"] == ids[0]).cloned())
        .unwrap_or(Value::Null);
    assert_eq!(first["answer"]["id"], plain, "{l}");
    let mut seen = Vec::new();
    let mut cursor = 0;
    loop {
        let (_, l) = hub_request(
            a.port,
            "GET",
            &format!("/contracts?session={o}&limit=4&cursor={cursor}"),
            None,
        )
        .expect("page");
        assert_eq!(l["total"], 10, "{l}");
        let mut page: Vec<i64> = ["contracts", "abandonedContracts"]
            .iter()
            .filter_map(|k| l[*k].as_array())
            .flatten()
            .filter_map(|c| c["id"].as_i64())
            .collect();
        page.sort_unstable();
        seen.extend(page);
        match l["nextCursor"].as_i64() {
            Some(c) => cursor = c,
            None => break,
        }
        assert!(seen.len() <= 10, "{l}");
    }
    assert_eq!(seen, ids);
}

/// A counter of the hub on `port` from `/metrics` (0 when absent).
fn metric(port: u16, name: &str) -> u64 {
    let reply = common::request(port, "GET", "/metrics", &[], b"").expect("metrics");
    reply
        .text()
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or(0)
}

/// Read the SSE stream `sock` until its text so far contains `marker` (20 s at most).
fn read_stream_until(sock: &mut std::net::TcpStream, buf: &mut String, marker: &str) {
    use std::io::Read;
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut chunk = [0u8; 4096];
    while !buf.contains(marker) {
        assert!(
            Instant::now() < deadline,
            "no {marker:?} on the stream: {buf}"
        );
        match sock.read(&mut chunk) {
            Ok(0) => panic!("the stream ended: {buf}"),
            Ok(n) => buf.push_str(&String::from_utf8_lossy(&chunk[..n])),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {}
            Err(e) => panic!("stream read: {e}"),
        }
    }
}

#[test]
fn another_hubs_messages_are_read_back_only_for_an_open_stream() {
    // A hub reads a message another hub committed only to put it on an SSE stream; with none
    // open it only rings its held polls (the MCP mount's event feed does not count as one).
    let Some(db) = Db::create() else { return };
    let (a, b, _dirs) = two_hubs(&db);
    let mut since = 0;
    for round in 0..3 {
        // Each message reaches b's listener: a poll held there wakes for it.
        (since, _) = woken_by(b.port, "bob:p", since, || {
            hub_send(a.port, "alice:p", "bob:p", "p", &format!("quiet {round}"))
        });
    }
    let mut sock = std::net::TcpStream::connect(("127.0.0.1", b.port)).expect("connect");
    sock.set_read_timeout(Some(Duration::from_millis(200)))
        .expect("timeout");
    std::io::Write::write_all(
        &mut sock,
        b"GET /stream?session=bob:p HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n\r\n",
    )
    .expect("stream request");
    let mut buf = String::new();
    read_stream_until(&mut sock, &mut buf, ": connected as bob:p");
    let id = hub_send(a.port, "alice:p", "bob:p", "p", "streamed");
    read_stream_until(&mut sock, &mut buf, &format!("\"id\":{id}"));
    // b's listener takes the notifications in order: the three before the stream opened were
    // not read back, the one after it was.
    assert_eq!(
        metric(b.port, "trantor_remote_messages_read_total"),
        1,
        "{buf}"
    );
    assert_eq!(metric(a.port, "trantor_remote_messages_read_total"), 0);
    drop(sock);
    wait_until("b's stream closed", Duration::from_secs(20), || {
        metric(b.port, "trantor_streams_open") == 0
    });
}

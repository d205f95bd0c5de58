//! `trantor hub import | export | migrate`: the original hub's bus.json (written by the original
//! hub itself in the test) imports into both stores and reads back through our API; a second
//! import adds nothing; a malformed or truncated file is refused with the place named and
//! nothing written; SQLite → export → import into PostgreSQL answers the same.

mod common;
#[path = "support/pg.rs"]
mod pg;

use common::{Hub, TestHub, bin, hub_request, hub_send, wait_until};
use serde_json::{Value, json};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// Run `trantor hub <args>` with `env`; returns (success, stdout, stderr).
fn trantor_hub(args: &[&str], env: &[(&str, &str)]) -> (bool, String, String) {
    let mut cmd = Command::new(bin());
    cmd.arg("hub")
        .args(args)
        .env_remove("RELAY_DATABASE_URL")
        .env_remove("DATABASE_URL");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run trantor hub");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn get(port: u16, path: &str) -> Value {
    let (status, v) = hub_request(port, "GET", path, None).expect("request");
    assert_eq!(status, 200, "{path}: {v}");
    v
}

fn post(port: u16, path: &str, body: Value) -> Value {
    let (status, v) = hub_request(port, "POST", path, Some(&body)).expect("request");
    assert!(status < 300, "{path}: {status} {v}");
    v
}

/// What the API answers about the state a test made, for comparing two hubs.
fn answers(port: u16) -> Vec<(String, Value)> {
    let paths = [
        "/inbox?session=bob:p&since=0&peek=1",
        "/inbox?session=carol:p&since=0&peek=1",
        "/tasks?project=p",
        "/project?project=p",
        "/lessons?agent=alice:p",
        "/cost?by=card",
        "/cost?by=credential",
        "/credentials",
    ];
    paths
        .iter()
        .map(|p| {
            let mut v = get(port, p);
            // Read-time fields that differ between two live hubs.
            if let Value::Object(m) = &mut v {
                m.remove("ts");
                m.remove("now");
            }
            (p.to_string(), v)
        })
        .collect()
}

/// Make some state through the API of the hub on `port`.
fn make_state(port: u16) -> (i64, i64) {
    let m1 = hub_send(port, "alice:p", "bob:p", "p", "hello bob, see #1");
    hub_send(port, "alice:p", "all", "p", "hello everyone");
    let card = post(
        port,
        "/task",
        json!({"by": "alice:p", "project": "p", "title": "a card", "status": "todo"}),
    );
    let card_id = card["task"]["id"].as_i64().expect("card id");
    post(
        port,
        "/lesson",
        json!({"by": "alice:p", "project": "p", "scope": "global", "text": "test first"}),
    );
    post(
        port,
        "/project",
        json!({"by": "alice:p", "project": "p", "brief": "the brief"}),
    );
    post(
        port,
        "/phase",
        json!({"by": "alice:p", "project": "p", "phase": "build", "goal": "ship it"}),
    );
    (m1, card_id)
}

/// The cost ledger and a named credential (the original hub has neither route).
fn make_cost_state(port: u16, card_id: i64) {
    post(
        port,
        "/turns",
        json!({"session": "bob:p", "instance": "run-1", "turn": 1, "project": "p",
               "card": card_id, "credential": "work", "outcome": "completed",
               "usage": {"input": 10, "output": 2, "cacheRead": 30, "cacheWrite": 0},
               "usd": 0.25}),
    );
    post(
        port,
        "/credentials",
        json!({"name": "work", "agent": "claude"}),
    );
}

fn assert_state(port: u16, m1: i64, card_id: i64) {
    let inbox = get(port, "/inbox?session=bob:p&since=0&peek=1");
    let texts: Vec<&str> = inbox["messages"]
        .as_array()
        .map(|a| a.iter().filter_map(|m| m["text"].as_str()).collect())
        .unwrap_or_default();
    assert!(texts.contains(&"hello bob, see #1"), "{inbox}");
    assert!(texts.contains(&"hello everyone"), "{inbox}");
    assert!(
        inbox["messages"][0]["id"].as_i64() == Some(m1),
        "ids kept: {inbox}"
    );
    let tasks = get(port, "/tasks?project=p");
    assert!(tasks.to_string().contains("a card"), "{tasks}");
    assert!(
        tasks.to_string().contains(&format!("\"id\":{card_id}")),
        "{tasks}"
    );
    let brief = get(port, "/project?project=p");
    assert_eq!(brief["brief"], json!("the brief"), "{brief}");
    let lessons = get(port, "/lessons?agent=alice:p");
    assert!(lessons.to_string().contains("test first"), "{lessons}");
}

fn count(report: &str, what: &str) -> i64 {
    // "imported X into Y: 3 messages, 2 peers, ..."
    report
        .split([':', ','])
        .filter_map(|part| {
            let mut it = part.split_whitespace();
            let n = it.next()?.parse::<i64>().ok()?;
            (it.next()? == what).then_some(n)
        })
        .next()
        .unwrap_or(-1)
}

/// The original hub writes bus.json; make state there and wait until it is flushed.
fn original_bus_json() -> Option<(tempfile::TempDir, i64, i64)> {
    let mut orig = TestHub::start(true)?;
    let (m1, card) = make_state(orig.port);
    let file = orig.data.join("bus.json");
    wait_until(
        "the original flushes bus.json",
        Duration::from_secs(20),
        || {
            std::fs::read_to_string(&file)
                .is_ok_and(|t| t.contains("ship it") && t.contains("test first"))
        },
    );
    let keep = tempfile::tempdir().expect("dir");
    std::fs::copy(&file, keep.path().join("bus.json")).expect("copy bus.json");
    orig.kill9();
    Some((keep, m1, card))
}

fn import_and_check(
    file: &Path,
    env: &[(&str, &str)],
    start: impl Fn() -> Hub,
    m1: i64,
    card: i64,
) {
    let f = file.to_str().expect("path");
    let (ok, out, err) = trantor_hub(&["import", f], env);
    assert!(ok, "import failed: {out} {err}");
    assert_eq!(count(&out, "messages"), 2, "{out}");
    assert_eq!(count(&out, "cards"), 1, "{out}");
    assert_eq!(count(&out, "lessons"), 1, "{out}");
    assert!(
        count(&out, "events") >= 3,
        "the original's event log comes along: {out}"
    );
    let (ok, again, err) = trantor_hub(&["import", f], env);
    assert!(ok, "second import failed: {again} {err}");
    for what in [
        "messages",
        "peers",
        "cards",
        "lessons",
        "documents",
        "events",
        "gates",
    ] {
        assert_eq!(
            count(&again, what),
            0,
            "a second import adds nothing: {again}"
        );
    }
    let hub = start();
    assert_state(hub.port, m1, card);
    // New messages continue above the imported ids.
    let next = hub_send(hub.port, "alice:p", "bob:p", "p", "after the move");
    assert!(next > m1 + 1, "{next}");
}

#[test]
fn an_original_bus_json_imports_into_sqlite_and_reads_back() {
    let Some((dir, m1, card)) = original_bus_json() else {
        return;
    };
    let data = tempfile::tempdir().expect("data");
    let d = data.path().to_str().expect("path").to_string();
    import_and_check(
        &dir.path().join("bus.json"),
        &[("RELAY_DATA_DIR", &d)],
        || Hub::start_in(data.path(), common::free_port(), &[]),
        m1,
        card,
    );
}

#[test]
fn an_original_bus_json_imports_into_postgres_and_reads_back() {
    let Some(db) = pg::Db::create() else { return };
    let Some((dir, m1, card)) = original_bus_json() else {
        return;
    };
    let hubdir = tempfile::tempdir().expect("data");
    import_and_check(
        &dir.path().join("bus.json"),
        &[("RELAY_DATABASE_URL", &db.url)],
        || db.hub(&hubdir, &[]),
        m1,
        card,
    );
}

#[test]
fn a_malformed_or_truncated_file_is_refused_and_nothing_is_written() {
    let data = tempfile::tempdir().expect("data");
    let d = data.path().to_str().expect("path").to_string();
    let env = [("RELAY_DATA_DIR", d.as_str())];
    let good = json!({
        "messages": [
            {"id": 1, "ts": 1, "from": "a:p", "to": "b:p", "project": "p", "text": "one"},
            {"id": 2, "ts": 2, "from": "a:p", "to": "b:p", "project": "p", "text": "two"}
        ],
        "tasks": [{"id": 1, "project": "p", "title": "t", "status": "todo"}]
    })
    .to_string();
    let file = data.path().join("bus.json");
    // Truncated mid-way.
    std::fs::write(&file, &good[..good.len() / 2]).expect("write");
    let (ok, _, err) = trantor_hub(&["import", file.to_str().expect("path")], &env);
    assert!(!ok);
    assert!(err.contains("bus.json: line 1 column"), "{err}");
    // Valid JSON, one bad record after good ones: named, and the good ones are not written.
    let bad = good.replace(r#""text":"two","to":"b:p""#, r#""text":"two","to":7"#);
    assert_ne!(bad, good);
    std::fs::write(&file, &bad).expect("write");
    let (ok, _, err) = trantor_hub(&["import", file.to_str().expect("path")], &env);
    assert!(!ok);
    assert!(err.contains("messages[1]"), "{err}");
    let (ok, dump, err) = trantor_hub(&["export"], &env);
    assert!(ok, "{err}");
    let dump: Value = serde_json::from_str(&dump).expect("export is JSON");
    assert_eq!(dump["messages"], json!([]), "nothing half-imported");
    assert_eq!(dump["tasks"], json!([]), "nothing half-imported");
}

#[test]
fn sqlite_export_imported_into_postgres_answers_the_same() {
    let Some(db) = pg::Db::create() else { return };
    let data = tempfile::tempdir().expect("data");
    let d = data.path().to_str().expect("path").to_string();
    let port = common::free_port();
    let (m1, card) = {
        let hub = Hub::start_in(data.path(), port, &[]);
        let (m1, card) = make_state(hub.port);
        make_cost_state(hub.port, card);
        (m1, card)
    };
    let before = {
        let hub = Hub::start_in(data.path(), port, &[]);
        answers(hub.port)
    };
    let dump = data.path().join("dump.json");
    let (ok, _, err) = trantor_hub(
        &["export", "--out", dump.to_str().expect("path")],
        &[("RELAY_DATA_DIR", &d)],
    );
    assert!(ok, "{err}");
    let (ok, out, err) = trantor_hub(
        &["import", dump.to_str().expect("path")],
        &[("RELAY_DATABASE_URL", &db.url)],
    );
    assert!(ok, "{out} {err}");
    let hubdir = tempfile::tempdir().expect("dir");
    let hub = db.hub(&hubdir, &[]);
    assert_state(hub.port, m1, card);
    assert_eq!(answers(hub.port), before);
    drop(hub);
    // `migrate --to` does the same in one step, idempotently.
    let Some(db2) = pg::Db::create() else { return };
    let (ok, out, err) = trantor_hub(&["migrate", "--to", &db2.url], &[("RELAY_DATA_DIR", &d)]);
    assert!(ok, "{out} {err}");
    assert!(out.contains("2 messages"), "{out}");
    assert_eq!(count(&out, "turns"), 1, "the cost ledger moves too: {out}");
    let hub = db2.hub(&hubdir, &[]);
    assert_eq!(answers(hub.port), before);
}

/// An old bus.json: cards written with `ts: 0` get the original's fill (first history entry,
/// else `updated`, else the file's time), card-log entries without a time get the card's; the
/// event log (an old file's `cardEvents`) and the verification gates come along, an open gate
/// still holds its card out of done, and a second import adds nothing.
#[test]
fn an_old_bus_json_fills_card_times_and_carries_events_and_gates() {
    let data = tempfile::tempdir().expect("data");
    let d = data.path().to_str().expect("path").to_string();
    let env = [("RELAY_DATA_DIR", d.as_str())];
    let old = json!({
        "seq": 0,
        "tasks": [
            {"id": 1, "project": "p", "title": "from history", "status": "doing", "ts": 0,
             "updated": 1_700_000_500_000_i64, "assignee": "bob:p", "by": "alice:p",
             "history": [{"to": "todo", "by": "alice:p", "ts": 1_700_000_000_000_i64}],
             "log": [{"by": "bob:p", "text": "started", "ts": 0}]},
            {"id": 2, "project": "p", "title": "from updated", "status": "todo", "ts": 0,
             "updated": 1_700_000_900_000_i64, "by": "alice:p"},
            {"id": 3, "project": "p", "title": "no time at all", "status": "todo", "by": "alice:p"}
        ],
        "taskSeq": 3,
        "cardEvents": [
            {"id": 7, "ts": 1_700_000_000_000_i64, "type": "created", "project": "p",
             "by": "alice:p", "taskId": 1, "title": "from history", "to": "todo"},
            {"id": 8, "ts": 1_700_000_400_000_i64, "type": "moved", "project": "p",
             "by": "bob:p", "taskId": 1, "title": "from history", "from": "todo", "to": "doing"}
        ],
        "verifyGates": [
            {"id": 4, "project": "p", "claim": "the formula holds", "why": "money",
             "howToVerify": "recompute table 2", "status": "open", "by": "alice:p",
             "ts": 1_700_000_100_000_i64, "card": 1},
            {"id": 5, "project": "p", "claim": "old claim", "status": "verified",
             "by": "alice:p", "ts": 1_700_000_000_000_i64, "resolvedBy": "carol:p",
             "resolvedNote": "checked", "resolvedTs": 1_700_000_200_000_i64}
        ],
        "verifyGateSeq": 5
    });
    let file = data.path().join("old-bus.json");
    std::fs::write(&file, old.to_string()).expect("write");
    let mtime = std::fs::metadata(&file)
        .and_then(|m| m.modified())
        .expect("mtime")
        .duration_since(std::time::UNIX_EPOCH)
        .expect("epoch")
        .as_millis() as i64;
    let f = file.to_str().expect("path");
    let (ok, out, err) = trantor_hub(&["import", f], &env);
    assert!(ok, "{out} {err}");
    assert_eq!(count(&out, "cards"), 3, "{out}");
    assert_eq!(count(&out, "events"), 2, "{out}");
    assert_eq!(count(&out, "gates"), 2, "{out}");
    let (ok, again, err) = trantor_hub(&["import", f], &env);
    assert!(ok, "{again} {err}");
    for what in ["cards", "events", "gates"] {
        assert_eq!(
            count(&again, what),
            0,
            "a second import adds nothing: {again}"
        );
    }
    assert!(again.contains("0 cards (0 updated)"), "{again}");

    let hub = Hub::start_in(data.path(), common::free_port(), &[]);
    let tasks = get(hub.port, "/tasks?project=p");
    let card = |id: i64| -> Value {
        tasks["tasks"]
            .as_array()
            .and_then(|t| t.iter().find(|c| c["id"] == id))
            .cloned()
            .unwrap_or(Value::Null)
    };
    assert_eq!(card(1)["ts"], 1_700_000_000_000_i64, "{tasks}");
    assert_eq!(card(1)["log"][0]["ts"], 1_700_000_000_000_i64, "{tasks}");
    assert_eq!(card(2)["ts"], 1_700_000_900_000_i64, "{tasks}");
    assert_eq!(card(3)["ts"], mtime, "{tasks}");

    let ev = get(hub.port, "/events?project=p&type=created,moved");
    let kinds: Vec<(&str, i64)> = ev["events"]
        .as_array()
        .map(|e| {
            e.iter()
                .filter_map(|e| Some((e["type"].as_str()?, e["ts"].as_i64()?)))
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(
        kinds,
        [
            ("created", 1_700_000_000_000_i64),
            ("moved", 1_700_000_400_000_i64)
        ],
        "{ev}"
    );
    let hist = get(hub.port, "/events?taskId=1");
    assert!(
        hist["events"].as_array().is_some_and(|e| e.len() >= 2),
        "the card's own events are found by its id: {hist}"
    );

    let gates = get(hub.port, "/verify-gates?project=p");
    assert_eq!(gates["gates"].as_array().map(Vec::len), Some(1), "{gates}");
    assert_eq!(gates["gates"][0]["claim"], "the formula holds");
    let (status, refused) = hub_request(
        hub.port,
        "POST",
        "/task/update",
        Some(&json!({"id": 1, "status": "done", "note": "Drill: ran it", "by": "bob:p"})),
    )
    .expect("update");
    assert_eq!(
        status, 409,
        "the imported open gate holds the card: {refused}"
    );
    assert!(
        refused["error"].as_str().is_some_and(|e| e.contains("#4")),
        "{refused}"
    );
    // New gates continue above the imported ids.
    let g = post(
        hub.port,
        "/verify-gate",
        json!({"project": "p", "claim": "a new claim", "by": "alice:p"}),
    );
    assert_eq!(g["gate"]["id"], 6, "{g}");
}

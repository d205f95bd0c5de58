//! The product claims of issue 16, each against the real binary: the durability level the user
//! chose is the one in force, no client can skip the drill gate, and every accepted field is
//! honoured (`by` on checklist toggles, `inbox --limit`, phase goals read back and shown).

mod common;

use common::{Hub, bin, free_port, hub_request};
use serde_json::{Value, json};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn post(hub: &Hub, path: &str, body: Value) -> (u16, Value) {
    hub_request(hub.port, "POST", path, Some(&body)).expect("POST")
}

fn get(hub: &Hub, path: &str) -> (u16, Value) {
    hub_request(hub.port, "GET", path, None).expect("GET")
}

/// `trantor <args>` as `session` against `hub`.
fn cli(hub: &Hub, home: &std::path::Path, session: &str, args: &[&str]) -> Output {
    Command::new(bin())
        .args(args)
        .env("RELAY_URL", hub.url())
        .env("RELAY_SESSION", session)
        .env_remove("RELAY_PROJECT")
        .env_remove("RELAY_AGENT")
        .env("HOME", home)
        .env("TRANTOR_LOG", "warn")
        .output()
        .expect("run trantor")
}

fn cli_json(hub: &Hub, home: &std::path::Path, session: &str, args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.push("--json");
    let o = cli(hub, home, session, &all);
    assert!(
        o.status.success(),
        "trantor {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).expect("json")
}

#[test]
fn the_sync_level_is_the_users_choice_full_by_default_and_read_back() {
    // Default: full.
    let hub = Hub::start();
    let (_, health) = get(&hub, "/health");
    assert_eq!(health["sync"], "full", "{health}");
    drop(hub);
    // TRANTOR_SYNC=normal (the flag's environment variable).
    let tmp = tempfile::tempdir().expect("tmp");
    let hub = Hub::start_in(tmp.path(), free_port(), &[("TRANTOR_SYNC", "normal")]);
    let (_, health) = get(&hub, "/health");
    assert_eq!(health["sync"], "normal", "{health}");
    drop(hub);
    // The flag wins over the environment.
    let port = free_port();
    let mut child = Command::new(bin())
        .args(["hub", "--sync", "full", "--port", &port.to_string()])
        .env("TRANTOR_SYNC", "normal")
        .env("RELAY_HOST", "127.0.0.1")
        .env("RELAY_DATA_DIR", tmp.path().join("flag"))
        .env("HOME", tmp.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn hub");
    common::wait_until("the hub with --sync full", Duration::from_secs(30), || {
        hub_request(port, "GET", "/health", None)
            .is_ok_and(|(s, v)| s == 200 && v["sync"] == "full")
    });
    let _ = child.kill();
    let _ = child.wait();
    // An unknown level is refused, never ignored.
    let mut bad = Command::new(bin())
        .args(["hub", "--port", &free_port().to_string()])
        .env("TRANTOR_SYNC", "sometimes")
        .env("RELAY_DATA_DIR", tmp.path().join("bad"))
        .env("HOME", tmp.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn hub");
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(s) = bad.try_wait().expect("wait") {
            break s;
        }
        if Instant::now() > deadline {
            let _ = bad.kill();
            panic!("a hub with TRANTOR_SYNC=sometimes started instead of refusing");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut bad.stderr.take().expect("stderr"), &mut err)
        .expect("stderr");
    assert!(!status.success());
    assert!(
        err.contains("sometimes") && err.contains("full") && err.contains("normal"),
        "{err}"
    );
    // And `--help` says what each level survives.
    let help = Command::new(bin())
        .args(["hub", "--help"])
        .output()
        .expect("help");
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(
        help.contains("--sync") && help.contains("TRANTOR_SYNC") && help.contains("power loss"),
        "{help}"
    );
}

#[test]
fn no_source_lets_a_card_skip_the_drill_gate() {
    let hub = Hub::start();
    let (s, created) = post(
        &hub,
        "/task",
        json!({"title":"bridged card","project":"p","by":"orch:p","source":"bridge"}),
    );
    assert_eq!(s, 200, "{created}");
    let id = created["task"]["id"].as_i64().expect("id");
    let (s, reply) = post(
        &hub,
        "/task/update",
        json!({"id":id,"status":"done","by":"orch:p"}),
    );
    assert_eq!(
        s, 409,
        "a bridge card without a drill cannot reach done: {reply}"
    );
    assert!(
        reply["error"]
            .as_str()
            .unwrap_or("")
            .contains("no drill line")
    );
    // Nor by being created as done.
    let (s, reply) = post(
        &hub,
        "/task",
        json!({"title":"born done","project":"p","by":"orch:p","source":"bridge","status":"done"}),
    );
    assert_eq!(s, 409, "{reply}");
    // With the drill line, both work.
    let (s, reply) = post(
        &hub,
        "/task/update",
        json!({"id":id,"status":"done","by":"orch:p","drill":"cargo test -p web"}),
    );
    assert_eq!(s, 200, "{reply}");
    let (s, reply) = post(
        &hub,
        "/task",
        json!({"title":"born done","project":"p","by":"orch:p","status":"done",
               "drill":"opened /login and signed in"}),
    );
    assert_eq!(s, 200, "{reply}");
    assert_eq!(reply["task"]["status"], "done");
}

#[test]
fn a_checklist_toggle_records_who_toggled_it() {
    let hub = Hub::start();
    let (_, created) = post(
        &hub,
        "/task",
        json!({"title":"list","project":"p","by":"orch:p","checklist":["write it","test it"]}),
    );
    let id = created["task"]["id"].as_i64().expect("id");
    let (s, reply) = post(
        &hub,
        "/task/checklist-toggle",
        json!({"id":id,"index":1,"done":true,"by":"claude:p"}),
    );
    assert_eq!(s, 200, "{reply}");
    let log = reply["task"]["log"].as_array().expect("log");
    let last = log.last().expect("a log line");
    assert_eq!(last["by"], "claude:p", "{last}");
    assert!(
        last["text"]
            .as_str()
            .unwrap_or("")
            .contains("item 2 checked: test it"),
        "{last}"
    );
    let (_, events) = get(&hub, &format!("/events?taskId={id}&by=claude:p"));
    let evs = events["events"].as_array().expect("events");
    assert!(
        evs.iter()
            .any(|e| e["checklist"]["index"] == 1 && e["checklist"]["done"] == true),
        "{events}"
    );
    // The toggler shows up as a peer (presence), like any other card write.
    let (_, peers) = get(&hub, "/peers");
    assert!(
        peers["peers"]
            .as_array()
            .is_some_and(|a| a.iter().any(|p| p["session"] == "claude:p")),
        "{peers}"
    );
}

#[test]
fn phase_goals_are_read_back_and_shown_on_the_board() {
    let hub = Hub::start();
    let home = tempfile::tempdir().expect("home");
    let (s, _) = post(
        &hub,
        "/phase",
        json!({"project":"p","phase":"alpha","goal":"ALPHA-GOAL: login works end to end","by":"orch:p"}),
    );
    assert_eq!(s, 200);
    post(
        &hub,
        "/phase",
        json!({"project":"other","phase":"alpha","goal":"not this project's"}),
    );
    post(
        &hub,
        "/task",
        json!({"title":"login form","project":"p","by":"orch:p","phase":"alpha"}),
    );
    let (_, phases) = get(&hub, "/phase?project=p");
    let list = phases["phases"].as_array().expect("phases");
    assert_eq!(list.len(), 1, "{phases}");
    assert_eq!(list[0]["phase"], "alpha");
    assert_eq!(list[0]["goal"], "ALPHA-GOAL: login works end to end");
    assert_eq!(list[0]["by"], "orch:p");
    let o = cli(&hub, home.path(), "orch:p", &["board"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{out}");
    assert!(
        out.contains("phase goals:")
            && out.contains("alpha: ALPHA-GOAL: login works end to end (0/1 cards done)"),
        "{out}"
    );
    let j = cli_json(&hub, home.path(), "orch:p", &["board"]);
    assert_eq!(j["phases"][0]["goal"], "ALPHA-GOAL: login works end to end");
}

#[test]
fn inbox_limit_is_honoured_alone_and_with_since_unread_and_wait() {
    let hub = Hub::start();
    let home = tempfile::tempdir().expect("home");
    let seat = "claude:p";
    let ids: Vec<i64> = (1..=7)
        .map(|i| common::hub_send(hub.port, "orch:p", seat, "p", &format!("msg {i}")))
        .collect();
    let shown = |v: &Value| -> Vec<i64> {
        v["messages"]
            .as_array()
            .expect("messages")
            .iter()
            .filter_map(|m| m["id"].as_i64())
            .collect()
    };
    // Alone: the newest N.
    let j = cli_json(&hub, home.path(), seat, &["inbox", "--limit", "3"]);
    assert_eq!(shown(&j), ids[4..].to_vec(), "{j}");
    assert_eq!(j["more"], 4);
    // With --since: the oldest N after the cursor, and where to page on.
    let since = ids[0].to_string();
    let j = cli_json(
        &hub,
        home.path(),
        seat,
        &["inbox", "--since", &since, "--limit", "2"],
    );
    assert_eq!(shown(&j), ids[1..3].to_vec(), "{j}");
    assert_eq!(j["more"], 4);
    assert_eq!(j["next"], ids[2]);
    // The text form says so on stderr.
    let o = cli(
        &hub,
        home.path(),
        seat,
        &["inbox", "--since", &since, "--limit", "2"],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains(&format!("4 more after #{}", ids[2])), "{err}");
    // With --unread: the oldest N, and only those are marked read.
    let j = cli_json(
        &hub,
        home.path(),
        seat,
        &["inbox", "--unread", "--limit", "5"],
    );
    assert_eq!(shown(&j), ids[..5].to_vec(), "{j}");
    let j = cli_json(
        &hub,
        home.path(),
        seat,
        &["inbox", "--unread", "--limit", "5"],
    );
    assert_eq!(shown(&j), ids[5..].to_vec(), "the rest stayed unread: {j}");
    let j = cli_json(&hub, home.path(), seat, &["inbox", "--unread"]);
    assert!(shown(&j).is_empty(), "{j}");
    // With --wait: the oldest N of what arrives.
    let j = cli_json(
        &hub,
        home.path(),
        seat,
        &[
            "inbox",
            "--wait",
            "5",
            "--since",
            &ids[3].to_string(),
            "--limit",
            "1",
        ],
    );
    assert_eq!(shown(&j), vec![ids[4]], "{j}");
    assert_eq!(j["next"], ids[4]);
    // 0 is refused, not read as "no limit".
    let o = cli(&hub, home.path(), seat, &["inbox", "--limit", "0"]);
    assert!(!o.status.success());
}

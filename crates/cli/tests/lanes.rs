//! The project-level routes of the original's hooks, CLI and dashboard, driven over HTTP
//! against a hub on a temporary data directory and port 0: the project digest of `/catchup`,
//! `/history`, `/sweep`, `/overseer/status` and the overseer's warnings, verification-gate
//! events, file claims (`docs/protocol.md` §15). Waits are conditions with a deadline.

mod common;

use common::{Hub, free_port, hub_request, url_encode, wait_until};
use serde_json::{Value, json};
use std::time::Duration;

const LONG: Duration = Duration::from_secs(30);

fn get(hub: &Hub, path: &str) -> (u16, Value) {
    hub_request(hub.port, "GET", path, None).expect("GET")
}

fn post(hub: &Hub, path: &str, body: Value) -> (u16, Value) {
    hub_request(hub.port, "POST", path, Some(&body)).expect("POST")
}

fn ok(hub: &Hub, path: &str, body: Value) -> Value {
    let (s, v) = post(hub, path, body.clone());
    assert_eq!(s, 200, "POST {path} {body} -> {v}");
    v
}

fn events(hub: &Hub, q: &str) -> Vec<Value> {
    let (s, v) = get(hub, &format!("/events?{q}"));
    assert_eq!(s, 200, "{v}");
    v["events"].as_array().cloned().unwrap_or_default()
}

fn card(hub: &Hub, project: &str, title: &str, status: &str, assignee: &str) -> i64 {
    let v = ok(
        hub,
        "/task",
        json!({"project": project, "title": title, "status": status, "assignee": assignee, "by": format!("orch:{project}"), "drill": "cargo test"}),
    );
    v["task"]["id"].as_i64().expect("card id")
}

fn mail(hub: &Hub, session: &str) -> Vec<String> {
    let (_, v) = get(
        hub,
        &format!("/inbox?session={}&since=0&peek=1", url_encode(session)),
    );
    v["messages"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .filter(|m| m["from"] == "hub:duty")
        .map(|m| m["text"].as_str().unwrap_or("").to_string())
        .collect()
}

#[test]
fn verification_gates_write_opened_and_resolved_events() {
    let hub = Hub::start();
    let g = ok(
        &hub,
        "/verify-gate",
        json!({"project": "web", "claim": "login works", "why": "rewrite", "howToVerify": "log in", "by": "orch:web"}),
    );
    let id = g["gate"]["id"].as_i64().expect("gate id");
    // A duplicate open gate is deduplicated and writes nothing.
    let d = ok(
        &hub,
        "/verify-gate",
        json!({"project": "web", "claim": "login works", "by": "orch:web"}),
    );
    assert_eq!(d["dedup"], true);
    ok(
        &hub,
        "/verify-gate",
        json!({"project": "web", "resolve": true, "id": id, "status": "failed", "note": "500 on submit", "by": "qa:web"}),
    );
    let opened = events(&hub, "type=verify.gate.opened");
    assert_eq!(opened.len(), 1, "{opened:?}");
    assert_eq!(opened[0]["gateId"], id);
    assert_eq!(opened[0]["claim"], "login works");
    assert_eq!(opened[0]["howToVerify"], "log in");
    assert_eq!(opened[0]["project"], "web");
    assert_eq!(opened[0]["by"], "orch:web");
    let resolved = events(&hub, "type=verify.gate.");
    assert_eq!(resolved.len(), 2, "{resolved:?}");
    assert_eq!(resolved[1]["type"], "verify.gate.resolved");
    assert_eq!(resolved[1]["status"], "failed");
    assert_eq!(resolved[1]["note"], "500 on submit");
    assert_eq!(resolved[1]["by"], "qa:web");
    // Resolving a gate that is not there changes nothing and writes no event.
    let (s, _) = post(
        &hub,
        "/verify-gate",
        json!({"project": "web", "resolve": true, "id": 999, "by": "qa:web"}),
    );
    assert_eq!(s, 404);
    assert_eq!(events(&hub, "type=verify.gate.").len(), 2);
}

#[test]
fn catchup_serves_the_project_digest_and_the_session_digest() {
    let hub = Hub::start();
    ok(
        &hub,
        "/project",
        json!({"project": "web", "brief": "ship the shop", "by": "orch:web"}),
    );
    let a = card(&hub, "web", "cart", "doing", "claude:web");
    let b = card(&hub, "web", "checkout", "doing", "codex:web");
    card(&hub, "web", "search", "todo", "");
    card(&hub, "web", "footer", "done", "claude:web");
    card(&hub, "other", "elsewhere", "doing", "x:other");
    let (s, v) = get(&hub, "/catchup?project=web");
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["project"], "web");
    assert_eq!(v["brief"], "ship the shop");
    assert_eq!(v["total"], 4);
    assert_eq!(v["counts"]["doing"], 2);
    assert_eq!(v["counts"]["todo"], 1);
    assert_eq!(v["counts"]["done"], 1);
    assert_eq!(v["counts"]["stale"], 0);
    assert_eq!(v["counts"]["failed"], 0);
    let doing: Vec<i64> = v["doing"]
        .as_array()
        .expect("doing")
        .iter()
        .filter_map(|c| c["id"].as_i64())
        .collect();
    assert_eq!(doing.len(), 2);
    assert!(doing.contains(&a) && doing.contains(&b), "{v}");
    assert_eq!(v["todo"][0]["title"], "search");
    assert_eq!(v["recentDone"][0]["title"], "footer");
    assert!(v["testing"].as_array().is_some_and(Vec::is_empty));
    assert!(v["lastActivity"].as_i64().unwrap_or(0) > 0);
    for k in [
        "brief", "counts", "total", "doing", "testing", "failed", "blocked", "todo",
    ] {
        assert!(v.get(k).is_some(), "missing {k}: {v}");
    }
    // The session digest still answers with `session`.
    let (s, v) = get(&hub, "/catchup?session=claude:web&peek=1");
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["session"], "claude:web");
    assert!(v.get("waitingOnMe").is_some(), "{v}");
    // Neither: a clear 404 naming both.
    let (s, v) = get(&hub, "/catchup");
    assert_eq!(s, 404);
    assert!(
        v["error"]
            .as_str()
            .unwrap_or("")
            .contains("session or project")
    );
}

#[test]
fn history_is_the_card_only_timeline() {
    let hub = Hub::start();
    let a = card(&hub, "web", "cart", "todo", "");
    ok(
        &hub,
        "/task/update",
        json!({"id": a, "status": "doing", "by": "claude:web"}),
    );
    card(&hub, "other", "elsewhere", "todo", "");
    ok(
        &hub,
        "/send",
        json!({"from": "orch:web", "to": "claude:web", "text": "see #1"}),
    );
    let (s, v) = get(&hub, "/history?project=web");
    assert_eq!(s, 200, "{v}");
    let types: Vec<&str> = v["events"]
        .as_array()
        .expect("events")
        .iter()
        .filter_map(|e| e["type"].as_str())
        .collect();
    assert_eq!(types, vec!["created", "moved"], "{v}");
    let (_, v) = get(&hub, "/history");
    assert_eq!(v["events"].as_array().map(Vec::len), Some(3), "{v}");
    let (_, v) = get(&hub, "/history?limit=1");
    assert_eq!(v["events"].as_array().map(Vec::len), Some(1));
    assert_eq!(v["events"][0]["title"], "elsewhere");
    let (s, _) = get(&hub, "/history?limit=-1");
    assert_eq!(s, 400);
}

#[test]
fn sweep_counts_refuses_while_seats_work_and_then_stales() {
    let hub = Hub::start();
    let a = card(&hub, "web", "cart", "doing", "claude:web");
    let b = card(&hub, "web", "checkout", "testing", "codex:web");
    let t = card(&hub, "web", "later", "todo", "");
    let elsewhere = card(&hub, "other", "x", "doing", "x:other");
    // A dry run counts and changes nothing.
    let v = ok(
        &hub,
        "/sweep",
        json!({"project": "web", "olderMs": 0, "dryRun": true}),
    );
    assert_eq!(v["dryRun"], true);
    assert_eq!(v["count"], 2, "{v}");
    // A seat holding a candidate is online and working: refused, nothing moved.
    ok(
        &hub,
        "/register",
        json!({"session": "claude:web", "phase": "working", "status": "working · card #1"}),
    );
    let (s, v) = post(&hub, "/sweep", json!({"project": "web", "olderMs": 0}));
    assert_eq!(s, 409, "{v}");
    assert_eq!(v["working"], json!(["claude:web"]));
    let (_, c) = get(&hub, &format!("/card?id={a}"));
    assert_eq!(c["task"]["status"], "doing");
    // Once the seat is idle the sweep goes through.
    ok(
        &hub,
        "/register",
        json!({"session": "claude:web", "phase": "idle", "status": "idle"}),
    );
    let v = ok(
        &hub,
        "/sweep",
        json!({"project": "web", "olderMs": 0, "by": "op:web"}),
    );
    assert_eq!(v["swept"], 2, "{v}");
    for id in [a, b] {
        let (_, c) = get(&hub, &format!("/card?id={id}"));
        assert_eq!(c["task"]["status"], "stale", "{c}");
    }
    let (_, c) = get(&hub, &format!("/card?id={t}"));
    assert_eq!(c["task"]["status"], "todo");
    let (_, c) = get(&hub, &format!("/card?id={elsewhere}"));
    assert_eq!(c["task"]["status"], "doing");
    let moved = events(&hub, "type=moved&by=op:web");
    assert_eq!(moved.len(), 2, "{moved:?}");
    assert!(moved.iter().all(|e| e["to"] == "stale"));
    // The default age (RELAY_REAP_GRACE_MS, 15 min) finds nothing this young.
    let v = ok(&hub, "/sweep", json!({"dryRun": true}));
    assert_eq!(v["count"], 0);
    let (s, _) = post(&hub, "/sweep", json!({"olderMs": -5}));
    assert_eq!(s, 400);
}

#[test]
fn overseer_status_follows_the_duty_appointment_across_a_restart() {
    let tmp = tempfile::tempdir().expect("tmp");
    let port = free_port();
    let mut hub = Hub::start_in(tmp.path(), port, &[]);
    let (s, v) = get(&hub, "/overseer/status");
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["dutySession"], "");
    assert_eq!(v["engine"], true);
    ok(&hub, "/overseer/duty", json!({"session": "night:web"}));
    let (_, v) = get(&hub, "/overseer/status");
    assert_eq!(v["dutySession"], "night:web", "{v}");
    hub.kill9();
    let hub = Hub::start_in(tmp.path(), port, &[]);
    let (_, v) = get(&hub, "/overseer/status");
    assert_eq!(v["dutySession"], "night:web", "{v}");
    assert_eq!(v["duty"]["session"], "night:web", "{v}");
    ok(&hub, "/overseer/duty", json!({"session": ""}));
    let (_, v) = get(&hub, "/overseer/status");
    assert_eq!(v["dutySession"], "");
}

#[test]
fn two_live_sessions_on_one_project_get_one_overseer_warning() {
    let hub = Hub::start_with(|a| a.duty_tick_ms = 100);
    ok(&hub, "/overseer/duty", json!({"session": "duty:ops"}));
    ok(
        &hub,
        "/register",
        json!({"session": "claude:web", "project": "web"}),
    );
    ok(
        &hub,
        "/register",
        json!({"session": "codex:web", "project": "web"}),
    );
    // Without an autonomy level for the project nothing is watched.
    let first = get(&hub, "/overseer/status").1["lastTickTs"]
        .as_i64()
        .unwrap_or(0);
    wait_until("an overseer pass", LONG, || {
        get(&hub, "/overseer/status").1["lastTickTs"]
            .as_i64()
            .unwrap_or(0)
            > first
    });
    assert!(events(&hub, "type=overseer.warn").is_empty());
    ok(&hub, "/policy", json!({"autonomy": {"web": 2}}));
    wait_until("the overseer warning", LONG, || {
        !events(&hub, "type=overseer.warn").is_empty()
    });
    let w = events(&hub, "type=overseer.warn");
    assert_eq!(w[0]["kind"], "same-project-sessions");
    assert_eq!(w[0]["sessions"], json!(["claude:web", "codex:web"]));
    assert_eq!(w[0]["project"], "web");
    wait_until("the duty seat's note", LONG, || {
        mail(&hub, "duty:ops")
            .iter()
            .any(|t| t.starts_with("⚠️ OVERSEER same-project-sessions [web]"))
    });
    let intro = mail(&hub, "claude:web");
    assert!(
        intro
            .iter()
            .any(|t| t.starts_with("🤝 OVERSEER same-project-sessions: you and codex:web")),
        "{intro:?}"
    );
    assert!(
        mail(&hub, "codex:web")
            .iter()
            .any(|t| t.contains("relay_send to claude:web"))
    );
    // The episode holds: later passes warn no more.
    let (_, st) = get(&hub, "/overseer/status");
    let tick = st["lastTickTs"].as_i64().unwrap_or(0);
    wait_until("two more passes", LONG, || {
        get(&hub, "/overseer/status").1["lastTickTs"]
            .as_i64()
            .unwrap_or(0)
            > tick + 150
    });
    assert_eq!(events(&hub, "type=overseer.warn").len(), 1);
    assert_eq!(mail(&hub, "claude:web").len(), 1);
    let (_, st) = get(&hub, "/overseer/status");
    assert_eq!(st["standing"], 1, "{st}");
    assert_eq!(st["warnings"][0]["kind"], "same-project-sessions");
    assert_eq!(
        st["watching"]["sessions"].as_i64().map(|n| n >= 2),
        Some(true)
    );
    // A declared crew (peer kind agent/orch) is not a collision.
    ok(
        &hub,
        "/register",
        json!({"session": "a:shop", "project": "shop", "kind": "agent"}),
    );
    ok(
        &hub,
        "/register",
        json!({"session": "b:shop", "project": "shop", "kind": "orch"}),
    );
    ok(&hub, "/policy", json!({"autonomy": {"shop": 2}}));
    let (_, st) = get(&hub, "/overseer/status");
    let tick = st["lastTickTs"].as_i64().unwrap_or(0);
    wait_until("a pass after the crew registered", LONG, || {
        get(&hub, "/overseer/status").1["lastTickTs"]
            .as_i64()
            .unwrap_or(0)
            > tick
    });
    assert!(
        events(&hub, "type=overseer.warn")
            .iter()
            .all(|e| e["project"] != "shop")
    );
}

#[test]
fn file_claims_warn_the_second_editor_and_refuse_paths_outside_the_project() {
    let hub = Hub::start();
    let v = ok(
        &hub,
        "/claim",
        json!({"project": "web", "file": "src/cart.rs", "session": "claude:web"}),
    );
    assert_eq!(v["conflicts"], json!([]));
    assert_eq!(v["ttlMs"], 600_000);
    let v = ok(
        &hub,
        "/claim",
        json!({"project": "web", "file": "src/cart.rs", "session": "codex:web"}),
    );
    assert_eq!(v["conflicts"][0]["session"], "claude:web", "{v}");
    // A re-claim by the first editor names the second.
    let v = ok(
        &hub,
        "/claim",
        json!({"project": "web", "file": "src/cart.rs", "session": "claude:web"}),
    );
    assert_eq!(v["conflicts"][0]["session"], "codex:web", "{v}");
    let (_, v) = get(&hub, "/claims?project=web");
    assert_eq!(v["claims"].as_array().map(Vec::len), Some(2), "{v}");
    assert_eq!(events(&hub, "type=file.claim").len(), 2);
    let conflicts = events(&hub, "type=file.conflict");
    assert_eq!(conflicts.len(), 2);
    assert_eq!(conflicts[0]["with"], json!(["claude:web"]));
    // Paths outside the project are refused; nothing is stored.
    for bad in [
        "/etc/passwd",
        "../other/x.rs",
        "src/../../x",
        "C:\\x",
        "~/x",
    ] {
        let (s, v) = post(
            &hub,
            "/claim",
            json!({"project": "web", "file": bad, "session": "claude:web"}),
        );
        assert_eq!(s, 400, "{bad}: {v}");
        assert!(
            v["error"]
                .as_str()
                .unwrap_or("")
                .contains("outside the project"),
            "{v}"
        );
    }
    let (s, _) = post(
        &hub,
        "/claim",
        json!({"project": "web", "session": "a:web"}),
    );
    assert_eq!(s, 400);
    let (_, v) = get(&hub, "/claims");
    assert_eq!(v["claims"].as_array().map(Vec::len), Some(2), "{v}");
    // Reads: one file.read per window, never listed as claims.
    ok(
        &hub,
        "/read",
        json!({"project": "web", "file": "src/cart.rs", "session": "app:web", "seat": "claude:web"}),
    );
    ok(
        &hub,
        "/read",
        json!({"project": "web", "file": "src/cart.rs", "session": "app:web"}),
    );
    let reads = events(&hub, "type=file.read");
    assert_eq!(reads.len(), 1);
    assert_eq!(reads[0]["seat"], "claude:web");
    let (_, v) = get(&hub, "/claims");
    assert_eq!(v["claims"].as_array().map(Vec::len), Some(2));
}

#[test]
fn projects_and_phases_group_the_board() {
    let hub = Hub::start();
    ok(
        &hub,
        "/register",
        json!({"session": "claude:web", "project": "web", "status": "working"}),
    );
    ok(
        &hub,
        "/project",
        json!({"project": "web", "brief": "the shop", "by": "orch:web"}),
    );
    card(&hub, "web", "P1 cart — basket", "done", "claude:web");
    card(&hub, "web", "P2a checkout: pay", "doing", "claude:web");
    card(
        &hub,
        "web",
        "P2b checkout receipts",
        "todo",
        "orch-host:web",
    );
    // No creator: nobody is touched, so the api lane has no live session.
    ok(
        &hub,
        "/task",
        json!({"project": "api", "title": "untagged"}),
    );
    let (s, v) = get(&hub, "/projects");
    assert_eq!(s, 200, "{v}");
    let rows = v["projects"].as_array().expect("projects");
    let web = rows
        .iter()
        .find(|r| r["project"] == "web")
        .expect("web row");
    assert_eq!(web["brief"], "the shop");
    assert_eq!(web["tasks"]["doing"], 1);
    assert_eq!(web["idle"], false);
    assert!(
        web["agents"].as_array().is_some_and(|a| a
            .iter()
            .any(|x| x["session"] == "claude:web" && x["online"] == true)),
        "{web}"
    );
    assert_eq!(web["phase"], "building: P2a checkout: pay", "{web}");
    let api = rows
        .iter()
        .find(|r| r["project"] == "api")
        .expect("api row");
    assert_eq!(api["idle"], true);
    assert!(
        api["phase"]
            .as_str()
            .unwrap_or("")
            .starts_with("idle · last activity")
    );
    ok(
        &hub,
        "/phase",
        json!({"project": "web", "phase": "P2", "goal": "take money", "by": "orch:web"}),
    );
    let (s, v) = get(&hub, "/phases?project=web");
    assert_eq!(s, 200, "{v}");
    let keys: Vec<&str> = v["phases"]
        .as_array()
        .expect("phases")
        .iter()
        .filter_map(|p| p["key"].as_str())
        .collect();
    assert_eq!(keys, vec!["P1", "P2"], "{v}");
    assert_eq!(v["phases"][0]["status"], "done");
    assert_eq!(v["phases"][1]["status"], "active");
    assert_eq!(v["phases"][1]["goal"], "take money");
    assert_eq!(v["phases"][1]["total"], 2);
    assert_eq!(
        v["phases"][1]["orchestrators"][0]["assignee"],
        "orch-host:web"
    );
    assert_eq!(v["phases"][1]["agents"], json!(["claude"]));
    assert_eq!(v["brief"], "the shop");
    let (s, _) = get(&hub, "/phases");
    assert_eq!(s, 400);
}

#[test]
fn merge_folds_a_lane_and_its_old_name_still_resolves() {
    let hub = Hub::start();
    let a = card(&hub, "shop-old", "cart", "doing", "claude:shop-old");
    card(&hub, "shop", "checkout", "todo", "");
    ok(
        &hub,
        "/project",
        json!({"project": "shop-old", "brief": "old brief", "by": "orch:shop"}),
    );
    // Bad merges change nothing.
    let (s, _) = post(
        &hub,
        "/project/merge",
        json!({"from": "shop", "to": "shop"}),
    );
    assert_eq!(s, 409);
    let (s, v) = post(
        &hub,
        "/project/merge",
        json!({"from": "shop-old", "to": "nowhere"}),
    );
    assert_eq!(s, 404, "{v}");
    assert!(
        v["error"]
            .as_str()
            .unwrap_or("")
            .contains("no such project")
    );
    let (s, _) = post(&hub, "/project/merge", json!({"from": "", "to": "shop"}));
    assert_eq!(s, 400);
    let (_, c) = get(&hub, &format!("/card?id={a}"));
    assert_eq!(c["task"]["project"], "shop-old");
    // The merge.
    let v = ok(
        &hub,
        "/project/merge",
        json!({"from": "shop-old", "to": "shop"}),
    );
    assert_eq!(v["moved"]["cards"], 1, "{v}");
    let (_, c) = get(&hub, &format!("/card?id={a}"));
    assert_eq!(c["task"]["project"], "shop");
    // The old name resolves everywhere a project is named.
    let (_, t) = get(&hub, "/tasks?project=shop-old");
    assert_eq!(t["tasks"].as_array().map(Vec::len), Some(2), "{t}");
    let (_, b) = get(&hub, "/project?project=shop-old");
    assert_eq!(b["brief"], "old brief", "{b}");
    let (_, d) = get(&hub, "/catchup?project=shop-old");
    assert_eq!(d["project"], "shop");
    assert_eq!(d["total"], 2);
    let n = ok(
        &hub,
        "/task",
        json!({"project": "shop-old", "title": "new work", "by": "orch:shop"}),
    );
    assert_eq!(n["task"]["project"], "shop", "{n}");
    // Merging back into its own alias is a merge into itself.
    let (s, _) = post(
        &hub,
        "/project/merge",
        json!({"from": "shop", "to": "shop-old"}),
    );
    assert_eq!(s, 409);
}

#[test]
fn delete_refuses_open_contracts_and_open_cards() {
    let hub = Hub::start();
    ok(
        &hub,
        "/register",
        json!({"session": "orch:web", "project": "web"}),
    );
    let a = card(&hub, "web", "cart", "doing", "claude:web");
    ok(
        &hub,
        "/send",
        json!({"from": "orch:web", "to": "claude:web", "project": "web", "text": "do #1"}),
    );
    let (s, v) = post(
        &hub,
        "/project/delete",
        json!({"project": "web", "force": true}),
    );
    assert_eq!(s, 409, "{v}");
    assert!(v["error"].as_str().unwrap_or("").contains("open contract"));
    let (_, c) = get(&hub, &format!("/card?id={a}"));
    assert_eq!(c["task"]["status"], "doing");
    // The contract is answered: now only the open card refuses, unless forced.
    ok(
        &hub,
        "/send",
        json!({"from": "claude:web", "to": "orch:web", "project": "web", "text": "done", "kind": "receipt"}),
    );
    let (s, v) = post(&hub, "/project/delete", json!({"project": "web"}));
    assert_eq!(s, 409, "{v}");
    assert_eq!(v["openCards"], 1, "{v}");
    let v = ok(
        &hub,
        "/project/delete",
        json!({"project": "web", "force": true}),
    );
    assert_eq!(v["removed"]["tasks"], 1, "{v}");
    let (_, c) = get(&hub, &format!("/card?id={a}"));
    assert_eq!(c["task"]["status"], "deleted", "{c}");
    let (_, t) = get(&hub, "/tasks?project=web");
    assert_eq!(t["tasks"], json!([]));
    let (s, _) = post(&hub, "/project/delete", json!({"project": "never-was"}));
    assert_eq!(s, 404);
    let (s, _) = post(&hub, "/project/delete", json!({}));
    assert_eq!(s, 400);
}

#[test]
fn proposals_need_a_bound_queue_and_are_decided_by_the_owner() {
    let hub = Hub::start();
    let bound = |scope: &str| json!({"session": "claude:web", "scope": scope, "condition": "during the night shift", "exclusions": "never main", "key": "patrol.reap"});
    // Bad scopes: a missing bound, a bad key.
    for bad in [
        json!({"session": "claude:web", "scope": "x", "condition": "y"}),
        json!({"session": "claude:web", "scope": " ", "condition": "y", "exclusions": "z"}),
        json!({"session": "claude:web", "scope": "x", "condition": "y", "exclusions": "z", "key": "Bad Key!"}),
        json!({"scope": "x", "condition": "y", "exclusions": "z"}),
    ] {
        let (s, v) = post(&hub, "/propose", bad.clone());
        assert_eq!(s, 400, "{bad} -> {v}");
    }
    let (_, v) = get(&hub, "/proposals");
    assert_eq!(v["proposals"], json!([]));
    let p1 = ok(&hub, "/propose", bound("rebase feature branches"));
    assert_eq!(p1["proposal"]["status"], "pending");
    assert_eq!(p1["proposal"]["project"], "web");
    let id = p1["proposal"]["id"].as_i64().expect("id");
    let dup = ok(&hub, "/propose", bound("Rebase feature branches!"));
    assert_eq!(dup["dedup"], true);
    ok(&hub, "/propose", bound("two"));
    ok(&hub, "/propose", bound("three"));
    let (s, v) = post(&hub, "/propose", bound("four"));
    assert_eq!(s, 409, "{v}");
    assert!(
        v["error"]
            .as_str()
            .unwrap_or("")
            .starts_with("queue full: 3/3")
    );
    // Withdraw: only the proposer.
    let (s, _) = post(
        &hub,
        "/proposal/withdraw",
        json!({"id": id + 2, "session": "codex:web"}),
    );
    assert_eq!(s, 403);
    ok(
        &hub,
        "/proposal/withdraw",
        json!({"id": id + 2, "session": "claude:web"}),
    );
    // Decide.
    let (s, _) = post(
        &hub,
        "/proposal/decide",
        json!({"id": id, "status": "maybe"}),
    );
    assert_eq!(s, 400);
    let v = ok(
        &hub,
        "/proposal/decide",
        json!({"id": id, "status": "approved", "note": "ok at night", "by": "op:web"}),
    );
    assert_eq!(v["proposal"]["status"], "approved");
    let told = mail(&hub, "claude:web");
    assert!(
        told.iter()
            .any(|t| t.starts_with(&format!("📜 proposal #{id} APPROVED: ok at night"))),
        "{told:?}"
    );
    let (_, g) = get(&hub, "/grants?key=patrol.reap");
    assert_eq!(g["grants"].as_array().map(Vec::len), Some(1), "{g}");
    assert_eq!(g["grants"][0]["decidedBy"], "op:web");
    let (s, _) = post(
        &hub,
        "/proposal/decide",
        json!({"id": id, "status": "denied"}),
    );
    assert_eq!(s, 409);
    ok(
        &hub,
        "/proposal/decide",
        json!({"id": id, "status": "revoked"}),
    );
    let (_, g) = get(&hub, "/grants");
    assert_eq!(g["grants"], json!([]));
    // A denied proposal is not to be re-filed.
    ok(
        &hub,
        "/proposal/decide",
        json!({"id": id + 1, "status": "denied"}),
    );
    let (s, v) = post(&hub, "/propose", bound("TWO"));
    assert_eq!(s, 409, "{v}");
    assert_eq!(v["deniedId"], id + 1);
    let (_, v) = get(&hub, "/proposals?status=pending");
    assert_eq!(v["pendingCount"], 0, "{v}");
    let (_, v) = get(&hub, "/proposals?session=claude:web");
    let statuses: Vec<&str> = v["proposals"]
        .as_array()
        .expect("proposals")
        .iter()
        .filter_map(|p| p["status"].as_str())
        .collect();
    assert_eq!(statuses, vec!["revoked", "denied", "withdrawn"], "{v}");
    let ev = events(&hub, "type=proposal.");
    let kinds: Vec<&str> = ev.iter().filter_map(|e| e["type"].as_str()).collect();
    assert!(
        kinds.contains(&"proposal.filed")
            && kinds.contains(&"proposal.decided")
            && kinds.contains(&"proposal.withdrawn"),
        "{kinds:?}"
    );
    let (s, _) = post(
        &hub,
        "/proposal/decide",
        json!({"id": 99, "status": "approved"}),
    );
    assert_eq!(s, 404);
}

#[test]
fn overseer_context_and_narration() {
    let hub = Hub::start_with(|a| a.duty_tick_ms = 100);
    let (s, v) = get(&hub, "/overseer/context");
    assert_eq!((s, v["error"].as_str()), (400, Some("project required")));
    let (s, v) = get(&hub, "/overseer/context?project=web");
    assert_eq!(s, 200, "{v}");
    assert_eq!(
        v,
        json!({"level": 1, "links": [], "peers": [], "inflight": [], "warnings": []})
    );
    ok(
        &hub,
        "/register",
        json!({"session": "claude:web", "project": "web", "llm": "claude"}),
    );
    ok(
        &hub,
        "/register",
        json!({"session": "codex:web", "project": "web"}),
    );
    ok(
        &hub,
        "/register",
        json!({"session": "claude:api", "project": "api"}),
    );
    ok(
        &hub,
        "/register",
        json!({"session": "claude:other", "project": "other"}),
    );
    ok(
        &hub,
        "/policy",
        json!({"autonomy": {"web": 3, "*": 2}, "link": {"projects": ["web", "api"], "reason": "shared auth"}}),
    );
    wait_until("the overseer warning", LONG, || {
        !events(&hub, "type=overseer.warn").is_empty()
    });
    let (_, v) = get(&hub, "/overseer/context?project=web");
    assert_eq!(v["level"], 3);
    assert_eq!(
        v["links"],
        json!([{"projects": ["api", "web"], "reason": "shared auth"}])
    );
    let peers: Vec<&str> = v["peers"]
        .as_array()
        .expect("peers")
        .iter()
        .filter_map(|p| p["session"].as_str())
        .collect();
    assert_eq!(peers, ["claude:api", "claude:web", "codex:web"], "{v}");
    assert_eq!(v["peers"][1]["llm"], "claude");
    let w = &v["warnings"][0];
    assert_eq!(w["kind"], "same-project-sessions", "{v}");
    assert!(w["since"].as_i64().unwrap_or(0) > 0, "{v}");
    assert!(
        w["detail"]
            .as_str()
            .is_some_and(|d| d.ends_with("(same-project for <1m)")),
        "{v}"
    );
    assert_eq!(get(&hub, "/overseer/context?project=api").1["level"], 2);

    // Narration: only of an overseer.warn event, never blank, and /events shows it.
    let warn = events(&hub, "type=overseer.warn")[0].clone();
    assert_eq!(warn["narrated"], false);
    let id = warn["id"].as_i64().expect("id");
    let (s, _) = post(
        &hub,
        "/overseer/narrate",
        json!({"eventId": id, "text": "  "}),
    );
    assert_eq!(s, 400);
    let (s, _) = post(
        &hub,
        "/overseer/narrate",
        json!({"eventId": id, "text": "x".repeat(301)}),
    );
    assert_eq!(s, 400);
    let (s, _) = post(&hub, "/overseer/narrate", json!({"text": "hello"}));
    assert_eq!(s, 400);
    card(&hub, "web", "a card", "todo", "claude:web");
    let other = events(&hub, "type=created")[0]["id"]
        .as_i64()
        .expect("an event that is not a warning");
    let (s, v) = post(
        &hub,
        "/overseer/narrate",
        json!({"eventId": other, "text": "nope"}),
    );
    assert_eq!(
        (s, v["error"].as_str()),
        (404, Some("no such overseer.warn event"))
    );
    ok(
        &hub,
        "/overseer/narrate",
        json!({"eventId": id, "text": "Two sessions share web; they were introduced."}),
    );
    let warn = events(&hub, "type=overseer.warn")[0].clone();
    assert_eq!(warn["narrated"], true, "{warn}");
    assert_eq!(
        warn["narration"],
        "Two sessions share web; they were introduced."
    );
}

#[test]
fn import_adopts_a_project_from_another_hub() {
    let hub = Hub::start();
    let taken = card(&hub, "elsewhere", "already here", "todo", "a:elsewhere");
    let body = json!({
        "project": "shop",
        "by": "owner",
        "tasks": [
            {"id": taken, "project": "old-name", "title": "build the cart", "status": "doing",
             "assignee": "claude:shop", "by": "orch:shop", "ts": 1_700_000_000_000_i64,
             "log": [{"ts": 1_700_000_100_000_i64, "by": "claude:shop", "text": "started"}]},
            {"id": 900, "title": "write the docs", "status": "todo"}
        ],
        "events": [
            {"id": 55, "ts": 1_700_000_000_000_i64, "type": "created", "project": "old-name",
             "by": "orch:shop", "taskId": taken, "title": "build the cart", "to": "doing"}
        ],
        "messages": [
            {"id": 77, "ts": 1_700_000_200_000_i64, "from": "orch:shop", "to": "claude:shop",
             "text": "take the cart"}
        ]
    });
    // Bad input: nothing written.
    let (s, v) = post(&hub, "/import", json!({"tasks": []}));
    assert_eq!((s, v["error"].as_str()), (400, Some("project required")));
    let mut bad = body.clone();
    bad["messages"][0]["text"] = json!("  ");
    let (s, v) = post(&hub, "/import", bad);
    assert_eq!(
        (s, v["error"].as_str()),
        (400, Some("messages[0].text required"))
    );
    let mut bad = body.clone();
    bad["tasks"][1]["id"] = json!("nine hundred");
    let (s, _) = post(&hub, "/import", bad);
    assert_eq!(s, 400);
    let mut bad = body.clone();
    bad["messages"] = json!(vec![
        json!({"from": "a:shop", "to": "b:shop", "text": "x"});
        201
    ]);
    let (s, v) = post(&hub, "/import", bad);
    assert_eq!(
        (s, v["error"].as_str()),
        (400, Some("messages too long")),
        "{v}"
    );
    // An integer spelled 3.0 is an integer.
    let mut floaty = body.clone();
    floaty["tasks"][1]["ts"] = json!(1_700_000_300_000.0_f64);
    assert!(
        get(&hub, "/tasks?project=shop").1["tasks"]
            .as_array()
            .is_some_and(|t| t.is_empty())
    );

    let body = floaty;
    let v = ok(&hub, "/import", body.clone());
    assert_eq!(
        (
            v["tasks"].as_i64(),
            v["events"].as_i64(),
            v["messages"].as_i64()
        ),
        (Some(2), Some(1), Some(1)),
        "{v}"
    );
    let tasks = get(&hub, "/tasks?project=shop").1["tasks"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(tasks.len(), 2);
    let cart = tasks
        .iter()
        .find(|t| t["title"] == "build the cart")
        .expect("cart");
    let cart_id = cart["id"].as_i64().expect("id");
    assert_ne!(cart_id, taken, "a taken id gets a fresh one");
    assert_eq!(cart["status"], "doing");
    assert_eq!(cart["log"][0]["text"], "started");
    assert_eq!(cart["ts"], 1_700_000_000_000_i64);
    let docs = tasks
        .iter()
        .find(|t| t["title"] == "write the docs")
        .expect("docs");
    assert_eq!(docs["ts"], 1_700_000_300_000_i64);
    // The event follows its card; the message lands in the project; the adoption is logged.
    let ev = events(&hub, "project=shop&type=created");
    assert!(
        ev.iter()
            .any(|e| e["taskId"] == cart_id && e["ts"] == 1_700_000_000_000_i64),
        "{ev:?}"
    );
    let adopted = events(&hub, "type=project.adopted");
    assert_eq!(adopted[0]["project"], "shop");
    assert_eq!(adopted[0]["counts"]["tasks"], 2);
    let (_, inbox) = get(&hub, "/inbox?session=claude:shop&since=0&peek=1");
    assert!(
        inbox["messages"].as_array().is_some_and(|m| m
            .iter()
            .any(|m| m["text"] == "take the cart" && m["project"] == "shop")),
        "{inbox}"
    );
    // Again: the project has cards now.
    let (s, v) = post(&hub, "/import", body.clone());
    assert_eq!((s, v["existing"].as_i64()), (409, Some(2)), "{v}");
    let mut forced = body;
    forced["force"] = json!(true);
    ok(&hub, "/import", forced);
    assert_eq!(
        get(&hub, "/tasks?project=shop").1["tasks"]
            .as_array()
            .map(Vec::len),
        Some(4)
    );
}

//! "Fire up the crew" from the person's own session: the Advisor (`POST /advise`,
//! `relay_advise`, `trantor advise`, `trantor profile`), against a real hub and the real agent
//! CLIs pinned by `tests-compat/install-real-clis.sh`.

mod common;

use common::{Hub, bin, hub_request, real_clis_bin};
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::{ConfigureCommandExt, TokioChildProcess};
use serde_json::{Value, json};
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

/// A PATH with the real CLIs first and the system's tools (node, git) after.
fn path_with(bin_dir: &Path) -> String {
    format!("{}:/usr/local/bin:/usr/bin:/bin", bin_dir.display())
}

fn trantor(home: &Path, url: &str, path: &str, args: &[&str]) -> Output {
    Command::new(bin())
        .args(args)
        .env("HOME", home)
        .env("RELAY_URL", url)
        .env("RELAY_SESSION", "me:shop")
        .env("RELAY_PROJECT", "shop")
        .env_remove("AGENT_BUS_DIR")
        .env("PATH", path)
        .env("TRANTOR_LOG", "warn")
        .output()
        .expect("run trantor")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_advise_through_trantor_mcp_routes_three_packages_over_the_installed_clis() {
    let Some(clis) = real_clis_bin() else { return };
    let hub = Hub::start();
    let home = tempfile::tempdir().expect("tmp");
    let path = path_with(&clis);
    // The person's plans: Claude on Max, Codex on Plus; OpenCode left out counts as api.
    let o = trantor(
        home.path(),
        &hub.url(),
        &path,
        &["profile", "set", "claude=max", "codex=plus"],
    );
    assert!(o.status.success(), "{}", text(&o));

    let (url, h, p) = (hub.url(), home.path().to_path_buf(), path.clone());
    let cmd = tokio::process::Command::new(bin()).configure(move |c| {
        c.arg("mcp")
            .env("RELAY_URL", &url)
            .env("RELAY_SESSION", "me:shop")
            .env("RELAY_PROJECT", "shop")
            .env_remove("AGENT_BUS_DIR")
            .env_remove("TRANTOR_SEAT")
            .env("HOME", &h)
            .env("PATH", &p)
            .env("TRANTOR_LOG", "warn");
    });
    let client = ().serve(TokioChildProcess::new(cmd).expect("spawn")).await.expect("handshake");
    let tools = client.list_all_tools().await.expect("tools/list");
    assert!(tools.iter().any(|t| t.name == "relay_advise"));
    let args = json!({
        "task": "asteroids game",
        "packages": [
            {"title": "engine", "difficulty": "hard", "files": ["src/engine.rs"], "drill": "the ship flies"},
            {"title": "hud", "difficulty": "medium"},
            {"title": "readme", "difficulty": "easy"},
        ],
    });
    let r = tokio::time::timeout(
        Duration::from_secs(120),
        client.call_tool(
            CallToolRequestParams::new("relay_advise")
                .with_arguments(args.as_object().cloned().unwrap_or_default()),
        ),
    )
    .await
    .expect("relay_advise answered")
    .expect("protocol");
    let out: String = r
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect();
    assert_ne!(r.is_error, Some(true), "{out}");
    assert!(
        out.contains("| # | package | difficulty | route |"),
        "{out}"
    );
    for row in [
        "| 1 | engine | hard |",
        "| 2 | hud | medium |",
        "| 3 | readme | easy |",
    ] {
        assert!(out.contains(row), "missing {row} in {out}");
    }
    let json_part = out
        .split_once("ready relay_task_add calls):\n")
        .map(|(_, j)| j)
        .unwrap_or("");
    let advice: Value = serde_json::from_str(json_part).expect("advice JSON");
    assert_eq!(advice["mode"], "crew", "{out}");
    let routes = advice["routes"].as_array().expect("routes");
    assert_eq!(routes.len(), 3);
    // Every route goes to a CLI installed in this test, with its model.
    for r in routes {
        let route = r["route"].as_str().unwrap_or("");
        let agent = route.split(':').next().unwrap_or("");
        assert!(["claude", "codex", "opencode"].contains(&agent), "{route}");
        assert!(!r["reason"].as_str().unwrap_or("").is_empty());
    }
    // Subscriptions first: the hard package goes to Claude on Max at no marginal cost.
    assert_eq!(routes[0]["route"], "claude:claude-opus-4-5", "{out}");
    assert_eq!(routes[0]["chargedUsd"], 0.0);
    assert_eq!(
        advice["seats"]["why"].as_str().map(|s| s.contains("seat")),
        Some(true)
    );
    let cards = advice["card_args"].as_array().expect("card args");
    assert_eq!(cards.len(), 3);
    assert_eq!(cards[0]["tool"], "relay_task_add");
    assert_eq!(cards[0]["args"]["assignee"], "claude:shop");
    assert_eq!(cards[0]["args"]["drill"], "the ship flies");
    // The card args are real relay_task_add calls: the first one adds its card.
    let add = client
        .call_tool(
            CallToolRequestParams::new("relay_task_add")
                .with_arguments(cards[0]["args"].as_object().cloned().unwrap_or_default()),
        )
        .await
        .expect("task add");
    assert_ne!(add.is_error, Some(true));
    let _ = client.cancel().await;
}

#[test]
fn advise_refuses_what_it_cannot_route_and_profile_refuses_unknown_plans() {
    let hub = Hub::start();
    let home = tempfile::tempdir().expect("tmp");
    let path = "/usr/local/bin:/usr/bin:/bin";
    let o = trantor(
        home.path(),
        &hub.url(),
        path,
        &["profile", "set", "claude=gold"],
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("unknown plan 'gold' for claude"),
        "{}",
        text(&o)
    );
    assert!(
        !home.path().join(".agent-bus/profile.json").exists(),
        "nothing written"
    );
    let o = trantor(home.path(), &hub.url(), path, &["profile", "show"]);
    assert!(text(&o).contains("no plan profile yet"), "{}", text(&o));

    // A package with no difficulty, on the command line and through the route.
    let o = trantor(home.path(), &hub.url(), path, &["advise", "engine"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("no difficulty"), "{}", text(&o));
    let (code, body) = hub_request(
        hub.port,
        "POST",
        "/advise",
        Some(&json!({"project": "shop", "task": "x", "packages": [{"title": "engine"}]})),
    )
    .expect("hub answers");
    assert_eq!(code, 400, "{body}");
    assert!(
        body["error"].as_str().unwrap_or("").contains("\"engine\""),
        "{body}"
    );

    // No agent CLI on PATH: solo, said so.
    let o = trantor(
        home.path(),
        &hub.url(),
        path,
        &["advise", "--json", "hard:engine", "easy:docs"],
    );
    assert!(o.status.success(), "{}", text(&o));
    let a: Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(a["mode"], "solo");
    assert!(
        a["why"][0].as_str().unwrap_or("").contains("no agent CLI"),
        "{a}"
    );
    assert_eq!(a["seats"]["count"], 0);
}

/// The Advisor reads the crew's state (issue 23): a seat whose credential the circuit breaker
/// marked exhausted is not routed to, said why, and the estimate carries what this project's
/// cards actually cost so far, from the cost ledger.
#[test]
fn the_advisor_skips_a_seat_on_a_spent_credential_and_reports_measured_cost() {
    let hub = Hub::start();
    let post = |path: &str, body: Value| {
        let (code, v) = hub_request(hub.port, "POST", path, Some(&body)).expect("hub answers");
        assert!(code < 300, "{path}: {code} {v}");
        v
    };
    post(
        "/register",
        json!({"session": "claude:shop", "agent": "claude"}),
    );
    post("/credentials", json!({"name": "work", "agent": "claude"}));
    let until = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
        + 3_600_000;
    let marked = post(
        "/credentials/state",
        json!({"name": "work", "state": "exhausted", "until": until, "session": "claude:shop"}),
    );
    assert_eq!(marked["marked"], true, "{marked}");
    let card = post("/task", json!({"project": "shop", "title": "earlier work"}));
    let id = card["task"]["id"].as_i64().expect("card id");
    post(
        "/turns",
        json!({"session": "claude:shop", "instance": "i", "turn": 1, "project": "shop",
            "card": id, "usage": {"input": 90000, "output": 10000}, "usd": 0.30,
            "outcome": "completed"}),
    );
    let a = post(
        "/advise",
        json!({"project": "shop", "task": "x", "packages": [
            {"title": "engine", "difficulty": "medium"}, {"title": "docs", "difficulty": "easy"}],
            "clis": [{"agent": "claude", "usable": true, "detail": "on PATH"}]}),
    );
    let unavailable = a["unavailable"].to_string();
    assert!(
        unavailable.contains("claude:shop: credential work exhausted until")
            && unavailable.contains("(not routed to)"),
        "{a:#}"
    );
    assert!(
        a["routes"]
            .as_array()
            .is_some_and(|r| r.iter().all(|r| r["assignee"] != "claude:shop")),
        "{a:#}"
    );
    let m = &a["estimate"]["measured"];
    assert_eq!(m["cards"], 1, "{a:#}");
    assert_eq!(m["tokensPerCard"], 100_000, "{a:#}");
    assert_eq!(m["usdPerCard"], 0.3, "{a:#}");
    assert_eq!(m["usd"], 0.6, "{a:#}");
    assert!(
        a["summary"]
            .as_str()
            .is_some_and(|s| s.contains("Measured: this project's 1 card(s) so far cost $0.30")),
        "{a:#}"
    );
}

/// Run `trantor hook <event>` with Claude Code's JSON on stdin, as Claude Code does.
fn hook(
    home: &Path,
    url: &str,
    event: &str,
    input: &Value,
    env: &[(&str, &str)],
) -> (Value, Duration) {
    use std::io::Write;
    let started = std::time::Instant::now();
    let mut cmd = Command::new(bin());
    cmd.args(["hook", event])
        .env("HOME", home)
        .env("RELAY_URL", url)
        .env("RELAY_SESSION", "me:shop")
        .env("RELAY_PROJECT", "shop")
        .env_remove("AGENT_BUS_DIR")
        .env_remove("TRANTOR_SEAT")
        .env("TRANTOR_LOG", "warn")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("spawn hook");
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(input.to_string().as_bytes());
    }
    let out = child.wait_with_output().expect("hook output");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let v: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("hook printed no JSON ({e}): {}", text(&out)));
    (v, started.elapsed())
}

fn claude_input(event: &str, instance: &str, cwd: &Path, extra: Value) -> Value {
    let mut v = json!({
        "session_id": instance,
        "transcript_path": cwd.join("t.jsonl"),
        "cwd": cwd,
        "hook_event_name": event,
    });
    if let (Some(o), Some(e)) = (v.as_object_mut(), extra.as_object()) {
        for (k, x) in e {
            o.insert(k.clone(), x.clone());
        }
    }
    v
}

fn handoff_files(home: &Path) -> Vec<Value> {
    std::fs::read_dir(home.join(".agent-bus/handoffs"))
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".json"))
        .filter_map(|e| serde_json::from_slice(&std::fs::read(e.path()).ok()?).ok())
        .collect()
}

#[test]
fn pre_compact_writes_a_handoff_the_next_session_start_injects_once_with_its_open_threads() {
    let hub = Hub::start();
    let home = tempfile::tempdir().expect("tmp");
    let cwd = home.path();
    let (code, card) = hub_request(
        hub.port,
        "POST",
        "/task",
        Some(
            &json!({"project": "shop", "title": "fix the cart total rounding", "status": "doing",
                     "assignee": "codex:shop", "by": "me:shop"}),
        ),
    )
    .expect("card");
    assert_eq!(code, 200, "{card}");
    // A summary far over the budget: the cut must keep the open threads.
    let summary = format!("TASK: checkout. {}", "state detail ".repeat(2000));
    let pre = claude_input(
        "PreCompact",
        "sess-old",
        cwd,
        json!({"trigger": "manual", "custom_instructions": summary}),
    );
    let (out, _) = hook(cwd, &hub.url(), "pre-compact", &pre, &[]);
    assert_eq!(out, json!({}));
    let files = handoff_files(cwd);
    assert_eq!(files.len(), 1, "{files:?}");
    assert_eq!(files[0]["sent"], true);
    assert_eq!(files[0]["trigger"], "manual");
    assert!(
        files[0]["cards"][0]
            .as_str()
            .unwrap_or("")
            .contains("fix the cart total rounding")
    );
    let (code, log) = hub_request(hub.port, "GET", "/handoffs?project=shop", None).expect("log");
    assert_eq!(code, 200);
    assert_eq!(log["handoffs"][0]["session"], "me:shop");
    assert_eq!(log["handoffs"][0]["trigger"], "manual");
    assert_eq!(log["handoffs"][0]["id"], files[0]["id"]);
    let (_, ev) = hub_request(
        hub.port,
        "GET",
        "/events?project=shop&type=handoff.written",
        None,
    )
    .expect("events");
    assert_eq!(ev["events"][0]["handoffId"], files[0]["id"], "{ev}");

    // The next session gets it once, within the budget, open threads first.
    let start = claude_input(
        "SessionStart",
        "sess-new",
        cwd,
        json!({"source": "startup"}),
    );
    let budget = [("TRANTOR_HANDOFF_BUDGET", "2000")];
    let (v, _) = hook(cwd, &hub.url(), "session-start", &start, &budget);
    let ctx = v["hookSpecificOutput"]["additionalContext"]
        .as_str()
        .unwrap_or("")
        .to_string();
    let handoff = ctx.split("trantor crew brief").next().unwrap_or("");
    assert!(handoff.starts_with("trantor handoff: me:shop"), "{ctx}");
    assert!(handoff.contains("## Open threads"), "{handoff}");
    assert!(handoff.contains("fix the cart total rounding"), "{handoff}");
    assert!(handoff.contains("TASK: checkout."), "{handoff}");
    assert!(handoff.contains("(cut:"), "{handoff}");
    assert!(handoff.len() <= 2200, "{} characters", handoff.len());
    assert!(
        ctx.contains("trantor crew brief"),
        "the brief still follows: {ctx}"
    );
    let (v, _) = hook(
        cwd,
        &hub.url(),
        "session-start",
        &claude_input("SessionStart", "sess-3", cwd, json!({})),
        &[],
    );
    let again = v["hookSpecificOutput"]["additionalContext"]
        .as_str()
        .unwrap_or("");
    assert!(
        !again.contains("trantor handoff:"),
        "given once only: {again}"
    );
}

#[test]
fn a_hub_down_during_pre_compact_keeps_the_handoff_and_sends_it_later() {
    let hub = Hub::start();
    let home = tempfile::tempdir().expect("tmp");
    let cwd = home.path();
    let dead = format!("http://127.0.0.1:{}", common::free_port());
    let pre = claude_input("PreCompact", "sess-a", cwd, json!({"trigger": "auto"}));
    let (out, took) = hook(
        cwd,
        &dead,
        "pre-compact",
        &pre,
        &[("TRANTOR_HOOK_TIMEOUT_MS", "1500")],
    );
    assert_eq!(out, json!({}));
    assert!(took < Duration::from_secs(10), "the hook took {took:?}");
    let files = handoff_files(cwd);
    assert_eq!(files.len(), 1);
    assert_eq!(files[0]["sent"], false);
    assert!(
        !files[0]["gaps"]
            .as_array()
            .map(Vec::is_empty)
            .unwrap_or(true),
        "{}",
        files[0]
    );
    // The hub is back: the next hook sends it.
    let start = claude_input("SessionStart", "sess-b", cwd, json!({}));
    let (v, _) = hook(cwd, &hub.url(), "session-start", &start, &[]);
    assert!(
        v["hookSpecificOutput"]["additionalContext"]
            .as_str()
            .unwrap_or("")
            .contains("trantor handoff:")
    );
    let (_, log) = hub_request(hub.port, "GET", "/handoffs?project=shop", None).expect("log");
    assert_eq!(log["handoffs"][0]["id"], files[0]["id"], "{log}");
    assert_eq!(handoff_files(cwd)[0]["sent"], true);
}

#[test]
fn handoff_storm_guard_and_the_cli_verb() {
    let hub = Hub::start();
    let body = json!({"project": "shop", "session": "me:shop", "trigger": "auto", "id": "h1"});
    let (c, r) = hub_request(hub.port, "POST", "/handoff", Some(&body)).expect("first");
    assert_eq!((c, r["allow"].clone()), (200, json!(true)), "{r}");
    let (c, r) = hub_request(hub.port, "POST", "/handoff", Some(&body)).expect("second");
    assert_eq!(c, 200);
    assert_eq!(r["allow"], false, "{r}");
    assert_eq!(r["reason"], "storm-guard");
    assert_eq!(r["cooldownSec"], 300);
    let mut forced = body.clone();
    forced["force"] = json!(true);
    let (_, r) = hub_request(hub.port, "POST", "/handoff", Some(&forced)).expect("forced");
    assert_eq!(r["allow"], true);
    let (c, r) = hub_request(
        hub.port,
        "POST",
        "/handoff",
        Some(&json!({"project": "shop"})),
    )
    .expect("bad");
    assert_eq!(c, 400, "{r}");

    let home = tempfile::tempdir().expect("tmp");
    let o = trantor(home.path(), &hub.url(), "/usr/bin:/bin", &["handoff"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let o = trantor(
        home.path(),
        &hub.url(),
        "/usr/bin:/bin",
        &["handoff", "TASK: x. NEXT: y."],
    );
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("announced to the hub"), "{}", text(&o));
    let (_, log) =
        hub_request(hub.port, "GET", "/handoffs?project=shop&limit=1", None).expect("log");
    assert_eq!(log["handoffs"].as_array().map(Vec::len), Some(1));
    assert_eq!(log["handoffs"][0]["trigger"], "trantor-handoff");
}

//! `trantor mcp` driven by rmcp's own client over stdio, against a real hub.

mod common;

use common::{Hub, bin, free_port, hub_send};
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::RunningService;
use rmcp::transport::{ConfigureCommandExt, TokioChildProcess};
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};
use std::path::Path;
use std::time::{Duration, Instant};
use tokio::process::Command;

type Client = RunningService<RoleClient, ()>;

/// The tools the issues name; every one must be listed.
const TOOLS: [&str; 15] = [
    "relay_send",
    "relay_inbox",
    "relay_wait",
    "relay_peers",
    "relay_status",
    "relay_whoami",
    "relay_board",
    "relay_task_add",
    "relay_task_move",
    "relay_task_check",
    "relay_ask",
    "relay_contracts",
    "relay_lesson",
    "relay_project_brief",
    "relay_catchup",
];

async fn mcp(url: &str, session: &str, home: &Path) -> Client {
    mcp_as(url, session, home, None).await
}

/// `trantor mcp` for `session`; `seat` = the project a runner seat sets in `TRANTOR_SEAT`
/// (`None`: a person's session).
async fn mcp_as(url: &str, session: &str, home: &Path, seat: Option<&str>) -> Client {
    let seat = seat.map(str::to_string);
    let url = url.to_string();
    let session = session.to_string();
    let home = home.to_path_buf();
    // The test's own repository (one commit), never the one the suite runs in: `base: HEAD`
    // and the hollow-move check read the cwd's repo, and tests run at once.
    let repo = home.join("repo");
    if !repo.join(".git").exists() {
        common::init_git_repo(&repo);
    }
    let cmd = Command::new(bin()).configure(move |c| {
        c.arg("mcp")
            .current_dir(&repo)
            .env("RELAY_URL", &url)
            .env("RELAY_SESSION", &session)
            .env_remove("RELAY_PROJECT")
            .env_remove("RELAY_AGENT")
            .env("HOME", &home)
            .env("TRANTOR_LOG", "warn");
        match &seat {
            Some(p) => c.env("TRANTOR_SEAT", p),
            None => c.env_remove("TRANTOR_SEAT"),
        };
    });
    let transport = TokioChildProcess::new(cmd).expect("spawn trantor mcp");
    ().serve(transport).await.expect("MCP handshake")
}

struct Out {
    text: String,
    is_error: bool,
}

async fn call(c: &Client, name: &str, args: Value) -> Out {
    let map = args.as_object().cloned().unwrap_or_default();
    let fut = c.call_tool(CallToolRequestParams::new(name.to_string()).with_arguments(map));
    let r: CallToolResult = tokio::time::timeout(Duration::from_secs(150), fut)
        .await
        .unwrap_or_else(|_| panic!("{name} did not answer"))
        .unwrap_or_else(|e| panic!("{name} failed at the protocol level: {e}"));
    let text = r
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("\n");
    Out {
        text,
        is_error: r.is_error == Some(true),
    }
}

async fn ok(c: &Client, name: &str, args: Value) -> String {
    let o = call(c, name, args.clone()).await;
    assert!(!o.is_error, "{name}({args}) failed: {}", o.text);
    o.text
}

fn card_id(text: &str) -> i64 {
    // "card #12 added to …"
    text.split('#')
        .nth(1)
        .and_then(|s| s.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no card id in {text}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_every_tool_with_the_originals_arguments() {
    let home = tempfile::tempdir().expect("tmp");
    let url = format!("http://127.0.0.1:{}", free_port());
    let c = mcp(&url, "orch:demo", home.path()).await;
    let info = c.peer_info().expect("server info");
    assert_eq!(
        info.server_info.as_ref().map(|i| i.name.as_str()),
        Some("trantor")
    );
    let tools = c.list_all_tools().await.expect("tools/list");
    let names: Vec<String> = tools.iter().map(|t| t.name.to_string()).collect();
    for t in TOOLS {
        assert!(names.iter().any(|n| n == t), "missing {t} in {names:?}");
    }
    for t in &tools {
        let desc = t.description.as_deref().unwrap_or("");
        assert!(desc.len() > 40, "{} has no useful description", t.name);
    }

    // Every argument the original server accepted for a tool we serve is still accepted, and we
    // require nothing the original did not.
    let orig: Value = serde_json::from_str(
        &std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests-compat/mcp-tools-0.18.72.json"),
        )
        .expect("original tool list"),
    )
    .expect("json");
    let orig_tools = orig["tools"].as_array().expect("tools");
    let mut checked = 0;
    for ot in orig_tools {
        let name = ot["name"].as_str().unwrap_or_default();
        let Some(ours) = tools.iter().find(|t| t.name == name) else {
            continue;
        };
        checked += 1;
        let schema = Value::Object((*ours.input_schema).clone());
        let props = schema["properties"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        for p in ot["inputSchema"]["properties"]
            .as_object()
            .map(|m| m.keys().cloned().collect::<Vec<_>>())
            .unwrap_or_default()
        {
            assert!(
                props.contains_key(&p),
                "{name} lost the original argument {p}"
            );
            let desc = props[&p]["description"].as_str().unwrap_or("");
            let via_ref = props[&p].get("$ref").is_some() || props[&p].get("allOf").is_some();
            assert!(!desc.is_empty() || via_ref, "{name}.{p} has no description");
        }
        let orig_req: Vec<Value> = ot["inputSchema"]["required"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        for r in schema["required"].as_array().cloned().unwrap_or_default() {
            assert!(
                orig_req.contains(&r),
                "{name} now requires {r}, the original did not"
            );
        }
    }
    assert!(
        checked >= 14,
        "only {checked} tools matched the original list"
    );
    c.cancel().await.ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_tool_against_a_real_hub() {
    let hub = Hub::start();
    let url = hub.url();
    let home = tempfile::tempdir().expect("tmp");
    let orch = mcp(&url, "orch:demo", home.path()).await;
    let seat = mcp(&url, "claude:demo", home.path()).await;

    // Identity and presence: both sessions register at boot.
    let who = ok(&orch, "relay_whoami", json!({})).await;
    assert!(
        who.contains("session=orch:demo") && who.contains("project=demo"),
        "{who}"
    );
    assert!(
        who.contains(&format!("hub={url}")) && who.contains("hub_via=env (RELAY_URL)"),
        "{who}"
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let who = ok(&seat, "relay_whoami", json!({})).await;
        if who.contains("registered=yes") {
            break;
        }
        assert!(Instant::now() < deadline, "seat never registered: {who}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        ok(
            &orch,
            "relay_status",
            json!({"status": "planning the demo"})
        )
        .await,
        "status set: planning the demo"
    );
    let peers = ok(&orch, "relay_peers", json!({})).await;
    assert!(
        peers.contains("orch:demo (you) — planning the demo"),
        "{peers}"
    );
    assert!(peers.contains("claude:demo"), "{peers}");

    // Messages: inbox starts empty (nothing after boot), a send arrives, a wait wakes.
    assert_eq!(
        ok(&seat, "relay_inbox", json!({})).await,
        "(no new messages)"
    );
    let sent = ok(
        &orch,
        "relay_send",
        json!({"to": "claude:demo", "text": "please take the demo card"}),
    )
    .await;
    assert!(
        sent.starts_with("sent #") && sent.ends_with("to claude:demo"),
        "{sent}"
    );
    let inbox = ok(&seat, "relay_inbox", json!({})).await;
    assert!(
        inbox.contains("[orch:demo -> claude:demo]") && inbox.contains("please take the demo card"),
        "{inbox}"
    );
    assert_eq!(
        ok(&seat, "relay_inbox", json!({})).await,
        "(no new messages)",
        "the cursor advances"
    );
    let waiter = {
        let seat_peer = seat.peer().clone();
        tokio::spawn(async move {
            let r = seat_peer
                .call_tool(
                    CallToolRequestParams::new("relay_wait").with_arguments(
                        json!({"timeout": 60})
                            .as_object()
                            .cloned()
                            .unwrap_or_default(),
                    ),
                )
                .await
                .expect("relay_wait");
            r.content
                .iter()
                .filter_map(|c| c.as_text().map(|t| t.text.clone()))
                .collect::<String>()
        })
    };
    // relay_wait's poll is held at the hub before the message is sent.
    let port = hub.port;
    tokio::task::spawn_blocking(move || common::wait_polls_held(port, 1))
        .await
        .expect("wait for the held poll");
    let ctx = ok(
        &orch,
        "relay_send",
        json!({"to": "claude:demo", "text": "fyi only", "wake": false, "re": "1"}),
    )
    .await;
    assert!(ctx.contains("context only"), "{ctx}");
    let woke = tokio::time::timeout(Duration::from_secs(60), waiter)
        .await
        .expect("relay_wait returned")
        .expect("join");
    assert!(
        woke.contains("fyi only") && woke.contains("context only"),
        "{woke}"
    );
    let timed = ok(&seat, "relay_wait", json!({"timeout": 1})).await;
    assert!(timed.contains("timed out"), "{timed}");

    // Board: add, read, move, tick, the drill gate's 409 as the tool's error text.
    let added = ok(
        &orch,
        "relay_task_add",
        json!({"title": "Demo widget", "assignee": "claude:demo", "difficulty": "easy",
               "checklist": ["renders", "has tests"], "note": "context here", "phase": "P1"}),
    )
    .await;
    assert!(
        added.contains("added to demo") && added.contains("2 acceptance item(s)"),
        "{added}"
    );
    let id = card_id(&added);
    let board = ok(&orch, "relay_board", json!({})).await;
    assert!(
        board.contains("TODO:") && board.contains(&format!("#{id} Demo widget (@claude:demo)")),
        "{board}"
    );
    let mine = ok(&seat, "relay_board", json!({"mine": true})).await;
    assert!(
        mine.contains(&format!("card #{id} [todo] Demo widget")),
        "{mine}"
    );
    assert!(
        ok(&orch, "relay_board", json!({"mine": true}))
            .await
            .contains("no open cards")
    );
    let moved = ok(
        &seat,
        "relay_task_move",
        json!({"id": id, "status": "doing", "note": "starting"}),
    )
    .await;
    assert_eq!(moved, format!("card #{id} -> doing (note logged)"));
    let ticked = ok(&seat, "relay_task_check", json!({"id": id, "index": 0})).await;
    assert_eq!(
        ticked,
        format!("card #{id} checklist: [x] \"renders\" — 1/2 done")
    );
    let bad_item = call(&seat, "relay_task_check", json!({"id": id, "index": 9})).await;
    assert!(
        bad_item.is_error && bad_item.text.contains("no checklist item 9"),
        "{}",
        bad_item.text
    );

    // The hub's own refusal text, read straight from the hub, must be what the tool shows.
    let refused = call(
        &seat,
        "relay_task_move",
        json!({"id": id, "status": "done", "note": "looks fine"}),
    )
    .await;
    assert!(
        refused.is_error,
        "a move to done without a drill must be refused: {}",
        refused.text
    );
    trantor_proto::tls::install_default_provider();
    let direct = reqwest::Client::new()
        .post(format!("{url}/task/update"))
        .json(&json!({"id": id, "status": "done", "note": "looks fine", "by": "claude:demo"}))
        .send()
        .await
        .expect("direct call");
    assert_eq!(direct.status().as_u16(), 409);
    let body: Value = direct.json().await.expect("json");
    let hub_text = body["error"].as_str().expect("error text");
    assert!(
        refused.text.contains(hub_text),
        "tool text {:?} lacks the hub's {hub_text:?}",
        refused.text
    );
    let unknown = call(
        &seat,
        "relay_task_move",
        json!({"id": id, "status": "finished"}),
    )
    .await;
    assert!(
        unknown.is_error && unknown.text.contains("unknown status"),
        "{}",
        unknown.text
    );
    let tested = ok(&seat, "relay_task_move", json!({"id": id, "status": "testing", "note": "cargo test: 3 passed", "drill": "open the widget page and see it render"})).await;
    assert!(tested.contains("-> testing"), "{tested}");
    let card = ok(&orch, "relay_board", json!({"card": id})).await;
    for want in [
        "[testing] Demo widget",
        "assigned by: orch:demo",
        "drill: open the widget page",
        "0. [x] renders",
        "context here",
        "cargo test: 3 passed",
        "doing -> testing by claude:demo",
    ] {
        assert!(card.contains(want), "card view lacks {want:?}:\n{card}");
    }

    // Ask: the card blocks, the assigner hears it, the answer unblocks it.
    let asked = ok(
        &seat,
        "relay_ask",
        json!({"card": id, "question": "which port does the widget use?"}),
    )
    .await;
    assert!(
        asked.contains("sent to orch:demo") && asked.contains("now reads blocked"),
        "{asked}"
    );
    let orch_inbox = ok(&orch, "relay_inbox", json!({})).await;
    assert!(
        orch_inbox.contains(&format!("ask on #{id}: which port"))
            && orch_inbox.contains("kind ask"),
        "{orch_inbox}"
    );
    let ask_id = orch_inbox
        .lines()
        .find(|l| l.contains("ask on"))
        .and_then(|l| {
            l.trim_start_matches('#')
                .split(' ')
                .next()
                .map(str::to_string)
        })
        .and_then(|s| s.parse::<i64>().ok())
        .expect("ask id");
    ok(
        &orch,
        "relay_send",
        json!({"to": "claude:demo", "text": "port 8080", "re": ask_id}),
    )
    .await;
    let card = ok(&orch, "relay_board", json!({"card": id})).await;
    assert!(
        card.contains(&format!("card #{id} [doing]")),
        "the answer should unblock the card:\n{card}"
    );

    // The dispatch ledger, lessons, brief, phase goal.
    let contracts = ok(&orch, "relay_contracts", json!({})).await;
    assert!(
        contracts.contains("contract(s) from orch:demo") && contracts.contains("-> claude:demo"),
        "{contracts}"
    );
    // Catch-up: the first look reports, the second starts where it ended.
    let first = ok(&orch, "relay_catchup", json!({})).await;
    assert!(
        first.contains("Catch-up for orch:demo on demo") && first.contains("Open contracts:"),
        "{first}"
    );
    assert!(
        first.contains("Card changes:") && first.contains("Crew:"),
        "{first}"
    );
    let second = ok(&orch, "relay_catchup", json!({})).await;
    assert!(
        second.contains("Messages since your last look: 0") && second.contains("Card changes: 0"),
        "{second}"
    );
    let lesson = ok(
        &orch,
        "relay_lesson",
        json!({"text": "run the tests before testing"}),
    )
    .await;
    assert!(lesson.starts_with("lesson recorded for global"), "{lesson}");
    assert_eq!(
        ok(
            &orch,
            "relay_lesson",
            json!({"text": "run the tests before testing"})
        )
        .await,
        "lesson already recorded (global)"
    );
    assert_eq!(
        ok(
            &orch,
            "relay_project_brief",
            json!({"brief": "A demo crew."})
        )
        .await,
        "brief set for demo"
    );
    assert_eq!(
        ok(
            &orch,
            "relay_phase_goal",
            json!({"phase": "P1", "goal": "a widget"})
        )
        .await,
        "goal set for phase P1 of demo"
    );

    // Bad arguments are the tool's error, not a crash.
    let empty = call(
        &orch,
        "relay_send",
        json!({"to": "claude:demo", "text": "   "}),
    )
    .await;
    assert!(
        empty.is_error && empty.text.contains("empty"),
        "{}",
        empty.text
    );
    let secret = call(&orch, "relay_send", json!({"to": "claude:demo", "text": "key sk-ant-api03-AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"})).await;
    assert!(
        secret.is_error && secret.text.contains("secret"),
        "{}",
        secret.text
    );

    orch.cancel().await.ok();
    seat.cancel().await.ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hub_down_is_a_clear_tool_error() {
    let home = tempfile::tempdir().expect("tmp");
    let url = format!("http://127.0.0.1:{}", free_port());
    let c = mcp(&url, "orch:demo", home.path()).await;
    for (tool, args) in [
        ("relay_send", json!({"to": "claude:demo", "text": "hello"})),
        ("relay_inbox", json!({})),
        ("relay_wait", json!({"timeout": 2})),
        ("relay_board", json!({})),
        ("relay_task_move", json!({"id": 1, "status": "doing"})),
        ("relay_peers", json!({})),
    ] {
        let o = call(&c, tool, args).await;
        assert!(
            o.is_error,
            "{tool} should fail with the hub down: {}",
            o.text
        );
        assert!(
            o.text.contains(&url) && o.text.contains("cannot reach the trantor hub"),
            "{tool}: {}",
            o.text
        );
    }
    // Still serving after the errors.
    let who = ok(&c, "relay_whoami", json!({})).await;
    assert!(who.contains("registered=unknown (hub unreachable"), "{who}");
    c.cancel().await.ok();
}

/// The stdlib-only Python driver from tests-compat, as a second, independent client.
#[test]
fn python_driver_cross_check() {
    if !common::require_tool("python3") {
        return;
    }
    let hub = Hub::start();
    let home = tempfile::tempdir().expect("tmp");
    let driver = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests-compat/mcp_drive.py");
    let calls = json!([
        {"name": "relay_whoami", "arguments": {}},
        {"name": "relay_send", "arguments": {"to": "claude:demo", "text": "hello from python"}},
        {"name": "relay_task_add", "arguments": {"title": "Py card", "checklist": ["a"], "drill": "echo ok"}},
        {"name": "relay_board", "arguments": {"card": 1}},
        {"name": "relay_task_move", "arguments": {"id": 1, "status": "doing"}},
        {"name": "relay_wait", "arguments": {"timeout": 1}},
    ]);
    let out = std::process::Command::new("python3")
        .arg(&driver)
        .args(["--list-tools", "--timeout", "30", "--calls"])
        .arg(calls.to_string())
        .arg("--")
        .arg(bin())
        .arg("mcp")
        .env("RELAY_URL", hub.url())
        .env("RELAY_SESSION", "orch:demo")
        .env("HOME", home.path())
        .env("TRANTOR_LOG", "warn")
        .output()
        .expect("run mcp_drive.py");
    assert!(
        out.status.success(),
        "driver failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).expect("driver JSON");
    assert_eq!(report["initialize"]["serverInfo"]["name"], "trantor");
    assert!(report["tools"].as_array().map(|t| t.len()).unwrap_or(0) >= 14);
    let results = report["results"].as_array().expect("results");
    assert_eq!(results.len(), 6);
    for r in results {
        assert_eq!(r["isError"], false, "{r}");
    }
    assert!(
        results[1]["text"]
            .as_str()
            .unwrap_or("")
            .starts_with("sent #")
    );
    assert!(
        results[3]["text"]
            .as_str()
            .unwrap_or("")
            .contains("drill: echo ok")
    );
    assert_eq!(results[4]["text"], "card #1 -> doing");
}

/// The official TypeScript SDK's client against `trantor mcp` (a visible skip without node and
/// npm or when the SDK cannot be installed, e.g. offline; a failure under CI).
#[test]
fn typescript_sdk_client_cross_check() {
    if !common::require_tools(&["node", "npm"]) {
        return;
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("ts-sdk");
    std::fs::create_dir_all(&dir).expect("sdk dir");
    if !dir.join("node_modules/@modelcontextprotocol/sdk").exists() {
        let ok = std::process::Command::new("npm")
            .args([
                "install",
                "--silent",
                "--no-audit",
                "--no-fund",
                "@modelcontextprotocol/sdk@1",
            ])
            .current_dir(&dir)
            .output()
            .is_ok_and(|o| o.status.success());
        if !ok {
            common::skip_or_fail("could not install @modelcontextprotocol/sdk from npm (offline?)");
            return;
        }
    }
    let script = dir.join("drive.mjs");
    std::fs::write(
        &script,
        r#"import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
const [bin, ...calls] = process.argv.slice(2);
const t = new StdioClientTransport({ command: bin, args: ["mcp"], env: process.env, stderr: "ignore" });
const c = new Client({ name: "ts-check", version: "1" });
await c.connect(t);
const tools = await c.listTools();
const out = { server: c.getServerVersion(), tools: tools.tools, results: [] };
for (const raw of calls) {
  const { name, arguments: args } = JSON.parse(raw);
  const r = await c.callTool({ name, arguments: args });
  out.results.push({ name, isError: !!r.isError, text: r.content.map(x => x.text).join("\n") });
}
console.log(JSON.stringify(out));
await c.close();
"#,
    )
    .expect("script");
    let hub = Hub::start();
    let home = tempfile::tempdir().expect("tmp");
    let calls = [
        json!({"name": "relay_whoami", "arguments": {}}),
        json!({"name": "relay_task_add", "arguments": {"title": "TS card", "checklist": ["a"], "drill": "echo ok"}}),
        json!({"name": "relay_task_move", "arguments": {"id": 1, "status": "doing"}}),
        json!({"name": "relay_board", "arguments": {"mine": true}}),
        json!({"name": "relay_send", "arguments": {"to": "claude:demo", "text": "hi from TS"}}),
    ];
    let out = std::process::Command::new("node")
        .arg(&script)
        .arg(bin())
        .args(calls.iter().map(|c| c.to_string()))
        .current_dir(&dir)
        .env("RELAY_URL", hub.url())
        .env("RELAY_SESSION", "orch:demo")
        .env("HOME", home.path())
        .env("TRANTOR_LOG", "warn")
        .output()
        .expect("node");
    assert!(
        out.status.success(),
        "node client failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(r["server"]["name"], "trantor");
    assert!(r["tools"].as_array().map(|t| t.len()).unwrap_or(0) >= 14);
    let results = r["results"].as_array().expect("results");
    for x in results {
        assert_eq!(x["isError"], false, "{x}");
    }
    assert!(
        results[0]["text"]
            .as_str()
            .unwrap_or("")
            .contains("session=orch:demo")
    );
    assert_eq!(results[2]["text"], "card #1 -> doing");
    assert!(
        results[3]["text"]
            .as_str()
            .unwrap_or("")
            .contains("card #1 [doing] TS card")
    );
    assert!(
        results[4]["text"]
            .as_str()
            .unwrap_or("")
            .starts_with("sent #")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_persons_fresh_session_shows_what_it_has_not_read_and_a_seats_does_not() {
    let hub = Hub::start();
    let url = hub.url();
    let home = tempfile::tempdir().expect("tmp");
    hub_send(hub.port, "orch:demo", "ada:demo", "demo", "EARLY-FOR-ADA");
    hub_send(
        hub.port,
        "orch:demo",
        "claude:demo",
        "demo",
        "EARLY-FOR-SEAT",
    );

    // A person who opens a CLI by hand sees what arrived before the server started, once.
    let ada = mcp_as(&url, "ada:demo", home.path(), None).await;
    let inbox = ok(&ada, "relay_inbox", json!({})).await;
    assert!(inbox.contains("EARLY-FOR-ADA"), "{inbox}");
    assert_eq!(
        ok(&ada, "relay_inbox", json!({})).await,
        "(no new messages)"
    );
    ada.cancel().await.ok();
    // Reading moved the hub's delivery ledger: the next fresh session starts past it.
    let ada2 = mcp_as(&url, "ada:demo", home.path(), None).await;
    assert_eq!(
        ok(&ada2, "relay_inbox", json!({})).await,
        "(no new messages)"
    );
    hub_send(hub.port, "orch:demo", "ada:demo", "demo", "LATER-FOR-ADA");
    assert!(
        ok(&ada2, "relay_inbox", json!({}))
            .await
            .contains("LATER-FOR-ADA")
    );

    // A runner seat's prompt already carries what arrived before boot: not shown again.
    let seat = mcp_as(&url, "claude:demo", home.path(), Some("demo")).await;
    assert_eq!(
        ok(&seat, "relay_inbox", json!({})).await,
        "(no new messages)"
    );
    // A seat is not the person: its own tools see new mail but leave the hub's delivery
    // ledger to the runner (which skips mail marked read).
    let ledger = |port: u16| {
        let (st, p) =
            common::hub_request(port, "GET", "/peer?session=claude:demo", None).expect("peer");
        assert_eq!(st, 200, "{p}");
        p["deliveredUpTo"].as_i64().unwrap_or(-1)
    };
    let port = hub.port;
    let before = tokio::task::spawn_blocking(move || ledger(port))
        .await
        .expect("ledger");
    hub_send(
        hub.port,
        "orch:demo",
        "claude:demo",
        "demo",
        "MID-TURN-FOR-SEAT",
    );
    let inbox = ok(&seat, "relay_inbox", json!({})).await;
    assert!(inbox.contains("MID-TURN-FOR-SEAT"), "{inbox}");
    assert_eq!(
        ok(&seat, "relay_inbox", json!({})).await,
        "(no new messages)",
        "the seat's own cursor still advances"
    );
    hub_send(
        hub.port,
        "orch:demo",
        "claude:demo",
        "demo",
        "WAITED-FOR-SEAT",
    );
    let waited = ok(&seat, "relay_wait", json!({"timeout": 20})).await;
    assert!(waited.contains("WAITED-FOR-SEAT"), "{waited}");
    let after = tokio::task::spawn_blocking(move || ledger(port))
        .await
        .expect("ledger");
    assert_eq!(after, before, "the seat's tools moved its delivery ledger");

    // relay_inbox and relay_wait advance the ledger, so they are not annotated read-only.
    let tools = seat.list_all_tools().await.expect("tools/list");
    for name in ["relay_inbox", "relay_wait"] {
        let t = tools.iter().find(|t| t.name == name).expect(name);
        let ro = t.annotations.as_ref().and_then(|a| a.read_only_hint);
        assert_ne!(ro, Some(true), "{name} is annotated read-only");
    }
    let board_tool = tools
        .iter()
        .find(|t| t.name == "relay_board")
        .expect("board");
    assert_eq!(
        board_tool
            .annotations
            .as_ref()
            .and_then(|a| a.read_only_hint),
        Some(true)
    );
    ada2.cancel().await.ok();
    seat.cancel().await.ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn board_shows_checklist_progress_and_contracts_count_only_what_they_list() {
    let hub = Hub::start();
    let url = hub.url();
    let home = tempfile::tempdir().expect("tmp");
    let orch = mcp(&url, "orch:demo", home.path()).await;
    let added = ok(
        &orch,
        "relay_task_add",
        json!({"title": "Progress card", "assignee": "claude:demo",
               "checklist": ["one", "two", "three"]}),
    )
    .await;
    let id = card_id(&added);
    ok(&orch, "relay_task_check", json!({"id": id, "index": 1})).await;
    let board = ok(&orch, "relay_board", json!({})).await;
    assert!(
        board.contains(&format!("#{id} Progress card (@claude:demo)")) && board.contains("☑1/3"),
        "the slim board shows checklist progress:\n{board}"
    );

    // One contract owed, one status-only message (wake=false): the total counts the listed one.
    ok(
        &orch,
        "relay_send",
        json!({"to": "claude:demo", "text": "build the widget"}),
    )
    .await;
    ok(
        &orch,
        "relay_send",
        json!({"to": "claude:demo", "text": "fyi: the CI is green", "wake": false}),
    )
    .await;
    let contracts = ok(&orch, "relay_contracts", json!({})).await;
    let first = contracts.lines().next().unwrap_or_default();
    assert!(
        first.contains("of 1 contract(s) from orch:demo")
            && first.contains("1 status-only message(s) owe no answer"),
        "{contracts}"
    );
    assert_eq!(
        contracts.matches("-> claude:demo").count(),
        1,
        "{contracts}"
    );

    // The move text promises only what the hub enforces.
    let tools = orch.list_all_tools().await.expect("tools/list");
    let mv = tools
        .iter()
        .find(|t| t.name == "relay_task_move")
        .and_then(|t| t.description.as_deref().map(str::to_string))
        .unwrap_or_default();
    assert!(
        !mv.contains("someone else") && mv.contains("still made, with a warning"),
        "{mv}"
    );
    let moved = ok(
        &orch,
        "relay_task_move",
        json!({"id": id, "status": "testing"}),
    )
    .await;
    assert!(moved.contains("warning: no note"), "{moved}");
    orch.cancel().await.ok();
}

/// `relay_verify_gate`: add (tied to a card), list, the card's done move refused naming the
/// gate, resolve, then done goes through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_gate_holds_a_card_until_resolved() {
    let hub = Hub::start();
    let url = hub.url();
    let home = tempfile::tempdir().expect("tmp");
    let orch = mcp(&url, "orch:demo", home.path()).await;
    let added = ok(
        &orch,
        "relay_task_add",
        json!({"title": "coefficients", "assignee": "orch:demo", "drill": "cargo test coeff"}),
    )
    .await;
    let card = card_id(&added);
    let g = ok(
        &orch,
        "relay_verify_gate",
        json!({"action": "add", "claim": "coefficients match the paper", "card": card,
               "howToVerify": "cross-check table 2"}),
    )
    .await;
    assert!(
        g.starts_with("gate #1 added") && g.contains(&format!("card #{card}")),
        "{g}"
    );
    let again = ok(
        &orch,
        "relay_verify_gate",
        json!({"action": "add", "claim": "coefficients match the paper"}),
    )
    .await;
    assert!(again.contains("already open"), "{again}");
    let list = ok(&orch, "relay_verify_gate", json!({"action": "list"})).await;
    assert!(
        list.contains("#1 coefficients match the paper") && list.contains("table 2"),
        "{list}"
    );
    let refused = call(
        &orch,
        "relay_task_move",
        json!({"id": card, "status": "done", "note": "Drill: cargo test coeff passed"}),
    )
    .await;
    assert!(
        refused.is_error && refused.text.contains("open verification gate #1"),
        "{}",
        refused.text
    );
    let missing = call(&orch, "relay_verify_gate", json!({"action": "resolve"})).await;
    assert!(
        missing.is_error && missing.text.contains("`id`"),
        "{}",
        missing.text
    );
    let r = ok(
        &orch,
        "relay_verify_gate",
        json!({"action": "resolve", "id": 1, "note": "checked table 2"}),
    )
    .await;
    assert_eq!(r, "gate #1 verified: coefficients match the paper");
    let moved = call(
        &orch,
        "relay_task_move",
        json!({"id": card, "status": "done", "note": "Drill: cargo test coeff passed"}),
    )
    .await;
    assert!(!moved.is_error, "{}", moved.text);
    let empty = ok(&orch, "relay_verify_gate", json!({"action": "list"})).await;
    assert_eq!(empty, "no open verification gates in demo");

    // relay_send stamps a contract's base from the repository the server runs in (the test's).
    let head = trantor_proto::git::git_command(&home.path().join("repo"))
        .args(["rev-parse", "HEAD"])
        .output()
        .expect("git");
    let head = String::from_utf8_lossy(&head.stdout).trim().to_string();
    ok(
        &orch,
        "relay_send",
        json!({"to": "claude:demo", "text": "your card #9", "base": "HEAD"}),
    )
    .await;
    let (_, v) = common::hub_request(
        hub.port,
        "GET",
        "/inbox?session=claude:demo&since=0&peek=1",
        None,
    )
    .expect("inbox");
    assert!(
        v.to_string().contains(&format!("base: {head}")),
        "no base line: {v}"
    );
    let bad = call(
        &orch,
        "relay_send",
        json!({"to": "claude:demo", "text": "x", "base": "no-such-ref-here"}),
    )
    .await;
    assert!(
        bad.is_error && bad.text.contains("cannot resolve base"),
        "{}",
        bad.text
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resources_and_prompts_over_stdio_are_the_same_as_over_http() {
    use rmcp::model::{GetPromptRequestParams, ReadResourceRequestParams};
    let hub = Hub::spawn();
    let home = tempfile::tempdir().expect("home");
    let c = mcp(&hub.url(), "claude:web", home.path()).await;
    let id = card_id(
        &ok(
            &c,
            "relay_task_add",
            json!({"title": "stdio reads cards too", "assignee": "claude:web", "drill": "cargo test"}),
        )
        .await,
    );
    let uri = format!("trantor://card/{id}");
    let listed: Vec<String> = c
        .list_all_resources()
        .await
        .expect("resources/list")
        .into_iter()
        .map(|r| r.uri)
        .collect();
    assert!(
        listed.contains(&uri) && listed.iter().any(|u| u == "trantor://board/web"),
        "{listed:?}"
    );
    let read = c
        .read_resource(ReadResourceRequestParams::new(uri.clone()))
        .await
        .expect("resources/read");
    let body = serde_json::to_string(&read.contents).expect("contents");
    assert!(body.contains("stdio reads cards too") && body.contains("drill: cargo test"));
    let prompt = c
        .get_prompt(
            GetPromptRequestParams::new("card_contract")
                .with_arguments(json!({"card": id}).as_object().cloned().unwrap_or_default()),
        )
        .await
        .expect("prompts/get");
    assert!(
        serde_json::to_string(&prompt.messages)
            .expect("messages")
            .contains("stdio reads cards too")
    );
    let ids = c
        .complete_prompt_simple("card_contract", "card", "")
        .await
        .expect("completion/complete");
    assert!(ids.contains(&id.to_string()), "{ids:?}");
    c.cancel().await.ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proposal_tools_file_list_and_withdraw() {
    let hub = Hub::start();
    let url = hub.url();
    let home = tempfile::tempdir().expect("tmp");
    let c = mcp(&url, "claude:demo", home.path()).await;
    let tools = c.list_all_tools().await.expect("tools/list");
    for t in [
        "relay_propose",
        "relay_proposals",
        "relay_withdraw_proposal",
    ] {
        assert!(tools.iter().any(|x| x.name == t), "missing {t}");
    }
    let none = ok(&c, "relay_proposals", json!({})).await;
    assert_eq!(none, "no proposals filed by this session");

    let filed = ok(
        &c,
        "relay_propose",
        json!({"scope": "push to main", "condition": "after the suite exits 0",
               "exclusions": "never force-push", "key": "git.push-main"}),
    )
    .await;
    assert!(
        filed.starts_with("proposal #1 filed and PENDING"),
        "{filed}"
    );
    let again = ok(
        &c,
        "relay_propose",
        json!({"scope": "push to main", "condition": "after the suite exits 0",
               "exclusions": "never force-push"}),
    )
    .await;
    assert!(
        again.starts_with("already pending as proposal #1"),
        "{again}"
    );
    let unbound = call(
        &c,
        "relay_propose",
        json!({"scope": "anything", "condition": "always", "exclusions": " "}),
    )
    .await;
    assert!(
        unbound.is_error
            && unbound
                .text
                .starts_with("REFUSED: a proposal must state its bound"),
        "{}",
        unbound.text
    );
    let bad_key = call(
        &c,
        "relay_propose",
        json!({"scope": "x", "condition": "y", "exclusions": "z", "key": "Not A Slug!"}),
    )
    .await;
    assert!(
        bad_key.is_error && bad_key.text.contains("slug"),
        "{}",
        bad_key.text
    );

    // A second proposal, denied by the operator with a note: the list shows both, and a
    // near-duplicate of the denied one is refused with the operator's note.
    ok(
        &c,
        "relay_propose",
        json!({"scope": "delete release tags", "condition": "when asked",
               "exclusions": "none other"}),
    )
    .await;
    let (code, v) = common::hub_request(
        hub.port,
        "POST",
        "/proposal/decide",
        Some(&json!({"id": 2, "status": "denied", "note": "tags are forever", "by": "human"})),
    )
    .expect("decide");
    assert_eq!(code, 200, "{v}");
    let list = ok(&c, "relay_proposals", json!({})).await;
    assert!(
        list.contains("#1 ⏳ PENDING — push to main · when: after the suite exits 0 · NOT covered: never force-push"),
        "{list}"
    );
    assert!(
        list.contains("#2 ⛔ DENIED — delete release tags")
            && list.contains("operator: \"tags are forever\""),
        "{list}"
    );
    let redo = call(
        &c,
        "relay_propose",
        json!({"scope": "delete release tags", "condition": "when asked",
               "exclusions": "anything else"}),
    )
    .await;
    assert!(
        redo.is_error
            && redo.text.contains("DENIED")
            && redo
                .text
                .contains("The operator's note on the prior denial: \"tags are forever\""),
        "{}",
        redo.text
    );

    // Withdraw: only pending, only one's own.
    let w = ok(&c, "relay_withdraw_proposal", json!({"id": 1})).await;
    assert_eq!(w, "proposal #1 withdrawn — one queue slot free");
    let twice = call(&c, "relay_withdraw_proposal", json!({"id": "1"})).await;
    assert!(
        twice.is_error
            && twice
                .text
                .starts_with("could not withdraw: already withdrawn"),
        "{}",
        twice.text
    );
    let missing = call(&c, "relay_withdraw_proposal", json!({"id": 99})).await;
    assert!(
        missing.is_error && missing.text.contains("no such proposal"),
        "{}",
        missing.text
    );
    let other = mcp(&url, "codex:demo", home.path()).await;
    ok(
        &c,
        "relay_propose",
        json!({"scope": "run migrations", "condition": "on staging", "exclusions": "prod"}),
    )
    .await;
    let theirs = call(&other, "relay_withdraw_proposal", json!({"id": 3})).await;
    assert!(
        theirs.is_error && theirs.text.contains("only the proposing session"),
        "{}",
        theirs.text
    );
    let list = ok(&c, "relay_proposals", json!({})).await;
    assert!(list.contains("#1 ↩\u{fe0f} WITHDRAWN"), "{list}");
    c.cancel().await.ok();
    other.cancel().await.ok();
}

/// `trantor mcp` for `session`, run in `cwd` (a worktree), with extra environment.
async fn mcp_in(
    url: &str,
    session: &str,
    home: &Path,
    cwd: &Path,
    env: &[(&str, String)],
) -> Client {
    let url = url.to_string();
    let session = session.to_string();
    let home = home.to_path_buf();
    let cwd = cwd.to_path_buf();
    let env: Vec<(String, String)> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    let cmd = Command::new(bin()).configure(move |c| {
        c.arg("mcp")
            .current_dir(&cwd)
            .env("RELAY_URL", &url)
            .env("RELAY_SESSION", &session)
            .env_remove("RELAY_PROJECT")
            .env_remove("RELAY_AGENT")
            .env_remove("TRANTOR_SEAT")
            .env("HOME", &home)
            .env("TRANTOR_LOG", "warn");
        for (k, v) in &env {
            c.env(k, v);
        }
    });
    let transport = TokioChildProcess::new(cmd).expect("spawn trantor mcp");
    ().serve(transport).await.expect("MCP handshake")
}

/// The newest card-log entry of card `id`.
fn last_note(port: u16, id: i64) -> String {
    let (_, v) = common::hub_request(port, "GET", &format!("/card?id={id}"), None).expect("card");
    v["task"]["log"]
        .as_array()
        .and_then(|l| l.last())
        .and_then(|e| e["text"].as_str())
        .unwrap_or_default()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn task_move_flags_a_hollow_move_and_adds_the_blast_line() {
    let hub = Hub::start();
    let url = hub.url();
    let home = tempfile::tempdir().expect("tmp");
    let repo = tempfile::tempdir().expect("repo");
    let r = repo.path();
    common::git_in(r, &["init", "-q", "-b", "main"]);
    common::git_in(r, &["config", "user.email", "t@example.com"]);
    common::git_in(r, &["config", "user.name", "t"]);
    std::fs::write(r.join("a.rs"), "fn a() {}\n").expect("write");
    common::git_in(r, &["add", "."]);
    common::git_in(r, &["commit", "-q", "-m", "one"]);
    // A stand-in for graft: prints graft.json beside it, fails while there is none.
    let tools = tempfile::tempdir().expect("tools");
    let graft = tools.path().join("graft");
    std::fs::write(
        &graft,
        "#!/bin/sh\nexec cat \"$(dirname \"$0\")/graft.json\"\n",
    )
    .expect("graft");
    let mut perm = std::fs::metadata(&graft).expect("meta").permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o755);
    std::fs::set_permissions(&graft, perm).expect("chmod");
    let seat = mcp_in(
        &url,
        "claude:demo",
        home.path(),
        r,
        &[("GRAFT_BIN", graft.to_string_lossy().into_owned())],
    )
    .await;
    let (_, v) = common::hub_request(
        hub.port,
        "POST",
        "/task",
        Some(
            &json!({"project": "demo", "title": "login form", "assignee": "claude:demo",
                      "by": "orch:demo", "drill": "open /login"}),
        ),
    )
    .expect("task");
    let id = v["task"]["id"].as_i64().expect("id");

    // Taken at HEAD; moved to testing with nothing to show: flagged, and the assigner told.
    ok(
        &seat,
        "relay_task_move",
        json!({"id": id, "status": "doing"}),
    )
    .await;
    let bases = std::fs::read_to_string(r.join(".git/hollow-base.json")).expect("base recorded");
    assert!(
        bases.contains(&common::git_in(r, &["rev-parse", "HEAD"])),
        "{bases}"
    );
    let out = ok(
        &seat,
        "relay_task_move",
        json!({"id": id, "status": "testing", "note": "looked at it"}),
    )
    .await;
    assert!(out.contains("flagged HOLLOW"), "{out}");
    let what = "no diff, no new files, no ticked checklist items, no test command in the note, \
                no verified-at sha in the note";
    assert_eq!(
        last_note(hub.port, id),
        format!("HOLLOW: {what} — looked at it\nblast: unavailable")
    );
    let (_, inbox) = common::hub_request(
        hub.port,
        "GET",
        "/inbox?session=orch:demo&since=0&peek=1",
        None,
    )
    .expect("inbox");
    let told = format!(
        "HOLLOW move on #{id} -> testing by claude:demo: {what}. The move landed; the note is flagged on the card."
    );
    assert!(
        inbox["messages"]
            .as_array()
            .is_some_and(|m| m.iter().any(|m| m["text"] == told.as_str())),
        "{inbox}"
    );
    let (_, ev) = common::hub_request(
        hub.port,
        "GET",
        &format!("/events?taskId={id}&type=moved"),
        None,
    )
    .expect("events");
    assert_eq!(
        ev["events"]
            .as_array()
            .and_then(|e| e.last())
            .map(|e| e["blast"].clone()),
        Some(json!({"unavailable": true})),
        "{ev}"
    );

    // Work committed, graft answering: the note keeps its words, with the blast line.
    std::fs::write(r.join("a.rs"), "fn a() { b() }\n").expect("write");
    common::git_in(r, &["commit", "-q", "-am", "two"]);
    let sha = common::git_in(r, &["rev-parse", "--short", "HEAD"]);
    std::fs::write(
        tools.path().join("graft.json"),
        r#"{"changed":[{"path":"a.rs"},{"path":"Cargo.toml"}],"unindexed":["Cargo.toml"],"impacted":[{"path":"b.rs"},{"path":"c.rs"},{"path":"a.rs"}]}"#,
    )
    .expect("graft.json");
    let note = format!("cargo test: 3 passed, verified at {sha}");
    let out = ok(
        &seat,
        "relay_task_move",
        json!({"id": id, "status": "testing", "note": note}),
    )
    .await;
    assert!(!out.contains("HOLLOW"), "{out}");
    assert_eq!(
        last_note(hub.port, id),
        format!("{note}\nblast: 2 files depend on the 1 changed (Cargo.toml not in the graph)")
    );

    // Evidence but no verified-at sha: only that is named.
    ok(
        &seat,
        "relay_task_move",
        json!({"id": id, "status": "testing", "note": "cargo test: 3 passed"}),
    )
    .await;
    assert!(
        last_note(hub.port, id)
            .starts_with("HOLLOW: no verified-at sha in the note — cargo test: 3 passed\nblast: "),
        "{}",
        last_note(hub.port, id)
    );
    // A declared no-code outcome is never flagged; a card taken outside a worktree is not checked.
    ok(
        &seat,
        "relay_task_move",
        json!({"id": id, "status": "testing", "note": "investigated: the bug is upstream"}),
    )
    .await;
    assert!(
        last_note(hub.port, id).starts_with("investigated: the bug is upstream\nblast: "),
        "{}",
        last_note(hub.port, id)
    );
    let elsewhere = tempfile::tempdir().expect("not a repo");
    let plain = mcp_in(&url, "codex:demo", home.path(), elsewhere.path(), &[]).await;
    let (_, v) = common::hub_request(
        hub.port,
        "POST",
        "/task",
        Some(&json!({"project": "demo", "title": "notes", "assignee": "codex:demo", "by": "orch:demo"})),
    )
    .expect("task");
    let other = v["task"]["id"].as_i64().expect("id");
    ok(
        &plain,
        "relay_task_move",
        json!({"id": other, "status": "doing"}),
    )
    .await;
    ok(
        &plain,
        "relay_task_move",
        json!({"id": other, "status": "testing", "note": "wrote them"}),
    )
    .await;
    assert_eq!(last_note(hub.port, other), "wrote them");
    seat.cancel().await.ok();
    plain.cancel().await.ok();
}

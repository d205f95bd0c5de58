//! The hub's `/mcp` (MCP over Streamable HTTP) driven by rmcp's own client against the real
//! `trantor hub` binary: the same tools as `trantor mcp`, the calling session named by the
//! `X-Relay-Session` header, and the hub's Host/Origin refusals in front.

mod common;

use common::{Hub, hub_messages, wait_until};
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::time::Duration;

type Client = RunningService<RoleClient, ()>;

/// A few of the tools `trantor mcp` serves; `/mcp` must list the same set.
const TOOLS: [&str; 6] = [
    "relay_send",
    "relay_inbox",
    "relay_wait",
    "relay_peers",
    "relay_whoami",
    "relay_board",
];

fn http() -> reqwest::Client {
    trantor_proto::tls::install_default_provider();
    reqwest::Client::new()
}

/// An MCP client of `url`/mcp sending `headers` on every request.
async fn connect(url: &str, headers: &[(&'static str, &str)]) -> Client {
    let mut map = HashMap::new();
    for (k, v) in headers {
        map.insert(
            reqwest::header::HeaderName::from_static(k),
            reqwest::header::HeaderValue::from_str(v).expect("header value"),
        );
    }
    let config =
        StreamableHttpClientTransportConfig::with_uri(format!("{url}/mcp")).custom_headers(map);
    let transport = StreamableHttpClientTransport::with_client(http(), config);
    tokio::time::timeout(Duration::from_secs(30), ().serve(transport))
        .await
        .expect("initialize answered")
        .expect("MCP handshake over HTTP")
}

async fn call(c: &Client, name: &str, args: Value) -> (String, bool) {
    let map = args.as_object().cloned().unwrap_or_default();
    let fut = c.call_tool(CallToolRequestParams::new(name.to_string()).with_arguments(map));
    let r: CallToolResult = tokio::time::timeout(Duration::from_secs(60), fut)
        .await
        .unwrap_or_else(|_| panic!("{name} did not answer"))
        .unwrap_or_else(|e| panic!("{name} failed at the protocol level: {e}"));
    let text = r
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("\n");
    (text, r.is_error == Some(true))
}

async fn ok(c: &Client, name: &str, args: Value) -> String {
    let (text, err) = call(c, name, args.clone()).await;
    assert!(!err, "{name}({args}) failed: {text}");
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_over_http_speak_as_the_header_session() {
    let hub = Hub::spawn();
    let url = hub.url();
    let alice = connect(&url, &[("x-relay-session", "claude:web")]).await;
    let info = alice.peer_info().expect("server info");
    assert_eq!(
        info.server_info.as_ref().map(|i| i.name.as_str()),
        Some("trantor")
    );
    let tools = alice.list_all_tools().await.expect("tools/list");
    let names: Vec<String> = tools.iter().map(|t| t.name.to_string()).collect();
    for t in TOOLS {
        assert!(names.iter().any(|n| n == t), "missing {t} in {names:?}");
    }

    let who = ok(&alice, "relay_whoami", json!({})).await;
    assert!(
        who.contains("session=claude:web") && who.contains("project=web"),
        "{who}"
    );

    let sent = ok(
        &alice,
        "relay_send",
        json!({"to": "codex:web", "text": "hello over streamable http"}),
    )
    .await;
    assert!(!sent.is_empty());
    wait_until("the message on the hub", Duration::from_secs(10), || {
        hub_messages(hub.port, "codex:web")
            .iter()
            .any(|m| m["from"] == "claude:web" && m["text"] == "hello over streamable http")
    });

    // The addressee, over its own MCP session, reads it with relay_inbox.
    let bob = connect(&url, &[("x-relay-session", "codex:web")]).await;
    let inbox = ok(&bob, "relay_inbox", json!({})).await;
    assert!(
        inbox.contains("hello over streamable http") && inbox.contains("claude:web"),
        "{inbox}"
    );

    // No header: the tool says how to name the session; nothing is sent.
    let anon = connect(&url, &[]).await;
    assert!(!anon.list_all_tools().await.expect("tools/list").is_empty());
    let (text, err) = call(
        &anon,
        "relay_send",
        json!({"to": "codex:web", "text": "from nobody"}),
    )
    .await;
    assert!(err && text.contains("X-Relay-Session"), "{text}");

    for c in [alice, bob, anon] {
        c.cancel().await.ok();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_origin_and_host_are_refused_and_unknown_sessions_are_404() {
    let hub = Hub::spawn();
    let mcp = format!("{}/mcp", hub.url());
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "test", "version": "1"}}});
    let post = |extra: &[(&'static str, &str)], body: &Value| {
        let mut r = http()
            .post(&mcp)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(body.to_string());
        for (k, v) in extra {
            r = r.header(*k, *v);
        }
        r.send()
    };

    // DNS rebinding: a web page's origin, or a Host that is not this hub's name.
    let r = post(&[("origin", "http://evil.example")], &init)
        .await
        .expect("reply");
    assert_eq!(r.status(), 403);
    let r = post(&[("host", "evil.example")], &init)
        .await
        .expect("reply");
    assert_eq!(r.status(), 403);

    // A loopback page's origin is the hub's own: served.
    let r = post(&[("origin", "http://127.0.0.1:5173")], &init)
        .await
        .expect("reply");
    assert_eq!(r.status(), 200);
    assert!(r.headers().contains_key("mcp-session-id"));

    // A body that is not JSON, or not JSON-RPC: 400 with the JSON-RPC error for it.
    for (body, code) in [
        ("{\"jsonrpc\":", -32700),
        ("[1,2,3]", -32600),
        ("{}", -32600),
    ] {
        let r = http()
            .post(&mcp)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(body)
            .send()
            .await
            .expect("reply");
        assert_eq!(r.status(), 400, "{body}");
        let v: Value = r.json().await.expect("JSON-RPC error body");
        assert_eq!(v["error"]["code"], code, "{body}: {v}");
    }
    // Oversized: 413 before anything is parsed.
    let r = http()
        .post(&mcp)
        .header("content-type", "application/json")
        .body(vec![b' '; 5 * 1024 * 1024])
        .send()
        .await
        .expect("reply");
    assert_eq!(r.status(), 413);

    // A session id this hub never issued (or has ended): 404, so the client re-initializes.
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
    let r = post(
        &[
            ("mcp-session-id", "not-a-session-of-this-hub"),
            ("mcp-protocol-version", "2025-06-18"),
        ],
        &list,
    )
    .await
    .expect("reply");
    assert_eq!(r.status(), 404);
}

fn card_id(text: &str) -> i64 {
    // "card #12 added to …"
    text.split('#')
        .nth(1)
        .and_then(|s| s.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no card id in {text}"))
}

/// A client that hands every `notifications/resources/updated` URI to a channel.
#[derive(Clone)]
struct Watcher(tokio::sync::mpsc::UnboundedSender<String>);

impl rmcp::ClientHandler for Watcher {
    async fn on_resource_updated(
        &self,
        params: rmcp::model::ResourceUpdatedNotificationParam,
        _context: rmcp::service::NotificationContext<RoleClient>,
    ) {
        let _ = self.0.send(params.uri);
    }
}

fn texts(r: &rmcp::model::ReadResourceResult) -> Vec<(String, String)> {
    r.contents
        .iter()
        .filter_map(|c| match c {
            rmcp::model::ResourceContents::TextResourceContents {
                mime_type, text, ..
            } => Some((mime_type.clone().unwrap_or_default(), text.clone())),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(deprecated)]
async fn resources_prompts_completion_and_subscriptions_over_http() {
    use rmcp::model::{
        GetPromptRequestParams, LoggingLevel, ReadResourceRequestParams, SetLevelRequestParams,
        SubscribeRequestParams, UnsubscribeRequestParams,
    };
    let hub = Hub::spawn();
    let url = hub.url();
    let alice = connect(&url, &[("x-relay-session", "claude:web")]).await;
    let added = ok(
        &alice,
        "relay_task_add",
        json!({"title": "serve the board as a resource", "assignee": "claude:web",
               "drill": "cargo test -p trantor --test mcp_http", "checklist": ["list", "read"]}),
    )
    .await;
    let id = card_id(&added);
    ok(
        &alice,
        "relay_project_brief",
        json!({"brief": "the web shop, rebuilt"}),
    )
    .await;
    let card_uri = format!("trantor://card/{id}");

    // List: the board, the brief, the caller's open card and the lessons.
    let listed: Vec<String> = alice
        .list_all_resources()
        .await
        .expect("resources/list")
        .into_iter()
        .map(|r| r.uri)
        .collect();
    for want in [
        "trantor://board/web",
        "trantor://brief/web",
        card_uri.as_str(),
        "trantor://lessons",
    ] {
        assert!(listed.iter().any(|u| u == want), "{want} in {listed:?}");
    }
    let templates: Vec<String> = alice
        .list_all_resource_templates()
        .await
        .expect("resources/templates/list")
        .into_iter()
        .map(|t| t.uri_template)
        .collect();
    assert!(
        templates.iter().any(|t| t == "trantor://card/{id}")
            && templates.iter().any(|t| t == "trantor://board/{project}"),
        "{templates:?}"
    );

    // Read: the card as text and as JSON, with drill and checklist; the board; the brief.
    let read = |uri: String| alice.read_resource(ReadResourceRequestParams::new(uri));
    let card = texts(&read(card_uri.clone()).await.expect("read the card"));
    let (_, text) = card.iter().find(|(m, _)| m == "text/plain").expect("text");
    assert!(
        text.contains("serve the board as a resource")
            && text.contains("drill: cargo test")
            && text.contains("[ ] list"),
        "{text}"
    );
    let (_, doc) = card
        .iter()
        .find(|(m, _)| m == "application/json")
        .expect("json");
    let doc: Value = serde_json::from_str(doc).expect("card JSON");
    assert_eq!(doc["task"]["id"], id);
    let board = texts(&read("trantor://board/web".into()).await.expect("board"));
    assert!(board[0].1.contains(&format!("#{id}")), "{board:?}");
    let brief = texts(&read("trantor://brief/web".into()).await.expect("brief"));
    assert!(brief[0].1.contains("the web shop, rebuilt"), "{brief:?}");
    let err = read("test://static-text".into())
        .await
        .expect_err("a foreign URI is an error");
    assert!(err.to_string().contains("no such resource"), "{err}");
    let err = read("trantor://card/999999".into())
        .await
        .expect_err("an unknown card is an error");
    assert!(err.to_string().contains("no such resource"), "{err}");

    // Prompts, with their arguments.
    let prompts: Vec<String> = alice
        .list_all_prompts()
        .await
        .expect("prompts/list")
        .into_iter()
        .map(|p| p.name)
        .collect();
    assert_eq!(prompts, ["crew_playbook", "handoff", "card_contract"]);
    let args = |v: Value| v.as_object().cloned().unwrap_or_default();
    let contract = alice
        .get_prompt(
            GetPromptRequestParams::new("card_contract")
                .with_arguments(args(json!({"card": id.to_string(), "base": "abc123"}))),
        )
        .await
        .expect("card_contract");
    let all = serde_json::to_string(&contract.messages).expect("messages");
    assert!(
        all.contains("serve the board as a resource")
            && all.contains("base: abc123")
            && all.contains(&card_uri),
        "{all}"
    );
    let handoff = alice
        .get_prompt(
            GetPromptRequestParams::new("handoff")
                .with_arguments(args(json!({"to": "codex:web", "card": id}))),
        )
        .await
        .expect("handoff");
    let all = serde_json::to_string(&handoff.messages).expect("messages");
    assert!(
        all.contains("codex:web") && all.contains("relay_handoff"),
        "{all}"
    );
    let playbook = alice
        .get_prompt(GetPromptRequestParams::new("crew_playbook"))
        .await
        .expect("crew_playbook");
    let all = serde_json::to_string(&playbook.messages).expect("messages");
    assert!(all.contains("claude:web") && all.contains("web"), "{all}");
    let err = alice
        .get_prompt(GetPromptRequestParams::new("handoff"))
        .await
        .expect_err("a missing required argument is an error");
    assert!(err.to_string().contains("`to`"), "{err}");

    // Completion: card ids, projects, sessions; nothing for what is not ours.
    let ids = alice
        .complete_prompt_simple("card_contract", "card", "")
        .await
        .expect("complete card");
    assert!(ids.contains(&id.to_string()), "{ids:?}");
    let projects = alice
        .complete_resource_simple("trantor://board/{project}", "project", "w")
        .await
        .expect("complete project");
    assert_eq!(projects, ["web"]);
    let sessions = alice
        .complete_prompt_simple("handoff", "to", "cla")
        .await
        .expect("complete session");
    assert_eq!(sessions, ["claude:web"]);
    let none = alice
        .complete_prompt_simple("test_prompt_with_arguments", "arg1", "x")
        .await
        .expect("complete a foreign prompt");
    assert!(none.is_empty());

    // Logging level, then a subscription: a move of the card notifies its URI.
    alice
        .set_level(SetLevelRequestParams::new(LoggingLevel::Info))
        .await
        .expect("logging/setLevel");
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut map = HashMap::new();
    map.insert(
        reqwest::header::HeaderName::from_static("x-relay-session"),
        reqwest::header::HeaderValue::from_static("codex:web"),
    );
    let config =
        StreamableHttpClientTransportConfig::with_uri(format!("{url}/mcp")).custom_headers(map);
    let transport = StreamableHttpClientTransport::with_client(http(), config);
    let bob = Watcher(tx)
        .serve(transport)
        .await
        .expect("watcher handshake");
    bob.subscribe(SubscribeRequestParams::new(card_uri.clone()))
        .await
        .expect("resources/subscribe");
    let err = bob
        .subscribe(SubscribeRequestParams::new("test://watched-resource"))
        .await
        .expect_err("a foreign URI cannot be subscribed");
    assert!(err.to_string().contains("no such resource"), "{err}");
    let err = bob
        .subscribe(SubscribeRequestParams::new("trantor://brief/web"))
        .await
        .expect_err("a brief cannot be subscribed");
    assert!(err.to_string().contains("records no event"), "{err}");
    // The follower opens the hub's feed beside the reply: move the card until one arrives.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let mut notes = 0;
    let got = loop {
        notes += 1;
        ok(
            &alice,
            "relay_task_move",
            json!({"id": id, "status": "doing", "note": format!("step {notes}")}),
        )
        .await;
        match tokio::time::timeout(Duration::from_millis(500), rx.recv()).await {
            Ok(Some(uri)) => break uri,
            _ if tokio::time::Instant::now() > deadline => panic!("no resources/updated"),
            _ => {}
        }
    };
    assert_eq!(got, card_uri);
    bob.unsubscribe(UnsubscribeRequestParams::new(card_uri.clone()))
        .await
        .expect("resources/unsubscribe");

    alice.cancel().await.ok();
    bob.cancel().await.ok();
}

const BOOT: &str = "mcp-http-bootstrap-token-0123456789";

/// `trantor <args>` as the operator whose keys live in `bus`.
fn operator(bus: &std::path::Path, url: &str, args: &[&str]) -> std::process::Output {
    std::process::Command::new(common::bin())
        .args(args)
        .env("AGENT_BUS_DIR", bus)
        .env("HOME", bus)
        .env("RELAY_URL", url)
        .env("RELAY_SESSION", "orch:web")
        .env_remove("RELAY_DATA_DIR")
        .env_remove("RELAY_AGENT")
        .env_remove("RELAY_PROJECT")
        .env_remove("RELAY_OWNER_IDENTITY")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run trantor")
}

fn stdout_of(o: &std::process::Output) -> String {
    assert!(
        o.status.success(),
        "status {:?}\nstdout: {}\nstderr: {}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bearer_tokens_in_enforce_mode_speak_only_as_their_session() {
    let dir = tempfile::tempdir().expect("hub dir");
    let hub = Hub::start_in(
        &dir.path().join("hub"),
        common::free_port(),
        &[("RELAY_AUTH", "enforce"), ("RELAY_BOOTSTRAP_TOKEN", BOOT)],
    );
    let url = hub.url();
    let ops = dir.path().join("ops");
    std::fs::create_dir_all(&ops).expect("ops dir");
    stdout_of(&operator(
        &ops,
        &url,
        &[
            "identity",
            "enroll",
            "--session",
            "orch:web",
            "--bootstrap-token",
            BOOT,
        ],
    ));
    let web = stdout_of(&operator(
        &ops,
        &url,
        &["token", "mint", "--session", "claude:web", "--ttl", "30d"],
    ));
    assert!(web.starts_with("trt_"), "{web}");
    let other = stdout_of(&operator(
        &ops,
        &url,
        &["token", "mint", "--session", "bob:other", "--ttl", "1h"],
    ));
    let bearer = |t: &str| format!("Bearer {t}");

    // The token speaks as its session: whoami, and a message the hub records from it.
    let alice = connect(&url, &[("authorization", &bearer(&web))]).await;
    let who = ok(&alice, "relay_whoami", json!({})).await;
    assert!(
        who.contains("session=claude:web") && who.contains("project=web"),
        "{who}"
    );
    ok(
        &alice,
        "relay_send",
        json!({"to": "codex:web", "text": "sent with a bearer token"}),
    )
    .await;
    let added = ok(
        &alice,
        "relay_task_add",
        json!({"title": "token card", "assignee": "claude:web"}),
    )
    .await;
    let id = card_id(&added);
    let card_uri = format!("trantor://card/{id}");

    // Subscriptions work with a token (the hub's own feed), and only for what it may read.
    let watcher = |token: &str| {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let mut map = HashMap::new();
        map.insert(
            reqwest::header::AUTHORIZATION,
            reqwest::header::HeaderValue::from_str(&format!("Bearer {token}")).expect("header"),
        );
        let config =
            StreamableHttpClientTransportConfig::with_uri(format!("{url}/mcp")).custom_headers(map);
        (
            Watcher(tx).serve(StreamableHttpClientTransport::with_client(http(), config)),
            rx,
        )
    };
    let (w, mut rx) = watcher(&web);
    let w = w.await.expect("watcher handshake");
    #[allow(deprecated)]
    w.subscribe(rmcp::model::SubscribeRequestParams::new(card_uri.clone()))
        .await
        .expect("resources/subscribe with a token");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let mut step = 0;
    let got = loop {
        step += 1;
        ok(
            &alice,
            "relay_task_move",
            json!({"id": id, "status": "doing", "note": format!("step {step}")}),
        )
        .await;
        match tokio::time::timeout(Duration::from_millis(500), rx.recv()).await {
            Ok(Some(uri)) => break uri,
            _ if tokio::time::Instant::now() > deadline => panic!("no resources/updated"),
            _ => {}
        }
    };
    assert_eq!(got, card_uri);
    let (wb, _rxb) = watcher(&other);
    let wb = wb.await.expect("other watcher handshake");
    #[allow(deprecated)]
    let refused = wb
        .subscribe(rmcp::model::SubscribeRequestParams::new(card_uri.clone()))
        .await;
    assert!(
        refused.is_err(),
        "a token for another project subscribed: {refused:?}"
    );
    w.cancel().await.ok();
    wb.cancel().await.ok();

    // It never speaks as another session, named by the header or in a tool's arguments.
    let spoof = connect(
        &url,
        &[
            ("authorization", &bearer(&web)),
            ("x-relay-session", "codex:web"),
        ],
    )
    .await;
    let (text, err) = call(&spoof, "relay_inbox", json!({})).await;
    assert!(err && text.contains("speaks as claude:web"), "{text}");
    // The hub's routes refuse the token for another session's inbox, as for a signed caller.
    let r = http()
        .get(format!("{url}/inbox?session=codex%3Aweb"))
        .header("authorization", bearer(&web))
        .send()
        .await
        .expect("inbox reply");
    assert_eq!(r.status(), 403);
    let r = http()
        .post(format!("{url}/send"))
        .header("authorization", bearer(&web))
        .header("content-type", "application/json")
        .body(json!({"from": "codex:web", "to": "orch:web", "text": "forged"}).to_string())
        .send()
        .await
        .expect("send reply");
    assert_eq!(r.status(), 403);

    // A token for another project cannot act on this one.
    let bob = connect(&url, &[("authorization", &bearer(&other))]).await;
    let (text, err) = call(&bob, "relay_board", json!({"project": "web"})).await;
    assert!(err && text.contains("403"), "{text}");
    let (text, err) = call(
        &bob,
        "relay_task_add",
        json!({"title": "into web", "project": "web"}),
    )
    .await;
    assert!(err && text.contains("403"), "{text}");

    // No token, or a made-up one: 401 at initialize, with a JSON-RPC error saying what to send.
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "test", "version": "1"}}});
    for (auth, says) in [
        (None, "Authorization: Bearer"),
        (
            Some("Bearer trt_not-a-token"),
            "unknown, expired or revoked",
        ),
    ] {
        let mut req = http()
            .post(format!("{url}/mcp"))
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("x-relay-session", "claude:web")
            .body(init.to_string());
        if let Some(a) = auth {
            req = req.header("authorization", a);
        }
        let r = req.send().await.expect("initialize reply");
        assert_eq!(r.status(), 401);
        assert!(r.headers().contains_key("www-authenticate"));
        let body: Value = r.json().await.expect("JSON-RPC error");
        let msg = body["error"]["message"].as_str().unwrap_or("");
        assert!(msg.contains(says), "{body}");
    }
    let r = http()
        .get(format!("{url}/peers"))
        .header("authorization", "Bearer trt_not-a-token")
        .send()
        .await
        .expect("peers reply");
    assert_eq!(r.status(), 401);

    // Listed by id, never by token; revoked, it is refused from the next call on.
    let listed = stdout_of(&operator(&ops, &url, &["token", "list", "--json"]));
    let listed: Value = serde_json::from_str(&listed).expect("token list JSON");
    assert!(
        !listed.to_string().contains(&web),
        "a token leaked into the list"
    );
    let id = listed["tokens"]
        .as_array()
        .and_then(|a| a.iter().find(|t| t["session"] == "claude:web"))
        .and_then(|t| t["id"].as_str())
        .expect("claude:web's token listed")
        .to_string();
    let revoked = stdout_of(&operator(&ops, &url, &["token", "revoke", &id]));
    assert!(revoked.contains("revoked"), "{revoked}");
    let after = alice
        .call_tool(CallToolRequestParams::new("relay_whoami"))
        .await;
    assert!(after.is_err(), "a revoked token still answered: {after:?}");
    // Only the owner mints: the other token cannot.
    let r = http()
        .post(format!("{url}/token/mint"))
        .header("authorization", bearer(&other))
        .header("content-type", "application/json")
        .body(json!({"session": "bob:other"}).to_string())
        .send()
        .await
        .expect("mint reply");
    assert_eq!(r.status(), 403);

    for c in [alice, spoof, bob] {
        c.cancel().await.ok();
    }
}

/// `trantor connect --http` with HOME at `home`.
fn connect_http(home: &std::path::Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new(common::bin())
        .args(["connect", "--http", "--all"])
        .args(args)
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env_remove("TRANTOR_MCP_TOKEN")
        .env_remove("RELAY_URL")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run trantor connect")
}

#[test]
fn connect_http_points_claude_codex_and_opencode_at_the_hubs_mcp_with_the_token() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("dir");
    let hub = Hub::start_in(
        &dir.path().join("hub"),
        common::free_port(),
        &[("RELAY_AUTH", "enforce"), ("RELAY_BOOTSTRAP_TOKEN", BOOT)],
    );
    let url = hub.url();
    let ops = dir.path().join("ops");
    std::fs::create_dir_all(&ops).expect("ops dir");
    stdout_of(&operator(
        &ops,
        &url,
        &[
            "identity",
            "enroll",
            "--session",
            "orch:web",
            "--bootstrap-token",
            BOOT,
        ],
    ));
    let token = stdout_of(&operator(
        &ops,
        &url,
        &["token", "mint", "--session", "claude:web", "--ttl", "1h"],
    ));
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).expect("home");
    // A person's own server in Claude Code's file stays.
    std::fs::write(
        home.join(".claude.json"),
        r#"{"mcpServers": {"mine": {"type": "stdio", "command": "my-server"}}}"#,
    )
    .expect("claude.json");
    let out = stdout_of(&connect_http(&home, &["--token", &token, "--url", &url]));
    assert!(!out.contains(&token), "the token is never printed: {out}");
    let mcp = format!("{url}/mcp");
    let bearer = format!("Bearer {token}");

    let claude: Value = serde_json::from_str(
        &std::fs::read_to_string(home.join(".claude.json")).expect("claude.json"),
    )
    .expect("claude.json is JSON");
    assert_eq!(claude["mcpServers"]["mine"]["command"], "my-server");
    let entry = &claude["mcpServers"]["trantor"];
    assert_eq!(entry["type"], "http");
    assert_eq!(entry["url"], mcp.as_str());
    assert_eq!(entry["headers"]["Authorization"], bearer.as_str());
    let mode = std::fs::metadata(home.join(".claude.json"))
        .expect("meta")
        .permissions()
        .mode();
    assert_eq!(
        mode & 0o077,
        0,
        "a file holding a token is private: {mode:o}"
    );
    let codex = std::fs::read_to_string(home.join(".codex/config.toml")).expect("codex");
    let doc: toml_edit::DocumentMut = codex.parse().expect("codex config is TOML");
    let t = &doc["mcp_servers"]["trantor"];
    assert_eq!(t["url"].as_str(), Some(mcp.as_str()));
    assert_eq!(
        t["http_headers"]["Authorization"].as_str(),
        Some(bearer.as_str())
    );
    assert!(t.get("command").is_none(), "{codex}");
    let opencode: Value = serde_json::from_str(
        &std::fs::read_to_string(home.join(".config/opencode/opencode.json")).expect("opencode"),
    )
    .expect("opencode.json is JSON");
    assert_eq!(opencode["mcp"]["trantor"]["type"], "remote");
    assert_eq!(
        opencode["mcp"]["trantor"]["headers"]["Authorization"],
        bearer.as_str()
    );
    // Again: nothing changes.
    let again = stdout_of(&connect_http(&home, &["--token", &token, "--url", &url]));
    assert_eq!(again.matches("unchanged").count(), 3, "{again}");
    // doctor knows such an entry; connect --remove takes it out again.
    let doctor = std::process::Command::new(common::bin())
        .arg("doctor")
        .env("HOME", &home)
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env("RELAY_URL", &url)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run trantor doctor");
    let doctor = String::from_utf8_lossy(&doctor.stdout).to_string();
    assert!(
        doctor.contains(&format!("reaches the hub's MCP at {mcp} over HTTP")),
        "{doctor}"
    );
    let removed = std::process::Command::new(common::bin())
        .args(["connect", "--remove", "--only", "opencode"])
        .env("HOME", &home)
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run trantor connect --remove");
    assert!(removed.status.success());
    let opencode_after = std::fs::read_to_string(home.join(".config/opencode/opencode.json"))
        .expect("opencode after remove");
    assert!(!opencode_after.contains("trantor"), "{opencode_after}");
    stdout_of(&connect_http(
        &home,
        &["--only", "opencode", "--token", &token, "--url", &url],
    ));

    // The real CLIs read the entries; Claude Code and OpenCode connect with the token.
    let Some(bin) = common::real_clis_bin() else {
        return;
    };
    let run = |cli: &str, args: &[&str]| {
        let o = std::process::Command::new(bin.join(cli))
            .args(args)
            .current_dir(&home)
            .env("HOME", &home)
            .env("XDG_CONFIG_HOME", home.join(".config"))
            .stdin(std::process::Stdio::null())
            .output()
            .expect("run the real CLI");
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    };
    let claude = run("claude", &["mcp", "list"]);
    assert!(
        claude.contains(&format!("trantor: {mcp} (HTTP)")) && claude.contains("Connected"),
        "{claude}"
    );
    let opencode = run("opencode", &["mcp", "list"]);
    assert!(
        opencode.contains("trantor") && opencode.contains("connected"),
        "{opencode}"
    );
    let codex = run("codex", &["mcp", "list"]);
    assert!(codex.contains("trantor") && codex.contains(&mcp), "{codex}");
}

/// The hub process's resident memory, KB (Linux).
fn rss_kb(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_idle_sessions_stay_bounded_and_one_more_is_a_503() {
    let dir = tempfile::tempdir().expect("hub dir");
    let hub = Hub::start_in(
        &dir.path().join("hub"),
        common::free_port(),
        &[("RELAY_MCP_MAX_SESSIONS", "1000")],
    );
    let mcp = format!("{}/mcp", hub.url());
    let pid = hub.pid().expect("hub pid");
    let client = http();
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "idle", "version": "1"}}})
    .to_string();
    let open = |c: reqwest::Client| {
        let mcp = mcp.clone();
        let init = init.clone();
        async move {
            c.post(&mcp)
                .header("content-type", "application/json")
                .header("accept", "application/json, text/event-stream")
                .body(init)
                .send()
                .await
                .expect("initialize reply")
        }
    };
    // Warm the hub (its first session builds the shared tool table) before measuring.
    let first = open(client.clone()).await;
    assert_eq!(first.status(), 200);
    let first_id = first
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .expect("session id")
        .to_string();
    let before = rss_kb(pid);
    for _ in 1..1000 {
        let r = open(client.clone()).await;
        assert_eq!(r.status(), 200);
        let _ = r.bytes().await;
    }
    let after = rss_kb(pid);
    let grown_mb = after.saturating_sub(before) / 1024;
    assert!(
        grown_mb < 200,
        "1000 idle MCP sessions grew the hub by {grown_mb} MB ({before} -> {after} KB)"
    );
    // One more is refused with a JSON-RPC error, until a session ends.
    let r = open(client.clone()).await;
    assert_eq!(r.status(), 503);
    let body: Value = r.json().await.expect("JSON-RPC error");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("1000 MCP sessions")),
        "{body}"
    );
    let r = client
        .delete(&mcp)
        .header("mcp-session-id", &first_id)
        .header("mcp-protocol-version", "2025-06-18")
        .send()
        .await
        .expect("delete reply");
    assert!(r.status().is_success(), "{}", r.status());
    let c = connect(&hub.url(), &[("x-relay-session", "claude:web")]).await;
    assert!(!c.list_all_tools().await.expect("tools/list").is_empty());
    c.cancel().await.ok();
    eprintln!("1000 idle MCP sessions: hub RSS {before} -> {after} KB (+{grown_mb} MB)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_resumed_with_a_stale_event_id_ends_empty() {
    let hub = Hub::spawn();
    let mcp = format!("{}/mcp", hub.url());
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "resume", "version": "1"}}});
    let r = http()
        .post(&mcp)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(init.to_string())
        .send()
        .await
        .expect("initialize");
    let sid = r
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .expect("session id")
        .to_string();
    let _ = r.bytes().await;
    let r = http()
        .post(&mcp)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-session-id", &sid)
        .header("mcp-protocol-version", "2025-06-18")
        .body(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string())
        .send()
        .await
        .expect("initialized");
    assert_eq!(r.status(), 202);
    // An event id of a stream this session never had: an empty stream that ends at once (an
    // error status would make an EventSource retry the same id forever), nothing replayed.
    for stale in ["9999/0", "not-an-event-id"] {
        let r = http()
            .get(&mcp)
            .header("accept", "text/event-stream")
            .header("mcp-session-id", &sid)
            .header("mcp-protocol-version", "2025-06-18")
            .header("last-event-id", stale)
            .send()
            .await
            .expect("resume");
        assert_eq!(r.status(), 200, "{stale}");
        let body = tokio::time::timeout(Duration::from_secs(10), r.text())
            .await
            .unwrap_or_else(|_| panic!("the stream resumed at {stale} did not end"))
            .expect("body");
        assert!(!body.contains("jsonrpc"), "{stale} replayed: {body}");
    }
}

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

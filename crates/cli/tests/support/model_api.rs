//! A scripted model API on loopback for the real-CLI drills: it speaks the Anthropic Messages
//! API (Claude Code), the OpenAI Responses API (Codex) and OpenAI chat completions (OpenCode
//! through an OpenAI-compatible provider), each streamed as server-sent events the way the CLIs
//! ask for them.
//!
//! A drill registers a [`Script`] under a marker word and puts the marker in the wake message;
//! the request whose conversation mentions that marker last is answered from its script. A
//! `Steps` script is played one step per request: call an MCP tool (`relay_send`, …), write a
//! file through the CLI's own tool, then say a final text. Where the step is is read from the
//! conversation itself (the tool-call ids this server handed out come back as results), so a
//! CLI that retries or resumes is answered consistently. Requests without a marker (a kickoff
//! turn) get a short final answer; requests without tools (a title) get a title.
//!
//! Every request is recorded, so a drill can assert that a resumed turn carried the earlier
//! turn's context.

#![allow(dead_code)]

use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// One step of a scripted turn.
#[derive(Debug, Clone)]
pub enum Step {
    /// Call the MCP tool whose name ends with this (`relay_send`), with these arguments.
    Tool(String, Value),
    /// Write `content` to the absolute `path` with the CLI's own file or shell tool.
    WriteFile {
        /// Absolute path.
        path: String,
        /// File content (plain text, no quotes).
        content: String,
    },
    /// Run a shell command with the CLI's own shell tool.
    Shell(String),
    /// Finish the turn with this text.
    Say(String),
    /// Go silent: answer 200 and the stream's first event, then nothing (a hung model).
    Hang,
    /// Answer 200, think for this long (nothing on the wire), then play the inner step: a slow
    /// model that still makes progress step by step.
    Slowly(Duration, Box<Step>),
}

/// How a marked turn is answered.
#[derive(Debug, Clone)]
pub enum Script {
    /// One step per request, in order.
    Steps(Vec<Step>),
    /// An HTTP error with the provider's headers and JSON body, on every request.
    Status {
        /// HTTP status.
        code: u16,
        /// Extra response headers.
        headers: Vec<(String, String)>,
        /// The JSON body.
        body: Value,
    },
    /// A final text streamed in `chunks` pieces, one every `every`.
    Slow {
        /// The whole text.
        text: String,
        /// Number of pieces.
        chunks: usize,
        /// Pause between pieces.
        every: Duration,
    },
    /// Answer 200 and the stream's first event, then say nothing more (a hung model).
    Silent,
}

/// The wire format a request used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// `POST /v1/messages` (Claude Code).
    Anthropic,
    /// `POST /v1/responses` (Codex).
    Responses,
    /// `POST /v1/chat/completions` (OpenCode).
    Chat,
}

/// One recorded request.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// Wire format.
    pub api: Api,
    /// Request path.
    pub path: String,
    /// The raw JSON body.
    pub raw: String,
    /// The marker it was answered for, if any.
    pub marker: Option<String>,
    /// The API key it carried (`x-api-key`, or the bearer token of `authorization`).
    pub key: Option<String>,
    /// Answered by a key's limit ([`ModelApi::limit_key`]), not by the conversation.
    pub limited: bool,
}

/// A key the server answers with a fixed script until a wall-clock time (a spent quota that
/// resets).
#[derive(Debug, Clone)]
struct KeyLimit {
    key: String,
    until_ms: i64,
    script: Script,
}

#[derive(Default)]
struct State {
    scripts: Vec<(String, Script)>,
    requests: Vec<Recorded>,
    /// The usage every Anthropic answer reports, when set (else 100 in, 10 out).
    usage: Option<Usage>,
    /// Answers so far (each Anthropic message gets its own id).
    answers: u64,
    /// Keys answered with a script until a time, whatever the conversation says.
    limits: Vec<KeyLimit>,
}

/// The token usage an Anthropic answer reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    /// `input_tokens`.
    pub input: u64,
    /// `output_tokens` (the final count, in `message_delta`).
    pub output: u64,
    /// `cache_read_input_tokens`.
    pub cache_read: u64,
    /// `cache_creation_input_tokens`.
    pub cache_write: u64,
}

/// The server; stops when dropped.
pub struct ModelApi {
    /// Its loopback port.
    pub port: u16,
    state: Arc<Mutex<State>>,
    rt: Option<tokio::runtime::Runtime>,
}

impl ModelApi {
    /// Start on a free loopback port.
    pub fn start() -> ModelApi {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let listener = rt.block_on(TcpListener::bind("127.0.0.1:0")).expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let state = Arc::new(Mutex::new(State::default()));
        let st = state.clone();
        rt.spawn(async move {
            while let Ok((sock, _)) = listener.accept().await {
                let st = st.clone();
                tokio::spawn(async move {
                    let _ = serve(sock, st).await;
                });
            }
        });
        ModelApi {
            port,
            state,
            rt: Some(rt),
        }
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Answer turns that mention `marker` with `script`.
    pub fn script(&self, marker: &str, script: Script) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.scripts.retain(|(m, _)| m != marker);
        st.scripts.push((marker.to_string(), script));
    }

    /// Answer every request carrying API key `key` with `script` until `until_ms` (wall clock,
    /// ms since the epoch), then as usual: a quota that is spent and resets.
    pub fn limit_key(&self, key: &str, until_ms: i64, script: Script) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.limits.retain(|l| l.key != key);
        st.limits.push(KeyLimit {
            key: key.to_string(),
            until_ms,
            script,
        });
    }

    /// Report `usage` on every Anthropic answer from now on.
    pub fn report_usage(&self, usage: Usage) {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).usage = Some(usage);
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<Recorded> {
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .requests
            .clone()
    }

    /// The requests answered for `marker`.
    pub fn requests_for(&self, marker: &str) -> Vec<Recorded> {
        self.requests()
            .into_iter()
            .filter(|r| r.marker.as_deref() == Some(marker))
            .collect()
    }
}

impl Drop for ModelApi {
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

/// One request as read: method, path, the API key it carried, body.
type Request = (String, String, Option<String>, Vec<u8>);

/// Read one HTTP/1.1 request.
async fn read_request(sock: &mut TcpStream) -> std::io::Result<Request> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16384];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        let n = sock.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let mut rest = buf[head_end + 4..].to_vec();
    let mut lines = head.lines();
    let first = lines.next().unwrap_or_default().to_string();
    let mut parts = first.split_whitespace();
    let method = parts.next().unwrap_or_default().to_string();
    let path = parts.next().unwrap_or_default().to_string();
    let mut length = None;
    let mut chunked = false;
    let mut key = None;
    for l in lines {
        if let Some((k, v)) = l.split_once(':') {
            let k = k.trim().to_ascii_lowercase();
            if k == "x-api-key" {
                key = Some(v.trim().to_string());
            } else if k == "authorization" {
                let v = v.trim();
                key = Some(v.strip_prefix("Bearer ").unwrap_or(v).trim().to_string());
            } else if k == "content-length" {
                length = v.trim().parse::<usize>().ok();
            } else if k == "transfer-encoding" && v.to_ascii_lowercase().contains("chunked") {
                chunked = true;
            }
        }
    }
    if chunked {
        // Read until the terminating zero-size chunk, then decode.
        while !rest.windows(5).any(|w| w == b"0\r\n\r\n") {
            let n = sock.read(&mut chunk).await?;
            if n == 0 {
                break;
            }
            rest.extend_from_slice(&chunk[..n]);
        }
        let mut body = Vec::new();
        let mut at = 0;
        while let Some(i) = rest[at..].windows(2).position(|w| w == b"\r\n") {
            let size = usize::from_str_radix(String::from_utf8_lossy(&rest[at..at + i]).trim(), 16)
                .unwrap_or(0);
            at += i + 2;
            if size == 0 || at + size > rest.len() {
                break;
            }
            body.extend_from_slice(&rest[at..at + size]);
            at += size + 2;
        }
        return Ok((method, path, key, body));
    }
    let want = length.unwrap_or(0);
    while rest.len() < want {
        let n = sock.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        rest.extend_from_slice(&chunk[..n]);
    }
    rest.truncate(want);
    Ok((method, path, key, rest))
}

async fn respond_json(sock: &mut TcpStream, code: u16, headers: &[(String, String)], body: &Value) {
    let text = body.to_string();
    let mut head = format!(
        "HTTP/1.1 {code} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n",
        reason(code),
        text.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    let _ = sock.write_all(head.as_bytes()).await;
    let _ = sock.write_all(text.as_bytes()).await;
    let _ = sock.shutdown().await;
}

fn reason(code: u16) -> &'static str {
    match code {
        200 => "OK",
        401 => "Unauthorized",
        404 => "Not Found",
        429 => "Too Many Requests",
        529 => "Overloaded",
        _ => "Error",
    }
}

/// An SSE event: `event:` line only where the API names its events.
fn sse(event: Option<&str>, data: &str) -> String {
    match event {
        Some(e) => format!("event: {e}\ndata: {data}\n\n"),
        None => format!("data: {data}\n\n"),
    }
}

async fn serve(mut sock: TcpStream, st: Arc<Mutex<State>>) -> std::io::Result<()> {
    let (method, path, key, body) = read_request(&mut sock).await?;
    let raw = String::from_utf8_lossy(&body).to_string();
    let api = if path.contains("/messages") {
        Api::Anthropic
    } else if path.ends_with("/responses") {
        Api::Responses
    } else if path.contains("/chat/completions") {
        Api::Chat
    } else {
        respond_json(&mut sock, 404, &[], &json!({"error": "not scripted"})).await;
        return Ok(());
    };
    if method != "POST" {
        respond_json(&mut sock, 404, &[], &json!({"error": "not scripted"})).await;
        return Ok(());
    }
    if path.contains("count_tokens") {
        respond_json(&mut sock, 200, &[], &json!({"input_tokens": 100})).await;
        return Ok(());
    }
    let mut req: Value = serde_json::from_str(&raw).unwrap_or(Value::Null);
    let (marker, script) = {
        let mut g = st.lock().unwrap_or_else(|e| e.into_inner());
        g.answers += 1;
        // What the answer reports rides on the request to the frame builders.
        if let Some(o) = req.as_object_mut() {
            o.insert("__drill_answer".into(), json!(g.answers));
            if let Some(u) = g.usage {
                o.insert(
                    "__drill_usage".into(),
                    json!({"input_tokens": u.input, "output_tokens": u.output,
                           "cache_read_input_tokens": u.cache_read,
                           "cache_creation_input_tokens": u.cache_write}),
                );
            }
        }
        let found = g
            .scripts
            .iter()
            .filter_map(|(m, s)| raw.rfind(m.as_str()).map(|at| (at, m.clone(), s.clone())))
            .max_by_key(|(at, _, _)| *at)
            .map(|(_, m, s)| (m, s));
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0);
        let limited = g
            .limits
            .iter()
            .find(|l| key.as_deref() == Some(l.key.as_str()) && now < l.until_ms)
            .map(|l| l.script.clone());
        g.requests.push(Recorded {
            api,
            path: path.clone(),
            raw: raw.clone(),
            marker: found.as_ref().map(|(m, _)| m.clone()),
            key: key.clone(),
            limited: limited.is_some(),
        });
        match (limited, found) {
            (Some(s), found) => (found.map(|(m, _)| m), s),
            (None, Some((m, s))) => (Some(m), s),
            (None, None) => (
                None,
                Script::Steps(vec![Step::Say("Kickoff read; waiting.".into())]),
            ),
        }
    };
    let tools = tool_names(api, &req);
    let reply = match script {
        Script::Status {
            code,
            headers,
            body,
        } => {
            respond_json(&mut sock, code, &headers, &body).await;
            return Ok(());
        }
        Script::Silent => {
            return hang(&mut sock, api, &req).await;
        }
        Script::Slow {
            text,
            chunks,
            every,
        } => {
            start_stream(&mut sock).await?;
            let chunks = chunks.max(1);
            let size = text.chars().count().div_ceil(chunks).max(1);
            let pieces: Vec<String> = text
                .chars()
                .collect::<Vec<_>>()
                .chunks(size)
                .map(|c| c.iter().collect())
                .collect();
            let (open, close) = text_frame(api, &req, &text);
            sock.write_all(open.as_bytes()).await?;
            sock.flush().await?;
            for p in pieces {
                tokio::time::sleep(every).await;
                sock.write_all(text_delta(api, &req, &p).as_bytes()).await?;
                sock.flush().await?;
            }
            sock.write_all(close.as_bytes()).await?;
            let _ = sock.shutdown().await;
            return Ok(());
        }
        Script::Steps(steps) => {
            if tools.is_empty() {
                // A side request (a title, a summary): not part of the script.
                Reply::Text("Scripted drill".into())
            } else {
                let (reply, think) =
                    next_reply(&raw, marker.as_deref().unwrap_or("kickoff"), &steps, &tools);
                if !think.is_zero() && !matches!(reply, Reply::Hang) {
                    start_stream(&mut sock).await?;
                    tokio::time::sleep(think).await;
                    return finish_reply(&mut sock, api, &req, reply).await;
                }
                reply
            }
        }
    };
    if matches!(reply, Reply::Hang) {
        return hang(&mut sock, api, &req).await;
    }
    start_stream(&mut sock).await?;
    finish_reply(&mut sock, api, &req, reply).await
}

/// Write `reply`'s events on a stream already started, and close it.
async fn finish_reply(
    sock: &mut TcpStream,
    api: Api,
    req: &Value,
    reply: Reply,
) -> std::io::Result<()> {
    let events = match reply {
        Reply::Text(t) => {
            let (open, close) = text_frame(api, req, &t);
            format!("{open}{}{close}", text_delta(api, req, &t))
        }
        Reply::Call {
            id,
            name,
            namespace,
            args,
        } => tool_call_events(api, req, &id, &name, namespace.as_deref(), &args),
        Reply::Hang => String::new(),
    };
    sock.write_all(events.as_bytes()).await?;
    sock.flush().await?;
    let _ = sock.shutdown().await;
    Ok(())
}

/// Answer 200 and the stream's first event, then say nothing until the client gives up.
async fn hang(sock: &mut TcpStream, api: Api, req: &Value) -> std::io::Result<()> {
    start_stream(sock).await?;
    let first = match api {
        Api::Anthropic => sse(Some("message_start"), &anthropic_start(req).to_string()),
        Api::Responses => sse(
            Some("response.created"),
            &json!({"type": "response.created", "response": {"id": "resp_silent"}}).to_string(),
        ),
        Api::Chat => String::new(),
    };
    sock.write_all(first.as_bytes()).await?;
    sock.flush().await?;
    let mut sink = [0u8; 64];
    loop {
        match tokio::time::timeout(Duration::from_secs(3600), sock.read(&mut sink)).await {
            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => return Ok(()),
            Ok(Ok(_)) => {}
        }
    }
}

async fn start_stream(sock: &mut TcpStream) -> std::io::Result<()> {
    sock.write_all(
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\nconnection: close\r\n\r\n",
    )
    .await?;
    sock.flush().await
}

enum Reply {
    Text(String),
    Hang,
    Call {
        id: String,
        name: String,
        namespace: Option<String>,
        args: Value,
    },
}

/// (tool name, namespace) pairs the request offers.
fn tool_names(api: Api, req: &Value) -> Vec<(String, Option<String>)> {
    let mut out = Vec::new();
    for t in req["tools"].as_array().into_iter().flatten() {
        match api {
            Api::Chat => {
                if let Some(n) = t["function"]["name"].as_str() {
                    out.push((n.to_string(), None));
                }
            }
            _ => {
                if t["type"] == "namespace" {
                    let ns = t["name"].as_str().unwrap_or_default().to_string();
                    for inner in t["tools"].as_array().into_iter().flatten() {
                        if let Some(n) = inner["name"].as_str() {
                            out.push((n.to_string(), Some(ns.clone())));
                        }
                    }
                } else if let Some(n) = t["name"].as_str() {
                    out.push((n.to_string(), None));
                }
            }
        }
    }
    out
}

fn slug(marker: &str) -> String {
    marker
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .collect()
}

/// Which of this marker's tool calls the conversation already holds: (step, phase) pairs from
/// ids `tu_<slug>_<step>_<a|b>` (`a` = the schema search before a deferred tool, `b` = the call).
fn calls_made(raw: &str, marker: &str) -> Vec<(usize, char)> {
    let prefix = format!("tu_{}_", slug(marker));
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(i) = raw[from..].find(&prefix) {
        let at = from + i + prefix.len();
        let digits: String = raw[at..]
            .chars()
            .take_while(|c| c.is_ascii_digit())
            .collect();
        let after = raw[at + digits.len()..].chars().nth(1);
        if let (Ok(n), Some(p)) = (digits.parse::<usize>(), after) {
            out.push((n, p));
        }
        from = at;
    }
    out
}

fn next_reply(
    raw: &str,
    marker: &str,
    steps: &[Step],
    tools: &[(String, Option<String>)],
) -> (Reply, Duration) {
    let made = calls_made(raw, marker);
    let done = made
        .iter()
        .filter(|(_, p)| *p == 'b')
        .map(|(n, _)| n + 1)
        .max();
    let next = done.unwrap_or(0);
    // A step whose schema search went out but whose call did not yet.
    let searched = made.iter().any(|(n, p)| *n == next && *p == 'a');
    let s = slug(marker);
    let Some(step) = steps.get(next) else {
        return (Reply::Text(format!("Finished {marker}.")), Duration::ZERO);
    };
    let (think, step) = match step {
        Step::Slowly(d, inner) => (*d, inner.as_ref()),
        s => (Duration::ZERO, s),
    };
    let reply = match step {
        Step::Say(t) => Reply::Text(t.clone()),
        Step::Hang => Reply::Hang,
        Step::Tool(want, args) => {
            let found = tools
                .iter()
                .find(|(n, _)| n == want || n.ends_with(&format!("_{want}")));
            match found {
                Some((name, ns)) => Reply::Call {
                    id: format!("tu_{s}_{next}_b"),
                    name: name.clone(),
                    namespace: ns.clone(),
                    args: args.clone(),
                },
                None => {
                    // Claude Code defers MCP tools: load the schema with ToolSearch first.
                    let full = format!("mcp__trantor__{want}");
                    if !searched && tools.iter().any(|(n, _)| n == "ToolSearch") {
                        Reply::Call {
                            id: format!("tu_{s}_{next}_a"),
                            name: "ToolSearch".into(),
                            namespace: None,
                            args: json!({"query": format!("select:{full}"), "max_results": 5}),
                        }
                    } else {
                        Reply::Call {
                            id: format!("tu_{s}_{next}_b"),
                            name: full,
                            namespace: None,
                            args: args.clone(),
                        }
                    }
                }
            }
        }
        Step::WriteFile { path, content } => {
            let has = |n: &str| tools.iter().any(|(t, _)| t == n);
            let (name, args) = if has("Write") {
                ("Write", json!({"file_path": path, "content": content}))
            } else if has("write") {
                ("write", json!({"filePath": path, "content": content}))
            } else if has("exec_command") {
                (
                    "exec_command",
                    json!({"cmd": format!("printf '%s\\n' '{content}' > '{path}'")}),
                )
            } else {
                (
                    "shell",
                    json!({"command": ["bash", "-lc", format!("printf '%s\\n' '{content}' > '{path}'")]}),
                )
            };
            Reply::Call {
                id: format!("tu_{s}_{next}_b"),
                name: name.into(),
                namespace: None,
                args,
            }
        }
        Step::Shell(command) => {
            let has = |n: &str| tools.iter().any(|(t, _)| t == n);
            let (name, args) = if has("Bash") {
                ("Bash", json!({"command": command}))
            } else if has("bash") {
                (
                    "bash",
                    json!({"command": command, "description": "Run the drill's command"}),
                )
            } else if has("exec_command") {
                ("exec_command", json!({"cmd": command}))
            } else {
                ("shell", json!({"command": ["bash", "-lc", command]}))
            };
            Reply::Call {
                id: format!("tu_{s}_{next}_b"),
                name: name.into(),
                namespace: None,
                args,
            }
        }
        // A drill scripts one pause per step; a nested one is a scripting mistake, said aloud.
        Step::Slowly(..) => Reply::Text("SCRIPT ERROR: nested Step::Slowly".into()),
    };
    (reply, think)
}

fn anthropic_start(req: &Value) -> Value {
    let mut usage = req
        .get("__drill_usage")
        .cloned()
        .unwrap_or_else(|| json!({"input_tokens": 100}));
    usage["output_tokens"] = json!(1);
    json!({"type": "message_start", "message": {
        "id": format!("msg_drill_{}", req["__drill_answer"].as_u64().unwrap_or(0)),
        "type": "message", "role": "assistant",
        "model": req["model"].as_str().unwrap_or("drill"), "content": [],
        "stop_reason": null, "stop_sequence": null,
        "usage": usage}})
}

/// The final `message_delta` usage of an Anthropic answer.
fn anthropic_delta_usage(req: &Value) -> Value {
    let out = req
        .get("__drill_usage")
        .and_then(|u| u.get("output_tokens"))
        .cloned()
        .unwrap_or_else(|| json!(10));
    json!({"output_tokens": out})
}

/// A Responses-API usage block: the reported usage when one is set (OpenAI counts the cached
/// input inside `input_tokens`), else 100 in, 10 out.
fn responses_usage(req: &Value) -> Value {
    let (input, cached, output) = match req.get("__drill_usage") {
        Some(u) => {
            let n = |k: &str| u.get(k).and_then(Value::as_u64).unwrap_or(0);
            (
                n("input_tokens") + n("cache_read_input_tokens"),
                n("cache_read_input_tokens"),
                n("output_tokens"),
            )
        }
        None => (100, 0, 10),
    };
    json!({"input_tokens": input, "input_tokens_details": {"cached_tokens": cached},
           "output_tokens": output, "output_tokens_details": {"reasoning_tokens": 0},
           "total_tokens": input + output})
}

fn chat_chunk(req: &Value, delta: Value, finish: Option<&str>) -> Value {
    let mut c = json!({"id": "chatcmpl-drill", "object": "chat.completion.chunk", "created": 0,
        "model": req["model"].as_str().unwrap_or("drill"),
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
    if finish.is_some() {
        c["usage"] = json!({"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110});
    }
    c
}

/// The events before and after a streamed text answer of `text`.
fn text_frame(api: Api, req: &Value, text: &str) -> (String, String) {
    match api {
        Api::Anthropic => (
            sse(Some("message_start"), &anthropic_start(req).to_string())
                + &sse(
                    Some("content_block_start"),
                    &json!({"type": "content_block_start", "index": 0,
                            "content_block": {"type": "text", "text": ""}})
                    .to_string(),
                ),
            sse(
                Some("content_block_stop"),
                &json!({"type": "content_block_stop", "index": 0}).to_string(),
            ) + &sse(
                Some("message_delta"),
                &json!({"type": "message_delta",
                        "delta": {"stop_reason": "end_turn", "stop_sequence": null},
                        "usage": anthropic_delta_usage(req)})
                .to_string(),
            ) + &sse(
                Some("message_stop"),
                &json!({"type": "message_stop"}).to_string(),
            ),
        ),
        Api::Responses => (
            sse(
                Some("response.created"),
                &json!({"type": "response.created", "response": {"id": "resp_drill"}}).to_string(),
            ) + &sse(
                Some("response.output_item.added"),
                &json!({"type": "response.output_item.added", "output_index": 0,
                        "item": {"type": "message", "id": "msg_drill", "role": "assistant",
                                 "status": "in_progress", "content": []}})
                .to_string(),
            ),
            // The full text is repeated in the done item, as the API does.
            responses_close(req, text),
        ),
        Api::Chat => (
            sse(
                None,
                &chat_chunk(req, json!({"role": "assistant", "content": ""}), None).to_string(),
            ),
            sse(None, &chat_chunk(req, json!({}), Some("stop")).to_string()) + &sse(None, "[DONE]"),
        ),
    }
}

/// One piece of streamed text.
fn text_delta(api: Api, req: &Value, piece: &str) -> String {
    match api {
        Api::Anthropic => sse(
            Some("content_block_delta"),
            &json!({"type": "content_block_delta", "index": 0,
                    "delta": {"type": "text_delta", "text": piece}})
            .to_string(),
        ),
        Api::Responses => sse(
            Some("response.output_text.delta"),
            &json!({"type": "response.output_text.delta", "item_id": "msg_drill",
                    "output_index": 0, "content_index": 0, "delta": piece})
            .to_string(),
        ),
        Api::Chat => sse(
            None,
            &chat_chunk(req, json!({"content": piece}), None).to_string(),
        ),
    }
}

/// Close a Responses-API text answer (item done + completed).
fn responses_close(req: &Value, text: &str) -> String {
    let item = json!({"type": "message", "id": "msg_drill", "role": "assistant",
                      "status": "completed",
                      "content": [{"type": "output_text", "text": text, "annotations": []}]});
    sse(
        Some("response.output_item.done"),
        &json!({"type": "response.output_item.done", "output_index": 0, "item": item}).to_string(),
    ) + &sse(
        Some("response.completed"),
        &json!({"type": "response.completed",
                "response": {"id": "resp_drill", "usage": responses_usage(req)}})
        .to_string(),
    )
}

fn tool_call_events(
    api: Api,
    req: &Value,
    id: &str,
    name: &str,
    namespace: Option<&str>,
    args: &Value,
) -> String {
    let args_text = args.to_string();
    match api {
        Api::Anthropic => {
            sse(Some("message_start"), &anthropic_start(req).to_string())
                + &sse(
                    Some("content_block_start"),
                    &json!({"type": "content_block_start", "index": 0,
                            "content_block": {"type": "tool_use", "id": id, "name": name,
                                              "input": {}}})
                    .to_string(),
                )
                + &sse(
                    Some("content_block_delta"),
                    &json!({"type": "content_block_delta", "index": 0,
                            "delta": {"type": "input_json_delta", "partial_json": args_text}})
                    .to_string(),
                )
                + &sse(
                    Some("content_block_stop"),
                    &json!({"type": "content_block_stop", "index": 0}).to_string(),
                )
                + &sse(
                    Some("message_delta"),
                    &json!({"type": "message_delta",
                            "delta": {"stop_reason": "tool_use", "stop_sequence": null},
                            "usage": anthropic_delta_usage(req)})
                    .to_string(),
                )
                + &sse(
                    Some("message_stop"),
                    &json!({"type": "message_stop"}).to_string(),
                )
        }
        Api::Responses => {
            let mut item = json!({"type": "function_call", "id": format!("fc_{id}"),
                                  "status": "completed", "call_id": id, "name": name,
                                  "arguments": args_text});
            if let Some(ns) = namespace {
                item["namespace"] = json!(ns);
            }
            sse(
                Some("response.created"),
                &json!({"type": "response.created", "response": {"id": "resp_drill"}}).to_string(),
            ) + &sse(
                Some("response.output_item.added"),
                &json!({"type": "response.output_item.added", "output_index": 0, "item": item})
                    .to_string(),
            ) + &sse(
                Some("response.output_item.done"),
                &json!({"type": "response.output_item.done", "output_index": 0, "item": item})
                    .to_string(),
            ) + &sse(
                Some("response.completed"),
                &json!({"type": "response.completed",
                        "response": {"id": "resp_drill", "usage": responses_usage(req)}})
                .to_string(),
            )
        }
        Api::Chat => {
            sse(
                None,
                &chat_chunk(
                    req,
                    json!({"role": "assistant", "tool_calls": [{"index": 0, "id": id,
                           "type": "function",
                           "function": {"name": name, "arguments": args_text}}]}),
                    None,
                )
                .to_string(),
            ) + &sse(
                None,
                &chat_chunk(req, json!({}), Some("tool_calls")).to_string(),
            ) + &sse(None, "[DONE]")
        }
    }
}

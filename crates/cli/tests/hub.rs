//! Integration tests of `trantor hub`, driven over HTTP: the hub served in-process on a port-0
//! listener over a temporary data directory (`common::Hub::start`), or the real binary where a
//! process is the point (kill -9, the command line). Timings are never asserted here (they belong to the benchmark); a
//! generous deadline only keeps a broken hub from hanging the suite.

mod common;

use common::{Hub, bin, free_port};
use serde_json::{Value, json};
use std::collections::HashSet;
use std::time::Duration;

/// Longest any single test step may take before the test fails (a hang guard, not a bound).
const GUARD: Duration = Duration::from_secs(60);

#[derive(Clone)]
struct Api {
    base: String,
    http: reqwest::Client,
}

impl Api {
    fn new(hub: &Hub) -> Api {
        Api::at(&hub.url())
    }

    fn at(base: &str) -> Api {
        Api {
            base: base.to_string(),
            // reqwest carries no TLS provider of its own here (proto brings ring's).
            http: reqwest::Client::builder()
                .no_proxy()
                .tls_backend_preconfigured(
                    trantor_proto::tls::no_roots_config().expect("TLS config"),
                )
                .build()
                .expect("client"),
        }
    }

    async fn finish(resp: reqwest::Response) -> (u16, Value) {
        let status = resp.status().as_u16();
        let bytes = resp.bytes().await.expect("body");
        let v = serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
        (status, v)
    }

    async fn get(&self, path: &str) -> (u16, Value) {
        let resp =
            tokio::time::timeout(GUARD, self.http.get(format!("{}{path}", self.base)).send())
                .await
                .expect("hang guard")
                .expect("GET");
        Api::finish(resp).await
    }

    async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        self.post_raw(path, body.to_string().into_bytes()).await
    }

    async fn post_raw(&self, path: &str, body: Vec<u8>) -> (u16, Value) {
        let req = self
            .http
            .post(format!("{}{path}", self.base))
            .header("content-type", "application/json")
            .body(body);
        let resp = tokio::time::timeout(GUARD, req.send())
            .await
            .expect("hang guard")
            .expect("POST");
        Api::finish(resp).await
    }

    /// POST that must succeed; returns the body.
    async fn ok(&self, path: &str, body: Value) -> Value {
        let (status, v) = self.post(path, body.clone()).await;
        assert_eq!(status, 200, "POST {path} {body} -> {v}");
        v
    }

    /// GET that must succeed; returns the body.
    async fn read(&self, path: &str) -> Value {
        let (status, v) = self.get(path).await;
        assert_eq!(status, 200, "GET {path} -> {v}");
        v
    }

    async fn send(&self, from: &str, to: &str, text: &str) -> i64 {
        let v = self
            .ok("/send", json!({ "from": from, "to": to, "text": text }))
            .await;
        v["id"].as_i64().expect("id")
    }
}

fn ids(v: &Value) -> Vec<i64> {
    v["messages"]
        .as_array()
        .map(|a| a.iter().filter_map(|m| m["id"].as_i64()).collect())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn presence_endpoints() {
    let hub = Hub::start();
    let api = Api::new(&hub);

    let (st, v) = api.get("/peer?session=claude:p").await;
    assert_eq!((st, v["error"].as_str()), (404, Some("unknown peer")));

    let r = api
        .ok(
            "/register",
            json!({"session":"claude:p","project":"p","status":"crew member booting",
                   "llm":"claude","model":"","kind":"agent","phase":"idle"}),
        )
        .await;
    assert_eq!(r["ok"], true);
    // A heartbeat without status keeps the stored one; `model:""` never clears.
    api.ok("/register", json!({"session":"claude:p","model":"opus"}))
        .await;
    api.ok("/register", json!({"session":"claude:p","model":""}))
        .await;
    let peers = api.read("/peers").await;
    let row = peers["peers"]
        .as_array()
        .and_then(|a| a.iter().find(|p| p["session"] == "claude:p").cloned())
        .expect("row");
    assert_eq!(row["status"], "crew member booting");
    assert_eq!(row["model"], "opus");
    assert_eq!(row["llm"], "claude");
    assert_eq!(row["kind"], "agent");
    assert_eq!(row["phase"], "idle");
    assert_eq!(row["online"], true);
    assert_eq!(row["health"], "ok");
    assert!(peers["hubVersion"].is_string());

    api.ok(
        "/status",
        json!({"session":"claude:p","status":"down: quota · 2 fails"}),
    )
    .await;
    let peers = api.read("/peers").await;
    assert_eq!(peers["peers"][0]["health"], "down");
    // /status with no status stores an empty one.
    api.ok("/status", json!({"session":"claude:p"})).await;
    let peers = api.read("/peers").await;
    assert_eq!(peers["peers"][0]["status"], "");

    let peer = api.read("/peer?session=claude:p").await;
    assert_eq!(peer["session"], "claude:p");
    assert_eq!(peer["project"], "p");
    assert_eq!(peer["online"], true);
    assert_eq!(peer["deliveredUpTo"], 0);
    assert!(peer["lastSeen"].as_i64().unwrap_or(0) > 0);

    // `all` and empty sessions are not touched, but are fine.
    api.ok("/register", json!({"session":"all"})).await;
    let (st, _) = api.get("/peer?session=all").await;
    assert_eq!(st, 404);

    // The online edge was written as an event.
    let ev = api.read("/events?type=presence.").await;
    assert_eq!(ev["events"][0]["type"], "presence.online");
    assert_eq!(ev["events"][0]["by"], "claude:p");

    // /enroll needs a signature in every mode (crates/hub/tests/auth.rs covers the rest).
    let (st, e) = api
        .post(
            "/enroll",
            json!({"name":"orch:p","kind":"agent","pubkey":"ab"}),
        )
        .await;
    assert_eq!((st, e["error"].as_str()), (401, Some("unsigned")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn send_inbox_and_message_fields() {
    let hub = Hub::start();
    let api = Api::new(&hub);
    api.ok("/register", json!({"session":"a:p","project":"alpha"}))
        .await;

    // Field rules: re only > 0, kind only non-empty, wake only when false; NUL removed.
    let s = api
        .ok(
            "/send",
            json!({"from":"a:p","to":"b:p","text":"he\u{0}llo","re":0,"kind":"","wake":true}),
        )
        .await;
    let id1 = s["id"].as_i64().expect("id");
    let id2 = api
        .ok(
            "/send",
            json!({"from":"a:p","to":"b:p","text":"ctx","re":id1,"kind":"status","wake":false,"project":"explicit"}),
        )
        .await["id"]
        .as_i64()
        .expect("id");
    assert!(id2 > id1);
    // Project: explicit, else the sender's peer project, else the suffix of `from`.
    let id3 = api.send("c:gamma", "b:p", "third").await;
    // Broadcasts reach everyone but the sender.
    let id4 = api.send("c:gamma", "all", "to everyone").await;

    let peek = api.read("/inbox?session=b:p&since=0&peek=1").await;
    let msgs = peek["messages"].as_array().cloned().unwrap_or_default();
    assert_eq!(ids(&peek), vec![id1, id2, id3, id4]);
    assert_eq!(msgs[0]["text"], "hello");
    assert!(msgs[0].get("re").is_none());
    assert!(msgs[0].get("kind").is_none());
    assert!(msgs[0].get("wake").is_none());
    assert_eq!(msgs[0]["project"], "alpha");
    assert_eq!(msgs[1]["re"], id1);
    assert_eq!(msgs[1]["kind"], "status");
    assert_eq!(msgs[1]["wake"], false);
    assert_eq!(msgs[1]["project"], "explicit");
    assert_eq!(msgs[2]["project"], "gamma");
    assert_eq!(msgs[3]["to"], "all");
    assert!(msgs[0]["ts"].as_i64().unwrap_or(0) > 0);
    assert_eq!(peek["cursor"], id4);

    // The sender does not get its own broadcast.
    let c = api.read("/inbox?session=c:gamma&since=0&peek=1").await;
    assert!(ids(&c).is_empty());

    // Peek leaves the ledger alone; a plain read advances it (monotonic, shared with /poll).
    let peer = api.read("/peer?session=b:p").await;
    assert_eq!(peer["deliveredUpTo"], 0);
    let r = api.read(&format!("/inbox?session=b:p&since={id2}")).await;
    assert_eq!(ids(&r), vec![id3, id4]);
    assert_eq!(api.read("/peer?session=b:p").await["deliveredUpTo"], id4);
    api.read("/inbox?session=b:p&since=0").await;
    assert_eq!(api.read("/peer?session=b:p").await["deliveredUpTo"], id4);
    let d = api
        .ok("/delivered", json!({"session":"b:p","upTo":1}))
        .await;
    assert_eq!(d["deliveredUpTo"], id4);

    // Every send wrote a message event with its card refs.
    api.send("a:p", "b:p", "see #12 and #3, not #12345678")
        .await;
    let ev = api.read("/events?type=message&limit=1").await;
    assert_eq!(ev["events"][0]["refs"], json!([12, 3]));
    assert_eq!(ev["events"][0]["toSession"], "b:p");
    let by_card = api.read("/events?taskId=3").await;
    assert_eq!(by_card["events"].as_array().map(Vec::len), Some(1));

    // /recent is the god view with a cap.
    let recent = api.read("/recent?limit=2").await;
    assert_eq!(recent["messages"].as_array().map(Vec::len), Some(2));

    // Poll with wait=0 answers at once; a poll with news returns it.
    let p = api
        .read(&format!("/poll?session=b:p&since={id4}&wait=0"))
        .await;
    assert_eq!(ids(&p).len(), 1);
    let last = p["cursor"].as_i64().expect("cursor");
    let p = api
        .read(&format!("/poll?session=b:p&since={last}&wait=0"))
        .await;
    assert!(ids(&p).is_empty());
    assert_eq!(p["cursor"], last);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rewind_and_paging() {
    let hub = Hub::start();
    let api = Api::new(&hub);
    let n = 2500;
    // Seeded in one transaction straight into the store (sending is tested elsewhere; this is
    // about reading a long mailbox back).
    use trantor_store::Store as _;
    hub.store()
        .write(move |tx| {
            for i in 0..n {
                tx.insert_message(
                    trantor_store::NewMessage {
                        ts: trantor_proto::now_ms(),
                        from: format!("s{}:p", i % 10),
                        to: "r:p".into(),
                        project: "p".into(),
                        text: format!("m{i}"),
                        ..Default::default()
                    },
                    &[],
                )?;
            }
            Ok(())
        })
        .await
        .expect("seed the mailbox");
    // Cursor above the tip → clamped, rewound.
    let r = api.read("/inbox?session=r:p&since=999999&peek=1").await;
    assert_eq!(r["rewound"], true);
    assert_eq!(r["cursor"], n);
    let p = api.read("/poll?session=x:p&since=999999&wait=0").await;
    assert_eq!(p["rewound"], true);
    assert_eq!(p["cursor"], n);
    assert_eq!(api.read("/peer?session=x:p").await["deliveredUpTo"], n);

    // Pages: more:true until the reader has everything; ids ascend with no gap or repeat.
    let mut since = 0;
    let mut seen = Vec::new();
    let mut pages = 0;
    loop {
        let page = api.read(&format!("/inbox?session=r:p&since={since}")).await;
        pages += 1;
        seen.extend(ids(&page));
        since = page["cursor"].as_i64().expect("cursor");
        if page["more"] != true {
            break;
        }
    }
    assert_eq!(pages, 3);
    assert_eq!(seen, (1..=n).collect::<Vec<_>>());
}

/// How long a woken `/poll` may take to answer. The polls below hold for 120 s, so a wake that
/// is missed (the poll answering only when its hold ends) fails this deadline by a wide margin.
const WOKEN: Duration = Duration::from_secs(5);

/// A counter or gauge from `/metrics` (0 when absent).
async fn metric(api: &Api, name: &str) -> i64 {
    let text = api.read("/metrics").await;
    text.as_str()
        .unwrap_or("")
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or(0)
}

/// Waits until the hub holds `n` polls (the requests reached the hub; each then arms its wake
/// before its first look at the store, so a message sent now is either found or rings it).
async fn wait_held(api: &Api, n: i64) {
    let deadline = std::time::Instant::now() + GUARD;
    while metric(api, "trantor_polls_held").await != n {
        assert!(
            std::time::Instant::now() < deadline,
            "the hub never held {n} poll(s)"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn poll_returns_when_a_message_commits() {
    let hub = Hub::start();
    let api = Api::new(&hub);
    let poller = {
        let api = api.clone();
        tokio::spawn(async move { api.read("/poll?session=w:p&since=0&wait=120").await })
    };
    wait_held(&api, 1).await;
    // A held poll keeps its session online. (The poll is counted as held before its first
    // write records the session's peer row, so wait for the row rather than race it.)
    let deadline = std::time::Instant::now() + GUARD;
    loop {
        let peers = api.read("/peers").await;
        if peers["peers"].as_array().is_some_and(|a| {
            a.iter()
                .any(|p| p["session"] == "w:p" && p["online"] == true)
        }) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "a held poll's session never showed online: {peers}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // A message to someone else and one from w:p itself are not deliverable to it: the held
    // poll answers with the later message alone (woken early, it would have held neither).
    api.send("a:p", "other:p", "not for w").await;
    api.send("w:p", "all", "own broadcast").await;
    let id = api.send("a:p", "w:p", "wake up").await;
    let got = tokio::time::timeout(WOKEN, poller)
        .await
        .expect("the message woke the held poll")
        .expect("poller");
    assert_eq!(ids(&got), vec![id]);
    assert_eq!(api.read("/peer?session=w:p").await["deliveredUpTo"], id);

    // A broadcast wakes a held poll too.
    let poller = {
        let api = api.clone();
        tokio::spawn(async move {
            api.read(&format!("/poll?session=w:p&since={id}&wait=120"))
                .await
        })
    };
    wait_held(&api, 1).await;
    let b = api.send("a:p", "all", "everyone").await;
    let got = tokio::time::timeout(WOKEN, poller)
        .await
        .expect("the broadcast woke the held poll")
        .expect("poller");
    assert_eq!(ids(&got), vec![b]);
    assert_eq!(metric(&api, "trantor_polls_timed_out_total").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 8)]
async fn concurrent_pollers_and_senders_lose_and_repeat_nothing() {
    let hub = Hub::start();
    let api = Api::new(&hub);
    const SENDERS: usize = 8;
    const PER_SENDER: usize = 80;
    // Targets: the shared session x:p, one session per "other" poller, and broadcasts.
    let others: Vec<String> = (0..8).map(|i| format!("y{i}:p")).collect();
    let mut readers: Vec<String> = vec!["x:p".to_string(); 8];
    readers.extend(others.iter().cloned());

    let (done_tx, done_rx) = tokio::sync::watch::channel(false);
    let mut polls = Vec::new();
    for session in readers.clone() {
        let api = api.clone();
        let done = done_rx.clone();
        polls.push(tokio::spawn(async move {
            let mut since = 0;
            let mut got: Vec<i64> = Vec::new();
            loop {
                let page = api
                    .read(&format!("/poll?session={session}&since={since}&wait=2"))
                    .await;
                got.extend(ids(&page));
                since = page["cursor"].as_i64().expect("cursor");
                if *done.borrow() && ids(&page).is_empty() && page["more"] != true {
                    break;
                }
            }
            (session, got)
        }));
    }
    let mut sends = Vec::new();
    for s in 0..SENDERS {
        let api = api.clone();
        let others = others.clone();
        sends.push(tokio::spawn(async move {
            let mut sent = Vec::new();
            for i in 0..PER_SENDER {
                let to = match i % 3 {
                    0 => "x:p".to_string(),
                    1 => "all".to_string(),
                    _ => others[(s + i) % others.len()].clone(),
                };
                let id = api.send(&format!("s{s}:p"), &to, &format!("{s}/{i}")).await;
                sent.push((id, to));
            }
            sent
        }));
    }
    let mut all_sent = Vec::new();
    for s in sends {
        all_sent.extend(s.await.expect("sender"));
    }
    done_tx.send(true).expect("done");
    for p in polls {
        let (session, got) = tokio::time::timeout(GUARD * 2, p)
            .await
            .expect("poller finished")
            .expect("poller");
        let mut expected: Vec<i64> = all_sent
            .iter()
            .filter(|(_, to)| to == &session || to == "all")
            .map(|(id, _)| *id)
            .collect();
        expected.sort_unstable();
        let unique: HashSet<i64> = got.iter().copied().collect();
        assert_eq!(unique.len(), got.len(), "{session} got a duplicate");
        assert!(
            got.windows(2).all(|w| w[0] < w[1]),
            "{session} out of order"
        );
        assert_eq!(got, expected, "{session} lost messages");
    }
}

/// Both durability levels (`--sync full`, the default, and `normal`) keep every acknowledged
/// write across a `kill -9` of the hub.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn acknowledged_messages_survive_kill_9() {
    for sync in ["full", "normal"] {
        acknowledged_messages_survive_kill_9_at(sync).await;
    }
}

async fn acknowledged_messages_survive_kill_9_at(sync: &str) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let env = [("TRANTOR_SYNC", sync)];
    let mut hub = Hub::start_in(tmp.path(), free_port(), &env);
    let api = Api::new(&hub);
    assert_eq!(api.read("/health").await["sync"], sync);
    let n = 300;
    let mut last = 0;
    for i in 0..n {
        last = api.send("a:p", "b:p", &format!("durable {i}")).await;
    }
    api.ok(
        "/task",
        json!({"title":"survives","by":"a:p","project":"p"}),
    )
    .await;
    // Kill right after the last acknowledgement.
    hub.kill9();
    let hub2 = Hub::start_in(tmp.path(), free_port(), &env);
    let api = Api::new(&hub2);
    let mut since = 0;
    let mut got = Vec::new();
    loop {
        let page = api
            .read(&format!("/inbox?session=b:p&since={since}&peek=1"))
            .await;
        got.extend(ids(&page));
        since = page["cursor"].as_i64().expect("cursor");
        if page["more"] != true {
            break;
        }
    }
    assert_eq!(got.len(), n, "sync {sync}");
    assert_eq!(got.last().copied(), Some(last));
    // Ids continue after the restart.
    let next = api.send("a:p", "b:p", "after restart").await;
    assert_eq!(next, last + 1);
    let tasks = api.read("/tasks?project=p").await;
    assert_eq!(tasks["tasks"][0]["title"], "survives");
}

/// One row of the bad-input table: method, path, body, expected status, expected error text.
type BadRow = (&'static str, String, Option<Vec<u8>>, u16, String);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bad_input_gets_clear_4xx_never_5xx() {
    let hub = Hub::start();
    let api = Api::new(&hub);
    let card = api
        .ok("/task", json!({"title":"c","by":"o:p","checklist":["one"]}))
        .await["task"]["id"]
        .as_i64()
        .expect("card");
    let key = format!("sk-ant-api03-{}", "x".repeat(40));
    let big = vec![b'{'; 2 * 1024 * 1024];

    // (method, path, body, status, what the error text must contain)
    let rows: Vec<BadRow> = vec![
        (
            "POST",
            "/send".into(),
            Some(b"{\"from\": \"a".to_vec()),
            400,
            "invalid JSON".into(),
        ),
        (
            "POST",
            "/send".into(),
            Some(b"[1,2]".to_vec()),
            400,
            "invalid".into(),
        ),
        (
            "POST",
            "/send".into(),
            Some(big.clone()),
            413,
            "too large".into(),
        ),
        ("POST", "/task".into(), Some(big), 413, "too large".into()),
        (
            "POST",
            "/send".into(),
            Some(br#"{"from":"a","text":"t","re":"x"}"#.to_vec()),
            400,
            "re".into(),
        ),
        (
            "POST",
            "/send".into(),
            Some(br#"{"from":5,"text":"t"}"#.to_vec()),
            400,
            "from".into(),
        ),
        (
            "POST",
            "/send".into(),
            Some(br#"{"from":"a","text":"t","wake":"no"}"#.to_vec()),
            400,
            "wake".into(),
        ),
        (
            "POST",
            "/task/update".into(),
            Some(br#"{"id":"x"}"#.to_vec()),
            400,
            "id".into(),
        ),
        (
            "POST",
            "/task".into(),
            Some(br#"{"title":"t","deps":"x"}"#.to_vec()),
            400,
            "deps".into(),
        ),
        (
            "POST",
            "/task".into(),
            Some(br#"{"title":"t","checklist":5}"#.to_vec()),
            400,
            "checklist".into(),
        ),
        (
            "POST",
            "/send".into(),
            Some(br#"{"from":"a"}"#.to_vec()),
            400,
            "from and non-empty text required".into(),
        ),
        (
            "POST",
            "/task".into(),
            Some(json!({"title":"x".repeat(201)}).to_string().into_bytes()),
            400,
            "title too long".into(),
        ),
        (
            "POST",
            "/send".into(),
            Some(
                json!({"from":"a","text":"x".repeat(70_000)})
                    .to_string()
                    .into_bytes(),
            ),
            400,
            "text too long".into(),
        ),
        (
            "POST",
            "/send".into(),
            Some(
                json!({"from":"a".repeat(201),"text":"x"})
                    .to_string()
                    .into_bytes(),
            ),
            400,
            "from too long".into(),
        ),
        (
            "POST",
            "/send".into(),
            Some(
                json!({"from":"a","text":"x","kind":"k".repeat(41)})
                    .to_string()
                    .into_bytes(),
            ),
            400,
            "kind too long".into(),
        ),
        (
            "POST",
            "/register".into(),
            Some(
                json!({"session":"a:p","status":"s".repeat(281)})
                    .to_string()
                    .into_bytes(),
            ),
            400,
            "status too long".into(),
        ),
        (
            "POST",
            "/task/update".into(),
            Some(
                json!({"id":card,"note":"n".repeat(2001)})
                    .to_string()
                    .into_bytes(),
            ),
            400,
            "note too long".into(),
        ),
        (
            "POST",
            "/task/update".into(),
            Some(
                json!({"id":card,"drill":"d".repeat(301)})
                    .to_string()
                    .into_bytes(),
            ),
            400,
            "drill too long".into(),
        ),
        (
            "POST",
            "/lesson".into(),
            Some(json!({"text":"l".repeat(401)}).to_string().into_bytes()),
            400,
            "text too long".into(),
        ),
        (
            "POST",
            "/task".into(),
            Some(
                json!({"title":"t","checklist":vec!["i"; 21]})
                    .to_string()
                    .into_bytes(),
            ),
            400,
            "checklist too long".into(),
        ),
        (
            "POST",
            "/task/update".into(),
            Some(
                json!({"id":999_999,"status":"doing"})
                    .to_string()
                    .into_bytes(),
            ),
            404,
            "no such task".into(),
        ),
        (
            "POST",
            "/task/checklist-toggle".into(),
            Some(
                json!({"id":999_999,"index":0,"done":true})
                    .to_string()
                    .into_bytes(),
            ),
            404,
            "no such task".into(),
        ),
        (
            "POST",
            "/task/checklist-toggle".into(),
            Some(
                json!({"id":card,"index":5,"done":true})
                    .to_string()
                    .into_bytes(),
            ),
            404,
            "no such checklist item".into(),
        ),
        (
            "GET",
            "/card?id=999999".into(),
            None,
            404,
            "no such card".into(),
        ),
        (
            "GET",
            "/card?id=abc".into(),
            None,
            400,
            "id must be an integer".into(),
        ),
        (
            "POST",
            "/send".into(),
            Some(
                json!({"from":"a","to":"b","text":format!("key {key}")})
                    .to_string()
                    .into_bytes(),
            ),
            400,
            "secret detected".into(),
        ),
        (
            "POST",
            "/task".into(),
            Some(json!({"title":format!("t {key}")}).to_string().into_bytes()),
            400,
            "secret detected".into(),
        ),
        (
            "POST",
            "/task/update".into(),
            Some(
                json!({"id":card,"note":format!("n {key}")})
                    .to_string()
                    .into_bytes(),
            ),
            400,
            "secret detected".into(),
        ),
        (
            "GET",
            "/poll?session=a:p&wait=abc".into(),
            None,
            400,
            "wait".into(),
        ),
        (
            "GET",
            "/poll?session=a:p&wait=-1".into(),
            None,
            400,
            "wait".into(),
        ),
        (
            "GET",
            "/inbox?session=a:p&since=abc".into(),
            None,
            400,
            "since".into(),
        ),
        ("GET", "/inbox".into(), None, 400, "session required".into()),
        ("GET", "/events?limit=-2".into(), None, 400, "limit".into()),
        (
            "GET",
            "/no/such/route".into(),
            None,
            404,
            "not found".into(),
        ),
        (
            "DELETE",
            "/send".into(),
            None,
            405,
            "method not allowed".into(),
        ),
        (
            "GET",
            "/send".into(),
            None,
            405,
            "method not allowed".into(),
        ),
    ];
    for (method, path, body, status, text) in rows {
        let url = format!("{}{path}", api.base);
        let mut req = api
            .http
            .request(method.parse().expect("method"), &url)
            .header("content-type", "application/json");
        if let Some(b) = body {
            req = req.body(b);
        }
        let resp = req.send().await.expect("request");
        let (got, v) = Api::finish(resp).await;
        assert!(got < 500, "{method} {path}: 5xx {got} {v}");
        assert_eq!(got, status, "{method} {path}: {v}");
        let err = v["error"].as_str().unwrap_or("");
        assert!(
            err.contains(&text),
            "{method} {path}: error {err:?} lacks {text:?}"
        );
    }
    // Over-long fields name the limit; secrets name their kinds; unknown cards keep the shape.
    let (_, v) = api.post("/task", json!({"title":"x".repeat(201)})).await;
    assert_eq!(v["limit"], 200);
    let (_, v) = api
        .post("/send", json!({"from":"a","text":format!("use {key}")}))
        .await;
    assert_eq!(v["kinds"], json!(["anthropic-key"]));
    let (_, v) = api.get("/card?id=999999").await;
    assert_eq!(v["task"], Value::Null);
    assert_eq!(v["events"], json!([]));
    assert_eq!(v["messages"], json!([]));
    let (_, v) = api
        .post_raw("/send", br#"{"from":"a","text":"t","re":"x"}"#.to_vec())
        .await;
    assert_eq!(v["field"], "re");
    // Unknown fields are ignored.
    let (st, _) = api
        .post(
            "/send",
            json!({"from":"a:p","text":"hi","zzz":{"deep":[1]}}),
        )
        .await;
    assert_eq!(st, 200);
    // Browser pages may not use the hub; local origins may.
    let resp = api
        .http
        .post(format!("{}/send", api.base))
        .header("origin", "https://evil.example")
        .body(json!({"from":"a:p","text":"x"}).to_string())
        .send()
        .await
        .expect("post");
    assert_eq!(resp.status().as_u16(), 403);
    let resp = api
        .http
        .get(format!("{}/health", api.base))
        .header("origin", "http://localhost:5173")
        .send()
        .await
        .expect("get");
    assert_eq!(resp.status().as_u16(), 200);
    assert!(resp.headers().get("access-control-allow-origin").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn contracts_come_in_pages_with_counts_of_every_page() {
    let hub = Hub::start();
    let api = Api::new(&hub);
    let o = "orch:p";
    api.ok("/register", json!({"session": "a:p", "status":"idle"}))
        .await;
    // 12 contracts to a seat that never showed up, 6 to a live one; a plain reply answers the
    // oldest open one to its sender, a reply naming a contract takes that one over and the plain
    // reply it displaced answers the next.
    let mut ids = Vec::new();
    for i in 0..12 {
        ids.push(api.send(o, "ghost:p", &format!("g{i}")).await);
    }
    let mut to_a = Vec::new();
    for i in 0..6 {
        to_a.push(api.send(o, "a:p", &format!("a{i}")).await);
    }
    ids.extend(&to_a);
    let plain = api.send("a:p", o, "done with the first").await;
    let l = api.read(&format!("/contracts?session={o}")).await;
    let row = |l: &Value, id: i64| -> Value {
        l["contracts"]
            .as_array()
            .and_then(|a| a.iter().find(|c| c["id"] == id).cloned())
            .unwrap_or(Value::Null)
    };
    assert_eq!(row(&l, to_a[0])["answer"]["id"], plain, "{l}");
    api.ok(
        "/send",
        json!({"from":"a:p","to":o,"text":"this one","re":to_a[0]}),
    )
    .await;
    let l = api.read(&format!("/contracts?session={o}")).await;
    assert_eq!(row(&l, to_a[0])["answer"]["text"], "this one", "{l}");
    assert_eq!(row(&l, to_a[1])["answer"]["id"], plain, "{l}");
    // The original's clients read one page: small ledgers fit in the default one.
    assert_eq!(l["total"], 18);
    assert_eq!(l["abandoned"], 12);
    assert_eq!(l["answered"], 2);
    assert_eq!(
        (l["waiting"].clone(), l["open"].clone()),
        (json!(4), json!(4))
    );
    assert!(l.get("nextCursor").is_none(), "{l}");
    assert_eq!(l["abandonedContracts"].as_array().map(Vec::len), Some(12));

    // Pages of 5: every row exactly once, in id order, and the same counts on every page.
    let mut seen = Vec::new();
    let mut cursor = 0i64;
    let mut pages = 0;
    loop {
        let l = api
            .read(&format!("/contracts?session={o}&limit=5&cursor={cursor}"))
            .await;
        pages += 1;
        assert_eq!(l["total"], 18, "{l}");
        assert_eq!(l["abandoned"], 12, "{l}");
        assert_eq!(l["open"], 4, "{l}");
        let mut page: Vec<i64> = ["contracts", "abandonedContracts"]
            .iter()
            .filter_map(|k| l[*k].as_array())
            .flatten()
            .filter_map(|c| c["id"].as_i64())
            .collect();
        page.sort_unstable();
        assert!(page.len() <= 5, "{l}");
        seen.extend(page);
        match l["nextCursor"].as_i64() {
            Some(c) => cursor = c,
            None => break,
        }
        assert!(pages < 10, "paging does not end: {l}");
    }
    assert_eq!(pages, 4);
    assert_eq!(seen, ids);
    // Bounds the document states are the hub's.
    let (code, _) = api.get(&format!("/contracts?session={o}&limit=0")).await;
    assert_eq!(code, 400);
    let (code, _) = api.get(&format!("/poll?session={o}&wait=-1")).await;
    assert_eq!(code, 400);
    let (code, doc) = api.get("/openapi.json").await;
    assert_eq!(code, 200);
    let wait = doc["paths"]["/poll"]["get"]["parameters"]
        .as_array()
        .and_then(|a| a.iter().find(|p| p["name"] == "wait").cloned())
        .unwrap_or(Value::Null);
    // An optional number may also be sent empty: the bound sits on the number's branch.
    let minimum = wait["schema"]["anyOf"]
        .as_array()
        .and_then(|a| a.iter().find(|s| s["type"] == "number"))
        .map(|s| s["minimum"].clone())
        .unwrap_or_else(|| wait["schema"]["minimum"].clone());
    assert_eq!(minimum, 0, "{wait}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn contract_dispositions_and_abandon_reaper() {
    // A short abandon window and reaper period (the defaults are an hour and a minute); the
    // window must outlast the sends below on a loaded machine (400 ms did not).
    let hub = Hub::start_with(|a| {
        a.contract_abandon_ms = 1500;
        a.reap_interval_ms = 100;
    });
    let api = Api::new(&hub);
    let o = "orch:p";
    for s in ["a:p", "b:p", "c:p", "d:p"] {
        api.ok("/register", json!({"session": s, "status":"idle"}))
            .await;
    }
    let old_to_a = api.send(o, "a:p", "old contract").await;
    // The abandon window passes: every assignee is then older than it, until it registers.
    tokio::time::sleep(Duration::from_millis(1600)).await;
    for s in ["a:p", "b:p", "c:p", "d:p"] {
        api.ok("/register", json!({"session": s})).await;
    }
    let to_a = api.send(o, "a:p", "new contract").await;
    api.ok(
        "/send",
        json!({"from":"a:p","to":o,"text":"done","re":to_a}),
    )
    .await;
    let to_d = api.send(o, "d:p", "plain reply contract").await;
    api.send("d:p", o, "finished it").await;
    let to_b = api.send(o, "b:p", "waiting on b").await;
    let ghost = api.send(o, "ghost:p", "nobody there").await;
    let ctx = api
        .ok(
            "/send",
            json!({"from":o,"to":"c:p","text":"fyi","wake":false}),
        )
        .await["id"]
        .as_i64()
        .expect("id");
    let receipt = api
        .ok(
            "/send",
            json!({"from":o,"to":"c:p","text":"ok","kind":"receipt"}),
        )
        .await["id"]
        .as_i64()
        .expect("id");
    let to_c = api.send(o, "c:p", "waiting on c").await;
    api.send(o, "all", "broadcasts are never contracts").await;

    let l = api.read(&format!("/contracts?session={o}&project=p")).await;
    let disp = |id: i64| -> String {
        for list in [
            "contracts",
            "abandonedContracts",
            "supersededContracts",
            "ackContracts",
        ] {
            if let Some(c) = l[list]
                .as_array()
                .and_then(|a| a.iter().find(|c| c["id"] == id))
            {
                return c["disposition"].as_str().unwrap_or("").to_string();
            }
        }
        String::new()
    };
    assert_eq!(disp(old_to_a), "superseded");
    assert_eq!(disp(to_a), "answered");
    assert_eq!(disp(to_d), "answered");
    assert_eq!(disp(to_b), "waiting");
    assert_eq!(disp(to_c), "waiting");
    assert_eq!(disp(ghost), "abandoned");
    assert_eq!(disp(ctx), "ack");
    assert_eq!(disp(receipt), "ack");
    assert_eq!(l["session"], o);
    assert_eq!(l["answered"], 2);
    assert_eq!(l["open"], 2);
    let answered = l["contracts"]
        .as_array()
        .and_then(|a| a.iter().find(|c| c["id"] == to_a).cloned())
        .expect("row");
    assert_eq!(answered["answer"]["text"], "done");
    assert_eq!(answered["assigneeOnline"], true);
    let ghost_row = &l["abandonedContracts"][0];
    assert_eq!(ghost_row["assigneeLastSeenMs"], Value::Null);
    assert_eq!(ghost_row["assigneeOnline"], false);
    // overdueMs turns an old waiting contract into stalled.
    let l2 = api
        .read(&format!("/contracts?session={o}&overdueMs=1"))
        .await;
    let row = l2["contracts"]
        .as_array()
        .and_then(|a| a.iter().find(|c| c["id"] == to_b).cloned())
        .expect("row");
    assert_eq!(row["disposition"], "stalled");
    // A project filter that matches nothing.
    let l3 = api
        .read(&format!("/contracts?session={o}&project=zz"))
        .await;
    assert_eq!(l3["contracts"], json!([]));

    // The reaper records each abandoned contract once, with one event.
    let mut found = 0;
    for _ in 0..100 {
        let ev = api.read("/events?type=contract.abandoned").await;
        found = ev["events"].as_array().map(Vec::len).unwrap_or(0);
        if found > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(found >= 1, "no contract.abandoned event");
    // Four more reaper periods, in which it must not be recorded again (an absence takes
    // time to show; the hub exposes no pass counter to wait on).
    tokio::time::sleep(Duration::from_millis(400)).await;
    let ev = api.read("/events?type=contract.abandoned").await;
    let ghost_events: Vec<&Value> = ev["events"]
        .as_array()
        .map(|a| a.iter().filter(|e| e["msgId"] == ghost).collect())
        .unwrap_or_default();
    assert_eq!(ghost_events.len(), 1, "{ev}");
    assert_eq!(ghost_events[0]["toSession"], "ghost:p");
    assert_eq!(ghost_events[0]["by"], "reaper");
    let l = api.read(&format!("/contracts?session={o}")).await;
    let reaped = l["abandonedContracts"]
        .as_array()
        .and_then(|a| a.iter().find(|c| c["id"] == ghost).cloned())
        .expect("row");
    assert!(reaped["reaped"]["ts"].as_i64().is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ask_blocks_the_card_and_the_answer_unblocks_it() {
    let hub = Hub::start();
    let api = Api::new(&hub);
    let card = api
        .ok(
            "/task",
            json!({"title":"build it","project":"p","by":"orch:p","assignee":"a:p","status":"doing"}),
        )
        .await["task"]["id"]
        .as_i64()
        .expect("id");
    let other = api
        .ok(
            "/task",
            json!({"title":"elsewhere","project":"q","by":"orch:q"}),
        )
        .await["task"]["id"]
        .as_i64()
        .expect("id");
    // The other-project card is cited first but is skipped.
    let ask = api
        .ok(
            "/send",
            json!({"from":"a:p","to":"orch:p","kind":"ask","project":"p",
                   "text":format!("❓ ask on #{other} #{card}: which database?")}),
        )
        .await["id"]
        .as_i64()
        .expect("id");
    let c = api.read(&format!("/card?id={card}")).await;
    assert_eq!(c["task"]["status"], "blocked");
    let log = c["task"]["log"].as_array().cloned().unwrap_or_default();
    assert!(
        log.iter()
            .any(|l| l["text"].as_str().unwrap_or("").contains("which database"))
    );
    assert!(c["events"].as_array().is_some_and(|e| {
        e.iter()
            .any(|e| e["type"] == "moved" && e["to"] == "blocked")
    }));
    assert!(
        c["messages"]
            .as_array()
            .is_some_and(|m| m.iter().any(|m| m["id"] == ask))
    );
    assert_eq!(
        api.read(&format!("/card?id={other}")).await["task"]["status"],
        "todo"
    );
    // The ask is an open contract of the asker (kind ask round-trips).
    let l = api.read("/contracts?session=a:p").await;
    assert_eq!(l["contracts"][0]["kind"], "ask");

    api.ok(
        "/send",
        json!({"from":"orch:p","to":"a:p","re":ask,"text":"postgres"}),
    )
    .await;
    let c = api.read(&format!("/card?id={card}")).await;
    assert_eq!(c["task"]["status"], "doing");
    let log = c["task"]["log"].as_array().cloned().unwrap_or_default();
    assert!(log.iter().any(|l| l["text"] == "answered: postgres"));
    let l = api.read("/contracts?session=a:p").await;
    assert_eq!(l["contracts"][0]["disposition"], "answered");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn board_drill_gate_assignee_freeze_and_views() {
    let hub = Hub::start();
    let api = Api::new(&hub);
    let t = api
        .ok(
            "/task",
            json!({"title":"gate","project":"p","by":"orch:p","assignee":"a:p","status":"stale",
                   "checklist":["first", {"text":"second","done":true}],"note":"context",
                   "deps":[5,5,-1,6],"difficulty":"Hard","costUsd":1.5}),
        )
        .await["task"]
        .clone();
    let id = t["id"].as_i64().expect("id");
    assert_eq!(t["status"], "todo");
    assert_eq!(t["checklist"][1]["done"], true);
    assert_eq!(t["deps"], json!([5, 6]));
    assert_eq!(t["difficulty"], "hard");
    assert_eq!(t["log"][0]["text"], "context");
    assert_eq!(t["history"][0]["to"], "todo");
    assert_eq!(t["costUsd"], 1.5);

    // Drill gate.
    let (st, v) = api
        .post(
            "/task/update",
            json!({"id":id,"status":"done","by":"a:p","note":"looks fine"}),
        )
        .await;
    assert_eq!(st, 409);
    assert!(
        v["error"]
            .as_str()
            .unwrap_or("")
            .starts_with(&format!("no drill line on card #{id}: "))
    );
    assert_eq!(v["id"], id);
    assert_eq!(v["status"], "todo");
    let unchanged = api.read(&format!("/card?id={id}")).await;
    assert_eq!(unchanged["task"]["status"], "todo");
    assert_eq!(unchanged["task"]["log"].as_array().map(Vec::len), Some(1));

    // Assignee freeze.
    let (st, v) = api
        .post(
            "/task/update",
            json!({"id":id,"assignee":"b:p","by":"orch:p"}),
        )
        .await;
    assert_eq!(st, 409);
    assert_eq!(v["error"], "assignee is immutable");
    assert_eq!(v["id"], id);
    assert_eq!(v["assignee"], "a:p");
    let r = api
        .ok(
            "/task/update",
            json!({"id":id,"assignee":"b:p","by":"orch:p","reassign":true}),
        )
        .await;
    assert_eq!(r["task"]["assignee"], "b:p");
    assert!(r["task"]["log"].as_array().is_some_and(|l| {
        l.iter()
            .any(|e| e["text"] == "reassigned a:p → b:p (explicit)")
    }));
    // The current assignee may hand off.
    let r = api
        .ok("/task/update", json!({"id":id,"assignee":"a:p","by":"b:p"}))
        .await;
    assert_eq!(r["task"]["assignee"], "a:p");

    // Moves: history, workedBy, moved events; a test command in the note passes the gate.
    api.ok("/task/update", json!({"id":id,"status":"doing","by":"a:p"}))
        .await;
    api.ok(
        "/task/update",
        json!({"id":id,"status":"nonsense","by":"a:p"}),
    )
    .await;
    let r = api
        .ok(
            "/task/update",
            json!({"id":id,"status":"done","by":"a:p","note":"ran cargo test -p x: green"}),
        )
        .await;
    let task = &r["task"];
    assert_eq!(task["status"], "done");
    assert_eq!(task["workedBy"], "a:p");
    let hist: Vec<&str> = task["history"]
        .as_array()
        .map(|h| h.iter().filter_map(|e| e["to"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(hist, vec!["todo", "doing", "done"]);
    let ev = api.read(&format!("/events?taskId={id}&type=moved")).await;
    let moves: Vec<(String, String)> = ev["events"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|e| {
                    (
                        e["from"].as_str().unwrap_or("").into(),
                        e["to"].as_str().unwrap_or("").into(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(
        moves,
        vec![
            ("todo".into(), "doing".into()),
            ("doing".into(), "done".into())
        ]
    );
    assert_eq!(ev["events"][0]["taskId"], id);
    assert_eq!(ev["events"][0]["title"], "gate");

    // A drill on the card itself also passes the gate.
    let t2 = api
        .ok("/task", json!({"title":"second","project":"p","by":"orch:p","drill":"curl  /health\n shows ok"}))
        .await["task"]
        .clone();
    assert_eq!(t2["drill"], "curl /health shows ok");
    let id2 = t2["id"].as_i64().expect("id");
    api.ok(
        "/task/update",
        json!({"id":id2,"status":"done","by":"orch:p"}),
    )
    .await;

    // Checklist toggle and replace/clear.
    let r = api
        .ok(
            "/task/checklist-toggle",
            json!({"id":id,"index":0,"done":true,"by":"a:p"}),
        )
        .await;
    assert_eq!(r["task"]["checklist"][0]["done"], true);
    let r = api
        .ok("/task/update", json!({"id":id,"checklist":["x","y","z"]}))
        .await;
    assert_eq!(r["task"]["checklist"].as_array().map(Vec::len), Some(3));
    let r = api
        .ok("/task/update", json!({"id":id,"checklist":null}))
        .await;
    assert_eq!(r["task"]["checklist"], json!([]));

    // Board views.
    let slim = api
        .read(&format!("/tasks?project=p&fields=slim&card={id2}"))
        .await;
    assert_eq!(slim["fields"], "slim");
    let rows = slim["tasks"].as_array().cloned().unwrap_or_default();
    assert_eq!(rows.len(), 2);
    let first = rows.iter().find(|t| t["id"] == id).expect("first");
    assert!(first.get("log").is_none() && first.get("history").is_none());
    assert!(first["logCount"].as_i64().unwrap_or(0) >= 2);
    let full = rows.iter().find(|t| t["id"] == id2).expect("second");
    assert!(full.get("history").is_some());
    let all = api.read("/tasks").await;
    assert_eq!(all["tasks"].as_array().map(Vec::len), Some(2));
    assert!(all.get("fields").is_none());
    assert_eq!(api.read("/tasks?project=q").await["tasks"], json!([]));

    // Delete: the card is rebuilt from its last event.
    let r = api
        .ok(
            "/task/update",
            json!({"id":id2,"delete":true,"by":"orch:p"}),
        )
        .await;
    assert_eq!(r["ok"], true);
    let gone = api.read(&format!("/card?id={id2}")).await;
    assert_eq!(gone["task"]["status"], "deleted");
    assert_eq!(gone["task"]["title"], "second");
    assert!(
        gone["events"]
            .as_array()
            .is_some_and(|e| e.iter().any(|e| e["type"] == "deleted"))
    );
    let ev = api.read("/events?type=created,updated&limit=2000").await;
    assert!(ev["events"].as_array().is_some_and(|e| e.len() >= 3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn op_replay_runs_a_write_once() {
    let hub = Hub::start();
    let api = Api::new(&hub);
    let body = json!({"from":"a:p","to":"b:p","text":"once","_op":"op-1"});
    let first = api.ok("/send", body.clone()).await;
    let again = api.ok("/send", body.clone()).await;
    assert_eq!(first, again);
    let st = api.read("/_op?id=op-1").await;
    assert_eq!(st["status"], "committed");
    assert_eq!(st["code"], 200);
    assert_eq!(st["body"]["id"], first["id"]);
    assert_eq!(
        ids(&api.read("/inbox?session=b:p&since=0&peek=1").await).len(),
        1
    );

    // A rejected op replays its rejection.
    let bad = json!({"from":"a:p","text":"","_op":"op-bad"});
    let (s1, b1) = api.post("/send", bad.clone()).await;
    let (s2, b2) = api.post("/send", bad).await;
    assert_eq!((s1, &b1), (400, &b2));
    assert_eq!(s2, 400);
    let st = api.read("/_op?id=op-bad").await;
    assert_eq!(st["status"], "rejected");
    assert_eq!(st["code"], 400);
    assert_eq!(api.read("/_op?id=never-seen").await["status"], "unknown");

    // Concurrent duplicates: one run, every caller gets its reply.
    let mut tasks = Vec::new();
    for _ in 0..12 {
        let api = api.clone();
        tasks.push(tokio::spawn(async move {
            api.ok(
                "/task",
                json!({"title":"exactly once","by":"a:p","project":"p","_op":"op-race"}),
            )
            .await["task"]["id"]
                .as_i64()
        }));
    }
    let mut got = HashSet::new();
    for t in tasks {
        got.insert(t.await.expect("task"));
    }
    assert_eq!(got.len(), 1);
    assert_eq!(
        api.read("/tasks?project=p").await["tasks"]
            .as_array()
            .map(Vec::len),
        Some(1)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn events_lessons_policy_project_phase() {
    let hub = Hub::start();
    let api = Api::new(&hub);
    let e0 = api.read("/events?limit=1").await;
    assert_eq!(e0["latest"], 0);
    assert_eq!(e0["events"], json!([]));
    api.send("a:p", "b:p", "one").await;
    api.send("b:p", "a:p", "two").await;
    api.ok("/task", json!({"title":"t","by":"a:p","project":"p"}))
        .await;
    let latest = api.read("/events?limit=1").await["latest"]
        .as_i64()
        .expect("latest");
    assert!(latest >= 3);
    let by = api.read("/events?by=a:p&since=0&limit=500").await;
    assert!(
        by["events"]
            .as_array()
            .is_some_and(|e| !e.is_empty() && e.iter().all(|e| e["by"] == "a:p"))
    );
    let cursor = by["cursor"].as_i64().expect("cursor");
    let after = api
        .read(&format!("/events?by=a:p&since={cursor}&limit=500"))
        .await;
    assert_eq!(after["events"], json!([]));
    assert_eq!(after["cursor"], cursor);
    let typed = api.read("/events?type=created,presence.").await;
    assert!(typed["events"].as_array().is_some_and(|e| e.iter().all(
        |e| e["type"] == "created" || e["type"].as_str().unwrap_or("").starts_with("presence.")
    )));
    let proj = api.read("/events?project=p&type=message").await;
    assert_eq!(proj["events"].as_array().map(Vec::len), Some(2));

    // Lessons: global + the agent's own scope, exact duplicates are a no-op, ids never reused.
    let l1 = api
        .ok("/lesson", json!({"text":"  run the tests  ","by":"a:p"}))
        .await;
    assert_eq!(l1["count"], 1);
    let dup = api.ok("/lesson", json!({"text":"run the tests"})).await;
    assert_eq!(dup["dedup"], true);
    api.ok("/lesson", json!({"text":"claude only","scope":"Claude"}))
        .await;
    api.ok("/lesson", json!({"text":"codex only","scope":"codex"}))
        .await;
    let ls = api.read("/lessons?agent=claude").await;
    let texts: Vec<&str> = ls["lessons"]
        .as_array()
        .map(|a| a.iter().filter_map(|l| l["text"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(texts, vec!["run the tests", "claude only"]);
    assert!(ls["lessons"][0]["id"].as_i64().is_some());
    assert_eq!(ls["lessons"][1]["scope"], "claude");

    // Policy: open GET, link / unlink / autonomy.
    let p = api.read("/policy").await;
    assert_eq!(p["links"], json!([]));
    assert_eq!(p["autonomy"]["*"], 1);
    api.ok(
        "/policy",
        json!({"link":{"projects":["web","api"],"reason":"shared schema"},"autonomy":{"web":3},"by":"me"}),
    )
    .await;
    let p = api.read("/policy").await;
    assert_eq!(p["links"][0]["projects"], json!(["api", "web"]));
    assert_eq!(p["links"][0]["reason"], "shared schema");
    assert_eq!(p["autonomy"]["web"], 3);
    let (st, _) = api
        .post("/policy", json!({"link":{"projects":["solo"]}}))
        .await;
    assert_eq!(st, 400);
    let (st, _) = api.post("/policy", json!({"autonomy":{"web":9}})).await;
    assert_eq!(st, 400);
    api.ok("/policy", json!({"unlink":{"projects":["api","web"]}}))
        .await;
    assert_eq!(api.read("/policy").await["links"], json!([]));

    // Project brief and phase goal.
    let b = api
        .ok(
            "/project",
            json!({"project":"p","brief":"ship it","by":"me"}),
        )
        .await;
    assert_eq!(
        (b["ok"].clone(), b["brief"].clone()),
        (json!(true), json!("ship it"))
    );
    assert_eq!(api.read("/project?project=p").await["brief"], "ship it");
    let ph = api
        .ok(
            "/phase",
            json!({"project":"p","phase":"beta","goal":"no crashes"}),
        )
        .await;
    assert_eq!(ph["goal"], "no crashes");
    let (st, _) = api.post("/project", json!({"brief":"x"})).await;
    assert_eq!(st, 400);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn meta_endpoints_describe_the_hub() {
    let hub = Hub::start();
    let api = Api::new(&hub);
    let banner = api.read("/").await;
    assert_eq!(banner["name"], "trantor hub");
    // /health answers GET and POST.
    let h = api.read("/health").await;
    assert_eq!(h["ok"], true);
    assert!(h["store"].as_str().unwrap_or("").contains("hub.db"));
    assert!(h["retention"]["pruned"].is_object());
    let (st, h2) = api.post("/health", json!({})).await;
    assert_eq!((st, h2["ok"].clone()), (200, json!(true)));

    // The OpenAPI document lists every core route.
    let doc = api.read("/openapi.json").await;
    assert_eq!(doc["openapi"], "3.1.0");
    for (path, method) in [
        ("/health", "get"),
        ("/register", "post"),
        ("/status", "post"),
        ("/peer", "get"),
        ("/peers", "get"),
        ("/send", "post"),
        ("/inbox", "get"),
        ("/poll", "get"),
        ("/contracts", "get"),
        ("/delivered", "post"),
        ("/recent", "get"),
        ("/stream", "get"),
        ("/task", "post"),
        ("/task/update", "post"),
        ("/task/checklist-toggle", "post"),
        ("/tasks", "get"),
        ("/card", "get"),
        ("/events", "get"),
        ("/lessons", "get"),
        ("/lesson", "post"),
        ("/policy", "get"),
        ("/policy", "post"),
        ("/project", "post"),
        ("/phase", "post"),
        ("/_op", "get"),
        ("/enroll", "post"),
        ("/invite", "post"),
        ("/identities", "get"),
        ("/identity/revoke", "post"),
        ("/metrics", "get"),
        ("/openapi.json", "get"),
    ] {
        assert!(
            doc["paths"][path][method]["summary"].is_string(),
            "{method} {path} missing from /openapi.json"
        );
    }
    assert_eq!(
        doc["paths"]["/poll"]["get"]["parameters"][0]["name"],
        "session"
    );

    api.send("a:p", "b:p", "count me").await;
    api.read("/poll?session=b:p&since=0&wait=0").await;
    let resp = api
        .http
        .get(format!("{}/metrics", api.base))
        .send()
        .await
        .expect("metrics");
    assert!(
        resp.headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .starts_with("text/plain")
    );
    let text = resp.text().await.expect("text");
    assert!(text.contains("trantor_messages_sent_total 1"), "{text}");
    assert!(
        text.contains(r#"trantor_http_requests_total{method="POST",route="/send",status="200"} 1"#)
    );
    assert!(text.contains("trantor_polls_held 0"));
    assert!(text.contains(r#"trantor_store_rows{kind="messages"} 1"#));
    assert!(text.contains("trantor_pruned_total"));
}

/// Read SSE chunks until `pred` holds on the text received so far.
async fn read_until(resp: &mut reqwest::Response, buf: &mut String, pred: impl Fn(&str) -> bool) {
    tokio::time::timeout(GUARD, async {
        while !pred(buf) {
            match resp.chunk().await.expect("chunk") {
                Some(c) => buf.push_str(&String::from_utf8_lossy(&c)),
                None => panic!("stream ended; got {buf:?}"),
            }
        }
    })
    .await
    .expect("sse hang guard");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stream_sends_messages_and_events() {
    let hub = Hub::start();
    let api = Api::new(&hub);
    let mut resp = api
        .http
        .get(format!("{}/stream?session=b:p&events=1", api.base))
        .send()
        .await
        .expect("stream");
    assert_eq!(resp.status().as_u16(), 200);
    assert!(
        resp.headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .starts_with("text/event-stream")
    );
    let mut buf = String::new();
    read_until(&mut resp, &mut buf, |b| b.contains(": connected as b:p")).await;
    api.send("a:p", "z:p", "not for b").await;
    let id = api.send("a:p", "b:p", "for b").await;
    // The message's own event follows its data frame, so once it is complete both are in.
    let marker = format!("\"msgId\":{id}");
    read_until(&mut resp, &mut buf, |b| {
        b.contains(&marker) && b.ends_with("\n\n")
    })
    .await;
    // Message frames are unnamed `data:` lines; only deliverable messages appear.
    let data_frames: Vec<&str> = buf
        .split("\n\n")
        .filter(|f| f.starts_with("data: "))
        .collect();
    assert_eq!(data_frames.len(), 1, "{buf}");
    let msg: Value =
        serde_json::from_str(data_frames[0].trim_start_matches("data: ")).expect("json");
    assert_eq!(msg["id"], id);
    assert!(buf.contains("\"type\":\"message\""));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reaper_sweeps_presence_and_stale_cards() {
    let hub = Hub::start_with(|a| {
        a.online_ms = 300;
        a.reap_interval_ms = 75;
        a.todo_stale_ms = 1;
        a.reap_grace_ms = 1;
        a.presence_flush_ms = 100;
    });
    let api = Api::new(&hub);
    api.ok("/register", json!({"session":"gone:p"})).await;
    let todo = api
        .ok(
            "/task",
            json!({"title":"old todo","project":"p","by":"orch"}),
        )
        .await["task"]["id"]
        .as_i64()
        .expect("id");
    let doing = api
        .ok(
            "/task",
            json!({"title":"orphan","project":"p","by":"orch","assignee":"gone:p","status":"doing"}),
        )
        .await["task"]["id"]
        .as_i64()
        .expect("id");
    // A held poll keeps its session online well past the online window.
    let held = {
        let api = api.clone();
        tokio::spawn(async move { api.read("/poll?session=held:p&since=0&wait=120").await })
    };
    let mut offline_seen = false;
    for _ in 0..200 {
        let ev = api.read("/events?type=presence.offline").await;
        if ev["events"]
            .as_array()
            .is_some_and(|e| e.iter().any(|e| e["by"] == "gone:p"))
        {
            offline_seen = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(offline_seen, "no presence.offline for gone:p");
    // Several online windows and reaper passes later, the held poll is still present.
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert!(!held.is_finished());
    let peers = api.read("/peers").await;
    let online = |s: &str| {
        peers["peers"]
            .as_array()
            .and_then(|a| a.iter().find(|p| p["session"] == s).cloned())
            .map(|p| p["online"] == true)
    };
    assert_eq!(online("held:p"), Some(true));
    assert_eq!(online("gone:p"), Some(false));
    let ev = api.read("/events?type=presence.").await;
    let held_events: Vec<&str> = ev["events"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter(|e| e["by"] == "held:p")
                .filter_map(|e| e["type"].as_str())
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(
        held_events,
        vec!["presence.online"],
        "a held poll went offline"
    );
    let id = api.send("a:p", "held:p", "release").await;
    let got = tokio::time::timeout(GUARD, held)
        .await
        .expect("held poll returned")
        .expect("held poll");
    assert_eq!(ids(&got), vec![id]);

    let todo_card = api.read(&format!("/card?id={todo}")).await;
    assert_eq!(todo_card["task"]["status"], "stale");
    assert!(
        todo_card["task"]["log"]
            .as_array()
            .is_some_and(|l| l.iter().any(|e| e["text"]
                .as_str()
                .unwrap_or("")
                .starts_with("todo aged out after")))
    );
    let doing_card = api.read(&format!("/card?id={doing}")).await;
    assert_eq!(doing_card["task"]["status"], "stale");
    assert!(
        doing_card["task"]["log"]
            .as_array()
            .is_some_and(|l| l.iter().any(|e| e["text"]
                .as_str()
                .is_some_and(|t| t.starts_with("owner offline → stale; owner last seen ")
                    && t.ends_with(" ago"))))
    );
    // A touch after going offline is a new online edge.
    api.ok("/register", json!({"session":"gone:p"})).await;
    let ev = api.read("/events?type=presence.online").await;
    let n = ev["events"]
        .as_array()
        .map(|a| a.iter().filter(|e| e["by"] == "gone:p").count())
        .unwrap_or(0);
    assert_eq!(n, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn retention_prunes_read_history_and_reports_it() {
    let hub = Hub::start_with(|a| {
        a.reap_interval_ms = 150;
        a.retention_ms = Some(1);
    });
    let api = Api::new(&hub);
    // Read history is pruned by age and reported; an unread direct message stays.
    let read_id = api.send("a:p", "r:p", "read me").await;
    api.read(&format!("/inbox?session=r:p&since={}", read_id - 1))
        .await;
    let unread = api.send("a:p", "u:p", "never read").await;
    let mut pruned = 0;
    for _ in 0..200 {
        let h = api.read("/health").await;
        pruned = h["retention"]["pruned"]["messages"].as_i64().unwrap_or(0);
        if pruned >= 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(pruned >= 1, "nothing pruned");
    assert!(ids(&api.read("/inbox?session=r:p&since=0&peek=1").await).is_empty());
    assert_eq!(
        ids(&api.read("/inbox?session=u:p&since=0&peek=1").await),
        vec![unread]
    );
    let metrics = api
        .http
        .get(format!("{}/metrics", api.base))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    assert!(!metrics.contains("trantor_pruned_total{kind=\"messages\"} 0"));
    // Ids keep counting past pruned messages.
    assert!(api.send("a:p", "r:p", "next").await > unread);
}

#[test]
fn non_loopback_bind_is_refused() {
    let tmp = tempfile::tempdir().expect("tempdir");
    for (host, auth, needle) in [
        ("0.0.0.0", "", "RELAY_AUTH=enforce"),
        ("0.0.0.0", "warn", "RELAY_AUTH=enforce"),
        // On loopback too: a mode the hub does not know is refused, never ignored.
        ("127.0.0.1", "enforced", "unknown mode"),
    ] {
        let out = std::process::Command::new(bin())
            .arg("hub")
            .env("RELAY_HOST", host)
            .env("RELAY_PORT", free_port().to_string())
            .env("RELAY_DATA_DIR", tmp.path())
            .env("RELAY_AUTH", auth)
            .output()
            .expect("run hub");
        assert_eq!(out.status.code(), Some(1), "host={host} auth={auth}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "auth={auth}: {err}");
    }
}

#[test]
fn taken_port_is_reported() {
    let hub = Hub::start();
    let tmp = tempfile::tempdir().expect("tempdir");
    let out = std::process::Command::new(bin())
        .arg("hub")
        .env("RELAY_HOST", "127.0.0.1")
        .env("RELAY_PORT", hub.port.to_string())
        .env("RELAY_DATA_DIR", tmp.path())
        .output()
        .expect("run hub");
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("already in use"));
}

/// One sample of every key format the secret scanner knows, with the kind it must be named as.
fn secret_samples() -> Vec<(&'static str, String)> {
    vec![
        (
            "anthropic-key",
            format!("sk-ant-api03-{}", "A1b2".repeat(10)),
        ),
        ("openai-key", format!("sk-proj-{}", "a1B2".repeat(10))),
        ("github-token", format!("ghp_{}", "A1b2".repeat(10))),
        ("aws-access-key", "AKIAABCDEFGHIJKLMNOP".to_string()),
        ("slack-token", "xoxb-1234567890-abcdefghij".to_string()),
        ("google-api-key", format!("AIzaSy{}", "A".repeat(33))),
        ("stripe-key", format!("sk_live_{}", "a1B2".repeat(6))),
        (
            "jwt",
            "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9P"
                .to_string(),
        ),
        (
            "private-key",
            "-----BEGIN RSA PRIVATE KEY----- MIIBOgIBAAJBAK -----END RSA PRIVATE KEY-----"
                .to_string(),
        ),
        ("hex-secret", format!("secret: {}", "ab".repeat(32))),
        ("gitlab-token", format!("glpat-{}", "xY9_".repeat(6))),
        ("huggingface-token", format!("hf_{}", "aB3".repeat(12))),
        ("npm-token", format!("npm_{}", "Ab1".repeat(13))),
        (
            "aws-secret-key",
            "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY".to_string(),
        ),
    ]
}

/// A request body with a given text in one field.
type Body = Box<dyn Fn(&str) -> Value>;

/// Every stored field the hub scans for secrets: (label, path, body carrying `text` there).
fn secret_fields(card: i64) -> Vec<(&'static str, &'static str, Body)> {
    vec![
        (
            "send text",
            "/send",
            Box::new(|t| json!({"from":"a:p","to":"b:p","text":t})),
        ),
        (
            "lesson text",
            "/lesson",
            Box::new(|t| json!({"text":t,"by":"a:p"})),
        ),
        (
            "task title",
            "/task",
            Box::new(|t| json!({"title":t,"project":"p","by":"a:p"})),
        ),
        (
            "task drill",
            "/task",
            Box::new(|t| json!({"title":"x","project":"p","drill":t})),
        ),
        (
            "task summary",
            "/task",
            Box::new(|t| json!({"title":"x","project":"p","summary":t})),
        ),
        (
            "task note",
            "/task",
            Box::new(|t| json!({"title":"x","project":"p","note":t})),
        ),
        (
            "task checklist",
            "/task",
            Box::new(|t| json!({"title":"x","project":"p","checklist":["ok",t]})),
        ),
        (
            "update title",
            "/task/update",
            Box::new(move |t| json!({"id":card,"title":t})),
        ),
        (
            "update note",
            "/task/update",
            Box::new(move |t| json!({"id":card,"note":t})),
        ),
        (
            "update drill",
            "/task/update",
            Box::new(move |t| json!({"id":card,"drill":t})),
        ),
        (
            "update summary",
            "/task/update",
            Box::new(move |t| json!({"id":card,"summary":t})),
        ),
        (
            "update checklist",
            "/task/update",
            Box::new(move |t| json!({"id":card,"checklist":[t]})),
        ),
        (
            "project brief",
            "/project",
            Box::new(|t| json!({"project":"p","brief":t})),
        ),
        (
            "phase goal",
            "/phase",
            Box::new(|t| json!({"project":"p","phase":"P1","goal":t})),
        ),
    ]
}

/// Every key format × every stored field: refused with the format named, nothing stored; the
/// same field with clean text is accepted (so a refusal is the scanner's, not a bad body's).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_secret_format_is_refused_in_every_stored_field() {
    let hub = Hub::start();
    let api = Api::new(&hub);
    let card = api
        .ok("/task", json!({"title":"target","project":"p","by":"a:p"}))
        .await["task"]["id"]
        .as_i64()
        .expect("card id");
    let samples = secret_samples();
    for (kind, sample) in &samples {
        assert_eq!(
            trantor_proto::secrets::detect(&format!("use {sample} now")),
            vec![*kind],
            "the sample for {kind}"
        );
    }
    let counts = |h: &Value| {
        (
            h["messages"].clone(),
            h["cards"].clone(),
            h["events"].clone(),
        )
    };
    for (field, path, body) in secret_fields(card) {
        let (st, v) = api.post(path, body("an ordinary line")).await;
        assert_eq!(st, 200, "{field}: clean text refused: {v}");
        for (kind, sample) in &samples {
            let before = counts(&api.read("/health").await);
            let (st, v) = api.post(path, body(&format!("use {sample} now"))).await;
            assert_eq!(st, 400, "{field} accepted a {kind}: {v}");
            assert_eq!(v["error"], "secret detected", "{field}/{kind}: {v}");
            assert_eq!(v["kinds"], json!([kind]), "{field}/{kind}: {v}");
            assert_eq!(
                counts(&api.read("/health").await),
                before,
                "{field}/{kind}: a refused write stored something"
            );
        }
    }
    // Nothing refused reached the stored documents either.
    let card = api.read(&format!("/card?id={card}")).await;
    let project = api.read("/project?project=p").await;
    for (kind, sample) in &samples {
        for doc in [&card, &project] {
            assert!(!doc.to_string().contains(sample.as_str()), "{kind} stored");
        }
    }
}

/// 1,100 idle connections to a hub started under a 1,024 soft file limit: the hub raises its
/// own limit and caps connections below it, so `/health` still answers (it used to stop
/// accepting with "too many open files").
#[test]
fn health_answers_beside_1100_idle_connections() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    use std::os::unix::process::CommandExt;
    use std::process::{Command, Stdio};
    const IDLE: usize = 1_100;
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).expect("getrlimit");
    if hard < 4_096 {
        let msg = format!("hard file limit {hard} is too low for 1,100 connections plus the hub");
        common::skip_or_fail(&msg);
        return;
    }
    // The test holds the idle sockets itself.
    if soft < 4_096 {
        setrlimit(Resource::RLIMIT_NOFILE, 4_096.min(hard), hard).expect("raise own limit");
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let port = free_port();
    let log = std::fs::File::create(dir.path().join("hub.log")).expect("log");
    let mut cmd = Command::new(bin());
    cmd.arg("hub")
        .env("RELAY_PORT", port.to_string())
        .env("RELAY_HOST", "127.0.0.1")
        .env("RELAY_DATA_DIR", dir.path())
        .env("HOME", dir.path())
        // Idle connections must outlive the test, so only the fd limit is under test here.
        .env("TRANTOR_HEADER_TIMEOUT_MS", "600000")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log);
    // SAFETY: setrlimit is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            setrlimit(Resource::RLIMIT_NOFILE, 1_024, hard).map_err(std::io::Error::from)
        });
    }
    let mut child = common::GroupChild::spawn(cmd);
    common::wait_until("hub listening", Duration::from_secs(15), || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    let mut idle = Vec::with_capacity(IDLE);
    for _ in 0..IDLE {
        idle.push(std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect"));
    }
    let (code, health) =
        common::hub_request(port, "GET", "/health", None).expect("/health answers");
    assert_eq!(code, 200, "{health}");
    assert_eq!(health["ok"], true);
    drop(idle);
    child.kill_group();
}

/// The documented order — the seat moves its card to testing, the person closes it — keeps the
/// seat as the card's worker and shows the person as its closer (issue 21).
#[tokio::test]
async fn a_person_closing_a_seats_card_keeps_the_seat_as_worker_and_shows_the_closer() {
    let hub = Hub::start();
    let api = Api::new(&hub);
    let t = api
        .ok(
            "/task",
            json!({"title":"fix","project":"p","by":"me:p","assignee":"claude:p",
                   "drill":"python -m pytest -q passes"}),
        )
        .await["task"]
        .clone();
    let id = t["id"].as_i64().expect("id");
    api.ok(
        "/task/update",
        json!({"id":id,"status":"doing","by":"claude:p"}),
    )
    .await;
    api.ok(
        "/task/update",
        json!({"id":id,"status":"testing","by":"claude:p"}),
    )
    .await;
    let r = api
        .ok(
            "/task/update",
            json!({"id":id,"status":"done","by":"me:p","note":"ran python -m pytest -q: 467 passed"}),
        )
        .await;
    assert_eq!(r["task"]["workedBy"], "claude:p", "{r}");
    assert_eq!(r["task"]["closedBy"], "me:p", "{r}");
    let r = api
        .ok(
            "/task/update",
            json!({"id":id,"status":"doing","by":"codex:p"}),
        )
        .await;
    assert_eq!(r["task"]["workedBy"], "codex:p", "{r}");
    assert!(r["task"].get("closedBy").is_none(), "{r}");
}

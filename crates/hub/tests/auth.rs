//! Signed identity against the real hub in process (`trantor_hub::serve` on port 0 over a
//! temporary SQLite store), driven with raw HTTP/1.1 so every header is under the test's
//! control. Each attack asserts the status, the reason, and that the store did not change.

use serde_json::{Value, json};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use trantor_hub::{Config, HubArgs};
use trantor_proto::auth::{self, Ed25519Key, InstanceKey, SKEW_MS};
use trantor_proto::now_ms;
use trantor_store::Store;
use trantor_store_sqlite::SqliteStore;

/// Only keeps a broken hub from hanging the suite (never a timing bound).
const GUARD: Duration = Duration::from_secs(30);
const BOOT: &str = "boot-0123456789abcdef";

/// The shared harness's in-process hub and its store (to check what a refusal left alone).
struct TestHub {
    port: u16,
    store: SqliteStore,
    hub: trantor_testkit::Hub,
}

impl TestHub {
    async fn stop(self) {
        self.hub.stop()
    }

    /// Everything a refused request must leave alone: row counts and every stored document.
    async fn snapshot(&self) -> String {
        self.store
            .read(|tx| {
                let c = tx.counts()?;
                let kv = tx.kv_prefix("")?;
                Ok(format!(
                    "{} {} {} {} {:?}",
                    c.messages, c.peers, c.cards, c.events, kv
                ))
            })
            .await
            .expect("snapshot")
    }
}

async fn start(auth: &str, tweak: impl FnOnce(&mut HubArgs)) -> TestHub {
    let hub = trantor_testkit::Hub::start_with(|a| {
        a.presence_flush_ms = 600_000;
        a.reap_interval_ms = 3_600_000;
        a.duty_tick_ms = 600_000;
        a.auth = auth.into();
        a.bootstrap_token = Some(BOOT.into());
        tweak(a);
    });
    TestHub {
        port: hub.port,
        store: hub.store().clone(),
        hub,
    }
}

/// Send a request with exactly these extra headers; the status and JSON body come back.
async fn send(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(String, String)],
    body: &str,
) -> (u16, Value) {
    let fut = async {
        let mut s = TcpStream::connect(("127.0.0.1", port))
            .await
            .expect("connect");
        let mut head = format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n");
        for (k, v) in headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        let req = format!(
            "{head}Content-Type: application/json\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        s.write_all(req.as_bytes()).await.expect("write");
        let mut buf = Vec::new();
        let _ = s.read_to_end(&mut buf).await;
        buf
    };
    let buf = tokio::time::timeout(GUARD, fut)
        .await
        .expect("reply in time");
    let text = String::from_utf8_lossy(&buf).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    let v = serde_json::from_str(body).unwrap_or_else(|_| Value::String(body.to_string()));
    (status, v)
}

fn pairs(h: &auth::SignedHeaders) -> Vec<(String, String)> {
    h.headers
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

/// A key and the name it enrolls under.
struct Seat {
    key: Ed25519Key,
    name: String,
}

impl Seat {
    fn new(name: &str) -> Seat {
        Seat {
            key: auth::generate_key(),
            name: name.into(),
        }
    }

    fn pubkey(&self) -> String {
        auth::pubkey_hex(&self.key)
    }

    async fn call(
        &self,
        port: u16,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> (u16, Value) {
        let b = body.map(Value::to_string).unwrap_or_default();
        let h = auth::sign_request(&self.key, method, path, b.as_bytes());
        send(port, method, path, &pairs(&h), &b).await
    }

    async fn get(&self, port: u16, path: &str) -> (u16, Value) {
        self.call(port, "GET", path, None).await
    }

    async fn post(&self, port: u16, path: &str, body: Value) -> (u16, Value) {
        self.call(port, "POST", path, Some(&body)).await
    }

    async fn enroll(&self, port: u16, extra: Value) -> (u16, Value) {
        let mut b = json!({"name": self.name, "kind": "agent"});
        if let (Some(m), Value::Object(e)) = (b.as_object_mut(), extra) {
            m.extend(e);
        }
        self.post(port, "/enroll", b).await
    }
}

fn msg(from: &str, to: &str, text: &str) -> Value {
    json!({"from": from, "to": to, "text": text})
}

/// An owner enrolled with the bootstrap token, and a seat of project `p` enrolled by TOFU.
async fn crew(hub: &TestHub) -> (Seat, Seat) {
    let owner = Seat::new("op");
    let (st, v) = owner
        .enroll(hub.port, json!({"kind": "human", "token": BOOT}))
        .await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["scopes"], json!([{"project": "*", "role": "owner"}]));
    let seat = Seat::new("claude:p");
    let (st, v) = seat.enroll(hub.port, json!({})).await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["scopes"], json!([{"project": "p", "role": "write"}]));
    assert_eq!(v["identity"]["pubkey"], seat.pubkey());
    (owner, seat)
}

/// Assert a refusal: status, reason (substring) and an unchanged store.
async fn refused(hub: &TestHub, got: (u16, Value), status: u16, reason: &str, before: &str) {
    assert_eq!(got.0, status, "{reason}: {}", got.1);
    let err = got.1["error"].as_str().unwrap_or_default();
    assert!(err.contains(reason), "want {reason:?}, got {err:?}");
    assert_eq!(hub.snapshot().await, before, "{reason}: the store changed");
}

/// Authorization reads a card id as the route does: `{"id": 3.0}` is card 3 to both, so a
/// write-scoped seat of project p cannot move a card of project q by sending its id as a float.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_card_id_sent_as_a_float_is_fenced_like_an_integer() {
    let hub = start("enforce", |_| {}).await;
    let port = hub.port;
    let (owner, seat) = crew(&hub).await;
    let (st, v) = owner
        .post(
            port,
            "/task",
            json!({"project": "q", "title": "theirs", "by": "op"}),
        )
        .await;
    assert_eq!(st, 200, "{v}");
    let id = v["task"]["id"].as_i64().expect("card id");
    let before = hub.snapshot().await;
    for sent in [json!(id), json!(id as f64), json!(id.to_string())] {
        let got = seat
            .post(
                port,
                "/task/update",
                json!({"id": sent, "status": "doing", "by": "claude:p"}),
            )
            .await;
        refused(&hub, got, 403, "forbidden", &before).await;
    }
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enforce_refuses_every_attack_and_changes_nothing() {
    let hub = start("enforce", |_| {}).await;
    let port = hub.port;
    let (owner, seat) = crew(&hub).await;
    let (st, v) = seat
        .post(port, "/send", msg("claude:p", "codex:p", "hello"))
        .await;
    assert_eq!(st, 200, "{v}");
    let before = hub.snapshot().await;
    let body = msg("claude:p", "codex:p", "again").to_string();

    // Unsigned.
    let got = send(port, "POST", "/send", &[], &body).await;
    refused(&hub, got, 401, "signature required", &before).await;
    let got = send(port, "GET", "/peers", &[], "").await;
    refused(&hub, got, 401, "signature required", &before).await;

    // A signature by another key under the seat's pubkey.
    let other = auth::generate_key();
    let mut h = auth::sign_request(&other, "POST", "/send", body.as_bytes());
    h.headers[0].1 = seat.pubkey();
    let got = send(port, "POST", "/send", &pairs(&h), &body).await;
    refused(&hub, got, 401, "bad-signature", &before).await;

    // The body changed after signing.
    let h = auth::sign_request(&seat.key, "POST", "/send", body.as_bytes());
    let tampered = body.replace("again", "AGAIN");
    let got = send(port, "POST", "/send", &pairs(&h), &tampered).await;
    refused(&hub, got, 401, "bad-signature", &before).await;

    // A signature made for another path (and for another query).
    let h = auth::sign_request(&seat.key, "POST", "/task", body.as_bytes());
    let got = send(port, "POST", "/send", &pairs(&h), &body).await;
    refused(&hub, got, 401, "bad-signature", &before).await;
    let h = auth::sign_request(&seat.key, "GET", "/inbox?session=claude:p&since=0", b"");
    let got = send(
        port,
        "GET",
        "/inbox?session=claude:p&since=5",
        &pairs(&h),
        "",
    )
    .await;
    refused(&hub, got, 401, "bad-signature", &before).await;

    // A stale and a future ts.
    for ts in [now_ms() - SKEW_MS - 5_000, now_ms() + SKEW_MS + 5_000] {
        let h = auth::sign_request_at(
            &seat.key,
            "POST",
            "/send",
            body.as_bytes(),
            ts,
            &auth::new_nonce(),
        );
        let got = send(port, "POST", "/send", &pairs(&h), &body).await;
        refused(&hub, got, 401, "stale", &before).await;
    }

    // A replayed nonce: the first use lands, the replay changes nothing.
    let h = auth::sign_request(&seat.key, "POST", "/send", body.as_bytes());
    let (st, v) = send(port, "POST", "/send", &pairs(&h), &body).await;
    assert_eq!(st, 200, "{v}");
    let before = hub.snapshot().await;
    let got = send(port, "POST", "/send", &pairs(&h), &body).await;
    refused(&hub, got, 401, "replay", &before).await;

    // An unknown key.
    let stranger = Seat::new("claude:p");
    let got = stranger
        .post(port, "/send", msg("claude:p", "codex:p", "x"))
        .await;
    refused(&hub, got, 401, "unknown identity", &before).await;

    // A forged `from`.
    let got = seat
        .post(port, "/send", msg("codex:p", "claude:p", "x"))
        .await;
    refused(&hub, got, 403, "from must match signer", &before).await;
    let got = seat
        .post(
            port,
            "/delivered",
            json!({"session": "codex:p", "upTo": 99}),
        )
        .await;
    refused(&hub, got, 403, "session must match signer", &before).await;
    // A turn's cost booked on another seat (docs/protocol.md §7.6).
    let got = seat
        .post(
            port,
            "/turns",
            json!({"session": "codex:p", "instance": "i", "turn": 1, "project": "p"}),
        )
        .await;
    refused(&hub, got, 403, "session must match signer", &before).await;
    // Naming a credential needs write on every project (docs/protocol.md §7.7).
    let got = seat
        .post(
            port,
            "/credentials",
            json!({"name": "work", "agent": "claude"}),
        )
        .await;
    refused(&hub, got, 403, "forbidden", &before).await;

    // Reading another seat's inbox (or long-polling or streaming it).
    let got = seat.get(port, "/inbox?session=codex:p&since=0").await;
    refused(&hub, got, 403, "forbidden", &before).await;
    let got = seat.get(port, "/poll?session=codex:p&since=0&wait=0").await;
    refused(&hub, got, 403, "forbidden", &before).await;

    // A write-scoped seat acting on another project: a card there, a message to a seat there,
    // and an owner-only route.
    let got = seat
        .post(
            port,
            "/task",
            json!({"project": "q", "title": "t", "by": "claude:p"}),
        )
        .await;
    refused(&hub, got, 403, "forbidden", &before).await;
    let got = seat
        .post(
            port,
            "/send",
            json!({"from": "claude:p", "to": "codex:q", "text": "x", "project": "p"}),
        )
        .await;
    refused(&hub, got, 403, "cross-project: p may not act on q", &before).await;
    let got = seat
        .post(
            port,
            "/invite",
            json!({"scopes": [{"project": "p", "role": "write"}]}),
        )
        .await;
    refused(&hub, got, 403, "forbidden", &before).await;
    let got = seat.get(port, "/identities").await;
    refused(&hub, got, 403, "forbidden", &before).await;

    // A linked pair may talk across the fence.
    let (st, v) = owner
        .post(
            port,
            "/policy",
            json!({"link": {"projects": ["p", "q"], "reason": "shared"}}),
        )
        .await;
    assert_eq!(st, 200, "link: {v}");
    let (st, v) = seat
        .post(
            port,
            "/send",
            json!({"from": "claude:p", "to": "codex:q", "text": "x", "project": "p"}),
        )
        .await;
    assert_eq!(st, 200, "linked send: {v}");

    // A revoked key: refused from its next request on, and cannot enroll again.
    let (st, v) = owner
        .post(port, "/identity/revoke", json!({"name": "claude:p"}))
        .await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["revoked"][0]["pubkey"], seat.pubkey());
    let before = hub.snapshot().await;
    let got = seat
        .post(port, "/send", msg("claude:p", "codex:p", "x"))
        .await;
    refused(&hub, got, 401, "revoked", &before).await;
    let got = seat.enroll(port, json!({})).await;
    refused(&hub, got, 403, "revoked", &before).await;

    // A foreign Origin or Host, even correctly signed.
    let h = auth::sign_request(&owner.key, "GET", "/peers", b"");
    let mut with_origin = pairs(&h);
    with_origin.push(("Origin".into(), "http://evil.example".into()));
    let got = send(port, "GET", "/peers", &with_origin, "").await;
    refused(&hub, got, 403, "web pages", &before).await;
    let b = msg("op", "all", "x").to_string();
    let h = auth::sign_request(&owner.key, "POST", "/send", b.as_bytes());
    let mut cross = pairs(&h);
    cross.push(("Sec-Fetch-Site".into(), "cross-site".into()));
    let got = send(port, "POST", "/send", &cross, &b).await;
    refused(&hub, got, 403, "cross-site", &before).await;
    let fut = async {
        let mut s = TcpStream::connect(("127.0.0.1", port))
            .await
            .expect("connect");
        let h = auth::sign_request(&owner.key, "GET", "/peers", b"");
        let mut req =
            "GET /peers HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n".to_string();
        for (k, v) in pairs(&h) {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        req.push_str("\r\n");
        s.write_all(req.as_bytes()).await.expect("write");
        let mut buf = Vec::new();
        let _ = s.read_to_end(&mut buf).await;
        String::from_utf8_lossy(&buf).into_owned()
    };
    let text = tokio::time::timeout(GUARD, fut).await.expect("reply");
    assert!(text.starts_with("HTTP/1.1 403"), "{text}");
    assert!(text.contains("not this hub's name"), "{text}");
    assert!(
        !text
            .to_ascii_lowercase()
            .contains("access-control-allow-origin: *")
    );
    assert_eq!(hub.snapshot().await, before);
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invites_and_the_bootstrap_token() {
    let hub = start("enforce", |a| a.enroll = "invite".into()).await;
    let port = hub.port;
    let before = hub.snapshot().await;

    // A wrong bootstrap token is no invite either; TOFU is off.
    let owner = Seat::new("op");
    let got = owner
        .enroll(
            port,
            json!({"kind": "human", "token": "boot-0123456789abcdeX"}),
        )
        .await;
    refused(&hub, got, 403, "invalid invite", &before).await;
    let got = owner.enroll(port, json!({"kind": "human"})).await;
    refused(&hub, got, 403, "tofu enrollment refused", &before).await;
    // An unsigned enrollment.
    let got = send(port, "POST", "/enroll", &[], r#"{"name":"x"}"#).await;
    refused(&hub, got, 401, "unsigned", &before).await;
    // A bad kind.
    let got = owner
        .enroll(port, json!({"kind": "robot", "token": BOOT}))
        .await;
    refused(&hub, got, 400, "kind must be one of", &before).await;

    let (st, v) = owner
        .enroll(port, json!({"kind": "human", "token": BOOT}))
        .await;
    assert_eq!(st, 200, "{v}");
    // Re-enrolling is idempotent.
    let (st, v2) = owner
        .enroll(port, json!({"kind": "human", "token": BOOT}))
        .await;
    assert_eq!((st, &v2["identity"]), (200, &v["identity"]));
    // The bootstrap token works once: a second key is refused.
    let second = Seat::new("op2");
    let before = hub.snapshot().await;
    let got = second
        .enroll(port, json!({"kind": "human", "token": BOOT}))
        .await;
    refused(&hub, got, 403, "invalid invite", &before).await;

    // An invite enrolls a remote seat with its scopes, once.
    let (st, inv) = owner
        .post(
            port,
            "/invite",
            json!({"scopes": [{"project": "p", "role": "write"}], "ttlSec": 300}),
        )
        .await;
    assert_eq!(st, 200, "{inv}");
    let token = inv["token"].as_str().unwrap_or_default().to_string();
    assert_eq!(token.len(), 48);
    let seat = Seat::new("claude:p");
    let (st, v) = seat.enroll(port, json!({"token": token})).await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["scopes"], json!([{"project": "p", "role": "write"}]));
    let reuser = Seat::new("codex:p");
    let before = hub.snapshot().await;
    let got = reuser.enroll(port, json!({"token": token})).await;
    refused(&hub, got, 403, "invalid invite", &before).await;
    // The store keeps only the token's hash.
    assert!(!before.contains(&token));

    // An expired invite.
    let (st, inv) = owner
        .post(
            port,
            "/invite",
            json!({"scopes": [{"project": "p", "role": "read"}], "ttlSec": 1}),
        )
        .await;
    assert_eq!(st, 200, "{inv}");
    let token = inv["token"].as_str().unwrap_or_default().to_string();
    let expires = inv["expiresAt"].as_i64().unwrap_or(i64::MAX);
    let deadline = tokio::time::Instant::now() + GUARD;
    while now_ms() <= expires {
        assert!(tokio::time::Instant::now() < deadline, "clock stuck");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let before = hub.snapshot().await;
    let got = reuser.enroll(port, json!({"token": token})).await;
    refused(&hub, got, 403, "invalid invite", &before).await;

    // An invite without scopes is a 400.
    let (st, v) = owner.post(port, "/invite", json!({"scopes": []})).await;
    assert_eq!(st, 400, "{v}");

    // The owner lists identities; revoked ones carry revokedAt.
    let (st, v) = owner.get(port, "/identities").await;
    assert_eq!(st, 200, "{v}");
    let names: Vec<&str> = v["identities"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|i| i["name"].as_str())
        .collect();
    assert_eq!(names, ["op", "claude:p"]);
    assert!(v.to_string().find("privkey").is_none());
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instance_keys_act_as_their_durable_identity() {
    let hub = start("enforce", |_| {}).await;
    let port = hub.port;
    let (_owner, seat) = crew(&hub).await;
    let inst = InstanceKey::mint(&seat.key, "mcp-test", now_ms());
    let b = msg("claude:p", "codex:p", "from the mcp server").to_string();
    let h = inst.sign_request("POST", "/send", b.as_bytes());
    let (st, v) = send(port, "POST", "/send", &pairs(&h), &b).await;
    assert_eq!(st, 200, "{v}");
    // The from binding holds for the instance too.
    let before = hub.snapshot().await;
    let forged = msg("codex:p", "claude:p", "x").to_string();
    let h = inst.sign_request("POST", "/send", forged.as_bytes());
    let got = send(port, "POST", "/send", &pairs(&h), &forged).await;
    refused(&hub, got, 403, "from must match signer", &before).await;
    // An endorsement by a key that is not the durable one.
    let fake = InstanceKey::mint(&auth::generate_key(), "mcp-test", now_ms());
    let mut h = fake.sign_request("POST", "/send", b.as_bytes());
    for (k, v) in h.headers.iter_mut() {
        if *k == auth::HDR_DURABLE {
            *v = seat.pubkey();
        }
    }
    let got = send(port, "POST", "/send", &pairs(&h), &b).await;
    refused(&hub, got, 401, "bad endorsement", &before).await;
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_are_filtered_by_scope() {
    let hub = start("enforce", |_| {}).await;
    let port = hub.port;
    let (owner, seat) = crew(&hub).await;
    let q = Seat::new("codex:q");
    let (st, _) = q.enroll(port, json!({})).await;
    assert_eq!(st, 200);
    for (s, p) in [(&seat, "p"), (&q, "q")] {
        let (st, v) = s
            .post(port, "/register", json!({"session": s.name, "project": p}))
            .await;
        assert_eq!(st, 200, "{v}");
        let (st, v) = s
            .post(
                port,
                "/task",
                json!({"project": p, "title": format!("card of {p}"), "by": s.name}),
            )
            .await;
        assert_eq!(st, 200, "{v}");
        let (st, v) = s
            .post(port, "/send", msg(&s.name, "all", &format!("news of {p}")))
            .await;
        assert_eq!(st, 200, "{v}");
    }
    let projects = |v: &Value, field: &str| -> Vec<String> {
        let mut ps: Vec<String> = v[field]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| r["project"].as_str().map(str::to_string))
            .collect();
        ps.sort();
        ps.dedup();
        ps
    };
    let (_, v) = seat.get(port, "/tasks").await;
    assert_eq!(projects(&v, "tasks"), ["p"]);
    let (_, v) = seat.get(port, "/peers").await;
    assert_eq!(projects(&v, "peers"), ["p"]);
    assert_eq!(v["authMode"], "enforce");
    let (_, v) = seat.get(port, "/recent").await;
    assert_eq!(projects(&v, "messages"), ["p"]);
    let (_, v) = seat.get(port, "/inbox?session=claude:p&since=0").await;
    assert!(
        v["messages"]
            .as_array()
            .is_some_and(|m| m.iter().all(|m| m["project"] == "p")),
        "{v}"
    );
    let (_, v) = owner.get(port, "/tasks").await;
    assert_eq!(projects(&v, "tasks"), ["p", "q"]);
    // A policy link makes the other project's peers discoverable, not its cards readable.
    let (st, _) = owner
        .post(
            port,
            "/policy",
            json!({"link": {"projects": ["p", "q"], "reason": "pair"}}),
        )
        .await;
    assert_eq!(st, 200);
    let (_, v) = seat.get(port, "/peers").await;
    assert_eq!(projects(&v, "peers"), ["p", "q"]);
    let (_, v) = seat.get(port, "/tasks").await;
    assert_eq!(projects(&v, "tasks"), ["p"]);
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warn_mode_passes_strangers_and_holds_signers_to_scope() {
    let hub = start("warn", |_| {}).await;
    let port = hub.port;
    let (_owner, seat) = crew(&hub).await;
    // Unsigned and unknown callers pass, with a logged warning.
    let b = msg("anyone:x", "claude:p", "hi").to_string();
    let (st, v) = send(port, "POST", "/send", &[], &b).await;
    assert_eq!(st, 200, "{v}");
    let stranger = Seat::new("who:x");
    let (st, v) = stranger
        .post(port, "/send", msg("who:x", "claude:p", "hi"))
        .await;
    assert_eq!(st, 200, "{v}");
    // An enrolled signer is held to its scopes.
    let before = hub.snapshot().await;
    let got = seat
        .post(
            port,
            "/task",
            json!({"project": "q", "title": "t", "by": "claude:p"}),
        )
        .await;
    refused(&hub, got, 403, "forbidden", &before).await;
    // Owner routes need a signed owner even in warn mode.
    let got = send(port, "GET", "/identities", &[], "").await;
    refused(&hub, got, 401, "signature required", &before).await;
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn off_mode_ignores_signatures() {
    let hub = start("off", |_| {}).await;
    let port = hub.port;
    let b = msg("a:p", "b:p", "hi").to_string();
    let mut h = auth::sign_request(&auth::generate_key(), "POST", "/nothing", b"x");
    h.headers[1].1 = "garbage".into();
    let (st, v) = send(port, "POST", "/send", &pairs(&h), &b).await;
    assert_eq!(st, 200, "{v}");
    let (st, v) = send(port, "GET", "/health", &[], "").await;
    assert_eq!((st, v["authMode"].as_str()), (200, Some("off")), "{v}");
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_loopback_bind_needs_invites() {
    // Bound for other machines (enforce is required for that): no trust on first use.
    let hub = start("enforce", |a| a.host = "0.0.0.0".into()).await;
    let port = hub.port;
    let before = hub.snapshot().await;
    let seat = Seat::new("claude:p");
    let got = seat.enroll(port, json!({})).await;
    refused(&hub, got, 403, "tofu enrollment refused", &before).await;
    let got = send(port, "GET", "/peers", &[], "").await;
    refused(&hub, got, 401, "signature required", &before).await;
    let owner = Seat::new("op");
    let (st, v) = owner
        .enroll(port, json!({"kind": "human", "token": BOOT}))
        .await;
    assert_eq!(st, 200, "{v}");
    let (st, inv) = owner
        .post(
            port,
            "/invite",
            json!({"scopes": [{"project": "p", "role": "write"}]}),
        )
        .await;
    assert_eq!(st, 200, "{inv}");
    let (st, v) = seat.enroll(port, json!({"token": inv["token"]})).await;
    assert_eq!(st, 200, "{v}");
    let (st, v) = seat
        .post(port, "/send", msg("claude:p", "all", "hello"))
        .await;
    assert_eq!(st, 200, "{v}");
    // Without enforce such a bind is refused at start-up.
    for mode in ["off", "warn"] {
        let a = HubArgs {
            host: "0.0.0.0".into(),
            auth: mode.into(),
            data_dir: Some(std::env::temp_dir()),
            ..HubArgs::default()
        };
        let err = Config::from_args(&a)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("RELAY_AUTH=enforce"), "{mode}: {err}");
    }
    hub.stop().await;
}

/// A tool the TLS test needs: present, or a visible SKIP (a failure under `CI=true`).
fn have(tool: &str) -> bool {
    let ok = std::process::Command::new(tool)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
        || std::process::Command::new(tool)
            .arg("version")
            .output()
            .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var("CI").ok().as_deref() != Some("true"),
            "{tool} is required under CI"
        );
        eprintln!("SKIP: {tool} not installed");
    }
    ok
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_serves_https_with_the_given_certificate() {
    if !have("openssl") || !have("curl") {
        return;
    }
    let certs = tempfile::tempdir().expect("tempdir");
    let (cert, key) = (certs.path().join("cert.pem"), certs.path().join("key.pem"));
    let out = std::process::Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
        ])
        .args(["-nodes", "-days", "2", "-subj", "/CN=trantor-test"])
        .args(["-addext", "subjectAltName=IP:127.0.0.1"])
        .args(["-addext", "basicConstraints=critical,CA:FALSE"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("openssl");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let hub = start("enforce", |a| {
        a.tls_cert = Some(cert.clone());
        a.tls_key = Some(key.clone());
    })
    .await;
    let port = hub.port;
    let curl = |path: &str| {
        let (cert, url) = (cert.clone(), format!("https://127.0.0.1:{port}{path}"));
        tokio::task::spawn_blocking(move || {
            std::process::Command::new("curl")
                .args(["-sS", "--max-time", "20", "--cacert"])
                .arg(&cert)
                .arg(url)
                .output()
                .expect("curl")
        })
    };
    let out = curl("/health").await.expect("join");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("health JSON over TLS");
    assert_eq!(v["authMode"], "enforce");
    // Unsigned over TLS is still refused; plain HTTP to the TLS port gets no HTTP answer.
    let out = curl("/peers").await.expect("join");
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(v["error"], "signature required");
    let (st, _) = send(port, "GET", "/health", &[], "").await;
    assert_eq!(st, 0, "plain HTTP must not be served on a TLS port");
    hub.stop().await;
    // Half a TLS configuration is refused.
    let a = HubArgs {
        tls_cert: Some(cert),
        data_dir: Some(std::env::temp_dir()),
        ..HubArgs::default()
    };
    assert!(Config::from_args(&a).is_err());
}

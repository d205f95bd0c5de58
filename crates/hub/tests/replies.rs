//! The typed replies of `/`, `/health`, `/card`, `GET /phase`, `/overseer/duty`,
//! `/duty/failure` and `/catchup`, in process (`trantor_hub::serve`
//! on port 0): each reply has exactly the fields its `trantor_proto` type documents in
//! `/openapi.json`, and is written with its keys in name order, byte for byte as the hub wrote
//! these replies before they were typed (the events and messages inside `/card` and `/catchup`
//! excepted: they are written as `/events` and `/inbox` write them).

use serde_json::{Value, json};
use std::collections::BTreeSet;

/// One request with `Connection: close`; the status and the raw body.
async fn request(port: u16, method: &str, path: &str, body: &str) -> (u16, String) {
    let headers = [
        ("Accept", "application/json"),
        ("Content-Type", "application/json"),
    ];
    let reply =
        trantor_testkit::request(port, method, path, &headers, body.as_bytes()).expect("reply");
    (reply.status, reply.text())
}

/// The schema `s` points at, `$ref`s into `components/schemas` followed.
fn resolve<'a>(doc: &'a Value, s: &'a Value) -> &'a Value {
    match s.get("$ref").and_then(Value::as_str) {
        Some(r) => {
            let name = r.rsplit('/').next().unwrap_or_default();
            resolve(doc, &doc["components"]["schemas"][name])
        }
        None => s,
    }
}

/// For a reply documented as one of several shapes (`anyOf`/`oneOf`, e.g. `/catchup`'s session
/// and project digests), the shape whose fields the reply has; otherwise `s` itself.
fn branch<'a>(doc: &'a Value, s: &'a Value, reply: &Value) -> &'a Value {
    let Some(alts) = s
        .get("anyOf")
        .or_else(|| s.get("oneOf"))
        .and_then(Value::as_array)
    else {
        return s;
    };
    let alts: Vec<&Value> = alts.iter().map(|a| resolve(doc, a)).collect();
    alts.iter()
        .find(|a| keys(&a["properties"]) == keys(reply))
        .or(alts.first())
        .copied()
        .unwrap_or(s)
}

/// The keys of the top-level object in `raw`, in the order they are written.
fn top_keys(raw: &str) -> Vec<String> {
    let (mut depth, mut in_str, mut esc, mut cur) = (0usize, false, false, None::<String>);
    let mut keys = Vec::new();
    let mut last_str = String::new();
    for ch in raw.chars() {
        if in_str {
            match (esc, ch) {
                (true, _) => esc = false,
                (false, '\\') => esc = true,
                (false, '"') => {
                    in_str = false;
                    last_str = cur.take().unwrap_or_default();
                    continue;
                }
                _ => {}
            }
            if let Some(c) = cur.as_mut() {
                c.push(ch);
            }
            continue;
        }
        match ch {
            '"' => {
                in_str = true;
                cur = Some(String::new());
            }
            ':' if depth == 1 => keys.push(std::mem::take(&mut last_str)),
            '{' | '[' => depth += 1,
            '}' | ']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    keys
}

fn keys(v: &Value) -> BTreeSet<String> {
    v.as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default()
}

/// The reply's fields are the documented ones (at the top and in `nested` objects); with
/// `exact`, its bytes are its keys in name order, compact — as `json!` literals wrote them.
fn check(doc: &Value, path: &str, raw: &str, nested: &[&str], exact: bool) -> Value {
    check_op(doc, "get", path, raw, nested, exact)
}

/// [`check`] for the `method` operation of `path`.
fn check_op(
    doc: &Value,
    method: &str,
    path: &str,
    raw: &str,
    nested: &[&str],
    exact: bool,
) -> Value {
    let v: Value = serde_json::from_str(raw).unwrap_or_else(|e| panic!("{path}: {e}: {raw}"));
    if exact {
        assert_eq!(
            serde_json::to_string(&v).expect("json"),
            raw,
            "{path}: keys in name order"
        );
    }
    let ok =
        &doc["paths"][path][method]["responses"]["200"]["content"]["application/json"]["schema"];
    let schema = branch(doc, resolve(doc, ok), &v);
    assert_eq!(
        keys(&v),
        keys(&schema["properties"]),
        "{path}: reply fields vs /openapi.json"
    );
    for field in nested {
        let sub = resolve(doc, &schema["properties"][field]);
        assert_eq!(
            keys(&v[field]),
            keys(&sub["properties"]),
            "{path} {field}: fields vs /openapi.json"
        );
    }
    v
}

#[tokio::test]
async fn typed_replies_match_their_documented_shapes_byte_for_byte() {
    let hub = trantor_testkit::Hub::start();
    let port = hub.port;

    let (st, doc) = request(port, "GET", "/openapi.json", "").await;
    assert_eq!(st, 200, "{doc}");
    let doc: Value = serde_json::from_str(&doc).expect("openapi");

    let (st, raw) = request(port, "GET", "/", "").await;
    assert_eq!(st, 200, "{raw}");
    let banner = check(&doc, "/", &raw, &[], true);
    assert_eq!(banner["docs"], "/openapi.json");

    let (st, raw) = request(port, "GET", "/health", "").await;
    assert_eq!(st, 200, "{raw}");
    let health = check(&doc, "/health", &raw, &["persist", "retention"], true);
    assert_eq!(health["persist"]["lastErrorAt"], Value::Null);

    let goal = json!({"project": "p", "phase": "build", "goal": "ship it", "by": "a:p"});
    let (st, raw) = request(port, "POST", "/phase", &goal.to_string()).await;
    assert_eq!(st, 200, "{raw}");
    let (st, raw) = request(port, "GET", "/phase?project=p", "").await;
    assert_eq!(st, 200, "{raw}");
    let phases = check(&doc, "/phase", &raw, &[], true);
    let item = resolve(
        &doc,
        &resolve(
            &doc,
            &doc["paths"]["/phase"]["get"]["responses"]["200"]["content"]["application/json"]["schema"],
        )["properties"]["phases"]["items"],
    );
    assert_eq!(keys(&phases["phases"][0]), keys(&item["properties"]));
    assert_eq!(phases["phases"][0]["goal"], "ship it");

    let card = json!({"title": "a card", "project": "p", "by": "a:p"});
    let (st, raw) = request(port, "POST", "/task", &card.to_string()).await;
    assert_eq!(st, 200, "{raw}");
    let id = serde_json::from_str::<Value>(&raw).expect("task")["task"]["id"].clone();
    let (st, raw) = request(port, "GET", &format!("/card?id={id}"), "").await;
    assert_eq!(st, 200, "{raw}");
    let card = check(&doc, "/card", &raw, &[], false);
    let written = top_keys(&raw);
    assert!(
        written.is_sorted(),
        "/card: keys in name order: {written:?}"
    );
    assert_eq!(card["task"]["id"], id);

    let appoint = json!({"session": "duty:p"});
    let (st, raw) = request(port, "POST", "/overseer/duty", &appoint.to_string()).await;
    assert_eq!(st, 200, "{raw}");
    let v = check_op(&doc, "post", "/overseer/duty", &raw, &[], true);
    assert_eq!(
        (v["appointed"].clone(), v["overriddenBy"].clone()),
        (json!("duty:p"), Value::Null)
    );
    let failure = json!({"recipient": "bob:p", "kind": "skipped-nudge", "detail": "no nudge",
                         "by": "duty:p"});
    let (st, raw) = request(port, "POST", "/duty/failure", &failure.to_string()).await;
    assert_eq!(st, 200, "{raw}");
    let v = check_op(&doc, "post", "/duty/failure", &raw, &["failure"], true);
    assert_eq!(v["failure"]["project"], "p");
    // The recorded failure is the one /health lists.
    let (_, raw) = request(port, "GET", "/health", "").await;
    let health: Value = serde_json::from_str(&raw).expect("health");
    assert_eq!(health["duty"]["failures"][0], v["failure"], "{raw}");

    let hello = json!({"from": "b:p", "to": "a:p", "text": "hello"});
    let (st, raw) = request(port, "POST", "/send", &hello.to_string()).await;
    assert_eq!(st, 200, "{raw}");
    let (st, raw) = request(port, "GET", "/catchup?session=a:p&since=0", "").await;
    assert_eq!(st, 200, "{raw}");
    let v = check(&doc, "/catchup", &raw, &["contracts", "since"], false);
    let written = top_keys(&raw);
    assert!(
        written.is_sorted(),
        "/catchup: keys in name order: {written:?}"
    );
    assert_eq!(v["messages"][0]["text"], "hello", "{raw}");
    assert!(v["board"]["todo"].as_i64() >= Some(1), "{raw}");

    hub.stop();
}

//! Named credentials over HTTP, in process: the hub keeps a name, an agent and a state, refuses
//! any other field (a secret has nowhere to go), updates by name and removes once.

use serde_json::{Value, json};

async fn post(base: &str, path: &str, body: Value) -> (u16, Value) {
    trantor_proto::tls::install_default_provider();
    let r = reqwest::Client::new()
        .post(format!("{base}{path}"))
        .json(&body)
        .send()
        .await
        .expect("reply");
    let st = r.status().as_u16();
    (st, r.json().await.unwrap_or(Value::Null))
}

async fn post_raw(base: &str, path: &str, body: &str) -> (u16, Value) {
    trantor_proto::tls::install_default_provider();
    let r = reqwest::Client::new()
        .post(format!("{base}{path}"))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .expect("reply");
    let st = r.status().as_u16();
    (st, r.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hub_keeps_names_and_states_never_secrets() {
    let hub = trantor_testkit::Hub::start();
    let base = hub.url();

    let (st, r) = post(
        &base,
        "/credentials",
        json!({"name": "work", "agent": "claude"}),
    )
    .await;
    assert_eq!(st, 200, "{r}");
    assert_eq!(r["credential"]["state"], "ok");
    post(
        &base,
        "/credentials",
        json!({"name": "alt", "agent": "codex"}),
    )
    .await;
    post(
        &base,
        "/credentials",
        json!({"name": "work", "agent": "codex"}),
    )
    .await;
    for bad in [
        json!({"name": "work", "agent": "claude", "env": {"ANTHROPIC_API_KEY": "sk-ant-x"}}),
        json!({"name": "work", "agent": "gemini"}),
        json!({"name": "a b", "agent": "claude"}),
        json!({"name": "work"}),
    ] {
        let (st, r) = post(&base, "/credentials", bad.clone()).await;
        assert_eq!(st, 400, "{bad} -> {r}");
    }
    let list: Value = reqwest::get(format!("{base}/credentials"))
        .await
        .expect("get")
        .json()
        .await
        .expect("json");
    let names: Vec<(&str, &str)> = list["credentials"]
        .as_array()
        .expect("list")
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap_or(""),
                c["agent"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(names, [("alt", "codex"), ("work", "codex")]);
    assert!(!list.to_string().contains("sk-ant"), "{list}");
    let (_, r) = post(&base, "/credentials/remove", json!({"name": "work"})).await;
    assert_eq!(r["removed"], true);
    let (_, r) = post(&base, "/credentials/remove", json!({"name": "work"})).await;
    assert_eq!(r["removed"], false);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proof_of_exhaustion_marks_once_and_bad_reports_are_named() {
    let hub = trantor_testkit::Hub::start();
    let base = hub.url();
    post(
        &base,
        "/credentials",
        json!({"name": "work", "agent": "claude"}),
    )
    .await;
    let now = trantor_proto::now_ms();
    let until = now + 3_600_000;
    for (bad, status) in [
        (
            json!({"name": "nope", "state": "exhausted", "until": until, "session": "a:p"}),
            404,
        ),
        (
            json!({"name": "work", "state": "tired", "session": "a:p"}),
            400,
        ),
        (json!({"name": "work", "state": "ok", "session": " "}), 400),
        (
            json!({"name": "work", "state": "ok", "session": "a:p", "key": "sk"}),
            400,
        ),
    ] {
        let (st, r) = post(&base, "/credentials/state", bad.clone()).await;
        assert_eq!(st, status, "{bad} -> {r}");
    }
    let (st, r) = post(
        &base,
        "/credentials/state",
        json!({"name": "work", "state": "ok", "session": "b:p"}),
    )
    .await;
    assert_eq!((st, &r["marked"]), (200, &json!(false)), "{r}");
    assert_eq!(r["credential"]["state"], "ok");
    let (st, r) = post(
        &base,
        "/credentials/state",
        json!({"name": "work", "state": "exhausted", "session": "b:p"}),
    )
    .await;
    assert_eq!((st, &r["marked"]), (200, &json!(false)), "{r}");
    assert!(
        r["ignored"]
            .as_str()
            .is_some_and(|t| t.contains("needs the reset time"))
    );
    let first = json!({"name": "work", "state": "exhausted", "until": until, "session": "a:p", "evidence": "usage limit"});
    let (_, r) = post(&base, "/credentials/state", first.clone()).await;
    assert_eq!(r["marked"], true, "{r}");
    let (_, r) = post(&base, "/credentials/state", first).await;
    assert_eq!(r["marked"], false, "{r}");
    assert!(
        r["ignored"]
            .as_str()
            .is_some_and(|t| t.contains("already exhausted"))
    );
    let (_, r) = post(
        &base,
        "/credentials/state",
        json!({"name": "work", "state": "exhausted", "until": now - 1, "session": "a:p"}),
    )
    .await;
    assert_eq!(r["marked"], false, "{r}");
    assert!(
        r["ignored"]
            .as_str()
            .is_some_and(|t| t.contains("not in the future"))
    );
    let (_, r) = post(
        &base,
        "/credentials/state",
        json!({"name": "work", "state": "exhausted", "until": i64::MAX, "session": "a:p"}),
    )
    .await;
    assert_eq!(r["marked"], false, "{r}");
    assert!(
        r["ignored"]
            .as_str()
            .is_some_and(|t| t.contains("31 days out")),
        "{r}"
    );
    // `until` is an integer as JSON Schema means it: an integral number sent as a float is that
    // integer, read exactly (schemathesis, random seed: `-4309417533227374.0` was read as
    // `-4309417533227374.5` and refused, and `1e16` was refused as a float).
    for (until, why) in [
        ("-4309417533227374.0", "not in the future"),
        ("1e16", "31 days out"),
    ] {
        let body =
            format!(r#"{{"name":"work","state":"exhausted","until":{until},"session":"a:p"}}"#);
        let (st, r) = post_raw(&base, "/credentials/state", &body).await;
        assert_eq!(st, 200, "{body} -> {r}");
        assert!(
            r["ignored"].as_str().is_some_and(|t| t.contains(why)),
            "{body} -> {r}"
        );
    }
    for until in [
        "1.5",
        "-4309417533227374.5",
        "9223372036854775808.0",
        "1e300",
    ] {
        let body =
            format!(r#"{{"name":"work","state":"exhausted","until":{until},"session":"a:p"}}"#);
        let (st, r) = post_raw(&base, "/credentials/state", &body).await;
        assert_eq!(st, 400, "{body} -> {r}");
    }
    let list: Value = reqwest::get(format!("{base}/credentials"))
        .await
        .expect("get")
        .json()
        .await
        .expect("json");
    let c = &list["credentials"][0];
    assert_eq!(c["state"], "exhausted", "{c}");
    assert_eq!(c["until"].as_i64(), Some(until));
    assert_eq!(c["seats"], json!(["a:p", "b:p"]));
    assert_eq!(c["lastEvidence"], "usage limit");
    assert_eq!(c["provedBy"], "a:p");
    let inbox: Value = reqwest::get(format!("{base}/inbox?session=x:p&since=0&peek=1"))
        .await
        .expect("inbox")
        .json()
        .await
        .expect("json");
    let notices: Vec<&Value> = inbox["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter(|m| m["from"] == "hub:quota")
        .collect();
    assert_eq!(notices.len(), 1, "marked once, said once: {notices:?}");
}

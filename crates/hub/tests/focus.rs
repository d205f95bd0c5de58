//! `POST /focus`, `GET /focus` and `POST /todos` against the real hub in process (port 0, a
//! temp dir), with the bodies the original's prompt-focus and todo-sync hooks send.

use serde_json::{Value, json};

/// A deadline that only keeps a broken hub from hanging the suite (never a timing bound).
/// One request with `Connection: close`; the status and the JSON body.
/// A JSON request to `url` (`http://127.0.0.1:<port>/<path>`): POST with `body`, else GET.
async fn call(url: String, body: Option<Value>) -> (u16, Value) {
    let rest = url.trim_start_matches("http://127.0.0.1:");
    let (port, path) = rest.split_once('/').unwrap_or((rest, ""));
    let port: u16 = port.parse().expect("a loopback url");
    let method = if body.is_some() { "POST" } else { "GET" };
    trantor_testkit::hub_request(port, method, &format!("/{path}"), body.as_ref()).expect("reply")
}

fn by_source(tasks: &Value, source: &str) -> Vec<Value> {
    tasks["tasks"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter(|t| t["source"] == source)
                .cloned()
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn focus_rolls_one_card_per_cc_and_todos_mirror_the_list() {
    let hub = trantor_testkit::Hub::start();
    let base = hub.url();
    let s = "host1:proj";

    // The original's prompt-focus body.
    let body = json!({"session": s, "project": "proj", "title": "fix the   login redirect", "by": s, "cc": "uuid-1"});
    let (st, v) = call(format!("{base}/focus"), Some(body)).await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["ok"], true);
    let id = v["id"].as_i64().expect("id");
    assert_eq!(v["task"]["title"], "fix the login redirect");
    assert_eq!(v["task"]["status"], "doing");
    assert_eq!(v["task"]["source"], "session");
    assert_eq!(v["task"]["cc"], "uuid-1");

    // Refocus: same card, new title, a trail entry.
    let body = json!({"session": s, "project": "proj", "title": "now the logout page", "by": s, "cc": "uuid-1"});
    let (st, v) = call(format!("{base}/focus"), Some(body)).await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["id"].as_i64(), Some(id));
    assert_eq!(v["task"]["title"], "now the logout page");
    let trail = v["task"]["history"].as_array().map(Vec::len).unwrap_or(0);
    assert_eq!(trail, 2, "{v}");

    // A second Claude session in the same project gets its own card.
    let body = json!({"session": s, "project": "proj", "title": "write the docs", "by": s, "cc": "uuid-2"});
    let (_, v) = call(format!("{base}/focus"), Some(body)).await;
    assert_ne!(v["id"].as_i64(), Some(id), "{v}");

    let (st, v) = call(format!("{base}/focus?cc=uuid-1"), None).await;
    assert_eq!(st, 200);
    assert_eq!(v["id"].as_i64(), Some(id), "{v}");
    let (_, v) = call(format!("{base}/focus?cc=nobody"), None).await;
    assert_eq!(v, json!({"id": null, "task": null}));

    // Refusals name what is missing.
    let (st, v) = call(
        format!("{base}/focus"),
        Some(json!({"project": "proj", "title": "x"})),
    )
    .await;
    assert_eq!(st, 400, "{v}");
    let (st, _) = call(format!("{base}/todos"), Some(json!({"session": s}))).await;
    assert_eq!(st, 400);
    // Past the limits the OpenAPI document states: refused, not cut.
    let long = "t".repeat(4001);
    for body in [
        json!({"session": "  ", "by": "", "project": "proj", "title": "x"}),
        json!({"session": s, "project": "proj", "title": long}),
        json!({"session": s, "project": "proj", "title": "x", "cc": "c".repeat(121)}),
        json!({"session": "  ", "by": "b".repeat(201), "project": "proj", "title": "x"}),
    ] {
        let (st, v) = call(format!("{base}/focus"), Some(body)).await;
        assert_eq!(st, 400, "{v}");
    }
    let (st, _) = call(format!("{base}/focus?cc={}", "c".repeat(121)), None).await;
    assert_eq!(st, 400);
    for todo in [
        json!({"content": long, "status": "pending"}),
        json!({"content": "x", "status": "s".repeat(41)}),
    ] {
        let body = json!({"session": s, "project": "proj", "todos": [todo]});
        let (st, v) = call(format!("{base}/todos"), Some(body)).await;
        assert_eq!(st, 400, "{v}");
    }
    // `by` stands in for a blank session; keys the body does not name are ignored.
    let (st, v) = call(
        format!("{base}/todos"),
        Some(json!({"session": " ", "by": "other", "project": "proj", "todos": [], "extra": 1})),
    )
    .await;
    assert_eq!((st, &v["ok"]), (200, &json!(true)), "{v}");

    // The original's todo-sync body.
    let todos = |list: Value| json!({"session": s, "project": "proj", "by": s, "todos": list});
    let list = json!([
        {"content": "read the code", "status": "completed"},
        {"content": "write the fix", "status": "in_progress"},
        {"content": "run the tests", "status": "pending"}
    ]);
    let (st, v) = call(format!("{base}/todos"), Some(todos(list))).await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v, json!({"ok": true, "count": 3}));
    let (_, board) = call(format!("{base}/tasks?project=proj"), None).await;
    let mut cards: Vec<(String, String)> = by_source(&board, "todo")
        .iter()
        .map(|t| {
            (
                t["title"].as_str().unwrap_or("").into(),
                t["status"].as_str().unwrap_or("").into(),
            )
        })
        .collect();
    cards.sort();
    assert_eq!(
        cards,
        vec![
            ("read the code".into(), "done".into()),
            ("run the tests".into(), "todo".into()),
            ("write the fix".into(), "doing".into()),
        ]
    );

    // The list moves on: one completed, one dropped; the done card stays.
    let list = json!([{"content": "write the fix", "status": "completed"}]);
    let (st, _) = call(format!("{base}/todos"), Some(todos(list))).await;
    assert_eq!(st, 200);
    let (_, board) = call(format!("{base}/tasks?project=proj"), None).await;
    let mut cards: Vec<(String, String)> = by_source(&board, "todo")
        .iter()
        .map(|t| {
            (
                t["title"].as_str().unwrap_or("").into(),
                t["status"].as_str().unwrap_or("").into(),
            )
        })
        .collect();
    cards.sort();
    assert_eq!(
        cards,
        vec![
            ("read the code".into(), "done".into()),
            ("write the fix".into(), "done".into()),
        ]
    );

    hub.stop();
}

//! The cost ledger over HTTP, in process (the shared harness's hub: port 0, a SQLite store in a
//! temp dir), through the typed client the runner uses: a turn recorded once however often it is
//! reported, a card's cost on `GET /card`, `GET /cost` grouped and filtered, a turn with unknown
//! usage counted as a turn, and bad input refused.

use trantor_proto::{TaskCreateRequest, TokenUsage, TurnReport};

fn turn(
    session: &str,
    n: u64,
    card: i64,
    usage: Option<TokenUsage>,
    usd: Option<f64>,
) -> TurnReport {
    TurnReport {
        session: session.into(),
        instance: "run-1".into(),
        turn: n,
        project: "proj".into(),
        card,
        agent: "claude".into(),
        outcome: "completed".into(),
        usage,
        usd,
        source: "test".into(),
        ..Default::default()
    }
}

/// A raw POST with a JSON body; the status.
fn post_raw(port: u16, path: &str, body: &str) -> u16 {
    let headers = [("Content-Type", "application/json")];
    trantor_testkit::request(port, "POST", path, &headers, body.as_bytes())
        .expect("reply")
        .status
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cards_cost_is_the_sum_of_its_turns_each_counted_once() {
    let hub = trantor_testkit::Hub::start();
    let c = hub.client();
    let card = c
        .task_create(&TaskCreateRequest {
            project: Some("proj".into()),
            title: "costly work".into(),
            ..Default::default()
        })
        .await
        .expect("card")
        .task
        .id;
    let fresh = c.card(card).await.expect("card read");
    assert_eq!(fresh.cost, trantor_proto::CostSummary::default());

    let usage = TokenUsage {
        input: 100,
        output: 10,
        cache_read: 1000,
        cache_write: 5,
    };
    let first = turn("claude:proj", 1, card, Some(usage), Some(0.02));
    assert!(c.report_turn(&first).await.expect("report").appended);
    assert!(
        !c.report_turn(&first).await.expect("again").appended,
        "a repeat is acknowledged, not counted"
    );
    let mut estimated = turn("codex:proj", 1, card, Some(usage), Some(0.01));
    estimated.estimated = true;
    c.report_turn(&estimated).await.expect("estimated");
    c.report_turn(&turn("codex:proj", 2, card, None, None))
        .await
        .expect("unknown usage");
    c.report_turn(&turn("codex:proj", 3, 0, Some(usage), Some(1.0)))
        .await
        .expect("no card");

    let cost = c.card(card).await.expect("card read").cost;
    assert_eq!((cost.tokens_in, cost.tokens_out), (2210, 20));
    assert_eq!((cost.turns, cost.unknown, cost.estimated), (3, 1, true));
    assert!((cost.usd - 0.03).abs() < 1e-9, "{}", cost.usd);

    let all = c.cost(&[]).await.expect("cost");
    assert_eq!(all.by, "card");
    assert_eq!(all.total.turns, 4);
    let keys: Vec<&str> = all.groups.iter().map(|g| g.key.as_str()).collect();
    assert_eq!(
        keys,
        ["0", card.to_string().as_str()],
        "largest dollars first"
    );
    let seat = c
        .cost(&[("seat", "claude:proj".into()), ("by", "seat".into())])
        .await
        .expect("seat");
    assert_eq!(seat.total.turns, 1);
    assert_eq!(seat.groups[0].key, "claude:proj");
    let later = c
        .cost(&[("since", (trantor_proto::now_ms() + 60_000).to_string())])
        .await
        .expect("since");
    assert_eq!(later.total.turns, 0);
    assert!(later.groups.is_empty());
    let days = c.cost(&[("by", "day".into())]).await.expect("days");
    assert_eq!(days.groups.len(), 1);
    assert_eq!(days.groups[0].key.len(), "YYYY-MM-DD".len());

    // Bad input: a 400, never a 500, and nothing recorded.
    for body in [
        r#"{"session":"","instance":"i","turn":1}"#,
        r#"{"session":"s:p","instance":"i","turn":1,"usd":-1}"#,
        r#"{"session":"s:p","instance":"i","turn":1,"card":-4}"#,
        r#"{"session":"s:p","instance":"i","turn":1,"usage":{"input":1000000000000000}}"#,
        r#"{"session":"s:p","instance":"i","turn":99999999999999999999}"#,
    ] {
        let code = post_raw(hub.port, "/turns", body);
        assert!((400..500).contains(&code), "{body}: {code}");
    }
    assert_eq!(c.cost(&[]).await.expect("cost").total.turns, 4);
}

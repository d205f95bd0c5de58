//! The delivery record over HTTP, in process (`trantorhub::serve` on port 0, a SQLite store in
//! a temp dir), through the typed client the runner uses: the life of a message, idempotent
//! re-marks, the fence (409 for a superseded instance, typed as `Superseded`), bad input, and
//! a hub restart that keeps the record and the fence.

use std::time::Duration;
use trantor_proto::{ClientError, DeliveryMark, DeliveryState, HubClient, MarkState, SendRequest};

/// A deadline that only keeps a broken hub from hanging the suite (never a timing bound).
const GUARD: Duration = Duration::from_secs(30);

/// The shared harness's in-process hub, with this file's two shortcuts.
struct Hub {
    client: HubClient,
    base: String,
    hub: trantor_testkit::Hub,
}

impl Hub {
    async fn start(dir: &std::path::Path) -> Hub {
        Hub::start_with(dir, false).await
    }

    /// A hub on `dir`, started with `--no-delivery-record` when `no_record`.
    async fn start_with(dir: &std::path::Path, no_record: bool) -> Hub {
        let hub = trantor_testkit::Hub::start_on(dir, |a| a.no_delivery_record = no_record);
        Hub {
            client: hub.client(),
            base: hub.url(),
            hub,
        }
    }

    /// Stop the hub, checking it stopped cleanly (the store stays in `dir`).
    async fn stop(self) {
        self.hub.stop()
    }

    async fn send(&self, to: &str, text: &str) -> i64 {
        self.client
            .send(&SendRequest {
                from: "boss:proj".into(),
                to: Some(to.into()),
                text: text.into(),
                ..Default::default()
            })
            .await
            .expect("send")
            .id
    }

    async fn raw(
        &self,
        method: reqwest::Method,
        path: &str,
        body: &str,
    ) -> (u16, serde_json::Value) {
        trantor_proto::tls::install_default_provider();
        let http = reqwest::Client::new();
        let mut req = http.request(method, format!("{}{path}", self.base));
        if !body.is_empty() {
            req = req
                .header("content-type", "application/json")
                .body(body.to_string());
        }
        let resp = tokio::time::timeout(GUARD, req.send())
            .await
            .expect("in time")
            .expect("reply");
        let status = resp.status().as_u16();
        let v = resp.json().await.unwrap_or(serde_json::Value::Null);
        (status, v)
    }
}

fn mark(id: i64, instance: &str, state: MarkState) -> DeliveryMark {
    DeliveryMark::new(id, "seat:proj", instance, state)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_life_is_recorded_in_order_and_survives_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let hub = Hub::start(dir.path()).await;
    let c = hub.client.clone();
    let id = hub.send("seat:proj", "do the thing").await;
    let other = hub.send("seat:proj", "and this").await;
    let broadcast = hub.send("all", "hello everyone").await;

    // `stored` is written with the message.
    let rec = c.delivery(id).await.expect("record");
    assert_eq!(rec.id, id);
    assert_eq!(rec.to, "seat:proj");
    assert_eq!(rec.states.len(), 1);
    assert_eq!(rec.states[0].state, DeliveryState::Stored);
    assert_eq!(rec.states[0].instance, None);
    let open = c.delivery_open("seat:proj").await.expect("open");
    assert_eq!(open.total, 2);
    assert_eq!(
        open.open.iter().map(|o| o.id).collect::<Vec<_>>(),
        vec![id, other]
    );
    // A broadcast has no record of its own.
    assert!(
        c.delivery(broadcast)
            .await
            .expect("broadcast")
            .states
            .is_empty()
    );

    // Fence, then the life.
    let f = c.delivery_fence("seat:proj", "run-1").await.expect("fence");
    assert!(
        f.ok && f.instance == "run-1" && f.previous.is_none(),
        "{f:?}"
    );
    let r = c
        .delivery_mark(&mark(id, "run-1", MarkState::Claimed))
        .await
        .expect("claimed");
    assert!(r.appended && r.state == DeliveryState::Claimed);
    let mut started = mark(id, "run-1", MarkState::Started);
    started.turn = Some(3);
    started.pid = Some(31337);
    assert!(c.delivery_mark(&started).await.expect("started").appended);
    // A retry after a lost reply appends nothing.
    let again = c.delivery_mark(&started).await.expect("started again");
    assert!(!again.appended, "{again:?}");
    let mut consumed = mark(id, "run-1", MarkState::Consumed);
    consumed.turn = Some(3);
    consumed.outcome = Some("delivered".into());
    assert!(c.delivery_mark(&consumed).await.expect("consumed").appended);
    let mut parked = mark(other, "run-1", MarkState::Parked);
    parked.reason = Some("seat parked: usage limit".into());
    c.delivery_mark(&parked).await.expect("parked");

    let rec = c.delivery(id).await.expect("record");
    let states: Vec<DeliveryState> = rec.states.iter().map(|s| s.state).collect();
    assert_eq!(
        states,
        vec![
            DeliveryState::Stored,
            DeliveryState::Claimed,
            DeliveryState::Started,
            DeliveryState::Consumed
        ]
    );
    assert_eq!(rec.states[2].turn, Some(3));
    assert_eq!(rec.states[2].pid, Some(31337));
    assert_eq!(rec.states[2].instance.as_deref(), Some("run-1"));
    assert_eq!(rec.states[3].outcome.as_deref(), Some("delivered"));
    assert!(rec.states.windows(2).all(|w| w[0].ts <= w[1].ts));
    let open = c.delivery_open("seat:proj").await.expect("open");
    assert_eq!(open.total, 1);
    assert_eq!(open.open[0].id, other);
    assert_eq!(open.open[0].state, DeliveryState::Parked);
    assert_eq!(
        open.open[0].reason.as_deref(),
        Some("seat parked: usage limit")
    );

    // A second runner takes the seat over: the first is superseded, typed.
    let f = c
        .delivery_fence("seat:proj", "run-2")
        .await
        .expect("fence 2");
    assert_eq!(f.previous.as_deref(), Some("run-1"));
    // A successor finishing a dead runner's marks: a consumed life stays as it ended — a
    // repeat `consumed` (or a `failed`) from the new instance appends nothing.
    for state in [MarkState::Consumed, MarkState::Failed] {
        let late = c
            .delivery_mark(&mark(id, "run-2", state))
            .await
            .expect("a late terminal mark");
        assert!(!late.appended, "{late:?}");
    }
    assert_eq!(c.delivery(id).await.expect("record").states.len(), 4);
    let err = c
        .delivery_mark(&mark(other, "run-1", MarkState::Claimed))
        .await
        .expect_err("superseded");
    match err {
        ClientError::Superseded { session, current } => {
            assert_eq!((session.as_str(), current.as_str()), ("seat:proj", "run-2"));
        }
        e => panic!("expected Superseded, got {e:?}"),
    }
    let (st, body) = hub
        .raw(
            reqwest::Method::POST,
            "/delivery",
            &format!(
                r#"{{"id":{other},"session":"seat:proj","instance":"run-1","state":"claimed"}}"#
            ),
        )
        .await;
    assert_eq!(st, 409, "{body}");
    assert_eq!(body["current"], "run-2");
    assert!(
        body["error"].as_str().is_some_and(
            |e| e.contains("superseded: session seat:proj is fenced by instance run-2")
        ),
        "{body}"
    );

    // The record and the fence survive a restart of the hub on the same store.
    hub.stop().await;
    let hub = Hub::start(dir.path()).await;
    let c = hub.client.clone();
    let after = c.delivery(id).await.expect("record after restart");
    assert_eq!(after, rec);
    assert!(matches!(
        c.delivery_mark(&mark(other, "run-1", MarkState::Claimed))
            .await,
        Err(ClientError::Superseded { .. })
    ));
    c.delivery_mark(&mark(other, "run-2", MarkState::Claimed))
        .await
        .expect("the current instance marks");
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_marks_and_queries_are_refused_clearly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let hub = Hub::start(dir.path()).await;
    let c = hub.client.clone();
    let id = hub.send("seat:proj", "for the seat").await;

    // Unknown message: 404, for marks and reads.
    let err = c
        .delivery_mark(&mark(999_999, "run-1", MarkState::Claimed))
        .await
        .expect_err("unknown id");
    assert_eq!(err.status(), Some(404), "{err}");
    let err = c.delivery(999_999).await.expect_err("unknown id");
    assert_eq!(err.status(), Some(404), "{err}");

    // Not addressed to the marking session: 403.
    let wrong = DeliveryMark::new(id, "other:proj", "run-1", MarkState::Claimed);
    let err = c.delivery_mark(&wrong).await.expect_err("not addressed");
    assert_eq!(err.status(), Some(403), "{err}");
    assert!(err.to_string().contains("addressed to seat:proj"), "{err}");

    // `stored` is the hub's, and unknown states are refused.
    for state in ["stored", "eaten", ""] {
        let (st, body) = hub
            .raw(
                reqwest::Method::POST,
                "/delivery",
                &format!(r#"{{"id":{id},"session":"seat:proj","instance":"i","state":"{state}"}}"#),
            )
            .await;
        assert_eq!(st, 400, "{state}: {body}");
    }
    // Blank instance or session.
    let (st, body) = hub
        .raw(
            reqwest::Method::POST,
            "/delivery",
            &format!(r#"{{"id":{id},"session":"seat:proj","instance":"  ","state":"claimed"}}"#),
        )
        .await;
    assert_eq!(st, 400, "{body}");
    let (st, body) = hub
        .raw(
            reqwest::Method::POST,
            "/delivery/fence",
            r#"{"session":"","instance":"x"}"#,
        )
        .await;
    assert_eq!(st, 400, "{body}");

    // Reads name an id or a session; open=0 is not offered.
    let (st, body) = hub.raw(reqwest::Method::GET, "/delivery", "").await;
    assert_eq!(st, 404, "{body}");
    assert!(
        body["error"]
            .as_str()
            .is_some_and(|e| e.contains("give id=N")),
        "{body}"
    );
    // A parameter the route ignores on the path taken (`id=` ignores `limit` and `open`) is
    // still refused when the document calls it malformed (schemathesis, random seed: it was
    // accepted with a 200).
    for q in [
        "?session=seat:proj&open=0",
        "?id=abc",
        "?session=seat:proj&open=1&limit=0",
        "?id=1&limit=x",
        "?id=1&open=maybe",
        "?id=1&limit=0",
    ] {
        let (st, body) = hub
            .raw(reqwest::Method::GET, &format!("/delivery{q}"), "")
            .await;
        assert_eq!(st, 400, "{q}: {body}");
    }

    // `open=1` may be left out.
    let (st, body) = hub
        .raw(reqwest::Method::GET, "/delivery?session=seat:proj", "")
        .await;
    assert_eq!(st, 200, "{body}");
    assert_eq!(body["total"], 1, "{body}");

    // The first mark without a fence fences implicitly; nothing was appended by the refusals.
    c.delivery_mark(&mark(id, "run-9", MarkState::Claimed))
        .await
        .expect("implicit fence");
    let rec = c.delivery(id).await.expect("record");
    assert_eq!(rec.states.len(), 2, "{rec:?}");
    assert!(matches!(
        c.delivery_mark(&mark(id, "run-8", MarkState::Started)).await,
        Err(ClientError::Superseded { ref current, .. }) if current == "run-9"
    ));

    // `turn` is an integer as JSON Schema means it: an integral number sent as a float is that
    // turn, read exactly (schemathesis, random seed: `4309417533227374.0` was read one unit
    // off, as `4309417533227374.5`, and refused; `1e16` was refused as a float); a fraction is
    // not a turn.
    for (turn, want) in [
        ("4309417533227374.0", 4_309_417_533_227_374),
        ("1e16", 10_000_000_000_000_000),
        ("7.0", 7),
    ] {
        let body = format!(
            r#"{{"id":{id},"session":"seat:proj","instance":"run-9","state":"started","turn":{turn}}}"#
        );
        let (st, r) = hub.raw(reqwest::Method::POST, "/delivery", &body).await;
        assert_eq!(st, 200, "{body} -> {r}");
        let rec = c.delivery(id).await.expect("record");
        let last = rec.states.last().and_then(|s| s.turn);
        assert_eq!(last, Some(want), "{rec:?}");
    }
    let body = format!(
        r#"{{"id":{id},"session":"seat:proj","instance":"run-9","state":"started","turn":2.5}}"#
    );
    let (st, r) = hub.raw(reqwest::Method::POST, "/delivery", &body).await;
    assert_eq!(st, 400, "{body} -> {r}");

    // The routes are in the API document.
    let (st, doc) = hub.raw(reqwest::Method::GET, "/openapi.json", "").await;
    assert_eq!(st, 200);
    assert!(
        doc["paths"]["/delivery"]["get"].is_object(),
        "{}",
        doc["paths"]
    );
    assert!(doc["paths"]["/delivery"]["post"].is_object());
    assert!(doc["paths"]["/delivery/fence"]["post"].is_object());
    hub.stop().await;
}

/// `--no-delivery-record` (docs/protocol.md §5.8): the hub behaves as one that never had the
/// record — every `/delivery` route is 404, which the runner's client reads as "no record here"
/// — and a restart with the record back on reports the messages sent meanwhile from the
/// messages themselves, with nothing written for them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ahub_without_the_record_answers_404_and_writes_none() {
    let dir = tempfile::tempdir().expect("tempdir");
    let hub = Hub::start_with(dir.path(), true).await;
    let id = hub.send("seat:proj", "do the thing").await;
    let (st, body) = hub
        .raw(reqwest::Method::GET, &format!("/delivery?id={id}"), "")
        .await;
    assert_eq!(st, 404, "{body}");
    assert!(
        body["error"]
            .as_str()
            .is_some_and(|e| e.contains("--no-delivery-record")),
        "{body}"
    );
    let (st, _) = hub
        .raw(
            reqwest::Method::POST,
            "/delivery/fence",
            r#"{"session":"seat:proj","instance":"I"}"#,
        )
        .await;
    assert_eq!(st, 404);
    let marked = hub
        .client
        .delivery_mark(&mark(id, "I", MarkState::Claimed))
        .await;
    assert!(
        matches!(&marked, Err(e) if e.status() == Some(404)),
        "{marked:?}"
    );
    hub.stop().await;

    // Back on: the message has no stored row, so its record is made from the message, and
    // the open listing (which reads the rows) does not list it.
    let hub = Hub::start(dir.path()).await;
    let rec = hub.client.delivery(id).await.expect("record");
    assert_eq!(rec.states.len(), 1);
    assert_eq!(rec.states[0].state, DeliveryState::Stored);
    let open = hub.client.delivery_open("seat:proj").await.expect("open");
    assert_eq!(open.total, 0, "{open:?}");
    hub.stop().await;
}

//! The store conformance suite: one story per behaviour, written over `S: Store` so every
//! backend runs the same checks. A backend's test crate runs all of them with
//! [`crate::conformance_suite!`], naming a [`Fixture`] that opens a fresh store of its kind (as
//! ripgrep's `rgtest!` runs one body under several configurations).
//!
//! Built with the `conformance` feature (a dev-dependency of the backends); test code, so it
//! asserts and panics.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::json;
use std::collections::HashSet;
use trantor_proto::{BROADCAST, Card, DeliveryEntry, DeliveryState, Lesson, Message, Peer};

use crate::{
    CardFilter, EventFilter, LedgerQuery, NewEvent, NewMessage, OpRecord, Store, StoreError,
    TALLY_BUCKET_MS,
};

/// How a backend's tests get a fresh, empty store.
pub trait Fixture {
    /// The store.
    type S: Store;
    /// Open the store (again: a second call reopens the same data).
    fn open(&self) -> Self::S;
    /// Close a store handle (PostgreSQL's blocking client must not be dropped on a runtime
    /// thread).
    fn close(&self, s: Self::S) {
        drop(s);
    }
}

/// Run every story of the suite as a test of the calling crate. `$fixture` is an expression of
/// type `Option<impl Fixture>`, evaluated per test; `None` skips the test (the fixture says
/// why, and fails instead under CI).
#[macro_export]
macro_rules! conformance_suite {
    ($fixture:expr) => {
        $crate::conformance_suite!(@stories $fixture;
            ids_and_delivery, paging_is_exact, delivery_ledger, delivery_record, cost_ledger, prune_keeps_unread,
            savepoint_isolation, events_filters, board_and_documents, imported_ids,
            panicking_closure_is_isolated, auth_documents, ledger_tally_matches_scan);

        #[::tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn durable_across_reopen() {
            let Some(fx) = $fixture else { return };
            $crate::conformance::durable_across_reopen(|| $crate::conformance::Fixture::open(&fx))
                .await;
        }
    };
    (@stories $fixture:expr; $($name:ident),* $(,)?) => {$(
        #[::tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn $name() {
            let Some(fx) = $fixture else { return };
            let s = $crate::conformance::Fixture::open(&fx);
            $crate::conformance::$name(&s).await;
            $crate::conformance::Fixture::close(&fx, s);
        }
    )*};
}

/// A panicking closure fails alone: the write grouped with it commits, and the store keeps
/// working after a panic in a read closure too.
pub async fn panicking_closure_is_isolated<S: Store>(s: &S) {
    let bad = s.write(|tx| -> Result<(), StoreError> {
        tx.insert_message(new_msg("a", "b", 1, "doomed"), &[])?;
        panic!("boom");
    });
    let good = s.write(|tx| tx.insert_message(new_msg("a", "b", 2, "kept"), &[]));
    let (bad, good) = tokio::join!(bad, good);
    assert!(bad.is_err());
    let good = good.expect("the other write commits");
    let all = s.read(|tx| tx.messages_for("b", 0, 0)).await.expect("read");
    assert_eq!(all, vec![good]);
    let r: Result<(), StoreError> = s.read(|_| panic!("read boom")).await;
    assert!(r.is_err());
    assert_eq!(s.read(|tx| tx.counts()).await.expect("counts").messages, 1);
    assert_eq!(s.synchronous(), "full", "the default sync level is full");
}

pub fn new_msg(from: &str, to: &str, ts: i64, text: &str) -> NewMessage {
    NewMessage {
        ts,
        from: from.into(),
        to: to.into(),
        project: "p".into(),
        text: text.into(),
        ..Default::default()
    }
}

pub async fn send<S: Store>(s: &S, m: NewMessage) -> Message {
    s.write(move |tx| tx.insert_message(m, &[]))
        .await
        .expect("insert")
}

fn ids(v: &[Message]) -> Vec<i64> {
    v.iter().map(|m| m.id).collect()
}

/// Ids are monotonic; the delivery rule (to me or to all, never from me, id > since);
/// limit and paging; single reads.
pub async fn ids_and_delivery<S: Store>(s: &S) {
    assert_eq!(s.read(|tx| tx.tip()).await.expect("tip"), 0);
    let a_b = send(s, new_msg("a", "b", 1, "a to b")).await;
    let b_a = send(s, new_msg("b", "a", 2, "b to a")).await;
    let a_all = send(s, new_msg("a", "all", 3, "a to all")).await;
    let c_b = send(s, new_msg("c", "b", 4, "c to b")).await;
    let b_all = send(s, new_msg("b", "all", 5, "b to all")).await;
    let b_b = send(s, new_msg("b", "b", 6, "b to itself")).await;
    let all = [&a_b, &b_a, &a_all, &c_b, &b_all, &b_b];
    for w in all.windows(2) {
        assert!(w[0].id < w[1].id, "ids must increase");
    }
    assert_eq!(s.read(|tx| tx.tip()).await.expect("tip"), b_b.id);

    let for_b = s
        .read(|tx| tx.messages_for("b", 0, 100))
        .await
        .expect("for b");
    assert_eq!(ids(&for_b), vec![a_b.id, a_all.id, c_b.id]);
    assert_eq!(for_b[0], a_b);
    let for_a = s
        .read(|tx| tx.messages_for("a", 0, 100))
        .await
        .expect("for a");
    assert_eq!(ids(&for_a), vec![b_a.id, b_all.id]);
    let for_z = s
        .read(|tx| tx.messages_for("z", 0, 100))
        .await
        .expect("for z");
    assert_eq!(ids(&for_z), vec![a_all.id, b_all.id]);

    // since is exclusive; limit pages oldest first.
    let page1 = s
        .read(|tx| tx.messages_for("b", 0, 2))
        .await
        .expect("page 1");
    assert_eq!(ids(&page1), vec![a_b.id, a_all.id]);
    let cursor = page1[1].id;
    let page2 = s
        .read(move |tx| tx.messages_for("b", cursor, 2))
        .await
        .expect("page 2");
    assert_eq!(ids(&page2), vec![c_b.id]);
    let cursor = page2[0].id;
    let page3 = s
        .read(move |tx| tx.messages_for("b", cursor, 2))
        .await
        .expect("page 3");
    assert!(page3.is_empty());

    let id = c_b.id;
    let one = s.read(move |tx| tx.message(id)).await.expect("message");
    assert_eq!(one.as_ref(), Some(&c_b));
    let none = s.read(|tx| tx.message(999_999)).await.expect("message");
    assert!(none.is_none());

    let recent = s.read(|tx| tx.recent_messages(2)).await.expect("recent");
    assert_eq!(ids(&recent), vec![b_all.id, b_b.id]);

    let involving = s
        .read(|tx| tx.direct_messages_involving("b", 2))
        .await
        .expect("involving");
    assert_eq!(ids(&involving), vec![b_a.id, c_b.id, b_b.id]);

    let dispatchers = s
        .read(|tx| tx.dispatchers_since(2))
        .await
        .expect("dispatchers");
    let d: HashSet<String> = dispatchers.into_iter().collect();
    assert_eq!(d, HashSet::from(["b".to_string(), "c".to_string()]));

    // Optional fields round-trip.
    let mut m = new_msg("a", "b", 7, "with extras, #12 and #13");
    m.re = Some(a_b.id);
    m.kind = Some("ask".into());
    m.wake = Some(false);
    let extra = s
        .write(move |tx| tx.insert_message(m, &[12, 13]))
        .await
        .expect("insert with refs");
    let id = extra.id;
    let back = s.read(move |tx| tx.message(id)).await.expect("read back");
    assert_eq!(back.as_ref(), Some(&extra));
    assert_eq!(back.and_then(|m| m.wake), Some(false));
    let citing = s
        .read(|tx| tx.messages_citing(12, 10))
        .await
        .expect("citing");
    assert_eq!(ids(&citing), vec![extra.id]);
    let counts = s.read(|tx| tx.counts()).await.expect("counts");
    assert_eq!(counts.messages, 7);
}

/// Paging through a large mailbox mixed with broadcasts returns each id exactly once.
pub async fn paging_is_exact<S: Store>(s: &S) {
    s.write(|tx| {
        for i in 0..2_500i64 {
            let to = match i % 3 {
                0 => "x",
                1 => "all",
                _ => "y",
            };
            let from = if i % 5 == 0 { "x" } else { "w" };
            tx.insert_message(new_msg(from, to, i, "m"), &[])?;
        }
        Ok(())
    })
    .await
    .expect("fill");
    let expected: Vec<i64> = s
        .read(|tx| tx.messages_for("x", 0, 0))
        .await
        .expect("all at once")
        .into_iter()
        .map(|m| m.id)
        .collect();
    let mut got = Vec::new();
    let mut cursor = 0;
    loop {
        let page = s
            .read(move |tx| tx.messages_for("x", cursor, 300))
            .await
            .expect("page");
        if page.is_empty() {
            break;
        }
        assert!(page.len() <= 300);
        cursor = page[page.len() - 1].id;
        got.extend(page.iter().map(|m| {
            assert!(m.deliverable_to("x"));
            m.id
        }));
    }
    assert_eq!(got, expected);
    let unique: HashSet<i64> = got.iter().copied().collect();
    assert_eq!(unique.len(), got.len());
}

pub fn peer(session: &str, last_seen: i64, delivered: i64) -> Peer {
    Peer {
        session: session.into(),
        last_seen,
        project: "p".into(),
        status: "ok".into(),
        delivered_up_to: delivered,
        model: Some("m1".into()),
        ..Default::default()
    }
}

/// The delivery ledger only rises, through both `raise_delivered` and `put_peer`.
pub async fn delivery_ledger<S: Store>(s: &S) {
    s.write(|tx| tx.put_peer(&peer("a", 100, 5)))
        .await
        .expect("put");
    let v = s
        .write(|tx| tx.raise_delivered("a", 10))
        .await
        .expect("raise");
    assert_eq!(v, 10);
    let v = s
        .write(|tx| tx.raise_delivered("a", 3))
        .await
        .expect("lower");
    assert_eq!(v, 10, "raise_delivered never lowers");
    s.write(|tx| tx.put_peer(&peer("a", 200, 1)))
        .await
        .expect("put lower");
    let a = s
        .read(|tx| tx.peer("a"))
        .await
        .expect("peer")
        .expect("a exists");
    assert_eq!(a.delivered_up_to, 10, "put_peer never lowers");
    assert_eq!(a.last_seen, 200);
    assert_eq!(a.model.as_deref(), Some("m1"));
    // The presence flush raises lastSeen only, in one call for many sessions; an unknown
    // session gets no row, an older value changes nothing, the rest of the peer stays.
    s.write(|tx| tx.put_peer(&peer("b", 100, 0)))
        .await
        .expect("put b");
    let seen = vec![
        ("a".to_string(), 150),
        ("b".to_string(), 300),
        ("ghost".to_string(), 400),
    ];
    s.write(move |tx| tx.touch_peers(&seen))
        .await
        .expect("touch");
    let (a, b, ghost) = s
        .read(|tx| Ok((tx.peer("a")?, tx.peer("b")?, tx.peer("ghost")?)))
        .await
        .expect("peers");
    let (a, b) = (a.expect("a"), b.expect("b"));
    assert_eq!((a.last_seen, b.last_seen), (200, 300), "touch only raises");
    assert_eq!(a.delivered_up_to, 10, "touch keeps the ledger");
    assert_eq!(
        a.model.as_deref(),
        Some("m1"),
        "touch keeps the rest of the peer"
    );
    assert!(ghost.is_none(), "touch adds no row");
    s.write(|tx| tx.delete_peers_before(250))
        .await
        .expect("forget a");
    // An unknown session gets a ledger too.
    let v = s
        .write(|tx| tx.raise_delivered("new", 7))
        .await
        .expect("raise new");
    assert_eq!(v, 7);
    let n = s
        .read(|tx| tx.peer("new"))
        .await
        .expect("peer")
        .expect("new exists");
    assert_eq!(n.delivered_up_to, 7);

    s.write(|tx| tx.put_peer(&peer("old", 50, 0)))
        .await
        .expect("put old");
    let gone = s
        .write(|tx| tx.delete_peers_before(60))
        .await
        .expect("delete");
    let gone: HashSet<String> = gone.into_iter().collect();
    assert_eq!(gone, HashSet::from(["old".to_string(), "new".to_string()]));
    let peers = s.read(|tx| tx.peers()).await.expect("peers");
    assert_eq!(peers.len(), 1, "b stays");
    assert_eq!(s.read(|tx| tx.counts()).await.expect("counts").peers, 1);
}

/// Retention removes only what was read (or broadcast) and old; the tip never goes down.
pub async fn prune_keeps_unread<S: Store>(s: &S) {
    let old_read = send(s, new_msg("a", "r", 10, "old, read")).await;
    let old_unread = send(s, new_msg("a", "r", 11, "old, unread")).await;
    let old_unknown = send(s, new_msg("a", "ghost", 12, "old, to nobody")).await;
    let old_broadcast = send(s, new_msg("a", "all", 13, "old broadcast")).await;
    let new_read = send(s, new_msg("a", "r", 1_000, "new, read")).await;
    let tip = new_read.id;
    s.write(move |tx| {
        tx.put_peer(&peer("r", 1_000, 0))?;
        tx.raise_delivered("r", old_read.id)?;
        tx.put_op(&OpRecord {
            id: "op-old".into(),
            ts: 5,
            code: 200,
            body: json!({"ok": true}),
        })?;
        tx.put_op(&OpRecord {
            id: "op-new".into(),
            ts: 500,
            code: 200,
            body: json!({"ok": true}),
        })?;
        tx.insert_event(NewEvent {
            ts: 10,
            kind: "presence.online".into(),
            ..Default::default()
        })?;
        tx.insert_event(NewEvent {
            ts: 10,
            kind: "moved".into(),
            task_id: Some(1),
            ..Default::default()
        })?;
        Ok(())
    })
    .await
    .expect("setup");
    let report = s.write(|tx| tx.prune(100, 100)).await.expect("prune");
    assert_eq!(report.messages, 2, "{report:?}");
    assert_eq!(report.events, 1, "card events are kept: {report:?}");
    assert_eq!(report.ops, 1);
    for (m, kept) in [
        (&old_read, false),
        (&old_unread, true),
        (&old_unknown, true),
        (&old_broadcast, false),
        (&new_read, true),
    ] {
        let id = m.id;
        let got = s.read(move |tx| tx.message(id)).await.expect("message");
        assert_eq!(got.is_some(), kept, "{}", m.text);
    }
    assert!(s.read(|tx| tx.op("op-new")).await.expect("op").is_some());
    assert!(s.read(|tx| tx.op("op-old")).await.expect("op").is_none());

    // Everyone has read everything: even the newest message goes, the tip stays.
    s.write(move |tx| {
        tx.raise_delivered("r", tip)?;
        tx.put_peer(&peer("ghost", 1, tip))
    })
    .await
    .expect("read all");
    s.write(|tx| tx.prune(i64::MAX, 0))
        .await
        .expect("prune all");
    assert_eq!(s.read(|tx| tx.counts()).await.expect("counts").messages, 0);
    assert_eq!(s.read(|tx| tx.tip()).await.expect("tip"), tip);
    let next = send(s, new_msg("a", "r", 2_000, "after prune")).await;
    assert!(next.id > tip, "ids are never reused after pruning");
}

/// A failing closure rolls back alone, even when grouped with others into one commit.
pub async fn savepoint_isolation<S: Store>(s: &S) {
    // Alone first: nothing of it stays, and the store keeps working.
    let r: Result<(), StoreError> = s
        .write(|tx| {
            tx.insert_message(new_msg("w", "r", 0, "alone and doomed"), &[])?;
            tx.set_kv("alone", &json!(1))?;
            Err(StoreError::db("deliberate failure alone"))
        })
        .await;
    assert!(r.is_err());
    assert_eq!(s.read(|tx| tx.kv("alone")).await.expect("kv"), None);
    assert_eq!(s.read(|tx| tx.counts()).await.expect("counts").messages, 0);
    let mut handles = Vec::new();
    for i in 0..200i64 {
        let s = s.clone();
        handles.push(tokio::spawn(async move {
            let fail = i % 7 == 3;
            let r = s
                .write(move |tx| {
                    let m = tx.insert_message(new_msg("w", "r", i, &format!("m{i}")), &[])?;
                    tx.set_kv(&format!("k{i}"), &json!(i))?;
                    if fail {
                        return Err(StoreError::db(format!("deliberate failure {i}")));
                    }
                    Ok(m.id)
                })
                .await;
            (i, fail, r)
        }));
    }
    let mut ok_ids = HashSet::new();
    for h in handles {
        let (i, fail, r) = h.await.expect("join");
        match r {
            Ok(id) => {
                assert!(!fail, "write {i} should have failed");
                assert!(ok_ids.insert(id), "duplicate id {id}");
            }
            Err(e) => {
                assert!(fail, "write {i} failed: {e}");
                assert!(e.to_string().contains("deliberate"), "{e}");
            }
        }
    }
    let stored = s.read(|tx| tx.messages_for("r", 0, 0)).await.expect("read");
    let stored_ids: HashSet<i64> = stored.iter().map(|m| m.id).collect();
    assert_eq!(stored_ids, ok_ids);
    for m in &stored {
        let i: i64 = m.text[1..].parse().expect("number");
        assert_ne!(i % 7, 3, "a failed write's message survived");
    }
    for i in [3i64, 10, 4, 11] {
        let key = format!("k{i}");
        let v = s.read(move |tx| tx.kv(&key)).await.expect("kv");
        assert_eq!(v.is_some(), i % 7 != 3, "k{i}");
    }
}

/// `events` filters: types (exact and prefix), by, since, project, task (own and cited, or
/// own only) and a limit that keeps the newest, returned oldest first.
pub async fn events_filters<S: Store>(s: &S) {
    let ev = |kind: &str, by: &str, task: Option<i64>, refs: Vec<i64>| NewEvent {
        ts: 1,
        kind: kind.into(),
        project: if by == "c" { "q".into() } else { "p".into() },
        by: by.into(),
        task_id: task,
        refs,
        data: json!({"n": kind}).as_object().cloned().unwrap_or_default(),
    };
    let inserted = s
        .write(move |tx| {
            Ok(vec![
                tx.insert_event(ev("presence.online", "a", None, vec![]))?,
                tx.insert_event(ev("created", "a", Some(7), vec![]))?,
                tx.insert_event(ev("message", "b", None, vec![7, 8]))?,
                tx.insert_event(ev("presence.offline", "b", None, vec![]))?,
                tx.insert_event(ev("presences", "b", None, vec![]))?,
                tx.insert_event(ev("moved", "c", Some(7), vec![]))?,
                tx.insert_event(ev("moved", "a", Some(8), vec![]))?,
            ])
        })
        .await
        .expect("events");
    let id = |i: usize| inserted[i].id;
    let run = |f: EventFilter| async move {
        s.read(move |tx| tx.events(&f))
            .await
            .expect("events")
            .into_iter()
            .map(|e| e.id)
            .collect::<Vec<_>>()
    };
    assert_eq!(run(EventFilter::default()).await.len(), 7);
    assert_eq!(
        run(EventFilter {
            types: Some(vec!["presence.".into()]),
            ..Default::default()
        })
        .await,
        vec![id(0), id(3)]
    );
    assert_eq!(
        run(EventFilter {
            types: Some(vec!["presence.".into(), "moved".into()]),
            ..Default::default()
        })
        .await,
        vec![id(0), id(3), id(5), id(6)]
    );
    assert_eq!(
        run(EventFilter {
            by: Some("b".into()),
            ..Default::default()
        })
        .await,
        vec![id(2), id(3), id(4)]
    );
    assert_eq!(
        run(EventFilter {
            since: Some(id(4)),
            ..Default::default()
        })
        .await,
        vec![id(5), id(6)]
    );
    assert_eq!(
        run(EventFilter {
            project: Some("q".into()),
            ..Default::default()
        })
        .await,
        vec![id(5)]
    );
    assert_eq!(
        run(EventFilter {
            task_id: Some(7),
            ..Default::default()
        })
        .await,
        vec![id(1), id(2), id(5)]
    );
    // Only the card's own events: the message citing it is left out by the query itself,
    // so newer citing messages can neither cost the read nor push the card's events out.
    assert_eq!(
        run(EventFilter {
            task_id: Some(7),
            card_events_only: true,
            limit: 1,
            ..Default::default()
        })
        .await,
        vec![id(5)]
    );
    assert_eq!(
        run(EventFilter {
            task_id: Some(7),
            card_events_only: true,
            ..Default::default()
        })
        .await,
        vec![id(1), id(5)]
    );
    assert_eq!(
        run(EventFilter {
            task_id: Some(7),
            limit: 2,
            ..Default::default()
        })
        .await,
        vec![id(2), id(5)]
    );
    assert_eq!(
        run(EventFilter {
            limit: 3,
            ..Default::default()
        })
        .await,
        vec![id(4), id(5), id(6)]
    );
    assert_eq!(
        run(EventFilter {
            types: Some(vec![]),
            ..Default::default()
        })
        .await,
        Vec::<i64>::new()
    );
    let latest = s.read(|tx| tx.latest_event_id()).await.expect("latest");
    assert_eq!(latest, id(6));
    let back = s
        .read(|tx| {
            tx.events(&EventFilter {
                types: Some(vec!["message".into()]),
                ..Default::default()
            })
        })
        .await
        .expect("message events");
    assert_eq!(back[0], inserted[2]);
}

/// Cards, lessons, kv and ops round-trip.
pub async fn board_and_documents<S: Store>(s: &S) {
    let card = |title: &str, status: &str, project: &str, assignee: &str| Card {
        id: 999,
        title: title.into(),
        status: status.into(),
        project: project.into(),
        assignee: assignee.into(),
        updated: 5,
        extra: json!({"costUsd": 1.5})
            .as_object()
            .cloned()
            .unwrap_or_default(),
        ..Default::default()
    };
    let (c1, c2, c3) = s
        .write(move |tx| {
            Ok((
                tx.insert_card(card("one", "todo", "p", "a"))?,
                tx.insert_card(card("two", "doing", "p", "b"))?,
                tx.insert_card(card("three", "todo", "q", "a"))?,
            ))
        })
        .await
        .expect("cards");
    assert!(c1.id < c2.id && c2.id < c3.id);
    assert_ne!(c1.id, 999, "the given id is ignored");
    let id1 = c1.id;
    let got = s.read(move |tx| tx.card(id1)).await.expect("card");
    assert_eq!(got.as_ref(), Some(&c1));
    let list = |f: CardFilter| async move {
        s.read(move |tx| tx.cards(&f))
            .await
            .expect("cards")
            .into_iter()
            .map(|c| c.title)
            .collect::<Vec<_>>()
    };
    assert_eq!(list(CardFilter::default()).await, ["one", "two", "three"]);
    assert_eq!(
        list(CardFilter {
            project: Some("p".into()),
            ..Default::default()
        })
        .await,
        ["one", "two"]
    );
    assert_eq!(
        list(CardFilter {
            statuses: Some(vec![trantor_proto::CardStatus::Todo]),
            assignee: Some("a".into()),
            ..Default::default()
        })
        .await,
        ["one", "three"]
    );
    assert_eq!(
        list(CardFilter {
            ids: Some(vec![c2.id, c3.id]),
            ..Default::default()
        })
        .await,
        ["two", "three"]
    );
    let mut moved = c1.clone();
    moved.status = "done".into();
    moved.updated = 9;
    let m2 = moved.clone();
    s.write(move |tx| tx.put_card(&m2)).await.expect("put");
    assert_eq!(
        s.read(move |tx| tx.card(id1)).await.expect("card"),
        Some(moved)
    );
    let id2 = c2.id;
    s.write(move |tx| tx.delete_card(id2))
        .await
        .expect("delete");
    assert!(
        s.read(move |tx| tx.card(id2))
            .await
            .expect("card")
            .is_none()
    );
    assert_eq!(s.read(|tx| tx.counts()).await.expect("counts").cards, 2);

    let lesson = |scope: &str, text: &str| Lesson {
        id: 0,
        scope: scope.into(),
        text: text.into(),
        by: "a".into(),
        ts: 3,
        project: String::new(),
    };
    let (l1, _l2, l3) = s
        .write(move |tx| {
            Ok((
                tx.insert_lesson(lesson("global", "g"))?,
                tx.insert_lesson(lesson("codex", "c"))?,
                tx.insert_lesson(lesson("claude", "k"))?,
            ))
        })
        .await
        .expect("lessons");
    let got = s
        .read(|tx| tx.lessons(&["global".to_string(), "claude".to_string()]))
        .await
        .expect("lessons");
    assert_eq!(got, vec![l1, l3]);

    s.write(|tx| tx.set_kv("policy", &json!({"a": 1})))
        .await
        .expect("kv");
    s.write(|tx| tx.set_kv("policy", &json!({"a": 2})))
        .await
        .expect("kv");
    assert_eq!(
        s.read(|tx| tx.kv("policy")).await.expect("kv"),
        Some(json!({"a": 2}))
    );
    assert_eq!(s.read(|tx| tx.kv("nope")).await.expect("kv"), None);

    let op = |code: u16| OpRecord {
        id: "op1".into(),
        ts: 1,
        code,
        body: json!({"id": code}),
    };
    s.write(move |tx| tx.put_op(&op(200))).await.expect("op");
    s.write(move |tx| tx.put_op(&op(409)))
        .await
        .expect("op again");
    assert_eq!(
        s.read(|tx| tx.op("op1")).await.expect("op").map(|o| o.code),
        Some(200),
        "the first record wins"
    );
}

/// The hub's auth documents (identities, invites, bearer tokens: `auth:<kind>:<key>`) live in
/// kv and are found by prefix: a prefix read returns exactly the keys under it, with their
/// values, whatever `%` or `_` the prefix or its neighbours hold (no pattern leaks), and a
/// replaced document (a revocation) is read back replaced.
pub async fn auth_documents<S: Store>(s: &S) {
    let token_key = |h: &str| format!("auth:token:{h}");
    s.write(move |tx| {
        tx.set_kv(
            &token_key("aa11"),
            &json!({"id": "aa11", "session": "claude:web"}),
        )?;
        tx.set_kv(
            &token_key("bb22"),
            &json!({"id": "bb22", "session": "bob:other"}),
        )?;
        tx.set_kv("auth:tokenx:cc33", &json!({"id": "cc33"}))?;
        tx.set_kv("auth:identity:ff00", &json!({"name": "orch:web"}))?;
        tx.set_kv("auth_token_dd44", &json!({"id": "dd44"}))?;
        tx.set_kv("auth:invite:%_", &json!({"kind": "agent"}))?;
        Ok(())
    })
    .await
    .expect("auth documents");
    let mut tokens = s
        .read(|tx| tx.kv_prefix("auth:token:"))
        .await
        .expect("token prefix");
    tokens.sort_by(|a, b| a.0.cmp(&b.0));
    let keys: Vec<&str> = tokens.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, ["auth:token:aa11", "auth:token:bb22"]);
    assert_eq!(tokens[1].1["session"], "bob:other");
    let invites = s
        .read(|tx| tx.kv_prefix("auth:invite:%"))
        .await
        .expect("invite prefix");
    assert_eq!(invites.len(), 1, "{invites:?}");
    assert!(
        s.read(|tx| tx.kv_prefix("auth:invite:_x"))
            .await
            .expect("no match")
            .is_empty()
    );
    s.write(|tx| {
        tx.set_kv(
            "auth:token:aa11",
            &json!({"id": "aa11", "session": "claude:web", "revokedAt": 5}),
        )
    })
    .await
    .expect("revoke");
    assert_eq!(
        s.read(|tx| tx.kv("auth:token:aa11"))
            .await
            .expect("kv")
            .map(|v| v["revokedAt"].clone()),
        Some(json!(5))
    );
}

/// Imported messages keep their ids (a second import adds nothing); new ids continue above
/// them, and the tip and counts stay exact across the gaps.
pub async fn imported_ids<S: Store>(s: &S) {
    let first = send(s, new_msg("a", "b", 1, "native")).await;
    assert_eq!(first.id, 1);
    let put = |id: i64, text: &str| Message {
        id,
        ts: id,
        from: "a".into(),
        to: "b".into(),
        project: "p".into(),
        text: text.into(),
        re: None,
        kind: None,
        wake: None,
    };
    let batch = vec![put(10, "ten"), put(5, "five"), put(7, "seven")];
    let b2 = batch.clone();
    let added = s
        .write(move |tx| {
            let mut n = 0;
            for m in &b2 {
                n += usize::from(tx.put_message(m, &[3])?);
            }
            Ok(n)
        })
        .await
        .expect("import");
    assert_eq!(added, 3);
    let again = s
        .write(move |tx| {
            let mut n = 0;
            for m in &batch {
                n += usize::from(tx.put_message(m, &[])?);
            }
            Ok(n)
        })
        .await
        .expect("import again");
    assert_eq!(again, 0, "a second import adds nothing");
    assert_eq!(s.read(|tx| tx.tip()).await.expect("tip"), 10);
    assert_eq!(s.read(|tx| tx.counts()).await.expect("counts").messages, 4);
    let next = send(s, new_msg("a", "b", 11, "after")).await;
    assert_eq!(next.id, 11);
    let got: Vec<i64> = s
        .read(|tx| tx.messages_for("b", 0, 0))
        .await
        .expect("read")
        .into_iter()
        .map(|m| m.id)
        .collect();
    assert_eq!(got, vec![1, 5, 7, 10, 11]);
    let citing: Vec<i64> = s
        .read(|tx| tx.messages_citing(3, 0))
        .await
        .expect("citing")
        .into_iter()
        .map(|m| m.id)
        .collect();
    assert_eq!(citing, vec![5, 7, 10]);
    assert_eq!(s.read(|tx| tx.counts()).await.expect("counts").messages, 5);
}

/// Everything acknowledged survives closing and reopening the store.
pub async fn durable_across_reopen<S: Store>(open: impl Fn() -> S) {
    let s = open();
    let mut sent = Vec::new();
    for i in 0..50 {
        sent.push(send(&s, new_msg("a", "b", i, &format!("m{i}"))).await.id);
    }
    s.write(|tx| tx.raise_delivered("b", 3))
        .await
        .expect("raise");
    drop(s);
    let s = open();
    let got: Vec<i64> = s
        .read(|tx| tx.messages_for("b", 0, 0))
        .await
        .expect("read")
        .into_iter()
        .map(|m| m.id)
        .collect();
    assert_eq!(got, sent);
    let p = s.read(|tx| tx.peer("b")).await.expect("peer").expect("b");
    assert_eq!(p.delivered_up_to, 3);
    let next = send(&s, new_msg("a", "b", 99, "after reopen")).await;
    assert!(next.id > sent[sent.len() - 1]);
}

fn entry(state: DeliveryState, ts: i64, session: &str, instance: Option<&str>) -> DeliveryEntry {
    DeliveryEntry {
        state,
        ts,
        session: session.into(),
        instance: instance.map(str::to_string),
        turn: None,
        pid: None,
        outcome: None,
        reason: None,
    }
}

/// The delivery record: states come back in append order with every field; a terminal
/// state closes the message for the open list (which pages oldest first and counts all);
/// the fence is replaced and reports its predecessor; retention removes a pruned message's
/// record with it.
pub async fn delivery_record<S: Store>(s: &S) {
    let m1 = send(s, new_msg("boss", "seat", 10, "one")).await;
    let m2 = send(s, new_msg("boss", "seat", 11, "two")).await;
    let m3 = send(s, new_msg("boss", "seat", 12, "three")).await;
    let other = send(s, new_msg("boss", "elsewhere", 13, "not mine")).await;
    let (i1, i2, i3, io) = (m1.id, m2.id, m3.id, other.id);
    s.write(move |tx| {
        for (id, ts, to) in [
            (i1, 10, "seat"),
            (i2, 11, "seat"),
            (i3, 12, "seat"),
            (io, 13, "elsewhere"),
        ] {
            tx.append_delivery(id, &entry(DeliveryState::Stored, ts, to, None))?;
        }
        assert_eq!(tx.set_delivery_fence("seat", "run-a", 20)?, None);
        tx.append_delivery(
            i1,
            &entry(DeliveryState::Claimed, 21, "seat", Some("run-a")),
        )?;
        let mut started = entry(DeliveryState::Started, 22, "seat", Some("run-a"));
        started.turn = Some(7);
        started.pid = Some(4242);
        tx.append_delivery(i1, &started)?;
        let mut consumed = entry(DeliveryState::Consumed, 23, "seat", Some("run-a"));
        consumed.turn = Some(7);
        consumed.outcome = Some("delivered".into());
        tx.append_delivery(i1, &consumed)?;
        let mut requeued = entry(DeliveryState::Requeued, 24, "seat", Some("run-a"));
        requeued.reason = Some("hub down".into());
        tx.append_delivery(i2, &requeued)?;
        Ok(())
    })
    .await
    .expect("append");

    let states = s
        .read(move |tx| tx.delivery_states(i1))
        .await
        .expect("states");
    let kinds: Vec<DeliveryState> = states.iter().map(|e| e.state).collect();
    assert_eq!(
        kinds,
        vec![
            DeliveryState::Stored,
            DeliveryState::Claimed,
            DeliveryState::Started,
            DeliveryState::Consumed
        ]
    );
    // `stored` is read back from the message: its time and recipient.
    assert_eq!(
        (
            states[0].ts,
            states[0].session.as_str(),
            states[0].instance.as_deref()
        ),
        (10, "seat", None)
    );
    assert_eq!(states[2].turn, Some(7));
    assert_eq!(states[2].pid, Some(4242));
    assert_eq!(states[3].outcome.as_deref(), Some("delivered"));
    assert_eq!(states[3].ts, 23);
    assert!(
        s.read(|tx| tx.delivery_states(999_999))
            .await
            .expect("none")
            .is_empty()
    );

    let (open, total) = s
        .read(|tx| tx.delivery_open("seat", 0))
        .await
        .expect("open");
    assert_eq!(total, 2);
    assert_eq!(open.iter().map(|o| o.id).collect::<Vec<_>>(), vec![i2, i3]);
    assert_eq!(open[0].state, DeliveryState::Requeued);
    assert_eq!(open[0].reason.as_deref(), Some("hub down"));
    assert_eq!(open[0].instance.as_deref(), Some("run-a"));
    assert_eq!(open[1].state, DeliveryState::Stored);
    assert_eq!(open[1].to, "seat");
    assert_eq!(
        open[1].ts, 12,
        "a message only stored is open at its own time"
    );
    // A second `stored` changes nothing; a broadcast has no record.
    let all = send(s, new_msg("boss", BROADCAST, 14, "everyone")).await.id;
    s.write(move |tx| tx.append_delivery(i3, &entry(DeliveryState::Stored, 99, "seat", None)))
        .await
        .expect("stored again");
    let (again, i3_states) = s
        .read(move |tx| Ok((tx.delivery_open("seat", 0)?, tx.delivery_states(i3)?)))
        .await
        .expect("again");
    assert_eq!(again, (open.clone(), 2));
    assert_eq!(i3_states.len(), 1);
    assert_eq!(i3_states[0].ts, 12);
    assert!(
        s.read(move |tx| tx.delivery_states(all))
            .await
            .expect("broadcast")
            .is_empty()
    );
    let (page, total) = s
        .read(|tx| tx.delivery_open("seat", 1))
        .await
        .expect("page");
    assert_eq!((page.len(), total), (1, 2));
    assert_eq!(page[0].id, i2);
    let (none, zero) = s
        .read(|tx| tx.delivery_open("nobody", 10))
        .await
        .expect("none");
    assert!(none.is_empty() && zero == 0);

    // A failed message is closed too; a parked one stays open.
    s.write(move |tx| {
        tx.append_delivery(i2, &entry(DeliveryState::Failed, 30, "seat", Some("run-a")))?;
        tx.append_delivery(i3, &entry(DeliveryState::Parked, 31, "seat", Some("run-a")))
    })
    .await
    .expect("close");
    let (open, total) = s
        .read(|tx| tx.delivery_open("seat", 0))
        .await
        .expect("open");
    assert_eq!(total, 1);
    assert_eq!(open[0].id, i3);
    assert_eq!(open[0].state, DeliveryState::Parked);

    // The fence.
    assert_eq!(
        s.read(|tx| tx.delivery_fence("seat"))
            .await
            .expect("fence")
            .as_deref(),
        Some("run-a")
    );
    let prev = s
        .write(|tx| tx.set_delivery_fence("seat", "run-b", 40))
        .await
        .expect("refence");
    assert_eq!(prev.as_deref(), Some("run-a"));
    assert_eq!(
        s.read(|tx| tx.delivery_fence("seat"))
            .await
            .expect("fence")
            .as_deref(),
        Some("run-b")
    );
    assert_eq!(
        s.read(|tx| tx.delivery_fence("nobody"))
            .await
            .expect("none"),
        None
    );

    // Retention takes a read message's record with it and leaves the rest.
    s.write(move |tx| {
        tx.put_peer(&peer("seat", 1_000, 0))?;
        tx.raise_delivered("seat", i3)?;
        tx.prune(100, 0)
    })
    .await
    .expect("prune");
    assert!(
        s.read(move |tx| tx.delivery_states(i1))
            .await
            .expect("pruned")
            .is_empty()
    );
    let (open, total) = s
        .read(|tx| tx.delivery_open("seat", 0))
        .await
        .expect("open");
    assert!(open.is_empty() && total == 0, "{open:?}");
    let kept = s
        .read(move |tx| tx.delivery_states(io))
        .await
        .expect("kept");
    assert_eq!(kept.len(), 1, "an unread message keeps its record");
}

/// What a store written while `stored` was still logged reads, once the backend's test has
/// given message `id` (to `seat`) such a row at ts 11 and pointed its open entry at it: that
/// row once (not doubled by the one made from the message), also in the open list.
pub async fn a_logged_stored_state_is_read_once<S: Store>(s: &S, id: i64) {
    let (states, (open, total)) = s
        .read(move |tx| Ok((tx.delivery_states(id)?, tx.delivery_open("seat", 0)?)))
        .await
        .expect("read");
    let kinds: Vec<_> = states.iter().map(|e| (e.state.as_str(), e.ts)).collect();
    assert_eq!(kinds, [("stored", 11)], "the logged row, once");
    assert_eq!(total, 1);
    assert_eq!(
        (open[0].id, open[0].state.as_str(), open[0].ts),
        (id, "stored", 11)
    );
}

/// The cost ledger: a turn is recorded once per `(session, instance, turn)`; reads add up
/// tokens and known dollars per card, seat, day and credential with the filters applied; a turn
/// with unknown usage (or tokens without dollars) counts as a turn and as `unknown`, and an
/// estimate marks the sum; nothing
/// matching is an all-zero total and no groups.
pub async fn cost_ledger<S: Store>(s: &S) {
    use crate::{CostBy, CostQuery};
    use trantor_proto::{TokenUsage, TurnReport};
    let day = 86_400_000_i64;
    let t = |session: &str, turn: u64, card: i64, usage: Option<(u64, u64, u64, u64)>| TurnReport {
        session: session.into(),
        instance: "run-1".into(),
        turn,
        project: "p".into(),
        card,
        agent: "claude".into(),
        model: "m".into(),
        credential: (session == "a:p").then(|| "work".to_string()),
        outcome: "completed".into(),
        usage: usage.map(|(input, output, cache_read, cache_write)| TokenUsage {
            input,
            output,
            cache_read,
            cache_write,
        }),
        usd: usage.map(|_| 0.5),
        estimated: false,
        source: "test".into(),
    };
    let first = t("a:p", 1, 7, Some((100, 10, 1000, 5)));
    let again = first.clone();
    let first_copy = first.clone();
    let mut est = t("a:p", 2, 7, Some((1, 2, 0, 0)));
    est.estimated = true;
    est.usd = Some(0.25);
    let unknown = t("b:p", 1, 7, None);
    let other = t("b:p", 2, 9, Some((3, 4, 0, 0)));
    let mut unpriced = t("c:p", 1, 20, Some((10, 0, 0, 0)));
    unpriced.usd = None;
    let recorded = s
        .write(move |tx| {
            Ok([
                tx.record_turn(10 * day + 5, &first)?,
                tx.record_turn(10 * day + 6, &again)?,
                tx.record_turn(10 * day + 7, &est)?,
                tx.record_turn(11 * day, &unknown)?,
                tx.record_turn(11 * day + 1, &other)?,
                tx.record_turn(11 * day + 2, &unpriced)?,
            ])
        })
        .await
        .expect("record");
    assert_eq!(recorded, [true, false, true, true, true, true]);
    let all = s.read(|tx| tx.all_turns()).await.expect("all turns");
    assert_eq!(all.len(), 5, "the repeat is not a row");
    assert_eq!(all[0].0, 10 * day + 5);
    assert_eq!(all[0].1, first_copy, "every field comes back");
    assert_eq!(all[2].1.usage, None, "unknown usage stays unknown");
    let card7 = CostQuery {
        card: Some(7),
        ..Default::default()
    };
    let total = s
        .read(move |tx| tx.cost(&card7, CostBy::Total, 0))
        .await
        .expect("cost");
    assert_eq!(total.len(), 1);
    let c = &total[0].1;
    assert_eq!(
        (c.tokens_in, c.tokens_out, c.cache_read, c.cache_write),
        (1106, 12, 1000, 5)
    );
    assert_eq!((c.turns, c.unknown, c.estimated), (3, 1, true));
    assert!((c.usd - 0.75).abs() < 1e-9, "{}", c.usd);
    let by_card = s
        .read(|tx| tx.cost(&CostQuery::default(), CostBy::Card, 0))
        .await
        .expect("by card");
    let keys: Vec<&str> = by_card.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, ["7", "9", "20"], "largest dollars first");
    let c20 = &by_card[2].1;
    assert_eq!(
        (c20.tokens_in, c20.unknown, c20.turns),
        (10, 1, 1),
        "tokens without a price: counted, dollars unknown"
    );
    let by_seat = s
        .read(|tx| tx.cost(&CostQuery::default(), CostBy::Seat, 1))
        .await
        .expect("by seat");
    assert_eq!(by_seat.len(), 1, "the limit applies");
    assert_eq!(by_seat[0].0, "a:p");
    let by_day = s
        .read(|tx| tx.cost(&CostQuery::default(), CostBy::Day, 0))
        .await
        .expect("by day");
    let mut days: Vec<(String, u64)> = by_day.iter().map(|(k, c)| (k.clone(), c.turns)).collect();
    days.sort();
    assert_eq!(
        days,
        [("1970-01-11".to_string(), 2), ("1970-01-12".to_string(), 3)]
    );
    let by_cred = s
        .read(|tx| tx.cost(&CostQuery::default(), CostBy::Credential, 0))
        .await
        .expect("by credential");
    let mut creds: Vec<&str> = by_cred.iter().map(|(k, _)| k.as_str()).collect();
    creds.sort();
    assert_eq!(creds, ["", "work"]);
    let since = CostQuery {
        session: Some("b:p".into()),
        since_ts: Some(11 * day + 1),
        project: Some("p".into()),
        cards: Some(vec![9, 10]),
        ..Default::default()
    };
    let late = s
        .read(move |tx| tx.cost(&since, CostBy::Total, 0))
        .await
        .expect("since");
    assert_eq!((late[0].1.turns, late[0].1.tokens_in), (1, 3));
    let none = CostQuery {
        card: Some(12345),
        ..Default::default()
    };
    let empty = s
        .read(move |tx| {
            Ok((
                tx.cost(&none, CostBy::Total, 0)?,
                tx.cost(&none, CostBy::Card, 0)?,
            ))
        })
        .await
        .expect("nothing");
    assert_eq!(empty.0.len(), 1);
    assert_eq!(empty.0[0].1, trantor_proto::CostSummary::default());
    assert!(empty.1.is_empty());
}

/// The contract tally (kept as contracts commit, are answered and are pruned) counts what a
/// scan of the ledger's rows counts: windows starting inside a bucket and on its edge, with and
/// without a project, the superseded and overdue split, and again after retention.
pub async fn ledger_tally_matches_scan<S: Store>(s: &S) {
    const H: i64 = TALLY_BUCKET_MS;
    let base = 100 * H;
    let mut contracts: Vec<i64> = Vec::new();
    for i in 0..150i64 {
        let ts = base + i * (H / 25) + 7;
        let w = format!("w{}", i % 3);
        let mut m = new_msg("orch", &w, ts, &format!("m{i}"));
        match i % 7 {
            1 => m.wake = Some(false),
            2 => m.project = "q".into(),
            3 => m = new_msg(&w, "orch", ts, "done"),
            5 => {
                m = new_msg(&w, "orch", ts, "done, by re");
                m.re = contracts.get(contracts.len().saturating_sub(4)).copied();
            }
            6 => m.kind = Some("receipt".into()),
            _ => {}
        }
        let from_orch = m.from == "orch";
        let sent = send(s, m).await;
        if from_orch {
            contracts.push(sent.id);
        }
    }
    let sinces = [
        base - 1,
        base + H / 2 + 3,
        base + 2 * H,
        base + 3 * H + H / 3,
        base + 4 * H + 5,
        base + 5 * H + 1,
    ];
    for since in sinces {
        for project in [None, Some("q")] {
            check_tally(s, since, project).await;
        }
    }
    // The reaper's pages: each assignee's open, unrecorded contracts in (ts, id) order, page by
    // page, skipping the ones it recorded.
    let q = LedgerQuery {
        sender: "orch".into(),
        since_ts: base + H / 2,
        ..LedgerQuery::default()
    };
    let (q1, q2) = (q.clone(), q.clone());
    s.ledger_current()
        .await
        .expect("the ledger holds every message");
    let all = s
        .read(move |tx| tx.ledger_rows(&q1, 0, 0, true))
        .await
        .expect("open rows");
    let first = all
        .iter()
        .find(|r| r.contract.to == "w0")
        .expect("w0")
        .contract
        .id;
    s.write(move |tx| tx.mark_reaped("orch", first, base, "test"))
        .await
        .expect("mark");
    let paged = s
        .read(move |tx| {
            let mut out = Vec::new();
            for w in ["w0", "w1", "w2"] {
                let mut after = (i64::MIN, i64::MIN);
                loop {
                    let page = tx.ledger_unreaped(&q2, w, after, 3)?;
                    let Some(last) = page.last() else { break };
                    after = (last.contract.ts, last.contract.id);
                    out.extend(page.iter().map(|r| r.contract.id));
                }
            }
            Ok(out)
        })
        .await
        .expect("pages");
    let mut want: Vec<i64> = all
        .iter()
        .map(|r| r.contract.id)
        .filter(|id| *id != first)
        .collect();
    let mut got = paged.clone();
    want.sort_unstable();
    got.sort_unstable();
    assert!(want.len() > 10, "{want:?}");
    assert_eq!(got, want, "unrecorded open contracts, each once");
    // The catch-up's reads: the open ids per assignee from the index, then single rows.
    let q3 = q.clone();
    let (ids, one) = s
        .read(move |tx| {
            let mut ids = Vec::new();
            for w in ["w0", "w1", "w2"] {
                // In chunks of 4, each after the last key, as the catch-up's merge asks.
                let mut after = None;
                loop {
                    let keys = tx.ledger_open_ids(&q3, w, after, 4)?;
                    after = keys.last().copied();
                    ids.extend(keys.iter().map(|k| k.1));
                    if keys.len() < 4 {
                        break;
                    }
                }
            }
            Ok((ids, tx.ledger_row("orch", first)?))
        })
        .await
        .expect("ids");
    let mut ids = ids;
    ids.sort_unstable();
    let mut open_ids: Vec<i64> = all.iter().map(|r| r.contract.id).collect();
    open_ids.sort_unstable();
    assert_eq!(ids, open_ids, "the open ids of the window");
    let one = one.expect("the row");
    assert_eq!(one.contract.id, first);
    assert!(one.reaped.is_some() && one.answer.is_none(), "{one:?}");
    // Retention drops the first two hours (every message read).
    let tip = *contracts.last().expect("contracts") + 10;
    s.write(move |tx| {
        for who in ["orch", "w0", "w1", "w2"] {
            tx.put_peer(&peer(who, base, 0))?;
            tx.raise_delivered(who, tip)?;
        }
        tx.prune(base + 2 * H + H / 3, 0)
    })
    .await
    .expect("prune");
    for since in sinces {
        check_tally(s, since, None).await;
    }
}

/// One window's tally read against a scan of its rows.
async fn check_tally<S: Store>(s: &S, since: i64, project: Option<&str>) {
    let q = LedgerQuery {
        sender: "orch".into(),
        project: project.map(str::to_string),
        since_ts: since,
        overdue_cut: Some(since + 4 * TALLY_BUCKET_MS),
        supersede_cut: since + 3 * TALLY_BUCKET_MS,
    };
    s.ledger_current()
        .await
        .expect("the ledger holds every message");
    let (mut groups, counts, rows) = s
        .read(move |tx| {
            let mut window = tx.ledger_window(&q)?;
            let mut groups = window.groups.clone();
            let tally = window.take_tally();
            for g in &mut groups {
                tx.ledger_split(&q, &tally, g)?;
            }
            let rows = tx.ledger_rows(&q, 0, 0, false)?;
            Ok((groups, window.closed, rows))
        })
        .await
        .expect("ledger");
    let answered = rows.iter().filter(|r| r.answer.is_some()).count() as i64;
    let ack = rows.iter().filter(|r| r.answer.is_none() && r.ack).count() as i64;
    assert_eq!(
        (counts.answered, counts.ack),
        (answered, ack),
        "closed counts from {since}, project {project:?}"
    );
    let mut scanned: Vec<crate::OpenGroup> = Vec::new();
    for r in rows.iter().filter(|r| r.answer.is_none() && !r.ack) {
        let i = match scanned.iter().position(|g| g.assignee == r.contract.to) {
            Some(i) => i,
            None => {
                scanned.push(crate::OpenGroup {
                    assignee: r.contract.to.clone(),
                    ..Default::default()
                });
                scanned.len() - 1
            }
        };
        let superseded = r.contract.ts < since + 3 * TALLY_BUCKET_MS && r.overtaken;
        let g = &mut scanned[i];
        g.open += 1;
        g.superseded += i64::from(superseded);
        g.overdue += i64::from(!superseded && r.contract.ts <= since + 4 * TALLY_BUCKET_MS);
    }
    scanned.sort_by(|a, b| a.assignee.cmp(&b.assignee));
    groups.sort_by(|a, b| a.assignee.cmp(&b.assignee));
    assert_eq!(
        groups, scanned,
        "open groups from {since}, project {project:?}"
    );
}

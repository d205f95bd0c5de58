//! The hub's shared state: the store handle plus the in-process parts that are never persisted
//! (wake registry, presence cache, SSE feed, metrics, in-flight `_op`s).

use crate::config::Config;
use crate::metrics::Metrics;
use crate::presence::{Presence, Touch};
use crate::wake::WakeRegistry;
use serde_json::{Map, Value, json};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use tokio::sync::{broadcast, watch};
use trantor_proto::{Event, Message, Peer, now_ms, session_project};
use trantor_store::{NewEvent, OpRecord, ReadTx, Store, StoreError, WriteTx};

/// What the SSE feed carries: committed messages and events.
#[derive(Debug, Clone)]
pub enum FeedItem {
    /// A stored message.
    Message(Arc<Message>),
    /// A stored event.
    Event(Arc<Event>),
}

/// What a write produced, published once it is committed.
#[derive(Debug, Default)]
pub struct Outbox {
    /// New messages (rung in the wake registry and sent to SSE).
    pub messages: Vec<Message>,
    /// New events (sent to SSE).
    pub events: Vec<Event>,
}

impl Outbox {
    /// Record an event inserted in this write.
    pub fn event(&mut self, tx: &mut dyn WriteTx, ev: NewEvent) -> Result<(), StoreError> {
        let e = tx.insert_event(ev)?;
        self.events.push(e);
        Ok(())
    }

    /// Record the `message` event of `msg`, a message a hub service inserted in this write
    /// (by its sender, at its time), and queue the message for the wake registry and SSE.
    pub fn posted(&mut self, tx: &mut dyn WriteTx, msg: Message) -> Result<Message, StoreError> {
        let data = json!({ "msgId": msg.id, "toSession": msg.to, "text": msg.text });
        self.event(tx, event(msg.ts, "message", &msg.project, &msg.from, data))?;
        self.messages.push(msg.clone());
        Ok(msg)
    }
}

/// A JSON document the hub keeps under one key of the store's kv (a ledger, a list with its
/// last id). A missing or unreadable document reads as the default; one that cannot be encoded
/// fails the write rather than replace the stored one with `null`.
pub trait KvDoc: serde::Serialize + serde::de::DeserializeOwned + Default {
    /// Its kv key.
    const KEY: &'static str;
    /// What it is, for a store error.
    const WHAT: &'static str;

    /// The document a kv value holds.
    fn from_kv(v: Option<Value>) -> Self {
        v.and_then(|v| serde_json::from_value(v).ok())
            .unwrap_or_default()
    }

    /// Read it.
    fn load<T: ReadTx + ?Sized>(tx: &T) -> Result<Self, StoreError> {
        Ok(Self::from_kv(tx.kv(Self::KEY)?))
    }

    /// Write it, in the caller's transaction.
    fn save(&self, tx: &mut dyn WriteTx) -> Result<(), StoreError> {
        let v = serde_json::to_value(self).map_err(|e| StoreError::db_from(Self::WHAT, e))?;
        tx.set_kv(Self::KEY, &v)
    }
}

/// The state every handler gets (cheap to clone).
pub type AppState<S> = Arc<Hub<S>>;

/// Everything the hub runs on.
#[derive(Debug)]
pub struct Hub<S> {
    /// The persistent store.
    pub store: S,
    /// Configuration.
    pub cfg: Config,
    /// Held polls waiting for messages.
    pub wake: WakeRegistry,
    /// `lastSeen` cache and held-poll counts.
    pub presence: Presence,
    /// Committed messages and events for SSE streams.
    pub feed: broadcast::Sender<FeedItem>,
    /// Counters.
    pub metrics: Metrics,
    /// `_op`s being run right now (a duplicate waits for the first to finish).
    pub ops_in_flight: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Flips to true when the hub shuts down (held polls and streams end).
    pub shutdown: watch::Receiver<bool>,
    /// When this hub process started, ms (a never-seen duty session gets its dark window
    /// from here).
    pub started_ms: i64,
    /// The outcome of the newest store write: `Some((ms, error))` while writes fail, so
    /// `/health` says "not ok" when the disk is full instead of 200.
    pub last_write_error: Mutex<Option<(i64, String)>>,
    /// Signed-identity state (the nonce replay cache).
    pub auth: AuthState,
}

impl<S: Store> Hub<S> {
    /// Run a route's write. Under an `_op`, the op's "committed" marker is recorded in the same
    /// transaction, so a crash can never keep the change and lose the op (see [`crate::ops`]).
    pub fn write<R, F>(&self, f: F) -> impl std::future::Future<Output = Result<R, StoreError>>
    where
        F: FnOnce(&mut dyn WriteTx) -> Result<R, StoreError> + Send + 'static,
        R: Send + 'static,
    {
        let op = current_op();
        let fut = self.store.write(move |tx| {
            let r = f(tx)?;
            if let Some(key) = op {
                tx.put_op(&marker(key))?;
            }
            Ok(r)
        });
        async move {
            let out = fut.await;
            self.note_write(out.as_ref().err());
            out
        }
    }

    /// Record a write's outcome for `/health` (every store failure is a failed write; the
    /// hub's closures never make up errors of their own).
    pub fn note_write(&self, err: Option<&StoreError>) {
        let mut last = self
            .last_write_error
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        match err {
            None => *last = None,
            Some(StoreError::Closed) => {}
            Some(e) => *last = Some((trantor_proto::now_ms(), e.to_string())),
        }
    }

    /// The newest write failure, while writes fail.
    pub fn write_failure(&self) -> Option<(i64, String)> {
        self.last_write_error
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Whether an SSE stream is open: the only readers of the feed's messages (the MCP mount
    /// reads its events), so a message is put on the feed, or read back from the shared store
    /// when another hub committed it, only then.
    pub fn streams_open(&self) -> bool {
        self.metrics.streams_open.load(Ordering::SeqCst) > 0
    }

    /// Publish what a committed write produced: ring the wake registry, feed SSE streams.
    pub fn publish(&self, out: Outbox) {
        let streams = self.streams_open();
        for m in out.messages {
            self.wake.ring(&m.to);
            if streams {
                let _ = self.feed.send(FeedItem::Message(Arc::new(m)));
            }
        }
        if self.feed.receiver_count() > 0 {
            for e in out.events {
                let _ = self.feed.send(FeedItem::Event(Arc::new(e)));
            }
        }
    }

    /// A stored peer row with the live presence overlaid (`lastSeen`, `online`, `health`).
    pub fn live_peer(&self, mut p: Peer, now: i64) -> Peer {
        self.presence.overlay(&mut p, now);
        p.health = health(&p.status).to_string();
        p
    }

    /// The online ones of stored peer rows at `now`, live presence overlaid, each with a
    /// project (its session's suffix when the row has none).
    pub fn online_peers(&self, peers: Vec<Peer>, now: i64) -> Vec<Peer> {
        peers
            .into_iter()
            .map(|p| self.live_peer(p, now))
            .filter(|p| p.online)
            .map(|mut p| {
                if p.project.is_empty() {
                    p.project = session_project(&p.session).to_string();
                }
                p
            })
            .collect()
    }

    /// Whether `session` is online now.
    pub fn online(&self, session: &str, now: i64) -> bool {
        self.presence.is_online(session, now)
    }
}

/// `health` derived from a status text: `down…` → down, `errored…` → errored, else ok.
pub fn health(status: &str) -> &'static str {
    let s = status.trim_start();
    if s.starts_with("down") {
        "down"
    } else if s.starts_with("errored") {
        "errored"
    } else {
        "ok"
    }
}

/// Inside a write: when a touch found the session coming online, make sure its peer row exists
/// with `lastSeen = now` and write the `presence.online` event.
pub fn persist_edge(
    tx: &mut dyn WriteTx,
    out: &mut Outbox,
    session: &str,
    touch: Touch,
    now: i64,
) -> Result<(), StoreError> {
    if touch != Touch::CameOnline {
        return Ok(());
    }
    let peer = match tx.peer(session)? {
        Some(mut p) => {
            p.last_seen = p.last_seen.max(now);
            p
        }
        None => new_peer(session, now),
    };
    tx.put_peer(&peer)?;
    out.event(tx, online_event(&peer, session, now))
}

/// The `presence.online` event of `session` (its peer row `peer`) coming online at `now`.
pub fn online_event(peer: &Peer, session: &str, now: i64) -> NewEvent {
    event(
        now,
        "presence.online",
        &peer.project,
        session,
        json!({ "status": peer.status }),
    )
}

/// A fresh peer row: project from the session's suffix.
pub fn new_peer(session: &str, now: i64) -> Peer {
    Peer {
        session: session.to_string(),
        last_seen: now,
        online: true,
        health: "ok".into(),
        project: session_project(session).to_string(),
        ..Peer::default()
    }
}

/// Build an event with type-specific fields from a JSON object.
pub fn event(ts: i64, kind: &str, project: &str, by: &str, data: Value) -> NewEvent {
    let data = match data {
        Value::Object(m) => m,
        _ => Map::new(),
    };
    let task_id = data.get("taskId").and_then(Value::as_i64);
    NewEvent {
        ts,
        kind: kind.to_string(),
        project: project.to_string(),
        by: by.to_string(),
        task_id,
        refs: Vec::new(),
        data,
    }
}

tokio::task_local! {
    /// The store key of the `_op` the current request runs under, if any.
    static CURRENT_OP: String;
}

/// The store key of the `_op` the current request runs under (read by [`Hub::write`]).
pub fn current_op() -> Option<String> {
    CURRENT_OP.try_with(Clone::clone).ok()
}

/// The marker a route write records beside its changes: committed, reply pending.
pub fn marker(key: String) -> OpRecord {
    OpRecord {
        id: key,
        ts: now_ms(),
        code: 0,
        body: Value::Null,
    }
}

/// Run `fut` as the request of the `_op` whose store key is `key`: every [`Hub::write`] inside
/// it records the op's marker beside its changes.
pub async fn under_op<F: std::future::Future>(key: String, fut: F) -> F::Output {
    CURRENT_OP.scope(key, fut).await
}

/// Most `pubkey:nonce` pairs remembered at once; beyond it the oldest is forgotten.
pub const NONCE_CAP: usize = 100_000;

/// The replay cache: every `pubkey:nonce` accepted, kept until its signature's ts is out of
/// the clock window (after which the signature is refused as `stale` anyway).
#[derive(Debug, Default)]
pub struct NonceCache {
    inner: Mutex<NonceInner>,
}

#[derive(Debug, Default)]
struct NonceInner {
    seen: HashMap<String, i64>,
    order: VecDeque<(i64, String)>,
}

impl NonceCache {
    /// Records `key` (valid until `expires`); false when it was already recorded (a replay).
    pub fn check_and_insert(&self, key: String, expires: i64, now: i64) -> bool {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        while let Some((exp, _)) = g.order.front() {
            if *exp >= now && g.order.len() < NONCE_CAP {
                break;
            }
            if let Some((exp, k)) = g.order.pop_front()
                && g.seen.get(&k) == Some(&exp)
            {
                g.seen.remove(&k);
            }
        }
        if g.seen.get(&key).is_some_and(|e| *e >= now) {
            return false;
        }
        g.seen.insert(key.clone(), expires);
        g.order.push_back((expires, key));
        true
    }

    /// How many pairs are remembered.
    pub fn len(&self) -> usize {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .seen
            .len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The hub's in-process auth state.
#[derive(Debug, Default)]
pub struct AuthState {
    /// Replay memory.
    pub nonces: NonceCache,
}

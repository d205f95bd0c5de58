//! The seat's outbound bus traffic: one background task that posts `/register` and `/send`
//! calls in order, off the wake path.
//!
//! A `/send` (receipts, notices, announcements) that meets an unreachable hub is kept and
//! retried with a bounded back-off until the hub answers, so a hub outage loses no receipt; a
//! hub that *refuses* a send (4xx) is logged and the send dropped. A `/register` is a presence
//! touch: one attempt, errors swallowed, since a later touch supersedes it. The delivery
//! record's fence and marks (docs/protocol.md "Delivery", docs/runner.md §24) go the same way, in
//! order and retried through an outage (the hub appends a repeated mark only once); against a
//! hub without the record (the original's: `/delivery/fence` is 404) they stop, logged once.
//! Each turn's cost record (`POST /turns`, docs/protocol.md §7.6) goes the same way: retried
//! through an outage (the hub counts a repeat once), given up on a hub without the ledger.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use trantor_proto::delivery::DeliveryMark;
use trantor_proto::{ClientError, HubClient, RegisterRequest, SendRequest, TurnReport};

/// Sends queued while the hub is down, at most; the oldest go first when over.
const QUEUE_CAP: usize = 1000;

enum Out {
    Register(Box<RegisterRequest>),
    Send {
        req: Box<SendRequest>,
        outcome: bool,
        op: String,
    },
    Flush(oneshot::Sender<()>),
    Fence {
        session: String,
        instance: String,
    },
    Mark(Box<DeliveryMark>),
    Turn(Box<TurnReport>),
}

/// A handle to the writer task.
#[derive(Clone)]
pub struct Bus {
    tx: mpsc::UnboundedSender<Out>,
    outcomes: Arc<Mutex<HashSet<i64>>>,
    op_prefix: Arc<str>,
    op_seq: Arc<std::sync::atomic::AtomicU64>,
}

impl std::fmt::Debug for Bus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Bus")
    }
}

impl Bus {
    /// Start the writer for `hub`; `backoff_max` bounds the retry interval.
    pub fn start(hub: HubClient, backoff_max: Duration) -> Bus {
        let (tx, rx) = mpsc::unbounded_channel();
        let outcomes = Arc::new(Mutex::new(HashSet::new()));
        tokio::spawn(writer(hub, rx, outcomes.clone(), backoff_max));
        // Each send carries an idempotency key, so a retry after a lost reply never posts twice.
        let op_prefix: Arc<str> =
            format!("runner-{}-{}", std::process::id(), trantor_proto::now_ms()).into();
        Bus {
            tx,
            outcomes,
            op_prefix,
            op_seq: Arc::default(),
        }
    }

    /// Queue a `/register` (presence and phase).
    pub fn register(&self, req: RegisterRequest) {
        let _ = self.tx.send(Out::Register(Box::new(req)));
    }

    /// Queue a `/send`.
    pub fn send(&self, req: SendRequest) {
        self.queue(req, false);
    }

    fn queue(&self, req: SendRequest, outcome: bool) {
        let n = self
            .op_seq
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let _ = self.tx.send(Out::Send {
            req: Box::new(req),
            outcome,
            op: format!("{}-{n}", self.op_prefix),
        });
    }

    /// Queue a `/send` whose id is remembered as one of this runner's outcome notices (so a
    /// bare acknowledgement of it is a receipt, not a wake).
    pub fn send_outcome(&self, req: SendRequest) {
        self.queue(req, true);
    }

    /// Queue `POST /delivery/fence`: this runner instance is the session's current one.
    pub fn fence(&self, session: &str, instance: &str) {
        let _ = self.tx.send(Out::Fence {
            session: session.to_string(),
            instance: instance.to_string(),
        });
    }

    /// Queue a delivery-record mark (`POST /delivery`).
    pub fn mark(&self, mark: DeliveryMark) {
        let _ = self.tx.send(Out::Mark(Box::new(mark)));
    }

    /// Queue a finished turn's cost record (`POST /turns`, docs/protocol.md §7.6).
    pub fn turn(&self, report: TurnReport) {
        let _ = self.tx.send(Out::Turn(Box::new(report)));
    }

    /// Wait (up to `within`) until everything queued so far has been posted.
    pub async fn flush(&self, within: Duration) {
        let (tx, rx) = oneshot::channel();
        if self.tx.send(Out::Flush(tx)).is_ok() {
            let _ = tokio::time::timeout(within, rx).await;
        }
    }

    /// The ids of this runner's outcome notices.
    pub fn sent_outcomes(&self) -> HashSet<i64> {
        self.outcomes.lock().map(|s| s.clone()).unwrap_or_default()
    }
}

async fn writer(
    hub: HubClient,
    mut rx: mpsc::UnboundedReceiver<Out>,
    outcomes: Arc<Mutex<HashSet<i64>>>,
    backoff_max: Duration,
) {
    let reg_hub = hub.clone().with_timeout(Duration::from_secs(5));
    let mut backlog: std::collections::VecDeque<Out> = Default::default();
    let mut backoff = Duration::from_millis(500);
    let mut down_logged = false;
    // The hub keeps no delivery record (an original hub): marks are not sent.
    let mut no_record = false;
    let mut superseded_logged = false;
    // The hub keeps no cost ledger (an original hub, or one older than it): turns are not sent.
    let mut no_ledger = false;
    loop {
        let item = match backlog.pop_front() {
            Some(i) => i,
            None => match rx.recv().await {
                Some(i) => i,
                None => return,
            },
        };
        match item {
            Out::Register(req) => {
                if let Err(e) = reg_hub.register(&req).await {
                    tracing::debug!("register ({:?}) failed: {e}", req.status);
                }
            }
            Out::Flush(done) => {
                let _ = done.send(());
            }
            Out::Fence { session, instance } => match hub.delivery_fence(&session, &instance).await
            {
                Ok(r) => {
                    tracing::info!(
                        "delivery record: {session} fenced as instance {instance}{}",
                        r.previous
                            .map(|p| format!(" (superseding {p})"))
                            .unwrap_or_default()
                    );
                }
                Err(e) if retry_later(&e) => {
                    held(
                        &mut backlog,
                        &mut rx,
                        Out::Fence { session, instance },
                        &mut down_logged,
                        &e,
                        "delivery fence",
                    );
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(backoff_max);
                }
                Err(e) if e.status() == Some(404) => {
                    no_record = true;
                    tracing::info!(
                        "the hub keeps no delivery record (/delivery is 404) — carrying on with the runner's own disk"
                    );
                }
                Err(e) => tracing::warn!("delivery fence refused: {e}"),
            },
            Out::Mark(_) if no_record => {}
            Out::Mark(m) => match hub.delivery_mark(&m).await {
                Ok(_) => {}
                Err(e) if retry_later(&e) => {
                    held(
                        &mut backlog,
                        &mut rx,
                        Out::Mark(m),
                        &mut down_logged,
                        &e,
                        "delivery mark",
                    );
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(backoff_max);
                }
                Err(ClientError::Superseded { session, current }) => {
                    if !superseded_logged {
                        tracing::error!(
                            "the hub refuses this runner's delivery marks: {session} is fenced by instance {current} (another runner took the seat)"
                        );
                        superseded_logged = true;
                    }
                }
                Err(e) => tracing::debug!("delivery mark {} {:?} refused: {e}", m.id, m.state),
            },
            Out::Turn(_) if no_ledger => {}
            Out::Turn(t) => match hub.report_turn(&t).await {
                Ok(_) => {}
                Err(e) if retry_later(&e) => {
                    held(
                        &mut backlog,
                        &mut rx,
                        Out::Turn(t),
                        &mut down_logged,
                        &e,
                        "turn cost record",
                    );
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(backoff_max);
                }
                Err(e) if e.status() == Some(404) => {
                    no_ledger = true;
                    tracing::info!(
                        "the hub keeps no cost ledger (/turns is 404) — turn costs stay in the seat's own log"
                    );
                }
                Err(e) => tracing::warn!("turn {} cost record refused: {e}", t.turn),
            },
            Out::Send { req, outcome, op } => match hub
                .post_with_op::<SendRequest, trantor_proto::SendReply>("/send", &req, &op)
                .await
            {
                Ok(r) => {
                    backoff = Duration::from_millis(500);
                    if down_logged {
                        tracing::info!("hub reachable again — queued bus messages are going out");
                        down_logged = false;
                    }
                    if outcome && let Ok(mut s) = outcomes.lock() {
                        s.insert(r.id);
                        // Outcome ids only matter for recent acknowledgements.
                        if s.len() > 2000 {
                            let min = s.iter().copied().min().unwrap_or(0);
                            s.remove(&min);
                        }
                    }
                }
                Err(e) if e.is_unreachable() || e.status().is_some_and(|s| s >= 500) => {
                    if !down_logged {
                        tracing::warn!(
                            "bus message to {} held: {e} — it will be sent when the hub answers",
                            req.to.as_deref().unwrap_or("all")
                        );
                        down_logged = true;
                    }
                    backlog.push_front(Out::Send { req, outcome, op });
                    // Take what else is queued, in order, so the cap applies to all of it.
                    while let Ok(i) = rx.try_recv() {
                        backlog.push_back(i);
                    }
                    while backlog.len() > QUEUE_CAP {
                        backlog.pop_front();
                        tracing::warn!("bus backlog over {QUEUE_CAP}: oldest message dropped");
                    }
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(backoff_max);
                }
                Err(e) => {
                    tracing::warn!(
                        "hub refused a bus message to {}: {e}",
                        req.to.as_deref().unwrap_or("all")
                    );
                }
            },
        }
    }
}

/// The hub could not take it now (unreachable, 5xx): keep it for a later attempt.
fn retry_later(e: &ClientError) -> bool {
    e.is_unreachable() || e.status().is_some_and(|s| s >= 500)
}

/// Put `item` back at the head of the backlog, with what else is queued behind it (in order,
/// under the cap).
fn held(
    backlog: &mut std::collections::VecDeque<Out>,
    rx: &mut mpsc::UnboundedReceiver<Out>,
    item: Out,
    down_logged: &mut bool,
    e: &ClientError,
    what: &str,
) {
    if !*down_logged {
        tracing::warn!("{what} held: {e} — it will be sent when the hub answers");
        *down_logged = true;
    }
    backlog.push_front(item);
    while let Ok(i) = rx.try_recv() {
        backlog.push_back(i);
    }
    while backlog.len() > QUEUE_CAP {
        backlog.pop_front();
        tracing::warn!("bus backlog over {QUEUE_CAP}: oldest message dropped");
    }
}

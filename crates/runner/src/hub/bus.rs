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
use trantor_proto::backoff::Backoff;
use trantor_proto::delivery::DeliveryMark;
use trantor_proto::{ClientError, HubClient, RegisterRequest, SendRequest, TurnReport};

/// Whether a fence the hub holds for `current` is a stale one, late from a runner this one
/// replaced, rather than a successor's (docs/runner.md §24.1). Instance ids are
/// `<pid>.<boot ms>`: an instance that booted before `mine` (by boot time, then pid) did not
/// replace it — its fence reached the hub after this runner's own (a request in flight when it
/// was killed) — so this runner fences again. Ids that do not parse are a successor's: never
/// second-guessed.
pub fn stale_fence(current: &str, mine: &str) -> bool {
    fn parse(id: &str) -> Option<(i64, u32)> {
        let (pid, ms) = id.split_once('.')?;
        Some((ms.parse().ok()?, pid.parse().ok()?))
    }
    match (parse(current), parse(mine)) {
        (Some(c), Some(m)) => c < m,
        _ => false,
    }
}

/// How many times in a row a mark refused for a stale fence re-fences before the runner counts
/// itself superseded.
const MAX_REFENCES: u32 = 3;

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

/// What the writer learned that the seat must act on: the hub fenced the session to another
/// runner instance, and whether the hub is in an outage for the writer.
#[derive(Debug, Default)]
pub struct Watch {
    /// The instance the hub says is the session's current runner, once a mark was refused
    /// (409 superseded); never cleared.
    superseded: Mutex<Option<String>>,
    /// Wakes a task waiting for [`Watch::superseded`].
    notify: tokio::sync::Notify,
    /// The writer holds items for a hub that does not answer.
    outage: std::sync::atomic::AtomicBool,
}

impl Watch {
    fn set_superseded(&self, current: &str) {
        if let Ok(mut s) = self.superseded.lock()
            && s.is_none()
        {
            *s = Some(current.to_string());
        }
        self.notify.notify_waiters();
    }

    fn set_outage(&self, down: bool) {
        self.outage
            .store(down, std::sync::atomic::Ordering::Relaxed);
    }
}

/// A handle to the writer task.
#[derive(Clone)]
pub struct Bus {
    tx: mpsc::UnboundedSender<Out>,
    outcomes: Arc<Mutex<HashSet<i64>>>,
    watch: Arc<Watch>,
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
        let watch = Arc::new(Watch::default());
        tokio::spawn(writer(
            hub,
            rx,
            outcomes.clone(),
            watch.clone(),
            backoff_max,
        ));
        // Each send carries an idempotency key, so a retry after a lost reply never posts twice.
        let op_prefix: Arc<str> =
            format!("runner-{}-{}", std::process::id(), trantor_proto::now_ms()).into();
        Bus {
            tx,
            outcomes,
            watch,
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

    /// The instance that superseded this runner on the hub's delivery fence, once the hub
    /// refused one of its marks (docs/runner.md §24.1).
    pub fn superseded(&self) -> Option<String> {
        self.watch.superseded.lock().ok().and_then(|s| s.clone())
    }

    /// Resolves once the hub has refused this runner as superseded.
    pub async fn wait_superseded(&self) -> String {
        loop {
            let notified = self.watch.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(c) = self.superseded() {
                return c;
            }
            notified.await;
        }
    }

    /// Before a turn that carries contracts (docs/runner.md §24.1): wait, up to `within`, for
    /// the marks queued so far (the batch's `claimed`) to be answered, so a fence that moved to
    /// another instance is known before a CLI is spawned. No wait while the writer is holding
    /// items for a hub that does not answer: a hub outage never delays a turn. Returns the
    /// superseding instance, if any.
    pub async fn settle_marks(&self, within: Duration) -> Option<String> {
        if !self.watch.outage.load(std::sync::atomic::Ordering::Relaxed) {
            self.flush(within).await;
        }
        self.superseded()
    }

    /// The ids of this runner's outcome notices.
    pub fn sent_outcomes(&self) -> HashSet<i64> {
        self.outcomes.lock().map(|s| s.clone()).unwrap_or_default()
    }
}

/// The outbound writer's state: the hub, the queue and what it learnt of the hub.
struct Writer {
    hub: HubClient,
    /// `hub` with the short timeout of a presence touch.
    reg_hub: HubClient,
    rx: mpsc::UnboundedReceiver<Out>,
    outcomes: Arc<Mutex<HashSet<i64>>>,
    watch: Arc<Watch>,
    /// Held items, oldest first, sent before anything newer.
    backlog: std::collections::VecDeque<Out>,
    backoff: Backoff,
    down_logged: bool,
    /// The hub keeps no delivery record (an original hub): marks are not sent.
    no_record: bool,
    superseded_logged: bool,
    /// The hub keeps no cost ledger (an original hub, or one older than it): turns are not sent.
    no_ledger: bool,
    /// Fences taken back from a stale holder since the last accepted mark.
    refences: u32,
}

async fn writer(
    hub: HubClient,
    rx: mpsc::UnboundedReceiver<Out>,
    outcomes: Arc<Mutex<HashSet<i64>>>,
    watch: Arc<Watch>,
    backoff_max: Duration,
) {
    let mut w = Writer {
        reg_hub: hub.clone().with_timeout(Duration::from_secs(5)),
        hub,
        rx,
        outcomes,
        watch,
        backlog: Default::default(),
        backoff: Backoff::new(Duration::from_millis(500), backoff_max),
        down_logged: false,
        no_record: false,
        superseded_logged: false,
        no_ledger: false,
        refences: 0,
    };
    loop {
        let item = match w.backlog.pop_front() {
            Some(i) => i,
            None => match w.rx.recv().await {
                Some(i) => i,
                None => return,
            },
        };
        match item {
            Out::Register(req) => {
                if let Err(e) = w.reg_hub.register(&req).await {
                    tracing::debug!("register ({:?}) failed: {e}", req.status);
                }
            }
            Out::Flush(done) => {
                let _ = done.send(());
            }
            Out::Fence { session, instance } => w.fence(session, instance).await,
            Out::Mark(_) if w.no_record => {}
            Out::Mark(m) => w.mark(m).await,
            Out::Turn(_) if w.no_ledger => {}
            Out::Turn(t) => w.turn(t).await,
            Out::Send { req, outcome, op } => w.send(req, outcome, op).await,
        }
    }
}

impl Writer {
    /// The delivery record's fence (docs/runner.md §24.1).
    async fn fence(&mut self, session: String, instance: String) {
        match self.hub.delivery_fence(&session, &instance).await {
            Ok(r) => {
                self.watch.set_outage(false);
                tracing::info!(
                    "delivery record: {session} fenced as instance {instance}{}",
                    r.previous
                        .map(|p| format!(" (superseding {p})"))
                        .unwrap_or_default()
                );
            }
            Err(e) if retry_later(&e) => {
                self.watch.set_outage(true);
                held(
                    &mut self.backlog,
                    &mut self.rx,
                    Out::Fence { session, instance },
                    &mut self.down_logged,
                    &e,
                    "delivery fence",
                );
                self.backoff.sleep().await;
            }
            Err(e) if e.status() == Some(404) => {
                self.no_record = true;
                tracing::info!(
                    "the hub keeps no delivery record (/delivery is 404) — carrying on with the runner's own disk"
                );
            }
            Err(e) => tracing::warn!("delivery fence refused: {e}"),
        }
    }

    /// A delivery mark; a stale fence is taken back first (docs/runner.md §24.1).
    async fn mark(&mut self, m: Box<DeliveryMark>) {
        match self.hub.delivery_mark(&m).await {
            Ok(_) => {
                self.refences = 0;
                self.watch.set_outage(false);
            }
            Err(e) if retry_later(&e) => {
                self.watch.set_outage(true);
                held(
                    &mut self.backlog,
                    &mut self.rx,
                    Out::Mark(m),
                    &mut self.down_logged,
                    &e,
                    "delivery mark",
                );
                self.backoff.sleep().await;
            }
            Err(ClientError::Superseded { session, current })
                if self.refences < MAX_REFENCES && stale_fence(&current, &m.instance) =>
            {
                // A runner this one replaced got its fence in late: take it back, then
                // send the mark again (docs/runner.md §24.1).
                self.refences += 1;
                tracing::warn!(
                    "the hub fenced {session} to instance {current}, which booted before this runner (a predecessor's late fence) — fencing again"
                );
                let fence = Out::Fence {
                    session,
                    instance: m.instance.clone(),
                };
                self.backlog.push_front(Out::Mark(m));
                self.backlog.push_front(fence);
            }
            Err(ClientError::Superseded { session, current }) => {
                self.watch.set_outage(false);
                self.watch.set_superseded(&current);
                if !self.superseded_logged {
                    tracing::error!(
                        "the hub refuses this runner's delivery marks: {session} is fenced by instance {current} (another runner took the seat)"
                    );
                    self.superseded_logged = true;
                }
            }
            Err(e) => tracing::debug!("delivery mark {} {:?} refused: {e}", m.id, m.state),
        }
    }

    /// A turn's cost record (docs/protocol.md §7.6).
    async fn turn(&mut self, t: Box<TurnReport>) {
        match self.hub.report_turn(&t).await {
            Ok(_) => {}
            Err(e) if retry_later(&e) => {
                held(
                    &mut self.backlog,
                    &mut self.rx,
                    Out::Turn(t),
                    &mut self.down_logged,
                    &e,
                    "turn cost record",
                );
                self.backoff.sleep().await;
            }
            Err(e) if e.status() == Some(404) => {
                self.no_ledger = true;
                tracing::info!(
                    "the hub keeps no cost ledger (/turns is 404) — turn costs stay in the seat's own log"
                );
            }
            Err(e) => tracing::warn!("turn {} cost record refused: {e}", t.turn),
        }
    }

    /// A `/send`: held through an outage (the backlog capped), dropped when refused.
    async fn send(&mut self, req: Box<SendRequest>, outcome: bool, op: String) {
        match self
            .hub
            .post_with_op::<SendRequest, trantor_proto::SendReply>("/send", &req, &op)
            .await
        {
            Ok(r) => {
                self.watch.set_outage(false);
                self.backoff.reset();
                if self.down_logged {
                    tracing::info!("hub reachable again — queued bus messages are going out");
                    self.down_logged = false;
                }
                if outcome && let Ok(mut s) = self.outcomes.lock() {
                    s.insert(r.id);
                    // Outcome ids only matter for recent acknowledgements.
                    if s.len() > 2000 {
                        let min = s.iter().copied().min().unwrap_or(0);
                        s.remove(&min);
                    }
                }
            }
            Err(e) if e.is_unreachable() || e.status().is_some_and(|s| s >= 500) => {
                self.watch.set_outage(true);
                if !self.down_logged {
                    tracing::warn!(
                        "bus message to {} held: {e} — it will be sent when the hub answers",
                        req.to.as_deref().unwrap_or("all")
                    );
                    self.down_logged = true;
                }
                self.backlog.push_front(Out::Send { req, outcome, op });
                // Take what else is queued, in order, so the cap applies to all of it.
                while let Ok(i) = self.rx.try_recv() {
                    self.backlog.push_back(i);
                }
                while self.backlog.len() > QUEUE_CAP {
                    self.backlog.pop_front();
                    tracing::warn!("bus self.backlog over {QUEUE_CAP}: oldest message dropped");
                }
                self.backoff.sleep().await;
            }
            Err(e) => {
                tracing::warn!(
                    "hub refused a bus message to {}: {e}",
                    req.to.as_deref().unwrap_or("all")
                );
            }
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

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A hub that answers every request after `delay` with 409 superseded (fenced to `J`).
    async fn fenced_hub(delay: Duration) -> String {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}", l.local_addr().expect("addr"));
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 8192];
                    let _ = s.read(&mut buf).await;
                    tokio::time::sleep(delay).await;
                    let body = r#"{"error":"superseded: session a:p is fenced by instance J","current":"J"}"#;
                    let reply = format!(
                        "HTTP/1.1 409 Conflict\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = s.write_all(reply.as_bytes()).await;
                });
            }
        });
        url
    }

    #[tokio::test]
    async fn settling_the_marks_learns_a_moved_fence_before_a_spawn() {
        let bus = Bus::start(
            HubClient::new(fenced_hub(Duration::from_millis(300)).await),
            Duration::from_millis(500),
        );
        bus.mark(DeliveryMark::new(
            7,
            "a:p",
            "I",
            trantor_proto::delivery::MarkState::Claimed,
        ));
        // Not known yet at once (the mark is in flight) ...
        assert_eq!(bus.superseded(), None);
        // ... but known once the queued marks were answered, which a turn waits for.
        assert_eq!(
            bus.settle_marks(Duration::from_secs(5)).await.as_deref(),
            Some("J")
        );
        tokio::time::timeout(Duration::from_secs(1), bus.wait_superseded())
            .await
            .expect("a waiter sees it too");
    }

    /// A hub fenced to a predecessor's late instance `100.1`: it refuses marks (409) until it is
    /// fenced again. Returns the URL and how many fences it took.
    async fn stale_fenced_hub() -> (String, Arc<std::sync::atomic::AtomicUsize>) {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let l = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}", l.local_addr().expect("addr"));
        let fences = Arc::new(AtomicUsize::new(0));
        let f2 = fences.clone();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                let fences = f2.clone();
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 8192];
                    let n = s.read(&mut buf).await.unwrap_or(0);
                    let req = String::from_utf8_lossy(&buf[..n]).to_string();
                    let (status, body) = if req.starts_with("POST /delivery/fence") {
                        fences.fetch_add(1, Ordering::SeqCst);
                        (
                            "200 OK",
                            r#"{"ok":true,"session":"a:p","instance":"200.5","previous":"100.1"}"#,
                        )
                    } else if fences.load(Ordering::SeqCst) == 0 {
                        (
                            "409 Conflict",
                            r#"{"error":"superseded: session a:p is fenced by instance 100.1","current":"100.1"}"#,
                        )
                    } else {
                        (
                            "200 OK",
                            r#"{"ok":true,"id":7,"state":"claimed","appended":true}"#,
                        )
                    };
                    let reply = format!(
                        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = s.write_all(reply.as_bytes()).await;
                });
            }
        });
        (url, fences)
    }

    #[tokio::test]
    async fn a_predecessors_late_fence_is_taken_back_not_obeyed() {
        let (url, fences) = stale_fenced_hub().await;
        let bus = Bus::start(HubClient::new(url), Duration::from_millis(500));
        bus.mark(DeliveryMark::new(
            7,
            "a:p",
            "200.5",
            trantor_proto::delivery::MarkState::Claimed,
        ));
        assert_eq!(bus.settle_marks(Duration::from_secs(5)).await, None);
        assert_eq!(fences.load(std::sync::atomic::Ordering::SeqCst), 1);
    }

    #[test]
    fn a_fence_held_by_an_instance_that_booted_earlier_is_stale_and_taken_back() {
        // (the hub's current instance, mine, stale)
        let table = [
            // A predecessor's late fence (it booted first): take the fence back.
            ("100.1700000000000", "200.1700000005000", true),
            // Same boot millisecond: the pid orders them.
            ("100.1700000000000", "200.1700000000000", true),
            // A successor (booted later): superseded.
            ("300.1700000009000", "200.1700000005000", false),
            ("200.1700000005000", "200.1700000005000", false),
            // Not ours to judge: an id of another shape is a successor's.
            ("usurper", "200.1700000005000", false),
            ("", "200.1700000005000", false),
            ("100.1700000000000", "mine", false),
        ];
        for (i, (current, mine, stale)) in table.into_iter().enumerate() {
            assert_eq!(stale_fence(current, mine), stale, "row {i}");
        }
    }
}

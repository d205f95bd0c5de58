//! The message bus: `/send`, `/inbox`, `/poll`, `/delivered`, `/recent`, `/contracts`.

use crate::domain::cards::{card_refs, move_card, push_log, truncate};
use crate::domain::ledger::{LedgerPage, compute_ledger};
use crate::domain::policy::project_of_session;
use crate::error::{ApiError, ApiResult, check_len, check_opt, check_required, check_secrets};
use crate::extract::{JsonBody, Params};
use crate::front;
use crate::presence::Touch;
use crate::state::{AppState, Hub, Outbox, event, persist_edge};
use crate::wake::{Armed, Ticket};
use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use trantor_proto::limits;
use trantor_proto::{
    BROADCAST, CardStatus, DeliveredReply, DeliveredRequest, InboxReply, Message, RecentReply,
    SendReply, SendRequest, now_ms,
};
use trantor_store::{NewMessage, ReadTx, Store, StoreError, WriteTx};

/// Longest text copied into a `message` event.
const EVENT_TEXT: usize = 2000;
/// Default `/recent` page.
const RECENT_DEFAULT: usize = 50;

/// `POST /send`: store a message, its `message` event and the ask block/unblock, in one write.
pub async fn send<S: Store>(
    State(hub): State<AppState<S>>,
    JsonBody(req): JsonBody<SendRequest>,
) -> ApiResult<Json<SendReply>> {
    let text = req.text.replace('\0', "");
    let from = req.from.trim().to_string();
    if from.is_empty() || text.trim().is_empty() {
        return Err(ApiError::bad_request("from and non-empty text required"));
    }
    check_len("from", &from, limits::SESSION)?;
    check_opt("to", &req.to, limits::SESSION)?;
    check_opt("project", &req.project, limits::PROJECT)?;
    check_opt("kind", &req.kind, limits::KIND)?;
    check_len("text", &text, limits::MESSAGE_TEXT)?;
    // The POST layer has scanned the whole body (text included) for secrets already; the text
    // needs a second look only when removing NULs changed it (a NUL can split a secret).
    if text.len() != req.text.len() {
        check_secrets([text.as_str()])?;
    }

    let to = req
        .to
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty())
        .unwrap_or_else(|| BROADCAST.to_string());
    let explicit_project = req
        .project
        .map(|p| p.trim().to_string())
        .filter(|p| !p.is_empty());
    let re = req.re.filter(|&r| r > 0);
    let kind = req
        .kind
        .map(|k| k.trim().to_string())
        .filter(|k| !k.is_empty());
    let wake = (req.wake == Some(false)).then_some(false);
    let refs = card_refs(&text);
    let now = now_ms();
    let touch = hub.presence.touch(&from, now);
    // The sender's project: given, else cached from its peer row (no read inside the write).
    let known_project = match explicit_project {
        Some(p) => Some(p),
        None => hub.presence.project(&from).map(|p| p.to_string()),
    };
    let learn_project = known_project.is_none();

    let sender = from.clone();
    let keep_record = !hub.cfg.no_delivery_record;
    let result = hub
        .write(move |tx| {
            let mut out = Outbox::default();
            persist_edge(tx, &mut out, &from, touch, now)?;
            let project = match known_project {
                Some(p) => p,
                None => project_of_session(tx, &from)?,
            };
            let msg = tx.insert_message(
                NewMessage {
                    ts: now,
                    from: from.clone(),
                    to: to.clone(),
                    project: project.clone(),
                    text: text.clone(),
                    re,
                    kind: kind.clone(),
                    wake,
                },
                &refs,
            )?;
            if keep_record {
                crate::domain::delivery::record_stored(tx, &msg)?;
            }
            let mut ev = event(
                now,
                "message",
                &project,
                &from,
                json!({
                    "msgId": msg.id,
                    "toSession": to,
                    "text": truncate(&text, EVENT_TEXT),
                    "refs": refs,
                }),
            );
            ev.refs = refs.clone();
            out.event(tx, ev)?;
            if msg.kind.as_deref() == Some("ask") {
                ask_block(tx, &mut out, &msg, &refs, now)?;
            }
            if let Some(re) = re {
                ask_answer(tx, &mut out, &msg, re, now)?;
            }
            let id = msg.id;
            out.messages.push(msg);
            Ok((id, project, out))
        })
        .await;
    match result {
        Ok((id, project, out)) => {
            if learn_project {
                hub.presence.set_project(&sender, &project, false);
            }
            hub.publish(out);
            hub.metrics.messages_sent.fetch_add(1, Ordering::Relaxed);
            Ok(Json(SendReply { ok: true, id }))
        }
        Err(e) => {
            if touch == Touch::CameOnline {
                hub.presence.forget_edge(&sender);
            }
            Err(e.into())
        }
    }
}

/// `kind:"ask"`: the first cited card of the message's project that is not blocked yet moves
/// to blocked, with the question on its log.
fn ask_block(
    tx: &mut dyn WriteTx,
    out: &mut Outbox,
    msg: &Message,
    refs: &[i64],
    now: i64,
) -> Result<(), StoreError> {
    for &r in refs {
        let Some(mut card) = tx.card(r)? else {
            continue;
        };
        if card.project != msg.project || card.status == CardStatus::Blocked {
            continue;
        }
        if let Some(ev) = move_card(&mut card, CardStatus::Blocked, &msg.from, None, now) {
            push_log(
                &mut card,
                now,
                &msg.from,
                &truncate(&msg.text, limits::LOG_TEXT),
            );
            tx.put_card(&card)?;
            out.event(tx, ev)?;
        }
        break;
    }
    Ok(())
}

/// A reply (`re`) to an ask: the card the ask cited moves from blocked back to doing, with
/// "answered: <text>" on its log.
fn ask_answer(
    tx: &mut dyn WriteTx,
    out: &mut Outbox,
    msg: &Message,
    re: i64,
    now: i64,
) -> Result<(), StoreError> {
    let Some(ask) = tx.message(re)? else {
        return Ok(());
    };
    if ask.kind.as_deref() != Some("ask") {
        return Ok(());
    }
    for r in card_refs(&ask.text) {
        let Some(mut card) = tx.card(r)? else {
            continue;
        };
        if card.project != ask.project {
            continue;
        }
        if card.status == CardStatus::Blocked {
            let note = format!("answered: {}", msg.text);
            if let Some(ev) = move_card(&mut card, CardStatus::Doing, &msg.from, None, now) {
                push_log(
                    &mut card,
                    now,
                    &msg.from,
                    &truncate(&note, limits::LOG_TEXT),
                );
                tx.put_card(&card)?;
                out.event(tx, ev)?;
            }
        }
        break;
    }
    Ok(())
}

/// One page of a session's inbox.
#[derive(Debug, Default)]
struct Page {
    reply: InboxReply,
}

impl Page {
    fn has_news(&self) -> bool {
        !self.reply.messages.is_empty() || self.reply.rewound
    }
}

fn read_page(tx: &dyn ReadTx, session: &str, since: i64) -> Result<Page, StoreError> {
    let tip = tx.tip()?;
    if since > tip {
        return Ok(Page {
            reply: InboxReply {
                messages: Vec::new(),
                cursor: tip,
                rewound: true,
                more: false,
            },
        });
    }
    let mut messages = tx.messages_for(session, since, limits::INBOX_PAGE + 1)?;
    let more = messages.len() > limits::INBOX_PAGE;
    messages.truncate(limits::INBOX_PAGE);
    let cursor = messages.last().map(|m| m.id).unwrap_or(since);
    Ok(Page {
        reply: InboxReply {
            messages,
            cursor,
            rewound: false,
            more,
        },
    })
}

/// Read a page and, unless peeking, raise the delivery ledger to its cursor — in one write so
/// the ledger is durable before the reply that advances it.
async fn deliver<S: Store>(
    hub: &Hub<S>,
    session: &str,
    since: i64,
    touch: Touch,
    raise: bool,
) -> ApiResult<Page> {
    let s = session.to_string();
    let now = now_ms();
    let (page, out) = hub
        .write(move |tx| {
            let mut out = Outbox::default();
            persist_edge(tx, &mut out, &s, touch, now)?;
            let page = read_page(tx, &s, since)?;
            if raise && page.reply.cursor > 0 {
                tx.raise_delivered(&s, page.reply.cursor)?;
            }
            Ok((page, out))
        })
        .await
        .inspect_err(|_| {
            if touch == Touch::CameOnline {
                hub.presence.forget_edge(session);
            }
        })?;
    hub.publish(out);
    Ok(page)
}

fn session_param(p: &Params) -> ApiResult<String> {
    let s = p.required("session")?;
    check_len("session", s, limits::SESSION)?;
    Ok(s.to_string())
}

/// `GET /inbox?session&since&peek`: a non-blocking read.
pub async fn inbox<S: Store>(
    State(hub): State<AppState<S>>,
    p: Params,
) -> ApiResult<Json<InboxReply>> {
    let session = session_param(&p)?;
    let since = p.int("since")?.unwrap_or(0).max(0);
    let peek = p.flag("peek")?;
    let touch = hub.presence.touch(&session, now_ms());
    let page = if peek && touch != Touch::CameOnline {
        let s = session.clone();
        hub.store.read(move |tx| read_page(tx, &s, since)).await?
    } else {
        deliver(&hub, &session, since, touch, !peek).await?
    };
    Ok(Json(page.reply))
}

/// Parse `wait` (seconds, may be fractional): absent → the default, capped at the maximum;
/// non-numeric or negative → 400 (the original held such a poll forever).
fn wait_param(p: &Params) -> ApiResult<Duration> {
    let Some(raw) = p.text("wait") else {
        return Ok(Duration::from_secs(limits::POLL_WAIT_DEFAULT_S));
    };
    let secs: f64 = raw
        .parse()
        .ok()
        .filter(|v: &f64| v.is_finite())
        .ok_or_else(|| ApiError::bad_request("wait must be a number of seconds"))?;
    if secs < 0.0 {
        return Err(ApiError::bad_request("wait must not be negative"));
    }
    Ok(Duration::from_secs_f64(
        secs.min(limits::POLL_WAIT_MAX_S as f64),
    ))
}

/// `GET /poll?session&since&wait[&peek]`: held until a deliverable message commits or `wait` passes.
///
/// The hold is a [`PollHold`], a small state between looks that [`front::drive`] drives.
/// Served by the plain-HTTP front ([`crate::front`]), it is handed back as a parked reply, so
/// while it waits the connection keeps only that state, not the router's futures.
pub async fn poll<S: Store>(
    State(hub): State<AppState<S>>,
    parkable: Option<axum::Extension<front::Parkable>>,
    p: Params,
) -> ApiResult<Response> {
    let session = session_param(&p)?;
    let since = p.int("since")?.unwrap_or(0).max(0);
    let wait = wait_param(&p)?;
    // `peek=1`: a seat's own tools wait without moving the ledger, which is its runner's.
    let raise = !p.flag("peek")?;
    drop(p);
    let deadline = tokio::time::Instant::now() + wait;
    let parked = parkable.is_some();
    let hold = Box::new(PollHold::new(hub, &session, since, deadline, raise, parked));
    Ok(if parked {
        front::park(hold)
    } else {
        // Without the front (TLS, HTTP/1.0, a poll with a body) there is no socket to watch:
        // the driver answers at news or the deadline, and never without a reply.
        match front::drive(hold, None).await {
            Some(resp) => resp,
            None => ApiError::with(
                axum::http::StatusCode::SERVICE_UNAVAILABLE,
                "the poll ended without a reply",
                serde_json::Value::Null,
            )
            .into_response(),
        }
    })
}

/// A held poll between looks: what a waiting `/poll` costs, besides the driver's wait.
///
/// It counts its session present ([`Presence::begin_hold`]) and holds a wake [`Ticket`]
/// from creation until it is dropped — answered, expired, or its client gone. The session's
/// name is the ticket's, one allocation shared with the wake slot.
struct PollHold<S: Store> {
    hub: AppState<S>,
    ticket: Ticket,
    since: i64,
    deadline: tokio::time::Instant,
    /// Raise the delivery ledger (not `peek`).
    raise: bool,
    /// Served by the front: this hold counts its own reply in the metrics (the router's layer
    /// saw a placeholder).
    parked: bool,
    /// The first look may find the session coming online (a write); later ones are reads.
    touch: Touch,
    /// A look after a wake-up (counted when it finds news).
    woken: bool,
    /// The last look's empty page: the reply at the deadline.
    last: InboxReply,
}

impl<S: Store> PollHold<S> {
    fn new(
        hub: AppState<S>,
        session: &str,
        since: i64,
        deadline: tokio::time::Instant,
        raise: bool,
        parked: bool,
    ) -> Self {
        let touch = hub.presence.touch(session, now_ms());
        hub.presence.begin_hold(session);
        let ticket = hub.wake.subscribe(&Arc::from(session));
        PollHold {
            hub,
            ticket,
            since,
            deadline,
            raise,
            parked,
            touch,
            woken: false,
            last: InboxReply::default(),
        }
    }

    fn session(&self) -> &Arc<str> {
        self.ticket.session()
    }

    /// The reply, counted in the metrics when the router's layer did not see it.
    fn answer(&self, reply: ApiResult<InboxReply>) -> Response {
        let resp = reply.map(Json).into_response();
        if self.parked {
            self.hub
                .metrics
                .request("GET", "/poll", resp.status().as_u16());
        }
        resp
    }
}

impl<S: Store> Drop for PollHold<S> {
    fn drop(&mut self) {
        self.hub.presence.end_hold(self.ticket.session());
        self.hub.wake.unsubscribe(&self.ticket);
    }
}

impl<S: Store> front::Hold for PollHold<S> {
    fn arm(&self) -> Armed {
        self.hub.wake.armed(&self.ticket)
    }

    fn look(mut self: Box<Self>) -> front::Looking {
        Box::pin(async move {
            let session = self.session().clone();
            let looked = look(&self.hub, &session, self.since, self.touch, self.raise).await;
            self.touch = Touch::Seen;
            let page = match looked {
                Ok(page) => page,
                Err(e) => return Ok(self.answer(Err(e))),
            };
            if page.has_news() {
                if self.woken {
                    self.hub.metrics.polls_woken.fetch_add(1, Ordering::Relaxed);
                }
                self.hub.presence.touch(&session, now_ms());
                return Ok(self.answer(Ok(page.reply)));
            }
            if *self.hub.shutdown.borrow() {
                return Ok(self.answer(Ok(page.reply)));
            }
            // The next look follows a wake-up.
            self.woken = true;
            self.last = page.reply;
            Err(self as Box<dyn front::Hold>)
        })
    }

    fn deadline(&self) -> tokio::time::Instant {
        self.deadline
    }

    fn expire(mut self: Box<Self>) -> Response {
        self.hub
            .metrics
            .polls_timed_out
            .fetch_add(1, Ordering::Relaxed);
        self.hub.presence.touch(self.session(), now_ms());
        let reply = std::mem::take(&mut self.last);
        self.answer(Ok(reply))
    }
}

/// One look of a poll: the page from `since` (a write when the session comes online, else a
/// read with the ledger raise queued after it).
async fn look<S: Store>(
    hub: &AppState<S>,
    session: &Arc<str>,
    since: i64,
    touch: Touch,
    raise: bool,
) -> ApiResult<Page> {
    if touch == Touch::CameOnline {
        return deliver(hub, session, since, touch, raise).await;
    }
    let s = session.clone();
    let page = hub.store.read(move |tx| read_page(tx, &s, since)).await?;
    if raise && page.has_news() {
        raise_after_reply(hub, session, page.reply.cursor);
    }
    Ok(page)
}

/// Raise `session`'s delivery ledger to `up_to` in the next group commit, after the reply that
/// hands those messages out (docs/protocol.md §5.3). The write is queued here, before the reply
/// is sent, so it commits no later than any write the client makes after reading the reply;
/// until it commits, reads of the peer on this hub overlay the value ([`Presence::note_delivered`]).
/// A crash in between leaves the stored ledger below what was answered: those messages count as
/// unread again (at-least-once), none is lost.
///
/// [`Presence::note_delivered`]: crate::presence::Presence::note_delivered
fn raise_after_reply<S: Store>(hub: &AppState<S>, session: &str, up_to: i64) {
    if up_to <= 0 {
        return;
    }
    hub.presence.note_delivered(session, up_to);
    let hub = hub.clone();
    let session = session.to_string();
    let mut raise = Box::pin(async move {
        let s = session.clone();
        let out = hub
            .store
            .write(move |tx| tx.raise_delivered(&s, up_to))
            .await;
        hub.note_write(out.as_ref().err());
        if let Err(e) = out {
            tracing::warn!(%session, up_to, error = %e, "the ledger raise after a poll reply failed");
        }
    });
    // Polled once here, so the write is queued before the reply leaves; a task waits for its
    // outcome (the task's first poll registers its own waker).
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    if raise.as_mut().poll(&mut cx).is_pending() {
        tokio::spawn(raise);
    }
}

/// `POST /delivered {session, upTo}`: raise the session's delivery ledger.
pub async fn delivered<S: Store>(
    State(hub): State<AppState<S>>,
    JsonBody(req): JsonBody<DeliveredRequest>,
) -> ApiResult<Json<DeliveredReply>> {
    let session = check_required("session", &req.session, limits::SESSION)?;
    let now = now_ms();
    let touch = hub.presence.touch(&session, now);
    let up_to = req.up_to.max(0);
    let (value, out) = hub
        .write(move |tx| {
            let mut out = Outbox::default();
            persist_edge(tx, &mut out, &session, touch, now)?;
            // Never past the newest message: a ledger beyond it would hide mail not sent yet.
            let v = tx.raise_delivered(&session, up_to.min(tx.tip()?))?;
            Ok((v, out))
        })
        .await?;
    hub.publish(out);
    Ok(Json(DeliveredReply {
        ok: true,
        delivered_up_to: value,
    }))
}

/// `GET /recent?limit`: the newest messages of every kind.
pub async fn recent<S: Store>(
    State(hub): State<AppState<S>>,
    p: Params,
) -> ApiResult<Json<RecentReply>> {
    let limit = p
        .count("limit")?
        .map(|l| usize::try_from(l).unwrap_or(usize::MAX))
        .unwrap_or(RECENT_DEFAULT)
        .min(limits::RECENT_MAX);
    let messages = hub.store.read(move |tx| tx.recent_messages(limit)).await?;
    Ok(Json(RecentReply { messages }))
}

/// `GET /contracts?session&project&windowMs&overdueMs&limit&cursor`: the dispatch ledger of a
/// session, one page of rows with the counts of every page.
pub async fn contracts<S: Store>(
    State(hub): State<AppState<S>>,
    p: Params,
) -> ApiResult<Json<trantor_proto::ContractsReply>> {
    let session = session_param(&p)?;
    let project = p.text("project").map(str::to_string);
    let window = p
        .count("windowMs")?
        .unwrap_or(hub.cfg.contract_window_ms)
        .max(60_000);
    let overdue = p.count("overdueMs")?;
    let page = LedgerPage {
        after: p.count("cursor")?.unwrap_or(0),
        limit: p
            .count("limit")?
            .map(|l| usize::try_from(l).unwrap_or(usize::MAX))
            .unwrap_or(limits::CONTRACTS_PAGE)
            .clamp(1, limits::CONTRACTS_PAGE_MAX),
        rows: crate::domain::ledger::PageRows::All,
    };
    let now = now_ms();
    // Every message committed before this read is in the ledger (docs/protocol.md §5.6).
    hub.store.ledger_current().await?;
    let reply = compute_ledger(
        &hub,
        &session,
        project.as_deref(),
        now,
        window,
        overdue,
        page,
    )
    .await?;
    Ok(Json(reply))
}

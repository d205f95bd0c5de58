//! The duty service's routes (`POST /duty/failure`, `POST /overseer/duty`) and `/catchup`, the
//! "what happened since I last looked" digest the session-start hook and `relay_catchup` read
//! (`docs/protocol.md` §5.7, §11.2, §11.3).

use crate::auth::{AuthContext, AuthMode};
use crate::domain::cards::cards_of;
use crate::domain::duty::APPOINTED_KEY;
use crate::domain::ledger::compute_ledger;
use crate::domain::policy::project_or_suffix;
use crate::duty;
use crate::error::{ApiError, ApiResult, check_len, check_opt, non_blank};
use crate::extract::{JsonBody, Params};
use crate::state::{AppState, Outbox};
use axum::Json;
use axum::extract::{Extension, State};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use trantor_proto::{
    AppointReply, AppointRequest, BROADCAST, CardBrief, CatchupContracts, CatchupPeer,
    CatchupReply, CatchupSince, DutyFailure, DutyFailureReply, FailureRequest, OpenContract,
    limits, now_ms, session_project,
};
use trantor_store::{EventFilter, ReadTx, Store, StoreError};

/// Longest failure detail kept.
const DETAIL_CAP: usize = 500;
/// Most messages a catch-up returns.
const CATCHUP_MESSAGES: usize = 50;
/// Most card events a catch-up returns.
const CATCHUP_EVENTS: usize = 50;

/// `POST /duty/failure`: a duty seat reports a nudge it could not make. Only the duty session
/// may report. The reporter is the signer's identity; else `by` (or `session`); else — the
/// original MCP server's `relay_duty_failure` names nobody — on a hub that does not enforce
/// signatures, an unsigned report counts as the duty session's (`docs/protocol.md` §11.2).
pub async fn failure<S: Store>(
    State(hub): State<AppState<S>>,
    ctx: Option<Extension<AuthContext>>,
    JsonBody(req): JsonBody<FailureRequest>,
) -> ApiResult<Json<DutyFailureReply>> {
    let signer = ctx.and_then(|Extension(c)| c.identity).map(|i| i.name);
    let named = req
        .by
        .or(req.session)
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty());
    check_opt("by", &named, limits::SESSION)?;
    let anonymous_ok = signer.is_none() && named.is_none() && hub.cfg.auth != AuthMode::Enforce;
    let by = signer.or(named).unwrap_or_default();
    check_len("recipient", &req.recipient, limits::SESSION)?;
    check_opt("project", &req.project, limits::PROJECT)?;
    let recipient = req.recipient.trim().to_string();
    if recipient.is_empty() {
        return Err(ApiError::bad_request("recipient required"));
    }
    let kind = req.kind.trim().to_string();
    if !matches!(kind.as_str(), "relay-403" | "skipped-nudge") {
        return Err(ApiError::bad_request(
            "kind must be relay-403 or skipped-nudge",
        ));
    }
    let project = project_or_suffix(req.project.as_deref().map(str::trim), &recipient);
    let text: String = req.detail.chars().take(DETAIL_CAP).collect();
    let cfg_duty = hub.cfg.duty_session.clone();
    let now = now_ms();
    let result = hub
        .store
        .write(move |tx| {
            let duty = crate::domain::duty::duty_session(cfg_duty.as_deref(), tx)?;
            let by = match &duty {
                Some(d) if anonymous_ok || *d == by => d.clone(),
                _ => return Ok(Err(duty)),
            };
            let failure = DutyFailure {
                ts: now,
                project: project.clone(),
                recipient,
                kind,
                text,
                by: by.clone(),
            };
            let record = serde_json::to_value(&failure).unwrap_or(Value::Null);
            let mut out = Outbox::default();
            duty::record_failure(tx, &mut out, record, &project, &by, now)?;
            Ok(Ok((failure, out)))
        })
        .await?;
    match result {
        Ok((failure, out)) => {
            hub.publish(out);
            Ok(Json(DutyFailureReply { ok: true, failure }))
        }
        Err(None) => Err(ApiError::forbidden(
            "no duty session is configured (RELAY_DUTY_SESSION or trantor duty appoint)",
        )),
        Err(Some(d)) => Err(ApiError::forbidden(format!(
            "only the duty session ({d}) may report duty failures"
        ))),
    }
}

/// `POST /overseer/duty {session}`: appoint (or with an empty session, clear) the duty
/// session. `RELAY_DUTY_SESSION`, when set, still wins; the reply says which is in force.
pub async fn appoint<S: Store>(
    State(hub): State<AppState<S>>,
    JsonBody(req): JsonBody<AppointRequest>,
) -> ApiResult<Json<AppointReply>> {
    let session = non_blank(req.session.as_deref());
    check_opt("session", &session, limits::SESSION)?;
    if let Some(s) = &session
        && (s == BROADCAST || s.starts_with("hub:"))
    {
        return Err(ApiError::bad_request(
            "the duty session must be a session, not all or hub:*",
        ));
    }
    let stored = session.clone();
    hub.store
        .write(move |tx| match &stored {
            Some(s) => tx.set_kv(APPOINTED_KEY, &Value::String(s.clone())),
            None => tx.set_kv(APPOINTED_KEY, &Value::Null),
        })
        .await?;
    let in_force = hub.cfg.duty_session.clone().or(session.clone());
    Ok(Json(AppointReply {
        ok: true,
        appointed: session,
        duty_session: in_force,
        overridden_by: hub
            .cfg
            .duty_session
            .as_ref()
            .map(|_| "RELAY_DUTY_SESSION".to_string()),
    }))
}

fn cursor_key(session: &str) -> String {
    format!("catchup:{session}")
}

/// `GET /catchup?session=S[&since=<message id>][&peek=1]`: what happened since S last looked —
/// messages to it (receipts apart), card moves in its project, the crew's state, its open
/// contracts, cards waiting on it, and its unread direct messages. Each call moves S's catch-up
/// cursor unless `peek=1`.
pub async fn catchup<S: Store>(
    State(hub): State<AppState<S>>,
    p: Params,
) -> ApiResult<Json<CatchupReply>> {
    let session = p.required("session")?.trim().to_string();
    check_len("session", &session, limits::SESSION)?;
    let since_msg = p.int("since")?;
    let peek = p.flag("peek")?;
    let now = now_ms();
    let s = session.clone();
    let CatchupRead {
        peer,
        cursor,
        msgs,
        events,
        peers,
        cards,
        unread,
        tip,
        latest_event,
    } = hub
        .store
        .read(move |tx| catchup_read(tx, &s, since_msg))
        .await?;
    let project = project_or_suffix(peer.as_ref().map(|p| p.project.as_str()), &session);
    let (receipts, messages): (Vec<_>, Vec<_>) = msgs
        .into_iter()
        .partition(|m| m.kind.as_deref() == Some("receipt"));
    let crew: Vec<CatchupPeer> = peers
        .into_iter()
        .map(|p| crew_row(hub.live_peer(p, now)))
        .collect();
    let mut counts: BTreeMap<String, i64> = BTreeMap::new();
    for c in &cards {
        *counts.entry(c.status.to_string()).or_default() += 1;
    }
    let waiting_on_me = waiting_on(&cards, &session);
    let page = crate::domain::ledger::LedgerPage {
        after: 0,
        limit: 200,
        rows: crate::domain::ledger::PageRows::OpenLive,
    };
    hub.store.ledger_current().await?;
    let ledger = compute_ledger(
        &hub,
        &session,
        None,
        now,
        hub.cfg.contract_window_ms,
        None,
        page,
    )
    .await?;
    let open_contracts: Vec<OpenContract> = ledger
        .contracts
        .iter()
        .filter(|c| !c.answered)
        .map(open_contract)
        .collect();
    let last_msg = messages.iter().chain(receipts.iter()).map(|m| m.id).max();
    if !peek {
        let key = cursor_key(&session);
        let mark = json!({
            "msg": last_msg.unwrap_or(cursor.msg).max(0),
            "event": latest_event,
            "ts": now,
        });
        hub.store.write(move |tx| tx.set_kv(&key, &mark)).await?;
    }
    Ok(Json(CatchupReply {
        session,
        project,
        since: cursor,
        tip,
        messages,
        receipts,
        card_events: events,
        crew,
        board: counts,
        waiting_on_me,
        contracts: CatchupContracts {
            open: ledger.open,
            stalled: ledger.stalled,
            items: open_contracts,
        },
        unread,
    }))
}

/// What one catch-up reads, in one snapshot.
struct CatchupRead {
    peer: Option<trantor_proto::Peer>,
    cursor: CatchupSince,
    msgs: Vec<trantor_proto::Message>,
    events: Vec<trantor_proto::Event>,
    peers: Vec<trantor_proto::Peer>,
    cards: Vec<trantor_proto::Card>,
    unread: Vec<trantor_proto::Message>,
    tip: i64,
    latest_event: i64,
}

/// The catch-up's read of `s`'s project: messages and card events since its cursor (or
/// `since_msg`), the crew, the board, its unread direct messages.
fn catchup_read(
    tx: &dyn ReadTx,
    s: &str,
    since_msg: Option<i64>,
) -> Result<CatchupRead, StoreError> {
    let peer = tx.peer(s)?;
    let project = peer
        .as_ref()
        .map(|p| p.project.clone())
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| session_project(s).to_string());
    let cursor = tx.kv(&cursor_key(s))?.unwrap_or(Value::Null);
    let delivered = peer.as_ref().map(|p| p.delivered_up_to).unwrap_or(0);
    let from_msg = since_msg
        .or_else(|| cursor.get("msg").and_then(Value::as_i64))
        .unwrap_or(delivered);
    let from_event = cursor.get("event").and_then(Value::as_i64);
    let msgs = tx.messages_for(s, from_msg, CATCHUP_MESSAGES)?;
    let events = tx.events(&EventFilter {
        project: Some(project.clone()),
        types: Some(
            ["created", "moved", "updated", "deleted"]
                .map(str::to_string)
                .to_vec(),
        ),
        since: from_event,
        of_cards: true,
        limit: CATCHUP_EVENTS,
        ..EventFilter::default()
    })?;
    let peers: Vec<_> = tx
        .peers()?
        .into_iter()
        .filter(|p| p.project == project && p.session != s)
        .collect();
    let cards = cards_of(tx, &project)?;
    let unread: Vec<_> = tx
        .messages_for(s, delivered, 200)?
        .into_iter()
        .filter(|m| m.to == s)
        .collect();
    Ok(CatchupRead {
        peer,
        cursor: CatchupSince {
            msg: from_msg,
            event: from_event,
        },
        msgs,
        events,
        peers,
        cards,
        unread,
        tip: tx.tip()?,
        latest_event: tx.latest_event_id()?,
    })
}

/// A crew member as the catch-up shows it.
fn crew_row(p: trantor_proto::Peer) -> CatchupPeer {
    CatchupPeer {
        session: p.session,
        online: p.online,
        status: p.status,
        phase: p.phase,
        health: p.health,
        last_seen: p.last_seen,
    }
}

/// The cards waiting on `session` (its own open work, and what it handed off and must look at),
/// at most 20.
fn waiting_on(cards: &[trantor_proto::Card], session: &str) -> Vec<CardBrief> {
    cards
        .iter()
        .filter(|c| {
            use trantor_proto::CardStatus::{Blocked, Doing, Testing, Todo};
            (c.assignee == session && matches!(c.status, Todo | Doing | Blocked))
                || (c.by == session && matches!(c.status, Blocked | Testing))
        })
        .take(20)
        .map(|c| CardBrief {
            id: c.id,
            title: c.title.clone(),
            status: c.status.clone(),
            assignee: c.assignee.clone(),
        })
        .collect()
}

/// An unanswered contract as the catch-up lists it.
fn open_contract(c: &trantor_proto::Contract) -> OpenContract {
    OpenContract {
        id: c.id,
        to: c.to.clone(),
        disposition: c.disposition.clone(),
        age_ms: c.age_ms,
        text: c.text.chars().take(200).collect(),
    }
}

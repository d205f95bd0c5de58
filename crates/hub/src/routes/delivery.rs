//! The delivery record (docs/protocol.md "Delivery"): `POST /delivery/fence`, `POST /delivery`
//! and `GET /delivery`.
//!
//! Every direct message gets a `stored` state in the same commit as the message
//! ([`record_stored`](crate::domain::delivery::record_stored)); runners append the rest. A
//! session is fenced to one runner instance at a time, and a mark from any other instance is
//! refused with 409, so a superseded runner (one whose seat another runner took over) cannot
//! claim or consume anything.

use crate::domain::delivery::record_of;
use crate::error::{ApiError, ApiResult, check_len, check_required};
use crate::extract::{JsonBody, Params};
use crate::state::AppState;
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde_json::json;
use trantor_proto::delivery::{INSTANCE_MAX, NOTE_MAX, OPEN_DEFAULT, OPEN_MAX};
use trantor_proto::{
    DeliveryEntry, DeliveryFenceReply, DeliveryFenceRequest, DeliveryMark, DeliveryMarkReply,
    DeliveryOpen, DeliveryState, limits, now_ms,
};
use trantor_store::Store;

/// 404 on a hub started with `--no-delivery-record`, as on a hub that never had the record.
fn record_kept<S: Store>(hub: &AppState<S>) -> ApiResult<()> {
    if hub.cfg.no_delivery_record {
        return Err(ApiError::not_found(
            "this hub keeps no delivery record (started with --no-delivery-record)",
        ));
    }
    Ok(())
}

/// Who marks or fences, checked: the hub keeps the record, and a session and its runner
/// instance are named (trimmed).
fn runner_of<S: Store>(
    hub: &AppState<S>,
    session: &str,
    instance: &str,
) -> ApiResult<(String, String)> {
    record_kept(hub)?;
    Ok((
        check_required("session", session, limits::SESSION)?,
        check_required("instance", instance, INSTANCE_MAX)?,
    ))
}

fn superseded(session: &str, current: &str) -> ApiError {
    ApiError::with(
        StatusCode::CONFLICT,
        format!("superseded: session {session} is fenced by instance {current}"),
        json!({ "current": current }),
    )
}

/// `POST /delivery/fence`: make `instance` the session's current runner instance.
pub async fn fence<S: Store>(
    State(hub): State<AppState<S>>,
    JsonBody(req): JsonBody<DeliveryFenceRequest>,
) -> ApiResult<Json<DeliveryFenceReply>> {
    let (session, instance) = runner_of(&hub, &req.session, &req.instance)?;
    let now = now_ms();
    let (s, i) = (session.clone(), instance.clone());
    let previous = hub
        .write(move |tx| tx.set_delivery_fence(&s, &i, now))
        .await?;
    if let Some(p) = &previous
        && *p != instance
    {
        tracing::info!(%session, %instance, previous = %p, "delivery fence moved");
    }
    Ok(Json(DeliveryFenceReply {
        ok: true,
        session,
        previous: previous.filter(|p| *p != instance),
        instance,
    }))
}

/// What a mark came to inside the write.
enum Marked {
    Done(bool),
    NoMessage,
    NotAddressed(String),
    Superseded(String),
}

/// `POST /delivery`: append one state a runner marks.
pub async fn mark<S: Store>(
    State(hub): State<AppState<S>>,
    JsonBody(req): JsonBody<DeliveryMark>,
) -> ApiResult<Json<DeliveryMarkReply>> {
    let (session, instance) = runner_of(&hub, &req.session, &req.instance)?;
    if let Some(o) = &req.outcome {
        check_len("outcome", o, NOTE_MAX)?;
    }
    if let Some(r) = &req.reason {
        check_len("reason", r, NOTE_MAX)?;
    }
    if req.turn.is_some_and(|t| i64::try_from(t).is_err()) {
        return Err(ApiError::bad_request("turn out of range"));
    }
    let id = req.id;
    let state = DeliveryState::from(req.state);
    let entry = DeliveryEntry {
        state,
        ts: now_ms(),
        session: session.clone(),
        instance: Some(instance.clone()),
        turn: req.turn,
        pid: req.pid,
        outcome: req.outcome.filter(|o| !o.trim().is_empty()),
        reason: req.reason.filter(|r| !r.trim().is_empty()),
    };
    let marked = hub
        .write(move |tx| {
            let Some(msg) = tx.message(id)? else {
                return Ok(Marked::NoMessage);
            };
            if msg.to != entry.session {
                return Ok(Marked::NotAddressed(msg.to));
            }
            let ts = entry.ts;
            match tx.delivery_fence(&entry.session)? {
                Some(current) if Some(&current) != entry.instance.as_ref() => {
                    return Ok(Marked::Superseded(current));
                }
                Some(_) => {}
                None => {
                    // No fence yet: the first mark fences implicitly.
                    tx.set_delivery_fence(&entry.session, &instance, ts)?;
                }
            }
            let states = tx.delivery_states(id)?;
            let again = states.iter().any(|s| {
                s.state == entry.state && s.instance == entry.instance && s.turn == entry.turn
            });
            // A message's life ends at its first `consumed` or `failed`: a repeat of either,
            // from any instance (a successor finishing a dead runner's marks), appends nothing.
            let ended = states
                .iter()
                .any(|s| matches!(s.state, DeliveryState::Consumed | DeliveryState::Failed));
            let terminal = matches!(entry.state, DeliveryState::Consumed | DeliveryState::Failed);
            if again || (ended && terminal) {
                return Ok(Marked::Done(false));
            }
            tx.append_delivery(id, &entry)?;
            Ok(Marked::Done(true))
        })
        .await?;
    match marked {
        Marked::Done(appended) => Ok(Json(DeliveryMarkReply {
            ok: true,
            id,
            state,
            appended,
        })),
        Marked::NoMessage => Err(ApiError::not_found(format!("no message #{id}"))),
        // 403, not 400: the request is well formed, the session may not mark another's message
        // (404 and 409 mean "no record kept" and "superseded" to a runner).
        Marked::NotAddressed(to) => Err(ApiError::forbidden(format!(
            "message #{id} is addressed to {to}, not {session}"
        ))),
        Marked::Superseded(current) => Err(superseded(&session, &current)),
    }
}

/// `GET /delivery?id=N` (one message's life) or `GET /delivery?session=S&open=1` (a session's
/// open messages).
pub async fn get<S: Store>(
    State(hub): State<AppState<S>>,
    p: Params,
) -> ApiResult<axum::response::Response> {
    record_kept(&hub)?;
    use axum::response::IntoResponse;
    if let Some(id) = p.int("id")? {
        let rec = hub
            .store
            .read(move |tx| match tx.message(id)? {
                Some(m) => record_of(tx, &m).map(Some),
                None => Ok(None),
            })
            .await?;
        return match rec {
            Some(r) => Ok(Json(r).into_response()),
            None => Err(ApiError::not_found(format!("no message #{id}"))),
        };
    }
    // Naming nothing finds nothing: a 404 that says what to name (both parameters are
    // optional in the document, so a request with neither is not malformed).
    let Some(session) = p.text("session") else {
        return Err(ApiError::not_found(
            "no delivery record named: give id=N (one message's life) or session=S (a \
             session's open messages)",
        ));
    };
    let session = check_required("session", session, limits::SESSION)?;
    // The open messages are the only listing there is: `open=1` says so, and may be left out.
    if p.get("open").is_some() && !p.flag("open")? {
        return Err(ApiError::bad_request(
            "open=0 is not offered: the listing is of open messages only (open=1)",
        ));
    }
    let limit = match p.count("limit")? {
        None => OPEN_DEFAULT,
        Some(n) => usize::try_from(n).unwrap_or(OPEN_MAX).clamp(1, OPEN_MAX),
    };
    let s = session.clone();
    let (open, total) = hub
        .store
        .read(move |tx| tx.delivery_open(&s, limit))
        .await?;
    Ok(Json(DeliveryOpen {
        session,
        open,
        total,
    })
    .into_response())
}

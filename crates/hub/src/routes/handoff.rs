//! `POST /handoff` and `GET /handoffs` (docs/protocol.md §14.2).

use super::{RouteDoc, Verb};
use crate::error::{ApiError, ApiResult, check_len};
use crate::extract::{JsonBody, Params};
use crate::openapi::{Field, Ty, f, shape};
use crate::state::{AppState, Outbox, event};
use axum::Json;
use axum::extract::State;
use axum::routing::{MethodRouter, get, post};
use serde_json::json;
use trantor_proto::handoff::{
    DEFAULT_COOLDOWN_SEC, HandoffReply, HandoffRequest, HandoffRow, HandoffsReply,
};
use trantor_proto::{limits, now_ms};
use trantor_store::Store;

/// Rows kept per project.
const KEEP: usize = 200;

fn key(project: &str) -> String {
    format!("handoffs:{project}")
}

fn cut(s: &str, n: usize) -> String {
    s.chars().take(n).collect()
}

/// `POST /handoff`: record a handoff unless the session handed off within the cooldown.
pub async fn post_handoff<S: Store>(
    State(hub): State<AppState<S>>,
    JsonBody(req): JsonBody<HandoffRequest>,
) -> ApiResult<Json<HandoffReply>> {
    if req.project.trim().is_empty() || req.session.trim().is_empty() {
        return Err(ApiError::bad_request("project and session required"));
    }
    check_len("project", &req.project, limits::PROJECT)?;
    check_len("session", &req.session, limits::SESSION)?;
    let cooldown_ms = match req.cooldown_sec {
        Some(c) if c.is_finite() && c > 0.0 => (c.min(86_400.0) * 1000.0) as i64,
        _ => DEFAULT_COOLDOWN_SEC * 1000,
    };
    let now = now_ms();
    let row = HandoffRow {
        project: req.project.clone(),
        session: req.session.clone(),
        ts: now,
        trigger: cut(req.trigger.as_deref().unwrap_or(""), 20),
        id: cut(req.id.as_deref().unwrap_or(""), 80),
        forced: req.force == Some(true),
    };
    let (reply, out) = hub
        .write(move |tx| {
            let k = key(&row.project);
            let mut rows: Vec<HandoffRow> = tx
                .kv(&k)?
                .and_then(|v| serde_json::from_value(v).ok())
                .unwrap_or_default();
            let last = rows
                .iter()
                .rev()
                .find(|h| h.session == row.session && now - h.ts < cooldown_ms)
                .map(|h| h.ts);
            if let (Some(last), false) = (last, row.forced) {
                return Ok((
                    HandoffReply {
                        ok: true,
                        allow: false,
                        reason: Some("storm-guard".into()),
                        last_ts: Some(last),
                        since_sec: Some((now - last) / 1000),
                        cooldown_sec: Some(cooldown_ms / 1000),
                    },
                    Outbox::default(),
                ));
            }
            let mut out = Outbox::default();
            out.event(
                tx,
                event(
                    now,
                    "handoff.written",
                    &row.project,
                    &row.session,
                    json!({"handoffId": row.id, "trigger": row.trigger, "forced": row.forced}),
                ),
            )?;
            rows.push(row);
            if rows.len() > KEEP {
                let drop = rows.len() - KEEP;
                rows.drain(..drop);
            }
            let doc = serde_json::to_value(&rows).unwrap_or_default();
            tx.set_kv(&k, &doc)?;
            Ok((
                HandoffReply {
                    ok: true,
                    allow: true,
                    ..HandoffReply::default()
                },
                out,
            ))
        })
        .await?;
    hub.publish(out);
    Ok(Json(reply))
}

/// `GET /handoffs?project=&limit=`: a project's handoff log, newest first.
pub async fn list<S: Store>(
    State(hub): State<AppState<S>>,
    p: Params,
) -> ApiResult<Json<HandoffsReply>> {
    let project = p.required("project")?.to_string();
    let limit = p.count("limit")?.unwrap_or(50).clamp(1, 200) as usize;
    let k = key(&project);
    let rows: Vec<HandoffRow> = hub
        .store
        .read(move |tx| tx.kv(&k))
        .await?
        .and_then(|v| serde_json::from_value(v).ok())
        .unwrap_or_default();
    let handoffs = rows.into_iter().rev().take(limit).collect();
    Ok(Json(HandoffsReply { handoffs }))
}

/// The handoff routes.
pub fn table<S: Store>() -> Vec<(RouteDoc, MethodRouter<AppState<S>>)> {
    const Q: &[Field] = &[
        f("project", Ty::Str, true, "project").max(limits::PROJECT),
        f("limit", Ty::Int, false, "most rows (1-200, default 50)").min(0),
    ];
    vec![
        (
            RouteDoc {
                verb: Verb::Post,
                path: "/handoff",
                summary: "Record a session's handoff (storm guard: one per session per cooldown unless forced); event handoff.written",
                query: &[],
                body: Some(shape::<HandoffRequest>),
                reply: Some(shape::<HandoffReply>),
            },
            post(post_handoff::<S>),
        ),
        (
            RouteDoc {
                verb: Verb::Get,
                path: "/handoffs",
                summary: "A project's handoff log, newest first",
                query: Q,
                body: None,
                reply: Some(shape::<HandoffsReply>),
            },
            get(list::<S>),
        ),
    ]
}

//! Verification gates: `POST /verify-gate` (add or resolve) and `GET /verify-gates`.
//!
//! A gate is a claim that must be verified before the related work ships. Gates live in one
//! kv document (`verify-gates`: the id high-water mark and the newest gates); an open gate tied
//! to a card makes `/task/update` refuse that card's move to done (409 naming the gate);
//! docs/protocol.md §9.5.

use crate::domain::gates::{GatesDoc, is_resolution};
use crate::error::{ApiError, ApiResult, check_len, check_opt};
use crate::extract::{JsonBody, Params};
use crate::state::{AppState, KvDoc, Outbox, event};
use axum::Json;
use axum::extract::State;
use serde_json::json;
use trantor_proto::{
    VerifyGate, VerifyGateReply, VerifyGateRequest, VerifyGatesReply, limits, now_ms,
};
use trantor_store::Store;

/// Length limit of a claim, a why, a how-to-verify and a note.
const TEXT: usize = 300;

fn project_of(req_project: &Option<String>, by: &str) -> Option<String> {
    req_project
        .as_deref()
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(str::to_string)
        .or_else(|| {
            by.rsplit_once(':')
                .map(|(_, p)| p.to_string())
                .filter(|p| !p.is_empty())
        })
}

/// `POST /verify-gate`: resolve a gate (`resolve`) or add one (an open gate of the project
/// with the same claim is returned as a dedup).
pub async fn post<S: Store>(
    State(hub): State<AppState<S>>,
    JsonBody(req): JsonBody<VerifyGateRequest>,
) -> ApiResult<Json<VerifyGateReply>> {
    check_opt("by", &req.by, limits::SESSION)?;
    check_opt("note", &req.note, TEXT)?;
    let by = req.by.clone().unwrap_or_default();
    let project =
        project_of(&req.project, &by).ok_or_else(|| ApiError::bad_request("project required"))?;
    check_len("project", &project, limits::PROJECT)?;
    let now = now_ms();
    if let Some(st) = &req.status
        && !is_resolution(st)
    {
        return Err(ApiError::bad_request(
            "status must be verified, failed or waived",
        ));
    }
    if req.resolve {
        resolve(&hub, req, project, by, now).await
    } else {
        open(&hub, req, project, by, now).await
    }
}

/// Resolves gate `id` of `project` (404 when the project has none) and records
/// `verify.gate.resolved`.
async fn resolve<S: Store>(
    hub: &AppState<S>,
    req: VerifyGateRequest,
    project: String,
    by: String,
    now: i64,
) -> ApiResult<Json<VerifyGateReply>> {
    let id = req
        .id
        .ok_or_else(|| ApiError::bad_request("id required to resolve a gate"))?;
    // `post` has refused any other status.
    let status = req.status.unwrap_or_else(|| "verified".into());
    let note = req.note.unwrap_or_default();
    crate::error::check_secrets([note.as_str()])?;
    let got = hub
        .write(move |tx| {
            let mut doc = GatesDoc::load(tx)?;
            let Some(out) = doc.resolve(id, &project, status, &by, &note, now) else {
                return Ok(None);
            };
            doc.save(tx)?;
            let mut events = Outbox::default();
            events.event(
                tx,
                event(
                    now,
                    "verify.gate.resolved",
                    &out.project,
                    &by,
                    json!({ "gateId": out.id, "claim": out.claim, "status": out.status, "note": note }),
                ),
            )?;
            Ok(Some((out, events)))
        })
        .await?;
    match got {
        Some((gate, events)) => {
            hub.publish(events);
            Ok(Json(VerifyGateReply {
                ok: true,
                gate,
                dedup: false,
            }))
        }
        None => Err(ApiError::not_found("no such gate in that project")),
    }
}

/// Adds a gate to `project` and records `verify.gate.opened`; an open gate with the same claim
/// is returned instead, as a dedup, with nothing written.
async fn open<S: Store>(
    hub: &AppState<S>,
    req: VerifyGateRequest,
    project: String,
    by: String,
    now: i64,
) -> ApiResult<Json<VerifyGateReply>> {
    let claim = req
        .claim
        .as_deref()
        .map(str::trim)
        .unwrap_or("")
        .to_string();
    if claim.is_empty() {
        return Err(ApiError::bad_request("claim required"));
    }
    check_len("claim", &claim, TEXT)?;
    let why = req.why.clone().unwrap_or_default();
    let how = req.how_to_verify.clone().unwrap_or_default();
    check_len("why", &why, TEXT)?;
    check_len("howToVerify", &how, TEXT)?;
    crate::error::check_secrets([claim.as_str(), why.as_str(), how.as_str()])?;
    let card = req.card.filter(|c| *c > 0);
    let (gate, dedup, events) = hub
        .write(move |tx| {
            let mut doc = GatesDoc::load(tx)?;
            if let Some(g) = doc.open_with_claim(&project, &claim) {
                return Ok((g.clone(), true, Outbox::default()));
            }
            let g = doc.add(VerifyGate {
                project,
                claim,
                why,
                how_to_verify: how,
                status: "open".into(),
                by,
                ts: now,
                card,
                ..Default::default()
            });
            doc.save(tx)?;
            let mut events = Outbox::default();
            events.event(
                tx,
                event(
                    now,
                    "verify.gate.opened",
                    &g.project,
                    &g.by,
                    json!({ "gateId": g.id, "claim": g.claim, "why": g.why, "howToVerify": g.how_to_verify, "taskId": g.card }),
                ),
            )?;
            Ok((g, false, events))
        })
        .await?;
    hub.publish(events);
    Ok(Json(VerifyGateReply {
        ok: true,
        gate,
        dedup,
    }))
}

/// `GET /verify-gates?project=&all=1&card=`.
pub async fn list<S: Store>(
    State(hub): State<AppState<S>>,
    p: Params,
) -> ApiResult<Json<VerifyGatesReply>> {
    let project = p.text("project").map(str::to_string);
    let all = p.flag("all")?;
    let card = p.int("card")?;
    let doc = hub.store.read(|tx| GatesDoc::load(tx)).await?;
    let gates = doc
        .gates
        .into_iter()
        .filter(|g| all || g.status == "open")
        .filter(|g| {
            project
                .as_deref()
                .is_none_or(|p| g.project.eq_ignore_ascii_case(p))
        })
        .filter(|g| card.is_none_or(|c| g.card == Some(c)))
        .collect();
    Ok(Json(VerifyGatesReply { gates }))
}

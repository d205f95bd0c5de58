//! Verification gates: `POST /verify-gate` (add or resolve) and `GET /verify-gates`.
//!
//! A gate is a claim that must be verified before the related work ships. Gates live in one
//! kv document (`verify-gates`: the id high-water mark and the newest gates); an open gate tied
//! to a card makes `/task/update` refuse that card's move to done (409 naming the gate);
//! docs/protocol.md §9.5.

use crate::domain::gates::{GatesDoc, is_resolution};
use crate::domain::policy::project_or_suffix;
use crate::error::{ApiError, ApiResult, check_len, check_opt};
use crate::extract::{JsonBody, Params};
use crate::state::{AppState, KvDoc, Outbox, event};
use axum::Json;
use axum::extract::State;
use serde_json::json;
use trantor_proto::{
    VerifyGate, VerifyGateReply, VerifyGateRequest, VerifyGatesReply, limits, now_ms,
};
use trantor_store::{NewEvent, Store};

/// Length limit of a claim, a why, a how-to-verify and a note.
const TEXT: usize = 300;

/// `POST /verify-gate`: resolve a gate (`resolve`) or add one (an open gate of the project
/// with the same claim is returned as a dedup).
pub async fn post<S: Store>(
    State(hub): State<AppState<S>>,
    JsonBody(req): JsonBody<VerifyGateRequest>,
) -> ApiResult<Json<VerifyGateReply>> {
    check_opt("by", &req.by, limits::SESSION)?;
    check_opt("note", &req.note, TEXT)?;
    let by = req.by.clone().unwrap_or_default();
    let project = project_or_suffix(req.project.as_deref().map(str::trim), &by);
    if project.is_empty() {
        return Err(ApiError::bad_request("project required"));
    }
    check_len("project", &project, limits::PROJECT)?;
    let now = now_ms();
    if let Some(st) = &req.status
        && !is_resolution(st)
    {
        return Err(ApiError::bad_request(
            "status must be verified, failed or waived",
        ));
    }
    let change = if req.resolve {
        resolution(req)?
    } else {
        opening(req)?
    };
    let got = hub
        .write(move |tx| {
            let mut doc = GatesDoc::load(tx)?;
            let Some((gate, ev)) = change.apply(&mut doc, project, by, now) else {
                return Ok(None);
            };
            let mut events = Outbox::default();
            let dedup = ev.is_none();
            if let Some(ev) = ev {
                doc.save(tx)?;
                events.event(tx, ev)?;
            }
            Ok(Some((gate, dedup, events)))
        })
        .await?;
    let (gate, dedup, events) =
        got.ok_or_else(|| ApiError::not_found("no such gate in that project"))?;
    hub.publish(events);
    Ok(Json(VerifyGateReply {
        ok: true,
        gate,
        dedup,
    }))
}

/// What a `POST /verify-gate` does to the gates document.
enum GateChange {
    /// Resolve gate `id` as `status` (`verified` when none was sent).
    Resolve {
        id: i64,
        status: String,
        note: String,
    },
    /// Add a gate (an open one of the project with the same claim is a dedup).
    Open {
        claim: String,
        why: String,
        how: String,
        card: Option<i64>,
    },
}

/// A resolution, checked: it names the gate and carries no secret.
fn resolution(req: VerifyGateRequest) -> ApiResult<GateChange> {
    let id = req
        .id
        .ok_or_else(|| ApiError::bad_request("id required to resolve a gate"))?;
    // `post` has refused any other status.
    let status = req.status.unwrap_or_else(|| "verified".into());
    let note = req.note.unwrap_or_default();
    crate::error::check_secrets([note.as_str()])?;
    Ok(GateChange::Resolve { id, status, note })
}

/// A new gate, checked: a claim, each text within [`TEXT`], no secret.
fn opening(req: VerifyGateRequest) -> ApiResult<GateChange> {
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
    Ok(GateChange::Open {
        claim,
        why,
        how,
        card,
    })
}

impl GateChange {
    /// Applies the change to `doc` for `project`, by `by` at `now`: the gate as it stands and
    /// the event that records the change (`None` for a dedup, which changes nothing); `None`
    /// when a resolution names no gate of the project.
    fn apply(
        self,
        doc: &mut GatesDoc,
        project: String,
        by: String,
        now: i64,
    ) -> Option<(VerifyGate, Option<NewEvent>)> {
        match self {
            GateChange::Resolve { id, status, note } => {
                let g = doc.resolve(id, &project, status, &by, &note, now)?;
                let data =
                    json!({ "gateId": g.id, "claim": g.claim, "status": g.status, "note": note });
                let ev = event(now, "verify.gate.resolved", &g.project, &by, data);
                Some((g, Some(ev)))
            }
            GateChange::Open {
                claim,
                why,
                how,
                card,
            } => {
                if let Some(g) = doc.open_with_claim(&project, &claim) {
                    return Some((g.clone(), None));
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
                let data = json!({ "gateId": g.id, "claim": g.claim, "why": g.why, "howToVerify": g.how_to_verify, "taskId": g.card });
                let ev = event(now, "verify.gate.opened", &g.project, &g.by, data);
                Some((g, Some(ev)))
            }
        }
    }
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

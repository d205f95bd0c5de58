//! Hub metadata and small documents: `/`, `/health`, `/metrics`, `/policy`, `/project`,
//! `/phase`, `GET /_op`.

use crate::domain::policy::{POLICY_KEY, policy_from, project_key};
use crate::error::{ApiError, ApiResult, check_all_required, check_len, check_opt, check_required};
use crate::extract::{JsonBody, Params};
use crate::state::AppState;
use axum::Json;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};
use std::sync::atomic::Ordering;
use trantor_proto::limits;
use trantor_proto::{
    BannerReply, HealthPersist, HealthReply, HealthRetention, OpReply, PhaseGoal, PhaseReply,
    PhaseRequest, PhasesReply, PolicyLink, PolicyReply, PolicyRequest, PolicyWriteReply,
    ProjectReply, ProjectRequest, ProjectWriteReply, VERSION, now_ms,
};
use trantor_store::Store;

fn phase_key(project: &str, phase: &str) -> String {
    format!("phase:{project}::{phase}")
}

/// `GET /`: a short banner.
pub async fn banner<S: Store>(State(hub): State<AppState<S>>) -> Json<BannerReply> {
    Json(BannerReply {
        name: "trantor hub".into(),
        version: VERSION.into(),
        store: hub.store.describe(),
        docs: "/openapi.json".into(),
        health: "/health".into(),
        metrics: "/metrics".into(),
    })
}

/// `GET /`: the dashboard for a browser (`Accept: text/html`), the JSON banner for everyone else.
pub async fn root<S: Store>(hub: State<AppState<S>>, headers: HeaderMap) -> Response {
    if crate::ui::wants_html(&headers) {
        crate::ui::page().await
    } else {
        banner(hub).await.into_response()
    }
}

/// `/health` (any method): liveness plus counts, retention and store status.
pub async fn health<S: Store>(State(hub): State<AppState<S>>) -> impl IntoResponse {
    let counts = hub.store.read(|tx| tx.counts()).await;
    let pruned = hub.metrics.pruned_totals();
    let streams = hub.metrics.streams_open.load(Ordering::Relaxed);
    let (mut status, mut store_ok, mut err, counts) = match counts {
        Ok(c) => (axum::http::StatusCode::OK, true, String::new(), Some(c)),
        Err(e) => (
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            false,
            e.to_string(),
            None,
        ),
    };
    // Reads can work while every write fails (a full disk): the newest write decides.
    let failed_at = match hub.write_failure() {
        Some((at, e)) => {
            status = axum::http::StatusCode::SERVICE_UNAVAILABLE;
            store_ok = false;
            if err.is_empty() {
                err = e;
            }
            Some(at)
        }
        None => None,
    };
    let c = counts.unwrap_or_default();
    let duty = match crate::duty::status(&hub, now_ms()).await {
        Ok(d) => d,
        Err(e) => json!({ "error": e.to_string() }),
    };
    let reply = HealthReply {
        ok: store_ok,
        version: Some(VERSION.into()),
        auth_mode: hub.cfg.auth.as_str().into(),
        store: Some(hub.store.describe()),
        sync: Some(hub.store.synchronous().into()),
        peers: c.peers,
        messages: c.messages,
        cards: Some(c.cards),
        events: Some(c.events),
        streams,
        polls_held: Some(hub.presence.held_polls()),
        persist: HealthPersist {
            ok: store_ok,
            last_error: err,
            last_error_at: failed_at,
        },
        retention: Some(HealthRetention {
            read_history_ms: hub.cfg.retention_ms,
            read_history_days: hub.cfg.retention_ms / 86_400_000,
            pruned: serde_json::to_value(pruned).unwrap_or(Value::Null),
        }),
        duty,
        lease: hub.store.lease().map(|l| trantor_proto::HealthLease {
            held: l.held,
            holder: l.holder,
        }),
    };
    (status, Json(reply))
}

/// `GET /metrics`: Prometheus text.
pub async fn metrics<S: Store>(State(hub): State<AppState<S>>) -> impl IntoResponse {
    let counts = hub.store.read(|tx| tx.counts()).await.ok();
    let body = hub
        .metrics
        .render(counts.as_ref(), hub.presence.held_polls(), hub.wake.rings());
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        body,
    )
}

/// `GET /policy`: project links and autonomy levels (open to every caller: the runner reads
/// it to allow cross-project wakes between linked projects).
pub async fn policy_get<S: Store>(State(hub): State<AppState<S>>) -> ApiResult<Json<PolicyReply>> {
    let v = hub.store.read(|tx| tx.kv(POLICY_KEY)).await?;
    Ok(Json(policy_from(v)))
}

fn project_set(field: &str, projects: &[String]) -> ApiResult<Vec<String>> {
    let mut set: Vec<String> = projects.iter().map(|p| p.trim().to_string()).collect();
    if set.iter().any(String::is_empty) {
        return Err(ApiError::bad_request(format!(
            "{field}: a project name is blank"
        )));
    }
    set.sort();
    set.dedup();
    if set.len() != projects.len() {
        return Err(ApiError::bad_request(format!("{field}: each project once")));
    }
    for p in &set {
        check_len(field, p, limits::PROJECT)?;
    }
    if !(2..=4).contains(&set.len()) {
        return Err(ApiError::bad_request(format!(
            "{field} needs 2 to 4 distinct projects"
        )));
    }
    Ok(set)
}

/// Check `dials: {project: {commit?: bool, push?: bool, reroute?: bool}}`; any other dial name
/// is refused.
fn parse_dials(d: &Map<String, Value>) -> ApiResult<Vec<(String, Map<String, Value>)>> {
    let mut out = Vec::new();
    for (project, v) in d {
        check_len("dials project", project, limits::PROJECT)?;
        let Some(obj) = v.as_object() else {
            return Err(ApiError::bad_request(format!(
                "dials for {project} must be an object like {{\"push\": true}}"
            )));
        };
        let mut change = Map::new();
        for (k, b) in obj {
            match (k.as_str(), b.as_bool()) {
                ("commit" | "push" | "reroute", Some(on)) => {
                    change.insert(k.clone(), json!(on));
                }
                ("commit" | "push" | "reroute", None) => {
                    return Err(ApiError::bad_request(format!(
                        "dial {k} for {project} must be true or false"
                    )));
                }
                _ => {
                    return Err(ApiError::bad_request(format!(
                        "unknown dial {k} for {project}: the dials are commit, push and reroute"
                    )));
                }
            }
        }
        out.push((project.clone(), change));
    }
    Ok(out)
}

/// `POST /policy {autonomy?, link?, unlink?, dials?, by?}`.
pub async fn policy_post<S: Store>(
    State(hub): State<AppState<S>>,
    JsonBody(req): JsonBody<PolicyRequest>,
) -> ApiResult<Json<PolicyWriteReply>> {
    check_opt("by", &req.by, limits::SESSION)?;
    let mut autonomy = Map::new();
    for (k, v) in req.autonomy.unwrap_or_default() {
        check_len("autonomy project", &k, limits::PROJECT)?;
        match v.as_i64() {
            Some(n @ 1..=4) => {
                autonomy.insert(k, json!(n));
            }
            _ => {
                return Err(ApiError::bad_request(format!(
                    "autonomy for {k} must be an integer from 1 to 4"
                )));
            }
        }
    }
    let link = match req.link {
        Some(l) => {
            let reason = l.reason.unwrap_or_default();
            check_len("reason", &reason, 300)?;
            Some((project_set("link.projects", &l.projects)?, reason))
        }
        None => None,
    };
    let dials = req
        .dials
        .map(|d| parse_dials(&d))
        .transpose()?
        .unwrap_or_default();
    let unlink = req
        .unlink
        .map(|u| project_set("unlink.projects", &u.projects))
        .transpose()?;
    let by = req.by.unwrap_or_default();
    let now = now_ms();
    let policy = hub
        .write(move |tx| {
            let mut p = policy_from(tx.kv(POLICY_KEY)?);
            p.autonomy.extend(autonomy);
            for (project, change) in dials {
                let mut cur = p
                    .dials
                    .get(&project)
                    .and_then(|v| v.as_object().cloned())
                    .unwrap_or_default();
                cur.extend(change);
                p.dials.insert(project, Value::Object(cur));
            }
            let same = |a: &PolicyLink, set: &[String]| {
                let mut s = a.projects.clone();
                s.sort();
                s == set
            };
            if let Some(set) = unlink {
                p.links.retain(|l| !same(l, &set));
            }
            if let Some((set, reason)) = link {
                p.links.retain(|l| !same(l, &set));
                p.links.push(PolicyLink {
                    projects: set,
                    reason,
                    declared_by: by,
                    ts: now,
                });
            }
            let v = serde_json::to_value(&p).unwrap_or(Value::Null);
            tx.set_kv(POLICY_KEY, &v)?;
            Ok(p)
        })
        .await?;
    Ok(Json(PolicyWriteReply {
        ok: true,
        autonomy: policy.autonomy,
        links: policy.links,
        dials: policy.dials,
    }))
}

/// `POST /project {project, brief, by}`: set a project's brief.
pub async fn project_post<S: Store>(
    State(hub): State<AppState<S>>,
    JsonBody(req): JsonBody<ProjectRequest>,
) -> ApiResult<Json<ProjectWriteReply>> {
    let project = check_required("project", &req.project, limits::PROJECT)?;
    let brief = req.brief.unwrap_or_default().trim().to_string();
    check_len("brief", &brief, limits::BRIEF)?;
    check_opt("by", &req.by, limits::SESSION)?;
    crate::error::check_secrets([brief.as_str()])?;
    let doc = json!({ "brief": brief, "by": req.by.unwrap_or_default(), "ts": now_ms() });
    let key = project_key(&project);
    hub.write(move |tx| tx.set_kv(&key, &doc)).await?;
    Ok(Json(ProjectWriteReply {
        ok: true,
        project,
        brief,
    }))
}

/// `GET /project?project=`: a project's brief (empty when none was set).
pub async fn project_get<S: Store>(
    State(hub): State<AppState<S>>,
    p: Params,
) -> ApiResult<Json<ProjectReply>> {
    let project = p.required("project")?.to_string();
    let key = project_key(&project);
    let doc = hub.store.read(move |tx| tx.kv(&key)).await?;
    let field = |k: &str| doc.as_ref().and_then(|d| d.get(k)).cloned();
    Ok(Json(ProjectReply {
        project,
        brief: field("brief").unwrap_or(json!("")),
        by: field("by"),
        ts: field("ts"),
    }))
}

/// `POST /phase {project, phase, goal, by}`: set a phase goal.
pub async fn phase_post<S: Store>(
    State(hub): State<AppState<S>>,
    JsonBody(req): JsonBody<PhaseRequest>,
) -> ApiResult<Json<PhaseReply>> {
    let [project, phase] = check_all_required(
        [
            ("project", &req.project, limits::PROJECT),
            ("phase", &req.phase, limits::CARD_PHASE),
        ],
        "project and phase required",
    )?;
    let goal = req.goal.unwrap_or_default().trim().to_string();
    check_len("goal", &goal, limits::GOAL)?;
    check_opt("by", &req.by, limits::SESSION)?;
    crate::error::check_secrets([goal.as_str()])?;
    let doc = json!({ "goal": goal, "by": req.by.unwrap_or_default(), "ts": now_ms() });
    let key = phase_key(&project, &phase);
    hub.write(move |tx| tx.set_kv(&key, &doc)).await?;
    Ok(Json(PhaseReply {
        ok: true,
        project,
        phase,
        goal,
    }))
}

/// `GET /phase?project=[&phase=]`: the project's phase goals, ordered by phase name.
pub async fn phase_get<S: Store>(
    State(hub): State<AppState<S>>,
    p: Params,
) -> ApiResult<Json<PhasesReply>> {
    let project = p.required("project")?.trim().to_string();
    let only = p.text("phase").map(|s| s.trim().to_string());
    let prefix = phase_key(&project, "");
    let docs = hub.store.read(move |tx| tx.kv_prefix(&prefix)).await?;
    let plen = phase_key(&project, "").len();
    let phases: Vec<PhaseGoal> = docs
        .into_iter()
        .filter_map(|(key, doc)| {
            let phase = key.get(plen..)?.to_string();
            let goal = doc.get("goal").and_then(Value::as_str).unwrap_or_default();
            // A goal set to "" is a cleared goal.
            if goal.is_empty() || only.as_deref().is_some_and(|o| o != phase) {
                return None;
            }
            Some(PhaseGoal {
                goal: goal.to_string(),
                by: doc.get("by").cloned().unwrap_or(json!("")),
                ts: doc.get("ts").cloned().unwrap_or(Value::Null),
                phase,
            })
        })
        .collect();
    Ok(Json(PhasesReply { project, phases }))
}

/// `GET /_op?id=[&route=]`: the recorded outcome of an idempotent write. Ops are keyed by route;
/// without `route` the newest op with this id on any route answers. A string and a numeric op
/// with the same digits are told apart only by their route; the string one is preferred.
pub async fn op_get<S: Store>(
    State(hub): State<AppState<S>>,
    p: Params,
) -> ApiResult<Json<OpReply>> {
    let id = p.required("id")?.to_string();
    check_len("id", &id, limits::OP_ID)?;
    let routes: Vec<String> = match p.text("route") {
        Some(r) => vec![r.to_string()],
        None => crate::ops::post_routes(),
    };
    let keys: Vec<String> = routes
        .iter()
        .flat_map(|r| {
            [
                crate::ops::OpId::Str(id.clone()).key(r),
                crate::ops::OpId::Num(id.clone()).key(r),
            ]
        })
        .collect();
    let rec = hub
        .store
        .read(move |tx| {
            let mut best: Option<trantor_store::OpRecord> = None;
            for k in &keys {
                if let Some(r) = tx.op(k)?
                    && best.as_ref().is_none_or(|b| r.ts > b.ts)
                {
                    best = Some(r);
                }
            }
            Ok(best)
        })
        .await?;
    Ok(Json(match rec {
        Some(r) if r.code == 0 => OpReply {
            status: "committed".into(),
            code: Some(200),
            body: Some(crate::ops::pending_body()),
        },
        Some(r) => OpReply {
            status: if r.code < 400 {
                "committed"
            } else {
                "rejected"
            }
            .into(),
            code: Some(r.code),
            body: Some(r.body),
        },
        None => OpReply {
            status: "unknown".into(),
            code: None,
            body: None,
        },
    }))
}

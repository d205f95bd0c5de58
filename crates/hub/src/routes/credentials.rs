//! Named credentials (docs/protocol.md §7.7): `POST /credentials` names one,
//! `POST /credentials/remove` removes one, `GET /credentials` lists them. The hub keeps a name, an agent and a state per credential —
//! never a secret: the request type refuses any other field.
//!
//! `POST /credentials/state` is the circuit breaker's input: a seat whose turn proved its
//! credential exhausted says so with the reset time, and the hub marks it `exhausted until T`
//! once (a second proof of the same exhaustion changes nothing but the seat list), says so on
//! the bus once, and at `T` flips it back to `ok` and says that once too ([`resume_due`]).

use crate::domain::credentials::{self, KEY, Reported, StateReport, resume_due, stored};
use crate::error::{ApiError, ApiResult};
use crate::extract::JsonBody;
use crate::openapi::{RouteDoc, Verb, shape};
use crate::state::AppState;
use axum::Json;
use axum::extract::State;
use axum::routing::{MethodRouter, get, post};
use trantor_proto::credentials::{
    self as cred, CredentialInfo, CredentialRemove, CredentialReply, CredentialRequest,
    CredentialStateReply, CredentialStateReport, CredentialsReply,
};
use trantor_proto::now_ms;
use trantor_store::Store;

/// The routes of this module.
pub fn table<S: Store>() -> Vec<(RouteDoc, MethodRouter<AppState<S>>)> {
    vec![
        (
            RouteDoc {
                verb: Verb::Post,
                path: "/credentials",
                summary: "Name a credential (name and agent only, never a secret)",
                query: &[],
                body: Some(shape::<CredentialRequest>),
                reply: Some(shape::<CredentialReply>),
            },
            post(name::<S>),
        ),
        (
            RouteDoc {
                verb: Verb::Post,
                path: "/credentials/remove",
                summary: "Remove a named credential (removed:false when there was none)",
                query: &[],
                body: Some(shape::<CredentialRemove>),
                reply: Some(shape::<CredentialReply>),
            },
            post(remove::<S>),
        ),
        (
            RouteDoc {
                verb: Verb::Post,
                path: "/credentials/state",
                summary: "A seat reports what its turn proved of its credential (exhausted until a reset; ok joins its seats)",
                query: &[],
                body: Some(shape::<CredentialStateReport>),
                reply: Some(shape::<CredentialStateReply>),
            },
            post(state::<S>),
        ),
        (
            RouteDoc {
                verb: Verb::Get,
                path: "/credentials",
                summary: "The named credentials with their state",
                query: &[],
                body: None,
                reply: Some(shape::<CredentialsReply>),
            },
            get(list::<S>),
        ),
    ]
}

fn checked_name(name: &str) -> ApiResult<String> {
    let name = name.trim();
    if !cred::valid_name(name) {
        return Err(ApiError::bad_request(
            "name: 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit",
        ));
    }
    Ok(name.to_string())
}

/// `POST /credentials/remove`.
pub async fn remove<S: Store>(
    State(hub): State<AppState<S>>,
    JsonBody(req): JsonBody<CredentialRemove>,
) -> ApiResult<Json<CredentialReply>> {
    let name = checked_name(&req.name)?;
    let removed = hub
        .write(move |tx| {
            let mut all = stored(tx)?;
            let before = all.len();
            all.retain(|c| c.name != name);
            let removed = all.len() != before;
            if removed {
                tx.set_kv(KEY, &serde_json::to_value(&all).unwrap_or_default())?;
            }
            Ok(removed)
        })
        .await?;
    Ok(Json(CredentialReply {
        ok: true,
        credential: None,
        removed,
    }))
}

/// `POST /credentials`.
pub async fn name<S: Store>(
    State(hub): State<AppState<S>>,
    JsonBody(req): JsonBody<CredentialRequest>,
) -> ApiResult<Json<CredentialReply>> {
    let name = checked_name(&req.name)?;
    if !cred::AGENTS.contains(&req.agent.as_str()) {
        return Err(ApiError::bad_request(format!(
            "agent must be one of: {}",
            cred::AGENTS.join(", ")
        )));
    }
    let now = now_ms();
    let reply = hub
        .write(move |tx| {
            let mut all = stored(tx)?;
            let at = all.iter().position(|c| c.name == name);
            let info = match at {
                Some(i) => {
                    all[i].agent = req.agent.clone();
                    // Naming it again is the operator's answer to a refused login.
                    if all[i].state == "auth" {
                        all[i].state = "ok".into();
                        all[i].until = None;
                    }
                    all[i].clone()
                }
                None => {
                    if all.len() >= cred::MAX {
                        return Ok(Err(cred::MAX));
                    }
                    let c = CredentialInfo {
                        name: name.clone(),
                        agent: req.agent.clone(),
                        state: "ok".into(),
                        until: None,
                        seats: Vec::new(),
                        last_evidence: None,
                        proved_by: None,
                        since: now,
                    };
                    all.push(c.clone());
                    all.sort_by(|a, b| a.name.cmp(&b.name));
                    c
                }
            };
            tx.set_kv(KEY, &serde_json::to_value(&all).unwrap_or_default())?;
            Ok(Ok(CredentialReply {
                ok: true,
                credential: Some(info),
                removed: false,
            }))
        })
        .await?;
    reply
        .map(Json)
        .map_err(|max| ApiError::bad_request(format!("at most {max} credentials")))
}

/// `GET /credentials`: each credential in the state in force now (an exhaustion whose reset
/// has passed reads `ok` even before [`resume_due`] has written it).
pub async fn list<S: Store>(State(hub): State<AppState<S>>) -> ApiResult<Json<CredentialsReply>> {
    let now = now_ms();
    let credentials = hub
        .store
        .read(|tx| stored(tx))
        .await?
        .into_iter()
        .map(|c| c.effective(now))
        .collect();
    Ok(Json(CredentialsReply { credentials }))
}

/// `POST /credentials/state` (docs/protocol.md §7.7).
pub async fn state<S: Store>(
    State(hub): State<AppState<S>>,
    JsonBody(req): JsonBody<CredentialStateReport>,
) -> ApiResult<Json<CredentialStateReply>> {
    let report = checked_report(&req)?;
    let now = now_ms();
    match hub
        .write(move |tx| credentials::report(tx, &report, now))
        .await?
    {
        Reported::Unknown => Err(ApiError::not_found(format!(
            "no credential named {} (trantor credentials add)",
            req.name.trim()
        ))),
        Reported::Done(reply, out, timer) => {
            hub.publish(out);
            if let Some(at) = timer {
                resume_at(&hub, at);
            }
            Ok(Json(*reply))
        }
    }
}

/// A state report checked: the name and the seat, a known state, the evidence cut to size.
fn checked_report(req: &CredentialStateReport) -> ApiResult<StateReport> {
    let name = checked_name(&req.name)?;
    let session = req.session.trim().to_string();
    if session.is_empty() || session.len() > trantor_proto::limits::SESSION {
        return Err(ApiError::bad_request(
            "session: the reporting seat (1-200 chars)",
        ));
    }
    if !cred::STATES.contains(&req.state.as_str()) {
        return Err(ApiError::bad_request(format!(
            "state must be one of: {}",
            cred::STATES.join(", ")
        )));
    }
    Ok(StateReport {
        name,
        session,
        state: req.state.clone(),
        until: req.until,
        evidence: req
            .evidence
            .as_deref()
            .map(|e| e.trim().chars().take(cred::EVIDENCE_MAX).collect()),
    })
}

/// Flip the credentials back at `at`, their reset (the reaper's pass does it too, after a
/// restart).
fn resume_at<S: Store>(hub: &AppState<S>, at: i64) {
    let h = hub.clone();
    tokio::spawn(async move {
        let wait = (at - now_ms()).max(0) as u64 + 20;
        let mut shutdown = h.shutdown.clone();
        tokio::select! {
            _ = tokio::time::sleep(std::time::Duration::from_millis(wait)) => {}
            _ = shutdown.changed() => return,
        }
        if let Err(e) = resume_due(&h).await {
            tracing::warn!(error = %e, "credential resume failed; the reaper retries");
        }
    });
}

//! Named credentials (docs/protocol.md §7.7): `POST /credentials` names one,
//! `POST /credentials/remove` removes one, `GET /credentials` lists them. The hub keeps a name, an agent and a state per credential —
//! never a secret: the request type refuses any other field.

use crate::error::{ApiError, ApiResult};
use crate::extract::JsonBody;
use crate::openapi::{RouteDoc, Verb, shape};
use crate::state::AppState;
use axum::Json;
use axum::extract::State;
use axum::routing::{MethodRouter, get, post};
use trantor_proto::credentials::{
    self as cred, CredentialInfo, CredentialRemove, CredentialReply, CredentialRequest,
    CredentialsReply,
};
use trantor_proto::now_ms;
use trantor_store::{ReadTx, Store, StoreError};

/// The kv document holding every credential.
pub const KEY: &str = "credentials";

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

fn stored(tx: &dyn ReadTx) -> Result<Vec<CredentialInfo>, StoreError> {
    Ok(tx
        .kv(KEY)?
        .and_then(|v| serde_json::from_value(v).ok())
        .unwrap_or_default())
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

/// `GET /credentials`.
pub async fn list<S: Store>(State(hub): State<AppState<S>>) -> ApiResult<Json<CredentialsReply>> {
    let credentials = hub.store.read(|tx| stored(tx)).await?;
    Ok(Json(CredentialsReply { credentials }))
}

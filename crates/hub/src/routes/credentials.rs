//! Named credentials (docs/protocol.md §7.7): `POST /credentials` names one,
//! `POST /credentials/remove` removes one, `GET /credentials` lists them. The hub keeps a name, an agent and a state per credential —
//! never a secret: the request type refuses any other field.
//!
//! `POST /credentials/state` is the circuit breaker's input: a seat whose turn proved its
//! credential exhausted says so with the reset time, and the hub marks it `exhausted until T`
//! once (a second proof of the same exhaustion changes nothing but the seat list), says so on
//! the bus once, and at `T` flips it back to `ok` and says that once too ([`resume_due`]).

use crate::domain::credentials::{KEY, join_seat, notice, resume_due, stored};
use crate::error::{ApiError, ApiResult};
use crate::extract::JsonBody;
use crate::openapi::{RouteDoc, Verb, shape};
use crate::state::{AppState, Outbox};
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

/// What a state report did.
enum Report {
    Unknown,
    Done(Box<CredentialStateReply>, Outbox, Option<i64>),
}

/// `POST /credentials/state` (docs/protocol.md §7.7).
pub async fn state<S: Store>(
    State(hub): State<AppState<S>>,
    JsonBody(req): JsonBody<CredentialStateReport>,
) -> ApiResult<Json<CredentialStateReply>> {
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
    let exhausted = req.state == "exhausted";
    // An exhaustion without a reset time proves nothing the hub can hold the seats to: it is
    // answered like a reset in the past (taken as a seat report, nothing marked).
    let no_until = exhausted && req.until.is_none();
    let until = if exhausted { req.until } else { None };
    let evidence: Option<String> = req
        .evidence
        .as_deref()
        .map(|e| e.trim().chars().take(cred::EVIDENCE_MAX).collect());
    let now = now_ms();
    let past = until.is_some_and(|u| u <= now);
    // No provider's reset is that far out: a mis-read time must not park a crew for good.
    let too_far = until.is_some_and(|u| u > now.saturating_add(cred::UNTIL_MAX_MS));
    let res = hub
        .write(move |tx| {
            let mut all = stored(tx)?;
            let Some(c) = all.iter_mut().find(|c| c.name == name) else {
                return Ok(Report::Unknown);
            };
            let mut changed = join_seat(c, &session);
            let mut out = Outbox::default();
            let mut marked = false;
            let mut ignored = None;
            let mut timer = None;
            if no_until {
                ignored = Some(
                    "until: an exhausted report needs the reset time (ms); nothing marked".into(),
                );
            }
            match until {
                Some(u) if too_far => {
                    ignored = Some(format!(
                        "until {u} is more than {} days out: not a provider's reset, nothing marked",
                        cred::UNTIL_MAX_MS / 86_400_000
                    ));
                }
                Some(u) if past => {
                    ignored = Some(format!(
                        "until {u} is not in the future (now {now}): the reset has passed, nothing marked"
                    ));
                }
                Some(u) => match c.exhausted_until(now) {
                    Some(held) => {
                        // The same exhaustion proved again: marked once; a later reset
                        // pushes the end out.
                        ignored = Some(format!(
                            "already exhausted until {held} (proved by {})",
                            c.proved_by.as_deref().unwrap_or("another seat")
                        ));
                        if u > held {
                            c.until = Some(u);
                            changed = true;
                            timer = Some(u);
                        }
                    }
                    None => {
                        c.state = "exhausted".into();
                        c.until = Some(u);
                        c.last_evidence = evidence.clone();
                        c.proved_by = Some(session.clone());
                        changed = true;
                        marked = true;
                        timer = Some(u);
                        let others = c.seats.iter().filter(|s| **s != session).count();
                        notice(
                            tx,
                            &mut out,
                            trantor_proto::session_project(&session),
                            format!(
                                "⛔ credential {} EXHAUSTED until {} (proved by {session}{}) — every seat on it parks until then ({others} other seat(s))",
                                c.name,
                                trantor_proto::date::fmt_utc_minutes(u),
                                evidence
                                    .as_deref()
                                    .filter(|e| !e.is_empty())
                                    .map(|e| format!(": {e}"))
                                    .unwrap_or_default()
                            ),
                            now,
                        )?;
                    }
                },
                None if req.state == "auth" && c.state != "auth" => {
                    c.state = "auth".into();
                    c.until = None;
                    c.last_evidence = evidence.clone();
                    c.proved_by = Some(session.clone());
                    changed = true;
                    marked = true;
                    notice(
                        tx,
                        &mut out,
                        trantor_proto::session_project(&session),
                        format!(
                            "⛔ credential {} REFUSED (auth, proved by {session}{}) — every seat on it parks until an operator names it again (trantor credentials add {} …)",
                            c.name,
                            evidence
                                .as_deref()
                                .filter(|e| !e.is_empty())
                                .map(|e| format!(": {e}"))
                                .unwrap_or_default(),
                            c.name
                        ),
                        now,
                    )?;
                }
                None if req.state == "auth" => {
                    ignored = Some(format!(
                        "already refused (auth, proved by {})",
                        c.proved_by.as_deref().unwrap_or("another seat")
                    ));
                }
                None => {}
            }
            let info = c.clone().effective(now);
            if changed {
                tx.set_kv(KEY, &serde_json::to_value(&all).unwrap_or_default())?;
            }
            Ok(Report::Done(
                Box::new(CredentialStateReply {
                    ok: true,
                    marked,
                    ignored,
                    credential: Some(info),
                }),
                out,
                timer,
            ))
        })
        .await?;
    match res {
        Report::Unknown => Err(ApiError::not_found(format!(
            "no credential named {} (trantor credentials add)",
            req.name.trim()
        ))),
        Report::Done(reply, out, timer) => {
            hub.publish(out);
            if let Some(at) = timer {
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
            Ok(Json(*reply))
        }
    }
}

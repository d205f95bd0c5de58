//! Presence: `/register`, `/status`, `/peer` and `/peers` (`/enroll` lives in `crate::auth`).

use crate::error::{ApiError, ApiResult, check_len, check_opt};
use crate::extract::{JsonBody, Params};
use crate::presence::Touch;
use crate::state::{AppState, Outbox, health, new_peer, online_event};
use axum::Json;
use axum::extract::State;
use trantor_proto::limits;
use trantor_proto::{
    BROADCAST, OkReply, PeerReply, PeersReply, RegisterReply, RegisterRequest, VERSION, now_ms,
    session_project,
};
use trantor_store::Store;

fn non_empty(v: Option<String>) -> Option<String> {
    v.map(|s| s.trim().to_string()).filter(|s| !s.is_empty())
}

fn validate(req: &RegisterRequest) -> ApiResult<()> {
    check_len("session", &req.session, limits::SESSION)?;
    check_opt("project", &req.project, limits::PROJECT)?;
    check_opt("status", &req.status, limits::STATUS)?;
    check_opt("hookVersion", &req.hook_version, limits::HOOK_VERSION)?;
    check_opt("model", &req.model, limits::MODEL)?;
    check_opt("llm", &req.llm, limits::LLM)?;
    check_opt("kind", &req.kind, limits::KIND)?;
    check_opt("phase", &req.phase, limits::PHASE)?;
    check_opt("persona", &req.persona, limits::LLM)?;
    check_opt("agent", &req.agent, limits::LLM)
}

/// The touch shared by `/register` and `/status`. `/status` stores a missing status as `""`;
/// `/register` keeps the stored one (the MCP heartbeat omits it on purpose).
async fn upsert<S: Store>(
    hub: &AppState<S>,
    req: RegisterRequest,
    status_route: bool,
) -> ApiResult<Option<String>> {
    let session = req.session.trim().to_string();
    if session.is_empty() {
        return Err(ApiError::bad_request("session required"));
    }
    if session == BROADCAST {
        // The original's clients may touch `all`; it is no peer, so nothing is stored.
        return Ok(None);
    }
    validate(&req)?;
    let now = now_ms();
    let touch = hub.presence.touch(&session, now);
    let s = session.clone();
    let out = hub
        .write(move |tx| {
            let mut out = Outbox::default();
            let mut peer = tx.peer(&s)?.unwrap_or_else(|| new_peer(&s, now));
            peer.last_seen = peer.last_seen.max(now);
            if status_route {
                peer.status = req.status.unwrap_or_default();
            } else if let Some(st) = req.status {
                peer.status = st;
            }
            if let Some(p) = non_empty(req.project) {
                peer.project = p;
            }
            if peer.project.is_empty() {
                peer.project = session_project(&s).to_string();
            }
            if let Some(h) = non_empty(req.hook_version) {
                peer.hook_version = Some(h);
            }
            if let Some(m) = non_empty(req.model) {
                peer.model = Some(m);
            }
            if let Some(l) = non_empty(req.llm) {
                peer.llm = Some(l);
            }
            if let Some(k) = non_empty(req.kind) {
                peer.kind = Some(k);
            }
            if let Some(ph) = non_empty(req.phase) {
                peer.phase = Some(ph);
                peer.phase_since = Some(req.phase_since.unwrap_or(now));
            }
            if let Some(p) = non_empty(req.persona) {
                peer.persona = Some(p);
            }
            if let Some(a) = non_empty(req.agent) {
                peer.agent = Some(a);
            }
            peer.health = health(&peer.status).to_string();
            peer.online = true;
            peer.registered = true;
            tx.put_peer(&peer)?;
            if touch == Touch::CameOnline {
                out.event(tx, online_event(&peer, &s, now))?;
            }
            Ok((out, peer.project))
        })
        .await
        .inspect_err(|_| {
            if touch == Touch::CameOnline {
                hub.presence.forget_edge(&session);
            }
        })?;
    let (out, project) = out;
    hub.presence.set_project(&session, &project, true);
    hub.publish(out);
    Ok(Some(session))
}

/// `POST /register`: presence upsert; absent fields keep their stored values.
pub async fn register<S: Store>(
    State(hub): State<AppState<S>>,
    JsonBody(req): JsonBody<RegisterRequest>,
) -> ApiResult<Json<RegisterReply>> {
    // Unlike the original, the reply does not list every known session (that leaked the
    // whole roster to any caller); `/peers` is the roster.
    let session = upsert(&hub, req, false).await?;
    Ok(Json(RegisterReply { ok: true, session }))
}

/// `POST /status`: like `/register`, but a missing status is stored as empty.
pub async fn status<S: Store>(
    State(hub): State<AppState<S>>,
    JsonBody(req): JsonBody<RegisterRequest>,
) -> ApiResult<Json<OkReply>> {
    upsert(&hub, req, true).await?;
    Ok(Json(OkReply { ok: true }))
}

/// `GET /peer?session=`: one peer's presence and delivery ledger (does not touch).
pub async fn peer<S: Store>(
    State(hub): State<AppState<S>>,
    p: Params,
) -> ApiResult<Json<PeerReply>> {
    let session = p.required("session")?.to_string();
    check_len("session", &session, limits::SESSION)?;
    let s = session.clone();
    let row = hub.store.read(move |tx| tx.peer(&s)).await?;
    let Some(row) = row else {
        return Err(ApiError::not_found("unknown peer"));
    };
    let row = hub.live_peer(row, now_ms());
    Ok(Json(PeerReply {
        session: row.session,
        project: row.project,
        last_seen: row.last_seen,
        online: row.online,
        delivered_up_to: row.delivered_up_to,
    }))
}

/// `GET /peers`: every peer seen within the peer TTL, with live presence.
pub async fn peers<S: Store>(State(hub): State<AppState<S>>) -> ApiResult<Json<PeersReply>> {
    let rows = hub.store.read(|tx| tx.peers()).await?;
    let now = now_ms();
    let ttl = hub.cfg.peer_ttl_ms;
    let mut peers: Vec<_> = rows
        .into_iter()
        .map(|p| hub.live_peer(p, now))
        .filter(|p| p.online || now - p.last_seen <= ttl)
        .collect();
    peers.sort_by(|a, b| a.session.cmp(&b.session));
    Ok(Json(PeersReply {
        hub_version: VERSION.to_string(),
        auth_mode: hub.cfg.auth.as_str().into(),
        peers,
    }))
}

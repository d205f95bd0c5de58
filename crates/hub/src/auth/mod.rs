//! Signed identity on the hub (docs/protocol.md §2): the verification layer in front of every
//! route, the nonce replay cache, authorization (roles per project, inbox ownership, `from`
//! binding, the cross-project fence) and read filtering of list replies.
//!
//! Order of a request: the front layer (Host/Origin/Sec-Fetch-Site refusals) runs first in every
//! mode; then this layer authenticates, authorizes and, for list routes, filters the reply; then
//! `_op` idempotency and the route. A refusal here is a 401/403 JSON `{error}` before any route
//! runs, so it changes nothing.

pub mod routes;
pub mod store;
pub mod tls;

pub use crate::config::AuthMode;
use crate::error::ApiError;
use crate::extract::{ReadBody, read_once};
use crate::state::AppState;
pub use crate::state::{AuthState, NONCE_CAP, NonceCache};
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use std::collections::HashMap;
use trantor_proto::auth::{
    self as pauth, ANY_PROJECT, AuthError, HDR_DURABLE, HDR_ENDORSE, HDR_INST, HDR_INST_TS,
    IdentityKind, IdentityRecord, Role, SKEW_MS, TokenRecord, scopes_allow,
};
use trantor_proto::{now_ms, session_project};
use trantor_store::{ReadTx, Store, StoreError};

/// Who the hub decided a request comes from; handlers read it from the request extensions.
#[derive(Debug, Clone)]
pub struct AuthContext {
    /// The mode in force.
    pub mode: AuthMode,
    /// The enrolled identity that signed (directly or through an endorsed instance key).
    pub identity: Option<IdentityRecord>,
    /// Why a warn-mode request passed without an identity (`unsigned`, `bad-signature`, …).
    pub warning: Option<String>,
}

/// Paths served to anyone: the banner, the dashboard and its assets, health, the API document
/// and `/enroll` (which checks its own signature in every mode).
pub fn is_public(path: &str) -> bool {
    matches!(path, "/" | "/ui" | "/health" | "/enroll" | "/openapi.json")
        || path.starts_with("/ui/")
}

/// Paths that need the owner role.
fn owner_path(path: &str) -> bool {
    matches!(
        path,
        "/invite"
            | "/identities"
            | "/identity/revoke"
            | "/tokens"
            | "/token/mint"
            | "/token/revoke"
            | "/overseer/duty"
            | "/sweep"
            | "/project/delete"
            | "/reconcile"
            | "/import"
            | "/proposal/decide"
    )
}

/// The role a request needs: owner for owner routes (and `POST /policy`, `POST /budgets`: a
/// seat must not raise its own budget), write for any other
/// POST, read for every GET.
pub fn required_role(method: &Method, path: &str) -> Role {
    if owner_path(path) || (matches!(path, "/policy" | "/budgets") && method == Method::POST) {
        Role::Owner
    } else if method == Method::POST {
        Role::Write
    } else {
        Role::Read
    }
}

fn json_error(status: StatusCode, reason: impl Into<String>) -> Response {
    ApiError::with(status, reason, Value::Null).into_response()
}

fn header(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// Outcome of authenticating one request.
enum Authn {
    /// Authenticated with this context; for an identified caller also the authorization
    /// verdict and, for list routes, what it may read.
    Pass(AuthContext, Verdict),
    /// Refused with this status and reason.
    Refuse(StatusCode, String),
}

/// Authorization outcome of an identified request, with its read view for list routes.
type Verdict = (Result<(), (StatusCode, String)>, Option<ReadView>);

/// The request as authorization sees it.
struct Facts {
    method: Method,
    path: String,
    /// A POST's body, as the route will read it.
    body: Option<ReadBody>,
    query: HashMap<String, String>,
}

impl Facts {
    /// The body's JSON (`null` for a GET or a body that is not JSON).
    fn body(&self) -> &Value {
        static NULL: Value = Value::Null;
        self.body.as_ref().and_then(ReadBody::json).unwrap_or(&NULL)
    }
}

/// Verifies a request's signature (and instance endorsement), resolves its identity and
/// authorizes it, with one store read.
async fn authenticate<S: Store>(
    hub: &AppState<S>,
    target: &str,
    headers: &HeaderMap,
    body: &[u8],
    facts: Facts,
) -> Result<Authn, StoreError> {
    let method = &facts.method.clone();
    let mode = hub.cfg.auth;
    let soft = |reason: String| -> Authn {
        if mode == AuthMode::Warn {
            tracing::warn!(%method, target, reason, "auth warn");
            Authn::Pass(
                AuthContext {
                    mode,
                    identity: None,
                    warning: Some(reason),
                },
                (Ok(()), None),
            )
        } else {
            Authn::Refuse(StatusCode::UNAUTHORIZED, reason)
        }
    };
    if let Some(token) = bearer(headers) {
        return bearer_authn(hub, token, facts, soft).await;
    }
    if !pauth::has_signature_headers(|h| header(headers, h)) {
        return Ok(if mode == AuthMode::Warn {
            tracing::warn!(%method, target, "auth warn: unsigned");
            Authn::Pass(
                AuthContext {
                    mode,
                    identity: None,
                    warning: Some("unsigned".into()),
                },
                (Ok(()), None),
            )
        } else {
            Authn::Refuse(StatusCode::UNAUTHORIZED, "signature required".into())
        });
    }
    let now = now_ms();
    let verified =
        match pauth::verify_request(|h| header(headers, h), method.as_str(), target, body, now) {
            Ok(v) => v,
            Err(e) => return Ok(soft(e.reason())),
        };
    // An instance key: its own signature verified above; the durable key must have endorsed it,
    // and the request is then the durable identity's.
    let durable = header(headers, HDR_DURABLE).filter(|s| !s.is_empty());
    let inst = header(headers, HDR_INST).filter(|s| !s.is_empty());
    let identity_key = match (durable, inst) {
        (Some(durable), Some(inst)) => {
            let created = header(headers, HDR_INST_TS)
                .and_then(|t| t.trim().parse::<i64>().ok())
                .unwrap_or(0);
            let endorsement = header(headers, HDR_ENDORSE).unwrap_or_default();
            if !pauth::verify_endorsement(&durable, &verified.pubkey, &inst, created, &endorsement)
            {
                return Ok(soft(AuthError::BadEndorsement.reason()));
            }
            durable.to_ascii_lowercase()
        }
        _ => verified.pubkey.clone(),
    };
    let key = identity_key.clone();
    let cfg = hub.cfg.clone();
    let looked = hub
        .store
        .read(move |tx| {
            let Some(id) = store::identity(tx, &key)? else {
                return Ok(None);
            };
            if id.revoked_at.is_some() {
                return Ok(Some((id, (Ok(()), None))));
            }
            let verdict = judge(tx, &cfg, &id, &facts, |tx| {
                let duty = crate::domain::duty::duty_session(cfg.duty_session.as_deref(), tx)?;
                Ok(is_duty(&id, duty.as_deref()))
            })?;
            Ok(Some((id, verdict)))
        })
        .await?;
    let (identity, verdict) = match looked {
        None => return Ok(soft(AuthError::UnknownIdentity.reason())),
        Some((i, _)) if i.revoked_at.is_some() => {
            return Ok(soft(AuthError::Revoked.reason()));
        }
        Some(found) => found,
    };
    let nonce_key = format!("{}:{}", verified.pubkey, verified.nonce);
    if !hub
        .auth
        .nonces
        .check_and_insert(nonce_key, verified.ts + SKEW_MS, now)
    {
        return Ok(soft(AuthError::Replay.reason()));
    }
    Ok(Authn::Pass(
        AuthContext {
            mode,
            identity: Some(identity),
            warning: None,
        },
        verdict,
    ))
}

/// The token of an `Authorization: Bearer …` header, if the request has one.
pub fn bearer(headers: &HeaderMap) -> Option<String> {
    let v = header(headers, "authorization")?;
    let (scheme, token) = v.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then(|| token.to_string())
}

/// The live token record of `token`, if any (unknown, expired and revoked tokens are none).
pub async fn resolve_token<S: Store>(
    hub: &AppState<S>,
    token: &str,
) -> Result<Option<TokenRecord>, StoreError> {
    let t = token.to_string();
    let rec = hub.store.read(move |tx| store::token(tx, &t)).await?;
    Ok(rec.filter(|r| r.live(now_ms())))
}

/// The identity a token stands for: its session, with its one scope. Authorization treats it
/// exactly as the signed identity of that session would be treated.
pub fn token_identity(rec: &TokenRecord) -> IdentityRecord {
    IdentityRecord {
        name: rec.session.clone(),
        kind: IdentityKind::Agent,
        pubkey: format!("token:{}", rec.id),
        created_at: rec.created_at,
        enrolled_by: trantor_proto::auth::EnrolledBy::Invite,
        scopes: vec![trantor_proto::auth::Scope {
            project: rec.project.clone(),
            role: rec.role.min(Role::Write),
        }],
        revoked_at: None,
    }
}

/// Authenticates and authorizes a request carrying a bearer token (docs/protocol.md §2.6).
async fn bearer_authn<S: Store>(
    hub: &AppState<S>,
    token: String,
    facts: Facts,
    soft: impl Fn(String) -> Authn,
) -> Result<Authn, StoreError> {
    let mode = hub.cfg.auth;
    let cfg = hub.cfg.clone();
    let now = now_ms();
    let looked = hub
        .store
        .read(move |tx| {
            let Some(rec) = store::token(tx, &token)? else {
                return Ok(None);
            };
            if !rec.live(now) {
                return Ok(Some((rec, None)));
            }
            let id = token_identity(&rec);
            let verdict = judge(tx, &cfg, &id, &facts, |_| Ok(false))?;
            Ok(Some((rec, Some((id, verdict)))))
        })
        .await?;
    Ok(match looked {
        None => soft("unknown token".into()),
        Some((rec, None)) if rec.revoked_at.is_some() => soft("token revoked".into()),
        Some((_, None)) => soft("token expired".into()),
        Some((_, Some((identity, verdict)))) => Authn::Pass(
            AuthContext {
                mode,
                identity: Some(identity),
                warning: None,
            },
            verdict,
        ),
    })
}

/// What authorization needs to know about the request beyond its path.
#[derive(Debug, Default)]
struct Target {
    /// The project the request acts on (empty: none named).
    project: String,
    /// The project the cross-project fence compares with the caller's home (empty: exempt).
    fence: String,
}

fn str_field<'a>(v: &'a Value, k: &str) -> &'a str {
    v.get(k).and_then(Value::as_str).unwrap_or("")
}

/// The card id a request names, read as the route will read it: an integer, an integral float
/// (`3.0`, docs/protocol.md §1.1) or a numeric string in the body, else the `id` query value.
/// Reading less than the route does would let a request past the project fence.
fn id_field(v: &Value, q: &HashMap<String, String>) -> Option<i64> {
    v.get("id")
        .and_then(|x| {
            x.as_i64()
                .or_else(|| {
                    x.as_f64()
                        .and_then(crate::extract::integral)
                        .and_then(|i| i.as_i64())
                })
                .or_else(|| x.as_str().and_then(|s| s.trim().parse().ok()))
        })
        .or_else(|| {
            q.get("id")
                .and_then(|s| s.trim().trim_start_matches('#').parse().ok())
        })
}

/// The project of a peer (its row, else its name's suffix).
fn peer_project(tx: &dyn ReadTx, session: &str) -> Result<String, StoreError> {
    Ok(tx
        .peer(session)?
        .map(|p| p.project)
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| session_project(session).to_string()))
}

/// The project a request names: the body's `project`, else the `project` query value.
fn named_project(body: &Value, q: &HashMap<String, String>) -> String {
    let p = str_field(body, "project");
    if p.is_empty() {
        q.get("project").cloned().unwrap_or_default()
    } else {
        p.to_string()
    }
}

/// Only a project, no fence.
fn unfenced(project: String) -> Target {
    Target {
        project,
        fence: String::new(),
    }
}

/// What authorization needs to know about a request to `path` (its body and query read as the
/// route will read them).
fn target_of(
    tx: &dyn ReadTx,
    path: &str,
    body: &Value,
    q: &HashMap<String, String>,
) -> Result<Target, StoreError> {
    Ok(match path {
        "/task/update" | "/card" | "/task/checklist-toggle" => card_target(tx, path, body, q)?,
        "/send" => send_target(tx, body)?,
        "/delivery" | "/delivery/fence" | "/credentials/state" | "/contracts/reroute" => {
            unfenced(seat_or_message_project(tx, body, q)?)
        }
        "/cost" => unfenced(cost_project(tx, body, q)?),
        "/task" | "/register" => {
            let project = named_project(body, q);
            Target {
                fence: project.clone(),
                project,
            }
        }
        "/invite" => Target {
            project: ANY_PROJECT.into(),
            fence: invite_fence(body),
        },
        "/identities"
        | "/identity/revoke"
        | "/tokens"
        | "/token/mint"
        | "/token/revoke"
        | "/overseer/duty"
        | "/credentials"
        | "/credentials/remove" => unfenced(ANY_PROJECT.into()),
        "/policy" => unfenced(String::new()),
        _ => unfenced(named_project(body, q)),
    })
}

/// A card route acts on the card's project; only `/task/update` is fenced by it.
fn card_target(
    tx: &dyn ReadTx,
    path: &str,
    body: &Value,
    q: &HashMap<String, String>,
) -> Result<Target, StoreError> {
    let project = match id_field(body, q) {
        Some(id) => tx.card(id)?.map(|c| c.project).unwrap_or_default(),
        None => String::new(),
    };
    Ok(Target {
        fence: if path == "/task/update" {
            project.clone()
        } else {
            String::new()
        },
        project,
    })
}

/// A send acts on its project (else the sender's) and is fenced by the addressee's project
/// (none for a broadcast).
fn send_target(tx: &dyn ReadTx, body: &Value) -> Result<Target, StoreError> {
    let from = str_field(body, "from");
    let mut project = str_field(body, "project").to_string();
    if project.is_empty() && !from.is_empty() {
        project = peer_project(tx, from)?;
    }
    let to = str_field(body, "to");
    let fence = if to.is_empty() || to == trantor_proto::BROADCAST {
        String::new()
    } else {
        peer_project(tx, to)?
    };
    Ok(Target { project, fence })
}

/// A mark or fence acts on the seat's own project; a read of one message, on the message's
/// project.
fn seat_or_message_project(
    tx: &dyn ReadTx,
    body: &Value,
    q: &HashMap<String, String>,
) -> Result<String, StoreError> {
    let session = str_field(body, "session");
    let session = if session.is_empty() {
        q.get("session").map(String::as_str).unwrap_or("")
    } else {
        session
    };
    Ok(match (id_field(body, q), session.is_empty()) {
        (_, false) => peer_project(tx, session)?,
        (Some(id), true) => tx.message(id)?.map(|m| m.project).unwrap_or_default(),
        (None, true) => String::new(),
    })
}

/// A card's cost is read on the card's project; a seat's, on the seat's.
fn cost_project(
    tx: &dyn ReadTx,
    body: &Value,
    q: &HashMap<String, String>,
) -> Result<String, StoreError> {
    let card = q.get("card").and_then(|s| s.trim().parse::<i64>().ok());
    Ok(match (card, named_project(body, q)) {
        (Some(id), _) => tx.card(id)?.map(|c| c.project).unwrap_or_default(),
        (None, p) if !p.is_empty() => p,
        (None, _) => match q.get("seat") {
            Some(s) => peer_project(tx, s)?,
            None => String::new(),
        },
    })
}

/// An invitation is fenced by the first concrete project its scopes name.
fn invite_fence(body: &Value) -> String {
    body.get("scopes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|s| {
            s.get("project")
                .or_else(|| s.get("proj"))
                .and_then(Value::as_str)
        })
        .find(|p| !p.is_empty() && *p != ANY_PROJECT)
        .unwrap_or("")
        .to_string()
}

/// Links declared in the policy document, as project sets.
fn policy_links(tx: &dyn ReadTx) -> Result<Vec<Vec<String>>, StoreError> {
    let v = tx.kv(crate::domain::policy::POLICY_KEY)?;
    let p: trantor_proto::PolicyReply = v
        .and_then(|v| serde_json::from_value(v).ok())
        .unwrap_or_default();
    Ok(p.links.into_iter().map(|l| l.projects).collect())
}

fn linked(links: &[Vec<String>], a: &str, b: &str) -> bool {
    a == b
        || links
            .iter()
            .any(|l| l.iter().any(|p| p == a) && l.iter().any(|p| p == b))
}

/// Whether `a` and `b` are the same project up to an instance suffix (`proj` / `proj-a`).
fn instance_of(a: &str, b: &str) -> bool {
    let (lo, hi) = if a.len() <= b.len() { (a, b) } else { (b, a) };
    hi.len() > lo.len() && hi.starts_with(lo) && !hi.as_bytes()[lo.len()].is_ascii_alphanumeric()
}

/// The caller's home project for the fence: its single concrete scope project (when the name's
/// suffix agrees), else the name's suffix.
pub fn home_project(id: &IdentityRecord) -> String {
    let suffix = session_project(&id.name).to_string();
    let mut scoped: Vec<&str> = id
        .scopes
        .iter()
        .map(|s| s.project.as_str())
        .filter(|p| !p.is_empty() && *p != ANY_PROJECT)
        .collect();
    scoped.sort_unstable();
    scoped.dedup();
    if let [only] = scoped[..]
        && (suffix.is_empty() || suffix == only || instance_of(&suffix, only))
    {
        return only.to_string();
    }
    suffix
}

/// Whether `id` is the duty identity (`hub:duty` or the duty session in force).
fn is_duty(id: &IdentityRecord, duty: Option<&str>) -> bool {
    !id.name.is_empty() && (id.name == "hub:duty" || Some(id.name.as_str()) == duty)
}

/// What an identity may read, for filtering list replies.
struct ReadView {
    all: bool,
    scopes: Vec<trantor_proto::auth::Scope>,
    links: Vec<Vec<String>>,
}

impl ReadView {
    fn can_read(&self, project: &str) -> bool {
        self.all || scopes_allow(&self.scopes, project, Role::Read)
    }

    /// Readable, or linked by policy to a readable project (the wider `/peers` test).
    fn can_discover(&self, project: &str) -> bool {
        self.can_read(project)
            || (!project.is_empty()
                && self.links.iter().any(|l| {
                    l.iter().any(|p| p == project)
                        && l.iter().any(|p| p != project && self.can_read(p))
                }))
    }
}

fn refuse(status: StatusCode, reason: impl Into<String>) -> Result<(), (StatusCode, String)> {
    Err((status, reason.into()))
}

/// Authorizes an identified request ([`authorize`]) and, when it may list, its read view;
/// `all` says (reading the store only then) whether the identity reads every project.
fn judge(
    tx: &dyn ReadTx,
    cfg: &crate::config::Config,
    id: &IdentityRecord,
    facts: &Facts,
    all: impl FnOnce(&dyn ReadTx) -> Result<bool, StoreError>,
) -> Result<Verdict, StoreError> {
    let v = authorize(
        tx,
        cfg,
        id,
        &facts.method,
        &facts.path,
        facts.body(),
        &facts.query,
    )?;
    let view = if filtered_list(&facts.path).is_some() && v.is_ok() {
        Some(ReadView {
            all: all(tx)?,
            scopes: id.scopes.clone(),
            links: policy_links(tx)?,
        })
    } else {
        None
    };
    Ok((v, view))
}

/// Authorizes an identified request: role on the target project, session bindings, the fence.
fn authorize(
    tx: &dyn ReadTx,
    cfg: &crate::config::Config,
    id: &IdentityRecord,
    method: &Method,
    path: &str,
    body: &Value,
    q: &HashMap<String, String>,
) -> Result<Result<(), (StatusCode, String)>, StoreError> {
    let duty_session = crate::domain::duty::duty_session(cfg.duty_session.as_deref(), tx)?;
    let duty = is_duty(id, duty_session.as_deref());
    // Session bindings: a signed caller speaks and reads only as itself.
    match path {
        "/send" if str_field(body, "from") != id.name => {
            return Ok(refuse(StatusCode::FORBIDDEN, "from must match signer"));
        }
        "/delivered" | "/register" | "/status" | "/delivery" | "/delivery/fence" | "/turns"
            if *method == Method::POST && str_field(body, "session") != id.name =>
        {
            return Ok(refuse(StatusCode::FORBIDDEN, "session must match signer"));
        }
        "/inbox" | "/poll" if q.get("session").map(String::as_str) != Some(id.name.as_str()) => {
            return Ok(refuse(StatusCode::FORBIDDEN, "forbidden"));
        }
        // The session digest is the session's own; the project digest (no session) needs read
        // on the project, checked below.
        "/catchup"
            if q.contains_key("session")
                && q.get("session").map(String::as_str) != Some(id.name.as_str()) =>
        {
            return Ok(refuse(StatusCode::FORBIDDEN, "forbidden"));
        }
        "/stream" => {
            let session = q.get("session").map(String::as_str).unwrap_or("");
            if !session.is_empty() && session != "all" && session != id.name {
                return Ok(refuse(StatusCode::FORBIDDEN, "forbidden"));
            }
            let events = q.get("events").is_some_and(|v| v == "1" || v == "true");
            if events && !scopes_allow(&id.scopes, ANY_PROJECT, Role::Read) && !duty {
                return Ok(refuse(
                    StatusCode::FORBIDDEN,
                    "events=1 streams every project's events: it needs read on *",
                ));
            }
        }
        _ => {}
    }
    let need = required_role(method, path);
    let target = target_of(tx, path, body, q)?;
    let bypass = duty && (need == Role::Read || path == "/send" || path == "/duty/failure");
    if !bypass && !scopes_allow(&id.scopes, &target.project, need) {
        return Ok(refuse(StatusCode::FORBIDDEN, "forbidden"));
    }
    // The cross-project fence.
    let fenced =
        !target.fence.is_empty() && id.kind != IdentityKind::Human && !(path == "/send" && duty);
    if fenced {
        let home = home_project(id);
        if !home.is_empty() && home != target.fence {
            let links = policy_links(tx)?;
            if !linked(&links, &home, &target.fence) {
                return Ok(refuse(
                    StatusCode::FORBIDDEN,
                    format!(
                        "cross-project: {home} may not act on {} — cross-project action is a \
                         breach unless the operator linked the projects. Run: trantor policy \
                         link {home} {} --reason \"<why>\"",
                        target.fence, target.fence
                    ),
                ));
            }
        }
    }
    Ok(Ok(()))
}

/// Paths whose replies are filtered by what the caller may read: `(path, array field)`.
fn filtered_list(path: &str) -> Option<&'static str> {
    match path {
        "/peers" => Some("peers"),
        "/tasks" => Some("tasks"),
        "/events" => Some("events"),
        "/recent" => Some("messages"),
        "/inbox" | "/poll" => Some("messages"),
        "/verify-gates" => Some("gates"),
        "/history" => Some("events"),
        "/claims" => Some("claims"),
        "/proposals" => Some("proposals"),
        "/grants" => Some("grants"),
        "/projects" => Some("projects"),
        _ => None,
    }
}

/// Drops the rows of a list reply the caller may not read. Direct messages on `/inbox` and
/// `/poll` are the caller's own (ownership was checked); broadcasts need read on their project.
fn filter_reply(path: &str, field: &str, view: &ReadView, body: &mut Value, me: &str) {
    let Some(rows) = body.get_mut(field).and_then(Value::as_array_mut) else {
        return;
    };
    rows.retain(|row| {
        let project = str_field(row, "project");
        match path {
            "/peers" => view.can_discover(project),
            "/inbox" | "/poll" if str_field(row, "to") == me => true,
            _ => view.can_read(project),
        }
    });
}

/// Most bytes of a list reply the filter will buffer.
const MAX_FILTER_BYTES: usize = 64 * 1024 * 1024;

/// The auth layer (see the module doc). Public paths and `RELAY_AUTH=off` pass untouched.
///
/// The checked path is boxed: a held `/poll` waits inside this future, and an unboxed async fn
/// is as large as its largest state, so every held poll would carry the checked path's locals
/// (a few KB each) even with authentication off.
pub async fn layer<S: Store>(State(hub): State<AppState<S>>, req: Request, next: Next) -> Response {
    if hub.cfg.auth == AuthMode::Off || is_public(req.uri().path()) {
        return next.run(req).await;
    }
    Box::pin(checked(hub, req, next)).await
}

/// The auth layer for a request that must be authenticated.
async fn checked<S: Store>(hub: AppState<S>, req: Request, next: Next) -> Response {
    let path = req.uri().path().to_string();
    let (req, body) = if req.method() == Method::POST {
        match read_once(req).await {
            Ok((req, body)) => (req, Some(body)),
            Err(e) => return e.into_response(),
        }
    } else {
        (req, None)
    };
    let bytes = body.as_ref().map(|b| b.bytes().clone()).unwrap_or_default();
    let (parts, req_body) = req.into_parts();
    let target = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| path.clone());
    let facts = Facts {
        method: parts.method.clone(),
        path: path.clone(),
        body,
        query: parts
            .uri
            .query()
            .and_then(|raw| crate::extract::parse_query(raw).ok())
            .unwrap_or_default(),
    };
    let (ctx, view) = match authenticate(&hub, &target, &parts.headers, &bytes, facts).await {
        Ok(Authn::Pass(_, (Err((status, reason)), _))) => return json_error(status, reason),
        Ok(Authn::Pass(ctx, (Ok(()), view))) => (ctx, view),
        Ok(Authn::Refuse(status, reason)) => return json_error(status, reason),
        Err(e) => return ApiError::from(e).into_response(),
    };
    let me = ctx
        .identity
        .as_ref()
        .map(|i| i.name.clone())
        .unwrap_or_default();
    let mut req = Request::from_parts(parts, req_body);
    req.extensions_mut().insert(ctx);
    let resp = next.run(req).await;
    let (Some(view), Some(field)) = (view, filtered_list(&path)) else {
        return resp;
    };
    if !resp.status().is_success() {
        return resp;
    }
    let (mut rparts, rbody) = resp.into_parts();
    let Ok(raw) = axum::body::to_bytes(rbody, MAX_FILTER_BYTES).await else {
        return json_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "reply too large to filter",
        );
    };
    let Ok(mut v) = serde_json::from_slice::<Value>(&raw) else {
        return Response::from_parts(rparts, Body::from(raw));
    };
    filter_reply(&path, field, &view, &mut v, &me);
    let out = serde_json::to_vec(&v).unwrap_or_default();
    rparts.headers.remove(axum::http::header::CONTENT_LENGTH);
    Response::from_parts(rparts, Body::from(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use trantor_proto::auth::{EnrolledBy, Scope};

    fn id(name: &str, scopes: &[(&str, Role)]) -> IdentityRecord {
        IdentityRecord {
            name: name.into(),
            kind: IdentityKind::Agent,
            pubkey: "00".repeat(32),
            created_at: 1,
            enrolled_by: EnrolledBy::Tofu,
            scopes: scopes
                .iter()
                .map(|(p, r)| Scope {
                    project: p.to_string(),
                    role: *r,
                })
                .collect(),
            revoked_at: None,
        }
    }

    #[test]
    fn nonce_cache_refuses_a_replay_and_forgets_after_the_window() {
        let c = NonceCache::default();
        assert!(c.check_and_insert("k:1".into(), 1_000, 0));
        assert!(!c.check_and_insert("k:1".into(), 1_000, 500));
        assert!(c.check_and_insert("k:2".into(), 1_000, 500));
        // Past its expiry the pair is forgotten (its signature would be stale by then).
        assert!(c.check_and_insert("k:1".into(), 5_000, 2_000));
        assert!(c.len() <= 2);
    }

    #[test]
    fn home_project_rules() {
        assert_eq!(home_project(&id("claude:a", &[("a", Role::Write)])), "a");
        assert_eq!(home_project(&id("claude:a-1", &[("a", Role::Write)])), "a");
        assert_eq!(home_project(&id("claude:b", &[("a", Role::Write)])), "b");
        assert_eq!(home_project(&id("op", &[("*", Role::Owner)])), "");
        assert_eq!(
            home_project(&id("x:c", &[("a", Role::Read), ("b", Role::Read)])),
            "c"
        );
    }

    #[test]
    fn the_named_project_and_an_invitations_fence() {
        let q = |p: &str| HashMap::from([("project".to_string(), p.to_string())]);
        let cases: &[(Value, HashMap<String, String>, &str)] = &[
            (serde_json::json!({"project": "a"}), q("b"), "a"),
            (serde_json::json!({"project": ""}), q("b"), "b"),
            (serde_json::json!({}), HashMap::new(), ""),
        ];
        for (body, q, want) in cases {
            assert_eq!(named_project(body, q), *want, "{body}");
        }
        let fences = [
            (serde_json::json!({}), ""),
            (
                serde_json::json!({"scopes": [{"project": "*"}, {"proj": "a"}]}),
                "a",
            ),
            (
                serde_json::json!({"scopes": [{"project": ""}, {"project": "b"}]}),
                "b",
            ),
            (serde_json::json!({"scopes": [{"project": "*"}]}), ""),
        ];
        for (body, want) in fences {
            assert_eq!(invite_fence(&body), want, "{body}");
        }
    }

    #[test]
    fn roles_by_route() {
        assert_eq!(required_role(&Method::GET, "/peers"), Role::Read);
        assert_eq!(required_role(&Method::POST, "/send"), Role::Write);
        assert_eq!(required_role(&Method::POST, "/invite"), Role::Owner);
        assert_eq!(required_role(&Method::POST, "/policy"), Role::Owner);
        assert_eq!(required_role(&Method::GET, "/policy"), Role::Read);
        assert_eq!(required_role(&Method::POST, "/budgets"), Role::Owner);
        assert_eq!(required_role(&Method::GET, "/budgets/check"), Role::Read);
        assert!(is_public("/ui/app.js") && is_public("/health") && !is_public("/peers"));
    }
}

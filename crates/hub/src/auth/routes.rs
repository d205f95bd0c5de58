//! `/enroll`, `/invite`, `/identities` and `/identity/revoke` (docs/protocol.md §2.3).

use super::{AuthContext, AuthMode, store};
use crate::error::{ApiError, ApiResult};
use crate::extract::ReadBody;
use crate::state::AppState;
use axum::Json;
use axum::extract::{Extension, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use serde_json::json;
use subtle::ConstantTimeEq as _;
use trantor_proto::auth::{
    self as pauth, ANY_PROJECT, EnrollReply, EnrollRequest, EnrolledBy, IDENTITY_KINDS,
    IdentitiesReply, IdentityKind, IdentityRecord, InviteRecord, InviteReply, InviteRequest,
    RevokeReply, RevokeRequest, Role, Scope, TokenMintReply, TokenMintRequest, TokenRecord,
    TokenRevokeReply, TokenRevokeRequest, TokensReply,
};
use trantor_proto::{now_ms, session_project};
use trantor_store::Store;

/// Most scopes one identity or invite carries.
pub const MAX_SCOPES: usize = 20;
/// Longest identity name kept.
pub const MAX_NAME: usize = 120;
/// Default invite lifetime, seconds.
pub const INVITE_TTL_SEC: f64 = 86_400.0;
/// Longest invite lifetime, seconds (30 days).
pub const INVITE_TTL_MAX_SEC: f64 = 30.0 * 86_400.0;

fn kind_of(kind: Option<&str>) -> ApiResult<IdentityKind> {
    let k = kind
        .map(str::trim)
        .filter(|k| !k.is_empty())
        .unwrap_or("agent");
    IdentityKind::parse(k).ok_or_else(|| {
        ApiError::with(
            StatusCode::BAD_REQUEST,
            format!("kind must be one of: {}", IDENTITY_KINDS.join(", ")),
            json!({ "allowedKinds": IDENTITY_KINDS }),
        )
    })
}

fn clean_scopes(scopes: &[Scope]) -> ApiResult<Vec<Scope>> {
    if scopes.len() > MAX_SCOPES {
        return Err(ApiError::bad_request(format!(
            "at most {MAX_SCOPES} scopes"
        )));
    }
    scopes
        .iter()
        .map(|s| {
            let project = s.project.trim();
            crate::error::check_len("scope project", project, trantor_proto::limits::PROJECT)?;
            Ok(Scope {
                project: if project.is_empty() {
                    ANY_PROJECT.to_string()
                } else {
                    project.to_string()
                },
                role: s.role,
            })
        })
        .collect()
}

/// The scopes of a key enrolled without invite scopes: explicit `scopes`, else `project` (or the
/// name's suffix, or `*`) with `role` (or write for agents, owner for humans and tools).
fn default_scopes(req: &EnrollRequest, name: &str, kind: IdentityKind) -> ApiResult<Vec<Scope>> {
    if let Some(s) = req.scopes.as_deref().filter(|s| !s.is_empty()) {
        return clean_scopes(s);
    }
    let project = req
        .project
        .as_deref()
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| match session_project(name) {
            "" => ANY_PROJECT,
            p => p,
        });
    crate::error::check_len("project", project, trantor_proto::limits::PROJECT)?;
    let role = req.role.unwrap_or(if kind == IdentityKind::Agent {
        Role::Write
    } else {
        Role::Owner
    });
    Ok(vec![Scope {
        project: project.to_string(),
        role,
    }])
}

fn header(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// `POST /enroll`: enroll the key that signed the request. Needs a valid signature in every
/// mode (no replay check: re-enrolling is idempotent).
pub async fn enroll<S: Store>(
    State(hub): State<AppState<S>>,
    uri: Uri,
    headers: HeaderMap,
    body: ReadBody,
) -> ApiResult<Json<EnrollReply>> {
    let target = uri
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| uri.path().to_string());
    let verified = pauth::verify_request(
        |h| header(&headers, h),
        Method::POST.as_str(),
        &target,
        body.bytes(),
        now_ms(),
    )
    .map_err(|e| ApiError::with(StatusCode::UNAUTHORIZED, e.reason(), json!(null)))?;
    let req: EnrollRequest = body.decode()?;
    let kind = kind_of(req.kind.as_deref())?;
    let token = req.token.clone().unwrap_or_default();
    let bootstrap = hub.cfg.bootstrap_token.clone();
    let tofu_ok = hub.cfg.enroll_tofu && crate::config::is_loopback(&hub.cfg.host);
    let pubkey = verified.pubkey;
    let name = req
        .name
        .as_deref()
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(|n| crate::domain::cards::truncate(n, MAX_NAME))
        .unwrap_or_else(|| pubkey[..16].to_string());
    let reply = hub
        .write(move |tx| {
            if let Some(existing) = store::identity(&*tx, &pubkey)? {
                if existing.revoked_at.is_some() {
                    return Ok(Err(ApiError::forbidden("revoked")));
                }
                return Ok(Ok(EnrollReply {
                    ok: true,
                    identity: existing.view(),
                    scopes: existing.scopes,
                }));
            }
            let now = now_ms();
            let bootstrap_match = match &bootstrap {
                Some(b) if !token.is_empty() => bool::from(b.as_bytes().ct_eq(token.as_bytes())),
                _ => false,
            };
            let (enrolled_by, scopes) = if bootstrap_match && !store::any_identity(&*tx)? {
                (
                    EnrolledBy::Bootstrap,
                    vec![Scope {
                        project: ANY_PROJECT.into(),
                        role: Role::Owner,
                    }],
                )
            } else if !token.is_empty() {
                match store::invite(&*tx, &token)? {
                    Some(mut inv) if inv.used_at.is_none() && inv.expires_at >= now => {
                        inv.used_at = Some(now);
                        inv.used_by = Some(pubkey.clone());
                        store::put_invite(tx, &token, &inv)?;
                        (EnrolledBy::Invite, inv.scopes)
                    }
                    _ => return Ok(Err(ApiError::forbidden("invalid invite"))),
                }
            } else if tofu_ok {
                (EnrolledBy::Tofu, Vec::new())
            } else {
                return Ok(Err(ApiError::forbidden("tofu enrollment refused")));
            };
            let scopes = if scopes.is_empty() {
                match default_scopes(&req, &name, kind) {
                    Ok(s) => s,
                    Err(e) => return Ok(Err(e)),
                }
            } else {
                scopes
            };
            let rec = IdentityRecord {
                name,
                kind,
                pubkey,
                created_at: now,
                enrolled_by,
                scopes,
                revoked_at: None,
            };
            store::put_identity(tx, &rec)?;
            tracing::info!(name = %rec.name, pubkey = %rec.pubkey, by = ?rec.enrolled_by, "enrolled");
            Ok(Ok(EnrollReply {
                ok: true,
                identity: rec.view(),
                scopes: rec.scopes,
            }))
        })
        .await??;
    Ok(Json(reply))
}

/// The owner routes need a signed owner in warn mode too (the layer lets unsigned warn-mode
/// callers through everywhere else); in off mode nothing is checked.
fn require_signed(hub_mode: AuthMode, ctx: Option<&AuthContext>) -> ApiResult<()> {
    if hub_mode == AuthMode::Off || ctx.is_some_and(|c| c.identity.is_some()) {
        return Ok(());
    }
    let reason = ctx
        .and_then(|c| c.warning.clone())
        .filter(|w| w != "unsigned")
        .unwrap_or_else(|| "signature required".into());
    Err(ApiError::with(
        StatusCode::UNAUTHORIZED,
        reason,
        json!(null),
    ))
}

/// `POST /invite` (owner of `*`): mint a one-use token that enrolls a key with `scopes`.
pub async fn invite<S: Store>(
    State(hub): State<AppState<S>>,
    ctx: Option<Extension<AuthContext>>,
    body: ReadBody,
) -> ApiResult<Json<InviteReply>> {
    let ctx = ctx.map(|Extension(c)| c);
    require_signed(hub.cfg.auth, ctx.as_ref())?;
    let req: InviteRequest = body.decode()?;
    let kind = kind_of(req.kind.as_deref())?;
    let scopes = clean_scopes(&req.scopes)?;
    if scopes.is_empty() {
        return Err(ApiError::bad_request("scopes required"));
    }
    let ttl = req
        .ttl_sec
        .filter(|t| t.is_finite() && *t > 0.0)
        .unwrap_or(INVITE_TTL_SEC)
        .clamp(1.0, INVITE_TTL_MAX_SEC);
    let now = now_ms();
    let expires_at = now + (ttl * 1000.0) as i64;
    let token = {
        let mut b = [0u8; 24];
        rand::RngCore::fill_bytes(&mut rand::rngs::OsRng, &mut b);
        hex::encode(b)
    };
    let rec = InviteRecord {
        scopes: scopes.clone(),
        kind,
        expires_at,
        created_at: now,
        created_by: ctx
            .and_then(|c| c.identity)
            .map(|i| i.pubkey)
            .unwrap_or_default(),
        used_at: None,
        used_by: None,
    };
    let t = token.clone();
    hub.write(move |tx| store::put_invite(tx, &t, &rec)).await?;
    Ok(Json(InviteReply {
        ok: true,
        token,
        scopes,
        expires_at,
    }))
}

/// `GET /identities` (owner of `*`): every enrolled identity.
pub async fn identities<S: Store>(
    State(hub): State<AppState<S>>,
    ctx: Option<Extension<AuthContext>>,
) -> ApiResult<Json<IdentitiesReply>> {
    require_signed(hub.cfg.auth, ctx.map(|Extension(c)| c).as_ref())?;
    let identities = hub.store.read(|tx| store::identities(tx)).await?;
    Ok(Json(IdentitiesReply {
        ok: true,
        identities,
    }))
}

/// `POST /identity/revoke` (owner of `*`): revoke a key, or every key of a name. A revoked key
/// is refused from its next request on, and cannot enroll again.
pub async fn revoke<S: Store>(
    State(hub): State<AppState<S>>,
    ctx: Option<Extension<AuthContext>>,
    body: ReadBody,
) -> ApiResult<Json<RevokeReply>> {
    require_signed(hub.cfg.auth, ctx.map(|Extension(c)| c).as_ref())?;
    let req: RevokeRequest = body.decode()?;
    let pubkey = req
        .pubkey
        .as_deref()
        .map(|p| p.trim().to_ascii_lowercase())
        .filter(|p| !p.is_empty());
    let name = crate::error::non_blank(req.name.as_deref());
    if pubkey.is_none() && name.is_none() {
        return Err(ApiError::bad_request("name or pubkey required"));
    }
    let reply = hub
        .write(move |tx| {
            let all = store::identities(&*tx)?;
            let matching: Vec<IdentityRecord> = all
                .into_iter()
                .filter(|i| {
                    pubkey.as_deref().is_some_and(|p| p == i.pubkey)
                        || name.as_deref().is_some_and(|n| n == i.name)
                })
                .collect();
            if matching.is_empty() {
                return Ok(Err(ApiError::not_found("no such identity")));
            }
            let now = now_ms();
            let mut revoked = Vec::new();
            for mut i in matching {
                if i.revoked_at.is_some() {
                    continue;
                }
                i.revoked_at = Some(now);
                store::put_identity(tx, &i)?;
                tracing::info!(name = %i.name, pubkey = %i.pubkey, "identity revoked");
                revoked.push(i.view());
            }
            Ok(Ok(RevokeReply { ok: true, revoked }))
        })
        .await??;
    Ok(Json(reply))
}

/// Most bearer tokens a hub keeps (revoked and expired ones count until removed).
pub const MAX_TOKENS: usize = 1000;

/// `POST /token/mint` (owner of `*`): a bearer token bound to one session, one project and one
/// role, for the hub's `/mcp` and its routes (docs/protocol.md §2.6). The reply carries the
/// token this once; the hub keeps its SHA-256.
pub async fn token_mint<S: Store>(
    State(hub): State<AppState<S>>,
    ctx: Option<Extension<AuthContext>>,
    body: ReadBody,
) -> ApiResult<Json<TokenMintReply>> {
    let ctx = ctx.map(|Extension(c)| c);
    require_signed(hub.cfg.auth, ctx.as_ref())?;
    let req: TokenMintRequest = body.decode()?;
    // Whitespace anywhere is refused rather than trimmed: the names are taken as written.
    let session = req.session.clone();
    let (who, suffix) = session.rsplit_once(':').unwrap_or(("", ""));
    if who.is_empty() || suffix.is_empty() || session.chars().any(char::is_whitespace) {
        return Err(ApiError::bad_request(
            "session: a bus session <who>:<project>, e.g. claude:web",
        ));
    }
    crate::error::check_len("session", &session, trantor_proto::limits::SESSION)?;
    let project = req
        .project
        .clone()
        .unwrap_or_else(|| session_project(&session).to_string());
    // The documented pattern: a letter or digit, then letters, digits, `.`, `_`, `-` (≤ 80).
    let plain = |p: &str| {
        let mut c = p.chars();
        c.next().is_some_and(|f| f.is_ascii_alphanumeric())
            && p.len() <= 80
            && c.all(|x| x.is_ascii_alphanumeric() || matches!(x, '.' | '_' | '-'))
    };
    if project.is_empty() || project == ANY_PROJECT || !plain(&project) {
        return Err(ApiError::bad_request(
            "project: a token acts on one named project",
        ));
    }
    crate::error::check_len("project", &project, trantor_proto::limits::PROJECT)?;
    let role = match req.role.as_deref() {
        None | Some("write") => Role::Write,
        Some("read") => Role::Read,
        Some(_) => {
            return Err(ApiError::bad_request(
                "role: read or write (a token is never an owner)",
            ));
        }
    };
    let ttl = req
        .ttl_sec
        .filter(|t| t.is_finite() && *t > 0.0)
        .unwrap_or(pauth::TOKEN_TTL_SEC)
        .clamp(1.0, pauth::TOKEN_TTL_MAX_SEC);
    let token = {
        let mut b = [0u8; 32];
        rand::RngCore::fill_bytes(&mut rand::rngs::OsRng, &mut b);
        format!("{}{}", pauth::TOKEN_PREFIX, hex::encode(b))
    };
    let hash = pauth::token_hash(&token);
    let now = now_ms();
    let record = TokenRecord {
        id: hash[..16].to_string(),
        session,
        project,
        role,
        created_at: now,
        expires_at: now + (ttl * 1000.0) as i64,
        created_by: ctx
            .and_then(|c| c.identity)
            .map(|i| i.name)
            .unwrap_or_default(),
        revoked_at: None,
    };
    let rec = record.clone();
    hub.write(move |tx| {
        if store::tokens(&*tx)?.len() >= MAX_TOKENS {
            return Ok(Err(ApiError::with(
                StatusCode::CONFLICT,
                format!("at most {MAX_TOKENS} tokens; revoke some first"),
                json!(null),
            )));
        }
        store::put_token(tx, &hash, &rec)?;
        Ok(Ok(()))
    })
    .await??;
    tracing::info!(id = %record.id, session = %record.session, project = %record.project, "token minted");
    Ok(Json(TokenMintReply {
        ok: true,
        token,
        record,
    }))
}

/// `GET /tokens` (owner of `*`): every bearer token's record (never a token).
pub async fn tokens<S: Store>(
    State(hub): State<AppState<S>>,
    ctx: Option<Extension<AuthContext>>,
) -> ApiResult<Json<TokensReply>> {
    require_signed(hub.cfg.auth, ctx.map(|Extension(c)| c).as_ref())?;
    let tokens = hub
        .store
        .read(|tx| store::tokens(tx))
        .await?
        .into_iter()
        .map(|(_, r)| r)
        .collect();
    Ok(Json(TokensReply { ok: true, tokens }))
}

/// `POST /token/revoke` (owner of `*`): revoke a token by its id (or the token itself); it is
/// refused from its next request on, on `/mcp` too.
pub async fn token_revoke<S: Store>(
    State(hub): State<AppState<S>>,
    ctx: Option<Extension<AuthContext>>,
    body: ReadBody,
) -> ApiResult<Json<TokenRevokeReply>> {
    require_signed(hub.cfg.auth, ctx.map(|Extension(c)| c).as_ref())?;
    let req: TokenRevokeRequest = body.decode()?;
    let wanted = req.id.trim().to_string();
    if wanted.is_empty() {
        return Err(ApiError::bad_request("id required"));
    }
    let by_hash = pauth::token_hash(&wanted);
    let reply = hub
        .write(move |tx| {
            let found = store::tokens(&*tx)?
                .into_iter()
                .find(|(k, r)| r.id == wanted.to_ascii_lowercase() || k.ends_with(&by_hash));
            let Some((key, mut rec)) = found else {
                return Ok(Err(ApiError::not_found("no such token")));
            };
            let revoked = rec.revoked_at.is_none();
            if revoked {
                rec.revoked_at = Some(now_ms());
                let hash = key.trim_start_matches(store::TOKEN_PREFIX).to_string();
                store::put_token(tx, &hash, &rec)?;
                tracing::info!(id = %rec.id, session = %rec.session, "token revoked");
            }
            Ok(Ok(TokenRevokeReply {
                ok: true,
                revoked,
                record: rec,
            }))
        })
        .await??;
    Ok(Json(reply))
}

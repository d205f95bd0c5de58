//! File claims and reads: `POST /claim`, `GET /claims`, `POST /read` (`docs/protocol.md` §15.4).
//!
//! A claim says "this session is editing this file (repo-relative) now"; it holds for
//! `RELAY_CLAIM_TTL_MS`. The reply names every other session holding a live claim on the same
//! file, which the original's PreToolUse hook hands to the model as a warning. Claims live in
//! the store's kv (one document per project and file), so they survive a restart and are shared
//! by hubs on one database; expired entries are dropped when their document is next written.

use crate::domain::claims::{live_claims_with_ttl, sessions};
use crate::domain::policy::canon;
use crate::error::{ApiError, ApiResult, check_all_required, check_len};
use crate::extract::{JsonBody, Params};
use crate::openapi::{RouteDoc, Ty, Verb, f, shape};
use crate::state::{AppState, Outbox, event};
use axum::Json;
use axum::extract::State;
use axum::routing::{MethodRouter, get, post};
use serde_json::{Value, json};
use trantor_proto::claims::{ClaimReply, ClaimRequest, ClaimsReply, Conflict, FILE_MAX, ReadReply};
use trantor_proto::{limits, now_ms};
use trantor_store::{Store, StoreError, WriteTx};

/// This module's routes, for the route table.
pub fn table<S: Store>() -> Vec<(RouteDoc, MethodRouter<AppState<S>>)> {
    vec![
        (
            RouteDoc {
                verb: Verb::Post,
                path: "/claim",
                summary: "Claim a file being edited; the reply names other sessions editing it",
                query: &[],
                body: Some(shape::<ClaimRequest>),
                reply: Some(shape::<ClaimReply>),
            },
            post(claim::<S>),
        ),
        (
            RouteDoc {
                verb: Verb::Get,
                path: "/claims",
                summary: "Live file claims, newest first",
                query: fields![
                    f("project", Ty::Str, false, "only this project").max(limits::PROJECT)
                ],
                body: None,
                reply: Some(shape::<ClaimsReply>),
            },
            get(claims::<S>),
        ),
        (
            RouteDoc {
                verb: Verb::Post,
                path: "/read",
                summary: "A person opened a file (one file.read event per window)",
                query: &[],
                body: Some(shape::<ClaimRequest>),
                reply: Some(shape::<ReadReply>),
            },
            post(read::<S>),
        ),
    ]
}

fn doc_key(kind: &str, project: &str, file: &str) -> String {
    // Length-prefixed, so no project/file pair can collide with another.
    format!("{kind}:{}:{project}{file}", project.len())
}

/// A file path as claims compare it, or why it is refused: it must lie inside the project
/// (relative, no `..` component, no NUL).
fn inside_path(file: &str) -> ApiResult<String> {
    let f = file.trim();
    if f.is_empty() {
        return Err(ApiError::bad_request("project, file and session required"));
    }
    check_len("file", f, FILE_MAX)?;
    let outside = f.starts_with('/')
        || f.starts_with('\\')
        || f.starts_with('~')
        || f.as_bytes().get(1) == Some(&b':')
        || f.contains('\0')
        || f.split(['/', '\\']).any(|c| c == "..");
    if outside {
        return Err(ApiError::bad_request(format!(
            "file {f:?} is outside the project: claims name a path relative to the project's \
             root, without `..`"
        )));
    }
    Ok(f.trim_start_matches("./").to_string())
}

struct Checked {
    project: String,
    file: String,
    session: String,
}

fn check(req: &ClaimRequest) -> ApiResult<Checked> {
    let [project, session] = check_all_required(
        [
            ("project", &req.project, limits::PROJECT),
            ("session", &req.session, limits::SESSION),
        ],
        "project, file and session required",
    )?;
    let file = inside_path(&req.file)?;
    check_len("seat", req.seat.as_deref().unwrap_or(""), limits::SESSION)?;
    Ok(Checked {
        project,
        file,
        session,
    })
}

/// Write `session`'s touch of (project, file) into a claim or read document; returns the other
/// live sessions and whether this session already held it.
fn touch_doc(
    tx: &mut dyn WriteTx,
    key: &str,
    c: &Checked,
    ttl: i64,
    now: i64,
) -> Result<(Vec<Conflict>, bool), StoreError> {
    let doc = tx.kv(key)?;
    let mut ss = sessions(&doc);
    ss.retain(|_, ts| now - ts.as_i64().unwrap_or(0) < ttl);
    let mine = ss.contains_key(&c.session);
    let mut others: Vec<Conflict> = ss
        .iter()
        .filter(|(s, _)| **s != c.session)
        .map(|(s, ts)| {
            let ts = ts.as_i64().unwrap_or(0);
            Conflict {
                session: s.clone(),
                ts,
                ago_sec: ((now - ts) as f64 / 1000.0).round() as i64,
            }
        })
        .collect();
    others.sort_by_key(|c| std::cmp::Reverse(c.ts));
    ss.insert(c.session.clone(), json!(now));
    tx.set_kv(
        key,
        &json!({ "project": c.project, "file": c.file, "sessions": ss, "ttlMs": ttl }),
    )?;
    Ok((others, mine))
}

/// `POST /claim {project, file, session}`.
pub async fn claim<S: Store>(
    State(hub): State<AppState<S>>,
    JsonBody(req): JsonBody<ClaimRequest>,
) -> ApiResult<Json<ClaimReply>> {
    let c = check(&req)?;
    let conflicts = touch(&hub, c, "claim", |c, conflicts, mine| {
        let mut events = Vec::new();
        if !mine {
            events.push(("file.claim", json!({ "file": c.file })));
        }
        if !conflicts.is_empty() {
            let with: Vec<&str> = conflicts.iter().map(|x| x.session.as_str()).collect();
            events.push(("file.conflict", json!({ "file": c.file, "with": with })));
        }
        events
    })
    .await?;
    Ok(Json(ClaimReply {
        ok: true,
        conflicts,
        ttl_ms: hub.cfg.claim_ttl_ms,
    }))
}

/// `session`'s touch of (project, file) in its `kind` document (`claim` or `fileread`), in
/// one write with the events `events` names for it, given the other live sessions and whether
/// this one already held it. Returns the other live sessions.
async fn touch<S, E>(
    hub: &AppState<S>,
    mut c: Checked,
    kind: &'static str,
    events: E,
) -> ApiResult<Vec<Conflict>>
where
    S: Store,
    E: FnOnce(&Checked, &[Conflict], bool) -> Vec<(&'static str, Value)> + Send + 'static,
{
    let ttl = hub.cfg.claim_ttl_ms;
    let now = now_ms();
    let (conflicts, out) = hub
        .write(move |tx| {
            c.project = canon(tx, &c.project)?;
            let key = doc_key(kind, &c.project, &c.file);
            let (conflicts, mine) = touch_doc(tx, &key, &c, ttl, now)?;
            let mut out = Outbox::default();
            for (ty, data) in events(&c, &conflicts, mine) {
                out.event(tx, event(now, ty, &c.project, &c.session, data))?;
            }
            Ok((conflicts, out))
        })
        .await?;
    hub.publish(out);
    Ok(conflicts)
}

/// `GET /claims[?project=P]`: live claims, newest first.
pub async fn claims<S: Store>(
    State(hub): State<AppState<S>>,
    p: Params,
) -> ApiResult<Json<ClaimsReply>> {
    let asked = p.text("project").map(str::to_string);
    let ttl = hub.cfg.claim_ttl_ms;
    let now = now_ms();
    let claims = hub
        .store
        .read(move |tx| {
            let project = asked.as_deref().map(|p| canon(tx, p)).transpose()?;
            let mut all = live_claims_with_ttl(tx, now, ttl)?;
            if let Some(p) = project {
                all.retain(|c| c.project == p);
            }
            Ok(all)
        })
        .await?;
    Ok(Json(ClaimsReply { claims }))
}

/// `POST /read {project, file, session, seat?}`: one `file.read` event per window.
pub async fn read<S: Store>(
    State(hub): State<AppState<S>>,
    JsonBody(req): JsonBody<ClaimRequest>,
) -> ApiResult<Json<ReadReply>> {
    let c = check(&req)?;
    let seat = req.seat.unwrap_or_default();
    touch(&hub, c, "fileread", move |c, _, mine| {
        if mine {
            Vec::new()
        } else {
            vec![("file.read", json!({ "file": c.file, "seat": seat }))]
        }
    })
    .await?;
    Ok(Json(ReadReply {
        ok: true,
        ttl_ms: hub.cfg.claim_ttl_ms,
    }))
}

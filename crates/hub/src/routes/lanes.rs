//! Project-level routes the original's hooks, CLI and dashboard call: the project digest of
//! `GET /catchup?project=`, `GET /history`, `POST /sweep` and `GET /overseer/status`
//! (`docs/protocol.md` §15). Project names are resolved through the alias table
//! ([`canon`]) that `POST /project/merge` writes.

use crate::domain::cards::move_card;
use crate::domain::policy::{ALIASES_KEY, canon};
use crate::domain::policy::{POLICY_KEY, policy_from, project_key};
use crate::error::{ApiError, ApiResult, check_opt};
use crate::extract::{JsonBody, Params};
use crate::openapi::{RouteDoc, Ty, Verb, f, shape};
use crate::state::{AppState, Outbox};
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, get, post};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use trantor_proto::lanes::{
    CatchupAny, ContextFile, ContextLink, ContextPeer, DigestCard, HistoryReply, NarrateReply,
    NarrateRequest, OverseerContext, OverseerStatus, OverseerWatching, ProjectDigest,
    SweepCandidate, SweepReply, SweepRequest,
};
use trantor_proto::{CARD_STATUSES, Card, CardStatus, limits, now_ms, session_project};
use trantor_store::{CardFilter, EventFilter, Store, StoreError, WriteTx};

/// The card event types (the timeline's feed).
pub const CARD_EVENT_TYPES: [&str; 4] = ["created", "moved", "updated", "deleted"];
/// Default and largest `/history` page.
const HISTORY_DEFAULT: i64 = 200;
const HISTORY_MAX: i64 = 1000;

/// This module's routes, for the route table.
pub fn table<S: Store>() -> Vec<(RouteDoc, MethodRouter<AppState<S>>)> {
    use Ty::*;
    vec![
        (
            RouteDoc {
                verb: Verb::Get,
                path: "/history",
                summary: "Card events only (the timeline's feed), oldest first",
                query: fields![
                    f("project", Str, false, "only this project").max(limits::PROJECT),
                    f("limit", Int, false, "newest N (default 200, at most 1000)")
                        .min(0)
                        .max(HISTORY_MAX as usize),
                ],
                body: None,
                reply: Some(shape::<HistoryReply>),
            },
            get(history::<S>),
        ),
        (
            RouteDoc {
                verb: Verb::Post,
                path: "/sweep",
                summary: "Move doing/testing cards untouched past olderMs to stale (owner; \
                          dryRun counts); refused while a holder is working",
                query: &[],
                body: Some(shape::<SweepRequest>),
                reply: Some(shape::<SweepReply>),
            },
            post(sweep::<S>),
        ),
        (
            RouteDoc {
                verb: Verb::Get,
                path: "/overseer/status",
                summary: "The overseer: last pass, duty session and liveness, what it watches, \
                          standing warnings",
                query: &[],
                body: None,
                reply: Some(shape::<OverseerStatus>),
            },
            get(overseer_status::<S>),
        ),
        (
            RouteDoc {
                verb: Verb::Get,
                path: "/overseer/context",
                summary: "What a session arriving on a project needs to know: its autonomy \
                          level, links, live sessions there and on linked projects, files in \
                          flight, standing warnings",
                query: fields![f("project", Str, true, "the project").max(limits::PROJECT),],
                body: None,
                reply: Some(shape::<OverseerContext>),
            },
            get(overseer_context::<S>),
        ),
        (
            RouteDoc {
                verb: Verb::Post,
                path: "/overseer/narrate",
                summary: "Attach a narration to an overseer.warn event (shown on it by /events \
                          as narrated, narration)",
                query: &[],
                body: Some(shape::<NarrateRequest>),
                reply: Some(shape::<NarrateReply>),
            },
            post(overseer_narrate::<S>),
        ),
    ]
}

/// kv key prefix of a narration: `narration:<event id>` → its text.
pub const NARRATION_PREFIX: &str = "narration:";
/// Longest narration.
const NARRATION_MAX: usize = 300;

/// How long an episode has stood, as the original words it: `<1m`, `Nm`, `Nh`.
fn duration_label(ms: i64) -> String {
    let m = ms.max(0) / 60_000;
    if m < 1 {
        "<1m".into()
    } else if m < 60 {
        format!("{m}m")
    } else {
        format!("{}h", m / 60)
    }
}

/// The autonomy level a policy gives `project`: its own level, else `*`'s, else 1 (a level is
/// 1 to 4; anything else stored does not count).
fn level_for(autonomy: &serde_json::Map<String, Value>, project: &str) -> i64 {
    let level = |k: &str| {
        autonomy
            .get(k)
            .and_then(|v| {
                v.as_i64()
                    .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
            })
            .filter(|n| (1..=4).contains(n))
    };
    level(project).or_else(|| level("*")).unwrap_or(1)
}

/// `GET /overseer/context?project=P`: P's autonomy level, the links naming it, the live
/// sessions on P and its linked projects, P's live file claims, and the conditions standing
/// now on P and its linked projects (a declared crew alone is not one); a standing episode's
/// detail says how long it has stood (`docs/protocol.md` §15.3).
pub async fn overseer_context<S: Store>(
    State(hub): State<AppState<S>>,
    p: Params,
) -> ApiResult<Json<OverseerContext>> {
    let asked = p.required("project")?.trim().to_string();
    if asked.is_empty() {
        return Err(ApiError::bad_request("project required"));
    }
    let now = now_ms();
    let ttl = hub.cfg.claim_ttl_ms;
    let (project, policy, state, peers, claims) = hub
        .store
        .read(move |tx| {
            Ok((
                canon(tx, &asked)?,
                policy_from(tx.kv(POLICY_KEY)?),
                crate::overseer::OverseerState::load(tx)?,
                tx.peers()?,
                crate::domain::claims::live_claims_with_ttl(tx, now, ttl)?,
            ))
        })
        .await?;
    let level = level_for(&policy.autonomy, &project);
    let links: Vec<ContextLink> = policy
        .links
        .iter()
        .filter(|l| l.projects.contains(&project))
        .map(|l| ContextLink {
            projects: l.projects.clone(),
            reason: l.reason.clone(),
        })
        .collect();
    let linked: std::collections::BTreeSet<String> = links
        .iter()
        .flat_map(|l| l.projects.iter().cloned())
        .filter(|x| *x != project)
        .collect();
    let ours = |p: &str| p == project || linked.contains(p);
    let live: Vec<trantor_proto::Peer> = peers
        .into_iter()
        .map(|p| hub.live_peer(p, now))
        .filter(|p| p.online)
        .map(|mut p| {
            if p.project.is_empty() {
                p.project = session_project(&p.session).to_string();
            }
            p
        })
        .collect();
    let mut peers_out: Vec<ContextPeer> = live
        .iter()
        .filter(|p| ours(&p.project))
        .map(|p| ContextPeer {
            session: p.session.clone(),
            project: p.project.clone(),
            llm: p.llm.clone().unwrap_or_default(),
            model: p.model.clone().unwrap_or_default(),
            status: p.status.clone(),
        })
        .collect();
    peers_out.sort_by(|a, b| a.session.cmp(&b.session));
    let inflight = claims
        .iter()
        .filter(|c| c.project == project)
        .map(|c| ContextFile {
            file: c.file.clone(),
            session: c.session.clone(),
            ago_sec: ((now - c.ts).max(0) + 500) / 1000,
        })
        .collect();
    let warnings = crate::overseer::detect(&live, &claims)
        .into_iter()
        .filter(|w| ours(&w.project))
        .map(|mut w| {
            if let Some(ep) = state.episodes.get(&crate::overseer::key_of(&w)) {
                w.since = ep.since;
                let label = if w.kind == "same-project-sessions" {
                    "same-project"
                } else {
                    "standing"
                };
                w.detail = format!(
                    "{} ({label} for {})",
                    w.detail,
                    duration_label(now - ep.since)
                );
            }
            w
        })
        .collect();
    Ok(Json(OverseerContext {
        level,
        links,
        peers: peers_out,
        inflight,
        warnings,
    }))
}

/// `POST /overseer/narrate {eventId, text}`: keep a narration of one `overseer.warn` event;
/// `/events` shows it on the event as `narrated: true, narration`. 404 when the id names no
/// `overseer.warn` event; a blank or over-long text is a 400.
pub async fn overseer_narrate<S: Store>(
    State(hub): State<AppState<S>>,
    JsonBody(req): JsonBody<NarrateRequest>,
) -> ApiResult<Json<NarrateReply>> {
    let id = req.event_id;
    if id <= 0 {
        return Err(ApiError::bad_request("eventId required"));
    }
    let text = req.text.trim().to_string();
    if text.is_empty() {
        return Err(ApiError::bad_request("text required"));
    }
    crate::error::check_len("text", &text, NARRATION_MAX)?;
    let found = hub
        .store
        .write(move |tx| {
            let found = tx
                .events(&EventFilter {
                    types: Some(vec!["overseer.warn".to_string()]),
                    since: Some(id - 1),
                    limit: limits::EVENTS_MAX,
                    ..EventFilter::default()
                })?
                .iter()
                .any(|e| e.id == id);
            if found {
                tx.set_kv(&format!("{NARRATION_PREFIX}{id}"), &Value::String(text))?;
            }
            Ok(found)
        })
        .await?;
    if !found {
        return Err(ApiError::not_found("no such overseer.warn event"));
    }
    Ok(Json(NarrateReply { ok: true }))
}

/// `GET /catchup`: with `session`, the session digest; with only `project`, the original's
/// project digest.
pub async fn catchup<S: Store>(State(hub): State<AppState<S>>, p: Params) -> ApiResult<Response> {
    if p.text("session").is_some() {
        return crate::routes::duty::catchup(State(hub), p)
            .await
            .map(|Json(r)| Json(CatchupAny::Session(Box::new(r))).into_response());
    }
    let Some(project) = p.text("project").map(str::to_string) else {
        // Both parameters are optional in the document, so naming neither is schema-valid:
        // it asks for a catch-up that does not exist (404), not a malformed request.
        return Err(ApiError::not_found(
            "no such catch-up: session or project required (?session=S for the session digest, \
             ?project=P for the project digest)",
        ));
    };
    check_opt("project", &Some(project.clone()), limits::PROJECT)?;
    // The session digest's parameters mean nothing here, but a malformed one is still refused.
    p.int("since")?;
    p.flag("peek")?;
    let digest = project_digest(&hub, &project).await?;
    Ok(Json(CatchupAny::Project(Box::new(digest))).into_response())
}

fn digest_card(c: &Card) -> DigestCard {
    DigestCard {
        assignee: c.assignee.clone(),
        id: c.id,
        source: c.source.clone(),
        title: c.title.clone(),
        updated: c.updated,
    }
}

/// The project digest: counts, the newest cards of each open column, the brief.
pub async fn project_digest<S: Store>(
    hub: &AppState<S>,
    project: &str,
) -> Result<ProjectDigest, StoreError> {
    let asked = project.to_string();
    let (project, cards, brief) = hub
        .store
        .read(move |tx| {
            let project = canon(tx, &asked)?;
            let cards = tx.cards(&CardFilter {
                project: Some(project.clone()),
                ..CardFilter::default()
            })?;
            let brief = tx.kv(&project_key(&project))?;
            Ok((project, cards, brief))
        })
        .await?;
    let mut counts: BTreeMap<String, i64> =
        CARD_STATUSES.iter().map(|s| (s.to_string(), 0)).collect();
    for c in &cards {
        *counts.entry(c.status.to_string()).or_default() += 1;
    }
    let pick = |status: &str, n: usize| -> Vec<DigestCard> {
        let mut v: Vec<&Card> = cards.iter().filter(|c| c.status == status).collect();
        v.sort_by(|a, b| b.updated.cmp(&a.updated).then(b.id.cmp(&a.id)));
        v.into_iter().take(n).map(digest_card).collect()
    };
    let brief_ts = brief
        .as_ref()
        .and_then(|b| b.get("ts"))
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let last_activity = cards.iter().map(|c| c.updated).fold(brief_ts, i64::max);
    Ok(ProjectDigest {
        brief: brief
            .as_ref()
            .and_then(|b| b.get("brief"))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string(),
        total: cards.len() as i64,
        doing: pick("doing", 8),
        testing: pick("testing", 8),
        failed: pick("failed", 8),
        blocked: pick("blocked", 8),
        todo: pick("todo", 10),
        recent_done: pick("done", 8),
        counts,
        last_activity,
        project,
    })
}

/// `GET /history[?project=P][&limit=N]`: card events only, the newest N, oldest first.
pub async fn history<S: Store>(
    State(hub): State<AppState<S>>,
    p: Params,
) -> ApiResult<Json<HistoryReply>> {
    let limit = p
        .count("limit")?
        .unwrap_or(HISTORY_DEFAULT)
        .min(HISTORY_MAX) as usize;
    let asked = p.text("project").map(str::to_string);
    check_opt("project", &asked, limits::PROJECT)?;
    if limit == 0 {
        return Ok(Json(HistoryReply { events: Vec::new() }));
    }
    let events = hub
        .store
        .read(move |tx| {
            let project = match &asked {
                Some(a) => Some(canon(tx, a)?),
                None => None,
            };
            tx.events(&EventFilter {
                project,
                types: Some(CARD_EVENT_TYPES.map(str::to_string).to_vec()),
                limit,
                ..EventFilter::default()
            })
        })
        .await?;
    Ok(Json(HistoryReply { events }))
}

/// Whether a peer is at work now: its runner phase is `working`, or (older clients that send
/// no phase) its status says so.
fn working(p: &trantor_proto::Peer) -> bool {
    match p.phase.as_deref() {
        Some(phase) if !phase.is_empty() => phase == "working",
        _ => p.status.trim_start().starts_with("working"),
    }
}

/// `POST /sweep {project?, olderMs?, dryRun?, by?}`: doing and testing cards untouched for
/// longer than `olderMs` (default `RELAY_REAP_GRACE_MS`) move to stale. A dry run only counts.
/// A sweep is refused (409, nothing changed) while a seat holding a candidate is online and
/// working: its card is not stale, its seat is busy with it.
pub async fn sweep<S: Store>(
    State(hub): State<AppState<S>>,
    JsonBody(req): JsonBody<SweepRequest>,
) -> ApiResult<Json<SweepReply>> {
    check_opt("project", &req.project, limits::PROJECT)?;
    check_opt("by", &req.by, limits::SESSION)?;
    if req.older_ms.is_some_and(|ms| ms < 0) {
        return Err(ApiError::bad_request("olderMs must not be negative"));
    }
    let older = req.older_ms.unwrap_or(hub.cfg.reap_grace_ms).max(0);
    let now = now_ms();
    let cut = now.saturating_sub(older);
    let asked = req
        .project
        .as_deref()
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(str::to_string);
    let (cards, peers) = hub
        .store
        .read(move |tx| {
            let project = match &asked {
                Some(a) => Some(canon(tx, a)?),
                None => None,
            };
            let cards = tx.cards(&CardFilter {
                project,
                statuses: Some(vec![CardStatus::Doing, CardStatus::Testing]),
                ..CardFilter::default()
            })?;
            Ok((cards, tx.peers()?))
        })
        .await?;
    let cands: Vec<&Card> = cards.iter().filter(|c| c.updated < cut).collect();
    let live: BTreeMap<String, trantor_proto::Peer> = peers
        .into_iter()
        .map(|p| hub.live_peer(p, now))
        .filter(|p| p.online)
        .map(|p| (p.session.clone(), p))
        .collect();
    let busy = busy_seats(&cands, &live);
    let view: Vec<SweepCandidate> = cands.iter().map(|c| candidate(c, now)).collect();
    if req.dry_run {
        return Ok(Json(SweepReply {
            ok: true,
            dry_run: Some(true),
            count: Some(view.len() as i64),
            swept: None,
            candidates: view,
            working: busy,
        }));
    }
    if !busy.is_empty() {
        return Err(busy_refusal(busy, view.len()));
    }
    let by = req
        .by
        .map(|b| b.trim().to_string())
        .filter(|b| !b.is_empty())
        .unwrap_or_else(|| "sweep".into());
    let ids: Vec<i64> = view.iter().map(|c| c.id).collect();
    let (swept, out) = hub
        .write(move |tx| sweep_cards(tx, &ids, cut, &by, now))
        .await?;
    hub.publish(out);
    Ok(Json(SweepReply {
        ok: true,
        dry_run: None,
        count: None,
        swept: Some(swept),
        candidates: view,
        working: Vec::new(),
    }))
}

/// The online seats at work on a candidate (its assignee or its `parent`), sorted, once each.
fn busy_seats(cands: &[&Card], live: &BTreeMap<String, trantor_proto::Peer>) -> Vec<String> {
    let mut busy: Vec<String> = cands
        .iter()
        .flat_map(|c| {
            let parent = c.extra.get("parent").and_then(Value::as_str).unwrap_or("");
            [c.assignee.clone(), parent.to_string()]
        })
        .filter(|s| live.get(s).is_some_and(working))
        .collect();
    busy.sort();
    busy.dedup();
    busy
}

/// A sweep candidate as the reply shows it.
fn candidate(c: &Card, now: i64) -> SweepCandidate {
    SweepCandidate {
        age_ms: now - c.updated,
        assignee: c.assignee.clone(),
        id: c.id,
        project: c.project.clone(),
        source: c.source.clone(),
        status: c.status.clone(),
        title: c.title.clone(),
    }
}

/// The 409 of a sweep while seats work on `count` candidates.
fn busy_refusal(busy: Vec<String>, count: usize) -> ApiError {
    ApiError::with(
        StatusCode::CONFLICT,
        format!(
            "sweep refused: {} working on candidate cards; a working seat's card is not stale \
             (nothing was moved; wait for the seats to go idle, or narrow the sweep with \
             project/olderMs)",
            busy.join(", ")
        ),
        json!({ "working": busy, "count": count }),
    )
}

/// Moves the cards `ids` to stale (in the caller's transaction), each re-read first and skipped
/// unless still doing or testing and untouched since `cut`; returns how many moved.
fn sweep_cards(
    tx: &mut dyn WriteTx,
    ids: &[i64],
    cut: i64,
    by: &str,
    now: i64,
) -> Result<(i64, Outbox), StoreError> {
    let mut out = Outbox::default();
    let mut swept = 0i64;
    for id in ids {
        // Re-read inside the write: the card may have moved since the scan.
        let Some(mut card) = tx.card(*id)? else {
            continue;
        };
        if !matches!(card.status, CardStatus::Doing | CardStatus::Testing) || card.updated >= cut {
            continue;
        }
        if let Some(ev) = move_card(&mut card, CardStatus::Stale, by, None, now) {
            card.extra.insert("_reaped".into(), json!(true));
            tx.put_card(&card)?;
            out.event(tx, ev)?;
            swept += 1;
        }
    }
    Ok((swept, out))
}

/// `GET /overseer/status`: is the watcher alive, who is on duty, what it sees.
pub async fn overseer_status<S: Store>(
    State(hub): State<AppState<S>>,
) -> ApiResult<Json<OverseerStatus>> {
    let now = now_ms();
    let cfg_duty = hub.cfg.duty_session.clone();
    let (duty_session, policy, state, peers, claims) = hub
        .store
        .read(move |tx| {
            Ok((
                crate::domain::duty::duty_session(cfg_duty.as_deref(), tx)?,
                policy_from(tx.kv(POLICY_KEY)?),
                crate::overseer::OverseerState::load(tx)?,
                tx.peers()?,
                crate::domain::claims::live_claims(tx, now)?,
            ))
        })
        .await?;
    let duty = crate::duty::status(&hub, now).await?;
    let mut failures: Vec<Value> = duty
        .get("failures")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    failures.reverse();
    let live: Vec<trantor_proto::Peer> = peers
        .into_iter()
        .map(|p| hub.live_peer(p, now))
        .filter(|p| p.online)
        .collect();
    let mut projects: Vec<&str> = live
        .iter()
        .map(|p| p.project.as_str())
        .filter(|p| !p.is_empty())
        .collect();
    projects.sort_unstable();
    projects.dedup();
    Ok(Json(OverseerStatus {
        engine: true,
        last_tick_ts: state.last_tick,
        tick_ms: hub.cfg.duty_tick.as_millis() as i64,
        clear_ms: hub.cfg.overseer_clear_ms,
        duty_session: duty_session.clone().unwrap_or_default(),
        duty_failures: failures,
        duty: if duty_session.is_some() {
            duty
        } else {
            Value::Null
        },
        watching: OverseerWatching {
            sessions: live.len() as i64,
            projects: projects.len() as i64,
            claims: claims.len() as i64,
            links: policy.links.len() as i64,
        },
        autonomy: policy.autonomy.into_iter().collect(),
        links: policy
            .links
            .iter()
            .map(|l| serde_json::to_value(l).unwrap_or(Value::Null))
            .collect(),
        standing: state.episodes.len() as i64,
        warnings: state.warnings,
    }))
}

/// Whether a request may name a project (a `project` query parameter, or any POST body), so
/// [`canon_layer`] has to look at it.
pub fn may_alias(req: &axum::extract::Request) -> bool {
    req.method() == axum::http::Method::POST
        || req
            .uri()
            .query()
            .is_some_and(|q| q.split('&').any(|kv| kv.starts_with("project=")))
}

/// Route layer: a request naming a project by an alias (`?project=` or a JSON body's
/// `project`) is served as if it named the canonical project, so a merged lane's old name
/// keeps working on every route. Costs one kv read, only for requests that name a project: a
/// POST whose body has no `project` (a plain `/send`) reads nothing.
pub async fn canon_layer<S: Store>(
    hub: AppState<S>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let query_project = req
        .uri()
        .query()
        .and_then(|q| crate::extract::parse_query(q).ok())
        .and_then(|m| m.get("project").cloned())
        .filter(|p| !p.trim().is_empty());
    let is_post = req.method() == axum::http::Method::POST;
    let (req, body_names_project) = if is_post {
        match crate::extract::read_once(req).await {
            Ok((req, body)) => {
                let named = body
                    .json()
                    .and_then(|v| v.get("project"))
                    .and_then(Value::as_str)
                    .is_some_and(|p| !p.trim().is_empty());
                (req, named)
            }
            Err(e) => return e.into_response(),
        }
    } else {
        (req, false)
    };
    if query_project.is_none() && !body_names_project {
        return next.run(req).await;
    }
    let aliases = match hub.store.read(|tx| tx.kv(ALIASES_KEY)).await {
        Ok(Some(Value::Object(m))) if !m.is_empty() => m,
        Ok(_) => return next.run(req).await,
        Err(e) => return ApiError::from(e).into_response(),
    };
    let resolve = |p: &str| -> Option<String> {
        let mut name = p.trim().to_string();
        let mut changed = false;
        for _ in 0..8 {
            match aliases.get(&name).and_then(Value::as_str) {
                Some(n) if n != name => {
                    name = n.to_string();
                    changed = true;
                }
                _ => break,
            }
        }
        changed.then_some(name)
    };
    let (mut parts, body) = req.into_parts();
    if let Some(to) = query_project.as_deref().and_then(resolve) {
        let q = parts.uri.query().unwrap_or("");
        let rebuilt: Vec<String> = q
            .split('&')
            .map(|kv| match kv.split_once('=') {
                Some(("project", _)) => format!("project={}", trantor_proto::text::url_encode(&to)),
                _ => kv.to_string(),
            })
            .collect();
        let pq = format!("{}?{}", parts.uri.path(), rebuilt.join("&"));
        if let Ok(uri) = pq.parse() {
            parts.uri = uri;
        }
    }
    if !is_post {
        return next
            .run(axum::extract::Request::from_parts(parts, body))
            .await;
    }
    // The body was read by the auth or `_op` layer: the rewrite changes its one parse, which
    // the route's extractor decodes.
    let mut req = axum::extract::Request::from_parts(parts, body);
    if let Some(read) = req.extensions_mut().get_mut::<crate::extract::ReadBody>()
        && let Some(v) = read.json_mut()
        && let Some(to) = v.get("project").and_then(Value::as_str).and_then(resolve)
    {
        v["project"] = Value::String(to);
    }
    next.run(req).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_seats_are_working_assignees_and_parents() {
        let peer = |session: &str, phase: Option<&str>, status: &str| {
            let p = trantor_proto::Peer {
                session: session.into(),
                phase: phase.map(str::to_string),
                status: status.into(),
                ..Default::default()
            };
            (session.to_string(), p)
        };
        let live = BTreeMap::from([
            peer("a:p", Some("working"), ""),
            peer("b:p", Some("idle"), "working on it"),
            peer("c:p", None, "  working on #3"),
            peer("d:p", Some(""), "idle"),
            peer("lead:p", Some("working"), ""),
        ]);
        let card = |assignee: &str, parent: Option<&str>| {
            let mut c = Card {
                assignee: assignee.into(),
                ..Card::default()
            };
            if let Some(p) = parent {
                c.extra.insert("parent".into(), json!(p));
            }
            c
        };
        let cards = [
            card("a:p", None),
            card("b:p", Some("lead:p")),
            card("c:p", None),
            card("d:p", None),
            card("gone:p", Some("a:p")),
        ];
        let cands: Vec<&Card> = cards.iter().collect();
        assert_eq!(busy_seats(&cands, &live), ["a:p", "c:p", "lead:p"]);
        assert!(busy_seats(&[], &live).is_empty());
    }
}

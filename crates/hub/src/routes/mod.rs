//! The route table — one entry per route, carrying both its documentation and its handler —
//! and the router built from it.

/// A `'static` list of documented fields (for a route's `query`), in every route module.
macro_rules! fields {
    ($($x:expr),* $(,)?) => {{
        const F: &[$crate::openapi::Field] = &[$($x),*];
        F
    }};
}

pub mod adopt;
pub mod advise;
pub mod board;
pub mod budget;
pub mod bus;
pub mod claims;
pub mod cost;
pub mod credentials;
pub mod delivery;
pub mod duty;
pub mod events;
pub mod focus;
pub mod gates;
pub mod handoff;
pub mod lanes;
pub mod meta;
pub mod presence;
pub mod projects;
pub mod proposals;
pub mod reroute;

use crate::error::ApiError;
use crate::openapi::{self, Field, Ty, f, shape};
pub use crate::openapi::{RouteDoc, Verb};
use crate::ops;
use crate::state::AppState;
use axum::Router;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::{MethodRouter, get, post};
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;
use trantor_proto::limits;
use trantor_proto::{
    AppointReply, BannerReply, CardReply, ChecklistToggleRequest, ContractsReply, DeliveredReply,
    DeliveredRequest, DutyFailureReply, EventsReply, HealthReply, InboxReply, LessonReply,
    LessonRequest, LessonsReply, OkReply, OpReply, PeerReply, PeersReply, PhaseReply, PhaseRequest,
    PhasesReply, PolicyReply, PolicyRequest, PolicyWriteReply, ProjectReply, ProjectRequest,
    ProjectWriteReply, RecentReply, RegisterReply, RegisterRequest, SendReply, SendRequest,
    TaskCreateRequest, TaskReply, TaskUpdateRequest, TasksReply,
};
use trantor_store::Store;

const SESSION_Q: Field = f(
    "session",
    Ty::Str,
    true,
    "bus address, e.g. claude:myproject",
)
.max(limits::SESSION);

/// `/tasks?card=`: comma-separated card ids (`#` allowed), with the white space `str::trim`
/// removes around each — spelled as an explicit class, because `\s` means different sets in
/// ECMAScript, Python and Rust (see [`limits::NON_BLANK_PATTERN`]).
const CARD_LIST_PATTERN: &str = concat!(
    r"^[\t\n\x0B\x0C\r \x85\xA0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000]*",
    r"(#?-?[0-9]{1,15}[\t\n\x0B\x0C\r \x85\xA0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000]*)?",
    r"(,[\t\n\x0B\x0C\r \x85\xA0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000]*",
    r"(#?-?[0-9]{1,15}[\t\n\x0B\x0C\r \x85\xA0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000]*)?)*$"
);

/// Every route: its documentation and its handler.
pub fn table<S: Store>() -> Vec<(RouteDoc, MethodRouter<AppState<S>>)> {
    use Ty::*;
    let r = |verb, path, summary, query, body, reply, h: MethodRouter<AppState<S>>| {
        (
            RouteDoc {
                verb,
                path,
                summary,
                query,
                body,
                reply,
            },
            h,
        )
    };
    vec![
        r(
            Verb::Get,
            "/",
            "Banner: name, version, store, links (a browser asking for text/html gets the dashboard)",
            &[],
            None,
            Some(shape::<BannerReply>),
            get(meta::root::<S>),
        ),
        r(
            Verb::Get,
            "/ui",
            "The dashboard (HTML; assets under /ui/)",
            &[],
            None,
            None,
            get(crate::ui::page),
        ),
        r(
            Verb::Get,
            "/ui/app.js",
            "Dashboard script",
            &[],
            None,
            None,
            get(crate::ui::script),
        ),
        r(
            Verb::Get,
            "/ui/app.css",
            "Dashboard style sheet",
            &[],
            None,
            None,
            get(crate::ui::style),
        ),
        r(
            Verb::Get,
            "/ui/icon.svg",
            "Dashboard icon",
            &[],
            None,
            None,
            get(crate::ui::icon),
        ),
        r(
            Verb::Any,
            "/health",
            "Liveness, row counts, retention report (GET or POST)",
            &[],
            None,
            Some(shape::<HealthReply>),
            get(meta::health::<S>).post(meta::health::<S>),
        ),
        r(
            Verb::Get,
            "/metrics",
            "Prometheus metrics",
            &[],
            None,
            None,
            get(meta::metrics::<S>),
        ),
        r(
            Verb::Post,
            "/enroll",
            "Enroll the key that signed the request (bootstrap token, invite or TOFU on loopback)",
            &[],
            Some(shape::<trantor_proto::auth::EnrollRequest>),
            Some(shape::<trantor_proto::auth::EnrollReply>),
            post(crate::auth::routes::enroll::<S>),
        ),
        r(
            Verb::Post,
            "/invite",
            "Mint a one-use invite token for a set of scopes (owner of *)",
            &[],
            Some(shape::<trantor_proto::auth::InviteRequest>),
            Some(shape::<trantor_proto::auth::InviteReply>),
            post(crate::auth::routes::invite::<S>),
        ),
        r(
            Verb::Get,
            "/identities",
            "Every enrolled identity, revoked ones included (owner of *)",
            &[],
            None,
            Some(shape::<trantor_proto::auth::IdentitiesReply>),
            get(crate::auth::routes::identities::<S>),
        ),
        r(
            Verb::Post,
            "/identity/revoke",
            "Revoke a key, or every key of a name (owner of *)",
            &[],
            Some(shape::<trantor_proto::auth::RevokeRequest>),
            Some(shape::<trantor_proto::auth::RevokeReply>),
            post(crate::auth::routes::revoke::<S>),
        ),
        r(
            Verb::Post,
            "/token/mint",
            "Mint a bearer token bound to one session, project and role (owner of *)",
            &[],
            Some(shape::<trantor_proto::auth::TokenMintRequest>),
            Some(shape::<trantor_proto::auth::TokenMintReply>),
            post(crate::auth::routes::token_mint::<S>),
        ),
        r(
            Verb::Get,
            "/tokens",
            "Every bearer token's record, never a token (owner of *)",
            &[],
            None,
            Some(shape::<trantor_proto::auth::TokensReply>),
            get(crate::auth::routes::tokens::<S>),
        ),
        r(
            Verb::Post,
            "/token/revoke",
            "Revoke a bearer token by its id (owner of *)",
            &[],
            Some(shape::<trantor_proto::auth::TokenRevokeRequest>),
            Some(shape::<trantor_proto::auth::TokenRevokeReply>),
            post(crate::auth::routes::token_revoke::<S>),
        ),
        r(
            Verb::Post,
            "/register",
            "Presence upsert; absent fields keep their stored values",
            &[],
            Some(shape::<RegisterRequest>),
            Some(shape::<RegisterReply>),
            post(presence::register::<S>),
        ),
        r(
            Verb::Post,
            "/status",
            "Set a session's status (missing status = empty)",
            &[],
            Some(shape::<RegisterRequest>),
            Some(shape::<OkReply>),
            post(presence::status::<S>),
        ),
        r(
            Verb::Get,
            "/peer",
            "One peer's presence and delivery ledger (404 unknown peer)",
            fields![SESSION_Q],
            None,
            Some(shape::<PeerReply>),
            get(presence::peer::<S>),
        ),
        r(
            Verb::Get,
            "/peers",
            "Every peer within the peer TTL",
            &[],
            None,
            Some(shape::<PeersReply>),
            get(presence::peers::<S>),
        ),
        r(
            Verb::Post,
            "/send",
            "Post a message; returns its id",
            &[],
            Some(shape::<SendRequest>),
            Some(shape::<SendReply>),
            post(bus::send::<S>),
        ),
        r(
            Verb::Get,
            "/inbox",
            "Non-blocking read of deliverable messages after since (pages of 1000, more:true)",
            fields![
                SESSION_Q,
                f("since", Int, false, "cursor: messages with id > since"),
                f("peek", Bool, false, "1: do not advance deliveredUpTo"),
            ],
            None,
            Some(shape::<InboxReply>),
            get(bus::inbox::<S>),
        ),
        r(
            Verb::Get,
            "/poll",
            "Long-poll: returns when a deliverable message commits or wait passes",
            fields![
                SESSION_Q,
                f("since", Int, false, "cursor"),
                f("wait", Num, false, "seconds to hold (default 25, max 290)").min(0),
                f("peek", Bool, false, "1: do not advance deliveredUpTo"),
            ],
            None,
            Some(shape::<InboxReply>),
            get(bus::poll::<S>),
        ),
        r(
            Verb::Post,
            "/delivered",
            "Raise a session's delivery ledger",
            &[],
            Some(shape::<DeliveredRequest>),
            Some(shape::<DeliveredReply>),
            post(bus::delivered::<S>),
        ),
        r(
            Verb::Post,
            "/delivery/fence",
            "Fence a session to one runner instance (a later fence supersedes)",
            &[],
            Some(shape::<trantor_proto::DeliveryFenceRequest>),
            Some(shape::<trantor_proto::DeliveryFenceReply>),
            post(delivery::fence::<S>),
        ),
        r(
            Verb::Post,
            "/delivery",
            "Append a delivery state of a direct message (404 unknown id, 409 superseded instance)",
            &[],
            Some(shape::<trantor_proto::DeliveryMark>),
            Some(shape::<trantor_proto::DeliveryMarkReply>),
            post(delivery::mark::<S>),
        ),
        r(
            Verb::Get,
            "/delivery",
            "A message's delivery record (id=N), or a session's open messages (session=S[&open=1])",
            fields![
                f("id", Int, false, "message id: its whole life"),
                f(
                    "session",
                    Str,
                    false,
                    "with open=1: this session's open messages"
                )
                .max(limits::SESSION),
                f(
                    "open",
                    Str,
                    false,
                    "1 (the default with session: only open messages are listed)"
                )
                .pattern("^(1|true|yes|on)$"),
                f("limit", Int, false, "open page, 1-1000 (default 200)").min(1),
            ],
            None,
            Some(shape::<trantor_proto::delivery::DeliveryReply>),
            get(delivery::get::<S>),
        ),
        r(
            Verb::Get,
            "/recent",
            "Newest messages of every kind",
            fields![f("limit", Int, false, "≤200, default 50").min(0)],
            None,
            Some(shape::<RecentReply>),
            get(bus::recent::<S>),
        ),
        r(
            Verb::Get,
            "/contracts",
            "Dispatch ledger: contracts of a session and their dispositions",
            fields![
                SESSION_Q,
                f("project", Str, false, "only this project").max(limits::PROJECT),
                f("windowMs", Int, false, "look-back window (default 24 h)").min(0),
                f(
                    "overdueMs",
                    Int,
                    false,
                    "waiting this long counts as stalled"
                )
                .min(0),
                f(
                    "limit",
                    Int,
                    false,
                    "rows per page (default 500, at most 5000; the counts cover every page)"
                )
                .min(1),
                f(
                    "cursor",
                    Int,
                    false,
                    "continue after this id (`nextCursor`)"
                )
                .min(0),
            ],
            None,
            Some(shape::<ContractsReply>),
            get(bus::contracts::<S>),
        ),
        r(
            Verb::Get,
            "/stream",
            "Server-sent events: messages for a session, and events with events=1",
            fields![
                f("session", Str, false, "default all (broadcasts only)").max(limits::SESSION),
                f("events", Bool, false, "1: also every event as `event: ev`"),
                f("status", Str, false, "set the session's status"),
            ],
            None,
            None,
            get(crate::sse::stream::<S>),
        ),
        r(
            Verb::Post,
            "/task",
            "Create a card",
            &[],
            Some(shape::<TaskCreateRequest>),
            Some(shape::<TaskReply>),
            post(board::create::<S>),
        ),
        r(
            Verb::Post,
            "/task/update",
            "Move or edit a card (409: drill gate, assignee freeze)",
            &[],
            Some(shape::<TaskUpdateRequest>),
            Some(shape::<TaskReply>),
            post(board::update::<S>),
        ),
        r(
            Verb::Post,
            "/task/checklist-toggle",
            "Tick or untick a checklist item",
            &[],
            Some(shape::<ChecklistToggleRequest>),
            Some(shape::<TaskReply>),
            post(board::checklist_toggle::<S>),
        ),
        r(
            Verb::Get,
            "/tasks",
            "The board: every card, or one project's",
            fields![
                f("project", Str, false, "only this project").max(limits::PROJECT),
                f(
                    "fields",
                    Str,
                    false,
                    "slim: no log/history/checklist (logCount instead)"
                ),
                f(
                    "card",
                    Str,
                    false,
                    "comma-separated ids kept full in slim mode"
                )
                .pattern(CARD_LIST_PATTERN),
            ],
            None,
            Some(shape::<TasksReply>),
            get(board::tasks::<S>),
        ),
        r(
            Verb::Get,
            "/card",
            "A card with its events and the messages citing it",
            fields![
                f("id", Int, true, "card id"),
                f("project", Str, false, "ignored: card ids are hub-global").max(limits::PROJECT),
            ],
            None,
            Some(shape::<CardReply>),
            get(board::card::<S>),
        ),
        r(
            Verb::Get,
            "/events",
            "The unified event log, filtered",
            fields![
                f("project", Str, false, "project").max(limits::PROJECT),
                f(
                    "type",
                    Str,
                    false,
                    "comma list; an item ending in . is a prefix"
                ),
                f("by", Str, false, "actor").max(limits::SESSION),
                f(
                    "taskId",
                    Int,
                    false,
                    "card events plus messages citing the card"
                ),
                f("since", Int, false, "ids greater than this"),
                f("limit", Int, false, "newest N (default 300, max 2000)").min(0),
            ],
            None,
            Some(shape::<EventsReply>),
            get(events::events::<S>),
        ),
        r(
            Verb::Get,
            "/lessons",
            "Global lessons plus the agent's own",
            fields![f("agent", Str, false, "agent name").max(limits::LLM)],
            None,
            Some(shape::<LessonsReply>),
            get(events::lessons::<S>),
        ),
        r(
            Verb::Post,
            "/lesson",
            "Record a lesson (exact duplicates are a no-op)",
            &[],
            Some(shape::<LessonRequest>),
            Some(shape::<LessonReply>),
            post(events::lesson::<S>),
        ),
        r(
            Verb::Get,
            "/policy",
            "Project links and autonomy levels",
            &[],
            None,
            Some(shape::<PolicyReply>),
            get(meta::policy_get::<S>),
        ),
        r(
            Verb::Post,
            "/policy",
            "Change autonomy, link or unlink projects",
            &[],
            Some(shape::<PolicyRequest>),
            Some(shape::<PolicyWriteReply>),
            post(meta::policy_post::<S>),
        ),
        r(
            Verb::Post,
            "/verify-gate",
            "Add a verification gate, or resolve one (resolve: true)",
            &[],
            Some(shape::<trantor_proto::VerifyGateRequest>),
            Some(shape::<trantor_proto::VerifyGateReply>),
            post(gates::post::<S>),
        ),
        r(
            Verb::Get,
            "/verify-gates",
            "Verification gates (open only unless all=1)",
            fields![
                f("project", Str, false, "project"),
                f("all", Bool, false, "resolved gates too"),
                f("card", Int, false, "only the gates holding this card"),
            ],
            None,
            Some(shape::<trantor_proto::VerifyGatesReply>),
            get(gates::list::<S>),
        ),
        r(
            Verb::Get,
            "/project",
            "A project's brief",
            fields![f("project", Str, true, "project").max(limits::PROJECT)],
            None,
            Some(shape::<ProjectReply>),
            get(meta::project_get::<S>),
        ),
        r(
            Verb::Post,
            "/project",
            "Set a project's brief",
            &[],
            Some(shape::<ProjectRequest>),
            Some(shape::<ProjectWriteReply>),
            post(meta::project_post::<S>),
        ),
        r(
            Verb::Get,
            "/phase",
            "A project's phase goals (the runner's prompt and `trantor board` show them)",
            fields![
                f("project", Str, true, "project"),
                f("phase", Str, false, "only this phase"),
            ],
            None,
            Some(shape::<PhasesReply>),
            get(meta::phase_get::<S>),
        ),
        r(
            Verb::Post,
            "/phase",
            "Set a phase goal",
            &[],
            Some(shape::<PhaseRequest>),
            Some(shape::<PhaseReply>),
            post(meta::phase_post::<S>),
        ),
        r(
            Verb::Post,
            "/duty/failure",
            "A duty seat reports a nudge it could not make (duty session only)",
            &[],
            Some(shape::<trantor_proto::FailureRequest>),
            Some(shape::<DutyFailureReply>),
            post(duty::failure::<S>),
        ),
        r(
            Verb::Post,
            "/overseer/duty",
            "Appoint the duty session (empty session clears it)",
            &[],
            Some(shape::<trantor_proto::AppointRequest>),
            Some(shape::<AppointReply>),
            post(duty::appoint::<S>),
        ),
        r(
            Verb::Get,
            "/catchup",
            "With session: what happened since it last looked (moves its catch-up cursor); \
             with only project: the project digest",
            fields![
                f("session", Str, false, "bus address, e.g. claude:myproject").max(limits::SESSION),
                f(
                    "project",
                    Str,
                    false,
                    "without session: the project to digest"
                )
                .max(limits::PROJECT),
                f("since", Int, false, "message id to start after"),
                f("peek", Bool, false, "1: do not move the cursor"),
            ],
            None,
            Some(shape::<trantor_proto::lanes::CatchupAny>),
            get(lanes::catchup::<S>),
        ),
        r(
            Verb::Get,
            "/_op",
            "Outcome of an idempotent write: committed, rejected or unknown",
            fields![
                f("id", Str, true, "the _op"),
                f(
                    "route",
                    Str,
                    false,
                    "the POST path it was sent to (default: any)"
                ),
            ],
            None,
            Some(shape::<OpReply>),
            get(meta::op_get::<S>),
        ),
    ]
    .into_iter()
    .chain(advise::table::<S>())
    .chain(handoff::table::<S>())
    .chain(focus::table::<S>())
    .collect()
}

/// Refuse a GET whose query breaks a documented limit of its route.
fn check_query(
    queries: &BTreeMap<&'static str, &'static [Field]>,
    req: &axum::extract::Request,
) -> Result<(), ApiError> {
    let Some(fields) = queries.get(req.uri().path()) else {
        return Ok(());
    };
    let Some(raw) = req.uri().query() else {
        return Ok(());
    };
    let params = crate::extract::parse_query(raw)?;
    for field in fields.iter() {
        if let Some(v) = params.get(field.name) {
            field.check(v)?;
        }
    }
    Ok(())
}

async fn not_found() -> ApiError {
    ApiError::not_found("not found")
}

async fn wrong_method() -> ApiError {
    ApiError::with(
        StatusCode::METHOD_NOT_ALLOWED,
        "method not allowed",
        Value::Null,
    )
}

/// Build the router over `hub`: the table, `/openapi.json`, the JSON fallbacks and the front
/// layers (origin refusal + metrics outermost, then body limit + `_op`).
pub fn router<S: Store>(hub: AppState<S>) -> Router {
    router_with(hub, None)
}

/// Every route the hub serves, with its document: this module's table and each module's.
fn all_tables<S: Store>() -> Vec<(RouteDoc, MethodRouter<AppState<S>>)> {
    let mut entries = table::<S>();
    entries.extend(lanes::table::<S>());
    entries.extend(claims::table::<S>());
    entries.extend(cost::table::<S>());
    entries.extend(budget::table::<S>());
    entries.extend(reroute::table::<S>());
    entries.extend(credentials::table::<S>());
    entries.extend(projects::table::<S>());
    entries.extend(proposals::table::<S>());
    entries.extend(adopt::table::<S>());
    entries
}

/// [`router`] with a [`Mounted`] service beside the table: it sits behind the front layer
/// (Host/Origin refusals, header limits, metrics) but outside signature checks, query limits
/// and `_op`, which belong to the hub's own JSON routes. It is not in `/openapi.json`.
pub fn router_with<S: Store>(hub: AppState<S>, extra: Option<Mounted>) -> Router {
    let entries = all_tables::<S>();
    let mut docs: Vec<RouteDoc> = entries.iter().map(|(d, _)| *d).collect();
    docs.push(RouteDoc {
        verb: Verb::Get,
        path: "/openapi.json",
        summary: "This document",
        query: &[],
        body: None,
        reply: None,
    });
    ops::intern_routes(
        docs.iter()
            .map(|d| d.path)
            .chain(extra.as_ref().map(|m| m.path)),
    );
    ops::intern_post_routes(
        docs.iter()
            .filter(|d| matches!(d.verb, Verb::Post))
            .map(|d| d.path),
    );
    // Built on the first request and kept as its bytes: as a `Value` the document holds
    // ~1.8 MB of maps for the hub's life, serialized ~200 KB, and most hubs are never asked.
    let spec_docs: Arc<[RouteDoc]> = docs.clone().into();
    let spec: Arc<std::sync::OnceLock<axum::body::Bytes>> = Arc::default();
    // The query limits the document states, enforced once for every GET route.
    let queries: Arc<BTreeMap<&'static str, &'static [Field]>> = Arc::new(
        docs.iter()
            .filter(|d| !d.query.is_empty() && !matches!(d.verb, Verb::Post))
            .map(|d| (d.path, d.query))
            .collect(),
    );

    // Group by path so a GET and a POST of one path share a method router.
    let mut by_path: BTreeMap<&'static str, MethodRouter<AppState<S>>> = BTreeMap::new();
    for (doc, handler) in entries {
        let merged = match by_path.remove(doc.path) {
            Some(existing) => existing.merge(handler),
            None => handler,
        };
        by_path.insert(doc.path, merged);
    }
    let mut router: Router<AppState<S>> = Router::new();
    for (path, handler) in by_path {
        router = router.route(path, handler);
    }
    let router = router
        .route(
            "/openapi.json",
            get(move || {
                let body = spec
                    .get_or_init(|| {
                        serde_json::to_vec(&openapi::document(&spec_docs))
                            .unwrap_or_default()
                            .into()
                    })
                    .clone();
                async move {
                    (
                        [(
                            axum::http::header::CONTENT_TYPE,
                            axum::http::HeaderValue::from_static("application/json"),
                        )],
                        body,
                    )
                }
            }),
        )
        .route_layer(axum::middleware::from_fn_with_state(
            hub.clone(),
            move |axum::extract::State(hub): axum::extract::State<AppState<S>>,
                  req: axum::extract::Request,
                  next: axum::middleware::Next| {
                let queries = queries.clone();
                async move {
                    match check_query(&queries, &req) {
                        // Alias resolution is boxed, so requests that name no project (a held
                        // poll among them) carry nothing of it.
                        Ok(()) if lanes::may_alias(&req) => {
                            Box::pin(lanes::canon_layer(hub, req, next)).await
                        }
                        Ok(()) => next.run(req).await,
                        Err(e) => e.into_response(),
                    }
                }
            },
        ))
        .fallback(not_found)
        .method_not_allowed_fallback(wrong_method)
        .layer(axum::middleware::from_fn_with_state(
            hub.clone(),
            ops::idempotent::<S>,
        ))
        .layer(axum::middleware::from_fn_with_state(
            hub.clone(),
            crate::auth::layer::<S>,
        ));
    let router = match extra {
        Some(m) => router.nest_service(m.path, m.router),
        None => router,
    };
    router
        .layer(axum::middleware::from_fn_with_state(
            hub.clone(),
            ops::front::<S>,
        ))
        .with_state(hub)
}

/// A service a binary serves beside the hub's routes, under one path (`trantor hub` mounts its
/// MCP endpoint at `/mcp` this way; docs/protocol.md).
pub struct Mounted {
    /// Where it is served (the path and everything below it).
    pub path: &'static str,
    /// What serves it.
    pub router: Router,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every documented query pattern compiles as the hub checks it (one that did not would
    /// refuse nothing), and means the same thing here as in ECMAScript: no `\s`, `\S`, `\w`,
    /// `\d` or `\b`, whose sets differ between the engines.
    #[test]
    fn every_query_pattern_is_enforceable() {
        type S = trantor_store_sqlite::SqliteStore;
        let entries = all_tables::<S>();
        let mut n = 0;
        for (doc, _) in &entries {
            for field in doc.query {
                if let Some(p) = field.pattern {
                    n += 1;
                    assert!(
                        regex::Regex::new(p).is_ok(),
                        "{} {}: {p}",
                        doc.path,
                        field.name
                    );
                    for class in [r"\s", r"\S", r"\w", r"\d", r"\b"] {
                        assert!(!p.contains(class), "{} {}: {p}", doc.path, field.name);
                    }
                }
            }
        }
        assert!(n >= 3, "the patterns were found ({n})");
        let card = f("card", Ty::Str, false, "c").pattern(CARD_LIST_PATTERN);
        assert!(card.check(" #12, 7 ,,-3\u{a0}").is_ok());
        assert!(card.check("12;7").is_err() && card.check("x").is_err());
    }
}

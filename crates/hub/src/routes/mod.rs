//! The route table — one entry per route, carrying both its documentation and its handler —
//! and the router built from it.

pub mod board;
pub mod bus;
pub mod events;
pub mod meta;
pub mod presence;

use crate::error::ApiError;
use crate::openapi::{self, Field, RouteDoc, Ty, Verb, f};
use crate::ops;
use crate::state::AppState;
use axum::Router;
use axum::http::StatusCode;
use axum::routing::{MethodRouter, any, get, post};
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;
use trantor_proto::limits;
use trantor_store::Store;

/// A `'static` list of documented fields.
macro_rules! fields {
    ($($x:expr),* $(,)?) => {{
        const F: &[Field] = &[$($x),*];
        F
    }};
}

const SESSION_Q: Field = f(
    "session",
    Ty::Str,
    true,
    "bus address, e.g. claude:myproject",
)
.max(limits::SESSION);

/// Every route: its documentation and its handler.
pub fn table<S: Store>() -> Vec<(RouteDoc, MethodRouter<AppState<S>>)> {
    use Ty::*;
    let r = |verb, path, summary, query, body, h: MethodRouter<AppState<S>>| {
        (
            RouteDoc {
                verb,
                path,
                summary,
                query,
                body,
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
            &[],
            get(crate::ui::root::<S>),
        ),
        r(
            Verb::Get,
            "/ui",
            "The dashboard (HTML; assets under /ui/)",
            &[],
            &[],
            get(crate::ui::page),
        ),
        r(
            Verb::Get,
            "/ui/app.js",
            "Dashboard script",
            &[],
            &[],
            get(crate::ui::script),
        ),
        r(
            Verb::Get,
            "/ui/app.css",
            "Dashboard style sheet",
            &[],
            &[],
            get(crate::ui::style),
        ),
        r(
            Verb::Get,
            "/ui/icon.svg",
            "Dashboard icon",
            &[],
            &[],
            get(crate::ui::icon),
        ),
        r(
            Verb::Any,
            "/health",
            "Liveness, row counts, retention report (any method)",
            &[],
            &[],
            any(meta::health::<S>),
        ),
        r(
            Verb::Get,
            "/metrics",
            "Prometheus metrics",
            &[],
            &[],
            get(meta::metrics::<S>),
        ),
        r(
            Verb::Post,
            "/enroll",
            "Enrollment (accepted without signature verification in this hub)",
            &[],
            fields![
                f("name", Str, false, "identity name"),
                f("kind", Str, false, "human, agent or tool"),
            ],
            post(presence::enroll::<S>),
        ),
        r(
            Verb::Post,
            "/register",
            "Presence upsert; absent fields keep their stored values",
            &[],
            fields![
                f("session", Str, true, "bus address").max(limits::SESSION),
                f("project", Str, false, "project").max(limits::PROJECT),
                f("status", Str, false, "free-text status (≤280)").max(limits::STATUS),
                f("hookVersion", Str, false, "client version").max(limits::HOOK_VERSION),
                f("llm", Str, false, "LLM family").max(limits::LLM),
                f("model", Str, false, "model").max(limits::MODEL),
                f("kind", Str, false, "peer kind (agent, orch, tool, …)").max(limits::KIND),
                f(
                    "phase",
                    Str,
                    false,
                    "runner phase (working idle cut stalled parked)"
                )
                .max(limits::PHASE),
                f("phaseSince", Int, false, "phase start, ms"),
                f("persona", Str, false, "runner persona").max(limits::LLM),
                f("agent", Str, false, "runner agent (CLI driver)").max(limits::LLM),
            ],
            post(presence::register::<S>),
        ),
        r(
            Verb::Post,
            "/status",
            "Set a session's status (missing status = empty)",
            &[],
            fields![
                f("session", Str, true, "bus address").max(limits::SESSION),
                f("status", Str, false, "status text").max(limits::STATUS),
                f("project", Str, false, "project").max(limits::PROJECT),
            ],
            post(presence::status::<S>),
        ),
        r(
            Verb::Get,
            "/peer",
            "One peer's presence and delivery ledger (404 unknown peer)",
            fields![SESSION_Q],
            &[],
            get(presence::peer::<S>),
        ),
        r(
            Verb::Get,
            "/peers",
            "Every peer within the peer TTL",
            &[],
            &[],
            get(presence::peers::<S>),
        ),
        r(
            Verb::Post,
            "/send",
            "Post a message; returns its id",
            &[],
            fields![
                f("from", Str, true, "sender session").max(limits::SESSION),
                f(
                    "text",
                    Str,
                    true,
                    "message text (NUL removed, secrets refused)"
                )
                .max(limits::MESSAGE_TEXT),
                f("to", Str, false, "recipient session or all (default all)").max(limits::SESSION),
                f(
                    "project",
                    Str,
                    false,
                    "default: sender's project, else suffix of from"
                )
                .max(limits::PROJECT),
                f("re", Int, false, "id of the message this answers"),
                f(
                    "kind",
                    Str,
                    false,
                    "status, alert, receipt, ask, contract, …"
                )
                .max(limits::KIND),
                f("wake", Bool, false, "false: context only, does not wake"),
            ],
            post(bus::send::<S>),
        ),
        r(
            Verb::Get,
            "/inbox",
            "Non-blocking read of deliverable messages after since (pages of 1000, more:true)",
            fields![
                SESSION_Q,
                f("since", Int, false, "cursor: messages with id > since"),
                f("peek", Str, false, "1: do not advance deliveredUpTo"),
            ],
            &[],
            get(bus::inbox::<S>),
        ),
        r(
            Verb::Get,
            "/poll",
            "Long-poll: returns when a deliverable message commits or wait passes",
            fields![
                SESSION_Q,
                f("since", Int, false, "cursor"),
                f("wait", Num, false, "seconds to hold (default 25, max 290)"),
            ],
            &[],
            get(bus::poll::<S>),
        ),
        r(
            Verb::Post,
            "/delivered",
            "Raise a session's delivery ledger",
            &[],
            fields![
                f("session", Str, true, "session").max(limits::SESSION),
                f("upTo", Int, true, "new floor of deliveredUpTo"),
            ],
            post(bus::delivered::<S>),
        ),
        r(
            Verb::Get,
            "/recent",
            "Newest messages of every kind",
            fields![f("limit", Int, false, "≤200, default 50")],
            &[],
            get(bus::recent::<S>),
        ),
        r(
            Verb::Get,
            "/contracts",
            "Dispatch ledger: contracts of a session and their dispositions",
            fields![
                SESSION_Q,
                f("project", Str, false, "only this project").max(limits::PROJECT),
                f("windowMs", Int, false, "look-back window (default 24 h)"),
                f(
                    "overdueMs",
                    Int,
                    false,
                    "waiting this long counts as stalled"
                ),
            ],
            &[],
            get(bus::contracts::<S>),
        ),
        r(
            Verb::Get,
            "/stream",
            "Server-sent events: messages for a session, and events with events=1",
            fields![
                f("session", Str, false, "default all (broadcasts only)").max(limits::SESSION),
                f("events", Str, false, "1: also every event as `event: ev`"),
                f("status", Str, false, "set the session's status"),
            ],
            &[],
            get(crate::sse::stream::<S>),
        ),
        r(
            Verb::Post,
            "/task",
            "Create a card",
            &[],
            fields![
                f("title", Str, true, "title (≤200)").max(limits::TITLE),
                f("project", Str, false, "project (default: suffix of by)").max(limits::PROJECT),
                f(
                    "status",
                    Str,
                    false,
                    "todo doing testing failed done blocked (stale/unknown → todo)"
                ),
                f("assignee", Str, false, "assignee").max(limits::SESSION),
                f("by", Str, false, "creator").max(limits::SESSION),
                f("difficulty", Str, false, "easy, medium, hard").max(limits::EFFORT),
                f("model", Str, false, "model hint").max(limits::CARD_MODEL),
                f("deps", Arr, false, "card ids (≤20)").max(limits::DEPS),
                f("phase", Str, false, "phase label"),
                f("source", Str, false, "origin (git, todo, bridge, …)").max(limits::SOURCE),
                f("checklist", Arr, false, "strings or {text, done} (≤20)")
                    .max(limits::CHECKLIST_ITEMS),
                f("drill", Str, false, "how to verify done (≤300)").max(limits::DRILL),
                f("note", Str, false, "first log note").max(limits::LOG_TEXT),
                f("ts", Int, false, "historical creation time, ms"),
            ],
            post(board::create::<S>),
        ),
        r(
            Verb::Post,
            "/task/update",
            "Move or edit a card (409: drill gate, assignee freeze)",
            &[],
            fields![
                f("id", Int, true, "card id"),
                f("status", Str, false, "new status"),
                f("note", Str, false, "appended to the log").max(limits::LOG_TEXT),
                f("drill", Str, false, "drill line").max(limits::DRILL),
                f("by", Str, false, "mover").max(limits::SESSION),
                f("assignee", Str, false, "new assignee").max(limits::SESSION),
                f("reassign", Bool, false, "explicit reassignment"),
                f("title", Str, false, "title").max(limits::TITLE),
                f("summary", Str, false, "summary").max(limits::SUMMARY),
                f("difficulty", Str, false, "difficulty").max(limits::EFFORT),
                f("model", Str, false, "model").max(limits::CARD_MODEL),
                f("deps", Arr, false, "dependencies").max(limits::DEPS),
                f(
                    "checklist",
                    Arr,
                    false,
                    "replaces the checklist; null clears it"
                )
                .max(limits::CHECKLIST_ITEMS),
                f("delete", Bool, false, "delete the card"),
                f("blast", Obj, false, "blast radius, recorded on the event"),
            ],
            post(board::update::<S>),
        ),
        r(
            Verb::Post,
            "/task/checklist-toggle",
            "Tick or untick a checklist item",
            &[],
            fields![
                f("id", Int, true, "card id"),
                f("index", Int, true, "0-based item index"),
                f("done", Bool, false, "new state"),
            ],
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
                ),
            ],
            &[],
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
            &[],
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
                f("limit", Int, false, "newest N (default 300, max 2000)"),
            ],
            &[],
            get(events::events::<S>),
        ),
        r(
            Verb::Get,
            "/lessons",
            "Global lessons plus the agent's own",
            fields![f("agent", Str, false, "agent name").max(limits::LLM)],
            &[],
            get(events::lessons::<S>),
        ),
        r(
            Verb::Post,
            "/lesson",
            "Record a lesson (exact duplicates are a no-op)",
            &[],
            fields![
                f("text", Str, true, "lesson (≤400)").max(limits::LESSON_TEXT),
                f("scope", Str, false, "global or an agent name").max(limits::LESSON_SCOPE),
                f("by", Str, false, "author").max(limits::SESSION),
                f("project", Str, false, "project").max(limits::PROJECT),
            ],
            post(events::lesson::<S>),
        ),
        r(
            Verb::Get,
            "/policy",
            "Project links and autonomy levels",
            &[],
            &[],
            get(meta::policy_get::<S>),
        ),
        r(
            Verb::Post,
            "/policy",
            "Change autonomy, link or unlink projects",
            &[],
            fields![
                f("autonomy", Obj, false, "{project: 1..4}"),
                f("link", Obj, false, "{projects: [2..4], reason}"),
                f("unlink", Obj, false, "{projects}"),
                f("by", Str, false, "who declares it").max(limits::SESSION),
            ],
            post(meta::policy_post::<S>),
        ),
        r(
            Verb::Get,
            "/project",
            "A project's brief",
            fields![f("project", Str, true, "project").max(limits::PROJECT)],
            &[],
            get(meta::project_get::<S>),
        ),
        r(
            Verb::Post,
            "/project",
            "Set a project's brief",
            &[],
            fields![
                f("project", Str, true, "project").max(limits::PROJECT),
                f("brief", Str, false, "brief (≤600)").max(limits::BRIEF),
                f("by", Str, false, "author").max(limits::SESSION),
            ],
            post(meta::project_post::<S>),
        ),
        r(
            Verb::Post,
            "/phase",
            "Set a phase goal",
            &[],
            fields![
                f("project", Str, true, "project").max(limits::PROJECT),
                f("phase", Str, true, "phase (≤40)"),
                f("goal", Str, false, "goal (≤400)").max(limits::GOAL),
                f("by", Str, false, "author").max(limits::SESSION),
            ],
            post(meta::phase_post::<S>),
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
            &[],
            get(meta::op_get::<S>),
        ),
    ]
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
    let entries = table::<S>();
    let mut docs: Vec<RouteDoc> = entries.iter().map(|(d, _)| *d).collect();
    docs.push(RouteDoc {
        verb: Verb::Get,
        path: "/openapi.json",
        summary: "This document",
        query: &[],
        body: &[],
    });
    ops::intern_routes(docs.iter().map(|d| d.path));
    ops::intern_post_routes(
        docs.iter()
            .filter(|d| matches!(d.verb, Verb::Post))
            .map(|d| d.path),
    );
    let spec = Arc::new(openapi::document(&docs));

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
    router
        .route(
            "/openapi.json",
            get(move || {
                let spec = spec.clone();
                async move { axum::Json((*spec).clone()) }
            }),
        )
        .fallback(not_found)
        .method_not_allowed_fallback(wrong_method)
        .layer(axum::middleware::from_fn_with_state(
            hub.clone(),
            ops::idempotent::<S>,
        ))
        .layer(axum::middleware::from_fn_with_state(
            hub.clone(),
            ops::front::<S>,
        ))
        .with_state(hub)
}

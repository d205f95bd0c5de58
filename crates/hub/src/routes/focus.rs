//! Solo work on the board: `POST /focus`, `GET /focus`, `POST /todos` (docs/protocol.md §14.3).

use super::{RouteDoc, Verb};
use crate::domain::cards::{card_event, created_history, move_card};
use crate::error::{ApiError, ApiResult, check_len, check_opt, first_named};
use crate::extract::{JsonBody, Params};
use crate::openapi::{Field, Ty, f, shape};
use crate::state::{AppState, Outbox, event, persist_edge};
use axum::Json;
use axum::extract::State;
use axum::routing::{MethodRouter, get, post};
use serde_json::{Value, json};
use trantor_proto::focus::{
    CC_MAX, FocusReply, FocusRequest, STATUS_MAX, TEXT_MAX, TODOS_MAX, TodosReply, TodosRequest,
};
use trantor_proto::{Card, CardStatus, limits, now_ms};
use trantor_store::{CardFilter, NewEvent, Store};

fn cut(s: &str, n: usize) -> String {
    s.chars().take(n).collect()
}

fn extra_str<'a>(c: &'a Card, k: &str) -> &'a str {
    c.extra.get(k).and_then(Value::as_str).unwrap_or("")
}

/// The session a body names: `session`, else `by`. Both are bounded as sent (the schema's
/// `maxLength`), whichever is used.
/// The `focus` event of a session that took card `c` (`shift`: it moved from another card).
fn focus_event(
    now: i64,
    project: &str,
    session: &str,
    c: &Card,
    title: &str,
    shift: bool,
) -> NewEvent {
    event(
        now,
        "focus",
        project,
        session,
        json!({"taskId": c.id, "title": title, "shift": shift}),
    )
}

fn who(session: &Option<String>, by: &Option<String>) -> ApiResult<String> {
    check_opt("session", session, limits::SESSION)?;
    check_opt("by", by, limits::SESSION)?;
    let s = first_named(session, by).unwrap_or_default();
    check_len("session", &s, limits::SESSION)?;
    Ok(s)
}

fn new_card(
    project: &str,
    title: &str,
    session: &str,
    status: CardStatus,
    source: &str,
    now: i64,
) -> Card {
    let mut c = Card {
        id: 0,
        project: project.to_string(),
        title: title.to_string(),
        status,
        assignee: session.to_string(),
        by: session.to_string(),
        ts: now,
        updated: now,
        difficulty: String::new(),
        model: String::new(),
        phase: String::new(),
        source: source.to_string(),
        effort: String::new(),
        summary: String::new(),
        deps: Vec::new(),
        history: Vec::new(),
        log: Vec::new(),
        checklist: Vec::new(),
        drill: String::new(),
        worked_by: None,
        closed_by: None,
        extra: serde_json::Map::new(),
    };
    created_history(&mut c, session, now);
    c
}

/// `POST /focus`: open or re-title the session's rolling focus card.
pub async fn post_focus<S: Store>(
    State(hub): State<AppState<S>>,
    JsonBody(req): JsonBody<FocusRequest>,
) -> ApiResult<Json<FocusReply>> {
    let session = who(&req.session, &req.by)?;
    check_len("project", &req.project, limits::PROJECT)?;
    check_len("title", &req.title, TEXT_MAX)?;
    check_opt("cc", &req.cc, CC_MAX)?;
    let project = req.project.trim().to_string();
    let title = cut(
        &req.title.split_whitespace().collect::<Vec<_>>().join(" "),
        200,
    );
    if session.is_empty() || project.is_empty() || title.is_empty() {
        return Err(ApiError::bad_request("session, project, title required"));
    }
    let cc = req.cc.as_deref().unwrap_or("").trim().to_string();
    let now = now_ms();
    let touch = hub.presence.touch(&session, now);
    let (card, out) = hub
        .write(move |tx| {
            let mut out = Outbox::default();
            persist_edge(tx, &mut out, &session, touch, now)?;
            let open: Vec<Card> = tx
                .cards(&CardFilter {
                    project: Some(project.clone()),
                    ..CardFilter::default()
                })?
                .into_iter()
                .filter(|c| c.source == "session" && c.status != CardStatus::Done)
                .collect();
            // With a cc, the card of that cc, else an older client's card of this session
            // that has no cc yet; never another cc's card.
            let found = if cc.is_empty() {
                open.into_iter().find(|c| c.assignee == session)
            } else {
                let mine = open.iter().position(|c| extra_str(c, "cc") == cc);
                let legacy = open
                    .iter()
                    .position(|c| extra_str(c, "cc").is_empty() && c.assignee == session);
                mine.or(legacy).map(|i| open[i].clone())
            };
            let card = match found {
                Some(mut c) => {
                    if c.title != title {
                        c.history.push(trantor_proto::HistoryEntry {
                            from: Some(c.status.to_string()),
                            to: c.status.to_string(),
                            by: session.clone(),
                            ts: now,
                            note: Some(cut(&title, 90)),
                        });
                        if c.history.len() > limits::HISTORY_ENTRIES {
                            let excess = c.history.len() - limits::HISTORY_ENTRIES;
                            c.history.drain(..excess);
                        }
                        c.summary.clear();
                        c.title = title.clone();
                        let st = c.status.to_string();
                        out.event(tx, card_event(&c, "updated", &session, now, None, &st))?;
                        out.event(tx, focus_event(now, &project, &session, &c, &title, true))?;
                    }
                    if !cc.is_empty() && extra_str(&c, "cc").is_empty() {
                        c.extra.insert("cc".into(), json!(cc));
                    }
                    if let Some(ev) = move_card(&mut c, CardStatus::Doing, &session, None, now) {
                        out.event(tx, ev)?;
                    }
                    c.updated = now;
                    tx.put_card(&c)?;
                    c
                }
                None => {
                    let mut c = new_card(
                        &project,
                        &title,
                        &session,
                        CardStatus::Doing,
                        "session",
                        now,
                    );
                    if !cc.is_empty() {
                        c.extra.insert("cc".into(), json!(cc));
                    }
                    let c = tx.insert_card(c)?;
                    out.event(tx, card_event(&c, "created", &session, now, None, "doing"))?;
                    out.event(tx, focus_event(now, &project, &session, &c, &title, false))?;
                    c
                }
            };
            Ok((card, out))
        })
        .await?;
    hub.publish(out);
    Ok(Json(FocusReply {
        ok: Some(true),
        id: Some(card.id),
        task: Some(card),
    }))
}

/// `GET /focus?session=|cc=`: the session's open focus card, or nulls.
pub async fn get_focus<S: Store>(
    State(hub): State<AppState<S>>,
    p: Params,
) -> ApiResult<Json<FocusReply>> {
    let session = p.get("session").unwrap_or("").trim().to_string();
    let cc = p.get("cc").unwrap_or("").trim().to_string();
    let cards = hub
        .store
        .read(move |tx| tx.cards(&CardFilter::default()))
        .await?;
    let card = cards.into_iter().find(|c| {
        c.source == "session"
            && c.status != CardStatus::Done
            && if cc.is_empty() {
                !session.is_empty() && c.assignee == session
            } else {
                extra_str(c, "cc") == cc
            }
    });
    Ok(Json(FocusReply {
        ok: None,
        id: card.as_ref().map(|c| c.id),
        task: card,
    }))
}

/// `POST /todos`: mirror the session's TodoWrite list as cards (pending/in_progress/completed
/// → todo/doing/done); a vanished todo's card goes unless it is done.
pub async fn post_todos<S: Store>(
    State(hub): State<AppState<S>>,
    JsonBody(req): JsonBody<TodosRequest>,
) -> ApiResult<Json<TodosReply>> {
    let session = who(&req.session, &req.by)?;
    check_len("project", &req.project, limits::PROJECT)?;
    let project = req.project.trim().to_string();
    if session.is_empty() || project.is_empty() {
        return Err(ApiError::bad_request("session and project required"));
    }
    if req.todos.len() > TODOS_MAX {
        return Err(ApiError::too_long("todos", TODOS_MAX));
    }
    for t in &req.todos {
        check_len("content", &t.content, TEXT_MAX)?;
        check_len("status", &t.status, STATUS_MAX)?;
    }
    let count = req.todos.len();
    let todos: Vec<(String, CardStatus)> = req
        .todos
        .iter()
        .map(|t| {
            let want = match t.status.as_str() {
                "in_progress" => CardStatus::Doing,
                "completed" => CardStatus::Done,
                _ => CardStatus::Todo,
            };
            (cut(t.content.trim(), 200), want)
        })
        .filter(|(k, _)| !k.is_empty())
        .collect();
    let now = now_ms();
    let touch = hub.presence.touch(&session, now);
    let out = hub
        .write(move |tx| {
            let mut out = Outbox::default();
            persist_edge(tx, &mut out, &session, touch, now)?;
            let mine: Vec<Card> = tx
                .cards(&CardFilter {
                    project: Some(project.clone()),
                    assignee: Some(session.clone()),
                    ..CardFilter::default()
                })?
                .into_iter()
                .filter(|c| c.source == "todo")
                .collect();
            let mut seen: Vec<&str> = Vec::new();
            for (key, want) in &todos {
                if seen.contains(&key.as_str()) {
                    continue;
                }
                seen.push(key);
                match mine.iter().find(|c| extra_str(c, "todoKey") == key) {
                    None => {
                        let mut c = new_card(&project, key, &session, want.clone(), "todo", now);
                        c.extra.insert("todoKey".into(), json!(key));
                        let c = tx.insert_card(c)?;
                        let to = want.as_str();
                        out.event(tx, card_event(&c, "created", &session, now, None, to))?;
                    }
                    Some(c) if c.status != *want => {
                        let mut c = c.clone();
                        if let Some(ev) = move_card(&mut c, want.clone(), &session, None, now) {
                            out.event(tx, ev)?;
                        }
                        tx.put_card(&c)?;
                    }
                    Some(_) => {}
                }
            }
            for c in &mine {
                if seen.contains(&extra_str(c, "todoKey")) || c.status == CardStatus::Done {
                    continue;
                }
                tx.delete_card(c.id)?;
                out.event(tx, card_event(c, "deleted", &session, now, None, ""))?;
            }
            Ok(out)
        })
        .await?;
    hub.publish(out);
    Ok(Json(TodosReply { ok: true, count }))
}

/// The focus and todo routes.
pub fn table<S: Store>() -> Vec<(RouteDoc, MethodRouter<AppState<S>>)> {
    const Q: &[Field] = &[
        f("session", Ty::Str, false, "bus address").max(limits::SESSION),
        f(
            "cc",
            Ty::Str,
            false,
            "the agent CLI's session id (the precise lookup)",
        )
        .max(CC_MAX),
    ];
    vec![
        (
            RouteDoc {
                verb: Verb::Post,
                path: "/focus",
                summary: "Open or re-title a session's rolling focus card (source session, doing); event focus",
                query: &[],
                body: Some(shape::<FocusRequest>),
                reply: Some(shape::<FocusReply>),
            },
            post(post_focus::<S>),
        ),
        (
            RouteDoc {
                verb: Verb::Get,
                path: "/focus",
                summary: "A session's open focus card (by cc, else by session), or nulls",
                query: Q,
                body: None,
                reply: Some(shape::<FocusReply>),
            },
            get(get_focus::<S>),
        ),
        (
            RouteDoc {
                verb: Verb::Post,
                path: "/todos",
                summary: "Mirror a session's TodoWrite list as cards (source todo), reconciled by text",
                query: &[],
                body: Some(shape::<TodosRequest>),
                reply: Some(shape::<TodosReply>),
            },
            post(post_todos::<S>),
        ),
    ]
}

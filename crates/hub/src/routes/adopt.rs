//! `POST /import`: adopt one project's rows brought from another hub (the original's
//! `trantor adopt` posts them here, owner-signed; `docs/protocol.md` §15.5). Every row gets this
//! hub's ids and the imported project; the whole import is one transaction.

use crate::domain::policy::canon;
use crate::error::{ApiError, ApiResult, check_len, check_opt, check_required};
use crate::extract::JsonBody;
use crate::openapi::{RouteDoc, Verb, shape};
use crate::state::{AppState, Outbox, event};
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{MethodRouter, post};
use serde_json::{Value, json};
use std::collections::HashMap;
use trantor_proto::lanes::{ImportCard, ImportEvent, ImportMessage, ImportReply, ImportRequest};
use trantor_proto::{limits, now_ms};
use trantor_store::{CardFilter, NewMessage, Store, StoreError, WriteTx};

/// Most cards one import carries (a bigger project comes in parts, the later ones with
/// `force`).
const MAX_TASKS: usize = 200;
/// Most events, and most messages, one import carries.
const MAX_ROWS: usize = 200;

/// This module's routes, for the route table.
pub fn table<S: Store>() -> Vec<(RouteDoc, MethodRouter<AppState<S>>)> {
    vec![(
        RouteDoc {
            verb: Verb::Post,
            path: "/import",
            summary: "Adopt one project's cards, events and messages from another hub (owner); \
                      refused when the project already has cards here unless force",
            query: &[],
            body: Some(shape::<ImportRequest>),
            reply: Some(shape::<ImportReply>),
        },
        post(import::<S>),
    )]
}

/// `POST /import {project, tasks, events, messages, force?, by?}`: 400 without a project or
/// on a malformed row (nothing written); 409 `{existing}` when the project already has cards
/// here and `force` is not set. Cards get fresh ids (the other hub's ids mean nothing here) and
/// the events about them follow; messages get fresh ids; everything lands in `project`, and a
/// `project.adopted` event records the counts.
pub async fn import<S: Store>(
    State(hub): State<AppState<S>>,
    JsonBody(body): JsonBody<Value>,
) -> ApiResult<Json<ImportReply>> {
    // Another hub's JSON may spell an integer as `3.0`; JSON Schema's `integer` allows it, and
    // `JsonBody` has already read such a float as its integer (`extract::integral`).
    let req: ImportRequest = serde_json::from_value(body)
        .map_err(|e| ApiError::bad_request(format!("invalid body: {e}")))?;
    let asked = check_required("project", &req.project, limits::PROJECT)?;
    check_opt("by", &req.by, limits::SESSION)?;
    check_counts(&req)?;
    check_messages(&req.messages)?;
    check_events(&req.events)?;
    let by = req.by.clone().unwrap_or_default().trim().to_string();
    let now = now_ms();
    let result = hub
        .write(move |tx| {
            let project = canon(tx, &asked)?;
            let existing = tx
                .cards(&CardFilter {
                    project: Some(project.clone()),
                    ..CardFilter::default()
                })?
                .len();
            if existing > 0 && !req.force {
                return Ok(Err(ApiError::with(
                    StatusCode::CONFLICT,
                    "project already has cards here",
                    json!({ "existing": existing }),
                )));
            }
            adopt(tx, req, &project, &by, now).map(Ok)
        })
        .await?;
    let (reply, out) = result?;
    hub.publish(out);
    Ok(Json(reply))
}

/// 400 when an import carries more rows of a kind than one import may.
fn check_counts(req: &ImportRequest) -> ApiResult<()> {
    if req.tasks.len() > MAX_TASKS {
        return Err(ApiError::too_long("tasks", MAX_TASKS));
    }
    if req.events.len() > MAX_ROWS {
        return Err(ApiError::too_long("events", MAX_ROWS));
    }
    if req.messages.len() > MAX_ROWS {
        return Err(ApiError::too_long("messages", MAX_ROWS));
    }
    Ok(())
}

/// 400 on the first malformed message, named by its place (`messages[2].text`).
fn check_messages(messages: &[ImportMessage]) -> ApiResult<()> {
    for (i, m) in messages.iter().enumerate() {
        let at = |f: &str| format!("messages[{i}].{f}");
        for (name, v, max) in [
            ("from", &m.from, limits::SESSION),
            ("to", &m.to, limits::SESSION),
            ("text", &m.text, limits::MESSAGE_TEXT),
        ] {
            if v.trim().is_empty() {
                return Err(ApiError::bad_request(format!("{} required", at(name))));
            }
            check_len(&at(name), v, max)?;
        }
        check_opt(&at("kind"), &m.kind, 40)?;
        if m.ts.is_some_and(|t| t < 0) {
            return Err(ApiError::bad_request(format!(
                "{} must be at least 0",
                at("ts")
            )));
        }
    }
    Ok(())
}

/// 400 on the first malformed event, named by its place (`events[0].type`).
fn check_events(events: &[ImportEvent]) -> ApiResult<()> {
    for (i, e) in events.iter().enumerate() {
        let at = |f: &str| format!("events[{i}].{f}");
        if e.kind.trim().is_empty() {
            return Err(ApiError::bad_request(format!("{} required", at("type"))));
        }
        check_len(&at("type"), &e.kind, 80)?;
        check_opt(&at("by"), &e.by, limits::SESSION)?;
        if e.ts.is_some_and(|t| t < 0) {
            return Err(ApiError::bad_request(format!(
                "{} must be at least 0",
                at("ts")
            )));
        }
    }
    Ok(())
}

/// Writes an import's rows into `project` (in the caller's transaction): the cards with fresh
/// ids, the events with their card ids remapped, the messages, then the `project.adopted`
/// event with the counts.
fn adopt(
    tx: &mut dyn WriteTx,
    req: ImportRequest,
    project: &str,
    by: &str,
    now: i64,
) -> Result<(ImportReply, Outbox), StoreError> {
    let mut reply = ImportReply {
        ok: true,
        ..ImportReply::default()
    };
    let remap = adopt_cards(tx, &req.tasks, project, &mut reply)?;
    let mut out = Outbox::default();
    for e in req.events {
        let mut data = e.data;
        data.remove("id");
        data.remove("project");
        if let Some(t) = e.task_id {
            data.insert("taskId".into(), json!(remap.get(&t).copied().unwrap_or(t)));
        }
        let ev = event(
            e.ts.unwrap_or(now),
            &e.kind,
            project,
            e.by.as_deref().unwrap_or(""),
            Value::Object(data),
        );
        tx.insert_event(ev)?;
        reply.events += 1;
    }
    for m in req.messages {
        let refs = crate::domain::cards::card_refs(&m.text);
        tx.insert_message(
            NewMessage {
                ts: m.ts.unwrap_or(now),
                from: m.from,
                to: m.to,
                project: project.to_string(),
                text: m.text,
                re: m.re,
                kind: m.kind,
                wake: Some(false),
            },
            &refs,
        )?;
        reply.messages += 1;
    }
    out.event(
        tx,
        event(
            now,
            "project.adopted",
            project,
            by,
            json!({ "counts": {
                "tasks": reply.tasks,
                "events": reply.events,
                "messages": reply.messages,
                "remapped": reply.remapped,
            } }),
        ),
    )?;
    Ok((reply, out))
}

/// Inserts the imported cards into `project`, counting them (and those whose id changed) in
/// `reply`; returns the other hub's card ids mapped to this hub's.
fn adopt_cards(
    tx: &mut dyn WriteTx,
    tasks: &[ImportCard],
    project: &str,
    reply: &mut ImportReply,
) -> Result<HashMap<i64, i64>, StoreError> {
    let mut remap = HashMap::new();
    for c in tasks {
        let stored = tx.insert_card(c.to_card(project))?;
        if c.id != Some(stored.id) {
            reply.remapped += 1;
        }
        if let Some(old) = c.id {
            remap.insert(old, stored.id);
        }
        reply.tasks += 1;
    }
    Ok(remap)
}

//! The board: `/task`, `/task/update`, `/task/checklist-toggle`, `/tasks`, `/card`.

use crate::domain::cards::{
    card_event, collapse_ws, created_history, drill_refusal, has_drill_line, move_card, push_log,
    request_status, slim, truncate,
};
use crate::domain::policy::project_or_suffix;
use crate::error::{ApiError, ApiResult, check_len, check_opt, check_required, check_secrets};
use crate::extract::{JsonBody, Params, parse_int};
use crate::presence::Touch;
use crate::state::{AppState, Outbox, persist_edge};
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde_json::{Value, json};
use trantor_proto::limits;
use trantor_proto::{
    Card, CardReply, CardStatus, ChecklistInput, ChecklistItem, ChecklistToggleRequest,
    TaskCreateRequest, TaskReply, TaskUpdateRequest, TasksReply, now_ms,
};
use trantor_store::{CardFilter, EventFilter, ReadTx, Store, StoreError, WriteTx};

/// A day, ms: how far in the future a historical `ts` on create may be.
const DAY_MS: i64 = 86_400_000;

/// Touch the actor of a board write when it names a session (`agent:project`); bare names
/// such as `human` are not sessions and get no peer row.
fn touch_actor<S: Store>(hub: &AppState<S>, by: &str, now: i64) -> Touch {
    if by.contains(':') {
        hub.presence.touch(by, now)
    } else {
        Touch::Ignored
    }
}

fn checklist_items(field: &str, items: Vec<ChecklistInput>) -> ApiResult<Vec<ChecklistItem>> {
    if items.len() > limits::CHECKLIST_ITEMS {
        return Err(ApiError::too_long(field, limits::CHECKLIST_ITEMS));
    }
    items
        .into_iter()
        .map(ChecklistItem::from)
        .map(|mut it| {
            // Bounded as sent, as the document says (white space around it counts).
            check_len("checklist item", &it.text, limits::CHECKLIST_TEXT)?;
            it.text = it.text.trim().to_string();
            Ok(it)
        })
        .filter(|r: &ApiResult<ChecklistItem>| r.as_ref().map_or(true, |it| !it.text.is_empty()))
        .collect()
}

/// The card ids a card waits on: positive, not itself, each once. More than the documented
/// `maxItems` as sent is a 400 even when duplicates or non-ids would leave fewer (schemathesis,
/// random seed: 25 items, 11 of them ids, were accepted against the document).
fn deps_list(deps: Vec<i64>, own: Option<i64>) -> ApiResult<Vec<i64>> {
    if deps.len() > limits::DEPS {
        return Err(ApiError::too_long("deps", limits::DEPS));
    }
    let mut out: Vec<i64> = Vec::new();
    for d in deps {
        if d > 0 && Some(d) != own && !out.contains(&d) {
            out.push(d);
        }
    }
    if out.len() > limits::DEPS {
        return Err(ApiError::too_long("deps", limits::DEPS));
    }
    Ok(out)
}

fn difficulty(d: Option<String>) -> ApiResult<Option<String>> {
    match d.map(|d| d.trim().to_ascii_lowercase()) {
        None => Ok(None),
        Some(d) if matches!(d.as_str(), "" | "easy" | "medium" | "hard") => Ok(Some(d)),
        Some(_) => Err(ApiError::bad_request(
            "difficulty must be easy, medium, hard or empty",
        )),
    }
}

fn trimmed(v: Option<String>) -> Option<String> {
    v.map(|s| s.trim().to_string())
}

/// `POST /task`: create a card.
pub async fn create<S: Store>(
    State(hub): State<AppState<S>>,
    JsonBody(req): JsonBody<TaskCreateRequest>,
) -> ApiResult<Json<TaskReply>> {
    let title = check_required("title", &req.title, limits::TITLE)?;
    check_opt("project", &req.project, limits::PROJECT)?;
    check_opt("assignee", &req.assignee, limits::SESSION)?;
    check_opt("by", &req.by, limits::SESSION)?;
    check_opt("model", &req.model, limits::CARD_MODEL)?;
    check_opt("phase", &req.phase, limits::CARD_PHASE)?;
    check_opt("source", &req.source, limits::SOURCE)?;
    check_opt("effort", &req.effort, limits::EFFORT)?;
    check_opt("summary", &req.summary, limits::SUMMARY)?;
    check_opt("note", &req.note, limits::LOG_TEXT)?;
    check_opt("costKind", &req.cost_kind, 24)?;
    check_opt("costNote", &req.cost_note, 80)?;
    let drill = req.drill.as_deref().map(collapse_ws).unwrap_or_default();
    check_len("drill", &drill, limits::DRILL)?;
    let checklist = checklist_items("checklist", req.checklist.unwrap_or_default())?;
    let deps = deps_list(req.deps.unwrap_or_default(), None)?;
    let difficulty = difficulty(req.difficulty)?.unwrap_or_default();
    let note = trimmed(req.note).filter(|n| !n.is_empty());
    let summary = trimmed(req.summary).unwrap_or_default();
    check_secrets(
        [title.as_str(), drill.as_str(), summary.as_str()]
            .into_iter()
            .chain(note.as_deref())
            .chain(checklist.iter().map(|c| c.text.as_str())),
    )?;

    let now = now_ms();
    let by = trimmed(req.by).unwrap_or_default();
    let project = project_or_suffix(req.project.as_deref().map(str::trim), &by);
    // Stale is reached only through moves; an unknown status is a todo.
    let status = req
        .status
        .as_ref()
        .map(request_status)
        .filter(|s| s.is_known() && *s != CardStatus::Stale)
        .unwrap_or_default();
    let ts = match req.ts {
        Some(t) if t > 0 && t <= now + DAY_MS => t,
        _ => now,
    };
    let mut extra = serde_json::Map::new();
    if let Some(k) = trimmed(req.cost_kind).filter(|k| !k.is_empty()) {
        extra.insert("costKind".into(), json!(k));
    }
    if let Some(c) = req.cost_usd.filter(|c| c.is_finite()) {
        extra.insert("costUsd".into(), json!(c));
    }
    if let Some(n) = trimmed(req.cost_note).filter(|n| !n.is_empty()) {
        extra.insert("costNote".into(), json!(n));
    }
    let mut card = Card {
        id: 0,
        project,
        title,
        status,
        assignee: trimmed(req.assignee).unwrap_or_default(),
        by: by.clone(),
        ts,
        updated: now,
        difficulty,
        model: trimmed(req.model).unwrap_or_default(),
        phase: trimmed(req.phase).unwrap_or_default(),
        source: trimmed(req.source).unwrap_or_default(),
        effort: trimmed(req.effort).unwrap_or_default(),
        summary,
        deps,
        history: Vec::new(),
        log: Vec::new(),
        checklist,
        drill,
        worked_by: None,
        closed_by: None,
        extra,
    };
    created_history(&mut card, &by, now);
    if let Some(n) = &note {
        push_log(&mut card, now, &by, n);
    }
    // The drill gate holds for a card created as done too, whatever its `source` says.
    if card.status == CardStatus::Done && !has_drill_line(&card, None, note.as_deref()) {
        return Err(ApiError::with(
            StatusCode::CONFLICT,
            "no drill line on a card created as done: pass drill:\"<the command or check>\", a \
             checklist item \"drill: …\", or a note starting \"Drill:\"",
            json!({ "status": "done" }),
        ));
    }
    let touch = touch_actor(&hub, &by, now);
    let (card, out) = hub
        .write(move |tx| {
            let mut out = Outbox::default();
            persist_edge(tx, &mut out, &by, touch, now)?;
            let card = tx.insert_card(card)?;
            let status = card.status.to_string();
            out.event(tx, card_event(&card, "created", &by, now, None, &status))?;
            Ok((card, out))
        })
        .await?;
    Ok(task_reply(&hub, card, out))
}

/// A validated `/task/update` request.
struct Update {
    id: i64,
    by: String,
    status: Option<CardStatus>,
    note: Option<String>,
    assignee: Option<String>,
    reassign: bool,
    edits: Edits,
    delete: bool,
    blast: Option<Value>,
}

/// The card fields a validated `/task/update` sets as sent.
#[derive(Default)]
struct Edits {
    drill: Option<String>,
    title: Option<String>,
    summary: Option<String>,
    difficulty: Option<String>,
    model: Option<String>,
    deps: Option<Vec<i64>>,
    checklist: Option<Vec<ChecklistItem>>,
}

fn validate_update(req: TaskUpdateRequest) -> ApiResult<Update> {
    if req.id <= 0 {
        return Err(ApiError::bad_request("id required"));
    }
    check_opt("by", &req.by, limits::SESSION)?;
    check_opt("assignee", &req.assignee, limits::SESSION)?;
    check_opt("note", &req.note, limits::LOG_TEXT)?;
    check_opt("model", &req.model, limits::CARD_MODEL)?;
    check_opt("summary", &req.summary, limits::SUMMARY)?;
    let title = trimmed(req.title).filter(|t| !t.is_empty());
    check_opt("title", &title, limits::TITLE)?;
    let drill = req.drill.as_deref().map(collapse_ws);
    check_opt("drill", &drill, limits::DRILL)?;
    let checklist = match req.checklist {
        None => None,
        Some(None) => Some(Vec::new()),
        Some(Some(items)) => Some(checklist_items("checklist", items)?),
    };
    let deps = req.deps.map(|d| deps_list(d, Some(req.id))).transpose()?;
    let note = trimmed(req.note).filter(|n| !n.is_empty());
    let summary = trimmed(req.summary);
    if let Some(b) = &req.blast {
        let size = serde_json::to_vec(b).map(|v| v.len()).unwrap_or(usize::MAX);
        if size > limits::FREE_JSON_BYTES {
            return Err(ApiError::too_long("blast", limits::FREE_JSON_BYTES));
        }
    }
    check_secrets(
        title
            .as_deref()
            .into_iter()
            .chain(note.as_deref())
            .chain(drill.as_deref())
            .chain(summary.as_deref())
            .chain(checklist.iter().flatten().map(|c| c.text.as_str())),
    )?;
    Ok(Update {
        id: req.id,
        by: trimmed(req.by).unwrap_or_default(),
        status: req.status.as_ref().map(request_status),
        note,
        assignee: trimmed(req.assignee),
        reassign: req.reassign.unwrap_or(false),
        edits: Edits {
            drill,
            title,
            summary,
            difficulty: difficulty(req.difficulty)?,
            model: trimmed(req.model),
            deps,
            checklist,
        },
        delete: req.delete.unwrap_or(false),
        blast: req.blast,
    })
}

/// `POST /task/update`: move or edit a card (assignee freeze and drill gate enforced).
pub async fn update<S: Store>(
    State(hub): State<AppState<S>>,
    JsonBody(req): JsonBody<TaskUpdateRequest>,
) -> ApiResult<Json<TaskReply>> {
    let u = validate_update(req)?;
    let now = now_ms();
    let touch = touch_actor(&hub, &u.by, now);
    change_card(&hub, u.id, move |tx, out, card| {
        let reassigning = u
            .assignee
            .as_deref()
            .filter(|a| *a != card.assignee)
            .map(str::to_string);
        if let Some(refusal) = update_refusal(&*tx, card, &u, reassigning.is_some())? {
            return Ok(Err(refusal));
        }
        persist_edge(tx, out, &u.by, touch, now)?;
        if u.delete {
            tx.delete_card(card.id)?;
            let from = card.status.to_string();
            out.event(
                tx,
                card_event(card, "deleted", &u.by, now, Some(&from), "deleted"),
            )?;
            return Ok(Ok(()));
        }
        edit(tx, out, card, u, reassigning, now)?;
        Ok(Ok(()))
    })
    .await
}

/// Changes card `id` in one write (404 when there is none): `change` refuses, or changes the
/// card and records its events in the outbox. The reply is the card as changed.
async fn change_card<S, F>(hub: &AppState<S>, id: i64, change: F) -> ApiResult<Json<TaskReply>>
where
    S: Store,
    F: FnOnce(&mut dyn WriteTx, &mut Outbox, &mut Card) -> Result<ApiResult<()>, StoreError>
        + Send
        + 'static,
{
    let outcome = hub
        .write(move |tx| {
            let mut out = Outbox::default();
            let Some(mut card) = tx.card(id)? else {
                return Ok(Err(ApiError::not_found("no such task")));
            };
            Ok(change(tx, &mut out, &mut card)?.map(|()| (card, out)))
        })
        .await?;
    let (card, out) = outcome?;
    Ok(task_reply(hub, card, out))
}

/// Publishes what a write produced and answers with `card`.
fn task_reply<S: Store>(hub: &AppState<S>, card: Card, out: Outbox) -> Json<TaskReply> {
    hub.publish(out);
    Json(TaskReply {
        ok: true,
        task: card,
    })
}

/// Whether the assignee freeze refuses a change of assignee by `by`: it protects an owned card
/// (moved on only with `reassign` or by its own assignee); an unassigned card may be claimed.
fn frozen(assignee: &str, by: &str, reassign: bool) -> bool {
    !(assignee.is_empty() || reassign || by == assignee)
}

/// Why an update may not touch `card`, in the order they are checked: the assignee freeze, the
/// drill gate on a move to done, an open verify gate on it.
fn update_refusal(
    tx: &dyn ReadTx,
    card: &Card,
    u: &Update,
    reassigning: bool,
) -> Result<Option<ApiError>, StoreError> {
    if reassigning && frozen(&card.assignee, &u.by, u.reassign) {
        return Ok(Some(ApiError::with(
            StatusCode::CONFLICT,
            "assignee is immutable",
            json!({ "id": card.id, "assignee": card.assignee }),
        )));
    }
    let to_done = u.status == Some(CardStatus::Done) && card.status != CardStatus::Done;
    // No source exempts a card from the gate: `source` is any client's say-so.
    if to_done && !has_drill_line(card, u.edits.drill.as_deref(), u.note.as_deref()) {
        return Ok(Some(ApiError::with(
            StatusCode::CONFLICT,
            drill_refusal(card.id),
            json!({ "id": card.id, "status": card.status }),
        )));
    }
    if to_done && let Some(g) = crate::domain::gates::open_gate_for_card(tx, card.id)? {
        return Ok(Some(crate::domain::gates::done_refusal(card.id, &g)));
    }
    Ok(None)
}

/// Applies an update to `card` and stores it, with its events: the move (carrying `blast`), then
/// `updated` naming what changed (not for a note that only explains a move).
fn edit(
    tx: &mut dyn WriteTx,
    out: &mut Outbox,
    card: &mut Card,
    u: Update,
    reassigning: Option<String>,
    now: i64,
) -> Result<(), StoreError> {
    let mut changes = apply_edits(card, u.edits);
    if let Some(a) = reassigning {
        let how = if u.reassign { "explicit" } else { "handoff" };
        let line = format!("reassigned {} → {} ({how})", card.assignee, a);
        push_log(card, now, &u.by, &line);
        card.assignee = a;
        changes.push("assignee");
    }
    if let Some(n) = &u.note {
        push_log(card, now, &u.by, n);
        changes.push("note");
    }
    // An unknown status is ignored, as in the original.
    let moved = match u.status.clone().filter(CardStatus::is_known) {
        Some(s) => move_card(card, s, &u.by, u.note.as_deref(), now),
        None => None,
    };
    card.updated = now;
    tx.put_card(card)?;
    if let Some(mut ev) = moved {
        if let Some(b) = &u.blast {
            ev.data.insert("blast".into(), b.clone());
        }
        out.event(tx, ev)?;
    }
    let only_note_on_move = changes == ["note"] && u.status.is_some();
    if !changes.is_empty() && !only_note_on_move {
        let status = card.status.to_string();
        let mut ev = card_event(card, "updated", &u.by, now, Some(&status), &status);
        ev.data.insert("changes".into(), json!(changes));
        if let Some(n) = &u.note {
            ev.data
                .insert("note".into(), json!(truncate(n, limits::LOG_TEXT)));
        }
        out.event(tx, ev)?;
    }
    Ok(())
}

/// Sets the fields an update edits on `card`; returns their names, in a fixed order.
fn apply_edits(card: &mut Card, e: Edits) -> Vec<&'static str> {
    let mut changes = Vec::new();
    set(&mut changes, "drill", &mut card.drill, e.drill);
    set(&mut changes, "title", &mut card.title, e.title);
    set(&mut changes, "summary", &mut card.summary, e.summary);
    set(
        &mut changes,
        "difficulty",
        &mut card.difficulty,
        e.difficulty,
    );
    set(&mut changes, "model", &mut card.model, e.model);
    set(&mut changes, "deps", &mut card.deps, e.deps);
    set(&mut changes, "checklist", &mut card.checklist, e.checklist);
    changes
}

/// Sets field `name` (`slot`) to `value` when one was sent, and names it in `changes`.
fn set<T>(changes: &mut Vec<&'static str>, name: &'static str, slot: &mut T, value: Option<T>) {
    if let Some(v) = value {
        *slot = v;
        changes.push(name);
    }
}

/// `POST /task/checklist-toggle {id, index, done}`.
pub async fn checklist_toggle<S: Store>(
    State(hub): State<AppState<S>>,
    JsonBody(req): JsonBody<ChecklistToggleRequest>,
) -> ApiResult<Json<TaskReply>> {
    if req.id <= 0 {
        return Err(ApiError::bad_request("id required"));
    }
    check_opt("by", &req.by, limits::SESSION)?;
    let by = trimmed(req.by).unwrap_or_default();
    let now = now_ms();
    let touch = touch_actor(&hub, &by, now);
    change_card(&hub, req.id, move |tx, out, card| {
        let Some(item) = usize::try_from(req.index)
            .ok()
            .and_then(|i| card.checklist.get_mut(i))
        else {
            return Ok(Err(ApiError::not_found("no such checklist item")));
        };
        item.done = req.done;
        // Who toggled what is kept: a log line on the card and a card event.
        let line = format!(
            "checklist item {} {}: {}",
            req.index + 1,
            if req.done { "checked" } else { "unchecked" },
            truncate(&item.text, 200)
        );
        persist_edge(tx, out, &by, touch, now)?;
        push_log(card, now, &by, &line);
        card.updated = now;
        tx.put_card(card)?;
        let status = card.status.to_string();
        let mut ev = card_event(card, "updated", &by, now, Some(&status), &status);
        ev.data.insert("changes".into(), json!(["checklist"]));
        ev.data.insert(
            "checklist".into(),
            json!({ "index": req.index, "done": req.done }),
        );
        out.event(tx, ev)?;
        Ok(Ok(()))
    })
    .await
}

/// `GET /tasks?project&fields=slim&card=1,2`: the board.
pub async fn tasks<S: Store>(
    State(hub): State<AppState<S>>,
    p: Params,
) -> ApiResult<Json<TasksReply<Value>>> {
    let project = p.text("project").map(str::to_string);
    let slim_view = p.text("fields") == Some("slim");
    let full_ids: Vec<i64> = match p.text("card") {
        None => Vec::new(),
        Some(list) => list
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| {
                parse_int(s.trim_start_matches('#')).ok_or_else(|| {
                    ApiError::bad_request("card must be a comma-separated list of ids")
                })
            })
            .collect::<ApiResult<_>>()?,
    };
    let cards = hub
        .store
        .read(move |tx| {
            tx.cards(&CardFilter {
                project,
                ..CardFilter::default()
            })
        })
        .await?;
    let tasks: Vec<Value> = cards
        .iter()
        .map(|c| {
            if slim_view && !full_ids.contains(&c.id) {
                slim(c)
            } else {
                serde_json::to_value(c).unwrap_or(Value::Null)
            }
        })
        .collect();
    if slim_view {
        Ok(Json(TasksReply {
            tasks,
            fields: Some("slim".into()),
        }))
    } else {
        Ok(Json(TasksReply {
            tasks,
            fields: None,
        }))
    }
}

/// `GET /card?id=N`: a card with its events and the messages citing it. A deleted card is
/// rebuilt from its last event; an unknown one is a 404 with the same shape.
pub async fn card<S: Store>(
    State(hub): State<AppState<S>>,
    p: Params,
) -> ApiResult<Json<CardReply<Value>>> {
    let id = p
        .int("id")?
        .ok_or_else(|| ApiError::bad_request("id required"))?;
    let (card, events, messages, cost) = hub
        .store
        .read(move |tx| {
            let card = tx.card(id)?;
            let cost = super::cost::card_cost(tx, id)?;
            let events = tx.events(&EventFilter {
                task_id: Some(id),
                card_events_only: true,
                limit: limits::EVENTS_MAX,
                ..EventFilter::default()
            })?;
            let messages = tx.messages_citing(id, limits::CARD_MESSAGES)?;
            Ok((card, events, messages, cost))
        })
        .await?;
    let events: Vec<_> = events
        .into_iter()
        .filter(|e| e.data.get("taskId").and_then(Value::as_i64) == Some(id))
        .collect();
    let task = match card {
        Some(c) => serde_json::to_value(c).unwrap_or(Value::Null),
        None => match events.last() {
            Some(last) => json!({
                "id": id,
                "title": last.data.get("title").cloned().unwrap_or(Value::Null),
                "project": last.project,
                "status": "deleted",
                "assignee": last.data.get("assignee").cloned().unwrap_or(Value::Null),
                "difficulty": last.data.get("difficulty").cloned().unwrap_or(Value::Null),
            }),
            None => {
                return Err(ApiError::raw(
                    StatusCode::NOT_FOUND,
                    json!({ "error": "no such card", "task": null, "events": [], "messages": [] }),
                ));
            }
        },
    };
    Ok(Json(CardReply {
        cost,
        task: Some(task),
        events,
        messages,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deps_are_bounded_as_sent() {
        assert_eq!(
            deps_list(vec![3, 3, -1, 7, 5], Some(5)).expect("kept"),
            vec![3, 7]
        );
        let many: Vec<i64> = (0..=limits::DEPS as i64).map(|i| i % 2).collect();
        assert!(
            deps_list(many, None).is_err(),
            "21 items sent, 1 id among them"
        );
        let full: Vec<i64> = (1..=limits::DEPS as i64).collect();
        assert_eq!(
            deps_list(full, None).expect("at the limit").len(),
            limits::DEPS
        );
    }

    #[test]
    fn the_assignee_freeze() {
        // (assignee, by, reassign) → refused
        let cases = [
            ("", "a:p", false, false),
            ("a:p", "a:p", false, false),
            ("a:p", "b:p", true, false),
            ("a:p", "b:p", false, true),
            ("a:p", "", false, true),
        ];
        for (assignee, by, reassign, want) in cases {
            assert_eq!(
                frozen(assignee, by, reassign),
                want,
                "{assignee} {by} {reassign}"
            );
        }
    }

    #[test]
    fn edits_name_what_they_set_in_order() {
        let mut card = Card::default();
        let e = Edits {
            checklist: Some(Vec::new()),
            title: Some("t".into()),
            deps: Some(vec![2]),
            ..Edits::default()
        };
        assert_eq!(apply_edits(&mut card, e), ["title", "deps", "checklist"]);
        assert_eq!((card.title.as_str(), card.deps.as_slice()), ("t", &[2][..]));
        assert!(apply_edits(&mut card, Edits::default()).is_empty());
    }
}

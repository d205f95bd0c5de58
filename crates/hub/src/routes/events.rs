//! The unified event log and lessons: `/events`, `/lessons`, `/lesson`.

use crate::domain::policy::project_of_session;
use crate::error::{ApiResult, check_len, check_opt, check_required, check_secrets};
use crate::extract::{JsonBody, Params};
use crate::state::{AppState, Outbox, event};
use axum::Json;
use axum::extract::State;
use serde_json::json;
use trantor_proto::limits;
use trantor_proto::{EventsReply, Lesson, LessonReply, LessonRequest, LessonsReply, now_ms};
use trantor_store::{EventFilter, Store};

/// `GET /events?project&type&by&taskId&since&limit`: filters combine with AND; the newest
/// `limit` matches are returned oldest first, with `latest` (the newest id in the log).
pub async fn events<S: Store>(
    State(hub): State<AppState<S>>,
    p: Params,
) -> ApiResult<Json<EventsReply>> {
    let since = p.int("since")?;
    let limit = p
        .count("limit")?
        .map(|l| usize::try_from(l).unwrap_or(usize::MAX))
        .unwrap_or(limits::EVENTS_DEFAULT)
        .min(limits::EVENTS_MAX);
    let filter = EventFilter {
        project: p.text("project").map(str::to_string),
        types: p.text("type").map(|t| {
            t.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect()
        }),
        by: p.text("by").map(str::to_string),
        task_id: p.int("taskId")?,
        card_events_only: false,
        of_cards: false,
        since,
        limit,
    };
    let (events, latest) = hub
        .store
        .read(move |tx| {
            let mut events = if filter.limit == 0 {
                Vec::new()
            } else {
                tx.events(&filter)?
            };
            // A narrated overseer warning carries its narration (`POST /overseer/narrate`).
            for e in events.iter_mut().filter(|e| e.kind == "overseer.warn") {
                let key = format!("{}{}", crate::routes::lanes::NARRATION_PREFIX, e.id);
                if let Some(text) = tx.kv(&key)? {
                    e.data.insert("narrated".into(), json!(true));
                    e.data.insert("narration".into(), text);
                }
            }
            Ok((events, tx.latest_event_id()?))
        })
        .await?;
    let cursor = events.last().map(|e| e.id).or(since).unwrap_or(0);
    Ok(Json(EventsReply {
        events,
        cursor,
        latest,
    }))
}

/// `GET /lessons?agent=A`: global lessons plus those scoped to `lower(A)`.
pub async fn lessons<S: Store>(
    State(hub): State<AppState<S>>,
    p: Params,
) -> ApiResult<Json<LessonsReply>> {
    let mut scopes = vec!["global".to_string()];
    if let Some(a) = p.text("agent") {
        let a = a.to_lowercase();
        if a != "global" {
            scopes.push(a);
        }
    }
    let lessons = hub.store.read(move |tx| tx.lessons(&scopes)).await?;
    Ok(Json(LessonsReply { lessons }))
}

/// `POST /lesson {text, scope, by, project}`: an exact duplicate of scope + text is a no-op.
pub async fn lesson<S: Store>(
    State(hub): State<AppState<S>>,
    JsonBody(req): JsonBody<LessonRequest>,
) -> ApiResult<Json<LessonReply>> {
    let text = check_required("text", &req.text, limits::LESSON_TEXT)?;
    let scope = req
        .scope
        .map(|s| s.trim().to_lowercase())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "global".into());
    check_len("scope", &scope, limits::LESSON_SCOPE)?;
    check_opt("by", &req.by, limits::SESSION)?;
    check_opt("project", &req.project, limits::PROJECT)?;
    check_secrets([text.as_str()])?;
    let by = req.by.map(|b| b.trim().to_string()).unwrap_or_default();
    let explicit = req
        .project
        .map(|p| p.trim().to_string())
        .filter(|p| !p.is_empty());
    let now = now_ms();
    let (reply, out) = hub
        .write(move |tx| {
            let mut out = Outbox::default();
            let existing = tx.lessons(std::slice::from_ref(&scope))?;
            if existing.iter().any(|l| l.text == text) {
                return Ok((
                    LessonReply {
                        ok: true,
                        dedup: Some(true),
                        ..LessonReply::default()
                    },
                    out,
                ));
            }
            let project = match explicit {
                Some(p) => p,
                None => project_of_session(tx, &by)?,
            };
            let lesson = tx.insert_lesson(Lesson {
                id: 0,
                scope: scope.clone(),
                text: text.clone(),
                by: by.clone(),
                ts: now,
                project: project.clone(),
            })?;
            out.event(
                tx,
                event(
                    now,
                    "lesson",
                    &project,
                    &by,
                    json!({ "text": text, "scope": scope, "lessonId": lesson.id }),
                ),
            )?;
            // Lessons are never deleted and ids never reused, so the newest id is the count
            // (counting rows would touch every table of the store).
            Ok((
                LessonReply {
                    ok: true,
                    dedup: None,
                    count: Some(lesson.id),
                    id: Some(lesson.id),
                },
                out,
            ))
        })
        .await?;
    hub.publish(out);
    Ok(Json(reply))
}

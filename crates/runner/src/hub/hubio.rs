//! The runner's reads of the hub, decoded tolerantly (as `serde_json::Value`) so the same code
//! works against our hub and the original JavaScript one, whose replies carry more or fewer
//! fields. Every read fails open: `None` means "unknown", never "no".

use crate::triage::classify::CardSnap;
use serde_json::Value;
use trantor_proto::{CardStatus, HubClient, Lesson, Message, PolicyLink};

/// Typed reads over a [`HubClient`] for one seat.
#[derive(Debug, Clone)]
pub struct HubReads {
    /// The client (10 s call timeout).
    pub hub: HubClient,
    /// The seat's session.
    pub session: String,
    /// The seat's project.
    pub project: String,
}

fn i64_of(v: &Value) -> Option<i64> {
    v.as_i64().or_else(|| v.as_f64().map(|f| f as i64))
}

/// A card value as a [`CardSnap`].
pub fn card_snap(task: &Value) -> CardSnap {
    let log = task
        .get("log")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|e| {
                    (
                        e.get("ts").and_then(i64_of).unwrap_or(0),
                        e.get("by")
                            .and_then(Value::as_str)
                            .unwrap_or("")
                            .to_string(),
                        e.get("text")
                            .and_then(Value::as_str)
                            .unwrap_or("")
                            .to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    CardSnap {
        status: CardStatus::from_wire(task.get("status").and_then(Value::as_str).unwrap_or("")),
        log,
    }
}

/// What `/card` said about a card.
#[derive(Debug, Clone, PartialEq)]
pub enum CardRead {
    /// The card, its title and its snapshot.
    Found {
        /// Title.
        title: String,
        /// The card's phase label ("" when none).
        phase: String,
        /// Status and log.
        snap: CardSnap,
    },
    /// The board has no such card.
    Missing,
    /// The read failed.
    Failed,
}

impl HubReads {
    /// `GET /card?project&id`.
    pub async fn card(&self, id: i64) -> CardRead {
        let q = [("project", self.project.clone()), ("id", id.to_string())];
        match self.hub.get::<Value>("/card", &q).await {
            Ok(v) => match v.get("task") {
                Some(t) if t.is_object() => CardRead::Found {
                    title: t
                        .get("title")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string(),
                    phase: t
                        .get("phase")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .trim()
                        .to_string(),
                    snap: card_snap(t),
                },
                _ => CardRead::Missing,
            },
            Err(e) if e.status() == Some(404) => CardRead::Missing,
            Err(e) => {
                tracing::debug!("card #{id} read failed: {e}");
                CardRead::Failed
            }
        }
    }

    /// The goal set for `phase` of this project (`GET /phase`), if any. A failed read is no
    /// goal: the prompt goes without it rather than wait.
    pub async fn phase_goal(&self, phase: &str) -> Option<String> {
        let q = [
            ("project", self.project.clone()),
            ("phase", phase.to_string()),
        ];
        let v = match self.hub.get::<Value>("/phase", &q).await {
            Ok(v) => v,
            Err(e) => {
                tracing::debug!("phase goal read failed: {e}");
                return None;
            }
        };
        v.get("phases")?
            .as_array()?
            .iter()
            .find(|p| p.get("phase").and_then(Value::as_str) == Some(phase))
            .and_then(|p| p.get("goal").and_then(Value::as_str))
            .filter(|g| !g.trim().is_empty())
            .map(str::to_string)
    }

    /// The seat's own newest open card (assignee = the seat, doing/testing/todo, not a
    /// message-card), or 0.
    pub async fn own_newest_open_card(&self) -> i64 {
        let q = [("project", self.project.clone())];
        let Ok(v) = self.hub.get::<Value>("/tasks", &q).await else {
            return 0;
        };
        v.get("tasks")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter(|t| t.get("assignee").and_then(Value::as_str) == Some(self.session.as_str()))
            .filter(|t| {
                matches!(
                    t.get("status")
                        .and_then(Value::as_str)
                        .map(CardStatus::from_wire),
                    Some(CardStatus::Doing | CardStatus::Testing | CardStatus::Todo)
                )
            })
            .filter(|t| {
                !crate::triage::session::is_message_card_title(
                    t.get("title").and_then(Value::as_str).unwrap_or(""),
                )
            })
            .max_by_key(|t| {
                t.get("updated")
                    .and_then(i64_of)
                    .or_else(|| t.get("ts").and_then(i64_of))
                    .unwrap_or(0)
            })
            .and_then(|t| t.get("id").and_then(i64_of))
            .unwrap_or(0)
    }

    /// The newest event id (`/events?limit=1` → `latest`); 0 when unknown.
    pub async fn events_latest(&self) -> i64 {
        match self
            .hub
            .get::<Value>("/events", &[("limit", "1".to_string())])
            .await
        {
            Ok(v) => v.get("latest").and_then(i64_of).unwrap_or(0),
            Err(_) => 0,
        }
    }

    /// The seat's bus events since `since`: `None` when the read failed.
    pub async fn events_by_me(&self, since: i64) -> Option<Vec<Value>> {
        let q = [
            ("by", self.session.clone()),
            ("since", since.to_string()),
            ("limit", "500".to_string()),
        ];
        let v = self.hub.get::<Value>("/events", &q).await.ok()?;
        Some(
            v.get("events")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default(),
        )
    }

    /// Asks this seat sent since `t0`: `(id, to, text, answered)`, newest last.
    pub async fn asks_since(&self, t0: i64) -> Vec<(i64, String, String, bool)> {
        let q = [
            ("session", self.session.clone()),
            ("project", self.project.clone()),
        ];
        let Ok(v) = self.hub.get::<Value>("/contracts", &q).await else {
            return vec![];
        };
        let mut out: Vec<(i64, String, String, bool)> = [
            "contracts",
            "abandonedContracts",
            "supersededContracts",
            "ackContracts",
        ]
        .iter()
        .filter_map(|k| v.get(*k).and_then(Value::as_array))
        .flatten()
        .filter(|c| c.get("kind").and_then(Value::as_str) == Some("ask"))
        .filter(|c| c.get("ts").and_then(i64_of).unwrap_or(0) >= t0)
        .map(|c| {
            (
                c.get("id").and_then(i64_of).unwrap_or(0),
                c.get("to")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string(),
                c.get("text")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string(),
                c.get("answered").and_then(Value::as_bool).unwrap_or(false),
            )
        })
        .collect();
        out.sort_by_key(|a| a.0);
        out
    }

    /// `/peer` `deliveredUpTo` of `session`.
    pub async fn delivered_up_to(&self, session: &str) -> Option<i64> {
        let v = self
            .hub
            .get::<Value>("/peer", &[("session", session.to_string())])
            .await
            .ok()?;
        v.get("deliveredUpTo").and_then(i64_of)
    }

    /// `/policy` `links` (an error reply is an empty list; a network failure is `None`).
    pub async fn links(&self) -> Option<Vec<PolicyLink>> {
        match self.hub.get::<Value>("/policy", &[]).await {
            Ok(v) => Some(
                v.get("links")
                    .and_then(Value::as_array)
                    .map(|a| {
                        a.iter()
                            .filter_map(|l| serde_json::from_value::<PolicyLink>(l.clone()).ok())
                            .collect()
                    })
                    .unwrap_or_default(),
            ),
            Err(e) if e.is_unreachable() => None,
            Err(_) => Some(vec![]),
        }
    }

    /// The lessons for `agent`.
    pub async fn lessons(&self, agent: &str) -> Vec<Lesson> {
        match self.hub.lessons(agent).await {
            Ok(r) => r.lessons,
            Err(e) => {
                tracing::debug!("lessons: {e}");
                vec![]
            }
        }
    }

    /// The hub's current message tip for this session, without replaying history: a read
    /// from far above the tip is clamped to it (`rewound`). A hub that does not clamp is asked
    /// for the whole backlog once, peeking.
    pub async fn tip(&self) -> Option<i64> {
        let q = [
            ("session", self.session.clone()),
            ("since", (i64::MAX / 2).to_string()),
            ("peek", "1".to_string()),
        ];
        if let Ok(v) = self.hub.get::<Value>("/inbox", &q).await
            && v.get("rewound").and_then(Value::as_bool) == Some(true)
            && let Some(c) = v.get("cursor").and_then(i64_of)
        {
            return Some(c);
        }
        let r = self.hub.inbox(&self.session, 0, true).await.ok()?;
        Some(
            r.messages
                .iter()
                .map(|m: &Message| m.id)
                .max()
                .unwrap_or(r.cursor)
                .max(r.cursor),
        )
    }
}

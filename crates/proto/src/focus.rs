//! Solo work on the board: `POST /focus`, `GET /focus`, `POST /todos` (docs/protocol.md §14.3).
//!
//! A session that is not a crew seat still shows its work: each substantive prompt re-titles
//! its one rolling focus card (source `session`, status doing), and its TodoWrite list is
//! mirrored as cards (source `todo`), reconciled by todo text.

use crate::Card;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The longest focus title or todo text accepted (the first 200 characters are kept).
pub const TEXT_MAX: usize = 4000;
/// The longest `cc` accepted, in a body and in `GET /focus`'s query (an agent CLI's session
/// id is a UUID; a longer query could pass the hub's request-target limit).
pub const CC_MAX: usize = 120;
/// The longest todo status accepted.
pub const STATUS_MAX: usize = 40;
/// The most todos one `POST /todos` may carry.
pub const TODOS_MAX: usize = 200;

/// `POST /focus` body: the session is `session`, or `by` (one of them non-blank).
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("anyOf" = crate::limits::one_of_non_blank("session", "by")))]
pub struct FocusRequest {
    /// The session (bus address); `by` stands in when absent.
    #[serde(default)]
    #[schemars(length(max = crate::limits::SESSION))]
    pub session: Option<String>,
    /// Project.
    #[serde(default)]
    #[schemars(extend("x-required" = true), length(min = 1, max = crate::limits::PROJECT), regex(pattern = r"[^\t\n\x0B\x0C\r \x85\xA0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000]"))]
    pub project: String,
    /// What the session works on now (at most 4000 characters; whitespace collapsed, the first
    /// 200 characters kept).
    #[serde(default)]
    #[schemars(extend("x-required" = true), length(min = 1, max = TEXT_MAX), regex(pattern = r"[^\t\n\x0B\x0C\r \x85\xA0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000]"))]
    pub title: String,
    /// The actor; the session when `session` is absent.
    #[serde(default)]
    #[schemars(length(max = crate::limits::SESSION))]
    pub by: Option<String>,
    /// The agent CLI's own session id (one rolling card per id; at most 120 characters).
    #[serde(default)]
    #[schemars(length(max = CC_MAX))]
    pub cc: Option<String>,
}

/// `POST /focus` reply and `GET /focus` reply (`ok` absent on GET).
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FocusReply {
    /// True on a write.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ok: Option<bool>,
    /// The focus card's id, or null when the session has none open.
    pub id: Option<i64>,
    /// The focus card, or null.
    pub task: Option<Card>,
}

/// One TodoWrite item.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TodoItem {
    /// The todo's text (its key; at most 4000 characters, the first 200 kept; a blank one is
    /// skipped).
    #[serde(default)]
    #[schemars(length(max = TEXT_MAX))]
    pub content: String,
    /// `pending`, `in_progress` or `completed` (anything else, at most 40 characters, is
    /// pending).
    #[serde(default)]
    #[schemars(length(max = STATUS_MAX))]
    pub status: String,
}

/// `POST /todos` body: the session is `session`, or `by` (one of them non-blank).
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("anyOf" = crate::limits::one_of_non_blank("session", "by")))]
pub struct TodosRequest {
    /// The session (bus address); `by` stands in when absent.
    #[serde(default)]
    #[schemars(length(max = crate::limits::SESSION))]
    pub session: Option<String>,
    /// Project.
    #[serde(default)]
    #[schemars(extend("x-required" = true), length(min = 1, max = crate::limits::PROJECT), regex(pattern = r"[^\t\n\x0B\x0C\r \x85\xA0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000]"))]
    pub project: String,
    /// The actor; the session when `session` is absent.
    #[serde(default)]
    #[schemars(length(max = crate::limits::SESSION))]
    pub by: Option<String>,
    /// The whole list, as TodoWrite last wrote it.
    #[serde(default)]
    #[schemars(length(max = TODOS_MAX))]
    pub todos: Vec<TodoItem>,
}

/// `POST /todos` reply.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TodosReply {
    /// Always true.
    pub ok: bool,
    /// How many todos the request carried.
    pub count: usize,
}

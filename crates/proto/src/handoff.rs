//! Handoff wire shapes: `POST /handoff`, `GET /handoffs` (docs/protocol.md §14.2).
//!
//! The handoff itself (summary, open threads, recent traffic) is a file in the writer's bus
//! directory, read by the next session on that machine; the hub keeps the log of who handed off
//! when, rate-limits storms and tells the project's feed (`handoff.written`).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Default least time between two unforced handoffs of one session (s).
pub const DEFAULT_COOLDOWN_SEC: i64 = 300;

/// `POST /handoff` body.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HandoffRequest {
    /// Project.
    #[serde(default)]
    #[schemars(extend("x-required" = true), length(min = 1, max = crate::limits::PROJECT), regex(pattern = r"[^\t\n\x0B\x0C\r \x85\xA0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000]"))]
    pub project: String,
    /// The session handing off.
    #[serde(default)]
    #[schemars(extend("x-required" = true), length(min = 1, max = crate::limits::SESSION), regex(pattern = r"[^\t\n\x0B\x0C\r \x85\xA0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000]"))]
    pub session: String,
    /// What caused it (`auto`, `manual`, `relay_handoff`, …; at most 20 characters kept).
    #[serde(default)]
    pub trigger: Option<String>,
    /// The handoff's id (at most 80 characters kept).
    #[serde(default)]
    pub id: Option<String>,
    /// Bypass the storm guard.
    #[serde(default)]
    pub force: Option<bool>,
    /// The storm guard's window (s, default 300).
    #[serde(default)]
    pub cooldown_sec: Option<f64>,
}

/// One row of the handoff log.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HandoffRow {
    /// Project.
    pub project: String,
    /// Session.
    pub session: String,
    /// When, ms.
    pub ts: i64,
    /// Trigger.
    pub trigger: String,
    /// Handoff id.
    pub id: String,
    /// Whether the storm guard was bypassed.
    pub forced: bool,
}

/// `POST /handoff` reply: `allow:false` when the storm guard refused it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HandoffReply {
    /// Always true.
    pub ok: bool,
    /// Whether the handoff was recorded.
    pub allow: bool,
    /// `storm-guard` when refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The last recorded handoff of the session (refused only), ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_ts: Option<i64>,
    /// Seconds since it (refused only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since_sec: Option<i64>,
    /// The window applied (refused only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cooldown_sec: Option<i64>,
}

/// `GET /handoffs` reply, newest first.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct HandoffsReply {
    /// The rows.
    pub handoffs: Vec<HandoffRow>,
}

//! Wire types of agent-proposed permissions: `POST /propose`, `GET /proposals`,
//! `POST /proposal/decide`, `POST /proposal/withdraw`, `GET /grants` (`docs/protocol.md` §15.6).
//!
//! The hub serves them and `trantor proposals` and the MCP tools read them, from this one
//! definition.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Longest scope, condition, exclusions and note.
pub const TEXT: usize = 300;
/// Longest capability key.
pub const KEY_MAX: usize = 60;

/// The icon the original shows beside a proposal's status (`trantor proposals`, the MCP tools).
pub fn status_icon(status: &str) -> &'static str {
    match status {
        "pending" => "⏳",
        "approved" => "✅",
        "denied" => "⛔",
        "withdrawn" => "↩️",
        "revoked" => "🚫",
        _ => "",
    }
}

/// A proposal.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Proposal {
    /// Id.
    pub id: i64,
    /// Proposing session.
    pub session: String,
    /// Project.
    pub project: String,
    /// What it would allow.
    pub scope: String,
    /// When.
    pub condition: String,
    /// What stays not covered.
    pub exclusions: String,
    /// Machine-readable capability key ("" when none).
    pub key: String,
    /// `pending`, `approved`, `denied`, `revoked` or `withdrawn`.
    pub status: String,
    /// Filed, ms.
    pub ts: i64,
    /// Decided, ms (0 while pending).
    pub decided_ts: i64,
    /// Who decided.
    pub decided_by: String,
    /// The decision's note.
    pub note: String,
}

impl Proposal {
    /// How a listing opens a proposal: `#7 ⏳ PENDING` (its id, the status's icon, the status).
    pub fn headline(&self) -> String {
        format!(
            "#{} {} {}",
            self.id,
            status_icon(&self.status),
            self.status.to_uppercase()
        )
    }
}

/// `POST /propose` body: the proposer is `session`, or `by` (one of them non-blank).
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[schemars(extend("anyOf" = crate::limits::one_of_non_blank("session", "by")))]
pub struct ProposeRequest {
    /// The proposing session (or `by`).
    #[serde(default)]
    #[schemars(length(max = crate::limits::SESSION))]
    pub session: Option<String>,
    /// Alias of `session`.
    #[serde(default)]
    #[schemars(length(max = crate::limits::SESSION))]
    pub by: Option<String>,
    /// Project (default: the session's).
    #[serde(default)]
    #[schemars(length(max = crate::limits::PROJECT))]
    pub project: Option<String>,
    /// What it would allow.
    #[serde(default)]
    #[schemars(extend("x-required" = true), length(min = 1, max = TEXT), regex(pattern = r"[^\t\n\x0B\x0C\r \x85\xA0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000]"))]
    pub scope: String,
    /// When.
    #[serde(default)]
    #[schemars(extend("x-required" = true), length(min = 1, max = TEXT), regex(pattern = r"[^\t\n\x0B\x0C\r \x85\xA0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000]"))]
    pub condition: String,
    /// What stays not covered.
    #[serde(default)]
    #[schemars(extend("x-required" = true), length(min = 1, max = TEXT), regex(pattern = r"[^\t\n\x0B\x0C\r \x85\xA0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000]"))]
    pub exclusions: String,
    /// Capability key, a slug `[a-z0-9._-]` ([`ProposeRequest::capability_key`]: white space
    /// around it and upper case are forgiven, blank is none).
    #[serde(default)]
    #[schemars(length(max = KEY_MAX), regex(pattern = r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)?\s*$"))]
    pub key: Option<String>,
}

impl ProposeRequest {
    /// The capability key as stored: trimmed and lower-cased (ASCII), `""` for none. Refused
    /// (the reason) past [`KEY_MAX`] characters as sent, or when it is not a slug
    /// `[a-z0-9][a-z0-9._-]*` in either case — the rule the document's pattern for `key` states.
    pub fn capability_key(&self) -> Result<String, String> {
        let raw = self.key.as_deref().unwrap_or("");
        if raw.chars().count() > KEY_MAX {
            return Err(format!("key too long (limit {KEY_MAX})"));
        }
        let key = raw.trim();
        let slug = key.is_empty()
            || (key.starts_with(|c: char| c.is_ascii_alphanumeric())
                && key
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c)));
        if !slug {
            return Err("key must be a slug: [a-z0-9._-]".into());
        }
        Ok(key.to_ascii_lowercase())
    }
}

/// `POST /proposal/decide` and `/proposal/withdraw` body.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct DecideRequest {
    /// Proposal id.
    #[serde(default)]
    #[schemars(extend("x-required" = true), range(min = 1))]
    pub id: i64,
    /// `approved`, `denied` or `revoked` (of an approved one).
    #[serde(default)]
    #[schemars(extend("x-required" = true, "enum" = ["approved", "denied", "revoked"]))]
    pub status: Option<String>,
    /// A note to the proposer.
    #[serde(default)]
    #[schemars(length(max = TEXT))]
    pub note: Option<String>,
    /// Who decides (the signer when signed).
    #[serde(default)]
    #[schemars(length(max = crate::limits::SESSION))]
    pub by: Option<String>,
}

/// `POST /proposal/withdraw` body.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct WithdrawRequest {
    /// Proposal id.
    #[serde(default)]
    #[schemars(extend("x-required" = true), range(min = 1))]
    pub id: i64,
    /// The proposing session (the signer when signed).
    #[serde(default)]
    #[schemars(length(max = crate::limits::SESSION))]
    pub session: Option<String>,
    /// Alias of `session`.
    #[serde(default)]
    #[schemars(length(max = crate::limits::SESSION))]
    pub by: Option<String>,
}

/// `POST /propose`, `/proposal/decide`, `/proposal/withdraw` reply.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ProposalReply {
    /// Always true.
    pub ok: bool,
    /// The proposal.
    pub proposal: Proposal,
    /// Set when an identical pending proposal answered.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dedup: bool,
}

/// `GET /proposals` reply.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProposalsReply {
    /// Matching proposals, oldest first (the newest 200).
    pub proposals: Vec<Proposal>,
    /// Pending proposals hub-wide.
    pub pending_count: i64,
}

/// An active grant.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Grant {
    /// Proposal id.
    pub id: i64,
    /// Session.
    pub session: String,
    /// Project.
    pub project: String,
    /// Scope.
    pub scope: String,
    /// Condition.
    pub condition: String,
    /// Exclusions.
    pub exclusions: String,
    /// Capability key.
    pub key: String,
    /// Who approved.
    pub decided_by: String,
    /// When, ms.
    pub decided_ts: i64,
    /// Note.
    pub note: String,
}

/// `GET /grants` reply.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct GrantsReply {
    /// Approved proposals (the newest 200).
    pub grants: Vec<Grant>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The key rule and the document's pattern for it agree (schemathesis, random seed: a key
    /// the pattern refused was accepted, as the hub lower-cased it first).
    #[test]
    fn a_key_is_a_slug_in_either_case_blank_is_none() {
        let key = |k: &str| {
            ProposeRequest {
                key: Some(k.into()),
                ..Default::default()
            }
            .capability_key()
        };
        assert_eq!(
            key(" Patrol.Reap-Orphans "),
            Ok("patrol.reap-orphans".into())
        );
        assert_eq!(key(""), Ok(String::new()));
        assert_eq!(key("\u{3000}"), Ok(String::new()));
        for bad in [
            "-x",
            "a b",
            "\u{212A}",
            "é",
            "a/b",
            &"k".repeat(KEY_MAX + 1),
        ] {
            assert!(key(bad).is_err(), "{bad:?}");
        }
        assert!(
            key(&format!(" {}", "k".repeat(KEY_MAX))).is_err(),
            "as sent"
        );
    }
}

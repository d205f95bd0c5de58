//! File claims and reads: `POST /claim`, `GET /claims`, `POST /read` (docs/protocol.md §15.4).
//!
//! A claim says "this session is editing this file (repo-relative) now"; the reply names every
//! other session holding a live claim on the same file.

use crate::limits;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Longest file path accepted.
pub const FILE_MAX: usize = 400;

/// `POST /claim` and `POST /read` body.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct ClaimRequest {
    /// The project.
    #[serde(default)]
    #[schemars(
        extend("x-required" = true),
        length(min = 1, max = limits::PROJECT),
        regex(pattern = limits::NON_BLANK_PATTERN)
    )]
    pub project: String,
    /// The file, relative to the project's root (absolute paths and `..` are refused).
    #[serde(default)]
    #[schemars(
        extend("x-required" = true),
        length(min = 1, max = FILE_MAX),
        regex(pattern = limits::PROJECT_PATH_PATTERN)
    )]
    pub file: String,
    /// The session editing (or reading) it.
    #[serde(default)]
    #[schemars(
        extend("x-required" = true),
        length(min = 1, max = limits::SESSION),
        regex(pattern = limits::NON_BLANK_PATTERN)
    )]
    pub session: String,
    /// `/read` only: the seat the reader looked at.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = limits::SESSION))]
    pub seat: Option<String>,
}

/// Another session's live claim on the same file.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Conflict {
    /// The other session.
    pub session: String,
    /// When it last claimed the file, ms.
    pub ts: i64,
    /// How long ago, seconds.
    pub ago_sec: i64,
}

/// `POST /claim` reply.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClaimReply {
    /// Always true.
    pub ok: bool,
    /// Other sessions editing the same file within the claim window.
    pub conflicts: Vec<Conflict>,
    /// The claim window, ms.
    pub ttl_ms: i64,
}

/// `POST /read` reply.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReadReply {
    /// Always true.
    pub ok: bool,
    /// The throttle window, ms.
    pub ttl_ms: i64,
}

/// A live claim.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Claim {
    /// Project.
    pub project: String,
    /// File (repo-relative).
    pub file: String,
    /// Claiming session.
    pub session: String,
    /// Last claimed, ms.
    pub ts: i64,
    /// How long ago, seconds.
    pub ago_sec: i64,
}

/// `GET /claims` reply.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ClaimsReply {
    /// Live claims, newest first.
    pub claims: Vec<Claim>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_names_are_the_originals() {
        let reply = ClaimReply {
            ok: true,
            conflicts: vec![Conflict {
                session: "b:p".into(),
                ts: 5,
                ago_sec: 1,
            }],
            ttl_ms: 60_000,
        };
        let v = serde_json::to_value(&reply).expect("encodes");
        assert_eq!(v["ttlMs"], 60_000);
        assert_eq!(v["conflicts"][0]["agoSec"], 1);
        let req: ClaimRequest =
            serde_json::from_str(r#"{"project":"p","file":"a.rs","session":"a:p"}"#)
                .expect("decodes");
        assert_eq!(req.seat, None);
        let sent = serde_json::to_value(&req).expect("encodes");
        assert!(sent.get("seat").is_none(), "{sent}");
    }
}

//! The org policy and project names: the policy document (links and autonomy), a project's
//! brief key, and the alias table that `POST /project/merge` writes ([`canon`]).

use serde_json::{Value, json};
use trantor_proto::{PolicyReply, session_project};
use trantor_store::{ReadTx, StoreError};

/// The kv key of the org policy (links and autonomy).
pub const POLICY_KEY: &str = "policy";

/// The kv key of a project's brief.
pub fn project_key(project: &str) -> String {
    format!("project:{project}")
}

/// The stored policy, with the default autonomy `*: 1`.
pub fn policy_from(v: Option<Value>) -> PolicyReply {
    let mut p: PolicyReply = v
        .and_then(|v| serde_json::from_value(v).ok())
        .unwrap_or_default();
    if !p.autonomy.contains_key("*") {
        p.autonomy.insert("*".into(), json!(1));
    }
    p
}

/// A session's project: `named` when given and not empty, else the session's suffix.
pub fn project_or_suffix(named: Option<&str>, session: &str) -> String {
    named
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| session_project(session))
        .to_string()
}

/// A session's project: the one its peer row names, else the session's suffix.
pub fn project_of_session(tx: &dyn ReadTx, session: &str) -> Result<String, StoreError> {
    let peer = tx.peer(session)?;
    Ok(project_or_suffix(
        peer.as_ref().map(|p| p.project.as_str()),
        session,
    ))
}

/// kv key of the alias table: `{alias: canonical}` (written by `POST /project/merge`).
pub const ALIASES_KEY: &str = "aliases";

/// The canonical name of `project`: aliases are followed (at most 8 hops, so a cycle written
/// by hand cannot hang a request).
pub fn canon(tx: &dyn ReadTx, project: &str) -> Result<String, StoreError> {
    let project = project.trim();
    if project.is_empty() {
        return Ok(String::new());
    }
    let Some(aliases) = tx.kv(ALIASES_KEY)? else {
        return Ok(project.to_string());
    };
    let mut name = project.to_string();
    for _ in 0..8 {
        match aliases.get(&name).and_then(Value::as_str) {
            Some(next) if next != name => name = next.to_string(),
            _ => break,
        }
    }
    Ok(name)
}

//! File claims as stored (docs/protocol.md §15.4): one kv document per project and file, its
//! sessions with the time each last claimed; [`live_claims`] reads the live ones.

use serde_json::{Map, Value};
use trantor_proto::claims::Claim;
use trantor_store::{ReadTx, StoreError};

/// The sessions of one claim (or read) document: session → ts.
pub fn sessions(doc: &Option<Value>) -> Map<String, Value> {
    doc.as_ref()
        .and_then(|d| d.get("sessions"))
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default()
}

/// Every live claim at `now` (all projects).
pub fn live_claims(tx: &dyn ReadTx, now: i64) -> Result<Vec<Claim>, StoreError> {
    live_claims_with_ttl(tx, now, i64::MAX)
}

/// Every claim younger than `ttl` at `now`.
pub fn live_claims_with_ttl(tx: &dyn ReadTx, now: i64, ttl: i64) -> Result<Vec<Claim>, StoreError> {
    let mut out = Vec::new();
    for (_, doc) in tx.kv_prefix("claim:")? {
        let project = doc.get("project").and_then(Value::as_str).unwrap_or("");
        let file = doc.get("file").and_then(Value::as_str).unwrap_or("");
        let expires = doc.get("ttlMs").and_then(Value::as_i64).unwrap_or(0);
        let ttl = ttl.min(expires.max(1));
        for (session, ts) in sessions(&Some(doc.clone())) {
            let ts = ts.as_i64().unwrap_or(0);
            if now - ts < ttl {
                out.push(Claim {
                    project: project.to_string(),
                    file: file.to_string(),
                    session,
                    ts,
                    ago_sec: (now - ts) / 1000,
                });
            }
        }
    }
    out.sort_by_key(|c| std::cmp::Reverse(c.ts));
    Ok(out)
}

//! Who is on duty (docs/protocol.md §11.1): the duty service's sender and the session in
//! force, read by the duty pass, the overseer and authorization alike.

use trantor_store::{ReadTx, StoreError};

/// The pseudo-sender of escalations.
pub const DUTY_SENDER: &str = "hub:duty";
/// kv key of the session appointed with `POST /overseer/duty`.
pub const APPOINTED_KEY: &str = "dutySession";

/// The duty session in force: the configured one, else the appointed one.
pub fn duty_session(
    cfg_session: Option<&str>,
    tx: &dyn ReadTx,
) -> Result<Option<String>, StoreError> {
    if let Some(s) = cfg_session {
        return Ok(Some(s.to_string()));
    }
    Ok(tx
        .kv(APPOINTED_KEY)?
        .and_then(|v| v.as_str().map(str::to_string))
        .filter(|s| !s.trim().is_empty()))
}

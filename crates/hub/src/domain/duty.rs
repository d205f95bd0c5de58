//! Who is on duty (docs/protocol.md §11.1): the duty service's sender and the session in
//! force, read by the duty pass, the overseer and authorization alike, and the alerts the hub
//! sends as that sender (escalations, overseer warnings, proposal verdicts).

use crate::state::Outbox;
use trantor_proto::Message;
use trantor_store::{NewMessage, ReadTx, StoreError, WriteTx};

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

/// Store an alert from [`DUTY_SENDER`] to `to` in `project` (with its delivery record when
/// `keep_record`) and queue it, with its `message` event, in `out`.
pub fn post_alert(
    tx: &mut dyn WriteTx,
    out: &mut Outbox,
    to: &str,
    project: &str,
    text: String,
    keep_record: bool,
    now: i64,
) -> Result<Message, StoreError> {
    let msg = tx.insert_message(
        NewMessage {
            ts: now,
            from: DUTY_SENDER.into(),
            to: to.into(),
            project: project.to_string(),
            text,
            re: None,
            kind: Some("alert".into()),
            wake: None,
        },
        &[],
    )?;
    if keep_record {
        crate::domain::delivery::record_stored(tx, &msg)?;
    }
    out.posted(tx, msg)
}

//! Named credentials' rules (docs/protocol.md §7.7): the stored list, the seats on each, the
//! notices on the bus, and the flip back to `ok` once a reset has passed ([`resume_due`]).

use crate::state::{AppState, Outbox, event};
use trantor_proto::credentials::{self as cred, CredentialInfo};
use trantor_proto::now_ms;
use trantor_store::{NewMessage, ReadTx, Store, StoreError, WriteTx};

/// The sender of the hub's credential notices on the bus.
pub const SENDER: &str = "hub:quota";

/// The kv document holding every credential.
pub const KEY: &str = "credentials";

/// Every named credential as stored.
pub fn stored(tx: &dyn ReadTx) -> Result<Vec<CredentialInfo>, StoreError> {
    Ok(tx
        .kv(KEY)?
        .and_then(|v| serde_json::from_value(v).ok())
        .unwrap_or_default())
}

/// Post a notice from [`SENDER`] to `all` in `project`, as context (it wakes no seat).
pub fn notice(
    tx: &mut dyn WriteTx,
    out: &mut Outbox,
    project: &str,
    text: String,
    now: i64,
) -> Result<(), StoreError> {
    let msg = tx.insert_message(
        NewMessage {
            ts: now,
            from: SENDER.into(),
            to: "all".into(),
            project: project.to_string(),
            text: text.clone(),
            re: None,
            kind: Some("status".into()),
            wake: Some(false),
        },
        &[],
    )?;
    out.event(
        tx,
        event(
            now,
            "message",
            project,
            SENDER,
            serde_json::json!({ "msgId": msg.id, "toSession": "all", "text": text }),
        ),
    )?;
    out.messages.push(msg);
    Ok(())
}

/// Add `session` to the credential's seats (sorted; at most [`cred::SEATS_MAX`]).
pub fn join_seat(c: &mut CredentialInfo, session: &str) -> bool {
    if c.seats.iter().any(|s| s == session) {
        return false;
    }
    if c.seats.len() >= cred::SEATS_MAX {
        c.seats.remove(0);
    }
    c.seats.push(session.to_string());
    c.seats.sort();
    true
}

/// Flip every credential whose reset has passed back to `ok` and say so on the bus, once per
/// credential (the flip and the notice are one write). Run at each mark's reset time and on
/// every reaper pass (after a hub restart).
pub async fn resume_due<S: Store>(hub: &AppState<S>) -> Result<usize, StoreError> {
    let now = now_ms();
    let due = hub
        .store
        .read(move |tx| {
            Ok(stored(tx)?
                .iter()
                .any(|c| c.state == "exhausted" && c.until.is_none_or(|u| u <= now)))
        })
        .await?;
    if !due {
        return Ok(0);
    }
    let (n, out) = hub
        .write(move |tx| {
            let mut all = stored(tx)?;
            let mut out = Outbox::default();
            let mut n = 0;
            for c in all.iter_mut() {
                if c.state != "exhausted" || c.until.is_some_and(|u| u > now) {
                    continue;
                }
                let at = c.until.unwrap_or(now);
                c.state = "ok".into();
                c.until = None;
                n += 1;
                let project = c
                    .proved_by
                    .as_deref()
                    .map(trantor_proto::session_project)
                    .unwrap_or("")
                    .to_string();
                notice(
                    tx,
                    &mut out,
                    &project,
                    format!(
                        "✅ credential {} has quota again (reset {}) — its {} seat(s) resume and run their held work",
                        c.name,
                        trantor_proto::date::fmt_utc_minutes(at),
                        c.seats.len()
                    ),
                    now,
                )?;
            }
            if n > 0 {
                tx.set_kv(KEY, &serde_json::to_value(&all).unwrap_or_default())?;
            }
            Ok((n, out))
        })
        .await?;
    hub.publish(out);
    Ok(n)
}

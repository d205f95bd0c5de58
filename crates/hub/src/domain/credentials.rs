//! Named credentials' rules (docs/protocol.md §7.7): the stored list, the seats on each, the
//! notices on the bus, and the flip back to `ok` once a reset has passed ([`resume_due`]).

use crate::state::{AppState, Outbox};
use trantor_proto::credentials::{self as cred, CredentialInfo, CredentialStateReply};
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
fn notice(
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
    out.posted(tx, msg)?;
    Ok(())
}

/// Add `session` to the credential's seats (sorted; at most [`cred::SEATS_MAX`]).
fn join_seat(c: &mut CredentialInfo, session: &str) -> bool {
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

/// A seat's report of its credential's state, checked (`POST /credentials/state`).
#[derive(Debug, Clone)]
pub struct StateReport {
    /// The credential's name.
    pub name: String,
    /// The reporting seat.
    pub session: String,
    /// One of [`cred::STATES`].
    pub state: String,
    /// The reset time of an exhaustion, ms.
    pub until: Option<i64>,
    /// What proved it, cut to [`cred::EVIDENCE_MAX`].
    pub evidence: Option<String>,
}

/// What a state report did.
#[derive(Debug)]
pub enum Reported {
    /// No credential has the name.
    Unknown,
    /// The reply, the notices to publish, and the reset time to flip it back at.
    Done(Box<CredentialStateReply>, Outbox, Option<i64>),
}

/// What a report changed on its credential.
#[derive(Debug, Default)]
struct Change {
    changed: bool,
    marked: bool,
    ignored: Option<String>,
    timer: Option<i64>,
}

/// Apply a state report at `now`: the seat joins the credential; a proved exhaustion marks it
/// `exhausted until T` once and a refusal marks it `auth` once, each with one notice on the bus;
/// a repeat, a reset in the past or one too far out is answered with why nothing was marked.
pub fn report(tx: &mut dyn WriteTx, r: &StateReport, now: i64) -> Result<Reported, StoreError> {
    let mut all = stored(tx)?;
    let Some(c) = all.iter_mut().find(|c| c.name == r.name) else {
        return Ok(Reported::Unknown);
    };
    let joined = join_seat(c, &r.session);
    let mut out = Outbox::default();
    let verdict = match r.state.as_str() {
        "exhausted" => exhausted(c, r, now),
        "auth" => refused(c, r),
        _ => Err(Change::default()),
    };
    let mut change = match verdict {
        Ok(m) => mark(tx, &mut out, c, r, m, now)?,
        Err(unmarked) => unmarked,
    };
    change.changed |= joined;
    let info = c.clone().effective(now);
    if change.changed {
        tx.set_kv(KEY, &serde_json::to_value(&all).unwrap_or_default())?;
    }
    let reply = CredentialStateReply {
        ok: true,
        marked: change.marked,
        ignored: change.ignored,
        credential: Some(info),
    };
    Ok(Reported::Done(Box::new(reply), out, change.timer))
}

/// `: <evidence>` for a notice, or nothing.
fn because(evidence: &Option<String>) -> String {
    evidence
        .as_deref()
        .filter(|e| !e.is_empty())
        .map(|e| format!(": {e}"))
        .unwrap_or_default()
}

/// A mark a report proves: the credential's new state, until when, and the notice saying so.
struct Mark {
    state: &'static str,
    until: Option<i64>,
    text: String,
}

/// Marks `c` as `m` says, proved by `r`'s seat, with one notice on the bus.
fn mark(
    tx: &mut dyn WriteTx,
    out: &mut Outbox,
    c: &mut CredentialInfo,
    r: &StateReport,
    m: Mark,
    now: i64,
) -> Result<Change, StoreError> {
    c.state = m.state.into();
    c.until = m.until;
    c.last_evidence = r.evidence.clone();
    c.proved_by = Some(r.session.clone());
    notice(
        tx,
        out,
        trantor_proto::session_project(&r.session),
        m.text,
        now,
    )?;
    Ok(Change {
        changed: true,
        marked: true,
        ignored: None,
        timer: m.until,
    })
}

/// An exhaustion report. One without a reset time proves nothing the hub can hold the seats
/// to: it is answered like a reset in the past (taken as a seat report, nothing marked). No
/// provider's reset is more than [`cred::UNTIL_MAX_MS`] out: a mis-read time must not park a
/// crew for good. `Err`: nothing to mark (a repeat may still push the end out).
fn exhausted(c: &mut CredentialInfo, r: &StateReport, now: i64) -> Result<Mark, Change> {
    let ignored = |why: String| Change {
        ignored: Some(why),
        ..Change::default()
    };
    let Some(u) = r.until else {
        return Err(ignored(
            "until: an exhausted report needs the reset time (ms); nothing marked".into(),
        ));
    };
    if u > now.saturating_add(cred::UNTIL_MAX_MS) {
        return Err(ignored(format!(
            "until {u} is more than {} days out: not a provider's reset, nothing marked",
            cred::UNTIL_MAX_MS / 86_400_000
        )));
    }
    if u <= now {
        return Err(ignored(format!(
            "until {u} is not in the future (now {now}): the reset has passed, nothing marked"
        )));
    }
    if let Some(held) = c.exhausted_until(now) {
        // The same exhaustion proved again: marked once; a later reset pushes the end out.
        let mut change = ignored(format!(
            "already exhausted until {held} (proved by {})",
            c.proved_by.as_deref().unwrap_or("another seat")
        ));
        if u > held {
            c.until = Some(u);
            change.changed = true;
            change.timer = Some(u);
        }
        return Err(change);
    }
    let session = &r.session;
    let others = c.seats.iter().filter(|s| *s != session).count();
    let text = format!(
        "⛔ credential {} EXHAUSTED until {} (proved by {session}{}) — every seat on it parks until then ({others} other seat(s))",
        c.name,
        trantor_proto::date::fmt_utc_minutes(u),
        because(&r.evidence)
    );
    Ok(Mark {
        state: "exhausted",
        until: Some(u),
        text,
    })
}

/// A refusal (`auth`) report: marked once, until an operator names the credential again.
fn refused(c: &CredentialInfo, r: &StateReport) -> Result<Mark, Change> {
    if c.state == "auth" {
        return Err(Change {
            ignored: Some(format!(
                "already refused (auth, proved by {})",
                c.proved_by.as_deref().unwrap_or("another seat")
            )),
            ..Change::default()
        });
    }
    let text = format!(
        "⛔ credential {} REFUSED (auth, proved by {}{}) — every seat on it parks until an operator names it again (trantor credentials add {} …)",
        c.name,
        r.session,
        because(&r.evidence),
        c.name
    );
    Ok(Mark {
        state: "auth",
        until: None,
        text,
    })
}

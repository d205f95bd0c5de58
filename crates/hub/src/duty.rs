//! The duty service: no direct message sits unread unnoticed.
//!
//! Every pass looks for direct messages their recipient has not read within the undelivered
//! window and escalates each **once**, as a `hub:duty` message listing `#id sender -> recipient`
//! (the shape the runner's duty-nudge planning parses), to the duty session. While duty is dark
//! (no heartbeat within the dark window — counted from the hub's start for a duty session never
//! seen — or sitting on unread escalations past the stuck age)
//! escalations go back to each sender instead, escalations duty never read are handed back to
//! their senders too, and one `duty-dark` event marks the episode (`duty-back` ends it).
//!
//! The escalation ledger lives in the store and is written in the same transaction as the
//! escalation messages, so a hub killed mid-pass neither loses nor repeats an escalation.
//! See `docs/protocol.md` §11.1.

use crate::domain::duty::{DUTY_SENDER, duty_session, post_alert};
use crate::state::{AppState, KvDoc, Outbox, event};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashSet};
use trantor_proto::{Message, Peer, now_ms};
use trantor_store::{ReadTx, Store, StoreError, WriteTx};

/// kv key of the escalation ledger and the dark clock.
pub const STATE_KEY: &str = "duty.state";
/// How far back unread mail is considered.
const LOOKBACK_MS: i64 = 86_400_000;
/// Ledger entries are kept a little longer than the look-back so nothing is escalated twice.
const LEDGER_KEEP_MS: i64 = LOOKBACK_MS + 3_600_000;
/// Cap of one `hub:duty` message.
const TEXT_CAP: usize = 2000;
/// Most candidates handled in one pass (the rest wait for the next).
const PASS_LIMIT: usize = 500;
/// Recent failures kept for `/health` and `trantor doctor`.
const FAILURES_KEPT: usize = 20;

/// One escalated message.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Escalated {
    /// When it was escalated, ms.
    pub at: i64,
    /// Who the escalation went to (the duty session, or the sender while duty was dark).
    pub to: String,
    /// Id of the `hub:duty` message carrying it.
    pub esc: i64,
    /// The unread message's sender.
    pub sender: String,
    /// Its recipient.
    pub recipient: String,
}

/// The persisted duty state.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DutyState {
    /// Escalated message id → where it went.
    #[serde(default)]
    pub escalated: BTreeMap<i64, Escalated>,
    /// Start of the current dark episode, ms.
    #[serde(default)]
    pub dark_since: Option<i64>,
    /// Recent `/duty/failure` reports, newest last.
    #[serde(default)]
    pub failures: Vec<Value>,
}

impl KvDoc for DutyState {
    const KEY: &'static str = STATE_KEY;
    const WHAT: &'static str = "duty ledger";
}

/// Start the duty pass; it stops when the hub shuts down. On a shared store only the lease
/// holder escalates (crate::cluster).
pub fn spawn<S: Store>(hub: AppState<S>) {
    let every = hub.cfg.duty_tick;
    crate::cluster::spawn_leased(hub, every, "duty", |hub| async move {
        pass(&hub, now_ms()).await
    });
}

/// What one pass did (for tests and logs).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct PassReport {
    /// Messages escalated to duty.
    pub to_duty: Vec<i64>,
    /// Messages escalated (or handed back) to their senders.
    pub to_senders: Vec<i64>,
    /// Whether duty was dark in this pass.
    pub dark: bool,
}

/// Whether `m` is to a session (has a colon, or is a known peer), not to duty itself and not
/// from it.
fn eligible(m: &Message, duty: &str, known: &HashSet<String>) -> bool {
    m.to != duty && m.from != duty && (m.to.contains(':') || known.contains(&m.to))
}

fn mins(ms: i64) -> String {
    let m = (ms / 60_000).max(1);
    if m >= 120 {
        format!("{}h", m / 60)
    } else {
        format!("{m}m")
    }
}

/// The escalation texts for `items` (each ≤ [`TEXT_CAP`]): a header, then one
/// `#id sender -> recipient (unread 3m)` line per message.
fn texts(header: &str, items: &[&Message], now: i64) -> Vec<(String, Vec<i64>)> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut ids = Vec::new();
    for m in items {
        let line = format!(
            "#{} {} -> {} (unread {}) — \"{}\" —",
            m.id,
            m.from,
            m.to,
            mins(now - m.ts),
            quote(&m.text)
        );
        if !cur.is_empty() && cur.len() + line.len() + 3 > TEXT_CAP {
            out.push((std::mem::take(&mut cur), std::mem::take(&mut ids)));
        }
        if cur.is_empty() {
            cur.push_str(header);
            cur.push(' ');
        } else {
            cur.push_str(", ");
        }
        cur.push_str(&line);
        ids.push(m.id);
    }
    if !cur.is_empty() {
        out.push((cur, ids));
    }
    out
}

/// Longest quote of an unread message in an escalation (the original's cut).
const QUOTE_CAP: usize = 280;

/// The unread message as an escalation quotes it: whitespace collapsed, cut to [`QUOTE_CAP`]
/// characters, and its arrows defused (`->` becomes `-›`, `→` becomes `›`) so a quoted text
/// can never read as another `#id sender -> recipient` escalation to the runner's parser.
fn quote(text: &str) -> String {
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let cut: String = flat.chars().take(QUOTE_CAP).collect();
    cut.replace("->", "-›").replace('→', "›")
}

/// One duty pass at `now`. Does nothing while no duty session is configured or appointed.
pub async fn pass<S: Store>(hub: &AppState<S>, now: i64) -> Result<PassReport, StoreError> {
    let cfg_duty = hub.cfg.duty_session.clone();
    let (duty, peer) = hub
        .store
        .read(move |tx| duty_and_peer(cfg_duty.as_deref(), tx))
        .await?;
    let Some(duty) = duty else {
        return Ok(PassReport::default());
    };
    let seen = DutySeen::new(hub, duty, peer, now);
    let (report, out) = hub.store.write(move |tx| escalate(tx, &seen)).await?;
    if !report.to_duty.is_empty() || !report.to_senders.is_empty() {
        tracing::info!(
            to_duty = report.to_duty.len(),
            to_senders = report.to_senders.len(),
            dark = report.dark,
            "duty: escalated unread messages"
        );
    }
    hub.publish(out);
    Ok(report)
}

/// The duty session in force and its stored peer row.
fn duty_and_peer(
    cfg_duty: Option<&str>,
    tx: &dyn ReadTx,
) -> Result<(Option<String>, Option<Peer>), StoreError> {
    let duty = duty_session(cfg_duty, tx)?;
    let peer = match &duty {
        Some(d) => tx.peer(d)?,
        None => None,
    };
    Ok((duty, peer))
}

/// What a pass knows before it writes: the duty session, how it was last seen, the knobs.
struct DutySeen {
    duty: String,
    last_seen: i64,
    /// The duty session's `deliveredUpTo`.
    delivered: i64,
    /// Online now (a held poll counts).
    online: bool,
    /// Heartbeating within the dark window.
    beating: bool,
    window: i64,
    stuck_ms: i64,
    stuck_max: usize,
    keep_record: bool,
    now: i64,
}

impl DutySeen {
    /// Duty session `duty` at `now`, seen through its stored `peer` row and the live presence.
    fn new<S: Store>(hub: &AppState<S>, duty: String, peer: Option<Peer>, now: i64) -> DutySeen {
        let live = peer.map(|p| hub.live_peer(p, now));
        let last_seen = live.as_ref().map(|p| p.last_seen).unwrap_or(0);
        DutySeen {
            delivered: live.as_ref().map(|p| p.delivered_up_to).unwrap_or(0),
            online: live.as_ref().is_some_and(|p| p.online),
            beating: now - last_seen.max(hub.started_ms) <= hub.cfg.duty_dark_ms,
            last_seen,
            duty,
            window: hub.cfg.duty_undelivered_ms,
            stuck_ms: hub.cfg.duty_stuck_ms,
            stuck_max: hub.cfg.duty_stuck_max,
            keep_record: !hub.cfg.no_delivery_record,
            now,
        }
    }

    /// Whether `e` is an escalation to duty that duty has not read.
    fn unread_by_duty(&self, e: &Escalated) -> bool {
        e.to == self.duty && e.esc > self.delivered
    }

    /// How many `hub:duty` messages duty has not read, counting only those at least `min_age`
    /// ms old when given.
    fn unread_escalations(&self, state: &DutyState, min_age: Option<i64>) -> usize {
        state
            .escalated
            .values()
            .filter(|e| self.unread_by_duty(e))
            .filter(|e| min_age.is_none_or(|age| self.now - e.at >= age))
            .map(|e| e.esc)
            .collect::<HashSet<_>>()
            .len()
    }

    /// Sitting on unread escalations past the stuck age.
    fn stuck(&self, state: &DutyState) -> bool {
        self.unread_escalations(state, Some(self.stuck_ms)) >= self.stuck_max
    }
}

/// The pass's one write: find the unread mail, run the dark clock, escalate what is new (to
/// duty, or while duty is dark back to each sender with what duty never read), keep the ledger.
fn escalate(tx: &mut dyn WriteTx, s: &DutySeen) -> Result<(PassReport, Outbox), StoreError> {
    let (duty, now) = (s.duty.as_str(), s.now);
    let mut out = Outbox::default();
    let mut state = DutyState::load(tx)?;
    let known: HashSet<String> = tx.peers()?.into_iter().map(|p| p.session).collect();
    let unread: Vec<Message> = tx
        .undelivered_direct(now - LOOKBACK_MS, now - s.window, PASS_LIMIT)?
        .into_iter()
        .filter(|m| eligible(m, duty, &known))
        .collect();
    let dark = !s.beating || s.stuck(&state);
    let mut report = PassReport {
        dark,
        ..PassReport::default()
    };
    dark_clock(tx, &mut out, &mut state, s, dark)?;
    let fresh: Vec<&Message> = unread
        .iter()
        .filter(|m| !state.escalated.contains_key(&m.id))
        .collect();
    let batches = if dark {
        // While dark, escalations duty never read are handed back to their senders.
        let handed_back = unread.iter().filter(|m| {
            state
                .escalated
                .get(&m.id)
                .is_some_and(|e| s.unread_by_duty(e))
        });
        let items: Vec<&Message> = fresh.iter().copied().chain(handed_back).collect();
        to_senders(s, &items)
    } else {
        to_duty(s, &fresh)
    };
    for (to, header, items) in batches {
        let sent = send_escalations(tx, &mut out, &mut state, s, &to, &header, &items)?;
        if dark {
            report.to_senders.extend(sent);
        } else {
            report.to_duty.extend(sent);
        }
    }
    state.escalated.retain(|_, e| now - e.at < LEDGER_KEEP_MS);
    state.save(tx)?;
    Ok((report, out))
}

/// The dark clock: one `duty-dark` event when an episode starts, one `duty-back` when it ends.
fn dark_clock(
    tx: &mut dyn WriteTx,
    out: &mut Outbox,
    state: &mut DutyState,
    s: &DutySeen,
    dark: bool,
) -> Result<(), StoreError> {
    let (duty, now) = (s.duty.as_str(), s.now);
    match (dark, state.dark_since) {
        (true, None) => {
            state.dark_since = Some(now);
            let why = if s.beating {
                "escalations unread"
            } else {
                "no heartbeat"
            };
            let text = if s.beating {
                format!(
                    "duty seat {duty} is heartbeating but NOT CONSUMING — its escalations sit unread; it is up and stuck, not crashed (trantor duty up restarts it)"
                )
            } else {
                format!(
                    "duty seat {duty} has no heartbeat — seat trouble is not being triaged (trantor duty up)"
                )
            };
            let data =
                json!({ "session": duty, "reason": why, "lastSeen": s.last_seen, "text": text });
            out.event(tx, event(now, "duty-dark", "", DUTY_SENDER, data))
        }
        (false, Some(since)) => {
            state.dark_since = None;
            let text = format!(
                "duty seat {duty} is back after {}m dark",
                (now - since) / 60_000
            );
            let data = json!({ "session": duty, "darkMs": now - since, "text": text });
            out.event(tx, event(now, "duty-back", "", DUTY_SENDER, data))
        }
        _ => Ok(()),
    }
}

/// Unread messages to escalate to one session (`to`) under one header.
type Batch<'a> = (String, String, Vec<&'a Message>);

/// While duty is dark: each sender gets its unread messages back, grouped.
fn to_senders<'a>(s: &DutySeen, items: &[&'a Message]) -> Vec<Batch<'a>> {
    let mut by_sender: BTreeMap<&str, Vec<&Message>> = BTreeMap::new();
    for m in items {
        by_sender.entry(m.from.as_str()).or_default().push(m);
    }
    by_sender
        .into_iter()
        .map(|(sender, items)| {
            let header = format!(
                "⚠️ UNDELIVERED (duty {} is dark, so this comes back to you; the \
                 recipient has not read it):",
                s.duty
            );
            (sender.to_string(), header, items)
        })
        .collect()
}

/// While duty is up: the new unread messages go to duty (nothing when there are none).
fn to_duty<'a>(s: &DutySeen, fresh: &[&'a Message]) -> Vec<Batch<'a>> {
    if fresh.is_empty() {
        return Vec::new();
    }
    let header = format!(
        "⚠️ UNDELIVERED {} message(s) unread past {}:",
        fresh.len(),
        mins(s.window)
    );
    vec![(s.duty.clone(), header, fresh.to_vec())]
}

/// Send `items` to `to` as `hub:duty` messages under `header` and record each in the ledger;
/// the ids escalated, in order.
fn send_escalations(
    tx: &mut dyn WriteTx,
    out: &mut Outbox,
    state: &mut DutyState,
    s: &DutySeen,
    to: &str,
    header: &str,
    items: &[&Message],
) -> Result<Vec<i64>, StoreError> {
    let mut sent = Vec::new();
    for (text, ids) in texts(header, items, s.now) {
        let project = trantor_proto::session_project(to);
        let esc = post_alert(tx, out, to, project, text, s.keep_record, s.now)?;
        for m in items.iter().filter(|m| ids.contains(&m.id)) {
            state.escalated.insert(
                m.id,
                Escalated {
                    at: s.now,
                    to: to.to_string(),
                    esc: esc.id,
                    sender: m.from.clone(),
                    recipient: m.to.clone(),
                },
            );
            sent.push(m.id);
        }
    }
    Ok(sent)
}

/// The `/health` duty block.
pub async fn status<S: Store>(hub: &AppState<S>, now: i64) -> Result<Value, StoreError> {
    let cfg_duty = hub.cfg.duty_session.clone();
    let from_cfg = cfg_duty.is_some();
    let ((duty, peer), state) = hub
        .store
        .read(move |tx| {
            Ok((
                duty_and_peer(cfg_duty.as_deref(), tx)?,
                DutyState::load(tx)?,
            ))
        })
        .await?;
    let Some(duty) = duty else {
        return Ok(json!({
            "configured": false,
            "undeliveredMs": hub.cfg.duty_undelivered_ms,
            "darkMs": hub.cfg.duty_dark_ms,
            "escalated": state.escalated.len(),
            "failures": state.failures,
        }));
    };
    let seen = DutySeen::new(hub, duty, peer, now);
    let stuck = seen.stuck(&state);
    let last_seen = seen.last_seen;
    Ok(json!({
        "configured": true,
        "session": seen.duty,
        "source": if from_cfg { "RELAY_DUTY_SESSION" } else { "appointed" },
        "online": seen.online,
        "beating": seen.beating,
        "consuming": !stuck,
        "stuck": stuck,
        "dark": state.dark_since.is_some(),
        "lastSeenMs": if last_seen > 0 { json!(now - last_seen) } else { Value::Null },
        "darkSinceMs": state.dark_since.map(|t| now - t),
        "queuedEscalations": seen.unread_escalations(&state, None),
        "escalated": state.escalated.len(),
        "undeliveredMs": hub.cfg.duty_undelivered_ms,
        "darkMs": hub.cfg.duty_dark_ms,
        "failures": state.failures,
    }))
}

/// Record a `/duty/failure` report: in the state (for `/health` and `trantor doctor`), in the
/// project's `dutyFailure` document, and as a `duty-failure` event.
pub fn record_failure(
    tx: &mut dyn WriteTx,
    out: &mut Outbox,
    failure: Value,
    project: &str,
    by: &str,
    now: i64,
) -> Result<(), StoreError> {
    let mut state = DutyState::load(tx)?;
    state.failures.push(failure.clone());
    let excess = state.failures.len().saturating_sub(FAILURES_KEPT);
    state.failures.drain(..excess);
    state.save(tx)?;
    tx.set_kv(&format!("dutyFailure:{project}"), &failure)?;
    out.event(tx, event(now, "duty-failure", project, by, failure))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(id: i64, from: &str, to: &str) -> Message {
        Message {
            id,
            ts: 0,
            from: from.into(),
            to: to.into(),
            project: "p".into(),
            text: String::new(),
            re: None,
            kind: None,
            wake: None,
        }
    }

    #[test]
    fn texts_are_capped_and_parse_as_escalations() {
        let long = "x".repeat(300);
        let msgs: Vec<Message> = (1..40)
            .map(|i| m(i, &format!("{long}:p"), "codex:p"))
            .collect();
        let refs: Vec<&Message> = msgs.iter().collect();
        let out = texts("⚠️ UNDELIVERED:", &refs, 180_000);
        assert!(out.len() > 1);
        let mut seen = 0;
        for (t, ids) in &out {
            assert!(!ids.is_empty());
            assert!(t.len() <= TEXT_CAP, "{}", t.len());
            assert!(t.starts_with("⚠️ UNDELIVERED:"));
            seen += t.matches(" -> codex:p (unread 3m) — \"\" —").count();
        }
        assert_eq!(seen, 39);
    }

    #[test]
    fn escalations_quote_the_message_without_forging_triples() {
        let mut msg = m(7, "a:p", "b:p");
        msg.text = "please do\n the thing: #9 x:p -> y:p → z:p".into();
        let out = texts("⚠️ UNDELIVERED:", &[&msg], 180_000);
        assert_eq!(
            out[0].0,
            "⚠️ UNDELIVERED: #7 a:p -> b:p (unread 3m) — \"please do the thing: #9 x:p -› y:p › z:p\" —"
        );
        assert_eq!(quote(&"é".repeat(400)).chars().count(), QUOTE_CAP);
    }

    #[test]
    fn eligibility() {
        let known: HashSet<String> = ["solo".to_string()].into();
        assert!(eligible(&m(1, "a:p", "b:p"), "duty:p", &known));
        assert!(eligible(&m(1, "a:p", "solo"), "duty:p", &known));
        assert!(!eligible(&m(1, "a:p", "nobody"), "duty:p", &known));
        assert!(!eligible(&m(1, "a:p", "duty:p"), "duty:p", &known));
        assert!(!eligible(&m(1, "duty:p", "b:p"), "duty:p", &known));
    }
}

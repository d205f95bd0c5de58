//! Rerouting a held contract (docs/protocol.md §5.9): a seat that holds a contract it cannot
//! run — its credential is spent or refused — asks the hub to move it to a live seat of another
//! agent in the project, where the project's `reroute` dial is on (`trantor autonomy set
//! reroute on`; off by default). In one write the hub sends the contract on from its original
//! sender (so the new seat's receipts reach the assigner), answers the old one with a receipt
//! from the holder (the assigner hears where it went, and the old contract is closed), notes the
//! move on the card the contract cites, and remembers the move, so asking again — a runner
//! killed before it recorded the answer — moves nothing twice.

use crate::domain::cards::{card_refs, push_log, truncate};
use crate::domain::credentials;
use crate::domain::policy::{POLICY_KEY, policy_from};
use crate::error::{ApiError, ApiResult, check_len, check_required};
use crate::extract::JsonBody;
use crate::openapi::{RouteDoc, Verb, shape};
use crate::state::{AppState, Outbox, event};
use axum::Json;
use axum::extract::State;
use axum::routing::{MethodRouter, post};
use serde_json::{Map, Value, json};
use trantor_proto::delivery::{NOTE_MAX, RerouteReply, RerouteRequest};
use trantor_proto::{Message, limits, now_ms};
use trantor_store::{NewMessage, ReadTx, Store, StoreError, WriteTx};

/// The kv document remembering each rerouted message: `{"<id>": {"to", "id"}}`.
pub const KEY: &str = "reroutes";
/// Moves remembered (the oldest are forgotten first).
const KEPT: usize = 10_000;

/// The routes of this module.
pub fn table<S: Store>() -> Vec<(RouteDoc, MethodRouter<AppState<S>>)> {
    vec![(
        RouteDoc {
            verb: Verb::Post,
            path: "/contracts/reroute",
            summary: "Move a contract its seat cannot run (spent credential) to a live seat of another agent, where the project's reroute dial is on",
            query: &[],
            body: Some(shape::<RerouteRequest>),
            reply: Some(shape::<RerouteReply>),
        },
        post(reroute::<S>),
    )]
}

/// A 409 with the reason.
fn conflict(reason: String) -> ApiError {
    ApiError::with(axum::http::StatusCode::CONFLICT, reason, Value::Null)
}

/// Whether the project's (else the default's) `reroute` dial is on.
pub fn reroute_on(dials: &Map<String, Value>, project: &str) -> bool {
    let dial = |p: &str| {
        dials
            .get(p)
            .and_then(|d| d.get("reroute"))
            .and_then(Value::as_bool)
    };
    dial(project).or_else(|| dial("*")).unwrap_or(false)
}

/// The sessions a contract could move to: online, not parked, of another agent than the
/// holder's, in the project; the most recently seen first.
fn candidates(peers: Vec<trantor_proto::Peer>, project: &str, holder: &str) -> Vec<String> {
    let agent_of = |p: &trantor_proto::Peer| p.agent.clone().filter(|a| !a.is_empty());
    let holder_agent = peers
        .iter()
        .find(|p| p.session == holder)
        .and_then(agent_of)
        .unwrap_or_else(|| holder.split(':').next().unwrap_or(holder).to_string());
    let suffix = format!(":{project}");
    let mut c: Vec<(i64, String)> = peers
        .iter()
        .filter(|p| p.session != holder && (p.project == project || p.session.ends_with(&suffix)))
        .filter(|p| p.online && p.phase.as_deref() != Some("parked"))
        .filter_map(|p| {
            let agent = agent_of(p)?;
            (agent != holder_agent).then(|| (p.last_seen, p.session.clone()))
        })
        .collect();
    c.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    c.into_iter().map(|(_, s)| s).collect()
}

fn remembered(tx: &dyn ReadTx) -> Result<Map<String, Value>, StoreError> {
    Ok(tx
        .kv(KEY)?
        .and_then(|v| v.as_object().cloned())
        .unwrap_or_default())
}

/// `POST /contracts/reroute`.
pub async fn reroute<S: Store>(
    State(hub): State<AppState<S>>,
    JsonBody(req): JsonBody<RerouteRequest>,
) -> ApiResult<Json<RerouteReply>> {
    let holder = check_required("session", &req.session, limits::SESSION)?;
    let reason = req.reason.unwrap_or_default();
    check_len("reason", &reason, NOTE_MAX)?;
    let reason = if reason.trim().is_empty() {
        "it cannot run it".to_string()
    } else {
        reason.trim().to_string()
    };
    let id = req.id;
    let now = now_ms();
    let peers = hub.store.read(|tx| tx.peers()).await?;
    let peers: Vec<_> = peers.into_iter().map(|p| hub.live_peer(p, now)).collect();
    let done = hub
        .write(move |tx| {
            let mut out = Outbox::default();
            let Some(msg) = tx.message(id)? else {
                return Ok(Err(ApiError::not_found(format!("no message #{id}"))));
            };
            if msg.to != holder {
                return Ok(Err(conflict(format!(
                    "message #{id} is addressed to {}, not {holder}",
                    msg.to
                ))));
            }
            let mut moves = remembered(tx)?;
            if let Some(m) = moves.get(&id.to_string()) {
                return Ok(Ok((
                    RerouteReply {
                        ok: true,
                        to: m["to"].as_str().unwrap_or_default().to_string(),
                        id: m["id"].as_i64().unwrap_or(0),
                        again: true,
                    },
                    out,
                )));
            }
            let policy = policy_from(tx.kv(POLICY_KEY)?);
            if !reroute_on(&policy.dials, &msg.project) {
                return Ok(Err(conflict(format!(
                    "reroute is off for project {} (trantor autonomy set reroute on)",
                    msg.project
                ))));
            }
            let held: std::collections::HashSet<String> = credentials::stored(tx)?
                .into_iter()
                .map(|c| c.effective(now))
                .filter(|c| c.state != "ok")
                .flat_map(|c| c.seats)
                .collect();
            let Some(to) = candidates(peers, &msg.project, &holder)
                .into_iter()
                .find(|s| !held.contains(s))
            else {
                return Ok(Err(conflict(format!(
                    "no live seat of another agent in project {} to take it",
                    msg.project
                ))));
            };
            let (moved, receipt) = send_on(tx, &mut out, &msg, &holder, &to, &reason, now)?;
            remember(&mut moves, id, &to, moved.id);
            tx.set_kv(KEY, &Value::Object(moves))?;
            let reply = RerouteReply {
                ok: true,
                to,
                id: moved.id,
                again: false,
            };
            out.messages.push(moved);
            out.messages.push(receipt);
            Ok(Ok((reply, out)))
        })
        .await?;
    let (reply, out) = done?;
    hub.publish(out);
    Ok(Json(reply))
}

/// Send contract `msg` on from `holder` to `to` (its assigner's text, marked rerouted, with a
/// delivery record), answer the assigner with a receipt saying where it went, and note the move
/// on every card the contract cites. The moved message and the receipt.
fn send_on(
    tx: &mut dyn WriteTx,
    out: &mut Outbox,
    msg: &Message,
    holder: &str,
    to: &str,
    reason: &str,
    now: i64,
) -> Result<(Message, Message), StoreError> {
    let id = msg.id;
    let text = format!("↪ rerouted from {holder} ({reason}): {}", msg.text);
    let text = truncate(&text, limits::MESSAGE_TEXT);
    let refs = card_refs(&msg.text);
    let moved = tx.insert_message(
        NewMessage {
            ts: now,
            from: msg.from.clone(),
            to: to.to_string(),
            project: msg.project.clone(),
            text: text.clone(),
            re: msg.re,
            kind: msg.kind.clone(),
            wake: msg.wake,
        },
        &refs,
    )?;
    crate::domain::delivery::record_stored(tx, &moved)?;
    let told = format!(
        "↪ your contract #{id} is rerouted from {holder} to {to} as #{} ({reason})",
        moved.id
    );
    let receipt = tx.insert_message(
        NewMessage {
            ts: now,
            from: holder.to_string(),
            to: msg.from.clone(),
            project: msg.project.clone(),
            text: told.clone(),
            re: Some(id),
            kind: Some("receipt".into()),
            wake: None,
        },
        &[],
    )?;
    crate::domain::delivery::record_stored(tx, &receipt)?;
    for (m, t) in [(&moved, &text), (&receipt, &told)] {
        let mut ev = event(
            now,
            "message",
            &msg.project,
            &m.from,
            json!({"msgId": m.id, "toSession": m.to, "text": truncate(t, 200)}),
        );
        if m.id == moved.id {
            ev.refs = refs.clone();
        }
        out.event(tx, ev)?;
    }
    for r in &refs {
        if let Some(mut card) = tx.card(*r)? {
            push_log(
                &mut card,
                now,
                holder,
                &format!(
                    "contract #{id} rerouted from {holder} to {to} as #{} ({reason})",
                    moved.id
                ),
            );
            tx.put_card(&card)?;
        }
    }
    Ok((moved, receipt))
}

/// Remember that contract `id` went to `to` as `moved` (a repeat then moves nothing), keeping
/// the newest [`KEPT`] moves.
fn remember(moves: &mut Map<String, Value>, id: i64, to: &str, moved: i64) {
    moves.insert(id.to_string(), json!({"to": to, "id": moved}));
    while moves.len() > KEPT {
        let Some(oldest) = moves
            .keys()
            .min_by_key(|k| k.parse::<i64>().unwrap_or(i64::MAX))
            .cloned()
        else {
            break;
        };
        moves.remove(&oldest);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use trantor_proto::Peer;

    fn peer(session: &str, agent: &str, online: bool, phase: Option<&str>, seen: i64) -> Peer {
        Peer {
            session: session.into(),
            project: "p".into(),
            agent: Some(agent.into()),
            online,
            phase: phase.map(str::to_string),
            last_seen: seen,
            ..Peer::default()
        }
    }

    #[test]
    fn a_contract_moves_to_a_live_seat_of_another_agent() {
        let peers = vec![
            peer("claude:p", "claude", true, Some("parked"), 9),
            peer("claude-2:p", "claude", true, None, 8),
            peer("codex:p", "codex", true, None, 5),
            peer("kimi:p", "kimi", true, None, 7),
            peer("opencode:p", "opencode", false, None, 9),
            peer("gemini:p", "gemini", true, Some("parked"), 9),
        ];
        assert_eq!(
            candidates(peers, "p", "claude:p"),
            ["kimi:p", "codex:p"],
            "online, not parked, not claude; the most recently seen first"
        );
    }

    #[test]
    fn the_dial_is_off_unless_set() {
        let d = |v: Value| v.as_object().cloned().unwrap_or_default();
        assert!(!reroute_on(&d(json!({})), "p"));
        assert!(reroute_on(&d(json!({"p": {"reroute": true}})), "p"));
        assert!(reroute_on(&d(json!({"*": {"reroute": true}})), "p"));
        assert!(!reroute_on(
            &d(json!({"*": {"reroute": true}, "p": {"reroute": false}})),
            "p"
        ));
    }
}

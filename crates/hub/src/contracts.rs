//! The dispatch ledger behind `GET /contracts` (docs/protocol.md §5.6), as a pure function of the
//! direct messages involving the dispatcher, the assignees' presence and the reaper's records.
//!
//! A *contract* is a direct message from S (within the window) to a real session; a reply
//! answers it by `re`, or, failing that, the oldest unused plain reply from the same peer that
//! came after it. Each contract then gets one disposition: answered, ack, abandoned, stalled or
//! waiting, and waiting/stalled rows that later traffic with the same peer overtook become
//! superseded.

use serde_json::{Value, json};
use std::collections::{HashMap, HashSet};
use trantor_proto::{BROADCAST, Contract, ContractsReply, Message};

/// What the ledger needs to know about an assignee.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Assignee {
    /// Last seen, ms.
    pub last_seen: i64,
    /// Online now (a held poll counts).
    pub online: bool,
    /// Status text.
    pub status: String,
}

/// A reaper record of an abandoned contract.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reaped {
    /// When it was recorded, ms.
    pub ts: i64,
    /// Why.
    pub reason: String,
}

/// The ledger's parameters.
#[derive(Debug, Clone)]
pub struct Params<'a> {
    /// The dispatcher S.
    pub session: &'a str,
    /// Only contracts whose message project is exactly this.
    pub project: Option<&'a str>,
    /// Now, ms.
    pub now: i64,
    /// `overdueMs`: a waiting contract this old counts as stalled.
    pub overdue_ms: Option<i64>,
    /// Abandon / supersede threshold, ms.
    pub abandon_ms: i64,
}

/// Whether a message is a contract of `session` (before the project filter).
pub fn is_contract(m: &Message, session: &str) -> bool {
    m.from == session
        && !m.to.is_empty()
        && m.to != BROADCAST
        && m.to != session
        && !m.from.starts_with("hub:")
        && !m.to.starts_with("hub:")
}

/// Whether nothing is owed on a contract (sent as context, a receipt or a status).
fn is_ack(m: &Message) -> bool {
    m.wake == Some(false) || matches!(m.kind.as_deref(), Some("receipt" | "status"))
}

fn is_ask(m: &Message) -> bool {
    m.kind.as_deref() == Some("ask")
}

/// Work out the ledger. `messages` are the direct messages sent by or to S within the window
/// (any order); `assignees` maps an assignee session to its presence (absent = never seen).
pub fn ledger(
    p: &Params<'_>,
    messages: &[Message],
    assignees: &HashMap<String, Assignee>,
    reaped: &HashMap<i64, Reaped>,
) -> ContractsReply {
    let mut contracts: Vec<&Message> = messages
        .iter()
        .filter(|m| is_contract(m, p.session))
        .filter(|m| p.project.is_none_or(|proj| m.project == proj))
        .collect();
    contracts.sort_by_key(|m| m.id);
    let mut replies: Vec<&Message> = messages
        .iter()
        .filter(|m| m.to == p.session && m.from != p.session)
        .collect();
    replies.sort_by_key(|m| m.id);

    let mut used: HashSet<i64> = HashSet::new();
    let mut rows: Vec<Contract> = Vec::with_capacity(contracts.len());
    for c in &contracts {
        let by_re = replies
            .iter()
            .find(|r| r.re == Some(c.id) && !is_ask(r))
            .copied();
        let answer = match by_re {
            Some(r) => Some(r),
            None if !is_ack(c) => replies
                .iter()
                .find(|r| {
                    !used.contains(&r.id)
                        && r.from == c.to
                        && r.re.is_none()
                        && !is_ask(r)
                        && r.id > c.id
                })
                .copied(),
            None => None,
        };
        if let Some(a) = answer {
            used.insert(a.id);
        }
        let who = assignees.get(&c.to);
        let age = (p.now - c.ts).max(0);
        let disposition = if answer.is_some() {
            "answered"
        } else if is_ack(c) {
            "ack"
        } else if who.is_none_or(|a| p.now - a.last_seen > p.abandon_ms) {
            "abandoned"
        } else if who.is_some_and(|a| !a.online) || p.overdue_ms.is_some_and(|o| age >= o) {
            "stalled"
        } else {
            "waiting"
        };
        rows.push(Contract {
            id: c.id,
            to: c.to.clone(),
            text: c.text.clone(),
            ts: c.ts,
            age_ms: age,
            answered: answer.is_some(),
            answer: answer.map(|a| json!({ "id": a.id, "ts": a.ts, "text": a.text })),
            disposition: disposition.to_string(),
            assignee_online: who.is_some_and(|a| a.online),
            assignee_status: who.map(|a| a.status.clone()).unwrap_or_default(),
            assignee_last_seen_ms: who.map(|a| a.last_seen),
            reaped: reaped
                .get(&c.id)
                .map(|r| json!({ "ts": r.ts, "reason": r.reason })),
            kind: c.kind.clone(),
            wake: c.wake,
        });
    }

    // Supersession: an open row to a peer, older than the abandon window, that was overtaken
    // by a newer answered contract to that peer or by a later direct reply from it.
    let mut newest_answered: HashMap<&str, i64> = HashMap::new();
    for r in rows.iter().filter(|r| r.answered) {
        let e = newest_answered.entry(r.to.as_str()).or_insert(0);
        *e = (*e).max(r.id);
    }
    let mut latest_reply: HashMap<&str, i64> = HashMap::new();
    for r in &replies {
        let e = latest_reply.entry(r.from.as_str()).or_insert(0);
        *e = (*e).max(r.id);
    }
    let mut superseded_ids = Vec::new();
    for r in &rows {
        let open = matches!(r.disposition.as_str(), "waiting" | "stalled");
        if !open || r.age_ms <= p.abandon_ms {
            continue;
        }
        let answered_after = newest_answered
            .get(r.to.as_str())
            .is_some_and(|&id| id > r.id);
        let replied_after = latest_reply.get(r.to.as_str()).is_some_and(|&id| id > r.id);
        if answered_after || replied_after {
            superseded_ids.push(r.id);
        }
    }
    for r in rows.iter_mut() {
        if superseded_ids.contains(&r.id) {
            r.disposition = "superseded".into();
        }
    }

    let mut reply = ContractsReply {
        session: p.session.to_string(),
        ..ContractsReply::default()
    };
    for r in rows {
        match r.disposition.as_str() {
            "answered" => reply.answered += 1,
            "ack" => reply.ack += 1,
            "abandoned" => reply.abandoned += 1,
            "stalled" => reply.stalled += 1,
            "waiting" => reply.waiting += 1,
            _ => reply.superseded += 1,
        }
        match r.disposition.as_str() {
            "abandoned" => reply.abandoned_contracts.push(r),
            "superseded" => reply.superseded_contracts.push(r),
            "ack" => reply.ack_contracts.push(r),
            _ => {
                if !r.answered {
                    reply.open += 1;
                }
                reply.contracts.push(r);
            }
        }
    }
    reply
}

/// The reaper record stored per abandoned contract, as kept in the `contractReap` kv document.
pub fn reap_record(c: &Contract, from: &str, now: i64, reason: &str) -> Value {
    json!({ "ts": now, "from": from, "to": c.to, "reason": reason, "dispatchedTs": c.ts })
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: &str = "orch:p";
    const H: i64 = 3_600_000;

    fn msg(id: i64, ts: i64, from: &str, to: &str) -> Message {
        Message {
            id,
            ts,
            from: from.into(),
            to: to.into(),
            project: "p".into(),
            text: format!("m{id}"),
            re: None,
            kind: None,
            wake: None,
        }
    }

    fn params(now: i64) -> Params<'static> {
        Params {
            session: S,
            project: None,
            now,
            overdue_ms: None,
            abandon_ms: H,
        }
    }

    fn online(last_seen: i64) -> Assignee {
        Assignee {
            last_seen,
            online: true,
            status: "idle".into(),
        }
    }

    fn disp(r: &ContractsReply, id: i64) -> String {
        r.contracts
            .iter()
            .chain(&r.abandoned_contracts)
            .chain(&r.superseded_contracts)
            .chain(&r.ack_contracts)
            .find(|c| c.id == id)
            .map(|c| c.disposition.clone())
            .unwrap_or_default()
    }

    #[test]
    fn what_counts_as_a_contract() {
        let now = 10_000;
        let msgs = vec![
            msg(1, 1, S, "all"),
            msg(2, 1, S, S),
            msg(3, 1, S, "hub:duty"),
            msg(4, 1, S, "a:p"),
            msg(5, 1, "a:p", "b:p"),
        ];
        let who = HashMap::from([("a:p".to_string(), online(now))]);
        let r = ledger(&params(now), &msgs, &who, &HashMap::new());
        assert_eq!(r.contracts.len(), 1);
        assert_eq!(r.contracts[0].id, 4);
        assert_eq!(r.waiting, 1);
        assert_eq!(r.open, 1);
    }

    #[test]
    fn answered_by_re_and_by_later_plain_reply() {
        let now = 100_000;
        let mut re_reply = msg(5, 50, "b:p", S);
        re_reply.re = Some(2);
        let mut ask = msg(6, 60, "a:p", S);
        ask.kind = Some("ask".into());
        ask.re = Some(1);
        let msgs = vec![
            msg(1, 10, S, "a:p"),
            msg(2, 20, S, "b:p"),
            msg(3, 30, S, "a:p"),
            msg(4, 40, "a:p", S), // plain reply: answers #1, the oldest open to a:p
            re_reply,
            ask, // an ask never answers
        ];
        let who = HashMap::from([
            ("a:p".to_string(), online(now)),
            ("b:p".to_string(), online(now)),
        ]);
        let r = ledger(&params(now), &msgs, &who, &HashMap::new());
        assert_eq!(disp(&r, 1), "answered");
        assert_eq!(disp(&r, 2), "answered");
        assert_eq!(disp(&r, 3), "waiting");
        let a1 = r
            .contracts
            .iter()
            .find(|c| c.id == 1)
            .and_then(|c| c.answer.clone());
        assert_eq!(a1.map(|a| a["id"].clone()), Some(json!(4)));
        assert_eq!((r.answered, r.waiting, r.open), (2, 1, 1));
    }

    #[test]
    fn acks_abandoned_stalled_overdue() {
        let now = 10 * H;
        let mut ctx = msg(1, now - 10, S, "a:p");
        ctx.wake = Some(false);
        let mut receipt = msg(2, now - 10, S, "a:p");
        receipt.kind = Some("receipt".into());
        let msgs = vec![
            ctx,
            receipt,
            msg(3, now - 10, S, "gone:p"), // never seen
            msg(4, now - 10, S, "old:p"),  // seen 2 h ago
            msg(5, now - 10, S, "off:p"),  // offline 10 min
            msg(6, now - 5_000, S, "a:p"), // overdue with overdueMs
        ];
        let who = HashMap::from([
            ("a:p".to_string(), online(now)),
            (
                "old:p".to_string(),
                Assignee {
                    last_seen: now - 2 * H,
                    online: false,
                    status: String::new(),
                },
            ),
            (
                "off:p".to_string(),
                Assignee {
                    last_seen: now - 600_000,
                    online: false,
                    status: "idle".into(),
                },
            ),
        ]);
        let mut p = params(now);
        p.overdue_ms = Some(1_000);
        let r = ledger(&p, &msgs, &who, &HashMap::new());
        assert_eq!(disp(&r, 1), "ack");
        assert_eq!(disp(&r, 2), "ack");
        assert_eq!(disp(&r, 3), "abandoned");
        assert_eq!(disp(&r, 4), "abandoned");
        assert_eq!(disp(&r, 5), "stalled");
        assert_eq!(disp(&r, 6), "stalled");
        assert_eq!(r.ack_contracts.len(), 2);
        assert_eq!(r.abandoned_contracts.len(), 2);
        let gone = r.abandoned_contracts.iter().find(|c| c.id == 3);
        assert_eq!(gone.and_then(|c| c.assignee_last_seen_ms), None);
        assert_eq!((r.stalled, r.open), (2, 2));
    }

    #[test]
    fn superseded_by_later_answer_or_reply() {
        let now = 10 * H;
        let mut ans = msg(3, now - H / 2, "a:p", S);
        ans.re = Some(2);
        let msgs = vec![
            msg(1, now - 2 * H, S, "a:p"), // old, overtaken by #2 being answered
            msg(2, now - H, S, "a:p"),
            ans,
            msg(4, now - 2 * H, S, "b:p"), // old and never overtaken: stays waiting
        ];
        let who = HashMap::from([
            ("a:p".to_string(), online(now)),
            ("b:p".to_string(), online(now)),
        ]);
        let r = ledger(&params(now), &msgs, &who, &HashMap::new());
        assert_eq!(disp(&r, 1), "superseded");
        assert_eq!(disp(&r, 2), "answered");
        assert_eq!(disp(&r, 4), "waiting");
        assert_eq!(r.superseded, 1);
    }

    #[test]
    fn superseded_by_a_later_reply_that_answered_something_else() {
        let now = 10 * H;
        let mut reply = msg(3, now - H / 2, "a:p", S);
        reply.re = Some(99); // answers something outside this ledger
        let msgs = vec![msg(1, now - 2 * H, S, "a:p"), reply];
        let who = HashMap::from([("a:p".to_string(), online(now))]);
        let r = ledger(&params(now), &msgs, &who, &HashMap::new());
        assert_eq!(disp(&r, 1), "superseded");
        // Younger than the abandon window: still waiting.
        let mut p = params(now);
        p.abandon_ms = 3 * H;
        let r = ledger(&p, &msgs, &who, &HashMap::new());
        assert_eq!(disp(&r, 1), "waiting");
    }

    #[test]
    fn project_filter_and_reaped_record() {
        let now = 1000;
        let mut other = msg(2, 1, S, "a:p");
        other.project = "q".into();
        let msgs = vec![msg(1, 1, S, "a:p"), other];
        let who = HashMap::from([("a:p".to_string(), online(now))]);
        let reaped = HashMap::from([(
            1,
            Reaped {
                ts: 5,
                reason: "x".into(),
            },
        )]);
        let mut p = params(now);
        p.project = Some("p");
        let r = ledger(&p, &msgs, &who, &reaped);
        assert_eq!(r.contracts.len(), 1);
        assert_eq!(r.contracts[0].reaped, Some(json!({"ts":5,"reason":"x"})));
    }
}

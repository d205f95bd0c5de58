//! The dispatch ledger behind `GET /contracts` (docs/protocol.md §5.6).
//!
//! The store keeps the ledger as messages commit (one row per contract, its answer, the
//! reaper's record, and per peer the newest traffic): a plain reply answers the oldest open
//! contract to its sender when it commits, a reply naming a contract by `re` answers that one.
//! What depends on the clock and on presence (abandoned, stalled, waiting, superseded) is
//! decided here at read time, per assignee for the counts and per row for the page, so a read
//! costs the open contracts, the assignees and the page, never the session's traffic.

use serde_json::json;
use std::collections::HashMap;
use trantor_proto::{Contract, ContractsReply};
use trantor_store::{ContractRow, LedgerCounts, LedgerQuery, OpenGroup};

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

/// The ledger's parameters.
#[derive(Debug, Clone)]
pub struct Params<'a> {
    /// The dispatcher S.
    pub session: &'a str,
    /// Now, ms.
    pub now: i64,
    /// `overdueMs`: a waiting contract this old counts as stalled.
    pub overdue_ms: Option<i64>,
    /// Abandon / supersede threshold, ms.
    pub abandon_ms: i64,
}

impl Params<'_> {
    /// The store query for a window of `window_ms` (and an optional project).
    pub fn query(&self, project: Option<&str>, window_ms: i64) -> LedgerQuery {
        LedgerQuery {
            sender: self.session.to_string(),
            project: project.map(str::to_string),
            since_ts: self.now - window_ms,
            overdue_cut: self.overdue_ms.map(|o| self.now - o),
            supersede_cut: self.now - self.abandon_ms,
        }
    }

    fn abandoned(&self, who: Option<&Assignee>) -> bool {
        abandoned(self.now, self.abandon_ms, who.map(|a| a.last_seen))
    }
}

/// Whether an assignee last seen at `last_seen` (`None`: never) is abandoned at `now`: the one
/// rule for the reply's dispositions, the split and the reaper.
pub fn abandoned(now: i64, abandon_ms: i64, last_seen: Option<i64>) -> bool {
    last_seen.is_none_or(|t| now - t > abandon_ms)
}

/// The disposition of one ledger row.
pub fn disposition(p: &Params<'_>, r: &ContractRow, who: Option<&Assignee>) -> &'static str {
    let age = (p.now - r.contract.ts).max(0);
    if r.answer.is_some() {
        "answered"
    } else if r.ack {
        "ack"
    } else if p.abandoned(who) {
        "abandoned"
    } else if r.overtaken && age > p.abandon_ms {
        "superseded"
    } else if who.is_some_and(|a| !a.online) || p.overdue_ms.is_some_and(|o| age >= o) {
        "stalled"
    } else {
        "waiting"
    }
}

/// One row as `/contracts` shows it.
pub fn contract(p: &Params<'_>, r: &ContractRow, who: Option<&Assignee>) -> Contract {
    let c = &r.contract;
    Contract {
        id: c.id,
        to: c.to.clone(),
        text: c.text.clone(),
        ts: c.ts,
        age_ms: (p.now - c.ts).max(0),
        answered: r.answer.is_some(),
        answer: r
            .answer
            .as_ref()
            .map(|(id, ts, text)| json!({ "id": id, "ts": ts, "text": text })),
        disposition: disposition(p, r, who).to_string(),
        assignee_online: who.is_some_and(|a| a.online),
        assignee_status: who.map(|a| a.status.clone()).unwrap_or_default(),
        assignee_last_seen_ms: who.map(|a| a.last_seen),
        reaped: r
            .reaped
            .as_ref()
            .map(|(ts, reason)| json!({ "ts": ts, "reason": reason })),
        kind: c.kind.clone(),
        wake: c.wake,
    }
}

/// Assemble the reply: exact counts from the per-assignee groups and the closed counts, the
/// rows of this page in their lists. `next_cursor` is set when more rows follow.
pub fn reply(
    p: &Params<'_>,
    groups: &[OpenGroup],
    closed: LedgerCounts,
    rows: &[ContractRow],
    assignees: &HashMap<String, Assignee>,
    next_cursor: Option<i64>,
) -> ContractsReply {
    let mut out = ContractsReply {
        session: p.session.to_string(),
        answered: closed.answered,
        ack: closed.ack,
        next_cursor,
        ..ContractsReply::default()
    };
    for g in groups {
        let who = assignees.get(&g.assignee);
        if p.abandoned(who) {
            out.abandoned += g.open;
            continue;
        }
        out.superseded += g.superseded;
        let rest = g.open - g.superseded;
        if who.is_some_and(|a| !a.online) {
            out.stalled += rest;
        } else {
            out.stalled += g.overdue;
            out.waiting += rest - g.overdue;
        }
    }
    out.open = out.waiting + out.stalled;
    out.total = out.open + out.abandoned + out.superseded + out.ack + out.answered;
    for r in rows {
        let c = contract(p, r, assignees.get(&r.contract.to));
        match c.disposition.as_str() {
            "abandoned" => out.abandoned_contracts.push(c),
            "superseded" => out.superseded_contracts.push(c),
            "ack" => out.ack_contracts.push(c),
            _ => out.contracts.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use trantor_proto::Message;

    const H: i64 = 3_600_000;

    fn params(now: i64) -> Params<'static> {
        Params {
            session: "orch:p",
            now,
            overdue_ms: None,
            abandon_ms: H,
        }
    }

    fn row(id: i64, ts: i64, to: &str) -> ContractRow {
        ContractRow {
            contract: Message {
                id,
                ts,
                from: "orch:p".into(),
                to: to.into(),
                project: "p".into(),
                text: format!("m{id}"),
                re: None,
                kind: None,
                wake: None,
            },
            ack: false,
            answer: None,
            overtaken: false,
            reaped: None,
        }
    }

    fn online(last_seen: i64) -> Assignee {
        Assignee {
            last_seen,
            online: true,
            status: "idle".into(),
        }
    }

    #[test]
    fn row_dispositions() {
        let now = 10 * H;
        let mut p = params(now);
        let a = online(now);
        let off = Assignee {
            last_seen: now - 600_000,
            online: false,
            status: String::new(),
        };
        let gone = Assignee {
            last_seen: now - 2 * H,
            online: false,
            status: String::new(),
        };
        let mut answered = row(1, now - 10, "a:p");
        answered.answer = Some((2, now - 5, "done".into()));
        answered.ack = true;
        assert_eq!(disposition(&p, &answered, Some(&a)), "answered");
        let mut ack = row(3, now - 10, "a:p");
        ack.ack = true;
        assert_eq!(disposition(&p, &ack, None), "ack");
        assert_eq!(disposition(&p, &row(4, now, "x:p"), None), "abandoned");
        assert_eq!(
            disposition(&p, &row(5, now, "x:p"), Some(&gone)),
            "abandoned"
        );
        assert_eq!(disposition(&p, &row(6, now, "x:p"), Some(&off)), "stalled");
        assert_eq!(
            disposition(&p, &row(7, now - 5_000, "a:p"), Some(&a)),
            "waiting"
        );
        let mut old = row(8, now - 2 * H, "a:p");
        old.overtaken = true;
        assert_eq!(disposition(&p, &old, Some(&a)), "superseded");
        let mut young = row(9, now - H / 2, "a:p");
        young.overtaken = true;
        assert_eq!(disposition(&p, &young, Some(&a)), "waiting");
        p.overdue_ms = Some(1_000);
        assert_eq!(
            disposition(&p, &row(10, now - 5_000, "a:p"), Some(&a)),
            "stalled"
        );
    }

    #[test]
    fn counts_follow_the_groups_and_rows_their_lists() {
        let now = 10 * H;
        let mut p = params(now);
        p.overdue_ms = Some(1_000);
        let groups = vec![
            OpenGroup {
                assignee: "a:p".into(),
                open: 5,
                superseded: 1,
                overdue: 2,
            },
            OpenGroup {
                assignee: "off:p".into(),
                open: 3,
                superseded: 1,
                overdue: 1,
            },
            OpenGroup {
                assignee: "gone:p".into(),
                open: 4,
                superseded: 2,
                overdue: 2,
            },
        ];
        let who = HashMap::from([
            ("a:p".to_string(), online(now)),
            (
                "off:p".to_string(),
                Assignee {
                    last_seen: now - 1_000,
                    online: false,
                    status: String::new(),
                },
            ),
        ]);
        let closed = LedgerCounts {
            answered: 7,
            ack: 2,
        };
        let rows = vec![row(1, now, "a:p"), row(2, now, "gone:p")];
        let r = reply(&p, &groups, closed, &rows, &who, Some(2));
        assert_eq!(r.abandoned, 4);
        assert_eq!(r.superseded, 2);
        assert_eq!(r.stalled, 2 + 2);
        assert_eq!(r.waiting, 2);
        assert_eq!(r.open, 6);
        assert_eq!((r.answered, r.ack), (7, 2));
        assert_eq!(r.total, 6 + 4 + 2 + 7 + 2);
        assert_eq!(r.contracts.len(), 1);
        assert_eq!(r.abandoned_contracts.len(), 1);
        assert_eq!(r.next_cursor, Some(2));
    }
}

//! Plain-text views of messages, peers, cards and boards.
//!
//! The MCP tools answer an LLM and the CLI answers a person; both read better as short, stable
//! lines than as JSON, so the same renderers serve both (the CLI's `--json` bypasses them).

use serde_json::Value;
use std::fmt::Write as _;
use trantor_proto::{Card, CardStatus, Contract, ContractsReply, Message, Peer};

/// Board columns in the order a person reads them: live work first, then the queue, then the
/// finished and the forgotten.
pub const BOARD_ORDER: [CardStatus; 7] = [
    CardStatus::Doing,
    CardStatus::Testing,
    CardStatus::Failed,
    CardStatus::Blocked,
    CardStatus::Todo,
    CardStatus::Done,
    CardStatus::Stale,
];

/// How many done cards a board view lists before summarising the rest.
pub const DONE_SHOWN: usize = 8;

/// `3s`, `4m`, `2h`, `5d`: the age of a timestamp relative to `now` (both ms).
pub fn age(ts: i64, now: i64) -> String {
    let s = ((now - ts).max(0)) / 1000;
    if s < 60 {
        format!("{s}s")
    } else if s < 3600 {
        format!("{}m", s / 60)
    } else if s < 86_400 {
        format!("{}h", s / 3600)
    } else {
        format!("{}d", s / 86_400)
    }
}

/// One message as a line: `#12 [a:p -> b:p] 4m ago (kind ask, re #9): text`.
pub fn message_line(m: &Message, now: i64) -> String {
    let mut tags = Vec::new();
    if let Some(k) = &m.kind {
        tags.push(format!("kind {k}"));
    }
    if let Some(re) = m.re {
        tags.push(format!("re #{re}"));
    }
    if m.is_no_wake() {
        tags.push("context only".to_string());
    }
    let tags = if tags.is_empty() {
        String::new()
    } else {
        format!(" ({})", tags.join(", "))
    };
    format!(
        "#{} [{} -> {}] {} ago{}: {}",
        m.id,
        m.from,
        m.to,
        age(m.ts, now),
        tags,
        m.text
    )
}

/// Messages, one per line, or a placeholder when there are none.
pub fn messages(ms: &[Message], now: i64, empty: &str) -> String {
    if ms.is_empty() {
        return empty.to_string();
    }
    ms.iter()
        .map(|m| message_line(m, now))
        .collect::<Vec<_>>()
        .join("\n")
}

/// One peer as a line: `🟢 claude:web (you) — working · card 3 [working 2m] claude/sonnet`.
pub fn peer_line(p: &Peer, me: &str, now: i64) -> String {
    let dot = if !p.online {
        "⚪"
    } else if p.health == "down" {
        "🔴"
    } else if p.health == "errored" {
        "🟠"
    } else {
        "🟢"
    };
    let mut s = format!("{dot} {}", p.session);
    if p.session == me {
        s.push_str(" (you)");
    }
    if !p.status.is_empty() {
        let _ = write!(s, " — {}", p.status);
    }
    if let Some(ph) = p.phase.as_deref().filter(|ph| !ph.is_empty()) {
        let since = p.phase_since.filter(|t| *t > 0).map(|t| age(t, now));
        match since {
            Some(a) => {
                let _ = write!(s, " [{ph} {a}]");
            }
            None => {
                let _ = write!(s, " [{ph}]");
            }
        }
    }
    let brand: Vec<&str> = [p.llm.as_deref(), p.model.as_deref()]
        .into_iter()
        .flatten()
        .filter(|x| !x.is_empty())
        .collect();
    if !brand.is_empty() {
        let _ = write!(s, " {}", brand.join("/"));
    }
    if !p.online {
        let _ = write!(s, " (last seen {} ago)", age(p.last_seen, now));
    }
    s
}

/// The number of log notes on a card: its `log`, or the slim view's `logCount`.
pub fn log_count(c: &Card) -> usize {
    if !c.log.is_empty() {
        return c.log.len();
    }
    c.extra.get("logCount").and_then(Value::as_u64).unwrap_or(0) as usize
}

/// Ticked and total checklist items: from the checklist, or the slim view's
/// `checklistDone`/`checklistCount`; `None` when the card has no checklist.
pub fn checklist_progress(c: &Card) -> Option<(usize, usize)> {
    if !c.checklist.is_empty() {
        let done = c.checklist.iter().filter(|i| i.done).count();
        return Some((done, c.checklist.len()));
    }
    let n = |k: &str| c.extra.get(k).and_then(Value::as_u64).unwrap_or(0) as usize;
    let total = n("checklistCount");
    (total > 0).then(|| (n("checklistDone").min(total), total))
}

/// Whether the card carries a drill line (field, checklist item or `Drill:` note).
pub fn has_drill(c: &Card) -> bool {
    let is_drill = |t: &str| t.trim_start().to_ascii_lowercase().starts_with("drill:");
    !c.drill.trim().is_empty()
        || c.checklist.iter().any(|i| is_drill(&i.text))
        || c.log.iter().any(|l| is_drill(&l.text))
}

/// One card as a board line: `#3 title (@claude:web) ·2 ☑1/3 ·drill [hard]`.
pub fn card_line(c: &Card) -> String {
    let mut s = format!("#{} {}", c.id, c.title);
    if !c.assignee.is_empty() {
        let _ = write!(s, " (@{})", c.assignee);
    }
    let n = log_count(c);
    if n > 0 {
        let _ = write!(s, " ·{n}");
    }
    if let Some((done, total)) = checklist_progress(c) {
        let _ = write!(s, " ☑{done}/{total}");
    }
    if has_drill(c) {
        s.push_str(" ·drill");
    }
    if !c.difficulty.is_empty() {
        let _ = write!(s, " [{}]", c.difficulty);
    }
    if !c.deps.is_empty() {
        let deps: Vec<String> = c.deps.iter().map(|d| format!("#{d}")).collect();
        let _ = write!(s, " deps {}", deps.join(","));
    }
    s
}

/// A whole board grouped by status, most recent first inside each group.
pub fn board(project: &str, cards: &[Card]) -> String {
    if cards.is_empty() {
        return format!("{project} board is empty (add a card with relay_task_add)");
    }
    let mut out = format!("{project} board ({} cards)", cards.len());
    let mut seen = 0;
    for status in BOARD_ORDER {
        let mut group: Vec<&Card> = cards.iter().filter(|c| c.status == status).collect();
        if group.is_empty() {
            continue;
        }
        seen += group.len();
        group.sort_by_key(|c| std::cmp::Reverse((c.updated.max(c.ts), c.id)));
        let _ = write!(out, "\n{}:", status.as_str().to_uppercase());
        let shown = if matches!(status, CardStatus::Done | CardStatus::Stale) {
            DONE_SHOWN
        } else {
            usize::MAX
        };
        for c in group.iter().take(shown) {
            let _ = write!(out, "\n  {}", card_line(c));
        }
        if group.len() > shown {
            let _ = write!(out, "\n  … {} more {status}", group.len() - shown);
        }
    }
    if seen < cards.len() {
        let _ = write!(out, "\nOTHER:");
        for c in cards.iter().filter(|c| !BOARD_ORDER.contains(&c.status)) {
            let _ = write!(out, "\n  {} [{}]", card_line(c), c.status);
        }
    }
    out
}

/// One card in full: fields, checklist, drill, notes and status history.
pub fn card_detail(c: &Card, now: i64) -> String {
    let mut s = format!("card #{} [{}] {}", c.id, c.status, c.title);
    let _ = write!(s, "\nproject: {}", c.project);
    if !c.assignee.is_empty() {
        let _ = write!(s, "\nassignee: {}", c.assignee);
    }
    if !c.by.is_empty() {
        let _ = write!(s, "\nassigned by: {}", c.by);
    }
    if let Some(w) = c.worked_by.as_deref().filter(|w| !w.is_empty()) {
        let _ = write!(s, "\nworked by: {w}");
    }
    if let Some(w) = c.closed_by.as_deref().filter(|w| !w.is_empty()) {
        let _ = write!(s, "\nclosed by: {w}");
    }
    for (label, v) in [
        ("difficulty", &c.difficulty),
        ("model", &c.model),
        ("phase", &c.phase),
        ("summary", &c.summary),
    ] {
        if !v.is_empty() {
            let _ = write!(s, "\n{label}: {v}");
        }
    }
    if !c.deps.is_empty() {
        let deps: Vec<String> = c.deps.iter().map(|d| format!("#{d}")).collect();
        let _ = write!(s, "\ndepends on: {}", deps.join(", "));
    }
    if c.ts > 0 {
        let _ = write!(
            s,
            "\ncreated {} ago, updated {} ago",
            age(c.ts, now),
            age(c.updated.max(c.ts), now)
        );
    }
    if c.drill.trim().is_empty() {
        s.push_str("\ndrill: (none — the hub refuses a move to done without one)");
    } else {
        let _ = write!(s, "\ndrill: {}", c.drill);
    }
    if !c.checklist.is_empty() {
        let done = c.checklist.iter().filter(|i| i.done).count();
        let _ = write!(s, "\nchecklist ({done}/{} done):", c.checklist.len());
        for (i, item) in c.checklist.iter().enumerate() {
            let mark = if item.done { "x" } else { " " };
            let _ = write!(s, "\n  {i}. [{mark}] {}", item.text);
        }
    }
    if !c.log.is_empty() {
        let _ = write!(s, "\nnotes ({}):", c.log.len());
        for l in &c.log {
            let _ = write!(s, "\n  {} ago {}: {}", age(l.ts, now), l.by, l.text);
        }
    } else if log_count(c) > 0 {
        let _ = write!(s, "\nnotes: {}", log_count(c));
    }
    if !c.history.is_empty() {
        s.push_str("\nhistory:");
        for h in &c.history {
            let from = h.from.as_deref().unwrap_or("new");
            let _ = write!(
                s,
                "\n  {} ago {from} -> {} by {}",
                age(h.ts, now),
                h.to,
                h.by
            );
            if let Some(n) = h.note.as_deref().filter(|n| !n.is_empty()) {
                let _ = write!(s, " — {n}");
            }
        }
    }
    s
}

fn contract_line(c: &Contract) -> String {
    let mut s = format!(
        "#{} -> {} [{}] {} ago",
        c.id,
        c.to,
        c.disposition.to_uppercase(),
        age(c.ts, c.ts + c.age_ms)
    );
    if c.assignee_online {
        s.push_str(" · assignee online");
    } else {
        s.push_str(" · assignee offline");
    }
    if !c.assignee_status.is_empty() {
        let _ = write!(s, " ({})", c.assignee_status);
    }
    let text: String = c.text.chars().take(160).collect();
    let _ = write!(s, ": {text}");
    if let Some(ans) = c
        .answer
        .as_ref()
        .and_then(|a| a.get("text"))
        .and_then(Value::as_str)
    {
        let ans: String = ans.chars().take(160).collect();
        let _ = write!(s, "\n    answer: {ans}");
    }
    s
}

/// The dispatch ledger: what this session sent and is still owed.
pub fn contracts(r: &ContractsReply) -> String {
    // Status-only messages (acks) owe no answer and are not listed, so they are not counted
    // among the contracts either; the line says how many there were.
    let total = r.contracts.len() + r.abandoned_contracts.len() + r.superseded_contracts.len();
    let open = r
        .contracts
        .iter()
        .filter(|c| !c.answered)
        .count()
        .max(r.open.max(0) as usize);
    let mut s = format!(
        "{open} outstanding of {total} contract(s) from {} ({} waiting, {} stalled, {} abandoned, {} superseded, {} answered)",
        r.session,
        r.waiting,
        r.stalled,
        r.abandoned_contracts.len(),
        r.superseded_contracts.len(),
        r.contracts.iter().filter(|c| c.answered).count()
    );
    if !r.ack_contracts.is_empty() {
        let _ = write!(
            s,
            "; {} status-only message(s) owe no answer",
            r.ack_contracts.len()
        );
    }
    for (title, rows) in [
        ("contracts", &r.contracts),
        ("abandoned — reassign the work", &r.abandoned_contracts),
        ("superseded — no action needed", &r.superseded_contracts),
    ] {
        if rows.is_empty() {
            continue;
        }
        let _ = write!(s, "\n{title}:");
        for c in rows.iter() {
            let _ = write!(s, "\n  {}", contract_line(c));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use trantor_proto::{ChecklistItem, LogEntry};

    fn card(id: i64, status: &str) -> Card {
        Card {
            id,
            status: status.into(),
            title: format!("card {id}"),
            assignee: "claude:p".into(),
            ..Default::default()
        }
    }

    #[test]
    fn board_groups_in_reading_order() {
        let cards = vec![card(1, "todo"), card(2, "doing"), card(3, "done")];
        let b = board("p", &cards);
        let doing = b.find("DOING:").expect("doing");
        let todo = b.find("TODO:").expect("todo");
        let done = b.find("DONE:").expect("done");
        assert!(doing < todo && todo < done, "{b}");
        assert!(b.contains("#2 card 2 (@claude:p)"));
    }

    #[test]
    fn board_caps_done() {
        let cards: Vec<Card> = (1..=20).map(|i| card(i, "done")).collect();
        let b = board("p", &cards);
        assert!(b.contains("… 12 more done"), "{b}");
    }

    #[test]
    fn card_line_shows_progress_and_drill() {
        let mut c = card(4, "doing");
        c.checklist = vec![
            ChecklistItem {
                text: "a".into(),
                done: true,
            },
            ChecklistItem {
                text: "b".into(),
                done: false,
            },
        ];
        c.log = vec![LogEntry {
            ts: 0,
            by: "x".into(),
            text: "Drill: run it".into(),
        }];
        let l = card_line(&c);
        assert!(
            l.contains("☑1/2") && l.contains("·drill") && l.contains("·1"),
            "{l}"
        );
    }

    #[test]
    fn ages() {
        assert_eq!(age(0, 5_000), "5s");
        assert_eq!(age(0, 120_000), "2m");
        assert_eq!(age(0, 7_200_000), "2h");
        assert_eq!(age(10, 0), "0s");
    }
}

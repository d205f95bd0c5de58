//! Session per card (docs/runner.md §19): which card a wake is about, and whether the turn
//! resumes the CLI's session or starts a fresh one because the card changed.

use crate::triage::wake::card_refs;
use regex::Regex;
use std::sync::LazyLock;
use trantor_proto::Message;

static ASSIGNMENT: LazyLock<Vec<Regex>> = LazyLock::new(|| {
    [
        r"(?i)\b(?:your\s+)?(?:card|contract|work\s+order|assignment)\s+#(\d{1,7})\b",
        r"(?i)\b(?:take|work|pick\s+up|resume|start|finish|bounced?)\s+(?:on\s+)?(?:card\s+)?#(\d{1,7})\b",
        r"(?i)#(\d{1,7})\s+(?:is\s+yours|is\s+bounced|bounced|is\s+reopened|reopened|is\s+back|back)\b",
    ]
    .iter()
    .filter_map(|s| Regex::new(s).ok())
    .collect()
});
static BASE_LINE: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"(?m)^\s*base:\s*([0-9a-fA-F]{7,40})\b").ok());

/// The card a text assigns by its own shape ("your card #N", "take #N", "#N is yours", …).
pub fn assignment(text: &str) -> Option<i64> {
    ASSIGNMENT
        .iter()
        .filter_map(|r| {
            r.captures(text)
                .and_then(|c| c.get(1))
                .map(|m| (m.start(), m.as_str()))
        })
        .min_by_key(|(pos, _)| *pos)
        .and_then(|(_, d)| d.parse().ok())
}

/// The batch reading: the newest assignment, else the first citation of the newest message that
/// cites anything; 0 for none.
fn batch_card(wakes: &[Message]) -> i64 {
    if let Some(n) = wakes.iter().rev().find_map(|m| assignment(&m.text)) {
        return n;
    }
    wakes
        .iter()
        .rev()
        .find_map(|m| card_refs(&m.text).first().copied())
        .unwrap_or(0)
}

/// The card a wake batch is about (docs/runner.md §19.1): the newest direct message's own assignment wins;
/// a served note that assigns nothing defers to the batch's newest assignment, then its first
/// citation; an empty batch gives 0.
pub fn served_contract_card(wakes: &[Message], session: &str) -> i64 {
    let served = wakes.iter().rev().find(|m| m.to == session);
    if let Some(n) = served.and_then(|m| assignment(&m.text)) {
        return n;
    }
    batch_card(wakes)
}

/// The newest `base: <7–40 hex>` line in the batch (docs/runner.md §19.3).
pub fn contract_base(wakes: &[Message]) -> Option<String> {
    let re = BASE_LINE.as_ref()?;
    wakes.iter().rev().find_map(|m| {
        re.captures_iter(&m.text)
            .last()
            .and_then(|c| c.get(1))
            .map(|s| s.as_str().to_string())
    })
}

/// Cards that stand for a bus message rather than work ("new bus message…", "you just
/// joined…"): a wake bound to one works the seat's own newest open card instead.
pub fn is_message_card_title(title: &str) -> bool {
    let t = title.trim().to_lowercase();
    t.starts_with("new bus message") || t.starts_with("you just joined")
}

/// Whether a turn on `card` starts a fresh CLI session (docs/runner.md §19.2).
pub fn is_fresh(resumed_after_ask: bool, card: i64, session_card: i64) -> bool {
    !resumed_after_ask && card > 0 && card != session_card
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(id: i64, to: &str, text: &str) -> Message {
        Message {
            id,
            ts: 0,
            from: "orch:p".into(),
            to: to.into(),
            project: "p".into(),
            text: text.into(),
            re: None,
            kind: None,
            wake: None,
        }
    }

    #[test]
    fn assignment_shapes() {
        assert_eq!(assignment("your card #12: build it"), Some(12));
        assert_eq!(assignment("please pick up #7 today"), Some(7));
        assert_eq!(assignment("#9 is yours now"), Some(9));
        assert_eq!(assignment("bounced on card #4"), Some(4));
        assert_eq!(assignment("see #3 for context"), None);
    }

    #[test]
    fn served_card_rules() {
        let s = "claude:p";
        assert_eq!(served_contract_card(&[], s), 0);
        let a = m(1, s, "take #5 please");
        let b = m(2, s, "also note the logs");
        assert_eq!(
            served_contract_card(&[a.clone(), b.clone()], s),
            5,
            "a note defers to the queued contract"
        );
        let c = m(3, s, "work on #8 instead");
        assert_eq!(served_contract_card(&[a.clone(), c], s), 8);
        let mention = m(4, "all", "@claude see #11 and #12");
        assert_eq!(served_contract_card(&[mention], s), 11);
        let recite = m(5, s, "about #5 — any news?");
        assert_eq!(served_contract_card(&[a, recite], s), 5);
    }

    #[test]
    fn base_lines_and_titles() {
        let w = vec![
            m(1, "x", "base: abc1234\ncard #1"),
            m(2, "x", "do it\nbase: DEADBEEF99"),
        ];
        assert_eq!(contract_base(&w).as_deref(), Some("DEADBEEF99"));
        assert_eq!(contract_base(&[m(1, "x", "no base")]), None);
        assert!(is_message_card_title("New bus message from orch"));
        assert!(!is_message_card_title("Build the widget"));
        assert!(is_fresh(false, 3, 0));
        assert!(!is_fresh(true, 3, 0));
        assert!(!is_fresh(false, 3, 3));
        assert!(!is_fresh(false, 0, 3));
    }
}

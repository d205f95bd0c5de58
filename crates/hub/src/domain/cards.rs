//! Card rules: card references in text, the drill gate, status moves with their history, log
//! and event, the slim board view (pure functions), and the read of a project's cards.

use crate::domain::policy::canon;
use crate::state::event;
use serde_json::{Value, json};
use trantor_proto::limits;
use trantor_proto::{Card, CardStatus, HistoryEntry, LogEntry};
use trantor_store::{CardFilter, NewEvent, ReadTx, StoreError};

/// Every card of `project` (the name as stored on the cards).
pub fn cards_of(tx: &dyn ReadTx, project: &str) -> Result<Vec<Card>, StoreError> {
    tx.cards(&CardFilter {
        project: Some(project.to_string()),
        ..CardFilter::default()
    })
}

/// The canonical name of project `asked` (aliases followed) and every card of it.
pub fn lane_cards(tx: &dyn ReadTx, asked: &str) -> Result<(String, Vec<Card>), StoreError> {
    let project = canon(tx, asked)?;
    let cards = cards_of(tx, &project)?;
    Ok((project, cards))
}

/// Most card ids one message's `refs` carry.
pub const MAX_REFS: usize = 8;

/// Distinct card ids cited as `#<n>` in `text` (1–7 digits, not followed by another digit),
/// in order of appearance, at most [`MAX_REFS`].
pub fn card_refs(text: &str) -> Vec<i64> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() && out.len() < MAX_REFS {
        if bytes[i] == b'#' {
            let start = i + 1;
            let mut end = start;
            while end < bytes.len() && bytes[end].is_ascii_digit() {
                end += 1;
            }
            let digits = end - start;
            if (1..=7).contains(&digits) {
                // Slicing at ASCII digit boundaries is always valid UTF-8.
                if let Ok(n) = text[start..end].parse::<i64>()
                    && n > 0
                    && !out.contains(&n)
                {
                    out.push(n);
                }
            }
            i = end.max(i + 1);
        } else {
            i += 1;
        }
    }
    out
}

/// A request's status as the hub reads it: trimmed and lower-cased, then a known status or
/// [`CardStatus::Other`] (which create turns into `todo` and update ignores).
pub fn request_status(s: &CardStatus) -> CardStatus {
    CardStatus::from_wire(s.as_str().trim().to_ascii_lowercase())
}

/// Collapse runs of whitespace to one space and trim (the drill line's normal form).
pub fn collapse_ws(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Whether a note names a test command, which counts as a drill line.
fn names_test_command(note: &str) -> bool {
    let n = note.to_ascii_lowercase();
    [
        "node test/",
        "npm test",
        "npm run test",
        "pnpm test",
        "yarn test",
        "vitest",
        "pytest",
        "go test",
        "cargo test",
        "make test",
    ]
    .iter()
    .any(|c| n.contains(c))
}

fn starts_with_ci(s: &str, prefix: &str) -> bool {
    s.len() >= prefix.len()
        && s.is_char_boundary(prefix.len())
        && s[..prefix.len()].eq_ignore_ascii_case(prefix)
}

/// The drill gate: does moving `card` to done (with this request's `drill` and `note`) have a
/// drill line? Any of: a drill on the request or card, a checklist item starting `drill:`, a log
/// entry starting `Drill:`, or the move's note starting `Drill:` or naming a test command.
pub fn has_drill_line(card: &Card, drill: Option<&str>, note: Option<&str>) -> bool {
    if drill.is_some_and(|d| !d.trim().is_empty()) || !card.drill.trim().is_empty() {
        return true;
    }
    if card
        .checklist
        .iter()
        .any(|c| starts_with_ci(c.text.trim_start(), "drill:"))
    {
        return true;
    }
    if card
        .log
        .iter()
        .any(|l| l.text.trim_start().starts_with("Drill:"))
    {
        return true;
    }
    note.is_some_and(|n| {
        let n = n.trim_start();
        n.starts_with("Drill:") || names_test_command(n)
    })
}

/// The 409 text of the drill gate.
pub fn drill_refusal(id: i64) -> String {
    format!(
        "no drill line on card #{id}: say how \"done\" was verified before moving it to done — \
         pass drill:\"<the command or check>\", add a checklist item \"drill: …\", or give a \
         note starting \"Drill:\" or naming the test command you ran (e.g. cargo test)"
    )
}

/// Append a log entry, trimming the oldest past [`limits::LOG_ENTRIES`]. Every note is also on
/// an `updated` or `moved` event, so trimmed entries remain readable through `/card`.
pub fn push_log(card: &mut Card, ts: i64, by: &str, text: &str) {
    card.log.push(LogEntry {
        ts,
        by: by.to_string(),
        text: text.to_string(),
    });
    if card.log.len() > limits::LOG_ENTRIES {
        let excess = card.log.len() - limits::LOG_ENTRIES;
        card.log.drain(..excess);
    }
}

fn push_history(card: &mut Card, entry: HistoryEntry) {
    card.history.push(entry);
    if card.history.len() > limits::HISTORY_ENTRIES {
        let excess = card.history.len() - limits::HISTORY_ENTRIES;
        card.history.drain(..excess);
    }
}

/// The fields every card event carries.
pub fn card_event(
    card: &Card,
    kind: &str,
    by: &str,
    ts: i64,
    from: Option<&str>,
    to: &str,
) -> NewEvent {
    let cost = card.extra.get("costUsd").cloned().unwrap_or(Value::Null);
    event(
        ts,
        kind,
        &card.project,
        by,
        json!({
            "taskId": card.id,
            "title": card.title,
            "from": from,
            "to": to,
            "difficulty": card.difficulty,
            "assignee": card.assignee,
            "source": card.source,
            "costUsd": cost,
        }),
    )
}

/// Move `card` to `to`: history entry, `updated`, `workedBy` (and `closedBy` when someone else
/// closes it), and the `moved` event to write.
/// Returns `None` (and changes nothing) when the card already has that status.
pub fn move_card(
    card: &mut Card,
    to: CardStatus,
    by: &str,
    note: Option<&str>,
    now: i64,
) -> Option<NewEvent> {
    if card.status == to {
        return None;
    }
    let from = std::mem::replace(&mut card.status, to.clone());
    push_history(
        card,
        HistoryEntry {
            from: Some(from.to_string()),
            to: to.to_string(),
            by: by.to_string(),
            ts: now,
            note: note.map(str::to_string),
        },
    );
    if from == CardStatus::Done {
        card.closed_by = None;
    }
    if !by.is_empty() {
        match to {
            CardStatus::Doing | CardStatus::Testing => card.worked_by = Some(by.to_string()),
            // Closing keeps who did the work; the closer is shown beside it.
            CardStatus::Done => match card.worked_by.as_deref().filter(|w| !w.is_empty()) {
                None => card.worked_by = Some(by.to_string()),
                Some(w) if w != by => card.closed_by = Some(by.to_string()),
                Some(_) => {}
            },
            _ => {}
        }
    }
    card.updated = now;
    let mut ev = card_event(card, "moved", by, now, Some(from.as_str()), to.as_str());
    if let Some(n) = note {
        ev.data
            .insert("note".into(), Value::String(truncate(n, limits::LOG_TEXT)));
    }
    Some(ev)
}

/// The first history entry of a new card.
pub fn created_history(card: &mut Card, by: &str, now: i64) {
    push_history(
        card,
        HistoryEntry {
            from: None,
            to: card.status.to_string(),
            by: by.to_string(),
            ts: now,
            note: None,
        },
    );
}

/// A card as `/tasks?fields=slim` lists it: no log, history or checklist; `logCount` instead.
pub fn slim(card: &Card) -> Value {
    let mut v = serde_json::to_value(card).unwrap_or(Value::Null);
    if let Value::Object(m) = &mut v {
        m.remove("log");
        m.remove("history");
        m.remove("checklist");
        m.insert("logCount".into(), json!(card.log.len()));
        m.insert("checklistCount".into(), json!(card.checklist.len()));
        m.insert(
            "checklistDone".into(),
            json!(card.checklist.iter().filter(|c| c.done).count()),
        );
    }
    v
}

/// At most `max` characters of `s`.
pub fn truncate(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => s[..i].to_string(),
        None => s.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use trantor_proto::ChecklistItem;

    #[test]
    fn refs_rules() {
        assert_eq!(card_refs("fix #12 and #3, again #12"), vec![12, 3]);
        assert_eq!(
            card_refs("#12345678 is too long, #1234567 is fine"),
            vec![1234567]
        );
        assert_eq!(card_refs("#0 #a # #5x"), vec![5]);
        assert_eq!(card_refs("é#7é"), vec![7]);
        let many: String = (1..=12).map(|i| format!("#{i} ")).collect();
        assert_eq!(card_refs(&many).len(), MAX_REFS);
    }

    #[test]
    fn drill_gate_sources() {
        let mut c = Card::default();
        assert!(!has_drill_line(&c, None, None));
        assert!(!has_drill_line(&c, Some("  "), Some("looks good")));
        assert!(has_drill_line(&c, Some("cargo test -p x"), None));
        assert!(has_drill_line(&c, None, Some("Drill: ran it")));
        assert!(has_drill_line(&c, None, Some("ran `cargo test` — green")));
        assert!(has_drill_line(&c, None, Some("npm run test passes")));
        c.checklist.push(ChecklistItem {
            text: "  DRILL: curl /health".into(),
            done: false,
        });
        assert!(has_drill_line(&c, None, None));
        let mut c = Card::default();
        push_log(&mut c, 1, "a", "Drill: make check");
        assert!(has_drill_line(&c, None, None));
        let c = Card {
            drill: "x".into(),
            ..Card::default()
        };
        assert!(has_drill_line(&c, None, None));
    }

    #[test]
    fn moves_record_history_and_worked_by() {
        let mut c = Card {
            id: 4,
            status: "todo".into(),
            title: "t".into(),
            ..Card::default()
        };
        let ev = move_card(&mut c, CardStatus::Doing, "a:p", Some("go"), 10).expect("moved");
        assert_eq!(ev.kind, "moved");
        assert_eq!(ev.task_id, Some(4));
        assert_eq!(ev.data["from"], "todo");
        assert_eq!(ev.data["to"], "doing");
        assert_eq!(c.worked_by.as_deref(), Some("a:p"));
        assert_eq!(c.history.len(), 1);
        assert!(move_card(&mut c, CardStatus::Doing, "a:p", None, 11).is_none());
        // The person closing a seat's card: the seat stays its worker, the person its closer.
        let mut w = Card {
            id: 5,
            status: "testing".into(),
            worked_by: Some("claude:p".into()),
            ..Card::default()
        };
        move_card(&mut w, CardStatus::Done, "me:p", None, 20).expect("moved");
        assert_eq!(w.worked_by.as_deref(), Some("claude:p"));
        assert_eq!(w.closed_by.as_deref(), Some("me:p"));
        move_card(&mut w, CardStatus::Doing, "codex:p", None, 21).expect("reopened");
        assert_eq!(w.worked_by.as_deref(), Some("codex:p"));
        assert_eq!(w.closed_by, None);
        // Closed by its own worker, or with no worker yet: no separate closer.
        move_card(&mut w, CardStatus::Done, "codex:p", None, 22).expect("moved");
        assert_eq!(w.closed_by, None);
        let mut fresh = Card {
            id: 6,
            status: "todo".into(),
            ..Card::default()
        };
        move_card(&mut fresh, CardStatus::Done, "me:p", None, 23).expect("moved");
        assert_eq!(fresh.worked_by.as_deref(), Some("me:p"));
        assert_eq!(fresh.closed_by, None);
        for i in 0..(limits::HISTORY_ENTRIES + 5) {
            let to = if i % 2 == 0 {
                CardStatus::Todo
            } else {
                CardStatus::Doing
            };
            move_card(&mut c, to, "a:p", None, 12);
        }
        assert_eq!(c.history.len(), limits::HISTORY_ENTRIES);
    }

    #[test]
    fn slim_view() {
        let mut c = Card::default();
        push_log(&mut c, 1, "a", "n");
        let v = slim(&c);
        assert!(v.get("log").is_none() && v.get("history").is_none());
        assert_eq!(v["logCount"], 1);
        assert_eq!(truncate("héllo", 2), "hé");
        assert_eq!(collapse_ws("  a \n b\t c "), "a b c");
    }
}

//! What each assigner hears about its contract (docs/runner.md §13): the
//! `✅ done on …` receipt and the failure, stall, no-delivery, empty and park notices. Every
//! notice is kind `receipt` with `re` = that assigner's newest wake, redacted and capped at 280
//! characters.

use crate::sys::redact::redact;
use trantor_proto::{Message, SendRequest};

/// The longest assigner notice.
pub const NOTICE_CAP: usize = 280;

/// One sender a wake batch owes an answer to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assigner {
    /// The sender's session.
    pub from: String,
    /// The id of that sender's newest wake (the notice's `re`).
    pub id: i64,
    /// What they asked (their newest wake's text).
    pub asked: String,
}

/// The assigners of a batch: one per sender, skipping an empty sender, `all`, the seat itself
/// and `hub:*` (docs/runner.md §13).
pub fn assigners(wakes: &[Message], session: &str) -> Vec<Assigner> {
    let mut out: Vec<Assigner> = Vec::new();
    for m in wakes {
        if m.from.is_empty() || m.from == "all" || m.from == session || m.from.starts_with("hub:") {
            continue;
        }
        match out.iter_mut().find(|a| a.from == m.from) {
            Some(a) if m.id > a.id => {
                a.id = m.id;
                a.asked = m.text.clone();
            }
            Some(_) => {}
            None => out.push(Assigner {
                from: m.from.clone(),
                id: m.id,
                asked: m.text.clone(),
            }),
        }
    }
    out
}

/// One line of at most `n` characters.
pub fn excerpt(text: &str, n: usize) -> String {
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= n {
        return flat;
    }
    let mut s: String = flat.chars().take(n.saturating_sub(1)).collect();
    s.push('…');
    s
}

/// Redact and cap a notice.
pub fn finish(text: &str) -> String {
    let red = redact(text);
    if red.chars().count() <= NOTICE_CAP {
        return red.into_owned();
    }
    let mut s: String = red.chars().take(NOTICE_CAP - 1).collect();
    s.push('…');
    s
}

fn asked(a: &Assigner) -> String {
    // Redact before cutting: an excerpt could end inside a key and slip past the patterns.
    format!("asked: \"{}\"", excerpt(&redact(&a.asked), 80))
}

/// `✅ done on SESSION (turn finished: exit 0, Ns, started HH:MM:SS UTC) · card #N waits in
/// testing, not done yet · asked: "…" · check the board card and the files for what changed` —
/// when the turn started, and where its card stands: a turn that finished is not a card that is
/// done. `card` is the turn's card and its status at the turn's end, when it had one.
pub fn done(
    session: &str,
    secs: i64,
    started_ms: i64,
    card: Option<(i64, &str)>,
    a: &Assigner,
) -> String {
    let s = started_ms.div_euclid(1000).rem_euclid(86_400);
    let card = match card {
        Some((id, "testing")) if id > 0 => format!(" · card #{id} waits in testing, not done yet"),
        Some((id, status)) if id > 0 && !status.is_empty() => format!(" · card #{id} {status}"),
        _ => String::new(),
    };
    finish(&format!(
        "✅ done on {session} (turn finished: exit 0, {secs}s, started {:02}:{:02}:{:02} UTC){card} · {} · check the board card and the files for what changed",
        s / 3600,
        (s % 3600) / 60,
        s % 60,
        asked(a)
    ))
}

/// `⚠️ your contract FAILED on SESSION (exit E, R) · retrying in Ns · asked: …`.
pub fn failed(session: &str, exit: i32, reason: &str, retry_in: &str, a: &Assigner) -> String {
    finish(&format!(
        "⚠️ your contract FAILED on {session} (exit {exit}, {reason}) · retrying in {retry_in} · {}",
        asked(a)
    ))
}

/// `🫥 your contract STALLED on SESSION …`.
pub fn stalled(session: &str, retry_in: &str, a: &Assigner) -> String {
    finish(&format!(
        "🫥 your contract STALLED on {session} (no activity for the whole watchdog window) · retrying in {retry_in} · {}",
        asked(a)
    ))
}

/// `⚠ no commit, card #N still <status> on SESSION (exit 0, Ns) · asked: …` — deliberately
/// not a done receipt: the contract stays owed.
pub fn no_delivery(session: &str, card: i64, status: &str, secs: i64, a: &Assigner) -> String {
    finish(&format!(
        "⚠ no commit, card #{card} still {status} on {session} (exit 0, {secs}s) · {}",
        asked(a)
    ))
}

/// `🫥 EMPTY turn on SESSION (…) · wake stays owed · retrying in Ns`.
pub fn empty(session: &str, secs: i64, retry_in: &str) -> String {
    finish(&format!(
        "🫥 EMPTY turn on {session} (exit 0, {secs}s, no output, no commit, no bus activity) · wake stays owed · retrying in {retry_in}"
    ))
}

/// `⛔ your contract is PARKED on SESSION (…) · resumes <time> (a direct message ends it now)`
/// or `— not retrying`.
pub fn parked(
    session: &str,
    reason: &str,
    resumes: Option<&str>,
    bounded: bool,
    a: &Assigner,
) -> String {
    let tail = match resumes {
        Some(t) if bounded => format!(" · resumes {t} (a direct message ends it now)"),
        Some(t) => format!(" · resumes {t}"),
        None if reason == "budget" => " — resumes when its budget is raised".to_string(),
        None => " — not retrying".to_string(),
    };
    finish(&format!(
        "⛔ your contract is PARKED on {session} ({reason}){tail} · {}",
        asked(a)
    ))
}

/// The `/send` body of a notice to `a`.
pub fn to_assigner(session: &str, project: &str, a: &Assigner, text: String) -> SendRequest {
    SendRequest {
        from: session.to_string(),
        to: Some(a.from.clone()),
        text,
        project: Some(project.to_string()),
        re: Some(a.id),
        kind: Some("receipt".into()),
        wake: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(id: i64, from: &str, text: &str) -> Message {
        Message {
            id,
            ts: 0,
            from: from.into(),
            to: "claude:p".into(),
            project: "p".into(),
            text: text.into(),
            re: None,
            kind: None,
            wake: None,
        }
    }

    #[test]
    fn one_assigner_per_sender_with_the_newest_wake() {
        let w = vec![
            m(3, "orch:p", "first"),
            m(5, "hub:duty", "x"),
            m(7, "orch:p", "second"),
            m(8, "claude:p", "self"),
            m(9, "bob:p", "hi"),
        ];
        let a = assigners(&w, "claude:p");
        assert_eq!(a.len(), 2);
        assert_eq!(
            (a[0].from.as_str(), a[0].id, a[0].asked.as_str()),
            ("orch:p", 7, "second")
        );
        assert_eq!(a[1].id, 9);
    }

    #[test]
    fn notices_are_capped_and_redacted() {
        let key = format!("sk-ant-api03-{}", "d".repeat(40));
        let a = Assigner {
            from: "orch:p".into(),
            id: 1,
            asked: format!("use {key} and {}", "word ".repeat(100)),
        };
        let t = done("claude:p", 3, 1_700_000_000_000, None, &a);
        assert!(t.contains("started 22:13:20 UTC"), "{t}");
        assert!(t.starts_with(
            "✅ done on claude:p (turn finished: exit 0, 3s, started 22:13:20 UTC) · asked: \"use "
        ));
        // A card waiting in testing is said to be not done; a done card is said done.
        let t = done("claude:p", 3, 0, Some((4, "testing")), &a);
        assert!(
            t.contains(") · card #4 waits in testing, not done yet · asked:"),
            "{t}"
        );
        let t = done("claude:p", 3, 0, Some((4, "done")), &a);
        assert!(t.contains(") · card #4 done · asked:"), "{t}");
        assert!(!t.contains(&key));
        assert!(t.chars().count() <= NOTICE_CAP);
        let r = to_assigner("claude:p", "p", &a, t);
        assert_eq!(r.kind.as_deref(), Some("receipt"));
        assert_eq!(r.re, Some(1));
    }
}

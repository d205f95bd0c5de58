//! Which messages wake the seat, which ride the next turn as context, and which are refused
//! (docs/runner.md §4.2). Pure functions over a poll batch; the loop applies them.

use regex::Regex;
use std::collections::HashSet;
use std::sync::LazyLock;
use trantor_proto::{Message, PolicyLink};

/// The hub's duty agent; its alerts expire.
pub const HUB_DUTY: &str = "hub:duty";

static CARD_REF: LazyLock<Option<Regex>> = LazyLock::new(|| Regex::new(r"#(\d+)").ok());
static WORK_WORDS: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"(?i)deliver|fix|bounce|contract|next|resume").ok());
static READY_LINE: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"^\S+ reporting — ready for a contract").ok());
static HEALTH_LINE: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"^(?:✅|⚠️|⚠|🛑) \S+ (?:recovered|turn FAILED|DOWN)").ok());

/// The card ids a text cites as `#<1–7 digits>` (not followed by another digit), in order.
pub fn card_refs(text: &str) -> Vec<i64> {
    let Some(re) = CARD_REF.as_ref() else {
        return vec![];
    };
    re.captures_iter(text)
        .filter_map(|c| c.get(1))
        .filter(|d| d.as_str().len() <= 7)
        .filter_map(|d| d.as_str().parse().ok())
        .collect()
}

fn matches(re: &LazyLock<Option<Regex>>, text: &str) -> bool {
    re.as_ref().is_some_and(|r| r.is_match(text))
}

/// A contract: `kind:"contract"`, text starting `contract:` (any case), or a `#<id>` citation.
pub fn is_contract(m: &Message) -> bool {
    m.kind.as_deref() == Some("contract")
        || m.text.trim_start().to_lowercase().starts_with("contract:")
        || !card_refs(&m.text).is_empty()
}

/// A receipt: `kind:"receipt"`, the `✅ done on` marker, or an answer to one of this runner's
/// own outcome notices that carries no new work (docs/runner.md §4.2).
pub fn is_receipt(m: &Message, sent_outcomes: &HashSet<i64>) -> bool {
    if m.kind.as_deref() == Some("receipt") || m.text.trim_start().starts_with("✅ done on") {
        return true;
    }
    match m.re {
        Some(re) if re > 0 && sent_outcomes.contains(&re) => {
            card_refs(&m.text).is_empty() && !matches(&WORK_WORDS, &m.text) && !is_contract(m)
        }
        _ => false,
    }
}

/// A status broadcast: to `all` with `kind:"status"`, a "reporting — ready" line, or a seat's
/// recovered/FAILED/DOWN announcement.
pub fn is_status_broadcast(m: &Message) -> bool {
    m.to == "all"
        && (m.kind.as_deref() == Some("status")
            || matches(&READY_LINE, m.text.trim_start())
            || matches(&HEALTH_LINE, m.text.trim_start()))
}

/// A `hub:duty` alert older than the TTL. A peer's message never expires.
pub fn is_expired_alert(m: &Message, now: i64, ttl_ms: i64) -> bool {
    m.from == HUB_DUTY && m.ts > 0 && now - m.ts > ttl_ms
}

/// The hub's hourly FYI about same-project sessions: context, never a wake.
pub fn is_overseer_fyi(m: &Message) -> bool {
    m.from == HUB_DUTY && m.text.starts_with("🤝 OVERSEER same-project-sessions")
}

/// The text names the seat: `@<persona>` (case-sensitive) or `<persona>:` (any case).
pub fn mentions(text: &str, persona: &str) -> bool {
    text.contains(&format!("@{persona}"))
        || text
            .to_lowercase()
            .contains(&format!("{}:", persona.to_lowercase()))
}

/// The identity a wake decision needs.
#[derive(Debug, Clone)]
pub struct Seat<'a> {
    /// The seat's bus name.
    pub session: &'a str,
    /// The seat's persona (mentions use it, not the agent).
    pub persona: &'a str,
    /// The seat's project.
    pub project: &'a str,
    /// Expiry of hub alerts.
    pub alert_ttl_ms: i64,
}

/// Whether `m` wakes the seat (docs/runner.md §4.2): a direct message unless `wake:false`, `kind:"status"` or
/// a receipt; a broadcast only as a contract that mentions the seat.
pub fn should_wake(m: &Message, seat: &Seat<'_>, sent_outcomes: &HashSet<i64>, now: i64) -> bool {
    if is_expired_alert(m, now, seat.alert_ttl_ms)
        || is_receipt(m, sent_outcomes)
        || is_status_broadcast(m)
        || m.wake == Some(false)
    {
        return false;
    }
    if m.to == seat.session {
        return m.kind.as_deref() != Some("status");
    }
    m.to == "all" && is_contract(m) && mentions(&m.text, seat.persona)
}

/// The project of a sender: the suffix after the last `:` of its session (None = same project).
pub fn sender_project(from: &str) -> Option<&str> {
    from.rsplit_once(':')
        .map(|(_, p)| p)
        .filter(|p| !p.is_empty())
}

/// Whether `a` and `b` are the same project or linked in `/policy` (case-insensitive).
pub fn is_linked(a: &str, b: &str, links: &[PolicyLink]) -> bool {
    if a.eq_ignore_ascii_case(b) {
        return true;
    }
    links.iter().any(|l| {
        l.projects.iter().any(|p| p.eq_ignore_ascii_case(a))
            && l.projects.iter().any(|p| p.eq_ignore_ascii_case(b))
    })
}

/// A poll batch sorted by what happens to each message.
#[derive(Debug, Default, Clone)]
pub struct Triage {
    /// Messages that wake the seat.
    pub wakes: Vec<Message>,
    /// Messages that ride the next turn as context.
    pub context: Vec<Message>,
    /// Direct messages that did not wake (their senders hear once per batch).
    pub demoted: Vec<Message>,
    /// Cross-project wakes refused (their senders hear once each).
    pub refused: Vec<Message>,
    /// Ids dropped because a clean turn already read them.
    pub duplicates: Vec<i64>,
    /// Expired hub alerts shed.
    pub shed: usize,
}

/// Sort a poll batch (docs/runner.md §4.2). `seen` answers whether an id is in the seen ledger.
pub fn triage(
    batch: Vec<Message>,
    seat: &Seat<'_>,
    sent_outcomes: &HashSet<i64>,
    links: &[PolicyLink],
    seen: &dyn Fn(i64) -> bool,
    now: i64,
) -> Triage {
    let mut t = Triage::default();
    for m in batch {
        if m.from == seat.session || is_receipt(&m, sent_outcomes) || is_status_broadcast(&m) {
            continue;
        }
        if seen(m.id) {
            t.duplicates.push(m.id);
            continue;
        }
        if is_overseer_fyi(&m) {
            t.context.push(m);
            continue;
        }
        if should_wake(&m, seat, sent_outcomes, now) {
            let cross = !m.from.starts_with("hub:")
                && sender_project(&m.from).is_some_and(|sp| !is_linked(sp, seat.project, links));
            if cross {
                t.refused.push(m);
            } else {
                t.wakes.push(m);
            }
            continue;
        }
        if is_expired_alert(&m, now, seat.alert_ttl_ms) {
            t.shed += 1;
            continue;
        }
        if m.to == seat.session && m.wake != Some(false) && m.kind.as_deref() != Some("status") {
            t.demoted.push(m.clone());
        }
        t.context.push(m);
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(id: i64, from: &str, to: &str, text: &str) -> Message {
        Message {
            id,
            ts: 1_000,
            from: from.into(),
            to: to.into(),
            project: "p".into(),
            text: text.into(),
            re: None,
            kind: None,
            wake: None,
        }
    }

    fn seat() -> Seat<'static> {
        Seat {
            session: "reviewer:p",
            persona: "reviewer",
            project: "p",
            alert_ttl_ms: 1_800_000,
        }
    }

    #[test]
    fn direct_wakes_unless_flagged() {
        let none = HashSet::new();
        let s = seat();
        assert!(should_wake(
            &m(1, "orch:p", "reviewer:p", "do it"),
            &s,
            &none,
            2_000
        ));
        let mut x = m(2, "orch:p", "reviewer:p", "fyi");
        x.wake = Some(false);
        assert!(!should_wake(&x, &s, &none, 2_000));
        let mut x = m(3, "orch:p", "reviewer:p", "status");
        x.kind = Some("status".into());
        assert!(!should_wake(&x, &s, &none, 2_000));
        let mut x = m(4, "orch:p", "reviewer:p", "thanks");
        x.kind = Some("receipt".into());
        assert!(!should_wake(&x, &s, &none, 2_000));
        assert!(!should_wake(
            &m(5, "claude:p", "reviewer:p", "✅ done on claude:p"),
            &s,
            &none,
            0
        ));
    }

    #[test]
    fn broadcasts_wake_only_as_mentioning_contracts() {
        let none = HashSet::new();
        let s = seat();
        assert!(should_wake(
            &m(1, "orch:p", "all", "@reviewer please look at #12"),
            &s,
            &none,
            0
        ));
        assert!(should_wake(
            &m(1, "orch:p", "all", "contract: Reviewer: check it"),
            &s,
            &none,
            0
        ));
        assert!(!should_wake(
            &m(1, "orch:p", "all", "#12 is ready for anyone"),
            &s,
            &none,
            0
        ));
        assert!(!should_wake(
            &m(1, "orch:p", "all", "@reviewer hello"),
            &s,
            &none,
            0
        ));
        assert!(!should_wake(
            &m(1, "orch:p", "all", "@claude look at #3"),
            &s,
            &none,
            0
        ));
        assert!(!should_wake(
            &m(1, "orch:p", "all", "@Reviewer look at #3"),
            &s,
            &none,
            0
        ));
    }

    #[test]
    fn receipts_to_own_outcomes_need_no_work() {
        let mut sent = HashSet::new();
        sent.insert(40);
        let mut x = m(41, "orch:p", "reviewer:p", "ok thanks");
        x.re = Some(40);
        assert!(is_receipt(&x, &sent));
        x.text = "ok, now fix the tests".into();
        assert!(!is_receipt(&x, &sent));
        x.text = "see #9".into();
        assert!(!is_receipt(&x, &sent));
    }

    #[test]
    fn hub_alerts_expire_but_peers_never() {
        let s = seat();
        let none = HashSet::new();
        let a = m(1, HUB_DUTY, "reviewer:p", "UNDELIVERED");
        assert!(should_wake(&a, &s, &none, 1_000 + 60_000));
        assert!(!should_wake(&a, &s, &none, 1_000 + 1_800_001));
        let p = m(1, "orch:p", "reviewer:p", "old");
        assert!(should_wake(&p, &s, &none, 1_000 + 99_000_000));
    }

    #[test]
    fn triage_sorts_a_batch() {
        let s = seat();
        let none = HashSet::new();
        let mut nowake = m(3, "orch:p", "reviewer:p", "context only");
        nowake.wake = Some(false);
        let mut status = m(
            4,
            "claude:p",
            "all",
            "claude reporting — ready for a contract",
        );
        status.kind = Some("status".into());
        let batch = vec![
            m(1, "reviewer:p", "all", "my own"),
            m(2, "orch:p", "reviewer:p", "wake me"),
            nowake,
            status,
            m(5, "orch:other", "reviewer:p", "foreign"),
            m(6, "orch:p", "all", "general chatter"),
            m(7, "orch:p", "reviewer:p", "already read"),
            m(
                8,
                HUB_DUTY,
                "reviewer:p",
                "🤝 OVERSEER same-project-sessions: two",
            ),
            m(
                9,
                "hub:duty",
                "reviewer:p",
                "UNDELIVERED #3 a:x -> reviewer:p",
            ),
        ];
        let t = triage(batch, &s, &none, &[], &|id| id == 7, 2_000);
        assert_eq!(t.wakes.iter().map(|m| m.id).collect::<Vec<_>>(), vec![2, 9]);
        assert_eq!(t.refused.iter().map(|m| m.id).collect::<Vec<_>>(), vec![5]);
        assert_eq!(
            t.context.iter().map(|m| m.id).collect::<Vec<_>>(),
            vec![3, 6, 8]
        );
        assert!(t.demoted.is_empty());
        assert_eq!(t.duplicates, vec![7]);
        let links = vec![PolicyLink {
            projects: vec!["P".into(), "other".into()],
            ..Default::default()
        }];
        let t = triage(
            vec![m(5, "orch:other", "reviewer:p", "linked")],
            &s,
            &none,
            &links,
            &|_| false,
            0,
        );
        assert_eq!(t.wakes.len(), 1);
    }

    #[test]
    fn card_refs_cap_at_seven_digits() {
        assert_eq!(card_refs("#12 and #7 and #12345678"), vec![12, 7]);
    }
}

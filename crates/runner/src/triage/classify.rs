//! Judging a finished turn: exit escalations, the empty/blocked/no-delivery rules, the verdict
//! and outcome with the original's precedence, failure classes, and reset-time parsing
//! (docs/runner.md §10, §11, §12.1, §12.3).

use regex::Regex;
use std::sync::LazyLock;
use trantor_proto::CardStatus;
use trantor_proto::text::strip_ansi;

fn re(s: &str) -> Option<Regex> {
    Regex::new(s).ok()
}

fn hit(r: &LazyLock<Option<Regex>>, text: &str) -> Option<String> {
    r.as_ref()
        .and_then(|r| r.find(text))
        .map(|m| m.as_str().to_string())
}

static AUTH_MARK: LazyLock<Option<Regex>> = LazyLock::new(|| {
    re(
        r"(?i)unauthor\w*|\b401\b|\b403\b|forbidden|invalid api key|incorrect api key|authentication failed|token expired",
    )
});
static BILLING: LazyLock<Option<Regex>> = LazyLock::new(|| {
    re(
        r"(?i)requires more credits|can only afford|http 402|insufficient balance|credit balance is too low",
    )
});
static SANDBOX: LazyLock<Option<Regex>> = LazyLock::new(|| {
    re(
        r"(?i)rejected by (?:the )?sandbox|sandbox (?:denied|blocked)|blocked by (?:the )?sandbox|operation not permitted by sandbox|approval (?:was )?(?:denied|rejected)",
    )
});
static BACKEND: LazyLock<Option<Regex>> = LazyLock::new(|| {
    re(
        r"(?i)unexpected status (?:404|408|410|5\d\d)|internal server error|bad gateway|service unavailable|gateway timeout|econnrefused|connection refused|socket hang up|network (?:is )?unreachable|\b529\b|overloaded|temporarily limiting requests|not your usage limit",
    )
});
static PROVIDER_REJECTED: LazyLock<Option<Regex>> = LazyLock::new(|| {
    re(r"(?i)401[^\n]{0,200}chatgpt\.com/backend-api|chatgpt\.com/backend-api[^\n]{0,200}401")
});
static EXHAUSTED: LazyLock<Option<Regex>> = LazyLock::new(|| {
    re(
        r"(?i)quota|payment required|\b402\b|\b429\b|too many requests|rate.?limit|usage limit|exceeded your|reached your [^\n]{0,40}limit|hit your [^\n]{0,40}limit|insufficient (?:credits|funds)|out of (?:credits|quota)|requires more credits|can only afford|insufficient balance|credit balance is too low",
    )
});
static AUTH: LazyLock<Option<Regex>> = LazyLock::new(|| {
    re(
        r"(?i)unauthor\w*|\b401\b|invalid api key|incorrect api key|forbidden|\b403\b|token expired|\bexpired\b",
    )
});
static TRY_IN: LazyLock<Option<Regex>> = LazyLock::new(|| {
    re(
        r"(?i)try again in\s+(?:about\s+)?(\d+(?:\.\d+)?)\s*(seconds?|secs?|s|minutes?|mins?|m|hours?|hrs?|h|days?|d)\b(?:\s*(?:and\s*)?(\d+)\s*(minutes?|mins?|m)\b)?",
    )
});
/// "try again in 1h59m59.5s": a Go-style duration, as OpenAI's rate-limit messages give it.
static TRY_IN_GO: LazyLock<Option<Regex>> =
    LazyLock::new(|| re(r"(?i)try again in\s+((?:\d+(?:\.\d+)?(?:ms|h|m|s))+)(?:[^a-z0-9]|$)"));
static GO_PART: LazyLock<Option<Regex>> = LazyLock::new(|| re(r"(?i)(\d+(?:\.\d+)?)(ms|h|m|s)"));
static TRY_AT: LazyLock<Option<Regex>> = LazyLock::new(|| {
    re(
        r"(?i)try again (?:at|after)\s+(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2})(?::(\d{2}))?(?:\.\d+)?\s*(Z|UTC|[+-]\d{2}:?\d{2})?",
    )
});
/// "try again at 7:57 PM" (Codex: the provider's reset in local wall-clock time), optionally
/// with a date ("try again at Dec 2nd, 2026 7:57 PM").
static TRY_CLOCK: LazyLock<Option<Regex>> = LazyLock::new(|| {
    re(
        r"(?i)try again at\s+(?:([a-z]{3})[a-z]*\.?\s+(\d{1,2})(?:st|nd|rd|th)?,?\s+(\d{4}),?\s+)?(\d{1,2}):(\d{2})\s*([ap])\.?m\b",
    )
});
/// "resets 11:16pm (UTC)", "resets Dec 5, 3pm (Europe/Berlin)": Claude Code's subscription
/// limit ("You've hit your 5-hour limit · resets …"), in the zone it names.
static RESETS_CLOCK: LazyLock<Option<Regex>> = LazyLock::new(|| {
    re(
        r"(?i)\bresets\s+(?:([a-z]{3})[a-z]*\.?\s+(\d{1,2})(?:st|nd|rd|th)?,?\s+)?(\d{1,2})(?::(\d{2}))?\s*([ap])\.?m\b(?:\s*\(([^)]+)\))?",
    )
});
static TOKENS: LazyLock<Vec<Regex>> = LazyLock::new(|| {
    [
        r"(?i)tokens used[:\s]+([\d,]+)",
        r"(?i)total tokens[:\s]+([\d,]+)",
        r"(?i)tokens:\s*([\d,]+)",
        r"(?i)([\d,]+)\s+tokens\b",
    ]
    .iter()
    .filter_map(|s| re(s))
    .collect()
});

/// The usage- or rate-limit words in `text` (the `exhausted` class's evidence), if any: what the
/// watchdog looks for in a CLI's own log of provider errors (docs/runner.md §8.4).
pub fn usage_limit(text: &str) -> Option<String> {
    hit(&EXHAUSTED, text)
}

/// Why a turn failed (docs/runner.md §12.1), in the classifier's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureClass {
    /// Exit 0 with nothing said.
    EmptyOutput,
    /// The CLI is not installed (exit 127).
    MissingCli,
    /// Killed by SIGPIPE (141), or SIGKILL (137) on a cut.
    CutSignal,
    /// The provider's backend failed (5xx, connection refused, …).
    BackendError,
    /// The provider rejected the account (codex's 401 from chatgpt.com).
    ProviderRejected,
    /// Quota, rate or billing limit.
    Exhausted,
    /// Credentials refused or expired.
    Auth,
    /// The sandbox refused the CLI's actions.
    PermissionRejected,
    /// Exit 0 with no work and no substantive output.
    EmptyTurn,
    /// Anything else.
    Crashed,
}

impl FailureClass {
    /// The reason word used on the bus, in the ledger and in the park file.
    pub fn as_str(self) -> &'static str {
        match self {
            FailureClass::EmptyOutput => "empty-output",
            FailureClass::MissingCli => "missing-cli",
            FailureClass::CutSignal => "cut-signal",
            FailureClass::BackendError => "backend-error",
            FailureClass::ProviderRejected => "provider-rejected",
            FailureClass::Exhausted => "exhausted",
            FailureClass::Auth => "auth",
            FailureClass::PermissionRejected => "permission-rejected",
            FailureClass::EmptyTurn => "empty-turn",
            FailureClass::Crashed => "crashed",
        }
    }

    /// Parking reasons park unbounded until a reset or an operator (docs/runner.md §12.3).
    #[cfg(test)]
    pub fn parks(self) -> bool {
        matches!(
            self,
            FailureClass::Exhausted | FailureClass::Auth | FailureClass::ProviderRejected
        )
    }
}

/// Classify a failed turn (docs/runner.md §12.1): the class and the evidence that matched.
pub fn classify_failure(
    exit: i32,
    text: &str,
    empty_output: bool,
    empty_turn: bool,
    cut: bool,
) -> (FailureClass, String) {
    if empty_output {
        return (FailureClass::EmptyOutput, "no output".into());
    }
    if exit == 127 {
        return (FailureClass::MissingCli, "exit 127".into());
    }
    if exit == 141 || (exit == 137 && cut) {
        return (FailureClass::CutSignal, format!("exit {exit}"));
    }
    if let Some(m) = hit(&BACKEND, text) {
        return (FailureClass::BackendError, m);
    }
    if let Some(m) = hit(&PROVIDER_REJECTED, text) {
        return (FailureClass::ProviderRejected, m);
    }
    if let Some(m) = hit(&EXHAUSTED, text) {
        return (FailureClass::Exhausted, m);
    }
    if let Some(m) = hit(&AUTH, text) {
        return (FailureClass::Auth, m);
    }
    if let Some(m) = hit(&SANDBOX, tail(text, 1200)) {
        return (FailureClass::PermissionRejected, m);
    }
    if empty_turn {
        return (FailureClass::EmptyTurn, "no work".into());
    }
    (FailureClass::Crashed, format!("exit {exit}"))
}

fn tail(s: &str, n: usize) -> &str {
    if s.len() <= n {
        return s;
    }
    let mut i = s.len() - n;
    while !s.is_char_boundary(i) {
        i += 1;
    }
    &s[i..]
}

/// The last `n` bytes of `s` (on a character boundary).
pub fn last_chars(s: &str, n: usize) -> &str {
    tail(s, n)
}

fn norm(line: &str) -> String {
    strip_ansi(line)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// The CLI's own output: the capture with prompt echo removed (docs/runner.md §10).
pub fn strip_prompt_echo(out: &str, prompt: &str) -> String {
    let prompt_lines: Vec<String> = prompt.lines().map(norm).filter(|l| !l.is_empty()).collect();
    let prompt_flat = prompt_lines.join("\n");
    let shares_run = |line: &str| -> bool {
        // A 40-character run shared with a prompt line, sampled at a few offsets: cheap and
        // enough to catch a wrapped or truncated echo.
        let chars: Vec<char> = line.chars().collect();
        if chars.len() < 40 {
            return false;
        }
        let mut i = 0;
        while i + 40 <= chars.len() {
            let run: String = chars[i..i + 40].iter().collect();
            if prompt_flat.contains(&run) {
                return true;
            }
            i += 20;
        }
        false
    };
    out.lines()
        .filter(|raw| {
            let l = norm(raw);
            if l.is_empty() {
                return true;
            }
            let n = l.chars().count();
            if n >= 40 {
                !(prompt_lines
                    .iter()
                    .any(|p| p.contains(&l) || (p.chars().count() >= 40 && l.contains(p.as_str())))
                    || shares_run(&l))
            } else {
                !(l.contains(' ') && prompt_flat.contains(&l))
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn is_noise_line(l: &str) -> bool {
    let t = l.trim();
    if t.is_empty() {
        return true;
    }
    // Box art and separators: no letters or digits at all.
    if !t.chars().any(|c| c.is_alphanumeric()) {
        return true;
    }
    // CLI labels such as "codex", "[claude]", "tokens used", "user", "assistant".
    let lower = t.to_lowercase();
    let bare = lower.trim_matches(|c: char| !c.is_alphanumeric());
    matches!(
        bare,
        "codex"
            | "claude"
            | "user"
            | "assistant"
            | "thinking"
            | "exec"
            | "gemini"
            | "kimi"
            | "tokens used"
    )
}

/// Output is substantive when at least 120 characters remain after removing ANSI, box art,
/// separators and CLI labels (docs/runner.md §11.2).
pub fn is_substantive(own_out: &str) -> bool {
    let kept: usize = strip_ansi(own_out)
        .lines()
        .filter(|l| !is_noise_line(l))
        .map(|l| l.trim().chars().count())
        .sum();
    kept >= 120
}

/// The token count a CLI printed (the last hit of the first pattern that matches; 0 = none).
pub fn tokens(own_out: &str) -> i64 {
    for r in TOKENS.iter() {
        if let Some(c) = r.captures_iter(own_out).last()
            && let Some(d) = c.get(1)
        {
            return d.as_str().replace(',', "").parse().unwrap_or(0);
        }
    }
    0
}

/// This machine's offset from UTC at `now_ms`, in seconds (local wall clock = UTC + offset).
fn local_offset_s(now_ms: i64) -> i64 {
    let t: libc::time_t = (now_ms / 1000) as libc::time_t;
    // SAFETY: localtime_r only writes the tm we hand it; a zeroed tm is a valid value.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    let ok = unsafe { !libc::localtime_r(&t, &mut tm).is_null() };
    if ok { tm.tm_gmtoff } else { 0 }
}

/// A clock time the CLIs print names its minute, not the second (Claude Code prints a reset at
/// 15:02:47 as "resets 3:02pm", Codex as "try again at 3:02 PM"): the reset falls within that
/// minute, so the seat waits until the minute is over, and the minute in progress is not past.
const MINUTE_S: i64 = 60;

/// "try again at 7:57 PM" in the wall clock of UTC+`offset_s`: the end of the next such minute
/// not yet over at `now` (or that date's, when one is given).
fn parse_clock_reset(text: &str, now: i64, offset_s: i64) -> Option<i64> {
    let c = TRY_CLOCK.as_ref()?.captures_iter(text).last()?;
    let num = |i: usize| c.get(i).and_then(|m| m.as_str().parse::<i64>().ok());
    let (mut h, mi) = (num(4)?, num(5)?);
    if !(1..=12).contains(&h) || mi > 59 {
        return None;
    }
    let pm = c.get(6)?.as_str().eq_ignore_ascii_case("p");
    h = match (h, pm) {
        (12, false) => 0,
        (12, true) => 12,
        (h, true) => h + 12,
        (h, false) => h,
    };
    let local_now = now / 1000 + offset_s;
    let day = |secs: i64| secs.div_euclid(86_400) * 86_400;
    let mut local = if let (Some(mon), Some(d), Some(y)) = (c.get(1), num(2), num(3)) {
        const MONTHS: [&str; 12] = [
            "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
        ];
        let m = MONTHS
            .iter()
            .position(|x| x.eq_ignore_ascii_case(mon.as_str()))? as i64
            + 1;
        trantor_proto::date::days_from_civil(y, m, d) * 86_400 + h * 3600 + mi * 60
    } else {
        day(local_now) + h * 3600 + mi * 60
    };
    if c.get(1).is_none() && local + MINUTE_S <= local_now {
        local += 86_400;
    }
    Some((local + MINUTE_S - offset_s) * 1000)
}

/// "resets 11:16pm (UTC)" (optionally "resets Dec 5, 3pm (…)"): the end of the next such minute
/// not yet over at `now`.
/// A zone of UTC/GMT is taken as such; any other zone name is this machine's, since the CLI
/// runs here (`offset_s` is its offset from UTC).
fn parse_resets_clock(text: &str, now: i64, offset_s: i64) -> Option<i64> {
    const MONTHS: [&str; 12] = [
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ];
    let c = RESETS_CLOCK.as_ref()?.captures_iter(text).last()?;
    let num = |i: usize| c.get(i).and_then(|m| m.as_str().parse::<i64>().ok());
    let h = num(3)?;
    let mi = num(4).unwrap_or(0);
    if !(1..=12).contains(&h) || mi > 59 {
        return None;
    }
    let pm = c.get(5)?.as_str().eq_ignore_ascii_case("p");
    let h24 = (h % 12) + if pm { 12 } else { 0 };
    let zone = c.get(6).map(|m| m.as_str().trim().to_ascii_uppercase());
    let offset = match zone.as_deref() {
        Some("UTC") | Some("GMT") | Some("ETC/UTC") | Some("Z") => 0,
        _ => offset_s,
    };
    let local_now = now / 1000 + offset;
    let mut local = match (c.get(1), num(2)) {
        (Some(mon), Some(d)) => {
            let m = MONTHS
                .iter()
                .position(|x| x.eq_ignore_ascii_case(mon.as_str()))? as i64
                + 1;
            let (y, _, _) = trantor_proto::date::civil_from_days(local_now.div_euclid(86_400));
            let mut at =
                trantor_proto::date::days_from_civil(y, m, d) * 86_400 + h24 * 3600 + mi * 60;
            if at + MINUTE_S <= local_now {
                at = trantor_proto::date::days_from_civil(y + 1, m, d) * 86_400
                    + h24 * 3600
                    + mi * 60;
            }
            at
        }
        _ => local_now.div_euclid(86_400) * 86_400 + h24 * 3600 + mi * 60,
    };
    if local + MINUTE_S <= local_now && c.get(1).is_none() {
        local += 86_400;
    }
    Some((local + MINUTE_S - offset) * 1000)
}

/// The reset time a CLI's output names, in ms: "try again in 2 hours", "try again in 45m",
/// "try again at 2026-01-02T03:04:05Z" (docs/runner.md §12.3), "try again at 7:57 PM" (local
/// time, as Codex prints the provider's reset). None when nothing parses.
pub fn parse_reset(text: &str, now: i64) -> Option<i64> {
    if let Some(at) = parse_clock_reset(text, now, local_offset_s(now)) {
        return Some(at);
    }
    if let Some(at) = parse_resets_clock(text, now, local_offset_s(now)) {
        return Some(at);
    }
    if let Some(c) = TRY_IN_GO
        .as_ref()
        .and_then(|r| r.captures_iter(text).last())
        && let (Some(d), Some(part)) = (c.get(1), GO_PART.as_ref())
    {
        let ms: f64 = part
            .captures_iter(d.as_str())
            .filter_map(|p| {
                let n: f64 = p.get(1)?.as_str().parse().ok()?;
                let unit = match p.get(2)?.as_str().to_lowercase().as_str() {
                    "ms" => 1.0,
                    "s" => 1_000.0,
                    "m" => 60_000.0,
                    _ => 3_600_000.0,
                };
                Some(n * unit)
            })
            .sum();
        return Some(now + ms as i64);
    }
    if let Some(c) = TRY_IN.as_ref().and_then(|r| r.captures_iter(text).last()) {
        let n: f64 = c.get(1)?.as_str().parse().ok()?;
        let unit = c.get(2)?.as_str().to_lowercase();
        let ms = match unit.chars().next()? {
            's' => 1_000.0,
            'm' => 60_000.0,
            'h' => 3_600_000.0,
            'd' => 86_400_000.0,
            _ => return None,
        };
        let extra = c
            .get(3)
            .and_then(|d| d.as_str().parse::<f64>().ok())
            .map(|m| m * 60_000.0)
            .unwrap_or(0.0);
        return Some(now + (n * ms + extra) as i64);
    }
    if let Some(c) = TRY_AT.as_ref().and_then(|r| r.captures_iter(text).last()) {
        let num = |i: usize| c.get(i).and_then(|m| m.as_str().parse::<i64>().ok());
        let (y, mo, d, h, mi) = (num(1)?, num(2)?, num(3)?, num(4)?, num(5)?);
        let s = num(6).unwrap_or(0);
        let mut secs =
            trantor_proto::date::days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + s;
        if let Some(z) = c.get(7).map(|m| m.as_str())
            && (z.starts_with('+') || z.starts_with('-'))
        {
            let digits: String = z.chars().filter(|c| c.is_ascii_digit()).collect();
            let oh: i64 = digits.get(0..2).and_then(|x| x.parse().ok()).unwrap_or(0);
            let om: i64 = digits.get(2..4).and_then(|x| x.parse().ok()).unwrap_or(0);
            let off = (oh * 3600 + om * 60) * if z.starts_with('-') { -1 } else { 1 };
            secs -= off;
        }
        return Some(secs * 1000);
    }
    None
}

/// A card as the turn saw it before and after.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CardSnap {
    /// Status.
    pub status: CardStatus,
    /// Log entries `(ts, by, text)`.
    pub log: Vec<(i64, String, String)>,
}

/// Whether a card's move during a turn counts as a delivery (docs/runner.md §11.2): into
/// `testing` or `done` from outside them, or the tester's own move from `testing` to `done`. A
/// card that stayed where it was did not move.
pub fn card_moved(before: &CardStatus, after: &CardStatus) -> bool {
    let delivered = |s: &CardStatus| matches!(s, CardStatus::Testing | CardStatus::Done);
    delivered(after)
        && (!delivered(before) || (*before == CardStatus::Testing && *after == CardStatus::Done))
}

/// Everything the judge needs to know about a finished turn.
#[derive(Debug, Clone, Default)]
pub struct TurnFacts {
    /// The exit status of the CLI (128+signal when killed).
    pub real_exit: i32,
    /// The turn was cut (box or stall).
    pub cut: bool,
    /// The cut was a stall.
    pub stalled: bool,
    /// The CLI's own output, prompt echo removed.
    pub own_out: String,
    /// HEAD moved during the turn.
    pub new_commit: bool,
    /// HEAD or the porcelain status changed.
    pub worktree_changed: bool,
    /// The seat did something on the bus during the turn.
    pub bus_activity: bool,
    /// Resolved usage was all zeros (None = unknown, never zero).
    pub zero_usage: Option<bool>,
    /// The asked verdict, when the turn left an ask.
    pub asked: Option<String>,
    /// The card bound to the turn (0 = none).
    pub card: i64,
    /// The card before the turn (None = the read failed or no card).
    pub card_before: Option<CardSnap>,
    /// The card after the turn (None = the read failed or was not made).
    pub card_after: Option<CardSnap>,
    /// The seat's session (fresh notes are the seat's own).
    pub session: String,
    /// When the turn started, ms.
    pub t0: i64,
}

/// The judge's answer.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Judgement {
    /// Exit after escalations (0 = success).
    pub eff_exit: i32,
    /// Nothing was said.
    pub empty_output: bool,
    /// Nothing was done.
    pub empty_turn: bool,
    /// Exit 0 but the card shows no delivery.
    pub no_delivery: bool,
    /// The blocked verdict (`blocked: <note>`).
    pub blocked: Option<String>,
    /// The card status at the end (`None` when unknown).
    pub card_status_at_end: Option<CardStatus>,
    /// The verdict sentence.
    pub verdict: String,
    /// `completed empty no-delivery blocked asked cut stalled api-error`.
    pub outcome: String,
    /// The escalation that fired (for the failure reason).
    pub escalation: Option<String>,
}

/// Judge a finished turn (docs/runner.md §11.2).
pub fn judge(f: &TurnFacts) -> Judgement {
    let mut j = Judgement {
        eff_exit: f.real_exit,
        ..Default::default()
    };
    let own = f.own_out.trim();
    if f.real_exit == 0 && !f.cut {
        let short = own.chars().count() < 400;
        if !f.new_commit
            && short
            && let Some(m) = hit(&AUTH_MARK, own)
        {
            j.eff_exit = 1;
            j.escalation = Some(format!("auth: {m}"));
        }
        if j.eff_exit == 0
            && !f.new_commit
            && let Some(m) = hit(&BILLING, own)
            && (own.chars().count() < 1500 || hit(&BILLING, tail(own, 600)).is_some())
        {
            j.eff_exit = 1;
            j.escalation = Some(format!("billing: {m}"));
        }
        if j.eff_exit == 0
            && !f.new_commit
            && let Some(m) = hit(&SANDBOX, tail(own, 1200))
        {
            j.eff_exit = 1;
            j.escalation = Some(format!("permission-rejected: {m}"));
        }
        if j.eff_exit == 0 && own.is_empty() {
            j.eff_exit = 1;
            j.empty_output = true;
            j.escalation = Some("empty output".into());
        }
    }
    let zero_usage = f.real_exit == 0
        && j.eff_exit == 0
        && !f.cut
        && !f.new_commit
        && f.zero_usage == Some(true);
    if zero_usage {
        j.eff_exit = 1;
    }
    j.empty_turn = !f.cut
        && f.real_exit == 0
        && j.eff_exit == 0
        && !f.worktree_changed
        && !f.bus_activity
        && !is_substantive(own);
    if f.asked.is_some() {
        j.empty_turn = false;
    }
    let clean = !f.cut && f.real_exit == 0 && j.eff_exit == 0 && f.card > 0;
    if clean && let (Some(before), Some(after)) = (&f.card_before, &f.card_after) {
        j.card_status_at_end = Some(after.status.clone());
        let fresh = after.log.iter().rfind(|(ts, by, text)| {
            *by == f.session
                && *ts >= f.t0
                && !before
                    .log
                    .iter()
                    .any(|(ots, oby, otext)| ots == ts && oby == by && otext == text)
        });
        if after.status == CardStatus::Blocked
            && (before.status != CardStatus::Blocked || fresh.is_some())
        {
            let note = fresh
                .or(after.log.last())
                .map(|(_, _, t)| t.as_str())
                .unwrap_or("");
            let first = note.lines().next().unwrap_or("").trim();
            j.blocked = Some(format!("blocked: {first}"));
            j.empty_turn = false;
        }
        let moved = card_moved(&before.status, &after.status);
        j.no_delivery = !f.new_commit && !moved && f.asked.is_none() && j.blocked.is_none();
    }
    j.verdict = if f.stalled {
        "classified stalled because no bytes on either stream and no transcript advance for the whole watchdog window".into()
    } else if zero_usage {
        "classified zero-usage because exit 0 with no commit and a usage record of all zeros".into()
    } else if let Some(a) = &f.asked {
        a.clone()
    } else if let Some(b) = &j.blocked {
        b.clone()
    } else if j.no_delivery {
        let st = j
            .card_status_at_end
            .as_ref()
            .map_or("unknown", CardStatus::as_str);
        format!(
            "classified no-delivery because exit 0 with no new commit and card #{} still {st}",
            f.card
        )
    } else {
        verdict_for(f, &j)
    };
    let outcome = if f.cut {
        if f.stalled { "stalled" } else { "cut" }
    } else if j.eff_exit != 0 {
        "api-error"
    } else if j.no_delivery {
        "no-delivery"
    } else if j.empty_turn {
        "empty"
    } else {
        "completed"
    };
    j.outcome = if f.asked.is_some() {
        "asked".into()
    } else if j.blocked.is_some() {
        "blocked".into()
    } else {
        outcome.into()
    };
    j
}

fn verdict_for(f: &TurnFacts, j: &Judgement) -> String {
    if f.real_exit == 0 && j.eff_exit == 0 {
        if j.empty_turn {
            return "classified empty-turn because exit 0 with no commit, no worktree change, no bus activity and no substantive output".into();
        }
        return "classified success because exit 0 with CLI output".into();
    }
    if j.empty_output {
        return "classified empty-output because the CLI exited 0 and printed nothing of its own"
            .into();
    }
    if let Some(e) = &j.escalation
        && f.real_exit == 0
    {
        let (kind, m) = e.split_once(": ").unwrap_or(("crashed", e));
        let kind = if kind == "billing" { "exhausted" } else { kind };
        return format!("classified {kind} because {m}");
    }
    let (class, m) = classify_failure(j.eff_exit, &f.own_out, j.empty_output, j.empty_turn, f.cut);
    format!("classified {} because {m}", class.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROSE: &str = "I read the message that woke me and handled it. Summary: checked the request, made the requested change in my working tree, and reported back on the bus.";

    #[test]
    fn failure_order_matches_the_original() {
        assert_eq!(
            classify_failure(0, "", true, false, false).0,
            FailureClass::EmptyOutput
        );
        assert_eq!(
            classify_failure(127, "rate limit", false, false, false).0,
            FailureClass::MissingCli
        );
        assert_eq!(
            classify_failure(137, "", false, false, true).0,
            FailureClass::CutSignal
        );
        assert_eq!(
            classify_failure(137, "", false, false, false).0,
            FailureClass::Crashed
        );
        assert_eq!(
            classify_failure(1, "502 Bad Gateway; rate limit", false, false, false).0,
            FailureClass::BackendError
        );
        assert_eq!(
            classify_failure(
                1,
                "401 Unauthorized https://chatgpt.com/backend-api/codex",
                false,
                false,
                false
            )
            .0,
            FailureClass::ProviderRejected
        );
        assert_eq!(
            classify_failure(
                1,
                "You've hit your usage limit. Try again in 2 hours.",
                false,
                false,
                false
            )
            .0,
            FailureClass::Exhausted
        );
        assert_eq!(
            classify_failure(1, "Error: 401 Unauthorized", false, false, false).0,
            FailureClass::Auth
        );
        // What OpenCode 1.18 prints for an OpenAI-compatible provider's 401.
        assert_eq!(
            classify_failure(
                1,
                "Error: Incorrect API key provided: drill-key.",
                false,
                false,
                false
            )
            .0,
            FailureClass::Auth
        );
        assert_eq!(
            classify_failure(1, "boom", false, true, false).0,
            FailureClass::EmptyTurn
        );
        assert_eq!(
            classify_failure(2, "boom", false, false, false).0,
            FailureClass::Crashed
        );
        assert!(FailureClass::Exhausted.parks() && !FailureClass::Crashed.parks());
        // Claude Code's words for Anthropic's 529 `overloaded_error`: the backend, retried later,
        // never a usage limit or a credential problem, and no reset time.
        let overloaded = "API Error: 529 Overloaded. This is a server-side issue, usually \
                          temporary — try again in a moment.";
        assert_eq!(
            classify_failure(1, overloaded, false, false, false).0,
            FailureClass::BackendError
        );
        assert_eq!(parse_reset(overloaded, 0), None);
        assert!(!FailureClass::BackendError.parks());
    }

    #[test]
    fn reset_times_parse() {
        let now = 1_000_000;
        assert_eq!(
            parse_reset("usage limit. try again in 2 hours", now),
            Some(now + 7_200_000)
        );
        assert_eq!(parse_reset("Try again in 45m", now), Some(now + 2_700_000));
        assert_eq!(
            parse_reset("try again in 1 hour and 30 minutes", now),
            Some(now + 5_400_000)
        );
        assert_eq!(
            parse_reset("try again at 1970-01-01T01:00:00Z", now),
            Some(3_600_000)
        );
        assert_eq!(
            parse_reset("try again at 1970-01-01T02:00:00+01:00", now),
            Some(3_600_000)
        );
        assert_eq!(
            parse_reset("try again at 2026-03-01 00:00", 0),
            Some(1_772_323_200_000)
        );
        assert_eq!(parse_reset("no hint here", now), None);
        // OpenAI's rate-limit wording: a Go-style duration.
        assert_eq!(
            parse_reset("Please try again in 1h59m59.5s. Visit https://x", now),
            Some(now + 7_199_500)
        );
        assert_eq!(parse_reset("try again in 6ms.", now), Some(now + 6));
        assert_eq!(parse_reset("try again in 1m30s", now), Some(now + 90_000));
        assert_eq!(
            parse_reset("try again in 5 minutes", now),
            Some(now + 300_000)
        );
        assert!(usage_limit("AI_APICallError: The usage limit has been reached").is_some());
        assert!(usage_limit("AI_APICallError: Overloaded").is_none());
    }

    #[test]
    fn claude_subscription_limits_are_exhausted_until_the_named_reset() {
        // 2026-11-30 21:16:21 UTC.
        let now = 1_796_073_381_000;
        let claude = "You've hit your 5-hour limit · resets 11:16pm (UTC)";
        assert_eq!(
            classify_failure(1, claude, false, false, false).0,
            FailureClass::Exhausted
        );
        let day = trantor_proto::date::days_from_civil(2026, 11, 30) * 86_400_000;
        // The end of the minute named (the reset falls within it).
        let at = day + (23 * 3600 + 17 * 60) * 1000;
        assert_eq!(
            parse_resets_clock(claude, now, 3600),
            Some(at),
            "UTC is UTC"
        );
        // Another zone is this machine's: at UTC+1, 11:16pm is 22:16 UTC.
        let berlin = "You've hit your 5-hour limit · resets 11:16pm (Europe/Berlin)";
        assert_eq!(parse_resets_clock(berlin, now, 3600), Some(at - 3_600_000));
        // Past today: tomorrow. With a date: that date, this year or the next.
        assert_eq!(
            parse_resets_clock("resets 9am (UTC)", now, 0),
            Some(day + 86_400_000 + 9 * 3_600_000 + 60_000)
        );
        assert_eq!(
            parse_resets_clock(
                "You've hit your weekly limit · resets Dec 5, 3pm (UTC)",
                now,
                0
            ),
            Some(
                trantor_proto::date::days_from_civil(2026, 12, 5) * 86_400_000
                    + 15 * 3_600_000
                    + 60_000
            )
        );
        assert_eq!(
            parse_resets_clock("resets Jan 2, 12am (UTC)", now, 0),
            Some(trantor_proto::date::days_from_civil(2027, 1, 2) * 86_400_000 + 60_000)
        );
        assert_eq!(parse_resets_clock("resets soon", now, 0), None);
        // The minute in progress is not past: a reset 20 s ahead, printed as this minute
        // (21:16:21 → "resets 9:16pm"), ends with this minute, not tomorrow.
        assert_eq!(
            parse_resets_clock("resets 9:16pm (UTC)", now, 0),
            Some(day + (21 * 3600 + 17 * 60) * 1000)
        );
        // The minute before is past: tomorrow's.
        assert_eq!(
            parse_resets_clock("resets 9:15pm (UTC)", now, 0),
            Some(day + 86_400_000 + (21 * 3600 + 16 * 60) * 1000)
        );
        // A throttle that is not the account's limit (no limit claim in the headers) is the
        // backend's, retried on the ladder, never parked as exhausted.
        let throttle = "API Error: Server is temporarily limiting requests (not your usage \
                        limit) · This request would exceed your account's rate limit. Please \
                        try again later.";
        assert_eq!(
            classify_failure(1, throttle, false, false, false).0,
            FailureClass::BackendError
        );
    }

    #[test]
    fn codex_clock_resets_parse_in_local_time() {
        // 2026-11-30 17:57:05 UTC.
        let now = 1_796_061_425_000;
        let codex = "ERROR: You’ve hit your usage limit. Visit https://chatgpt.com/settings/usage \
                     to purchase more credits or try again at 7:57 PM.";
        let at_utc = parse_clock_reset(codex, now, 0).expect("parsed");
        assert_eq!(at_utc, 1_796_061_420_000 + 2 * 3_600_000 + 60_000);
        // The same words on a machine at UTC+1 name an hour earlier in UTC.
        assert_eq!(
            parse_clock_reset(codex, now, 3600),
            Some(at_utc - 3_600_000)
        );
        // A time already past today is tomorrow's.
        assert_eq!(
            parse_clock_reset("try again at 9:00 AM", now, 0),
            Some(
                trantor_proto::date::days_from_civil(2026, 12, 1) * 86_400_000
                    + 9 * 3_600_000
                    + 60_000
            )
        );
        // 17:57:05 with "try again at 5:57 PM": this minute, over at 17:58.
        assert_eq!(
            parse_clock_reset("try again at 5:57 PM.", now, 0),
            Some(1_796_061_480_000)
        );
        assert_eq!(
            parse_clock_reset("or try again at Dec 2nd, 2026 12:05 AM.", now, 0),
            Some(trantor_proto::date::days_from_civil(2026, 12, 2) * 86_400_000 + 6 * 60_000)
        );
        assert_eq!(parse_clock_reset("try again at 13:00 PM", now, 0), None);
        assert!(parse_reset(codex, now).is_some());
    }

    #[test]
    fn prompt_echo_is_stripped() {
        let prompt = "Rules: you are claude:p on the trantor crew and you end your turn when done.\nNEW BUS MESSAGE for you:\n[orch:p]: please fix it";
        let out = "Rules: you are claude:p on the trantor crew and you end your turn when done.\nfixed the widget\n[orch:p]: please fix it";
        assert_eq!(strip_prompt_echo(out, prompt), "fixed the widget");
    }

    #[test]
    fn substantive_and_tokens() {
        assert!(is_substantive(PROSE));
        assert!(!is_substantive("ok\n────────\n[claude]\n"));
        assert_eq!(tokens("tokens used: 1,234\nlater tokens used: 2,000"), 2000);
        assert_eq!(tokens("nothing"), 0);
    }

    fn facts() -> TurnFacts {
        TurnFacts {
            own_out: PROSE.into(),
            session: "claude:p".into(),
            t0: 100,
            ..Default::default()
        }
    }

    #[test]
    fn clean_turn_is_completed() {
        let j = judge(&facts());
        assert_eq!((j.eff_exit, j.outcome.as_str()), (0, "completed"));
        assert_eq!(
            j.verdict,
            "classified success because exit 0 with CLI output"
        );
    }

    #[test]
    fn empty_and_escalations() {
        let mut f = facts();
        f.own_out = String::new();
        let j = judge(&f);
        assert_eq!((j.eff_exit, j.outcome.as_str()), (1, "api-error"));
        assert!(j.empty_output);
        f.own_out = "ok".into();
        let j = judge(&f);
        assert_eq!((j.eff_exit, j.outcome.as_str()), (0, "empty"));
        f.bus_activity = true;
        assert_eq!(judge(&f).outcome, "completed");
        f.own_out = "Error: 401 Unauthorized".into();
        let j = judge(&f);
        assert_eq!(j.eff_exit, 1);
        assert!(
            j.verdict.starts_with("classified auth because"),
            "{}",
            j.verdict
        );
        f.new_commit = true;
        assert_eq!(judge(&f).eff_exit, 0, "a commit is real work");
        let mut f = facts();
        f.zero_usage = Some(true);
        let j = judge(&f);
        assert_eq!(j.eff_exit, 1);
        assert!(j.verdict.starts_with("classified zero-usage because"));
    }

    fn snap(status: &str, log: &[(i64, &str, &str)]) -> CardSnap {
        CardSnap {
            status: status.into(),
            log: log
                .iter()
                .map(|(t, b, x)| (*t, b.to_string(), x.to_string()))
                .collect(),
        }
    }

    #[test]
    fn blocked_outranks_no_delivery() {
        let mut f = facts();
        f.card = 7;
        f.card_before = Some(snap("doing", &[(1, "orch:p", "start")]));
        f.card_after = Some(snap(
            "blocked",
            &[
                (1, "orch:p", "start"),
                (150, "claude:p", "need the API key name\nmore"),
            ],
        ));
        let j = judge(&f);
        assert_eq!(j.outcome, "blocked");
        assert_eq!(j.verdict, "blocked: need the API key name");
        assert!(!j.no_delivery);

        // Already blocked, no fresh note from this seat: not a blocked verdict.
        f.card_before = Some(snap("blocked", &[(1, "orch:p", "start")]));
        f.card_after = Some(snap(
            "blocked",
            &[(1, "orch:p", "start"), (150, "orch:p", "ping")],
        ));
        let j = judge(&f);
        assert_eq!(j.outcome, "no-delivery");
        assert!(j.verdict.contains("card #7 still blocked"));

        // Moved to testing: delivery.
        f.card_after = Some(snap("testing", &[]));
        assert_eq!(judge(&f).outcome, "completed");

        // The tester's case: testing → done delivered, commit or not; a card that stayed in
        // testing, or stayed done, did not.
        f.card_before = Some(snap("testing", &[]));
        f.card_after = Some(snap("done", &[]));
        assert_eq!(judge(&f).outcome, "completed");
        f.card_after = Some(snap("testing", &[]));
        assert_eq!(judge(&f).outcome, "no-delivery");
        f.card_before = Some(snap("done", &[]));
        f.card_after = Some(snap("done", &[]));
        assert_eq!(judge(&f).outcome, "no-delivery");

        // Asked outranks blocked.
        f.card_before = Some(snap("doing", &[]));
        f.card_after = Some(snap("blocked", &[(150, "claude:p", "❓ ask")]));
        f.asked = Some("asked #9 of orch:p: which?".into());
        assert_eq!(judge(&f).outcome, "asked");
    }

    #[test]
    fn cut_and_stall_outcomes() {
        let mut f = facts();
        f.cut = true;
        f.real_exit = 137;
        assert_eq!(judge(&f).outcome, "cut");
        f.stalled = true;
        let j = judge(&f);
        assert_eq!(j.outcome, "stalled");
        assert!(j.verdict.starts_with("classified stalled because"));
    }
}

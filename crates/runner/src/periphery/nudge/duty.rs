//! Duty-nudge planning (docs/runner.md §17): what a `hub:duty` escalation asks, which recipients
//! a duty turn should nudge, the claims that keep two duty seats off one id, and the audit after
//! the turn. Only with `RUNNER_DUTY_NUDGES`; the ids themselves are reserved in the shared
//! [`NudgeLedger`].

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::ledger::{LOCK_ATTEMPTS, LedgerError, LedgerLock, NudgeLedger, io_err, one};

/// How a duty nudge message starts (the duty directive asks for it).
pub const NUDGE_PREFIX: &str = "Trantor delivery nudge from the duty seat:";

/// One undelivered message a `hub:duty` escalation names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Escalation {
    /// The id of the escalation message that named it.
    pub escalation_id: i64,
    /// The undelivered message's id.
    pub id: i64,
    /// Who sent it.
    pub sender: String,
    /// Who has not read it.
    pub recipient: String,
    /// The recipient's project (its suffix after the last `:`).
    pub project: String,
}

/// Parse the escalations in a `hub:duty` message: `UNDELIVERED … #<id> <sender> -> <recipient>`
/// (`→` works too; docs/runner.md §17). Every such triple after `UNDELIVERED` counts (the original
/// read only the first). Messages from anyone else, or without `UNDELIVERED`, give nothing.
pub fn duty_escalations(msg: &trantor_proto::Message) -> Vec<Escalation> {
    if msg.from != "hub:duty" {
        return Vec::new();
    }
    let Some(pos) = msg.text.find("UNDELIVERED") else {
        return Vec::new();
    };
    let rest = &msg.text[pos..];
    let mut out = Vec::new();
    for (i, _) in rest.match_indices('#') {
        let tail = &rest[i + 1..];
        let digits: String = tail.chars().take_while(char::is_ascii_digit).collect();
        let Ok(id) = digits.parse::<i64>() else {
            continue;
        };
        let mut words = tail[digits.len()..].split_whitespace();
        let (Some(sender), Some(arrow), Some(recipient)) =
            (words.next(), words.next(), words.next())
        else {
            continue;
        };
        if arrow != "->" && arrow != "→" {
            continue;
        }
        // The recipient ends at an em dash or trailing punctuation.
        let recipient = recipient
            .split('—')
            .next()
            .unwrap_or("")
            .trim_end_matches([',', ';', '.', ')'])
            .to_string();
        if recipient.is_empty() {
            continue;
        }
        let project = trantor_proto::session_project(&recipient).to_string();
        if out.iter().any(|e: &Escalation| e.id == id) {
            continue;
        }
        out.push(Escalation {
            escalation_id: msg.id,
            id,
            sender: sender.to_string(),
            recipient,
            project,
        });
    }
    out
}

/// How a recipient stands when a duty turn plans its nudges.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecipientState {
    /// Mid-turn: it will read its inbox anyway; nudging is a no-op.
    Busy,
    /// No such session here; nudging cannot help.
    Unknown(String),
    /// Idle and known: a nudge is owed.
    Actionable,
}

/// One recipient and the ids a duty turn must nudge it about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NudgeTarget {
    /// The recipient session.
    pub recipient: String,
    /// Its project.
    pub project: String,
    /// The unread ids to nudge about.
    pub ids: Vec<i64>,
}

/// What a duty turn owes, after claims and the ledger.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DutyPlan {
    /// The claim owner (`<runner id>:<turn+1>`).
    pub owner: String,
    /// Targets the turn must nudge (mandatory directive).
    pub targets: Vec<NudgeTarget>,
    /// Recipients that are busy (no-op).
    pub noop: Vec<NudgeTarget>,
    /// Recipients that cannot be nudged, with the reason (terminal).
    pub terminal: Vec<(NudgeTarget, String)>,
    /// Ids the ledger said someone else already nudged.
    pub skipped: Vec<i64>,
    /// Escalation message ids whose ids are all handled elsewhere (their wakes drop from the
    /// turn, docs/runner.md §17).
    pub dropped_escalations: Vec<i64>,
}

impl DutyPlan {
    /// Every id the turn is told to nudge.
    pub fn claimed_ids(&self) -> BTreeSet<i64> {
        self.targets
            .iter()
            .flat_map(|t| t.ids.iter().copied())
            .collect()
    }
}

/// A planned claim in the duty state file.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DutyClaim {
    /// The claiming owner.
    pub owner: String,
    /// Its process id (a dead pid frees the claim).
    pub pid: u32,
    /// The recipient.
    pub recipient: String,
    /// The recipient's project.
    pub project: String,
    /// When it was planned, ms.
    pub planned_at: i64,
    /// `duty:` (a runner's duty turn) or `wake:` (the wake daemon).
    #[serde(default)]
    pub source: String,
}

/// A verified nudge in the duty state file (the original's shape).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
struct NudgedRecord {
    #[serde(default)]
    recipient: String,
    #[serde(default)]
    project: String,
    #[serde(default)]
    nudged_at: i64,
}

/// `{version:1, nudged:{"<id>":{recipient, project, nudgedAt}}, planned:{…}}`; `nudged` is the
/// original's shape, `planned` holds the claims of docs/runner.md §17.
#[derive(Serialize, Deserialize, Clone, Debug, Default)]
struct DutyStateFile {
    #[serde(default = "one")]
    version: u32,
    /// Ids already nudged.
    #[serde(default)]
    nudged: BTreeMap<String, NudgedRecord>,
    /// Planned claims: id → claim.
    #[serde(default)]
    planned: BTreeMap<String, DutyClaim>,
    #[serde(flatten)]
    extra: serde_json::Map<String, serde_json::Value>,
}

/// Planned claims older than this are dropped (docs/runner.md §17).
const CLAIM_MAX_AGE_MS: i64 = 30 * 60 * 1000;
/// A `wake:` claimant may steal a duty claim younger than this.
const WAKE_STEAL_MS: i64 = 20_000;

fn pid_alive(pid: u32) -> bool {
    let Ok(pid) = i32::try_from(pid) else {
        return false;
    };
    match nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None) {
        Ok(()) => true,
        // The process exists but belongs to someone else.
        Err(nix::errno::Errno::EPERM) => true,
        Err(_) => false,
    }
}

/// Plan the duty nudges of a wake (docs/runner.md §17 and §16).
///
/// `escalations` come from [`duty_escalations`] over the wake's `hub:duty` messages;
/// `delivered_up_to(recipient)` is the recipient's `/peer` `deliveredUpTo` (None when unknown);
/// `resolve(recipient)` says whether it is busy, unknown or actionable. Claims are taken under
/// the lock of the duty state file at `state_path`, then the ids are reserved in each
/// recipient's nudge ledger under `bus_dir`; ids the ledger refuses are dropped from the plan
/// and their planned claims released. A lock that cannot be taken claims nothing (logged).
pub fn plan_duty_nudges(
    bus_dir: &Path,
    state_path: &Path,
    owner: &str,
    escalations: &[Escalation],
    mut delivered_up_to: impl FnMut(&str) -> Option<i64>,
    mut resolve: impl FnMut(&str) -> RecipientState,
) -> DutyPlan {
    let mut plan = DutyPlan {
        owner: owner.to_string(),
        ..Default::default()
    };
    // Group the still-unread ids per recipient.
    let mut per: BTreeMap<String, NudgeTarget> = BTreeMap::new();
    let mut read_cache: BTreeMap<String, Option<i64>> = BTreeMap::new();
    for e in escalations {
        let upto = *read_cache
            .entry(e.recipient.clone())
            .or_insert_with(|| delivered_up_to(&e.recipient));
        if upto.is_some_and(|u| u >= e.id) {
            continue;
        }
        let t = per
            .entry(e.recipient.clone())
            .or_insert_with(|| NudgeTarget {
                recipient: e.recipient.clone(),
                project: e.project.clone(),
                ids: Vec::new(),
            });
        if !t.ids.contains(&e.id) {
            t.ids.push(e.id);
        }
    }
    let mut actionable = Vec::new();
    for (_, t) in per {
        match resolve(&t.recipient) {
            RecipientState::Busy => plan.noop.push(t),
            RecipientState::Unknown(reason) => plan.terminal.push((t, reason)),
            RecipientState::Actionable => actionable.push(t),
        }
    }
    let now = trantor_proto::now_ms();
    let claims = DutyClaims::new(state_path);
    if !plan.terminal.is_empty()
        && let Err(e) = claims.record_terminal(&plan.terminal, now)
    {
        tracing::warn!("duty nudge state: {e}");
    }
    let mut claimed = match claims.claim(owner, &actionable, now) {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!("duty nudge claim: {e} — claiming nothing");
            Vec::new()
        }
    };
    // The shared pre-send ledger: exactly one nudger per unread id (docs/runner.md §16).
    let mut skipped = Vec::new();
    for t in &mut claimed {
        let ledger = NudgeLedger::open(bus_dir).for_recipient(&t.recipient);
        let allowed = ledger.reserve(&t.ids, owner);
        skipped.extend(t.ids.iter().copied().filter(|id| !allowed.contains(id)));
        t.ids = allowed;
    }
    claimed.retain(|t| !t.ids.is_empty());
    if !skipped.is_empty()
        && let Err(e) = claims.release_planned(&skipped, owner)
    {
        tracing::warn!("duty nudge release: {e}");
    }
    plan.skipped = skipped;
    plan.targets = claimed;
    let kept = plan.claimed_ids();
    let mut dropped: BTreeSet<i64> = escalations.iter().map(|e| e.escalation_id).collect();
    for e in escalations {
        if kept.contains(&e.id) {
            dropped.remove(&e.escalation_id);
        }
    }
    plan.dropped_escalations = dropped.into_iter().collect();
    plan
}

/// The prompt block a duty turn carries (docs/runner.md §17). Empty when there is nothing to say.
pub fn duty_directive(plan: &DutyPlan) -> String {
    let mut s = String::new();
    if !plan.targets.is_empty() {
        s.push_str("MECHANICAL DUTY NUDGE REQUIREMENT (runner-enforced):\n");
        for t in &plan.targets {
            let ids: Vec<String> = t.ids.iter().map(|i| format!("#{i}")).collect();
            s.push_str(&format!("- {}: unread {}\n", t.recipient, ids.join(", ")));
        }
        s.push_str(&format!(
            "Every id above is new and has no verified nudge yet. Before ending this turn, nudge each listed seat once per id; the message must start with \"{NUDGE_PREFIX}\" and name the ids (#N). The runner checks the sends and reports every id left out.\n"
        ));
    }
    if !plan.noop.is_empty() {
        s.push_str(
            "NO-OP — these seats are mid-turn and will read their inbox; do not nudge them:\n",
        );
        for t in &plan.noop {
            s.push_str(&format!("- {}\n", t.recipient));
        }
    }
    if !plan.terminal.is_empty() {
        s.push_str("TERMINAL — these cannot be nudged; do not try:\n");
        for (t, why) in &plan.terminal {
            s.push_str(&format!("- {} ({why})\n", t.recipient));
        }
    }
    s
}

/// After a clean duty turn: the targets whose ids were neither observed sent (`observed`) nor
/// recorded as nudged in the duty state (docs/runner.md §17). Releases this owner's planned claims
/// and ledger stamps for the missing ids (docs/runner.md §16) and records the observed ones as nudged.
pub fn audit_duty_nudges(
    bus_dir: &Path,
    state_path: &Path,
    plan: &DutyPlan,
    observed: &BTreeSet<i64>,
) -> Vec<NudgeTarget> {
    let claims = DutyClaims::new(state_path);
    let now = trantor_proto::now_ms();
    let seen: Vec<(i64, &NudgeTarget)> = plan
        .targets
        .iter()
        .flat_map(|t| t.ids.iter().map(move |id| (*id, t)))
        .filter(|(id, _)| observed.contains(id))
        .collect();
    if let Err(e) = claims.record_nudged(&seen, now) {
        tracing::warn!("duty nudge record: {e}");
    }
    let recorded = claims.nudged_ids();
    let mut missing = Vec::new();
    for t in &plan.targets {
        let ids: Vec<i64> = t
            .ids
            .iter()
            .copied()
            .filter(|id| !observed.contains(id) && !recorded.contains(id))
            .collect();
        let ledger = NudgeLedger::open(bus_dir).for_recipient(&t.recipient);
        let sent: Vec<i64> = t
            .ids
            .iter()
            .copied()
            .filter(|id| !ids.contains(id))
            .collect();
        ledger.confirm(&sent, &plan.owner);
        if ids.is_empty() {
            continue;
        }
        if let Err(e) = claims.release_planned(&ids, &plan.owner) {
            tracing::warn!("duty nudge release: {e}");
        }
        ledger.release(&ids, &plan.owner);
        missing.push(NudgeTarget {
            recipient: t.recipient.clone(),
            project: t.project.clone(),
            ids,
        });
    }
    missing
}

/// The duty claim state file (`duty-nudged.json`), locked like the nudge ledger.
struct DutyClaims {
    path: PathBuf,
}

impl DutyClaims {
    fn new(path: &Path) -> DutyClaims {
        DutyClaims {
            path: path.to_path_buf(),
        }
    }

    fn locked<T>(&self, f: impl FnOnce(&mut DutyStateFile) -> T) -> Result<T, LedgerError> {
        let _guard = LedgerLock::acquire(&self.path, LOCK_ATTEMPTS)?;
        let mut file: DutyStateFile = std::fs::read(&self.path)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default();
        let out = f(&mut file);
        file.version = 1;
        crate::sys::fsx::write_json_atomic(&self.path, &file).map_err(io_err(&self.path))?;
        Ok(out)
    }

    fn claim(
        &self,
        owner: &str,
        targets: &[NudgeTarget],
        now: i64,
    ) -> Result<Vec<NudgeTarget>, LedgerError> {
        if targets.is_empty() {
            return Ok(Vec::new());
        }
        let source = if owner.starts_with("wake:") {
            "wake:"
        } else {
            "duty:"
        };
        self.locked(|file| {
            file.planned
                .retain(|_, c| now - c.planned_at < CLAIM_MAX_AGE_MS && pid_alive(c.pid));
            let mut out = Vec::new();
            for t in targets {
                let mut ids = Vec::new();
                for id in &t.ids {
                    let key = id.to_string();
                    if file.nudged.contains_key(&key) {
                        continue;
                    }
                    if let Some(c) = file.planned.get(&key)
                        && c.owner != owner
                    {
                        let steal = source == "wake:"
                            && c.source != "wake:"
                            && now - c.planned_at < WAKE_STEAL_MS;
                        if !steal {
                            continue;
                        }
                    }
                    file.planned.insert(
                        key,
                        DutyClaim {
                            owner: owner.to_string(),
                            pid: std::process::id(),
                            recipient: t.recipient.clone(),
                            project: t.project.clone(),
                            planned_at: now,
                            source: source.to_string(),
                        },
                    );
                    ids.push(*id);
                }
                if !ids.is_empty() {
                    out.push(NudgeTarget { ids, ..t.clone() });
                }
            }
            out
        })
    }

    fn release_planned(&self, ids: &[i64], owner: &str) -> Result<(), LedgerError> {
        self.locked(|file| {
            for id in ids {
                let key = id.to_string();
                if file.planned.get(&key).is_some_and(|c| c.owner == owner) {
                    file.planned.remove(&key);
                }
            }
        })
    }

    fn record_nudged(&self, items: &[(i64, &NudgeTarget)], now: i64) -> Result<(), LedgerError> {
        if items.is_empty() {
            return Ok(());
        }
        self.locked(|file| {
            for (id, t) in items {
                file.nudged.insert(
                    id.to_string(),
                    NudgedRecord {
                        recipient: t.recipient.clone(),
                        project: t.project.clone(),
                        nudged_at: now,
                    },
                );
                file.planned.remove(&id.to_string());
            }
        })
    }

    fn record_terminal(
        &self,
        terminal: &[(NudgeTarget, String)],
        now: i64,
    ) -> Result<(), LedgerError> {
        self.locked(|file| {
            let list = file
                .extra
                .entry("terminal")
                .or_insert_with(|| serde_json::Value::Object(Default::default()));
            if let serde_json::Value::Object(map) = list {
                for (t, why) in terminal {
                    for id in &t.ids {
                        map.insert(
                            id.to_string(),
                            serde_json::json!({"recipient": t.recipient, "reason": why, "at": now}),
                        );
                    }
                }
            }
        })
    }

    fn nudged_ids(&self) -> BTreeSet<i64> {
        std::fs::read(&self.path)
            .ok()
            .and_then(|b| serde_json::from_slice::<DutyStateFile>(&b).ok())
            .map(|f| f.nudged.keys().filter_map(|k| k.parse().ok()).collect())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn duty(id: i64, text: &str) -> trantor_proto::Message {
        trantor_proto::Message {
            id,
            ts: 0,
            from: "hub:duty".into(),
            to: "claude:p".into(),
            project: "p".into(),
            text: text.into(),
            re: None,
            kind: Some("alert".into()),
            wake: None,
        }
    }

    #[test]
    fn escalations_are_parsed() {
        let m = duty(
            100,
            "⚠ UNDELIVERED 2 message(s): #12 claude:p -> codex:p, #13 kimi:p -> reviewer:q",
        );
        let e = duty_escalations(&m);
        assert_eq!(e.len(), 2);
        assert_eq!(e[0].id, 12);
        assert_eq!(e[0].sender, "claude:p");
        assert_eq!(e[0].recipient, "codex:p");
        assert_eq!(e[1].project, "q");
        assert_eq!(e[1].escalation_id, 100);
        let mut other = m.clone();
        other.from = "claude:p".into();
        assert!(duty_escalations(&other).is_empty());
        assert!(duty_escalations(&duty(1, "#12 a -> b")).is_empty());
        let arrow = duty_escalations(&duty(2, "UNDELIVERED #40 a:p → codex:p— since 5m"));
        assert_eq!(arrow.len(), 1);
        assert_eq!(arrow[0].recipient, "codex:p");
    }

    #[test]
    fn plan_claims_reserves_and_audits() {
        let tmp = tempfile::tempdir().expect("tmp");
        let bus = tmp.path();
        let state = bus.join("duty-nudged.json");
        let esc = duty_escalations(&duty(
            100,
            "UNDELIVERED: #12 a:p -> codex:p #13 a:p -> codex:p #14 a:p -> busy:p #15 a:p -> gone:p #16 a:p -> read:p",
        ));
        // Another nudger already stamped #13.
        NudgeLedger::open(bus)
            .for_recipient("codex:p")
            .reserve(&[13], "wake:daemon");
        let plan = plan_duty_nudges(
            bus,
            &state,
            "r1:1",
            &esc,
            |r| (r == "read:p").then_some(99),
            |r| match r {
                "busy:p" => RecipientState::Busy,
                "gone:p" => RecipientState::Unknown("no local session".into()),
                _ => RecipientState::Actionable,
            },
        );
        assert_eq!(plan.targets.len(), 1);
        assert_eq!(plan.targets[0].ids, vec![12]);
        assert_eq!(plan.skipped, vec![13]);
        assert_eq!(plan.noop.len(), 1);
        assert_eq!(plan.terminal.len(), 1);
        let d = duty_directive(&plan);
        assert!(d.contains("MECHANICAL DUTY NUDGE REQUIREMENT"));
        assert!(d.contains("codex:p: unread #12"));
        assert!(d.contains("TERMINAL"));
        // A second planner (another owner) cannot claim #12.
        let again = plan_duty_nudges(
            bus,
            &state,
            "r2:1",
            &esc,
            |_| None,
            |_| RecipientState::Actionable,
        );
        assert!(!again.claimed_ids().contains(&12));
        // The turn did not send: #12 is missing, and both the claim and the stamp are released.
        let missing = audit_duty_nudges(bus, &state, &plan, &BTreeSet::new());
        assert_eq!(missing.len(), 1);
        assert_eq!(missing[0].ids, vec![12]);
        assert!(
            !NudgeLedger::open(bus)
                .for_recipient("codex:p")
                .stamps()
                .contains_key(&12)
        );
        // An observed send is recorded and confirmed.
        let plan3 = plan_duty_nudges(
            bus,
            &state,
            "r3:1",
            &esc,
            |_| None,
            |_| RecipientState::Actionable,
        );
        assert!(plan3.claimed_ids().contains(&12));
        let missing = audit_duty_nudges(bus, &state, &plan3, &plan3.claimed_ids());
        assert!(missing.is_empty());
        let stamp = NudgeLedger::open(bus).for_recipient("codex:p").stamps();
        assert!(stamp.get(&12).is_some_and(|s| s.sent));
    }
}

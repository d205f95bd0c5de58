//! The circuit breaker on the seat's side (docs/runner.md §12.5): a turn that proves the
//! seat's credential exhausted tells the hub (`POST /credentials/state`), and before every
//! turn — and, less often, on an idle poll — the seat asks the hub how its credential stands
//! and parks `exhausted` until the reset without spawning the CLI when another seat proved it.
//!
//! The check is the same route with state `ok` ("this seat runs on it; how does it stand?"),
//! so it needs nothing but the seat's own project on an enforce-mode hub. Before a turn it is
//! always asked ([`TURN_CHECK_MS`] is 0: one small request is nothing beside a turn, and a
//! cached "ok" would let a turn through in the moments after another seat's proof); while idle
//! the answer is reused for [`IDLE_CHECK_MS`]. It fails open: a hub that does not answer (or
//! does not know the route) blocks nothing.

use crate::seat::Seat;
use crate::triage::receipt::Assigner;
use std::time::{Duration, Instant};
use trantor_proto::budget::BudgetCheck;
use trantor_proto::credentials::{CredentialStateReply, CredentialStateReport};

/// How old a cached answer may be before a turn (0: asked every time).
pub const TURN_CHECK_MS: u64 = 0;
/// How old a cached answer may be on an idle poll.
pub const IDLE_CHECK_MS: u64 = 15_000;
/// The hub's sender of credential notices: one in a poll batch drops the cached answers, so an
/// idle seat asks (and parks) on the next pass of its loop instead of up to [`IDLE_CHECK_MS`]
/// later.
pub const HUB_SENDER: &str = "hub:quota";

/// How often a seat parked on a budget asks whether it was raised (docs/runner.md §12.6).
pub const BUDGET_RECHECK_MS: u64 = 15_000;

/// What the seat last heard of its credentials and budget.
#[derive(Debug, Default)]
pub struct Quota {
    /// By name: when it last asked, and the exhaustion the answer named (reset ms, evidence).
    pub cached: std::collections::HashMap<String, (Instant, Option<Block>)>,
    /// While parked on a budget: the card the held turn is on, and when it last asked.
    pub budget_park: Option<(i64, Instant)>,
}

/// What stops a turn on a credential: the park reason (`exhausted` or `auth`), until when
/// (ms; [`crate::seat::park::NEVER`] for `auth`), and the evidence line.
pub type Block = (String, i64, String);

/// The block a reply names that still holds at `now` (the runner's clock: a reset the hub has
/// not yet flipped but this machine sees as past blocks nothing).
pub fn blocking(reply: &CredentialStateReply, now: i64) -> Option<Block> {
    let c = reply.credential.as_ref()?;
    let (reason, until, word) = if c.state == "auth" {
        ("auth", crate::seat::park::NEVER, "refused (auth)")
    } else {
        ("exhausted", c.exhausted_until(now)?, "exhausted")
    };
    let by = c.proved_by.as_deref().unwrap_or("another seat");
    let ev = c.last_evidence.as_deref().unwrap_or("");
    Some((
        reason.to_string(),
        until,
        format!(
            "credential {} {word} (proved by {by}{})",
            c.name,
            if ev.is_empty() {
                String::new()
            } else {
                format!(": {ev}")
            }
        ),
    ))
}

impl Seat {
    async fn report_credential(
        &self,
        name: &str,
        state: &str,
        until: Option<i64>,
        evidence: Option<String>,
    ) -> Option<CredentialStateReply> {
        let body = CredentialStateReport {
            name: name.to_string(),
            state: state.to_string(),
            until,
            session: self.cfg.session.clone(),
            evidence,
        };
        match self
            .hub
            .reads
            .hub
            .post::<_, CredentialStateReply>("/credentials/state", &body)
            .await
        {
            Ok(r) => Some(r),
            Err(e) => {
                tracing::debug!("/credentials/state ({state}) for {name}: {e}");
                None
            }
        }
    }

    /// The exhaustion of credential `name` in force now, asking the hub when the cached
    /// answer is older than `max_age_ms`. `None`: quota, or unknown.
    async fn block_of(&mut self, name: &str, max_age_ms: u64) -> Option<Block> {
        let now = trantor_proto::now_ms();
        let fresh = self
            .health
            .quota
            .cached
            .get(name)
            .filter(|(at, _)| at.elapsed() < Duration::from_millis(max_age_ms));
        let block = match fresh {
            Some((_, b)) => b.clone(),
            None => {
                let b = self
                    .report_credential(name, "ok", None, None)
                    .await
                    .and_then(|r| blocking(&r, now));
                self.health
                    .quota
                    .cached
                    .insert(name.to_string(), (Instant::now(), b.clone()));
                b
            }
        };
        block.filter(|(_, until, _)| *until > now)
    }

    /// The exhaustion that stops the seat's next turn, asking the hub when the cached answer
    /// is older than `max_age_ms`. A seat on one credential is stopped by its exhaustion; a
    /// seat on a pool takes the first credential of the pool with quota (its variables go in
    /// the next turn's environment) and is stopped only when every one is exhausted, until
    /// the earliest reset. `None`: no credential, quota, or unknown.
    pub async fn credential_block(&mut self, max_age_ms: u64) -> Option<Block> {
        if self.cfg.pool.is_empty() {
            let name = self.cfg.credential.clone()?;
            return self.block_of(&name, max_age_ms).await;
        }
        let mut blocks = Vec::new();
        for name in self.cfg.pool.clone() {
            match self.block_of(&name, max_age_ms).await {
                None => {
                    if self.cfg.credential.as_deref() != Some(name.as_str()) {
                        tracing::info!(
                            "pool: switching to credential {name} ({})",
                            self.cfg.credential.as_deref().unwrap_or("none")
                        );
                        self.cfg.credential = Some(name);
                    }
                    return None;
                }
                Some(b) => blocks.push((name, b)),
            }
        }
        let (reason, earliest) = blocks
            .iter()
            .map(|(_, (r, u, _))| (r.clone(), *u))
            .min_by_key(|(_, u)| *u)?;
        let each: Vec<String> = blocks
            .iter()
            .map(|(n, (r, u, _))| {
                if *u == crate::seat::park::NEVER {
                    format!("{n} {r}")
                } else {
                    format!("{n} until {}", crate::seat::park::fmt_time(*u))
                }
            })
            .collect();
        Some((
            reason,
            earliest,
            format!(
                "every credential of the pool exhausted ({})",
                each.join(", ")
            ),
        ))
    }

    /// With a pool, whether another of its credentials has quota now (the seat switches to
    /// it for the redelivery instead of parking).
    pub async fn pool_has_quota(&mut self) -> bool {
        !self.cfg.pool.is_empty()
            && self
                .credential_block(crate::seat::quota::TURN_CHECK_MS)
                .await
                .is_none()
    }

    /// Tell the hub this seat's turn proved its credential `exhausted` until `until`, or
    /// refused (`auth`, `until` None).
    pub async fn report_exhausted(&mut self, state: &str, until: Option<i64>, evidence: &str) {
        let Some(name) = self.cfg.credential.clone() else {
            return;
        };
        let ev = (!evidence.is_empty()).then(|| evidence.chars().take(500).collect());
        if let Some(r) = self.report_credential(&name, state, until, ev).await {
            match (&r.ignored, r.marked) {
                (_, true) => tracing::info!(
                    "credential {name} marked {state} on the hub — every seat on it parks"
                ),
                (Some(why), false) => tracing::info!("credential {name}: {why}"),
                (None, false) => {}
            }
            let now = trantor_proto::now_ms();
            self.health
                .quota
                .cached
                .insert(name, (Instant::now(), blocking(&r, now)));
        }
    }

    /// Park before a turn when the seat's credential is exhausted (the circuit breaker):
    /// `true` when it parked (no turn may run).
    pub async fn park_if_credential_exhausted(&mut self, max_age_ms: u64) -> bool {
        let Some((reason, until, evidence)) = self.credential_block(max_age_ms).await else {
            return false;
        };
        let batch = crate::seat::rules::turn_batch(&self.delivery.q.wake).to_vec();
        let assigners = crate::triage::receipt::assigners(&batch, &self.cfg.session);
        tracing::info!("{evidence} — parked without spawning a turn");
        self.park_seat(
            &reason,
            self.delivery.q.wake.len(),
            (until != crate::seat::park::NEVER).then_some(until),
            evidence,
            &assigners,
        )
        .await;
        true
    }

    /// Why a turn on `card` may not run under its card's or project's budget (docs/runner.md
    /// §12.6), asked of the hub; `None` when it may, or when the hub does not answer (fails
    /// open, as the credential check does: the original hub has no budgets).
    async fn budget_block(&self, card: i64) -> Option<String> {
        let q = [
            ("project", self.cfg.project.clone()),
            ("card", card.max(0).to_string()),
        ];
        match self
            .hub
            .reads
            .hub
            .get::<BudgetCheck>("/budgets/check", &q)
            .await
        {
            Ok(c) if !c.ok => Some(if c.reason.is_empty() {
                "over its budget".to_string()
            } else {
                c.reason
            }),
            Ok(_) => None,
            Err(e) => {
                tracing::debug!("/budgets/check: {e}");
                None
            }
        }
    }

    /// Park before a turn on `card` that its budget cannot afford: `budget`, unbounded, the
    /// held wakes kept and the assigners told; `true` when it parked (no turn may run).
    pub async fn park_if_over_budget(&mut self, card: i64, assigners: &[Assigner]) -> bool {
        let Some(reason) = self.budget_block(card).await else {
            return false;
        };
        let evidence = format!("{reason} — raise it with `trantor budget set`");
        tracing::info!("{evidence} — parked without spawning a turn");
        self.park_seat(
            "budget",
            self.delivery.q.wake.len(),
            None,
            evidence,
            assigners,
        )
        .await;
        self.health.quota.budget_park = Some((card, Instant::now()));
        true
    }

    /// While parked on a budget, ask again every [`BUDGET_RECHECK_MS`]: once the budget is
    /// raised (or removed) the park ends and the held wakes are redelivered at once.
    pub async fn recheck_budget(&mut self, now: i64) {
        let Some((card, at)) = self.health.quota.budget_park else {
            return;
        };
        let parked_on_budget = self
            .health
            .park
            .as_ref()
            .is_some_and(|p| p.reason == "budget");
        if !parked_on_budget {
            self.health.quota.budget_park = None;
            return;
        }
        if at.elapsed() < Duration::from_millis(BUDGET_RECHECK_MS) {
            return;
        }
        if self.budget_block(card).await.is_some() {
            self.health.quota.budget_park = Some((card, Instant::now()));
            return;
        }
        self.health.quota.budget_park = None;
        self.unpark("the budget allows the turn again");
        self.delivery.retry_at = now;
        self.phase("idle", crate::seat::ledger::Phase::Idle);
    }

    /// End a credential park whose reset has passed while no wake is owed (a seat with held
    /// wakes ends it with the turn that runs them).
    pub fn unpark_after_reset(&mut self, now: i64) {
        if let Some(p) = &self.health.park
            && p.reason == "exhausted"
            && p.until != crate::seat::park::NEVER
            && now >= p.until
            && self.delivery.q.wake.is_empty()
        {
            self.unpark("the credential's reset passed");
            self.phase("idle", crate::seat::ledger::Phase::Idle);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use trantor_proto::credentials::CredentialInfo;

    fn reply(state: &str, until: Option<i64>) -> CredentialStateReply {
        CredentialStateReply {
            ok: true,
            marked: false,
            ignored: None,
            credential: Some(CredentialInfo {
                name: "work".into(),
                agent: "claude".into(),
                state: state.into(),
                until,
                proved_by: Some("claude:p".into()),
                last_evidence: Some("usage limit".into()),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn only_an_exhaustion_still_in_force_blocks() {
        let (reason, until, ev) =
            blocking(&reply("exhausted", Some(5_000)), 1_000).expect("blocks");
        assert_eq!((reason.as_str(), until), ("exhausted", 5_000));
        assert!(ev.contains("credential work exhausted (proved by claude:p: usage limit)"));
        assert_eq!(blocking(&reply("exhausted", Some(5_000)), 5_000), None);
        assert_eq!(blocking(&reply("exhausted", None), 0), None);
        assert_eq!(blocking(&reply("ok", Some(5_000)), 0), None);
        let (reason, until, ev) = blocking(&reply("auth", None), 0).expect("blocks");
        assert_eq!((reason.as_str(), until), ("auth", crate::seat::park::NEVER));
        assert!(ev.contains("credential work refused (auth)"), "{ev}");
    }
}

//! One delivery attempt of the held wakes (docs/runner.md §6, §14, §12): card binding, the
//! prompt, the turn, and the outcome branches — success (and blocked) consume the wake and send
//! the receipts; failure, no-delivery and empty back off or park; an ask holds the wake.

use crate::hub::hubio::CardRead;
use crate::periphery::nudge;
use crate::seat::Seat;
use crate::seat::ledger::Phase;
use crate::seat::park::{self, Park};
use crate::seat::rules;
use crate::seat::turnflow::{TurnInput, TurnKind, TurnResult};
use crate::sys::gitx;
use crate::triage::classify::{self, FailureClass};
use crate::triage::prompt::{self, Sections};
use crate::triage::receipt::{self, Assigner};
use crate::triage::session;
use std::collections::BTreeSet;
use std::time::Instant;
use trantor_proto::{CardStatus, Message, TaskUpdateRequest};

impl Seat {
    /// The card a wake batch binds to (docs/runner.md §19.1), with the read that decided it.
    async fn resolve_wake_card(&self, wakes: &[Message]) -> (i64, Option<CardRead>) {
        let candidate = session::served_contract_card(wakes, &self.cfg.session);
        if candidate == 0 {
            return (0, None);
        }
        match self.hub.reads.card(candidate).await {
            CardRead::Missing => {
                tracing::info!(
                    "card #{candidate} is not on the board — the mine view is the first call"
                );
                (0, None)
            }
            CardRead::Found { title, .. } if session::is_message_card_title(&title) => {
                (self.hub.reads.own_newest_open_card().await, None)
            }
            r @ CardRead::Found { .. } => (candidate, Some(r)),
            CardRead::Failed => (candidate, None),
        }
    }

    /// Deliver the held wakes: one attempt (docs/runner.md §6).
    pub async fn deliver(&mut self, wake_at: Option<Instant>) {
        if let Some(t) = wake_at {
            tracing::debug!(
                "wake path: delivery starts {:?} after the wake",
                t.elapsed()
            );
        }
        self.release_check().await;
        // The circuit breaker: another seat proved the credential exhausted — no turn.
        if self
            .park_if_credential_exhausted(crate::seat::quota::TURN_CHECK_MS)
            .await
        {
            return;
        }
        self.delivery.no_delivery_retry = false;
        let released = std::mem::take(&mut self.delivery.ask_released);
        let (mut wakes, queued_behind) = self.take_batch();
        let Some((directive, duty_plan)) = self.duty_step(&mut wakes).await else {
            return;
        };
        let direct = wakes.iter().any(|m| m.to == self.cfg.session);
        let mut trigger = if direct { "direct message" } else { "@mention" }.to_string();
        if self.delivery.fails > 0 {
            trigger.push_str(" (redelivery)");
        }
        let assigners = receipt::assigners(&wakes, &self.cfg.session);
        let base = session::contract_base(&wakes);
        let card_fut = async {
            if released {
                (self.cli.session_card, None)
            } else {
                self.resolve_wake_card(&wakes).await
            }
        };
        let ((card, card_read), main_head) = tokio::join!(card_fut, self.main_head());
        let base_card = if card > 0 {
            card
        } else {
            session::served_contract_card(&wakes, &self.cfg.session)
        };
        let base_missing = match &base {
            Some(b) if self.work.in_git && base_card > 0 => {
                !gitx::has_commit(&self.cfg.dir, b).await
            }
            _ => false,
        };
        if let Some(b) = &base
            && rules::before_turn(false, base_missing) == rules::BeforeTurn::BlockOnBase
        {
            self.block_on_base(base_card, b, &assigners).await;
            return;
        }
        // A budget the turn would spend past: park and tell the assigners instead.
        if self.park_if_over_budget(card, &assigners).await {
            return;
        }
        if let Some(t) = wake_at {
            tracing::debug!("wake path: card bound {:?} after the wake", t.elapsed());
        }
        let fresh = session::is_fresh(released, card, self.cli.session_card);
        // A `base:` line moves a fresh seat branch (clean, no commits of its own) whether or not
        // the batch names a card (docs/runner.md §19.3); a branch with work of its own stays.
        if let Some(b) = &base
            && self.work.in_worktree
        {
            self.start_at_base(b).await;
        }
        self.cli.session_card = card;
        let again = self
            .again_section(fresh, card, &wakes, directive, &card_read)
            .await;
        let topic: String = wakes
            .iter()
            .map(|m| m.text.as_str())
            .collect::<Vec<_>>()
            .join(" ");
        let text = prompt::compose(Sections {
            rules: self.rules(),
            lessons: prompt::lessons_section(&self.lessons, &format!("{trigger} {topic}")),
            context: prompt::context_section(&self.delivery.q.bcast),
            tail: prompt::TAIL.into(),
            again,
            base: base
                .clone()
                .or(main_head)
                .map(|b| format!("base: {b}"))
                .unwrap_or_default(),
            wake: prompt::wake_section(&wakes, queued_behind),
        });
        let r = self
            .run_turn(
                text,
                fresh,
                &trigger,
                TurnKind::Wake,
                TurnInput {
                    assigners: assigners.clone(),
                    card_read,
                    wake_at,
                },
            )
            .await;
        if r.superseded {
            return;
        }
        self.cli.last_turn_at = trantor_proto::now_ms();
        let outcome = r.j.outcome.clone();
        self.outcome(r, &assigners, duty_plan).await;
        // Not consumed by the outcome: the contracts stay owed (a no-op after a consume).
        self.settle_turn(false, &outcome).await;
    }

    /// The sha of the repository's `main` (the prompt's `base:` when the batch names none): read
    /// from the ref files, else from git; none outside a repository.
    async fn main_head(&self) -> Option<String> {
        match &self.work.git_common {
            Some(c) => match gitx::read_branch(c, "main") {
                Some(sha) => Some(sha),
                None => gitx::rev(&self.cfg.dir, "main").await,
            },
            None => None,
        }
    }

    /// The batch this turn carries (the oldest held wakes, docs/runner.md §5), marked as being
    /// delivered, and how many wait behind it.
    fn take_batch(&mut self) -> (Vec<Message>, usize) {
        let wakes = rules::turn_batch(&self.delivery.q.wake).to_vec();
        let queued_behind = self.delivery.q.wake.len() - wakes.len();
        self.delivery.delivering = wakes.iter().map(|m| m.id).collect();
        if queued_behind > 0 {
            tracing::info!(
                "{} queued — this turn carries the oldest {}, the rest wait for the next",
                self.delivery.q.wake.len(),
                wakes.len()
            );
        }
        (wakes, queued_behind)
    }

    /// Duty nudges (docs/runner.md §17): the batch's escalations planned, those nudged
    /// elsewhere dropped from `wakes`. The directive for the prompt and the plan to audit after
    /// the turn (empty and none without escalations); `None` when nothing is left for the model
    /// — the batch is consumed without a turn.
    async fn duty_step(
        &mut self,
        wakes: &mut Vec<Message>,
    ) -> Option<(String, Option<nudge::DutyPlan>)> {
        if !self.cfg.duty_nudges {
            return Some((String::new(), None));
        }
        let escalations: Vec<nudge::Escalation> =
            wakes.iter().flat_map(nudge::duty_escalations).collect();
        if escalations.is_empty() {
            return Some((String::new(), None));
        }
        let plan = self.plan_duty(&escalations).await;
        let dropped: BTreeSet<i64> = plan.dropped_escalations.iter().copied().collect();
        wakes.retain(|m| !dropped.contains(&m.id));
        if rules::before_turn(wakes.is_empty(), false) == rules::BeforeTurn::ConsumeNudgedElsewhere
        {
            tracing::info!(
                "every escalation in the batch is nudged elsewhere — consumed without a duplicate model wake"
            );
            self.delivery.consume();
            self.save_pending(false);
            self.save_cursor();
            return None;
        }
        Some((nudge::duty_directive(&plan), Some(plan)))
    }

    /// The prompt's "again" section: a redelivery's attempt, a fresh session's card, the card a
    /// turn citing several is bound to, the duty directive and the phase goal of the bound card.
    async fn again_section(
        &self,
        fresh: bool,
        card: i64,
        wakes: &[Message],
        directive: String,
        card_read: &Option<CardRead>,
    ) -> String {
        let mut again = Vec::new();
        if self.delivery.fails > 0 {
            again.push(format!(
                "(REDELIVERY, attempt {} — the previous attempt did not complete; the message below is still owed.)",
                self.delivery.fails + 1
            ));
        }
        if fresh {
            again.push(format!(
                "FRESH SESSION for card #{card}: your previous session belonged to another card. Read your card first (relay_board card:{card})."
            ));
        } else if card > 0 {
            let cited: BTreeSet<i64> = wakes
                .iter()
                .flat_map(|m| crate::triage::wake::card_refs(&m.text))
                .collect();
            if cited.len() > 1 {
                again.push(format!("This turn is bound to card #{card}."));
            }
        }
        if !directive.is_empty() {
            again.push(directive);
        }
        // The goal of the bound card's phase, set by the orchestrator with `POST /phase`.
        if let Some(CardRead::Found { phase, .. }) = card_read
            && !phase.is_empty()
            && let Some(goal) = self.hub.reads.phase_goal(phase).await
        {
            again.push(format!(
                "PHASE GOAL ({phase}): {}",
                prompt::cap_item(&goal, 500)
            ));
        }
        again.join("\n")
    }

    /// The rules section.
    pub fn rules(&self) -> String {
        self.cfg.rules.clone().unwrap_or_else(|| {
            prompt::default_rules(
                &self.cfg.session,
                &self.cfg.project,
                &self.work.turn_dir.to_string_lossy(),
            )
        })
    }

    /// A fresh card with a `base:` line starts the seat branch there (worktree seats only).
    async fn start_at_base(&mut self, base: &str) {
        let wt = self.work.turn_dir.clone();
        let b = base.to_string();
        let got =
            tokio::task::spawn_blocking(move || crate::periphery::worktree::start_at_base(&wt, &b))
                .await;
        match got {
            Ok(crate::periphery::worktree::BaseStart::Moved { from }) => {
                self.work.tree_cache = None;
                tracing::info!(
                    "seat branch moved to base {base} (was {})",
                    &from[..from.len().min(12)]
                )
            }
            Ok(crate::periphery::worktree::BaseStart::AlreadyThere) => {
                tracing::debug!("seat branch already at base {base}")
            }
            Ok(crate::periphery::worktree::BaseStart::Left(why)) => {
                tracing::warn!("seat branch not moved to base {base}: {why}")
            }
            Err(e) => tracing::warn!("base check failed: {e}"),
        }
    }

    async fn block_on_base(&mut self, card: i64, base: &str, assigners: &[Assigner]) {
        let note = format!("cannot resolve base {base} — blocked by the runner before any turn");
        tracing::warn!("card #{card}: {note}");
        let req = TaskUpdateRequest {
            id: card,
            status: Some(trantor_proto::CardStatus::Blocked),
            note: Some(note.clone()),
            by: Some(self.cfg.session.clone()),
            ..Default::default()
        };
        if let Err(e) = self.hub.reads.hub.task_update(&req).await {
            tracing::warn!("could not block card #{card}: {e}");
        }
        let text = format!("🛑 {} blocked card #{card}: {note}", self.cfg.session);
        if assigners.is_empty() {
            self.broadcast(text);
        } else {
            for a in assigners {
                self.hub.bus.send_outcome(receipt::to_assigner(
                    &self.cfg.session,
                    &self.cfg.project,
                    a,
                    receipt::finish(&text),
                ));
            }
        }
        self.delivery.consume();
        self.save_pending(false);
        self.save_cursor();
    }

    async fn plan_duty(&self, escalations: &[nudge::Escalation]) -> nudge::DutyPlan {
        let mut upto = std::collections::BTreeMap::new();
        for e in escalations {
            if !upto.contains_key(&e.recipient) {
                let v = self.hub.reads.delivered_up_to(&e.recipient).await;
                upto.insert(e.recipient.clone(), v);
            }
        }
        let peers = self.hub.reads.hub.peers().await.ok();
        let bus_dir = self.cfg.bus_dir.clone();
        let state = self.cfg.duty_nudge_state.clone();
        let owner = format!("{}:{}", self.runner_id, self.cli.turn + 1);
        let esc = escalations.to_vec();
        tokio::task::spawn_blocking(move || {
            nudge::plan_duty_nudges(
                &bus_dir,
                &state,
                &owner,
                &esc,
                |r| upto.get(r).copied().flatten(),
                |r| match peers
                    .as_ref()
                    .and_then(|p| p.peers.iter().find(|x| x.session == r))
                {
                    None => nudge::RecipientState::Unknown("no local session".into()),
                    Some(p) if p.phase.as_deref() == Some("working") => nudge::RecipientState::Busy,
                    Some(_) => nudge::RecipientState::Actionable,
                },
            )
        })
        .await
        .unwrap_or_default()
    }

    async fn outcome(
        &mut self,
        r: TurnResult,
        assigners: &[Assigner],
        duty: Option<nudge::DutyPlan>,
    ) {
        let now = trantor_proto::now_ms();
        // A clean duty turn audits its nudges (docs/runner.md §17).
        let mut missing = Vec::new();
        if r.ec == 0
            && let Some(plan) = duty.filter(|p| !p.targets.is_empty())
        {
            missing = self.audit_duty(&plan, now - (r.secs + 2) * 1000).await;
        }
        let ended = rules::Ended {
            ec: r.ec,
            duty_missing: !missing.is_empty(),
            asked: match &r.ask {
                Some((id, to, false)) => Some((*id, to.clone())),
                _ => None,
            },
            no_delivery: r.j.no_delivery,
            empty_turn: r.j.empty_turn,
        };
        let fails_before = self.delivery.fails;
        let disposition = rules::dispose(&ended, fails_before, &self.cfg.retry_ladder, now);
        match disposition.clone() {
            rules::Disposition::DutyRetry { fails, retry_at } => {
                self.delivery.fails = fails;
                self.delivery.retry_at = retry_at;
                tracing::warn!(
                    "duty turn skipped nudges for {} — retrying in {}",
                    missing.join(", "),
                    park::fmt_duration(retry_at - now)
                );
                self.save_pending(false);
                return;
            }
            rules::Disposition::Failed => {
                self.on_failure(&r, assigners).await;
                return;
            }
            // Asked: the contract is owed, not failed.
            rules::Disposition::HoldForAsk { id, to } => {
                tracing::info!("turn left ask #{id} to {to} — holding the wake for the answer");
                self.delivery.q.ask = id;
                self.delivery.q.ask_to = to;
                self.delivery.fails = 0;
                self.delivery.retry_at = 0;
                self.delivery.no_delivery_retry = false;
                self.save_pending(false);
                self.report_healthy();
                return;
            }
            rules::Disposition::NoDelivery { fails, retry_at } => {
                self.on_no_delivery(&r, assigners, fails, retry_at).await;
                return;
            }
            rules::Disposition::Empty { fails, retry_at } => {
                self.on_empty(&r, assigners, fails, retry_at, now).await;
                return;
            }
            rules::Disposition::Consume => {}
        }
        self.on_landed(&r, disposition.consumes(), assigners).await;
    }

    /// A turn that did not deliver (docs/runner.md §11.3): retried on the ladder with a notice
    /// to each assigner, or parked once the ladder is spent.
    async fn on_no_delivery(
        &mut self,
        r: &TurnResult,
        assigners: &[Assigner],
        fails: u32,
        retry_at: Option<i64>,
    ) {
        self.delivery.no_delivery_retry = true;
        if self
            .retry_or_park(fails, retry_at, "no-delivery", assigners)
            .await
            .is_none()
        {
            return;
        }
        let status =
            r.j.card_status_at_end
                .as_ref()
                .map_or("unknown", CardStatus::as_str);
        for a in assigners {
            let t = receipt::no_delivery(&self.cfg.session, r.card, status, r.secs, a);
            self.hub.bus.send_outcome(receipt::to_assigner(
                &self.cfg.session,
                &self.cfg.project,
                a,
                t,
            ));
        }
    }

    /// A turn that kept its wake owed: the failure count is `fails` and the queue is saved; the
    /// retry is set for `retry_at`, or, when the ladder is spent (`None`), the seat parks for
    /// `reason` and `None` comes back (docs/runner.md §11.3, §12.3).
    async fn retry_or_park(
        &mut self,
        fails: u32,
        retry_at: Option<i64>,
        reason: &str,
        assigners: &[Assigner],
    ) -> Option<i64> {
        self.delivery.fails = fails;
        self.save_pending(false);
        let Some(retry_at) = retry_at else {
            self.park_seat(reason, 0, None, String::new(), assigners)
                .await;
            return None;
        };
        self.delivery.retry_at = retry_at;
        Some(retry_at)
    }

    /// An empty turn (docs/runner.md §11.3): retried on the ladder with a broadcast, or parked
    /// once the ladder is spent.
    async fn on_empty(
        &mut self,
        r: &TurnResult,
        assigners: &[Assigner],
        fails: u32,
        retry_at: Option<i64>,
        now: i64,
    ) {
        let Some(retry_at) = self
            .retry_or_park(fails, retry_at, "empty-turn", assigners)
            .await
        else {
            return;
        };
        self.broadcast(receipt::empty(
            &self.cfg.session,
            r.secs,
            &park::fmt_duration(retry_at - now),
        ));
    }

    /// Success — and a blocked verdict, which consumes the wake too (`consumes`): the turn
    /// record says so first (docs/runner.md §24.2), then the queue drops the ids, the seat is
    /// healthy again, the docker janitor hears a card that reached testing or done, and each
    /// assigner gets its receipt.
    async fn on_landed(&mut self, r: &TurnResult, consumes: bool, assigners: &[Assigner]) {
        self.settle_turn(consumes, &r.j.outcome).await;
        self.delivery.consume();
        self.save_cursor();
        self.health.cut_chain.clear();
        self.unpark("a turn landed");
        self.reconcile_seen().await;
        self.save_pending(false);
        self.report_healthy();
        if r.card > 0
            && let Some(status @ (CardStatus::Testing | CardStatus::Done)) =
                r.j.card_status_at_end.clone()
            && let Some(mut j) = self.work.janitor.take()
        {
            let card = r.card;
            self.work.janitor = tokio::task::spawn_blocking(move || {
                j.on_card_status(card, status.as_str());
                j
            })
            .await
            .ok();
            self.flush_janitor_notices();
        }
        for a in assigners {
            let status =
                r.j.card_status_at_end
                    .as_ref()
                    .map_or("", CardStatus::as_str);
            let card = (r.card > 0).then_some((r.card, status));
            let t = receipt::done(&self.cfg.session, r.secs, r.started_ms, card, a);
            self.hub.bus.send_outcome(receipt::to_assigner(
                &self.cfg.session,
                &self.cfg.project,
                a,
                t,
            ));
        }
    }

    async fn audit_duty(&mut self, plan: &nudge::DutyPlan, turn_start: i64) -> Vec<String> {
        // Observed = the seat sent the recipient a message during the turn.
        let events = self.hub.reads.events_by_me(0).await.unwrap_or_default();
        let mut observed = BTreeSet::new();
        for t in &plan.targets {
            let nudged = events.iter().any(|e| {
                e.get("type").and_then(|v| v.as_str()) == Some("message")
                    && e.get("toSession").and_then(|v| v.as_str()) == Some(t.recipient.as_str())
                    && e.get("ts").and_then(|v| v.as_i64()).unwrap_or(0) >= turn_start
            });
            if nudged {
                observed.extend(t.ids.iter().copied());
            }
        }
        let bus_dir = self.cfg.bus_dir.clone();
        let state = self.cfg.duty_nudge_state.clone();
        let plan2 = plan.clone();
        let missing = tokio::task::spawn_blocking(move || {
            nudge::audit_duty_nudges(&bus_dir, &state, &plan2, &observed)
        })
        .await
        .unwrap_or_default();
        for t in &missing {
            let body = serde_json::json!({
                "recipient": t.recipient, "project": t.project, "kind": "skipped-nudge",
                "detail": format!("duty turn ended without nudging {:?}", t.ids),
                "by": self.cfg.session,
            });
            if let Err(e) = self
                .hub
                .reads
                .hub
                .post::<_, serde_json::Value>("/duty/failure", &body)
                .await
            {
                tracing::debug!("/duty/failure: {e}");
            }
        }
        missing.iter().map(|t| t.recipient.clone()).collect()
    }

    async fn on_failure(&mut self, r: &TurnResult, assigners: &[Assigner]) {
        let now = trantor_proto::now_ms();
        self.delivery.fails += 1;
        let (class, matched) = classify::classify_failure(
            r.real_exit.max(r.ec),
            classify::last_chars(&r.own_out, 4000),
            r.j.empty_output,
            r.j.empty_turn,
            r.cut,
        );
        let reason = if self.health.last_stalled {
            "stalled".to_string()
        } else {
            class.as_str().to_string()
        };
        tracing::info!("classified {reason} because {matched}");
        self.save_pending(false);
        self.report_failure(r.ec, "message", self.delivery.q.wake.len(), &reason);
        let next = rules::after_failure(
            &park::Facts {
                reason: &reason,
                delivery_fails: self.delivery.fails,
                last_stalled: self.health.last_stalled,
                last_cut: self.health.last_cut,
                window_ms: self.cfg.park_window_ms,
                reset_at: r.reset_at,
                now,
            },
            &self.cfg.retry_ladder,
        );
        let retry_at = match next {
            rules::AfterFailure::RetryAt(at) => at,
            rules::AfterFailure::Park(_) => {
                let evidence = if self.health.cut_chain.len() >= 2 {
                    format!(
                        "{} cut turns, last: {}",
                        self.health.cut_chain.len(),
                        self.health.cut_chain.last().cloned().unwrap_or_default()
                    )
                } else if class == FailureClass::Exhausted || class == FailureClass::Auth {
                    crate::sys::redact::redact(&matched).into_owned()
                } else {
                    r.cut_evidence.clone().unwrap_or_default()
                };
                let proof = match (reason.as_str(), r.reset_at) {
                    ("exhausted", Some(until)) => Some(("exhausted", Some(until))),
                    ("auth", _) => Some(("auth", None)),
                    _ => None,
                };
                if let Some((state, until)) = proof {
                    self.report_exhausted(state, until, &evidence).await;
                    // A pooled seat switches to a credential with quota and redelivers now.
                    if self.pool_has_quota().await {
                        tracing::info!(
                            "pool: redelivering on credential {} now",
                            self.cfg.credential.as_deref().unwrap_or("")
                        );
                        self.delivery.retry_at = 0;
                        return;
                    }
                }
                self.park_seat(
                    &reason,
                    self.delivery.q.wake.len(),
                    r.reset_at,
                    evidence,
                    assigners,
                )
                .await;
                return;
            }
        };
        self.delivery.retry_at = retry_at;
        let retry_in = park::fmt_duration(retry_at - now);
        for a in assigners {
            let t = if reason == "stalled" {
                receipt::stalled(&self.cfg.session, &retry_in, a)
            } else {
                receipt::failed(&self.cfg.session, r.ec, &reason, &retry_in, a)
            };
            self.hub.bus.send_outcome(receipt::to_assigner(
                &self.cfg.session,
                &self.cfg.project,
                a,
                t,
            ));
        }
    }

    /// Failure bookkeeping and the announce-once-per-change rule (docs/runner.md §12.2).
    pub fn report_failure(&mut self, ec: i32, trigger: &str, held: usize, reason: &str) {
        let note = self.health.fail(reason);
        let down = note.down;
        let status = if down {
            format!("down: {reason} · {} fails", note.fails)
        } else {
            format!("errored: {reason}")
        };
        self.register_status(&status);
        let hint = match reason {
            "exhausted" => " — needs `trantor swap`",
            "stalled" => {
                " — CLI silent for the whole watchdog window: check the provider, or `trantor swap`"
            }
            "auth" => " — check credentials",
            "backend-error" => " — the provider's backend failed",
            "missing-cli" => " — the CLI is not installed or not on PATH",
            "permission-rejected" => " — keep scratch under the worktree's .agent-bus-out",
            "empty-output" => " — the CLI printed nothing (max_tokens or a silent crash?)",
            _ => "",
        };
        let holding = if held > 0 {
            format!(" · holding {held} undelivered message(s) (will retry)")
        } else {
            String::new()
        };
        let text = if down {
            format!(
                "🛑 {} DOWN ({trigger}, exit {ec} · {reason} · {} fails){hint}{holding}",
                self.cfg.session, note.fails
            )
        } else {
            format!(
                "⚠️ {} turn FAILED ({trigger}, exit {ec} · {reason}){hint}{holding}",
                self.cfg.session
            )
        };
        if note.announce {
            self.alert(text);
        } else {
            tracing::info!("still {status} — already announced");
        }
    }

    /// Recovery after failures (docs/runner.md §12.2): reset, register, say so once.
    pub fn report_healthy(&mut self) {
        if !self.health.recover() {
            return;
        }
        self.register_status(&format!("active in {}", self.cfg.project));
        self.broadcast(format!("✅ {} recovered", self.cfg.session));
    }

    /// Park the seat (docs/runner.md §12.3).
    pub async fn park_seat(
        &mut self,
        reason: &str,
        held: usize,
        reset_at: Option<i64>,
        evidence: String,
        assigners: &[Assigner],
    ) {
        let now = trantor_proto::now_ms();
        let decision = rules::park_for(&park::Facts {
            reason,
            delivery_fails: self.delivery.fails,
            last_stalled: self.health.last_stalled && reason == "stalled",
            last_cut: self.health.last_cut,
            window_ms: self.cfg.park_window_ms,
            reset_at,
            now,
        });
        let held = held.max(self.delivery.q.wake.len());
        let p = Park {
            session: self.cfg.session.clone(),
            persona: self.cfg.persona.clone(),
            agent: self.cfg.agent.clone(),
            project: self.cfg.project.clone(),
            reason: decision.reason.clone(),
            until: decision.until,
            evidence: evidence.clone(),
            held,
            ts: now,
            bounded: decision.bounded,
        };
        park::write(&self.paths.park, &p);
        self.delivery.retry_at = decision.until;
        let when = (decision.until != park::NEVER).then(|| park::fmt_time(decision.until));
        if !self.health.park_announced {
            self.health.park_announced = true;
            let model = if decision.reason == "stalled" {
                format!(
                    " — {}{}",
                    self.cfg.agent,
                    if self.cfg.model.is_empty() {
                        String::new()
                    } else {
                        format!(", model {}", self.cfg.model)
                    }
                )
            } else {
                String::new()
            };
            let until = match &when {
                Some(t) => format!("redelivery stopped until {t}"),
                None => format!("until `trantor up {}`", self.cfg.agent),
            };
            // A quota or login park names the credential it is about (docs/runner.md §12.5).
            let on = match &self.cfg.credential {
                Some(c) if matches!(decision.reason.as_str(), "exhausted" | "auth") => {
                    format!(" on credential {c}")
                }
                _ => String::new(),
            };
            let mut text = format!(
                "⛔ {} PARKED ({}{model}){on} — holding {held} message(s), {until}",
                self.cfg.session, decision.reason
            );
            if decision.bounded {
                text.push_str(" · a direct message ends the park now");
            }
            if !evidence.is_empty() {
                text.push_str(&format!(" · {evidence}"));
            }
            let text = crate::sys::redact::redact(&text).into_owned();
            tracing::warn!("{text}");
            self.alert(text.clone());
            self.operator_alert(&text);
            for a in assigners {
                let t = receipt::parked(
                    &self.cfg.session,
                    &decision.reason,
                    when.as_deref(),
                    decision.bounded,
                    a,
                );
                self.hub.bus.send_outcome(receipt::to_assigner(
                    &self.cfg.session,
                    &self.cfg.project,
                    a,
                    t,
                ));
            }
        } else {
            tracing::info!("still parked ({}) — already announced", decision.reason);
        }
        self.health.park = Some(p);
        // The status says until when, so the dashboard and `trantor peers` can show it.
        let status = match &when {
            Some(t) => format!("parked ({}) · until {t}", decision.reason),
            None => format!("parked ({}) · until an operator acts", decision.reason),
        };
        self.phase(&status, Phase::Parked);
        if let Some(mut j) = self.work.janitor.take() {
            self.work.janitor = tokio::task::spawn_blocking(move || {
                j.on_park();
                j
            })
            .await
            .ok();
            self.flush_janitor_notices();
        }
    }

    fn flush_janitor_notices(&mut self) {
        if let Some(j) = self.work.janitor.as_mut() {
            for n in j.take_notices() {
                self.hub.bus.send(self.status_msg("all", n, "status"));
            }
        }
    }

    /// Append to the operator's alert file (and nothing else when notifications are off).
    fn operator_alert(&self, text: &str) {
        if self.cfg.no_desktop_notify {
            return;
        }
        let row = serde_json::json!({"ts": trantor_proto::now_ms(), "session": self.cfg.session, "text": text});
        let _ = crate::sys::fsx::append_line(&self.paths.alerts, &row.to_string());
    }

    /// End a park (docs/runner.md §12.4).
    pub fn unpark(&mut self, why: &str) {
        if self.health.park.take().is_some() || self.paths.park.exists() {
            tracing::info!("park over: {why}");
        }
        self.health.park_announced = false;
        crate::sys::fsx::remove(&self.paths.park);
    }

    /// Mark ids the seat read through its own inbox during the last turn as seen (docs/runner.md
    /// §5.4): only past the ledger as it stood when that turn started, never past what a
    /// predecessor's answered-but-unpersisted poll moved it to; with that unknown, nothing.
    pub async fn reconcile_seen(&mut self) {
        let Some(at_turn) = self.delivery.ledger_at_turn.take() else {
            return;
        };
        if let Some(upto) = self.hub.reads.delivered_up_to(&self.cfg.session).await {
            let from = self
                .delivery
                .cursor
                .max(self.delivery.replay_upto)
                .max(at_turn);
            self.delivery
                .q
                .reconcile_seen(from, upto, trantor_proto::now_ms());
        }
    }
}

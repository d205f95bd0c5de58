//! The poll loop (docs/runner.md §4): one held `/poll` at a time, so an idle seat costs one
//! socket and no CPU; a poll batch sorted into wakes, context and refusals; the release check at
//! the top of every pass; pulses; redelivery on the backoff ladder; and a bounded back-off when
//! the hub is unreachable (nothing is lost: the cursor only moves on a reply).

use crate::seat::Seat;
use crate::seat::ledger;
use crate::seat::rules;
use crate::seat::turnflow::{TurnInput, TurnKind};
use crate::triage::prompt::{self, Sections};
use crate::triage::wake;
use std::time::{Duration, Instant};
use trantor_proto::{InboxReply, Message};

/// When (into a held poll after a turn) the seat gives memory back: soon, then again after the
/// runtime's idle blocking threads (10 s keep-alive) and the client's idle connections (30 s)
/// have gone, since their teardown touches pages once more. Nothing runs after that.
const IDLE_TRIMS: [Duration; 3] = [
    Duration::from_secs(2),
    Duration::from_secs(12),
    Duration::from_secs(35),
];

impl Seat {
    /// The self-restart check (docs/runner.md §21): exec a newer, untried install in place. Returns only when
    /// there is nothing to do or the exec failed.
    pub async fn release_check(&mut self) {
        let Some(w) = self.release.as_mut() else {
            return;
        };
        let Some(target) = w.newer_available() else {
            return;
        };
        tracing::info!("a newer runner is installed ({target}) — restarting onto it");
        // The queue goes to disk unconditionally before the exec (docs/runner.md §5.2), and queued bus
        // messages (a receipt of the last turn) go out first: the new image does not have them.
        self.save_pending_durable(true).await;
        self.hub.bus.flush(Duration::from_secs(5)).await;
        let state = self.release_state();
        if let Some(w) = self.release.as_ref() {
            let e = w.exec(&target, &state);
            tracing::warn!("runner restart failed: {e:#}");
        }
    }

    /// Stop when another runner instance took the seat's fence on the hub (docs/runner.md
    /// §24.1): no further turn; the queue is on disk as it was.
    fn exit_if_superseded(&self) -> Result<(), crate::seat::fence::Superseded> {
        let Some(current) = self.hub.bus.superseded() else {
            return Ok(());
        };
        let s = crate::seat::fence::Superseded {
            session: self.cfg.session.clone(),
            instance: self.runner_id.clone(),
            current,
        };
        tracing::error!("{s}");
        Err(s)
    }

    fn pulse_due(&self, now: i64) -> bool {
        self.cfg.pulse_ms > 0 && now - self.cli.last_turn_at >= self.cfg.pulse_ms as i64
    }

    /// The poll hold: the configured hold, shortened to the next pulse or retry (docs/runner.md §4.1).
    fn hold(&self, now: i64) -> Duration {
        let pulse_in =
            (self.cfg.pulse_ms > 0).then(|| self.cli.last_turn_at + self.cfg.pulse_ms as i64 - now);
        Duration::from_secs(crate::seat::rules::poll_hold_secs(
            self.cfg.poll_hold_s,
            pulse_in,
            self.delivery.retry_in(now),
        ))
    }

    /// The loop. Returns only for a supervised exit after a park.
    pub async fn run_loop(&mut self) -> anyhow::Result<()> {
        tracing::info!(
            "waiting on the bus as {} (one held poll at a time; the poll is the heartbeat)",
            self.cfg.session
        );
        // Trim once per return to idle (after boot, then after each turn), not on every poll.
        let mut trimmed_at_turn = u64::MAX;
        loop {
            self.exit_if_superseded()?;
            self.release_check().await;
            let now = trantor_proto::now_ms();
            if let Some(p) = &self.health.park
                && self.cfg.park_max_ms > 0
            {
                let stay = (p.until.saturating_sub(p.ts)).min(self.cfg.park_max_ms as i64);
                if now >= p.ts + stay {
                    tracing::info!("supervised park exit (RUNNER_PARK_MAX_MS)");
                    return Ok(());
                }
            }
            self.unpark_after_reset(now);
            self.recheck_budget(now).await;
            if self.pulse_due(now) {
                self.pulse().await;
                continue;
            }
            if self.delivery.redelivery_due(now) {
                self.deliver(None).await;
                continue;
            }
            // An idle seat parks too when another seat proves its credential exhausted
            // (asked at most every IDLE_CHECK_MS), so its status says so before a wake comes.
            if self.health.park.is_none() && self.cfg.credential.is_some() {
                self.park_if_credential_exhausted(crate::seat::quota::IDLE_CHECK_MS)
                    .await;
            }
            let trim_now = trimmed_at_turn != self.cli.turn;
            trimmed_at_turn = self.cli.turn;
            let hold = self.hold(now);
            let wait = if self.cfg.park_max_ms > 0 && self.health.park.is_some() {
                hold.min(Duration::from_millis(self.cfg.park_max_ms))
            } else {
                hold
            };
            let asked_at = Instant::now();
            let bus = self.hub.bus.clone();
            let held = async {
                let poll = self
                    .hub
                    .poller
                    .poll(&self.cfg.session, self.delivery.cursor, wait);
                tokio::pin!(poll);
                if trim_now {
                    // Trim while the poll is held, once the turn's stragglers (register,
                    // receipts, fsyncs) are done; the held poll itself touches next to nothing.
                    let start = tokio::time::Instant::now();
                    let mut trims = IDLE_TRIMS.iter();
                    loop {
                        let Some(at) = trims.next() else {
                            break poll.await;
                        };
                        tokio::select! {
                            r = &mut poll => break r,
                            _ = tokio::time::sleep_until(start + *at) => crate::seat::idle::trim(),
                        }
                    }
                } else {
                    poll.await
                }
            };
            // A superseded runner stops at once, not at the end of the hold.
            let answer = tokio::select! {
                a = held => a,
                _ = bus.wait_superseded() => continue,
            };
            match answer {
                Ok(reply) => {
                    let arrived = Instant::now();
                    self.hub.up(&self.cfg.hub_url, self.delivery.cursor);
                    let idle_answer = reply.messages.is_empty() && !reply.rewound;
                    self.on_batch(reply, arrived).await;
                    if idle_answer && asked_at.elapsed() < Duration::from_millis(200) {
                        // A hub that answers an empty poll at once (one that ignores `wait`)
                        // must not turn this loop into a busy one.
                        tracing::debug!("empty poll answered without a hold — pausing 1s");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                }
                Err(e) => {
                    self.hub.failed(e, self.delivery.cursor).await;
                }
            }
        }
    }

    /// Handle one poll reply (docs/runner.md §4.2–§4.3).
    pub async fn on_batch(&mut self, reply: InboxReply, arrived: Instant) {
        if reply.cursor < self.delivery.cursor {
            tracing::warn!(
                "cursor rewound by hub {} -> {}",
                self.delivery.cursor,
                reply.cursor
            );
        }
        self.delivery.cursor = reply.cursor;
        if reply
            .messages
            .iter()
            .any(|m| m.from == crate::seat::quota::HUB_SENDER)
        {
            self.health.quota.cached.clear();
        }
        let mut reply = reply;
        // A contract whose turn completed never starts again (docs/runner.md §24.2).
        let machine = &self.fence.machine;
        reply.messages = rules::still_owed(std::mem::take(&mut reply.messages), |id| {
            machine.is_done(id)
        });
        if reply.messages.is_empty() {
            self.save_cursor();
            return;
        }
        self.hub
            .refresh_links_if_needed(&self.cfg.project, &reply)
            .await;
        let now = trantor_proto::now_ms();
        let outcomes = self.hub.bus.sent_outcomes();
        let t = {
            let q = &self.delivery.q;
            wake::triage(
                reply.messages,
                &self.wake_seat(),
                &outcomes,
                &self.hub.links.0,
                &|id| q.is_seen(id),
                now,
            )
        };
        let mut dirty = false;
        if !t.duplicates.is_empty() {
            tracing::info!(
                "already read through the seat's own inbox: {:?} — not waking on them",
                t.duplicates
            );
        }
        if !self.delivery.q.seen.is_empty() {
            let n = self.delivery.q.seen.len();
            self.delivery.q.prune_seen(self.delivery.cursor);
            dirty |= n != self.delivery.q.seen.len();
        }
        if t.shed > 0 {
            tracing::info!("shed {} expired hub alert(s)", t.shed);
        }
        self.tell_refused_and_demoted(&t.refused, &t.demoted);
        if !t.context.is_empty() {
            self.delivery.q.push_context(t.context);
            dirty = true;
        }
        if t.wakes.is_empty() {
            if dirty {
                self.save_pending(false);
            }
            self.save_cursor();
            return;
        }
        // What the batch does to the ask hold, a back-off and a park (docs/runner.md §4.3).
        let arrival = rules::on_arrival(
            &rules::Held {
                session: &self.cfg.session,
                ask: self.delivery.q.ask,
                ask_to: &self.delivery.q.ask_to,
                no_delivery_retry: self.delivery.no_delivery_retry,
                park: self.health.park.as_ref().map(|p| p.bounded),
                retry_at: self.delivery.retry_at,
            },
            &t.wakes,
            trantor_proto::now_ms(),
        );
        self.apply_arrival(&arrival);
        let claimed: Vec<i64> = t.wakes.iter().map(|m| m.id).collect();
        self.delivery.q.push_wakes(t.wakes);
        // The wake is on disk, fsync'd (queue first, then the cursor past it), before the runner
        // relies on having it: before it tells the hub it claimed it (docs/runner.md §24.4).
        self.save_pending_durable(false).await;
        self.save_cursor();
        self.mark_claimed(&claimed);
        tracing::debug!(
            "wake path: queue on disk {:?} after the wake",
            arrived.elapsed()
        );
        // Decided on a fresh clock, after the queue went to disk.
        let next = rules::after_queued(
            self.delivery.q.ask,
            self.delivery.retry_at,
            trantor_proto::now_ms(),
        );
        if self.hold_after_queue(next) {
            return;
        }
        self.deliver(Some(arrived)).await;
    }

    /// Tell each refused cross-project sender why nothing happened, and each sender whose
    /// messages were demoted to context (once per sender) how to get a turn (docs/runner.md §4.2).
    fn tell_refused_and_demoted(&mut self, refused: &[Message], demoted: &[Message]) {
        for m in refused {
            let sp = wake::sender_project(&m.from).unwrap_or("");
            tracing::warn!("cross-project wake #{} from {} refused", m.id, m.from);
            let mut req = self.status_msg(
                &m.from,
                format!(
                    "⛔ cross-project: {s} is {p}'s seat, not {sp}'s — dropped without acting. Link them first: trantor policy link {p} {sp} --reason \"<why>\"",
                    s = self.cfg.session,
                    p = self.cfg.project
                ),
                "status",
            );
            req.project = Some(sp.to_string());
            self.hub.bus.send(req);
        }
        let mut told = std::collections::HashSet::new();
        for m in demoted {
            if told.insert(m.from.clone()) {
                let p = wake::sender_project(&m.from)
                    .unwrap_or(&self.cfg.project)
                    .to_string();
                let mut req = self.status_msg(
                    &m.from,
                    format!(
                        "ℹ️ {} did not turn on your direct message — demoted to context: \"{}\". Re-send citing a card if it still needs a turn",
                        self.cfg.session,
                        crate::triage::receipt::excerpt(&m.text, 120)
                    ),
                    "status",
                );
                req.project = Some(p);
                self.hub.bus.send(req);
            }
        }
    }

    /// What a batch's arrival does to the ask hold and to a park or back-off (docs/runner.md
    /// §4.3), as [`rules::on_arrival`] decided it.
    fn apply_arrival(&mut self, arrival: &rules::Arrival) {
        if arrival.release_ask {
            tracing::info!(
                "the answer to ask #{} arrived — resuming the held card",
                self.delivery.q.ask
            );
            self.delivery.q.ask = 0;
            self.delivery.q.ask_to.clear();
            self.delivery.ask_released = true;
        }
        match arrival.park {
            rules::OnPark::Nothing => {}
            rules::OnPark::EndedByNewWake => {
                self.unpark("a new wake after a no-delivery");
                self.delivery.reset_backoff();
            }
            rules::OnPark::EndedByDirect => {
                self.unpark("a direct message ends a bounded park");
                self.delivery.retry_at = 0;
                self.delivery.fails = 0;
                self.health.cut_chain.clear();
            }
            rules::OnPark::Holds => {
                if let Some(p) = &self.health.park {
                    tracing::info!(
                        "parked ({}) — holding the new message; a reset or an operator ends this park",
                        p.reason
                    );
                }
            }
        }
    }

    /// Whether the queued wakes wait (for an ask's answer, or until a back-off or park ends)
    /// instead of being delivered now, said in the log.
    fn hold_after_queue(&self, next: rules::Next) -> bool {
        match next {
            rules::Next::Deliver => false,
            rules::Next::HoldForAsk => {
                tracing::info!(
                    "holding for the answer to ask #{} — {} message(s) queued behind it",
                    self.delivery.q.ask,
                    self.delivery.q.wake.len()
                );
                true
            }
            rules::Next::QueuedUntil(at) => {
                let in_s = if at == crate::seat::park::NEVER {
                    "never (parked)".to_string()
                } else {
                    crate::seat::park::fmt_duration(at - trantor_proto::now_ms())
                };
                tracing::info!(
                    "queued — {} undelivered, next attempt in {in_s}",
                    self.delivery.q.wake.len()
                );
                true
            }
        }
    }

    async fn pulse(&mut self) {
        if self
            .park_if_credential_exhausted(crate::seat::quota::TURN_CHECK_MS)
            .await
        {
            self.cli.last_turn_at = trantor_proto::now_ms();
            return;
        }
        let mission = self.cfg.mission_file.to_string_lossy().to_string();
        let text = prompt::compose(Sections {
            rules: self.rules(),
            lessons: prompt::lessons_section(&self.lessons, "pulse mission"),
            wake: format!(
                "{}\n\n{}",
                prompt::pulse(&mission),
                std::fs::read_to_string(&self.cfg.mission_file).unwrap_or_default()
            ),
            ..Default::default()
        });
        let r = self
            .run_turn(text, false, "pulse", TurnKind::Pulse, TurnInput::default())
            .await;
        if r.superseded {
            return;
        }
        self.settle_turn(false, &r.j.outcome).await;
        if r.ec != 0 {
            self.report_failure(r.ec, "pulse", self.delivery.q.wake.len(), "pulse");
        } else {
            self.reconcile_seen().await;
            self.save_pending(false);
            self.report_healthy();
        }
        self.cli.last_turn_at = trantor_proto::now_ms();
    }

    /// The kickoff turn of a normal boot (docs/runner.md §3): never parks.
    pub async fn kickoff(&mut self) {
        if self
            .park_if_credential_exhausted(crate::seat::quota::TURN_CHECK_MS)
            .await
        {
            return;
        }
        let base = self
            .cfg
            .kickoff
            .clone()
            .unwrap_or_else(|| prompt::default_kickoff(&self.cfg.session, &self.cfg.project));
        let text = prompt::compose(Sections {
            rules: self.rules(),
            lessons: prompt::lessons_section(&self.lessons, ""),
            wake: base,
            ..Default::default()
        });
        let r = self
            .run_turn(
                text,
                true,
                "kickoff",
                TurnKind::Kickoff,
                TurnInput::default(),
            )
            .await;
        if r.superseded {
            return;
        }
        self.settle_turn(false, &r.j.outcome).await;
        if r.ec != 0 {
            let (class, _) = crate::triage::classify::classify_failure(
                r.real_exit.max(r.ec),
                crate::triage::classify::last_chars(&r.own_out, 4000),
                r.j.empty_output,
                r.j.empty_turn,
                r.cut,
            );
            self.report_failure(r.ec, "kickoff", self.delivery.q.wake.len(), class.as_str());
        } else {
            self.reconcile_seen().await;
            self.save_pending(false);
        }
        self.cli.last_turn_at = trantor_proto::now_ms();
    }

    /// The release boot's notice instead of a kickoff (docs/runner.md §3).
    pub fn announce_restart(&self) {
        let text = format!("runner restarted onto {}", self.version);
        tracing::info!("{text}");
        self.ledger.append(&ledger::restart_row(&self.version));
        self.broadcast(text);
    }
}

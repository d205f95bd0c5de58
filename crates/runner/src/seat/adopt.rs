//! The shell of the seat machine (docs/runner.md §24): it performs the machine's effects — the
//! turn record on disk, the pending queue, signals to a predecessor's process group, the bus, the
//! ledger, the hub's delivery record — and feeds back what it observed (the worktree's CLI lock,
//! the evidence of an adopted turn). The decisions themselves live in [`crate::seat::machine`].

use crate::seat::Seat;
use crate::seat::fence::CliLock;
use crate::seat::machine::{Effect, Event, Evidence, MarkState, Sig};
use crate::seat::turnrec::{RecState, TurnRecord};
use std::time::Duration;

/// How often a turn waiting for another CLI to leave the worktree says so.
const WAIT_NOTE_EVERY: Duration = Duration::from_secs(60);

impl Seat {
    /// Perform effects; returns `(gather, wait)`: the machine asked for the evidence of an
    /// adopted turn, or to be ticked again after that many ms.
    pub async fn perform(&mut self, effects: Vec<Effect>) -> (bool, Option<u64>) {
        let mut gather = false;
        let mut wait = None;
        for e in effects {
            match e {
                Effect::Say(text) => {
                    tracing::warn!("{text}");
                    self.broadcast(text);
                }
                Effect::Signal { pgid, sig } => {
                    let s = match sig {
                        Sig::Term => nix::sys::signal::Signal::SIGTERM,
                        Sig::Kill => nix::sys::signal::Signal::SIGKILL,
                    };
                    if let Ok(p) = i32::try_from(pgid)
                        && p > 1
                    {
                        let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(p), s);
                    }
                }
                Effect::Gather => gather = true,
                Effect::Wait(ms) => wait = Some(ms),
                Effect::WriteRecord(rec) => {
                    let r = if rec.state == RecState::Idle {
                        rec.save_soon(&self.paths.turnrec)
                    } else {
                        rec.save(&self.paths.turnrec)
                    };
                    if let Err(e) = r {
                        tracing::error!(
                            "turn record {}: {e} — a crash now could run this turn's contracts again",
                            self.paths.turnrec.display()
                        );
                    }
                }
                Effect::Consume(ids) => {
                    self.delivery.q.consume_wakes(&ids);
                    self.delivery.delivering.retain(|i| !ids.contains(i));
                    self.save_pending(false);
                    self.save_cursor();
                }
                Effect::Requeue(_) => self.delivery.reset_backoff(),
                Effect::Mark {
                    ids,
                    state,
                    turn,
                    note,
                } => self.mark_delivery(&ids, state, turn, &note),
                Effect::Ledger(row) => self.ledger.append(&row),
            }
        }
        (gather, wait)
    }

    /// Tell the hub's delivery record (DELIVERY-WIRE.md, docs/protocol.md "Delivery"), through
    /// the ordered outbound bus (retried through an outage; nothing against a hub without it).
    pub fn mark_delivery(&self, ids: &[i64], state: MarkState, turn: u64, note: &str) {
        use trantor_proto::delivery::{DeliveryMark, MarkState as Wire};
        let wire = match state {
            MarkState::Started => Wire::Started,
            MarkState::Consumed => Wire::Consumed,
            MarkState::Requeued => Wire::Requeued,
        };
        let note = (!note.is_empty()).then(|| {
            let t = crate::sys::redact::redact(note);
            t.chars()
                .take(trantor_proto::delivery::NOTE_MAX)
                .collect::<String>()
        });
        for id in ids {
            let mut m = DeliveryMark::new(*id, &self.cfg.session, &self.runner_id, wire);
            m.turn = Some(turn);
            match wire {
                Wire::Consumed => m.outcome = note.clone(),
                Wire::Requeued => m.reason = note.clone(),
                _ => {}
            }
            self.hub.bus.mark(m);
        }
    }

    /// The wakes `ids` are the runner's now: on its disk (docs/runner.md §24.4).
    pub fn mark_claimed(&self, ids: &[i64]) {
        use trantor_proto::delivery::{DeliveryMark, MarkState as Wire};
        for id in ids {
            self.hub.bus.mark(DeliveryMark::new(
                *id,
                &self.cfg.session,
                &self.runner_id,
                Wire::Claimed,
            ));
        }
    }

    /// Consumed marks a predecessor decided but never delivered (docs/runner.md §24.3): killed
    /// after its turn record said "consumed" and before its bus reached the hub, it left the
    /// contracts open on the hub's record though their turn completed. The hub's open list,
    /// read in the background until the hub answers (at most two minutes), against the turn
    /// record's done ids: each such contract is marked consumed, once.
    pub fn resend_lost_consumed(&self) {
        use trantor_proto::delivery::{DeliveryMark, MarkState as Wire};
        let done: Vec<i64> = self.fence.machine.done_ids().to_vec();
        if done.is_empty() {
            return;
        }
        let (hub, bus) = (self.hub.poller.clone(), self.hub.bus.clone());
        let (session, instance) = (self.cfg.session.clone(), self.runner_id.clone());
        tokio::spawn(async move {
            let deadline = std::time::Instant::now() + Duration::from_secs(120);
            let open = loop {
                match hub.delivery_open(&session).await {
                    Ok(o) => break o,
                    // A hub without the record: nothing to finish.
                    Err(e) if e.status() == Some(404) => return,
                    Err(e) if std::time::Instant::now() >= deadline => {
                        tracing::warn!(
                            "could not read the hub's open deliveries to finish a predecessor's marks: {e}"
                        );
                        return;
                    }
                    Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
                }
            };
            let lost: Vec<i64> = open
                .open
                .iter()
                .map(|o| o.id)
                .filter(|id| done.contains(id))
                .collect();
            if lost.is_empty() {
                return;
            }
            tracing::info!(
                "contract(s) {lost:?} were done by a previous runner whose consumed mark never reached the hub — marking them consumed"
            );
            for id in lost {
                let mut m = DeliveryMark::new(id, &session, &instance, Wire::Consumed);
                m.outcome = Some("done by the previous runner (its mark was lost)".into());
                bus.mark(m);
            }
        });
    }

    /// Whether a CLI holds the turn directory's lock.
    fn cli_alive(&self) -> bool {
        match CliLock::held(&self.fence.cli_lock) {
            Ok(h) => h,
            Err(e) => {
                tracing::warn!("CLI lock {}: {e}", self.fence.cli_lock.display());
                false
            }
        }
    }

    /// Adopt the turn a predecessor left (docs/runner.md §24.3): finish an `ended` record, wait
    /// for a CLI that still runs (ending its group past the grace), judge the evidence, consume
    /// or requeue. Returns when no CLI of the predecessor runs in the worktree.
    pub async fn adopt_predecessor(&mut self) {
        let (rec, err) = TurnRecord::load(&self.paths.turnrec);
        if let Some(e) = err {
            tracing::error!("{e}");
            self.alert(format!(
                "⚠️ {}: {e} — its contracts stay in the pending queue",
                self.cfg.session
            ));
        }
        let alive = self.cli_alive();
        // A group id is trusted only for a started turn (it names that turn's wrapper, which
        // holds the lock while it lives); an idle record's pid file is an old turn's.
        let pgid = (rec.state == RecState::Started)
            .then(|| std::fs::read_to_string(&self.paths.turnpid).ok())
            .flatten()
            .and_then(|t| t.trim().parse::<u32>().ok());
        let adopted_ids = if rec.state == RecState::Started {
            rec.ids.clone()
        } else {
            Vec::new()
        };
        let turn_started = rec.started_at;
        let owed: Vec<trantor_proto::Message> = self
            .delivery
            .q
            .wake
            .iter()
            .filter(|m| adopted_ids.contains(&m.id))
            .cloned()
            .collect();
        let now = self.fence.now();
        let mut fx = self.fence.machine.handle(
            Event::PredecessorFound {
                rec,
                cli_alive: alive,
                pgid,
            },
            now,
        );
        loop {
            let consumed = fx
                .iter()
                .any(|e| matches!(e, Effect::Consume(ids) if !ids.is_empty()));
            let (gather, wait) = self.perform(fx).await;
            if consumed && !owed.is_empty() {
                let secs = (trantor_proto::now_ms() - turn_started).max(0) / 1000;
                self.adopted_receipts(&owed, secs, turn_started);
            }
            if gather {
                let e = self.gather_evidence().await;
                let now = self.fence.now();
                fx = self.fence.machine.handle(Event::Evidence(e), now);
                continue;
            }
            let Some(ms) = wait else { break };
            tokio::time::sleep(Duration::from_millis(ms)).await;
            let alive = self.cli_alive();
            let now = self.fence.now();
            fx = self
                .fence
                .machine
                .handle(Event::Tick { cli_alive: alive }, now);
        }
    }

    /// `✅ done` receipts for contracts an adopted turn acted on.
    fn adopted_receipts(&self, owed: &[trantor_proto::Message], secs: i64, started_ms: i64) {
        for a in crate::triage::receipt::assigners(owed, &self.cfg.session) {
            let t = crate::triage::receipt::done(&self.cfg.session, secs, started_ms, None, &a);
            self.hub
                .bus
                .send_outcome(crate::triage::receipt::to_assigner(
                    &self.cfg.session,
                    &self.cfg.project,
                    &a,
                    t,
                ));
        }
    }

    /// What the adopted turn left: the wrapper's exit status, commits since its base, its card.
    async fn gather_evidence(&self) -> Evidence {
        let rec = self
            .fence
            .machine
            .adopting_record()
            .cloned()
            .unwrap_or_default();
        let exit = crate::seat::turnrec::read_status(&self.paths.turnexit);
        let head = if self.work.in_git {
            crate::sys::gitx::head(&self.work.turn_dir).await
        } else {
            None
        };
        let new_commit = match (&rec.head, &head) {
            (Some(a), Some(b)) => a != b,
            _ => false,
        };
        let card_after = if rec.card > 0 {
            match self.hub.reads.card(rec.card).await {
                crate::hub::hubio::CardRead::Found { snap, .. } => Some(snap.status),
                _ => None,
            }
        } else {
            None
        };
        Evidence {
            exit,
            new_commit,
            card_after,
        }
    }

    /// Take the turn directory's CLI lock before a spawn, waiting while another CLI holds it
    /// (docs/runner.md §24.2). `None` when the lock file cannot be used at all (logged): the
    /// turn then runs unwrapped, as before fencing.
    pub async fn take_cli_lock(&mut self) -> Option<CliLock> {
        let mut noted: Option<std::time::Instant> = None;
        loop {
            match CliLock::try_acquire(&self.fence.cli_lock) {
                Ok(Some(l)) => return Some(l),
                Ok(None) => {
                    if noted.is_none_or(|t| t.elapsed() >= WAIT_NOTE_EVERY) {
                        tracing::warn!(
                            "another agent CLI holds {} — this turn waits for it to end (never two CLIs in one worktree)",
                            self.work.turn_dir.display()
                        );
                        noted = Some(std::time::Instant::now());
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => {
                    tracing::warn!(
                        "CLI lock {}: {e} — running this turn without it",
                        self.fence.cli_lock.display()
                    );
                    return None;
                }
            }
        }
    }

    /// Record a turn as started, durably, before its CLI is spawned (docs/runner.md §24.2).
    pub async fn record_turn_start(&mut self, rec: TurnRecord) {
        crate::sys::fsx::remove(&self.paths.turnexit);
        crate::sys::fsx::remove(&self.paths.turnpid);
        let now = self.fence.now();
        let fx = self.fence.machine.handle(Event::TurnStarting { rec }, now);
        self.perform(fx).await;
    }

    /// The turn was judged: consume its contracts (the record says so before the queue drops
    /// them) or leave them owed. A second call for the same turn does nothing.
    pub async fn settle_turn(&mut self, consumed: bool, outcome: &str) {
        let now = self.fence.now();
        let fx = self.fence.machine.handle(
            Event::TurnJudged {
                consumed,
                outcome: outcome.to_string(),
            },
            now,
        );
        self.perform(fx).await;
    }

    /// Persist the poll cursor and the floor of the owed wakes (docs/runner.md §24.4).
    pub fn save_cursor(&self) {
        let floor = self
            .delivery
            .q
            .wake
            .iter()
            .map(|m| m.id - 1)
            .min()
            .unwrap_or(self.delivery.cursor)
            .min(self.delivery.cursor);
        let body = serde_json::json!({"cursor": self.delivery.cursor, "floor": floor});
        if let Err(e) = crate::sys::fsx::write_atomic_sync_later(
            &self.paths.cursor,
            body.to_string().as_bytes(),
        ) {
            tracing::warn!("cursor file {}: {e}", self.paths.cursor.display());
        }
    }
}

/// The saved `(cursor, floor)` of a previous run, when there is one.
pub fn load_cursor(path: &std::path::Path) -> Option<(i64, i64)> {
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(path).ok()?).ok()?;
    let cursor = v.get("cursor")?.as_i64()?;
    let floor = v.get("floor").and_then(|f| f.as_i64()).unwrap_or(cursor);
    Some((cursor, floor.min(cursor)))
}

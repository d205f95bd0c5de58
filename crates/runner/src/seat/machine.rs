//! The seat's decisions as one pure state machine (docs/runner.md §24): `SeatMachine::handle(
//! event, now) -> Vec<Effect>`. No I/O happens here — the shell (`seat/adopt.rs` and the turn
//! code) performs the effects and feeds back what it observed — so every rule is a table test
//! that runs in microseconds.
//!
//! It holds the rules of fencing and adoption: what a boot does with the turn its predecessor
//! left (finish an `ended` record, wait for a CLI that still runs, end its process group past the
//! grace, judge the evidence and consume or requeue), what a turn records before its CLI starts
//! and after it is judged, and which contracts must never start again. Time is taken from the
//! monotonic clock (`Now::mono_ms`) wherever a wait is measured, so a step of the wall clock
//! neither ends a grace early nor holds it forever.

use crate::seat::turnrec::{RecState, TurnRecord};
use crate::triage::classify::card_moved;
use trantor_proto::CardStatus;

/// The time of an event: the wall clock (for records and rows) and a monotonic clock (for
/// every wait).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Now {
    /// Milliseconds since the epoch (may step).
    pub wall_ms: i64,
    /// Milliseconds on a monotonic clock (never steps).
    pub mono_ms: i64,
}

/// A signal for a process group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sig {
    /// SIGTERM.
    Term,
    /// SIGKILL.
    Kill,
}

/// What an adopted turn left behind, gathered by the shell once its CLI is gone.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Evidence {
    /// The exit status the wrapper wrote (`None`: it never wrote one — killed, or never ran).
    pub exit: Option<i32>,
    /// HEAD moved since the turn's base.
    pub new_commit: bool,
    /// The bound card's status now (when it could be read).
    pub card_after: Option<CardStatus>,
}

/// Something the machine was told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The boot read the predecessor's turn record; `cli_alive` says whether a CLI holds the
    /// worktree's CLI lock, `pgid` the wrapper's process group when known.
    PredecessorFound {
        /// The record as found.
        rec: TurnRecord,
        /// A CLI holds the worktree's lock.
        cli_alive: bool,
        /// The wrapper's process group.
        pgid: Option<u32>,
    },
    /// A tick while adopting: whether the predecessor's CLI still holds the lock.
    Tick {
        /// A CLI holds the worktree's lock.
        cli_alive: bool,
    },
    /// The adopted turn's evidence.
    Evidence(Evidence),
    /// A turn is about to spawn its CLI (the record is written first).
    TurnStarting {
        /// The record to write.
        rec: TurnRecord,
    },
    /// A turn was judged: its contracts consumed or left owed.
    TurnJudged {
        /// Consumed.
        consumed: bool,
        /// The verdict word.
        outcome: String,
    },
}

/// The state a delivery record mark carries to the hub (docs/protocol.md, DELIVERY-WIRE).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkState {
    /// The turn was recorded and its CLI spawned.
    Started,
    /// Acted on.
    Consumed,
    /// Will run again.
    Requeued,
}

/// Something the shell must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// Tell the bus (and the log) this.
    Say(String),
    /// Signal the predecessor's process group.
    Signal {
        /// The group.
        pgid: u32,
        /// The signal.
        sig: Sig,
    },
    /// Gather the adopted turn's evidence and hand it back as [`Event::Evidence`].
    Gather,
    /// Tick again after this long (still adopting).
    Wait(u64),
    /// Write the turn record (durably: before the spawn, before the queue drops ids).
    WriteRecord(TurnRecord),
    /// Drop these ids from the pending queue (idempotent) and save it.
    Consume(Vec<i64>),
    /// Keep these ids owed and deliver them without waiting out a back-off.
    Requeue(Vec<i64>),
    /// Mark the ids on the hub's delivery record.
    Mark {
        /// The ids.
        ids: Vec<i64>,
        /// The state.
        state: MarkState,
        /// The turn.
        turn: u64,
        /// The verdict (consumed) or the reason (requeued).
        note: String,
    },
    /// Append this ledger row.
    Ledger(serde_json::Value),
}

/// An adoption in progress.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Adopting {
    rec: TurnRecord,
    pgid: Option<u32>,
    since_mono: i64,
    term_at: Option<i64>,
    killed_at: Option<i64>,
}

/// How long after SIGTERM a group that is still alive gets SIGKILL.
pub const KILL_AFTER_MS: i64 = 3000;
/// How often an adoption looks again while the predecessor's CLI runs.
pub const ADOPT_TICK_MS: u64 = 100;

/// The seat's state machine (the fencing and adoption rules of docs/runner.md §24).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeatMachine {
    /// The seat's session (for the words it says).
    pub session: String,
    /// This runner's instance.
    pub instance: String,
    /// The wait for a predecessor's CLI before its group is ended, ms.
    pub grace_ms: i64,
    /// The turn record as it stands.
    pub rec: TurnRecord,
    adopting: Option<Adopting>,
}

impl SeatMachine {
    /// A machine for `session` run by `instance`, starting from the record `rec` (its done ids
    /// carry over).
    pub fn new(session: &str, instance: &str, grace_ms: u64, rec: TurnRecord) -> SeatMachine {
        SeatMachine {
            session: session.to_string(),
            instance: instance.to_string(),
            grace_ms: i64::try_from(grace_ms).unwrap_or(i64::MAX),
            rec,
            adopting: None,
        }
    }

    /// The record of the turn being adopted.
    pub fn adopting_record(&self) -> Option<&TurnRecord> {
        self.adopting.as_ref().map(|a| &a.rec)
    }

    /// A contract whose turn completed: never start it again.
    pub fn is_done(&self, id: i64) -> bool {
        self.rec.is_done(id)
    }

    /// The contracts whose turns completed (the newest, oldest first).
    pub fn done_ids(&self) -> &[i64] {
        &self.rec.done
    }

    /// Handle one event.
    pub fn handle(&mut self, ev: Event, now: Now) -> Vec<Effect> {
        match ev {
            Event::PredecessorFound {
                rec,
                cli_alive,
                pgid,
            } => self.found(rec, cli_alive, pgid, now),
            Event::Tick { cli_alive } => self.tick(cli_alive, now),
            Event::Evidence(e) => self.judge(e, now),
            Event::TurnStarting { rec } => {
                let mut rec = rec;
                rec.state = RecState::Started;
                rec.instance = self.instance.clone();
                rec.done = std::mem::take(&mut self.rec.done);
                self.rec = rec;
                let mut out = vec![Effect::WriteRecord(self.rec.clone())];
                if !self.rec.ids.is_empty() {
                    out.push(Effect::Mark {
                        ids: self.rec.ids.clone(),
                        state: MarkState::Started,
                        turn: self.rec.turn,
                        note: String::new(),
                    });
                }
                out
            }
            Event::TurnJudged { consumed, outcome } => self.close(consumed, &outcome, None),
        }
    }

    fn found(
        &mut self,
        rec: TurnRecord,
        cli_alive: bool,
        pgid: Option<u32>,
        now: Now,
    ) -> Vec<Effect> {
        let done = rec.done.clone();
        self.rec.done = done;
        match rec.state {
            RecState::Idle if !cli_alive => Vec::new(),
            RecState::Ended => {
                // Judged but not closed: finish what the predecessor decided.
                self.rec = rec;
                let ids = self.rec.ids.clone();
                let consumed = self.rec.consumed;
                let mut out = Vec::new();
                if consumed && !ids.is_empty() {
                    out.push(Effect::Consume(ids));
                }
                self.rec.idle();
                out.push(Effect::WriteRecord(self.rec.clone()));
                out
            }
            // Started, or idle with a CLI in the worktree (a record lost with its CLI alive):
            // wait for the CLI either way, and judge a started turn after it.
            _ => {
                let mut out = Vec::new();
                if cli_alive {
                    out.push(Effect::Say(format!(
                        "{} adopting turn {} of runner instance {} — its CLI (group {}) is still running in the worktree; waiting up to {} for it",
                        self.session,
                        rec.turn,
                        rec.instance,
                        pgid.map(|p| p.to_string()).unwrap_or_else(|| "unknown".into()),
                        crate::seat::park::fmt_duration(self.grace_ms),
                    )));
                }
                self.adopting = Some(Adopting {
                    rec,
                    pgid,
                    since_mono: now.mono_ms,
                    term_at: None,
                    killed_at: None,
                });
                if cli_alive {
                    out.push(Effect::Wait(ADOPT_TICK_MS));
                } else {
                    out.push(Effect::Gather);
                }
                out
            }
        }
    }

    fn tick(&mut self, cli_alive: bool, now: Now) -> Vec<Effect> {
        let session = self.session.clone();
        let grace = self.grace_ms;
        let Some(a) = self.adopting.as_mut() else {
            return Vec::new();
        };
        if !cli_alive {
            return vec![Effect::Gather];
        }
        let waited = now.mono_ms - a.since_mono;
        let mut out = Vec::new();
        match (a.term_at, a.killed_at, a.pgid) {
            (None, _, Some(pgid)) if waited >= grace => {
                a.term_at = Some(now.mono_ms);
                out.push(Effect::Say(format!(
                    "{session}: the predecessor's turn {} (group {pgid}) still runs after the {} grace — ending its process group (SIGTERM)",
                    a.rec.turn,
                    crate::seat::park::fmt_duration(grace)
                )));
                out.push(Effect::Signal {
                    pgid,
                    sig: Sig::Term,
                });
            }
            (Some(t), None, Some(pgid)) if now.mono_ms - t >= KILL_AFTER_MS => {
                a.killed_at = Some(now.mono_ms);
                out.push(Effect::Say(format!(
                    "{session}: group {pgid} ignored SIGTERM for {}s — SIGKILL",
                    KILL_AFTER_MS / 1000
                )));
                out.push(Effect::Signal {
                    pgid,
                    sig: Sig::Kill,
                });
            }
            _ => {}
        }
        out.push(Effect::Wait(ADOPT_TICK_MS));
        out
    }

    fn judge(&mut self, e: Evidence, now: Now) -> Vec<Effect> {
        let Some(a) = self.adopting.take() else {
            return Vec::new();
        };
        let ended_by_us = a.term_at.is_some();
        let rec = a.rec;
        let kind_wake = !rec.ids.is_empty();
        let moved = match (&rec.card_status, &e.card_after) {
            (Some(b), Some(af)) => card_moved(b, af),
            _ => false,
        };
        let (consumed, note) = match e.exit {
            Some(0) if !ended_by_us => {
                if rec.card > 0 && rec.card_status.is_some() && !moved && !e.new_commit {
                    (
                        false,
                        format!(
                            "adopted: exit 0 with no new commit and card #{} still {}",
                            rec.card,
                            e.card_after.as_ref().map_or("unknown", CardStatus::as_str)
                        ),
                    )
                } else {
                    (true, "adopted:exit 0".to_string())
                }
            }
            _ if ended_by_us => (
                false,
                "predecessor turn unfinished, killed after grace".to_string(),
            ),
            // SIGPIPE: the CLI died writing to its dead runner's pipe. Its work is judged by
            // what it left: a commit or a card move is a delivery.
            Some(141) if e.new_commit || moved => (
                true,
                "adopted: the CLI lost its runner's pipe (exit 141) after its work landed"
                    .to_string(),
            ),
            Some(n) => (false, format!("runner restarted mid-turn, CLI exited {n}")),
            None if rec.state == RecState::Started => (
                false,
                "runner restarted mid-turn, CLI died without an exit status".to_string(),
            ),
            None => (false, "an unrecorded CLI ended".to_string()),
        };
        let mut out = vec![Effect::Say(format!(
            "{} adopted turn {} of instance {}: {}{}",
            self.session,
            rec.turn,
            rec.instance,
            note,
            if kind_wake {
                format!(
                    " — {} contract(s) {}",
                    rec.ids.len(),
                    if consumed { "consumed" } else { "requeued" }
                )
            } else {
                String::new()
            }
        ))];
        out.push(Effect::Ledger(serde_json::json!({
            "ts": now.wall_ms, "turn": rec.turn, "adopted": true, "instance": rec.instance,
            "kind": rec.kind, "ids": rec.ids, "exit": e.exit, "newCommit": e.new_commit,
            "endedByUs": ended_by_us, "outcome": if consumed { "adopted" } else { "requeued" },
            "verdict": note,
        })));
        self.rec = rec;
        out.extend(self.close(consumed, &note, Some(())));
        out
    }

    /// Close the current record: `ended` (durable, before the queue drops ids), the effect on
    /// the queue, the mark, then `idle`.
    fn close(&mut self, consumed: bool, note: &str, adopted: Option<()>) -> Vec<Effect> {
        if self.rec.state != RecState::Started {
            return Vec::new();
        }
        let ids = self.rec.ids.clone();
        let turn = self.rec.turn;
        self.rec.end(consumed, note);
        let mut out = vec![Effect::WriteRecord(self.rec.clone())];
        if !ids.is_empty() {
            out.push(if consumed {
                Effect::Consume(ids.clone())
            } else if adopted.is_some() {
                Effect::Requeue(ids.clone())
            } else {
                // A live runner's own no-delivery or failure keeps its back-off.
                Effect::Say(String::new())
            });
            out.push(Effect::Mark {
                ids,
                state: if consumed {
                    MarkState::Consumed
                } else {
                    MarkState::Requeued
                },
                turn,
                note: note.to_string(),
            });
        }
        self.rec.idle();
        out.push(Effect::WriteRecord(self.rec.clone()));
        out.retain(|e| *e != Effect::Say(String::new()));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now(mono: i64) -> Now {
        Now {
            wall_ms: 1_700_000_000_000 + mono,
            mono_ms: mono,
        }
    }

    fn started(ids: &[i64]) -> TurnRecord {
        TurnRecord {
            state: RecState::Started,
            instance: "old".into(),
            turn: 4,
            kind: "wake".into(),
            ids: ids.to_vec(),
            head: Some("aaa".into()),
            ..Default::default()
        }
    }

    fn machine() -> SeatMachine {
        SeatMachine::new("dev:p", "new", 10_000, TurnRecord::default())
    }

    fn has(out: &[Effect], f: impl Fn(&Effect) -> bool) -> bool {
        out.iter().any(f)
    }

    /// Run an adoption from `found` to its verdict with the given evidence; returns every effect.
    fn adopt(m: &mut SeatMachine, rec: TurnRecord, alive: bool, e: Evidence) -> Vec<Effect> {
        let mut out = m.handle(
            Event::PredecessorFound {
                rec,
                cli_alive: alive,
                pgid: Some(4242),
            },
            now(0),
        );
        if alive {
            out.extend(m.handle(Event::Tick { cli_alive: false }, now(500)));
        }
        out.extend(m.handle(Event::Evidence(e), now(600)));
        out
    }

    #[test]
    fn adoption_verdicts_from_evidence() {
        // (record, evidence, consumed?, note contains)
        let mut carded = started(&[10]);
        carded.card = 7;
        carded.card_status = Some("doing".into());
        let mut tester = started(&[11]);
        tester.card = 8;
        tester.card_status = Some("testing".into());
        let table: Vec<(TurnRecord, Evidence, bool, &str)> = vec![
            // Exit 0, no card: acted on.
            (
                started(&[1, 2]),
                Evidence {
                    exit: Some(0),
                    ..Default::default()
                },
                true,
                "exit 0",
            ),
            // Exit 0 with a card that moved to testing: acted on, commit or not.
            (
                carded.clone(),
                Evidence {
                    exit: Some(0),
                    card_after: Some("testing".into()),
                    ..Default::default()
                },
                true,
                "exit 0",
            ),
            // The tester's case: testing → done delivered.
            (
                tester.clone(),
                Evidence {
                    exit: Some(0),
                    card_after: Some("done".into()),
                    ..Default::default()
                },
                true,
                "exit 0",
            ),
            // Exit 0, a commit, card unmoved: acted on.
            (
                carded.clone(),
                Evidence {
                    exit: Some(0),
                    new_commit: true,
                    card_after: Some("doing".into()),
                },
                true,
                "exit 0",
            ),
            // Exit 0, no commit, card unmoved: the no-delivery rule — owed.
            (
                carded.clone(),
                Evidence {
                    exit: Some(0),
                    card_after: Some("doing".into()),
                    ..Default::default()
                },
                false,
                "still doing",
            ),
            // Died on its dead runner's pipe after committing: acted on; without a trace: owed.
            (
                started(&[4]),
                Evidence {
                    exit: Some(141),
                    new_commit: true,
                    ..Default::default()
                },
                true,
                "exit 141",
            ),
            (
                started(&[4]),
                Evidence {
                    exit: Some(141),
                    ..Default::default()
                },
                false,
                "CLI exited 141",
            ),
            // A failed CLI: owed.
            (
                started(&[3]),
                Evidence {
                    exit: Some(1),
                    ..Default::default()
                },
                false,
                "CLI exited 1",
            ),
            // Killed with the runner's group kill, or by a machine crash: no status — owed.
            (
                started(&[3]),
                Evidence::default(),
                false,
                "without an exit status",
            ),
        ];
        for (i, (rec, e, consumed, note)) in table.into_iter().enumerate() {
            for alive in [false, true] {
                let mut m = machine();
                let ids = rec.ids.clone();
                let out = adopt(&mut m, rec.clone(), alive, e.clone());
                assert_eq!(
                    has(&out, |x| *x == Effect::Consume(ids.clone())),
                    consumed,
                    "row {i} (alive {alive}): {out:?}"
                );
                assert_eq!(
                    has(&out, |x| *x == Effect::Requeue(ids.clone())),
                    !consumed,
                    "row {i}"
                );
                assert!(
                    has(
                        &out,
                        |x| matches!(x, Effect::Mark { note: n, .. } if n.contains(note))
                    ),
                    "row {i}: {out:?}"
                );
                assert_eq!(m.rec.state, RecState::Idle, "row {i}");
                assert_eq!(ids.iter().all(|id| m.is_done(*id)), consumed, "row {i}");
                // The `ended` record is written before the queue changes.
                let ended = out.iter().position(
                    |x| matches!(x, Effect::WriteRecord(r) if r.state == RecState::Ended),
                );
                let queue = out
                    .iter()
                    .position(|x| matches!(x, Effect::Consume(_) | Effect::Requeue(_)));
                assert!(ended < queue, "row {i}: {out:?}");
            }
        }
    }

    #[test]
    fn an_ended_record_is_finished_and_an_idle_one_is_left_alone() {
        let mut m = machine();
        let mut rec = started(&[5, 6]);
        rec.end(true, "delivered");
        let out = m.handle(
            Event::PredecessorFound {
                rec: rec.clone(),
                cli_alive: false,
                pgid: None,
            },
            now(0),
        );
        assert!(has(&out, |x| *x == Effect::Consume(vec![5, 6])));
        assert!(m.is_done(5) && m.adopting_record().is_none());
        // Judged "owed" before the crash: nothing to consume, just closed.
        let mut m = machine();
        let mut rec = started(&[5]);
        rec.end(false, "no-delivery");
        let out = m.handle(
            Event::PredecessorFound {
                rec,
                cli_alive: false,
                pgid: None,
            },
            now(0),
        );
        assert!(!has(&out, |x| matches!(x, Effect::Consume(_))));
        let mut m = machine();
        let out = m.handle(
            Event::PredecessorFound {
                rec: TurnRecord::default(),
                cli_alive: false,
                pgid: None,
            },
            now(0),
        );
        assert!(out.is_empty());
    }

    #[test]
    fn a_cli_that_outlives_the_grace_gets_sigterm_then_sigkill_and_its_contracts_are_requeued() {
        let mut m = machine();
        let out = m.handle(
            Event::PredecessorFound {
                rec: started(&[9]),
                cli_alive: true,
                pgid: Some(77),
            },
            now(0),
        );
        assert!(has(
            &out,
            |x| matches!(x, Effect::Say(s) if s.contains("adopting turn 4"))
        ));
        assert!(has(&out, |x| matches!(x, Effect::Wait(_))));
        // Within the grace: only waiting.
        let out = m.handle(Event::Tick { cli_alive: true }, now(9_999));
        assert!(!has(&out, |x| matches!(x, Effect::Signal { .. })));
        let out = m.handle(Event::Tick { cli_alive: true }, now(10_000));
        assert!(has(&out, |x| *x
            == Effect::Signal {
                pgid: 77,
                sig: Sig::Term
            }));
        assert!(has(
            &out,
            |x| matches!(x, Effect::Say(s) if s.contains("SIGTERM"))
        ));
        // Ignores SIGTERM: SIGKILL after KILL_AFTER_MS, once.
        let out = m.handle(
            Event::Tick { cli_alive: true },
            now(10_000 + KILL_AFTER_MS - 1),
        );
        assert!(!has(&out, |x| matches!(x, Effect::Signal { .. })));
        let out = m.handle(Event::Tick { cli_alive: true }, now(10_000 + KILL_AFTER_MS));
        assert!(has(&out, |x| *x
            == Effect::Signal {
                pgid: 77,
                sig: Sig::Kill
            }));
        let out = m.handle(Event::Tick { cli_alive: true }, now(20_000));
        assert!(!has(&out, |x| matches!(x, Effect::Signal { .. })));
        let out = m.handle(Event::Tick { cli_alive: false }, now(20_100));
        assert_eq!(out, vec![Effect::Gather]);
        // Even an exit 0 after our SIGTERM is an interrupted turn: owed, never consumed.
        let out = m.handle(
            Event::Evidence(Evidence {
                exit: Some(0),
                ..Default::default()
            }),
            now(20_200),
        );
        assert!(has(&out, |x| *x == Effect::Requeue(vec![9])));
        assert!(has(
            &out,
            |x| matches!(x, Effect::Mark { note, state: MarkState::Requeued, .. } if note.contains("killed after grace"))
        ));
    }

    #[test]
    fn a_clock_step_neither_ends_the_grace_early_nor_holds_it_forever() {
        let mut m = machine();
        m.handle(
            Event::PredecessorFound {
                rec: started(&[9]),
                cli_alive: true,
                pgid: Some(77),
            },
            now(0),
        );
        // The wall clock jumps a day ahead: no kill (the wait is monotonic).
        let jumped = Now {
            wall_ms: now(1000).wall_ms + 86_400_000,
            mono_ms: 1000,
        };
        assert!(!has(
            &m.handle(Event::Tick { cli_alive: true }, jumped),
            |x| matches!(x, Effect::Signal { .. })
        ));
        // It jumps a day back: the grace still ends on time.
        let back = Now {
            wall_ms: now(10_000).wall_ms - 86_400_000,
            mono_ms: 10_000,
        };
        assert!(has(
            &m.handle(Event::Tick { cli_alive: true }, back),
            |x| matches!(x, Effect::Signal { sig: Sig::Term, .. })
        ));
    }

    #[test]
    fn a_turn_records_started_before_its_cli_and_remembers_what_it_consumed() {
        let mut m = machine();
        let out = m.handle(
            Event::TurnStarting {
                rec: started(&[1, 2]),
            },
            now(0),
        );
        assert!(
            matches!(&out[0], Effect::WriteRecord(r) if r.state == RecState::Started && r.instance == "new")
        );
        assert!(has(&out, |x| matches!(
            x,
            Effect::Mark {
                state: MarkState::Started,
                ..
            }
        )));
        let out = m.handle(
            Event::TurnJudged {
                consumed: true,
                outcome: "delivered".into(),
            },
            now(5),
        );
        assert!(has(&out, |x| *x == Effect::Consume(vec![1, 2])));
        assert!(m.is_done(1) && m.is_done(2));
        // The next turn keeps the done ids; a turn left owed does not add to them.
        m.handle(Event::TurnStarting { rec: started(&[3]) }, now(10));
        let out = m.handle(
            Event::TurnJudged {
                consumed: false,
                outcome: "no-delivery".into(),
            },
            now(15),
        );
        assert!(!has(&out, |x| matches!(
            x,
            Effect::Consume(_) | Effect::Requeue(_)
        )));
        assert!(has(&out, |x| matches!(
            x,
            Effect::Mark {
                state: MarkState::Requeued,
                ..
            }
        )));
        assert!(m.is_done(1) && !m.is_done(3));
        // Judging twice does nothing the second time (nothing runs twice).
        assert!(
            m.handle(
                Event::TurnJudged {
                    consumed: true,
                    outcome: "x".into()
                },
                now(20)
            )
            .is_empty()
        );
    }

    #[test]
    fn rule_a_turn_left_owed_is_requeued_with_its_outcome_word_as_the_reason() {
        // (consumed, outcome, consume effect, mark state)
        let table = [
            (true, "completed", true, MarkState::Consumed),
            (true, "blocked", true, MarkState::Consumed),
            (false, "no-delivery", false, MarkState::Requeued),
            (false, "api-error", false, MarkState::Requeued),
            (false, "asked", false, MarkState::Requeued),
            (false, "empty", false, MarkState::Requeued),
        ];
        for (i, (consumed, outcome, consume, state)) in table.into_iter().enumerate() {
            let mut m = machine();
            m.handle(Event::TurnStarting { rec: started(&[7]) }, now(0));
            let out = m.handle(
                Event::TurnJudged {
                    consumed,
                    outcome: outcome.into(),
                },
                now(1),
            );
            assert_eq!(
                has(&out, |x| *x == Effect::Consume(vec![7])),
                consume,
                "row {i}"
            );
            // A live runner's own owed turn keeps its back-off: no requeue-now effect.
            assert!(!has(&out, |x| matches!(x, Effect::Requeue(_))), "row {i}");
            assert!(
                has(&out, |x| *x
                    == Effect::Mark {
                        ids: vec![7],
                        state,
                        turn: 4,
                        note: outcome.to_string(),
                    }),
                "row {i}: {out:?}"
            );
            assert_eq!(m.is_done(7), consumed, "row {i}");
        }
        // A kickoff or pulse carries no contracts: nothing to mark or consume.
        let mut m = machine();
        m.handle(Event::TurnStarting { rec: started(&[]) }, now(0));
        let out = m.handle(
            Event::TurnJudged {
                consumed: false,
                outcome: "completed".into(),
            },
            now(1),
        );
        assert!(!has(&out, |x| matches!(
            x,
            Effect::Mark { .. } | Effect::Consume(_) | Effect::Requeue(_)
        )));
    }
}

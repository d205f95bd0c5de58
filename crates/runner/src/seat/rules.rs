//! The seat's delivery rules as pure functions (docs/runner.md §4.3, §5, §6, §11.3, §12.3, §14):
//! which held wakes a poll keeps, which a turn carries, when a redelivery is due, what a
//! batch's arrival does to an ask hold, a back-off and a park, what a judged turn does to its
//! contracts (consume, requeue with its reason, back off, park, hold for an ask), and when a
//! batch counts as consumed without a turn. No I/O happens here: the shells in `seat/poll.rs`
//! and `seat/deliver.rs` gather the facts, call these, and perform what they answer. Each rule
//! has a table test (`rule_*`) that runs in microseconds; the fencing and adoption rules are in
//! the sibling [`crate::seat::machine`].

use crate::seat::park::{self, Decision, NEVER};
use crate::seat::pending::{self, BATCH_MAX};
use trantor_proto::Message;

/// The messages of a poll batch that may still act: a contract whose turn completed never
/// starts again, even if the hub hands it over a second time (docs/runner.md §24.2).
pub fn still_owed(messages: Vec<Message>, is_done: impl Fn(i64) -> bool) -> Vec<Message> {
    messages.into_iter().filter(|m| !is_done(m.id)).collect()
}

/// The wakes the next turn carries, from the queue oldest first: the oldest [`BATCH_MAX`]; the
/// rest wait for the next turn (docs/runner.md §5.2).
pub fn turn_batch(queue: &[Message]) -> &[Message] {
    &queue[..queue.len().min(BATCH_MAX)]
}

/// Held wakes are due for a redelivery: some are owed, no ask holds them, and the back-off has
/// passed (docs/runner.md §5.3, §14).
pub fn redelivery_due(owed: usize, ask: i64, retry_at: i64, now: i64) -> bool {
    owed > 0 && ask == 0 && now >= retry_at
}

/// Milliseconds until a scheduled redelivery; `None` when nothing is scheduled (nothing owed,
/// an ask holds the wakes, or a park with no end).
pub fn retry_in(owed: usize, ask: i64, retry_at: i64, now: i64) -> Option<i64> {
    (owed > 0 && ask == 0 && retry_at != NEVER).then(|| retry_at - now)
}

/// The poll hold in seconds: the configured hold (at least 1 s), shortened to the next pulse
/// or redelivery (never below 5 s, nor above the hold) (docs/runner.md §4.1).
pub fn poll_hold_secs(hold_s: u64, pulse_in_ms: Option<i64>, retry_in_ms: Option<i64>) -> u64 {
    let max = hold_s.max(1);
    let due = match (pulse_in_ms, retry_in_ms) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    match due {
        Some(ms) => ((ms.max(0) as u64).div_ceil(1000)).clamp(5.min(max), max),
        None => max,
    }
}

/// What the seat holds when a batch's wakes arrive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Held<'a> {
    /// The seat's session.
    pub session: &'a str,
    /// The held ask's message id (0 = none).
    pub ask: i64,
    /// Who the held ask went to.
    pub ask_to: &'a str,
    /// A no-delivery outcome is backing off.
    pub no_delivery_retry: bool,
    /// The park in force: `Some(bounded)`.
    pub park: Option<bool>,
    /// Earliest redelivery, ms.
    pub retry_at: i64,
}

/// What a batch's arrival does to a park.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnPark {
    /// No park, or no direct wake: nothing.
    Nothing,
    /// A new wake after a no-delivery: the park (if any) ends and the back-off is forgotten.
    EndedByNewWake,
    /// A direct wake ends a bounded park: the park, the back-off and the cut chain end.
    EndedByDirect,
    /// An unbounded park holds the new message.
    Holds,
}

/// After the batch is queued: deliver now, or why not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Deliver the held wakes now.
    Deliver,
    /// An ask holds them (queued behind it, no turn).
    HoldForAsk,
    /// Queued until the back-off's retry time (ms; [`NEVER`] while parked).
    QueuedUntil(i64),
}

/// What a batch of wakes does (docs/runner.md §4.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arrival {
    /// The answer to the held ask arrived: the hold is released.
    pub release_ask: bool,
    /// The park and back-off consequence.
    pub park: OnPark,
    /// The retry time after this batch (0 once a back-off is forgotten).
    pub retry_at: i64,
    /// Deliver now or hold.
    pub next: Next,
}

/// The rules of a batch of wakes arriving (docs/runner.md §4.3): an answer releases the ask
/// hold; a new wake after a no-delivery is delivered now (and ends a park); a direct wake ends a
/// bounded park, an unbounded one holds; then, with an ask still held or before the retry time,
/// the wakes stay queued, else they are delivered.
pub fn on_arrival(h: &Held<'_>, wakes: &[Message], now: i64) -> Arrival {
    let release_ask = h.ask != 0
        && wakes
            .iter()
            .any(|m| m.to == h.session && (m.re == Some(h.ask) || m.from == h.ask_to));
    let ask = if release_ask { 0 } else { h.ask };
    let mut retry_at = h.retry_at;
    let direct = wakes.iter().any(|m| m.to == h.session);
    let park = if h.no_delivery_retry {
        retry_at = 0;
        OnPark::EndedByNewWake
    } else {
        match h.park {
            Some(true) if direct => {
                retry_at = 0;
                OnPark::EndedByDirect
            }
            Some(false) if direct => OnPark::Holds,
            _ => OnPark::Nothing,
        }
    };
    Arrival {
        release_ask,
        park,
        retry_at,
        next: after_queued(ask, retry_at, now),
    }
}

/// Once the wakes are queued (and on disk): with an ask held they wait behind it, before the
/// retry time they wait for it, else they are delivered now (docs/runner.md §4.3).
pub fn after_queued(ask: i64, retry_at: i64, now: i64) -> Next {
    if ask != 0 {
        Next::HoldForAsk
    } else if now < retry_at {
        Next::QueuedUntil(retry_at)
    } else {
        Next::Deliver
    }
}

/// What a delivery does before any turn (docs/runner.md §6, §17, §19.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BeforeTurn {
    /// Run the turn.
    Run,
    /// Every escalation in the batch is nudged elsewhere: consumed without a model wake.
    ConsumeNudgedElsewhere,
    /// The batch's base is not in the repository: block the card, consume the batch.
    BlockOnBase,
}

/// Whether a delivery runs a turn, or consumes its batch without one: `nothing_left` when duty
/// planning dropped every wake of the batch; `base_missing` when the batch names a base the
/// repository does not have and a card to block.
pub fn before_turn(nothing_left: bool, base_missing: bool) -> BeforeTurn {
    if nothing_left {
        BeforeTurn::ConsumeNudgedElsewhere
    } else if base_missing {
        BeforeTurn::BlockOnBase
    } else {
        BeforeTurn::Run
    }
}

/// How a wake turn ended, as the outcome rules see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ended {
    /// The effective exit (0 = success).
    pub ec: i32,
    /// A duty turn left some planned nudges undone.
    pub duty_missing: bool,
    /// The unanswered ask the turn left: `(id, to)`.
    pub asked: Option<(i64, String)>,
    /// The judge said no-delivery.
    pub no_delivery: bool,
    /// The judge said empty.
    pub empty_turn: bool,
}

/// What a judged wake turn does to its contracts (docs/runner.md §11.3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Disposition {
    /// A clean duty turn skipped nudges: owed, retried on the ladder.
    DutyRetry {
        /// Failed deliveries of the batch, this one included.
        fails: u32,
        /// The next attempt, ms.
        retry_at: i64,
    },
    /// A failure: owed; [`after_failure`] says whether it parks.
    Failed,
    /// The turn asked: owed, held for the answer; failures reset.
    HoldForAsk {
        /// The ask's message id.
        id: i64,
        /// Who it went to.
        to: String,
    },
    /// No delivery: owed; a new wake delivers at once.
    NoDelivery {
        /// Failed deliveries of the batch, this one included.
        fails: u32,
        /// The next attempt (`None`: the second in a row parks).
        retry_at: Option<i64>,
    },
    /// An empty turn: owed.
    Empty {
        /// Failed deliveries of the batch, this one included.
        fails: u32,
        /// The next attempt (`None`: the second in a row parks).
        retry_at: Option<i64>,
    },
    /// Completed or blocked: the wakes are consumed.
    Consume,
}

impl Disposition {
    /// The turn's contracts count as acted on (docs/runner.md §5.1): only a landed turn
    /// (completed or blocked) consumes; everything else leaves them owed and they are requeued
    /// with the outcome word as the reason.
    pub fn consumes(&self) -> bool {
        matches!(self, Disposition::Consume)
    }
}

/// A second no-delivery or empty turn in a row parks (docs/runner.md §11.3, §12.3).
pub const PARK_AFTER: u32 = 2;

/// The outcome rules of a wake turn (docs/runner.md §11.3, §14, §17), in precedence order: a
/// clean duty turn that skipped nudges retries; a failure is a failure; an unanswered ask holds;
/// no-delivery and empty back off on the `ladder` and park the second time in a row; else the
/// wakes are consumed. `fails` is the batch's failed deliveries before this turn.
pub fn dispose(e: &Ended, fails: u32, ladder: &[u64], now: i64) -> Disposition {
    let retry = |n: u32| now + pending::backoff_ms(ladder, n) as i64;
    if e.ec == 0 && e.duty_missing {
        return Disposition::DutyRetry {
            fails: fails + 1,
            retry_at: retry(fails + 1),
        };
    }
    if e.ec != 0 {
        return Disposition::Failed;
    }
    if let Some((id, to)) = &e.asked {
        return Disposition::HoldForAsk {
            id: *id,
            to: to.clone(),
        };
    }
    let n = fails + 1;
    let retry_at = (n < PARK_AFTER).then(|| retry(n));
    if e.no_delivery {
        return Disposition::NoDelivery { fails: n, retry_at };
    }
    if e.empty_turn {
        return Disposition::Empty { fails: n, retry_at };
    }
    Disposition::Consume
}

/// What a failed delivery does next.
#[derive(Debug, Clone, PartialEq)]
pub enum AfterFailure {
    /// Park (docs/runner.md §12.3).
    Park(Decision),
    /// Retry at this time, ms (the ladder).
    RetryAt(i64),
}

/// The failure rule (docs/runner.md §12.3): the `fails`-th failed delivery in a row (this one
/// included) with its class `reason` parks by [`park::decide`], else retries on the ladder.
pub fn after_failure(f: &park::Facts<'_>, ladder: &[u64]) -> AfterFailure {
    match park::decide(f) {
        Some(d) => AfterFailure::Park(d),
        None => AfterFailure::RetryAt(f.now + pending::backoff_ms(ladder, f.delivery_fails) as i64),
    }
}

/// The park a seat takes for `reason` once it decided to park: the rule's decision when it has
/// one (counting at least two failures), else an unbounded park until an operator acts.
pub fn park_for(f: &park::Facts<'_>) -> Decision {
    let f = park::Facts {
        delivery_fails: f.delivery_fails.max(PARK_AFTER),
        ..*f
    };
    park::decide(&f).unwrap_or(Decision {
        reason: f.reason.to_string(),
        until: NEVER,
        bounded: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const LADDER: [u64; 3] = [30_000, 60_000, 120_000];

    fn msg(id: i64, from: &str, to: &str, re: Option<i64>) -> Message {
        Message {
            id,
            ts: 0,
            from: from.into(),
            to: to.into(),
            project: "p".into(),
            text: format!("m{id}"),
            re,
            kind: None,
            wake: None,
        }
    }

    fn held() -> Held<'static> {
        Held {
            session: "dev:p",
            ask: 0,
            ask_to: "",
            no_delivery_retry: false,
            park: None,
            retry_at: 0,
        }
    }

    #[test]
    fn rule_a_contract_whose_turn_completed_never_starts_again() {
        // (ids in the batch, done ids, kept)
        let table: [(&[i64], &[i64], &[i64]); 4] = [
            (&[1, 2, 3], &[], &[1, 2, 3]),
            (&[1, 2, 3], &[2], &[1, 3]),
            (&[4], &[4], &[]),
            (&[], &[1], &[]),
        ];
        for (i, (ids, done, kept)) in table.into_iter().enumerate() {
            let batch = ids
                .iter()
                .map(|id| msg(*id, "a:p", "dev:p", None))
                .collect();
            let got: Vec<i64> = still_owed(batch, |id| done.contains(&id))
                .iter()
                .map(|m| m.id)
                .collect();
            assert_eq!(got, kept, "row {i}");
        }
    }

    #[test]
    fn rule_a_turn_carries_the_oldest_batch_and_the_rest_wait() {
        // (queued, carried)
        for (queued, carried) in [(0, 0), (1, 1), (BATCH_MAX, BATCH_MAX), (80, BATCH_MAX)] {
            let q: Vec<Message> = (1..=queued as i64)
                .map(|id| msg(id, "a:p", "dev:p", None))
                .collect();
            let b = turn_batch(&q);
            assert_eq!(b.len(), carried, "{queued} queued");
            if carried > 0 {
                assert_eq!(b[0].id, 1, "oldest first");
                assert_eq!(b[carried - 1].id, carried as i64);
            }
        }
    }

    #[test]
    fn rule_redelivery_is_due_when_owed_unheld_and_past_the_backoff() {
        // (owed, ask, retry_at, now, due, retry_in)
        let table = [
            (0, 0, 0, 100, false, None),
            (1, 0, 0, 100, true, Some(-100)),
            (1, 0, 200, 100, false, Some(100)),
            (1, 0, 100, 100, true, Some(0)),
            (1, 7, 0, 100, false, None),
            (2, 0, NEVER, 100, false, None),
        ];
        for (i, (owed, ask, at, now, due, inn)) in table.into_iter().enumerate() {
            assert_eq!(redelivery_due(owed, ask, at, now), due, "row {i}");
            assert_eq!(retry_in(owed, ask, at, now), inn, "row {i}");
        }
    }

    #[test]
    fn rule_the_poll_hold_is_shortened_to_the_next_pulse_or_retry_but_not_below_5s() {
        // (hold, pulse in, retry in, secs)
        let table = [
            (25, None, None, 25),
            (0, None, None, 1),
            (25, Some(12_000), None, 12),
            (25, None, Some(1), 5),
            (25, Some(-3), None, 5),
            (25, Some(60_000), Some(8_500), 9),
            (25, Some(600_000), None, 25),
            (3, Some(1000), None, 3),
        ];
        for (i, (hold, pulse, retry, secs)) in table.into_iter().enumerate() {
            assert_eq!(poll_hold_secs(hold, pulse, retry), secs, "row {i}");
        }
    }

    #[test]
    fn rule_an_answer_releases_the_ask_hold() {
        // (ask, ask_to, the wake, released)
        let table = [
            (0, "", msg(9, "qa:p", "dev:p", Some(5)), false),
            (5, "qa:p", msg(9, "x:p", "dev:p", Some(5)), true),
            (5, "qa:p", msg(9, "qa:p", "dev:p", None), true),
            (5, "qa:p", msg(9, "x:p", "dev:p", Some(4)), false),
            // A broadcast is not the answer.
            (5, "qa:p", msg(9, "qa:p", "all", Some(5)), false),
        ];
        for (i, (ask, to, m, released)) in table.into_iter().enumerate() {
            let h = Held {
                ask,
                ask_to: to,
                ..held()
            };
            let a = on_arrival(&h, &[m], 0);
            assert_eq!(a.release_ask, released, "row {i}");
            let expect = if ask != 0 && !released {
                Next::HoldForAsk
            } else {
                Next::Deliver
            };
            assert_eq!(a.next, expect, "row {i}");
        }
    }

    #[test]
    fn rule_a_new_wake_after_a_no_delivery_is_delivered_now_and_a_direct_one_ends_a_bounded_park() {
        let direct = msg(3, "lead:p", "dev:p", None);
        let mention = msg(4, "lead:p", "all", None);
        // (no-delivery retry, park, retry_at, wake, park outcome, next)
        let table = [
            (false, None, 0, &direct, OnPark::Nothing, Next::Deliver),
            (
                false,
                None,
                5_000,
                &direct,
                OnPark::Nothing,
                Next::QueuedUntil(5_000),
            ),
            (
                true,
                None,
                5_000,
                &mention,
                OnPark::EndedByNewWake,
                Next::Deliver,
            ),
            (
                true,
                Some(false),
                NEVER,
                &mention,
                OnPark::EndedByNewWake,
                Next::Deliver,
            ),
            (
                false,
                Some(true),
                9_000,
                &direct,
                OnPark::EndedByDirect,
                Next::Deliver,
            ),
            (
                false,
                Some(true),
                9_000,
                &mention,
                OnPark::Nothing,
                Next::QueuedUntil(9_000),
            ),
            (
                false,
                Some(false),
                NEVER,
                &direct,
                OnPark::Holds,
                Next::QueuedUntil(NEVER),
            ),
        ];
        for (i, (ndr, park, at, m, on_park, next)) in table.into_iter().enumerate() {
            let h = Held {
                no_delivery_retry: ndr,
                park,
                retry_at: at,
                ..held()
            };
            let a = on_arrival(&h, std::slice::from_ref(m), 1_000);
            assert_eq!(a.park, on_park, "row {i}");
            assert_eq!(a.next, next, "row {i}");
            assert_eq!(
                a.retry_at == 0,
                matches!(on_park, OnPark::EndedByNewWake | OnPark::EndedByDirect) || at == 0,
                "row {i}"
            );
        }
        // An ask still held wins over a forgotten back-off.
        let h = Held {
            ask: 8,
            ask_to: "qa:p",
            no_delivery_retry: true,
            retry_at: 5_000,
            ..held()
        };
        assert_eq!(on_arrival(&h, &[direct], 0).next, Next::HoldForAsk);
    }

    #[test]
    fn rule_a_delivery_consumes_without_a_turn_when_nudged_elsewhere_or_its_base_is_missing() {
        let table = [
            (false, false, BeforeTurn::Run),
            (true, false, BeforeTurn::ConsumeNudgedElsewhere),
            (true, true, BeforeTurn::ConsumeNudgedElsewhere),
            (false, true, BeforeTurn::BlockOnBase),
        ];
        for (i, (nothing, base, want)) in table.into_iter().enumerate() {
            assert_eq!(before_turn(nothing, base), want, "row {i}");
        }
    }

    #[test]
    fn rule_a_judged_turn_consumes_requeues_backs_off_parks_or_holds() {
        let ok = Ended {
            ec: 0,
            duty_missing: false,
            asked: None,
            no_delivery: false,
            empty_turn: false,
        };
        let now = 1_000;
        // (how it ended, fails before, disposition)
        let table = [
            (ok.clone(), 0, Disposition::Consume),
            // Blocked and completed are the same here: consumed.
            (ok.clone(), 3, Disposition::Consume),
            (
                Ended {
                    duty_missing: true,
                    ..ok.clone()
                },
                0,
                Disposition::DutyRetry {
                    fails: 1,
                    retry_at: now + 30_000,
                },
            ),
            // A failure wins over a skipped nudge, an ask, a no-delivery.
            (
                Ended {
                    ec: 1,
                    duty_missing: true,
                    asked: Some((5, "qa:p".into())),
                    no_delivery: true,
                    ..ok.clone()
                },
                0,
                Disposition::Failed,
            ),
            (
                Ended {
                    asked: Some((5, "qa:p".into())),
                    no_delivery: true,
                    ..ok.clone()
                },
                1,
                Disposition::HoldForAsk {
                    id: 5,
                    to: "qa:p".into(),
                },
            ),
            (
                Ended {
                    no_delivery: true,
                    ..ok.clone()
                },
                0,
                Disposition::NoDelivery {
                    fails: 1,
                    retry_at: Some(now + 30_000),
                },
            ),
            // The second in a row parks.
            (
                Ended {
                    no_delivery: true,
                    ..ok.clone()
                },
                1,
                Disposition::NoDelivery {
                    fails: 2,
                    retry_at: None,
                },
            ),
            // No-delivery wins over empty.
            (
                Ended {
                    no_delivery: true,
                    empty_turn: true,
                    ..ok.clone()
                },
                0,
                Disposition::NoDelivery {
                    fails: 1,
                    retry_at: Some(now + 30_000),
                },
            ),
            (
                Ended {
                    empty_turn: true,
                    ..ok.clone()
                },
                0,
                Disposition::Empty {
                    fails: 1,
                    retry_at: Some(now + 30_000),
                },
            ),
            (
                Ended {
                    empty_turn: true,
                    ..ok.clone()
                },
                4,
                Disposition::Empty {
                    fails: 5,
                    retry_at: None,
                },
            ),
        ];
        for (i, (e, fails, want)) in table.into_iter().enumerate() {
            let got = dispose(&e, fails, &LADDER, now);
            assert_eq!(got, want, "row {i}");
            assert_eq!(got.consumes(), want == Disposition::Consume, "row {i}");
        }
    }

    fn facts(reason: &str, fails: u32) -> park::Facts<'_> {
        park::Facts {
            reason,
            delivery_fails: fails,
            last_stalled: false,
            last_cut: false,
            window_ms: 900_000,
            reset_at: None,
            now: 1_000,
        }
    }

    #[test]
    fn rule_a_failure_retries_on_the_ladder_or_parks() {
        // (reason, fails incl. this one, stalled, cut, reset_at, outcome)
        let table = [
            (
                "crashed",
                1,
                false,
                false,
                None,
                AfterFailure::RetryAt(31_000),
            ),
            ("backend-error", 2, false, false, None, {
                AfterFailure::Park(Decision {
                    reason: "api-error".into(),
                    until: 901_000,
                    bounded: true,
                })
            }),
            ("crashed", 2, true, true, None, {
                AfterFailure::Park(Decision {
                    reason: "stalled".into(),
                    until: 901_000,
                    bounded: true,
                })
            }),
            ("crashed", 2, false, true, None, {
                AfterFailure::Park(Decision {
                    reason: "time-box".into(),
                    until: 901_000,
                    bounded: true,
                })
            }),
            // Quota, auth and a refused account park at once, until the printed reset.
            ("exhausted", 1, false, false, Some(7_000_000), {
                AfterFailure::Park(Decision {
                    reason: "exhausted".into(),
                    until: 7_000_000,
                    bounded: false,
                })
            }),
            ("auth", 1, false, false, None, {
                AfterFailure::Park(Decision {
                    reason: "auth".into(),
                    until: NEVER,
                    bounded: false,
                })
            }),
        ];
        for (i, (reason, fails, stalled, cut, reset, want)) in table.into_iter().enumerate() {
            let f = park::Facts {
                last_stalled: stalled,
                last_cut: cut,
                reset_at: reset,
                ..facts(reason, fails)
            };
            assert_eq!(after_failure(&f, &LADDER), want, "row {i}");
        }
    }

    #[test]
    fn rule_a_decided_park_counts_two_failures_and_is_unbounded_without_a_window() {
        // (reason, fails, window, reason, bounded)
        let table = [
            ("no-delivery", 2, 900_000, "no-delivery", true),
            ("empty-turn", 1, 900_000, "empty-turn", true),
            ("no-delivery", 2, 0, "no-delivery", false),
            ("exhausted", 0, 900_000, "exhausted", false),
        ];
        for (i, (reason, fails, window, r, bounded)) in table.into_iter().enumerate() {
            let f = park::Facts {
                window_ms: window,
                ..facts(reason, fails)
            };
            let d = park_for(&f);
            assert_eq!((d.reason.as_str(), d.bounded), (r, bounded), "row {i}");
            assert_eq!(d.until == NEVER, !bounded, "row {i}");
        }
    }
}

//! The contract ledger's passes (schema version 8): the ledger is kept after the commit, in id
//! order, by `trantor_ledger_catch_up()`, and a read of it first waits for a pass.
//!
//! One thread per store runs the passes on its own connection. It runs one
//! - at once when a reader waits ([`Ledger::current`]): the pass covers every message committed
//!   before it began, on any hub, so the reader then sees each of them in the ledger;
//! - `pace` after the writer committed (kicked by [`Ledger::kick`]), so under a stream of sends
//!   a pass takes many batches at once (its fixed cost is a few statements, whatever it holds);
//! - every `idle` otherwise, for the messages of a hub that died before its own pass.
//!
//! A pass is one transaction: a hub killed in the middle of one leaves the ledger where the
//! last committed pass left it, and the next pass, on any hub, does the rest.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;
use trantor_store::StoreError;

use crate::{Connector, map_pg};

/// A reader waiting for the next pass.
type Waiter = oneshot::Sender<Result<(), StoreError>>;

/// What the writer, the readers and the pass thread share.
pub(crate) struct Ledger {
    state: Mutex<State>,
    wake: Condvar,
}

#[derive(Default)]
struct State {
    /// The writer committed since the last pass began.
    kicked: bool,
    /// Readers waiting for a pass that begins after they asked.
    waiters: Vec<Waiter>,
    /// The store is closing.
    closed: bool,
}

/// What a reader gets when the store closes before its pass.
fn closing() -> StoreError {
    StoreError::Unavailable {
        context: "the store is closing".into(),
        source: None,
    }
}

/// When the pass thread runs its next pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Next {
    /// Run one now.
    Now,
    /// Sleep this long (or until woken), then look again.
    Wait(Duration),
}

/// The pass thread's decision: `waiting` readers, a `kicked` writer, `since` the last pass.
fn next(waiting: bool, kicked: bool, since: Duration, pace: Duration, idle: Duration) -> Next {
    let due = |after: Duration| match after.checked_sub(since) {
        Some(left) if !left.is_zero() => Next::Wait(left),
        _ => Next::Now,
    };
    if waiting {
        Next::Now
    } else if kicked {
        due(pace.min(idle))
    } else {
        due(idle)
    }
}

impl Ledger {
    pub(crate) fn new() -> Arc<Ledger> {
        Arc::new(Ledger {
            state: Mutex::new(State::default()),
            wake: Condvar::new(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The writer committed: a pass is due within the pace.
    pub(crate) fn kick(&self) {
        let mut s = self.lock();
        if !s.kicked {
            s.kicked = true;
            self.wake.notify_one();
        }
    }

    /// Resolves once a pass that began after this call has committed: the ledger then holds
    /// every message committed before the call, on any hub.
    pub(crate) async fn current(&self) -> Result<(), StoreError> {
        let (tx, rx) = oneshot::channel();
        {
            let mut s = self.lock();
            if s.closed {
                return Err(closing());
            }
            s.waiters.push(tx);
        }
        self.wake.notify_one();
        rx.await.unwrap_or_else(|_| {
            Err(StoreError::Unavailable {
                context: "the ledger pass thread ended".into(),
                source: None,
            })
        })
    }

    /// The store is closing: the pass thread ends and waiting readers are answered.
    pub(crate) fn close(&self) {
        self.lock().closed = true;
        self.wake.notify_all();
    }
}

/// Run one pass on `client`: the highest message id the ledger now holds.
pub(crate) fn pass(client: &mut postgres::Client) -> Result<i64, StoreError> {
    client
        .query_one("SELECT trantor_ledger_catch_up()", &[])
        .and_then(|r| r.try_get(0))
        .map_err(map_pg("contracts", "ledger_pass"))
}

/// The pass thread: passes as [`next`] says, until the store closes.
pub(crate) fn pass_loop(
    connector: Arc<Connector>,
    app: String,
    ledger: Arc<Ledger>,
    pace: Duration,
    idle: Duration,
) {
    let mut client: Option<postgres::Client> = None;
    let mut last = Instant::now();
    loop {
        let waiters = {
            let mut s = ledger.lock();
            loop {
                if s.closed {
                    for w in s.waiters.drain(..) {
                        let _ = w.send(Err(closing()));
                    }
                    return;
                }
                match next(!s.waiters.is_empty(), s.kicked, last.elapsed(), pace, idle) {
                    Next::Now => break,
                    Next::Wait(d) => {
                        s = ledger
                            .wake
                            .wait_timeout(s, d)
                            .unwrap_or_else(|p| p.into_inner())
                            .0;
                    }
                }
            }
            s.kicked = false;
            std::mem::take(&mut s.waiters)
        };
        last = Instant::now();
        let result = match client.as_mut() {
            Some(c) if !c.is_closed() => pass(c),
            _ => connector.connect(&app).and_then(|mut c| {
                let r = pass(&mut c);
                client = Some(c);
                r
            }),
        };
        match &result {
            Ok(tip) => tracing::trace!(tip, "ledger pass"),
            Err(e) => {
                tracing::warn!(error = %e.report(), "ledger pass failed; the next one retries");
                client = None;
            }
        }
        for w in waiters {
            let _ = w.send(result.as_ref().map(|_| ()).map_err(Clone::clone));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// When the pass thread runs a pass: at once for a reader, within the pace after a commit,
    /// every idle period otherwise.
    #[test]
    fn a_reader_runs_a_pass_at_once_a_commit_within_the_pace() {
        let ms = Duration::from_millis;
        let (pace, idle) = (ms(50), ms(1000));
        let cases = [
            // (waiting, kicked, since the last pass, next)
            (true, false, ms(0), Next::Now),
            (true, true, ms(3), Next::Now),
            (false, true, ms(10), Next::Wait(ms(40))),
            (false, true, ms(50), Next::Now),
            (false, true, ms(70), Next::Now),
            (false, false, ms(10), Next::Wait(ms(990))),
            (false, false, ms(1000), Next::Now),
            (false, false, ms(5000), Next::Now),
        ];
        for (waiting, kicked, since, want) in cases {
            assert_eq!(
                next(waiting, kicked, since, pace, idle),
                want,
                "waiting {waiting}, kicked {kicked}, {since:?} since the last pass"
            );
        }
        // A pace longer than the idle period is cut to it.
        assert_eq!(
            next(false, true, ms(10), ms(5000), idle),
            Next::Wait(ms(990))
        );
    }
}

//! The wake registry: a held `/poll` returns the moment a message deliverable to it commits.
//!
//! Each session with at least one waiting reader has a [`Notify`]; a broadcast rings every
//! session's. A reader *enables* its `Notified` futures before it queries the store, so a commit
//! that lands after the query started is never missed: either the query sees the row, or the
//! sender's `notify_waiters` (called after its commit) finds the enabled waiter. There is no
//! re-scan timer, so an idle reader costs nothing until it is woken or its hold expires.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use tokio::sync::Notify;
use tokio::sync::futures::OwnedNotified;
use trantor_proto::BROADCAST;

/// Per-session wake slots plus the broadcast slot.
#[derive(Debug, Default)]
pub struct WakeRegistry {
    /// Keyed by the session name its first reader brought (shared with that reader's
    /// [`Ticket`], so a held poll's slot costs no copy of the name).
    slots: Mutex<HashMap<Arc<str>, Arc<Notify>>>,
    rings: AtomicU64,
}

/// A reader's registration for one session's wake slot. It owns what it holds (no borrow of
/// the registry), so a held poll can keep it while the front parks the poll; hand it back
/// with [`WakeRegistry::unsubscribe`] when the reader is done.
#[derive(Debug)]
pub struct Ticket {
    session: Arc<str>,
    slot: Arc<Notify>,
}

impl Ticket {
    /// The session this ticket waits for (the registry's own copy of the name).
    pub fn session(&self) -> &Arc<str> {
        &self.session
    }
}

impl WakeRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    fn slots(&self) -> std::sync::MutexGuard<'_, HashMap<Arc<str>, Arc<Notify>>> {
        // A panic while holding this lock cannot leave the map inconsistent (single inserts
        // and removes), so a poisoned lock is still usable.
        self.slots.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Register a reader of `session`; pair with [`WakeRegistry::unsubscribe`].
    pub fn subscribe(&self, session: &Arc<str>) -> Ticket {
        let mut slots = self.slots();
        let (key, slot) = match slots.get_key_value(&**session) {
            Some((k, v)) => (k.clone(), v.clone()),
            None => {
                let slot = Arc::new(Notify::new());
                slots.insert(session.clone(), slot.clone());
                (session.clone(), slot)
            }
        };
        Ticket { session: key, slot }
    }

    /// Release a reader's registration (the reader drops the ticket right after); the
    /// session's slot goes with its last reader.
    pub fn unsubscribe(&self, ticket: &Ticket) {
        let mut slots = self.slots();
        // Two strong references left means the map's and the ticket's: no other reader.
        if let Some(slot) = slots.get(&*ticket.session)
            && Arc::ptr_eq(slot, &ticket.slot)
            && Arc::strong_count(&ticket.slot) == 2
        {
            slots.remove(&*ticket.session);
        }
    }

    /// The wait for a message to the ticket's session or to everyone (a broadcast rings every
    /// slot). Call [`Armed::enable`] before the store query, so a commit that lands during the
    /// query still wakes it.
    pub fn armed(&self, ticket: &Ticket) -> Armed {
        Armed(ticket.slot.clone().notified_owned())
    }

    /// Wake every reader a new message addressed `to` may be deliverable to. Call after the
    /// message is committed.
    pub fn ring(&self, to: &str) {
        self.rings.fetch_add(1, Ordering::Relaxed);
        if to == BROADCAST {
            self.ring_slots();
            return;
        }
        let slot = self.slots().get(to).cloned();
        if let Some(slot) = slot {
            slot.notify_waiters();
        }
    }

    /// Wake every reader (shutdown).
    pub fn ring_everyone(&self) {
        self.ring_slots();
    }

    /// Ring every session's slot: a broadcast, or shutdown. One wake-up per held poll instead
    /// of a second, shared one it would also have to wait on; broadcasts are rare.
    fn ring_slots(&self) {
        let slots: Vec<Arc<Notify>> = self.slots().values().cloned().collect();
        for s in slots {
            s.notify_waiters();
        }
    }

    /// How many messages have rung the registry.
    pub fn rings(&self) -> u64 {
        self.rings.load(Ordering::Relaxed)
    }

    /// Sessions with at least one registered reader.
    pub fn sessions_waiting(&self) -> usize {
        self.slots().len()
    }
}

/// The wake-up of one held reader (its session's slot, which a broadcast rings too). Owned,
/// so it can live in a parked poll's state beside the ticket it came from.
#[derive(Debug)]
pub struct Armed(OwnedNotified);

impl Armed {
    fn inner(self: Pin<&mut Self>) -> Pin<&mut OwnedNotified> {
        // SAFETY: structural pinning of the one field: `Armed` has no `Drop` impl, is not
        // `Unpin` (its field is not), and never moves the field out of a pinned `Armed`.
        unsafe { self.map_unchecked_mut(|a| &mut a.0) }
    }

    /// Register the wake-up now: a ring from here on resolves this future.
    pub fn enable(self: Pin<&mut Self>) {
        self.inner().enable();
    }
}

impl Future for Armed {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.inner().poll(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn ring_after_arm_is_not_missed() {
        let reg = WakeRegistry::new();
        let sub = reg.subscribe(&Arc::from("a:p"));
        let mut armed = std::pin::pin!(reg.armed(&sub));
        armed.as_mut().enable();
        // The ring happens before anyone awaits: the enabled waiter still sees it.
        reg.ring("a:p");
        tokio::time::timeout(Duration::from_secs(1), armed)
            .await
            .expect("woken");
    }

    /// Polls `fut` exactly once: `true` when it has already resolved. No timer, so a slow
    /// machine cannot turn "not woken" into "not woken yet".
    fn resolved_now<F: std::future::Future>(fut: std::pin::Pin<&mut F>) -> bool {
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        fut.poll(&mut cx).is_ready()
    }

    #[tokio::test]
    async fn a_ring_wakes_its_own_slot_only_and_a_broadcast_wakes_everyone() {
        let reg = WakeRegistry::new();
        let a = reg.subscribe(&Arc::from("a:p"));
        let b = reg.subscribe(&Arc::from("b:p"));
        // Both armed BEFORE any ring, as /poll arms before its store query.
        let mut wa = std::pin::pin!(reg.armed(&a));
        wa.as_mut().enable();
        let mut wb = std::pin::pin!(reg.armed(&b));
        wb.as_mut().enable();
        assert!(!resolved_now(wb.as_mut()), "armed, nothing rung yet");
        // A ring for an unrelated session, and one for a session nobody waits on.
        reg.ring("c:p");
        reg.ring("a:p");
        assert!(
            !resolved_now(wb.as_mut()),
            "a ring for a:p woke b:p's armed slot"
        );
        assert!(resolved_now(wa), "a:p's own ring was missed");
        // The broadcast wakes b:p; a reader armed after every ring has nothing due.
        reg.ring(BROADCAST);
        assert!(resolved_now(wb), "a broadcast missed b:p");
        let mut after = std::pin::pin!(reg.armed(&b));
        after.as_mut().enable();
        assert!(
            !resolved_now(after),
            "armed after every ring, nothing is due"
        );
        assert_eq!(reg.rings(), 3);
    }

    #[test]
    fn slots_are_released() {
        let reg = WakeRegistry::new();
        let a = reg.subscribe(&Arc::from("a:p"));
        let b = reg.subscribe(&Arc::from("a:p"));
        assert_eq!(reg.sessions_waiting(), 1);
        reg.unsubscribe(&a);
        drop(a);
        assert_eq!(reg.sessions_waiting(), 1, "b:p still waits");
        reg.unsubscribe(&b);
        assert_eq!(reg.sessions_waiting(), 0);
    }
}

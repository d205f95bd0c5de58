//! Several hubs on one shared store (PostgreSQL): waking held polls for messages another hub
//! committed, and running periodic work only on the hub that holds the lease.
//!
//! With the embedded store both are no-ops: [`Store::watch`] and [`Store::lease`] return `None`.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio::sync::broadcast::error::RecvError;
use trantor_store::{Change, Store};

use crate::state::{AppState, FeedItem};

/// Whether this hub runs the periodic work (reaper, duty, retention) now: always on a store
/// of its own, only while holding the lease on a shared one.
pub fn runs_periodic<S: Store>(hub: &AppState<S>) -> bool {
    hub.store.lease().is_none_or(|l| l.held)
}

/// Run `pass` every `every` (the first tick skipped, so start-up is not slowed by a pass) on
/// the hub that [`runs_periodic`], until the hub shuts down. A failed pass is logged as `what`
/// and tried again at the next tick.
pub fn spawn_leased<S, F, Fut, T, E>(
    hub: AppState<S>,
    every: std::time::Duration,
    what: &'static str,
    pass: F,
) where
    S: Store,
    F: Fn(AppState<S>) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<T, E>> + Send,
    E: std::fmt::Display,
{
    tokio::spawn(async move {
        let mut shutdown = hub.shutdown.clone();
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tokio::select! {
                _ = tick.tick() => {
                    if !runs_periodic(&hub) {
                        continue;
                    }
                    if let Err(e) = pass(hub.clone()).await {
                        tracing::warn!(error = %e, "{what} pass failed; retrying next tick");
                    }
                }
                _ = shutdown.changed() => break,
            }
        }
    });
}

/// Forward changes committed by other hubs to this hub's held polls and SSE streams, until
/// shutdown. A catch-up rings the recipients it read back; one whose recipients are unknown (too
/// many missed) or a lagging receiver wakes every held poll: each re-reads its mailbox, so
/// nothing is missed, only some work repeated.
pub fn spawn<S: Store>(hub: AppState<S>) {
    let Some(mut rx) = hub.store.watch() else {
        return;
    };
    tokio::spawn(async move {
        let mut stop = hub.shutdown.clone();
        loop {
            let change = tokio::select! {
                r = rx.recv() => r,
                _ = stop.changed() => break,
            };
            match change {
                Ok(Change::Message { id, to }) => {
                    hub.wake.ring(&to);
                    if hub.streams_open() {
                        feed_message(&hub, id).await;
                    }
                }
                Ok(Change::Missed { through, to }) => {
                    tracing::debug!(through, sessions = to.len(), "shared store caught up");
                    for session in &to {
                        hub.wake.ring(session);
                    }
                }
                Ok(Change::Tip(tip)) => {
                    tracing::debug!(tip, "shared store caught up; waking every held poll");
                    hub.wake.ring_everyone();
                }
                Err(RecvError::Lagged(n)) => {
                    tracing::debug!(missed = n, "store watch lagged; waking every held poll");
                    hub.wake.ring_everyone();
                }
                Err(RecvError::Closed) => break,
            }
        }
    });
}

/// Send message `id` (committed by another hub) to this hub's SSE streams.
async fn feed_message<S: Store>(hub: &AppState<S>, id: i64) {
    hub.metrics
        .remote_messages_read
        .fetch_add(1, Ordering::Relaxed);
    match hub.store.read(move |tx| tx.message(id)).await {
        Ok(Some(m)) => {
            let _ = hub.feed.send(FeedItem::Message(Arc::new(m)));
        }
        Ok(None) => {}
        Err(e) => tracing::debug!(error = %e.report(), id, "cannot read a remote message for SSE"),
    }
}

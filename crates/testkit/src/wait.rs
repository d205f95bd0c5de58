//! Waiting on a condition with a deadline (the suite never sleeps a fixed time).

use crate::hub_request;
use std::time::{Duration, Instant};

/// Poll `cond` every 50 ms until it holds; panic naming `what` after `within` (a generous
/// deadline, never a timing assertion).
pub fn wait_until(what: &str, within: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !cond() {
        if Instant::now() > deadline {
            panic!("timed out after {within:?} waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits until the hub on `port` holds `n` polls (`/health`'s `pollsHeld`): a waiting client's
/// request has reached the hub, so what is sent next arrives after its call started.
pub fn wait_polls_held(port: u16, n: u64) {
    wait_until(
        &format!("{n} held poll(s)"),
        Duration::from_secs(60),
        || {
            hub_request(port, "GET", "/health", None)
                .is_ok_and(|(_, v)| v["pollsHeld"].as_u64() == Some(n))
        },
    );
}

/// [`wait_until`] for an async condition (a test on a runtime): polled every 50 ms until it
/// holds, panicking naming `what` after `within`.
pub async fn wait_until_async<F: std::future::Future<Output = bool>>(
    what: &str,
    within: Duration,
    mut cond: impl FnMut() -> F,
) {
    let deadline = Instant::now() + within;
    while !cond().await {
        if Instant::now() > deadline {
            panic!("timed out after {within:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

//! Freed heap handed back to the system once the hub goes quiet.
//!
//! glibc's allocator keeps what a burst of requests freed in its per-thread arenas, so a hub
//! that served a busy minute keeps that minute's high-water mark resident while it idles for
//! hours. Capping the arenas instead costs the write path 15–20 % (measured with
//! `trantor bench hub --only throughput`, `MALLOC_ARENA_MAX=2`). So the hub trims only after
//! a whole tick in which no request arrived, once per quiet spell: no cost under load, one
//! timer wake per tick at rest (docs/architecture.md §8, docs/bench-hub.md).

use crate::state::AppState;
use std::time::Duration;
use trantor_store::Store;

/// How long the hub must see no request before it trims.
pub const QUIET: Duration = Duration::from_secs(2);

/// Whether to trim at a tick, from the requests seen so far: the state between ticks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quiet {
    /// The arrival count at the last tick.
    seen: u64,
    /// Requests arrived (or the hub started) since the last trim.
    dirty: bool,
}

impl Default for Quiet {
    /// Dirty at start: opening the store and building the router free a few MB too.
    fn default() -> Self {
        Quiet {
            seen: 0,
            dirty: true,
        }
    }
}

impl Quiet {
    /// One tick with `arrived` requests counted since start: true when the tick was quiet
    /// after some traffic, that is, when to trim now.
    pub fn tick(&mut self, arrived: u64) -> bool {
        if arrived != self.seen {
            self.seen = arrived;
            self.dirty = true;
            return false;
        }
        std::mem::take(&mut self.dirty)
    }
}

/// Start the trimming task (glibc only; elsewhere the allocator is left as it is). It stops
/// when the hub shuts down.
pub fn spawn<S: Store>(hub: AppState<S>) {
    if !cfg!(all(target_os = "linux", target_env = "gnu")) {
        return;
    }
    tokio::spawn(async move {
        let mut shutdown = hub.shutdown.clone();
        let mut tick = tokio::time::interval(QUIET);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut quiet = Quiet::default();
        loop {
            tokio::select! {
                _ = tick.tick() => {
                    if quiet.tick(hub.metrics.arrived()) {
                        // Off the runtime's workers: a trim walks every arena under its lock.
                        let _ = tokio::task::spawn_blocking(release).await;
                    }
                }
                _ = shutdown.changed() => break,
            }
        }
    });
}

/// Return the free pages of every arena to the system.
fn release() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: malloc_trim only reads and updates the allocator's own state under its
        // locks; it takes no pointers.
        let started = std::time::Instant::now();
        let released = unsafe { libc::malloc_trim(0) };
        tracing::debug!(
            released,
            micros = started.elapsed().as_micros() as u64,
            "heap trimmed after a quiet spell"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::Quiet;

    #[test]
    fn trims_once_per_quiet_spell_after_start_or_traffic() {
        // (requests counted at the tick, whether it trims)
        let table: &[(u64, bool)] = &[
            (0, true),   // the first quiet tick after start: start-up's garbage
            (0, false),  // still nothing: nothing more to give back
            (5, false),  // traffic in this tick: not quiet
            (9, false),  // more traffic
            (9, true),   // a quiet tick after traffic: trim
            (9, false),  // still quiet: already trimmed
            (10, false), // one request
            (10, true),  // quiet again: trim again
            (11, false),
            (12, false), // a request in every tick: never trims
            (13, false),
        ];
        let mut q = Quiet::default();
        for (i, &(arrived, want)) in table.iter().enumerate() {
            assert_eq!(q.tick(arrived), want, "tick {i} with {arrived} arrived");
        }
    }
}

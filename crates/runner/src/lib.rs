//! The crew runner: the per-seat daemon that keeps an agent seat alive between turns.
//!
//! It waits on the hub's message bus (one held `/poll` at a time, so an idle seat costs nothing)
//! and resumes the agent's CLI only when a message for the seat arrives. Behaviour follows
//! `docs/runner.md`.
//!
//! # Layout
//!
//! The folders are layers, listed here from the top: a module uses its own layer and the ones
//! below it in this list, never one above (the order is `docs/architecture.md` §2's, and the
//! test `tests/layers.rs` holds the code, this list and that section to it). Every import names
//! the layer it crosses (`crate::sys::fsx`, `crate::triage::wake`): the crate root re-exports
//! nothing for the crate's own use.
//!
//! - `seat/`: the orchestration: the seat's state, boot, poll loop, delivery, one turn as the
//!   seat runs it, the seat machine and its shell, and the seat's own files (pending queue, park
//!   file, turn record, telemetry ledger).
//! - `turn/`: one agent CLI run: the executor with its time box and cut, the CLI drivers, the
//!   liveness watchdog, the WIP snapshot, the turn's usage report.
//! - `periphery/`: the seat's surroundings: its git worktree, the docker janitor, self-restart
//!   onto a newer release, the shared nudge ledger and duty nudges.
//! - `hub/`: the seat's traffic with the hub (tolerant reads, the ordered outbound sender).
//! - `triage/`: pure decisions, no I/O: what a poll batch means, the session per card, the
//!   prompt, the verdict of a turn, the receipts.
//! - `config.rs`: who the seat is and how it runs (identity and knobs).
//! - `sys/`: small helpers every layer uses (the bounded-command runner, atomic files, the
//!   bounded git reads on the one git command builder (`trantor_proto::git`), per-seat paths,
//!   redaction).
//!
//! The public items below are the crate's interface to the CLI and the MCP server, not aliases
//! for its own modules.

mod config;
mod hub;
mod periphery;
mod seat;
mod sys;
mod triage;
mod turn;

pub use config::{EnrollTokens, RUNNER_ENV_VARS, RunnerArgs};
pub use seat::fence::{EXIT_SUPERSEDED, Superseded};
pub use seat::park;
pub use sys::paths;
/// The agent CLI drivers and the table of CLI versions they were verified against.
pub use turn::drivers;

/// What the CLI's crew verbs (`trantor integrate`, `sync`, `swap`) share with the seat: bounded
/// git, the seat worktree's place and declaration, atomic files and the WIP snapshot — so a
/// verb and the runner agree on every path and every safety rule.
pub mod crew {
    pub use crate::periphery::worktree::{
        GitError, apply_declaration, git, git_raw, read_declaration, seat_worktree_path,
    };
    pub use crate::sys::cmd::{BoundedError, run_bounded};
    pub use crate::sys::fsx::write_atomic;
    pub use crate::turn::snapshot::{SnapshotOutcome, SnapshotWhy, snapshot_wip};
}

/// The rules and kickoff a seat runs under, for the MCP server's `crew_playbook` prompt (so a
/// person's session reads the same playbook as a seat).
pub mod playbook {
    pub use crate::triage::prompt::{default_kickoff, default_rules};
}

/// Run the seat daemon until interrupted.
pub async fn run(args: RunnerArgs) -> anyhow::Result<()> {
    // First, before anything reads the environment: a release boot's state leaves the env here.
    let release_state = periphery::release::take_release_state();
    let cfg = config::Config::from_process(&args)?;
    // Handlers go in before the boot, so a stop during the kickoff turn still ends its CLI.
    let mut stop = seat::boot::Shutdown::install();
    let bus: std::sync::Arc<std::sync::OnceLock<hub::bus::Bus>> = Default::default();
    let work = {
        let bus = bus.clone();
        async move {
            let mut seat = seat::boot::boot(cfg, release_state, &bus).await?;
            let r = seat.run_loop().await;
            seat.hub.bus.flush(std::time::Duration::from_secs(5)).await;
            r
        }
    };
    tokio::select! {
        r = work => r,
        sig = stop.wait() => {
            tracing::info!("{sig} — stopping the seat (the queue is on disk)");
            turn::stop_current_turn().await;
            if let Some(b) = bus.get() {
                b.flush(std::time::Duration::from_secs(3)).await;
            }
            Ok(())
        }
    }
}

//! The crew runner: the per-seat daemon that keeps an agent seat alive between turns.
//!
//! It waits on the hub's message bus (one held `/poll` at a time, so an idle seat costs nothing)
//! and resumes the agent's CLI only when a message for the seat arrives. Behaviour follows
//! `docs/runner.md`.
//!
//! # Layout
//!
//! The folders are layers; a module uses its own layer and the ones above it in this list.
//!
//! - `config.rs`: who the seat is and how it runs (identity and knobs).
//! - `sys/`: small helpers every layer uses (atomic files, bounded git reads, per-seat paths,
//!   redaction).
//! - `triage/`: pure decisions, no I/O: what a poll batch means, the prompt, the verdict of a
//!   turn, the receipts.
//! - `hub/`: the seat's traffic with the hub (tolerant reads, the ordered outbound sender).
//! - `periphery/`: the seat's surroundings: its git worktree, the docker janitor, self-restart
//!   onto a newer release, the shared nudge ledger.
//! - `turn/`: one agent CLI run: the executor with its time box and cut, the CLI drivers, the
//!   liveness watchdog, the WIP snapshot.
//! - `seat/`: the orchestration: the seat's state, boot, poll loop, delivery, one turn as the
//!   seat runs it, and the seat's own files (pending queue, park file, telemetry ledger).
//!
//! Every module is also named from the crate root (`crate::fsx`, `crate::wake`), so a module's
//! imports read the same from every layer.

mod config;
mod hub;
mod periphery;
mod seat;
mod sys;
mod triage;
mod turn;

use hub::{bus, hubio};
use periphery::{docker, nudge, release, worktree};
use seat::{boot, idle, ledger, pending, turnflow};
use sys::{fsx, gitx, redact};
use triage::{classify, prompt, receipt, session, wake};
use turn::{snapshot, watchdog};

pub use config::{ProcessEnv, bus_dir};
pub use seat::park;
pub use sys::paths;
/// The agent CLI drivers and the table of CLI versions they were verified against.
pub use turn::drivers;

use std::path::PathBuf;

/// Options of `trantor runner <agent> [dir]`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct RunnerArgs {
    /// The agent CLI that runs the seat: claude, codex, kimi, gemini, dsh, opencode, command
    /// (CREW_COMMAND), or an opencode provider name. CREW_SWAP_AGENT / CREW_AGENT win over it.
    pub agent: Option<String>,
    /// The directory (a git repository gets a seat worktree). Defaults to the current directory.
    pub dir: Option<PathBuf>,
    /// Who the seat is on the bus (bus name, files, branch); defaults to CREW_PERSONA, then the
    /// agent.
    #[arg(long)]
    pub persona: Option<String>,
    /// The project key; defaults to RELAY_PROJECT, then the git root's name.
    #[arg(long)]
    pub project: Option<String>,
    /// The hub URL; defaults to RELAY_URL, then the bus config, then http://127.0.0.1:4477.
    #[arg(long)]
    pub hub: Option<String>,
    /// The bus name; defaults to RUNNER_SESSION, then `<persona>:<project>`.
    #[arg(long)]
    pub session: Option<String>,
}

/// Run the seat daemon until interrupted.
pub async fn run(args: RunnerArgs) -> anyhow::Result<()> {
    // First, before anything reads the environment: a release boot's state leaves the env here.
    let release_state = release::take_release_state();
    let cfg = config::Config::resolve(&args, &config::ProcessEnv)?;
    // Handlers go in before the boot, so a stop during the kickoff turn still ends its CLI.
    let mut stop = boot::Shutdown::install();
    let bus: std::sync::Arc<std::sync::OnceLock<bus::Bus>> = Default::default();
    let work = {
        let bus = bus.clone();
        async move {
            let mut seat = boot::boot(cfg, release_state, &bus).await?;
            let r = seat.run_loop().await;
            seat.bus.flush(std::time::Duration::from_secs(5)).await;
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

//! The crew runner: the per-seat daemon that keeps an agent seat alive between turns.
//!
//! It waits on the hub's message bus (one held `/poll` at a time, so an idle seat costs nothing)
//! and resumes the agent's CLI only when a message for the seat arrives. Behaviour follows
//! `reference/runner-behavior.md`; the module split is by concern: identity and knobs
//! ([`config`], [`paths`]), what wakes a seat ([`wake`]), the durable queue ([`pending`]), the
//! turn executor ([`turn`]) and its judge ([`classify`]), parking ([`park`]), telemetry
//! ([`ledger`]), the CLI drivers ([`drivers`]) and the periphery (worktree, snapshot, watchdog,
//! release restart, docker janitor, nudge ledger).

pub mod boot;
pub mod bus;
pub mod classify;
pub mod config;
pub mod deliver;
pub mod drivers;
pub mod fsx;
pub mod gitx;
pub mod hubio;
pub mod idle;
pub mod ledger;
pub mod park;
pub mod paths;
pub mod pending;
pub mod poll;
pub mod prompt;
pub mod receipt;
pub mod redact;
pub mod seat;
pub mod session;
pub mod turn;
pub mod turnflow;
pub mod wake;

pub mod docker;
pub mod nudge;
pub mod release;
pub mod snapshot;
pub mod watchdog;
pub mod worktree;

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

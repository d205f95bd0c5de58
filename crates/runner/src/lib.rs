//! The crew runner. (Being written.)

pub mod docker;
pub mod nudge;
pub mod release;
pub mod snapshot;
pub mod watchdog;
pub mod worktree;

/// Options of `trantor runner`.
#[derive(Debug, Clone, clap::Args)]
pub struct RunnerArgs {}

/// Run the seat daemon until interrupted.
pub async fn run(_args: RunnerArgs) -> anyhow::Result<()> {
    anyhow::bail!("the runner is not built yet")
}

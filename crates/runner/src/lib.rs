//! The crew runner. (Being written.)

/// Options of `trantor runner`.
#[derive(Debug, Clone, clap::Args)]
pub struct RunnerArgs {}

/// Run the seat daemon until interrupted.
pub async fn run(_args: RunnerArgs) -> anyhow::Result<()> {
    anyhow::bail!("the runner is not built yet")
}

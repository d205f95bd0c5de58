//! The trantor hub. (Being written.)

/// Options of `trantor hub`.
#[derive(Debug, Clone, clap::Args)]
pub struct HubArgs {}

/// Run the hub until interrupted.
pub async fn run(_args: HubArgs) -> anyhow::Result<()> {
    anyhow::bail!("the hub is not built yet")
}

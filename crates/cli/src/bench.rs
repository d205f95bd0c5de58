//! `trantor bench`: benchmarks of the hub and the runner. (Being written.)

/// Options of `trantor bench`.
#[derive(Debug, Clone, clap::Args)]
pub struct BenchArgs {}

/// Run the benchmarks and print a table.
pub async fn run(_args: BenchArgs) -> anyhow::Result<()> {
    anyhow::bail!("benchmarks are not built yet")
}

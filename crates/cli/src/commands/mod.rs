//! The person's commands: bus and board verbs, seat lifecycle and set-up. (Being written.)

use std::process::ExitCode;

/// The CLI verbs, flattened into the top-level command list.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Show the board of the current project.
    Board,
}

/// Run one verb.
pub async fn run(_cmd: Command) -> anyhow::Result<ExitCode> {
    anyhow::bail!("not built yet")
}

//! The stdio MCP server. (Being written.)

/// Options of `trantor mcp`.
#[derive(Debug, Clone, clap::Args)]
pub struct McpArgs {}

/// Serve MCP on stdin/stdout until the client closes.
pub async fn run(_args: McpArgs) -> anyhow::Result<()> {
    anyhow::bail!("the MCP server is not built yet")
}

//! `trantor mcp`: the stdio MCP server that gives an agent CLI the `relay_*` tools, and the
//! same server over Streamable HTTP for the hub's `/mcp` ([`http`]).
//!
//! The agent's CLI starts this process and speaks MCP on its stdin/stdout; every tool is a call
//! to the hub as this session. Beside the tools both transports serve the same resources,
//! prompts, completion and logging (`server::library`). Logs go to stderr only, because stdout
//! is the protocol channel.
//!
//! The crate also holds what the CLI verbs share with the tools: the plain-text renderers
//! ([`render`]). Identity comes from the one resolver in `trantor_proto::identity`.

pub mod advise;
pub mod args;
pub mod handoff;
pub mod hollow;
pub mod http;
pub mod render;
pub mod server;

pub use server::Relay;
pub use trantor_proto::identity::{Identity, Overrides};

use rmcp::ServiceExt;
use std::sync::Arc;
use std::time::Duration;
use trantor_proto::{Signer, enroll};

/// Options of `trantor mcp`. Without flags, the environment the original read decides
/// (`RELAY_SESSION`, `RELAY_AGENT`, `RELAY_PROJECT`, `RELAY_URL`; see `trantor_proto::identity`), which is
/// what agent CLIs and the runner set. The resolver reads those itself rather than through
/// clap, so `relay_whoami` can say which one chose the hub.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct McpArgs {
    /// Bus session to speak as [default: RELAY_SESSION, else <RELAY_AGENT or host>:<project>].
    #[arg(long)]
    pub session: Option<String>,
    /// Project [default: RELAY_PROJECT, else .trantor/project.json's id, else the git root's name].
    #[arg(long)]
    pub project: Option<String>,
    /// Hub URL [default: RELAY_URL, else ~/.agent-bus/config.json, else http://127.0.0.1:4477].
    #[arg(long)]
    pub url: Option<String>,
    /// Presence heartbeat period in milliseconds.
    #[arg(long, env = "RELAY_HEARTBEAT_MS", default_value_t = 60_000)]
    pub heartbeat_ms: u64,
}

/// Serve MCP on stdin/stdout until the client closes.
pub async fn run(args: McpArgs) -> anyhow::Result<()> {
    let id = Identity::resolve_with(&Overrides {
        session: args.session,
        project: args.project,
        hub_url: args.url,
    });
    // The server signs with an instance key its session's durable key endorses, minted fresh
    // for this process (docs/protocol.md §2); a key file others can read stops it here.
    let bus = trantor_proto::identity::bus_dir(&trantor_proto::identity::ProcessEnv);
    let durable = trantor_proto::keys::load_or_create(&bus, &id.session, "agent")?;
    let instance = durable.mint_instance(&enroll::new_instance_id("mcp"));
    let opts =
        enroll::EnrollOptions::from_env(&trantor_proto::identity::ProcessEnv, &bus, &id.project);
    let hub_url = id.hub_url.clone();
    let relay = Relay::new(id).with_signer(Signer::Instance(Arc::new(instance)));
    // Enrollment and registration run beside the handshake, so a down hub never delays
    // `initialize`; the durable key enrolls (instances never do), then presence starts.
    let beat = relay.clone();
    let every = Duration::from_millis(args.heartbeat_ms.max(1_000));
    tokio::spawn(async move {
        match enroll::ensure_enrolled(&hub_url, &bus, &durable, &opts).await {
            Ok(how) => tracing::debug!("session key {}: {how:?}", durable.pubkey()),
            Err(e) => tracing::error!("{e}"),
        }
        beat.spawn_heartbeat(every);
    });
    let service = relay
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| anyhow::anyhow!("MCP handshake failed: {e}"))?;
    service.waiting().await?;
    Ok(())
}

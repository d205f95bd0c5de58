//! `trantor`: one binary for the hub, the crew runner, the MCP server and the CLI.

mod commands;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// The hub-world for crews of AI coding agents.
///
/// A hub carries messages and a board of cards; a runner keeps each agent seat alive between
/// turns and resumes its CLI only when work arrives; `trantor mcp` gives agents their tools.
#[derive(Debug, Parser)]
#[command(name = "trantor", version, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the hub: HTTP/JSON on 127.0.0.1:4477 (RELAY_HOST, RELAY_PORT), state under
    /// ~/.agent-bus (RELAY_DATA_DIR).
    Hub(commands::hub_import::HubCommand),
    /// Run the crew runner for one seat: waits on the bus and resumes the agent CLI when work
    /// arrives.
    Runner(Box<trantor_runner::RunnerArgs>),
    /// Serve the relay_* tools over MCP on stdin/stdout, for an agent CLI to load.
    Mcp(trantor_mcp::McpArgs),
    /// Measure the hub or the runner and print a table.
    Bench(trantor_bench::BenchArgs),
    #[command(flatten)]
    Verb(commands::Command),
}

fn init_tracing(stderr_only: bool) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_env("TRANTOR_LOG")
        .or_else(|_| EnvFilter::try_from_default_env())
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false);
    // `stderr_only` is the same writer today; it documents that stdout must stay clean for
    // the MCP protocol and for `--json` output.
    let _ = stderr_only;
    let _ = builder.try_init();
}

fn main() -> ExitCode {
    trantor_proto::tls::install_default_provider();
    let cli = Cli::parse();
    init_tracing(matches!(cli.command, Command::Mcp(_)));
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if !matches!(cli.command, Command::Hub(_) | Command::Bench(_)) {
        // The runner, the MCP server and the CLI are mostly idle; two workers keep their
        // footprint small. The hub and the benchmark take one worker per core.
        builder.worker_threads(2);
    }
    let runtime = match builder.enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("trantor: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let result = runtime.block_on(async move {
        match cli.command {
            Command::Hub(cmd) => match cmd.action {
                Some(action) => commands::hub_import::run(action)
                    .await
                    .map(|_| ExitCode::SUCCESS),
                None => trantor_hub::run_with(cmd.args, Some(mcp_mount()))
                    .await
                    .map(|_| ExitCode::SUCCESS),
            },
            Command::Runner(args) => match trantor_runner::run(*args).await {
                Ok(()) => Ok(ExitCode::SUCCESS),
                // Replaced on the hub's fence: its own status, so a supervisor does not restart
                // it to fight the runner that has the seat (docs/runner.md §24.1).
                Err(e) => match e.downcast_ref::<trantor_runner::Superseded>() {
                    Some(s) => {
                        eprintln!("trantor runner: {s}");
                        Ok(ExitCode::from(trantor_runner::EXIT_SUPERSEDED))
                    }
                    None => Err(e),
                },
            },
            Command::Mcp(args) => trantor_mcp::run(args).await.map(|_| ExitCode::SUCCESS),
            Command::Bench(args) => trantor_bench::run(args).await.map(|_| ExitCode::SUCCESS),
            Command::Verb(cmd) => commands::run(cmd).await,
        }
    });
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("trantor: {e:#}");
            ExitCode::from(1)
        }
    }
}

/// The hub's `/mcp`: the `relay_*` tools over Streamable HTTP (docs/protocol.md §10.7).
/// Mounted here because the MCP server's crate sits above the hub's.
fn mcp_mount() -> trantor_hub::Mount {
    trantor_hub::Mount {
        path: "/mcp",
        build: Box::new(|ctx| {
            let opts = trantor_mcp::http::HttpOptions {
                hub_url: ctx.url.clone(),
                header_identity: ctx.auth != trantor_hub::auth::AuthMode::Enforce,
                tokens: Some(ctx.tokens.clone()),
                events: Some(ctx.events.clone()),
                max_sessions: std::env::var("RELAY_MCP_MAX_SESSIONS")
                    .ok()
                    .and_then(|v| v.trim().parse::<usize>().ok())
                    .filter(|n| *n > 0)
                    .unwrap_or(trantor_mcp::http::DEFAULT_MAX_SESSIONS),
            };
            trantor_mcp::http::router(opts, ctx.shutdown.clone())
        }),
    }
}

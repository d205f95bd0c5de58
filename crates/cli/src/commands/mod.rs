//! The person's commands: bus and board verbs, seat lifecycle and set-up.
//!
//! Every verb is human-friendly by default and prints JSON with `--json`. Exit status:
//! 0 ok, 1 the hub refused (its message on stderr) or another error, 2 usage error, 3 the hub is
//! unreachable. Session, project and hub resolve exactly as for `trantor mcp`
//! (`trantor_proto::identity`), so a terminal and an agent's tools agree on who is who.

/// The exit-status paragraph every verb's long help ends with (a macro so `concat!` can use it).
macro_rules! exit_codes {
    () => {
        "Exit status: 0 ok · 1 the hub refused the request (its message is printed) or another \
         error · 2 usage error · 3 hub unreachable"
    };
}

/// `println!` that ignores a closed stdout (`trantor board | head` must not panic).
macro_rules! say {
    ($($t:tt)*) => {
        $crate::commands::emit(&format!($($t)*))
    };
}

mod advise;
mod autonomy;
mod board;
mod budget;
mod bus;
mod catchup;
mod connect;
mod cost;
mod credentials;
mod crew;
mod demo;
mod doctor;
mod down;
mod duty;
mod harvest;
mod hook;
mod hook_install;
pub mod hub_import;
mod hub_pins;
mod identity;
mod integrate;
mod invite;
mod lessons;
mod new;
mod plugin;
mod policy;
mod proposals;
mod reconcile;
mod seat_why;
mod seats;
mod setup;
mod swap;
mod sweep;
mod sync;
mod table;
mod token;
mod trace;
mod ui;
mod up;
mod watch;
mod wiring;

use std::process::ExitCode;
use trantor_mcp::{Identity, Overrides};
use trantor_proto::{ClientError, HubClient};

// The first executable file named `name` on PATH: the MCP server's lookup, shared.
pub(crate) use trantor_mcp::advise::find_on_path;

/// The CLI verbs, flattened into the top-level command list.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Send a message to a session (or `all`).
    #[command(after_long_help = bus::SEND_HELP)]
    Send(bus::SendArgs),
    /// Read messages addressed to this session.
    #[command(after_long_help = bus::INBOX_HELP)]
    Inbox(bus::InboxArgs),
    /// List the sessions the hub knows, online first.
    #[command(after_long_help = bus::PEERS_HELP)]
    Peers(bus::PeersArgs),
    /// Show the project's board as a table, or one card in full (`--card N`).
    #[command(after_long_help = board::BOARD_HELP)]
    Board(board::BoardArgs),
    /// Add, move, note or tick cards.
    #[command(subcommand)]
    Card(board::CardCommand),
    /// What the crew's turns cost: tokens and dollars per card, seat, day or credential.
    #[command(after_long_help = cost::COST_HELP)]
    Cost(cost::CostArgs),
    /// Dollar budgets per project or card: a seat parks instead of spending past one.
    #[command(after_long_help = budget::BUDGET_HELP)]
    Budget(budget::BudgetArgs),
    /// Named credentials (accounts, API keys) seats run on: add, list, remove.
    #[command(subcommand, after_long_help = credentials::CREDENTIALS_HELP)]
    Credentials(credentials::CredentialsCommand),
    /// List lessons (the guardrails added to every seat's prompt), or add one.
    #[command(after_long_help = lessons::LESSONS_HELP)]
    Lessons(lessons::LessonsArgs),
    /// Check the set-up: hub, store, agent CLIs and whether each loads `trantor mcp`.
    #[command(after_long_help = doctor::DOCTOR_HELP)]
    Doctor(doctor::DoctorArgs),
    /// Start seats for this project: `trantor up claude codex:gpt-5`.
    #[command(after_long_help = up::UP_HELP)]
    Up(up::UpArgs),
    /// Stop this project's seats (or the named ones, or every project's with --all).
    #[command(after_long_help = down::DOWN_HELP)]
    Down(down::DownArgs),
    /// The life of one message: stored, claimed, started, consumed (or requeued, failed, parked).
    #[command(after_long_help = trace::TRACE_HELP)]
    Trace(trace::TraceArgs),
    /// Explain from evidence why a seat is (not) answering.
    #[command(after_long_help = seat_why::SEAT_WHY_HELP)]
    SeatWhy(seat_why::SeatWhyArgs),
    /// See a whole crew work in under a minute: a hub, two scripted seats, a card moving to done.
    #[command(after_long_help = demo::DEMO_HELP)]
    Demo(demo::DemoArgs),
    /// The scripted agent `trantor demo` runs in its seats (internal).
    #[command(hide = true)]
    DemoAgent(demo::DemoAgentArgs),
    /// Register `trantor mcp` with the agent CLIs found here (Claude Code, Codex, OpenCode, Kimi).
    #[command(after_long_help = connect::CONNECT_HELP)]
    Connect(connect::ConnectArgs),
    /// Bring the seats' work home: commit, merge every seat branch, verify, receipts, push.
    #[command(after_long_help = integrate::INTEGRATE_HELP)]
    Integrate(integrate::IntegrateArgs),
    /// Record a hand-made harvest (cherry-pick or squash): seat commit → main commit.
    #[command(after_long_help = harvest::HARVEST_HELP)]
    Harvest(harvest::HarvestArgs),
    /// Realign a seat branch onto the integration branch, dropping only harvested commits.
    #[command(after_long_help = sync::SYNC_HELP)]
    Sync(sync::SyncArgs),
    /// Replace a seat's agent or model in place, keeping its queue, cards and contracts.
    #[command(after_long_help = swap::SWAP_HELP)]
    Swap(swap::SwapArgs),
    /// Show or set the dials integrate obeys: `trantor autonomy set push on`.
    #[command(after_long_help = autonomy::AUTONOMY_HELP)]
    Autonomy(autonomy::AutonomyArgs),
    /// Make a project: a folder with git on main, its .trantor/project.json, the brief, a card.
    #[command(after_long_help = new::NEW_HELP)]
    New(new::NewArgs),
    /// The Claude Code plugin (MCP server, hooks, crew/handoff/research skills): install, remove.
    #[command(subcommand)]
    Plugin(plugin::PluginCommand),
    /// Set up this machine: the hub as a user service, config, connect, the plugin, doctor.
    #[command(after_long_help = setup::SETUP_HELP)]
    Setup(setup::SetupArgs),
    /// Keep a background hub running (internal: started by `trantor setup`).
    #[command(hide = true)]
    SetupSupervise(setup::SuperviseArgs),
    /// Link projects so their seats may act on each other, unlink them, or show the links.
    #[command(subcommand, after_long_help = policy::POLICY_HELP)]
    Policy(policy::PolicyCommand),
    /// Claude Code hook: hand the crew's messages to this interactive session (fail-open).
    #[command(after_long_help = hook::HOOK_HELP)]
    Hook(hook::HookArgs),
    /// The duty seat that nudges recipients of unread mail: up, status, down, appoint.
    #[command(subcommand, after_long_help = duty::DUTY_HELP)]
    Duty(duty::DutyCommand),
    /// Open the hub's dashboard (board, seats, flow, timeline) in the browser.
    #[command(after_long_help = ui::UI_HELP)]
    Ui(ui::UiArgs),
    /// Mint a one-use invite token for a seat or person on another machine (owner key).
    #[command(after_long_help = invite::INVITE_HELP)]
    Invite(invite::InviteArgs),
    /// Bearer tokens for agents that connect to the hub's /mcp with a header (mint, list,
    /// revoke; owner key).
    #[command(subcommand, after_long_help = token::TOKEN_HELP)]
    Token(token::TokenCommand),
    /// The hub's signed identities (list, revoke) and this session's key (enroll, show).
    #[command(subcommand, after_long_help = identity::IDENTITY_HELP)]
    Identity(identity::IdentityCommand),
    /// The Advisor: solo, crew or hybrid, a route per package, seats and an estimate.
    #[command(after_long_help = advise::ADVISE_HELP)]
    Advise(advise::AdviseArgs),
    /// Your plan per agent (`set claude=max codex=plus`, `show`), for the Advisor.
    #[command(subcommand, after_long_help = advise::PROFILE_HELP)]
    Profile(advise::ProfileCommand),
    /// Write a handoff so a fresh session in this project takes over where this one is.
    #[command(after_long_help = advise::HANDOFF_HELP)]
    Handoff(advise::HandoffArgs),
    /// Where are we on this project: brief, cards by lane, recent commits.
    #[command(after_long_help = catchup::CATCHUP_HELP)]
    Catchup(catchup::CatchupArgs),
    /// Move in-progress cards idle past a threshold to the stale lane (previews; --yes moves).
    #[command(after_long_help = sweep::SWEEP_HELP)]
    Sweep(sweep::SweepArgs),
    /// Judge this project's stuck cards against the recent commits: close the shipped ones,
    /// stale the abandoned ones (previews; --yes applies).
    #[command(after_long_help = reconcile::RECONCILE_HELP)]
    Reconcile(reconcile::ReconcileArgs),
    /// Agents' permission proposals: list, approve, deny (with a reason), revoke.
    #[command(after_long_help = proposals::PROPOSALS_HELP)]
    Proposals(proposals::ProposalsArgs),
    /// A live feed of the bus: every message the hub delivers to a session, as it happens.
    #[command(after_long_help = watch::WATCH_HELP)]
    Watch(watch::WatchArgs),
}

/// Options every bus verb shares.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct Common {
    /// Print JSON (for scripts) instead of text.
    #[arg(long)]
    pub json: bool,
    /// Hub URL [default: RELAY_URL, else ~/.agent-bus/config.json, else http://127.0.0.1:4477].
    #[arg(long, value_name = "URL")]
    pub url: Option<String>,
    /// Act as this session [default: RELAY_SESSION, else <RELAY_AGENT or host>:<project>].
    #[arg(long, value_name = "SESSION")]
    pub session: Option<String>,
    /// Project [default: RELAY_PROJECT, else .trantor/project.json's id, else the git root's name].
    #[arg(long, value_name = "PROJECT")]
    pub project: Option<String>,
}

impl Common {
    /// The identity these options select.
    pub fn identity(&self) -> Identity {
        Identity::resolve_with(&Overrides {
            session: self.session.clone(),
            project: self.project.clone(),
            hub_url: self.url.clone(),
        })
    }

    /// The identity and a client for its hub, signing with the session's key
    /// (docs/protocol.md §2).
    ///
    /// The key is created on first use. A key file others can read, or one that is not a key,
    /// stops the verb; a bus directory that cannot hold a key leaves the verb unsigned, which a
    /// hub that does not check accepts and an enforcing hub refuses with 401.
    pub fn connect(&self) -> anyhow::Result<(Identity, HubClient)> {
        let id = self.identity();
        let signer = session_signer(&id)?;
        let client = HubClient::new(id.hub_url.clone()).with_optional_signer(signer);
        Ok((id, client))
    }
}

/// The durable key of `id`'s session as a signer (`None` when the bus directory cannot hold one).
pub(crate) fn session_signer(id: &Identity) -> anyhow::Result<Option<trantor_proto::Signer>> {
    let bus = trantor_proto::identity::bus_dir(&trantor_proto::identity::ProcessEnv);
    match trantor_proto::keys::load_or_create(&bus, &id.session, "agent") {
        Ok(k) => Ok(Some(trantor_proto::Signer::Durable(std::sync::Arc::new(k)))),
        Err(trantor_proto::keys::KeyError::Io { path, source }) => {
            tracing::debug!("unsigned: no key at {}: {source}", path.display());
            Ok(None)
        }
        Err(e) => Err(e.into()),
    }
}

/// A failure with the exit status it maps to.
#[derive(Debug, thiserror::Error)]
pub enum VerbError {
    /// The hub answered or could not be reached.
    #[error("{message}")]
    Hub {
        /// What to tell the person.
        message: String,
        /// Whether the hub was unreachable (exit 3) rather than refusing (exit 1).
        unreachable: bool,
    },
    /// The arguments make no sense (exit 2).
    #[error("{0}")]
    Usage(String),
}

/// Wrap a hub failure with the hub URL and what to do about it.
pub(crate) fn hub_failure(url: &str, e: ClientError) -> anyhow::Error {
    let unreachable = e.is_unreachable();
    let message = match e {
        ClientError::Unreachable { .. } => format!(
            "cannot reach the trantor hub at {url}: is it running? Start one with `trantor hub` \
             (or `trantor up`), or point RELAY_URL / --url at it."
        ),
        ClientError::Timeout { path, after } => format!(
            "the hub at {url} did not answer {path} within {}s",
            after.as_secs()
        ),
        ClientError::Http { status, body, .. } => {
            let mut m = format!("hub refused ({status}): {}", body.error);
            if let Some(k) = body.extra.get("kinds") {
                m.push_str(&format!(" ({k})"));
            }
            if status == 401 {
                m.push_str(
                    ". The hub wants requests signed by an enrolled key: run `trantor identity \
                     enroll` (with --invite <token> from the hub's operator when the hub is on \
                     another machine).",
                );
            }
            m
        }
        e @ (ClientError::Decode { .. }
        | ClientError::Request { .. }
        | ClientError::Superseded { .. }) => e.to_string(),
    };
    VerbError::Hub {
        message,
        unreachable,
    }
    .into()
}

/// Extension to turn `Result<T, ClientError>` into an anyhow result naming the hub.
pub(crate) trait HubResult<T> {
    /// Attach the hub URL and exit status to a failure.
    fn hub(self, client: &HubClient) -> anyhow::Result<T>;
}

impl<T> HubResult<T> for Result<T, ClientError> {
    fn hub(self, client: &HubClient) -> anyhow::Result<T> {
        self.map_err(|e| hub_failure(client.base(), e))
    }
}

/// A usage error (exit 2).
pub(crate) fn usage(msg: impl Into<String>) -> anyhow::Error {
    VerbError::Usage(msg.into()).into()
}

/// Write one line to stdout; a reader that went away (a closed pipe) is not an error worth
/// reporting for output that nobody will read.
pub(crate) fn emit(line: &str) {
    // Text from the hub is written by any client: no control or bidi character reaches the
    // terminal.
    emit_raw(&trantor_proto::text::sanitize(line));
}

fn emit_raw(line: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
}

/// Print a value as pretty JSON on stdout (JSON escapes control characters itself; machine
/// output keeps the data as stored).
pub(crate) fn print_json<T: serde::Serialize>(v: &T) -> anyhow::Result<()> {
    emit_raw(&serde_json::to_string_pretty(v)?);
    Ok(())
}

/// Run one verb and map its failure to an exit status.
pub async fn run(cmd: Command) -> anyhow::Result<ExitCode> {
    let result = match cmd {
        Command::Send(a) => bus::send(a).await,
        Command::Inbox(a) => bus::inbox(a).await,
        Command::Peers(a) => bus::peers(a).await,
        Command::Board(a) => board::board(a).await,
        Command::Card(c) => board::card(c).await,
        Command::Lessons(a) => lessons::lessons(a).await,
        Command::Cost(a) => cost::cost(a).await,
        Command::Budget(a) => budget::budget(a).await,
        Command::Credentials(c) => credentials::credentials(c).await,
        Command::Connect(a) => connect::connect(a).await,
        Command::Hook(a) => hook::hook(a).await,
        Command::Duty(c) => duty::duty(c).await,
        Command::Doctor(a) => doctor::doctor(a).await,
        Command::Demo(a) => demo::demo(a).await,
        Command::DemoAgent(a) => demo::demo_agent(a).await,
        Command::Up(a) => up::up(a).await,
        Command::Down(a) => down::down(a).await,
        Command::SeatWhy(a) => seat_why::seat_why(a).await,
        Command::Trace(a) => trace::trace(a).await,
        Command::Integrate(a) => integrate::integrate(a).await,
        Command::Harvest(a) => harvest::harvest(a).await,
        Command::Sync(a) => sync::sync(a).await,
        Command::Autonomy(a) => autonomy::autonomy(a).await,
        Command::Swap(a) => swap::swap(a).await,
        Command::Policy(c) => policy::policy(c).await,
        Command::Plugin(c) => plugin::plugin(c).await,
        Command::New(a) => new::new(a).await,
        Command::Setup(a) => setup::setup(a).await,
        Command::SetupSupervise(a) => setup::supervise(a).await,
        Command::Ui(a) => ui::ui(a).await,
        Command::Invite(a) => invite::invite(a).await,
        Command::Token(c) => token::run(c).await,
        Command::Identity(c) => identity::identity(c).await,
        Command::Advise(a) => advise::advise(a).await,
        Command::Profile(c) => advise::profile(c).await,
        Command::Handoff(a) => advise::handoff(a).await,
        Command::Catchup(a) => catchup::catchup(a).await,
        Command::Sweep(a) => sweep::sweep(a).await,
        Command::Reconcile(a) => reconcile::reconcile(a).await,
        Command::Proposals(a) => proposals::proposals(a).await,
        Command::Watch(a) => watch::watch(a).await,
    };
    match result {
        Ok(code) => Ok(code),
        Err(e) => {
            let code = match e.downcast_ref::<VerbError>() {
                Some(VerbError::Hub {
                    unreachable: true, ..
                }) => 3,
                Some(VerbError::Usage(_)) => 2,
                _ => 1,
            };
            eprintln!(
                "trantor: {}",
                trantor_proto::text::sanitize(&format!("{e:#}"))
            );
            Ok(ExitCode::from(code))
        }
    }
}

//! Who the seat is and how it runs: the runner's arguments ([`RunnerArgs`], every knob with its
//! environment variable, so `trantor runner --help` lists them all with their defaults) and the
//! resolved [`Config`] the seat reads at boot (docs/runner.md §2).
//!
//! Identity (home, bus directory, host id, the hub from the bus config, the project from the git
//! root) comes from the one resolver in `trantor_proto::identity`, read through an [`Env`] so
//! tests can pin any combination without touching the process environment. No other runner
//! module reads the environment, except the release state handoff (`periphery/release.rs`).

use clap::builder::FalseyValueParser;
use std::path::PathBuf;
use trantor_proto::identity;
pub use trantor_proto::identity::{Env, ProcessEnv};

/// Every environment variable the runner reads: the knobs of [`RunnerArgs`] plus the identity
/// variables of `trantor_proto::identity` the runner uses. `trantor runner --help` names each one
/// (a test keeps this list, the arguments and the help in step).
pub const RUNNER_ENV_VARS: &[&str] = &[
    "CREW_AGENT",
    "CREW_SWAP_AGENT",
    "CREW_SWAP_DRIVER",
    "CREW_SWAP_STAGE",
    "CREW_SWAP_LABEL",
    "CREW_PERSONA",
    "RELAY_PROJECT",
    "RELAY_URL",
    "RUNNER_SESSION",
    "CREW_MODEL",
    "CREW_EFFORT",
    "CREW_CREDENTIAL",
    "CREW_POOL",
    "CREW_COMMAND",
    "CREW_COMMAND_NEXT",
    "RUNNER_RULES",
    "CREW_KICKOFF",
    "RUNNER_TITLE",
    "RUNNER_ABOUT",
    "TRANTOR_TURN_MAX_MS",
    "TRANTOR_TURN_CEILING_MS",
    "TRANTOR_TURN_WATCHDOG_MS",
    "TRANTOR_TURN_WATCHDOG_FLOOR_MS",
    "TRANTOR_RETRY_MS",
    "TRANTOR_PARK_WINDOW_MS",
    "RUNNER_PARK_MAX_MS",
    "TRANTOR_HUB_ALERT_TTL_MS",
    "RUNNER_PULSE_MS",
    "RUNNER_MISSION_FILE",
    "RUNNER_DUTY_NUDGES",
    "RUNNER_DUTY_NUDGE_STATE",
    "TRANTOR_NO_DESKTOP_NOTIFY",
    "TRANTOR_NO_WORKTREE",
    "TRANTOR_TAKE_OVER",
    "TRANTOR_ADOPT_GRACE_MS",
    "TRANTOR_POLL_HOLD_S",
    "TRANTOR_HUB_BACKOFF_MAX_MS",
    "XDG_DATA_HOME",
    "CODEX_HOME",
    "RELAY_INVITE",
    "RELAY_BOOTSTRAP_TOKEN",
    "RELAY_OWNER_IDENTITY",
    // Identity, through trantor_proto::identity.
    "HOME",
    "AGENT_BUS_DIR",
    "RELAY_DATA_DIR",
    "RELAY_HOST_ID",
];

/// The help text's closing paragraph: the identity variables that are not arguments.
const AFTER_HELP: &str = "Identity (trantor_proto::identity): HOME; the bus directory from \
AGENT_BUS_DIR, else RELAY_DATA_DIR, else $HOME/.agent-bus; the orchestrator's host id from \
RELAY_HOST_ID, else <bus>/machine-id, else the host name (kept whole). An https:// hub's \
certificate must chain to a root in the PEM file RELAY_CA_CERT. The release state handoff \
variable is internal.";

/// The tokens a key spends to enroll when the hub does not know it yet: options of `trantor
/// runner` and of `trantor identity enroll`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct EnrollTokens {
    /// An invite token the key spends when the hub does not know it yet (minted by the hub's
    /// operator with `trantor invite --project P --role write`).
    #[arg(
        long,
        env = "RELAY_INVITE",
        value_name = "TOKEN",
        hide_env_values = true
    )]
    pub invite: Option<String>,
    /// The hub's bootstrap token, to enroll the key when the hub knows no identity yet (the
    /// first identity becomes owner of every project).
    #[arg(
        long,
        env = "RELAY_BOOTSTRAP_TOKEN",
        value_name = "TOKEN",
        hide_env_values = true
    )]
    pub bootstrap_token: Option<String>,
}

/// Options of `trantor runner <agent> [dir]`: every knob the runner reads, each with its
/// environment variable.
#[derive(Debug, Clone, clap::Args)]
#[command(after_help = AFTER_HELP)]
pub struct RunnerArgs {
    /// The agent CLI that runs the seat: claude, codex, kimi, gemini, dsh, opencode, command
    /// (CREW_COMMAND), or an opencode provider name. --swap-agent / --crew-agent win over it.
    pub agent: Option<String>,
    /// The directory (a git repository gets a seat worktree). Defaults to the current directory.
    pub dir: Option<PathBuf>,
    /// The agent, winning over the positional one (set by `trantor up`).
    #[arg(long, env = "CREW_AGENT", value_name = "AGENT")]
    pub crew_agent: Option<String>,
    /// The agent of a swap's replacement seat, winning over every other.
    #[arg(long, env = "CREW_SWAP_AGENT", value_name = "AGENT")]
    pub swap_agent: Option<String>,
    /// The driver of a swap's replacement seat [default: the agent].
    #[arg(long, env = "CREW_SWAP_DRIVER", value_name = "DRIVER")]
    pub swap_driver: Option<String>,
    /// A swap's stage path: register the staging identity, write `<stage>.ready`, wait for
    /// `<stage>.release` and start from its cursor.
    #[arg(long, env = "CREW_SWAP_STAGE", value_name = "PATH")]
    pub swap_stage: Option<String>,
    /// The staging identity's name before `:<project>` [default: `<agent>-swap`].
    #[arg(long, env = "CREW_SWAP_LABEL", value_name = "NAME")]
    pub swap_label: Option<String>,
    /// Who the seat is on the bus (bus name, files, branch) [default: the agent].
    #[arg(long, env = "CREW_PERSONA")]
    pub persona: Option<String>,
    /// The project key [default: .trantor/project.json's id, else the git root's name].
    #[arg(long, env = "RELAY_PROJECT")]
    pub project: Option<String>,
    /// The hub URL [default: <bus>/config.json `hubs[project]`, then its `url`, then
    /// http://127.0.0.1:4477].
    #[arg(long, env = "RELAY_URL")]
    pub hub: Option<String>,
    /// The bus name [default: `<persona>:<project>`].
    #[arg(long, env = "RUNNER_SESSION")]
    pub session: Option<String>,
    /// The model passed to the CLI [default: the CLI's own].
    #[arg(long, env = "CREW_MODEL")]
    pub model: Option<String>,
    /// The effort level: a word, a JSON string, or a JSON object keyed by agent or driver.
    #[arg(long, env = "CREW_EFFORT")]
    pub effort: Option<String>,
    /// The named credential the seat runs on (`trantor credentials add`): its variables go in
    /// the CLI's environment and its name on every turn's cost record.
    #[arg(long, env = "CREW_CREDENTIAL", value_name = "NAME")]
    pub credential: Option<String>,
    /// A pool of named credentials, comma-separated: before each turn the seat takes the first
    /// with quota (docs/runner.md §12.5); all exhausted, it parks until the earliest reset.
    #[arg(long, env = "CREW_POOL", value_name = "A,B")]
    pub pool: Option<String>,
    /// The `command` driver's shell template for every turn (the prompt is in
    /// $TRANTOR_PROMPT_FILE).
    #[arg(long, env = "CREW_COMMAND", value_name = "TEMPLATE")]
    pub command: Option<String>,
    /// The `command` driver's template for resumed turns [default: --command].
    #[arg(long, env = "CREW_COMMAND_NEXT", value_name = "TEMPLATE")]
    pub command_next: Option<String>,
    /// Replaces the seat's standing rules in every prompt.
    #[arg(long, env = "RUNNER_RULES")]
    pub rules: Option<String>,
    /// Replaces the kickoff turn's prompt.
    #[arg(long, env = "CREW_KICKOFF")]
    pub kickoff: Option<String>,
    /// The banner logged at boot [default: `trantor crew · <project>`].
    #[arg(long, env = "RUNNER_TITLE")]
    pub title: Option<String>,
    /// A line logged after the banner.
    #[arg(long, env = "RUNNER_ABOUT")]
    pub about: Option<String>,
    /// A turn's time box in ms (0 = off).
    #[arg(
        long,
        env = "TRANTOR_TURN_MAX_MS",
        default_value_t = 1_200_000,
        value_name = "MS"
    )]
    pub turn_max_ms: u64,
    /// The ceiling liveness extensions may stretch a box to, in ms.
    #[arg(
        long,
        env = "TRANTOR_TURN_CEILING_MS",
        default_value_t = 3_600_000,
        value_name = "MS"
    )]
    pub turn_ceiling_ms: u64,
    /// The stall window in ms (never below the floor, never derived from the box).
    #[arg(
        long,
        env = "TRANTOR_TURN_WATCHDOG_MS",
        default_value_t = 600_000,
        value_name = "MS"
    )]
    pub turn_watchdog_ms: u64,
    /// The stall window's floor in ms (at least 1000). Lower it only for drills and tests: a
    /// real CLI waiting on a slow provider can be quiet for minutes.
    #[arg(
        long,
        env = "TRANTOR_TURN_WATCHDOG_FLOOR_MS",
        default_value_t = 600_000,
        value_name = "MS",
        value_parser = clap::value_parser!(u64).range(1000..)
    )]
    pub turn_watchdog_floor_ms: u64,
    /// The redelivery ladder: comma-separated ms, each a whole number above 0 (anything else
    /// is refused at start-up).
    #[arg(
        long,
        env = "TRANTOR_RETRY_MS",
        default_value = "30000,60000,120000,300000,900000",
        value_name = "MS,..."
    )]
    pub retry_ms: String,
    /// The length of a bounded park in ms (0 = parks are unbounded).
    #[arg(
        long,
        env = "TRANTOR_PARK_WINDOW_MS",
        default_value_t = 900_000,
        value_name = "MS"
    )]
    pub park_window_ms: u64,
    /// Exit (for the supervisor) after parking this long, in ms (0 = never).
    #[arg(
        long,
        env = "RUNNER_PARK_MAX_MS",
        default_value_t = 0,
        value_name = "MS"
    )]
    pub park_max_ms: u64,
    /// How long a `hub:duty` alert stays current, in ms.
    #[arg(
        long,
        env = "TRANTOR_HUB_ALERT_TTL_MS",
        default_value_t = 1_800_000,
        value_name = "MS"
    )]
    pub hub_alert_ttl_ms: u64,
    /// The pulse cadence in ms (0 = off).
    #[arg(long, env = "RUNNER_PULSE_MS", default_value_t = 0, value_name = "MS")]
    pub pulse_ms: u64,
    /// The mission note a pulse re-reads, relative to the seat's directory.
    #[arg(
        long,
        env = "RUNNER_MISSION_FILE",
        default_value = "MISSION.md",
        value_name = "PATH"
    )]
    pub mission_file: PathBuf,
    /// Nudge the owners of undelivered messages a `hub:duty` escalation names.
    #[arg(long, env = "RUNNER_DUTY_NUDGES", value_parser = FalseyValueParser::new())]
    pub duty_nudges: bool,
    /// The shared duty-nudge claim file [default: <bus>/duty-nudged.json].
    #[arg(long, env = "RUNNER_DUTY_NUDGE_STATE", value_name = "PATH")]
    pub duty_nudge_state: Option<PathBuf>,
    /// No desktop notification for alerts.
    #[arg(long, env = "TRANTOR_NO_DESKTOP_NOTIFY", value_parser = FalseyValueParser::new())]
    pub no_desktop_notify: bool,
    /// Run turns in the directory itself instead of a seat worktree.
    #[arg(long, env = "TRANTOR_NO_WORKTREE", value_parser = FalseyValueParser::new())]
    pub no_worktree: bool,
    /// Replace the runner that holds this seat's lock: SIGTERM it, SIGKILL it if it has not let
    /// go within 10 s, then take the seat (docs/runner.md §24.1). Without it a second runner for
    /// a seat refuses to start.
    #[arg(long, env = "TRANTOR_TAKE_OVER", value_parser = FalseyValueParser::new())]
    pub take_over: bool,
    /// How long a new runner waits for its predecessor's still-running CLI before ending its
    /// process group (SIGTERM, then SIGKILL), in ms (docs/runner.md §24.3).
    #[arg(
        long,
        env = "TRANTOR_ADOPT_GRACE_MS",
        default_value_t = 1_200_000,
        value_name = "MS"
    )]
    pub adopt_grace_ms: u64,
    /// The longest `/poll` hold in seconds (1 to 280).
    #[arg(
        long,
        env = "TRANTOR_POLL_HOLD_S",
        default_value_t = 280,
        value_name = "S"
    )]
    pub poll_hold_s: u64,
    /// The longest back-off between attempts while the hub is unreachable, in ms (at least 100).
    #[arg(
        long,
        env = "TRANTOR_HUB_BACKOFF_MAX_MS",
        default_value_t = 30_000,
        value_name = "MS"
    )]
    pub hub_backoff_max_ms: u64,
    /// Where CLIs keep their data (opencode's sessions) [default: $HOME/.local/share].
    #[arg(long, env = "XDG_DATA_HOME", value_name = "PATH")]
    pub data_home: Option<PathBuf>,
    /// Where Codex keeps its configuration and session rollouts [default: $HOME/.codex].
    #[arg(long, env = "CODEX_HOME", value_name = "PATH")]
    pub codex_home: Option<PathBuf>,
    /// The tokens the seat's key may enroll with.
    #[command(flatten)]
    pub tokens: EnrollTokens,
    /// The operator's owner key (a name in <bus>/keys) that mints the seat a one-use invite when
    /// the hub does not know the seat's key [default: `ownerIdentity` in <bus>/config.json].
    #[arg(long, env = "RELAY_OWNER_IDENTITY", value_name = "NAME")]
    pub owner_identity: Option<String>,
}

/// Why the seat's identity could not be worked out.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// No agent was named anywhere.
    #[error(
        "usage: trantor runner <agent> [dir]  (agent: claude, codex, kimi, gemini, dsh, opencode, command, or an opencode provider; CREW_AGENT also names it)"
    )]
    NoAgent,
    /// The persona is not a safe bus/file name.
    #[error(
        "invalid persona {0:?}: use 1-64 characters of A-Z a-z 0-9 _ . - (not starting with . or -)"
    )]
    BadPersona(String),
    /// The project could not be resolved.
    #[error(
        "cannot tell the project of {0}: set RELAY_PROJECT or run the seat inside a git repository"
    )]
    NoProject(PathBuf),
    /// The `command` driver needs a template.
    #[error(
        "the command driver needs CREW_COMMAND (a shell template; the prompt is in $TRANTOR_PROMPT_FILE)"
    )]
    NoCommand,
    /// `TRANTOR_RETRY_MS` is not a list of positive whole numbers of ms.
    #[error(
        "invalid TRANTOR_RETRY_MS {0:?}: use comma-separated whole numbers of ms above 0, e.g. 30000,60000"
    )]
    BadRetryLadder(String),
}

/// The default redelivery ladder (docs/runner.md §5.3).
pub const DEFAULT_RETRY_LADDER_MS: [u64; 5] = [30_000, 60_000, 120_000, 300_000, 900_000];

/// The resolved configuration of one seat.
#[derive(Debug, Clone)]
pub struct Config {
    /// The CLI family (how the seat runs).
    pub agent: String,
    /// Who the seat is: bus name, files, worktree branch.
    pub persona: String,
    /// The driver: `CREW_SWAP_DRIVER` or AGENT.
    pub driver: String,
    /// The directory the seat serves.
    pub dir: PathBuf,
    /// The project key.
    pub project: String,
    /// The bus name of the seat.
    pub session: String,
    /// The one bus directory every runner file lives under.
    pub bus_dir: PathBuf,
    /// The hub base URL.
    pub hub_url: String,
    /// The orchestrator session alerts go to (`<host id>:<project>`).
    pub orchestrator: String,
    /// `CREW_MODEL` (empty = the CLI's default).
    pub model: String,
    /// The effort level from `CREW_EFFORT` (JSON string, or an object keyed by agent/driver).
    pub effort: Option<String>,
    /// `CREW_CREDENTIAL`: the named credential the seat runs on (with a pool: the one it
    /// runs on now, chosen before each turn).
    pub credential: Option<String>,
    /// `CREW_POOL`: the credentials the seat may run on, in order of preference (empty: none).
    pub pool: Vec<String>,
    /// `RUNNER_RULES` override.
    pub rules: Option<String>,
    /// `CREW_KICKOFF` override.
    pub kickoff: Option<String>,
    /// Time box in ms (0 = off).
    pub turn_max_ms: u64,
    /// Replace a runner that holds the seat lock (docs/runner.md §24.1).
    pub take_over: bool,
    /// The wait for a predecessor's CLI before its group is ended, ms (docs/runner.md §24.3).
    pub adopt_grace_ms: u64,
    /// Liveness-extension ceiling in ms.
    pub turn_ceiling_ms: u64,
    /// Stall window in ms (never derived from the box; at least 10 min).
    pub watchdog_ms: u64,
    /// Redelivery backoff ladder in ms.
    pub retry_ladder: Vec<u64>,
    /// Length of a bounded park in ms (0 = parks are unbounded).
    pub park_window_ms: u64,
    /// Supervised exit after a park (0 = never).
    pub park_max_ms: u64,
    /// Expiry of `hub:duty` alerts in ms.
    pub hub_alert_ttl_ms: i64,
    /// Pulse cadence in ms (0 = off).
    pub pulse_ms: u64,
    /// The mission note a pulse re-reads.
    pub mission_file: PathBuf,
    /// `RUNNER_DUTY_NUDGES=1`.
    pub duty_nudges: bool,
    /// `TRANTOR_NO_DESKTOP_NOTIFY=1`.
    pub no_desktop_notify: bool,
    /// Longest `/poll` hold in seconds (280 like the original; `TRANTOR_POLL_HOLD_S` shortens it).
    pub poll_hold_s: u64,
    /// Longest back-off between attempts while the hub is unreachable.
    pub hub_backoff_max_ms: u64,
    /// The `command` driver's template for every turn (`CREW_COMMAND`).
    pub command: Option<String>,
    /// The `command` driver's template for resumed turns (`CREW_COMMAND_NEXT`, else `command`).
    pub command_next: Option<String>,
    /// The home directory (CLI transcripts, credentials).
    pub home: PathBuf,
    /// Where CLIs keep their data (`XDG_DATA_HOME`, else `<home>/.local/share`).
    pub data_home: PathBuf,
    /// Where Codex writes its session rollouts (`CODEX_HOME`, else `<home>/.codex`).
    pub codex_home: PathBuf,
    /// The shared duty-nudge claim file.
    pub duty_nudge_state: PathBuf,
    /// Turns run in `dir` itself, without a seat worktree.
    pub no_worktree: bool,
    /// A swap's stage path (`CREW_SWAP_STAGE`).
    pub swap_stage: Option<String>,
    /// The agent a swap's release must name (`CREW_SWAP_AGENT`).
    pub swap_agent: Option<String>,
    /// The staging identity's name before `:<project>` (file-name safe).
    pub swap_label: String,
    /// How the seat's key enrolls on a hub that does not know it (docs/runner.md §3).
    pub enroll: trantor_proto::enroll::EnrollOptions,
    /// The banner logged at boot.
    pub title: String,
    /// The line logged after the banner.
    pub about: Option<String>,
}

/// Check a persona: a safe bus and file name.
pub fn validate_persona(p: &str) -> Result<String, ConfigError> {
    let ok = !p.is_empty()
        && p.len() <= 64
        && !p.starts_with(['.', '-'])
        && p.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
    if ok {
        Ok(p.to_string())
    } else {
        Err(ConfigError::BadPersona(p.to_string()))
    }
}

/// The redelivery ladder from `TRANTOR_RETRY_MS`: comma-separated ms, each a whole number
/// above 0; anything else (an empty list included) is refused, as every knob is.
pub fn retry_ladder(raw: &str) -> Result<Vec<u64>, ConfigError> {
    raw.split(',')
        .map(|s| match s.trim().parse::<u64>() {
            Ok(v) if v > 0 => Ok(v),
            _ => Err(ConfigError::BadRetryLadder(raw.to_string())),
        })
        .collect()
}

/// The effort level for `driver` from `CREW_EFFORT`: a plain word, a JSON string, or a JSON
/// object keyed by agent or driver.
fn effort_for(raw: Option<String>, agent: &str, driver: &str) -> Option<String> {
    let raw = raw?;
    match serde_json::from_str::<serde_json::Value>(&raw) {
        Ok(serde_json::Value::String(s)) => Some(s),
        Ok(serde_json::Value::Object(map)) => map
            .get(agent)
            .or_else(|| map.get(driver))
            .and_then(|v| v.as_str())
            .map(str::to_string),
        Ok(_) => None,
        Err(_) => Some(raw),
    }
    .filter(|s| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    })
}

impl Config {
    /// Resolve from the arguments, identity from the process environment.
    pub fn from_process(args: &RunnerArgs) -> Result<Config, ConfigError> {
        Config::resolve(args, &ProcessEnv)
    }

    /// Resolve the seat's configuration from its arguments, identity coming from `env`.
    pub fn resolve(args: &RunnerArgs, env: &dyn Env) -> Result<Config, ConfigError> {
        let given = |v: &Option<String>| {
            v.as_deref()
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
        };
        let agent = given(&args.swap_agent)
            .or_else(|| given(&args.crew_agent))
            .or_else(|| given(&args.agent))
            .ok_or(ConfigError::NoAgent)?;
        let persona = match given(&args.persona) {
            Some(p) => validate_persona(&p)?,
            None => validate_persona(&agent)?,
        };
        let driver = given(&args.swap_driver).unwrap_or_else(|| agent.clone());
        let dir = match &args.dir {
            Some(d) => d.clone(),
            None => std::env::current_dir().unwrap_or_else(|_| PathBuf::from(".")),
        };
        let dir = std::fs::canonicalize(&dir).unwrap_or(dir);
        let project = match given(&args.project) {
            Some(p) => p,
            None => identity::checkout_project(&dir)
                .ok_or_else(|| ConfigError::NoProject(dir.clone()))?,
        };
        let session = given(&args.session).unwrap_or_else(|| format!("{persona}:{project}"));
        let bus = identity::bus_dir(env);
        let hub_url = match given(&args.hub) {
            Some(u) => u.trim_end_matches('/').to_string(),
            None => identity::hub_url_for(&no_relay_url(env), &project).0,
        };
        let orchestrator = format!("{}:{}", identity::host_id(env), project);
        let command = given(&args.command);
        if driver == "command" && command.is_none() {
            return Err(ConfigError::NoCommand);
        }
        let home = identity::home(env);
        let swap_label = given(&args.swap_label)
            .map(|l| crate::sys::paths::safe(&l))
            .unwrap_or_else(|| crate::sys::paths::safe(&format!("{agent}-swap")));
        Ok(Config {
            effort: effort_for(given(&args.effort), &agent, &driver),
            credential: given(&args.credential).or_else(|| pool_of(&args.pool).into_iter().next()),
            pool: pool_of(&args.pool),
            model: given(&args.model).unwrap_or_default(),
            rules: given(&args.rules),
            kickoff: given(&args.kickoff),
            turn_max_ms: args.turn_max_ms,
            take_over: args.take_over,
            adopt_grace_ms: args.adopt_grace_ms,
            turn_ceiling_ms: args.turn_ceiling_ms,
            // Never below the floor (10 minutes unless a drill lowers it) and never derived from
            // the box (docs/runner.md §8.2).
            watchdog_ms: args.turn_watchdog_ms.max(args.turn_watchdog_floor_ms),
            retry_ladder: retry_ladder(&args.retry_ms)?,
            park_window_ms: args.park_window_ms,
            park_max_ms: args.park_max_ms,
            hub_alert_ttl_ms: i64::try_from(args.hub_alert_ttl_ms).unwrap_or(i64::MAX),
            pulse_ms: args.pulse_ms,
            mission_file: dir.join(&args.mission_file),
            duty_nudges: args.duty_nudges,
            duty_nudge_state: args
                .duty_nudge_state
                .clone()
                .filter(|p| !p.as_os_str().is_empty())
                .unwrap_or_else(|| bus.join("duty-nudged.json")),
            no_desktop_notify: args.no_desktop_notify,
            no_worktree: args.no_worktree,
            poll_hold_s: args.poll_hold_s.clamp(1, 280),
            hub_backoff_max_ms: args.hub_backoff_max_ms.max(100),
            command_next: given(&args.command_next).or_else(|| command.clone()),
            command,
            data_home: args
                .data_home
                .clone()
                .filter(|p| !p.as_os_str().is_empty())
                .unwrap_or_else(|| home.join(".local").join("share")),
            codex_home: args
                .codex_home
                .clone()
                .filter(|p| !p.as_os_str().is_empty())
                .unwrap_or_else(|| home.join(".codex")),
            home,
            swap_stage: given(&args.swap_stage),
            swap_agent: given(&args.swap_agent),
            swap_label,
            enroll: trantor_proto::enroll::EnrollOptions {
                invite: given(&args.tokens.invite),
                bootstrap: given(&args.tokens.bootstrap_token),
                owner_identity: given(&args.owner_identity).or_else(|| {
                    trantor_proto::enroll::EnrollOptions::from_env(&|_: &str| None, &bus, &project)
                        .owner_identity
                }),
                project: project.clone(),
                kind: "agent".to_string(),
                trust_marker: false,
            },
            title: given(&args.title).unwrap_or_else(|| format!("trantor crew · {project}")),
            about: given(&args.about),
            agent,
            persona,
            driver,
            dir,
            project,
            session,
            bus_dir: bus,
            hub_url,
            orchestrator,
        })
    }
}

/// `env` without `RELAY_URL`: the runner takes that variable as its `--hub` argument, so an
/// unset argument means the bus config decides.
fn no_relay_url(env: &dyn Env) -> impl Fn(&str) -> Option<String> + '_ {
    move |k: &str| if k == "RELAY_URL" { None } else { env.get(k) }
}

/// The names of a `CREW_POOL` list (comma- or space-separated, duplicates dropped).
fn pool_of(v: &Option<String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for n in v.as_deref().unwrap_or("").split([',', ' ']) {
        let n = n.trim();
        if !n.is_empty() && !out.iter().any(|o| o == n) {
            out.push(n.to_string());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{Args, FromArgMatches};
    use std::collections::HashMap;
    use std::path::Path;

    /// The identity variables the runner reads through `trantor_proto::identity` (not
    /// arguments).
    const RUNNER_IDENTITY_ENV_VARS: &[&str] =
        &["HOME", "AGENT_BUS_DIR", "RELAY_DATA_DIR", "RELAY_HOST_ID"];

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> + use<> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k: &str| map.get(k).cloned()
    }

    /// The runner's clap command, as `trantor runner` builds it.
    fn command() -> clap::Command {
        RunnerArgs::augment_args(clap::Command::new("runner"))
    }

    /// Parse `argv` with the environment fallbacks switched off, so the test's own environment
    /// cannot leak in.
    fn parse(argv: &[&str]) -> RunnerArgs {
        let cmd = command().mut_args(|a| a.env(None::<&str>));
        let m = cmd
            .try_get_matches_from(std::iter::once("runner").chain(argv.iter().copied()))
            .expect("parse");
        RunnerArgs::from_arg_matches(&m).expect("args")
    }

    fn args(extra: &[&str]) -> RunnerArgs {
        let tmp = std::env::temp_dir();
        let dir = tmp.to_str().expect("utf-8 temp dir");
        let mut argv = vec!["claude", dir, "--project", "p"];
        argv.extend_from_slice(extra);
        parse(&argv)
    }

    #[test]
    fn persona_defaults_to_agent_and_keys_the_session() {
        let e = env(&[("HOME", "/h")]);
        let c = Config::resolve(&args(&[]), &e).expect("config");
        assert_eq!((c.agent.as_str(), c.persona.as_str()), ("claude", "claude"));
        assert_eq!(c.session, "claude:p");
        assert_eq!(c.bus_dir, PathBuf::from("/h/.agent-bus"));

        let c = Config::resolve(&args(&["--persona", "reviewer"]), &e).expect("config");
        assert_eq!(
            (c.agent.as_str(), c.persona.as_str()),
            ("claude", "reviewer")
        );
        assert_eq!(c.session, "reviewer:p");
        assert_eq!(c.driver, "claude");

        let c = Config::resolve(&args(&["--session", "claude-orch:p"]), &e).expect("config");
        assert_eq!(c.session, "claude-orch:p");
    }

    #[test]
    fn agent_precedence_and_validation() {
        let e = env(&[]);
        let c = Config::resolve(&args(&["--crew-agent", "codex"]), &e).expect("c");
        assert_eq!(c.agent, "codex");
        let both = args(&["--crew-agent", "codex", "--swap-agent", "kimi"]);
        let c = Config::resolve(&both, &e).expect("c");
        assert_eq!(c.agent, "kimi");
        assert_eq!(c.swap_label, "kimi-swap");
        let none = parse(&["--project", "p"]);
        assert!(matches!(
            Config::resolve(&none, &e),
            Err(ConfigError::NoAgent)
        ));
        assert!(matches!(
            Config::resolve(&args(&["--persona", "a:b"]), &e),
            Err(ConfigError::BadPersona(_))
        ));
        assert!(validate_persona("-x").is_err());
        assert!(validate_persona("re.viewer_2").is_ok());
        assert!(matches!(
            Config::resolve(&parse(&["command", "--project", "p"]), &e),
            Err(ConfigError::NoCommand)
        ));
    }

    #[test]
    fn ladder_and_box_defaults() {
        for bad in ["abc,0,-5", "", "3000,", "0", "1.5", "-5", "30000,x"] {
            assert!(
                matches!(retry_ladder(bad), Err(ConfigError::BadRetryLadder(_))),
                "{bad:?} refused"
            );
        }
        assert_eq!(retry_ladder("3000, 5000").expect("ok"), vec![3000, 5000]);
        let bad = Config::resolve(&args(&["--retry-ms", "30000,soon"]), &env(&[]));
        assert!(
            matches!(bad, Err(ConfigError::BadRetryLadder(_))),
            "{bad:?}"
        );
        let e = env(&[]);
        let c = Config::resolve(&args(&[]), &e).expect("c");
        assert_eq!(c.turn_max_ms, 1_200_000);
        assert_eq!(c.watchdog_ms, 600_000);
        assert_eq!(c.retry_ladder, DEFAULT_RETRY_LADDER_MS.to_vec());
        assert_eq!(c.poll_hold_s, 280);
        let c = Config::resolve(
            &args(&["--turn-watchdog-ms", "0", "--poll-hold-s", "900"]),
            &e,
        )
        .expect("c");
        assert_eq!((c.watchdog_ms, c.poll_hold_s), (600_000, 280));
        // A drill lowers the floor explicitly; a floor under a second is refused.
        let c = Config::resolve(
            &args(&[
                "--turn-watchdog-ms",
                "20000",
                "--turn-watchdog-floor-ms",
                "5000",
            ]),
            &e,
        )
        .expect("c");
        assert_eq!(c.watchdog_ms, 20_000);
        let cmd = command().mut_args(|a| a.env(None::<&str>));
        assert!(
            cmd.try_get_matches_from(["runner", "claude", "--turn-watchdog-floor-ms", "0"])
                .is_err()
        );
        // A knob that is not a number is refused, never silently replaced by its default.
        let cmd = command().mut_args(|a| a.env(None::<&str>));
        assert!(
            cmd.try_get_matches_from(["runner", "claude", "--turn-max-ms", "soon"])
                .is_err()
        );
    }

    #[test]
    fn hub_from_argument_then_bus_config() {
        let tmp = tempfile::tempdir().expect("tmp");
        std::fs::write(
            tmp.path().join("config.json"),
            r#"{"hubs":{"p":"http://cfg:9/"}}"#,
        )
        .expect("write");
        let bus = tmp.path().to_string_lossy().to_string();
        // RELAY_URL is the --hub argument's variable: the resolver must not read it again.
        let e = env(&[("AGENT_BUS_DIR", &bus), ("RELAY_URL", "http://ignored:1")]);
        let c = Config::resolve(&args(&[]), &e).expect("c");
        assert_eq!(c.hub_url, "http://cfg:9");
        let c = Config::resolve(&args(&["--hub", "http://arg:2/"]), &e).expect("c");
        assert_eq!(c.hub_url, "http://arg:2");
        assert_eq!(c.duty_nudge_state, tmp.path().join("duty-nudged.json"));
    }

    #[test]
    fn orchestrator_keeps_a_dotted_host_id_whole() {
        let e = env(&[("RELAY_HOST_ID", "box.example.com")]);
        let c = Config::resolve(&args(&[]), &e).expect("c");
        assert_eq!(c.orchestrator, "box.example.com:p");
    }

    #[test]
    fn effort_reads_words_strings_and_maps() {
        assert_eq!(
            effort_for(Some("high".into()), "claude", "claude").as_deref(),
            Some("high")
        );
        assert_eq!(
            effort_for(Some(r#"{"codex":"low"}"#.into()), "codex", "codex").as_deref(),
            Some("low")
        );
        assert_eq!(
            effort_for(Some(r#"{"codex":"low"}"#.into()), "claude", "claude"),
            None
        );
        assert_eq!(effort_for(Some("x; rm -rf".into()), "a", "a"), None);
    }

    /// The list of variables, the arguments' variables and the help agree: every argument's
    /// variable is listed, every listed variable is an argument's or an identity variable, and
    /// the help names each one.
    #[test]
    fn help_names_every_variable_the_runner_reads() {
        let mut cmd = command();
        let from_args: Vec<String> = cmd
            .get_arguments()
            .filter_map(|a| a.get_env())
            .map(|e| e.to_string_lossy().to_string())
            .collect();
        for v in &from_args {
            assert!(
                RUNNER_ENV_VARS.contains(&v.as_str()),
                "{v} is not in RUNNER_ENV_VARS"
            );
        }
        for v in RUNNER_ENV_VARS {
            assert!(
                from_args.iter().any(|a| a == v) || RUNNER_IDENTITY_ENV_VARS.contains(v),
                "{v} is listed but neither an argument nor an identity variable"
            );
        }
        let help = cmd.render_long_help().to_string();
        for v in RUNNER_ENV_VARS {
            assert!(help.contains(v), "--help does not name {v}");
        }
    }

    /// No runner module outside this one reads the environment (the release state handoff is
    /// the documented exception); test modules may.
    #[test]
    fn only_config_reads_the_environment() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut stack = vec![src.clone()];
        let mut offenders = Vec::new();
        while let Some(d) = stack.pop() {
            for entry in std::fs::read_dir(&d).expect("read_dir") {
                let p = entry.expect("entry").path();
                if p.is_dir() {
                    stack.push(p);
                    continue;
                }
                let rel = p
                    .strip_prefix(&src)
                    .expect("prefix")
                    .to_string_lossy()
                    .to_string();
                if rel == "config.rs" || rel == "periphery/release.rs" {
                    continue;
                }
                let text = std::fs::read_to_string(&p).expect("read");
                let live = text.split("#[cfg(test)]").next().unwrap_or("");
                for needle in ["env::var", "ProcessEnv", "vars_os()", "env::vars()"] {
                    if live.contains(needle) {
                        offenders.push(format!("{rel}: {needle}"));
                    }
                }
            }
        }
        assert!(
            offenders.is_empty(),
            "modules reading the environment: {offenders:?}"
        );
    }
}

//! Who the seat is and how it runs: identity (AGENT, PERSONA, DIR, PROJ, SESSION), the one
//! bus-directory resolver, the hub URL and every environment knob of docs/runner.md §2.
//!
//! Everything is read once at boot through an [`Env`] lookup so tests can pin any combination
//! without touching the process environment.

use crate::RunnerArgs;
use std::path::{Path, PathBuf};

/// A read-only view of environment variables: blank values count as unset.
pub trait Env {
    /// The trimmed value of `key`, or `None` when it is unset or blank.
    fn get(&self, key: &str) -> Option<String>;
}

/// The real process environment.
pub struct ProcessEnv;

impl Env for ProcessEnv {
    fn get(&self, key: &str) -> Option<String> {
        std::env::var(key)
            .ok()
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
    }
}

impl<F: Fn(&str) -> Option<String>> Env for F {
    fn get(&self, key: &str) -> Option<String> {
        self(key)
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
    }
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
    /// `RUNNER_RULES` override.
    pub rules: Option<String>,
    /// `CREW_KICKOFF` override.
    pub kickoff: Option<String>,
    /// Time box in ms (0 = off).
    pub turn_max_ms: u64,
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
}

/// The bus directory: `AGENT_BUS_DIR`, then `RELAY_DATA_DIR`, then `~/.agent-bus`.
///
/// The original honoured `AGENT_BUS_DIR` only in some helpers and hard-coded `~/.agent-bus`
/// elsewhere (docs/runner.md §1.2); here every runner file uses this one answer.
pub fn bus_dir(env: &dyn Env) -> PathBuf {
    if let Some(d) = env.get("AGENT_BUS_DIR") {
        return PathBuf::from(d);
    }
    if let Some(d) = env.get("RELAY_DATA_DIR") {
        return PathBuf::from(d);
    }
    home(env).join(".agent-bus")
}

/// `$HOME`, else `/tmp` (a runner without a home still needs somewhere to keep its files).
pub fn home(env: &dyn Env) -> PathBuf {
    env.get("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/tmp"))
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

fn parse_ms(env: &dyn Env, key: &str, default: u64) -> u64 {
    env.get(key)
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|v| v.is_finite() && *v >= 0.0)
        .map(|v| v as u64)
        .unwrap_or(default)
}

/// The redelivery ladder from `TRANTOR_RETRY_MS` (comma-separated ms; only finite values > 0
/// count); the default when nothing usable remains — never an empty ladder, never 0.
pub fn retry_ladder(raw: Option<&str>) -> Vec<u64> {
    let parsed: Vec<u64> = raw
        .unwrap_or("")
        .split(',')
        .filter_map(|s| s.trim().parse::<f64>().ok())
        .filter(|v| v.is_finite() && *v > 0.0)
        .map(|v| v.max(1.0) as u64)
        .collect();
    if parsed.is_empty() {
        DEFAULT_RETRY_LADDER_MS.to_vec()
    } else {
        parsed
    }
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

/// The project of `dir`: the basename of its git root.
fn git_root_name(dir: &Path) -> Option<String> {
    let out = std::process::Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["rev-parse", "--show-toplevel"])
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let top = String::from_utf8_lossy(&out.stdout).trim().to_string();
    Path::new(&top)
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .filter(|n| !n.is_empty())
}

/// The hub of `project` from `<bus>/config.json` (`hubs[project]`, then `url`).
fn hub_from_config(bus: &Path, project: &str) -> Option<String> {
    let text = std::fs::read_to_string(bus.join("config.json")).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    v.get("hubs")
        .and_then(|h| h.get(project))
        .and_then(|u| u.as_str())
        .or_else(|| v.get("url").and_then(|u| u.as_str()))
        .map(|s| s.trim_end_matches('/').to_string())
        .filter(|s| !s.is_empty())
}

/// The host id for the orchestrator address: `RELAY_HOST_ID`, else `<bus>/machine-id`, else the
/// hostname.
fn host_id(env: &dyn Env, bus: &Path) -> String {
    if let Some(h) = env.get("RELAY_HOST_ID") {
        return h;
    }
    if let Ok(s) = std::fs::read_to_string(bus.join("machine-id")) {
        let s = s.trim();
        if !s.is_empty() {
            return s.to_string();
        }
    }
    std::fs::read_to_string("/etc/hostname")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "host".to_string())
}

impl Config {
    /// Resolve the seat's configuration from its arguments and environment.
    pub fn resolve(args: &RunnerArgs, env: &dyn Env) -> Result<Config, ConfigError> {
        let agent = env
            .get("CREW_SWAP_AGENT")
            .or_else(|| env.get("CREW_AGENT"))
            .or_else(|| args.agent.clone().filter(|a| !a.trim().is_empty()))
            .ok_or(ConfigError::NoAgent)?;
        let persona = match args.persona.clone().or_else(|| env.get("CREW_PERSONA")) {
            Some(p) => validate_persona(p.trim())?,
            None => validate_persona(&agent)?,
        };
        let driver = env.get("CREW_SWAP_DRIVER").unwrap_or_else(|| agent.clone());
        let dir = match &args.dir {
            Some(d) => d.clone(),
            None => std::env::current_dir().unwrap_or_else(|_| PathBuf::from(".")),
        };
        let dir = std::fs::canonicalize(&dir).unwrap_or(dir);
        let project = match args.project.clone().or_else(|| env.get("RELAY_PROJECT")) {
            Some(p) => p,
            None => git_root_name(&dir).ok_or_else(|| ConfigError::NoProject(dir.clone()))?,
        };
        let session = args
            .session
            .clone()
            .or_else(|| env.get("RUNNER_SESSION"))
            .unwrap_or_else(|| format!("{persona}:{project}"));
        let bus = bus_dir(env);
        let hub_url = args
            .hub
            .clone()
            .or_else(|| env.get("RELAY_URL"))
            .or_else(|| hub_from_config(&bus, &project))
            .unwrap_or_else(|| "http://127.0.0.1:4477".to_string())
            .trim_end_matches('/')
            .to_string();
        let orchestrator = format!("{}:{}", host_id(env, &bus), project);
        let command = env.get("CREW_COMMAND");
        if driver == "command" && command.is_none() {
            return Err(ConfigError::NoCommand);
        }
        let turn_max_ms = parse_ms(env, "TRANTOR_TURN_MAX_MS", 1_200_000);
        // Never below 10 minutes and never derived from the box (docs/runner.md §8.2).
        let watchdog_ms = parse_ms(env, "TRANTOR_TURN_WATCHDOG_MS", 600_000).max(600_000);
        Ok(Config {
            effort: effort_for(env.get("CREW_EFFORT"), &agent, &driver),
            model: env.get("CREW_MODEL").unwrap_or_default(),
            rules: env.get("RUNNER_RULES"),
            kickoff: env.get("CREW_KICKOFF"),
            turn_max_ms,
            turn_ceiling_ms: parse_ms(env, "TRANTOR_TURN_CEILING_MS", 3_600_000),
            watchdog_ms,
            retry_ladder: retry_ladder(env.get("TRANTOR_RETRY_MS").as_deref()),
            park_window_ms: parse_ms(env, "TRANTOR_PARK_WINDOW_MS", 900_000),
            park_max_ms: parse_ms(env, "RUNNER_PARK_MAX_MS", 0),
            hub_alert_ttl_ms: parse_ms(env, "TRANTOR_HUB_ALERT_TTL_MS", 1_800_000) as i64,
            pulse_ms: parse_ms(env, "RUNNER_PULSE_MS", 0),
            mission_file: dir.join(
                env.get("RUNNER_MISSION_FILE")
                    .unwrap_or_else(|| "MISSION.md".into()),
            ),
            duty_nudges: env.get("RUNNER_DUTY_NUDGES").as_deref() == Some("1"),
            no_desktop_notify: env.get("TRANTOR_NO_DESKTOP_NOTIFY").as_deref() == Some("1"),
            poll_hold_s: parse_ms(env, "TRANTOR_POLL_HOLD_S", 280).clamp(1, 280),
            hub_backoff_max_ms: parse_ms(env, "TRANTOR_HUB_BACKOFF_MAX_MS", 30_000).max(100),
            command_next: env.get("CREW_COMMAND_NEXT").or_else(|| command.clone()),
            command,
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k: &str| map.get(k).cloned()
    }

    fn args(agent: &str) -> RunnerArgs {
        RunnerArgs {
            agent: Some(agent.into()),
            dir: Some(std::env::temp_dir()),
            ..Default::default()
        }
    }

    #[test]
    fn bus_dir_resolver_order_is_pinned() {
        let e = env(&[
            ("AGENT_BUS_DIR", "/a"),
            ("RELAY_DATA_DIR", "/b"),
            ("HOME", "/h"),
        ]);
        assert_eq!(bus_dir(&e), PathBuf::from("/a"));
        let e = env(&[("RELAY_DATA_DIR", "/b"), ("HOME", "/h")]);
        assert_eq!(bus_dir(&e), PathBuf::from("/b"));
        let e = env(&[("AGENT_BUS_DIR", "  "), ("HOME", "/h")]);
        assert_eq!(bus_dir(&e), PathBuf::from("/h/.agent-bus"));
    }

    #[test]
    fn persona_defaults_to_agent_and_keys_the_session() {
        let e = env(&[("RELAY_PROJECT", "p"), ("HOME", "/h")]);
        let c = Config::resolve(&args("claude"), &e).expect("config");
        assert_eq!((c.agent.as_str(), c.persona.as_str()), ("claude", "claude"));
        assert_eq!(c.session, "claude:p");

        let e = env(&[("RELAY_PROJECT", "p"), ("CREW_PERSONA", "reviewer")]);
        let c = Config::resolve(&args("claude"), &e).expect("config");
        assert_eq!(
            (c.agent.as_str(), c.persona.as_str()),
            ("claude", "reviewer")
        );
        assert_eq!(c.session, "reviewer:p");
        assert_eq!(c.driver, "claude");

        let e = env(&[("RELAY_PROJECT", "p"), ("RUNNER_SESSION", "claude-orch:p")]);
        let c = Config::resolve(&args("claude"), &e).expect("config");
        assert_eq!(c.session, "claude-orch:p");
    }

    #[test]
    fn agent_precedence_and_validation() {
        let e = env(&[("RELAY_PROJECT", "p"), ("CREW_AGENT", "codex")]);
        assert_eq!(
            Config::resolve(&args("claude"), &e).expect("c").agent,
            "codex"
        );
        let e = env(&[
            ("RELAY_PROJECT", "p"),
            ("CREW_AGENT", "codex"),
            ("CREW_SWAP_AGENT", "kimi"),
        ]);
        assert_eq!(
            Config::resolve(&args("claude"), &e).expect("c").agent,
            "kimi"
        );
        let e = env(&[("RELAY_PROJECT", "p")]);
        let none = RunnerArgs::default();
        assert!(matches!(
            Config::resolve(&none, &e),
            Err(ConfigError::NoAgent)
        ));
        let e = env(&[("RELAY_PROJECT", "p"), ("CREW_PERSONA", "a:b")]);
        assert!(matches!(
            Config::resolve(&args("claude"), &e),
            Err(ConfigError::BadPersona(_))
        ));
        assert!(validate_persona("-x").is_err());
        assert!(validate_persona("re.viewer_2").is_ok());
    }

    #[test]
    fn ladder_and_box_defaults() {
        assert_eq!(retry_ladder(None), DEFAULT_RETRY_LADDER_MS.to_vec());
        assert_eq!(
            retry_ladder(Some("abc,0,-5")),
            DEFAULT_RETRY_LADDER_MS.to_vec()
        );
        assert_eq!(retry_ladder(Some("3000, 5000")), vec![3000, 5000]);
        let e = env(&[("RELAY_PROJECT", "p")]);
        let c = Config::resolve(&args("claude"), &e).expect("c");
        assert_eq!(c.turn_max_ms, 1_200_000);
        assert_eq!(c.watchdog_ms, 600_000);
        let e = env(&[("RELAY_PROJECT", "p"), ("TRANTOR_TURN_WATCHDOG_MS", "0")]);
        assert_eq!(
            Config::resolve(&args("claude"), &e).expect("c").watchdog_ms,
            600_000
        );
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
}

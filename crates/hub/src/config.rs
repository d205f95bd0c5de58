//! Hub configuration: command-line flags of `trantor hub`, each with the original's environment
//! variable as fallback (`RELAY_*`), and the checks made before anything binds.

use crate::error::non_blank;
use std::path::PathBuf;
use std::time::Duration;

/// Options of `trantor hub`. Every flag falls back to the environment variable the original hub
/// reads, so existing set-ups keep working.
#[derive(Debug, Clone, clap::Args)]
pub struct HubArgs {
    /// Address to bind. A non-loopback address (another machine can reach it) is accepted only
    /// with `--auth enforce`.
    #[arg(long, env = "RELAY_HOST", default_value = "127.0.0.1")]
    pub host: String,
    /// Port to listen on.
    #[arg(long, env = "RELAY_PORT", default_value_t = 4477)]
    pub port: u16,
    /// Directory holding the store (`hub.db`); default `~/.agent-bus`.
    #[arg(long, env = "RELAY_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// Authentication mode: `off` (no checks), `warn` (unsigned and bad signatures pass with a
    /// logged warning; enrolled signers are held to their scopes) or `enforce` (every request
    /// but the public ones must be signed by an enrolled key). Any other value is refused.
    #[arg(long, env = "RELAY_AUTH", default_value = "off")]
    pub auth: String,
    /// How a key with no token may enroll: `tofu` (trust on first use, loopback binds only) or
    /// `invite` (only with an invite or the bootstrap token). Any other value is refused.
    #[arg(long, env = "RELAY_ENROLL", default_value = "tofu")]
    pub enroll: String,
    /// Token that enrolls the first identity as owner of every project (`*`); compared in
    /// constant time, and only honoured while no identity exists.
    #[arg(long, env = "RELAY_BOOTSTRAP_TOKEN", hide_env_values = true)]
    pub bootstrap_token: Option<String>,
    /// PEM certificate chain: serve HTTPS (TLS 1.2/1.3) instead of plain HTTP. Needs `--tls-key`.
    #[arg(long, env = "RELAY_TLS_CERT")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of `--tls-cert`.
    #[arg(long, env = "RELAY_TLS_KEY")]
    pub tls_key: Option<PathBuf>,
    /// A peer is online while seen within this window (ms).
    #[arg(long, env = "RELAY_ONLINE_MS", default_value_t = 300_000)]
    pub online_ms: u64,
    /// Peer rows not seen for this long are removed (ms; never below the online window).
    #[arg(long, env = "RELAY_PEER_TTL_MS", default_value_t = 21_600_000)]
    pub peer_ttl_ms: u64,
    /// Todo cards untouched this long move to `stale` (ms; 0 allowed).
    #[arg(long, env = "RELAY_TODO_STALE_MS", default_value_t = 1_209_600_000)]
    pub todo_stale_ms: u64,
    /// Period of the reaper (presence sweep, card and contract reaping, retention), ms.
    #[arg(long, env = "RELAY_REAP_INTERVAL_MS", default_value_t = 60_000)]
    pub reap_interval_ms: u64,
    /// A doing card whose owners are all offline goes stale after this long untouched (ms).
    #[arg(long, env = "RELAY_REAP_GRACE_MS", default_value_t = 900_000)]
    pub reap_grace_ms: u64,
    /// An unanswered contract whose assignee has not been seen this long is abandoned (ms).
    #[arg(long, env = "RELAY_CONTRACT_ABANDON_MS", default_value_t = 3_600_000)]
    pub contract_abandon_ms: u64,
    /// How far back the contract ledger looks (ms, at least 60 000).
    #[arg(long, env = "RELAY_CONTRACT_WINDOW_MS", default_value_t = 86_400_000)]
    pub contract_window_ms: u64,
    /// Read history (delivered messages, non-card events) older than this many days is pruned.
    /// Unread direct messages and cards are never pruned. 0 keeps everything.
    #[arg(long, env = "RELAY_RETENTION_DAYS", default_value_t = 30)]
    pub retention_days: u64,
    /// Read-history retention in ms; overrides the days when set (drills and tests).
    #[arg(long, env = "RELAY_RETENTION_MS")]
    pub retention_ms: Option<u64>,
    /// How long `_op` outcomes are kept for replay (ms).
    #[arg(long, env = "RELAY_OP_TTL_MS", default_value_t = 86_400_000)]
    pub op_ttl_ms: u64,
    /// How often in-memory presence (`lastSeen`) is written to the store (ms).
    #[arg(long, env = "RELAY_PRESENCE_FLUSH_MS", default_value_t = 5_000)]
    pub presence_flush_ms: u64,
    /// The duty session unread mail is escalated to (overrides `trantor duty appoint`).
    #[arg(long, env = "RELAY_DUTY_SESSION")]
    pub duty_session: Option<String>,
    /// A direct message unread this long is escalated by the duty service (ms).
    #[arg(long, env = "RELAY_DUTY_UNDELIVERED_MS", default_value_t = 120_000)]
    pub duty_undelivered_ms: u64,
    /// The duty session counts as dark after this long without a heartbeat (ms).
    #[arg(long, env = "RELAY_DUTY_DARK_MS", default_value_t = 600_000)]
    pub duty_dark_ms: u64,
    /// Duty also counts as dark while this many escalations sit unread past the stuck age.
    #[arg(long, env = "RELAY_DUTY_STUCK_MAX", default_value_t = 10)]
    pub duty_stuck_max: u64,
    /// Age at which an unread escalation counts towards the stuck limit (ms).
    #[arg(long, env = "RELAY_DUTY_STUCK_MS", default_value_t = 1_800_000)]
    pub duty_stuck_ms: u64,
    /// Period of the duty service's pass (ms).
    #[arg(long, env = "RELAY_OVERSEER_TICK_MS", default_value_t = 30_000)]
    pub duty_tick_ms: u64,
    /// An overseer condition must be gone this long before its episode ends (ms).
    #[arg(long, env = "RELAY_OVERSEER_CLEAR_MS", default_value_t = 600_000)]
    pub overseer_clear_ms: u64,
    /// How long a file claim (and a file read) holds (ms).
    #[arg(long, env = "RELAY_CLAIM_TTL_MS", default_value_t = 600_000)]
    pub claim_ttl_ms: u64,
    /// Pending proposals allowed per session.
    #[arg(long, env = "RELAY_PROPOSAL_CAP", default_value_t = 3)]
    pub proposal_cap: u64,
    /// Extra `Host` names the hub answers to (repeatable, or comma-separated in the variable),
    /// for a reverse proxy in front of it. The hub always answers to localhost, 127.0.0.1,
    /// [::1] and its bind address; any other `Host` is refused (DNS-rebinding defence).
    #[arg(
        long = "allowed-host",
        env = "TRANTOR_ALLOWED_HOSTS",
        value_delimiter = ','
    )]
    pub allowed_hosts: Vec<String>,
    /// A client must send its complete request headers within this time (ms); also closes
    /// keep-alive connections idle for this long.
    #[arg(long, env = "TRANTOR_HEADER_TIMEOUT_MS", default_value_t = 15_000)]
    pub header_timeout_ms: u64,
    /// Most connections served at once; 0 = derived from the file-descriptor limit (which the
    /// hub raises to its hard maximum at start).
    #[arg(long, env = "TRANTOR_MAX_CONNECTIONS", default_value_t = 0)]
    pub max_connections: usize,
    /// A peer that never registered (only polled, read or sent) is removed after this long
    /// without being seen (ms; never below the online window).
    #[arg(long, env = "TRANTOR_ANON_PEER_TTL_MS", default_value_t = 3_600_000)]
    pub anon_peer_ttl_ms: u64,
    /// Durability of each acknowledged write: `full` fsyncs every commit (survives power loss
    /// and an OS crash); `normal` survives the hub process being killed, but the last commits
    /// before a power loss or OS crash may be lost.
    #[arg(long, env = "TRANTOR_SYNC", value_enum, default_value_t = SyncLevel::Full)]
    pub sync: SyncLevel,
    /// Keep the store in PostgreSQL instead of the embedded SQLite file: a
    /// `postgres://user@host:port/db` URL (also read from `DATABASE_URL`). Several hubs may
    /// share one database.
    #[arg(long = "store", env = "RELAY_DATABASE_URL")]
    pub store: Option<String>,
    /// Keep no delivery record (docs/protocol.md §5.8): no open entry beside each direct
    /// message, and `/delivery` answers 404 as the original's hub does, so runners carry on
    /// from their own disk. For measuring the record's cost (`trantor bench hub --only
    /// delivery`) and for a disk-bound hub that wants one row fewer per send.
    #[arg(long, env = "TRANTOR_NO_DELIVERY_RECORD")]
    pub no_delivery_record: bool,
}

/// The store's durability level (`--sync`, `TRANTOR_SYNC`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum SyncLevel {
    /// fsync on every commit: an acknowledged write survives power loss.
    #[default]
    Full,
    /// fsync at checkpoints only: an acknowledged write survives a killed process, not power
    /// loss.
    Normal,
}

impl Default for HubArgs {
    fn default() -> Self {
        HubArgs {
            host: "127.0.0.1".into(),
            port: 4477,
            data_dir: None,
            auth: "off".into(),
            enroll: "tofu".into(),
            bootstrap_token: None,
            tls_cert: None,
            tls_key: None,
            online_ms: 300_000,
            peer_ttl_ms: 21_600_000,
            todo_stale_ms: 1_209_600_000,
            reap_interval_ms: 60_000,
            reap_grace_ms: 900_000,
            contract_abandon_ms: 3_600_000,
            contract_window_ms: 86_400_000,
            retention_days: 30,
            retention_ms: None,
            op_ttl_ms: 86_400_000,
            presence_flush_ms: 5_000,
            duty_session: None,
            duty_undelivered_ms: 120_000,
            duty_dark_ms: 600_000,
            duty_stuck_max: 10,
            duty_stuck_ms: 1_800_000,
            duty_tick_ms: 30_000,
            overseer_clear_ms: 600_000,
            claim_ttl_ms: 600_000,
            proposal_cap: 3,
            allowed_hosts: Vec::new(),
            header_timeout_ms: 15_000,
            max_connections: 0,
            anon_peer_ttl_ms: 3_600_000,
            sync: SyncLevel::Full,
            store: None,
            no_delivery_record: false,
        }
    }
}

/// Why the hub refuses to start.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A non-loopback bind address was asked for without `RELAY_AUTH=enforce`.
    #[error(
        "refusing to bind {host} with RELAY_AUTH={mode}: another machine could reach the hub \
         and speak as any seat. Set RELAY_AUTH=enforce (every request signed by an enrolled \
         key), or RELAY_HOST=127.0.0.1"
    )]
    NonLoopback {
        /// The refused address.
        host: String,
        /// The mode in force.
        mode: String,
    },
    /// No data directory could be worked out.
    #[error("no data directory: set RELAY_DATA_DIR or HOME")]
    NoDataDir,
    /// `--store` / `RELAY_DATABASE_URL` names something other than a PostgreSQL URL.
    #[error(
        "--store / RELAY_DATABASE_URL / DATABASE_URL = {url:?}: not a PostgreSQL URL; expected \
         postgres://user@host:port/database (leave it unset for the embedded SQLite store)"
    )]
    StoreUrl {
        /// The refused value, with any password masked.
        url: String,
    },
    /// An authentication mode this hub does not know was asked for.
    #[error("RELAY_AUTH={mode}: unknown mode; use off, warn or enforce")]
    AuthUnsupported {
        /// The refused mode, as given.
        mode: String,
    },
    /// Only one of the TLS certificate and key was given.
    #[error("TLS needs both --tls-cert (RELAY_TLS_CERT) and --tls-key (RELAY_TLS_KEY)")]
    TlsHalf,
    /// An enrollment mode this hub does not know was asked for.
    #[error("RELAY_ENROLL={mode}: unknown mode; use tofu or invite")]
    EnrollUnsupported {
        /// The refused mode, as given.
        mode: String,
    },
}

/// The validated configuration the hub runs with (all durations resolved).
#[derive(Debug, Clone)]
pub struct Config {
    /// Bind address.
    pub host: String,
    /// Port.
    pub port: u16,
    /// Data directory.
    pub data_dir: PathBuf,
    /// Online window, ms.
    pub online_ms: i64,
    /// Peer TTL, ms.
    pub peer_ttl_ms: i64,
    /// Todo age-out, ms.
    pub todo_stale_ms: i64,
    /// Reaper period.
    pub reap_interval: Duration,
    /// Doing-card grace, ms.
    pub reap_grace_ms: i64,
    /// Contract abandon threshold, ms.
    pub contract_abandon_ms: i64,
    /// Contract ledger window, ms.
    pub contract_window_ms: i64,
    /// Read-history retention, ms (0 = keep everything).
    pub retention_ms: i64,
    /// `_op` outcome retention, ms.
    pub op_ttl_ms: i64,
    /// Presence flush period.
    pub presence_flush: Duration,
    /// Duty session from the command line or environment (wins over the appointed one).
    pub duty_session: Option<String>,
    /// Age before an unread direct message is escalated, ms.
    pub duty_undelivered_ms: i64,
    /// Heartbeat gap after which duty is dark, ms.
    pub duty_dark_ms: i64,
    /// Unread escalations (older than `duty_stuck_ms`) that make duty count as dark.
    pub duty_stuck_max: usize,
    /// Age of an unread escalation that counts towards the stuck limit, ms.
    pub duty_stuck_ms: i64,
    /// Duty pass period.
    pub duty_tick: Duration,
    /// How long an overseer condition must be gone before its episode ends, ms.
    pub overseer_clear_ms: i64,
    /// How long a file claim or read holds, ms.
    pub claim_ttl_ms: i64,
    /// Pending proposals allowed per session.
    pub proposal_cap: usize,
    /// `Host` names (lowercase, without port) accepted besides the loopback names.
    pub allowed_hosts: Vec<String>,
    /// Header-read and keep-alive idle timeout.
    pub header_timeout: Duration,
    /// Connection cap (0 = from the file-descriptor limit).
    pub max_connections: usize,
    /// TTL of peers that never registered, ms.
    pub anon_peer_ttl_ms: i64,
    /// Store durability level.
    pub sync: SyncLevel,
    /// Authentication mode.
    pub auth: AuthMode,
    /// Whether a key may enroll with no token on a loopback bind (`RELAY_ENROLL=tofu`).
    pub enroll_tofu: bool,
    /// The bootstrap token, if set (never logged).
    pub bootstrap_token: Option<String>,
    /// TLS certificate chain and key files (PEM), when the hub serves HTTPS.
    pub tls: Option<(PathBuf, PathBuf)>,
    /// PostgreSQL URL of the store; `None` keeps the embedded SQLite file under `data_dir`.
    pub store_url: Option<String>,
    /// `--no-delivery-record`: no open entry per direct message, `/delivery` answers 404.
    pub no_delivery_record: bool,
}

/// The PostgreSQL URL asked for, from `--store` / `RELAY_DATABASE_URL`, else `DATABASE_URL`;
/// anything that is not a `postgres://` or `postgresql://` URL is refused rather than ignored.
fn store_url(given: Option<&str>) -> Result<Option<String>, ConfigError> {
    let from_env = std::env::var("DATABASE_URL").ok();
    let Some(url) = given.or(from_env.as_deref()).map(str::trim) else {
        return Ok(None);
    };
    if url.is_empty() {
        return Ok(None);
    }
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        Ok(Some(url.to_string()))
    } else {
        Err(ConfigError::StoreUrl {
            url: trantor_proto::text::mask_url(url),
        })
    }
}

/// Whether `host` names a loopback address (`127.*`, `localhost`, `::1`, `[::1]`).
pub fn is_loopback(host: &str) -> bool {
    let h = host.trim();
    h.starts_with("127.") || h.eq_ignore_ascii_case("localhost") || h == "::1" || h == "[::1]"
}

/// The host part of a `Host` header value: `[::1]:80` → `::1`, `localhost:4477` → `localhost`.
pub fn strip_port(host: &str) -> &str {
    if let Some(v6) = host.strip_prefix('[') {
        return v6.split_once(']').map(|(h, _)| h).unwrap_or(v6);
    }
    match host.rsplit_once(':') {
        // A bare IPv6 address has several colons and no port.
        Some((h, port)) if !h.contains(':') && port.bytes().all(|b| b.is_ascii_digit()) => h,
        _ => host,
    }
}

impl Config {
    /// Whether a request's `Host` header names this hub (DNS-rebinding defence): the loopback
    /// names, the bind address, or a configured extra name; with or without a port.
    pub fn host_allowed(&self, host_header: &str) -> bool {
        let h = strip_port(host_header.trim()).to_ascii_lowercase();
        h == "localhost"
            || h == "::1"
            || h.parse::<std::net::Ipv4Addr>()
                .is_ok_and(|a| a.is_loopback())
            || h == self.host.to_ascii_lowercase()
            || self.allowed_hosts.contains(&h)
    }
}

fn ms(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

impl Config {
    /// Validate the arguments: refuse non-loopback binds, resolve the data directory and clamp
    /// the timers to the ranges the original enforces.
    pub fn from_args(args: &HubArgs) -> Result<Config, ConfigError> {
        let auth = AuthMode::parse(&args.auth).ok_or_else(|| ConfigError::AuthUnsupported {
            mode: args.auth.trim().to_string(),
        })?;
        if !is_loopback(&args.host) && auth != AuthMode::Enforce {
            return Err(ConfigError::NonLoopback {
                host: args.host.clone(),
                mode: auth.as_str().to_string(),
            });
        }
        let tls = match (&args.tls_cert, &args.tls_key) {
            (Some(c), Some(k)) => Some((c.clone(), k.clone())),
            (None, None) => None,
            _ => return Err(ConfigError::TlsHalf),
        };
        let enroll_tofu = match args.enroll.trim().to_ascii_lowercase().as_str() {
            "" | "tofu" => true,
            "invite" => false,
            other => {
                return Err(ConfigError::EnrollUnsupported {
                    mode: other.to_string(),
                });
            }
        };
        let data_dir = match &args.data_dir {
            Some(d) if !d.as_os_str().is_empty() => d.clone(),
            _ => std::env::var_os("HOME")
                .filter(|h| !h.is_empty())
                .map(|h| PathBuf::from(h).join(".agent-bus"))
                .ok_or(ConfigError::NoDataDir)?,
        };
        let online_ms = ms(args.online_ms).max(1);
        Ok(Config {
            host: args
                .host
                .trim()
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_string(),
            port: args.port,
            data_dir,
            online_ms,
            peer_ttl_ms: ms(args.peer_ttl_ms).max(online_ms),
            todo_stale_ms: ms(args.todo_stale_ms),
            reap_interval: Duration::from_millis(args.reap_interval_ms.max(10)),
            reap_grace_ms: ms(args.reap_grace_ms),
            contract_abandon_ms: ms(args.contract_abandon_ms),
            contract_window_ms: ms(args.contract_window_ms).max(60_000),
            retention_ms: ms(args
                .retention_ms
                .unwrap_or(args.retention_days.saturating_mul(86_400_000))),
            op_ttl_ms: ms(args.op_ttl_ms).max(60_000),
            presence_flush: Duration::from_millis(args.presence_flush_ms.clamp(50, 600_000)),
            duty_session: non_blank(args.duty_session.as_deref()),
            duty_undelivered_ms: ms(args.duty_undelivered_ms),
            duty_dark_ms: ms(args.duty_dark_ms).max(1),
            duty_stuck_max: usize::try_from(args.duty_stuck_max.max(1)).unwrap_or(usize::MAX),
            duty_stuck_ms: ms(args.duty_stuck_ms),
            duty_tick: Duration::from_millis(args.duty_tick_ms.clamp(10, 600_000)),
            overseer_clear_ms: ms(args.overseer_clear_ms),
            claim_ttl_ms: ms(args.claim_ttl_ms).max(1),
            proposal_cap: usize::try_from(args.proposal_cap.max(1)).unwrap_or(usize::MAX),
            allowed_hosts: args
                .allowed_hosts
                .iter()
                .map(|h| strip_port(h.trim()).to_ascii_lowercase())
                .filter(|h| !h.is_empty())
                .collect(),
            header_timeout: Duration::from_millis(args.header_timeout_ms.max(100)),
            max_connections: args.max_connections,
            anon_peer_ttl_ms: ms(args.anon_peer_ttl_ms).max(online_ms),
            sync: args.sync,
            auth,
            enroll_tofu,
            bootstrap_token: non_blank(args.bootstrap_token.as_deref()),
            tls,
            store_url: store_url(args.store.as_deref())?,
            no_delivery_record: args.no_delivery_record,
        })
    }

    /// Path of the SQLite database file.
    pub fn db_path(&self) -> PathBuf {
        self.data_dir.join("hub.db")
    }
}

/// `RELAY_AUTH`: how the hub treats signatures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthMode {
    /// No checks: signature headers are ignored, no identity is resolved.
    Off,
    /// Unsigned or badly signed requests pass with a logged warning; an enrolled signer is held
    /// to its scopes.
    Warn,
    /// Every non-public request must be signed by an enrolled, unrevoked key.
    Enforce,
}

impl AuthMode {
    /// Parses `off`, `warn` or `enforce` (any case; empty = `off`).
    pub fn parse(s: &str) -> Option<AuthMode> {
        match s.trim().to_ascii_lowercase().as_str() {
            "" | "off" => Some(AuthMode::Off),
            "warn" => Some(AuthMode::Warn),
            "enforce" => Some(AuthMode::Enforce),
            _ => None,
        }
    }

    /// The wire name (`authMode` in `/peers` and `/`).
    pub fn as_str(self) -> &'static str {
        match self {
            AuthMode::Off => "off",
            AuthMode::Warn => "warn",
            AuthMode::Enforce => "enforce",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_detection() {
        for h in ["127.0.0.1", "127.1.2.3", "localhost", "::1", "[::1]"] {
            assert!(is_loopback(h), "{h}");
        }
        for h in ["0.0.0.0", "192.168.1.2", "::", "example.com", ""] {
            assert!(!is_loopback(h), "{h}");
        }
    }

    #[test]
    fn non_loopback_needs_enforce() {
        for mode in ["off", "warn"] {
            let args = HubArgs {
                host: "0.0.0.0".into(),
                auth: mode.into(),
                data_dir: Some("/tmp/x".into()),
                ..HubArgs::default()
            };
            assert!(matches!(
                Config::from_args(&args),
                Err(ConfigError::NonLoopback { .. })
            ));
        }
        let args = HubArgs {
            host: "0.0.0.0".into(),
            auth: "enforce".into(),
            data_dir: Some("/tmp/x".into()),
            ..HubArgs::default()
        };
        assert!(Config::from_args(&args).is_ok());
    }

    #[test]
    fn host_header_check() {
        let args = HubArgs {
            data_dir: Some("/tmp/x".into()),
            allowed_hosts: vec!["Hub.Example:443".into()],
            ..HubArgs::default()
        };
        let c = Config::from_args(&args).expect("config");
        for h in [
            "localhost",
            "localhost:4477",
            "127.0.0.1",
            "127.0.0.1:1",
            "[::1]",
            "[::1]:4477",
            "hub.example",
            "HUB.EXAMPLE:80",
        ] {
            assert!(c.host_allowed(h), "{h}");
        }
        for h in [
            "evil.com",
            "evil.com:4477",
            "localhost.evil.com",
            "127.0.0.1.nip.io",
            "",
            "[::2]:80",
        ] {
            assert!(!c.host_allowed(h), "{h}");
        }
    }

    #[test]
    fn unknown_auth_and_enroll_modes_are_refused() {
        for mode in ["bogus", "enforced", "on"] {
            let args = HubArgs {
                data_dir: Some("/tmp/x".into()),
                auth: mode.into(),
                ..HubArgs::default()
            };
            assert!(matches!(
                Config::from_args(&args),
                Err(ConfigError::AuthUnsupported { .. })
            ));
        }
        for mode in ["off", "warn", "ENFORCE"] {
            let args = HubArgs {
                data_dir: Some("/tmp/x".into()),
                auth: mode.into(),
                ..HubArgs::default()
            };
            assert!(Config::from_args(&args).is_ok(), "{mode}");
        }
        let args = HubArgs {
            data_dir: Some("/tmp/x".into()),
            enroll: "open".into(),
            ..HubArgs::default()
        };
        assert!(matches!(
            Config::from_args(&args),
            Err(ConfigError::EnrollUnsupported { .. })
        ));
    }

    #[test]
    fn timers_are_clamped() {
        let args = HubArgs {
            data_dir: Some("/tmp/x".into()),
            online_ms: 1000,
            peer_ttl_ms: 10,
            contract_window_ms: 5,
            ..HubArgs::default()
        };
        let c = Config::from_args(&args).expect("config");
        assert_eq!(c.peer_ttl_ms, 1000);
        assert_eq!(c.contract_window_ms, 60_000);
        assert_eq!(c.db_path(), PathBuf::from("/tmp/x/hub.db"));
    }

    #[test]
    fn store_url_is_checked_and_masked() {
        let args = HubArgs {
            data_dir: Some("/tmp/x".into()),
            store: Some("mysql://u:secret@h/db".into()),
            ..HubArgs::default()
        };
        let err = Config::from_args(&args).err().map(|e| e.to_string());
        let err = err.unwrap_or_default();
        assert!(err.contains("not a PostgreSQL URL"), "{err}");
        assert!(!err.contains("secret"), "{err}");
        let args = HubArgs {
            data_dir: Some("/tmp/x".into()),
            store: Some("postgres://postgres@127.0.0.1:5432/t".into()),
            ..HubArgs::default()
        };
        let c = Config::from_args(&args).expect("config");
        assert_eq!(
            c.store_url.as_deref(),
            Some("postgres://postgres@127.0.0.1:5432/t")
        );
        assert_eq!(
            trantor_proto::text::mask_url("postgres://a:b@h/d"),
            "postgres://a:***@h/d"
        );
    }
}

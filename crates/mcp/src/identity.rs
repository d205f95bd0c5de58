//! Who this process is on the bus and which hub it talks to.
//!
//! One resolver for the MCP server and every CLI verb, so an agent's tools and the person's
//! terminal agree on the session and project without configuration. The order follows the
//! original clients (`docs/protocol.md` §2):
//!
//! * project: `RELAY_PROJECT`, else the basename of the git root above the working directory,
//!   else the working directory's basename;
//! * session: `RELAY_SESSION`, else `<RELAY_AGENT>:<project>` (or `RELAY_AGENT_FALLBACK`), else
//!   `<host id>:<project>` where the host id is `RELAY_HOST_ID`, else `~/.agent-bus/machine-id`,
//!   else the host name;
//! * hub: `RELAY_URL`, else `~/.agent-bus/config.json` `hubs[<project>]`, else its `url`, else
//!   `http://127.0.0.1:4477`.

use std::path::{Path, PathBuf};

/// The default hub address.
pub const DEFAULT_HUB_URL: &str = "http://127.0.0.1:4477";

/// A resolved identity: session, project and hub.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The bus address, `<who>:<project>`.
    pub session: String,
    /// The project the session works in.
    pub project: String,
    /// The hub base URL.
    pub hub_url: String,
    /// How the hub URL was chosen, for `relay_whoami` and `trantor doctor`.
    pub hub_via: String,
    /// How the session was chosen.
    pub session_via: String,
}

/// Explicit choices that win over the environment (command-line flags).
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    /// Session to use.
    pub session: Option<String>,
    /// Project to use.
    pub project: Option<String>,
    /// Hub URL to use.
    pub hub_url: Option<String>,
}

fn env_nonempty(name: &str) -> Option<String> {
    std::env::var(name)
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

fn nonempty(s: &Option<String>) -> Option<String> {
    s.as_ref()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

/// The user's home directory (`HOME`), falling back to the current directory.
pub fn home_dir() -> PathBuf {
    env_nonempty("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// The bus directory: `AGENT_BUS_DIR`, else `RELAY_DATA_DIR`, else `~/.agent-bus` — the same
/// answer the runner gives, so the runner's park, err and ledger files, `trantor up`'s seat
/// records and the client config all sit in one place.
pub fn bus_dir() -> PathBuf {
    env_nonempty("AGENT_BUS_DIR")
        .or_else(|| env_nonempty("RELAY_DATA_DIR"))
        .map(PathBuf::from)
        .unwrap_or_else(|| home_dir().join(".agent-bus"))
}

/// The basename of the git root above `dir` (a `.git` directory or file marks it).
pub fn git_root(dir: &Path) -> Option<PathBuf> {
    let mut cur = Some(dir);
    while let Some(d) = cur {
        if d.join(".git").exists() {
            return Some(d.to_path_buf());
        }
        cur = d.parent();
    }
    None
}

/// The project for `dir`: `RELAY_PROJECT`, else the git root's basename, else `dir`'s basename.
pub fn project_for(dir: &Path) -> String {
    if let Some(p) = env_nonempty("RELAY_PROJECT") {
        return p;
    }
    let base = git_root(dir).unwrap_or_else(|| dir.to_path_buf());
    base.file_name()
        .map(|n| n.to_string_lossy().to_string())
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "default".to_string())
}

/// The host id: `RELAY_HOST_ID`, else `~/.agent-bus/machine-id`, else the host name.
pub fn host_id() -> String {
    if let Some(h) = env_nonempty("RELAY_HOST_ID") {
        return h;
    }
    let stored = std::fs::read_to_string(bus_dir().join("machine-id"))
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty());
    if let Some(h) = stored {
        return h;
    }
    hostname()
}

fn hostname() -> String {
    for path in ["/proc/sys/kernel/hostname", "/etc/hostname"] {
        if let Ok(s) = std::fs::read_to_string(path) {
            let s = s.trim();
            if !s.is_empty() {
                return s.split('.').next().unwrap_or(s).to_string();
            }
        }
    }
    env_nonempty("HOSTNAME").unwrap_or_else(|| "host".to_string())
}

/// The hub URL and how it was chosen.
pub fn hub_url_for(project: &str) -> (String, String) {
    if let Some(u) = env_nonempty("RELAY_URL") {
        return (
            u.trim_end_matches('/').to_string(),
            "env (RELAY_URL)".into(),
        );
    }
    let cfg_path = bus_dir().join("config.json");
    if let Ok(text) = std::fs::read_to_string(&cfg_path)
        && let Ok(cfg) = serde_json::from_str::<serde_json::Value>(&text)
    {
        if let Some(u) = cfg
            .get("hubs")
            .and_then(|h| h.get(project))
            .and_then(|u| u.as_str())
            .filter(|u| !u.is_empty())
        {
            return (
                u.trim_end_matches('/').to_string(),
                format!("{} hubs[{project}]", cfg_path.display()),
            );
        }
        if let Some(u) = cfg
            .get("url")
            .and_then(|u| u.as_str())
            .filter(|u| !u.is_empty())
        {
            return (
                u.trim_end_matches('/').to_string(),
                format!("{} url", cfg_path.display()),
            );
        }
    }
    (DEFAULT_HUB_URL.to_string(), "default".into())
}

impl Identity {
    /// Resolve from the environment and the current directory.
    pub fn resolve() -> Identity {
        Identity::resolve_with(&Overrides::default())
    }

    /// Resolve with explicit overrides taking precedence over the environment.
    pub fn resolve_with(o: &Overrides) -> Identity {
        let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
        let explicit_session = nonempty(&o.session).or_else(|| env_nonempty("RELAY_SESSION"));
        // A session names its project after its last colon; when only the session is given,
        // that is the project too, so `RELAY_SESSION=claude:web` alone works anywhere.
        let project = nonempty(&o.project)
            .or_else(|| env_nonempty("RELAY_PROJECT"))
            .or_else(|| {
                explicit_session
                    .as_deref()
                    .map(trantor_proto::session_project)
                    .filter(|p| !p.is_empty())
                    .map(str::to_string)
            })
            .unwrap_or_else(|| project_for(&cwd));
        let (session, session_via) = if let Some(s) = explicit_session {
            let via = if nonempty(&o.session).is_some() {
                "--session"
            } else {
                "env (RELAY_SESSION)"
            };
            (s, via.to_string())
        } else if let Some(a) =
            env_nonempty("RELAY_AGENT").or_else(|| env_nonempty("RELAY_AGENT_FALLBACK"))
        {
            (format!("{a}:{project}"), "env (RELAY_AGENT)".to_string())
        } else {
            (format!("{}:{project}", host_id()), "host id".to_string())
        };
        let (hub_url, hub_via) = match nonempty(&o.hub_url) {
            Some(u) => (u.trim_end_matches('/').to_string(), "--url".to_string()),
            None => hub_url_for(&project),
        };
        Identity {
            session,
            project,
            hub_url,
            hub_via,
            session_via,
        }
    }

    /// The part of the session before its last colon (the agent or host name).
    pub fn who(&self) -> &str {
        self.session
            .rsplit_once(':')
            .map(|(w, _)| w)
            .unwrap_or(&self.session)
    }
}

/// A fresh idempotency key for a write (`_op`): 128 bits from the standard library's
/// per-process random hasher keys, mixed with the time, the process id and a counter.
///
/// Uniqueness, not secrecy, is what matters here; this avoids a random-number dependency.
pub fn new_op_id() -> String {
    use std::collections::hash_map::RandomState;
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let mut words = [0u64; 2];
    for (i, w) in words.iter_mut().enumerate() {
        let mut h = RandomState::new().build_hasher();
        h.write_u128(nanos);
        h.write_u32(std::process::id());
        h.write_u64(n);
        h.write_usize(i);
        *w = h.finish();
    }
    format!("{:016x}{:016x}", words[0], words[1])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn op_ids_differ() {
        let a = new_op_id();
        let b = new_op_id();
        assert_eq!(a.len(), 32);
        assert_ne!(a, b);
    }

    #[test]
    fn git_root_finds_marker() {
        let tmp = tempfile::tempdir().expect("tmp");
        let root = tmp.path().join("myproj");
        let deep = root.join("a/b");
        std::fs::create_dir_all(&deep).expect("mkdir");
        std::fs::create_dir_all(root.join(".git")).expect("git");
        assert_eq!(git_root(&deep), Some(root.clone()));
        let outside = tmp.path().join("other");
        std::fs::create_dir_all(&outside).expect("mkdir");
        assert_eq!(git_root(&outside), None);
    }
}

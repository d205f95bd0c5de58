//! Who a process is on the bus and which hub it talks to: the one resolver the runner, the MCP
//! server and every CLI verb use, so a seat's alerts reach the session the person's terminal
//! reads (docs/protocol.md §2, docs/runner.md §1).
//!
//! * home: `HOME`, else `/tmp` (a process without a home still needs somewhere for its files);
//! * bus directory: `AGENT_BUS_DIR`, else `RELAY_DATA_DIR`, else `<home>/.agent-bus`;
//! * project: `RELAY_PROJECT`, else the id in the nearest `.trantor/project.json` marker at or
//!   above the directory (never looking past the first git root, so a nested repository does not
//!   inherit its parent's name; `trantor new` writes it, and a moved or renamed checkout keeps its
//!   project), else the basename of the git root above the directory (a `.git` directory or file
//!   marks it), else the directory's basename;
//! * host id: `RELAY_HOST_ID`, else `<bus>/machine-id`, else the host name, kept whole (a dotted
//!   name such as `box.example.com` is not cut at its first dot);
//! * session: `RELAY_SESSION`, else `<RELAY_AGENT>:<project>` (or `RELAY_AGENT_FALLBACK`), else
//!   `<host id>:<project>` (the operator's own session, where a runner sends its alerts);
//! * hub: `RELAY_URL`, else `<bus>/config.json` `hubs[<project>]`, else its `url`, else
//!   [`DEFAULT_HUB_URL`].
//!
//! Every function reads the environment through an [`Env`], so tests pin any combination
//! without touching the process environment.

use std::path::{Path, PathBuf};

/// The default hub address.
pub const DEFAULT_HUB_URL: &str = "http://127.0.0.1:4477";

/// The environment variables this resolver reads, for help texts and tests.
pub const IDENTITY_ENV_VARS: &[&str] = &[
    "HOME",
    "AGENT_BUS_DIR",
    "RELAY_DATA_DIR",
    "RELAY_PROJECT",
    "RELAY_HOST_ID",
    "RELAY_SESSION",
    "RELAY_AGENT",
    "RELAY_AGENT_FALLBACK",
    "RELAY_URL",
];

/// A read-only view of environment variables: blank values count as unset.
pub trait Env {
    /// The trimmed value of `key`, or `None` when it is unset or blank.
    fn get(&self, key: &str) -> Option<String>;
}

/// The real process environment.
#[derive(Debug, Clone, Copy, Default)]
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

fn nonempty(s: &Option<String>) -> Option<String> {
    s.as_ref()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

/// `$HOME`, else `/tmp`.
pub fn home(env: &dyn Env) -> PathBuf {
    env.get("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/tmp"))
}

/// The bus directory: `AGENT_BUS_DIR`, else `RELAY_DATA_DIR`, else `<home>/.agent-bus`.
///
/// Every runner file, `trantor up`'s seat records and the client config sit under it.
pub fn bus_dir(env: &dyn Env) -> PathBuf {
    env.get("AGENT_BUS_DIR")
        .or_else(|| env.get("RELAY_DATA_DIR"))
        .map(PathBuf::from)
        .unwrap_or_else(|| home(env).join(".agent-bus"))
}

/// The git root above `dir` (the nearest ancestor holding a `.git` directory or file).
pub fn git_root(dir: &Path) -> Option<PathBuf> {
    dir.ancestors()
        .find(|d| d.join(".git").exists())
        .map(Path::to_path_buf)
}

/// The basename of the git root above `dir`, if `dir` is inside a repository.
pub fn git_root_name(dir: &Path) -> Option<String> {
    git_root(dir)?
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .filter(|n| !n.is_empty())
}

/// Where a checkout records its project, relative to its root.
pub const PROJECT_MARKER: &str = ".trantor/project.json";

/// Whether `id` can name a project: 1–80 letters, digits, `.`, `_` or `-`, starting with a
/// letter or digit, without `..`.
pub fn is_project_id(id: &str) -> bool {
    let mut chars = id.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphanumeric())
        && id.len() <= crate::limits::PROJECT
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        && !id.contains("..")
}

/// The project id the marker in `root` records (`{"id": …}`), if it holds a valid one.
pub fn read_marker(root: &Path) -> Option<String> {
    let text = std::fs::read_to_string(root.join(PROJECT_MARKER)).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    let id = v.get("id")?.as_str()?.trim();
    is_project_id(id).then(|| id.to_string())
}

/// The project the nearest marker at or above `dir` names, stopping at the first git root.
pub fn marker_project(dir: &Path) -> Option<String> {
    for d in dir.ancestors().take(64) {
        if let Some(id) = read_marker(d) {
            return Some(id);
        }
        if d.join(".git").exists() {
            return None;
        }
    }
    None
}

/// The project of the checkout `dir` is in: its marker, else its git root's basename.
pub fn checkout_project(dir: &Path) -> Option<String> {
    marker_project(dir).or_else(|| git_root_name(dir))
}

/// The project for `dir`: `RELAY_PROJECT`, else the checkout's marker, else the git root's
/// basename, else `dir`'s basename (else `default`).
pub fn project_for(env: &dyn Env, dir: &Path) -> String {
    env.get("RELAY_PROJECT")
        .or_else(|| checkout_project(dir))
        .or_else(|| {
            dir.file_name()
                .map(|n| n.to_string_lossy().to_string())
                .filter(|n| !n.is_empty())
        })
        .unwrap_or_else(|| "default".to_string())
}

/// The host id: `RELAY_HOST_ID`, else `<bus>/machine-id`, else the host name, whole.
///
/// The runner addresses its alerts to `<host id>:<project>` and the CLI reads that session, so
/// both must give the same answer; the whole name is also what the original clients use.
pub fn host_id(env: &dyn Env) -> String {
    if let Some(h) = env.get("RELAY_HOST_ID") {
        return h;
    }
    let stored = std::fs::read_to_string(bus_dir(env).join("machine-id"))
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty());
    stored.unwrap_or_else(|| host_name(env))
}

/// The host name from the kernel (else `HOSTNAME`, else `host`), never shortened.
fn host_name(env: &dyn Env) -> String {
    ["/proc/sys/kernel/hostname", "/etc/hostname"]
        .iter()
        .find_map(|p| {
            std::fs::read_to_string(p)
                .ok()
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
        })
        .or_else(|| env.get("HOSTNAME"))
        .unwrap_or_else(|| "host".to_string())
}

/// The hub of `project` from `<bus>/config.json` (`hubs[project]`, then `url`), with where it
/// was found.
fn hub_from_config(bus: &Path, project: &str) -> Option<(String, String)> {
    let path = bus.join("config.json");
    let text = std::fs::read_to_string(&path).ok()?;
    let cfg: serde_json::Value = serde_json::from_str(&text).ok()?;
    let pick = |v: Option<&serde_json::Value>| {
        v.and_then(|u| u.as_str())
            .map(|u| u.trim().trim_end_matches('/').to_string())
            .filter(|u| !u.is_empty())
    };
    if let Some(u) = pick(cfg.get("hubs").and_then(|h| h.get(project))) {
        return Some((u, format!("{} hubs[{project}]", path.display())));
    }
    pick(cfg.get("url")).map(|u| (u, format!("{} url", path.display())))
}

/// The hub URL for `project` and how it was chosen.
pub fn hub_url_for(env: &dyn Env, project: &str) -> (String, String) {
    if let Some(u) = env.get("RELAY_URL") {
        return (
            u.trim_end_matches('/').to_string(),
            "env (RELAY_URL)".into(),
        );
    }
    hub_from_config(&bus_dir(env), project)
        .unwrap_or_else(|| (DEFAULT_HUB_URL.to_string(), "default".into()))
}

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

impl Identity {
    /// Resolve from the process environment and the current directory.
    pub fn resolve() -> Identity {
        Identity::resolve_with(&Overrides::default())
    }

    /// Resolve with explicit overrides taking precedence over the process environment.
    pub fn resolve_with(o: &Overrides) -> Identity {
        let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
        Identity::resolve_in(&ProcessEnv, &cwd, o)
    }

    /// Resolve for directory `cwd` from `env`, overrides first.
    pub fn resolve_in(env: &dyn Env, cwd: &Path, o: &Overrides) -> Identity {
        let explicit_session = nonempty(&o.session).or_else(|| env.get("RELAY_SESSION"));
        // A session names its project after its last colon; when only the session is given,
        // that is the project too, so `RELAY_SESSION=claude:web` alone works anywhere.
        let project = nonempty(&o.project)
            .or_else(|| env.get("RELAY_PROJECT"))
            .or_else(|| {
                explicit_session
                    .as_deref()
                    .map(crate::session_project)
                    .filter(|p| !p.is_empty())
                    .map(str::to_string)
            })
            .unwrap_or_else(|| project_for(env, cwd));
        let (session, session_via) = if let Some(s) = explicit_session {
            let via = if nonempty(&o.session).is_some() {
                "--session"
            } else {
                "env (RELAY_SESSION)"
            };
            (s, via.to_string())
        } else if let Some(a) = env
            .get("RELAY_AGENT")
            .or_else(|| env.get("RELAY_AGENT_FALLBACK"))
        {
            (format!("{a}:{project}"), "env (RELAY_AGENT)".to_string())
        } else {
            (format!("{}:{project}", host_id(env)), "host id".to_string())
        };
        let (hub_url, hub_via) = match nonempty(&o.hub_url) {
            Some(u) => (u.trim_end_matches('/').to_string(), "--url".to_string()),
            None => hub_url_for(env, &project),
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

/// A fresh idempotency key for a write (`_op`): 128 bits from the OS's random-number
/// generator, as 32 hex digits (the same draw as a signing nonce, [`crate::auth::new_nonce`]).
pub fn new_op_id() -> String {
    crate::auth::new_nonce()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> + use<> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k: &str| map.get(k).cloned()
    }

    #[test]
    fn op_ids_differ() {
        let a = new_op_id();
        let b = new_op_id();
        assert_eq!(a.len(), 32);
        assert_ne!(a, b);
    }

    #[test]
    fn bus_dir_and_home_order_is_pinned() {
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
        assert_eq!(bus_dir(&env(&[])), PathBuf::from("/tmp/.agent-bus"));
    }

    #[test]
    fn git_root_finds_marker() {
        let tmp = tempfile::tempdir().expect("tmp");
        let root = tmp.path().join("myproj");
        let deep = root.join("a/b");
        std::fs::create_dir_all(&deep).expect("mkdir");
        std::fs::create_dir_all(root.join(".git")).expect("git");
        assert_eq!(git_root(&deep), Some(root.clone()));
        assert_eq!(project_for(&env(&[]), &deep), "myproj");
        assert_eq!(project_for(&env(&[("RELAY_PROJECT", "p")]), &deep), "p");
        let outside = tmp.path().join("other");
        std::fs::create_dir_all(&outside).expect("mkdir");
        assert_eq!(git_root_name(&outside), None);
        assert_eq!(project_for(&env(&[]), &outside), "other");
    }

    /// A dotted host id stays whole, and the runner's orchestrator address and the CLI's own
    /// session come out the same.
    #[test]
    fn the_marker_names_the_project_before_the_folder() {
        let tmp = tempfile::tempdir().expect("tmp");
        let root = tmp.path().join("renamed-folder");
        let deep = root.join("src/lib");
        std::fs::create_dir_all(&deep).expect("mkdir");
        std::fs::create_dir_all(root.join(".git")).expect("git");
        assert_eq!(project_for(&env(&[]), &deep), "renamed-folder");
        std::fs::create_dir_all(root.join(".trantor")).expect("mkdir");
        std::fs::write(
            root.join(PROJECT_MARKER),
            r#"{"id":"shop","since":"2026-12-03"}"#,
        )
        .expect("marker");
        assert_eq!(project_for(&env(&[]), &deep), "shop");
        assert_eq!(project_for(&env(&[("RELAY_PROJECT", "p")]), &deep), "p");
        // A nested repository does not inherit its parent's marker.
        let nested = root.join("vendor/dep");
        std::fs::create_dir_all(nested.join(".git")).expect("git");
        assert_eq!(project_for(&env(&[]), &nested), "dep");
        // A marker that does not hold a valid id is ignored.
        std::fs::write(root.join(PROJECT_MARKER), r#"{"id":"../etc"}"#).expect("marker");
        assert_eq!(project_for(&env(&[]), &deep), "renamed-folder");
        assert!(is_project_id("a.b_c-9") && !is_project_id("-x") && !is_project_id("a..b"));
    }

    #[test]
    fn dotted_host_id_is_kept_whole_and_agrees() {
        let tmp = tempfile::tempdir().expect("tmp");
        let bus = tmp.path().join("bus");
        std::fs::create_dir_all(&bus).expect("mkdir");
        std::fs::write(bus.join("machine-id"), "box.example.com\n").expect("write");
        let bus_s = bus.to_string_lossy().to_string();
        let e = env(&[("AGENT_BUS_DIR", &bus_s), ("RELAY_PROJECT", "web")]);
        assert_eq!(host_id(&e), "box.example.com");
        let id = Identity::resolve_in(&e, tmp.path(), &Overrides::default());
        assert_eq!(id.session, "box.example.com:web");
        assert_eq!(id.session, format!("{}:web", host_id(&e)));
        assert_eq!(id.who(), "box.example.com");
        let e = env(&[("RELAY_HOST_ID", "laptop.lan"), ("AGENT_BUS_DIR", &bus_s)]);
        assert_eq!(host_id(&e), "laptop.lan");
    }

    #[test]
    fn session_hub_and_project_precedence() {
        let tmp = tempfile::tempdir().expect("tmp");
        let bus = tmp.path().to_string_lossy().to_string();
        std::fs::write(
            tmp.path().join("config.json"),
            r#"{"hubs":{"web":"http://h:1/"},"url":"http://d:2"}"#,
        )
        .expect("write");
        let e = env(&[("AGENT_BUS_DIR", &bus), ("RELAY_SESSION", "claude:web")]);
        let id = Identity::resolve_in(&e, tmp.path(), &Overrides::default());
        assert_eq!(
            (id.session.as_str(), id.project.as_str()),
            ("claude:web", "web")
        );
        assert_eq!(id.hub_url, "http://h:1");
        let e = env(&[
            ("AGENT_BUS_DIR", &bus),
            ("RELAY_AGENT", "codex"),
            ("RELAY_PROJECT", "api"),
        ]);
        let id = Identity::resolve_in(&e, tmp.path(), &Overrides::default());
        assert_eq!(id.session, "codex:api");
        assert_eq!(id.hub_url, "http://d:2");
        let o = Overrides {
            hub_url: Some("http://x:3/".into()),
            ..Default::default()
        };
        let id = Identity::resolve_in(&e, tmp.path(), &o);
        assert_eq!(
            (id.hub_url.as_str(), id.hub_via.as_str()),
            ("http://x:3", "--url")
        );
    }
}

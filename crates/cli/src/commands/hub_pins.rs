//! `trantor hub list | set | unset`: the per-project hub pins in `<bus>/config.json` `hubs`.
//!
//! A project lives on one hub; projects that work on each other share one. The pins are the
//! same map the identity resolver reads (`trantor_proto::identity`, docs/protocol.md §2), so
//! what `list` prints is what every verb, runner and MCP server of this machine will use.
//! Other keys of config.json are kept as they are.

use anyhow::{Context as _, bail};
use serde_json::{Map, Value};
use std::path::{Path, PathBuf};
use trantor_proto::identity::{self, DEFAULT_HUB_URL, ProcessEnv};

/// Options of `trantor hub set`.
#[derive(Debug, clap::Args)]
pub struct SetArgs {
    /// The project to pin.
    pub project: String,
    /// The hub it lives on (http:// or https://).
    pub url: String,
}

/// Options of `trantor hub unset`.
#[derive(Debug, clap::Args)]
pub struct UnsetArgs {
    /// The project to unpin (it falls back to the global `url`, then the built-in default).
    pub project: String,
}

fn config_path() -> PathBuf {
    identity::bus_dir(&ProcessEnv).join("config.json")
}

/// The config document; a missing file is an empty one, a file that is not a JSON object is an
/// error (rewriting it would lose what the person wrote).
pub(crate) fn read(path: &Path) -> anyhow::Result<Map<String, Value>> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Map::new()),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    };
    if text.trim().is_empty() {
        return Ok(Map::new());
    }
    match serde_json::from_str::<Value>(&text) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => bail!(
            "{} is not a JSON object; fix or remove it first",
            path.display()
        ),
        Err(e) => bail!(
            "{} is not valid JSON ({e}); fix or remove it first",
            path.display()
        ),
    }
}

pub(crate) fn write(path: &Path, cfg: &Map<String, Value>) -> anyhow::Result<()> {
    let mut bytes = serde_json::to_vec_pretty(cfg)?;
    bytes.push(b'\n');
    trantor_proto::fsx::write_atomic(path, &bytes)
        .with_context(|| format!("cannot write {}", path.display()))
}

/// A hub URL as a pin stores it: trimmed, without trailing slashes; `None` when it is not an
/// http(s) URL with a host.
pub(crate) fn normalize_url(url: &str) -> Option<String> {
    let u = url.trim().trim_end_matches('/');
    let rest = u
        .strip_prefix("http://")
        .or_else(|| u.strip_prefix("https://"))?;
    let host = rest.split('/').next().unwrap_or("");
    if host.is_empty() || u.chars().any(char::is_whitespace) {
        return None;
    }
    Some(u.to_string())
}

/// Pin `project` to `url` in `cfg`; the stored URL.
pub(crate) fn pin(
    cfg: &mut Map<String, Value>,
    project: &str,
    url: &str,
) -> anyhow::Result<String> {
    let project = project.trim();
    if project.is_empty() {
        bail!("name the project to pin: trantor hub set <project> <url>");
    }
    let Some(url) = normalize_url(url) else {
        bail!("{url:?}: the hub URL must start with http:// or https:// and name a host");
    };
    let hubs = cfg
        .entry("hubs")
        .or_insert_with(|| Value::Object(Map::new()));
    if !hubs.is_object() {
        *hubs = Value::Object(Map::new());
    }
    if let Value::Object(h) = hubs {
        h.insert(project.to_string(), Value::String(url.clone()));
    }
    Ok(url)
}

/// Remove `project`'s pin from `cfg`; whether there was one. An emptied map is removed.
pub(crate) fn unpin(cfg: &mut Map<String, Value>, project: &str) -> bool {
    let Some(Value::Object(h)) = cfg.get_mut("hubs") else {
        return false;
    };
    let had = h.remove(project.trim()).is_some();
    if h.is_empty() {
        cfg.remove("hubs");
    }
    had
}

/// `trantor hub list`.
pub fn list() -> anyhow::Result<()> {
    let path = config_path();
    let cfg = read(&path)?;
    let here = identity::project_for(&ProcessEnv, &std::env::current_dir()?);
    match cfg
        .get("url")
        .and_then(Value::as_str)
        .filter(|u| !u.trim().is_empty())
    {
        Some(u) => println!("global default: {u}"),
        None => println!("global default: {DEFAULT_HUB_URL} (built-in)"),
    }
    let pins: Vec<(&String, &Value)> = cfg
        .get("hubs")
        .and_then(Value::as_object)
        .map(|h| h.iter().collect())
        .unwrap_or_default();
    if pins.is_empty() {
        println!("no per-project pins — every project uses the global default");
    }
    for (p, u) in pins {
        let mark = if *p == here { "*" } else { " " };
        println!("{mark} {p} → {}", u.as_str().unwrap_or("(not a URL)"));
    }
    let (url, via) = identity::hub_url_for(&ProcessEnv, &here);
    println!("effective hub for this project ({here}): {url} (from {via})");
    Ok(())
}

/// `trantor hub set <project> <url>`.
pub fn set(a: SetArgs) -> anyhow::Result<()> {
    let path = config_path();
    let mut cfg = read(&path)?;
    let url = pin(&mut cfg, &a.project, &a.url)?;
    write(&path, &cfg)?;
    println!(
        "{} → {url} (pinned in {})",
        a.project.trim(),
        path.display()
    );
    if std::env::var_os("RELAY_URL").is_some() {
        println!("note: RELAY_URL is set in this shell and wins over every pin");
    }
    Ok(())
}

/// `trantor hub unset <project>`.
pub fn unset(a: UnsetArgs) -> anyhow::Result<()> {
    let path = config_path();
    let mut cfg = read(&path)?;
    let p = a.project.trim();
    if unpin(&mut cfg, p) {
        write(&path, &cfg)?;
        println!("{p} unpinned — falls back to the global default");
    } else {
        println!("{p} had no per-project pin");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn urls_are_normalized_or_refused() {
        for (given, want) in [
            ("http://h:1/", Some("http://h:1")),
            (" https://hub.example//", Some("https://hub.example")),
            ("http://h:1/base", Some("http://h:1/base")),
            ("ftp://h", None),
            ("h:4477", None),
            ("http://", None),
            ("http:///x", None),
            ("http://a b", None),
        ] {
            assert_eq!(normalize_url(given).as_deref(), want, "{given:?}");
        }
    }

    #[test]
    fn pin_and_unpin_keep_other_keys() {
        let mut cfg = json!({"url": "http://g:1", "ownerIdentity": "me"})
            .as_object()
            .cloned()
            .unwrap_or_default();
        assert_eq!(
            pin(&mut cfg, " web ", "http://h:2/").ok().as_deref(),
            Some("http://h:2")
        );
        assert_eq!(cfg["hubs"]["web"], "http://h:2");
        assert!(pin(&mut cfg, "", "http://h:2").is_err());
        assert!(pin(&mut cfg, "web", "nope").is_err());
        assert!(unpin(&mut cfg, "web"));
        assert!(!unpin(&mut cfg, "web"));
        assert!(cfg.get("hubs").is_none(), "an emptied map is removed");
        assert_eq!(cfg["ownerIdentity"], "me");
        assert_eq!(cfg["url"], "http://g:1");
    }

    #[test]
    fn a_hubs_value_that_is_not_a_map_is_replaced() {
        let mut cfg = json!({"hubs": 3}).as_object().cloned().unwrap_or_default();
        assert!(!unpin(&mut cfg, "web"));
        assert!(pin(&mut cfg, "web", "http://h:1").is_ok());
        assert_eq!(cfg["hubs"], json!({"web": "http://h:1"}));
    }
}

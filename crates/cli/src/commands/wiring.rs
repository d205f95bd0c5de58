//! The agent CLIs' MCP config files, shared by `connect`, `hook_install`, `plugin` and `doctor`:
//! where each CLI keeps its file ([`targets`]), the order-preserving JSON they are edited as
//! ([`OJson`]), reading them and what they say about the `trantor` entry ([`inspect`]), the
//! command we write ([`our_command`]) and the backed-up atomic write ([`write_with_backup`]).

use super::find_on_path;
use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};
use std::fmt;
use std::path::{Path, PathBuf};

/// Whether `url` is a hub's `/mcp` (what an `--http` entry points at).
fn is_mcp_url(url: &str) -> bool {
    (url.starts_with("http://") || url.starts_with("https://"))
        && url.trim_end_matches('/').ends_with("/mcp")
}

/// The config formats we know how to edit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    /// `{"mcpServers": {"trantor": {"type":"stdio","command":…,"args":["mcp"]}}}`.
    ClaudeJson,
    /// `{"mcpServers": {"trantor": {"command":…,"args":["mcp"]}}}`.
    KimiJson,
    /// `{"mcp": {"trantor": {"type":"local","command":[…,"mcp"],"enabled":true}}}`.
    OpenCodeJson,
    /// `[mcp_servers.trantor] command = … args = ["mcp"]`.
    CodexToml,
}

/// One agent CLI and where its MCP config lives.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    /// Short name used on the command line (`claude`).
    pub name: &'static str,
    /// What people call it.
    pub label: &'static str,
    /// Its executable.
    pub binary: &'static str,
    /// Its config file.
    pub path: PathBuf,
    /// The file's format.
    pub format: Format,
    /// A directory that exists once the CLI has been run here.
    pub marker: PathBuf,
}

/// The four CLIs, with their config paths under `home`.
pub(crate) fn targets(home: &Path) -> Vec<Target> {
    let xdg = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .unwrap_or_else(|| home.join(".config"));
    vec![
        Target {
            name: "claude",
            label: "Claude Code",
            binary: "claude",
            path: home.join(".claude.json"),
            format: Format::ClaudeJson,
            marker: home.join(".claude"),
        },
        Target {
            name: "codex",
            label: "Codex",
            binary: "codex",
            path: home.join(".codex").join("config.toml"),
            format: Format::CodexToml,
            marker: home.join(".codex"),
        },
        Target {
            name: "opencode",
            label: "OpenCode",
            binary: "opencode",
            path: xdg.join("opencode").join("opencode.json"),
            format: Format::OpenCodeJson,
            marker: xdg.join("opencode"),
        },
        Target {
            name: "kimi",
            label: "Kimi",
            binary: "kimi",
            path: home.join(".kimi").join("mcp.json"),
            format: Format::KimiJson,
            marker: home.join(".kimi"),
        },
    ]
}

impl Target {
    /// Installed: the CLI is on PATH, or its config file or directory exists.
    pub fn installed(&self) -> bool {
        find_on_path(self.binary).is_some() || self.path.exists() || self.marker.exists()
    }
}

/// What a config file says about the `trantor` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Wiring {
    /// No file, or no entry.
    Missing,
    /// An entry that runs `trantor mcp` through this command.
    Ours(String),
    /// An entry `connect --http` wrote: the hub's `/mcp` at this URL.
    Http(String),
    /// An entry named `trantor` that runs something else.
    Foreign(String),
    /// The file cannot be read or parsed.
    Broken(String),
}

/// Whether `command` + `args` is a `trantor mcp` invocation.
fn runs_trantor_mcp(command: &str, args: &[String]) -> bool {
    let base = Path::new(command)
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_default();
    base == "trantor" && args.first().map(String::as_str) == Some("mcp")
}

// ----- order-preserving JSON ------------------------------------------------------------------

/// A JSON value whose objects keep their key order, so rewriting a person's config file changes
/// only the entry we own. (serde_json's `preserve_order` feature would do this too, but turning it
/// on changes map ordering for every crate in the workspace.)
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum OJson {
    Null,
    Bool(bool),
    Num(serde_json::Number),
    Str(String),
    Arr(Vec<OJson>),
    Obj(Vec<(String, OJson)>),
}

impl OJson {
    pub(crate) fn get(&self, key: &str) -> Option<&OJson> {
        match self {
            OJson::Obj(kv) => kv.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    pub(crate) fn str(&self) -> Option<&str> {
        match self {
            OJson::Str(s) => Some(s),
            _ => None,
        }
    }

    fn strings(&self) -> Vec<String> {
        match self {
            OJson::Arr(items) => items
                .iter()
                .filter_map(|i| i.str().map(str::to_string))
                .collect(),
            _ => Vec::new(),
        }
    }

    /// Set `key` in an object, keeping its position when it exists, appending otherwise.
    pub(crate) fn set(&mut self, key: &str, value: OJson) {
        if let OJson::Obj(kv) = self {
            match kv.iter_mut().find(|(k, _)| k == key) {
                Some((_, v)) => *v = value,
                None => kv.push((key.to_string(), value)),
            }
        }
    }

    /// The object at `key`, created (empty) when absent. `None` when `key` holds a non-object.
    pub(crate) fn object_mut(&mut self, key: &str) -> Option<&mut OJson> {
        if self.get(key).is_none() {
            self.set(key, OJson::Obj(Vec::new()));
        }
        match self {
            OJson::Obj(kv) => kv
                .iter_mut()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v)
                .filter(|v| matches!(v, OJson::Obj(_))),
            _ => None,
        }
    }
}

impl Serialize for OJson {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            OJson::Null => s.serialize_unit(),
            OJson::Bool(b) => s.serialize_bool(*b),
            OJson::Num(n) => n.serialize(s),
            OJson::Str(v) => s.serialize_str(v),
            OJson::Arr(items) => {
                let mut seq = s.serialize_seq(Some(items.len()))?;
                for i in items {
                    seq.serialize_element(i)?;
                }
                seq.end()
            }
            OJson::Obj(kv) => {
                let mut map = s.serialize_map(Some(kv.len()))?;
                for (k, v) in kv {
                    map.serialize_entry(k, v)?;
                }
                map.end()
            }
        }
    }
}

struct OJsonVisitor;

impl<'de> Visitor<'de> for OJsonVisitor {
    type Value = OJson;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_unit<E>(self) -> Result<OJson, E> {
        Ok(OJson::Null)
    }
    fn visit_none<E>(self) -> Result<OJson, E> {
        Ok(OJson::Null)
    }
    fn visit_bool<E>(self, v: bool) -> Result<OJson, E> {
        Ok(OJson::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<OJson, E> {
        Ok(OJson::Num(v.into()))
    }
    fn visit_u64<E>(self, v: u64) -> Result<OJson, E> {
        Ok(OJson::Num(v.into()))
    }
    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<OJson, E> {
        serde_json::Number::from_f64(v)
            .map(OJson::Num)
            .ok_or_else(|| E::custom("a number JSON cannot hold"))
    }
    fn visit_str<E>(self, v: &str) -> Result<OJson, E> {
        Ok(OJson::Str(v.to_string()))
    }
    fn visit_string<E>(self, v: String) -> Result<OJson, E> {
        Ok(OJson::Str(v))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<OJson, A::Error> {
        let mut items = Vec::new();
        while let Some(i) = seq.next_element()? {
            items.push(i);
        }
        Ok(OJson::Arr(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<OJson, A::Error> {
        let mut kv = Vec::new();
        while let Some((k, v)) = map.next_entry::<String, OJson>()? {
            kv.push((k, v));
        }
        Ok(OJson::Obj(kv))
    }
}

impl<'de> Deserialize<'de> for OJson {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<OJson, D::Error> {
        d.deserialize_any(OJsonVisitor)
    }
}

pub(crate) fn ostr(s: &str) -> OJson {
    OJson::Str(s.to_string())
}

// ----- reading each format --------------------------------------------------------------------

/// The container key and the entry we write, per JSON format.
pub(crate) fn json_entry(format: Format, command: &str) -> (&'static str, OJson) {
    match format {
        Format::ClaudeJson => (
            "mcpServers",
            OJson::Obj(vec![
                ("type".into(), ostr("stdio")),
                ("command".into(), ostr(command)),
                ("args".into(), OJson::Arr(vec![ostr("mcp")])),
            ]),
        ),
        Format::KimiJson => (
            "mcpServers",
            OJson::Obj(vec![
                ("command".into(), ostr(command)),
                ("args".into(), OJson::Arr(vec![ostr("mcp")])),
            ]),
        ),
        Format::OpenCodeJson | Format::CodexToml => (
            "mcp",
            OJson::Obj(vec![
                ("type".into(), ostr("local")),
                (
                    "command".into(),
                    OJson::Arr(vec![ostr(command), ostr("mcp")]),
                ),
                ("enabled".into(), OJson::Bool(true)),
            ]),
        ),
    }
}

/// The command of a JSON entry and whether it is `trantor mcp` (or a hub's `/mcp` URL, which
/// `connect --http` writes).
pub(crate) fn json_wiring(format: Format, entry: &OJson) -> Wiring {
    if let Some(url) = entry.get("url").and_then(OJson::str) {
        return if is_mcp_url(url) {
            Wiring::Http(url.to_string())
        } else {
            Wiring::Foreign(url.to_string())
        };
    }
    let (cmd, args) = match format {
        Format::OpenCodeJson => {
            let parts = entry.get("command").map(OJson::strings).unwrap_or_default();
            match parts.split_first() {
                Some((c, rest)) => (c.clone(), rest.to_vec()),
                None => (String::new(), Vec::new()),
            }
        }
        _ => (
            entry
                .get("command")
                .and_then(OJson::str)
                .unwrap_or_default()
                .to_string(),
            entry.get("args").map(OJson::strings).unwrap_or_default(),
        ),
    };
    let shown = std::iter::once(cmd.clone())
        .chain(args.iter().cloned())
        .collect::<Vec<_>>()
        .join(" ");
    if runs_trantor_mcp(&cmd, &args) {
        Wiring::Ours(cmd)
    } else {
        Wiring::Foreign(shown)
    }
}

pub(crate) fn read_json(path: &Path) -> Result<Option<OJson>, String> {
    match std::fs::read_to_string(path) {
        Ok(text) if text.trim().is_empty() => Ok(None),
        Ok(text) => serde_json::from_str::<OJson>(&text)
            .map(Some)
            .map_err(|e| format!("{} is not valid JSON: {e}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("cannot read {}: {e}", path.display())),
    }
}

pub(crate) fn read_toml(path: &Path) -> Result<Option<toml_edit::DocumentMut>, String> {
    match std::fs::read_to_string(path) {
        Ok(text) => text
            .parse::<toml_edit::DocumentMut>()
            .map(Some)
            .map_err(|e| format!("{} is not valid TOML: {e}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("cannot read {}: {e}", path.display())),
    }
}

pub(crate) fn toml_wiring(doc: &toml_edit::DocumentMut) -> Wiring {
    let Some(entry) = doc.get("mcp_servers").and_then(|s| s.get("trantor")) else {
        return Wiring::Missing;
    };
    if let Some(url) = entry.get("url").and_then(|u| u.as_str()) {
        return if is_mcp_url(url) {
            Wiring::Http(url.to_string())
        } else {
            Wiring::Foreign(url.to_string())
        };
    }
    let cmd = entry
        .get("command")
        .and_then(|c| c.as_str())
        .unwrap_or_default()
        .to_string();
    let args: Vec<String> = entry
        .get("args")
        .and_then(|a| a.as_array())
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    if runs_trantor_mcp(&cmd, &args) {
        Wiring::Ours(cmd)
    } else {
        Wiring::Foreign(format!("{cmd} {}", args.join(" ")).trim().to_string())
    }
}

/// What `target`'s config says about the `trantor` entry now.
pub(crate) fn inspect(target: &Target) -> Wiring {
    match target.format {
        Format::CodexToml => match read_toml(&target.path) {
            Ok(Some(doc)) => toml_wiring(&doc),
            Ok(None) => Wiring::Missing,
            Err(e) => Wiring::Broken(e),
        },
        f => match read_json(&target.path) {
            Ok(Some(doc)) => {
                let (key, _) = json_entry(f, "");
                match doc.get(key).and_then(|c| c.get("trantor")) {
                    Some(e) => json_wiring(f, e),
                    None => Wiring::Missing,
                }
            }
            Ok(None) => Wiring::Missing,
            Err(e) => Wiring::Broken(e),
        },
    }
}

/// Replace `path` with `text` atomically, keeping its permissions; back the old file up first.
pub(crate) fn write_with_backup(path: &Path, text: &str) -> std::io::Result<Option<PathBuf>> {
    let dir = path
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."));
    std::fs::create_dir_all(&dir)?;
    let mut backup = None;
    let perms = std::fs::metadata(path).ok().map(|m| m.permissions());
    if path.exists() {
        let base = path
            .file_name()
            .map(|n| n.to_string_lossy().to_string())
            .unwrap_or_else(|| "config".into());
        let stamp = trantor_proto::now_ms() / 1000;
        // Never overwrite an earlier backup: it may be the only copy of the original.
        let mut b = dir.join(format!("{base}.trantor-backup-{stamp}"));
        let mut n = 1;
        while b.exists() {
            b = dir.join(format!("{base}.trantor-backup-{stamp}-{n}"));
            n += 1;
        }
        std::fs::copy(path, &b)?;
        backup = Some(b);
    }
    trantor_proto::fsx::write_atomic_with(path, text.as_bytes(), perms)?;
    Ok(backup)
}

/// The command `connect` (and the plugin, and setup's unit) writes: `--command`, else the
/// `trantor` on PATH when it is this binary, else this binary's absolute path.
///
/// The PATH entry is kept as found, not resolved: a package manager links it to a versioned
/// folder, and an upgrade through it moves the link, so the resolved path would leave the old
/// binary wired (or none at all once the old version is removed).
pub(crate) fn our_command(explicit: Option<&Path>) -> String {
    if let Some(p) = explicit {
        return p.to_string_lossy().to_string();
    }
    let exe = std::env::current_exe().ok();
    if let (Some(exe), Some(on_path)) = (&exe, find_on_path("trantor"))
        && same_file(exe, &on_path)
    {
        return on_path.to_string_lossy().to_string();
    }
    exe.map(|p| p.to_string_lossy().to_string())
        .unwrap_or_else(|| "trantor".into())
}

/// Whether two paths name the same file once links are followed.
fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

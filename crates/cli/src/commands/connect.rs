//! `trantor connect`: register `trantor mcp` with the agent CLIs found on this machine.
//!
//! Each CLI keeps its MCP servers in its own file and format. We add (or refresh) one entry
//! named `trantor` and leave everything else as it was: JSON keeps its key order, TOML its
//! comments and layout. An entry named `trantor` that does not run `trantor mcp` was written by
//! someone else and is left alone unless `--force`. A file is backed up before it changes, and a
//! run that would change nothing writes nothing.

use super::wiring::{
    Format, OJson, json_entry, json_wiring, ostr, read_json, read_toml, toml_wiring,
    write_with_backup,
};
use super::{print_json, usage};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

// Named through `connect` by `doctor` and `setup` as well.
pub(crate) use super::wiring::{Target, Wiring, inspect, our_command, targets};

pub(crate) const CONNECT_HELP: &str = concat!(
    "\
Writes an entry named `trantor` that runs `<this binary> mcp` into:
  Claude Code   ~/.claude.json                 \"mcpServers\"
  Codex         ~/.codex/config.toml           [mcp_servers.trantor]
  OpenCode      ~/.config/opencode/opencode.json \"mcp\"
  Kimi          ~/.kimi/mcp.json               \"mcpServers\"
for each CLI found (on PATH, or its config already exists). Other entries are never touched; an
existing `trantor` entry that does not run `trantor mcp` is kept unless --force. The original
file is copied to <file>.trantor-backup-<time> before a change. Running it again is a no-op.
The agent's session and hub come from its environment (RELAY_SESSION, RELAY_URL), which
`trantor runner` sets for every seat.

Examples:
  trantor connect                     wire every CLI found here
  trantor connect --dry-run           show what would change, change nothing
  trantor connect --only claude,codex
  trantor connect --all               also CLIs that are not installed yet
  trantor connect --remove            take out the entries and hooks connect wrote
  trantor connect --http --token \"$(trantor token mint --session claude:web)\"
                                      point Claude Code, Codex and OpenCode at the hub's /mcp
                                      with the token instead (no local binary, no hooks;
                                      --session S sends X-Relay-Session on a hub not enforcing)

Claude Code also gets hooks in ~/.claude/settings.json (SessionStart, PostToolUse,
UserPromptSubmit, Stop, PreCompact → `trantor hook <event>`) that hand the crew's messages to an
interactive session; your own hooks there are kept. While the trantor Claude Code plugin is
enabled (`trantor plugin install`), Claude Code is left to it: the plugin carries the same MCP
server and hooks, and nothing runs twice.

",
    exit_codes!()
);

/// `trantor connect` options.
#[derive(Debug, clap::Args)]
pub struct ConnectArgs {
    /// Show what would change without writing anything.
    #[arg(long)]
    pub dry_run: bool,
    /// Only these CLIs (claude, codex, opencode, kimi), comma-separated.
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
    /// Write the entry even for CLIs that do not look installed.
    #[arg(long)]
    pub all: bool,
    /// Replace a `trantor` entry that something else wrote.
    #[arg(long)]
    pub force: bool,
    /// The command the entry runs [default: the `trantor` on PATH when it is this binary (kept
    /// unresolved, so an upgrade through it stays wired), else this binary's absolute path].
    #[arg(long, value_name = "PATH")]
    pub command: Option<PathBuf>,
    /// Print the outcome as JSON.
    #[arg(long)]
    pub json: bool,
    /// Take out what connect wrote: the `trantor` MCP entries and the Claude Code hooks (the
    /// person's own entries and hooks stay).
    #[arg(long)]
    pub remove: bool,
    /// Point the entries at the hub's `/mcp` (MCP over Streamable HTTP) instead of running this
    /// binary: Claude Code, Codex and OpenCode (Kimi keeps stdio), no hooks.
    #[arg(long, conflicts_with = "remove")]
    pub http: bool,
    /// With --http: the bearer token the entries send (`trantor token mint`), as
    /// `Authorization: Bearer <token>`; needed by a hub in enforce mode.
    #[arg(
        long,
        env = "TRANTOR_MCP_TOKEN",
        hide_env_values = true,
        requires = "http"
    )]
    pub token: Option<String>,
    /// With --http and no token: the bus session the entries speak as (`X-Relay-Session`).
    #[arg(long, value_name = "SESSION", requires = "http")]
    pub session: Option<String>,
    /// With --http: the hub URL [default: RELAY_URL, else ~/.agent-bus/config.json, else
    /// http://127.0.0.1:4477].
    #[arg(long, value_name = "URL", requires = "http")]
    pub url: Option<String>,
}

/// What an `--http` entry points at: the hub's `/mcp` and the headers it sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HttpEntry {
    /// `<hub>/mcp`.
    pub url: String,
    /// Header name and value pairs (`Authorization: Bearer …` or `X-Relay-Session: …`).
    pub headers: Vec<(String, String)>,
}

impl HttpEntry {
    /// Whether a header carries a secret (the file is then kept private).
    fn secret(&self) -> bool {
        self.headers
            .iter()
            .any(|(k, _)| k.eq_ignore_ascii_case("authorization"))
    }
}

// ----- editing each format --------------------------------------------------------------------

/// Variables Codex must pass through to `trantor mcp`. Codex hands an MCP server only a fixed
/// allow-list of the environment unless the entry names more in `env_vars`; without these the
/// seat's MCP server would not know its session, hub or project.
const CODEX_FORWARDED_ENV: &[&str] = &[
    "RELAY_URL",
    "RELAY_SESSION",
    "RELAY_AGENT",
    "RELAY_PROJECT",
    "AGENT_BUS_DIR",
    "TRANTOR_SEAT",
];

/// The Codex entry key that lets `codex exec` call our tools without asking: Codex refuses
/// every tool not annotated read-only when no one can approve it ("requires approval, but
/// approval policy is never"), and a seat's turn has no one to ask.
const CODEX_APPROVAL_KEY: &str = "default_tools_approval_mode";
/// Its value: approve every trantor tool call.
const CODEX_APPROVAL: &str = "approve";

/// Whether our Codex entry already forwards every variable in [`CODEX_FORWARDED_ENV`] and
/// approves its tools.
fn codex_forwards_env(doc: &toml_edit::DocumentMut) -> bool {
    let entry = doc.get("mcp_servers").and_then(|s| s.get("trantor"));
    let approves = entry
        .and_then(|e| e.get(CODEX_APPROVAL_KEY))
        .and_then(|v| v.as_str())
        == Some(CODEX_APPROVAL);
    let listed: Vec<&str> = entry
        .and_then(|e| e.get("env_vars"))
        .and_then(|a| a.as_array())
        .map(|a| a.iter().filter_map(|v| v.as_str()).collect())
        .unwrap_or_default();
    approves && CODEX_FORWARDED_ENV.iter().all(|v| listed.contains(v))
}

/// The new file contents with our entry, or `None` when the file is already right.
fn edited(target: &Target, command: &str) -> Result<Option<String>, String> {
    match target.format {
        Format::CodexToml => {
            let mut doc = read_toml(&target.path)?.unwrap_or_default();
            if toml_wiring(&doc) == Wiring::Ours(command.to_string()) && codex_forwards_env(&doc) {
                return Ok(None);
            }
            let servers = doc
                .entry("mcp_servers")
                .or_insert_with(|| {
                    let mut t = toml_edit::Table::new();
                    // `[mcp_servers.trantor]` rather than an empty `[mcp_servers]` header.
                    t.set_implicit(true);
                    toml_edit::Item::Table(t)
                })
                .as_table_like_mut()
                .ok_or_else(|| "mcp_servers in the Codex config is not a table".to_string())?;
            // Keep keys a person added to our entry (timeouts, tool filters); set the ones that
            // say what to run and which variables Codex must forward.
            let mut entry = match servers.get("trantor").and_then(|t| t.as_table()) {
                Some(t) => t.clone(),
                None => toml_edit::Table::new(),
            };
            entry.insert("command", toml_edit::value(command));
            let mut args = toml_edit::Array::new();
            args.push("mcp");
            entry.insert("args", toml_edit::value(args));
            let mut vars = toml_edit::Array::new();
            for v in CODEX_FORWARDED_ENV {
                vars.push(*v);
            }
            entry.insert("env_vars", toml_edit::value(vars));
            entry.insert(CODEX_APPROVAL_KEY, toml_edit::value(CODEX_APPROVAL));
            servers.insert("trantor", toml_edit::Item::Table(entry));
            Ok(Some(doc.to_string()))
        }
        f => {
            let mut doc = read_json(&target.path)?.unwrap_or(OJson::Obj(Vec::new()));
            if !matches!(doc, OJson::Obj(_)) {
                return Err(format!(
                    "{} does not hold a JSON object",
                    target.path.display()
                ));
            }
            let (key, entry) = json_entry(f, command);
            if let Some(existing) = doc.get(key).and_then(|c| c.get("trantor"))
                && json_wiring(f, existing) == Wiring::Ours(command.to_string())
            {
                return Ok(None);
            }
            let servers = doc.object_mut(key).ok_or_else(|| {
                format!("\"{key}\" in {} is not an object", target.path.display())
            })?;
            // Keep fields a person added to our entry (env, timeouts); replace only the ones
            // that say what to run.
            let mut merged = match servers.get("trantor") {
                Some(OJson::Obj(kv)) => OJson::Obj(kv.clone()),
                _ => OJson::Obj(Vec::new()),
            };
            if let OJson::Obj(kv) = &entry {
                for (k, v) in kv {
                    merged.set(k, v.clone());
                }
            }
            servers.set("trantor", merged);
            let mut text = serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())?;
            text.push('\n');
            Ok(Some(text))
        }
    }
}

/// The JSON entry `--http` writes, per format (`None`: the format keeps stdio).
fn json_http_entry(format: Format, h: &HttpEntry) -> Option<OJson> {
    let headers = OJson::Obj(
        h.headers
            .iter()
            .map(|(k, v)| (k.clone(), ostr(v)))
            .collect(),
    );
    match format {
        Format::ClaudeJson => Some(OJson::Obj(vec![
            ("type".into(), ostr("http")),
            ("url".into(), ostr(&h.url)),
            ("headers".into(), headers),
        ])),
        Format::OpenCodeJson => Some(OJson::Obj(vec![
            ("type".into(), ostr("remote")),
            ("url".into(), ostr(&h.url)),
            ("headers".into(), headers),
            ("enabled".into(), OJson::Bool(true)),
        ])),
        Format::KimiJson | Format::CodexToml => None,
    }
}

/// The new file contents with an `--http` entry, or `None` when the file is already right.
/// Keys a person added to our entry stay; the stdio keys (command, args, env_vars) go.
fn edited_http(target: &Target, h: &HttpEntry) -> Result<Option<String>, String> {
    const STDIO_KEYS: [&str; 4] = ["command", "args", "env_vars", "environment"];
    match target.format {
        Format::CodexToml => {
            let mut doc = read_toml(&target.path)?.unwrap_or_default();
            let servers = doc
                .entry("mcp_servers")
                .or_insert_with(|| {
                    let mut t = toml_edit::Table::new();
                    t.set_implicit(true);
                    toml_edit::Item::Table(t)
                })
                .as_table_like_mut()
                .ok_or_else(|| "mcp_servers in the Codex config is not a table".to_string())?;
            let before = servers.get("trantor").and_then(|t| t.as_table()).cloned();
            let mut entry = before.clone().unwrap_or_default();
            for k in STDIO_KEYS {
                entry.remove(k);
            }
            entry.insert("url", toml_edit::value(h.url.as_str()));
            let mut headers = toml_edit::InlineTable::new();
            for (k, v) in &h.headers {
                headers.insert(k, v.as_str().into());
            }
            entry.insert("http_headers", toml_edit::value(headers));
            entry.insert(CODEX_APPROVAL_KEY, toml_edit::value(CODEX_APPROVAL));
            if before.as_ref().map(|t| t.to_string()) == Some(entry.to_string()) {
                return Ok(None);
            }
            servers.insert("trantor", toml_edit::Item::Table(entry));
            Ok(Some(doc.to_string()))
        }
        f => {
            let Some(entry) = json_http_entry(f, h) else {
                return Err(format!("{} takes no HTTP entry from connect", target.label));
            };
            let mut doc = read_json(&target.path)?.unwrap_or(OJson::Obj(Vec::new()));
            if !matches!(doc, OJson::Obj(_)) {
                return Err(format!(
                    "{} does not hold a JSON object",
                    target.path.display()
                ));
            }
            let (key, _) = json_entry(f, "");
            let servers = doc.object_mut(key).ok_or_else(|| {
                format!("\"{key}\" in {} is not an object", target.path.display())
            })?;
            let before = servers.get("trantor").cloned();
            let mut merged = match &before {
                Some(OJson::Obj(kv)) => OJson::Obj(
                    kv.iter()
                        .filter(|(k, _)| !STDIO_KEYS.contains(&k.as_str()))
                        .cloned()
                        .collect(),
                ),
                _ => OJson::Obj(Vec::new()),
            };
            if let OJson::Obj(kv) = &entry {
                for (k, v) in kv {
                    merged.set(k, v.clone());
                }
            }
            if before.as_ref() == Some(&merged) {
                return Ok(None);
            }
            servers.set("trantor", merged);
            let mut text = serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())?;
            text.push('\n');
            Ok(Some(text))
        }
    }
}

pub(crate) async fn connect(a: ConnectArgs) -> anyhow::Result<ExitCode> {
    if a.http {
        return connect_http(a).await;
    }
    let home = trantor_proto::identity::home(&trantor_proto::identity::ProcessEnv);
    let command = our_command(a.command.as_deref());
    let all = targets(&home);
    check_only(&all, &a.only)?;
    let mut report = Vec::new();
    let mut failed = false;
    for t in all {
        if !a.only.is_empty() && !a.only.iter().any(|o| o == t.name) {
            continue;
        }
        if a.remove {
            let (state, detail) = super::hook_install::remove_mcp(&t, a.dry_run);
            failed |= state == "error";
            report.push(row(&t, state, &detail));
            if t.name == "claude" {
                let (state, detail) = super::hook_install::apply(&home, &command, true, a.dry_run);
                failed |= state == "error";
                report.push(hooks_row(&home, state, detail));
            }
            continue;
        }
        // The plugin wires Claude Code itself (its MCP server and hooks); a second wiring would
        // run every hook twice.
        if t.name == "claude" && super::plugin::enabled(&home) {
            let detail = format!(
                "the trantor plugin ({}) provides the MCP server and hooks; `trantor plugin \
                 remove` hands Claude Code back to connect",
                super::plugin::PLUGIN_ID
            );
            report.push(row(&t, "plugin", &detail));
            continue;
        }
        let says = Says {
            unchanged: "already runs trantor mcp".to_string(),
            would: format!("would register `{command} mcp`"),
            written: format!("registered `{command} mcp`"),
        };
        let (state, detail) = wire(&t, &a, &mut failed, &says, |t| edited(t, &command), |_| {});
        report.push(row(&t, state, &detail));
        // Claude Code also gets the hooks that put an interactive session in the crew.
        if t.name == "claude" && state != "not-installed" {
            let (state, detail) = super::hook_install::apply(&home, &command, false, a.dry_run);
            failed |= state == "error";
            report.push(hooks_row(&home, state, detail));
        }
    }
    if a.json {
        print_json(&serde_json::json!({"command": command, "dryRun": a.dry_run, "clis": report}))?;
    } else {
        print_rows(&report, a.dry_run);
    }
    Ok(if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// `trantor connect --http`: entries for Claude Code, Codex and OpenCode that reach the hub's
/// `/mcp` with a header, no local binary (docs/protocol.md §10.7).
async fn connect_http(a: ConnectArgs) -> anyhow::Result<ExitCode> {
    let home = trantor_proto::identity::home(&trantor_proto::identity::ProcessEnv);
    let hub = match a.url.as_deref().map(str::trim).filter(|u| !u.is_empty()) {
        Some(u) => u.trim_end_matches('/').to_string(),
        None => trantor_proto::identity::Identity::resolve_with(&Default::default()).hub_url,
    };
    if !(hub.starts_with("http://") || hub.starts_with("https://")) {
        return Err(usage(format!(
            "--url {hub}: use http://HOST:PORT or https://…"
        )));
    }
    let token = a.token.as_deref().map(str::trim).filter(|t| !t.is_empty());
    let session = a
        .session
        .as_deref()
        .map(str::trim)
        .filter(|s| !s.is_empty());
    let header = match (token, session) {
        (Some(t), _) => ("Authorization".to_string(), format!("Bearer {t}")),
        (None, Some(s)) => ("X-Relay-Session".to_string(), s.to_string()),
        (None, None) => {
            return Err(usage(
                "--http needs --token (trantor token mint) or, on a hub not enforcing \
                 signatures, --session <who>:<project>",
            ));
        }
    };
    if header.1.chars().any(|c| c.is_control()) {
        return Err(usage("the token or session holds a control character"));
    }
    let entry = HttpEntry {
        url: format!("{}/mcp", hub.trim_end_matches('/')),
        headers: vec![header],
    };
    let all = targets(&home);
    check_only(&all, &a.only)?;
    let shown = match token {
        Some(_) => "Authorization: Bearer …".to_string(),
        None => format!("X-Relay-Session: {}", session.unwrap_or_default()),
    };
    let mut report = Vec::new();
    let mut failed = false;
    for t in all {
        if !a.only.is_empty() && !a.only.iter().any(|o| o == t.name) {
            continue;
        }
        let (state, detail) = if t.format == Format::KimiJson {
            (
                "skipped",
                "Kimi is wired over stdio only (trantor connect)".to_string(),
            )
        } else if t.name == "claude" && super::plugin::enabled(&home) {
            (
                "plugin",
                "the trantor plugin wires Claude Code; `trantor plugin remove` first".to_string(),
            )
        } else {
            let says = Says {
                unchanged: format!("already points at {}", entry.url),
                would: format!("would point at {} with {shown}", entry.url),
                written: format!("points at {} with {shown}", entry.url),
            };
            let private = |path: &Path| {
                if entry.secret() {
                    keep_private(path);
                }
            };
            wire(
                &t,
                &a,
                &mut failed,
                &says,
                |t| edited_http(t, &entry),
                private,
            )
        };
        report.push(row(&t, state, &detail));
    }
    if a.json {
        print_json(&serde_json::json!({"url": entry.url, "dryRun": a.dry_run, "clis": report}))?;
    } else {
        print_rows(&report, a.dry_run);
    }
    Ok(if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// What one wiring says of each outcome: the entry is already so, would be written (a dry run),
/// was written (a backup's place or "new file" follows).
struct Says {
    unchanged: String,
    would: String,
    written: String,
}

/// Wire one CLI: skipped when it is not installed (unless named or `--all`), kept when its
/// `trantor` entry is someone else's (unless `--force`), else edited by `edit` and written with
/// a backup (`after_write` then runs on the file). The row's state and detail; an error sets
/// `failed`.
fn wire(
    t: &Target,
    a: &ConnectArgs,
    failed: &mut bool,
    says: &Says,
    edit: impl FnOnce(&Target) -> Result<Option<String>, String>,
    after_write: impl FnOnce(&Path),
) -> (&'static str, String) {
    if !a.all && a.only.is_empty() && !t.installed() {
        return (
            "not-installed",
            format!("no `{}` on PATH and no {}", t.binary, t.path.display()),
        );
    }
    let text = match (inspect(t), a.force) {
        (Wiring::Broken(e), _) => {
            *failed = true;
            return ("error", e);
        }
        (Wiring::Foreign(cmd), false) => {
            return (
                "kept",
                format!(
                    "its `trantor` entry runs `{cmd}`, which trantor connect did not write; --force replaces it"
                ),
            );
        }
        _ => match edit(t) {
            Err(e) => {
                *failed = true;
                return ("error", e);
            }
            Ok(None) => return ("unchanged", says.unchanged.clone()),
            Ok(Some(_)) if a.dry_run => return ("would-write", says.would.clone()),
            Ok(Some(text)) => text,
        },
    };
    match write_with_backup(&t.path, &text) {
        Ok(backup) => {
            after_write(&t.path);
            let b = backup
                .map(|b| format!(" (backup: {})", b.display()))
                .unwrap_or_else(|| " (new file)".into());
            ("written", format!("{}{b}", says.written))
        }
        Err(e) => {
            *failed = true;
            ("error", format!("cannot write {}: {e}", t.path.display()))
        }
    }
}

/// Refuse a `--only` name that is no CLI of `all`.
fn check_only(all: &[Target], only: &[String]) -> anyhow::Result<()> {
    for o in only {
        if !all.iter().any(|t| t.name == o.as_str()) {
            return Err(usage(format!(
                "unknown CLI '{o}': use claude, codex, opencode or kimi"
            )));
        }
    }
    Ok(())
}

/// One CLI's row of the report.
fn row(t: &Target, state: &str, detail: &str) -> serde_json::Value {
    serde_json::json!({
        "cli": t.name,
        "label": t.label,
        "path": t.path.display().to_string(),
        "state": state,
        "detail": detail,
    })
}

/// The report as text, a CLI two lines.
fn print_rows(report: &[serde_json::Value], dry_run: bool) {
    for r in report {
        say!(
            "{:<12} {:<14} {}\n             {}",
            r["label"].as_str().unwrap_or(""),
            r["state"].as_str().unwrap_or(""),
            r["path"].as_str().unwrap_or(""),
            r["detail"].as_str().unwrap_or("")
        );
    }
    if dry_run {
        say!("(dry run: nothing was written)");
    }
}

/// A config file holding a bearer token is readable by its owner only.
fn keep_private(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    if let Ok(m) = std::fs::metadata(path)
        && m.permissions().mode() & 0o077 != 0
    {
        let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600));
    }
}

/// The report row of the Claude Code hooks.
fn hooks_row(home: &Path, state: &str, detail: String) -> serde_json::Value {
    serde_json::json!({
        "cli": "claude-hooks",
        "label": "Claude hooks",
        "path": super::hook_install::settings_path(home).display().to_string(),
        "state": state,
        "detail": detail,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(dir: &Path, format: Format, file: &str) -> Target {
        Target {
            name: "x",
            label: "X",
            binary: "x-not-on-path",
            path: dir.join(file),
            format,
            marker: dir.join("marker"),
        }
    }

    #[test]
    fn json_keeps_order_and_other_entries() {
        let tmp = tempfile::tempdir().expect("tmp");
        let t = target(tmp.path(), Format::ClaudeJson, "c.json");
        std::fs::write(
            &t.path,
            r#"{"zeta":1,"mcpServers":{"other":{"command":"x"}},"alpha":[1,2.5,"s",null,true]}"#,
        )
        .expect("write");
        let text = edited(&t, "/bin/trantor").expect("edit").expect("changed");
        let z = text.find("\"zeta\"").expect("zeta");
        let m = text.find("\"mcpServers\"").expect("servers");
        let a = text.find("\"alpha\"").expect("alpha");
        assert!(z < m && m < a, "{text}");
        assert!(text.contains("\"other\"") && text.contains("2.5"), "{text}");
        std::fs::write(&t.path, &text).expect("write");
        assert_eq!(inspect(&t), Wiring::Ours("/bin/trantor".into()));
        assert_eq!(edited(&t, "/bin/trantor").expect("edit"), None);
    }

    #[test]
    fn foreign_entries_are_recognised() {
        let tmp = tempfile::tempdir().expect("tmp");
        let t = target(tmp.path(), Format::OpenCodeJson, "o.json");
        std::fs::write(
            &t.path,
            r#"{"mcp":{"trantor":{"type":"local","command":["node","mcp.mjs"]}}}"#,
        )
        .expect("write");
        assert_eq!(inspect(&t), Wiring::Foreign("node mcp.mjs".into()));
    }

    #[test]
    fn toml_keeps_comments() {
        let tmp = tempfile::tempdir().expect("tmp");
        let t = target(tmp.path(), Format::CodexToml, "config.toml");
        std::fs::write(
            &t.path,
            "# my settings\nmodel = \"o3\"\n\n[mcp_servers.docs]\ncommand = \"docs-mcp\"\n",
        )
        .expect("write");
        let text = edited(&t, "/bin/trantor").expect("edit").expect("changed");
        assert!(text.starts_with("# my settings\nmodel = \"o3\""), "{text}");
        assert!(
            text.contains("[mcp_servers.docs]") && text.contains("[mcp_servers.trantor]"),
            "{text}"
        );
        assert!(
            text.contains("env_vars") && text.contains("\"RELAY_SESSION\""),
            "{text}"
        );
        assert!(
            text.contains("default_tools_approval_mode = \"approve\""),
            "{text}"
        );
        std::fs::write(&t.path, &text).expect("write");
        assert_eq!(edited(&t, "/bin/trantor").expect("edit"), None);
    }

    #[test]
    fn codex_entry_without_forwarded_env_is_completed_and_keeps_its_keys() {
        let tmp = tempfile::tempdir().expect("tmp");
        let t = target(tmp.path(), Format::CodexToml, "config.toml");
        std::fs::write(
            &t.path,
            "[mcp_servers.trantor]\ncommand = \"/bin/trantor\"\nargs = [\"mcp\"]\nstartup_timeout_sec = 20\n",
        )
        .expect("write");
        let text = edited(&t, "/bin/trantor").expect("edit").expect("changed");
        assert!(text.contains("startup_timeout_sec = 20"), "{text}");
        assert!(
            text.contains("default_tools_approval_mode = \"approve\""),
            "{text}"
        );
        for v in CODEX_FORWARDED_ENV {
            assert!(text.contains(&format!("\"{v}\"")), "{v} missing: {text}");
        }
    }
}

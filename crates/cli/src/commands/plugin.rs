//! `trantor plugin install|remove`: the Claude Code plugin, served from this binary.
//!
//! `install` writes a local marketplace directory (`<bus>/claude-plugin` by default):
//!
//! ```text
//! .claude-plugin/marketplace.json     the marketplace `trantor-local`, listing one plugin
//! trantor/.claude-plugin/plugin.json  the plugin: its MCP server `relay` runs `<trantor> mcp`
//! trantor/hooks/hooks.json            every `trantor hook <event>` (the same entries `connect` writes)
//! trantor/skills/{crew,handoff,research}/SKILL.md
//! trantor/README.md
//! ```
//!
//! then registers it with the real `claude plugin marketplace add <dir>` and `claude plugin
//! install trantor@trantor-local`. Claude Code loads a directory marketplace's plugin in place, so
//! rewriting the files (a new binary path) takes effect at the next session. The plugin and
//! `trantor connect` never wire Claude Code twice: installing the plugin takes out the hooks and
//! the `trantor` MCP entry connect wrote for Claude Code, and connect leaves Claude Code alone
//! while the plugin is enabled. `remove` uninstalls the plugin, forgets the marketplace and
//! deletes the directory. Both are idempotent.

use super::wiring::{OJson, our_command, read_json};
use super::{find_on_path, print_json, usage};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

pub(crate) const PLUGIN_HELP: &str = concat!(
    "\
install  writes the trantor plugin for Claude Code as a local marketplace directory and installs
         it with `claude plugin marketplace add <dir>` and `claude plugin install
         trantor@trantor-local`. The plugin carries the MCP server (`<trantor> mcp`), the hooks
         (`<trantor> hook <event>`, which do nothing inside a seat) and three skills: crew (fire
         up the crew: Advisor, routing table, go/adjust/hold, seats, cards, integrate), handoff
         and research. Claude Code's own hooks and MCP entry written by `trantor connect` are
         taken out, so nothing runs twice.
remove   uninstalls the plugin, removes the marketplace and deletes its directory; run
         `trantor connect --only claude` afterwards to wire Claude Code without the plugin.

Both are idempotent. Needs Claude Code 2.0 or newer (the `claude plugin` commands); without it the
directory is still written and `trantor connect` is the way to wire Claude Code.

Examples:
  trantor plugin install
  trantor plugin install --dir ~/trantor-plugin --claude ~/.local/bin/claude
  trantor plugin remove

",
    exit_codes!()
);

/// The marketplace's name, and the plugin id Claude Code knows it by.
pub(crate) const MARKETPLACE: &str = "trantor-local";
/// The plugin's name.
pub(crate) const PLUGIN: &str = "trantor";
/// `plugin@marketplace`.
pub(crate) const PLUGIN_ID: &str = "trantor@trantor-local";
/// The oldest Claude Code with the `claude plugin` commands we run.
const MIN_CLAUDE: (u64, u64, u64) = (2, 0, 0);
/// How long one `claude plugin …` command may take.
const CLAUDE_TIMEOUT: Duration = Duration::from_secs(60);

const SKILLS: [(&str, &str); 3] = [
    ("crew", include_str!("plugin/crew.md")),
    ("handoff", include_str!("plugin/handoff.md")),
    ("research", include_str!("plugin/research.md")),
];

/// `trantor plugin` verbs.
#[derive(Debug, clap::Subcommand)]
pub enum PluginCommand {
    /// Write the Claude Code plugin (MCP server, hooks, skills) and install it with `claude`.
    #[command(after_long_help = PLUGIN_HELP)]
    Install(PluginArgs),
    /// Uninstall the plugin from Claude Code and delete its directory.
    #[command(after_long_help = PLUGIN_HELP)]
    Remove(PluginArgs),
}

/// Options of `trantor plugin install|remove`.
#[derive(Debug, Clone, clap::Args)]
pub struct PluginArgs {
    /// The marketplace directory [default: <bus dir>/claude-plugin].
    #[arg(long, value_name = "DIR", env = "TRANTOR_PLUGIN_DIR")]
    pub dir: Option<PathBuf>,
    /// The Claude Code CLI to run [default: `claude` on PATH].
    #[arg(long, value_name = "PATH", env = "TRANTOR_CLAUDE")]
    pub claude: Option<PathBuf>,
    /// The trantor binary the plugin runs [default: the `trantor` on PATH when it is this
    /// binary, else this binary's absolute path].
    #[arg(long, value_name = "PATH")]
    pub command: Option<PathBuf>,
    /// Print the outcome as JSON.
    #[arg(long)]
    pub json: bool,
}

/// The default marketplace directory.
pub(crate) fn default_dir() -> PathBuf {
    trantor_proto::identity::bus_dir(&trantor_proto::identity::ProcessEnv).join("claude-plugin")
}

/// Whether Claude Code's user settings under `home` enable our plugin.
pub(crate) fn enabled(home: &Path) -> bool {
    let path = super::hook_install::settings_path(home);
    matches!(
        read_json(&path)
            .ok()
            .flatten()
            .as_ref()
            .and_then(|d| d.get("enabledPlugins").and_then(|p| p.get(PLUGIN_ID))),
        Some(OJson::Bool(true))
    )
}

/// The files of the marketplace directory, relative paths and contents.
pub(crate) fn files(exe: &str) -> Result<Vec<(PathBuf, String)>, String> {
    let version = env!("CARGO_PKG_VERSION");
    let description = "The trantor crew in Claude Code: the relay_* tools (board, bus, the \
                       Advisor, handoff), hooks that put this session on the board and hand it \
                       the crew's mail, and the crew, handoff and research skills.";
    let marketplace = serde_json::json!({
        "name": MARKETPLACE,
        "owner": {"name": "trantor"},
        "metadata": {
            "description": "The trantor plugin, written by `trantor plugin install` from the installed binary.",
            "version": version,
        },
        "plugins": [{
            "name": PLUGIN,
            "source": format!("./{PLUGIN}"),
            "description": description,
            "version": version,
            "author": {"name": "trantor"},
            "category": "development",
        }],
    });
    let plugin = serde_json::json!({
        "name": PLUGIN,
        "version": version,
        "description": description,
        "author": {"name": "trantor"},
        "license": "MIT",
        "mcpServers": {"relay": {"command": exe, "args": ["mcp"]}},
        "skills": "./skills/",
    });
    let hooks = super::hook_install::with_ours(OJson::Obj(Vec::new()), exe)?;
    let readme = format!(
        "# trantor for Claude Code\n\nWritten by `trantor plugin install` (trantor {version}); \
         `trantor plugin remove` takes it out again. It gives Claude Code the trantor hub's \
         relay_* tools through `{exe} mcp`, the hooks that register this session, show its \
         focus and todo list on the board, hand it the crew's messages and write a handoff \
         before compaction (`{exe} hook <event>`, which do nothing inside a seat), and three \
         skills: crew (\"fire up the crew\"), handoff and research.\n"
    );
    let pretty = |v: &serde_json::Value| -> Result<String, String> {
        serde_json::to_string_pretty(v)
            .map(|s| s + "\n")
            .map_err(|e| e.to_string())
    };
    let mut hooks_text = serde_json::to_string_pretty(&hooks).map_err(|e| e.to_string())?;
    hooks_text.push('\n');
    let p = PathBuf::from(PLUGIN);
    let mut out = vec![
        (
            PathBuf::from(".claude-plugin/marketplace.json"),
            pretty(&marketplace)?,
        ),
        (p.join(".claude-plugin/plugin.json"), pretty(&plugin)?),
        (p.join("hooks/hooks.json"), hooks_text),
        (p.join("README.md"), readme),
    ];
    for (name, text) in SKILLS {
        out.push((
            p.join("skills").join(name).join("SKILL.md"),
            text.to_string(),
        ));
    }
    Ok(out)
}

/// Write the marketplace under `dir`; how many files changed.
pub(crate) fn write_dir(dir: &Path, exe: &str) -> Result<usize, String> {
    let mut changed = 0;
    for (rel, text) in files(exe)? {
        let path = dir.join(&rel);
        if std::fs::read_to_string(&path).ok().as_deref() == Some(text.as_str()) {
            continue;
        }
        if let Some(d) = path.parent() {
            std::fs::create_dir_all(d)
                .map_err(|e| format!("cannot create {}: {e}", d.display()))?;
        }
        trantor_proto::fsx::write_atomic(&path, text.as_bytes())
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        changed += 1;
    }
    Ok(changed)
}

/// Whether `dir` holds a marketplace we wrote (so removing it deletes nothing of the person's).
fn is_our_dir(dir: &Path) -> bool {
    let m = dir.join(".claude-plugin").join("marketplace.json");
    matches!(read_json(&m), Ok(Some(doc)) if doc.get("name").and_then(OJson::str) == Some(MARKETPLACE))
}

/// Why the Claude Code CLI cannot install the plugin.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ClaudeError {
    /// No `claude` to run.
    #[error(
        "Claude Code's `claude` CLI is not installed here (not on PATH; --claude or TRANTOR_CLAUDE \
         names one): install Claude Code 2.0 or newer and rerun `trantor plugin install`, or run \
         `trantor connect` to wire Claude Code without the plugin"
    )]
    Missing,
    /// A version without the plugin commands.
    #[error(
        "{path} is Claude Code {version}, which has no `claude plugin` commands: the plugin \
         needs Claude Code 2.0 or newer (update it with `claude update`), or run `trantor connect` \
         to wire Claude Code without the plugin"
    )]
    TooOld {
        /// The binary.
        path: String,
        /// What `claude --version` said.
        version: String,
    },
    /// A `claude plugin …` command failed.
    #[error("`{command}` failed: {detail}")]
    Failed {
        /// The command line.
        command: String,
        /// Its output.
        detail: String,
    },
}

/// The Claude Code CLI to run, checked for the plugin commands.
pub(crate) struct Claude {
    path: PathBuf,
    /// Its version, as `claude --version` printed it.
    pub version: String,
}

/// `(major, minor, patch)` from `2.1.332 (Claude Code)`.
fn parse_version(s: &str) -> Option<(u64, u64, u64)> {
    let word = s.split_whitespace().next()?;
    let mut it = word.trim_start_matches('v').split('.');
    let mut n = || it.next().and_then(|p| p.parse::<u64>().ok());
    Some((n()?, n().unwrap_or(0), n().unwrap_or(0)))
}

impl Claude {
    /// Find and check the CLI: `explicit`, else `claude` on PATH.
    pub(crate) async fn find(explicit: Option<&Path>) -> Result<Claude, ClaudeError> {
        let path = match explicit {
            Some(p) if p.is_file() => p.to_path_buf(),
            Some(_) => return Err(ClaudeError::Missing),
            None => find_on_path("claude").ok_or(ClaudeError::Missing)?,
        };
        let mut c = Claude {
            path,
            version: String::new(),
        };
        let (ok, out) = c.run(&["--version"]).await?;
        c.version = out.trim().to_string();
        let too_old = || ClaudeError::TooOld {
            path: c.path.display().to_string(),
            version: if c.version.is_empty() {
                "of unknown version".into()
            } else {
                c.version.clone()
            },
        };
        if !ok || parse_version(&c.version).is_none_or(|v| v < MIN_CLAUDE) {
            return Err(too_old());
        }
        // The version says so; the command itself must exist too.
        let (ok, _) = c.run(&["plugin", "marketplace", "--help"]).await?;
        if !ok {
            return Err(too_old());
        }
        Ok(c)
    }

    /// Run `claude <args>`: whether it succeeded, and its stdout and stderr.
    async fn run(&self, args: &[&str]) -> Result<(bool, String), ClaudeError> {
        let command = format!("{} {}", self.path.display(), args.join(" "));
        let child = tokio::process::Command::new(&self.path)
            .args(args)
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true)
            .output();
        let out = match tokio::time::timeout(CLAUDE_TIMEOUT, child).await {
            Ok(Ok(o)) => o,
            Ok(Err(e)) => {
                return Err(ClaudeError::Failed {
                    command,
                    detail: e.to_string(),
                });
            }
            Err(_) => {
                return Err(ClaudeError::Failed {
                    command,
                    detail: format!("no answer within {}s", CLAUDE_TIMEOUT.as_secs()),
                });
            }
        };
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        Ok((out.status.success(), text))
    }

    /// Run `claude <args>`, failing with its output when it fails.
    async fn must(&self, args: &[&str]) -> Result<String, ClaudeError> {
        let (ok, out) = self.run(args).await?;
        if ok {
            Ok(out)
        } else {
            Err(ClaudeError::Failed {
                command: format!("claude {}", args.join(" ")),
                detail: out.trim().to_string(),
            })
        }
    }

    /// Whether `claude plugin list` shows our plugin.
    pub(crate) async fn has_plugin(&self) -> Result<bool, ClaudeError> {
        let out = self.must(&["plugin", "list", "--json"]).await?;
        Ok(json_list_has(&out, "id", PLUGIN_ID))
    }

    /// Whether `claude plugin marketplace list` shows our marketplace.
    async fn has_marketplace(&self) -> Result<bool, ClaudeError> {
        let out = self
            .must(&["plugin", "marketplace", "list", "--json"])
            .await?;
        Ok(json_list_has(&out, "name", MARKETPLACE))
    }
}

/// Whether the JSON list in `out` (possibly after other lines) has an item whose `key` is `want`.
fn json_list_has(out: &str, key: &str, want: &str) -> bool {
    let start = out.find('[').unwrap_or(0);
    serde_json::from_str::<Vec<serde_json::Value>>(&out[start..])
        .map(|items| items.iter().any(|i| i[key].as_str() == Some(want)))
        .unwrap_or(false)
}

/// One line of the report.
struct Step {
    what: &'static str,
    state: &'static str,
    detail: String,
}

fn report(a: &PluginArgs, dir: &Path, steps: &[Step], hint: &str) -> anyhow::Result<()> {
    if a.json {
        let rows: Vec<_> = steps
            .iter()
            .map(|s| serde_json::json!({"step": s.what, "state": s.state, "detail": s.detail}))
            .collect();
        return print_json(&serde_json::json!({
            "plugin": PLUGIN_ID, "dir": dir.display().to_string(), "steps": rows, "next": hint,
        }));
    }
    for s in steps {
        say!("{:<12} {:<13} {}", s.what, s.state, s.detail);
    }
    if !hint.is_empty() {
        say!("{hint}");
    }
    Ok(())
}

pub(crate) async fn plugin(c: PluginCommand) -> anyhow::Result<ExitCode> {
    match c {
        PluginCommand::Install(a) => install(a).await,
        PluginCommand::Remove(a) => remove(a).await,
    }
}

/// `trantor plugin install`.
pub(crate) async fn install(a: PluginArgs) -> anyhow::Result<ExitCode> {
    let dir = a.dir.clone().unwrap_or_else(default_dir);
    if dir.exists() && !dir.is_dir() {
        return Err(usage(format!("{} is not a directory", dir.display())));
    }
    let exe = our_command(a.command.as_deref());
    let mut steps = Vec::new();
    let changed = write_dir(&dir, &exe).map_err(anyhow::Error::msg)?;
    steps.push(Step {
        what: "marketplace",
        state: if changed == 0 { "unchanged" } else { "written" },
        detail: format!("{} (MCP server and hooks run {exe})", dir.display()),
    });
    let claude = match Claude::find(a.claude.as_deref()).await {
        Ok(c) => c,
        Err(e) => {
            steps.push(Step {
                what: "claude",
                state: "not-installed",
                detail: e.to_string(),
            });
            report(&a, &dir, &steps, "")?;
            return Ok(ExitCode::from(1));
        }
    };
    let dir_s = dir.display().to_string();
    let result: Result<(), ClaudeError> = async {
        claude
            .must(&["plugin", "marketplace", "add", &dir_s])
            .await?;
        claude.must(&["plugin", "install", PLUGIN_ID]).await?;
        Ok(())
    }
    .await;
    if let Err(e) = result {
        steps.push(Step {
            what: "claude",
            state: "error",
            detail: e.to_string(),
        });
        report(&a, &dir, &steps, "")?;
        return Ok(ExitCode::from(1));
    }
    let listed = claude.has_plugin().await.unwrap_or(false);
    steps.push(Step {
        what: "claude",
        state: if listed { "installed" } else { "error" },
        detail: if listed {
            format!("{PLUGIN_ID} enabled in Claude Code {}", claude.version)
        } else {
            format!("`claude plugin list` does not show {PLUGIN_ID} after installing it")
        },
    });
    // One wiring for Claude Code: take out what `trantor connect` wrote for it.
    let home = trantor_proto::identity::home(&trantor_proto::identity::ProcessEnv);
    let (state, detail) = super::hook_install::apply(&home, &exe, true, false);
    if state != "unchanged" {
        steps.push(Step {
            what: "connect",
            state,
            detail: format!("{detail} — the plugin runs them now"),
        });
    }
    if let Some(t) = super::wiring::targets(&home)
        .into_iter()
        .find(|t| t.name == "claude")
    {
        let (state, detail) = super::hook_install::remove_mcp(&t, false);
        if state == "removed" || state == "error" {
            steps.push(Step {
                what: "connect",
                state,
                detail: format!(
                    "{detail} in {} — the plugin serves it now",
                    t.path.display()
                ),
            });
        }
    }
    let hint = if listed {
        "Start a new Claude Code session and say \"fire up the crew\" (the crew skill); \
         `trantor plugin remove` takes the plugin out."
    } else {
        ""
    };
    report(&a, &dir, &steps, hint)?;
    Ok(if listed {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// `trantor plugin remove`.
pub(crate) async fn remove(a: PluginArgs) -> anyhow::Result<ExitCode> {
    let dir = a.dir.clone().unwrap_or_else(default_dir);
    let mut steps = Vec::new();
    let mut failed = false;
    match Claude::find(a.claude.as_deref()).await {
        Ok(claude) => {
            let result: Result<(bool, bool), ClaudeError> = async {
                let p = claude.has_plugin().await?;
                if p {
                    claude.must(&["plugin", "uninstall", PLUGIN_ID]).await?;
                }
                let m = claude.has_marketplace().await?;
                if m {
                    claude
                        .must(&["plugin", "marketplace", "remove", MARKETPLACE])
                        .await?;
                }
                Ok((p, m))
            }
            .await;
            match result {
                Ok((p, m)) => steps.push(Step {
                    what: "claude",
                    state: if p || m { "removed" } else { "unchanged" },
                    detail: if p || m {
                        format!("uninstalled {PLUGIN_ID} and its marketplace")
                    } else {
                        format!("{PLUGIN_ID} is not installed")
                    },
                }),
                Err(e) => {
                    failed = true;
                    steps.push(Step {
                        what: "claude",
                        state: "error",
                        detail: e.to_string(),
                    });
                }
            }
        }
        Err(e) => steps.push(Step {
            what: "claude",
            state: "skipped",
            detail: e.to_string(),
        }),
    }
    if !dir.exists() {
        steps.push(Step {
            what: "marketplace",
            state: "unchanged",
            detail: format!("{} does not exist", dir.display()),
        });
    } else if !is_our_dir(&dir) {
        failed = true;
        steps.push(Step {
            what: "marketplace",
            state: "kept",
            detail: format!(
                "{} does not hold the {MARKETPLACE} marketplace; not deleting it",
                dir.display()
            ),
        });
    } else {
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => steps.push(Step {
                what: "marketplace",
                state: "removed",
                detail: dir.display().to_string(),
            }),
            Err(e) => {
                failed = true;
                steps.push(Step {
                    what: "marketplace",
                    state: "error",
                    detail: format!("cannot delete {}: {e}", dir.display()),
                });
            }
        }
    }
    report(
        &a,
        &dir,
        &steps,
        "Claude Code no longer loads the trantor plugin; `trantor connect --only claude` wires \
         its MCP server and hooks without it.",
    )?;
    Ok(if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse_and_compare() {
        assert_eq!(parse_version("2.1.332 (Claude Code)"), Some((2, 1, 332)));
        assert_eq!(parse_version("1.0.88"), Some((1, 0, 88)));
        assert_eq!(parse_version("garbage"), None);
        assert!(parse_version("1.0.88").is_some_and(|v| v < MIN_CLAUDE));
        assert!(parse_version("2.0.0").is_some_and(|v| v >= MIN_CLAUDE));
    }

    #[test]
    fn the_plugin_files_name_the_binary_and_every_skill() {
        let files = files("/opt/bin/trantor").expect("files");
        let get = |p: &str| {
            files
                .iter()
                .find(|(r, _)| r == Path::new(p))
                .map(|(_, t)| t.clone())
                .unwrap_or_else(|| panic!("no {p}"))
        };
        let plugin: serde_json::Value =
            serde_json::from_str(&get("trantor/.claude-plugin/plugin.json")).expect("json");
        assert_eq!(plugin["mcpServers"]["relay"]["command"], "/opt/bin/trantor");
        assert_eq!(plugin["mcpServers"]["relay"]["args"][0], "mcp");
        let hooks = get("trantor/hooks/hooks.json");
        for e in super::super::hook::Event::ALL {
            assert!(
                hooks.contains(&format!("/opt/bin/trantor hook {}", e.arg())),
                "{hooks}"
            );
        }
        for (name, _) in SKILLS {
            let s = get(&format!("trantor/skills/{name}/SKILL.md"));
            assert!(s.starts_with(&format!("---\nname: {name}\n")), "{s}");
        }
        assert!(json_list_has(
            "noise\n[{\"id\":\"trantor@trantor-local\"}]",
            "id",
            PLUGIN_ID
        ));
    }
}

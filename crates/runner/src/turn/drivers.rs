//! How each agent CLI is invoked for a first (fresh) turn and a resumed one (docs/runner.md
//! §23), plus `command`: any CLI given as a shell template in `CREW_COMMAND`, which is what makes
//! every runner behaviour testable with a fake script.
//!
//! Table drivers are spawned directly (no shell), with the prompt as one argv element: there is
//! nothing to quote and no shell to wedge. Only `command` runs through `/bin/bash -c`.

use regex::Regex;
use std::path::{Path, PathBuf};
use std::sync::LazyLock;

/// The CLI families the runner knows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Driver {
    /// Claude Code: `claude -p`, resumed with `-c`.
    Claude,
    /// Codex: `codex exec`, resumed with `exec resume --last`.
    Codex,
    /// Gemini CLI: `gemini --yolo -p`, resumed with `-r latest`.
    Gemini,
    /// Kimi: `kimi -p`, resumed with `-r <sid>` scraped from its output.
    Kimi,
    /// OpenCode and provider seats through it; `provider` prefixes a bare model id.
    Opencode {
        /// `deepseek`, `openrouter`, a BYOM provider name, or empty for plain opencode.
        provider: String,
    },
    /// DeepSeek shell: always a fresh session.
    Dsh,
    /// Any CLI from a template: `first` for fresh turns, `next` for resumed ones.
    Command {
        /// Template for fresh turns.
        first: String,
        /// Template for resumed turns.
        next: String,
    },
}

/// One process to spawn for a turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invocation {
    /// Program (looked up on PATH).
    pub program: String,
    /// Arguments.
    pub args: Vec<String>,
}

impl Invocation {
    /// A one-line description for the log, with the prompt elided.
    pub fn describe(&self, prompt: &str) -> String {
        let mut parts = vec![self.program.clone()];
        for a in &self.args {
            if a == prompt {
                parts.push(format!("<prompt {} chars>", prompt.chars().count()));
            } else if a.contains(' ') {
                parts.push(format!("{a:?}"));
            } else {
                parts.push(a.clone());
            }
        }
        parts.join(" ")
    }
}

/// One row of the driver table: a native agent CLI, the command lines the runner gives it, and
/// the CLI versions those command lines were verified against with the real CLI
/// (docs/runner.md §23). `trantor doctor` compares installed versions with `verified`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DriverSpec {
    /// The driver name (the runner's AGENT argument).
    pub name: &'static str,
    /// The executable looked up on PATH.
    pub program: &'static str,
    /// A fresh turn, with `<prompt>`, `<dir>` and `<sid>` standing for the turn's values.
    pub first: &'static str,
    /// A resumed turn.
    pub resume: &'static str,
    /// The semver range the command lines were verified against; `None`: never run against a
    /// real install by this project's tests.
    pub verified: Option<&'static str>,
    /// The exact version the real-CLI drills ran.
    pub verified_with: Option<&'static str>,
}

/// Every native driver. The unit tests hold [`Driver::invocation`] to these lines, and the
/// real-CLI drills (crates/cli/tests/real_clis.rs) install `verified_with` from npm.
pub const DRIVERS: &[DriverSpec] = &[
    DriverSpec {
        name: "claude",
        program: "claude",
        first: "claude -p <prompt> --dangerously-skip-permissions",
        resume: "claude -c -p <prompt> --dangerously-skip-permissions",
        verified: Some(">=2.1.332, <2.2.0"),
        verified_with: Some("2.1.332"),
    },
    DriverSpec {
        name: "codex",
        program: "codex",
        first: "codex exec --skip-git-repo-check --dangerously-bypass-approvals-and-sandbox <prompt>",
        resume: "codex exec resume --last --skip-git-repo-check --dangerously-bypass-approvals-and-sandbox <prompt>",
        verified: Some(">=0.171.0, <0.172.0"),
        verified_with: Some("0.171.0"),
    },
    DriverSpec {
        name: "opencode",
        program: "opencode",
        first: "opencode run --dir <dir> <prompt>",
        resume: "opencode run --dir <dir> -s <sid> <prompt>",
        verified: Some(">=1.18.33, <1.19.0"),
        verified_with: Some("1.18.33"),
    },
    DriverSpec {
        name: "gemini",
        program: "gemini",
        first: "gemini --yolo -p <prompt>",
        resume: "gemini --yolo -r latest -p <prompt>",
        verified: None,
        verified_with: None,
    },
    DriverSpec {
        name: "kimi",
        program: "kimi",
        first: "kimi -p <prompt>",
        resume: "kimi -r <sid> -p <prompt>",
        verified: None,
        verified_with: None,
    },
    DriverSpec {
        name: "dsh",
        program: "dsh",
        first: "dsh --profile trantor <prompt>",
        resume: "dsh --profile trantor <prompt>",
        verified: None,
        verified_with: None,
    },
];

/// The table row for a driver name.
pub fn spec(name: &str) -> Option<&'static DriverSpec> {
    DRIVERS.iter().find(|d| d.name == name)
}

/// How an installed CLI's version compares with its row of the driver table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VersionCheck {
    /// Inside the verified range.
    Verified(semver::Version),
    /// Older than the verified range: the command line may not be understood.
    Older(semver::Version),
    /// Newer than the verified range: expected to work, not verified.
    Newer(semver::Version),
    /// The driver was never verified against a real install.
    Unverified(Option<semver::Version>),
    /// `--version` printed nothing that looks like a version.
    Unknown,
}

/// The first `x.y.z` in a CLI's `--version` output (`2.1.332 (Claude Code)`, `codex-cli 0.171.0`).
pub fn parse_version(output: &str) -> Option<semver::Version> {
    output
        .split(|c: char| c.is_whitespace() || c == ',' || c == '(' || c == ')')
        .map(|w| w.trim_start_matches('v'))
        .find_map(|w| semver::Version::parse(w).ok())
}

/// Compare `--version` output with `spec`'s verified range.
pub fn check_version(spec: &DriverSpec, output: &str) -> VersionCheck {
    let Some(v) = parse_version(output) else {
        return VersionCheck::Unknown;
    };
    let Some(req) = spec
        .verified
        .and_then(|r| semver::VersionReq::parse(r).ok())
    else {
        return VersionCheck::Unverified(Some(v));
    };
    if req.matches(&v) {
        return VersionCheck::Verified(v);
    }
    let floor = spec
        .verified_with
        .and_then(|w| semver::Version::parse(w).ok());
    match floor {
        Some(f) if v < f => VersionCheck::Older(v),
        _ => VersionCheck::Newer(v),
    }
}

/// What a driver needs to build a command line.
#[derive(Debug, Clone)]
pub struct TurnArgs<'a> {
    /// Start a new CLI session.
    pub fresh: bool,
    /// The CLI session id to resume (sid-based and pinned CLIs).
    pub sid: &'a str,
    /// The prompt text.
    pub prompt: &'a str,
    /// The file the prompt is in.
    pub prompt_file: &'a Path,
    /// The turn's working directory.
    pub dir: &'a Path,
    /// `CREW_MODEL` (empty = CLI default).
    pub model: &'a str,
    /// The effort level, if any.
    pub effort: Option<&'a str>,
}

static KIMI_SID: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"To resume this session:\s*kimi\s+-r\s+(\S+)").ok());
static OC_SID: LazyLock<Option<Regex>> = LazyLock::new(|| Regex::new(r"^ses_[A-Za-z0-9]+$").ok());

/// Single-quote `s` for bash.
pub fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r#"'"'"'"#))
}

impl Driver {
    /// The driver for `name` (`CREW_SWAP_DRIVER` or AGENT). Unknown names run as an opencode
    /// provider seat (BYOM).
    pub fn for_name(name: &str, command: Option<&str>, command_next: Option<&str>) -> Driver {
        match name {
            "claude" => Driver::Claude,
            "codex" => Driver::Codex,
            "gemini" => Driver::Gemini,
            "kimi" => Driver::Kimi,
            "dsh" => Driver::Dsh,
            "opencode" => Driver::Opencode {
                provider: String::new(),
            },
            "command" => {
                let first = command.unwrap_or("").to_string();
                let next = command_next
                    .map(str::to_string)
                    .unwrap_or_else(|| first.clone());
                Driver::Command { first, next }
            }
            other => {
                tracing::info!(
                    "{other} is not a native CLI — running it as an opencode provider seat"
                );
                Driver::Opencode {
                    provider: other.to_string(),
                }
            }
        }
    }

    /// The CLI resumes by an id the runner must know (no id → a fresh turn).
    pub fn needs_sid(&self) -> bool {
        matches!(self, Driver::Kimi | Driver::Opencode { .. })
    }

    /// The command line for a turn (docs/runner.md §23).
    pub fn invocation(&self, t: &TurnArgs<'_>) -> Invocation {
        // A resume never runs without an id, and a fresh turn never resumes a stale one.
        let resume = !t.fresh && (!self.needs_sid() || !t.sid.is_empty());
        let model = t.model;
        let s = |x: &str| x.to_string();
        let mut args: Vec<String> = Vec::new();
        let program = match self {
            Driver::Claude => {
                if resume {
                    args.push(s("-c"));
                }
                if !model.is_empty() {
                    args.extend([s("--model"), s(model)]);
                }
                if let Some(e) = t.effort {
                    args.extend([s("--effort"), s(e)]);
                }
                args.extend([s("-p"), s(t.prompt), s("--dangerously-skip-permissions")]);
                "claude"
            }
            Driver::Codex => {
                args.push(s("exec"));
                if resume {
                    args.extend([s("resume"), s("--last")]);
                }
                if !model.is_empty() {
                    args.extend([s("-m"), s(model)]);
                }
                if let Some(e) = t.effort {
                    args.extend([s("-c"), format!("model_reasoning_effort=\"{e}\"")]);
                }
                args.extend([
                    s("--skip-git-repo-check"),
                    s("--dangerously-bypass-approvals-and-sandbox"),
                    s(t.prompt),
                ]);
                "codex"
            }
            Driver::Gemini => {
                args.push(s("--yolo"));
                if !model.is_empty() {
                    args.extend([s("-m"), s(model)]);
                }
                if let Some(e) = t.effort {
                    args.extend([s("--variant"), s(e)]);
                }
                if resume {
                    args.extend([s("-r"), s("latest")]);
                }
                args.extend([s("-p"), s(t.prompt)]);
                "gemini"
            }
            Driver::Kimi => {
                if !model.is_empty() {
                    args.extend([s("--model"), s(model)]);
                }
                if let Some(e) = t.effort {
                    args.extend([s("--variant"), s(e)]);
                }
                if resume {
                    args.extend([s("-r"), s(t.sid)]);
                }
                args.extend([s("-p"), s(t.prompt)]);
                "kimi"
            }
            Driver::Opencode { provider } => {
                args.extend([s("run"), s("--dir"), t.dir.to_string_lossy().to_string()]);
                if resume {
                    args.extend([s("-s"), s(t.sid)]);
                }
                if !model.is_empty() {
                    let m = if provider.is_empty() || model.contains('/') {
                        model.to_string()
                    } else {
                        format!("{provider}/{model}")
                    };
                    args.extend([s("-m"), m]);
                }
                if let Some(e) = t.effort {
                    args.extend([s("--variant"), s(e)]);
                }
                args.push(s(t.prompt));
                "opencode"
            }
            Driver::Dsh => {
                args.extend([s("--profile"), s("trantor"), s(t.prompt)]);
                "dsh"
            }
            Driver::Command { first, next } => {
                let template = if resume { next } else { first };
                let expanded = expand_template(template, t);
                return Invocation {
                    program: "/bin/bash".into(),
                    args: vec![s("-c"), expanded],
                };
            }
        };
        Invocation {
            program: program.to_string(),
            args,
        }
    }

    /// The CLI session id a finished turn reveals (kimi prints it; opencode keeps it in its db).
    pub fn sid_after_turn(&self, stdout: &str, dir: &Path, data_home: &Path) -> Option<String> {
        match self {
            Driver::Kimi => KIMI_SID
                .as_ref()?
                .captures_iter(stdout)
                .last()
                .and_then(|c| c.get(1))
                .map(|m| m.as_str().to_string()),
            Driver::Opencode { .. } => opencode_sid(dir, data_home),
            _ => None,
        }
    }

    /// The directories where this CLI writes its session transcripts (a watchdog channel);
    /// `data_home` is `XDG_DATA_HOME` or `<home>/.local/share`, resolved by the config.
    pub fn session_dirs(&self, dir: &Path, home: &Path, data_home: &Path) -> Vec<PathBuf> {
        match self {
            Driver::Claude => vec![claude_transcript_dir(dir, home)],
            Driver::Kimi => vec![home.join(".kimi").join("sessions")],
            Driver::Dsh => vec![home.join(".dsh").join("sessions")],
            Driver::Gemini => vec![home.join(".gemini").join("tmp")],
            Driver::Codex => vec![home.join(".codex").join("sessions")],
            // OpenCode 1.18 keeps sessions in opencode.db and its WAL; older releases wrote JSON
            // files under storage/. Not the whole data directory: its log/ takes a line on every
            // retry of a failing provider, which is not work (docs/runner.md §8.1).
            Driver::Opencode { .. } => {
                let d = data_home.join("opencode");
                vec![
                    d.join("opencode.db"),
                    d.join("opencode.db-wal"),
                    d.join("storage"),
                ]
            }
            Driver::Command { .. } => vec![],
        }
    }

    /// Directories of the CLI's own logs where it records provider errors it retries by itself
    /// (docs/runner.md §8.4): OpenCode's `log/` beside its database.
    pub fn provider_logs(&self, data_home: &Path) -> Vec<PathBuf> {
        match self {
            Driver::Opencode { .. } => vec![data_home.join("opencode").join("log")],
            _ => Vec::new(),
        }
    }

    /// Environment this driver's CLI needs on top of the seat's. Claude Code refuses
    /// `--dangerously-skip-permissions` as root ("cannot be used with root/sudo privileges")
    /// unless it is told it runs in a sandbox; containers and CI run seats as root.
    pub fn cli_env(&self, euid_is_root: bool) -> Vec<(String, String)> {
        match self {
            Driver::Claude if euid_is_root => vec![("IS_SANDBOX".into(), "1".into())],
            _ => Vec::new(),
        }
    }

    /// Whether `~/.token-scrooge/.env` applies (the opencode family and dsh).
    pub fn uses_scrooge_env(&self) -> bool {
        matches!(self, Driver::Opencode { .. } | Driver::Dsh)
    }
}

/// Expand a `command` template: `{P}` (or `{prompt}`) the quoted prompt file, `{PROMPT}` the
/// prompt as one shell word (`"$(cat P)"`), `{DIR}`, `{SID}`, `{M}` (quoted), `{FRESH}` (`1` or
/// `0`). The prompt file is also in `$TRANTOR_PROMPT_FILE`.
pub fn expand_template(template: &str, t: &TurnArgs<'_>) -> String {
    let pf = shell_quote(&t.prompt_file.to_string_lossy());
    template
        .replace("{PROMPT}", &format!("\"$(cat {pf})\""))
        .replace("{P}", &pf)
        .replace("{prompt}", &pf)
        .replace("{DIR}", &shell_quote(&t.dir.to_string_lossy()))
        .replace("{SID}", &shell_quote(t.sid))
        .replace("{M}", &shell_quote(t.model))
        .replace("{FRESH}", if t.fresh { "1" } else { "0" })
}

/// `~/.claude/projects/<dir with every non-alphanumeric character → '-'>`.
pub fn claude_transcript_dir(dir: &Path, home: &Path) -> PathBuf {
    let key: String = dir
        .to_string_lossy()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    home.join(".claude").join("projects").join(key)
}

/// Ask OpenCode's database (`<data_home>/opencode/opencode.db`) read-only through `sqlite3`,
/// with `sql` given the turn directory and its realpath, quoted for SQL; None when the db, the
/// tool or an answer is missing (fail-open, docs/runner.md §23).
fn opencode_query(
    dir: &Path,
    data_home: &Path,
    sql: impl Fn(&str, &str) -> String,
) -> Option<String> {
    let db = data_home.join("opencode").join("opencode.db");
    if !db.exists() {
        return None;
    }
    let d = dir.to_string_lossy().replace('\'', "''");
    let real = std::fs::canonicalize(dir)
        .map(|p| p.to_string_lossy().replace('\'', "''"))
        .unwrap_or_else(|_| d.clone());
    let mut cmd = std::process::Command::new("sqlite3");
    cmd.arg("-readonly").arg(&db).arg(sql(&d, &real));
    let out = crate::sys::cmd::run_bounded(cmd, std::time::Duration::from_secs(10)).ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The newest opencode session of `dir` (or its realpath); None when the db, the tool or a
/// well-formed id is missing.
fn opencode_sid(dir: &Path, data_home: &Path) -> Option<String> {
    let out = opencode_query(dir, data_home, |d, real| {
        format!(
            "SELECT id FROM session WHERE directory IN ('{d}','{real}') ORDER BY time_updated DESC LIMIT 1;"
        )
    })?;
    let id = out.trim().to_string();
    OC_SID.as_ref()?.is_match(&id).then_some(id)
}

/// The `data` of every message OpenCode created since `since_ms` in a session of `dir` (or its
/// realpath), one JSON text per line; None when the db or the tool is missing (the turn's cost
/// is then unknown, docs/runner.md §15.3).
pub fn opencode_turn_messages(dir: &Path, data_home: &Path, since_ms: i64) -> Option<String> {
    opencode_query(dir, data_home, |d, real| {
        format!(
            "SELECT m.data FROM message m JOIN session s ON s.id = m.session_id \
             WHERE s.directory IN ('{d}','{real}') AND m.time_created >= {since_ms} \
             ORDER BY m.time_created, m.id;"
        )
    })
}

/// Parse a `.env` file of `KEY=VALUE` / `export KEY=VALUE` lines (quotes stripped, comments
/// skipped). Sourcing it through a shell would run arbitrary code in the runner's name; the
/// assignments are all a seat's env file is for.
pub fn parse_env_file(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let line = line.strip_prefix("export ").unwrap_or(line).trim_start();
        let Some((k, v)) = line.split_once('=') else {
            continue;
        };
        let k = k.trim();
        if k.is_empty() || !k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        let v = v.trim();
        let v = if v.len() >= 2
            && ((v.starts_with('"') && v.ends_with('"'))
                || (v.starts_with('\'') && v.ends_with('\'')))
        {
            v[1..v.len() - 1].to_string()
        } else {
            v.split(" #").next().unwrap_or("").trim().to_string()
        };
        out.push((k.to_string(), v));
    }
    out
}

/// The env-file assignments for a turn: `~/.token-scrooge/.env` (opencode family and dsh),
/// then `<bus>/.env`, so the crew file wins (docs/runner.md §23).
pub fn env_file_vars(driver: &Driver, bus: &Path, home: &Path) -> Vec<(String, String)> {
    let mut files = Vec::new();
    if driver.uses_scrooge_env() {
        files.push(home.join(".token-scrooge").join(".env"));
    }
    files.push(bus.join(".env"));
    files
        .iter()
        .filter_map(|f| std::fs::read_to_string(f).ok())
        .flat_map(|t| parse_env_file(&t))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ta<'a>(fresh: bool, sid: &'a str, model: &'a str) -> TurnArgs<'a> {
        TurnArgs {
            fresh,
            sid,
            prompt: "PROMPT",
            prompt_file: Path::new("/b/turn-x-p.txt"),
            dir: Path::new("/w"),
            model,
            effort: None,
        }
    }

    #[test]
    fn claude_first_and_resume() {
        let d = Driver::for_name("claude", None, None);
        assert_eq!(
            d.invocation(&ta(true, "", "")).args,
            vec!["-p", "PROMPT", "--dangerously-skip-permissions"]
        );
        assert_eq!(
            d.invocation(&ta(false, "", "opus")).args,
            vec![
                "-c",
                "--model",
                "opus",
                "-p",
                "PROMPT",
                "--dangerously-skip-permissions"
            ]
        );
    }

    #[test]
    fn codex_gemini_dsh() {
        let c = Driver::for_name("codex", None, None).invocation(&ta(false, "", ""));
        assert_eq!(c.program, "codex");
        assert_eq!(
            c.args,
            vec![
                "exec",
                "resume",
                "--last",
                "--skip-git-repo-check",
                "--dangerously-bypass-approvals-and-sandbox",
                "PROMPT"
            ]
        );
        let g = Driver::for_name("gemini", None, None).invocation(&ta(false, "", "m"));
        assert_eq!(
            g.args,
            vec!["--yolo", "-m", "m", "-r", "latest", "-p", "PROMPT"]
        );
        let d = Driver::for_name("dsh", None, None).invocation(&ta(false, "x", "m"));
        assert_eq!(d.args, vec!["--profile", "trantor", "PROMPT"]);
    }

    #[test]
    fn sid_based_clis_never_resume_without_an_id() {
        let k = Driver::for_name("kimi", None, None);
        assert_eq!(k.invocation(&ta(false, "", "")).args, vec!["-p", "PROMPT"]);
        assert_eq!(
            k.invocation(&ta(false, "abc", "")).args,
            vec!["-r", "abc", "-p", "PROMPT"]
        );
        assert_eq!(
            k.invocation(&ta(true, "abc", "")).args,
            vec!["-p", "PROMPT"]
        );
        let o = Driver::for_name("deepseek", None, None);
        assert_eq!(
            o.invocation(&ta(false, "ses_1", "deepseek-chat")).args,
            vec![
                "run",
                "--dir",
                "/w",
                "-s",
                "ses_1",
                "-m",
                "deepseek/deepseek-chat",
                "PROMPT"
            ]
        );
        assert_eq!(
            k.sid_after_turn(
                "done\nTo resume this session: kimi -r 9f3e\n",
                Path::new("/"),
                Path::new("/")
            ),
            Some("9f3e".into())
        );
    }

    #[test]
    fn command_templates_expand() {
        let d = Driver::for_name(
            "command",
            Some("agent --in {P} --fresh {FRESH}"),
            Some("agent --resume {SID} {PROMPT}"),
        );
        let first = d.invocation(&ta(true, "", ""));
        assert_eq!(first.program, "/bin/bash");
        let alias = Driver::for_name("command", Some("a --prompt-file {prompt}"), None);
        assert_eq!(
            alias.invocation(&ta(true, "", "")).args[1],
            "a --prompt-file '/b/turn-x-p.txt'"
        );
        assert_eq!(
            first.args,
            vec!["-c", "agent --in '/b/turn-x-p.txt' --fresh 1"]
        );
        let next = d.invocation(&ta(false, "s'1", ""));
        assert_eq!(
            next.args[1],
            "agent --resume 's'\"'\"'1' \"$(cat '/b/turn-x-p.txt')\""
        );
    }

    #[test]
    fn env_files_parse_assignments_only() {
        let v = parse_env_file(
            "# c\nexport A=1\nB=\"two words\"\nC='x'\nbad line\nD=v # note\n$(rm)=x\n",
        );
        assert_eq!(
            v,
            vec![
                ("A".into(), "1".into()),
                ("B".into(), "two words".into()),
                ("C".into(), "x".into()),
                ("D".into(), "v".into())
            ]
        );
    }

    /// Render an invocation in the table's notation.
    fn synopsis(inv: &Invocation, t: &TurnArgs<'_>) -> String {
        let mut parts = vec![inv.program.clone()];
        for a in &inv.args {
            parts.push(if a == t.prompt {
                "<prompt>".into()
            } else if a == t.sid {
                "<sid>".into()
            } else if Path::new(a) == t.dir {
                "<dir>".into()
            } else {
                a.clone()
            });
        }
        parts.join(" ")
    }

    #[test]
    fn the_driver_table_is_what_the_runner_runs() {
        for d in DRIVERS {
            let driver = Driver::for_name(d.name, None, None);
            let first = ta(true, "", "");
            assert_eq!(synopsis(&driver.invocation(&first), &first), d.first);
            let next = ta(false, "ses_abc", "");
            assert_eq!(synopsis(&driver.invocation(&next), &next), d.resume);
            assert_eq!(driver.invocation(&first).program, d.program);
            if let Some(r) = d.verified {
                let req = semver::VersionReq::parse(r).expect("range");
                let with = semver::Version::parse(d.verified_with.expect("verified_with"))
                    .expect("version");
                assert!(req.matches(&with), "{} {r} excludes {with}", d.name);
            }
        }
    }

    #[test]
    fn versions_are_read_from_each_clis_banner_and_compared() {
        let claude = spec("claude").expect("claude");
        assert_eq!(
            check_version(claude, "2.1.332 (Claude Code)\n"),
            VersionCheck::Verified(semver::Version::new(2, 1, 332))
        );
        assert_eq!(
            check_version(claude, "2.0.9 (Claude Code)"),
            VersionCheck::Older(semver::Version::new(2, 0, 9))
        );
        assert_eq!(
            check_version(claude, "3.0.0 (Claude Code)"),
            VersionCheck::Newer(semver::Version::new(3, 0, 0))
        );
        let codex = spec("codex").expect("codex");
        assert_eq!(
            check_version(codex, "codex-cli 0.171.0"),
            VersionCheck::Verified(semver::Version::new(0, 171, 0))
        );
        assert_eq!(
            check_version(codex, "command not found"),
            VersionCheck::Unknown
        );
        assert!(matches!(
            check_version(spec("kimi").expect("kimi"), "kimi, version 1.2.3"),
            VersionCheck::Unverified(Some(_))
        ));
    }

    #[test]
    fn claude_as_root_is_told_it_runs_in_a_sandbox() {
        let c = Driver::for_name("claude", None, None);
        assert_eq!(
            c.cli_env(true),
            vec![("IS_SANDBOX".to_string(), "1".to_string())]
        );
        assert!(c.cli_env(false).is_empty());
        assert!(
            Driver::for_name("codex", None, None)
                .cli_env(true)
                .is_empty()
        );
    }

    #[test]
    fn opencode_liveness_is_its_database_not_its_log() {
        let dirs = Driver::for_name("opencode", None, None).session_dirs(
            Path::new("/w"),
            Path::new("/h"),
            Path::new("/d"),
        );
        assert!(dirs.contains(&PathBuf::from("/d/opencode/opencode.db-wal")));
        assert!(!dirs.iter().any(|d| d.starts_with("/d/opencode/log")));
        assert!(!dirs.contains(&PathBuf::from("/d/opencode")));
        assert_eq!(
            Driver::for_name("opencode", None, None).provider_logs(Path::new("/d")),
            vec![PathBuf::from("/d/opencode/log")]
        );
    }

    #[test]
    fn claude_transcript_dir_is_derived_from_the_cwd() {
        assert_eq!(
            claude_transcript_dir(Path::new("/a/b.c"), Path::new("/h")),
            PathBuf::from("/h/.claude/projects/-a-b-c")
        );
    }
}

//! `trantor plugin install|remove` with the real Claude Code in a fresh HOME: the plugin shows in
//! `claude plugin list` with its skills, its hooks run our `trantor hook` (and do nothing inside a
//! seat), connect's own Claude Code wiring is taken out so nothing runs twice, and remove makes it
//! all disappear. Without Claude Code the test skips (and fails under CI=true); the missing and
//! too-old CLI cases run everywhere.

mod common;

use common::bin;
use serde_json::Value;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The installed `claude` CLI: `TRANTOR_TEST_CLAUDE`, else `claude` on PATH.
fn claude_cli() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("TRANTOR_TEST_CLAUDE").filter(|p| !p.is_empty()) {
        return Some(p.into());
    }
    std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join("claude"))
            .find(|f| f.is_file())
    })
}

/// Run `program args` with `home` as HOME and nothing of the caller's trantor set-up.
fn run(program: &Path, args: &[&str], home: &Path) -> (i32, String) {
    let out = Command::new(program)
        .args(args)
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env_remove("AGENT_BUS_DIR")
        .env_remove("RELAY_DATA_DIR")
        .env_remove("TRANTOR_PLUGIN_DIR")
        .env_remove("TRANTOR_CLAUDE")
        .env_remove("TRANTOR_SEAT")
        .env("RELAY_URL", "http://127.0.0.1:9")
        .stdin(Stdio::null())
        .output()
        .expect("run");
    (
        out.status.code().unwrap_or(-1),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

fn trantor(args: &[&str], home: &Path) -> (i32, String) {
    run(&bin(), args, home)
}

/// The ids `claude plugin list --json` shows.
fn listed(claude: &Path, home: &Path) -> Vec<String> {
    let (code, out) = run(claude, &["plugin", "list", "--json"], home);
    assert_eq!(code, 0, "{out}");
    let start = out.find('[').unwrap_or(0);
    let items: Vec<Value> = serde_json::from_str(&out[start..]).expect("plugin list json");
    items
        .iter()
        .filter_map(|i| i["id"].as_str().map(str::to_string))
        .collect()
}

#[test]
fn a_missing_or_too_old_claude_says_what_is_needed_and_points_at_connect() {
    let home = tempfile::tempdir().expect("home");
    let (code, out) = trantor(
        &["plugin", "install", "--claude", "/nonexistent/claude"],
        home.path(),
    );
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("not installed") && out.contains("2.0") && out.contains("trantor connect"),
        "{out}"
    );
    // The marketplace is written all the same, for when Claude Code arrives.
    let dir = home.path().join(".agent-bus/claude-plugin");
    assert!(dir.join(".claude-plugin/marketplace.json").is_file());

    let old = home.path().join("old-claude");
    std::fs::write(&old, "#!/bin/sh\necho '1.0.88 (Claude Code)'\n").expect("write");
    std::fs::set_permissions(&old, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let (code, out) = trantor(
        &[
            "plugin",
            "install",
            "--claude",
            old.to_str().expect("utf-8"),
        ],
        home.path(),
    );
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("1.0.88") && out.contains("2.0 or newer") && out.contains("trantor connect"),
        "{out}"
    );
}

#[test]
fn the_plugin_installs_in_the_real_claude_runs_our_hooks_and_removes_cleanly() {
    let Some(claude) = claude_cli() else {
        if std::env::var_os("CI").is_some() {
            panic!("claude CLI not installed (CI installs @anthropic-ai/claude-code in .ci/run)");
        }
        eprintln!("SKIP: the claude CLI is not installed here (set TRANTOR_TEST_CLAUDE or PATH)");
        return;
    };
    let claude_s = claude.to_str().expect("utf-8 path");
    let home = tempfile::tempdir().expect("home");
    let h = home.path();
    // connect wired Claude Code first: the plugin takes over, so no hook runs twice.
    let (code, out) = trantor(&["connect", "--only", "claude"], h);
    assert_eq!(code, 0, "{out}");

    let (code, out) = trantor(&["plugin", "install", "--claude", claude_s], h);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("installed"), "{out}");
    assert!(
        listed(&claude, h)
            .iter()
            .any(|id| id == "trantor@trantor-local"),
        "{out}"
    );
    let (code, details) = run(&claude, &["plugin", "details", "trantor@trantor-local"], h);
    assert_eq!(code, 0, "{details}");
    for skill in ["crew", "handoff", "research"] {
        assert!(details.contains(skill), "{details}");
    }
    let settings = std::fs::read_to_string(h.join(".claude/settings.json")).expect("settings");
    assert!(
        !settings.contains(" hook "),
        "connect's hooks left: {settings}"
    );
    let mcp = std::fs::read_to_string(h.join(".claude.json")).unwrap_or_default();
    assert!(
        !mcp.contains("\"trantor\""),
        "connect's MCP entry left: {mcp}"
    );
    let (code, out) = trantor(&["connect", "--only", "claude"], h);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("plugin"), "{out}");
    let settings = std::fs::read_to_string(h.join(".claude/settings.json")).expect("settings");
    assert!(!settings.contains(" hook "), "connect rewired: {settings}");
    let (_, doctor) = trantor(&["doctor", "--json"], h);
    assert!(doctor.contains("through the plugin"), "{doctor}");

    // Idempotent: a second install changes nothing and the plugin is listed once.
    let (code, again) = trantor(&["plugin", "install", "--claude", claude_s], h);
    assert_eq!(code, 0, "{again}");
    assert!(again.contains("unchanged"), "{again}");
    let ids = listed(&claude, h);
    assert_eq!(
        ids.iter().filter(|i| *i == "trantor@trantor-local").count(),
        1,
        "{ids:?}"
    );

    // The plugin's own hook command, run as Claude Code runs it, inside a seat: `{}`.
    let dir = h.join(".agent-bus/claude-plugin");
    let hooks: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("trantor/hooks/hooks.json")).expect("hooks.json"),
    )
    .expect("json");
    let command = hooks["hooks"]["SessionStart"][0]["hooks"][0]["command"]
        .as_str()
        .expect("a SessionStart command")
        .to_string();
    assert!(command.ends_with(" hook session-start"), "{command}");
    let mut child = Command::new("sh")
        .args(["-c", &command])
        .env("HOME", h)
        .env("TRANTOR_SEAT", "claude:web")
        .env("RELAY_URL", "http://127.0.0.1:9")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("hook");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(br#"{"session_id":"s1","hook_event_name":"SessionStart","source":"startup","cwd":"/tmp"}"#)
        .expect("write");
    let out = child.wait_with_output().expect("hook output");
    assert!(out.status.success());
    let said: Value = serde_json::from_slice(&out.stdout).expect("hook json");
    assert_eq!(said, serde_json::json!({}));

    // Remove: gone from Claude Code and from disk; a second remove is a no-op.
    let (code, out) = trantor(&["plugin", "remove", "--claude", claude_s], h);
    assert_eq!(code, 0, "{out}");
    assert!(
        !listed(&claude, h)
            .iter()
            .any(|id| id.starts_with("trantor@")),
        "{out}"
    );
    assert!(!dir.exists(), "{out}");
    let (code, out) = trantor(&["plugin", "remove", "--claude", claude_s], h);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("unchanged"), "{out}");
}

/// connect and the plugin wire the `trantor` found on PATH, unresolved, when it is this binary (a
/// package manager's link survives an upgrade; the resolved versioned path would not), and this
/// binary's own path otherwise.
#[test]
fn the_trantor_on_path_is_wired_as_found_when_it_is_this_binary() {
    let home = tempfile::tempdir().expect("home");
    let h = home.path();
    let bin_dir = h.join("bin");
    std::fs::create_dir_all(&bin_dir).expect("mkdir");
    let link = bin_dir.join("trantor");
    std::os::unix::fs::symlink(bin(), &link).expect("symlink");
    let wire = |path: &str| {
        let out = Command::new(bin())
            .args(["connect", "--only", "claude", "--json"])
            .env("HOME", h)
            .env("PATH", path)
            .env_remove("AGENT_BUS_DIR")
            .env_remove("RELAY_DATA_DIR")
            .output()
            .expect("connect");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let cfg: Value = serde_json::from_str(
            &std::fs::read_to_string(h.join(".claude.json")).expect("claude.json"),
        )
        .expect("json");
        cfg["mcpServers"]["trantor"]["command"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    let on_path = format!("{}:/usr/bin:/bin", bin_dir.display());
    assert_eq!(wire(&on_path), link.display().to_string());
    // Not this binary on PATH (another program named trantor): this binary's own path.
    std::fs::remove_file(&link).expect("rm");
    std::fs::write(&link, "#!/bin/sh\n").expect("write");
    std::fs::set_permissions(&link, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let exe = std::fs::canonicalize(bin()).expect("exe");
    assert_eq!(wire(&on_path), exe.display().to_string());
}

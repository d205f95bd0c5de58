//! Compatibility: the original package's own Claude Code hook scripts (npm `trantor@0.18.72`,
//! `hooks/*.mjs`) run unchanged against our hub and cause what they cause on the original's.
//!
//! The package is installed by `tests-compat/install-original.sh` (see `common::original_package`);
//! without node or npm each test says SKIP on a developer machine and fails under `CI=true`.

mod common;

use common::{Hub, hub_request};
use serde_json::{Value, json};
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

/// Runs one of the original's hook scripts with `input` on stdin, as Claude Code would, against
/// the hub on `port`, as `session` in `project`; returns the hook's stdout parsed as JSON.
fn run_hook(
    pkg: &Path,
    script: &str,
    port: u16,
    home: &Path,
    session: &str,
    project: &str,
    input: &Value,
) -> Value {
    let mut child = Command::new("node")
        .arg(pkg.join("hooks").join(script))
        .env("RELAY_URL", format!("http://127.0.0.1:{port}"))
        .env("RELAY_SESSION", session)
        .env("RELAY_PROJECT", project)
        .env("HOME", home)
        .env("AGENT_BUS_DIR", home.join(".agent-bus"))
        .env("CLAUDE_PROJECT_DIR", home)
        .current_dir(home)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn node");
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(input.to_string().as_bytes())
            .expect("hook stdin");
    }
    let out = child.wait_with_output().expect("hook output");
    assert!(
        out.status.success(),
        "{script} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or(Value::Null)
}

/// PreToolUse (`file-claim.mjs`): the first session's edit is recorded as a live claim on our
/// hub, and a second session editing the same file is handed the original's collision warning
/// naming the first.
#[test]
fn original_file_claim_hook_records_claims_and_warns_of_a_collision() {
    let Some(pkg) = common::original_package() else {
        return;
    };
    let hub = Hub::start();
    let home_a = tempfile::tempdir().expect("tempdir");
    let home_b = tempfile::tempdir().expect("tempdir");
    let edit = |home: &Path| {
        json!({
            "hook_event_name": "PreToolUse",
            "tool_name": "Edit",
            "tool_input": { "file_path": home.join("src/lib.rs").to_string_lossy() },
            "cwd": home.to_string_lossy(),
        })
    };

    let first = run_hook(
        &pkg,
        "file-claim.mjs",
        hub.port,
        home_a.path(),
        "claude:web",
        "web",
        &edit(home_a.path()),
    );
    assert_eq!(first, json!({}), "no one else holds the file yet");

    let (status, claims) =
        hub_request(hub.port, "GET", "/claims?project=web", None).expect("GET /claims");
    assert_eq!(status, 200);
    let held: Vec<&Value> = claims["claims"]
        .as_array()
        .map(|c| c.iter().collect())
        .unwrap_or_default();
    assert!(
        held.iter()
            .any(|c| c["file"] == "src/lib.rs" && c["session"] == "claude:web"),
        "the hook's claim is recorded repo-relative: {claims}"
    );

    let second = run_hook(
        &pkg,
        "file-claim.mjs",
        hub.port,
        home_b.path(),
        "codex:web",
        "web",
        &edit(home_b.path()),
    );
    let context = second["hookSpecificOutput"]["additionalContext"]
        .as_str()
        .unwrap_or_default();
    assert_eq!(second["hookSpecificOutput"]["hookEventName"], "PreToolUse");
    assert!(
        context.contains("claude:web") && context.contains("src/lib.rs"),
        "the second editor is warned about the first: {second}"
    );
    assert!(
        second["hookSpecificOutput"]
            .get("permissionDecision")
            .is_none(),
        "the warning never decides a permission: {second}"
    );
}

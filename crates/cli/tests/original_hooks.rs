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
    run_hook_env(pkg, script, port, home, session, project, input, &[])
}

/// [`run_hook`] with extra environment variables (the hooks' own knobs).
#[allow(clippy::too_many_arguments)]
fn run_hook_env(
    pkg: &Path,
    script: &str,
    port: u16,
    home: &Path,
    session: &str,
    project: &str,
    input: &Value,
    env: &[(&str, &str)],
) -> Value {
    let mut cmd = Command::new("node");
    cmd.envs(env.iter().copied());
    let mut child = cmd
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

/// The `additionalContext` a hook handed the model ("" when none).
fn context_of(out: &Value) -> String {
    out["hookSpecificOutput"]["additionalContext"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn post(port: u16, path: &str, body: Value) -> Value {
    let (status, reply) = hub_request(port, "POST", path, Some(&body)).expect("request");
    assert!(status < 300, "{path}: {status} {reply}");
    reply
}

/// SessionStart (`sessionstart.mjs`): the session registers on our hub and the model is handed
/// the live roster, the project's board digest and the operator's standing grants.
#[test]
fn original_sessionstart_hook_registers_and_hands_over_roster_board_and_grants() {
    let Some(pkg) = common::original_package() else {
        return;
    };
    let hub = Hub::start();
    let home = tempfile::tempdir().expect("tempdir");
    post(
        hub.port,
        "/register",
        json!({"session": "codex:web", "project": "web", "status": "idle"}),
    );
    post(
        hub.port,
        "/project",
        json!({"project": "web", "brief": "a web shop", "by": "codex:web"}),
    );
    post(
        hub.port,
        "/task",
        json!({"title": "build the cart", "project": "web", "status": "doing", "assignee": "codex:web", "by": "codex:web"}),
    );
    let grant = post(
        hub.port,
        "/propose",
        json!({"session": "codex:web", "scope": "push to staging", "condition": "tests green", "exclusions": "prod"}),
    )["proposal"]["id"]
        .as_i64()
        .expect("proposal id");
    post(
        hub.port,
        "/proposal/decide",
        json!({"id": grant, "status": "approved", "by": "admin"}),
    );

    let out = run_hook(
        &pkg,
        "sessionstart.mjs",
        hub.port,
        home.path(),
        "claude:web",
        "web",
        &json!({"hook_event_name": "SessionStart", "session_id": "s-1", "source": "startup", "cwd": home.path().to_string_lossy()}),
    );
    let ctx = context_of(&out);
    assert!(
        ctx.contains("codex:web"),
        "the roster names the live peer: {out}"
    );
    assert!(ctx.contains("**Brief:** a web shop"), "the brief: {ctx}");
    assert!(ctx.contains("**Cards:** 1 total"), "the digest: {ctx}");
    assert!(
        ctx.contains(&format!("[#{grant}]")) && ctx.contains("push to staging"),
        "the grant: {ctx}"
    );
    let (_, peer) = hub_request(hub.port, "GET", "/peer?session=claude:web", None).expect("peer");
    assert_eq!(peer["online"], true, "the session registered: {peer}");
}

/// UserPromptSubmit (`prompt-focus.mjs`) and PostToolUse (`todo-sync.mjs`): a substantive prompt
/// becomes the session's focus card, re-titled in place by the next one; a TodoWrite list becomes
/// cards by status.
#[test]
fn original_prompt_focus_and_todo_sync_hooks_keep_a_solo_sessions_board() {
    let Some(pkg) = common::original_package() else {
        return;
    };
    let hub = Hub::start();
    let home = tempfile::tempdir().expect("tempdir");
    let prompt = |text: &str| json!({"hook_event_name": "UserPromptSubmit", "session_id": "cc-1", "prompt": text, "cwd": home.path().to_string_lossy()});
    let cards = || -> Vec<Value> {
        let (_, v) = hub_request(hub.port, "GET", "/tasks?project=web", None).expect("tasks");
        v.as_array()
            .cloned()
            .or_else(|| v["tasks"].as_array().cloned())
            .unwrap_or_default()
    };
    run_hook(
        &pkg,
        "prompt-focus.mjs",
        hub.port,
        home.path(),
        "claude:web",
        "web",
        &prompt("ok"),
    );
    assert!(cards().is_empty(), "an acknowledgement makes no card");
    run_hook(
        &pkg,
        "prompt-focus.mjs",
        hub.port,
        home.path(),
        "claude:web",
        "web",
        &prompt("please add a search box to the product list"),
    );
    let after = cards();
    assert_eq!(after.len(), 1, "{after:?}");
    assert_eq!(after[0]["status"], "doing");
    assert!(
        after[0]["title"]
            .as_str()
            .is_some_and(|t| t.starts_with("add a search box")),
        "{after:?}"
    );
    run_hook(
        &pkg,
        "prompt-focus.mjs",
        hub.port,
        home.path(),
        "claude:web",
        "web",
        &prompt("now make the search case-insensitive"),
    );
    let after = cards();
    assert_eq!(
        after.len(),
        1,
        "one rolling focus card per session: {after:?}"
    );

    let todos = json!({
        "hook_event_name": "PostToolUse",
        "tool_name": "TodoWrite",
        "session_id": "cc-1",
        "cwd": home.path().to_string_lossy(),
        "tool_input": {"todos": [
            {"content": "write the search test", "status": "completed", "activeForm": "writing"},
            {"content": "wire the search box", "status": "in_progress", "activeForm": "wiring"},
            {"content": "update the docs", "status": "pending", "activeForm": "updating"}
        ]}
    });
    run_hook(
        &pkg,
        "todo-sync.mjs",
        hub.port,
        home.path(),
        "claude:web",
        "web",
        &todos,
    );
    let by_title = |t: &str| {
        cards()
            .into_iter()
            .find(|c| c["title"] == t)
            .map(|c| c["status"].as_str().unwrap_or_default().to_string())
    };
    assert_eq!(by_title("write the search test").as_deref(), Some("done"));
    assert_eq!(by_title("wire the search box").as_deref(), Some("doing"));
    assert_eq!(by_title("update the docs").as_deref(), Some("todo"));
}

/// PostToolUse (`heartbeat.mjs`, `inbox-deliver.mjs`) and Stop (`stop-inbox.mjs`): a tool call
/// refreshes presence; a direct message that arrives mid-turn is handed to the model once; a
/// session about to go idle with a direct message unread is held back once, and let go when the
/// harness says the hook already blocked.
#[test]
fn original_presence_inbox_and_stop_hooks_hand_mail_to_a_busy_session_once() {
    let Some(pkg) = common::original_package() else {
        return;
    };
    let hub = Hub::start();
    let home = tempfile::tempdir().expect("tempdir");
    let tool = json!({"hook_event_name": "PostToolUse", "tool_name": "Bash", "session_id": "cc-2", "cwd": home.path().to_string_lossy()});
    run_hook(
        &pkg,
        "heartbeat.mjs",
        hub.port,
        home.path(),
        "claude:web",
        "web",
        &tool,
    );
    let (_, peer) = hub_request(hub.port, "GET", "/peer?session=claude:web", None).expect("peer");
    assert_eq!(
        peer["online"], true,
        "the heartbeat registered the session: {peer}"
    );

    // The first poll anchors the session's cursor; a message sent after it is delivered.
    let quiet = run_hook_env(
        &pkg,
        "inbox-deliver.mjs",
        hub.port,
        home.path(),
        "claude:web",
        "web",
        &tool,
        &[("RELAY_INBOX_POLL_MS", "0")],
    );
    assert_eq!(context_of(&quiet), "", "nothing to hand over yet: {quiet}");
    common::hub_send(
        hub.port,
        "codex:web",
        "claude:web",
        "web",
        "the cart test fails on main",
    );
    // `RELAY_INBOX_POLL_MS=0` turns off the hook's own throttle, as a tool call past it would.
    let unthrottled = [("RELAY_INBOX_POLL_MS", "0")];
    let delivered = context_of(&run_hook_env(
        &pkg,
        "inbox-deliver.mjs",
        hub.port,
        home.path(),
        "claude:web",
        "web",
        &tool,
        &unthrottled,
    ));
    assert!(
        delivered.contains("📨 DIRECT from codex:web")
            && delivered.contains("the cart test fails on main"),
        "{delivered}"
    );

    // Stop: the message was handed over already (one ledger), so the stop goes through.
    let again_tool = context_of(&run_hook_env(
        &pkg,
        "inbox-deliver.mjs",
        hub.port,
        home.path(),
        "claude:web",
        "web",
        &tool,
        &unthrottled,
    ));
    assert_eq!(again_tool, "", "handed over once, not on every tool call");
    let stop = json!({"hook_event_name": "Stop", "session_id": "cc-2", "stop_hook_active": false, "cwd": home.path().to_string_lossy()});
    let out = run_hook(
        &pkg,
        "stop-inbox.mjs",
        hub.port,
        home.path(),
        "claude:web",
        "web",
        &stop,
    );
    assert_ne!(
        out["decision"], "block",
        "a message already handed over does not block: {out}"
    );

    // A new direct message unread at Stop holds the session back, once.
    common::hub_send(
        hub.port,
        "codex:web",
        "claude:web",
        "web",
        "please review #7 before you stop",
    );
    let out = run_hook(
        &pkg,
        "stop-inbox.mjs",
        hub.port,
        home.path(),
        "claude:web",
        "web",
        &stop,
    );
    assert_eq!(out["decision"], "block", "{out}");
    assert!(
        out["reason"]
            .as_str()
            .is_some_and(|r| r.contains("please review #7")),
        "{out}"
    );
    let again = json!({"hook_event_name": "Stop", "session_id": "cc-2", "stop_hook_active": true, "cwd": home.path().to_string_lossy()});
    let out = run_hook(
        &pkg,
        "stop-inbox.mjs",
        hub.port,
        home.path(),
        "claude:web",
        "web",
        &again,
    );
    assert_eq!(
        out,
        json!({}),
        "the harness's loop guard lets the session stop: {out}"
    );
}

/// SessionStart (`overseer-warn.mjs`): a session arriving on a project where the policy gives
/// level 2 is told, from our `GET /overseer/context`, the declared links, the live sessions,
/// the files in flight and the standing warning; at level 1 (observe) it is told nothing.
#[test]
fn original_overseer_warn_hook_narrates_our_overseer_context() {
    let Some(pkg) = common::original_package() else {
        return;
    };
    let hub = Hub::start();
    let home = tempfile::tempdir().expect("tempdir");
    let input = json!({"hook_event_name": "SessionStart", "cwd": home.path().to_string_lossy()});
    post(
        hub.port,
        "/register",
        json!({"session": "claude:web", "project": "web", "llm": "claude", "model": "opus", "status": "on the login form"}),
    );
    post(
        hub.port,
        "/register",
        json!({"session": "codex:web", "project": "web", "llm": "codex"}),
    );
    post(
        hub.port,
        "/claim",
        json!({"project": "web", "file": "src/login.rs", "session": "claude:web"}),
    );
    // Level 1 (the default) observes: the hook says nothing.
    let quiet = run_hook(
        &pkg,
        "overseer-warn.mjs",
        hub.port,
        home.path(),
        "gemini:web",
        "web",
        &input,
    );
    assert_eq!(quiet, json!({}), "level 1 narrates nothing: {quiet}");

    post(
        hub.port,
        "/policy",
        json!({"autonomy": {"web": 2}, "link": {"projects": ["web", "api"], "reason": "shared auth"}}),
    );
    let out = run_hook(
        &pkg,
        "overseer-warn.mjs",
        hub.port,
        home.path(),
        "gemini:web",
        "web",
        &input,
    );
    assert_eq!(out["hookSpecificOutput"]["hookEventName"], "SessionStart");
    let text = context_of(&out);
    assert!(text.starts_with("⚠️ trantor overseer: "), "{text}");
    for want in [
        "Linked projects (declared codependence): api + web — shared auth.",
        "claude:web (claude·opus), on the login form",
        "codex:web (codex)",
        "Files in flight right now: src/login.rs — claude:web (",
        "Overseer warnings: claude:web, codex:web are live on project web",
        "coordinate over the bus (relay_send)",
    ] {
        assert!(text.contains(want), "missing {want:?} in {text}");
    }
}

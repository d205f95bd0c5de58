//! Compatibility: the original JavaScript runner and MCP server (npm `trantor@0.18.72`) work
//! against our hub unchanged.
//!
//! The package is installed with `tests-compat/install-original.sh` into
//! `$TMPDIR/trantor-orig-0.18.72` (never into the repository) and reused by later runs. When
//! `node`, `npm` or `python3` is missing, or the npm registry cannot be reached, each test says
//! SKIP with the reason on a developer machine and fails under CI (`CI=true`), where `.ci/run`
//! installs them; `ci_fails_when_node_is_missing` proves the second half.

mod common;

use common::Hub;
use serde_json::{Value, json};
use std::process::{Command, Stdio};
use std::time::Duration;

/// One JSON request to the hub on `port`; status and body (`Null` when not JSON).
fn call(port: u16, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
    common::hub_request(port, method, path, body).expect("hub request")
}

#[test]
fn original_mcp_server_works_against_our_hub() {
    let Some(pkg) = common::original_with_python3() else {
        return;
    };
    let hub = Hub::start();
    let port = hub.port;
    let tmp = tempfile::tempdir().expect("tempdir");
    let home = tmp.path().join("mcphome");
    std::fs::create_dir_all(&home).expect("home");

    // A message to the MCP's session, sent once its first tool call reached the hub (after its
    // boot, so the MCP's inbox cursor does not skip it as old; and after relay_send's #1).
    let sender = std::thread::spawn(move || {
        common::wait_until(
            "the MCP server's first relay_send",
            Duration::from_secs(60),
            || {
                let (_, v) = call(
                    port,
                    "GET",
                    "/inbox?session=claude:demo&since=0&peek=1",
                    None,
                );
                v["messages"].as_array().is_some_and(|m| !m.is_empty())
            },
        );
        let body =
            json!({"from":"claude:demo","to":"orch:demo","text":"hello orch, ZEBRA-7 is ready"});
        let (st, v) = call(port, "POST", "/send", Some(&body));
        assert_eq!(st, 200, "{v}");
    });

    let calls = json!([
        {"name":"relay_send","arguments":{"to":"claude:demo","text":"please build the widget"}},
        {"name":"relay_task_add","arguments":{"title":"build widget","assignee":"claude:demo","checklist":["works","tested"],"note":"context"}},
        {"name":"relay_board","arguments":{}},
        {"name":"relay_task_move","arguments":{"id":1,"status":"doing","note":"starting"}},
        {"name":"relay_task_move","arguments":{"id":1,"status":"done","note":"looks good"}},
        {"sleep":3},
        {"name":"relay_inbox","arguments":{}},
        {"name":"relay_board","arguments":{"card":1}},
        {"name":"relay_contracts","arguments":{}},
        {"name":"relay_wait","arguments":{"timeout":1}}
    ]);
    let calls_file = tmp.path().join("calls.json");
    std::fs::write(&calls_file, calls.to_string()).expect("calls");
    let child = Command::new("python3")
        .arg(common::compat_file("mcp_drive.py"))
        .arg("--calls")
        .arg(format!("@{}", calls_file.display()))
        .arg("--timeout")
        .arg("30")
        .arg("--")
        .arg("node")
        .arg(pkg.join("mcp.mjs"))
        .env("HOME", &home)
        .env("AGENT_BUS_DIR", home.join(".agent-bus"))
        .env("RELAY_URL", hub.url())
        .env("RELAY_SESSION", "orch:demo")
        .env("RELAY_PROJECT", "demo")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run mcp_drive.py");
    let out =
        common::wait_with_deadline(child, Duration::from_secs(180)).expect("mcp driver finished");
    common::kill_processes_mentioning(tmp.path());
    sender.join().expect("sender");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "driver output not JSON ({e}): {} / {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let results = report["results"].as_array().cloned().unwrap_or_default();
    let tool = |i: usize| -> (bool, String) {
        let r = &results[i];
        (
            r["isError"].as_bool().unwrap_or(true),
            r["text"].as_str().unwrap_or("").to_string(),
        )
    };
    // `sleep` entries produce no result.
    assert_eq!(results.len(), 9, "{report}");
    let (err, text) = tool(0);
    assert!(
        !err && text.contains("sent #1 to claude:demo"),
        "relay_send: {text}"
    );
    let (err, text) = tool(1);
    assert!(
        !err && text.contains("card #1 added to demo"),
        "relay_task_add: {text}"
    );
    let (err, text) = tool(2);
    assert!(
        !err && text.contains("#1 build widget"),
        "relay_board: {text}"
    );
    let (err, text) = tool(3);
    assert!(
        !err && text.contains("card #1 -> doing"),
        "relay_task_move: {text}"
    );
    // The drill gate's 409 text reaches the agent.
    let (err, text) = tool(4);
    assert!(
        err,
        "a move to done without a drill line must be refused: {text}"
    );
    assert!(
        text.contains("no drill line on card #1"),
        "relay_task_move done: {text}"
    );
    let (err, text) = tool(5);
    assert!(
        !err && text.contains("hello orch, ZEBRA-7 is ready"),
        "relay_inbox: {text}"
    );
    let (err, text) = tool(6);
    assert!(
        !err && text.contains("build widget") && text.contains("doing"),
        "relay_board card: {text}"
    );
    let (err, text) = tool(7);
    assert!(!err && text.contains("contract"), "relay_contracts: {text}");
    let (err, _) = tool(8);
    assert!(!err, "relay_wait");

    // The hub holds what the tools did.
    let (_, card) = call(port, "GET", "/card?id=1", None);
    assert_eq!(card["task"]["status"], "doing");
    assert_eq!(card["task"]["by"], "orch:demo");
    assert_eq!(card["task"]["checklist"].as_array().map(Vec::len), Some(2));
    let (_, inbox) = call(
        port,
        "GET",
        "/inbox?session=claude:demo&since=0&peek=1",
        None,
    );
    assert_eq!(inbox["messages"][0]["text"], "please build the widget");
    assert_eq!(inbox["messages"][0]["project"], "demo");
}

#[test]
fn original_runner_gets_a_direct_message_and_answers_with_a_receipt() {
    let Some(pkg) = common::original_with_python3() else {
        return;
    };
    let hub = Hub::start();
    let port = hub.port;
    let tmp = tempfile::tempdir().expect("tempdir");
    let t = tmp.path();
    let bin_dir = t.join("bin");
    let proj = t.join("proj");
    let home = t.join("rhome");
    for d in [&bin_dir, &proj, &home] {
        std::fs::create_dir_all(d).expect("dir");
    }
    std::os::unix::fs::symlink(common::seat::fake_agent(), bin_dir.join("claude"))
        .expect("symlink");
    let fake_log = t.join("fake.jsonl");
    let runner_log = t.join("runner.log");
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".into())
    );
    let mut cmd = Command::new("node");
    cmd.arg(pkg.join("bin/crew-runner.mjs"))
        .arg("claude")
        .arg(&proj)
        .env_clear()
        .env("PATH", path)
        .env("HOME", &home)
        .env("RELAY_URL", hub.url())
        .env("RELAY_PROJECT", "crew1")
        .env("RELAY_HOST_ID", "orch")
        .env("TRANTOR_TURN_MAX_MS", "60000")
        .env("TRANTOR_NO_WORKTREE", "1")
        .env("FAKE_AGENT_LOG", &fake_log)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&runner_log).expect("log"))
        .stderr(Stdio::from(
            std::fs::File::options()
                .append(true)
                .open(&runner_log)
                .expect("log"),
        ));
    {
        use std::os::unix::process::CommandExt;
        cmd.process_group(0);
    }
    let mut runner = cmd.spawn().expect("spawn runner");
    let runner_pid = runner.id();

    let result = std::panic::catch_unwind(|| {
        let log = || std::fs::read_to_string(&runner_log).unwrap_or_default();
        // Boot: kickoff turn, then parked in /poll on our hub.
        common::wait_until("the runner to park", Duration::from_secs(90), || {
            log().contains("parked")
        });
        let (_, peer) = call(port, "GET", "/peer?session=claude:crew1", None);
        assert_eq!(peer["online"], true, "{peer}");

        let body = json!({"from":"orch:crew1","to":"claude:crew1","project":"crew1",
                          "text":"Please implement the widget for ZEBRA-42"});
        let (st, sent) = call(port, "POST", "/send", Some(&body));
        assert_eq!(st, 200, "{sent}");
        let id = sent["id"].as_i64().expect("id");

        // The fake CLI got a turn whose prompt carries the message…
        common::wait_until(
            "a turn carrying the message",
            Duration::from_secs(90),
            || {
                std::fs::read_to_string(&fake_log)
                    .unwrap_or_default()
                    .lines()
                    .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                    .any(|r| r["prompt"].as_str().unwrap_or("").contains("ZEBRA-42"))
            },
        );
        // …and the runner's receipt comes back to the sender.
        let mut receipt = Value::Null;
        common::wait_until("the runner's receipt", Duration::from_secs(90), || {
            let (_, inbox) = call(
                port,
                "GET",
                "/inbox?session=orch:crew1&since=0&peek=1",
                None,
            );
            if let Some(r) = inbox["messages"]
                .as_array()
                .and_then(|a| a.iter().find(|m| m["kind"] == "receipt" && m["re"] == id))
            {
                receipt = r.clone();
                true
            } else {
                false
            }
        });
        assert_eq!(receipt["from"], "claude:crew1");
        assert!(
            receipt["text"].as_str().unwrap_or("").contains("ZEBRA-42"),
            "{receipt}"
        );
        // The delivery ledger moved past the wake.
        let (_, peer) = call(port, "GET", "/peer?session=claude:crew1", None);
        assert!(peer["deliveredUpTo"].as_i64().unwrap_or(0) >= id, "{peer}");
    });

    if let Ok(pid) = i32::try_from(runner_pid) {
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    let _ = runner.kill();
    let _ = runner.wait();
    common::kill_processes_mentioning(t);
    if let Err(e) = result {
        eprintln!(
            "runner log:\n{}",
            std::fs::read_to_string(&runner_log).unwrap_or_default()
        );
        std::panic::resume_unwind(e);
    }
}

/// This binary's own test `name` run again in a child process with PATH holding nothing (so no
/// node, npm or python3) and `CI` set to `ci`.
fn rerun_without_tools(name: &str, ci: &str) -> std::process::Output {
    let empty = tempfile::tempdir().expect("empty PATH dir");
    Command::new(std::env::current_exe().expect("test binary"))
        .args([name, "--exact", "--test-threads=1", "--nocapture"])
        .env("PATH", empty.path())
        .env("CI", ci)
        .stdin(Stdio::null())
        .output()
        .expect("rerun the test binary")
}

/// The guard against a green CI that ran no compatibility check: with node missing, the
/// compatibility test fails when `CI=true` and skips with a visible reason when it is not.
#[test]
fn ci_fails_when_node_is_missing() {
    let test = "original_mcp_server_works_against_our_hub";
    let ci = rerun_without_tools(test, "true");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&ci.stdout),
        String::from_utf8_lossy(&ci.stderr)
    );
    assert!(!ci.status.success(), "CI=true passed without node: {said}");
    assert!(
        said.contains("CI is set") && said.contains("needs node") && said.contains(test),
        "{said}"
    );
    let dev = rerun_without_tools(test, "");
    let said = String::from_utf8_lossy(&dev.stderr);
    assert!(dev.status.success(), "a developer run should skip: {said}");
    assert!(said.contains(&format!("SKIP {test}: needs node")), "{said}");
}

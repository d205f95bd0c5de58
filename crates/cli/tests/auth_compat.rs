//! Compatibility under signed identity: the ORIGINAL JavaScript runner and MCP server (npm
//! `trantor@0.18.72`, keys in a temporary bus directory) enroll and work unchanged against our
//! hub with `RELAY_AUTH=enforce` (docs/protocol.md §2).
//!
//! * The MCP server enrolls its durable seat key by trust on first use (loopback bind) and signs
//!   every call with an endorsed instance key.
//! * The runner finds itself unknown (401), mints an invite with the operator's owner key (a key
//!   file this test writes in the original's format, enrolled with the bootstrap token) and
//!   enrolls with it.
//!
//! The test's own calls are signed with our signer; an unsigned call gets 401. Prerequisites
//! (node, npm, python3) are handled as in `hub_compat.rs`: SKIP on a developer machine, failure
//! under `CI=true`.

mod common;

use common::Hub;
use serde_json::{Value, json};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;
use trantor_proto::auth::{self, Ed25519Key};

const BOOT: &str = "compat-bootstrap-token-0123456789";

fn enforce_hub() -> Hub {
    Hub::start_with(|a| {
        a.auth = "enforce".into();
        a.bootstrap_token = Some(BOOT.into());
    })
}

/// One request signed by `key` (or unsigned); status and JSON body.
fn call(
    port: u16,
    key: Option<&Ed25519Key>,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> (u16, Value) {
    let payload = body.map(Value::to_string).unwrap_or_default();
    let signed = key.map(|k| auth::sign_request(k, method, path, payload.as_bytes()).headers);
    let mut headers: Vec<(&str, &str)> = vec![("Content-Type", "application/json")];
    for (name, v) in signed.iter().flatten() {
        headers.push((name, v));
    }
    let reply = common::request(port, method, path, &headers, payload.as_bytes()).expect("hub");
    (reply.status, reply.json())
}

/// Enrolls `key` as `name` (with the bootstrap token when `token` is given, else TOFU).
fn enroll(port: u16, key: &Ed25519Key, name: &str, kind: &str, token: Option<&str>) {
    let mut b = json!({"name": name, "kind": kind});
    if let Some(t) = token {
        b["token"] = json!(t);
    }
    let (st, v) = call(port, Some(key), "POST", "/enroll", Some(&b));
    assert_eq!(st, 200, "enroll {name}: {v}");
}

/// Writes `key` as the original's key file `<bus>/keys/<name>.json` (mode 0600).
fn write_key_file(bus: &Path, name: &str, kind: &str, key: &Ed25519Key) {
    use std::os::unix::fs::PermissionsExt;
    let dir = bus.join("keys");
    std::fs::create_dir_all(&dir).expect("keys dir");
    let safe: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "_.-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    let f = dir.join(format!("{safe}.json"));
    let doc = json!({"name": name, "kind": kind, "pubkey": auth::pubkey_hex(key),
                     "privkey": auth::seed_hex(key), "createdAt": trantor_proto::now_ms()});
    std::fs::write(&f, doc.to_string()).expect("key file");
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).expect("chmod");
}

#[test]
fn original_mcp_server_enrolls_and_works_against_our_enforcing_hub() {
    let Some(pkg) = common::original_with_python3() else {
        return;
    };
    let hub = enforce_hub();
    let port = hub.port;
    let tmp = tempfile::tempdir().expect("tempdir");
    let home = tmp.path().join("mcphome");
    std::fs::create_dir_all(&home).expect("home");

    // Unsigned callers are refused.
    let (st, v) = call(port, None, "GET", "/peers", None);
    assert_eq!((st, v["error"].as_str()), (401, Some("signature required")));

    // The seat the MCP server talks to, enrolled by this test (TOFU).
    let peer = auth::generate_key();
    enroll(port, &peer, "claude:demo", "agent", None);
    let sender = std::thread::spawn(move || {
        common::wait_until(
            "the MCP server's first relay_send",
            Duration::from_secs(60),
            || {
                let (_, v) = call(
                    port,
                    Some(&peer),
                    "GET",
                    "/inbox?session=claude:demo&since=0&peek=1",
                    None,
                );
                v["messages"].as_array().is_some_and(|m| !m.is_empty())
            },
        );
        let body =
            json!({"from":"claude:demo","to":"orch:demo","text":"hello orch, ZEBRA-7 is ready"});
        let (st, v) = call(port, Some(&peer), "POST", "/send", Some(&body));
        assert_eq!(st, 200, "{v}");
        peer
    });

    let calls = json!([
        {"name":"relay_send","arguments":{"to":"claude:demo","text":"please build the widget"}},
        {"name":"relay_task_add","arguments":{"title":"build widget","assignee":"claude:demo"}},
        {"name":"relay_board","arguments":{}},
        {"sleep":3},
        {"name":"relay_inbox","arguments":{}},
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
    let peer = sender.join().expect("sender");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "driver output not JSON ({e}): {} / {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let results = report["results"].as_array().cloned().unwrap_or_default();
    assert_eq!(results.len(), 4, "{report}");
    let text = |i: usize| -> String {
        let r = &results[i];
        assert_eq!(r["isError"], false, "tool {i}: {r}");
        r["text"].as_str().unwrap_or("").to_string()
    };
    assert!(text(0).contains("sent #1 to claude:demo"), "{}", text(0));
    assert!(text(1).contains("card #1 added to demo"), "{}", text(1));
    assert!(text(2).contains("#1 build widget"), "{}", text(2));
    assert!(text(3).contains("ZEBRA-7"), "{}", text(3));

    // The MCP server's key was enrolled under its session, and its writes carry that name.
    let (_, inbox) = call(
        port,
        Some(&peer),
        "GET",
        "/inbox?session=claude:demo&since=0&peek=1",
        None,
    );
    assert_eq!(inbox["messages"][0]["from"], "orch:demo");
    assert_eq!(inbox["messages"][0]["text"], "please build the widget");
    let (_, card) = call(port, Some(&peer), "GET", "/card?id=1", None);
    assert_eq!(card["task"]["by"], "orch:demo", "{card}");
    // Its key file is the original's, and the hub knows that key as orch:demo.
    let keyfile = home.join(".agent-bus/keys/orch_demo.json");
    let doc: Value =
        serde_json::from_slice(&std::fs::read(&keyfile).expect("mcp key file")).expect("json");
    assert_eq!(doc["name"], "orch:demo");
    let stranger = auth::generate_key();
    let (st, v) = call(port, Some(&stranger), "GET", "/peers", None);
    assert_eq!((st, v["error"].as_str()), (401, Some("unknown identity")));
    // The owner route is closed to the seat itself.
    let (st, v) = call(port, Some(&peer), "GET", "/identities", None);
    assert_eq!((st, v["error"].as_str()), (403, Some("forbidden")));
}

#[test]
fn original_runner_enrolls_by_invite_and_answers_on_our_enforcing_hub() {
    let Some(pkg) = common::original_with_python3() else {
        return;
    };
    let hub = enforce_hub();
    let port = hub.port;
    let tmp = tempfile::tempdir().expect("tempdir");
    let t = tmp.path();
    let bin_dir = t.join("bin");
    let proj = t.join("proj");
    let home = t.join("rhome");
    for d in [&bin_dir, &proj, &home] {
        std::fs::create_dir_all(d).expect("dir");
    }
    // The operator: an owner of every project, by the bootstrap token; its key file is where
    // the original runner looks for the owner key (RELAY_OWNER_IDENTITY).
    let owner = auth::generate_key();
    enroll(port, &owner, "orch:crew1", "human", Some(BOOT));
    write_key_file(&home.join(".agent-bus"), "orch:crew1", "human", &owner);

    std::os::unix::fs::symlink(common::compat_file("fake-agent.sh"), bin_dir.join("claude"))
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
        .env("RELAY_OWNER_IDENTITY", "orch:crew1")
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
        common::wait_until("the runner to park", Duration::from_secs(90), || {
            log().contains("parked")
        });
        assert!(!log().contains("not enrolled"), "{}", log());
        // It enrolled by invite, with write on its project.
        let (st, ids) = call(port, Some(&owner), "GET", "/identities", None);
        assert_eq!(st, 200, "{ids}");
        let seat = ids["identities"]
            .as_array()
            .and_then(|a| a.iter().find(|i| i["name"] == "claude:crew1"))
            .cloned()
            .unwrap_or(Value::Null);
        assert_eq!(seat["enrolledBy"], "invite", "{ids}");
        assert_eq!(
            seat["scopes"],
            json!([{"project": "crew1", "role": "write"}])
        );
        let (_, peer) = call(
            port,
            Some(&owner),
            "GET",
            "/peer?session=claude:crew1",
            None,
        );
        assert_eq!(peer["online"], true, "{peer}");

        let body = json!({"from":"orch:crew1","to":"claude:crew1","project":"crew1",
                          "text":"Please implement the widget for ZEBRA-42"});
        let (st, sent) = call(port, Some(&owner), "POST", "/send", Some(&body));
        assert_eq!(st, 200, "{sent}");
        let id = sent["id"].as_i64().expect("id");
        let mut receipt = Value::Null;
        common::wait_until("the runner's receipt", Duration::from_secs(90), || {
            let (_, inbox) = call(
                port,
                Some(&owner),
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

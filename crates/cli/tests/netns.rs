//! Two hosts on one machine (docs/protocol.md §2): two network namespaces joined by a veth pair.
//! The hub runs in namespace A, bound to A's address with `RELAY_AUTH=enforce`; a runner seat in
//! namespace B is given only `RELAY_URL` and an invite token the operator minted in A, enrolls,
//! and answers a direct message. From B an unsigned request gets 401 and trust-on-first-use is
//! refused (the hub is not on loopback).
//!
//! Needs root, `ip` (iproute2), curl and python3 (the fake agent CLI): SKIP on a developer
//! machine without them, failure under `CI=true`.

mod common;

use common::{GroupChild, wait_until};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

const PROJECT: &str = "p";
const ORCH: &str = "orch:p";
const BOOT: &str = "netns-bootstrap-token-0123456789";
const LONG: Duration = Duration::from_secs(120);

/// Two namespaces and a veth pair between them; removed when dropped.
struct Net {
    a: String,
    b: String,
    addr_a: String,
}

fn ip(args: &[&str]) -> Output {
    Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run ip")
}

fn ip_ok(args: &[&str]) {
    let o = ip(args);
    assert!(
        o.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&o.stderr)
    );
}

impl Net {
    fn new() -> Option<Net> {
        if !common::require_tools(&["ip", "curl", "python3"]) {
            return None;
        }
        if !nix::unistd::geteuid().is_root() {
            common::skip_or_fail("needs root to create network namespaces");
            return None;
        }
        let pid = std::process::id();
        let prefix = format!("10.{}.{}", 200 + (pid >> 8) % 50, pid % 256);
        let net = Net {
            a: format!("trn-a-{pid}"),
            b: format!("trn-b-{pid}"),
            addr_a: format!("{prefix}.1"),
        };
        let addr_b = format!("{prefix}.2");
        let (va, vb) = (
            format!("tva{}", pid % 100_000),
            format!("tvb{}", pid % 100_000),
        );
        // A leftover from a killed run of the same pid would make `add` fail.
        let _ = ip(&["netns", "del", &net.a]);
        let _ = ip(&["netns", "del", &net.b]);
        ip_ok(&["netns", "add", &net.a]);
        ip_ok(&["netns", "add", &net.b]);
        ip_ok(&["link", "add", &va, "type", "veth", "peer", "name", &vb]);
        ip_ok(&["link", "set", &va, "netns", &net.a]);
        ip_ok(&["link", "set", &vb, "netns", &net.b]);
        ip_ok(&[
            "-n",
            &net.a,
            "addr",
            "add",
            &format!("{}/24", net.addr_a),
            "dev",
            &va,
        ]);
        ip_ok(&[
            "-n",
            &net.b,
            "addr",
            "add",
            &format!("{addr_b}/24"),
            "dev",
            &vb,
        ]);
        for (ns, dev) in [(&net.a, &va), (&net.b, &vb)] {
            ip_ok(&["-n", ns, "link", "set", dev, "up"]);
            ip_ok(&["-n", ns, "link", "set", "lo", "up"]);
        }
        Some(net)
    }

    /// `cmd args…` inside namespace `ns`.
    fn exec(&self, ns: &str, program: &Path, args: &[&str]) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", ns]).arg(program).args(args);
        c.stdin(Stdio::null());
        c
    }

    fn url(&self) -> String {
        format!("http://{}:4477", self.addr_a)
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        // Deleting a namespace removes its end of the veth pair, and so the pair.
        let _ = ip(&["netns", "del", &self.a]);
        let _ = ip(&["netns", "del", &self.b]);
    }
}

fn out(o: &Output) -> String {
    format!(
        "status {:?}\nstdout: {}\nstderr: {}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A `trantor` verb in namespace `ns` with bus directory `bus`.
fn trantor(net: &Net, ns: &str, bus: &Path, args: &[&str]) -> Output {
    let mut c = net.exec(ns, &common::bin(), args);
    c.env("AGENT_BUS_DIR", bus)
        .env("HOME", bus)
        .env("RELAY_URL", net.url())
        .env("RELAY_PROJECT", PROJECT)
        .env_remove("RELAY_DATA_DIR")
        .env_remove("RELAY_SESSION")
        .env_remove("RELAY_AGENT")
        .env_remove("RELAY_INVITE")
        .env_remove("RELAY_BOOTSTRAP_TOKEN")
        .env_remove("RELAY_OWNER_IDENTITY");
    c.output().expect("trantor in a namespace")
}

/// HTTP status of an unsigned `GET path` from namespace `ns`.
fn curl_status(net: &Net, ns: &str, path: &str) -> String {
    let o = net
        .exec(
            ns,
            Path::new("curl"),
            &[
                "-s",
                "-o",
                "/dev/null",
                "-m",
                "5",
                "-w",
                "%{http_code}",
                &format!("{}{path}", net.url()),
            ],
        )
        .output()
        .expect("curl");
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

#[test]
fn a_seat_on_a_second_host_joins_by_invite_and_unsigned_callers_get_401() {
    let Some(net) = Net::new() else {
        return;
    };
    let tmp = tempfile::tempdir().expect("tmp");
    let root = tmp.path();

    // Host A: the hub on A's address, enforce mode.
    let hub_dir = root.join("hub");
    std::fs::create_dir_all(&hub_dir).expect("hub dir");
    let log = std::fs::File::create(root.join("hub.log")).expect("log");
    let mut hub_cmd = net.exec(&net.a, &common::bin(), &["hub"]);
    hub_cmd
        .env("RELAY_HOST", &net.addr_a)
        .env("RELAY_PORT", "4477")
        .env("RELAY_DATA_DIR", &hub_dir)
        .env("HOME", &hub_dir)
        .env("RELAY_AUTH", "enforce")
        .env("RELAY_BOOTSTRAP_TOKEN", BOOT)
        .stdout(log.try_clone().expect("log"))
        .stderr(log);
    let _hub = GroupChild::spawn(hub_cmd);
    wait_until("the hub in namespace A", LONG, || {
        curl_status(&net, &net.b, "/health") == "200"
    });

    // From B, unsigned: 401.
    assert_eq!(curl_status(&net, &net.b, "/peers"), "401");
    assert_eq!(
        curl_status(&net, &net.b, "/inbox?session=orch:p&since=0"),
        "401"
    );

    // The operator on A: bootstrap, then an invite for project p.
    let ops = root.join("ops");
    std::fs::create_dir_all(&ops).expect("ops");
    let o = trantor(
        &net,
        &net.a,
        &ops,
        &[
            "identity",
            "enroll",
            "--session",
            ORCH,
            "--bootstrap-token",
            BOOT,
        ],
    );
    assert!(o.status.success(), "bootstrap: {}", out(&o));
    let o = trantor(
        &net,
        &net.a,
        &ops,
        &[
            "invite",
            "--project",
            PROJECT,
            "--role",
            "write",
            "--as",
            ORCH,
        ],
    );
    assert!(o.status.success(), "invite: {}", out(&o));
    let token = String::from_utf8_lossy(&o.stdout).trim().to_string();
    assert_eq!(token.len(), 48, "{}", out(&o));

    // From B, no token: trust on first use is refused off loopback.
    let stranger = root.join("stranger");
    std::fs::create_dir_all(&stranger).expect("stranger");
    let o = trantor(
        &net,
        &net.b,
        &stranger,
        &["identity", "enroll", "--session", "x:p", "--kind", "agent"],
    );
    assert_eq!(o.status.code(), Some(1), "{}", out(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("403"),
        "{}",
        out(&o)
    );

    // Host B: a runner seat with only RELAY_URL and the invite.
    let seat = root.join("seat");
    common::init_git_repo(&seat.join("repo"));
    let bin = seat.join("bin");
    std::fs::create_dir_all(&bin).expect("bin");
    std::os::unix::fs::symlink(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests-compat/fake-agent.sh"),
        bin.join("claude"),
    )
    .expect("fake agent");
    std::fs::create_dir_all(seat.join("home")).expect("home");
    let runner_log = seat.join("runner.log");
    let log = std::fs::File::create(&runner_log).expect("log");
    let repo = seat.join("repo");
    let mut runner = net.exec(
        &net.b,
        &common::bin(),
        &["runner", "claude", &repo.to_string_lossy()],
    );
    runner
        .env(
            "PATH",
            format!(
                "{}:{}",
                bin.display(),
                std::env::var("PATH").unwrap_or_default()
            ),
        )
        .env("HOME", seat.join("home"))
        .env("AGENT_BUS_DIR", seat.join("bus"))
        .env("RELAY_URL", net.url())
        .env("RELAY_INVITE", &token)
        .env("RELAY_PROJECT", PROJECT)
        .env("RELAY_HOST_ID", "orch")
        .env("FAKE_AGENT_LOG", seat.join("fake.jsonl"))
        .env("TRANTOR_POLL_HOLD_S", "3")
        .env("TRANTOR_NO_DESKTOP_NOTIFY", "1")
        .env("TRANTOR_LOG", "info")
        .env_remove("RELAY_DATA_DIR")
        .env_remove("CREW_AGENT")
        .env_remove("CREW_PERSONA")
        .env_remove("RUNNER_SESSION")
        .env_remove("RELAY_OWNER_IDENTITY")
        .env_remove("RELAY_BOOTSTRAP_TOKEN")
        .stdout(log.try_clone().expect("log"))
        .stderr(log);
    let _runner = GroupChild::spawn(runner);
    let seat_log = || std::fs::read_to_string(&runner_log).unwrap_or_default();
    wait_until("the seat in B to wait on the bus", LONG, || {
        seat_log().contains("waiting on the bus as")
    });

    // The operator orders work; the seat on B answers with its receipt.
    let o = trantor(
        &net,
        &net.a,
        &ops,
        &[
            "send",
            "--session",
            ORCH,
            "claude:p",
            "Please implement NETNS-42",
        ],
    );
    assert!(o.status.success(), "send: {}", out(&o));
    wait_until("the receipt from the seat on B", LONG, || {
        let o = trantor(
            &net,
            &net.a,
            &ops,
            &["inbox", "--session", ORCH, "--since", "0", "--json"],
        );
        let s = String::from_utf8_lossy(&o.stdout);
        s.contains("claude:p") && s.contains("done on claude:p")
    });
    // The seat's identity is the invite's: write on p, enrolled by invite.
    let o = trantor(
        &net,
        &net.a,
        &ops,
        &["identity", "list", "--as", ORCH, "--json"],
    );
    assert!(o.status.success(), "{}", out(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    let seat_id = v["identities"]
        .as_array()
        .and_then(|a| a.iter().find(|i| i["name"] == "claude:p").cloned())
        .unwrap_or_default();
    assert_eq!(seat_id["enrolledBy"], "invite", "{v}");
    assert_eq!(seat_id["scopes"][0]["project"], PROJECT, "{v}");
    assert_eq!(seat_id["scopes"][0]["role"], "write", "{v}");
}

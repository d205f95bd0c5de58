//! A connection flood against a hub that cannot raise its file limit (docs/architecture.md):
//! `trantor hub` runs under `prlimit --nofile=1024:1024`, 1,100 connections open and send
//! nothing, and `/health` and a real client's send and read still answer, because at its
//! connection cap the hub closes the oldest connections that have sent nothing.

mod common;

use common::{bin, free_port, hub_request, hub_send, require_tool, wait_until};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Ends the hub when the test does, pass or fail.
struct Kill(Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Raise this process's soft open-file limit to its hard one; returns the soft limit.
fn raise_own_limit() -> u64 {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return 0;
    };
    if hard > soft && setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() {
        return hard;
    }
    soft
}

#[test]
fn idle_connections_are_shed_at_the_cap_under_a_hard_file_limit_of_1024() {
    if !require_tool("prlimit") {
        return;
    }
    if raise_own_limit() < 1_300 {
        common::skip_or_fail("needs an open-file limit of at least 1,300 for the test client");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let port = free_port();
    let log = std::fs::File::create(dir.path().join("hub.log")).expect("log");
    let child = Command::new("prlimit")
        .arg("--nofile=1024:1024")
        .arg("--")
        .arg(bin())
        .arg("hub")
        .env("RELAY_PORT", port.to_string())
        .env("RELAY_HOST", "127.0.0.1")
        .env("RELAY_DATA_DIR", dir.path())
        .env("HOME", dir.path())
        // Longer than the test's deadline: the idle connections must be shed, not timed out.
        .env("TRANTOR_HEADER_TIMEOUT_MS", "120000")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("spawn hub under prlimit");
    let _hub = Kill(child);
    wait_until("the hub answers", Duration::from_secs(30), || {
        hub_request(port, "GET", "/health", None).is_ok_and(|(s, _)| s == 200)
    });

    // 1,100 connections that never send a byte: more than the hub's cap (the file limit less
    // its reserve) and more than the limit itself.
    let mut idle = Vec::with_capacity(1_100);
    for i in 0..1_100 {
        match TcpStream::connect(("127.0.0.1", port)) {
            Ok(s) => idle.push(s),
            Err(e) => panic!("connection {i}: {e}"),
        }
    }
    // The newest arrivals are accepted by shedding the oldest idle ones; a request made now is
    // answered. The deadline is generous (a loaded machine), not the one-second target; the
    // elapsed time is printed for the report.
    let t = Instant::now();
    let mut answered = None;
    while t.elapsed() < Duration::from_secs(20) {
        if let Ok((200, v)) = hub_request(port, "GET", "/health", None) {
            answered = Some(v);
            break;
        }
    }
    let took = t.elapsed();
    let health = answered.unwrap_or_else(|| panic!("/health unanswered for {took:?}"));
    assert_eq!(health["ok"], true, "{health}");
    eprintln!("/health answered {took:?} after 1,100 idle connections");
    // A real client: a send and the read that sees it.
    let id = hub_send(port, "a:p", "b:p", "p", "through the flood");
    assert!(id > 0);
    let (s, inbox) = hub_request(port, "GET", "/inbox?session=b:p&peek=1", None).expect("inbox");
    assert_eq!(s, 200, "{inbox}");
    let ids: Vec<i64> = inbox["messages"]
        .as_array()
        .map(|a| a.iter().filter_map(|m| m["id"].as_i64()).collect())
        .unwrap_or_default();
    assert!(ids.contains(&id), "{inbox}");
    drop(idle);
}

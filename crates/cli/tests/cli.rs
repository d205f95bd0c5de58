//! The bus and board verbs against a real hub: text output, `--json`, and exit codes.

mod common;

use common::{Hub, bin, free_port};
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output};

struct Cli<'a> {
    url: String,
    home: &'a Path,
}

impl Cli<'_> {
    fn run(&self, session: &str, args: &[&str]) -> Output {
        Command::new(bin())
            .args(args)
            .env("RELAY_URL", &self.url)
            .env("RELAY_SESSION", session)
            .env_remove("RELAY_PROJECT")
            .env_remove("RELAY_AGENT")
            .env("HOME", self.home)
            .env("TRANTOR_LOG", "warn")
            .output()
            .expect("run trantor")
    }

    /// Run, expect exit 0, return stdout.
    fn ok(&self, session: &str, args: &[&str]) -> String {
        let o = self.run(session, args);
        assert!(
            o.status.success(),
            "trantor {args:?} failed ({:?}): {}",
            o.status.code(),
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).to_string()
    }

    fn json(&self, session: &str, args: &[&str]) -> Value {
        let mut all = args.to_vec();
        all.push("--json");
        let out = self.ok(session, &all);
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?} --json: {e}: {out}"))
    }
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).to_string()
}

#[test]
fn bus_and_board_verbs() {
    let hub = Hub::start();
    let home = tempfile::tempdir().expect("tmp");
    let cli = Cli {
        url: hub.url(),
        home: home.path(),
    };
    let orch = "orch:shop";
    let seat = "claude:shop";

    // send / inbox
    let sent = cli.ok(orch, &["send", seat, "please", "take", "#1"]);
    assert!(
        sent.starts_with("sent #") && sent.contains("from orch:shop to claude:shop"),
        "{sent}"
    );
    let j = cli.json(
        orch,
        &[
            "send",
            seat,
            "context only",
            "--no-wake",
            "--kind",
            "status",
        ],
    );
    assert_eq!(j["ok"], true);
    let second = j["id"].as_i64().expect("id");
    let inbox = cli.ok(seat, &["inbox"]);
    assert!(
        inbox.lines().next().unwrap_or("").starts_with("ID"),
        "{inbox}"
    );
    assert!(
        inbox.contains("please take #1") && inbox.contains("status,no-wake"),
        "{inbox}"
    );
    let j = cli.json(seat, &["inbox", "--since", &(second - 1).to_string()]);
    let msgs = j["messages"].as_array().expect("messages");
    assert_eq!(msgs.len(), 1);
    assert_eq!(msgs[0]["wake"], false);
    assert_eq!(msgs[0]["kind"], "status");
    let unread = cli.json(seat, &["inbox", "--unread"]);
    assert_eq!(unread["messages"].as_array().map(Vec::len), Some(2));
    let unread = cli.json(seat, &["inbox", "--unread"]);
    assert_eq!(
        unread["messages"].as_array().map(Vec::len),
        Some(0),
        "--unread marks read"
    );
    cli.ok(seat, &["send", orch, "on it", "--re", "1"]);
    assert!(cli.ok(orch, &["inbox"]).contains("re #1"));
    // --wait returns what arrives after the call starts.
    let waiter = {
        let url = cli.url.clone();
        let home = home.path().to_path_buf();
        std::thread::spawn(move || {
            Command::new(bin())
                .args(["inbox", "--wait", "60", "--json"])
                .env("RELAY_URL", url)
                .env("RELAY_SESSION", "claude:shop")
                .env("HOME", home)
                .output()
                .expect("wait")
        })
    };
    std::thread::sleep(std::time::Duration::from_millis(500));
    cli.ok(orch, &["send", seat, "wake up"]);
    let out = waiter.join().expect("join");
    let j: Value = serde_json::from_slice(&out.stdout).expect("wait json");
    assert!(j["messages"].to_string().contains("wake up"), "{j}");

    // peers
    let peers = cli.ok(orch, &["peers"]);
    assert!(
        peers.starts_with("SESSION")
            && peers.contains("orch:shop (you)")
            && peers.contains("claude:shop"),
        "{peers}"
    );
    let j = cli.json(orch, &["peers", "--online"]);
    assert!(
        j["peers"].as_array().map(|p| p.len() >= 2).unwrap_or(false),
        "{j}"
    );

    // card add / board / move / note / check
    let added = cli.json(
        orch,
        &[
            "card",
            "add",
            "Build",
            "the",
            "cart",
            "--assignee",
            seat,
            "--check",
            "adds items",
            "--check",
            "totals",
            "--difficulty",
            "medium",
            "--note",
            "see the spec",
        ],
    );
    let id = added["task"]["id"].as_i64().expect("card id");
    assert_eq!(added["task"]["title"], "Build the cart");
    assert_eq!(added["task"]["assignee"], seat);
    let ids = id.to_string();
    let board = cli.ok(orch, &["board"]);
    assert!(board.starts_with("shop board: 1 todo"), "{board}");
    assert!(
        board.contains("ID  STATUS")
            && board.contains(&format!("#{id}  todo"))
            && board.contains("0/2"),
        "{board}"
    );
    let j = cli.json(orch, &["board"]);
    assert_eq!(j["tasks"].as_array().map(Vec::len), Some(1));
    assert_eq!(
        cli.ok(seat, &["card", "move", &ids, "doing"]).trim(),
        format!("card #{id} -> doing")
    );
    assert!(
        cli.ok(seat, &["card", "check", &ids, "1"])
            .contains("[x] totals — 1/2 done")
    );
    assert!(
        cli.ok(seat, &["card", "check", &ids, "1", "--undo"])
            .contains("0/2 done")
    );
    assert!(
        cli.ok(seat, &["card", "note", &ids, "halfway", "there"])
            .contains(&format!("note added to card #{id}"))
    );

    // The drill gate: refused with the hub's reason and exit 1.
    let o = cli.run(seat, &["card", "move", &ids, "done", "--note", "works"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("refused (409)"), "{}", stderr(&o));
    cli.ok(
        seat,
        &[
            "card",
            "move",
            &ids,
            "testing",
            "--note",
            "tests: 4 passed",
            "--drill",
            "add two items, see the total",
        ],
    );
    let j = cli.json(seat, &["card", "move", &ids, "done", "--note", "verified"]);
    assert_eq!(j["task"]["status"], "done");
    let detail = cli.ok(orch, &["board", "--card", &ids]);
    let head = format!("card #{id} [done] Build the cart");
    for want in [
        head.as_str(),
        "drill: add two items",
        "halfway there",
        "testing -> done by claude:shop",
        "messages citing",
    ] {
        assert!(detail.contains(want), "missing {want:?} in:\n{detail}");
    }
    let j = cli.json(orch, &["board", "--card", &ids]);
    assert_eq!(j["task"]["status"], "done");

    // lessons
    assert!(cli.ok(orch, &["lessons"]).contains("no lessons"));
    assert!(
        cli.ok(orch, &["lessons", "--add", "always run the tests"])
            .contains("lesson recorded (global)")
    );
    assert!(
        cli.ok(orch, &["lessons", "--add", "use -m", "--scope", "kimi"])
            .contains("(kimi)")
    );
    let l = cli.ok(orch, &["lessons"]);
    assert!(
        l.contains("always run the tests") && !l.contains("use -m"),
        "{l}"
    );
    let j = cli.json(orch, &["lessons", "--agent", "kimi"]);
    assert_eq!(j["lessons"].as_array().map(Vec::len), Some(2));
}

#[test]
fn exit_codes_mean_something() {
    let hub = Hub::start();
    let home = tempfile::tempdir().expect("tmp");
    let cli = Cli {
        url: hub.url(),
        home: home.path(),
    };
    // 2: usage errors, from clap and from our own checks.
    assert_eq!(cli.run("a:p", &["send"]).status.code(), Some(2));
    assert_eq!(
        cli.run("a:p", &["card", "move", "x", "doing"])
            .status
            .code(),
        Some(2)
    );
    let o = cli.run("a:p", &["card", "move", "1", "sideways"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("unknown status 'sideways'"),
        "{}",
        stderr(&o)
    );
    // 1: the hub refused.
    let o = cli.run("a:p", &["card", "move", "424242", "doing"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("no card #424242"), "{}", stderr(&o));
    let o = cli.run(
        "a:p",
        &[
            "send",
            "b:p",
            "key sk-ant-api03-AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
        ],
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("secret"), "{}", stderr(&o));
    // 3: no hub there.
    let dead = Cli {
        url: format!("http://127.0.0.1:{}", free_port()),
        home: home.path(),
    };
    for args in [
        &["peers"][..],
        &["board"],
        &["send", "b:p", "hi"],
        &["inbox"],
        &["lessons"],
    ] {
        let o = dead.run("a:p", args);
        assert_eq!(o.status.code(), Some(3), "{args:?}: {}", stderr(&o));
        assert!(
            stderr(&o).contains(&dead.url) && stderr(&o).contains("trantor hub"),
            "{}",
            stderr(&o)
        );
    }
}

#[test]
fn help_explains_with_examples_and_exit_codes() {
    for verb in ["send", "inbox", "peers", "board", "lessons"] {
        let o = Command::new(bin())
            .args([verb, "--help"])
            .output()
            .expect("help");
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(o.status.success(), "{verb} --help");
        assert!(
            text.contains("Examples:") && text.contains("Exit status: 0 ok"),
            "{verb} --help:\n{text}"
        );
        assert!(text.contains("--json"), "{verb} --help lacks --json");
    }
    for sub in ["add", "move", "note", "check"] {
        let o = Command::new(bin())
            .args(["card", sub, "--help"])
            .output()
            .expect("help");
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(
            text.contains("Exit status") && text.contains("trantor card"),
            "card {sub}:\n{text}"
        );
    }
}

#[test]
fn session_and_project_resolve_like_the_mcp() {
    // No RELAY_SESSION: <RELAY_AGENT>:<git root name>; a message sent that way arrives there.
    let hub = Hub::start();
    let tmp = tempfile::tempdir().expect("tmp");
    let repo = tmp.path().join("widgets");
    std::fs::create_dir_all(repo.join(".git")).expect("git dir");
    std::fs::create_dir_all(repo.join("src/deep")).expect("deep");
    let o = Command::new(bin())
        .args(["send", "all", "hello", "--json"])
        .current_dir(repo.join("src/deep"))
        .env("RELAY_URL", hub.url())
        .env_remove("RELAY_SESSION")
        .env_remove("RELAY_PROJECT")
        .env("RELAY_AGENT", "kimi")
        .env("HOME", tmp.path())
        .output()
        .expect("send");
    assert!(o.status.success(), "{}", stderr(&o));
    let o = Command::new(bin())
        .args(["peers", "--json"])
        .env("RELAY_URL", hub.url())
        .env("RELAY_SESSION", "x:y")
        .env("HOME", tmp.path())
        .output()
        .expect("peers");
    let j: Value = serde_json::from_slice(&o.stdout).expect("json");
    let sessions: Vec<&str> = j["peers"]
        .as_array()
        .map(|p| p.iter().filter_map(|x| x["session"].as_str()).collect())
        .unwrap_or_default();
    assert!(sessions.contains(&"kimi:widgets"), "{sessions:?}");
}

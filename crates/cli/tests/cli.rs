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

    // send / inbox; a recipient the hub has not seen yet is named, the message kept for it
    let o = cli.run(orch, &["send", seat, "please", "take", "#1"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let sent = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(
        sent.starts_with("sent #") && sent.contains("from orch:shop to claude:shop"),
        "{sent}"
    );
    assert!(
        stderr(&o).contains("note: claude:shop is not a session this hub knows yet"),
        "{}",
        stderr(&o)
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
    let o = cli.run(seat, &["send", orch, "on it", "--re", "1"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        !stderr(&o).contains("note:"),
        "orch:shop is known: {}",
        stderr(&o)
    );
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
    common::wait_polls_held(hub.port, 1);
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
    assert!(
        stderr(&o).contains(&format!("here: trantor card move {id} done --drill \"")),
        "the CLI's way to give a drill: {}",
        stderr(&o)
    );
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

fn connect_cmd(home: &Path, path_dir: &Path, args: &[&str]) -> Output {
    Command::new(bin())
        .arg("connect")
        .args(args)
        .env("HOME", home)
        .env_remove("XDG_CONFIG_HOME")
        .env("PATH", path_dir)
        .output()
        .expect("run connect")
}

fn backups(dir: &Path) -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().to_string())
                .filter(|n| n.contains(".trantor-backup-"))
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

#[test]
fn connect_writes_each_format_keeps_others_and_is_idempotent() {
    let home = tempfile::tempdir().expect("tmp");
    let h = home.path();
    let empty_path = h.join("no-bin");
    std::fs::create_dir_all(&empty_path).expect("bin dir");
    std::fs::create_dir_all(h.join(".codex")).expect("codex");
    std::fs::create_dir_all(h.join(".config/opencode")).expect("opencode");
    std::fs::create_dir_all(h.join(".kimi")).expect("kimi");
    let claude = h.join(".claude.json");
    let codex = h.join(".codex/config.toml");
    let opencode = h.join(".config/opencode/opencode.json");
    let kimi = h.join(".kimi/mcp.json");
    std::fs::write(&claude, r#"{"numStartups": 7, "mcpServers": {"github": {"command": "gh-mcp", "args": []}}, "theme": "dark"}"#).expect("w");
    std::fs::write(&codex, "# my codex settings\nmodel = \"o3\"\n\n[mcp_servers.docs]\ncommand = \"docs-mcp\" # keep me\n").expect("w");
    // Someone else's entry called trantor: it must survive without --force.
    std::fs::write(&opencode, r#"{"$schema": "https://opencode.ai/config.json", "mcp": {"trantor": {"type": "local", "command": ["node", "/opt/old/mcp.mjs"]}}}"#).expect("w");
    let before_opencode = std::fs::read_to_string(&opencode).expect("r");

    // Dry run: nothing changes.
    let o = connect_cmd(h, &empty_path, &["--dry-run"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("would-write"));
    assert!(!kimi.exists() && backups(h).is_empty());

    let o = connect_cmd(h, &empty_path, &["--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let report: Value = serde_json::from_slice(&o.stdout).expect("json");
    let state = |cli: &str| {
        report["clis"]
            .as_array()
            .and_then(|a| a.iter().find(|c| c["cli"] == cli))
            .map(|c| c["state"].as_str().unwrap_or("").to_string())
            .unwrap_or_default()
    };
    assert_eq!(state("claude"), "written");
    assert_eq!(state("codex"), "written");
    assert_eq!(state("kimi"), "written");
    assert_eq!(state("opencode"), "kept");
    let me = bin().to_string_lossy().to_string();

    let c: Value =
        serde_json::from_str(&std::fs::read_to_string(&claude).expect("r")).expect("claude json");
    assert_eq!(c["numStartups"], 7);
    assert_eq!(c["theme"], "dark");
    assert_eq!(c["mcpServers"]["github"]["command"], "gh-mcp");
    assert_eq!(c["mcpServers"]["trantor"]["command"], me.as_str());
    assert_eq!(
        c["mcpServers"]["trantor"]["args"],
        serde_json::json!(["mcp"])
    );
    let text = std::fs::read_to_string(&claude).expect("r");
    assert!(
        text.find("numStartups") < text.find("theme"),
        "key order kept:\n{text}"
    );
    let t = std::fs::read_to_string(&codex).expect("r");
    assert!(t.starts_with("# my codex settings\nmodel = \"o3\""), "{t}");
    assert!(t.contains("command = \"docs-mcp\" # keep me"), "{t}");
    assert!(
        t.contains("[mcp_servers.trantor]")
            && t.contains(&format!("command = \"{me}\""))
            && t.contains("args = [\"mcp\"]"),
        "{t}"
    );
    let k: Value =
        serde_json::from_str(&std::fs::read_to_string(&kimi).expect("r")).expect("kimi json");
    assert_eq!(
        k["mcpServers"]["trantor"]["args"],
        serde_json::json!(["mcp"])
    );
    assert_eq!(
        std::fs::read_to_string(&opencode).expect("r"),
        before_opencode
    );

    // Backups of the files that existed and changed, none for the new file.
    assert_eq!(backups(h).len(), 1, "{:?}", backups(h));
    assert_eq!(backups(&h.join(".codex")).len(), 1);
    assert!(backups(&h.join(".kimi")).is_empty());
    assert!(backups(&h.join(".config/opencode")).is_empty());
    let backup = h.join(&backups(h)[0]);
    assert!(
        std::fs::read_to_string(backup)
            .expect("r")
            .contains("\"numStartups\": 7")
    );

    // Second run: a no-op, byte for byte, and no new backups.
    let snapshot: Vec<String> = [&claude, &codex, &kimi, &opencode]
        .iter()
        .map(|p| std::fs::read_to_string(p).expect("r"))
        .collect();
    let o = connect_cmd(h, &empty_path, &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(
        out.contains("unchanged") && !out.contains("written"),
        "{out}"
    );
    let again: Vec<String> = [&claude, &codex, &kimi, &opencode]
        .iter()
        .map(|p| std::fs::read_to_string(p).expect("r"))
        .collect();
    assert_eq!(snapshot, again);
    assert_eq!(backups(h).len(), 1);
    assert_eq!(backups(&h.join(".codex")).len(), 1);

    // --force replaces the foreign entry (with a backup) and keeps the rest of that file.
    let o = connect_cmd(h, &empty_path, &["--only", "opencode", "--force"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let oc: Value =
        serde_json::from_str(&std::fs::read_to_string(&opencode).expect("r")).expect("json");
    assert_eq!(oc["$schema"], "https://opencode.ai/config.json");
    assert_eq!(
        oc["mcp"]["trantor"]["command"],
        serde_json::json!([me, "mcp"])
    );
    assert_eq!(oc["mcp"]["trantor"]["enabled"], true);
    assert_eq!(backups(&h.join(".config/opencode")).len(), 1);

    // A CLI name we do not know is a usage error.
    assert_eq!(
        connect_cmd(h, &empty_path, &["--only", "vim"])
            .status
            .code(),
        Some(2)
    );
    // A config that is not JSON is reported and left alone.
    std::fs::write(&kimi, "{ not json").expect("w");
    let o = connect_cmd(h, &empty_path, &["--only", "kimi"]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(std::fs::read_to_string(&kimi).expect("r"), "{ not json");
}

#[test]
fn doctor_reports_hub_and_wiring_with_fixes() {
    use std::os::unix::fs::PermissionsExt;
    let hub = Hub::start();
    let home = tempfile::tempdir().expect("tmp");
    let h = home.path();
    let bindir = h.join("bin");
    std::fs::create_dir_all(&bindir).expect("bin");
    let fake = bindir.join("claude");
    // Its `--version` banner is what `claude --version` prints; the version comes from a file so
    // the drill can age it.
    let version_file = h.join("claude-version");
    std::fs::write(&version_file, "2.1.332").expect("w");
    std::fs::write(
        &fake,
        format!(
            "#!/bin/sh\nread v < '{}'\necho \"$v (Claude Code)\"\n",
            version_file.display()
        ),
    )
    .expect("w");
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let doctor = |url: &str| {
        Command::new(bin())
            .args(["doctor", "--json"])
            .env("HOME", h)
            .env_remove("XDG_CONFIG_HOME")
            .env("PATH", &bindir)
            .env("RELAY_URL", url)
            .env("RELAY_SESSION", "me:proj")
            .output()
            .expect("doctor")
    };
    let o = doctor(&hub.url());
    assert_eq!(
        o.status.code(),
        Some(1),
        "claude is not wired yet: {}",
        stderr(&o)
    );
    let j: Value = serde_json::from_slice(&o.stdout).expect("json");
    let check = |j: &Value, name: &str| {
        j["checks"]
            .as_array()
            .and_then(|a| a.iter().find(|c| c["check"] == name).cloned())
            .unwrap_or(Value::Null)
    };
    assert_eq!(check(&j, "hub")["ok"], true);
    assert!(
        check(&j, "hub")["detail"]
            .as_str()
            .unwrap_or("")
            .contains("version")
    );
    assert_eq!(check(&j, "store")["ok"], true);
    assert_eq!(check(&j, "Claude Code")["ok"], false);
    assert_eq!(
        check(&j, "Claude Code")["fix"],
        "trantor connect --only claude"
    );
    assert_eq!(
        check(&j, "Codex")["ok"],
        true,
        "not installed is not a problem"
    );
    // Claude Code here and its hooks not installed: the fix is to wire them.
    assert_eq!(check(&j, "hooks")["fix"], "trantor connect --only claude");
    // No Claude Code at all: no session to hook, nothing to fix.
    let empty = h.join("empty-bin");
    std::fs::create_dir_all(&empty).expect("empty bin");
    let o = Command::new(bin())
        .args(["doctor", "--json"])
        .env("HOME", h)
        .env_remove("XDG_CONFIG_HOME")
        .env("PATH", &empty)
        .env("RELAY_URL", hub.url())
        .env("RELAY_SESSION", "me:proj")
        .output()
        .expect("doctor without claude");
    let j0: Value = serde_json::from_slice(&o.stdout).expect("json");
    let hooks = check(&j0, "hooks");
    assert_eq!(hooks["fix"], Value::Null, "{hooks}");
    assert!(
        hooks["detail"]
            .as_str()
            .unwrap_or("")
            .contains("Claude Code is not installed"),
        "{hooks}"
    );

    let o = connect_cmd(h, &bindir, &["--only", "claude"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = doctor(&hub.url());
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    let j: Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(check(&j, "Claude Code")["ok"], true);
    let v = check(&j, "Claude Code version");
    assert_eq!(v["ok"], true, "{v}");
    assert!(
        v["detail"]
            .as_str()
            .unwrap_or("")
            .contains("2.1.332: inside the verified range"),
        "{v}"
    );
    // A CLI older than the driver table's verified range is a problem with a fix.
    std::fs::write(&version_file, "1.0.44").expect("w");
    let o = doctor(&hub.url());
    assert_eq!(o.status.code(), Some(1));
    let j: Value = serde_json::from_slice(&o.stdout).expect("json");
    let v = check(&j, "Claude Code version");
    assert_eq!(v["ok"], false, "{v}");
    assert!(
        v["detail"].as_str().unwrap_or("").contains("older than")
            && v["fix"].as_str().unwrap_or("").contains("claude 2.1.332"),
        "{v}"
    );

    let o = doctor(&format!("http://127.0.0.1:{}", free_port()));
    assert_eq!(o.status.code(), Some(3));
    let j: Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(check(&j, "hub")["ok"], false);
    assert!(
        check(&j, "hub")["fix"]
            .as_str()
            .unwrap_or("")
            .contains("start a hub")
    );
}

/// Titles, statuses, names and messages carrying terminal escapes, NUL and bidi overrides are
/// printed without them by every human renderer (`board`, `board --card`, `peers`, `inbox`).
#[test]
fn human_output_strips_terminal_escapes() {
    let hub = Hub::start();
    let home = tempfile::tempdir().expect("tmp");
    let cli = Cli {
        url: hub.url(),
        home: home.path(),
    };
    let orch = "op:esc";
    let evil = "\u{1b}[2J\u{1b}]0;pwned\u{7}\u{202E}evil\u{9b}31m";
    let port = hub.port;
    let (c, t) = common::hub_request(
        port,
        "POST",
        "/task",
        Some(&serde_json::json!({"title": format!("card {evil}"), "by": orch, "note": evil})),
    )
    .expect("task");
    assert_eq!(c, 200, "{t}");
    let id = t["task"]["id"].as_i64().expect("id").to_string();
    let (c, _) = common::hub_request(
        port,
        "POST",
        "/register",
        Some(&serde_json::json!({"session": format!("bad{evil}:esc"), "status": evil})),
    )
    .expect("register");
    assert_eq!(c, 200);
    common::hub_send(port, &format!("x{evil}:esc"), orch, "esc", evil);
    for args in [
        &["board"][..],
        &["board", "--card", &id],
        &["peers"],
        &["inbox"],
    ] {
        let out = cli.ok(orch, args);
        assert!(
            !out.contains(['\u{1b}', '\u{7}', '\u{202E}', '\u{9b}', '\0']),
            "trantor {args:?} printed a control character: {out:?}"
        );
    }
    // The data itself is kept: --json shows what was stored.
    let j = cli.json(orch, &["board"]);
    assert!(j.to_string().contains("pwned"), "{j}");
}

/// `trantor trace`: the whole life of a message as the runner marks it, times relative to
/// `stored`, `--json`; clear errors for a bad id, an unknown id and a hub that is down.
#[test]
fn trace_prints_the_life_of_a_message() {
    let hub = Hub::start();
    let home = tempfile::tempdir().expect("tmp");
    let cli = Cli {
        url: hub.url(),
        home: home.path(),
    };
    let sent = cli.json("orch:shop", &["send", "claude:shop", "take", "#1"]);
    let id = sent["id"].as_i64().expect("id");
    let out = cli.ok("orch:shop", &["trace", &id.to_string()]);
    assert!(
        out.contains(&format!("message #{id} → claude:shop")),
        "{out}"
    );
    assert!(out.contains("+0.000s  stored"), "{out}");
    assert!(out.contains("now: stored (waiting on the hub"), "{out}");

    // The runner's marks, as the wire carries them.
    let mark = |body: Value| {
        let (st, reply) =
            common::hub_request(hub.port, "POST", "/delivery", Some(&body)).expect("mark");
        assert_eq!(st, 200, "{reply}");
    };
    let (st, f) = common::hub_request(
        hub.port,
        "POST",
        "/delivery/fence",
        Some(&serde_json::json!({"session": "claude:shop", "instance": "run-7f"})),
    )
    .expect("fence");
    assert_eq!(st, 200, "{f}");
    let base = serde_json::json!({"id": id, "session": "claude:shop", "instance": "run-7f"});
    let with = |extra: Value| {
        let mut b = base.clone();
        if let (Some(m), Value::Object(e)) = (b.as_object_mut(), extra) {
            m.extend(e);
        }
        b
    };
    mark(with(serde_json::json!({"state": "claimed"})));
    mark(with(
        serde_json::json!({"state": "started", "turn": 4, "pid": 4321}),
    ));
    mark(with(
        serde_json::json!({"state": "requeued", "turn": 4, "reason": "runner restarted mid-turn, CLI died"}),
    ));
    mark(with(
        serde_json::json!({"state": "started", "turn": 5, "pid": 4400}),
    ));
    mark(with(
        serde_json::json!({"state": "consumed", "turn": 5, "outcome": "delivered"}),
    ));

    let out = cli.ok("orch:shop", &["trace", &format!("#{id}")]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 8, "{out}");
    assert!(
        lines[2].contains("claimed") && lines[2].contains("instance run-7f"),
        "{out}"
    );
    assert!(
        lines[3].contains("started")
            && lines[3].contains("turn 4")
            && lines[3].contains("pid 4321"),
        "{out}"
    );
    assert!(
        lines[4].contains("requeued") && lines[4].contains("reason: runner restarted mid-turn"),
        "{out}"
    );
    assert!(
        lines[6].contains("consumed") && lines[6].contains("outcome delivered"),
        "{out}"
    );
    assert!(lines[7].starts_with("now: consumed (acted on)"), "{out}");
    for l in &lines[1..7] {
        assert!(l.trim_start().starts_with('+'), "relative times: {l}");
    }

    let j = cli.json("orch:shop", &["trace", &id.to_string()]);
    assert_eq!(j["id"], id);
    assert_eq!(j["to"], "claude:shop");
    let states: Vec<&str> = j["states"]
        .as_array()
        .expect("states")
        .iter()
        .filter_map(|s| s["state"].as_str())
        .collect();
    assert_eq!(
        states,
        [
            "stored", "claimed", "started", "requeued", "started", "consumed"
        ]
    );
    assert_eq!(j["states"][2]["pid"], 4321);
    assert!(j["states"][0]["instance"].is_null());

    // Errors: a bad id is usage (2), an unknown one the hub's refusal (1), no hub 3.
    let o = cli.run("orch:shop", &["trace", "forty-two"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("not a message id"), "{}", stderr(&o));
    let o = cli.run("orch:shop", &["trace", "999999"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("there is no message #999999"),
        "{}",
        stderr(&o)
    );
    let dead = Cli {
        url: format!("http://127.0.0.1:{}", free_port()),
        home: home.path(),
    };
    let o = dead.run("orch:shop", &["trace", &id.to_string()]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(&dead.url) && stderr(&o).contains("trantor hub"),
        "{}",
        stderr(&o)
    );
}

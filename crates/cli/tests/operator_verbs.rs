//! The person's daily operator verbs against a real hub: `trantor hub list|set|unset`,
//! `catchup`, `sweep`, `proposals` and `watch` (docs/protocol.md §15.1, §15.2, §15.6, §6).

mod common;

use common::{Hub, bin, hub_messages, hub_request, wait_until};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

fn trantor(home: &Path, url: Option<&str>, args: &[&str]) -> Output {
    let mut cmd = Command::new(bin());
    cmd.args(args)
        .env("HOME", home)
        .env_remove("RELAY_URL")
        .env_remove("AGENT_BUS_DIR")
        .env_remove("RELAY_PROJECT")
        .env_remove("RELAY_AGENT")
        .env_remove("RELAY_OWNER_IDENTITY")
        .env("RELAY_SESSION", "me:shop")
        .env("TRANTOR_LOG", "warn")
        .current_dir(home);
    if let Some(u) = url {
        cmd.env("RELAY_URL", u);
    }
    cmd.output().expect("run trantor")
}

fn ok(o: &Output) -> String {
    assert!(
        o.status.success(),
        "exit {:?}: {}{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).to_string()
}

fn post(hub: &Hub, path: &str, body: Value) -> Value {
    let (status, reply) = hub_request(hub.port, "POST", path, Some(&body)).expect("request");
    assert!(status < 300, "{path}: {status} {reply}");
    reply
}

#[test]
fn hub_pins_are_listed_set_and_unset_keeping_the_rest_of_the_config() {
    let home = tempfile::tempdir().expect("tmp");
    let h = home.path();
    std::fs::create_dir_all(h.join(".agent-bus")).expect("bus dir");
    std::fs::write(
        h.join(".agent-bus/config.json"),
        r#"{"ownerIdentity":"admin","url":"http://10.0.0.1:4477"}"#,
    )
    .expect("config");
    let listed = ok(&trantor(h, None, &["hub", "list"]));
    assert!(
        listed.contains("global default: http://10.0.0.1:4477"),
        "{listed}"
    );
    assert!(listed.contains("no per-project pins"), "{listed}");

    let set = ok(&trantor(
        h,
        None,
        &["hub", "set", "shop", "http://10.0.0.5:4477/"],
    ));
    assert!(set.contains("shop → http://10.0.0.5:4477"), "{set}");
    let cfg: Value = serde_json::from_str(
        &std::fs::read_to_string(h.join(".agent-bus/config.json")).expect("read"),
    )
    .expect("json");
    assert_eq!(cfg["hubs"]["shop"], "http://10.0.0.5:4477");
    assert_eq!(cfg["ownerIdentity"], "admin", "other keys are kept");

    // What the resolver then uses for that project: `--project shop` is resolved like the MCP.
    let listed = ok(&trantor(h, None, &["hub", "list"]));
    assert!(listed.contains("shop → http://10.0.0.5:4477"), "{listed}");

    let bad = trantor(h, None, &["hub", "set", "shop", "10.0.0.5:4477"]);
    assert!(!bad.status.success());
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("http:// or https://"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );

    assert!(ok(&trantor(h, None, &["hub", "unset", "shop"])).contains("shop unpinned"));
    assert!(ok(&trantor(h, None, &["hub", "unset", "shop"])).contains("had no per-project pin"));
    let cfg = std::fs::read_to_string(h.join(".agent-bus/config.json")).expect("read");
    assert!(!cfg.contains("hubs"), "{cfg}");

    // A config that is not JSON is refused, never overwritten.
    std::fs::write(h.join(".agent-bus/config.json"), "{oops").expect("write");
    let o = trantor(h, None, &["hub", "set", "shop", "http://h:1"]);
    assert!(!o.status.success());
    assert_eq!(
        std::fs::read_to_string(h.join(".agent-bus/config.json")).expect("read"),
        "{oops"
    );
}

#[test]
fn catchup_sweep_and_proposals_work_the_board_as_the_original_users_do() {
    let hub = Hub::start();
    let home = tempfile::tempdir().expect("tmp");
    let h = home.path();
    let url = hub.url();
    let u = Some(url.as_str());
    post(
        &hub,
        "/project",
        json!({"project": "shop", "brief": "a small shop", "by": "me:shop"}),
    );
    let doing = post(
        &hub,
        "/task",
        json!({"title": "build the cart", "project": "shop", "status": "doing", "assignee": "ghost:shop", "by": "me:shop"}),
    )["task"]["id"]
        .as_i64()
        .expect("id");
    post(
        &hub,
        "/task",
        json!({"title": "write the docs", "project": "shop", "by": "me:shop"}),
    );

    let out = ok(&trantor(h, u, &["catchup", "--project", "shop"]));
    assert!(out.contains("trantor catchup — shop"), "{out}");
    assert!(out.contains("Brief: a small shop"), "{out}");
    assert!(out.contains("Cards: 2 — 0 done · 1 doing"), "{out}");
    assert!(
        out.contains(&format!(
            "In progress:\n  #{doing} build the cart @ghost:shop"
        )),
        "{out}"
    );
    assert!(out.contains("Queued:"), "{out}");
    let j: Value = serde_json::from_str(&ok(&trantor(
        h,
        u,
        &["catchup", "--project", "shop", "--json"],
    )))
    .expect("json");
    assert_eq!(j["total"], 2);

    // sweep previews, changes nothing, then moves with --yes.
    let preview = ok(&trantor(
        h,
        u,
        &["sweep", "--project", "shop", "--older", "0"],
    ));
    assert!(
        preview.contains(&format!("#{doing} [doing] build the cart · ghost:shop")),
        "{preview}"
    );
    assert!(preview.contains("1 card(s) would move"), "{preview}");
    let card = |id: i64| {
        hub_request(hub.port, "GET", &format!("/card?id={id}"), None)
            .expect("card")
            .1
    };
    assert_eq!(
        card(doing)["task"]["status"],
        "doing",
        "a preview moves nothing"
    );
    let bad = trantor(h, u, &["sweep", "--older", "soon"]);
    assert_eq!(
        bad.status.code(),
        Some(2),
        "a bad duration is a usage error"
    );
    let swept = ok(&trantor(
        h,
        u,
        &["sweep", "--project", "shop", "--older", "0", "--yes"],
    ));
    assert!(swept.contains("swept 1 card(s)"), "{swept}");
    assert_eq!(card(doing)["task"]["status"], "stale");
    let again = ok(&trantor(
        h,
        u,
        &["sweep", "--project", "shop", "--older", "0"],
    ));
    assert!(again.contains("nothing stuck"), "{again}");

    // proposals: an agent files one, the person lists, must give a reason to deny, denies.
    assert!(ok(&trantor(h, u, &["proposals"])).contains("no pending proposals"));
    let pid = post(
        &hub,
        "/propose",
        json!({"session": "claude:shop", "scope": "push to staging", "condition": "tests green", "exclusions": "prod"}),
    )["proposal"]["id"]
        .as_i64()
        .expect("proposal id");
    let listed = ok(&trantor(h, u, &["proposals"]));
    assert!(
        listed.contains(&format!("#{pid} ⏳ PENDING · shop · from claude:shop")),
        "{listed}"
    );
    assert!(listed.contains("NOT covered: prod"), "{listed}");
    let no_reason = trantor(h, u, &["proposals", "deny", &pid.to_string()]);
    assert_eq!(no_reason.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&no_reason.stderr).contains("a denial needs a reason"));
    let denied = ok(&trantor(
        h,
        u,
        &[
            "proposals",
            "deny",
            &pid.to_string(),
            "--note",
            "not this week",
        ],
    ));
    assert!(denied.contains(&format!("#{pid} denied")), "{denied}");
    assert!(
        hub_messages(hub.port, "claude:shop")
            .iter()
            .any(|m| m["text"]
                .as_str()
                .is_some_and(|t| t.contains(&format!("#{pid}")) && t.contains("DENIED"))),
        "the proposer is told"
    );
    let gone = trantor(h, u, &["proposals", "approve", &pid.to_string()]);
    assert!(!gone.status.success());
    assert!(String::from_utf8_lossy(&gone.stderr).contains(&format!("no PENDING proposal #{pid}")));
    assert!(ok(&trantor(h, u, &["proposals", "--all"])).contains("DENIED"));
}

#[test]
fn watch_prints_messages_live_and_reads_back_what_it_missed_while_the_hub_was_down() {
    let mut hub = Hub::spawn();
    let home = tempfile::tempdir().expect("tmp");
    let url = hub.url();
    let mut child = Command::new(bin())
        .args(["watch", "claude:shop"])
        .env("HOME", home.path())
        .env("RELAY_URL", &url)
        .env("RELAY_SESSION", "me:shop")
        .env("TRANTOR_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn watch");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let streams = |port: u16| {
        hub_request(port, "GET", "/health", None)
            .is_ok_and(|(_, v)| v["streams"].as_u64() == Some(1))
    };
    let port = hub.port;
    wait_until("the watch's stream", Duration::from_secs(20), || {
        streams(port)
    });
    let mut printed: Vec<String> = Vec::new();
    let mut expect = |rx: &mpsc::Receiver<String>, needle: &str| {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while std::time::Instant::now() < deadline {
            if let Ok(l) = rx.recv_timeout(Duration::from_millis(200)) {
                let hit = l.contains(needle);
                printed.push(l);
                if hit {
                    return printed.clone();
                }
            }
        }
        panic!("watch never printed {needle:?}; printed {printed:#?}");
    };
    common::hub_send(port, "codex:shop", "claude:shop", "shop", "take card 4");
    expect(&rx, "codex:shop → claude:shop: take card 4");

    // The hub dies and comes back; what was sent before the watch reconnected still shows, once.
    let data = hub.data_dir.clone();
    hub.kill9();
    let hub2 = Hub::start_in(&data, port, &[]);
    common::hub_send(
        port,
        "codex:shop",
        "claude:shop",
        "shop",
        "sent while you were away",
    );
    expect(&rx, "sent while you were away");
    wait_until("the watch to reconnect", Duration::from_secs(30), || {
        streams(port)
    });
    common::hub_send(port, "codex:shop", "claude:shop", "shop", "and after");
    let all = expect(&rx, "and after");
    for text in ["take card 4", "sent while you were away", "and after"] {
        let n = all.iter().filter(|l| l.contains(text)).count();
        assert_eq!(n, 1, "{text:?} printed {n} times: {all:#?}");
    }
    let _ = child.kill();
    let _ = child.wait();
    drop(hub2);
}

#[test]
fn reconcile_closes_what_a_commit_names_and_stales_what_nobody_holds() {
    let hub = Hub::start();
    let home = tempfile::tempdir().expect("tmp");
    let h = home.path();
    let url = hub.url();
    let u = Some(url.as_str());
    let card = |title: &str, status: &str, assignee: &str, drill: &str| -> i64 {
        post(
            &hub,
            "/task",
            json!({"title": title, "project": "shop", "status": status, "assignee": assignee,
                   "by": "me:shop", "drill": drill}),
        )["task"]["id"]
            .as_i64()
            .expect("id")
    };
    let shipped = card(
        "build the cart",
        "doing",
        "ghost:shop",
        "add an item, see it in the cart",
    );
    let undrilled = card("price rounding", "testing", "ghost:shop", "");
    let abandoned = card("wishlist", "doing", "ghost:shop", "");
    post(
        &hub,
        "/register",
        json!({"session": "live:shop", "project": "shop"}),
    );
    let held = card("checkout", "doing", "live:shop", "");
    let queued = card("write the docs", "todo", "", "");
    common::git_in(h, &["init", "-q", "-b", "main"]);
    common::git_in(h, &["config", "user.email", "t@example.com"]);
    common::git_in(h, &["config", "user.name", "t"]);
    for (file, msg) in [
        ("cart.rs", format!("the cart (#{shipped})")),
        ("round.rs", format!("round prices\n\nFixes #{undrilled}.")),
        ("other.rs", format!("unrelated #{}0", abandoned)),
    ] {
        std::fs::write(h.join(file), "x").expect("write");
        common::git_in(h, &["add", file]);
        common::git_in(h, &["commit", "-q", "-m", &msg]);
    }
    let status = |id: i64| {
        hub_request(hub.port, "GET", &format!("/card?id={id}"), None)
            .expect("card")
            .1["task"]["status"]
            .as_str()
            .unwrap_or("")
            .to_string()
    };

    let preview = ok(&trantor(
        h,
        u,
        &["reconcile", "--project", "shop", "--older", "0"],
    ));
    assert!(
        preview.contains("trantor reconcile — \"shop\""),
        "{preview}"
    );
    assert!(
        preview.contains("✓ DONE — already shipped, will close (2):"),
        "{preview}"
    );
    assert!(
        preview.contains(&format!("#{shipped} [doing] build the cart"))
            && preview.contains(&format!(": commit names #{shipped}: the cart (#{shipped})")),
        "{preview}"
    );
    assert!(
        preview.contains("🗑  STALE — abandoned, will move to Stale (1):"),
        "{preview}"
    );
    assert!(
        preview.contains("ghost:shop is not live on the hub, and no commit names it"),
        "{preview}"
    );
    assert!(
        preview.contains("• ACTIVE — still relevant, leaving alone (2):"),
        "{preview}"
    );
    assert!(
        preview.contains("2 card(s) → done, 1 → stale. Re-run to apply:"),
        "{preview}"
    );
    for (id, was) in [
        (shipped, "doing"),
        (undrilled, "testing"),
        (abandoned, "doing"),
    ] {
        assert_eq!(status(id), was, "a preview moves nothing");
    }

    let applied = ok(&trantor(
        h,
        u,
        &["reconcile", "--project", "shop", "--older", "0", "--yes"],
    ));
    assert!(
        applied.contains("✓ reconciled: 1 closed as done, 1 parked at testing (no drill line), 1 moved to stale. 2 left active."),
        "{applied}"
    );
    assert_eq!(status(shipped), "done");
    assert_eq!(status(undrilled), "testing");
    assert_eq!(status(abandoned), "stale");
    assert_eq!(status(held), "doing");
    assert_eq!(status(queued), "todo");
    let (_, c) =
        hub_request(hub.port, "GET", &format!("/card?id={undrilled}"), None).expect("card");
    let note = c["task"]["log"]
        .as_array()
        .and_then(|l| l.last())
        .and_then(|e| e["text"].as_str())
        .unwrap_or_default()
        .to_string();
    assert!(
        note.starts_with("reconcile: judged shipped at ")
            && note.ends_with(
                "; no drill line on the card, so it waits at testing for the orchestrator's drill"
            ),
        "{note}"
    );
    // Run again, only the parked card is still judged shipped (it waits for its drill line);
    // a bad duration is a usage error.
    let again = ok(&trantor(
        h,
        u,
        &["reconcile", "--project", "shop", "--older", "0"],
    ));
    assert!(again.contains("1 card(s) → done, 0 → stale."), "{again}");
    let bad = trantor(h, u, &["reconcile", "--older", "soon"]);
    assert_eq!(bad.status.code(), Some(2));
}

//! Runner drills (issue 3): the real hub, the real `trantor runner`, and a fake agent CLI on
//! PATH (`tests-compat/fake-agent.sh` under the agent's name, steered between turns through its
//! control file), on temporary directories and free ports. Every wait is a condition with a
//! generous deadline; nothing asserts on timing.

mod common;

use common::seat::{Driver, Seat, fake_agent_available};
use common::{TestHub, hub_messages, hub_request, hub_send, wait_until};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::time::Duration;

const PROJECT: &str = "p";
const ORCH: &str = "orch:p";
const LONG: Duration = Duration::from_secs(90);

/// The hub for a drill; `None` after a SKIP on a developer machine (a failure under CI) when
/// python3 (which runs the fake agent) or, for the original hub, node and its package are missing.
fn drill_hub(original: bool) -> Option<TestHub> {
    if !fake_agent_available() {
        return None;
    }
    TestHub::start(original)
}

/// A seat of project `p` running `trantor runner <agent>` with the fake agent under that name.
fn new_seat(agent: &str, persona: &str) -> Seat {
    assert!(common::on_path("python3"), "drill_hub checks python3 first");
    Seat::new(Driver::Named(agent.into()), persona, PROJECT)
        .env("RELAY_HOST_ID", "orch")
        .env("TRANTOR_POLL_HOLD_S", "3")
}

/// Control-file line that records the CLI's pid (it leads its own process group).
fn record_pid(seat: &Seat) -> String {
    seat.record_pid()
}

/// Messages `to` received from `from` whose text contains `marker`.
fn received(port: u16, to: &str, from: &str, marker: &str) -> Vec<Value> {
    hub_messages(port, to)
        .into_iter()
        .filter(|m| m["from"] == from && m["text"].as_str().is_some_and(|t| t.contains(marker)))
        .collect()
}

fn receipts(port: u16, seat: &Seat, to: &str) -> Vec<Value> {
    received(port, to, &seat.session(), "done on")
}

fn send(port: u16, body: Value) -> i64 {
    let (status, reply) = hub_request(port, "POST", "/send", Some(&body)).expect("send");
    assert!(status < 300, "send failed: {status} {reply}");
    reply["id"].as_i64().unwrap_or(0)
}

fn peer(port: u16, session: &str) -> Value {
    let (_, v) = hub_request(port, "GET", "/peers", None).expect("peers");
    v["peers"]
        .as_array()
        .and_then(|a| a.iter().find(|p| p["session"] == session).cloned())
        .unwrap_or(Value::Null)
}

trantor_testkit::on_both_hubs!(drill1_direct_message_runs_one_turn_and_the_sender_gets_the_receipt);

fn drill1_direct_message_runs_one_turn_and_the_sender_gets_the_receipt(original: bool) {
    let Some(hub) = drill_hub(original) else {
        return;
    };
    let mut seat = new_seat("claude", "claude");
    seat.start(&hub.url());
    seat.wait_idle_after(1);
    let id = hub_send(
        hub.port,
        ORCH,
        "claude:p",
        PROJECT,
        "Please implement ZEBRA-42",
    );
    wait_until("the receipt", LONG, || {
        !receipts(hub.port, &seat, ORCH).is_empty()
    });
    let r = receipts(hub.port, &seat, ORCH);
    assert_eq!(r.len(), 1, "{r:#?}");
    assert_eq!(r[0]["kind"], "receipt");
    assert_eq!(r[0]["re"].as_i64(), Some(id));
    assert!(
        r[0]["text"]
            .as_str()
            .is_some_and(|t| t.starts_with("✅ done on claude:p"))
    );
    assert_eq!(
        seat.prompts_with("ZEBRA-42"),
        1,
        "one turn carried the message"
    );
    let calls = seat.calls();
    assert_eq!(calls.len(), 2, "kickoff + one turn");
    // The kickoff is a fresh session; the wake resumes it (`-c`) in the seat worktree.
    assert_eq!(calls[0]["argv"][0], "-p");
    assert_eq!(calls[1]["argv"][0], "-c");
    let cwd = calls[1]["cwd"].as_str().unwrap_or("");
    assert!(cwd.ends_with("worktrees/p/claude"), "{cwd}");
    assert_eq!(calls[1]["env"]["RELAY_SESSION"], "claude:p");
    assert_eq!(calls[1]["env"]["RELAY_AGENT"], "claude");
    assert_eq!(calls[1]["stdin"], "");
    // Boot row, turn rows, and the wake consumed.
    let ledger = seat.ledger();
    assert_eq!(ledger[0]["boot"], true);
    assert_eq!(ledger[0]["persona"], "claude");
    assert!(ledger[0]["pid"].as_u64().is_some() && ledger[0]["version"].is_string());
    let rows = seat.turn_rows();
    assert_eq!(
        rows.last().map(|r| r["outcome"].clone()),
        Some(json!("completed"))
    );
    assert!(seat.pending_wake_ids().is_empty());
    // The peer row carries persona and agent (the original hub does not keep them).
    if !hub.is_original() {
        let p = peer(hub.port, "claude:p");
        assert_eq!(p["persona"], "claude", "{p}");
        assert_eq!(p["agent"], "claude", "{p}");
    }
}

trantor_testkit::on_both_hubs!(drill2_kill9_mid_turn_redelivers_that_wake_once_then_never_again);

fn drill2_kill9_mid_turn_redelivers_that_wake_once_then_never_again(original: bool) {
    let Some(hub) = drill_hub(original) else {
        return;
    };
    let mut seat = new_seat("claude", "claude");
    seat.start(&hub.url());
    seat.wait_idle_after(1);
    seat.control(&format!("{}FAKE_AGENT_SLEEP=60\n", record_pid(&seat)));
    let id = hub_send(
        hub.port,
        ORCH,
        "claude:p",
        PROJECT,
        "KILL9-WAKE: do the thing",
    );
    wait_until("the turn to start", LONG, || {
        seat.prompts_with("KILL9-WAKE") == 1
    });
    assert_eq!(
        seat.pending_wake_ids(),
        vec![id],
        "the wake is on disk before the turn"
    );
    // kill -9 the runner and its CLI (which leads its own process group).
    seat.kill();
    assert!(seat.kill_cli_groups() > 0, "the CLI recorded its pid");
    seat.control("");
    seat.start(&hub.url());
    wait_until("the redelivered wake's receipt", LONG, || {
        !receipts(hub.port, &seat, ORCH).is_empty()
    });
    assert_eq!(
        seat.prompts_with("KILL9-WAKE"),
        2,
        "killed once, redelivered once"
    );
    // Never again: a later wake runs, and the first is not in it or anywhere after.
    hub_send(hub.port, ORCH, "claude:p", PROJECT, "KILL9-LATER");
    wait_until("the later receipt", LONG, || {
        receipts(hub.port, &seat, ORCH).len() >= 2
    });
    assert_eq!(seat.prompts_with("KILL9-WAKE"), 2);
    assert_eq!(seat.prompts_with("KILL9-LATER"), 1);
    let r = receipts(hub.port, &seat, ORCH);
    assert_eq!(r.iter().filter(|m| m["re"].as_i64() == Some(id)).count(), 1);
    assert!(seat.pending_wake_ids().is_empty());
    // Two boots: a second kickoff ran (a normal boot), and the boot rows say so.
    assert_eq!(
        seat.ledger().iter().filter(|r| r["boot"] == true).count(),
        2
    );
}

trantor_testkit::on_both_hubs!(
    drill4_usage_limit_parks_exhausted_until_the_reset_and_holds_the_wake
);

fn drill4_usage_limit_parks_exhausted_until_the_reset_and_holds_the_wake(original: bool) {
    let Some(hub) = drill_hub(original) else {
        return;
    };
    let mut seat = new_seat("claude", "claude");
    seat.start(&hub.url());
    seat.wait_idle_after(1);
    seat.control(
        "FAKE_AGENT_EXIT=1\nFAKE_AGENT_OUTPUT='Error: You have hit your usage limit. Try again in 2 hours.'\n",
    );
    let before = trantor_now();
    let id = hub_send(hub.port, ORCH, "claude:p", PROJECT, "QUOTA-WAKE: build it");
    let park_file = seat.bus.join("park-claude-p.json");
    wait_until("the park file", LONG, || park_file.exists());
    let park: Value =
        serde_json::from_str(&std::fs::read_to_string(&park_file).expect("park")).expect("json");
    assert_eq!(park["reason"], "exhausted", "{park}");
    assert_eq!(park["persona"], "claude");
    assert_eq!(park["bounded"], false);
    let until = park["until"].as_i64().expect("until");
    let two_hours = 2 * 3600 * 1000;
    assert!(
        until >= before + two_hours - 60_000 && until <= trantor_now() + two_hours + 60_000,
        "until {until} is not about two hours out"
    );
    assert_eq!(seat.pending_wake_ids(), vec![id], "the wake is held");
    wait_until("the parked peer row", LONG, || {
        let p = peer(hub.port, "claude:p");
        // The status names the reason and until when (the reset the CLI printed).
        let status = p["status"].as_str().unwrap_or_default();
        status.starts_with("parked (exhausted) · until 20") && p["phase"] == "parked"
    });
    wait_until("the park announcement", LONG, || {
        !received(hub.port, "observer:p", "claude:p", "PARKED").is_empty()
    });
    // A second direct message does not end an unbounded park and runs no turn.
    hub_send(hub.port, ORCH, "claude:p", PROJECT, "QUOTA-SECOND");
    wait_until("the runner to hold the second message", LONG, || {
        seat.runner_log().contains("holding the new message")
    });
    wait_until("both wakes held on disk", LONG, || {
        seat.pending_wake_ids().len() == 2
    });
    assert_eq!(seat.prompts_with("QUOTA-WAKE"), 1);
    assert_eq!(seat.prompts_with("QUOTA-SECOND"), 0);
    let parked = received(hub.port, "observer:p", "claude:p", "PARKED");
    assert_eq!(parked.len(), 1, "said once on the bus: {parked:#?}");
    assert!(
        parked[0]["text"]
            .as_str()
            .is_some_and(|t| t.contains("exhausted"))
    );
    assert!(
        receipts(hub.port, &seat, ORCH).is_empty(),
        "no done receipt while parked"
    );
}

trantor_testkit::on_both_hubs!(
    drill5_card_moved_to_blocked_consumes_the_wake_and_sends_the_receipt
);

fn drill5_card_moved_to_blocked_consumes_the_wake_and_sends_the_receipt(original: bool) {
    let Some(hub) = drill_hub(original) else {
        return;
    };
    let mut seat = new_seat("claude", "claude");
    seat.start(&hub.url());
    seat.wait_idle_after(1);
    let (status, card) = hub_request(
        hub.port,
        "POST",
        "/task",
        Some(
            &json!({"project": PROJECT, "title": "Build the widget", "status": "doing",
                     "assignee": "claude:p", "by": ORCH}),
        ),
    )
    .expect("task");
    assert!(status < 300, "{card}");
    let card_id = card["task"]["id"].as_i64().expect("card id");
    // The CLI moves its card to blocked with a note, through the hub, as relay_task_move does.
    seat.control(&format!(
        "curl -s -o /dev/null -XPOST \"$RELAY_URL/task/update\" -H 'content-type: application/json' \
         -d '{{\"id\":{card_id},\"status\":\"blocked\",\"note\":\"need the API name before I can go on\\nsecond line\",\"by\":\"'\"$RELAY_SESSION\"'\"}}'\n"
    ));
    let id = hub_send(
        hub.port,
        ORCH,
        "claude:p",
        PROJECT,
        &format!("your card #{card_id}: build the widget"),
    );
    wait_until("the receipt", LONG, || {
        !receipts(hub.port, &seat, ORCH).is_empty()
    });
    let rows = seat.turn_rows();
    let last = rows.last().expect("turn row");
    assert_eq!(last["outcome"], "blocked", "{last}");
    assert_eq!(
        last["verdict"],
        "blocked: need the API name before I can go on"
    );
    assert_eq!(last["card"].as_i64(), Some(card_id));
    let r = receipts(hub.port, &seat, ORCH);
    assert_eq!(r.len(), 1);
    assert_eq!(r[0]["re"].as_i64(), Some(id));
    assert!(seat.pending_wake_ids().is_empty(), "the wake was consumed");
    assert_eq!(seat.prompts_with(&format!("your card #{card_id}")), 1);
}

trantor_testkit::on_both_hubs!(
    drill6_persona_seat_has_its_own_name_files_branch_and_wakes_on_its_mention
);

fn drill6_persona_seat_has_its_own_name_files_branch_and_wakes_on_its_mention(original: bool) {
    let Some(hub) = drill_hub(original) else {
        return;
    };
    let mut seat = new_seat("claude", "reviewer");
    seat.start(&hub.url());
    seat.wait_idle_after(1);
    // Its own bus name, with persona and agent on the peer row.
    wait_until("the reviewer peer row", LONG, || {
        peer(hub.port, "reviewer:p")["session"] == "reviewer:p"
    });
    if !hub.is_original() {
        let p = peer(hub.port, "reviewer:p");
        assert_eq!(p["persona"], "reviewer", "{p}");
        assert_eq!(p["agent"], "claude", "{p}");
    }
    assert_eq!(peer(hub.port, "claude:p"), Value::Null, "no claude:p seat");
    // Its own branch and worktree.
    let branches = common::git_in(&seat.repo, &["branch", "--list", "seat/*"]);
    assert!(branches.contains("seat/reviewer"), "{branches}");
    assert!(!branches.contains("seat/claude"), "{branches}");
    assert!(seat.bus.join("worktrees/p/reviewer").is_dir());
    // A broadcast contract for someone else does not wake it; one mentioning @reviewer does.
    send(
        hub.port,
        json!({"from": ORCH, "to": "all", "project": PROJECT,
                          "text": "@claude please take #4 (NOT-FOR-REVIEWER)"}),
    );
    let id = send(
        hub.port,
        json!({"from": ORCH, "to": "all", "project": PROJECT,
                                   "text": "@reviewer please review #4 (REVIEW-WAKE)"}),
    );
    wait_until("the reviewer's receipt", LONG, || {
        !receipts(hub.port, &seat, ORCH).is_empty()
    });
    assert_eq!(seat.prompts_with("REVIEW-WAKE"), 1);
    let r = receipts(hub.port, &seat, ORCH);
    assert_eq!(r[0]["re"].as_i64(), Some(id));
    assert!(
        r[0]["text"]
            .as_str()
            .is_some_and(|t| t.starts_with("✅ done on reviewer:p"))
    );
    let calls = seat.calls();
    let last = calls.last().expect("call");
    assert_eq!(last["env"]["RELAY_SESSION"], "reviewer:p");
    assert_eq!(last["env"]["RELAY_AGENT"], "claude");
    assert!(
        last["cwd"]
            .as_str()
            .is_some_and(|c| c.ends_with("worktrees/p/reviewer"))
    );
    // The non-mention rode along as context, not as a wake.
    assert_eq!(seat.prompts_with("NOT-FOR-REVIEWER"), 1);
    assert_eq!(
        calls
            .iter()
            .filter(|c| c["prompt"]
                .as_str()
                .is_some_and(|p| p.contains("NEW BUS MESSAGE")
                    && p.split("NEW BUS MESSAGE")
                        .nth(1)
                        .is_some_and(|w| w.contains("NOT-FOR-REVIEWER"))))
            .count(),
        0
    );
    // Its own files.
    assert!(seat.bus.join("logs/reviewer-p.jsonl").exists());
    assert!(seat.bus.join("turnstate-reviewer-p.json").exists());
    assert!(seat.bus.join("err-reviewer-p.txt").exists());
    assert!(!seat.bus.join("logs/claude-p.jsonl").exists());
    assert_eq!(seat.ledger()[0]["persona"], "reviewer");
    assert_eq!(seat.ledger()[0]["agent"], "claude");
}

/// Accepts connections on `port` and closes them at once, counting them: a hub that is down
/// but whose port answers, so every retry of the runner is visible.
struct Blackhole {
    count: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl Blackhole {
    fn bind(port: u16) -> Blackhole {
        use std::sync::atomic::Ordering;
        let listener = std::net::TcpListener::bind(("127.0.0.1", port)).expect("blackhole bind");
        listener.set_nonblocking(true).expect("nonblocking");
        let count = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (c, s) = (count.clone(), stop.clone());
        let handle = std::thread::spawn(move || {
            while !s.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((conn, _)) => {
                        c.fetch_add(1, Ordering::SeqCst);
                        drop(conn);
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
        });
        Blackhole {
            count,
            stop,
            handle: Some(handle),
        }
    }

    fn close(mut self) -> usize {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
        self.count.load(std::sync::atomic::Ordering::SeqCst)
    }
}

trantor_testkit::on_both_hubs!(
    drill8_hub_down_loses_nothing_duplicates_nothing_and_never_spins;
    original: #[ignore = "fails when run beside another test since the runner's durable completed-contract \
            memory (passes alone): suspected id reuse by the original hub after kill -9 (it \
            acknowledges before it flushes bus.json), which that memory, keyed by message id, \
            reads as a contract already done; run with --ignored"]
);

/// The hub is down (its port answering and closing every connection) for `DRILL_HUB_DOWN_SECS`
/// (default 8 s: long enough for a turn to end and its receipt to fall due mid-outage, and for
/// the runner's back-off to climb past its first steps; 60 runs the original's full minute).
fn drill8_hub_down_loses_nothing_duplicates_nothing_and_never_spins(original: bool) {
    let down_secs: u64 = std::env::var("DRILL_HUB_DOWN_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(8);
    let data = tempfile::tempdir().expect("hub data");
    let port = common::free_port();
    let Some(mut hub) = common::require_tool("python3")
        .then(|| TestHub::start_in(data.path(), port, original))
        .flatten()
    else {
        return;
    };
    let mut seat = new_seat("claude", "claude");
    seat.start(&hub.url());
    seat.wait_idle_after(1);
    // The hub dies while a turn runs, so the turn ends — and its receipt is due — mid-outage.
    seat.control("FAKE_AGENT_SLEEP=3\n");
    let a = hub_send(
        port,
        ORCH,
        "claude:p",
        PROJECT,
        "OUTAGE-A: work through the outage",
    );
    wait_until("turn A to start", LONG, || {
        seat.prompts_with("OUTAGE-A") == 1
    });
    hub.kill9();
    let hole = Blackhole::bind(port);
    std::thread::sleep(Duration::from_secs(down_secs));
    let attempts = hole.close();
    hub.restart();
    seat.control("");
    wait_until(
        "A's receipt after the outage",
        Duration::from_secs(120),
        || !receipts(port, &seat, ORCH).is_empty(),
    );
    let b = hub_send(
        port,
        ORCH,
        "claude:p",
        PROJECT,
        "OUTAGE-B: after the hub came back",
    );
    wait_until("B's receipt", LONG, || {
        receipts(port, &seat, ORCH).len() >= 2
    });
    let r = receipts(port, &seat, ORCH);
    assert_eq!(
        r.iter().filter(|m| m["re"].as_i64() == Some(a)).count(),
        1,
        "{r:#?}"
    );
    assert_eq!(
        r.iter().filter(|m| m["re"].as_i64() == Some(b)).count(),
        1,
        "{r:#?}"
    );
    assert_eq!(r.len(), 2);
    assert_eq!(seat.prompts_with("OUTAGE-A"), 1, "A ran once");
    assert_eq!(seat.prompts_with("OUTAGE-B"), 1, "B ran once");
    // Bounded back-off, not a busy loop: the poll loop doubles from 1 s and the bus writer
    // from 0.5 s, so the first seconds hold a few attempts each, and a minute at most about 40
    // (a loop without back-off makes thousands).
    let bound = if down_secs >= 60 {
        down_secs as usize * 40 / 60
    } else {
        24
    };
    eprintln!("drill8: {attempts} connection attempts in {down_secs}s (bound {bound})");
    assert!(attempts >= 1, "the runner never retried");
    assert!(
        attempts <= bound,
        "{attempts} connection attempts in {down_secs}s"
    );
    assert!(seat.runner_log().contains("hub unreachable"));
    assert_eq!(
        seat.runner_log().matches("hub unreachable (").count(),
        1,
        "said once"
    );
    drop(hub);
}

trantor_testkit::on_both_hubs!(wake_false_and_unmentioned_broadcasts_ride_along_as_context);

fn wake_false_and_unmentioned_broadcasts_ride_along_as_context(original: bool) {
    let Some(hub) = drill_hub(original) else {
        return;
    };
    let mut seat = new_seat("claude", "claude");
    seat.start(&hub.url());
    seat.wait_idle_after(1);
    send(
        hub.port,
        json!({"from": ORCH, "to": "claude:p", "project": PROJECT,
                          "text": "CTX-NOWAKE: fyi only", "wake": false}),
    );
    send(
        hub.port,
        json!({"from": ORCH, "to": "all", "project": PROJECT,
                          "text": "CTX-BCAST: contract #3 for whoever"}),
    );
    send(
        hub.port,
        json!({"from": ORCH, "to": "claude:p", "project": PROJECT,
                          "text": "CTX-STATUS", "kind": "status"}),
    );
    wait_until("the runner to batch the context", LONG, || {
        seat.pending()["bcast"]
            .as_array()
            .is_some_and(|a| a.len() >= 2)
    });
    assert_eq!(seat.calls().len(), 1, "nothing woke the seat");
    hub_send(hub.port, ORCH, "claude:p", PROJECT, "CTX-REAL: now do it");
    wait_until("the receipt", LONG, || {
        !receipts(hub.port, &seat, ORCH).is_empty()
    });
    let calls = seat.calls();
    assert_eq!(calls.len(), 2);
    let prompt = calls[1]["prompt"].as_str().unwrap_or("");
    let (context, wake) = prompt.split_once("NEW BUS MESSAGE").expect("wake section");
    assert!(context.contains("CTX-NOWAKE") && context.contains("CTX-BCAST"));
    assert!(wake.contains("CTX-REAL") && !wake.contains("CTX-NOWAKE"));
    // A direct status note never wakes; it rides along as context like the others.
    assert!(context.contains("CTX-STATUS") && !wake.contains("CTX-STATUS"));
    assert_eq!(receipts(hub.port, &seat, ORCH).len(), 1);
}

trantor_testkit::on_both_hubs!(cross_project_wakes_are_refused_once_unless_linked);

fn cross_project_wakes_are_refused_once_unless_linked(original: bool) {
    let Some(hub) = drill_hub(original) else {
        return;
    };
    let mut seat = new_seat("claude", "claude");
    seat.start(&hub.url());
    seat.wait_idle_after(1);
    hub_send(
        hub.port,
        "orch:other",
        "claude:p",
        "other",
        "XPROJ-1: do our work",
    );
    wait_until("the refusal", LONG, || {
        !received(hub.port, "orch:other", "claude:p", "cross-project").is_empty()
    });
    let refusals = received(hub.port, "orch:other", "claude:p", "cross-project");
    assert_eq!(refusals.len(), 1);
    assert!(
        refusals[0]["text"]
            .as_str()
            .is_some_and(|t| t.contains("trantor policy link p other"))
    );
    assert_eq!(seat.prompts_with("XPROJ-1"), 0);
    assert!(
        seat.pending_wake_ids().is_empty(),
        "a refused wake is not queued"
    );
    // Linked projects may wake each other.
    let (status, _) = hub_request(
        hub.port,
        "POST",
        "/policy",
        Some(&json!({"link": {"projects": ["p", "other"], "reason": "drill"}, "by": "operator"})),
    )
    .expect("policy");
    assert!(status < 300);
    // The links are cached for a minute; a fresh runner reads them at its first foreign wake.
    seat.kill();
    seat.start(&hub.url());
    seat.wait_idle_after(2);
    hub_send(
        hub.port,
        "orch:other",
        "claude:p",
        "other",
        "XPROJ-2: linked now",
    );
    wait_until("the linked wake's receipt", LONG, || {
        !receipts(hub.port, &seat, "orch:other").is_empty()
    });
    assert_eq!(seat.prompts_with("XPROJ-2"), 1);
    assert_eq!(seat.prompts_with("XPROJ-1"), 0);
    assert_eq!(
        received(hub.port, "orch:other", "claude:p", "cross-project").len(),
        1
    );
}

trantor_testkit::on_both_hubs!(
    eighty_wakes_to_a_slow_seat_all_reach_prompts_none_lost_across_a_restart
);

/// Issue 16: no wake is dropped to cap a count. 80 messages reach a seat whose CLI is slow;
/// past a turn's batch they are folded into the prompt (with a line saying how many), the rest
/// wait for the next turn, and a `kill -9` of the runner mid-turn loses none of them.
fn eighty_wakes_to_a_slow_seat_all_reach_prompts_none_lost_across_a_restart(original: bool) {
    let Some(hub) = drill_hub(original) else {
        return;
    };
    let mut seat = new_seat("claude", "claude");
    seat.start(&hub.url());
    seat.wait_idle_after(1);
    seat.control(&format!("{}FAKE_AGENT_SLEEP=8\n", record_pid(&seat)));
    let send_fold = |i: usize| {
        let text = format!("FOLD-{i}/80 please look");
        (hub_send(hub.port, ORCH, "claude:p", PROJECT, &text), text)
    };
    // The first message starts a slow turn; the other 79 pile up behind it.
    let mut ids = vec![send_fold(1)];
    wait_until("the first slow turn", LONG, || {
        seat.prompts_with("FOLD-1/80") == 1
    });
    ids.extend((2..=80).map(send_fold));
    let in_a_prompt = |seat: &Seat| -> Vec<i64> {
        let prompts: Vec<String> = seat
            .calls()
            .iter()
            .filter_map(|c| c["prompt"].as_str().map(str::to_string))
            .collect();
        ids.iter()
            .filter(|(id, text)| {
                let needle = format!("#{id}: {text}");
                prompts.iter().any(|p| p.contains(&needle))
            })
            .map(|(id, _)| *id)
            .collect()
    };
    // The next turn carries a batch, folded; the tail is still queued (ours: in the pending
    // file; the original hub pages its poll, so part of it may still be at the hub).
    wait_until("a turn carrying a folded batch", LONG, || {
        seat.prompts_with("folded in, oldest first") >= 1
    });
    let queued = seat.pending_wake_ids();
    assert!(!queued.is_empty(), "the batch is on disk during its turn");
    let before_kill = in_a_prompt(&seat).len();
    assert!(
        before_kill < ids.len(),
        "some wakes have not reached a prompt before the kill ({before_kill} have)"
    );
    if !original {
        assert!(
            queued.len() > 60,
            "more than one batch queued: {}",
            queued.len()
        );
    }
    // kill -9 the runner and its slow CLI mid-turn.
    seat.kill();
    assert!(seat.kill_cli_groups() > 0, "the CLI recorded its pid");
    assert_eq!(
        seat.pending_wake_ids(),
        queued,
        "the queue on disk survives the kill"
    );
    seat.control("");
    seat.start(&hub.url());
    wait_until("every one of the 80 ids in a prompt", LONG, || {
        in_a_prompt(&seat).len() == ids.len()
    });
    wait_until("the queue to empty", LONG, || {
        seat.pending_wake_ids().is_empty()
    });
    let log = seat.runner_log();
    assert!(!log.contains("dropped"), "nothing dropped:\n{log}");
    // Each later turn's prompt carries each id at most once.
    for c in seat.calls() {
        let p = c["prompt"].as_str().unwrap_or_default();
        for (id, text) in &ids {
            assert!(p.matches(&format!("#{id}: {text}")).count() <= 1);
        }
    }
}

/// Phase goals are read where the seat works: a wake bound to a card carries the goal of the
/// card's phase (`POST /phase`) in its prompt.
#[test]
fn the_bound_cards_phase_goal_rides_the_wake_prompt() {
    let Some(hub) = drill_hub(false) else {
        return;
    };
    let mut seat = new_seat("claude", "claude");
    seat.start(&hub.url());
    seat.wait_idle_after(1);
    let (s, _) = hub_request(
        hub.port,
        "POST",
        "/phase",
        Some(&json!({"project":PROJECT,"phase":"beta","goal":"BETA-GOAL: checkout in one page","by":ORCH})),
    )
    .expect("phase");
    assert_eq!(s, 200);
    let (_, created) = hub_request(
        hub.port,
        "POST",
        "/task",
        Some(
            &json!({"title":"one-page checkout","project":PROJECT,"by":ORCH,
                     "assignee":"claude:p","phase":"beta"}),
        ),
    )
    .expect("card");
    let card = created["task"]["id"].as_i64().expect("id");
    hub_send(
        hub.port,
        ORCH,
        "claude:p",
        PROJECT,
        &format!("take card #{card} PHASE-WAKE"),
    );
    wait_until("the wake's turn", LONG, || {
        seat.prompts_with("PHASE-WAKE") == 1
    });
    assert_eq!(
        seat.prompts_with("PHASE GOAL (beta): BETA-GOAL: checkout in one page"),
        1,
        "{:?}",
        seat.calls().last().map(|c| c["prompt"].clone())
    );
}

fn trantor_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Control-file text that runs once: it deletes itself after setting the knobs.
fn once(knobs: &str) -> String {
    format!("{knobs}\nrm -f \"$FAKE_AGENT_CONTROL\"\n")
}

trantor_testkit::on_both_hubs!(
    a_failed_turn_is_retried_on_the_ladder_and_the_recovery_is_announced
);

fn a_failed_turn_is_retried_on_the_ladder_and_the_recovery_is_announced(original: bool) {
    let Some(hub) = drill_hub(original) else {
        return;
    };
    let mut seat = new_seat("claude", "claude");
    seat.start_with(&hub.url(), &[("TRANTOR_RETRY_MS", "1000")]);
    seat.wait_idle_after(1);
    seat.control(&once(
        "FAKE_AGENT_EXIT=1\nFAKE_AGENT_OUTPUT='segfault in the widget code'",
    ));
    let id = hub_send(hub.port, ORCH, "claude:p", PROJECT, "RETRY-WAKE: build it");
    wait_until("the done receipt", LONG, || {
        !receipts(hub.port, &seat, ORCH).is_empty()
    });
    let failed = received(hub.port, ORCH, "claude:p", "your contract FAILED");
    assert_eq!(failed.len(), 1, "{failed:#?}");
    assert_eq!(failed[0]["re"].as_i64(), Some(id));
    assert_eq!(failed[0]["kind"], "receipt");
    assert!(
        failed[0]["text"]
            .as_str()
            .is_some_and(|t| t.contains("(exit 1, crashed)"))
    );
    wait_until("the recovery notice", LONG, || {
        !received(hub.port, "observer:p", "claude:p", "claude:p recovered").is_empty()
    });
    assert_eq!(
        received(hub.port, "observer:p", "claude:p", "turn FAILED").len(),
        1
    );
    assert_eq!(
        received(hub.port, "orch:p", "claude:p", "turn FAILED").len(),
        2,
        "all + the orchestrator alert"
    );
    assert_eq!(seat.prompts_with("RETRY-WAKE"), 2);
    assert_eq!(seat.prompts_with("REDELIVERY, attempt 2"), 1);
    let outcomes: Vec<Value> = seat
        .turn_rows()
        .iter()
        .map(|r| r["outcome"].clone())
        .collect();
    assert_eq!(
        outcomes[outcomes.len() - 2..],
        [json!("api-error"), json!("completed")]
    );
    assert_eq!(receipts(hub.port, &seat, ORCH)[0]["re"].as_i64(), Some(id));
}

#[test]
fn two_failures_park_bounded_and_a_direct_message_ends_the_park() {
    let Some(hub) = drill_hub(false) else {
        return;
    };
    let mut seat = new_seat("claude", "claude");
    seat.start_with(&hub.url(), &[("TRANTOR_RETRY_MS", "500")]);
    seat.wait_idle_after(1);
    seat.control("FAKE_AGENT_EXIT=2\n");
    hub_send(hub.port, ORCH, "claude:p", PROJECT, "BOUNDED-1: build it");
    let park_file = seat.bus.join("park-claude-p.json");
    wait_until("the bounded park", LONG, || park_file.exists());
    let park: Value =
        serde_json::from_str(&std::fs::read_to_string(&park_file).expect("park")).expect("json");
    assert_eq!(park["reason"], "api-error", "{park}");
    assert_eq!(park["bounded"], true);
    assert_eq!(
        seat.prompts_with("BOUNDED-1"),
        2,
        "two attempts, then the park"
    );
    seat.control("");
    hub_send(hub.port, ORCH, "claude:p", PROJECT, "BOUNDED-2: and this");
    wait_until("the receipt after the park", LONG, || {
        !receipts(hub.port, &seat, ORCH).is_empty()
    });
    assert!(!park_file.exists(), "the park is over");
    let last = seat.calls().last().cloned().expect("call");
    let prompt = last["prompt"].as_str().unwrap_or("");
    assert!(prompt.contains("BOUNDED-1") && prompt.contains("BOUNDED-2"));
    let parked = received(hub.port, "observer:p", "claude:p", "PARKED");
    assert_eq!(parked.len(), 1);
    assert!(
        parked[0]["text"]
            .as_str()
            .is_some_and(|t| t.contains("a direct message ends the park now"))
    );
}

#[test]
fn an_ask_holds_the_wake_until_the_answer_resumes_the_card() {
    let Some(hub) = drill_hub(false) else {
        return;
    };
    let mut seat = new_seat("claude", "claude");
    seat.start(&hub.url());
    seat.wait_idle_after(1);
    seat.control(&once(
        "curl -s -o /dev/null -XPOST \"$RELAY_URL/send\" -H 'content-type: application/json' \
         -d '{\"from\":\"'\"$RELAY_SESSION\"'\",\"to\":\"orch:p\",\"kind\":\"ask\",\"text\":\"❓ ask: which API version?\"}'",
    ));
    hub_send(
        hub.port,
        ORCH,
        "claude:p",
        PROJECT,
        "ASK-WAKE: build the client",
    );
    wait_until("the held ask", LONG, || {
        seat.pending()["ask"].as_i64().is_some_and(|a| a > 0)
    });
    let ask = seat.pending()["ask"].as_i64().unwrap_or(0);
    assert_eq!(seat.pending()["askTo"], ORCH);
    assert_eq!(
        seat.turn_rows().last().map(|r| r["outcome"].clone()),
        Some(json!("asked"))
    );
    assert!(
        receipts(hub.port, &seat, ORCH).is_empty(),
        "the contract is owed, not done"
    );
    let answer = send(
        hub.port,
        json!({"from": ORCH, "to": "claude:p", "project": PROJECT, "re": ask,
               "text": "ASK-ANSWER: use v2"}),
    );
    wait_until("the done receipt", LONG, || {
        !receipts(hub.port, &seat, ORCH).is_empty()
    });
    let last = seat.calls().last().cloned().expect("call");
    let prompt = last["prompt"].as_str().unwrap_or("");
    assert!(prompt.contains("ASK-WAKE") && prompt.contains("ASK-ANSWER"));
    assert_eq!(last["argv"][0], "-c", "the answer resumes the same session");
    assert_eq!(
        receipts(hub.port, &seat, ORCH)[0]["re"].as_i64(),
        Some(answer)
    );
    assert_eq!(seat.pending()["ask"].as_i64().unwrap_or(0), 0);
    assert_eq!(seat.prompts_with("ASK-WAKE"), 2);
}

#[test]
fn a_pulse_seat_rereads_its_mission_on_a_quiet_bus() {
    let Some(hub) = drill_hub(false) else {
        return;
    };
    let mut seat = new_seat("claude", "claude");
    std::fs::write(
        seat.repo.join("MISSION.md"),
        "MISSION-NOTE: keep the board moving\n",
    )
    .expect("mission");
    seat.start_with(&hub.url(), &[("RUNNER_PULSE_MS", "1500")]);
    wait_until("a pulse turn", LONG, || {
        seat.turn_rows().iter().any(|r| r["trigger"] == "pulse")
    });
    assert!(seat.prompts_with("MISSION-NOTE") >= 1);
    assert!(seat.prompts_with("PULSE") >= 1);
}

#[test]
fn a_staged_swap_waits_for_its_release_and_starts_from_its_cursor() {
    let Some(hub) = drill_hub(false) else {
        return;
    };
    let mut seat = new_seat("claude", "claude");
    let stage = seat.root.join("stage");
    let stage_s = stage.to_string_lossy().to_string();
    seat.start_with(
        &hub.url(),
        &[
            ("CREW_SWAP_STAGE", stage_s.as_str()),
            ("CREW_SWAP_AGENT", "claude"),
            ("CREW_SWAP_LABEL", "claude-next"),
        ],
    );
    let ready = PathBuf::from(format!("{stage_s}.ready"));
    wait_until("the ready file", LONG, || ready.exists());
    let r: Value =
        serde_json::from_str(&std::fs::read_to_string(&ready).expect("ready")).expect("json");
    assert_eq!(r["session"], "claude-next:p");
    wait_until("the staging identity on the hub", LONG, || {
        peer(hub.port, "claude-next:p")["status"] == "replacement ready; awaiting handoff"
    });
    assert!(seat.calls().is_empty(), "no turn before the handoff");
    // A message sent before the handoff cursor is history; one after it wakes the seat.
    let old = hub_send(
        hub.port,
        ORCH,
        "claude:p",
        PROJECT,
        "SWAP-OLD: handled by the old seat",
    );
    std::fs::write(
        format!("{stage_s}.release"),
        json!({"agent": "claude", "cursor": old}).to_string(),
    )
    .expect("release");
    seat.wait_idle_after(1);
    hub_send(
        hub.port,
        ORCH,
        "claude:p",
        PROJECT,
        "SWAP-NEW: for the new seat",
    );
    wait_until("the new seat's receipt", LONG, || {
        !receipts(hub.port, &seat, ORCH).is_empty()
    });
    assert_eq!(seat.prompts_with("SWAP-OLD"), 0);
    assert_eq!(seat.prompts_with("SWAP-NEW"), 1);
}

#[test]
fn duty_nudges_reserve_in_the_shared_ledger_and_skip_what_cannot_be_nudged() {
    let Some(hub) = drill_hub(false) else {
        return;
    };
    let mut seat = new_seat("claude", "claude");
    seat.start_with(&hub.url(), &[("RUNNER_DUTY_NUDGES", "1")]);
    seat.wait_idle_after(1);
    // An escalation about a recipient nobody knows: nothing to nudge, no model turn.
    hub_send(
        hub.port,
        "hub:duty",
        "claude:p",
        PROJECT,
        "⏰ UNDELIVERED for 12m: #9001 orch:p -> ghost:p",
    );
    wait_until("the escalation consumed without a turn", LONG, || {
        seat.runner_log()
            .contains("consumed without a duplicate model wake")
    });
    assert_eq!(seat.calls().len(), 1, "only the kickoff ran");
    // A known, idle recipient: the turn carries the directive, the id is reserved in the shared
    // ledger, and a turn that sent the nudge consumes the wake.
    let (s, _) = hub_request(
        hub.port,
        "POST",
        "/register",
        Some(&json!({"session": "bob:p", "project": PROJECT, "status": "idle"})),
    )
    .expect("register");
    assert!(s < 300);
    seat.control(&once(
        "curl -s -o /dev/null -XPOST \"$RELAY_URL/send\" -H 'content-type: application/json' \
         -d '{\"from\":\"'\"$RELAY_SESSION\"'\",\"to\":\"bob:p\",\"text\":\"read your inbox: #9002\"}'",
    ));
    hub_send(
        hub.port,
        "hub:duty",
        "claude:p",
        PROJECT,
        "⏰ UNDELIVERED for 12m: #9002 orch:p -> bob:p",
    );
    wait_until("the duty turn", LONG, || {
        seat.prompts_with("MECHANICAL DUTY NUDGE REQUIREMENT") == 1
    });
    let ledger = seat.bus.join("nudged-bob_p.json");
    wait_until("the nudge ledger stamp", LONG, || {
        std::fs::read_to_string(&ledger).is_ok_and(|t| t.contains("9002"))
    });
    wait_until("the duty wake consumed", LONG, || {
        seat.pending_wake_ids().is_empty() && seat.turn_rows().len() >= 2
    });
    assert_eq!(
        seat.turn_rows().last().map(|r| r["outcome"].clone()),
        Some(json!("completed"))
    );
    assert!(seat.prompts_with("bob:p: unread #9002") == 1);
}

#[test]
fn the_hubs_duty_escalation_drives_a_duty_seats_nudge() {
    // End to end: an unread message on our hub → its duty service escalates to the duty seat →
    // the seat's runner plans the nudge from the escalation text and the turn sends it.
    let tmp = tempfile::tempdir().expect("hub data");
    let hub = common::Hub::start_in(
        tmp.path(),
        common::free_port(),
        &[
            ("RELAY_DUTY_SESSION", "claude:p"),
            ("RELAY_DUTY_UNDELIVERED_MS", "300"),
            ("RELAY_OVERSEER_TICK_MS", "100"),
        ],
    );
    let mut seat = new_seat("claude", "claude");
    seat.start_with(&hub.url(), &[("RUNNER_DUTY_NUDGES", "1")]);
    seat.wait_idle_after(1);
    let (s, _) = hub_request(
        hub.port,
        "POST",
        "/register",
        Some(&json!({"session": "bob:p", "project": PROJECT, "status": "idle"})),
    )
    .expect("register");
    assert!(s < 300);
    seat.control(&once(
        "curl -s -o /dev/null -XPOST \"$RELAY_URL/send\" -H 'content-type: application/json' \
         -d '{\"from\":\"'\"$RELAY_SESSION\"'\",\"to\":\"bob:p\",\"text\":\"read your inbox\"}'",
    ));
    let id = hub_send(hub.port, ORCH, "bob:p", PROJECT, "DUTY-E2E: please review");
    wait_until("the duty turn", LONG, || {
        seat.prompts_with("MECHANICAL DUTY NUDGE REQUIREMENT") == 1
    });
    assert_eq!(seat.prompts_with(&format!("bob:p: unread #{id}")), 1);
    wait_until("the nudge in bob's inbox", LONG, || {
        hub_messages(hub.port, "bob:p")
            .iter()
            .any(|m| m["from"] == "claude:p" && m["text"] == "read your inbox")
    });
}

#[test]
fn stopping_the_runner_mid_turn_ends_its_cli_and_keeps_the_wake() {
    let Some(hub) = drill_hub(false) else {
        return;
    };
    let mut seat = new_seat("claude", "claude");
    seat.start(&hub.url());
    seat.wait_idle_after(1);
    seat.control(&format!("{}FAKE_AGENT_SLEEP=60\n", record_pid(&seat)));
    let id = hub_send(hub.port, ORCH, "claude:p", PROJECT, "STOP-WAKE: long job");
    wait_until("the turn to start", LONG, || {
        seat.prompts_with("STOP-WAKE") == 1
    });
    let cli: i32 = *seat.cli_pids().last().expect("the CLI recorded its pid");
    let runner = seat.runner().expect("runner");
    let pid = nix::unistd::Pid::from_raw(runner.pid() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("sigterm");
    wait_until("the runner to exit", LONG, || !runner.alive());
    // The CLI runs under the turn wrapper, which leads the group (docs/runner.md §24.2): the
    // CLI process itself must be gone.
    wait_until("the CLI to be gone", LONG, || {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(cli), None).is_err()
    });
    assert_eq!(
        seat.pending_wake_ids(),
        vec![id],
        "the wake stays owed on disk"
    );
}

/// `trantor runner --help` names every environment variable the runner reads (the list is kept
/// once, in the runner's config).
#[test]
fn runner_help_names_every_variable_the_runner_reads() {
    let out = std::process::Command::new(common::bin())
        .args(["runner", "--help"])
        .output()
        .expect("run trantor runner --help");
    assert!(out.status.success(), "runner --help failed: {out:?}");
    let help = String::from_utf8_lossy(&out.stdout);
    let missing: Vec<&str> = trantor_runner::RUNNER_ENV_VARS
        .iter()
        .copied()
        .filter(|v| !help.contains(v))
        .collect();
    assert!(
        missing.is_empty(),
        "--help does not name {missing:?}:\n{help}"
    );
    assert!(
        help.contains("[default: 1200000]"),
        "defaults are shown:\n{help}"
    );
}

/// The circuit breaker (issue 23, docs/runner.md §12.5): two seats on one credential; seat A's
/// turn hits the usage limit with a reset 20 s ahead and marks the credential exhausted on the
/// hub; seat B, sent a contract right after, parks without spawning its CLI; at the reset both
/// resume by themselves, each held contract runs once, and the bus says so once.
#[test]
fn a_credential_proved_exhausted_parks_every_seat_on_it_until_the_reset() {
    let Some(hub) = drill_hub(false) else {
        return;
    };
    let (st, r) = hub_request(
        hub.port,
        "POST",
        "/credentials",
        Some(&json!({"name": "work", "agent": "claude"})),
    )
    .expect("name the credential");
    assert_eq!(st, 200, "{r}");
    let root = tempfile::tempdir().expect("tmp");
    let seat = |persona: &str| {
        Seat::in_dir(
            root.path(),
            Driver::Named("claude".into()),
            persona,
            PROJECT,
        )
        .env("RELAY_HOST_ID", "orch")
        .env("TRANTOR_POLL_HOLD_S", "3")
        .env("CREW_CREDENTIAL", "work")
    };
    let (mut a, mut b, mut c) = (seat("alice"), seat("bob"), seat("carol"));
    a.start(&hub.url());
    b.start(&hub.url());
    c.start(&hub.url());
    a.wait_idle_after(1);
    b.wait_idle_after(1);
    c.wait_idle_after(1);
    let cred = || {
        let (_, v) = hub_request(hub.port, "GET", "/credentials", None).expect("credentials");
        v["credentials"][0].clone()
    };
    wait_until("both seats listed on the credential", LONG, || {
        cred()["seats"] == json!(["alice:p", "bob:p", "carol:p"])
    });
    a.control(&once(
        "FAKE_AGENT_EXIT=1\nFAKE_AGENT_OUTPUT='Error: You have hit your usage limit. Try again in 20s.'",
    ));
    let before = trantor_now();
    let id_a = hub_send(hub.port, ORCH, "alice:p", PROJECT, "BREAKER-A: build it");
    wait_until("the credential marked exhausted", LONG, || {
        cred()["state"] == "exhausted"
    });
    let cr = cred();
    let until = cr["until"].as_i64().expect("until");
    assert!(
        until >= before + 15_000 && until <= trantor_now() + 21_000,
        "until {until} is not about 20 s out: {cr}"
    );
    assert_eq!(cr["provedBy"], "alice:p", "{cr}");
    assert!(
        cr["lastEvidence"]
            .as_str()
            .is_some_and(|e| e.contains("usage limit")),
        "{cr}"
    );
    let (b_calls, c_calls) = (b.calls().len(), c.calls().len());
    let id_b = hub_send(hub.port, ORCH, "bob:p", PROJECT, "BREAKER-B: and this");
    let b_park = b.bus.join("park-bob-p.json");
    wait_until("seat B parked", LONG, || b_park.exists());
    let park: Value =
        serde_json::from_str(&std::fs::read_to_string(&b_park).expect("park")).expect("json");
    assert_eq!(park["reason"], "exhausted", "{park}");
    assert_eq!(park["until"].as_i64(), Some(until), "{park}");
    assert!(trantor_now() < until, "B parked before the reset");
    assert_eq!(b.calls().len(), b_calls, "B spawned no turn");
    // Seat C, idle, parks too: the hub's notice rang its poll.
    let c_park = c.bus.join("park-carol-p.json");
    wait_until("idle seat C parked", LONG, || c_park.exists());
    assert!(trantor_now() < until, "C parked before the reset");
    // A second proof of the same exhaustion marks nothing; a reset in the past is ignored.
    let (_, again) = hub_request(
        hub.port,
        "POST",
        "/credentials/state",
        Some(&json!({"name": "work", "state": "exhausted", "until": until, "session": "bob:p"})),
    )
    .expect("again");
    assert_eq!(again["marked"], false, "{again}");
    let (st, past) = hub_request(
        hub.port,
        "POST",
        "/credentials/state",
        Some(&json!({"name": "work", "state": "exhausted", "until": 1000, "session": "bob:p"})),
    )
    .expect("past");
    assert_eq!(st, 200);
    assert_eq!(past["marked"], false, "{past}");
    assert!(
        past["ignored"]
            .as_str()
            .is_some_and(|t| t.contains("not in the future")),
        "{past}"
    );
    // At the reset both resume by themselves and run their held contracts once.
    wait_until("both done receipts after the reset", LONG, || {
        !received(hub.port, ORCH, "alice:p", "done on").is_empty()
            && !received(hub.port, ORCH, "bob:p", "done on").is_empty()
    });
    assert!(trantor_now() >= until, "nothing ran before the reset");
    let done_a = received(hub.port, ORCH, "alice:p", "done on");
    let done_b = received(hub.port, ORCH, "bob:p", "done on");
    assert_eq!(done_a.len(), 1, "{done_a:#?}");
    assert_eq!(done_b.len(), 1, "{done_b:#?}");
    assert_eq!(done_a[0]["re"].as_i64(), Some(id_a));
    assert_eq!(done_b[0]["re"].as_i64(), Some(id_b));
    assert_eq!(
        a.prompts_with("BREAKER-A"),
        2,
        "the failed turn and the one after the reset"
    );
    assert_eq!(b.prompts_with("BREAKER-B"), 1);
    assert_eq!(
        b.calls().len(),
        b_calls + 1,
        "B's only turn since is the held contract: {:#?}",
        b.prompts()
    );
    wait_until("the parks over", LONG, || {
        !b_park.exists() && !c_park.exists() && !a.bus.join("park-alice-p.json").exists()
    });
    assert_eq!(
        c.calls().len(),
        c_calls,
        "C, with nothing held, ran no turn"
    );
    let parked = received(hub.port, "observer:p", "bob:p", "PARKED");
    assert!(
        parked.len() == 1
            && parked[0]["text"]
                .as_str()
                .is_some_and(|t| t.contains("PARKED (exhausted) on credential work")),
        "B's park said once, naming the credential: {parked:#?}"
    );
    wait_until("the resume notice", LONG, || {
        !received(hub.port, "observer:p", "hub:quota", "has quota again").is_empty()
    });
    assert_eq!(cred()["state"], "ok");
    let said = |m: &str| received(hub.port, "observer:p", "hub:quota", m).len();
    assert_eq!(said("EXHAUSTED"), 1, "the mark said once");
    assert_eq!(said("has quota again"), 1, "the resume said once");
}

/// A budget (issue 23, docs/runner.md §12.6): the project has spent $0.40 in one turn and its
/// budget is $0.50, so another turn of that cost would pass it. A contract then parks the seat
/// `budget` without spawning its CLI, and the assigner hears it is parked; raising the budget
/// (`trantor budget set`) lets the seat run the held contract, once.
#[test]
fn a_turn_the_budget_cannot_afford_parks_until_the_budget_is_raised() {
    let Some(hub) = drill_hub(false) else {
        return;
    };
    let mut seat = new_seat("claude", "claude");
    seat.start(&hub.url());
    seat.wait_idle_after(1);
    let (st, r) = hub_request(
        hub.port,
        "POST",
        "/turns",
        Some(
            &json!({"session": "claude:p", "instance": "earlier", "turn": 1, "project": PROJECT,
            "agent": "claude", "model": "sonnet", "usage": {"input": 1000, "output": 100},
            "usd": 0.40, "outcome": "completed"}),
        ),
    )
    .expect("record a turn");
    assert!(st < 300, "{r}");
    let budget = |usd: &str| {
        let o = std::process::Command::new(common::bin())
            .args([
                "budget",
                "set",
                usd,
                "--url",
                &hub.url(),
                "--project",
                PROJECT,
            ])
            .output()
            .expect("trantor budget");
        let out = String::from_utf8_lossy(&o.stdout).to_string();
        assert!(
            o.status.success(),
            "{out}{}",
            String::from_utf8_lossy(&o.stderr)
        );
        out
    };
    let shown = budget("0.50");
    assert!(
        shown.contains("$0.50") && shown.contains("$0.40") && shown.contains("spent: seats park"),
        "the budget, what was spent and that it is spent: {shown}"
    );
    let calls = seat.calls().len();
    let id = hub_send(hub.port, ORCH, "claude:p", PROJECT, "BUDGET-WAKE: build it");
    let park = seat.bus.join("park-claude-p.json");
    wait_until("the budget park", LONG, || park.exists());
    let p: Value =
        serde_json::from_str(&std::fs::read_to_string(&park).expect("park")).expect("json");
    assert_eq!(p["reason"], "budget", "{p}");
    assert!(
        p["evidence"]
            .as_str()
            .is_some_and(|e| e.contains("project p's budget $0.50: $0.40 spent in")),
        "{p}"
    );
    wait_until("the assigner told", LONG, || {
        received(hub.port, ORCH, "claude:p", "PARKED")
            .iter()
            .any(|m| {
                m["re"].as_i64() == Some(id)
                    && m["text"].as_str().is_some_and(|t| {
                        t.contains("(budget)") && t.contains("resumes when its budget is raised")
                    })
            })
    });
    assert_eq!(seat.calls().len(), calls, "no turn spawned over the budget");
    budget("5");
    wait_until("the done receipt after the raise", LONG, || {
        !receipts(hub.port, &seat, ORCH).is_empty()
    });
    let done = receipts(hub.port, &seat, ORCH);
    assert_eq!(done.len(), 1, "{done:#?}");
    assert_eq!(done[0]["re"].as_i64(), Some(id));
    assert_eq!(
        seat.prompts_with("BUDGET-WAKE"),
        1,
        "the held contract ran once"
    );
    wait_until("the park over", LONG, || !park.exists());
}

/// Rerouting (issue 23, docs/runner.md §12.7): with the project's `reroute` dial on, a contract
/// held by a seat whose credential is exhausted moves to a live seat of another agent, which
/// runs it once; the assigner is told where it went, the holder never runs it, and asking the
/// hub again moves nothing twice. With the dial off the hub refuses.
#[test]
fn a_contract_held_on_a_spent_credential_moves_to_another_agent() {
    let Some(hub) = drill_hub(false) else {
        return;
    };
    let post = |path: &str, body: Value| {
        hub_request(hub.port, "POST", path, Some(&body)).expect("hub answers")
    };
    let (st, r) = post("/credentials", json!({"name": "work", "agent": "claude"}));
    assert_eq!(st, 200, "{r}");
    let mut alice = new_seat("claude", "alice").env("CREW_CREDENTIAL", "work");
    let mut bob = new_seat("codex", "bob");
    alice.start(&hub.url());
    bob.start(&hub.url());
    alice.wait_idle_after(1);
    bob.wait_idle_after(1);
    let until = trantor_now() + 3_600_000;
    let (_, marked) = post(
        "/credentials/state",
        json!({"name": "work", "state": "exhausted", "until": until, "session": "alice:p",
            "evidence": "usage limit"}),
    );
    assert_eq!(marked["marked"], true, "{marked}");
    let park = alice.bus.join("park-alice-p.json");
    wait_until("alice parked on the spent credential", LONG, || {
        park.exists()
    });
    // Off by default: the hub refuses to move anything.
    let ghost = hub_send(hub.port, ORCH, "ghost:p", PROJECT, "nobody runs this");
    let (st, off) = post(
        "/contracts/reroute",
        json!({"id": ghost, "session": "ghost:p", "reason": "test"}),
    );
    assert_eq!(st, 409, "{off}");
    assert!(
        off["error"]
            .as_str()
            .is_some_and(|e| e.contains("reroute is off")),
        "{off}"
    );
    let o = std::process::Command::new(common::bin())
        .args([
            "autonomy",
            "set",
            "reroute",
            "on",
            "--url",
            &hub.url(),
            "--project",
            PROJECT,
        ])
        .output()
        .expect("trantor autonomy");
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("reroute on"),
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    let alice_calls = alice.calls().len();
    let id = hub_send(hub.port, ORCH, "alice:p", PROJECT, "REROUTE-WAKE: build it");
    wait_until("bob's done receipt for the moved contract", LONG, || {
        !receipts(hub.port, &bob, ORCH).is_empty()
    });
    let moved: Vec<Value> = hub_messages(hub.port, "bob:p")
        .into_iter()
        .filter(|m| {
            m["text"]
                .as_str()
                .is_some_and(|t| t.contains("REROUTE-WAKE"))
        })
        .collect();
    assert_eq!(moved.len(), 1, "{moved:#?}");
    assert_eq!(
        moved[0]["from"], ORCH,
        "sent on from the assigner: {moved:#?}"
    );
    assert!(
        moved[0]["text"]
            .as_str()
            .is_some_and(|t| t.starts_with("↪ rerouted from alice:p (credential work")),
        "{moved:#?}"
    );
    let new_id = moved[0]["id"].as_i64().expect("id");
    let done = receipts(hub.port, &bob, ORCH);
    assert_eq!(done.len(), 1, "{done:#?}");
    assert_eq!(done[0]["re"].as_i64(), Some(new_id));
    assert_eq!(bob.prompts_with("REROUTE-WAKE"), 1, "bob ran it once");
    let told = received(hub.port, ORCH, "alice:p", "rerouted");
    assert!(
        told.iter().any(|m| m["re"].as_i64() == Some(id)
            && m["text"]
                .as_str()
                .is_some_and(|t| t.contains(&format!("to bob:p as #{new_id}")))),
        "the assigner told where it went: {told:#?}"
    );
    assert_eq!(alice.prompts_with("REROUTE-WAKE"), 0, "alice never ran it");
    assert_eq!(alice.calls().len(), alice_calls, "alice spawned nothing");
    // Asking again (a runner killed before it dropped the contract) moves nothing twice.
    let (st, again) = post(
        "/contracts/reroute",
        json!({"id": id, "session": "alice:p", "reason": "again"}),
    );
    assert_eq!(st, 200, "{again}");
    assert_eq!(again["again"], true, "{again}");
    assert_eq!(again["id"].as_i64(), Some(new_id), "{again}");
    wait_until("alice's record of the contract consumed", LONG, || {
        let (_, d) =
            hub_request(hub.port, "GET", &format!("/delivery?id={id}"), None).unwrap_or_default();
        d.to_string().contains("rerouted to bob:p")
    });
}

/// A pooled seat (`CREW_POOL=k1,k2`, docs/runner.md §12.5): its turn on k1 hits the usage limit,
/// k1 is marked exhausted on the hub, and the seat switches to k2 and redelivers at once — the
/// contract is done on k2 with no park.
#[test]
fn a_pooled_seat_switches_to_a_credential_with_quota() {
    let Some(hub) = drill_hub(false) else {
        return;
    };
    for name in ["k1", "k2"] {
        let (st, r) = hub_request(
            hub.port,
            "POST",
            "/credentials",
            Some(&json!({"name": name, "agent": "claude"})),
        )
        .expect("name the credential");
        assert_eq!(st, 200, "{r}");
    }
    let mut seat = new_seat("claude", "claude").env("CREW_POOL", "k1,k2");
    let mut file = trantor_proto::credentials::CredentialFile::default();
    for (name, key) in [("k1", "one"), ("k2", "two")] {
        file.credentials.insert(
            name.into(),
            trantor_proto::credentials::LocalCredential {
                agent: "claude".into(),
                env: [("FAKE_AGENT_KEY".to_string(), key.to_string())].into(),
            },
        );
    }
    file.save(&seat.bus).expect("credentials file");
    seat.start(&hub.url());
    seat.wait_idle_after(1);
    assert_eq!(
        seat.calls()[0]["env"]["FAKE_AGENT_KEY"],
        "one",
        "the pool's first credential"
    );
    seat.control(
        "if [ \"${FAKE_AGENT_KEY:-}\" = one ]; then FAKE_AGENT_EXIT=1; FAKE_AGENT_OUTPUT='Error: You have hit your usage limit. Try again in 2 hours.'; fi\n",
    );
    let id = hub_send(hub.port, ORCH, "claude:p", PROJECT, "POOL-WAKE: build it");
    wait_until("the done receipt", LONG, || {
        !receipts(hub.port, &seat, ORCH).is_empty()
    });
    assert_eq!(receipts(hub.port, &seat, ORCH)[0]["re"].as_i64(), Some(id));
    let keys: Vec<Value> = seat
        .calls()
        .iter()
        .filter(|c| {
            c["prompt"]
                .as_str()
                .is_some_and(|p| p.contains("POOL-WAKE"))
        })
        .map(|c| c["env"]["FAKE_AGENT_KEY"].clone())
        .collect();
    assert_eq!(keys, [json!("one"), json!("two")], "k1 failed, k2 ran it");
    let (_, v) = hub_request(hub.port, "GET", "/credentials", None).expect("credentials");
    let state: Vec<(Value, Value)> = v["credentials"]
        .as_array()
        .expect("list")
        .iter()
        .map(|c| (c["name"].clone(), c["state"].clone()))
        .collect();
    assert_eq!(
        state,
        [
            (json!("k1"), json!("exhausted")),
            (json!("k2"), json!("ok"))
        ]
    );
    assert!(
        !seat.bus.join("park-claude-p.json").exists(),
        "a pooled seat with quota left does not park"
    );
    // Every credential of the pool exhausted: the seat parks until the earliest reset.
    seat.control(
        "FAKE_AGENT_EXIT=1\nFAKE_AGENT_OUTPUT='Error: You have hit your usage limit. Try again in 1 hours.'\n",
    );
    hub_send(hub.port, ORCH, "claude:p", PROJECT, "POOL-TWO: and this");
    let park_file = seat.bus.join("park-claude-p.json");
    wait_until("the park once the pool is spent", LONG, || {
        park_file.exists()
    });
    let park: Value =
        serde_json::from_str(&std::fs::read_to_string(&park_file).expect("park")).expect("json");
    assert_eq!(park["reason"], "exhausted", "{park}");
    assert_eq!(
        seat.prompts_with("POOL-TWO"),
        1,
        "tried on k2 only: k1 is known exhausted"
    );
    let (_, v) = hub_request(hub.port, "GET", "/credentials", None).expect("credentials");
    assert!(
        v["credentials"]
            .as_array()
            .expect("list")
            .iter()
            .all(|c| c["state"] == "exhausted"),
        "{v}"
    );
}

/// A credential its CLI refuses (docs/runner.md §12.5): the seat that hit it parks `auth` and the
/// hub marks the credential `auth`; another seat on it parks `auth` without spawning its CLI; an
/// operator naming the credential again clears the state.
#[test]
fn a_refused_credential_parks_every_seat_on_it_as_auth() {
    let Some(hub) = drill_hub(false) else {
        return;
    };
    let name = |port| {
        hub_request(
            port,
            "POST",
            "/credentials",
            Some(&json!({"name": "work", "agent": "claude"})),
        )
        .expect("name the credential")
    };
    assert_eq!(name(hub.port).0, 200);
    let root = tempfile::tempdir().expect("tmp");
    let seat = |persona: &str| {
        Seat::in_dir(
            root.path(),
            Driver::Named("claude".into()),
            persona,
            PROJECT,
        )
        .env("RELAY_HOST_ID", "orch")
        .env("TRANTOR_POLL_HOLD_S", "3")
        .env("CREW_CREDENTIAL", "work")
    };
    let (mut a, mut b) = (seat("alice"), seat("bob"));
    a.start(&hub.url());
    b.start(&hub.url());
    a.wait_idle_after(1);
    b.wait_idle_after(1);
    let cred = || {
        let (_, v) = hub_request(hub.port, "GET", "/credentials", None).expect("credentials");
        v["credentials"][0].clone()
    };
    a.control(&once(
        "FAKE_AGENT_EXIT=1\nFAKE_AGENT_OUTPUT='Error: Invalid API key · Please run /login'",
    ));
    hub_send(hub.port, ORCH, "alice:p", PROJECT, "AUTH-A: build it");
    wait_until("the credential marked auth", LONG, || {
        cred()["state"] == "auth"
    });
    assert_eq!(cred()["provedBy"], "alice:p");
    let b_calls = b.calls().len();
    hub_send(hub.port, ORCH, "bob:p", PROJECT, "AUTH-B: and this");
    let b_park = b.bus.join("park-bob-p.json");
    wait_until("seat B parked", LONG, || b_park.exists());
    let park: Value =
        serde_json::from_str(&std::fs::read_to_string(&b_park).expect("park")).expect("json");
    assert_eq!(park["reason"], "auth", "{park}");
    assert_eq!(b.calls().len(), b_calls, "B spawned no turn");
    wait_until("B to hold the contract", LONG, || {
        b.pending_wake_ids().len() == 1
    });
    assert_eq!(b.calls().len(), b_calls, "B spawned no turn");
    let (_, r) = name(hub.port);
    assert_eq!(r["credential"]["state"], "ok", "named again: {r}");
    let said = received(hub.port, "observer:p", "hub:quota", "REFUSED");
    assert_eq!(said.len(), 1, "{said:#?}");
}

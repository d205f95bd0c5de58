//! The seat's faults (issue 20, docs/runner.md §24): a second runner and a stale lock, a CLI
//! that ignores SIGTERM left by a killed runner, a corrupt pending queue, and a hub that is down
//! when a turn starts or ends — each with a clear message, nothing lost, nothing run twice. The
//! real hub and `trantor runner`, the fake agent CLI (only a fake can hang on purpose and ignore
//! SIGTERM); every wait is a condition with a deadline. (A step of the wall clock is a table test
//! of the seat machine: `seat::machine::tests` in the runner crate.)

mod common;

use common::seat::{Driver, Seat, fake_agent_available};
use common::{GroupChild, TestHub, hub_messages, hub_send, wait_until};
use serde_json::Value;
use std::time::Duration;

const PROJECT: &str = "p";
const ORCH: &str = "orch:p";
const LONG: Duration = Duration::from_secs(90);

fn drill_hub() -> Option<TestHub> {
    if !fake_agent_available() {
        return None;
    }
    TestHub::start(false)
}

fn new_seat() -> Seat {
    Seat::new(Driver::Named("claude".into()), "claude", PROJECT)
        .env("RELAY_HOST_ID", "orch")
        .env("TRANTOR_POLL_HOLD_S", "3")
        .env("TRANTOR_HUB_BACKOFF_MAX_MS", "500")
}

fn done_receipts(port: u16, re: i64) -> Vec<Value> {
    hub_messages(port, ORCH)
        .into_iter()
        .filter(|m| {
            m["from"] == "claude:p"
                && m["re"].as_i64() == Some(re)
                && m["text"]
                    .as_str()
                    .is_some_and(|t| t.starts_with("✅ done on"))
        })
        .collect()
}

/// A live process (a zombie waiting for a reaper that never comes, as in a container whose
/// init does not reap, is not alive).
fn pid_alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

#[test]
fn a_second_runner_is_refused_naming_the_holder_take_over_replaces_it_and_a_dead_ones_lock_is_stale()
 {
    let Some(hub) = drill_hub() else {
        return;
    };
    let mut seat = new_seat();
    seat.start(&hub.url());
    seat.wait_idle_after(1);
    let first = seat.runner().expect("runner").pid();

    // A second runner for the same seat stops at once and names the holder.
    let mut second = seat.command(&common::bin(), &hub.url());
    let status = second.status().expect("second runner");
    assert!(!status.success(), "a second runner must refuse");
    let log = seat.runner_log();
    assert!(
        log.contains(&format!(
            "seat claude:p is already run by runner pid {first}"
        )) && log.contains("--take-over"),
        "{log}"
    );
    assert!(seat.alive(), "the holder keeps running");

    // --take-over replaces it.
    let mut taker = seat.command(&common::bin(), &hub.url());
    taker.env("TRANTOR_TAKE_OVER", "1");
    let mut taker = GroupChild::spawn(taker);
    wait_until("the holder to stop", LONG, || !seat.alive());
    wait_until("the take-over to boot", LONG, || {
        seat.runner_log()
            .contains(&format!("took the seat over from runner pid {first}"))
    });
    wait_until("the new runner to wait on the bus", LONG, || {
        seat.runner_log().matches("waiting on the bus as").count() >= 2
    });

    // kill -9 leaves a stale lock: the next runner takes it and says whose it was.
    let taker_pid = taker.pid();
    taker.kill_group();
    seat.start(&hub.url());
    wait_until("a boot over the stale lock", LONG, || {
        seat.runner_log().contains(&format!(
            "seat lock: runner pid {taker_pid} (instance {taker_pid}."
        ))
    });
    let id = hub_send(hub.port, ORCH, "claude:p", PROJECT, "AFTER-STALE: work");
    wait_until("the wake's receipt", LONG, || {
        !done_receipts(hub.port, id).is_empty()
    });
}

#[test]
fn an_orphan_cli_that_ignores_sigterm_is_adopted_ended_after_the_grace_and_its_wake_runs_once_more()
{
    let Some(hub) = drill_hub() else {
        return;
    };
    let mut seat = new_seat().env("TRANTOR_ADOPT_GRACE_MS", "1500").scenario(
        r#"case "$FAKE_AGENT_PROMPT" in
  *STUBBORN*)
    if [ ! -f "$SEAT_STATE/stubborn-once" ]; then
      : > "$SEAT_STATE/stubborn-once"
      trap '' TERM
      sleep 120
    fi;;
esac
"#,
    );
    seat.start(&hub.url());
    seat.wait_idle_after(1);
    seat.control(&seat.record_pid());
    let id = hub_send(hub.port, ORCH, "claude:p", PROJECT, "STUBBORN: long job");
    wait_until("the turn to start", LONG, || {
        seat.prompts_with("STUBBORN") == 1 && !seat.cli_pids().is_empty()
    });
    let orphan = *seat.cli_pids().last().expect("the CLI's pid");
    // kill -9 the runner alone: its CLI lives on, ignoring SIGTERM.
    seat.kill();
    assert!(pid_alive(orphan), "the orphan CLI outlives its runner");
    seat.start(&hub.url());
    wait_until("the redelivered wake's receipt", LONG, || {
        !done_receipts(hub.port, id).is_empty()
    });
    let log = seat.runner_log();
    assert!(log.contains("adopting turn"), "{log}");
    assert!(log.contains("ending its process group (SIGTERM)"), "{log}");
    assert!(log.contains("ignored SIGTERM for 3s — SIGKILL"), "{log}");
    assert!(
        log.contains("predecessor turn unfinished, killed after grace"),
        "{log}"
    );
    assert!(!pid_alive(orphan), "the orphan was ended");
    // Once more, and only once more; never beside the orphan (the kickoff and the redelivery
    // both started after the orphan's group was killed).
    assert_eq!(seat.prompts_with("STUBBORN"), 2);
    assert_eq!(done_receipts(hub.port, id).len(), 1);
    let kill_at = log.find("SIGKILL").unwrap_or(0);
    let second_boot_kickoff = log[kill_at..].find("turn 1 (kickoff");
    assert!(
        second_boot_kickoff.is_some(),
        "the new runner's first turn came after the SIGKILL:\n{log}"
    );
    assert!(seat.pending_wake_ids().is_empty());
}

#[test]
fn a_truncated_pending_queue_is_kept_aside_said_loudly_and_its_wake_comes_back_from_the_hub() {
    let Some(hub) = drill_hub() else {
        return;
    };
    let mut seat = new_seat();
    seat.start(&hub.url());
    seat.wait_idle_after(1);
    seat.control(&format!("{}FAKE_AGENT_SLEEP=60\n", seat.record_pid()));
    let id = hub_send(hub.port, ORCH, "claude:p", PROJECT, "CORRUPT-WAKE: job");
    wait_until("the turn to start", LONG, || {
        seat.prompts_with("CORRUPT-WAKE") == 1
    });
    seat.kill();
    seat.kill_cli_groups();
    let pending = seat.bus.join("pending-claude-p.json");
    std::fs::write(&pending, r#"{"wake":[{"id":"#).expect("truncate the queue");
    seat.control("");
    seat.start(&hub.url());
    let deadline = std::time::Instant::now() + LONG;
    while done_receipts(hub.port, id).is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "no receipt for the wake:\n{}",
            seat.runner_log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let log = seat.runner_log();
    assert!(
        log.contains("is corrupt") && log.contains("kept aside"),
        "{log}"
    );
    let aside = std::fs::read_dir(&seat.bus)
        .expect("bus")
        .flatten()
        .any(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("pending-claude-p.json.corrupt-")
        });
    assert!(aside, "the corrupt queue is kept, not overwritten");
    assert_eq!(
        seat.prompts_with("CORRUPT-WAKE"),
        2,
        "killed once, redelivered once"
    );
    assert_eq!(done_receipts(hub.port, id).len(), 1);
}

#[test]
fn a_hub_down_when_a_turn_starts_and_when_it_ends_loses_no_receipt_and_runs_nothing_twice() {
    let Some(mut hub) = drill_hub() else {
        return;
    };
    let mut seat = new_seat().env("TRANTOR_RETRY_MS", "2500");
    seat.start(&hub.url());
    seat.wait_idle_after(1);

    // Down when the turn ends: the hub dies mid-turn and comes back after the turn was judged.
    seat.control("FAKE_AGENT_SLEEP=3\n");
    let a = hub_send(hub.port, ORCH, "claude:p", PROJECT, "HUB-END: job");
    wait_until("the turn to start", LONG, || {
        seat.prompts_with("HUB-END") == 1
    });
    hub.kill9();
    wait_until("the turn to be judged", LONG, || {
        seat.turn_rows().len() >= 2
    });
    hub.restart();
    wait_until("the receipt after the outage", LONG, || {
        !done_receipts(hub.port, a).is_empty()
    });

    // Down when the turn starts: the first attempt fails, the hub dies, the redelivery runs
    // while it is down.
    seat.control("FAKE_AGENT_EXIT=1\n");
    let b = hub_send(hub.port, ORCH, "claude:p", PROJECT, "HUB-START: job");
    wait_until("the failed attempt", LONG, || {
        seat.prompts_with("HUB-START") == 1 && seat.turn_rows().len() >= 3
    });
    seat.control("");
    hub.kill9();
    wait_until("the redelivery to run with the hub down", LONG, || {
        seat.prompts_with("HUB-START") == 2 && seat.turn_rows().len() >= 4
    });
    hub.restart();
    wait_until("the redelivery's receipt", LONG, || {
        !done_receipts(hub.port, b).is_empty()
    });
    // A moment for a duplicate to show, then count.
    let c = hub_send(hub.port, ORCH, "claude:p", PROJECT, "HUB-AFTER: job");
    wait_until("a later wake's receipt", LONG, || {
        !done_receipts(hub.port, c).is_empty()
    });
    assert_eq!(seat.prompts_with("HUB-END"), 1, "nothing ran twice");
    assert_eq!(seat.prompts_with("HUB-START"), 2, "failed once, ran once");
    assert_eq!(done_receipts(hub.port, a).len(), 1);
    assert_eq!(done_receipts(hub.port, b).len(), 1);
    assert!(seat.pending_wake_ids().is_empty());
}

#[test]
fn a_superseded_runner_exits_3_saying_so_and_runs_no_turn_for_the_wake_it_holds() {
    let Some(hub) = drill_hub() else {
        return;
    };
    let mut seat = new_seat();
    seat.start(&hub.url());
    seat.wait_idle_after(1);

    // Another runner instance takes the seat's fence on the hub (as one on another machine, or
    // one that came back from a partition, would).
    let fence = serde_json::json!({"session": "claude:p", "instance": "usurper"});
    let (status, reply) =
        common::hub_request(hub.port, "POST", "/delivery/fence", Some(&fence)).expect("fence");
    assert_eq!(status, 200, "{reply}");

    // A wake reaches the old runner: its claim is refused, and it stops before any CLI runs.
    let id = hub_send(hub.port, ORCH, "claude:p", PROJECT, "SUPERSEDED-WAKE: job");
    let mut code = None;
    wait_until("the superseded runner to exit", LONG, || {
        code = seat
            .runner()
            .and_then(|r| r.child.try_wait().ok().flatten())
            .map(|s| s.code());
        code.is_some()
    });
    let log = seat.runner_log();
    assert_eq!(code, Some(Some(3)), "exit status 3 (superseded):\n{log}");
    assert!(
        log.contains("superseded: seat claude:p is now run by runner instance usurper")
            && log.contains("stops without running another turn"),
        "{log}"
    );
    assert_eq!(seat.prompts_with("SUPERSEDED-WAKE"), 0, "no turn: {log}");
    let (_, rec) =
        common::hub_request(hub.port, "GET", &format!("/delivery?id={id}"), None).expect("rec");
    let states: Vec<&str> = rec["states"]
        .as_array()
        .map(|a| a.iter().filter_map(|s| s["state"].as_str()).collect())
        .unwrap_or_default();
    assert!(!states.contains(&"started"), "{rec}");
    // The wake stays on its disk, owed.
    assert!(seat.pending_wake_ids().contains(&id), "{}", seat.pending());

    // A runner that takes the seat back fences itself and delivers it, once.
    seat.start(&hub.url());
    wait_until("the wake's receipt", LONG, || {
        !done_receipts(hub.port, id).is_empty()
    });
    assert_eq!(seat.prompts_with("SUPERSEDED-WAKE"), 1);
}

/// A runner killed just after the hub answered its held poll (the chaos run found it under
/// load, docs/runner.md §5.4): the hub moved the seat's delivery ledger past the contract, the
/// runner never wrote it down. Its successor resumes from the saved cursor, and its kickoff's
/// seen-ledger reconcile must not take that ledger move for the agent's own inbox reading: the
/// contract runs, once.
#[test]
fn a_poll_answered_to_a_runner_that_died_before_keeping_it_still_runs_after_the_restart() {
    let Some(hub) = drill_hub() else {
        return;
    };
    let mut seat = new_seat();
    seat.start(&hub.url());
    seat.wait_idle_after(1);
    seat.kill();
    // The contract, and the poll the dead runner had held: answered, so the hub's ledger for
    // the seat moves past it, and never kept.
    let id = hub_send(hub.port, ORCH, "claude:p", PROJECT, "ORPHAN-POLL: job");
    let (st, page) = common::hub_request(
        hub.port,
        "GET",
        "/poll?session=claude%3Ap&since=0&wait=0",
        None,
    )
    .expect("poll");
    assert_eq!(st, 200, "{page}");
    assert!(
        page["messages"]
            .as_array()
            .is_some_and(|a| a.iter().any(|m| m["id"].as_i64() == Some(id))),
        "the stand-in poll took the contract: {page}"
    );
    seat.start(&hub.url());
    wait_until("the contract's receipt after the restart", LONG, || {
        !done_receipts(hub.port, id).is_empty()
    });
    assert_eq!(seat.prompts_with("ORPHAN-POLL"), 1, "ran once");
    assert!(
        !seat
            .runner_log()
            .contains("already read through the seat's own inbox"),
        "{}",
        seat.runner_log()
    );
}

/// A runner killed after its turn record said "consumed" but before its bus reached the hub
/// (docs/runner.md §24.3): the contract was acted on, the hub's record still ends at `started`.
/// The successor finishes the record — one `consumed`, from the hub's open list against the
/// turn record's done ids — and never runs the contract again.
#[test]
fn a_consumed_mark_lost_with_its_runner_is_finished_by_the_successor_and_nothing_runs_again() {
    let Some(hub) = drill_hub() else {
        return;
    };
    let mut seat = new_seat();
    seat.start(&hub.url());
    seat.wait_idle_after(1);
    seat.kill();
    // What the dead runner left: the contract claimed and started on the hub under its
    // instance, and done in its turn record.
    let id = hub_send(hub.port, ORCH, "claude:p", PROJECT, "LOST-MARK: job");
    let post = |path: &str, body: Value| {
        let (st, v) = common::hub_request(hub.port, "POST", path, Some(&body)).expect(path);
        assert!(st < 300, "{path}: {st} {v}");
    };
    post(
        "/delivery/fence",
        serde_json::json!({"session": "claude:p", "instance": "dead.1"}),
    );
    for state in ["claimed", "started"] {
        post(
            "/delivery",
            serde_json::json!({"id": id, "session": "claude:p", "instance": "dead.1",
                               "state": state, "turn": 2}),
        );
    }
    let rec_path = seat
        .bus
        .join(format!("turnrec-{}-{PROJECT}.json", seat.persona));
    let mut rec: Value = serde_json::from_str(
        &std::fs::read_to_string(&rec_path).expect("the first runner's turn record"),
    )
    .expect("turn record json");
    rec["done"]
        .as_array_mut()
        .expect("done ids")
        .push(serde_json::json!(id));
    std::fs::write(&rec_path, rec.to_string()).expect("write the turn record");

    seat.start(&hub.url());
    let states = || common::delivery_states(hub.port, id);
    wait_until("the successor to finish the record", LONG, || {
        states().last().map(String::as_str) == Some("consumed")
    });
    seat.wait_idle_after(2);
    assert_eq!(states(), ["stored", "claimed", "started", "consumed"]);
    assert_eq!(
        seat.prompts_with("LOST-MARK"),
        0,
        "done before: not run again"
    );
}

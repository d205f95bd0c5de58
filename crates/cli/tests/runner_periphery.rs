//! Runner periphery drills (issue 3, drills 3 and 7, plus the no-downgrade drill): the real hub,
//! the real `trantor runner`, and a fake agent CLI (a shell script run through the `command`
//! driver) on temporary directories and free ports. Every wait is a condition with a generous
//! deadline; nothing asserts on timing.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use common::seat::{Driver, Seat, fake_agent_available};
use common::{TestHub, git_in, hub_messages, hub_send, wait_until};

const PROJECT: &str = "drill";
const PERSONA: &str = "worker";
const SESSION: &str = "worker:drill";
const SENDER: &str = "boss:drill";
const LONG: Duration = Duration::from_secs(120);

/// The drills' scenario for the fake agent. A `DRILL7-MIDTURN` prompt holds the turn open until
/// the drill creates `midturn-go`. A prompt carrying `DRILL3-HANG` (and not the follow-up text)
/// writes one file in the worktree and hangs, noting whether it could still see the WIP commit
/// land on its branch while alive — the proof that the snapshot comes before the kill. Every
/// turn notes a leaked `CREW_RELEASE_STATE`.
const SCENARIO: &str = r#"
S="$SEAT_STATE"
P="$FAKE_AGENT_PROMPT"
if env | grep -q '^CREW_RELEASE_STATE='; then : > "$S/leak-$FAKE_AGENT_TURN"; fi
if [[ $P == *DRILL7-MIDTURN* ]]; then
  : > "$S/midturn-started"
  i=0
  while [ ! -f "$S/midturn-go" ] && [ $i -lt 1200 ]; do sleep 0.1; i=$((i + 1)); done
fi
if [[ $P == *DRILL-DOCKER* ]]; then
  card=$(printf '%s' "$P" | grep -o 'your card #[0-9]*' | head -1 | tr -dc 0-9)
  docker run -d --name drilldb postgres > /dev/null
  curl -s -X POST -H 'Content-Type: application/json' \
    -d "{\"id\":$card,\"status\":\"testing\",\"note\":\"db started, verified\",\"by\":\"$RELAY_SESSION\"}" \
    "$RELAY_URL/task/update" > "$S/task-update.json"
fi
if [[ $P == *DRILL3-HANG* && $P != *"cut at the time box"* ]]; then
  echo "half done" > hang-file.txt
  while :; do
    if git log -1 --format=%s 2>/dev/null | grep -q '^wip: cut at box'; then : > "$S/alive-saw-wip"; fi
    sleep 0.1
  done
fi
"#;

/// A fake `docker` client: `ps`, `run` and `stop` over a state file, every call logged, so the
/// janitor can be drilled on a machine without an engine.
const FAKE_DOCKER: &str = r#"#!/bin/sh
S="$SEAT_STATE"
echo "$*" >> "$S/docker-calls"
case "$1" in
  ps) cat "$S/docker-running" 2>/dev/null ;;
  run)
    name=unnamed
    while [ $# -gt 0 ]; do [ "$1" = --name ] && name=$2; shift; done
    id="c$(date +%s%N | tail -c 9)"
    echo "$id $name" >> "$S/docker-running"
    echo "$id" ;;
  stop)
    shift
    for id in "$@"; do
      if grep -q "^$id " "$S/docker-running" 2>/dev/null; then
        grep -v "^$id " "$S/docker-running" > "$S/docker-running.tmp"
        mv "$S/docker-running.tmp" "$S/docker-running"
        echo "$id" >> "$S/docker-stopped"
        echo "$id"
      fi
    done ;;
  *) exit 1 ;;
esac
"#;

/// A drill: a hub and one seat of `worker` on project `drill` through the `command` driver.
struct Drill {
    hub: TestHub,
    seat: Seat,
}

impl Drill {
    /// A drill against our hub, or the original's when `original`; `None` after a SKIP (or a
    /// failure under CI) when a prerequisite is missing.
    fn with_hub(original: bool) -> Option<Drill> {
        if !fake_agent_available() {
            return None;
        }
        let hub = TestHub::start(original)?;
        let seat = Seat::new(Driver::Command, PERSONA, PROJECT)
            .env(
                "CREW_KICKOFF",
                "DRILL-KICKOFF: say hello and end your turn.",
            )
            .scenario(SCENARIO);
        Some(Drill { hub, seat })
    }

    /// Start `<program> runner command <repo>` with the seat's environment plus `extra`.
    fn runner(&mut self, program: &Path, extra: &[(&str, &str)]) {
        let url = self.hub.url();
        self.seat.start_program(program, &url, extra);
    }

    /// The runner's pid.
    fn pid(&mut self) -> u32 {
        self.seat.runner().expect("runner").pid()
    }

    fn prompts_with(&self, marker: &str) -> usize {
        self.seat.prompts_with(marker)
    }

    /// Receipts the sender got from the seat.
    fn receipts(&self) -> usize {
        hub_messages(self.hub.port, SENDER)
            .iter()
            .filter(|m| {
                m["from"] == SESSION && m["text"].as_str().is_some_and(|t| t.contains("done on"))
            })
            .count()
    }

    fn ledger_rows(&self) -> Vec<serde_json::Value> {
        self.seat.ledger()
    }

    fn restart_notices(&self) -> usize {
        hub_messages(self.hub.port, "observer:drill")
            .iter()
            .filter(|m| {
                m["text"]
                    .as_str()
                    .is_some_and(|t| t.contains("runner restarted onto"))
            })
            .count()
    }

    fn log(&self) -> String {
        self.seat.runner_log()
    }
}

fn write_exec(path: &Path, text: &str) {
    // Written beside and renamed over: an atomic replacement, as a package manager does it.
    let tmp = path.with_extension("new");
    std::fs::write(&tmp, text).expect("write");
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    std::fs::rename(&tmp, path).expect("rename");
}

/// An "installed" trantor: answers `--version` itself, otherwise execs the real binary with
/// argv[0] kept (`exec -a`), so the runner's installed path is this wrapper.
fn install_wrapper(path: &Path, version: &str) {
    let real = common::bin();
    write_exec(
        path,
        &format!(
            "#!/bin/bash\nif [ \"$1\" = --version ]; then echo 'trantor {version}'; exit 0; fi\nexec -a \"$0\" '{}' \"$@\"\n",
            real.display()
        ),
    );
}

trantor_testkit::on_both_hubs!(drill3_cut_at_the_box_snapshots_before_the_kill_then_one_follow_up);

fn drill3_cut_at_the_box_snapshots_before_the_kill_then_one_follow_up(original: bool) {
    if let Some(d) = Drill::with_hub(original) {
        drill3(d);
    }
}

fn drill3(mut d: Drill) {
    d.runner(
        &common::bin(),
        &[
            ("TRANTOR_TURN_MAX_MS", "3000"),
            // No liveness extensions: the file the CLI wrote would otherwise keep it "alive".
            ("TRANTOR_TURN_CEILING_MS", "3000"),
        ],
    );
    wait_until("the kickoff turn", LONG, || {
        d.prompts_with("DRILL-KICKOFF") == 1
    });
    let seat_branch = format!("seat/{PERSONA}");
    wait_until("the seat branch", LONG, || {
        trantor_proto::git::git_command(&d.seat.repo)
            .args(["rev-parse", "--verify", "--quiet", &seat_branch])
            .output()
            .is_ok_and(|o| o.status.success())
    });

    hub_send(
        d.hub.port,
        SENDER,
        SESSION,
        PROJECT,
        "DRILL3-HANG: write a file, then keep going",
    );
    wait_until("the receipt after the cut chain", LONG, || {
        d.receipts() >= 1
    });

    // The WIP commit is on the seat branch, with the file the CLI wrote.
    let subjects = git_in(&d.seat.repo, &["log", "--format=%s", &seat_branch]);
    assert!(
        subjects.lines().any(|s| s == "wip: cut at box, 1 files"),
        "seat branch log:\n{subjects}\nrunner log:\n{}",
        d.log()
    );
    let wip = git_in(
        &d.seat.repo,
        &[
            "log",
            "--format=%H",
            "--grep=^wip: cut at box",
            &seat_branch,
        ],
    );
    let wip_sha = wip.lines().next().expect("wip commit");
    let files = git_in(&d.seat.repo, &["show", "--name-only", "--format=", wip_sha]);
    assert_eq!(files, "hang-file.txt");
    // Taken while the CLI was alive: the hanging CLI saw it land.
    assert!(
        d.seat.state.join("alive-saw-wip").exists(),
        "the CLI never saw the WIP commit while alive"
    );
    // Only the seat branch moved; the operator's branch did not.
    assert_eq!(
        git_in(&d.seat.repo, &["log", "--format=%s", "main"]),
        "init"
    );

    // Exactly one follow-up: a later wake runs after the chain, and by then no second
    // follow-up or second hung turn has run.
    hub_send(
        d.hub.port,
        SENDER,
        SESSION,
        PROJECT,
        "DRILL3-LATER: just answer",
    );
    wait_until("the later wake's receipt", LONG, || d.receipts() >= 2);
    assert_eq!(d.prompts_with("DRILL3-HANG"), 1, "the hung turn ran once");
    assert_eq!(
        d.prompts_with("cut at the time box"),
        1,
        "one follow-up turn"
    );
    assert_eq!(d.prompts_with("DRILL3-LATER"), 1);
    assert!(d.seat.alive(), "runner died:\n{}", d.log());
}

trantor_testkit::on_both_hubs!(drill7_newer_install_is_execd_in_place_and_a_downgrade_is_not);

fn drill7_newer_install_is_execd_in_place_and_a_downgrade_is_not(original: bool) {
    if let Some(d) = Drill::with_hub(original) {
        drill7(d);
    }
}

fn drill7(mut d: Drill) {
    let inst = d.seat.root.join("inst");
    std::fs::create_dir_all(&inst).expect("inst");
    let installed = inst.join("trantor");
    install_wrapper(&installed, "0.1.0");
    d.runner(&installed, &[]);
    let pid = d.pid();

    wait_until("the kickoff turn", LONG, || {
        d.prompts_with("DRILL-KICKOFF") == 1
    });
    // The kickoff turn is over once the seat went back to its poll: wait for its ledger row.
    wait_until("the kickoff turn row", LONG, || {
        d.ledger_rows()
            .iter()
            .any(|r| r.get("turn").is_some() && r.get("verdict").is_some())
    });

    // Replace the installed executable with one that reports a newer version.
    install_wrapper(&installed, "0.2.0");
    wait_until("the restart notice", LONG, || d.restart_notices() >= 1);
    wait_until("the new image's boot row", LONG, || {
        d.ledger_rows().iter().filter(|r| r["boot"] == true).count() >= 2
    });
    assert!(d.seat.alive(), "runner died:\n{}", d.log());

    // A later wake is handled by the new image.
    hub_send(
        d.hub.port,
        SENDER,
        SESSION,
        PROJECT,
        "DRILL7-LATER: answer me",
    );
    wait_until("the later wake's receipt", LONG, || d.receipts() >= 1);

    // Then a downgrade (and the same version again) never restarts: the next wake is handled
    // by the same image with no new notice.
    install_wrapper(&installed, "0.1.5");
    hub_send(
        d.hub.port,
        SENDER,
        SESSION,
        PROJECT,
        "DRILL7-AFTER-DOWNGRADE",
    );
    wait_until("the receipt after the downgrade", LONG, || {
        d.receipts() >= 2
    });
    install_wrapper(&installed, "0.2.0");
    hub_send(d.hub.port, SENDER, SESSION, PROJECT, "DRILL7-AFTER-SAME");
    wait_until("the receipt after the same version", LONG, || {
        d.receipts() >= 3
    });

    let rows = d.ledger_rows();
    let boots: Vec<&serde_json::Value> = rows.iter().filter(|r| r["boot"] == true).collect();
    assert_eq!(boots.len(), 2, "one boot row per image:\n{rows:#?}");
    for b in &boots {
        assert_eq!(
            b["pid"].as_u64(),
            Some(u64::from(pid)),
            "same PID across the exec"
        );
    }
    assert_eq!(boots[1]["version"], "0.2.0");
    let restarts: Vec<usize> = rows
        .iter()
        .enumerate()
        .filter(|(_, r)| {
            r["text"]
                .as_str()
                .is_some_and(|t| t.starts_with("runner restarted onto"))
        })
        .map(|(i, _)| i)
        .collect();
    assert_eq!(restarts.len(), 1, "one restart row:\n{rows:#?}");
    assert_eq!(rows[restarts[0]]["text"], "runner restarted onto 0.2.0");
    assert_eq!(d.restart_notices(), 1, "one bus notice");
    // The later wake's turn row comes after the restart: the new image ran it.
    assert!(
        rows[restarts[0] + 1..]
            .iter()
            .any(|r| r.get("turn").is_some() && r.get("verdict").is_some()),
        "no turn after the restart:\n{rows:#?}"
    );
    assert_eq!(d.prompts_with("DRILL-KICKOFF"), 1, "no second kickoff");
    assert_eq!(d.prompts_with("DRILL7-LATER"), 1, "the later wake ran once");
    assert!(
        std::fs::read_dir(&d.seat.state)
            .expect("state")
            .flatten()
            .all(|e| !e.file_name().to_string_lossy().starts_with("leak-")),
        "CREW_RELEASE_STATE leaked into a CLI turn"
    );
    assert_eq!(d.pid(), pid);
    assert!(d.seat.alive(), "runner died:\n{}", d.log());
}

trantor_testkit::on_both_hubs!(
    drill7b_a_mid_turn_bump_waits_for_the_turn_and_a_held_wake_runs_once_on_the_new_image
);

fn drill7b_a_mid_turn_bump_waits_for_the_turn_and_a_held_wake_runs_once_on_the_new_image(
    original: bool,
) {
    if let Some(d) = Drill::with_hub(original) {
        drill7b(d);
    }
}

fn drill7b(mut d: Drill) {
    let inst = d.seat.root.join("inst");
    std::fs::create_dir_all(&inst).expect("inst");
    let installed = inst.join("trantor");
    install_wrapper(&installed, "0.1.0");
    d.runner(&installed, &[]);
    let pid = d.pid();
    let turn_rows = |d: &Drill| -> usize {
        d.ledger_rows()
            .iter()
            .filter(|r| r.get("turn").is_some() && r.get("verdict").is_some())
            .count()
    };
    wait_until("the kickoff turn row", LONG, || turn_rows(&d) >= 1);

    // A bump while a turn runs cannot exec: the turn finishes on the old image first.
    hub_send(
        d.hub.port,
        SENDER,
        SESSION,
        PROJECT,
        "DRILL7-MIDTURN: hold on",
    );
    wait_until("the held-open turn", LONG, || {
        d.seat.state.join("midturn-started").exists()
    });
    install_wrapper(&installed, "0.2.0");
    std::fs::write(d.seat.state.join("midturn-go"), "").expect("go");
    wait_until("the mid-turn wake's receipt", LONG, || d.receipts() >= 1);
    wait_until("the restart after the turn", LONG, || {
        d.restart_notices() >= 1
    });

    // A wake that arrives while a newer install waits is held across the exec and delivered
    // exactly once, by the new image.
    install_wrapper(&installed, "0.3.0");
    hub_send(
        d.hub.port,
        SENDER,
        SESSION,
        PROJECT,
        "DRILL7-HELD: for the new image",
    );
    wait_until("the held wake's receipt", LONG, || d.receipts() >= 2);
    wait_until("the second restart", LONG, || d.restart_notices() >= 2);

    let rows = d.ledger_rows();
    let index = |pred: &dyn Fn(&serde_json::Value) -> bool| rows.iter().position(pred);
    let restarts: Vec<usize> = rows
        .iter()
        .enumerate()
        .filter(|(_, r)| {
            r["text"]
                .as_str()
                .is_some_and(|t| t.starts_with("runner restarted onto"))
        })
        .map(|(i, _)| i)
        .collect();
    assert_eq!(restarts.len(), 2, "{rows:#?}");
    assert_eq!(rows[restarts[0]]["text"], "runner restarted onto 0.2.0");
    assert_eq!(rows[restarts[1]]["text"], "runner restarted onto 0.3.0");
    let midturn = index(&|r| r["turn"] == 2 && r.get("verdict").is_some()).expect("turn 2 row");
    let held = index(&|r| r["turn"] == 3 && r.get("verdict").is_some()).expect("turn 3 row");
    assert!(
        midturn < restarts[0],
        "the mid-turn bump waited for the turn:\n{rows:#?}"
    );
    assert!(
        held > restarts[1],
        "the held wake ran on the new image:\n{rows:#?}"
    );
    let boots: Vec<&serde_json::Value> = rows.iter().filter(|r| r["boot"] == true).collect();
    assert_eq!(boots.len(), 3, "{rows:#?}");
    assert!(
        boots
            .iter()
            .all(|b| b["pid"].as_u64() == Some(u64::from(pid)))
    );
    assert_eq!(d.prompts_with("DRILL7-MIDTURN"), 1);
    assert_eq!(
        d.prompts_with("DRILL7-HELD"),
        1,
        "the held wake ran exactly once"
    );
    assert_eq!(d.prompts_with("DRILL-KICKOFF"), 1, "no second kickoff");
    assert!(d.seat.alive(), "runner died:\n{}", d.log());
}

trantor_testkit::on_both_hubs!(
    drill_docker_janitor_stops_a_cards_containers_when_it_reaches_testing
);

fn drill_docker_janitor_stops_a_cards_containers_when_it_reaches_testing(original: bool) {
    if let Some(d) = Drill::with_hub(original) {
        docker_janitor(d);
    }
}

fn docker_janitor(mut d: Drill) {
    let bin = d.seat.root.join("bin");
    std::fs::create_dir_all(&bin).expect("bin");
    write_exec(&bin.join("docker"), FAKE_DOCKER);
    // A container that was already running before the turn is never touched.
    std::fs::write(d.seat.state.join("docker-running"), "c000old other-stack\n").expect("running");
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    d.runner(&common::bin(), &[("PATH", &path)]);
    wait_until("the kickoff turn", LONG, || {
        d.prompts_with("DRILL-KICKOFF") == 1
    });

    let task = serde_json::json!({
        "project": PROJECT, "title": "bring up the db", "status": "doing",
        "assignee": SESSION, "by": SENDER,
    });
    let (status, reply) =
        common::hub_request(d.hub.port, "POST", "/task", Some(&task)).expect("task");
    assert!(status < 300, "{status} {reply}");
    let card = reply["task"]["id"].as_i64().expect("card id");
    hub_send(
        d.hub.port,
        SENDER,
        SESSION,
        PROJECT,
        &format!("your card #{card}: DRILL-DOCKER start the db, then move the card to testing"),
    );
    let stopped = d.seat.state.join("docker-stopped");
    wait_until("the janitor's stop", LONG, || stopped.exists());
    wait_until("the janitor's notice", LONG, || {
        hub_messages(d.hub.port, "observer:drill").iter().any(|m| {
            m["text"]
                .as_str()
                .is_some_and(|t| t.contains("stopped 1 container(s)") && t.contains("drilldb"))
        })
    });
    let running = std::fs::read_to_string(d.seat.state.join("docker-running")).expect("running");
    assert_eq!(
        running.trim(),
        "c000old other-stack",
        "only the turn's container stopped"
    );
    let calls = std::fs::read_to_string(d.seat.state.join("docker-calls")).expect("calls");
    assert!(
        calls
            .lines()
            .all(|c| !c.starts_with("rm") && !c.contains("volume")),
        "the janitor only ever stops:\n{calls}"
    );
    let record = d.seat.bus.join(format!("docker-{PERSONA}-{PROJECT}.json"));
    wait_until("the emptied record to go", LONG, || !record.exists());
    let rows = d.ledger_rows();
    assert!(
        rows.iter()
            .any(|r| r["containers"] == serde_json::json!(["drilldb"]) && r["card"] == card),
        "the turn row names the container:\n{rows:#?}"
    );
    assert!(d.seat.alive(), "runner died:\n{}", d.log());
}

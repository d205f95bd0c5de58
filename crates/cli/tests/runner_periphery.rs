//! Runner periphery drills (issue 3, drills 3 and 7, plus the no-downgrade drill): the real hub,
//! the real `trantor runner`, and a fake agent CLI (a shell script run through the `command`
//! driver) on temporary directories and free ports. Every wait is a condition with a generous
//! deadline; nothing asserts on timing.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{GroupChild, TestHub, git_in, hub_messages, hub_send, init_git_repo, wait_until};

const PROJECT: &str = "drill";
const PERSONA: &str = "worker";
const SESSION: &str = "worker:drill";
const SENDER: &str = "boss:drill";
const LONG: Duration = Duration::from_secs(120);

/// The fake agent CLI. Each turn copies its prompt to `$DRILL_STATE/prompt-N.txt` and notes a
/// leaked `CREW_RELEASE_STATE`. A `DRILL7-MIDTURN` prompt holds the turn open until the drill
/// creates `midturn-go`. A prompt carrying `DRILL3-HANG` (and not the follow-up text)
/// writes one file in the worktree and hangs, noting whether it could still see the WIP commit
/// land on its branch while alive — the proof that the snapshot comes before the kill.
const FAKE_CLI: &str = r#"#!/bin/sh
S="$DRILL_STATE"
P="${1:-$TRANTOR_PROMPT_FILE}"
mkdir -p "$S/turns"
n=$(ls "$S/turns" | wc -l)
n=$((n + 1))
: > "$S/turns/$n"
cp "$P" "$S/prompt-$n.txt"
if env | grep -q '^CREW_RELEASE_STATE='; then : > "$S/leak-$n"; fi
if grep -q 'DRILL7-MIDTURN' "$P"; then
  : > "$S/midturn-started"
  i=0
  while [ ! -f "$S/midturn-go" ] && [ $i -lt 1200 ]; do sleep 0.1; i=$((i + 1)); done
fi
if grep -q 'DRILL-DOCKER' "$P"; then
  card=$(grep -o 'your card #[0-9]*' "$P" | head -1 | tr -dc 0-9)
  docker run -d --name drilldb postgres > /dev/null
  curl -s -X POST -H 'Content-Type: application/json' \
    -d "{\"id\":$card,\"status\":\"testing\",\"note\":\"db started, verified\",\"by\":\"$RELAY_SESSION\"}" \
    "$RELAY_URL/task/update" > "$S/task-update.json"
fi
if grep -q 'DRILL3-HANG' "$P" && ! grep -q 'cut at the time box' "$P"; then
  echo "half done" > hang-file.txt
  while :; do
    if git log -1 --format=%s 2>/dev/null | grep -q '^wip: cut at box'; then : > "$S/alive-saw-wip"; fi
    sleep 0.1
  done
fi
echo "turn $n done"
"#;

/// A fake `docker` client: `ps`, `run` and `stop` over a state file, every call logged, so the
/// janitor can be drilled on a machine without an engine.
const FAKE_DOCKER: &str = r#"#!/bin/sh
S="$DRILL_STATE"
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

struct Drill {
    tmp: tempfile::TempDir,
    hub: TestHub,
    repo: PathBuf,
    bus: PathBuf,
    state: PathBuf,
    fake: PathBuf,
}

impl Drill {
    /// A drill against our hub.
    fn new() -> Drill {
        Drill::with_hub(false).expect("our hub")
    }

    /// A drill against the original hub; `None` after a SKIP (or a failure under CI) when it
    /// cannot be had.
    fn on_original_hub() -> Option<Drill> {
        Drill::with_hub(true)
    }

    fn with_hub(original: bool) -> Option<Drill> {
        let hub = TestHub::start(original)?;
        let tmp = tempfile::tempdir().expect("tmp");
        let repo = tmp.path().join("repo");
        init_git_repo(&repo);
        let bus = tmp.path().join("bus");
        let state = tmp.path().join("state");
        std::fs::create_dir_all(&state).expect("state");
        std::fs::create_dir_all(tmp.path().join("home")).expect("home");
        let fake = tmp.path().join("fake-agent.sh");
        write_exec(&fake, FAKE_CLI);
        Some(Drill {
            tmp,
            hub,
            repo,
            bus,
            state,
            fake,
        })
    }

    /// `<program> runner command <repo>` with the drill's environment plus `extra`.
    fn runner(&self, program: &Path, extra: &[(&str, &str)]) -> GroupChild {
        let log = std::fs::File::create(self.tmp.path().join("runner.log")).expect("log");
        let mut cmd = Command::new(program);
        cmd.arg("runner")
            .arg("command")
            .arg(&self.repo)
            .env("RELAY_URL", self.hub.url())
            .env("RELAY_PROJECT", PROJECT)
            .env("CREW_PERSONA", PERSONA)
            .env("AGENT_BUS_DIR", &self.bus)
            .env_remove("RELAY_DATA_DIR")
            .env("HOME", self.tmp.path().join("home"))
            .env("CREW_COMMAND", format!("sh {} {{P}}", self.fake.display()))
            .env(
                "CREW_KICKOFF",
                "DRILL-KICKOFF: say hello and end your turn.",
            )
            .env("DRILL_STATE", &self.state)
            .env("TRANTOR_POLL_HOLD_S", "2")
            .env("TRANTOR_NO_DESKTOP_NOTIFY", "1")
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log);
        for (k, v) in extra {
            cmd.env(k, v);
        }
        GroupChild::spawn(cmd)
    }

    fn prompts(&self) -> Vec<String> {
        let mut out = Vec::new();
        for n in 1.. {
            match std::fs::read_to_string(self.state.join(format!("prompt-{n}.txt"))) {
                Ok(p) => out.push(p),
                Err(_) => break,
            }
        }
        out
    }

    fn prompts_with(&self, marker: &str) -> usize {
        self.prompts().iter().filter(|p| p.contains(marker)).count()
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
        let path = self
            .bus
            .join("logs")
            .join(format!("{PERSONA}-{PROJECT}.jsonl"));
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
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
        std::fs::read_to_string(self.tmp.path().join("runner.log")).unwrap_or_default()
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

#[test]
fn drill3_cut_at_the_box_snapshots_before_the_kill_then_one_follow_up() {
    drill3(Drill::new());
}

#[test]
fn drill3_cut_at_the_box_snapshots_before_the_kill_then_one_follow_up_on_the_original_hub() {
    if let Some(d) = Drill::on_original_hub() {
        drill3(d);
    }
}

fn drill3(d: Drill) {
    let mut runner = d.runner(
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
        Command::new("git")
            .arg("-C")
            .arg(&d.repo)
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
    let subjects = git_in(&d.repo, &["log", "--format=%s", &seat_branch]);
    assert!(
        subjects.lines().any(|s| s == "wip: cut at box, 1 files"),
        "seat branch log:\n{subjects}\nrunner log:\n{}",
        d.log()
    );
    let wip = git_in(
        &d.repo,
        &[
            "log",
            "--format=%H",
            "--grep=^wip: cut at box",
            &seat_branch,
        ],
    );
    let wip_sha = wip.lines().next().expect("wip commit");
    let files = git_in(&d.repo, &["show", "--name-only", "--format=", wip_sha]);
    assert_eq!(files, "hang-file.txt");
    // Taken while the CLI was alive: the hanging CLI saw it land.
    assert!(
        d.state.join("alive-saw-wip").exists(),
        "the CLI never saw the WIP commit while alive"
    );
    // Only the seat branch moved; the operator's branch did not.
    assert_eq!(git_in(&d.repo, &["log", "--format=%s", "main"]), "init");

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
    assert!(runner.alive(), "runner died:\n{}", d.log());
}

#[test]
fn drill7_newer_install_is_execd_in_place_and_a_downgrade_is_not() {
    drill7(Drill::new());
}

#[test]
fn drill7_newer_install_is_execd_in_place_and_a_downgrade_is_not_on_the_original_hub() {
    if let Some(d) = Drill::on_original_hub() {
        drill7(d);
    }
}

fn drill7(d: Drill) {
    let inst = d.tmp.path().join("inst");
    std::fs::create_dir_all(&inst).expect("inst");
    let installed = inst.join("trantor");
    install_wrapper(&installed, "0.1.0");
    let mut runner = d.runner(&installed, &[]);
    let pid = runner.pid();

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
    assert!(runner.alive(), "runner died:\n{}", d.log());

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
        std::fs::read_dir(&d.state)
            .expect("state")
            .flatten()
            .all(|e| !e.file_name().to_string_lossy().starts_with("leak-")),
        "CREW_RELEASE_STATE leaked into a CLI turn"
    );
    assert_eq!(runner.pid(), pid);
    assert!(runner.alive(), "runner died:\n{}", d.log());
}

#[test]
fn drill7b_a_mid_turn_bump_waits_for_the_turn_and_a_held_wake_runs_once_on_the_new_image() {
    drill7b(Drill::new());
}

#[test]
fn drill7b_a_mid_turn_bump_waits_for_the_turn_and_a_held_wake_runs_once_on_the_new_image_on_the_original_hub()
 {
    if let Some(d) = Drill::on_original_hub() {
        drill7b(d);
    }
}

fn drill7b(d: Drill) {
    let inst = d.tmp.path().join("inst");
    std::fs::create_dir_all(&inst).expect("inst");
    let installed = inst.join("trantor");
    install_wrapper(&installed, "0.1.0");
    let mut runner = d.runner(&installed, &[]);
    let pid = runner.pid();
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
        d.state.join("midturn-started").exists()
    });
    install_wrapper(&installed, "0.2.0");
    std::fs::write(d.state.join("midturn-go"), "").expect("go");
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
    assert!(runner.alive(), "runner died:\n{}", d.log());
}

#[test]
fn drill_docker_janitor_stops_a_cards_containers_when_it_reaches_testing() {
    docker_janitor(Drill::new());
}

#[test]
fn drill_docker_janitor_stops_a_cards_containers_when_it_reaches_testing_on_the_original_hub() {
    if let Some(d) = Drill::on_original_hub() {
        docker_janitor(d);
    }
}

fn docker_janitor(d: Drill) {
    let bin = d.tmp.path().join("bin");
    std::fs::create_dir_all(&bin).expect("bin");
    write_exec(&bin.join("docker"), FAKE_DOCKER);
    // A container that was already running before the turn is never touched.
    std::fs::write(d.state.join("docker-running"), "c000old other-stack\n").expect("running");
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut runner = d.runner(&common::bin(), &[("PATH", &path)]);
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
    let stopped = d.state.join("docker-stopped");
    wait_until("the janitor's stop", LONG, || stopped.exists());
    wait_until("the janitor's notice", LONG, || {
        hub_messages(d.hub.port, "observer:drill").iter().any(|m| {
            m["text"]
                .as_str()
                .is_some_and(|t| t.contains("stopped 1 container(s)") && t.contains("drilldb"))
        })
    });
    let running = std::fs::read_to_string(d.state.join("docker-running")).expect("running");
    assert_eq!(
        running.trim(),
        "c000old other-stack",
        "only the turn's container stopped"
    );
    let calls = std::fs::read_to_string(d.state.join("docker-calls")).expect("calls");
    assert!(
        calls
            .lines()
            .all(|c| !c.starts_with("rm") && !c.contains("volume")),
        "the janitor only ever stops:\n{calls}"
    );
    let record = d.bus.join(format!("docker-{PERSONA}-{PROJECT}.json"));
    wait_until("the emptied record to go", LONG, || !record.exists());
    let rows = d.ledger_rows();
    assert!(
        rows.iter()
            .any(|r| r["containers"] == serde_json::json!(["drilldb"]) && r["card"] == card),
        "the turn row names the container:\n{rows:#?}"
    );
    assert!(runner.alive(), "runner died:\n{}", d.log());
}

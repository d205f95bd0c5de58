//! The crew loop (issue 8): `trantor integrate`, `harvest`, `sync`, contracts with `base:`,
//! `autonomy` and `policy`, against the real hub and real runners driving a fake agent through
//! the `command` driver, on temporary repositories and bus directories. Every wait is a
//! condition with a deadline.

mod common;

use common::seat::{Driver, Seat, fake_agent_available};
use common::{GroupChild, Hub, git_in, hub_request, init_git_repo, wait_until};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

const PROJECT: &str = "p";
const ORCH: &str = "orch:p";
const LONG: Duration = Duration::from_secs(90);

/// The crew's scenario for the fake agent: says its usage limit is hit while
/// `$SEAT_STATE/exhausted` exists (unless its model is `fresh`); otherwise records the HEAD it
/// started at, then does what the prompt's markers say — `WORK=<file>` writes and commits the
/// file, `WIP=<file>` leaves the file uncommitted.
const SCENARIO: &str = r#"
prompt=$FAKE_AGENT_PROMPT
if [ -f "$SEAT_STATE/exhausted" ] && [ "${CREW_MODEL:-}" != fresh ]; then
  echo "Error: You have hit your usage limit. Try again in 2 hours."
  exit 1
fi
head=$(git rev-parse HEAD)
marker=$(printf '%s' "$prompt" | grep -o 'MARK-[A-Za-z0-9]*' | head -1)
echo "$marker $head" >> "$SEAT_STATE/heads-$CREW_PERSONA.txt"
for f in $(printf '%s' "$prompt" | grep -o 'WORK=[A-Za-z0-9._-]*' | sed 's/WORK=//'); do
  echo "work of $CREW_PERSONA" > "$f"
  git add "$f"
  git -c user.name="$CREW_PERSONA" -c user.email=seat@drill.invalid commit -q -m "$CREW_PERSONA: $f"
done
for f in $(printf '%s' "$prompt" | grep -o 'WIP=[A-Za-z0-9._-]*' | sed 's/WIP=//'); do
  echo "unfinished work of $CREW_PERSONA" > "$f"
done
"#;

/// A project: its main checkout, bus directory, hub and (optionally) seat runners.
struct Crew {
    tmp: tempfile::TempDir,
    hub: Hub,
    repo: PathBuf,
    bus: PathBuf,
    state: PathBuf,
    seats: Vec<Seat>,
}

impl Crew {
    fn new() -> Crew {
        let tmp = tempfile::tempdir().expect("tmp");
        let repo = tmp.path().join("repo");
        init_git_repo(&repo);
        let bus = tmp.path().join("bus");
        let state = tmp.path().join("state");
        std::fs::create_dir_all(&state).expect("state");
        std::fs::create_dir_all(tmp.path().join("home")).expect("home");
        Crew {
            hub: Hub::start(),
            tmp,
            repo,
            bus,
            state,
            seats: Vec::new(),
        }
    }

    /// Commit `path` = `text` on the main checkout.
    fn commit_main(&self, path: &str, text: &str) -> String {
        let p = self.repo.join(path);
        if let Some(d) = p.parent() {
            std::fs::create_dir_all(d).expect("dir");
        }
        std::fs::write(&p, text).expect("write");
        git_in(&self.repo, &["add", path]);
        git_in(
            &self.repo,
            &["commit", "-q", "-m", &format!("main: {path}")],
        );
        self.head("main")
    }

    fn head(&self, rev: &str) -> String {
        git_in(&self.repo, &["rev-parse", rev])
    }

    fn worktree(&self, persona: &str) -> PathBuf {
        self.bus.join("worktrees").join(PROJECT).join(persona)
    }

    /// A seat branch and worktree made by hand (what the runner makes), with one commit.
    fn hand_seat(&self, persona: &str, file: &str, text: &str) -> PathBuf {
        let wt = self.worktree(persona);
        std::fs::create_dir_all(wt.parent().expect("parent")).expect("dir");
        git_in(
            &self.repo,
            &[
                "worktree",
                "add",
                "-q",
                "-b",
                &format!("seat/{persona}"),
                &wt.to_string_lossy(),
                "main",
            ],
        );
        if !file.is_empty() {
            std::fs::write(wt.join(file), text).expect("write");
            git_in(&wt, &["add", file]);
            git_in(&wt, &["commit", "-q", "-m", &format!("{persona}: {file}")]);
        }
        wt
    }

    fn env(&self, cmd: &mut Command) {
        cmd.env("RELAY_URL", self.hub.url())
            .env("RELAY_PROJECT", PROJECT)
            .env("RELAY_SESSION", ORCH)
            .env("AGENT_BUS_DIR", &self.bus)
            .env_remove("RELAY_DATA_DIR")
            .env("HOME", self.tmp.path().join("home"));
    }

    /// Run `trantor <args>` in `dir`; (exit code, stdout, stderr).
    fn trantor_in(
        &self,
        dir: &Path,
        args: &[&str],
        extra: &[(&str, &str)],
    ) -> (i32, String, String) {
        let mut cmd = Command::new(common::bin());
        cmd.args(args).current_dir(dir).stdin(Stdio::null());
        self.env(&mut cmd);
        for (k, v) in extra {
            cmd.env(k, v);
        }
        let out = cmd.output().expect("run trantor");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    fn trantor(&self, args: &[&str]) -> (i32, String, String) {
        self.trantor_in(&self.repo, args, &[])
    }

    /// A seat of `persona` in this crew: the fake agent through the `command` driver.
    fn seat(&self, persona: &str) -> Seat {
        Seat::in_dir(self.tmp.path(), Driver::Command, persona, PROJECT)
            .env("CREW_KICKOFF", "MARK-kickoff: say hello and end your turn.")
            .scenario(SCENARIO)
    }

    /// The variables a seat's runner needs for the fake agent (also given to `trantor swap`,
    /// which passes them on to the replacement).
    fn seat_vars(&self, persona: &str) -> Vec<(String, String)> {
        let mut vars = self.seat(persona).agent_env();
        vars.extend([
            ("TRANTOR_POLL_HOLD_S".into(), "2".into()),
            ("TRANTOR_NO_DESKTOP_NOTIFY".into(), "1".into()),
            ("TRANTOR_LOG".into(), "info".into()),
        ]);
        vars
    }

    /// Start a runner for `persona` with the fake agent through the `command` driver.
    fn start_seat(&mut self, persona: &str) {
        let mut seat = self.seat(persona);
        seat.start(&self.hub.url());
        self.seats.push(seat);
    }

    fn runner_log(&self, persona: &str) -> String {
        self.seats
            .iter()
            .filter(|s| s.persona == persona)
            .map(Seat::runner_log)
            .collect()
    }

    /// `marker head` lines the fake agent of `persona` recorded.
    fn heads(&self, persona: &str) -> Vec<(String, String)> {
        std::fs::read_to_string(self.state.join(format!("heads-{persona}.txt")))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.split_once(' '))
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    fn turn_rows(&self, persona: &str) -> usize {
        std::fs::read_to_string(
            self.bus
                .join("logs")
                .join(format!("{persona}-{PROJECT}.jsonl")),
        )
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|r| r.get("turn").is_some() && r.get("verdict").is_some())
        .count()
    }

    /// Wait until the agent of `persona` ran a turn carrying `mark` and the turn is over.
    fn wait_mark(&self, persona: &str, mark: &str) {
        wait_until(&format!("{persona}: a turn with {mark}"), LONG, || {
            self.heads(persona).iter().any(|(m, _)| m == mark)
        });
        wait_until(
            &format!("{persona}: the turn with {mark} judged"),
            LONG,
            || self.turn_rows(persona) >= self.heads(persona).len(),
        );
        wait_until(&format!("{persona} idle"), LONG, || {
            std::fs::read_to_string(self.bus.join(format!("turnstate-{persona}-{PROJECT}.json")))
                .ok()
                .and_then(|t| serde_json::from_str::<Value>(&t).ok())
                .is_some_and(|v| v["phase"] != "working")
        });
    }

    fn card(&self, title: &str, assignee: &str) -> i64 {
        let body = json!({"title": title, "project": PROJECT, "assignee": assignee,
                          "status": "doing", "by": ORCH});
        let (s, v) = hub_request(self.hub.port, "POST", "/task", Some(&body)).expect("task");
        assert!(s < 300, "{s} {v}");
        v["task"]["id"].as_i64().expect("card id")
    }

    fn card_json(&self, id: i64) -> Value {
        hub_request(self.hub.port, "GET", &format!("/card?id={id}"), None)
            .expect("card")
            .1
    }

    fn receipts(&self) -> Vec<Value> {
        std::fs::read_to_string(self.bus.join("harvest").join(format!("{PROJECT}.jsonl")))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    fn verify(&self, script: &str) {
        self.commit_main(".trantor/verify", script);
    }
}

fn contains(hay: &str, needle: &str) -> bool {
    hay.contains(needle)
}

/// The issue's end-to-end loop: two seats commit their cards' work (one also leaves
/// uncommitted work) → integrate merges both, verifies, writes receipts, notes the cards →
/// sync realigns both → a contract with `base: <sha>` starts the seat there; an unresolvable
/// base blocks its card and says so on the bus.
#[test]
fn two_seats_integrate_verify_receipts_sync_and_a_based_contract() {
    if !fake_agent_available() {
        return;
    }
    let mut crew = Crew::new();
    crew.verify("test -f alpha.txt && test -f beta.txt && test -f beta-wip.txt\n");
    crew.start_seat("alpha");
    crew.start_seat("beta");
    crew.wait_mark("alpha", "MARK-kickoff");
    crew.wait_mark("beta", "MARK-kickoff");

    let ca = crew.card("alpha's file", "alpha:p");
    let cb = crew.card("beta's file", "beta:p");
    common::hub_send(
        crew.hub.port,
        ORCH,
        "alpha:p",
        PROJECT,
        &format!("your card #{ca}: MARK-a WORK=alpha.txt"),
    );
    common::hub_send(
        crew.hub.port,
        ORCH,
        "beta:p",
        PROJECT,
        &format!("your card #{cb}: MARK-b WORK=beta.txt WIP=beta-wip.txt"),
    );
    crew.wait_mark("alpha", "MARK-a");
    crew.wait_mark("beta", "MARK-b");
    assert!(crew.worktree("beta").join("beta-wip.txt").is_file());
    let main0 = crew.head("main");
    // The documented order: the person closes alpha's card before integrating; the card whose
    // work is merged is noted whatever its status.
    let close = json!({"id": ca, "status": "done", "by": ORCH, "drill": "test -f alpha.txt"});
    let (s, v) = hub_request(crew.hub.port, "POST", "/task/update", Some(&close)).expect("close");
    assert!(s < 300, "{s} {v}");

    let (code, out, err) = crew.trantor(&["integrate"]);
    assert_eq!(code, 0, "integrate failed:\n{out}\n{err}");
    assert!(contains(&out, "verify passed"), "{out}");
    let main1 = crew.head("main");
    assert_ne!(main0, main1);
    for f in ["alpha.txt", "beta.txt", "beta-wip.txt"] {
        assert!(crew.repo.join(f).is_file(), "{f} not on main:\n{out}");
    }
    // The uncommitted work was committed authored to its seat.
    assert_eq!(
        git_in(
            &crew.repo,
            &["log", "-1", "--format=%an", "--", "beta-wip.txt"]
        ),
        "beta:p"
    );
    let receipts = crew.receipts();
    for seat in ["alpha", "beta"] {
        let r = receipts
            .iter()
            .find(|r| r["seat"] == seat)
            .unwrap_or_else(|| panic!("no receipt for {seat}: {receipts:?}"));
        assert_eq!(r["branch"], format!("seat/{seat}"));
        assert_eq!(r["by"], ORCH);
        let m = r["mainSha"].as_str().expect("mainSha");
        git_in(&crew.repo, &["merge-base", "--is-ancestor", m, "main"]);
    }
    for id in [ca, cb] {
        let c = crew.card_json(id).to_string();
        assert!(contains(&c, "harvested"), "card #{id} not noted: {c}");
        assert!(
            contains(&out, &format!("#{id}")),
            "receipt lists no #{id}:\n{out}"
        );
    }

    for seat in ["alpha", "beta"] {
        let (code, out, err) = crew.trantor(&["sync", seat]);
        assert_eq!(code, 0, "sync {seat}:\n{out}\n{err}");
        assert_eq!(crew.head(&format!("seat/{seat}")), main1, "{out}");
    }
    // Synced again: nothing to do.
    let (code, out, _) = crew.trantor_in(&crew.worktree("alpha"), &["sync"], &[]);
    assert_eq!(code, 0);
    assert!(contains(&out, "already at main"), "{out}");

    // The integration head moves on; a contract stamped with it starts the seat there.
    let main2 = crew.commit_main("hotfix.txt", "fix\n");
    let cc = crew.card("third", "alpha:p");
    let (code, out, err) = crew.trantor(&[
        "send",
        "alpha:p",
        &format!("your card #{cc}: MARK-c"),
        "--base",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    crew.wait_mark("alpha", "MARK-c");
    let heads = crew.heads("alpha");
    let (_, started) = heads
        .iter()
        .find(|(m, _)| m == "MARK-c")
        .expect("third turn recorded");
    assert_eq!(started, &main2, "the seat did not start at the base");

    // A base the repository lacks blocks the card before any turn and says so on the bus.
    let cd = crew.card("fourth", "alpha:p");
    common::hub_send(
        crew.hub.port,
        ORCH,
        "alpha:p",
        PROJECT,
        &format!("your card #{cd}: MARK-d\nbase: 0123456789abcdef0123456789abcdef01234567"),
    );
    wait_until("the cannot-resolve report", LONG, || {
        common::hub_messages(crew.hub.port, ORCH).iter().any(|m| {
            m["text"]
                .as_str()
                .is_some_and(|t| t.contains("cannot resolve base 0123456789abcdef"))
        })
    });
    assert_eq!(crew.card_json(cd)["task"]["status"], "blocked");
    assert!(!crew.heads("alpha").iter().any(|(m, _)| m == "MARK-d"));
    let _ = crew.runner_log("alpha");
}

/// A pair of seats that touch the same file: the first merges, the second stops with the file
/// named, its branch as it was, and main carrying no trace of it; a seat that clashes with main
/// itself leaves main exactly as it was.
#[test]
fn a_conflicting_pair_stops_the_second_seat_and_main_is_never_half_merged() {
    let crew = Crew::new();
    crew.verify("true\n");
    crew.hand_seat("one", "shared.txt", "one\n");
    let two = crew.hand_seat("two", "shared.txt", "two\n");
    let two_sha = git_in(&two, &["rev-parse", "HEAD"]);
    let (code, out, _) = crew.trantor(&["integrate"]);
    assert_eq!(code, 1, "{out}");
    assert!(contains(&out, "two (seat/two): conflict"), "{out}");
    assert!(contains(&out, "conflicts in shared.txt"), "{out}");
    assert_eq!(
        std::fs::read_to_string(crew.repo.join("shared.txt")).expect("f"),
        "one\n"
    );
    assert_eq!(crew.head("seat/two"), two_sha);
    assert!(git_in(&crew.repo, &["status", "--porcelain"]).is_empty());
    assert!(!crew.receipts().iter().any(|r| r["seat"] == "two"));

    // A seat clashing with main: main does not move at all.
    let crew = Crew::new();
    crew.verify("true\n");
    crew.hand_seat("three", "clash.txt", "seat\n");
    let main0 = crew.commit_main("clash.txt", "main\n");
    let (code, out, _) = crew.trantor(&["integrate"]);
    assert_eq!(code, 1, "{out}");
    assert!(contains(&out, "conflicts in clash.txt"), "{out}");
    assert_eq!(crew.head("main"), main0);
    assert!(git_in(&crew.repo, &["status", "--porcelain"]).is_empty());
}

#[test]
fn integrate_refuses_a_dirty_main_a_detached_head_and_a_seat_worktree() {
    let crew = Crew::new();
    let wt = crew.hand_seat("one", "a.txt", "a\n");
    std::fs::write(crew.repo.join("README.md"), "changed\n").expect("w");
    let main0 = crew.head("main");
    let (code, _, err) = crew.trantor(&["integrate"]);
    assert_eq!(code, 1);
    assert!(contains(&err, "uncommitted changes (README.md)"), "{err}");
    assert_eq!(crew.head("main"), main0);
    git_in(&crew.repo, &["checkout", "-q", "README.md"]);

    git_in(&crew.repo, &["checkout", "-q", "--detach"]);
    let (code, _, err) = crew.trantor(&["integrate"]);
    assert_eq!(code, 1);
    assert!(contains(&err, "detached HEAD"), "{err}");
    git_in(&crew.repo, &["checkout", "-q", "main"]);

    let (code, _, err) = crew.trantor_in(&wt, &["integrate"], &[]);
    assert_eq!(code, 2, "{err}");
    assert!(contains(&err, "seat worktree"), "{err}");
}

#[test]
fn dry_run_changes_nothing_and_a_deleted_worktree_still_merges_its_branch() {
    let crew = Crew::new();
    crew.verify("test -f a.txt\n");
    let wt = crew.hand_seat("one", "a.txt", "a\n");
    std::fs::write(wt.join("wip.txt"), "wip\n").expect("w");
    let main0 = crew.head("main");
    let seat0 = crew.head("seat/one");
    let (code, out, _) = crew.trantor(&["integrate", "--dry-run"]);
    assert_eq!(code, 0, "{out}");
    assert!(contains(&out, "would-merge"), "{out}");
    assert!(contains(&out, "would commit 1 file(s) as one:p"), "{out}");
    assert_eq!(crew.head("main"), main0);
    assert_eq!(crew.head("seat/one"), seat0);
    assert!(wt.join("wip.txt").is_file());

    std::fs::remove_dir_all(&wt).expect("rm worktree");
    let (code, out, _) = crew.trantor(&["integrate"]);
    assert_eq!(code, 0, "{out}");
    assert!(contains(&out, "is gone"), "{out}");
    assert!(crew.repo.join("a.txt").is_file());
    // The deleted worktree's branch is realigned too.
    let (code, out, err) = crew.trantor(&["sync", "one"]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(crew.head("seat/one"), crew.head("main"));
}

/// Sync drops only what a receipt proves harvested: a cherry-pick with `trantor harvest` is
/// dropped; a rewritten branch's new commit, or a receipt whose main commit is gone, is refused
/// by name; a damaged receipts file is refused naming its line.
#[test]
fn sync_refuses_unharvested_commits_and_honours_receipts() {
    let crew = Crew::new();
    let wt = crew.hand_seat("one", "a.txt", "a\n");
    let seat_sha = crew.head("seat/one");

    // Unharvested: refused by name, branch untouched.
    let (code, _, err) = crew.trantor(&["sync", "one"]);
    assert_eq!(code, 1);
    assert!(
        contains(&err, &seat_sha[..7]) && contains(&err, "one: a.txt"),
        "{err}"
    );
    assert_eq!(crew.head("seat/one"), seat_sha);

    // A squash by hand plus its receipt: sync drops the seat commit.
    git_in(&crew.repo, &["cherry-pick", "-x", &seat_sha]);
    let picked = crew.head("main");
    let (code, out, err) = crew.trantor(&["harvest", &seat_sha, "HEAD"]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = crew.trantor_in(&wt, &["sync", "--dry-run"], &[]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(contains(&out, "would move"), "{out}");
    assert_eq!(crew.head("seat/one"), seat_sha);

    // A damaged receipts file is refused, naming the line; nothing moves.
    let file = crew.bus.join("harvest").join("p.jsonl");
    let good = std::fs::read_to_string(&file).expect("receipts");
    std::fs::write(&file, format!("{{not json\n{good}")).expect("w");
    let (code, _, err) = crew.trantor(&["sync", "one"]);
    assert_eq!(code, 1);
    assert!(contains(&err, "line 1 is not a receipt"), "{err}");
    assert_eq!(crew.head("seat/one"), seat_sha);
    // A tail cut short by a crash is only a note.
    std::fs::write(&file, format!("{good}{{\"project\":\"p\",\"se")).expect("w");
    let (code, out, err) = crew.trantor(&["sync", "one"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(contains(&out, "cut short"), "{out}");
    assert_eq!(crew.head("seat/one"), picked);

    // A branch rewritten outside trantor: its new commit has no receipt.
    std::fs::write(wt.join("b.txt"), "b\n").expect("w");
    git_in(&wt, &["add", "b.txt"]);
    git_in(&wt, &["commit", "-q", "-m", "one: b.txt"]);
    git_in(
        &wt,
        &["commit", "-q", "--amend", "-m", "one: b.txt (amended)"],
    );
    let (code, _, err) = crew.trantor(&["sync", "one"]);
    assert_eq!(code, 1);
    assert!(contains(&err, "one: b.txt (amended)"), "{err}");

    // Main rewritten under a receipt: the receipt no longer counts.
    let c2 = git_in(&wt, &["rev-parse", "HEAD"]);
    git_in(&crew.repo, &["cherry-pick", "-x", &c2]);
    let (code, _, _) = crew.trantor(&["harvest", &c2, "HEAD", "--seat", "one"]);
    assert_eq!(code, 0);
    git_in(&crew.repo, &["reset", "-q", "--hard", "HEAD~1"]);
    let (code, _, err) = crew.trantor(&["sync", "one"]);
    assert_eq!(code, 1);
    assert!(contains(&err, "no longer contains"), "{err}");
}

/// Two integrates at once: the second is refused while the first holds the lock; a kill -9 of
/// the first mid-verify leaves main and the seat branch as they were, and the next run
/// completes. A run killed after moving main but before its receipts is finished by the next.
#[test]
fn concurrent_and_killed_integrates_are_all_or_nothing() {
    let crew = Crew::new();
    crew.verify("if [ -n \"$HOLD\" ]; then touch \"$HOLD\"; sleep 60; fi\ntest -f a.txt\n");
    crew.hand_seat("one", "a.txt", "a\n");
    let main0 = crew.head("main");
    let seat0 = crew.head("seat/one");
    let hold = crew.tmp.path().join("holding");
    let mut cmd = Command::new(common::bin());
    cmd.arg("integrate")
        .current_dir(&crew.repo)
        .env("HOLD", &hold)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    crew.env(&mut cmd);
    let mut first = GroupChild::spawn(cmd);
    wait_until("the first integrate to be verifying", LONG, || {
        hold.exists()
    });

    let (code, _, err) = crew.trantor(&["integrate"]);
    assert_eq!(code, 1);
    assert!(contains(&err, "another trantor integrate"), "{err}");

    first.kill_group();
    assert_eq!(crew.head("main"), main0);
    assert_eq!(crew.head("seat/one"), seat0);
    assert!(git_in(&crew.repo, &["status", "--porcelain"]).is_empty());
    assert!(crew.receipts().is_empty());

    let (code, out, err) = crew.trantor(&["integrate"]);
    assert_eq!(code, 0, "{out}{err}");
    let main1 = crew.head("main");
    assert_ne!(main1, main0);
    assert_eq!(crew.receipts().len(), 1);

    // Killed between the move and the receipts: the journal is finished by the next run.
    let journal = json!({"branch": "main", "before": main0, "after": main1, "receipts": [{
        "project": "p", "seat": "one", "seatSha": "f".repeat(40), "mainSha": main1,
        "branch": "seat/one", "into": "main", "cards": [], "by": ORCH, "ts": 1}]});
    std::fs::write(
        crew.bus.join("integrate-p.journal.json"),
        journal.to_string(),
    )
    .expect("w");
    let (code, out, err) = crew.trantor(&["integrate"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(contains(&out, "wrote its 1 missing receipt(s)"), "{out}");
    assert_eq!(crew.receipts().len(), 2);
    assert!(!crew.bus.join("integrate-p.journal.json").exists());
}

#[test]
fn a_failing_verify_leaves_main_and_prints_the_last_lines() {
    let crew = Crew::new();
    crew.verify("echo checking; echo 'assertion failed: the answer'; exit 3\n");
    crew.hand_seat("one", "a.txt", "a\n");
    let main0 = crew.head("main");
    let (code, out, _) = crew.trantor(&["integrate"]);
    assert_eq!(code, 1, "{out}");
    assert!(contains(&out, "verify FAILED"), "{out}");
    assert!(contains(&out, "assertion failed: the answer"), "{out}");
    assert_eq!(crew.head("main"), main0);
    assert!(crew.receipts().is_empty());
}

/// A Python project with no declared verify: the detected command is the interpreter's module
/// form, and its failure says how to declare the one that passes; a `.trantor/verify` written
/// but not committed is then used, and said so.
#[test]
fn a_detected_verify_failure_says_how_to_declare_one_and_an_uncommitted_one_is_used() {
    let crew = Crew::new();
    crew.commit_main("pyproject.toml", "[project]\nname = \"demo\"\n");
    crew.hand_seat("one", "a.txt", "a\n");
    let main0 = crew.head("main");
    let (code, out, _) = crew.trantor(&["integrate"]);
    assert_eq!(code, 1, "{out}");
    assert!(contains(&out, " -m pytest` (detected)"), "{out}");
    assert!(contains(&out, "was detected, not declared"), "{out}");
    assert!(contains(&out, "in .trantor/verify and commit it"), "{out}");
    assert_eq!(crew.head("main"), main0);

    std::fs::create_dir_all(crew.repo.join(".trantor")).expect("mkdir");
    std::fs::write(crew.repo.join(".trantor/verify"), "test -f a.txt\n").expect("write");
    let (code, out, err) = crew.trantor(&["integrate"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(contains(&out, "verify passed: `test -f a.txt`"), "{out}");
    assert!(
        contains(&out, "not committed: read from the main checkout"),
        "{out}"
    );
    assert_ne!(crew.head("main"), main0);
}

/// The dials: commit off stops integrate naming the dial; push on pushes after verify.
#[test]
fn autonomy_dials_gate_commit_and_push() {
    let crew = Crew::new();
    crew.verify("true\n");
    crew.hand_seat("one", "a.txt", "a\n");
    let main0 = crew.head("main");
    let (code, out, _) = crew.trantor(&["autonomy"]);
    assert_eq!(code, 0);
    assert!(contains(&out, "commit on · push off"), "{out}");
    let (code, _, _) = crew.trantor(&["autonomy", "set", "commit", "off"]);
    assert_eq!(code, 0);
    let (code, out, _) = crew.trantor(&["integrate"]);
    assert_eq!(code, 1);
    assert!(contains(&out, "stopped by the commit dial"), "{out}");
    assert_eq!(crew.head("main"), main0);

    let (code, _, err) = crew.trantor(&["autonomy", "set", "sideways", "on"]);
    assert_eq!(code, 2, "{err}");

    crew.trantor(&["autonomy", "set", "commit", "on"]);
    let (code, out, _) = crew.trantor(&["integrate"]);
    assert_eq!(code, 0, "{out}");
    assert!(contains(&out, "not pushed: the push dial is off"), "{out}");

    // A bare remote; push on.
    let remote = crew.tmp.path().join("remote.git");
    git_in(
        crew.tmp.path(),
        &["init", "-q", "--bare", &remote.to_string_lossy()],
    );
    git_in(
        &crew.repo,
        &["remote", "add", "origin", &remote.to_string_lossy()],
    );
    git_in(&crew.repo, &["push", "-q", "-u", "origin", "main"]);
    crew.trantor(&["autonomy", "set", "push", "on"]);
    crew.hand_seat("two", "b.txt", "b\n");
    let (code, out, _) = crew.trantor(&["integrate"]);
    assert_eq!(code, 0, "{out}");
    assert!(contains(&out, "pushed main"), "{out}");
    assert_eq!(git_in(&remote, &["rev-parse", "main"]), crew.head("main"));
}

#[test]
fn policy_link_is_recorded_shown_and_unlinked() {
    let crew = Crew::new();
    let (code, _, err) = crew.trantor(&["policy", "link", "p", "q", "--reason", "shared api"]);
    assert_eq!(code, 0, "{err}");
    let (code, out, _) = crew.trantor(&["policy", "show"]);
    assert_eq!(code, 0);
    assert!(contains(&out, "p ↔ q — shared api (by orch:p"), "{out}");
    let (_, v) = hub_request(crew.hub.port, "GET", "/policy", None).expect("policy");
    assert_eq!(v["links"][0]["declaredBy"], ORCH);
    let (code, _, _) = crew.trantor(&["policy", "unlink", "p", "q"]);
    assert_eq!(code, 0);
    let (code, _, err) = crew.trantor(&["policy", "unlink", "p", "q"]);
    assert_eq!(code, 1);
    assert!(contains(&err, "were not linked"), "{err}");
}

/// A contract from another project is refused by the seat's runner (the sender is told to link
/// the projects); after `trantor policy link` the next one goes through, with no restart.
#[test]
fn policy_link_lets_a_refused_cross_project_contract_through() {
    if !fake_agent_available() {
        return;
    }
    let mut crew = Crew::new();
    crew.start_seat("alpha");
    crew.wait_mark("alpha", "MARK-kickoff");
    common::hub_send(
        crew.hub.port,
        "orch:other",
        "alpha:p",
        "other",
        "MARK-x1 do our work",
    );
    wait_until("the cross-project refusal", LONG, || {
        common::hub_messages(crew.hub.port, "orch:other")
            .iter()
            .any(|m| {
                m["text"].as_str().is_some_and(|t| {
                    t.contains("cross-project") && t.contains("policy link p other")
                })
            })
    });
    let (code, _, err) =
        crew.trantor(&["policy", "link", "p", "other", "--reason", "shared client"]);
    assert_eq!(code, 0, "{err}");
    common::hub_send(
        crew.hub.port,
        "orch:other",
        "alpha:p",
        "other",
        "MARK-x2 linked now",
    );
    crew.wait_mark("alpha", "MARK-x2");
    assert!(!crew.heads("alpha").iter().any(|(m, _)| m == "MARK-x1"));
}

/// An exhausted seat swapped for another model keeps its held wake (delivered by the
/// replacement), its worktree, and its cards (noted); the bus says who replaced whom.
#[test]
fn swap_of_an_exhausted_seat_keeps_its_queue_and_cards() {
    if !fake_agent_available() {
        return;
    }
    let mut crew = Crew::new();
    crew.start_seat("alpha");
    crew.wait_mark("alpha", "MARK-kickoff");
    std::fs::write(crew.state.join("exhausted"), "").expect("w");
    let card = crew.card("held work", "alpha:p");
    let wake = common::hub_send(
        crew.hub.port,
        ORCH,
        "alpha:p",
        PROJECT,
        &format!("your card #{card}: MARK-q WORK=q.txt"),
    );
    let park = crew.bus.join("park-alpha-p.json");
    wait_until("the exhausted park", LONG, || park.exists());
    let pending =
        || std::fs::read_to_string(crew.bus.join("pending-alpha-p.json")).unwrap_or_default();
    assert!(
        pending().contains(&format!("\"id\":{wake}")),
        "{}",
        pending()
    );
    let old_pid = crew.seats[0].runner().expect("runner").pid();

    let vars = crew.seat_vars("alpha");
    let vars: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let (code, out, err) = crew.trantor_in(&crew.repo, &["swap", "alpha", "command:fresh"], &vars);
    let _reaper = Reaper(crew.bus.join("seats").join(format!("alpha-{PROJECT}.json")));
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("alpha:p now runs command:fresh, replacing alpha"),
        "{out}"
    );
    assert!(
        !crew.seats[0].alive(),
        "the old runner {old_pid} still runs"
    );

    crew.wait_mark("alpha", "MARK-q");
    wait_until("q.txt on the seat branch", LONG, || {
        git_in(&crew.repo, &["ls-tree", "--name-only", "seat/alpha"]).contains("q.txt")
    });
    let c = crew.card_json(card);
    assert_eq!(c["task"]["assignee"], "alpha:p");
    assert!(
        c.to_string().contains("swapped: alpha → command:fresh"),
        "{c}"
    );
    assert!(
        common::hub_messages(crew.hub.port, "anyone:p")
            .iter()
            .any(|m| {
                m["text"]
                    .as_str()
                    .is_some_and(|t| t.contains("now runs command:fresh"))
            })
    );
}

/// Kills the runner named in a seat record (the one `trantor swap` started) when dropped.
struct Reaper(PathBuf);

impl Drop for Reaper {
    fn drop(&mut self) {
        let pid = std::fs::read_to_string(&self.0)
            .ok()
            .and_then(|t| serde_json::from_str::<Value>(&t).ok())
            .and_then(|v| v["pid"].as_i64())
            .and_then(|p| i32::try_from(p).ok());
        if let Some(pid) = pid {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

/// The gate routes on the wire: add, dedup, a done move refused with 409 naming the gate,
/// resolve (404 from another project), `all=1` shows resolved gates.
#[test]
fn verify_gate_routes_block_done_until_resolved() {
    let hub = Hub::start();
    let post = |b: Value| hub_request(hub.port, "POST", "/verify-gate", Some(&b)).expect("gate");
    let (s, v) = hub_request(
        hub.port,
        "POST",
        "/task",
        Some(
            &json!({"title": "t", "project": "p", "assignee": "a:p", "by": ORCH,
                     "drill": "cargo test"}),
        ),
    )
    .expect("task");
    assert!(s < 300, "{v}");
    let card = v["task"]["id"].as_i64().expect("id");
    let (s, v) = post(json!({"claim": "it is safe", "card": card, "by": ORCH}));
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["gate"]["project"], "p");
    assert_eq!(v["gate"]["status"], "open");
    let id = v["gate"]["id"].as_i64().expect("gate id");
    let (_, v) = post(json!({"claim": "it is safe", "by": ORCH}));
    assert_eq!(v["dedup"], true);
    let (s, _) = post(json!({"by": ORCH}));
    assert_eq!(s, 400);
    let done = json!({"id": card, "status": "done", "by": ORCH, "note": "Drill: cargo test"});
    let (s, v) = hub_request(hub.port, "POST", "/task/update", Some(&done)).expect("move");
    assert_eq!(s, 409, "{v}");
    assert!(
        v["error"]
            .as_str()
            .is_some_and(|e| e.contains(&format!("gate #{id}"))),
        "{v}"
    );
    let (s, _) = post(json!({"resolve": true, "id": id, "project": "other", "by": ORCH}));
    assert_eq!(s, 404);
    let (s, v) =
        post(json!({"resolve": true, "id": id, "status": "waived", "note": "ok", "by": ORCH}));
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["gate"]["status"], "waived");
    let (_, v) = hub_request(hub.port, "GET", "/verify-gates?project=p", None).expect("list");
    assert_eq!(v["gates"].as_array().map(Vec::len), Some(0));
    let (_, v) = hub_request(hub.port, "GET", "/verify-gates?project=p&all=1", None).expect("list");
    assert_eq!(v["gates"][0]["resolvedNote"], "ok");
    let (s, v) = hub_request(hub.port, "POST", "/task/update", Some(&done)).expect("move");
    assert!(s < 300, "{v}");
}

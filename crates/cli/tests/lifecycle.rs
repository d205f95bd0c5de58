//! `trantor up`, `down`, `seat-why` with a fake agent CLI, and `trantor demo`.

mod common;

use common::{bin, free_port};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// A temporary machine: HOME (with the bus dir under it), a PATH holding fake agent CLIs, a
/// project directory and a hub URL nobody serves yet. Whatever `trantor up` started is stopped
/// when it is dropped, even if the test failed half-way.
struct Machine {
    tmp: tempfile::TempDir,
    url: String,
    tmux_dir: PathBuf,
}

impl Machine {
    fn new() -> Machine {
        let tmp = tempfile::tempdir().expect("tmp");
        let bin_dir = tmp.path().join("bin");
        std::fs::create_dir_all(&bin_dir).expect("bin");
        std::fs::create_dir_all(tmp.path().join("home")).expect("home");
        std::fs::create_dir_all(tmp.path().join("shop")).expect("project");
        let fake = common::seat::fake_agent();
        for name in ["claude", "codex"] {
            std::os::unix::fs::symlink(&fake, bin_dir.join(name)).expect("symlink");
        }
        let tmux_dir = tmp.path().join("tmux");
        std::fs::create_dir_all(&tmux_dir).expect("tmux dir");
        Machine {
            url: format!("http://127.0.0.1:{}", free_port()),
            tmp,
            tmux_dir,
        }
    }

    fn home(&self) -> PathBuf {
        self.tmp.path().join("home")
    }

    fn bus(&self) -> PathBuf {
        self.home().join(".agent-bus")
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(bin());
        c.args(args)
            .current_dir(self.tmp.path().join("shop"))
            .env("HOME", self.home())
            .env(
                "PATH",
                format!(
                    "{}:/usr/local/bin:/usr/bin:/bin",
                    self.tmp.path().join("bin").display()
                ),
            )
            .env("RELAY_URL", &self.url)
            .env("TMUX_TMPDIR", &self.tmux_dir)
            .env("FAKE_AGENT_LOG", self.tmp.path().join("fake.jsonl"))
            .env("TRANTOR_LOG", "info");
        for k in [
            "RELAY_PROJECT",
            "RELAY_SESSION",
            "RELAY_AGENT",
            "AGENT_BUS_DIR",
            "RELAY_DATA_DIR",
            "CREW_COMMAND",
            "TMUX",
            "TRANTOR_NO_TMUX",
        ] {
            c.env_remove(k);
        }
        c
    }

    fn run(&self, args: &[&str]) -> Output {
        self.cmd(args).output().expect("run trantor")
    }

    fn kill_everything(&self) {
        let mut pids = Vec::new();
        if let Ok(rd) = std::fs::read_dir(self.bus().join("seats")) {
            for e in rd.flatten() {
                if let Ok(v) = serde_json::from_slice::<serde_json::Value>(
                    &std::fs::read(e.path()).unwrap_or_default(),
                ) && let Some(p) = v.get("pid").and_then(|p| p.as_u64())
                {
                    pids.push(p);
                }
            }
        }
        if let Ok(text) = std::fs::read_to_string(self.bus().join("logs/claude-shop.jsonl")) {
            for l in text.lines() {
                if let Ok(v) = serde_json::from_str::<serde_json::Value>(l)
                    && let Some(p) = v.get("pid").and_then(|p| p.as_u64())
                {
                    pids.push(p);
                }
            }
        }
        for p in pids {
            let _ = Command::new("kill").arg("-9").arg(p.to_string()).output();
        }
        let _ = Command::new("tmux")
            .arg("kill-server")
            .env("TMUX_TMPDIR", &self.tmux_dir)
            .env_remove("TMUX")
            .output();
    }
}

impl Drop for Machine {
    fn drop(&mut self) {
        let _ = self.run(&["down", "--all", "--hub"]);
        self.kill_everything();
    }
}

fn out(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn up_seat_why_down_as_background_processes() {
    // python3 runs the fake agent.
    if !common::require_tool("python3") {
        return;
    }
    let m = Machine::new();
    let o = m.run(&["up", "claude", "codex:gpt-5", "--no-tmux", "--wait", "60"]);
    let text = out(&o);
    assert_eq!(o.status.code(), Some(0), "{text}");
    assert!(
        text.contains("no hub answered") && text.contains("started one"),
        "{text}"
    );
    assert!(
        text.contains("claude:shop") && text.contains("codex:shop"),
        "{text}"
    );
    assert_eq!(text.matches("✓ live").count(), 2, "{text}");
    assert!(text.contains("2 of 2 seat(s) up for shop"), "{text}");
    assert!(m.bus().join("logs/runner-claude-shop.log").exists());

    // The codex seat got its model.
    let peers = m.run(&["peers", "--json"]);
    let j: serde_json::Value = serde_json::from_slice(&peers.stdout).expect("peers json");
    let codex = j["peers"]
        .as_array()
        .and_then(|p| p.iter().find(|x| x["session"] == "codex:shop").cloned())
        .expect("codex peer");
    assert_eq!(codex["model"], "gpt-5", "{codex}");

    let o = m.run(&["seat-why", "claude"]);
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));
    assert!(
        out(&o).contains("claude:shop — live") && out(&o).contains("runner: pid"),
        "{}",
        out(&o)
    );

    // Starting it again is a no-op.
    let o = m.run(&["up", "claude", "--no-tmux"]);
    assert!(out(&o).contains("already running"), "{}", out(&o));

    let o = m.run(&["down", "codex"]);
    assert!(
        o.status.success() && out(&o).contains("codex:shop") && out(&o).contains("stopped"),
        "{}",
        out(&o)
    );
    let o = m.run(&["seat-why", "codex", "--json"]);
    assert_eq!(o.status.code(), Some(1));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(j["state"], "no runner", "{j}");
    assert!(
        j["advice"].to_string().contains("trantor up codex:gpt-5"),
        "{j}"
    );

    let o = m.run(&["down"]);
    assert!(
        out(&o).contains("claude:shop") && out(&o).contains("stopped"),
        "{}",
        out(&o)
    );
    // Without --hub the hub up started stays, and down says so and how to stop it.
    assert!(
        out(&o).contains("left running") && out(&o).contains("trantor down --hub"),
        "{}",
        out(&o)
    );
    let o = m.run(&["down", "--hub"]);
    assert!(
        out(&o).contains("hub") && out(&o).contains("stopped"),
        "{}",
        out(&o)
    );
    let o = m.run(&["peers"]);
    assert_eq!(
        o.status.code(),
        Some(3),
        "the hub up started is gone: {}",
        out(&o)
    );
}

#[test]
fn up_in_tmux_one_window_per_seat() {
    if !common::require_tools(&["python3", "tmux"]) {
        return;
    }
    let m = Machine::new();
    let o = m.run(&["up", "claude", "codex", "--wait", "60"]);
    let text = out(&o);
    assert_eq!(o.status.code(), Some(0), "{text}");
    assert!(text.contains("tmux session trantor-shop"), "{text}");
    let windows = || {
        let o = Command::new("tmux")
            .args([
                "list-windows",
                "-t",
                "=trantor-shop",
                "-F",
                "#{window_name}",
            ])
            .env("TMUX_TMPDIR", &m.tmux_dir)
            .env_remove("TMUX")
            .output()
            .expect("tmux");
        String::from_utf8_lossy(&o.stdout).to_string()
    };
    let w = windows();
    assert!(
        w.lines().any(|l| l == "claude") && w.lines().any(|l| l == "codex"),
        "{w}"
    );
    let o = m.run(&["seat-why", "codex"]);
    assert!(out(&o).contains("codex:shop — live"), "{}", out(&o));

    let o = m.run(&["down", "codex"]);
    assert!(
        out(&o).contains("tmux window trantor-shop:codex closed"),
        "{}",
        out(&o)
    );
    let w = windows();
    assert!(
        !w.lines().any(|l| l == "codex") && w.lines().any(|l| l == "claude"),
        "{w}"
    );
    let o = m.run(&["down", "--all", "--hub"]);
    assert!(o.status.success(), "{}", out(&o));
}

/// `up` tells the truth: under a tmux server that was already running (whose environment is not
/// the caller's), a seat whose CLI needs a credential from the person's environment gets it and
/// comes up live once its kickoff turn ran; without the variable its CLI answers "Not logged in"
/// and `up` names the seat and the reason and exits 1, as `seat-why` does.
#[test]
fn up_in_tmux_passes_the_persons_environment_and_refuses_a_seat_that_cannot_work() {
    if !common::require_tools(&["python3", "tmux"]) {
        return;
    }
    let m = Machine::new();
    // A tmux server started earlier, from an environment without the credential.
    let st = Command::new("tmux")
        .args(["new-session", "-d", "-s", "bystander"])
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", m.home())
        .env("TMUX_TMPDIR", &m.tmux_dir)
        .status()
        .expect("tmux");
    assert!(st.success(), "a tmux server runs");
    // The CLI refuses a turn without SEAT_API_KEY, as Claude Code does without its login.
    let scenario = m.tmp.path().join("needs-key.sh");
    std::fs::write(
        &scenario,
        "if [ \"${SEAT_API_KEY:-}\" != \"sk-test-123\" ]; then\n  echo 'Not logged in · Please run /login' >&2\n  exit 1\nfi\n",
    )
    .expect("scenario");
    let scenario = scenario.to_string_lossy().to_string();

    let mut c = m.cmd(&["up", "claude", "--wait", "60"]);
    c.env("FAKE_AGENT_SCENARIO", &scenario)
        .env("SEAT_API_KEY", "sk-test-123")
        .env("RELAY_SESSION", "me:elsewhere")
        .env("TRANTOR_SEAT", "not-this-one");
    let o = c.output().expect("up");
    let text = out(&o);
    assert_eq!(o.status.code(), Some(0), "{text}");
    assert!(
        text.contains("claude:shop") && text.contains("✓ live"),
        "{text}"
    );
    // The kickoff turn ran with the credential, and the seat's identity is its own.
    let calls = std::fs::read_to_string(m.tmp.path().join("fake.jsonl")).expect("fake log");
    let first: serde_json::Value =
        serde_json::from_str(calls.lines().next().expect("a call")).expect("json");
    assert_eq!(first["env"]["RELAY_SESSION"], "claude:shop", "{first}");
    assert_eq!(first["env"]["TRANTOR_SEAT"], "shop", "{first}");
    let o = m.run(&["seat-why", "claude"]);
    assert!(out(&o).contains("claude:shop — live"), "{}", out(&o));
    // The environment script that carried the credential into tmux is gone.
    let leftover: Vec<_> = std::fs::read_dir(m.bus().join("logs"))
        .expect("logs")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".env.sh"))
        .collect();
    assert!(leftover.is_empty(), "{leftover:?}");
    let o = m.run(&["down", "claude"]);
    assert!(o.status.success(), "{}", out(&o));

    // Without the variable: loud, named, non-zero (its output, after those checks).
    let up_without_key = || {
        let mut c = m.cmd(&["up", "claude", "--wait", "60"]);
        c.env("FAKE_AGENT_SCENARIO", &scenario)
            .env_remove("SEAT_API_KEY");
        let o = c.output().expect("up");
        let text = out(&o);
        assert_eq!(o.status.code(), Some(1), "{text}");
        assert!(text.contains("Not logged in"), "{text}");
        assert!(!text.contains("✓ live"), "{text}");
        assert!(text.contains("0 of 1 seat(s) up"), "{text}");
        text
    };
    let text = up_without_key();
    assert!(
        text.contains("claude:shop") && text.contains("cannot run a turn"),
        "{text}"
    );
    let o = m.run(&["seat-why", "claude"]);
    assert_eq!(o.status.code(), Some(1), "{}", out(&o));
    assert!(
        out(&o).contains("claude:shop — cannot run a turn") && out(&o).contains("Not logged in"),
        "{}",
        out(&o)
    );
    // Asked again while that runner still runs: running is not live, and the reason stays.
    let text = up_without_key();
    assert!(
        text.contains("already running") && text.contains("its last turn failed"),
        "{text}"
    );
    let o = m.run(&["down", "--all", "--hub"]);
    assert!(o.status.success(), "{}", out(&o));
}

#[test]
fn a_seat_that_does_not_come_up_is_named_with_its_reason() {
    let m = Machine::new();
    // The command driver without CREW_COMMAND: the runner refuses to start.
    let o = m.run(&["up", "command", "--no-tmux", "--wait", "30"]);
    let text = out(&o);
    assert_eq!(o.status.code(), Some(1), "{text}");
    assert!(
        text.contains("command:shop") && text.contains("no-show"),
        "{text}"
    );
    assert!(
        text.contains("crashed") && text.contains("CREW_COMMAND"),
        "{text}"
    );
    assert!(text.contains("0 of 1 seat(s) up"), "{text}");
    let o = m.run(&["seat-why", "command"]);
    assert!(out(&o).contains("command:shop — crashed"), "{}", out(&o));
    // Bad seat names are usage errors.
    assert_eq!(m.run(&["up", "no/such"]).status.code(), Some(2));
}

fn write_park(bus: &Path, persona: &str, reason: &str, until: i64, bounded: bool) {
    let p = trantor_runner::paths::Paths::new(bus, persona, "shop");
    std::fs::create_dir_all(bus).expect("bus");
    trantor_runner::park::write(
        &p.park,
        &trantor_runner::park::Park {
            session: format!("{persona}:shop"),
            persona: persona.into(),
            agent: persona.into(),
            project: "shop".into(),
            reason: reason.into(),
            until,
            evidence: "matched: usage limit reached".into(),
            held: 2,
            ts: trantor_proto::now_ms() - 60_000,
            bounded,
        },
    );
    assert!(p.park.exists(), "park file written at {}", p.park.display());
}

#[test]
fn seat_why_reads_the_runner_evidence() {
    let m = Machine::new();
    let bus = m.bus();
    let now = trantor_proto::now_ms();
    write_park(&bus, "kimi", "exhausted", now + 3_600_000, false);
    write_park(&bus, "claude", "auth", trantor_runner::park::NEVER, false);
    std::fs::write(
        trantor_runner::paths::Paths::new(&bus, "claude", "shop").err,
        "Error: 401 invalid x-api-key\n",
    )
    .expect("err file");
    write_park(&bus, "codex", "api-error", now + 600_000, true);
    // An expired bounded park no longer counts; with a ledger it is a stopped seat.
    write_park(&bus, "gemini", "api-error", now - 1000, true);
    let ledger = trantor_runner::paths::Paths::new(&bus, "gemini", "shop").ledger;
    std::fs::create_dir_all(ledger.parent().expect("logs")).expect("logs");
    std::fs::write(
        &ledger,
        "{\"ts\":1,\"persona\":\"gemini\",\"agent\":\"gemini\",\"boot\":true,\"pid\":999999999}\n{\"ts\":2,\"turn\":1,\"trigger\":\"kickoff\",\"outcome\":\"completed\",\"verdict\":\"ok\"}\n",
    )
    .expect("ledger");

    let why = |seat: &str| {
        let o = m.run(&["seat-why", seat, "--json"]);
        assert_eq!(o.status.code(), Some(1), "{}", out(&o));
        serde_json::from_slice::<serde_json::Value>(&o.stdout).expect("json")
    };
    let j = why("kimi");
    assert_eq!(j["state"], "dead (quota)", "{j}");
    assert!(
        j["evidence"].to_string().contains("reason exhausted"),
        "{j}"
    );
    assert!(
        j["summary"].as_str().unwrap_or("").contains("resets"),
        "{j}"
    );
    let j = why("claude");
    assert_eq!(j["state"], "dead (auth)", "{j}");
    assert!(
        j["evidence"].to_string().contains("401 invalid x-api-key"),
        "{j}"
    );
    assert!(
        j["evidence"].to_string().contains("until an operator acts"),
        "{j}"
    );
    assert!(j["advice"].to_string().contains("log in"), "{j}");
    let j = why("codex");
    assert_eq!(j["state"], "parked", "{j}");
    assert!(
        j["advice"].to_string().contains("trantor send codex:shop"),
        "{j}"
    );
    let j = why("gemini");
    assert_eq!(j["state"], "no runner", "{j}");
    assert!(
        j["evidence"].to_string().contains("last turn 1 (kickoff)"),
        "{j}"
    );
    let j = why("opencode");
    assert_eq!(j["state"], "never started", "{j}");
    assert!(
        j["evidence"].to_string().contains("cannot read /peers"),
        "hub is down here: {j}"
    );

    // Text form: headline, evidence, advice.
    let o = m.run(&["seat-why", "kimi"]);
    let t = out(&o);
    assert!(
        t.starts_with("kimi:shop — dead (quota):")
            && t.contains("  evidence: park file")
            && t.contains("  advice:"),
        "{t}"
    );
}

#[test]
fn demo_runs_a_card_to_done_and_exits_zero() {
    let home = tempfile::tempdir().expect("tmp");
    let started = Instant::now();
    let mut child = Command::new(bin())
        .arg("demo")
        .env("HOME", home.path())
        .env_remove("RELAY_URL")
        .env_remove("RELAY_SESSION")
        .env_remove("CREW_COMMAND")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("demo");
    // Generous: the demo's own timeout is 60 s; this only stops a hung process.
    while child.try_wait().expect("wait").is_none() {
        if started.elapsed() > Duration::from_secs(150) {
            let _ = child.kill();
            panic!("trantor demo did not finish");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let o = child.wait_with_output().expect("output");
    let text = out(&o);
    assert_eq!(o.status.code(), Some(0), "{text}");
    for want in [
        "builder:demo",
        "tester:demo",
        "moved #1 todo → doing",
        "moved #1 doing → testing",
        "moved #1 testing → done",
        "went todo → doing → testing → done",
    ] {
        assert!(text.contains(want), "demo output lacks {want:?}:\n{text}");
    }
}

#[test]
fn duty_up_starts_an_appointed_duty_seat_and_down_stops_it() {
    let m = Machine::new();
    let o = m.run(&["duty", "up", "--no-tmux", "--wait", "60"]);
    let text = out(&o);
    assert!(o.status.success(), "{text}");
    assert!(
        text.contains("duty:shop") && text.contains("live"),
        "{text}"
    );
    assert!(text.contains("duty:shop is the duty session"), "{text}");
    // The seat is a runner with duty nudges on.
    let rec: serde_json::Value = serde_json::from_slice(
        &std::fs::read(m.bus().join("seats").join("duty-shop.json")).expect("seat record"),
    )
    .expect("record json");
    let pid = rec["pid"].as_u64().expect("pid");
    let environ = std::fs::read(format!("/proc/{pid}/environ")).expect("environ");
    let environ = String::from_utf8_lossy(&environ);
    assert!(
        environ.split('\0').any(|v| v == "RUNNER_DUTY_NUDGES=1"),
        "{environ}"
    );
    assert!(
        environ.split('\0').any(|v| v == "CREW_PERSONA=duty"),
        "{environ}"
    );
    let status = out(&m.run(&["duty", "status"]));
    assert!(
        status.contains("duty duty:shop (appointed): on duty"),
        "{status}"
    );
    assert!(status.contains(&format!("pid {pid}")), "{status}");
    let o = m.run(&["duty", "down"]);
    assert!(
        out(&o).contains("duty:shop") && out(&o).contains("stopped"),
        "{}",
        out(&o)
    );
    let status = out(&m.run(&["duty", "status"]));
    assert!(status.contains("no duty seat runs here"), "{status}");
}

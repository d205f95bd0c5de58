//! The one seat harness: a `trantor runner` seat on temporary directories, driving the one fake
//! agent (`tests-compat/fake-agent.sh`), with readers for what the seat and the agent leave on
//! disk. A drill's own agent behaviour is a scenario the fake agent sources on each call
//! (`FAKE_AGENT_SCENARIO`), and its knobs can change between turns (`FAKE_AGENT_CONTROL`).

use super::{GroupChild, init_git_repo, wait_until};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// Generous deadline for a seat's turn or boot (never a timing assertion).
pub const SEAT_WAIT: Duration = Duration::from_secs(120);

/// The one fake agent CLI.
pub fn fake_agent() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests-compat/fake-agent.sh")
}

/// Whether the fake agent can run here (it needs python3): false after a SKIP on a developer
/// machine; a failure under CI.
pub fn fake_agent_available() -> bool {
    super::require_tool("python3")
}

/// How the runner reaches the fake agent.
#[derive(Debug, Clone)]
pub enum Driver {
    /// `trantor runner <name>`: the fake agent on PATH under the agent's name.
    Named(String),
    /// `trantor runner command`: `CREW_COMMAND=<fake agent> {P}` (the prompt file).
    Command,
}

/// Where a seat lives: the project's checkout, the bus directory, HOME, a PATH directory, a
/// state directory for scenarios, and its own files inside those.
pub struct Seat {
    /// The directory everything lives under.
    pub root: PathBuf,
    /// The project's main checkout (a git repository).
    pub repo: PathBuf,
    /// The bus directory (`AGENT_BUS_DIR`).
    pub bus: PathBuf,
    /// `$HOME` of the runner.
    pub home: PathBuf,
    /// Prepended to PATH (the fake agent under its name, fake tools).
    pub bin: PathBuf,
    /// A scenario's own files.
    pub state: PathBuf,
    /// `RELAY_PROJECT`.
    pub project: String,
    /// The persona (the agent's name when it has none of its own).
    pub persona: String,
    driver: Driver,
    env: Vec<(String, String)>,
    runner: Option<GroupChild>,
    boots: usize,
    _tmp: Option<tempfile::TempDir>,
}

impl Seat {
    /// A seat on a fresh temporary directory with a fresh repository.
    pub fn new(driver: Driver, persona: &str, project: &str) -> Seat {
        let tmp = tempfile::tempdir().expect("tmp");
        let mut seat = Seat::in_dir(tmp.path(), driver, persona, project);
        seat._tmp = Some(tmp);
        seat
    }

    /// A seat under `root`, sharing its repository and bus directory with every other seat
    /// there (a crew); the repository is created on the first.
    pub fn in_dir(root: &Path, driver: Driver, persona: &str, project: &str) -> Seat {
        let repo = root.join("repo");
        if !repo.join(".git").exists() {
            init_git_repo(&repo);
        }
        let (home, bin, state) = (root.join("home"), root.join("bin"), root.join("state"));
        for d in [&home, &bin, &state] {
            std::fs::create_dir_all(d).expect("seat dir");
        }
        if let Driver::Named(name) = &driver {
            let link = bin.join(name);
            if !link.exists() {
                std::os::unix::fs::symlink(fake_agent(), link).expect("fake agent on PATH");
            }
        }
        Seat {
            root: root.to_path_buf(),
            bus: root.join("bus"),
            repo,
            home,
            bin,
            state,
            project: project.into(),
            persona: persona.into(),
            driver,
            env: Vec::new(),
            runner: None,
            boots: 0,
            _tmp: None,
        }
    }

    /// Set an environment variable for every start of this seat's runner.
    pub fn env(mut self, key: &str, value: impl Into<String>) -> Seat {
        self.env.push((key.into(), value.into()));
        self
    }

    /// The fake agent's behaviour for this seat: a bash snippet sourced on each call with
    /// `FAKE_AGENT_PROMPT`, `FAKE_AGENT_TURN` and `SEAT_STATE` (the state directory) set.
    pub fn scenario(self, script: &str) -> Seat {
        let path = self.root.join(format!("scenario-{}.sh", self.persona));
        std::fs::write(&path, script).expect("scenario");
        let state = self.state.to_string_lossy().into_owned();
        self.env("FAKE_AGENT_SCENARIO", path.to_string_lossy())
            .env("SEAT_STATE", state)
    }

    /// The seat's bus address.
    pub fn session(&self) -> String {
        format!("{}:{}", self.persona, self.project)
    }

    /// Where the fake agent logs its calls for this seat.
    pub fn calls_path(&self) -> PathBuf {
        self.root.join(format!("calls-{}.jsonl", self.persona))
    }

    /// Where `record_pid` notes the fake CLI's pids.
    pub fn cli_pids_path(&self) -> PathBuf {
        self.root.join(format!("cli-pids-{}", self.persona))
    }

    /// A control or scenario line that records the CLI's pid (it leads its own process
    /// group), so the harness can end a CLI its runner left behind.
    pub fn record_pid(&self) -> String {
        format!("echo $$ >> '{}'\n", self.cli_pids_path().display())
    }

    /// The pids `record_pid` noted, in order.
    pub fn cli_pids(&self) -> Vec<i32> {
        std::fs::read_to_string(self.cli_pids_path())
            .unwrap_or_default()
            .lines()
            .filter_map(|p| p.trim().parse().ok())
            .collect()
    }

    /// SIGKILL the process group of every CLI `record_pid` noted (a fake CLI still running after
    /// its runner was killed) — the group its turn wrapper leads (docs/runner.md §24.2); returns
    /// how many were noted.
    pub fn kill_cli_groups(&self) -> usize {
        let pids = self.cli_pids();
        for pid in &pids {
            let pid = nix::unistd::Pid::from_raw(*pid);
            let group = nix::unistd::getpgid(Some(pid)).unwrap_or(pid);
            let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
        }
        pids.len()
    }

    /// Replace the fake agent's knobs for its next calls (`FAKE_AGENT_EXIT=1`, …).
    pub fn control(&self, text: &str) {
        std::fs::write(self.root.join(format!("ctl-{}", self.persona)), text).expect("control");
    }

    /// What the runner needs to drive this seat's fake agent (the driver's command, the agent's
    /// log, control and scenario): also what a replacement started by `trantor swap` needs.
    pub fn agent_env(&self) -> Vec<(String, String)> {
        let mut env = vec![
            (
                "FAKE_AGENT_LOG".to_string(),
                self.calls_path().to_string_lossy().into_owned(),
            ),
            (
                "FAKE_AGENT_CONTROL".to_string(),
                self.root
                    .join(format!("ctl-{}", self.persona))
                    .to_string_lossy()
                    .into_owned(),
            ),
        ];
        if let Driver::Command = self.driver {
            env.push((
                "CREW_COMMAND".into(),
                format!("{} {{P}}", fake_agent().display()),
            ));
        }
        env.extend(self.env.iter().cloned());
        env
    }

    /// `<program> runner …` with the seat's environment, its output to the next boot's log.
    pub fn command(&mut self, program: &Path, hub_url: &str) -> Command {
        self.boots += 1;
        let log = std::fs::File::create(self.log_path(self.boots)).expect("runner log");
        let path = format!(
            "{}:{}",
            self.bin.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let mut cmd = Command::new(program);
        cmd.arg("runner");
        match &self.driver {
            Driver::Named(name) => {
                cmd.arg(name);
                if *name == self.persona {
                    cmd.env_remove("CREW_PERSONA");
                } else {
                    cmd.env("CREW_PERSONA", &self.persona);
                }
            }
            Driver::Command => {
                cmd.arg("command").env("CREW_PERSONA", &self.persona);
            }
        }
        cmd.arg(&self.repo)
            .env("PATH", path)
            .env("HOME", &self.home)
            .env("AGENT_BUS_DIR", &self.bus)
            .env("RELAY_URL", hub_url)
            .env("RELAY_PROJECT", &self.project)
            .env("TRANTOR_POLL_HOLD_S", "2")
            .env("TRANTOR_NO_DESKTOP_NOTIFY", "1")
            .env("TRANTOR_LOG", "info");
        for k in [
            "RELAY_DATA_DIR",
            "RELAY_SESSION",
            "RUNNER_SESSION",
            "CREW_AGENT",
            "CREW_SWAP_AGENT",
        ] {
            cmd.env_remove(k);
        }
        cmd.envs(self.agent_env());
        cmd.stdin(Stdio::null())
            .stdout(log.try_clone().expect("runner log"))
            .stderr(log);
        cmd
    }

    /// Start the seat's runner (the `trantor` under test) against `hub_url`.
    pub fn start(&mut self, hub_url: &str) {
        self.start_with(hub_url, &[]);
    }

    /// Start the seat's runner with `extra` environment on top of the seat's.
    pub fn start_with(&mut self, hub_url: &str, extra: &[(&str, &str)]) {
        self.start_program(&super::bin(), hub_url, extra);
    }

    /// Start the seat's runner from `program` (an installed copy, a wrapper).
    pub fn start_program(&mut self, program: &Path, hub_url: &str, extra: &[(&str, &str)]) {
        let mut cmd = self.command(program, hub_url);
        for (k, v) in extra {
            cmd.env(k, v);
        }
        self.runner = Some(GroupChild::spawn(cmd));
    }

    /// The running runner process, if started.
    pub fn runner(&mut self) -> Option<&mut GroupChild> {
        self.runner.as_mut()
    }

    /// Whether the runner is still running.
    pub fn alive(&mut self) -> bool {
        self.runner.as_mut().is_some_and(GroupChild::alive)
    }

    /// Kill the runner's process group.
    pub fn kill(&mut self) {
        if let Some(mut r) = self.runner.take() {
            r.kill_group();
        }
    }

    /// How many times the runner was started.
    pub fn boots(&self) -> usize {
        self.boots
    }

    fn log_path(&self, boot: usize) -> PathBuf {
        self.root
            .join(format!("runner-{}-{boot}.log", self.persona))
    }

    /// Every boot's runner log, in order.
    pub fn runner_log(&self) -> String {
        (1..=self.boots)
            .map(|n| std::fs::read_to_string(self.log_path(n)).unwrap_or_default())
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Every call the fake agent recorded for this seat.
    pub fn calls(&self) -> Vec<Value> {
        jsonl(&self.calls_path())
    }

    /// The prompts of those calls, in order.
    pub fn prompts(&self) -> Vec<String> {
        self.calls()
            .iter()
            .map(|c| c["prompt"].as_str().unwrap_or_default().to_string())
            .collect()
    }

    /// How many prompts contain `marker`.
    pub fn prompts_with(&self, marker: &str) -> usize {
        self.prompts().iter().filter(|p| p.contains(marker)).count()
    }

    /// The seat's telemetry ledger.
    pub fn ledger(&self) -> Vec<Value> {
        jsonl(
            &self
                .bus
                .join("logs")
                .join(format!("{}-{}.jsonl", self.persona, self.project)),
        )
    }

    /// The ledger's judged turns.
    pub fn turn_rows(&self) -> Vec<Value> {
        self.ledger()
            .into_iter()
            .filter(|r| r.get("turn").is_some() && r.get("verdict").is_some())
            .collect()
    }

    /// The pending file (null when absent).
    pub fn pending(&self) -> Value {
        self.json_file(&format!("pending-{}-{}.json", self.persona, self.project))
    }

    /// Ids of the wakes in the pending file.
    pub fn pending_wake_ids(&self) -> Vec<i64> {
        self.pending()["wake"]
            .as_array()
            .map(|a| a.iter().filter_map(|m| m["id"].as_i64()).collect())
            .unwrap_or_default()
    }

    /// The turn-state file's phase (empty when absent).
    pub fn phase(&self) -> String {
        self.json_file(&format!("turnstate-{}-{}.json", self.persona, self.project))["phase"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    fn json_file(&self, name: &str) -> Value {
        std::fs::read_to_string(self.bus.join(name))
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or(Value::Null)
    }

    /// Wait until `turns` turns were judged and every boot is waiting on the bus again.
    pub fn wait_idle_after(&self, turns: usize) {
        wait_until(&format!("{turns} turn row(s)"), SEAT_WAIT, || {
            self.turn_rows().len() >= turns
        });
        wait_until("the seat to wait on the bus again", SEAT_WAIT, || {
            self.runner_log().matches("waiting on the bus as").count() >= self.boots
        });
    }
}

impl Drop for Seat {
    fn drop(&mut self) {
        self.kill();
        self.kill_cli_groups();
    }
}

/// The JSON lines of `path` (none when it is absent; unparsable lines skipped).
pub fn jsonl(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

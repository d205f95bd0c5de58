//! Drills with the REAL agent CLIs (issue 14): Claude Code, Codex and OpenCode installed from
//! npm (pinned to the driver table's verified versions by `tests-compat/install-real-clis.sh`,
//! into a cache outside the repo), run by the real `trantor runner` against the real hub, each
//! pointed at a scripted model API on loopback (`support/model_api.rs`) through its documented
//! configuration. No account and no network beyond loopback.
//!
//! Without node/npm (or a reachable registry) every drill here skips with a SKIP line; under
//! `CI` it fails instead.

mod common;
#[path = "support/model_api.rs"]
mod model_api;

use common::{GroupChild, Hub, hub_messages, hub_request, hub_send, init_git_repo, wait_until};
use model_api::{ModelApi, Script, Step, Usage};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

const PROJECT: &str = "p";
const ORCH: &str = "orch:p";
/// A real CLI turn on a loaded 2-core machine takes up to a minute (OpenCode boots slowly).
const LONG: Duration = Duration::from_secs(300);

/// The directory holding `claude`, `codex` and `opencode`, installed once per machine; `None`
/// (with a SKIP line) when it cannot be had on a developer machine. Fails under CI.
fn clis() -> Option<PathBuf> {
    common::real_clis_bin()
}

/// One seat run by `trantor runner` with a real CLI, configured for the scripted model API.
struct RealSeat {
    tmp: tempfile::TempDir,
    repo: PathBuf,
    bus: PathBuf,
    home: PathBuf,
    path: String,
    agent: String,
    /// Who the seat is on the bus (`CREW_PERSONA`): the agent unless set.
    persona: String,
    api_url: String,
    /// Run the runner (and so the CLI) as this (uid, gid) instead of the test's user.
    user: Option<(u32, u32)>,
    /// Extra runner environment (knobs).
    extra: Vec<(String, String)>,
    /// Sign Claude Code in with a subscription (OAuth) token instead of an API key.
    oauth: bool,
    runner: Option<GroupChild>,
}

impl RealSeat {
    fn new(agent: &str, clis: &Path, api: &ModelApi) -> RealSeat {
        let tmp = tempfile::tempdir().expect("tmp");
        let repo = tmp.path().join("repo");
        init_git_repo(&repo);
        let home = tmp.path().join("home");
        std::fs::create_dir_all(&home).expect("home");
        let path = format!(
            "{}:{}",
            clis.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let seat = RealSeat {
            bus: tmp.path().join("bus"),
            repo,
            home,
            path,
            agent: agent.into(),
            persona: agent.into(),
            api_url: api.url(),
            user: None,
            extra: Vec::new(),
            oauth: false,
            runner: None,
            tmp,
        };
        seat.configure_cli();
        seat
    }

    /// The CLI's own configuration pointing at the scripted API, then `trantor connect` for
    /// the MCP entry (what a person does on a new machine).
    fn configure_cli(&self) {
        let url = &self.api_url;
        match self.agent.as_str() {
            "codex" => {
                let dir = self.home.join(".codex");
                std::fs::create_dir_all(&dir).expect("codex dir");
                std::fs::write(
                    dir.join("config.toml"),
                    format!(
                        "model = \"drill-model\"\nmodel_provider = \"drill\"\n\n\
                         [model_providers.drill]\nname = \"drill\"\nbase_url = \"{url}/v1\"\n\
                         env_key = \"DRILL_API_KEY\"\nwire_api = \"responses\"\n\
                         request_max_retries = 0\nstream_max_retries = 0\n"
                    ),
                )
                .expect("codex config");
            }
            "opencode" => {
                let dir = self.home.join(".config").join("opencode");
                std::fs::create_dir_all(&dir).expect("opencode dir");
                let cfg = json!({
                    "$schema": "https://opencode.ai/config.json",
                    "model": "drill/drill-model",
                    "autoupdate": false,
                    "share": "disabled",
                    "provider": {"drill": {
                        "npm": "@ai-sdk/openai-compatible",
                        "name": "Drill",
                        "options": {"baseURL": format!("{url}/v1"), "apiKey": "drill-key"},
                        "models": {"drill-model": {"name": "Drill model"}}
                    }}
                });
                std::fs::write(dir.join("opencode.json"), cfg.to_string()).expect("oc config");
            }
            _ => {}
        }
        let o = Command::new(common::bin())
            .args(["connect", "--only", &self.agent])
            .env("HOME", &self.home)
            .env("PATH", &self.path)
            .env_remove("XDG_CONFIG_HOME")
            .output()
            .expect("connect");
        assert!(
            o.status.success(),
            "connect: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }

    fn session(&self) -> String {
        format!("{}:{PROJECT}", self.persona)
    }

    /// Environment the CLI needs to reach the scripted API (and nothing else).
    fn cli_env(&self, cmd: &mut Command) {
        cmd.env("HOME", &self.home)
            .env("PATH", &self.path)
            .env_remove("XDG_CONFIG_HOME")
            .env_remove("XDG_DATA_HOME")
            // The runner must supply IS_SANDBOX itself when it runs claude as root.
            .env_remove("IS_SANDBOX")
            .env("ANTHROPIC_BASE_URL", &self.api_url)
            .env("ANTHROPIC_API_KEY", "sk-ant-drill")
            .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
            .env("DISABLE_AUTOUPDATER", "1")
            .env("CLAUDE_CODE_MAX_RETRIES", "0")
            .env("DRILL_API_KEY", "drill-key")
            .env("OPENCODE_DISABLE_MODELS_FETCH", "1")
            .env("OPENCODE_DISABLE_AUTOUPDATE", "1");
        if self.oauth {
            cmd.env_remove("ANTHROPIC_API_KEY")
                .env("CLAUDE_CODE_OAUTH_TOKEN", "sk-ant-oat01-drill");
        }
    }

    /// Hand the seat's files to `user` and run its runner as that user.
    fn run_as(&mut self, user: (u32, u32)) {
        let st = Command::new("chown")
            .arg("-R")
            .arg(format!("{}:{}", user.0, user.1))
            .arg(self.tmp.path())
            .status()
            .expect("chown");
        assert!(st.success(), "chown the seat's files");
        self.user = Some(user);
    }

    fn start(&mut self, hub_url: &str) {
        let log = std::fs::File::create(self.tmp.path().join("runner.log")).expect("log");
        if let Some((uid, gid)) = self.user {
            let path = self.tmp.path().join("runner.log");
            let _ = nix::unistd::chown(
                &path,
                Some(nix::unistd::Uid::from_raw(uid)),
                Some(nix::unistd::Gid::from_raw(gid)),
            );
        }
        let mut cmd = Command::new(common::bin());
        cmd.arg("runner").arg(&self.agent).arg(&self.repo);
        self.cli_env(&mut cmd);
        cmd.env("AGENT_BUS_DIR", &self.bus)
            .env_remove("RELAY_DATA_DIR")
            .env_remove("RELAY_SESSION")
            .env_remove("CREW_AGENT")
            .env_remove("CREW_PERSONA")
            .env_remove("CREW_SWAP_AGENT")
            .env_remove("RUNNER_SESSION")
            .env_remove("TRANTOR_SEAT")
            .env("RELAY_URL", hub_url)
            .env("RELAY_PROJECT", PROJECT)
            .env("RELAY_HOST_ID", "orch")
            .env("TRANTOR_NO_WORKTREE", "1")
            .env("TRANTOR_POLL_HOLD_S", "3")
            .env("TRANTOR_NO_DESKTOP_NOTIFY", "1")
            .env("TRANTOR_LOG", "info")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log);
        if self.persona != self.agent {
            cmd.env("CREW_PERSONA", &self.persona);
        }
        for (k, v) in &self.extra {
            cmd.env(k, v);
        }
        if let Some((uid, gid)) = self.user {
            use std::os::unix::process::CommandExt;
            cmd.uid(uid).gid(gid).env("USER", "trantor-drill");
        }
        self.runner = Some(GroupChild::spawn(cmd));
    }

    fn runner_log(&self) -> String {
        std::fs::read_to_string(self.tmp.path().join("runner.log")).unwrap_or_default()
    }

    fn ledger(&self) -> Vec<Value> {
        let path = self
            .bus
            .join("logs")
            .join(format!("{}-{PROJECT}.jsonl", self.persona));
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    fn turn_rows(&self) -> Vec<Value> {
        self.ledger()
            .into_iter()
            .filter(|r| r.get("turn").is_some() && r.get("verdict").is_some())
            .collect()
    }

    /// Wait until `turns` turns have been judged and the seat waits on the bus again.
    fn wait_idle_after(&self, turns: usize) {
        wait_until(
            &format!("{turns} turn row(s) of {}", self.agent),
            LONG,
            || self.turn_rows().len() >= turns,
        );
        wait_until("the seat to wait on the bus again", LONG, || {
            self.runner_log().matches("waiting on the bus as").count() >= 1
        });
    }

    fn park(&self) -> Option<Value> {
        let f = self
            .bus
            .join(format!("park-{}-{PROJECT}.json", self.persona));
        std::fs::read_to_string(f)
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
    }

    /// What the runner and the ledger say, for a failure message.
    fn evidence(&self) -> String {
        let err =
            std::fs::read_to_string(self.bus.join(format!("err-{}-{PROJECT}.txt", self.persona)))
                .unwrap_or_default();
        format!(
            "runner log:\n{}\nturn rows:\n{:#?}\nlast failed turn's output:\n{err}",
            self.runner_log(),
            self.turn_rows()
        )
    }
}

impl Drop for RealSeat {
    fn drop(&mut self) {
        if let Some(mut r) = self.runner.take() {
            r.kill_group();
        }
    }
}

fn from_seat(port: u16, seat: &RealSeat, marker: &str) -> Vec<Value> {
    hub_messages(port, ORCH)
        .into_iter()
        .filter(|m| {
            m["from"] == seat.session() && m["text"].as_str().is_some_and(|t| t.contains(marker))
        })
        .collect()
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// A first turn that calls the hub through MCP and writes a file with the CLI's own tool, and
/// a second turn that resumes the same conversation.
fn turns_resume_and_reach_the_hub_as_the_seat(agent: &str) {
    turns_as(agent, None);
}

/// The same drill with the seat run as `user` (uid, gid), when given.
fn turns_as(agent: &str, user: Option<(u32, u32)>) {
    let Some(clis) = clis() else { return };
    let hub = Hub::start();
    let api = ModelApi::start();
    let mut seat = RealSeat::new(agent, &clis, &api);
    if let Some(u) = user {
        seat.run_as(u);
    }
    seat.start(&hub.url());
    seat.wait_idle_after(1);

    let one = format!("STEPONE{agent}");
    let file = seat.repo.join(format!("from-{agent}.txt"));
    // What the CLI's own shell sees of IS_SANDBOX: the runner sets it for claude run as root.
    let sandbox_file = seat.repo.join("is-sandbox.txt");
    let mut steps = vec![
        Step::Tool(
            "relay_send".into(),
            json!({"to": ORCH, "text": format!("HELLO-FROM-INSIDE {agent}"), "wake": false}),
        ),
        Step::WriteFile {
            path: file.display().to_string(),
            content: format!("written by {agent}"),
        },
    ];
    if agent == "claude" {
        steps.push(Step::Shell(format!(
            "printf '%s' \"${{IS_SANDBOX:-unset}}\" > '{}'",
            sandbox_file.display()
        )));
    }
    steps.push(Step::Say(format!("TURN-ONE-DONE {agent}")));
    api.script(&one, Script::Steps(steps));
    hub_send(
        hub.port,
        ORCH,
        &seat.session(),
        PROJECT,
        &format!("{one}: say hello to orch, write the file, then finish"),
    );
    wait_until("the MCP call from inside the seat", LONG, || {
        !from_seat(hub.port, &seat, "HELLO-FROM-INSIDE").is_empty()
    });
    let hello = from_seat(hub.port, &seat, "HELLO-FROM-INSIDE");
    assert_eq!(hello[0]["from"], seat.session(), "{hello:?}");
    wait_until("the file written by the CLI's own tool", LONG, || {
        std::fs::read_to_string(&file).is_ok_and(|t| t.contains(&format!("written by {agent}")))
    });
    seat.wait_idle_after(2);
    if agent == "claude" {
        let as_root = user.is_none() && nix::unistd::geteuid().is_root();
        let seen = std::fs::read_to_string(&sandbox_file).unwrap_or_default();
        assert_eq!(
            seen,
            if as_root { "1" } else { "unset" },
            "IS_SANDBOX as the CLI's shell saw it (root: {as_root})\n{}",
            seat.evidence()
        );
    }
    if let Some((uid, _)) = user {
        use std::os::unix::fs::MetadataExt;
        // The CLI itself ran as that user: the file its tool wrote is theirs.
        let owner = std::fs::metadata(&file).map(|m| m.uid()).unwrap_or(0);
        assert_eq!(owner, uid, "{} was written by uid {owner}", file.display());
    }

    let two = format!("STEPTWO{agent}");
    api.script(
        &two,
        Script::Steps(vec![Step::Say(format!("TURN-TWO-DONE {agent}"))]),
    );
    hub_send(
        hub.port,
        ORCH,
        &seat.session(),
        PROJECT,
        &format!("{two}: what did you do last turn?"),
    );
    seat.wait_idle_after(3);
    let seen = api.requests_for(&two);
    assert!(
        !seen.is_empty(),
        "turn two never reached the model\n{}",
        seat.evidence()
    );
    assert!(
        seen.iter()
            .any(|r| r.raw.contains(&format!("TURN-ONE-DONE {agent}"))),
        "turn two did not resume turn one's conversation\n{}",
        seat.evidence()
    );
    let rows = seat.turn_rows();
    assert!(
        rows.iter().all(|r| r["verdict"] != "failed"),
        "{}",
        seat.evidence()
    );
    if agent == "opencode" {
        // OpenCode's usage is read from its database (docs/runner.md §15.3): each scripted
        // answer reports 100 prompt and 10 completion tokens.
        let last = rows.last().cloned().unwrap_or(Value::Null);
        assert_eq!(last["costSource"], "opencode-db", "{last:#}");
        let (input, output) = (
            last["usage"]["input"].as_u64().unwrap_or(0),
            last["usage"]["output"].as_u64().unwrap_or(0),
        );
        assert!(
            input >= 100 && input % 100 == 0 && output >= 10 && output % 10 == 0,
            "the turn's share of what the model reported: {last:#}"
        );
    }
}

/// The cost ledger with the real CLIs (docs/runner.md §15.3): a turn on a card, against a
/// scripted model that reports distinctive usage on every answer, puts exactly those tokens on
/// the card (`GET /card` cost) and on `GET /cost`; a resumed second turn on the same card adds
/// only its own share. Claude Code's dollars are its own (not an estimate); Codex reports none,
/// so its are priced from the runner's table and marked estimated.
fn turn_cost_reaches_the_card(agent: &str) {
    let Some(clis) = clis() else { return };
    let hub = Hub::start();
    let api = ModelApi::start();
    let claude = agent == "claude";
    let usage = Usage {
        input: 1234,
        output: 56,
        cache_read: 700,
        // The Responses API has no cache writes.
        cache_write: if claude { 9 } else { 0 },
    };
    api.report_usage(usage);
    let mut seat = RealSeat::new(agent, &clis, &api);
    if !claude {
        // A model the price table knows (the scripted API answers any).
        seat.extra.push(("CREW_MODEL".into(), "gpt-5".into()));
    }
    // The seat runs on a named credential: its variable reaches the CLI's shell, its name the
    // cost records, and the hub never sees the value.
    let o = Command::new(common::bin())
        .args(["credentials", "add", "work", "--agent", agent])
        .args(["--env", "DRILL_CRED=from-the-work-credential"])
        .env("AGENT_BUS_DIR", &seat.bus)
        .env("RELAY_URL", hub.url())
        .env("HOME", &seat.home)
        .output()
        .expect("credentials add");
    assert!(
        o.status.success(),
        "credentials add: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    seat.extra.push(("CREW_CREDENTIAL".into(), "work".into()));
    let cred_file = seat.repo.join("cred-seen.txt");
    seat.start(&hub.url());
    seat.wait_idle_after(1);
    let (st, card) = hub_request(
        hub.port,
        "POST",
        "/task",
        Some(&json!({"project": PROJECT, "title": "cost drill", "assignee": seat.session()})),
    )
    .expect("card");
    assert!(st < 300, "{card}");
    let id = card["task"]["id"].as_i64().expect("card id");
    let card_cost = || {
        hub_request(hub.port, "GET", &format!("/card?id={id}"), None)
            .map(|(_, v)| v["cost"].clone())
            .unwrap_or(Value::Null)
    };
    // Every answer while the card's turn runs is the turn's (the kickoff is over).
    let answers = || api.requests().len() as u64;
    let mut answered = 0;
    for (n, marker) in ["COSTONE", "COSTTWO"].into_iter().enumerate() {
        let before = answers();
        api.script(
            marker,
            Script::Steps(vec![
                Step::Shell(format!(
                    "printf '%s' \"${{DRILL_CRED:-unset}}\" > '{}'",
                    cred_file.display()
                )),
                Step::Say(format!("{marker} done")),
            ]),
        );
        hub_send(
            hub.port,
            ORCH,
            &seat.session(),
            PROJECT,
            &format!("your card #{id}: {marker} run the command, then finish"),
        );
        seat.wait_idle_after(2 + n);
        wait_until("the turn's cost on the card", LONG, || {
            card_cost()["turns"].as_u64() == Some(n as u64 + 1)
        });
        answered += answers() - before;
        let cost = card_cost();
        assert!(answered >= 2, "the scripted turn is two answers at least");
        assert_eq!(
            (cost["tokensIn"].as_u64(), cost["tokensOut"].as_u64()),
            (
                Some(answered * (usage.input + usage.cache_read + usage.cache_write)),
                Some(answered * usage.output)
            ),
            "{cost}\n{}",
            seat.evidence()
        );
        assert_eq!(
            cost["cacheRead"].as_u64(),
            Some(answered * usage.cache_read)
        );
        assert_eq!(
            cost["cacheWrite"].as_u64(),
            Some(answered * usage.cache_write)
        );
        assert_eq!(cost["unknown"], 0, "{cost}");
        assert_eq!(
            cost["estimated"], !claude,
            "Claude Code's own dollars, Codex's estimated: {cost}"
        );
        let usd = cost["usd"].as_f64().unwrap_or(0.0);
        assert!(usd > 0.0, "{cost}");
        // The dollars are the ones the turn rows recorded from the CLI's report.
        let logged: f64 = seat
            .turn_rows()
            .iter()
            .filter(|r| r["card"] == id)
            .filter_map(|r| r["usd"].as_f64())
            .sum();
        assert!((usd - logged).abs() < 1e-9, "{usd} vs {logged}");
    }
    let (_, all) = hub_request(hub.port, "GET", "/cost?by=seat", None).expect("cost");
    println!("{agent} cost drill: card #{id} {}; all {all}", card_cost());
    assert_eq!(all["groups"][0]["key"], seat.session(), "{all}");
    assert_eq!(
        std::fs::read_to_string(&cred_file).unwrap_or_default(),
        "from-the-work-credential",
        "the credential's variable in the CLI's shell"
    );
    let (_, by_cred) =
        hub_request(hub.port, "GET", "/cost?by=credential", None).expect("by credential");
    assert_eq!(by_cred["groups"][0]["key"], "work", "{by_cred}");
    assert_eq!(
        by_cred["groups"][0]["cost"]["turns"], by_cred["total"]["turns"],
        "every turn ran on the credential: {by_cred}"
    );
    let (_, creds) = hub_request(hub.port, "GET", "/credentials", None).expect("credentials");
    assert_eq!(creds["credentials"][0]["name"], "work", "{creds}");
    assert!(!creds.to_string().contains("from-the-work"), "{creds}");
}

/// A seat is not the person (docs/runner.md §1.3), with the real Claude Code: `trantor
/// connect` has written the person's hooks (SessionStart, Stop, …) into the same HOME the seat
/// runs in, and a contract reaches the hub while the seat's kickoff turn is still running. The
/// kickoff's Stop hook must not read the contract away from the runner: the contract gets a turn
/// of its own, the sender its answer and a receipt, once, and its delivery record ends consumed.
#[test]
fn claude_contract_sent_during_the_kickoff_is_answered_with_the_persons_hooks_installed() {
    let Some(clis) = clis() else { return };
    let hub = Hub::start();
    let api = ModelApi::start();
    let mut seat = RealSeat::new("claude", &clis, &api);
    // connect wrote the person's Claude Code hooks where the seat's CLI reads them.
    let settings = std::fs::read_to_string(seat.home.join(".claude").join("settings.json"))
        .unwrap_or_default();
    assert!(
        settings.contains("\"Stop\"") && settings.contains("hook stop"),
        "connect wrote no Stop hook into the seat's HOME: {settings}"
    );
    // The kickoff blocks in its shell step until the test opens the gate: the contract below
    // arrives while it runs.
    let waiting = seat.tmp.path().join("kickoff-waiting");
    let gate = seat.tmp.path().join("kickoff-gate");
    api.script(
        "KICKOFFGATE",
        Script::Steps(vec![
            Step::Shell(format!(
                "touch '{}'; while [ ! -f '{}' ]; do sleep 0.1; done",
                waiting.display(),
                gate.display()
            )),
            Step::Say("KICKOFF-DONE".into()),
        ]),
    );
    seat.extra.push((
        "CREW_KICKOFF".into(),
        "KICKOFFGATE: run the gate command, then wait for messages.".into(),
    ));
    seat.start(&hub.url());
    wait_until("the kickoff turn to block on its gate", LONG, || {
        waiting.exists()
    });

    api.script(
        "DURINGKICK",
        Script::Steps(vec![
            Step::Tool(
                "relay_send".into(),
                json!({"to": ORCH, "text": "ANSWER-DURINGKICK", "wake": false}),
            ),
            Step::Say("DURINGKICK-DONE".into()),
        ]),
    );
    let id = hub_send(
        hub.port,
        ORCH,
        &seat.session(),
        PROJECT,
        "DURINGKICK: answer orch, then finish",
    );
    let states = |id: i64| common::delivery_states(hub.port, id);
    // The contract is on the hub while the kickoff still runs (a runner polls between turns) ...
    assert_eq!(states(id), ["stored"], "the contract's record mid-kickoff");
    assert!(
        !gate.exists() && seat.turn_rows().is_empty(),
        "the kickoff ended before the contract arrived\n{}",
        seat.evidence()
    );
    // ... then the kickoff ends, and its Stop hook runs in the seat.
    std::fs::write(&gate, "go").expect("open the gate");

    wait_until("the seat's answer to orch", LONG, || {
        !from_seat(hub.port, &seat, "ANSWER-DURINGKICK").is_empty()
    });
    wait_until("the receipt for the contract", LONG, || {
        hub_messages(hub.port, ORCH)
            .iter()
            .any(|m| m["kind"] == "receipt" && m["re"].as_i64() == Some(id))
    });
    seat.wait_idle_after(2);
    let receipts: Vec<Value> = hub_messages(hub.port, ORCH)
        .into_iter()
        .filter(|m| m["kind"] == "receipt" && m["re"].as_i64() == Some(id))
        .collect();
    assert_eq!(receipts.len(), 1, "one receipt: {receipts:#?}");
    assert_eq!(
        from_seat(hub.port, &seat, "ANSWER-DURINGKICK").len(),
        1,
        "answered once\n{}",
        seat.evidence()
    );
    let rows = seat.turn_rows();
    assert_eq!(
        rows.len(),
        2,
        "the kickoff and one turn\n{}",
        seat.evidence()
    );
    assert_eq!(rows[0]["trigger"], "kickoff", "{rows:#?}");
    assert!(
        !seat
            .runner_log()
            .contains("already read through the seat's own inbox"),
        "{}",
        seat.evidence()
    );
    let life = states(id);
    assert_eq!(life.first().map(String::as_str), Some("stored"), "{life:?}");
    assert_eq!(
        life.last().map(String::as_str),
        Some("consumed"),
        "{life:?}"
    );
    assert!(life.iter().any(|s| s == "started"), "{life:?}");
}

#[test]
fn claude_turn_cost_reaches_the_card() {
    turn_cost_reaches_the_card("claude");
}

#[test]
fn codex_turn_cost_reaches_the_card() {
    turn_cost_reaches_the_card("codex");
}

#[test]
fn claude_turns_resume_and_reach_the_hub_as_the_seat() {
    turns_resume_and_reach_the_hub_as_the_seat("claude");
}

#[test]
fn codex_turns_resume_and_reach_the_hub_as_the_seat() {
    turns_resume_and_reach_the_hub_as_the_seat("codex");
}

#[test]
fn opencode_turns_resume_and_reach_the_hub_as_the_seat() {
    turns_resume_and_reach_the_hub_as_the_seat("opencode");
}

/// An unprivileged user for the drills run as root (CI): `trantor-drill`, created when missing.
/// `None` with a SKIP line when not root (the other drills already ran unprivileged) or when
/// the user cannot be created or cannot reach the binaries under test.
fn drill_user() -> Option<(u32, u32)> {
    if !nix::unistd::geteuid().is_root() {
        println!("SKIP: not root — every other drill here already ran as an unprivileged user");
        return None;
    }
    let id = |flag: &str| -> Option<u32> {
        let o = Command::new("id")
            .args([flag, "trantor-drill"])
            .output()
            .ok()?;
        String::from_utf8_lossy(&o.stdout).trim().parse().ok()
    };
    if id("-u").is_none() {
        let made = Command::new("useradd")
            .args([
                "--system",
                "--no-create-home",
                "--shell",
                "/bin/sh",
                "trantor-drill",
            ])
            .status()
            .is_ok_and(|s| s.success());
        if !made && id("-u").is_none() {
            println!("SKIP: cannot create the unprivileged user trantor-drill (useradd)");
            return None;
        }
    }
    let user = (id("-u")?, id("-g")?);
    // The binary under test and the CLIs must be reachable by that user.
    let reach = Command::new(common::bin())
        .arg("--version")
        .uid_gid(user)
        .output()
        .is_ok_and(|o| o.status.success());
    if !reach {
        println!(
            "SKIP: {} is not executable by an unprivileged user",
            common::bin().display()
        );
        return None;
    }
    Some(user)
}

trait UidGid {
    fn uid_gid(&mut self, user: (u32, u32)) -> &mut Self;
}

impl UidGid for Command {
    fn uid_gid(&mut self, user: (u32, u32)) -> &mut Self {
        use std::os::unix::process::CommandExt;
        self.uid(user.0).gid(user.1)
    }
}

/// Claude Code refuses `--dangerously-skip-permissions` only as root; run as a normal user the
/// same seat works without `IS_SANDBOX`.
#[test]
fn claude_turns_as_an_unprivileged_user() {
    if clis().is_none() {
        return;
    }
    let Some(user) = drill_user() else { return };
    turns_as("claude", Some(user));
}

/// Codex and OpenCode seats run as a normal user too: first turn, MCP call as the seat, a file
/// written by the CLI's tool owned by that user, and the resumed second turn.
#[test]
fn codex_turns_as_an_unprivileged_user() {
    if clis().is_none() {
        return;
    }
    let Some(user) = drill_user() else { return };
    turns_as("codex", Some(user));
}

#[test]
fn opencode_turns_as_an_unprivileged_user() {
    if clis().is_none() {
        return;
    }
    let Some(user) = drill_user() else { return };
    turns_as("opencode", Some(user));
}

/// A provider answer that fails the turn parks the seat with `reason`.
fn provider_answer_parks(agent: &str, script: Script, reason: &str) -> (RealSeat, Value, i64) {
    provider_answer_parks_as(agent, script, reason, false)
}

/// The same, with Claude Code signed in by a subscription token when `oauth`.
fn provider_answer_parks_as(
    agent: &str,
    script: Script,
    reason: &str,
    oauth: bool,
) -> (RealSeat, Value, i64) {
    let clis = clis().expect("checked by the caller");
    let hub = Hub::start();
    let api = ModelApi::start();
    let mut seat = RealSeat::new(agent, &clis, &api);
    seat.oauth = oauth;
    seat.start(&hub.url());
    seat.wait_idle_after(1);
    let marker = format!("FAILWAKE{agent}{}", reason.replace('-', ""));
    api.script(&marker, script);
    let before = now_ms();
    hub_send(
        hub.port,
        ORCH,
        &seat.session(),
        PROJECT,
        &format!("{marker}: build it"),
    );
    wait_until(&format!("the {reason} park of {agent}"), LONG, || {
        seat.park().is_some()
    });
    let park = seat.park().unwrap_or(Value::Null);
    assert_eq!(park["reason"], reason, "{park}\n{}", seat.evidence());
    assert!(
        !api.requests_for(&marker).is_empty(),
        "the CLI never asked the model"
    );
    (seat, park, before)
}

fn anthropic_usage_limit() -> Script {
    let reset = now_ms() / 1000 + 7200;
    Script::Status {
        code: 429,
        headers: vec![
            ("retry-after".into(), "7200".into()),
            (
                "anthropic-ratelimit-unified-status".into(),
                "rejected".into(),
            ),
            (
                "anthropic-ratelimit-unified-reset".into(),
                reset.to_string(),
            ),
        ],
        body: json!({"type": "error", "error": {"type": "rate_limit_error",
            "message": "This request would exceed your account's rate limit. Please try again later."}}),
    }
}

/// The same 429 as a subscription's 5-hour limit: the unified headers name the claim.
fn anthropic_subscription_limit() -> Script {
    let reset = (now_ms() / 1000 + 7200).to_string();
    let Script::Status {
        code,
        mut headers,
        body,
    } = anthropic_usage_limit()
    else {
        unreachable!("a status script")
    };
    headers.extend([
        (
            "anthropic-ratelimit-unified-representative-claim".into(),
            "five_hour".into(),
        ),
        (
            "anthropic-ratelimit-unified-5h-status".into(),
            "rejected".into(),
        ),
        ("anthropic-ratelimit-unified-5h-reset".into(), reset),
    ]);
    Script::Status {
        code,
        headers,
        body,
    }
}

fn openai_usage_limit() -> Script {
    openai_usage_limit_at(now_ms() / 1000 + 7200)
}

/// Codex's `usage_limit_reached` 429, resetting at `reset_s` (epoch seconds).
fn openai_usage_limit_at(reset_s: i64) -> Script {
    Script::Status {
        code: 429,
        headers: vec![],
        body: json!({"error": {"type": "usage_limit_reached",
            "message": "The usage limit has been reached", "plan_type": "pro",
            "resets_at": reset_s, "resets_in_seconds": (reset_s - now_ms() / 1000).max(1)}}),
    }
}

/// OpenAI's rate-limit answer on chat completions (requests per day spent): the reset as a
/// Go-style duration in the message and the headers, `retry-after` in seconds.
fn openai_rate_limit() -> Script {
    Script::Status {
        code: 429,
        headers: vec![
            ("retry-after".into(), "7200".into()),
            ("x-ratelimit-limit-requests".into(), "200".into()),
            ("x-ratelimit-remaining-requests".into(), "0".into()),
            ("x-ratelimit-reset-requests".into(), "1h59m59.5s".into()),
        ],
        body: json!({"error": {"message": "Rate limit reached for drill-model in organization \
            org-drill on requests per day (RPD): Limit 200, Used 200, Requested 1. Please try \
            again in 1h59m59.5s. Visit https://platform.openai.com/account/rate-limits to learn \
            more.", "type": "requests", "param": null, "code": "rate_limit_exceeded"}}),
    }
}

fn unauthorized(agent: &str) -> Script {
    let body = if agent == "claude" {
        json!({"type": "error", "error": {"type": "authentication_error",
            "message": "invalid x-api-key"}})
    } else {
        json!({"error": {"message": "Incorrect API key provided: drill-key.",
            "type": "invalid_request_error", "code": "invalid_api_key"}})
    };
    Script::Status {
        code: 401,
        headers: vec![],
        body,
    }
}

fn usage_limit_and_auth_park(agent: &str) {
    if clis().is_none() {
        return;
    }
    let limit = match agent {
        "claude" => anthropic_usage_limit(),
        "codex" => openai_usage_limit(),
        _ => openai_rate_limit(),
    };
    std::thread::scope(|s| {
        let exhausted = s.spawn(|| provider_answer_parks(agent, limit, "exhausted"));
        let auth = s.spawn(|| provider_answer_parks(agent, unauthorized(agent), "auth"));
        let (seat, park, before) = exhausted.join().expect("exhausted drill");
        let until = park["until"].as_i64().unwrap_or(0);
        println!(
            "{agent} usage limit parked until +{} s",
            (until - before) / 1000
        );
        if agent != "claude" {
            // Codex prints the provider's reset as a local wall-clock time ("try again at 7:57 PM");
            // OpenCode keeps retrying and logs the provider's message ("try again in 1h59m59.5s"),
            // which the watchdog reads to end the turn. The park keeps that reset.
            let two_hours = 7_200_000;
            assert!(
                until >= before + two_hours - 120_000 && until <= now_ms() + two_hours + 120_000,
                "until {until} is not the provider's reset (+2 h)\n{}",
                seat.evidence()
            );
        } else {
            assert!(until > before, "{park}");
        }
        auth.join().expect("auth drill");
    });
}

#[test]
fn claude_usage_limit_parks_exhausted_and_a_bad_key_parks_auth() {
    usage_limit_and_auth_park("claude");
}

#[test]
fn codex_usage_limit_parks_exhausted_until_the_reset_and_a_bad_key_parks_auth() {
    usage_limit_and_auth_park("codex");
}

/// Signed in with a subscription, Claude Code words the same 429 as "You've hit your 5-hour
/// limit · resets 11:16pm (UTC)" (from the unified rate-limit headers): `exhausted`, parked until
/// that reset (the minute it names).
#[test]
fn claude_subscription_limit_parks_exhausted_until_the_reset() {
    if clis().is_none() {
        return;
    }
    let (seat, park, before) =
        provider_answer_parks_as("claude", anthropic_subscription_limit(), "exhausted", true);
    let until = park["until"].as_i64().unwrap_or(0);
    println!(
        "claude (subscription) parked until +{} s: {}",
        (until - before) / 1000,
        park["evidence"]
    );
    let two_hours = 7_200_000;
    assert!(
        until >= before + two_hours - 120_000 && until <= now_ms() + two_hours + 120_000,
        "until {until} is not the provider's reset (+2 h)\n{}",
        seat.evidence()
    );
}

/// Claude Code's 429 for a subscription's 5-hour limit, resetting at `reset_s` (epoch seconds):
/// the unified headers Claude Code reads to print "You've hit your 5-hour limit · resets …".
fn anthropic_subscription_limit_at(reset_s: i64) -> Script {
    let reset = reset_s.to_string();
    Script::Status {
        code: 429,
        headers: vec![
            (
                "retry-after".into(),
                (reset_s - now_ms() / 1000).max(1).to_string(),
            ),
            (
                "anthropic-ratelimit-unified-status".into(),
                "rejected".into(),
            ),
            ("anthropic-ratelimit-unified-reset".into(), reset.clone()),
            (
                "anthropic-ratelimit-unified-representative-claim".into(),
                "five_hour".into(),
            ),
            (
                "anthropic-ratelimit-unified-5h-status".into(),
                "rejected".into(),
            ),
            ("anthropic-ratelimit-unified-5h-reset".into(), reset),
        ],
        body: json!({"type": "error", "error": {"type": "rate_limit_error",
            "message": "This request would exceed your account's rate limit. Please try again later."}}),
    }
}

/// The circuit breaker with a real CLI (issue 23, docs/runner.md §12.5): three seats, two on
/// credential `spent` and one on the pool `spent,fresh`; the scripted model answers the `spent`
/// key with the provider's usage-limit 429 resetting 20 s ahead (Claude Code: a subscription's
/// 5-hour limit; Codex: `usage_limit_reached`). The first seat's turn proves it:
/// both seats on it park within a second of the hub's mark and spawn no further turn (a contract
/// sent to the second is held without a request to the model); the pooled seat runs its contract
/// on `fresh` at once; after the reset (the end of the minute the CLI prints) both resume and
/// each held contract runs once; the card carries the tokens and dollars the scripted model
/// reported, and `trantor cost --card` shows them.
fn circuit_breaker_parks_the_crew_and_a_pool_moves_on(agent: &str) {
    let Some(clis) = clis() else { return };
    let claude = agent == "claude";
    let hub = Hub::start();
    let api = ModelApi::start();
    let usage = Usage {
        input: 2100,
        output: 77,
        cache_read: 0,
        cache_write: 0,
    };
    api.report_usage(usage);
    let (spent, fresh, var) = if claude {
        (
            "sk-ant-oat01-drill-spent",
            "sk-ant-oat01-drill-fresh",
            "CLAUDE_CODE_OAUTH_TOKEN",
        )
    } else {
        ("drill-key-spent", "drill-key-fresh", "DRILL_API_KEY")
    };
    let seat = |persona: &str, on: (&str, &str)| {
        let mut s = RealSeat::new(agent, &clis, &api);
        s.persona = persona.into();
        s.oauth = claude;
        if !claude {
            // A model the price table knows (the scripted API answers any).
            s.extra.push(("CREW_MODEL".into(), "gpt-5".into()));
        }
        for (name, key) in [("spent", spent), ("fresh", fresh)] {
            let o = Command::new(common::bin())
                .args(["credentials", "add", name, "--agent", agent])
                .arg("--env")
                .arg(format!("{var}={key}"))
                .env("AGENT_BUS_DIR", &s.bus)
                .env("RELAY_URL", hub.url())
                .env("HOME", &s.home)
                .output()
                .expect("credentials add");
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        }
        s.extra.push((on.0.into(), on.1.into()));
        s.start(&hub.url());
        s
    };
    let ada = seat("ada", ("CREW_CREDENTIAL", "spent"));
    let bo = seat("bo", ("CREW_CREDENTIAL", "spent"));
    let cy = seat("cy", ("CREW_POOL", "spent,fresh"));
    for s in [&ada, &bo, &cy] {
        s.wait_idle_after(1);
    }
    let cred = |name: &str| {
        let (_, v) = hub_request(hub.port, "GET", "/credentials", None).expect("credentials");
        v["credentials"]
            .as_array()
            .and_then(|a| a.iter().find(|c| c["name"] == name).cloned())
            .unwrap_or(Value::Null)
    };
    wait_until("the three seats listed on spent", LONG, || {
        cred("spent")["seats"] == json!(["ada:p", "bo:p", "cy:p"])
    });
    // A card per seat; each turn moves its own to testing (a delivery, docs/runner.md §11.2).
    let card_of = |seat: &str| {
        let (st, card) = hub_request(
            hub.port,
            "POST",
            "/task",
            Some(
                &json!({"project": PROJECT, "title": format!("breaker drill {seat}"),
                "assignee": format!("{seat}:p")}),
            ),
        )
        .expect("card");
        assert!(st < 300, "{card}");
        card["task"]["id"].as_i64().expect("card id")
    };
    let cards = [
        ("BREAKA", card_of("ada")),
        ("BREAKB", card_of("bo")),
        ("BREAKC", card_of("cy")),
    ];
    for (m, id) in cards {
        api.script(
            m,
            Script::Steps(vec![
                Step::Tool(
                    "relay_task_move".into(),
                    json!({"id": id, "status": "testing", "note": format!("{m}: drill, nothing to test")}),
                ),
                Step::Say(format!("{m} done")),
            ]),
        );
    }
    // The spent token's quota runs out now and comes back 20 s later.
    let reset_ms = now_ms() + 20_000;
    api.limit_key(
        spent,
        reset_ms,
        if claude {
            anthropic_subscription_limit_at(reset_ms / 1000)
        } else {
            openai_usage_limit_at(reset_ms / 1000)
        },
    );
    let bo_turns = bo.turn_rows().len();
    let id_a = hub_send(
        hub.port,
        ORCH,
        "ada:p",
        PROJECT,
        &format!("your card #{}: BREAKA build it", cards[0].1),
    );
    wait_until("spent marked exhausted", LONG, || {
        cred("spent")["state"] == "exhausted"
    });
    let until = cred("spent")["until"].as_i64().expect("until");
    assert!(
        until >= reset_ms && until <= reset_ms + 61_000,
        "until {until} is the end of the minute Claude Code printed for {reset_ms}\n{}",
        ada.evidence()
    );
    let notice = hub_messages(hub.port, "observer:p")
        .into_iter()
        .find(|m| {
            m["from"] == "hub:quota" && m["text"].as_str().is_some_and(|t| t.contains("EXHAUSTED"))
        })
        .expect("the hub's mark notice");
    let marked_at = notice["ts"].as_i64().expect("ts");
    // Both seats on the credential park within a second of the mark; bo was idle.
    wait_until("ada and bo parked", LONG, || {
        ada.park().is_some() && bo.park().is_some()
    });
    for s in [&ada, &bo] {
        let p = s.park().unwrap_or(Value::Null);
        assert_eq!(p["reason"], "exhausted", "{p}\n{}", s.evidence());
        let lag = p["ts"].as_i64().unwrap_or(i64::MAX) - marked_at;
        println!("{} parked {lag} ms after the mark", s.session());
        assert!(
            lag < 1_000,
            "{} parked {lag} ms after the mark: {p}",
            s.session()
        );
    }
    // A contract to bo is held: no turn, no request to the model, before the reset.
    let id_b = hub_send(
        hub.port,
        ORCH,
        "bo:p",
        PROJECT,
        &format!("your card #{}: BREAKB and this", cards[1].1),
    );
    // The pooled seat runs its contract on fresh at once.
    let id_c = hub_send(
        hub.port,
        ORCH,
        "cy:p",
        PROJECT,
        &format!("your card #{}: BREAKC and that", cards[2].1),
    );
    let done = |s: &RealSeat| from_seat(hub.port, s, "done on").len();
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    while done(&cy) < 1 {
        assert!(
            std::time::Instant::now() < deadline,
            "cy's done receipt never came\n{}\nrequests: {:#?}",
            cy.evidence(),
            api.requests()
                .iter()
                .map(|r| (r.key.clone(), r.marker.clone(), r.limited))
                .collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(
        now_ms() < reset_ms,
        "cy's contract ran before the reset, on the pool's second credential"
    );
    let c_keys: Vec<Option<String>> = api
        .requests_for("BREAKC")
        .into_iter()
        .map(|r| r.key)
        .collect();
    assert!(
        !c_keys.is_empty() && c_keys.iter().all(|k| k.as_deref() == Some(fresh)),
        "cy's turn ran on fresh: {c_keys:?}\n{}",
        cy.evidence()
    );
    assert!(
        api.requests_for("BREAKB").is_empty(),
        "bo spawned no turn before the reset"
    );
    assert_eq!(
        bo.turn_rows().len(),
        bo_turns,
        "bo ran no turn while parked"
    );
    let spent_requests = || {
        api.requests()
            .into_iter()
            .filter(|r| r.key.as_deref() == Some(spent) && r.limited)
            .count()
    };
    let refused = spent_requests();
    // After the reset both resume by themselves and run their held contracts once.
    wait_until("ada's and bo's done receipts after the reset", LONG, || {
        done(&ada) >= 1 && done(&bo) >= 1
    });
    assert!(now_ms() >= until, "nothing ran before the reset");
    assert_eq!(
        spent_requests(),
        refused,
        "no request on spent was refused after the mark's turn"
    );
    for (s, id) in [(&ada, id_a), (&bo, id_b), (&cy, id_c)] {
        let receipts = from_seat(hub.port, s, "done on");
        assert_eq!(receipts.len(), 1, "{}: {receipts:#?}", s.session());
        assert_eq!(receipts[0]["re"].as_i64(), Some(id), "{}", s.session());
    }
    // Each card carries what the model reported for every answered request of its turns.
    let cost = |id: i64| {
        hub_request(hub.port, "GET", &format!("/card?id={id}"), None)
            .map(|(_, v)| v["cost"].clone())
            .unwrap_or(Value::Null)
    };
    for (m, id) in cards {
        let answered = api.requests_for(m).iter().filter(|r| !r.limited).count() as u64;
        assert!(answered >= 2, "{m}: a tool call and the final text");
        wait_until(&format!("card #{id}'s cost"), LONG, || {
            cost(id)["tokensIn"].as_u64() == Some(answered * usage.input)
        });
        let c = cost(id);
        println!("breaker drill: {m} card #{id} cost {c}");
        assert_eq!(
            c["tokensOut"].as_u64(),
            Some(answered * usage.output),
            "{c}"
        );
        assert!(c["usd"].as_f64().unwrap_or(0.0) > 0.0, "{c}");
    }
    let (m, id) = cards[1];
    let o = Command::new(common::bin())
        .args(["cost", "--card", &id.to_string()])
        .env("RELAY_URL", hub.url())
        .env("HOME", &bo.home)
        .output()
        .expect("trantor cost");
    let shown = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{shown}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    println!("trantor cost --card {id}:\n{shown}");
    let tokens = cost(id)["tokensIn"].as_u64().unwrap_or(0);
    let usd = cost(id)["usd"].as_f64().unwrap_or(0.0);
    // As the CLI writes them for a person: 4200, 12.3k; $0.0123, $1.20.
    let tokens = if tokens < 10_000 {
        tokens.to_string()
    } else {
        format!("{:.1}k", tokens as f64 / 1000.0)
    };
    let usd = if usd >= 1.0 {
        format!("${usd:.2}")
    } else {
        format!("${usd:.4}")
    };
    assert!(
        shown.contains(&tokens) && shown.contains(&usd),
        "{m}: trantor cost shows the tokens ({tokens}) and dollars ({usd}): {shown}"
    );
}

#[test]
fn claude_circuit_breaker_parks_the_crew_and_a_pool_moves_on() {
    circuit_breaker_parks_the_crew_and_a_pool_moves_on("claude");
}

#[test]
fn codex_circuit_breaker_parks_the_crew_and_a_pool_moves_on() {
    circuit_breaker_parks_the_crew_and_a_pool_moves_on("codex");
}

/// OpenCode 1.18 retries a 429 on its own for as long as the provider's `retry-after` says,
/// printing nothing in `opencode run`; its log has the provider's message, which the runner's
/// watchdog reads to end the turn and park the seat until the reset.
#[test]
fn opencode_usage_limit_parks_exhausted_until_the_reset_and_a_bad_key_parks_auth() {
    usage_limit_and_auth_park("opencode");
}

/// Anthropic's 529 `overloaded_error` through the real Claude Code ("API Error: 529 Overloaded.
/// This is a server-side issue, usually temporary — try again in a moment."): the classifier
/// files it as `backend-error` — retried on the ladder, not a credential problem, not a usage
/// limit parked for hours — and a second failure in a row parks it only for the bounded window.
#[test]
fn claude_overloaded_is_a_backend_error_retried_later() {
    let Some(clis) = clis() else { return };
    let hub = Hub::start();
    let api = ModelApi::start();
    let mut seat = RealSeat::new("claude", &clis, &api);
    seat.extra = vec![
        ("TRANTOR_RETRY_MS".into(), "3000".into()),
        ("TRANTOR_PARK_WINDOW_MS".into(), "600000".into()),
    ];
    seat.start(&hub.url());
    seat.wait_idle_after(1);
    api.script(
        "OVERLOADWAKE",
        Script::Status {
            code: 529,
            headers: vec![("x-should-retry".into(), "true".into())],
            body: json!({"type": "error", "error": {"type": "overloaded_error",
                "message": "Overloaded"}}),
        },
    );
    hub_send(
        hub.port,
        ORCH,
        &seat.session(),
        PROJECT,
        "OVERLOADWAKE: build it",
    );
    wait_until("the first overloaded turn classified", LONG, || {
        seat.runner_log().contains("classified backend-error")
    });
    let err_file = seat.bus.join(format!("err-claude-{PROJECT}.txt"));
    let err = || std::fs::read_to_string(&err_file).unwrap_or_default();
    wait_until("Claude Code's words for the 529", LONG, || {
        err().contains("529 Overloaded")
    });
    println!("claude printed: {}", err().trim());
    // The retry (3 s later) fails the same way; two failures in a row park for the window only.
    let before = now_ms();
    wait_until("the bounded park", LONG, || seat.park().is_some());
    let park = seat.park().unwrap_or(Value::Null);
    assert_eq!(park["reason"], "api-error", "{park}\n{}", seat.evidence());
    assert_eq!(park["bounded"], true, "{park}");
    let until = park["until"].as_i64().unwrap_or(0);
    assert!(
        until > before && until <= now_ms() + 600_000,
        "{park}: not the 10-minute window"
    );
    assert!(
        api.requests_for("OVERLOADWAKE").len() >= 2,
        "the delivery was retried"
    );
    let log = seat.runner_log();
    assert!(
        !log.contains("classified auth") && !log.contains("classified exhausted"),
        "{}",
        seat.evidence()
    );
}

/// A person's plain `codex exec` (no bypass flag) may call trantor's write tools because
/// `trantor connect` approves them for the trantor entry.
#[test]
fn plain_codex_exec_calls_trantor_tools_approved_by_connect() {
    let Some(clis) = clis() else { return };
    let hub = Hub::start();
    let api = ModelApi::start();
    let seat = RealSeat::new("codex", &clis, &api);
    api.script(
        "PLAINEXEC",
        Script::Steps(vec![
            Step::Tool(
                "relay_send".into(),
                json!({"to": ORCH, "text": "PLAIN-EXEC-HELLO", "wake": false}),
            ),
            Step::Say("sent".into()),
        ]),
    );
    let mut cmd = Command::new(clis.join("codex"));
    seat.cli_env(&mut cmd);
    cmd.args(["exec", "--skip-git-repo-check", "PLAINEXEC: say hello"])
        .current_dir(&seat.repo)
        .env("RELAY_URL", hub.url())
        .env("RELAY_SESSION", "ada:p")
        .env("RELAY_PROJECT", PROJECT)
        .stdin(Stdio::null());
    let out = cmd.output().expect("codex exec");
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    assert!(!text.contains("requires approval"), "{text}");
    let got: Vec<Value> = hub_messages(hub.port, ORCH)
        .into_iter()
        .filter(|m| m["text"] == "PLAIN-EXEC-HELLO")
        .collect();
    assert_eq!(got.len(), 1, "{text}");
    assert_eq!(got[0]["from"], "ada:p");
}

/// The time box with short knobs on a real Claude Code turn: a turn that keeps streaming past
/// the box is extended on the CLI's own liveness and finishes uncut; a turn whose model goes
/// silent after the CLI wrote a file is cut, and the cut saves that file as a WIP commit on the
/// seat branch. (The stall window's 10-minute floor is not shortened here: while the CLI's
/// transcript moved within the window the box extends, so the silent turn is cut at the
/// ceiling.)
#[test]
fn claude_hung_turn_is_cut_with_a_wip_commit_and_a_working_turn_is_not() {
    let Some(clis) = clis() else { return };
    // Each seat has its own hub: both seats are `<agent>:p`, and one hub would deliver
    // each drill's wake to whichever of them polled first.
    let knobs = [
        // The watchdog samples every 10 s (a quarter of the 10-minute window, capped), so the
        // box must leave room for a sample before its deadline.
        ("TRANTOR_TURN_MAX_MS", "60000"),
        ("TRANTOR_TURN_CEILING_MS", "150000"),
    ];
    std::thread::scope(|s| {
        let working = s.spawn(|| {
            let hub = Hub::start();
            let api = ModelApi::start();
            let mut seat = RealSeat::new("claude", &clis, &api);
            seat.extra = knobs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            seat.start(&hub.url());
            seat.wait_idle_after(1);
            api.script(
                "SLOWWORK",
                Script::Slow {
                    text: "Still working through the long answer, piece by piece. Done.".into(),
                    chunks: 10,
                    every: Duration::from_secs(9),
                },
            );
            hub_send(
                hub.port,
                ORCH,
                &seat.session(),
                PROJECT,
                "SLOWWORK: take your time",
            );
            seat.wait_idle_after(2);
            let row = seat.turn_rows().pop().unwrap_or(Value::Null);
            assert!(row.get("cut").is_none(), "{row}\n{}", seat.evidence());
            assert!(
                seat.runner_log().contains("turn extended"),
                "the box never extended\n{}",
                seat.evidence()
            );
        });
        let hung = s.spawn(|| {
            let hub = Hub::start();
            let api = ModelApi::start();
            let mut seat = RealSeat::new("claude", &clis, &api);
            seat.extra = knobs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            seat.extra.push(("TRANTOR_NO_WORKTREE".into(), "0".into()));
            seat.start(&hub.url());
            seat.wait_idle_after(1);
            let tree = seat.bus.join("worktrees").join(PROJECT).join("claude");
            assert!(
                tree.is_dir(),
                "no seat worktree at {}\n{}",
                tree.display(),
                seat.evidence()
            );
            api.script(
                "HANGWORK",
                Script::Steps(vec![
                    Step::WriteFile {
                        path: tree.join("half-done.txt").display().to_string(),
                        content: "half done".into(),
                    },
                    Step::Hang,
                ]),
            );
            hub_send(
                hub.port,
                ORCH,
                &seat.session(),
                PROJECT,
                "HANGWORK: start the work",
            );
            wait_until("the cut turn's row", LONG, || {
                seat.turn_rows().iter().any(|r| r.get("cut").is_some())
            });
            let log = common::git_in(&tree, &["log", "--format=%s", "-3"]);
            assert!(
                log.contains("wip: cut at box"),
                "{log}\n{}",
                seat.evidence()
            );
            let files = common::git_in(&tree, &["show", "--name-only", "--format=", "HEAD"]);
            assert!(files.contains("half-done.txt"), "{files}");
        });
        working.join().expect("working drill");
        hung.join().expect("hung drill");
    });
}

/// The stall drills' knobs: a 30-second stall window, the 10-minute floor lowered by its
/// documented knob (docs/runner.md §8.2); the box stays at its default.
const STALL_KNOBS: [(&str, &str); 2] = [
    ("TRANTOR_TURN_WATCHDOG_MS", "30000"),
    ("TRANTOR_TURN_WATCHDOG_FLOOR_MS", "30000"),
];
const STALL_WINDOW_MS: i64 = 30_000;

/// With a short stall window on a real CLI: a turn whose model answers slowly but keeps making
/// progress (an MCP call every 8 s, for longer than the window) is never cut — the watchdog sees
/// the CLI's own liveness (its output and its session files or database) — and a turn whose model
/// goes silent after its first call is cut as stalled.
fn hung_is_cut_and_working_is_not(agent: &str) {
    let Some(clis) = clis() else { return };
    // Each seat has its own hub: both seats are `<agent>:p`, and one hub would deliver
    // each drill's wake to whichever of them polled first.
    let knobs: Vec<(String, String)> = STALL_KNOBS
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    std::thread::scope(|s| {
        let working = s.spawn(|| {
            let hub = Hub::start();
            let api = ModelApi::start();
            let mut seat = RealSeat::new(agent, &clis, &api);
            seat.extra = knobs.clone();
            seat.start(&hub.url());
            seat.wait_idle_after(1);
            let marker = format!("SLOWSTEPS{agent}");
            let think = Duration::from_secs(8);
            let mut steps: Vec<Step> = (1..=5)
                .map(|n| {
                    Step::Slowly(
                        think,
                        Box::new(Step::Tool(
                            "relay_send".into(),
                            json!({"to": ORCH, "text": format!("PROGRESS {n} {agent}"),
                                "wake": false}),
                        )),
                    )
                })
                .collect();
            steps.push(Step::Slowly(
                think,
                Box::new(Step::Say(format!("SLOW-DONE {agent}"))),
            ));
            api.script(&marker, Script::Steps(steps));
            let t0 = now_ms();
            hub_send(
                hub.port,
                ORCH,
                &seat.session(),
                PROJECT,
                &format!("{marker}: take your time, report progress"),
            );
            seat.wait_idle_after(2);
            let took = now_ms() - t0;
            let row = seat.turn_rows().pop().unwrap_or(Value::Null);
            assert!(
                row.get("cut").is_none() && row.get("stalled").is_none(),
                "{row}\n{}",
                seat.evidence()
            );
            assert_eq!(
                from_seat(hub.port, &seat, "PROGRESS").len(),
                5,
                "{}",
                seat.evidence()
            );
            assert!(
                took > STALL_WINDOW_MS,
                "the working turn ({took} ms) did not outlast the stall window"
            );
            println!("{agent}: the working turn ran {took} ms past a {STALL_WINDOW_MS} ms window");
        });
        let hung = s.spawn(|| {
            let hub = Hub::start();
            let api = ModelApi::start();
            let mut seat = RealSeat::new(agent, &clis, &api);
            seat.extra = knobs.clone();
            seat.start(&hub.url());
            seat.wait_idle_after(1);
            let marker = format!("HANGSTEPS{agent}");
            api.script(
                &marker,
                Script::Steps(vec![
                    Step::Tool(
                        "relay_send".into(),
                        json!({"to": ORCH, "text": format!("HUNG-START {agent}"), "wake": false}),
                    ),
                    Step::Hang,
                ]),
            );
            hub_send(
                hub.port,
                ORCH,
                &seat.session(),
                PROJECT,
                &format!("{marker}: start the work"),
            );
            wait_until("the first call before the hang", LONG, || {
                !from_seat(hub.port, &seat, "HUNG-START").is_empty()
            });
            let t_call = now_ms();
            wait_until("the stalled turn's row", LONG, || {
                seat.turn_rows().iter().any(|r| r["stalled"] == true)
            });
            let took = now_ms() - t_call;
            let row = seat
                .turn_rows()
                .into_iter()
                .find(|r| r["stalled"] == true)
                .unwrap_or(Value::Null);
            assert_eq!(row["cut"], true, "{row}");
            assert!(
                seat.runner_log().contains("turn stalled"),
                "{}",
                seat.evidence()
            );
            // Cut by the stall window, not by the 20-minute box.
            assert!(took < 600_000, "stalled after {took} ms");
            println!("{agent}: the hung turn was cut {took} ms after its last call");
        });
        working.join().expect("working drill");
        hung.join().expect("hung drill");
    });
}

#[test]
fn codex_hung_turn_is_cut_and_a_working_turn_is_not() {
    hung_is_cut_and_working_is_not("codex");
}

#[test]
fn opencode_hung_turn_is_cut_and_a_working_turn_is_not() {
    hung_is_cut_and_working_is_not("opencode");
}

/// OpenCode retries an overloaded provider by itself with a growing backoff, and each retry only
/// adds a line to its log: that is not work, so with a short stall window the turn is cut as
/// stalled (and retried on the ladder) instead of being extended for the whole ceiling.
#[test]
fn opencode_overload_retries_are_not_liveness() {
    let Some(clis) = clis() else { return };
    let hub = Hub::start();
    let api = ModelApi::start();
    let mut seat = RealSeat::new("opencode", &clis, &api);
    // A 45-second window: longer than OpenCode's longest backoff (30 s), so its retry lines
    // would keep the turn alive if they counted.
    seat.extra = vec![
        ("TRANTOR_TURN_WATCHDOG_MS".into(), "45000".into()),
        ("TRANTOR_TURN_WATCHDOG_FLOOR_MS".into(), "45000".into()),
    ];
    seat.start(&hub.url());
    seat.wait_idle_after(1);
    api.script(
        "OVERLOADOC",
        Script::Status {
            code: 529,
            headers: vec![],
            body: json!({"error": {"message": "Overloaded", "type": "overloaded_error"}}),
        },
    );
    let t0 = now_ms();
    hub_send(
        hub.port,
        ORCH,
        &seat.session(),
        PROJECT,
        "OVERLOADOC: build it",
    );
    wait_until("the stalled turn's row", LONG, || {
        seat.turn_rows().iter().any(|r| r["stalled"] == true)
    });
    let took = now_ms() - t0;
    assert!(
        api.requests_for("OVERLOADOC").len() >= 2,
        "OpenCode did not retry on its own\n{}",
        seat.evidence()
    );
    assert!(
        seat.park().is_none(),
        "a transient overload parked the seat"
    );
    println!("opencode: overloaded turn cut as stalled after {took} ms");
}

/// The real Claude Code and Codex, with nothing of trantor on the machine but the entries
/// `trantor connect --http --token` wrote, call a tool on the hub's `/mcp` (enforce mode) and
/// the hub records it as the token's session.
#[test]
fn claude_and_codex_call_tools_over_http_with_a_bearer_token() {
    let Some(clis) = clis() else { return };
    const BOOT: &str = "real-clis-http-bootstrap-0123456789";
    let tmp = tempfile::tempdir().expect("tmp");
    let hub = Hub::start_in(
        &tmp.path().join("hub"),
        common::free_port(),
        &[("RELAY_AUTH", "enforce"), ("RELAY_BOOTSTRAP_TOKEN", BOOT)],
    );
    let ops = tmp.path().join("ops");
    std::fs::create_dir_all(&ops).expect("ops");
    let trantor = |args: &[&str], home: &Path| {
        let o = Command::new(common::bin())
            .args(args)
            .env("AGENT_BUS_DIR", &ops)
            .env("HOME", home)
            .env("RELAY_URL", hub.url())
            .env("RELAY_SESSION", "orch:web")
            .env_remove("XDG_CONFIG_HOME")
            .env_remove("RELAY_DATA_DIR")
            .env_remove("RELAY_PROJECT")
            .env_remove("RELAY_OWNER_IDENTITY")
            .env_remove("TRANTOR_MCP_TOKEN")
            .stdin(Stdio::null())
            .output()
            .expect("run trantor");
        assert!(
            o.status.success(),
            "trantor {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    };
    trantor(
        &[
            "identity",
            "enroll",
            "--session",
            "orch:web",
            "--bootstrap-token",
            BOOT,
        ],
        &ops,
    );
    let reader = trantor(
        &["token", "mint", "--session", "orch:web", "--role", "read"],
        &ops,
    );
    let api = ModelApi::start();
    let inbox = || -> Vec<Value> {
        let body = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("rt")
            .block_on(async {
                trantor_proto::tls::install_default_provider();
                let r = reqwest::Client::new()
                    .get(format!(
                        "{}/inbox?session=orch%3Aweb&since=0&peek=1",
                        hub.url()
                    ))
                    .bearer_auth(&reader)
                    .send()
                    .await
                    .ok()?;
                r.json::<Value>().await.ok()
            })
            .unwrap_or_default();
        body["messages"].as_array().cloned().unwrap_or_default()
    };

    for agent in ["claude", "codex"] {
        let session = format!("{agent}:web");
        let token = trantor(&["token", "mint", "--session", &session], &ops);
        let home = tmp.path().join(format!("home-{agent}"));
        std::fs::create_dir_all(&home).expect("home");
        if agent == "codex" {
            let dir = home.join(".codex");
            std::fs::create_dir_all(&dir).expect("codex dir");
            std::fs::write(
                dir.join("config.toml"),
                format!(
                    "model = \"drill-model\"\nmodel_provider = \"drill\"\n\n\
                     [model_providers.drill]\nname = \"drill\"\nbase_url = \"{}/v1\"\n\
                     env_key = \"DRILL_API_KEY\"\nwire_api = \"responses\"\n\
                     request_max_retries = 0\nstream_max_retries = 0\n",
                    api.url()
                ),
            )
            .expect("codex config");
        }
        trantor(
            &[
                "connect",
                "--http",
                "--only",
                agent,
                "--token",
                &token,
                "--url",
                &hub.url(),
            ],
            &home,
        );
        let marker = format!("OVERHTTP{agent}");
        let text = format!("{agent} over streamable http {marker}");
        api.script(
            &marker,
            Script::Steps(vec![
                Step::Tool(
                    "relay_send".into(),
                    json!({"to": "orch:web", "text": text, "wake": false}),
                ),
                Step::Say(format!("SENT {marker}")),
            ]),
        );
        let prompt = format!("{marker}: send the note to orch:web with relay_send, then stop.");
        let mut cmd = Command::new(clis.join(agent));
        match agent {
            "claude" => cmd.args(["-p", &prompt, "--dangerously-skip-permissions"]),
            _ => cmd.args([
                "exec",
                "--skip-git-repo-check",
                "--dangerously-bypass-approvals-and-sandbox",
                &prompt,
            ]),
        };
        let path = format!(
            "{}:{}",
            clis.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        cmd.current_dir(&home)
            .env("HOME", &home)
            .env("PATH", path)
            .env_remove("XDG_CONFIG_HOME")
            .env_remove("RELAY_URL")
            .env_remove("RELAY_SESSION")
            .env("ANTHROPIC_BASE_URL", api.url())
            .env("ANTHROPIC_API_KEY", "sk-ant-drill")
            .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
            .env("DISABLE_AUTOUPDATER", "1")
            .env("CLAUDE_CODE_MAX_RETRIES", "0")
            .env("DRILL_API_KEY", "drill-key")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if nix::unistd::geteuid().is_root() {
            cmd.env("IS_SANDBOX", "1");
        }
        let child = cmd.spawn().expect("run the real CLI");
        let out = child.wait_with_output().expect("CLI output");
        let said = format!(
            "{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        wait_until(
            &format!("{agent}'s message over /mcp on the hub"),
            Duration::from_secs(30),
            || {
                inbox()
                    .iter()
                    .any(|m| m["from"] == session.as_str() && m["text"] == text.as_str())
            },
        );
        assert!(said.contains(&format!("SENT {marker}")), "{agent}: {said}");
    }
}

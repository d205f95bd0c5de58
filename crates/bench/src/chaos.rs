//! `trantor bench chaos`: the seat's promise under faults (docs/runner.md §24).
//!
//! A real hub and N real `trantor runner` seats (the `command` driver with a small agent script
//! that works 0.3–2.5 s per turn), contracts sent at a steady rate, while the hub and the runner
//! processes are `kill -9`ed at random and restarted. A runner is killed alone — its CLI leads
//! its own process group and lives on, as it does after a crash — so the restarted runner must
//! adopt the orphan. Each agent appends to its seat's ledger the contract tokens it started and
//! (as its very last act, after its answer reached the runner) completed, and flags two agent
//! CLIs alive at once in one seat. Counting those files gives: contracts acknowledged (a `/send`
//! that returned), lost (acknowledged, never completed), duplicated (completed by two turns),
//! overlapping CLIs, and acknowledgement → turn started (p50/p99). Every file stays in `--dir`
//! when given, so a test can count them itself (crates/cli/tests/chaos.rs).

use super::hub_proc::percentile;
use super::{Row, Table};
use anyhow::{Context, Result, bail};
use serde_json::json;
use std::collections::BTreeMap;
use std::io::Write as _;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use trantor_proto::{HubClient, SendRequest};

/// Which phases to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Kills {
    /// Only with the kills.
    On,
    /// Only without.
    Off,
    /// Without, then with (the same load).
    Both,
}

/// Options of `trantor bench chaos`.
#[derive(Debug, Clone, clap::Args)]
pub struct ChaosBenchArgs {
    /// Seats (runner processes) on the hub.
    #[arg(long, default_value_t = 4)]
    pub seats: usize,
    /// Contracts to send, round-robin over the seats.
    #[arg(long, default_value_t = 60)]
    pub contracts: usize,
    /// The steady rate: one contract every this many ms.
    #[arg(long, default_value_t = 600)]
    pub interval_ms: u64,
    /// The mean time between two kills, ms (each drawn between half and one and a half of it).
    #[arg(long, default_value_t = 2500)]
    pub kill_every_ms: u64,
    /// Which phases to run.
    #[arg(long, value_enum, default_value_t = Kills::Both)]
    pub kills: Kills,
    /// How long to wait, after the last contract, for every one to complete (s).
    #[arg(long, default_value_t = 120)]
    pub drain_secs: u64,
    /// The random seed (printed; the same seed draws the same kills).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Keep every file here (one sub-directory per phase) instead of a temporary directory.
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Also write the numbers as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Also write the markdown report to this file.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// One phase's numbers.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct ChaosNumbers {
    /// Kills on.
    pub kills: bool,
    /// Contracts acknowledged by the hub.
    pub acknowledged: usize,
    /// `/send` attempts that failed (the hub down) and were sent again as a new contract.
    pub unacknowledged_attempts: usize,
    /// Acknowledged contracts no completed turn acted on.
    pub lost: usize,
    /// Acknowledged contracts acted on by two or more completed turns.
    pub duplicated: usize,
    /// Times two agent CLIs were alive at once in one seat.
    pub overlapping: usize,
    /// Acknowledged contracts whose `/delivery` record is not complete and in order
    /// ([`record_complete`]).
    pub incomplete_records: usize,
    /// `kill -9` of the hub.
    pub hub_kills: usize,
    /// `kill -9` of a runner (alone; its CLI left running).
    pub runner_kills: usize,
    /// Acknowledgement → the first turn that carried the contract started, ms, sorted.
    pub ack_to_start_ms: Vec<f64>,
    /// Wall time of the phase, s.
    pub secs: f64,
    /// The seed.
    pub seed: u64,
}

/// xorshift64*: a reproducible draw without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next() % n }
    }
}

fn now_ns() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

/// The agent: marks itself busy (and flags any other live CLI of the seat), logs the contract
/// tokens of its prompt as started, works 0.3–2.5 s, answers, and only then logs them done.
const AGENT: &str = r#"#!/bin/bash
d="$CHAOS_DIR/$TRANTOR_PERSONA"
mkdir -p "$d"
me=$$
: > "$d/busy-$me"
for f in "$d"/busy-*; do
  p=${f##*busy-}
  # alive: not gone and not a zombie (a killed CLI whose reaper never came)
  if [ "$p" != "$me" ] && [ -r "/proc/$p/stat" ] && ! sed 's/.*) //' "/proc/$p/stat" 2>/dev/null | grep -q '^Z'; then
    echo "OVERLAP $(date +%s%N) $me $p" >> "$d/overlap"
  fi
done
tokens=$(grep -o 'CHAOS-[0-9]*-[0-9]*' "$1" 2>/dev/null | sort -u | tr '\n' ' ')
echo "start $(date +%s%N) $me $TRANTOR_TURN $tokens" >> "$d/ledger"
ms=$((300 + RANDOM % 2200))
sleep "$((ms / 1000)).$(printf '%03d' $((ms % 1000)))"
echo "Chaos agent: read the contract, did the small piece of work it asked for, and is reporting back with a complete, substantive summary of what changed."
echo "done $(date +%s%N) $me $TRANTOR_TURN $tokens" >> "$d/ledger"
rm -f "$d/busy-$me"
exit 0
"#;

struct Hub {
    exe: PathBuf,
    port: u16,
    data: PathBuf,
    child: Option<Child>,
}

impl Hub {
    fn start(&mut self) -> Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.data.join("hub.log"))?;
        let child = Command::new(&self.exe)
            .arg("hub")
            .env("RELAY_PORT", self.port.to_string())
            .env("RELAY_HOST", "127.0.0.1")
            .env("RELAY_DATA_DIR", &self.data)
            .env("HOME", &self.data)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .process_group(0)
            .spawn()
            .context("starting the hub")?;
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            if Instant::now() > deadline {
                bail!("the hub did not come up on port {}", self.port);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Hub {
    fn drop(&mut self) {
        self.kill9();
    }
}

struct SeatProc {
    persona: String,
    cmd: Box<dyn Fn() -> Command + Send>,
    child: Option<Child>,
}

impl SeatProc {
    fn start(&mut self) -> Result<()> {
        self.child = Some((self.cmd)().spawn().context("starting a runner")?);
        Ok(())
    }

    /// `kill -9` the runner alone: its CLI (its own process group) lives on.
    fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for SeatProc {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            // The runner's own group (its git children), then the runner.
            if let Ok(p) = i32::try_from(c.id()) {
                let _ = nix::sys::signal::killpg(
                    nix::unistd::Pid::from_raw(p),
                    nix::sys::signal::Signal::SIGTERM,
                );
            }
            let deadline = Instant::now() + Duration::from_secs(5);
            while matches!(c.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn git(dir: &Path, args: &[&str]) -> Result<()> {
    let st = trantor_proto::git::git_command(dir)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .context("git")?;
    if !st.success() {
        bail!("git {args:?} failed in {}", dir.display());
    }
    Ok(())
}

/// One parsed ledger line: `start|done <ns> <pid> <turn> <tokens…>`.
#[derive(Debug, Clone)]
pub struct LedgerLine {
    /// `start` or `done`.
    pub what: String,
    /// When, ns since the epoch.
    pub ns: u128,
    /// The contract tokens.
    pub tokens: Vec<String>,
}

/// Read a seat's ledger.
pub fn read_ledger(path: &Path) -> Vec<LedgerLine> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            let what = w.next()?.to_string();
            let ns = w.next()?.parse().ok()?;
            let _pid = w.next()?;
            let _turn = w.next()?;
            Some(LedgerLine {
                what,
                ns,
                tokens: w.map(str::to_string).collect(),
            })
        })
        .collect()
}

/// Count a phase's files in `dir`: `(lost, duplicated, overlapping, ack → start ms)` for the
/// acknowledged tokens in `acked.jsonl`.
pub fn count(dir: &Path) -> (usize, usize, usize, Vec<f64>, usize) {
    let acked: Vec<(String, u128)> = std::fs::read_to_string(dir.join("acked.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| {
            Some((
                v["token"].as_str()?.to_string(),
                v["ackNs"].as_str()?.parse().ok()?,
            ))
        })
        .collect();
    let mut done: BTreeMap<String, usize> = BTreeMap::new();
    let mut first_start: BTreeMap<String, u128> = BTreeMap::new();
    let mut overlapping = 0;
    let chaos = dir.join("chaos");
    if let Ok(rd) = std::fs::read_dir(&chaos) {
        for seat in rd.filter_map(Result::ok) {
            for l in read_ledger(&seat.path().join("ledger")) {
                for t in &l.tokens {
                    if l.what == "done" {
                        *done.entry(t.clone()).or_default() += 1;
                    } else if l.what == "start" {
                        let e = first_start.entry(t.clone()).or_insert(l.ns);
                        *e = (*e).min(l.ns);
                    }
                }
            }
            overlapping += std::fs::read_to_string(seat.path().join("overlap"))
                .unwrap_or_default()
                .lines()
                .count();
        }
    }
    let lost = acked
        .iter()
        .filter(|(t, _)| done.get(t).copied().unwrap_or(0) == 0)
        .count();
    let duplicated = acked
        .iter()
        .filter(|(t, _)| done.get(t).copied().unwrap_or(0) > 1)
        .count();
    let mut lat: Vec<f64> = acked
        .iter()
        .filter_map(|(t, ack)| {
            first_start
                .get(t)
                .map(|s| s.saturating_sub(*ack) as f64 / 1e6)
        })
        .collect();
    lat.sort_by(|a, b| a.total_cmp(b));
    (lost, duplicated, overlapping, lat, acked.len())
}

/// A delivery record is complete and in order when it starts `stored`, ends with its one
/// `consumed`, and the message was `claimed` and `started` before that.
pub fn record_complete(states: &[&str]) -> bool {
    let Some(end) = states.iter().position(|s| *s == "consumed") else {
        return false;
    };
    let claimed = states[..end].iter().position(|s| *s == "claimed");
    let started = states[..end].iter().rposition(|s| *s == "started");
    states.first() == Some(&"stored")
        && end == states.len() - 1
        && matches!((claimed, started), (Some(c), Some(s)) if c < s)
}

fn append(path: &Path, line: &str) -> Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    writeln!(f, "{line}")?;
    Ok(())
}

/// The project every seat and contract of a phase is on.
const PROJECT: &str = "chaos";

/// One phase: boot the hub and the seats in `dir`, send the contracts, kill and restart (when
/// `kills`), drain, count.
pub async fn phase(
    args: &ChaosBenchArgs,
    dir: &Path,
    kills: bool,
    seed: u64,
) -> Result<ChaosNumbers> {
    let started = Instant::now();
    let exe = std::env::current_exe()?;
    let agent = prepare_dir(dir)?;
    let port = trantor_proto::net::free_loopback_port().context("no free loopback port")?;
    let hub = Arc::new(Mutex::new(Hub {
        exe: exe.clone(),
        port,
        data: dir.join("hub"),
        child: None,
    }));
    hub.lock()
        .map_err(|_| anyhow::anyhow!("hub lock"))?
        .start()?;
    let url = format!("http://127.0.0.1:{port}");
    let mut seats = Vec::new();
    for i in 0..args.seats {
        let mut s = SeatProc {
            persona: format!("s{i}"),
            cmd: runner_command(&exe, &agent, dir, &url, &format!("s{i}")),
            child: None,
        };
        s.start()?;
        seats.push(s);
    }
    let seats = Arc::new(Mutex::new(seats));
    let client = HubClient::new(url.clone()).with_timeout(Duration::from_secs(3));
    wait_for_kickoffs(args, dir).await?;

    let stop = Arc::new(AtomicBool::new(false));
    let hub_kills = Arc::new(AtomicU64::new(0));
    let runner_kills = Arc::new(AtomicU64::new(0));
    let killer = kills.then(|| {
        let kill = Killer {
            stop: stop.clone(),
            hub: hub.clone(),
            seats: seats.clone(),
            hub_kills: hub_kills.clone(),
            runner_kills: runner_kills.clone(),
            mean_ms: args.kill_every_ms.max(100),
            log: dir.join("kills.log"),
        };
        std::thread::spawn(move || kill.run(seed))
    });

    let acked_path = dir.join("acked.jsonl");
    let unacked = send_contracts(args, &client, &acked_path).await?;
    stop.store(true, Ordering::SeqCst);
    if let Some(k) = killer {
        match k.join() {
            Ok(r) => r?,
            Err(_) => bail!("the killer thread panicked"),
        }
    }
    drain(args, dir).await;
    let incomplete = check_records(&client, &acked_path, &dir.join("delivery.jsonl")).await?;
    drop(seats);
    drop(hub);
    let (lost, duplicated, overlapping, ack_to_start_ms, acknowledged) = count(dir);
    Ok(ChaosNumbers {
        incomplete_records: incomplete,
        kills,
        acknowledged,
        unacknowledged_attempts: unacked,
        lost,
        duplicated,
        overlapping,
        hub_kills: hub_kills.load(Ordering::SeqCst) as usize,
        runner_kills: runner_kills.load(Ordering::SeqCst) as usize,
        ack_to_start_ms,
        secs: started.elapsed().as_secs_f64(),
        seed,
    })
}

/// The phase's directories, the agent script (returned) and a repository with one commit.
fn prepare_dir(dir: &Path) -> Result<PathBuf> {
    for d in ["hub", "bus", "home", "chaos", "repo", "logs"] {
        std::fs::create_dir_all(dir.join(d))?;
    }
    let agent = dir.join("agent.sh");
    std::fs::write(&agent, AGENT)?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&agent, std::fs::Permissions::from_mode(0o755))?;
    let repo = dir.join("repo");
    git(&repo, &["init", "-q", "-b", "main"])?;
    git(&repo, &["config", "user.email", "chaos@example.com"])?;
    git(&repo, &["config", "user.name", "chaos"])?;
    std::fs::write(repo.join("README.md"), "chaos\n")?;
    git(&repo, &["add", "README.md"])?;
    git(&repo, &["commit", "-q", "-m", "init"])?;
    Ok(agent)
}

/// How seat `persona`'s runner is (re)started: the `command` driver on the agent script, each
/// boot logging to a file of its own.
fn runner_command(
    exe: &Path,
    agent: &Path,
    dir: &Path,
    url: &str,
    persona: &str,
) -> Box<dyn Fn() -> Command + Send> {
    let (exe, agent, dir, url, persona) = (
        exe.to_path_buf(),
        agent.to_path_buf(),
        dir.to_path_buf(),
        url.to_string(),
        persona.to_string(),
    );
    let boots = AtomicU64::new(0);
    Box::new(move || {
        let n = boots.fetch_add(1, Ordering::SeqCst) + 1;
        let log = std::fs::File::create(dir.join("logs").join(format!("{persona}-{n}.log")))
            .or_else(|_| std::fs::File::create("/dev/null"));
        let mut c = Command::new(&exe);
        c.arg("runner")
            .arg("command")
            .arg(dir.join("repo"))
            .env("CREW_COMMAND", format!("{} {{P}}", agent.display()))
            .env("CREW_PERSONA", &persona)
            .env("HOME", dir.join("home"))
            .env("AGENT_BUS_DIR", dir.join("bus"))
            .env("CHAOS_DIR", dir.join("chaos"))
            .env("RELAY_URL", &url)
            .env("RELAY_PROJECT", PROJECT)
            .env("RELAY_HOST_ID", "orch")
            .env("TRANTOR_POLL_HOLD_S", "2")
            .env("TRANTOR_HUB_BACKOFF_MAX_MS", "500")
            .env("TRANTOR_NO_DESKTOP_NOTIFY", "1")
            .env("TRANTOR_ADOPT_GRACE_MS", "60000")
            .env("TRANTOR_LOG", "info")
            .env_remove("RELAY_SESSION")
            .env_remove("RUNNER_SESSION")
            .env_remove("CREW_AGENT")
            .env_remove("RELAY_DATA_DIR")
            .stdin(Stdio::null())
            .process_group(0);
        match log.and_then(|f| Ok((f.try_clone()?, f))) {
            Ok((err, out)) => {
                c.stdout(Stdio::from(out)).stderr(Stdio::from(err));
            }
            Err(_) => {
                c.stdout(Stdio::null()).stderr(Stdio::null());
            }
        }
        c
    })
}

/// Every seat boots (its kickoff turn starts) before the first contract.
async fn wait_for_kickoffs(args: &ChaosBenchArgs, dir: &Path) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let booted = (0..args.seats)
            .filter(|i| {
                dir.join("chaos")
                    .join(format!("s{i}"))
                    .join("ledger")
                    .exists()
            })
            .count();
        if booted == args.seats {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "only {booted} of {} seats ran a kickoff turn within 90 s (logs in {})",
                args.seats,
                dir.join("logs").display()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The killer, on its own thread while the contracts go out: at random intervals around
/// `mean_ms` it `kill -9`s the hub or one runner, waits a moment, and starts it again.
struct Killer {
    stop: Arc<AtomicBool>,
    hub: Arc<Mutex<Hub>>,
    seats: Arc<Mutex<Vec<SeatProc>>>,
    hub_kills: Arc<AtomicU64>,
    runner_kills: Arc<AtomicU64>,
    mean_ms: u64,
    log: PathBuf,
}

impl Killer {
    fn run(self, seed: u64) -> Result<()> {
        let mut rng = Rng(seed | 1);
        let seats = self
            .seats
            .lock()
            .map_err(|_| anyhow::anyhow!("seats lock"))?
            .len() as u64;
        while !self.stop.load(Ordering::SeqCst) {
            let until =
                Instant::now() + Duration::from_millis(self.mean_ms / 2 + rng.below(self.mean_ms));
            while Instant::now() < until && !self.stop.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(20));
            }
            if self.stop.load(Ordering::SeqCst) {
                break;
            }
            let target = rng.below(seats + 1);
            if target == seats {
                self.kill_hub(200 + rng.below(800))?;
            } else {
                self.kill_runner(target as usize, 50 + rng.below(450))?;
            }
        }
        Ok(())
    }

    fn kill_hub(&self, down_ms: u64) -> Result<()> {
        let mut h = self.hub.lock().map_err(|_| anyhow::anyhow!("hub lock"))?;
        h.kill9();
        let _ = append(&self.log, &format!("{} hub down {down_ms}ms", now_ns()));
        std::thread::sleep(Duration::from_millis(down_ms));
        h.start()?;
        self.hub_kills.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    fn kill_runner(&self, seat: usize, down_ms: u64) -> Result<()> {
        let mut s = self
            .seats
            .lock()
            .map_err(|_| anyhow::anyhow!("seats lock"))?;
        let Some(seat) = s.get_mut(seat) else {
            return Ok(());
        };
        seat.kill9();
        let line = format!("{} runner {} down {down_ms}ms", now_ns(), seat.persona);
        let _ = append(&self.log, &line);
        std::thread::sleep(Duration::from_millis(down_ms));
        seat.start()?;
        self.runner_kills.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

/// The contracts, at a steady rate, round-robin over the seats; one the hub did not
/// acknowledge is sent again as a new contract (a new token), so only acknowledged ones are
/// counted (each a line in `acked`). Returns the attempts that were not acknowledged.
async fn send_contracts(args: &ChaosBenchArgs, client: &HubClient, acked: &Path) -> Result<usize> {
    let mut unacked = 0usize;
    let t0 = Instant::now();
    for n in 0..args.contracts {
        let due = t0 + Duration::from_millis(args.interval_ms * n as u64);
        if let Some(d) = due.checked_duration_since(Instant::now()) {
            tokio::time::sleep(d).await;
        }
        let seat = format!("s{}:{PROJECT}", n % args.seats.max(1));
        let mut attempt = 0;
        loop {
            let token = format!("CHAOS-{n}-{attempt}");
            let req = SendRequest {
                from: format!("boss:{PROJECT}"),
                to: Some(seat.clone()),
                text: format!("{token} contract: append one line to the notes and report"),
                project: Some(PROJECT.to_string()),
                ..Default::default()
            };
            match client.send(&req).await {
                Ok(r) => {
                    let line = json!({"token": token, "seat": seat, "id": r.id, "ackNs": now_ns().to_string()});
                    append(acked, &line.to_string())?;
                    break;
                }
                Err(_) => {
                    unacked += 1;
                    attempt += 1;
                    if t0.elapsed() > Duration::from_secs(args.drain_secs + 600) {
                        bail!("the hub never acknowledged contract {n}");
                    }
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        }
    }
    Ok(unacked)
}

/// Every acknowledged contract completes, or the drain deadline passes; then a moment for a
/// duplicate in flight (and the last marks) to show.
async fn drain(args: &ChaosBenchArgs, dir: &Path) {
    let deadline = Instant::now() + Duration::from_secs(args.drain_secs);
    loop {
        let (lost, ..) = count(dir);
        if lost == 0 || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
}

/// Every acknowledged contract's delivery record, read while the hub still runs and written
/// to `records`; returns how many are incomplete or out of order.
async fn check_records(client: &HubClient, acked: &Path, records: &Path) -> Result<usize> {
    let ids: Vec<i64> = std::fs::read_to_string(acked)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| v["id"].as_i64())
        .collect();
    let mut incomplete = 0;
    for id in ids {
        let line = match client.delivery(id).await {
            Ok(r) => {
                let states: Vec<&str> = r.states.iter().map(|e| e.state.as_str()).collect();
                if !record_complete(&states) {
                    incomplete += 1;
                }
                json!({"id": id, "states": states})
            }
            Err(e) => {
                incomplete += 1;
                json!({"id": id, "error": e.to_string()})
            }
        };
        append(records, &line.to_string())?;
    }
    Ok(incomplete)
}

/// Run the chaos benchmark and return its table.
pub async fn run(args: &ChaosBenchArgs) -> Result<Table> {
    let seed = args.seed.unwrap_or_else(|| now_ns() as u64);
    let tmp = tempfile::tempdir()?;
    let root = args.dir.clone().unwrap_or_else(|| tmp.path().to_path_buf());
    let phases: &[bool] = match args.kills {
        Kills::On => &[true],
        Kills::Off => &[false],
        Kills::Both => &[false, true],
    };
    let mut all = Vec::new();
    for &k in phases {
        let dir = root.join(if k { "kills" } else { "calm" });
        std::fs::create_dir_all(&dir)?;
        eprintln!(
            "chaos: {} seats, {} contracts every {} ms, kills {} (seed {seed}) in {}",
            args.seats,
            args.contracts,
            args.interval_ms,
            if k { "on" } else { "off" },
            dir.display()
        );
        all.push(phase(args, &dir, k, seed).await?);
    }
    if let Some(p) = &args.json {
        std::fs::write(p, serde_json::to_vec_pretty(&all)?)?;
    }
    let mut t = Table::default();
    for n in &all {
        let m = if n.kills {
            "with kills"
        } else {
            "without kills"
        };
        t.row(Row::info(
            format!("{m}: contracts acknowledged"),
            n.acknowledged.to_string(),
        ));
        t.row(Row::zero(format!("{m}: lost"), n.lost));
        t.row(Row::zero(
            format!("{m}: duplicated (two completed turns)"),
            n.duplicated,
        ));
        t.row(Row::zero(
            format!("{m}: two CLIs at once in a seat"),
            n.overlapping,
        ));
        t.row(Row::zero(
            format!("{m}: /delivery records not complete and in order"),
            n.incomplete_records,
        ));
        t.row(Row::info(
            format!("{m}: ack → turn started p50 / p99"),
            format!(
                "{:.0} ms / {:.0} ms",
                percentile(&n.ack_to_start_ms, 0.5),
                percentile(&n.ack_to_start_ms, 0.99)
            ),
        ));
        if n.kills {
            t.row(Row::info(
                format!("{m}: kill -9"),
                format!("hub {} · runner {}", n.hub_kills, n.runner_kills),
            ));
        }
        t.row(Row::info(
            format!("{m}: wall time"),
            format!("{:.0} s", n.secs),
        ));
    }
    t.note(format!(
        "{} seats, {} contracts one every {} ms, a kill every {}±{} ms, seed {seed}; the agent works 0.3–2.5 s per turn",
        args.seats, args.contracts, args.interval_ms, args.kill_every_ms, args.kill_every_ms / 2
    ));
    t.note("ack → turn started includes the wait behind the seat's running turn (a seat runs one turn at a time) and, with kills, the restart and adoption".into());
    Ok(t)
}

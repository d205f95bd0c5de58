//! `trantor bench runner`: what an idle seat costs and how fast a wake reaches the agent CLI.
//!
//! It starts a real hub and a real `trantor runner` seat driven by the `command` driver with a
//! tiny shell script standing in for the agent CLI. The script's first act is to append the wall
//! clock (ns) to a file, so "wake → CLI spawned" is measured from the moment `/send` returned
//! (the message is committed) to the moment the agent process began. With `--original PKG` the
//! same measurements run against the original JavaScript runner (`bin/crew-runner.mjs` of an
//! installed npm `trantor`), with a fake `claude` on PATH, in the same run, so the ratio holds
//! on whatever machine runs it.

use super::hub_proc::{CpuWindow, percentile, proc_status_kib, rss_kib};
use super::{Row, Table};
use anyhow::{Context, Result, bail};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use trantor_proto::{HubClient, SendRequest};

/// Options of `trantor bench runner`.
#[derive(Debug, Clone, clap::Args)]
pub struct RunnerBenchArgs {
    /// Wake samples to take.
    #[arg(long, default_value_t = 30)]
    pub samples: usize,
    /// Seconds to watch the idle seat for CPU use.
    #[arg(long, default_value_t = 30)]
    pub idle_secs: u64,
    /// Path of an installed original npm `trantor` package (the directory holding
    /// `bin/crew-runner.mjs`) to measure beside ours.
    #[arg(long)]
    pub original: Option<PathBuf>,
    /// Also write the markdown report to this file.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// One runner's measurements.
#[derive(Debug, Clone, Default)]
pub struct RunnerNumbers {
    /// Resident set of the runner process while idle, KiB.
    pub idle_rss_kib: u64,
    /// Private anonymous memory (heap, stacks) of the runner while idle, KiB.
    pub idle_anon_kib: u64,
    /// CPU of the runner process while idle, percent of one core (its process CPU clock).
    pub idle_cpu_pct: f64,
    /// CPU the runner used in the idle window, ms (process CPU clock).
    pub idle_cpu_ms: f64,
    /// The same from `/proc/<pid>/stat` ticks, ms (10 ms resolution).
    pub idle_ticks_ms: f64,
    /// Wake → CLI spawned, milliseconds, sorted.
    pub wake_ms: Vec<f64>,
}

impl RunnerNumbers {
    fn pct(&self, p: f64) -> f64 {
        percentile(&self.wake_ms, p)
    }
}

struct Proc(Child);

impl Proc {
    /// Spawn `cmd` quiet (stdin, stdout and stderr on `/dev/null`) as the leader of its own
    /// process group, which [`Drop`] kills whole; `what` names it in the error.
    fn spawn(cmd: &mut Command, what: &str) -> Result<Proc> {
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .map(Proc)
            .with_context(|| format!("starting {what}"))
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        // The runner and its turns live in their own process groups; killing the group of the
        // runner takes its idle children with it.
        let pid = self.0.id() as i32;
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn now_ns() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

/// Private anonymous memory of `pid` (heap, stacks), KiB (`RssAnon`).
fn anon_kib(pid: u32) -> Result<u64> {
    proc_status_kib(pid, "RssAnon")
}

fn spawn_count(file: &Path) -> Vec<u128> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

async fn wait_until<F: FnMut() -> bool>(within: Duration, mut f: F) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    false
}

/// The fake agent: records its start time, then prints a substantive answer and exits 0.
fn write_agent_script(path: &Path, spawns: &Path) -> Result<()> {
    let script = format!(
        "#!/bin/sh\ndate +%s%N >> '{}'\necho 'Bench agent: read the message, did the small piece of work it asked for, and is reporting back with a complete, substantive summary of what changed.'\n",
        spawns.display()
    );
    std::fs::write(path, script)?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))?;
    Ok(())
}

/// Which runner to measure.
enum Subject<'a> {
    Ours,
    Original(&'a Path),
}

async fn measure(subject: Subject<'_>, args: &RunnerBenchArgs) -> Result<RunnerNumbers> {
    let tmp = tempfile::tempdir()?;
    let t = tmp.path();
    let exe = std::env::current_exe()?;
    let (_hub, url) = start_hub(&exe, &t.join("hub")).await?;
    let hub = HubClient::new(url.clone()).with_timeout(Duration::from_secs(5));
    let spawns = t.join("spawns");
    let (runner, session) = start_runner(subject, &exe, t, &spawns, &url)?;
    let pid = runner.0.id();

    // The kickoff turn runs once at boot; wait for it, then for the seat to go idle.
    if !wait_until(Duration::from_secs(60), || !spawn_count(&spawns).is_empty()).await {
        bail!("the runner never ran its kickoff turn");
    }
    wait_idle(&hub, &session).await;

    // Idle cost.
    tokio::time::sleep(Duration::from_secs(2)).await;
    // The process's own accounting over the window (every thread, ended ones included).
    let w = CpuWindow::start(pid)?;
    tokio::time::sleep(Duration::from_secs(args.idle_secs)).await;
    let (used, ticks, wall) = w.end()?;
    let (rss, anon) = (rss_kib(pid)?, anon_kib(pid)?);
    let cpu = used as f64 / wall as f64 * 100.0;

    let wake_ms = wake_to_spawn(&hub, &session, &spawns, args.samples).await?;
    drop(runner);
    Ok(RunnerNumbers {
        idle_rss_kib: rss,
        idle_anon_kib: anon,
        idle_cpu_pct: cpu,
        idle_cpu_ms: used as f64 / 1e6,
        idle_ticks_ms: ticks as f64 / 1e6,
        wake_ms,
    })
}

/// The project the benchmark's seat is on.
const PROJECT: &str = "bench";

/// Our hub on a free port over `dir`, answering `/health`; the process and its URL.
async fn start_hub(exe: &Path, dir: &Path) -> Result<(Proc, String)> {
    let port = trantor_proto::net::free_loopback_port().context("no free loopback port")?;
    std::fs::create_dir_all(dir)?;
    let hub = Proc::spawn(
        Command::new(exe)
            .arg("hub")
            .env("RELAY_PORT", port.to_string())
            .env("RELAY_HOST", "127.0.0.1")
            .env("RELAY_DATA_DIR", dir)
            .env("HOME", dir),
        "the hub",
    )?;
    let url = format!("http://127.0.0.1:{port}");
    let client = HubClient::new(url.clone()).with_timeout(Duration::from_secs(5));
    let up = Instant::now();
    while client.health().await.is_err() {
        if up.elapsed() > Duration::from_secs(15) {
            bail!("the hub did not start");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok((hub, url))
}

/// The runner under test (ours on the `command` driver, or the original's on a `claude` that is
/// the same logging script), its agent CLI logging each spawn to `spawns`; the process and the
/// seat's session.
fn start_runner(
    subject: Subject<'_>,
    exe: &Path,
    t: &Path,
    spawns: &Path,
    url: &str,
) -> Result<(Proc, String)> {
    let home = t.join("home");
    let bin = t.join("bin");
    let work = t.join("work");
    for d in [&home, &bin, &work] {
        std::fs::create_dir_all(d)?;
    }
    let path_env = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let (mut cmd, session) = match subject {
        Subject::Ours => {
            let agent = bin.join("agent.sh");
            write_agent_script(&agent, spawns)?;
            let mut cmd = Command::new(exe);
            cmd.arg("runner")
                .arg("command")
                .arg(&work)
                .env("CREW_COMMAND", agent.display().to_string())
                .env("CREW_PERSONA", "bench");
            (cmd, format!("bench:{PROJECT}"))
        }
        Subject::Original(pkg) => {
            write_agent_script(&bin.join("claude"), spawns)?;
            let mut cmd = Command::new("node");
            cmd.arg(pkg.join("bin/crew-runner.mjs"))
                .arg("claude")
                .arg(&work);
            (cmd, format!("claude:{PROJECT}"))
        }
    };
    let runner = Proc::spawn(
        cmd.env("HOME", &home)
            .env("PATH", &path_env)
            .env("AGENT_BUS_DIR", home.join(".agent-bus"))
            .env("RELAY_URL", url)
            .env("RELAY_PROJECT", PROJECT)
            .env("RELAY_HOST_ID", "orch"),
        "the runner",
    )?;
    Ok((runner, session))
}

/// `samples` wakes, one at a time: each `/send` to the seat until its agent CLI is spawned
/// (ms, sorted), the seat back to idle before the next.
async fn wake_to_spawn(
    hub: &HubClient,
    session: &str,
    spawns: &Path,
    samples: usize,
) -> Result<Vec<f64>> {
    let mut wake_ms = Vec::with_capacity(samples);
    for i in 0..samples {
        let before = spawn_count(spawns).len();
        hub.send(&SendRequest {
            from: format!("orch:{PROJECT}"),
            to: Some(session.to_string()),
            text: format!("bench wake {i}: please acknowledge"),
            ..Default::default()
        })
        .await
        .context("sending a wake")?;
        let sent = now_ns();
        if !wait_until(Duration::from_secs(30), || {
            spawn_count(spawns).len() > before
        })
        .await
        {
            bail!("wake {i} never reached the agent CLI");
        }
        if let Some(&spawned) = spawn_count(spawns).get(before) {
            wake_ms.push(spawned.saturating_sub(sent) as f64 / 1e6);
        }
        wait_idle(hub, session).await;
    }
    wake_ms.sort_by(|a, b| a.total_cmp(b));
    Ok(wake_ms)
}

/// Wait until the seat reports itself idle on `/peers` (its turn ended and it is back in its
/// long-poll), with a short settle so the next wake finds the poll held.
async fn wait_idle(hub: &HubClient, session: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if let Ok(p) = hub.peers().await
            && p.peers.iter().any(|p| {
                p.session == session
                    && (p.phase.as_deref() == Some("idle") || p.status.starts_with("idle"))
            })
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
}

/// Run the runner benchmark and return its table.
pub async fn run(args: &RunnerBenchArgs) -> Result<Table> {
    eprintln!(
        "measuring trantor runner (idle {} s, {} wakes)…",
        args.idle_secs, args.samples
    );
    let ours = measure(Subject::Ours, args).await?;
    let original = match &args.original {
        Some(pkg) => {
            eprintln!("measuring the original runner at {}…", pkg.display());
            match measure(Subject::Original(pkg), args).await {
                Ok(n) => Some(n),
                Err(e) => {
                    eprintln!("original runner: {e:#}");
                    None
                }
            }
        }
        None => None,
    };
    Ok(table(&ours, original.as_ref(), args))
}

fn mb(kib: u64) -> String {
    format!("{:.1} MB", kib as f64 / 1024.0)
}

fn table(ours: &RunnerNumbers, original: Option<&RunnerNumbers>, args: &RunnerBenchArgs) -> Table {
    let mut t = Table::default();
    t.row(Row::check(
        "runner idle RSS",
        mb(ours.idle_rss_kib),
        "< 8 MB",
        (ours.idle_rss_kib as f64) < 8.0 * 1024.0,
    ));
    t.row(Row::info(
        "runner idle private memory (RssAnon: heap, stacks)",
        mb(ours.idle_anon_kib),
    ));
    t.row(Row::check(
        format!("runner idle CPU over {} s", args.idle_secs),
        format!(
            "{:.4} % ({:.2} ms of CPU; /proc ticks: {:.0} ms)",
            ours.idle_cpu_pct, ours.idle_cpu_ms, ours.idle_ticks_ms
        ),
        "< 0.05 %",
        ours.idle_cpu_pct < 0.05,
    ));
    t.row(Row::check(
        format!("wake → CLI spawned p50 ({} wakes)", ours.wake_ms.len()),
        format!("{:.1} ms", ours.pct(0.5)),
        "< 20 ms",
        ours.pct(0.5) < 20.0,
    ));
    t.row(Row::info(
        "wake → CLI spawned p90 / max",
        format!(
            "{:.1} ms / {:.1} ms",
            ours.pct(0.9),
            ours.wake_ms.last().copied().unwrap_or(f64::NAN)
        ),
    ));
    t.row(Row::check(
        "wake → CLI spawned p99",
        format!("{:.1} ms", ours.pct(0.99)),
        "< 20 ms",
        ours.pct(0.99) < 20.0,
    ));
    if let Some(o) = original {
        t.row(Row::info(
            "original runner idle RSS (same run)",
            mb(o.idle_rss_kib),
        ));
        t.row(Row::info(
            "original runner idle CPU (same run)",
            format!("{:.4} % ({:.2} ms of CPU)", o.idle_cpu_pct, o.idle_cpu_ms),
        ));
        t.row(Row::info(
            "original wake → CLI spawned p50 / p99 (same run)",
            format!("{:.1} ms / {:.1} ms", o.pct(0.5), o.pct(0.99)),
        ));
        t.note(format!(
            "ratios in this run: idle RSS {:.1}× smaller, wake→spawn p50 {:.0}× faster",
            o.idle_rss_kib as f64 / ours.idle_rss_kib.max(1) as f64,
            o.pct(0.5) / ours.pct(0.5).max(0.001)
        ));
    }
    t.note(
        "idle CPU: the delta of the runner process's CPU clock (clock_getcpuclockid: every thread, \
         ended ones included, ns resolution) over the window, divided by the wall time; the \
         /proc/<pid>/stat utime+stime delta (10 ms ticks) is printed beside it as a cross-check"
            .to_string(),
    );
    t.note(
        "wake → CLI spawned: from the /send reply (message committed) to the first line of the \
         agent script, read from the wall clock on both sides"
            .to_string(),
    );
    t.note(
        "RSS counts the shared pages of the one trantor binary a seat maps; private memory is \
         what each additional seat costs"
            .to_string(),
    );
    t
}

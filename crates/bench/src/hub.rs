//! `trantor bench hub`: the hub's bars (docs/architecture.md §6) measured on a real hub process.
//!
//! The hub under test is this very binary (`current_exe() hub`) on a free port, with its data
//! and `HOME` in a fresh temporary directory, so nothing of the user's is touched and the
//! numbers are those of the shipped code path (HTTP, JSON, store, wake registry).
//! Every client is a raw keep-alive connection ([`super::http::Http`]) so the client side adds
//! as little as possible to what is measured.

use super::http::Http;
use super::{Row, Table};
use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use trantor_store::{NewMessage, Store};
use trantor_store_sqlite::SqliteStore;

/// Options of `trantor bench hub`.
#[derive(Debug, Clone, clap::Args)]
pub struct HubBenchArgs {
    /// Fewer samples and smaller data sets (a smoke run, not the published numbers).
    #[arg(long)]
    pub quick: bool,
    /// Also write the report (markdown) to this file.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Run only these measurements (comma-separated: wake, idle, throughput, loss, rss,
    /// polls, delivery, restart); all by default.
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
    /// Measure hubs on PostgreSQL instead: a `postgres://` URL of a server (the benchmark
    /// creates and drops a scratch database there): /send throughput and wake latency within
    /// one hub and across two hubs on one database.
    #[arg(long)]
    pub store: Option<String>,
    /// Instead of the bars: each read route's latency at 1k / 100k / 1M stored messages
    /// (+10,000 cards), and with one session holding 1,000 / 200,000 messages in the 24-h
    /// window, on stores seeded directly (docs/bench-hub.md; `--only window` or `--only sizes`
    /// runs one of the two tables).
    #[arg(long)]
    pub scaling: bool,
    /// Held polls for the held-poll rows (`polls`; default 10,000). Each is a connection of
    /// the bench and one of the hub, so the hard open-file limit must allow twice this many
    /// (`prlimit --nofile=N:N trantor bench hub …`); beyond 20,000 the bench connects from
    /// several loopback source addresses (127.0.0.x).
    #[arg(long)]
    pub held_polls: Option<usize>,
}

/// Options of the hidden `trantor bench ceiling-server`.
#[derive(Debug, Clone, clap::Args)]
pub struct CeilingArgs {
    /// Loopback port to listen on.
    #[arg(long)]
    pub port: u16,
}

/// Serve the bare-route ceiling ([`trantor_hub::ceiling_router`]) on the hub's own accept loop
/// until SIGTERM.
pub async fn ceiling_server(args: &CeilingArgs) -> Result<()> {
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", args.port))
        .await
        .with_context(|| format!("cannot listen on 127.0.0.1:{}", args.port))?;
    trantor_hub::serve_router(
        listener,
        trantor_hub::ceiling_router(),
        Duration::from_secs(15),
        trantor_hub::shutdown_signal(),
    )
    .await;
    Ok(())
}

impl HubBenchArgs {
    /// Whether a measurement was asked for (`--only`; every one when it is empty).
    pub(super) fn wants(&self, name: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|o| o == name)
    }
}

/// How much of everything to do.
pub(super) struct Sizes {
    pub(super) wake_samples: usize,
    idle_pollers: usize,
    idle_secs: u64,
    pub(super) throughput_clients: usize,
    pub(super) throughput_secs: u64,
    burst: usize,
    rss_messages: i64,
    pub(super) restart_messages: usize,
    held_polls: usize,
    wake_idle_polls: usize,
    wake_rate: u64,
}

impl Sizes {
    pub(super) fn new(quick: bool) -> Sizes {
        if quick {
            Sizes {
                wake_samples: 200,
                idle_pollers: 50,
                idle_secs: 3,
                throughput_clients: 16,
                throughput_secs: 2,
                burst: 12_000,
                rss_messages: 20_000,
                restart_messages: 100_000,
                held_polls: 2_000,
                wake_idle_polls: 1_000,
                wake_rate: 1_000,
            }
        } else {
            Sizes {
                wake_samples: 1_000,
                idle_pollers: 50,
                idle_secs: 30,
                throughput_clients: 16,
                throughput_secs: 5,
                burst: 12_000,
                rss_messages: 100_000,
                restart_messages: 1_000_000,
                held_polls: 10_000,
                wake_idle_polls: 1_000,
                wake_rate: 1_000,
            }
        }
    }
}

/// A temporary directory removed on drop (the cli crate has no tempfile dependency).
pub(super) struct TempDir(PathBuf);

impl TempDir {
    pub(super) fn new(tag: &str) -> Result<TempDir> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let dir = std::env::temp_dir().join(format!(
            "trantor-bench-{tag}-{}-{nanos}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        Ok(TempDir(dir))
    }

    pub(super) fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A free loopback port (bound then released; the hub binds it right after).
fn free_port() -> Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").context("cannot find a free port")?;
    Ok(l.local_addr()?.port())
}

/// The hub child process; killed on drop so a failing benchmark leaves nothing behind.
pub(super) struct HubProc {
    child: Child,
    pub(super) port: u16,
    log: PathBuf,
}

impl HubProc {
    /// Start `trantor hub --sync <sync>` on a free port with its state under `data` and `HOME`
    /// at `home`.
    pub(super) fn spawn(data: &Path, home: &Path, sync: &str) -> Result<HubProc> {
        Self::spawn_with(home, |cmd, _| {
            cmd.arg("hub")
                .env("RELAY_DATA_DIR", data)
                .env("TRANTOR_SYNC", sync);
        })
    }

    /// Start the bare-route ceiling server (`trantor bench ceiling-server`) on a free port.
    pub(super) fn spawn_ceiling(home: &Path) -> Result<HubProc> {
        Self::spawn_with(home, |cmd, port| {
            cmd.args(["bench", "ceiling-server", "--port", &port.to_string()]);
        })
    }

    pub(super) fn spawn_with(home: &Path, args: impl FnOnce(&mut Command, u16)) -> Result<HubProc> {
        // TRANTOR_BENCH_HUB_EXE runs another build's hub under this bench (before/after
        // comparisons with the same client); this binary by default.
        let exe = match std::env::var_os("TRANTOR_BENCH_HUB_EXE") {
            Some(p) => PathBuf::from(p),
            None => std::env::current_exe().context("cannot find this executable")?,
        };
        Self::spawn_program(home, &exe, args)
    }

    /// Start `exe` as a hub on a free port (`RELAY_PORT`, `RELAY_HOST`, `HOME` set; `args` adds
    /// the rest): this build, another build, or the original JavaScript hub under `node`.
    pub(super) fn spawn_program(
        home: &Path,
        exe: &Path,
        args: impl FnOnce(&mut Command, u16),
    ) -> Result<HubProc> {
        let port = free_port()?;
        let log = home.join(format!("hub-{port}.log"));
        let out = std::fs::File::create(&log)
            .with_context(|| format!("cannot create {}", log.display()))?;
        let err = out.try_clone()?;
        let mut cmd = Command::new(exe);
        cmd.env("RELAY_PORT", port.to_string())
            .env("RELAY_HOST", "127.0.0.1")
            .env("HOME", home)
            .env("TRANTOR_LOG", "warn")
            .env_remove("RELAY_DATABASE_URL")
            .env_remove("DATABASE_URL")
            .env_remove("RELAY_AUTH");
        // After the defaults, so a caller may set any of them (the PostgreSQL bench sets
        // RELAY_DATABASE_URL).
        args(&mut cmd, port);
        let child = cmd
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .context("cannot start the hub")?;
        Ok(HubProc { child, port, log })
    }

    pub(super) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Wait until `/health` answers 200; returns how long that took from `since`.
    pub(super) async fn wait_healthy(
        &mut self,
        since: Instant,
        timeout: Duration,
    ) -> Result<Duration> {
        loop {
            if let Some(status) = self.child.try_wait()? {
                bail!("the hub exited ({status}); log:\n{}", self.log_tail());
            }
            if let Ok(mut c) = Http::connect(self.port).await
                && let Ok(r) = c.get("/health").await
                && r.status == 200
            {
                return Ok(since.elapsed());
            }
            if since.elapsed() > timeout {
                bail!(
                    "the hub did not become healthy in {timeout:?}; log:\n{}",
                    self.log_tail()
                );
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    /// SIGTERM, then SIGKILL after 10 s.
    pub(super) fn stop(&mut self) -> Result<()> {
        if self.child.try_wait()?.is_some() {
            return Ok(());
        }
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if self.child.try_wait()?.is_some() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.child.kill()?;
        self.child.wait()?;
        Ok(())
    }
}

impl Drop for HubProc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// CPU time `pid` has used over its whole life, ns: the kernel's CPU clock of the process
/// (`clock_getcpuclockid`), which sums every thread, those that already ended included — the
/// same accounting as utime + stime in `/proc/<pid>/stat`, at ns rather than tick resolution.
/// A delta of two readings is the CPU the process used in between; it never goes backwards.
pub(super) fn process_cpu_ns(pid: u32) -> Result<u64> {
    let raw = i32::try_from(pid).context("pid out of range")?;
    let clock = nix::time::clock_getcpuclockid(nix::unistd::Pid::from_raw(raw))
        .with_context(|| format!("no CPU clock for pid {pid}"))?;
    let t = clock
        .now()
        .with_context(|| format!("cannot read the CPU clock of pid {pid}"))?;
    let ns = i128::from(t.tv_sec()) * 1_000_000_000 + i128::from(t.tv_nsec());
    u64::try_from(ns).context("negative CPU time")
}

/// utime + stime of `pid` from `/proc/<pid>/stat`, in ns (tick resolution, usually 10 ms): the
/// cross-check of [`process_cpu_ns`] printed beside it.
pub(super) fn stat_cpu_ns(pid: u32) -> Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("cannot read /proc/{pid}/stat"))?;
    // The command name may hold spaces and parentheses: fields count from the last ')'.
    let rest = stat.rsplit(')').next().context("odd /proc stat line")?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    // Fields 14 and 15 (utime, stime) are at 11 and 12 after the ')'.
    let tick = |i: usize| -> Result<u64> {
        f.get(i)
            .and_then(|v| v.parse::<u64>().ok())
            .context("no utime/stime in /proc stat")
    };
    let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .and_then(|v| u64::try_from(v).ok())
        .filter(|v| *v > 0)
        .unwrap_or(100);
    Ok((tick(11)? + tick(12)?) * (1_000_000_000 / hz))
}

/// CPU this process (the bench client) has used, ns (`getrusage(RUSAGE_SELF)`, µs resolution).
pub(super) fn self_cpu_ns() -> Result<u64> {
    let u = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_SELF)
        .context("getrusage")?;
    let us =
        |t: nix::sys::time::TimeVal| i128::from(t.tv_sec()) * 1_000_000 + i128::from(t.tv_usec());
    u64::try_from((us(u.user_time()) + us(u.system_time())) * 1_000).context("negative CPU time")
}

/// CPU used by `pid` over a window: the process clock's delta, with the `/proc` tick delta
/// beside it. Fails rather than clamp if the clock went backwards (it cannot).
pub(super) struct CpuWindow {
    pid: u32,
    clock0: u64,
    stat0: u64,
    t0: Instant,
}

impl CpuWindow {
    /// Start a window now.
    pub(super) fn start(pid: u32) -> Result<CpuWindow> {
        Ok(CpuWindow {
            pid,
            clock0: process_cpu_ns(pid)?,
            stat0: stat_cpu_ns(pid)?,
            t0: Instant::now(),
        })
    }

    /// End the window: (CPU ns by the process clock, CPU ns by /proc ticks, wall ns).
    pub(super) fn end(&self) -> Result<(u64, u64, u64)> {
        let clock1 = process_cpu_ns(self.pid)?;
        let stat1 = stat_cpu_ns(self.pid)?;
        let wall = u64::try_from(self.t0.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let used = clock1
            .checked_sub(self.clock0)
            .context("the process CPU clock went backwards")?;
        let ticks = stat1
            .checked_sub(self.stat0)
            .context("/proc utime+stime went backwards")?;
        Ok((used, ticks, wall))
    }
}

/// Resident set of `pid`, KiB (`VmRSS`).
pub(super) fn rss_kib(pid: u32) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .context("no VmRSS in /proc status")
}

pub(super) fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

pub(super) fn field_i64(v: &Value, name: &str) -> Result<i64> {
    v[name]
        .as_i64()
        .with_context(|| format!("reply has no integer {name:?}: {v}"))
}

pub(super) async fn health(c: &mut Http) -> Result<Value> {
    c.get("/health").await?.json()
}

/// Wake latency (1): `/send` reply → woken `/poll` reply, µs, sorted. `others_held` polls of
/// other sessions are held meanwhile (the sample's poll counts as held above them).
async fn wake_latency(
    port: u16,
    session: &str,
    samples: usize,
    others_held: i64,
) -> Result<Vec<f64>> {
    wake_between(port, port, session, samples, others_held).await
}

/// Wake latency from a `/send` to `send_port` to the return of the `/poll` held on
/// `poll_port` (another hub on the same database, or the same one), µs, sorted; `others_held`
/// polls are held on `poll_port` besides the one timed.
pub(super) async fn wake_between(
    send_port: u16,
    poll_port: u16,
    session: &str,
    samples: usize,
    others_held: i64,
) -> Result<Vec<f64>> {
    let mut sender = Http::connect(send_port).await?;
    let mut watcher = Http::connect(poll_port).await?;
    let mut poller = Some(Http::connect(poll_port).await?);
    let mut cursor = 0i64;
    let mut out = Vec::with_capacity(samples);
    for i in 0..samples {
        let mut p = poller.take().context("poller connection lost")?;
        let path = format!("/poll?session={session}&since={cursor}&wait=30");
        let held = tokio::spawn(async move {
            let r = p.get(&path).await;
            let at = Instant::now();
            (p, r, at)
        });
        // Send only once the poll is held, so what is timed is a wake, not a first read.
        let start = Instant::now();
        loop {
            let h = health(&mut watcher).await?;
            if h["pollsHeld"].as_i64().unwrap_or(0) > others_held {
                break;
            }
            if start.elapsed() > Duration::from_secs(5) {
                bail!("the poll was never held");
            }
            tokio::task::yield_now().await;
        }
        tokio::time::sleep(Duration::from_micros(300)).await;
        let body = json!({"from": "bench-sender", "to": session, "text": format!("wake {i}")});
        let reply = sender.post("/send", &body.to_string()).await?;
        let sent_at = Instant::now();
        let id = field_i64(&reply.json()?, "id")?;
        let (p, r, got_at) = held.await.context("poller task failed")?;
        let page = r?.json()?;
        let ids: Vec<i64> = page["messages"]
            .as_array()
            .map(|a| a.iter().filter_map(|m| m["id"].as_i64()).collect())
            .unwrap_or_default();
        if !ids.contains(&id) {
            bail!("poll reply {page} lacks message {id}");
        }
        cursor = field_i64(&page, "cursor")?;
        out.push(got_at.saturating_duration_since(sent_at).as_secs_f64() * 1e6);
        poller = Some(p);
    }
    out.sort_by(f64::total_cmp);
    Ok(out)
}

/// Idle CPU (2): hub CPU while `n` polls are held and nothing happens, from the hub process's
/// own accounting over the window (every thread, ended ones included; never clamped).
async fn idle_cpu(port: u16, pid: u32, n: usize, secs: u64) -> Result<IdleCpu> {
    let mut tasks = Vec::new();
    for i in 0..n {
        let mut c = Http::connect(port).await?;
        tasks.push(tokio::spawn(async move {
            let _ = c
                .get(&format!("/poll?session=bench-idle-{i}&since=0&wait=280"))
                .await;
        }));
    }
    let mut watcher = Http::connect(port).await?;
    let start = Instant::now();
    loop {
        let h = health(&mut watcher).await?;
        if h["pollsHeld"].as_i64().unwrap_or(0) >= n as i64 {
            break;
        }
        if start.elapsed() > Duration::from_secs(10) {
            bail!("only {} of {n} polls were held", h["pollsHeld"]);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    drop(watcher);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let w = CpuWindow::start(pid)?;
    tokio::time::sleep(Duration::from_secs(secs)).await;
    let (used, ticks, wall) = w.end()?;
    for t in tasks {
        t.abort();
    }
    Ok(IdleCpu {
        pct: used as f64 / wall as f64 * 100.0,
        used_ms: used as f64 / 1e6,
        ticks_ms: ticks as f64 / 1e6,
    })
}

/// What an idle window cost a process.
pub(super) struct IdleCpu {
    /// Percent of one core, from the process CPU clock.
    pub pct: f64,
    /// CPU used in the window, ms (process CPU clock).
    pub used_ms: f64,
    /// The same from `/proc/<pid>/stat` ticks, ms (10 ms resolution).
    pub ticks_ms: f64,
}

/// Send as fast as `clients` connections can for `secs` (or, with `per_client_limit`, that
/// many each); each client writes to the next one's session. Returns (sends, seconds).
async fn send_load(
    port: u16,
    clients: usize,
    secs: u64,
    per_client_limit: Option<usize>,
) -> Result<(usize, f64)> {
    let deadline = Instant::now() + Duration::from_secs(secs);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..clients {
        let mut c = Http::connect(port).await?;
        let to = (i + 1) % clients;
        tasks.push(tokio::spawn(async move {
            let mut sent = 0usize;
            let text = LOAD_TEXT;
            loop {
                if per_client_limit.is_some_and(|l| sent >= l)
                    || (per_client_limit.is_none() && Instant::now() >= deadline)
                {
                    break;
                }
                let body = json!({"from": format!("bench-c{i}"), "to": format!("bench-c{to}"),
                                  "text": text});
                let r = c.post("/send", &body.to_string()).await?;
                if r.status != 200 {
                    bail!(
                        "/send: HTTP {}: {}",
                        r.status,
                        String::from_utf8_lossy(&r.body)
                    );
                }
                sent += 1;
            }
            anyhow::Ok(sent)
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await.context("sender task failed")??;
    }
    Ok((total, start.elapsed().as_secs_f64()))
}

/// Loss (4): a burst of `n` direct messages to a session nobody reads, read back through
/// `/inbox` paging. Returns (missing, duplicates, unexpected).
async fn burst_loss(port: u16, n: usize, clients: usize) -> Result<(usize, usize, usize)> {
    let mut tasks = Vec::new();
    for i in 0..clients {
        let mut c = Http::connect(port).await?;
        let count = n / clients + usize::from(i < n % clients);
        tasks.push(tokio::spawn(async move {
            let mut ids = Vec::with_capacity(count);
            for k in 0..count {
                let body = json!({"from": format!("bench-burst-{i}"), "to": "bench-absent",
                                  "text": format!("burst {i}/{k}")});
                ids.push(field_i64(
                    &c.post("/send", &body.to_string()).await?.json()?,
                    "id",
                )?);
            }
            anyhow::Ok(ids)
        }));
    }
    let mut sent = HashSet::new();
    for t in tasks {
        sent.extend(t.await.context("burst task failed")??);
    }
    let mut reader = Http::connect(port).await?;
    let mut got = Vec::new();
    let mut cursor = 0i64;
    loop {
        let page = reader
            .get(&format!("/inbox?session=bench-absent&since={cursor}"))
            .await?
            .json()?;
        let msgs = page["messages"].as_array().cloned().unwrap_or_default();
        if msgs.is_empty() {
            break;
        }
        got.extend(msgs.iter().filter_map(|m| m["id"].as_i64()));
        cursor = field_i64(&page, "cursor")?;
    }
    let unique: HashSet<i64> = got.iter().copied().collect();
    let missing = sent.difference(&unique).count();
    let unexpected = unique.difference(&sent).count();
    Ok((missing, got.len() - unique.len(), unexpected))
}

/// Raise this process's soft open-file limit to the hard one (the bench holds 10,000
/// connections); returns the soft limit in force.
fn raise_own_fd_limit() -> u64 {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return 1024;
    };
    if hard > soft && setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() {
        return hard;
    }
    soft
}

/// Open `n` connections each holding `GET /poll` of its own session (`<prefix>-<i>`), and wait
/// until `/health` counts `expect_total` held polls.
async fn hold_polls(
    port: u16,
    prefix: &str,
    n: usize,
    expect_total: i64,
) -> Result<Vec<tokio::net::TcpStream>> {
    use tokio::io::AsyncWriteExt;
    /// Connections per loopback source address (the ephemeral port range holds ~28,000).
    const PER_SOURCE: usize = 20_000;
    /// The next unused source address: a bound port is not reused while it is in TIME_WAIT
    /// (a plain connect may), so every block beyond the first gets an address of its own.
    static NEXT_SOURCE: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(2);
    let hub = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut socks = Vec::with_capacity(n);
    let mut source = 1u8;
    for i in 0..n {
        let mut s = if i < PER_SOURCE {
            tokio::net::TcpStream::connect(hub).await
        } else {
            if i % PER_SOURCE == 0 {
                source = NEXT_SOURCE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                anyhow::ensure!(source < 255, "out of loopback source addresses");
            }
            let sock = tokio::net::TcpSocket::new_v4()?;
            sock.bind(std::net::SocketAddr::from(([127, 0, 0, source], 0)))
                .with_context(|| format!("bind connection {i} of {n} to 127.0.0.{source}"))?;
            sock.connect(hub).await
        }
        .with_context(|| format!("connection {i} of {n}"))?;
        let req = format!(
            "GET /poll?session={prefix}-{i}&since=0&wait=280 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
        );
        s.write_all(req.as_bytes()).await?;
        socks.push(s);
    }
    wait_polls_held(port, expect_total).await?;
    Ok(socks)
}

/// Wait until `/health` counts exactly `want` held polls.
async fn wait_polls_held(port: u16, want: i64) -> Result<()> {
    let mut watcher = Http::connect(port).await?;
    let start = Instant::now();
    loop {
        let h = health(&mut watcher).await?;
        if h["pollsHeld"].as_i64() == Some(want) {
            return Ok(());
        }
        if start.elapsed() > Duration::from_secs(120) {
            bail!("pollsHeld is {} (want {want})", h["pollsHeld"]);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Send `rate` messages per second to `bench-sink` (nobody polls it) from 16 connections
/// until `stop` flips; returns how many were sent.
async fn background_sends(
    port: u16,
    rate: u64,
    stop: tokio::sync::watch::Receiver<bool>,
) -> Result<usize> {
    // Enough connections that a commit's fsync (each sender waits for its reply) does not
    // hold the rate below `rate`.
    const SENDERS: u64 = 16;
    let mut tasks = Vec::new();
    for k in 0..SENDERS {
        let mut c = Http::connect(port).await?;
        let stop = stop.clone();
        let period = Duration::from_micros(SENDERS * 1_000_000 / rate.max(1));
        tasks.push(tokio::spawn(async move {
            let mut tick = tokio::time::interval(period);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut sent = 0usize;
            while !*stop.borrow() {
                tick.tick().await;
                let body = json!({"from": format!("bench-bg{k}"), "to": "bench-sink",
                                  "text": LOAD_TEXT});
                let r = c.post("/send", &body.to_string()).await?;
                if r.status != 200 {
                    bail!("background /send: HTTP {}", r.status);
                }
                sent += 1;
            }
            anyhow::Ok(sent)
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await.context("background sender failed")??;
    }
    Ok(total)
}

/// Held polls (7): hub RSS with `many` held polls over 3 rounds (memory returned after they
/// close?), then wake latency with `idle` held polls and `rate` sends/s flowing elsewhere.
async fn held_polls(port: u16, pid: u32, sizes: &Sizes, table: &mut Table) -> Result<()> {
    let limit = raise_own_fd_limit();
    let many = sizes.held_polls;
    if (limit as usize) < many + 256 {
        bail!("the open-file limit ({limit}) is too low for {many} held polls");
    }
    let rss0 = rss_kib(pid)?;
    let mut rounds = Vec::new();
    for round in 1..=3 {
        eprintln!("bench: holding {many} polls (round {round})…");
        let before = rss_kib(pid)?;
        let socks = hold_polls(port, "bench-many", many, many as i64).await?;
        let held = rss_kib(pid)?;
        drop(socks);
        wait_polls_held(port, 0).await?;
        tokio::time::sleep(Duration::from_millis(500)).await;
        let after = rss_kib(pid)?;
        rounds.push((before, held, after));
    }
    let mb = |k: u64| k as f64 / 1024.0;
    let (_, held1, _) = rounds[0];
    let max_held = rounds.iter().map(|r| r.1).max().unwrap_or(held1);
    let what = format!("hub RSS with {many} held polls (worst of 3 rounds)");
    let result = format!(
        "{:.1} MB ({:.1} KB per poll above the {:.1} MB before)",
        mb(max_held),
        (max_held.saturating_sub(rss0)) as f64 / many as f64,
        mb(rss0)
    );
    // The bar is stated for 10,000 polls; other counts are reported, not judged.
    table.row(if many == 10_000 {
        Row::check(what, result, "< 50 MB", mb(max_held) < 50.0)
    } else {
        Row::info(what, result)
    });
    table.row(Row::info(
        format!("hub RSS per round of {many} polls: before → held → after close"),
        rounds
            .iter()
            .map(|(b, h, a)| format!("{:.1} → {:.1} → {:.1} MB", mb(*b), mb(*h), mb(*a)))
            .collect::<Vec<_>>()
            .join("; "),
    ));

    let idle = sizes.wake_idle_polls;
    eprintln!(
        "bench: wake latency with {idle} idle held polls and {} sends/s…",
        sizes.wake_rate
    );
    let socks = hold_polls(port, "bench-idle-many", idle, idle as i64).await?;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let bg = tokio::spawn(background_sends(port, sizes.wake_rate, stop_rx));
    let t0 = Instant::now();
    let wake = wake_latency(port, "bench-wake-load", sizes.wake_samples, idle as i64).await;
    let secs = t0.elapsed().as_secs_f64();
    let _ = stop_tx.send(true);
    let sent = bg.await.context("background sender failed")??;
    let wake = wake?;
    drop(socks);
    let p50 = percentile(&wake, 0.50);
    let p99 = percentile(&wake, 0.99);
    table.row(Row::check(
        format!(
            "wake latency p99, {idle} idle held polls, {:.0} sends/s flowing ({} samples; p50 {p50:.0} µs)",
            sent as f64 / secs,
            wake.len()
        ),
        format!("{p99:.0} µs"),
        "< 1 ms",
        p99 < 1_000.0,
    ));
    Ok(())
}

/// Restart (6): fill a store file with `n` messages directly (big write batches), in-process.
async fn fill_store(path: &Path, n: usize) -> Result<()> {
    let store = SqliteStore::open(path)?;
    const PER_WRITE: usize = 2_000;
    let base_ts = trantor_proto::now_ms() - n as i64;
    let mut next = 0usize;
    while next < n {
        // A few writes in flight so the writer groups them into one commit.
        let mut inflight = Vec::new();
        for _ in 0..4 {
            if next >= n {
                break;
            }
            let from = next;
            let to = (next + PER_WRITE).min(n);
            next = to;
            inflight.push(store.write(move |tx| {
                for i in from..to {
                    tx.insert_message(
                        NewMessage {
                            ts: base_ts + i as i64,
                            from: format!("fill-s{}", i % 50),
                            to: format!("fill-r{}", i % 200),
                            project: "bench".into(),
                            text: format!("fill message {i}: status, a question, card #12"),
                            ..Default::default()
                        },
                        &[],
                    )?;
                }
                Ok(())
            }));
        }
        for w in inflight {
            w.await?;
        }
    }
    // Dropping the last handle joins the writer, which checkpoints the log into the file.
    drop(store);
    Ok(())
}

/// The text every throughput `/send` carries (the built-in client and wrk send the same body).
pub(super) const LOAD_TEXT: &str = "a benchmark message of roughly the size agents send each other: \
                         status, a question, a pointer to card #12 and a file path";

/// The load generator of the throughput rows.
#[derive(Debug, Clone)]
pub(super) enum LoadGen {
    /// `wrk` (found on `PATH`): C, epoll, one keep-alive connection per client, pipelining off;
    /// a Lua `request()` cycles through 16 prebuilt requests.
    Wrk(PathBuf),
    /// The built-in client ([`send_load`]): one tokio task and raw connection per client.
    Builtin,
}

impl LoadGen {
    /// `wrk` when it is installed, else the built-in client.
    pub(super) fn detect() -> LoadGen {
        std::env::var_os("PATH")
            .into_iter()
            .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
            .map(|d| d.join("wrk"))
            .find(|p| p.is_file())
            .map_or(LoadGen::Builtin, LoadGen::Wrk)
    }

    pub(super) fn describe(&self) -> String {
        match self {
            LoadGen::Wrk(p) => format!("wrk ({}), 2 threads", p.display()),
            LoadGen::Builtin => "the built-in client (wrk not installed)".into(),
        }
    }
}

/// CPU used by waited-for children of this process, ns (`getrusage(RUSAGE_CHILDREN)`).
fn children_cpu_ns() -> Result<u64> {
    let u = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_CHILDREN)
        .context("getrusage")?;
    let us =
        |t: nix::sys::time::TimeVal| i128::from(t.tv_sec()) * 1_000_000 + i128::from(t.tv_usec());
    u64::try_from((us(u.user_time()) + us(u.system_time())) * 1_000).context("negative CPU time")
}

/// Run wrk against `POST /send` with `clients` connections for `secs`: client *i* writes to
/// client *i+1*'s session. Returns (requests, seconds, wrk's CPU ns). Fails on any non-2xx
/// reply or socket error.
async fn wrk_send(wrk: &Path, port: u16, clients: usize, secs: u64) -> Result<(usize, f64, u64)> {
    let dir = TempDir::new("wrk")?;
    let script = dir.path().join("send.lua");
    let lua = format!(
        r#"local reqs = {{}}
local n = 0
init = function(args)
  for k = 0, {last} do
    local body = string.format('{{"from":"bench-c%d","to":"bench-c%d","text":"{text}"}}', k, (k + 1) % {clients})
    reqs[k + 1] = wrk.format("POST", "/send", {{["Content-Type"] = "application/json"}}, body)
  end
end
request = function()
  n = n % {clients} + 1
  return reqs[n]
end
"#,
        last = clients - 1,
        text = LOAD_TEXT,
    );
    std::fs::write(&script, lua).context("cannot write the wrk script")?;
    let before = children_cpu_ns()?;
    let out = tokio::process::Command::new(wrk)
        .args([
            "-t",
            "2",
            "-c",
            &clients.to_string(),
            "-d",
            &format!("{secs}s"),
        ])
        .args(["--timeout", "10s", "-s"])
        .arg(&script)
        .arg(format!("http://127.0.0.1:{port}/send"))
        .output()
        .await
        .context("cannot run wrk")?;
    let cpu = children_cpu_ns()?
        .checked_sub(before)
        .context("children CPU went backwards")?;
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    if !out.status.success() {
        bail!(
            "wrk failed ({}): {text}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    if let Some(line) = text
        .lines()
        .find(|l| l.contains("Non-2xx") || l.contains("Socket errors"))
    {
        bail!("wrk saw failures: {line}\n{text}");
    }
    // "  123456 requests in 5.00s, 12.34MB read"
    let line = text
        .lines()
        .find(|l| l.contains(" requests in "))
        .with_context(|| format!("no request count in wrk's output:\n{text}"))?;
    let mut words = line.split_whitespace();
    let requests: usize = words
        .next()
        .and_then(|w| w.parse().ok())
        .with_context(|| format!("odd wrk line {line:?}"))?;
    let secs: f64 = line
        .split(" requests in ")
        .nth(1)
        .and_then(|r| r.split(',').next())
        .and_then(|d| parse_wrk_duration(d.trim()))
        .with_context(|| format!("odd wrk duration in {line:?}"))?;
    Ok((requests, secs, cpu))
}

/// wrk's durations: `5.00s`, `812.34ms`, `1.02m`.
fn parse_wrk_duration(d: &str) -> Option<f64> {
    if let Some(v) = d.strip_suffix("ms") {
        v.parse::<f64>().ok().map(|v| v / 1e3)
    } else if let Some(v) = d.strip_suffix("us") {
        v.parse::<f64>().ok().map(|v| v / 1e6)
    } else if let Some(v) = d.strip_suffix('s') {
        v.parse().ok()
    } else if let Some(v) = d.strip_suffix('m') {
        v.parse::<f64>().ok().map(|v| v * 60.0)
    } else {
        None
    }
}

/// One throughput window: the rate and the CPU both sides used for it.
pub(super) struct Throughput {
    pub(super) secs: f64,
    pub(super) rate: f64,
    /// Server CPU per request, µs, and cores busy (CPU / wall).
    hub_us: f64,
    hub_cores: f64,
    /// Load generator CPU per request, µs, and cores busy.
    client_us: f64,
    client_cores: f64,
}

impl Throughput {
    pub(super) fn cpu_text(&self) -> String {
        format!(
            "server {:.1} µs ({:.2} cores busy) / load generator {:.1} µs ({:.2} cores busy)",
            self.hub_us, self.hub_cores, self.client_us, self.client_cores
        )
    }
}

/// Throughput (3): `/send` as fast as the load generator goes, with the server's CPU (its
/// process clock) and the generator's CPU (wrk: `RUSAGE_CHILDREN`; built-in: this process)
/// over the same window.
pub(super) async fn throughput(
    port: u16,
    pid: u32,
    sizes: &Sizes,
    load: &LoadGen,
) -> Result<Throughput> {
    let hub_w = CpuWindow::start(pid)?;
    let (sends, secs, client) = match load {
        LoadGen::Wrk(wrk) => {
            wrk_send(wrk, port, sizes.throughput_clients, sizes.throughput_secs).await?
        }
        LoadGen::Builtin => {
            let client0 = self_cpu_ns()?;
            let (sends, secs) =
                send_load(port, sizes.throughput_clients, sizes.throughput_secs, None).await?;
            let client = self_cpu_ns()?
                .checked_sub(client0)
                .context("this process's CPU time went backwards")?;
            (sends, secs, client)
        }
    };
    let (hub_cpu, _, wall) = hub_w.end()?;
    let n = sends.max(1) as f64;
    let client = client as f64;
    Ok(Throughput {
        secs,
        rate: sends as f64 / secs,
        hub_us: hub_cpu as f64 / 1e3 / n,
        hub_cores: hub_cpu as f64 / wall as f64,
        client_us: client / 1e3 / n,
        client_cores: client / wall as f64,
    })
}

/// The bare-route ceiling (the same load against a bare route on the same server stack, started
/// for it and stopped after), with its row in `table`.
pub(super) async fn ceiling(
    sizes: &Sizes,
    load: &LoadGen,
    table: &mut Table,
) -> Result<Throughput> {
    eprintln!("bench: bare-route ceiling…");
    let home = TempDir::new("ceiling")?;
    let mut server = HubProc::spawn_ceiling(home.path())?;
    server
        .wait_healthy(Instant::now(), Duration::from_secs(20))
        .await?;
    let c = throughput(server.port, server.pid(), sizes, load).await?;
    server.stop()?;
    table.row(Row::info(
        format!(
            "ceiling: bare route (same accept loop, same body decoded, nothing stored), {:.1} s",
            c.secs
        ),
        format!("{:.0} requests/s", c.rate),
    ));
    Ok(c)
}

/// The delivery record's cost (docs/protocol.md §5.8): the same `/send` load and the same
/// wake samples against a hub that keeps the record and one started with
/// `--no-delivery-record`, both at `--sync full`, alternated over two rounds in one run so a
/// drift of the machine shows instead of favouring one side.
async fn delivery_cost(sizes: &Sizes, table: &mut Table) -> Result<()> {
    let load = LoadGen::detect();
    let mut hubs = Vec::new();
    for off in [false, true] {
        let home = TempDir::new(if off { "no-record" } else { "record" })?;
        let data = home.path().join("data");
        let mut hub = HubProc::spawn_with(home.path(), |cmd, _| {
            cmd.arg("hub")
                .env("RELAY_DATA_DIR", &data)
                .env("TRANTOR_SYNC", "full")
                .env(
                    "TRANTOR_NO_DELIVERY_RECORD",
                    if off { "true" } else { "false" },
                );
        })?;
        hub.wait_healthy(Instant::now(), Duration::from_secs(20))
            .await?;
        hubs.push((home, hub));
    }
    let mut rate = [Vec::new(), Vec::new()];
    let mut cpu = [Vec::new(), Vec::new()];
    for round in 1..=2 {
        for (i, (_, hub)) in hubs.iter().enumerate() {
            eprintln!(
                "bench: delivery record {}: /send throughput, round {round}…",
                if i == 0 { "on" } else { "off" }
            );
            let t = throughput(hub.port, hub.pid(), sizes, &load).await?;
            rate[i].push(t.rate);
            cpu[i].push(t.hub_us);
        }
    }
    let mut wake = [Vec::new(), Vec::new()];
    for (i, (_, hub)) in hubs.iter().enumerate() {
        eprintln!(
            "bench: delivery record {}: wake latency…",
            if i == 0 { "on" } else { "off" }
        );
        wake[i] = wake_latency(hub.port, "bench-wake", sizes.wake_samples, 0).await?;
    }
    // What each hub kept: the record hub answers a message's life, the other 404.
    let mut kept = [0u16; 2];
    for (i, (_, hub)) in hubs.iter().enumerate() {
        let mut c = Http::connect(hub.port).await?;
        kept[i] = c.get("/delivery?id=1").await?.status;
    }
    if kept != [200, 404] {
        bail!("GET /delivery?id=1 answered {kept:?}; expected 200 with the record, 404 without");
    }
    for (_, hub) in &mut hubs {
        hub.stop()?;
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    let (on, off) = (mean(&rate[0]), mean(&rate[1]));
    table.row(Row::info(
        format!(
            "/send with the delivery record vs without (--no-delivery-record), {} connections, \
             --sync full, 2 alternated rounds each",
            sizes.throughput_clients
        ),
        format!(
            "{on:.0} vs {off:.0} sends/s (rounds {:.0}/{:.0} vs {:.0}/{:.0}): the record costs \
             {:.1} % of the rate; hub CPU {:.1} vs {:.1} µs per send",
            rate[0][0],
            rate[0][1],
            rate[1][0],
            rate[1][1],
            (1.0 - on / off.max(1.0)) * 100.0,
            mean(&cpu[0]),
            mean(&cpu[1])
        ),
    ));
    table.row(Row::info(
        format!(
            "wake latency with the delivery record vs without, p50 / p99 ({} samples each)",
            sizes.wake_samples
        ),
        format!(
            "{:.0} / {:.0} µs vs {:.0} / {:.0} µs",
            percentile(&wake[0], 0.50),
            percentile(&wake[0], 0.99),
            percentile(&wake[1], 0.50),
            percentile(&wake[1], 0.99)
        ),
    ));
    Ok(())
}

/// Flush dirty pages and drop the OS page cache (needs root); the error says why not.
fn drop_page_cache() -> Result<()> {
    nix::unistd::sync();
    std::fs::write("/proc/sys/vm/drop_caches", "1\n")
        .context("cannot write /proc/sys/vm/drop_caches")
}

/// Run every measurement and return the report rows.
pub async fn run(args: &HubBenchArgs) -> Result<Table> {
    if let Some(url) = &args.store {
        return super::hub_pg::run(args, url).await;
    }
    let mut sizes = Sizes::new(args.quick);
    if let Some(n) = args.held_polls {
        sizes.held_polls = n;
    }
    let mut table = Table::default();
    if args.scaling {
        scaling_tables(args, &mut table).await?;
        return Ok(table);
    }
    live_hub_bars(args, &sizes, &mut table).await?;
    if args.wants("delivery") {
        delivery_cost(&sizes, &mut table).await?;
    }
    if args.wants("restart") {
        restart_bar(&sizes, &mut table).await?;
    }
    Ok(table)
}

/// `--scaling`: the read routes at growing store sizes and with a growing 24-h window, on
/// stores seeded directly (`--only window` or `--only sizes` picks one).
async fn scaling_tables(args: &HubBenchArgs, table: &mut Table) -> Result<()> {
    if args.wants("window") {
        super::scaling::run_window(args.quick, table).await?;
    }
    if args.wants("sizes") {
        super::scaling::run(args.quick, table).await?;
    }
    Ok(())
}

/// The bars measured on one running hub at `--sync full`: wake, idle, throughput, loss, rss
/// and polls (those `--only` asks for), the hub stopped after them.
async fn live_hub_bars(args: &HubBenchArgs, sizes: &Sizes, table: &mut Table) -> Result<()> {
    let home = TempDir::new("hub")?;
    let data = home.path().join("data");
    let mut hub = HubProc::spawn(&data, home.path(), "full")?;
    hub.wait_healthy(Instant::now(), Duration::from_secs(20))
        .await?;
    let port = hub.port;
    let pid = hub.pid();
    eprintln!("bench: hub pid {pid} on port {port}");
    table.note(format!(
        "hub RSS at start: {:.1} MB",
        rss_kib(pid)? as f64 / 1024.0
    ));
    if args.wants("wake") {
        wake_bar(port, sizes, table).await?;
    }
    if args.wants("idle") {
        idle_bar(port, pid, sizes, table).await?;
    }
    if args.wants("throughput") {
        throughput_bars(port, pid, sizes, table).await?;
    }
    if args.wants("loss") {
        loss_bar(port, sizes, table).await?;
    }
    if args.wants("rss") {
        rss_bar(port, pid, sizes, table).await?;
    }
    if args.wants("polls") {
        held_polls(port, pid, sizes, table).await?;
    }
    hub.stop()?;
    Ok(())
}

/// Wake latency (1): p50 and p99 of `sizes.wake_samples` wakes, nothing else held.
async fn wake_bar(port: u16, sizes: &Sizes, table: &mut Table) -> Result<()> {
    eprintln!("bench: wake latency ({} samples)…", sizes.wake_samples);
    let wake = wake_latency(port, "bench-wake", sizes.wake_samples, 0).await?;
    let p50 = percentile(&wake, 0.50);
    let p99 = percentile(&wake, 0.99);
    table.row(Row::info(
        format!("wake latency p50 ({} samples)", wake.len()),
        format!("{p50:.0} µs"),
    ));
    table.row(Row::check(
        format!("wake latency p99 ({} samples)", wake.len()),
        format!("{p99:.0} µs"),
        "< 1 ms",
        p99 < 1_000.0,
    ));
    Ok(())
}

/// Idle CPU (2): the hub's CPU while `sizes.idle_pollers` polls are held for `idle_secs`.
async fn idle_bar(port: u16, pid: u32, sizes: &Sizes, table: &mut Table) -> Result<()> {
    eprintln!(
        "bench: idle CPU ({} held polls, {} s)…",
        sizes.idle_pollers, sizes.idle_secs
    );
    let idle = idle_cpu(port, pid, sizes.idle_pollers, sizes.idle_secs).await?;
    table.row(Row::check(
        format!(
            "hub CPU, {} idle held polls, {} s",
            sizes.idle_pollers, sizes.idle_secs
        ),
        format!(
            "{:.4} % of a core ({:.2} ms of CPU; /proc ticks: {:.0} ms)",
            idle.pct, idle.used_ms, idle.ticks_ms
        ),
        "< 0.2 %",
        idle.pct < 0.2,
    ));
    Ok(())
}

/// Throughput (3): `/send` at `--sync full` on the hub under test, against the bare-route
/// ceiling, then the same load on a second hub at `--sync normal`, all in the same run.
async fn throughput_bars(port: u16, pid: u32, sizes: &Sizes, table: &mut Table) -> Result<()> {
    let load = LoadGen::detect();
    table.note(format!(
        "throughput load generator: {}; {} keep-alive connections, pipelining off",
        load.describe(),
        sizes.throughput_clients
    ));
    eprintln!("bench: /send throughput (--sync full)…");
    let t = throughput(port, pid, sizes, &load).await?;
    table.row(Row::check(
        format!(
            "/send throughput, {} connections, {:.1} s (--sync full, the default)",
            sizes.throughput_clients, t.secs
        ),
        format!("{:.0} sends/s", t.rate),
        "≥ 40,000/s",
        t.rate >= 40_000.0,
    ));
    table.row(Row::info(
        "/send CPU per send (full): hub / load generator, same window",
        t.cpu_text(),
    ));
    // The ceiling: the same load against a bare route on the same server stack.
    let c = ceiling(sizes, &load, table).await?;
    table.row(Row::info(
        "ceiling CPU per request: server / load generator, same window",
        c.cpu_text(),
    ));
    let ratio = t.rate / c.rate.max(1.0);
    table.row(Row::check(
        "/send (full) as a fraction of the ceiling, same run",
        format!("{:.0} %", ratio * 100.0),
        "≥ 60 %",
        ratio >= 0.6,
    ));
    sync_normal_rows(sizes, &load, &t, &c, table).await
}

/// The same load on a second hub at `--sync normal`, in the same run, beside `full` (the hub
/// under test's rate) and `ceiling`.
async fn sync_normal_rows(
    sizes: &Sizes,
    load: &LoadGen,
    full: &Throughput,
    ceiling: &Throughput,
    table: &mut Table,
) -> Result<()> {
    eprintln!("bench: /send throughput (--sync normal)…");
    let normal_home = TempDir::new("hub-normal")?;
    let mut normal = HubProc::spawn(
        &normal_home.path().join("data"),
        normal_home.path(),
        "normal",
    )?;
    normal
        .wait_healthy(Instant::now(), Duration::from_secs(20))
        .await?;
    let n = throughput(normal.port, normal.pid(), sizes, load).await?;
    normal.stop()?;
    table.row(Row::info(
        format!(
            "/send throughput, {} connections, {:.1} s (--sync normal, same run)",
            sizes.throughput_clients, n.secs
        ),
        format!(
            "{:.0} sends/s ({:.2}× full; {:.0} % of the ceiling)",
            n.rate,
            n.rate / full.rate.max(1.0),
            n.rate / ceiling.rate.max(1.0) * 100.0
        ),
    ));
    table.row(Row::info(
        "/send CPU per send (normal): hub / load generator, same window",
        n.cpu_text(),
    ));
    Ok(())
}

/// Loss (4): a burst of `sizes.burst` direct messages to an absent reader, all read back.
async fn loss_bar(port: u16, sizes: &Sizes, table: &mut Table) -> Result<()> {
    eprintln!("bench: {}-message burst to an absent reader…", sizes.burst);
    let (missing, dups, unexpected) = burst_loss(port, sizes.burst, 16).await?;
    table.row(Row::check(
        format!("loss, {} direct messages to an absent reader", sizes.burst),
        format!("{missing} missing, {dups} duplicated, {unexpected} unexpected"),
        "0",
        missing == 0 && dups == 0 && unexpected == 0,
    ));
    Ok(())
}

/// RSS (5): the hub's resident set once the store holds `sizes.rss_messages` messages (filled
/// over HTTP) and the read side has been exercised.
async fn rss_bar(port: u16, pid: u32, sizes: &Sizes, table: &mut Table) -> Result<()> {
    let mut watcher = Http::connect(port).await?;
    let have = field_i64(&health(&mut watcher).await?, "messages")?;
    let need = (sizes.rss_messages - have).max(0) as usize;
    eprintln!(
        "bench: filling to {} messages over HTTP ({need} more)…",
        sizes.rss_messages
    );
    let clients = sizes.throughput_clients;
    send_load(port, clients, u64::MAX / 4, Some(need.div_ceil(clients))).await?;
    // The fill can outlast the hub's header timeout, which closes idle keep-alive
    // connections: read through a fresh one.
    let mut watcher = Http::connect(port).await?;
    // Exercise the read side too, so its caches are part of what is measured.
    for s in 0..clients {
        let _ = watcher
            .get(&format!("/inbox?session=bench-c{s}&since=0&peek=1"))
            .await?;
    }
    let _ = watcher.get("/recent?limit=200").await?;
    let stored = field_i64(&health(&mut watcher).await?, "messages")?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss = rss_kib(pid)? as f64 / 1024.0;
    table.row(Row::check(
        format!("hub RSS with {stored} stored messages"),
        format!("{rss:.1} MB"),
        "< 30 MB",
        rss < 30.0,
    ));
    Ok(())
}

/// Restart (6): a fresh store filled with `sizes.restart_messages` messages in-process, the
/// page cache dropped if it can be, then a hub started on it and timed to its first read of
/// the newest message.
async fn restart_bar(sizes: &Sizes, table: &mut Table) -> Result<()> {
    eprintln!(
        "bench: writing {} messages into a fresh store…",
        sizes.restart_messages
    );
    let big = TempDir::new("restart")?;
    let big_data = big.path().join("data");
    let fill_start = Instant::now();
    fill_store(&big_data.join("hub.db"), sizes.restart_messages).await?;
    table.note(format!(
        "{} messages written straight into the store in {:.1} s (in-process, 2,000 per write)",
        sizes.restart_messages,
        fill_start.elapsed().as_secs_f64()
    ));
    // The newest message of the fresh store, and the session it was sent to.
    let newest = sizes.restart_messages as i64;
    let newest_to = format!("fill-r{}", (sizes.restart_messages - 1) % 200);
    let cold = cold_restart_note(table);
    eprintln!("bench: restarting the hub on it…");
    let mut r = restarted(
        || HubProc::spawn(&big_data, big.path(), "full"),
        &newest_to,
        newest,
    )
    .await?;
    table.row(Row::info(
        format!(
            "restart with {} messages, spawn → first /health 200",
            sizes.restart_messages
        ),
        format!("{:.0} ms", r.ready.as_secs_f64() * 1e3),
    ));
    table.row(Row::check(
        format!(
            "restart with {} messages ({}), spawn → first read of the newest message",
            sizes.restart_messages,
            if cold { "cold" } else { "warm" }
        ),
        format!(
            "{:.0} ms (#{newest} read back; /health counts {})",
            r.read_newest.as_secs_f64() * 1e3,
            r.stored
        ),
        "< 2 s",
        r.read_newest < Duration::from_secs(2) && r.stored == newest,
    ));
    table.note(format!(
        "hub RSS after the restart and the read: {:.1} MB",
        rss_kib(r.hub.pid())? as f64 / 1024.0
    ));
    drop(r.conn);
    r.hub.stop()
}

/// Drop the page cache before a restart and note whether the restart is cold or warm;
/// returns whether it is cold.
fn cold_restart_note(table: &mut Table) -> bool {
    match drop_page_cache() {
        Ok(()) => {
            table.note(
                "restart: cold — the page cache was dropped (sync; echo 1 > \
                 /proc/sys/vm/drop_caches) after the store was written, so the binary, the \
                 database and its indexes come from disk"
                    .to_string(),
            );
            true
        }
        Err(e) => {
            table.note(format!(
                "restart: WARM — the page cache could not be dropped ({e}); the database file \
                 was just written, so it is read from memory"
            ));
            false
        }
    }
}

/// A hub restarted on a filled store, timed from its spawn.
pub(super) struct Restarted {
    /// The hub, still running.
    pub(super) hub: HubProc,
    /// The connection the newest message was read through.
    pub(super) conn: Http,
    /// Spawn → first `/health` 200.
    pub(super) ready: Duration,
    /// Spawn → first read that returned the newest message.
    pub(super) read_newest: Duration,
    /// The message count `/health` gave right after that read.
    pub(super) stored: i64,
}

/// Start a hub with `spawn` and time it to its first `/health` 200 and to the first read that
/// returns message `newest` (a row read, not a status page: the inbox of its recipient
/// `newest_to` after the id just before it); 60 s at most each.
pub(super) async fn restarted(
    spawn: impl FnOnce() -> Result<HubProc>,
    newest_to: &str,
    newest: i64,
) -> Result<Restarted> {
    let t0 = Instant::now();
    let mut hub = spawn()?;
    let ready = hub.wait_healthy(t0, Duration::from_secs(60)).await?;
    let mut conn = Http::connect(hub.port).await?;
    let read_newest = loop {
        let page = conn
            .get(&format!(
                "/inbox?session={newest_to}&since={}&peek=1",
                newest - 1
            ))
            .await?
            .json()?;
        let got = page["messages"]
            .as_array()
            .is_some_and(|a| a.iter().any(|m| m["id"].as_i64() == Some(newest)));
        if got {
            break t0.elapsed();
        }
        if t0.elapsed() > Duration::from_secs(60) {
            bail!("the newest message #{newest} was not readable 60 s after the restart");
        }
    };
    let stored = field_i64(&health(&mut conn).await?, "messages")?;
    Ok(Restarted {
        hub,
        conn,
        ready,
        read_newest,
        stored,
    })
}

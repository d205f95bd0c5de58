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
use trantor_store::{NewMessage, SqliteStore, Store};

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
    /// restart); all by default.
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
}

impl HubBenchArgs {
    fn wants(&self, name: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|o| o == name)
    }
}

/// How much of everything to do.
struct Sizes {
    wake_samples: usize,
    idle_pollers: usize,
    idle_secs: u64,
    throughput_clients: usize,
    throughput_secs: u64,
    burst: usize,
    rss_messages: i64,
    restart_messages: usize,
}

impl Sizes {
    fn new(quick: bool) -> Sizes {
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
            }
        } else {
            Sizes {
                wake_samples: 1_000,
                idle_pollers: 50,
                idle_secs: 10,
                throughput_clients: 16,
                throughput_secs: 5,
                burst: 12_000,
                rss_messages: 100_000,
                restart_messages: 1_000_000,
            }
        }
    }
}

/// A temporary directory removed on drop (the cli crate has no tempfile dependency).
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> Result<TempDir> {
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

    fn path(&self) -> &Path {
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
struct HubProc {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl HubProc {
    /// Start `trantor hub` on a free port with its state under `data` and `HOME` at `home`.
    fn spawn(data: &Path, home: &Path) -> Result<HubProc> {
        let exe = std::env::current_exe().context("cannot find this executable")?;
        let port = free_port()?;
        let log = home.join(format!("hub-{port}.log"));
        let out = std::fs::File::create(&log)
            .with_context(|| format!("cannot create {}", log.display()))?;
        let err = out.try_clone()?;
        let child = Command::new(exe)
            .arg("hub")
            .env("RELAY_PORT", port.to_string())
            .env("RELAY_HOST", "127.0.0.1")
            .env("RELAY_DATA_DIR", data)
            .env("HOME", home)
            .env("TRANTOR_LOG", "warn")
            .env_remove("RELAY_DATABASE_URL")
            .env_remove("RELAY_AUTH")
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .context("cannot start the hub")?;
        Ok(HubProc { child, port, log })
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Wait until `/health` answers 200; returns how long that took from `since`.
    async fn wait_healthy(&mut self, since: Instant, timeout: Duration) -> Result<Duration> {
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
    fn stop(&mut self) -> Result<()> {
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

/// CPU time used by every thread of `pid`, ns (scheduler statistics: ns resolution, unlike
/// the 10 ms ticks of `/proc/<pid>/stat`).
pub(super) fn cpu_ns(pid: u32) -> Result<u64> {
    let mut total = 0u64;
    let dir = format!("/proc/{pid}/task");
    for entry in std::fs::read_dir(&dir).with_context(|| format!("cannot read {dir}"))? {
        let path = entry?.path().join("schedstat");
        // A thread may end between listing and reading.
        if let Ok(s) = std::fs::read_to_string(&path)
            && let Some(ns) = s
                .split_whitespace()
                .next()
                .and_then(|v| v.parse::<u64>().ok())
        {
            total += ns;
        }
    }
    Ok(total)
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

fn field_i64(v: &Value, name: &str) -> Result<i64> {
    v[name]
        .as_i64()
        .with_context(|| format!("reply has no integer {name:?}: {v}"))
}

async fn health(c: &mut Http) -> Result<Value> {
    c.get("/health").await?.json()
}

/// Wake latency (1): `/send` reply → woken `/poll` reply, µs, sorted.
async fn wake_latency(port: u16, samples: usize) -> Result<Vec<f64>> {
    let mut sender = Http::connect(port).await?;
    let mut watcher = Http::connect(port).await?;
    let mut poller = Some(Http::connect(port).await?);
    let mut cursor = 0i64;
    let mut out = Vec::with_capacity(samples);
    for i in 0..samples {
        let mut p = poller.take().context("poller connection lost")?;
        let path = format!("/poll?session=bench-wake&since={cursor}&wait=30");
        let held = tokio::spawn(async move {
            let r = p.get(&path).await;
            let at = Instant::now();
            (p, r, at)
        });
        // Send only once the poll is held, so what is timed is a wake, not a first read.
        let start = Instant::now();
        loop {
            let h = health(&mut watcher).await?;
            if h["pollsHeld"].as_i64().unwrap_or(0) >= 1 {
                break;
            }
            if start.elapsed() > Duration::from_secs(5) {
                bail!("the poll was never held");
            }
            tokio::task::yield_now().await;
        }
        tokio::time::sleep(Duration::from_micros(300)).await;
        let body = json!({"from": "bench-sender", "to": "bench-wake", "text": format!("wake {i}")});
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

/// Idle CPU (2): hub CPU (% of one core) while `n` polls are held and nothing happens.
async fn idle_cpu(port: u16, pid: u32, n: usize, secs: u64) -> Result<(f64, f64)> {
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
    let cpu0 = cpu_ns(pid)?;
    let t0 = Instant::now();
    tokio::time::sleep(Duration::from_secs(secs)).await;
    let cpu1 = cpu_ns(pid)?;
    let wall = t0.elapsed().as_nanos() as f64;
    for t in tasks {
        t.abort();
    }
    let used = cpu1.saturating_sub(cpu0) as f64;
    Ok((used / wall * 100.0, used / 1e6))
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
            let text = "a benchmark message of roughly the size agents send each other: \
                        status, a question, a pointer to card #12 and a file path";
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

/// Run every measurement and return the report rows.
pub async fn run(args: &HubBenchArgs) -> Result<Table> {
    let sizes = Sizes::new(args.quick);
    let mut table = Table::default();
    let home = TempDir::new("hub")?;
    let data = home.path().join("data");

    let mut hub = HubProc::spawn(&data, home.path())?;
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
        eprintln!("bench: wake latency ({} samples)…", sizes.wake_samples);
        let wake = wake_latency(port, sizes.wake_samples).await?;
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
    }

    if args.wants("idle") {
        eprintln!(
            "bench: idle CPU ({} held polls, {} s)…",
            sizes.idle_pollers, sizes.idle_secs
        );
        let (idle, idle_ms) = idle_cpu(port, pid, sizes.idle_pollers, sizes.idle_secs).await?;
        table.row(Row::check(
            format!(
                "hub CPU, {} idle held polls, {} s",
                sizes.idle_pollers, sizes.idle_secs
            ),
            format!("{idle:.4} % of a core ({idle_ms:.2} ms of CPU)"),
            "< 0.2 %",
            idle < 0.2,
        ));
    }

    if args.wants("throughput") {
        eprintln!("bench: /send throughput…");
        let cpu0 = cpu_ns(pid)?;
        let (sends, secs) =
            send_load(port, sizes.throughput_clients, sizes.throughput_secs, None).await?;
        let cpu_per_send = (cpu_ns(pid)?.saturating_sub(cpu0)) as f64 / 1e3 / sends.max(1) as f64;
        let rate = sends as f64 / secs;
        table.row(Row::check(
            format!(
                "/send throughput, {} clients, {:.1} s",
                sizes.throughput_clients, secs
            ),
            format!("{rate:.0} sends/s ({cpu_per_send:.0} µs hub CPU per send)"),
            "≥ 40,000/s",
            rate >= 40_000.0,
        ));
    }

    if args.wants("loss") {
        eprintln!("bench: {}-message burst to an absent reader…", sizes.burst);
        let (missing, dups, unexpected) = burst_loss(port, sizes.burst, 16).await?;
        table.row(Row::check(
            format!("loss, {} direct messages to an absent reader", sizes.burst),
            format!("{missing} missing, {dups} duplicated, {unexpected} unexpected"),
            "0",
            missing == 0 && dups == 0 && unexpected == 0,
        ));
    }

    if args.wants("rss") {
        let mut watcher = Http::connect(port).await?;
        let have = field_i64(&health(&mut watcher).await?, "messages")?;
        let need = (sizes.rss_messages - have).max(0) as usize;
        eprintln!(
            "bench: filling to {} messages over HTTP ({need} more)…",
            sizes.rss_messages
        );
        let clients = sizes.throughput_clients;
        send_load(port, clients, u64::MAX / 4, Some(need.div_ceil(clients))).await?;
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
    }

    hub.stop()?;
    drop(hub);

    if args.wants("restart") {
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
        eprintln!("bench: restarting the hub on it…");
        let t0 = Instant::now();
        let mut hub = HubProc::spawn(&big_data, big.path())?;
        let ready = hub.wait_healthy(t0, Duration::from_secs(60)).await?;
        let mut c = Http::connect(hub.port).await?;
        let page = c
            .get("/inbox?session=fill-r7&since=0&peek=1")
            .await?
            .json()?;
        let n = page["messages"].as_array().map(Vec::len).unwrap_or(0);
        let read_ok = n > 0;
        table.row(Row::check(
            format!(
                "restart with {} messages (spawn → first /health 200)",
                sizes.restart_messages
            ),
            format!(
                "{:.0} ms; /inbox then returned {n} messages{}",
                ready.as_secs_f64() * 1e3,
                if page["more"].as_bool() == Some(true) {
                    " (more: true)"
                } else {
                    ""
                }
            ),
            "< 2 s",
            ready < Duration::from_secs(2) && read_ok,
        ));
        table.note(format!(
            "hub RSS after the restart and one /inbox page: {:.1} MB (the database file was \
             just written, so it is in the OS page cache: a warm restart)",
            rss_kib(hub.pid())? as f64 / 1024.0
        ));
        drop(c);
        hub.stop()?;
    }

    Ok(table)
}

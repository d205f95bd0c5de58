//! `trantor bench hub`: the hub's bars (docs/architecture.md §6) measured on a real hub process.
//!
//! The hub under test is this very binary (`current_exe() hub`) on a free port, with its data
//! and `HOME` in a fresh temporary directory, so nothing of the user's is touched and the
//! numbers are those of the shipped code path (HTTP, JSON, store, wake registry).
//! Every client is a raw keep-alive connection ([`super::http::Http`]) so the client side adds
//! as little as possible to what is measured.

use super::http::Http;
use super::hub_proc::{
    CpuWindow, HubProc, TempDir, field_i64, health, percentile, rss_kib, rss_split,
};
use super::hub_shared::{
    EMBEDDED_MEASURES, HubBenchArgs, LOAD_TEXT, LoadGen, POSTGRES_MEASURES, SCALING_MEASURES,
    Sizes, Throughput, ceiling, fill_rows, restarted, send_load, throughput, throughput_of,
    wake_between,
};
use super::{Row, Table};
use anyhow::{Context, Result, bail};
use serde_json::json;
use std::collections::HashSet;
use std::path::Path;
use std::time::{Duration, Instant};
use trantor_store::NewMessage;
use trantor_store_sqlite::SqliteStore;

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
                c.post("/send", &body.to_string())
                    .await?
                    .ok("background /send")?;
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
    let base_ts = trantor_proto::now_ms() - n as i64;
    // A few writes in flight so the writer groups them into one commit.
    fill_rows(&store, n, 4, move |tx, i| {
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
        )
        .map(drop)
    })
    .await?;
    // Dropping the last handle joins the writer, which checkpoints the log into the file.
    drop(store);
    Ok(())
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
        args.check_only("the PostgreSQL bench (--store)", POSTGRES_MEASURES)?;
        return super::hub_pg::run(args, url).await;
    }
    if args.scaling {
        args.check_only("--scaling", SCALING_MEASURES)?;
    } else {
        args.check_only("the hub bench", EMBEDDED_MEASURES)?;
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
        "hub RSS at start: {:.1} MB ({})",
        rss_kib(pid)? as f64 / 1024.0,
        rss_split(pid)?
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
    let normal = HubProc::spawn(
        &normal_home.path().join("data"),
        normal_home.path(),
        "normal",
    )?;
    let n = throughput_of(normal, Duration::from_secs(20), sizes, load).await?;
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

/// RSS (5): the hub's resident set at rest once the store holds `sizes.rss_messages` messages
/// (filled over HTTP) and the read side has been exercised.
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
    drop(watcher);
    // Read at rest: past one whole quiet tick of the hub, which hands the burst's freed heap
    // back to the system then (crates/hub/src/trim.rs). What was resident right after the
    // burst is noted too.
    let busy = rss_kib(pid)? as f64 / 1024.0;
    tokio::time::sleep(trantor_hub::trim::QUIET * 2 + Duration::from_millis(500)).await;
    let rss = rss_kib(pid)? as f64 / 1024.0;
    table.row(Row::check(
        format!("hub RSS with {stored} stored messages"),
        format!("{rss:.1} MB"),
        "< 30 MB",
        rss < 30.0,
    ));
    table.note(format!(
        "hub RSS with {stored} stored messages, at rest: {}; right after the last request: \
         {busy:.1} MB",
        rss_split(pid)?
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

//! `trantor bench crowd`: a crowd of simulated seats against one hub (the embedded store) and
//! against two hubs on one PostgreSQL database, at N = 100, 1,000 and 10,000 seats.
//!
//! A simulated seat does what a runner does, at a runner's rates (means; each event is drawn at
//! random times, so the crowd's load is steady): it keeps one `/poll` held on its session (on its
//! own connection, re-held the moment it returns), heartbeats (`POST /register`) every 30 s,
//! sends a contract (`POST /send` to a random other seat) every 60 s and moves its card
//! (`POST /task/update`, todo ↔ doing) every 120 s; a seat that receives a contract answers it
//! (`POST /send` with `re`). Writes go over a shared pool of keep-alive connections (a real
//! runner keeps one of its own: what the hub holds per seat is the held poll; the pool keeps the
//! benchmark under the machine's open-file limit at 10,000 seats).
//!
//! Measured over a window after every poll is held: each hub's CPU (cores busy) and RSS, wake
//! latency (a contract's `POST /send` written → the recipient's held poll returned with it;
//! across hubs when the two seats are on different hubs), and errors (non-2xx replies, failed
//! connections, polls that failed). A size that cannot run here (the open-file limit) is
//! reported as not measured, with the reason.

use super::http::Http;
use super::hub_pg::{Scratch, split_url};
use super::hub_proc::{CpuWindow, HubProc, TempDir, health, percentile, rss_kib};
use super::{Row, Table};
use anyhow::{Context, Result, bail};
use serde_json::json;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Options of `trantor bench crowd`.
#[derive(Debug, Clone, clap::Args)]
pub struct CrowdBenchArgs {
    /// Crowd sizes (comma-separated).
    #[arg(long, value_delimiter = ',', default_values_t = [100, 1_000, 10_000])]
    pub seats: Vec<usize>,
    /// Seconds measured at each size, once every seat's poll is held.
    #[arg(long, default_value_t = 30)]
    pub secs: u64,
    /// A `postgres://` server for the two-hub crowd (a scratch database is created there and
    /// dropped); without it only the one-hub crowd runs.
    #[arg(long)]
    pub store: Option<String>,
    /// Write connections shared by the crowd (per hub).
    #[arg(long, default_value_t = 64)]
    pub pool: usize,
    /// Also write the report (markdown) to this file.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// The hubs' log filter (their `TRANTOR_LOG`, e.g. `debug` or `trantor_hub=debug`).
    #[arg(long, default_value = "warn")]
    pub hub_log: String,
    /// Copy each hub's log into this directory after its size ran (`crowd-<seats>-<store>-hub<i>.log`):
    /// the hubs' homes are scratch and go away with the run.
    #[arg(long)]
    pub keep_logs: Option<PathBuf>,
}

/// Mean seconds between one seat's heartbeats, contracts and card moves.
const HEARTBEAT_S: f64 = 30.0;
const CONTRACT_S: f64 = 60.0;
const MOVE_S: f64 = 120.0;
/// Open files kept free beside the crowd's sockets (the hub's store, logs, listeners).
const FD_SLACK: u64 = 256;

/// What the crowd counted.
#[derive(Default)]
struct Counts {
    polls: AtomicU64,
    poll_errors: AtomicU64,
    writes: AtomicU64,
    write_errors: AtomicU64,
    contracts: AtomicU64,
    answers: AtomicU64,
    late: AtomicU64,
}

/// Shared state of one crowd run.
struct Crowd {
    counts: Counts,
    /// Contract token → when its `/send` was written.
    sent: Mutex<HashMap<u64, Instant>>,
    /// Wake latencies, µs (inside the window only).
    wakes: Mutex<Vec<f64>>,
    measuring: AtomicBool,
    stop: AtomicBool,
    next_token: AtomicU64,
}

/// A write a pool connection performs.
enum Job {
    Heartbeat(usize),
    Contract { from: usize, to: usize },
    Answer { from: usize, to: usize, re: i64 },
    Move { seat: usize, card: i64, doing: bool },
}

/// A write queued for a pool connection, with when it was queued.
type Queued = (Job, Instant);

/// The sending end of a hub's write queue.
type WriteQueue = tokio::sync::mpsc::Sender<Queued>;

/// The receiving end of a hub's write queue, shared by the hub's pool connections.
type SharedQueue = Arc<tokio::sync::Mutex<tokio::sync::mpsc::Receiver<Queued>>>;

fn session(i: usize) -> String {
    format!("crowd-s{i}:crowd")
}

/// Raise this process's soft open-file limit to the hard one; returns the soft limit now.
fn raise_nofile() -> u64 {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return 1024;
    };
    let want = hard.min(1 << 20);
    if want > soft && setrlimit(Resource::RLIMIT_NOFILE, want, hard).is_ok() {
        return want;
    }
    soft
}

/// A small deterministic generator (xorshift), so the bench needs no RNG dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    /// An exponential wait with mean `mean` seconds.
    fn exp(&mut self, mean: f64) -> Duration {
        let u = ((self.next() >> 11) as f64 + 1.0) / (1u64 << 53) as f64;
        Duration::from_secs_f64(-u.ln() * mean)
    }
}

/// Run the crowd at every size, on one hub and (with `--store`) on two hubs on PostgreSQL.
pub async fn run(args: &CrowdBenchArgs) -> Result<Table> {
    let mut table = Table::default();
    let limit = raise_nofile();
    table.note(format!(
        "open-file limit of the bench (and so of the hubs it starts): {limit}"
    ));
    table.note(format!(
        "each seat: one held /poll (own connection); heartbeat every {HEARTBEAT_S} s, contract \
         every {CONTRACT_S} s (answered with re), card move every {MOVE_S} s (means); writes over \
         {} shared keep-alive connections per hub; {} s measured per size after every poll is held",
        args.pool, args.secs
    ));
    for &n in &args.seats {
        one_topology(args, &mut table, n, limit, None).await?;
    }
    match &args.store {
        Some(url) => {
            table.note(format!(
                "two hubs: PostgreSQL on {} (scratch database per size), seats split evenly, \
                 contracts to any seat (half of them cross hubs)",
                trantor_proto::text::mask_url(&split_url(url)?.0)
            ));
            for &n in &args.seats {
                one_topology(args, &mut table, n, limit, Some(url)).await?;
            }
        }
        None => table.note(
            "two hubs on one PostgreSQL: not measured (no --store postgres://… given)".into(),
        ),
    }
    Ok(table)
}

async fn one_topology(
    args: &CrowdBenchArgs,
    table: &mut Table,
    n: usize,
    limit: u64,
    pg: Option<&str>,
) -> Result<()> {
    let hubs_n = if pg.is_some() { 2 } else { 1 };
    let label = if pg.is_some() {
        format!("two hubs on PostgreSQL, {n} seats")
    } else {
        format!("one hub (SQLite), {n} seats")
    };
    // The bench holds a poll per seat and the pools; each hub holds its share of both.
    let need = n as u64 + (args.pool * hubs_n) as u64 + FD_SLACK;
    if need > limit {
        table.row(Row::info(
            label,
            format!(
                "not measured: needs about {need} open files in the bench process, the limit \
                 here is {limit} (raise the hard limit: ulimit -Hn)"
            ),
        ));
        return Ok(());
    }
    eprintln!("bench: crowd, {label}…");
    let scratch = match pg {
        Some(url) => Some(Scratch::create(url).await?),
        None => None,
    };
    let homes: Vec<TempDir> = (0..hubs_n)
        .map(|i| TempDir::new(&format!("crowd-{i}")))
        .collect::<Result<_>>()?;
    let mut hubs = Vec::new();
    for home in &homes {
        let data = home.path().join("data");
        let url = scratch.as_ref().map(|s| s.url.clone());
        let log = args.hub_log.clone();
        let mut hub = HubProc::spawn_with(home.path(), move |cmd, _| {
            cmd.arg("hub")
                .env("RELAY_DATA_DIR", data)
                .env("TRANTOR_SYNC", "full")
                .env("TRANTOR_LOG", log);
            if let Some(u) = url {
                cmd.env("RELAY_DATABASE_URL", u);
            }
        })?;
        hub.wait_healthy(Instant::now(), Duration::from_secs(30))
            .await?;
        hubs.push(hub);
    }
    let ports: Vec<u16> = hubs.iter().map(|h| h.port).collect();
    let result = crowd(args, n, &ports, &hubs).await;
    for (i, h) in hubs.iter_mut().enumerate() {
        h.stop()?;
        if let Some(dir) = &args.keep_logs {
            let store = if pg.is_some() { "postgres" } else { "sqlite" };
            let to = dir.join(format!("crowd-{n}-{store}-hub{i}.log"));
            std::fs::create_dir_all(dir)
                .and_then(|()| std::fs::copy(h.log_path(), &to))
                .with_context(|| format!("cannot keep the hub's log as {}", to.display()))?;
        }
    }
    drop(scratch);
    let r = result?;
    let mut w = r.wakes;
    w.sort_by(f64::total_cmp);
    let cpu: Vec<String> = r.cpu.iter().map(|c| format!("{:.2}", c)).collect();
    let rss: Vec<String> = r
        .rss_kib
        .iter()
        .map(|k| format!("{:.1}", *k as f64 / 1024.0))
        .collect();
    let wake = if w.is_empty() {
        "no wake sampled".to_string()
    } else {
        format!(
            "{:.0} µs / {:.0} µs ({} wakes)",
            percentile(&w, 0.50),
            percentile(&w, 0.99),
            w.len()
        )
    };
    table.row(Row::info(
        label,
        format!(
            "hub CPU {} cores; RSS {} MB; wake p50 / p99 {wake}; {} writes ({:.0}/s: {} contracts, \
             {} answers), {} polls returned; errors: {} writes, {} polls{}; all {n} polls held in \
             {:.1} s; bench client {:.2} cores",
            cpu.join(" + "),
            rss.join(" + "),
            r.counts.writes,
            r.counts.writes as f64 / r.secs,
            r.counts.contracts,
            r.counts.answers,
            r.counts.polls,
            r.counts.write_errors,
            r.counts.poll_errors,
            if r.counts.late > 0 {
                format!(", {} writes late (the pool fell behind)", r.counts.late)
            } else {
                String::new()
            },
            r.ramp.as_secs_f64(),
            r.client_cores,
        ),
    ));
    Ok(())
}

/// What one crowd run measured.
struct Outcome {
    secs: f64,
    cpu: Vec<f64>,
    rss_kib: Vec<u64>,
    wakes: Vec<f64>,
    /// The counters' growth over the window.
    counts: Snapshot,
    ramp: Duration,
    client_cores: f64,
}

async fn crowd(
    args: &CrowdBenchArgs,
    n: usize,
    ports: &[u16],
    hubs: &[HubProc],
) -> Result<Outcome> {
    let state = Arc::new(Crowd {
        counts: Counts::default(),
        sent: Mutex::new(HashMap::new()),
        wakes: Mutex::new(Vec::new()),
        measuring: AtomicBool::new(false),
        stop: AtomicBool::new(false),
        next_token: AtomicU64::new(1),
    });
    let (queues, workers) = write_pools(args.pool, ports, &state);
    let cards = setup_seats(n, ports).await?;
    let ramp0 = Instant::now();
    let mut pollers = Vec::with_capacity(n);
    for s in 0..n {
        let port = ports[hub_of(ports, s)];
        let (state, answer) = (state.clone(), queues[hub_of(ports, s)].clone());
        pollers.push(tokio::spawn(
            async move { poller(port, s, state, answer).await },
        ));
        if s % 256 == 255 {
            // Let the accept queue drain rather than overflow it.
            tokio::task::yield_now().await;
        }
    }
    if let Err(e) = wait_polls_held(n, ports, ramp0).await {
        state.stop.store(true, Ordering::SeqCst);
        return Err(e);
    }
    let ramp = ramp0.elapsed();
    // The window.
    let windows: Vec<CpuWindow> = hubs
        .iter()
        .map(|h| CpuWindow::start(h.pid()))
        .collect::<Result<_>>()?;
    let client0 = super::hub_proc::self_cpu_ns()?;
    let t0 = Instant::now();
    state.measuring.store(true, Ordering::SeqCst);
    let base = Snapshot::of(&state.counts);
    drive(args.secs, n, ports, &cards, &queues, &state).await;
    // Let the last contracts wake their polls before the window closes.
    tokio::time::sleep(Duration::from_millis(500)).await;
    state.measuring.store(false, Ordering::SeqCst);
    let secs = t0.elapsed().as_secs_f64();
    let mut cpu = Vec::new();
    for w in &windows {
        let (used, _, wall) = w.end()?;
        cpu.push(used as f64 / wall as f64);
    }
    let client = super::hub_proc::self_cpu_ns()?.saturating_sub(client0) as f64;
    let rss: Vec<u64> = hubs
        .iter()
        .map(|h| rss_kib(h.pid()))
        .collect::<Result<_>>()?;
    let counts = Snapshot::of(&state.counts).since(&base);
    state.stop.store(true, Ordering::SeqCst);
    for p in pollers {
        p.abort();
    }
    drop(queues);
    for w in workers {
        w.abort();
    }
    let wakes = std::mem::take(&mut *state.wakes.lock().unwrap_or_else(|p| p.into_inner()));
    Ok(Outcome {
        secs,
        cpu,
        rss_kib: rss,
        wakes,
        counts,
        ramp,
        client_cores: client / 1e9 / secs,
    })
}

/// Which hub seat `seat` is on (round-robin over the hubs).
fn hub_of(ports: &[u16], seat: usize) -> usize {
    seat % ports.len().max(1)
}

/// One write queue per hub, each drained by `pool` workers on keep-alive connections.
fn write_pools(
    pool: usize,
    ports: &[u16],
    state: &Arc<Crowd>,
) -> (Vec<WriteQueue>, Vec<tokio::task::JoinHandle<()>>) {
    let mut queues = Vec::new();
    let mut workers = Vec::new();
    for &port in ports {
        let (tx, rx) = tokio::sync::mpsc::channel::<Queued>(64 * 1024);
        let rx = Arc::new(tokio::sync::Mutex::new(rx));
        for _ in 0..pool {
            let (rx, state) = (rx.clone(), state.clone());
            workers.push(tokio::spawn(
                async move { pool_worker(port, rx, state).await },
            ));
        }
        queues.push(tx);
    }
    (queues, workers)
}

/// Every seat registers and gets a card (setup, before the window); the card of each seat.
async fn setup_seats(n: usize, ports: &[u16]) -> Result<Vec<i64>> {
    let mut cards = vec![0i64; n];
    let mut setup = Vec::new();
    for (h, &port) in ports.iter().enumerate() {
        let seats: Vec<usize> = (0..n).filter(|s| hub_of(ports, *s) == h).collect();
        for chunk in seats.chunks(seats.len().div_ceil(16).max(1)) {
            let chunk = chunk.to_vec();
            setup.push(tokio::spawn(async move {
                let mut c = Http::connect_with(port, 8 * 1024).await?;
                let mut out = Vec::new();
                for s in chunk {
                    let me = session(s);
                    c.post(
                        "/register",
                        &json!({"session": me, "project": "crowd"}).to_string(),
                    )
                    .await?
                    .json()?;
                    let card = c
                        .post(
                            "/task",
                            &json!({"title": format!("card of seat {s}"), "project": "crowd",
                                    "assignee": me, "by": me})
                            .to_string(),
                        )
                        .await?
                        .json()?;
                    let id = card["task"]["id"].as_i64().context("no card id")?;
                    out.push((s, id));
                }
                anyhow::Ok(out)
            }));
        }
    }
    for t in setup {
        for (s, id) in t.await.context("setup task failed")?? {
            cards[s] = id;
        }
    }
    Ok(cards)
}

/// Waits until the hubs hold `n` polls between them (`/health`'s `pollsHeld`).
async fn wait_polls_held(n: usize, ports: &[u16], ramp0: Instant) -> Result<()> {
    let mut watch = Vec::new();
    for &port in ports {
        watch.push(Http::connect(port).await?);
    }
    let deadline = Instant::now() + Duration::from_secs(60 + n as u64 / 100);
    loop {
        let mut held = 0;
        for c in &mut watch {
            held += health(c).await?["pollsHeld"].as_u64().unwrap_or(0) as usize;
        }
        if held >= n {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "only {held} of {n} polls were held after {:?}",
                ramp0.elapsed()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The crowd's events for `secs`, as one stream at the summed rate (a seat's events are
/// independent): heartbeats, contracts to another seat, card moves; a write the pool cannot
/// take at once is counted late.
async fn drive(
    secs: u64,
    n: usize,
    ports: &[u16],
    cards: &[i64],
    queues: &[WriteQueue],
    state: &Crowd,
) {
    let rate = n as f64 * (1.0 / HEARTBEAT_S + 1.0 / CONTRACT_S + 1.0 / MOVE_S);
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ n as u64);
    let mut doing = vec![false; n];
    let mut at = Instant::now();
    let end = at + Duration::from_secs(secs);
    while at < end {
        at += rng.exp(1.0 / rate);
        tokio::time::sleep_until(at.into()).await;
        let seat = rng.below(n);
        let pick = rng.next() as f64 / u64::MAX as f64 * rate / n as f64;
        let job = if pick < 1.0 / HEARTBEAT_S {
            Job::Heartbeat(seat)
        } else if pick < 1.0 / HEARTBEAT_S + 1.0 / CONTRACT_S {
            let mut to = rng.below(n);
            if to == seat {
                to = (to + 1) % n;
            }
            Job::Contract { from: seat, to }
        } else {
            doing[seat] = !doing[seat];
            Job::Move {
                seat,
                card: cards[seat],
                doing: doing[seat],
            }
        };
        if queues[hub_of(ports, seat)]
            .try_send((job, Instant::now()))
            .is_err()
        {
            state.counts.late.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The counters at one moment.
struct Snapshot {
    writes: u64,
    write_errors: u64,
    polls: u64,
    poll_errors: u64,
    contracts: u64,
    answers: u64,
    late: u64,
}

impl Snapshot {
    fn of(c: &Counts) -> Snapshot {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Snapshot {
            writes: g(&c.writes),
            write_errors: g(&c.write_errors),
            polls: g(&c.polls),
            poll_errors: g(&c.poll_errors),
            contracts: g(&c.contracts),
            answers: g(&c.answers),
            late: g(&c.late),
        }
    }

    /// What grew from `base` to this snapshot.
    fn since(&self, base: &Snapshot) -> Snapshot {
        Snapshot {
            writes: self.writes - base.writes,
            write_errors: self.write_errors - base.write_errors,
            polls: self.polls - base.polls,
            poll_errors: self.poll_errors - base.poll_errors,
            contracts: self.contracts - base.contracts,
            answers: self.answers - base.answers,
            late: self.late - base.late,
        }
    }
}

/// The connection kept in `conn`, else a new one with a `buffer`-byte read buffer; `None`
/// after counting a failed connect in `errors`.
async fn kept_or_new(
    conn: &mut Option<Http>,
    port: u16,
    buffer: usize,
    errors: &AtomicU64,
) -> Option<Http> {
    if let Some(c) = conn.take() {
        return Some(c);
    }
    let fresh = Http::connect_with(port, buffer).await;
    if fresh.is_err() {
        errors.fetch_add(1, Ordering::Relaxed);
    }
    fresh.ok()
}

/// One seat's held poll: re-held the moment it returns; every contract in a reply is a wake
/// sample and is answered.
async fn poller(port: u16, seat: usize, state: Arc<Crowd>, answer: WriteQueue) {
    let me = session(seat);
    let mut cursor = 0i64;
    let mut conn: Option<Http> = None;
    while !state.stop.load(Ordering::Relaxed) {
        let Some(mut c) = kept_or_new(&mut conn, port, 4 * 1024, &state.counts.poll_errors).await
        else {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        };
        let r = c
            .get(&format!("/poll?session={me}&since={cursor}&wait=25"))
            .await;
        let got = Instant::now();
        let page = match r.and_then(|r| r.json()) {
            Ok(p) => p,
            Err(_) => {
                state.counts.poll_errors.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        state.counts.polls.fetch_add(1, Ordering::Relaxed);
        conn = Some(c);
        cursor = page["cursor"].as_i64().unwrap_or(cursor);
        for m in page["messages"].as_array().into_iter().flatten() {
            let text = m["text"].as_str().unwrap_or("");
            let Some(token) = text
                .strip_prefix("contract ")
                .and_then(|t| t.parse::<u64>().ok())
            else {
                continue;
            };
            let sent = state
                .sent
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&token);
            if let Some(at) = sent
                && state.measuring.load(Ordering::Relaxed)
            {
                let us = got.saturating_duration_since(at).as_secs_f64() * 1e6;
                state
                    .wakes
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(us);
            }
            if let (Some(id), Some(from)) = (m["id"].as_i64(), m["from"].as_str())
                && let Some(s) = from
                    .strip_prefix("crowd-s")
                    .and_then(|r| r.split(':').next())
                    .and_then(|r| r.parse::<usize>().ok())
            {
                let _ = answer.try_send((
                    Job::Answer {
                        from: seat,
                        to: s,
                        re: id,
                    },
                    Instant::now(),
                ));
            }
        }
    }
}

/// A pool connection: performs queued writes in order, reconnecting after a failure.
async fn pool_worker(port: u16, rx: SharedQueue, state: Arc<Crowd>) {
    let mut conn: Option<Http> = None;
    loop {
        let next = rx.lock().await.recv().await;
        let Some((job, _queued)) = next else { return };
        let (path, body, kind) = match job {
            Job::Heartbeat(s) => (
                "/register",
                json!({"session": session(s), "project": "crowd", "status": "idle"}),
                0,
            ),
            Job::Contract { from, to } => {
                let token = state.next_token.fetch_add(1, Ordering::Relaxed);
                state
                    .sent
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(token, Instant::now());
                (
                    "/send",
                    json!({"from": session(from), "to": session(to),
                           "text": format!("contract {token}")}),
                    1,
                )
            }
            Job::Answer { from, to, re } => (
                "/send",
                json!({"from": session(from), "to": session(to), "re": re,
                       "kind": "receipt", "text": format!("done #{re}")}),
                2,
            ),
            Job::Move { seat, card, doing } => (
                "/task/update",
                json!({"id": card, "status": if doing { "doing" } else { "todo" },
                       "by": session(seat), "note": "crowd move"}),
                0,
            ),
        };
        let Some(mut c) = kept_or_new(&mut conn, port, 8 * 1024, &state.counts.write_errors).await
        else {
            continue;
        };
        match c.post(path, &body.to_string()).await {
            Ok(r) if (200..300).contains(&r.status) => {
                state.counts.writes.fetch_add(1, Ordering::Relaxed);
                match kind {
                    1 => state.counts.contracts.fetch_add(1, Ordering::Relaxed),
                    2 => state.counts.answers.fetch_add(1, Ordering::Relaxed),
                    _ => 0,
                };
                conn = Some(c);
            }
            Ok(_) => {
                state.counts.write_errors.fetch_add(1, Ordering::Relaxed);
                conn = Some(c);
            }
            Err(_) => {
                state.counts.write_errors.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Rng;

    #[test]
    fn waits_are_exponential_with_the_asked_mean() {
        let mut r = Rng(42);
        let n = 20_000;
        let total: f64 = (0..n).map(|_| r.exp(2.0).as_secs_f64()).sum();
        let mean = total / n as f64;
        assert!((mean - 2.0).abs() < 0.1, "{mean}");
        assert!((0..1000).all(|_| r.below(7) < 7));
    }
}

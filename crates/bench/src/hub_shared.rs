//! What `trantor bench hub` shares with its PostgreSQL and scaling runs: the options, the
//! sizes, the `/send` load generator and the measurements of a running hub (throughput, the
//! bare-route ceiling, wake latency, a timed restart).

use super::http::Http;
use super::hub_proc::{CpuWindow, HubProc, TempDir, field_i64, health, self_cpu_ns};
use super::{Row, Table};
use anyhow::{Context, Result, bail};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use trantor_store::{Store, StoreError, WriteTx};

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
    /// polls, delivery, restart; with --store: wake, throughput, ledger, restart; with
    /// --scaling: window, sizes); all by default. A name the mode does not measure is refused.
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
    /// Measure hubs on PostgreSQL instead: a `postgres://` URL of a server (the benchmark
    /// creates and drops a scratch database there): /send throughput and wake latency within
    /// one hub and across two hubs on one database, and the contract ledger's share of /send.
    #[arg(long)]
    pub store: Option<String>,
    /// Instead of the bars: each read route's latency at 1k / 100k / 1M stored messages
    /// (+10,000 cards), and with one session holding 1,000 / 200,000 messages in the 24-h
    /// window, on stores seeded directly (docs/bench-hub.md; `--only window` or `--only sizes`
    /// runs one of the two tables).
    #[arg(long, conflicts_with = "store")]
    pub scaling: bool,
    /// Held polls for the held-poll rows (`polls`; default 10,000). Each is a connection of
    /// the bench and one of the hub, so the hard open-file limit must allow twice this many
    /// (`prlimit --nofile=N:N trantor bench hub …`); beyond 20,000 the bench connects from
    /// several loopback source addresses (127.0.0.x).
    #[arg(long, conflicts_with_all = ["store", "scaling"])]
    pub held_polls: Option<usize>,
}

/// The measurements of `trantor bench hub` on the embedded store, by `--only` name.
pub(super) const EMBEDDED_MEASURES: &[&str] = &[
    "wake",
    "idle",
    "throughput",
    "loss",
    "rss",
    "polls",
    "delivery",
    "restart",
];
/// The tables of `trantor bench hub --scaling`, by `--only` name.
pub(super) const SCALING_MEASURES: &[&str] = &["window", "sizes"];
/// The measurements of `trantor bench hub --store postgres://…`, by `--only` name.
pub(super) const POSTGRES_MEASURES: &[&str] = &["wake", "throughput", "ledger", "restart"];

impl HubBenchArgs {
    /// Whether a measurement was asked for (`--only`; every one when it is empty).
    pub(super) fn wants(&self, name: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|o| o == name)
    }

    /// Refuse an `--only` name that `mode`, measuring `known`, does not have: a typo (or a
    /// name of another mode) would otherwise run nothing and print an empty table.
    pub(super) fn check_only(&self, mode: &str, known: &[&str]) -> Result<()> {
        unknown_only(&self.only, mode, known)
    }
}

/// The error for the first of `only` not in `known` (the pure part of
/// [`HubBenchArgs::check_only`]).
fn unknown_only(only: &[String], mode: &str, known: &[&str]) -> Result<()> {
    match only.iter().find(|o| !known.contains(&o.as_str())) {
        None => Ok(()),
        Some(o) => bail!(
            "--only {o}: {mode} has no such measurement (it has: {})",
            known.join(", ")
        ),
    }
}

/// How much of everything to do.
pub(super) struct Sizes {
    pub(super) wake_samples: usize,
    pub(super) idle_pollers: usize,
    pub(super) idle_secs: u64,
    pub(super) throughput_clients: usize,
    /// Clients of the crowded `/send` rows (PostgreSQL): enough that a commit-bound hub's
    /// batches fill, the shape where answering after the commit costs least.
    pub(super) crowd_clients: usize,
    pub(super) throughput_secs: u64,
    pub(super) burst: usize,
    pub(super) rss_messages: i64,
    pub(super) restart_messages: usize,
    pub(super) held_polls: usize,
    pub(super) wake_idle_polls: usize,
    pub(super) wake_rate: u64,
    /// Interleaved rounds of the PostgreSQL ledger-share rows (`--only ledger`); odd, so the
    /// median is a measured rate.
    pub(super) ledger_rounds: usize,
}

impl Sizes {
    pub(super) fn new(quick: bool) -> Sizes {
        if quick {
            Sizes {
                wake_samples: 200,
                idle_pollers: 50,
                idle_secs: 3,
                throughput_clients: 16,
                crowd_clients: 64,
                throughput_secs: 2,
                burst: 12_000,
                rss_messages: 20_000,
                restart_messages: 100_000,
                held_polls: 2_000,
                wake_idle_polls: 1_000,
                wake_rate: 1_000,
                ledger_rounds: 3,
            }
        } else {
            Sizes {
                wake_samples: 1_000,
                idle_pollers: 50,
                idle_secs: 30,
                throughput_clients: 16,
                crowd_clients: 256,
                throughput_secs: 5,
                burst: 12_000,
                rss_messages: 100_000,
                restart_messages: 1_000_000,
                held_polls: 10_000,
                wake_idle_polls: 1_000,
                wake_rate: 1_000,
                ledger_rounds: 5,
            }
        }
    }
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

/// Send as fast as `clients` connections can for `secs` (or, with `per_client_limit`, that
/// many each); each client writes to the next one's session. Returns (sends, seconds).
pub(super) async fn send_load(
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
                c.post("/send", &body.to_string()).await?.ok("/send")?;
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

/// What one wrk run measured.
struct WrkRun {
    requests: usize,
    secs: f64,
    /// wrk's own CPU, ns.
    cpu_ns: u64,
    /// The 99th percentile of the request latencies, seconds.
    p99: f64,
}

/// Run wrk against `POST /send` with `clients` connections for `secs`: client *i* writes to
/// client *i+1*'s session. Fails on any non-2xx reply or socket error.
async fn wrk_send(wrk: &Path, port: u16, clients: usize, secs: u64) -> Result<WrkRun> {
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
        .args(["--latency", "--timeout", "10s", "-s"])
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
    let (requests, secs, p99) = parse_wrk(&text)?;
    Ok(WrkRun {
        requests,
        secs,
        cpu_ns: cpu,
        p99,
    })
}

/// wrk's report (run with `--latency`): (requests, seconds, 99th-percentile latency in
/// seconds); an error when it saw non-2xx replies or socket errors.
fn parse_wrk(text: &str) -> Result<(usize, f64, f64)> {
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
    let requests: usize = line
        .split_whitespace()
        .next()
        .and_then(|w| w.parse().ok())
        .with_context(|| format!("odd wrk line {line:?}"))?;
    let secs: f64 = line
        .split(" requests in ")
        .nth(1)
        .and_then(|r| r.split(',').next())
        .and_then(|d| parse_wrk_duration(d.trim()))
        .with_context(|| format!("odd wrk duration in {line:?}"))?;
    // The latency distribution: "     99%    4.75ms".
    let p99 = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("99%"))
        .and_then(|d| parse_wrk_duration(d.trim()))
        .with_context(|| format!("no 99th percentile in wrk's output:\n{text}"))?;
    Ok((requests, secs, p99))
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
    /// Requests answered with a 2xx in the window.
    pub(super) sends: usize,
    /// Server CPU per request, µs, and cores busy (CPU / wall).
    pub(super) hub_us: f64,
    hub_cores: f64,
    /// Load generator CPU per request, µs, and cores busy.
    client_us: f64,
    client_cores: f64,
    /// The 99th percentile of the request latencies, ms (wrk only; the built-in client keeps
    /// no latencies).
    p99_ms: Option<f64>,
}

impl Throughput {
    pub(super) fn cpu_text(&self) -> String {
        format!(
            "server {:.1} µs ({:.2} cores busy) / load generator {:.1} µs ({:.2} cores busy)",
            self.hub_us, self.hub_cores, self.client_us, self.client_cores
        )
    }

    /// The rate and, when known, the 99th percentile: `8426/s, p99 4.75 ms`.
    pub(super) fn rate_text(&self) -> String {
        match self.p99_ms {
            Some(p) => format!("{:.0}/s, p99 {p:.2} ms", self.rate),
            None => format!("{:.0}/s", self.rate),
        }
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
    throughput_at(port, pid, sizes.throughput_clients, sizes, load).await
}

/// [`throughput`] with `clients` connections instead of the sizes' usual count.
pub(super) async fn throughput_at(
    port: u16,
    pid: u32,
    clients: usize,
    sizes: &Sizes,
    load: &LoadGen,
) -> Result<Throughput> {
    let hub_w = CpuWindow::start(pid)?;
    let (sends, secs, client, p99) = match load {
        LoadGen::Wrk(wrk) => {
            let w = wrk_send(wrk, port, clients, sizes.throughput_secs).await?;
            (w.requests, w.secs, w.cpu_ns, Some(w.p99 * 1e3))
        }
        LoadGen::Builtin => {
            let client0 = self_cpu_ns()?;
            let (sends, secs) = send_load(port, clients, sizes.throughput_secs, None).await?;
            let client = self_cpu_ns()?
                .checked_sub(client0)
                .context("this process's CPU time went backwards")?;
            (sends, secs, client, None)
        }
    };
    let (hub_cpu, _, wall) = hub_w.end()?;
    let n = sends.max(1) as f64;
    let client = client as f64;
    Ok(Throughput {
        secs,
        rate: sends as f64 / secs,
        sends,
        hub_us: hub_cpu as f64 / 1e3 / n,
        hub_cores: hub_cpu as f64 / wall as f64,
        client_us: client / 1e3 / n,
        client_cores: client / wall as f64,
        p99_ms: p99,
    })
}

/// [`throughput`] of a hub just spawned: waited for (healthy within `ready`), measured,
/// stopped.
pub(super) async fn throughput_of(
    mut hub: HubProc,
    ready: Duration,
    sizes: &Sizes,
    load: &LoadGen,
) -> Result<Throughput> {
    hub.wait_healthy(Instant::now(), ready).await?;
    let t = throughput(hub.port, hub.pid(), sizes, load).await?;
    hub.stop()?;
    Ok(t)
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
    let c = throughput_of(
        HubProc::spawn_ceiling(home.path())?,
        Duration::from_secs(20),
        sizes,
        load,
    )
    .await?;
    table.row(Row::info(
        format!(
            "ceiling: bare route (same accept loop, same body decoded, nothing stored), {:.1} s",
            c.secs
        ),
        format!("{:.0} requests/s", c.rate),
    ));
    Ok(c)
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

/// Rows one write carries when a benchmark seeds a store directly.
const PER_WRITE: usize = 2_000;

/// Write rows `0..n` into `store` directly (in-process, no hub), [`PER_WRITE`] rows a write
/// and `in_flight` writes queued at once (queued writes let the writer group them into one
/// commit); `row(tx, i)` writes row `i`.
pub(super) async fn fill_rows<S, F>(store: &S, n: usize, in_flight: usize, row: F) -> Result<()>
where
    S: Store,
    F: Fn(&mut dyn WriteTx, usize) -> Result<(), StoreError> + Clone + Send + 'static,
{
    let starts: Vec<usize> = (0..n).step_by(PER_WRITE).collect();
    for group in starts.chunks(in_flight.max(1)) {
        let writes: Vec<_> = group
            .iter()
            .map(|&from| {
                let row = row.clone();
                let to = (from + PER_WRITE).min(n);
                store.write(move |tx| (from..to).try_for_each(|i| row(tx, i)))
            })
            .collect();
        for w in writes {
            w.await?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{EMBEDDED_MEASURES, POSTGRES_MEASURES, SCALING_MEASURES, parse_wrk, unknown_only};

    #[test]
    fn only_names_a_measurement_of_the_mode() {
        let only = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<Vec<_>>();
        let cases: [(&[&str], &[&str], Option<&str>); 7] = [
            (&[], EMBEDDED_MEASURES, None),
            (&["wake", "restart"], EMBEDDED_MEASURES, None),
            (&["ledger"], POSTGRES_MEASURES, None),
            (&["window"], SCALING_MEASURES, None),
            (&["thruput"], EMBEDDED_MEASURES, Some("--only thruput")),
            // A name of another mode runs nothing here, so it is refused too.
            (&["wake", "idle"], POSTGRES_MEASURES, Some("--only idle")),
            (&["ledger"], EMBEDDED_MEASURES, Some("--only ledger")),
        ];
        for (names, known, refused) in cases {
            let got = unknown_only(&only(names), "this mode", known);
            match refused {
                None => assert!(got.is_ok(), "{names:?}: {got:?}"),
                Some(head) => {
                    let e = got.expect_err("refused").to_string();
                    assert!(e.starts_with(head), "{names:?}: {e}");
                    assert!(e.contains(&known.join(", ")), "{e}");
                }
            }
        }
    }

    const REPORT: &str = "Running 5s test @ http://127.0.0.1:4477/send
  2 threads and 256 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency    20.11ms    5.20ms  99.00ms   90.00%
  Latency Distribution
     50%   19.80ms
     75%   21.00ms
     90%   24.00ms
     99%    1.30s
  63168 requests in 5.00s, 7.83MB read
Requests/sec:  12633.57
";

    #[test]
    fn a_report_gives_its_count_duration_and_99th_percentile() {
        let (n, secs, p99) = parse_wrk(REPORT).unwrap();
        assert_eq!(n, 63_168);
        assert!((secs - 5.0).abs() < 1e-9);
        assert!((p99 - 1.30).abs() < 1e-9, "{p99}");
        let ms = REPORT.replace("1.30s", "812.50us");
        assert!((parse_wrk(&ms).unwrap().2 - 0.000_812_5).abs() < 1e-12);
    }

    #[test]
    fn failures_and_missing_lines_are_errors() {
        let failed = format!("{REPORT}  Non-2xx or 3xx responses: 12\n");
        assert!(parse_wrk(&failed).is_err());
        let no_latency = REPORT.replace("     99%    1.30s\n", "");
        assert!(parse_wrk(&no_latency).is_err());
        assert!(parse_wrk("").is_err());
    }
}

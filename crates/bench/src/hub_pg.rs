//! `trantor bench hub --store postgres://…`: hubs on PostgreSQL, measured like the embedded
//! store: `/send` throughput (16 clients) and wake latency within one hub, and wake latency
//! across two hubs on one database (sent through one, the poll held on the other); and the
//! contract ledger's share of `/send`'s rate (`--only ledger`).
//!
//! The benchmark never touches the database the URL names: it creates a scratch database
//! `trantor_bench_<pid>` on the same server and drops it at the end.

use super::hub_proc::{HubProc, TempDir, percentile};
use super::hub_shared::{
    HubBenchArgs, LoadGen, Sizes, Throughput, ceiling, restarted, throughput, throughput_at,
    throughput_of, wake_between,
};
use super::{Row, Table};
use anyhow::{Context, Result};
use std::time::{Duration, Instant};

/// The scratch database; dropped (with its connections) on drop.
pub(super) struct Scratch {
    admin: String,
    pub(super) name: String,
    pub(super) url: String,
}

/// Split a `postgres://…/db?query` URL into (everything before the database, the query).
pub(super) fn split_url(url: &str) -> Result<(String, String)> {
    let (scheme, rest) = url
        .split_once("://")
        .filter(|(s, _)| *s == "postgres" || *s == "postgresql")
        .context("--store must be a postgres:// URL")?;
    let (rest, query) = match rest.split_once('?') {
        Some((r, q)) => (r, format!("?{q}")),
        None => (rest, String::new()),
    };
    let server = rest.split_once('/').map_or(rest, |(s, _)| s);
    Ok((format!("{scheme}://{server}"), query))
}

impl Scratch {
    /// `trantor_bench_<pid>` on the server of `url`.
    pub(super) async fn create(url: &str) -> Result<Scratch> {
        Self::create_named(url, "").await
    }

    /// `trantor_bench_<pid><suffix>` on the server of `url`.
    async fn create_named(url: &str, suffix: &str) -> Result<Scratch> {
        let (server, query) = split_url(url)?;
        let name = format!("trantor_bench_{}{suffix}", std::process::id());
        let admin = url.to_string();
        let (a, n) = (admin.clone(), name.clone());
        tokio::task::spawn_blocking(move || -> Result<()> {
            let mut c = postgres::Client::connect(&a, postgres::NoTls)
                .context("cannot connect to the --store server")?;
            c.batch_execute(&format!("DROP DATABASE IF EXISTS {n} WITH (FORCE)"))?;
            c.batch_execute(&format!("CREATE DATABASE {n}"))?;
            Ok(())
        })
        .await
        .context("admin task failed")??;
        Ok(Scratch {
            admin,
            url: format!("{server}/{name}{query}"),
            name,
        })
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let (a, n) = (self.admin.clone(), self.name.clone());
        // A plain thread: the blocking client must not run on the async workers.
        let _ = std::thread::spawn(move || {
            if let Ok(mut c) = postgres::Client::connect(&a, postgres::NoTls) {
                let _ = c.batch_execute(&format!("DROP DATABASE IF EXISTS {n} WITH (FORCE)"));
            }
        })
        .join();
    }
}

/// Run the PostgreSQL measurements.
pub async fn run(args: &HubBenchArgs, url: &str) -> Result<Table> {
    let sizes = Sizes::new(args.quick);
    let mut table = Table::default();
    let scratch = Scratch::create(url).await?;
    table.note(format!(
        "store: PostgreSQL, scratch database {} on {}",
        scratch.name,
        trantor_proto::text::mask_url(&split_url(url)?.0)
    ));
    let home_a = TempDir::new("pg-a")?;
    let home_b = TempDir::new("pg-b")?;
    let load = LoadGen::detect();
    table.note(format!("load generator: {}", load.describe()));
    let mut a = spawn_on(&home_a, &scratch.url)?;
    a.wait_healthy(Instant::now(), Duration::from_secs(30))
        .await?;
    let mut b = spawn_on(&home_b, &scratch.url)?;
    b.wait_healthy(Instant::now(), Duration::from_secs(30))
        .await?;
    eprintln!(
        "bench: hubs on PostgreSQL at ports {} and {}",
        a.port, b.port
    );
    if args.wants("wake") {
        wake_rows(&a, &b, &sizes, &mut table).await?;
    }
    if args.wants("throughput") {
        let run = PgRun {
            url,
            scratch: &scratch,
            sizes: &sizes,
            load: &load,
        };
        run.throughput_rows(&a, &b, &mut table).await?;
    }
    a.stop()?;
    b.stop()?;
    if args.wants("ledger") {
        ledger_share_rows(url, &sizes, &load, &mut table).await?;
    }
    if args.wants("restart") {
        restart_rows(&scratch, &home_a, &sizes, &mut table).await?;
    }
    Ok(table)
}

/// A hub (`--sync full`) with its state under `home` and its store the database at `db_url`.
fn spawn_on(home: &TempDir, db_url: &str) -> Result<HubProc> {
    spawn_synced(home, db_url, "full")
}

/// A hub at `--sync <sync>` (`full`: `synchronous_commit = on`; `normal`: `off`) with its state
/// under `home` and its store the database at `db_url`.
fn spawn_synced(home: &TempDir, db_url: &str, sync: &'static str) -> Result<HubProc> {
    let data = home.path().join("data");
    let url = db_url.to_string();
    HubProc::spawn_with(home.path(), move |cmd, _| {
        cmd.arg("hub")
            .env("RELAY_DATA_DIR", data)
            .env("TRANTOR_SYNC", sync)
            .env("RELAY_DATABASE_URL", url);
    })
}

/// Wake latency within hub `a`, then across `a` (the send) and `b` (the held poll).
async fn wake_rows(a: &HubProc, b: &HubProc, sizes: &Sizes, table: &mut Table) -> Result<()> {
    eprintln!(
        "bench: wake latency within one hub ({} samples)…",
        sizes.wake_samples
    );
    let w = wake_between(a.port, a.port, "bench-one", sizes.wake_samples, 0).await?;
    table.row(Row::info(
        format!(
            "PostgreSQL: wake latency within one hub, p50 / p99 ({} samples)",
            w.len()
        ),
        format!(
            "{:.0} µs / {:.0} µs",
            percentile(&w, 0.50),
            percentile(&w, 0.99)
        ),
    ));
    eprintln!(
        "bench: wake latency across two hubs ({} samples)…",
        sizes.wake_samples
    );
    let x = wake_between(a.port, b.port, "bench-two", sizes.wake_samples, 0).await?;
    let p99 = percentile(&x, 0.99);
    table.row(Row::check(
        format!(
            "PostgreSQL: wake latency across two hubs (send on A, poll held on B), p50 / p99 ({} samples)",
            x.len()
        ),
        format!("{:.0} µs / {p99:.0} µs", percentile(&x, 0.50)),
        "p99 < 10 ms",
        p99 < 10_000.0,
    ));
    Ok(())
}

/// What the throughput rows of a PostgreSQL run share: the `--store` URL, the scratch
/// database, the sizes and the load generator.
struct PgRun<'a> {
    url: &'a str,
    scratch: &'a Scratch,
    sizes: &'a Sizes,
    load: &'a LoadGen,
}

impl PgRun<'_> {
    /// `/send` throughput on hub `a`, held against the bare route, the bare group commit and
    /// the original hub's rate; then hubs `a` and `b` writing at once.
    async fn throughput_rows(&self, a: &HubProc, b: &HubProc, table: &mut Table) -> Result<()> {
        let sizes = self.sizes;
        eprintln!("bench: /send throughput on PostgreSQL…");
        let t = throughput(a.port, a.pid(), sizes, self.load).await?;
        table.row(Row::info(
            format!(
                "PostgreSQL: /send throughput, {} clients, {:.1} s, one hub (synchronous_commit on)",
                sizes.throughput_clients, t.secs
            ),
            format!("{:.0} sends/s", t.rate),
        ));
        table.row(Row::info(
            "PostgreSQL: /send CPU per send: hub / bench client",
            t.cpu_text(),
        ));
        // The two limits /send is held against, in the same run: the bare route (HTTP alone)
        // and a bare group commit of the same rows (the store alone).
        let c = ceiling(sizes, self.load, table).await?;
        let g = self.bare_commit_row(table).await?;
        table.row(Row::info(
            "PostgreSQL: /send (synchronous_commit on) against its limits, same run",
            format!(
                "{:.0} % of the ceiling, {:.0} % of the bare group commit",
                t.rate / c.rate.max(1.0) * 100.0,
                t.rate / g.rate.max(1.0) * 100.0
            ),
        ));
        let (normal_t, crowded, held) = self.normal_sync_rate(table).await?;
        let normal = normal_t.rate;
        let original = original_rate(self.url, sizes, self.load, table).await?;
        kept_row(
            sizes,
            (&normal_t, held),
            original.as_ref().map(|o| (&o.0, o.2)),
            table,
        );
        crowd_row(sizes, &crowded, original.as_ref().map(|o| &o.1), table);
        let (want, want_text) = match original.as_ref().map(|o| o.0.rate) {
            Some(r) => (r, format!("≥ the original's {r:.0}/s, same run")),
            None => (4_461.0, "≥ 4,461/s (the original's, issue #24)".to_string()),
        };
        // The original answers before its rows are written (it writes them once a second), so
        // its rate is held against ours at the promise nearest to it: `--sync normal`, answered
        // after the commit but before PostgreSQL flushes its WAL (docs/bench-hub-postgres.md).
        table.row(Row::check(
            "PostgreSQL: /send against the original's rate at the nearest promise (--sync normal)",
            format!(
                "{normal:.0} sends/s ({:.2}× synchronous_commit on)",
                normal / t.rate.max(1.0)
            ),
            &want_text,
            normal >= want,
        ));
        self.two_hubs_row(a, b, table).await
    }

    /// `/send` throughput of a hub at `--sync normal` (`synchronous_commit = off`: a write is
    /// answered after its `COMMIT`, before the WAL reaches the disk; it survives a hub crash,
    /// not a database server crash) on a scratch database of its own, with its row in `table`;
    /// then the same hub's rate with the sizes' crowd of clients.
    async fn normal_sync_rate(&self, table: &mut Table) -> Result<(Throughput, Throughput, i64)> {
        eprintln!("bench: /send throughput on PostgreSQL at --sync normal…");
        let scratch = Scratch::create_named(self.url, "_normal").await?;
        let home = TempDir::new("pg-normal")?;
        let hub = spawn_synced(&home, &scratch.url, "normal")?;
        let (t, crowded, held) = usual_and_crowded(hub, self.sizes, self.load).await?;
        table.row(Row::info(
            format!(
                "PostgreSQL: /send throughput, {} clients, {:.1} s, one hub at --sync normal \
                 (synchronous_commit off: answered after the commit, before the WAL flush)",
                self.sizes.throughput_clients, t.secs
            ),
            format!("{} ({})", t.rate_text(), t.cpu_text()),
        ));
        Ok((t, crowded, held))
    }

    /// A bare group commit of `/send`'s rows on the scratch database, no HTTP (the storage
    /// limit), with its row in `table`.
    async fn bare_commit_row(&self, table: &mut Table) -> Result<super::commit::Commit> {
        eprintln!("bench: bare group commit of /send's rows on PostgreSQL…");
        let db = self.scratch.url.clone();
        let store = tokio::task::spawn_blocking(move || {
            trantor_store_postgres::PgStore::open_with(
                &db,
                trantor_store_postgres::PgOptions {
                    background: false,
                    ..Default::default()
                },
            )
        })
        .await
        .context("open task failed")??;
        let g = super::commit::bare_commit(
            store.clone(),
            self.sizes.throughput_clients,
            self.sizes.throughput_secs,
        )
        .await?;
        tokio::task::spawn_blocking(move || drop(store))
            .await
            .context("close task failed")?;
        table.row(Row::info(
            format!(
                "PostgreSQL: bare group commit of /send's rows (message + stored state + event), \
                 {} writers, {:.1} s, no HTTP (the storage limit)",
                self.sizes.throughput_clients, g.secs
            ),
            format!("{:.0} writes/s", g.rate),
        ));
        Ok(g)
    }

    /// Two hubs writing at once: writes are serialised in the database, so this shows what a
    /// second hub adds (or costs).
    async fn two_hubs_row(&self, a: &HubProc, b: &HubProc, table: &mut Table) -> Result<()> {
        let (ra, rb) = tokio::join!(
            throughput(a.port, a.pid(), self.sizes, self.load),
            throughput(b.port, b.pid(), self.sizes, self.load)
        );
        let (ra, rb) = (ra?, rb?);
        table.row(Row::info(
            format!(
                "PostgreSQL: /send throughput, two hubs at once ({} clients each)",
                self.sizes.throughput_clients
            ),
            format!(
                "{:.0} + {:.0} = {:.0} sends/s",
                ra.rate,
                rb.rate,
                ra.rate + rb.rate
            ),
        ));
        Ok(())
    }
}

/// Restart: `sizes.restart_messages` more messages added server-side, then a hub (on `home`)
/// started on the database and timed to its first read of the newest message.
async fn restart_rows(
    scratch: &Scratch,
    home: &TempDir,
    sizes: &Sizes,
    table: &mut Table,
) -> Result<()> {
    let n = sizes.restart_messages as i64;
    eprintln!("bench: filling the database to {n} messages (server-side)…");
    let filled = Instant::now();
    let newest = fill_server_side(&scratch.url, n).await?;
    table.note(format!(
        "restart: {n} messages added server-side (INSERT … generate_series) in {:.1} s",
        filled.elapsed().as_secs_f64()
    ));
    // The newest row is generate_series' last: g = n, sent to fill-r(n % 200).
    let newest_to = format!("fill-r{}", n % 200);
    let mut r = restarted(|| spawn_on(home, &scratch.url), &newest_to, newest).await?;
    table.row(Row::info(
        format!(
            "PostgreSQL: hub restart with {n} messages, spawn → first /health 200 / \
             first read of the newest message"
        ),
        format!(
            "{:.0} ms / {:.0} ms (/health counts {})",
            r.ready.as_secs_f64() * 1e3,
            r.read_newest.as_secs_f64() * 1e3,
            r.stored
        ),
    ));
    r.hub.stop()
}

/// Add `n` messages to the database at `url` server-side (`generate_series`, one statement per
/// 200 messages, each committed, as a batch of `/send`s is), bring its counters up to date and
/// run a ledger pass over them, so the hub starts on a store whose ledger holds them all, as a
/// running hub's does; returns the newest message id.
async fn fill_server_side(url: &str, n: i64) -> Result<i64> {
    let url = url.to_string();
    tokio::task::spawn_blocking(move || -> Result<i64> {
        let mut c = postgres::Client::connect(&url, postgres::NoTls)?;
        // Alone in its query, so the block may commit.
        c.batch_execute(&format!(
            "DO $$ BEGIN
               FOR k IN 0..({n} - 1) / 200 LOOP
                 INSERT INTO messages(ts, from_s, to_s, project, text)
                   SELECT g, 'fill-s' || (g % 200), 'fill-r' || (g % 200), 'bench',
                          'a benchmark message of roughly the size agents send each other'
                   FROM generate_series(k * 200 + 1, LEAST(k * 200 + 200, {n})) g;
                 COMMIT;
               END LOOP;
             END $$"
        ))?;
        c.batch_execute(
            "UPDATE counters SET n = (SELECT max(id) FROM messages) WHERE name = 'messages_tip';
             UPDATE counters SET n = (SELECT count(*) FROM messages)
               WHERE name = 'messages_count';
             SELECT trantor_ledger_catch_up();
             ANALYZE messages;",
        )?;
        Ok(c.query_one("SELECT max(id) FROM messages", &[])?
            .try_get(0)?)
    })
    .await
    .context("fill task failed")?
}

/// The original JavaScript hub's `/send` rate on PostgreSQL (a scratch database of its own), in
/// the same run, when `TRANTOR_BENCH_ORIGINAL` names its installed package (the directory
/// holding `hub.mjs`, as `tests-compat/install-original.sh` prints it), with the usual clients
/// and with the crowd, and the messages it held after the first; `None` without it.
/// Started as `tests-compat/start-original-hub.sh` starts it, under `node`.
async fn original_rate(
    url: &str,
    sizes: &Sizes,
    load: &LoadGen,
    table: &mut Table,
) -> Result<Option<(Throughput, Throughput, i64)>> {
    let Some(hub_mjs) = original_hub_mjs() else {
        return Ok(None);
    };
    eprintln!(
        "bench: the original hub ({}) on PostgreSQL…",
        hub_mjs.display()
    );
    let scratch = Scratch::create_named(url, "_original").await?;
    let home = TempDir::new("pg-original")?;
    let hub = spawn_original(&hub_mjs, &home, &scratch.url)?;
    let (t, crowded, held) = usual_and_crowded(hub, sizes, load).await?;
    table.row(Row::info(
        format!(
            "PostgreSQL: the original hub's /send throughput (npm trantor, {}), {} clients, {:.1} s, \
             same run (it answers before its store commits: rows are written every second)",
            hub_mjs.display(),
            sizes.throughput_clients,
            t.secs
        ),
        format!("{} ({})", t.rate_text(), t.cpu_text()),
    ));
    Ok(Some((t, crowded, held)))
}

/// The original hub's `hub.mjs`, when `TRANTOR_BENCH_ORIGINAL` names its installed package.
fn original_hub_mjs() -> Option<std::path::PathBuf> {
    std::env::var_os("TRANTOR_BENCH_ORIGINAL").map(|pkg| std::path::Path::new(&pkg).join("hub.mjs"))
}

/// The original hub (`hub_mjs`, under `node`) with its state under `home` and its store the
/// database at `db_url`.
fn spawn_original(hub_mjs: &std::path::Path, home: &TempDir, db_url: &str) -> Result<HubProc> {
    let (data, db) = (home.path().join("data"), db_url.to_string());
    HubProc::spawn_program(home.path(), std::path::Path::new("node"), |cmd, _| {
        cmd.arg(hub_mjs)
            .env("RELAY_DATA_DIR", data)
            .env("RELAY_DATABASE_URL", db);
    })
}

/// What one round of the ledger-share rows measures.
enum LedgerVariant {
    /// Our hub as built.
    Built,
    /// Our hub on a database whose ledger passes do nothing.
    NoLedger,
    /// The original hub: its `hub.mjs` (when `TRANTOR_BENCH_ORIGINAL` names its package).
    Original(std::path::PathBuf),
}

impl LedgerVariant {
    fn name(&self) -> &'static str {
        match self {
            LedgerVariant::Built => "ours as built",
            LedgerVariant::NoLedger => "ours without the ledger",
            LedgerVariant::Original(_) => "the original",
        }
    }
}

/// The contract ledger's share of `/send`'s rate (docs/bench-hub-postgres.md, "What the rest
/// of the gap is"): a `--sync normal` hub as built, the same hub on a database whose ledger
/// passes do nothing (a diagnostic, not a setting: its `/contracts` stay empty), and the
/// original when it is installed, in interleaved rounds, each on a fresh scratch database, so
/// a change in the machine's speed weighs on all of them alike. Reports the medians.
async fn ledger_share_rows(
    url: &str,
    sizes: &Sizes,
    load: &LoadGen,
    table: &mut Table,
) -> Result<()> {
    let mut variants = vec![LedgerVariant::Built, LedgerVariant::NoLedger];
    variants.extend(original_hub_mjs().map(LedgerVariant::Original));
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); variants.len()];
    for round in 1..=sizes.ledger_rounds {
        for (i, v) in variants.iter().enumerate() {
            eprintln!(
                "bench: the ledger's share, round {round}/{}: {}…",
                sizes.ledger_rounds,
                v.name()
            );
            let scratch = Scratch::create_named(url, "_ledger").await?;
            let home = TempDir::new("pg-ledger")?;
            let mut hub = match v {
                LedgerVariant::Original(mjs) => spawn_original(mjs, &home, &scratch.url)?,
                LedgerVariant::Built | LedgerVariant::NoLedger => {
                    spawn_synced(&home, &scratch.url, "normal")?
                }
            };
            if matches!(v, LedgerVariant::NoLedger) {
                // The schema exists once the hub answers.
                hub.wait_healthy(Instant::now(), Duration::from_secs(30))
                    .await?;
                // Every ledger pass finds nothing to do.
                execute(
                    &scratch.url,
                    "CREATE OR REPLACE FUNCTION trantor_ledger_catch_up() RETURNS BIGINT
                     LANGUAGE sql AS 'SELECT 0::BIGINT'",
                )
                .await?;
            }
            let t = throughput_of(hub, Duration::from_secs(30), sizes, load).await?;
            rates[i].push(t.rate);
        }
    }
    let medians: Vec<f64> = rates
        .iter()
        .map(|r| {
            let mut sorted = r.clone();
            sorted.sort_by(f64::total_cmp);
            percentile(&sorted, 0.5)
        })
        .collect();
    let list = |r: &[f64]| {
        r.iter()
            .map(|x| format!("{x:.0}"))
            .collect::<Vec<_>>()
            .join(" · ")
    };
    let (built, bare) = (medians[0], medians[1]);
    table.row(Row::info(
        format!(
            "PostgreSQL: /send as built and with the contract ledger's passes emptied (a \
             diagnostic, not a setting), --sync normal, {} clients, {} interleaved rounds, medians",
            sizes.throughput_clients, sizes.ledger_rounds
        ),
        format!(
            "as built {built:.0}/s ({}), without the ledger {bare:.0}/s ({}): the ledger is \
             {:.0} % of a send's time",
            list(&rates[0]),
            list(&rates[1]),
            (1.0 - built / bare.max(1.0)) * 100.0
        ),
    ));
    if let Some(&orig) = medians.get(2) {
        table.row(Row::info(
            "PostgreSQL: the same rounds against the original hub (answered before it writes)",
            format!(
                "the original {orig:.0}/s ({}): as built {:.2}× its rate, without the ledger {:.2}×",
                list(&rates[2]),
                built / orig.max(1.0),
                bare / orig.max(1.0)
            ),
        ));
    }
    Ok(())
}

/// Run `sql` on the database at `url`.
async fn execute(url: &str, sql: &str) -> Result<()> {
    let (url, sql) = (url.to_string(), sql.to_string());
    tokio::task::spawn_blocking(move || -> Result<()> {
        let mut c = postgres::Client::connect(&url, postgres::NoTls)
            .context("cannot connect to the scratch database")?;
        c.batch_execute(&sql)
            .with_context(|| format!("cannot run {sql:?}"))
    })
    .await
    .context("SQL task failed")?
}

/// A hub just spawned, waited for (healthy within 30 s), measured with the usual clients and
/// then with the crowd, and stopped.
async fn usual_and_crowded(
    mut hub: HubProc,
    sizes: &Sizes,
    load: &LoadGen,
) -> Result<(Throughput, Throughput, i64)> {
    hub.wait_healthy(Instant::now(), Duration::from_secs(30))
        .await?;
    let t = throughput(hub.port, hub.pid(), sizes, load).await?;
    let held = held_messages(hub.port).await?;
    eprintln!("bench: … and with {} clients", sizes.crowd_clients);
    let crowded = throughput_at(hub.port, hub.pid(), sizes.crowd_clients, sizes, load).await?;
    hub.stop()?;
    Ok((t, crowded, held))
}

/// The messages a hub says it holds (`/health`'s `messages`): after a run from an empty
/// store, what it kept of the sends it acknowledged.
async fn held_messages(port: u16) -> Result<i64> {
    let mut c = super::http::Http::connect(port).await?;
    super::hub_proc::field_i64(&super::hub_proc::health(&mut c).await?, "messages")
}

/// What each hub kept of the `/send`s it acknowledged in its 16-client run from an empty store
/// (`/health`'s `messages` right after): ours every one; the original keeps a window of the
/// newest and drops the rest, read or not, so its rate is not the cost of keeping them all.
fn kept_row(
    sizes: &Sizes,
    ours: (&Throughput, i64),
    original: Option<(&Throughput, i64)>,
    table: &mut Table,
) {
    let kept = |(t, held): (&Throughput, i64)| {
        format!(
            "{held} of {} acknowledged ({:.0} %)",
            t.sends,
            held as f64 / t.sends.max(1) as f64 * 100.0
        )
    };
    let result = match original {
        Some(o) => format!("ours {} / the original {}", kept(ours), kept(o)),
        None => format!("ours {}", kept(ours)),
    };
    table.row(Row::info(
        format!(
            "PostgreSQL: messages held after the {}-client run (/health), of those acknowledged: \
             ours at --sync normal{}",
            sizes.throughput_clients,
            if original.is_some() {
                " and the original, same run"
            } else {
                ""
            }
        ),
        result,
    ));
}

/// The crowded rows: `/send` with the sizes' crowd of clients, ours at `--sync normal` beside
/// the original when it ran. With that many clients waiting, our writer's batches fill, so
/// answering only after the commit costs the least it can; the original answers before it
/// writes, so its rate stays and its tail grows instead (docs/bench-hub-postgres.md).
fn crowd_row(sizes: &Sizes, ours: &Throughput, original: Option<&Throughput>, table: &mut Table) {
    let (beside, result) = match original {
        Some(o) => (
            " and the original (answered before it writes), same run",
            format!(
                "ours {} / the original {}: {:.2}× its rate",
                ours.rate_text(),
                o.rate_text(),
                ours.rate / o.rate.max(1.0)
            ),
        ),
        None => ("", format!("ours {}", ours.rate_text())),
    };
    table.row(Row::info(
        format!(
            "PostgreSQL: /send with {} clients, {:.1} s, ours at --sync normal (answered after the \
             commit){beside}",
            sizes.crowd_clients, ours.secs
        ),
        result,
    ));
}

#[cfg(test)]
mod tests {
    use super::split_url;

    #[test]
    fn urls_split_at_the_database() {
        let (s, q) = split_url("postgres://u:p@h:5432/db?sslmode=disable").expect("url");
        assert_eq!(s, "postgres://u:p@h:5432");
        assert_eq!(q, "?sslmode=disable");
        let (s, q) = split_url("postgresql://h").expect("url");
        assert_eq!((s.as_str(), q.as_str()), ("postgresql://h", ""));
        assert!(split_url("mysql://h/db").is_err());
    }
}

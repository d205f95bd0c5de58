//! `trantor bench hub --store postgres://…`: hubs on PostgreSQL, measured like the embedded
//! store: `/send` throughput (16 clients) and wake latency within one hub, and wake latency
//! across two hubs on one database (sent through one, the poll held on the other).
//!
//! The benchmark never touches the database the URL names: it creates a scratch database
//! `trantor_bench_<pid>` on the same server and drops it at the end.

use super::http::Http;
use super::hub::{
    HubBenchArgs, HubProc, Sizes, TempDir, field_i64, health, percentile, wake_between,
};
use super::{Row, Table};
use anyhow::{Context, Result, bail};
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
    let spawn = |home: &TempDir| {
        let data = home.path().join("data");
        let url = scratch.url.clone();
        HubProc::spawn_with(home.path(), move |cmd, _| {
            cmd.arg("hub")
                .env("RELAY_DATA_DIR", data)
                .env("TRANTOR_SYNC", "full")
                .env("RELAY_DATABASE_URL", url);
        })
    };
    let load = super::hub::LoadGen::detect();
    table.note(format!("load generator: {}", load.describe()));
    let mut a = spawn(&home_a)?;
    a.wait_healthy(Instant::now(), Duration::from_secs(30))
        .await?;
    let mut b = spawn(&home_b)?;
    b.wait_healthy(Instant::now(), Duration::from_secs(30))
        .await?;
    eprintln!(
        "bench: hubs on PostgreSQL at ports {} and {}",
        a.port, b.port
    );

    if args.wants_pg("wake") {
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
    }

    if args.wants_pg("throughput") {
        eprintln!("bench: /send throughput on PostgreSQL…");
        let t = super::hub::throughput(a.port, a.pid(), &sizes, &load).await?;
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
        let c = super::hub::ceiling(&sizes, &load, &mut table).await?;
        eprintln!("bench: bare group commit of /send's rows on PostgreSQL…");
        let db = scratch.url.clone();
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
            sizes.throughput_clients,
            sizes.throughput_secs,
        )
        .await?;
        tokio::task::spawn_blocking(move || drop(store))
            .await
            .context("close task failed")?;
        table.row(Row::info(
            format!(
                "PostgreSQL: bare group commit of /send's rows (message + stored state + event), \
                 {} writers, {:.1} s, no HTTP (the storage limit)",
                sizes.throughput_clients, g.secs
            ),
            format!("{:.0} writes/s", g.rate),
        ));
        let original = original_rate(url, &sizes, &load, &mut table).await?;
        let (want, want_text) = match original {
            Some(r) => (r, format!("≥ the original's {r:.0}/s, same run")),
            None => (4_461.0, "≥ 4,461/s (the original's, issue #24)".to_string()),
        };
        table.row(Row::check(
            "PostgreSQL: /send against the original's rate (docs/bench-hub-postgres.md)",
            format!(
                "{:.0} % of the ceiling, {:.0} % of the bare group commit",
                t.rate / c.rate.max(1.0) * 100.0,
                t.rate / g.rate.max(1.0) * 100.0
            ),
            &want_text,
            t.rate >= want,
        ));
        // Two hubs writing at once: writes are serialised in the database, so this shows what
        // a second hub adds (or costs).
        let (ra, rb) = tokio::join!(
            super::hub::throughput(a.port, a.pid(), &sizes, &load),
            super::hub::throughput(b.port, b.pid(), &sizes, &load)
        );
        let (ra, rb) = (ra?, rb?);
        table.row(Row::info(
            format!(
                "PostgreSQL: /send throughput, two hubs at once ({} clients each)",
                sizes.throughput_clients
            ),
            format!(
                "{:.0} + {:.0} = {:.0} sends/s",
                ra.rate,
                rb.rate,
                ra.rate + rb.rate
            ),
        ));
    }
    a.stop()?;
    b.stop()?;

    if args.wants_pg("restart") {
        let n = sizes.restart_messages as i64;
        eprintln!("bench: filling the database to {n} messages (server-side)…");
        let url = scratch.url.clone();
        let filled = Instant::now();
        let newest = tokio::task::spawn_blocking(move || -> Result<i64> {
            let mut c = postgres::Client::connect(&url, postgres::NoTls)?;
            c.batch_execute(&format!(
                "INSERT INTO messages(ts, from_s, to_s, project, text)
                   SELECT g, 'fill-s' || (g % 200), 'fill-r' || (g % 200), 'bench',
                          'a benchmark message of roughly the size agents send each other'
                   FROM generate_series(1, {n}) g;
                 UPDATE counters SET n = (SELECT max(id) FROM messages) WHERE name = 'messages_tip';
                 UPDATE counters SET n = (SELECT count(*) FROM messages)
                   WHERE name = 'messages_count';
                 ANALYZE messages;"
            ))?;
            Ok(c.query_one("SELECT max(id) FROM messages", &[])?
                .try_get(0)?)
        })
        .await
        .context("fill task failed")??;
        table.note(format!(
            "restart: {n} messages added server-side (INSERT … generate_series) in {:.1} s",
            filled.elapsed().as_secs_f64()
        ));
        let t0 = Instant::now();
        let mut hub = spawn(&home_a)?;
        let ready = hub.wait_healthy(t0, Duration::from_secs(60)).await?;
        let mut c = Http::connect(hub.port).await?;
        // The newest row is generate_series' last: g = n, sent to fill-r(n % 200).
        let newest_to = format!("fill-r{}", n % 200);
        let read_newest = loop {
            let page = c
                .get(&format!(
                    "/inbox?session={newest_to}&since={}&peek=1",
                    newest - 1
                ))
                .await?
                .json()?;
            if page["messages"]
                .as_array()
                .is_some_and(|a| a.iter().any(|m| m["id"].as_i64() == Some(newest)))
            {
                let tip = field_i64(&health(&mut c).await?, "messages")?;
                break (t0.elapsed(), tip);
            }
            if t0.elapsed() > Duration::from_secs(60) {
                bail!("no message readable 60 s after the restart");
            }
        };
        table.row(Row::info(
            format!(
                "PostgreSQL: hub restart with {n} messages, spawn → first /health 200 / \
                 first read of the newest message"
            ),
            format!(
                "{:.0} ms / {:.0} ms (/health counts {})",
                ready.as_secs_f64() * 1e3,
                read_newest.0.as_secs_f64() * 1e3,
                read_newest.1
            ),
        ));
        hub.stop()?;
    }
    Ok(table)
}

/// The original JavaScript hub's `/send` rate on PostgreSQL (a scratch database of its own), in
/// the same run, when `TRANTOR_BENCH_ORIGINAL` names its installed package (the directory
/// holding `hub.mjs`, as `tests-compat/install-original.sh` prints it); `None` without it.
/// Started as `tests-compat/start-original-hub.sh` starts it, under `node`.
async fn original_rate(
    url: &str,
    sizes: &Sizes,
    load: &super::hub::LoadGen,
    table: &mut Table,
) -> Result<Option<f64>> {
    let Some(pkg) = std::env::var_os("TRANTOR_BENCH_ORIGINAL") else {
        return Ok(None);
    };
    let hub_mjs = std::path::Path::new(&pkg).join("hub.mjs");
    eprintln!(
        "bench: the original hub ({}) on PostgreSQL…",
        hub_mjs.display()
    );
    let scratch = Scratch::create_named(url, "_original").await?;
    let home = TempDir::new("pg-original")?;
    let (data, db) = (home.path().join("data"), scratch.url.clone());
    let mut hub = HubProc::spawn_program(home.path(), std::path::Path::new("node"), |cmd, _| {
        cmd.arg(&hub_mjs)
            .env("RELAY_DATA_DIR", data)
            .env("RELAY_DATABASE_URL", db);
    })?;
    hub.wait_healthy(Instant::now(), Duration::from_secs(30))
        .await?;
    let t = super::hub::throughput(hub.port, hub.pid(), sizes, load).await?;
    hub.stop()?;
    table.row(Row::info(
        format!(
            "PostgreSQL: the original hub's /send throughput (npm trantor, {}), {} clients, {:.1} s, \
             same run (it answers before its store commits: rows are written every second)",
            hub_mjs.display(),
            sizes.throughput_clients,
            t.secs
        ),
        format!("{:.0} sends/s ({})", t.rate, t.cpu_text()),
    ));
    Ok(Some(t.rate))
}

impl HubBenchArgs {
    /// Whether a measurement was asked for (`--only`), by the names the PostgreSQL run knows.
    fn wants_pg(&self, name: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|o| o == name)
    }
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

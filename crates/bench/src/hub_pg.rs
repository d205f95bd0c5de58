//! `trantor bench hub --store postgres://…`: hubs on PostgreSQL, measured like the embedded
//! store: `/send` throughput (16 clients) and wake latency within one hub, and wake latency
//! across two hubs on one database (sent through one, the poll held on the other).
//!
//! The benchmark never touches the database the URL names: it creates a scratch database
//! `trantor_bench_<pid>` on the same server and drops it at the end.

use super::http::Http;
use super::hub::{HubBenchArgs, HubProc, Sizes, TempDir, field_i64, health, percentile};
use super::{Row, Table};
use anyhow::{Context, Result, bail};
use serde_json::json;
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
    pub(super) async fn create(url: &str) -> Result<Scratch> {
        let (server, query) = split_url(url)?;
        let name = format!("trantor_bench_{}", std::process::id());
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

/// Wake latency across hubs: `/send` to `send_port` → the `/poll` held on `poll_port` returns,
/// µs, sorted. With one port it is the within-hub latency.
async fn wake_across(
    send_port: u16,
    poll_port: u16,
    samples: usize,
    session: &str,
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
        let w = wake_across(a.port, a.port, sizes.wake_samples, "bench-one").await?;
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
        let x = wake_across(a.port, b.port, sizes.wake_samples, "bench-two").await?;
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
        eprintln!("bench: bare-route ceiling…");
        let ceiling_home = TempDir::new("pg-ceiling")?;
        let mut ceiling = HubProc::spawn_ceiling(ceiling_home.path())?;
        ceiling
            .wait_healthy(Instant::now(), Duration::from_secs(20))
            .await?;
        let c = super::hub::throughput(ceiling.port, ceiling.pid(), &sizes, &load).await?;
        ceiling.stop()?;
        table.row(Row::info(
            format!(
                "ceiling: bare route (same accept loop, same body decoded, nothing stored), {:.1} s",
                c.secs
            ),
            format!("{:.0} requests/s", c.rate),
        ));
        eprintln!("bench: bare group commit of /send's rows on PostgreSQL…");
        let url = scratch.url.clone();
        let store = tokio::task::spawn_blocking(move || {
            trantor_store_postgres::PgStore::open_with(
                &url,
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
        table.row(Row::check(
            "PostgreSQL: /send against the original's rate in the same minute (its 4,461/s, \
             docs/bench-hub-postgres.md)",
            format!(
                "{:.0} % of the ceiling, {:.0} % of the bare group commit",
                t.rate / c.rate.max(1.0) * 100.0,
                t.rate / g.rate.max(1.0) * 100.0
            ),
            "≥ 4,461/s",
            t.rate >= 4_461.0,
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

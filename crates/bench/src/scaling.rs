//! `trantor bench hub --scaling`: each read route's latency as the store grows.
//!
//! For every size, a fresh store is seeded directly through [`SqliteStore`] (in-process, big
//! write batches: fast) with that many messages, one `message` event per message (as `/send`
//! writes them) and a fixed 10,000 cards; then the real hub is started on it and each route is
//! timed over keep-alive requests. A route whose cost is flat has a 1M / 1k ratio near 1.

use super::http::Http;
use super::hub_proc::{HubProc, TempDir, percentile};
use super::hub_shared::fill_rows;
use super::{Row, Table};
use anyhow::{Context, Result, bail};
use serde_json::{Map, Value, json};
use std::path::Path;
use std::time::{Duration, Instant};
use trantor_proto::Card;
use trantor_store::{NewEvent, NewMessage, Store, StoreError, WriteTx};
use trantor_store_sqlite::SqliteStore;

/// Cards seeded at every size.
const CARDS: usize = 10_000;
/// Sessions the seeded messages are spread over: session *i* writes to session *i+1*, so
/// every session both sends and receives (as crew members do).
const SESSIONS: usize = 50;
/// Seeded traffic: this many messages a day, so a store of any size has the same number in
/// the last 24 h (the `/contracts` window) and more history behind it.
const PER_DAY: i64 = 1_000;

/// Seed `path` with `messages` messages (each with its `message` event) and [`CARDS`] cards.
async fn seed(path: &Path, messages: usize) -> Result<()> {
    let store = SqliteStore::open(path)?;
    let now = trantor_proto::now_ms();
    store
        .write(move |tx| {
            for i in 0..CARDS {
                tx.insert_card(Card {
                    project: "bench".into(),
                    title: format!("card {i}"),
                    status: if i % 3 == 0 { "doing" } else { "todo" }.into(),
                    assignee: format!("fill-s{}", i % SESSIONS),
                    by: format!("fill-s{}", (i + 1) % SESSIONS),
                    ts: now,
                    updated: now,
                    ..Card::default()
                })?;
            }
            Ok(())
        })
        .await?;
    let step = 86_400_000 / PER_DAY;
    let base_ts = now - messages as i64 * step;
    fill_rows(&store, messages, 4, move |tx, i| {
        insert_sent(
            tx,
            base_ts + i as i64 * step,
            format!("fill-s{}", i % SESSIONS),
            format!("fill-s{}", (i + 1) % SESSIONS),
            format!("fill message {i}: status, a question, card #12"),
            &[12],
        )
    })
    .await?;
    drop(store);
    Ok(())
}

/// Insert a message as `/send` writes it: the message and its `message` event, `refs` the
/// cards it cites.
fn insert_sent(
    tx: &mut dyn WriteTx,
    ts: i64,
    from: String,
    to: String,
    text: String,
    refs: &[i64],
) -> Result<(), StoreError> {
    let msg = tx.insert_message(
        NewMessage {
            ts,
            from: from.clone(),
            to: to.clone(),
            project: "bench".into(),
            text: text.clone(),
            ..Default::default()
        },
        refs,
    )?;
    let mut data = Map::new();
    data.insert("msgId".into(), json!(msg.id));
    data.insert("toSession".into(), json!(to));
    data.insert("text".into(), json!(text));
    if !refs.is_empty() {
        data.insert("refs".into(), json!(refs));
    }
    tx.insert_event(NewEvent {
        ts,
        kind: "message".into(),
        project: "bench".into(),
        by: from,
        task_id: None,
        refs: refs.to_vec(),
        data,
    })?;
    Ok(())
}

/// The routes timed, as (label, path) with `{tip}` replaced by the newest message id.
fn routes(tip: i64) -> Vec<(&'static str, String)> {
    vec![
        (
            "/poll (nothing new, wait=0)",
            format!("/poll?session=fill-s7&since={tip}&wait=0"),
        ),
        (
            "/inbox (peek, last 200 ids)",
            format!("/inbox?session=fill-s7&since={}&peek=1", tip - 200),
        ),
        ("/contracts", "/contracts?session=fill-s7".to_string()),
        (
            "/tasks (10,000 cards, slim)",
            "/tasks?fields=slim".to_string(),
        ),
        ("/card (cited by every message)", "/card?id=12".to_string()),
        ("/events (newest 50)", "/events?limit=50".to_string()),
        ("/peers", "/peers".to_string()),
        ("/health", "/health".to_string()),
    ]
}

/// Median latency of each route (µs), in [`routes`] order.
async fn time_routes(port: u16, tip: i64, samples: usize) -> Result<Vec<(f64, f64)>> {
    let mut c = Http::connect(port).await?;
    let mut out = Vec::new();
    for (label, path) in routes(tip) {
        let (p50, p99, _) = time_route(&mut c, label, &path, samples).await?;
        out.push((p50, p99));
    }
    Ok(out)
}

/// One route's median and p99 latency (µs) over `samples` keep-alive requests after 3 warm-up
/// ones, and its reply's size in bytes; any answer but 200 fails, naming `label`.
async fn time_route(
    c: &mut Http,
    label: &str,
    path: &str,
    samples: usize,
) -> Result<(f64, f64, usize)> {
    // Warm: the first read of a route pulls its pages into the cache.
    let mut bytes = 0;
    for _ in 0..3 {
        let r = c.get(path).await?;
        r.ok(label)?;
        bytes = r.body.len();
    }
    let mut lat = Vec::with_capacity(samples);
    for _ in 0..samples {
        let t = Instant::now();
        let r = c.get(path).await?;
        lat.push(t.elapsed().as_secs_f64() * 1e6);
        r.ok(label)?;
    }
    lat.sort_by(f64::total_cmp);
    Ok((percentile(&lat, 0.5), percentile(&lat, 0.99), bytes))
}

/// Two hubs' median and p99 latency (µs) and reply size for the same route (`paths[i]` on
/// `clients[i]`), their requests alternated (and which goes first alternated too) over
/// `samples` rounds after 3 warm-up requests each: what slows the machine meanwhile slows both.
async fn time_route_pair(
    clients: &mut [Http; 2],
    label: &str,
    paths: [&str; 2],
    samples: usize,
) -> Result<[(f64, f64, usize); 2]> {
    let mut bytes = [0; 2];
    for (i, c) in clients.iter_mut().enumerate() {
        for _ in 0..3 {
            let r = c.get(paths[i]).await?;
            r.ok(label)?;
            bytes[i] = r.body.len();
        }
    }
    let mut lat = [Vec::with_capacity(samples), Vec::with_capacity(samples)];
    for round in 0..samples {
        for k in 0..2 {
            let i = (round + k) % 2;
            let t = Instant::now();
            let r = clients[i].get(paths[i]).await?;
            lat[i].push(t.elapsed().as_secs_f64() * 1e6);
            r.ok(label)?;
        }
    }
    Ok([0, 1].map(|i| {
        lat[i].sort_by(f64::total_cmp);
        (
            percentile(&lat[i], 0.5),
            percentile(&lat[i], 0.99),
            bytes[i],
        )
    }))
}

/// Run the scaling table: sizes 1k / 100k / 1M messages (quick: 1k / 10k / 100k).
pub async fn run(quick: bool, table: &mut Table) -> Result<()> {
    let sizes: &[usize] = if quick {
        &[1_000, 10_000, 100_000]
    } else {
        &[1_000, 100_000, 1_000_000]
    };
    let samples = if quick { 50 } else { 200 };
    let mut results: Vec<Vec<(f64, f64)>> = Vec::new();
    for &n in sizes {
        eprintln!("bench: scaling: seeding {n} messages + {CARDS} cards…");
        let home = TempDir::new("scaling")?;
        let data = home.path().join("data");
        let t0 = Instant::now();
        seed(&data.join("hub.db"), n).await?;
        eprintln!(
            "bench: scaling: seeded in {:.1} s; timing the routes…",
            t0.elapsed().as_secs_f64()
        );
        let mut hub = HubProc::spawn(&data, home.path(), "full")?;
        hub.wait_healthy(Instant::now(), Duration::from_secs(60))
            .await?;
        let mut c = Http::connect(hub.port).await?;
        let h: Value = c.get("/health").await?.json()?;
        let stored = h["messages"].as_i64().context("no message count")?;
        if stored != n as i64 {
            bail!("the hub counts {stored} messages, {n} were seeded");
        }
        results.push(time_routes(hub.port, n as i64, samples).await?);
        hub.stop()?;
    }
    let label = |n: usize| match n {
        n if n >= 1_000_000 => format!("{}M", n / 1_000_000),
        n if n >= 1_000 => format!("{}k", n / 1_000),
        n => n.to_string(),
    };
    let first = sizes[0];
    let last = sizes[sizes.len() - 1];
    for (i, (route, _)) in routes(0).iter().enumerate() {
        let cells: Vec<String> = sizes
            .iter()
            .zip(&results)
            .map(|(n, r)| format!("{}: {:.0} µs (p99 {:.0})", label(*n), r[i].0, r[i].1))
            .collect();
        let ratio = results[results.len() - 1][i].0 / results[0][i].0.max(1.0);
        table.row(Row::check(
            format!("{route}: median latency by stored messages"),
            format!(
                "{}; {}/{} = {ratio:.2}×",
                cells.join(", "),
                label(last),
                label(first)
            ),
            "≤ 2× of 1k",
            ratio <= 2.0,
        ));
    }
    table.note(format!(
        "scaling: each size a fresh store seeded in-process ({CARDS} cards, one `message` event \
         per message, {SESSIONS} sessions each writing to the next, {PER_DAY} messages a day so \
         the last 24 h hold the same traffic at every size), the hub started on it, {samples} \
         keep-alive requests per route after 3 warm-up requests"
    ));
    Ok(())
}

/// The dispatcher of the window table.
const ORCH: &str = "orch:bench";
/// Workers it dispatches to.
const WORKERS: usize = 50;

/// Seed `path` with `messages` messages of one dispatcher, all inside the last 24 h: of every
/// four, three are its contracts to a worker and one a worker's plain reply (so a third of the
/// contracts are answered, the rest stay open), each with its `message` event. `live`: the
/// workers are registered and were seen now (so their open contracts are waiting, stalled or
/// superseded, not abandoned, and every read splits them).
async fn seed_window(path: &Path, messages: usize, live: bool) -> Result<()> {
    let store = SqliteStore::open(path)?;
    let now = trantor_proto::now_ms();
    if live {
        store
            .write(move |tx| {
                for w in 0..WORKERS {
                    tx.put_peer(&trantor_proto::Peer {
                        session: format!("w{w}:bench"),
                        project: "bench".into(),
                        last_seen: now,
                        status: "working".into(),
                        ..trantor_proto::Peer::default()
                    })?;
                }
                Ok(())
            })
            .await?;
    }
    // Spread over the last 20 h, oldest first.
    let step = (20 * 3_600_000 / messages.max(1) as i64).max(1);
    let base_ts = now - messages as i64 * step;
    fill_rows(&store, messages, 1, move |tx, i| {
        let worker = format!("w{}:bench", (i / 4) % WORKERS);
        let (sender, recipient) = if i % 4 == 1 {
            (worker, ORCH.to_string())
        } else {
            (ORCH.to_string(), worker)
        };
        insert_sent(
            tx,
            base_ts + i as i64 * step,
            sender,
            recipient,
            format!("window message {i}: do the next step of #12"),
            &[],
        )
    })
    .await?;
    drop(store);
    Ok(())
}

/// The routes of the window table (`{tip}`: the newest id).
fn window_routes(tip: i64) -> Vec<(&'static str, String)> {
    vec![
        (
            "/contracts (default page)",
            format!("/contracts?session={ORCH}"),
        ),
        (
            "/contracts (limit=50)",
            format!("/contracts?session={ORCH}&limit=50"),
        ),
        ("/catchup (peek)", format!("/catchup?session={ORCH}&peek=1")),
        (
            "/poll (nothing new, wait=0)",
            format!("/poll?session={ORCH}&since={tip}&wait=0"),
        ),
        (
            "/inbox (peek, last 200 ids)",
            format!("/inbox?session={ORCH}&since={}&peek=1", tip - 200),
        ),
        ("/recent", "/recent".to_string()),
        ("/events (newest 50)", "/events?limit=50".to_string()),
        ("/peers", "/peers".to_string()),
        ("/health", "/health".to_string()),
    ]
}

/// The routes the window table measures again with the workers live (the ledger's).
const LIVE_ROUTES: usize = 3;

/// The window table: one dispatcher holding 1,000 and 200,000 messages in the 24-h window
/// (quick: 20,000), its workers never seen and then live; every read route within 2× of its
/// 1,000-message cost. Both sizes' hubs run at once and every route's requests alternate
/// between them, so a change in the machine's speed during the run weighs on both alike.
pub async fn run_window(quick: bool, table: &mut Table) -> Result<()> {
    let sizes: [usize; 2] = if quick {
        [1_000, 20_000]
    } else {
        [1_000, 200_000]
    };
    let samples = if quick { 50 } else { 200 };
    for live in [false, true] {
        let routes = if live { LIVE_ROUTES } else { usize::MAX };
        let who = if live { "live" } else { "never-seen" };
        let mut homes = Vec::new();
        let mut hubs = Vec::new();
        for n in sizes {
            eprintln!("bench: scaling: one session, {n} messages in the window, {who} workers…");
            let home = TempDir::new("window")?;
            let data = home.path().join("data");
            seed_window(&data.join("hub.db"), n, live).await?;
            let mut hub = HubProc::spawn(&data, home.path(), "full")?;
            hub.wait_healthy(Instant::now(), Duration::from_secs(60))
                .await?;
            homes.push(home);
            hubs.push(hub);
        }
        eprintln!("bench: scaling: the window routes, {who} workers, both sizes alternated…");
        let mut clients = [
            Http::connect(hubs[0].port).await?,
            Http::connect(hubs[1].port).await?,
        ];
        let paths = sizes.map(|n| window_routes(n as i64));
        for (i, (route, _)) in paths[0].iter().take(routes).enumerate() {
            let [a, b] = time_route_pair(
                &mut clients,
                route,
                [&paths[0][i].1, &paths[1][i].1],
                samples,
            )
            .await?;
            let ratio = b.0 / a.0.max(1.0);
            let live_note = if live { ", live workers" } else { "" };
            table.row(Row::check(
                format!(
                    "{route}: one session, {} vs {} messages in the window{live_note}",
                    sizes[1], sizes[0]
                ),
                format!(
                    "{:.0} µs (p99 {:.0}, {} B) → {:.0} µs (p99 {:.0}, {} B) = {ratio:.2}×",
                    a.0, a.1, a.2, b.0, b.1, b.2
                ),
                "≤ 2×",
                ratio <= 2.0,
            ));
        }
        for (n, c) in sizes.iter().zip(clients.iter_mut()) {
            let l: Value = c.get(&format!("/contracts?session={ORCH}")).await?.json()?;
            table.note(format!(
                "window {n}, {who} workers: /contracts counts total {}, answered {}, abandoned \
                 {}, superseded {}, open {} (waiting {}, stalled {}); {} rows on the first \
                 page, nextCursor {}",
                l["total"],
                l["answered"],
                l["abandoned"],
                l["superseded"],
                l["open"],
                l["waiting"],
                l["stalled"],
                [
                    "contracts",
                    "abandonedContracts",
                    "supersededContracts",
                    "ackContracts"
                ]
                .iter()
                .filter_map(|k| l[*k].as_array().map(Vec::len))
                .sum::<usize>(),
                l["nextCursor"]
            ));
        }
        for h in &mut hubs {
            h.stop()?;
        }
        drop(homes);
    }
    table.note(format!(
        "window table: one dispatcher ({ORCH}), {WORKERS} workers, first never registered (all \
         their open contracts abandoned), then registered and seen at the start (live: every \
         read splits their open contracts into superseded, stalled and waiting); of every four \
         messages three are its contracts and one a worker's plain reply, spread over the last \
         20 h; {samples} keep-alive requests per route and size after 3 warm-up requests, both \
         sizes' hubs running at once and each route's requests alternating between them"
    ));
    Ok(())
}

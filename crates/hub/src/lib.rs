//! The trantor hub: the message bus, presence and card board that crews of agents talk to.
//!
//! HTTP/JSON (axum) over a [`Store`]; the routes are wire-compatible with the JavaScript hub's
//! core so its runner and MCP server work unchanged. In-process parts that are never persisted:
//! the wake registry ([`wake`]), the presence cache ([`presence`]), the SSE feed ([`sse`]),
//! metrics, and the in-flight `_op` set.
//!
//! # Layout
//!
//! Four layers, from the top; a module names only its own module and those drawn below it (in
//! its layer or a lower one), so no two modules import each other. `tests/layers.rs` fails when
//! an import goes up, when files of one folder import each other in a circle, or when this
//! drawing, the test's list and docs/architecture.md §8 disagree.
//!
//! ```text
//! lib.rs        run / serve: open the store, bind, build the router, accept, shut down cleanly
//! [http]        requests in, replies out
//!   routes/     one file per route family; each handler parses its typed request from
//!               proto, calls the rules in domain/ over one store transaction, and answers
//!               with proto's typed reply; `mod.rs` holds the table and the router's layers
//!   sse         the event feed (`/stream`)
//!   openapi     /openapi.json, generated from proto's types and the route table
//!   ui/         the dashboard's page and assets
//!   auth/       signed identity: the verification layer in front of the routes, enrollment
//!               and invites, the key records, optional TLS
//!   ops         the outermost checks (host, origin, head size, metrics) and `_op` idempotency
//!   extract     the request body read once (`ReadBody`), the JSON and query extractors
//!   front       the plain-HTTP front: request heads read here, held polls parked outside
//!               hyper, every other request handed to hyper one at a time
//!   conn        one connection's busy count, and the router as a hyper service that keeps it
//! [periodic]    work on a timer, on the hub holding the lease
//!   reaper      presence sweep, stale cards, abandoned contracts, retention
//!   overseer    collision watching: two sessions on one project, or on one file
//!   duty        the duty pass: unread mail escalated once
//!   cluster     the periodic-work lease over a shared store
//!   trim        freed heap handed back to the system once the hub goes quiet
//! [domain]      the rules, plain code over a store transaction
//!   domain/     cards and the drill gate, verification gates, the dispatch ledger and open
//!               contracts, the delivery record, file claims, named credentials, who is on
//!               duty, the policy and project aliases
//! [core]        what every layer shares
//!   state       the shared state every handler gets (`AppState`): store, caches, metrics;
//!               the kv documents (`KvDoc`)
//!   config      the hub's one clap struct and what it resolves to, the auth mode
//!   presence    the presence cache
//!   wake        the held-poll wake registry
//!   metrics     the counters behind /metrics
//!   error       `ApiError`, the one error reply; the checks of request text fields
//! ```
//!
//! The store is reached only through [`trantor_store::Store`]; wire shapes come from
//! `trantor_proto`.

pub mod auth;
pub mod cluster;
pub mod config;
mod conn;
pub mod domain;
pub mod duty;
pub mod error;
pub mod extract;
mod front;
pub mod metrics;
pub mod openapi;
pub mod ops;
pub mod overseer;
pub mod presence;
pub mod reaper;
pub mod routes;
pub mod sse;
pub mod state;
pub mod trim;
pub mod ui;
pub mod wake;

pub use config::{Config, ConfigError, HubArgs, SyncLevel};

use anyhow::Context as _;
use conn::{ConnSlot, Tracked};
use metrics::Metrics;
use presence::Presence;
use state::Hub;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::net::TcpListener;
use tokio::sync::{broadcast, watch};
use trantor_proto::now_ms;
use trantor_store::Store;
use trantor_store_sqlite::SqliteStore;
use wake::WakeRegistry;

/// SSE frames buffered per stream before a slow reader is told it lagged.
const FEED_CAPACITY: usize = 4096;

/// Run the hub until SIGINT or SIGTERM: validate the configuration (refusing non-loopback
/// binds), open the store (the SQLite file under the data directory, or PostgreSQL with
/// `--store`), bind, and serve.
pub async fn run(args: HubArgs) -> anyhow::Result<()> {
    run_with(args, None).await
}

/// A service a binary serves beside the hub's routes under `path`, built once the hub listens
/// (so it knows the hub's own URL). The hub crate knows nothing of what it serves: `trantor hub`
/// mounts its MCP endpoint this way, since the MCP server lives in a crate above the hub.
pub struct Mount {
    /// Where it is served (the path and everything below it).
    pub path: &'static str,
    /// Builds the service.
    pub build: Box<dyn FnOnce(&MountContext) -> axum::Router + Send>,
}

/// What a [`Mount`] is built from.
#[derive(Clone)]
pub struct MountContext {
    /// The hub's own base URL (`http://127.0.0.1:4477`), for calls back into its routes.
    pub url: String,
    /// The hub's signature mode.
    pub auth: auth::AuthMode,
    /// Flips to true when the hub shuts down: long-lived streams must end then.
    pub shutdown: watch::Receiver<bool>,
    /// Resolves a bearer token to its live record (docs/protocol.md §2.6).
    pub tokens: trantor_proto::auth::TokenResolver,
    /// Every event the hub commits, as it commits it (the feed `/stream?events=1` reads).
    pub events: tokio::sync::broadcast::Sender<Arc<trantor_proto::Event>>,
}

impl std::fmt::Debug for MountContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MountContext")
            .field("url", &self.url)
            .field("auth", &self.auth)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for Mount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mount").field("path", &self.path).finish()
    }
}

/// [`run`] with an extra service mounted beside the hub's routes.
pub async fn run_with(args: HubArgs, mount: Option<Mount>) -> anyhow::Result<()> {
    let cfg = Config::from_args(&args)?;
    if let Some(url) = cfg.store_url.clone() {
        // Several hubs may share the database: bind first so the lease label names this one.
        let listener = bind(&cfg).await?;
        let addr = listener.local_addr().context("listener has no address")?;
        let opts = trantor_store_postgres::PgOptions {
            sync_full: cfg.sync == SyncLevel::Full,
            node: format!("trantor-hub {addr} pid {}", std::process::id()),
            ..Default::default()
        };
        let store = tokio::task::spawn_blocking(move || {
            trantor_store_postgres::PgStore::open_with(&url, opts)
        })
        .await
        .context("store open task failed")??;
        return serve_with(listener, store, cfg, shutdown_signal(), mount).await;
    }
    std::fs::create_dir_all(&cfg.data_dir)
        .with_context(|| format!("cannot create data directory {}", cfg.data_dir.display()))?;
    let db = cfg.db_path();
    // Opening runs migrations and reads the schema; keep it off the async workers.
    let opts = trantor_store_sqlite::SqliteOptions {
        sync_full: cfg.sync == SyncLevel::Full,
        ..Default::default()
    };
    let store = tokio::task::spawn_blocking(move || SqliteStore::open_with(&db, opts))
        .await
        .context("store open task failed")??;
    let listener = bind(&cfg).await?;
    serve_with(listener, store, cfg, shutdown_signal(), mount).await
}

/// Bind the listening socket, with a clear message when the port is taken.
pub async fn bind(cfg: &Config) -> anyhow::Result<TcpListener> {
    match TcpListener::bind((cfg.host.as_str(), cfg.port)).await {
        Ok(l) => Ok(l),
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => anyhow::bail!(
            "port {} on {} is already in use (is another hub running? set RELAY_PORT to use \
             another port)",
            cfg.port,
            cfg.host
        ),
        Err(e) => Err(e).with_context(|| format!("cannot listen on {}:{}", cfg.host, cfg.port)),
    }
}

/// Build the shared state over an opened store (loads the peer rows to seed presence).
pub async fn state<S: Store>(
    store: S,
    cfg: Config,
    shutdown: watch::Receiver<bool>,
) -> anyhow::Result<state::AppState<S>> {
    let peers = store
        .read(|tx| tx.peers())
        .await
        .context("cannot read peers from the store")?;
    let presence = Presence::new(cfg.online_ms, &peers, now_ms());
    let (feed, _) = broadcast::channel(FEED_CAPACITY);
    Ok(Arc::new(Hub {
        store,
        cfg,
        wake: WakeRegistry::new(),
        presence,
        feed,
        metrics: Metrics::default(),
        ops_in_flight: Mutex::new(HashMap::new()),
        shutdown,
        last_write_error: Mutex::new(None),
        started_ms: now_ms(),
        auth: auth::AuthState::default(),
    }))
}

/// Serve on `listener` until `shutdown` resolves; then end held polls and streams, finish
/// in-flight requests and flush presence.
///
/// Connections are served by our own accept loop rather than `axum::serve`, for the limits a
/// hostile client needs: request headers must arrive within `header_timeout` (which also closes
/// idle keep-alive connections), and at most `max_connections` are served at once — below the
/// file-descriptor limit, so `accept` never fails with "too many open files". On plain HTTP a
/// small front reads each request head first, so a held `/poll` costs a few KB instead of
/// hyper's per-connection buffers and the router's futures (see `front.rs`).
pub async fn serve<S: Store>(
    listener: TcpListener,
    store: S,
    cfg: Config,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    serve_with(listener, store, cfg, shutdown, None).await
}

/// [`serve`] with an extra service mounted beside the hub's routes (see [`Mount`]).
pub async fn serve_with<S: Store>(
    listener: TcpListener,
    store: S,
    cfg: Config,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    mount: Option<Mount>,
) -> anyhow::Result<()> {
    let cap = connection_cap(cfg.max_connections);
    let header_timeout = cfg.header_timeout;
    let tls = match &cfg.tls {
        Some((cert, key)) => Some(auth::tls::acceptor(cert, key)?),
        None => None,
    };
    let (stop_tx, stop_rx) = watch::channel(false);
    let hub = state(store, cfg, stop_rx.clone()).await?;
    reaper::spawn(hub.clone());
    duty::spawn(hub.clone());
    overseer::spawn(hub.clone());
    cluster::spawn(hub.clone());
    trim::spawn(hub.clone());
    ring_at_shutdown(&hub, stop_rx.clone());
    let addr = listener.local_addr().context("listener has no address")?;
    let scheme = if tls.is_some() { "https" } else { "http" };
    let mounted = mount.map(|m| {
        let resolver_hub = hub.clone();
        let tokens: trantor_proto::auth::TokenResolver = Arc::new(move |token: String| {
            let hub = resolver_hub.clone();
            Box::pin(async move { auth::resolve_token(&hub, &token).await.ok().flatten() })
        });
        let (events, _) = tokio::sync::broadcast::channel(4096);
        let forward = events.clone();
        let mut feed = hub.feed.subscribe();
        let mut stop = stop_rx.clone();
        tokio::spawn(async move {
            use tokio::sync::broadcast::error::RecvError;
            loop {
                tokio::select! {
                    item = feed.recv() => match item {
                        Ok(state::FeedItem::Event(e)) => {
                            let _ = forward.send(e);
                        }
                        Ok(_) | Err(RecvError::Lagged(_)) => {}
                        Err(RecvError::Closed) => return,
                    },
                    _ = stop.changed() => return,
                }
            }
        });
        let ctx = MountContext {
            url: format!("{scheme}://{addr}"),
            auth: hub.cfg.auth,
            shutdown: stop_rx.clone(),
            tokens,
            events,
        };
        routes::Mounted {
            path: m.path,
            router: (m.build)(&ctx),
        }
    });
    let app = routes::router_with(hub.clone(), mounted);
    tracing::info!(
        url = %format!("{scheme}://{addr}"),
        auth = hub.cfg.auth.as_str(),
        store = %hub.store.describe(),
        sync = hub.store.synchronous(),
        max_connections = cap,
        "trantor hub listening on {scheme}://{addr}"
    );
    accept_loop(listener, app, tls, cap, header_timeout, &stop_tx, shutdown).await;
    reaper::flush_presence(&hub).await;
    tracing::info!("hub stopped");
    Ok(())
}

/// When the hub stops, wake every held poll: each looks once more, sees the hub stopping and
/// answers (a poll's driver waits only for wake-ups, its deadline and its client).
fn ring_at_shutdown<S: Store>(hub: &state::AppState<S>, mut stop: watch::Receiver<bool>) {
    let hub = hub.clone();
    tokio::spawn(async move {
        // The flag flips before the ring, and a hold checks it after arming: none sleeps on.
        if stop.wait_for(|s| *s).await.is_ok() {
            hub.wake.ring_everyone();
        }
    });
}

/// Accept and serve connections with `app` until `shutdown` resolves, then stop accepting,
/// flip `stop_tx` to true (held polls and streams answer, connections finish) and wait for
/// every connection to end (TLS when given an acceptor). The hub and the benchmark's bare-route
/// ceiling ([`ceiling_router`]) share it, so the ceiling is measured on the hub's server stack.
async fn accept_loop(
    listener: TcpListener,
    app: axum::Router,
    tls: Option<tokio_rustls::TlsAcceptor>,
    cap: usize,
    header_timeout: std::time::Duration,
    stop_tx: &watch::Sender<bool>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let front = Arc::new(front::Front {
        app,
        header_timeout,
        stop: stop_tx.subscribe(),
    });
    let gauge = Arc::new(ConnGauge::default());
    let conns = Arc::new(Conns::default());
    // Every connection task holds a clone; `recv` returns `None` once all have ended.
    let (alive_tx, mut alive_rx) = tokio::sync::mpsc::channel::<()>(1);
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            r = listener.accept() => match r {
                Ok((s, _)) => s,
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning; the cap makes it rare.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        // At the cap, the oldest connection with no request in flight (one that never sent a
        // whole request head, or an idle keep-alive) is closed to admit this one; when every
        // connection is busy, this one is refused. The cap stays below the file limit, so the
        // accept itself never runs out of descriptors.
        if gauge.live() >= cap && !conns.shed_oldest_idle() {
            tracing::debug!(
                cap,
                "connection cap reached and every connection busy: refused"
            );
            drop(stream);
            continue;
        }
        let _ = stream.set_nodelay(true);
        let front = front.clone();
        let alive = alive_tx.clone();
        let tls = tls.clone();
        let gauge = gauge.clone();
        let conns = conns.clone();
        let (key, slot) = conns.add();
        gauge.opened();
        tokio::spawn(async move {
            let _alive = alive;
            let _registered = Registered { conns, key };
            match tls {
                None => front::serve_plain(stream, front, slot).await,
                // Boxed: the TLS session is large, and an inline branch would make every plain
                // connection's task (a held poll's, too) as large as a TLS one.
                Some(tls) => {
                    Box::pin(async move {
                        // The handshake gets the same deadline as a request head.
                        match tokio::time::timeout(header_timeout, tls.accept(stream)).await {
                            Ok(Ok(s)) => {
                                let (app, stop) = (front.app.clone(), front.stop.clone());
                                serve_conn(s, app, front.header_timeout, stop, slot).await
                            }
                            Ok(Err(e)) => tracing::debug!(error = %e, "TLS handshake failed"),
                            Err(_) => tracing::debug!("TLS handshake timed out"),
                        }
                    })
                    .await
                }
            }
            if gauge.closed() {
                tokio::task::spawn_blocking(release_free_memory);
            }
        });
    }
    tracing::info!("shutting down: answering held polls, closing streams");
    drop(listener);
    let _ = stop_tx.send(true);
    drop(alive_tx);
    let _ = alive_rx.recv().await;
}

/// The live connections in the order they were accepted, for shedding the oldest idle one.
#[derive(Debug, Default)]
struct Conns {
    next: std::sync::atomic::AtomicU64,
    live: Mutex<std::collections::BTreeMap<u64, Arc<ConnSlot>>>,
}

impl Conns {
    fn add(&self) -> (u64, Arc<ConnSlot>) {
        let key = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let slot = Arc::new(ConnSlot::default());
        self.lock().insert(key, slot.clone());
        (key, slot)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, std::collections::BTreeMap<u64, Arc<ConnSlot>>> {
        self.live
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Tell the oldest connection with no request in flight to close; `false` when every
    /// connection is busy.
    fn shed_oldest_idle(&self) -> bool {
        let mut live = self.lock();
        let idle = live
            .iter()
            .find(|(_, s)| s.busy.load(std::sync::atomic::Ordering::Acquire) == 0)
            .map(|(k, _)| *k);
        match idle.and_then(|k| live.remove(&k)) {
            Some(slot) => {
                slot.shed.notify_one();
                true
            }
            None => false,
        }
    }
}

/// Removes a connection from [`Conns`] when its task ends.
struct Registered {
    conns: Arc<Conns>,
    key: u64,
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.conns.lock().remove(&self.key);
    }
}

/// Open connections, and their high-water mark since freed memory was last handed back.
#[derive(Debug, Default)]
struct ConnGauge {
    live: std::sync::atomic::AtomicUsize,
    peak: std::sync::atomic::AtomicUsize,
}

/// A burst of at least this many connections (held polls, mostly) that has mostly ended gets
/// its freed memory handed back to the OS (docs/bench-hub.md, "Held polls").
const TRIM_BURST: usize = 1_000;

impl ConnGauge {
    fn live(&self) -> usize {
        self.live.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn opened(&self) {
        use std::sync::atomic::Ordering::Relaxed;
        let n = self.live.fetch_add(1, Relaxed) + 1;
        self.peak.fetch_max(n, Relaxed);
    }

    /// Count a closed connection; `true` (for one caller) when a burst of [`TRIM_BURST`] or
    /// more has shrunk to a quarter, i.e. when there is freed memory worth handing back.
    fn closed(&self) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        let n = self.live.fetch_sub(1, Relaxed).saturating_sub(1);
        let peak = self.peak.load(Relaxed);
        peak >= TRIM_BURST
            && n <= peak / 4
            && self
                .peak
                .compare_exchange(peak, n, Relaxed, Relaxed)
                .is_ok()
    }
}

/// Hand freed heap memory back to the OS. glibc keeps what a burst of connections freed in
/// its arenas (the heap is returned — a counting allocator sees it — but the process's
/// resident memory is not); `malloc_trim` releases the free pages.
fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks glibc's own free lists; it takes the arena locks itself
    // and touches no memory the program owns.
    unsafe {
        nix::libc::malloc_trim(0);
    }
}

/// A router with one route, `POST /send`, that decodes the same JSON body as the hub's `/send`
/// (with the same extractor) and answers `{"ok":true,"id":0}` without storing anything: the
/// ceiling `trantor bench hub` holds the real `/send` against (docs/bench-hub.md). `GET /health`
/// answers `{"ok":true}` for the readiness check.
pub fn ceiling_router() -> axum::Router {
    use axum::routing::{get, post};
    async fn parse_only(
        extract::JsonBody(req): extract::JsonBody<trantor_proto::SendRequest>,
    ) -> axum::Json<trantor_proto::SendReply> {
        // Touch the decoded fields so the decode cannot be optimised away.
        let id = i64::from(req.text.is_empty() && req.from.is_empty());
        axum::Json(trantor_proto::SendReply { ok: true, id })
    }
    axum::Router::new().route("/send", post(parse_only)).route(
        "/health",
        get(|| async { axum::Json(serde_json::json!({"ok": true})) }),
    )
}

/// Serve `app` on `listener` with the hub's accept loop (connection cap from the file limit,
/// header timeout) until `shutdown` resolves. For the benchmark's ceiling server.
pub async fn serve_router(
    listener: TcpListener,
    app: axum::Router,
    header_timeout: std::time::Duration,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let cap = connection_cap(0);
    let (stop_tx, _) = watch::channel(false);
    accept_loop(listener, app, None, cap, header_timeout, &stop_tx, shutdown).await;
}

/// Serve one connection (plain or TLS) until it ends or the hub stops.
async fn serve_conn<I>(
    io: I,
    app: axum::Router,
    header_timeout: std::time::Duration,
    mut stop: watch::Receiver<bool>,
    slot: Arc<ConnSlot>,
) where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service = Tracked {
        inner: hyper_util::service::TowerToHyperService::new(app),
        slot: slot.clone(),
    };
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(header_timeout)
        .serve_connection(hyper_util::rt::TokioIo::new(io), service);
    let mut conn = std::pin::pin!(conn);
    loop {
        tokio::select! {
            r = conn.as_mut() => {
                if let Err(e) = r {
                    tracing::debug!(error = %e, "connection ended with an error");
                }
                break;
            }
            // Shed at the connection cap: with no request in flight, dropping it loses
            // nothing. One whose request began since it was picked is served on.
            _ = slot.shed.notified() => {
                if slot.busy.load(std::sync::atomic::Ordering::Acquire) == 0 {
                    tracing::debug!("idle connection shed at the cap");
                    break;
                }
            }
            _ = async { stop.wait_for(|s| *s).await.map(|_| ()) } => {
                conn.as_mut().graceful_shutdown();
                let _ = conn.await;
                break;
            }
        }
    }
}

/// File descriptors kept free for the store, logs and the listener itself.
const FD_RESERVE: u64 = 128;

/// The connection cap: `configured` when set, else the soft file-descriptor limit (first
/// raised to the hard limit) minus a reserve.
pub fn connection_cap(configured: usize) -> usize {
    if configured > 0 {
        return configured;
    }
    let soft = raise_fd_limit();
    usize::try_from(soft.saturating_sub(FD_RESERVE).clamp(16, 1 << 20)).unwrap_or(1 << 20)
}

/// Raise the soft `RLIMIT_NOFILE` to the hard limit and return the resulting soft limit.
fn raise_fd_limit() -> u64 {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return 1024;
    };
    // Some kernels refuse "unlimited" for files; 1M is plenty.
    let want = hard.min(1 << 20);
    if want > soft {
        match setrlimit(Resource::RLIMIT_NOFILE, want, hard) {
            Ok(()) => {
                tracing::info!(from = soft, to = want, "raised the open-file limit");
                return want;
            }
            Err(e) => tracing::warn!(error = %e, soft, "cannot raise the open-file limit"),
        }
    } else {
        tracing::info!(limit = soft, "open-file limit");
    }
    soft
}

/// Resolves on SIGINT (Ctrl-C) or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::warn!(error = %e, "cannot listen for Ctrl-C");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
}

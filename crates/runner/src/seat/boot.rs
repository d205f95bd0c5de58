//! Boot (docs/runner.md §3): the seat worktree, the boot row, lessons, the cursor from the
//! hub's tip (history is never replayed), the booting `/register` and the ready announce, the
//! restored queue, then a kickoff — or, on a release boot, the restart notice instead.

use crate::config::Config;
use crate::hub::bus::Bus;
use crate::hub::hubio::HubReads;
use crate::periphery::docker::DockerJanitor;
use crate::periphery::release::{self, ReleaseState, ReleaseWatcher};
use crate::periphery::worktree;
use crate::seat::fence::{SeatLock, Taken};
use crate::seat::ledger::{self, Ledger};
use crate::seat::machine::SeatMachine;
use crate::seat::pending::{Owner, Pending};
use crate::seat::turnrec::TurnRecord;
use crate::seat::{
    CliSession, Delivery, Fencing, HUB_BACKOFF_START, Health, HubLink, Seat, Workspace,
};
use crate::sys::paths::Paths;
use crate::sys::{fsx, gitx};
use crate::turn::drivers::Driver;
use std::time::Duration;
use trantor_proto::backoff::Backoff;
use trantor_proto::enroll;
use trantor_proto::{HubClient, Signer};

/// The stop signals (SIGTERM, SIGINT, SIGHUP), listened to from the moment of installing.
pub struct Shutdown {
    signals: Option<[tokio::signal::unix::Signal; 3]>,
}

impl Shutdown {
    /// Install the handlers now.
    pub fn install() -> Shutdown {
        use tokio::signal::unix::{SignalKind, signal};
        let signals = match (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
            signal(SignalKind::hangup()),
        ) {
            (Ok(t), Ok(i), Ok(h)) => Some([t, i, h]),
            _ => {
                // Without handlers the default actions still stop the process.
                tracing::warn!("could not install signal handlers");
                None
            }
        };
        Shutdown { signals }
    }

    /// Wait for a stop signal; returns its name.
    pub async fn wait(&mut self) -> &'static str {
        let Some([term, int, hup]) = self.signals.as_mut() else {
            return std::future::pending().await;
        };
        tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
            _ = hup.recv() => "SIGHUP",
        }
    }
}

/// The hub's tip, retried with a bounded back-off while the hub is unreachable: starting from 0
/// would replay the whole history as wakes.
async fn tip(reads: &HubReads, backoff_max: Duration) -> i64 {
    let mut backoff = Backoff::new(Duration::from_secs(1), backoff_max);
    let mut said = false;
    loop {
        if let Some(c) = reads.tip().await {
            if said {
                tracing::info!("hub answers — starting at cursor {c}");
            }
            return c;
        }
        if !said {
            tracing::warn!(
                "hub {} unreachable at boot — waiting for it before taking the cursor",
                reads.hub.base()
            );
            said = true;
        }
        backoff.sleep().await;
    }
}

/// A swap's staged replacement (docs/runner.md §22, normal boots only): announce the staging identity, say
/// ready through `<stage>.ready`, and wait (up to 120 s) for `<stage>.release`, whose cursor
/// this seat starts from. `None` when no swap is staged.
async fn await_swap_release(hub: &HubClient, cfg: &Config) -> anyhow::Result<Option<i64>> {
    let Some(stage) = cfg.swap_stage.as_deref() else {
        return Ok(None);
    };
    // The resolved project (not the raw variable, which may be unset) and a file-safe label.
    let project = cfg.project.clone();
    let staging = format!("{}:{project}", cfg.swap_label);
    let reg = trantor_proto::RegisterRequest {
        session: staging.clone(),
        project: Some(project),
        status: Some("replacement ready; awaiting handoff".into()),
        kind: Some("agent".into()),
        ..Default::default()
    };
    if let Err(e) = hub
        .clone()
        .with_timeout(Duration::from_secs(8))
        .register(&reg)
        .await
    {
        tracing::warn!("swap: registering {staging} failed: {e}");
    }
    let ready = serde_json::json!({"pid": std::process::id(), "session": staging});
    fsx::write_atomic(
        std::path::Path::new(&format!("{stage}.ready")),
        ready.to_string().as_bytes(),
    )?;
    tracing::info!("swap: staged as {staging} — waiting for {stage}.release");
    let release = std::path::PathBuf::from(format!("{stage}.release"));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    let text = loop {
        if let Ok(t) = std::fs::read_to_string(&release) {
            break t;
        }
        if tokio::time::Instant::now() >= deadline {
            anyhow::bail!("swap handoff timed out: no {stage}.release within 120 s");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let v: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| anyhow::anyhow!("swap release {} is not JSON: {e}", release.display()))?;
    let named = v.get("agent").and_then(|a| a.as_str()).unwrap_or("");
    if cfg.swap_stage.is_some()
        && let Some(want) = cfg.swap_agent.as_deref()
        && named != want
    {
        anyhow::bail!("swap release names a different seat ({named}, not {want})");
    }
    Ok(Some(v.get("cursor").and_then(|c| c.as_i64()).unwrap_or(0)))
}

/// The seat's signer: its durable key (created on first use), enrolled on the hub when the hub
/// answers 401 (docs/runner.md §3). A hub that cannot be reached yet does not stop the seat: the
/// enrollment is retried in the background until the hub answers.
async fn enroll_seat_key(cfg: &Config) -> anyhow::Result<Signer> {
    let key = trantor_proto::keys::load_or_create(&cfg.bus_dir, &cfg.session, "agent")?;
    match enroll::ensure_enrolled(&cfg.hub_url, &cfg.bus_dir, &key, &cfg.enroll).await {
        Ok(how) => tracing::debug!("seat key {}: {how:?}", key.pubkey()),
        Err(enroll::EnrollError::Unreachable(e)) if e.is_unreachable() => {
            tracing::warn!("enrollment waits for the hub: {e}");
            let (hub, bus, k, opts) = (
                cfg.hub_url.clone(),
                cfg.bus_dir.clone(),
                key.clone(),
                cfg.enroll.clone(),
            );
            let max = Duration::from_millis(cfg.hub_backoff_max_ms);
            tokio::spawn(async move {
                let mut wait = Backoff::new(Duration::from_millis(500), max);
                loop {
                    tokio::time::sleep(wait.current()).await;
                    match enroll::ensure_enrolled(&hub, &bus, &k, &opts).await {
                        Err(enroll::EnrollError::Unreachable(_)) => wait.grow(),
                        Err(e) => {
                            tracing::error!("{e}");
                            return;
                        }
                        Ok(_) => return,
                    }
                }
            });
        }
        Err(e) => return Err(e.into()),
    }
    Ok(Signer::Durable(std::sync::Arc::new(key)))
}

/// One runner per seat (docs/runner.md §24.1): the seat lock, taken before anything touches
/// the seat's files; a stale or taken-over holder is said.
async fn take_seat_lock(
    cfg: &Config,
    paths: &Paths,
    instance: &str,
) -> anyhow::Result<(SeatLock, Taken)> {
    let seat_lock = {
        let (path, session, inst, take_over) = (
            paths.seat_lock.clone(),
            cfg.session.clone(),
            instance.to_string(),
            cfg.take_over,
        );
        tokio::task::spawn_blocking(move || {
            SeatLock::acquire(&path, &session, &inst, take_over, Duration::from_secs(10))
        })
        .await??
    };
    match &seat_lock.1 {
        Taken::Fresh => {}
        Taken::Stale(h) => tracing::info!(
            "seat lock: runner pid {} (instance {}) is gone — its lock was stale; taken",
            h.pid,
            h.instance
        ),
        Taken::TookOver(h) => tracing::warn!(
            "seat lock: took the seat over from runner pid {} (instance {})",
            h.pid,
            h.instance
        ),
    }
    Ok(seat_lock)
}

/// Where the seat's turns run: its own worktree (docs/runner.md §20), else the project
/// directory, said once; whether that is a git repository, a linked worktree, and its common
/// git directory.
async fn prepare_workspace(
    cfg: &Config,
) -> (std::path::PathBuf, bool, bool, Option<std::path::PathBuf>) {
    let (dir, bus_dir, project, persona) = (
        cfg.dir.clone(),
        cfg.bus_dir.clone(),
        cfg.project.clone(),
        cfg.persona.clone(),
    );
    let no_worktree = cfg.no_worktree;
    let turn_dir = match tokio::task::spawn_blocking(move || {
        if no_worktree {
            tracing::info!("TRANTOR_NO_WORKTREE — turns run in {}", dir.display());
            return Ok(dir);
        }
        worktree::ensure_seat_worktree(&dir, &bus_dir, &project, &persona)
    })
    .await
    {
        Ok(Ok(d)) => d,
        Ok(Err(e)) => {
            tracing::warn!("seat worktree: {e:#} — turns run in {}", cfg.dir.display());
            cfg.dir.clone()
        }
        Err(e) => {
            tracing::warn!("seat worktree: {e} — turns run in {}", cfg.dir.display());
            cfg.dir.clone()
        }
    };
    let in_git = gitx::is_repo(&turn_dir).await;
    let canon = |p: &std::path::Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    let in_worktree = in_git && canon(&turn_dir) != canon(&cfg.dir);
    let git_common = if in_git {
        gitx::common_dir(&turn_dir).await
    } else {
        None
    };

    (turn_dir, in_git, in_worktree, git_common)
}

impl Seat {
    /// After the seat is assembled: its cursor and pending queue from disk (or a swap's or a
    /// self-restart's state), the boot broadcast, a predecessor's turn adopted, the restored
    /// wakes claimed, then the kickoff (or the restart notice).
    async fn restore(&mut self, rs: Option<ReleaseState>, swap_cursor: Option<i64>) {
        let (restored, corrupt) = Pending::load(&self.paths.pending);
        let saved = crate::seat::adopt::load_cursor(&self.paths.cursor);
        self.delivery.cursor = match (&rs, swap_cursor, saved) {
            (Some(s), _, _) => s.cursor,
            (None, Some(c), _) => c,
            // A seat that ran before resumes where it stopped, so what was sent while it was down
            // is not skipped (docs/runner.md §24.4); with its queue unreadable, from the oldest
            // wake the queue owed (turns that completed are never run again).
            (None, None, Some((cursor, floor))) => {
                let from = if corrupt.is_some() { floor } else { cursor };
                self.delivery.replay_upto = cursor;
                tracing::info!("resuming at cursor {from} from the previous run");
                from
            }
            (None, None, None) => {
                tip(
                    &self.hub.reads,
                    Duration::from_millis(self.cfg.hub_backoff_max_ms),
                )
                .await
            }
        };
        self.register_status("crew member booting");
        let model = if self.cfg.model.is_empty() {
            String::new()
        } else {
            format!(" ({})", self.cfg.model)
        };
        self.broadcast(format!(
            "{} reporting — ready for a contract{model}",
            self.cfg.agent
        ));

        self.delivery.q = restored;
        if let Some(why) = corrupt {
            tracing::error!("{why}; re-reading the owed wakes from the hub");
            self.alert(format!(
                "⚠️ {}: {why} — re-reading the owed wakes from the hub",
                self.cfg.session
            ));
        }
        let machine = &self.fence.machine;
        let before = self.delivery.q.wake.len();
        self.delivery.q.wake.retain(|m| !machine.is_done(m.id));
        if self.delivery.q.wake.len() != before {
            tracing::info!(
                "{} restored wake(s) belong to turns that completed — not run again",
                before - self.delivery.q.wake.len()
            );
        }
        let shed = self.refilter_restored();
        if shed > 0 {
            tracing::info!("{shed} restored message(s) no longer qualify — shed");
            self.save_pending(false);
        }
        if rs.is_none() {
            // A park belongs to the runner that made it; a fresh boot re-parks if it must.
            fsx::remove(&self.paths.park);
        }
        if let Some(s) = &rs {
            self.cli.turn = s.turn;
            self.cli.sid = s.sid.clone();
            self.cli.session_card = s.session_card;
            self.delivery.retry_at = s.retry_at;
            self.delivery.fails = s.delivery_fails;
            self.delivery.no_delivery_retry = s.no_delivery_retry;
            self.delivery.ask_released = s.ask_released;
            if s.last_turn_at > 0 {
                self.cli.last_turn_at = s.last_turn_at;
            }
        }
        if !self.delivery.q.seen.is_empty() {
            tracing::info!(
                "{} consumed message id(s) restored — the poll keeps standing down on them",
                self.delivery.q.seen.len()
            );
        }
        if self.delivery.q.ask != 0 {
            tracing::info!(
                "holding for the answer to ask #{} (to {})",
                self.delivery.q.ask,
                self.delivery.q.ask_to
            );
        }
        if !self.delivery.q.wake.is_empty() {
            tracing::info!(
                "{} message(s) survived from a previous run — redelivering",
                self.delivery.q.wake.len()
            );
        }
        // A predecessor's unfinished turn is adopted before this runner starts one (docs/runner.md §24.3).
        self.adopt_predecessor().await;
        self.resend_lost_consumed();
        self.save_pending_durable(false).await;
        self.save_cursor();
        // The restored wakes are this instance's now.
        let owed: Vec<i64> = self.delivery.q.wake.iter().map(|m| m.id).collect();
        self.mark_claimed(&owed);
        if rs.is_none() {
            self.kickoff().await;
        } else {
            self.announce_restart();
        }
    }
}

/// The self-restart watcher (none when the installed release cannot be watched) and the
/// version this runner is.
fn release_watcher() -> (Option<ReleaseWatcher>, String) {
    let release = match release::installed_path().and_then(ReleaseWatcher::new) {
        Ok(w) => Some(w),
        Err(e) => {
            tracing::warn!("self-restart is off: {e:#}");
            None
        }
    };
    let version = release
        .as_ref()
        .map(|w| w.running_version().to_string())
        .unwrap_or_else(|| trantor_proto::VERSION.to_string());
    (release, version)
}

/// The delivery state of a seat that has not read its queue yet (`restore` does, after boot).
fn new_delivery(cfg: &Config) -> Delivery {
    Delivery {
        cursor: 0,
        q: Pending::default(),
        owner: Owner {
            persona: cfg.persona.clone(),
            agent: cfg.agent.clone(),
            project: cfg.project.clone(),
        },
        delivering: Vec::new(),
        retry_at: 0,
        fails: 0,
        no_delivery_retry: false,
        ask_released: false,
        replay_upto: 0,
        ledger_at_turn: None,
    }
}

/// Boot the seat.
pub async fn boot(
    cfg: Config,
    rs: Option<ReleaseState>,
    bus_slot: &std::sync::OnceLock<Bus>,
) -> anyhow::Result<Seat> {
    std::fs::create_dir_all(cfg.bus_dir.join("logs"))?;
    let signer = enroll_seat_key(&cfg).await?;
    let swap_cursor = if rs.is_none() {
        await_swap_release(
            &HubClient::new(&cfg.hub_url).with_signer(signer.clone()),
            &cfg,
        )
        .await?
    } else {
        None
    };
    match &cfg.about {
        Some(about) => tracing::info!("{} — {about}", cfg.title),
        None => tracing::info!("{}", cfg.title),
    }
    let paths = Paths::new(&cfg.bus_dir, &cfg.persona, &cfg.project);
    // One runner per seat (docs/runner.md §24.1), before anything touches the seat's files.
    let instance = format!("{}.{}", std::process::id(), trantor_proto::now_ms());
    let seat_lock = take_seat_lock(&cfg, &paths, &instance).await?;
    let home = cfg.home.clone();
    let (release, version) = release_watcher();

    let (turn_dir, in_git, in_worktree, git_common) = prepare_workspace(&cfg).await;
    let turn_dir_for_lock = turn_dir.clone();
    let hub = HubClient::new(&cfg.hub_url).with_signer(signer);
    let bus = Bus::start(hub.clone(), Duration::from_millis(cfg.hub_backoff_max_ms));
    let _ = bus_slot.set(bus.clone());
    // This instance is the seat's on the hub's delivery record, before any mark (docs/runner.md §24.1).
    bus.fence(&cfg.session, &instance);
    let ledger = Ledger::new(&paths.ledger);
    ledger.append(&ledger::boot_row(
        &cfg.persona,
        &cfg.agent,
        &cfg.project,
        &cfg.hub_url,
        &version,
    ));
    let driver = Driver::for_name(
        &cfg.driver,
        cfg.command.as_deref(),
        cfg.command_next.as_deref(),
    );
    let janitor =
        DockerJanitor::new(&cfg.bus_dir, &cfg.persona, &cfg.project).with_session(&cfg.session);
    let reads = HubReads {
        hub: hub.clone(),
        session: cfg.session.clone(),
        project: cfg.project.clone(),
    };
    tracing::info!(
        "seat {} · persona {} · agent {} (driver {}) · project {} · hub {} · turns in {} · version {version}",
        cfg.session,
        cfg.persona,
        cfg.agent,
        cfg.driver,
        cfg.project,
        cfg.hub_url,
        turn_dir.display()
    );
    let lessons = reads.lessons(&cfg.agent).await;
    let mut seat = Seat {
        hub: HubLink {
            poller: hub,
            reads,
            bus,
            links: (Vec::new(), None),
            down: None,
            failures: 0,
            backoff: Backoff::new(
                HUB_BACKOFF_START,
                Duration::from_millis(cfg.hub_backoff_max_ms),
            ),
        },
        work: Workspace {
            turn_dir,
            in_worktree,
            in_git,
            git_common,
            tree_cache: None,
            home,
            janitor: Some(janitor),
        },
        delivery: new_delivery(&cfg),
        health: Health::default(),
        cli: CliSession {
            driver,
            sid: String::new(),
            session_card: 0,
            turn: 0,
            last_turn_at: trantor_proto::now_ms(),
        },
        fence: Fencing {
            _seat_lock: seat_lock.0,
            cli_lock: crate::seat::fence::cli_lock_path(&cfg.bus_dir, &turn_dir_for_lock),
            machine: SeatMachine::new(
                &cfg.session,
                &instance,
                cfg.adopt_grace_ms,
                TurnRecord::load(&paths.turnrec).0,
            ),
            mono0: std::time::Instant::now(),
        },
        runner_id: instance,
        lessons,
        ledger,
        version,
        release,
        paths,
        cfg,
    };

    seat.restore(rs, swap_cursor).await;
    Ok(seat)
}

//! The seat's state (docs/runner.md §3), split by concern: [`HubLink`] (traffic with the hub and
//! its outages), [`Workspace`] (where turns run), [`Delivery`] (the durable queue and the
//! delivery of its held batch), [`Health`] (failures, cuts, the park) and [`CliSession`] (the
//! agent CLI's session and turn counter). [`Seat`] holds them with the seat's identity. The boot
//! lives in [`crate::seat::boot`], the loop in [`crate::poll`], a delivery in [`crate::deliver`], one
//! turn in [`crate::seat::turnflow`].

use crate::config::Config;
use crate::hub::bus::Bus;
use crate::hub::hubio::HubReads;
use crate::periphery::docker::DockerJanitor;
use crate::periphery::release::{ReleaseState, ReleaseWatcher};
use crate::seat::ledger::{self, Ledger};
use crate::seat::park::Park;
use crate::seat::pending::{Owner, Pending};
use crate::sys::paths::Paths;
use crate::triage::wake;
use crate::turn::drivers::Driver;
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use trantor_proto::{
    ClientError, HubClient, InboxReply, Lesson, PolicyLink, RegisterRequest, SendRequest,
};

/// How long the `/policy` links are trusted.
pub const LINKS_TTL: Duration = Duration::from_secs(60);

/// One seat's runner state: who the seat is, plus one part per concern. Each part owns its
/// fields and the methods that touch only them; `impl Seat` (here and in the loop, delivery and
/// turn modules) orchestrates across parts.
pub struct Seat {
    /// Identity and knobs.
    pub cfg: Config,
    /// Per-seat files.
    pub paths: Paths,
    /// The telemetry ledger.
    pub ledger: Ledger,
    /// The version this image runs.
    pub version: String,
    /// `<pid>.<boot ms>`: this process image.
    pub runner_id: String,
    /// The self-restart watcher (None when the installed path is unreadable).
    pub release: Option<ReleaseWatcher>,
    /// Lessons loaded at boot.
    pub lessons: Vec<Lesson>,
    /// The seat's traffic with the hub and the hub's reachability.
    pub hub: HubLink,
    /// Where turns run.
    pub work: Workspace,
    /// The durable queue and the state of delivering its held batch.
    pub delivery: Delivery,
    /// Failure tracking: the park, the announced failure state, the cut chain.
    pub health: Health,
    /// The agent CLI: its driver, its session, the turn counter.
    pub cli: CliSession,
    /// Fencing and the turn record: the seat lock, the worktree's CLI lock, the machine.
    pub fence: Fencing,
}

/// The seat's fences and its durable turn record (docs/runner.md §24).
pub struct Fencing {
    /// The held seat lock (released when the runner ends).
    pub _seat_lock: crate::seat::fence::SeatLock,
    /// The turn directory's CLI lock file.
    pub cli_lock: PathBuf,
    /// The fencing and adoption rules, with the turn record.
    pub machine: crate::seat::machine::SeatMachine,
    /// The monotonic origin of the machine's clock.
    pub mono0: Instant,
}

impl Fencing {
    /// The machine's notion of now.
    pub fn now(&self) -> crate::seat::machine::Now {
        crate::seat::machine::Now {
            wall_ms: trantor_proto::now_ms(),
            mono_ms: i64::try_from(self.mono0.elapsed().as_millis()).unwrap_or(i64::MAX),
        }
    }
}

/// The seat's link to the hub: reads, the long-poll client, the outbound bus, the cached
/// `/policy` links, and the outage state (docs/runner.md §4.1).
pub struct HubLink {
    /// Reads of the hub.
    pub reads: HubReads,
    /// The long-poll client (its timeout is the hold plus a margin, per call).
    pub poller: HubClient,
    /// Outbound bus traffic.
    pub bus: Bus,
    /// `/policy` links and when they were read.
    pub links: (Vec<PolicyLink>, Option<Instant>),
    /// The hub has been unreachable since (None = reachable).
    pub down: Option<Instant>,
    /// Failed hub attempts in the current outage.
    pub failures: u64,
    /// The hub back-off (from `HUB_BACKOFF_START` up to the `hub_backoff_max_ms` knob).
    pub backoff: trantor_proto::backoff::Backoff,
}

/// Where the seat's turns run and what the runner knows about that tree.
pub struct Workspace {
    /// Where turns run (the seat worktree, or DIR).
    pub turn_dir: PathBuf,
    /// `turn_dir` is the seat's own worktree on `seat/<persona>` (snapshots apply).
    pub in_worktree: bool,
    /// DIR is in a git repository.
    pub in_git: bool,
    /// The repository's common git directory (for reading `main` without a process).
    pub git_common: Option<PathBuf>,
    /// HEAD and status of the seat worktree as the last turn left them. Only the seat's own CLI
    /// writes there, so the next turn starts from this state and needs no git call before its
    /// spawn.
    pub tree_cache: Option<(Option<String>, Option<String>)>,
    /// `$HOME`.
    pub home: PathBuf,
    /// The docker janitor (taken while a blocking call runs).
    pub janitor: Option<DockerJanitor>,
}

/// The durable queue and the delivery of its held batch: the poll cursor, the back-off and
/// the ask hold (docs/runner.md §5, §6, §14).
pub struct Delivery {
    /// The poll cursor.
    pub cursor: i64,
    /// The durable queue.
    pub q: Pending,
    /// Owner labels for the pending file.
    pub owner: Owner,
    /// Ids of the wake batch the current delivery carries (consumed when it lands).
    pub delivering: Vec<i64>,
    /// Earliest redelivery, ms.
    pub retry_at: i64,
    /// Consecutive failed deliveries of the held batch.
    pub fails: u32,
    /// A no-delivery outcome is backing off.
    pub no_delivery_retry: bool,
    /// An answer released the held ask.
    pub ask_released: bool,
    /// Resuming below the cursor a predecessor had polled up to (its queue was unreadable,
    /// docs/runner.md §24.4): ids up to here were the runner's own polls, not the agent's inbox
    /// reads, so the seen ledger must not claim them.
    pub replay_upto: i64,
    /// The hub's `deliveredUpTo` for this seat when the last turn started (`None`: unread, or
    /// consumed by the seen-ledger reconcile after that turn). Only ids read past it *during*
    /// a turn are the agent's own inbox reads (docs/runner.md §5.4); a predecessor's poll that
    /// the hub answered just before it was killed moved the ledger too, and its wakes are owed.
    pub ledger_at_turn: Option<i64>,
}

/// The seat's failure state: the park in force, what was announced, the consecutive failures
/// and cuts (docs/runner.md §9, §12).
#[derive(Default)]
pub struct Health {
    /// The park in force.
    pub park: Option<Park>,
    /// The park was announced (latch).
    pub park_announced: bool,
    /// The last failure state announced (`down|error:<reason>`).
    pub announced: String,
    /// Consecutive failures (down at 2).
    pub consec_fails: u32,
    /// Evidence of the consecutive box cuts.
    pub cut_chain: Vec<String>,
    /// The last turn was cut.
    pub last_cut: bool,
    /// The last turn was a stall.
    pub last_stalled: bool,
    /// What the seat last heard of its credential's quota (docs/runner.md §12.5).
    pub quota: crate::seat::quota::Quota,
}

/// The agent CLI as the seat drives it: the driver, the CLI session and the card it belongs
/// to, the turn counter.
pub struct CliSession {
    /// The CLI driver.
    pub driver: Driver,
    /// The CLI session id (sid-based CLIs).
    pub sid: String,
    /// The card the current CLI session belongs to.
    pub session_card: i64,
    /// The turn counter.
    pub turn: u64,
    /// When the last turn ended, ms.
    pub last_turn_at: i64,
}

/// The back-off after the first failed hub call.
pub const HUB_BACKOFF_START: Duration = Duration::from_secs(1);

impl HubLink {
    /// A hub call succeeded: end an outage (logged with how long it lasted) and reset the
    /// back-off.
    pub fn up(&mut self, hub_url: &str, cursor: i64) {
        if let Some(since) = self.down.take() {
            tracing::info!(
                "hub {hub_url} answers again after {:.0}s ({} failed attempt(s)) — resuming from cursor {cursor}",
                since.elapsed().as_secs_f64(),
                self.failures,
            );
        }
        self.failures = 0;
        self.backoff.reset();
    }

    /// A hub call failed: start or extend the outage and wait out the back-off, which doubles
    /// up to its cap (docs/runner.md §4.1). An expired long-poll hold is not an outage.
    pub async fn failed(&mut self, e: ClientError, cursor: i64) {
        let max = self.backoff.max();
        if matches!(e, ClientError::Timeout { .. }) && self.down.is_none() {
            // A hold that outlived its deadline (a proxy or a suspended laptop): not an outage.
            tracing::info!("long-poll hold expired ({e}) — polling again");
            tokio::time::sleep(Duration::from_millis(250)).await;
            return;
        }
        self.failures += 1;
        if self.down.is_none() {
            self.down = Some(Instant::now());
            tracing::warn!(
                "hub unreachable ({e}) — backing off up to {}s; nothing is lost: the cursor stays at {cursor}",
                max.as_secs(),
            );
        } else {
            tracing::debug!("hub still unreachable (attempt {}): {e}", self.failures);
        }
        self.backoff.sleep().await;
    }

    /// Re-read `/policy` links when the batch holds a foreign sender and the cache is older
    /// than its TTL — or when that sender's project is not linked in the cache, so a
    /// `trantor policy link` takes effect at the next foreign wake rather than a minute later
    /// (a refusal is rare; one read per such batch).
    pub async fn refresh_links_if_needed(&mut self, own: &str, batch: &InboxReply) {
        let linked = |p: &str| {
            self.links.0.iter().any(|l| {
                l.projects.iter().any(|x| x.eq_ignore_ascii_case(p))
                    && l.projects.iter().any(|x| x.eq_ignore_ascii_case(own))
            })
        };
        let foreign: Vec<&str> = batch
            .messages
            .iter()
            .filter(|m| !m.from.starts_with("hub:"))
            .filter_map(|m| wake::sender_project(&m.from))
            .filter(|p| !p.eq_ignore_ascii_case(own))
            .collect();
        let unlinked = foreign.iter().any(|p| !linked(p));
        let fresh = self.links.1.is_some_and(|t| t.elapsed() < LINKS_TTL) && !unlinked;
        if !foreign.is_empty() && !fresh {
            match self.reads.links().await {
                Some(l) => self.links = (l, Some(Instant::now())),
                // A failed fetch keeps the last value (empty on a cold start: fail closed).
                None => self.links.1 = Some(Instant::now()),
            }
        }
    }
}

impl Delivery {
    /// Persist the pending queue (errors are logged; the queue stays in memory).
    pub fn save(&self, path: &Path, force: bool) {
        if let Err(e) = self.q.save(path, &self.owner, force) {
            tracing::warn!("pending file {}: {e}", path.display());
        }
    }

    /// Consume the batch being delivered (a landed turn, a duty no-op, an unresolvable base);
    /// wakes queued behind it stay for the next turn.
    pub fn consume(&mut self) {
        let ids = std::mem::take(&mut self.delivering);
        self.q.consume_wakes(&ids);
        self.q.bcast.clear();
        self.reset_backoff();
    }

    /// Forget the back-off of the held batch (it may be delivered at once).
    pub fn reset_backoff(&mut self) {
        self.retry_at = 0;
        self.fails = 0;
        self.no_delivery_retry = false;
    }

    /// Held wakes are due for a redelivery (no ask holds them and the back-off has passed).
    pub fn redelivery_due(&self, now: i64) -> bool {
        crate::seat::rules::redelivery_due(self.q.wake.len(), self.q.ask, self.retry_at, now)
    }

    /// Milliseconds until a scheduled redelivery (None when nothing is scheduled).
    pub fn retry_in(&self, now: i64) -> Option<i64> {
        crate::seat::rules::retry_in(self.q.wake.len(), self.q.ask, self.retry_at, now)
    }

    /// Re-filter a restored queue with the current rules (docs/runner.md §3); returns how many
    /// were shed.
    pub fn refilter(&mut self, seat: &wake::Seat<'_>, outcomes: &HashSet<i64>, now: i64) -> usize {
        let before = self.q.wake.len() + self.q.bcast.len();
        self.q
            .wake
            .retain(|m| wake::should_wake(m, seat, outcomes, now));
        self.q.bcast.retain(|m| {
            !wake::is_expired_alert(m, now, seat.alert_ttl_ms)
                && !wake::is_receipt(m, outcomes)
                && !wake::is_status_broadcast(m)
        });
        before - self.q.wake.len() - self.q.bcast.len()
    }
}

/// What one more failure means: how many in a row, whether the seat is down, and whether this
/// state still needs announcing.
pub struct FailureNote {
    /// Consecutive failures, this one included.
    pub fails: u32,
    /// Two or more in a row: the seat is down.
    pub down: bool,
    /// The state (`down|error:<reason>`) differs from the last one announced.
    pub announce: bool,
}

impl Health {
    /// Count a failure and latch its announcement (docs/runner.md §12.2): a state is announced
    /// once per change.
    pub fn fail(&mut self, reason: &str) -> FailureNote {
        self.consec_fails += 1;
        let down = self.consec_fails >= 2;
        let key = format!("{}:{reason}", if down { "down" } else { "error" });
        let announce = key != self.announced;
        if announce {
            self.announced = key;
        }
        FailureNote {
            fails: self.consec_fails,
            down,
            announce,
        }
    }

    /// A healthy turn after failures: reset; true when there was something to recover from.
    pub fn recover(&mut self) -> bool {
        if self.consec_fails == 0 {
            return false;
        }
        self.consec_fails = 0;
        self.announced.clear();
        self.park_announced = false;
        true
    }

    /// Record how a turn ended (`cut` holds the cut's evidence): a cut that was not a stall
    /// extends the chain of consecutive box cuts; a turn that was not cut breaks it.
    pub fn record_turn(&mut self, cut: Option<&str>, stalled: bool) {
        match cut {
            Some(ev) if !stalled => self.cut_chain.push(ev.to_string()),
            Some(_) => {}
            None => self.cut_chain.clear(),
        }
        self.last_cut = cut.is_some();
        self.last_stalled = cut.is_some() && stalled;
    }
}

impl Seat {
    /// Persist the pending queue (errors are logged; the queue stays in memory).
    pub fn save_pending(&self, force: bool) {
        self.delivery.save(&self.paths.pending, force);
    }

    /// Persist the pending queue durably — file and directory fsync'd — before the runner relies
    /// on it: before a `claimed` mark, a cursor past the wake, or an exec (docs/runner.md §24.4).
    /// The fsync runs on a blocking thread; errors are logged (the queue stays in memory).
    pub async fn save_pending_durable(&self, force: bool) {
        let q = self.delivery.q.clone();
        let owner = self.delivery.owner.clone();
        let path = self.paths.pending.clone();
        let r = tokio::task::spawn_blocking(move || q.save_durable(&path, &owner, force)).await;
        match r {
            Ok(Ok(s)) if !s.dir => tracing::warn!(
                "pending file {}: its directory could not be fsync'd — a machine crash could undo this write",
                self.paths.pending.display()
            ),
            Ok(Ok(_)) => {}
            Ok(Err(e)) => tracing::warn!("pending file {}: {e}", self.paths.pending.display()),
            Err(e) => tracing::warn!("pending file {}: {e}", self.paths.pending.display()),
        }
    }

    /// A `/register` body with the seat's identity (docs/runner.md §1.3).
    pub fn register_body(&self, status: &str) -> RegisterRequest {
        RegisterRequest {
            session: self.cfg.session.clone(),
            project: Some(self.cfg.project.clone()),
            status: Some(status.to_string()),
            llm: Some(self.cfg.agent.clone()),
            model: Some(self.cfg.model.clone()),
            persona: Some(self.cfg.persona.clone()),
            agent: Some(self.cfg.agent.clone()),
            ..Default::default()
        }
    }

    /// Register a lifecycle status (boot, failure, recovery): carries `kind: agent`.
    pub fn register_status(&self, status: &str) {
        let mut r = self.register_body(status);
        r.kind = Some("agent".into());
        self.hub.bus.register(r);
    }

    /// Register a phase change (no `kind`, docs/runner.md §1.3) and write it to the turn-state file.
    pub fn phase(&self, status: &str, phase: ledger::Phase) {
        let now = trantor_proto::now_ms();
        ledger::write_phase(&self.paths.turnstate, phase, serde_json::json!({}));
        let mut r = self.register_body(status);
        r.phase = Some(phase.as_str().into());
        r.phase_since = Some(now);
        self.hub.bus.register(r);
    }

    /// A status message to `to` from this seat.
    pub fn status_msg(&self, to: &str, text: String, kind: &str) -> SendRequest {
        SendRequest {
            from: self.cfg.session.clone(),
            to: Some(to.to_string()),
            text: crate::sys::redact::redact(&text).into_owned(),
            project: Some(self.cfg.project.clone()),
            re: None,
            kind: Some(kind.to_string()),
            wake: None,
        }
    }

    /// Tell `all` (kind status).
    pub fn broadcast(&self, text: String) {
        self.hub.bus.send(self.status_msg("all", text, "status"));
    }

    /// Tell `all` and, unless this seat is the orchestrator, the orchestrator (kind alert).
    pub fn alert(&self, text: String) {
        self.hub
            .bus
            .send(self.status_msg("all", text.clone(), "status"));
        if self.cfg.orchestrator != self.cfg.session {
            self.hub
                .bus
                .send(self.status_msg(&self.cfg.orchestrator, text, "alert"));
        }
    }

    /// The seat's identity for wake decisions.
    pub fn wake_seat(&self) -> wake::Seat<'_> {
        wake_seat_of(&self.cfg)
    }

    /// The state carried across a self-restart exec (docs/runner.md §21).
    pub fn release_state(&self) -> ReleaseState {
        let to_values = |v: &[trantor_proto::Message]| {
            v.iter()
                .filter_map(|m| serde_json::to_value(m).ok())
                .collect()
        };
        ReleaseState {
            cursor: self.delivery.cursor,
            turn: self.cli.turn,
            sid: self.cli.sid.clone(),
            session_card: self.cli.session_card,
            retry_at: self.delivery.retry_at,
            delivery_fails: self.delivery.fails,
            consec_fails: self.health.consec_fails,
            no_delivery_retry: self.delivery.no_delivery_retry,
            ask_released: self.delivery.ask_released,
            last_turn_at: self.cli.last_turn_at,
            wake: to_values(&self.delivery.q.wake),
            bcast: to_values(&self.delivery.q.bcast),
            seen: self
                .delivery
                .q
                .seen
                .iter()
                .map(|s| crate::periphery::release::SeenId { id: s.id, ts: s.ts })
                .collect(),
            ..Default::default()
        }
    }

    /// Re-filter a restored queue with the current rules (docs/runner.md §3); returns how many were shed.
    pub fn refilter_restored(&mut self) -> usize {
        let outcomes = self.hub.bus.sent_outcomes();
        let seat = wake_seat_of(&self.cfg);
        self.delivery
            .refilter(&seat, &outcomes, trantor_proto::now_ms())
    }
}

/// The identity in `cfg` as wake decisions see it.
fn wake_seat_of(cfg: &Config) -> wake::Seat<'_> {
    wake::Seat {
        session: &cfg.session,
        persona: &cfg.persona,
        project: &cfg.project,
        alert_ttl_ms: cfg.hub_alert_ttl_ms,
    }
}

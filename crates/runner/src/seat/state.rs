//! The seat: the runner's state and its boot (docs/runner.md §3). The loop lives in
//! [`crate::poll`], a delivery in [`crate::deliver`], one turn in [`crate::turnflow`].

use crate::bus::Bus;
use crate::config::Config;
use crate::docker::DockerJanitor;
use crate::drivers::Driver;
use crate::hubio::HubReads;
use crate::ledger::{self, Ledger};
use crate::park::Park;
use crate::paths::Paths;
use crate::pending::{Owner, Pending};
use crate::release::{ReleaseState, ReleaseWatcher};
use crate::wake;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use trantor_proto::{HubClient, Lesson, PolicyLink, RegisterRequest, SendRequest};

/// How long the `/policy` links are trusted.
pub const LINKS_TTL: Duration = Duration::from_secs(60);

/// One seat's runner state.
pub struct Seat {
    /// Identity and knobs.
    pub cfg: Config,
    /// Per-seat files.
    pub paths: Paths,
    /// Reads of the hub.
    pub reads: HubReads,
    /// The long-poll client (its timeout is the hold plus a margin, per call).
    pub poller: HubClient,
    /// Outbound bus traffic.
    pub bus: Bus,
    /// The CLI driver.
    pub driver: Driver,
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
    /// The telemetry ledger.
    pub ledger: Ledger,
    /// Owner labels for the pending file.
    pub owner: Owner,
    /// The version this image runs.
    pub version: String,
    /// `<pid>.<boot ms>`: this process image.
    pub runner_id: String,
    /// The self-restart watcher (None when the installed path is unreadable).
    pub release: Option<ReleaseWatcher>,
    /// The docker janitor (taken while a blocking call runs).
    pub janitor: Option<DockerJanitor>,
    /// Lessons loaded at boot.
    pub lessons: Vec<Lesson>,
    /// `/policy` links and when they were read.
    pub links: (Vec<PolicyLink>, Option<Instant>),

    /// The poll cursor.
    pub cursor: i64,
    /// The turn counter.
    pub turn: u64,
    /// The CLI session id (sid-based CLIs).
    pub sid: String,
    /// The card the current CLI session belongs to.
    pub session_card: i64,
    /// Earliest redelivery, ms.
    pub retry_at: i64,
    /// Consecutive failed deliveries of the held batch.
    pub delivery_fails: u32,
    /// A no-delivery outcome is backing off.
    pub no_delivery_retry: bool,
    /// An answer released the held ask.
    pub ask_released: bool,
    /// When the last turn ended, ms.
    pub last_turn_at: i64,
    /// The durable queue.
    pub q: Pending,
    /// Ids of the wake batch the current delivery carries (consumed when it lands).
    pub delivering: Vec<i64>,
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
    /// The hub has been unreachable since (None = reachable).
    pub hub_down: Option<Instant>,
    /// Failed hub attempts in the current outage.
    pub hub_failures: u64,
    /// The current hub back-off.
    pub hub_backoff: Duration,
}

impl Seat {
    /// Persist the pending queue (errors are logged; the queue stays in memory).
    pub fn save_pending(&self, force: bool) {
        if let Err(e) = self.q.save(&self.paths.pending, &self.owner, force) {
            tracing::warn!("pending file {}: {e}", self.paths.pending.display());
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
        self.bus.register(r);
    }

    /// Register a phase change (no `kind`, docs/runner.md §1.3) and write it to the turn-state file.
    pub fn phase(&self, status: &str, phase: ledger::Phase) {
        let now = trantor_proto::now_ms();
        ledger::write_phase(&self.paths.turnstate, phase, serde_json::json!({}));
        let mut r = self.register_body(status);
        r.phase = Some(phase.as_str().into());
        r.phase_since = Some(now);
        self.bus.register(r);
    }

    /// A status message to `to` from this seat.
    pub fn status_msg(&self, to: &str, text: String, kind: &str) -> SendRequest {
        SendRequest {
            from: self.cfg.session.clone(),
            to: Some(to.to_string()),
            text: crate::redact::redact(&text).into_owned(),
            project: Some(self.cfg.project.clone()),
            re: None,
            kind: Some(kind.to_string()),
            wake: None,
        }
    }

    /// Tell `all` (kind status).
    pub fn broadcast(&self, text: String) {
        self.bus.send(self.status_msg("all", text, "status"));
    }

    /// Tell `all` and, unless this seat is the orchestrator, the orchestrator (kind alert).
    pub fn alert(&self, text: String) {
        self.bus
            .send(self.status_msg("all", text.clone(), "status"));
        if self.cfg.orchestrator != self.cfg.session {
            self.bus
                .send(self.status_msg(&self.cfg.orchestrator, text, "alert"));
        }
    }

    /// The seat's identity for wake decisions.
    pub fn wake_seat(&self) -> wake::Seat<'_> {
        wake::Seat {
            session: &self.cfg.session,
            persona: &self.cfg.persona,
            project: &self.cfg.project,
            alert_ttl_ms: self.cfg.hub_alert_ttl_ms,
        }
    }

    /// The state carried across a self-restart exec (docs/runner.md §21).
    pub fn release_state(&self) -> ReleaseState {
        let to_values = |v: &[trantor_proto::Message]| {
            v.iter()
                .filter_map(|m| serde_json::to_value(m).ok())
                .collect()
        };
        ReleaseState {
            cursor: self.cursor,
            turn: self.turn,
            sid: self.sid.clone(),
            session_card: self.session_card,
            retry_at: self.retry_at,
            delivery_fails: self.delivery_fails,
            consec_fails: self.consec_fails,
            no_delivery_retry: self.no_delivery_retry,
            ask_released: self.ask_released,
            last_turn_at: self.last_turn_at,
            wake: to_values(&self.q.wake),
            bcast: to_values(&self.q.bcast),
            seen: self
                .q
                .seen
                .iter()
                .map(|s| crate::release::SeenId { id: s.id, ts: s.ts })
                .collect(),
            ..Default::default()
        }
    }

    /// Re-filter a restored queue with the current rules (docs/runner.md §3); returns how many were shed.
    pub fn refilter_restored(&mut self) -> usize {
        let now = trantor_proto::now_ms();
        let outcomes = self.bus.sent_outcomes();
        let before = self.q.wake.len() + self.q.bcast.len();
        let seat = self.wake_seat();
        let wake: Vec<_> = self
            .q
            .wake
            .iter()
            .filter(|m| wake::should_wake(m, &seat, &outcomes, now))
            .cloned()
            .collect();
        let bcast: Vec<_> = self
            .q
            .bcast
            .iter()
            .filter(|m| {
                !wake::is_expired_alert(m, now, self.cfg.hub_alert_ttl_ms)
                    && !wake::is_receipt(m, &outcomes)
                    && !wake::is_status_broadcast(m)
            })
            .cloned()
            .collect();
        self.q.wake = wake;
        self.q.bcast = bcast;
        before - self.q.wake.len() - self.q.bcast.len()
    }
}

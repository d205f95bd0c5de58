//! One turn as the seat runs it (docs/runner.md §7, §11): phase and prompt files, the
//! pre-turn snapshots the judge compares against, the executor, the post-turn reads, the
//! verdict, the ledger row, and exactly one follow-up after a cut.

use crate::hub::hubio::CardRead;
use crate::seat::Seat;
use crate::seat::fence::CliLock;
use crate::seat::ledger::{self, Phase};
use crate::seat::turnrec::TurnRecord;
use crate::sys::gitx;
use crate::triage::classify::{self, CardSnap, Judgement, TurnFacts};
use crate::triage::prompt;
use crate::triage::receipt::Assigner;
use crate::turn::drivers::{self, TurnArgs};
use crate::turn::watchdog::WatchdogConfig;
use crate::turn::{self, TurnEvent, TurnSpec, Wrap};
use serde_json::json;
use std::time::{Duration, Instant};

/// The longest a turn that carries contracts waits for their `claimed` marks before its spawn.
const SETTLE_MARKS: Duration = Duration::from_secs(1);

/// What started a turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TurnKind {
    /// The boot turn.
    Kickoff,
    /// A delivery of wake messages.
    Wake,
    /// A pulse of an orchestrator seat.
    Pulse,
    /// The one follow-up after a cut.
    FollowUp,
}

impl TurnKind {
    /// The kind's word in the turn record.
    pub fn as_str(self) -> &'static str {
        match self {
            TurnKind::Kickoff => "kickoff",
            TurnKind::Wake => "wake",
            TurnKind::Pulse => "pulse",
            TurnKind::FollowUp => "follow-up",
        }
    }
}

/// The state a chain of turns (a turn and its follow-up) is judged against.
#[derive(Debug, Clone, Default)]
pub struct ChainStart {
    head: Option<String>,
    porcelain: Option<String>,
    card_before: Option<CardSnap>,
    events_latest: i64,
    /// The hub's `deliveredUpTo` for the seat before the chain (docs/runner.md §5.4).
    ledger: Option<i64>,
}

/// What one turn of a chain is asked to be: its prompt, whether its CLI session starts fresh,
/// what triggered it and its kind.
#[derive(Clone, Copy)]
struct Ask<'a> {
    prompt: &'a str,
    fresh: bool,
    trigger: &'a str,
    kind: TurnKind,
}

/// A turn that got past its supersession checks and is on disk, about to spawn.
struct Begun {
    t0: i64,
    started: Instant,
    card: i64,
    invocation: drivers::Invocation,
    cli_lock: Option<CliLock>,
}

/// What the post-turn reads made of a turn.
struct Judged {
    j: Judgement,
    own_out: String,
    reported: Option<crate::turn::usage::Reported>,
    ask: Option<(i64, String, bool)>,
}

/// How a turn (or its chain) ended.
#[derive(Debug, Clone, Default)]
pub struct TurnResult {
    /// The effective exit (0 = success).
    pub ec: i32,
    /// The CLI's real exit.
    pub real_exit: i32,
    /// The judge's answer.
    pub j: Judgement,
    /// The last turn of the chain was cut.
    pub cut: bool,
    /// The CLI's own output (redacted, prompt echo removed).
    pub own_out: String,
    /// Wall time of the chain, seconds.
    pub secs: i64,
    /// The card the turn was bound to.
    pub card: i64,
    /// An ask the turn left: `(id, to, answered)`.
    pub ask: Option<(i64, String, bool)>,
    /// The reset time the output named.
    pub reset_at: Option<i64>,
    /// Evidence line of the first cut in the chain.
    pub cut_evidence: Option<String>,
    /// When the chain's first turn started, ms since the epoch.
    pub started_ms: i64,
    /// No CLI ran: another runner instance took the seat's fence (docs/runner.md §24.1); the
    /// caller stops without judging anything.
    pub superseded: bool,
}

/// Extra inputs of one turn.
#[derive(Debug, Clone, Default)]
pub struct TurnInput {
    /// Who is owed answers (extension notes go to them).
    pub assigners: Vec<Assigner>,
    /// The card as the delivery already read it.
    pub card_read: Option<CardRead>,
    /// When the wake that caused this turn arrived (for the spawn-latency log).
    pub wake_at: Option<Instant>,
}

impl Seat {
    fn turn_env(&self, fresh: bool) -> Vec<(String, String)> {
        let mut env = drivers::env_file_vars(&self.cli.driver, &self.cfg.bus_dir, &self.work.home);
        let transcript = drivers::claude_transcript_dir(&self.work.turn_dir, &self.work.home);
        let s = |k: &str, v: &str| (k.to_string(), v.to_string());
        env.extend([
            s("RELAY_URL", &self.cfg.hub_url),
            s("RELAY_AGENT", &self.cfg.agent),
            s("RELAY_SESSION", &self.cfg.session),
            s("RELAY_PROJECT", &self.cfg.project),
            s("TRANTOR_SEAT", &self.cfg.project),
            s("TRANTOR_PERSONA", &self.cfg.persona),
            s("TRANTOR_NO_HANDOFF_SPAWN", "1"),
            s("TRANTOR_NO_BATON_SPAWN", "1"),
            s("TRANTOR_TRANSCRIPT_DIR", &transcript.to_string_lossy()),
            s("TRANTOR_PROMPT_FILE", &self.paths.prompt.to_string_lossy()),
            s("TRANTOR_TURN", &self.cli.turn.to_string()),
            s("TRANTOR_TURN_FRESH", if fresh { "1" } else { "0" }),
            s("TRANTOR_SESSION_ID", &self.cli.sid),
        ]);
        env.extend(self.cli.driver.cli_env(nix::unistd::geteuid().is_root()));
        // The seat's credential last: its variables win over the env files (docs/runner.md §15.4).
        if let Some(name) = &self.cfg.credential {
            match trantor_proto::credentials::CredentialFile::load(&self.cfg.bus_dir) {
                Ok(f) => match f.credentials.get(name) {
                    Some(c) => env.extend(c.env.iter().map(|(k, v)| (k.clone(), v.clone()))),
                    None => tracing::error!(
                        "credential {name} is not in {} — this turn runs without it (trantor credentials add {name} …)",
                        trantor_proto::credentials::CredentialFile::path(&self.cfg.bus_dir)
                            .display()
                    ),
                },
                Err(e) => tracing::error!("credential {name}: {e} — this turn runs without it"),
            }
        }
        env
    }

    async fn chain_start(&self, card: i64, card_read: Option<CardRead>) -> ChainStart {
        let dir = self.work.turn_dir.clone();
        // The seat's own worktree is as the last turn left it; DIR itself (no worktree) is
        // shared with the operator and is read fresh.
        // `trantor integrate` and `trantor sync` may move the seat branch between turns; the
        // branch ref (read natively, no process) tells whether the cache still holds.
        let cached = if self.work.in_worktree {
            self.work.tree_cache.clone().filter(|(head, _)| {
                let branch = crate::periphery::worktree::seat_branch(&self.cfg.persona);
                match &self.work.git_common {
                    Some(c) => gitx::read_branch(c, &branch).as_ref() == head.as_ref(),
                    None => false,
                }
            })
        } else {
            None
        };
        let git = self.work.in_git && cached.is_none();
        let card_fut = async {
            match card_read {
                Some(CardRead::Found { snap, .. }) => Some(snap),
                Some(_) => None,
                None if card > 0 => match self.hub.reads.card(card).await {
                    CardRead::Found { snap, .. } => Some(snap),
                    _ => None,
                },
                None => None,
            }
        };
        let (head, porcelain, card_before, events_latest, ledger) = tokio::join!(
            async { if git { gitx::head(&dir).await } else { None } },
            async {
                if git {
                    gitx::porcelain(&dir).await
                } else {
                    None
                }
            },
            card_fut,
            self.hub.reads.events_latest(),
            self.hub.reads.delivered_up_to(&self.cfg.session),
        );
        let (head, porcelain) = match cached {
            Some(c) => c,
            None => (head, porcelain),
        };
        ChainStart {
            head,
            porcelain,
            card_before,
            events_latest,
            ledger,
        }
    }

    /// Forward the executor's events to the bus while the turn runs.
    fn forward_events(
        &self,
        mut rx: tokio::sync::mpsc::UnboundedReceiver<TurnEvent>,
        input: &TurnInput,
        card: i64,
    ) -> tokio::task::JoinHandle<()> {
        let bus = self.hub.bus.clone();
        let session = self.cfg.session.clone();
        let project = self.cfg.project.clone();
        let orch = self.cfg.orchestrator.clone();
        let mut to: Vec<String> = input.assigners.iter().map(|a| a.from.clone()).collect();
        if orch != session && !to.contains(&orch) {
            to.push(orch.clone());
        }
        let wake_at = input.wake_at;
        let turn = self.cli.turn;
        tokio::spawn(async move {
            let msg = |to: &str, text: String| trantor_proto::SendRequest {
                from: session.clone(),
                to: Some(to.to_string()),
                text,
                project: Some(project.clone()),
                re: None,
                kind: Some("status".into()),
                wake: Some(false),
            };
            while let Some(ev) = rx.recv().await {
                match ev {
                    TurnEvent::Spawned { pid, at } => match wake_at {
                        Some(t) => tracing::info!(
                            "turn {turn}: CLI spawned (pid {pid}) {:.1} ms after the wake",
                            at.saturating_duration_since(t).as_secs_f64() * 1000.0
                        ),
                        None => tracing::info!("turn {turn}: CLI spawned (pid {pid})"),
                    },
                    TurnEvent::Extended {
                        n,
                        of,
                        until_ms,
                        alive,
                    } => {
                        let text = format!(
                            "⏳ {session} turn extended ({n}/{of}) on #{card} — alive: {}; box now ends {}",
                            alive.join(", "),
                            crate::seat::park::fmt_time(until_ms)
                        );
                        tracing::info!("{text}");
                        for t in &to {
                            bus.send(msg(t, text.clone()));
                        }
                    }
                    TurnEvent::Stalled { report } => {
                        let target = if orch == session {
                            "all"
                        } else {
                            orch.as_str()
                        };
                        bus.send(msg(target, format!("⏱ {session} {report}")));
                    }
                }
            }
        })
    }

    /// Run one turn (and, after a cut, exactly one follow-up in the same session).
    pub async fn run_turn(
        &mut self,
        prompt_text: String,
        fresh: bool,
        trigger: &str,
        kind: TurnKind,
        input: TurnInput,
    ) -> TurnResult {
        let card = self.cli.session_card;
        let start = self.chain_start(card, input.card_read.clone()).await;
        self.delivery.ledger_at_turn = start.ledger;
        if let Some(t) = input.wake_at {
            tracing::debug!(
                "wake path: pre-turn reads done {:?} after the wake",
                t.elapsed()
            );
        }
        let ask = Ask {
            prompt: &prompt_text,
            fresh,
            trigger,
            kind,
        };
        let mut r = self.one_turn(ask, &input, &start).await;
        if r.cut && !r.superseded && kind != TurnKind::FollowUp {
            let first_cut = r.cut_evidence.clone();
            let t_chain = r.secs;
            let follow_up = Ask {
                prompt: prompt::FOLLOW_UP,
                fresh: false,
                trigger: "time-box follow-up",
                kind: TurnKind::FollowUp,
            };
            let mut f = self.one_turn(follow_up, &input, &start).await;
            f.secs += t_chain;
            f.cut_evidence = f.cut_evidence.or(first_cut);
            f.started_ms = r.started_ms;
            r = f;
        }
        r
    }

    async fn one_turn(
        &mut self,
        ask: Ask<'_>,
        input: &TurnInput,
        start: &ChainStart,
    ) -> TurnResult {
        let Some(begun) = self.begin_turn(ask, input, start).await else {
            return TurnResult {
                superseded: true,
                ..Default::default()
            };
        };
        let Begun {
            t0,
            started,
            card,
            invocation,
            cli_lock,
        } = begun;
        let spec = self.turn_spec(invocation, ask.fresh, cli_lock.as_ref());
        let transcript = self.transcript_mark();
        let (run, containers) = self.spawn_and_wait(spec, input, card, cli_lock).await;
        let judged = self
            .judge_turn(&run, ask.prompt, ask.kind, start, card, t0, transcript)
            .await;
        let secs = started.elapsed().as_secs() as i64;
        self.record_turn(&run, &judged, ask.trigger, card, started, &containers);
        self.end_turn(run, judged, ask.trigger, card, t0, secs)
    }

    /// Everything before the spawn: the supersession checks, the turn number, the phase and
    /// prompt files, the invocation, the worktree's CLI lock and the durable turn record.
    /// `None` when the runner learned it is superseded (docs/runner.md §24.1): nothing spawns.
    async fn begin_turn(
        &mut self,
        ask: Ask<'_>,
        input: &TurnInput,
        start: &ChainStart,
    ) -> Option<Begun> {
        let Ask {
            prompt: prompt_text,
            fresh,
            trigger,
            kind,
        } = ask;
        // A turn that carries contracts waits for their `claimed` marks to be answered: a
        // superseded runner learns it before it spawns anything (docs/runner.md §24.1).
        let carries = matches!(kind, TurnKind::Wake | TurnKind::FollowUp)
            && !self.delivery.delivering.is_empty();
        let superseded = if carries {
            self.hub.bus.settle_marks(SETTLE_MARKS).await
        } else {
            self.hub.bus.superseded()
        };
        if superseded.is_some() {
            return None;
        }
        self.cli.turn += 1;
        if fresh {
            self.cli.sid.clear();
        }
        let card = self.cli.session_card;
        let t0 = trantor_proto::now_ms();
        let started = Instant::now();
        ledger::write_turn_state(
            &self.paths.turnstate,
            json!({"turn": self.cli.turn, "phase": "working", "since": t0, "card": card,
                   "lastBytesAt": t0, "lastTranscriptAt": 0, "pid": std::process::id()}),
        );
        let mut reg = self.register_body(&format!("working · {trigger}"));
        reg.phase = Some(Phase::Working.as_str().into());
        reg.phase_since = Some(t0);
        self.hub.bus.register(reg);
        if let Some(t) = input.wake_at {
            tracing::debug!(
                "wake path: turn state written {:?} after the wake",
                t.elapsed()
            );
        }
        if let Err(e) = std::fs::write(&self.paths.prompt, prompt_text) {
            tracing::warn!("prompt file {}: {e}", self.paths.prompt.display());
        }
        let invocation = self.cli.driver.invocation(&TurnArgs {
            fresh,
            sid: &self.cli.sid,
            prompt: prompt_text,
            prompt_file: &self.paths.prompt,
            dir: &self.work.turn_dir,
            model: &self.cfg.model,
            effort: self.cfg.effort.as_deref(),
        });
        tracing::info!(
            "turn {} ({trigger}{}): {}",
            self.cli.turn,
            if card > 0 {
                format!(", card #{card}")
            } else {
                String::new()
            },
            invocation.describe(prompt_text)
        );
        // Never two CLIs in one worktree: the turn holds the directory's CLI lock (its wrapper
        // holds it as long as it lives), and the turn is on disk before the CLI starts
        // (docs/runner.md §24.2).
        let cli_lock = self.take_cli_lock().await;
        if self.hub.bus.superseded().is_some() {
            // Learned while waiting for the worktree: still no spawn.
            return None;
        }
        let ids = match kind {
            TurnKind::Wake | TurnKind::FollowUp => self.delivery.delivering.clone(),
            TurnKind::Kickoff | TurnKind::Pulse => Vec::new(),
        };
        self.record_turn_start(TurnRecord {
            turn: self.cli.turn,
            kind: kind.as_str().into(),
            ids,
            started_at: t0,
            head: start.head.clone(),
            card,
            card_status: start.card_before.as_ref().map(|c| c.status.clone()),
            ..Default::default()
        })
        .await;
        Some(Begun {
            t0,
            started,
            card,
            invocation,
            cli_lock,
        })
    }

    /// The executor's spec for this turn: the wrapper that leaves the exit status (when the
    /// CLI lock's handle could be had), the environment, the boxes and the watchdog.
    fn turn_spec(
        &self,
        invocation: drivers::Invocation,
        fresh: bool,
        cli_lock: Option<&CliLock>,
    ) -> TurnSpec {
        let wrap = match cli_lock.map(|l| l.handle()) {
            Some(Ok(hold)) => Some(Wrap {
                status_file: self.paths.turnexit.clone(),
                pid_file: self.paths.turnpid.clone(),
                hold: std::sync::Arc::new(hold),
            }),
            Some(Err(e)) => {
                tracing::warn!("CLI lock handle: {e} — this turn runs unwrapped");
                None
            }
            None => None,
        };
        TurnSpec {
            wrap,
            invocation,
            cwd: self.work.turn_dir.clone(),
            env: self.turn_env(fresh),
            err_file: self.paths.err.clone(),
            max_ms: self.cfg.turn_max_ms as i64,
            ceiling_ms: self.cfg.turn_ceiling_ms as i64,
            watchdog: Some(WatchdogConfig {
                worktree: self.work.turn_dir.clone(),
                output_file: self.paths.err.clone(),
                session_dirs: self.cli.driver.session_dirs(
                    &self.work.turn_dir,
                    &self.work.home,
                    &self.cfg.data_home,
                ),
                stall_after: Duration::from_millis(self.cfg.watchdog_ms),
                owner_pid: std::process::id(),
                turn_id: self.cli.turn.to_string(),
                turn_state_file: self.paths.turnstate.clone(),
                provider_logs: self.cli.driver.provider_logs(&self.cfg.data_home),
            }),
            snapshot: self
                .work
                .in_worktree
                .then(|| (self.work.turn_dir.clone(), self.cfg.persona.clone())),
            kill_grace: Duration::from_secs(3),
            echo: true,
        }
    }

    /// What the CLI's transcript holds before the turn, so its usage report can be told from
    /// the earlier turns' (docs/runner.md §15.3).
    fn transcript_mark(&self) -> Option<crate::turn::usage::TranscriptMark> {
        match &self.cli.driver {
            crate::turn::drivers::Driver::Claude => Some(crate::turn::usage::TranscriptMark::take(
                &drivers::claude_transcript_dir(&self.work.turn_dir, &self.work.home),
            )),
            // sessions/YYYY/MM/DD/rollout-*.jsonl
            crate::turn::drivers::Driver::Codex => {
                Some(crate::turn::usage::TranscriptMark::take_tree(
                    &self.cfg.codex_home.join("sessions"),
                    3,
                ))
            }
            crate::turn::drivers::Driver::Opencode { .. } => {
                Some(crate::turn::usage::TranscriptMark::opencode(
                    &self.work.turn_dir,
                    &self.cfg.data_home,
                ))
            }
            _ => None,
        }
    }

    /// Spawn the CLI and wait for it (its events forwarded to the bus meanwhile), with the
    /// container janitor's passes around it; the CLI lock is let go once the CLI is gone.
    /// Returns the run and the containers the turn started.
    async fn spawn_and_wait(
        &mut self,
        spec: TurnSpec,
        input: &TurnInput,
        card: i64,
        cli_lock: Option<CliLock>,
    ) -> (turn::TurnRun, Vec<String>) {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let fwd = self.forward_events(rx, input, card);
        let janitor = self.work.janitor.take();
        let (run, janitor) = tokio::join!(turn::run_turn(spec, tx), async move {
            // Concurrent with the spawn: `docker ps` costs tens of ms and no CLI starts a
            // container within them.
            match janitor {
                Some(mut j) => tokio::task::spawn_blocking(move || {
                    j.before_turn();
                    j
                })
                .await
                .ok(),
                None => None,
            }
        });
        let _ = fwd.await;
        drop(cli_lock);
        self.work.janitor = janitor;
        if let Some(mut j) = self.work.janitor.take() {
            self.work.janitor = tokio::task::spawn_blocking(move || {
                j.after_turn(Some(card));
                j
            })
            .await
            .ok();
        }
        let containers: Vec<String> = self
            .work
            .janitor
            .as_ref()
            .map(|j| j.last_turn_containers().to_vec())
            .unwrap_or_default();
        if let Some(j) = self.work.janitor.as_mut() {
            for n in j.take_notices() {
                self.hub.bus.send(self.status_msg("all", n, "status"));
            }
        }
        for s in &run.snapshots {
            if let crate::turn::snapshot::SnapshotOutcome::Skipped(why) = s {
                tracing::warn!("cut WIP snapshot failed: {why}");
            }
        }
        (run, containers)
    }

    /// The post-turn reads (HEAD, the tree, the seat's own bus events, the card, an ask, the
    /// CLI's usage report) and the verdict judged from them (docs/runner.md §11).
    #[allow(clippy::too_many_arguments)]
    async fn judge_turn(
        &mut self,
        run: &turn::TurnRun,
        prompt_text: &str,
        kind: TurnKind,
        start: &ChainStart,
        card: i64,
        t0: i64,
        transcript: Option<crate::turn::usage::TranscriptMark>,
    ) -> Judged {
        let dir = self.work.turn_dir.clone();
        let (head, porcelain, events) = tokio::join!(
            async {
                if self.work.in_git {
                    gitx::head(&dir).await
                } else {
                    None
                }
            },
            async {
                if self.work.in_git {
                    gitx::porcelain(&dir).await
                } else {
                    None
                }
            },
            self.hub.reads.events_by_me(start.events_latest),
        );
        let new_commit = start.head.is_some() && head.is_some() && head != start.head;
        self.work.tree_cache = self.work.in_git.then(|| (head.clone(), porcelain.clone()));
        let worktree_changed = new_commit || (porcelain.is_some() && porcelain != start.porcelain);
        let bus_activity = events.is_some_and(|e| !e.is_empty());
        let own_out = classify::strip_prompt_echo(&run.output, prompt_text);
        let reported = {
            let (driver, stdout, model) = (
                self.cli.driver.clone(),
                run.stdout.clone(),
                self.cfg.model.clone(),
            );
            tokio::task::spawn_blocking(move || {
                crate::turn::usage::read_turn(&driver, &stdout, transcript.as_ref(), &model)
            })
            .await
            .ok()
            .flatten()
        };
        let clean = run.exit == 0 && !run.cut;
        let card_after = if clean && card > 0 && start.card_before.is_some() {
            match self.hub.reads.card(card).await {
                CardRead::Found { snap, .. } => Some(snap),
                _ => None,
            }
        } else {
            None
        };
        let mut ask = None;
        let mut asked_verdict = None;
        if clean
            && kind == TurnKind::Wake
            && let Some((id, to, text, answered)) = self.hub.reads.asks_since(t0).await.pop()
        {
            asked_verdict = Some(
                crate::sys::redact::redact(&format!(
                    "asked #{id} of {to}: {}",
                    crate::triage::receipt::excerpt(&text, 200)
                ))
                .into_owned(),
            );
            ask = Some((id, to, answered));
        }
        let facts = TurnFacts {
            real_exit: run.exit,
            cut: run.cut,
            stalled: run.stalled,
            own_out: own_out.clone(),
            new_commit,
            worktree_changed,
            bus_activity,
            // An unreadable report is unknown, never zero (docs/runner.md §11.1).
            zero_usage: reported.as_ref().map(|r| r.usage.is_zero()),
            asked: asked_verdict,
            card,
            card_before: start.card_before.clone(),
            card_after,
            session: self.cfg.session.clone(),
            t0,
        };
        let mut j = classify::judge(&facts);
        if matches!(
            self.cli.driver,
            crate::turn::drivers::Driver::Command { .. }
        ) && j.empty_turn
            && !own_out.trim().is_empty()
        {
            // A `command` seat is an arbitrary program: its terse answer is its answer. The
            // 120-character prose rule (docs/runner.md §11.2) is tuned for LLM CLIs and would call every short
            // reply hollow; a silent command is still empty-output.
            j.empty_turn = false;
            if j.outcome == "empty" {
                j.outcome = "completed".into();
                j.verdict = "classified success because exit 0 with CLI output".into();
            }
        }
        if let Some(sid) =
            self.cli
                .driver
                .sid_after_turn(&run.stdout, &self.work.turn_dir, &self.cfg.data_home)
        {
            self.cli.sid = sid;
        }
        Judged {
            j,
            own_out,
            reported,
            ask,
        }
    }

    /// The turn's row in the seat's ledger and its cost report to the hub (`POST /turns`).
    fn record_turn(
        &mut self,
        run: &turn::TurnRun,
        judged: &Judged,
        trigger: &str,
        card: i64,
        started: Instant,
        containers: &[String],
    ) {
        let Judged {
            j,
            own_out,
            reported,
            ..
        } = judged;
        let tokens = classify::tokens(own_out);
        let mut row = json!({
            "ts": trantor_proto::now_ms(), "persona": self.cfg.persona, "agent": self.cfg.agent,
            "project": self.cfg.project, "turn": self.cli.turn, "trigger": trigger, "card": card,
            "model": if self.cfg.model.is_empty() { "cli-default" } else { self.cfg.model.as_str() },
            "duration_ms": started.elapsed().as_millis() as u64, "exit": run.exit,
            "effExit": j.eff_exit, "authFailed": j.eff_exit != run.exit,
            "emptyOutput": j.empty_output, "emptyTurn": j.empty_turn,
            "verdict": crate::sys::redact::redact(&j.verdict), "outcome": j.outcome, "tokens": tokens,
        });
        if let Some(o) = row.as_object_mut() {
            if !containers.is_empty() {
                o.insert("containers".into(), json!(containers));
            }
            if run.cut {
                o.insert("cut".into(), json!(true));
                if let Some(sig) = run.signal.and_then(|s| match s {
                    9 => Some("SIGKILL"),
                    13 => Some("SIGPIPE"),
                    15 => Some("SIGTERM"),
                    _ => None,
                }) {
                    o.insert("cutSignal".into(), json!(sig));
                }
            }
            if run.stalled {
                o.insert("stalled".into(), json!(true));
            }
            if run.box_ms > 0 && run.extensions > 0 {
                o.insert("extensions".into(), json!(run.extensions));
                o.insert("boxMs".into(), json!(run.box_ms));
            }
            if let Some(r) = reported {
                o.insert("usage".into(), json!(r.usage));
                o.insert("usd".into(), json!(r.usd));
                o.insert("costEstimated".into(), json!(r.estimated));
                o.insert("costSource".into(), json!(r.source));
            }
        }
        self.ledger.append(&row);
        self.hub.bus.turn(trantor_proto::TurnReport {
            session: self.cfg.session.clone(),
            instance: self.runner_id.clone(),
            turn: self.cli.turn,
            project: self.cfg.project.clone(),
            card: card.max(0),
            agent: self.cfg.agent.clone(),
            model: reported
                .as_ref()
                .map(|r| r.model.clone())
                .filter(|m| !m.is_empty())
                .unwrap_or_else(|| self.cfg.model.clone()),
            credential: self.cfg.credential.clone(),
            outcome: j.outcome.clone(),
            usage: reported.as_ref().map(|r| r.usage),
            usd: reported.as_ref().and_then(|r| r.usd),
            estimated: reported.as_ref().is_some_and(|r| r.estimated),
            source: reported
                .as_ref()
                .map(|r| r.source.to_string())
                .unwrap_or_default(),
        });
        tracing::info!(
            "turn {} ended: exit {} · {} · {}",
            self.cli.turn,
            run.exit,
            j.outcome,
            j.verdict
        );
    }

    /// After the record: a cut's phase and evidence, the seat's health, and the result the
    /// delivery code acts on.
    fn end_turn(
        &mut self,
        run: turn::TurnRun,
        judged: Judged,
        trigger: &str,
        card: i64,
        t0: i64,
        secs: i64,
    ) -> TurnResult {
        let Judged {
            j, own_out, ask, ..
        } = judged;
        let mut cut_evidence = None;
        if run.cut {
            let phase = if run.stalled {
                Phase::Stalled
            } else {
                Phase::Cut
            };
            let status = if run.stalled {
                "stalled · no activity"
            } else {
                "cut at the time box"
            };
            self.phase(status, phase);
            let minutes = run.box_ms.max(self.cfg.turn_max_ms as i64) / 60_000;
            let ev = format!(
                "turn {} ({trigger}) exit {}{} — cut at the {minutes}m box{}",
                self.cli.turn,
                run.exit,
                run.signal
                    .map(|s| format!(" (signal {s})"))
                    .unwrap_or_default(),
                if run.extensions > 0 {
                    format!(" after {} liveness extension(s)", run.extensions)
                } else {
                    String::new()
                }
            );
            if run.backstop {
                tracing::warn!("{ev} (backstop: the cut itself did not finish in time)");
            } else {
                tracing::info!("{ev}");
            }
            cut_evidence = Some(ev);
        }
        self.health
            .record_turn(cut_evidence.as_deref(), run.stalled);
        if run.exit == 0 && j.eff_exit == 0 && !run.cut {
            self.phase("idle", Phase::Idle);
        }
        let reset_at = classify::parse_reset(&own_out, trantor_proto::now_ms());
        TurnResult {
            ec: if run.cut && j.eff_exit == 0 {
                run.exit.max(1)
            } else {
                j.eff_exit
            },
            real_exit: run.exit,
            cut: run.cut,
            own_out,
            secs,
            card,
            ask,
            reset_at,
            cut_evidence,
            started_ms: t0,
            j,
            superseded: false,
        }
    }
}

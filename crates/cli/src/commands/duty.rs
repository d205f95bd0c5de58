//! `trantor duty up|status|down|appoint`: the duty seat that nudges recipients of unread mail.
//!
//! The hub's duty service escalates direct messages nobody has read to the duty session; the
//! duty seat is a runner (persona `duty`) with duty nudges on, which turns each escalation into
//! a nudge of the recipient. While the duty seat is dark the hub hands escalations back to the
//! senders instead. See `docs/runner.md` §17 and `docs/protocol.md` §11.1.

use super::down::{self, DownArgs};
use super::up::{self, UpArgs};
use super::{Common, HubResult, print_json};
use serde_json::json;
use std::path::PathBuf;
use std::process::ExitCode;

pub(crate) const DUTY_HELP: &str = concat!(
    "\
The duty seat is a runner with persona `duty` (session duty:<project>) and duty nudges on
(RUNNER_DUTY_NUDGES=1). `up` starts it like `trantor up` (tmux or background) and appoints it on
the hub (POST /overseer/duty), unless the hub was started with RELAY_DUTY_SESSION, which wins.
The hub escalates a direct message unread for RELAY_DUTY_UNDELIVERED_MS (default 2 min) to the
duty session once; while duty is dark (no heartbeat for RELAY_DUTY_DARK_MS, default 10 min, or
sitting on unread escalations) escalations go back to the senders.

Examples:
  trantor duty up              a Claude Code duty seat for this project
  trantor duty up codex        the duty seat on Codex
  trantor duty status          is duty configured, beating, consuming; recent failures
  trantor duty appoint me:web  make another session the duty session (empty string clears)
  trantor duty down

",
    exit_codes!()
);

/// `trantor duty` verbs.
#[derive(Debug, clap::Subcommand)]
pub enum DutyCommand {
    /// Start the duty seat for this project and appoint it.
    Up(DutyUpArgs),
    /// Show the hub's duty state and this project's duty seat.
    Status(DutyStatusArgs),
    /// Stop the duty seat.
    Down(DutyStatusArgs),
    /// Appoint a session as duty on the hub (an empty session clears the appointment).
    Appoint(AppointArgs),
}

/// `trantor duty up` options.
#[derive(Debug, clap::Args)]
pub struct DutyUpArgs {
    /// The agent CLI the duty seat runs (optionally :model).
    #[arg(default_value = "claude", value_name = "AGENT[:MODEL]")]
    pub agent: String,
    /// Directory the seat works in [default: the current directory].
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Seconds to wait for the seat to show up live.
    #[arg(long, default_value_t = 60)]
    pub wait: u64,
    /// Run as a background process even when tmux is installed.
    #[arg(long)]
    pub no_tmux: bool,
    #[command(flatten)]
    pub common: Common,
}

/// `trantor duty status` / `down` options.
#[derive(Debug, clap::Args)]
pub struct DutyStatusArgs {
    #[command(flatten)]
    pub common: Common,
}

/// `trantor duty appoint` options.
#[derive(Debug, clap::Args)]
pub struct AppointArgs {
    /// The session to appoint ("" clears).
    #[arg(value_name = "SESSION")]
    pub target: String,
    #[command(flatten)]
    pub common: Common,
}

/// The persona of the duty seat.
pub(crate) const DUTY_PERSONA: &str = "duty";

pub(crate) async fn duty(cmd: DutyCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        DutyCommand::Up(a) => up(a).await,
        DutyCommand::Status(a) => status(a).await,
        DutyCommand::Down(a) => {
            down::down(DownArgs {
                seats: vec![DUTY_PERSONA.into()],
                all: false,
                hub: false,
                common: a.common,
            })
            .await
        }
        DutyCommand::Appoint(a) => appoint(a).await,
    }
}

async fn appoint_on(
    hub: &trantor_proto::HubClient,
    session: &str,
) -> anyhow::Result<trantor_proto::AppointReply> {
    hub.post::<_, trantor_proto::AppointReply>(
        "/overseer/duty",
        &trantor_proto::AppointRequest {
            session: Some(session.to_string()),
        },
    )
    .await
    .hub(hub)
}

async fn up(a: DutyUpArgs) -> anyhow::Result<ExitCode> {
    let json_out = a.common.json;
    let common = a.common.clone();
    let code = up::up(UpArgs {
        seats: vec![a.agent],
        dir: a.dir.clone(),
        wait: a.wait,
        no_tmux: a.no_tmux,
        credential: None,
        pool: None,
        common: a.common,
        seat_override: Some((
            DUTY_PERSONA.into(),
            vec![("RUNNER_DUTY_NUDGES".into(), "1".into())],
        )),
    })
    .await?;
    let (mut id, hub) = common.connect()?;
    if common.project.is_none() {
        let dir = match &a.dir {
            Some(d) => d.clone(),
            None => std::env::current_dir()?,
        };
        id.project =
            trantor_proto::identity::project_for(&trantor_proto::identity::ProcessEnv, &dir);
    }
    let session = format!("{DUTY_PERSONA}:{}", id.project);
    let reply = appoint_on(&hub, &session).await?;
    if !json_out {
        match &reply.overridden_by {
            Some(v) => say!(
                "appointed {session} as duty, but the hub's {v} ({}) is in force",
                reply.duty_session.as_deref().unwrap_or("?")
            ),
            None => say!("{session} is the duty session on {}", hub.base()),
        }
    }
    Ok(code)
}

async fn status(a: DutyStatusArgs) -> anyhow::Result<ExitCode> {
    let (id, hub) = a.common.connect()?;
    let duty = hub.health().await.hub(&hub)?.duty;
    let pid = super::seats::runner_pid(DUTY_PERSONA, &id.project);
    if a.common.json {
        print_json(&json!({
            "hub": hub.base(),
            "duty": duty,
            "seat": {"session": format!("{DUTY_PERSONA}:{}", id.project), "pid": pid},
        }))?;
        return Ok(ExitCode::SUCCESS);
    }
    if duty["configured"].as_bool() != Some(true) {
        say!(
            "no duty session on {} (start one with `trantor duty up`, or set RELAY_DUTY_SESSION \
             on the hub); unread mail is not escalated",
            hub.base()
        );
    } else {
        let flag = |k: &str| duty[k].as_bool() == Some(true);
        say!(
            "duty {} ({}): {}{}, {} escalation(s) queued, {} escalated in the last day",
            duty["session"].as_str().unwrap_or("?"),
            duty["source"].as_str().unwrap_or("?"),
            if flag("dark") { "DARK" } else { "on duty" },
            match (flag("beating"), flag("stuck")) {
                (false, _) => " — no heartbeat".to_string(),
                (true, true) => " — beating but not reading its escalations".to_string(),
                (true, false) => String::new(),
            },
            duty["queuedEscalations"],
            duty["escalated"]
        );
    }
    match pid {
        Some(p) => say!(
            "duty seat {DUTY_PERSONA}:{} runs here (pid {p})",
            id.project
        ),
        None => say!("no duty seat runs here for {}", id.project),
    }
    if let Some(f) = duty["failures"].as_array().filter(|f| !f.is_empty()) {
        say!("recent duty failures:");
        for x in f.iter().rev().take(5) {
            say!(
                "  {} {} ({}): {}",
                x["recipient"].as_str().unwrap_or("?"),
                x["kind"].as_str().unwrap_or("?"),
                x["project"].as_str().unwrap_or("?"),
                x["text"].as_str().unwrap_or("")
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

async fn appoint(a: AppointArgs) -> anyhow::Result<ExitCode> {
    let (_, hub) = a.common.connect()?;
    let reply = appoint_on(&hub, a.target.trim()).await?;
    if a.common.json {
        print_json(&reply)?;
    } else {
        match (&reply.appointed, &reply.overridden_by) {
            (_, Some(v)) => say!(
                "recorded, but the hub's {v} ({}) is in force",
                reply.duty_session.as_deref().unwrap_or("?")
            ),
            (Some(s), None) => say!("{s} is the duty session"),
            (None, None) => say!("duty appointment cleared"),
        }
    }
    Ok(ExitCode::SUCCESS)
}

//! `trantor down`: stop the seats `trantor up` started (and, asked to, its hub).

use super::seats;
use super::{Common, print_json};
use serde_json::{Value, json};
use std::process::ExitCode;
use std::time::Duration;
use trantor_proto::RegisterRequest;

pub(crate) const DOWN_HELP: &str = concat!(
    "\
Stops seats started by `trantor up`: SIGTERM to each runner (it finishes cleanly; a turn in
flight is stopped and its message stays queued), then the tmux window closes.

Examples:
  trantor down                 every seat of this project
  trantor down codex           one seat (a persona, or persona:project)
  trantor down --all           every project's seats
  trantor down --all --hub     and the hub `trantor up` started

Without --hub, a hub `trantor up` started is left running (other projects and sessions may use
it), and down says so.

",
    exit_codes!()
);

/// `trantor down` options.
#[derive(Debug, clap::Args)]
pub struct DownArgs {
    /// Seats to stop (persona or persona:project) [default: all of this project's].
    pub seats: Vec<String>,
    /// Stop the seats of every project.
    #[arg(long, conflicts_with = "seats")]
    pub all: bool,
    /// Also stop the hub that `trantor up` started.
    #[arg(long)]
    pub hub: bool,
    #[command(flatten)]
    pub common: Common,
}

pub(crate) async fn down(a: DownArgs) -> anyhow::Result<ExitCode> {
    let (id, hub) = a.common.connect()?;
    let hub = hub.with_timeout(Duration::from_secs(2));
    let targets: Vec<(String, String)> = if !a.seats.is_empty() {
        a.seats
            .iter()
            .map(|s| seats::parse_seat(s, &id.project))
            .collect()
    } else {
        seats::all_records()
            .into_iter()
            .filter(|r| r.stopped.is_none() && (a.all || r.project == id.project))
            .map(|r| (r.persona, r.project))
            .collect()
    };
    let json_out = a.common.json;
    let mut report = Vec::new();
    for (persona, project) in &targets {
        report.push(stop_seat(&hub, persona, project, json_out).await);
    }
    if targets.is_empty() && !json_out {
        say!(
            "no seats recorded for {} (trantor up records the seats it starts)",
            if a.all {
                "any project"
            } else {
                id.project.as_str()
            }
        );
    }
    let hub_state = if a.hub {
        stop_hub(json_out).await
    } else {
        hub_left_running(json_out)
    };
    if json_out {
        print_json(&json!({"seats": report, "hub": hub_state}))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Stop one seat: its runner, its tmux window, and say it is down on the bus; returns its
/// report line.
async fn stop_seat(
    hub: &trantor_proto::HubClient,
    persona: &str,
    project: &str,
    json_out: bool,
) -> Value {
    let session = format!("{persona}:{project}");
    let rec = seats::load_record(persona, project).filter(|r| r.stopped.is_none());
    let pid = seats::runner_pid(persona, project);
    let mut done = Vec::new();
    if let Some(p) = pid {
        let gone =
            tokio::task::spawn_blocking(move || seats::stop_process(p, Duration::from_secs(15)))
                .await
                .unwrap_or(false);
        done.push(if gone {
            format!("runner pid {p} stopped")
        } else {
            format!("runner pid {p} did not stop")
        });
    }
    if let Some(t) = rec.as_ref().and_then(|r| r.tmux.clone())
        && seats::tmux_has(&t)
    {
        let _ = seats::tmux(&["kill-window", "-t", &format!("={t}")]);
        done.push(format!("tmux window {t} closed"));
    }
    let state = if rec.is_none() && pid.is_none() {
        "not-running"
    } else {
        // Say so on the bus too, so peers and the board read the seat as down at once
        // instead of after the presence window.
        let _ = hub
            .register(&RegisterRequest {
                session: session.clone(),
                project: Some(project.to_string()),
                status: Some("down: stopped by trantor down".into()),
                ..Default::default()
            })
            .await;
        seats::mark_stopped(persona, project);
        "stopped"
    };
    if !json_out {
        if state == "stopped" {
            say!(
                "{session:<24} stopped{}",
                if done.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", done.join(", "))
                }
            );
        } else {
            say!("{session:<24} was not running");
        }
    }
    json!({"session": session, "state": state, "detail": done})
}

/// Say what was done about the hub without `--hub`: left running, on purpose (other projects'
/// seats and the person's own sessions may use it), and how to stop it.
fn hub_left_running(json_out: bool) -> Value {
    let Some(h) = seats::load_hub_record().filter(|h| seats::process_alive(h.pid, "hub")) else {
        return Value::Null;
    };
    let others = seats::all_records()
        .into_iter()
        .filter(|r| r.stopped.is_none())
        .count();
    if !json_out {
        say!(
            "hub {} (pid {}, started by trantor up) left running{}: `trantor down --hub` stops it",
            h.url,
            h.pid,
            if others > 0 {
                format!(" — {others} seat(s) still recorded as up")
            } else {
                String::new()
            }
        );
    }
    json!({"url": h.url, "pid": h.pid, "stopped": false, "left": "running"})
}

/// Stop the hub `trantor up` started (`--hub`) and forget its record.
async fn stop_hub(json_out: bool) -> Value {
    match seats::load_hub_record() {
        Some(h) if seats::process_alive(h.pid, "hub") => {
            let pid = h.pid;
            let gone = tokio::task::spawn_blocking(move || {
                seats::stop_process(pid, Duration::from_secs(10))
            })
            .await
            .unwrap_or(false);
            seats::remove_hub_record();
            if !json_out {
                say!(
                    "hub {} (pid {pid}) {}",
                    h.url,
                    if gone { "stopped" } else { "did not stop" }
                );
            }
            json!({"url": h.url, "pid": pid, "stopped": gone})
        }
        _ => {
            seats::remove_hub_record();
            if !json_out {
                say!("no hub started by trantor up is running");
            }
            json!({"stopped": false})
        }
    }
}

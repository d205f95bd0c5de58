//! `trantor sync`: realign a seat branch onto the integration branch after a harvest.
//!
//! Safety rule: every commit on the seat branch that the integration branch lacks must carry a
//! harvest receipt whose main commit the integration branch still contains; otherwise the sync
//! refuses and names each such commit. A seat's unharvested work is never dropped, and a
//! branch is never rewritten under a running turn (the runner's turn-state file says so).

use super::crew::{self, g, short};
use super::{Common, print_json, usage};
use std::process::ExitCode;
use std::time::{Duration, Instant};

pub(crate) const SYNC_HELP: &str = concat!(
    "Run it in a seat worktree, or name the seat from anywhere in the repository.\n\n",
    "Examples:\n  trantor sync                 # in a seat worktree\n  \
     trantor sync claude --dry-run\n  trantor sync codex --wait 600\n\n",
    exit_codes!()
);

/// `trantor sync` options.
#[derive(Debug, clap::Args)]
pub struct SyncArgs {
    /// The seat persona [default: the seat of the worktree you are in].
    pub seat: Option<String>,
    /// Say what would happen; change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// When the seat is mid-turn, wait up to this many seconds for the turn to end (0: refuse).
    #[arg(long, value_name = "SECS", default_value_t = 0)]
    pub wait: u64,
    #[command(flatten)]
    pub common: Common,
}

/// Run `trantor sync`.
pub(crate) async fn sync(a: SyncArgs) -> anyhow::Result<ExitCode> {
    let id = a.common.identity();
    let project = id.project.clone();
    let cwd = std::env::current_dir()?;
    let main = crew::main_checkout(&cwd).map_err(|e| usage(format!("{e:#}")))?;
    let persona = match a.seat {
        Some(s) => s.trim().trim_start_matches("seat/").to_string(),
        None => {
            let here = g(&cwd, &["symbolic-ref", "--quiet", "--short", "HEAD"]).unwrap_or_default();
            match here.strip_prefix("seat/") {
                Some(p) => p.to_string(),
                None => {
                    return Err(usage(
                        "this is not a seat worktree: run sync in one, or name the seat \
                         (trantor sync <persona>)",
                    ));
                }
            }
        }
    };
    let branch = crew::integration_branch(&main)?;
    let seat = crew::seats(&main)?
        .into_iter()
        .find(|s| s.persona == persona)
        .ok_or_else(|| usage(format!("there is no seat branch seat/{persona}")))?;
    let bus = super::seats::bus_dir();
    let _lock = crew::lock_project(&bus, &project, "sync")?;

    let deadline = Instant::now() + Duration::from_secs(a.wait);
    loop {
        let ts = crew::turn_state(&bus, &persona, &project);
        if !ts.mid_turn {
            break;
        }
        if Instant::now() >= deadline {
            anyhow::bail!(
                "seat {persona} is mid-turn (turn {}, card #{}): sync never rewrites a branch \
                 under a running CLI — run it again when the turn ends, or pass --wait <secs>",
                ts.turn,
                ts.card
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let target = crew::resolve(&main, &branch)
        .ok_or_else(|| anyhow::anyhow!("{branch} does not resolve"))?;
    let wt = seat.live_worktree().map(|p| p.to_path_buf());
    if let Some(wt) = &wt {
        let dirty = crew::dirty_files(wt, true)?;
        if !dirty.is_empty() {
            anyhow::bail!(
                "seat {persona} has uncommitted work in {} ({}): commit it (or let \
                 `trantor integrate` commit and harvest it) before syncing — nothing was changed",
                wt.display(),
                dirty.join(", ")
            );
        }
    }
    let receipts = crew::read_receipts(&crew::receipts_path(&bus, &project))?;
    let lacking = crew::commits(&main, &format!("{target}..{}", seat.sha))?;
    let mut unharvested = Vec::new();
    let mut stale = Vec::new();
    let mut dropped = 0usize;
    for (sha, subject) in &lacking {
        let mine: Vec<&crew::Receipt> =
            receipts.all.iter().filter(|r| &r.seat_sha == sha).collect();
        if mine
            .iter()
            .any(|r| crew::is_ancestor(&main, &r.main_sha, &target))
        {
            dropped += 1;
        } else {
            if let Some(r) = mine.first() {
                stale.push(format!(
                    "receipt for {} names {}, which {branch} no longer contains (rewritten?)",
                    short(sha),
                    short(&r.main_sha)
                ));
            }
            unharvested.push(format!("{} {subject}", short(sha)));
        }
    }
    if !unharvested.is_empty() {
        let mut msg = format!(
            "refusing to sync seat/{persona}: {} commit(s) are not on {branch} and have no \
             harvest receipt — they would be lost:\n  {}",
            unharvested.len(),
            unharvested.join("\n  ")
        );
        for s in &stale {
            msg.push_str(&format!("\n  ({s})"));
        }
        msg.push_str(
            "\nHarvest them first: `trantor integrate`, or cherry-pick and `trantor harvest \
             <seat-sha> <main-sha>`.",
        );
        anyhow::bail!(msg);
    }
    if receipts.truncated_tail {
        say!("note: the receipts file ends in a line cut short by a crash; it was skipped");
    }
    let from = seat.sha.clone();
    let moved = from != target;
    if moved && !a.dry_run {
        match &wt {
            Some(wt) => {
                g(wt, &["reset", "--hard", "-q", &target])?;
            }
            None => {
                let _ = g(&main, &["worktree", "prune"]);
                g(&main, &["branch", "-f", &seat.branch, &target])?;
            }
        }
    }
    if a.common.json {
        print_json(&serde_json::json!({
            "seat": persona, "branch": seat.branch, "from": from, "to": target,
            "moved": moved && !a.dry_run, "dryRun": a.dry_run, "droppedHarvested": dropped,
        }))?;
    } else if !moved {
        say!("seat/{persona} is already at {branch} ({})", short(&target));
    } else {
        say!(
            "{}seat/{persona} {} → {} ({branch}){}",
            if a.dry_run { "would move " } else { "moved " },
            short(&from),
            short(&target),
            if dropped > 0 {
                format!(", dropping {dropped} harvested commit(s) by receipt")
            } else {
                String::new()
            }
        );
        if wt.is_none() {
            say!("  (its worktree is gone; only the branch was moved)");
        }
    }
    Ok(ExitCode::SUCCESS)
}

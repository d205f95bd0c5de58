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
    let persona = seat_persona(a.seat.as_deref(), &cwd)?;
    let branch = crew::integration_branch(&main)?;
    let seat = crew::seats(&main)?
        .into_iter()
        .find(|s| s.persona == persona)
        .ok_or_else(|| usage(format!("there is no seat branch seat/{persona}")))?;
    let bus = super::seats::bus_dir();
    let _lock = crew::lock_project(&bus, &project, "sync")?;
    wait_turn_end(&bus, &persona, &project, a.wait).await?;

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
    let ledger = classify_lacking(&lacking, &receipts.all, &branch, |main_sha| {
        crew::is_ancestor(&main, main_sha, &target)
    });
    if !ledger.unharvested.is_empty() {
        anyhow::bail!(refusal(&persona, &branch, &ledger));
    }
    let dropped = ledger.dropped;
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

/// The seat to sync: the one named, else the seat of the worktree `cwd` is in.
fn seat_persona(named: Option<&str>, cwd: &std::path::Path) -> anyhow::Result<String> {
    if let Some(s) = named {
        return Ok(s.trim().trim_start_matches("seat/").to_string());
    }
    let here = g(cwd, &["symbolic-ref", "--quiet", "--short", "HEAD"]).unwrap_or_default();
    match here.strip_prefix("seat/") {
        Some(p) => Ok(p.to_string()),
        None => Err(usage(
            "this is not a seat worktree: run sync in one, or name the seat \
             (trantor sync <persona>)",
        )),
    }
}

/// Wait up to `wait` seconds for the seat's turn to end; refused while it is still mid-turn.
async fn wait_turn_end(
    bus: &std::path::Path,
    persona: &str,
    project: &str,
    wait: u64,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(wait);
    loop {
        let ts = crew::turn_state(bus, persona, project);
        if !ts.mid_turn {
            return Ok(());
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
}

/// The seat commits the integration branch lacks, sorted by their receipts.
#[derive(Debug, Default, PartialEq, Eq)]
struct Lacking {
    /// Harvested: a receipt names a main commit the integration branch contains.
    dropped: usize,
    /// `<short sha> <subject>` of each commit no live receipt covers.
    unharvested: Vec<String>,
    /// Why a receipt did not count (its main commit is gone from the branch).
    stale: Vec<String>,
}

/// Sort the commits the integration branch lacks (`(sha, subject)`) by their receipts;
/// `on_branch` says whether the branch contains a main commit.
fn classify_lacking(
    lacking: &[(String, String)],
    receipts: &[crew::Receipt],
    branch: &str,
    on_branch: impl Fn(&str) -> bool,
) -> Lacking {
    let mut out = Lacking::default();
    for (sha, subject) in lacking {
        let mine: Vec<&crew::Receipt> = receipts.iter().filter(|r| &r.seat_sha == sha).collect();
        if mine.iter().any(|r| on_branch(&r.main_sha)) {
            out.dropped += 1;
        } else {
            if let Some(r) = mine.first() {
                out.stale.push(format!(
                    "receipt for {} names {}, which {branch} no longer contains (rewritten?)",
                    short(sha),
                    short(&r.main_sha)
                ));
            }
            out.unharvested.push(format!("{} {subject}", short(sha)));
        }
    }
    out
}

/// Why sync refuses: the commits it would lose, and how to harvest them.
fn refusal(persona: &str, branch: &str, l: &Lacking) -> String {
    let mut msg = format!(
        "refusing to sync seat/{persona}: {} commit(s) are not on {branch} and have no \
         harvest receipt — they would be lost:\n  {}",
        l.unharvested.len(),
        l.unharvested.join("\n  ")
    );
    for s in &l.stale {
        msg.push_str(&format!("\n  ({s})"));
    }
    msg.push_str(
        "\nHarvest them first: `trantor integrate`, or cherry-pick and `trantor harvest \
         <seat-sha> <main-sha>`.",
    );
    msg
}

#[cfg(test)]
mod tests {
    use super::*;

    fn receipt(seat_sha: &str, main_sha: &str) -> crew::Receipt {
        crew::Receipt {
            project: "p".into(),
            seat: "claude".into(),
            seat_sha: seat_sha.into(),
            main_sha: main_sha.into(),
            branch: "seat/claude".into(),
            into: "main".into(),
            cards: vec![],
            by: "me".into(),
            ts: 0,
        }
    }

    #[test]
    fn lacking_commits_are_sorted_by_their_receipts() {
        let lacking: Vec<(String, String)> = [("a1", "one"), ("b2", "two"), ("c3", "three")]
            .iter()
            .map(|(s, t)| (s.to_string(), t.to_string()))
            .collect();
        // a1: harvested into m1 (on the branch); b2: its receipt names m9 (rewritten away);
        // c3: no receipt.
        let receipts = [receipt("a1", "m1"), receipt("b2", "m9")];
        let l = classify_lacking(&lacking, &receipts, "main", |m| m == "m1");
        assert_eq!(l.dropped, 1);
        assert_eq!(
            l.unharvested,
            vec!["b2 two".to_string(), "c3 three".to_string()]
        );
        assert_eq!(l.stale.len(), 1);
        assert!(
            l.stale[0].contains("main no longer contains"),
            "{:?}",
            l.stale
        );
        let msg = refusal("claude", "main", &l);
        assert!(
            msg.starts_with("refusing to sync seat/claude: 2 commit(s)"),
            "{msg}"
        );

        // Every receipt's main commit on the branch: only the commit without one is left.
        let lenient = classify_lacking(&lacking, &receipts, "main", |_| true);
        assert_eq!(lenient.dropped, 2);
        assert_eq!(lenient.unharvested, vec!["c3 three".to_string()]);
        let all = classify_lacking(&lacking[..1], &receipts, "main", |_| true);
        assert_eq!(
            all,
            Lacking {
                dropped: 1,
                ..Lacking::default()
            }
        );
    }
}

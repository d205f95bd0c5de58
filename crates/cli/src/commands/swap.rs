//! `trantor swap <old> <new-spec> [--now]`: replace a seat's agent (or model) in place.
//!
//! Drives the runner's staged swap handoff (docs/runner.md §22): the replacement runs as the
//! same persona — so the same session, worktree, durable pending queue, cards and contracts —
//! and starts staged, waiting for `<stage>.release`. For a background seat the replacement is
//! started and staged first, then the old runner is stopped after its turn (or at once with
//! `--now`, which commits the worktree's uncommitted changes as a WIP snapshot after the cut),
//! then the release hands over the cursor. A tmux seat's window is reused, so there the old
//! runner stops before the replacement starts. The release cursor is the hub's tip once the old
//! runner is gone, as on any runner boot; what the old runner had taken but not finished is in
//! the pending file the replacement restores.

use super::crew;
use super::up::{Spec, launch, parse_specs};
use super::{Common, print_json, usage};
use serde_json::json;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

pub(crate) const SWAP_HELP: &str = concat!(
    "Examples:\n  trantor swap claude codex            # the claude seat now runs codex\n  \
     trantor swap reviewer claude:opus --now\n\n",
    "The new seat keeps the old one's persona: its worktree, pending queue, open cards (noted \
     on the board) and contracts. Without --now the old runner finishes its turn first.\n\n",
    exit_codes!()
);

/// `trantor swap` options.
#[derive(Debug, clap::Args)]
pub struct SwapArgs {
    /// The seat to replace (its persona, or `persona:project`).
    pub old: String,
    /// The replacement: `agent[:model]`.
    pub new_spec: String,
    /// Cut the old seat's running turn now (its uncommitted work is kept as a WIP commit).
    #[arg(long)]
    pub now: bool,
    /// How long to wait for a running turn to end before giving up (seconds).
    #[arg(long, value_name = "SECS", default_value_t = 1800)]
    pub wait: u64,
    #[command(flatten)]
    pub common: Common,
}

fn wait_for(within: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Run `trantor swap`.
pub(crate) async fn swap(a: SwapArgs) -> anyhow::Result<ExitCode> {
    let (id, hub) = a.common.connect()?;
    let (persona, project) = super::seats::parse_seat(&a.old, &id.project);
    let mut specs = parse_specs(std::slice::from_ref(&a.new_spec))?;
    let Some(mut spec) = specs.pop() else {
        return Err(usage("name the replacement: agent[:model]"));
    };
    let session = format!("{persona}:{project}");
    let bus = super::seats::bus_dir();
    let record = super::seats::load_record(&persona, &project);
    let old_agent = record
        .as_ref()
        .map(|r| r.agent.clone())
        .unwrap_or_else(|| persona.clone());
    let Some(old_pid) = super::seats::runner_pid(&persona, &project) else {
        anyhow::bail!(
            "no running runner for {session}: start the replacement with `trantor up {}`",
            a.new_spec
        );
    };
    let dir: PathBuf = match &record {
        Some(r) => r.dir.clone(),
        None => {
            let cwd = std::env::current_dir()?;
            crew::main_checkout(&cwd).unwrap_or(cwd)
        }
    };
    let tmux = record.as_ref().is_some_and(|r| r.tmux.is_some()) && super::seats::use_tmux(false);
    let stage = bus.join(format!(
        "swap-{}-{}",
        trantor_runner::paths::safe(&persona),
        trantor_runner::paths::safe(&project)
    ));
    let stage_s = stage.to_string_lossy().to_string();
    let ready = PathBuf::from(format!("{stage_s}.ready"));
    let release = PathBuf::from(format!("{stage_s}.release"));
    let _ = std::fs::remove_file(&ready);
    let _ = std::fs::remove_file(&release);
    spec.persona = persona.clone();
    spec.env = vec![
        ("CREW_SWAP_STAGE".into(), stage_s.clone()),
        ("CREW_SWAP_LABEL".into(), format!("{persona}-swap")),
        ("CREW_SWAP_AGENT".into(), spec.agent.clone()),
        ("CREW_PERSONA".into(), persona.clone()),
    ];
    let new_label = match &spec.model {
        Some(m) => format!("{}:{m}", spec.agent),
        None => spec.agent.clone(),
    };
    let sw = Swap {
        persona: &persona,
        project: &project,
        session: &session,
        bus: &bus,
        old_pid,
        old_agent: &old_agent,
        new_label: &new_label,
        wait: a.wait,
        ready: &ready,
    };

    let spawn = |spec: &Spec| launch(spec, &id.hub_url, &project, &dir, tmux);
    let (rec, snapshot) = start_replacement(&sw, &spec, tmux, a.now, spawn)?;
    if !wait_for(Duration::from_secs(60), || ready.exists()) {
        anyhow::bail!(
            "the replacement {new_label} did not get ready within 60 s (log {})",
            rec.log.display()
        );
    }
    let tip = inbox_tip(&hub, &session).await;
    let body = json!({"agent": spec.agent, "cursor": tip, "from": old_agent, "by": id.session});
    trantor_runner::crew::write_atomic(&release, body.to_string().as_bytes())?;
    let mut saved = rec.clone();
    saved.session = session.clone();
    let _ = super::seats::save_record(&saved);
    let booted = {
        let ledger = super::seats::runner_paths(&persona, &project).ledger;
        let since = saved.started;
        wait_for(Duration::from_secs(30), || {
            super::seats::ledger_boot_pid(&ledger, since).is_some()
        })
    };
    let _ = std::fs::remove_file(&ready);

    let (cards, problems, text) = announce(&hub, &sw, snapshot.as_deref(), &id.session).await;
    if a.common.json {
        print_json(&json!({
            "session": session, "from": old_agent, "to": new_label, "cursor": tip,
            "cards": cards, "booted": booted, "snapshot": snapshot, "problems": problems,
        }))?;
    } else {
        say!("{text}");
        if !booted {
            say!(
                "  the replacement has not written its boot row yet (log {})",
                rec.log.display()
            );
        }
        for p in problems {
            say!("  could not note {p}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The seat being swapped.
struct Swap<'a> {
    persona: &'a str,
    project: &'a str,
    session: &'a str,
    bus: &'a std::path::Path,
    /// The running runner's pid.
    old_pid: u32,
    old_agent: &'a str,
    new_label: &'a str,
    /// Seconds to wait for the old runner's turn to end (`--wait`).
    wait: u64,
    /// The file the staged replacement writes when it is ready.
    ready: &'a std::path::Path,
}

/// Stop the old runner: after its turn ends, or at once (`now`), keeping a cut turn's edits as
/// a WIP commit on the seat branch; returns that commit, when one was made.
fn stop_old(sw: &Swap, now: bool) -> anyhow::Result<Option<String>> {
    let (bus, persona, project) = (sw.bus, sw.persona, sw.project);
    if !now {
        let ok = wait_for(Duration::from_secs(sw.wait), || {
            !crew::turn_state(bus, persona, project).mid_turn
        });
        if !ok {
            anyhow::bail!(
                "{} is still mid-turn after {}s: nothing was swapped (use --now to cut the turn)",
                sw.session,
                sw.wait
            );
        }
    }
    if !super::seats::stop_process(sw.old_pid, Duration::from_secs(15)) {
        anyhow::bail!("the old runner (pid {}) did not stop", sw.old_pid);
    }
    // The cut left the CLI's edits uncommitted: keep them as a WIP commit on the seat branch.
    let wt = trantor_runner::crew::seat_worktree_path(bus, project, persona);
    if now && wt.is_dir() {
        use trantor_runner::crew::{SnapshotOutcome, SnapshotWhy, snapshot_wip};
        if let SnapshotOutcome::Committed { sha, files } =
            snapshot_wip(&wt, persona, SnapshotWhy::Cut)
        {
            return Ok(Some(format!(
                "WIP snapshot {} ({files} files)",
                crew::short(&sha)
            )));
        }
    }
    Ok(None)
}

/// Start the replacement and stop the old runner. In tmux (one window per seat) the old one
/// stops first; otherwise the replacement starts staged, and the old one stops only once it is
/// ready (a replacement that fails leaves the old one running). Returns the replacement's
/// record and the WIP snapshot of a cut turn.
fn start_replacement(
    sw: &Swap,
    spec: &Spec,
    tmux: bool,
    now: bool,
    spawn: impl Fn(&Spec) -> Result<super::seats::SeatRecord, String>,
) -> anyhow::Result<(super::seats::SeatRecord, Option<String>)> {
    let stop_new = |rec: &super::seats::SeatRecord| {
        if let Some(pid) = rec.pid {
            super::seats::stop_process(pid, Duration::from_secs(5));
        }
    };
    if tmux {
        let snapshot = stop_old(sw, now)?;
        let rec =
            spawn(spec).map_err(|e| anyhow::anyhow!("could not start the replacement: {e}"))?;
        return Ok((rec, snapshot));
    }
    let rec = spawn(spec).map_err(|e| anyhow::anyhow!("could not start the replacement: {e}"))?;
    if !wait_for(Duration::from_secs(60), || sw.ready.exists()) {
        stop_new(&rec);
        let tail = super::seats::tail(&rec.log, 8).join("\n  ");
        anyhow::bail!(
            "the replacement {} did not get ready within 60 s; {} keeps running {}. Its log:\n  {tail}",
            sw.new_label,
            sw.session,
            sw.old_agent
        );
    }
    match stop_old(sw, now) {
        Ok(snapshot) => Ok((rec, snapshot)),
        Err(e) => {
            stop_new(&rec);
            Err(e)
        }
    }
}

/// Note the seat's open cards and tell the project the seat was swapped; returns the cards,
/// the notes that failed, and the announcement.
async fn announce(
    hub: &trantor_proto::HubClient,
    sw: &Swap<'_>,
    snapshot: Option<&str>,
    by: &str,
) -> (Vec<i64>, Vec<String>, String) {
    let (session, old_agent, new_label) = (sw.session, sw.old_agent, sw.new_label);
    let cards = crew::open_cards(hub, sw.project, session).await;
    let note =
        format!("seat {session} swapped: {old_agent} → {new_label}; the card stays with {session}");
    let problems = crew::note_cards(hub, &cards, &note, by).await;
    let text = format!(
        "🔁 {session} now runs {new_label}, replacing {old_agent} — same worktree, queue, {} open \
         card(s) and contracts{}",
        cards.len(),
        snapshot
            .map(|s| format!("; cut turn kept as {s}"))
            .unwrap_or_default()
    );
    let send = trantor_proto::SendRequest {
        from: by.to_string(),
        to: Some("all".into()),
        text: text.clone(),
        project: Some(sw.project.to_string()),
        kind: Some("status".into()),
        wake: Some(false),
        ..Default::default()
    };
    let _ = hub.send(&send).await;
    (cards, problems, text)
}

/// The seat's inbox cursor now (0 when the hub does not say): the replacement reads from it.
async fn inbox_tip(hub: &trantor_proto::HubClient, session: &str) -> i64 {
    hub.get::<trantor_proto::InboxReply>(
        "/inbox",
        &[
            ("session", session.to_string()),
            ("since", "0".into()),
            ("peek", "1".into()),
            ("limit", "1".into()),
        ],
    )
    .await
    .map(|r| r.cursor)
    .unwrap_or(0)
}

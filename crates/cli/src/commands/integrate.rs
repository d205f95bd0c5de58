//! `trantor integrate`: bring every seat's work home to the integration branch.
//!
//! Run from the project's main checkout. The pass: commit each seat worktree's uncommitted work
//! authored to that seat; merge every seat branch that is ahead, one by one, in a scratch
//! worktree (a conflict stops that seat only, naming the files); verify the merged tree with the
//! project's verify command under a time cap; then move the integration branch with one
//! fast-forward, write the harvest receipts, note the seats' cards, and push when the `push`
//! dial allows.
//!
//! All or nothing: the integration branch moves only at the fast-forward, after verify. A
//! journal written just before it lets the next run finish the receipts when a `kill -9` lands
//! between the move and the receipts. The project lock (flock) keeps two runs apart.

use super::autonomy::{Dials, dials_for};
use super::crew::{self, Receipt, SeatRef, g, g_env, g_ok, short};
use super::{Common, print_json, usage};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

pub(crate) const INTEGRATE_HELP: &str = concat!(
    "Run it in the project's main checkout, on the integration branch (usually main).\n\n",
    "Verify command: .trantor/verify (a shell command), else \"verify\" in \
     .trantor/worktree.json, else detected (cargo test, npm test, python -m pytest, go test \
     ./...). A .trantor/verify not yet committed is read from the main checkout, and said so.\n",
    "Dials (trantor autonomy): commit (default on) lets integrate commit and move the branch; \
     push (default off) lets it push after verify passes.\n\n",
    "Examples:\n  trantor integrate --dry-run\n  trantor integrate\n\n",
    exit_codes!()
);

/// `trantor integrate` options.
#[derive(Debug, clap::Args)]
pub struct IntegrateArgs {
    /// Say what would be committed and merged (conflicts included); change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Time cap for the verify command, in seconds.
    #[arg(long, env = "TRANTOR_VERIFY_TIMEOUT_S", default_value_t = 900)]
    pub verify_timeout: u64,
    #[command(flatten)]
    pub common: Common,
}

/// What happened to one seat.
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
struct SeatOutcome {
    seat: String,
    branch: String,
    /// `merged`, `would-merge`, `up-to-date`, `conflict`, `skipped`.
    state: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    committed: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    conflicts: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    notes: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    main_sha: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    cards: Vec<i64>,
}

/// The whole pass, for `--json`.
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
struct Report {
    project: String,
    branch: String,
    before: String,
    after: String,
    dry_run: bool,
    seats: Vec<SeatOutcome>,
    verify: Option<VerifyOutcome>,
    pushed: bool,
    stops: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
struct VerifyOutcome {
    command: String,
    source: String,
    passed: bool,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tail: Vec<String>,
}

/// The plan written before the integration branch moves.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Journal {
    branch: String,
    before: String,
    after: String,
    receipts: Vec<Receipt>,
}

fn journal_path(bus: &Path, project: &str) -> PathBuf {
    bus.join(format!(
        "integrate-{}.journal.json",
        trantor_runner::paths::safe(project)
    ))
}

fn scratch_path(bus: &Path, project: &str) -> PathBuf {
    bus.join("integrate")
        .join(trantor_runner::paths::safe(project))
}

/// The project's verify command and where it came from (`None` when nothing is declared or
/// detected).
pub(crate) fn verify_command(root: &Path) -> Option<(String, String)> {
    if let Ok(t) = std::fs::read_to_string(root.join(".trantor/verify")) {
        let cmd: Vec<&str> = t
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .collect();
        if !cmd.is_empty() {
            return Some((cmd.join(" && "), ".trantor/verify".into()));
        }
    }
    if let Some(v) = std::fs::read_to_string(root.join(".trantor/worktree.json"))
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .and_then(|v| v.get("verify").and_then(|s| s.as_str()).map(str::to_string))
        .filter(|s| !s.trim().is_empty())
    {
        return Some((v, ".trantor/worktree.json verify".into()));
    }
    let has = |f: &str| root.join(f).exists();
    let detected = if has("Cargo.toml") {
        "cargo test"
    } else if has("package.json") {
        "npm test"
    } else if has("pyproject.toml") || has("pytest.ini") || has("setup.py") || has("tox.ini") {
        // The interpreter's module form: it puts the project root on sys.path, where a bare
        // `pytest` can fail at collection on a layout whose tests import the package.
        return Some((python_pytest(), "detected".into()));
    } else if has("go.mod") {
        "go test ./..."
    } else {
        return None;
    };
    Some((detected.into(), "detected".into()))
}

/// `python -m pytest` where `python` is on PATH, else `python3 -m pytest`.
fn python_pytest() -> String {
    let on_path = |exe: &str| {
        std::env::var_os("PATH")
            .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(exe).is_file()))
    };
    let py = if on_path("python") {
        "python"
    } else {
        "python3"
    };
    format!("{py} -m pytest")
}

/// The verify command for the merged tree `scratch`: a `.trantor/verify` the person wrote in
/// the main checkout `main` but has not committed is used (and said so), else the merged
/// tree's own declaration or detection.
fn verify_for(main: &Path, scratch: &Path) -> Option<(String, String)> {
    let pending = g(
        main,
        &[
            "status",
            "--porcelain",
            "--ignored",
            "--untracked-files=all",
            "--",
            ".trantor/verify",
        ],
    )
    .is_ok_and(|s| !s.trim().is_empty());
    if pending
        && let Some((cmd, _)) = verify_command(main).filter(|(_, src)| src == ".trantor/verify")
    {
        return Some((
            cmd,
            ".trantor/verify, not committed: read from the main checkout; commit it so seats \
             and the next run see it"
                .into(),
        ));
    }
    verify_command(scratch)
}

/// How to get past a failed verify, for the report.
fn verify_hint(v: &VerifyOutcome) -> String {
    if v.source == "detected" {
        format!(
            "`{}` was detected, not declared: declare the command that passes on this project \
             (a card's drill is a good one) in .trantor/verify and commit it, e.g. \
             `echo 'python -m pytest -q' > .trantor/verify && git add .trantor/verify && git \
             commit -m verify`; then run trantor integrate again",
            v.command
        )
    } else {
        format!(
            "fix what fails, or change the command in {} (one shell line; committed), then run \
             trantor integrate again",
            if v.source.starts_with(".trantor/worktree.json") {
                ".trantor/worktree.json's \"verify\""
            } else {
                ".trantor/verify"
            }
        )
    }
}

fn run_verify(dir: &Path, cmd: &str, source: &str, cap: Duration) -> VerifyOutcome {
    let mut c = std::process::Command::new("bash");
    c.arg("-c").arg(format!("{cmd} 2>&1")).current_dir(dir);
    let (passed, text) = match trantor_runner::crew::run_bounded(c, cap) {
        Ok(out) => (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        ),
        Err(e) => (false, e.to_string()),
    };
    let lines: Vec<String> = text.lines().map(str::to_string).collect();
    let tail = if passed {
        Vec::new()
    } else {
        lines[lines.len().saturating_sub(20)..].to_vec()
    };
    VerifyOutcome {
        command: cmd.into(),
        source: source.into(),
        passed,
        tail,
    }
}

/// The environment that authors a commit to a seat (`git blame` then names the seat).
fn seat_author(persona: &str, project: &str) -> Vec<(&'static str, String)> {
    let email = format!(
        "{}@{}.seat.trantor.invalid",
        trantor_runner::paths::safe(persona),
        trantor_runner::paths::safe(project)
    );
    vec![
        ("GIT_AUTHOR_NAME", format!("{persona}:{project}")),
        ("GIT_AUTHOR_EMAIL", email),
    ]
}

/// A committer identity when the repository has none (a fresh machine), so merges still work.
fn committer_fallback(main: &Path) -> Vec<(&'static str, String)> {
    if g(main, &["config", "user.email"]).is_ok_and(|e| !e.is_empty()) {
        return Vec::new();
    }
    vec![
        ("GIT_COMMITTER_NAME", "trantor integrate".into()),
        ("GIT_COMMITTER_EMAIL", "integrate@trantor.invalid".into()),
        ("GIT_AUTHOR_NAME", "trantor integrate".into()),
        ("GIT_AUTHOR_EMAIL", "integrate@trantor.invalid".into()),
    ]
}

fn as_refs<'a>(v: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
    v.iter().map(|(k, s)| (*k, s.as_str())).collect()
}

/// Remove a scratch worktree left by an interrupted run (we hold the lock: it is stale).
fn clear_scratch(main: &Path, scratch: &Path) {
    if scratch.exists() {
        let s = scratch.to_string_lossy();
        let _ = g(main, &["worktree", "remove", "--force", "--force", &s]);
        let _ = std::fs::remove_dir_all(scratch);
    }
    let _ = g(main, &["worktree", "prune"]);
}

/// Finish or discard the plan of a run that was killed. Returns what to tell the person.
fn recover_journal(
    main: &Path,
    bus: &Path,
    project: &str,
    receipts_file: &Path,
) -> anyhow::Result<Option<String>> {
    let path = journal_path(bus, project);
    let Ok(text) = std::fs::read_to_string(&path) else {
        return Ok(None);
    };
    let msg = match serde_json::from_str::<Journal>(&text) {
        Ok(j) => {
            let head = crew::resolve(main, &j.branch);
            if head
                .as_deref()
                .is_some_and(|h| crew::is_ancestor(main, &j.after, h))
            {
                let have = crew::read_receipts(receipts_file)?.all;
                let missing: Vec<Receipt> = j
                    .receipts
                    .into_iter()
                    .filter(|r| {
                        !have
                            .iter()
                            .any(|h| h.seat_sha == r.seat_sha && h.main_sha == r.main_sha)
                    })
                    .collect();
                let n = missing.len();
                crew::append_receipts(receipts_file, &missing)?;
                format!(
                    "an interrupted integrate had moved {} to {}: wrote its {n} missing receipt(s)",
                    j.branch,
                    short(&j.after)
                )
            } else {
                format!(
                    "an interrupted integrate never moved {} (still {}): its plan is discarded",
                    j.branch,
                    head.as_deref().map(short).unwrap_or("?")
                )
            }
        }
        Err(e) => format!("an interrupted integrate left an unreadable plan ({e}): discarded"),
    };
    std::fs::remove_file(&path)?;
    Ok(Some(msg))
}

/// Run `trantor integrate`.
pub(crate) async fn integrate(a: IntegrateArgs) -> anyhow::Result<ExitCode> {
    let (id, hub) = a.common.connect()?;
    let project = id.project.clone();
    let (main, branch) = clean_main_checkout()?;
    let bus = super::seats::bus_dir();
    let _lock = crew::lock_project(&bus, &project, "integrate")?;
    let receipts_file = crew::receipts_path(&bus, &project);
    if let Some(m) = recover_journal(&main, &bus, &project, &receipts_file)? {
        say!("{m}");
    }
    // Refuse early on a damaged receipts file: we will append to it.
    crew::read_receipts(&receipts_file)?;

    let mut report = Report {
        project: project.clone(),
        branch: branch.clone(),
        dry_run: a.dry_run,
        ..Default::default()
    };
    let (dials, hub_ok) = match hub.policy().await {
        Ok(p) => (dials_for(&p, &project), true),
        Err(e) => {
            say!(
                "hub unreachable ({e}): using the default dials (commit on, push off); cards \
                 will not be noted"
            );
            (Dials::default(), false)
        }
    };
    let dry = a.dry_run || !dials.commit;
    if !dials.commit && !a.dry_run {
        report.stops.push(format!(
            "stopped by the commit dial (autonomy commit off for {project}): nothing committed \
             or merged — `trantor autonomy set commit on` to allow it"
        ));
    }
    let before = crew::resolve(&main, "HEAD")
        .ok_or_else(|| anyhow::anyhow!("{branch} has no commit yet"))?;
    report.before = before.clone();
    report.after = before.clone();

    let pass = Pass {
        main: &main,
        bus: &bus,
        project: &project,
        branch: &branch,
        before: &before,
        dry,
        committer: committer_fallback(&main),
        receipts_file: &receipts_file,
        by: &id.session,
    };
    let ahead = commit_seats(&pass, &mut report)?;
    let mut planned: Vec<Receipt> = Vec::new();
    if !ahead.is_empty() {
        planned =
            merge_verify_move(&pass, &hub, hub_ok, &ahead, a.verify_timeout, &mut report).await?;
    }
    // Cards and push, only after the branch moved.
    if report.after != report.before {
        if hub_ok {
            note_harvested_cards(&pass, &hub, &planned, &mut report).await;
        }
        if let Some(stop) = push_if_allowed(&pass, &dials, &mut report) {
            report.stops.push(stop);
        }
    }

    let failed = integrate_failed(&report, &dials, a.dry_run);
    if a.common.json {
        print_json(&report)?;
    } else {
        print_report(&report);
    }
    Ok(ExitCode::from(if failed { 1 } else { 0 }))
}

/// The main checkout the current folder is in and its integration branch; refused in a seat
/// worktree or when the checkout has uncommitted changes.
fn clean_main_checkout() -> anyhow::Result<(PathBuf, String)> {
    let cwd = std::env::current_dir()?;
    let top = g(&cwd, &["rev-parse", "--show-toplevel"])
        .map_err(|_| usage(format!("{} is not inside a git repository", cwd.display())))?;
    let main = PathBuf::from(top);
    let branch = crew::integration_branch(&main)?;
    if branch.starts_with("seat/") {
        return Err(usage(format!(
            "{} is the seat worktree of {branch}: run trantor integrate in the project's main \
             checkout ({})",
            main.display(),
            crew::main_checkout(&main)?.display()
        )));
    }
    let dirty = crew::dirty_files(&main, false)?;
    if !dirty.is_empty() {
        anyhow::bail!(
            "the main checkout {} has uncommitted changes ({}): commit or stash them first — \
             nothing was changed",
            main.display(),
            dirty.join(", ")
        );
    }
    Ok((main, branch))
}

/// What every step of one pass shares.
struct Pass<'a> {
    main: &'a Path,
    bus: &'a Path,
    project: &'a str,
    branch: &'a str,
    /// The integration branch's commit when the pass began.
    before: &'a str,
    /// Change nothing (`--dry-run`, or the commit dial is off).
    dry: bool,
    committer: Vec<(&'static str, String)>,
    receipts_file: &'a Path,
    /// The session the receipts and card notes are written by.
    by: &'a str,
}

/// Commit each seat worktree's uncommitted work (unless mid-turn or dry), one outcome per seat
/// in `report`; returns the seats ahead of the integration branch, with their outcome's index.
fn commit_seats(pass: &Pass, report: &mut Report) -> anyhow::Result<Vec<(usize, SeatRef)>> {
    let mut ahead: Vec<(usize, SeatRef)> = Vec::new();
    for s in crew::seats(pass.main)? {
        let mut o = SeatOutcome {
            seat: s.persona.clone(),
            branch: s.branch.clone(),
            ..Default::default()
        };
        let mut s = s;
        match (&s.worktree, s.live_worktree()) {
            (Some(p), None) => o.notes.push(format!(
                "worktree {} is gone (deleted by hand?): merging its committed branch only; \
                 `git worktree prune` clears git's record",
                p.display()
            )),
            (_, Some(wt)) => {
                let wt = wt.to_path_buf();
                commit_seat_work(pass, &wt, &mut s, &mut o)?;
            }
            (None, None) => {}
        }
        if crew::is_ancestor(pass.main, &s.sha, pass.before) {
            o.state = "up-to-date".into();
        } else {
            ahead.push((report.seats.len(), s));
        }
        report.seats.push(o);
    }
    Ok(ahead)
}

/// Commit one seat worktree's uncommitted files, authored to the seat (or say why not, or what
/// a dry run would commit); moves `s.sha` to the new commit.
fn commit_seat_work(
    pass: &Pass,
    wt: &Path,
    s: &mut SeatRef,
    o: &mut SeatOutcome,
) -> anyhow::Result<()> {
    let project = pass.project;
    let files = crew::dirty_files(wt, true)?;
    let ts = crew::turn_state(pass.bus, &s.persona, project);
    if files.is_empty() {
        return Ok(());
    }
    if ts.mid_turn {
        o.notes.push(format!(
            "mid-turn (turn {}, card #{}): its {} uncommitted file(s) are left for the next \
             integrate",
            ts.turn,
            ts.card,
            files.len()
        ));
        return Ok(());
    }
    if pass.dry {
        o.committed = Some(format!(
            "would commit {} file(s) as {}",
            files.len(),
            s.session(project)
        ));
        return Ok(());
    }
    let mut env = seat_author(&s.persona, project);
    env.extend(
        pass.committer
            .iter()
            .filter(|(k, _)| k.starts_with("GIT_COMMITTER"))
            .cloned(),
    );
    g(wt, &["add", "-A"])?;
    let msg = format!(
        "{}: uncommitted work committed by trantor integrate",
        s.session(project)
    );
    g_env(
        wt,
        &[
            "-c",
            "commit.gpgsign=false",
            "commit",
            "--no-verify",
            "-q",
            "-m",
            &msg,
        ],
        &as_refs(&env),
    )
    .map_err(|e| anyhow::anyhow!("committing {}'s work: {e}", s.persona))?;
    s.sha = g(wt, &["rev-parse", "HEAD"])?;
    o.committed = Some(format!(
        "committed {} file(s) as {} ({})",
        files.len(),
        s.session(project),
        short(&s.sha)
    ));
    Ok(())
}

/// Merge the ahead seats in a scratch worktree, verify the result and, when it passes (or no
/// verify command is declared), fast-forward the integration branch and write the receipts.
/// Returns the receipts written.
async fn merge_verify_move(
    pass: &Pass<'_>,
    hub: &trantor_proto::HubClient,
    hub_ok: bool,
    ahead: &[(usize, SeatRef)],
    verify_timeout: u64,
    report: &mut Report,
) -> anyhow::Result<Vec<Receipt>> {
    let (main, before) = (pass.main, pass.before);
    let scratch = scratch_path(pass.bus, pass.project);
    clear_scratch(main, &scratch);
    if let Some(d) = scratch.parent() {
        std::fs::create_dir_all(d)?;
    }
    g(
        main,
        &[
            "worktree",
            "add",
            "--detach",
            "-q",
            &scratch.to_string_lossy(),
            before,
        ],
    )?;
    let result = merge_all(
        &scratch,
        pass.project,
        pass.branch,
        ahead,
        &pass.committer,
        report,
        pass.dry,
    );
    let mut planned = Vec::new();
    match result {
        Ok(after) if !pass.dry && after != before => {
            let verify = verify_scratch(main, &scratch, verify_timeout);
            report.verify = verify.clone();
            match &verify {
                Some(v) if !v.passed => {
                    report.stops.push(format!(
                        "verify failed (`{}`): {} left at {} — nothing merged. {}",
                        v.command,
                        pass.branch,
                        short(before),
                        verify_hint(v)
                    ));
                    mark_merged(report, "unverified");
                }
                _ => {
                    if hub_ok {
                        for o in report.seats.iter_mut().filter(|o| o.state == "merged") {
                            let session = format!("{}:{}", o.seat, pass.project);
                            o.cards = crew::harvest_cards(hub, pass.project, &session).await;
                        }
                    }
                    planned = move_branch(pass, ahead, &after, report)?;
                }
            }
        }
        Ok(_) => {}
        Err(e) => report.stops.push(format!("{e:#}")),
    }
    clear_scratch(main, &scratch);
    Ok(planned)
}

/// Run the project's verify command in the merged scratch worktree (none when none is declared
/// or detected).
fn verify_scratch(main: &Path, scratch: &Path, verify_timeout: u64) -> Option<VerifyOutcome> {
    if let Some(decl) = trantor_runner::crew::read_declaration(main) {
        trantor_runner::crew::apply_declaration(&decl, main, scratch);
    }
    let (cmd, source) = verify_for(main, scratch)?;
    say!("verifying with `{cmd}` ({source}), cap {verify_timeout}s…");
    Some(run_verify(
        scratch,
        &cmd,
        &source,
        Duration::from_secs(verify_timeout),
    ))
}

/// Every `merged` seat's outcome becomes `state`, with no commit on the integration branch.
fn mark_merged(report: &mut Report, state: &str) {
    for o in report.seats.iter_mut().filter(|o| o.state == "merged") {
        o.state = state.into();
        o.main_sha = None;
    }
}

/// Fast-forward the integration branch to `after` with the journal written first, then the
/// receipts; returns them (none when the branch could not move).
fn move_branch(
    pass: &Pass,
    ahead: &[(usize, SeatRef)],
    after: &str,
    report: &mut Report,
) -> anyhow::Result<Vec<Receipt>> {
    let (main, before, branch) = (pass.main, pass.before, pass.branch);
    let planned = receipts_for(main, before, ahead, report, pass.project, pass.by);
    let j = Journal {
        branch: branch.to_string(),
        before: before.to_string(),
        after: after.to_string(),
        receipts: planned.clone(),
    };
    let jp = journal_path(pass.bus, pass.project);
    trantor_runner::crew::write_atomic(&jp, &serde_json::to_vec(&j)?)?;
    match g(main, &["merge", "--ff-only", "-q", after]) {
        Ok(_) => {
            crew::append_receipts(pass.receipts_file, &planned)?;
            std::fs::remove_file(&jp)?;
            report.after = after.to_string();
            Ok(planned)
        }
        Err(e) => {
            let _ = std::fs::remove_file(&jp);
            report.stops.push(format!(
                "could not move {branch} to the merged commit ({e}): {branch} left at {}",
                short(before)
            ));
            mark_merged(report, "not-moved");
            Ok(Vec::new())
        }
    }
}

/// Note each harvested seat's cards with what was harvested.
async fn note_harvested_cards(
    pass: &Pass<'_>,
    hub: &trantor_proto::HubClient,
    planned: &[Receipt],
    report: &mut Report,
) {
    for o in report.seats.iter_mut().filter(|o| o.state == "merged") {
        let seat_sha = planned
            .iter()
            .rev()
            .find(|r| r.seat == o.seat)
            .map(|r| r.seat_sha.clone())
            .unwrap_or_default();
        let note = format!(
            "harvested {} as {} ({} → {}, trantor integrate)",
            short(&seat_sha),
            short(o.main_sha.as_deref().unwrap_or("")),
            o.branch,
            pass.branch
        );
        for p in crew::note_cards(hub, &o.cards, &note, pass.by).await {
            o.notes.push(format!("could not note {p}"));
        }
    }
}

/// Push the moved branch when the push dial, a passed verify and an upstream allow it; else
/// why not.
fn push_if_allowed(pass: &Pass, dials: &Dials, report: &mut Report) -> Option<String> {
    let (project, branch) = (pass.project, pass.branch);
    let verified = report.verify.as_ref().is_some_and(|v| v.passed);
    if !dials.push {
        Some(format!(
            "not pushed: the push dial is off for {project} (`trantor autonomy set push on`)"
        ))
    } else if !verified {
        Some("not pushed: no verify command passed (declare one in .trantor/verify)".into())
    } else if !g_ok(pass.main, &["rev-parse", "--abbrev-ref", "@{upstream}"]) {
        Some(format!(
            "not pushed: {branch} has no upstream (git push -u origin {branch} once)"
        ))
    } else {
        match g(pass.main, &["push", "-q"]) {
            Ok(_) => {
                report.pushed = true;
                None
            }
            Err(e) => Some(format!("push failed: {e}")),
        }
    }
}

/// Whether the pass failed: a seat conflicted or was not moved, verify failed, the push failed,
/// or the commit dial stopped a real run.
fn integrate_failed(report: &Report, dials: &Dials, dry_run: bool) -> bool {
    report
        .seats
        .iter()
        .any(|o| o.state == "conflict" || o.state == "unverified" || o.state == "not-moved")
        || report.verify.as_ref().is_some_and(|v| !v.passed)
        || report.stops.iter().any(|s| s.starts_with("push failed"))
        || (!dials.commit && !dry_run)
}

/// Merge each ahead seat into the scratch worktree in turn; a conflict is aborted and that
/// seat stopped. Returns the scratch HEAD after the merges.
#[allow(clippy::too_many_arguments)]
fn merge_all(
    scratch: &Path,
    project: &str,
    branch: &str,
    ahead: &[(usize, SeatRef)],
    committer: &[(&'static str, String)],
    report: &mut Report,
    dry: bool,
) -> anyhow::Result<String> {
    for (i, s) in ahead {
        let n = g(
            scratch,
            &["rev-list", "--count", &format!("HEAD..{}", s.sha)],
        )?;
        let msg = format!(
            "integrate {} into {branch} ({n} commit(s) from {}:{project})",
            s.branch, s.persona
        );
        let merged = g_env(
            scratch,
            &[
                "-c",
                "commit.gpgsign=false",
                "merge",
                "--no-ff",
                "--no-verify",
                "-q",
                "-m",
                &msg,
                &s.sha,
            ],
            &as_refs(committer),
        );
        let o = &mut report.seats[*i];
        match merged {
            Ok(_) => {
                let head = g(scratch, &["rev-parse", "HEAD"])?;
                o.state = if dry { "would-merge" } else { "merged" }.into();
                o.main_sha = Some(head);
            }
            Err(e) => {
                let files =
                    g(scratch, &["diff", "--name-only", "--diff-filter=U"]).unwrap_or_default();
                let _ = g(scratch, &["merge", "--abort"]);
                let _ = g(scratch, &["reset", "--hard", "-q", "HEAD"]);
                o.state = "conflict".into();
                o.conflicts = files.lines().map(str::to_string).collect();
                if o.conflicts.is_empty() {
                    o.notes.push(format!("merge failed: {e}"));
                }
            }
        }
    }
    g(scratch, &["rev-parse", "HEAD"])
}

/// One receipt per seat commit the merges brought in.
fn receipts_for(
    main: &Path,
    before: &str,
    ahead: &[(usize, SeatRef)],
    report: &Report,
    project: &str,
    by: &str,
) -> Vec<Receipt> {
    let mut out = Vec::new();
    let now = trantor_proto::now_ms();
    for (i, s) in ahead {
        let o = &report.seats[*i];
        let (Some(main_sha), "merged") = (&o.main_sha, o.state.as_str()) else {
            continue;
        };
        let range = format!("{before}..{}", s.sha);
        for (sha, _) in crew::commits(main, &range).unwrap_or_default() {
            out.push(Receipt {
                project: project.into(),
                seat: s.persona.clone(),
                seat_sha: sha,
                main_sha: main_sha.clone(),
                branch: s.branch.clone(),
                into: report.branch.clone(),
                cards: o.cards.clone(),
                by: by.into(),
                ts: now,
            });
        }
    }
    out
}

fn print_report(r: &Report) {
    let what = if r.dry_run { "dry run: " } else { "" };
    say!(
        "{what}integrating {} seat branch(es) into {} at {}",
        r.seats.len(),
        r.branch,
        short(&r.before)
    );
    for o in &r.seats {
        let mut line = format!("  {} ({}): {}", o.seat, o.branch, o.state);
        if let Some(m) = &o.main_sha {
            line.push_str(&format!(" as {}", short(m)));
        }
        if let Some(c) = &o.committed {
            line.push_str(&format!(" — {c}"));
        }
        if !o.conflicts.is_empty() {
            line.push_str(&format!(
                " — conflicts in {}; {} left as it was",
                o.conflicts.join(", "),
                o.branch
            ));
        }
        if !o.cards.is_empty() {
            let ids: Vec<String> = o.cards.iter().map(|c| format!("#{c}")).collect();
            line.push_str(&format!(" — noted {}", ids.join(" ")));
        }
        say!("{line}");
        for n in &o.notes {
            say!("    {n}");
        }
    }
    match &r.verify {
        Some(v) if v.passed => say!("verify passed: `{}` ({})", v.command, v.source),
        Some(v) => {
            say!("verify FAILED: `{}` ({}); last lines:", v.command, v.source);
            for l in &v.tail {
                say!("    {l}");
            }
        }
        None if r.after != r.before => {
            say!("no verify command declared or detected (.trantor/verify): not verified")
        }
        None => {}
    }
    if r.after != r.before {
        say!(
            "{} moved {} → {}",
            r.branch,
            short(&r.before),
            short(&r.after)
        );
    } else if !r.dry_run {
        say!("{} unchanged at {}", r.branch, short(&r.before));
    }
    if r.pushed {
        say!("pushed {}", r.branch);
    }
    for s in &r.stops {
        say!("{s}");
    }
}

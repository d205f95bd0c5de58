//! What `integrate`, `harvest`, `sync` and `swap` share: git in the project's checkouts, the
//! seats of a project, the harvest receipts in the bus directory, the integrate lock, and the
//! runner's turn-state file.
//!
//! Safety rule: nothing here rewrites a branch. Branch moves happen in the verbs, each behind a
//! check that says why it is safe (a receipt for every dropped commit, a fast-forward, a merge
//! made in a scratch worktree first).

use anyhow::Context;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;
use trantor_proto::CardStatus;
use trantor_runner::crew::{GitError, git};

/// How long one git call of these verbs may take.
pub(crate) const GIT_TIMEOUT: Duration = Duration::from_secs(120);

/// Run git in `dir`, naming the directory in the error.
pub(crate) fn g(dir: &Path, args: &[&str]) -> anyhow::Result<String> {
    git(dir, args, GIT_TIMEOUT).map_err(|e| anyhow::anyhow!("{e} (in {})", dir.display()))
}

/// Run git in `dir` and say only whether it succeeded.
pub(crate) fn g_ok(dir: &Path, args: &[&str]) -> bool {
    git(dir, args, GIT_TIMEOUT).is_ok()
}

/// Run git in `dir` with extra environment variables (an author identity).
pub(crate) fn g_env(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Result<String, GitError> {
    let mut cmd = trantor_proto::git::git_command(dir);
    cmd.args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = trantor_runner::crew::run_bounded(cmd, GIT_TIMEOUT)?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    } else {
        Err(GitError::Failed {
            args: args.join(" "),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        })
    }
}

/// The full sha of `rev` as a commit, or `None` when it does not resolve.
pub(crate) fn resolve(dir: &Path, rev: &str) -> Option<String> {
    git(
        dir,
        &[
            "rev-parse",
            "--verify",
            "--quiet",
            &format!("{rev}^{{commit}}"),
        ],
        GIT_TIMEOUT,
    )
    .ok()
    .filter(|s| !s.is_empty())
}

/// Whether `a` is an ancestor of (or equal to) `b`.
pub(crate) fn is_ancestor(dir: &Path, a: &str, b: &str) -> bool {
    g_ok(dir, &["merge-base", "--is-ancestor", a, b])
}

/// Tracked files with uncommitted changes (`git status --porcelain`, untracked files included
/// when `untracked`).
pub(crate) fn dirty_files(dir: &Path, untracked: bool) -> anyhow::Result<Vec<String>> {
    let flag = if untracked {
        "--untracked-files=all"
    } else {
        "--untracked-files=no"
    };
    let raw = trantor_runner::crew::git_raw(dir, &["status", "--porcelain", flag], GIT_TIMEOUT)
        .map_err(|e| anyhow::anyhow!("{e} (in {})", dir.display()))?;
    Ok(String::from_utf8_lossy(&raw)
        .lines()
        .filter(|l| l.len() > 3)
        .map(|l| l[3..].to_string())
        .collect())
}

/// `<short sha> <subject>` for each commit in `range`, oldest first.
pub(crate) fn commits(dir: &Path, range: &str) -> anyhow::Result<Vec<(String, String)>> {
    let out = g(dir, &["log", "--reverse", "--format=%H %s", range])?;
    Ok(out
        .lines()
        .filter_map(|l| l.split_once(' ').or(Some((l, ""))))
        .filter(|(s, _)| !s.is_empty())
        .map(|(s, m)| (s.to_string(), m.to_string()))
        .collect())
}

/// The project's main checkout as seen from `dir`: the first entry of `git worktree list`.
pub(crate) fn main_checkout(dir: &Path) -> anyhow::Result<PathBuf> {
    let list = g(dir, &["worktree", "list", "--porcelain"])
        .with_context(|| format!("{} is not inside a git repository", dir.display()))?;
    list.lines()
        .find_map(|l| l.strip_prefix("worktree "))
        .map(PathBuf::from)
        .ok_or_else(|| anyhow::anyhow!("git worktree list gave no main checkout"))
}

/// The branch checked out in the main checkout: the integration head's name.
pub(crate) fn integration_branch(main: &Path) -> anyhow::Result<String> {
    match git(
        main,
        &["symbolic-ref", "--quiet", "--short", "HEAD"],
        GIT_TIMEOUT,
    ) {
        Ok(b) if !b.is_empty() => Ok(b),
        _ => {
            let sha = g(main, &["rev-parse", "--short", "HEAD"]).unwrap_or_default();
            anyhow::bail!(
                "{} has a detached HEAD (at {sha}): check out the integration branch first \
                 (git switch main)",
                main.display()
            )
        }
    }
}

/// The sha a contract's `base:` line names: `rev` resolved in this repository, or the
/// integration head (the main checkout's branch) when `rev` is empty.
pub(crate) fn contract_base(rev: &str) -> anyhow::Result<String> {
    let cwd = std::env::current_dir()?;
    let main = main_checkout(&cwd)
        .map_err(|e| anyhow::anyhow!("--base needs a git repository here: {e:#}"))?;
    let rev = if rev.trim().is_empty() {
        integration_branch(&main)?
    } else {
        rev.trim().to_string()
    };
    resolve(&main, &rev).ok_or_else(|| anyhow::anyhow!("--base: cannot resolve {rev} to a commit"))
}

/// One seat branch of the project and its worktree, if any.
#[derive(Debug, Clone)]
pub(crate) struct SeatRef {
    /// The persona (`seat/<persona>`).
    pub persona: String,
    /// The branch name.
    pub branch: String,
    /// The branch's commit.
    pub sha: String,
    /// The worktree git knows for the branch (it may have been deleted by hand).
    pub worktree: Option<PathBuf>,
}

impl SeatRef {
    /// The seat's bus session.
    pub fn session(&self, project: &str) -> String {
        format!("{}:{project}", self.persona)
    }

    /// The worktree when it still exists on disk.
    pub fn live_worktree(&self) -> Option<&Path> {
        self.worktree.as_deref().filter(|p| p.is_dir())
    }
}

/// Every `seat/*` branch of the repository, with the worktree each is checked out in.
pub(crate) fn seats(main: &Path) -> anyhow::Result<Vec<SeatRef>> {
    let refs = g(
        main,
        &[
            "for-each-ref",
            "--format=%(refname:short) %(objectname)",
            "refs/heads/seat/",
        ],
    )?;
    let list = g(main, &["worktree", "list", "--porcelain"])?;
    let mut trees: Vec<(PathBuf, String)> = Vec::new();
    let mut path: Option<PathBuf> = None;
    for l in list.lines() {
        if let Some(p) = l.strip_prefix("worktree ") {
            path = Some(PathBuf::from(p));
        } else if let Some(b) = l.strip_prefix("branch refs/heads/")
            && let Some(p) = &path
        {
            trees.push((p.clone(), b.to_string()));
        }
    }
    Ok(refs
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(branch, sha)| SeatRef {
            persona: branch.trim_start_matches("seat/").to_string(),
            branch: branch.to_string(),
            sha: sha.to_string(),
            worktree: trees
                .iter()
                .find(|(_, b)| b == branch)
                .map(|(p, _)| p.clone()),
        })
        .collect())
}

/// One harvest receipt: a seat commit that reached the integration branch as `main_sha`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Receipt {
    /// Project.
    pub project: String,
    /// Seat persona.
    pub seat: String,
    /// The seat commit (full sha).
    pub seat_sha: String,
    /// The commit on the integration branch that carries it.
    pub main_sha: String,
    /// The seat branch.
    pub branch: String,
    /// The integration branch.
    #[serde(default)]
    pub into: String,
    /// Cards it closed work on.
    #[serde(default)]
    pub cards: Vec<i64>,
    /// Who harvested.
    pub by: String,
    /// When, ms.
    pub ts: i64,
}

/// The receipts file of a project: `<bus>/harvest/<safe project>.jsonl`, one receipt a line.
pub(crate) fn receipts_path(bus: &Path, project: &str) -> PathBuf {
    bus.join("harvest")
        .join(format!("{}.jsonl", trantor_runner::paths::safe(project)))
}

/// What reading the receipts file found.
#[derive(Debug, Default)]
pub(crate) struct Receipts {
    /// The valid receipts.
    pub all: Vec<Receipt>,
    /// A last line cut short by a crash mid-append (ignored, reported).
    pub truncated_tail: bool,
}

/// Read the receipts. A damaged line in the middle of the file is an error naming the line
/// (a receipt that cannot be read could be the one that proves a commit harvested); a last line
/// without its newline is what a crash mid-append leaves, and is skipped with a warning.
pub(crate) fn read_receipts(path: &Path) -> anyhow::Result<Receipts> {
    let text = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Receipts::default()),
        Err(e) => return Err(anyhow::anyhow!("cannot read {}: {e}", path.display())),
    };
    let complete = text.ends_with(b"\n");
    let text = String::from_utf8_lossy(&text);
    let lines: Vec<&str> = text.split('\n').collect();
    let mut out = Receipts::default();
    let n = lines.len();
    for (i, line) in lines.iter().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Receipt>(line) {
            Ok(r) => out.all.push(r),
            Err(_) if i + 1 == n && !complete => out.truncated_tail = true,
            Err(e) => anyhow::bail!(
                "receipts file {} line {} is not a receipt ({e}): fix or remove that line \
                 (nothing was changed)",
                path.display(),
                i + 1
            ),
        }
    }
    Ok(out)
}

/// Append receipts durably (one write, then fsync). A tail left by a crash mid-append is dealt
/// with first: a whole receipt missing only its newline is ended, a cut-off line is dropped (it
/// never was a receipt), so the file always parses after the append.
pub(crate) fn append_receipts(path: &Path, new: &[Receipt]) -> anyhow::Result<()> {
    if new.is_empty() {
        return Ok(());
    }
    if let Some(d) = path.parent() {
        std::fs::create_dir_all(d)?;
    }
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .read(true)
        .append(true)
        .open(path)
        .with_context(|| format!("cannot open {}", path.display()))?;
    let existing = std::fs::read(path).unwrap_or_default();
    let mut buf = String::new();
    if !existing.is_empty() && !existing.ends_with(b"\n") {
        let cut = existing
            .iter()
            .rposition(|b| *b == b'\n')
            .map_or(0, |i| i + 1);
        if serde_json::from_slice::<Receipt>(&existing[cut..]).is_ok() {
            buf.push('\n');
        } else {
            f.set_len(cut as u64)?;
        }
    }
    for r in new {
        buf.push_str(&serde_json::to_string(r)?);
        buf.push('\n');
    }
    f.write_all(buf.as_bytes())?;
    f.sync_all()?;
    Ok(())
}

/// An exclusive lock held for the life of the value (flock: a killed holder releases it).
pub(crate) struct Lock {
    _file: nix::fcntl::Flock<std::fs::File>,
}

/// Take `<bus>/integrate-<safe project>.lock` without waiting; the error names the holder.
pub(crate) fn lock_project(bus: &Path, project: &str, verb: &str) -> anyhow::Result<Lock> {
    std::fs::create_dir_all(bus)?;
    let path = bus.join(format!(
        "integrate-{}.lock",
        trantor_runner::paths::safe(project)
    ));
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(&path)
        .with_context(|| format!("cannot open {}", path.display()))?;
    match nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock) {
        Ok(mut f) => {
            let _ = f.set_len(0);
            let _ = writeln!(f, "{} {verb}", std::process::id());
            Ok(Lock { _file: f })
        }
        Err((_, _)) => {
            let holder = std::fs::read_to_string(&path).unwrap_or_default();
            anyhow::bail!(
                "another trantor integrate/sync is running for {project} ({}): wait for it to \
                 finish (lock {})",
                holder.trim(),
                path.display()
            )
        }
    }
}

/// What the runner's turn-state file says about a seat right now.
#[derive(Debug, Clone, Default)]
pub(crate) struct TurnState {
    /// Whether a turn is running (phase `working` and the runner that wrote it alive).
    pub mid_turn: bool,
    /// The turn number.
    pub turn: i64,
    /// The card the turn is on.
    pub card: i64,
}

/// Read `<bus>/turnstate-<persona>-<project>.json`. A `working` phase written by a runner that
/// is no longer alive (killed) is not a running turn.
pub(crate) fn turn_state(bus: &Path, persona: &str, project: &str) -> TurnState {
    let p = trantor_runner::paths::Paths::new(bus, persona, project).turnstate;
    let Some(v) = std::fs::read_to_string(p)
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
    else {
        return TurnState::default();
    };
    let working = v.get("phase").and_then(|p| p.as_str()) == Some("working");
    let alive = match v
        .get("pid")
        .and_then(|p| p.as_i64())
        .and_then(|p| i32::try_from(p).ok())
    {
        Some(pid) => nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok(),
        None => true,
    };
    TurnState {
        mid_turn: working && alive,
        turn: v.get("turn").and_then(|t| t.as_i64()).unwrap_or(0),
        card: v.get("card").and_then(|t| t.as_i64()).unwrap_or(0),
    }
}

/// The seat's open cards (assigned to its session and not done or deleted), newest first.
pub(crate) async fn open_cards(
    hub: &trantor_proto::HubClient,
    project: &str,
    session: &str,
) -> Vec<i64> {
    seat_cards(hub, project, session, |c| c.status != CardStatus::Done).await
}

/// The seat's cards whose work a harvest brings home: assigned to its session, not deleted, and
/// either still open or closed without a `harvested …` note yet (in the documented order the
/// person closes the card before `integrate`; that card is noted too, once). Newest first.
pub(crate) async fn harvest_cards(
    hub: &trantor_proto::HubClient,
    project: &str,
    session: &str,
) -> Vec<i64> {
    seat_cards(hub, project, session, |c| {
        c.status != CardStatus::Done || !c.log.iter().any(|l| l.text.starts_with("harvested "))
    })
    .await
}

/// The ids of the project's cards assigned to `session`, not deleted, that `keep` keeps, in the
/// hub's order (newest first); none when the board cannot be read.
async fn seat_cards(
    hub: &trantor_proto::HubClient,
    project: &str,
    session: &str,
    keep: impl Fn(&trantor_proto::Card) -> bool,
) -> Vec<i64> {
    match hub.tasks(Some(project)).await {
        Ok(cards) => cards
            .into_iter()
            .filter(|c| c.assignee == session && !c.status.is_deleted() && keep(c))
            .map(|c| c.id)
            .collect(),
        Err(_) => Vec::new(),
    }
}

/// Add `note` to each card's log (best effort; failures are reported, not fatal).
pub(crate) async fn note_cards(
    hub: &trantor_proto::HubClient,
    cards: &[i64],
    note: &str,
    by: &str,
) -> Vec<String> {
    let mut problems = Vec::new();
    for id in cards {
        let req = trantor_proto::TaskUpdateRequest {
            id: *id,
            note: Some(note.to_string()),
            by: Some(by.to_string()),
            ..Default::default()
        };
        if let Err(e) = hub.task_update(&req).await {
            problems.push(format!("card #{id}: {e}"));
        }
    }
    problems
}

/// The first seven characters of a sha.
pub(crate) fn short(sha: &str) -> &str {
    &sha[..sha.len().min(7)]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(seat: &str, s: &str) -> Receipt {
        Receipt {
            project: "p".into(),
            seat: seat.into(),
            seat_sha: s.into(),
            main_sha: "m".into(),
            branch: format!("seat/{seat}"),
            into: "main".into(),
            cards: vec![3],
            by: "me".into(),
            ts: 1,
        }
    }

    #[test]
    fn receipts_round_trip_and_a_crash_tail_is_skipped() {
        let d = tempfile::tempdir().expect("tmp");
        let p = receipts_path(d.path(), "my.proj");
        assert!(p.ends_with("harvest/my_proj.jsonl"));
        append_receipts(&p, &[r("a", "1")]).expect("append");
        // A crash mid-append leaves half a line.
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&p)
            .expect("open");
        f.write_all(b"{\"project\":\"p\",\"se").expect("write");
        drop(f);
        let got = read_receipts(&p).expect("read");
        assert_eq!(got.all, vec![r("a", "1")]);
        assert!(got.truncated_tail);
        // The next append drops the cut-off line, so the file parses again.
        append_receipts(&p, &[r("b", "2")]).expect("append");
        let got = read_receipts(&p).expect("read");
        assert_eq!(got.all, vec![r("a", "1"), r("b", "2")]);
        // Damage in the middle is refused, naming the line.
        let text = std::fs::read_to_string(&p).expect("text");
        std::fs::write(&p, format!("garbage\n{text}")).expect("write");
        let err = read_receipts(&p).expect_err("corrupt middle line");
        assert!(err.to_string().contains("line 1"), "{err}");
    }

    #[test]
    fn a_missing_file_is_no_receipts() {
        let d = tempfile::tempdir().expect("tmp");
        let got = read_receipts(&d.path().join("none.jsonl")).expect("read");
        assert!(got.all.is_empty() && !got.truncated_tail);
    }

    #[test]
    fn the_lock_is_exclusive_and_released_on_drop() {
        let d = tempfile::tempdir().expect("tmp");
        let l = lock_project(d.path(), "p", "integrate").expect("first");
        let err = lock_project(d.path(), "p", "integrate")
            .err()
            .expect("second must fail");
        assert!(err.to_string().contains("another trantor integrate"));
        drop(l);
        lock_project(d.path(), "p", "integrate").expect("free again");
    }
}

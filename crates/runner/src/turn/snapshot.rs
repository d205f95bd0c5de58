//! The cut snapshot (docs/runner.md §9.2): before a time-box cut kills the agent CLI, and again from the
//! backstop when the turn shell itself wedged, the seat worktree's uncommitted changes are
//! committed as a WIP commit on the seat branch, so a cut never throws work away.
//!
//! Safety is the point of this module. It only ever adds one commit on `seat/<persona>` in the
//! worktree it was given: it never pushes, resets, amends, stashes, switches or creates branches,
//! never runs hooks (`core.hooksPath=/dev/null` and `--no-verify`), never signs
//! (`commit.gpgsign=false`, `--no-gpg-sign`), and refuses (`Skipped`) whenever HEAD is not
//! `refs/heads/seat/<persona>`, the directory is not the top of its own checkout, or that
//! checkout is a main working tree rather than a linked (seat) worktree.

use std::path::Path;
use std::time::Duration;

use crate::periphery::worktree::{git, git_raw, same_path, seat_branch};

/// Per-call limit of every git command of a snapshot (docs/runner.md §9.2).
const GIT_TIMEOUT: Duration = Duration::from_secs(20);

/// How often `git add` is retried while another git process holds the index lock (100 ms apart).
const INDEX_LOCK_RETRIES: u32 = 20;

/// Identity used only when the repository has none configured, so a snapshot never fails for a
/// missing `user.email` on a fresh machine. A configured identity is always kept.
const FALLBACK_NAME: &str = "trantor runner";
const FALLBACK_EMAIL: &str = "runner@trantor.invalid";

/// Why a snapshot is taken; it picks the commit message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SnapshotWhy {
    /// The time box ran out while the CLI was still working: `wip: cut at box, N files`.
    Cut,
    /// The backstop fired because the turn shell itself wedged. The reference's backstop
    /// snapshots with reason `box`, so the message is the same `wip: cut at box, N files`.
    Backstop,
    /// The watchdog's stall window ended the turn: `wip: cut at stall, N files`.
    Stall,
}

impl SnapshotWhy {
    /// The reason word of the commit message.
    pub fn reason(self) -> &'static str {
        match self {
            SnapshotWhy::Cut | SnapshotWhy::Backstop => "box",
            SnapshotWhy::Stall => "stall",
        }
    }
}

/// What a snapshot did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SnapshotOutcome {
    /// A WIP commit landed on the seat branch.
    Committed {
        /// The new commit.
        sha: String,
        /// How many paths it captured (a rename or copy counts once).
        files: usize,
    },
    /// Nothing to commit.
    Clean,
    /// Nothing was committed, for the reason given (a safety refusal or a git failure).
    Skipped(String),
}

/// The commit message of a snapshot.
pub fn snapshot_message(why: SnapshotWhy, files: usize) -> String {
    format!("wip: cut at {}, {files} files", why.reason())
}

/// Commit the seat worktree's uncommitted changes as one WIP commit on `seat/<persona>`.
///
/// Call it while the CLI is still alive, before the kill, and again after the kill (the second
/// pass usually finds the tree `Clean`). Every git call is bounded to 20 s. Never panics.
pub fn snapshot_wip(worktree: &Path, persona: &str, why: SnapshotWhy) -> SnapshotOutcome {
    match try_snapshot(worktree, persona, why) {
        Ok(outcome) => {
            match &outcome {
                SnapshotOutcome::Committed { sha, files } => tracing::info!(
                    "cut WIP snapshot ({why:?}): {files} files at {sha} on {}",
                    seat_branch(persona)
                ),
                SnapshotOutcome::Clean => tracing::debug!("cut WIP snapshot: tree clean"),
                SnapshotOutcome::Skipped(r) => tracing::warn!("cut WIP snapshot skipped: {r}"),
            }
            outcome
        }
        Err(reason) => {
            tracing::warn!("cut WIP snapshot failed: {reason}");
            SnapshotOutcome::Skipped(reason)
        }
    }
}

fn try_snapshot(
    worktree: &Path,
    persona: &str,
    why: SnapshotWhy,
) -> Result<SnapshotOutcome, String> {
    let err = |e: crate::periphery::worktree::GitError| e.to_string();
    // 1. Only the top of a checkout: a nested scratch dir must never capture its parent repo.
    let top = git(worktree, &["rev-parse", "--show-toplevel"], GIT_TIMEOUT).map_err(err)?;
    if !same_path(Path::new(&top), worktree) {
        return Ok(SnapshotOutcome::Skipped(format!(
            "{} is not the top of its checkout ({top})",
            worktree.display()
        )));
    }
    // 1b. Only a linked worktree: the operator's main checkout is never a seat's, even when it
    // happens to have the seat branch checked out.
    let dirs = git(
        worktree,
        &[
            "rev-parse",
            "--path-format=absolute",
            "--git-dir",
            "--git-common-dir",
        ],
        GIT_TIMEOUT,
    )
    .map_err(err)?;
    let mut lines = dirs.lines();
    if let (Some(git_dir), Some(common)) = (lines.next(), lines.next())
        && same_path(Path::new(git_dir), Path::new(common))
    {
        return Ok(SnapshotOutcome::Skipped(format!(
            "{} is a main checkout, not a seat worktree",
            worktree.display()
        )));
    }
    // 2. The branch. A detached HEAD is refused, as in the reference.
    let head_ref = match git(worktree, &["symbolic-ref", "-q", "HEAD"], GIT_TIMEOUT) {
        Ok(r) => r,
        Err(_) => return Ok(SnapshotOutcome::Skipped("HEAD is detached".into())),
    };
    // 3. Anything to capture?
    let status = git_raw(
        worktree,
        &["status", "--porcelain=v1", "-z", "--untracked-files=all"],
        GIT_TIMEOUT,
    )
    .map_err(err)?;
    let files = count_status_records(&status);
    if files == 0 {
        return Ok(SnapshotOutcome::Clean);
    }
    // 4. Only the seat's own branch, never the operator's or another seat's.
    let want = format!("refs/heads/{}", seat_branch(persona));
    if head_ref != want {
        return Ok(SnapshotOutcome::Skipped(format!(
            "dirty branch {} is not the seat branch {}",
            head_ref.trim_start_matches("refs/heads/"),
            seat_branch(persona)
        )));
    }
    // 6. Stage everything (tracked, deleted and untracked-but-not-ignored). The CLI is still
    // alive on the box path and may be mid-`git` itself: wait a little for its index lock
    // rather than lose the snapshot to it.
    let mut tries = 0;
    loop {
        match git(
            worktree,
            &["-c", "core.hooksPath=/dev/null", "add", "-A"],
            GIT_TIMEOUT,
        ) {
            Ok(_) => break,
            Err(crate::periphery::worktree::GitError::Failed { stderr, .. })
                if stderr.contains("index.lock") && tries < INDEX_LOCK_RETRIES =>
            {
                tries += 1;
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => return Err(err(e)),
        }
    }
    // 7. Commit without hooks and without signing. The identity fallback only applies when the
    // repository has none, so an operator's configured identity is never overridden.
    let has_identity = git(worktree, &["config", "user.email"], GIT_TIMEOUT)
        .is_ok_and(|e| !e.is_empty())
        && git(worktree, &["config", "user.name"], GIT_TIMEOUT).is_ok_and(|n| !n.is_empty());
    let message = snapshot_message(why, files);
    let name_cfg = format!("user.name={FALLBACK_NAME}");
    let email_cfg = format!("user.email={FALLBACK_EMAIL}");
    let mut args: Vec<&str> = vec![
        "-c",
        "core.hooksPath=/dev/null",
        "-c",
        "commit.gpgsign=false",
        "-c",
        "gc.auto=0",
    ];
    if !has_identity {
        args.extend(["-c", &name_cfg, "-c", &email_cfg]);
    }
    args.extend([
        "commit",
        "--quiet",
        "--no-verify",
        "--no-gpg-sign",
        "--no-edit",
        "-m",
        &message,
    ]);
    git(worktree, &args, GIT_TIMEOUT).map_err(err)?;
    // 8. The new commit.
    let sha = git(worktree, &["rev-parse", "HEAD"], GIT_TIMEOUT).map_err(err)?;
    Ok(SnapshotOutcome::Committed { sha, files })
}

/// Count the paths of `git status --porcelain=v1 -z` output: each non-empty record counts once,
/// and a rename or copy record (X or Y is `R`/`C`) also consumes the next record, its origin.
pub fn count_status_records(status: &[u8]) -> usize {
    let mut records = status.split(|b| *b == 0).filter(|r| !r.is_empty());
    let mut files = 0;
    while let Some(rec) = records.next() {
        files += 1;
        let x = rec.first().copied().unwrap_or(b' ');
        let y = rec.get(1).copied().unwrap_or(b' ');
        if matches!(x, b'R' | b'C') || matches!(y, b'R' | b'C') {
            records.next();
        }
    }
    files
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::periphery::worktree::ensure_seat_worktree;
    use crate::periphery::worktree::tests::init_repo;

    const T: Duration = Duration::from_secs(20);

    fn seat(tmp: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
        let repo = tmp.join("repo");
        std::fs::create_dir_all(&repo).expect("mkdir");
        init_repo(&repo);
        let wt = ensure_seat_worktree(&repo, &tmp.join("bus"), "p", "claude").expect("ensure");
        assert_ne!(wt, repo);
        (repo, wt)
    }

    #[test]
    fn counts_records_with_renames() {
        assert_eq!(count_status_records(b""), 0);
        assert_eq!(count_status_records(b"?? a\0 M b\0"), 2);
        assert_eq!(count_status_records(b"R  new\0old\0?? c\0"), 2);
        assert_eq!(count_status_records(b" C x\0y\0"), 1);
    }

    #[test]
    fn commits_on_the_seat_branch_without_hooks() {
        let tmp = tempfile::tempdir().expect("tmp");
        let (repo, wt) = seat(tmp.path());
        // A hook that would fail the commit (and leave evidence) if it ran. Hooks live in the
        // common git dir, so the worktree would normally run it.
        let hooks = repo.join(".git/hooks");
        std::fs::create_dir_all(&hooks).expect("hooks");
        let marker = tmp.path().join("hook-ran");
        for hook in [
            "pre-commit",
            "commit-msg",
            "post-commit",
            "prepare-commit-msg",
        ] {
            let p = hooks.join(hook);
            std::fs::write(
                &p,
                format!("#!/bin/sh\necho {hook} >> '{}'\nexit 1\n", marker.display()),
            )
            .expect("hook");
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        }
        // Prove the hook is live for an ordinary commit in this worktree.
        std::fs::write(wt.join("probe"), "p").expect("write");
        git(&wt, &["add", "probe"], T).expect("add");
        assert!(git(&wt, &["commit", "-q", "-m", "probe"], T).is_err());
        assert!(marker.exists());
        std::fs::remove_file(&marker).expect("rm marker");

        std::fs::write(wt.join("work.txt"), "half done\n").expect("write");
        let before = git(&wt, &["rev-parse", "HEAD"], T).expect("head");
        let out = snapshot_wip(&wt, "claude", SnapshotWhy::Cut);
        let SnapshotOutcome::Committed { sha, files } = out else {
            panic!("expected a commit, got {out:?}");
        };
        assert_eq!(files, 2, "probe (staged) and work.txt");
        assert!(!marker.exists(), "no hook may run");
        assert_eq!(
            git(&wt, &["rev-parse", "seat/claude"], T).expect("ref"),
            sha
        );
        assert_eq!(
            git(&wt, &["log", "-1", "--format=%s"], T).expect("log"),
            "wip: cut at box, 2 files"
        );
        assert_eq!(
            git(&wt, &["rev-parse", &format!("{sha}^")], T).expect("parent"),
            before,
            "a new commit on top, nothing amended"
        );
        // Unsigned, and the operator's branch did not move.
        assert_eq!(
            git(&wt, &["log", "-1", "--format=%G?"], T).expect("sig"),
            "N"
        );
        assert_eq!(
            git(&repo, &["log", "-1", "--format=%s", "main"], T).expect("main"),
            "init"
        );
        // A second pass finds nothing.
        assert_eq!(
            snapshot_wip(&wt, "claude", SnapshotWhy::Cut),
            SnapshotOutcome::Clean
        );
    }

    #[test]
    fn nothing_is_pushed() {
        let tmp = tempfile::tempdir().expect("tmp");
        let (repo, wt) = seat(tmp.path());
        let remote = tmp.path().join("remote.git");
        git(
            tmp.path(),
            &["init", "-q", "--bare", remote.to_str().expect("utf8")],
            T,
        )
        .expect("bare");
        git(
            &repo,
            &["remote", "add", "origin", remote.to_str().expect("utf8")],
            T,
        )
        .expect("remote");
        git(&repo, &["config", "push.default", "current"], T).expect("cfg");
        std::fs::write(wt.join("a"), "a").expect("write");
        let out = snapshot_wip(&wt, "claude", SnapshotWhy::Backstop);
        assert!(
            matches!(out, SnapshotOutcome::Committed { files: 1, .. }),
            "{out:?}"
        );
        let refs = git(&remote, &["for-each-ref"], T).expect("refs");
        assert!(refs.is_empty(), "remote got refs: {refs}");
        assert_eq!(
            git(&wt, &["log", "-1", "--format=%s"], T).expect("log"),
            "wip: cut at box, 1 files"
        );
    }

    #[test]
    fn refuses_another_branch_and_detached_head() {
        let tmp = tempfile::tempdir().expect("tmp");
        let (repo, wt) = seat(tmp.path());
        // The operator's checkout (branch main) is never captured, even when dirty.
        std::fs::write(repo.join("dirty"), "d").expect("write");
        let out = snapshot_wip(&repo, "claude", SnapshotWhy::Cut);
        assert!(
            matches!(&out, SnapshotOutcome::Skipped(r) if r.contains("main checkout")),
            "{out:?}"
        );
        // Not even when it has a seat branch checked out.
        git(&repo, &["checkout", "-q", "-b", "seat/other"], T).expect("branch");
        let out = snapshot_wip(&repo, "other", SnapshotWhy::Cut);
        assert!(matches!(out, SnapshotOutcome::Skipped(_)), "{out:?}");
        assert_eq!(
            git(&repo, &["rev-list", "--count", "HEAD"], T).expect("count"),
            "1"
        );
        // Another persona's branch in this worktree is refused too.
        std::fs::write(wt.join("w"), "w").expect("write");
        let out = snapshot_wip(&wt, "reviewer", SnapshotWhy::Cut);
        assert!(matches!(out, SnapshotOutcome::Skipped(_)), "{out:?}");
        // Detached HEAD.
        git(&wt, &["checkout", "-q", "--detach"], T).expect("detach");
        let out = snapshot_wip(&wt, "claude", SnapshotWhy::Cut);
        assert!(
            matches!(&out, SnapshotOutcome::Skipped(r) if r.contains("detached")),
            "{out:?}"
        );
    }

    #[test]
    fn a_nested_dir_is_not_its_parents_checkout() {
        let tmp = tempfile::tempdir().expect("tmp");
        let (_repo, wt) = seat(tmp.path());
        let nested = wt.join("scratch");
        std::fs::create_dir_all(&nested).expect("mkdir");
        std::fs::write(nested.join("f"), "f").expect("write");
        let out = snapshot_wip(&nested, "claude", SnapshotWhy::Stall);
        assert!(matches!(out, SnapshotOutcome::Skipped(_)), "{out:?}");
        let out = snapshot_wip(&wt, "claude", SnapshotWhy::Stall);
        assert!(
            matches!(out, SnapshotOutcome::Committed { files: 1, .. }),
            "{out:?}"
        );
        assert_eq!(
            git(&wt, &["log", "-1", "--format=%s"], T).expect("log"),
            "wip: cut at stall, 1 files"
        );
    }

    #[test]
    fn waits_out_a_live_index_lock() {
        let tmp = tempfile::tempdir().expect("tmp");
        let (_repo, wt) = seat(tmp.path());
        let lock = std::path::PathBuf::from(
            git(
                &wt,
                &[
                    "rev-parse",
                    "--path-format=absolute",
                    "--git-path",
                    "index.lock",
                ],
                T,
            )
            .expect("git path"),
        );
        std::fs::write(&lock, "").expect("lock");
        std::fs::write(wt.join("f"), "f").expect("write");
        let releaser = {
            let lock = lock.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(300));
                std::fs::remove_file(lock).expect("unlock");
            })
        };
        let out = snapshot_wip(&wt, "claude", SnapshotWhy::Cut);
        releaser.join().expect("join");
        assert!(
            matches!(out, SnapshotOutcome::Committed { files: 1, .. }),
            "{out:?}"
        );
    }

    #[test]
    fn a_non_repo_is_skipped() {
        let tmp = tempfile::tempdir().expect("tmp");
        let out = snapshot_wip(tmp.path(), "claude", SnapshotWhy::Cut);
        assert!(matches!(out, SnapshotOutcome::Skipped(_)), "{out:?}");
    }
}

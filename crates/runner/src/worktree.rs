//! The seat worktree (reference §16): every turn of a seat runs in its own git worktree under the
//! bus directory, on the branch `seat/<persona>`, so two seats never edit the same checkout and a
//! cut can snapshot the seat's work without touching the operator's tree.
//!
//! This module also holds the bounded process runner the other periphery modules share: every
//! `git` and `docker` call the runner makes is time-bounded, so a wedged tool can slow a seat down
//! but never hang it.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// How long one git call of the worktree set-up may take.
const GIT_TIMEOUT: Duration = Duration::from_secs(20);

/// Why a bounded command did not produce an output.
#[derive(Debug, thiserror::Error)]
pub enum BoundedError {
    /// The program could not be started (missing binary, permissions, …).
    #[error("could not start {program}: {source}")]
    Spawn {
        /// The program name.
        program: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The program ran past its time limit and was killed.
    #[error("{program} timed out after {after:?}")]
    TimedOut {
        /// The program name.
        program: String,
        /// The limit that was exceeded.
        after: Duration,
    },
    /// Waiting for the program failed.
    #[error("waiting for {program} failed: {source}")]
    Wait {
        /// The program name.
        program: String,
        /// The underlying error.
        source: std::io::Error,
    },
}

/// Run `cmd` to completion with stdin on /dev/null and stdout/stderr captured, killing its whole
/// process group when it runs longer than `timeout`.
///
/// The child leads its own process group so a timeout also reaches anything it spawned (git's
/// helpers, docker's plugins); otherwise a grandchild could keep the output pipes open forever.
pub fn run_bounded(mut cmd: Command, timeout: Duration) -> Result<Output, BoundedError> {
    let program = cmd.get_program().to_string_lossy().into_owned();
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut child = cmd.spawn().map_err(|source| BoundedError::Spawn {
        program: program.clone(),
        source,
    })?;
    // Readers on their own threads: a chatty child must never block on a full pipe while we wait.
    let out_reader = child.stdout.take().map(spawn_reader);
    let err_reader = child.stderr.take().map(spawn_reader);
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if started.elapsed() >= timeout => {
                kill_group(child.id());
                let _ = child.kill();
                let _ = child.wait();
                // The readers end once the killed group's pipe ends close; do not wait on them
                // if a stray process escaped the group and still holds a pipe.
                return Err(BoundedError::TimedOut {
                    program,
                    after: timeout,
                });
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(5)),
            Err(source) => {
                kill_group(child.id());
                let _ = child.kill();
                let _ = child.wait();
                return Err(BoundedError::Wait { program, source });
            }
        }
    };
    let stdout = join_reader(out_reader);
    let stderr = join_reader(err_reader);
    Ok(Output {
        status,
        stdout,
        stderr,
    })
}

fn spawn_reader<R: Read + Send + 'static>(mut pipe: R) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = pipe.read_to_end(&mut buf);
        buf
    })
}

fn join_reader(handle: Option<std::thread::JoinHandle<Vec<u8>>>) -> Vec<u8> {
    handle.and_then(|h| h.join().ok()).unwrap_or_default()
}

fn kill_group(pid: u32) {
    if let Ok(pid) = i32::try_from(pid) {
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

/// A `git` command rooted at `dir`, insulated from the environment the runner inherited.
///
/// `GIT_DIR`, `GIT_WORK_TREE` and `GIT_INDEX_FILE` are removed: a runner started from inside a git
/// hook (or any tool that exports them) would otherwise point every call at another repository.
pub fn git_command(dir: &Path) -> Command {
    let mut cmd = Command::new("git");
    cmd.arg("-C")
        .arg(dir)
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .env_remove("GIT_INDEX_FILE")
        .env_remove("GIT_COMMON_DIR")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("LC_ALL", "C");
    cmd
}

/// Why a git call failed.
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    /// The call could not run or timed out.
    #[error(transparent)]
    Run(#[from] BoundedError),
    /// git ran and exited non-zero.
    #[error("git {args} failed: {stderr}")]
    Failed {
        /// The arguments, joined for the message.
        args: String,
        /// git's trimmed stderr.
        stderr: String,
    },
}

/// Run `git -C dir <args>` with `timeout`; Ok carries stdout (raw bytes) on a zero exit.
pub fn git_raw(dir: &Path, args: &[&str], timeout: Duration) -> Result<Vec<u8>, GitError> {
    let mut cmd = git_command(dir);
    cmd.args(args);
    let out = run_bounded(cmd, timeout)?;
    if out.status.success() {
        Ok(out.stdout)
    } else {
        Err(GitError::Failed {
            args: args.join(" "),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        })
    }
}

/// Run `git -C dir <args>` with `timeout`; Ok carries trimmed stdout on a zero exit.
pub fn git(dir: &Path, args: &[&str], timeout: Duration) -> Result<String, GitError> {
    git_raw(dir, args, timeout).map(|out| String::from_utf8_lossy(&out).trim().to_string())
}

/// The file-name-safe form of a project or persona (reference §16.1): each run of dots becomes
/// one `_`, and every character outside `[A-Za-z0-9_.-]` becomes `_`.
pub fn safe_name(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut in_dots = false;
    for c in s.chars() {
        if c == '.' {
            if !in_dots {
                out.push('_');
            }
            in_dots = true;
            continue;
        }
        in_dots = false;
        if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
            out.push(c);
        } else {
            out.push('_');
        }
    }
    out
}

/// The branch a persona's seat works on.
pub fn seat_branch(persona: &str) -> String {
    format!("seat/{persona}")
}

/// Where a seat's worktree lives: `<bus>/worktrees/<safe project>/<safe persona>`.
pub fn seat_worktree_path(bus_dir: &Path, project: &str, persona: &str) -> PathBuf {
    bus_dir
        .join("worktrees")
        .join(safe_name(project))
        .join(safe_name(persona))
}

/// Make sure the seat's worktree exists and return the directory the seat's turns run in.
///
/// `<bus>/worktrees/<safe project>/<safe persona>` on branch `seat/<persona>`. Returns `dir`
/// itself when `TRANTOR_NO_WORKTREE=1`, when `dir` is not inside a git repository, when a
/// non-worktree directory occupies the seat's path, or when `git worktree add` fails (each
/// fallback is logged). An existing worktree is reused: fast-forwarded to the checkout's HEAD
/// when clean, left alone when it holds uncommitted work.
///
/// Decisions beyond the reference: an existing `seat/<persona>` branch is checked out as it is
/// (never recreated with `-B`, which would drop WIP commits a previous worktree left on it), and
/// the operator's own checkout is never fast-forwarded or otherwise modified.
pub fn ensure_seat_worktree(
    dir: &Path,
    bus_dir: &Path,
    project: &str,
    persona: &str,
) -> anyhow::Result<PathBuf> {
    if std::env::var("TRANTOR_NO_WORKTREE").is_ok_and(|v| v == "1") {
        tracing::info!("TRANTOR_NO_WORKTREE=1 — turns run in {}", dir.display());
        return Ok(dir.to_path_buf());
    }
    let Ok(root) = git(dir, &["rev-parse", "--show-toplevel"], GIT_TIMEOUT) else {
        tracing::info!(
            "{} is not in a git repository — turns run there",
            dir.display()
        );
        return Ok(dir.to_path_buf());
    };
    let root = PathBuf::from(root);
    let wt = seat_worktree_path(bus_dir, project, persona);
    let branch = seat_branch(persona);
    // Stale registrations (a worktree dir someone deleted) would make `worktree add` refuse.
    if let Err(e) = git(&root, &["worktree", "prune"], GIT_TIMEOUT) {
        tracing::debug!("git worktree prune: {e}");
    }
    let head = match git(&root, &["rev-parse", "HEAD"], GIT_TIMEOUT) {
        Ok(sha) => sha,
        Err(e) => {
            // A repository without a commit cannot host a worktree.
            tracing::warn!(
                "seat worktree skipped ({e}) — turns run in {}",
                dir.display()
            );
            return Ok(dir.to_path_buf());
        }
    };

    if wt.exists() {
        if !is_worktree_of(&wt, &root) {
            tracing::warn!(
                "{} exists but is not a worktree of {} — turns run in {}",
                wt.display(),
                root.display(),
                dir.display()
            );
            return Ok(dir.to_path_buf());
        }
        refresh_existing(&wt, &head);
        return Ok(wt);
    }

    if let Some(parent) = wt.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let wt_str = wt.to_string_lossy().into_owned();
    let branch_ref = format!("refs/heads/{branch}");
    let branch_exists = git(
        &root,
        &["rev-parse", "--verify", "--quiet", &branch_ref],
        GIT_TIMEOUT,
    )
    .is_ok();
    let added = if branch_exists {
        git(&root, &["worktree", "add", &wt_str, &branch], GIT_TIMEOUT)
    } else {
        git(
            &root,
            &[
                "worktree",
                "add",
                "--no-track",
                "-b",
                &branch,
                &wt_str,
                "HEAD",
            ],
            GIT_TIMEOUT,
        )
    };
    if let Err(e) = added {
        tracing::warn!(
            "seat worktree add failed ({e}) — turns run in {}",
            dir.display()
        );
        return Ok(dir.to_path_buf());
    }
    if branch_exists {
        refresh_existing(&wt, &head);
    }
    let base_key = format!("branch.{branch}.base");
    if let Err(e) = git(&root, &["config", &base_key, &head], GIT_TIMEOUT) {
        tracing::debug!("recording {base_key}: {e}");
    }
    if git(
        &root,
        &["config", "--get", "push.autoSetupRemote"],
        GIT_TIMEOUT,
    )
    .is_err()
        && let Err(e) = git(
            &root,
            &["config", "push.autoSetupRemote", "true"],
            GIT_TIMEOUT,
        )
    {
        tracing::debug!("setting push.autoSetupRemote: {e}");
    }
    tracing::info!("seat worktree {} on {branch}", wt.display());
    Ok(wt)
}

/// Whether `wt` is the top of a checkout that shares `root`'s repository.
fn is_worktree_of(wt: &Path, root: &Path) -> bool {
    let Ok(top) = git(wt, &["rev-parse", "--show-toplevel"], GIT_TIMEOUT) else {
        return false;
    };
    if !same_path(Path::new(&top), wt) {
        return false;
    }
    let common = |d: &Path| {
        git(
            d,
            &["rev-parse", "--path-format=absolute", "--git-common-dir"],
            GIT_TIMEOUT,
        )
        .ok()
        .map(PathBuf::from)
    };
    match (common(wt), common(root)) {
        (Some(a), Some(b)) => same_path(&a, &b),
        _ => false,
    }
}

/// Bring a clean existing worktree up to the checkout's HEAD; leave a dirty or diverged one be.
fn refresh_existing(wt: &Path, head: &str) {
    match git(wt, &["status", "--porcelain"], GIT_TIMEOUT) {
        Ok(s) if !s.is_empty() => {
            tracing::info!(
                "seat worktree {} has uncommitted work — not refreshed",
                wt.display()
            );
        }
        Ok(_) => {
            if let Err(e) = git(wt, &["merge", "--ff-only", "--quiet", head], GIT_TIMEOUT) {
                tracing::info!("seat worktree {} diverged — left as is ({e})", wt.display());
            }
        }
        Err(e) => tracing::warn!("seat worktree {} status failed: {e}", wt.display()),
    }
}

/// Path equality after resolving symlinks (falls back to the literal paths).
pub(crate) fn same_path(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A fresh repository with one commit and a local identity.
    pub(crate) fn init_repo(dir: &Path) {
        let t = Duration::from_secs(20);
        git(dir, &["init", "-q", "-b", "main"], t).expect("init");
        git(dir, &["config", "user.name", "Test"], t).expect("name");
        git(dir, &["config", "user.email", "test@example.invalid"], t).expect("email");
        git(dir, &["config", "commit.gpgsign", "false"], t).expect("gpg");
        std::fs::write(dir.join("README"), "hello\n").expect("write");
        git(dir, &["add", "README"], t).expect("add");
        git(dir, &["commit", "-q", "-m", "init"], t).expect("commit");
    }

    #[test]
    fn safe_name_rules() {
        assert_eq!(safe_name("claude"), "claude");
        assert_eq!(safe_name("my.proj"), "my_proj");
        assert_eq!(safe_name("a..b"), "a_b");
        assert_eq!(safe_name("../x"), "__x");
        assert_eq!(safe_name("a b/c:d"), "a_b_c_d");
        assert_eq!(safe_name("ok_-9"), "ok_-9");
    }

    #[test]
    fn non_git_dir_is_returned_as_is() {
        let tmp = tempfile::tempdir().expect("tmp");
        let bus = tmp.path().join("bus");
        let dir = tmp.path().join("plain");
        std::fs::create_dir_all(&dir).expect("mkdir");
        let got = ensure_seat_worktree(&dir, &bus, "p", "claude").expect("ensure");
        assert_eq!(got, dir);
        assert!(!bus.join("worktrees").exists());
    }

    #[test]
    fn creates_then_reuses_the_seat_worktree() {
        let tmp = tempfile::tempdir().expect("tmp");
        let repo = tmp.path().join("repo");
        std::fs::create_dir_all(&repo).expect("mkdir");
        init_repo(&repo);
        let bus = tmp.path().join("bus");
        let t = Duration::from_secs(20);

        let wt = ensure_seat_worktree(&repo, &bus, "my.proj", "reviewer").expect("ensure");
        assert_eq!(wt, bus.join("worktrees/my_proj/reviewer"));
        assert_eq!(
            git(&wt, &["symbolic-ref", "HEAD"], t).expect("head"),
            "refs/heads/seat/reviewer"
        );
        assert!(wt.join("README").exists());
        // The operator's checkout stays on its branch.
        assert_eq!(
            git(&repo, &["symbolic-ref", "--short", "HEAD"], t).expect("head"),
            "main"
        );

        // A new commit on main is fast-forwarded into the clean worktree on reuse.
        std::fs::write(repo.join("NEW"), "x\n").expect("write");
        git(&repo, &["add", "NEW"], t).expect("add");
        git(&repo, &["commit", "-q", "-m", "new"], t).expect("commit");
        let again = ensure_seat_worktree(&repo, &bus, "my.proj", "reviewer").expect("ensure");
        assert_eq!(again, wt);
        assert!(wt.join("NEW").exists());

        // A dirty worktree is left alone.
        std::fs::write(wt.join("WIP"), "w\n").expect("write");
        std::fs::write(repo.join("NEWER"), "y\n").expect("write");
        git(&repo, &["add", "NEWER"], t).expect("add");
        git(&repo, &["commit", "-q", "-m", "newer"], t).expect("commit");
        ensure_seat_worktree(&repo, &bus, "my.proj", "reviewer").expect("ensure");
        assert!(!wt.join("NEWER").exists());
        assert!(wt.join("WIP").exists());
    }

    #[test]
    fn an_occupied_path_falls_back_to_dir() {
        let tmp = tempfile::tempdir().expect("tmp");
        let repo = tmp.path().join("repo");
        std::fs::create_dir_all(&repo).expect("mkdir");
        init_repo(&repo);
        let bus = tmp.path().join("bus");
        let squatter = seat_worktree_path(&bus, "p", "claude");
        std::fs::create_dir_all(&squatter).expect("mkdir");
        std::fs::write(squatter.join("junk"), "j").expect("write");
        let got = ensure_seat_worktree(&repo, &bus, "p", "claude").expect("ensure");
        assert_eq!(got, repo);
    }

    #[test]
    fn bounded_run_kills_a_hung_child() {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "sleep 30"]);
        let err = run_bounded(cmd, Duration::from_millis(200)).expect_err("must time out");
        assert!(matches!(err, BoundedError::TimedOut { .. }));
    }
}

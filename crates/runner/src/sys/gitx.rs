//! The git command builder ([`git_command`], the workspace's one), and the few git reads a turn needs
//! around the CLI (HEAD, status, object checks), async and time-bounded so a wedged git never
//! wedges the seat. The worktree itself is managed by [`crate::periphery::worktree`], with the same builder.

use std::path::Path;
use std::time::Duration;

const GIT_TIMEOUT: Duration = Duration::from_secs(20);

/// The workspace's one git command builder (`trantor_proto::git`): every git call of the
/// runner (the worktree set-up, the snapshot, a turn's before/after reads) is built on it.
pub use trantor_proto::git::git_command;

async fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let mut cmd = git_command(dir);
    cmd.args(args);
    let run = tokio::task::spawn_blocking(move || crate::sys::cmd::run_bounded(cmd, GIT_TIMEOUT));
    match run.await {
        Ok(Ok(out)) if out.status.success() => {
            Some(String::from_utf8_lossy(&out.stdout).trim_end().to_string())
        }
        _ => None,
    }
}

/// `git rev-parse HEAD`.
pub async fn head(dir: &Path) -> Option<String> {
    git(dir, &["rev-parse", "HEAD"]).await
}

/// `git status --porcelain` (untracked files included).
pub async fn porcelain(dir: &Path) -> Option<String> {
    git(dir, &["status", "--porcelain", "--untracked-files=all"]).await
}

/// The sha of `rev` (e.g. `main`), if it resolves.
pub async fn rev(dir: &Path, rev: &str) -> Option<String> {
    git(dir, &["rev-parse", "--verify", "--quiet", rev]).await
}

/// Whether `sha` names a commit in the repository at `dir` (docs/runner.md §19.3).
pub async fn has_commit(dir: &Path, sha: &str) -> bool {
    git(dir, &["cat-file", "-e", &format!("{sha}^{{commit}}")])
        .await
        .is_some()
}

/// Whether `dir` is inside a git work tree.
pub async fn is_repo(dir: &Path) -> bool {
    git(dir, &["rev-parse", "--is-inside-work-tree"])
        .await
        .as_deref()
        == Some("true")
}

/// The repository's common git directory (shared by its worktrees), absolute.
pub async fn common_dir(dir: &Path) -> Option<std::path::PathBuf> {
    let out = git(
        dir,
        &["rev-parse", "--path-format=absolute", "--git-common-dir"],
    )
    .await?;
    Some(std::path::PathBuf::from(out))
}

/// The sha of branch `name` read straight from the ref files (loose, then packed): no process
/// on the wake path. None when the branch does not exist or the files are unreadable.
pub fn read_branch(common: &Path, name: &str) -> Option<String> {
    let full = format!("refs/heads/{name}");
    let is_sha = |s: &str| s.len() >= 40 && s.chars().all(|c| c.is_ascii_hexdigit());
    if let Ok(s) = std::fs::read_to_string(common.join(&full)) {
        let s = s.trim();
        if is_sha(s) {
            return Some(s.to_string());
        }
    }
    let packed = std::fs::read_to_string(common.join("packed-refs")).ok()?;
    packed.lines().find_map(|l| {
        let (sha, r) = l.split_once(' ')?;
        (r.trim() == full && is_sha(sha)).then(|| sha.to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn git_sync(dir: &Path, args: &[&str]) -> String {
        let out = std::process::Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(args)
            .output()
            .expect("git");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    #[tokio::test]
    async fn branch_refs_read_natively_loose_and_packed() {
        let d = tempfile::tempdir().expect("tmp");
        let r = d.path();
        git_sync(r, &["init", "-q", "-b", "main"]);
        std::fs::write(r.join("a"), "a").expect("w");
        git_sync(r, &["add", "a"]);
        git_sync(
            r,
            &[
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@t",
                "commit",
                "-qm",
                "a",
            ],
        );
        let sha = git_sync(r, &["rev-parse", "main"]);
        let common = common_dir(r).await.expect("common dir");
        assert_eq!(read_branch(&common, "main").as_deref(), Some(sha.as_str()));
        git_sync(r, &["pack-refs", "--all"]);
        assert!(!common.join("refs/heads/main").exists());
        assert_eq!(read_branch(&common, "main").as_deref(), Some(sha.as_str()));
        assert_eq!(read_branch(&common, "nope"), None);
        assert_eq!(head(r).await.as_deref(), Some(sha.as_str()));
        assert!(has_commit(r, &sha).await);
        assert!(!has_commit(r, "0000000000000000000000000000000000000000").await);
    }

    /// The variable that hands [`stray_index_child`] its repository; unset, the child does nothing.
    const PROBE_ENV: &str = "TRANTOR_GITX_STRAY_INDEX_PROBE";

    /// A stray `GIT_INDEX_FILE` in the runner's own environment (a runner started from a git
    /// hook) does not change what the builder's git sees. The environment is the process's, so
    /// the check runs in a child (this test binary, running only [`stray_index_child`]) rather
    /// than changing the environment under the other tests.
    #[test]
    fn a_stray_git_index_file_does_not_reach_the_builders_git() {
        let d = tempfile::tempdir().expect("tmp");
        let r = d.path().join("repo");
        std::fs::create_dir(&r).expect("mkdir");
        git_sync(&r, &["init", "-q", "-b", "main"]);
        std::fs::write(r.join("a"), "a").expect("w");
        git_sync(&r, &["add", "a"]);
        git_sync(
            &r,
            &[
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@t",
                "commit",
                "-qm",
                "a",
            ],
        );
        assert_eq!(
            git_sync(&r, &["status", "--porcelain"]),
            "",
            "repo is clean"
        );
        let out = std::process::Command::new(std::env::current_exe().expect("test binary"))
            .args([
                "--exact",
                "sys::gitx::tests::stray_index_child",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(PROBE_ENV, &r)
            .env("GIT_INDEX_FILE", d.path().join("stray-index"))
            .env("LC_ALL", "de_DE.UTF-8")
            .output()
            .expect("run the child");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "child failed:\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            stdout.contains("1 passed"),
            "the child ran no test:\n{stdout}"
        );
    }

    #[tokio::test]
    #[ignore = "run as a child by a_stray_git_index_file_does_not_reach_the_builders_git"]
    async fn stray_index_child() {
        let Some(repo) = std::env::var_os(PROBE_ENV).map(std::path::PathBuf::from) else {
            return;
        };
        let stray = std::env::var_os("GIT_INDEX_FILE").expect("the parent set GIT_INDEX_FILE");
        // The builder's git, and the turn's before/after reads built on it, see the repo's own.
        let out = git_command(&repo)
            .args(["status", "--porcelain", "--untracked-files=all"])
            .output()
            .expect("git");
        assert!(out.status.success());
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "");
        assert_eq!(porcelain(&repo).await.as_deref(), Some(""));
        assert!(head(&repo).await.is_some());
        assert!(
            !std::path::Path::new(&stray).exists(),
            "the builder's git wrote the stray index"
        );
        // A git that inherits the variable reads the (missing) stray index: `a` looks deleted.
        let inherited = std::process::Command::new("git")
            .arg("-C")
            .arg(&repo)
            .args(["status", "--porcelain"])
            .output()
            .expect("git");
        assert!(
            !String::from_utf8_lossy(&inherited.stdout).trim().is_empty(),
            "the stray index {stray:?} should matter to a plain git"
        );
    }
}

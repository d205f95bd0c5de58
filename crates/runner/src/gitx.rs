//! The few git reads a turn needs around the CLI (HEAD, status, object checks), async and
//! time-bounded so a wedged git never wedges the seat. The worktree itself is managed by
//! [`crate::worktree`].

use std::path::Path;
use std::time::Duration;

const GIT_TIMEOUT: Duration = Duration::from_secs(20);

async fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let fut = tokio::process::Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    match tokio::time::timeout(GIT_TIMEOUT, fut).await {
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

/// Whether `sha` names a commit in the repository at `dir` (§16.4).
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

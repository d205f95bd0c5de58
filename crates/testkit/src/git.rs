//! A scratch git repository for drills.

use std::path::Path;

/// Run git in `dir` for a drill; panics on failure, returns trimmed stdout.
pub fn git_in(dir: &Path, args: &[&str]) -> String {
    let out = trantor_proto::git::git_command(dir)
        .args(args)
        .output()
        .expect("git");
    assert!(
        out.status.success(),
        "git {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A git repository with one commit on `main` and a local identity.
pub fn init_git_repo(dir: &Path) {
    std::fs::create_dir_all(dir).expect("repo dir");
    git_in(dir, &["init", "-q", "-b", "main"]);
    git_in(dir, &["config", "user.name", "Drill"]);
    git_in(dir, &["config", "user.email", "drill@example.invalid"]);
    git_in(dir, &["config", "commit.gpgsign", "false"]);
    std::fs::write(dir.join("README.md"), "drill\n").expect("readme");
    git_in(dir, &["add", "README.md"]);
    git_in(dir, &["commit", "-q", "-m", "init"]);
}

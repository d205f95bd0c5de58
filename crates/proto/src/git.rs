//! The one `git` command builder of the workspace: the runner (its worktree, the snapshot, a
//! turn's before/after reads), the CLI's verbs, the MCP server and the benchmarks all build
//! their `git` here, so every git call of the project sees the same repository whoever started
//! the process. It lives in `proto` because every crate that runs git links `proto`
//! (docs/architecture.md §1).

use std::path::Path;
use std::process::Command;

/// The variables that point git at another repository, index or object store. git exports them
/// to its hooks (and a tool may export them on its own), so a process started from inside one
/// would otherwise read or write the wrong repository.
pub const REPO_ENV: &[&str] = &[
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_COMMON_DIR",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_PREFIX",
];

/// A `git` command rooted at `dir` (`git -C dir`), insulated from the environment the process
/// inherited.
///
/// The repository-locating variables ([`REPO_ENV`]) are removed, prompts are off
/// (`GIT_TERMINAL_PROMPT=0`), the locale is C (`LC_ALL=C`) and stdin is `/dev/null`, so what git
/// reads and prints does not depend on who started the process, and git never waits on a
/// terminal. For an async caller, `tokio::process::Command::from(git_command(dir))`.
pub fn git_command(dir: &Path) -> Command {
    let mut cmd = Command::new("git");
    cmd.arg("-C").arg(dir);
    for var in REPO_ENV {
        cmd.env_remove(var);
    }
    cmd.env("GIT_TERMINAL_PROMPT", "0")
        .env("LC_ALL", "C")
        .stdin(std::process::Stdio::null());
    cmd
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_builder_removes_the_repo_variables_and_sets_a_c_locale() {
        let cmd = git_command(Path::new("/nowhere"));
        let args: Vec<_> = cmd.get_args().collect();
        assert_eq!(args, ["-C", "/nowhere"]);
        let envs: Vec<_> = cmd.get_envs().collect();
        for var in REPO_ENV {
            assert!(
                envs.contains(&(std::ffi::OsStr::new(var), None)),
                "{var} is not removed: {envs:?}"
            );
        }
        let set = |k: &str| {
            envs.iter()
                .find(|(n, _)| *n == k)
                .and_then(|(_, v)| *v)
                .and_then(|v| v.to_str())
        };
        assert_eq!(set("LC_ALL"), Some("C"));
        assert_eq!(set("GIT_TERMINAL_PROMPT"), Some("0"));
    }
}

//! The test harness the workspace's integration tests share (a dev-dependency, never shipped).
//!
//! Tests start the real hub and runner on temporary directories and free ports; this crate is
//! the one place that knows how.
//!
//! # Layout
//!
//! ```text
//! hub       Hub: the one hub wrapper, in process (its own thread and runtime) or a `trantor hub`
//!           process; TestHub: ours or the original JavaScript hub behind one face
//! http      request(): one HTTP/1.1 exchange with full control of the head (no client library)
//! wait      wait_until(): a condition polled until a deadline (never a fixed sleep)
//! process   GroupChild (a process group killed on drop), bounded waits, stray-process cleanup
//! git       a scratch repository for drills
//! layers    the import scanner of the hub's and the runner's layer tests
//! prereq    a missing tool skips visibly on a developer machine and fails under CI
//! ```
//!
//! [`on_both_hubs!`] runs one test body against our hub and against the original's, as
//! ripgrep's `rgtest!` runs one body under two configurations.

mod git;
mod http;
mod hub;
pub mod layers;
mod prereq;
mod process;
mod wait;

pub use git::{git_in, init_git_repo};
pub use http::{Reply, dechunk, delivery_states, hub_messages, hub_request, hub_send, request};
pub use hub::{Hub, TestHub};
pub use prereq::{
    install, install_dir, on_path, original_package, original_with_python3, real_clis_bin,
    require_tool, require_tools, skip_or_fail, under_ci,
};
pub use process::{GroupChild, kill_processes_mentioning, wait_with_deadline};
/// Percent-encode a query value (the one definition: [`trantor_proto::text::url_encode`]).
pub use trantor_proto::text::url_encode;
pub use wait::{wait_polls_held, wait_until, wait_until_async};

use std::path::PathBuf;

/// Path of the `trantor` binary under test: `TRANTOR_BIN`, or the binary cargo built beside
/// the running test (`target/<profile>/trantor`, the test being `target/<profile>/deps/<name>`).
/// Cargo builds it for the CLI crate's integration tests, the only ones that run it.
pub fn bin() -> PathBuf {
    if let Some(p) = std::env::var_os("TRANTOR_BIN") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().unwrap_or_default();
    let beside = exe
        .parent()
        .and_then(|deps| deps.parent())
        .map(|profile| profile.join("trantor"))
        .unwrap_or_default();
    assert!(
        beside.is_file(),
        "no trantor binary at {} (set TRANTOR_BIN, or run the CLI crate's tests, which build it)",
        beside.display()
    );
    beside
}

/// The repository's root directory (for `tests-compat/` and the docs).
pub fn repo_root() -> PathBuf {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    root.canonicalize().unwrap_or(root)
}

/// A file under `tests-compat/`, the scripts that drive the original's clients.
pub fn compat_file(file: &str) -> PathBuf {
    repo_root().join("tests-compat").join(file)
}

/// A TCP port that was free a moment ago on 127.0.0.1, for a hub process a test starts (and
/// may restart on the same port): [`trantor_proto::net::free_loopback_port`], 0 when none is.
pub fn free_port() -> u16 {
    trantor_proto::net::free_loopback_port().unwrap_or(0)
}

/// One test body, two tests: `on_both_hubs!(name)` turns `fn name(original: bool)` into a module
/// `name` with `ours` (against our hub) and `original_hub` (against the original JavaScript hub,
/// which says SKIP on a machine without node and fails under CI).
/// `on_both_hubs!(name; original: #[ignore = "why"])` marks the original's run with an
/// attribute of its own.
#[macro_export]
macro_rules! on_both_hubs {
    ($name:ident; original: #[$attr:meta]) => {
        mod $name {
            #[test]
            fn ours() {
                super::$name(false)
            }

            #[test]
            #[$attr]
            fn original_hub() {
                super::$name(true)
            }
        }
    };
    ($($name:ident),+ $(,)?) => {
        $(
            mod $name {
                #[test]
                fn ours() {
                    super::$name(false)
                }

                #[test]
                fn original_hub() {
                    super::$name(true)
                }
            }
        )+
    };
}

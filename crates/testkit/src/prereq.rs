//! Prerequisites: a missing tool skips visibly on a developer machine and fails under CI.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Whether this run is CI: `CI` is set to anything but empty, `0` or `false` (CI runners set
/// `CI=true`; `.ci/run` installs every prerequisite, so there a missing one is a failure).
pub fn under_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && !v.eq_ignore_ascii_case("false"))
}

/// The running test cannot run because `reason`. Under CI this panics (the test fails). On a
/// developer machine it writes `SKIP <test>: <reason>` to the process's stderr directly, not
/// through `eprintln!`: the harness captures and hides the print macros of a passing test, but
/// not the stream itself, so the line shows in plain `cargo test` output beside the test's `ok`.
/// Every skipping test says it, not just the first per binary.
pub fn skip_or_fail(reason: &str) {
    let current = std::thread::current();
    let test = current.name().unwrap_or("this test");
    if under_ci() {
        panic!("CI is set, so a missing prerequisite fails the test: {test}: {reason}");
    }
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "SKIP {test}: {reason}");
}

/// Whether an executable named `tool` is on PATH (looked up directly: no process is spawned, so
/// a PATH stripped of a tool is honoured exactly).
pub fn on_path(tool: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path).any(|dir| {
            std::fs::metadata(dir.join(tool))
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
    })
}

/// Whether every tool in `tools` is on PATH; when one is missing, [`skip_or_fail`] names it and
/// this returns false (the caller returns: `if !require_tools(&["node"]) { return; }`).
pub fn require_tools(tools: &[&str]) -> bool {
    let missing: Vec<&str> = tools.iter().copied().filter(|t| !on_path(t)).collect();
    if missing.is_empty() {
        return true;
    }
    skip_or_fail(&format!(
        "needs {} on PATH (.ci/run installs it)",
        missing.join(", ")
    ));
    false
}

/// [`require_tools`] for one tool.
pub fn require_tool(tool: &str) -> bool {
    require_tools(&[tool])
}

/// Runs the install script `tests-compat/<script> <dir> <args…>` (each is idempotent and
/// installs from npm into a directory outside the repository) once per test binary, and returns
/// its stdout's non-empty lines, or why it failed (the tail of its stderr). Installs are
/// serialised: two tests of one binary never run npm into one directory at once.
pub fn install(script: &str, dir: &Path, args: &[&str]) -> Result<Vec<String>, String> {
    type Done = std::collections::HashMap<String, Result<Vec<String>, String>>;
    static DONE: std::sync::Mutex<Option<Done>> = std::sync::Mutex::new(None);
    let key = format!("{script} {} {}", dir.display(), args.join(" "));
    let mut done = DONE.lock().unwrap_or_else(|e| e.into_inner());
    let done = done.get_or_insert_with(Done::new);
    done.entry(key)
        .or_insert_with(|| {
            let path = crate::compat_file(script);
            let out = Command::new("bash")
                .arg(&path)
                .arg(dir)
                .args(args)
                .stdin(Stdio::null())
                .output()
                .map_err(|e| format!("cannot run {}: {e}", path.display()))?;
            if !out.status.success() {
                let err = String::from_utf8_lossy(&out.stderr);
                let tail: Vec<&str> = err.lines().rev().take(3).collect();
                return Err(format!(
                    "{script} failed (offline?): {}",
                    tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
                ));
            }
            Ok(String::from_utf8_lossy(&out.stdout)
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .map(str::to_string)
                .collect())
        })
        .clone()
}

/// `dir_env`'s value, or `<tmp>/<default>`: where an install script puts what it installs.
pub fn install_dir(dir_env: &str, default: &str) -> PathBuf {
    std::env::var_os(dir_env)
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join(default))
}

/// `Some(value)`, or `None` after [`skip_or_fail`] names why it could not be had.
fn or_skip<T>(got: Result<T, String>) -> Option<T> {
    got.map_err(|reason| skip_or_fail(&reason)).ok()
}

/// The original package (npm `trantor@0.18.72`), installed once per machine by
/// `tests-compat/install-original.sh`. `None` after [`skip_or_fail`] when node or npm is
/// missing or the registry cannot be reached; every caller is told, not just the first.
pub fn original_package() -> Option<PathBuf> {
    if !require_tools(&["node", "npm"]) {
        return None;
    }
    let dir = std::env::temp_dir().join("trantor-orig-0.18.72");
    or_skip(
        install("install-original.sh", &dir, &["0.18.72"]).and_then(|lines| {
            let pkg = PathBuf::from(lines.first().map(String::as_str).unwrap_or(""));
            if pkg.join("hub.mjs").is_file() && pkg.join("mcp.mjs").is_file() {
                Ok(pkg)
            } else {
                Err(format!(
                    "the original trantor@0.18.72 is incomplete at {}",
                    pkg.display()
                ))
            }
        }),
    )
}

/// The directory holding the real `claude`, `codex` and `opencode` pinned by
/// `tests-compat/install-real-clis.sh` (installed once per machine, `TRANTOR_REAL_CLIS_DIR` or
/// `<tmp>/trantor-real-clis`). `None` after [`skip_or_fail`] when they cannot be had.
pub fn real_clis_bin() -> Option<PathBuf> {
    if !require_tools(&["node", "npm"]) {
        return None;
    }
    let dir = install_dir("TRANTOR_REAL_CLIS_DIR", "trantor-real-clis");
    or_skip(
        install("install-real-clis.sh", &dir, &[]).and_then(|lines| {
            lines
                .first()
                .map(PathBuf::from)
                .ok_or_else(|| "install-real-clis.sh printed no directory".to_string())
        }),
    )
}

/// The original package and `python3` (the original MCP server's test driver), or `None` after
/// [`skip_or_fail`].
pub fn original_with_python3() -> Option<PathBuf> {
    let pkg = original_package()?;
    require_tool("python3").then_some(pkg)
}

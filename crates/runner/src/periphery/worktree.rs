//! The seat worktree (docs/runner.md §20): every turn of a seat runs in its own git worktree under the
//! bus directory, on the branch `seat/<persona>`, so two seats never edit the same checkout and a
//! cut can snapshot the seat's work without touching the operator's tree.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::sys::cmd::{BoundedError, run_bounded};
use crate::sys::gitx::git_command;

/// How long one git call of the worktree set-up may take.
const GIT_TIMEOUT: Duration = Duration::from_secs(20);

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

/// The branch a persona's seat works on.
pub fn seat_branch(persona: &str) -> String {
    format!("seat/{persona}")
}

/// Where a seat's worktree lives: `<bus>/worktrees/<safe project>/<safe persona>`.
pub fn seat_worktree_path(bus_dir: &Path, project: &str, persona: &str) -> PathBuf {
    bus_dir
        .join("worktrees")
        .join(crate::sys::paths::safe(project))
        .join(crate::sys::paths::safe(persona))
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
        provision(&root, &wt, false);
        return Ok(wt);
    }

    if let Some(parent) = wt.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let (base, head) = fast_forward_base(&root, head);
    let branch_exists = match add_worktree(&root, &wt, &branch) {
        Ok(existed) => existed,
        Err(e) => {
            tracing::warn!(
                "seat worktree add failed ({e}) — turns run in {}",
                dir.display()
            );
            return Ok(dir.to_path_buf());
        }
    };
    if branch_exists {
        refresh_existing(&wt, &head);
    }
    record_branch_config(&root, &branch, base.as_deref().unwrap_or(&head));
    tracing::info!("seat worktree {} on {branch}", wt.display());
    provision(&root, &wt, true);
    Ok(wt)
}

/// A new seat starts from the latest base: fast-forward the checkout's branch to its upstream
/// when that is a pure fast-forward (no fetch; git refuses if it would touch local changes).
/// Returns the branch (none when detached) and the HEAD after it.
fn fast_forward_base(root: &Path, head: String) -> (Option<String>, String) {
    let base = git(root, &["rev-parse", "--abbrev-ref", "HEAD"], GIT_TIMEOUT)
        .ok()
        .filter(|b| !b.is_empty() && b != "HEAD");
    let mut head = head;
    if let Some(base) = &base
        && let Ok(upstream) = git(
            root,
            &["rev-parse", "--abbrev-ref", &format!("{base}@{{upstream}}")],
            GIT_TIMEOUT,
        )
        && git(
            root,
            &["merge", "--ff-only", "--quiet", &upstream],
            GIT_TIMEOUT,
        )
        .is_ok()
    {
        tracing::info!("{base} fast-forwarded to {upstream}");
        if let Ok(sha) = git(root, &["rev-parse", "HEAD"], GIT_TIMEOUT) {
            head = sha;
        }
    }
    (base, head)
}

/// `git worktree add` the seat's worktree: an existing seat branch checked out as it is, else a
/// new branch from HEAD. Returns whether the branch existed.
fn add_worktree(root: &Path, wt: &Path, branch: &str) -> Result<bool, GitError> {
    let wt_str = wt.to_string_lossy().into_owned();
    let branch_ref = format!("refs/heads/{branch}");
    let branch_exists = git(
        root,
        &["rev-parse", "--verify", "--quiet", &branch_ref],
        GIT_TIMEOUT,
    )
    .is_ok();
    if branch_exists {
        git(root, &["worktree", "add", &wt_str, branch], GIT_TIMEOUT)?;
    } else {
        git(
            root,
            &[
                "worktree",
                "add",
                "--no-track",
                "-b",
                branch,
                &wt_str,
                "HEAD",
            ],
            GIT_TIMEOUT,
        )?;
    }
    Ok(branch_exists)
}

/// Record the seat branch's base (a branch name, or a detached checkout's sha) for review
/// tooling, and let a first push set the upstream (unless the repository already says).
fn record_branch_config(root: &Path, branch: &str, base_value: &str) {
    let base_key = format!("branch.{branch}.base");
    if let Err(e) = git(root, &["config", &base_key, base_value], GIT_TIMEOUT) {
        tracing::debug!("recording {base_key}: {e}");
    }
    if git(
        root,
        &["config", "--get", "push.autoSetupRemote"],
        GIT_TIMEOUT,
    )
    .is_err()
        && let Err(e) = git(
            root,
            &["config", "push.autoSetupRemote", "true"],
            GIT_TIMEOUT,
        )
    {
        tracing::debug!("setting push.autoSetupRemote: {e}");
    }
}

/// Apply the project's `.trantor/worktree.json` to the seat worktree and log the outcome: every
/// line for a fresh worktree, only operator steps and problems for an existing one (docs/runner.md §20).
fn provision(root: &Path, wt: &Path, fresh: bool) {
    let Some(decl) = read_declaration(root) else {
        return;
    };
    let applied = apply_declaration(&decl, root, wt);
    for line in provisioning_lines(&applied, fresh) {
        tracing::info!("worktree: {line}");
    }
    if !decl.preflight.is_empty() && fresh {
        spawn_preflight(decl.preflight, wt.to_path_buf());
    }
}

/// How long a declared preflight may run (docs/runner.md §20).
pub const PREFLIGHT_CAP: Duration = Duration::from_secs(300);

/// Run a fresh worktree's declared preflight once, off the boot path (a build check can take
/// minutes and the seat must register meanwhile), and log its report.
fn spawn_preflight(command: String, wt: PathBuf) {
    tracing::info!(
        "worktree: preflight `{command}` started (capped at {}s)",
        PREFLIGHT_CAP.as_secs()
    );
    let spawned = std::thread::Builder::new()
        .name("preflight".into())
        .spawn(move || {
            let pf = run_preflight(&command, &wt, PREFLIGHT_CAP);
            let verdict = if pf.ok { "passed" } else { "FAILED" };
            tracing::info!("worktree: preflight `{command}` {verdict}");
            for line in &pf.tail {
                tracing::info!("worktree: preflight | {line}");
            }
        });
    if let Err(e) = spawned {
        tracing::warn!("worktree: preflight not started: {e}");
    }
}

/// Where a project declares what a seat worktree needs.
pub const DECLARATION_PATH: &str = ".trantor/worktree.json";

/// How a declared file reaches the worktree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProvisionMode {
    /// A symlink to the same path in the main checkout.
    Link,
    /// A new file, empty or copied from a template in the repository.
    Stub,
    /// Only named: the operator must put the real file there.
    Operator,
}

/// One declared file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Provision {
    /// The path, relative to the repository root.
    pub path: String,
    /// How it is provided.
    pub mode: ProvisionMode,
    /// For `stub`: a repository file whose content the stub gets.
    pub template: String,
}

/// The project's declaration: `{link:[…], provision:[{path, mode, template?}], preflight:"…"}`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WorktreeDeclaration {
    /// Sibling checkouts (relative paths outside the repository) the worktree must see at the
    /// same relative place.
    pub link: Vec<String>,
    /// Untracked files the build needs.
    pub provision: Vec<Provision>,
    /// A shell command that checks the worktree can build.
    pub preflight: String,
    /// What was wrong with the declaration itself.
    pub problems: Vec<String>,
}

/// Read `<root>/.trantor/worktree.json`; `None` when the project declares nothing.
pub fn read_declaration(root: &Path) -> Option<WorktreeDeclaration> {
    let text = std::fs::read_to_string(root.join(DECLARATION_PATH)).ok()?;
    let raw: serde_json::Value = match serde_json::from_str(&text) {
        Ok(v) => v,
        Err(e) => {
            return Some(WorktreeDeclaration {
                problems: vec![format!("{DECLARATION_PATH}: not valid JSON ({e})")],
                ..Default::default()
            });
        }
    };
    let mut decl = WorktreeDeclaration::default();
    match raw.get("link") {
        None | Some(serde_json::Value::Null) => {}
        Some(serde_json::Value::Array(items)) => {
            decl.link = items
                .iter()
                .filter_map(|v| v.as_str())
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect();
        }
        Some(_) => decl.problems.push(format!(
            "{DECLARATION_PATH}: \"link\" must be an array of relative paths"
        )),
    }
    for entry in raw
        .get("provision")
        .and_then(|v| v.as_array())
        .into_iter()
        .flatten()
    {
        let field = |k: &str| {
            entry
                .get(k)
                .and_then(|v| v.as_str())
                .unwrap_or("")
                .to_string()
        };
        let path = field("path");
        if path.is_empty() {
            decl.problems.push(format!(
                "{DECLARATION_PATH}: a provision entry has no \"path\""
            ));
            continue;
        }
        let mode = match field("mode").as_str() {
            "link" => ProvisionMode::Link,
            "stub" => ProvisionMode::Stub,
            "operator" => ProvisionMode::Operator,
            _ => {
                decl.problems.push(format!(
                    "{DECLARATION_PATH}: {path}: mode must be link|stub|operator"
                ));
                continue;
            }
        };
        decl.provision.push(Provision {
            path,
            mode,
            template: field("template"),
        });
    }
    decl.preflight = raw
        .get("preflight")
        .and_then(|v| v.as_str())
        .unwrap_or("")
        .trim()
        .to_string();
    Some(decl)
}

/// What applying a declaration did, entry by entry.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Applied {
    /// Sibling links made or found in place.
    pub linked: Vec<String>,
    /// Files linked or stubbed.
    pub provisioned: Vec<String>,
    /// Operator steps still owed.
    pub operator: Vec<String>,
    /// Everything that could not be done.
    pub problems: Vec<String>,
}

/// Resolve `rel` against `base` without touching the filesystem (`.` and `..` folded).
fn lexical_join(base: &Path, rel: &str) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    for c in base.join(rel).components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other.as_os_str()),
        }
    }
    out
}

/// Make `at` a symlink to `target`: "linked", "kept" (already that link) or "occupied".
fn link_one(target: &Path, at: &Path) -> std::io::Result<&'static str> {
    if let Ok(meta) = std::fs::symlink_metadata(at) {
        if meta.file_type().is_symlink() {
            let current = std::fs::read_link(at)?;
            let current = match at.parent() {
                Some(dir) if current.is_relative() => lexical_join(dir, &current.to_string_lossy()),
                _ => current,
            };
            return Ok(if current == target {
                "kept"
            } else {
                "occupied"
            });
        }
        return Ok("occupied");
    }
    if let Some(dir) = at.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::os::unix::fs::symlink(target, at)?;
    Ok("linked")
}

/// Apply a declaration to the seat worktree `seat`: sibling links land where the same relative
/// path resolves from the worktree; declared files are linked or stubbed, never copied; operator
/// entries are only named. Nothing here ever overwrites an existing file.
pub fn apply_declaration(decl: &WorktreeDeclaration, root: &Path, seat: &Path) -> Applied {
    let mut out = Applied {
        problems: decl.problems.clone(),
        ..Default::default()
    };
    for entry in &decl.link {
        link_entry(&mut out, root, seat, entry);
    }
    for p in &decl.provision {
        provision_entry(&mut out, root, seat, p);
    }
    out
}

/// One `link` entry of the declaration: a sibling checkout outside the repo, linked beside the
/// seat worktree as it sits beside the main checkout.
fn link_entry(out: &mut Applied, root: &Path, seat: &Path, entry: &str) {
    let target = lexical_join(root, entry);
    if Path::new(entry).is_absolute() || target.starts_with(root) {
        out.problems.push(format!(
            "link {entry}: must be a relative path outside the repo (a sibling checkout)"
        ));
        return;
    }
    if !target.exists() {
        out.problems.push(format!(
            "link {entry}: sibling checkout missing at {}",
            target.display()
        ));
        return;
    }
    let at = lexical_join(seat, entry);
    if at.starts_with(seat) {
        out.problems
            .push(format!("link {entry}: resolves inside the worktree"));
        return;
    }
    match link_one(&target, &at) {
        Ok("occupied") => out.problems.push(format!(
            "link {entry}: {} exists and is not a link to {}",
            at.display(),
            target.display()
        )),
        Ok(how) => out.linked.push(format!(
            "{entry} -> {}{}",
            target.display(),
            if how == "kept" {
                " (already linked)"
            } else {
                ""
            }
        )),
        Err(e) => out.problems.push(format!("link {entry}: {e}")),
    }
}

/// One `provision` entry: an operator step, a link to the main checkout's file, or a stub
/// (empty or from a template) — never over a tracked file or one already present.
fn provision_entry(out: &mut Applied, root: &Path, seat: &Path, p: &Provision) {
    let at = lexical_join(seat, &p.path);
    if Path::new(&p.path).is_absolute() || !at.starts_with(seat) || at == seat {
        out.problems.push(format!(
            "provision {}: must be a relative path inside the repo",
            p.path
        ));
        return;
    }
    if p.mode == ProvisionMode::Operator {
        out.operator.push(format!(
            "{}: operator step — put the real file at {}",
            p.path,
            at.display()
        ));
        return;
    }
    let path_arg = p.path.as_str();
    if git(
        seat,
        &["ls-files", "--error-unmatch", "--", path_arg],
        GIT_TIMEOUT,
    )
    .is_ok()
    {
        out.problems.push(format!(
            "provision {}: tracked in git, nothing to provision",
            p.path
        ));
        return;
    }
    let ignored = git(seat, &["check-ignore", "-q", "--", path_arg], GIT_TIMEOUT).is_ok();
    let note = if ignored {
        ""
    } else {
        " (not gitignored — the seat will see it as an untracked change)"
    };
    if p.mode == ProvisionMode::Link {
        let source = lexical_join(root, &p.path);
        if !source.exists() {
            out.problems.push(format!(
                "provision {}: mode link but {} is missing in the main checkout",
                p.path,
                source.display()
            ));
            return;
        }
        match link_one(&source, &at) {
            Ok("occupied") => out.problems.push(format!(
                "provision {}: {} exists and is not a link to {}",
                p.path,
                at.display(),
                source.display()
            )),
            Ok(how) => out.provisioned.push(format!(
                "{}: linked to {}{}{note}",
                p.path,
                source.display(),
                if how == "kept" { " (already)" } else { "" }
            )),
            Err(e) => out.problems.push(format!("provision {}: {e}", p.path)),
        }
        return;
    }
    if std::fs::symlink_metadata(&at).is_ok() {
        out.provisioned
            .push(format!("{}: already present (kept)", p.path));
        return;
    }
    let body = if p.template.is_empty() {
        Vec::new()
    } else {
        match std::fs::read(lexical_join(root, &p.template)) {
            Ok(b) => b,
            Err(_) => {
                out.problems.push(format!(
                    "provision {}: template {} missing in the repo",
                    p.path, p.template
                ));
                return;
            }
        }
    };
    let written = at
        .parent()
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|()| std::fs::write(&at, body));
    match written {
        Ok(()) => out.provisioned.push(format!(
            "{}: stubbed{}{note}",
            p.path,
            if p.template.is_empty() {
                " (empty)".to_string()
            } else {
                format!(" from {}", p.template)
            }
        )),
        Err(e) => out.problems.push(format!("provision {}: {e}", p.path)),
    }
}

/// The lines to print for an applied declaration: everything when `all` (a fresh worktree),
/// else only operator steps and problems.
pub fn provisioning_lines(applied: &Applied, all: bool) -> Vec<String> {
    let mut lines = Vec::new();
    if all {
        lines.extend(applied.linked.iter().map(|l| format!("linked {l}")));
        lines.extend(
            applied
                .provisioned
                .iter()
                .map(|l| format!("provisioned {l}")),
        );
    }
    lines.extend(applied.operator.iter().map(|l| format!("OPERATOR {l}")));
    lines.extend(applied.problems.iter().map(|l| format!("✗ {l}")));
    lines
}

/// The result of a preflight run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Preflight {
    /// Exit 0 within the cap.
    pub ok: bool,
    /// Killed at the cap.
    pub timed_out: bool,
    /// The last 20 non-empty lines of its output (plus a note on a kill or spawn failure).
    pub tail: Vec<String>,
}

/// Run the declared preflight once in the seat worktree under `cap` (the original's cap is
/// 5 minutes). The tail of the output is the whole report.
pub fn run_preflight(command: &str, seat: &Path, cap: Duration) -> Preflight {
    let mut cmd = Command::new("/bin/sh");
    cmd.arg("-c").arg(command).current_dir(seat);
    let (ok, timed_out, text, note) = match run_bounded(cmd, cap) {
        Ok(out) => {
            let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
            text.push_str(&String::from_utf8_lossy(&out.stderr));
            (out.status.success(), false, text, None)
        }
        Err(BoundedError::TimedOut { after, .. }) => (
            false,
            true,
            String::new(),
            Some(format!("preflight killed after {}s cap", after.as_secs())),
        ),
        Err(e) => (
            false,
            false,
            String::new(),
            Some(format!("could not run preflight: {e}")),
        ),
    };
    let lines: Vec<String> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_string)
        .collect();
    let mut tail: Vec<String> = lines[lines.len().saturating_sub(20)..].to_vec();
    tail.extend(note);
    Preflight {
        ok,
        timed_out,
        tail,
    }
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

/// What [`start_at_base`] did with the seat branch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BaseStart {
    /// HEAD already was the base, or already contains it.
    AlreadyThere,
    /// The seat branch was fast-forwarded to the base.
    Moved {
        /// Where the branch was before.
        from: String,
    },
    /// The branch was left as it is, for the reason given.
    Left(String),
}

/// Start a fresh card's work at the contract's `base: <sha>` (the integration head): a clean
/// seat worktree whose branch the base contains is fast-forwarded to it. A worktree with
/// uncommitted work, or a branch with commits the base lacks, is never moved — those commits
/// are the seat's work until `trantor sync` finds their harvest receipts (docs/runner.md §19.3).
pub fn start_at_base(wt: &Path, base: &str) -> BaseStart {
    match git(wt, &["status", "--porcelain"], GIT_TIMEOUT) {
        Ok(s) if !s.is_empty() => {
            return BaseStart::Left("uncommitted work in the seat worktree".into());
        }
        Ok(_) => {}
        Err(e) => return BaseStart::Left(format!("git status failed: {e}")),
    }
    let head = git(wt, &["rev-parse", "HEAD"], GIT_TIMEOUT).unwrap_or_default();
    let ancestor =
        |a: &str, b: &str| git(wt, &["merge-base", "--is-ancestor", a, b], GIT_TIMEOUT).is_ok();
    if ancestor(base, &head) {
        return BaseStart::AlreadyThere;
    }
    if !ancestor(&head, base) {
        return BaseStart::Left(
            "the seat branch has commits the base lacks (run `trantor sync` after they are \
             harvested)"
                .into(),
        );
    }
    match git(wt, &["merge", "--ff-only", "--quiet", base], GIT_TIMEOUT) {
        Ok(_) => BaseStart::Moved { from: head },
        Err(e) => BaseStart::Left(format!("fast-forward failed: {e}")),
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
        assert_eq!(crate::sys::paths::safe("claude"), "claude");
        assert_eq!(crate::sys::paths::safe("my.proj"), "my_proj");
        assert_eq!(crate::sys::paths::safe("a..b"), "a_b");
        assert_eq!(crate::sys::paths::safe("../x"), "__x");
        assert_eq!(crate::sys::paths::safe("a b/c:d"), "a_b_c_d");
        assert_eq!(crate::sys::paths::safe("ok_-9"), "ok_-9");
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
    fn declaration_links_stubs_and_names_operator_steps() {
        let tmp = tempfile::tempdir().expect("tmp");
        let repo = tmp.path().join("src/app");
        std::fs::create_dir_all(&repo).expect("mkdir");
        init_repo(&repo);
        let t = Duration::from_secs(20);
        std::fs::create_dir_all(tmp.path().join("src/lib")).expect("sibling");
        std::fs::write(repo.join(".gitignore"), ".env\nconfig.local\n").expect("ignore");
        std::fs::write(repo.join(".env"), "X=1\n").expect("env");
        std::fs::write(repo.join("config.example"), "example\n").expect("tpl");
        std::fs::create_dir_all(repo.join(".trantor")).expect("mkdir");
        std::fs::write(
            repo.join(DECLARATION_PATH),
            r#"{"link":["../lib","inside"],"provision":[
                {"path":".env","mode":"link"},
                {"path":"config.local","mode":"stub","template":"config.example"},
                {"path":"secrets.json","mode":"operator"},
                {"path":"README","mode":"stub"},
                {"path":"x","mode":"copy"}],"preflight":"echo ok"}"#,
        )
        .expect("decl");
        git(&repo, &["add", "."], t).expect("add");
        git(&repo, &["commit", "-q", "-m", "decl"], t).expect("commit");
        let bus = tmp.path().join("bus");
        let wt = ensure_seat_worktree(&repo, &bus, "p", "claude").expect("ensure");
        // The sibling resolves from the worktree the same way.
        let sib = wt.join("../lib");
        assert!(
            std::fs::symlink_metadata(bus.join("worktrees/p/lib"))
                .expect("link")
                .file_type()
                .is_symlink()
        );
        assert!(sib.exists());
        assert!(
            std::fs::symlink_metadata(wt.join(".env"))
                .expect("env")
                .file_type()
                .is_symlink()
        );
        assert_eq!(
            std::fs::read_to_string(wt.join("config.local")).expect("stub"),
            "example\n"
        );
        assert!(!wt.join("secrets.json").exists());

        let decl = read_declaration(&repo).expect("decl");
        assert_eq!(decl.problems.len(), 1, "{decl:?}");
        let again = apply_declaration(&decl, &repo, &wt);
        let lines = provisioning_lines(&again, false);
        assert!(
            lines.iter().any(|l| l.starts_with("OPERATOR secrets.json")),
            "{lines:?}"
        );
        assert!(
            lines
                .iter()
                .any(|l| l.contains("inside") && l.contains("outside the repo"))
        );
        assert!(
            lines
                .iter()
                .any(|l| l.contains("README") && l.contains("tracked"))
        );
        assert!(again.linked.iter().any(|l| l.contains("already linked")));
        // Nothing provisioned is overwritten.
        std::fs::write(wt.join("config.local"), "mine\n").expect("edit");
        apply_declaration(&decl, &repo, &wt);
        assert_eq!(
            std::fs::read_to_string(wt.join("config.local")).expect("kept"),
            "mine\n"
        );

        let pf = run_preflight(&decl.preflight, &wt, Duration::from_secs(30));
        assert!(pf.ok && pf.tail == vec!["ok".to_string()], "{pf:?}");
        let slow = run_preflight("sleep 30", &wt, Duration::from_millis(200));
        assert!(slow.timed_out && !slow.ok);
    }

    #[test]
    fn a_fresh_worktree_runs_the_declared_preflight_there() {
        let tmp = tempfile::tempdir().expect("tmp");
        let repo = tmp.path().join("repo");
        std::fs::create_dir_all(repo.join(".trantor")).expect("mkdir");
        init_repo(&repo);
        let marker = tmp.path().join("preflight-ran");
        std::fs::write(
            repo.join(DECLARATION_PATH),
            serde_json::json!({ "preflight": format!("pwd > '{}'", marker.display()) }).to_string(),
        )
        .expect("decl");
        let t = Duration::from_secs(20);
        git(&repo, &["add", "."], t).expect("add");
        git(&repo, &["commit", "-q", "-m", "decl"], t).expect("commit");
        let wt =
            ensure_seat_worktree(&repo, &tmp.path().join("bus"), "p", "claude").expect("ensure");
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let ran_in = loop {
            match std::fs::read_to_string(&marker) {
                Ok(s) if s.ends_with('\n') => break s,
                _ if std::time::Instant::now() > deadline => panic!("the preflight never ran"),
                _ => std::thread::sleep(Duration::from_millis(20)),
            }
        };
        assert!(same_path(Path::new(ran_in.trim()), &wt), "ran in {ran_in}");
    }

    #[test]
    fn base_branch_name_is_recorded() {
        let tmp = tempfile::tempdir().expect("tmp");
        let repo = tmp.path().join("repo");
        std::fs::create_dir_all(&repo).expect("mkdir");
        init_repo(&repo);
        ensure_seat_worktree(&repo, &tmp.path().join("bus"), "p", "claude").expect("ensure");
        let t = Duration::from_secs(20);
        assert_eq!(
            git(&repo, &["config", "branch.seat/claude.base"], t).expect("base"),
            "main"
        );
    }
}

//! The seat-side hollow-move check and blast radius of `relay_task_move` (`docs/protocol.md`
//! §15.7). The hub cannot see a seat's worktree, so the evidence is gathered where the MCP
//! server runs: a move to `doing` records HEAD for the card; a move to `testing` or `done`
//! diffs the worktree against it, reads the card's checklist and scans the note. A hollow move
//! still lands — it is flagged, never blocked.

use regex::Regex;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::LazyLock;
use std::time::Duration;
use trantor_proto::{ChecklistItem, Message};

/// A test command shape or a pass count.
static TEST_CMD: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?i)(node\s+test/|npm\s+(run\s+)?test|pnpm\s+test|yarn\s+test|vitest|pytest|go\s+test|cargo\s+test|make\s+test|\b\d+\s*/\s*\d+\b|\b\d+\s+passed\b)",
    )
    .unwrap_or_else(|_| Regex::new("$^").unwrap_or_else(|_| unreachable!()))
});
/// A declared no-code outcome: such a move is never flagged.
static NO_CODE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?i)\b(no[- ]code|docs?[- ]only|investigat\w*|read[- ]only|research[- ]only|analysis[- ]only|answered (on|in) the bus|refus\w+|declin\w+|won'?t fix)\b",
    )
    .unwrap_or_else(|_| Regex::new("$^").unwrap_or_else(|_| unreachable!()))
});
/// The sha the note says it verified against.
static VERIFIED_AT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\bverified at\s+([0-9a-f]{7,40})\b")
        .unwrap_or_else(|_| Regex::new("$^").unwrap_or_else(|_| unreachable!()))
});
/// A contract's `base: <sha>` line.
static BASE_LINE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?im)^\s*base:\s*([0-9a-f]{7,40})\b")
        .unwrap_or_else(|_| Regex::new("$^").unwrap_or_else(|_| unreachable!()))
});

/// What the flag names when the note does not say which sha it verified at.
pub const VERIFIED_AT_MISSING: &str = "verified-at sha in the note";
/// How long `graft blast` may take.
const BLAST_TIMEOUT: Duration = Duration::from_millis(2500);
/// Most paths a blast record lists.
const BLAST_PATHS_MAX: usize = 40;

/// The verdict on a testing/done move.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Verdict {
    /// Whether there was a recorded base to check against (false: the check fails open).
    pub checked: bool,
    /// Whether the move is hollow.
    pub hollow: bool,
    /// What is missing, in the original's words.
    pub missing: Vec<String>,
}

async fn git(cwd: &Path, args: &[&str]) -> Option<String> {
    let out = tokio::time::timeout(
        Duration::from_secs(10),
        tokio::process::Command::from(trantor_proto::git::git_command(cwd))
            .args(args)
            .stderr(std::process::Stdio::null())
            .output(),
    )
    .await
    .ok()?
    .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Where this worktree keeps the bases: `<git-dir>/hollow-base.json` (a linked worktree has its
/// own git dir, so seats never share bases).
async fn base_path(cwd: &Path) -> Option<PathBuf> {
    let dir = git(cwd, &["rev-parse", "--git-dir"]).await?;
    Some(cwd.join(dir).join("hollow-base.json"))
}

fn read_bases(path: &Path) -> BTreeMap<String, String> {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|s| serde_json::from_str(&s).ok())
        .unwrap_or_default()
}

/// Record HEAD as card `id`'s base (best effort: outside a git worktree nothing is recorded
/// and the later check fails open).
pub async fn mark_doing(cwd: &Path, id: i64) {
    let (Some(path), Some(head)) = (base_path(cwd).await, git(cwd, &["rev-parse", "HEAD"]).await)
    else {
        return;
    };
    let mut map = read_bases(&path);
    map.insert(id.to_string(), head);
    if let Ok(s) = serde_json::to_string(&map) {
        let _ = std::fs::write(&path, s);
    }
}

/// Whether the note names a test command or a pass count.
pub fn has_test_command(note: &str) -> bool {
    TEST_CMD.is_match(note)
}

/// Whether the note declares a no-code outcome (docs, investigation, refusal, …).
pub fn declares_no_code(note: &str) -> bool {
    NO_CODE.is_match(note)
}

/// Whether the note names the sha it verified at (`verified at <sha>`).
pub fn names_verified_sha(note: &str) -> bool {
    VERIFIED_AT.is_match(note)
}

/// The verdict on moving card `id` to testing or done with `note`, given its `checklist`.
/// Hollow when every piece of evidence is missing (no diff against the base, no new files, no
/// ticked checklist item, no test command in the note), or when the note names no verified-at
/// sha — unless the note declares a no-code outcome. Without a recorded base: not checked.
pub async fn verdict(cwd: &Path, id: i64, note: &str, checklist: &[ChecklistItem]) -> Verdict {
    let unchecked = Verdict::default();
    let Some(path) = base_path(cwd).await else {
        return unchecked;
    };
    let Some(base) = read_bases(&path).remove(&id.to_string()) else {
        return unchecked;
    };
    let mut missing: Vec<String> = Vec::new();
    match git(cwd, &["diff", "--name-only", &base, "--"]).await {
        Some(d) if d.is_empty() => missing.push("diff".into()),
        Some(_) => {}
        None => return unchecked,
    }
    match git(cwd, &["ls-files", "--others", "--exclude-standard"]).await {
        Some(d) if d.is_empty() => missing.push("new files".into()),
        Some(_) => {}
        None => return unchecked,
    }
    if !checklist.iter().any(|c| c.done) {
        missing.push("ticked checklist items".into());
    }
    if !has_test_command(note) {
        missing.push("test command in the note".into());
    }
    let evidenceless = missing.len() == 4;
    let unanchored = !names_verified_sha(note);
    if !evidenceless {
        missing.clear();
    }
    if unanchored {
        missing.push(VERIFIED_AT_MISSING.into());
    }
    Verdict {
        checked: true,
        hollow: (evidenceless || unanchored) && !declares_no_code(note),
        missing,
    }
}

/// The newest contract `base:` sha among a card's messages.
pub fn contract_base(messages: &[Message]) -> Option<String> {
    messages.iter().rev().find_map(|m| {
        BASE_LINE
            .captures(&m.text)
            .and_then(|c| c.get(1))
            .map(|s| s.as_str().to_string())
    })
}

/// The base the blast radius is measured from: the contract's `base:` when this worktree has
/// that commit, else the merge base of main and HEAD.
async fn blast_base(cwd: &Path, messages: &[Message]) -> Option<String> {
    if let Some(declared) = contract_base(messages)
        && git(cwd, &["cat-file", "-e", &format!("{declared}^{{commit}}")])
            .await
            .is_some()
    {
        return Some(declared);
    }
    git(cwd, &["merge-base", "main", "HEAD"])
        .await
        .filter(|s| !s.is_empty())
}

/// The blast radius of the card's committed changes, by `graft blast` (`GRAFT_BIN` names
/// another binary): `{base, changed[], unindexed[], dependents}`, or `{unavailable: true}` when
/// graft is absent, slow or fails. `None` when there is no base to measure from.
pub async fn blast(cwd: &Path, messages: &[Message]) -> Option<Value> {
    let base = blast_base(cwd, messages).await?;
    let bin = std::env::var("GRAFT_BIN").unwrap_or_else(|_| "graft".into());
    let run = tokio::process::Command::new(&bin)
        .args([
            "blast", "--base", &base, "--depth", "all", "--format", "json",
        ])
        .current_dir(cwd)
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let unavailable = Some(json!({ "unavailable": true }));
    let out = match tokio::time::timeout(BLAST_TIMEOUT, run).await {
        Ok(Ok(out)) if out.status.success() => out,
        _ => return unavailable,
    };
    let Ok(j) = serde_json::from_slice::<Value>(&out.stdout) else {
        return unavailable;
    };
    let paths = |v: &Value| -> Vec<String> {
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.get("path").and_then(Value::as_str).or(x.as_str()))
                    .filter(|s| !s.is_empty())
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default()
    };
    let changed = paths(&j["changed"]);
    let unindexed: Vec<String> = paths(&j["unindexed"])
        .into_iter()
        .filter(|p| changed.contains(p))
        .collect();
    let dependents: std::collections::BTreeSet<String> = paths(&j["impacted"])
        .into_iter()
        .filter(|p| !changed.contains(p))
        .collect();
    Some(json!({
        "base": base,
        "changed": changed.into_iter().take(BLAST_PATHS_MAX).collect::<Vec<_>>(),
        "unindexed": unindexed.into_iter().take(BLAST_PATHS_MAX).collect::<Vec<_>>(),
        "dependents": dependents.len(),
    }))
}

/// The one line the blast radius adds to the note.
pub fn blast_line(b: &Value) -> String {
    if b["unavailable"] == json!(true) {
        return "blast: unavailable".into();
    }
    let list = |k: &str| -> Vec<String> {
        b[k].as_array()
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default()
    };
    let unindexed = list("unindexed");
    let indexed: Vec<String> = list("changed")
        .into_iter()
        .filter(|p| !unindexed.contains(p))
        .collect();
    if indexed.is_empty() && unindexed.is_empty() {
        let base: String = b["base"].as_str().unwrap_or("").chars().take(7).collect();
        return format!("blast: no committed changes since {base}");
    }
    if indexed.is_empty() {
        return format!("blast: not in the graph ({})", unindexed.join(", "));
    }
    let n = b["dependents"].as_i64().unwrap_or(0);
    let deps = if n == 1 {
        "1 file depends".to_string()
    } else {
        format!("{n} files depend")
    };
    let tail = if unindexed.is_empty() {
        String::new()
    } else {
        format!(" ({} not in the graph)", unindexed.join(", "))
    };
    format!("blast: {deps} on the {} changed{tail}", indexed.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn note_patterns_follow_the_original() {
        assert!(has_test_command("ran cargo test -p x: 12 passed"));
        assert!(has_test_command("suite 40/40"));
        assert!(!has_test_command("changed the login form"));
        assert!(declares_no_code("docs-only change"));
        assert!(declares_no_code("Investigated: it is upstream"));
        assert!(!declares_no_code("fixed it"));
        assert!(names_verified_sha("verified at 1a2b3c4"));
        assert!(!names_verified_sha("verified at HEAD"));
    }

    #[test]
    fn blast_lines() {
        assert_eq!(
            blast_line(&json!({"unavailable": true})),
            "blast: unavailable"
        );
        assert_eq!(
            blast_line(
                &json!({"base": "0123456789", "changed": [], "unindexed": [], "dependents": 0})
            ),
            "blast: no committed changes since 0123456"
        );
        assert_eq!(
            blast_line(
                &json!({"base": "x", "changed": ["a.toml"], "unindexed": ["a.toml"], "dependents": 0})
            ),
            "blast: not in the graph (a.toml)"
        );
        assert_eq!(
            blast_line(
                &json!({"base": "x", "changed": ["a.rs", "b.toml"], "unindexed": ["b.toml"], "dependents": 1})
            ),
            "blast: 1 file depends on the 1 changed (b.toml not in the graph)"
        );
        assert_eq!(
            blast_line(
                &json!({"base": "x", "changed": ["a.rs", "c.rs"], "unindexed": [], "dependents": 5})
            ),
            "blast: 5 files depend on the 2 changed"
        );
    }
}

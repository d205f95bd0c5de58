//! `trantor reconcile`: board cleanup against the repository. The reaper only knows "owner
//! offline → stale"; reconcile reads this project's stuck cards and the recent commits of the
//! repository you are in, and judges each card: **done** when a commit names it (`#N`), so no
//! future session re-does shipped work; **stale** when it is in progress but its holder is not
//! live on the hub and no commit names it; **active** otherwise (left alone). It previews first
//! and changes nothing without `--yes` (docs/protocol.md §15.8).

use super::sweep::{fmt_age, parse_duration_ms};
use super::{Common, HubResult, print_json, usage};
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeSet;
use std::process::ExitCode;
use trantor_proto::{ClientError, HubClient, PeersReply, TaskUpdateRequest, TasksReply, now_ms};

pub(crate) const RECONCILE_HELP: &str = concat!(
    "\
Judges this project's stuck cards (todo, doing, testing or stale, untouched longer than --older)
against the last 200 commits of the repository you are in. A card a commit names (`#12`, as in
\"fix the login form (#12)\") is judged shipped and closed — or, when the card has no drill line,
parked at testing with the verdict on its log for the orchestrator's drill. An in-progress card
whose holder is not live on the hub, and that no commit names, moves to the stale lane. Every
other card is left alone. Nothing changes without --yes.

Examples:
  trantor reconcile                preview the verdicts for this project
  trantor reconcile --yes          apply them
  trantor reconcile --older 6h     only cards untouched this long (default 2h)

",
    exit_codes!()
);

/// `trantor reconcile` options.
#[derive(Debug, clap::Args)]
pub struct ReconcileArgs {
    /// Only cards untouched longer than this are candidates (ms, s, m, h, d).
    #[arg(long, short = 'o', default_value = "2h", value_name = "DURATION")]
    pub older: String,
    /// Apply the verdicts (without it, only preview).
    #[arg(long, short = 'y')]
    pub yes: bool,
    /// How many commits to read.
    #[arg(long, default_value_t = 200)]
    pub commits: usize,
    #[command(flatten)]
    pub common: Common,
}

/// A commit: its sha and subject.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Commit {
    pub sha: String,
    pub subject: String,
    /// Subject and body.
    pub message: String,
}

/// One card's verdict.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Verdict {
    pub id: i64,
    pub status: String,
    pub title: String,
    /// `done`, `stale` or `active`.
    pub verdict: String,
    pub reason: String,
    /// The commit that names the card, for `done`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub commit: String,
    /// After `--yes`: `closed`, `parked`, `staled` or `refused: …`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub outcome: String,
}

/// Whether `text` names card `id` as `#id` (not followed by another digit).
pub(crate) fn names_card(text: &str, id: i64) -> bool {
    let needle = format!("#{id}");
    text.match_indices(&needle).any(|(i, _)| {
        let after = text[i + needle.len()..].chars().next();
        !after.is_some_and(|c| c.is_ascii_digit())
    })
}

/// The last `n` commits of the repository in the working directory (empty outside one).
fn commits(n: usize) -> Vec<Commit> {
    let out = trantor_proto::git::git_command(std::path::Path::new("."))
        .args(["log", &format!("-{n}"), "--format=%H%x1f%s%x1f%B%x1e"])
        .stderr(std::process::Stdio::null())
        .output();
    let Ok(o) = out else {
        return Vec::new();
    };
    if !o.status.success() {
        return Vec::new();
    }
    String::from_utf8_lossy(&o.stdout)
        .split('\u{1e}')
        .filter_map(|rec| {
            let mut f = rec.trim_start_matches('\n').splitn(3, '\u{1f}');
            let sha = f.next()?.trim().to_string();
            let subject = f.next()?.trim().to_string();
            let message = f.next().unwrap_or("").trim().to_string();
            (!sha.is_empty()).then_some(Commit {
                sha,
                subject,
                message,
            })
        })
        .collect()
}

/// The verdicts on `cards` at `now`: candidates are open work cards (not sub-agent or focus
/// cards) untouched longer than `older_ms`.
pub(crate) fn judge(
    cards: &[Value],
    commits: &[Commit],
    live: &BTreeSet<String>,
    older_ms: i64,
    now: i64,
) -> Vec<Verdict> {
    let mut out = Vec::new();
    for c in cards {
        let status = c["status"].as_str().unwrap_or("");
        let source = c["source"].as_str().unwrap_or("");
        if !matches!(status, "todo" | "doing" | "testing" | "stale")
            || matches!(source, "cc-subagent" | "cc-bg-agent" | "session")
        {
            continue;
        }
        let touched = c["updated"]
            .as_i64()
            .filter(|t| *t > 0)
            .or_else(|| c["ts"].as_i64())
            .unwrap_or(0);
        if now - touched < older_ms {
            continue;
        }
        let Some(id) = c["id"].as_i64() else {
            continue;
        };
        let title = c["title"].as_str().unwrap_or("").to_string();
        let assignee = c["assignee"].as_str().unwrap_or("");
        let mut v = Verdict {
            id,
            status: status.to_string(),
            title,
            verdict: "active".into(),
            reason: String::new(),
            commit: String::new(),
            outcome: String::new(),
        };
        if let Some(k) = commits.iter().find(|k| names_card(&k.message, id)) {
            v.verdict = "done".into();
            v.commit = k.sha.chars().take(12).collect();
            v.reason = format!(
                "commit names #{id}: {}",
                k.subject.chars().take(80).collect::<String>()
            );
        } else if matches!(status, "doing" | "testing") && !live.contains(assignee) {
            v.verdict = "stale".into();
            v.reason = if assignee.is_empty() {
                "in progress with no holder, and no commit names it".into()
            } else {
                format!("{assignee} is not live on the hub, and no commit names it")
            };
        } else {
            v.reason = match status {
                "stale" => "already stale; no commit names it".into(),
                "todo" => "queued; no commit names it".into(),
                _ => format!("{assignee} is live"),
            };
        }
        out.push(v);
    }
    out
}

async fn move_card(
    hub: &HubClient,
    id: i64,
    status: &str,
    note: Option<String>,
) -> Result<(), ClientError> {
    let req = TaskUpdateRequest {
        id,
        status: Some(status.into()),
        note,
        by: Some("reconcile".into()),
        ..Default::default()
    };
    hub.post_with_op::<_, Value>("/task/update", &req, &trantor_proto::identity::new_op_id())
        .await
        .map(|_| ())
}

/// Close a card judged shipped; without a drill line it waits at testing.
async fn close(hub: &HubClient, v: &Verdict) -> String {
    let note = format!("reconcile: judged shipped at {} — {}", v.commit, v.reason);
    match move_card(hub, v.id, "done", Some(note.clone())).await {
        Ok(()) => "closed".into(),
        Err(ClientError::Http {
            status: 409, body, ..
        }) if body.error.to_lowercase().contains("drill") => {
            let parked = format!(
                "{note}; no drill line on the card, so it waits at testing for the \
                 orchestrator's drill"
            );
            match move_card(hub, v.id, "testing", Some(parked)).await {
                Ok(()) => "parked".into(),
                Err(e) => format!("refused: {e}"),
            }
        }
        Err(e) => format!("refused: {e}"),
    }
}

/// Run `trantor reconcile`.
pub(crate) async fn reconcile(a: ReconcileArgs) -> anyhow::Result<ExitCode> {
    let older_ms = parse_duration_ms(&a.older).ok_or_else(|| {
        usage(format!(
            "--older {:?}: give a duration like 90s, 30m, 2h or 1d",
            a.older
        ))
    })?;
    let (id, hub) = a.common.connect()?;
    let tasks: TasksReply<Value> = hub
        .get("/tasks", &[("project", id.project.clone())])
        .await
        .hub(&hub)?;
    let peers: PeersReply = hub.get("/peers", &[]).await.hub(&hub)?;
    let live: BTreeSet<String> = peers
        .peers
        .iter()
        .filter(|p| p.online)
        .map(|p| p.session.clone())
        .collect();
    let commits = commits(a.commits.max(1));
    let mut verdicts = judge(&tasks.tasks, &commits, &live, older_ms, now_ms());
    let json = a.common.json;
    if !json {
        say!("");
        say!(
            "🧠 trantor reconcile — {:?} · stuck > {} · judged against {} commit(s)",
            id.project,
            fmt_age(older_ms),
            commits.len()
        );
        say!("{}", "─".repeat(60));
    }
    if verdicts.is_empty() {
        if json {
            print_json(&verdicts)?;
        } else {
            say!("  nothing stuck to reconcile — the board is current.");
        }
        return Ok(ExitCode::SUCCESS);
    }
    let by = |k: &str| verdicts.iter().filter(|v| v.verdict == k).count();
    let (n_done, n_stale, n_active) = (by("done"), by("stale"), by("active"));
    if !json {
        say_verdicts(&verdicts);
    }
    if n_done + n_stale == 0 || !a.yes {
        if json {
            print_json(&verdicts)?;
        } else if n_done + n_stale == 0 {
            say!("");
            say!("  nothing to change — every stuck card is still active.");
        } else {
            say!("");
            say!("  {n_done} card(s) → done, {n_stale} → stale. Re-run to apply:");
            say!(
                "    trantor reconcile{} --yes",
                if a.older != "2h" {
                    format!(" --older {}", a.older)
                } else {
                    String::new()
                }
            );
        }
        return Ok(ExitCode::SUCCESS);
    }
    let t = apply(&hub, &mut verdicts, json).await;
    if json {
        print_json(&verdicts)?;
    } else {
        say!("");
        say!(
            "  ✓ reconciled: {} closed as done{}{}, {} moved to stale. {n_active} left active.",
            t.closed,
            if t.parked > 0 {
                format!(", {} parked at testing (no drill line)", t.parked)
            } else {
                String::new()
            },
            if t.refused > 0 {
                format!(", {} refused", t.refused)
            } else {
                String::new()
            },
            t.staled
        );
    }
    Ok(if t.refused > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// The verdicts for a person, grouped: done, stale, active.
fn say_verdicts(verdicts: &[Verdict]) {
    for (k, label) in [
        ("done", "✓ DONE — already shipped, will close"),
        ("stale", "🗑  STALE — abandoned, will move to Stale"),
        ("active", "• ACTIVE — still relevant, leaving alone"),
    ] {
        let rows: Vec<&Verdict> = verdicts.iter().filter(|v| v.verdict == k).collect();
        if rows.is_empty() {
            continue;
        }
        say!("  {label} ({}):", rows.len());
        for v in rows {
            let title: String = v.title.chars().take(62).collect();
            let commit = if v.commit.is_empty() {
                String::new()
            } else {
                format!(" ({})", v.commit)
            };
            say!("    #{} [{}] {title}", v.id, v.status);
            say!("        → {}{commit}: {}", v.verdict, v.reason);
        }
    }
}

/// What applying the verdicts did.
#[derive(Debug, Default)]
struct Tally {
    closed: usize,
    parked: usize,
    refused: usize,
    staled: usize,
}

/// Close the done cards and move the stale ones, noting each card's outcome.
async fn apply(hub: &HubClient, verdicts: &mut [Verdict], json: bool) -> Tally {
    let mut t = Tally::default();
    for v in verdicts.iter_mut() {
        match v.verdict.as_str() {
            "done" => {
                v.outcome = close(hub, v).await;
                match v.outcome.as_str() {
                    "closed" => t.closed += 1,
                    "parked" => t.parked += 1,
                    _ => t.refused += 1,
                }
            }
            "stale" => {
                v.outcome = match move_card(hub, v.id, "stale", None).await {
                    Ok(()) => {
                        t.staled += 1;
                        "staled".into()
                    }
                    Err(e) => {
                        t.refused += 1;
                        format!("refused: {e}")
                    }
                };
            }
            _ => {}
        }
        if !json && v.outcome.starts_with("refused") {
            eprintln!("    #{}: the hub {}", v.id, v.outcome);
        }
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_card_is_named_only_by_its_own_number() {
        assert!(names_card("fix the login form (#12)", 12));
        assert!(names_card("#12: done", 12));
        assert!(!names_card("fix #123", 12));
        assert!(!names_card("fix 12", 12));
    }

    #[test]
    fn verdicts_follow_the_evidence() {
        let now = 10 * 3_600_000;
        let old = now - 3 * 3_600_000;
        let cards = vec![
            json!({"id": 1, "status": "doing", "title": "login", "assignee": "a:p", "updated": old}),
            json!({"id": 2, "status": "doing", "title": "cart", "assignee": "gone:p", "updated": old}),
            json!({"id": 3, "status": "doing", "title": "live", "assignee": "a:p", "updated": old}),
            json!({"id": 4, "status": "todo", "title": "fresh", "updated": now - 60_000}),
            json!({"id": 5, "status": "done", "title": "closed", "updated": old}),
            json!({"id": 6, "status": "doing", "title": "sub", "source": "cc-subagent", "updated": old}),
            json!({"id": 7, "status": "todo", "title": "queued", "updated": old}),
        ];
        let commits = vec![Commit {
            sha: "0123456789abcdef".into(),
            subject: "the login form".into(),
            message: "the login form\n\nCloses #1.".into(),
        }];
        let live: BTreeSet<String> = ["a:p".to_string()].into();
        let v = judge(&cards, &commits, &live, 2 * 3_600_000, now);
        let got: Vec<(i64, &str)> = v.iter().map(|v| (v.id, v.verdict.as_str())).collect();
        assert_eq!(
            got,
            [(1, "done"), (2, "stale"), (3, "active"), (7, "active")]
        );
        assert_eq!(v[0].commit, "0123456789ab");
        assert_eq!(v[0].reason, "commit names #1: the login form");
        assert_eq!(
            v[1].reason,
            "gone:p is not live on the hub, and no commit names it"
        );
    }
}

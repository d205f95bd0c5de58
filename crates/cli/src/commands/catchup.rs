//! `trantor catchup`: "where are we on this project?" — the board's project digest
//! (`GET /catchup?project=`, docs/protocol.md §15.1) and the recent commits, on demand.

use super::{Common, HubResult, print_json};
use std::process::ExitCode;
use trantor_proto::lanes::{DigestCard, ProjectDigest};

pub(crate) const CATCHUP_HELP: &str = concat!(
    "\
What the session-start hook gives a new session, asked for by hand: the project's brief, its
cards by lane (in progress, testing, failed, blocked, queued, recently done) and the last
twelve commits of the repository you are in.

Examples:
  trantor catchup                  this project
  trantor catchup --project web    another project on the same hub
  trantor catchup --json           the digest as the hub sent it

",
    exit_codes!()
);

/// `trantor catchup` options.
#[derive(Debug, clap::Args)]
pub struct CatchupArgs {
    #[command(flatten)]
    pub common: Common,
}

/// The lines one lane prints, titles cut to 80 characters.
pub(crate) fn lane(title: &str, cards: &[DigestCard]) -> Vec<String> {
    if cards.is_empty() {
        return Vec::new();
    }
    let mut out = vec![String::new(), format!("{title}:")];
    for c in cards {
        let t: String = c.title.chars().take(80).collect();
        let who = if c.assignee.is_empty() {
            String::new()
        } else {
            format!(" @{}", c.assignee)
        };
        out.push(format!("  #{} {t}{who}", c.id));
    }
    out
}

/// The digest as text (without the commits).
pub(crate) fn render(d: &ProjectDigest) -> Vec<String> {
    if d.total == 0 {
        return vec![format!("No cards on the board for {:?} yet.", d.project)];
    }
    let mut out = Vec::new();
    if !d.brief.is_empty() {
        out.push(format!("Brief: {}", d.brief));
        out.push(String::new());
    }
    let n = |k: &str| d.counts.get(k).copied().unwrap_or(0);
    out.push(format!(
        "Cards: {} — {} done · {} doing · {} testing · {} todo · {} failed · {} blocked",
        d.total,
        n("done"),
        n("doing"),
        n("testing"),
        n("todo"),
        n("failed"),
        n("blocked")
    ));
    out.extend(lane("In progress", &d.doing));
    out.extend(lane("In testing", &d.testing));
    out.extend(lane("Failed (needs attention)", &d.failed));
    out.extend(lane("Blocked", &d.blocked));
    out.extend(lane("Queued", &d.todo));
    out.extend(lane("Recently done", &d.recent_done));
    out
}

fn recent_commits() -> Vec<String> {
    let out = trantor_proto::git::git_command(std::path::Path::new("."))
        .args(["log", "--oneline", "-12"])
        .stderr(std::process::Stdio::null())
        .output();
    match out {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout)
            .lines()
            .map(str::to_string)
            .collect(),
        _ => Vec::new(),
    }
}

/// Run `trantor catchup`.
pub(crate) async fn catchup(a: CatchupArgs) -> anyhow::Result<ExitCode> {
    let (id, hub) = a.common.connect()?;
    let digest: ProjectDigest = hub
        .get("/catchup", &[("project", id.project.clone())])
        .await
        .hub(&hub)?;
    if a.common.json {
        print_json(&digest)?;
        return Ok(ExitCode::SUCCESS);
    }
    say!("");
    say!("📋 trantor catchup — {}", digest.project);
    say!("{}", "─".repeat(48));
    for l in render(&digest) {
        say!("{l}");
    }
    let commits = recent_commits();
    if !commits.is_empty() {
        say!("");
        say!("Recent commits:");
        for c in commits {
            say!("  {c}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn card(id: i64, title: &str, assignee: &str) -> DigestCard {
        DigestCard {
            id,
            title: title.into(),
            assignee: assignee.into(),
            ..Default::default()
        }
    }

    #[test]
    fn an_empty_board_says_so() {
        let d = ProjectDigest {
            project: "web".into(),
            ..Default::default()
        };
        assert_eq!(render(&d), vec!["No cards on the board for \"web\" yet."]);
    }

    #[test]
    fn lanes_print_only_when_they_have_cards() {
        let mut d = ProjectDigest {
            project: "web".into(),
            brief: "a shop".into(),
            total: 2,
            doing: vec![card(3, "build the cart", "claude:web")],
            todo: vec![card(4, &"x".repeat(100), "")],
            ..Default::default()
        };
        d.counts.insert("doing".into(), 1);
        d.counts.insert("todo".into(), 1);
        let text = render(&d).join("\n");
        assert!(text.starts_with("Brief: a shop\n"), "{text}");
        assert!(
            text.contains("Cards: 2 — 0 done · 1 doing · 0 testing · 1 todo"),
            "{text}"
        );
        assert!(
            text.contains("In progress:\n  #3 build the cart @claude:web"),
            "{text}"
        );
        assert!(
            text.contains(&format!("Queued:\n  #4 {}", "x".repeat(80))),
            "{text}"
        );
        assert!(
            !text.contains("x".repeat(81).as_str()),
            "titles are cut to 80"
        );
        assert!(!text.contains("Blocked"), "{text}");
    }
}

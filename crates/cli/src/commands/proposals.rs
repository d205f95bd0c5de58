//! `trantor proposals`: the person's half of agent-proposed permissions (docs/protocol.md
//! §15.6). Agents file bounded proposals over the bus (`relay_propose`); here the owner lists
//! them and approves, denies or revokes. Deciding is owner-signed; the proposer is told over
//! the bus by the hub.

use super::identity::OwnerArgs;
use super::invite::operator_client;
use super::{HubResult, print_json, usage};
use std::process::ExitCode;
use trantor_proto::HubClient;
use trantor_proto::identity::{self, ProcessEnv};
use trantor_proto::proposals::{DecideRequest, Proposal, ProposalReply, ProposalsReply};

pub(crate) const PROPOSALS_HELP: &str = concat!(
    "\
Lists pending proposals on every hub this machine knows (the project's hub, the global
default and each per-project pin), or decides one. An id is unique per hub: when the same id
waits on several hubs, name one with --url.

Examples:
  trantor proposals                         what waits on you
  trantor proposals --all                   every proposal, any status
  trantor proposals approve 3 --note \"ok for this sprint\"
  trantor proposals deny 4 --note \"touches prod config\"   (a denial needs a reason)
  trantor proposals revoke 3                withdraw a grant

",
    exit_codes!()
);

/// `trantor proposals` options.
#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct ProposalsArgs {
    /// A decision instead of the list.
    #[command(subcommand)]
    pub action: Option<ProposalAction>,
    /// List every proposal, any status (default: pending only).
    #[arg(long)]
    pub all: bool,
    #[command(flatten)]
    pub owner: OwnerArgs,
}

/// Decisions on one proposal.
#[derive(Debug, clap::Subcommand)]
pub enum ProposalAction {
    /// Approve a pending proposal.
    Approve(DecideArgs),
    /// Deny a pending proposal (`--note` required: it is what stops a blind re-proposal).
    Deny(DecideArgs),
    /// Revoke an approved proposal (a grant).
    Revoke(DecideArgs),
}

/// Options of a decision.
#[derive(Debug, clap::Args)]
pub struct DecideArgs {
    /// The proposal's id.
    pub id: i64,
    /// A note to the proposer.
    #[arg(long)]
    pub note: Option<String>,
    #[command(flatten)]
    pub owner: OwnerArgs,
}

/// The lines one proposal prints.
pub(crate) fn render(p: &Proposal) -> Vec<String> {
    let when = |ts: i64| trantor_proto::date::fmt_utc_minutes(ts);
    let mut out = vec![
        format!(
            "  {} · {} · from {} · {}",
            p.headline(),
            p.project,
            p.session,
            when(p.ts)
        ),
        format!("      scope:       {}", p.scope),
        format!("      when:        {}", p.condition),
        format!("      NOT covered: {}", p.exclusions),
    ];
    if p.status != "pending" && p.decided_ts > 0 {
        let note = if p.note.is_empty() {
            String::new()
        } else {
            format!(" — {:?}", p.note)
        };
        out.push(format!(
            "      decided {} by {}{note}",
            when(p.decided_ts),
            p.decided_by
        ));
    }
    out
}

/// The hubs to look on: `--url` alone when given, else the project's hub, the global default
/// and every pin, each once.
fn hubs(a: &OwnerArgs) -> anyhow::Result<Vec<String>> {
    if let Some(u) = &a.common.url {
        return Ok(vec![u.trim_end_matches('/').to_string()]);
    }
    let (_, hub) = operator_client(&a.common, a.owner.as_deref())?;
    let mut out = vec![hub.base().to_string()];
    let cfg = std::fs::read_to_string(identity::bus_dir(&ProcessEnv).join("config.json"))
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok());
    if let Some(cfg) = cfg {
        let mut add = |v: &serde_json::Value| {
            if let Some(u) = v.as_str().map(|u| u.trim().trim_end_matches('/'))
                && !u.is_empty()
                && !out.iter().any(|o| o == u)
            {
                out.push(u.to_string());
            }
        };
        if let Some(u) = cfg.get("url") {
            add(u);
        }
        if let Some(h) = cfg.get("hubs").and_then(|h| h.as_object()) {
            h.values().for_each(&mut add);
        }
    }
    Ok(out)
}

/// A client for `url` signing as the owner.
fn client_for(a: &OwnerArgs, url: &str) -> anyhow::Result<HubClient> {
    let mut common = a.common.clone();
    common.url = Some(url.to_string());
    Ok(operator_client(&common, a.owner.as_deref())?.1)
}

/// Run `trantor proposals`.
pub(crate) async fn proposals(a: ProposalsArgs) -> anyhow::Result<ExitCode> {
    match a.action {
        None => list(&a.owner, a.all).await,
        Some(ProposalAction::Approve(d)) => decide(d, "approved").await,
        Some(ProposalAction::Deny(d)) => decide(d, "denied").await,
        Some(ProposalAction::Revoke(d)) => decide(d, "revoked").await,
    }
}

async fn list(owner: &OwnerArgs, all: bool) -> anyhow::Result<ExitCode> {
    let query: Vec<(&str, String)> = if all {
        Vec::new()
    } else {
        vec![("status", "pending".to_string())]
    };
    let hubs = hubs(owner)?;
    let single = hubs.len() == 1;
    let mut shown = 0usize;
    let mut collected = Vec::new();
    for url in &hubs {
        let hub = client_for(owner, url)?;
        let got: Result<ProposalsReply, _> = hub.get("/proposals", &query).await;
        let reply = match got {
            Ok(r) => r,
            // One hub of several being away is a warning; the only hub being away is the answer.
            Err(e) if !single => {
                eprintln!("  ⚠ {url}: {e}");
                continue;
            }
            Err(e) => return Err(e).hub(&hub),
        };
        if owner.common.json {
            collected.push(serde_json::json!({"hub": url, "proposals": reply.proposals}));
            continue;
        }
        if reply.proposals.is_empty() {
            continue;
        }
        say!("{url}");
        for p in &reply.proposals {
            for l in render(p) {
                say!("{l}");
            }
            shown += 1;
        }
    }
    if owner.common.json {
        print_json(&collected)?;
    } else if shown == 0 {
        say!(
            "{}",
            if all {
                "no proposals on any hub"
            } else {
                "no pending proposals — nothing waits on you"
            }
        );
    } else if !all {
        say!("");
        say!(
            "decide with: trantor proposals approve <id> [--note \"…\"]  ·  trantor proposals deny <id> --note \"…\""
        );
    }
    Ok(ExitCode::SUCCESS)
}

async fn decide(d: DecideArgs, status: &str) -> anyhow::Result<ExitCode> {
    if d.id <= 0 {
        return Err(usage(format!(
            "{}: a proposal id is a positive number",
            d.id
        )));
    }
    let note = d
        .note
        .map(|n| n.trim().to_string())
        .filter(|n| !n.is_empty());
    if status == "denied" && note.is_none() {
        return Err(usage(
            "a denial needs a reason: deny <id> --note \"why\" — the note is what stops the agent \
             proposing the same thing again",
        ));
    }
    // Approve and deny act on a pending proposal, revoke on an approved one: find the hub that
    // holds it before deciding.
    let want = if status == "revoked" {
        "approved"
    } else {
        "pending"
    };
    let mut holding = Vec::new();
    let hubs = hubs(&d.owner)?;
    for url in &hubs {
        let hub = client_for(&d.owner, url)?;
        let got: Result<ProposalsReply, _> =
            hub.get("/proposals", &[("status", want.to_string())]).await;
        match got {
            Ok(r) if r.proposals.iter().any(|p| p.id == d.id) => holding.push((url.clone(), hub)),
            Ok(_) => {}
            Err(e) if hubs.len() == 1 => return Err(e).hub(&hub),
            Err(e) => eprintln!("  ⚠ {url}: {e}"),
        }
    }
    let (url, hub) = match holding.len() {
        0 => {
            return Err(anyhow::anyhow!(
                "no {} proposal #{} on {}",
                want.to_uppercase(),
                d.id,
                if hubs.len() > 1 {
                    "any of your hubs".to_string()
                } else {
                    hubs.join("")
                }
            ));
        }
        1 => holding.remove(0),
        _ => {
            let names: Vec<&str> = holding.iter().map(|(u, _)| u.as_str()).collect();
            return Err(usage(format!(
                "proposal #{} is {want} on several hubs ({}) — pick one with --url",
                d.id,
                names.join(", ")
            )));
        }
    };
    let req = DecideRequest {
        id: d.id,
        status: Some(status.to_string()),
        note,
        by: None,
    };
    let reply: ProposalReply = hub.post("/proposal/decide", &req).await.hub(&hub)?;
    if d.owner.common.json {
        print_json(&reply)?;
    } else {
        say!(
            "{} #{} {} on {url} — the proposer ({}) has been told over the bus",
            trantor_proto::proposals::status_icon(&reply.proposal.status),
            reply.proposal.id,
            reply.proposal.status,
            reply.proposal.session
        );
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_decided_proposal_shows_who_and_why() {
        let mut p = Proposal {
            id: 3,
            session: "claude:web".into(),
            project: "web".into(),
            scope: "push to staging".into(),
            condition: "tests green".into(),
            exclusions: "prod".into(),
            status: "pending".into(),
            ts: 1_700_000_000_000,
            ..Default::default()
        };
        let pending = render(&p).join("\n");
        assert!(
            pending.contains("#3 ⏳ PENDING · web · from claude:web"),
            "{pending}"
        );
        assert!(pending.contains("NOT covered: prod"), "{pending}");
        assert!(!pending.contains("decided"), "{pending}");
        p.status = "denied".into();
        p.decided_ts = 1_700_000_060_000;
        p.decided_by = "admin".into();
        p.note = "not this week".into();
        let denied = render(&p).join("\n");
        assert!(denied.contains("⛔ DENIED"), "{denied}");
        assert!(denied.contains("by admin — \"not this week\""), "{denied}");
    }
}

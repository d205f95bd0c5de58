//! `trantor policy link|unlink|show`: the cross-project links the hub, the CLI and the runner
//! consult before letting one project's seat act on another's (a link records who declared it
//! and why).

use super::autonomy::dials_for;
use super::{Common, HubResult, print_json, usage};
use serde_json::Value;
use std::process::ExitCode;
use trantor_proto::{PolicyLinkRequest, PolicyRequest};

pub(crate) const POLICY_HELP: &str = concat!(
    "Examples:\n  trantor policy link web api --reason \"api seats review web's client\"\n  \
     trantor policy unlink web api\n  trantor policy show\n\n",
    exit_codes!()
);

/// `trantor policy` verbs.
#[derive(Debug, clap::Subcommand)]
pub enum PolicyCommand {
    /// Link 2–4 projects so their seats may wake and act on each other.
    Link(LinkArgs),
    /// Remove the link between exactly these projects.
    Unlink(UnlinkArgs),
    /// Show the links and every project's dials.
    Show(Common),
}

/// `trantor policy link` options.
#[derive(Debug, clap::Args)]
pub struct LinkArgs {
    /// Two to four projects.
    #[arg(required = true, num_args = 2..=4)]
    pub projects: Vec<String>,
    /// Why they are linked (recorded with the link).
    #[arg(long, required = true)]
    pub reason: String,
    #[command(flatten)]
    pub common: Common,
}

/// `trantor policy unlink` options.
#[derive(Debug, clap::Args)]
pub struct UnlinkArgs {
    /// The linked projects.
    #[arg(required = true, num_args = 2..=4)]
    pub projects: Vec<String>,
    #[command(flatten)]
    pub common: Common,
}

/// Run a `trantor policy` verb.
pub(crate) async fn policy(c: PolicyCommand) -> anyhow::Result<ExitCode> {
    let common = match &c {
        PolicyCommand::Link(a) => &a.common,
        PolicyCommand::Unlink(a) => &a.common,
        PolicyCommand::Show(common) => common,
    };
    let (id, hub) = common.connect()?;
    match &c {
        PolicyCommand::Link(a) => {
            if a.reason.trim().is_empty() {
                return Err(usage("say why with --reason \"…\""));
            }
            let req = PolicyRequest {
                link: Some(PolicyLinkRequest {
                    projects: a.projects.clone(),
                    reason: Some(a.reason.trim().to_string()),
                }),
                by: Some(id.session.clone()),
                ..Default::default()
            };
            let _: Value = hub.post("/policy", &req).await.hub(&hub)?;
            if !common.json {
                say!("linked {} ({})", a.projects.join(" ↔ "), a.reason.trim());
            }
        }
        PolicyCommand::Unlink(a) => {
            let before = hub.policy().await.hub(&hub)?;
            let req = PolicyRequest {
                unlink: Some(PolicyLinkRequest {
                    projects: a.projects.clone(),
                    reason: None,
                }),
                by: Some(id.session.clone()),
                ..Default::default()
            };
            let after: trantor_proto::PolicyReply = hub.post("/policy", &req).await.hub(&hub)?;
            if after.links.len() == before.links.len() {
                anyhow::bail!(
                    "{} were not linked (trantor policy show lists the links)",
                    a.projects.join(" ↔ ")
                );
            }
            if !common.json {
                say!("unlinked {}", a.projects.join(" ↔ "));
            }
        }
        PolicyCommand::Show(_) => {}
    }
    let p = hub.policy().await.hub(&hub)?;
    if common.json {
        print_json(&p)?;
        return Ok(ExitCode::SUCCESS);
    }
    if matches!(c, PolicyCommand::Show(_)) {
        if p.links.is_empty() {
            say!("no project links: every seat stays in its own project");
        }
        for l in &p.links {
            say!(
                "link {} — {} (by {}, {})",
                l.projects.join(" ↔ "),
                if l.reason.is_empty() {
                    "no reason"
                } else {
                    &l.reason
                },
                if l.declared_by.is_empty() {
                    "?"
                } else {
                    &l.declared_by
                },
                ago(trantor_proto::now_ms() - l.ts)
            );
        }
        let d = dials_for(&p, &id.project);
        say!(
            "dials for {}: commit {} · push {}",
            id.project,
            if d.commit { "on" } else { "off" },
            if d.push { "on" } else { "off" }
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// A short "how long ago" for a duration in ms.
fn ago(ms: i64) -> String {
    let s = (ms / 1000).max(0);
    match s {
        0..60 => format!("{s}s ago"),
        60..3600 => format!("{}m ago", s / 60),
        3600..86_400 => format!("{}h ago", s / 3600),
        _ => format!("{}d ago", s / 86_400),
    }
}

//! `trantor advise` (the Advisor) and `trantor profile` (the person's plans).

use super::{Common, HubResult, print_json, usage};
use std::process::ExitCode;
use trantor_mcp::advise as world;
use trantor_proto::advise::{Advice, PLANS, Package};

pub(crate) const ADVISE_HELP: &str = concat!(
    "\
Asks the hub's Advisor how to run a body of work: alone in your session (solo), on seats (crew),
or both (hybrid). Each package is DIFFICULTY:TITLE (easy, medium or hard), or give the whole
request as JSON with --file (`-` for stdin): {\"task\", \"packages\": [{\"title\", \"difficulty\",
\"files\", \"owner\", \"drill\"}], \"horizon\"}. The agent CLIs installed here are checked against
the driver table (as `trantor doctor` does), the plans come from `trantor profile`, the seats
from the hub. Nothing is started: the answer lists the `trantor up` to run and the cards to add.

Examples:
  trantor advise --task 'asteroids game' hard:engine medium:ui easy:readme
  trantor advise --file plan.json --json

",
    exit_codes!()
);

pub(crate) const PROFILE_HELP: &str = concat!(
    "\
Your plan per agent, so the Advisor knows which work is already paid for:
  api                                    pay per token
  free, pro, plus, team, tier, coding-plan   a capped subscription
  max, max-5x, max-20x, ultra            a high-tier subscription
  none                                   not available here
An agent not in the profile counts as api. Stored in <bus dir>/profile.json.

Examples:
  trantor profile set claude=max codex=plus opencode=api
  trantor profile show

",
    exit_codes!()
);

/// `trantor advise` options.
#[derive(Debug, clap::Args)]
pub struct AdviseArgs {
    /// Packages as DIFFICULTY:TITLE (`hard:engine`).
    #[arg(value_name = "DIFFICULTY:TITLE")]
    pub packages: Vec<String>,
    /// One line on the whole job.
    #[arg(long, default_value = "")]
    pub task: String,
    /// short, medium or long [default: from the package count].
    #[arg(long)]
    pub horizon: Option<String>,
    /// The request as JSON (`-`: stdin).
    #[arg(long, value_name = "FILE")]
    pub file: Option<String>,
    #[command(flatten)]
    pub common: Common,
}

/// `trantor profile` actions.
#[derive(Debug, clap::Subcommand)]
pub enum ProfileCommand {
    /// Set plans: `claude=max codex=plus`.
    Set {
        /// provider=plan pairs.
        #[arg(required = true, value_name = "PROVIDER=PLAN")]
        pairs: Vec<String>,
    },
    /// Show the profile.
    Show {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(serde::Deserialize)]
struct FileRequest {
    #[serde(default)]
    task: String,
    #[serde(default)]
    packages: Vec<Package>,
    #[serde(default)]
    horizon: Option<String>,
}

fn parse_package(s: &str) -> anyhow::Result<Package> {
    let Some((d, title)) = s.split_once(':') else {
        return Err(usage(format!(
            "package '{s}' has no difficulty: write it as easy:TITLE, medium:TITLE or hard:TITLE"
        )));
    };
    Ok(Package {
        title: title.trim().to_string(),
        difficulty: Some(d.trim().to_ascii_lowercase()),
        ..Default::default()
    })
}

pub(crate) async fn advise(a: AdviseArgs) -> anyhow::Result<ExitCode> {
    let (mut task, mut packages, mut horizon) = (a.task.clone(), Vec::new(), a.horizon.clone());
    if let Some(f) = &a.file {
        let text = if f == "-" {
            std::io::read_to_string(std::io::stdin())?
        } else {
            std::fs::read_to_string(f).map_err(|e| anyhow::anyhow!("cannot read {f}: {e}"))?
        };
        let r: FileRequest = serde_json::from_str(&text)
            .map_err(|e| usage(format!("{f} is not an advise request: {e}")))?;
        if task.is_empty() {
            task = r.task;
        }
        packages = r.packages;
        horizon = horizon.or(r.horizon);
    }
    for p in &a.packages {
        packages.push(parse_package(p)?);
    }
    if packages.is_empty() {
        return Err(usage(
            "no packages: give DIFFICULTY:TITLE arguments or --file (see trantor advise --help)",
        ));
    }
    let (id, hub) = a.common.connect()?;
    let bus = trantor_proto::identity::bus_dir(&trantor_proto::identity::ProcessEnv);
    let req = world::request(task, packages, horizon, &id.project, &bus).await?;
    let advice: Advice = hub.post("/advise", &req).await.hub(&hub)?;
    if a.common.json {
        print_json(&advice)?;
    } else {
        for line in world::render(&advice)
            .split("\nFull advice")
            .next()
            .unwrap_or("")
            .lines()
        {
            say!("{line}");
        }
        say!("(--json prints the routes, the estimate and the card_args in full)");
    }
    Ok(ExitCode::SUCCESS)
}

pub(crate) async fn profile(c: ProfileCommand) -> anyhow::Result<ExitCode> {
    let bus = trantor_proto::identity::bus_dir(&trantor_proto::identity::ProcessEnv);
    let json = match &c {
        ProfileCommand::Set { pairs } => {
            world::set_plans(&bus, pairs).map_err(|e| usage(e.to_string()))?;
            say!("profile saved: {}", world::profile_path(&bus).display());
            false
        }
        ProfileCommand::Show { json } => *json,
    };
    let prof = world::load_profile(&bus)?;
    if json {
        print_json(&prof.clone().unwrap_or_default())?;
        return Ok(ExitCode::SUCCESS);
    }
    let prof = match prof {
        Some(p) => p,
        None => {
            say!("no plan profile yet: the Advisor counts every agent as api (pay per token).");
            say!("Set one: trantor profile set claude=max codex=plus");
            return Ok(ExitCode::SUCCESS);
        }
    };
    say!("plan profile ({})", world::profile_path(&bus).display());
    for (agent, e) in &prof.providers {
        let kind = PLANS
            .iter()
            .find(|(n, _)| *n == e.plan)
            .map(|(_, k)| format!("{k:?}").to_lowercase())
            .unwrap_or_default();
        say!("  {agent:<10} {:<12} {kind}", e.plan);
    }
    say!("agents not listed count as api");
    Ok(ExitCode::SUCCESS)
}

pub(crate) const HANDOFF_HELP: &str = concat!(
    "\
Writes a handoff for this session: the summary (the arguments, or stdin with `-`), your open
contracts, the project's cards in flight and the recent bus traffic. It is saved under
<bus dir>/handoffs first and announced to the hub (`handoff.written`); a hub that is down gets
it with the next hook or handoff. The next Claude Code session started in this project gets it
once at its start (through `trantor hook session-start`).

Examples:
  trantor handoff 'TASK: … STATE: … NEXT: …'
  cat notes.md | trantor handoff -

",
    exit_codes!()
);

/// `trantor handoff` options.
#[derive(Debug, clap::Args)]
pub struct HandoffArgs {
    /// The summary (`-`: read it from stdin).
    #[arg(value_name = "SUMMARY")]
    pub summary: Vec<String>,
    #[command(flatten)]
    pub common: Common,
}

pub(crate) async fn handoff(a: HandoffArgs) -> anyhow::Result<ExitCode> {
    let summary = if a.summary == ["-"] {
        std::io::read_to_string(std::io::stdin())?
    } else {
        a.summary.join(" ")
    };
    if summary.trim().is_empty() {
        return Err(usage(
            "no summary: give it as arguments or pipe it in with `-` (task, state, next steps)",
        ));
    }
    let (id, hub) = a.common.connect()?;
    let bus = trantor_proto::identity::bus_dir(&trantor_proto::identity::ProcessEnv);
    let (h, path) = trantor_mcp::handoff::write(
        &hub,
        &bus,
        &id.session,
        &id.project,
        "",
        "trantor-handoff",
        &summary,
    )
    .await?;
    if a.common.json {
        print_json(&h)?;
    } else {
        say!("handoff {} saved: {}", h.id, path.display());
        if h.sent {
            say!("announced to the hub ({})", id.hub_url);
        } else {
            say!(
                "the hub at {} did not answer: the handoff is kept and sent with the next hook",
                id.hub_url
            );
        }
        say!(
            "the next session started in {} gets it once ({} open contract(s), {} card(s) in flight)",
            h.project,
            h.contracts.len(),
            h.cards.len()
        );
    }
    Ok(ExitCode::SUCCESS)
}

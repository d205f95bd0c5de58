//! `trantor harvest <seat-sha> <main-sha>`: the receipt for a hand-made cherry-pick or squash,
//! so `trantor sync` knows the seat commit reached the integration branch under another sha.

use super::crew::{self, Receipt, g, short};
use super::{Common, print_json, usage};
use std::path::PathBuf;
use std::process::ExitCode;

pub(crate) const HARVEST_HELP: &str = concat!(
    "Examples:\n  git cherry-pick 1a2b3c4 && trantor harvest 1a2b3c4 HEAD --card 12\n  \
     trantor harvest 1a2b3c4 9f8e7d6 --seat claude\n\n",
    "The main sha must be on the integration branch (the branch of the main checkout). The \
     receipt goes to the bus directory's harvest/<project>.jsonl; the card(s) get the note \
     `harvested <seat-sha> as <main-sha>`.\n\n",
    exit_codes!()
);

/// `trantor harvest` options.
#[derive(Debug, clap::Args)]
pub struct HarvestArgs {
    /// The seat commit that was harvested.
    pub seat_sha: String,
    /// The commit on the integration branch that carries it.
    pub main_sha: String,
    /// The card(s) the work belongs to [default: the seat's open cards].
    #[arg(long = "card", value_name = "N")]
    pub cards: Vec<i64>,
    /// The seat persona [default: the seat branch that contains the seat sha].
    #[arg(long)]
    pub seat: Option<String>,
    #[command(flatten)]
    pub common: Common,
}

/// Run `trantor harvest`.
pub(crate) async fn harvest(a: HarvestArgs) -> anyhow::Result<ExitCode> {
    let (id, hub) = a.common.connect()?;
    let project = id.project.clone();
    let cwd = std::env::current_dir()?;
    let main = crew::main_checkout(&cwd).map_err(|e| usage(format!("{e:#}")))?;
    let branch = crew::integration_branch(&main)?;
    let seat_sha = crew::resolve(&main, &a.seat_sha)
        .ok_or_else(|| usage(format!("cannot resolve seat commit {}", a.seat_sha)))?;
    let main_sha = crew::resolve(&main, &a.main_sha)
        .ok_or_else(|| usage(format!("cannot resolve main commit {}", a.main_sha)))?;
    if !crew::is_ancestor(&main, &main_sha, &branch) {
        anyhow::bail!(
            "{} is not on {branch}: a receipt must point at a commit the integration branch \
             contains",
            short(&main_sha)
        );
    }
    let persona = match a.seat {
        Some(s) => s.trim().trim_start_matches("seat/").to_string(),
        None => {
            let holders = g(
                &main,
                &[
                    "for-each-ref",
                    "--contains",
                    &seat_sha,
                    "--format=%(refname:short)",
                    "refs/heads/seat/",
                ],
            )?;
            let names: Vec<&str> = holders.lines().collect();
            match names.as_slice() {
                [one] => one.trim_start_matches("seat/").to_string(),
                [] => {
                    return Err(usage(format!(
                        "no seat branch contains {}: name the seat with --seat",
                        short(&seat_sha)
                    )));
                }
                many => {
                    return Err(usage(format!(
                        "{} is on several seat branches ({}): name the seat with --seat",
                        short(&seat_sha),
                        many.join(", ")
                    )));
                }
            }
        }
    };
    if persona.is_empty() {
        return Err(usage("the seat name is empty"));
    }
    let bus = super::seats::bus_dir();
    let _lock = crew::lock_project(&bus, &project, "harvest")?;
    let file: PathBuf = crew::receipts_path(&bus, &project);
    crew::read_receipts(&file)?;
    let session = format!("{persona}:{project}");
    let cards = if a.cards.is_empty() {
        crew::harvest_cards(&hub, &project, &session).await
    } else {
        a.cards.clone()
    };
    let r = Receipt {
        project: project.clone(),
        seat: persona.clone(),
        seat_sha: seat_sha.clone(),
        main_sha: main_sha.clone(),
        branch: format!("seat/{persona}"),
        into: branch.clone(),
        cards: cards.clone(),
        by: id.session.clone(),
        ts: trantor_proto::now_ms(),
    };
    crew::append_receipts(&file, std::slice::from_ref(&r))?;
    let note = format!(
        "harvested {} as {} (seat/{persona} → {branch}, by hand)",
        short(&seat_sha),
        short(&main_sha)
    );
    let problems = crew::note_cards(&hub, &cards, &note, &id.session).await;
    if a.common.json {
        print_json(&serde_json::json!({"receipt": r, "problems": problems}))?;
    } else {
        let ids: Vec<String> = cards.iter().map(|c| format!("#{c}")).collect();
        say!(
            "receipt: {} (seat/{persona}) harvested as {} on {branch}{}",
            short(&seat_sha),
            short(&main_sha),
            if ids.is_empty() {
                String::new()
            } else {
                format!("; noted {}", ids.join(" "))
            }
        );
        for p in &problems {
            say!("  could not note {p}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

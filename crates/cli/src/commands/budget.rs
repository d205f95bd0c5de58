//! `trantor budget`: dollar ceilings per project or card (docs/protocol.md §7.8). A seat whose
//! next turn would spend past one parks `budget` and tells the assigner (docs/runner.md §12.6).

use super::cost::{dollars, tokens};
use super::{Common, HubResult, print_json, table, usage};
use std::process::ExitCode;
use trantor_proto::budget::{BudgetInfo, BudgetRequest, BudgetsReply};

pub(crate) const BUDGET_HELP: &str = concat!(
    "\
A budget is a dollar ceiling on what a card's or a project's turns may cost, as the cost ledger
adds them up (trantor cost). Before each turn a seat asks: when the scope has spent its
budget, or one more turn of its mean cost so far would pass it, the seat parks `budget`
without spawning, keeps the contract, and tells whoever sent it. Raising (or clearing) the
budget lets the seat run it within 15 s. Setting one needs the hub's owner.

Examples:
  trantor budget                          this project's budgets and what each spent
  trantor budget set 20                   this project: at most $20
  trantor budget set 2.50 --card 12       card #12: at most $2.50
  trantor budget clear --card 12

",
    exit_codes!()
);

/// `trantor budget` options (without a subcommand: list).
#[derive(Debug, clap::Args)]
pub struct BudgetArgs {
    #[command(subcommand)]
    pub action: Option<BudgetAction>,
    #[command(flatten)]
    pub scope: ScopeArgs,
}

/// `trantor budget` subcommands (none: list).
#[derive(Debug, clap::Subcommand)]
pub enum BudgetAction {
    /// Set the budget of this project, or of one of its cards.
    Set(SetArgs),
    /// Remove the budget of this project, or of one of its cards.
    Clear(ScopeArgs),
    /// List the budgets with what each scope spent (the default).
    List(ScopeArgs),
}

/// `trantor budget set` options.
#[derive(Debug, clap::Args)]
pub struct SetArgs {
    /// The ceiling in dollars (e.g. 2.50 or $2.50).
    pub usd: String,
    #[command(flatten)]
    pub scope: ScopeArgs,
}

/// Which budget: a card's, or the project's.
#[derive(Debug, clap::Args)]
pub struct ScopeArgs {
    /// A card's budget instead of the project's.
    #[arg(long, value_name = "N")]
    pub card: Option<String>,
    #[command(flatten)]
    pub common: Common,
}

/// `2.50`, `$2.50`: dollars, finite and not negative.
fn parse_usd(v: &str) -> Option<f64> {
    let n: f64 = v.trim().trim_start_matches('$').parse().ok()?;
    (n.is_finite() && n >= 0.0).then_some(n)
}

fn parse_card(v: &Option<String>) -> anyhow::Result<Option<i64>> {
    v.as_ref()
        .map(|c| {
            c.trim()
                .trim_start_matches('#')
                .parse::<i64>()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| usage(format!("--card wants a card id, not {c:?}")))
        })
        .transpose()
}

/// Run `trantor budget`.
pub(crate) async fn budget(a: BudgetArgs) -> anyhow::Result<ExitCode> {
    let (usd, scope) = match a.action {
        Some(BudgetAction::Set(s)) => {
            let usd = parse_usd(&s.usd).ok_or_else(|| {
                usage(format!(
                    "the budget is a dollar amount like 2.50, not {:?}",
                    s.usd
                ))
            })?;
            (Some(Some(usd)), s.scope)
        }
        Some(BudgetAction::Clear(s)) => (Some(None), s),
        Some(BudgetAction::List(s)) => (None, s),
        None => (
            None,
            ScopeArgs {
                card: None,
                common: Common::default(),
            },
        ),
    };
    // Options given before the subcommand count as well (`trantor budget --json set 2`).
    let scope = ScopeArgs {
        card: scope.card.or(a.scope.card),
        common: Common {
            json: scope.common.json || a.scope.common.json,
            url: scope.common.url.or(a.scope.common.url),
            session: scope.common.session.or(a.scope.common.session),
            project: scope.common.project.or(a.scope.common.project),
        },
    };
    let card = parse_card(&scope.card)?;
    let (id, hub) = scope.common.connect()?;
    let reply: BudgetsReply = match usd {
        Some(usd) => {
            let req = BudgetRequest {
                project: id.project.clone(),
                card,
                usd,
                by: Some(id.session.clone()),
            };
            hub.post("/budgets", &req).await.hub(&hub)?
        }
        None => hub
            .get("/budgets", &[("project", id.project.clone())])
            .await
            .hub(&hub)?,
    };
    if scope.common.json {
        print_json(&reply)?;
        return Ok(ExitCode::SUCCESS);
    }
    match (usd, card) {
        (Some(Some(d)), Some(c)) => say!("card #{c}: budget ${d:.2}"),
        (Some(Some(d)), None) => say!("project {}: budget ${d:.2}", id.project),
        (Some(None), Some(c)) => say!("card #{c}: no budget"),
        (Some(None), None) => say!("project {}: no budget", id.project),
        (None, _) => {}
    }
    if reply.budgets.is_empty() {
        say!("no budgets in project {}", id.project);
        return Ok(ExitCode::SUCCESS);
    }
    say!("{}", render(&reply.budgets));
    Ok(ExitCode::SUCCESS)
}

/// The budgets as a table: scope, ceiling, spent, turns, tokens, and whether it is spent.
fn render(budgets: &[BudgetInfo]) -> String {
    let rows: Vec<Vec<String>> = budgets
        .iter()
        .map(|b| {
            vec![
                match b.card {
                    Some(c) => format!("#{c}"),
                    None => format!("project {}", b.project),
                },
                format!("${:.2}", b.usd),
                dollars(&b.spent),
                b.spent.turns.to_string(),
                format!(
                    "{} in / {} out",
                    tokens(b.spent.tokens_in),
                    tokens(b.spent.tokens_out)
                ),
                if b.over {
                    "spent: seats park".into()
                } else {
                    String::new()
                },
            ]
        })
        .collect();
    table::render(&["BUDGET", "USD", "SPENT", "TURNS", "TOKENS", ""], &rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dollars_and_cards_parse_or_are_refused() {
        assert_eq!(parse_usd("2.50"), Some(2.5));
        assert_eq!(parse_usd("$20"), Some(20.0));
        assert_eq!(parse_usd("0"), Some(0.0));
        for bad in ["", "-1", "NaN", "inf", "two"] {
            assert_eq!(parse_usd(bad), None, "{bad}");
        }
        assert_eq!(parse_card(&Some("#12".into())).ok().flatten(), Some(12));
        assert!(parse_card(&Some("0".into())).is_err());
        assert!(parse_card(&Some("x".into())).is_err());
        assert_eq!(parse_card(&None).ok().flatten(), None);
    }
}

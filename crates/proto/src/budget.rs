//! Budgets (docs/protocol.md §7.8): a dollar ceiling per card or per project, set by an
//! operator (`POST /budgets`), checked by a seat before each turn (`GET /budgets/check`). A seat
//! whose next turn would spend past one parks `budget` and tells the assigner instead of
//! spending (docs/runner.md §12.6).

use crate::cost::{CostSummary, USD_MAX};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Most budgets one hub keeps (cards and projects together).
pub const BUDGETS_MAX: usize = 10_000;

/// `POST /budgets` body: set (or, with `usd: null`, remove) the budget of a project or, with
/// `card`, of one of its cards.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BudgetRequest {
    /// The project (for a card's budget, the card's project).
    #[schemars(length(min = 1, max = crate::limits::PROJECT))]
    pub project: String,
    /// The card, for a card's budget (absent: the project's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub card: Option<i64>,
    /// The ceiling in dollars (`null`: remove the budget).
    #[serde(default)]
    #[schemars(range(min = 0.0, max = USD_MAX))]
    pub usd: Option<f64>,
    /// Who sets it (a session or a person's name, for the record).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = crate::limits::SESSION))]
    pub by: Option<String>,
}

/// One budget and what its scope has spent.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BudgetInfo {
    /// The project.
    pub project: String,
    /// The card (`null`: the project's budget).
    pub card: Option<i64>,
    /// The ceiling, dollars.
    pub usd: f64,
    /// What the scope's recorded turns cost so far.
    pub spent: CostSummary,
    /// The scope cannot afford another turn ([`verdict`]).
    pub over: bool,
    /// Who set it.
    #[serde(default)]
    pub by: String,
    /// When, ms.
    #[serde(default)]
    pub ts: i64,
}

/// `GET /budgets` and `POST /budgets` reply.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct BudgetsReply {
    /// True on success.
    pub ok: bool,
    /// The budgets asked for, projects first, then cards by id.
    pub budgets: Vec<BudgetInfo>,
}

/// `GET /budgets/check` reply: whether a turn on this card of this project may run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct BudgetCheck {
    /// True when no budget stops the turn.
    pub ok: bool,
    /// The budget that stops it (the card's before the project's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub over: Option<BudgetInfo>,
    /// Why, for a person: "card #4's budget $0.50: $0.48 spent in 3 turns, a turn costs ~$0.16".
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
}

/// Whether a scope that spent `spent` can afford another turn under a ceiling of `usd`: not
/// once it has spent the ceiling, nor when one more turn of its mean cost so far would pass it.
/// A scope with no recorded turn (or none with known dollars) can always start one: the first
/// turn is what tells the cost.
pub fn verdict(usd: f64, spent: &CostSummary) -> bool {
    if spent.usd >= usd {
        return true;
    }
    let priced = spent.turns.saturating_sub(spent.unknown);
    if priced == 0 {
        return false;
    }
    let mean = spent.usd / priced as f64;
    spent.usd + mean > usd
}

/// The person's sentence for a budget that stops a turn.
pub fn reason(b: &BudgetInfo) -> String {
    let scope = match b.card {
        Some(c) => format!("card #{c}'s budget"),
        None => format!("project {}'s budget", b.project),
    };
    let priced = b.spent.turns.saturating_sub(b.spent.unknown);
    let mean = if priced > 0 {
        format!(", a turn costs ~${:.2}", b.spent.usd / priced as f64)
    } else {
        String::new()
    };
    format!(
        "{scope} ${:.2}: ${:.2} spent in {} turn(s){mean}",
        b.usd, b.spent.usd, b.spent.turns
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spent(usd: f64, turns: u64, unknown: u64) -> CostSummary {
        CostSummary {
            usd,
            turns,
            unknown,
            ..CostSummary::default()
        }
    }

    #[test]
    fn a_scope_is_over_when_it_spent_the_ceiling_or_the_next_turn_would_pass_it() {
        let table: &[(f64, CostSummary, bool, &str)] = &[
            (
                1.0,
                spent(0.0, 0, 0),
                false,
                "nothing spent: the first turn runs",
            ),
            (0.0, spent(0.0, 0, 0), true, "a zero budget allows nothing"),
            (1.0, spent(1.0, 4, 0), true, "the ceiling spent"),
            (
                1.0,
                spent(0.5, 2, 0),
                false,
                "two turns of 0.25: a third fits",
            ),
            (1.0, spent(0.8, 2, 0), true, "a turn of ~0.40 would pass it"),
            (1.0, spent(0.6, 3, 0), false, "0.6 + 0.2 fits"),
            (
                1.0,
                spent(0.0, 3, 3),
                false,
                "no known dollars: nothing to judge by",
            ),
            (
                1.0,
                spent(0.9, 2, 1),
                true,
                "the known turn cost 0.9: another would pass",
            ),
        ];
        for (usd, s, over, why) in table {
            assert_eq!(verdict(*usd, s), *over, "{why}");
        }
    }

    #[test]
    fn the_reason_names_the_scope_and_the_figures() {
        let b = BudgetInfo {
            project: "web".into(),
            card: Some(4),
            usd: 0.5,
            spent: spent(0.48, 3, 0),
            over: true,
            ..BudgetInfo::default()
        };
        assert_eq!(
            reason(&b),
            "card #4's budget $0.50: $0.48 spent in 3 turn(s), a turn costs ~$0.16"
        );
        let p = BudgetInfo { card: None, ..b };
        assert!(reason(&p).starts_with("project web's budget $0.50"));
    }
}

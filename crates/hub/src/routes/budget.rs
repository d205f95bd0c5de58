//! Budgets (docs/protocol.md §7.8): `POST /budgets` sets or removes the dollar ceiling of a
//! project or a card (an owner's call: a seat must not raise its own), `GET /budgets` lists
//! them with what each scope spent, and `GET /budgets/check` is what a seat asks before a turn
//! (docs/runner.md §12.6). What a scope spent is the cost ledger's sum (`GET /cost`), so a
//! budget needs no bookkeeping of its own.

use crate::error::{ApiError, ApiResult, check_len, check_required};
use crate::extract::{JsonBody, Params};
use crate::openapi::{RouteDoc, Ty, Verb, f, shape};
use crate::state::AppState;
use axum::Json;
use axum::extract::State;
use axum::routing::{MethodRouter, get, post};
use serde::{Deserialize, Serialize};
use trantor_proto::budget::{
    self, BUDGETS_MAX, BudgetCheck, BudgetInfo, BudgetRequest, BudgetsReply,
};
use trantor_proto::cost::USD_MAX;
use trantor_proto::{limits, now_ms};
use trantor_store::{CostBy, CostQuery, ReadTx, Store, StoreError};

/// The kv document holding every budget.
pub const KEY: &str = "budgets";

/// One stored budget (what the operator set; the spending is read from the ledger).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Stored {
    project: String,
    #[serde(default)]
    card: Option<i64>,
    usd: f64,
    #[serde(default)]
    by: String,
    #[serde(default)]
    ts: i64,
}

/// The routes of this module.
pub fn table<S: Store>() -> Vec<(RouteDoc, MethodRouter<AppState<S>>)> {
    vec![
        (
            RouteDoc {
                verb: Verb::Post,
                path: "/budgets",
                summary: "Set (or, with usd null, remove) the dollar budget of a project or one of its cards (owner)",
                query: &[],
                body: Some(shape::<BudgetRequest>),
                reply: Some(shape::<BudgetsReply>),
            },
            post(set::<S>),
        ),
        (
            RouteDoc {
                verb: Verb::Get,
                path: "/budgets",
                summary: "The budgets of a project (or every one), each with what its scope spent",
                query: fields![
                    f("project", Ty::Str, false, "only this project's budgets")
                        .max(limits::PROJECT),
                ],
                body: None,
                reply: Some(shape::<BudgetsReply>),
            },
            get(list::<S>),
        ),
        (
            RouteDoc {
                verb: Verb::Get,
                path: "/budgets/check",
                summary: "Whether a turn on this card of this project may run under their budgets",
                query: fields![
                    f("project", Ty::Str, true, "the seat's project").max(limits::PROJECT),
                    f(
                        "card",
                        Ty::Int,
                        false,
                        "the card the turn works on (0: none)"
                    )
                    .min(0),
                ],
                body: None,
                reply: Some(shape::<BudgetCheck>),
            },
            get(check::<S>),
        ),
    ]
}

fn stored(tx: &dyn ReadTx) -> Result<Vec<Stored>, StoreError> {
    Ok(tx
        .kv(KEY)?
        .and_then(|v| serde_json::from_value(v).ok())
        .unwrap_or_default())
}

/// A stored budget with what its scope spent.
fn info(tx: &dyn ReadTx, b: &Stored) -> Result<BudgetInfo, StoreError> {
    let q = CostQuery {
        card: b.card,
        project: b.card.is_none().then(|| b.project.clone()),
        ..CostQuery::default()
    };
    let spent = tx
        .cost(&q, CostBy::Total, 0)?
        .pop()
        .map(|(_, c)| c)
        .unwrap_or_default();
    Ok(BudgetInfo {
        over: budget::verdict(b.usd, &spent),
        project: b.project.clone(),
        card: b.card,
        usd: b.usd,
        spent,
        by: b.by.clone(),
        ts: b.ts,
    })
}

/// Projects first (by name), then cards by id.
fn sorted(mut all: Vec<Stored>) -> Vec<Stored> {
    all.sort_by(|a, b| {
        (a.card.is_some(), a.card, &a.project).cmp(&(b.card.is_some(), b.card, &b.project))
    });
    all
}

/// `POST /budgets`.
pub async fn set<S: Store>(
    State(hub): State<AppState<S>>,
    JsonBody(req): JsonBody<BudgetRequest>,
) -> ApiResult<Json<BudgetsReply>> {
    let project = check_required("project", &req.project, limits::PROJECT)?;
    let by = req.by.unwrap_or_default();
    check_len("by", &by, limits::SESSION)?;
    if let Some(c) = req.card
        && c < 1
    {
        return Err(ApiError::bad_request("card must be a card id"));
    }
    if let Some(d) = req.usd
        && !(d.is_finite() && (0.0..=USD_MAX).contains(&d))
    {
        return Err(ApiError::bad_request(format!(
            "usd must be between 0 and {USD_MAX}"
        )));
    }
    let card = req.card;
    let usd = req.usd;
    let ts = now_ms();
    let reply = hub
        .write(move |tx| {
            if let Some(id) = card {
                match tx.card(id)? {
                    None => return Ok(Err(ApiError::not_found(format!("no card #{id}")))),
                    Some(c) if c.project != project => {
                        return Ok(Err(ApiError::with(
                            axum::http::StatusCode::CONFLICT,
                            format!("card #{id} is in project {}, not {project}", c.project),
                            serde_json::Value::Null,
                        )));
                    }
                    Some(_) => {}
                }
            }
            let mut all = stored(tx)?;
            all.retain(|b| !(b.project == project && b.card == card));
            if let Some(usd) = usd {
                if all.len() >= BUDGETS_MAX {
                    return Ok(Err(ApiError::bad_request(format!(
                        "at most {BUDGETS_MAX} budgets"
                    ))));
                }
                all.push(Stored {
                    project: project.clone(),
                    card,
                    usd,
                    by,
                    ts,
                });
            }
            let all = sorted(all);
            tx.set_kv(KEY, &serde_json::to_value(&all).unwrap_or_default())?;
            let mine = all
                .iter()
                .filter(|b| b.project == project)
                .map(|b| info(&*tx, b))
                .collect::<Result<Vec<_>, _>>()?;
            Ok(Ok(BudgetsReply {
                ok: true,
                budgets: mine,
            }))
        })
        .await?;
    reply.map(Json)
}

/// `GET /budgets`.
pub async fn list<S: Store>(
    State(hub): State<AppState<S>>,
    p: Params,
) -> ApiResult<Json<BudgetsReply>> {
    let project = p.text("project").map(str::to_string);
    let budgets = hub
        .store
        .read(move |tx| {
            stored(tx)?
                .iter()
                .filter(|b| project.as_ref().is_none_or(|p| &b.project == p))
                .map(|b| info(tx, b))
                .collect::<Result<Vec<_>, _>>()
        })
        .await?;
    Ok(Json(BudgetsReply { ok: true, budgets }))
}

/// `GET /budgets/check?project=&card=`: the card's budget is asked first, then the project's.
pub async fn check<S: Store>(
    State(hub): State<AppState<S>>,
    p: Params,
) -> ApiResult<Json<BudgetCheck>> {
    let Some(project) = p.text("project").map(str::to_string) else {
        return Err(ApiError::bad_request("project required"));
    };
    check_len("project", &project, limits::PROJECT)?;
    let card = p.count("card")?.filter(|c| *c > 0);
    let over = hub
        .store
        .read(move |tx| {
            let all = stored(tx)?;
            let scopes = [
                card.and_then(|c| all.iter().find(|b| b.card == Some(c))),
                all.iter()
                    .find(|b| b.card.is_none() && b.project == project),
            ];
            for b in scopes.into_iter().flatten() {
                let i = info(tx, b)?;
                if i.over {
                    return Ok(Some(i));
                }
            }
            Ok(None)
        })
        .await?;
    Ok(Json(match over {
        None => BudgetCheck {
            ok: true,
            ..BudgetCheck::default()
        },
        Some(b) => BudgetCheck {
            ok: false,
            reason: budget::reason(&b),
            over: Some(b),
        },
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn projects_sort_before_cards() {
        let b = |project: &str, card: Option<i64>| Stored {
            project: project.into(),
            card,
            usd: 1.0,
            by: String::new(),
            ts: 0,
        };
        let got = sorted(vec![
            b("web", Some(9)),
            b("api", Some(2)),
            b("web", None),
            b("api", None),
        ]);
        let keys: Vec<(String, Option<i64>)> =
            got.into_iter().map(|b| (b.project, b.card)).collect();
        assert_eq!(
            keys,
            [
                ("api".into(), None),
                ("web".into(), None),
                ("api".into(), Some(2)),
                ("web".into(), Some(9))
            ]
        );
    }
}

//! The cost ledger (docs/protocol.md §7.6): `POST /turns` records one finished turn of a seat
//! with the tokens and dollars its CLI reported, and `GET /cost` adds them up per card, seat,
//! day or credential. `GET /card` carries the card's own sum ([`card_cost`]).

use crate::error::{ApiError, ApiResult, check_len, check_required};
use crate::extract::{JsonBody, Params};
use crate::openapi::{RouteDoc, Ty, Verb, f, shape};
use crate::state::AppState;
use axum::Json;
use axum::extract::State;
use axum::routing::{MethodRouter, get, post};
use trantor_proto::cost::{GROUPS_MAX, NAME_MAX, OUTCOME_MAX, TOKENS_MAX, USD_MAX};
use trantor_proto::{
    CostGroup, CostReply, CostSummary, TurnReport, TurnReportReply, limits, now_ms,
};
use trantor_store::{CostBy, CostQuery, ReadTx, Store, StoreError};

/// The routes of this module.
pub fn table<S: Store>() -> Vec<(RouteDoc, MethodRouter<AppState<S>>)> {
    vec![
        (
            RouteDoc {
                verb: Verb::Post,
                path: "/turns",
                summary: "Record one finished turn of a seat and what it cost (a repeat of the same session, instance and turn is not counted twice)",
                query: &[],
                body: Some(shape::<TurnReport>),
                reply: Some(shape::<TurnReportReply>),
            },
            post(record::<S>),
        ),
        (
            RouteDoc {
                verb: Verb::Get,
                path: "/cost",
                summary: "What the recorded turns cost, added up and grouped per card, seat, day or credential",
                query: fields![
                    f(
                        "card",
                        Ty::Int,
                        false,
                        "only turns that worked on this card"
                    )
                    .min(0),
                    f(
                        "seat",
                        Ty::Str,
                        false,
                        "only this seat's turns (its session)"
                    )
                    .max(limits::SESSION),
                    f("project", Ty::Str, false, "only this project's turns").max(limits::PROJECT),
                    f(
                        "since",
                        Ty::Int,
                        false,
                        "only turns recorded at or after this, ms"
                    )
                    .min(0),
                    f(
                        "by",
                        Ty::Str,
                        false,
                        "card (default), seat, day or credential"
                    )
                    .pattern("^(card|seat|day|credential)$"),
                ],
                body: None,
                reply: Some(shape::<CostReply>),
            },
            get(cost::<S>),
        ),
    ]
}

/// `POST /turns`: record one finished turn.
pub async fn record<S: Store>(
    State(hub): State<AppState<S>>,
    JsonBody(mut req): JsonBody<TurnReport>,
) -> ApiResult<Json<TurnReportReply>> {
    req.session = check_required("session", &req.session, limits::SESSION)?;
    req.instance = check_required(
        "instance",
        &req.instance,
        trantor_proto::delivery::INSTANCE_MAX,
    )?;
    check_len("project", &req.project, limits::PROJECT)?;
    for (name, v) in [
        ("agent", &req.agent),
        ("model", &req.model),
        ("source", &req.source),
    ] {
        check_len(name, v, NAME_MAX)?;
    }
    if let Some(c) = &req.credential {
        check_len("credential", c, NAME_MAX)?;
    }
    check_len("outcome", &req.outcome, OUTCOME_MAX)?;
    if i64::try_from(req.turn).is_err() {
        return Err(ApiError::bad_request("turn out of range"));
    }
    if req.card < 0 {
        return Err(ApiError::bad_request("card must be a card id (0 = none)"));
    }
    if let Some(u) = &req.usage
        && [u.input, u.output, u.cache_read, u.cache_write]
            .iter()
            .any(|n| *n > TOKENS_MAX)
    {
        return Err(ApiError::bad_request(format!(
            "token counts are at most {TOKENS_MAX}"
        )));
    }
    if let Some(d) = req.usd
        && !(d.is_finite() && (0.0..=USD_MAX).contains(&d))
    {
        return Err(ApiError::bad_request(format!(
            "usd must be between 0 and {USD_MAX}"
        )));
    }
    if req.project.trim().is_empty() {
        req.project = trantor_proto::session_project(&req.session).to_string();
    }
    let ts = now_ms();
    let appended = hub.write(move |tx| tx.record_turn(ts, &req)).await?;
    Ok(Json(TurnReportReply { ok: true, appended }))
}

/// `GET /cost`: the recorded turns, added up and grouped.
pub async fn cost<S: Store>(
    State(hub): State<AppState<S>>,
    p: Params,
) -> ApiResult<Json<CostReply>> {
    let by = match p.get("by").unwrap_or("card") {
        "card" => CostBy::Card,
        "seat" => CostBy::Seat,
        "day" => CostBy::Day,
        "credential" => CostBy::Credential,
        other => {
            return Err(ApiError::bad_request(format!(
                "by must be card, seat, day or credential, not {other:?}"
            )));
        }
    };
    let q = CostQuery {
        card: p.count("card")?,
        cards: None,
        session: p.text("seat").map(str::to_string),
        project: p.text("project").map(str::to_string),
        since_ts: p.count("since")?,
    };
    let name = match by {
        CostBy::Card => "card",
        CostBy::Seat => "seat",
        CostBy::Day => "day",
        CostBy::Credential => "credential",
        CostBy::Total => "total",
    };
    let (total, groups) = hub
        .store
        .read(move |tx| {
            let total = tx
                .cost(&q, CostBy::Total, 0)?
                .pop()
                .map(|(_, c)| c)
                .unwrap_or_default();
            Ok((total, tx.cost(&q, by, GROUPS_MAX)?))
        })
        .await?;
    Ok(Json(CostReply {
        total,
        by: name.to_string(),
        groups: groups
            .into_iter()
            .map(|(key, cost)| CostGroup { key, cost })
            .collect(),
    }))
}

/// What the turns that worked on card `id` cost (all zeros when none was recorded).
pub fn card_cost(tx: &dyn ReadTx, id: i64) -> Result<CostSummary, StoreError> {
    let q = CostQuery {
        card: Some(id),
        ..CostQuery::default()
    };
    Ok(tx
        .cost(&q, CostBy::Total, 0)?
        .pop()
        .map(|(_, c)| c)
        .unwrap_or_default())
}

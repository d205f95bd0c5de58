//! `POST /advise`: the Advisor over the seats this hub knows (docs/protocol.md §14.1), with
//! the circuit breaker's live credential state (a seat on a spent credential is not routed to)
//! and what the project's cards actually cost so far (the cost ledger, docs/protocol.md §7.6).

use crate::error::{ApiError, ApiResult, check_len};
use crate::extract::JsonBody;
use crate::state::AppState;
use axum::Json;
use axum::extract::State;
use std::collections::HashMap;
use trantor_proto::advise::{
    self, Advice, AdviseRequest, CliInfo, LedgerActuals, MAX_PACKAGES, MAX_TASK, SeatInfo,
};
use trantor_proto::cost::GROUPS_MAX;
use trantor_proto::{limits, now_ms};
use trantor_store::{CostBy, CostQuery, ReadTx, Store, StoreError};

/// Why each seat on a credential not in quota cannot take work, by session.
fn held_by_credential(tx: &dyn ReadTx, now: i64) -> Result<HashMap<String, String>, StoreError> {
    let mut held = HashMap::new();
    for c in crate::domain::credentials::stored(tx)? {
        let c = c.effective(now);
        let why = match (c.state.as_str(), c.until) {
            ("exhausted", Some(u)) => format!(
                "credential {} exhausted until {}",
                c.name,
                trantor_proto::date::fmt_utc_minutes(u)
            ),
            ("auth", _) => format!("credential {} refused (auth)", c.name),
            _ => continue,
        };
        for s in c.seats {
            held.entry(s).or_insert_with(|| why.clone());
        }
    }
    Ok(held)
}

/// What the project's cards cost so far (turns on no card left out).
fn ledger(tx: &dyn ReadTx, project: &str) -> Result<LedgerActuals, StoreError> {
    let q = CostQuery {
        project: Some(project.to_string()),
        ..CostQuery::default()
    };
    let mut l = LedgerActuals::default();
    for (key, c) in tx.cost(&q, CostBy::Card, GROUPS_MAX)? {
        if key == "0" || c.turns == 0 {
            continue;
        }
        l.cards += 1;
        l.turns += c.turns;
        l.tokens += c.tokens_in.saturating_add(c.tokens_out);
        l.usd += c.usd;
        l.estimated |= c.estimated;
    }
    Ok(l)
}

/// The agent programs of the model table found on this process's PATH. Used when the caller
/// sent no verified list: found here, version not checked.
fn clis_on_path(models: &[advise::ModelRow]) -> Vec<CliInfo> {
    let mut agents: Vec<&str> = models.iter().map(|m| m.agent.as_str()).collect();
    agents.sort();
    agents.dedup();
    let path = std::env::var_os("PATH").unwrap_or_default();
    agents
        .into_iter()
        .filter(|a| std::env::split_paths(&path).any(|d| is_executable(&d.join(a))))
        .map(|a| CliInfo {
            agent: a.to_string(),
            version: None,
            usable: true,
            detail: "on the hub's PATH (version not checked)".into(),
        })
        .collect()
}

fn is_executable(p: &std::path::Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// `POST /advise`: mode, routes, seats, estimate, table and card calls for a set of packages.
pub async fn post<S: Store>(
    State(hub): State<AppState<S>>,
    JsonBody(mut req): JsonBody<AdviseRequest>,
) -> ApiResult<Json<Advice>> {
    let project = req.project.clone().unwrap_or_default();
    if project.trim().is_empty() {
        return Err(ApiError::bad_request(
            "project required: the board the cards would go to",
        ));
    }
    check_len("project", &project, limits::PROJECT)?;
    check_len("task", &req.task, MAX_TASK)?;
    if req.packages.len() > MAX_PACKAGES {
        return Err(ApiError::too_long("packages", MAX_PACKAGES));
    }
    for p in &req.packages {
        check_len("package title", &p.title, limits::TITLE)?;
        if let Some(d) = &p.drill {
            check_len("package drill", d, limits::DRILL)?;
        }
    }
    let now = now_ms();
    let p = project.clone();
    let (rows, held, spent) = hub
        .store
        .read(move |tx| Ok((tx.peers()?, held_by_credential(tx, now)?, ledger(tx, &p)?)))
        .await?;
    let suffix = format!(":{project}");
    let seats: Vec<SeatInfo> = rows
        .into_iter()
        .map(|p| hub.live_peer(p, now))
        .filter(|p| p.project == project || p.session.ends_with(&suffix))
        .filter_map(|p| {
            let agent = p.agent.clone().filter(|a| !a.is_empty())?;
            Some(SeatInfo {
                parked: p.phase.as_deref() == Some("parked"),
                online: p.online,
                held: held.get(&p.session).cloned(),
                session: p.session,
                agent,
            })
        })
        .collect();
    req.seats = Some(seats);
    req.ledger = Some(spent);
    if req.clis.is_none() {
        let models = advise::merge_models(req.models.as_deref().unwrap_or(&[]));
        req.clis = Some(clis_on_path(&models));
    }
    advise::advise(&req, &project)
        .map(Json)
        .map_err(|e| ApiError::bad_request(e.to_string()))
}

/// The Advisor's route entry.
pub fn table<S: Store>() -> Vec<(super::RouteDoc, axum::routing::MethodRouter<AppState<S>>)> {
    vec![(
        super::RouteDoc {
            verb: super::Verb::Post,
            path: "/advise",
            summary: "The Advisor: solo, crew or hybrid, a route per package, seats and an estimate",
            query: &[],
            body: Some(crate::openapi::shape::<AdviseRequest>),
            reply: Some(crate::openapi::shape::<Advice>),
        },
        axum::routing::post(post::<S>),
    )]
}

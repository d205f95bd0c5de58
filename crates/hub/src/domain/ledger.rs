//! The dispatch ledger as a reply: the store's ledger rows and counts read in one snapshot,
//! then what depends on the clock and presence (docs/protocol.md §5.6). `GET /contracts`, the
//! catch-up and the contract reaper share it.

use crate::domain::contracts::{self, Assignee};
use crate::error::ApiResult;
use crate::state::Hub;
use std::collections::{HashMap, HashSet};
use trantor_store::Store;
/// Which rows of the ledger a read returns.
#[derive(Debug, Clone, Copy)]
pub struct LedgerPage {
    /// Rows with ids above this.
    pub after: i64,
    /// At most this many.
    pub limit: usize,
    /// Only the unanswered owed ones (waiting, stalled, abandoned, superseded).
    pub open_only: bool,
}

/// Read the ledger from the store (its counts and one page of rows) and decide what depends on
/// the clock and presence. Shared with the catch-up and the contract reaper.
pub async fn compute_ledger<S: Store>(
    hub: &Hub<S>,
    session: &str,
    project: Option<&str>,
    now: i64,
    window_ms: i64,
    overdue_ms: Option<i64>,
    page: LedgerPage,
) -> ApiResult<trantor_proto::ContractsReply> {
    let params = contracts::Params {
        session,
        now,
        overdue_ms,
        abandon_ms: hub.cfg.contract_abandon_ms,
    };
    let q = params.query(project, window_ms);
    let (groups, closed, mut rows, peers) = hub
        .store
        .read(move |tx| {
            let groups = tx.ledger_groups(&q)?;
            let closed = tx.ledger_counts(&q)?;
            let rows = tx.ledger_rows(&q, page.after, page.limit + 1, page.open_only)?;
            let targets: HashSet<&str> = groups
                .iter()
                .map(|g| g.assignee.as_str())
                .chain(rows.iter().map(|r| r.contract.to.as_str()))
                .collect();
            let mut peers = Vec::with_capacity(targets.len());
            for t in targets {
                if let Some(p) = tx.peer(t)? {
                    peers.push(p);
                }
            }
            Ok((groups, closed, rows, peers))
        })
        .await?;
    let next_cursor = if rows.len() > page.limit {
        rows.truncate(page.limit);
        rows.last().map(|r| r.contract.id)
    } else {
        None
    };
    let assignees: HashMap<String, Assignee> = peers
        .into_iter()
        .map(|p| {
            let p = hub.live_peer(p, now);
            (
                p.session.clone(),
                Assignee {
                    last_seen: p.last_seen,
                    online: p.online,
                    status: p.status,
                },
            )
        })
        .collect();
    Ok(contracts::reply(
        &params,
        &groups,
        closed,
        &rows,
        &assignees,
        next_cursor,
    ))
}

/// The kv key of the contract reaper's records (`{msgId: {ts, from, to, reason, dispatchedTs}}`).
pub const REAP_KEY: &str = "contractReap";

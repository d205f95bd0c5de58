//! The dispatch ledger as a reply: the store's ledger rows and counts read in one snapshot,
//! then what depends on the clock and presence (docs/protocol.md §5.6). `GET /contracts`, the
//! catch-up and the contract reaper share it.

use crate::domain::contracts::{self, Assignee};
use crate::error::ApiResult;
use crate::state::AppState;
use std::collections::{HashMap, HashSet};
use trantor_store::{ContractRow, ReadTx, Store, StoreError};

/// Which rows of the ledger a read returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageRows {
    /// Every contract of the window.
    All,
    /// The unanswered owed ones (waiting, stalled, abandoned, superseded).
    Open,
    /// The unanswered owed ones to assignees that are not abandoned (waiting, stalled,
    /// superseded): a read that never shows the abandoned ones skips their rows. One page from
    /// the window's start (the catch-up's): `after` is not used.
    OpenLive,
}

/// One page of the ledger's rows.
#[derive(Debug, Clone, Copy)]
pub struct LedgerPage {
    /// Rows with ids above this.
    pub after: i64,
    /// At most this many.
    pub limit: usize,
    /// Which rows.
    pub rows: PageRows,
}

/// Read the ledger from the store (its counts and one page of rows) and decide what depends on
/// the clock and presence. Shared with the catch-up and the contract reaper.
///
/// The counts come from the kept tally (the window's buckets, not its traffic); the superseded
/// and overdue split is asked only for an assignee that is not abandoned, since an abandoned
/// assignee's are all counted abandoned.
pub async fn compute_ledger<S: Store>(
    hub: &AppState<S>,
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
    let live = hub.clone();
    let abandon_ms = hub.cfg.contract_abandon_ms;
    let (groups, closed, mut rows, peers) = hub
        .store
        .read(move |tx| {
            let mut groups = tx.ledger_open(&q)?;
            let closed = tx.ledger_counts(&q)?;
            let mut peers = Vec::with_capacity(groups.len());
            let mut live_groups = Vec::new();
            for g in &mut groups {
                let Some(p) = live_peer(tx, &live, &g.assignee, now)? else {
                    continue;
                };
                if !contracts::abandoned(now, abandon_ms, Some(p.last_seen)) {
                    tx.ledger_split(&q, g)?;
                    live_groups.push(g.assignee.clone());
                }
                peers.push(p);
            }
            let rows = page_rows(tx, &q, page, &live_groups)?;
            let mut known: HashSet<String> = peers.iter().map(|p| p.session.clone()).collect();
            for r in &rows {
                if known.insert(r.contract.to.clone())
                    && let Some(p) = live_peer(tx, &live, &r.contract.to, now)?
                {
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

/// The assignees of `q.sender`'s open contracts in the window that are abandoned at `now` (as
/// `/contracts` decides: never seen, or not within the abandon window), each with whether it
/// was ever seen. Read on the tally: costs the window's buckets, not the contracts.
pub async fn abandoned_assignees<S: Store>(
    hub: &AppState<S>,
    q: &trantor_store::LedgerQuery,
    now: i64,
) -> Result<Vec<(String, bool)>, StoreError> {
    let (q, live) = (q.clone(), hub.clone());
    let abandon_ms = hub.cfg.contract_abandon_ms;
    hub.store
        .read(move |tx| {
            let mut out = Vec::new();
            for g in tx.ledger_open(&q)? {
                let seen = live_peer(tx, &live, &g.assignee, now)?.map(|p| p.last_seen);
                if contracts::abandoned(now, abandon_ms, seen) {
                    out.push((g.assignee, seen.is_some()));
                }
            }
            Ok(out)
        })
        .await
}

/// A session's stored peer row with the live presence overlaid (`None`: never registered).
fn live_peer<S: Store>(
    tx: &dyn ReadTx,
    hub: &AppState<S>,
    session: &str,
    now: i64,
) -> Result<Option<trantor_proto::Peer>, StoreError> {
    Ok(tx.peer(session)?.map(|p| hub.live_peer(p, now)))
}

/// Up to `page.limit + 1` rows of the page (one more tells whether another page follows).
fn page_rows(
    tx: &dyn ReadTx,
    q: &trantor_store::LedgerQuery,
    page: LedgerPage,
    live: &[String],
) -> Result<Vec<ContractRow>, StoreError> {
    let n = page.limit + 1;
    match page.rows {
        PageRows::All => tx.ledger_rows(q, page.after, n, false),
        PageRows::Open => tx.ledger_rows(q, page.after, n, true),
        PageRows::OpenLive => {
            // Each live assignee's oldest ids from the open index alone (no row read, no sort
            // of its rows), the oldest of those by id, and only their rows read.
            let mut ids = Vec::new();
            for a in live {
                ids.extend(tx.ledger_open_ids(q, a, n)?);
            }
            ids.sort_unstable();
            ids.truncate(n);
            let mut rows = Vec::with_capacity(ids.len());
            for id in ids {
                rows.extend(tx.ledger_row(&q.sender, id)?);
            }
            Ok(rows)
        }
    }
}

/// The kv key of the contract reaper's records (`{msgId: {ts, from, to, reason, dispatchedTs}}`).
pub const REAP_KEY: &str = "contractReap";

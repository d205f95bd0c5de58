//! The dispatch ledger as a reply: the store's ledger rows and counts read in one snapshot,
//! then what depends on the clock and presence (docs/protocol.md §5.6). `GET /contracts`, the
//! catch-up and the contract reaper share it.

use crate::domain::contracts::{self, Assignee};
use crate::error::ApiResult;
use crate::state::AppState;
use std::collections::{BinaryHeap, HashMap, HashSet};
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
/// the clock and presence. Shared with the catch-up and the contract reaper. The caller brings
/// the ledger up to every committed message first (`Store::ledger_current`, once however many
/// sessions it reads; docs/protocol.md §5.6).
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
            // The window's tally, read once for the counts and every live assignee's split.
            let mut window = tx.ledger_window(&q)?;
            let (mut groups, closed) = (std::mem::take(&mut window.groups), window.closed);
            // Its buckets are folded only when an assignee is live.
            let mut tally = None;
            let mut peers = Vec::with_capacity(groups.len());
            let mut live_groups = Vec::new();
            for g in &mut groups {
                let Some(p) = live_peer(tx, &live, &g.assignee, now)? else {
                    continue;
                };
                if !contracts::abandoned(now, abandon_ms, Some(p.last_seen)) {
                    let t = tally.get_or_insert_with(|| window.take_tally());
                    tx.ledger_split(&q, t, g)?;
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
/// was ever seen. As for [`compute_ledger`], the caller brings the ledger current first. Read on the tally ([`ReadTx::ledger_window`]): costs the window's buckets,
/// not the contracts.
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
            for g in tx.ledger_window(&q)?.groups {
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
            // The live assignees' oldest keys merged from the open index alone, each assignee
            // read in chunks only as far as the merge needs, and only the chosen rows read.
            let mut merge = OldestOpen::new(live.len(), n);
            loop {
                let wants = merge.wants();
                if wants.is_empty() {
                    break;
                }
                for w in wants {
                    let keys = tx.ledger_open_ids(q, &live[w.lane], w.after, w.limit)?;
                    merge.feed(w.lane, keys);
                }
            }
            let ids = merge.oldest();
            let mut rows = Vec::with_capacity(ids.len());
            for id in ids {
                rows.extend(tx.ledger_row(&q.sender, id)?);
            }
            Ok(rows)
        }
    }
}

/// One chunk [`OldestOpen`] asks for: `limit` keys of lane `lane` after `after`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Want {
    lane: usize,
    after: Option<(i64, i64)>,
    limit: usize,
}

/// One assignee's progress: how far it is read.
#[derive(Debug, Clone, Default)]
struct Lane {
    /// The last key read (every key of the lane up to it is read).
    last: Option<(i64, i64)>,
    /// Its last chunk came back short: every key it has is read.
    done: bool,
    /// Asked at least once.
    asked: bool,
    /// The size of its next chunk (doubles after each).
    chunk: usize,
}

/// The `n` oldest `(ts, id)` keys across several sorted lanes (the live assignees' open
/// contracts), read chunk by chunk: a lane is read further only while its last key is below
/// the n-th oldest seen, so the reads cost about the page and the lanes, not the lanes' length
/// (the catch-up with many busy assignees read `n` keys of each before).
#[derive(Debug, Clone)]
struct OldestOpen {
    n: usize,
    lanes: Vec<Lane>,
    /// The `n` oldest keys seen so far, the newest of them on top.
    oldest: BinaryHeap<(i64, i64)>,
}

impl OldestOpen {
    fn new(lanes: usize, n: usize) -> Self {
        // Twice each lane's share, so evenly spread lanes settle in one round.
        let chunk = (2 * n.div_ceil(lanes.max(1)) + 4).min(n.max(1));
        let lane = Lane {
            chunk,
            ..Lane::default()
        };
        Self {
            n,
            lanes: vec![lane; lanes],
            oldest: BinaryHeap::with_capacity(n + 1),
        }
    }

    /// The chunks to read next; empty once the oldest `n` are known.
    fn wants(&self) -> Vec<Want> {
        let fresh: Vec<Want> = (0..self.lanes.len())
            .filter(|&i| !self.lanes[i].asked)
            .map(|lane| Want {
                lane,
                after: None,
                limit: self.lanes[lane].chunk,
            })
            .collect();
        if !fresh.is_empty() {
            return fresh;
        }
        // Every key not yet read is above its lane's last key, so the keys up to the lowest
        // such last key are settled.
        let open = self.lanes.iter().filter(|l| !l.done);
        let Some(bound) = open.filter_map(|l| l.last).min() else {
            return Vec::new();
        };
        let nth = (self.oldest.len() == self.n)
            .then(|| self.oldest.peek().copied())
            .flatten();
        if nth.is_some_and(|nth| nth <= bound) {
            return Vec::new();
        }
        (0..self.lanes.len())
            .filter_map(|lane| {
                let l = &self.lanes[lane];
                let last = l.last?;
                (!l.done && nth.is_none_or(|nth| last < nth)).then_some(Want {
                    lane,
                    after: Some(last),
                    limit: l.chunk,
                })
            })
            .collect()
    }

    /// Record a chunk read for `lane` (as [`OldestOpen::wants`] asked).
    fn feed(&mut self, lane: usize, keys: Vec<(i64, i64)>) {
        let Some(l) = self.lanes.get_mut(lane) else {
            return;
        };
        l.done = keys.len() < l.chunk;
        l.asked = true;
        l.chunk = l.chunk.saturating_mul(2);
        l.last = keys.last().copied().or(l.last);
        for k in keys {
            self.oldest.push(k);
            if self.oldest.len() > self.n {
                self.oldest.pop();
            }
        }
    }

    /// The ids of the `n` oldest keys, by id.
    fn oldest(&self) -> Vec<i64> {
        let mut ids: Vec<i64> = self.oldest.iter().map(|k| k.1).collect();
        ids.sort_unstable();
        ids
    }
}

/// The kv key of the contract reaper's records (`{msgId: {ts, from, to, reason, dispatchedTs}}`).
pub const REAP_KEY: &str = "contractReap";

#[cfg(test)]
mod tests {
    use super::*;

    /// Sorted lanes of `(ts, id)` keys, one per assignee.
    type Lanes = Vec<Vec<(i64, i64)>>;

    /// Drive the merge over in-memory lanes (each sorted); the ids it picks and the keys read.
    fn run(lanes: &[Vec<(i64, i64)>], n: usize) -> (Vec<i64>, usize) {
        let mut m = OldestOpen::new(lanes.len(), n);
        let mut read = 0;
        for _ in 0..1000 {
            let wants = m.wants();
            if wants.is_empty() {
                return (m.oldest(), read);
            }
            for w in wants {
                let lane = &lanes[w.lane];
                let chunk: Vec<(i64, i64)> = lane
                    .iter()
                    .filter(|k| w.after.is_none_or(|a| **k > a))
                    .take(w.limit)
                    .copied()
                    .collect();
                read += chunk.len();
                m.feed(w.lane, chunk);
            }
        }
        panic!("the merge did not settle");
    }

    /// The `n` oldest ids by brute force, by id.
    fn brute(lanes: &[Vec<(i64, i64)>], n: usize) -> Vec<i64> {
        let mut all: Vec<(i64, i64)> = lanes.concat();
        all.sort_unstable();
        all.truncate(n);
        let mut ids: Vec<i64> = all.into_iter().map(|k| k.1).collect();
        ids.sort_unstable();
        ids
    }

    /// `lanes` lanes of `len` keys each, interleaved (key i goes to lane i % lanes).
    fn interleaved(lanes: usize, len: usize) -> Lanes {
        let mut v = vec![Vec::new(); lanes];
        for i in 0..lanes * len {
            v[i % lanes].push(((i / 3) as i64, i as i64));
        }
        v
    }

    /// `lanes` lanes of `len` keys each with uneven gaps and shared timestamps (a fixed
    /// pseudo-random sequence), each sorted, ids unique.
    fn scattered(lanes: usize, len: usize, seed: u64) -> Lanes {
        let mut x = seed;
        let mut next = move || {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 33) as i64
        };
        let mut id = 0;
        (0..lanes)
            .map(|_| {
                let mut ts = next() % 50;
                (0..len)
                    .map(|_| {
                        ts += next() % 7;
                        id += 1;
                        (ts, id)
                    })
                    .collect()
            })
            .collect()
    }

    #[test]
    fn picks_the_oldest_and_reads_about_the_page() {
        let skewed = {
            // One lane holds every old key; the others only newer ones.
            let mut v = vec![(0..5000).map(|i| (i, i)).collect::<Vec<_>>()];
            v.extend((1..50).map(|l| {
                (0..100)
                    .map(|i| (10_000 + i, 10_000 + l * 100 + i))
                    .collect()
            }));
            v
        };
        let cases: Vec<(&str, Lanes, usize, usize)> = vec![
            // (name, lanes, n, the most keys the merge may read)
            ("no lanes", vec![], 201, 0),
            ("empty lanes", vec![vec![], vec![]], 201, 0),
            ("fewer keys than the page", interleaved(3, 10), 201, 30),
            ("50 busy lanes", interleaved(50, 2000), 201, 1300),
            ("one lane", interleaved(1, 5000), 201, 600),
            ("one lane holds the oldest", skewed, 201, 1300),
            ("page of one", interleaved(50, 100), 1, 300),
            ("scattered lanes", scattered(50, 300, 7), 201, 2600),
            ("scattered, few lanes", scattered(3, 900, 11), 51, 400),
            (
                "ties on ts",
                vec![vec![(5, 1), (5, 4)], vec![(5, 2), (5, 3)]],
                3,
                4,
            ),
        ];
        for (name, lanes, n, most) in cases {
            let (got, read) = run(&lanes, n);
            assert_eq!(got, brute(&lanes, n), "{name}");
            assert!(read <= most, "{name}: read {read} keys, more than {most}");
        }
    }
}

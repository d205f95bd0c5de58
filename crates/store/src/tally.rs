//! How a count of one assignee's open contracts before a cut is made from the kept tally: the
//! buckets wholly inside the cut summed, the few a cut falls in counted row by row on the open
//! index (docs/protocol.md §5.6). A pure decision over the tally's rows, read once per ledger
//! read for every assignee ([`crate::ReadTx::ledger_tally`]), so a split costs the cut buckets'
//! rows, not a tally read per assignee.

use std::collections::{BTreeMap, HashMap};

use crate::{LedgerCounts, OpenGroup, TALLY_BUCKET_MS};

/// One assignee's open contracts of one tally bucket, the projects folded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenBucket {
    /// The bucket: `ts.div_euclid(TALLY_BUCKET_MS)`.
    pub bucket: i64,
    /// Open contracts in it.
    pub open: i64,
    /// The lowest and highest id of any contract in it (open or not).
    pub min_id: i64,
    /// See `min_id`.
    pub max_id: i64,
}

/// The window's open tally buckets of one sender, by assignee, each assignee's by bucket.
#[derive(Debug, Clone, Default)]
pub struct OpenTally {
    by_assignee: HashMap<String, Vec<OpenBucket>>,
}

impl OpenTally {
    /// Fold tally rows (one per bucket, assignee and project, in any order) into buckets.
    pub fn from_rows(rows: impl IntoIterator<Item = (String, OpenBucket)>) -> Self {
        let mut read = TallyRows::default();
        let rows: Vec<(usize, OpenBucket)> = rows
            .into_iter()
            .map(|(assignee, b)| (read.name(&assignee), b))
            .collect();
        Self::from_named(&read.names, rows)
    }

    /// Fold rows whose assignees are indexes into `names` into buckets.
    fn from_named(names: &[String], rows: Vec<(usize, OpenBucket)>) -> Self {
        let mut by_index: Vec<Vec<OpenBucket>> = vec![Vec::new(); names.len()];
        for (k, b) in rows {
            let Some(buckets) = by_index.get_mut(k) else {
                continue;
            };
            match buckets.iter_mut().find(|x| x.bucket == b.bucket) {
                Some(x) => {
                    x.open += b.open;
                    x.min_id = x.min_id.min(b.min_id);
                    x.max_id = x.max_id.max(b.max_id);
                }
                None => buckets.push(b),
            }
        }
        let by_assignee = names
            .iter()
            .zip(by_index)
            .filter(|(_, buckets)| !buckets.is_empty())
            .map(|(name, mut buckets)| {
                buckets.sort_unstable_by_key(|b| b.bucket);
                (name.clone(), buckets)
            })
            .collect();
        Self { by_assignee }
    }

    /// One assignee's buckets, oldest first (empty when it has no open contract).
    pub fn buckets(&self, assignee: &str) -> &[OpenBucket] {
        self.by_assignee.get(assignee).map_or(&[], Vec::as_slice)
    }
}

/// One row of the kept tally: an assignee's contracts of one bucket and project.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TallyRow {
    /// The bucket, its open contracts and its id bounds.
    pub open: OpenBucket,
    /// Answered contracts in it.
    pub answered: i64,
    /// Ack contracts (nothing owed, not answered) in it.
    pub ack: i64,
}

/// The window's first bucket counted row by row from the window's start, for one assignee:
/// open, answered, ack.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EdgeCounts {
    /// The assignee.
    pub assignee: String,
    /// Open contracts.
    pub open: i64,
    /// Answered ones.
    pub answered: i64,
    /// Ack ones.
    pub ack: i64,
}

/// A sender's tally rows as read, each assignee named once: a window holds one row per hour,
/// assignee and project, so a name repeats in every hour's rows and is copied only the first
/// time it is seen.
#[derive(Debug, Clone, Default)]
pub struct TallyRows {
    /// The assignees, each once, in the order first seen.
    names: Vec<String>,
    /// Where each name is in `names`.
    index: HashMap<String, usize>,
    /// The rows, each with its assignee's place in `names`.
    rows: Vec<(usize, TallyRow)>,
}

impl TallyRows {
    /// Add a row of `assignee`'s.
    pub fn push(&mut self, assignee: &str, row: TallyRow) {
        let k = self.name(assignee);
        self.rows.push((k, row));
    }

    /// `assignee`'s place in `names`, naming it there when new.
    fn name(&mut self, assignee: &str) -> usize {
        if let Some(&k) = self.index.get(assignee) {
            return k;
        }
        let k = self.names.len();
        self.names.push(assignee.to_owned());
        self.index.insert(assignee.to_owned(), k);
        k
    }
}

/// A sender's ledger in the window from one read of its tally: the open contracts per assignee
/// (by assignee, the split not filled), the closed ones counted, and the open buckets every
/// assignee's split plans from ([`LedgerWindow::take_tally`]).
#[derive(Debug, Clone, Default)]
pub struct LedgerWindow {
    /// Assignees with open contracts, by assignee.
    pub groups: Vec<OpenGroup>,
    /// The answered and ack contracts.
    pub closed: LedgerCounts,
    /// The assignees the open buckets point at.
    names: Vec<String>,
    /// The open buckets from the window's first on, as read.
    open_buckets: Vec<(usize, OpenBucket)>,
}

impl LedgerWindow {
    /// The open buckets by assignee, folded when first asked (a read whose assignees are all
    /// abandoned splits none and never folds them); a second call gets an empty tally.
    pub fn take_tally(&mut self) -> OpenTally {
        OpenTally::from_named(&self.names, std::mem::take(&mut self.open_buckets))
    }
}

/// Fold the tally's rows from the window's first bucket (`edge_bucket`) on and that bucket's
/// rows counted from the window's start into the window's ledger counts: the buckets after the
/// first summed, the first one's counted rows added.
pub fn window(edge_bucket: i64, read: TallyRows, edge: Vec<EdgeCounts>) -> LedgerWindow {
    let TallyRows { names, rows, .. } = read;
    let mut sums = vec![0i64; names.len()];
    let mut closed = LedgerCounts::default();
    for (k, r) in &rows {
        if r.open.bucket > edge_bucket {
            closed.answered += r.answered;
            closed.ack += r.ack;
            if let Some(n) = sums.get_mut(*k) {
                *n += r.open.open.max(0);
            }
        }
    }
    let mut open: BTreeMap<String, i64> = names
        .iter()
        .zip(&sums)
        .filter(|(_, n)| **n > 0)
        .map(|(name, n)| (name.clone(), *n))
        .collect();
    for e in edge {
        closed.answered += e.answered;
        closed.ack += e.ack;
        if e.open > 0 {
            *open.entry(e.assignee).or_default() += e.open;
        }
    }
    let groups = open
        .into_iter()
        .map(|(assignee, open)| OpenGroup {
            assignee,
            open,
            ..OpenGroup::default()
        })
        .collect();
    let open_buckets = rows
        .into_iter()
        .filter(|(_, r)| r.open.open > 0)
        .map(|(k, r)| (k, r.open))
        .collect();
    LedgerWindow {
        groups,
        closed,
        names,
        open_buckets,
    }
}

/// A range of one assignee's open contracts to count row by row: `ts` in `[from_ts, until_ts)`
/// and id below `below_id`, added to the count or (`subtract`) taken from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CountRange {
    /// The first `ts` counted.
    pub from_ts: i64,
    /// The first `ts` not counted.
    pub until_ts: i64,
    /// Only ids below this.
    pub below_id: i64,
    /// Take the range's count from the total instead of adding it.
    pub subtract: bool,
}

/// How to count one assignee's open contracts in the window (from `since_ts`) sent before
/// `before_ts` with an id below `below_id`: the summed part, and the ranges to count.
///
/// A bucket wholly in the window (not `since_ts`'s, unless the window starts on its edge) and
/// before the cut's, with every id below `below_id`, is summed. The cut's
/// bucket, when every id in it is below `below_id` and the cut falls in its second half, is
/// summed less its rows from the cut on (the shorter walk). Any other bucket that may hold an
/// id below `below_id` is counted within the window, the cut and the bucket.
pub fn open_before(
    buckets: &[OpenBucket],
    since_ts: i64,
    before_ts: i64,
    below_id: i64,
) -> (i64, Vec<CountRange>) {
    const W: i64 = TALLY_BUCKET_MS;
    let edge = since_ts.div_euclid(W);
    let cut = before_ts.div_euclid(W);
    let mut summed = 0;
    let mut ranges = Vec::new();
    for b in buckets {
        if b.bucket < edge || b.bucket > cut || b.open <= 0 || b.min_id >= below_id {
            continue;
        }
        let start = b.bucket.saturating_mul(W);
        let end = b.bucket.saturating_add(1).saturating_mul(W);
        // Every row of the bucket is in the window, and every id below the id cut.
        let whole = start >= since_ts && b.max_id < below_id;
        if whole && b.bucket < cut {
            summed += b.open;
        } else if whole && b.bucket == cut && before_ts - start > W / 2 {
            summed += b.open;
            ranges.push(CountRange {
                from_ts: before_ts,
                until_ts: end,
                below_id: i64::MAX,
                subtract: true,
            });
        } else {
            let (from_ts, until_ts) = (start.max(since_ts), end.min(before_ts));
            if from_ts < until_ts {
                ranges.push(CountRange {
                    from_ts,
                    until_ts,
                    below_id,
                    subtract: false,
                });
            }
        }
    }
    (summed, ranges)
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: i64 = TALLY_BUCKET_MS;

    /// One contract: (ts, id).
    type Contract = (i64, i64);

    /// The buckets of `open` contracts.
    fn tally(open: &[Contract]) -> Vec<OpenBucket> {
        let rows = open.iter().map(|&(ts, id)| {
            let b = OpenBucket {
                bucket: ts.div_euclid(H),
                open: 1,
                min_id: id,
                max_id: id,
            };
            ("a".to_string(), b)
        });
        OpenTally::from_rows(rows).buckets("a").to_vec()
    }

    /// The plan's count, its ranges counted over `open` as the store would.
    fn planned(open: &[Contract], since: i64, before: i64, below: i64) -> (i64, usize) {
        let (summed, ranges) = open_before(&tally(open), since, before, below);
        let mut n = summed;
        let mut walked = 0;
        for r in &ranges {
            // The index walk reads every row of the ts range; the id bound only filters.
            let range = open
                .iter()
                .filter(|&&(ts, _)| ts >= r.from_ts && ts < r.until_ts);
            walked += range.clone().count();
            let c = range.filter(|&&(_, id)| id < r.below_id).count() as i64;
            n += if r.subtract { -c } else { c };
        }
        (n, walked)
    }

    #[test]
    fn counts_what_a_scan_counts_and_walks_only_the_cut_buckets() {
        // 100 contracts an hour for 10 hours from hour 100, ids in ts order.
        let open: Vec<Contract> = (0..1000)
            .map(|i| (100 * H + i * (H / 100), i + 1))
            .collect();
        let cases = [
            // (name, since, before, below, the most rows the plan may walk)
            ("everything", 0, i64::MAX / 2, i64::MAX, 0),
            (
                "window from inside hour 102",
                102 * H + H / 4,
                108 * H,
                i64::MAX,
                75,
            ),
            (
                "cut early in hour 105",
                100 * H,
                105 * H + H / 10,
                i64::MAX,
                10,
            ),
            (
                "cut late in hour 105: the other side",
                100 * H,
                105 * H + 9 * H / 10,
                i64::MAX,
                10,
            ),
            ("cut on an hour's edge", 100 * H, 106 * H, i64::MAX, 0),
            ("id cut inside hour 103", 100 * H, 108 * H, 350, 100),
            (
                "id cut late, ts cut late in its hour",
                100 * H,
                104 * H + 4 * H / 5,
                420,
                100,
            ),
            ("id cut below everything", 100 * H, 108 * H, 1, 0),
            ("window after the cut", 107 * H, 105 * H, i64::MAX, 0),
            (
                "window edge and cut in one hour",
                103 * H + 10,
                103 * H + H / 2,
                i64::MAX,
                50,
            ),
        ];
        for (name, since, before, below, most) in cases {
            let want = open
                .iter()
                .filter(|&&(ts, id)| ts >= since && ts < before && id < below)
                .count() as i64;
            let (got, walked) = planned(&open, since, before, below);
            assert_eq!(got, want, "{name}");
            assert!(
                walked <= most,
                "{name}: walked {walked} rows, more than {most}"
            );
        }
    }

    #[test]
    fn window_sums_the_buckets_after_the_first_and_adds_its_counted_rows() {
        let row = |bucket, open, answered, ack| TallyRow {
            open: OpenBucket {
                bucket,
                open,
                min_id: bucket * 10,
                max_id: bucket * 10 + 9,
            },
            answered,
            ack,
        };
        let mut rows = TallyRows::default();
        for (assignee, r) in [
            ("a", row(4, 5, 1, 1)), // the first bucket: its rows come counted
            ("a", row(5, 2, 3, 0)),
            ("b", row(5, 0, 4, 2)), // nothing open: no group, no open bucket
            ("a", row(6, 1, 0, 1)),
            ("c", row(6, 3, 0, 0)),
        ] {
            rows.push(assignee, r);
        }
        let edge = vec![
            EdgeCounts {
                assignee: "a".into(),
                open: 2,
                answered: 1,
                ack: 0,
            },
            EdgeCounts {
                assignee: "d".into(),
                open: 1,
                answered: 0,
                ack: 0,
            },
        ];
        let mut w = window(4, rows, edge);
        let groups: Vec<(&str, i64)> = w
            .groups
            .iter()
            .map(|g| (g.assignee.as_str(), g.open))
            .collect();
        assert_eq!(groups, [("a", 5), ("c", 3), ("d", 1)]);
        assert_eq!(
            w.closed,
            LedgerCounts {
                answered: 8,
                ack: 3
            }
        );
        let tally = w.take_tally();
        let buckets: Vec<i64> = tally.buckets("a").iter().map(|b| b.bucket).collect();
        assert_eq!(
            buckets,
            [4, 5, 6],
            "the first bucket is kept for the split's plan"
        );
        assert!(tally.buckets("b").is_empty());
    }

    #[test]
    fn folds_projects_into_one_bucket() {
        let row = |bucket, open, min_id, max_id| OpenBucket {
            bucket,
            open,
            min_id,
            max_id,
        };
        let t = OpenTally::from_rows([
            ("a".to_string(), row(5, 2, 10, 20)),
            ("b".to_string(), row(5, 1, 11, 11)),
            ("a".to_string(), row(4, 1, 3, 3)),
            ("a".to_string(), row(5, 3, 7, 15)),
        ]);
        assert_eq!(t.buckets("a"), [row(4, 1, 3, 3), row(5, 5, 7, 20)]);
        assert_eq!(t.buckets("b"), [row(5, 1, 11, 11)]);
        assert!(t.buckets("c").is_empty());
    }
}

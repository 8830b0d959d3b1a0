//! Shardable indices (Section 3.3): the named indices a spec request splits into intervals.

use einsum_core::Interval;

/// Where a shardable index may be cut.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum SplitPoints {
    /// Between any two positions (the paper's `any` annotation).
    Any,
    /// Only at these interior positions (sorted, each in `(0, extent)`), e.g. the ends of
    /// packed sequences.
    At(Vec<usize>),
}

/// A named index that the optimizer may decompose into intervals.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ShardableIndex {
    /// The index name, as reported in plans (`tokens`, `heads_kv`, ...).
    pub name: String,
    /// The extent of the index.
    pub extent: usize,
    /// Where it may be cut.
    pub splits: SplitPoints,
}

impl ShardableIndex {
    /// An index that may be cut anywhere.
    pub fn any(name: impl Into<String>, extent: usize) -> Self {
        Self { name: name.into(), extent, splits: SplitPoints::Any }
    }

    /// An index that may be cut only at the given positions; positions outside
    /// `(0, extent)` and repeats are dropped.
    pub fn at(name: impl Into<String>, extent: usize, positions: impl IntoIterator<Item = usize>) -> Self {
        let mut cuts: Vec<usize> = positions.into_iter().filter(|&c| 0 < c && c < extent).collect();
        cuts.sort_unstable();
        cuts.dedup();
        Self { name: name.into(), extent, splits: SplitPoints::At(cuts) }
    }

    /// The largest number of non-empty intervals this index can be split into.
    pub fn max_parts(&self) -> usize {
        match &self.splits {
            SplitPoints::Any => self.extent,
            SplitPoints::At(cuts) => cuts.len() + 1,
        }
    }

    /// Splits the index into `count` non-empty, near-equal intervals at allowed positions,
    /// or `None` when it cannot be split that many ways.
    pub fn intervals(&self, count: usize) -> Option<Vec<Interval>> {
        match &self.splits {
            SplitPoints::Any => Interval::split_even(self.extent, count),
            SplitPoints::At(cuts) => {
                if count == 0 || count > cuts.len() + 1 {
                    return None;
                }
                // Greedy: each cut takes the allowed position nearest its ideal place,
                // leaving enough positions for the cuts still to come.
                let mut chosen = Vec::with_capacity(count - 1);
                let mut next = 0;
                for k in 1..count {
                    let target = (k * self.extent) as f64 / count as f64;
                    let last = cuts.len() - (count - 1 - k);
                    let best = (next..last)
                        .min_by(|&a, &b| {
                            let (da, db) = ((cuts[a] as f64 - target).abs(), (cuts[b] as f64 - target).abs());
                            da.total_cmp(&db)
                        })
                        .expect("enough positions remain by construction");
                    chosen.push(cuts[best]);
                    next = best + 1;
                }
                let mut bounds = vec![0];
                bounds.extend(chosen);
                bounds.push(self.extent);
                Some(bounds.windows(2).map(|w| Interval { lo: w[0], hi: w[1] }).collect())
            }
        }
    }

    /// Checks that `intervals` split `[0, extent)` into contiguous non-empty pieces cut only
    /// at allowed positions; the error says which piece or cut is wrong.
    pub fn check_intervals(&self, intervals: &[Interval]) -> Result<(), String> {
        let mut at = 0;
        for iv in intervals {
            if iv.lo != at {
                return Err(format!("interval {iv} does not start where the previous one ends ({at})"));
            }
            if iv.is_empty() {
                return Err(format!("interval {iv} is empty"));
            }
            if let SplitPoints::At(cuts) = &self.splits
                && iv.lo != 0
                && cuts.binary_search(&iv.lo).is_err()
            {
                return Err(format!("cut at {} is not an allowed position (allowed: {cuts:?})", iv.lo));
            }
            at = iv.hi;
        }
        if at != self.extent {
            return Err(format!("intervals end at {at}, not at the extent {}", self.extent));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_splits_evenly() {
        let s = ShardableIndex::any("i", 256);
        let ivs = s.intervals(2).unwrap();
        assert_eq!(ivs, vec![Interval { lo: 0, hi: 128 }, Interval { lo: 128, hi: 256 }]);
        assert!(s.check_intervals(&ivs).is_ok());
        assert!(s.intervals(257).is_none());
    }

    #[test]
    fn at_splits_only_at_positions() {
        // Example 3.10: sequence of 4096 holding sequences ending at 1024, 2560, 4096.
        let s = ShardableIndex::at("sequence", 4096, [1024, 2560, 4096]);
        assert_eq!(s.max_parts(), 3);
        assert_eq!(s.intervals(2).unwrap(), vec![Interval { lo: 0, hi: 2560 }, Interval { lo: 2560, hi: 4096 }]);
        assert_eq!(s.intervals(3).unwrap().len(), 3);
        assert!(s.intervals(4).is_none());
        let bad = [Interval { lo: 0, hi: 2048 }, Interval { lo: 2048, hi: 4096 }];
        assert!(s.check_intervals(&bad).unwrap_err().contains("2048"));
    }

    #[test]
    fn greedy_leaves_room_for_later_cuts() {
        let s = ShardableIndex::at("s", 100, [97, 98, 99]);
        let ivs = s.intervals(4).unwrap();
        assert_eq!(ivs.iter().map(|i| i.hi).collect::<Vec<_>>(), vec![97, 98, 99, 100]);
    }

    #[test]
    fn check_rejects_gaps_and_short_covers() {
        let s = ShardableIndex::any("i", 10);
        assert!(s.check_intervals(&[Interval { lo: 0, hi: 4 }, Interval { lo: 5, hi: 10 }]).is_err());
        assert!(s.check_intervals(&[Interval { lo: 0, hi: 4 }]).is_err());
        assert!(s.check_intervals(&[Interval { lo: 0, hi: 0 }, Interval { lo: 0, hi: 10 }]).is_err());
    }
}

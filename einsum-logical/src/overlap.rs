//! How the blocks of one tiling of a tensor cover the blocks of another: what a repartition
//! between the two must move ([`CostModel::repartition_between`](crate::CostModel::repartition_between)).

use einsum_core::{Interval, TensorType};

/// How one block of the target tiling is covered by the blocks of the source tiling.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cover {
    /// The block's elements.
    pub volume: usize,
    /// The most elements of it that one source block holds: what the device that runs it
    /// can already hold, when the source block is placed there.
    pub largest: usize,
    /// How many source blocks hold part of it: the devices its pieces come from.
    pub pieces: usize,
}

/// The [`Cover`] of every block of `to` by the blocks of `from`, in `to`'s order.
///
/// Source tilings are usually grids (the product of one partition of each dimension), and
/// then a target block's cover is the product of its per-dimension covers, each found by a
/// binary search over that dimension's sorted intervals; any other source tiling (blocks
/// that overlap, such as key/value prefixes) is intersected block by block.
pub fn covers(from: &[TensorType], to: &[TensorType]) -> Vec<Cover> {
    match Grid::of(from) {
        Some(grid) => to.iter().map(|b| grid.cover(b)).collect(),
        None => to.iter().map(|b| brute_cover(from, b)).collect(),
    }
}

fn brute_cover(from: &[TensorType], block: &TensorType) -> Cover {
    let (mut largest, mut pieces) = (0, 0);
    for f in from {
        let shared: usize = f.dims().iter().zip(block.dims()).map(|(a, b)| overlap(a, b)).product();
        if shared > 0 {
            largest = largest.max(shared);
            pieces += 1;
        }
    }
    Cover { volume: block.volume(), largest, pieces }
}

/// The elements two intervals share.
fn overlap(a: &Interval, b: &Interval) -> usize {
    a.intersect(b).map_or(0, |i| i.len())
}

/// A tiling that is the product of one partition per dimension: per dimension, its
/// intervals sorted by lower bound, contiguous and disjoint.
struct Grid {
    dims: Vec<Vec<Interval>>,
}

impl Grid {
    /// The grid whose product is exactly `blocks`, if they form one.
    fn of(blocks: &[TensorType]) -> Option<Grid> {
        let rank = blocks.first()?.rank();
        let mut dims = Vec::with_capacity(rank);
        for d in 0..rank {
            let mut intervals: Vec<Interval> = blocks.iter().map(|b| b.dim(d)).collect();
            intervals.sort_by_key(|i| (i.lo, i.hi));
            intervals.dedup();
            if intervals.windows(2).any(|w| w[0].hi != w[1].lo) {
                return None;
            }
            dims.push(intervals);
        }
        let product = dims.iter().try_fold(1usize, |acc, d| acc.checked_mul(d.len()))?;
        (product == blocks.len()).then_some(Grid { dims })
    }

    fn cover(&self, block: &TensorType) -> Cover {
        let (mut largest, mut pieces) = (1, 1);
        for (intervals, want) in self.dims.iter().zip(block.dims()) {
            let first = intervals.partition_point(|i| i.hi <= want.lo);
            let hit = intervals[first..].iter().take_while(|i| i.lo < want.hi);
            let (mut most, mut count) = (0, 0);
            for i in hit {
                most = most.max(overlap(i, want));
                count += 1;
            }
            largest *= most;
            pieces *= count;
        }
        Cover { volume: block.volume(), largest, pieces }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(lo: &[usize], hi: &[usize]) -> TensorType {
        TensorType::new(lo, hi).unwrap()
    }

    fn rows(n: usize, count: usize, cols: usize) -> Vec<TensorType> {
        (0..count).map(|i| block(&[i * n / count, 0], &[(i + 1) * n / count, cols])).collect()
    }

    #[test]
    fn a_finer_split_is_covered_by_one_block_and_a_transpose_by_all() {
        // 8 rows → 4 rows: each target block is two source blocks.
        let c = covers(&rows(8, 8, 4), &rows(8, 4, 4));
        assert!(c.iter().all(|c| *c == Cover { volume: 8, largest: 4, pieces: 2 }), "{c:?}");
        // 4 rows → 4 columns: every source block holds a quarter of every target block.
        let cols: Vec<TensorType> = (0..4).map(|j| block(&[0, j], &[8, j + 1])).collect();
        let c = covers(&rows(8, 4, 4), &cols);
        assert!(c.iter().all(|c| *c == Cover { volume: 8, largest: 2, pieces: 4 }), "{c:?}");
    }

    #[test]
    fn overlapping_sources_are_intersected_block_by_block() {
        // Prefixes [0, 2), [0, 4), [0, 6), [0, 8) as the source: not a grid.
        let prefixes: Vec<TensorType> = (1..=4).map(|i| block(&[0], &[2 * i])).collect();
        let c = covers(&prefixes, &[block(&[2], &[6])]);
        assert_eq!(c, vec![Cover { volume: 4, largest: 4, pieces: 3 }]);
        let grid = covers(&[block(&[0], &[4]), block(&[4], &[8])], &[block(&[2], &[6])]);
        assert_eq!(grid, vec![Cover { volume: 4, largest: 2, pieces: 2 }]);
    }
}

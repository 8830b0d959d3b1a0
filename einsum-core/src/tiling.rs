//! Tilings (Definition 3.2) and their overlay (Section 5.3).

use std::collections::BTreeSet;

use crate::{CoreError, Interval, Result, TensorType};

/// Checks that `blocks` tile `whole`: every block is a projection of it, the blocks are
/// pairwise disjoint, and together they cover it. The error says which condition fails.
pub fn check_tiling(whole: &TensorType, blocks: &[TensorType]) -> Result<()> {
    let fail = |reason: String| Err(CoreError::NotATiling { whole: whole.clone(), reason });
    for b in blocks {
        if !b.is_projection_of(whole) {
            return fail(format!("block {b} is not a projection of it"));
        }
    }
    if !disjoint_by_cells(whole.rank(), blocks) {
        for (i, a) in blocks.iter().enumerate() {
            if a.is_empty() {
                continue;
            }
            for b in &blocks[i + 1..] {
                if let Some(common) = a.intersect(b) {
                    return fail(format!("blocks {a} and {b} overlap on {common}"));
                }
            }
        }
    }
    let covered = blocks.iter().fold(0usize, |acc, b| acc.saturating_add(b.volume()));
    if covered != whole.volume() {
        return fail(format!("the blocks cover {covered} of its {} indices", whole.volume()));
    }
    Ok(())
}

/// Whether `blocks` (boxes of rank `rank`) are pairwise disjoint, decided without comparing
/// every pair where that is cheaper: every block is a union of the cells of the grid cut at
/// all the blocks' bounds, so two blocks overlap exactly when they share a cell, and counting
/// each cell's blocks costs the cells instead of the `O(n²)` pairs (for the grid specs every
/// operator offers, the cells are the blocks). `false` means "overlapping, or too many cells
/// to tell cheaply": the caller then compares the pairs, which also names the overlap.
fn disjoint_by_cells(rank: usize, blocks: &[TensorType]) -> bool {
    let live: Vec<&TensorType> = blocks.iter().filter(|b| !b.is_empty()).collect();
    let cuts: Vec<Vec<usize>> = (0..rank)
        .map(|d| {
            let mut c: Vec<usize> = live.iter().flat_map(|b| [b.dims()[d].lo, b.dims()[d].hi]).collect();
            c.sort_unstable();
            c.dedup();
            c
        })
        .collect();
    // painting must stay cheaper than the pairs it replaces
    let pairs = live.len().saturating_mul(live.len()) / 2 + 64;
    let cells = cuts.iter().try_fold(1usize, |acc, c| acc.checked_mul(c.len().saturating_sub(1)));
    let Some(cells) = cells.filter(|&c| c <= pairs) else { return false };
    let mut painted = vec![false; cells];
    for b in live {
        // the block's cell ranges per dimension, and the cells in row-major order
        let ranges: Vec<(usize, usize)> = (0..rank)
            .map(|d| {
                let at = |x: usize| cuts[d].partition_point(|&c| c < x);
                (at(b.dims()[d].lo), at(b.dims()[d].hi))
            })
            .collect();
        let mut index: Vec<usize> = ranges.iter().map(|r| r.0).collect();
        'cells: loop {
            let cell = (0..rank).fold(0usize, |acc, d| acc * (cuts[d].len() - 1) + index[d]);
            if std::mem::replace(&mut painted[cell], true) {
                return false;
            }
            // the next cell of the block, last dimension fastest
            for d in (0..rank).rev() {
                index[d] += 1;
                if index[d] < ranges[d].1 {
                    continue 'cells;
                }
                index[d] = ranges[d].0;
            }
            break;
        }
    }
    true
}

/// A validated tiling of a type, with its blocks in a canonical (sorted) order so that two
/// tilings made of the same blocks compare and hash equal.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Tiling {
    whole: TensorType,
    blocks: Vec<TensorType>,
}

impl Tiling {
    /// The tiling of `whole` by `blocks`, if they tile it.
    pub fn new(whole: TensorType, mut blocks: Vec<TensorType>) -> Result<Self> {
        check_tiling(&whole, &blocks)?;
        blocks.sort();
        Ok(Self { whole, blocks })
    }

    /// The trivial tiling: one block, the whole type.
    pub fn trivial(whole: TensorType) -> Self {
        Self { blocks: vec![whole.clone()], whole }
    }

    /// The grid tiling of `whole` cut at the given interior points of every dimension.
    ///
    /// Points outside a dimension's open interval, and repeated points, are ignored.
    pub fn grid(whole: &TensorType, cuts: &[Vec<usize>]) -> Result<Self> {
        if cuts.len() != whole.rank() {
            return Err(CoreError::RankMismatch { what: "cut list".into(), expected: whole.rank(), got: cuts.len() });
        }
        let per_dim: Vec<Vec<Interval>> = whole
            .dims()
            .iter()
            .zip(cuts)
            .map(|(d, cuts)| {
                let mut points: BTreeSet<usize> = cuts.iter().copied().filter(|&c| d.lo < c && c < d.hi).collect();
                points.insert(d.lo);
                points.insert(d.hi);
                let points: Vec<usize> = points.into_iter().collect();
                points.windows(2).map(|w| Interval { lo: w[0], hi: w[1] }).collect()
            })
            .collect();
        let mut blocks = vec![Vec::new()];
        for dim in &per_dim {
            blocks = blocks
                .into_iter()
                .flat_map(|prefix: Vec<Interval>| {
                    dim.iter().map(move |iv| {
                        let mut b = prefix.clone();
                        b.push(*iv);
                        b
                    })
                })
                .collect();
        }
        let mut blocks: Vec<TensorType> = blocks.into_iter().map(TensorType::from_intervals).collect();
        blocks.sort();
        Ok(Self { whole: whole.clone(), blocks })
    }

    /// The type being tiled.
    pub fn whole(&self) -> &TensorType {
        &self.whole
    }

    /// The blocks, in canonical order.
    pub fn blocks(&self) -> &[TensorType] {
        &self.blocks
    }

    /// Number of blocks.
    pub fn len(&self) -> usize {
        self.blocks.len()
    }

    /// True for the tiling of an empty type by no blocks.
    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }

    /// Every lower and upper bound of every block, per dimension, sorted.
    pub fn split_points(&self) -> Vec<Vec<usize>> {
        (0..self.whole.rank())
            .map(|d| {
                let set: BTreeSet<usize> = self.blocks.iter().flat_map(|b| [b.dim(d).lo, b.dim(d).hi]).collect();
                set.into_iter().collect()
            })
            .collect()
    }

    /// The overlay of two tilings of the same type: the grid of all their split points.
    ///
    /// Every block of either tiling is a disjoint union of overlay cells (the atoms of
    /// Section 5.3).
    pub fn overlay(&self, other: &Tiling) -> Result<Tiling> {
        if self.whole != other.whole {
            return Err(CoreError::NotATiling {
                whole: self.whole.clone(),
                reason: format!("cannot overlay it with a tiling of {}", other.whole),
            });
        }
        let cuts: Vec<Vec<usize>> = self
            .split_points()
            .into_iter()
            .zip(other.split_points())
            .map(|(mut a, b)| {
                a.extend(b);
                a
            })
            .collect();
        Tiling::grid(&self.whole, &cuts)
    }

    /// The blocks of `self` that lie inside `block`.
    pub fn blocks_within<'a>(&'a self, block: &'a TensorType) -> impl Iterator<Item = &'a TensorType> + 'a {
        self.blocks.iter().filter(move |b| b.is_projection_of(block))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tt(lo: &[usize], hi: &[usize]) -> TensorType {
        TensorType::new(lo, hi).unwrap()
    }

    #[test]
    fn tiling_checks_say_why() {
        let whole = TensorType::zero_bounded(&[4, 4]);
        let halves = vec![tt(&[0, 0], &[2, 4]), tt(&[2, 0], &[4, 4])];
        assert!(check_tiling(&whole, &halves).is_ok());
        let overlap = vec![tt(&[0, 0], &[3, 4]), tt(&[2, 0], &[4, 4])];
        let err = check_tiling(&whole, &overlap).unwrap_err().to_string();
        assert!(err.contains("overlap"), "{err}");
        let gap = vec![tt(&[0, 0], &[2, 4])];
        let err = check_tiling(&whole, &gap).unwrap_err().to_string();
        assert!(err.contains("cover 8 of its 16"), "{err}");
        let outside = vec![tt(&[0, 0], &[5, 4])];
        assert!(check_tiling(&whole, &outside).unwrap_err().to_string().contains("not a projection"));
    }

    /// The cell painting never calls overlapping blocks disjoint, and calls every grid
    /// tiling disjoint (so the pairs are not compared for the specs operators offer):
    /// checked against the pairwise definition on random sets of boxes, many overlapping.
    #[test]
    fn disjointness_by_cells_agrees_with_the_pairs() {
        let mut rng = crate::SeededRng::new(11);
        let (mut disjoint, mut overlapping) = (0, 0);
        for _ in 0..3000 {
            let rank = rng.below(4);
            let n = 1 + rng.below(8);
            let blocks: Vec<TensorType> = (0..n)
                .map(|_| {
                    let lo: Vec<usize> = (0..rank).map(|_| rng.below(5)).collect();
                    let hi: Vec<usize> = lo.iter().map(|&l| l + rng.below(3)).collect();
                    tt(&lo, &hi)
                })
                .collect();
            let pairwise = blocks
                .iter()
                .enumerate()
                .all(|(i, a)| a.is_empty() || blocks[i + 1..].iter().all(|b| a.intersect(b).is_none()));
            if disjoint_by_cells(rank, &blocks) {
                assert!(pairwise, "{blocks:?}");
            }
            if pairwise { disjoint += 1 } else { overlapping += 1 }
        }
        assert!(disjoint > 300 && overlapping > 300, "{disjoint} disjoint, {overlapping} overlapping sets");
        let whole = TensorType::zero_bounded(&[12, 10, 6]);
        let grid = Tiling::grid(&whole, &[vec![3, 7], vec![5], vec![1, 2, 3, 4, 5]]).unwrap();
        assert!(disjoint_by_cells(3, grid.blocks()));
        assert_eq!(check_tiling(&whole, grid.blocks()), Ok(()));
    }

    #[test]
    fn tilings_compare_in_canonical_order() {
        let whole = TensorType::zero_bounded(&[4]);
        let a = Tiling::new(whole.clone(), vec![tt(&[2], &[4]), tt(&[0], &[2])]).unwrap();
        let b = Tiling::new(whole, vec![tt(&[0], &[2]), tt(&[2], &[4])]).unwrap();
        assert_eq!(a, b);
    }

    #[test]
    fn overlay_of_example_5_4() {
        // Producer rows split in halves, consumer rows in quarters: four atoms.
        let whole = TensorType::zero_bounded(&[256, 256]);
        let producer = Tiling::grid(&whole, &[vec![128], vec![]]).unwrap();
        let consumer = Tiling::grid(&whole, &[vec![64, 128, 192], vec![]]).unwrap();
        let atoms = producer.overlay(&consumer).unwrap();
        assert_eq!(atoms, consumer);
        assert_eq!(atoms.split_points()[0], vec![0, 64, 128, 192, 256]);
        // Each producer block is a union of two atoms.
        for block in producer.blocks() {
            assert_eq!(atoms.blocks_within(block).count(), 2);
        }
    }

    #[test]
    fn overlay_of_crossing_grids() {
        let whole = TensorType::zero_bounded(&[6, 6]);
        let rows = Tiling::grid(&whole, &[vec![3], vec![]]).unwrap();
        let cols = Tiling::grid(&whole, &[vec![], vec![2, 4]]).unwrap();
        let atoms = rows.overlay(&cols).unwrap();
        assert_eq!(atoms.len(), 6);
        assert!(check_tiling(&whole, atoms.blocks()).is_ok());
    }
}

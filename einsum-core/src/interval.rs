//! Half-open integer intervals `[lo, hi)`.

use std::fmt;

use crate::{CoreError, Result};

/// A half-open interval `[lo, hi)` of indices along one dimension.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Interval {
    /// Inclusive lower bound.
    pub lo: usize,
    /// Exclusive upper bound.
    pub hi: usize,
}

impl Interval {
    /// `[lo, hi)`; fails when `lo > hi`.
    pub fn new(lo: usize, hi: usize) -> Result<Self> {
        if lo > hi {
            return Err(CoreError::InvalidBounds { dim: 0, lower: lo, upper: hi });
        }
        Ok(Self { lo, hi })
    }

    /// `[0, extent)`.
    pub fn full(extent: usize) -> Self {
        Self { lo: 0, hi: extent }
    }

    /// Number of indices in the interval.
    pub fn len(&self) -> usize {
        self.hi - self.lo
    }

    /// True when the interval holds no index.
    pub fn is_empty(&self) -> bool {
        self.hi == self.lo
    }

    /// True when `self` lies within `other`.
    pub fn is_within(&self, other: &Interval) -> bool {
        other.lo <= self.lo && self.hi <= other.hi
    }

    /// The common part, if non-empty.
    pub fn intersect(&self, other: &Interval) -> Option<Interval> {
        let lo = self.lo.max(other.lo);
        let hi = self.hi.min(other.hi);
        (lo < hi).then_some(Interval { lo, hi })
    }

    /// True when `i` is in `[lo, hi)`.
    pub fn contains(&self, i: usize) -> bool {
        self.lo <= i && i < self.hi
    }

    /// Splits `[0, extent)` into `count` near-equal, non-empty intervals.
    ///
    /// Returns `None` when `count` is zero or larger than `extent`.
    pub fn split_even(extent: usize, count: usize) -> Option<Vec<Interval>> {
        if count == 0 || count > extent {
            return None;
        }
        Some((0..count).map(|i| Interval { lo: i * extent / count, hi: (i + 1) * extent / count }).collect())
    }
}

impl fmt::Display for Interval {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}, {})", self.lo, self.hi)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_even_is_near_equal_and_covers() {
        let parts = Interval::split_even(10, 3).unwrap();
        assert_eq!(parts, vec![Interval { lo: 0, hi: 3 }, Interval { lo: 3, hi: 6 }, Interval { lo: 6, hi: 10 }]);
        assert!(Interval::split_even(3, 4).is_none());
        assert!(Interval::split_even(3, 0).is_none());
    }

    #[test]
    fn intersect_and_within() {
        let a = Interval::new(2, 6).unwrap();
        let b = Interval::new(4, 9).unwrap();
        assert_eq!(a.intersect(&b), Some(Interval { lo: 4, hi: 6 }));
        assert_eq!(a.intersect(&Interval::new(6, 7).unwrap()), None);
        assert!(Interval::new(3, 5).unwrap().is_within(&a));
        assert!(!b.is_within(&a));
        assert!(Interval::new(5, 4).is_err());
    }
}

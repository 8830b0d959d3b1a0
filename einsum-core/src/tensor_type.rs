//! Tensor types: boxes of integer index vectors (Definition 3.1).

use std::fmt;

use crate::{CoreError, Interval, Result};

/// A tensor type: rank, inclusive lower bounds and exclusive upper bounds.
///
/// Its index set `I(T)` is the box `[lower, upper)`. User-facing types are zero-bounded;
/// sub-blocks keep their absolute bounds so a block always knows where it sits.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TensorType {
    dims: Vec<Interval>,
}

impl TensorType {
    /// The type with the given lower and upper bound vectors.
    pub fn new(lower: &[usize], upper: &[usize]) -> Result<Self> {
        if lower.len() != upper.len() {
            return Err(CoreError::RankMismatch {
                what: "upper-bound vector".into(),
                expected: lower.len(),
                got: upper.len(),
            });
        }
        let dims = lower
            .iter()
            .zip(upper)
            .enumerate()
            .map(|(dim, (&lo, &hi))| {
                if lo > hi {
                    Err(CoreError::InvalidBounds { dim, lower: lo, upper: hi })
                } else {
                    Ok(Interval { lo, hi })
                }
            })
            .collect::<Result<_>>()?;
        Ok(Self { dims })
    }

    /// The zero-bounded type `[0, shape)`.
    pub fn zero_bounded(shape: &[usize]) -> Self {
        Self { dims: shape.iter().map(|&n| Interval::full(n)).collect() }
    }

    /// The type whose dimensions are the given intervals.
    pub fn from_intervals(dims: Vec<Interval>) -> Self {
        Self { dims }
    }

    /// Number of dimensions.
    pub fn rank(&self) -> usize {
        self.dims.len()
    }

    /// The interval of every dimension.
    pub fn dims(&self) -> &[Interval] {
        &self.dims
    }

    /// The interval of dimension `d`.
    pub fn dim(&self, d: usize) -> Interval {
        self.dims[d]
    }

    /// Inclusive lower bounds.
    pub fn lower(&self) -> Vec<usize> {
        self.dims.iter().map(|i| i.lo).collect()
    }

    /// Exclusive upper bounds.
    pub fn upper(&self) -> Vec<usize> {
        self.dims.iter().map(|i| i.hi).collect()
    }

    /// Extent of every dimension.
    pub fn shape(&self) -> Vec<usize> {
        self.dims.iter().map(Interval::len).collect()
    }

    /// `|I(T)|`, the number of index vectors (1 for rank 0).
    pub fn volume(&self) -> usize {
        self.dims.iter().map(Interval::len).product()
    }

    /// True when the box holds no index vector.
    pub fn is_empty(&self) -> bool {
        self.dims.iter().any(Interval::is_empty)
    }

    /// True when `self` is a projection of `whole` (Definition 3.5): same rank, inside it.
    pub fn is_projection_of(&self, whole: &TensorType) -> bool {
        self.rank() == whole.rank() && self.dims.iter().zip(&whole.dims).all(|(a, b)| a.is_within(b))
    }

    /// Like [`is_projection_of`](Self::is_projection_of), as a typed error.
    pub fn check_projection_of(&self, whole: &TensorType) -> Result<()> {
        if self.is_projection_of(whole) {
            Ok(())
        } else {
            Err(CoreError::NotAProjection { part: self.clone(), whole: whole.clone() })
        }
    }

    /// The common sub-box, if non-empty (and the ranks agree).
    pub fn intersect(&self, other: &TensorType) -> Option<TensorType> {
        if self.rank() != other.rank() {
            return None;
        }
        let dims = self.dims.iter().zip(&other.dims).map(|(a, b)| a.intersect(b)).collect::<Option<Vec<_>>>()?;
        Some(TensorType { dims })
    }

    /// True when the index vector lies in the box.
    pub fn contains(&self, index: &[usize]) -> bool {
        index.len() == self.rank() && self.dims.iter().zip(index).all(|(d, &i)| d.contains(i))
    }

    /// The same box with dimension `d` replaced by `interval`.
    pub fn with_dim(&self, d: usize, interval: Interval) -> TensorType {
        let mut dims = self.dims.clone();
        dims[d] = interval;
        TensorType { dims }
    }

    /// Row-major strides of a dense buffer holding this box.
    pub fn strides(&self) -> Vec<usize> {
        let mut strides = vec![1; self.rank()];
        for d in (0..self.rank().saturating_sub(1)).rev() {
            strides[d] = strides[d + 1] * self.dims[d + 1].len();
        }
        strides
    }
}

impl fmt::Display for TensorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[")?;
        for (i, d) in self.dims.iter().enumerate() {
            if i > 0 {
                write!(f, ", ")?;
            }
            write!(f, "{}..{}", d.lo, d.hi)?;
        }
        write!(f, "]")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn projection_and_intersection() {
        let whole = TensorType::zero_bounded(&[256, 512]);
        let part = TensorType::new(&[128, 0], &[256, 256]).unwrap();
        assert!(part.is_projection_of(&whole));
        assert!(!whole.is_projection_of(&part));
        assert!(part.check_projection_of(&TensorType::zero_bounded(&[256])).is_err());
        let other = TensorType::new(&[0, 200], &[200, 300]).unwrap();
        assert_eq!(part.intersect(&other), Some(TensorType::new(&[128, 200], &[200, 256]).unwrap()));
        assert_eq!(part.volume(), 128 * 256);
        assert_eq!(part.strides(), vec![256, 1]);
        assert_eq!(part.to_string(), "[128..256, 0..256]");
    }

    #[test]
    fn bad_bounds_are_errors() {
        assert!(matches!(TensorType::new(&[3], &[2]), Err(CoreError::InvalidBounds { dim: 0, .. })));
        assert!(matches!(TensorType::new(&[0, 0], &[2]), Err(CoreError::RankMismatch { .. })));
    }

    #[test]
    fn rank_zero_is_a_scalar() {
        let s = TensorType::zero_bounded(&[]);
        assert_eq!(s.volume(), 1);
        assert!(s.is_projection_of(&s));
    }
}

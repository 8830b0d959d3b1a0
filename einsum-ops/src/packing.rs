//! Packed sequences: several independent sequences laid end to end along one index.

use einsum_joinagg::{Error, Result};

/// Where the packed sequences of a `sequence` index end. Attention never crosses a
/// boundary, RoPE counts positions from each sequence's start, and `sequence` may be
/// sharded only at these ends (Example 3.10).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Packing {
    ends: Vec<usize>,
}

impl Packing {
    /// One sequence filling `[0, total)`.
    pub fn single(total: usize) -> Self {
        Self { ends: vec![total] }
    }

    /// Sequences ending at `ends` (strictly increasing, positive, the last being the total
    /// length).
    pub fn new(ends: Vec<usize>) -> Result<Self> {
        let bad = |reason: String| Err(Error::Invalid { op: "packing".into(), reason });
        if ends.is_empty() {
            return bad("no sequence end given".into());
        }
        if ends[0] == 0 || ends.windows(2).any(|w| w[0] >= w[1]) {
            return bad(format!("sequence ends must be positive and strictly increasing, got {ends:?}"));
        }
        Ok(Self { ends })
    }

    /// `count` sequences of `len` tokens each.
    pub fn uniform(count: usize, len: usize) -> Result<Self> {
        Self::new((1..=count).map(|i| i * len).collect())
    }

    /// The total length: the end of the last sequence.
    pub fn total(&self) -> usize {
        *self.ends.last().expect("at least one sequence")
    }

    /// The end of every sequence, in order.
    pub fn ends(&self) -> &[usize] {
        &self.ends
    }

    /// The ends strictly inside `(0, total)`: where the index may be cut.
    pub fn interior_cuts(&self) -> &[usize] {
        &self.ends[..self.ends.len() - 1]
    }

    /// The start of the sequence holding position `pos`.
    pub fn start_of(&self, pos: usize) -> usize {
        let i = self.ends.partition_point(|&e| e <= pos);
        if i == 0 { 0 } else { self.ends[i - 1] }
    }

    /// The (exclusive) end of the sequence holding position `pos`.
    pub fn end_of(&self, pos: usize) -> usize {
        let i = self.ends.partition_point(|&e| e <= pos);
        self.ends.get(i).copied().unwrap_or_else(|| self.total())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_find_their_sequence() {
        let p = Packing::new(vec![1024, 2560, 4096]).unwrap();
        assert_eq!(p.start_of(0), 0);
        assert_eq!(p.end_of(0), 1024);
        assert_eq!(p.start_of(1024), 1024);
        assert_eq!(p.end_of(1024), 2560);
        assert_eq!(p.start_of(4095), 2560);
        assert_eq!(p.interior_cuts(), &[1024, 2560]);
        assert!(Packing::new(vec![4, 4]).is_err());
        assert!(Packing::new(vec![]).is_err());
        assert_eq!(Packing::uniform(2, 3).unwrap().ends(), &[3, 6]);
    }
}

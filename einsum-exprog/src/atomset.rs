//! A fixed-width bit set over a program's atoms, for fast subset and disjointness tests.

/// Atoms as bits (index = position in the universe). All sets of one universe share a width.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct AtomSet {
    words: Vec<u64>,
}

impl AtomSet {
    /// The empty set over `n` atoms.
    pub fn empty(n: usize) -> Self {
        AtomSet { words: vec![0; n.div_ceil(64)] }
    }

    /// The empty set of the same width.
    pub fn empty_like(&self) -> Self {
        AtomSet { words: vec![0; self.words.len()] }
    }

    /// Adds atom `i`.
    pub fn insert(&mut self, i: usize) {
        self.words[i / 64] |= 1 << (i % 64);
    }

    /// Whether atom `i` is present.
    pub fn contains(&self, i: usize) -> bool {
        self.words.get(i / 64).is_some_and(|w| w & (1 << (i % 64)) != 0)
    }

    /// Whether no atom is present.
    pub fn is_empty(&self) -> bool {
        self.words.iter().all(|w| *w == 0)
    }

    /// Whether every atom of `self` is in `other`.
    pub fn is_subset(&self, other: &AtomSet) -> bool {
        self.words.iter().zip(&other.words).all(|(a, b)| a & !b == 0)
    }

    /// Removes the atoms of `other`.
    pub fn remove_all(&mut self, other: &AtomSet) {
        for (a, b) in self.words.iter_mut().zip(&other.words) {
            *a &= !b;
        }
    }

    /// Adds the atoms of `other`.
    pub fn insert_all(&mut self, other: &AtomSet) {
        for (a, b) in self.words.iter_mut().zip(&other.words) {
            *a |= b;
        }
    }

    /// The smallest atom present.
    pub fn first(&self) -> Option<usize> {
        self.words.iter().enumerate().find(|(_, w)| **w != 0).map(|(i, w)| i * 64 + w.trailing_zeros() as usize)
    }

    /// The atoms present, ascending.
    #[cfg(test)]
    pub fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.words
            .iter()
            .enumerate()
            .flat_map(|(i, w)| (0..64).filter(move |b| w & (1 << b) != 0).map(move |b| i * 64 + b))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operations() {
        let mut a = AtomSet::empty(130);
        assert!(a.is_empty());
        a.insert(3);
        a.insert(129);
        assert!(a.contains(129) && !a.contains(4) && !a.contains(1000));
        assert_eq!(a.first(), Some(3));
        assert_eq!(a.iter().collect::<Vec<_>>(), vec![3, 129]);
        let mut b = AtomSet::empty(130);
        b.insert(129);
        assert!(b.is_subset(&a) && !a.is_subset(&b));
        a.remove_all(&b);
        assert_eq!(a.iter().collect::<Vec<_>>(), vec![3]);
        a.insert_all(&b);
        assert_eq!(a.first(), Some(3));
    }
}

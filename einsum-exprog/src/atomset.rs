//! A bit set over a program's atoms, for fast subset and disjointness tests.
//!
//! Only the words from the first atom present to the last are stored. Most sets a closure
//! handles are single atoms or a group's partial sums, while an exchange between many devices
//! has thousands of atoms: a full-width set made each of the closure's materialisations cost
//! the whole universe in copying, hashing and comparing (quadratic in the atoms over a
//! closure), a trimmed one costs the words it spans.

/// Atoms as bits (index = position in the universe), stored from the first non-zero word to
/// the last, so that equal sets have equal fields (and so equal hashes).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) struct AtomSet {
    /// The index of the first stored word (0 when the set is empty).
    offset: usize,
    /// The words from the first non-zero one to the last non-zero one; none when empty.
    words: Vec<u64>,
}

impl AtomSet {
    /// The empty set.
    pub fn empty() -> Self {
        AtomSet::default()
    }

    /// One past the index of the last stored word.
    fn end(&self) -> usize {
        self.offset + self.words.len()
    }

    /// Word `w` of the full-width set.
    fn word(&self, w: usize) -> u64 {
        w.checked_sub(self.offset).and_then(|k| self.words.get(k)).copied().unwrap_or(0)
    }

    /// Drops zero words at both ends (the representation's invariant).
    fn trim(&mut self) {
        let Some(first) = self.words.iter().position(|w| *w != 0) else {
            self.words.clear();
            self.offset = 0;
            return;
        };
        let last = self.words.iter().rposition(|w| *w != 0).unwrap_or(first);
        self.words.truncate(last + 1);
        self.words.drain(..first);
        self.offset += first;
    }

    /// Stores the words `[lo, hi)`, keeping the stored ones (zero-filled elsewhere).
    fn widen(&mut self, lo: usize, hi: usize) {
        if self.words.is_empty() {
            self.offset = lo;
            self.words = vec![0; hi - lo];
            return;
        }
        let (lo, hi) = (lo.min(self.offset), hi.max(self.end()));
        if lo < self.offset {
            self.words.splice(0..0, std::iter::repeat_n(0, self.offset - lo));
            self.offset = lo;
        }
        self.words.resize(hi - self.offset, 0);
    }

    /// Adds atom `i`.
    pub fn insert(&mut self, i: usize) {
        let w = i / 64;
        self.widen(w, w + 1);
        self.words[w - self.offset] |= 1 << (i % 64);
    }

    /// Whether atom `i` is present.
    pub fn contains(&self, i: usize) -> bool {
        self.word(i / 64) & (1 << (i % 64)) != 0
    }

    /// Whether no atom is present.
    pub fn is_empty(&self) -> bool {
        self.words.is_empty()
    }

    /// Whether every atom of `self` is in `other`.
    pub fn is_subset(&self, other: &AtomSet) -> bool {
        if self.is_empty() {
            return true;
        }
        // the first and last stored words are non-zero: they must be within `other`'s
        if self.offset < other.offset || self.end() > other.end() {
            return false;
        }
        let base = self.offset - other.offset;
        self.words.iter().zip(&other.words[base..]).all(|(a, b)| a & !b == 0)
    }

    /// Removes the atoms of `other`.
    pub fn remove_all(&mut self, other: &AtomSet) {
        let (lo, hi) = (self.offset.max(other.offset), self.end().min(other.end()));
        for w in lo..hi {
            self.words[w - self.offset] &= !other.words[w - other.offset];
        }
        self.trim();
    }

    /// Adds the atoms of `other`.
    pub fn insert_all(&mut self, other: &AtomSet) {
        if other.is_empty() {
            return;
        }
        self.widen(other.offset, other.end());
        let base = other.offset - self.offset;
        for (a, b) in self.words[base..].iter_mut().zip(&other.words) {
            *a |= b;
        }
    }

    /// The smallest atom present.
    pub fn first(&self) -> Option<usize> {
        self.words.first().map(|w| self.offset * 64 + w.trailing_zeros() as usize)
    }

    /// The atoms present, ascending.
    #[cfg(test)]
    pub fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.words
            .iter()
            .enumerate()
            .flat_map(move |(i, w)| (0..64).filter(move |b| w & (1 << b) != 0).map(move |b| (self.offset + i) * 64 + b))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn operations() {
        let mut a = AtomSet::empty();
        assert!(a.is_empty());
        a.insert(3);
        a.insert(129);
        assert!(a.contains(129) && !a.contains(4) && !a.contains(1000));
        assert_eq!(a.first(), Some(3));
        assert_eq!(a.iter().collect::<Vec<_>>(), vec![3, 129]);
        let mut b = AtomSet::empty();
        b.insert(129);
        assert!(b.is_subset(&a) && !a.is_subset(&b));
        a.remove_all(&b);
        assert_eq!(a.iter().collect::<Vec<_>>(), vec![3]);
        a.insert_all(&b);
        assert_eq!(a.first(), Some(3));
    }

    /// Every operation agrees with a `BTreeSet` on random sets over a universe of 700 atoms
    /// (11 words, sets from one word to all of them), and sets built in different orders,
    /// or reached by removals, are equal and hash equal exactly when their atoms are.
    #[test]
    fn operations_agree_with_a_btree_set() {
        use std::hash::{BuildHasher, RandomState};
        let mut rng = einsum_core::SeededRng::new(5);
        let hasher = RandomState::new();
        let random = |rng: &mut einsum_core::SeededRng| -> BTreeSet<usize> {
            let (lo, span) = (rng.below(700), 1 + rng.below(300));
            (0..rng.below(12)).map(|_| (lo + rng.below(span)).min(699)).collect()
        };
        let build = |atoms: &BTreeSet<usize>| {
            let mut s = AtomSet::empty();
            for &a in atoms.iter().rev() {
                s.insert(a);
            }
            s
        };
        for _ in 0..3000 {
            let (x, y) = (random(&mut rng), random(&mut rng));
            let (sx, sy) = (build(&x), build(&y));
            assert_eq!(sx.iter().collect::<BTreeSet<_>>(), x);
            assert_eq!(sx.is_subset(&sy), x.is_subset(&y), "{x:?} {y:?}");
            assert_eq!(sx.first(), x.first().copied());
            assert_eq!(sx.is_empty(), x.is_empty());
            assert!((0..700).step_by(7).all(|i| sx.contains(i) == x.contains(&i)));
            let mut union = sx.clone();
            union.insert_all(&sy);
            assert_eq!(union, build(&x.union(&y).copied().collect()));
            let mut rest = union.clone();
            rest.remove_all(&sy);
            let expected = build(&x.difference(&y).copied().collect());
            assert_eq!(rest, expected, "{x:?} {y:?}");
            assert_eq!(hasher.hash_one(&rest), hasher.hash_one(&expected));
            assert_eq!(sx == sy, x == y);
        }
    }
}

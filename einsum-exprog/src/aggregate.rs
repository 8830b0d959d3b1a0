//! Aggregates: ⊕-combinations of distinct atoms, written `A+B+C`.

use std::cmp::Ordering;
use std::collections::BTreeSet;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use crate::ids::AtomId;

/// A non-empty set of distinct atoms combined with the operator's ⊕.
///
/// ⊕ is associative and commutative, so `A+B` and `B+A` are the same aggregate; the atoms are
/// kept sorted. ⊕ need not be idempotent, so an atom appears at most once (the parser rejects
/// `A+A`).
///
/// Ordering is by number of atoms first, then by the sorted atoms, so that printing a
/// program's body in order lists smaller aggregates (which tend to fire earlier) first.
///
/// The atoms are shared: a clone is a reference count, so cloning an action or a whole body
/// (as the exchange search does for every candidate) allocates nothing per atom, and two
/// clones of one aggregate compare equal without comparing their atoms' names.
#[derive(Clone, Debug)]
pub struct Aggregate(Arc<BTreeSet<AtomId>>);

/// An aggregate must hold at least one atom.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("an aggregate needs at least one atom")]
pub struct EmptyAggregate;

impl Aggregate {
    /// The aggregate of `atoms` (duplicates collapse: build from distinct atoms).
    pub fn new(atoms: impl IntoIterator<Item = AtomId>) -> Result<Self, EmptyAggregate> {
        let set: BTreeSet<AtomId> = atoms.into_iter().collect();
        if set.is_empty() { Err(EmptyAggregate) } else { Ok(Self(Arc::new(set))) }
    }

    /// The aggregate holding one atom.
    pub fn atom(atom: AtomId) -> Self {
        Self(Arc::new(BTreeSet::from([atom])))
    }

    /// The atoms, sorted.
    pub fn atoms(&self) -> &BTreeSet<AtomId> {
        &self.0
    }

    /// The address of the atoms this aggregate shares with its clones: equal for clones of
    /// one aggregate, and never another aggregate's while one of them is alive (so a cache
    /// keyed by it must hold a clone).
    pub(crate) fn shared_address(&self) -> usize {
        Arc::as_ptr(&self.0) as usize
    }

    /// Number of atoms.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Always false: an aggregate is never empty (present for clippy's `len_without_is_empty`).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether `atom` is one of the atoms.
    pub fn contains(&self, atom: &AtomId) -> bool {
        self.0.contains(atom)
    }

    /// Whether the two aggregates share no atom.
    pub fn is_disjoint(&self, other: &Aggregate) -> bool {
        self.0.is_disjoint(&other.0)
    }

    /// Whether every atom of `self` is in `other`.
    pub fn is_subset(&self, other: &Aggregate) -> bool {
        self.0.is_subset(&other.0)
    }

    /// `self ⊕ other` (the union of the atoms; meaningful when the two are disjoint).
    pub fn union(&self, other: &Aggregate) -> Aggregate {
        Aggregate(Arc::new(self.0.union(&other.0).cloned().collect()))
    }

    /// The atoms of `self` not in `other`, or `None` if nothing is left.
    pub fn difference(&self, other: &Aggregate) -> Option<Aggregate> {
        let rest: BTreeSet<AtomId> = self.0.difference(&other.0).cloned().collect();
        if rest.is_empty() { None } else { Some(Aggregate(Arc::new(rest))) }
    }
}

impl PartialEq for Aggregate {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.0 == other.0
    }
}

impl Eq for Aggregate {}

impl Hash for Aggregate {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.hash(state);
    }
}

impl Ord for Aggregate {
    fn cmp(&self, other: &Self) -> Ordering {
        if Arc::ptr_eq(&self.0, &other.0) {
            return Ordering::Equal;
        }
        self.0.len().cmp(&other.0.len()).then_with(|| self.0.cmp(&other.0))
    }
}

impl PartialOrd for Aggregate {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for Aggregate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, atom) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("+")?;
            }
            write!(f, "{atom}")?;
        }
        Ok(())
    }
}

impl From<AtomId> for Aggregate {
    fn from(atom: AtomId) -> Self {
        Aggregate::atom(atom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agg(names: &[&str]) -> Aggregate {
        Aggregate::new(names.iter().map(|n| AtomId::new(n).unwrap())).unwrap()
    }

    #[test]
    fn commutative_and_ordered_by_size() {
        assert_eq!(agg(&["B", "A"]), agg(&["A", "B"]));
        assert_eq!(agg(&["B", "A"]).to_string(), "A+B");
        assert!(agg(&["Z"]) < agg(&["A", "B"]));
        assert!(agg(&["A", "B"]) < agg(&["A", "C"]));
        assert!(Aggregate::new(Vec::new()).is_err());
    }

    #[test]
    fn set_operations() {
        let ab = agg(&["A", "B"]);
        let c = agg(&["C"]);
        assert!(ab.is_disjoint(&c));
        assert_eq!(ab.union(&c), agg(&["A", "B", "C"]));
        assert_eq!(agg(&["A", "B", "C"]).difference(&ab), Some(c.clone()));
        assert_eq!(ab.difference(&ab), None);
        assert!(agg(&["A"]).is_subset(&ab));
    }
}

//! A contraction network: tensors (leaves) whose indices are named, each index's extent, and
//! the indices of the result.

use std::collections::{BTreeMap, BTreeSet};

use thiserror::Error;

/// Why a network is refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum NetworkError {
    /// A network needs at least one tensor.
    #[error("a contraction network needs at least one tensor")]
    Empty,
    /// An index without an extent.
    #[error("index `{index}` of tensor {leaf} has no extent")]
    NoExtent {
        /// The index.
        index: String,
        /// The tensor.
        leaf: usize,
    },
    /// An index of the result that no tensor has.
    #[error("the result's index `{0}` is in no tensor")]
    OutputOnly(String),
    /// A summed index that is not in exactly two tensors: reassociating such a sum is not a
    /// pairwise contraction.
    #[error("index `{index}` is summed but appears in {count} tensors (a summed index must join exactly two)")]
    NotPairwise {
        /// The index.
        index: String,
        /// How many tensors have it.
        count: usize,
    },
}

/// Tensors with named indices contracted into a result: every index of the result is kept,
/// every other index joins exactly two tensors and is summed over when they meet (a matrix
/// chain, a low-rank product `x·(A·B)`, a tensor train). Such a network's pairwise
/// contractions may be done in any order and association with the same result, which is what
/// the rewrites of [`crate::rules`] explore.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Network {
    /// Index names, by index number.
    names: Vec<String>,
    /// Extent of each index.
    extents: Vec<usize>,
    /// Each tensor's indices, in its own order.
    leaves: Vec<Vec<usize>>,
    /// The result's indices, in order.
    output: Vec<usize>,
}

impl Network {
    /// The network of tensors with indices `leaves`, index extents `extents` and result
    /// indices `output`; refused where an index has no extent, the result has an index no
    /// tensor has, or a summed index does not join exactly two tensors.
    pub fn new(leaves: &[&[&str]], extents: &[(&str, usize)], output: &[&str]) -> Result<Self, NetworkError> {
        if leaves.is_empty() {
            return Err(NetworkError::Empty);
        }
        let extent: BTreeMap<&str, usize> = extents.iter().copied().collect();
        let mut names: Vec<String> = Vec::new();
        fn number(names: &mut Vec<String>, name: &str) -> usize {
            match names.iter().position(|n| n == name) {
                Some(i) => i,
                None => {
                    names.push(name.to_string());
                    names.len() - 1
                }
            }
        }
        let mut numbered_leaves = Vec::new();
        for (leaf, indices) in leaves.iter().enumerate() {
            let mut numbered = Vec::new();
            for &index in indices.iter() {
                if !extent.contains_key(index) {
                    return Err(NetworkError::NoExtent { index: index.to_string(), leaf });
                }
                numbered.push(number(&mut names, index));
            }
            numbered_leaves.push(numbered);
        }
        let mut out = Vec::new();
        for &index in output {
            if !names.iter().any(|n| n == index) {
                return Err(NetworkError::OutputOnly(index.to_string()));
            }
            out.push(number(&mut names, index));
        }
        for (i, name) in names.iter().enumerate() {
            let count = numbered_leaves.iter().filter(|l| l.contains(&i)).count();
            if !out.contains(&i) && count != 2 {
                return Err(NetworkError::NotPairwise { index: name.clone(), count });
            }
        }
        let extents = names.iter().map(|n| extent[n.as_str()]).collect();
        Ok(Network { names, extents, leaves: numbered_leaves, output: out })
    }

    /// The number of tensors.
    pub fn leaves(&self) -> usize {
        self.leaves.len()
    }

    /// Tensor `leaf`'s indices, in its order.
    pub fn leaf_indices(&self, leaf: usize) -> &[usize] {
        &self.leaves[leaf]
    }

    /// The result's indices, in order.
    pub fn output(&self) -> &[usize] {
        &self.output
    }

    /// Index `i`'s name.
    pub fn name(&self, i: usize) -> &str {
        &self.names[i]
    }

    /// Index `i`'s extent.
    pub fn extent(&self, i: usize) -> usize {
        self.extents[i]
    }

    /// The number of distinct indices.
    pub fn indices(&self) -> usize {
        self.names.len()
    }

    /// The indices of the contraction of two parts with indices `a` and `b`: those of either
    /// that no other tensor shares (each summed index joins exactly two), and the result's
    /// indices they have.
    pub fn joined(&self, a: &BTreeSet<usize>, b: &BTreeSet<usize>) -> BTreeSet<usize> {
        a.symmetric_difference(b)
            .copied()
            .chain(a.intersection(b).copied().filter(|i| self.output.contains(i)))
            .collect()
    }

    /// The multiply-adds of contracting parts with indices `a` and `b`: the product of the
    /// extents of every index of either, times two (a multiply and an add).
    pub fn flops(&self, a: &BTreeSet<usize>, b: &BTreeSet<usize>) -> f64 {
        2.0 * a.union(b).map(|&i| self.extents[i] as f64).product::<f64>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chain_numbers_its_indices_in_order() {
        let n = Network::new(
            &[&["i", "j"], &["j", "k"], &["k", "l"]],
            &[("i", 2), ("j", 3), ("k", 4), ("l", 5)],
            &["i", "l"],
        )
        .expect("a chain");
        assert_eq!((n.leaves(), n.indices()), (3, 4));
        assert_eq!((n.leaf_indices(1), n.output()), (&[1, 2][..], &[0, 3][..]));
        let set = |v: &[usize]| v.iter().copied().collect::<BTreeSet<_>>();
        // (ij)(jk) -> ik, 2*2*3*4 flops.
        assert_eq!(n.joined(&set(&[0, 1]), &set(&[1, 2])), set(&[0, 2]));
        assert_eq!(n.flops(&set(&[0, 1]), &set(&[1, 2])), 48.0);
    }

    #[test]
    fn networks_that_are_not_pairwise_are_refused() {
        let e = &[("i", 2), ("j", 2)];
        assert_eq!(Network::new(&[], e, &[]), Err(NetworkError::Empty));
        assert_eq!(
            Network::new(&[&["i", "j"], &["j"], &["j"]], e, &["i"]),
            Err(NetworkError::NotPairwise { index: "j".into(), count: 3 })
        );
        assert_eq!(
            Network::new(&[&["i", "j"]], e, &["i"]),
            Err(NetworkError::NotPairwise { index: "j".into(), count: 1 })
        );
        assert_eq!(Network::new(&[&["i", "k"]], e, &["i"]), Err(NetworkError::NoExtent { index: "k".into(), leaf: 0 }));
        assert_eq!(Network::new(&[&["i"]], e, &["j"]), Err(NetworkError::OutputOnly("j".into())));
        // A batch index in the result may be in any number of tensors.
        assert!(Network::new(&[&["b", "i"], &["b", "i"], &["b"]], &[("b", 2), ("i", 2)], &["b"]).is_ok());
    }
}

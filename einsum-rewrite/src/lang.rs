//! The e-graph language of a contraction network: a tensor of the network (`Leaf`), or the
//! pairwise contraction of two parts (`*`), with the indices of every part as the e-class
//! analysis.

use std::collections::BTreeSet;

use egg::{Analysis, DidMerge, EGraph};

use crate::Network;

/// The language's definition (its variants carry no doc comments: `define_language!` takes
/// none, so the enum's says what each is).
mod language {
    #![allow(missing_docs)]

    use egg::{Id, define_language};

    define_language! {
        /// A part of a contraction network: `Leaf(n)`, tensor `n` of the network, or
        /// `Contract([a, b])`, written `(* a b)`, the contraction of parts `a` and `b`
        /// (summing the indices they share that the result does not keep).
        pub enum Contraction {
            "*" = Contract([Id; 2]),
            Leaf(usize),
        }
    }
}

pub use language::Contraction;

/// The e-class analysis: the indices of each part ([`Network::joined`]). Equal parts have
/// equal indices; a rule that merged parts with different indices would be unsound, and
/// [`Indices::conflicts`] counts such merges.
#[derive(Debug, Clone)]
pub struct Indices {
    network: Network,
    conflicts: usize,
}

impl Indices {
    /// The analysis of parts of `network`.
    pub fn new(network: Network) -> Self {
        Indices { network, conflicts: 0 }
    }

    /// The network.
    pub fn network(&self) -> &Network {
        &self.network
    }

    /// How many merges joined parts with different indices (0 under sound rules).
    pub fn conflicts(&self) -> usize {
        self.conflicts
    }
}

impl Analysis<Contraction> for Indices {
    type Data = BTreeSet<usize>;

    fn make(egraph: &mut EGraph<Contraction, Self>, enode: &Contraction) -> Self::Data {
        match enode {
            Contraction::Leaf(n) => egraph.analysis.network.leaf_indices(*n).iter().copied().collect(),
            Contraction::Contract([a, b]) => egraph.analysis.network.joined(&egraph[*a].data, &egraph[*b].data),
        }
    }

    fn merge(&mut self, a: &mut Self::Data, b: Self::Data) -> DidMerge {
        if *a != b {
            self.conflicts += 1;
        }
        DidMerge(false, false)
    }
}

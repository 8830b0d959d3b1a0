//! One form of a contraction network: a binary tree of pairwise contractions, and the einsum
//! steps that compute it.

use std::{collections::BTreeSet, fmt};

use egg::{Id, RecExpr};
use thiserror::Error;

use crate::{Contraction, Cost, Network};

/// A form of a network: tensor `n`, or the contraction of two forms.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Tree {
    /// Tensor `n` of the network.
    Leaf(usize),
    /// The contraction of two parts.
    Contract(Box<Tree>, Box<Tree>),
}

/// An operand of a [`Step`]: a tensor of the network, or an earlier step's result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operand {
    /// Tensor `n` of the network.
    Leaf(usize),
    /// The result of step `n`.
    Step(usize),
}

/// One pairwise contraction, as an einsum over single-letter index names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// Its two operands.
    pub operands: [Operand; 2],
    /// Its equation, `ij,jk->ik` (the operands' letters in their own index order).
    pub equation: String,
    /// Its result's indices, in order (the network's result order for the last step).
    pub indices: Vec<usize>,
}

/// Why a form cannot be written as einsum steps.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum StepError {
    /// A step over more distinct indices than einsum letters (`a`-`z`, `A`-`Z`).
    #[error("a step over {0} indices, but einsum equations have 52 letters")]
    TooManyIndices(usize),
    /// A leaf the network does not have.
    #[error("tensor {leaf} is not in a network of {leaves}")]
    NoSuchLeaf {
        /// The leaf.
        leaf: usize,
        /// The network's tensors.
        leaves: usize,
    },
}

impl Tree {
    /// The chain `((0 1) 2) ...` of tensors `0..n`, contracted left to right.
    pub fn left_to_right(n: usize) -> Tree {
        (1..n).fold(Tree::Leaf(0), |acc, i| Tree::Contract(Box::new(acc), Box::new(Tree::Leaf(i))))
    }

    /// Every parenthesisation of tensors `lo..hi` in their order (a chain's associations;
    /// Catalan(`hi - lo - 1`) of them): what an exhaustive comparison enumerates.
    pub fn associations(lo: usize, hi: usize) -> Vec<Tree> {
        if hi <= lo + 1 {
            return (lo..hi).map(Tree::Leaf).collect();
        }
        let mut out = Vec::new();
        for split in lo + 1..hi {
            for a in Tree::associations(lo, split) {
                for b in Tree::associations(split, hi) {
                    out.push(Tree::Contract(Box::new(a.clone()), Box::new(b)));
                }
            }
        }
        out
    }

    /// The same form with every contraction's operands in order (forms equal up to the
    /// order of operands have one canonical form).
    pub fn canonical(self) -> Tree {
        match self {
            Tree::Leaf(n) => Tree::Leaf(n),
            Tree::Contract(a, b) => {
                let (a, b) = (a.canonical(), b.canonical());
                if a <= b { Tree::Contract(Box::new(a), Box::new(b)) } else { Tree::Contract(Box::new(b), Box::new(a)) }
            }
        }
    }

    /// The indices of this part of `network`.
    pub fn indices(&self, network: &Network) -> BTreeSet<usize> {
        match self {
            Tree::Leaf(n) => network.leaf_indices(*n).iter().copied().collect(),
            Tree::Contract(a, b) => network.joined(&a.indices(network), &b.indices(network)),
        }
    }

    /// The flops of every contraction of this form ([`Network::flops`]).
    pub fn flops(&self, network: &Network) -> f64 {
        self.cost(network, &Cost::FLOPS)
    }

    /// The cost of every contraction of this form ([`Cost::contraction`]).
    pub fn cost(&self, network: &Network, cost: &Cost) -> f64 {
        match self {
            Tree::Leaf(_) => 0.0,
            Tree::Contract(a, b) => {
                let own = cost.contraction(network, &a.indices(network), &b.indices(network));
                a.cost(network, cost) + b.cost(network, cost) + own
            }
        }
    }

    /// The form as an e-graph expression.
    pub fn to_expr(&self) -> RecExpr<Contraction> {
        fn add(t: &Tree, e: &mut RecExpr<Contraction>) -> Id {
            match t {
                Tree::Leaf(n) => e.add(Contraction::Leaf(*n)),
                Tree::Contract(a, b) => {
                    let (a, b) = (add(a, e), add(b, e));
                    e.add(Contraction::Contract([a, b]))
                }
            }
        }
        let mut e = RecExpr::default();
        add(self, &mut e);
        e
    }

    /// The einsum steps that compute this form of `network`, children before parents; the
    /// last step's result has the network's result indices, in its order.
    pub fn steps(&self, network: &Network) -> Result<Vec<Step>, StepError> {
        let mut steps = Vec::new();
        if let Tree::Leaf(n) = self {
            // A network of one tensor: one step would be a transpose; none is needed.
            return if *n < network.leaves() {
                Ok(steps)
            } else {
                Err(StepError::NoSuchLeaf { leaf: *n, leaves: network.leaves() })
            };
        }
        self.push_steps(network, &mut steps, true)?;
        Ok(steps)
    }

    /// Pushes the steps of this part; returns its operand and its indices in order.
    fn push_steps(
        &self,
        network: &Network,
        steps: &mut Vec<Step>,
        last: bool,
    ) -> Result<(Operand, Vec<usize>), StepError> {
        match self {
            Tree::Leaf(n) if *n < network.leaves() => Ok((Operand::Leaf(*n), network.leaf_indices(*n).to_vec())),
            Tree::Leaf(n) => Err(StepError::NoSuchLeaf { leaf: *n, leaves: network.leaves() }),
            Tree::Contract(a, b) => {
                let (oa, ia) = a.push_steps(network, steps, false)?;
                let (ob, ib) = b.push_steps(network, steps, false)?;
                let indices: Vec<usize> =
                    if last { network.output().to_vec() } else { self.indices(network).into_iter().collect() };
                // Letters for this step's indices alone (in order of first appearance), so a
                // network may have any number of indices.
                let mut used: Vec<usize> = Vec::new();
                for &i in ia.iter().chain(&ib).chain(&indices) {
                    if !used.contains(&i) {
                        used.push(i);
                    }
                }
                if used.len() > 52 {
                    return Err(StepError::TooManyIndices(used.len()));
                }
                let letters = |ix: &[usize]| {
                    ix.iter().map(|i| letter(used.iter().position(|u| u == i).expect("used"))).collect::<String>()
                };
                let equation = format!("{},{}->{}", letters(&ia), letters(&ib), letters(&indices));
                steps.push(Step { operands: [oa, ob], equation, indices: indices.clone() });
                Ok((Operand::Step(steps.len() - 1), indices))
            }
        }
    }
}

/// The einsum letter number `i` (`a`-`z`, then `A`-`Z`; `i < 52`).
fn letter(i: usize) -> char {
    if i < 26 { (b'a' + i as u8) as char } else { (b'A' + (i - 26) as u8) as char }
}

impl fmt::Display for Tree {
    /// Tensors by number, contractions in parentheses: `((t0 t1) t2)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Tree::Leaf(n) => write!(f, "t{n}"),
            Tree::Contract(a, b) => write!(f, "({a} {b})"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chain() -> Network {
        Network::new(
            &[&["i", "j"], &["j", "k"], &["k", "l"]],
            &[("i", 10), ("j", 100), ("k", 5), ("l", 50)],
            &["i", "l"],
        )
        .expect("a chain")
    }

    #[test]
    fn a_chain_costs_what_its_association_costs() {
        let n = chain();
        let left = Tree::left_to_right(3);
        assert_eq!(left.to_string(), "((t0 t1) t2)");
        // (10x100)(100x5): 2*10*100*5 = 10000; then (10x5)(5x50): 2*10*5*50 = 5000.
        assert_eq!(left.flops(&n), 15000.0);
        let right = Tree::Contract(
            Box::new(Tree::Leaf(0)),
            Box::new(Tree::Contract(Box::new(Tree::Leaf(1)), Box::new(Tree::Leaf(2)))),
        );
        // (100x5)(5x50): 50000; then (10x100)(100x50): 100000.
        assert_eq!(right.flops(&n), 150000.0);
        let steps = left.steps(&n).expect("steps");
        // Each step names its own indices: the second reads i, k (as a, b) and k, l.
        assert_eq!(steps.iter().map(|s| s.equation.as_str()).collect::<Vec<_>>(), ["ab,bc->ac", "ab,bc->ac"]);
        assert_eq!(steps[1].operands, [Operand::Step(0), Operand::Leaf(2)]);
        let steps = right.steps(&n).expect("steps");
        assert_eq!(steps.iter().map(|s| s.equation.as_str()).collect::<Vec<_>>(), ["ab,bc->ac", "ab,bc->ac"]);
        assert_eq!((steps[0].indices.clone(), steps[1].indices.clone()), (vec![1, 3], vec![0, 3]));
        assert_eq!(steps[1].operands, [Operand::Leaf(0), Operand::Step(0)]);
    }

    #[test]
    fn canonical_forms_order_operands() {
        let t = Tree::Contract(
            Box::new(Tree::Leaf(2)),
            Box::new(Tree::Contract(Box::new(Tree::Leaf(1)), Box::new(Tree::Leaf(0)))),
        );
        assert_eq!(t.canonical().to_string(), "(t2 (t0 t1))");
        assert_eq!(Tree::Leaf(3).steps(&chain()), Err(StepError::NoSuchLeaf { leaf: 3, leaves: 3 }));
    }
}

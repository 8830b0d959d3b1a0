//! Equality saturation of a network's form under rules, and the `k` cheapest forms of the
//! saturated e-graph.

use std::collections::{HashMap, HashSet};

use egg::{Id, Runner, StopReason};
use thiserror::Error;

use crate::{Contraction, Cost, Indices, Network, Rule, Tree};

/// Bounds on the saturation, in e-graph nodes and rule iterations (not wall time, so that
/// the forms found are the same on every machine).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The most e-nodes.
    pub nodes: usize,
    /// The most iterations of the rules.
    pub iterations: usize,
}

impl Default for Limits {
    /// 10 000 e-nodes, 30 iterations: every association of a chain of 30 tensors under association alone.
    fn default() -> Self {
        Limits { nodes: 10_000, iterations: 30 }
    }
}

/// Why no forms were found.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum FormsError {
    /// The start form uses a tensor the network does not have.
    #[error("the form {form} uses tensor {leaf}, but the network has {leaves}")]
    NoSuchLeaf {
        /// The form.
        form: String,
        /// The tensor.
        leaf: usize,
        /// The network's tensors.
        leaves: usize,
    },
    /// The rules merged parts with different indices: at least one rule is unsound.
    #[error("the rules merged {0} pairs of parts with different indices: a rule is unsound")]
    Unsound(usize),
}

/// What saturation found: the cheapest forms, and how far it went.
#[derive(Debug, Clone, PartialEq)]
pub struct Forms {
    /// At most `k` forms, cheapest first ([`Tree::cost`]), distinct up to the order of each
    /// contraction's operands ([`Tree::canonical`]).
    pub trees: Vec<(f64, Tree)>,
    /// The e-graph's nodes at the end.
    pub nodes: usize,
    /// The iterations run.
    pub iterations: usize,
    /// Whether the rules had nothing left to add (every form reachable was found).
    pub saturated: bool,
}

/// Saturates `start`, a form of `network`, under `rules` within `limits`, and extracts the
/// `k` cheapest forms by flops ([`forms_by`] with [`Cost::FLOPS`]).
pub fn forms(network: &Network, start: &Tree, rules: &[Rule], k: usize, limits: Limits) -> Result<Forms, FormsError> {
    forms_by(network, start, rules, k, limits, Cost::FLOPS)
}

/// [`forms`], extracting the `k` cheapest forms by `cost`.
pub fn forms_by(
    network: &Network,
    start: &Tree,
    rules: &[Rule],
    k: usize,
    limits: Limits,
    cost: Cost,
) -> Result<Forms, FormsError> {
    let leaves = network.leaves();
    check_leaves(start, leaves).map_err(|leaf| FormsError::NoSuchLeaf { form: start.to_string(), leaf, leaves })?;
    let runner: Runner<Contraction, Indices> = Runner::new(Indices::new(network.clone()))
        .with_node_limit(limits.nodes)
        .with_iter_limit(limits.iterations)
        .with_expr(&start.to_expr())
        .run(rules);
    let conflicts = runner.egraph.analysis.conflicts();
    if conflicts > 0 {
        return Err(FormsError::Unsound(conflicts));
    }
    let root = runner.egraph.find(runner.roots[0]);
    let mut best = Best { egraph: &runner.egraph, k, cost, memo: HashMap::new(), visiting: HashSet::new() };
    let trees = best.trees(root);
    Ok(Forms {
        trees,
        nodes: runner.egraph.total_number_of_nodes(),
        iterations: runner.iterations.len(),
        saturated: matches!(runner.stop_reason, Some(StopReason::Saturated)),
    })
}

/// The first tensor of `tree` outside `0..leaves`, if any.
fn check_leaves(tree: &Tree, leaves: usize) -> Result<(), usize> {
    match tree {
        Tree::Leaf(n) if *n >= leaves => Err(*n),
        Tree::Leaf(_) => Ok(()),
        Tree::Contract(a, b) => check_leaves(a, leaves).and_then(|()| check_leaves(b, leaves)),
    }
}

/// One of an e-class's cheapest forms, without its tree: its cost, a hash of its canonical
/// form (forms equal up to operand order hash alike), and how it is made.
#[derive(Clone, Copy)]
struct Candidate {
    cost: f64,
    hash: u64,
    made: Made,
}

/// How a candidate is made: a leaf, or a contraction of the `.1`-th candidate of class `.0`
/// and the `.3`-th of class `.2`.
#[derive(Clone, Copy)]
enum Made {
    Leaf(usize),
    Contract(Id, usize, Id, usize),
}

/// The `k` cheapest forms of each e-class, computed once per class as candidates (a cost, a
/// hash and two child ranks each, so combining children costs no tree copies); trees are
/// built for the root's alone.
struct Best<'a> {
    egraph: &'a egg::EGraph<Contraction, Indices>,
    k: usize,
    cost: Cost,
    memo: HashMap<Id, Vec<Candidate>>,
    /// The classes being computed: a node leading back to one is skipped (a cycle's forms
    /// are never the cheapest).
    visiting: HashSet<Id>,
}

impl Best<'_> {
    /// The cheapest forms of `class`, cheapest first (ties by tree), distinct up to operand
    /// order.
    fn trees(&mut self, class: Id) -> Vec<(f64, Tree)> {
        let class = self.egraph.find(class);
        let mut out: Vec<(f64, Tree)> =
            self.of(class).iter().map(|c| (c.cost, self.tree(c.made).canonical())).collect();
        out.sort_by(|x, y| x.0.total_cmp(&y.0).then_with(|| x.1.cmp(&y.1)));
        out
    }

    /// The tree a candidate is made of.
    fn tree(&self, made: Made) -> Tree {
        match made {
            Made::Leaf(n) => Tree::Leaf(n),
            Made::Contract(a, ra, b, rb) => {
                let (ca, cb) = (self.memo[&a][ra], self.memo[&b][rb]);
                Tree::Contract(Box::new(self.tree(ca.made)), Box::new(self.tree(cb.made)))
            }
        }
    }

    fn of(&mut self, class: Id) -> Vec<Candidate> {
        let class = self.egraph.find(class);
        if let Some(found) = self.memo.get(&class) {
            return found.clone();
        }
        if !self.visiting.insert(class) {
            return Vec::new();
        }
        let network = self.egraph.analysis.network();
        let mut found: Vec<Candidate> = Vec::new();
        for node in &self.egraph[class].nodes {
            match node {
                Contraction::Leaf(n) => found.push(Candidate {
                    cost: 0.0,
                    hash: mix(0x9e37_79b9_7f4a_7c15, *n as u64),
                    made: Made::Leaf(*n),
                }),
                Contraction::Contract([a, b]) => {
                    let (a, b) = (self.egraph.find(*a), self.egraph.find(*b));
                    let (ta, tb) = (self.of(a), self.of(b));
                    let own = self.cost.contraction(network, &self.egraph[a].data, &self.egraph[b].data);
                    for (ra, x) in ta.iter().enumerate() {
                        for (rb, y) in tb.iter().enumerate() {
                            let (lo, hi) = (x.hash.min(y.hash), x.hash.max(y.hash));
                            found.push(Candidate {
                                cost: x.cost + y.cost + own,
                                hash: mix(mix(0x2545_f491_4f6c_dd1d, lo), hi),
                                made: Made::Contract(a, ra, b, rb),
                            });
                        }
                    }
                }
            }
        }
        found.sort_by(|x, y| x.cost.total_cmp(&y.cost).then(x.hash.cmp(&y.hash)));
        found.dedup_by(|x, y| x.hash == y.hash);
        found.truncate(self.k);
        self.visiting.remove(&class);
        self.memo.insert(class, found.clone());
        found
    }
}

/// A 64-bit mix of `h` and `v` (SplitMix64's finaliser over their sum): the hash of a form
/// from its parts'.
fn mix(h: u64, v: u64) -> u64 {
    let mut z = h.wrapping_add(v).wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

//! Equality saturation of a network's form under rules, and the `k` cheapest forms of the
//! saturated e-graph.

use std::collections::{HashMap, HashSet};

use egg::{Id, Runner, StopReason};
use thiserror::Error;

use crate::{Contraction, Indices, Network, Rule, Tree};

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
    /// 20 000 e-nodes, 30 iterations: every association of a chain of 10 tensors.
    fn default() -> Self {
        Limits { nodes: 20_000, iterations: 30 }
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
    /// At most `k` forms, cheapest first ([`Tree::flops`]), distinct up to the order of each
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
/// `k` cheapest forms by flops.
pub fn forms(network: &Network, start: &Tree, rules: &[Rule], k: usize, limits: Limits) -> Result<Forms, FormsError> {
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
    let mut best = Best { egraph: &runner.egraph, k, memo: HashMap::new(), visiting: HashSet::new() };
    let trees = best.of(root);
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

/// The `k` cheapest forms of each e-class, computed once per class.
struct Best<'a> {
    egraph: &'a egg::EGraph<Contraction, Indices>,
    k: usize,
    memo: HashMap<Id, Vec<(f64, Tree)>>,
    /// The classes being computed: a node leading back to one is skipped (a cycle's forms
    /// are never the cheapest).
    visiting: HashSet<Id>,
}

impl Best<'_> {
    fn of(&mut self, class: Id) -> Vec<(f64, Tree)> {
        let class = self.egraph.find(class);
        if let Some(found) = self.memo.get(&class) {
            return found.clone();
        }
        if !self.visiting.insert(class) {
            return Vec::new();
        }
        let network = self.egraph.analysis.network();
        let mut found: Vec<(f64, Tree)> = Vec::new();
        for node in &self.egraph[class].nodes {
            match node {
                Contraction::Leaf(n) => found.push((0.0, Tree::Leaf(*n))),
                Contraction::Contract([a, b]) => {
                    let (ta, tb) = (self.of(*a), self.of(*b));
                    let own = network.flops(&self.egraph[*a].data, &self.egraph[*b].data);
                    for (ca, fa) in &ta {
                        for (cb, fb) in &tb {
                            let tree = Tree::Contract(Box::new(fa.clone()), Box::new(fb.clone())).canonical();
                            found.push((ca + cb + own, tree));
                        }
                    }
                }
            }
        }
        found.sort_by(|x, y| x.0.total_cmp(&y.0).then_with(|| x.1.cmp(&y.1)));
        found.dedup_by(|x, y| x.1 == y.1);
        found.truncate(self.k);
        self.visiting.remove(&class);
        self.memo.insert(class, found.clone());
        found
    }
}

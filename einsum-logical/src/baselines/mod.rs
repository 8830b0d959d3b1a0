//! Hand-designed baseline strategies: the fixed plans of the systems Section 6 compares
//! against, expressed as choices among the same join-agg candidates, so that they are
//! priced, compiled, simulated and run exactly like the optimizers' plans.
//!
//! - [`Data`] (`data`): PyTorch-style data parallelism (Section 6, Experiment 1), and row
//!   sharding on graphs without tokens (Experiment 2's JAX/PyTorch matrix chains).
//! - [`Megatron`] (`megatron`): Megatron-LM tensor parallelism with sequence parallelism.
//! - [`Ulysses`] (`ulysses`): DeepSpeed-Ulysses: tokens outside attention, heads inside.
//! - [`Mesh2d`] (`mesh2d`): the best plan that maps whole indices onto a 2-D device mesh
//!   (Alpa, GSPMD).
//!
//! The first three are rules on roles (below). A rule lists, per operator, the shardable
//! indices it wants split, in order, each "as far as possible" (up to an optional cap);
//! [`pick`] completes that list with the operator's output dimensions and then its other
//! shardable indices, and takes the candidate whose interval counts, read in that order,
//! are lexicographically largest. So the first wanted index receives the largest factor of
//! `p` it can hold, the remaining factor goes to the next one, and so on: where a rule
//! cannot be met exactly (an extent smaller than `p`, fewer key/value heads than devices),
//! the fallback is deterministic and stated by the list. Candidates are matched by all the
//! counts that request their spec ([`Candidate::all_counts`]), so a spec that enumeration
//! listed under another name (query blocks that coincide with packed sequences) is found.
//!
//! # Roles, not names
//! The rules read roles ([`IndexRole`], [`OpRole`]), never index names or operator kinds:
//! the token index ([`IndexRole::Tokens`]), attention's query blocks
//! ([`IndexRole::QueryBlocks`]), the key/value and query heads ([`IndexRole::HeadsKv`],
//! [`IndexRole::HeadsQ`]), the FFN hidden index ([`IndexRole::FfnHidden`]) and attention
//! itself ([`OpRole::Attention`]), as [`OpProblem::index_with_role`] and
//! [`OpProblem::op_role`] give them. Attention declares its own (sequence, query blocks,
//! both head indices, and that it is attention); the graph's builder declares the rest
//! (`Computation::declare_role`, the driver's `Graph::role`): the named workloads declare
//! `d_ff` as the FFN hidden index and, for the FFN alone, `tokens` as the token index. A
//! role is recorded per index name for the whole graph, so attention's head indices reach
//! the projections that share their names.
//!
//! # Without roles
//! What a rule does where the role it reads is not declared, deterministically:
//! - `data`: an operator with no [`IndexRole::Tokens`] index splits the row index of its
//!   output (the first dimension of its first output), as on a matrix chain; attention
//!   (which always declares its roles) is unaffected.
//! - `megatron`: operators with none of the tensor-parallel roles follow the `data` rule;
//!   a graph where no operator has one is refused with [`Error::Baseline`] naming the
//!   roles it looked for (declare them, or use `data` or `mesh2d`).
//! - `ulysses`: a graph with no [`OpRole::Attention`] operator is refused with
//!   [`Error::Baseline`].
//! - `mesh2d` reads no roles.

mod data;
mod megatron;
mod mesh2d;
mod ulysses;

pub use data::Data;
pub use megatron::Megatron;
pub use mesh2d::Mesh2d;
pub use ulysses::Ulysses;

use crate::{Candidate, Error, IndexRole, OpProblem, OpRole, Problem, Result};

/// One entry of a rule: split `index` into as many intervals as possible, at most `cap`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Want {
    /// The shardable index.
    pub index: String,
    /// The most intervals the rule allows on it.
    pub cap: usize,
}

impl Want {
    /// Split `index` as far as the device count allows.
    pub fn all(index: &str) -> Self {
        Self { index: index.to_string(), cap: usize::MAX }
    }

    /// Split `index` into at most `cap` intervals.
    pub fn at_most(index: &str, cap: usize) -> Self {
        Self { index: index.to_string(), cap }
    }
}

/// The largest divisor of `p` that is at most `max` (1 when `max` is 0).
pub(crate) fn largest_divisor(p: usize, max: usize) -> usize {
    (1..=p.min(max)).rev().find(|d| p.is_multiple_of(*d)).unwrap_or(1)
}

/// True when the operator declares it is attention ([`OpRole::Attention`]).
pub(crate) fn is_attention(op: &OpProblem) -> bool {
    op.is(OpRole::Attention)
}

/// "Split the index with `role` as far as possible", when the operator has one.
pub(crate) fn want_all(op: &OpProblem, role: IndexRole) -> Option<Want> {
    op.index_with_role(role).map(Want::all)
}

/// How attention splits its sequence rows into `parts`: by whole packed sequences (its
/// [`IndexRole::Tokens`] index) when their number is a multiple of `parts` (each part gets
/// the same number of sequences), else by query blocks ([`IndexRole::QueryBlocks`]) that
/// gather all keys and values (the `data` rule of Section 6).
pub(crate) fn sequence_rows(op: &OpProblem, parts: usize) -> Vec<Want> {
    let sequences = op.position_with_role(IndexRole::Tokens).map_or(1, |i| op.max_parts[i]);
    let order = if parts > 1 && sequences.is_multiple_of(parts) {
        [IndexRole::Tokens, IndexRole::QueryBlocks]
    } else {
        [IndexRole::QueryBlocks, IndexRole::Tokens]
    };
    order.into_iter().filter_map(|role| want_all(op, role)).collect()
}

/// The data-parallel rule for one operator on `p` devices (see [`Data`]).
pub(crate) fn data_rule(op: &OpProblem, p: usize) -> Vec<Want> {
    if is_attention(op) {
        sequence_rows(op, p)
    } else if let Some(tokens) = want_all(op, IndexRole::Tokens) {
        vec![tokens]
    } else {
        op.output_dims.first().and_then(|d| d.first()).map(|row| vec![Want::all(row)]).unwrap_or_default()
    }
}

/// Where an operator is, for error messages.
pub(crate) fn at(op: &OpProblem) -> String {
    format!("operator `{}` ({})", op.name, op.kind)
}

/// The order in which [`pick`] reads an operator's counts: the wanted indices the operator
/// has (first occurrence), then its output dimensions, then its other shardable indices.
fn order(op: &OpProblem, wants: &[Want]) -> Vec<(usize, usize)> {
    let mut order: Vec<(usize, usize)> = Vec::with_capacity(op.shardable.len());
    let mut push = |i: usize, cap: usize| {
        if !order.iter().any(|&(j, _)| j == i) {
            order.push((i, cap));
        }
    };
    for w in wants {
        if let Some(i) = op.index_of(&w.index) {
            push(i, w.cap);
        }
    }
    for name in op.output_dims.iter().flatten() {
        if let Some(i) = op.index_of(name) {
            push(i, usize::MAX);
        }
    }
    for i in 0..op.shardable.len() {
        push(i, usize::MAX);
    }
    order
}

/// The rank of one count vector under `order`: whether every cap holds, then the counts in
/// order (larger is preferred).
fn rank(counts: &[usize], order: &[(usize, usize)]) -> (bool, Vec<usize>) {
    let within = order.iter().all(|&(i, cap)| counts.get(i).is_some_and(|&c| c <= cap));
    (within, order.iter().map(|&(i, _)| counts.get(i).copied().unwrap_or(1)).collect())
}

/// The best rank of a candidate over every count vector that requests its spec.
fn best_rank(cand: &Candidate, order: &[(usize, usize)]) -> (bool, Vec<usize>) {
    cand.all_counts().map(|c| rank(c, order)).max().unwrap_or((false, Vec::new()))
}

/// The candidate of `op` that the rule `wants` picks: the one whose counts, read in
/// [`order`], are lexicographically largest among those within every cap (or among all,
/// when none is); ties go to the lowest candidate index. Fails, naming the strategy and the
/// operator, only when the operator has no candidate at all.
pub(crate) fn pick(strategy: &'static str, op: &OpProblem, wants: &[Want]) -> Result<usize> {
    let order = order(op, wants);
    let mut best: Option<((bool, Vec<usize>), usize)> = None;
    for (n, cand) in op.candidates.iter().enumerate() {
        let r = best_rank(cand, &order);
        if best.as_ref().is_none_or(|(b, _)| r > *b) {
            best = Some((r, n));
        }
    }
    best.map(|(_, n)| n).ok_or_else(|| Error::Baseline {
        strategy,
        at: at(op),
        reason: "it offers no candidate spec".to_string(),
    })
}

/// Applies a per-operator rule to every operator of `problem`.
pub(crate) fn solve_by_rule(
    strategy: &'static str,
    problem: &Problem,
    rule: impl Fn(&OpProblem) -> Vec<Want>,
) -> Result<Vec<usize>> {
    problem.ops.iter().map(|op| pick(strategy, op, &rule(op))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn largest_divisors() {
        assert_eq!(largest_divisor(8, 3), 2);
        assert_eq!(largest_divisor(8, 8), 8);
        assert_eq!(largest_divisor(8, 100), 8);
        assert_eq!(largest_divisor(6, 4), 3);
        assert_eq!(largest_divisor(7, 0), 1);
        assert_eq!(largest_divisor(1, 5), 1);
    }

    #[test]
    fn ranks_prefer_caps_then_the_first_wanted_index() {
        // Indices a, b, c; wanted: b (at most 2), then a.
        let order = vec![(1, 2), (0, usize::MAX), (2, usize::MAX)];
        assert!(rank(&[2, 2, 1], &order) > rank(&[4, 1, 1], &order));
        assert!(rank(&[1, 2, 2], &order) < rank(&[2, 2, 1], &order));
        // b = 4 breaks the cap: below everything within it.
        assert!(rank(&[1, 4, 1], &order) < rank(&[1, 1, 4], &order));
    }
}

//! Transposes absorbed: a single-operand einsum that only permutes its operand (`ij->ji`: no
//! index summed, none repeated) is the identity on named indices, since operators bind their
//! operands by index name. Where its result is read by one einsum of a contraction network
//! alone and not saved, the network takes the permute's operand as its tensor and the rebuilt
//! form reads it directly: one copy kernel and its buffer fewer. Likewise a permute that
//! alone reads a network's result (unsaved) is folded into the network's last einsum, whose
//! output is then written in the permute's order. The rebuilt result keeps the written
//! output's dimension order exactly.

use std::collections::HashSet;

use einsum_joinagg::{Computation, Node, OpId, TensorId};

use super::named_terms;

/// The rule that absorbs permutes into the contraction networks that read them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Absorb {
    /// Its name in reports ([`Change::rule`](super::Change) of each permute absorbed).
    pub name: String,
    /// Whether a permute of a network's result is folded into its last einsum too.
    pub roots: bool,
}

impl Absorb {
    /// Permutes absorbed into the einsums that read them and folded into the einsums whose
    /// result they permute.
    pub fn transposes() -> Self {
        Absorb { name: "transpose".into(), roots: true }
    }
}

impl Default for Absorb {
    fn default() -> Self {
        Absorb::transposes()
    }
}

/// The operand of `op` where `op` is a permute: a single-operand einsum whose letters bind
/// one index name each, whose result has exactly its operand's letters, each once.
pub(super) fn permuted(comp: &Computation, op: OpId) -> Option<TensorId> {
    let (einsum, inputs) = named_terms(comp, op)?;
    let [input] = inputs[..] else { return None };
    let (term, out) = einsum.equation().split_once("->")?;
    let (a, b): (HashSet<char>, HashSet<char>) = (term.chars().collect(), out.chars().collect());
    let permutes = a == b && a.len() == term.chars().count() && b.len() == out.chars().count();
    permutes.then_some(input)
}

/// Where tensor `t` is a permute's result read by `reader` alone and not saved: the
/// permute and its operand (the tensor a network reads in its place).
pub(super) fn leaf(comp: &Computation, t: TensorId, saved: &[TensorId]) -> Option<(OpId, TensorId)> {
    if t.output != 0 || saved.contains(&t) || comp.consumers(t).len() != 1 {
        return None;
    }
    Some((t.op, permuted(comp, t.op)?))
}

/// Where the result of `root` (a network's last einsum) is read by a permute alone and not
/// saved, and that permute's result is no tensor a network absorbs ([`leaf`], for
/// `absorbs_leaf`): the permute, whose output order the network's result takes.
pub(super) fn root(
    comp: &Computation,
    root: OpId,
    saved: &[TensorId],
    absorbs_leaf: &dyn Fn(TensorId) -> bool,
) -> Option<OpId> {
    let t = TensorId { op: root, output: 0 };
    let readers = comp.consumers(t);
    if saved.contains(&t) || readers.len() != 1 {
        return None;
    }
    let p = readers[0].0;
    let out = TensorId { op: p, output: 0 };
    let one_output = matches!(comp.node(p), Some(Node::Op { op, .. }) if op.outputs().len() == 1);
    (one_output && permuted(comp, p).is_some() && !absorbs_leaf(out)).then_some(p)
}

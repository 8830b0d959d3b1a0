//! Elementwise fusion into the einsum that produces its input, as a rule value
//! ([`Fuse`]): an einsum whose result only an elementwise chain reads (a unary, or a binary
//! whose other operand is laid out as the result) becomes one [`Epilogue`] operator, with no
//! buffer for the einsum's result and one kernel for the whole chain (`silu(x·W_gate) · up`,
//! `h + o·W_o`). The fused operator's specs never split a contracted index unless the chain
//! only adds a tensor (a residual), so fusion can cost a plan its best decomposition: the
//! fused form is weighed by whole-plan prediction like every other form
//! ([`super::fastest_form`]).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use einsum_joinagg::{AbstractOperator, Computation, Node, OpId, TensorId};
use einsum_ops::binary::Binary;
use einsum_ops::einsum::Einsum;
use einsum_ops::epilogue::{Epilogue, Stage};
use einsum_ops::unary::Unary;

use super::Change;
use crate::{Graph, Result, Tensor};

/// The fusion rule, as a value: its name (in [`Change::rule`]) and how many elementwise
/// operators one einsum takes in at most.
#[derive(Clone, Debug)]
pub struct Fuse {
    /// The rule's name.
    pub name: String,
    /// The longest chain fused into one einsum.
    pub max_stages: usize,
}

impl Fuse {
    /// Elementwise chains of up to four operators fused into the einsum producing their input.
    pub fn epilogues() -> Fuse {
        Fuse { name: "epilogue".into(), max_stages: 4 }
    }

    /// The sites of `comp`: every einsum whose result (not saved) is read only by a unary or
    /// an aligned binary, with the chain of such operators that follows, each reading the
    /// previous one's result (its only reader, not saved). Sites are disjoint: an operator
    /// joins the chain of the first einsum (in topological order) reaching it.
    pub fn sites(&self, comp: &Computation) -> Vec<Site> {
        let saved = comp.saved();
        // The one reader of `t` and the slot it reads it in, where `t` is not saved.
        let single_reader = |t: TensorId| match comp.consumers(t)[..] {
            [(op, slot)] if !saved.contains(&t) => Some((op, slot)),
            _ => None,
        };
        let mut sites = Vec::new();
        // Operators already in a site: a product of two einsums' results (SwiGLU's) joins
        // the first einsum's chain only.
        let mut claimed: HashSet<OpId> = HashSet::new();
        for op in comp.topo_order() {
            let Some(Node::Op { op: o, .. }) = comp.node(op) else { continue };
            if (o.as_ref() as &dyn std::any::Any).downcast_ref::<Einsum>().is_none() || o.outputs().len() != 1 {
                continue;
            }
            let mut ops = Vec::new();
            let mut stages = Vec::new();
            let mut operands = Vec::new();
            let mut t = TensorId { op, output: 0 };
            while ops.len() < self.max_stages {
                let Some((reader, slot)) = single_reader(t).filter(|(r, _)| !claimed.contains(r)) else { break };
                let Some((stage, operand)) = stage(comp, reader, slot) else { break };
                ops.push(reader);
                stages.push(stage);
                operands.extend(operand);
                t = TensorId { op: reader, output: 0 };
            }
            if !ops.is_empty() {
                claimed.extend(ops.iter().copied());
                sites.push(Site { einsum: op, ops, stages, operands });
            }
        }
        sites
    }
}

/// The stage of elementwise operator `op` reading the running result in input `slot`, and
/// the other operand of a binary: `None` where `op` is no unary or aligned binary (one whose
/// operands are laid out as its result: no broadcast, no transposition) or reads the result
/// twice.
fn stage(comp: &Computation, op: OpId, slot: usize) -> Option<(Stage, Option<TensorId>)> {
    let Some(Node::Op { op: o, inputs, .. }) = comp.node(op) else { return None };
    let any = o.as_ref() as &dyn std::any::Any;
    if let Some(u) = any.downcast_ref::<Unary>() {
        return Some((Stage::Unary(u.op()), None));
    }
    let b = any.downcast_ref::<Binary>()?;
    let y = &b.outputs()[0];
    let other = inputs[1 - slot];
    if b.inputs().iter().any(|d| d != y) || other == inputs[slot] {
        return None;
    }
    Some((Stage::Binary { op: b.op(), operand: y.clone(), result_first: slot == 0 }, Some(other)))
}

/// An einsum and the elementwise chain fused into it.
#[derive(Clone, Debug, PartialEq)]
pub struct Site {
    /// The einsum.
    pub einsum: OpId,
    /// The chain's operators, in order: the last one's result is the fused operator's.
    pub ops: Vec<OpId>,
    /// Their stages.
    pub stages: Vec<Stage>,
    /// The binary stages' other operands, in order.
    pub operands: Vec<TensorId>,
}

impl Site {
    /// What the site computes as written: the einsum's result and the chain
    /// (`` `einsum #3` then silu, mul ``).
    pub fn describe(&self, comp: &Computation) -> String {
        let chain: Vec<&str> = self
            .stages
            .iter()
            .map(|s| match s {
                Stage::Unary(op) => op.name(),
                Stage::Binary { op, .. } => op.name(),
            })
            .collect();
        format!("`{}` then {}", comp.tensor_name(TensorId { op: self.einsum, output: 0 }), chain.join(", "))
    }

    /// The change this site makes where fused (`fused` true) or left as written.
    pub fn change(&self, comp: &Computation, rule: &Fuse, fused: bool) -> Change {
        let written = self.describe(comp);
        let chosen = if fused { format!("fused {written}") } else { written.clone() };
        Change { rule: rule.name.clone(), written, chosen }
    }
}

/// `comp` rebuilt with every site of `sites` fused into one [`Epilogue`] operator: the same
/// inputs in the same order, roles and saved outputs (by name); every other operator shared.
pub fn fused(comp: &Computation, sites: &[Site]) -> Result<Graph> {
    let mut g = Graph::new();
    for (index, role) in comp.roles().iter() {
        g.role(index, role)?;
    }
    let mut map: HashMap<TensorId, Tensor> = HashMap::new();
    for t in comp.inputs() {
        if let Some(Node::Input { name, desc }) = comp.node(t.op) {
            let dims: Vec<(&str, usize)> = desc.dims.iter().map(|d| (d.name.as_str(), d.extent)).collect();
            map.insert(t, g.input(name, &dims, desc.dtype)?);
        }
    }
    // Each site by its last operator, where the fused operator is added (every operand is
    // computed by then); its einsum and other operators are not added.
    let last: HashMap<OpId, &Site> = sites.iter().filter_map(|s| Some((*s.ops.last()?, s))).collect();
    let inside: HashSet<OpId> =
        sites.iter().flat_map(|s| std::iter::once(s.einsum).chain(s.ops[..s.ops.len() - 1].iter().copied())).collect();
    for op in comp.topo_order() {
        let Some(Node::Op { op: o, inputs, .. }) = comp.node(op) else { continue };
        if inside.contains(&op) {
            continue;
        }
        let outs = match last.get(&op) {
            Some(site) => {
                let Some(Node::Op { op: e, inputs: einsum_inputs, .. }) = comp.node(site.einsum) else {
                    unreachable!("a site's einsum is an operator")
                };
                let einsum = (e.as_ref() as &dyn std::any::Any)
                    .downcast_ref::<Einsum>()
                    .expect("a site's einsum is an Einsum")
                    .clone();
                let fused: Arc<dyn AbstractOperator> = Arc::new(Epilogue::new(einsum, site.stages.clone())?);
                let ins: Vec<Tensor> = einsum_inputs.iter().chain(&site.operands).map(|t| map[t]).collect();
                g.op_shared(fused, &ins)?
            }
            None => {
                let ins: Vec<Tensor> = inputs.iter().map(|t| map[t]).collect();
                g.op_shared(Arc::clone(o), &ins)?
            }
        };
        for (output, t) in outs.into_iter().enumerate() {
            map.insert(TensorId { op, output }, t);
        }
    }
    for &t in comp.saved() {
        g.save_as(map[&t], &comp.tensor_name(t))?;
    }
    Ok(g)
}

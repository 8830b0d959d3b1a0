//! The forms of a graph under algebraic rewrites (`einsum-rewrite`): its contraction
//! networks found, each saturated under the contraction rules, and the graph rebuilt with
//! the cheapest forms, for a planner to weigh by whole-plan prediction.
//!
//! A contraction network here is a tree of two-operand einsums bound by index name (every
//! letter binds one index name in each operand and in the result, as `Graph::matmul` and
//! `Graph::einsum` ensure), whose inner results have one reader, the next einsum of the tree,
//! and are not saved. Its leaves are whatever feeds it (inputs or other operators' results).
//! A network the rewrites cannot reassociate (an index summed over three tensors) is left as
//! written. Everything else in the graph is kept: the same operators, shared.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use einsum_core::TensorDesc;
use einsum_joinagg::{Computation, Node, OpId, TensorId};
use einsum_ops::einsum::Einsum;
use einsum_rewrite::{Limits, Network, Operand, Rule, Tree, forms, rules};

use crate::{Graph, Result, Snapshot, Tensor};

/// One form of a graph: the graph rebuilt, and what was reassociated.
#[derive(Debug)]
pub struct Form {
    /// The rebuilt graph (its inputs and saved outputs have the original's names).
    pub graph: Graph,
    /// Per contraction network, its leaves by name and the association as written and as
    /// chosen: `(M1 (M2 M3))`.
    pub changes: Vec<Change>,
}

/// A network's association, as written and in this form.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Change {
    /// As written.
    pub written: String,
    /// In this form.
    pub chosen: String,
}

/// A contraction network found in a computation.
struct Found {
    /// The einsum whose result is the network's.
    root: OpId,
    /// The tensors feeding it, in the order the tree numbers them.
    leaves: Vec<TensorId>,
    /// The written association.
    written: Tree,
    network: Network,
}

/// The einsum of vertex `op`, if it is a two-operand einsum whose every letter binds one
/// index name everywhere.
fn named_einsum(comp: &Computation, op: OpId) -> Option<&Einsum> {
    let Some(Node::Op { op: o, inputs, .. }) = comp.node(op) else { return None };
    let einsum = (o.as_ref() as &dyn std::any::Any).downcast_ref::<Einsum>()?;
    if inputs.len() != 2 {
        return None;
    }
    let (lhs, out) = einsum.equation().split_once("->")?;
    let terms: Vec<&str> = lhs.split(',').collect();
    let descs: Vec<&TensorDesc> = inputs.iter().map(|t| comp.desc(*t)).collect::<std::result::Result<_, _>>().ok()?;
    let mut name_of: HashMap<char, &str> = HashMap::new();
    let bound = terms.iter().zip(&descs).map(|(t, d)| (*t, *d)).chain([(out, &o.outputs()[0])]);
    for (term, desc) in bound {
        if term.chars().count() != desc.dims.len() {
            return None;
        }
        for (letter, dim) in term.chars().zip(&desc.dims) {
            if *name_of.entry(letter).or_insert(&dim.name) != dim.name {
                return None;
            }
        }
    }
    Some(einsum)
}

/// The contraction networks of `comp` with at least three tensors.
fn networks(comp: &Computation) -> Vec<Found> {
    let saved = comp.saved();
    let ops: Vec<OpId> = comp.topo_order();
    let link = |op: OpId| named_einsum(comp, op).is_some();
    // An inner link: a link whose one result has one reader, a link, and is not saved.
    let inner = |op: OpId| {
        let t = TensorId { op, output: 0 };
        let readers = comp.consumers(t);
        link(op) && !saved.contains(&t) && readers.len() == 1 && link(readers[0].0)
    };
    let mut found = Vec::new();
    for &root in ops.iter().filter(|&&op| link(op) && !inner(op)) {
        let mut leaves = Vec::new();
        let written = gather(comp, root, &inner, &mut leaves);
        if leaves.len() < 3 {
            continue;
        }
        let dims = |t: &TensorId| comp.desc(*t).map(|d| d.dims.clone()).unwrap_or_default();
        let leaf_dims: Vec<Vec<einsum_core::Dim>> = leaves.iter().map(dims).collect();
        let names: Vec<Vec<&str>> = leaf_dims.iter().map(|d| d.iter().map(|x| x.name.as_str()).collect()).collect();
        let leaf_names: Vec<&[&str]> = names.iter().map(Vec::as_slice).collect();
        let extents: Vec<(&str, usize)> = leaf_dims.iter().flatten().map(|d| (d.name.as_str(), d.extent)).collect();
        let out_dims = dims(&TensorId { op: root, output: 0 });
        let out: Vec<&str> = out_dims.iter().map(|d| d.name.as_str()).collect();
        if let Ok(network) = Network::new(&leaf_names, &extents, &out)
            && written_as_network(comp, root, &leaves, &network).is_some()
        {
            found.push(Found { root, leaves, written, network });
        }
    }
    found
}

/// The indices of link `op`'s result, where every link of its tree keeps exactly the indices
/// the network's contraction of its parts keeps ([`Network::joined`]): the written graph then
/// computes the network, and every form of it computes the same. `None` where a link sums an
/// index early or keeps one late (a result index summed inside the tree, say), which the
/// network would not: such a tree is left as written.
fn written_as_network(comp: &Computation, op: OpId, leaves: &[TensorId], network: &Network) -> Option<BTreeSet<usize>> {
    let index_of = |name: &str| (0..network.indices()).find(|&i| network.name(i) == name);
    let names = |t: TensorId| -> Option<BTreeSet<usize>> {
        comp.desc(t).ok()?.dims.iter().map(|d| index_of(&d.name)).collect()
    };
    let Some(Node::Op { inputs, .. }) = comp.node(op) else { return None };
    let mut parts = Vec::new();
    for &t in inputs {
        parts.push(if leaves.contains(&t) { names(t)? } else { written_as_network(comp, t.op, leaves, network)? });
    }
    let kept = names(TensorId { op, output: 0 })?;
    (network.joined(&parts[0], &parts[1]) == kept).then_some(kept)
}

/// The tree of link `op`, numbering its leaves into `leaves` left to right.
fn gather(comp: &Computation, op: OpId, inner: &dyn Fn(OpId) -> bool, leaves: &mut Vec<TensorId>) -> Tree {
    let Some(Node::Op { inputs, .. }) = comp.node(op) else { unreachable!("links are operators") };
    let mut part = |t: TensorId| {
        if t.output == 0 && inner(t.op) {
            gather(comp, t.op, inner, leaves)
        } else {
            leaves.push(t);
            Tree::Leaf(leaves.len() - 1)
        }
    };
    let (a, b) = (part(inputs[0]), part(inputs[1]));
    Tree::Contract(Box::new(a), Box::new(b))
}

/// A form's association with the leaves named (an input by its name, another tensor by
/// its vertex's), each contraction's operands in the order the graph was written in (the
/// part with the earlier tensor first), so that a chain reads as a chain.
fn describe(comp: &Computation, tree: &Tree, leaves: &[TensorId]) -> String {
    fn first(t: &Tree) -> usize {
        match t {
            Tree::Leaf(n) => *n,
            Tree::Contract(a, b) => first(a).min(first(b)),
        }
    }
    match tree {
        Tree::Leaf(n) => comp.tensor_name(leaves[*n]),
        Tree::Contract(a, b) => {
            let (a, b) = if first(a) <= first(b) { (a, b) } else { (b, a) };
            format!("({} {})", describe(comp, a, leaves), describe(comp, b, leaves))
        }
    }
}

/// The forms of `graph`: the graph as written first, then up to `k - 1` others, the `i`-th
/// taking each network's `i`-th cheapest form by flops under `rules`, within `limits`
/// (forms equal to an earlier one are left out); none for a graph without a contraction
/// network.
pub fn graph_forms(graph: &Snapshot, rules: &[Rule], k: usize, limits: Limits) -> Result<Vec<Form>> {
    let comp = graph.computation();
    let found = networks(comp);
    if found.is_empty() {
        // Nothing to rewrite: no form to build, not even the written one.
        return Ok(Vec::new());
    }
    let mut choices: Vec<Vec<Tree>> = Vec::new();
    for f in &found {
        let best = forms(&f.network, &f.written, rules, k, limits)?;
        choices.push(best.trees.into_iter().map(|(_, t)| t).collect());
    }
    let written: Vec<Tree> = found.iter().map(|f| f.written.clone()).collect();
    let mut picks: Vec<Vec<Tree>> = vec![written];
    for i in 0..k.saturating_sub(1) {
        let pick: Vec<Tree> =
            choices.iter().zip(&found).map(|(c, f)| c.get(i).or(c.last()).unwrap_or(&f.written).clone()).collect();
        let canonical = |p: &[Tree]| p.iter().map(|t| t.clone().canonical()).collect::<Vec<_>>();
        if !picks.iter().any(|q| canonical(q) == canonical(&pick)) {
            picks.push(pick);
        }
    }
    picks
        .into_iter()
        .map(|pick| {
            let changes = found
                .iter()
                .zip(&pick)
                .map(|(f, t)| Change {
                    written: describe(comp, &f.written, &f.leaves),
                    chosen: describe(comp, t, &f.leaves),
                })
                .collect();
            Ok(Form { graph: rebuild(comp, &found, &pick)?, changes })
        })
        .collect()
}

/// `comp` rebuilt with each network of `found` computed in the form `pick` gives it.
fn rebuild(comp: &Computation, found: &[Found], pick: &[Tree]) -> Result<Graph> {
    let mut g = Graph::new();
    let mut map: HashMap<TensorId, Tensor> = HashMap::new();
    let roots: HashMap<OpId, usize> = found.iter().enumerate().map(|(i, f)| (f.root, i)).collect();
    // The inner links of the networks: computed by their roots' steps.
    let mut skipped: Vec<OpId> = Vec::new();
    for f in found {
        let mut ops = Vec::new();
        inner_ops(comp, f.root, &f.leaves, &mut ops);
        skipped.extend(ops);
    }
    // The inputs first, in the graph's order, so that every form binds its inputs (and, saved
    // in the same order below, its outputs) in the written graph's order.
    for t in comp.inputs() {
        if let Some(Node::Input { name, desc }) = comp.node(t.op) {
            let dims: Vec<(&str, usize)> = desc.dims.iter().map(|d| (d.name.as_str(), d.extent)).collect();
            map.insert(t, g.input(name, &dims, desc.dtype)?);
        }
    }
    for op in comp.topo_order() {
        match comp.node(op) {
            Some(Node::Input { .. }) | None => {}
            Some(Node::Op { op: o, inputs, .. }) => {
                if let Some(&i) = roots.get(&op) {
                    let leaves: Vec<Tensor> = found[i].leaves.iter().map(|t| map[t]).collect();
                    let result = steps(&mut g, &found[i].network, &pick[i], &leaves)?;
                    map.insert(TensorId { op, output: 0 }, result);
                } else if !skipped.contains(&op) {
                    let ins: Vec<Tensor> = inputs.iter().map(|t| map[t]).collect();
                    let outs = g.op_shared(Arc::clone(o), &ins)?;
                    for (output, t) in outs.into_iter().enumerate() {
                        map.insert(TensorId { op, output }, t);
                    }
                }
            }
        }
    }
    for &t in comp.saved() {
        g.save_as(map[&t], &comp.tensor_name(t))?;
    }
    Ok(g)
}

/// The links of the network rooted at `op` below the root (those whose results are not
/// leaves).
fn inner_ops(comp: &Computation, op: OpId, leaves: &[TensorId], out: &mut Vec<OpId>) {
    let Some(Node::Op { inputs, .. }) = comp.node(op) else { return };
    for t in inputs {
        if !leaves.contains(t) {
            out.push(t.op);
            inner_ops(comp, t.op, leaves, out);
        }
    }
}

/// Adds the einsum steps of `tree` over `leaves` to `g`; returns the result.
fn steps(g: &mut Graph, network: &Network, tree: &Tree, leaves: &[Tensor]) -> Result<Tensor> {
    let steps = tree.steps(network)?;
    let mut results: Vec<Tensor> = Vec::new();
    for s in &steps {
        let operand = |o: Operand| match o {
            Operand::Leaf(n) => leaves[n],
            Operand::Step(n) => results[n],
        };
        let inputs = [operand(s.operands[0]), operand(s.operands[1])];
        results.push(g.einsum(&s.equation, &inputs)?);
    }
    Ok(*results.last().unwrap_or(&leaves[0]))
}

/// The plan kept by [`fastest_form`]: what the planner gave for it, the graph it planned
/// (the graph as written, or a form with its inputs and saved outputs in the same order),
/// and per network the association as written and as kept (`None` without a network or
/// with rewrites off).
pub struct Kept<T> {
    /// The planner's result.
    pub planned: T,
    /// The graph planned.
    pub graph: Snapshot,
    /// What was reassociated.
    pub rewrites: Option<Vec<Change>>,
}

/// Plans `graph` with `plan` and, where `rewrites` is on, its [`DEFAULT_FORMS`] - 1 cheapest
/// other forms too, keeping the one whose `predicted` time is lowest (the written graph on
/// ties). The written graph's failure is the caller's error; another form whose plan does not
/// fit or compile is no candidate.
pub fn fastest_form<T>(
    graph: &Snapshot,
    rewrites: bool,
    mut plan: impl FnMut(&Computation) -> Result<T>,
    predicted: impl Fn(&T) -> f64,
) -> Result<Kept<T>> {
    let mut kept = Kept { planned: plan(graph.computation())?, graph: graph.clone(), rewrites: None };
    let forms = if rewrites { default_forms(graph, DEFAULT_FORMS)? } else { Vec::new() };
    let Some((written, others)) = forms.split_first() else { return Ok(kept) };
    kept.rewrites = Some(written.changes.clone());
    for form in others {
        let snapshot = form.graph.snapshot();
        if let Ok(planned) = plan(snapshot.computation())
            && predicted(&planned) < predicted(&kept.planned)
        {
            kept = Kept { planned, graph: snapshot, rewrites: Some(form.changes.clone()) };
        }
    }
    Ok(kept)
}

/// How many forms [`fastest_form`] weighs: the written one and the three cheapest others.
pub const DEFAULT_FORMS: usize = 4;

/// [`graph_forms`] under the default rules (association, [`rules::default_rules`]) and limits.
pub fn default_forms(graph: &Snapshot, k: usize) -> Result<Vec<Form>> {
    graph_forms(graph, &rules::default_rules(), k, Limits::default())
}

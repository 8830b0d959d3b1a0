//! Horizontal merging of projections: two-operand einsums that read the same tensor with
//! different weights (a LLaMA block's Q, K and V projections of the normalized activations,
//! its gate and up projections) computed as one einsum whose weight is the parts'
//! concatenation along their output feature index, followed by one slice per part that gives
//! back each original result under its own index name ([`Graph::slice_as`](crate::Graph::slice_as)).
//! One larger GEMM fills more of a GPU's streaming multiprocessors than three small ones (the
//! wave quantization `einsum_sim` models) and is split, and its input exchanged, once.
//!
//! The merged weight is a new input of the form ([`Derived`]): the executable builds it on the
//! host from the user's separate weights when they are loaded, once, so the merge costs nothing
//! per run. A weight that anything else reads, or that is saved, is not merged.
//!
//! Why a graph rewrite and not an e-graph rule: the e-graph language of `einsum-rewrite`
//! describes one contraction network, a tree with a single root whose forms are extracted as
//! trees. A merge joins several roots into one operator with several readers (a DAG: each
//! slice reads the merged result), which tree extraction would count once per root, and it
//! needs operators (concatenation, slices) and a new input that the language has no place
//! for. So a merge rule is a value of its own ([`Merge`], in [`Rules::merges`](super::Rules)),
//! applied to the whole graph in the same pass, each form it gives planned and weighed by
//! whole-plan prediction like the contraction forms.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use einsum_core::TensorDesc;
use einsum_joinagg::{Computation, Node, OpId, TensorId};

use super::named_einsum;
use crate::{Graph, Result, Tensor};

/// A horizontal merge rule: every group of at least [`Merge::min_parts`] two-operand einsums
/// with the same equation that read the same tensor in the same operand, each with a weight
/// (a graph input read by that einsum alone and not saved) that agrees with the others on
/// every index but one, an index of the result that the shared tensor does not have.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Merge {
    /// Its name in reports.
    pub name: String,
    /// The fewest einsums one merge joins (at least 2).
    pub min_parts: usize,
}

impl Merge {
    /// Merges of projections: two or more einsums per group (Q, K and V; gate and up).
    pub fn projections() -> Self {
        Merge { name: "merge".into(), min_parts: 2 }
    }

    /// The groups of `comp` this rule merges, in the order of their first einsum.
    pub fn sites(&self, comp: &Computation) -> Vec<Site> {
        let saved: HashSet<TensorId> = comp.saved().iter().copied().collect();
        let order: Vec<OpId> = comp.topo_order();
        // (shared tensor, weight operand, equation) -> the einsums and their weights.
        let mut groups: BTreeMap<(TensorId, usize, String), Vec<(OpId, TensorId)>> = BTreeMap::new();
        for &op in &order {
            let Some(einsum) = named_einsum(comp, op) else { continue };
            let Some(Node::Op { inputs, .. }) = comp.node(op) else { continue };
            for w in 0..2 {
                let (weight, shared) = (inputs[w], inputs[1 - w]);
                let is_input = matches!(comp.node(weight.op), Some(Node::Input { .. }));
                if weight != shared && is_input && !saved.contains(&weight) && comp.consumers(weight).len() == 1 {
                    groups.entry((shared, w, einsum.equation().to_string())).or_default().push((op, weight));
                }
            }
        }
        let position = |op: OpId| order.iter().position(|&o| o == op).unwrap_or(usize::MAX);
        let mut sites: Vec<Site> = groups
            .into_iter()
            .filter(|(_, members)| members.len() >= self.min_parts.max(2))
            .filter_map(|((shared, weight_slot, equation), members)| {
                let axis = merge_axis(comp, &equation, weight_slot, &members)?;
                Some(Site {
                    ops: members.iter().map(|m| m.0).collect(),
                    weights: members.iter().map(|m| m.1).collect(),
                    shared,
                    weight_slot,
                    equation,
                    axis,
                })
            })
            .collect();
        sites.sort_by_key(|s| position(s.ops[0]));
        sites
    }
}

/// The axis of the weights along which `members` merge: the one where they differ (in name
/// or extent), or for weights of one shape the first; it must be an index of the result that
/// the shared operand does not have. `None` where the weights differ in dtype, rank or more
/// than one index, or no such axis exists.
fn merge_axis(comp: &Computation, equation: &str, weight_slot: usize, members: &[(OpId, TensorId)]) -> Option<usize> {
    let descs: Vec<_> = members.iter().map(|m| comp.desc(m.1).ok()).collect::<Option<_>>()?;
    let first = descs[0];
    if descs.iter().any(|d| d.dtype != first.dtype || d.rank() != first.rank()) {
        return None;
    }
    let (lhs, out) = equation.split_once("->")?;
    let terms: Vec<&str> = lhs.split(',').collect();
    let (weight, shared) = (terms.get(weight_slot)?, terms.get(1 - weight_slot)?);
    let letters: Vec<char> = weight.chars().collect();
    let feature = |a: usize| letters.get(a).is_some_and(|c| out.contains(*c) && !shared.contains(*c));
    let differ: Vec<usize> = (0..first.rank()).filter(|&a| descs.iter().any(|d| d.dims[a] != first.dims[a])).collect();
    match differ.as_slice() {
        [] => (0..first.rank()).find(|&a| feature(a)),
        [a] if feature(*a) => Some(*a),
        _ => None,
    }
}

/// One group of einsums a [`Merge`] joins.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Site {
    /// The einsums, in topological order.
    pub ops: Vec<OpId>,
    /// Their weights, in the same order.
    pub weights: Vec<TensorId>,
    /// The tensor they all read.
    pub shared: TensorId,
    /// The weight's operand (0 or 1).
    pub weight_slot: usize,
    /// Their equation.
    pub equation: String,
    /// The weights' axis that is concatenated.
    pub axis: usize,
}

impl Site {
    /// The weights by name, their common prefix and suffix (up to a `.`) factored out:
    /// `l0.{wq, wk, wv}`, `model.layers.0.mlp.{gate_proj, up_proj}.weight`.
    pub fn describe(&self, comp: &Computation) -> String {
        let names: Vec<String> = self.weights.iter().map(|t| comp.tensor_name(*t)).collect();
        let (pre, suf) = common_parts(&names);
        let middles: Vec<&str> = names.iter().map(|n| &n[pre..n.len() - suf]).collect();
        if pre == 0 && suf == 0 {
            middles.join(", ")
        } else {
            format!("{}{{{}}}{}", &names[0][..pre], middles.join(", "), &names[0][names[0].len() - suf..])
        }
    }
}

/// The lengths of the longest common prefix ending in a `.` and suffix starting with one
/// of `names` (0 where there is none, or fewer than two names).
fn common_parts(names: &[String]) -> (usize, usize) {
    let Some(first) = names.first().filter(|_| names.len() > 1) else { return (0, 0) };
    let prefix = first
        .char_indices()
        .filter(|&(i, c)| c == '.' && names.iter().all(|n| n.get(..=i) == first.get(..=i)))
        .map(|(i, _)| i + 1)
        .next_back()
        .unwrap_or(0);
    let shortest = names.iter().map(String::len).min().unwrap_or(0);
    let suffix = first
        .char_indices()
        .filter(|&(i, c)| c == '.' && first.len() - i <= shortest - prefix)
        .find(|&(i, _)| names.iter().all(|n| n.ends_with(&first[i..])))
        .map(|(i, _)| first.len() - i)
        .unwrap_or(0);
    (prefix, suffix)
}

/// A form's input that is not the user's: the concatenation of user inputs (the written
/// graph's) along one axis, built on the host when they are loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Derived {
    /// Its name in the form.
    pub name: String,
    /// The written graph's inputs it concatenates, in order.
    pub parts: Vec<TensorId>,
    /// The axis they are concatenated along (the same position in every part).
    pub axis: usize,
}

/// The index names of `comp`'s tensors (a merged index takes a name none has).
pub(super) fn index_names(comp: &Computation) -> HashSet<String> {
    let mut names: HashSet<String> = HashSet::new();
    for t in comp.inputs() {
        if let Ok(d) = comp.desc(t) {
            names.extend(d.dims.iter().map(|x| x.name.clone()));
        }
    }
    for (_, o, _) in comp.ops() {
        names.extend(o.outputs().iter().flat_map(|d| d.dims.iter().map(|x| x.name.clone())));
    }
    names
}

/// A name not in `taken`: `name`, or `name` with primes added.
pub(super) fn fresh(name: String, taken: &HashSet<String>) -> String {
    let mut name = name;
    while taken.contains(&name) {
        name.push('\'');
    }
    name
}

/// Adds to `g` the merged weight of `site` (the weights of `comp` concatenated along the
/// site's axis, which gets a name new to `index_names`) as an input named anew in
/// `input_names`, declaring the merged index the parts' role where they all have one.
/// Returns the input, its index's name and what it derives from.
pub(super) fn merged_input(
    g: &mut Graph,
    comp: &Computation,
    site: &Site,
    index_names: &mut HashSet<String>,
    input_names: &mut HashSet<String>,
) -> Result<(Tensor, String, Derived)> {
    let descs: Vec<&TensorDesc> = site.weights.iter().map(|t| comp.desc(*t)).collect::<std::result::Result<_, _>>()?;
    let parts: Vec<String> = descs.iter().map(|d| d.dims[site.axis].name.clone()).collect();
    let index = fresh(parts.join("+"), index_names);
    index_names.insert(index.clone());
    let name = fresh(site.weights.iter().map(|t| comp.tensor_name(*t)).collect::<Vec<_>>().join("+"), input_names);
    input_names.insert(name.clone());
    let extent: usize = descs.iter().map(|d| d.dims[site.axis].extent).sum();
    let dims: Vec<(&str, usize)> = descs[0]
        .dims
        .iter()
        .enumerate()
        .map(|(a, d)| if a == site.axis { (index.as_str(), extent) } else { (d.name.as_str(), d.extent) })
        .collect();
    let t = g.input(&name, &dims, descs[0].dtype)?;
    let roles: Vec<_> = parts.iter().map(|p| comp.roles().get(p)).collect();
    if let Some(Some(role)) = roles.first().filter(|r| roles.iter().all(|x| x == *r)) {
        g.role(&index, *role)?;
    }
    Ok((t, index, Derived { name, parts: site.weights.clone(), axis: site.axis }))
}

/// Adds the merged einsum of `site` (reading `shared` and the merged weight `weight`, whose
/// concatenated index is `index`) and one slice per einsum of the site, each named back to
/// its part's index, recording each slice as that einsum's result in `map`.
pub(super) fn merge_site(
    g: &mut Graph,
    comp: &Computation,
    site: &Site,
    (shared, weight): (Tensor, Tensor),
    index: &str,
    map: &mut HashMap<TensorId, Tensor>,
) -> Result<()> {
    let operands = if site.weight_slot == 0 { [weight, shared] } else { [shared, weight] };
    let merged = g.einsum(&site.equation, &operands)?;
    let mut lo = 0;
    for (&op, w) in site.ops.iter().zip(&site.weights) {
        let part = &comp.desc(*w)?.dims[site.axis];
        let t = g.slice_as(merged, index, lo, lo + part.extent, &part.name)?;
        map.insert(TensorId { op, output: 0 }, t);
        lo += part.extent;
    }
    Ok(())
}

/// How far past a site's einsums its [`Probe`] reaches: the operators reading their results,
/// and those reading these (a projection's consumers and theirs: RoPE then attention, or the
/// SiLU, the product and the down projection), whose splits decide what the merge's layout
/// costs.
pub const PROBE_DEPTH: usize = 2;

/// A site's neighbourhood as two small graphs of their own, as written and merged, for a
/// planner to weigh the merge locally before it plans a whole form with it: the shared tensor
/// and every other tensor entering the neighbourhood become inputs, every result it does not
/// read itself is saved. `key` is the same for sites whose neighbourhoods are alike (the
/// layers of a stack), which are weighed once.
pub struct Probe {
    /// The neighbourhood as written.
    pub written: Graph,
    /// With the site merged.
    pub merged: Graph,
    /// The operators and input types of the written neighbourhood, in order.
    pub key: String,
}

impl Probe {
    /// The probe of `site` in `comp`, whose operators are in topological order `order`,
    /// reaching [`PROBE_DEPTH`] operators past its einsums.
    pub fn new(comp: &Computation, site: &Site, order: &[OpId]) -> Result<Probe> {
        let mut included: HashSet<OpId> = HashSet::new();
        let mut frontier: Vec<OpId> = site.ops.clone();
        for _ in 0..PROBE_DEPTH {
            let mut next = Vec::new();
            for &op in &frontier {
                let outputs = match comp.node(op) {
                    Some(Node::Op { op: o, .. }) => o.outputs().len(),
                    _ => 0,
                };
                for output in 0..outputs {
                    for (reader, _) in comp.consumers(TensorId { op, output }) {
                        if !site.ops.contains(&reader) && included.insert(reader) {
                            next.push(reader);
                        }
                    }
                }
            }
            frontier = next;
        }
        let ops: Vec<OpId> = order.iter().copied().filter(|op| included.contains(op)).collect();
        let written = neighbourhood(comp, site, &ops, false)?;
        let merged = neighbourhood(comp, site, &ops, true)?;
        // Built alike from alike neighbourhoods, the probe's vertices (local names, local
        // tensor ids, the operators' parameters) say what it is.
        let probe = written.computation();
        let key = probe.topo_order().into_iter().filter_map(|op| probe.node(op)).map(|n| format!("{n:?}\n")).collect();
        Ok(Probe { written, merged, key })
    }
}

/// The graph of `site`'s einsums (merged or not) and the operators `included`, in
/// topological order.
fn neighbourhood(comp: &Computation, site: &Site, included: &[OpId], merged: bool) -> Result<Graph> {
    let mut g = Graph::new();
    for (index, role) in comp.roles().iter() {
        g.role(index, role)?;
    }
    let mut map: HashMap<TensorId, Tensor> = HashMap::new();
    let input = |g: &mut Graph, map: &mut HashMap<TensorId, Tensor>, t: TensorId| -> Result<Tensor> {
        if let Some(&x) = map.get(&t) {
            return Ok(x);
        }
        let desc = comp.desc(t)?;
        let dims: Vec<(&str, usize)> = desc.dims.iter().map(|d| (d.name.as_str(), d.extent)).collect();
        let x = g.input(&format!("x{}", map.len()), &dims, desc.dtype)?;
        map.insert(t, x);
        Ok(x)
    };
    let shared = input(&mut g, &mut map, site.shared)?;
    if merged {
        let (mut indices, mut names) = (index_names(comp), HashSet::new());
        let (weight, index, _) = merged_input(&mut g, comp, site, &mut indices, &mut names)?;
        merge_site(&mut g, comp, site, (shared, weight), &index, &mut map)?;
    }
    let mut ops: Vec<OpId> = if merged { Vec::new() } else { site.ops.clone() };
    ops.extend(included);
    let mut produced: Vec<TensorId> = Vec::new();
    for op in ops {
        let Some(Node::Op { op: o, inputs, .. }) = comp.node(op) else { continue };
        let mut ins = Vec::new();
        for &t in inputs {
            ins.push(input(&mut g, &mut map, t)?);
        }
        for (output, t) in g.op_shared(Arc::clone(o), &ins)?.into_iter().enumerate() {
            map.insert(TensorId { op, output }, t);
            produced.push(TensorId { op, output });
        }
    }
    // Saved: what no operator of the neighbourhood reads (the slices' results included, where
    // a merged einsum's result has no reader inside).
    let read_inside = |t: TensorId| comp.consumers(t).iter().any(|(r, _)| included.contains(r) || site.ops.contains(r));
    let ends: Vec<TensorId> = site.ops.iter().map(|&op| TensorId { op, output: 0 }).chain(produced).collect();
    for t in ends {
        if !read_inside(t) {
            g.save(map[&t])?;
        }
    }
    Ok(g)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_described_with_their_common_parts_factored() {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(common_parts(&s(&["l0.wq", "l0.wk", "l0.wv"])), (3, 0));
        assert_eq!(common_parts(&s(&["wq", "wk"])), (0, 0));
        let hf = s(&["model.layers.0.mlp.gate_proj.weight", "model.layers.0.mlp.up_proj.weight"]);
        assert_eq!(common_parts(&hf), ("model.layers.0.mlp.".len(), ".weight".len()));
        assert_eq!(common_parts(&s(&["a.b", "a.b"])), (2, 0));
    }
}

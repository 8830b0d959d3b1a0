//! The forms of a graph under algebraic rewrites (`einsum-rewrite`): its contraction
//! networks found, each saturated under the contraction rules, and the graph rebuilt with
//! the cheapest forms; and its projections that read one tensor merged into one einsum
//! ([`merge`]); for a planner to weigh every form by whole-plan prediction. The rules are
//! values ([`Rules`]).
//!
//! A contraction network here is a tree of einsums bound by index name (every letter binds
//! one index name in each operand and in the result, as `Graph::matmul` and `Graph::einsum`
//! ensure), whose inner results have one reader, the next einsum of the tree, and are not
//! saved. Its einsums have two operands, or more where [`Rules::orders`] is on ([`order`]: an
//! einsum of `n` operands is `n - 1` pairwise contractions left to right). Its leaves are
//! whatever feeds it (inputs or other operators' results), but a permute read by the network
//! alone, whose operand it reads instead where [`Rules::transposes`] is on ([`absorb`], which
//! also folds a permute of the network's result into its last einsum). A network the rewrites
//! cannot reassociate (an index summed over three tensors) is left as written. Everything
//! else in the graph is kept: the same operators, shared.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use einsum_core::TensorDesc;
use einsum_joinagg::{Computation, Node, OpId, TensorId};
use einsum_logical::Machine;
use einsum_ops::einsum::Einsum;
use einsum_rewrite::{Cost, Limits, Network, Operand, Rule, Tree, forms_by, rules};

use crate::{Graph, Result, Snapshot, Tensor};

pub mod absorb;
pub mod epilogue;
pub mod merge;
pub mod order;

pub use absorb::Absorb;
pub use epilogue::Fuse;
pub use merge::{Derived, Merge, Site};
pub use order::Order;

/// The rewrites weighed, as values: the rules of contraction networks (egg rewrites, saturated
/// per network within `limits`), the horizontal merge rules, and how many forms are planned.
#[derive(Clone, Debug)]
pub struct Rules {
    /// Rules of contraction networks ([`rules::default_rules`]: association).
    pub contraction: Vec<Rule>,
    /// Einsums of three or more operands as networks' einsums, weighed in other orders
    /// ([`Order::multi_operand`]; `None`: left as written).
    pub orders: Option<Order>,
    /// Permutes absorbed into the networks that read them or folded into the einsum whose
    /// result they permute ([`Absorb::transposes`]; `None`: kept as written).
    pub transposes: Option<Absorb>,
    /// Horizontal merges ([`Merge::projections`]).
    pub merges: Vec<Merge>,
    /// Elementwise chains fused into the einsum producing their input, weighed on the written
    /// graph and on every other form ([`Fuse::epilogues`]; `None`: left as written).
    pub epilogues: Option<Fuse>,
    /// Bounds of each network's saturation.
    pub limits: Limits,
    /// The device whose roofline prices a network's forms in extraction ([`network_cost`]:
    /// flops at its rate for the network's dtype, the bytes of the parts and results over its
    /// HBM bandwidth, a kernel launch per contraction); `None` (the default) prices flops
    /// alone. On the paper's chains the forms cheapest in flops include the better plans:
    /// priced on a DGX A100, chain E's best form at p = 8 is left out (7.516 ms kept against
    /// 7.407).
    pub machine: Option<Machine>,
    /// How many forms of the contraction networks are planned, the written one included
    /// ([`DEFAULT_FORMS`]); a merge adds its own.
    pub forms: usize,
    /// Keep the form with every merge site merged, unweighed, where the graph has one
    /// (`false` by default: merges are kept only where they predict faster). For checking a
    /// merged form end to end on graphs too small for a merge to pay.
    pub force_merges: bool,
}

impl Default for Rules {
    /// Association, multi-operand orders, transposes absorbed, the merge of projections,
    /// epilogues fused, the default limits, [`DEFAULT_FORMS`].
    fn default() -> Self {
        Rules {
            contraction: rules::default_rules(),
            orders: Some(Order::multi_operand()),
            transposes: Some(Absorb::transposes()),
            merges: vec![Merge::projections()],
            epilogues: Some(Fuse::epilogues()),
            limits: Limits::default(),
            machine: None,
            forms: DEFAULT_FORMS,
            force_merges: false,
        }
    }
}

/// One form of a graph: the graph rebuilt, what was rewritten, and the inputs it has that the
/// written graph has not.
#[derive(Debug)]
pub struct Form {
    /// The rebuilt graph: the written graph's inputs (but those merged into a [`Derived`]
    /// input) in its order, then the derived inputs; its saved outputs in the written order,
    /// with the written names.
    pub graph: Graph,
    /// Per contraction network, its leaves by name and the association as written and as
    /// chosen: `(M1 (M2 M3))`, and each permute it absorbs; per merge site, its weights and whether they were merged.
    pub changes: Vec<Change>,
    /// The form's inputs built from the written graph's (a merged weight).
    pub derived: Vec<Derived>,
}

/// What one rule did to one part of the graph: a network's association or order, as written
/// and in this form; a permute, kept or absorbed; an elementwise chain, fused into its einsum
/// or not; or a merge site's weights, separate as written and merged or not in this form.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Change {
    /// The rule: `association`, `order` (a network with an einsum of three operands or
    /// more), `transpose` (a permute absorbed), `epilogue` or `merge`.
    pub rule: String,
    /// As written: the association, the permute (`` `t = einsum(ij->ji)` ``), or the weights
    /// (`l0.{wq, wk, wv}`).
    pub written: String,
    /// In this form: the association, `absorbed` and the permute, or `merged` and the merged
    /// weight's name (the same as `written` where the part is left as written).
    pub chosen: String,
}

impl Change {
    /// Whether this form has the part as written.
    pub fn as_written(&self) -> bool {
        self.chosen == self.written
    }
}

/// A contraction network found in a computation.
struct Found {
    /// The operator whose result the network gives: its last einsum, or the permute of that
    /// einsum's result folded into it ([`absorb::root`]).
    top: OpId,
    /// The tensors feeding it, in the order the tree numbers them (a permute's operand in
    /// place of the permute's result where the permute is absorbed).
    leaves: Vec<TensorId>,
    /// Every operator a rewritten form computes in its place: the network's einsums and the
    /// permutes absorbed.
    ops: Vec<OpId>,
    /// The permutes absorbed.
    permutes: Vec<OpId>,
    /// Whether one of its einsums has three or more operands ([`Order`]).
    multi: bool,
    /// The written association.
    written: Tree,
    network: Network,
    /// The element type of its result.
    dtype: einsum_core::DType,
}

/// The einsum of vertex `op` and its operands, where every letter binds one index name in
/// every operand and in the result (any number of operands).
fn named_terms(comp: &Computation, op: OpId) -> Option<(&Einsum, &[TensorId])> {
    let Some(Node::Op { op: o, inputs, .. }) = comp.node(op) else { return None };
    let einsum = (o.as_ref() as &dyn std::any::Any).downcast_ref::<Einsum>()?;
    let (lhs, out) = einsum.equation().split_once("->")?;
    let terms: Vec<&str> = lhs.split(',').collect();
    if terms.len() != inputs.len() || o.outputs().len() != 1 {
        return None;
    }
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
    Some((einsum, inputs))
}

/// The einsum of vertex `op`, if it is a two-operand einsum whose every letter binds one
/// index name everywhere.
fn named_einsum(comp: &Computation, op: OpId) -> Option<&Einsum> {
    named_terms(comp, op).filter(|(_, inputs)| inputs.len() == 2).map(|(e, _)| e)
}

/// What extraction minimizes for a network of `dtype` on `machine`'s slowest device: the
/// seconds of its flops, of its parts' and results' bytes through HBM, and of a launch per
/// contraction ([`Cost::roofline`]).
pub fn network_cost(machine: &Machine, dtype: einsum_core::DType) -> Cost {
    let rates = &machine.compute;
    let rate = match dtype {
        einsum_core::DType::F16 => rates.f16,
        einsum_core::DType::BF16 => rates.bf16,
        einsum_core::DType::F32 | einsum_core::DType::I32 => rates.f32,
    };
    Cost::roofline(rate, machine.hbm_bandwidth, dtype.size_bytes() as f64, machine.kernel_launch)
}

/// The contraction networks of `comp` with at least three tensors, or with a permute
/// absorbed, under `rules` (einsums of three or more operands are networks' einsums where
/// [`Rules::orders`] is on; permutes are absorbed where [`Rules::transposes`] is).
fn networks(comp: &Computation, rules: &Rules) -> Vec<Found> {
    let saved = comp.saved();
    let ops: Vec<OpId> = comp.topo_order();
    let link = |op: OpId| match named_terms(comp, op) {
        Some((_, inputs)) => inputs.len() == 2 || (inputs.len() >= 3 && rules.orders.is_some()),
        None => false,
    };
    // An inner link: a link whose one result has one reader, a link, and is not saved.
    let inner = |op: OpId| {
        let t = TensorId { op, output: 0 };
        let readers = comp.consumers(t);
        link(op) && !saved.contains(&t) && readers.len() == 1 && link(readers[0].0)
    };
    // A permute's result that the one link reading it absorbs.
    let absorbed = |t: TensorId| {
        rules.transposes.is_some() && absorb::leaf(comp, t, saved).is_some() && link(comp.consumers(t)[0].0)
    };
    let mut found = Vec::new();
    for &root in ops.iter().filter(|&&op| link(op) && !inner(op)) {
        let mut written_leaves = Vec::new();
        let written = gather(comp, root, &inner, &mut written_leaves);
        let mut links = vec![root];
        inner_ops(comp, root, &written_leaves, &mut links);
        let multi = links.iter().any(|&op| named_terms(comp, op).is_some_and(|(_, i)| i.len() > 2));
        let mut permutes = Vec::new();
        let leaves: Vec<TensorId> = written_leaves
            .iter()
            .map(|&t| match absorb::leaf(comp, t, saved) {
                Some((p, operand)) if absorbed(t) => {
                    permutes.push(p);
                    operand
                }
                _ => t,
            })
            .collect();
        let folded = match &rules.transposes {
            Some(a) if a.roots => absorb::root(comp, root, saved, &absorbed),
            _ => None,
        };
        permutes.extend(folded);
        let top = folded.unwrap_or(root);
        if leaves.len() < 3 && permutes.is_empty() {
            continue;
        }
        let dims = |t: &TensorId| comp.desc(*t).map(|d| d.dims.clone()).unwrap_or_default();
        let leaf_dims: Vec<Vec<einsum_core::Dim>> = leaves.iter().map(dims).collect();
        let names: Vec<Vec<&str>> = leaf_dims.iter().map(|d| d.iter().map(|x| x.name.as_str()).collect()).collect();
        let leaf_names: Vec<&[&str]> = names.iter().map(Vec::as_slice).collect();
        let extents: Vec<(&str, usize)> = leaf_dims.iter().flatten().map(|d| (d.name.as_str(), d.extent)).collect();
        let out_dims = dims(&TensorId { op: top, output: 0 });
        let out: Vec<&str> = out_dims.iter().map(|d| d.name.as_str()).collect();
        if let Ok(network) = Network::new(&leaf_names, &extents, &out)
            && written_as_network(comp, root, &written_leaves, &network).is_some()
        {
            let ops = links.into_iter().chain(permutes.iter().copied()).collect();
            let dtype = comp.desc(TensorId { op: top, output: 0 }).map(|d| d.dtype).unwrap_or_default();
            found.push(Found { top, leaves, ops, permutes, multi, written, network, dtype });
        }
    }
    found
}

/// The indices of link `op`'s result, where every link of its tree keeps exactly the indices
/// the network's contraction of its parts keeps ([`Network::joined`], folded left to right
/// over an einsum of three or more operands, as its kernel contracts them): the written graph
/// then computes the network, and every form of it computes the same. `None` where a link
/// sums an index early or keeps one late (a result index summed inside the tree, say), which
/// the network would not: such a tree is left as written. (A permute only orders indices, so
/// the sets of a permute's operand and result are the same.)
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
    let (first, rest) = parts.split_first()?;
    let joined = rest.iter().fold(first.clone(), |acc, p| network.joined(&acc, p));
    (!rest.is_empty() && joined == kept).then_some(kept)
}

/// The tree of link `op`, numbering its leaves into `leaves` left to right (the operands of
/// an einsum of three or more contracted left to right, as its kernel does).
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
    let mut parts = inputs.iter().map(|&t| part(t));
    let first = parts.next().unwrap_or(Tree::Leaf(0));
    parts.fold(first, |acc, p| Tree::Contract(Box::new(acc), Box::new(p)))
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

/// The forms of `graph`: the graph as written first (its operators as they are), then up to
/// `rules.forms - 1` others, every permute absorbed in each: the written associations where a
/// permute is absorbed, then the `i`-th taking each network's `i`-th cheapest form by flops
/// under the contraction rules (forms equal to an earlier one are left out); then, where a merge rule finds sites,
/// the written form and the cheapest other with every site merged. None for a graph with
/// neither a contraction network nor a merge site.
pub fn graph_forms(graph: &Snapshot, rules: &Rules) -> Result<Vec<Form>> {
    screened_forms(graph, rules, None)
}

/// A merge's local weighing: the predicted time of a small graph (a site's [`merge::Probe`]),
/// infinite where it has no plan.
pub type Screen<'a> = &'a dyn Fn(&Computation) -> f64;

/// [`graph_forms`], merging only the sites whose neighbourhood `screen` predicts faster
/// merged than as written ([`merge::Probe`], weighed once per kind of neighbourhood, so a
/// stack of alike layers costs two small plans per kind of site); every site where `screen`
/// is `None`. The merged forms are then weighed whole like the others: the probe only spares
/// planning a whole form with merges that do not pay where they are (the projections of long
/// sequences, whose exchanges outweigh the fuller GEMM).
pub fn screened_forms(graph: &Snapshot, rules: &Rules, screen: Option<Screen<'_>>) -> Result<Vec<Form>> {
    let comp = graph.computation();
    let found = networks(comp, rules);
    // The operators of the networks: a merge leaves them to the contraction rules.
    let links: HashSet<OpId> = found.iter().flat_map(|f| f.ops.iter().copied()).collect();
    let mut sites: Vec<(Site, String)> = Vec::new();
    for rule in &rules.merges {
        for site in rule.sites(comp) {
            let taken = sites.iter().flat_map(|s| &s.0.ops).chain(&links).any(|op| site.ops.contains(op));
            if !taken {
                sites.push((site, rule.name.clone()));
            }
        }
    }
    // Merged: the sites that pay locally.
    let mut pays: Vec<bool> = vec![true; sites.len()];
    if let Some(screen) = screen {
        let mut weighed: HashMap<String, bool> = HashMap::new();
        let order = comp.topo_order();
        for (i, (site, _)) in sites.iter().enumerate() {
            let probe = merge::Probe::new(comp, site, &order)?;
            pays[i] = *weighed
                .entry(probe.key.clone())
                .or_insert_with(|| screen(probe.merged.computation()) < screen(probe.written.computation()));
        }
    }
    if found.is_empty() && sites.is_empty() {
        // Nothing to rewrite: no form to build, not even the written one.
        return Ok(Vec::new());
    }
    let k = rules.forms.max(1);
    let mut choices: Vec<Vec<Tree>> = Vec::new();
    for f in &found {
        let contraction = match &rules.orders {
            Some(order) if f.multi && f.leaves.len() <= order.max_leaves => &order.rules,
            _ => &rules.contraction,
        };
        let cost = rules.machine.as_ref().map_or(Cost::FLOPS, |m| network_cost(m, f.dtype));
        let best = forms_by(&f.network, &f.written, contraction, k, rules.limits, cost)?;
        choices.push(best.trees.into_iter().map(|(_, t)| t).collect());
    }
    let written: Vec<Tree> = found.iter().map(|f| f.written.clone()).collect();
    let canonical = |p: &[Tree]| p.iter().map(|t| t.clone().canonical()).collect::<Vec<_>>();
    // The written form (`None`: every network as written), then rewritten ones: the written
    // associations with the permutes absorbed where there are any, then the cheapest others.
    let mut picks: Vec<Option<Vec<Tree>>> = vec![None];
    if found.iter().any(|f| !f.permutes.is_empty()) {
        picks.push(Some(written.clone()));
    }
    for i in 0..k.saturating_sub(1) {
        if picks.len() >= k {
            break;
        }
        let pick: Vec<Tree> =
            choices.iter().zip(&found).map(|(c, f)| c.get(i).or(c.last()).unwrap_or(&f.written).clone()).collect();
        let seen =
            canonical(&pick) == canonical(&written) || picks.iter().flatten().any(|q| canonical(q) == canonical(&pick));
        if !seen {
            picks.push(Some(pick));
        }
    }
    // With the merges: the written form, and the first rewritten one where there is one.
    let mut merged: Vec<(Option<Vec<Tree>>, bool)> = if sites.is_empty() {
        picks.into_iter().map(|p| (p, false)).collect()
    } else {
        let with: Vec<(Option<Vec<Tree>>, bool)> = picks.iter().take(2).map(|p| (p.clone(), true)).collect();
        picks.into_iter().map(|p| (p, false)).chain(with).collect()
    };
    if !pays.contains(&true) {
        merged.retain(|m| !m.1);
    }
    let site_list: Vec<Site> = sites.iter().zip(&pays).filter(|(_, p)| **p).map(|(s, _)| s.0.clone()).collect();
    merged
        .into_iter()
        .map(|(pick, merging)| {
            let mut changes = Vec::new();
            for (i, f) in found.iter().enumerate() {
                changes.extend(network_changes(comp, f, pick.as_ref().map(|p| &p[i]), rules));
            }
            let applied: &[Site] = if merging { &site_list } else { &[] };
            let (graph, derived) = rebuild(comp, &found, pick.as_deref(), applied)?;
            let mut made = derived.iter();
            for ((site, rule), pays) in sites.iter().zip(&pays) {
                let written = site.describe(comp);
                let d = if merging && *pays { made.next() } else { None };
                let chosen = d.map_or_else(|| written.clone(), |d| format!("merged as {}", d.name));
                changes.push(Change { rule: rule.clone(), written, chosen });
            }
            Ok(Form { graph, changes, derived })
        })
        .collect()
}

/// What a form did to network `f`, computed as `chosen` (`None`: as written): its
/// association or order where it has three tensors or more (rule `association`, or the
/// [`Order`] rule's name where one of its einsums has three operands or more), and each
/// permute it absorbs (the [`Absorb`] rule's name).
fn network_changes(comp: &Computation, f: &Found, chosen: Option<&Tree>, rules: &Rules) -> Vec<Change> {
    let mut changes = Vec::new();
    if f.leaves.len() >= 3 {
        let rule = match &rules.orders {
            Some(order) if f.multi => order.name.clone(),
            _ => "association".into(),
        };
        let written = describe(comp, &f.written, &f.leaves);
        let chosen = chosen.map_or_else(|| written.clone(), |t| describe(comp, t, &f.leaves));
        changes.push(Change { rule, written, chosen });
    }
    if let Some(absorb) = &rules.transposes {
        for &p in &f.permutes {
            let equation = named_terms(comp, p).map(|(e, _)| e.equation().to_string()).unwrap_or_default();
            let written = format!("`{} = einsum({equation})`", comp.tensor_name(TensorId { op: p, output: 0 }));
            let chosen = if chosen.is_some() { format!("absorbed {written}") } else { written.clone() };
            changes.push(Change { rule: absorb.name.clone(), written, chosen });
        }
    }
    changes
}

/// `comp` rebuilt with each network of `found` computed in the form `pick` gives it (every
/// network as written where `pick` is `None`), and each site of `sites` merged; with the
/// inputs it derives from the written graph's.
fn rebuild(
    comp: &Computation,
    found: &[Found],
    pick: Option<&[Tree]>,
    sites: &[Site],
) -> Result<(Graph, Vec<Derived>)> {
    let mut g = Graph::new();
    let mut map: HashMap<TensorId, Tensor> = HashMap::new();
    // Rewritten networks by the operator whose result they give; their other operators are
    // computed by those steps.
    let tops: HashMap<OpId, usize> =
        if pick.is_some() { found.iter().enumerate().map(|(i, f)| (f.top, i)).collect() } else { HashMap::new() };
    let skipped: HashSet<OpId> = if pick.is_some() {
        found.iter().flat_map(|f| f.ops.iter().copied().filter(move |&op| op != f.top)).collect()
    } else {
        HashSet::new()
    };
    // The roles the graph declares hold in every form.
    for (index, role) in comp.roles().iter() {
        g.role(index, role)?;
    }
    let merged_away: HashSet<TensorId> = sites.iter().flat_map(|s| s.weights.iter().copied()).collect();
    // The inputs first, in the graph's order, so that every form binds its inputs (and, saved
    // in the same order below, its outputs) in the written graph's order; the merged weights
    // after them.
    let inputs = comp.inputs();
    let mut input_names: HashSet<String> = HashSet::new();
    for &t in &inputs {
        if let Some(Node::Input { name, desc }) = comp.node(t.op) {
            input_names.insert(name.clone());
            if merged_away.contains(&t) {
                continue;
            }
            let dims: Vec<(&str, usize)> = desc.dims.iter().map(|d| (d.name.as_str(), d.extent)).collect();
            map.insert(t, g.input(name, &dims, desc.dtype)?);
        }
    }
    let mut index_names = merge::index_names(comp);
    // Per site: the merged weight's input and its index's name, and the derived input.
    let mut derived: Vec<Derived> = Vec::new();
    let mut merged_inputs: Vec<(Tensor, String)> = Vec::new();
    for site in sites {
        let (t, index, d) = merge::merged_input(&mut g, comp, site, &mut index_names, &mut input_names)?;
        merged_inputs.push((t, index));
        derived.push(d);
    }
    let member: HashMap<OpId, usize> =
        sites.iter().enumerate().flat_map(|(i, s)| s.ops.iter().map(move |&op| (op, i))).collect();
    let mut emitted: HashSet<usize> = HashSet::new();
    for op in comp.topo_order() {
        match comp.node(op) {
            Some(Node::Input { .. }) | None => {}
            Some(Node::Op { .. }) if member.contains_key(&op) => {
                let s = member[&op];
                if emitted.insert(s) {
                    let (site, (weight, index)) = (&sites[s], &merged_inputs[s]);
                    merge::merge_site(&mut g, comp, site, (map[&site.shared], *weight), index, &mut map)?;
                }
            }
            Some(Node::Op { op: o, inputs, .. }) => {
                if let (Some(&i), Some(pick)) = (tops.get(&op), pick) {
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
    Ok((g, derived))
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
/// (the graph as written, or a form with the written graph's saved outputs in the same order
/// and its inputs but merged weights, then the merged weights), per rewritten part what was
/// kept (`None` with rewrites off or nothing to rewrite), and the form's derived inputs.
pub struct Kept<T> {
    /// The planner's result.
    pub planned: T,
    /// The graph planned.
    pub graph: Snapshot,
    /// What was rewritten.
    pub rewrites: Option<Vec<Change>>,
    /// The inputs of `graph` built from the written graph's (empty for the written graph).
    pub derived: Vec<Derived>,
}

/// A planner of a form, as [`fastest_form`] takes it.
pub type Planner<'a, T> = &'a (dyn Fn(&Computation) -> Result<T> + Sync);

/// Plans `graph` with `plan` and, where `rules` give it other forms ([`screened_forms`],
/// each also with its elementwise chains fused into their einsums where [`Rules::epilogues`]
/// finds any), keeps the form whose `predicted` time is lowest (the written graph on ties).
/// Forms are weighed by `weigh`, a cheaper planner (the optimizer's plan compiled and
/// predicted, without the refinement that compiles its alternatives too): every merge site's
/// neighbourhood, then every form, on threads of their own (each plan is independent and
/// deterministic, so the form kept does not depend on the threads); then the written graph
/// and the form weighed fastest, where it beats the written one, are planned with `plan`, and
/// the faster kept. Without `plan` (a planner that refines nothing) the weighed plans are
/// final: the fastest is kept as weighed, nothing is planned twice. Refining every form
/// instead multiplied the planning time by the forms' count and more (a merged form's
/// alternatives compile larger task graphs: the 80-layer 70B stack at p = 72 took 15x as
/// long). The written graph's failure is the caller's error; another form whose plan does
/// not fit or compile is no candidate.
pub fn fastest_form<T: Send>(
    graph: &Snapshot,
    rules: Option<&Rules>,
    weigh: impl Fn(&Computation) -> Result<T> + Sync,
    plan: Option<Planner<'_, T>>,
    predicted: impl Fn(&T) -> f64 + Sync,
) -> Result<Kept<T>> {
    let screen = |c: &Computation| weigh(c).map_or(f64::INFINITY, |p| predicted(&p));
    let plan_in_full = |c: &Computation| match plan {
        Some(plan) => plan(c),
        None => weigh(c),
    };
    let forms = match rules {
        Some(rules) if rules.force_merges => {
            let forms = graph_forms(graph, rules)?;
            if let Some(merged) = forms.iter().find(|f| !f.derived.is_empty()) {
                let snapshot = merged.graph.snapshot();
                return Ok(Kept {
                    planned: plan_in_full(snapshot.computation())?,
                    graph: snapshot,
                    rewrites: Some(merged.changes.clone()),
                    derived: merged.derived.clone(),
                });
            }
            forms
        }
        Some(rules) => screened_forms(graph, rules, Some(&screen))?,
        None => Vec::new(),
    };
    let fuse = rules.and_then(|r| r.epilogues.as_ref());
    let comp = graph.computation();
    let sites = fuse.map(|f| f.sites(comp)).unwrap_or_default();
    // What the written graph has as written: its forms' parts, then its epilogue sites.
    let mut written_changes: Option<Vec<Change>> = forms.first().map(|w| w.changes.clone());
    if let Some(fuse) = fuse.filter(|_| !sites.is_empty()) {
        written_changes.get_or_insert_with(Vec::new).extend(sites.iter().map(|s| s.change(comp, fuse, false)));
    }
    let written =
        |planned: T| Kept { planned, graph: graph.clone(), rewrites: written_changes.clone(), derived: Vec::new() };
    let extra = forms.iter().skip(1).map(|f| (f.graph.snapshot(), f.changes.clone(), f.derived.clone()));
    let written_base = (graph.clone(), written_changes.clone().unwrap_or_default(), Vec::new());
    let mut candidates = candidates(std::iter::once(written_base).chain(extra), fuse, &sites)?;
    if candidates.is_empty() {
        return Ok(written(plan_in_full(comp)?));
    }
    // Without a planner of its own, the weighed plans are final: the written graph's and the
    // candidates' are kept (the written graph's failure is then the caller's error), else
    // only their times.
    let final_weighs = plan.is_none();
    let score = |c: &Computation| match weigh(c) {
        Ok(t) => (predicted(&t), final_weighs.then_some(t)),
        Err(_) => (f64::INFINITY, None),
    };
    let score = &score;
    let (first, weighed) = std::thread::scope(|scope| {
        let handles: Vec<_> =
            candidates.iter().map(|c| scope.spawn(move || quietly(|| score(c.graph.computation())))).collect();
        let first = if final_weighs { weigh(comp).map(|t| (predicted(&t), Some(t))) } else { Ok((screen(comp), None)) };
        let weighed: Vec<(f64, Option<T>)> =
            handles.into_iter().map(|h| h.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic))).collect();
        (first, weighed)
    });
    let (first, first_plan) = first?;
    let best =
        (0..weighed.len()).filter(|&i| weighed[i].0 < first).min_by(|&a, &b| weighed[a].0.total_cmp(&weighed[b].0));
    let kept = |choice: Candidate, planned: T| Kept {
        planned,
        graph: choice.graph,
        rewrites: Some(choice.changes),
        derived: choice.derived,
    };
    let Some(best) = best else {
        // No candidate beats the written graph.
        return Ok(written(match first_plan {
            Some(planned) => planned,
            None => plan_in_full(comp)?,
        }));
    };
    let choice = candidates.swap_remove(best);
    let Some(plan) = plan else {
        // The weighed plans are final.
        let planned = weighed.into_iter().nth(best).and_then(|w| w.1).expect("a weighed candidate's plan");
        return Ok(kept(choice, planned));
    };
    // The form weighed fastest against the written graph, both planned in full: the
    // refinement can reverse an order the unrefined plans gave.
    let (mine, other) = std::thread::scope(|scope| {
        let other = scope.spawn(|| quietly(|| plan(choice.graph.computation()).ok()));
        (plan(comp), other.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)))
    });
    let mine = mine?;
    match other {
        Some(planned) if predicted(&planned) < predicted(&mine) => Ok(kept(choice, planned)),
        _ => Ok(written(mine)),
    }
}

/// The forms [`fastest_form`] weighs against the written graph: every form of `bases` but the
/// first (the written graph, whose epilogue sites are `sites`), then, where `fuse` finds
/// epilogue sites in one, that form with them fused (the written graph's included). Each
/// base is a graph, its changes and its derived inputs.
fn candidates(
    bases: impl Iterator<Item = (Snapshot, Vec<Change>, Vec<Derived>)>,
    fuse: Option<&Fuse>,
    sites: &[epilogue::Site],
) -> Result<Vec<Candidate>> {
    let mut candidates = Vec::new();
    for (i, (base, mut changes, derived)) in bases.enumerate() {
        let comp = base.computation();
        if let Some(fuse) = fuse {
            let here = if i == 0 { sites.to_vec() } else { fuse.sites(comp) };
            if i > 0 {
                changes.extend(here.iter().map(|s| s.change(comp, fuse, false)));
            }
            if !here.is_empty() {
                // The base form's changes, its sites fused.
                let mut fused: Vec<Change> = changes.iter().filter(|c| c.rule != fuse.name).cloned().collect();
                fused.extend(here.iter().map(|s| s.change(comp, fuse, true)));
                let graph = epilogue::fused(comp, &here)?.snapshot();
                candidates.push(Candidate { graph, changes: fused, derived: derived.clone() });
            }
        }
        if i > 0 {
            candidates.push(Candidate { graph: base, changes, derived });
        }
    }
    Ok(candidates)
}

/// Runs `f` with its `tracing` events dropped, for the plans [`fastest_form`] makes on threads
/// of their own: each would repeat every stage's line once per form, interleaved with the
/// caller's. (A thread with no subscriber of its own drops them too, but where the process's
/// only subscriber is scoped to the caller's thread, as Python's progress callback is, such a
/// thread reaching an event first caches it as wanted by no one, for the caller's thread too:
/// tokio-rs/tracing#3611. A subscriber of its own keeps the general path.)
fn quietly<R>(f: impl FnOnce() -> R) -> R {
    tracing::subscriber::with_default(tracing::subscriber::NoSubscriber::default(), f)
}

/// A form [`fastest_form`] may keep: its graph, what it rewrote, its derived inputs.
struct Candidate {
    graph: Snapshot,
    changes: Vec<Change>,
    derived: Vec<Derived>,
}

/// The forms [`fastest_form`] weighs under `rules`, as an experiment's joint optimizer plans
/// them ([`einsum_experiments::experiment::Forms`]: the `dp+rewrites` column).
#[derive(Clone, Debug, Default)]
pub struct JointForms {
    /// The rewrites weighed.
    pub rules: Rules,
}

impl einsum_experiments::experiment::Forms for JointForms {
    fn fastest(
        &self,
        graph: &Snapshot,
        plan: &(
             dyn Fn(
            &Computation,
        ) -> std::result::Result<einsum_compile::pipeline::Planned, einsum_compile::PipelineError>
                 + Sync
         ),
    ) -> std::result::Result<(einsum_compile::pipeline::Planned, Snapshot), String> {
        let kept = fastest_form(graph, Some(&self.rules), |c| Ok(plan(c)?), None, |p| p.compiled.predicted_ms)
            .map_err(|e| e.to_string())?;
        Ok((kept.planned, kept.graph))
    }
}

/// How many forms of the contraction networks [`fastest_form`] weighs: the written one and
/// the three cheapest others.
pub const DEFAULT_FORMS: usize = 4;

/// [`graph_forms`] under the default rules ([`Rules::default`]: association, the merge of
/// projections) with `k` forms of the contraction networks.
pub fn default_forms(graph: &Snapshot, k: usize) -> Result<Vec<Form>> {
    graph_forms(graph, &Rules { forms: k, ..Rules::default() })
}

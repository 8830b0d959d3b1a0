//! Seeds that know the machine's nodes: on a machine of several nodes (`dgx-a100xN`,
//! `dgx-h100xN`), the links inside a node (NVLink through an NVSwitch, 300 or 450 GB/s per
//! GPU) are an order of magnitude faster than the NICs between nodes (25 or 50 GB/s per GPU),
//! so a flat ring or tree over all the sites is limited by the few NICs its inter-node edges
//! cross. The hierarchical plan of a group keeps traffic inside a node wherever it can and
//! crosses between nodes once per node, between *corresponding* GPUs (the same local index
//! in their nodes), so that with the groups' roots spread over the local indices every NIC
//! carries an equal share in parallel:
//!
//! 1. **Intra-node reduction.** In every node that holds atoms of the group, the holders send
//!    their atoms to the node's *owner*: the site with the root's local index (an intra-node
//!    reduce-scatter when the roots of the groups differ, as [`super::search`]'s balanced
//!    roots make them for the chunks of an all-reduce). In the root's node, a second seed
//!    reduces along a chain ending at the root instead ([`RootReduction`]): the same bytes,
//!    sent a few at a time, so that the partials bound for other nodes finish first.
//! 2. **Inter-node exchange.** Each owner outside the root's node sends its node's partial
//!    sum to the root (one NIC transfer per node); the root forms the whole aggregate and
//!    sends it to the owners of the other nodes that need it (one NIC transfer per node).
//!    Owners share the root's local index, so every transfer between nodes joins
//!    corresponding GPUs and uses their own NICs.
//! 3. **Intra-node spreading.** The root and each owner multicast the aggregate to the
//!    targets of their node (an intra-node all-gather).
//!
//! For an all-gather (one holder per group) step 1 is empty and the root is the holder; for
//! an all-to-all-like repartition (one holder and one target in another node) the atom goes
//! to the target's corresponding GPU in the holder's node, then across. Groups whose holders
//! and targets all lie in one node get the same plan restricted to that node: a star
//! reduction to the root and a multicast from it.
//!
//! The seeds are ordinary bodies: the search validates them with
//! [`crate::Program::validate_with`], simulates them, and keeps the best of all its seeds;
//! on a machine of one node none is built, so the synthesis is unchanged there.

use std::collections::{BTreeMap, BTreeSet};

use einsum_sim::Topology;

use super::plan::Group;
use crate::action::Action;
use crate::aggregate::Aggregate;
use crate::ids::SiteId;

/// The sites of the program grouped by node, each node's sites ascending (its local
/// indices), and the node and local index of every site.
struct NodeMap {
    /// The program's sites of each node, ascending, by node number.
    members: BTreeMap<usize, Vec<SiteId>>,
    /// Each site's node and local index.
    place: BTreeMap<SiteId, (usize, usize)>,
}

impl NodeMap {
    /// The program's `sites` on `topology`; `None` when they are not all on it.
    fn new(sites: &[SiteId], topology: &Topology) -> Option<NodeMap> {
        let mut members: BTreeMap<usize, Vec<SiteId>> = BTreeMap::new();
        for &s in sites {
            members.entry(topology.node(s)?).or_default().push(s);
        }
        let mut place = BTreeMap::new();
        for (&node, list) in members.iter_mut() {
            list.sort();
            for (i, &s) in list.iter().enumerate() {
                place.insert(s, (node, i));
            }
        }
        Some(NodeMap { members, place })
    }

    /// The node of `site` (a site of the program).
    fn node(&self, site: SiteId) -> Option<usize> {
        self.place.get(&site).map(|(n, _)| *n)
    }

    /// The site of `node` that corresponds to `root` (the same local index), or, when the
    /// node has fewer sites, its first site that `prefer` accepts, else its first site.
    fn owner(&self, node: usize, root: SiteId, prefer: &dyn Fn(SiteId) -> bool) -> Option<SiteId> {
        let (root_node, index) = *self.place.get(&root)?;
        if node == root_node {
            return Some(root);
        }
        let list = self.members.get(&node)?;
        list.get(index).or_else(|| list.iter().find(|s| prefer(**s))).or_else(|| list.first()).copied()
    }
}

/// How the root's node reduces its atoms to the root.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RootReduction {
    /// Every holder sends to the root at once, as the other nodes do to their owners.
    Star,
    /// A pipeline along the node's sites ending at the root. It sends the same bytes but a
    /// few at a time, so the partials the other nodes must send across (stars, all at once)
    /// finish sooner and the NICs start earlier: the simulator shares a port fairly, and
    /// the chunk atoms cannot be cut to pipeline the phases otherwise.
    Chain,
}

impl RootReduction {
    /// Both.
    pub(crate) const ALL: [RootReduction; 2] = [RootReduction::Star, RootReduction::Chain];
}

/// Whether the machine has several nodes among `sites` and some group's holders and targets
/// span more than one of them: when the hierarchical seed could differ from the flat ones.
fn applies(gs: &[Group], sites: &[SiteId], topology: &Topology) -> bool {
    NodeMap::new(sites, topology).is_some_and(|map| gs.iter().any(|g| nodes_of(g, &map).len() > 1))
}

/// The nodes a group's holders and targets lie in.
fn nodes_of(group: &Group, map: &NodeMap) -> BTreeSet<usize> {
    group.holders.keys().chain(&group.targets).filter_map(|s| map.node(*s)).collect()
}

/// The hierarchical body for groups `gs` with roots `roots` (one per group, a holder or a
/// target of it) over the program's `sites` of `topology`, or `None` when it does not apply
/// (one node, or no group spanning nodes) or a site is off the topology. The plan of each
/// group is in the module docs.
pub(crate) fn body(
    gs: &[Group],
    roots: &[SiteId],
    sites: &[SiteId],
    topology: &Topology,
    root_reduction: RootReduction,
) -> Option<BTreeSet<Action>> {
    if !applies(gs, sites, topology) {
        return None;
    }
    let map = NodeMap::new(sites, topology)?;
    let mut acts = BTreeSet::new();
    for (group, &root) in gs.iter().zip(roots) {
        plan_group(group, root, &map, root_reduction, &mut acts)?;
    }
    Some(acts)
}

/// The three phases of one group's hierarchical plan (module docs), added to `acts`.
fn plan_group(
    group: &Group,
    root: SiteId,
    map: &NodeMap,
    root_reduction: RootReduction,
    acts: &mut BTreeSet<Action>,
) -> Option<()> {
    let x = &group.aggregate;
    if group.trivial() {
        return Some(());
    }
    let root_node = map.node(root)?;
    let nodes = nodes_of(group, map);
    let mut owners: BTreeMap<usize, SiteId> = BTreeMap::new();
    for &node in &nodes {
        let holds_or_needs = |s: SiteId| group.holders.contains_key(&s) || group.targets.contains(&s);
        owners.insert(node, map.owner(node, root, &holds_or_needs)?);
    }
    // 1. Intra-node reduction of each node's atoms to its owner, whose partial then holds
    //    every atom of the group in its node. In the root's node under
    //    `RootReduction::Chain`, a pipeline ending at the root instead.
    let mut partial: BTreeMap<usize, Aggregate> = BTreeMap::new();
    let mut chain: Vec<(SiteId, Aggregate)> = Vec::new();
    for (&s, part) in &group.holders {
        let node = map.node(s)?;
        let owner = owners[&node];
        if s != owner && node == root_node && root_reduction == RootReduction::Chain {
            chain.push((s, part.clone()));
        } else if s != owner {
            acts.insert(Action::new(part.clone(), s, [owner]));
        }
        partial.entry(node).and_modify(|p| *p = p.union(part)).or_insert_with(|| part.clone());
    }
    // the chain starts just after the root in local order, so the groups' chains start at
    // different sites
    let index = |s: SiteId| map.place.get(&s).map_or(0, |(_, i)| *i);
    let width = map.members.get(&root_node).map_or(1, Vec::len).max(1);
    chain.sort_by_key(|(s, _)| ((index(*s) + width - index(root)) % width, *s));
    let mut carried: Option<Aggregate> = None;
    for (i, (s, part)) in chain.iter().enumerate() {
        let sum = carried.as_ref().map_or_else(|| part.clone(), |c| c.union(part));
        let next = chain.get(i + 1).map_or(root, |(n, _)| *n);
        acts.insert(Action::new(sum.clone(), *s, [next]));
        carried = Some(sum);
    }
    // 2. Inter-node: partials to the root, then the whole aggregate to the other owners that
    //    need it (their node has targets).
    for (&node, part) in &partial {
        if node != root_node {
            acts.insert(Action::new(part.clone(), owners[&node], [root]));
        }
    }
    let targets_in = |node: usize| -> BTreeSet<SiteId> {
        group.targets.iter().copied().filter(|t| map.node(*t) == Some(node)).collect()
    };
    // 3. Spreading inside each node, the root's node included, from the root or the owner.
    let mut from_root: BTreeSet<SiteId> = targets_in(root_node);
    from_root.remove(&root);
    for &node in nodes.iter().filter(|n| **n != root_node) {
        let local = targets_in(node);
        if local.is_empty() {
            continue;
        }
        let owner = owners[&node];
        from_root.insert(owner);
        let rest: BTreeSet<SiteId> = local.into_iter().filter(|t| *t != owner).collect();
        if !rest.is_empty() {
            acts.insert(Action::new(x.clone(), owner, rest));
        }
    }
    let root_holds_all = x.len() == 1 && group.holders.contains_key(&root);
    if !from_root.is_empty() {
        acts.insert(Action::new(x.clone(), root, from_root));
    } else if group.targets.contains(&root) && !root_holds_all {
        acts.insert(Action::local(x.clone(), root));
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synth::canonical_membership;
    use crate::synth::collectives;
    use crate::synth::plan::groups;

    fn setup(preamble: &crate::Program, preset: &str) -> (Vec<Group>, Vec<SiteId>, Topology) {
        let m = canonical_membership(preamble).unwrap();
        let gs = groups(preamble, &m).unwrap();
        let sites: Vec<SiteId> = preamble.sites().into_iter().collect();
        (gs, sites, Topology::preset(preset).unwrap())
    }

    /// The sends of `acts` that cross between nodes (8 sites per node), as (from, to).
    fn crossings(acts: &BTreeSet<Action>) -> Vec<(usize, usize)> {
        acts.iter()
            .flat_map(|a| {
                let s = a.source_site().unwrap().0;
                a.dests.iter().filter(move |d| d.0 / 8 != s / 8).map(move |d| (s, d.0))
            })
            .collect()
    }

    #[test]
    fn all_reduce_crosses_between_corresponding_gpus_only() {
        let p = collectives::all_reduce(16, 1.0);
        let (gs, sites, t) = setup(&p, "dgx-a100x2");
        // root of chunk j: site j (as the search's balanced roots give)
        let roots: Vec<SiteId> = (0..16).map(SiteId).collect();
        for reduction in RootReduction::ALL {
            let acts = body(&gs, &roots, &sites, &t, reduction).unwrap();
            let crossing = crossings(&acts);
            // per chunk: the other node's partial in, the sum out
            assert_eq!(crossing.len(), 32, "{reduction:?}");
            assert!(crossing.iter().all(|(s, d)| s % 8 == d % 8), "{crossing:?}");
            // per chunk and node, 7 sends inside the node while reducing and 7 while spreading
            let sends = acts.iter().map(|a| a.dests.len()).sum::<usize>();
            assert_eq!(sends, 32 + 16 * 2 * 7 + 16 * 2 * 7, "{reduction:?}");
            assert!(p.with_body(acts).validate().is_ok(), "{reduction:?}");
        }
    }

    #[test]
    fn all_gather_crosses_once_per_atom_and_node() {
        let p = collectives::all_gather(16, 1.0);
        let (gs, sites, t) = setup(&p, "dgx-h100x2");
        let roots: Vec<SiteId> = gs.iter().map(|g| *g.holders.keys().next().unwrap()).collect();
        let acts = body(&gs, &roots, &sites, &t, RootReduction::Star).unwrap();
        let crossing = crossings(&acts);
        assert_eq!(crossing.len(), 16);
        assert!(crossing.iter().all(|(s, d)| s % 8 == d % 8));
        assert!(p.with_body(acts).validate().is_ok());
    }

    #[test]
    fn one_node_or_one_node_groups_build_nothing() {
        let p = collectives::all_reduce(8, 1.0);
        let (gs, sites, t) = setup(&p, "dgx-a100");
        let roots: Vec<SiteId> = (0..8).map(SiteId).collect();
        assert!(body(&gs, &roots, &sites, &t, RootReduction::Star).is_none());
        // eight sites of a two-node machine all lie in node 0
        let t2 = Topology::preset("dgx-a100x2").unwrap();
        assert!(body(&gs, &roots, &sites, &t2, RootReduction::Star).is_none());
    }
}

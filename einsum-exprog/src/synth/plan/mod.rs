//! Structured sub-programs for one required aggregate: the templates the search seeds with
//! and re-plans with.
//!
//! A [`Group`] is one aggregate `X` that `OUT` requires, with every site that must end with it
//! (under a membership) and, for every site holding atoms of `X`, those atoms. A [`Plan`]
//! says how to deliver it:
//!
//! - [`Kind::Rooted`]: reduce the holders' partial aggregates to a root, then spread `X` from
//!   the root to the targets. Each phase has a [`Shape`]: a star (everyone sends to the root /
//!   the root multicasts), a chain along a ring order (the pipeline of a ring collective), or
//!   a binomial tree along that order (recursive halving / doubling). Distinct roots for the
//!   groups of an all-reduce make a reduce-scatter followed by an all-gather.
//! - [`Kind::Butterfly`]: recursive doubling (Example 5.2) when the holders are exactly the
//!   targets and there are a power of two of them.
//!
//! With `relay`, every transfer whose direct route is slower than some two-hop route is sent
//! through the best intermediate site (relay introduction applied wherever it helps the
//! bottleneck: on the DGX-V100, around the PCIe bridge).
//!
//! The ring orders come from the machine: the sites in order, the Hamiltonian cycle with the
//! widest bottleneck (then the largest total bandwidth), its reverse, and the best cycle that
//! shares no link with it, and its reverse (on the DGX-V100 the double-link ring
//! 0-3-2-1-5-6-7-4 and the single-link ring).

mod build;
mod routes;
#[cfg(test)]
mod tests;

pub(crate) use build::build;
pub(crate) use routes::SiteRoutes;

use std::collections::{BTreeMap, BTreeSet};

use crate::aggregate::Aggregate;
use crate::ids::SiteId;
use crate::membership::Membership;
use crate::program::Program;

/// Sites up to which the best ring is found exhaustively (`(n-1)!` cycles).
const EXHAUSTIVE_RING_SITES: usize = 8;

/// One required aggregate, where it must go and where its atoms are.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Group {
    /// The aggregate.
    pub aggregate: Aggregate,
    /// Its size in bytes.
    pub bytes: f64,
    /// Every site that must end with it.
    pub targets: BTreeSet<SiteId>,
    /// The atoms of the aggregate at each site that holds some.
    pub holders: BTreeMap<SiteId, Aggregate>,
}

impl Group {
    /// Whether the aggregate is one atom that is where it is needed and needed nowhere else.
    pub(crate) fn trivial(&self) -> bool {
        self.aggregate.len() == 1 && self.targets.iter().all(|t| self.holders.contains_key(t))
    }

    /// Whether recursive doubling applies: holders = targets, a power of two of them (≥ 2).
    pub fn butterfly_applies(&self) -> bool {
        let n = self.targets.len();
        n >= 2 && n.is_power_of_two() && self.holders.keys().copied().collect::<BTreeSet<_>>() == self.targets
    }

    /// The sites a root may sensibly be: holders and targets.
    pub fn root_candidates(&self) -> Vec<SiteId> {
        let mut c: BTreeSet<SiteId> = self.targets.clone();
        c.extend(self.holders.keys().copied());
        c.into_iter().collect()
    }
}

/// The groups of `preamble`'s `OUT` under `membership`: one per distinct required aggregate
/// (requirements of the same aggregate merge their targets), in aggregate order. `None` if a
/// target partition has no sites in `membership` or an atom is not in `IN`.
pub(crate) fn groups(preamble: &Program, membership: &Membership) -> Option<Vec<Group>> {
    let mut targets: BTreeMap<&Aggregate, BTreeSet<SiteId>> = BTreeMap::new();
    for r in &preamble.outputs {
        targets.entry(&r.aggregate).or_default().extend(membership.resolve(&r.target)?);
    }
    let mut out = Vec::new();
    for (aggregate, targets) in targets {
        let mut holders: BTreeMap<SiteId, Vec<crate::ids::AtomId>> = BTreeMap::new();
        for atom in aggregate.atoms() {
            holders.entry(preamble.inputs.get(atom)?.site).or_default().push(atom.clone());
        }
        let holders: Option<BTreeMap<SiteId, Aggregate>> =
            holders.into_iter().map(|(s, atoms)| Aggregate::new(atoms).ok().map(|a| (s, a))).collect();
        let bytes = preamble.aggregate_bytes(aggregate);
        out.push(Group { aggregate: aggregate.clone(), bytes, targets, holders: holders? });
    }
    Some(out)
}

/// How one phase of a rooted plan moves data.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Shape {
    /// Straight to (or from) the root.
    Star,
    /// A pipeline along the ring order.
    Chain,
    /// A binomial tree along the ring order.
    Tree,
    /// The machine's fastest-path tree from (or to) the root: every site reaches the root by
    /// the route of least time per byte, relaying (and, while reducing, aggregating) on the
    /// way; the plan's salt perturbs the edge times to vary it.
    Fastest,
}

/// Every shape.
pub(crate) const SHAPES: [Shape; 4] = [Shape::Star, Shape::Chain, Shape::Tree, Shape::Fastest];

/// The structure of a plan.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Kind {
    /// Reduce to `root` in shape `reduce`, then spread from it in shape `spread`.
    Rooted {
        /// Where the aggregate is formed.
        root: SiteId,
        /// How the partials reach the root.
        reduce: Shape,
        /// How the aggregate reaches the targets.
        spread: Shape,
    },
    /// Reduce to `root` along the explicit tree `reduce` (each site sends its partial, with
    /// its children's, to its parent) and spread along `spread` (each site receives from its
    /// parent). Both trees span every site; the sites no holder or target needs are pruned.
    Trees {
        /// Where the aggregate is formed.
        root: SiteId,
        /// The reduction tree.
        reduce: Tree,
        /// The spreading tree.
        spread: Tree,
    },
    /// Recursive doubling (falls back to a rooted tree where it does not apply).
    Butterfly,
}

impl Kind {
    /// The root, for rooted plans.
    pub fn root(&self) -> Option<SiteId> {
        match self {
            Kind::Rooted { root, .. } | Kind::Trees { root, .. } => Some(*root),
            Kind::Butterfly => None,
        }
    }
}

/// How to deliver one group.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Plan {
    /// The structure.
    pub kind: Kind,
    /// Which of [`SiteRoutes::orders`] chains and trees follow.
    pub order: usize,
    /// Whether to route slow transfers through a relay.
    pub relay: bool,
    /// Perturbs the edge times of [`Shape::Fastest`] trees (0: none).
    pub salt: u64,
}

impl Plan {
    /// A short description for reports, e.g. `star/chain, ring 1, relays`.
    pub fn describe(&self) -> String {
        let kind = match &self.kind {
            Kind::Rooted { reduce, spread, .. } => format!("{reduce:?}/{spread:?}").to_lowercase(),
            Kind::Trees { .. } => "trees".to_string(),
            Kind::Butterfly => "butterfly".to_string(),
        };
        let salt = if self.salt == 0 { String::new() } else { format!(", salt {:x}", self.salt & 0xffff) };
        format!("{kind}, ring {}{}{salt}", self.order, if self.relay { ", relays" } else { "" })
    }
}

/// Bytes queued on each topology resource (by resource index), for congestion-aware trees:
/// a dense table (resources are numbered from 0), read once per resource of every edge a
/// tree considers.
#[derive(Clone, Debug, Default)]
pub(crate) struct Load(Vec<f64>);

impl Load {
    /// No load anywhere.
    pub fn new() -> Load {
        Load::default()
    }

    /// Whether no bytes are queued anywhere.
    fn is_empty(&self) -> bool {
        self.0.iter().all(|&b| b == 0.0)
    }

    /// The bytes queued on resource `id`.
    fn get(&self, id: usize) -> f64 {
        self.0.get(id).copied().unwrap_or(0.0)
    }

    /// Queues `bytes` more on resource `id`.
    fn add(&mut self, id: usize, bytes: f64) {
        if self.0.len() <= id {
            self.0.resize(id + 1, 0.0);
        }
        self.0[id] += bytes;
    }
}

/// A spanning tree as each site's parent. For a reduction a site sends to its parent; for a
/// spread a site receives from its parent.
pub(crate) type Tree = BTreeMap<SiteId, SiteId>;

/// The sites of `tree` on the way from some site of `keep` to `root` (`root` excluded),
/// with their depth, deepest first (ties by site).
pub(crate) fn pruned(tree: &Tree, root: SiteId, keep: impl Iterator<Item = SiteId>) -> Vec<(SiteId, usize)> {
    let mut needed: BTreeSet<SiteId> = BTreeSet::new();
    for mut s in keep {
        while s != root && needed.insert(s) {
            match tree.get(&s) {
                Some(p) => s = *p,
                None => break,
            }
        }
    }
    let depth = |mut s: SiteId| {
        let mut d = 0;
        while s != root && d <= tree.len() {
            s = tree.get(&s).copied().unwrap_or(root);
            d += 1;
        }
        d
    };
    let mut out: Vec<(SiteId, usize)> = needed.into_iter().map(|s| (s, depth(s))).collect();
    out.sort_by_key(|(s, d)| (std::cmp::Reverse(*d), *s));
    out
}

/// `tree` with `v` hung under `p` instead, unless `p` is `v` or below it (which would cut
/// the tree).
pub(crate) fn reparent(tree: &Tree, root: SiteId, v: SiteId, p: SiteId) -> Option<Tree> {
    if v == root || v == p {
        return None;
    }
    let mut at = p;
    let mut steps = 0;
    while at != root {
        if at == v || steps > tree.len() {
            return None;
        }
        at = *tree.get(&at)?;
        steps += 1;
    }
    let mut t = tree.clone();
    t.insert(v, p);
    Some(t)
}

/// Plans for `gs` rooted at `roots`, with explicit trees chosen one group at a time (in the
/// order `sequence`) around the load the earlier groups put on the machine's resources.
pub(crate) fn congestion_aware(gs: &[Group], roots: &[SiteId], sequence: &[usize], machine: &SiteRoutes) -> Vec<Plan> {
    let mut load = Load::new();
    let mut plans: Vec<Option<Plan>> = vec![None; gs.len()];
    for &g in sequence {
        let (Some(group), Some(&root)) = (gs.get(g), roots.get(g)) else { continue };
        let reduce = machine.tree(root, true, 0, &load, group.bytes);
        let senders = group.holders.keys().copied().filter(|s| *s != root);
        for (s, _) in pruned(&reduce, root, senders) {
            if let Some(&up) = reduce.get(&s) {
                machine.add_load(&mut load, s, up, group.bytes);
            }
        }
        let spread = machine.tree(root, false, 0, &load, group.bytes);
        for (s, _) in pruned(&spread, root, group.targets.iter().copied()) {
            if let Some(&from) = spread.get(&s) {
                machine.add_load(&mut load, from, s, group.bytes);
            }
        }
        plans[g] = Some(Plan { kind: Kind::Trees { root, reduce, spread }, order: 0, relay: false, salt: 0 });
    }
    plans
        .into_iter()
        .zip(roots)
        .map(|(p, &root)| {
            p.unwrap_or(Plan {
                kind: Kind::Rooted { root, reduce: Shape::Star, spread: Shape::Star },
                order: 0,
                relay: false,
                salt: 0,
            })
        })
        .collect()
}

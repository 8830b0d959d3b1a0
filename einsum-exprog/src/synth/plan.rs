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

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashMap};

use einsum_sim::Topology;

use crate::action::Action;
use crate::aggregate::Aggregate;
use crate::ids::SiteId;
use crate::membership::Membership;
use crate::program::Program;
use crate::target::Target;

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

/// The route between two sites: its bandwidth when alone and the resources it crosses.
#[derive(Clone, Debug, Default)]
struct Route {
    bandwidth: f64,
    /// (resource index, capacity in bytes/s).
    resources: Vec<(usize, f64)>,
}

/// What the plans need to know about the machine: routes between the program's sites and
/// ring orders over them.
#[derive(Clone, Debug)]
pub(crate) struct SiteRoutes {
    /// The program's sites, ascending.
    pub sites: Vec<SiteId>,
    /// Position of each site id in `sites` (`usize::MAX` for ids not in it).
    slot: Vec<usize>,
    /// Routes by slot pair (empty on the diagonal).
    routes: Vec<Vec<Route>>,
    /// Capacity of each resource some route crosses, by resource index (0 for the others):
    /// [`SiteRoutes::tree`] prices every resource once per tree from it.
    capacities: Vec<f64>,
    /// The resource indices of every route, flat by slot pair: the route from slot `i` to
    /// slot `j` crosses `route_ids[route_start[i * k + j]..route_start[i * k + j + 1]]`
    /// (`k` sites), so that a tree's inner loop reads one contiguous array.
    route_ids: Vec<usize>,
    route_start: Vec<usize>,
    /// Lower bounds on every edge time into and out of each slot, which let
    /// [`SiteRoutes::tree`] stop once no later relaxation can change a parent.
    bounds: EdgeBounds,
    /// The trees [`SiteRoutes::tree`] built on an empty load, by (root, inbound, salt, bytes'
    /// bits): the search asks for the same unloaded trees of a group's root again with every
    /// proposal that re-plans or reparents it, and each costs `O(k²)` edges.
    unloaded: RefCell<HashMap<(SiteId, bool, u64, u64), Tree>>,
    /// Ring orders: permutations of `sites`.
    pub orders: Vec<Vec<SiteId>>,
    /// Each site's position in each ring order, by order and site id (`usize::MAX` for ids
    /// not in it): [`build`] ranks a group's sites along its plan's order, and a table by
    /// site id costs it no map per build.
    positions: Vec<Vec<usize>>,
    /// Whether every pair has the same bandwidth (relays never help).
    pub uniform: bool,
}

impl SiteRoutes {
    /// The machine facts for `sites` on `topology` (sites out of its range get no routes).
    pub fn new(sites: &BTreeSet<SiteId>, topology: &Topology) -> SiteRoutes {
        let sites: Vec<SiteId> = sites.iter().copied().collect();
        let n = sites.iter().map(|s| s.0 + 1).max().unwrap_or(0);
        let mut slot = vec![usize::MAX; n];
        for (i, s) in sites.iter().enumerate() {
            slot[s.0] = i;
        }
        let routes: Vec<Vec<Route>> = sites
            .iter()
            .map(|&a| {
                sites
                    .iter()
                    .map(|&b| {
                        let resources: Vec<(usize, f64)> = topology
                            .route(a, b)
                            .unwrap_or_default()
                            .into_iter()
                            .filter_map(|r| topology.resource(r).map(|res| (r.0, res.capacity)))
                            .collect();
                        let bandwidth = resources.iter().map(|(_, c)| *c).reduce(f64::min).unwrap_or(0.0);
                        Route { bandwidth, resources }
                    })
                    .collect()
            })
            .collect();
        let mut capacities = Vec::new();
        for (id, cap) in routes.iter().flatten().flat_map(|r| &r.resources) {
            if capacities.len() <= *id {
                capacities.resize(id + 1, 0.0);
            }
            capacities[*id] = *cap;
        }
        let mut route_start = vec![0];
        let mut route_ids = Vec::new();
        for r in routes.iter().flatten() {
            route_ids.extend(r.resources.iter().map(|(id, _)| *id));
            route_start.push(route_ids.len());
        }
        let bounds = EdgeBounds::new(&routes);
        let mut m = SiteRoutes {
            sites,
            slot,
            routes,
            capacities,
            route_ids,
            route_start,
            bounds,
            unloaded: RefCell::default(),
            orders: Vec::new(),
            positions: Vec::new(),
            uniform: true,
        };
        let first = m.pair_bandwidths().next();
        let uniform = m.pair_bandwidths().all(|b| Some(b) == first);
        m.uniform = uniform;
        m.orders = m.ring_orders();
        m.positions = m
            .orders
            .iter()
            .map(|order| {
                let mut at = vec![usize::MAX; n];
                for (i, s) in order.iter().enumerate() {
                    at[s.0] = i;
                }
                at
            })
            .collect();
        m
    }

    /// The position of `site` in ring order `order` (in `sites` for an order out of range,
    /// as [`build`] falls back to), if it is in it.
    fn position(&self, order: usize, site: SiteId) -> Option<usize> {
        let at = self.positions.get(order).unwrap_or(&self.slot);
        at.get(site.0).copied().filter(|&i| i != usize::MAX)
    }

    fn route(&self, a: SiteId, b: SiteId) -> Option<&Route> {
        let i = *self.slot.get(a.0)?;
        let j = *self.slot.get(b.0)?;
        self.routes.get(i)?.get(j)
    }

    fn pair_bandwidths(&self) -> impl Iterator<Item = f64> + '_ {
        self.sites
            .iter()
            .flat_map(move |&a| self.sites.iter().filter(move |&&b| b != a).map(move |&b| self.bandwidth(a, b)))
    }

    /// Bandwidth of the route from `a` to `b` when alone (0 if there is none).
    pub fn bandwidth(&self, a: SiteId, b: SiteId) -> f64 {
        self.route(a, b).map_or(0.0, |r| r.bandwidth)
    }

    /// Seconds to move `bytes` over each resource behind the `load` already on it, by
    /// resource index: `(load + bytes) / capacity`, computed once per resource so that a
    /// tree's `O(k²)` edges only look their resources up.
    fn resource_times(&self, load: &Load, bytes: f64) -> Vec<f64> {
        self.capacities.iter().enumerate().map(|(id, cap)| (load.get(id) + bytes) / cap).collect()
    }

    /// Seconds to move the bytes of `times` (from [`SiteRoutes::resource_times`]) from the
    /// site in slot `i` to the one in slot `j`: the slowest resource of the route (infinite
    /// without a route).
    fn edge_time(&self, i: usize, j: usize, times: &[f64]) -> f64 {
        let pair = i * self.sites.len() + j;
        let ids = &self.route_ids[self.route_start[pair]..self.route_start[pair + 1]];
        if ids.is_empty() {
            return f64::INFINITY;
        }
        ids.iter().map(|&id| times[id]).fold(0.0, f64::max)
    }

    /// Adds `bytes` to every resource of the route from `a` to `b`.
    pub fn add_load(&self, load: &mut Load, a: SiteId, b: SiteId, bytes: f64) {
        if let Some(r) = self.route(a, b) {
            for (id, _) in &r.resources {
                load.add(*id, bytes);
            }
        }
    }

    /// Seconds the busiest resource of the route from `a` to `b` needs for the bytes queued
    /// on it in `load` (infinite without a route): how congested the route is, for the
    /// search's decongesting move.
    pub fn route_time(&self, load: &Load, a: SiteId, b: SiteId) -> f64 {
        match self.route(a, b) {
            Some(r) if !r.resources.is_empty() => {
                r.resources.iter().map(|&(id, cap)| load.get(id) / cap).fold(0.0, f64::max)
            }
            _ => f64::INFINITY,
        }
    }

    /// The intermediate site whose two-hop route from `s` to `d` has the widest bottleneck, if
    /// that beats the direct route.
    pub fn relay(&self, s: SiteId, d: SiteId) -> Option<SiteId> {
        let direct = self.bandwidth(s, d);
        let mut best: Option<(f64, SiteId)> = None;
        for &w in &self.sites {
            if w == s || w == d {
                continue;
            }
            let b = self.bandwidth(s, w).min(self.bandwidth(w, d));
            if b > direct * 1.01 && best.is_none_or(|(bb, _)| b > bb) {
                best = Some((b, w));
            }
        }
        best.map(|(_, w)| w)
    }

    /// The fastest-path tree over all sites rooted at `root`: toward the root (`inbound`, for
    /// reductions) or away from it (for spreading). An edge costs the time to move `bytes`
    /// behind the `load` on its route, perturbed by up to 25% by `salt`; ties go to fewer
    /// hops, then the lower site. Sites with no route are left out. Trees on an empty load are
    /// built once per machine and then cloned from its cache.
    pub fn tree(&self, root: SiteId, inbound: bool, salt: u64, load: &Load, bytes: f64) -> Tree {
        if !load.is_empty() {
            return self.fastest_tree(root, inbound, salt, load, bytes);
        }
        let key = (root, inbound, salt, bytes.to_bits());
        if let Some(tree) = self.unloaded.borrow().get(&key) {
            return tree.clone();
        }
        let tree = self.fastest_tree(root, inbound, salt, load, bytes);
        self.unloaded.borrow_mut().insert(key, tree.clone());
        tree
    }

    /// [`SiteRoutes::tree`], built.
    fn fastest_tree(&self, root: SiteId, inbound: bool, salt: u64, load: &Load, bytes: f64) -> Tree {
        self.dijkstra(root, inbound, salt, load, bytes, true)
    }

    /// Dijkstra for [`SiteRoutes::fastest_tree`]. With `settled_enough`, it stops as soon as
    /// no unsettled site's parent can change any more, which gives the same tree: every
    /// site settled later has a distance of at least `f`, the least tentative distance left
    /// (distances only grow along paths), and every edge that could relax an unsettled site
    /// `v` costs at least `floor(v)` ([`EdgeBounds::floors`]; the salt only adds), so once
    /// `f + floor(v)` exceeds `v`'s tentative distance beyond the tie tolerance, no
    /// relaxation can replace `v`'s parent. On a switched machine the fastest tree is a star
    /// and this holds right after the root: `O(k)` per tree instead of `O(k²)`.
    fn dijkstra(&self, root: SiteId, inbound: bool, salt: u64, load: &Load, bytes: f64, settled_enough: bool) -> Tree {
        let bytes = bytes.max(1.0);
        let times = self.resource_times(load, bytes);
        let floors = if settled_enough { self.bounds.floors(inbound, &times, bytes) } else { Vec::new() };
        // The edge between the sites in slots `u` (settled) and `v`.
        let cost = |u: usize, v: usize| {
            let (from, to) = if inbound { (v, u) } else { (u, v) };
            let noise = if salt == 0 { 0.0 } else { 0.25 * unit_hash(salt, self.sites[from], self.sites[to]) };
            self.edge_time(from, to, &times) * (1.0 + noise)
        };
        let better =
            |x: (f64, usize), y: (f64, usize)| x.0 < y.0 * (1.0 - 1e-9) || (x.0 <= y.0 * (1.0 + 1e-9) && x.1 < y.1);
        // Dijkstra over the complete graph of the sites, with flat arrays by slot (sites are
        // ascending, so slot order is site order): O(k²) for k sites.
        let k = self.sites.len();
        let mut dist: Vec<Option<(f64, usize)>> = vec![None; k];
        let mut done = vec![false; k];
        let mut parent: Vec<Option<usize>> = vec![None; k];
        let Some(&root_slot) = self.slot.get(root.0).filter(|&&i| i != usize::MAX) else {
            return Tree::new();
        };
        dist[root_slot] = Some((0.0, 0));
        loop {
            // The first unsettled site, in site order, that no later one beats.
            let mut pick: Option<(usize, (f64, usize))> = None;
            for (i, d) in dist.iter().enumerate() {
                if let (Some(d), false) = (d, done[i])
                    && pick.is_none_or(|(_, best)| better(*d, best))
                {
                    pick = Some((i, *d));
                }
            }
            let Some((ui, du)) = pick else { break };
            done[ui] = true;
            for vi in 0..k {
                if vi == ui || done[vi] {
                    continue;
                }
                let c = cost(ui, vi);
                if !c.is_finite() {
                    continue;
                }
                let cand = (du.0 + c, du.1 + 1);
                if dist[vi].is_none_or(|dv| better(cand, dv)) {
                    dist[vi] = Some(cand);
                    parent[vi] = Some(ui);
                }
            }
            if settled_enough && parents_final(&dist, &done, &floors) {
                break;
            }
        }
        parent.iter().enumerate().filter_map(|(vi, p)| p.map(|ui| (self.sites[vi], self.sites[ui]))).collect()
    }

    /// The ring orders described in the module docs, without duplicates.
    fn ring_orders(&self) -> Vec<Vec<SiteId>> {
        let mut orders = vec![self.sites.clone()];
        if self.sites.len() >= 3 {
            let none = BTreeSet::new();
            if let Some(best) = self.best_cycle(&none) {
                let used: BTreeSet<(SiteId, SiteId)> = cycle_edges(&best).collect();
                let second = self.best_cycle(&used);
                orders.push(best.clone());
                orders.push(reversed(&best));
                if let Some(second) = second {
                    orders.push(second.clone());
                    orders.push(reversed(&second));
                }
            }
        }
        let mut seen = BTreeSet::new();
        orders.retain(|o| seen.insert(o.clone()));
        orders
    }

    /// The Hamiltonian cycle (starting at the first site) that avoids `excluded` undirected
    /// edges and maximises (bottleneck, total) bandwidth: exhaustive for few sites, greedy
    /// nearest-widest-neighbour otherwise. `None` if every cycle uses an excluded edge.
    fn best_cycle(&self, excluded: &BTreeSet<(SiteId, SiteId)>) -> Option<Vec<SiteId>> {
        let edge = |a: SiteId, b: SiteId| {
            if excluded.contains(&(a.min(b), a.max(b))) { 0.0 } else { self.bandwidth(a, b).min(self.bandwidth(b, a)) }
        };
        let n = self.sites.len();
        let mut best: Option<((f64, f64), Vec<SiteId>)> = None;
        if n <= EXHAUSTIVE_RING_SITES {
            let mut path = vec![self.sites[0]];
            let mut rest: Vec<SiteId> = self.sites[1..].to_vec();
            extend_cycles(&mut path, &mut rest, &edge, &mut best);
        } else {
            let mut path = vec![self.sites[0]];
            let mut rest: Vec<SiteId> = self.sites[1..].to_vec();
            while !rest.is_empty() {
                let last = path[path.len() - 1];
                let mut k = 0;
                for i in 1..rest.len() {
                    if edge(last, rest[i]) > edge(last, rest[k]) {
                        k = i;
                    }
                }
                path.push(rest.remove(k));
            }
            let score = cycle_score(&path, &edge);
            best = Some((score, path));
        }
        best.filter(|((bottleneck, _), _)| *bottleneck > 0.0).map(|(_, p)| p)
    }
}

/// Lower bounds on the edge times of a fastest-path tree, per site: an edge's time is the
/// largest `(load + bytes) / capacity` over the resources of its route, so it is at least
/// `bytes / b` for the widest route `b` into (out of) the site, and at least the time on
/// every resource that all routes into (out of) the site cross (its ingress or egress port
/// on a switched machine), with that resource's load.
#[derive(Clone, Debug)]
struct EdgeBounds {
    /// The widest bandwidth of a route into / out of each slot (0: none).
    widest_in: Vec<f64>,
    widest_out: Vec<f64>,
    /// The resources every route into / out of each slot crosses.
    common_in: Vec<Vec<usize>>,
    common_out: Vec<Vec<usize>>,
}

impl EdgeBounds {
    /// The bounds of the routes between slots (`routes[i][j]`: from slot `i` to slot `j`).
    fn new(routes: &[Vec<Route>]) -> EdgeBounds {
        let k = routes.len();
        let mut b = EdgeBounds {
            widest_in: vec![0.0; k],
            widest_out: vec![0.0; k],
            common_in: vec![Vec::new(); k],
            common_out: vec![Vec::new(); k],
        };
        let mut seen_in = vec![false; k];
        let mut seen_out = vec![false; k];
        let meet = |common: &mut Vec<usize>, seen: &mut bool, r: &Route| {
            let ids = r.resources.iter().map(|(id, _)| *id);
            if *seen {
                let here: BTreeSet<usize> = ids.collect();
                common.retain(|id| here.contains(id));
            } else {
                *common = ids.collect();
                *seen = true;
            }
        };
        for (i, row) in routes.iter().enumerate() {
            for (j, r) in row.iter().enumerate() {
                if i == j || r.resources.is_empty() {
                    continue;
                }
                b.widest_out[i] = b.widest_out[i].max(r.bandwidth);
                b.widest_in[j] = b.widest_in[j].max(r.bandwidth);
                meet(&mut b.common_out[i], &mut seen_out[i], r);
                meet(&mut b.common_in[j], &mut seen_in[j], r);
            }
        }
        b
    }

    /// For a tree toward the root (`inbound`: edges leave the site being relaxed) or away
    /// from it, each slot's least possible edge time given `times`, the seconds on each
    /// resource ([`SiteRoutes::resource_times`] for `bytes`). Every operand is non-negative,
    /// so the bound holds in floating point too (rounding is monotone).
    fn floors(&self, inbound: bool, times: &[f64], bytes: f64) -> Vec<f64> {
        let (widest, common) =
            if inbound { (&self.widest_out, &self.common_out) } else { (&self.widest_in, &self.common_in) };
        widest.iter().zip(common).map(|(&w, ids)| ids.iter().map(|&id| times[id]).fold(bytes / w, f64::max)).collect()
    }
}

/// Whether no later step of a fastest-tree Dijkstra can change the parent of an unsettled
/// site (see [`SiteRoutes::dijkstra`]): with `f` the least tentative distance of an unsettled
/// site, every unsettled `v` has `f + floors[v]` above its tentative distance by more than
/// the tie tolerance (and a site with none yet is final only when no site is left to
/// settle, or no edge can reach it).
fn parents_final(dist: &[Option<(f64, usize)>], done: &[bool], floors: &[f64]) -> bool {
    let f = dist
        .iter()
        .zip(done)
        .filter_map(|(d, &settled)| if settled { None } else { d.map(|d| d.0) })
        .fold(f64::INFINITY, f64::min);
    dist.iter().zip(done).zip(floors).all(|((d, &settled), &floor)| {
        settled
            || match d {
                None => f == f64::INFINITY || floor == f64::INFINITY,
                Some(d) => f + floor > d.0 * (1.0 + 1e-9),
            }
    })
}

/// A hash of (`salt`, `a`, `b`) in `[0, 1)`.
fn unit_hash(salt: u64, a: SiteId, b: SiteId) -> f64 {
    let mut z = salt ^ (((a.0 as u64) << 32) | b.0 as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 53) as f64
}

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

/// Depth-first enumeration of the cycles extending `path` through `rest`, keeping the best.
fn extend_cycles(
    path: &mut Vec<SiteId>,
    rest: &mut Vec<SiteId>,
    edge: &dyn Fn(SiteId, SiteId) -> f64,
    best: &mut Option<((f64, f64), Vec<SiteId>)>,
) {
    if rest.is_empty() {
        let score = cycle_score(path, edge);
        if best.as_ref().is_none_or(|(b, _)| score > *b) {
            *best = Some((score, path.clone()));
        }
        return;
    }
    for i in 0..rest.len() {
        let next = rest.remove(i);
        path.push(next);
        extend_cycles(path, rest, edge, best);
        path.pop();
        rest.insert(i, next);
    }
}

/// (bottleneck, total) bandwidth of the cycle through `path`.
fn cycle_score(path: &[SiteId], edge: &dyn Fn(SiteId, SiteId) -> f64) -> (f64, f64) {
    let mut bottleneck = f64::INFINITY;
    let mut total = 0.0;
    for (a, b) in path.iter().zip(path.iter().cycle().skip(1)) {
        let e = edge(*a, *b);
        bottleneck = bottleneck.min(e);
        total += e;
    }
    (bottleneck, total)
}

/// The undirected edges of the cycle through `order`, each as (smaller, larger).
fn cycle_edges(order: &[SiteId]) -> impl Iterator<Item = (SiteId, SiteId)> + '_ {
    order.iter().zip(order.iter().cycle().skip(1)).map(|(a, b)| (*a.min(b), *a.max(b)))
}

/// The same cycle walked the other way, from the same first site.
fn reversed(order: &[SiteId]) -> Vec<SiteId> {
    let mut r = vec![order[0]];
    r.extend(order[1..].iter().rev());
    r
}

/// The actions that deliver `group` by `plan` on `machine`.
pub(crate) fn build(group: &Group, plan: &Plan, machine: &SiteRoutes) -> Vec<Action> {
    if group.trivial() {
        return Vec::new();
    }
    let order = machine.orders.get(plan.order).unwrap_or(&machine.sites);
    let pos = |s: SiteId| machine.position(plan.order, s);
    let n = order.len().max(1);
    let mut acts = Vec::new();
    match &plan.kind {
        Kind::Butterfly if group.butterfly_applies() => butterfly(group, &pos, &mut acts),
        Kind::Butterfly => {
            let root = group.targets.iter().next().copied().unwrap_or(SiteId(0));
            let rank = |s: SiteId| (pos(s).unwrap_or(0) + n - pos(root).unwrap_or(0)) % n;
            let phases = Phases { root, reduce: Shape::Tree, spread: Shape::Tree, salt: plan.salt };
            rooted(group, &phases, &rank, machine, &mut acts);
        }
        Kind::Rooted { root, reduce, spread } => {
            let rank = |s: SiteId| (pos(s).unwrap_or(0) + n - pos(*root).unwrap_or(0)) % n;
            let phases = Phases { root: *root, reduce: *reduce, spread: *spread, salt: plan.salt };
            rooted(group, &phases, &rank, machine, &mut acts);
        }
        Kind::Trees { root, reduce, spread } => {
            reduce_along(group, *root, reduce, &mut acts);
            spread_along(group, *root, spread, &mut acts);
            finish_at_root(group, *root, &mut acts);
        }
    }
    if plan.relay { reroute(acts, machine) } else { acts }
}

/// A rooted plan's phases.
#[derive(Clone, Copy)]
struct Phases {
    root: SiteId,
    reduce: Shape,
    spread: Shape,
    salt: u64,
}

/// Reduce to the root, then spread from it. `rank` orders sites along the ring from the root
/// (the root has rank 0).
fn rooted(
    group: &Group,
    phases: &Phases,
    rank: &dyn Fn(SiteId) -> usize,
    machine: &SiteRoutes,
    acts: &mut Vec<Action>,
) {
    let Phases { root, reduce, spread, salt } = *phases;
    let x = &group.aggregate;
    // Reduce: partials of the holders other than the root flow to the root.
    let mut others: Vec<(SiteId, Aggregate)> =
        group.holders.iter().filter(|(s, _)| **s != root).map(|(s, a)| (*s, a.clone())).collect();
    others.sort_by_key(|(s, _)| (rank(*s), *s));
    match reduce {
        Shape::Star => {
            for (s, part) in &others {
                acts.push(Action::new(part.clone(), *s, [root]));
            }
        }
        Shape::Chain => {
            let mut acc: Option<Aggregate> = None;
            for (i, (s, part)) in others.iter().enumerate() {
                let sum = acc.as_ref().map_or_else(|| part.clone(), |a| a.union(part));
                let next = others.get(i + 1).map_or(root, |(n, _)| *n);
                acts.push(Action::new(sum.clone(), *s, [next]));
                acc = Some(sum);
            }
        }
        Shape::Tree => {
            let mut sites = vec![root];
            let mut acc: Vec<Option<Aggregate>> = vec![group.holders.get(&root).cloned()];
            for (s, part) in &others {
                sites.push(*s);
                acc.push(Some(part.clone()));
            }
            let mut step = 1;
            while step < sites.len() {
                for i in (step..sites.len()).step_by(2 * step) {
                    if let Some(part) = acc[i].clone() {
                        acts.push(Action::new(part.clone(), sites[i], [sites[i - step]]));
                        acc[i - step] = Some(acc[i - step].as_ref().map_or_else(|| part.clone(), |a| a.union(&part)));
                    }
                }
                step *= 2;
            }
        }
        Shape::Fastest => reduce_along(group, root, &machine.tree(root, true, salt, &Load::new(), group.bytes), acts),
    }
    // Spread: the aggregate, formed at the root, reaches the other targets.
    let mut dests: Vec<SiteId> = group.targets.iter().copied().filter(|t| *t != root).collect();
    dests.sort_by_key(|s| (rank(*s), *s));
    match spread {
        Shape::Star => {
            if !dests.is_empty() {
                acts.push(Action::new(x.clone(), root, dests.iter().copied()));
            }
        }
        Shape::Chain => {
            let mut prev = root;
            for d in dests {
                acts.push(Action::new(x.clone(), prev, [d]));
                prev = d;
            }
        }
        Shape::Tree => {
            let mut sites = vec![root];
            sites.extend(dests);
            for i in 1..sites.len() {
                // the parent in a binomial tree: clear the highest set bit
                let parent = i & !(1usize << (usize::BITS - 1 - i.leading_zeros()));
                acts.push(Action::new(x.clone(), sites[parent], [sites[i]]));
            }
        }
        Shape::Fastest => spread_along(group, root, &machine.tree(root, false, salt, &Load::new(), group.bytes), acts),
    }
    finish_at_root(group, root, acts);
}

/// Reduction along `tree`: deepest first, every site on the way from a holder to `root`
/// sends its partial (its own atoms and what its children sent) to its parent.
fn reduce_along(group: &Group, root: SiteId, tree: &Tree, acts: &mut Vec<Action>) {
    let mut partial: BTreeMap<SiteId, Aggregate> = group.holders.clone();
    let senders = group.holders.keys().copied().filter(|s| *s != root);
    for (s, _) in pruned(tree, root, senders) {
        let (Some(part), Some(&up)) = (partial.get(&s).cloned(), tree.get(&s)) else { continue };
        acts.push(Action::new(part.clone(), s, [up]));
        let merged = partial.get(&up).map_or_else(|| part.clone(), |p| p.union(&part));
        partial.insert(up, merged);
    }
}

/// Spreading along `tree`: every site on the way from `root` to a target receives the
/// aggregate from its parent.
fn spread_along(group: &Group, root: SiteId, tree: &Tree, acts: &mut Vec<Action>) {
    let dests = group.targets.iter().copied().filter(|t| *t != root);
    let mut edges = pruned(tree, root, dests);
    edges.reverse();
    for (s, _) in edges {
        if let Some(&from) = tree.get(&s) {
            acts.push(Action::new(group.aggregate.clone(), from, [s]));
        }
    }
}

/// The local aggregation at the root, when it is a target and nothing else forms the
/// aggregate there.
fn finish_at_root(group: &Group, root: SiteId, acts: &mut Vec<Action>) {
    let x = &group.aggregate;
    let formed_at_root = acts.iter().any(|a| a.source == Target::Site(root) && &a.aggregate == x);
    let already = x.len() == 1 && group.holders.contains_key(&root);
    if group.targets.contains(&root) && !formed_at_root && !already {
        acts.push(Action::local(x.clone(), root));
    }
}

/// Recursive doubling over the targets in ring order (`pos`: a site's position in it) (Example
/// 5.2).
fn butterfly(group: &Group, pos: &dyn Fn(SiteId) -> Option<usize>, acts: &mut Vec<Action>) {
    let mut sites: Vec<SiteId> = group.targets.iter().copied().collect();
    sites.sort_by_key(|s| (pos(*s).unwrap_or(usize::MAX), *s));
    let mut acc: Vec<Aggregate> = sites.iter().filter_map(|s| group.holders.get(s).cloned()).collect();
    if acc.len() != sites.len() {
        return;
    }
    let mut bit = 1;
    while bit < sites.len() {
        let next: Vec<Aggregate> = (0..sites.len()).map(|i| acc[i].union(&acc[i ^ bit])).collect();
        for i in 0..sites.len() {
            acts.push(Action::new(acc[i].clone(), sites[i], [sites[i ^ bit]]));
        }
        acc = next;
        bit *= 2;
    }
    for s in sites {
        acts.push(Action::local(group.aggregate.clone(), s));
    }
}

/// Sends every transfer whose direct route is slower than a two-hop one through the best
/// relay (forwarding from each relay fused into one multicast per aggregate).
fn reroute(acts: Vec<Action>, machine: &SiteRoutes) -> Vec<Action> {
    let mut out = Vec::new();
    let mut forwards: BTreeMap<(Aggregate, SiteId), BTreeSet<SiteId>> = BTreeMap::new();
    for a in acts {
        let Some(s) = a.source_site() else {
            out.push(a);
            continue;
        };
        let mut dests = BTreeSet::new();
        for &d in &a.dests {
            match machine.relay(s, d) {
                Some(w) => {
                    dests.insert(w);
                    forwards.entry((a.aggregate.clone(), w)).or_default().insert(d);
                }
                None => {
                    dests.insert(d);
                }
            }
        }
        out.push(a.with_dests(dests));
    }
    for ((x, w), ds) in forwards {
        out.push(Action::new(x, w, ds));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(i: usize) -> SiteId {
        SiteId(i)
    }

    fn all(n: usize) -> BTreeSet<SiteId> {
        (0..n).map(SiteId).collect()
    }

    /// On dgx-v100 site 1 hangs under the root 0 (they share NVLinks) until a load on that
    /// route makes a relay cheaper; unloaded trees come from the cache, which a loaded tree
    /// neither reads nor overwrites.
    #[test]
    fn load_moves_the_fastest_tree_and_unloaded_trees_are_cached() {
        let v100 = Topology::preset("dgx-v100").unwrap();
        let m = SiteRoutes::new(&all(8), &v100);
        let spread = m.tree(s(0), false, 0, &Load::new(), 1e6);
        assert_eq!(spread.get(&s(1)), Some(&s(0)));
        assert_eq!(spread.len(), 7);
        assert_eq!(m.unloaded.borrow().len(), 1);
        let mut load = Load::new();
        m.add_load(&mut load, s(0), s(1), 1e12);
        let loaded = m.tree(s(0), false, 0, &load, 1e6);
        assert!(loaded.get(&s(1)).is_some_and(|p| *p != s(0)), "{loaded:?}");
        assert_eq!(m.unloaded.borrow().len(), 1);
        assert_eq!(m.tree(s(0), false, 0, &Load::new(), 1e6), spread);
        // A cold machine builds the same tree the cache serves, for a salted tree too.
        let salted = m.tree(s(3), true, 7, &Load::new(), 1e6);
        assert_eq!(m.tree(s(3), true, 7, &Load::new(), 1e6), salted);
        assert_eq!(SiteRoutes::new(&all(8), &v100).tree(s(3), true, 7, &Load::new(), 1e6), salted);
        assert_eq!(m.unloaded.borrow().len(), 2);
    }

    /// Stopping Dijkstra once every parent is final builds the tree the full run builds, on
    /// machines whose fastest trees are stars (switched) and on ones where they relay
    /// (dgx-v100), loaded and salted.
    #[test]
    fn trees_stopped_early_equal_the_full_dijkstra() {
        let mut checked = 0;
        for (name, n) in [("dgx-v100", 8), ("dgx-h100x3", 24), ("nvl72", 72)] {
            let t = Topology::preset(name).unwrap();
            let m = SiteRoutes::new(&all(n), &t);
            let mut load = Load::new();
            for step in 0..40u64 {
                let (a, b) = (s((step * 7 % n as u64) as usize), s((step * 5 % n as u64 + 1) as usize % n));
                if a != b {
                    m.add_load(&mut load, a, b, 1e6 * (step % 3) as f64);
                }
                for root in [0, 3, n - 1] {
                    for inbound in [false, true] {
                        let salt = step % 4;
                        let cut = m.dijkstra(s(root), inbound, salt, &load, 2e6, true);
                        let full = m.dijkstra(s(root), inbound, salt, &load, 2e6, false);
                        assert_eq!(cut, full, "{name}: root {root}, inbound {inbound}, step {step}");
                        assert_eq!(cut.len(), n - 1);
                        checked += 1;
                    }
                }
            }
        }
        assert_eq!(checked, 3 * 40 * 3 * 2);
    }

    #[test]
    fn v100_rings_use_only_nvlink() {
        let v100 = Topology::preset("dgx-v100").unwrap();
        let m = SiteRoutes::new(&all(8), &v100);
        assert!(!m.uniform);
        assert_eq!(m.orders.len(), 5);
        let best = &m.orders[1];
        for (a, b) in best.iter().zip(best.iter().cycle().skip(1)) {
            assert_eq!(m.bandwidth(*a, *b), 50e9, "{best:?}");
        }
        let second = &m.orders[3];
        for (a, b) in second.iter().zip(second.iter().cycle().skip(1)) {
            assert_eq!(m.bandwidth(*a, *b), 25e9, "{second:?}");
        }
        // 0 and 5 are unlinked: relay through a site linked to both
        let w = m.relay(s(0), s(5)).unwrap();
        assert!(v100.linked(s(0), w) && v100.linked(w, s(5)));
        assert_eq!(m.relay(s(0), s(4)), None);
        let a100 = SiteRoutes::new(&all(8), &Topology::preset("dgx-a100").unwrap());
        assert!(a100.uniform);
        assert_eq!(a100.orders[0], all(8).into_iter().collect::<Vec<_>>());
        assert_eq!(a100.relay(s(0), s(5)), None);
    }

    fn group(src: &str) -> (Program, Vec<Group>) {
        let p: Program = src.parse().unwrap();
        let g = groups(&p, &p.declared_membership()).unwrap();
        (p, g)
    }

    fn valid(p: &Program, acts: Vec<Action>) -> Program {
        let q = p.with_body(acts);
        q.validate_with(&q.declared_membership()).unwrap_or_else(|e| panic!("{e}\n{q}"));
        q
    }

    #[test]
    fn every_shape_builds_a_valid_program() {
        let (p, groups) =
            group("GPUS: 0, 1, 2, 3, 4\nIN: A @ 0; B @ 1; C @ 2; D @ 2; E @ 4\nOUT: A+B+C+D+E @ 0, 1, 3; E @ 0, 2, 3");
        let m = SiteRoutes::new(&p.sites(), &Topology::preset("dgx-v100").unwrap());
        for order in 0..m.orders.len() {
            for reduce in SHAPES {
                for spread in SHAPES {
                    for root in 0..5 {
                        for relay in [false, true] {
                            let plan = Plan {
                                kind: Kind::Rooted { root: s(root), reduce, spread },
                                order,
                                relay,
                                salt: root as u64,
                            };
                            let acts: Vec<Action> = groups.iter().flat_map(|g| build(g, &plan, &m)).collect();
                            valid(&p, acts);
                        }
                    }
                }
            }
            let plan = Plan { kind: Kind::Butterfly, order, relay: false, salt: 0 };
            valid(&p, groups.iter().flat_map(|g| build(g, &plan, &m)).collect());
        }
    }

    #[test]
    fn butterfly_is_example_5_2() {
        let (p, groups) = group("IN: A @ 0; B @ 1; C @ 2; D @ 3\nOUT: A+B+C+D @ 0, 1, 2, 3");
        assert!(groups[0].butterfly_applies());
        let m = SiteRoutes::new(&p.sites(), &Topology::preset("dgx-h100").unwrap());
        let plan = Plan { kind: Kind::Butterfly, order: 0, relay: false, salt: 0 };
        let q = valid(&p, build(&groups[0], &plan, &m));
        let expected: Program = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/examples/example_5_2_recursive_doubling.exprog"
        ))
        .unwrap()
        .parse()
        .unwrap();
        assert_eq!(q.body, expected.body);
    }

    #[test]
    fn chains_follow_the_ring() {
        let (p, groups) = group("IN: A @ 0; B @ 1; C @ 2; D @ 3\nOUT: A+B+C+D @ 0, 1, 2, 3");
        let m = SiteRoutes::new(&p.sites(), &Topology::preset("dgx-h100").unwrap());
        let plan = Plan {
            kind: Kind::Rooted { root: s(1), reduce: Shape::Chain, spread: Shape::Chain },
            order: 0,
            relay: false,
            salt: 0,
        };
        let q = valid(&p, build(&groups[0], &plan, &m));
        let text: Vec<String> = q.body.iter().map(ToString::to_string).collect();
        assert_eq!(
            text,
            [
                "C @ 2 -> 3",
                "C+D @ 3 -> 0",
                "A+C+D @ 0 -> 1",
                "A+B+C+D @ 1 -> 2",
                "A+B+C+D @ 2 -> 3",
                "A+B+C+D @ 3 -> 0"
            ]
        );
    }
}

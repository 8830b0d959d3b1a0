//! The routes between a program's sites, the trees and ring orders over them.

use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap};

use einsum_sim::Topology;

use super::{EXHAUSTIVE_RING_SITES, Load, Tree};
use crate::ids::SiteId;

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
    pub(super) unloaded: RefCell<HashMap<(SiteId, bool, u64, u64), Tree>>,
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
    pub(super) fn position(&self, order: usize, site: SiteId) -> Option<usize> {
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
    pub(super) fn dijkstra(
        &self,
        root: SiteId,
        inbound: bool,
        salt: u64,
        load: &Load,
        bytes: f64,
        settled_enough: bool,
    ) -> Tree {
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

//! Max-min fair rates by progressive filling (water-filling), kept up to date as flows come
//! and go.
//!
//! All unfrozen flows grow at the same rate until some resource fills; the flows crossing
//! a full resource are frozen at the rate they reached, and the rest keep growing. The
//! result is the unique max-min fair allocation: no flow can get more without taking from
//! a flow that has no more than it.
//!
//! # Incremental recomputation
//! Flows that share no resource, directly or through a chain of other flows, do not affect
//! each other's rates: the allocation of the whole is the union of the allocations of the
//! connected components of the flow–resource graph. So [`FairShare`] remembers which
//! resources flows were added to or removed from since the last [`FairShare::update`] and
//! refills only the components that now contain them; every other flow keeps its rate. The
//! simulator adds and removes a few flows per event, and a machine's kernels, local
//! aggregations and transfers mostly sit in small components (one device's compute, one
//! device's HBM, the transfers of one exchange), so an event costs the size of the
//! components it touches instead of every active flow and every resource.
//!
//! # Replacements refill nothing
//! The filling of a component depends only on its routes, not on which flow is which: a flow
//! freezes in the first round that fills a resource of its route, at that round's share, and
//! a round subtracts the same share for every flow it freezes, so the order of the flows
//! changes no bit. A flow removed and another added on the same route since the last update
//! (the next transfer of a FIFO channel entering as the one ahead of it finishes) leave every
//! rate of their component as it was, and the new flow gets the old one's rate; so
//! [`FairShare::update`] pairs the flows added with the flows removed by route and refills
//! only the components that an unpaired change touched. Under FIFO service every chunk that
//! arrives while another waits on its channel is such a replacement, in what is often one
//! large component: on the searched llama layer over 72 H100s it spares a quarter of the
//! flows the fillings visited.
//!
//! Within a component the filling does the same floating-point operations in the same order
//! as filling everything at once (resources in index order, flows in the order they were
//! added), so a component's rates are bit for bit those of the global computation, except
//! when two resources of *different* components fill at levels within the relative tie
//! tolerance of each other but not equal: the global filling freezes both at the lower level,
//! the component filling each at its own (a difference below `1e-12` relative).

/// Relative slack for deciding that two resources fill at the same level.
const TIE: f64 = 1e-12;

/// Flows over capacity-limited resources with their max-min fair rates, updated
/// incrementally ([`FairShare::update`] refills only the components that changed).
///
/// Flow ids are handed out in increasing order and never reused, so ordering flows by id
/// is ordering them by the time they were added.
#[derive(Debug, Clone, Default)]
pub(crate) struct FairShare {
    capacity: Vec<f64>,
    /// The live flows crossing each resource, ascending by id.
    flows_on: Vec<Vec<usize>>,
    /// Every flow's route, one after another: flow `f` crosses
    /// `route_ids[route_start[f]..route_start[f + 1]]` (one array for the filling to read,
    /// and no allocation per flow).
    route_ids: Vec<usize>,
    route_start: Vec<usize>,
    /// Each flow's rate as of the last [`FairShare::update`].
    rate: Vec<f64>,
    live: Vec<bool>,
    /// The flows added since the last update, and those removed since (for the update to pair
    /// by route).
    added: Vec<usize>,
    removed: Vec<usize>,
    /// The first flow id handed out after the last update.
    fresh_from: usize,
    /// The resources of the changes an update could not pair: the seeds of its refilling.
    touched: Vec<usize>,
    /// The resources with at least one live flow, in no particular order, and each
    /// resource's position in it (`usize::MAX`: not busy).
    busy: Vec<usize>,
    busy_at: Vec<usize>,
    // Scratch space of the filling, indexed by resource or flow, reused between updates.
    mark: Vec<u64>,
    flow_mark: Vec<u64>,
    epoch: u64,
    remaining: Vec<f64>,
    unfrozen_on: Vec<usize>,
    frozen: Vec<bool>,
    /// Buffers of [`FairShare::update`] and [`FairShare::fill`], kept between updates so that
    /// an event allocates nothing: a component's resources, those the filling has not filled
    /// yet, and those a round fills.
    scratch_resources: Vec<usize>,
    open: Vec<usize>,
    full: Vec<usize>,
}

impl FairShare {
    /// No flows over resources of these capacities (bytes/s, positive).
    #[cfg(test)]
    pub(crate) fn new(capacity: &[f64]) -> FairShare {
        let mut share = FairShare::default();
        share.reset(capacity);
        share
    }

    /// Back to no flows, over resources of these capacities (bytes/s, positive), keeping the
    /// buffers: a simulator that runs many task graphs ([`crate::Workspace`]) allocates them
    /// once. Flow ids start again from 0.
    pub(crate) fn reset(&mut self, capacity: &[f64]) {
        let n = capacity.len();
        self.capacity.clear();
        self.capacity.extend_from_slice(capacity);
        self.flows_on.iter_mut().for_each(Vec::clear);
        self.flows_on.resize_with(n, Vec::new);
        self.route_ids.clear();
        self.route_start.clear();
        self.route_start.push(0);
        self.rate.clear();
        self.live.clear();
        self.added.clear();
        self.removed.clear();
        self.fresh_from = 0;
        self.touched.clear();
        self.busy.clear();
        self.busy_at.clear();
        self.busy_at.resize(n, usize::MAX);
        // the marks only need to differ from the epochs to come, which keep counting up
        self.mark.resize(n, 0);
        self.flow_mark.clear();
        self.remaining.resize(n, 0.0);
        self.unfrozen_on.resize(n, 0);
        self.frozen.clear();
    }

    /// Adds a flow crossing `route` (resource indices, each at most once) and returns its
    /// id. Its rate is known after the next [`FairShare::update`]; a flow that crosses
    /// nothing gets `f64::INFINITY`.
    pub(crate) fn add(&mut self, route: &[usize]) -> usize {
        let id = self.rate.len();
        for &r in route {
            if self.flows_on[r].is_empty() {
                self.busy_at[r] = self.busy.len();
                self.busy.push(r);
            }
            self.flows_on[r].push(id);
        }
        if !route.is_empty() {
            self.added.push(id);
        }
        self.rate.push(if route.is_empty() { f64::INFINITY } else { f64::NAN });
        self.route_ids.extend_from_slice(route);
        self.route_start.push(self.route_ids.len());
        self.live.push(true);
        self.flow_mark.push(0);
        self.frozen.push(false);
        id
    }

    /// Removes flow `id`; the flows it shared resources with get new rates at the next
    /// [`FairShare::update`].
    pub(crate) fn remove(&mut self, id: usize) {
        if !std::mem::replace(&mut self.live[id], false) {
            return;
        }
        let route = route_of(&self.route_ids, &self.route_start, id);
        if !route.is_empty() {
            self.removed.push(id);
        }
        for &r in route {
            let on = &mut self.flows_on[r];
            if let Ok(k) = on.binary_search(&id) {
                on.remove(k);
            }
            if on.is_empty() {
                let at = std::mem::replace(&mut self.busy_at[r], usize::MAX);
                self.busy.swap_remove(at);
                if let Some(&moved) = self.busy.get(at) {
                    self.busy_at[moved] = at;
                }
            }
        }
    }

    /// The rate of flow `id` as of the last update.
    pub(crate) fn rate(&self, id: usize) -> f64 {
        self.rate[id]
    }

    /// The resources that at least one live flow crosses.
    pub(crate) fn busy(&self) -> &[usize] {
        &self.busy
    }

    /// The route of a flow.
    pub(crate) fn route(&self, id: usize) -> &[usize] {
        route_of(&self.route_ids, &self.route_start, id)
    }

    /// Refills the components that contain a resource whose flows changed since the last
    /// update, other than by a flow replaced by one of the same route (module docs); all
    /// other rates stay as they are.
    pub(crate) fn update(&mut self) {
        self.pair_replacements();
        let seeds = std::mem::take(&mut self.touched);
        self.epoch += 1;
        let epoch = self.epoch;
        let mut resources = std::mem::take(&mut self.scratch_resources);
        for seed in &seeds {
            let seed = *seed;
            if self.mark[seed] == epoch || self.flows_on[seed].is_empty() {
                continue;
            }
            // One component: every resource and flow reachable from `seed`, each reset for
            // the filling as it is reached (full capacity, every flow unfrozen).
            resources.clear();
            self.mark[seed] = epoch;
            resources.push(seed);
            let mut next = 0;
            while next < resources.len() {
                let r = resources[next];
                next += 1;
                self.remaining[r] = self.capacity[r];
                self.unfrozen_on[r] = self.flows_on[r].len();
                for &f in &self.flows_on[r] {
                    if self.flow_mark[f] == epoch {
                        continue;
                    }
                    self.flow_mark[f] = epoch;
                    self.frozen[f] = false;
                    for &q in route_of(&self.route_ids, &self.route_start, f) {
                        if self.mark[q] != epoch {
                            self.mark[q] = epoch;
                            resources.push(q);
                        }
                    }
                }
            }
            self.fill(&resources);
        }
        self.scratch_resources = resources;
        // the seed list's buffer becomes the next update's
        let mut seeds = seeds;
        seeds.clear();
        self.touched = seeds;
    }

    /// Pairs the flows added since the last update with the flows removed since that crossed
    /// the same route, giving each added flow of a pair its partner's rate, and puts the
    /// resources of every unpaired change in [`FairShare::touched`]. A flow both added and
    /// removed since the last update changed nothing and is left out.
    fn pair_replacements(&mut self) {
        let mut added = std::mem::take(&mut self.added);
        let mut removed = std::mem::take(&mut self.removed);
        let fresh_from = self.fresh_from;
        added.retain(|&f| self.live[f]);
        removed.retain(|&f| f < fresh_from);
        if !added.is_empty() && !removed.is_empty() {
            // by route, then by id, so that the pairing is deterministic
            let by_route = |a: &usize, b: &usize| self.route(*a).cmp(self.route(*b)).then(a.cmp(b));
            added.sort_unstable_by(by_route);
            removed.sort_unstable_by(by_route);
        }
        let (mut i, mut j) = (0, 0);
        while i < added.len() || j < removed.len() {
            let order = match (added.get(i), removed.get(j)) {
                (Some(&a), Some(&r)) => self.route(a).cmp(self.route(r)),
                (Some(_), None) => std::cmp::Ordering::Less,
                _ => std::cmp::Ordering::Greater,
            };
            match order {
                std::cmp::Ordering::Equal => {
                    self.rate[added[i]] = self.rate[removed[j]];
                    i += 1;
                    j += 1;
                }
                std::cmp::Ordering::Less => {
                    self.touched.extend_from_slice(route_of(&self.route_ids, &self.route_start, added[i]));
                    i += 1;
                }
                std::cmp::Ordering::Greater => {
                    self.touched.extend_from_slice(route_of(&self.route_ids, &self.route_start, removed[j]));
                    j += 1;
                }
            }
        }
        added.clear();
        removed.clear();
        (self.added, self.removed) = (added, removed);
        self.fresh_from = self.rate.len();
    }

    /// Progressive filling of one component, given its resources in any order, each at its
    /// full capacity and with its flows unfrozen ([`FairShare::update`] resets them).
    ///
    /// Each round takes the lowest fill level (`remaining / unfrozen flows`) of the resources
    /// that still have unfrozen flows as the share, fills every one within the tie tolerance of
    /// it in ascending index order, and freezes their flows in the order they were added: the
    /// operations, and so the rates, of a plain pass. The resources left are kept in a list
    /// that each round's scan compacts, so a round costs the resources still unfilled: a
    /// component fills in few rounds (its resources fill at a few distinct levels), where a
    /// heap of levels cost more in its upkeep than the scans it saved.
    fn fill(&mut self, resources: &[usize]) {
        let level = |remaining: &[f64], unfrozen_on: &[usize], r: usize| {
            // `+ 0.0` turns a negative zero into a positive one, as the bits of a minimum must be
            // the same whichever of two equal levels it is taken from.
            remaining[r].max(0.0) / unfrozen_on[r] as f64 + 0.0
        };
        let mut open = std::mem::take(&mut self.open);
        open.clear();
        open.extend(resources.iter().copied().filter(|&r| self.unfrozen_on[r] > 0));
        let mut full = std::mem::take(&mut self.full);
        while !open.is_empty() {
            // drop the resources whose flows all froze, and find the lowest level
            open.retain(|&r| self.unfrozen_on[r] > 0);
            let Some(share) = open.iter().map(|&r| level(&self.remaining, &self.unfrozen_on, r)).reduce(f64::min)
            else {
                break;
            };
            full.clear();
            full.extend(
                open.iter().copied().filter(|&r| level(&self.remaining, &self.unfrozen_on, r) <= share * (1.0 + TIE)),
            );
            full.sort_unstable();
            for &r in &full {
                for &f in &self.flows_on[r] {
                    if self.frozen[f] {
                        continue;
                    }
                    self.frozen[f] = true;
                    self.rate[f] = share;
                    for &q in route_of(&self.route_ids, &self.route_start, f) {
                        self.remaining[q] -= share;
                        self.unfrozen_on[q] -= 1;
                    }
                }
            }
        }
        (self.open, self.full) = (open, full);
    }
}

/// Flow `f`'s route in [`FairShare`]'s packed arrays: a function of the two fields rather than
/// a method, so that a caller can update the share's other fields while reading it.
fn route_of<'a>(route_ids: &'a [usize], route_start: &[usize], f: usize) -> &'a [usize] {
    &route_ids[route_start[f]..route_start[f + 1]]
}

/// The max-min fair rate of each flow through [`FairShare`], all added at once. `routes[f]`
/// lists the resources flow `f` crosses (indices into `capacity`, each at most once per flow);
/// a flow that crosses nothing gets `f64::INFINITY`. Capacities must be positive.
#[cfg(test)]
fn max_min_rates(capacity: &[f64], routes: &[&[usize]]) -> Vec<f64> {
    let mut share = FairShare::new(capacity);
    let ids: Vec<usize> = routes.iter().map(|r| share.add(r)).collect();
    share.update();
    ids.into_iter().map(|f| share.rate(f)).collect()
}

/// The global filling the incremental one is checked against: every flow at once, as the
/// simulator did before [`FairShare`]. `routes[f]` lists the resources flow `f` crosses
/// (indices into `capacity`, each at most once per flow); a flow that crosses nothing gets
/// `f64::INFINITY`. Capacities must be positive.
#[cfg(test)]
fn global_rates(capacity: &[f64], routes: &[&[usize]]) -> Vec<f64> {
    let mut rate = vec![f64::INFINITY; routes.len()];
    let mut remaining = capacity.to_vec();
    let mut unfrozen_on = vec![0usize; capacity.len()];
    let mut flows_on: Vec<Vec<usize>> = vec![Vec::new(); capacity.len()];
    for (f, route) in routes.iter().enumerate() {
        for &r in route.iter() {
            unfrozen_on[r] += 1;
            flows_on[r].push(f);
        }
    }
    let mut frozen: Vec<bool> = routes.iter().map(|r| r.is_empty()).collect();
    let mut active: Vec<usize> = (0..capacity.len()).filter(|&r| unfrozen_on[r] > 0).collect();
    while !active.is_empty() {
        let level = |r: usize| remaining[r].max(0.0) / unfrozen_on[r] as f64;
        let share = active.iter().map(|&r| level(r)).fold(f64::INFINITY, f64::min);
        let full: Vec<usize> = active.iter().copied().filter(|&r| level(r) <= share * (1.0 + TIE)).collect();
        for r in full {
            for &f in &flows_on[r] {
                if frozen[f] {
                    continue;
                }
                frozen[f] = true;
                rate[f] = share;
                for &q in routes[f].iter() {
                    remaining[q] -= share;
                    unfrozen_on[q] -= 1;
                }
            }
        }
        active.retain(|&r| unfrozen_on[r] > 0);
    }
    rate
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn textbook_example() {
        // Resources 0 (cap 1) and 1 (cap 2). Flow 0 crosses both, flow 1 only 0, flows 2
        // and 3 only 1: resource 0 fills first at 1/2, then flows 2, 3 split the rest of 1.
        let rates = max_min_rates(&[1.0, 2.0], &[&[0, 1], &[0], &[1], &[1]]);
        assert_eq!(rates, [0.5, 0.5, 0.75, 0.75]);
    }

    #[test]
    fn equal_flows_split_a_bottleneck_and_others_take_the_slack() {
        let rates = max_min_rates(&[3.0, 10.0], &[&[0], &[0], &[0], &[1]]);
        assert_eq!(rates, [1.0, 1.0, 1.0, 10.0]);
    }

    #[test]
    fn allocation_is_feasible_and_every_flow_has_a_saturated_bottleneck() {
        let cap = [4.0, 1.5, 2.0, 7.0];
        let routes: [&[usize]; 6] = [&[0, 1], &[0, 2], &[2, 3], &[3], &[0], &[1, 2, 3]];
        let rates = max_min_rates(&cap, &routes);
        for (r, &c) in cap.iter().enumerate() {
            let load: f64 = routes.iter().zip(&rates).filter(|(route, _)| route.contains(&r)).map(|(_, x)| x).sum();
            assert!(load <= c * (1.0 + 1e-12), "resource {r} overloaded");
        }
        for (f, route) in routes.iter().enumerate() {
            let bottleneck = route.iter().any(|&r| {
                let on_r: Vec<f64> =
                    routes.iter().zip(&rates).filter(|(q, _)| q.contains(&r)).map(|(_, &x)| x).collect();
                let load: f64 = on_r.iter().sum();
                (load - cap[r]).abs() < 1e-9 && on_r.iter().all(|&x| x <= rates[f] + 1e-12)
            });
            assert!(bottleneck, "flow {f} has no bottleneck");
        }
    }

    #[test]
    fn empty_routes_are_unbounded() {
        assert_eq!(max_min_rates(&[1.0], &[&[], &[0]]), [f64::INFINITY, 1.0]);
    }

    /// A flow replaced by one on the same route refills nothing: the new flow takes the old
    /// one's rate, and only an unpaired change seeds a refilling.
    #[test]
    fn a_replacement_keeps_every_rate_without_a_refilling() {
        let mut share = FairShare::new(&[1.0, 2.0, 3.0]);
        let ids: Vec<usize> = [&[0, 1][..], &[1], &[1, 2]].into_iter().map(|r| share.add(r)).collect();
        share.update();
        let before: Vec<f64> = ids.iter().map(|&f| share.rate(f)).collect();
        share.remove(ids[0]);
        let replaced = share.add(&[0, 1]);
        share.pair_replacements();
        assert!(share.touched.is_empty());
        assert_eq!(share.rate(replaced), before[0]);
        share.update();
        assert_eq!([share.rate(replaced), share.rate(ids[1]), share.rate(ids[2])], before[..]);
        // a flow added and removed between two updates changes nothing either
        let passing = share.add(&[2]);
        share.remove(passing);
        share.remove(ids[2]);
        let other = share.add(&[1]);
        share.pair_replacements();
        assert_eq!(share.touched, [1, 1, 2], "the unpaired flows' routes, added first");
        share.update();
        assert_eq!(share.rate(other), max_min_rates(&[1.0, 2.0, 3.0], &[&[0, 1], &[1], &[1]])[2]);
    }

    /// Random flows added, removed and replaced a few at a time: after every update, each flow's
    /// rate equals the global filling of the live flows (random capacities leave no ties
    /// across components).
    #[test]
    fn incremental_updates_match_the_global_filling() {
        let mut rng = einsum_core::SeededRng::new(7);
        for case in 0..40 {
            let resources = 2 + rng.below(12);
            let capacity: Vec<f64> = (0..resources).map(|_| 0.5 + 10.0 * rng.unit()).collect();
            let mut share = FairShare::new(&capacity);
            let mut live: Vec<(usize, Vec<usize>)> = Vec::new();
            for _ in 0..30 {
                for _ in 0..1 + rng.below(3) {
                    let mut route: Vec<usize> = (0..resources).filter(|_| rng.below(4) == 0).collect();
                    if route.is_empty() {
                        route.push(rng.below(resources));
                    }
                    live.push((share.add(&route), route));
                }
                for _ in 0..rng.below(3) {
                    if !live.is_empty() {
                        let (id, _) = live.remove(rng.below(live.len()));
                        share.remove(id);
                    }
                }
                // replacements: a flow leaves and another enters on its route
                for _ in 0..rng.below(3) {
                    if !live.is_empty() {
                        let (id, route) = live.remove(rng.below(live.len()));
                        share.remove(id);
                        live.push((share.add(&route), route));
                    }
                }
                share.update();
                let routes: Vec<&[usize]> = live.iter().map(|(_, r)| r.as_slice()).collect();
                let expected = global_rates(&capacity, &routes);
                for ((id, _), want) in live.iter().zip(&expected) {
                    assert_eq!(share.rate(*id), *want, "case {case}, flow {id}");
                }
                let mut busy: Vec<usize> = share.busy().to_vec();
                busy.sort_unstable();
                let mut used: Vec<usize> = live.iter().flat_map(|(_, r)| r.iter().copied()).collect();
                used.sort_unstable();
                used.dedup();
                assert_eq!(busy, used, "case {case}");
            }
        }
    }
}

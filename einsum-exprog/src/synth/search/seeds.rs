//! The seeds the walks start from: the structured plans under two placements, striped rings
//! and hierarchical bodies, over the chunk counts tried.

use std::collections::{BTreeSet, HashMap};
use std::rc::Rc;
use std::time::Instant;

use einsum_core::SeededRng as Rng;
use einsum_sim::Topology;

use super::super::budget::Budget;
use super::super::eval::Evaluator;
use super::super::plan::{Group, Kind, Plan, Shape, SiteRoutes, congestion_aware};
use super::super::{SynthError, affinity_membership, hierarchical, naive, stripes};
use super::state::State;
use super::walk::ALTERNATE_WITHIN;
use super::{MAX_REFINED_ATOMS, MIN_CHUNK_GB, Search, SearchOptions};
use crate::ids::SiteId;
use crate::membership::Membership;
use crate::program::Program;
use crate::refine::refine;

/// What the seeds of every chunk count are built from.
pub(super) struct Seeding<'a> {
    /// The preamble, checked, its body dropped.
    pub preamble: &'a Program,
    /// The preamble as given: its body, if valid, is a seed.
    pub given: &'a Program,
    pub topology: &'a Topology,
    pub machine: &'a SiteRoutes,
    /// The placement-blind membership.
    pub canonical: &'a Membership,
    /// See [`Search::reference`].
    pub reference: bool,
}

/// The search with the best seed's chunk count and its seeds (`None` without one), the naive
/// program's time, and the budget left.
type Seeded<'a> = (Option<(Search<'a>, Seeds)>, f64, Budget);

impl<'a> Seeding<'a> {
    /// Seeds, for every chunk count of `counts`: naive and the given body (whole atoms only),
    /// and structured plans under two placements. The search goes on with the best seed's count.
    pub(super) fn over(
        &self,
        counts: Vec<usize>,
        options: &SearchOptions,
        mut budget: Budget,
    ) -> Result<Seeded<'a>, SynthError> {
        let naive_program = naive(self.preamble)?;
        let mut naive_ms = f64::INFINITY;
        let mut chosen: Option<(Search<'a>, Seeds)> = None;
        for chunks in counts {
            // the whole atoms are always seeded; more chunks only while the budget lasts
            if chunks > 1 && budget.spent() {
                break;
            }
            let Ok(refined) = refine(self.preamble, chunks) else { continue };
            let mut s = Search {
                machine: self.machine.clone(),
                eval: Evaluator::new(&refined),
                preamble: refined,
                topology: self.topology,
                chunks,
                rng: Rng::new(options.seed),
                cache: HashMap::new(),
                owners: HashMap::new(),
                reference: self.reference,
                evaluated: 0,
                refused: 0,
                budget,
                rewrites: options.rewrites,
            };
            let mut seeds = Seeds::default();
            if chunks == 1 {
                naive_ms = self.whole(&mut s, &naive_program, &mut seeds)?;
            }
            s.seed(self.canonical, options.hierarchical, &mut seeds)?;
            budget = s.budget;
            let evaluated = chosen.as_ref().map_or(0, |(c, _)| c.evaluated);
            match (seeds.best(), &mut chosen) {
                // more chunks only for a shorter completion: a tie keeps the fewer, larger atoms
                (Some(b), Some((c, cb)))
                    if cb.best().is_none_or(|cb| b.cost.completion < cb.cost.completion * (1.0 - 1e-9)) =>
                {
                    s.evaluated += evaluated;
                    chosen = Some((s, seeds));
                }
                (Some(_), None) => chosen = Some((s, seeds)),
                (_, Some((c, _))) => c.evaluated += s.evaluated,
                (None, None) => {}
            }
        }
        Ok((chosen, naive_ms, budget))
    }

    /// The seeds of whole atoms only: the naive program and the given body, if valid. Returns
    /// the naive program's time.
    fn whole(&self, s: &mut Search<'_>, naive_program: &Program, seeds: &mut Seeds) -> Result<f64, SynthError> {
        let since = Instant::now();
        let st = s.state_of_body(self.canonical, naive_program.body.clone(), "naive")?;
        s.budget.record(since);
        let naive_ms = st.as_ref().map_or(f64::INFINITY, |st| st.cost.completion);
        seeds.consider(st);
        if !self.given.body.is_empty()
            && !s.budget.spent()
            && let Ok(v) = self.given.validate()
        {
            let body = self.given.resolve(&v.membership).body;
            seeds.consider(s.state_of_body(&v.membership, body, "the given body")?);
        }
        Ok(naive_ms)
    }
}

impl Search<'_> {
    /// Adds to `seeds` the structured seeds under the canonical placement and the one that
    /// follows the data: the uniform plans, striped rings and, with `hierarchical`, the
    /// hierarchical bodies.
    pub(super) fn seed(
        &mut self,
        canonical: &Membership,
        hierarchical: bool,
        seeds: &mut Seeds,
    ) -> Result<(), SynthError> {
        let mut placements = vec![canonical.clone()];
        let affinity = affinity_membership(&self.preamble)?;
        if affinity != *canonical {
            placements.push(affinity);
        }
        // Each seed is one step of the budget: none starts once it is spent.
        for m in &placements {
            if self.budget.spent() {
                return Ok(());
            }
            let gs = Rc::new(self.groups_under(m)?);
            for (plans, origin) in self.seed_plans(&gs) {
                if self.budget.spent() {
                    return Ok(());
                }
                let since = Instant::now();
                let st = self.state_of_plans(m, gs.clone(), plans, origin);
                self.budget.record(since);
                seeds.consider(st);
            }
            for reduction in hierarchical::RootReduction::ALL.into_iter().filter(|_| hierarchical) {
                if self.budget.spent() {
                    return Ok(());
                }
                let since = Instant::now();
                let roots = balanced_roots(&gs);
                if let Some(body) = hierarchical::body(&gs, &roots, &self.machine.sites, self.topology, reduction) {
                    let st = self.state_of_body(m, body, &format!("seed: hierarchical, {reduction:?} to the root"))?;
                    seeds.consider(st);
                }
                self.budget.record(since);
            }
        }
        Ok(())
    }

    /// The uniform structured seeds: every group with the same shape, roots balanced.
    fn seed_plans(&self, gs: &[Group]) -> Vec<(Vec<Plan>, String)> {
        let roots = balanced_roots(gs);
        let relays: &[bool] = if self.machine.uniform { &[false] } else { &[false, true] };
        let mut seeds = Vec::new();
        let forward: Vec<usize> = (0..gs.len()).collect();
        let backward: Vec<usize> = forward.iter().rev().copied().collect();
        for (sequence, name) in
            [(forward, "seed: congestion-aware trees"), (backward, "seed: congestion-aware trees, reversed")]
        {
            seeds.push((congestion_aware(gs, &roots, &sequence, &self.machine), name.to_string()));
        }
        if let Some(plans) = stripes::striped(gs, &self.machine) {
            seeds.push((plans, "seed: striped rings".to_string()));
        }
        for &relay in relays {
            let uniform = |kind: &dyn Fn(SiteId) -> Kind, order: usize| -> Vec<Plan> {
                roots.iter().map(|&root| Plan { kind: kind(root), order, relay, salt: 0 }).collect()
            };
            let rooted = |reduce, spread| move |root| Kind::Rooted { root, reduce, spread };
            for kind in [rooted(Shape::Star, Shape::Star), rooted(Shape::Fastest, Shape::Fastest)] {
                let plans = uniform(&kind, 0);
                seeds.push((plans.clone(), format!("seed: {}", plans.first().map_or(String::new(), Plan::describe))));
            }
            for order in 0..self.machine.orders.len() {
                for kind in [rooted(Shape::Chain, Shape::Chain), rooted(Shape::Tree, Shape::Tree)] {
                    let plans = uniform(&kind, order);
                    seeds.push((
                        plans.clone(),
                        format!("seed: {}", plans.first().map_or(String::new(), Plan::describe)),
                    ));
                }
                if gs.iter().any(Group::butterfly_applies) {
                    let plans = uniform(&|_| Kind::Butterfly, order);
                    seeds
                        .push((plans, format!("seed: butterfly, ring {order}{}", if relay { ", relays" } else { "" })));
                }
            }
        }
        seeds
    }
}

/// The best seed under each placement met, in the order met.
#[derive(Default)]
pub(super) struct Seeds {
    per_placement: Vec<State>,
}

impl Seeds {
    /// Keeps `st` if it is the best of its placement so far.
    pub(super) fn consider(&mut self, st: Option<State>) {
        let Some(st) = st else { return };
        match self.per_placement.iter_mut().find(|b| b.membership == st.membership) {
            Some(b) if st.cost.better(&b.cost) => *b = st,
            Some(_) => {}
            None => self.per_placement.push(st),
        }
    }

    /// The best seed over every placement.
    pub(super) fn best(&self) -> Option<&State> {
        self.per_placement.iter().reduce(|a, b| if b.cost.better(&a.cost) { b } else { a })
    }

    /// Where the walks start: the best seed, and the best seed under another placement
    /// within [`ALTERNATE_WITHIN`] of it (the best such), if any; `None` without seeds.
    pub(super) fn starts(self) -> Option<(State, Option<State>)> {
        let mut seeds = self.per_placement;
        seeds.sort_by(|a, b| {
            a.cost.completion.total_cmp(&b.cost.completion).then(a.cost.objective.total_cmp(&b.cost.objective))
        });
        let mut seeds = seeds.into_iter();
        let best = seeds.next()?;
        let alternate = seeds.next().filter(|s| s.cost.completion <= best.cost.completion * ALTERNATE_WITHIN);
        Some((best, alternate))
    }
}

/// The chunk counts the search tries, ascending: 1 (whole atoms), 2, 4 and 8 (pipelining),
/// and the count that stripes the groups over the machine's rings
/// ([`stripes::chunks_to_stripe`]), each at most `max_chunks` and leaving at most
/// [`MAX_REFINED_ATOMS`] atoms and no chunk under [`MIN_CHUNK_GB`].
pub(super) fn chunk_counts(preamble: &Program, groups: usize, machine: &SiteRoutes, max_chunks: usize) -> Vec<usize> {
    let atoms = preamble.inputs.len().max(1);
    let smallest = preamble.inputs.values().map(|i| i.size_gb).fold(f64::INFINITY, f64::min);
    let mut counts: BTreeSet<usize> = [2, 4, 8, stripes::chunks_to_stripe(groups, machine)].into_iter().collect();
    counts.retain(|&k| k <= max_chunks && atoms * k <= MAX_REFINED_ATOMS && smallest / k as f64 >= MIN_CHUNK_GB);
    counts.insert(1);
    counts.into_iter().collect()
}

/// A star plan (reduce to `root`, multicast from it) along the first order.
pub(super) fn star(root: SiteId) -> Plan {
    Plan { kind: Kind::Rooted { root, reduce: Shape::Star, spread: Shape::Star }, order: 0, relay: false, salt: 0 }
}

/// One root per group, spreading the work: each group takes, among its targets (its holders
/// if it has none), a site holding some of its atoms if possible, then the one rooting the
/// fewest groups so far, then the lowest. Distinct roots turn an all-reduce into a
/// reduce-scatter and an all-gather.
pub(super) fn balanced_roots(gs: &[Group]) -> Vec<SiteId> {
    let mut load: HashMap<SiteId, usize> = HashMap::new();
    gs.iter()
        .map(|g| {
            let candidates: Vec<SiteId> = if g.targets.is_empty() {
                g.holders.keys().copied().collect()
            } else {
                g.targets.iter().copied().collect()
            };
            let root = candidates
                .into_iter()
                .min_by_key(|c| (!g.holders.contains_key(c), load.get(c).copied().unwrap_or(0), *c))
                .unwrap_or(SiteId(0));
            *load.entry(root).or_default() += 1;
            root
        })
        .collect()
}

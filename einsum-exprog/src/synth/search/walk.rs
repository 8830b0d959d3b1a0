//! The walks: annealing from a start, then a descent (`Polish`) from the best found.

use std::collections::BTreeSet;
use std::time::Instant;

use einsum_core::SeededRng as Rng;

use super::super::budget::{Budget, CHECK_EVERY};
use super::super::rewrites::{aggregate_runs, source_index};
use super::state::State;
use super::{Search, SearchOptions};
use crate::action::Action;
use crate::ids::SiteId;
use crate::rewrite::unguarded;

/// The annealing's iterations are followed by a descent that spends the last
/// `1 / POLISH_SHARE` of them (see `Polish`).
const POLISH_SHARE: usize = 4;

/// Independent walks the iterations are split into, each with its own stretch of the random
/// stream (see [`crate::synth`]): whether a walk finds an improvement depends much on its
/// stream, and two shorter walks find one more often than one long one. The first starts from
/// the best seed; the second from the best seed under another placement when that one is
/// within [`ALTERNATE_WITHIN`] of it (another basin), else from the best seed again.
pub(super) const WALKS: usize = 2;

/// How much slower than the best seed another placement's best seed may be and still start a
/// walk: a walk's gains over its start stay under 1.25× on the corpus (its largest, 1.23×), so
/// a start further behind would spend its walk without reaching the best seed.
pub(super) const ALTERNATE_WITHIN: f64 = 1.25;

/// The fewest iterations a walk gets: budgets under `WALKS` times it run one walk.
pub(super) const MIN_WALK: usize = 500;

impl Search<'_> {
    /// Independent walks (see `WALKS`), each annealing then descending: the first from the
    /// best seed, the second from the alternate start if there is one. Returns the best state
    /// over the walks and the iterations run.
    pub(super) fn walks(
        &mut self,
        seed: &State,
        alternate: Option<&State>,
        options: &SearchOptions,
        progress: &mut dyn FnMut(usize),
    ) -> (State, usize) {
        let walks = if options.iterations >= WALKS * MIN_WALK { WALKS } else { 1 };
        let mut iterations = 0;
        let mut best = seed.clone();
        for w in 0..walks {
            let budget = options.iterations / walks + if w == 0 { options.iterations % walks } else { 0 };
            let start = if w == 0 { seed } else { alternate.unwrap_or(seed) };
            let found = self.walk(start, budget, options, &mut |done| progress(iterations + done));
            iterations += found.1;
            if found.0.cost.better(&best.cost) {
                best = found.0;
            }
        }
        (best, iterations)
    }

    /// One walk of `budget` iterations from `start`: annealing, then a descent from the best
    /// found (see `Polish`) in the last `1 / POLISH_SHARE` of them. Returns the best state and
    /// the iterations run (fewer when the search's budget, [`SearchOptions::time_limit`], cuts
    /// it).
    fn walk(
        &mut self,
        start: &State,
        budget: usize,
        options: &SearchOptions,
        progress: &mut dyn FnMut(usize),
    ) -> (State, usize) {
        let mut best = start.clone();
        let mut cur = best.clone();
        let patience = (budget / 5).max(20);
        let polish_from = budget - budget / POLISH_SHARE;
        let mut polish: Option<Polish> = None;
        let mut since_best = 0;
        let mut iterations = 0;
        let mut started: Option<Instant> = None;
        for it in 0..budget {
            if let Some(since) = started {
                self.budget.record(since);
            }
            if self.budget.spent() {
                break;
            }
            started = Some(Instant::now());
            iterations += 1;
            progress(iterations);
            if it >= polish_from {
                if polish.is_none() {
                    // listing the descent's steps is quadratic too: it gives up when the budget
                    // is over, and so does the walk
                    polish = Polish::around(&best, &mut self.rng, &self.budget);
                }
                let Some(queue) = polish.as_mut() else { break };
                if let Some(step) = queue.steps.pop() {
                    match self.apply(&best, &queue.body, step) {
                        Some(candidate) if candidate.cost.better(&best.cost) => {
                            best = candidate;
                            cur = best.clone();
                            polish = None;
                        }
                        Some(_) => {}
                        None => self.refused += 1,
                    }
                    continue;
                }
                // the best is a local optimum of the descent's rewrites: the annealing goes on
                // from its current candidate (and back to the best after `patience`)
            }
            let temperature = options.temperature * 0.01f64.powf(it as f64 / budget as f64);
            match self.propose(&cur) {
                None => self.refused += 1,
                Some(candidate) => {
                    let delta = (candidate.cost.objective - cur.cost.objective) / cur.cost.objective.max(1e-12);
                    if delta <= 0.0 || self.rng.unit() < (-delta / temperature.max(1e-12)).exp() {
                        cur = candidate;
                    }
                }
            }
            if cur.cost.better(&best.cost) {
                best = cur.clone();
                since_best = 0;
                polish = None;
            } else {
                since_best += 1;
                if since_best >= patience {
                    cur = best.clone();
                    since_best = 0;
                }
            }
        }
        (best, iterations)
    }

    /// `best` rewritten by one step of the descent (`body`: its body as the step indexes it),
    /// scored; `None` if the rule refuses or the result is not valid.
    fn apply(&mut self, best: &State, body: &[Action], step: Step) -> Option<State> {
        let p = &best.program;
        let (name, result) = match step {
            Step::Delete(i) => ("delete", unguarded::delete(p, &body[i])),
            Step::Eliminate(i, j, d) => ("eliminate_relay", unguarded::eliminate_relay(p, &body[i], &body[j], d)),
            Step::Fusion(i, j) => ("fusion", unguarded::fusion(p, &body[i], &body[j])),
            Step::Substitute(i, d, w) => ("substitute_source", unguarded::substitute_source(p, &body[i], d, w)),
            Step::Pushdown(i, j, d) => ("pushdown", unguarded::pushdown(p, &body[i], &body[j], d)),
        };
        self.successor(best, result.ok()?, format!("descent: {name}"))
    }
}

/// One rewrite of the descent, by index into [`Polish::body`].
#[derive(Clone, Copy, Debug)]
enum Step {
    /// Delete an action.
    Delete(usize),
    /// Eliminate the relay of the first action through the second's source, for this destination.
    Eliminate(usize, usize, SiteId),
    /// Fuse two actions of the same aggregate and source.
    Fusion(usize, usize),
    /// Send the action's aggregate to the destination from another site that holds it.
    Substitute(usize, SiteId, SiteId),
    /// Combine two transfers of disjoint aggregates from one source to the destination.
    Pushdown(usize, usize, SiteId),
}

/// The descent that ends the search: every rewrite of the best program that removes work or a
/// hop (deleting an action, eliminating a relay, fusing, substituting a source, pushing an
/// aggregation down), tried in a random order, one per iteration, taking the first that
/// improves on the best and starting over from it. Annealing samples these moves among many
/// others and may never try the one improving rewrite of a program of a few hundred actions;
/// the descent tries each, so it ends at a local optimum of them or when the iterations run
/// out (at a local optimum the annealing goes on with the iterations left).
struct Polish {
    /// The best program's body when the steps were listed.
    body: Vec<Action>,
    /// The steps not yet tried, the next last.
    steps: Vec<Step>,
}

impl Polish {
    /// Every step of the descent around `best`, shuffled by `rng`; `None` when `budget` is
    /// over before they are all listed.
    fn around(best: &State, rng: &mut Rng, budget: &Budget) -> Option<Polish> {
        let body: Vec<Action> = best.program.body.iter().cloned().collect();
        let refs: Vec<&Action> = body.iter().collect();
        let runs = aggregate_runs(&refs);
        let of_source = source_index(&refs);
        let mut steps: Vec<Step> = (0..body.len()).map(Step::Delete).collect();
        for (i, a) in body.iter().enumerate() {
            if budget.over() {
                return None;
            }
            let Some(s) = a.source_site() else { continue };
            let holders: BTreeSet<SiteId> = body[runs[i].clone()]
                .iter()
                .flat_map(|b| b.source_site().into_iter().chain(b.dests.iter().copied()))
                .collect();
            for &d in &a.dests {
                steps.extend(holders.iter().filter(|&&w| w != s && w != d).map(|&w| Step::Substitute(i, d, w)));
            }
            // the actions a step pairs `a` with, in body order: those of its aggregate, and
            // the later ones of its source
            let same = &of_source[&a.source];
            let mut partners: Vec<usize> = runs[i]
                .clone()
                .filter(|&j| j != i)
                .chain(same[same.partition_point(|&j| j <= i)..].iter().copied())
                .collect();
            partners.sort_unstable();
            partners.dedup();
            for (j, b) in partners.into_iter().map(|j| (j, &body[j])) {
                if b.aggregate == a.aggregate && b.source_site().is_some_and(|r| a.dests.contains(&r)) {
                    steps.extend(b.dests.iter().map(|&d| Step::Eliminate(i, j, d)));
                }
                if i < j && b.source == a.source {
                    if b.aggregate == a.aggregate {
                        steps.push(Step::Fusion(i, j));
                    } else if a.aggregate.is_disjoint(&b.aggregate) {
                        steps.extend(a.dests.intersection(&b.dests).map(|&d| Step::Pushdown(i, j, d)));
                    }
                }
            }
        }
        for i in (1..steps.len()).rev() {
            if i % CHECK_EVERY == 0 && budget.over() {
                return None;
            }
            steps.swap(i, rng.below(i + 1));
        }
        Some(Polish { body, steps })
    }
}

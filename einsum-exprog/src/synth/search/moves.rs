//! The annealing's moves: re-planning one group or every group, a placement swap, a
//! decongesting move, and a rewrite drawn from [`SearchOptions::rewrites`].

use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;

use einsum_core::SeededRng as Rng;

use super::super::decongest::decongest;
use super::super::plan::{Group, Kind, Load, Plan, SHAPES, Shape, build, congestion_aware, groups, pruned, reparent};
use super::super::rewrites::{RewriteSite, relay_slow_routes};
use super::Search;
use super::seeds::balanced_roots;
use super::state::State;
use crate::action::Action;
use crate::ids::SiteId;
use crate::program::Program;

impl Search<'_> {
    /// One random move from `cur`: `None` when it does not apply, is refused, or is invalid.
    pub(super) fn propose(&mut self, cur: &State) -> Option<State> {
        let r = self.rng.unit();
        let swappable = self.preamble.sized_partitions().len() >= 2;
        if r < 0.35 {
            self.replan_one(cur)
        } else if r < 0.42 {
            self.replan_all(cur)
        } else if r < 0.50 && swappable {
            self.swap(cur)
        } else if r < 0.58 && !self.machine.uniform {
            self.decongested(cur)
        } else {
            self.rewrite(cur)
        }
    }

    /// Re-plans one group with one field of its plan changed.
    fn replan_one(&mut self, cur: &State) -> Option<State> {
        let g = self.rng.below(cur.groups.len());
        let group = cur.groups.get(g)?;
        let plan = self.mutate(&cur.plans[g], group);
        let owners = self.owners(&cur.membership, &cur.groups);
        let (owned, mut body): (Vec<&Action>, Vec<&Action>) =
            cur.program.body.iter().partition(|a| owners.sole_owner(&a.aggregate, &cur.groups) == Some(g));
        let built: BTreeSet<Action> = build(group, &plan, &self.machine).into_iter().collect();
        // the body stays the same exactly when the group's actions are rebuilt as they were
        if owned.iter().all(|a| built.contains(a)) && built.iter().all(|a| cur.program.body.contains(a)) {
            return None;
        }
        body.extend(&built);
        let program = cur.program.with_body(body.into_iter().cloned());
        let cost = self.cost(&program, &cur.membership)?;
        let mut plans = cur.plans.clone();
        plans[g] = plan.clone();
        let origin = format!("re-planned {} as {}", group.aggregate, plan.describe());
        Some(State { membership: cur.membership.clone(), groups: cur.groups.clone(), plans, program, cost, origin })
    }

    /// `cur` with one transfer moved off its most loaded resource ([`decongest`]).
    fn decongested(&mut self, cur: &State) -> Option<State> {
        let program = decongest(&cur.program, &self.preamble, &self.machine, &mut self.rng).ok()?;
        self.successor(cur, program, "decongested the busiest link".to_string())
    }

    /// `cur` with its body replaced by `program`'s (same membership, groups and plans), scored;
    /// `None` if it is not valid.
    pub(super) fn successor(&mut self, cur: &State, program: Program, origin: String) -> Option<State> {
        let cost = self.cost(&program, &cur.membership)?;
        Some(State {
            membership: cur.membership.clone(),
            groups: cur.groups.clone(),
            plans: cur.plans.clone(),
            program,
            cost,
            origin,
        })
    }

    /// Re-plans every group (keeping each group's root): all with one random shape, or all
    /// with congestion-aware trees laid out in a random sequence of groups.
    fn replan_all(&mut self, cur: &State) -> Option<State> {
        let roots: Vec<SiteId> = cur
            .plans
            .iter()
            .zip(balanced_roots(&cur.groups))
            .map(|(p, balanced)| p.kind.root().unwrap_or(balanced))
            .collect();
        if self.rng.below(3) == 0 {
            let mut sequence: Vec<usize> = (0..cur.groups.len()).collect();
            for i in (1..sequence.len()).rev() {
                sequence.swap(i, self.rng.below(i + 1));
            }
            let plans = congestion_aware(&cur.groups, &roots, &sequence, &self.machine);
            let origin = "re-planned every group as congestion-aware trees".to_string();
            return self.state_of_plans(&cur.membership, cur.groups.clone(), plans, origin);
        }
        let order = self.rng.below(self.machine.orders.len());
        let relay = !self.machine.uniform && self.rng.below(2) == 1;
        let butterfly = self.rng.below(5) == 0;
        let (reduce, spread) = (SHAPES[self.rng.below(SHAPES.len())], SHAPES[self.rng.below(SHAPES.len())]);
        let plans: Vec<Plan> = roots
            .into_iter()
            .map(|root| {
                let kind = if butterfly { Kind::Butterfly } else { Kind::Rooted { root, reduce, spread } };
                Plan { kind, order, relay, salt: self.rng.next_u64() }
            })
            .collect();
        let origin = format!("re-planned every group as {}", plans.first().map_or(String::new(), Plan::describe));
        self.state_of_plans(&cur.membership, cur.groups.clone(), plans, origin)
    }

    /// Swaps two sites between two partitions declared by size and rebuilds from the plans
    /// (half the time on a machine with slow routes, then sends every transfer that has a
    /// faster detour through it: a placement change combined with relays).
    fn swap(&mut self, cur: &State) -> Option<State> {
        let sized = self.preamble.sized_partitions();
        let i = self.rng.below(sized.len());
        let j = (i + 1 + self.rng.below(sized.len() - 1)) % sized.len();
        let (p, q) = (&sized[i].0, &sized[j].0);
        let ps: Vec<SiteId> = cur.membership.sites(p)?.iter().copied().collect();
        let qs: Vec<SiteId> = cur.membership.sites(q)?.iter().copied().collect();
        let (a, b) = (*self.rng.pick(&ps)?, *self.rng.pick(&qs)?);
        let mut membership = cur.membership.clone();
        membership.0.get_mut(p)?.remove(&a);
        membership.0.get_mut(p)?.insert(b);
        membership.0.get_mut(q)?.remove(&b);
        membership.0.get_mut(q)?.insert(a);
        let gs = Rc::new(groups(&self.preamble, &membership)?);
        let balanced = balanced_roots(&gs);
        let plans: Vec<Plan> = cur
            .plans
            .iter()
            .zip(gs.iter())
            .zip(balanced)
            .map(|((plan, g), fallback)| match (&plan.kind, plan.kind.root()) {
                (Kind::Rooted { reduce, spread, .. }, Some(root)) if !g.root_candidates().contains(&root) => {
                    Plan { kind: Kind::Rooted { root: fallback, reduce: *reduce, spread: *spread }, ..plan.clone() }
                }
                (Kind::Trees { .. }, Some(root)) if !g.root_candidates().contains(&root) => Plan {
                    kind: Kind::Rooted { root: fallback, reduce: Shape::Fastest, spread: Shape::Fastest },
                    ..plan.clone()
                },
                _ => plan.clone(),
            })
            .collect();
        if self.machine.uniform || self.rng.below(2) == 0 {
            return self.state_of_plans(&membership, gs, plans, format!("placed {membership}"));
        }
        let body: BTreeSet<Action> = gs.iter().zip(&plans).flat_map(|(g, p)| build(g, p, &self.machine)).collect();
        let program = relay_slow_routes(&self.machine, &self.candidate(body)).ok()?;
        let cost = self.cost(&program, &membership)?;
        let origin = format!("placed {membership}, slow routes relayed");
        Some(State { membership, groups: gs, plans, program, cost, origin })
    }

    /// A plan with one thing changed at random: the root, a phase's shape, the ring order,
    /// relaying, the salt, one site's parent in a tree, or the structure.
    fn mutate(&mut self, plan: &Plan, group: &Group) -> Plan {
        let mut next = plan.clone();
        let roots = group.root_candidates();
        let root = plan.kind.root().or_else(|| roots.first().copied()).unwrap_or(SiteId(0));
        let (reduce, spread) = match plan.kind {
            Kind::Rooted { reduce, spread, .. } => (reduce, spread),
            _ => (Shape::Fastest, Shape::Fastest),
        };
        let shape = |rng: &mut Rng| SHAPES[rng.below(SHAPES.len())];
        match self.rng.below(8) {
            0 => {
                let root = self.rng.pick(&roots).copied().unwrap_or(root);
                next.kind = Kind::Rooted { root, reduce, spread };
            }
            1 => next.kind = Kind::Rooted { root, reduce: shape(&mut self.rng), spread },
            2 => next.kind = Kind::Rooted { root, reduce, spread: shape(&mut self.rng) },
            3 => next.order = self.rng.below(self.machine.orders.len()),
            4 if !self.machine.uniform => next.relay = !plan.relay,
            5 => {
                next.salt = self.rng.next_u64();
                next.kind = Kind::Rooted { root, reduce, spread };
            }
            6 | 7 => next.kind = self.reparented(plan, group, root),
            _ if group.butterfly_applies() && plan.kind != Kind::Butterfly => next.kind = Kind::Butterfly,
            _ => next.kind = Kind::Rooted { root, reduce: shape(&mut self.rng), spread: shape(&mut self.rng) },
        }
        next
    }

    /// Explicit trees for `plan` (its own, or the fastest-path trees of its root) with one
    /// site of one tree hung under another parent: relay introduction or elimination (and,
    /// while reducing, aggregation pushdown) on the tree's edges.
    fn reparented(&mut self, plan: &Plan, group: &Group, root: SiteId) -> Kind {
        let (mut reduce, mut spread) = match &plan.kind {
            Kind::Trees { reduce, spread, .. } => (reduce.clone(), spread.clone()),
            _ => {
                let none = Load::new();
                (
                    self.machine.tree(root, true, plan.salt, &none, group.bytes),
                    self.machine.tree(root, false, plan.salt, &none, group.bytes),
                )
            }
        };
        let inbound = self.rng.below(2) == 0;
        let (tree, ends): (&mut BTreeMap<SiteId, SiteId>, Vec<SiteId>) = if inbound {
            (&mut reduce, group.holders.keys().copied().collect())
        } else {
            (&mut spread, group.targets.iter().copied().collect())
        };
        let used: Vec<SiteId> = pruned(tree, root, ends.into_iter()).into_iter().map(|(s, _)| s).collect();
        if let Some(&v) = self.rng.pick(&used) {
            let parents: Vec<SiteId> = self
                .machine
                .sites
                .iter()
                .copied()
                .filter(|&p| {
                    p != v && if inbound { self.machine.bandwidth(v, p) } else { self.machine.bandwidth(p, v) } > 0.0
                })
                .collect();
            if let Some(&p) = self.rng.pick(&parents)
                && let Some(t) = reparent(tree, root, v, p)
            {
                *tree = t;
            }
        }
        Kind::Trees { root, reduce, spread }
    }

    /// One Section 5.4 rewrite at a random place, aimed where it is likely to pay off: a rule
    /// of [`SearchOptions::rewrites`](super::SearchOptions::rewrites) drawn by weight, then
    /// proposed on `cur`.
    fn rewrite(&mut self, cur: &State) -> Option<State> {
        let rule = self.rewrites.draw(&mut self.rng)?;
        let mut at = RewriteSite::new(&cur.program, &self.machine, &mut self.rng, self.budget);
        let program = rule.propose(&mut at)?;
        self.successor(cur, program, format!("rewrite: {}", rule.name()))
    }
}

//! A point of the search and how it is scored.

use std::collections::BTreeSet;
use std::hash::{Hash, Hasher};
use std::rc::Rc;

use super::super::SynthError;
use super::super::owners::Owners;
use super::super::plan::{Group, Plan, build, groups};
use super::Search;
use super::seeds::{balanced_roots, star};
use crate::action::Action;
use crate::lower::lower;
use crate::membership::Membership;
use crate::program::Program;

/// A point of the search: a membership, the plan last used for each group, and the program:
/// a body of site-sourced actions, with only `GPUS` of the preamble ([`Search::candidate`]),
/// so that a move clones the body and not the preamble (its `IN` and `OUT` are as large as a
/// body); the preamble is the search's, resolved under the membership where needed.
#[derive(Clone, Debug)]
pub(super) struct State {
    pub(super) membership: Membership,
    /// The groups under the membership, shared by every state of that membership.
    pub(super) groups: Rc<Vec<Group>>,
    pub(super) plans: Vec<Plan>,
    pub(super) program: Program,
    pub(super) cost: Score,
    pub(super) origin: String,
}

/// How good a candidate is: its simulated completion, and the annealing's objective, which
/// adds a little of the mean task end time so that moves that shorten paths other than the
/// critical one (a plateau of the makespan) still count as progress.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Score {
    pub(super) completion: f64,
    pub(super) objective: f64,
}

impl Score {
    /// Weight of the mean task end time in the objective.
    pub(super) const SPREAD: f64 = 0.5;

    /// Better: a shorter completion, ties broken by the objective.
    pub(super) fn better(&self, other: &Score) -> bool {
        self.completion < other.completion || (self.completion == other.completion && self.objective < other.objective)
    }
}

impl Search<'_> {
    /// A candidate with `body`: a program with the preamble's `GPUS` only (its sites, where
    /// it declares none: the sites the search routes over), which is all the rewrites read
    /// of a preamble (a relay must be a declared site); [`Search::cost`] scores it against
    /// the preamble.
    pub(super) fn candidate(&self, body: BTreeSet<Action>) -> Program {
        let gpus = self.preamble.gpus.clone().unwrap_or_else(|| self.machine.sites.iter().copied().collect());
        Program { gpus: Some(gpus), body, ..Program::default() }
    }

    pub(super) fn groups_under(&self, membership: &Membership) -> Result<Vec<Group>, SynthError> {
        groups(&self.preamble, membership)
            .ok_or_else(|| SynthError::Placement(format!("{membership} leaves a required partition without sites")))
    }

    /// The index of `groups`' atoms, the groups of `membership`.
    pub(super) fn owners(&mut self, membership: &Membership, groups: &[Group]) -> Rc<Owners> {
        self.owners.entry(membership.clone()).or_insert_with(|| Rc::new(Owners::new(groups))).clone()
    }

    /// The score of `program`'s body (with the preamble resolved under `membership`), or
    /// `None` if it is not valid. The one place a candidate is validated: the rewrites the
    /// search applies are the unguarded ones ([`crate::rewrite::unguarded`]), so the closure is
    /// computed once per distinct candidate, and not at all for one seen before.
    pub(super) fn cost(&mut self, program: &Program, membership: &Membership) -> Option<Score> {
        let key = fingerprint(membership, &program.body);
        if let Some(c) = self.cache.get(&key) {
            return *c;
        }
        let end = if self.reference {
            let program = self.preamble.resolve(membership).with_body(program.body.iter().cloned());
            let closure = program.validate_with(membership).ok().map(|v| v.closure);
            closure.and_then(|c| lower(&program, &c).graph.simulate_end_times(self.topology).ok())
        } else {
            self.eval.end_times(&program.body, membership, self.topology)
        };
        let cost = end.map(|end| {
            let completion_ms = 1e3 * end.iter().fold(0.0, |acc: f64, &e| acc.max(e));
            let mean_ms = 1e3 * end.iter().sum::<f64>() / end.len().max(1) as f64;
            Score { completion: completion_ms, objective: completion_ms + Score::SPREAD * mean_ms }
        });
        if cost.is_some() {
            self.evaluated += 1;
        }
        self.cache.insert(key, cost);
        cost
    }

    /// A state from an explicit body (plans default to balanced stars).
    pub(super) fn state_of_body(
        &mut self,
        membership: &Membership,
        body: BTreeSet<Action>,
        origin: &str,
    ) -> Result<Option<State>, SynthError> {
        let gs = Rc::new(self.groups_under(membership)?);
        let roots = balanced_roots(&gs);
        let plans = roots.iter().map(|&root| star(root)).collect();
        let program = self.candidate(body);
        Ok(self.cost(&program, membership).map(|cost| State {
            membership: membership.clone(),
            groups: gs,
            plans,
            program,
            cost,
            origin: origin.to_string(),
        }))
    }

    /// A state whose body is the union of the groups' plans.
    pub(super) fn state_of_plans(
        &mut self,
        membership: &Membership,
        gs: Rc<Vec<Group>>,
        plans: Vec<Plan>,
        origin: String,
    ) -> Option<State> {
        let body: BTreeSet<Action> = gs.iter().zip(&plans).flat_map(|(g, p)| build(g, p, &self.machine)).collect();
        let program = self.candidate(body);
        let cost = self.cost(&program, membership)?;
        Some(State { membership: membership.clone(), groups: gs, plans, program, cost, origin })
    }
}

/// A 64-bit digest of a candidate (its membership and body), the key of the search's cache
/// of scores: hashing a body is cheaper than cloning it into the key, which allocated every
/// action of every candidate again. Two distinct candidates share a digest with probability
/// about 2^-64 per pair; even then the result stays true, since the best program is
/// validated and simulated afresh before it is returned.
fn fingerprint(membership: &Membership, body: &BTreeSet<Action>) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    membership.hash(&mut h);
    body.hash(&mut h);
    h.finish()
}

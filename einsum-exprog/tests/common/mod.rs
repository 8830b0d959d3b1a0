//! Random valid programs for the property tests: a random preamble, its naive program
//! (gather every atom of each required aggregate at each target site and aggregate there),
//! then a random walk of rewrites (each of which keeps validity).
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};

use einsum_exprog::rewrite::{self, Refusal};
use einsum_exprog::{
    Action, Aggregate, AtomId, Input, Membership, PartitionId, PartitionSpec, Program, Requirement, SiteId, Target,
};

/// The seedable generator that drives the test choices.
pub use einsum_core::SeededRng as Rng;

/// The generators' extra draws.
pub trait Chance {
    /// True with probability `num / den`.
    fn chance(&mut self, num: usize, den: usize) -> bool;

    /// A random non-empty subset of `items` (which must be non-empty).
    fn subset<T: Clone>(&mut self, items: &[T]) -> Vec<T>;
}

impl Chance for Rng {
    fn chance(&mut self, num: usize, den: usize) -> bool {
        self.below(den) < num
    }

    fn subset<T: Clone>(&mut self, items: &[T]) -> Vec<T> {
        loop {
            let s: Vec<T> = items.iter().filter(|_| self.chance(1, 2)).cloned().collect();
            if !s.is_empty() {
                return s;
            }
        }
    }
}

pub fn atom(name: &str) -> AtomId {
    AtomId::new(name).unwrap()
}

/// How partitions appear in a random preamble.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Partitions {
    /// Possibly, declared by members or by size.
    Any,
    /// Possibly, declared by members only (the membership is fixed).
    Explicit,
}

/// A random preamble and a membership under which its OUT is satisfiable.
pub fn random_preamble(rng: &mut Rng, partitions: Partitions) -> (Program, Membership) {
    let n_sites = 2 + rng.below(4);
    let sites: Vec<SiteId> = (0..n_sites).map(SiteId).collect();
    let mut p = Program::default();
    let declare_gpus = partitions == Partitions::Explicit || !rng.chance(1, 5);
    if declare_gpus {
        p.gpus = Some(sites.iter().copied().collect());
    }
    let n_atoms = 1 + rng.below(5);
    let atoms: Vec<AtomId> = (0..n_atoms).map(|i| atom(&format!("A{i}"))).collect();
    for a in &atoms {
        let size_gb = *rng.pick(&[1.0, 1.0, 0.5, 2.0, 1e-3]).unwrap();
        p.inputs.insert(a.clone(), Input { site: *rng.pick(&sites).unwrap(), size_gb });
    }
    let mut membership = Membership::default();
    if declare_gpus && rng.chance(1, 2) {
        // Split the sites into two groups at a random cut of a random order.
        let mut order = sites.clone();
        for i in (1..order.len()).rev() {
            order.swap(i, rng.below(i + 1));
        }
        let cut = 1 + rng.below(order.len() - 1);
        for (name, group) in [("G1", &order[..cut]), ("G2", &order[cut..])] {
            let id = PartitionId::new(name).unwrap();
            let members: BTreeSet<SiteId> = group.iter().copied().collect();
            let spec = if partitions == Partitions::Any && rng.chance(1, 2) {
                PartitionSpec::Size(members.len())
            } else {
                PartitionSpec::Members(members.clone())
            };
            p.partitions.insert(id.clone(), spec);
            membership.0.insert(id, members);
        }
    }
    let n_outputs = 1 + rng.below(3);
    for _ in 0..n_outputs {
        let aggregate = Aggregate::new(rng.subset(&atoms)).unwrap();
        let target = if !membership.0.is_empty() && rng.chance(1, 2) {
            Target::Partition(rng.pick(&membership.0.keys().cloned().collect::<Vec<_>>()).unwrap().clone())
        } else {
            Target::Site(*rng.pick(&sites).unwrap())
        };
        p.outputs.insert(Requirement::new(aggregate, target));
    }
    (p, membership)
}

/// The naive program: multicast every atom of each requirement from its input site to each
/// target site lacking it, then aggregate locally at the target (`X @ G` for a partition).
pub fn naive(preamble: &Program, membership: &Membership) -> Program {
    let mut sends: BTreeMap<(AtomId, SiteId), BTreeSet<SiteId>> = BTreeMap::new();
    let mut body = BTreeSet::new();
    for r in &preamble.outputs {
        for t in membership.resolve(&r.target).unwrap() {
            for a in r.aggregate.atoms() {
                let from = preamble.inputs[a].site;
                if from != t {
                    sends.entry((a.clone(), from)).or_default().insert(t);
                }
            }
        }
        body.insert(Action::local(r.aggregate.clone(), r.target.clone()));
    }
    for ((a, from), dests) in sends {
        body.insert(Action::new(Aggregate::atom(a), from, dests));
    }
    preamble.with_body(body)
}

/// The rules, by name.
pub const RULES: [&str; 9] = [
    "fission",
    "fusion",
    "introduce_relay",
    "eliminate_relay",
    "pushdown",
    "pullup",
    "substitute_source",
    "insert",
    "delete",
];

fn site_actions(p: &Program) -> Vec<&Action> {
    p.body.iter().filter(|a| a.source_site().is_some()).collect()
}

fn pick_dest(rng: &mut Rng, a: &Action) -> Option<SiteId> {
    rng.pick(&a.dests.iter().copied().collect::<Vec<_>>()).copied()
}

/// Tries one random rewrite on `p`: `None` when the chosen rule has nowhere to apply, else
/// the rule's name and result.
pub fn random_rewrite(rng: &mut Rng, p: &Program) -> Option<(&'static str, Result<Program, Refusal>)> {
    let rule = RULES[rng.below(RULES.len())];
    let sites: Vec<SiteId> = p.sites().into_iter().collect();
    let body: Vec<&Action> = p.body.iter().collect();
    let result = match rule {
        "fission" => {
            let multi: Vec<&Action> = body.iter().copied().filter(|a| a.dests.len() >= 2).collect();
            let a = *rng.pick(&multi)?;
            let dests: Vec<SiteId> = a.dests.iter().copied().collect();
            let mut first: BTreeSet<SiteId> = rng.subset(&dests).into_iter().collect();
            if first.len() == dests.len() {
                first.remove(&dests[0]);
            }
            rewrite::fission(p, a, &first)
        }
        "fusion" => {
            let pairs: Vec<(&Action, &Action)> = body
                .iter()
                .flat_map(|a| body.iter().map(move |b| (*a, *b)))
                .filter(|(a, b)| a < b && a.aggregate == b.aggregate && a.source == b.source)
                .collect();
            let (a, b) = *rng.pick(&pairs)?;
            rewrite::fusion(p, a, b)
        }
        "introduce_relay" => {
            let sends: Vec<&Action> = site_actions(p).into_iter().filter(|a| !a.is_local()).collect();
            let a = *rng.pick(&sends)?;
            let d = pick_dest(rng, a)?;
            let relays: Vec<SiteId> =
                sites.iter().copied().filter(|r| Some(*r) != a.source_site() && *r != d).collect();
            rewrite::introduce_relay(p, a, d, *rng.pick(&relays)?)
        }
        "eliminate_relay" => {
            let acts = site_actions(p);
            let pairs: Vec<(&Action, &Action)> = acts
                .iter()
                .flat_map(|a| acts.iter().map(move |b| (*a, *b)))
                .filter(|(a, b)| {
                    a.aggregate == b.aggregate && b.source_site().is_some_and(|r| a.dests.contains(&r)) && !b.is_local()
                })
                .collect();
            let (a, b) = *rng.pick(&pairs)?;
            rewrite::eliminate_relay(p, a, b, pick_dest(rng, b)?)
        }
        "pushdown" => {
            let triples: Vec<(&Action, &Action, SiteId)> = body
                .iter()
                .flat_map(|a| body.iter().map(move |b| (*a, *b)))
                .filter(|(a, b)| a < b && a.source == b.source && a.aggregate.is_disjoint(&b.aggregate))
                .flat_map(|(a, b)| a.dests.intersection(&b.dests).map(move |d| (a, b, *d)))
                .collect();
            let (a, b, d) = *rng.pick(&triples)?;
            rewrite::pushdown(p, a, b, d)
        }
        "pullup" => {
            let big: Vec<&Action> = body.iter().copied().filter(|a| a.aggregate.len() >= 2 && !a.is_local()).collect();
            let a = *rng.pick(&big)?;
            let atoms: Vec<AtomId> = a.aggregate.atoms().iter().cloned().collect();
            let mut part = rng.subset(&atoms);
            if part.len() == atoms.len() {
                part.pop();
            }
            let d = pick_dest(rng, a)?;
            rewrite::pullup(p, a, d, &Aggregate::new(part).unwrap(), rng.chance(1, 2))
        }
        "substitute_source" => {
            let sends: Vec<&Action> = site_actions(p).into_iter().filter(|a| !a.is_local()).collect();
            let a = *rng.pick(&sends)?;
            let d = pick_dest(rng, a)?;
            rewrite::substitute_source(p, a, d, *rng.pick(&sites)?)
        }
        "insert" => {
            let atoms: Vec<AtomId> = p.inputs.keys().cloned().collect();
            let aggregate = Aggregate::new(rng.subset(&atoms)).unwrap();
            let source = *rng.pick(&sites)?;
            let others: Vec<SiteId> = sites.iter().copied().filter(|s| *s != source).collect();
            let dests: Vec<SiteId> = if others.is_empty() || rng.chance(1, 3) { vec![] } else { rng.subset(&others) };
            rewrite::insert(p, Action::new(aggregate, source, dests))
        }
        _ => rewrite::delete(p, *rng.pick(&body)?),
    };
    Some((rule, result))
}

/// A random valid program: a random preamble's naive program after `steps` random rewrite
/// attempts (refused ones are skipped).
pub fn random_valid_program(rng: &mut Rng, partitions: Partitions, steps: usize) -> Program {
    let (preamble, membership) = random_preamble(rng, partitions);
    walk(rng, naive(&preamble, &membership), steps)
}

/// `steps` random rewrite attempts from `p`, keeping the successful ones.
pub fn walk(rng: &mut Rng, mut p: Program, steps: usize) -> Program {
    for _ in 0..steps {
        if let Some((_, Ok(q))) = random_rewrite(rng, &p) {
            p = q;
        }
    }
    p
}

//! The actions of one group's plan: rooted reductions and spreads, butterflies, relays.

use std::collections::{BTreeMap, BTreeSet};

use super::{Group, Kind, Load, Plan, Shape, SiteRoutes, Tree, pruned};
use crate::action::Action;
use crate::aggregate::Aggregate;
use crate::ids::SiteId;
use crate::target::Target;

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

//! Striped rings: the multi-ring collective. The groups (one per required aggregate, after
//! atom refinement one per chunk) are dealt to the machine's directed rings in proportion to
//! their bandwidth, and each group is reduced and spread along its ring by a chain (the
//! pipeline of a ring collective), with the roots of one ring's groups spread over its sites.
//!
//! On the DGX-V100 the rings are the double-link cycle (50 GB/s per direction) and the
//! single-link cycle disjoint from it (25 GB/s), each walked both ways: four directed rings
//! that use every NVLink lane in both directions, with units 2, 2, 1, 1. Dealing 48 chunks
//! of an all-reduce to them (8 roots per unit) gives each GPU 150 GB/s of sends, where a
//! single ring gives it 50. On a switch every order is one more ring through the same
//! endpoint caps, so striping changes little there.

use std::collections::{BTreeMap, BTreeSet};

use super::plan::{Group, Kind, Plan, Shape, SiteRoutes};
use crate::ids::SiteId;

/// The directed rings the stripes use and each one's share, in units of the slowest: the
/// machine's ring orders in their order (the sites in order only on a uniform machine,
/// where it is as good as any), each taken only if it shares no directed link with those
/// taken before. `(order index, units)`.
pub(crate) fn rings(machine: &SiteRoutes) -> Vec<(usize, usize)> {
    let mut used: BTreeSet<(SiteId, SiteId)> = BTreeSet::new();
    let mut taken: Vec<(usize, f64)> = Vec::new();
    for (i, order) in machine.orders.iter().enumerate() {
        if order.len() < 2 || (i == 0 && !machine.uniform && machine.orders.len() > 1) {
            continue;
        }
        let edges: Vec<(SiteId, SiteId)> = order.iter().copied().zip(order.iter().copied().cycle().skip(1)).collect();
        if edges.iter().any(|e| used.contains(e)) {
            continue;
        }
        let bottleneck = edges.iter().map(|&(a, b)| machine.bandwidth(a, b)).fold(f64::INFINITY, f64::min);
        if bottleneck > 0.0 {
            used.extend(edges);
            taken.push((i, bottleneck));
        }
    }
    let slowest = taken.iter().map(|(_, b)| *b).fold(f64::INFINITY, f64::min);
    taken.into_iter().map(|(i, b)| (i, ((b / slowest).round() as usize).max(1))).collect()
}

/// The chunk count that lets striping give every unit of every ring a group rooted at each
/// site: `units × sites / gcd(groups, units × sites)` (1 when the groups already suffice).
pub(crate) fn chunks_to_stripe(groups: usize, machine: &SiteRoutes) -> usize {
    let slots = rings(machine).iter().map(|(_, u)| u).sum::<usize>() * machine.sites.len();
    if groups == 0 || slots == 0 {
        return 1;
    }
    slots / gcd(groups, slots)
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// Striped plans for `gs`: group `i` goes to the ring of unit `i mod total units` (units laid
/// out ring after ring), rooted, among its root candidates (the targets that hold some of its
/// atoms, else its targets, else its holders), at the site rooting the fewest groups on that ring so far, then the fewest
/// overall, then the lowest. `None` without a ring.
pub(crate) fn striped(gs: &[Group], machine: &SiteRoutes) -> Option<Vec<Plan>> {
    let slots: Vec<usize> = rings(machine).into_iter().flat_map(|(o, u)| std::iter::repeat_n(o, u)).collect();
    if slots.is_empty() {
        return None;
    }
    let mut on_ring: BTreeMap<(usize, SiteId), usize> = BTreeMap::new();
    let mut overall: BTreeMap<SiteId, usize> = BTreeMap::new();
    let plans = gs
        .iter()
        .enumerate()
        .map(|(i, g)| {
            let order = slots[i % slots.len()];
            let holding: Vec<SiteId> = g.targets.iter().copied().filter(|t| g.holders.contains_key(t)).collect();
            let candidates: Vec<SiteId> = if !holding.is_empty() {
                holding
            } else if g.targets.is_empty() {
                g.holders.keys().copied().collect()
            } else {
                g.targets.iter().copied().collect()
            };
            let root = candidates
                .into_iter()
                .min_by_key(|s| {
                    (on_ring.get(&(order, *s)).copied().unwrap_or(0), overall.get(s).copied().unwrap_or(0), *s)
                })
                .unwrap_or(SiteId(0));
            *on_ring.entry((order, root)).or_default() += 1;
            *overall.entry(root).or_default() += 1;
            Plan {
                kind: Kind::Rooted { root, reduce: Shape::Chain, spread: Shape::Chain },
                order,
                relay: false,
                salt: 0,
            }
        })
        .collect();
    Some(plans)
}

#[cfg(test)]
mod tests {
    use super::*;
    use einsum_sim::Topology;

    fn machine(name: &str) -> SiteRoutes {
        SiteRoutes::new(&(0..8).map(SiteId).collect(), &Topology::preset(name).unwrap())
    }

    #[test]
    fn v100_stripes_use_both_rings_both_ways() {
        let m = machine("dgx-v100");
        let r = rings(&m);
        assert_eq!(r.iter().map(|(_, u)| *u).collect::<Vec<_>>(), vec![2, 2, 1, 1], "{r:?} of {:?}", m.orders);
        // one all-reduce group: 48 chunks give 6 units x 8 roots
        assert_eq!(chunks_to_stripe(1, &m), 48);
        assert_eq!(chunks_to_stripe(8, &m), 6);
        assert_eq!(chunks_to_stripe(48, &m), 1);
    }

    #[test]
    fn a100_stripes_are_the_ring_both_ways() {
        let m = machine("dgx-a100");
        assert!(m.uniform);
        assert!(!rings(&m).is_empty());
        assert!(rings(&m).iter().all(|(_, u)| *u == 1));
    }
}

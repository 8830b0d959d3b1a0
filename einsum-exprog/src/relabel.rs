//! Relabelling sites: a program's canonical form up to a renaming of its sites, and the check
//! that a machine cannot tell a renaming apart.
//!
//! Two exchange problems that differ only in which GPUs play which part (the same layer of
//! a stack placed on other devices, or the same repartition between other device groups)
//! have the same best programs up to the renaming, *if* the machine looks the same from the
//! renamed sites: every route between two renamed sites must cross resources of the same
//! capacities, shared in the same pattern, as the route between the originals. On a switched
//! machine of identical GPUs any renaming qualifies; on a DGX-1V (NVLink hypercube plus a
//! PCIe bridge) most do not. [`Relabelling::preserves`] checks it rather than assuming it, and
//! the caller (`einsum-compile`'s synthesis cache) reuses a program only when it holds.
//!
//! The canonical form ([`Relabelling::canonical`]) renames the sites in the order they first
//! appear in the program text (`GPUS` aside): `IN` in atom order, then the members of
//! explicit partitions, then `OUT`, then the body, then any remaining `GPUS` ascending; the
//! `k`-th site seen becomes site `k`. Two programs equal up to a renaming of sites have the
//! same canonical form, because that order is read off the parts the renaming preserves
//! (atom names, partition names, requirement order by aggregate).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use einsum_sim::Topology;

use crate::action::Action;
use crate::ids::SiteId;
use crate::membership::Membership;
use crate::partition::PartitionSpec;
use crate::program::Program;
use crate::target::Target;

/// A renaming of sites: a bijection between two sets of sites; sites it does not name are
/// left as they are.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Relabelling {
    map: BTreeMap<SiteId, SiteId>,
}

impl Relabelling {
    /// The renaming that puts `program` in canonical form: its sites, in order of first
    /// appearance (module docs), become `0, 1, 2, ...`.
    pub fn canonical(program: &Program) -> Relabelling {
        let mut order: Vec<SiteId> = Vec::new();
        let mut seen: BTreeSet<SiteId> = BTreeSet::new();
        let mut see = |s: SiteId| {
            if seen.insert(s) {
                order.push(s);
            }
        };
        program.inputs.values().for_each(|i| see(i.site));
        for spec in program.partitions.values() {
            if let PartitionSpec::Members(m) = spec {
                m.iter().copied().for_each(&mut see);
            }
        }
        let target = |t: &Target| match t {
            Target::Site(s) => Some(*s),
            Target::Partition(_) => None,
        };
        program.outputs.iter().filter_map(|r| target(&r.target)).for_each(&mut see);
        for a in &program.body {
            target(&a.source).into_iter().chain(a.dests.iter().copied()).for_each(&mut see);
        }
        program.sites().into_iter().for_each(&mut see);
        Relabelling { map: order.into_iter().enumerate().map(|(k, s)| (s, SiteId(k))).collect() }
    }

    /// Whether every site keeps its name.
    pub fn is_identity(&self) -> bool {
        self.map.iter().all(|(a, b)| a == b)
    }

    /// The new name of `site`.
    pub fn site(&self, site: SiteId) -> SiteId {
        self.map.get(&site).copied().unwrap_or(site)
    }

    /// The renaming that undoes this one.
    pub fn inverse(&self) -> Relabelling {
        Relabelling { map: self.map.iter().map(|(a, b)| (*b, *a)).collect() }
    }

    /// This renaming followed by `next`, on the sites this one names.
    pub fn then(&self, next: &Relabelling) -> Relabelling {
        Relabelling { map: self.map.iter().map(|(a, b)| (*a, next.site(*b))).collect() }
    }

    fn target(&self, t: &Target) -> Target {
        match t {
            Target::Site(s) => Target::Site(self.site(*s)),
            Target::Partition(p) => Target::Partition(p.clone()),
        }
    }

    fn sites(&self, sites: &BTreeSet<SiteId>) -> BTreeSet<SiteId> {
        sites.iter().map(|s| self.site(*s)).collect()
    }

    /// The program with every site renamed (in `GPUS`, explicit partitions, `IN`, `OUT` and
    /// the body).
    pub fn program(&self, program: &Program) -> Program {
        let mut out = program.with_body(program.body.iter().map(|a| self.action(a)));
        out.gpus = program.gpus.as_ref().map(|g| self.sites(g));
        for spec in out.partitions.values_mut() {
            if let PartitionSpec::Members(m) = spec {
                *m = self.sites(m);
            }
        }
        for input in out.inputs.values_mut() {
            input.site = self.site(input.site);
        }
        out.outputs = program
            .outputs
            .iter()
            .map(|r| crate::program::Requirement::new(r.aggregate.clone(), self.target(&r.target)))
            .collect();
        out
    }

    /// The action with its source site and destinations renamed.
    pub fn action(&self, a: &Action) -> Action {
        Action::new(a.aggregate.clone(), self.target(&a.source), a.dests.iter().map(|d| self.site(*d)))
    }

    /// The membership with every partition's sites renamed.
    pub fn membership(&self, m: &Membership) -> Membership {
        Membership(m.0.iter().map(|(p, s)| (p.clone(), self.sites(s))).collect())
    }

    /// Whether `topology` looks the same after the renaming, seen from the sites it names:
    /// each renamed site is a site of the topology with the same parameters, and there is a
    /// one-to-one map of resources, preserving capacities, that takes each site's HBM to its
    /// new name's HBM and the route between any two named sites, resource by resource, to the
    /// route between their new names. Then every exchange among the named sites simulates the
    /// same renamed (the simulator sees only routes, capacities and which flows share what).
    /// Costs `O(k²)` route lookups for `k` named sites.
    pub fn preserves(&self, topology: &Topology) -> bool {
        if self.is_identity() {
            return true;
        }
        let mut forward: HashMap<usize, usize> = HashMap::new();
        let mut backward: HashMap<usize, usize> = HashMap::new();
        let mut pair = |a: usize, b: usize| -> bool {
            let same =
                topology.resources().get(a).map(|r| r.capacity) == topology.resources().get(b).map(|r| r.capacity);
            same && *forward.entry(a).or_insert(b) == b && *backward.entry(b).or_insert(a) == a
        };
        for (&a, &b) in &self.map {
            match (topology.site(a), topology.site(b), topology.hbm(a), topology.hbm(b)) {
                (Some(x), Some(y), Some(ha), Some(hb)) if x == y && pair(ha.0, hb.0) => {}
                _ => return false,
            }
        }
        for (&a, &a2) in &self.map {
            for (&b, &b2) in &self.map {
                if a == b {
                    continue;
                }
                let (Some(r1), Some(r2)) = (topology.route(a, b), topology.route(a2, b2)) else { return false };
                if r1.len() != r2.len() || !r1.iter().zip(&r2).all(|(x, y)| pair(x.0, y.0)) {
                    return false;
                }
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn program(src: &str) -> Program {
        src.parse().unwrap()
    }

    #[test]
    fn programs_equal_up_to_renaming_share_a_canonical_form() {
        let a = program("IN: A @ 3; B @ 5\nOUT: A+B @ 5, 3\nA @ 3 -> 5\nA+B @ 5 -> 3");
        let b = program("IN: A @ 0; B @ 7\nOUT: A+B @ 7, 0\nA @ 0 -> 7\nA+B @ 7 -> 0");
        let (ca, cb) = (Relabelling::canonical(&a), Relabelling::canonical(&b));
        assert_eq!(ca.program(&a), cb.program(&b));
        assert_eq!(ca.program(&a), program("IN: A @ 0; B @ 1\nOUT: A+B @ 0, 1\nA @ 0 -> 1\nA+B @ 1 -> 0"));
        // b's sites in a's names: undo b's canonical renaming after a's
        let b_to_a = cb.then(&ca.inverse());
        assert_eq!(b_to_a.program(&b), a);
        assert_eq!(b_to_a.inverse().program(&a), b);
        let different = program("IN: A @ 3; B @ 3\nOUT: A+B @ 5");
        assert_ne!(Relabelling::canonical(&different).program(&different), ca.program(&a));
    }

    #[test]
    fn a_switch_of_equal_gpus_preserves_any_renaming_and_a_hypercube_does_not() {
        let swap = Relabelling { map: BTreeMap::from([(SiteId(0), SiteId(5)), (SiteId(5), SiteId(0))]) };
        assert!(swap.preserves(&Topology::preset("dgx-a100").unwrap()));
        // On a DGX-1V, 0 and 3 share a double NVLink (50 GB/s) and 0 and 1 a single one:
        // exchanging 0 and 3 maps the double link onto itself, renaming 3 to 1 does not.
        let v100 = Topology::preset("dgx-v100").unwrap();
        let map = |pairs: &[(usize, usize)]| Relabelling {
            map: pairs.iter().map(|&(a, b)| (SiteId(a), SiteId(b))).collect(),
        };
        assert!(map(&[(0, 3), (3, 0)]).preserves(&v100));
        assert!(!map(&[(0, 0), (3, 1)]).preserves(&v100));
        assert!(Relabelling::default().preserves(&v100));
        // site out of range
        let far = Relabelling { map: BTreeMap::from([(SiteId(0), SiteId(8)), (SiteId(8), SiteId(0))]) };
        assert!(!far.preserves(&Topology::preset("dgx-a100").unwrap()));
    }

    #[test]
    fn memberships_and_actions_are_renamed() {
        let r = Relabelling { map: BTreeMap::from([(SiteId(1), SiteId(2)), (SiteId(2), SiteId(1))]) };
        let m =
            Membership(BTreeMap::from([(crate::ids::PartitionId::new("S1").unwrap(), BTreeSet::from([SiteId(1)]))]));
        assert_eq!(r.membership(&m).0.values().next().unwrap(), &BTreeSet::from([SiteId(2)]));
        assert_eq!(r.inverse().membership(&r.membership(&m)), m);
    }
}

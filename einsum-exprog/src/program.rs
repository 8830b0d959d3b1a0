//! Programs: the preamble (`GPUS`, `PARTITIONS`, `IN`, `OUT`) and a body that is a *set* of
//! actions.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use crate::action::Action;
use crate::aggregate::Aggregate;
use crate::ids::{AtomId, PartitionId, SiteId};
use crate::membership::Membership;
use crate::partition::PartitionSpec;
use crate::target::Target;

/// Size of an atom when `IN` gives none, in GB.
pub const DEFAULT_SIZE_GB: f64 = 1.0;

/// The largest atom size a program may declare, in GB (a zettabyte): far beyond any
/// machine, and small enough that byte counts, aggregates and simulated times stay finite.
pub const MAX_SIZE_GB: f64 = 1e12;

/// Where an atom starts and how big it is.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Input {
    /// The site holding the atom initially.
    pub site: SiteId,
    /// Size in GB (1e9 bytes); positive and finite in a checked program.
    pub size_gb: f64,
}

/// An `OUT` requirement: `aggregate` must be materialised at `target` (at every site of it).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Requirement {
    /// The required aggregate.
    pub aggregate: Aggregate,
    /// The site or partition that must hold it.
    pub target: Target,
}

impl Requirement {
    /// `aggregate @ target`.
    pub fn new(aggregate: Aggregate, target: impl Into<Target>) -> Self {
        Requirement { aggregate, target: target.into() }
    }
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} @ {}", self.aggregate, self.target)
    }
}

/// An exchange program (Section 5.2).
///
/// Every collection is ordered and deduplicated, so equality ignores the order in which
/// items were written and repeated actions: a program is a set of actions.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Program {
    /// `GPUS:` (the valid sites); `None` when the declaration is absent, in which case the
    /// sites are those the program mentions.
    pub gpus: Option<BTreeSet<SiteId>>,
    /// `PARTITIONS:` by name.
    pub partitions: BTreeMap<PartitionId, PartitionSpec>,
    /// `IN:` each atom's site and size.
    pub inputs: BTreeMap<AtomId, Input>,
    /// `OUT:` the required final materialisations.
    pub outputs: BTreeSet<Requirement>,
    /// The body.
    pub body: BTreeSet<Action>,
}

impl Program {
    /// The same preamble with another body.
    pub fn with_body(&self, body: impl IntoIterator<Item = Action>) -> Program {
        Program {
            gpus: self.gpus.clone(),
            partitions: self.partitions.clone(),
            inputs: self.inputs.clone(),
            outputs: self.outputs.clone(),
            body: body.into_iter().collect(),
        }
    }

    /// Every site the program mentions (IN, OUT, actions, explicit partition members).
    pub fn mentioned_sites(&self) -> BTreeSet<SiteId> {
        let mut sites = BTreeSet::new();
        sites.extend(self.inputs.values().map(|i| i.site));
        for r in &self.outputs {
            if let Target::Site(s) = r.target {
                sites.insert(s);
            }
        }
        for a in &self.body {
            if let Target::Site(s) = a.source {
                sites.insert(s);
            }
            sites.extend(a.dests.iter().copied());
        }
        for spec in self.partitions.values() {
            if let PartitionSpec::Members(m) = spec {
                sites.extend(m.iter().copied());
            }
        }
        sites
    }

    /// The valid sites: `GPUS` if declared, else every site mentioned.
    pub fn sites(&self) -> BTreeSet<SiteId> {
        match &self.gpus {
            Some(g) => g.clone(),
            None => self.mentioned_sites(),
        }
    }

    /// Whether some partition is declared by size (so validity searches memberships).
    pub fn has_size_partitions(&self) -> bool {
        self.partitions.values().any(|p| matches!(p, PartitionSpec::Size(_)))
    }

    /// The partitions declared by size, with their sizes, in name order.
    pub fn sized_partitions(&self) -> Vec<(PartitionId, usize)> {
        self.partitions
            .iter()
            .filter_map(|(name, spec)| match spec {
                PartitionSpec::Size(k) => Some((name.clone(), *k)),
                PartitionSpec::Members(_) => None,
            })
            .collect()
    }

    /// The membership of the explicitly declared partitions only.
    pub fn declared_membership(&self) -> Membership {
        Membership(
            self.partitions
                .iter()
                .filter_map(|(name, spec)| spec.members().map(|m| (name.clone(), m.clone())))
                .collect(),
        )
    }

    /// Every atom the program names (IN, OUT, actions).
    pub fn atoms(&self) -> BTreeSet<AtomId> {
        let mut atoms: BTreeSet<AtomId> = self.inputs.keys().cloned().collect();
        for r in &self.outputs {
            atoms.extend(r.aggregate.atoms().iter().cloned());
        }
        for a in &self.body {
            atoms.extend(a.aggregate.atoms().iter().cloned());
        }
        atoms
    }

    /// The program with `membership` fixed: every partition declared by its members, and
    /// every action whose source is a partition replaced by one action per member site.
    /// Semantics is unchanged under that membership; actions then fire at exactly one site,
    /// which is what Theorem 5.6's argument (and a task DAG) needs.
    pub fn resolve(&self, membership: &Membership) -> Program {
        let mut out = self.clone();
        for (name, spec) in out.partitions.iter_mut() {
            if let Some(m) = membership.sites(name) {
                *spec = PartitionSpec::Members(m.clone());
            }
        }
        out.body = self
            .body
            .iter()
            .flat_map(|a| match &a.source {
                Target::Site(_) => vec![a.clone()],
                Target::Partition(p) => match membership.sites(p) {
                    Some(m) => m.iter().map(|s| Action { source: Target::Site(*s), ..a.clone() }).collect(),
                    None => vec![a.clone()],
                },
            })
            .collect();
        out
    }
}

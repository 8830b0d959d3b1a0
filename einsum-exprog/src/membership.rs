//! Memberships: which sites each partition holds, declared or chosen.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use crate::ids::{PartitionId, SiteId};
use crate::target::Target;

/// The sites of every partition: the declared members of explicit partitions and a choice
/// for those declared by size. Semantics (closure, validity) is always relative to one.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Membership(pub BTreeMap<PartitionId, BTreeSet<SiteId>>);

impl Membership {
    /// The sites of `partition`, if it has any here.
    pub fn sites(&self, partition: &PartitionId) -> Option<&BTreeSet<SiteId>> {
        self.0.get(partition)
    }

    /// The sites a target denotes: itself, or the partition's sites (`None` if unknown).
    pub fn resolve(&self, target: &Target) -> Option<Vec<SiteId>> {
        match target {
            Target::Site(s) => Some(vec![*s]),
            Target::Partition(p) => self.0.get(p).map(|m| m.iter().copied().collect()),
        }
    }
}

impl fmt::Display for Membership {
    /// `G1 = {0, 1, 4, 5}, G2 = {2, 3, 6, 7}` (or `no partitions`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("no partitions");
        }
        for (i, (name, sites)) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{name} = {{")?;
            for (j, s) in sites.iter().enumerate() {
                if j > 0 {
                    f.write_str(", ")?;
                }
                write!(f, "{s}")?;
            }
            f.write_str("}")?;
        }
        Ok(())
    }
}

//! Targets: where an aggregate is formed or required, a site or a partition.

use std::fmt;

use crate::ids::{PartitionId, SiteId};

/// A site (`3`) or a partition name (`G1`, meaning every site of that partition).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Target {
    /// One site.
    Site(SiteId),
    /// Every site of a partition.
    Partition(PartitionId),
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Site(s) => write!(f, "{s}"),
            Target::Partition(p) => write!(f, "{p}"),
        }
    }
}

impl From<SiteId> for Target {
    fn from(site: SiteId) -> Self {
        Target::Site(site)
    }
}

impl From<PartitionId> for Target {
    fn from(partition: PartitionId) -> Self {
        Target::Partition(partition)
    }
}

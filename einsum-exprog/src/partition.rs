//! Partitions: named groups of sites, declared by members (`G1 {0, 1, 4, 5}`) or by size
//! (`G1 {size 4}`, membership chosen by the checker or by synthesis).

use std::collections::BTreeSet;
use std::fmt;

use crate::ids::SiteId;

/// How a partition is declared.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PartitionSpec {
    /// `{0, 1, 4, 5}`: these sites.
    Members(BTreeSet<SiteId>),
    /// `{size 4}`: some `k` sites, to be chosen.
    Size(usize),
}

impl PartitionSpec {
    /// The number of sites in the partition.
    pub fn size(&self) -> usize {
        match self {
            PartitionSpec::Members(m) => m.len(),
            PartitionSpec::Size(k) => *k,
        }
    }

    /// The members, when declared explicitly.
    pub fn members(&self) -> Option<&BTreeSet<SiteId>> {
        match self {
            PartitionSpec::Members(m) => Some(m),
            PartitionSpec::Size(_) => None,
        }
    }
}

impl fmt::Display for PartitionSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PartitionSpec::Size(k) => write!(f, "{{size {k}}}"),
            PartitionSpec::Members(m) => {
                f.write_str("{")?;
                for (i, s) in m.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{s}")?;
                }
                f.write_str("}")
            }
        }
    }
}

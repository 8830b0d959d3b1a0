//! Actions: `X @ s -> d1, d2` (aggregate at a source, then send), `X @ s` (aggregate locally).

use std::collections::BTreeSet;
use std::fmt;

use crate::aggregate::Aggregate;
use crate::ids::SiteId;
use crate::target::Target;

/// One action of a program body: form `aggregate` at `source` from pieces materialised
/// there, then send it to every site of `dests` (none: a local aggregation).
///
/// A source partition (`X @ G1`) means the action fires at every site of the partition. The
/// destinations are a set: `-> 1, 2` and `-> 2, 1` are the same action. The surface syntax
/// `X @ 0, 1` (several sources) is sugar for one action per source.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Action {
    /// The aggregate formed at the source.
    pub aggregate: Aggregate,
    /// Where it is formed.
    pub source: Target,
    /// Where it is sent afterwards (empty for a local aggregation).
    pub dests: BTreeSet<SiteId>,
}

impl Action {
    /// `aggregate @ source -> dests`.
    pub fn new(aggregate: Aggregate, source: impl Into<Target>, dests: impl IntoIterator<Item = SiteId>) -> Self {
        Action { aggregate, source: source.into(), dests: dests.into_iter().collect() }
    }

    /// The local aggregation `aggregate @ source`.
    pub fn local(aggregate: Aggregate, source: impl Into<Target>) -> Self {
        Action { aggregate, source: source.into(), dests: BTreeSet::new() }
    }

    /// Whether the action sends nothing.
    pub fn is_local(&self) -> bool {
        self.dests.is_empty()
    }

    /// The source site, if the source is a site rather than a partition.
    pub fn source_site(&self) -> Option<SiteId> {
        match self.source {
            Target::Site(s) => Some(s),
            Target::Partition(_) => None,
        }
    }

    /// The same action with other destinations.
    pub fn with_dests(&self, dests: impl IntoIterator<Item = SiteId>) -> Action {
        Action { aggregate: self.aggregate.clone(), source: self.source.clone(), dests: dests.into_iter().collect() }
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} @ {}", self.aggregate, self.source)?;
        for (i, d) in self.dests.iter().enumerate() {
            f.write_str(if i == 0 { " -> " } else { ", " })?;
            write!(f, "{d}")?;
        }
        Ok(())
    }
}

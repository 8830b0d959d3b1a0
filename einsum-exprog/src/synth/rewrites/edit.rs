//! The rules that edit one action: source substitution (a transfer sent from another site
//! likely to hold its aggregate) and deletion.

use std::collections::BTreeSet;

use super::{Rewrite, RewriteSite};
use crate::ids::SiteId;
use crate::program::Program;
use crate::rewrite::unguarded;

/// Source substitution: a transfer sent instead from another site where its aggregate is
/// likely materialised (a source or destination of the actions that move it).
#[derive(Clone, Copy, Debug)]
pub struct SubstituteSource;

impl Rewrite for SubstituteSource {
    fn name(&self) -> &str {
        "substitute_source"
    }
    fn weight(&self) -> usize {
        3
    }
    fn propose(&self, at: &mut RewriteSite<'_>) -> Option<Program> {
        let &(a, s, d) = at.rng.pick(&at.sends)?;
        // sites where the aggregate is likely materialised: sources and destinations
        // of the actions that move it
        let holders: Vec<SiteId> = at
            .body
            .iter()
            .filter(|b| b.aggregate == a.aggregate)
            .flat_map(|b| b.source_site().into_iter().chain(b.dests.iter().copied()))
            .filter(|w| *w != s && *w != d)
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let new_source = *at.rng.pick(&holders)?;
        unguarded::substitute_source(at.program, a, d, new_source).ok()
    }
}

/// Deletion of one action.
#[derive(Clone, Copy, Debug)]
pub struct Delete;

impl Rewrite for Delete {
    fn name(&self) -> &str {
        "delete"
    }
    fn weight(&self) -> usize {
        3
    }
    fn propose(&self, at: &mut RewriteSite<'_>) -> Option<Program> {
        let a = *at.rng.pick(&at.body)?;
        unguarded::delete(at.program, a).ok()
    }
}

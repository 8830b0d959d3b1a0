//! The aggregation rules: pushdown (two transfers of disjoint aggregates from one source to
//! one destination summed before they leave) and pullup (a transfer of a sum split into a
//! transfer of a part and the rest).

use super::super::budget::within;
use super::{Rewrite, RewriteSite, source_index};
use crate::action::Action;
use crate::aggregate::Aggregate;
use crate::ids::{AtomId, SiteId};
use crate::program::Program;
use crate::rewrite::unguarded;

/// Aggregation pushdown: two transfers of disjoint aggregates from one source to a common
/// destination, summed at the source.
#[derive(Clone, Copy, Debug)]
pub struct Pushdown;

impl Rewrite for Pushdown {
    fn name(&self) -> &str {
        "pushdown"
    }
    fn weight(&self) -> usize {
        2
    }
    fn propose(&self, at: &mut RewriteSite<'_>) -> Option<Program> {
        // the pairs `a < b` of one source, in the order of the pairs of the body
        let of_source = source_index(&at.body);
        let (body, of_source) = (&at.body, &of_source);
        let pairs = (0..body.len()).flat_map(|i| {
            let same = &of_source[&body[i].source];
            same[same.partition_point(|&j| j <= i)..].iter().map(move |&j| (body[i], body[j]))
        });
        let mut cut = false;
        let triples: Vec<(&Action, &Action, SiteId)> = within(pairs, at.budget, &mut cut)
            .filter(|(a, b)| a.aggregate.is_disjoint(&b.aggregate))
            .flat_map(|(a, b)| a.dests.intersection(&b.dests).map(move |d| (a, b, *d)))
            .collect();
        if cut {
            return None;
        }
        let &(a, b, d) = at.rng.pick(&triples)?;
        unguarded::pushdown(at.program, a, b, d).ok()
    }
}

/// Aggregation pullup: a transfer of an aggregate of two atoms or more split at a random
/// point into a transfer of its first atoms and one of the rest.
#[derive(Clone, Copy, Debug)]
pub struct Pullup;

impl Rewrite for Pullup {
    fn name(&self) -> &str {
        "pullup"
    }
    fn weight(&self) -> usize {
        1
    }
    fn propose(&self, at: &mut RewriteSite<'_>) -> Option<Program> {
        let big: Vec<(&Action, SiteId, SiteId)> =
            at.sends.iter().copied().filter(|(a, _, _)| a.aggregate.len() >= 2).collect();
        let &(a, _, d) = at.rng.pick(&big)?;
        let atoms: Vec<AtomId> = a.aggregate.atoms().iter().cloned().collect();
        let cut = 1 + at.rng.below(atoms.len() - 1);
        let part = Aggregate::new(atoms[..cut].iter().cloned()).ok()?;
        unguarded::pullup(at.program, a, d, &part, true).ok()
    }
}

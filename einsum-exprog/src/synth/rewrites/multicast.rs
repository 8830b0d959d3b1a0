//! The multicast rules: fission (one destination, or the first half of them, split off a
//! multicast) and fusion (two actions of one aggregate and source made one multicast).

use std::collections::BTreeSet;

use super::{Rewrite, RewriteSite, aggregate_runs};
use crate::action::Action;
use crate::ids::SiteId;
use crate::program::Program;
use crate::rewrite::unguarded;

/// Multicast fission: a multicast split into two, the first part one of its destinations
/// (half the time) or the first half of them.
#[derive(Clone, Copy, Debug)]
pub struct Fission;

impl Rewrite for Fission {
    fn name(&self) -> &str {
        "fission"
    }
    fn weight(&self) -> usize {
        3
    }
    fn propose(&self, at: &mut RewriteSite<'_>) -> Option<Program> {
        let multi: Vec<&Action> = at.body.iter().copied().filter(|a| a.dests.len() >= 2).collect();
        let a = *at.rng.pick(&multi)?;
        let dests: Vec<SiteId> = a.dests.iter().copied().collect();
        let first: BTreeSet<SiteId> = if at.rng.below(2) == 0 {
            BTreeSet::from([*at.rng.pick(&dests)?])
        } else {
            dests[..dests.len() / 2].iter().copied().collect()
        };
        unguarded::fission(at.program, a, &first).ok()
    }
}

/// Multicast fusion: two actions of the same aggregate and source made one.
#[derive(Clone, Copy, Debug)]
pub struct Fusion;

impl Rewrite for Fusion {
    fn name(&self) -> &str {
        "fusion"
    }
    fn weight(&self) -> usize {
        2
    }
    fn propose(&self, at: &mut RewriteSite<'_>) -> Option<Program> {
        let runs = aggregate_runs(&at.body);
        let (body, runs) = (&at.body, &runs);
        let pairs: Vec<(&Action, &Action)> = (0..body.len())
            .flat_map(|i| body[i + 1..runs[i].end].iter().map(move |b| (body[i], *b)))
            .filter(|(a, b)| a.source == b.source)
            .collect();
        let &(a, b) = at.rng.pick(&pairs)?;
        unguarded::fusion(at.program, a, b).ok()
    }
}

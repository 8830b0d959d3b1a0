//! Multicast fission and fusion: `X @ s -> D1 ∪ D2` ↔ `X @ s -> D1` and `X @ s -> D2`.
//! Both leave the closure unchanged, trading egress contention against action count.

use std::collections::BTreeSet;

use super::{Refusal, not_applicable, require, valid};
use crate::action::Action;
use crate::ids::SiteId;
use crate::program::Program;

/// Splits `action`'s destinations into `first` and the rest (both non-empty).
pub fn fission(program: &Program, action: &Action, first: &BTreeSet<SiteId>) -> Result<Program, Refusal> {
    valid(fission_unguarded(program, action, first)?)
}

/// [`fission`] without the final validity check (see [`super::unguarded`]).
pub(crate) fn fission_unguarded(
    program: &Program,
    action: &Action,
    first: &BTreeSet<SiteId>,
) -> Result<Program, Refusal> {
    require(program, action)?;
    if first.is_empty() || !first.is_subset(&action.dests) || first.len() == action.dests.len() {
        return not_applicable(format!(
            "the destinations to split off must be a non-empty proper subset of {action}'s"
        ));
    }
    let rest: Vec<SiteId> = action.dests.difference(first).copied().collect();
    let mut result = program.clone();
    result.body.remove(action);
    result.body.insert(action.with_dests(first.iter().copied()));
    result.body.insert(action.with_dests(rest));
    Ok(result)
}

/// Merges two actions with the same aggregate and source into one multicast (a local
/// aggregation fuses into the transfer that also forms it).
pub fn fusion(program: &Program, a: &Action, b: &Action) -> Result<Program, Refusal> {
    valid(fusion_unguarded(program, a, b)?)
}

/// [`fusion`] without the final validity check (see [`super::unguarded`]).
pub(crate) fn fusion_unguarded(program: &Program, a: &Action, b: &Action) -> Result<Program, Refusal> {
    require(program, a)?;
    require(program, b)?;
    if a == b {
        return not_applicable("fusion needs two different actions");
    }
    if a.aggregate != b.aggregate || a.source != b.source {
        return not_applicable(format!("{a} and {b} differ in aggregate or source"));
    }
    let mut result = program.clone();
    result.body.remove(a);
    result.body.remove(b);
    result.body.insert(a.with_dests(a.dests.union(&b.dests).copied()));
    Ok(result)
}

//! Relay introduction and elimination: `X @ s -> d` ↔ `X @ s -> r` and `X @ r -> d`, a
//! bounce that routes around slow or contended links.

use super::{Refusal, drop_dest, not_applicable, require, require_dest, require_site_source, valid};
use crate::action::Action;
use crate::ids::SiteId;
use crate::program::Program;

/// Routes `action`'s transfer to `dest` through `relay`. Only adds a materialisation at
/// `relay`, so it is always permitted (given a declared relay distinct from both ends).
pub fn introduce_relay(program: &Program, action: &Action, dest: SiteId, relay: SiteId) -> Result<Program, Refusal> {
    valid(introduce_relay_unguarded(program, action, dest, relay)?)
}

/// [`introduce_relay`] without the final validity check (see [`super::unguarded`]).
pub(crate) fn introduce_relay_unguarded(
    program: &Program,
    action: &Action,
    dest: SiteId,
    relay: SiteId,
) -> Result<Program, Refusal> {
    require(program, action)?;
    let source = require_site_source(action)?;
    require_dest(action, dest)?;
    if relay == source || relay == dest {
        return not_applicable(format!(
            "relay {relay} must differ from the source {source} and the destination {dest}"
        ));
    }
    if !program.sites().contains(&relay) {
        return not_applicable(format!("relay {relay} is not a declared site"));
    }
    let mut result = program.clone();
    result.body.remove(action);
    result.body.insert(action.with_dests(action.dests.iter().copied().filter(|d| *d != dest).chain([relay])));
    result.body.insert(Action::new(action.aggregate.clone(), relay, [dest]));
    Ok(result)
}

/// Replaces `first` (`X @ s -> r, ...`) and `second` (`X @ r -> dest, ...`) by a direct
/// transfer `X @ s -> dest`, dropping `r` from `first` and `dest` from `second`. Guarded: `X`
/// at `r` must not be otherwise required (by `OUT`, by another action, or by `second`'s other
/// destinations).
pub fn eliminate_relay(program: &Program, first: &Action, second: &Action, dest: SiteId) -> Result<Program, Refusal> {
    valid(eliminate_relay_unguarded(program, first, second, dest)?)
}

/// [`eliminate_relay`] without the final validity check (see [`super::unguarded`]).
pub(crate) fn eliminate_relay_unguarded(
    program: &Program,
    first: &Action,
    second: &Action,
    dest: SiteId,
) -> Result<Program, Refusal> {
    require(program, first)?;
    require(program, second)?;
    let source = require_site_source(first)?;
    let relay = require_site_source(second)?;
    if first.aggregate != second.aggregate {
        return not_applicable(format!("{first} and {second} move different aggregates"));
    }
    require_dest(first, relay)?;
    require_dest(second, dest)?;
    if dest == source {
        return not_applicable(format!("the direct transfer would send from {source} to itself"));
    }
    let mut result = program.clone();
    result.body.remove(first);
    result.body.remove(second);
    result.body.insert(first.with_dests(first.dests.iter().copied().filter(|d| *d != relay).chain([dest])));
    if let Some(rest) = drop_dest(second, dest) {
        result.body.insert(rest);
    }
    Ok(result)
}

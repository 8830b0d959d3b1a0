//! The transformations of Section 5.4. Each takes a program and the place to apply the rule
//! and returns the rewritten program, or a [`Refusal`] that says why the rule does not apply
//! there or would break validity.
//!
//! Every rule other than [`insert`] (whose guard is well-formedness, as in the paper) checks
//! that its result is valid before returning it, so applied to a valid program every rule
//! is sound by construction. Rules the paper calls always permitted (multicast fission and
//! fusion, relay introduction) never refuse a valid program for validity reasons; the
//! property tests check that too.
//!
//! - [`fission`] / [`fusion`]: `X @ s -> D1 ∪ D2` ↔ `X @ s -> D1` and `X @ s -> D2`.
//! - [`introduce_relay`] / [`eliminate_relay`]: `X @ s -> d` ↔ `X @ s -> r`, `X @ r -> d`.
//! - [`pushdown`] / [`pullup`]: `X @ r -> s`, `Y @ r -> s` ↔ `X+Y @ r -> s`.
//! - [`substitute_source`]: `X @ s -> d` → `X @ s' -> d` where `X` is materialised at `s'`.
//! - [`insert`] / [`delete`]: the primitives of Theorem 5.6.
//!
//! Rules act on one destination of a multicast and leave its other destinations in place:
//! relaying `X @ 0 -> 1, 2` through 3 for destination 2 gives `X @ 0 -> 1, 3` and
//! `X @ 3 -> 2`.

mod aggregation;
mod multicast;
mod primitive;
mod relay;
mod source;

pub use aggregation::{pullup, pushdown};
pub use multicast::{fission, fusion};
pub use primitive::{delete, insert};
pub use relay::{eliminate_relay, introduce_relay};
pub use source::substitute_source;

/// The rules without their final validity guard, for the search
/// ([`crate::synth::search`]), which validates every candidate once anyway (and only when it
/// has not simulated the same body before): with the guard, each rewrite computed the
/// closure of its result, and the search computed it again. A caller of these must check
/// validity itself before trusting the result; the shape checks (the action is in the
/// program, the destination is one of its, ...) still refuse.
pub(crate) mod unguarded {
    pub(crate) use super::aggregation::{pullup_unguarded as pullup, pushdown_unguarded as pushdown};
    pub(crate) use super::multicast::{fission_unguarded as fission, fusion_unguarded as fusion};
    pub(crate) use super::primitive::delete_unguarded as delete;
    pub(crate) use super::relay::{
        eliminate_relay_unguarded as eliminate_relay, introduce_relay_unguarded as introduce_relay,
    };
    pub(crate) use super::source::substitute_source_unguarded as substitute_source;
}

use crate::action::Action;
use crate::ids::SiteId;
use crate::program::Program;
use crate::validity::ValidityError;

/// Why a rewrite was not applied.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum Refusal {
    /// The action to rewrite is not in the program.
    #[error("action {0} is not in the program")]
    NotInProgram(Action),
    /// Insert of an action already in the program.
    #[error("action {0} is already in the program")]
    AlreadyPresent(Action),
    /// The rule's shape does not match (wrong destination, overlapping aggregates, ...).
    #[error("the rule does not apply: {0}")]
    NotApplicable(String),
    /// The guard failed: the result would not be valid.
    #[error("the result would not be valid: {0}")]
    WouldBeInvalid(ValidityError),
    /// Insert's guard failed: the result would not be well-formed.
    #[error("the result would not be well-formed: {0}")]
    WouldBeIllFormed(ValidityError),
}

fn require(program: &Program, action: &Action) -> Result<(), Refusal> {
    if program.body.contains(action) { Ok(()) } else { Err(Refusal::NotInProgram(action.clone())) }
}

fn not_applicable<T>(reason: impl Into<String>) -> Result<T, Refusal> {
    Err(Refusal::NotApplicable(reason.into()))
}

fn require_dest(action: &Action, dest: SiteId) -> Result<(), Refusal> {
    if action.dests.contains(&dest) { Ok(()) } else { not_applicable(format!("{action} does not send to site {dest}")) }
}

fn require_site_source(action: &Action) -> Result<SiteId, Refusal> {
    match action.source_site() {
        Some(s) => Ok(s),
        None => not_applicable(format!("{action} is sourced at a partition; the rule needs a site")),
    }
}

/// `action` without destination `dest`: the action with the remaining destinations, or
/// nothing if `dest` was the only one.
fn drop_dest(action: &Action, dest: SiteId) -> Option<Action> {
    let rest: Vec<SiteId> = action.dests.iter().copied().filter(|d| *d != dest).collect();
    if rest.is_empty() { None } else { Some(action.with_dests(rest)) }
}

/// The guard shared by the rules: the result must be valid.
fn valid(result: Program) -> Result<Program, Refusal> {
    match result.validate() {
        Ok(_) => Ok(result),
        Err(e) => Err(Refusal::WouldBeInvalid(e)),
    }
}

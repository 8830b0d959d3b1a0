//! Aggregation pushdown and pullup: `X @ r -> s`, `Y @ r -> s` ↔ `X+Y @ r -> s`, the
//! network analogue of eager versus lazy partial aggregation.

use super::{Refusal, drop_dest, not_applicable, require, require_dest, valid};
use crate::action::Action;
use crate::aggregate::Aggregate;
use crate::ids::SiteId;
use crate::program::Program;

/// Combines the transfers of `x` and `y` (same source) to `dest` into one transfer of their
/// sum. Guarded: `x` and `y` no longer materialise separately at `dest` (nor at the source,
/// if `dest` was their only destination).
pub fn pushdown(program: &Program, x: &Action, y: &Action, dest: SiteId) -> Result<Program, Refusal> {
    valid(pushdown_unguarded(program, x, y, dest)?)
}

/// [`pushdown`] without the final validity check (see [`super::unguarded`]).
pub(crate) fn pushdown_unguarded(program: &Program, x: &Action, y: &Action, dest: SiteId) -> Result<Program, Refusal> {
    require(program, x)?;
    require(program, y)?;
    if x.source != y.source {
        return not_applicable(format!("{x} and {y} have different sources"));
    }
    require_dest(x, dest)?;
    require_dest(y, dest)?;
    if !x.aggregate.is_disjoint(&y.aggregate) {
        return not_applicable(format!("{} and {} share atoms", x.aggregate, y.aggregate));
    }
    let mut result = program.clone();
    result.body.remove(x);
    result.body.remove(y);
    result.body.extend(drop_dest(x, dest));
    result.body.extend(drop_dest(y, dest));
    result.body.insert(Action::new(x.aggregate.union(&y.aggregate), x.source.clone(), [dest]));
    Ok(result)
}

/// Splits the transfer of `action`'s aggregate `X+Y` to `dest` into transfers of `part` (X)
/// and of the rest (Y). With `restore`, also inserts the local aggregation `X+Y @ dest` that
/// re-forms the sum there. Guarded: `X+Y` is no longer sent to `dest` (nor formed at the
/// source if `dest` was the only destination), and `X` and `Y` must be formable at the source.
pub fn pullup(
    program: &Program,
    action: &Action,
    dest: SiteId,
    part: &Aggregate,
    restore: bool,
) -> Result<Program, Refusal> {
    valid(pullup_unguarded(program, action, dest, part, restore)?)
}

/// [`pullup`] without the final validity check (see [`super::unguarded`]).
pub(crate) fn pullup_unguarded(
    program: &Program,
    action: &Action,
    dest: SiteId,
    part: &Aggregate,
    restore: bool,
) -> Result<Program, Refusal> {
    require(program, action)?;
    require_dest(action, dest)?;
    let rest = match action.aggregate.difference(part) {
        Some(rest) if part.is_subset(&action.aggregate) => rest,
        _ => return not_applicable(format!("{part} is not a proper part of {}", action.aggregate)),
    };
    let mut result = program.clone();
    result.body.remove(action);
    result.body.extend(drop_dest(action, dest));
    result.body.insert(Action::new(part.clone(), action.source.clone(), [dest]));
    result.body.insert(Action::new(rest, action.source.clone(), [dest]));
    if restore {
        result.body.insert(Action::local(action.aggregate.clone(), dest));
    }
    Ok(result)
}

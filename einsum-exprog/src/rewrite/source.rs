//! Source substitution: redirect a transfer to draw from another site where the aggregate is
//! materialised.

use super::{Refusal, drop_dest, not_applicable, require, require_dest, require_site_source, valid};
use crate::action::Action;
use crate::ids::SiteId;
use crate::program::Program;

/// Makes `dest` receive `action`'s aggregate from `new_source` instead. Guarded: the
/// aggregate must be materialised at `new_source`, and the original source no longer forms
/// it if `dest` was its only destination.
pub fn substitute_source(
    program: &Program,
    action: &Action,
    dest: SiteId,
    new_source: SiteId,
) -> Result<Program, Refusal> {
    let result = substitute_source_unguarded(program, action, dest, new_source)?;
    if let Ok(v) = program.well_formed()
        && !v.closure.contains(&action.aggregate, new_source)
    {
        return not_applicable(format!("{} is never materialised at site {new_source}", action.aggregate));
    }
    valid(result)
}

/// [`substitute_source`] without its guards on the closure: neither that the aggregate is
/// materialised at `new_source` nor that the result is valid (see [`super::unguarded`]).
/// So it also lets `new_source` form the aggregate from pieces it holds, which the guarded
/// rule refuses; such a result is still sound once the caller finds it valid (validity is
/// what makes a program correct, Definition 5.5), and an aggregate `new_source` can neither
/// hold nor form leaves the new transfer never enabled, so the result is not valid.
pub(crate) fn substitute_source_unguarded(
    program: &Program,
    action: &Action,
    dest: SiteId,
    new_source: SiteId,
) -> Result<Program, Refusal> {
    require(program, action)?;
    let source = require_site_source(action)?;
    require_dest(action, dest)?;
    if new_source == source || new_source == dest {
        return not_applicable(format!("the new source {new_source} must differ from {source} and {dest}"));
    }
    let mut result = program.clone();
    result.body.remove(action);
    result.body.extend(drop_dest(action, dest));
    result.body.insert(Action::new(action.aggregate.clone(), new_source, [dest]));
    Ok(result)
}

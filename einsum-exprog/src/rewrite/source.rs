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
    require(program, action)?;
    let source = require_site_source(action)?;
    require_dest(action, dest)?;
    if new_source == source || new_source == dest {
        return not_applicable(format!("the new source {new_source} must differ from {source} and {dest}"));
    }
    if let Ok(v) = program.well_formed()
        && !v.closure.contains(&action.aggregate, new_source)
    {
        return not_applicable(format!("{} is never materialised at site {new_source}", action.aggregate));
    }
    let mut result = program.clone();
    result.body.remove(action);
    result.body.extend(drop_dest(action, dest));
    result.body.insert(Action::new(action.aggregate.clone(), new_source, [dest]));
    valid(result)
}

//! The primitive transformations of Theorem 5.6: Insert(a) and Delete(a).

use super::{Refusal, require, valid};
use crate::action::Action;
use crate::program::Program;

/// `P ∪ {a}`, permitted when the result is well-formed (sound by monotonicity: adding an
/// action only grows the closure). With partitions declared by size the membership is not
/// fixed, so if `P` is valid the guard also asks the result to be valid under some
/// membership (otherwise a different membership could make it well-formed but not valid).
pub fn insert(program: &Program, action: Action) -> Result<Program, Refusal> {
    if program.body.contains(&action) {
        return Err(Refusal::AlreadyPresent(action));
    }
    let mut result = program.clone();
    result.body.insert(action);
    if program.has_size_partitions() && program.is_valid() {
        return valid(result);
    }
    match result.well_formed() {
        Ok(_) => Ok(result),
        Err(e) => Err(Refusal::WouldBeIllFormed(e)),
    }
}

/// `P \ {a}`, permitted when the result is valid.
pub fn delete(program: &Program, action: &Action) -> Result<Program, Refusal> {
    valid(delete_unguarded(program, action)?)
}

/// [`delete`] without the final validity check (see [`super::unguarded`]).
pub(crate) fn delete_unguarded(program: &Program, action: &Action) -> Result<Program, Refusal> {
    require(program, action)?;
    let mut result = program.clone();
    result.body.remove(action);
    Ok(result)
}

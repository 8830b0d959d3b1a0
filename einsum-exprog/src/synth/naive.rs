//! The naive program (Experiment 4's baseline): every required aggregate is gathered and
//! aggregated at each site that needs it, with no routing, relaying or placement choice.

use std::collections::{BTreeMap, BTreeSet};

use super::{SynthError, canonical_membership, checked_preamble};
use crate::action::Action;
use crate::aggregate::Aggregate;
use crate::ids::{AtomId, SiteId};
use crate::membership::Membership;
use crate::program::{Program, Requirement};
use crate::validity::Validation;

/// The naive body for `preamble` (its body, if any, is ignored).
///
/// Partitions declared by size get the placement-blind membership of
/// [`canonical_membership`]: in name order, each takes the next free sites in ascending
/// order. Then for every `OUT` requirement and every site it targets, each atom of the
/// aggregate held elsewhere is sent straight from its `IN` site to the target (one multicast
/// per atom to all the targets lacking it), and an aggregate of several atoms is formed by a
/// local action at the target. The result keeps the preamble (partitions still declared by
/// size) and is valid under that membership; actions are all sourced at sites.
pub fn naive(preamble: &Program) -> Result<Program, SynthError> {
    naive_validated(preamble).map(|(program, _)| program)
}

/// [`naive`], with the validation it made of the program (its membership and closure), for
/// a caller that would otherwise validate the program again.
pub fn naive_validated(preamble: &Program) -> Result<(Program, Validation), SynthError> {
    let preamble = checked_preamble(preamble)?;
    let membership = canonical_membership(&preamble)?;
    let mut body = BTreeSet::new();
    for r in preamble.outputs.iter().filter(|r| r.aggregate.len() > 1) {
        for t in targets(&membership, r)? {
            body.insert(Action::local(r.aggregate.clone(), t));
        }
    }
    for ((atom, from), dests) in naive_sends(&preamble, &membership)? {
        body.insert(Action::new(Aggregate::atom(atom), from, dests));
    }
    let program = preamble.with_body(body);
    let validation = program.validate_with(&membership).map_err(SynthError::Unsatisfiable)?;
    Ok((program, validation))
}

/// The naive program's sends under `membership`: for every atom of a required aggregate and
/// the `IN` site it starts at, the target sites lacking it (one multicast each).
pub(crate) fn naive_sends(
    preamble: &Program,
    membership: &Membership,
) -> Result<BTreeMap<(AtomId, SiteId), BTreeSet<SiteId>>, SynthError> {
    let mut sends: BTreeMap<(AtomId, SiteId), BTreeSet<SiteId>> = BTreeMap::new();
    for r in &preamble.outputs {
        for t in targets(membership, r)? {
            for atom in r.aggregate.atoms() {
                let from = preamble.inputs.get(atom).map(|i| i.site).unwrap_or(t);
                if from != t {
                    sends.entry((atom.clone(), from)).or_default().insert(t);
                }
            }
        }
    }
    Ok(sends)
}

/// The sites requirement `r` targets under `membership`.
fn targets(membership: &Membership, r: &Requirement) -> Result<BTreeSet<SiteId>, SynthError> {
    membership
        .resolve(&r.target)
        .map(|sites| sites.into_iter().collect())
        .ok_or_else(|| SynthError::Placement(format!("partition {} has no sites", r.target)))
}

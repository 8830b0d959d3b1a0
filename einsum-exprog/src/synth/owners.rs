//! Which group an action of a candidate body belongs to, found from its atoms.
//!
//! Re-planning one group replaces the actions that are its own: those whose aggregate lies
//! within the group's and within no other group's. Testing that against every group, for
//! every action of the body, is `O(body × groups)` aggregate comparisons per move, which
//! grew faster than anything else in the searched compile at 72 sites. An action's
//! aggregate lies within a group's only if its first atom does, so the index of the groups
//! each atom belongs to narrows the test to those groups (one, for disjoint groups).

use std::collections::HashMap;

use super::plan::Group;
use crate::aggregate::Aggregate;
use crate::ids::AtomId;

/// The groups each atom belongs to, for one list of groups.
pub(crate) struct Owners {
    of_atom: HashMap<AtomId, Vec<usize>>,
}

impl Owners {
    /// The index of `groups`.
    pub(crate) fn new(groups: &[Group]) -> Owners {
        let mut of_atom: HashMap<AtomId, Vec<usize>> = HashMap::new();
        for (g, group) in groups.iter().enumerate() {
            for atom in group.aggregate.atoms() {
                of_atom.entry(atom.clone()).or_default().push(g);
            }
        }
        Owners { of_atom }
    }

    /// The one group of `groups` (the list this index was built from) whose aggregate
    /// contains `aggregate`, or `None` if none or several do.
    pub(crate) fn sole_owner(&self, aggregate: &Aggregate, groups: &[Group]) -> Option<usize> {
        let first = aggregate.atoms().first()?;
        let mut within = self.of_atom.get(first)?.iter().filter(|&&g| aggregate.is_subset(&groups[g].aggregate));
        match (within.next(), within.next()) {
            (Some(&g), None) => Some(g),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synth::plan::groups;

    /// The index agrees with the definition (within the group, within no other) on every
    /// aggregate of three atoms or fewer, for overlapping groups too.
    #[test]
    fn sole_owner_is_the_only_group_containing_the_aggregate() {
        let program =
            crate::parse("GPUS: 0, 1, 2\nIN: A @ 0; B @ 1; C @ 2; D @ 0\nOUT: A+B @ 0; A+B+C @ 1; D @ 2; C @ 0")
                .unwrap();
        let gs = groups(&program, &program.declared_membership()).unwrap();
        let owners = Owners::new(&gs);
        let atoms: Vec<AtomId> = program.inputs.keys().cloned().collect();
        let mut checked = 0;
        for mask in 1u32..(1 << atoms.len()) {
            let chosen = atoms.iter().enumerate().filter(|(i, _)| mask & (1 << i) != 0).map(|(_, a)| a.clone());
            let aggregate = Aggregate::new(chosen).unwrap();
            let containing: Vec<usize> = (0..gs.len()).filter(|&g| aggregate.is_subset(&gs[g].aggregate)).collect();
            let expected = if containing.len() == 1 { Some(containing[0]) } else { None };
            assert_eq!(owners.sole_owner(&aggregate, &gs), expected, "{aggregate}");
            checked += usize::from(expected.is_some());
        }
        assert!(checked >= 4, "the program should give aggregates with one owner ({checked})");
    }
}

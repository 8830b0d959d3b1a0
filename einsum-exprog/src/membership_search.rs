//! The membership search for partitions declared by size: a program is valid if SOME
//! membership makes it valid.
//!
//! Pruning is by monotonicity. Letting every sized partition hold every free site at once
//! only adds firings, so that "upper" closure contains the closure of every real membership.
//! A site can join partition `G` only if, in the upper closure, every action sourced at `G`
//! is enabled there and (for validity) every requirement at `G` is met there. The search
//! then enumerates assignments of eligible free sites to the sized partitions (in name
//! order, combinations in lexicographic order), evaluates each full one exactly, and stops
//! at the first that works. It is iterative and bounded: past [`MAX_EVALUATIONS`] full
//! memberships or [`MAX_NODES`] steps it returns [`ValidityError::SearchLimit`].
//!
//! Two shortcuts keep it small. A failure of the upper closure that involves no sized
//! partition (an action sourced at a site or an explicit partition that is never enabled, a
//! requirement at a site that is never met) happens under every membership, so it is reported
//! at once. Sized partitions that no action or requirement names cannot affect validity, so
//! they take the leftover sites and are not enumerated. Named partitions of equal size are
//! not interchangeable (they appear in different requirements), so no other symmetry is
//! broken: 8 sites into two named groups of 4 is 70 candidates before pruning.

use std::collections::{BTreeMap, BTreeSet};

use crate::closure::Closure;
use crate::ids::{PartitionId, SiteId};
use crate::membership::Membership;
use crate::partition::PartitionSpec;
use crate::program::Program;
use crate::target::Target;
use crate::validity::{Validation, ValidityError};

/// Full memberships evaluated before giving up.
pub const MAX_EVALUATIONS: usize = 5_000;
/// Search steps (partial assignments) before giving up.
pub const MAX_NODES: usize = 1_000_000;

/// What a membership must achieve.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Goal {
    /// Every action enabled.
    WellFormed,
    /// Well-formed and every `OUT` requirement met.
    Valid,
}

/// A partition declared by size, with its size.
type BySize<'a> = &'a (PartitionId, usize);

/// One level of the enumeration: a sized partition and the combination chosen for it.
struct Level {
    candidates: Vec<SiteId>,
    combo: Vec<usize>,
}

/// The next k-combination of `0..n` in lexicographic order, in place.
pub(crate) fn next_combination(combo: &mut [usize], n: usize) -> bool {
    let k = combo.len();
    for i in (0..k).rev() {
        if combo[i] < n - k + i {
            combo[i] += 1;
            for j in i + 1..k {
                combo[j] = combo[j - 1] + 1;
            }
            return true;
        }
    }
    false
}

pub(crate) fn search_membership(program: &Program, goal: Goal) -> Result<Validation, ValidityError> {
    program.check()?;
    let declared = program.declared_membership();
    let sized: Vec<(PartitionId, usize)> = program.sized_partitions();
    if sized.is_empty() {
        return program.evaluate(&declared, goal);
    }
    let taken: BTreeSet<SiteId> = declared.0.values().flatten().copied().collect();
    let pool: BTreeSet<SiteId> = program.sites().difference(&taken).copied().collect();

    // Upper closure: every sized partition holds the whole pool.
    let mut over = declared.clone();
    for (name, _) in &sized {
        over.0.insert(name.clone(), pool.clone());
    }
    let upper = program.closure(&over)?;
    // A failure that does not involve a sized partition in the upper closure happens under
    // every membership: report it at once.
    if hopeless(program, &upper, goal) {
        let all: Vec<BySize<'_>> = sized.iter().collect();
        return program.evaluate(&canonical(&all, declared, &mut pool.iter().copied()), goal);
    }

    // Sized partitions that no action or requirement names do not affect validity: they take
    // whatever sites are left, so only the named ones are enumerated.
    let named: BTreeSet<&Target> =
        program.body.iter().map(|a| &a.source).chain(program.outputs.iter().map(|r| &r.target)).collect();
    let (searched, unnamed): (Vec<BySize<'_>>, Vec<BySize<'_>>) =
        sized.iter().partition(|(name, _)| named.contains(&Target::Partition(name.clone())));

    let eligible = eligible(program, &searched, &pool, &upper, goal);

    let mut best: Option<ValidityError> = None;
    let mut tried = 0usize;
    let mut nodes = 0usize;
    let mut used: BTreeSet<SiteId> = BTreeSet::new();
    let mut stack: Vec<Level> = Vec::new();
    let mut descend = true;
    loop {
        nodes += 1;
        if nodes > MAX_NODES || tried >= MAX_EVALUATIONS {
            return Err(ValidityError::SearchLimit { tried, nodes });
        }
        if descend && stack.len() == searched.len() {
            // A full membership: the searched partitions as chosen, the others the leftovers.
            let mut membership = declared.clone();
            for ((name, _), level) in searched.iter().zip(&stack) {
                membership.0.insert(name.clone(), level.combo.iter().map(|&i| level.candidates[i]).collect());
            }
            let mut leftover = pool.iter().copied().filter(|s| !used.contains(s));
            let membership = canonical(&unnamed, membership, &mut leftover);
            tried += 1;
            match program.evaluate(&membership, goal) {
                Ok(v) => return Ok(v),
                Err(e @ ValidityError::Invalid(_)) => {
                    if best.as_ref().and_then(ValidityError::failures).is_none_or(|b| e.failures() < Some(b)) {
                        best = Some(e);
                    }
                }
                Err(e) => return Err(e),
            }
            descend = false;
            continue;
        }
        if descend {
            let (name, k) = searched[stack.len()];
            let candidates: Vec<SiteId> = eligible[name].iter().filter(|s| !used.contains(s)).copied().collect();
            if *k <= candidates.len() {
                let combo: Vec<usize> = (0..*k).collect();
                used.extend(combo.iter().map(|&i| candidates[i]));
                stack.push(Level { candidates, combo });
                continue;
            }
            descend = false;
            continue;
        }
        // Advance the deepest level to its next combination, or pop it.
        let Some(level) = stack.last_mut() else { break };
        for &i in &level.combo {
            used.remove(&level.candidates[i]);
        }
        if next_combination(&mut level.combo, level.candidates.len()) {
            used.extend(level.combo.iter().map(|&i| level.candidates[i]));
            descend = true;
        } else {
            stack.pop();
        }
    }

    // Nothing eligible worked. Report the best attempt, or, if pruning left no candidate at
    // all, the failures of the canonical membership.
    if let Some(e) = best {
        return Err(e);
    }
    let all: Vec<BySize<'_>> = sized.iter().collect();
    program.evaluate(&canonical(&all, declared, &mut pool.iter().copied()), goal)
}

/// Whether the upper closure `upper` fails in a way that involves no sized partition (an
/// action sourced elsewhere never enabled, or for validity a requirement at a site never
/// met): then every membership fails.
fn hopeless(program: &Program, upper: &Closure, goal: Goal) -> bool {
    upper.not_enabled().iter().any(|(a, _)| !is_sized(program, &a.source))
        || (goal == Goal::Valid
            && program.outputs.iter().any(|r| match &r.target {
                Target::Site(s) => !upper.contains(&r.aggregate, *s),
                Target::Partition(_) => false,
            }))
}

/// The sites of `pool` each partition of `searched` may take: those where, in the upper
/// closure `upper`, every action it sources is enabled and (for validity) every requirement
/// at it is met.
fn eligible<'a>(
    program: &Program,
    searched: &[BySize<'a>],
    pool: &BTreeSet<SiteId>,
    upper: &Closure,
    goal: Goal,
) -> BTreeMap<&'a PartitionId, Vec<SiteId>> {
    let mut eligible: BTreeMap<&PartitionId, Vec<SiteId>> = BTreeMap::new();
    for (name, _) in searched {
        let target = Target::Partition(name.clone());
        let ok = |s: &SiteId| {
            let enabled = !upper.not_enabled().iter().any(|(a, site)| a.source == target && site == s);
            let met = goal == Goal::WellFormed
                || program.outputs.iter().filter(|r| r.target == target).all(|r| upper.contains(&r.aggregate, *s));
            enabled && met
        };
        eligible.insert(name, pool.iter().filter(|s| ok(s)).copied().collect());
    }
    eligible
}

/// `membership` with each partition of `order` taking the next sites of `free` in order.
fn canonical(order: &[BySize<'_>], mut membership: Membership, free: &mut dyn Iterator<Item = SiteId>) -> Membership {
    for (name, k) in order {
        membership.0.insert(name.clone(), free.take(*k).collect());
    }
    membership
}

/// Whether `target` is a partition declared by size.
fn is_sized(program: &Program, target: &Target) -> bool {
    matches!(target, Target::Partition(p) if matches!(program.partitions.get(p), Some(PartitionSpec::Size(_))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::program::Program;

    #[test]
    fn combinations_in_order() {
        let mut c = vec![0, 1];
        let mut all = vec![c.clone()];
        while next_combination(&mut c, 4) {
            all.push(c.clone());
        }
        assert_eq!(all, vec![vec![0, 1], vec![0, 2], vec![0, 3], vec![1, 2], vec![1, 3], vec![2, 3]]);
        let mut empty: Vec<usize> = vec![];
        assert!(!next_combination(&mut empty, 3));
    }

    /// Eight sites, eight single-site partitions, A and B at 0.
    const PRE: &str = "GPUS: 0, 1, 2, 3, 4, 5, 6, 7\n\
        PARTITIONS: P0 {size 1} P1 {size 1} P2 {size 1} P3 {size 1} P4 {size 1} P5 {size 1} P6 {size 1} P7 {size 1}\n\
        IN: A @ 0; B @ 0; C @ 7\n";
    /// A and B sent everywhere.
    const SPREAD: &str = "A @ 0 -> 1, 2, 3, 4, 5, 6, 7\nB @ 0 -> 1, 2, 3, 4, 5, 6, 7\n";

    #[test]
    fn unnamed_partitions_are_not_enumerated() {
        // A+B is formed only at P0's site, but required at P1's: no membership works. Only
        // P0 and P1 are named, so the search tries 8 * 7 memberships, not 8!.
        let p: Program = format!("{PRE}OUT: A+B @ P1\n{SPREAD}A+B @ P0\n").parse().unwrap();
        match p.validate() {
            Err(ValidityError::Invalid(inv)) => assert_eq!(inv.failures, 1),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_search_is_bounded() {
        let outs: Vec<String> = (1..8).map(|i| format!("A+B @ P{i}")).collect();
        let p: Program = format!("{PRE}OUT: {}\n{SPREAD}A+B @ P0\n", outs.join("; ")).parse().unwrap();
        assert!(matches!(p.validate(), Err(ValidityError::SearchLimit { tried: MAX_EVALUATIONS, .. })));
    }

    #[test]
    fn membership_independent_failures_are_immediate() {
        let p: Program = format!("{PRE}OUT: A+B @ P1\n{SPREAD}A+B @ P1\nC @ 3 -> 4\n").parse().unwrap();
        // C never leaves site 7: never enabled at 3, whatever the membership.
        match p.validate() {
            Err(ValidityError::Invalid(inv)) => assert!(inv.to_string().contains("C @ 3 -> 4 is never enabled")),
            other => panic!("{other:?}"),
        }
        let p: Program = format!("{PRE}OUT: A+B @ P1\n{SPREAD}A+B @ P1\nA+B @ 3 -> 4\nA @ 5 -> 1\n").parse().unwrap();
        assert!(p.validate().is_ok());
        let p: Program = format!("{PRE}OUT: A+B @ P1; C @ 6\n{SPREAD}A+B @ P1\n").parse().unwrap();
        match p.validate() {
            Err(ValidityError::Invalid(inv)) => assert!(inv.to_string().contains("C @ 6 is not met"), "{inv}"),
            other => panic!("{other:?}"),
        }
    }
}

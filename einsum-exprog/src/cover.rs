//! Enabledness as exact cover: does a set of materialised aggregates at a site partition `X`?

use crate::atomset::AtomSet;

/// The cover search ran past its step budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CoverLimit;

/// Finds indices of `candidates` that partition `target` exactly (pairwise disjoint, union
/// `target`), or `None`. Candidates are tried in the given order, so the first cover in that
/// order is returned (the closure orders them largest first). Candidates that are
/// not subsets of `target` are ignored. Iterative backtracking on the smallest uncovered atom;
/// every candidate examined costs one step of `budget`.
pub(crate) fn exact_cover(
    target: &AtomSet,
    candidates: &[&AtomSet],
    budget: &mut u64,
) -> Result<Option<Vec<usize>>, CoverLimit> {
    let usable: Vec<usize> = (0..candidates.len()).filter(|&i| candidates[i].is_subset(target)).collect();
    // Quick rejection: the usable candidates must at least reach every atom.
    let mut reach = AtomSet::empty();
    for &i in &usable {
        reach.insert_all(candidates[i]);
    }
    if target.is_empty() {
        return Ok(Some(Vec::new()));
    }
    if usable.is_empty() || !target.is_subset(&reach) {
        return Ok(None);
    }
    // Frames: (candidate position in `usable` chosen at this depth).
    let mut uncovered = target.clone();
    let mut chosen: Vec<usize> = Vec::new();
    let mut resume_from = 0usize;
    loop {
        let Some(atom) = uncovered.first() else {
            return Ok(Some(chosen.iter().map(|&k| usable[k]).collect()));
        };
        let mut next = None;
        for (k, &i) in usable.iter().enumerate().skip(resume_from) {
            if *budget == 0 {
                return Err(CoverLimit);
            }
            *budget -= 1;
            if candidates[i].contains(atom) && candidates[i].is_subset(&uncovered) {
                next = Some(k);
                break;
            }
        }
        match next {
            Some(k) => {
                uncovered.remove_all(candidates[usable[k]]);
                chosen.push(k);
                resume_from = 0;
            }
            None => {
                // Backtrack: undo the last choice and try the candidates after it.
                let Some(k) = chosen.pop() else { return Ok(None) };
                uncovered.insert_all(candidates[usable[k]]);
                resume_from = k + 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(bits: &[usize]) -> AtomSet {
        let mut s = AtomSet::empty();
        for &b in bits {
            s.insert(b);
        }
        s
    }

    #[test]
    fn finds_exact_covers() {
        let target = set(&[0, 1, 2, 3]);
        let a = set(&[0, 1]);
        let b = set(&[1, 2]);
        let c = set(&[2, 3]);
        let d = set(&[0]);
        let big = set(&[0, 1, 2, 3]);
        let mut budget = 1000;
        // {0,1} then needs {2,3}: found without overlap.
        assert_eq!(exact_cover(&target, &[&a, &b, &c], &mut budget), Ok(Some(vec![0, 2])));
        // Overlapping pieces only: no cover.
        assert_eq!(exact_cover(&target, &[&a, &b], &mut budget), Ok(None));
        // Backtracking: {0} then {1,2} then {3}? {3} missing; {0,1}+{2,3} works.
        assert_eq!(exact_cover(&target, &[&d, &b, &a, &c], &mut budget), Ok(Some(vec![2, 3])));
        assert_eq!(exact_cover(&target, &[&big], &mut budget), Ok(Some(vec![0])));
        // Pieces outside the target are ignored.
        let outside = set(&[4]);
        let t2 = set(&[0]);
        let d2 = set(&[0]);
        assert_eq!(exact_cover(&t2, &[&outside, &d2], &mut budget), Ok(Some(vec![1])));
    }

    #[test]
    fn budget_is_enforced() {
        let target = set(&[0, 1, 2]);
        let a = set(&[0, 1]);
        let b = set(&[1, 2]);
        let mut budget = 1;
        assert_eq!(exact_cover(&target, &[&a, &b, &a, &b], &mut budget), Err(CoverLimit));
    }
}

//! Local improvement of a plan within the memory budget: single switches and joint switches
//! of a producer and a consumer, each accepted when the plan still fits and gets cheaper.

use crate::Problem;
use crate::memory::within;

/// The most improvement passes over the operators and edges.
const MAX_PASSES: usize = 8;

/// `choice` (which must fit the budget), improved by bounded passes of local search: every
/// switch of one operator to another candidate, then every joint switch of a producer and
/// a consumer along an edge, is taken when the plan stays within `budget` and its total
/// falls; passes stop when one changes nothing, or after [`MAX_PASSES`].
pub(crate) fn improve(problem: &Problem, mut choice: Vec<usize>, budget: f64) -> Vec<usize> {
    let readers = problem.readers();
    let mut edges: Vec<(usize, usize)> = readers.iter().enumerate().flat_map(|(p, rs)| rs.iter().map(move |&c| (p, c))).collect();
    edges.sort_unstable();
    let mut bytes = problem.resident_bytes(&choice);
    for _ in 0..MAX_PASSES {
        let mut changed = false;
        for o in 0..problem.ops.len() {
            changed |= best_switch(problem, &readers, &mut choice, &mut bytes, budget, &[o]);
        }
        for &(p, c) in &edges {
            changed |= best_switch(problem, &readers, &mut choice, &mut bytes, budget, &[p, c]);
        }
        if !changed {
            break;
        }
    }
    choice
}

/// Tries every combination of candidates of the operators `ops` (one or two), takes the
/// cheapest that fits when it lowers the total, and says whether it did.
fn best_switch(
    problem: &Problem,
    readers: &[Vec<usize>],
    choice: &mut [usize],
    bytes: &mut f64,
    budget: f64,
    ops: &[usize],
) -> bool {
    let affected = problem.affected(readers, ops);
    let before = problem.local_cost(choice, &affected);
    let original: Vec<usize> = ops.iter().map(|&o| choice[o]).collect();
    let held: f64 = ops.iter().map(|&o| problem.ops[o].candidates[choice[o]].resident_bytes).sum();
    let sizes: Vec<usize> = ops.iter().map(|&o| problem.ops[o].candidates.len()).collect();
    // (saving, candidates)
    let mut best: Option<(f64, Vec<usize>)> = None;
    let mut combo = vec![0; ops.len()];
    loop {
        if combo != original {
            let after_bytes =
                *bytes - held + ops.iter().zip(&combo).map(|(&o, &m)| problem.ops[o].candidates[m].resident_bytes).sum::<f64>();
            if within(after_bytes, budget) {
                ops.iter().zip(&combo).for_each(|(&o, &m)| choice[o] = m);
                let saving = before - problem.local_cost(choice, &affected);
                if saving > 1e-12 * before.abs() && best.as_ref().is_none_or(|(s, _)| saving > *s) {
                    best = Some((saving, combo.clone()));
                }
            }
        }
        let Some(i) = (0..combo.len()).find(|&i| combo[i] + 1 < sizes[i]) else { break };
        combo[i] += 1;
        combo[..i].iter_mut().for_each(|c| *c = 0);
    }
    match best {
        Some((_, combo)) => {
            ops.iter().zip(&combo).for_each(|(&o, &m)| choice[o] = m);
            *bytes = problem.resident_bytes(choice);
            true
        }
        None => {
            ops.iter().zip(&original).for_each(|(&o, &m)| choice[o] = m);
            false
        }
    }
}

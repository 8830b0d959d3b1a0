//! The DP's alternatives to its own plan: every group of equal operators' runner-up (the best
//! plan in which the group leaves its specs), and the costliest groups' other specs, each
//! forced on every operator of the group, with the rest of the plan optimized around it again.
//!
//! A cost model that misprices one decision (say, a query-block split of attention against a
//! head split, whose gathers and causal imbalance it does not charge as the machine does)
//! makes the DP commit to it and arrange everything else around it. Scoring a few plans that
//! each take another side of the decision, every one the model's best given that side, lets
//! whole-plan prediction settle what the model cannot (`einsum_compile::pipeline` scores them).
//! Equal operators (the layers of a stack, which [`Problem::new`] prices once through a
//! shared candidate list) are forced together, so an alternative changes the decision
//! everywhere it is made.

use std::sync::Arc;

use crate::{Candidate, LogicalOptimizer, Problem, Result};

/// How many groups of equal operators, the costliest in the plan first, always have their
/// other specs forced.
pub const FORCED_GROUPS: usize = 2;

/// How much more work the next costliest groups may add, in operators solved (a forced
/// problem of `n` operators counts `n`), each group whole or not at all, unless a memory
/// budget binds (then every forced problem is a budgeted search of up to 40 DP runs, and only
/// the costliest two groups are forced): on a block on a few devices, where operators have
/// few specs, every decision is tried; on many devices, where one group has dozens, or on a
/// deep stack, only the costliest two are.
pub const EXTRA_FORCED: usize = 1024;

/// A forbidden candidate's cost: finite, so that sums stay ordered, and far above any plan.
const FORBIDDEN: f64 = 1e30;

/// Up to `limit` plans other than `choice`, the model's cheapest first, each optimized by
/// `strategy` within the problem's memory budget given what it forces on a group of equal
/// operators in `choice` (operators sharing one candidate list): for every group (the
/// [`FORCED_GROUPS`] costliest only, under a memory budget that binds), none of the specs its
/// members have in `choice`; and for each of the [`FORCED_GROUPS`] costliest groups, and,
/// unless a memory budget binds, for the next costliest whose forced problems fit in
/// [`EXTRA_FORCED`] more work, every other spec of the group on all its members. Plans that
/// repeat `choice` or each other, and forced problems with no plan, are left out.
pub fn forced_alternatives(
    strategy: &dyn LogicalOptimizer,
    problem: &Problem,
    choice: &[usize],
    limit: usize,
) -> Result<Vec<Vec<usize>>> {
    if limit == 0 {
        return Ok(Vec::new());
    }
    let costs = problem.evaluate(choice)?;
    // Groups of equal operators with their summed cost in `choice`, costliest first.
    let mut groups: Vec<(f64, Vec<usize>)> = Vec::new();
    for (i, op) in problem.ops.iter().enumerate() {
        let member = |g: &(f64, Vec<usize>)| Arc::ptr_eq(&problem.ops[g.1[0]].candidates, &op.candidates);
        match groups.iter_mut().find(|g| member(g)) {
            Some(g) => {
                g.0 += costs[i].total();
                g.1.push(i);
            }
            None => groups.push((costs[i].total(), vec![i])),
        }
    }
    groups.sort_by(|a, b| b.0.total_cmp(&a.0));
    // Under a budget that binds, every forced problem is a budgeted search of many DP runs.
    let binds = problem.memory_budget.is_some() && {
        let free = problem.clone().with_memory_budget(None)?;
        !problem.fits(&strategy.solve(&free)?)
    };
    let mut extra = if binds { 0 } else { EXTRA_FORCED };
    let forced_groups = groups.iter().enumerate().filter(|(g, (_, members))| {
        let others = problem.ops[members[0]].candidates.len().saturating_sub(1) * problem.ops.len();
        if *g < FORCED_GROUPS {
            return true;
        }
        let fits = others <= extra;
        if fits {
            extra -= others;
        }
        fits
    });
    let mut found: Vec<(f64, Vec<usize>)> = Vec::new();
    let keep = |alternative: Vec<usize>, found: &mut Vec<(f64, Vec<usize>)>| -> Result<()> {
        if alternative != choice && !found.iter().any(|(_, f)| *f == alternative) && problem.fits(&alternative) {
            found.push((problem.total(&alternative)?, alternative));
        }
        Ok(())
    };
    // Every group's runner-up (the costliest two's only under a budget that binds): the best
    // plan in which the group leaves its specs in `choice`, one solve per group, so that the
    // model's near-ties to `choice` are offered on every decision, however many specs it has.
    for (_, members) in groups.iter().take(if binds { FORCED_GROUPS } else { groups.len() }) {
        if let Some(alternative) = runner_up(strategy, problem, choice, members) {
            keep(alternative, &mut found)?;
        }
    }
    for (_, (_, members)) in forced_groups {
        let first = members[0];
        for c in 0..problem.ops[first].candidates.len() {
            if members.iter().all(|&i| choice[i] == c) {
                continue;
            }
            let Ok(alternative) = strategy.solve(&excluding(problem, members, |o| o != c)) else { continue };
            if members.iter().all(|&i| alternative[i] == c) {
                keep(alternative, &mut found)?;
            }
        }
    }
    found.sort_by(|a, b| a.0.total_cmp(&b.0));
    Ok(found.into_iter().take(limit).map(|(_, c)| c).collect())
}

/// The plan `strategy` chooses when none of the operators `members` (which share one
/// candidate list) may keep a spec any of them has in `choice`; `None` when it finds none.
fn runner_up(
    strategy: &dyn LogicalOptimizer,
    problem: &Problem,
    choice: &[usize],
    members: &[usize],
) -> Option<Vec<usize>> {
    let excluded: Vec<usize> = members.iter().map(|&i| choice[i]).collect();
    let alternative = strategy.solve(&excluding(problem, members, |c| excluded.contains(&c))).ok()?;
    members.iter().all(|&i| !excluded.contains(&alternative[i])).then_some(alternative)
}

/// `problem` with the candidates `excluded` picks of the operators `members` (which share one
/// candidate list) priced out.
fn excluding(problem: &Problem, members: &[usize], excluded: impl Fn(usize) -> bool) -> Problem {
    let mut forced = problem.clone();
    let candidates: Arc<[Candidate]> = problem.ops[members[0]]
        .candidates
        .iter()
        .enumerate()
        .map(|(c, cand)| {
            let mut cand = cand.clone();
            if excluded(c) {
                cand.cost.compute = FORBIDDEN;
            }
            cand
        })
        .collect();
    for &i in members {
        forced.ops[i].candidates = candidates.clone();
    }
    forced
}

#[cfg(test)]
mod tests {
    use einsum_core::{DType, TensorDesc};
    use einsum_joinagg::Computation;
    use einsum_ops::einsum::Einsum;
    use einsum_ops::unary::{Unary, UnaryOp};

    use super::*;
    use crate::{Dp, PaperProxy};

    /// A chain of four matmuls whose second and fourth are equal (each reads the previous
    /// product and the same resident weight): they are one group, and every alternative
    /// forces both alike.
    #[test]
    fn alternatives_force_a_whole_group_and_differ_from_the_plan() {
        let mut comp = Computation::new();
        let desc = |a: &str, b: &str| TensorDesc::of(&[(a, 64), (b, 64)], DType::F32).unwrap();
        let (xi, wi, vi) = (
            comp.add_input("x", desc("t", "d")),
            comp.add_input("w", desc("d", "e")),
            comp.add_input("v", desc("e", "d")),
        );
        let up = || Box::new(Einsum::matmul(&desc("t", "d"), &desc("d", "e")).unwrap());
        let down = || Box::new(Einsum::matmul(&desc("t", "e"), &desc("e", "d")).unwrap());
        let a = comp.add_op("a", up(), &[xi, wi]).unwrap()[0];
        let b = comp.add_op("b", down(), &[a, vi]).unwrap()[0];
        let c = comp.add_op("c", up(), &[b, wi]).unwrap()[0];
        comp.add_op("d", down(), &[c, vi]).unwrap();
        let problem = Problem::new(&comp, 4, &PaperProxy).unwrap();
        let plan = Dp.solve(&problem).unwrap();
        let alternatives = forced_alternatives(&Dp, &problem, &plan, 100).unwrap();
        assert!(!alternatives.is_empty());
        assert!(Arc::ptr_eq(&problem.ops[1].candidates, &problem.ops[3].candidates), "b and d are priced once");
        let mut totals = Vec::new();
        for alt in &alternatives {
            assert_ne!(*alt, plan);
            totals.push(problem.total(alt).unwrap());
        }
        // The group {b, d} is forced alike in the alternatives that force it (those where b
        // leaves the plan's spec); the DP is free to split them only where it forced another group.
        assert!(alternatives.iter().any(|alt| alt[1] != plan[1] && alt[1] == alt[3]), "{alternatives:?}");
        assert!(totals.windows(2).all(|w| w[0] <= w[1]), "cheapest first: {totals:?}");
        assert!(
            totals.iter().all(|&t| t >= problem.total(&plan).unwrap() - 1e-9),
            "the DP's plan is the cheapest here"
        );
        assert_eq!(forced_alternatives(&Dp, &problem, &plan, 2).unwrap(), alternatives[..2.min(alternatives.len())]);
        assert!(forced_alternatives(&Dp, &problem, &plan, 0).unwrap().is_empty());
    }

    /// A chain of three operators of different kinds (three groups): every group's runner-up
    /// is the best plan in which it leaves its spec (by enumeration), and is offered.
    #[test]
    fn every_groups_runner_up_is_offered() {
        let mut comp = Computation::new();
        let desc = |a: &str, b: &str| TensorDesc::of(&[(a, 32), (b, 32)], DType::F32).unwrap();
        let (xi, wi) = (comp.add_input("x", desc("t", "d")), comp.add_input("w", desc("d", "e")));
        let a = comp
            .add_op("a", Box::new(Einsum::matmul(&desc("t", "d"), &desc("d", "e")).unwrap()), &[xi, wi])
            .unwrap()[0];
        let r = comp.add_op("r", Box::new(Unary::new(&desc("t", "e"), UnaryOp::Relu).unwrap()), &[a]).unwrap()[0];
        comp.add_op("s", Box::new(Einsum::new("te->et", &[desc("t", "e")]).unwrap()), &[r]).unwrap();
        let problem = Problem::new(&comp, 4, &PaperProxy).unwrap();
        let plan = Dp.solve(&problem).unwrap();
        let alternatives = forced_alternatives(&Dp, &problem, &plan, usize::MAX).unwrap();
        let sizes: Vec<usize> = problem.ops.iter().map(|o| o.candidates.len()).collect();
        for group in 0..3 {
            let mut best = f64::INFINITY;
            for n in 0..sizes.iter().product::<usize>() {
                let choice = [n % sizes[0], n / sizes[0] % sizes[1], n / sizes[0] / sizes[1]];
                if choice[group] != plan[group] {
                    best = best.min(problem.total(&choice).unwrap());
                }
            }
            let alternative = runner_up(&Dp, &problem, &plan, &[group]).expect("a runner-up");
            assert_ne!(alternative[group], plan[group]);
            assert!((problem.total(&alternative).unwrap() - best).abs() <= 1e-9 * best, "group {group}");
            assert!(
                alternatives
                    .iter()
                    .any(|alt| alt[group] != plan[group] && (problem.total(alt).unwrap() - best).abs() <= 1e-9 * best),
                "group {group}: no alternative at {best}"
            );
        }
    }
}

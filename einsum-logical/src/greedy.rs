//! The greedy strategy: every operator alone, repartitions ignored.

use crate::{Error, LogicalOptimizer, Problem, Result};

/// Algorithm 1 without the repartition sub-cost: each operator independently takes the
/// candidate with the cheapest tiling-independent cost (join + aggregation + compute), ties
/// to the lowest index.
///
/// # Design
/// Without repartitions no operator's choice affects another's, so the dynamic program
/// falls apart into one minimum per operator. It is the baseline that shows what the DP's
/// view of producer tilings buys: its plan is still priced by [`Problem::total`],
/// repartitions included.
///
/// Under a [memory budget](Problem::memory_budget) the greedy plan is
/// [repaired](Problem::repair) until it fits; a budget below
/// [`Problem::min_resident_bytes`] is [`Error::DoesNotFit`].
#[derive(Clone, Copy, Debug, Default)]
pub struct Greedy;

impl LogicalOptimizer for Greedy {
    fn name(&self) -> &str {
        "greedy"
    }

    fn solve(&self, problem: &Problem) -> Result<Vec<usize>> {
        problem.check_min_fits()?;
        let choice: Vec<usize> = problem
            .ops
            .iter()
            .map(|op| {
                let mut best: Option<(f64, usize)> = None;
                for (n, cand) in op.candidates.iter().enumerate() {
                    let cost = cand.cost.total();
                    if best.is_none_or(|(b, _)| cost < b) {
                        best = Some((cost, n));
                    }
                }
                best.map(|(_, n)| n).ok_or_else(|| Error::InvalidPlan(format!("{} has no candidate spec", op.name)))
            })
            .collect::<Result<_>>()?;
        Ok(problem.repair(&choice))
    }
}

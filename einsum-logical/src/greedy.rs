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
#[derive(Clone, Copy, Debug, Default)]
pub struct Greedy;

impl LogicalOptimizer for Greedy {
    fn name(&self) -> &str {
        "greedy"
    }

    fn solve(&self, problem: &Problem) -> Result<Vec<usize>> {
        problem
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
            .collect()
    }
}

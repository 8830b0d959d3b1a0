//! The random strategy: a uniform candidate per operator.

use einsum_core::SeededRng;

use crate::{Error, LogicalOptimizer, Problem, Result};

/// A uniform choice among each operator's candidates, reproducible from `seed`.
///
/// # Design
/// The floor every other strategy must beat: it shows how much choosing matters at all.
/// Operators draw from one [`SeededRng`] stream in problem order, so the same seed and
/// problem give the same plan. Under a [memory budget](Problem::memory_budget) the draw is
/// [repaired](Problem::repair) until it fits; a budget below
/// [`Problem::min_resident_bytes`] is [`Error::DoesNotFit`].
#[derive(Clone, Copy, Debug, Default)]
pub struct Random {
    /// The seed of the random stream.
    pub seed: u64,
}

impl LogicalOptimizer for Random {
    fn name(&self) -> &str {
        "random"
    }

    fn solve(&self, problem: &Problem) -> Result<Vec<usize>> {
        problem.check_min_fits()?;
        let mut rng = SeededRng::new(self.seed);
        let choice: Vec<usize> = problem
            .ops
            .iter()
            .map(|op| match op.candidates.len() {
                0 => Err(Error::InvalidPlan(format!("{} has no candidate spec", op.name))),
                n => Ok(rng.below(n)),
            })
            .collect::<Result<_>>()?;
        Ok(problem.repair(&choice))
    }
}

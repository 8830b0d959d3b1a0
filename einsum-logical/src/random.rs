//! The random strategy: a uniform candidate per operator.

use einsum_core::SplitMix64;

use crate::{Error, LogicalOptimizer, Problem, Result};

/// A uniform choice among each operator's candidates, reproducible from `seed`.
///
/// # Design
/// The floor every other strategy must beat: it shows how much choosing matters at all.
/// Operators draw from one [`SplitMix64`] stream in problem order, so the same seed and
/// problem give the same plan.
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
        let mut rng = SplitMix64::new(self.seed);
        problem
            .ops
            .iter()
            .map(|op| match op.candidates.len() {
                0 => Err(Error::InvalidPlan(format!("{} has no candidate spec", op.name))),
                n => Ok(rng.below(n)),
            })
            .collect()
    }
}

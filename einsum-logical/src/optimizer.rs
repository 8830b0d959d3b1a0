//! The [`LogicalOptimizer`] trait.

use einsum_joinagg::Computation;

use crate::{CostModel, LogicalPlan, Problem, Result};

/// A strategy that picks one candidate spec per operator.
///
/// # Design
/// Strategies only choose; [`Problem`] enumerates, prices and evaluates. So every strategy
/// is priced by the same code, and comparing two strategies compares their choices alone.
/// A strategy implements [`solve`](Self::solve); [`optimize`](Self::optimize) wraps it.
pub trait LogicalOptimizer {
    /// The strategy's name, as given on the command line.
    fn name(&self) -> &str;

    /// The chosen candidate index for every operator of `problem`, in its order.
    fn solve(&self, problem: &Problem) -> Result<Vec<usize>>;

    /// Enumerates the specs of every operator of `comp` on `p` devices, prices them with
    /// `cost`, and returns the plan this strategy chooses.
    fn optimize(&self, comp: &Computation, p: usize, cost: &dyn CostModel) -> Result<LogicalPlan> {
        let problem = Problem::new(comp, p, cost)?;
        let choice = self.solve(&problem)?;
        problem.plan(&choice, self.name())
    }
}

/// The searching strategies [`optimizer_by_name`] accepts; it also accepts the
/// hand-designed [`BASELINES`](crate::BASELINES).
pub const OPTIMIZERS: &[&str] = &["dp", "greedy", "random", "ilp"];

/// The strategy called `name` (one of [`OPTIMIZERS`] or [`BASELINES`](crate::BASELINES));
/// `seed` drives `random`.
pub fn optimizer_by_name(name: &str, seed: u64) -> Result<Box<dyn LogicalOptimizer>> {
    match name {
        "dp" => Ok(Box::new(crate::Dp)),
        "greedy" => Ok(Box::new(crate::Greedy)),
        "random" => Ok(Box::new(crate::Random { seed })),
        "ilp" => Ok(Box::new(crate::Ilp)),
        "data" => Ok(Box::new(crate::Data)),
        "megatron" => Ok(Box::new(crate::Megatron)),
        "ulysses" => Ok(Box::new(crate::Ulysses)),
        "mesh2d" => Ok(Box::new(crate::Mesh2d)),
        other => Err(crate::Error::UnknownName {
            what: "optimizer",
            name: other.to_string(),
            valid: OPTIMIZERS.iter().chain(crate::BASELINES).copied().collect::<Vec<_>>().join(", "),
        }),
    }
}

//! The [`LogicalOptimizer`] trait.

use einsum_joinagg::Computation;

use crate::{CostModel, LogicalPlan, Problem, Result};

/// A strategy that picks one candidate spec per operator.
///
/// # Design
/// Strategies only choose; [`Problem`] enumerates, prices and evaluates. So every strategy
/// is priced by the same code, and comparing two strategies compares their choices alone.
/// A strategy implements [`solve`](Self::solve); [`plan`](Self::plan),
/// [`optimize`](Self::optimize) and [`optimize_within`](Self::optimize_within) wrap it.
///
/// Memory is a constraint of every strategy: a searching strategy's `solve` plans within
/// the problem's [`memory_budget`](Problem::memory_budget), and [`plan`](Self::plan) refuses
/// any plan over it (a hand-designed baseline's rule ignores memory, so its plan is refused
/// rather than changed).
pub trait LogicalOptimizer {
    /// The strategy's name, as given on the command line.
    fn name(&self) -> &str;

    /// The chosen candidate index for every operator of `problem`, in its order.
    fn solve(&self, problem: &Problem) -> Result<Vec<usize>>;

    /// The plan this strategy chooses for `problem`, within its memory budget:
    /// [`Error::DoesNotFit`](crate::Error::DoesNotFit) when no plan fits, and
    /// [`Error::OverBudget`](crate::Error::OverBudget) when this strategy's plan does not.
    fn plan(&self, problem: &Problem) -> Result<LogicalPlan> {
        problem.check_min_fits()?;
        let choice = self.solve(problem)?;
        problem.check_budget(&choice, self.name())?;
        problem.plan(&choice, self.name())
    }

    /// Enumerates the specs of every operator of `comp` on `p` devices, prices them with
    /// `cost`, and returns the plan this strategy chooses, with unlimited memory.
    fn optimize(&self, comp: &Computation, p: usize, cost: &dyn CostModel) -> Result<LogicalPlan> {
        self.optimize_within(comp, p, cost, None)
    }

    /// Like [`optimize`](Self::optimize), within `budget` bytes per device for resident
    /// computation inputs (`None`: unlimited); see [`plan`](Self::plan).
    fn optimize_within(
        &self,
        comp: &Computation,
        p: usize,
        cost: &dyn CostModel,
        budget: Option<f64>,
    ) -> Result<LogicalPlan> {
        self.plan(&Problem::new(comp, p, cost)?.with_memory_budget(budget)?)
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

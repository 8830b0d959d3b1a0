//! The [`LogicalOptimizer`] trait.

use einsum_joinagg::Computation;

use crate::{CostModel, LogicalPlan, Problem, Result, SearchReport};

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
///
/// # Extending
/// A strategy from any crate implements this trait and is handed to the driver as a value
/// (`einsummable::CompileOptions::optimizer` takes an `Arc<dyn LogicalOptimizer>`, and the
/// experiments take strategies as values too), so it needs no entry in the driver's
/// `einsummable::names::optimizers` table, which only names the strategies of this crate
/// for the command line and the Python package. The trait is object safe, and `Send + Sync` so that one strategy can
/// be shared between threads.
///
/// # Example
/// A strategy that takes, for every operator, the candidate whose own cost (join,
/// aggregation and compute) is least, ignoring repartitions between operators; the DP,
/// which also prices repartitions, is never worse on the same problem.
///
/// ```
/// use einsum_core::{DType, TensorDesc};
/// use einsum_joinagg::Computation;
/// use einsum_logical::{Dp, LogicalOptimizer, PaperProxy, Problem, Result};
/// use einsum_ops::einsum::Einsum;
///
/// struct CheapestSpec;
///
/// impl LogicalOptimizer for CheapestSpec {
///     fn name(&self) -> &str {
///         "cheapest-spec"
///     }
///
///     fn solve(&self, problem: &Problem) -> Result<Vec<usize>> {
///         let cheapest = |op: &einsum_logical::OpProblem| {
///             let total = |c: usize| op.candidates[c].cost.total();
///             (0..op.candidates.len()).min_by(|&a, &b| total(a).total_cmp(&total(b))).unwrap_or(0)
///         };
///         Ok(problem.ops.iter().map(cheapest).collect())
///     }
/// }
///
/// // y = (x·w1)·w2 on 4 devices, priced by the paper's communication proxy.
/// let mut comp = Computation::new();
/// let x = TensorDesc::of(&[("t", 64), ("d", 32)], DType::F32)?;
/// let w1 = TensorDesc::of(&[("d", 32), ("f", 128)], DType::F32)?;
/// let w2 = TensorDesc::of(&[("f", 128), ("e", 32)], DType::F32)?;
/// let h = TensorDesc::of(&[("t", 64), ("f", 128)], DType::F32)?;
/// let (xi, w1i, w2i) = (comp.add_input("x", x.clone()), comp.add_input("w1", w1.clone()), comp.add_input("w2", w2.clone()));
/// let hi = comp.add_op("up", Box::new(Einsum::matmul(&x, &w1)?), &[xi, w1i])?[0];
/// comp.add_op("down", Box::new(Einsum::matmul(&h, &w2)?), &[hi, w2i])?;
///
/// let mine = CheapestSpec.optimize(&comp, 4, &PaperProxy)?;
/// let dp = Dp::default().optimize(&comp, 4, &PaperProxy)?;
/// assert_eq!(mine.optimizer, "cheapest-spec");
/// assert!(dp.total <= mine.total);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait LogicalOptimizer: Send + Sync {
    /// The strategy's name, as given on the command line.
    fn name(&self) -> &str;

    /// The chosen candidate index for every operator of `problem`, in its order.
    fn solve(&self, problem: &Problem) -> Result<Vec<usize>>;

    /// Other choices for `problem` worth comparing with `choice` by whole-plan prediction, at
    /// most `limit`, the model's cheapest first; none by default. The compile pipeline
    /// predicts them with the simulator and keeps the fastest (`einsum_compile::pipeline`),
    /// so a strategy whose cost model misjudges a decision can still end with the faster
    /// plan. A hand-designed baseline offers none: its plan is its definition.
    fn alternatives(&self, problem: &Problem, choice: &[usize], limit: usize) -> Result<Vec<Vec<usize>>> {
        let _ = (problem, choice, limit);
        Ok(Vec::new())
    }

    /// [`solve`](Self::solve), with a report of how the strategy searched that the plan
    /// carries as [`LogicalPlan::search`]; by default no report.
    fn solve_reported(&self, problem: &Problem) -> Result<(Vec<usize>, Option<SearchReport>)> {
        Ok((self.solve(problem)?, None))
    }

    /// The plan this strategy chooses for `problem`, within its memory budget:
    /// [`Error::DoesNotFit`](crate::Error::DoesNotFit) when no plan fits, and
    /// [`Error::OverBudget`](crate::Error::OverBudget) when this strategy's plan does not.
    fn plan(&self, problem: &Problem) -> Result<LogicalPlan> {
        let _span = tracing::info_span!("logical", optimizer = self.name(), p = problem.p).entered();
        problem.check_min_fits()?;
        let (choice, search) = self.solve_reported(problem)?;
        problem.check_budget(&choice, self.name())?;
        let mut plan = problem.plan(&choice, self.name())?;
        plan.search = search;
        tracing::info!(
            ops = plan.ops.len(),
            cost = plan.total,
            unit = plan.unit,
            resident_bytes = plan.resident_bytes,
            "chose a spec per operator"
        );
        Ok(plan)
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

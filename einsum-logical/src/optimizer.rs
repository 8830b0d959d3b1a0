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
/// (`einsummable::CompileOptions::optimizer` takes an `Arc<dyn LogicalOptimizer>`), so it
/// needs no entry in [`optimizers`]; that table only names the strategies of this crate for
/// the command line. The trait is object safe, and `Send + Sync` so that one strategy can
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

/// What a strategy of the [`optimizers`] table may be built from (what the command line
/// gives); each strategy takes what it needs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OptimizerParams {
    /// Seed of the randomized strategies (`random`).
    pub seed: u64,
    /// The `ilp` strategy with its limits (by default [`Ilp::default`](crate::Ilp)'s).
    pub ilp: crate::Ilp,
}

/// One strategy of the [`optimizers`] table: its command-line name, a one-line description,
/// whether it is a hand-designed baseline, and how to build it.
#[derive(Clone, Copy, Debug)]
pub struct OptimizerEntry {
    /// The name on the command line (and [`LogicalOptimizer::name`] of what `build` returns).
    pub name: &'static str,
    /// One line on what the strategy does.
    pub about: &'static str,
    /// A hand-designed plan of another system ([`BASELINES`](crate::BASELINES)) rather than
    /// a search ([`OPTIMIZERS`]).
    pub baseline: bool,
    /// Builds the strategy.
    pub build: fn(&OptimizerParams) -> Box<dyn LogicalOptimizer>,
}

const TABLE: &[OptimizerEntry] = &[
    OptimizerEntry {
        name: "dp",
        about: "Algorithm 1 of Section 4.2 made exact on DAGs by variable elimination",
        baseline: false,
        build: |_| Box::new(crate::Dp),
    },
    OptimizerEntry {
        name: "greedy",
        about: "each operator's cheapest spec alone, repartitions ignored",
        baseline: false,
        build: |_| Box::new(crate::Greedy),
    },
    OptimizerEntry {
        name: "random",
        about: "a uniform random spec per operator, seeded",
        baseline: false,
        build: |p| Box::new(crate::Random { seed: p.seed }),
    },
    OptimizerEntry {
        name: "ilp",
        about: "the exact optimum over the whole DAG, by an ILP",
        baseline: false,
        build: |p| Box::new(p.ilp),
    },
    OptimizerEntry {
        name: "data",
        about: "baseline: PyTorch-style data parallelism",
        baseline: true,
        build: |_| Box::new(crate::Data),
    },
    OptimizerEntry {
        name: "megatron",
        about: "baseline: Megatron-LM tensor and sequence parallelism",
        baseline: true,
        build: |_| Box::new(crate::Megatron),
    },
    OptimizerEntry {
        name: "ulysses",
        about: "baseline: DeepSpeed-Ulysses sequence parallelism",
        baseline: true,
        build: |_| Box::new(crate::Ulysses),
    },
    OptimizerEntry {
        name: "mesh2d",
        about: "baseline: the best plan on a 2-D device mesh, as Alpa and GSPMD search",
        baseline: true,
        build: |_| Box::new(crate::Mesh2d),
    },
];

/// The strategies of this crate, by name: the one table the command line, its help and
/// [`optimizer_by_name`] read. Searches first, then the baselines.
pub fn optimizers() -> &'static [OptimizerEntry] {
    TABLE
}

/// How many entries of the table are (or are not) baselines.
const fn count(baseline: bool) -> usize {
    let (mut i, mut n) = (0, 0);
    while i < TABLE.len() {
        if TABLE[i].baseline == baseline {
            n += 1;
        }
        i += 1;
    }
    n
}

/// The names of the table's entries that are (or are not) baselines, in its order.
pub(crate) const fn names<const N: usize>(baseline: bool) -> [&'static str; N] {
    let mut out = [""; N];
    let (mut i, mut j) = (0, 0);
    while i < TABLE.len() {
        if TABLE[i].baseline == baseline {
            out[j] = TABLE[i].name;
            j += 1;
        }
        i += 1;
    }
    out
}

pub(crate) const BASELINE_COUNT: usize = count(true);

/// The searching strategies of the [`optimizers`] table (those that are not baselines).
pub const OPTIMIZERS: &[&str] = &names::<{ count(false) }>(false);

/// The [`optimizers`] entry called `name`; an unknown name is an error listing the table.
pub fn optimizer_entry(name: &str) -> Result<&'static OptimizerEntry> {
    TABLE.iter().find(|e| e.name == name).ok_or_else(|| crate::Error::UnknownName {
        what: "optimizer",
        name: name.to_string(),
        valid: TABLE.iter().map(|e| e.name).collect::<Vec<_>>().join(", "),
    })
}

/// The strategy called `name` in the [`optimizers`] table; `seed` drives `random`, and
/// `ilp` has its default limits.
pub fn optimizer_by_name(name: &str, seed: u64) -> Result<Box<dyn LogicalOptimizer>> {
    Ok((optimizer_entry(name)?.build)(&OptimizerParams { seed, ..OptimizerParams::default() }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_entry_builds_the_strategy_of_its_name() {
        for e in optimizers() {
            assert_eq!((e.build)(&OptimizerParams::default()).name(), e.name);
        }
        assert_eq!(OPTIMIZERS, &["dp", "greedy", "random", "ilp"]);
    }
}

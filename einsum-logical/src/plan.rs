//! Logical plans: the chosen spec of every operator, with its cost.

use std::collections::HashMap;

use einsum_joinagg::{JoinAggSpec, OpId};

/// The cost of one operator in a plan, in the model's unit, split as in Section 4.3.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct OpCost {
    /// Sub-cost (1): inputs whose producer's tiling differs from what the spec needs.
    pub repartition: f64,
    /// Sub-cost (2): shipping input blocks to the function specs (under the `time` model,
    /// only the blocks of operator-produced inputs: computation inputs are resident).
    pub join: f64,
    /// Sub-cost (3): combining partial outputs.
    pub aggregation: f64,
    /// The slowest device's compute (zero under the proxy).
    pub compute: f64,
    /// Bytes the three communication sub-costs move (independent of the model).
    pub bytes: f64,
}

impl OpCost {
    /// Repartition + join + aggregation + compute.
    pub fn total(&self) -> f64 {
        self.repartition + self.join + self.aggregation + self.compute
    }
}

/// One operator's decision.
#[derive(Clone, Debug)]
pub struct PlannedOp {
    /// The operator.
    pub id: OpId,
    /// Its node name.
    pub name: String,
    /// Its kind.
    pub kind: String,
    /// Interval count per shardable index, by name.
    pub splits: Vec<(String, usize)>,
    /// Which of the operator's candidates was chosen.
    pub candidate: usize,
    /// The chosen spec.
    pub spec: JoinAggSpec,
    /// Its cost in the plan.
    pub cost: OpCost,
}

impl PlannedOp {
    /// The splits as `index=count` for every index split more than once, or `replicated`.
    pub fn splits_label(&self) -> String {
        let parts: Vec<String> = self.splits.iter().filter(|(_, c)| *c > 1).map(|(n, c)| format!("{n}={c}")).collect();
        if parts.is_empty() { "replicated".to_string() } else { parts.join(" ") }
    }

    /// The interval count of the named shardable index (1 when it is not split or absent).
    pub fn split(&self, index: &str) -> usize {
        self.splits.iter().find(|(n, _)| n == index).map_or(1, |(_, c)| *c)
    }
}

/// A logical plan: one join-agg spec per operator, with costs.
#[derive(Clone, Debug)]
pub struct LogicalPlan {
    /// The optimizer that chose it.
    pub optimizer: String,
    /// The cost model that priced it.
    pub cost_model: String,
    /// The unit of its costs.
    pub unit: &'static str,
    /// The device count.
    pub devices: usize,
    /// Every operator, in topological order.
    pub ops: Vec<PlannedOp>,
    /// The total cost.
    pub total: f64,
    /// The total bytes the communication sub-costs move.
    pub total_bytes: f64,
    /// The bound on the bytes of computation-input blocks any one device keeps resident
    /// ([`Problem::resident_bytes`](crate::Problem::resident_bytes)).
    pub resident_bytes: f64,
    /// The per-device budget for resident inputs it was planned within, if any.
    pub memory_budget: Option<f64>,
    /// How the strategy searched, when it reports it ([`LogicalOptimizer::solve_reported`]).
    ///
    /// [`LogicalOptimizer::solve_reported`]: crate::LogicalOptimizer::solve_reported
    pub search: Option<SearchReport>,
}

/// How a searching strategy found its plan: for the default strategy, the variable
/// elimination's order and width, and whether the plan is the exact optimum of its model.
#[derive(Clone, Debug, PartialEq)]
pub struct SearchReport {
    /// The method, for people (`"variable elimination"`).
    pub method: String,
    /// The tensors in the order they were eliminated, by their producers' names (with
    /// `:output` for an operator of several outputs).
    pub order: Vec<String>,
    /// The order's width: the most tensors one table it creates ranges over (0 for a
    /// single operator, 1 on a chain or a tree, more where tensors are shared).
    pub width: usize,
    /// The most entries of one table the order creates.
    pub largest_table: usize,
    /// True when the plan is the exact optimum of the model without a memory budget (under a
    /// budget, the search minimises the budget's Lagrangian, see `Dp`).
    pub exact: bool,
    /// When not exact: the most the plan's total can exceed the optimum's, relative to it.
    pub gap_bound: Option<f64>,
}

impl LogicalPlan {
    /// The chosen spec of every operator, for `Computation::evaluate_with_specs`.
    pub fn specs(&self) -> HashMap<OpId, JoinAggSpec> {
        self.ops.iter().map(|o| (o.id, o.spec.clone())).collect()
    }

    /// The chosen candidate index of every operator, in problem order.
    pub fn choice(&self) -> Vec<usize> {
        self.ops.iter().map(|o| o.candidate).collect()
    }
}

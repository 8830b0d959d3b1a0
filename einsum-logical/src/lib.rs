//! The logical optimizer (Section 4 of the paper): choose one join-agg spec for every
//! operator of a [`Computation`] so that the total cost is small.
//!
//! - [`Problem`]: the computation flattened for optimizers: every operator's candidate
//!   specs, the tilings they produce and require (interned, so comparing two is `==`), their
//!   tiling-independent costs, and where each input comes from.
//! - [`CostModel`]: [`PaperProxy`] (Section 4.3, in elements) and [`Time`] (predicted
//!   seconds on a machine, which sees load imbalance).
//! - [`LogicalOptimizer`]: the strategies, one per file, chosen by name with [`optimizer_by_name`].
//! - Baselines ([`BASELINES`]): hand-designed plans of other systems ([`Data`],
//!   [`Megatron`], [`Ulysses`], [`Mesh2d`]) as strategies over the same candidates.
//! - [`LogicalPlan`]: the chosen spec per operator with its cost split into repartition,
//!   join and aggregation (and compute, under [`Time`]).
//!
//! **Architecture invariant:** optimizers see operators only through the `AbstractOperator`
//! trait; they know no concrete operator.
//!
//! [`Computation`]: einsum_joinagg::Computation
#![warn(missing_docs)]

mod baselines;
mod cost;
mod dp;
mod error;
mod greedy;
mod ilp;
mod optimizer;
mod plan;
mod problem;
mod random;

pub use baselines::{BASELINES, Data, Megatron, Mesh2d, Ulysses};
pub use cost::{CostModel, Machine, PaperProxy, SpecCost, Time, cost_model_by_name};
pub use dp::Dp;
pub use error::{Error, Result};
pub use greedy::Greedy;
pub use ilp::Ilp;
pub use optimizer::{LogicalOptimizer, OPTIMIZERS, optimizer_by_name};
pub use plan::{LogicalPlan, OpCost, PlannedOp};
pub use problem::{Candidate, OpProblem, Problem, Source, TilingId};
pub use random::Random;

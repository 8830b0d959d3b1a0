//! The logical optimizer (Section 4 of the paper): choose one join-agg spec for every
//! operator of a [`Computation`] so that the total cost is small.
//!
//! - [`Problem`]: the computation flattened for optimizers: every operator's candidate
//!   specs, the tilings they produce and require (interned, so comparing two is `==`), their
//!   tiling-independent costs, and where each input comes from.
//! - [`CostModel`]: [`PaperProxy`] (Section 4.3, in elements) and [`Time`] (predicted
//!   seconds on a machine, which sees load imbalance).
//! - [`LogicalOptimizer`]: the strategies, one per file. Both traits are object safe and
//!   `Send + Sync`: every strategy and cost model, this crate's or another's, is handed to
//!   the driver and the experiments as a value. Names are only the edges' business: the
//!   driver's `einsummable::names` tables say which of this crate's values a name on the
//!   command line or in the Python package builds.
//! - Baselines: hand-designed plans of other systems ([`Data`],
//!   [`Megatron`], [`Ulysses`], [`Mesh2d`]) as strategies over the same candidates. The
//!   rules read the roles operators and the graph's builder declare
//!   ([`OpProblem::index_with_role`], [`OpProblem::op_role`]), never names or kinds.
//! - [`LogicalPlan`]: the chosen spec per operator with its cost split into repartition,
//!   join and aggregation (and compute, under [`Time`]), and its resident bytes.
//!
//! # Memory
//! Computation inputs (weights) stay resident, for the executable's lifetime, on every
//! device whose function spec reads them, in the blocks it reads. A candidate has exactly
//! `p` function specs, placed on the `p` devices as a bijection chosen later by the
//! physical compiler, so a candidate holds at most its
//! [`resident_bytes`](Candidate::resident_bytes) (its largest function spec's input blocks)
//! on any device, and a plan at most the sum over its operators
//! ([`Problem::resident_bytes`], exact for evenly split operators with unshared inputs).
//! [`Problem::with_memory_budget`] sets a per-device budget for them; every searching
//! strategy plans within it (the DP by Lagrangian relaxation and local search, the ILP as
//! a constraint, greedy and random by [`Problem::repair`]), [`LogicalOptimizer::plan`]
//! refuses a baseline's plan over it ([`Error::OverBudget`]), and a budget that not even
//! the plan with the least resident bytes meets is [`Error::DoesNotFit`]. Transient
//! buffers (the task graph's own peak) are not modelled here.
//!
//! **Architecture invariant:** optimizers see operators only through the `AbstractOperator`
//! trait; they know no concrete operator.
//!
//! [`Computation`]: einsum_joinagg::Computation
#![warn(missing_docs)]

mod baselines;
mod cost;
mod dp;
mod elimination;
mod error;
mod forced;
mod greedy;
mod ilp;
mod memory;
mod optimizer;
mod overlap;
mod plan;
mod problem;
mod random;
mod repair;
mod switch;

pub use baselines::{Data, Megatron, Mesh2d, Ulysses};
pub use cost::{CostModel, Machine, PaperProxy, SpecCost, Time, kernel_work};
pub use dp::Dp;
pub use einsum_joinagg::{IndexRole, OpRole};
pub use elimination::MAX_TABLE_ENTRIES;
pub use error::{Error, Result, format_gb};
pub use forced::{EXTRA_FORCED, FORCED_GROUPS, forced_alternatives};
pub use greedy::Greedy;
pub use ilp::Ilp;
pub use optimizer::LogicalOptimizer;
pub use plan::{LogicalPlan, OpCost, PlannedOp, SearchReport};
pub use problem::{Candidate, OpProblem, Problem, RepartitionPairs, ResidentInput, Source, TilingId};
pub use random::Random;

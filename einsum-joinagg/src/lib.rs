//! Join-agg specs and abstract operators (Sections 3.2 and 3.3 of the paper).
//!
//! - [`AbstractOperator`]: what an operator author implements: named input and output
//!   types, [`ShardableIndex`]es, `join_agg_spec(intervals)`, work estimates and a CPU
//!   reference kernel for one [`FunctionSpec`].
//! - [`enumerate_specs`]: every spec an operator offers on `p` devices.
//! - [`validate_spec`]: the projection and tiling conditions of Definition 3.6.
//! - [`execute_spec`]: the join / aggregate / recompose semantics of Definition 3.7.
//! - [`Computation`]: the DAG of abstract operators that the optimizer works on.
//! - [`IndexRole`], [`OpRole`], [`Roles`]: what an index or an operator is in a model's
//!   structure, declared by operators and by the graph's builder, for strategies that
//!   follow that structure.
//!
//! **Architecture invariant:** this crate knows no concrete operator; `einsum-ops` does.
#![warn(missing_docs)]

mod computation;
mod enumerate;
mod error;
mod grid;
mod operator;
mod roles;
mod semantics;
mod shardable;
mod spec;
mod validate;

pub use computation::{Computation, Node, OpId, TensorId};
pub use einsum_core::Aggregation;
pub use enumerate::{MAX_DEVICES, SpecChoice, enumerate_specs, factorizations, request_spec};
pub use error::{Error, Result};
pub use grid::{DimIndex, check_request, combinations, grid_spec};
pub use operator::AbstractOperator;
pub use roles::{IndexRole, OpRole, Roles};
pub use semantics::{decomposition_error, execute_spec, execute_whole, partial_types, whole_and_split, whole_spec};
pub use shardable::{ShardableIndex, SplitPoints};
pub use spec::{FunctionSpec, JoinAggSpec};
pub use validate::validate_spec;

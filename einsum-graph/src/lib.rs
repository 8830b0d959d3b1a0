//! The user-facing graph builder: the PyTorch-like front end that turns calls such as
//! `g.input`, `g.matmul`, `g.attention` and `g.save` into a [`Computation`] (the operator DAG
//! of `einsum-joinagg`), with operators from `einsum-ops` or any other [`AbstractOperator`].
//!
//! It is the first stage of the data flow and knows nothing of devices, plans or backends:
//! the driver (`einsummable`) compiles what it builds, and the named workloads of
//! `einsum-experiments` are written with it.
//!
//! [`Computation`]: einsum_joinagg::Computation
//! [`AbstractOperator`]: einsum_joinagg::AbstractOperator
#![warn(missing_docs)]

mod graph;

pub use graph::{Graph, Snapshot, Tensor};

/// Result alias for the graph builder.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A graph that cannot be built as asked; each message says what and where.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Building an operator of the graph failed (bad shape, unknown index, ...).
    #[error("{node}: {source}")]
    Build {
        /// The graph node being added, e.g. `matmul #3`.
        node: String,
        /// What the operator said.
        #[source]
        source: einsum_joinagg::Error,
    },
    /// A role declared for an index name that already has another
    /// ([`einsum_joinagg::Error::RoleConflict`]).
    #[error(transparent)]
    Role(einsum_joinagg::Error),
    /// A tensor handle that does not belong to this graph.
    #[error("tensor {0} does not belong to this graph")]
    ForeignTensor(String),
    /// An input named like one the graph already has (inputs are loaded and bound by name,
    /// so the second could never be given a value).
    #[error("input `{0}`: the graph already has an input of this name")]
    DuplicateInput(String),
    /// An output named like an input or another named output (outputs are read back by
    /// name).
    #[error("output `{0}`: the graph already has an input or output of this name")]
    DuplicateOutput(String),
}

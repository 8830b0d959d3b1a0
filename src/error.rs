//! The driver's error type.

/// Result alias for the driver.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Every failure a user of the driver can hit; each message says what and where.
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
    /// A failure of the spec machinery or of a computation (no spec for p, ...).
    #[error(transparent)]
    JoinAgg(#[from] einsum_joinagg::Error),
    /// A failure of the logical optimizer (unknown strategy or cost model, no devices, ...).
    #[error(transparent)]
    Logical(#[from] einsum_logical::Error),
    /// A failure of the core formalism.
    #[error(transparent)]
    Core(#[from] einsum_core::CoreError),
    /// A tensor handle that does not belong to this graph.
    #[error("tensor {0} does not belong to this graph")]
    ForeignTensor(String),
    /// A workload description that cannot be parsed.
    #[error("workload `{spec}`: {reason}")]
    Workload {
        /// The description as given.
        spec: String,
        /// What is wrong, with the valid choices.
        reason: String,
    },
    /// A bad command-line argument.
    #[error("{0}")]
    Usage(String),
}

//! Errors of the logical optimizer.

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Every way optimizing can fail; messages say what and where.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Error {
    /// Enumerating or validating an operator's specs failed (for example, no spec for `p`).
    #[error(transparent)]
    JoinAgg(#[from] einsum_joinagg::Error),
    /// An unknown optimizer, cost model or machine name.
    #[error("unknown {what} `{name}`; valid: {valid}")]
    UnknownName {
        /// What kind of name (optimizer, cost model, machine).
        what: &'static str,
        /// The name given.
        name: String,
        /// The valid names.
        valid: String,
    },
    /// A topology that cannot be loaded (unknown preset, bad file).
    #[error("topology: {0}")]
    Topology(String),
    /// A device count of zero.
    #[error("the device count must be at least 1, got {0}")]
    NoDevices(usize),
    /// A plan that does not fit its problem (wrong length, a choice out of range).
    #[error("invalid plan: {0}")]
    InvalidPlan(String),
    /// A hand-designed baseline whose rule cannot be expressed on this graph or operator
    /// (e.g. `ulysses` on a graph without attention).
    #[error("the {strategy} baseline cannot plan {at}: {reason}")]
    Baseline {
        /// The baseline's name.
        strategy: &'static str,
        /// Where: `the graph`, or the operator (`operator `einsum #3` (einsum)`).
        at: String,
        /// Why.
        reason: String,
    },
    /// The ILP solver failed.
    #[error("ILP solver: {0}")]
    Solver(String),
}

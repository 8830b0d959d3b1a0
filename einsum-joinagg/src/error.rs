//! Errors of specs, operators and computations.

use einsum_core::CoreError;

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Every way building or decomposing an operator can fail; messages say what and where.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Error {
    /// A failure of the core formalism (bad bounds, not a tiling, ...).
    #[error(transparent)]
    Core(#[from] CoreError),
    /// An operator built from tensors whose indices do not fit together.
    #[error("{op}: index `{index}`: {reason}")]
    Shape {
        /// The operator being built.
        op: String,
        /// The offending index.
        index: String,
        /// What is wrong with it.
        reason: String,
    },
    /// An operator built with bad arguments that are not about one index.
    #[error("{op}: {reason}")]
    Invalid {
        /// The operator being built.
        op: String,
        /// What is wrong.
        reason: String,
    },
    /// A spec request with intervals that are not a valid decomposition of an index.
    #[error("{op}: bad intervals for shardable index `{index}`: {reason}")]
    BadIntervals {
        /// The operator asked.
        op: String,
        /// The shardable index.
        index: String,
        /// Why the intervals are rejected.
        reason: String,
    },
    /// A combination of interval counts that the operator does not offer (for example two
    /// splits of the same axis); enumeration skips these.
    #[error("{op}: unsupported decomposition: {reason}")]
    Unsupported {
        /// The operator asked.
        op: String,
        /// Which combination and why.
        reason: String,
    },
    /// No decomposition of the operator onto `p` devices exists.
    #[error("{op}: no join-agg spec for p = {p}: {reason}")]
    NoSpec {
        /// The operator asked.
        op: String,
        /// The device count.
        p: usize,
        /// Why none exists.
        reason: String,
    },
    /// A spec that breaks Definition 3.6.
    #[error("{op}: invalid join-agg spec: {reason}")]
    InvalidSpec {
        /// The operator the spec is for.
        op: String,
        /// Which condition fails, and where.
        reason: String,
    },
    /// A kernel called with blocks it cannot compute on.
    #[error("{op}: kernel: {reason}")]
    Kernel {
        /// The operator whose kernel failed.
        op: String,
        /// What was wrong with its arguments.
        reason: String,
    },
    /// A tensor id that does not belong to the computation.
    #[error("unknown tensor {0}")]
    UnknownTensor(String),
    /// An operator input wired to a tensor of another shape or dtype.
    #[error("{op}: input {input} expects {expected}, got {got}")]
    InputMismatch {
        /// The operator.
        op: String,
        /// The input slot.
        input: usize,
        /// What the operator expects there.
        expected: String,
        /// What was supplied.
        got: String,
    },
    /// An index name declared with two different roles (by two operators, or by an operator
    /// and the graph's builder); see [`Roles`](crate::Roles).
    #[error("index `{index}` is declared with role `{second}` by {second_by}, but {first_by} declared it `{first}`")]
    RoleConflict {
        /// The index name.
        index: String,
        /// The role declared first.
        first: crate::IndexRole,
        /// Who declared it first.
        first_by: String,
        /// The conflicting role.
        second: crate::IndexRole,
        /// Who declared that one.
        second_by: String,
    },
    /// A computation evaluated without a value for one of its inputs.
    #[error("missing value for computation input `{0}`")]
    MissingInput(String),
    /// A saved tensor given a name another input or saved tensor of the computation has.
    #[error("the name `{0}` is taken: outputs are named apart from each other and from the inputs")]
    NameTaken(String),
}

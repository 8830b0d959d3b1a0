//! Errors of the core formalism.

use crate::{DType, TensorType};

/// Result alias for this crate.
pub type Result<T, E = CoreError> = std::result::Result<T, E>;

/// Every way a core operation can be misused; each message says what and where.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CoreError {
    /// An interval or type with a lower bound above its upper bound.
    #[error("invalid bounds in dimension {dim}: lower {lower} > upper {upper}")]
    InvalidBounds {
        /// Dimension (0 for a plain interval).
        dim: usize,
        /// Inclusive lower bound.
        lower: usize,
        /// Exclusive upper bound.
        upper: usize,
    },
    /// Two types (or a type and a bound vector) of different rank were combined.
    #[error("rank mismatch: {what} has rank {got}, expected {expected}")]
    RankMismatch {
        /// What was being combined.
        what: String,
        /// The rank that was required.
        expected: usize,
        /// The rank that was found.
        got: usize,
    },
    /// A type that should lie inside another does not.
    #[error("{part} is not a projection of {whole}")]
    NotAProjection {
        /// The would-be sub-box.
        part: TensorType,
        /// The enclosing type.
        whole: TensorType,
    },
    /// A set of boxes that does not tile a type.
    #[error("not a tiling of {whole}: {reason}")]
    NotATiling {
        /// The type to be tiled.
        whole: TensorType,
        /// Why the boxes fail: which overlap, or how much is uncovered.
        reason: String,
    },
    /// Data whose length does not match its type's volume.
    #[error("data of length {got} does not fill {ty} (volume {expected})")]
    DataLength {
        /// The type the data should fill.
        ty: TensorType,
        /// Its volume.
        expected: usize,
        /// The length supplied.
        got: usize,
    },
    /// Two tensors that should share a type or dtype do not.
    #[error("mismatched tensors for {op}: {left} ({left_dtype}) vs {right} ({right_dtype})")]
    TensorMismatch {
        /// The operation that needed them to agree.
        op: &'static str,
        /// Type of the first tensor.
        left: TensorType,
        /// Dtype of the first tensor.
        left_dtype: DType,
        /// Type of the second tensor.
        right: TensorType,
        /// Dtype of the second tensor.
        right_dtype: DType,
    },
    /// A named index that a descriptor does not have.
    #[error("unknown index `{name}` in tensor [{dims}]")]
    UnknownIndex {
        /// The name asked for.
        name: String,
        /// The descriptor's dimensions, for the message.
        dims: String,
    },
    /// A descriptor that names one index twice.
    #[error("index `{name}` appears twice in tensor [{dims}]")]
    DuplicateIndex {
        /// The repeated name.
        name: String,
        /// The descriptor's dimensions, for the message.
        dims: String,
    },
    /// A named index of extent zero: no block of it could be non-empty.
    #[error("index `{name}` of tensor [{dims}] has extent 0")]
    EmptyIndex {
        /// The index.
        name: String,
        /// The descriptor's dimensions, for the message.
        dims: String,
    },
    /// A tensor whose size in bytes overflows a `usize`.
    #[error("tensor [{dims}] of {dtype} is too large to address")]
    TooLarge {
        /// The descriptor's dimensions, for the message.
        dims: String,
        /// Its dtype.
        dtype: DType,
    },
    /// An unknown dtype name.
    #[error("unknown dtype `{0}` (expected f32, f16 or bf16)")]
    UnknownDType(String),
}

//! What can go wrong reading a checkpoint: every variant names the file, the tensor or the
//! key at fault.

use std::path::PathBuf;

use einsum_core::{CoreError, DType};

use super::StoredDtype;

/// A checkpoint that cannot be opened or a tensor that cannot be read. Each variant names
/// what is wrong and where (the file, the tensor, the index), so that a user with a broken
/// download or a model of another shape sees which part to fix.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// A file could not be opened, measured or mapped.
    #[error("{}: cannot read: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A safetensors file whose header is malformed: its length, its JSON, a tensor's dtype,
    /// shape or data offsets.
    #[error("{}: not a valid safetensors file: {reason}", file.display())]
    Header {
        /// The safetensors file.
        file: PathBuf,
        /// What is wrong, naming the tensor where one is at fault.
        reason: String,
    },
    /// A safetensors file shorter than its header says: the data of `tensor` (the first, in
    /// file order, that does not fit) runs past the end of the file.
    #[error(
        "{}: truncated: tensor `{tensor}` runs past the end of the file (the header needs {needed} bytes, the file has {len})",
        file.display()
    )]
    Truncated {
        /// The safetensors file.
        file: PathBuf,
        /// The first tensor whose data runs past the end.
        tensor: String,
        /// The file size the header describes.
        needed: u64,
        /// The file's actual size.
        len: u64,
    },
    /// A tensor that no file of the checkpoint holds.
    #[error("tensor `{name}` is not in the checkpoint (searched {searched})")]
    MissingTensor {
        /// The tensor asked for.
        name: String,
        /// Where it was looked for: the file, or the index and its shards.
        searched: String,
    },
    /// A tensor stored with another shape than the model expects.
    #[error("tensor `{tensor}` has shape {found:?} in the checkpoint, expected {expected:?}")]
    Shape {
        /// The tensor.
        tensor: String,
        /// The shape the caller expects.
        expected: Vec<usize>,
        /// The shape stored.
        found: Vec<usize>,
    },
    /// A tensor stored in a dtype that weights are not read from (only F32, F16 and BF16 are).
    #[error("tensor `{tensor}` is stored as {dtype:?}; weights are read from F32, F16 or BF16 only")]
    Dtype {
        /// The tensor.
        tensor: String,
        /// Its stored dtype.
        dtype: StoredDtype,
    },
    /// A tensor asked for in a dtype weights are not converted to ([`DType::I32`]).
    #[error("tensor `{tensor}` cannot be read as {dtype}: weights are read as f32, f16 or bf16")]
    Target {
        /// The tensor.
        tensor: String,
        /// The dtype asked for.
        dtype: DType,
    },
    /// A tensor whose host tensor could not be built from its elements.
    #[error("tensor `{tensor}`: {source}")]
    Tensor {
        /// The tensor.
        tensor: String,
        /// Why.
        #[source]
        source: CoreError,
    },
    /// A sharded checkpoint's index (`model.safetensors.index.json`) that is malformed or
    /// disagrees with its shards.
    #[error("{}: {reason}", path.display())]
    Index {
        /// The index file.
        path: PathBuf,
        /// What is wrong, naming the key, the tensor or the shard.
        reason: String,
    },
    /// A directory with neither `model.safetensors` nor `model.safetensors.index.json`.
    #[error(
        "{}: no checkpoint: neither model.safetensors nor model.safetensors.index.json is in the directory",
        dir.display()
    )]
    NoCheckpoint {
        /// The directory.
        dir: PathBuf,
    },
}

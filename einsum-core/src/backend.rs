//! The backend contract: run a [`TaskGraph`] on some devices.

use crate::{DType, HostTensor, TensorType, taskgraph::TaskGraph, taskgraph::TaskId};

/// The concrete kernels a task graph's `Kernel` tasks name, by index.
///
/// # Design
/// The task graph is backend- and operator-independent: a kernel task names an index, and
/// whoever compiled the graph (it knows the operators) supplies the library. A backend
/// brings its own memory and scheduling; a CPU backend can run the operators' reference
/// kernels through this trait, a GPU backend maps indices to its own kernels.
pub trait KernelLibrary: Sync {
    /// Runs kernel `kernel` on the input blocks, producing blocks of the given types and
    /// dtypes (in absolute coordinates). An error says what went wrong.
    fn run(
        &self,
        kernel: usize,
        inputs: &[HostTensor],
        outputs: &[(TensorType, DType)],
    ) -> Result<Vec<HostTensor>, String>;

    /// A readable name of kernel `kernel`, for error messages.
    fn name(&self, kernel: usize) -> String;
}

/// Why a run failed. A run either returns every saved output or one of these.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BackendError {
    /// A computation input that is missing or does not match its declared type.
    #[error("input {index} (`{name}`): {reason}")]
    Input {
        /// Its index.
        index: usize,
        /// Its name.
        name: String,
        /// What is wrong.
        reason: String,
    },
    /// A run of a prepared executable before computation input `index` was loaded.
    #[error("input {index} (`{name}`) was never loaded; load every input before running")]
    NotLoaded {
        /// Its index.
        index: usize,
        /// Its name.
        name: String,
    },
    /// A task that failed (a kernel error, an inconsistent block).
    #[error("{task} `{label}` failed: {reason}")]
    Task {
        /// The task.
        task: TaskId,
        /// Its label.
        label: String,
        /// Why.
        reason: String,
    },
    /// A worker that panicked while running a task.
    #[error("{task} `{label}` panicked: {message}")]
    Panic {
        /// The task.
        task: TaskId,
        /// Its label.
        label: String,
        /// The panic message.
        message: String,
    },
    /// The backend cannot run here (no GPU, not compiled in, ...).
    #[error("backend unavailable: {0}")]
    Unavailable(String),
}

/// Runs task graphs.
pub trait Backend {
    /// The backend's name (`cpu`, `cuda`).
    fn name(&self) -> &str;

    /// Runs `graph` with the given computation inputs (whole tensors, in the graph's input
    /// order) and returns the saved outputs (whole tensors, in the graph's output order).
    fn execute(
        &self,
        graph: &TaskGraph,
        kernels: &dyn KernelLibrary,
        inputs: &[HostTensor],
    ) -> Result<Vec<HostTensor>, BackendError>;
}

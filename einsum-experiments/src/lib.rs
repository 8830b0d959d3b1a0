//! Named workloads and the paper's experiments: what the driver's commands take as a
//! `--workload` and what `einsummable experiment` runs.
//!
//! - [`workload`]: workloads written `name:key=value,...` (`matmul`, `ffn`, `llama-block`,
//!   `llama`, `llama3-8b`, `llama3-70b`, `chain-a` … `chain-e`), each built with the
//!   `einsum-graph` builder into a [`Graph`](einsum_graph::Graph);
//! - [`experiment`]: Section 6 reproduced in simulation, every case planned and compiled
//!   through [`einsum_compile::pipeline`] (nothing is executed), tabulated and charted.
//!
//! They are a crate of their own because they are users of the compiler, not part of it:
//! nothing below the driver depends on them, and they know nothing of backends or of the
//! CLI. (Running a workload on a backend, and checking it, is the driver's.)
#![warn(missing_docs)]

pub mod experiment;
pub mod workload;

pub use workload::Workload;

/// Result alias for workloads and experiments.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A workload or an experiment that cannot be built or run; each message says what and
/// where.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A workload description that cannot be parsed.
    #[error("workload `{spec}`: {reason}")]
    Workload {
        /// The description as given.
        spec: String,
        /// What is wrong, with the valid choices.
        reason: String,
    },
    /// A workload too large for this machine or for the compiler, refused from its estimate
    /// before its graph is built.
    #[error(transparent)]
    TooLarge(#[from] workload::TooLarge),
    /// A workload whose graph cannot be built (its dimensions do not fit its operators).
    #[error(transparent)]
    Graph(#[from] einsum_graph::Error),
    /// Dimensions a workload's operators cannot take (packed sequences that do not divide
    /// the tokens, ...).
    #[error(transparent)]
    JoinAgg(#[from] einsum_joinagg::Error),
    /// An unknown strategy or cost model, or a logical problem that cannot be set up.
    #[error(transparent)]
    Logical(#[from] einsum_logical::Error),
    /// Planning and compiling a case failed (boxed: it is the largest of these errors).
    #[error(transparent)]
    Pipeline(Box<einsum_compile::PipelineError>),
    /// A topology that cannot be loaded.
    #[error(transparent)]
    Topology(#[from] einsum_sim::TopologyError),
    /// A file that cannot be written.
    #[error("{path}: {message}")]
    Io {
        /// The file.
        path: String,
        /// What went wrong.
        message: String,
    },
    /// A chart that cannot be drawn (its title and why).
    #[error("{0}")]
    Chart(String),
    /// A joint optimizer's forms could not be planned (why, as its [`experiment::Forms`]
    /// says).
    #[error("{0}")]
    Forms(String),
    /// A bad argument (an unknown experiment, a device count the topology does not have).
    #[error("{0}")]
    Usage(String),
}

impl From<einsum_compile::PipelineError> for Error {
    fn from(e: einsum_compile::PipelineError) -> Self {
        Error::Pipeline(Box::new(e))
    }
}

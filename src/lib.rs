//! Einsummable: automatic multi-device parallelism for AI computations.
//!
//! Describe a computation with the PyTorch-like [`Graph`] builder; every operator is an
//! abstract operator that exposes its decompositions as join-agg specs (Section 3 of the
//! paper). This crate is the thin driver over the workspace's crates: it owns [`compile`]
//! and the [`Executable`] it returns, the table of [`backends`], the [`names`] of strategies
//! and cost models, the reference check
//! ([`check`]), output dumps ([`dump`]) and the command line, and re-exports what a user
//! needs from the others: `einsum-graph` (the graph builder), `einsum-core` (tensor types,
//! tilings, host tensors, the task graph), `einsum-joinagg` (specs, enumeration,
//! validation, reference semantics, the operator DAG), `einsum-ops` (the operator library),
//! `einsum-logical` (the logical optimizer), `einsum-sim` (topologies and the simulator),
//! `einsum-exprog` (exchange programs), `einsum-compile` (physical compilation and the
//! plan-then-compile [`pipeline`]) and `einsum-experiments` (the named [`workload`]s and the
//! paper's [`experiment`]s). Each crate's error type arrives wrapped in [`Error`].
#![warn(missing_docs)]

mod backend;
pub mod check;
pub mod dump;
mod error;
mod executable;
pub mod generate;
pub mod names;
pub mod report;
pub mod rewrite;

pub use backend::{BackendEntry, BackendParams, backend_by_name, backends};
pub use einsum_compile::{
    DEFAULT_SEARCH_ITERATIONS, DEFAULT_SYNTHESIS_BUDGET, ExchangeSynthesizer, Exchanges, NaiveSynthesizer,
    SearchSynthesizer, Synthesized, memory_report, pipeline, refine,
};
pub use einsum_core::{Backend, BackendError, Prepared};
pub use einsum_core::{DType, HostTensor, TensorDesc, TensorType};
pub use einsum_cpu::CpuBackend;
pub use einsum_cuda::{CudaBackend, CudaOptions};
pub use einsum_experiments::{Workload, experiment, workload};
pub use einsum_graph::{Graph, Snapshot, Tensor};
pub use einsum_joinagg::{AbstractOperator, Computation, IndexRole, JoinAggSpec, OpRole, enumerate_specs};
pub use einsum_logical::{CostModel, LogicalOptimizer};
/// Hugging Face model directories: configs, checkpoints and the graphs they describe.
pub use einsum_models as models;
pub use einsum_ops::{Packing, attention::AttentionConfig, binary::BinaryOp, reduce::ReduceOp, unary::UnaryOp};
pub use einsum_sim::Topology;
pub use error::{Error, Result};
pub use executable::{CompileOptions, DEFAULT_DEVICES, DEFAULT_TOPOLOGY, Executable, RunReport, compile};

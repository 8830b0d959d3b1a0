//! The backends an executable runs on, by name: [`backends`], the table the command line
//! reads. An entry builds the backend value itself, an `Arc<dyn Backend>` (the core
//! contract, [`einsum_core::Backend`]), which is what `CompileOptions::backend` holds: a
//! backend of another crate is plugged in the same way, with no entry here.
//!
//! # Example
//! A backend defined outside the workspace (here it wraps the CPU backend and counts the
//! graphs it prepares), handed to `compile` as a value:
//!
//! ```
//! use std::sync::atomic::{AtomicUsize, Ordering};
//! use std::sync::Arc;
//!
//! use einsum_core::{KernelLibrary, taskgraph::TaskGraph};
//! use einsummable::{Backend, BackendError, CompileOptions, CpuBackend, DType, Prepared, Workload, compile};
//!
//! struct Counting {
//!     inner: CpuBackend,
//!     prepared: AtomicUsize,
//! }
//!
//! impl Backend for Counting {
//!     fn name(&self) -> &str {
//!         "counting-cpu"
//!     }
//!
//!     fn host_bytes(&self, graph: &TaskGraph) -> usize {
//!         self.inner.host_bytes(graph)
//!     }
//!
//!     fn prepare<'k>(
//!         &self,
//!         graph: &TaskGraph,
//!         kernels: Arc<dyn KernelLibrary + 'k>,
//!     ) -> Result<Box<dyn Prepared + 'k>, BackendError> {
//!         self.prepared.fetch_add(1, Ordering::Relaxed);
//!         self.inner.prepare(graph, kernels)
//!     }
//! }
//!
//! let backend = Arc::new(Counting { inner: CpuBackend::new(), prepared: AtomicUsize::new(0) });
//! let graph = Workload::parse("matmul:n=64")?.build(DType::F32)?;
//! let mut exe = compile(&graph, &CompileOptions::new().devices(2).backend(backend.clone()))?;
//! exe.load_random(7)?;
//! exe.execute()?;
//! assert_eq!(backend.prepared.load(Ordering::Relaxed), 1);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::sync::Arc;

use einsum_core::Backend;
use einsum_cpu::CpuBackend;
use einsum_cuda::{CudaBackend, CudaOptions};

use crate::{Error, Result};

/// What a backend of the [`backends`] table may be built from (what the command line gives).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BackendParams {
    /// On `cuda`: issue the tasks stream-ordered instead of replaying a captured graph.
    pub eager: bool,
    /// On `cuda`: the stream budget of every GPU ([`CudaOptions::streams_per_gpu`]).
    pub streams_per_gpu: usize,
}

impl Default for BackendParams {
    /// Captured, with the CUDA backend's default stream budget.
    fn default() -> Self {
        BackendParams { eager: false, streams_per_gpu: CudaOptions::default().streams_per_gpu }
    }
}

/// One backend of the [`backends`] table: its command-line name, a one-line description,
/// and how to build it.
#[derive(Clone, Copy, Debug)]
pub struct BackendEntry {
    /// The name on the command line ([`Backend::name`] of what `build` returns).
    pub name: &'static str,
    /// One line on where the backend runs.
    pub about: &'static str,
    /// Builds the backend value.
    pub build: fn(&BackendParams) -> Arc<dyn Backend>,
}

const BACKENDS: &[BackendEntry] = &[
    BackendEntry {
        name: "cpu",
        about: "virtual devices in host memory",
        build: |_| Arc::new(CpuBackend::new().with_fusion(&einsum_ops::fused::RULES)),
    },
    BackendEntry {
        name: "cuda",
        about: "NVIDIA GPUs through the CUDA driver",
        build: |p| {
            Arc::new(CudaBackend::new(CudaOptions {
                eager: p.eager,
                streams_per_gpu: p.streams_per_gpu,
                ..CudaOptions::default()
            }))
        },
    },
];

/// The backends, by name: the one table the command line, its help and [`backend_by_name`]
/// read.
pub fn backends() -> &'static [BackendEntry] {
    BACKENDS
}

/// The backend called `name` in the [`backends`] table; an unknown name is an error listing
/// the table.
pub fn backend_by_name(name: &str, params: &BackendParams) -> Result<Arc<dyn Backend>> {
    let entry = BACKENDS.iter().find(|e| e.name == name).ok_or_else(|| {
        let valid: Vec<&str> = BACKENDS.iter().map(|e| e.name).collect();
        Error::Usage(format!("unknown backend `{name}`; valid: {}", valid.join(", ")))
    })?;
    Ok((entry.build)(params))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_entry_builds_the_backend_of_its_name() {
        for e in backends() {
            assert_eq!((e.build)(&BackendParams::default()).name(), e.name, "the entry builds the backend of its name");
        }
        let err = backend_by_name("tpu", &BackendParams::default()).err().expect("an unknown name").to_string();
        assert!(err.contains("`tpu`") && err.contains("cpu, cuda"), "{err}");
    }
}

//! [`CudaBackend`]: the CUDA backend as the core contract ([`einsum_core::Backend`]), so a
//! driver holds it as a `Box<dyn Backend>` beside the CPU backend.

use std::sync::Arc;

use einsum_core::taskgraph::{Task, TaskGraph};
use einsum_core::{Backend, BackendError, KernelLibrary, OperatorRef, Prepared};

use crate::availability::check_cuda;
use crate::kernels::registry::KernelRegistry;
use crate::{CudaExecutable, CudaOptions};

/// Runs task graphs on NVIDIA GPUs: [`Backend::prepare`] gives a [`CudaExecutable`].
///
/// # Design
/// The CUDA backend brings its own kernels, found by operator type in its options'
/// [`KernelRegistry`], so it can refuse a computation it cannot run while it is
/// still being compiled ([`Backend::check_operator`]), before planning and before any CUDA
/// call; [`CudaExecutable::prepare`] checks every kernel of the graph again.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CudaBackend {
    /// How executables are prepared.
    pub options: CudaOptions,
}

impl CudaBackend {
    /// The backend preparing executables with `options`.
    pub fn new(options: CudaOptions) -> Self {
        Self { options }
    }
}

/// Refuses, with [`BackendError::Unsupported`], an operator whose concrete type has no
/// entry in `registry`.
fn require_kernel(registry: &KernelRegistry, op: OperatorRef<'_>) -> Result<(), BackendError> {
    match registry.find(op.value) {
        Some(_) => Ok(()),
        None => {
            Err(BackendError::Unsupported { backend: "cuda".into(), operator: op.name.into(), kind: op.kind.into() })
        }
    }
}

/// Refuses, with [`BackendError::Unsupported`], the first kernel task of `graph` whose
/// operator has no CUDA kernel in `registry`, and with [`BackendError::Task`] one the library
/// does not describe. Needs no GPU.
pub fn check_kernels(
    graph: &TaskGraph,
    kernels: &dyn KernelLibrary,
    registry: &KernelRegistry,
) -> Result<(), BackendError> {
    for (t, node) in graph.nodes().iter().enumerate() {
        if let Task::Kernel { kernel, .. } = node.task {
            let Some(info) = kernels.info(kernel) else {
                return Err(BackendError::Task {
                    task: einsum_core::taskgraph::TaskId(t as u32),
                    label: node.label.clone(),
                    reason: format!(
                        "the kernel library does not describe {}; the CUDA backend needs every kernel's operator",
                        kernels.name(kernel)
                    ),
                });
            };
            require_kernel(registry, info.operator)?;
        }
    }
    Ok(())
}

impl Backend for CudaBackend {
    fn name(&self) -> &str {
        "cuda"
    }

    /// [`check_cuda`]: the driver, cuBLAS and NVRTC load and a GPU is visible.
    fn check_available(&self) -> Result<(), BackendError> {
        check_cuda().map(|_| ())
    }

    /// Refuses an operator whose concrete type has no entry in the options' kernel registry
    /// ([`CudaOptions::kernels`]).
    fn check_operator(&self, operator: OperatorRef<'_>) -> Result<(), BackendError> {
        require_kernel(&self.options.kernels, operator)
    }

    /// The host copy of an input's blocks staged on its way to the GPUs: every input's
    /// bytes (device memory is not host memory).
    fn host_bytes(&self, graph: &TaskGraph) -> usize {
        graph.inputs().iter().map(|b| b.ty.volume().saturating_mul(b.dtype.size_bytes())).fold(0, usize::saturating_add)
    }

    fn prepare<'k>(
        &self,
        graph: &TaskGraph,
        kernels: Arc<dyn KernelLibrary + 'k>,
    ) -> Result<Box<dyn Prepared + 'k>, BackendError> {
        Ok(Box::new(CudaExecutable::prepare(graph, kernels.as_ref(), &self.options)?))
    }
}

//! [`CudaExecutable`]: a compiled computation prepared once on the GPUs (kernels compiled,
//! pools and resident regions allocated, constants uploaded, the whole run captured as a CUDA
//! graph), its inputs loaded once, and run any number of times.

use cudarc::cublas::CudaBlas;
use cudarc::driver::CudaGraph;
use einsum_core::taskgraph::{Boundary, TaskGraph, TaskId};
use einsum_core::{BackendError, HostTensor, KernelLibrary, Prepared};

use crate::availability::check_cuda;
use crate::device::{DeviceMemory, Gpu, HostMemory, enable_peer_access};
use crate::executor::{CUBLAS_WORKSPACE_BYTES, IssueError, Runtime, bind_workspace, label};
use crate::fusion::fuse;
use crate::graph_capture::{CaptureError, capture};
use crate::inputs::InputSlots;
use crate::lower::lower;
use crate::stream_plan::{StreamPlan, task_device};

/// How to prepare a [`CudaExecutable`]. The default: captured, every GPU, fusion on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CudaOptions {
    /// Issue the tasks stream-ordered on every run instead of capturing them once as a CUDA
    /// graph (for debugging: errors surface at the task that caused them).
    pub eager: bool,
    /// Use at most this many GPUs (`None`: every GPU the driver sees). Virtual devices map
    /// onto the GPUs used round-robin.
    pub max_gpus: Option<usize>,
    /// Fuse adjacent kernel tasks (a unary and the binary reading it, a binary and the
    /// RMSNorm reading it) before lowering ([`crate::fusion`]); off, every task keeps its own
    /// kernel (to compare).
    pub fuse: bool,
}

impl Default for CudaOptions {
    fn default() -> Self {
        CudaOptions { eager: false, max_gpus: None, fuse: true }
    }
}

/// What preparing decided, for reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CudaSummary {
    /// GPUs used.
    pub gpus: usize,
    /// Virtual devices (streams).
    pub devices: usize,
    /// Pool bytes per GPU (the per-run memory: activations and scratch).
    pub pool_bytes: Vec<usize>,
    /// Resident bytes per GPU (the loaded inputs' blocks, held for the executable's
    /// lifetime).
    pub resident_bytes: Vec<usize>,
    /// Whether runs replay a captured graph.
    pub captured: bool,
}

/// A computation prepared on the GPUs; see the module docs. It is the
/// [`einsum_core::Prepared`] executable of [`crate::CudaBackend`].
///
/// # Design
/// A CUDA graph must be captured once and replayed, and weights should cross PCIe once, not
/// on every run, so this is a prepared object: [`CudaExecutable::prepare`] does everything
/// that does not depend on input values; [`CudaExecutable::load`] copies the blocks of one input that the task
/// graph's Load tasks select to the GPUs, where they stay resident ([`crate::resident`]);
/// [`CudaExecutable::run`] launches and copies the outputs back, so only activations move per
/// run. The type exists whether or not a GPU is present; without one, `prepare` returns
/// [`BackendError::Unavailable`].
pub struct CudaExecutable {
    // Field order is drop order: the graph and handles go before the memory and contexts.
    graph: Option<CudaGraph>,
    rt: Runtime,
    slots: InputSlots,
    outputs: Vec<Boundary>,
    summary: CudaSummary,
}

fn task_error(labels: &[String], t: usize, reason: String) -> BackendError {
    BackendError::Task { task: TaskId(t as u32), label: label(labels, t), reason }
}

fn setup(reason: String) -> BackendError {
    BackendError::Device { operation: "CUDA setup".into(), reason }
}

impl CudaExecutable {
    /// Prepares `graph`, whose kernel tasks run `kernels` (a library that describes each
    /// kernel's operator, [`KernelLibrary::info`], such as `einsum_compile::ComputationKernels`),
    /// on the GPUs, after fusing adjacent kernel tasks ([`crate::fusion`]) unless
    /// [`CudaOptions::fuse`] is off. Fails, before any CUDA call, with [`BackendError::Unsupported`] naming an
    /// operator the backend has no kernel for ([`crate::kernels::registry`]); with
    /// [`BackendError::Unavailable`] when there is no usable CUDA driver ("no CUDA driver
    /// found ..."); with [`BackendError::Task`] naming a kernel task that cannot be lowered;
    /// and with [`BackendError::Device`] ("CUDA setup failed: ...") when a driver, NVRTC or
    /// cuBLAS call fails.
    pub fn prepare(
        graph: &TaskGraph,
        kernels: &dyn KernelLibrary,
        options: &CudaOptions,
    ) -> Result<Self, BackendError> {
        // Operators with no CUDA kernel are refused first, with no device involved; then a
        // machine without a GPU says so before any other work.
        crate::backend::check_kernels(graph, kernels)?;
        let available = check_cuda()?;
        let fusion;
        let (graph, kernels): (&TaskGraph, &dyn KernelLibrary) = if options.fuse {
            fusion = fuse(graph, kernels).map_err(|e| setup(format!("kernel fusion: {e}")))?;
            (&fusion.graph, &fusion.kernels)
        } else {
            (graph, kernels)
        };
        let labels: Vec<String> = graph.nodes().iter().map(|n| n.label.clone()).collect();
        let lowered = lower(graph, kernels).map_err(|e| e.into_backend_error(graph))?;
        let gpus = options.max_gpus.unwrap_or(available).clamp(1, available);
        let plan = StreamPlan::new(graph, gpus.min(graph.devices().max(1)), &lowered.scratch);
        let gpus: Vec<Gpu> = (0..plan.gpus)
            .map(|g| Gpu::open(g, &lowered.attention, plan.pool_bytes[g]))
            .collect::<Result<_, _>>()
            .map_err(setup)?;
        enable_peer_access(&gpus);
        let mut streams = Vec::new();
        let mut blas = Vec::new();
        let mut blas_workspaces = Vec::new();
        for v in 0..graph.devices().max(1) {
            let gpu = &gpus[plan.gpu_of_device.get(v).copied().unwrap_or(0)];
            let s = gpu.ctx.new_stream().map_err(|e| setup(format!("creating a stream: {e}")))?;
            let handle = CudaBlas::new(s.clone()).map_err(|e| setup(format!("creating a cuBLAS handle: {e:?}")))?;
            let workspace = DeviceMemory::new(&gpu.ctx, CUBLAS_WORKSPACE_BYTES).map_err(setup)?;
            bind_workspace(&handle, &workspace).map_err(setup)?;
            blas.push(handle);
            blas_workspaces.push(workspace);
            streams.push(s);
        }
        let mut events = Vec::new();
        for (t, n) in graph.nodes().iter().enumerate() {
            events.push(if plan.record[t] {
                let dev = task_device(graph, &n.task);
                let ctx = &gpus[plan.gpu_of_device[dev]].ctx;
                Some(ctx.new_event(None).map_err(|e| setup(format!("creating an event: {e}")))?)
            } else {
                None
            });
        }
        let bytes = |b: &Boundary| b.ty.volume() * b.dtype.size_bytes();
        let ctx0 = gpus[0].ctx.clone();
        let resident: Vec<DeviceMemory> = gpus
            .iter()
            .zip(&plan.resident.bytes)
            .map(|(gpu, &n)| DeviceMemory::new(&gpu.ctx, n))
            .collect::<Result<_, _>>()
            .map_err(setup)?;
        let host_outputs: Vec<HostMemory> = graph
            .outputs()
            .iter()
            .map(|b| HostMemory::new(&ctx0, bytes(b)))
            .collect::<Result<_, _>>()
            .map_err(setup)?;
        let consts: Vec<DeviceMemory> = lowered
            .consts
            .iter()
            .map(|(dev, data)| DeviceMemory::from_bytes(&gpus[plan.gpu_of_device[*dev]].ctx, &data.bytes()))
            .collect::<Result<_, _>>()
            .map_err(setup)?;
        let summary = CudaSummary {
            gpus: plan.gpus,
            devices: graph.devices(),
            pool_bytes: plan.pool_bytes.clone(),
            resident_bytes: plan.resident.bytes.clone(),
            captured: !options.eager,
        };
        let rt = Runtime {
            gpus,
            streams,
            blas,
            blas_workspaces,
            events,
            resident,
            host_outputs,
            consts,
            lowered,
            plan,
            buffer_device: graph.buffers().iter().map(|b| b.device.0 as usize).collect(),
            labels,
        };
        let captured = if options.eager {
            None
        } else {
            Some(capture(&rt).map_err(|e| match e {
                CaptureError::Issue(IssueError { task, reason }) => task_error(&rt.labels, task, reason),
                capture @ CaptureError::Capture { .. } => setup(capture.to_string()),
            })?)
        };
        Ok(CudaExecutable {
            graph: captured,
            rt,
            slots: InputSlots::new(graph.inputs()),
            outputs: graph.outputs().to_vec(),
            summary,
        })
    }

    /// What preparing decided.
    pub fn summary(&self) -> &CudaSummary {
        &self.summary
    }

    /// Loads computation input `input` (its index in the task graph's inputs): checks its
    /// type and dtype ([`BackendError::Input`] naming the input otherwise), slices the block
    /// of every Load task of the input on the host and copies each, in its storage dtype, to
    /// its GPU's resident region, where it stays until it is loaded again or the executable
    /// is dropped. A failed copy leaves the input not loaded.
    pub fn load(&mut self, input: usize, value: &HostTensor) -> Result<(), BackendError> {
        let Runtime { plan, resident, .. } = &self.rt;
        self.slots.load(&plan.resident, input, value, |gpu, offset, bytes| resident[gpu].write_at(offset, bytes))
    }

    /// Loads every input: `inputs` are the whole computation inputs in the task graph's order.
    pub fn load_all(&mut self, inputs: &[HostTensor]) -> Result<(), BackendError> {
        let Runtime { plan, resident, .. } = &self.rt;
        self.slots.load_all(&plan.resident, inputs, |gpu, offset, bytes| resident[gpu].write_at(offset, bytes))
    }

    /// Runs once on the loaded inputs; returns the whole saved outputs in the task graph's
    /// order. Fails with [`BackendError::Input`] naming the first input not loaded.
    pub fn run(&mut self) -> Result<Vec<HostTensor>, BackendError> {
        self.slots.require_all()?;
        match &self.graph {
            Some(g) => {
                g.launch().map_err(|e| BackendError::Device {
                    operation: "launching the CUDA graph".into(),
                    reason: e.to_string(),
                })?;
            }
            None => self.rt.issue().map_err(|e| task_error(&self.rt.labels, e.task, e.reason))?,
        }
        self.rt.synchronize().map_err(|reason| BackendError::Device { operation: "CUDA run".into(), reason })?;
        self.outputs
            .iter()
            .zip(&self.rt.host_outputs)
            .map(|(b, m)| from_bytes(b, &m.read()))
            .collect::<Result<_, _>>()
            .map_err(|reason| BackendError::Device { operation: "reading an output back".into(), reason })
    }
}

impl Prepared for CudaExecutable {
    fn load(&mut self, input: usize, value: &HostTensor) -> Result<(), BackendError> {
        CudaExecutable::load(self, input, value)
    }

    fn load_all(&mut self, inputs: &[HostTensor]) -> Result<(), BackendError> {
        CudaExecutable::load_all(self, inputs)
    }

    fn run(&mut self) -> Result<Vec<HostTensor>, BackendError> {
        CudaExecutable::run(self)
    }
}

/// A whole tensor of `b`'s type from its raw storage bytes (in its own dtype, as a device
/// buffer holds it; uploads are [`HostTensor::to_ne_bytes`]).
pub fn from_bytes(b: &Boundary, bytes: &[u8]) -> Result<HostTensor, String> {
    HostTensor::from_ne_bytes(b.ty.clone(), b.dtype, bytes).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use einsum_core::{DType, TensorType};

    use super::*;

    #[test]
    fn a_boundary_reads_back_its_uploaded_bytes_in_every_dtype() {
        for dtype in [DType::F32, DType::F16, DType::BF16] {
            let ty = TensorType::zero_bounded(&[3, 5]);
            let x = HostTensor::random(ty.clone(), dtype, 7);
            let b = Boundary { name: "x".into(), ty, dtype };
            let bytes = x.to_ne_bytes();
            assert_eq!(bytes.len(), 15 * dtype.size_bytes());
            assert_eq!(from_bytes(&b, &bytes).unwrap(), x);
        }
    }
}

//! [`CudaExecutable`]: a compiled computation prepared once on the GPUs (kernels compiled,
//! pools and resident regions allocated, constants uploaded, the whole run captured as a CUDA
//! graph), its inputs loaded once, and run any number of times.

use std::sync::Arc;

use cudarc::cublas::CudaBlas;
use cudarc::driver::{CudaEvent, CudaStream, sys};
use einsum_core::taskgraph::{Boundary, TaskGraph, TaskId};
use einsum_core::{BackendError, HostTensor, KernelLibrary, Prepared, TensorType};

use crate::availability::check_cuda;
use crate::device::{DeviceMemory, Gpu, HostMemory, enable_peer_access};
use crate::executor::{CUBLAS_WORKSPACE_BYTES, Exchange, IssueError, Runtime, bind_workspace, label};
use crate::fusion::fuse;
use crate::graph_capture::{CaptureError, CapturedGraph, capture, fork_issue_join};
use crate::inputs::InputSlots;
use crate::kernels::registry::KernelRegistry;
use crate::lower::{Lowered, lower, lower_rank};
use crate::rank_schedule::{RankSchedule, stored_blocks};
use crate::setup_lock::{self, SetupGuard};
use crate::stream_plan::{DEFAULT_STREAMS_PER_GPU, PlanOptions, StreamPlan};

/// How to prepare a [`CudaExecutable`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CudaOptions {
    /// Issue the tasks stream-ordered on every run instead of capturing them once as a CUDA
    /// graph (for debugging: errors surface at the task that caused them).
    pub eager: bool,
    /// Use at most this many GPUs (`None`: every GPU the driver sees from
    /// [`CudaOptions::first_gpu`] on). Virtual devices map onto the GPUs used round-robin.
    pub max_gpus: Option<usize>,
    /// The ordinal of the first GPU used (0 by default); a rank of a multi-process job uses
    /// the GPUs from its own (say, its local rank).
    pub first_gpu: usize,
    /// The stream budget of every GPU, shared by the virtual devices it hosts (at least one
    /// stream each; see [`crate::stream_plan`]). 1 gives every virtual device one stream.
    pub streams_per_gpu: usize,
    /// Fuse adjacent kernel tasks (a unary and the binary reading it, a binary and the
    /// RMSNorm reading it) before lowering ([`crate::fusion`]); off, every task keeps its own
    /// kernel (to compare).
    pub fuse: bool,
    /// The CUDA kernels by operator type: the library's, plus any a user registers for their
    /// own operators ([`KernelRegistry::with`]).
    pub kernels: KernelRegistry,
}

impl Default for CudaOptions {
    /// Captured, every GPU, [`DEFAULT_STREAMS_PER_GPU`] streams per GPU, fusion on, the
    /// library's kernels.
    fn default() -> Self {
        CudaOptions {
            eager: false,
            max_gpus: None,
            first_gpu: 0,
            streams_per_gpu: DEFAULT_STREAMS_PER_GPU,
            fuse: true,
            kernels: KernelRegistry::default(),
        }
    }
}

/// What preparing decided, for reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CudaSummary {
    /// GPUs used.
    pub gpus: usize,
    /// Virtual devices.
    pub devices: usize,
    /// Streams, over every GPU.
    pub streams: usize,
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
    // Field order is drop order: the graph, events and handles go before the memory and
    // contexts.
    graph: Option<CapturedGraph>,
    /// The events recorded on the origin stream before and after every run's work.
    timing: [CudaEvent; 2],
    /// The device time of the last run, in seconds (see [`CudaExecutable::last_run_device_seconds`]).
    last_device_seconds: Option<f64>,
    rt: Runtime,
    slots: InputSlots,
    outputs: Vec<Boundary>,
    /// The output blocks a run fills ([`CudaExecutable::stored_blocks`]).
    stored: Vec<(usize, TensorType)>,
    summary: CudaSummary,
    /// Taken when the executable drops, so that its CUDA resources (every field above) are
    /// freed under the [`setup_lock`]; released last.
    teardown: Option<SetupGuard>,
}

fn task_error(labels: &[String], t: usize, reason: String) -> BackendError {
    BackendError::Task { task: TaskId(t as u32), label: label(labels, t), reason }
}

fn setup(reason: String) -> BackendError {
    BackendError::Device { operation: "CUDA setup".into(), reason }
}

/// The streams of a stream plan, by index, with the cuBLAS handle of each and the workspace
/// bound to it.
type Streams = (Vec<Arc<CudaStream>>, Vec<CudaBlas>, Vec<DeviceMemory>);

/// Creates every stream of `plan` on its GPU, with a cuBLAS handle of its own bound to a
/// workspace of its own ([`CUBLAS_WORKSPACE_BYTES`]).
fn open_streams(gpus: &[Gpu], plan: &StreamPlan) -> Result<Streams, BackendError> {
    let mut streams = Vec::new();
    let mut blas = Vec::new();
    let mut blas_workspaces = Vec::new();
    for s in 0..plan.streams() {
        let gpu = &gpus[plan.gpu_of_stream(s)];
        let s = gpu.ctx.new_stream().map_err(|e| setup(format!("creating a stream: {e}")))?;
        let handle = CudaBlas::new(s.clone()).map_err(|e| setup(format!("creating a cuBLAS handle: {e:?}")))?;
        let workspace = DeviceMemory::new(&gpu.ctx, CUBLAS_WORKSPACE_BYTES).map_err(setup)?;
        bind_workspace(&handle, &workspace).map_err(setup)?;
        blas.push(handle);
        blas_workspaces.push(workspace);
        streams.push(s);
    }
    Ok((streams, blas, blas_workspaces))
}

/// The event recorded after each task that another stream waits for ([`StreamPlan::record`]),
/// on the GPU of the task's stream.
fn dependency_events(
    graph: &TaskGraph,
    gpus: &[Gpu],
    plan: &StreamPlan,
) -> Result<Vec<Option<CudaEvent>>, BackendError> {
    let mut events = Vec::new();
    for t in 0..graph.nodes().len() {
        events.push(if plan.record[t] {
            let ctx = &gpus[plan.gpu_of_stream(plan.stream[t])].ctx;
            Some(ctx.new_event(None).map_err(|e| setup(format!("creating an event: {e}")))?)
        } else {
            None
        });
    }
    Ok(events)
}

/// Every GPU's resident region, pinned host memory for every whole saved output, and the
/// constant tables.
type Memory = (Vec<DeviceMemory>, Vec<HostMemory>, Vec<DeviceMemory>);

/// The memory a prepared graph keeps: every GPU's resident region, pinned host memory for
/// every whole saved output, and the lowered constant tables, copied to their GPUs.
fn allocate_memory(
    graph: &TaskGraph,
    lowered: &Lowered,
    gpus: &[Gpu],
    plan: &StreamPlan,
) -> Result<Memory, BackendError> {
    let bytes = |b: &Boundary| b.ty.volume() * b.dtype.size_bytes();
    let ctx0 = gpus[0].ctx.clone();
    let resident: Vec<DeviceMemory> = gpus
        .iter()
        .zip(&plan.resident.bytes)
        .map(|(gpu, &n)| DeviceMemory::new(&gpu.ctx, n))
        .collect::<Result<_, _>>()
        .map_err(setup)?;
    let host_outputs: Vec<HostMemory> =
        graph.outputs().iter().map(|b| HostMemory::new(&ctx0, bytes(b))).collect::<Result<_, _>>().map_err(setup)?;
    let consts: Vec<DeviceMemory> = lowered
        .consts
        .iter()
        .map(|(dev, data)| DeviceMemory::from_bytes(&gpus[plan.gpu_of_device[*dev]].ctx, &data.bytes()))
        .collect::<Result<_, _>>()
        .map_err(setup)?;
    Ok((resident, host_outputs, consts))
}

/// A rank's share of a multi-process job, for [`CudaExecutable::prepare_rank`].
pub struct RankShare {
    /// The rank of every device of the graph.
    pub device_rank: Vec<usize>,
    /// This rank.
    pub rank: usize,
    /// The job's ranks.
    pub ranks: usize,
    /// What carries this rank's sends and receives (`crate::nccl::NcclRank`, feature `nccl`).
    pub exchange: Box<dyn Exchange>,
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
        CudaExecutable::prepare_share(graph, kernels, options, None)
    }

    /// Prepares rank `share.rank`'s share of `graph`, run by a multi-process job whose ranks
    /// each hold some of its devices, as [`CudaExecutable::prepare`] prepares the whole: the
    /// graph (fused first) is put in the rank's issue order ([`RankSchedule`]), only the
    /// rank's devices' tasks are lowered and only their memory is planned, on this process's
    /// GPUs, and every transfer to or from another rank's device is issued through
    /// `share.exchange`, one group per step, on an exchange stream (captured into the CUDA
    /// graph with the rest, or issued per run in eager mode). Every rank of the job must
    /// prepare the same graph with the same device ranks. A run fills only the blocks of the
    /// outputs that this rank's devices store ([`CudaExecutable::stored_blocks`]); the rest of
    /// every output is zero. A device list that does not fit the graph is
    /// [`BackendError::Device`] ("CUDA setup failed: ...").
    pub fn prepare_rank(
        graph: &TaskGraph,
        kernels: &dyn KernelLibrary,
        options: &CudaOptions,
        share: RankShare,
    ) -> Result<Self, BackendError> {
        CudaExecutable::prepare_share(graph, kernels, options, Some(share))
    }

    fn prepare_share(
        graph: &TaskGraph,
        kernels: &dyn KernelLibrary,
        options: &CudaOptions,
        share: Option<RankShare>,
    ) -> Result<Self, BackendError> {
        // Operators with no CUDA kernel are refused first, with no device involved; then a
        // machine without a GPU says so before any other work.
        crate::backend::check_kernels(graph, kernels, &options.kernels)?;
        // Everything below, the capture included, under the setup lock (declared first, so
        // on an early return it is released after what was set up is freed).
        let _setup = setup_lock::hold();
        let available = check_cuda()?;
        let fusion;
        let (graph, kernels): (&TaskGraph, &dyn KernelLibrary) = if options.fuse {
            fusion = fuse(graph, kernels).map_err(|e| setup(format!("kernel fusion: {e}")))?;
            (&fusion.graph, &fusion.kernels)
        } else {
            (graph, kernels)
        };
        let (schedule, exchange) = match share {
            Some(RankShare { device_rank, rank, ranks, exchange }) => {
                let schedule = RankSchedule::new(graph, &device_rank, rank, ranks)
                    .map_err(|e| setup(format!("rank {rank}'s share of the graph: {e}")))?;
                (Some(schedule), Some(exchange))
            }
            None => (None, None),
        };
        let graph = schedule.as_ref().map_or(graph, |s| &s.graph);
        let labels: Vec<String> = graph.nodes().iter().map(|n| n.label.clone()).collect();
        let lowered = match &schedule {
            Some(s) => lower_rank(s, kernels, &options.kernels),
            None => lower(graph, kernels, &options.kernels),
        }
        .map_err(|e| e.into_backend_error(graph))?;
        if options.first_gpu >= available {
            return Err(BackendError::Unavailable(format!(
                "no GPU {} to start from ({available} GPUs here)",
                options.first_gpu
            )));
        }
        let after = available - options.first_gpu;
        let gpus = options.max_gpus.unwrap_or(after).clamp(1, after);
        let local = schedule.as_ref().map_or(graph.devices(), |s| s.local_device.iter().filter(|&&l| l).count());
        let gpus = gpus.min(local.max(1));
        let plan = match &schedule {
            Some(s) => {
                let options = PlanOptions { streams_per_gpu: options.streams_per_gpu, ..PlanOptions::default() };
                StreamPlan::for_rank(s, gpus, &options, &lowered.scratch)
            }
            None => StreamPlan::new(graph, gpus, options.streams_per_gpu, &lowered.scratch),
        };
        let stored = stored_blocks(graph, &plan.roles);
        let gpus: Vec<Gpu> = (0..plan.gpus)
            .map(|g| Gpu::open(options.first_gpu + g, &lowered.modules, &lowered.attention, plan.pool_bytes[g]))
            .collect::<Result<_, _>>()
            .map_err(setup)?;
        enable_peer_access(&gpus);
        let (streams, blas, blas_workspaces) = open_streams(&gpus, &plan)?;
        let events = dependency_events(graph, &gpus, &plan)?;
        let (resident, host_outputs, consts) = allocate_memory(graph, &lowered, &gpus, &plan)?;
        let summary = CudaSummary {
            gpus: plan.gpus,
            devices: graph.devices(),
            streams: plan.streams(),
            pool_bytes: plan.pool_bytes.clone(),
            resident_bytes: plan.resident.bytes.clone(),
            captured: !options.eager,
        };
        // Timing events on the origin's GPU (the default flags, unlike the dependency events,
        // keep timing enabled).
        let timed = || {
            gpus[plan.gpu_of_stream(0)]
                .ctx
                .new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))
                .map_err(|e| setup(format!("creating a timing event: {e}")))
        };
        let timing = [timed()?, timed()?];
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
            exchange,
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
            timing,
            last_device_seconds: None,
            rt,
            slots: InputSlots::new(graph.inputs()),
            outputs: graph.outputs().to_vec(),
            stored,
            summary,
            teardown: None,
        })
    }

    /// The output blocks a run fills: every Store of this executable's devices, as (output,
    /// block type). For one process they tile every output; for a rank of a job
    /// ([`CudaExecutable::prepare_rank`]), only its own.
    pub fn stored_blocks(&self) -> &[(usize, TensorType)] {
        &self.stored
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
        let _setup = setup_lock::hold();
        let Runtime { plan, resident, .. } = &self.rt;
        self.slots.load(&plan.resident, input, value, |gpu, offset, bytes| resident[gpu].write_at(offset, bytes))
    }

    /// Overwrites the elements of loaded input `input` that `part` covers (its type a
    /// projection of the input's, its dtype the input's) in every resident block holding
    /// some of them, on every GPU, as [`einsum_core::Prepared::write`] says: each block's
    /// intersection with the part is copied as its contiguous runs, so the bytes moved are
    /// the part's on every block that holds it (a cache's new row, not the cache). Fails
    /// with [`BackendError::Input`] or [`BackendError::NotLoaded`] before any copy; a failed
    /// copy leaves the input not loaded.
    pub fn write(&mut self, input: usize, part: &HostTensor) -> Result<(), BackendError> {
        let _setup = setup_lock::hold();
        let Runtime { plan, resident, .. } = &self.rt;
        self.slots.write(&plan.resident, input, part, |gpu, offset, bytes| resident[gpu].write_at(offset, bytes))
    }

    /// Loads every input: `inputs` are the whole computation inputs in the task graph's order.
    pub fn load_all(&mut self, inputs: &[HostTensor]) -> Result<(), BackendError> {
        let _setup = setup_lock::hold();
        let Runtime { plan, resident, .. } = &self.rt;
        self.slots.load_all(&plan.resident, inputs, |gpu, offset, bytes| resident[gpu].write_at(offset, bytes))
    }

    /// Runs once on the loaded inputs; returns the whole saved outputs in the task graph's
    /// order. Fails with [`BackendError::Input`] naming the first input not loaded.
    ///
    /// The run's work is bracketed by two events on the origin stream: the graph launch (or,
    /// in eager mode, the issue forked from and joined back to the origin, as a capture is)
    /// lies between them, so their elapsed time is the run's device time
    /// ([`CudaExecutable::last_run_device_seconds`]), without the host's launch overhead
    /// before the first event or the output read-back after the second.
    pub fn run(&mut self) -> Result<Vec<HostTensor>, BackendError> {
        self.slots.require_all()?;
        self.last_device_seconds = None;
        let device = |operation: &str| {
            let operation = operation.to_string();
            move |reason: String| BackendError::Device { operation, reason }
        };
        let origin = self.rt.origin();
        self.timing[0].record(origin).map_err(|e| device("recording the start event")(e.to_string()))?;
        match &self.graph {
            Some(g) => g.launch().map_err(|e| device("launching the CUDA graph")(e.to_string()))?,
            None => fork_issue_join(&self.rt).map_err(|e| match e {
                CaptureError::Issue(IssueError { task, reason }) => task_error(&self.rt.labels, task, reason),
                fork @ CaptureError::Capture { .. } => device("eager issue")(fork.to_string()),
            })?,
        }
        self.timing[1].record(origin).map_err(|e| device("recording the end event")(e.to_string()))?;
        self.rt.synchronize().map_err(device("CUDA run"))?;
        let ms = self.timing[0].elapsed_ms(&self.timing[1]).map_err(|e| device("timing the run")(e.to_string()))?;
        let outputs = self
            .outputs
            .iter()
            .zip(&self.rt.host_outputs)
            .map(|(b, m)| from_bytes(b, &m.read()))
            .collect::<Result<_, _>>()
            .map_err(device("reading an output back"))?;
        self.last_device_seconds = Some(f64::from(ms) / 1e3);
        Ok(outputs)
    }

    /// The device time of the last successful run in seconds (between the events recorded
    /// on the origin stream around its work; see [`CudaExecutable::run`]), `None` before the
    /// first run or after a failed one.
    pub fn last_run_device_seconds(&self) -> Option<f64> {
        self.last_device_seconds
    }
}

impl Drop for CudaExecutable {
    /// Takes the setup lock into the last field: the fields drop after this, in order, so the
    /// graph, events, streams and memory are all freed before the lock is released.
    fn drop(&mut self) {
        self.teardown = Some(setup_lock::hold());
    }
}

impl Prepared for CudaExecutable {
    fn load(&mut self, input: usize, value: &HostTensor) -> Result<(), BackendError> {
        CudaExecutable::load(self, input, value)
    }

    fn load_all(&mut self, inputs: &[HostTensor]) -> Result<(), BackendError> {
        CudaExecutable::load_all(self, inputs)
    }

    fn write(&mut self, input: usize, part: &HostTensor) -> Result<(), BackendError> {
        CudaExecutable::write(self, input, part)
    }

    fn run(&mut self) -> Result<Vec<HostTensor>, BackendError> {
        CudaExecutable::run(self)
    }

    fn last_run_device_seconds(&self) -> Option<f64> {
        CudaExecutable::last_run_device_seconds(self)
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

//! Issuing the lowered task graph: every task's operations go to its stream in schedule
//! order, after waiting for the events of the tasks on other streams it depends on; an
//! event is recorded after every task another stream waits for. The same issue runs once
//! under stream capture (see [`crate::graph_capture`]) or on every run in eager mode.

use std::sync::Arc;

use cudarc::cublas::{self, CudaBlas};
use cudarc::driver::{CudaEvent, CudaFunction, CudaStream};

use einsum_core::taskgraph::TaskId;

use crate::device::{DeviceMemory, Gpu, HostMemory};
use crate::exchange_steps::RankOp;
use crate::lower::{Lowered, Ptr, Space};
use crate::rank_schedule::{Role, StepOp};
use crate::stream_plan::StreamPlan;
use crate::work::DeviceWork;

/// Everything the issue needs: GPUs, the streams of every virtual device with one cuBLAS
/// handle each, the events, the resident regions, pinned output memory, constant tables, the lowered operations
/// and the stream plan.
pub struct Runtime {
    // Field order is drop order: handles, events and streams before the memory and the
    // contexts they belong to.
    /// One cuBLAS handle per stream.
    pub blas: Vec<CudaBlas>,
    /// The workspace bound to each cuBLAS handle (see [`CUBLAS_WORKSPACE_BYTES`]); dropped
    /// after the handles that use it.
    pub blas_workspaces: Vec<DeviceMemory>,
    /// The event recorded after task `t`, where the stream plan asks for one.
    pub events: Vec<Option<CudaEvent>>,
    /// The streams of the stream plan (`plan.stream_device` says whose; on its GPU).
    pub streams: Vec<Arc<CudaStream>>,
    /// The resident region of every GPU: the Load destinations, filled by `load`, read by
    /// every run (see [`crate::resident`]).
    pub resident: Vec<DeviceMemory>,
    /// Whole saved outputs, pinned.
    pub host_outputs: Vec<HostMemory>,
    /// Constant tables.
    pub consts: Vec<DeviceMemory>,
    /// The operations.
    pub lowered: Lowered,
    /// Streams, events and pool offsets.
    pub plan: StreamPlan,
    /// Device of every buffer (virtual).
    pub buffer_device: Vec<usize>,
    /// Labels of the tasks, for errors.
    pub labels: Vec<String>,
    /// What carries this rank's sends and receives to the other ranks of its job (`None` for
    /// one process, whose plan has none).
    pub exchange: Option<Box<dyn Exchange>>,
    /// The GPUs.
    pub gpus: Vec<Gpu>,
}

/// What carries one rank's steps ([`StreamPlan::steps`]) to the other ranks of a
/// multi-process job: NCCL (`crate::nccl::NcclRank`, feature `nccl`).
pub trait Exchange: Send {
    /// Issues one step's operations on `stream` as one group: each send reads and each
    /// receive writes `op.bytes` bytes at the device address `address(op.task)` gives.
    ///
    /// # Safety
    /// As `crate::nccl::NcclRank::issue_step`: `stream` is of the exchange's GPU, the peers
    /// post the matching operations in the same step and order, and every address is
    /// device memory of that GPU that stays allocated, and untouched by other work, until
    /// the stream has passed the step.
    unsafe fn issue_step(
        &self,
        stream: &CudaStream,
        ops: &[RankOp],
        address: &dyn Fn(TaskId) -> u64,
    ) -> Result<(), String>;
}

/// Bytes of the workspace given to every cuBLAS handle: the 32 MiB cuBLAS recommends for
/// Hopper (and more than the 4 MiB it needs elsewhere). Bound once with
/// `cublasSetWorkspace`, so GEMMs captured into the CUDA graph use fixed memory of ours rather
/// than cuBLAS's default pool (which `cublasSetStream` resets and which it may allocate from
/// during a capture); one per handle, as a workspace must not be shared by two streams.
pub const CUBLAS_WORKSPACE_BYTES: usize = 32 << 20;

/// Binds `workspace` to `blas` as its cuBLAS workspace (after its stream is set: setting the
/// stream resets the workspace).
pub fn bind_workspace(blas: &CudaBlas, workspace: &DeviceMemory) -> Result<(), String> {
    // SAFETY: the handle is live; the workspace is device memory of the handle's GPU, aligned
    // by cuMemAlloc (cuBLAS asks for 256 bytes), and outlives the handle (Runtime field order).
    let r = unsafe {
        cublas::sys::cublasSetWorkspace_v2(*blas.handle(), workspace.ptr as *mut std::ffi::c_void, workspace.bytes)
    };
    if r == cublas::sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
        Ok(())
    } else {
        Err(format!("binding a {} byte cuBLAS workspace: {r:?}", workspace.bytes))
    }
}

/// Why issuing failed: the task (its position in the graph) and the device's reason (a
/// failed launch, GEMM, event or wait).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("task {task}: {reason}")]
pub struct IssueError {
    /// The task being issued.
    pub task: usize,
    /// What failed.
    pub reason: String,
}

impl Runtime {
    /// The GPU of stream `s`.
    fn gpu_of(&self, s: usize) -> &Gpu {
        &self.gpus[self.plan.gpu_of_stream(s)]
    }

    /// The GPU of virtual device `v`.
    fn gpu_of_device(&self, v: usize) -> &Gpu {
        &self.gpus[self.plan.gpu_of_device[v]]
    }

    /// The address of a symbolic pointer.
    fn addr(&self, p: Ptr) -> u64 {
        let base = match p.space {
            Space::Buffer(b) => match self.plan.resident.location(b as usize) {
                Some((gpu, offset)) => self.resident[gpu].ptr + offset as u64,
                None => {
                    let dev = self.buffer_device[b as usize];
                    self.gpu_of_device(dev).pool.ptr + self.plan.buffer_offset[b as usize] as u64
                }
            },
            Space::Scratch { task: t, index } => {
                self.gpu_of(self.plan.stream[t]).pool.ptr + self.plan.scratch_offset[t][index] as u64
            }
            Space::HostOutput(o) => self.host_outputs[o].device_ptr,
            Space::Const(c) => self.consts[c].ptr,
        };
        base + p.offset as u64
    }

    /// Issues every task, in schedule order (an aliased transfer, [`StreamPlan::elided`],
    /// issues nothing: its destination already is its source's memory).
    pub fn issue(&self) -> Result<(), IssueError> {
        for t in 0..self.lowered.ops.len() {
            if self.plan.elided[t] || self.plan.roles[t] == Role::Remote {
                continue;
            }
            if let Some(step) = self.plan.roles[t].step() {
                let ops = &self.plan.steps[step];
                if ops.first().is_some_and(|o| o.op.task.0 as usize == t) {
                    self.issue_step(ops)?;
                }
                continue;
            }
            let s = self.plan.stream[t];
            let stream = &self.streams[s];
            let fail = |reason: String| IssueError { task: t, reason };
            self.wait_for(stream, t).map_err(fail)?;
            let ctx = IssueCtx { rt: self, stream: s };
            for op in &self.lowered.ops[t] {
                op.work().issue(&ctx).map_err(fail)?;
            }
            if let Some(ev) = &self.events[t] {
                ev.record(stream).map_err(|e| fail(format!("recording an event: {e}")))?;
            }
        }
        Ok(())
    }

    /// Makes `stream` wait for the events of the tasks task `t` waits for.
    fn wait_for(&self, stream: &CudaStream, t: usize) -> Result<(), String> {
        for w in &self.plan.waits[t] {
            let ev = self.events[w.0 as usize].as_ref().ok_or_else(|| format!("no event after task {}", w.0))?;
            stream.wait(ev).map_err(|e| format!("waiting for task {}: {e}", w.0))?;
        }
        Ok(())
    }

    /// Issues one step of this rank's sends and receives as one group on its exchange
    /// stream: every wait of every operation before the group, every event the step's
    /// consumers wait for after it (the group's operations complete together).
    fn issue_step(&self, ops: &[StepOp]) -> Result<(), IssueError> {
        let first = ops[0].op.task.0 as usize;
        let fail = |reason: String| IssueError { task: first, reason };
        let stream = &self.streams[self.plan.stream[first]];
        for o in ops {
            self.wait_for(stream, o.op.task.0 as usize).map_err(fail)?;
        }
        let exchange = self
            .exchange
            .as_ref()
            .ok_or_else(|| fail("a transfer to or from another rank, with nothing to carry it (NCCL)".into()))?;
        let rank_ops: Vec<RankOp> = ops.iter().map(|o| o.op).collect();
        let address = |task: TaskId| {
            let o = ops.iter().find(|o| o.op.task == task).expect("an operation of this step");
            self.addr(Ptr::at(Space::Buffer(o.buffer.0)))
        };
        // SAFETY: the stream is the exchange stream of this rank's GPU; every rank's steps
        // list its operations in the job's order (`exchange_steps`); each address is a pool
        // buffer held for the whole step (`StreamPlan::for_rank`), and the waits above order
        // the step after its producers, the events below its consumers after it.
        unsafe { exchange.issue_step(stream, &rank_ops, &address) }.map_err(fail)?;
        for o in ops {
            if let Some(ev) = &self.events[o.op.task.0 as usize] {
                ev.record(stream).map_err(|e| fail(format!("recording an event: {e}")))?;
            }
        }
        Ok(())
    }

    /// Waits for every stream.
    pub fn synchronize(&self) -> Result<(), String> {
        for s in &self.streams {
            s.synchronize().map_err(|e| format!("synchronizing: {e}"))?;
        }
        Ok(())
    }

    /// The stream captures begin on and graphs are launched on.
    pub fn origin(&self) -> &Arc<CudaStream> {
        &self.streams[0]
    }
}

impl Drop for Runtime {
    /// cudarc's `CudaBlas` panics in its drop when `cublasDestroy` fails, which it does once
    /// the context holds a sticky error (say, an illegal address in a kernel): a failed run
    /// would then abort the process while the executable is dropped. When the GPUs no longer
    /// synchronize cleanly, the handles are leaked instead (the process is past saving them);
    /// otherwise everything drops normally, in field order.
    fn drop(&mut self) {
        if self.synchronize().is_err() {
            for b in self.blas.drain(..) {
                std::mem::forget(b);
            }
        }
    }
}

/// The label of task `t`, for errors.
pub fn label(labels: &[String], t: usize) -> String {
    labels.get(t).cloned().unwrap_or_default()
}

/// What device work sees while it is issued ([`DeviceWork::issue`]): the stream of its task,
/// that stream's GPU and cuBLAS handle, the kernels loaded there, and the address of every
/// symbolic pointer.
pub struct IssueCtx<'a> {
    rt: &'a Runtime,
    stream: usize,
}

impl IssueCtx<'_> {
    /// The device address of `p`.
    pub fn addr(&self, p: Ptr) -> u64 {
        self.rt.addr(p)
    }

    /// The stream the work goes to.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.rt.streams[self.stream]
    }

    /// The stream's GPU.
    pub fn gpu(&self) -> &Gpu {
        self.rt.gpu_of(self.stream)
    }

    /// The GPU holding buffer `b`.
    pub fn gpu_of_buffer(&self, b: u32) -> &Gpu {
        self.rt.gpu_of_device(self.rt.buffer_device[b as usize])
    }

    /// The stream's cuBLAS handle.
    pub fn blas(&self) -> &CudaBlas {
        &self.rt.blas[self.stream]
    }

    /// The kernel `name` of a fixed module or of a user's module, on the stream's GPU.
    pub fn function(&self, name: &str) -> Result<&CudaFunction, String> {
        self.gpu().functions.get(name).ok_or_else(|| format!("kernel `{name}` is not loaded"))
    }

    /// The library kernel `work` launches ([`DeviceWork::kernel_name`]: the variant the
    /// lowering chose).
    pub fn library_kernel(&self, work: &dyn DeviceWork) -> Result<&CudaFunction, String> {
        let name = work.kernel_name().ok_or_else(|| format!("no library kernel launches {work:?}"))?;
        self.function(name)
    }

    /// The attention kernel `entry` compiled for `head_dim`, if this GPU has it.
    pub fn attention(&self, entry: &'static str, head_dim: usize) -> Option<&CudaFunction> {
        self.gpu().attention.get(&(entry, head_dim))
    }
}

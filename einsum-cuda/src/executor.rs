//! Issuing the lowered task graph: every task's operations go to its stream in schedule
//! order, after waiting for the events of the tasks on other streams it depends on; an
//! event is recorded after every task another stream waits for. The same issue runs once
//! under stream capture (see [`crate::graph_capture`]) or on every run in eager mode.

use std::sync::Arc;

use cudarc::cublas::{self, CudaBlas};
use cudarc::driver::{CudaEvent, CudaFunction, CudaStream, DeviceRepr, LaunchConfig, PushKernelArg, result};
use einsum_core::DType;

use crate::addressing::{Access, VECTOR_BYTES};
use crate::device::{DeviceMemory, Gpu, HostMemory};
use crate::kernels::codes::{OpCode, unary_scalar};
use crate::kernels::gemm_plan::Gemm;
use crate::lower::{Lowered, MAX_AGG_SOURCES, Op, Ptr, RowKernel, Space};
use crate::stream_plan::StreamPlan;

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
    /// The GPUs.
    pub gpus: Vec<Gpu>,
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

/// The message of a failed kernel launch.
fn launch_err(e: cudarc::driver::DriverError) -> String {
    format!("kernel launch: {e}")
}

/// A grid-stride launch over `n` elements.
fn linear(n: usize) -> LaunchConfig {
    let blocks = n.div_ceil(256).clamp(1, 65536) as u32;
    LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 }
}

/// The launch over `n` elements of `dtype`: a thread per element, or on the vector path a
/// thread per 16 bytes (`lanes` of `common.cuh` elements).
fn elementwise(n: usize, dtype: DType, vector: bool) -> LaunchConfig {
    linear(if vector { n.div_ceil(VECTOR_BYTES / dtype.size_bytes()) } else { n })
}

/// The `Sources` argument of the `aggregate` kernels (`aggregate.cu`): the source addresses by
/// value, unused entries null.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct AggSources {
    p: [u64; MAX_AGG_SOURCES],
}

// SAFETY: `AggSources` is `repr(C)`, plain old data, and matches `struct Sources` in
// aggregate.cu (an array of MAX_AGG_SOURCES device pointers).
unsafe impl DeviceRepr for AggSources {}

impl AggSources {
    /// The struct of up to [`MAX_AGG_SOURCES`] addresses.
    fn new(addrs: impl ExactSizeIterator<Item = u64>) -> Result<AggSources, String> {
        if addrs.len() == 0 || addrs.len() > MAX_AGG_SOURCES {
            return Err(format!("an aggregate launch of {} sources (1 to {MAX_AGG_SOURCES})", addrs.len()));
        }
        let mut p = [0u64; MAX_AGG_SOURCES];
        for (slot, a) in p.iter_mut().zip(addrs) {
            *slot = a;
        }
        Ok(AggSources { p })
    }
}

/// Largest `gridDim.x`.
const MAX_GRID_X: usize = (1 << 31) - 1;
/// Largest `gridDim.y` and `gridDim.z`.
const MAX_GRID_YZ: usize = 65535;

/// A grid extent of `n` blocks, or an error naming `what` when it exceeds `max` (a plain `as
/// u32` would wrap and launch a truncated grid).
fn grid(n: usize, max: usize, what: &str) -> Result<u32, String> {
    if n > max {
        return Err(format!("{what}: {n} blocks exceed CUDA's grid limit of {max}"));
    }
    Ok(n as u32)
}

/// The launch of a row kernel (`rows.cu`: one warp per fibre, 8 per block) over `fibres`
/// rows of `n` elements; `None` when there is nothing to do.
fn rows_launch(fibres: usize, n: usize) -> Result<Option<LaunchConfig>, String> {
    if fibres == 0 || n == 0 {
        return Ok(None);
    }
    Ok(Some(LaunchConfig {
        grid_dim: (grid(fibres.div_ceil(8), MAX_GRID_X, "row kernel")?, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    }))
}

fn cuda_dtype(d: DType) -> cublas::sys::cudaDataType {
    match d {
        DType::F32 => cublas::sys::cudaDataType::CUDA_R_32F,
        DType::F16 => cublas::sys::cudaDataType::CUDA_R_16F,
        DType::BF16 => cublas::sys::cudaDataType::CUDA_R_16BF,
    }
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

    /// The kernel a memory-bound operation launches ([`Op::kernel_name`]: the variant the
    /// lowering chose).
    fn kernel_of(&self, stream: usize, op: &Op) -> Result<&CudaFunction, String> {
        let name = op.kernel_name().ok_or_else(|| format!("no NVRTC kernel launches {op:?}"))?;
        self.function(stream, name)
    }

    fn function(&self, stream: usize, name: &str) -> Result<&CudaFunction, String> {
        self.gpu_of(stream).functions.get(name).ok_or_else(|| format!("kernel `{name}` is not loaded"))
    }

    /// Issues every task, in schedule order (an aliased transfer, [`StreamPlan::elided`],
    /// issues nothing: its destination already is its source's memory).
    pub fn issue(&self) -> Result<(), IssueError> {
        for t in 0..self.lowered.ops.len() {
            if self.plan.elided[t] {
                continue;
            }
            let s = self.plan.stream[t];
            let stream = &self.streams[s];
            let fail = |reason: String| IssueError { task: t, reason };
            for w in &self.plan.waits[t] {
                let ev =
                    self.events[w.0 as usize].as_ref().ok_or_else(|| fail(format!("no event after task {}", w.0)))?;
                stream.wait(ev).map_err(|e| fail(format!("waiting for task {}: {e}", w.0)))?;
            }
            for op in &self.lowered.ops[t] {
                self.issue_op(s, op).map_err(fail)?;
            }
            if let Some(ev) = &self.events[t] {
                ev.record(stream).map_err(|e| fail(format!("recording an event: {e}")))?;
            }
        }
        Ok(())
    }

    fn issue_op(&self, s: usize, op: &Op) -> Result<(), String> {
        match op {
            Op::Copy { .. } => self.issue_copy(s, op),
            Op::Memcpy { .. } => self.issue_memcpy(s, op),
            Op::Aggregate { .. } => self.issue_aggregate(s, op),
            Op::Unary { .. } => self.issue_unary(s, op),
            Op::Binary { .. } => self.issue_binary(s, op),
            Op::UnaryBinary { .. } => self.issue_unary_binary(s, op),
            Op::BinaryRmsNorm { .. } => self.issue_binary_rmsnorm(s, op),
            Op::Rows { .. } => self.issue_rows(s, op),
            Op::Rope { .. } => self.issue_rope(s, op),
            Op::Reduce { .. } => self.issue_reduce(s, op),
            Op::Attention { .. } => self.issue_attention(s, op),
            Op::Gemm { a: x, b: y, c, dtype, gemm } => {
                self.gemm(s, self.addr(*x), self.addr(*y), self.addr(*c), *dtype, gemm)
            }
        }
    }

    /// Issues a copy of a box between layouts (`box_copy`), or of contiguous bytes (`copy_vec`).
    fn issue_copy(&self, s: usize, op: &Op) -> Result<(), String> {
        let Op::Copy { src, dst, dtype, dims, access } = op else {
            unreachable!("issue_copy of another operation");
        };
        let stream = &self.streams[s];
        let a = |p: &Ptr| self.addr(*p);
        let n = dims.volume();
        if n == 0 {
            return Ok(());
        }
        let (sp, dp, dt) = (a(src), a(dst), dtype.code());
        let f = self.kernel_of(s, op)?;
        let mut b = stream.launch_builder(f);
        match access {
            Access::Vector => {
                let bytes = (n * dtype.size_bytes()) as i64;
                b.arg(&sp).arg(&dp).arg(&bytes);
                // SAFETY: matches `copy_vec(src, dst, bytes)`; both pointers are 16-byte
                // aligned (addressing.rs) and address `bytes` bytes the plan sized.
                unsafe { b.launch(elementwise(n, *dtype, true)) }.map_err(launch_err)?;
            }
            Access::Strided(_) => {
                let zero = 0i64;
                b.arg(&sp).arg(&zero).arg(&dp).arg(&zero).arg(&dt).arg(dims);
                // SAFETY: the arguments match `box_copy`'s and `box_copy32`'s signature;
                // the pointers address pool, resident, host or constant memory sized by
                // the plan (and every offset fits 31 bits for `box_copy32`).
                unsafe { b.launch(linear(n)) }.map_err(launch_err)?;
            }
        }
        Ok(())
    }

    /// Issues a transfer between two buffers, on one GPU or between two.
    fn issue_memcpy(&self, s: usize, op: &Op) -> Result<(), String> {
        let Op::Memcpy { src, dst, bytes } = op else {
            unreachable!("issue_memcpy of another operation");
        };
        let stream = &self.streams[s];
        let a = |p: &Ptr| self.addr(*p);
        if *bytes == 0 {
            return Ok(());
        }
        let (Space::Buffer(sb), Space::Buffer(db)) = (src.space, dst.space) else {
            return Err("a transfer between non-buffers".into());
        };
        let (sg, dg) =
            (self.gpu_of_device(self.buffer_device[sb as usize]), self.gpu_of_device(self.buffer_device[db as usize]));
        dg.ctx.bind_to_thread().map_err(|e| e.to_string())?;
        // SAFETY: both ranges lie in their pools (the source possibly in its resident
        // region); the stream belongs to the destination.
        let r = unsafe {
            if sg.ctx.ordinal() == dg.ctx.ordinal() {
                result::memcpy_dtod_async(a(dst), a(src), *bytes, stream.cu_stream())
            } else {
                result::memcpy_peer_async(dg.ctx.cu_ctx(), a(dst), sg.ctx.cu_ctx(), a(src), *bytes, stream.cu_stream())
            }
        };
        r.map_err(|e| format!("copying {bytes} bytes between GPUs: {e}"))?;
        Ok(())
    }

    /// Issues the ⊕ of up to [`MAX_AGG_SOURCES`] sources into one block (`aggregate`).
    fn issue_aggregate(&self, s: usize, op: &Op) -> Result<(), String> {
        let Op::Aggregate { srcs, accumulate, out, dtype, agg, n, vector } = op else {
            unreachable!("issue_aggregate of another operation");
        };
        let stream = &self.streams[s];
        let a = |p: &Ptr| self.addr(*p);
        if *n == 0 {
            return Ok(());
        }
        let sources = AggSources::new(srcs.iter().map(&a))?;
        let (k, acc) = (srcs.len() as i32, i32::from(*accumulate));
        let (outp, dt, code, nn) = (a(out), dtype.code(), agg.code(), *n as i64);
        let f = self.kernel_of(s, op)?;
        let mut b = stream.launch_builder(f);
        b.arg(&sources).arg(&k).arg(&acc).arg(&outp).arg(&dt).arg(&code).arg(&nn);
        // SAFETY: matches `aggregate`'s and `aggregate_vec`'s signature (`Sources` by
        // value, as `AggSources`); k sources and `out` of n elements each, 16-byte
        // aligned on the vector path.
        unsafe { b.launch(elementwise(*n, *dtype, *vector)) }.map_err(launch_err)?;
        Ok(())
    }

    /// Issues an elementwise unary kernel (`unary`).
    fn issue_unary(&self, s: usize, op: &Op) -> Result<(), String> {
        let Op::Unary { x, y, dtype, op: unary, n, vector } = op else {
            unreachable!("issue_unary of another operation");
        };
        let stream = &self.streams[s];
        let a = |p: &Ptr| self.addr(*p);
        if *n == 0 {
            return Ok(());
        }
        let (code, scale) = (unary.code(), unary_scalar(*unary));
        let (xp, yp, dt, nn) = (a(x), a(y), dtype.code(), *n as i64);
        let f = self.kernel_of(s, op)?;
        let mut b = stream.launch_builder(f);
        b.arg(&xp).arg(&yp).arg(&dt).arg(&code).arg(&scale).arg(&nn);
        // SAFETY: matches the signature shared by `unary` and `unary_vec`.
        unsafe { b.launch(elementwise(*n, *dtype, *vector)) }.map_err(launch_err)?;
        Ok(())
    }

    /// Issues an elementwise binary kernel (`binary`, or `binary_vec` on the vector path).
    fn issue_binary(&self, s: usize, op: &Op) -> Result<(), String> {
        let Op::Binary { a: x, b: y, y: out, dtype, op: binary, dims, access } = op else {
            unreachable!("issue_binary of another operation");
        };
        let stream = &self.streams[s];
        let a = |p: &Ptr| self.addr(*p);
        let n = dims.volume();
        if n == 0 {
            return Ok(());
        }
        let (xp, yp, op_, dt, code) = (a(x), a(y), a(out), dtype.code(), binary.code());
        let f = self.kernel_of(s, op)?;
        let mut b = stream.launch_builder(f);
        b.arg(&xp).arg(&yp).arg(&op_).arg(&dt).arg(&code);
        match access {
            Access::Vector => {
                let nn = n as i64;
                b.arg(&nn);
                // SAFETY: matches `binary_vec(a, b, y, dt, op, n)`; the three pointers
                // are 16-byte aligned and address n contiguous elements.
                unsafe { b.launch(elementwise(n, *dtype, true)) }.map_err(launch_err)?;
            }
            Access::Strided(_) => {
                b.arg(dims);
                // SAFETY: matches `binary`'s and `binary32`'s signature.
                unsafe { b.launch(linear(n)) }.map_err(launch_err)?;
            }
        }
        Ok(())
    }

    /// Issues a unary fused with a binary (`unary_binary`, fused.cu).
    fn issue_unary_binary(&self, s: usize, op: &Op) -> Result<(), String> {
        let Op::UnaryBinary { x, b: other, y, dtype, unary, binary, unary_first, n, vector } = op else {
            unreachable!("issue_unary_binary of another operation");
        };
        let stream = &self.streams[s];
        let a = |p: &Ptr| self.addr(*p);
        if *n == 0 {
            return Ok(());
        }
        let (uop, scale, bop, first) = (unary.code(), unary_scalar(*unary), binary.code(), i32::from(*unary_first));
        let (xp, bp, yp, dt, nn) = (a(x), a(other), a(y), dtype.code(), *n as i64);
        let f = self.kernel_of(s, op)?;
        let mut b = stream.launch_builder(f);
        b.arg(&xp).arg(&bp).arg(&yp).arg(&dt).arg(&uop).arg(&scale).arg(&bop).arg(&first).arg(&nn);
        // SAFETY: matches the signature shared by `unary_binary` and `unary_binary_vec`
        // (fused.cu); three blocks of n elements, 16-byte aligned on the vector path.
        unsafe { b.launch(elementwise(*n, *dtype, *vector)) }.map_err(launch_err)?;
        Ok(())
    }

    /// Issues a binary fused with the RMS norm of its result (`binary_rmsnorm`, rows.cu).
    fn issue_binary_rmsnorm(&self, s: usize, op: &Op) -> Result<(), String> {
        let Op::BinaryRmsNorm { a: left, b: right, w, sum, y, dtype, binary, outer, n, inner, eps } = op else {
            unreachable!("issue_binary_rmsnorm of another operation");
        };
        let stream = &self.streams[s];
        let a = |p: &Ptr| self.addr(*p);
        let Some(cfg) = rows_launch(outer * inner, *n)? else {
            return Ok(());
        };
        let (ap, bp, wp, yp, dt, code) = (a(left), a(right), a(w), a(y), dtype.code(), binary.code());
        let sp = sum.map(|p| a(&p)).unwrap_or(0);
        let (o, nn, i) = (*outer as i64, *n as i64, *inner as i64);
        let f = self.function(s, "binary_rmsnorm")?;
        let mut b = stream.launch_builder(f);
        b.arg(&ap).arg(&bp).arg(&wp).arg(&sp).arg(&yp).arg(&dt).arg(&code).arg(&o).arg(&nn).arg(&i).arg(eps);
        // SAFETY: matches `binary_rmsnorm`'s signature (rows.cu); a null `sum` stores
        // nothing.
        unsafe { b.launch(cfg) }.map_err(launch_err)?;
        Ok(())
    }

    /// Issues a row kernel: softmax, RMS norm or layer norm (rows.cu).
    fn issue_rows(&self, s: usize, op: &Op) -> Result<(), String> {
        let Op::Rows { kernel, x, w, b: bias, y, dtype, outer, n, inner, eps } = op else {
            unreachable!("issue_rows of another operation");
        };
        let stream = &self.streams[s];
        let a = |p: &Ptr| self.addr(*p);
        let Some(cfg) = rows_launch(outer * inner, *n)? else {
            return Ok(());
        };
        let (xp, yp, dt) = (a(x), a(y), dtype.code());
        let (o, nn, i) = (*outer as i64, *n as i64, *inner as i64);
        let wp = w.map(|p| a(&p)).unwrap_or(0);
        let bp = bias.map(|p| a(&p)).unwrap_or(0);
        let name = match kernel {
            RowKernel::Softmax => "softmax",
            RowKernel::RmsNorm => "rmsnorm",
            RowKernel::LayerNorm => "layernorm",
        };
        let f = self.function(s, name)?;
        let mut b = stream.launch_builder(f);
        b.arg(&xp);
        match kernel {
            RowKernel::Softmax => {
                b.arg(&yp).arg(&dt).arg(&o).arg(&nn).arg(&i);
            }
            RowKernel::RmsNorm => {
                b.arg(&wp).arg(&yp).arg(&dt).arg(&o).arg(&nn).arg(&i).arg(eps);
            }
            RowKernel::LayerNorm => {
                b.arg(&wp).arg(&bp).arg(&yp).arg(&dt).arg(&o).arg(&nn).arg(&i).arg(eps);
            }
        }
        // SAFETY: matches the row kernels' signatures (see rows.cu).
        unsafe { b.launch(cfg) }.map_err(launch_err)?;
        Ok(())
    }

    /// Issues rotary position embedding (`rope`).
    fn issue_rope(&self, s: usize, op: &Op) -> Result<(), String> {
        let Op::Rope { x, y, dtype, table, seq, feat, half, rows, dims } = op else {
            unreachable!("issue_rope of another operation");
        };
        let stream = &self.streams[s];
        let a = |p: &Ptr| self.addr(*p);
        let n = dims.volume();
        if n == 0 {
            return Ok(());
        }
        let (xp, yp, tp, dt) = (a(x), a(y), a(table), dtype.code());
        let (sq, ft, h, r) = (*seq as i32, *feat as i32, *half as i64, *rows as i64);
        let f = self.function(s, "rope")?;
        let mut b = stream.launch_builder(f);
        b.arg(&xp).arg(&yp).arg(&dt).arg(&tp).arg(&sq).arg(&ft).arg(&h).arg(&r).arg(dims);
        // SAFETY: matches `rope`'s signature; the table holds 2 · rows · half floats.
        unsafe { b.launch(linear(n)) }.map_err(launch_err)?;
        Ok(())
    }

    /// Issues a reduction over some indices (`reduce`).
    fn issue_reduce(&self, s: usize, op: &Op) -> Result<(), String> {
        let Op::Reduce { x, y, dtype, op: reduce, keep, over, .. } = op else {
            unreachable!("issue_reduce of another operation");
        };
        let stream = &self.streams[s];
        let a = |p: &Ptr| self.addr(*p);
        let n = keep.volume();
        if n == 0 {
            return Ok(());
        }
        let code = reduce.code();
        let (xp, yp, dt) = (a(x), a(y), dtype.code());
        let f = self.kernel_of(s, op)?;
        let mut b = stream.launch_builder(f);
        b.arg(&xp).arg(&yp).arg(&dt).arg(&code).arg(keep).arg(over);
        // SAFETY: matches `reduce`'s and `reduce32`'s signature.
        unsafe { b.launch(linear(n)) }.map_err(launch_err)?;
        Ok(())
    }

    /// Issues an attention kernel, the entry its dtype and head dimension chose when lowering.
    fn issue_attention(&self, s: usize, op: &Op) -> Result<(), String> {
        let Op::Attention {
            kernel,
            q,
            k,
            v,
            o,
            dtype,
            bounds,
            heads,
            nq,
            nk,
            heads_lo,
            kv_lo,
            keys_lo,
            group,
            scale_log2,
            head_dim,
        } = op
        else {
            unreachable!("issue_attention of another operation");
        };
        let stream = &self.streams[s];
        let a = |p: &Ptr| self.addr(*p);
        if *nq == 0 || *heads == 0 {
            return Ok(());
        }
        let entry = kernel.entry(*dtype);
        let f = self.gpu_of(s).attention.get(&(entry, *head_dim)).ok_or_else(|| {
            format!(
                "no `{entry}` kernel for head dimension {head_dim} on this GPU (the tensor-core \
                 attention kernel needs compute capability 8.0 or later)"
            )
        })?;
        let (qp, kp, vp, op_, bp, dt) = (a(q), a(k), a(v), a(o), a(bounds), dtype.code());
        let ints = [*nq as i64, *nk as i64, *heads_lo as i64, *kv_lo as i64, *keys_lo as i64, *group as i64];
        let hpb = kernel.heads_per_block() as i64;
        let mut b = stream.launch_builder(f);
        b.arg(&qp).arg(&kp).arg(&vp).arg(&op_).arg(&dt).arg(&bp);
        for x in &ints {
            b.arg(x);
        }
        b.arg(&hpb).arg(scale_log2);
        let cfg = LaunchConfig {
            grid_dim: (
                grid(nq.div_ceil(kernel.positions_per_block(*head_dim)), MAX_GRID_X, "attention query tiles")?,
                grid(heads / kernel.heads_per_block(), MAX_GRID_YZ, "attention heads")?,
                1,
            ),
            block_dim: (kernel.threads() as u32, 1, 1),
            shared_mem_bytes: kernel.shared_bytes(*head_dim) as u32,
        };
        // SAFETY: matches the signature every attention entry shares; blocks were
        // checked and the kernel chosen (alignment, head dim, dtype) when lowering.
        unsafe { b.launch(cfg) }.map_err(launch_err)?;
        Ok(())
    }

    /// The row-major batched GEMM `C = A · B` through cuBLAS's column-major
    /// `cublasGemmStridedBatchedEx`: computes `Cᵀ = Bᵀ · Aᵀ` (f32 accumulation).
    fn gemm(&self, s: usize, a: u64, b: u64, c: u64, dtype: DType, g: &Gemm) -> Result<(), String> {
        if g.m == 0 || g.n == 0 || g.batch == 0 {
            return Ok(());
        }
        use cublas::sys::cublasOperation_t::{CUBLAS_OP_N, CUBLAS_OP_T};
        let (op_b, ldb_cm) = if g.trans_b { (CUBLAS_OP_T, g.k) } else { (CUBLAS_OP_N, g.n) };
        let (op_a, lda_cm) = if g.trans_a { (CUBLAS_OP_T, g.m) } else { (CUBLAS_OP_N, g.k) };
        let (alpha, beta) = (1.0f32, 0.0f32);
        let ty = cuda_dtype(dtype);
        let int = |x: usize| i32::try_from(x).map_err(|_| format!("GEMM size {x} exceeds cuBLAS's 32-bit sizes"));
        self.gpu_of(s).ctx.bind_to_thread().map_err(|e| e.to_string())?;
        // SAFETY: A, B and C address pool memory of the sizes the plan computed; alpha and
        // beta are host scalars read when the call is enqueued (and captured by value).
        unsafe {
            cublas::result::gemm_strided_batched_ex(
                *self.blas[s].handle(),
                op_b,
                op_a,
                int(g.n)?,
                int(g.m)?,
                int(g.k)?,
                &alpha as *const f32 as *const _,
                b as *const _,
                ty,
                int(ldb_cm.max(1))?,
                g.stride_b as i64,
                a as *const _,
                ty,
                int(lda_cm.max(1))?,
                g.stride_a as i64,
                &beta as *const f32 as *const _,
                c as *mut _,
                ty,
                int(g.n)?,
                g.stride_c as i64,
                int(g.batch)?,
                cublas::sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                cublas::sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        }
        .map_err(|e| format!("cuBLAS GEMM {}x{}x{} (batch {}): {e:?}", g.m, g.n, g.k, g.batch))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grids_past_the_cuda_limits_are_errors_not_truncations() {
        assert_eq!(grid(65535, MAX_GRID_YZ, "heads"), Ok(65535));
        let err = grid(65536, MAX_GRID_YZ, "attention heads").unwrap_err();
        assert!(err.contains("attention heads") && err.contains("65535"), "{err}");
        assert!(grid(1 << 31, MAX_GRID_X, "rows").is_err());
        let blocks = linear(usize::MAX / 2).grid_dim.0;
        assert!(blocks as usize <= MAX_GRID_X && blocks > 0);
    }

    /// The 32-bit kernels' grid-stride index stays below 2³² (see `addressing::NARROW_LIMIT`):
    /// a grid has at most 2³² − 1 − NARROW_LIMIT threads.
    #[test]
    fn a_grid_stride_cannot_wrap_a_32_bit_index() {
        let c = linear(usize::MAX / 2);
        let threads = c.grid_dim.0 as u64 * c.block_dim.0 as u64;
        assert!(threads <= u32::MAX as u64 - crate::addressing::NARROW_LIMIT, "{threads} threads");
    }

    #[test]
    fn aggregate_sources_fill_the_struct_in_order_and_refuse_too_many() {
        let s = AggSources::new([10u64, 20, 30].into_iter()).unwrap();
        assert_eq!(&s.p[..4], &[10, 20, 30, 0]);
        assert_eq!(std::mem::size_of::<AggSources>(), 8 * MAX_AGG_SOURCES);
        assert!(AggSources::new(std::iter::empty()).is_err());
        assert!(AggSources::new(vec![1u64; MAX_AGG_SOURCES + 1].into_iter()).unwrap_err().contains("sources"));
    }
}

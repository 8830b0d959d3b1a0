//! Lowering a task graph to device operations: every task becomes a short list of
//! [`Op`]s (kernel launches, GEMMs, copies) over symbolic pointers, before any GPU is
//! touched. A kernel task's operator comes from the kernel library
//! ([`KernelLibrary::info`]) and its lowering from the table of CUDA kernels by operator
//! type ([`crate::kernels::registry`]); an operator with no entry is a typed error
//! ([`LowerError::Unsupported`]) here, at prepare time, before any device call.

use einsum_core::taskgraph::{Task, TaskGraph, TaskId};
use einsum_core::{Aggregation, BackendError, DType, KernelLibrary, TensorType};
use einsum_ops::binary::BinaryOp;
use einsum_ops::reduce::ReduceOp;
use einsum_ops::unary::UnaryOp;

use crate::kernels::attention::{AttentionKernel, AttentionModule};
use crate::kernels::gemm_plan::{Gemm, Permute};
use crate::kernels::registry::{self, KernelArgs};

/// Largest rank a strided kernel iterates.
pub const MAX_RANK: usize = 8;

/// A strided iteration space, laid out as the CUDA `Dims` struct of `common.cuh`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dims {
    /// Number of dimensions used.
    pub rank: i32,
    /// Padding (the C struct aligns the arrays to 8 bytes).
    pub pad: i32,
    /// Extents, iterated row-major.
    pub shape: [i64; MAX_RANK],
    /// Strides in the first tensor addressed.
    pub s0: [i64; MAX_RANK],
    /// Strides in the second.
    pub s1: [i64; MAX_RANK],
    /// Strides in the third.
    pub s2: [i64; MAX_RANK],
}

// SAFETY: `Dims` is `repr(C)`, plain old data, and matches `struct Dims` in common.cuh.
unsafe impl cudarc::driver::DeviceRepr for Dims {}

impl Dims {
    /// The space of `shape` with up to three stride vectors (missing ones are zero).
    pub fn new(shape: &[usize], strides: [&[usize]; 3]) -> Result<Dims, String> {
        if shape.len() > MAX_RANK {
            return Err(format!("rank {} exceeds the CUDA kernels' maximum of {MAX_RANK}", shape.len()));
        }
        let mut d = Dims {
            rank: shape.len() as i32,
            pad: 0,
            shape: [1; MAX_RANK],
            s0: [0; MAX_RANK],
            s1: [0; MAX_RANK],
            s2: [0; MAX_RANK],
        };
        for (i, &n) in shape.iter().enumerate() {
            d.shape[i] = n as i64;
            d.s0[i] = strides[0].get(i).copied().unwrap_or(0) as i64;
            d.s1[i] = strides[1].get(i).copied().unwrap_or(0) as i64;
            d.s2[i] = strides[2].get(i).copied().unwrap_or(0) as i64;
        }
        Ok(d)
    }

    /// Number of elements iterated.
    pub fn volume(&self) -> usize {
        self.shape[..self.rank as usize].iter().product::<i64>() as usize
    }
}

/// Where a pointer points, before addresses exist.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Space {
    /// A task-graph buffer: in its GPU's pool, or, for a Load destination, in its GPU's
    /// resident region (see [`crate::resident`]).
    Buffer(u32),
    /// Scratch area `index` of task `task` (in the task's GPU pool).
    Scratch {
        /// The task.
        task: usize,
        /// Which of its scratch areas.
        index: usize,
    },
    /// The pinned, device-mapped host copy of saved output `o`.
    HostOutput(usize),
    /// Constant table `i` (uploaded once at prepare time, on the task's GPU).
    Const(usize),
}

/// A symbolic pointer: a space and a byte offset into it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ptr {
    /// The space.
    pub space: Space,
    /// Bytes from its start.
    pub offset: usize,
}

impl Ptr {
    /// The start of `space`.
    pub fn at(space: Space) -> Ptr {
        Ptr { space, offset: 0 }
    }
}

/// Which row-wise normalisation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RowKernel {
    /// Softmax.
    Softmax,
    /// RMSNorm (one weight).
    RmsNorm,
    /// LayerNorm (weight and bias).
    LayerNorm,
}

/// One device operation.
// Built once per prepare and read on every eager issue: keeping the `Dims` inline (they are
// kernel arguments by value) costs a few hundred bytes per op and saves a pointer chase.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// `box_copy`: strided copy (s0 in the source, s1 in the destination).
    Copy {
        /// Source.
        src: Ptr,
        /// Destination.
        dst: Ptr,
        /// Element type.
        dtype: DType,
        /// The iteration space.
        dims: Dims,
    },
    /// A contiguous byte copy (a transfer: peer-to-peer, or within one GPU).
    Memcpy {
        /// Source (on the source buffer's GPU).
        src: Ptr,
        /// Destination.
        dst: Ptr,
        /// Bytes.
        bytes: usize,
    },
    /// `out = a ⊕ b`.
    Aggregate {
        /// Left operand.
        a: Ptr,
        /// Right operand.
        b: Ptr,
        /// Result (may equal `a`).
        out: Ptr,
        /// Element type.
        dtype: DType,
        /// The ⊕.
        agg: Aggregation,
        /// Elements.
        n: usize,
    },
    /// Elementwise unary.
    Unary {
        /// Input.
        x: Ptr,
        /// Output.
        y: Ptr,
        /// Element type.
        dtype: DType,
        /// The operation.
        op: UnaryOp,
        /// Elements.
        n: usize,
    },
    /// Elementwise binary with broadcasting (s0: a, s1: b, s2: y).
    Binary {
        /// Left.
        a: Ptr,
        /// Right.
        b: Ptr,
        /// Output.
        y: Ptr,
        /// Element type.
        dtype: DType,
        /// The operation.
        op: BinaryOp,
        /// The output's iteration space.
        dims: Dims,
    },
    /// Softmax / RMSNorm / LayerNorm over the middle axis of `[outer, n, inner]`.
    Rows {
        /// Which.
        kernel: RowKernel,
        /// Input.
        x: Ptr,
        /// Weight (RMSNorm, LayerNorm).
        w: Option<Ptr>,
        /// Bias (LayerNorm).
        b: Option<Ptr>,
        /// Output.
        y: Ptr,
        /// Element type.
        dtype: DType,
        /// Product of the extents before the axis.
        outer: usize,
        /// The axis' extent.
        n: usize,
        /// Product of the extents after it.
        inner: usize,
        /// Epsilon (norms).
        eps: f32,
    },
    /// Rotary embedding (`table`: cos then sin, f32 `[rows, half]`).
    Rope {
        /// Input.
        x: Ptr,
        /// Output.
        y: Ptr,
        /// Element type.
        dtype: DType,
        /// The cos/sin table.
        table: Ptr,
        /// Sequence axis.
        seq: usize,
        /// Feature axis.
        feat: usize,
        /// Half the feature extent.
        half: usize,
        /// Rows of the block along the sequence axis.
        rows: usize,
        /// The block with its feature axis halved (s0: the block's strides).
        dims: Dims,
    },
    /// Sum or max over `over` for every element of `keep`.
    Reduce {
        /// Input.
        x: Ptr,
        /// Output.
        y: Ptr,
        /// Element type.
        dtype: DType,
        /// The reduction.
        op: ReduceOp,
        /// Output space (s0: strides in x, s1: in y).
        keep: Dims,
        /// Reduced space (s0: strides in x).
        over: Dims,
    },
    /// Attention on one block, FlashAttention-2's tiling (see [`crate::kernels::attention`]).
    Attention {
        /// Which kernel (tensor cores or not) and its blocking.
        kernel: AttentionKernel,
        /// Queries `[heads, nq, d]`.
        q: Ptr,
        /// Keys `[kv_heads, nk, d]`.
        k: Ptr,
        /// Values, like keys.
        v: Ptr,
        /// Output, like queries.
        o: Ptr,
        /// Element type.
        dtype: DType,
        /// Visible key range per query row (i32 pairs, absolute).
        bounds: Ptr,
        /// Query heads in the block.
        heads: usize,
        /// Query rows in the block.
        nq: usize,
        /// Key rows in the block.
        nk: usize,
        /// Absolute first query head.
        heads_lo: usize,
        /// Absolute first key/value head.
        kv_lo: usize,
        /// Absolute first key row.
        keys_lo: usize,
        /// Query heads per key/value head.
        group: usize,
        /// The score scale times log2(e) (the kernels work in the log2 domain).
        scale_log2: f32,
        /// The head dimension (selects the compiled module).
        head_dim: usize,
    },
    /// cuBLAS strided-batched GEMM (row-major description, see [`Gemm`]).
    Gemm {
        /// A.
        a: Ptr,
        /// B.
        b: Ptr,
        /// C.
        c: Ptr,
        /// Element type of A, B and C (f32 accumulation).
        dtype: DType,
        /// The GEMM.
        gemm: Gemm,
    },
}

/// A constant table uploaded once per prepared executable.
#[derive(Clone, Debug, PartialEq)]
pub enum ConstData {
    /// f32 values.
    F32(Vec<f32>),
    /// i32 values.
    I32(Vec<i32>),
}

impl ConstData {
    /// The bytes, native-endian.
    pub fn bytes(&self) -> Vec<u8> {
        match self {
            ConstData::F32(v) => v.iter().flat_map(|x| x.to_ne_bytes()).collect(),
            ConstData::I32(v) => v.iter().flat_map(|x| x.to_ne_bytes()).collect(),
        }
    }
}

/// A lowered task graph.
#[derive(Clone, Debug, Default)]
pub struct Lowered {
    /// The operations of every task, in schedule order.
    pub ops: Vec<Vec<Op>>,
    /// Scratch bytes of every task.
    pub scratch: Vec<Vec<usize>>,
    /// Constant tables and the virtual device each belongs to.
    pub consts: Vec<(usize, ConstData)>,
    /// The attention modules used (compiled per GPU at prepare).
    pub attention: Vec<AttentionModule>,
}

/// Row-major strides of `shape`.
pub(crate) fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * shape[d + 1];
    }
    s
}

/// Elements from the start of `outer` to the start of `inner` (a sub-box of it).
fn offset_in(outer: &TensorType, inner: &TensorType) -> usize {
    let s = outer.strides();
    (0..outer.rank()).map(|d| (inner.dim(d).lo - outer.dim(d).lo) * s[d]).sum()
}

/// The copy of the sub-box `part` between two enclosing boxes.
fn box_copy(
    src: Ptr,
    src_ty: &TensorType,
    dst: Ptr,
    dst_ty: &TensorType,
    part: &TensorType,
    dtype: DType,
) -> Result<Op, String> {
    let es = dtype.size_bytes();
    let src = Ptr { offset: src.offset + offset_in(src_ty, part) * es, ..src };
    let dst = Ptr { offset: dst.offset + offset_in(dst_ty, part) * es, ..dst };
    Ok(Op::Copy { src, dst, dtype, dims: Dims::new(&part.shape(), [&src_ty.strides(), &dst_ty.strides(), &[]])? })
}

/// The copy that applies permutation `p` from `src` to `dst`.
pub(crate) fn permute_op(src: Ptr, dst: Ptr, p: &Permute, dtype: DType) -> Result<Op, String> {
    Ok(Op::Copy { src, dst, dtype, dims: Dims::new(&p.dst_shape, [&p.src_strides, &strides(&p.dst_shape), &[]])? })
}

/// Why a task graph could not be lowered.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LowerError {
    /// A kernel task whose operator has no CUDA kernel (no entry in
    /// [`crate::kernels::registry`]).
    #[error("the CUDA backend has no kernel for operator `{operator}` (kind `{kind}`)")]
    Unsupported {
        /// The operator's vertex name.
        operator: String,
        /// Its kind.
        kind: String,
    },
    /// A task that cannot be lowered (a block the kernel cannot handle, a rank over
    /// [`MAX_RANK`], a kernel the library does not describe).
    #[error("task {task}: {reason}")]
    Task {
        /// The task's position in the graph.
        task: usize,
        /// Why.
        reason: String,
    },
}

impl LowerError {
    /// The backend error, naming the task by its label in `graph`.
    pub fn into_backend_error(self, graph: &TaskGraph) -> BackendError {
        match self {
            LowerError::Unsupported { operator, kind } => {
                BackendError::Unsupported { backend: "cuda".into(), operator, kind }
            }
            LowerError::Task { task, reason } => BackendError::Task {
                task: TaskId(task as u32),
                label: graph.nodes().get(task).map_or_else(String::new, |n| n.label.clone()),
                reason,
            },
        }
    }
}

/// Lowers every task of `graph`, whose kernel tasks run `kernels`: each kernel's operator
/// ([`KernelLibrary::info`]) is looked up by type in [`crate::kernels::registry`].
pub fn lower(graph: &TaskGraph, kernels: &dyn KernelLibrary) -> Result<Lowered, LowerError> {
    let mut out = Lowered::default();
    for (t, node) in graph.nodes().iter().enumerate() {
        let task_error = |reason: String| LowerError::Task { task: t, reason };
        let buf = |b: einsum_core::taskgraph::BufferId| graph.buffer(b);
        let at = |b: einsum_core::taskgraph::BufferId| Ptr::at(Space::Buffer(b.0));
        let mut scratch = Vec::new();
        let ops = match &node.task {
            // The destination is resident, filled once by `load` (see `crate::resident`): a run
            // has nothing to do.
            Task::Load { .. } => Vec::new(),
            Task::Store { output, src } => {
                let whole = &graph.outputs()[*output].ty;
                let s = buf(*src);
                vec![
                    box_copy(at(*src), &s.ty, Ptr::at(Space::HostOutput(*output)), whole, &s.ty, s.dtype)
                        .map_err(task_error)?,
                ]
            }
            Task::Slice { src, dst } => {
                let (s, d) = (buf(*src), buf(*dst));
                vec![box_copy(at(*src), &s.ty, at(*dst), &d.ty, &d.ty, d.dtype).map_err(task_error)?]
            }
            Task::Stitch { srcs, dst } => {
                let d = buf(*dst);
                srcs.iter()
                    .map(|s| box_copy(at(*s), &buf(*s).ty, at(*dst), &d.ty, &buf(*s).ty, d.dtype))
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(task_error)?
            }
            Task::Transfer { src, dst } => vec![Op::Memcpy { src: at(*src), dst: at(*dst), bytes: buf(*src).bytes() }],
            Task::Aggregate { srcs, dst, agg } => {
                let d = buf(*dst);
                let n = d.ty.volume();
                let mut ops =
                    vec![Op::Aggregate { a: at(srcs[0]), b: at(srcs[1]), out: at(*dst), dtype: d.dtype, agg: *agg, n }];
                for s in &srcs[2..] {
                    ops.push(Op::Aggregate { a: at(*dst), b: at(*s), out: at(*dst), dtype: d.dtype, agg: *agg, n });
                }
                ops
            }
            Task::Kernel { kernel, inputs, outputs } => {
                let info = kernels.info(*kernel).ok_or_else(|| {
                    task_error(format!(
                        "the kernel library does not describe {}; the CUDA backend needs every kernel's operator",
                        kernels.name(*kernel)
                    ))
                })?;
                let op = info.operator;
                let entry = registry::find(op.value)
                    .ok_or_else(|| LowerError::Unsupported { operator: op.name.into(), kind: op.kind.into() })?;
                let ins: Vec<Ptr> = inputs.iter().map(|b| at(*b)).collect();
                let outs: Vec<Ptr> = outputs.iter().map(|b| at(*b)).collect();
                let device = graph.buffer(outputs[0]).device.0 as usize;
                let mut ctx = KernelCtx { task: t, device, scratch: &mut scratch, lowered: &mut out };
                let args = KernelArgs { inputs: info.inputs, outputs: info.outputs, ins: &ins, outs: &outs };
                entry
                    .lower(op.value, &args, &mut ctx)
                    .map_err(|e| task_error(format!("operator `{}` ({}): {e}", op.name, op.kind)))?
            }
        };
        out.ops.push(ops);
        out.scratch.push(scratch);
    }
    Ok(out)
}

/// What a kernel lowering may add to the lowered graph: scratch areas of its task and
/// constant tables on its device.
pub struct KernelCtx<'a> {
    task: usize,
    device: usize,
    scratch: &'a mut Vec<usize>,
    lowered: &'a mut Lowered,
}

impl KernelCtx<'_> {
    /// A scratch area of `bytes` in the task's GPU pool, live for the task.
    pub fn scratch(&mut self, bytes: usize) -> Ptr {
        self.scratch.push(bytes);
        Ptr::at(Space::Scratch { task: self.task, index: self.scratch.len() - 1 })
    }

    /// A constant table, uploaded once at prepare time on the task's GPU.
    pub fn constant(&mut self, data: ConstData) -> Ptr {
        self.lowered.consts.push((self.device, data));
        Ptr::at(Space::Const(self.lowered.consts.len() - 1))
    }

    /// Records that attention module `m` must be compiled.
    pub fn use_attention(&mut self, m: AttentionModule) {
        if !self.lowered.attention.contains(&m) {
            self.lowered.attention.push(m);
        }
    }
}

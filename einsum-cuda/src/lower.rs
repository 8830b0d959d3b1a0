//! Lowering a task graph to device operations: every task becomes a short list of
//! [`Op`]s (kernel launches, GEMMs, copies) over symbolic pointers, before any GPU is
//! touched. The concrete operator behind a kernel task is recovered by downcasting
//! (`AbstractOperator: Any`); an operator the backend does not know is a typed error here,
//! at prepare time.

use std::any::Any;

use einsum_compile::KernelCall;
use einsum_core::taskgraph::{Task, TaskGraph};
use einsum_core::{Aggregation, DType, TensorDesc, TensorType};
use einsum_joinagg::{AbstractOperator, Computation, Node};
use einsum_ops::attention::Attention;
use einsum_ops::binary::{Binary, BinaryOp};
use einsum_ops::einsum::Einsum;
use einsum_ops::layernorm::LayerNorm;
use einsum_ops::reduce::{Reduce, ReduceOp};
use einsum_ops::rmsnorm::RmsNorm;
use einsum_ops::rope::Rope;
use einsum_ops::softmax::Softmax;
use einsum_ops::unary::{Unary, UnaryOp};

use crate::kernels::gemm_plan::{self, ContractionPlan, Gemm, Permute};

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
    /// FlashAttention-style attention on one block.
    Attention {
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
        /// The score scale.
        scale: f32,
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
    /// Head dimensions of the attention kernels used.
    pub head_dims: Vec<usize>,
}

/// Row-major strides of `shape`.
fn strides(shape: &[usize]) -> Vec<usize> {
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

fn permute_op(src: Ptr, dst: Ptr, p: &Permute, dtype: DType) -> Result<Op, String> {
    Ok(Op::Copy { src, dst, dtype, dims: Dims::new(&p.dst_shape, [&p.src_strides, &strides(&p.dst_shape), &[]])? })
}

/// Lowers every task of `graph`; kernel task `k` runs `comp`'s operator of `calls[k]`.
pub fn lower(graph: &TaskGraph, comp: &Computation, calls: &[KernelCall]) -> Result<Lowered, (usize, String)> {
    let mut out = Lowered::default();
    for (t, node) in graph.nodes().iter().enumerate() {
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
                        .map_err(|e| (t, e))?,
                ]
            }
            Task::Slice { src, dst } => {
                let (s, d) = (buf(*src), buf(*dst));
                vec![box_copy(at(*src), &s.ty, at(*dst), &d.ty, &d.ty, d.dtype).map_err(|e| (t, e))?]
            }
            Task::Stitch { srcs, dst } => {
                let d = buf(*dst);
                srcs.iter()
                    .map(|s| box_copy(at(*s), &buf(*s).ty, at(*dst), &d.ty, &buf(*s).ty, d.dtype))
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| (t, e))?
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
                let call = calls.get(*kernel).ok_or_else(|| (t, format!("no kernel {kernel} in the kernel table")))?;
                let Some(Node::Op { op, name, .. }) = comp.node(call.op) else {
                    return Err((t, format!("vertex {} is not an operator", call.op.0)));
                };
                let ins: Vec<Ptr> = inputs.iter().map(|b| at(*b)).collect();
                let outs: Vec<Ptr> = outputs.iter().map(|b| at(*b)).collect();
                let device = graph.buffer(outputs[0]).device.0 as usize;
                let mut ctx = KernelCtx { task: t, device, scratch: &mut scratch, lowered: &mut out };
                lower_kernel(op.as_ref(), &call.function, &ins, &outs, &mut ctx)
                    .map_err(|e| (t, format!("operator `{name}` ({}): {e}", op.kind())))?
            }
        };
        out.ops.push(ops);
        out.scratch.push(scratch);
    }
    Ok(out)
}

/// What a kernel lowering may add: scratch areas of its task and constant tables.
struct KernelCtx<'a> {
    task: usize,
    device: usize,
    scratch: &'a mut Vec<usize>,
    lowered: &'a mut Lowered,
}

impl KernelCtx<'_> {
    fn scratch(&mut self, bytes: usize) -> Ptr {
        self.scratch.push(bytes);
        Ptr::at(Space::Scratch { task: self.task, index: self.scratch.len() - 1 })
    }

    fn constant(&mut self, data: ConstData) -> Ptr {
        self.lowered.consts.push((self.device, data));
        Ptr::at(Space::Const(self.lowered.consts.len() - 1))
    }
}

/// Position of every dimension of `desc` along the dimensions of `of` (by index name).
fn strides_along(block: &TensorType, desc: &TensorDesc, of: &TensorDesc) -> Vec<usize> {
    let s = block.strides();
    of.dims.iter().map(|d| desc.position(&d.name).map_or(0, |p| s[p])).collect()
}

fn split3(shape: &[usize], axis: usize) -> (usize, usize, usize) {
    (shape[..axis].iter().product(), shape[axis], shape[axis + 1..].iter().product())
}

fn lower_kernel(
    op: &dyn AbstractOperator,
    f: &einsum_joinagg::FunctionSpec,
    ins: &[Ptr],
    outs: &[Ptr],
    ctx: &mut KernelCtx<'_>,
) -> Result<Vec<Op>, String> {
    let any: &dyn Any = op;
    let dtype = op.outputs()[0].dtype;
    if ins.len() != f.inputs.len() || outs.len() != f.outputs.len() {
        return Err("the kernel task's buffers do not match the function spec".into());
    }
    let y = &f.outputs[0];
    if let Some(e) = any.downcast_ref::<Einsum>() {
        let shapes: Vec<Vec<usize>> = f.inputs.iter().map(TensorType::shape).collect();
        let plan = gemm_plan::plan(e.equation(), &shapes, &y.shape()).map_err(|e| e.to_string())?;
        let es = dtype.size_bytes();
        return Ok(match plan {
            ContractionPlan::Sum(s) => {
                let mut ops = Vec::new();
                let src = match &s.permute {
                    Some(p) => {
                        let tmp = ctx.scratch(p.volume() * es);
                        ops.push(permute_op(ins[0], tmp, p, dtype)?);
                        tmp
                    }
                    None => ins[0],
                };
                let keep = Dims::new(&[s.rows], [&[s.row], &[1], &[]])?;
                let over = Dims::new(&[s.row], [&[1], &[], &[]])?;
                ops.push(Op::Reduce { x: src, y: outs[0], dtype, op: ReduceOp::Sum, keep, over });
                ops
            }
            ContractionPlan::Gemm(p) => {
                let mut ops = Vec::new();
                let (a_in, b_in) = (ins[p.a_operand], ins[1 - p.a_operand]);
                let mut staged = |src: Ptr, perm: &Option<Permute>, ops: &mut Vec<Op>| -> Result<Ptr, String> {
                    Ok(match perm {
                        Some(pm) => {
                            let tmp = ctx.scratch(pm.volume() * es);
                            ops.push(permute_op(src, tmp, pm, dtype)?);
                            tmp
                        }
                        None => src,
                    })
                };
                let a = staged(a_in, &p.permute_a, &mut ops)?;
                let b = staged(b_in, &p.permute_b, &mut ops)?;
                match &p.permute_c {
                    Some(pc) => {
                        let c = ctx.scratch(p.gemm.batch * p.gemm.stride_c * es);
                        ops.push(Op::Gemm { a, b, c, dtype, gemm: p.gemm.clone() });
                        ops.push(permute_op(c, outs[0], pc, dtype)?);
                    }
                    None => ops.push(Op::Gemm { a, b, c: outs[0], dtype, gemm: p.gemm.clone() }),
                }
                ops
            }
        });
    }
    if let Some(u) = any.downcast_ref::<Unary>() {
        if f.inputs[0] != *y {
            return Err(format!("input block {} and output block {y} differ", f.inputs[0]));
        }
        return Ok(vec![Op::Unary { x: ins[0], y: outs[0], dtype, op: u.op(), n: y.volume() }]);
    }
    if let Some(b) = any.downcast_ref::<Binary>() {
        let (da, db, dy) = (&op.inputs()[0], &op.inputs()[1], &op.outputs()[0]);
        let sa = strides_along(&f.inputs[0], da, dy);
        let sb = strides_along(&f.inputs[1], db, dy);
        let dims = Dims::new(&y.shape(), [&sa, &sb, &y.strides()])?;
        return Ok(vec![Op::Binary { a: ins[0], b: ins[1], y: outs[0], dtype, op: b.op(), dims }]);
    }
    let rows = |kernel: RowKernel, index: &str, eps: f32| -> Result<Vec<Op>, String> {
        let axis = op.inputs()[0].position(index).ok_or_else(|| format!("no index `{index}`"))?;
        let whole = op.inputs()[0].dims[axis].extent;
        if f.inputs[0] != *y || f.inputs[0].dim(axis).len() != whole {
            return Err(format!("block {} does not hold whole rows of `{index}`", f.inputs[0]));
        }
        let (outer, n, inner) = split3(&y.shape(), axis);
        let (w, b) = (ins.get(1).copied(), ins.get(2).copied());
        Ok(vec![Op::Rows { kernel, x: ins[0], w, b, y: outs[0], dtype, outer, n, inner, eps }])
    };
    if let Some(s) = any.downcast_ref::<Softmax>() {
        return rows(RowKernel::Softmax, s.index(), 0.0);
    }
    if let Some(r) = any.downcast_ref::<RmsNorm>() {
        return rows(RowKernel::RmsNorm, r.index(), r.eps());
    }
    if let Some(l) = any.downcast_ref::<LayerNorm>() {
        return rows(RowKernel::LayerNorm, l.index(), l.eps());
    }
    if let Some(r) = any.downcast_ref::<Rope>() {
        let (seq, feat) = (r.sequence_axis(), r.feature_axis());
        let d = op.inputs()[0].dims[feat].extent;
        if f.inputs[0] != *y || y.dim(feat).len() != d {
            return Err(format!("block {y}: the feature index must be whole"));
        }
        let half = d / 2;
        let rows = y.dim(seq);
        let inv: Vec<f64> = (0..half).map(|i| (r.theta() as f64).powf(-2.0 * i as f64 / d as f64)).collect();
        let (mut cos, mut sin) = (Vec::new(), Vec::new());
        for s in rows.lo..rows.hi {
            let pos = (s - r.packing().start_of(s)) as f64;
            for &w in &inv {
                let (sn, cs) = (pos * w).sin_cos();
                cos.push(cs as f32);
                sin.push(sn as f32);
            }
        }
        cos.extend(sin);
        let table = ctx.constant(ConstData::F32(cos));
        let mut shape = y.shape();
        shape[feat] = half;
        let dims = Dims::new(&shape, [&y.strides(), &[], &[]])?;
        return Ok(vec![Op::Rope { x: ins[0], y: outs[0], dtype, table, seq, feat, half, rows: rows.len(), dims }]);
    }
    if let Some(r) = any.downcast_ref::<Reduce>() {
        let x = &op.inputs()[0];
        let over: Vec<usize> = r.over().iter().filter_map(|n| x.position(n)).collect();
        let keep: Vec<usize> = (0..x.rank()).filter(|d| !over.contains(d)).collect();
        let (bs, shape) = (f.inputs[0].strides(), f.inputs[0].shape());
        let pick = |ds: &[usize], v: &[usize]| -> Vec<usize> { ds.iter().map(|&d| v[d]).collect() };
        let kshape = pick(&keep, &shape);
        let keep_dims = Dims::new(&kshape, [&pick(&keep, &bs), &strides(&kshape), &[]])?;
        let over_dims = Dims::new(&pick(&over, &shape), [&pick(&over, &bs), &[], &[]])?;
        return Ok(vec![Op::Reduce { x: ins[0], y: outs[0], dtype, op: r.op(), keep: keep_dims, over: over_dims }]);
    }
    if let Some(a) = any.downcast_ref::<Attention>() {
        let (qd, kd) = (&op.inputs()[0], &op.inputs()[1]);
        let (qb, kb) = (&f.inputs[0], &f.inputs[1]);
        let head_dim = qd.dims[2].extent;
        if head_dim > 256 {
            return Err(format!("head dimension {head_dim} exceeds the CUDA attention kernel's 256"));
        }
        if qb.dim(2).len() != head_dim || kb.dim(2).len() != head_dim || f.inputs[2] != *kb || *y != *qb {
            return Err(format!("blocks q {qb}, k {kb}, v {}, out {y} are not attention blocks", f.inputs[2]));
        }
        let group = qd.dims[0].extent / kd.dims[0].extent;
        let cfg = a.config();
        let (rows, keys) = (qb.dim(1), kb.dim(1));
        let mut bounds = Vec::with_capacity(2 * rows.len());
        for i in rows.lo..rows.hi {
            let lo = cfg.packing.start_of(i);
            let hi = if cfg.causal { i + 1 } else { cfg.packing.end_of(i) };
            if !rows.is_empty() && (lo < keys.lo || hi > keys.hi) && lo < hi {
                return Err(format!("query row {i} sees keys {lo}..{hi}, the k/v block has rows {keys}"));
            }
            bounds.push(lo as i32);
            bounds.push(hi as i32);
        }
        if qb.is_empty() {
            return Ok(Vec::new());
        }
        let heads = qb.dim(0);
        let need = (heads.lo / group, (heads.hi - 1) / group + 1);
        if need.0 < kb.dim(0).lo || need.1 > kb.dim(0).hi {
            return Err(format!(
                "query heads {heads} need key/value heads {}..{}, the block has {}",
                need.0,
                need.1,
                kb.dim(0)
            ));
        }
        let bounds = ctx.constant(ConstData::I32(bounds));
        if !ctx.lowered.head_dims.contains(&head_dim) {
            ctx.lowered.head_dims.push(head_dim);
        }
        return Ok(vec![Op::Attention {
            q: ins[0],
            k: ins[1],
            v: ins[2],
            o: outs[0],
            dtype,
            bounds,
            heads: heads.len(),
            nq: rows.len(),
            nk: keys.len(),
            heads_lo: heads.lo,
            kv_lo: kb.dim(0).lo,
            keys_lo: keys.lo,
            group,
            scale: a.scale(),
            head_dim,
        }]);
    }
    Err(format!("the CUDA backend has no kernel for operator kind `{}`", op.kind()))
}

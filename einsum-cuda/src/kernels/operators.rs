//! The CUDA lowering of every `einsum-ops` operator the backend runs, one [`CudaKernel`]
//! impl each (registered by type in [`super::registry`]): contractions become cuBLAS GEMMs
//! or reductions ([`super::gemm_plan`]), the others launches of the NVRTC kernels of
//! [`super::sources`].

use einsum_core::{TensorDesc, TensorType};
use einsum_joinagg::{AbstractOperator, FunctionSpec};
use einsum_ops::attention::Attention;
use einsum_ops::binary::Binary;
use einsum_ops::einsum::Einsum;
use einsum_ops::epilogue::Epilogue;
use einsum_ops::fused::{Operand, Step};
use einsum_ops::layernorm::LayerNorm;
use einsum_ops::reduce::{Reduce, ReduceOp};
use einsum_ops::rmsnorm::RmsNorm;
use einsum_ops::rope::Rope;
use einsum_ops::softmax::Softmax;
use einsum_ops::unary::Unary;

use super::attention::{AttentionKernel, MAX_HEAD_DIM};
use super::gemm_plan::{self, ContractionPlan, Permute};
use super::registry::{Call, CudaKernel};
use crate::addressing::{Access, Index};
use crate::lower::{ConstData, Dims, KernelCtx, Ptr, permute_op, strides};
use crate::work::{self, BatchedGemm, Op, RowKernel};

/// Position of every dimension of `desc` along the dimensions of `of` (by index name).
fn strides_along(block: &TensorType, desc: &TensorDesc, of: &TensorDesc) -> Vec<usize> {
    let s = block.strides();
    of.dims.iter().map(|d| desc.position(&d.name).map_or(0, |p| s[p])).collect()
}

fn split3(shape: &[usize], axis: usize) -> (usize, usize, usize) {
    (shape[..axis].iter().product(), shape[axis], shape[axis + 1..].iter().product())
}

impl CudaKernel for Einsum {
    /// A permutation (if needed) and a row sum for a contraction of one operand; otherwise
    /// optional permutations around one cuBLAS strided-batched GEMM.
    fn lower(&self, call: &Call<'_>, ctx: &mut KernelCtx<'_>) -> Result<Vec<Op>, String> {
        let (dtype, ins, outs, y) = (call.dtype, call.ins, call.outs, call.y);
        let shapes: Vec<Vec<usize>> = call.inputs.iter().map(TensorType::shape).collect();
        let plan = gemm_plan::plan(self.equation(), &shapes, &y.shape()).map_err(|e| e.to_string())?;
        let es = dtype.size_bytes();
        Ok(match plan {
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
                let (x, y, op) = (src, outs[0], ReduceOp::Sum);
                ops.push(Op::Reduce(work::Reduce { x, y, dtype, op, keep, over, index: Index::I64, count: 1.0 }));
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
                        ops.push(Op::Gemm(BatchedGemm { a, b, c, dtype, gemm: p.gemm.clone() }));
                        ops.push(permute_op(c, outs[0], pc, dtype)?);
                    }
                    None => ops.push(Op::Gemm(BatchedGemm { a, b, c: outs[0], dtype, gemm: p.gemm.clone() })),
                }
                ops
            }
        })
    }
}

impl CudaKernel for Epilogue {
    /// The einsum's lowering writing the output block, then the stages in place on it: a
    /// unary and the binary reading its result as one `unary_binary` launch, any other stage
    /// as one launch. A part of an additive epilogue's split contraction that does not add
    /// ([`Epilogue::applies_stages`]) is the einsum alone.
    fn lower(&self, call: &Call<'_>, ctx: &mut KernelCtx<'_>) -> Result<Vec<Op>, String> {
        let n = self.einsum().inputs().len();
        let contraction = Call { inputs: &call.inputs[..n], ins: &call.ins[..n], ..*call };
        let mut ops = self.einsum().lower(&contraction, ctx)?;
        let f = FunctionSpec { inputs: call.inputs.to_vec(), outputs: vec![call.y.clone()] };
        if !self.applies_stages(&f) {
            return Ok(ops);
        }
        if let Some(b) = call.inputs[n..].iter().find(|b| *b != call.y) {
            return Err(format!("operand block {b} differs from the output block {}: stages need one box", call.y));
        }
        let (y, dtype, count) = (call.outs[0], call.dtype, call.y.volume());
        let operand = |o: Operand| match o {
            Operand::Input(0) | Operand::Step(_) => y,
            Operand::Input(k) => call.ins[n + k - 1],
        };
        let steps = self.chain().steps();
        let mut i = 0;
        while i < steps.len() {
            match (steps[i], steps.get(i + 1)) {
                (Step::Unary(unary, _), Some(&Step::Binary(binary, a, b))) => {
                    let unary_first = a == Operand::Step(i);
                    let b = operand(if unary_first { b } else { a });
                    ops.push(Op::UnaryBinary(work::UnaryBinary {
                        x: y,
                        b,
                        y,
                        dtype,
                        unary,
                        binary,
                        unary_first,
                        n: count,
                        vector: false,
                    }));
                    i += 2;
                }
                (Step::Unary(op, _), _) => {
                    ops.push(Op::Unary(work::Unary { x: y, y, dtype, op, n: count, vector: false }));
                    i += 1;
                }
                (Step::Binary(op, a, b), _) => {
                    let strides = call.y.strides();
                    let dims = Dims::new(&call.y.shape(), [&strides, &strides, &strides])?;
                    let (a, b) = (operand(a), operand(b));
                    ops.push(Op::Binary(work::Binary { a, b, y, dtype, op, dims, access: Access::GENERAL }));
                    i += 1;
                }
            }
        }
        Ok(ops)
    }
}

impl CudaKernel for Unary {
    /// One `unary` launch over the block.
    fn lower(&self, call: &Call<'_>, _: &mut KernelCtx<'_>) -> Result<Vec<Op>, String> {
        let y = call.y;
        if call.inputs[0] != *y {
            return Err(format!("input block {} and output block {y} differ", call.inputs[0]));
        }
        let (x, dtype, op, n) = (call.ins[0], call.dtype, self.op(), y.volume());
        Ok(vec![Op::Unary(work::Unary { x, y: call.outs[0], dtype, op, n, vector: false })])
    }
}

impl CudaKernel for Binary {
    /// One `binary` launch over the output block, each operand broadcast by index name.
    fn lower(&self, call: &Call<'_>, _: &mut KernelCtx<'_>) -> Result<Vec<Op>, String> {
        let y = call.y;
        let (da, db, dy) = (&self.inputs()[0], &self.inputs()[1], &self.outputs()[0]);
        let sa = strides_along(&call.inputs[0], da, dy);
        let sb = strides_along(&call.inputs[1], db, dy);
        let dims = Dims::new(&y.shape(), [&sa, &sb, &y.strides()])?;
        let (a, b, out, dtype, op) = (call.ins[0], call.ins[1], call.outs[0], call.dtype, self.op());
        Ok(vec![Op::Binary(work::Binary { a, b, y: out, dtype, op, dims, access: Access::GENERAL })])
    }
}

/// One row-kernel launch over whole rows of `index` (input 0's), with the optional weight
/// and bias of inputs 1 and 2. An RMSNorm's output block may be a slice of the rows (an
/// output-only split of `index`: the input block holds whole rows, the weight block and the
/// output block that slice); it launches `rmsnorm_slice` ([`work::Rows::slice`]). Whole
/// output rows lower as before.
fn rows(
    op: &dyn AbstractOperator,
    call: &Call<'_>,
    kernel: RowKernel,
    index: &str,
    eps: f32,
) -> Result<Vec<Op>, String> {
    let (ins, y, xb) = (call.ins, call.y, &call.inputs[0]);
    let axis = op.inputs()[0].position(index).ok_or_else(|| format!("no index `{index}`"))?;
    let whole = op.inputs()[0].dims[axis].extent;
    let others_alike = xb.rank() == y.rank() && (0..y.rank()).all(|d| d == axis || xb.dim(d) == y.dim(d));
    if !others_alike || xb.dim(axis).len() != whole {
        return Err(format!("block {xb} does not hold whole rows of `{index}`"));
    }
    let cols = y.dim(axis);
    let slice = (cols.len() != whole).then_some((cols.lo, cols.hi));
    if slice.is_some() {
        let weight = call.inputs.get(1).map(|w| w.dim(0));
        if kernel != RowKernel::RmsNorm || weight != Some(cols) || cols.hi > whole {
            return Err(format!(
                "output block {y} of `{index}` from input block {xb}: only an RMSNorm whose weight block is the \
                 output's slice writes part of the rows"
            ));
        }
    }
    let (outer, n, inner) = split3(&xb.shape(), axis);
    let (w, b) = (ins.get(1).copied(), ins.get(2).copied());
    let (x, y, dtype) = (ins[0], call.outs[0], call.dtype);
    Ok(vec![Op::Rows(work::Rows { kernel, x, w, b, y, dtype, outer, n, inner, eps, slice })])
}

impl CudaKernel for Softmax {
    /// One `softmax` launch over whole rows.
    fn lower(&self, call: &Call<'_>, _: &mut KernelCtx<'_>) -> Result<Vec<Op>, String> {
        rows(self, call, RowKernel::Softmax, self.index(), 0.0)
    }
}

impl CudaKernel for RmsNorm {
    /// One `rmsnorm` launch over whole rows, or one `rmsnorm_slice` writing the output
    /// block's slice of them (see [`rows`]).
    fn lower(&self, call: &Call<'_>, _: &mut KernelCtx<'_>) -> Result<Vec<Op>, String> {
        rows(self, call, RowKernel::RmsNorm, self.index(), self.eps())
    }
}

impl CudaKernel for LayerNorm {
    /// One `layernorm` launch over whole rows.
    fn lower(&self, call: &Call<'_>, _: &mut KernelCtx<'_>) -> Result<Vec<Op>, String> {
        rows(self, call, RowKernel::LayerNorm, self.index(), self.eps())
    }
}

impl CudaKernel for Rope {
    /// One `rope` launch, with the block's cos/sin table (positions within each packed
    /// sequence, the op's frequencies and attention factor: [`Rope::cos_sin_table`]) as a
    /// constant.
    fn lower(&self, call: &Call<'_>, ctx: &mut KernelCtx<'_>) -> Result<Vec<Op>, String> {
        let y = call.y;
        let (seq, feat) = (self.sequence_axis(), self.feature_axis());
        let d = self.inputs()[0].dims[feat].extent;
        if call.inputs[0] != *y || y.dim(feat).len() != d {
            return Err(format!("block {y}: the feature index must be whole"));
        }
        let half = d / 2;
        let rows = y.dim(seq);
        let (mut cos, sin) = self.cos_sin_table(rows);
        cos.extend(sin);
        let table = ctx.constant(ConstData::F32(cos));
        let mut shape = y.shape();
        shape[feat] = half;
        let dims = Dims::new(&shape, [&y.strides(), &[], &[]])?;
        let (x, y, dtype) = (call.ins[0], call.outs[0], call.dtype);
        Ok(vec![Op::Rope(work::Rope { x, y, dtype, table, seq, feat, half, rows: rows.len(), dims })])
    }
}

impl CudaKernel for Reduce {
    /// One `reduce` launch: the kept indices iterate the output, the others are reduced (a
    /// mean divides by the whole tensor's count, whatever the block).
    fn lower(&self, call: &Call<'_>, _: &mut KernelCtx<'_>) -> Result<Vec<Op>, String> {
        let x = &self.inputs()[0];
        let over: Vec<usize> = self.over().iter().filter_map(|n| x.position(n)).collect();
        let keep: Vec<usize> = (0..x.rank()).filter(|d| !over.contains(d)).collect();
        let (bs, shape) = (call.inputs[0].strides(), call.inputs[0].shape());
        let pick = |ds: &[usize], v: &[usize]| -> Vec<usize> { ds.iter().map(|&d| v[d]).collect() };
        let kshape = pick(&keep, &shape);
        let keep_dims = Dims::new(&kshape, [&pick(&keep, &bs), &strides(&kshape), &[]])?;
        let over_dims = Dims::new(&pick(&over, &shape), [&pick(&over, &bs), &[], &[]])?;
        let (x, y, dtype) = (call.ins[0], call.outs[0], call.dtype);
        let (op, index, count) = (self.op(), Index::I64, self.count() as f64);
        Ok(vec![Op::Reduce(work::Reduce { x, y, dtype, op, keep: keep_dims, over: over_dims, index, count })])
    }
}

impl CudaKernel for Attention {
    /// One attention launch per block (tensor cores where they apply, see
    /// [`AttentionKernel::choose`]; compiled per head dimension, at most
    /// [`MAX_HEAD_DIM`]), with each query row's visible key range as a constant table.
    fn lower(&self, call: &Call<'_>, ctx: &mut KernelCtx<'_>) -> Result<Vec<Op>, String> {
        let (ins, y) = (call.ins, call.y);
        let (qd, kd) = (&self.inputs()[0], &self.inputs()[1]);
        let (qb, kb) = (&call.inputs[0], &call.inputs[1]);
        let head_dim = qd.dims[2].extent;
        if head_dim > MAX_HEAD_DIM {
            return Err(format!("head dimension {head_dim} exceeds the CUDA attention kernels' {MAX_HEAD_DIM}"));
        }
        if qb.dim(2).len() != head_dim || kb.dim(2).len() != head_dim || call.inputs[2] != *kb || *y != *qb {
            return Err(format!("blocks q {qb}, k {kb}, v {}, out {y} are not attention blocks", call.inputs[2]));
        }
        let group = qd.dims[0].extent / kd.dims[0].extent;
        let cfg = self.config();
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
        let offsets = [ins[0].offset, ins[1].offset, ins[2].offset, call.outs[0].offset];
        let kernel = AttentionKernel::choose(call.dtype, head_dim, offsets, group, heads.lo, heads.len());
        ctx.use_attention(kernel.module(head_dim));
        Ok(vec![Op::Attention(work::Attention {
            kernel,
            q: ins[0],
            k: ins[1],
            v: ins[2],
            o: call.outs[0],
            dtype: call.dtype,
            bounds,
            heads: heads.len(),
            nq: rows.len(),
            nk: keys.len(),
            heads_lo: heads.lo,
            kv_lo: kb.dim(0).lo,
            keys_lo: keys.lo,
            group,
            scale_log2: self.scale() * std::f32::consts::LOG2_E,
            head_dim,
        })])
    }
}

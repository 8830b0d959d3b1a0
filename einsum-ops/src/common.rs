//! Helpers every operator file shares: checking a kernel call's blocks, and the layout of
//! operators that work along one row index (softmax, the norms, RoPE).

use einsum_core::{HostTensor, Interval, TensorDesc, TensorType};
use einsum_joinagg::{AbstractOperator, Error, FunctionSpec, Result, ShardableIndex};

/// An [`Error::Kernel`] of operator `op`.
pub(crate) fn kernel_error(op: &str, reason: impl Into<String>) -> Error {
    Error::Kernel { op: op.to_string(), reason: reason.into() }
}

/// The checks every kernel call shares: `f` has one block per operator input and output,
/// each a projection of its whole tensor, and `inputs` holds one tensor per input block,
/// of exactly that block's type.
pub(crate) fn check_call(op: &dyn AbstractOperator, f: &FunctionSpec, inputs: &[HostTensor]) -> Result<()> {
    let kind = op.kind();
    let (ins, outs) = (op.inputs(), op.outputs());
    if f.inputs.len() != ins.len() || f.outputs.len() != outs.len() {
        return Err(kernel_error(
            kind,
            format!(
                "function spec has {} input and {} output blocks, the operator {} and {}",
                f.inputs.len(),
                f.outputs.len(),
                ins.len(),
                outs.len()
            ),
        ));
    }
    if inputs.len() != ins.len() {
        return Err(kernel_error(
            kind,
            format!("{} input tensors given, the operator takes {}", inputs.len(), ins.len()),
        ));
    }
    let blocks =
        f.inputs.iter().zip(ins).map(|b| ("input", b)).chain(f.outputs.iter().zip(outs).map(|b| ("output", b)));
    for (role, (block, desc)) in blocks {
        let whole = desc.tensor_type();
        if !block.is_projection_of(&whole) {
            return Err(kernel_error(kind, format!("{role} block {block} is not a projection of {whole}")));
        }
    }
    for (k, (t, block)) in inputs.iter().zip(&f.inputs).enumerate() {
        if t.ty() != block {
            return Err(kernel_error(kind, format!("input {k} has type {}, its block is {block}", t.ty())));
        }
    }
    Ok(())
}

/// The position of the row index `name` in `x`: an [`Error::Shape`] of operator `op`
/// naming the index when `x` lacks it or it is empty.
pub(crate) fn row_axis(op: &str, x: &TensorDesc, name: &str) -> Result<usize> {
    let shape_error = |reason: String| Error::Shape { op: op.to_string(), index: name.to_string(), reason };
    let axis = x.position(name).ok_or_else(|| shape_error(format!("not an index of x [{}]", x.dims_string())))?;
    if x.dims[axis].extent == 0 {
        return Err(shape_error("the normalised index is empty".into()));
    }
    Ok(axis)
}

/// Calls `f` with every index of `shape` whose coordinate along `fiber` is 0, in row-major
/// order: one call per fiber along that dimension (a RoPE's feature pairs, say). Nothing
/// when the shape is empty.
pub(crate) fn for_each_fiber(shape: &[usize], fiber: usize, mut f: impl FnMut(&[usize])) {
    if shape.contains(&0) {
        return;
    }
    let mut idx = vec![0usize; shape.len()];
    loop {
        f(&idx);
        let mut dim = shape.len();
        loop {
            if dim == 0 {
                return;
            }
            dim -= 1;
            if dim == fiber {
                continue;
            }
            idx[dim] += 1;
            if idx[dim] < shape[dim] {
                break;
            }
            idx[dim] = 0;
        }
    }
}

/// Every index of `x`, shardable anywhere under its own name (an elementwise operator's, say).
pub(crate) fn every_index(x: &TensorDesc) -> Vec<ShardableIndex> {
    x.dims.iter().map(|d| ShardableIndex::any(d.name.clone(), d.extent)).collect()
}

/// Every index of `x` but the row index, shardable anywhere under its own name.
pub(crate) fn row_shardable(x: &TensorDesc, axis: usize) -> Vec<ShardableIndex> {
    x.dims
        .iter()
        .enumerate()
        .filter(|&(d, _)| d != axis)
        .map(|(_, d)| ShardableIndex::any(d.name.clone(), d.extent))
        .collect()
}

/// For a tensor with `x`'s indices: the shardable index each dimension follows (see
/// [`row_shardable`]), `None` for the row index.
pub(crate) fn row_dims(rank: usize, axis: usize) -> Vec<Option<usize>> {
    (0..rank).map(|d| (d != axis).then(|| if d < axis { d } else { d - 1 })).collect()
}

/// Checks a row-wise call: the input and output blocks of `x` and `y` agree, and hold
/// whole rows (`[0, n)` along `axis`).
pub(crate) fn check_rows(op: &str, x: &TensorType, y: &TensorType, axis: usize, n: usize) -> Result<()> {
    if x != y {
        return Err(kernel_error(op, format!("input block {x} and output block {y} differ")));
    }
    if x.dim(axis) != Interval::full(n) {
        return Err(kernel_error(
            op,
            format!("block {x} does not hold whole rows: dimension {axis} must be 0..{n}, the index is not shardable"),
        ));
    }
    Ok(())
}

/// Checks a call whose output is a slice of whole rows (a norm or rotation split along its
/// row index on the output only): the input block `x` holds whole rows (`[0, n)` along
/// `axis`), and the output block `y` agrees with it on every other dimension. Returns the
/// output's slice of the row index, which the caller writes alone.
pub(crate) fn check_row_slice(op: &str, x: &TensorType, y: &TensorType, axis: usize, n: usize) -> Result<Interval> {
    let rank = x.rank();
    if y.rank() != rank || (0..rank).any(|d| d != axis && x.dim(d) != y.dim(d)) {
        return Err(kernel_error(op, format!("input block {x} and output block {y} differ beyond dimension {axis}")));
    }
    if x.dim(axis) != Interval::full(n) {
        return Err(kernel_error(
            op,
            format!(
                "input block {x} does not hold whole rows: dimension {axis} must be 0..{n}, only the output is split \
                 along it"
            ),
        ));
    }
    let slice = y.dim(axis);
    if !slice.is_within(&Interval::full(n)) {
        return Err(kernel_error(op, format!("output block {y} leaves the rows 0..{n} along dimension {axis}")));
    }
    Ok(slice)
}

/// `(outer, n, inner)`: the products of the extents before `axis`, at it, and after it.
pub(crate) fn split_rows(shape: &[usize], axis: usize) -> (usize, usize, usize) {
    (shape[..axis].iter().product(), shape[axis], shape[axis + 1..].iter().product())
}

/// Checks a per-row parameter (weight, bias) of a norm over `x`'s dimension `axis`: the
/// one index of that name and extent (bound by name, as everywhere), `x`'s dtype. Errors name operator `op` and the index.
pub(crate) fn check_param(op: &str, x: &TensorDesc, axis: usize, param: &TensorDesc, what: &str) -> Result<()> {
    let dim = &x.dims[axis];
    if param.rank() != 1 || param.dims[0].extent != dim.extent || param.dims[0].name != dim.name {
        return Err(Error::Shape {
            op: op.to_string(),
            index: dim.name.clone(),
            reason: format!(
                "the {what} must be the one index `{}` of extent {} (that of x [{}]), got [{}]",
                dim.name,
                dim.extent,
                x.dims_string(),
                param.dims_string()
            ),
        });
    }
    if param.dtype != x.dtype {
        return Err(Error::Invalid {
            op: op.to_string(),
            reason: format!("the {what} has dtype {}, x has {}", param.dtype, x.dtype),
        });
    }
    Ok(())
}

/// Checks that `eps` is finite and non-negative.
pub(crate) fn check_eps(op: &str, eps: f32) -> Result<()> {
    if eps.is_finite() && eps >= 0.0 {
        Ok(())
    } else {
        Err(Error::Invalid { op: op.to_string(), reason: format!("eps must be finite and non-negative, got {eps}") })
    }
}

/// Checks that input `k` of `f` is the whole parameter `param`.
pub(crate) fn check_whole_param(op: &str, f: &FunctionSpec, k: usize, param: &TensorDesc) -> Result<()> {
    let whole = param.tensor_type();
    if f.inputs[k] != whole {
        return Err(kernel_error(op, format!("input {k} block {} is not the whole parameter {whole}", f.inputs[k])));
    }
    Ok(())
}

/// The elements of `t` as f32: borrowed when it is stored in f32 (no copy), converted when
/// it is f16 or bf16.
pub(crate) fn f32s(t: &HostTensor) -> std::borrow::Cow<'_, [f32]> {
    match t.as_f32() {
        Some(data) => std::borrow::Cow::Borrowed(data),
        None => std::borrow::Cow::Owned(t.to_f32()),
    }
}

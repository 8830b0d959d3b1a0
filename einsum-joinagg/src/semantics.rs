//! The reference semantics of a join-agg spec (Definition 3.7): join, aggregate, recompose.

use einsum_core::{HostTensor, TensorType, scaled_error};

use crate::{AbstractOperator, Error, FunctionSpec, JoinAggSpec, Result, validate_spec};

/// The trivial spec: one function spec over the whole inputs and outputs.
pub fn whole_spec(op: &dyn AbstractOperator) -> FunctionSpec {
    FunctionSpec {
        inputs: op.inputs().iter().map(|d| d.tensor_type()).collect(),
        outputs: op.outputs().iter().map(|d| d.tensor_type()).collect(),
    }
}

/// Runs the operator's kernel once on whole tensors: the single-device reference.
pub fn execute_whole(op: &dyn AbstractOperator, inputs: &[HostTensor]) -> Result<Vec<HostTensor>> {
    check_inputs(op, inputs)?;
    let f = whole_spec(op);
    let outs = op.compute(&f, inputs)?;
    check_outputs(op, &f.outputs, &outs)?;
    Ok(outs)
}

/// The type of the partial block each function spec of `spec` leaves for each output:
/// the output box, one column wider along its last index where the operator's aggregation
/// is row-wise ([`Aggregation::Softmax`](einsum_core::Aggregation::Softmax)) and the box is
/// shared by more than one function spec ([`Aggregation::partial_type`]). `[i][j]` is
/// function spec `i`'s output `j`.
///
/// [`Aggregation::partial_type`]: einsum_core::Aggregation::partial_type
pub fn partial_types(op: &dyn AbstractOperator, spec: &JoinAggSpec) -> Vec<Vec<TensorType>> {
    let agg = op.aggregation();
    let shared: Vec<Vec<(TensorType, usize)>> =
        (0..op.outputs().len()).map(|j| spec.output_multiplicities(j)).collect();
    spec.functions
        .iter()
        .map(|f| {
            f.outputs
                .iter()
                .enumerate()
                .map(|(j, b)| {
                    let m = shared.get(j).and_then(|s| s.iter().find(|(x, _)| x == b)).map_or(1, |(_, m)| *m);
                    agg.partial_type(b, m > 1)
                })
                .collect()
        })
        .collect()
}

/// Executes `spec` by Definition 3.7: (1) for each function spec, project every input onto
/// its block and run the kernel; (2) combine with ⊕ the outputs that share a box;
/// (3) stitch the aggregated boxes into each whole output. Under a row-wise aggregation a
/// shared box's partials are one column wider ([`partial_types`]); the column is dropped
/// after (2).
pub fn execute_spec(op: &dyn AbstractOperator, spec: &JoinAggSpec, inputs: &[HostTensor]) -> Result<Vec<HostTensor>> {
    check_inputs(op, inputs)?;
    validate_spec(op, spec, None)?;
    let agg = op.aggregation();
    let types = partial_types(op, spec);
    let mut partials: Vec<Vec<(TensorType, HostTensor)>> = vec![Vec::new(); op.outputs().len()];
    for (f, want) in spec.functions.iter().zip(&types) {
        // (1) Join.
        let blocks = f.inputs.iter().zip(inputs).map(|(b, t)| t.slice(b)).collect::<Result<Vec<_>, _>>()?;
        let outs = op.compute(f, &blocks)?;
        check_outputs(op, want, &outs)?;
        // (2) Aggregate.
        for (j, (out, want)) in outs.into_iter().zip(&f.outputs).enumerate() {
            match partials[j].iter_mut().find(|(b, _)| b == want) {
                Some((_, acc)) => *acc = acc.aggregate(&out, agg)?,
                None => partials[j].push((want.clone(), out)),
            }
        }
    }
    // (3) Recompose.
    op.outputs()
        .iter()
        .zip(partials)
        .map(|(desc, parts)| {
            // A statistics column, where there is one, is dropped.
            let parts = parts
                .into_iter()
                .map(|(b, t)| if *t.ty() == b { Ok(t) } else { t.slice(&b) })
                .collect::<Result<Vec<HostTensor>, _>>()?;
            Ok(HostTensor::stitch(&desc.tensor_type(), &parts)?)
        })
        .collect()
}

fn check_inputs(op: &dyn AbstractOperator, inputs: &[HostTensor]) -> Result<()> {
    if inputs.len() != op.inputs().len() {
        return Err(kernel_error(
            op,
            format!("{} inputs given, the operator takes {}", inputs.len(), op.inputs().len()),
        ));
    }
    for (k, (t, desc)) in inputs.iter().zip(op.inputs()).enumerate() {
        if *t.ty() != desc.tensor_type() || t.dtype() != desc.dtype {
            return Err(Error::InputMismatch {
                op: op.kind().to_string(),
                input: k,
                expected: format!("{} {}", desc.tensor_type(), desc.dtype),
                got: format!("{} {}", t.ty(), t.dtype()),
            });
        }
    }
    Ok(())
}

/// Checks that a kernel returned one block per output of the function spec, each of the
/// type `want` says (the output box, or its widened partial) and its output's dtype.
fn check_outputs(op: &dyn AbstractOperator, want: &[TensorType], outs: &[HostTensor]) -> Result<()> {
    if outs.len() != want.len() {
        return Err(kernel_error(op, format!("returned {} outputs for {} output blocks", outs.len(), want.len())));
    }
    for (j, ((out, want), desc)) in outs.iter().zip(want).zip(op.outputs()).enumerate() {
        if out.ty() != want || out.dtype() != desc.dtype {
            return Err(kernel_error(
                op,
                format!("output {j} is {} {}, the function spec says {want} {}", out.ty(), out.dtype(), desc.dtype),
            ));
        }
    }
    Ok(())
}

fn kernel_error(op: &dyn AbstractOperator, reason: String) -> Error {
    Error::Kernel { op: op.kind().to_string(), reason }
}

/// Runs `spec` and the whole-tensor kernel on the same seeded random inputs (uniform in
/// `[-1, 1)`) and returns the largest error over the outputs, `max|split - whole|` divided by
/// `max(max|whole|, 1)`: relative for outputs at or above the scale of the data, absolute
/// below it, so an output that cancels to near zero is not judged on its own tiny scale.
pub fn decomposition_error(op: &dyn AbstractOperator, spec: &JoinAggSpec, seed: u64) -> Result<f32> {
    let (whole, split) = whole_and_split(op, spec, seed)?;
    Ok(whole.iter().zip(&split).map(|(w, s)| scaled_error(s, w, 1.0)).fold(0.0, f32::max))
}

/// The outputs of the whole-tensor kernel and of `spec`, in that order, on the same seeded
/// random inputs (input `k` uniform in `[-1, 1)` from seed `seed + k`, or indices below its
/// [`AbstractOperator::index_bound`]), for a caller that compares them its own way.
pub fn whole_and_split(
    op: &dyn AbstractOperator,
    spec: &JoinAggSpec,
    seed: u64,
) -> Result<(Vec<HostTensor>, Vec<HostTensor>)> {
    let inputs: Vec<HostTensor> = op
        .inputs()
        .iter()
        .enumerate()
        .map(|(k, d)| {
            let seed = seed.wrapping_add(k as u64);
            match op.index_bound(k) {
                Some(bound) => HostTensor::random_indices(d.tensor_type(), bound, seed),
                None => HostTensor::random(d.tensor_type(), d.dtype, seed),
            }
        })
        .collect();
    Ok((execute_whole(op, &inputs)?, execute_spec(op, spec, &inputs)?))
}

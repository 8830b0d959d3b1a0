//! Validation of join-agg specs against Definition 3.6.

use einsum_core::check_tiling;

use crate::{AbstractOperator, Error, JoinAggSpec, Result};

/// Checks that `spec` is a join-agg spec for `op`: (with `p` given) exactly `p` function
/// specs; each names one projection of every input and output; and for each output, the
/// distinct output boxes tile it. The error names the function spec and tensor at fault.
pub fn validate_spec(op: &dyn AbstractOperator, spec: &JoinAggSpec, p: Option<usize>) -> Result<()> {
    let invalid = |reason: String| Err(Error::InvalidSpec { op: op.kind().to_string(), reason });
    if let Some(p) = p
        && spec.len() != p
    {
        return invalid(format!("{} function specs, expected exactly p = {p}", spec.len()));
    }
    if spec.is_empty() {
        return invalid("no function spec".into());
    }
    let (ins, outs) = (op.inputs(), op.outputs());
    let wholes: Vec<_> = ins.iter().chain(outs).map(|d| d.tensor_type()).collect();
    for (n, f) in spec.functions.iter().enumerate() {
        if f.inputs.len() != ins.len() || f.outputs.len() != outs.len() {
            return invalid(format!(
                "function spec {n} has {} inputs and {} outputs, the operator {} and {}",
                f.inputs.len(),
                f.outputs.len(),
                ins.len(),
                outs.len()
            ));
        }
        let roles = std::iter::repeat_n("input", ins.len()).chain(std::iter::repeat_n("output", outs.len()));
        for (k, ((role, block), whole)) in roles.zip(f.inputs.iter().chain(&f.outputs)).zip(&wholes).enumerate() {
            if !block.is_projection_of(whole) || block.is_empty() {
                let k = if role == "input" { k } else { k - ins.len() };
                return invalid(format!(
                    "function spec {n}: {role} {k} block {block} is not a non-empty projection of {whole}"
                ));
            }
        }
    }
    for (j, desc) in outs.iter().enumerate() {
        check_tiling(&desc.tensor_type(), &spec.output_blocks(j))
            .map_err(|e| Error::InvalidSpec { op: op.kind().to_string(), reason: format!("output {j}: {e}") })?;
    }
    Ok(())
}

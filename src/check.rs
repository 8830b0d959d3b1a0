//! Checking decompositions against the single-device reference: for every operator of a
//! computation, run its join-agg specs on `p` devices by Definition 3.7 and compare with the
//! whole-tensor kernel on seeded random data; then run the whole graph with one random spec
//! per operator.

use std::collections::HashMap;

use einsum_core::{DType, SplitMix64, relative_error};
use einsum_joinagg::{Computation, OpId, decomposition_error, enumerate_specs};

use crate::Result;

/// The relative error a decomposed run may show against the reference, for a dtype.
pub fn tolerance(dtype: DType) -> f32 {
    match dtype {
        DType::F32 => 1e-5,
        DType::F16 => 1e-2,
        DType::BF16 => 6e-2,
    }
}

/// How one operator fared.
#[derive(Clone, Debug)]
pub struct OpCheck {
    /// The operator's node name.
    pub name: String,
    /// Its kind.
    pub kind: String,
    /// How many specs it offers on `p` devices.
    pub specs: usize,
    /// How many of them were run.
    pub checked: usize,
    /// The largest relative error among those run.
    pub max_error: f32,
}

/// The result of [`check_computation`].
#[derive(Clone, Debug)]
pub struct CheckReport {
    /// One entry per operator, in topological order.
    pub ops: Vec<OpCheck>,
    /// Relative error of the saved outputs when every operator runs a random spec.
    pub graph_error: f32,
    /// The tolerance the errors are held to.
    pub tolerance: f32,
}

impl CheckReport {
    /// True when every error is within the tolerance.
    pub fn passed(&self) -> bool {
        self.graph_error <= self.tolerance && self.ops.iter().all(|o| o.max_error <= self.tolerance)
    }
}

/// Checks every operator's specs on `p` devices (at most `max_specs` per operator, spread
/// evenly over its enumeration) and the whole graph under one seeded random choice of spec
/// per operator. Fails when an operator has no spec for `p`.
pub fn check_computation(comp: &Computation, p: usize, max_specs: usize, seed: u64) -> Result<CheckReport> {
    let mut rng = SplitMix64::new(seed);
    let mut ops = Vec::new();
    let mut chosen = HashMap::<OpId, _>::new();
    let mut dtype = DType::F32;
    for (id, op, _) in comp.ops() {
        let specs = enumerate_specs(op, p)?;
        let step = specs.len().div_ceil(max_specs.max(1));
        let mut max_error = 0.0f32;
        let mut checked = 0;
        for choice in specs.iter().step_by(step) {
            max_error = max_error.max(decomposition_error(op, &choice.spec, rng.next_u64())?);
            checked += 1;
        }
        for d in op.outputs() {
            if tolerance(d.dtype) > tolerance(dtype) {
                dtype = d.dtype;
            }
        }
        let name = comp.node(id).map_or_else(String::new, |n| n.name().to_string());
        ops.push(OpCheck { name, kind: op.kind().to_string(), specs: specs.len(), checked, max_error });
        chosen.insert(id, specs[rng.below(specs.len())].spec.clone());
    }
    let inputs = comp.random_inputs(rng.next_u64());
    let reference = comp.evaluate(&inputs)?;
    let decomposed = comp.evaluate_with_specs(&inputs, &chosen)?;
    let graph_error = reference.iter().map(|(t, r)| relative_error(&decomposed[t], r)).fold(0.0, f32::max);
    Ok(CheckReport { ops, graph_error, tolerance: tolerance(dtype) })
}

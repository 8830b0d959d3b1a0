//! Checking decompositions against the single-device reference: for every operator of a
//! computation, run its join-agg specs on `p` devices by Definition 3.7 and compare with the
//! whole-tensor kernel on seeded random data; then run the whole graph with one random spec
//! per operator.

use std::collections::HashMap;

use einsum_core::{DType, SeededRng, scaled_error};
use einsum_joinagg::{Computation, OpId, decomposition_error, enumerate_specs};

use crate::{Error, Result};

/// The most elements `check` materialises (over every tensor of the computation): about
/// 2 GiB of f32. Larger workloads are refused with a message, not run for hours.
pub const MAX_CHECK_ELEMENTS: usize = 1 << 29;

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
    /// The largest error among those run (`max|split - whole| / max(max|whole|, 1)`).
    pub max_error: f32,
}

/// The result of [`check_computation`].
#[derive(Clone, Debug)]
pub struct CheckReport {
    /// One entry per operator, in topological order.
    pub ops: Vec<OpCheck>,
    /// Error of the saved outputs when every operator runs a random spec (same measure).
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
/// per operator. Fails when an operator has no spec for `p`, or when `max_specs` is 0.
pub fn check_computation(comp: &Computation, p: usize, max_specs: usize, seed: u64) -> Result<CheckReport> {
    if max_specs == 0 {
        return Err(Error::Usage("--max-specs must be at least 1 (the specs run per operator)".into()));
    }
    let elements: usize = comp
        .topo_order()
        .into_iter()
        .filter_map(|id| comp.node(id))
        .flat_map(|n| n.outputs().iter().map(|d| d.shape().iter().product::<usize>()))
        .fold(0, usize::saturating_add);
    if elements > MAX_CHECK_ELEMENTS {
        return Err(Error::Usage(format!(
            "the computation holds {elements} elements, more than check runs ({MAX_CHECK_ELEMENTS}); give smaller dimensions, e.g. llama-block:tokens=64,d_model=64,heads_q=8,heads_kv=4,d_head=16,d_ff=128"
        )));
    }
    let mut rng = SeededRng::new(seed);
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
    let graph_error = reference.iter().map(|(t, r)| scaled_error(&decomposed[t], r, 1.0)).fold(0.0, f32::max);
    Ok(CheckReport { ops, graph_error, tolerance: tolerance(dtype) })
}

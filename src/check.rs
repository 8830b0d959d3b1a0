//! Checking decompositions against the single-device reference: for every operator of a
//! computation, run its join-agg specs on `p` devices by Definition 3.7 and compare with the
//! whole-tensor kernel on seeded random data; then run the whole graph with one random spec
//! per operator.

use std::collections::HashMap;

use einsum_core::{DType, HostTensor, SeededRng};
use einsum_joinagg::{AbstractOperator, Computation, JoinAggSpec, OpId, TensorId, enumerate_specs, whole_and_split};

use crate::{Error, Executable, Result};

/// The most elements `check` materialises (over every tensor of the computation): about
/// 2 GiB of f32. Larger workloads are refused with a message, not run for hours.
pub const MAX_CHECK_ELEMENTS: usize = 1 << 29;

/// The error one decomposed operator may show against the reference, for a dtype: the
/// tolerance of `check`'s per-operator runs, and the base of [`computation_tolerance`]
/// (the table of both is in the README).
///
/// The error is scaled by the reference's magnitude (see [`tensor_error`]). A decomposed
/// operator differs from the reference only by the order of its sums and by where its
/// partial results are rounded to the storage dtype, so the tolerance is a small multiple of
/// the dtype's rounding unit (`2^-24`, `2^-11`, `2^-8`): f32 `1e-5`, f16 `1e-2`, bf16
/// `6e-2`. Measured, operators of the LLaMA block stay within `8.4e-3` in bf16 at p = 8;
/// leaving out one of 8 partial sums of a matmul changes its output by `0.36`. Indices
/// (i32: token ids, argmax results) must be equal.
pub fn tolerance(dtype: DType) -> f32 {
    match dtype {
        DType::F32 => 1e-5,
        DType::F16 => 1e-2,
        DType::BF16 => 6e-2,
        DType::I32 => 0.0,
    }
}

/// The error a whole decomposed computation may show against the reference: the
/// [`tolerance`] of its least precise dtype times the square root of its [`depth`] — the
/// one tolerance of `check`'s whole-graph run and of `run --check` (an operator alone has
/// depth 1, so this is `check`'s per-operator tolerance too).
///
/// # Why the square root of the depth
/// Every operator on a path rounds its partial results anew, and the roundings of one
/// operator perturb the inputs of the next, so the errors of honest runs add up along the
/// longest chain like a random walk. Measured in bf16 on `llama:layers=L` stacks under the
/// `random` strategy at p = 8 (4 seeds each), the largest error grows from `2.1e-2` at
/// L = 1 to `1.2e-1` at L = 4 and `2.2e-1` at L = 16, while each operator alone stays within
/// `8.4e-3`: a depth-blind bf16 tolerance of `6e-2` fails honest runs of 4 layers and more.
pub fn computation_tolerance(comp: &Computation) -> f32 {
    operator_tolerance(comp) * (depth(comp).max(1) as f32).sqrt()
}

/// The [`tolerance`] of the least precise dtype among the operators' outputs (f32 when
/// there is no operator): what each operator alone is held to.
pub fn operator_tolerance(comp: &Computation) -> f32 {
    comp.ops()
        .flat_map(|(_, op, _)| op.outputs().iter().map(|d| tolerance(d.dtype)))
        .fold(tolerance(DType::F32), f32::max)
}

/// The number of operators on the longest chain from a computation input to a saved
/// output (0 when no operator lies on one).
pub fn depth(comp: &Computation) -> usize {
    // Operators come in insertion order, which is topological: inputs exist before use.
    let mut at = HashMap::<OpId, usize>::new();
    for (id, _, inputs) in comp.ops() {
        let longest = inputs.iter().map(|t| at.get(&t.op).copied().unwrap_or(0)).max().unwrap_or(0);
        at.insert(id, longest + 1);
    }
    comp.saved().iter().map(|t| at.get(&t.op).copied().unwrap_or(0)).max().unwrap_or(0)
}

/// The error of `got` against the reference `want`: `max|got - want|` over the elements,
/// divided by `max(max|want|, 1)` (the largest finite magnitude of the reference, so that
/// small outputs are compared absolutely).
///
/// Non-finite elements agree where both sides hold one: NaN with NaN (the kernels propagate
/// NaN as NumPy does, so a NaN of the reference is expected of the run), an infinity with
/// the same infinity.
///
/// # Errors
/// Says why the two cannot be compared as numbers: another type or dtype, or elements whose
/// difference is not finite — a NaN or an infinity on one side where the other holds a
/// finite value, NaN where the other is infinite, or infinities of opposite signs. The
/// message names the first such element (row-major) and how many there are. Such a
/// difference has no size (a `diff > tolerance` test is false for NaN), so it is a failure
/// at any tolerance rather than an error that a maximum could drop.
pub fn tensor_error(got: &HostTensor, want: &HostTensor) -> std::result::Result<f32, String> {
    if got.ty() != want.ty() || got.dtype() != want.dtype() {
        return Err(format!("is {} {}, the reference {} {}", got.ty(), got.dtype(), want.ty(), want.dtype()));
    }
    let (got, want) = (got.to_f32(), want.to_f32());
    let mut diff = 0.0f32;
    let (mut first, mut count) = (None, 0usize);
    for (i, (x, y)) in got.iter().zip(&want).enumerate() {
        // Equal values, equal infinities and two NaNs differ by nothing.
        if x == y || (x.is_nan() && y.is_nan()) {
            continue;
        }
        if !x.is_finite() || !y.is_finite() {
            first.get_or_insert((i, *x, *y));
            count += 1;
            continue;
        }
        diff = diff.max((x - y).abs());
    }
    if let Some((i, x, y)) = first {
        let more = match count {
            1 => String::new(),
            n => format!(" (the first of {n} elements not finite on one side only, or of other infinities)"),
        };
        return Err(format!("element {i} (row-major) is {x}, the reference holds {y}{more}"));
    }
    let scale = want.iter().filter(|v| v.is_finite()).fold(1.0f32, |m, v| m.max(v.abs()));
    Ok(diff / scale)
}

/// How a run's saved outputs compare with the single-device reference: what `check` and
/// `run --check` decide on.
#[derive(Clone, Debug, PartialEq)]
pub struct Comparison {
    /// How many outputs were compared.
    pub compared: usize,
    /// The largest [`tensor_error`] among the outputs that could be compared (0 when none).
    pub max_error: f32,
    /// Why the comparison fails at any tolerance, if it does: nothing was compared, an
    /// output is missing or of another type, or a difference is not finite.
    pub mismatch: Option<String>,
}

impl Comparison {
    /// Compares every tensor of `reference` with the one of `got` (naming a tensor with
    /// `name` in messages). An empty `reference` fails: a check that compares nothing
    /// proves nothing.
    pub fn new(
        got: &HashMap<TensorId, HostTensor>,
        reference: &HashMap<TensorId, HostTensor>,
        name: impl Fn(TensorId) -> String,
    ) -> Self {
        let mut ids: Vec<TensorId> = reference.keys().copied().collect();
        ids.sort_by_key(|t| (t.op, t.output));
        let mut comparison = Comparison { compared: 0, max_error: 0.0, mismatch: None };
        if ids.is_empty() {
            comparison.mismatch = Some("there is no output to compare".into());
        }
        for t in ids {
            let error = match got.get(&t) {
                None => Err("is missing from the run's outputs".to_string()),
                Some(g) => tensor_error(g, &reference[&t]),
            };
            match error {
                Ok(e) => {
                    comparison.compared += 1;
                    comparison.max_error = comparison.max_error.max(e);
                }
                Err(why) => {
                    comparison.mismatch.get_or_insert_with(|| format!("output `{}` {why}", name(t)));
                }
            }
        }
        comparison
    }

    /// True when nothing failed outright and the largest error is within `tolerance`.
    pub fn passes(&self, tolerance: f32) -> bool {
        self.mismatch.is_none() && self.max_error <= tolerance
    }
}

/// What `run --check` decides on: the single-device reference on the executable's loaded
/// inputs, compared with the outputs of its last run. Hold it to
/// [`computation_tolerance`] of [`Executable::computation`].
pub fn compare_with_reference(exe: &Executable) -> Result<Comparison> {
    let comp = exe.computation();
    let reference = comp.evaluate(&exe.loaded_inputs())?;
    Ok(Comparison::new(exe.outputs(), &reference, |t| comp.tensor_name(t)))
}

/// The larger of two errors, where a NaN (an error that has no size) wins: `f32::max`
/// would drop it and let a broken check pass.
fn worse(a: f32, b: f32) -> f32 {
    if a.is_nan() || b.is_nan() { f32::INFINITY } else { a.max(b) }
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
    /// The largest error among those run (`max|split - whole| / max(max|whole|, 1)`);
    /// infinite where [`mismatch`](Self::mismatch) is set.
    pub max_error: f32,
    /// Why a decomposed run fails at any tolerance, if one does: an output element that is
    /// NaN or infinite where the reference is finite, or the other way ([`tensor_error`]),
    /// naming the spec's device counts, the output, the first element and their number.
    pub mismatch: Option<String>,
}

/// The result of [`check_computation`].
#[derive(Clone, Debug)]
pub struct CheckReport {
    /// One entry per operator, in topological order.
    pub ops: Vec<OpCheck>,
    /// Error of the saved outputs when every operator runs a random spec (same measure).
    pub graph_error: f32,
    /// Why the whole graph's outputs fail at any tolerance, if they do
    /// ([`Comparison::mismatch`]).
    pub graph_mismatch: Option<String>,
    /// The tolerance each operator's errors are held to: [`tolerance`] of the least
    /// precise dtype among the operators' outputs.
    pub tolerance: f32,
    /// The tolerance the whole graph's error is held to ([`computation_tolerance`]).
    pub graph_tolerance: f32,
}

impl CheckReport {
    /// True when every error is within the tolerance and nothing failed outright (an
    /// operator's error that is NaN fails, as does a non-finite mismatch).
    pub fn passed(&self) -> bool {
        self.graph_mismatch.is_none()
            && self.graph_error <= self.graph_tolerance
            && self.ops.iter().all(|o| o.mismatch.is_none() && o.max_error <= self.tolerance)
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
    for (id, op, _) in comp.ops() {
        let specs = enumerate_specs(op, p)?;
        let step = specs.len().div_ceil(max_specs.max(1));
        let mut max_error = 0.0f32;
        let mut checked = 0;
        let mut mismatch = None;
        for choice in specs.iter().step_by(step) {
            match decomposition_error(op, &choice.spec, rng.next_u64())? {
                Ok(e) => max_error = worse(max_error, e),
                Err(why) => {
                    max_error = f32::INFINITY;
                    mismatch.get_or_insert_with(|| format!("the spec of device counts {:?}: {why}", choice.counts));
                }
            }
            checked += 1;
        }
        let name = comp.node(id).map_or_else(String::new, |n| n.name().to_string());
        ops.push(OpCheck { name, kind: op.kind().to_string(), specs: specs.len(), checked, max_error, mismatch });
        chosen.insert(id, specs[rng.below(specs.len())].spec.clone());
    }
    let inputs = comp.random_inputs(rng.next_u64());
    let reference = comp.evaluate(&inputs)?;
    let decomposed = comp.evaluate_with_specs(&inputs, &chosen)?;
    let graph = Comparison::new(&decomposed, &reference, |t| comp.tensor_name(t));
    Ok(CheckReport {
        ops,
        graph_error: graph.max_error,
        graph_mismatch: graph.mismatch,
        tolerance: operator_tolerance(comp),
        graph_tolerance: computation_tolerance(comp),
    })
}

/// Runs `spec` and the whole-tensor kernel of `op` on the same seeded random inputs
/// ([`einsum_joinagg::whole_and_split`], as [`einsum_joinagg::decomposition_error`] draws them) and
/// compares every output by [`tensor_error`]: the largest error, or why an output cannot be
/// compared (naming it by position where the operator has several).
fn decomposition_error(
    op: &dyn AbstractOperator,
    spec: &JoinAggSpec,
    seed: u64,
) -> Result<std::result::Result<f32, String>> {
    let (whole, split) = whole_and_split(op, spec, seed)?;
    let mut max_error = 0.0f32;
    for (j, (w, s)) in whole.iter().zip(&split).enumerate() {
        match tensor_error(s, w) {
            Ok(e) => max_error = worse(max_error, e),
            Err(why) if whole.len() > 1 => return Ok(Err(format!("output {j} {why}"))),
            Err(why) => return Ok(Err(format!("the output {why}"))),
        }
    }
    Ok(Ok(max_error))
}

//! The size of a compile, estimated before anything is built, so that a plan too large for
//! the machine running the compiler is refused with the estimate and the limit instead of
//! exhausting its memory or running for hours: the host memory planning and compiling will
//! take (checked by `plan_and_compile`), and the graph's task count and largest exchange
//! ([`compile_estimate`], checked against [`LIMITS`] by [`crate::compile`] itself).
//!
//! Two estimates, each an upper-leaning count of what dominates, times measured bytes:
//! - [`planning_bytes`], before the logical problem is built: every distinct operator (equal
//!   operators share their candidates, as `einsum_logical::Problem::new` does) enumerates
//!   one spec per ordered factorization of `p` over its shardable indices, each of `p`
//!   function specs holding one box per input and output; the problem keeps each spec and
//!   interns its block sets ([`PLANNING_OVERHEAD`]).
//! - [`compile_bytes`], once the specs are chosen and before physical compilation: the
//!   task graph's tasks ([`compile_estimate`]), counted as one kernel per function spec, its loads, and for every
//!   input produced by another operator one transfer per (producer function, consumer
//!   function) pair whose blocks intersect (what the naive program moves; the searched one
//!   moves no more pieces), times [`BYTES_PER_TASK`], which covers the task, its buffers
//!   and label, the exchange programs and closures behind it, and the simulator's state for
//!   it in the prediction.
//!
//! Equal exchanges (the same producer spec, output, consumer spec and input: the layers of a
//! stack) are counted once per distinct pair when intersecting blocks, then multiplied, so
//! the estimate costs `O(p²)` box tests per distinct exchange, not per exchange.

use std::collections::{HashMap, HashSet};
use std::hash::{DefaultHasher, Hash, Hasher};

use einsum_core::TensorType;
use einsum_joinagg::{AbstractOperator, Computation, JoinAggSpec, Node, OpId, factorizations};

use crate::{CompileError, ExchangeSynthesizer};

/// Bytes one task of the compiled graph costs on the host, all told: measured as the growth
/// of peak resident memory with the task count of `einsummable plan
/// llama:layers=L,tokens=8192,seqs=1` on a 72-site switched topology (L = 1, 8 and 32: about
/// 0.70 kB per task since the prediction keeps no trace and repeated exchanges share their
/// program; 1.45 kB before), rounded up for margin.
pub const BYTES_PER_TASK: f64 = 1024.0;

/// How many times [`compile_bytes`] compiling takes when the plan is refined
/// ([`crate::refine`]): the refinement holds two compiled plans at once (the fastest so far
/// and the one being compiled). Measured: 1.33 kB of peak RSS per estimated task for the
/// decode step of LLaMA-3.1-70B at batch 1 on `nvl72` (4.19 M tasks, 5.6 GB).
pub const REFINING_FACTOR: f64 = 1.5;

/// Bytes one interval of one box costs in an enumerated spec (two `usize` bounds), and the
/// fixed cost of a box (its `Vec` header and allocation).
const BYTES_PER_INTERVAL: f64 = 16.0;
const BYTES_PER_BOX: f64 = 48.0;
/// The fixed cost of a function spec (two `Vec`s of boxes).
const BYTES_PER_FUNCTION: f64 = 64.0;
/// How many times its specs' bytes the logical problem holds: the specs, and the interned
/// block sets, candidate tables and aliases built from them.
pub const PLANNING_OVERHEAD: f64 = 2.0;

/// Bytes of the boxes of one function spec of `op` (every input and output block).
fn function_bytes(op: &dyn AbstractOperator) -> f64 {
    let boxes = op.inputs().iter().chain(op.outputs().iter());
    let intervals: usize = boxes.clone().map(|d| d.dims.len()).sum();
    let count = boxes.count();
    BYTES_PER_FUNCTION + count as f64 * BYTES_PER_BOX + intervals as f64 * BYTES_PER_INTERVAL
}

/// Estimated bytes of the logical problem of `comp` on `p` devices (module docs).
pub fn planning_bytes(comp: &Computation, p: usize) -> f64 {
    let mut seen: HashSet<String> = HashSet::new();
    let mut bytes = 0.0;
    for (_, op, _) in comp.ops() {
        if !seen.insert(format!("{}:{op:?}", op.kind())) {
            continue;
        }
        let max: Vec<usize> = op.shardable().iter().map(|s| s.max_parts()).collect();
        let specs = factorizations(p, &max).len();
        bytes += specs as f64 * p as f64 * function_bytes(op);
    }
    bytes * PLANNING_OVERHEAD
}

fn fingerprint(spec: &JoinAggSpec) -> u64 {
    let mut h = DefaultHasher::new();
    spec.hash(&mut h);
    h.finish()
}

/// The (producer function, consumer function) pairs whose blocks intersect: the transfers of
/// the naive program of this exchange, an upper bound on its pieces.
fn intersecting_pairs(producer: &[&TensorType], consumer: &[&TensorType]) -> usize {
    consumer.iter().map(|c| producer.iter().filter(|b| b.intersect(c).is_some()).count()).sum()
}

/// How large a compiled plan will be, counted from its specs before anything is synthesized
/// ([`compile_estimate`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CompileEstimate {
    /// Tasks of the graph: one kernel and one load per input per function spec, and one
    /// transfer per intersecting (producer function, consumer function) pair of every
    /// exchange (an upper bound on the naive program's transfers).
    pub tasks: usize,
    /// The intersecting pairs of the largest single exchange: the transfers that share the
    /// machine at once when it is simulated.
    pub largest_exchange: usize,
}

/// The largest plans [`crate::compile`] accepts; above either limit it refuses up front
/// ([`crate::CompileError::TooLarge`]) instead of compiling for minutes or hours.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CompileLimits {
    /// The most tasks of the graph ([`CompileEstimate::tasks`]).
    pub tasks: usize,
    /// The most pieces of one exchange ([`CompileEstimate::largest_exchange`]) with the
    /// naive synthesizer, which simulates each program once.
    pub exchange_pieces: usize,
}

impl CompileLimits {
    /// The most pieces of one exchange under `synthesizer`. Simulating an exchange of `k`
    /// pieces costs up to `k²` (see [`LIMITS`]); the naive synthesizer simulates each program
    /// once, a search at least once per iteration and once more for its start
    /// ([`ExchangeSynthesizer::simulations`]), so its limit is
    /// [`CompileLimits::exchange_pieces`] over the square root of that count: the same bound
    /// on `k²` times the simulations. A search with a wall-time budget stops its seeds and
    /// annealing by time whatever its cap, so it is charged for at most
    /// [`BUDGETED_SEARCH_SIMULATIONS`]: what the budget does not bound is the naive program,
    /// the first seed, always scored, and the step that crosses the budget.
    pub fn exchange_pieces_for(&self, synthesizer: &dyn ExchangeSynthesizer) -> usize {
        if synthesizer.is_naive() {
            return self.exchange_pieces;
        }
        (self.exchange_pieces as f64 / synthesizer.simulations().sqrt()).floor() as usize
    }
}

/// The simulations a search with a wall-time budget is charged for by
/// [`CompileLimits::exchange_pieces_for`] whatever its iteration cap: the count the search's
/// limit was measured at (9 176 pieces). The budget, not the cap, bounds such a search's time,
/// so the limit of `plan`'s and the Python binding's budgeted searches stays put when their cap
/// is raised.
pub const BUDGETED_SEARCH_SIMULATIONS: usize = 50;

/// The limits [`crate::compile`] checks.
///
/// - Tasks: physical compilation and the whole-plan prediction cost 3–8 µs of CPU per
///   estimated task at p ≤ 72 on a 2-core x86-64 machine (the decode step of the 80-layer
///   LLaMA-3.1-70B on `nvl72` at batch 1, with exchange programs searched for 100 iterations:
///   `megatron`'s plan, 4.01 M tasks estimated, in 17 s and 2.8 GB of peak RSS; `data`'s,
///   5.38 M, in 34 s and 3.6 GB), so 6 M tasks bound one compile of that kind near 40 s
///   and its host memory near [`BYTES_PER_TASK`] × 6 M = 6 GB. The refinement compiles up
///   to a dozen plans one after the other ([`crate::refine`]), and holds two at once.
/// - Pieces of one exchange: the simulator refills the max-min rates of a connected group of
///   transfers at every event, and the transfers of one all-to-all exchange are one group
///   finishing one by one, so simulating an exchange of `k` pieces costs up to `k²`: the
///   per-task cost is not flat in the device count. Measured on `llama-block` over a switched
///   machine of `p` copies of the `dgx-h100` site (2 loaded cores, CPU time of `plan`):
///   p = 128 (largest exchange 8 448 pieces) 1.7 s, p = 256 (33 280 pieces) 27 s, so one
///   at the limit takes a few minutes at most; p = 512 (262 144 pieces) and p = 1024
///   (1 048 576) are refused, where p = 1024 had not finished after 400 s. A search
///   simulates each program many times, so its limit is lower
///   ([`CompileLimits::exchange_pieces_for`]: 9 176 pieces for a search with a wall-time
///   budget, as the CLI's, which admits every all-to-all up to p = 95).
pub const LIMITS: CompileLimits = CompileLimits { tasks: 6_000_000, exchange_pieces: 65_536 };

/// Estimated bytes of compiling `comp` with `specs` on `p` devices (module docs):
/// [`CompileEstimate::tasks`] times [`BYTES_PER_TASK`].
pub fn compile_bytes(comp: &Computation, specs: &HashMap<OpId, JoinAggSpec>, p: usize) -> f64 {
    compile_estimate(comp, specs, p).tasks as f64 * BYTES_PER_TASK
}

/// The size of the graph of `comp` compiled with `specs` on `p` devices
/// ([`CompileEstimate`]). Operators without a spec count as reading their inputs whole on
/// one device.
pub fn compile_estimate(comp: &Computation, specs: &HashMap<OpId, JoinAggSpec>, p: usize) -> CompileEstimate {
    let mut tasks = 0usize;
    let mut exchanges: HashMap<(u64, usize, u64, usize), (usize, usize)> = HashMap::new();
    for (id, _, args) in comp.ops() {
        tasks += p * (1 + args.len());
        let Some(consumer) = specs.get(&id) else { continue };
        for (k, t) in args.iter().enumerate() {
            let Some(producer) = specs.get(&t.op).filter(|_| matches!(comp.node(t.op), Some(Node::Op { .. }))) else {
                continue;
            };
            let key = (fingerprint(producer), t.output, fingerprint(consumer), k);
            exchanges
                .entry(key)
                .or_insert_with(|| {
                    let held: Vec<&TensorType> =
                        producer.functions.iter().filter_map(|f| f.outputs.get(t.output)).collect();
                    let needed: Vec<&TensorType> = consumer.functions.iter().filter_map(|f| f.inputs.get(k)).collect();
                    (intersecting_pairs(&held, &needed), 0)
                })
                .1 += 1;
        }
    }
    CompileEstimate {
        tasks: tasks + exchanges.values().map(|(pairs, times)| pairs * times).sum::<usize>(),
        largest_exchange: exchanges.values().map(|(pairs, _)| *pairs).max().unwrap_or(0),
    }
}

/// The estimate of compiling `comp` with `specs` on `p` devices with `synthesizer`
/// ([`compile_estimate`]), or [`CompileError::TooLarge`] naming the first limit it exceeds.
pub fn check_size(
    comp: &Computation,
    specs: &HashMap<OpId, JoinAggSpec>,
    p: usize,
    synthesizer: &dyn ExchangeSynthesizer,
    limits: &CompileLimits,
) -> Result<CompileEstimate, CompileError> {
    let estimate = compile_estimate(comp, specs, p);
    let too_large = |what: &'static str, estimate: usize, limit: usize| CompileError::TooLarge {
        devices: p,
        what,
        estimate,
        limit,
    };
    if estimate.tasks > limits.tasks {
        Err(too_large("tasks", estimate.tasks, limits.tasks))
    } else if estimate.largest_exchange > limits.exchange_pieces_for(synthesizer) {
        Err(too_large("pieces in one exchange", estimate.largest_exchange, limits.exchange_pieces_for(synthesizer)))
    } else {
        Ok(estimate)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ty(bounds: &[(usize, usize)]) -> TensorType {
        TensorType::new(
            &bounds.iter().map(|b| b.0).collect::<Vec<_>>(),
            &bounds.iter().map(|b| b.1).collect::<Vec<_>>(),
        )
        .unwrap()
    }

    #[test]
    fn row_blocks_meet_column_blocks_all_to_all_and_equal_tilings_one_to_one() {
        let rows: Vec<TensorType> = (0..4).map(|i| ty(&[(i * 2, i * 2 + 2), (0, 8)])).collect();
        let cols: Vec<TensorType> = (0..4).map(|i| ty(&[(0, 8), (i * 2, i * 2 + 2)])).collect();
        let (r, c): (Vec<&TensorType>, Vec<&TensorType>) = (rows.iter().collect(), cols.iter().collect());
        assert_eq!(intersecting_pairs(&r, &c), 16);
        assert_eq!(intersecting_pairs(&r, &r), 4);
    }
}

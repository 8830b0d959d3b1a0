//! Physical compilation (Sections 5.1 and 5.3), between the ExProg language
//! (`einsum-exprog`) and the backends: a computation whose operators each have a join-agg
//! spec of `p` function specs becomes a [`TaskGraph`] over `p` devices.
//!
//! - [`compile()`] synthesizes and lowers an exchange program per operator input (placement,
//!   preamble, lowering) and checks each device's memory, giving a [`Compiled`];
//! - [`ComputationKernels`] runs its kernels ([`KernelCall`]) and describes their operators to
//!   backends with their own kernels; [`check_operators`] asks a backend about every operator;
//! - [`predict()`] simulates the whole compiled graph (roofline kernels, simulated exchanges,
//!   overlapped) for [`Compiled::predicted_ms`].
//! - [`pipeline`]: plan (with an `einsum-logical` strategy), then compile, within each
//!   device's memory budget, planning again with less room while a compiled plan is over it
//!   ([`plan_and_compile`]), after [`refine`] has compared the strategy's plan with its
//!   alternatives by whole-plan prediction; [`memory_report`] describes what a compiled plan
//!   keeps in memory.
//!
//! The pipeline lives here, not in the driver or in `einsum-logical`, because it is the one
//! place that needs both a logical strategy and this crate's memory check, and this crate
//! already consumes a logical plan's specs: `einsum-compile` depends on `einsum-logical`,
//! never the other way. The driver, the CLI and the experiments all plan through it.
//!
//! # Algorithm
//! Operators are compiled one at a time in topological order ([`Computation::ops`]):
//!
//! 1. **Placement.** If the operator reads a tensor produced by another operator, the
//!    exchange program of its first such input is synthesized with the preamble's `{size 1}`
//!    partitions `S1..Sp` free ([`einsum_exprog::preamble()`], then the
//!    [`PhysicalOptions::synthesizer`]: [`einsum_exprog::synth::naive`],
//!    [`einsum_exprog::synth::search`] or any other [`ExchangeSynthesizer`]); the membership the program is valid under places function
//!    spec `i` on the one site of `S{i+1}`. Its other produced inputs are synthesized with
//!    those partitions declared by members. An operator reading only computation inputs gets
//!    the identity placement (function spec `i` on device `i`).
//! 2. **Computation inputs** are loaded directly in the block each function spec reads, on
//!    its device (`Load`; free, as Section 4.2 says: inputs may be laid out in any tiling).
//!    Loaded blocks are resident for the executable's lifetime, so each (input, device,
//!    block) is loaded once and its buffer is read by every function spec, of any operator,
//!    that needs it there.
//! 3. **Produced inputs**: the program's closure is lowered ([`lower_exchange`]): every `IN`
//!    copy is a `Slice` of the producer's unaggregated output block; every firing, in closure
//!    order, an `Aggregate` with the producer's ⊕ (only where the aggregate is not yet there)
//!    and a `Transfer` to each destination; then each function spec's block is `Stitch`ed
//!    from its atoms (a block of one atom is that atom's buffer).
//! 4. **Kernels**: one `Kernel` task per function spec, writing one new buffer per output
//!    box; partial outputs stay unaggregated where they were computed.
//! 5. **Saved outputs**: the copies of each distinct output box are gathered at the device
//!    of the first copy, ⊕-aggregated and `Store`d (a saved computation input is loaded whole
//!    on device 0 and stored).
//! 6. **Memory**: a graph whose [`TaskGraph::stats`] peak on a device (its resident input
//!    blocks plus its transient peak) exceeds the device's budget — the smaller of
//!    [`PhysicalOptions::memory_budget`] and its HBM capacity in the topology — is refused.
//!
//! # Predicted time
//! [`Compiled::predicted_ms`] is the whole-plan prediction ([`predict()`]): the finished task
//! graph simulated once on the topology, kernels timed by the default [`Roofline`] and
//! sharing their device's compute, transfers, aggregations and copies sharing links and HBM,
//! everything overlapping as the dependencies allow. Each [`ExchangeProgram::simulated_ms`]
//! stays the program's own simulated time, as synthesis costed it.
#![warn(missing_docs)]

mod build;
mod fallback;
pub mod footprint;
mod kernels;
mod lower_program;
pub mod memory_report;
pub mod pipeline;
mod placement;
mod predict;
pub mod refine;
mod reuse;
mod synthesizer;

use std::collections::HashMap;
use std::sync::Arc;

use einsum_core::TaskGraphError;
use einsum_core::taskgraph::{Boundary, DeviceId, MemoryStats, TaskGraph};
use einsum_joinagg::{Computation, FunctionSpec, JoinAggSpec, OpId, TensorId, validate_spec};
use einsum_sim::{Roofline, Topology};

/// The default search iterations per exchange program, defined beside the search's options.
pub use einsum_exprog::synth::DEFAULT_SEARCH_ITERATIONS;
pub use fallback::Exchanges;
pub use kernels::{ComputationKernels, check_operators, operator_ref};
pub use lower_program::{ExchangeSources, lower_exchange};
pub use pipeline::{PipelineError, plan_and_compile};
pub use predict::{PredictError, predict, predict_ms, simulator_tasks};
pub use synthesizer::{
    DEFAULT_SYNTHESIS_BUDGET, ExchangeSynthesizer, NaiveSynthesizer, SearchSynthesizer, Synthesized,
};

use einsum_exprog::PreambleError;
use einsum_exprog::Program;
use einsum_exprog::ValidityError;
use einsum_exprog::synth::SynthError;

/// What [`compile`] needs besides the computation and its specs.
#[derive(Clone, Debug)]
pub struct PhysicalOptions {
    /// The number of devices `p`; every spec has `p` function specs.
    pub devices: usize,
    /// How exchange programs are synthesized: [`NaiveSynthesizer`], [`SearchSynthesizer`] or
    /// any other [`ExchangeSynthesizer`].
    pub synthesizer: Arc<dyn ExchangeSynthesizer>,
    /// The machine: its first `p` sites are the devices (costs and HBM capacities).
    pub topology: Topology,
    /// Bytes each device may hold at its peak (resident inputs plus transient buffers);
    /// `None`: no limit beyond the topology's HBM capacities.
    pub memory_budget: Option<f64>,
}

/// One kernel of the table [`Compiled::kernels`]: operator `op` on one function spec.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelCall {
    /// The operator's vertex.
    pub op: OpId,
    /// The function spec it runs on.
    pub function: FunctionSpec,
}

/// The exchange program that brings input `input` of operator `op` to its function specs.
#[derive(Clone, Debug, PartialEq)]
pub struct ExchangeProgram {
    /// The consuming operator.
    pub op: OpId,
    /// Its input slot.
    pub input: usize,
    /// The program (preamble and synthesized body), shared by every exchange of the compile
    /// that repeats the same request (the layers of a stack).
    pub program: Arc<Program>,
    /// Its simulated completion time on the topology.
    pub simulated_ms: f64,
}

/// A compiled computation.
#[derive(Clone, Debug)]
pub struct Compiled {
    /// The task graph.
    pub graph: TaskGraph,
    /// Kernel index → (operator, function spec).
    pub kernels: Vec<KernelCall>,
    /// Every synthesized exchange program, in compilation order.
    pub programs: Vec<ExchangeProgram>,
    /// The device of every function spec of every operator.
    pub placement: HashMap<OpId, Vec<DeviceId>>,
    /// Predicted time in ms: the completion of the whole task graph simulated on the
    /// topology with the default [`Roofline`] (see the module docs and [`predict()`]).
    pub predicted_ms: f64,
    /// The graph's memory statistics (`graph.stats()`), computed once for the budget check
    /// and kept, so that reports need not walk a million-task graph again.
    pub stats: MemoryStats,
    /// Which exchange programs the graph runs: with [`SearchSynthesizer`], the searched ones,
    /// or the naive ones when the whole plan predicted faster with them (module docs).
    pub exchanges: Exchanges,
}

impl Compiled {
    /// The simulation behind [`Compiled::predicted_ms`], with its full [`einsum_sim::Trace`]:
    /// when every task ran and which resources it crossed (for a timeline of the plan, such
    /// as `--trace`). The same tasks simulated on `topology` (the one compiled for) with the
    /// same default [`Roofline`], so its [`einsum_sim::Trace::completion_ms`] is
    /// `predicted_ms` bit for bit; `comp` is the computation compiled. Only the labels and
    /// the per-task record cost extra, which is why compiling keeps the completion alone
    /// ([`predict_ms`]).
    pub fn predicted_trace(&self, comp: &Computation, topology: &Topology) -> Result<einsum_sim::Trace, PredictError> {
        predict(comp, &self.graph, &self.kernels, topology, &Roofline::default())
    }
}

/// Why a computation could not be compiled.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CompileError {
    /// No devices.
    #[error("the device count must be at least 1")]
    NoDevices,
    /// The topology has fewer sites than devices.
    #[error("topology `{topology}` has {sites} sites, fewer than the {devices} devices")]
    TopologyTooSmall {
        /// The topology's name.
        topology: String,
        /// Its sites.
        sites: usize,
        /// Devices asked for.
        devices: usize,
    },
    /// An operator without a spec.
    #[error("operator `{op}` has no join-agg spec")]
    MissingSpec {
        /// The operator's name.
        op: String,
    },
    /// A spec whose function-spec count is not the device count.
    #[error("operator `{op}` has a spec of {got} function specs; compiling for {expected} devices needs {expected}")]
    SpecCount {
        /// The operator's name.
        op: String,
        /// The device count.
        expected: usize,
        /// Function specs in its spec.
        got: usize,
    },
    /// A spec that does not decompose its operator.
    #[error("operator `{op}`: {source}")]
    InvalidSpec {
        /// The operator's name.
        op: String,
        /// Why.
        source: einsum_joinagg::Error,
    },
    /// The computation itself is inconsistent (an unknown tensor).
    #[error(transparent)]
    Computation(#[from] einsum_joinagg::Error),
    /// The preamble of an exchange program could not be generated.
    #[error("{label}: {source}")]
    Preamble {
        /// The consumer and input.
        label: String,
        /// Why.
        source: PreambleError,
    },
    /// No body could be synthesized.
    #[error("{label}: {source}")]
    Synth {
        /// The consumer and input.
        label: String,
        /// Why.
        source: SynthError,
    },
    /// The synthesized program is not valid under its membership.
    #[error("{label}: {source}")]
    Invalid {
        /// The consumer and input.
        label: String,
        /// Why.
        source: ValidityError,
    },
    /// The membership does not place each function spec on its own device.
    #[error("{label}: bad placement: {reason}")]
    Placement {
        /// The consumer and input.
        label: String,
        /// What is wrong.
        reason: String,
    },
    /// An action aggregates copies of different atoms (different boxes), which ⊕ cannot.
    #[error("{label}: aggregate {aggregate} mixes different atoms; ⊕ combines copies of one block only")]
    MixedAggregate {
        /// The consumer and input.
        label: String,
        /// The aggregate.
        aggregate: String,
    },
    /// The program's closure cannot be lowered (it lacks a piece).
    #[error("{label}: {reason}")]
    Lowering {
        /// The consumer and input.
        label: String,
        /// What is missing.
        reason: String,
    },
    /// A malformed task (a compiler bug if it happens).
    #[error(transparent)]
    Graph(#[from] TaskGraphError),
    /// The graph needs more memory on a device than its budget.
    #[error(
        "device {device} needs {:.2} GB at its peak ({:.2} GB resident inputs + {:.2} GB transient; {peak} bytes), \
         more than its budget of {:.2} GB ({budget} bytes)",
        gb(*peak),
        gb(*resident),
        gb(peak - resident),
        budget / 1e9
    )]
    OutOfMemory {
        /// The device.
        device: usize,
        /// Its peak bytes: resident plus transient.
        peak: usize,
        /// Its resident bytes (the blocks of computation inputs it holds).
        resident: usize,
        /// Its budget in bytes: [`PhysicalOptions::memory_budget`] or its HBM capacity,
        /// whichever is smaller.
        budget: f64,
    },
    /// The plan is larger than [`footprint::LIMITS`] allow (its task count, or the pieces of
    /// one exchange): refused before synthesizing anything, since compiling and predicting
    /// it would take many minutes.
    #[error(
        "compiling this plan on {devices} devices needs an estimated {estimate} {what}, more than the limit \
         of {limit} (past it, compiling takes many minutes); use fewer devices or a smaller workload"
    )]
    TooLarge {
        /// The device count.
        devices: usize,
        /// What is over its limit: `tasks` or `pieces in one exchange`.
        what: &'static str,
        /// The estimate ([`footprint::compile_estimate`]).
        estimate: usize,
        /// Its limit.
        limit: usize,
    },
    /// The whole-plan prediction failed.
    #[error("predicting the compiled graph: {0}")]
    Predict(#[from] PredictError),
}

fn gb(bytes: usize) -> f64 {
    bytes as f64 / 1e9
}

/// The boundaries of `comp`'s task graph: its inputs, named after their nodes, and its saved
/// tensors (`name.output` for an operator of several outputs).
fn boundaries(comp: &Computation) -> Result<(Vec<Boundary>, Vec<Boundary>), CompileError> {
    let name = |id: OpId| build::op_name(comp, id);
    let boundary = |t: TensorId, label: String| -> Result<Boundary, CompileError> {
        let desc = comp.desc(t)?;
        Ok(Boundary { name: label, ty: desc.tensor_type(), dtype: desc.dtype })
    };
    let in_bounds = comp.inputs().iter().map(|&t| boundary(t, name(t.op))).collect::<Result<Vec<_>, _>>()?;
    let out_bounds = comp
        .saved()
        .iter()
        .map(|&t| {
            let n = comp.node(t.op).map_or(0, |n| n.outputs().len());
            boundary(t, if n > 1 { format!("{}.{}", name(t.op), t.output) } else { name(t.op) })
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok((in_bounds, out_bounds))
}

/// Compiles `comp`, each operator decomposed by its spec in `specs`, to a task graph over
/// `options.devices` devices (the algorithm is in the module docs). With a synthesizer that
/// asks for it ([`ExchangeSynthesizer::naive_fallback`]) the plan is compiled with naive exchange
/// programs as well, and those are kept when the whole plan predicts faster with them
/// ([`Compiled::exchanges`]).
pub fn compile(
    comp: &Computation,
    specs: &HashMap<OpId, JoinAggSpec>,
    options: &PhysicalOptions,
) -> Result<Compiled, CompileError> {
    compile_sharing(comp, specs, options, &mut SynthesisMemo::default(), None)
}

/// The exchange programs synthesized by earlier compiles on one topology, per synthesizer
/// ([`ExchangeSynthesizer::identity`]), for
/// later ones ([`compile_sharing`]): compiles of plans that differ in a few operators (the
/// refinement's alternatives) ask most of the same exchange problems.
#[derive(Default)]
pub struct SynthesisMemo {
    caches: Vec<(String, reuse::SynthesisCache)>,
}

impl SynthesisMemo {
    fn cache(&mut self, synthesizer: &dyn ExchangeSynthesizer) -> &mut reuse::SynthesisCache {
        let identity = synthesizer.identity();
        let i = match self.caches.iter().position(|(s, _)| *s == identity) {
            Some(i) => i,
            None => {
                self.caches.push((identity, reuse::SynthesisCache::default()));
                self.caches.len() - 1
            }
        };
        &mut self.caches[i].1
    }
}

/// [`compile()`], answering exchange problems that earlier compiles through `memo` solved
/// from their programs (each compile already does so within itself, see `reuse.rs`). Every
/// compile through one memo must target the same topology. A problem asked again exactly
/// gets the program a fresh synthesis would give; one asked on renamed sites may get another
/// program of the same simulated time. `naive_ms`: the prediction of these specs compiled
/// with naive programs on these options, where the caller has it, which spares the naive
/// fallback's first compile (`None`: compiled when the synthesizer asks for the fallback).
pub fn compile_sharing(
    comp: &Computation,
    specs: &HashMap<OpId, JoinAggSpec>,
    options: &PhysicalOptions,
    memo: &mut SynthesisMemo,
    naive_ms: Option<f64>,
) -> Result<Compiled, CompileError> {
    fallback::no_slower_than_naive(options, naive_ms, |synthesizer| {
        compile_with(comp, specs, options, synthesizer, memo.cache(synthesizer))
    })
}

/// [`compile()`] with the exchange programs of `synthesizer` (in place of
/// `options.synthesizer`), asking `cache` first.
fn compile_with(
    comp: &Computation,
    specs: &HashMap<OpId, JoinAggSpec>,
    options: &PhysicalOptions,
    synthesizer: &dyn ExchangeSynthesizer,
    cache: &mut reuse::SynthesisCache,
) -> Result<Compiled, CompileError> {
    let p = options.devices;
    let topology = &options.topology;
    let _span = tracing::info_span!("physical", devices = p, topology = topology.name()).entered();
    if p == 0 {
        return Err(CompileError::NoDevices);
    }
    if topology.num_sites() < p {
        return Err(CompileError::TopologyTooSmall {
            topology: topology.name().to_string(),
            sites: topology.num_sites(),
            devices: p,
        });
    }
    let name = |id: OpId| build::op_name(comp, id);
    for (id, op, _) in comp.ops() {
        let spec = specs.get(&id).ok_or_else(|| CompileError::MissingSpec { op: name(id) })?;
        if spec.len() != p {
            return Err(CompileError::SpecCount { op: name(id), expected: p, got: spec.len() });
        }
        validate_spec(op, spec, Some(p)).map_err(|source| CompileError::InvalidSpec { op: name(id), source })?;
    }
    let estimate = footprint::check_size(comp, specs, p, synthesizer, &footprint::LIMITS)?;
    tracing::debug!(tasks = estimate.tasks, largest_exchange = estimate.largest_exchange, "estimated the graph");

    let (in_bounds, out_bounds) = boundaries(comp)?;
    let mut built = build::Builder::new(comp, specs, topology, synthesizer, TaskGraph::new(p, in_bounds, out_bounds));
    // Exchange programs already synthesized (by earlier compiles too), by problem up to a
    // renaming of sites; what this compile reused is counted from here.
    let (hits, renamed) = (cache.hits, cache.renamed);
    for (id, op, args) in comp.ops() {
        built.operator(id, op, args, cache)?;
    }
    built.store_saved()?;
    let build::Builder { graph, kernels, programs, placements, .. } = built;
    graph.check_complete()?;

    let stats = graph.stats();
    for (device, (&peak, &resident)) in stats.peak_bytes.iter().zip(&stats.resident_bytes).enumerate() {
        let capacity = topology.sites()[device].hbm_capacity;
        let budget = options.memory_budget.map_or(capacity, |b| b.min(capacity));
        if peak as f64 > budget {
            return Err(CompileError::OutOfMemory { device, peak, resident, budget });
        }
    }
    let predicted_ms = predict_ms(comp, &graph, &kernels, topology, &Roofline::default())?;
    tracing::info!(
        tasks = graph.nodes().len(),
        exchange_programs = programs.len(),
        reused_programs = cache.hits - hits,
        renamed_programs = cache.renamed - renamed,
        predicted_ms,
        "compiled the task graph"
    );
    let exchanges = if synthesizer.is_naive() { Exchanges::Naive } else { Exchanges::Searched };
    Ok(Compiled { graph, kernels, programs, placement: placements, predicted_ms, stats, exchanges })
}

//! Plan, then compile, within each device's memory: the one pipeline that the driver's
//! `compile`, `einsummable plan` and the experiments share.
//!
//! # Memory
//! A device's peak is its resident bytes (the blocks of the computation inputs its function
//! specs read, kept for the executable's lifetime) plus the transient peak of the task
//! graph's schedule on it. The logical optimizer sees only the resident part (it is a sum
//! over operators of what each chosen spec pins, see `einsum_logical::Problem::resident_bytes`);
//! the transient part is known once the task graph exists. So [`plan_and_compile`] plans
//! with the whole budget for resident inputs, compiles, and when a device's peak is over
//! the budget gives the planner less room (the budget less the transient peak it saw) and
//! plans again, up to [`MAX_ROUNDS`] times. A plan over budget is never returned.
//!
//! # Why here
//! The loop needs both sides: the logical strategy (`einsum-logical`) and this crate's
//! physical compilation, whose memory check is what can send it back to the planner. The
//! physical compiler already consumes a logical plan's specs, so it is the lowest crate that
//! sees both (`einsum-logical` knows nothing of exchange programs or task graphs).

use std::sync::Arc;
use std::time::Instant;

use crate::refine::{Refinement, refined};
use crate::{CompileError, Compiled, ExchangeSynthesizer, footprint};
use einsum_joinagg::Computation;
use einsum_logical::{CostModel, LogicalOptimizer, LogicalPlan, Problem};
use einsum_sim::Topology;

/// Result alias for the pipeline.
pub type Result<T, E = PipelineError> = std::result::Result<T, E>;

/// Why [`plan_and_compile`] returns no plan.
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    /// The strategy found no plan (`DoesNotFit`, `OverBudget`, an unknown candidate, ...).
    #[error(transparent)]
    Logical(#[from] einsum_logical::Error),
    /// Physical compilation failed, or the last plan compiled was over budget (`OutOfMemory`).
    #[error(transparent)]
    Compile(#[from] CompileError),
    /// A budget above the smallest HBM capacity of the devices.
    #[error(
        "the memory budget of {} per device is more than the {} of HBM the devices of `{topology}` have",
        einsum_logical::format_gb(*.budget),
        einsum_logical::format_gb(*.capacity)
    )]
    BudgetOverCapacity {
        /// The budget asked for, in bytes per device.
        budget: f64,
        /// The smallest HBM capacity among the devices, in bytes.
        capacity: f64,
        /// The topology's name.
        topology: String,
    },
    /// Planning or compiling would need more host memory than the machine running the
    /// compiler has: refused before allocating (estimates of [`crate::footprint`]).
    #[error(
        "{stage} on {devices} devices needs an estimated {} of host memory, more than the {} available; \
         use fewer devices or a smaller workload",
        einsum_logical::format_gb(*.estimate),
        einsum_logical::format_gb(*.limit)
    )]
    HostMemory {
        /// `planning` (the logical problem) or `compiling` (the task graph).
        stage: &'static str,
        /// The device count.
        devices: usize,
        /// The estimated bytes.
        estimate: f64,
        /// The bytes available ([`Request::host_memory`] or what the system reports).
        limit: f64,
    },
    /// No planning round ran (never while [`MAX_ROUNDS`] is at least 1).
    #[error("no planning round ran")]
    NoRound,
}

/// The share of each device's HBM the default budget leaves free, for what the task graph
/// does not count: the CUDA context and cuBLAS workspaces (a few hundred MB per GPU),
/// kernels' scratch space and allocator fragmentation.
pub const MEMORY_RESERVE: f64 = 0.10;

/// How many times [`plan_and_compile`] plans again after a compiled plan was over budget.
pub const MAX_ROUNDS: usize = 4;

/// The default per-device budget: the smallest HBM capacity among the first `devices` sites
/// of `topology`, less [`MEMORY_RESERVE`].
pub fn default_budget(topology: &Topology, devices: usize) -> f64 {
    capacity(topology, devices) * (1.0 - MEMORY_RESERVE)
}

/// The smallest HBM capacity among the first `devices` sites of `topology`, in bytes.
pub fn capacity(topology: &Topology, devices: usize) -> f64 {
    topology.sites().iter().take(devices.max(1)).map(|s| s.hbm_capacity).fold(f64::INFINITY, f64::min)
}

/// What to plan and compile.
pub struct Request<'a> {
    /// The computation.
    pub comp: &'a Computation,
    /// The device count `p`.
    pub devices: usize,
    /// The logical strategy.
    pub strategy: &'a dyn LogicalOptimizer,
    /// The cost model it plans with.
    pub cost: &'a dyn CostModel,
    /// The machine synthesis and prediction target (its HBM gives the default budget).
    pub topology: &'a Topology,
    /// How exchange programs are synthesized: [`crate::NaiveSynthesizer`],
    /// [`crate::SearchSynthesizer`] or any other [`ExchangeSynthesizer`].
    pub synthesizer: Arc<dyn ExchangeSynthesizer>,
    /// Bytes per device; `None`: [`default_budget`].
    pub memory_budget: Option<f64>,
    /// Host memory planning and compiling may take, in bytes; `None`: what the system
    /// reports available ([`einsum_core::host_memory::available_host_memory`]), no limit where it
    /// reports nothing.
    pub host_memory: Option<f64>,
    /// Whole-plan predictions to spend on the strategy's alternatives to its plan (see
    /// [`crate::refine`]; [`DEFAULT_REFINE`](crate::refine::DEFAULT_REFINE) by default, 0
    /// keeps the strategy's plan as it is).
    pub refine: usize,
}

/// A plan that fits, compiled.
pub struct Planned {
    /// The logical plan.
    pub plan: LogicalPlan,
    /// Its physical compilation.
    pub compiled: Compiled,
    /// The per-device budget it fits.
    pub budget: f64,
    /// The smallest HBM capacity of its devices.
    pub capacity: f64,
    /// How many plans were compiled (1 when the first fitted).
    pub rounds: usize,
    /// Wall time of logical planning, in ms (every round).
    pub optimize_ms: f64,
    /// Wall time of physical compilation, in ms (every round).
    pub compile_ms: f64,
    /// What the refinement of the last round did (`None` when it scored nothing).
    pub refinement: Option<Refinement>,
}

/// Plans `req.comp` with its strategy under the memory budget and compiles the plan; see the
/// module documentation for the rounds.
///
/// # Errors
/// The strategy's errors (`DoesNotFit` when no plan's resident inputs fit, with the least
/// they need and a lower bound on the devices needed; `OverBudget` for a baseline whose do
/// not); `CompileError::OutOfMemory` (device, peak, resident and transient parts) for the
/// last plan compiled when no round found one whose peak fits: a plan the strategy cannot
/// change (a baseline), a transient peak that leaves less room than the least resident
/// inputs need, or [`MAX_ROUNDS`] plans over budget; a negative, zero or non-finite budget,
/// or one above the devices' HBM; [`PipelineError::HostMemory`] when the estimated host
/// memory of planning or of compiling a plan exceeds [`Request::host_memory`], checked
/// before either allocates; every compile error.
pub fn plan_and_compile(req: &Request<'_>) -> Result<Planned> {
    let capacity = capacity(req.topology, req.devices);
    let budget = req.memory_budget.unwrap_or_else(|| default_budget(req.topology, req.devices));
    if budget > capacity {
        return Err(PipelineError::BudgetOverCapacity { budget, capacity, topology: req.topology.name().to_string() });
    }
    let host_limit = req.host_memory.or_else(|| einsum_core::host_memory::available_host_memory().map(|b| b as f64));
    let fits = |stage: &'static str, estimate: f64| match host_limit {
        Some(limit) if estimate > limit => {
            Err(PipelineError::HostMemory { stage, devices: req.devices, estimate, limit })
        }
        _ => Ok(()),
    };
    fits("planning", footprint::planning_bytes(req.comp, req.devices))?;
    let started = Instant::now();
    let problem = Problem::new(req.comp, req.devices, req.cost)?;
    let mut optimize_ms = started.elapsed().as_secs_f64() * 1e3;
    let mut compile_ms = 0.0;
    let options = crate::PhysicalOptions {
        devices: req.devices,
        synthesizer: Arc::clone(&req.synthesizer),
        topology: req.topology.clone(),
        memory_budget: Some(budget),
    };
    // The room the planner gets for resident inputs, the choice it made last, and why that
    // choice did not fit.
    let mut room = budget;
    let mut last: Option<Vec<usize>> = None;
    let mut over: Option<CompileError> = None;
    for round in 1..=MAX_ROUNDS {
        let started = Instant::now();
        let budgeted = problem.clone().with_memory_budget(Some(room))?;
        let plan = match req.strategy.plan(&budgeted) {
            Ok(plan) => plan,
            // After the first round the room was cut for a transient peak: what did not fit
            // is the compiled plan, and its error says by how much.
            Err(e @ einsum_logical::Error::DoesNotFit { .. }) => {
                return Err(over.map_or_else(|| e.into(), PipelineError::from));
            }
            Err(e) => return Err(e.into()),
        };
        optimize_ms += started.elapsed().as_secs_f64() * 1e3;
        // A refined plan's compile holds two graphs at once.
        let held = if req.refine > 0 { footprint::REFINING_FACTOR } else { 1.0 };
        let compile_fits =
            |p: &LogicalPlan| fits("compiling", held * footprint::compile_bytes(req.comp, &p.specs(), req.devices));
        compile_fits(&plan)?;
        let started = Instant::now();
        let admissible = |p: &LogicalPlan| compile_fits(p).is_ok();
        // The strategy's optima under the cost model's variants, asked only of a strategy
        // that offers alternatives; a variant's problem without a plan in the room offers none.
        let variants = || -> Vec<Vec<usize>> {
            let solve = |v: &Arc<dyn einsum_logical::CostModel>| -> einsum_logical::Result<Vec<usize>> {
                req.strategy.solve(&Problem::new(req.comp, req.devices, v.as_ref())?.with_memory_budget(Some(room))?)
            };
            req.cost.variants().iter().filter_map(|v| solve(v).ok()).collect()
        };
        let (plan, result, refinement) =
            refined(req.comp, req.strategy, &budgeted, plan, &variants, &options, req.refine, &admissible)?;
        compile_ms += started.elapsed().as_secs_f64() * 1e3;
        match result {
            Ok(compiled) => {
                return Ok(Planned {
                    plan,
                    compiled,
                    budget,
                    capacity,
                    rounds: round,
                    optimize_ms,
                    compile_ms,
                    refinement,
                });
            }
            Err(e @ CompileError::OutOfMemory { peak, resident, .. }) if last.as_ref() != Some(&plan.choice()) => {
                let transient = peak.saturating_sub(resident) as f64;
                // At least 5% less room each round, so the rounds make progress; when even
                // the least resident inputs would not fit beside this transient peak, no
                // round can help, and this plan's overshoot is the answer.
                room = (budget - transient).min(room * 0.95);
                if room < problem.min_resident_bytes() {
                    return Err(e.into());
                }
                last = Some(plan.choice());
                over = Some(e);
            }
            Err(e) => return Err(e.into()),
        }
    }
    // Every round's plan was over budget: the last one's overshoot says by how much.
    Err(over.map_or(PipelineError::NoRound, PipelineError::from))
}

//! Compiling a graph for a backend, and running it: `compile`, then `load`, `execute`,
//! `offload` (Section 2's `compileGraph` and the programmer's view after it).

use std::{collections::HashMap, fmt, sync::Arc, time::Instant};

use einsum_compile::{
    Compiled, ComputationKernels, ExchangeProgram, ExchangeSynthesizer, NaiveSynthesizer, check_operators,
};
use einsum_core::{
    Backend, DType, HostTensor, KernelInfo, KernelLibrary, Prepared, TensorType, taskgraph::MemoryStats,
};
use einsum_cpu::CpuBackend;
use einsum_joinagg::{Computation, TensorId};
use einsum_logical::{CostModel, Dp, LogicalOptimizer, LogicalPlan, Machine, Time};
use einsum_sim::Topology;

use crate::pipeline::{Request, plan_and_compile};
use crate::refine::{DEFAULT_REFINE, Refinement};
use crate::rewrite::{Change, Kept, Rules, fastest_form};
use crate::{Error, Result, Snapshot, Tensor};

mod binding;

use binding::Binding;

/// How to compile: the devices, the backend that runs the result, the logical optimizer and
/// its cost model, the exchange-program schedule, and the topology that synthesis and
/// prediction target.
///
/// Every extension point is a value: a strategy or cost model from any crate (an
/// implementation of [`LogicalOptimizer`] or [`CostModel`]) is plugged in as it is, with no
/// registration. The names the command line accepts come from the tables
/// [`names::optimizers`](crate::names::optimizers),
/// [`names::cost_models`](crate::names::cost_models), [`einsum_sim::PRESETS`] and
/// [`backends`](crate::backends); they build these values.
///
/// # Example
/// A strategy defined outside the workspace (here: every operator takes its first
/// candidate), compiled for 2 devices:
/// ```no_run
/// use std::sync::Arc;
///
/// use einsummable::{CompileOptions, DType, LogicalOptimizer, Workload, compile};
/// use einsum_logical::{Problem, Result};
///
/// struct First;
///
/// impl LogicalOptimizer for First {
///     fn name(&self) -> &str {
///         "first"
///     }
///     fn solve(&self, problem: &Problem) -> Result<Vec<usize>> {
///         Ok(vec![0; problem.ops.len()])
///     }
/// }
///
/// let graph = Workload::parse("matmul:n=64").unwrap().build(DType::F32).unwrap();
/// let options = CompileOptions::new().devices(2).optimizer(Arc::new(First));
/// let exe = compile(&graph, &options).unwrap();
/// assert_eq!(exe.plan().optimizer, "first");
/// ```
#[derive(Clone)]
pub struct CompileOptions {
    /// Number of devices `p` (virtual devices on the CPU backend).
    pub devices: usize,
    /// The backend that runs the executable: one of [`backends`](crate::backends) or any
    /// other implementation of the core contract ([`einsum_core::Backend`]).
    pub backend: Arc<dyn Backend>,
    /// The logical optimizer: one of [`names::optimizers`](crate::names::optimizers) or any
    /// other strategy.
    pub optimizer: Arc<dyn LogicalOptimizer>,
    /// The cost model the optimizer minimizes: one of
    /// [`names::cost_models`](crate::names::cost_models) or any other; `None`: the `time`
    /// model of [`topology`](Self::topology).
    pub cost: Option<Arc<dyn CostModel>>,
    /// How exchange programs are synthesized (Section 5.4): [`NaiveSynthesizer`],
    /// [`SearchSynthesizer`](einsum_compile::SearchSynthesizer) or any other
    /// [`ExchangeSynthesizer`], e.g. one of another crate.
    pub synthesizer: Arc<dyn ExchangeSynthesizer>,
    /// The machine that synthesis and prediction target; it needs at least `devices` sites.
    pub topology: Topology,
    /// Bytes per device the plan's peak (resident inputs and transient buffers) must fit;
    /// `None`: the topology's HBM capacity less [`MEMORY_RESERVE`](crate::pipeline::MEMORY_RESERVE).
    pub memory_budget: Option<f64>,
    /// Whole-plan predictions spent comparing the optimizer's plan with its alternatives
    /// (`einsum_compile::refine`; 0 keeps its plan as it is).
    pub refine: usize,
    /// Whether the graph is also planned in its other forms under [`rules`](Self::rules)
    /// ([`crate::rewrite`]: its contraction networks reassociated, its projections merged,
    /// its elementwise chains fused into their einsums),
    /// the fastest predicted kept (the executable binds the graph's inputs and saved outputs
    /// in every form); `false` plans the graph as written.
    pub rewrites: bool,
    /// The rewrites weighed where [`rewrites`](Self::rewrites) is on ([`Rules::default`]).
    pub rules: Rules,
}

/// The devices a compile plans for unless told otherwise: [`CompileOptions::default`],
/// `--devices` of the command line and the Python binding's `compile`. One DGX node's GPUs.
pub const DEFAULT_DEVICES: usize = 8;

/// The machine a compile targets unless told otherwise: [`CompileOptions::default`]'s, and
/// on the command line and in the Python binding, scaled to the fewest nodes that hold the
/// devices.
pub const DEFAULT_TOPOLOGY: &str = "dgx-a100";

impl Default for CompileOptions {
    /// [`DEFAULT_DEVICES`] on the CPU backend, the DP under the `time` model of
    /// [`DEFAULT_TOPOLOGY`], naive exchange programs, that topology, the default memory budget.
    fn default() -> Self {
        let topology = Topology::preset(DEFAULT_TOPOLOGY).expect("the default topology is a preset");
        Self {
            devices: DEFAULT_DEVICES,
            backend: Arc::new(CpuBackend::new().with_fusion(&einsum_ops::fused::RULES)),
            optimizer: Arc::new(Dp),
            cost: None,
            synthesizer: Arc::new(NaiveSynthesizer),
            topology,
            memory_budget: None,
            refine: DEFAULT_REFINE,
            rewrites: true,
            rules: Rules::default(),
        }
    }
}

impl CompileOptions {
    /// The [`Default`] options, to change with the builder methods below.
    pub fn new() -> Self {
        Self::default()
    }

    /// Compiles for `devices` devices.
    #[must_use]
    pub fn devices(mut self, devices: usize) -> Self {
        self.devices = devices;
        self
    }

    /// Runs the executable on `backend` (any [`einsum_core::Backend`], e.g. one of another
    /// crate).
    #[must_use]
    pub fn backend(mut self, backend: Arc<dyn Backend>) -> Self {
        self.backend = backend;
        self
    }

    /// Plans with `optimizer` (any [`LogicalOptimizer`], e.g. one of another crate).
    #[must_use]
    pub fn optimizer(mut self, optimizer: Arc<dyn LogicalOptimizer>) -> Self {
        self.optimizer = optimizer;
        self
    }

    /// Prices candidates with `cost` (any [`CostModel`]) instead of the `time` model of the
    /// topology.
    #[must_use]
    pub fn cost(mut self, cost: Arc<dyn CostModel>) -> Self {
        self.cost = Some(cost);
        self
    }

    /// Synthesizes exchange programs with `synthesizer` (any [`ExchangeSynthesizer`], e.g. one
    /// of another crate).
    #[must_use]
    pub fn synthesizer(mut self, synthesizer: Arc<dyn ExchangeSynthesizer>) -> Self {
        self.synthesizer = synthesizer;
        self
    }

    /// Targets `topology` (a preset, `Topology::preset`, or a file, `Topology::named`); unless
    /// a cost model was given, plans are priced by the `time` model of this machine.
    #[must_use]
    pub fn topology(mut self, topology: Topology) -> Self {
        self.topology = topology;
        self
    }

    /// Fits every device's peak within `budget` bytes (`None`: the default budget).
    #[must_use]
    pub fn memory_budget(mut self, budget: Option<f64>) -> Self {
        self.memory_budget = budget;
        self
    }

    /// Spends `predictions` whole-plan predictions on the optimizer's alternatives to its
    /// plan (0: its plan as it is).
    #[must_use]
    pub fn refine(mut self, predictions: usize) -> Self {
        self.refine = predictions;
        self
    }

    /// Weighs the other forms of the graph's contraction networks (`true`, the default) or
    /// plans the graph as written (`false`).
    #[must_use]
    pub fn rewrites(mut self, on: bool) -> Self {
        self.rewrites = on;
        self
    }

    /// Weighs the forms `rules` give (with rewrites on).
    #[must_use]
    pub fn rules(mut self, rules: Rules) -> Self {
        self.rules = rules;
        self
    }
}

impl fmt::Debug for CompileOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CompileOptions")
            .field("devices", &self.devices)
            .field("backend", &self.backend.name())
            .field("optimizer", &self.optimizer.name())
            .field("cost", &self.cost)
            .field("synthesizer", &self.synthesizer)
            .field("topology", &self.topology.name())
            .field("memory_budget", &self.memory_budget)
            .field("refine", &self.refine)
            .field("rewrites", &self.rewrites)
            .field("rules", &self.rules)
            .finish()
    }
}

/// What one `execute` did.
#[derive(Clone, Debug)]
pub struct RunReport {
    /// Wall time of the run, in ms.
    pub wall_ms: f64,
    /// The backend's own measure of the run's device time, in ms, where it has one (the
    /// CUDA backend's events around the launch; see [`einsum_core::Prepared::last_run_device_seconds`]).
    pub device_ms: Option<f64>,
    /// When each task of the run ran, where the backend was asked to record it
    /// ([`Executable::record_task_timings`]) and does (the CPU backend); `None` otherwise.
    pub task_timings: Option<Vec<einsum_core::TaskTiming>>,
}

/// A compiled graph: its logical plan, exchange programs and task graph, ready to run
/// once every input is loaded.
///
/// The task graph is prepared on the chosen backend at compile time
/// ([`einsum_core::Backend::prepare`]); an input is handed to the prepared executable as
/// soon as it is loaded: its blocks go onto their devices once and stay resident, and every
/// `execute` runs the rest of the task graph on them.
///
/// It owns what it needs: a [`Snapshot`] of the graph as it was compiled (which shares the
/// computation), so it borrows nothing and the graph may keep growing; and it is `Send`, so
/// it may move to another thread.
pub struct Executable {
    graph: Snapshot,
    plan: LogicalPlan,
    compiled: Arc<Compiled>,
    /// The per-device memory budget the plan fits, and the devices' smallest HBM capacity.
    budget: f64,
    capacity: f64,
    /// Wall times of the logical optimizer and of physical compilation, in ms (every round
    /// of the plan-then-compile pipeline added up).
    optimize_ms: f64,
    compile_ms: f64,
    /// What the refinement of the plan did (`None` when it scored nothing).
    refinement: Option<Refinement>,
    /// The task graph prepared on the backend (which holds the kernel library).
    prepared: Box<dyn Prepared>,
    /// The backend's name, and the host bytes it needs besides the input values
    /// ([`einsum_core::Backend::host_bytes`]).
    backend: String,
    backend_host_bytes: usize,
    inputs: Vec<TensorId>,
    /// What the executable holds of each input beside the backend's copy.
    loaded: Vec<Loaded>,
    outputs: HashMap<TensorId, HostTensor>,
    /// The form planned, where the graph was weighed in other forms: per network, its
    /// association as written and as planned; per merge site, whether it was merged.
    rewrites: Option<Vec<Change>>,
    /// Where each input goes in the form planned.
    binding: Binding,
    /// The form planned (the graph as written, or a rewritten form of it).
    form: Snapshot,
}

/// The kernel library a prepared executable holds: the graph's operators (its snapshot)
/// and the compiled kernel table.
struct GraphKernels {
    graph: Snapshot,
    compiled: Arc<Compiled>,
}

impl GraphKernels {
    fn library(&self) -> ComputationKernels<'_> {
        ComputationKernels(self.graph.computation(), &self.compiled.kernels)
    }
}

impl KernelLibrary for GraphKernels {
    fn run(
        &self,
        kernel: usize,
        inputs: &[HostTensor],
        outputs: &[(TensorType, DType)],
    ) -> std::result::Result<Vec<HostTensor>, String> {
        self.library().run(kernel, inputs, outputs)
    }

    fn name(&self, kernel: usize) -> String {
        self.library().name(kernel)
    }

    fn info(&self, kernel: usize) -> Option<KernelInfo<'_>> {
        self.library().kernel_info(kernel)
    }
}

/// Chooses a spec for every operator (logical optimization) within the memory budget,
/// synthesizes the exchange programs and lowers everything to a task graph (physical
/// optimization), for `options` (see [`plan_and_compile`]).
///
/// # Errors
/// Besides bad options and compile errors: `einsum_core::BackendError::Unsupported`, naming
/// the operator, when the backend has no kernel for one of the graph's operators (the CPU
/// backend runs them all), `Unavailable` when the backend cannot run here
/// (no GPU), both before any planning; `einsum_logical::Error::DoesNotFit` when no plan fits
/// the devices' memory, `OverBudget` for a baseline whose plan does not.
///
/// `graph` is a [`Graph`](crate::Graph) (`&graph`, of which the executable keeps a
/// [`Snapshot`]: the graph may grow afterwards) or a snapshot already taken.
///
/// # Example
/// The graph grows after a compile; the executable keeps it as it was compiled:
/// ```
/// use einsummable::{CompileOptions, DType, Graph, UnaryOp, compile};
///
/// let mut g = Graph::new();
/// let x = g.input("x", &[("i", 8)], DType::F32)?;
/// let y = g.unary(x, UnaryOp::Relu)?;
/// g.save(y)?;
/// let mut exe = compile(&g, &CompileOptions::new().devices(2))?;
/// let z = g.unary(y, UnaryOp::Neg)?;
/// g.save(z)?;
/// exe.load_random(0)?;
/// exe.execute()?;
/// assert_eq!(exe.offload(y)?.ty(), &g.desc(y)?.tensor_type());
/// assert!(exe.offload(z).is_err());
/// # Ok::<(), einsummable::Error>(())
/// ```
pub fn compile(graph: impl Into<Snapshot>, options: &CompileOptions) -> Result<Executable> {
    let graph = graph.into();
    let backend = options.backend.as_ref();
    let comp = graph.computation();
    // Before any work, with no device involved: an operator the backend has no kernel for,
    // then a backend that cannot run here (a machine without a GPU says so at once).
    check_operators(backend, comp)?;
    backend.check_available()?;
    if comp.saved().is_empty() {
        // Nothing would be computed, and `execute` would return no output at all.
        return Err(Error::Usage(
            "the graph saves no tensor, so there is nothing to compute; save its outputs first".into(),
        ));
    }
    let time;
    let cost: &dyn CostModel = match &options.cost {
        Some(cost) => cost.as_ref(),
        None => {
            time = Time::on(Machine::from_topology(&options.topology));
            &time
        }
    };
    // A form's operators (a merge's slices) must be the backend's too; forms are weighed
    // without the refinement, which the form kept gets.
    let planner = |refine: usize| {
        move |form: &Computation| -> Result<_> {
            check_operators(backend, form)?;
            Ok(plan_and_compile(&Request { refine, ..request(form, options, cost) })?)
        }
    };
    let refined = planner(options.refine);
    let refined: Option<crate::rewrite::Planner<'_, _>> = (options.refine > 0).then_some(&refined);
    let rules = options.rewrites.then_some(&options.rules);
    let Kept { planned, graph: form, rewrites, derived } =
        fastest_form(&graph, rules, planner(0), refined, |p| p.compiled.predicted_ms)?;
    let binding = Binding::new(comp, form.computation(), &derived)?;
    let (plan, budget, capacity) = (planned.plan, planned.budget, planned.capacity);
    let (optimize_ms, compile_ms, refinement) = (planned.optimize_ms, planned.compile_ms, planned.refinement);
    let compiled = Arc::new(planned.compiled);
    // Every form has the graph's saved outputs in the same order, and its inputs but the
    // merged weights: the executable binds them by the graph's handles (building a merged
    // weight from its parts) and runs the form's operators.
    let kernels = Arc::new(GraphKernels { graph: form.clone(), compiled: Arc::clone(&compiled) });
    let prepared = backend.prepare(&compiled.graph, kernels)?;
    let backend_host_bytes = backend.host_bytes(&compiled.graph);
    let inputs = comp.inputs();
    Ok(Executable {
        graph,
        plan,
        compiled,
        budget,
        capacity,
        optimize_ms,
        compile_ms,
        refinement,
        prepared,
        backend: backend.name().to_string(),
        backend_host_bytes,
        loaded: vec![Loaded::No; inputs.len()],
        inputs,
        outputs: HashMap::new(),
        rewrites,
        binding,
        form,
    })
}

/// The planning request of `comp` under `options`, priced by `cost`.
fn request<'a>(comp: &'a Computation, options: &'a CompileOptions, cost: &'a dyn CostModel) -> Request<'a> {
    Request {
        comp,
        devices: options.devices,
        strategy: options.optimizer.as_ref(),
        cost,
        topology: &options.topology,
        synthesizer: Arc::clone(&options.synthesizer),
        memory_budget: options.memory_budget,
        host_memory: None,
        refine: options.refine,
    }
}

/// What an executable holds of one input, beside the blocks the backend holds.
#[derive(Clone, Debug)]
enum Loaded {
    /// Nothing yet: the input is not loaded.
    No,
    /// The whole value, for reference runs.
    Kept(HostTensor),
    /// Nothing: loaded with [`Executable::load_resident`].
    Resident,
}

// An executable moves between threads: this fails to compile if a field stops being `Send`.
const _: fn() = || {
    fn send<T: Send>() {}
    send::<Executable>();
};

impl Executable {
    /// Supplies the value of a computation input; its type and dtype must match. Its blocks
    /// are loaded onto their devices at once and stay resident (host memory on the CPU
    /// backend, GPU memory on CUDA).
    pub fn load(&mut self, input: Tensor, value: HostTensor) -> Result<()> {
        let slot = self.load_value(input, &value)?;
        self.loaded[slot] = Loaded::Kept(value);
        Ok(())
    }

    /// [`Executable::load`] without keeping the value on the host beside the backend's
    /// blocks: a model's weights, which would otherwise be held twice (in full, beside the
    /// blocks the devices hold). [`Executable::loaded_inputs`] omits such an input, so a
    /// reference run cannot be made on it.
    pub fn load_resident(&mut self, input: Tensor, value: HostTensor) -> Result<()> {
        let slot = self.load_value(input, &value)?;
        self.loaded[slot] = Loaded::Resident;
        Ok(())
    }

    /// Overwrites the elements of loaded input `input` that `part` covers, in place on the
    /// devices: `part`'s type must lie within the input's (a projection of it: the same rank,
    /// inside its bounds, at its absolute position) and its dtype be the input's. Every
    /// device block holding some of those elements gets them (a replicated block on each of
    /// its devices; [`Prepared::write`]); every other element keeps its value. It costs the
    /// part, not the input: a key-value cache resident on the devices gets one new row per
    /// generated token this way, where [`Executable::load`] would move the whole cache. When
    /// the executable keeps the input's whole value (loaded with [`Executable::load`]), that
    /// value is overwritten too, so that [`Executable::loaded_inputs`] (and a reference run
    /// on them) has what the devices hold.
    ///
    /// # Errors
    /// [`Error::Usage`] for a tensor that is not an input of the graph, an input not loaded
    /// yet, or a part that does not lie within the input or has another dtype (naming the
    /// input); [`Error::Backend`] when the backend fails to write.
    pub fn write_input(&mut self, input: Tensor, part: HostTensor) -> Result<()> {
        let slot = self.input_slot(input, "written")?;
        if matches!(self.loaded[slot], Loaded::No) {
            return Err(Error::Usage(format!(
                "input `{}` is not loaded; load its whole value before writing a part of it",
                self.input_name(slot)
            )));
        }
        let desc = self.graph.desc(input)?;
        if !part.ty().is_projection_of(&desc.tensor_type()) || part.dtype() != desc.dtype {
            return Err(Error::Usage(format!(
                "input `{}` is {desc}, the part is {} {}, which is not a part of it",
                self.input_name(slot),
                part.ty(),
                part.dtype()
            )));
        }
        self.binding.write(self.prepared.as_mut(), slot, &part)?;
        if let Loaded::Kept(value) = &mut self.loaded[slot] {
            value.overwrite(&part)?;
        }
        Ok(())
    }

    /// The slot of input `input`, or [`Error::Usage`] saying it cannot be `verb` (loaded,
    /// written) when it is not an input of the graph.
    fn input_slot(&self, input: Tensor, verb: &str) -> Result<usize> {
        let id = self.graph.own_tensor(input)?;
        self.inputs
            .iter()
            .position(|&t| t == id)
            .ok_or_else(|| Error::Usage(format!("tensor {id} is not an input of the graph, so it cannot be {verb}")))
    }

    /// Checks `value` against input `input` and hands it to the backend; returns its slot.
    fn load_value(&mut self, input: Tensor, value: &HostTensor) -> Result<usize> {
        let slot = self.input_slot(input, "loaded")?;
        let desc = self.graph.desc(input)?;
        if *value.ty() != desc.tensor_type() || value.dtype() != desc.dtype {
            return Err(Error::Usage(format!(
                "input `{}` is {desc}, the value is {} {}",
                self.input_name(slot),
                value.ty(),
                value.dtype()
            )));
        }
        self.binding.load(self.prepared.as_mut(), slot, value)?;
        Ok(slot)
    }

    /// Loads seeded random values in `[-1, 1)` into every input (onto the devices at once,
    /// as [`Executable::load`] does).
    pub fn load_random(&mut self, seed: u64) -> Result<()> {
        self.load_random_keeping(seed, true)
    }

    /// [`Executable::load_random`] without keeping the values on the host beside the
    /// backend's blocks ([`Executable::load_resident`]): for a process that needs none of
    /// them whole (a rank of an MPI job other than 0, which holds its own devices' blocks).
    pub fn load_random_resident(&mut self, seed: u64) -> Result<()> {
        self.load_random_keeping(seed, false)
    }

    /// Loads seeded random values into every input, keeping each value on the host where
    /// `keep` asks.
    fn load_random_keeping(&mut self, seed: u64, keep: bool) -> Result<()> {
        let mut values = self.graph.computation().random_inputs(seed);
        for (slot, t) in self.inputs.iter().enumerate() {
            if let Some(v) = values.remove(t) {
                self.binding.load(self.prepared.as_mut(), slot, &v)?;
                self.loaded[slot] = if keep { Loaded::Kept(v) } else { Loaded::Resident };
            }
        }
        Ok(())
    }

    /// The parts of input `input` the backend keeps, where it keeps less than the whole
    /// value ([`Prepared::needed_parts`]: a rank of an MPI job keeps its own devices'
    /// blocks); `None` where it needs the whole, as it does for a weight the form planned
    /// merges with others ([`crate::rewrite::merge`]). [`Executable::load_resident_parts`]
    /// takes them, read alone (a checkpoint's rows of a weight).
    pub fn needed_parts(&self, input: Tensor) -> Result<Option<Vec<TensorType>>> {
        let slot = self.input_slot(input, "loaded")?;
        Ok(self.binding.slot(slot).and_then(|s| self.prepared.needed_parts(s)))
    }

    /// Loads input `input` from `parts` that cover every part [`Executable::needed_parts`]
    /// lists, without keeping a host copy (as [`Executable::load_resident`]). A weight merged
    /// with others (whose needed part is the whole) takes one part, its whole value.
    ///
    /// # Errors
    /// [`Error::Usage`] for a merged weight given other parts than its whole value.
    pub fn load_resident_parts(&mut self, input: Tensor, parts: &[HostTensor]) -> Result<()> {
        let slot = self.input_slot(input, "loaded")?;
        match self.binding.slot(slot) {
            Some(s) => self.prepared.load_parts(s, parts)?,
            None => match parts {
                [whole] => {
                    self.load_value(input, whole)?;
                }
                _ => {
                    return Err(Error::Usage(format!(
                        "input `{}` is merged into `{}`: load its whole value, not {} parts",
                        self.input_name(slot),
                        self.binding.merged_into(slot).unwrap_or_default(),
                        parts.len()
                    )));
                }
            },
        }
        self.loaded[slot] = Loaded::Resident;
        Ok(())
    }

    /// The computation compiled (the graph's).
    pub fn computation(&self) -> &Computation {
        self.graph.computation()
    }

    /// The computation planned: the graph's own, or the form the rewrites kept
    /// ([`Executable::rewrites`]), whose vertices the plan, the placement and the task graph
    /// name.
    pub fn planned_computation(&self) -> &Computation {
        self.form.computation()
    }

    /// The tensor of [`Executable::planned_computation`] that stands for `t` of the graph: an
    /// input (by name) or a saved output (in the same place); the same tensor where the graph
    /// is planned as written.
    ///
    /// # Errors
    /// [`Error::Usage`] for another tensor of a rewritten graph, or an input merged with
    /// others (which the form planned reads only as part of the merged weight).
    pub fn planned_tensor(&self, t: Tensor) -> Result<TensorId> {
        let id = self.graph.own_tensor(t)?;
        let (comp, form) = (self.graph.computation(), self.form.computation());
        if std::ptr::eq(comp, form) {
            return Ok(id);
        }
        let name = comp.tensor_name(id);
        let found = if let Some(slot) = self.inputs.iter().position(|&i| i == id) {
            self.binding.slot(slot).and_then(|s| form.inputs().get(s).copied())
        } else {
            comp.saved().iter().position(|&s| s == id).and_then(|k| form.saved().get(k).copied())
        };
        found.ok_or_else(|| {
            Error::Usage(format!("tensor `{name}` is neither an input nor a saved output of the form planned"))
        })
    }

    /// The loaded inputs, by tensor id (for a reference run on the same values), but for
    /// those loaded with [`Executable::load_resident`].
    pub fn loaded_inputs(&self) -> HashMap<TensorId, HostTensor> {
        let kept = self.inputs.iter().zip(&self.loaded);
        kept.filter_map(|(t, v)| match v {
            Loaded::Kept(v) => Some((*t, v.clone())),
            Loaded::No | Loaded::Resident => None,
        })
        .collect()
    }

    /// Runs the task graph on the backend. Every input must be loaded.
    pub fn execute(&mut self) -> Result<RunReport> {
        if let Some(slot) = self.loaded.iter().position(|l| matches!(l, Loaded::No)) {
            return Err(Error::Usage(format!("input `{}` is not loaded", self.input_name(slot))));
        }
        let comp = self.graph.computation();
        let started = Instant::now();
        // The inputs are resident on the devices already.
        let outs = self.prepared.run()?;
        let wall_ms = started.elapsed().as_secs_f64() * 1e3;
        self.outputs = comp.saved().iter().copied().zip(outs).collect();
        let device_ms = self.prepared.last_run_device_seconds().map(|s| s * 1e3);
        let task_timings = self.prepared.take_task_timings();
        Ok(RunReport { wall_ms, device_ms, task_timings })
    }

    /// Asks the backend to record when each task of every later [`Executable::execute`]
    /// ran ([`RunReport::task_timings`]), or (`on` false) to stop; returns whether it does
    /// (the CPU backend does, the CUDA backend does not). Off by default, so that a run pays
    /// for no per-task clock unless asked (`run --trace`).
    pub fn record_task_timings(&mut self, on: bool) -> bool {
        self.prepared.record_task_timings(on)
    }

    /// The value of a saved output after `execute`.
    pub fn offload(&self, output: Tensor) -> Result<HostTensor> {
        let id = self.graph.own_tensor(output)?;
        if !self.graph.computation().saved().contains(&id) {
            return Err(Error::Usage(format!("tensor {id} is not a saved output; save it before compiling")));
        }
        self.outputs.get(&id).cloned().ok_or_else(|| Error::Usage("offload before execute".into()))
    }

    /// The saved outputs after `execute`, by tensor id.
    pub fn outputs(&self) -> &HashMap<TensorId, HostTensor> {
        &self.outputs
    }

    /// Per contraction network of the graph, its association as written and as planned,
    /// where the rewrites weighed other forms ([`CompileOptions::rewrites`]); `None` where
    /// none were weighed (rewrites off, or no network to rewrite).
    pub fn rewrites(&self) -> Option<&[Change]> {
        self.rewrites.as_deref()
    }

    /// The logical plan (of the form planned, where the rewrites kept another form: its
    /// operators are that form's, [`Executable::rewrites`]).
    pub fn plan(&self) -> &LogicalPlan {
        &self.plan
    }

    /// Every synthesized exchange program (printable as ExProg text).
    pub fn programs(&self) -> &[ExchangeProgram] {
        &self.compiled.programs
    }

    /// The physical compilation: task graph, kernel table, placement.
    pub fn compiled(&self) -> &Compiled {
        &self.compiled
    }

    /// The per-device memory budget (bytes) the plan was made to fit.
    pub fn memory_budget(&self) -> f64 {
        self.budget
    }

    /// The smallest HBM capacity (bytes) among the devices of the topology.
    pub fn memory_capacity(&self) -> f64 {
        self.capacity
    }

    /// Tasks, bytes moved and memory per device (resident inputs, transient peak, peak) of
    /// the task graph, as computed once by the compile.
    pub fn stats(&self) -> &MemoryStats {
        &self.compiled.stats
    }

    /// Wall time of the logical optimizer in `compile`, in ms (every replanning under the
    /// memory budget included).
    pub fn optimize_ms(&self) -> f64 {
        self.optimize_ms
    }

    /// Wall time of the physical compilation in `compile` (placement, exchange programs,
    /// lowering), in ms.
    pub fn compile_ms(&self) -> f64 {
        self.compile_ms
    }

    /// What the refinement did: the optimizer's alternatives scored by whole-plan
    /// prediction, and whether one replaced its plan (`None` when nothing was scored).
    pub fn refinement(&self) -> Option<&Refinement> {
        self.refinement.as_ref()
    }

    /// The predicted time on the topology, in ms: the whole task graph simulated once, roofline
    /// kernels and simulated exchanges overlapped as dependencies allow (`einsum_compile::predict`).
    pub fn predicted_ms(&self) -> f64 {
        self.compiled.predicted_ms
    }

    /// The host bytes a run allocates: every input's value (kept for reference checks), what
    /// the backend needs besides ([`einsum_core::Backend::host_bytes`]: every device's peak
    /// on the CPU backend, whose devices are host memory; a staging copy of the inputs on
    /// CUDA), the saved outputs and, with `reference`, every tensor of the single-device
    /// reference evaluation (as f32). An estimate from the task graph, so that
    /// a run too large for the machine is refused before it allocates.
    pub fn host_bytes_needed(&self, reference: bool) -> usize {
        let comp = self.graph.computation();
        let bytes = |t: &TensorId| {
            comp.desc(*t).map_or(0, |d| d.shape().iter().fold(d.dtype.size_bytes(), |a, &n| a.saturating_mul(n)))
        };
        let inputs = self.inputs.iter().map(bytes).fold(0, usize::saturating_add);
        let outputs = comp.saved().iter().map(bytes).fold(0, usize::saturating_add);

        let reference = if reference {
            comp.topo_order()
                .into_iter()
                .filter_map(|id| comp.node(id))
                .flat_map(|n| n.outputs().iter().map(|d| d.shape().iter().fold(4usize, |a, &n| a.saturating_mul(n))))
                .fold(0, usize::saturating_add)
        } else {
            0
        };
        let derived = self.binding.derived_bytes();
        inputs
            .saturating_add(derived)
            .saturating_add(self.backend_host_bytes)
            .saturating_add(outputs)
            .saturating_add(reference)
    }

    /// Refuses a run whose [`Executable::host_bytes_needed`] exceeds the memory this process can
    /// still allocate ([`einsum_core::host_memory`]: `MemAvailable`, the address-space limit
    /// less what is mapped, the memory cgroup's limit less its usage), before anything is
    /// allocated; where the system does not say (not Linux), it passes.
    pub fn check_host_memory(&self, reference: bool) -> Result<()> {
        let needed = self.host_bytes_needed(reference);
        match einsum_core::host_memory::available_host_memory() {
            Some(available) if needed > available => Err(Error::HostMemory {
                needed,
                available,
                what: format!(
                    "inputs, the {} backend's host buffers and outputs{}",
                    self.backend,
                    if reference { ", and the single-device reference" } else { "" }
                ),
            }),
            _ => Ok(()),
        }
    }

    fn input_name(&self, slot: usize) -> String {
        self.graph.computation().node(self.inputs[slot].op).map_or_else(String::new, |n| n.name().to_string())
    }
}

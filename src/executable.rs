//! Compiling a graph for a backend, and running it: `compile`, then `load`, `execute`,
//! `offload` (Section 2's `compileGraph` and the programmer's view after it).

use std::{collections::HashMap, time::Instant};

use einsum_core::{Backend, HostTensor, taskgraph::MemoryStats};
use einsum_cpu::CpuBackend;
use einsum_cuda::{CudaExecutable, CudaOptions};
use einsum_exprog::{Compiled, ComputationKernels, ExchangeProgram, Schedule, compile as compile_physical};
use einsum_joinagg::TensorId;
use einsum_logical::{LogicalPlan, cost_model_by_name, optimizer_by_name};
use einsum_sim::Topology;

use crate::{Error, Graph, Result, Tensor};

/// How to compile: the devices, the backend that runs the result, the logical optimizer and
/// its cost model, the exchange-program schedule, and the topology that synthesis and
/// prediction target.
#[derive(Clone, Debug)]
pub struct CompileOptions {
    /// Number of devices `p` (virtual devices on the CPU backend).
    pub devices: usize,
    /// The backend: `cpu` or `cuda`.
    pub backend: String,
    /// On `cuda`: issue the tasks stream-ordered on every run instead of replaying one
    /// captured CUDA graph (for debugging).
    pub eager: bool,
    /// The logical optimizer: `dp`, `greedy`, `random` or `ilp`, or a baseline: `data`,
    /// `megatron`, `ulysses` or `mesh2d`.
    pub optimizer: String,
    /// The cost model: `time` or `proxy`.
    pub cost: String,
    /// Seed of the random optimizer.
    pub seed: u64,
    /// `Naive` or `Search` exchange programs (Section 5.4).
    pub schedule: Schedule,
    /// A topology preset (`dgx-a100`, ...) or a topology file; it needs at least `devices`
    /// sites.
    pub topology: String,
}

impl Default for CompileOptions {
    /// 8 devices on the CPU backend, the DP under the time model, naive schedules, `dgx-a100`.
    fn default() -> Self {
        Self {
            devices: 8,
            backend: "cpu".into(),
            eager: false,
            optimizer: "dp".into(),
            cost: "time".into(),
            seed: 0,
            schedule: Schedule::Naive,
            topology: "dgx-a100".into(),
        }
    }
}

/// What one `execute` did.
#[derive(Clone, Debug)]
pub struct RunReport {
    /// Wall time of the run, in ms.
    pub wall_ms: f64,
}

/// A compiled graph: its logical plan, exchange programs and task graph, ready to run
/// once every input is loaded.
pub struct Executable<'g> {
    graph: &'g Graph,
    plan: LogicalPlan,
    compiled: Compiled,
    runner: Runner,
    inputs: Vec<TensorId>,
    loaded: Vec<Option<HostTensor>>,
    outputs: HashMap<TensorId, HostTensor>,
}

/// The backend an executable runs on: a stateless [`Backend`], or a CUDA executable
/// prepared once (kernels compiled, graph captured) and replayed.
enum Runner {
    Backend(Box<dyn Backend>),
    Cuda(Box<CudaExecutable>),
}

/// Chooses a spec for every operator (logical optimization), synthesizes the exchange
/// programs and lowers everything to a task graph (physical optimization), for `options`.
pub fn compile<'g>(graph: &'g Graph, options: &CompileOptions) -> Result<Executable<'g>> {
    let cuda = match options.backend.as_str() {
        "cpu" => false,
        // Before any work: a machine without a GPU says so at once.
        "cuda" => einsum_cuda::availability::check_cuda().map(|_| true)?,
        other => return Err(Error::Usage(format!("unknown backend `{other}`; valid: cpu, cuda"))),
    };
    let comp = graph.computation();
    let strategy = optimizer_by_name(&options.optimizer, options.seed)?;
    let model = cost_model_by_name(&options.cost, &options.topology)?;
    let plan = strategy.optimize(comp, options.devices, model.as_ref())?;
    let topology = Topology::named(&options.topology)?;
    let physical = einsum_exprog::CompileOptions { devices: options.devices, schedule: options.schedule, topology };
    let compiled = compile_physical(comp, &plan.specs(), &physical)?;
    let runner = if cuda {
        let cuda_options = CudaOptions { eager: options.eager, max_gpus: None };
        Runner::Cuda(Box::new(CudaExecutable::prepare(comp, &compiled, &cuda_options)?))
    } else {
        Runner::Backend(Box::new(CpuBackend::new()))
    };
    let inputs = comp.inputs();
    Ok(Executable { graph, plan, compiled, runner, loaded: vec![None; inputs.len()], inputs, outputs: HashMap::new() })
}

impl Executable<'_> {
    /// Supplies the value of a computation input; its type and dtype must match.
    pub fn load(&mut self, input: Tensor, value: HostTensor) -> Result<()> {
        let id = self.graph.own_tensor(input)?;
        let slot =
            self.inputs.iter().position(|&t| t == id).ok_or_else(|| {
                Error::Usage(format!("tensor {id} is not an input of the graph, so it cannot be loaded"))
            })?;
        let desc = self.graph.desc(input)?;
        if *value.ty() != desc.tensor_type() || value.dtype() != desc.dtype {
            return Err(Error::Usage(format!(
                "input `{}` is {desc}, the value is {} {}",
                self.input_name(slot),
                value.ty(),
                value.dtype()
            )));
        }
        self.loaded[slot] = Some(value);
        Ok(())
    }

    /// Loads seeded random values in `[-1, 1)` into every input.
    pub fn load_random(&mut self, seed: u64) {
        let values = self.graph.computation().random_inputs(seed);
        for (slot, t) in self.inputs.iter().enumerate() {
            self.loaded[slot] = values.get(t).cloned();
        }
    }

    /// The loaded inputs, by tensor id (for a reference run on the same values).
    pub fn loaded_inputs(&self) -> HashMap<TensorId, HostTensor> {
        self.inputs.iter().zip(&self.loaded).filter_map(|(t, v)| v.clone().map(|v| (*t, v))).collect()
    }

    /// Runs the task graph on the backend. Every input must be loaded.
    pub fn execute(&mut self) -> Result<RunReport> {
        let values = self
            .loaded
            .iter()
            .enumerate()
            .map(|(slot, v)| {
                v.clone().ok_or_else(|| Error::Usage(format!("input `{}` is not loaded", self.input_name(slot))))
            })
            .collect::<Result<Vec<_>>>()?;
        let comp = self.graph.computation();
        let kernels = ComputationKernels(comp, &self.compiled.kernels);
        let started = Instant::now();
        let outs = match &mut self.runner {
            Runner::Backend(b) => b.execute(&self.compiled.graph, &kernels, &values)?,
            Runner::Cuda(c) => c.run(&values)?,
        };
        let wall_ms = started.elapsed().as_secs_f64() * 1e3;
        self.outputs = comp.saved().iter().copied().zip(outs).collect();
        Ok(RunReport { wall_ms })
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

    /// The logical plan.
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

    /// Tasks, bytes moved and peak memory per device of the task graph.
    pub fn stats(&self) -> MemoryStats {
        self.compiled.graph.stats()
    }

    /// The predicted time on the topology, in ms: the whole task graph simulated once, roofline
    /// kernels and simulated exchanges overlapped as dependencies allow (`einsum_exprog::predict`).
    pub fn predicted_ms(&self) -> f64 {
        self.compiled.predicted_ms
    }

    fn input_name(&self, slot: usize) -> String {
        self.graph.computation().node(self.inputs[slot].op).map_or_else(String::new, |n| n.name().to_string())
    }
}

//! `einsummable.compile` and the `Executable` it returns: `run` on NumPy arrays, `plan`,
//! `explain` and `predict`.
//!
//! # Design
//! A Rust [`Executable`] owns what it needs (the graph's snapshot) and is `Send`, not `Sync`:
//! one call at a time. Its calls are long (a compile, a run) and must not hold the GIL, and
//! a Ctrl-C must interrupt the Python caller at once, not when the call ends. So every
//! executable lives on a thread of its own, for its whole life: the thread is given the
//! graph's snapshot, compiles it, and then serves the Python object's calls ([`Job`]s) one
//! at a time, in the order they come, until the Python object is dropped (then it drops the executable
//! and ends). The Python object holds the channel to its thread and what was copied out at
//! compile (names, types, its summary), so it is `Send + Sync`: calls from several Python
//! threads queue on the executable's thread, each whole (a run's loads, execution and
//! offloads are never interleaved with another call's). No `unsafe` is needed.
//!
//! The caller waits for its job with the GIL released and wakes to check for signals
//! ([`crate::worker::wait`]): Ctrl-C raises `KeyboardInterrupt` at once. A job whose caller
//! was interrupted before it started is skipped; one already under way cannot be stopped
//! (the Rust pipeline has no cancellation point) and finishes on the executable's thread, its
//! result dropped:
//! an interrupted run leaves its inputs loaded, as a finished one does, and the executable
//! usable. A job that panics is `EinsummableError`, and the executable refuses every later
//! call (its state may be half-updated), saying so.

use std::sync::Arc;
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::thread;

use einsum_core::{HostTensor, TensorDesc};
use einsum_logical::LogicalOptimizer;
use einsummable::report::{GraphReport, PlanReport, explain_text};
use einsummable::{
    BackendParams, CompileOptions, DEFAULT_TOPOLOGY, Error, ExchangeSynthesizer, Executable, NaiveSynthesizer,
    SearchSynthesizer, Snapshot, Tensor, Topology,
};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::array::{to_host, to_numpy};
use crate::errors::{EinsummableError, IntoPy, to_py};
use crate::graph::{PyGraph, tensor_name};
use crate::progress::{callback, with_progress};
use crate::strategy::PyStrategy;
use crate::worker::{Cancel, Reply, STACK_BYTES, catch, reply_channel, wait};

/// A call served on an executable's thread: given the executable, or, once an earlier job
/// panicked, the message saying it is unusable; returns its own panic's message, if it
/// panicked (the thread then refuses every later job).
type Job = Box<dyn FnOnce(Result<&mut Executable, &str>) -> Option<String> + Send>;

/// What the compiled executable's thread tells `compile`: `repr`'s text, or why not.
type Compiled = Reply<einsummable::Result<String>>;

/// The body of an executable's thread: compiles `graph` with `options` (progress lines to
/// `progress` until `cancel`), sends `compiled` the outcome, then serves `jobs` until the
/// Python object, which holds their sender, is dropped.
fn serve(
    graph: Snapshot,
    options: CompileOptions,
    progress: Option<Arc<Py<PyAny>>>,
    cancel: Cancel,
    compiled: SyncSender<Compiled>,
    jobs: Receiver<Job>,
    names: (String, String),
) {
    let outcome = catch(|| {
        let exe = with_progress(progress, &cancel, || einsummable::compile(graph, &options))?;
        let (workload, topology) = &names;
        let summary = format!(
            "Executable({workload} on {} devices, {} optimizer, predicted {:.4} ms on {topology})",
            exe.plan().devices,
            exe.plan().optimizer,
            exe.predicted_ms(),
        );
        Ok((exe, summary))
    });
    // The options hold the strategy, which may be a Python object: not kept for the
    // executable's whole life.
    drop(options);
    let mut exe = match outcome {
        Ok(Ok((exe, summary))) => {
            if compiled.send(Ok(Ok(summary))).is_err() {
                // `compile` was interrupted: no Python object will ever call.
                return;
            }
            exe
        }
        Ok(Err(e)) => {
            let _ = compiled.send(Ok(Err(e)));
            return;
        }
        Err(panic) => {
            let _ = compiled.send(Err(panic));
            return;
        }
    };
    let mut unusable: Option<String> = None;
    for job in jobs {
        let exe = match &unusable {
            Some(why) => Err(why.as_str()),
            None => Ok(&mut exe),
        };
        if let Some(panic) = job(exe) {
            unusable = Some(format!(
                "the executable is unusable: an earlier call panicked ({panic}) and may have left it \
                 half-updated; compile the graph again"
            ));
        }
    }
}

/// A compiled graph: its plan, exchange programs and task graph, prepared on its backend.
/// Inputs loaded by `run` stay on the devices for later runs. Usable from any thread: calls
/// are served one at a time, in order, on the executable's own thread.
#[pyclass(module = "einsummable", name = "Executable", frozen)]
pub struct PyExecutable {
    /// Sends calls to the executable's thread; dropping it ends the thread.
    jobs: mpsc::Sender<Job>,
    /// Every computation input: name, handle, type.
    inputs: Vec<(String, Tensor, TensorDesc)>,
    /// Every saved output under its name in the Python graph.
    outputs: Vec<(String, Tensor)>,
    /// What the reports call the computation: the workload's spec, or `graph`.
    workload: String,
    topology: String,
    schedule: &'static str,
    /// `repr`'s text, fixed at compile (so that it never waits for a run).
    summary: String,
}

impl PyExecutable {
    /// Runs `f` on the executable's thread after the calls sent before, and waits for its
    /// value with the GIL released: `KeyboardInterrupt` on Ctrl-C (the call is then skipped
    /// if it had not started, else finished there and its value dropped), `EinsummableError`
    /// naming `what` if it panicked or the executable is unusable.
    fn call<R: Send + 'static>(
        &self,
        py: Python<'_>,
        what: &str,
        f: impl FnOnce(&mut Executable) -> R + Send + 'static,
    ) -> PyResult<R> {
        // A Ctrl-C that came since the last check (between calls made by C code, such as
        // `map`, where the interpreter does not look) stops the call before it starts.
        py.check_signals()?;
        let cancel = Cancel::default();
        let (tx, rx) = reply_channel::<Result<R, String>>();
        let abandoned = cancel.clone();
        let job: Job = Box::new(move |exe| {
            if abandoned.is_cancelled() {
                return None;
            }
            match exe {
                Ok(exe) => {
                    let reply = catch(|| f(exe));
                    let panicked = reply.as_ref().err().cloned();
                    let _ = tx.send(reply.map(Ok));
                    panicked
                }
                Err(unusable) => {
                    let _ = tx.send(Ok(Err(unusable.to_string())));
                    None
                }
            }
        });
        self.jobs.send(job).map_err(|_| {
            EinsummableError::new_err(format!("internal error: {what}: the executable's thread has stopped"))
        })?;
        wait(py, rx, &cancel, what)?.map_err(|unusable| EinsummableError::new_err(format!("{what}: {unusable}")))
    }

    fn json<'py>(py: Python<'py>, json: String) -> PyResult<Bound<'py, PyAny>> {
        py.import("json")?.call_method1("loads", (json,))
    }
}

#[pymethods]
impl PyExecutable {
    /// Loads `inputs` (`{input name: ndarray}`, each of the input's dtype and shape) onto the
    /// devices, runs the task graph with the GIL released, and returns every saved output,
    /// `{output name: ndarray}`. An input given once stays loaded for later runs. A run
    /// that needs more host memory than the machine has is refused first (`RunError`).
    /// Ctrl-C raises `KeyboardInterrupt` at once; the run then finishes on the executable's
    /// thread (its inputs loaded, its outputs dropped), and the executable stays usable.
    fn run<'py>(&self, py: Python<'py>, inputs: &Bound<'py, PyDict>) -> PyResult<Bound<'py, PyDict>> {
        // Before converting the inputs, which can take as much memory again.
        self.call(py, "run", |exe| exe.check_host_memory(false))?.py_err()?;
        let mut values: Vec<(Tensor, HostTensor)> = Vec::new();
        for (key, array) in inputs.iter() {
            let name: String = key.extract()?;
            let Some((_, t, desc)) = self.inputs.iter().find(|(n, _, _)| *n == name) else {
                let names: Vec<&str> = self.inputs.iter().map(|i| i.0.as_str()).collect();
                return Err(EinsummableError::new_err(format!(
                    "`{name}` is not an input of the graph; its inputs are {}",
                    names.join(", ")
                )));
            };
            values.push((*t, to_host(&array, &name, desc)?));
        }
        let outputs: Vec<Tensor> = self.outputs.iter().map(|(_, t)| *t).collect();
        let results = self.call(py, "run", move |exe| -> einsummable::Result<Vec<HostTensor>> {
            for (t, value) in values {
                exe.load(t, value)?;
            }
            exe.execute()?;
            outputs.iter().map(|t| exe.offload(*t)).collect()
        })?;
        let results = results.py_err()?;
        let out = PyDict::new(py);
        for ((name, _), value) in self.outputs.iter().zip(&results) {
            out.set_item(name, to_numpy(py, value, name)?)?;
        }
        Ok(out)
    }

    /// The plan as `einsummable plan --json` prints it: every operator's split and costs,
    /// the totals, the predicted time, bytes moved and memory.
    fn plan<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let (workload, topology, schedule) = (self.workload.clone(), self.topology.clone(), self.schedule);
        let json = self.call(py, "plan", move |exe| {
            serde_json::to_string(&PlanReport::compiled(exe, &workload, &topology, schedule))
        })?;
        Self::json(py, json.map_err(|e| EinsummableError::new_err(format!("plan: {e}")))?)
    }

    /// What the compiled task graph predicts on the topology: `predicted_ms`,
    /// `bytes_moved`, each device's peak, resident and transient bytes, and the tasks.
    fn predict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let json = self.call(py, "predict", |exe| serde_json::to_string(&GraphReport::new(exe)))?;
        Self::json(py, json.map_err(|e| EinsummableError::new_err(format!("predict: {e}")))?)
    }

    /// The plan, every exchange program and the memory per device, as `einsummable
    /// explain` prints them.
    fn explain(&self, py: Python<'_>) -> PyResult<String> {
        let (workload, topology) = (self.workload.clone(), self.topology.clone());
        self.call(py, "explain", move |exe| {
            format!(
                "{workload} on {} devices, predicted {:.4} ms on {topology}\n{}",
                exe.plan().devices,
                exe.predicted_ms(),
                explain_text(exe)
            )
        })
    }

    /// Loads every input named like a tensor of the checkpoint in `dir` (a Hugging Face
    /// model directory: `model.safetensors`, or shards behind `model.safetensors.index.json`)
    /// from it onto the devices, each tensor read once in the input's dtype and shape (the
    /// stored shape may merge adjacent dimensions of the input's), and not kept on the host
    /// beside the devices' blocks. Returns the names loaded. A checkpoint that cannot be read
    /// or holds a tensor of another shape is `RunError`, naming the file or tensor.
    fn load_checkpoint(&self, py: Python<'_>, dir: std::path::PathBuf) -> PyResult<Vec<String>> {
        let inputs = self.inputs.clone();
        let loaded = self.call(py, "load_checkpoint", move |exe| -> einsummable::Result<Vec<String>> {
            let checkpoint = einsummable::models::checkpoint::Checkpoint::open(&dir)?;
            let mut names = Vec::new();
            for (name, t, desc) in &inputs {
                if checkpoint.contains(name) {
                    exe.load_resident(*t, checkpoint.read_as(name, desc)?)?;
                    names.push(name.clone());
                }
            }
            Ok(names)
        })?;
        loaded.py_err()
    }

    /// The inputs `run` takes, `[(name, shape, dtype)]` in the graph's order.
    #[getter]
    fn inputs(&self) -> Vec<(String, Vec<usize>, &'static str)> {
        self.inputs.iter().map(|(n, _, d)| (n.clone(), d.shape(), d.dtype.name())).collect()
    }

    /// The outputs `run` returns, by name.
    #[getter]
    fn outputs(&self) -> Vec<String> {
        self.outputs.iter().map(|o| o.0.clone()).collect()
    }

    fn __repr__(&self) -> String {
        self.summary.clone()
    }
}

/// Compiles `graph` for `devices` devices: chooses a spec for every operator with
/// `optimizer` (a name: `dp`, `greedy`, `random`, `ilp`, `data`, `megatron`, `ulysses`,
/// `mesh2d`; or an object with `solve(problem) -> list[int]`) under the `cost` model
/// (`time` or `proxy`) of `topology` (a preset or a topology file; default `dgx-a100`
/// scaled to the devices), within `memory_budget` GB per device (default: the topology's
/// HBM less 10%), synthesizes the exchange programs (`synthesizer`: `naive`, the default, or `search`, with
/// the library's default iterations and wall-time budget; `schedule` is the same keyword's
/// other name) and
/// prepares the task graph on `backend` (`cpu` or `cuda`). The work runs on the
/// executable's own thread while the caller waits with the GIL released; Ctrl-C raises
/// `KeyboardInterrupt` at once (the abandoned compile finishes in the background, calling
/// neither `progress` nor a Python strategy again, and is dropped). `progress`, a callable,
/// receives a line per stage (on the executable's thread). `rewrites` (true by default) also
/// plans other forms of the graph (contraction networks reassociated, projections merged,
/// elementwise chains fused into their einsums) and keeps the fastest, planning a Python
/// strategy's graph once per form; `plan()["rewrites"]` says which was kept.
#[pyfunction]
#[pyo3(signature = (graph, devices = einsummable::DEFAULT_DEVICES, optimizer = None,
    cost = einsummable::names::DEFAULT_COST_MODEL, topology = None, memory_budget = None, backend = "cpu",
    synthesizer = None, seed = 0, progress = None, schedule = None, rewrites = true))]
#[allow(clippy::too_many_arguments)]
pub fn compile(
    py: Python<'_>,
    graph: PyRef<'_, PyGraph>,
    devices: usize,
    optimizer: Option<&Bound<'_, PyAny>>,
    cost: &str,
    topology: Option<String>,
    memory_budget: Option<f64>,
    backend: &str,
    synthesizer: Option<&str>,
    seed: u64,
    progress: Option<Py<PyAny>>,
    schedule: Option<&str>,
    rewrites: bool,
) -> PyResult<PyExecutable> {
    let progress = callback(py, progress)?;
    let (topology_name, machine) = topology_for(topology, devices)?;
    let cancel = Cancel::default();
    let (strategy, python_strategy): (Arc<dyn LogicalOptimizer>, Option<Arc<PyStrategy>>) = match optimizer {
        None => (optimizer_by_name(einsummable::names::DEFAULT_OPTIMIZER, seed)?, None),
        Some(o) if o.is_instance_of::<pyo3::types::PyString>() => {
            (optimizer_by_name(&o.extract::<String>()?, seed)?, None)
        }
        Some(o) => {
            let s = Arc::new(PyStrategy::new(o, cancel.clone())?);
            (Arc::clone(&s) as Arc<dyn LogicalOptimizer>, Some(s))
        }
    };
    let cost_model = Arc::from((einsummable::names::cost_model_entry(cost).py_err()?.build)(&machine));
    let schedule_name = synthesizer_name(synthesizer, schedule)?;
    let synthesizer: Arc<dyn ExchangeSynthesizer> = if schedule_name == "search" {
        Arc::new(SearchSynthesizer { seed, ..SearchSynthesizer::default() })
    } else {
        Arc::new(NaiveSynthesizer)
    };
    let memory_budget = memory_budget_bytes(memory_budget)?;
    let options = CompileOptions {
        devices,
        backend: einsummable::backend_by_name(backend, &BackendParams::default()).py_err()?,
        optimizer: strategy,
        cost: Some(cost_model),
        synthesizer,
        topology: machine,
        memory_budget,
        refine: einsummable::refine::DEFAULT_REFINE,
        rewrites,
        rules: einsummable::rewrite::Rules::default(),
    };
    let snapshot = graph.snapshot();
    let comp = snapshot.computation();
    let inputs = comp
        .inputs()
        .into_iter()
        .map(|id| {
            let desc = comp.desc(id).map_err(Error::from).py_err()?.clone();
            Ok((tensor_name(comp, id), snapshot.tensor(id).py_err()?, desc))
        })
        .collect::<PyResult<Vec<_>>>()?;
    let outputs = graph
        .output_names()
        .iter()
        .map(|(name, id)| Ok((name.clone(), snapshot.tensor(*id).py_err()?)))
        .collect::<PyResult<Vec<_>>>()?;
    let workload = graph.workload().unwrap_or("graph").to_string();
    // The snapshot is the executable's: the Python graph is free for other threads while
    // this one waits.
    drop(graph);
    // A Ctrl-C not yet seen (calls made by C code, such as `map`) stops the call first.
    py.check_signals()?;
    let (jobs, jobs_rx) = mpsc::channel();
    let (tx, rx) = reply_channel();
    let names = (workload.clone(), topology_name.clone());
    let thread_cancel = cancel.clone();
    thread::Builder::new()
        .name("einsummable executable".into())
        .stack_size(STACK_BYTES)
        .spawn(move || serve(snapshot, options, progress, thread_cancel, tx, jobs_rx, names))
        .map_err(|e| EinsummableError::new_err(format!("compile: cannot start the executable's thread: {e}")))?;
    let summary = wait(py, rx, &cancel, "compile")?.map_err(|e| {
        // A strategy's own exception, rather than the plan error that carries its message.
        python_strategy.as_ref().and_then(|s| s.take_raised()).unwrap_or_else(|| to_py(e))
    })?;
    Ok(PyExecutable { jobs, inputs, outputs, workload, topology: topology_name, schedule: schedule_name, summary })
}

/// The machine `topology` names (a preset or a file), or without it the default preset
/// scaled to the fewest nodes that hold `devices`; with its name.
pub fn topology_for(topology: Option<String>, devices: usize) -> PyResult<(String, Topology)> {
    let name = topology.unwrap_or_else(|| {
        einsum_sim::scaled_preset(DEFAULT_TOPOLOGY, devices).unwrap_or_else(|| DEFAULT_TOPOLOGY.to_string())
    });
    let machine = Topology::named(&name).py_err()?;
    Ok((name, machine))
}

/// `memory_budget` in GB as bytes; not positive and finite is an error.
pub fn memory_budget_bytes(memory_budget: Option<f64>) -> PyResult<Option<f64>> {
    match memory_budget {
        None => Ok(None),
        Some(gb) if gb.is_finite() && gb > 0.0 => Ok(Some(gb * 1e9)),
        Some(gb) => Err(EinsummableError::new_err(format!("memory_budget: {gb} is not a positive number of GB"))),
    }
}

/// The exchange synthesizer `compile` names: `synthesizer`, or `schedule`, its other name
/// (the two may both be given only when they agree), `naive` without either.
fn synthesizer_name(synthesizer: Option<&str>, schedule: Option<&str>) -> PyResult<&'static str> {
    let name = match (synthesizer, schedule) {
        (Some(a), Some(b)) if a != b => {
            return Err(EinsummableError::new_err(format!(
                "synthesizer `{a}` and schedule `{b}`: the two keywords name one setting; give one"
            )));
        }
        (Some(name), _) | (None, Some(name)) => name,
        (None, None) => "naive",
    };
    match name {
        "naive" => Ok("naive"),
        "search" => Ok("search"),
        other => Err(EinsummableError::new_err(format!("synthesizer `{other}`: expected naive or search"))),
    }
}

/// The strategy named `name` in the driver's table of names, seeded (`random`).
pub fn optimizer_by_name(name: &str, seed: u64) -> PyResult<Arc<dyn LogicalOptimizer>> {
    Ok(Arc::from(einsummable::names::optimizer_by_name(name, seed).py_err()?))
}

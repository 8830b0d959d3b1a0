//! `einsummable.compile` and the `Executable` it returns: `run` on NumPy arrays, `plan`,
//! `explain` and `predict`.

use std::mem::ManuallyDrop;
use std::ptr::NonNull;
use std::sync::Arc;
use std::time::Duration;

use einsum_core::TensorDesc;
use einsum_logical::LogicalOptimizer;
use einsummable::report::{GraphReport, PlanReport, explain_text};
use einsummable::{BackendParams, CompileOptions, Error, Executable, Graph, Schedule, Tensor, Topology};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::array::{to_host, to_numpy};
use crate::errors::{EinsummableError, IntoPy, to_py};
use crate::graph::{PyGraph, tensor_name};
use crate::progress::with_progress;
use crate::strategy::PyStrategy;

/// The machine planned for without a topology: as on the command line, `dgx-a100` scaled to
/// the fewest nodes that hold the devices.
const DEFAULT_TOPOLOGY: &str = "dgx-a100";

/// Search iterations and wall time per exchange program under `schedule="search"` (the
/// command line's defaults).
const SEARCH_ITERATIONS: usize = 50;
const SEARCH_BUDGET: Duration = Duration::from_secs(10);

/// A value moved into `Python::detach` and back: the closure runs on this thread while the
/// GIL is released, so nothing in it crosses threads.
struct OnThisThread<T>(T);

// SAFETY: `Python::detach` runs its closure on the calling thread and returns its result
// there; the `Send` bound it asks for exists to keep GIL-bound Python references out of the
// closure, and the values wrapped here (an executable, its graph, host tensors) hold none.
unsafe impl<T> Send for OnThisThread<T> {}

/// An executable together with the graph it borrows, owned as one value.
struct OwnedExecutable {
    /// Borrows `*graph`; dropped first.
    exe: ManuallyDrop<Executable<'static>>,
    /// The graph, boxed so that it never moves while `exe` borrows it.
    graph: NonNull<Graph>,
}

impl OwnedExecutable {
    /// Compiles `graph` with `options`; the executable owns the graph.
    fn compile(graph: Graph, options: &CompileOptions) -> einsummable::Result<Self> {
        let graph = NonNull::from(Box::leak(Box::new(graph)));
        // SAFETY: the box is freed only in `drop` (or below, on failure), after the executable
        // that borrows it; it is never moved or mutated meanwhile.
        let borrowed: &'static Graph = unsafe { graph.as_ref() };
        match einsummable::compile(borrowed, options) {
            Ok(exe) => Ok(OwnedExecutable { exe: ManuallyDrop::new(exe), graph }),
            Err(e) => {
                // SAFETY: nothing borrows the graph any more; the pointer came from `Box::leak`.
                drop(unsafe { Box::from_raw(graph.as_ptr()) });
                Err(e)
            }
        }
    }
}

impl Drop for OwnedExecutable {
    fn drop(&mut self) {
        // SAFETY: the executable goes first, then the graph it borrowed, once.
        unsafe {
            ManuallyDrop::drop(&mut self.exe);
            drop(Box::from_raw(self.graph.as_ptr()));
        }
    }
}

/// A compiled graph: its plan, exchange programs and task graph, prepared on its backend.
/// Inputs loaded by `run` stay on the devices for later runs.
#[pyclass(module = "einsummable", name = "Executable", unsendable)]
pub struct PyExecutable {
    owned: OwnedExecutable,
    /// Every computation input: name, handle, type.
    inputs: Vec<(String, Tensor, TensorDesc)>,
    /// Every saved output under its name in the Python graph.
    outputs: Vec<(String, Tensor)>,
    /// What the reports call the computation: the workload's spec, or `graph`.
    workload: String,
    topology: String,
    schedule: &'static str,
}

impl PyExecutable {
    fn exe(&self) -> &Executable<'static> {
        &self.owned.exe
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
    fn run<'py>(&mut self, py: Python<'py>, inputs: &Bound<'py, PyDict>) -> PyResult<Bound<'py, PyDict>> {
        self.exe().check_host_memory(false).py_err()?;
        let mut values = Vec::new();
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
        let exe = OnThisThread(&mut *self.owned.exe);
        let outputs = OnThisThread(&self.outputs);
        let results = py.detach(move || {
            let (exe, outputs) = (exe, outputs);
            let run = || -> einsummable::Result<Vec<_>> {
                for (t, value) in values {
                    exe.0.load(t, value)?;
                }
                exe.0.execute()?;
                outputs.0.iter().map(|(_, t)| exe.0.offload(*t)).collect()
            };
            OnThisThread(run())
        });
        let results = results.0.py_err()?;
        let out = PyDict::new(py);
        for ((name, _), value) in self.outputs.iter().zip(&results) {
            out.set_item(name, to_numpy(py, value, name)?)?;
        }
        Ok(out)
    }

    /// The plan as `einsummable plan --json` prints it: every operator's split and costs,
    /// the totals, the predicted time, bytes moved and memory.
    fn plan<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let report = PlanReport::compiled(self.exe(), &self.workload, &self.topology, self.schedule);
        let json = serde_json::to_string(&report).map_err(|e| EinsummableError::new_err(e.to_string()))?;
        Self::json(py, json)
    }

    /// What the compiled task graph predicts on the topology: `predicted_ms`,
    /// `bytes_moved`, each device's peak, resident and transient bytes, and the tasks.
    fn predict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let json = serde_json::to_string(&GraphReport::new(self.exe()))
            .map_err(|e| EinsummableError::new_err(e.to_string()))?;
        Self::json(py, json)
    }

    /// The plan, every exchange program and the memory per device, as `einsummable
    /// explain` prints them.
    fn explain(&self) -> String {
        let exe = self.exe();
        format!(
            "{} on {} devices, predicted {:.4} ms on {}\n{}",
            self.workload,
            exe.plan().devices,
            exe.predicted_ms(),
            self.topology,
            explain_text(exe)
        )
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
        let exe = self.exe();
        format!(
            "Executable({} on {} devices, {} optimizer, predicted {:.4} ms on {})",
            self.workload,
            exe.plan().devices,
            exe.plan().optimizer,
            exe.predicted_ms(),
            self.topology
        )
    }
}

/// Compiles `graph` for `devices` devices: chooses a spec for every operator with
/// `optimizer` (a name: `dp`, `greedy`, `random`, `ilp`, `data`, `megatron`, `ulysses`,
/// `mesh2d`; or an object with `solve(problem) -> list[int]`) under the `cost` model
/// (`time` or `proxy`) of `topology` (a preset or a topology file; default `dgx-a100`
/// scaled to the devices), within `memory_budget` GB per device (default: the topology's
/// HBM less 10%), synthesizes the exchange programs (`schedule`: `naive` or `search`) and
/// prepares the task graph on `backend` (`cpu` or `cuda`). The GIL is released meanwhile;
/// `progress`, a callable, receives a line per stage.
#[pyfunction]
#[pyo3(signature = (graph, devices = 8, optimizer = None, cost = "time", topology = None,
    memory_budget = None, backend = "cpu", schedule = "naive", seed = 0, progress = None))]
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
    schedule: &str,
    seed: u64,
    progress: Option<Py<PyAny>>,
) -> PyResult<PyExecutable> {
    let topology_name = topology.unwrap_or_else(|| {
        einsum_sim::scaled_preset(DEFAULT_TOPOLOGY, devices).unwrap_or_else(|| DEFAULT_TOPOLOGY.to_string())
    });
    let machine = Topology::named(&topology_name).py_err()?;
    let (strategy, python_strategy): (Arc<dyn LogicalOptimizer>, Option<Arc<PyStrategy>>) = match optimizer {
        None => (optimizer_by_name("dp", seed)?, None),
        Some(o) if o.is_instance_of::<pyo3::types::PyString>() => {
            (optimizer_by_name(&o.extract::<String>()?, seed)?, None)
        }
        Some(o) => {
            let s = Arc::new(PyStrategy::new(o)?);
            (Arc::clone(&s) as Arc<dyn LogicalOptimizer>, Some(s))
        }
    };
    let cost_model = Arc::from((einsum_logical::cost_model_entry(cost).py_err()?.build)(&machine));
    let schedule_name = match schedule {
        "naive" => "naive",
        "search" => "search",
        other => {
            return Err(EinsummableError::new_err(format!("schedule `{other}`: expected naive or search")));
        }
    };
    let schedule = if schedule_name == "search" {
        Schedule::Search { seed, iterations: SEARCH_ITERATIONS, budget: Some(SEARCH_BUDGET), naive_fallback: true }
    } else {
        Schedule::Naive
    };
    let memory_budget = match memory_budget {
        None => None,
        Some(gb) if gb.is_finite() && gb > 0.0 => Some(gb * 1e9),
        Some(gb) => {
            return Err(EinsummableError::new_err(format!("memory_budget: {gb} is not a positive number of GB")));
        }
    };
    let options = CompileOptions {
        devices,
        backend: einsummable::backend_by_name(backend, &BackendParams::default()).py_err()?,
        optimizer: strategy,
        cost: Some(cost_model),
        schedule,
        topology: machine,
        memory_budget,
        refine: einsummable::refine::DEFAULT_REFINE,
    };
    let snapshot = graph.replay()?;
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
    let progress = progress.map(Arc::new);
    let compiled =
        py.detach(move || OnThisThread(with_progress(progress, || OwnedExecutable::compile(snapshot, &options)))).0;
    let owned = compiled.map_err(|e| {
        // A strategy's own exception, rather than the plan error that carries its message.
        python_strategy.as_ref().and_then(|s| s.take_raised()).unwrap_or_else(|| to_py(e))
    })?;
    Ok(PyExecutable { owned, inputs, outputs, workload, topology: topology_name, schedule: schedule_name })
}

/// The strategy named `name` from the optimizers' table, seeded (`random`).
fn optimizer_by_name(name: &str, seed: u64) -> PyResult<Arc<dyn LogicalOptimizer>> {
    let entry = einsum_logical::optimizer_entry(name).py_err()?;
    let params = einsum_logical::OptimizerParams { seed, ilp: einsum_logical::Ilp::default() };
    Ok(Arc::from((entry.build)(&params)))
}

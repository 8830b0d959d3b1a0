//! The named workloads as graphs, the paper's experiments, and the strategies' table.

use std::path::PathBuf;

use einsummable::DEFAULT_TOPOLOGY;
use einsummable::experiment::{Experiment, Runner, Setup};
use pyo3::prelude::*;

use crate::errors::{EinsummableError, IntoPy};
use crate::graph::{PyGraph, parse_dtype};
use crate::progress::{callback, with_progress};
use crate::worker::{Cancel, guarded, run_detached};

/// The graph of the named workload `spec`, `name:key=value,...` as on the command line
/// (e.g. `llama-block:tokens=256,d_model=128`), in `dtype`. `einsummable.workloads` builds
/// the spec from keyword arguments.
#[pyfunction]
#[pyo3(signature = (spec, dtype = "f32"))]
pub fn workload(spec: &str, dtype: &str) -> PyResult<PyGraph> {
    let dtype = parse_dtype(dtype)?;
    guarded("workload", || PyGraph::from_workload(spec, dtype))
}

/// Runs the experiment `name` of Section 6 (`transformer`, `chains`, `ablation`,
/// `exchange`, `proxy`, `fit`, `budget` or `all`) in simulation for the device counts
/// `devices` on `topology` (default: `dgx-a100` scaled to the largest count), writing
/// `out/NAME.csv`, `.md` and `.svg`; `small` shrinks every workload. Returns one dict per
/// experiment: its table (`name`, `caption`, `columns`, `rows`, `notes`), the files
/// written and the wall time. The work runs on a thread of its own while the caller waits
/// with the GIL released; progress goes to `progress` (a callable, a line per stage, called
/// on that thread) or else to stderr, as on the command line. Ctrl-C raises
/// `KeyboardInterrupt` at once: the experiment under way finishes in the background (its
/// files are written, as a set) and none after it starts.
#[pyfunction]
#[pyo3(signature = (name, devices = vec![1, 4, 8], topology = None, out = PathBuf::from("results"), small = false, progress = None))]
pub fn experiment<'py>(
    py: Python<'py>,
    name: &str,
    devices: Vec<usize>,
    topology: Option<String>,
    out: PathBuf,
    small: bool,
    progress: Option<Py<PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    let progress = callback(py, progress)?;
    let experiments = Experiment::by_name(name).py_err()?;
    if devices.is_empty() || devices.contains(&0) {
        return Err(EinsummableError::new_err(format!("devices: {devices:?} is not a list of positive counts")));
    }
    let largest = devices.iter().copied().max().unwrap_or(1);
    let topology = topology.unwrap_or_else(|| {
        einsum_sim::scaled_preset(DEFAULT_TOPOLOGY, largest).unwrap_or_else(|| DEFAULT_TOPOLOGY.to_string())
    });
    std::fs::create_dir_all(&out)
        .map_err(|e| EinsummableError::new_err(format!("out: cannot create {}: {e}", out.display())))?;
    let mut runner = if progress.is_some() { Runner::quiet() } else { Runner::new() };
    let cancel = Cancel::default();
    let abandoned = cancel.clone();
    let results = run_detached(py, "experiment", &cancel, move || {
        with_progress(progress, &abandoned, || {
            // A topology that does not load fails the first experiment that plans for it; the
            // others fix their machines and run whatever it says.
            let (setup, mut unloaded) = match Setup::named(&topology, devices.clone(), out.clone(), small) {
                Ok(setup) => (setup, None),
                Err(e) => (Setup::named(DEFAULT_TOPOLOGY, devices, out, small)?, Some(e)),
            };
            let mut tables = Vec::new();
            for e in experiments {
                if abandoned.is_cancelled() {
                    // Nobody waits for the tables: no further experiment is started.
                    return Err(einsummable::Error::Usage("experiment: interrupted".into()));
                }
                if let Some(error) = unloaded.take_if(|_| e.uses_topology()) {
                    return Err(error.into());
                }
                let outcome = e.run(&setup, &mut runner)?;
                let mut table = serde_json::to_value(outcome.table.report())
                    .map_err(|e| einsummable::Error::Usage(e.to_string()))?;
                let files: Vec<String> = outcome.files.iter().map(|f| f.display().to_string()).collect();
                if let Some(object) = table.as_object_mut() {
                    object.insert("files".into(), files.into());
                    object.insert("wall_s".into(), outcome.wall_s.into());
                }
                tables.push(table);
            }
            Ok(tables)
        })
    })?;
    let json = serde_json::to_string(&results.py_err()?).map_err(|e| EinsummableError::new_err(e.to_string()))?;
    py.import("json")?.call_method1("loads", (json,))
}

/// The strategies `compile` accepts by name, `[(name, what it does)]`.
#[pyfunction]
pub fn optimizers() -> Vec<(&'static str, &'static str)> {
    einsummable::names::optimizers().iter().map(|e| (e.name, e.about)).collect()
}

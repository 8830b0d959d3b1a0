//! `--trace FILE` on `plan`, `run` and `explain`: the compiled plan's simulated schedule (and
//! on `run` the CPU backend's measured one) written as Chrome trace JSON, which Perfetto
//! (<https://ui.perfetto.dev>) and `chrome://tracing` open. The format is
//! [`einsum_sim::chrome_trace`]'s; this module only gathers the timelines and writes the file.

use std::path::Path;

use einsum_compile::Compiled;
use einsum_joinagg::Computation;
use einsum_sim::Topology;
use einsum_sim::chrome_trace::{Process, chrome_trace};
use einsummable::{Error, Result};
use serde_json::{Map, Value};

/// The help of `--trace`.
pub const HELP: &str = "Write the compiled plan's simulated schedule as Chrome trace JSON to FILE (open it in \
                        https://ui.perfetto.dev or chrome://tracing): a track per device and per link or resource \
                        the transfers cross, a slice per task named by its operator and exchange";

/// The simulated schedule of `compiled` (compiled from `comp` for `topology`): the
/// simulation behind its predicted time ([`Compiled::predicted_trace`]), whose last slice
/// ends at the predicted time, with every task's category its task-graph kind.
pub fn simulated(comp: &Computation, compiled: &Compiled, topology: &Topology) -> Result<Process> {
    let trace = compiled.predicted_trace(comp, topology).map_err(|e| Error::Compile(e.into()))?;
    let kinds: Vec<&str> = compiled.graph.nodes().iter().map(|n| n.task.kind()).collect();
    Ok(Process::simulated(&format!("simulated on {}", topology.name()), &trace, topology, &kinds))
}

/// What the trace is of, for its `otherData`: the command, the workload, the devices, the
/// topology and the predicted time in ms.
pub fn about(command: &str, workload: &str, devices: usize, topology: &str, predicted_ms: f64) -> Map<String, Value> {
    let mut other = Map::new();
    other.insert("command".into(), command.into());
    other.insert("workload".into(), workload.into());
    other.insert("devices".into(), devices.into());
    other.insert("topology".into(), topology.into());
    other.insert("predicted_ms".into(), predicted_ms.into());
    other
}

/// Writes the Chrome trace of `processes` with `other` to `path`, through
/// [`einsum_core::fsio::write_atomic`] as every output file of the command line is: a
/// failure leaves the previous file, a link's target is written, a FIFO, socket, block device
/// or directory is refused with a typed error.
pub fn write(path: &Path, processes: &[Process], other: Map<String, Value>) -> Result<()> {
    let bytes = serde_json::to_vec(&chrome_trace(processes, other)).map_err(|e| Error::Io {
        path: path.display().to_string(),
        message: format!("--trace: the trace could not be serialised: {e}"),
    })?;
    einsum_core::fsio::write_atomic(path, &bytes)?;
    Ok(())
}

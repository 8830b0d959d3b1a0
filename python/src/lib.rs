//! The extension module `einsummable._native` of the Python package `einsummable`: the graph
//! builder, `compile` and the executable (NumPy in and out), strategies written in Python,
//! the named workloads and the paper's experiments. `python/einsummable/__init__.py`
//! re-exports it; the package is built by maturin (`pip install ./python`).
//!
//! Long calls (`compile`, `Executable.run`, `experiment`) run off the calling thread and
//! wait with the GIL released, so that Ctrl-C interrupts them (`worker`); every class can
//! be used from any Python thread.
//!
//! Everything goes through the `einsummable` crate's public API; the reports `plan()` and
//! `predict()` return are the command line's own (`einsummable::report`), parsed from JSON.

mod array;
mod errors;
mod executable;
mod experiment;
mod generator;
mod graph;
mod model;
mod progress;
mod strategy;
mod worker;

use pyo3::prelude::*;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    errors::register(m)?;
    m.add_class::<graph::PyGraph>()?;
    m.add_class::<graph::PyTensor>()?;
    m.add_class::<executable::PyExecutable>()?;
    m.add_class::<strategy::PyProblem>()?;
    m.add_class::<strategy::PyOp>()?;
    m.add_class::<strategy::PyCandidate>()?;
    m.add_function(wrap_pyfunction!(executable::compile, m)?)?;
    m.add_function(wrap_pyfunction!(experiment::workload, m)?)?;
    m.add_function(wrap_pyfunction!(experiment::experiment, m)?)?;
    m.add_function(wrap_pyfunction!(experiment::optimizers, m)?)?;
    m.add_function(wrap_pyfunction!(model::hf_graph, m)?)?;
    m.add_class::<generator::PyGenerator>()?;
    m.add_function(wrap_pyfunction!(generator::hf_generator, m)?)?;
    Ok(())
}

//! The exception classes: `EinsummableError` and one subclass per kind of failure, each
//! raised with the Rust error's message (which says what and where).

use einsummable::Error;
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;

create_exception!(
    einsummable,
    EinsummableError,
    PyException,
    "Every failure of einsummable: the base of the classes below, with the Rust message."
);
create_exception!(
    einsummable,
    GraphError,
    EinsummableError,
    "A graph that cannot be built: a bad shape, an index whose extents do not match, an unknown operation."
);
create_exception!(
    einsummable,
    PlanError,
    EinsummableError,
    "The logical optimizer failed: no devices, no plan that fits the memory, a strategy's bad answer."
);
create_exception!(
    einsummable,
    CompileError,
    EinsummableError,
    "Physical compilation failed: placement, exchange programs, lowering, memory over capacity."
);
create_exception!(
    einsummable,
    RunError,
    EinsummableError,
    "Running on the backend failed, or a run needs more host memory than there is."
);
create_exception!(einsummable, TopologyError, EinsummableError, "A topology preset or file that cannot be loaded.");
create_exception!(
    einsummable,
    WorkloadError,
    EinsummableError,
    "A named workload or an experiment that cannot be parsed, built or run."
);
create_exception!(
    einsummable,
    DTypeError,
    EinsummableError,
    "An array whose dtype or shape is not the tensor's, or a dtype NumPy cannot hold here."
);

/// The Python exception for a Rust error: its class by the error's kind, its message the
/// error's own.
pub fn to_py(e: Error) -> PyErr {
    let message = e.to_string();
    match e {
        Error::Graph(_) | Error::JoinAgg(_) => GraphError::new_err(message),
        Error::Logical(_) | Error::Pipeline(_) | Error::Rewrite(_) | Error::RewriteStep(_) => {
            PlanError::new_err(message)
        }
        Error::Compile(_) | Error::Exprog(_) | Error::Simulate(_) | Error::Synthesis(_) | Error::InFile { .. } => {
            CompileError::new_err(message)
        }
        Error::Backend(_) | Error::Core(_) | Error::HostMemory { .. } | Error::CacheFull { .. } => {
            RunError::new_err(message)
        }
        Error::Topology(_) | Error::File(_) => TopologyError::new_err(message),
        Error::Experiment(_) | Error::ModelConfig(_) | Error::Model(_) | Error::Tokenizer { .. } => {
            WorkloadError::new_err(message)
        }
        Error::Checkpoint(_) => RunError::new_err(message),
        Error::Io { .. } | Error::Usage(_) => EinsummableError::new_err(message),
    }
}

/// `Result<T, einsummable::Error>` as a Python result.
pub trait IntoPy<T> {
    /// The value, or the error as its Python exception ([`to_py`]).
    fn py_err(self) -> PyResult<T>;
}

impl<T, E: Into<Error>> IntoPy<T> for Result<T, E> {
    fn py_err(self) -> PyResult<T> {
        self.map_err(|e| to_py(e.into()))
    }
}

/// Adds every exception class to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("EinsummableError", py.get_type::<EinsummableError>())?;
    m.add("GraphError", py.get_type::<GraphError>())?;
    m.add("PlanError", py.get_type::<PlanError>())?;
    m.add("CompileError", py.get_type::<CompileError>())?;
    m.add("RunError", py.get_type::<RunError>())?;
    m.add("TopologyError", py.get_type::<TopologyError>())?;
    m.add("WorkloadError", py.get_type::<WorkloadError>())?;
    m.add("DTypeError", py.get_type::<DTypeError>())?;
    Ok(())
}

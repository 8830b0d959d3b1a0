//! A logical optimizer written in Python: any object with `solve(problem) -> list[int]`,
//! plugged into `compile` as a `LogicalOptimizer`, and the `Problem` it is shown (every
//! operator's candidate specs with their costs).

use std::collections::BTreeMap;
use std::sync::Mutex;

use einsum_logical::{Candidate, LogicalOptimizer, OpProblem, Problem, Source};
use pyo3::prelude::*;

use crate::worker::{Cancel, guarded};

/// A Python object with `solve(problem) -> list[int]` as a strategy. The GIL is taken for
/// each call (compilation runs without it, on a thread of its own).
pub struct PyStrategy {
    object: Py<PyAny>,
    name: String,
    /// The exception `solve` raised, re-raised by `compile` in place of the plan error.
    raised: Mutex<Option<PyErr>>,
    /// Set when the caller of `compile` was interrupted: `solve` is not called any more.
    cancel: Cancel,
}

impl PyStrategy {
    /// The strategy `object`, named by its `name` attribute or else its class's name, for a
    /// compile that `cancel` abandons.
    pub fn new(object: &Bound<'_, PyAny>, cancel: Cancel) -> PyResult<Self> {
        if !object.hasattr("solve")? {
            return Err(crate::errors::PlanError::new_err(format!(
                "optimizer: {} is neither a strategy's name nor an object with solve(problem) -> list[int]",
                object.repr()?
            )));
        }
        let name = match object.getattr("name") {
            Ok(n) if n.is_instance_of::<pyo3::types::PyString>() => n.extract::<String>()?,
            _ => object.get_type().name()?.to_string(),
        };
        Ok(PyStrategy { object: object.clone().unbind(), name, raised: Mutex::new(None), cancel })
    }

    /// The exception the last failed `solve` raised, if any (taken).
    pub fn take_raised(&self) -> Option<PyErr> {
        self.raised.lock().map_or(None, |mut r| r.take())
    }
}

impl LogicalOptimizer for PyStrategy {
    fn name(&self) -> &str {
        &self.name
    }

    /// Calls `solve` on a copy of the problem and checks the answer: one candidate index
    /// per operator, each in range.
    fn solve(&self, problem: &Problem) -> einsum_logical::Result<Vec<usize>> {
        if self.cancel.is_cancelled() {
            // Nobody waits for the plan: the abandoned compile ends here instead of running
            // Python code the caller no longer expects.
            return Err(einsum_logical::Error::InvalidPlan(format!(
                "the strategy `{}` was not called: compile was interrupted",
                self.name
            )));
        }
        // Compilation runs on a thread of its own, which may outlive the interpreter.
        let answer = Python::try_attach(|py| -> PyResult<Vec<usize>> {
            let p = Py::new(py, PyProblem { inner: problem.clone() })?;
            self.object.call_method1(py, "solve", (p,))?.extract::<Vec<usize>>(py)
        })
        .ok_or_else(|| {
            einsum_logical::Error::InvalidPlan(format!(
                "the strategy `{}` was not called: the Python interpreter has shut down",
                self.name
            ))
        })?;
        let choice = answer.map_err(|e| {
            let message = format!("the strategy `{}` raised {e}", self.name);
            if let Ok(mut raised) = self.raised.lock() {
                *raised = Some(e);
            }
            einsum_logical::Error::InvalidPlan(message)
        })?;
        if choice.len() != problem.ops.len() {
            return Err(einsum_logical::Error::InvalidPlan(format!(
                "the strategy `{}` chose {} candidates for {} operators",
                self.name,
                choice.len(),
                problem.ops.len()
            )));
        }
        for (op, &c) in problem.ops.iter().zip(&choice) {
            if c >= op.candidates.len() {
                return Err(einsum_logical::Error::InvalidPlan(format!(
                    "the strategy `{}` chose candidate {c} for `{}`, which has {}",
                    self.name,
                    op.name,
                    op.candidates.len()
                )));
            }
        }
        Ok(choice)
    }
}

/// What a strategy solves: the operators in topological order, each with its candidate
/// specs priced by the cost model; `solve` returns one candidate index per operator.
#[pyclass(module = "einsummable", name = "Problem", frozen)]
pub struct PyProblem {
    inner: Problem,
}

#[pymethods]
impl PyProblem {
    /// The device count p.
    #[getter]
    fn devices(&self) -> usize {
        self.inner.p
    }

    /// The cost model's name.
    #[getter]
    fn cost_model(&self) -> &str {
        &self.inner.cost_model
    }

    /// The unit of every cost (`s` under `time`, elements under `proxy`).
    #[getter]
    fn unit(&self) -> &'static str {
        self.inner.unit
    }

    /// Bytes per device for resident inputs, or None without a budget.
    #[getter]
    fn memory_budget(&self) -> Option<f64> {
        self.inner.memory_budget
    }

    /// The operators, in topological order (producers before consumers).
    #[getter]
    fn ops(&self) -> Vec<PyOp> {
        self.inner.ops.iter().map(|o| PyOp { inner: o.clone() }).collect()
    }

    /// The plan's total cost (every spec's join, aggregation and compute, and every
    /// repartition its neighbours' choices cause), in `unit`.
    fn total(&self, choice: Vec<usize>) -> PyResult<f64> {
        guarded("Problem.total", || self.inner.total(&choice).map_err(|e| crate::errors::to_py(e.into())))
    }

    /// Whether the plan keeps its resident inputs within the memory budget; a choice that
    /// does not name one candidate of every operator raises.
    fn fits(&self, choice: Vec<usize>) -> PyResult<bool> {
        guarded("Problem.fits", || {
            self.inner.check(&choice).map_err(|e| crate::errors::to_py(e.into()))?;
            Ok(self.inner.fits(&choice))
        })
    }

    /// The plan brought within the memory budget (operators moved to candidates that keep
    /// less resident), unchanged when it fits; a choice that does not name one candidate of
    /// every operator raises.
    fn repair(&self, choice: Vec<usize>) -> PyResult<Vec<usize>> {
        guarded("Problem.repair", || {
            self.inner.check(&choice).map_err(|e| crate::errors::to_py(e.into()))?;
            Ok(self.inner.repair(&choice))
        })
    }

    fn __repr__(&self) -> String {
        format!(
            "Problem({} operators on {} devices, {} cost)",
            self.inner.ops.len(),
            self.inner.p,
            self.inner.cost_model
        )
    }
}

/// One operator of a `Problem`.
#[pyclass(module = "einsummable", name = "Op", frozen)]
pub struct PyOp {
    inner: OpProblem,
}

#[pymethods]
impl PyOp {
    /// Its node name (`matmul #3`).
    #[getter]
    fn name(&self) -> &str {
        &self.inner.name
    }

    /// Its kind (`matmul`, `attention`, ...).
    #[getter]
    fn kind(&self) -> &str {
        &self.inner.kind
    }

    /// The names of its shardable indices.
    #[getter]
    fn shardable(&self) -> Vec<String> {
        self.inner.shardable.clone()
    }

    /// Where each input comes from: `("input", i)` for computation input i, `("op", j, k)`
    /// for output k of operator j (an index into `Problem.ops`).
    #[getter]
    fn sources(&self) -> Vec<(String, usize, usize)> {
        let source = |s: &Source| match *s {
            Source::Input { input } => ("input".to_string(), input, 0),
            Source::Op { op, output } => ("op".to_string(), op, output),
        };
        self.inner.sources.iter().map(source).collect()
    }

    /// The cost of repartitioning each input, in the problem's unit (paid when the
    /// producer's tiling differs from what the chosen spec reads).
    #[getter]
    fn repartition(&self) -> Vec<f64> {
        self.inner.repartition.clone()
    }

    /// Every spec it offers on p devices.
    #[getter]
    fn candidates(&self) -> Vec<PyCandidate> {
        let names = &self.inner.shardable;
        self.inner.candidates.iter().map(|c| PyCandidate::new(names, c)).collect()
    }

    fn __repr__(&self) -> String {
        format!("Op({:?}, {}, {} candidates)", self.inner.name, self.inner.kind, self.inner.candidates.len())
    }
}

/// One candidate spec of an operator: how it splits each shardable index and what it costs.
#[pyclass(module = "einsummable", name = "Candidate", frozen, get_all)]
pub struct PyCandidate {
    /// `{index: parts}` for every shardable index.
    splits: BTreeMap<String, usize>,
    /// Sub-cost (2): shipping input blocks to the function specs.
    join: f64,
    /// Sub-cost (3): combining partial outputs.
    aggregation: f64,
    /// The slowest device's compute (zero under the proxy).
    compute: f64,
    /// join + aggregation + compute (repartitions depend on the neighbours: `Problem.total`).
    cost: f64,
    /// Bytes the join and aggregation move.
    bytes: f64,
    /// The most bytes of computation inputs one device keeps resident under this spec.
    resident_bytes: f64,
}

impl PyCandidate {
    fn new(names: &[String], c: &Candidate) -> Self {
        PyCandidate {
            splits: names.iter().cloned().zip(c.counts.iter().copied()).collect(),
            join: c.cost.join,
            aggregation: c.cost.aggregation,
            compute: c.cost.compute,
            cost: c.cost.total(),
            bytes: c.bytes,
            resident_bytes: c.resident_bytes,
        }
    }
}

#[pymethods]
impl PyCandidate {
    fn __repr__(&self) -> String {
        let splits: Vec<String> = self.splits.iter().map(|(n, c)| format!("{n}={c}")).collect();
        format!("Candidate([{}], cost={:.4e})", splits.join(" "), self.cost)
    }
}

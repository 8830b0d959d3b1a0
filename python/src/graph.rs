//! `einsummable.Graph` and `einsummable.Tensor`: the graph builder of `einsum-graph`, one
//! method per builder call.
//!
//! # Design
//! A Python graph holds its Rust [`Graph`] and applies every builder call to it. `compile`
//! takes the graph's [`Snapshot`] (cheap: the computation is shared, and copied only when
//! the graph grows while a snapshot holds it), which the executable owns, so an executable
//! is a snapshot: the Python graph can grow (more operators, more outputs) and be compiled
//! again without touching executables compiled before.

use std::sync::atomic::{AtomicU64, Ordering};

use einsum_core::DType;
use einsum_joinagg::{IndexRole, TensorId};
use einsummable::{AttentionConfig, BinaryOp, Error, Graph, Packing, ReduceOp, Snapshot, Tensor, UnaryOp, Workload};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

use crate::errors::{GraphError, IntoPy};

/// Source of distinct ids of Python graphs, so a tensor remembers the graph that made it.
static NEXT_GRAPH: AtomicU64 = AtomicU64::new(0);

/// Every index role, for `Graph.role` by name.
const ROLES: [IndexRole; 5] =
    [IndexRole::Tokens, IndexRole::QueryBlocks, IndexRole::HeadsKv, IndexRole::HeadsQ, IndexRole::FfnHidden];

/// A handle to a tensor of one `Graph`: its name, named dimensions and dtype.
#[pyclass(module = "einsummable", name = "Tensor", frozen)]
pub struct PyTensor {
    /// The Python graph that made it.
    pub graph: u64,
    /// Its id in that graph's computation.
    pub id: TensorId,
    /// The name of the node that produced it (an input's name, or e.g. `matmul #3`).
    name: String,
    /// Its dimensions, outermost first.
    dims: Vec<(String, usize)>,
    dtype: DType,
}

#[pymethods]
impl PyTensor {
    /// The name of the node that produced it: an input's name, or the operator's (`matmul #3`).
    #[getter]
    fn name(&self) -> &str {
        &self.name
    }

    /// The extents, outermost first (the NumPy shape of its value).
    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.dims.iter().map(|d| d.1))
    }

    /// The index names, outermost first.
    #[getter]
    fn indices(&self) -> Vec<String> {
        self.dims.iter().map(|d| d.0.clone()).collect()
    }

    /// `{index: extent}`, outermost first.
    #[getter]
    fn dims<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for (n, e) in &self.dims {
            d.set_item(n, e)?;
        }
        Ok(d)
    }

    /// The storage dtype: `f32`, `f16` or `bf16`.
    #[getter]
    fn dtype(&self) -> &'static str {
        self.dtype.name()
    }

    fn __repr__(&self) -> String {
        let dims: Vec<String> = self.dims.iter().map(|(n, e)| format!("{n}={e}")).collect();
        format!("Tensor({:?}, [{}], {})", self.name, dims.join(", "), self.dtype.name())
    }
}

/// A computation under construction: inputs, operators and saved outputs, with no device,
/// sharding or communication in it (`compile` decides those). Builder errors raise
/// `GraphError` with the message naming the operator and the index.
#[pyclass(module = "einsummable", name = "Graph")]
pub struct PyGraph {
    uid: u64,
    graph: Graph,
    /// The workload the graph started from (`name:key=value,...`), if any.
    workload: Option<(String, DType)>,
    /// The saved outputs with the names `run` returns them under.
    outputs: Vec<(String, TensorId)>,
}

impl PyGraph {
    /// The Python graph of `graph`, labelled with the workload (or model) it came from.
    pub fn from_graph(graph: Graph, workload: Option<(String, DType)>) -> Self {
        let mut g = PyGraph { uid: NEXT_GRAPH.fetch_add(1, Ordering::Relaxed), graph, workload, outputs: Vec::new() };
        let comp = g.graph.computation();
        g.outputs = comp.saved().iter().map(|&t| (tensor_name(comp, t), t)).collect();
        g
    }

    /// A graph built from the named workload `spec` (e.g. `ffn:tokens=64,d_model=32,d_ff=128`).
    pub fn from_workload(spec: &str, dtype: DType) -> PyResult<Self> {
        let graph = Workload::parse(spec).py_err()?.build(dtype).py_err()?;
        Ok(Self::from_graph(graph, Some((spec.to_string(), dtype))))
    }

    /// The tensor's id, if the handle is of this graph.
    fn own(&self, t: &PyTensor) -> PyResult<TensorId> {
        if t.graph == self.uid {
            Ok(t.id)
        } else {
            Err(GraphError::new_err(format!("tensor `{}` belongs to another graph", t.name)))
        }
    }

    /// The Rust handle of `t`, if it is of this graph.
    fn tensor(&self, t: &PyTensor) -> PyResult<Tensor> {
        let id = self.own(t)?;
        self.graph.tensor(id).py_err()
    }

    /// The tensor a builder call made, as a handle, or the call's error.
    fn made(&self, made: Result<Tensor, impl Into<Error>>) -> PyResult<PyTensor> {
        self.handle(made.py_err()?.id())
    }

    fn handle(&self, id: TensorId) -> PyResult<PyTensor> {
        let comp = self.graph.computation();
        let desc = comp.desc(id).map_err(Error::from).py_err()?;
        Ok(PyTensor {
            graph: self.uid,
            id,
            name: tensor_name(comp, id),
            dims: desc.dims.iter().map(|d| (d.name.clone(), d.extent)).collect(),
            dtype: desc.dtype,
        })
    }

    /// The graph as it stands, for an executable to own (the Python graph may grow
    /// afterwards).
    pub fn snapshot(&self) -> Snapshot {
        self.graph.snapshot()
    }

    /// The saved outputs with their names.
    pub fn output_names(&self) -> &[(String, TensorId)] {
        &self.outputs
    }

    /// The workload the graph started from, if any (`name:key=value,...`).
    pub fn workload(&self) -> Option<&str> {
        self.workload.as_ref().map(|w| w.0.as_str())
    }
}

/// The name of tensor `t`: the name it was saved under, else its producing node's
/// ([`einsum_joinagg::Computation::tensor_name`]).
pub fn tensor_name(comp: &einsum_joinagg::Computation, t: TensorId) -> String {
    comp.tensor_name(t)
}

/// `dtype` by name (`f32`, `f16`, `bf16`).
pub fn parse_dtype(dtype: &str) -> PyResult<DType> {
    dtype.parse::<DType>().map_err(|e| crate::errors::DTypeError::new_err(e.to_string()))
}

/// Sequence ends as a packing; `None`: one sequence of `total`.
fn packing(seq_ends: Option<Vec<usize>>, total: usize) -> PyResult<Packing> {
    match seq_ends {
        None => Ok(Packing::single(total)),
        Some(ends) => Packing::new(ends).map_err(Error::from).py_err(),
    }
}

/// `{index: extent}` (any mapping, in its order) or a sequence of `(index, extent)` pairs.
fn dims_of(dims: &Bound<'_, PyAny>) -> PyResult<Vec<(String, usize)>> {
    let pairs = if dims.hasattr("items")? { dims.call_method0("items")? } else { dims.clone() };
    pairs.try_iter()?.map(|p| p?.extract::<(String, usize)>()).collect()
}

#[pymethods]
impl PyGraph {
    /// An empty graph.
    #[new]
    fn new() -> Self {
        Self::from_graph(Graph::new(), None)
    }

    /// Adds an input named `name` with dimensions `{index: extent}` (outermost first) and
    /// storage `dtype` (`f32`, `f16` or `bf16`).
    #[pyo3(signature = (name, dims, dtype = "f32"))]
    fn input(&mut self, name: String, dims: &Bound<'_, PyAny>, dtype: &str) -> PyResult<PyTensor> {
        let (dims, dtype) = (dims_of(dims)?, parse_dtype(dtype)?);
        let dims: Vec<(&str, usize)> = dims.iter().map(|(n, e)| (n.as_str(), *e)).collect();
        let made = self.graph.input(&name, &dims, dtype);
        self.made(made)
    }

    /// A contraction written with index letters, e.g. `g.einsum("td,df->tf", x, w)`.
    #[pyo3(signature = (equation, *xs))]
    fn einsum(&mut self, equation: String, xs: Vec<PyRef<'_, PyTensor>>) -> PyResult<PyTensor> {
        let inputs = xs.iter().map(|x| self.tensor(x)).collect::<PyResult<Vec<_>>>()?;
        let made = self.graph.einsum(&equation, &inputs);
        self.made(made)
    }

    /// Matrix multiply of two rank-2 tensors bound by index name: the one index they share
    /// is contracted wherever it sits (`[tokens, d_model] x [d_out, d_model] -> [tokens,
    /// d_out]`); operands that share none or both raise `GraphError`.
    fn matmul(&mut self, a: PyRef<'_, PyTensor>, b: PyRef<'_, PyTensor>) -> PyResult<PyTensor> {
        let (a, b) = (self.tensor(&a)?, self.tensor(&b)?);
        let made = self.graph.matmul(a, b);
        self.made(made)
    }

    /// An elementwise unary operation: `relu`, `gelu`, `silu`, `sigmoid`, `tanh`, `exp`,
    /// `neg`, or `scale` (by `scalar`).
    #[pyo3(signature = (x, op, scalar = 1.0))]
    fn unary(&mut self, x: PyRef<'_, PyTensor>, op: &str, scalar: f32) -> PyResult<PyTensor> {
        let op = UnaryOp::parse(op, scalar).map_err(Error::from).py_err()?;
        let x = self.tensor(&x)?;
        let made = self.graph.unary(x, op);
        self.made(made)
    }

    /// An elementwise binary operation (`add`, `sub`, `mul`, `div`, `max`), matching indices
    /// by name and broadcasting an operand whose indices the other has; operands that each
    /// have an index the other lacks (a misspelt name) are a `GraphError` unless `outer`
    /// asks for the outer broadcast.
    #[pyo3(signature = (a, b, op, outer = false))]
    fn binary(&mut self, a: PyRef<'_, PyTensor>, b: PyRef<'_, PyTensor>, op: &str, outer: bool) -> PyResult<PyTensor> {
        let op = BinaryOp::parse(op).map_err(Error::from).py_err()?;
        let (a, b) = (self.tensor(&a)?, self.tensor(&b)?);
        let made = if outer { self.graph.binary_outer(a, b, op) } else { self.graph.binary(a, b, op) };
        self.made(made)
    }

    /// Softmax over the named index.
    fn softmax(&mut self, x: PyRef<'_, PyTensor>, index: String) -> PyResult<PyTensor> {
        let x = self.tensor(&x)?;
        let made = self.graph.softmax(x, &index);
        self.made(made)
    }

    /// RMSNorm over the named index, with a weight over that index.
    #[pyo3(signature = (x, weight, index, eps = 1e-5))]
    fn rmsnorm(
        &mut self,
        x: PyRef<'_, PyTensor>,
        weight: PyRef<'_, PyTensor>,
        index: String,
        eps: f32,
    ) -> PyResult<PyTensor> {
        let (x, weight) = (self.tensor(&x)?, self.tensor(&weight)?);
        let made = self.graph.rmsnorm(x, weight, &index, eps);
        self.made(made)
    }

    /// LayerNorm over the named index, with a weight and a bias over that index.
    #[pyo3(signature = (x, weight, bias, index, eps = 1e-5))]
    fn layernorm(
        &mut self,
        x: PyRef<'_, PyTensor>,
        weight: PyRef<'_, PyTensor>,
        bias: PyRef<'_, PyTensor>,
        index: String,
        eps: f32,
    ) -> PyResult<PyTensor> {
        let (x, weight, bias) = (self.tensor(&x)?, self.tensor(&weight)?, self.tensor(&bias)?);
        let made = self.graph.layernorm(x, weight, bias, &index, eps);
        self.made(made)
    }

    /// Rotary position embedding along the index `sequence`, rotating pairs of `feature`;
    /// positions restart at every end in `seq_ends` (packed sequences; default: one).
    #[pyo3(signature = (x, sequence, feature, theta = 10000.0, seq_ends = None))]
    fn rope(
        &mut self,
        x: PyRef<'_, PyTensor>,
        sequence: String,
        feature: String,
        theta: f32,
        seq_ends: Option<Vec<usize>>,
    ) -> PyResult<PyTensor> {
        let total = x.dims.iter().find(|d| d.0 == sequence).map_or(0, |d| d.1);
        let packing = packing(seq_ends, total.max(1))?;
        let x = self.tensor(&x)?;
        let made = self.graph.rope(x, &sequence, &feature, theta, packing);
        self.made(made)
    }

    /// Attention of `q: [heads_q, sequence, d_head]` over `k, v: [heads_kv, sequence,
    /// d_head]` (grouped-query when `heads_q > heads_kv`), the `sequence` and `d_head`
    /// indices named (an operand laid out otherwise is a `GraphError`), causal within each
    /// packed sequence (`seq_ends`; default: one); `scale` defaults to `1/sqrt(d_head)`.
    #[pyo3(signature = (q, k, v, sequence, d_head, causal = true, seq_ends = None, scale = None))]
    #[allow(clippy::too_many_arguments)]
    fn attention(
        &mut self,
        q: PyRef<'_, PyTensor>,
        k: PyRef<'_, PyTensor>,
        v: PyRef<'_, PyTensor>,
        sequence: String,
        d_head: String,
        causal: bool,
        seq_ends: Option<Vec<usize>>,
        scale: Option<f32>,
    ) -> PyResult<PyTensor> {
        let total = q.dims.iter().find(|d| d.0 == sequence).map_or(1, |d| d.1);
        let config = AttentionConfig { causal, packing: packing(seq_ends, total)?, scale };
        let (q, k, v) = (self.tensor(&q)?, self.tensor(&k)?, self.tensor(&v)?);
        let made = self.graph.attention(q, k, v, &sequence, &d_head, config);
        self.made(made)
    }

    /// A reduction (`sum`, `max`, `mean`) over the named indices.
    #[pyo3(signature = (x, over, op = "sum"))]
    fn reduce(&mut self, x: PyRef<'_, PyTensor>, over: Vec<String>, op: &str) -> PyResult<PyTensor> {
        let op = ReduceOp::parse(op).map_err(Error::from).py_err()?;
        let x = self.tensor(&x)?;
        let over: Vec<&str> = over.iter().map(String::as_str).collect();
        let made = self.graph.reduce(x, &over, op);
        self.made(made)
    }

    /// The rows of `table` (indexed by `vocab`) that the i32 `ids` name: `[ids' indices...,
    /// table's other indices...]` in the table's dtype.
    fn embedding(&mut self, table: PyRef<'_, PyTensor>, ids: PyRef<'_, PyTensor>, vocab: &str) -> PyResult<PyTensor> {
        let (table, ids) = (self.tensor(&table)?, self.tensor(&ids)?);
        let made = self.graph.embedding(table, ids, vocab);
        self.made(made)
    }

    /// The i32 position of the maximum of `x` along `index` (the first, or the first NaN).
    fn argmax(&mut self, x: PyRef<'_, PyTensor>, index: &str) -> PyResult<PyTensor> {
        let x = self.tensor(&x)?;
        let made = self.graph.argmax(x, index);
        self.made(made)
    }

    /// `x` in another floating-point dtype (`f32`, `f16`, `bf16`), rounded to nearest even.
    fn cast(&mut self, x: PyRef<'_, PyTensor>, dtype: &str) -> PyResult<PyTensor> {
        let (x, dtype) = (self.tensor(&x)?, parse_dtype(dtype)?);
        let made = self.graph.cast(x, dtype);
        self.made(made)
    }

    /// Positions `lo..hi` of `x` along `index` (the index keeps its name).
    fn slice(&mut self, x: PyRef<'_, PyTensor>, index: &str, lo: usize, hi: usize) -> PyResult<PyTensor> {
        let x = self.tensor(&x)?;
        let made = self.graph.slice(x, index, lo, hi);
        self.made(made)
    }

    /// The tensors `xs`, alike but along `index`, joined along it in order.
    fn concat(&mut self, xs: Vec<PyRef<'_, PyTensor>>, index: &str) -> PyResult<PyTensor> {
        let xs = xs.iter().map(|x| self.tensor(x)).collect::<PyResult<Vec<_>>>()?;
        let made = self.graph.concat(&xs, index);
        self.made(made)
    }

    /// Declares that the index `index` has `role` (`tokens`, `query_blocks`, `heads_kv`,
    /// `heads_q`, `ffn_hidden`) throughout the graph, for the baselines that follow a model's
    /// structure (`megatron`, `ulysses`): e.g. `g.role("d_ff", "ffn_hidden")`.
    fn role(&mut self, index: String, role: &str) -> PyResult<()> {
        let Some(role) = ROLES.into_iter().find(|r| r.name() == role) else {
            let names: Vec<&str> = ROLES.iter().map(|r| r.name()).collect();
            return Err(GraphError::new_err(format!("unknown index role `{role}`; valid: {}", names.join(", "))));
        };
        self.graph.role(&index, role).py_err()
    }

    /// Marks `t` as an output: `run` returns it under `name` (default: `t.name`).
    #[pyo3(signature = (t, name = None))]
    fn save(&mut self, t: PyRef<'_, PyTensor>, name: Option<String>) -> PyResult<()> {
        let id = self.own(&t)?;
        let name = name.unwrap_or_else(|| t.name.clone());
        if let Some((taken, _)) = self.outputs.iter().find(|(n, other)| *n == name || *other == id) {
            return Err(GraphError::new_err(format!(
                "output `{taken}`: tensor `{}` is saved already, or another output has the name `{name}`",
                t.name
            )));
        }
        let x = self.graph.tensor(id).py_err()?;
        self.graph.save(x).py_err()?;
        self.outputs.push((name, id));
        Ok(())
    }

    /// The inputs, `{name: Tensor}`, in the graph's order.
    #[getter]
    fn inputs<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        let comp = self.graph.computation();
        for id in comp.inputs() {
            d.set_item(tensor_name(comp, id), self.handle(id)?)?;
        }
        Ok(d)
    }

    /// The saved outputs, `{name: Tensor}`, under the names `run` returns them.
    #[getter]
    fn outputs<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for (name, id) in &self.outputs {
            d.set_item(name, self.handle(*id)?)?;
        }
        Ok(d)
    }

    fn __repr__(&self) -> String {
        let comp = self.graph.computation();
        format!(
            "Graph({} inputs, {} operators, {} outputs{})",
            comp.inputs().len(),
            comp.ops().count(),
            self.outputs.len(),
            self.workload.as_ref().map_or_else(String::new, |w| format!(", workload {}", w.0))
        )
    }
}

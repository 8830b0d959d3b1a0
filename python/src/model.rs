//! Hugging Face models: the graph of a LLaMA-family model directory (`config.json`), whose
//! weight inputs are named after the checkpoint's tensors, for `einsummable.from_pretrained`
//! (python/einsummable/models.py) to compile and load.

use std::path::PathBuf;

use einsummable::models::{ModelConfig, llama};
use pyo3::prelude::*;

use crate::errors::WorkloadError;
use crate::graph::{PyGraph, parse_dtype};
use crate::worker::guarded;

/// The forward pass of the model in `dir` (its `config.json`: LLaMA 2/3/3.1/3.2, Mistral or
/// Qwen2) over `tokens` tokens, weights and activations in `dtype` (default: the config's
/// own, else f32): a `Graph` with the input `tokens` (i32 ids), one input per checkpoint
/// tensor under its name, and the output `logits`. No weight is read.
#[pyfunction]
#[pyo3(signature = (dir, tokens, dtype = None))]
pub fn hf_graph(dir: PathBuf, tokens: usize, dtype: Option<&str>) -> PyResult<PyGraph> {
    let config = ModelConfig::from_file(dir.join("config.json")).map_err(|e| WorkloadError::new_err(e.to_string()))?;
    let dtype = match dtype {
        Some(d) => parse_dtype(d)?,
        None => config.dtype.unwrap_or(einsum_core::DType::F32),
    };
    let label = format!("hf:{}", dir.display());
    guarded("from_pretrained", || {
        let model = llama::build(&config, tokens, dtype).map_err(|e| WorkloadError::new_err(e.to_string()))?;
        Ok(PyGraph::from_graph(model.graph, Some((label, dtype))))
    })
}

//! Generation with a KV cache from Python: `Model.generator(devices=...)` compiles a
//! model's decode step once ([`Generator`]) and `generate` returns new token ids.
//!
//! The generator is `Send`: it lives behind a mutex, and each call (the compile, every
//! `generate`) runs on a thread of its own while the caller waits with the GIL released
//! ([`run_detached`]), so Ctrl-C interrupts the caller at once; an interrupted call finishes
//! in the background before the next one starts.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use einsummable::generate::{GenerateOptions, Generator, Sampling};
use einsummable::models::ModelConfig;
use einsummable::models::checkpoint::Checkpoint;
use einsummable::{BackendParams, CompileOptions, DType};
use pyo3::prelude::*;

use crate::errors::{IntoPy, WorkloadError};
use crate::executable::{memory_budget_bytes, optimizer_by_name, topology_for};
use crate::graph::parse_dtype;
use crate::worker::{Cancel, run_detached};

/// The cache's tokens per sequence when `max_tokens` is not given: the model's context,
/// at most this many.
const DEFAULT_MAX_TOKENS: usize = 2048;

/// A model's decode step compiled for a batch of sequences and a cache capacity, with its
/// weights loaded: `generate` returns the new token ids.
#[pyclass(name = "NativeGenerator", module = "einsummable")]
pub struct PyGenerator {
    inner: Arc<Mutex<Generator>>,
    /// The config's end-of-sequence ids: the stop tokens unless told otherwise.
    eos: Vec<i32>,
    batch: usize,
    max_tokens: usize,
    devices: usize,
    topology: String,
    predicted_ms: f64,
}

/// Compiles the decode step of the model in `dir` for `batch` sequences of at most
/// `max_tokens` tokens (default: the model's context, at most 2048) on `devices` devices.
#[pyfunction]
#[pyo3(signature = (dir, devices = einsummable::DEFAULT_DEVICES, batch = 1, max_tokens = None, dtype = None,
    optimizer = einsummable::names::DEFAULT_OPTIMIZER, topology = None, backend = "cpu", memory_budget = None,
    seed = 0))]
#[allow(clippy::too_many_arguments)]
pub fn hf_generator(
    py: Python<'_>,
    dir: PathBuf,
    devices: usize,
    batch: usize,
    max_tokens: Option<usize>,
    dtype: Option<&str>,
    optimizer: &str,
    topology: Option<String>,
    backend: &str,
    memory_budget: Option<f64>,
    seed: u64,
) -> PyResult<PyGenerator> {
    let config = ModelConfig::from_file(dir.join("config.json")).map_err(|e| WorkloadError::new_err(e.to_string()))?;
    let dtype = match dtype {
        Some(d) => parse_dtype(d)?,
        None => config.dtype.unwrap_or(DType::F32),
    };
    let max_tokens = max_tokens.unwrap_or(config.max_position_embeddings.min(DEFAULT_MAX_TOKENS));
    let (topology, machine) = topology_for(topology, devices)?;
    let cost = einsummable::names::cost_model_by_name(einsummable::names::DEFAULT_COST_MODEL, &topology).py_err()?;
    let options = CompileOptions {
        devices,
        backend: einsummable::backend_by_name(backend, &BackendParams::default()).py_err()?,
        optimizer: optimizer_by_name(optimizer, seed)?,
        cost: Some(Arc::from(cost)),
        memory_budget: memory_budget_bytes(memory_budget)?,
        topology: machine,
        ..CompileOptions::default()
    };
    let eos = config.eos_token_ids.iter().filter_map(|&id| i32::try_from(id).ok()).collect();
    let checkpoint = Checkpoint::open(&dir).py_err()?;
    let generator = run_detached(py, "generator", &Cancel::default(), move || {
        Generator::new(config, checkpoint, batch, max_tokens, dtype, options)
    })?
    .py_err()?;
    let predicted_ms = generator.decoder().predicted_ms();
    Ok(PyGenerator { inner: Arc::new(Mutex::new(generator)), eos, batch, max_tokens, devices, topology, predicted_ms })
}

#[pymethods]
impl PyGenerator {
    /// Each prompt's new token ids (`prompts`: lists of ints, at most `batch` of them): up to
    /// `max_new_tokens`, greedy at `temperature` 0, otherwise sampled at that temperature
    /// among the `top_k` likeliest and the `top_p` nucleus, drawn from `seed`; a sequence
    /// ends at one of `stop_tokens` (default: the config's eos ids; `[]` for none).
    #[pyo3(signature = (prompts, max_new_tokens = 32, temperature = 0.0, top_k = None, top_p = None, seed = 0,
        stop_tokens = None))]
    #[allow(clippy::too_many_arguments)]
    fn generate(
        &self,
        py: Python<'_>,
        prompts: Vec<Vec<i32>>,
        max_new_tokens: usize,
        temperature: f32,
        top_k: Option<usize>,
        top_p: Option<f32>,
        seed: u64,
        stop_tokens: Option<Vec<i32>>,
    ) -> PyResult<Vec<Vec<i32>>> {
        let options = GenerateOptions {
            max_new_tokens,
            stop_tokens: stop_tokens.unwrap_or_else(|| self.eos.clone()),
            sampling: Sampling { temperature, top_k, top_p, seed },
        };
        let inner = Arc::clone(&self.inner);
        let generated = run_detached(py, "generate", &Cancel::default(), move || {
            let mut g = inner.lock().unwrap_or_else(|e| e.into_inner());
            g.generate(&prompts, &options)
        })?
        .py_err()?;
        Ok(generated.tokens)
    }

    /// Sequences per decode step.
    #[getter]
    fn batch(&self) -> usize {
        self.batch
    }

    /// The cache's tokens per sequence, prompt included.
    #[getter]
    fn max_tokens(&self) -> usize {
        self.max_tokens
    }

    /// The decode plan's predicted time per step on the topology, in ms.
    #[getter]
    fn predicted_ms(&self) -> f64 {
        self.predicted_ms
    }

    /// Plans compiled so far: the decode step's, and one prefill per batch of prompt lengths.
    #[getter]
    fn compiles(&self) -> usize {
        self.inner.lock().map_or(0, |g| g.compiles())
    }

    fn __repr__(&self) -> String {
        format!(
            "Generator(batch={}, max_tokens={}, devices={}, topology={:?}, predicted {:.4} ms per step)",
            self.batch, self.max_tokens, self.devices, self.topology, self.predicted_ms
        )
    }
}

//! What `plan`, `run` and `explain` compile: a named workload (`llama:layers=2,...`), or a
//! Hugging Face model directory (`hf:DIR`, its `config.json` and, to run, its safetensors
//! weights), and the prompt a model is given (`--tokens`).

use std::path::PathBuf;
use std::str::FromStr;

use einsum_models::decode::build_decoder;
use einsum_models::llama::{self, Model};
use einsum_models::{ModelConfig, checkpoint::Checkpoint};
use einsummable::{DType, Error, Executable, Graph, HostTensor, Result, Workload};

/// The prompt length a model is planned for when `--tokens` gives none.
pub const DEFAULT_MODEL_TOKENS: usize = 128;

/// A workload or a model.
pub enum Source {
    /// A named workload.
    Workload(Workload),
    /// A Hugging Face model directory and its config.
    Model {
        /// The directory.
        dir: PathBuf,
        /// Its `config.json`.
        config: Box<ModelConfig>,
    },
}

/// `--tokens`: the prompt's token ids (`1,2,3`), or, where only the prompt's length matters
/// (`plan`, `explain`), a count (`2048`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tokens(pub Vec<i32>);

impl FromStr for Tokens {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Tokens, String> {
        let ids = s
            .split(',')
            .map(|t| t.trim().parse::<i32>().map_err(|_| format!("`{t}` is not a token id (ids are written 1,2,3)")))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        if ids.is_empty() || ids.iter().any(|&i| i < 0) {
            return Err(format!("`{s}`: token ids are non-negative integers, at least one"));
        }
        Ok(Tokens(ids))
    }
}

impl Tokens {
    /// The prompt's length where only the length matters: a single number is a count.
    pub fn length(&self) -> usize {
        match self.0.as_slice() {
            [n] => *n as usize,
            ids => ids.len(),
        }
    }
}

/// A built graph: a workload's, or a model's with what loading it needs.
pub enum Built {
    /// A workload's graph.
    Workload(Graph),
    /// A model's graph, its weights and prompt input, its checkpoint directory and its
    /// vocabulary's size.
    Model(Box<Model>, PathBuf, usize),
}

impl Source {
    /// `hf:DIR` (the directory's `config.json` is read now) or a workload's spec.
    pub fn parse(spec: &str) -> Result<Source> {
        match spec.strip_prefix("hf:") {
            Some(dir) => {
                let dir = PathBuf::from(dir);
                let config = ModelConfig::from_file(dir.join("config.json"))?;
                Ok(Source::Model { dir, config: Box::new(config) })
            }
            None => Ok(Source::Workload(Workload::parse(spec)?)),
        }
    }

    /// Refuses, before the graph is built, a workload whose plan on `devices` could not fit
    /// the compiler's task limit (a model's graph is small beside its weights, and the
    /// compiler checks it).
    pub fn check_tasks(&self, devices: usize) -> Result<()> {
        if let Source::Workload(w) = self {
            w.check_tasks(devices, einsum_compile::footprint::LIMITS.tasks)?;
        }
        Ok(())
    }

    /// The graph in `dtype`; a model's over `tokens` positions.
    pub fn build(&self, dtype: DType, tokens: usize) -> Result<Built> {
        match self {
            Source::Workload(w) => Ok(Built::Workload(w.build(dtype)?)),
            Source::Model { dir, config } => {
                let model = llama::build(config, tokens, dtype)?;
                Ok(Built::Model(Box::new(model), dir.clone(), config.vocab_size))
            }
        }
    }
}

impl Source {
    /// A model's decode step ([`einsum_models::decode`]) for `batch` sequences over a KV
    /// cache of `max_tokens` tokens each, in `dtype`: the graph `generate` runs per token. A
    /// workload has none.
    pub fn decode_graph(&self, dtype: DType, batch: usize, max_tokens: usize) -> Result<Graph> {
        match self {
            Source::Model { config, .. } => Ok(build_decoder(config, batch, max_tokens, dtype)?.graph),
            Source::Workload(w) => Err(Error::Usage(format!(
                "--decode plans a model's decode step (hf:DIR); `{}` is a workload",
                w.name()
            ))),
        }
    }
}

impl Built {
    /// The graph.
    pub fn graph(&self) -> &Graph {
        match self {
            Built::Workload(g) => g,
            Built::Model(model, _, _) => &model.graph,
        }
    }

    /// Loads a model's weights from its checkpoint (each tensor read once, converted to the
    /// model's dtype; where the backend keeps parts of a weight and no host copy is kept, the
    /// parts alone) and the prompt `ids` (seeded random ids without), or a workload's
    /// seeded random inputs, keeping host copies of the weights or inputs only where `keep`
    /// asks (a reference run or a dump needs them).
    pub fn load(&self, exe: &mut Executable, ids: Option<&[i32]>, seed: u64, keep: bool) -> Result<()> {
        let Built::Model(model, dir, vocab) = self else {
            return if keep { exe.load_random(seed) } else { exe.load_random_resident(seed) };
        };
        let checkpoint = Checkpoint::open(dir)?;
        for w in &model.weights {
            match exe.needed_parts(w.input)? {
                // A rank of an MPI job reads its own devices' blocks only.
                Some(parts) if !keep => {
                    let parts = parts
                        .iter()
                        .map(|p| checkpoint.read_part(&w.name, &w.desc, p))
                        .collect::<std::result::Result<Vec<_>, _>>()?;
                    exe.load_resident_parts(w.input, &parts)?;
                }
                _ => {
                    let value = checkpoint.read_as(&w.name, &w.desc)?;
                    if keep { exe.load(w.input, value) } else { exe.load_resident(w.input, value) }?;
                }
            }
        }
        let ty = model.graph.desc(model.tokens)?.tensor_type();
        let ids = match ids {
            Some(ids) => HostTensor::from_i32(ty, ids.to_vec())?,
            None => HostTensor::random_indices(ty, *vocab, seed),
        };
        exe.load(model.tokens, ids)
    }
}

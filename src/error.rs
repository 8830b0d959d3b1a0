//! The driver's error type.

/// Result alias for the driver.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Every failure a user of the driver can hit; each message says what and where.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A graph that cannot be built (a bad shape or index naming its node, a tensor of
    /// another graph).
    #[error(transparent)]
    Graph(#[from] einsum_graph::Error),
    /// A failure of the spec machinery or of a computation (no spec for p, ...).
    #[error(transparent)]
    JoinAgg(#[from] einsum_joinagg::Error),
    /// A failure of the logical optimizer (unknown strategy or cost model, no devices, ...).
    #[error(transparent)]
    Logical(#[from] einsum_logical::Error),
    /// A failure of the core formalism.
    #[error(transparent)]
    Core(#[from] einsum_core::CoreError),
    /// An exchange program that does not parse, check or validate (with its line).
    #[error(transparent)]
    Exprog(#[from] einsum_exprog::Error),
    /// A program that cannot be simulated.
    #[error(transparent)]
    Simulate(#[from] einsum_exprog::SimulateError),
    /// Synthesis failed.
    #[error(transparent)]
    Synthesis(#[from] einsum_exprog::synth::SynthError),
    /// Physical compilation failed (placement, lowering, memory over capacity, ...).
    #[error(transparent)]
    Compile(#[from] einsum_compile::CompileError),
    /// The plan-then-compile pipeline failed otherwise (a budget above the devices' HBM).
    /// Its strategy and compile errors arrive as [`Error::Logical`] and [`Error::Compile`].
    #[error(transparent)]
    Pipeline(Box<einsum_compile::PipelineError>),
    /// A run failed on the backend (a kernel error, a panicking task, a bad input).
    #[error(transparent)]
    Backend(#[from] einsum_core::BackendError),
    /// A topology that cannot be loaded.
    #[error(transparent)]
    Topology(#[from] einsum_sim::TopologyError),
    /// Rewrites that could not find a graph's forms (an unsound rule).
    #[error(transparent)]
    Rewrite(#[from] einsum_rewrite::FormsError),
    /// A form of a contraction network that cannot be written as einsum steps.
    #[error(transparent)]
    RewriteStep(#[from] einsum_rewrite::StepError),
    /// A file that cannot be read or written (missing, unreadable, over the size cap of
    /// [`MAX_INPUT_FILE_BYTES`](einsum_core::fsio::MAX_INPUT_FILE_BYTES), not UTF-8, ...),
    /// naming it.
    #[error(transparent)]
    File(#[from] einsum_core::fsio::FileError),
    /// A failure about the contents of a file (an exchange program that does not parse,
    /// check, validate, simulate or synthesize): the file, then the error, which names the
    /// line and column where it can.
    #[error("{}: {source}", path.display())]
    InFile {
        /// The file.
        path: std::path::PathBuf,
        /// What is wrong with it.
        source: Box<Error>,
    },
    /// A directory that cannot be created, probed or written.
    #[error("{path}: {message}")]
    Io {
        /// The directory or file.
        path: String,
        /// What went wrong.
        message: String,
    },
    /// A workload that cannot be parsed or built, or an experiment that cannot run.
    #[error(transparent)]
    Experiment(#[from] einsum_experiments::Error),
    /// A Hugging Face model's `config.json` that cannot be read or is not supported (the
    /// error names the key).
    #[error(transparent)]
    ModelConfig(#[from] einsum_models::ConfigError),
    /// A model's graph that cannot be built (a prompt it cannot take).
    #[error(transparent)]
    Model(#[from] einsum_models::llama::ModelError),
    /// A checkpoint that cannot be read, or lacks or misshapes a tensor (the error names it).
    #[error(transparent)]
    Checkpoint(#[from] einsum_models::checkpoint::CheckpointError),
    /// A run that needs more host memory than the machine has available, refused before
    /// anything is allocated.
    #[error(
        "the run needs about {needed} bytes of host memory ({what}), but only {available} bytes are available; give smaller dimensions"
    )]
    HostMemory {
        /// Bytes the run would allocate.
        needed: usize,
        /// Bytes available (free memory, or what the address-space limit leaves).
        available: usize,
        /// What the need is made of.
        what: String,
    },
    /// A generation whose sequence would hold more tokens than the KV cache has rows.
    #[error(
        "prompt {prompt} needs {needed} tokens (its length plus the new tokens), the cache holds {max_tokens} per sequence; compile the generator with a larger max_tokens"
    )]
    CacheFull {
        /// The prompt, by its position in the batch.
        prompt: usize,
        /// Its length plus the new tokens asked for.
        needed: usize,
        /// The cache's rows per sequence.
        max_tokens: usize,
    },
    /// A tokenizer that cannot be loaded (a `tokenizer.json` the `tokenizers` crate does not
    /// read: malformed JSON, an unknown model), that fails on a text or ids, or whose ids do not
    /// fit the model: the file, then what is wrong.
    #[error("tokenizer {}: {message}", path.display())]
    Tokenizer {
        /// The tokenizer's file.
        path: std::path::PathBuf,
        /// What went wrong.
        message: String,
    },
    /// A bad command-line argument.
    #[error("{0}")]
    Usage(String),
}

impl Error {
    /// This error, as one about the contents of the file `path` ([`Error::InFile`]).
    pub fn in_file(self, path: &std::path::Path) -> Self {
        Error::InFile { path: path.to_path_buf(), source: Box::new(self) }
    }
}

impl From<einsum_compile::PipelineError> for Error {
    /// Flattens the pipeline's strategy and compile errors into [`Error::Logical`] and
    /// [`Error::Compile`], so that `compile` fails with the same variants as each stage.
    fn from(e: einsum_compile::PipelineError) -> Self {
        match e {
            einsum_compile::PipelineError::Logical(e) => Error::Logical(e),
            einsum_compile::PipelineError::Compile(e) => Error::Compile(e),
            other => Error::Pipeline(Box::new(other)),
        }
    }
}

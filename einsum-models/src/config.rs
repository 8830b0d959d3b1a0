//! The model configuration (`config.json`) of the LLaMA family as transformers defines it:
//! LLaMA 2/3/3.1/3.2, Mistral and Qwen2.
//!
//! [`ModelConfig::from_file`] and [`ModelConfig::from_json_str`] read a config as the hub
//! ships it (`rope_theta` and `rope_scaling` at the top level) or as transformers 5 writes it
//! (`rope_parameters`), applying transformers' defaults (`LlamaConfig`, `MistralConfig`,
//! `Qwen2Config`) where a key is absent or null. Every failure is a [`ConfigError`] naming the
//! file and the key; nothing panics on a hostile file.

use std::path::Path;

use einsum_core::DType;
use serde::{Deserialize, Deserializer};
use serde_json::Value;

use einsum_ops::rope::RopeFrequencies;

use crate::rope_scaling::{DEFAULT_THETA, Llama3Scaling, RopeConfig, RopeScaling, SUPPORTED_ROPE_TYPES, YarnScaling};

/// The largest size (of a dimension, a vocabulary, a context) a config may state: 2^31 − 1,
/// far above any real model, so that every product the planner forms fits in 64 bits.
pub const MAX_SIZE: u64 = i32::MAX as u64;

/// What is wrong with a model configuration; every variant names the file and the key.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{file}: cannot read the model configuration: {source}")]
    Io {
        /// The file.
        file: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The text is not JSON (or is cut short).
    #[error("{file}: malformed JSON at line {line}, column {column}: {message}")]
    Syntax {
        /// The file.
        file: String,
        /// 1-based line of the error.
        line: usize,
        /// 1-based column of the error.
        column: usize,
        /// The parser's message.
        message: String,
    },
    /// A key the configuration needs is absent (or null).
    #[error("{file}: missing key `{key}`: {reason}")]
    MissingKey {
        /// The file.
        file: String,
        /// The key, dotted under its parent (`rope_scaling.factor`).
        key: String,
        /// Why it is needed.
        reason: String,
    },
    /// A key has the wrong type or an impossible value.
    #[error("{file}: key `{key}`: {reason}")]
    InvalidValue {
        /// The file.
        file: String,
        /// The key, dotted under its parent.
        key: String,
        /// What is wrong (with the line and column where the parser knows them).
        reason: String,
    },
    /// The architecture is not one of the LLaMA family.
    #[error("{file}: key `{key}`: unknown architecture `{found}`; supported: {}", supported_architectures())]
    UnknownArchitecture {
        /// The file.
        file: String,
        /// `architectures` or `model_type`.
        key: String,
        /// The architecture named.
        found: String,
    },
    /// A rope type this crate does not compute (`longrope`, ...).
    #[error("{file}: key `{key}`: unsupported rope type `{found}`; supported: {}", SUPPORTED_ROPE_TYPES.join(", "))]
    UnsupportedRopeType {
        /// The file.
        file: String,
        /// The key naming the type (`rope_scaling.rope_type`, `rope_scaling.type`, ...).
        key: String,
        /// The rope type named.
        found: String,
    },
    /// An activation other than SiLU.
    #[error("{file}: key `hidden_act`: unsupported activation `{found}`; supported: silu")]
    UnsupportedActivation {
        /// The file.
        file: String,
        /// The activation named.
        found: String,
    },
}

/// A model family of the LLaMA lineage, as transformers names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Architecture {
    /// `LlamaForCausalLM` / `llama`: LLaMA 2, 3, 3.1, 3.2.
    Llama,
    /// `MistralForCausalLM` / `mistral`.
    Mistral,
    /// `Qwen2ForCausalLM` / `qwen2`.
    Qwen2,
}

impl Architecture {
    /// Every supported architecture.
    pub const ALL: [Architecture; 3] = [Architecture::Llama, Architecture::Mistral, Architecture::Qwen2];

    /// The transformers class (`architectures` entry).
    pub fn class_name(self) -> &'static str {
        match self {
            Architecture::Llama => "LlamaForCausalLM",
            Architecture::Mistral => "MistralForCausalLM",
            Architecture::Qwen2 => "Qwen2ForCausalLM",
        }
    }

    /// The transformers `model_type`.
    pub fn model_type(self) -> &'static str {
        match self {
            Architecture::Llama => "llama",
            Architecture::Mistral => "mistral",
            Architecture::Qwen2 => "qwen2",
        }
    }

    fn from_class_name(name: &str) -> Option<Architecture> {
        Architecture::ALL.into_iter().find(|a| a.class_name() == name)
    }

    fn from_model_type(name: &str) -> Option<Architecture> {
        Architecture::ALL.into_iter().find(|a| a.model_type() == name)
    }
}

fn supported_architectures() -> String {
    let names: Vec<String> =
        Architecture::ALL.iter().map(|a| format!("{} ({})", a.class_name(), a.model_type())).collect();
    names.join(", ")
}

/// The MLP's activation. Only SiLU (the LLaMA family's) is supported.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    /// `silu`: `x · sigmoid(x)`.
    Silu,
}

/// Which projections carry a bias.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Biases {
    /// `q_proj`, `k_proj`, `v_proj` (LLaMA: `attention_bias`; Qwen2: always).
    pub qkv: bool,
    /// `o_proj` (LLaMA: `attention_bias`; Mistral and Qwen2: never).
    pub o: bool,
    /// `gate_proj`, `up_proj`, `down_proj` (LLaMA: `mlp_bias`; Mistral and Qwen2: never).
    pub mlp: bool,
}

/// Sliding-window attention: each token sees the `size` tokens before it (itself included),
/// in the layers from `first_layer` on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlidingWindow {
    /// The window (`sliding_window`).
    pub size: usize,
    /// The first layer that slides (Mistral: 0; Qwen2: `max_window_layers`).
    pub first_layer: usize,
}

/// A LLaMA-family model's configuration, validated: sizes positive and within [`MAX_SIZE`],
/// the query heads a multiple of the key/value heads, an even head dimension, a positive
/// `rms_norm_eps`, rope parameters that yield finite frequencies.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelConfig {
    /// The model family.
    pub architecture: Architecture,
    /// Tokens in the vocabulary (`vocab_size`).
    pub vocab_size: usize,
    /// The residual stream's width (`hidden_size`).
    pub hidden_size: usize,
    /// The MLP's inner width (`intermediate_size`).
    pub intermediate_size: usize,
    /// Decoder layers (`num_hidden_layers`).
    pub num_hidden_layers: usize,
    /// Query heads (`num_attention_heads`).
    pub num_attention_heads: usize,
    /// Key/value heads (`num_key_value_heads`; grouped-query attention when fewer).
    pub num_key_value_heads: usize,
    /// Features per head (`head_dim`, else `hidden_size / num_attention_heads`).
    pub head_dim: usize,
    /// The context the model was built for (`max_position_embeddings`).
    pub max_position_embeddings: usize,
    /// RMSNorm's epsilon (`rms_norm_eps`).
    pub rms_norm_eps: f64,
    /// The MLP's activation (`hidden_act`).
    pub hidden_act: Activation,
    /// Whether the LM head is the embedding matrix (`tie_word_embeddings`).
    pub tie_word_embeddings: bool,
    /// Which projections have biases.
    pub biases: Biases,
    /// Sliding-window attention, when the model uses it.
    pub sliding_window: Option<SlidingWindow>,
    /// The rotary position embedding.
    pub rope: RopeConfig,
    /// The checkpoint's dtype (`dtype`, or `torch_dtype` before transformers 5), if stated.
    pub dtype: Option<DType>,
    /// Beginning-of-sequence token ids (`bos_token_id`, an integer or a list).
    pub bos_token_ids: Vec<u64>,
    /// End-of-sequence token ids (`eos_token_id`, an integer or a list).
    pub eos_token_ids: Vec<u64>,
}

impl ModelConfig {
    /// Reads and validates `path` (a `config.json`).
    pub fn from_file(path: impl AsRef<Path>) -> Result<ModelConfig, ConfigError> {
        let path = path.as_ref();
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io { file: file.clone(), source })?;
        ModelConfig::parse(&text, &file)
    }

    /// Parses and validates the text of a `config.json` (errors name the file `config.json`).
    pub fn from_json_str(text: &str) -> Result<ModelConfig, ConfigError> {
        ModelConfig::parse(text, "config.json")
    }

    /// The rope's frequencies for this model's heads, rotating a sequence of
    /// `sequence_length` tokens (see [`RopeConfig::frequencies`]).
    pub fn rope_frequencies(&self, sequence_length: usize) -> Result<RopeFrequencies, ConfigError> {
        self.rope.frequencies(self.head_dim, self.max_position_embeddings, sequence_length)
    }

    /// Query heads per key/value head.
    pub fn group_size(&self) -> usize {
        self.num_attention_heads / self.num_key_value_heads
    }

    fn parse(text: &str, file: &str) -> Result<ModelConfig, ConfigError> {
        let mut de = serde_json::Deserializer::from_str(text);
        let raw: RawConfig = serde_path_to_error::deserialize(&mut de).map_err(|e| json_error(file, e, ""))?;
        de.end().map_err(|e| ConfigError::Syntax {
            file: file.into(),
            line: e.line(),
            column: e.column(),
            message: e.to_string(),
        })?;
        Validator { file }.config(raw)
    }
}

/// A serde error as a [`ConfigError`]: syntax errors with their position, data errors naming
/// the key (`prefix` is the parent of a nested document, e.g. `rope_scaling`).
fn json_error(file: &str, e: serde_path_to_error::Error<serde_json::Error>, prefix: &str) -> ConfigError {
    use serde_json::error::Category;
    let path = e.path().to_string();
    let inner = e.into_inner();
    match inner.classify() {
        Category::Syntax | Category::Eof | Category::Io => ConfigError::Syntax {
            file: file.into(),
            line: inner.line(),
            column: inner.column(),
            message: inner.to_string(),
        },
        Category::Data => {
            let key = match (prefix, path.as_str()) {
                ("", ".") => "(top level)".to_string(),
                ("", p) => p.to_string(),
                (pre, ".") => pre.to_string(),
                (pre, p) => format!("{pre}.{p}"),
            };
            ConfigError::InvalidValue { file: file.into(), key, reason: inner.to_string() }
        }
    }
}

/// Distinguishes an absent key (`None`) from an explicit null (`Some(None)`), where
/// transformers treats them differently.
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(d).map(Some)
}

/// A token id or a list of them.
#[derive(Deserialize)]
#[serde(untagged)]
enum TokenIds {
    One(u64),
    Many(Vec<u64>),
}

impl TokenIds {
    fn into_vec(self) -> Vec<u64> {
        match self {
            TokenIds::One(id) => vec![id],
            TokenIds::Many(ids) => ids,
        }
    }
}

/// Token ids: the family's default when the key is absent, none when it is null.
fn token_ids(value: Option<Option<TokenIds>>, default: Vec<u64>) -> Vec<u64> {
    match value {
        None => default,
        Some(None) => Vec::new(),
        Some(Some(ids)) => ids.into_vec(),
    }
}

/// `config.json` as written, every key optional (unknown keys are ignored, as transformers
/// keeps them as plain attributes).
#[derive(Deserialize, Default)]
#[serde(default)]
struct RawConfig {
    architectures: Option<Vec<String>>,
    model_type: Option<String>,
    vocab_size: Option<u64>,
    hidden_size: Option<u64>,
    intermediate_size: Option<u64>,
    num_hidden_layers: Option<u64>,
    num_attention_heads: Option<u64>,
    #[serde(deserialize_with = "present")]
    num_key_value_heads: Option<Option<u64>>,
    head_dim: Option<u64>,
    max_position_embeddings: Option<u64>,
    rms_norm_eps: Option<f64>,
    hidden_act: Option<String>,
    tie_word_embeddings: Option<bool>,
    attention_bias: Option<bool>,
    mlp_bias: Option<bool>,
    #[serde(deserialize_with = "present")]
    sliding_window: Option<Option<u64>>,
    use_sliding_window: Option<bool>,
    max_window_layers: Option<u64>,
    torch_dtype: Option<String>,
    dtype: Option<String>,
    #[serde(deserialize_with = "present")]
    bos_token_id: Option<Option<TokenIds>>,
    #[serde(deserialize_with = "present")]
    eos_token_id: Option<Option<TokenIds>>,
    rope_theta: Option<f64>,
    rope_scaling: Option<Value>,
    rope_parameters: Option<Value>,
    original_max_position_embeddings: Option<u64>,
    partial_rotary_factor: Option<f64>,
}

/// A rope dictionary (`rope_scaling` or `rope_parameters`) as written.
#[derive(Deserialize, Default)]
#[serde(default)]
struct RawRope {
    rope_type: Option<String>,
    #[serde(rename = "type")]
    legacy_type: Option<String>,
    rope_theta: Option<f64>,
    factor: Option<f64>,
    low_freq_factor: Option<f64>,
    high_freq_factor: Option<f64>,
    original_max_position_embeddings: Option<u64>,
    attention_factor: Option<f64>,
    beta_fast: Option<f64>,
    beta_slow: Option<f64>,
    mscale: Option<f64>,
    mscale_all_dim: Option<f64>,
    truncate: Option<bool>,
    partial_rotary_factor: Option<f64>,
}

/// transformers' defaults for one family (`LlamaConfig`, `MistralConfig`, `Qwen2Config`).
struct Defaults {
    vocab_size: u64,
    hidden_size: u64,
    intermediate_size: u64,
    num_hidden_layers: u64,
    num_attention_heads: u64,
    /// `None`: as many as the query heads.
    num_key_value_heads: Option<u64>,
    max_position_embeddings: u64,
    bos_token_ids: Vec<u64>,
    eos_token_ids: Vec<u64>,
}

impl Defaults {
    fn of(architecture: Architecture) -> Defaults {
        match architecture {
            Architecture::Llama => Defaults {
                vocab_size: 32000,
                hidden_size: 4096,
                intermediate_size: 11008,
                num_hidden_layers: 32,
                num_attention_heads: 32,
                num_key_value_heads: None,
                max_position_embeddings: 2048,
                bos_token_ids: vec![1],
                eos_token_ids: vec![2],
            },
            Architecture::Mistral => Defaults {
                vocab_size: 32000,
                hidden_size: 4096,
                intermediate_size: 14336,
                num_hidden_layers: 32,
                num_attention_heads: 32,
                num_key_value_heads: Some(8),
                max_position_embeddings: 4096 * 32,
                bos_token_ids: vec![1],
                eos_token_ids: vec![2],
            },
            Architecture::Qwen2 => Defaults {
                vocab_size: 151936,
                hidden_size: 4096,
                intermediate_size: 22016,
                num_hidden_layers: 32,
                num_attention_heads: 32,
                num_key_value_heads: Some(32),
                max_position_embeddings: 32768,
                bos_token_ids: vec![],
                eos_token_ids: vec![],
            },
        }
    }
}

/// Turns a [`RawConfig`] into a [`ModelConfig`], naming `file` in its errors.
struct Validator<'a> {
    file: &'a str,
}

impl Validator<'_> {
    fn invalid(&self, key: &str, reason: impl Into<String>) -> ConfigError {
        ConfigError::InvalidValue { file: self.file.into(), key: key.into(), reason: reason.into() }
    }

    fn missing(&self, key: &str, reason: impl Into<String>) -> ConfigError {
        ConfigError::MissingKey { file: self.file.into(), key: key.into(), reason: reason.into() }
    }

    /// A size: `value` or the default, positive and at most [`MAX_SIZE`].
    fn size(&self, key: &str, value: Option<u64>, default: u64) -> Result<usize, ConfigError> {
        let v = value.unwrap_or(default);
        if v == 0 {
            return Err(self.invalid(key, "must be positive, got 0"));
        }
        if v > MAX_SIZE {
            return Err(self.invalid(key, format!("{v} exceeds the largest supported size {MAX_SIZE}")));
        }
        Ok(v as usize)
    }

    /// A real parameter: finite and positive.
    fn positive(&self, key: &str, v: f64) -> Result<f64, ConfigError> {
        if v.is_finite() && v > 0.0 {
            Ok(v)
        } else {
            Err(self.invalid(key, format!("must be positive and finite, got {v}")))
        }
    }

    fn architecture(&self, raw: &RawConfig) -> Result<Architecture, ConfigError> {
        let from_type = raw.model_type.as_ref().map(|t| {
            Architecture::from_model_type(t).ok_or_else(|| ConfigError::UnknownArchitecture {
                file: self.file.into(),
                key: "model_type".into(),
                found: t.clone(),
            })
        });
        match raw.architectures.as_deref() {
            Some([]) | None => from_type.unwrap_or_else(|| {
                Err(self.missing("architectures", "neither `architectures` nor `model_type` names the model"))
            }),
            Some([class, ..]) => {
                let arch = Architecture::from_class_name(class).ok_or_else(|| ConfigError::UnknownArchitecture {
                    file: self.file.into(),
                    key: "architectures".into(),
                    found: class.clone(),
                })?;
                match from_type {
                    Some(Ok(t)) if t != arch => Err(self.invalid(
                        "model_type",
                        format!("`{}` contradicts `architectures` ({})", t.model_type(), arch.class_name()),
                    )),
                    _ => Ok(arch),
                }
            }
        }
    }

    fn dtype(&self, raw: &RawConfig) -> Result<Option<DType>, ConfigError> {
        let (key, name) = match (&raw.dtype, &raw.torch_dtype) {
            (Some(d), _) => ("dtype", d),
            (None, Some(d)) => ("torch_dtype", d),
            (None, None) => return Ok(None),
        };
        match name.as_str() {
            "float32" => Ok(Some(DType::F32)),
            "float16" => Ok(Some(DType::F16)),
            "bfloat16" => Ok(Some(DType::BF16)),
            other => {
                Err(self.invalid(key, format!("unsupported dtype `{other}`; supported: float32, float16, bfloat16")))
            }
        }
    }

    fn config(&self, raw: RawConfig) -> Result<ModelConfig, ConfigError> {
        let architecture = self.architecture(&raw)?;
        let def = Defaults::of(architecture);
        let hidden_size = self.size("hidden_size", raw.hidden_size, def.hidden_size)?;
        let num_attention_heads = self.size("num_attention_heads", raw.num_attention_heads, def.num_attention_heads)?;
        let kv = match raw.num_key_value_heads {
            Some(Some(n)) => Some(n),
            Some(None) => None,
            None => def.num_key_value_heads,
        };
        let num_key_value_heads = self.size("num_key_value_heads", kv, num_attention_heads as u64)?;
        if !num_attention_heads.is_multiple_of(num_key_value_heads) {
            return Err(self.invalid(
                "num_key_value_heads",
                format!("{num_key_value_heads} key/value heads do not divide {num_attention_heads} query heads"),
            ));
        }
        let head_dim = match raw.head_dim {
            Some(d) => self.size("head_dim", Some(d), 0)?,
            None => {
                let d = hidden_size / num_attention_heads;
                if d == 0 {
                    return Err(self.invalid(
                        "num_attention_heads",
                        format!("{num_attention_heads} heads leave no feature of hidden_size {hidden_size} to each"),
                    ));
                }
                d
            }
        };
        if !head_dim.is_multiple_of(2) {
            return Err(
                self.invalid("head_dim", format!("the rotary embedding needs an even head dimension, got {head_dim}"))
            );
        }
        let max_position_embeddings =
            self.size("max_position_embeddings", raw.max_position_embeddings, def.max_position_embeddings)?;
        let num_hidden_layers = self.size("num_hidden_layers", raw.num_hidden_layers, def.num_hidden_layers)?;
        let hidden_act = match raw.hidden_act.as_deref() {
            None | Some("silu") => Activation::Silu,
            Some(other) => {
                return Err(ConfigError::UnsupportedActivation { file: self.file.into(), found: other.into() });
            }
        };
        if let Some(f) = raw.partial_rotary_factor
            && f != 1.0
        {
            return Err(
                self.invalid("partial_rotary_factor", format!("only a fully rotated head (1.0) is supported, got {f}"))
            );
        }
        let biases = match architecture {
            Architecture::Llama => {
                let attention = raw.attention_bias.unwrap_or(false);
                Biases { qkv: attention, o: attention, mlp: raw.mlp_bias.unwrap_or(false) }
            }
            Architecture::Mistral => Biases { qkv: false, o: false, mlp: false },
            Architecture::Qwen2 => Biases { qkv: true, o: false, mlp: false },
        };
        let sliding_window = self.sliding_window(&raw, architecture, num_hidden_layers)?;
        let rope = self.rope(&raw, max_position_embeddings)?;
        let rope_key = self.rope_key(&raw);
        let config = ModelConfig {
            architecture,
            vocab_size: self.size("vocab_size", raw.vocab_size, def.vocab_size)?,
            hidden_size,
            intermediate_size: self.size("intermediate_size", raw.intermediate_size, def.intermediate_size)?,
            num_hidden_layers,
            num_attention_heads,
            num_key_value_heads,
            head_dim,
            max_position_embeddings,
            rms_norm_eps: self.positive("rms_norm_eps", raw.rms_norm_eps.unwrap_or(1e-6))?,
            hidden_act,
            tie_word_embeddings: raw.tie_word_embeddings.unwrap_or(false),
            biases,
            sliding_window,
            rope,
            dtype: self.dtype(&raw)?,
            bos_token_ids: token_ids(raw.bos_token_id, def.bos_token_ids),
            eos_token_ids: token_ids(raw.eos_token_id, def.eos_token_ids),
        };
        // The frequencies at the model's context must be finite: a check of the rope's
        // parameters together (a YaRN range, a theta of 1, ...), not one key alone.
        config.rope_frequencies(max_position_embeddings).map_err(|e| match e {
            ConfigError::InvalidValue { reason, .. } => self.invalid(rope_key, reason),
            other => other,
        })?;
        Ok(config)
    }

    /// Mistral slides in every layer when `sliding_window` is set (4096 when absent, none
    /// when null); Qwen2 only with `use_sliding_window`, from layer `max_window_layers` on.
    fn sliding_window(
        &self,
        raw: &RawConfig,
        architecture: Architecture,
        layers: usize,
    ) -> Result<Option<SlidingWindow>, ConfigError> {
        let window = match raw.sliding_window {
            Some(w) => w,
            None => Some(4096),
        };
        let first_layer = match architecture {
            Architecture::Llama => return Ok(None),
            Architecture::Mistral => 0,
            Architecture::Qwen2 if !raw.use_sliding_window.unwrap_or(false) => return Ok(None),
            Architecture::Qwen2 => raw.max_window_layers.unwrap_or(28).min(layers as u64) as usize,
        };
        match window {
            None => Ok(None),
            Some(size) => Ok(Some(SlidingWindow { size: self.size("sliding_window", Some(size), 0)?, first_layer })),
        }
    }

    /// The key holding the rope's parameters.
    fn rope_key(&self, raw: &RawConfig) -> &'static str {
        match (&raw.rope_scaling, &raw.rope_parameters) {
            (Some(Value::Object(_)), _) => "rope_scaling",
            (_, Some(Value::Object(_))) => "rope_parameters",
            _ => "rope_theta",
        }
    }

    /// The rope: `rope_scaling` (the hub's spelling; it wins, as in transformers) or
    /// `rope_parameters` (transformers 5's), the base frequency from inside it, else the
    /// top-level `rope_theta`, else 10000.
    fn rope(&self, raw: &RawConfig, max_position_embeddings: usize) -> Result<RopeConfig, ConfigError> {
        let section = match (&raw.rope_scaling, &raw.rope_parameters) {
            (Some(v), _) if !v.is_null() => Some(("rope_scaling", v)),
            (_, Some(v)) if !v.is_null() => Some(("rope_parameters", v)),
            _ => None,
        };
        let Some((key, value)) = section else {
            let theta = self.positive("rope_theta", raw.rope_theta.unwrap_or(DEFAULT_THETA))?;
            return Ok(RopeConfig { theta, scaling: RopeScaling::Default });
        };
        let Value::Object(map) = value else {
            return Err(self.invalid(key, format!("must be an object, got {value}")));
        };
        if let Some((layer, _)) = map.iter().find(|(_, v)| v.is_object()) {
            return Err(self.invalid(
                &format!("{key}.{layer}"),
                "rope parameters per layer type are not supported by the LLaMA family",
            ));
        }
        let rope: RawRope = serde_path_to_error::deserialize(value).map_err(|e| json_error(self.file, e, key))?;
        let k = |name: &str| format!("{key}.{name}");
        let (type_key, rope_type) = match (&rope.rope_type, &rope.legacy_type) {
            (Some(t), _) => (k("rope_type"), t.as_str()),
            (None, Some(t)) => (k("type"), t.as_str()),
            (None, None) => (k("rope_type"), "default"),
        };
        let theta = match rope.rope_theta {
            Some(t) => self.positive(&k("rope_theta"), t)?,
            None => self.positive("rope_theta", raw.rope_theta.unwrap_or(DEFAULT_THETA))?,
        };
        if let Some(f) = rope.partial_rotary_factor
            && f != 1.0
        {
            return Err(self.invalid(
                &k("partial_rotary_factor"),
                format!("only a fully rotated head (1.0) is supported, got {f}"),
            ));
        }
        let scaling = self.rope_scaling(raw, &rope, key, (type_key, rope_type), max_position_embeddings)?;
        Ok(RopeConfig { theta, scaling })
    }

    /// The scaling of rope section `key` (`rope`, its type read from `type_key`).
    fn rope_scaling(
        &self,
        raw: &RawConfig,
        rope: &RawRope,
        key: &str,
        (type_key, rope_type): (String, &str),
        max_position_embeddings: usize,
    ) -> Result<RopeScaling, ConfigError> {
        let k = |name: &str| format!("{key}.{name}");
        let factor = |required_by: &str| match rope.factor {
            Some(f) => self.positive(&k("factor"), f),
            None => Err(self.missing(&k("factor"), format!("a `{required_by}` rope needs its scaling factor"))),
        };
        // transformers gives a top-level `original_max_position_embeddings` priority (Phi3's
        // spelling), then the rope's own, then the model's context.
        let original = |name: &str| -> Result<usize, ConfigError> {
            match (raw.original_max_position_embeddings, rope.original_max_position_embeddings) {
                (Some(v), _) => self.size("original_max_position_embeddings", Some(v), 0),
                (None, Some(v)) => self.size(&k(name), Some(v), 0),
                (None, None) => Ok(max_position_embeddings),
            }
        };
        Ok(match rope_type {
            "default" => RopeScaling::Default,
            "linear" => RopeScaling::Linear { factor: factor("linear")? },
            "dynamic" => RopeScaling::Dynamic { factor: factor("dynamic")? },
            "llama3" => {
                let need = |name: &str, v: Option<f64>| match v {
                    Some(v) => self.positive(&k(name), v),
                    None => Err(self.missing(&k(name), "a `llama3` rope needs it")),
                };
                let low_freq_factor = need("low_freq_factor", rope.low_freq_factor)?;
                let high_freq_factor = need("high_freq_factor", rope.high_freq_factor)?;
                if high_freq_factor <= low_freq_factor {
                    return Err(self.invalid(
                        &k("high_freq_factor"),
                        format!("must exceed low_freq_factor ({low_freq_factor}), got {high_freq_factor}"),
                    ));
                }
                RopeScaling::Llama3(Llama3Scaling {
                    factor: factor("llama3")?,
                    low_freq_factor,
                    high_freq_factor,
                    original_max_position_embeddings: original("original_max_position_embeddings")?,
                })
            }
            "yarn" => {
                let original_max_position_embeddings = original("original_max_position_embeddings")?;
                let factor = match rope.factor {
                    Some(f) => self.positive(&k("factor"), f)?,
                    None => max_position_embeddings as f64 / original_max_position_embeddings as f64,
                };
                let finite = |name: &str, v: Option<f64>| match v {
                    Some(v) if !v.is_finite() => Err(self.invalid(&k(name), format!("must be finite, got {v}"))),
                    v => Ok(v),
                };
                // transformers reads `beta_fast or 32`: null and 0 take the default.
                let beta = |name: &str, v: Option<f64>, default: f64| {
                    finite(name, v).map(|v| v.filter(|b| *b != 0.0).unwrap_or(default))
                };
                RopeScaling::Yarn(YarnScaling {
                    factor,
                    original_max_position_embeddings,
                    attention_factor: rope
                        .attention_factor
                        .map(|a| self.positive(&k("attention_factor"), a))
                        .transpose()?,
                    beta_fast: beta("beta_fast", rope.beta_fast, 32.0)?,
                    beta_slow: beta("beta_slow", rope.beta_slow, 1.0)?,
                    mscale: finite("mscale", rope.mscale)?,
                    mscale_all_dim: finite("mscale_all_dim", rope.mscale_all_dim)?,
                    truncate: rope.truncate.unwrap_or(true),
                })
            }
            other => {
                return Err(ConfigError::UnsupportedRopeType {
                    file: self.file.into(),
                    key: type_key,
                    found: other.into(),
                });
            }
        })
    }
}

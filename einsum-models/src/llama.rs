//! The LLaMA family's forward pass as a [`Graph`], exactly as transformers' `LlamaForCausalLM`,
//! `MistralForCausalLM` and `Qwen2ForCausalLM` compute it, with one graph input per
//! checkpoint tensor.
//!
//! Every weight input carries its checkpoint tensor's name (`model.layers.0.self_attn.q_proj.weight`)
//! and its stored layout, with the checkpoint's flat dimensions split by name: `q_proj.weight`,
//! stored `[heads·d_head, d_model]`, is the input `[heads_q, d_head, d_model]`, the same
//! row-major elements. Contractions name their indices, so no weight is transposed, and a
//! checkpoint tensor is read straight into its input ([`Weight`]).
//!
//! The pass: token ids → embedding; per layer `h = x + o(attention(rope(q(n)), rope(k(n)),
//! v(n)))` with `n = rmsnorm(x)`, then `x = h + down(silu(gate(m)) ⊙ up(m))` with
//! `m = rmsnorm(h)`; a final RMSNorm and the vocabulary head (the embedding table itself when
//! the embeddings are tied). Attention is causal over the prompt, grouped-query, scaled by
//! `d_head^-1/2`; the rope is the config's, with its scaling.

use einsum_core::{DType, HostTensor, TensorDesc};
use einsum_graph::{Graph, Tensor};
use einsum_joinagg::IndexRole;
use einsum_ops::Packing;
use einsum_ops::attention::AttentionConfig;
use einsum_ops::binary::BinaryOp;
use einsum_ops::rope::RopeFrequencies;
use einsum_ops::unary::UnaryOp;

use crate::checkpoint::{Checkpoint, CheckpointError};
use crate::config::ModelConfig;

/// Why a model's graph could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// The graph builder refused a step (a shape the config makes inconsistent).
    #[error(transparent)]
    Graph(#[from] einsum_graph::Error),
    /// The config cannot give the rope's frequencies.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// A prompt the model cannot take.
    #[error("{0}")]
    Prompt(String),
}

/// One weight of the graph and the checkpoint tensor it is read from.
#[derive(Clone, Debug)]
pub struct Weight {
    /// The graph input.
    pub input: Tensor,
    /// The checkpoint tensor's name (also the input's name).
    pub name: String,
    /// The input's type: the checkpoint tensor's elements, row-major, with its flat
    /// dimensions split by name ([`Checkpoint::read_as`]).
    pub desc: TensorDesc,
}

/// A model's forward pass over a prompt: the graph, its token-id input, its logits, and its
/// weights.
#[derive(Debug)]
pub struct Model {
    /// The computation.
    pub graph: Graph,
    /// The i32 token ids, `[tokens]`: the input named `tokens` (transformers' `input_ids`).
    pub tokens: Tensor,
    /// The logits, `[tokens, vocab]`, saved as `logits`.
    pub logits: Tensor,
    /// Every weight input, in the order they were declared.
    pub weights: Vec<Weight>,
    /// The dtype weights and activations are stored in.
    pub dtype: DType,
}

impl Model {
    /// Reads every weight from `checkpoint` ([`Checkpoint::read_as`]: its stored elements in
    /// the input's type), converted once to the model's dtype, and hands each to `load` (a
    /// prepared executable's, which places its blocks on the devices) before reading the
    /// next: the host holds one tensor at a time, never the checkpoint.
    ///
    /// A tensor the checkpoint lacks or stores in a shape that is not the input's with
    /// adjacent dimensions merged is the checkpoint's error, naming it.
    pub fn load_weights<E: From<CheckpointError>>(
        &self,
        checkpoint: &Checkpoint,
        load: impl FnMut(Tensor, HostTensor) -> Result<(), E>,
    ) -> Result<(), E> {
        load_weights(&self.weights, checkpoint, load)
    }
}

/// Reads each of `weights` from `checkpoint` and hands it to `load`, one at a time, as
/// [`Model::load_weights`] does (for any graph of the model: a prefill's, a decoder's).
pub fn load_weights<E: From<CheckpointError>>(
    weights: &[Weight],
    checkpoint: &Checkpoint,
    mut load: impl FnMut(Tensor, HostTensor) -> Result<(), E>,
) -> Result<(), E> {
    for w in weights {
        load(w.input, checkpoint.read_as(&w.name, &w.desc)?)?;
    }
    Ok(())
}

/// Builds the forward pass of `config`'s model over a prompt of `tokens` tokens, with weights
/// and activations stored in `dtype`.
///
/// A prompt longer than the model's sliding window (Mistral v0.1) is refused: the window is
/// not modelled, and within it attention is plain causal attention.
pub fn build(config: &ModelConfig, tokens: usize, dtype: DType) -> Result<Model, ModelError> {
    if tokens == 0 {
        return Err(ModelError::Prompt("a prompt needs at least one token".into()));
    }
    check_window(config, tokens)?;
    let mut b = Builder::new(config, dtype)?;
    let ids = b.g.input("tokens", &[("tokens", tokens)], DType::I32)?;
    let (mut x, embed) = b.embed(ids)?;
    let rope = config.rope_frequencies(tokens)?;
    let packing = Packing::uniform(1, tokens).map_err(|e| ModelError::Prompt(e.to_string()))?;
    for layer in 0..config.num_hidden_layers {
        x = b.layer(x, layer, &Attend::Prompt { rope: &rope, packing: &packing })?;
    }
    let logits = b.head(x, embed)?;
    Ok(Model { graph: b.g, tokens: ids, logits, weights: b.weights, dtype })
}

/// Refuses a sequence of `tokens` tokens longer than the model's sliding window (Mistral
/// v0.1), which is not modelled: within it, attention is plain causal attention.
pub(crate) fn check_window(config: &ModelConfig, tokens: usize) -> Result<(), ModelError> {
    match config.sliding_window.filter(|w| tokens > w.size) {
        Some(w) => Err(ModelError::Prompt(format!(
            "a sequence of {tokens} tokens is longer than the model's sliding window of {}, which is not supported",
            w.size
        ))),
        None => Ok(()),
    }
}

/// How a layer's attention sees its keys.
pub(crate) enum Attend<'a> {
    /// Causal attention over the packed prompts of `packing`, positions counted from each
    /// prompt's start.
    Prompt { rope: &'a RopeFrequencies, packing: &'a Packing },
    /// One new token per sequence (the tokens index is the batch) at the i32 `positions`,
    /// over a cache of `max_tokens` rows per sequence: the layer declares its cache inputs.
    Cached { rope: &'a RopeFrequencies, positions: Tensor, max_tokens: usize },
}

/// A layer's rotated keys and values `[heads_kv, tokens, d_head]`, and under
/// [`Attend::Cached`] its cache inputs `[heads_kv, tokens, cache, d_head]`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LayerKv {
    pub(crate) k: Tensor,
    pub(crate) v: Tensor,
    pub(crate) cache: Option<(Tensor, Tensor)>,
}

/// The graph under construction, the weights declared so far and every layer's keys and
/// values.
pub(crate) struct Builder<'a> {
    pub(crate) g: Graph,
    c: &'a ModelConfig,
    dtype: DType,
    pub(crate) weights: Vec<Weight>,
    pub(crate) kv: Vec<LayerKv>,
}

impl<'a> Builder<'a> {
    /// An empty graph for `config`'s model in `dtype`.
    pub(crate) fn new(config: &'a ModelConfig, dtype: DType) -> Result<Self, ModelError> {
        let mut b = Builder { g: Graph::new(), c: config, dtype, weights: Vec::new(), kv: Vec::new() };
        b.g.role("d_ff", IndexRole::FfnHidden)?;
        Ok(b)
    }

    /// The embeddings of the i32 `ids`, `[ids' index, d_model]`, and the embedding table.
    pub(crate) fn embed(&mut self, ids: Tensor) -> Result<(Tensor, Tensor), ModelError> {
        let c = self.c;
        let embed = self.weight("model.embed_tokens.weight", &[("vocab", c.vocab_size), ("d_model", c.hidden_size)])?;
        Ok((self.g.embedding(embed, ids, "vocab")?, embed))
    }

    /// The final RMSNorm and the vocabulary head (the embedding table `embed` when tied) on
    /// `x: [tokens, d_model]`: the logits `[tokens, vocab]`, saved as `logits`.
    pub(crate) fn head(&mut self, x: Tensor, embed: Tensor) -> Result<Tensor, ModelError> {
        let c = self.c;
        let norm = self.weight("model.norm.weight", &[("d_model", c.hidden_size)])?;
        let h = self.g.rmsnorm(x, norm, "d_model", c.rms_norm_eps as f32)?;
        let head = if c.tie_word_embeddings {
            embed
        } else {
            self.weight("lm_head.weight", &[("vocab", c.vocab_size), ("d_model", c.hidden_size)])?
        };
        let logits = self.g.einsum("td,vd->tv", &[h, head])?;
        self.g.save_as(logits, "logits")?;
        Ok(logits)
    }

    /// The weight input `name`, `dims` over its stored elements.
    fn weight(&mut self, name: &str, dims: &[(&str, usize)]) -> Result<Tensor, ModelError> {
        let input = self.g.input(name, dims, self.dtype)?;
        let desc = self.g.desc(input)?.clone();
        self.weights.push(Weight { input, name: name.to_string(), desc });
        Ok(input)
    }

    /// `x + bias` where the config gives the projection a bias.
    fn bias(&mut self, x: Tensor, name: &str, dims: &[(&str, usize)], present: bool) -> Result<Tensor, ModelError> {
        if !present {
            return Ok(x);
        }
        let b = self.weight(name, dims)?;
        Ok(self.g.binary(x, b, BinaryOp::Add)?)
    }

    /// One decoder layer.
    pub(crate) fn layer(&mut self, x: Tensor, layer: usize, attend: &Attend<'_>) -> Result<Tensor, ModelError> {
        let c = self.c;
        let (d, f, e) = (c.hidden_size, c.intermediate_size, c.head_dim);
        let (hq, hkv) = (c.num_attention_heads, c.num_key_value_heads);
        let eps = c.rms_norm_eps as f32;
        let p = |name: &str| format!("model.layers.{layer}.{name}");
        let ln1 = self.weight(&p("input_layernorm.weight"), &[("d_model", d)])?;
        let n = self.g.rmsnorm(x, ln1, "d_model", eps)?;

        let qkv = c.biases.qkv;
        let wq = self.weight(&p("self_attn.q_proj.weight"), &[("heads_q", hq), ("d_head", e), ("d_model", d)])?;
        let q = self.g.einsum("td,hed->hte", &[n, wq])?;
        let q = self.bias(q, &p("self_attn.q_proj.bias"), &[("heads_q", hq), ("d_head", e)], qkv)?;
        let wk = self.weight(&p("self_attn.k_proj.weight"), &[("heads_kv", hkv), ("d_head", e), ("d_model", d)])?;
        let k = self.g.einsum("td,hed->hte", &[n, wk])?;
        let k = self.bias(k, &p("self_attn.k_proj.bias"), &[("heads_kv", hkv), ("d_head", e)], qkv)?;
        let wv = self.weight(&p("self_attn.v_proj.weight"), &[("heads_kv", hkv), ("d_head", e), ("d_model", d)])?;
        let v = self.g.einsum("td,hed->hte", &[n, wv])?;
        let v = self.bias(v, &p("self_attn.v_proj.bias"), &[("heads_kv", hkv), ("d_head", e)], qkv)?;
        let a = self.attend(q, k, v, layer, attend)?;
        let wo = self.weight(&p("self_attn.o_proj.weight"), &[("d_model", d), ("heads_q", hq), ("d_head", e)])?;
        let o = self.g.einsum("hte,dhe->td", &[a, wo])?;
        let o = self.bias(o, &p("self_attn.o_proj.bias"), &[("d_model", d)], c.biases.o)?;
        let h = self.g.binary(x, o, BinaryOp::Add)?;

        let ln2 = self.weight(&p("post_attention_layernorm.weight"), &[("d_model", d)])?;
        let m = self.g.rmsnorm(h, ln2, "d_model", eps)?;
        let mlp = c.biases.mlp;
        let wg = self.weight(&p("mlp.gate_proj.weight"), &[("d_ff", f), ("d_model", d)])?;
        let gate = self.g.einsum("td,fd->tf", &[m, wg])?;
        let gate = self.bias(gate, &p("mlp.gate_proj.bias"), &[("d_ff", f)], mlp)?;
        let wu = self.weight(&p("mlp.up_proj.weight"), &[("d_ff", f), ("d_model", d)])?;
        let up = self.g.einsum("td,fd->tf", &[m, wu])?;
        let up = self.bias(up, &p("mlp.up_proj.bias"), &[("d_ff", f)], mlp)?;
        let gate = self.g.unary(gate, UnaryOp::Silu)?;
        let act = self.g.binary(gate, up, BinaryOp::Mul)?;
        let wd = self.weight(&p("mlp.down_proj.weight"), &[("d_model", d), ("d_ff", f)])?;
        let down = self.g.einsum("tf,df->td", &[act, wd])?;
        let down = self.bias(down, &p("mlp.down_proj.bias"), &[("d_model", d)], mlp)?;
        Ok(self.g.binary(h, down, BinaryOp::Add)?)
    }

    /// Rotates `q` and `k` and attends as `attend` says, recording the layer's keys and values.
    fn attend(
        &mut self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        layer: usize,
        attend: &Attend<'_>,
    ) -> Result<Tensor, ModelError> {
        match *attend {
            Attend::Prompt { rope, packing } => {
                let rope =
                    |g: &mut Graph, x| g.rope_with_frequencies(x, "tokens", "d_head", rope.clone(), packing.clone());
                let (q, k) = (rope(&mut self.g, q)?, rope(&mut self.g, k)?);
                self.kv.push(LayerKv { k, v, cache: None });
                let config = AttentionConfig { causal: true, packing: packing.clone(), scale: None };
                Ok(self.g.attention(q, k, v, "tokens", "d_head", config)?)
            }
            Attend::Cached { rope, positions, max_tokens } => {
                let rope = |g: &mut Graph, x| g.rope_at(x, positions, "tokens", "d_head", rope.clone(), max_tokens);
                let (q, k) = (rope(&mut self.g, q)?, rope(&mut self.g, k)?);
                let c = self.c;
                let batch = self.g.desc(positions)?.dims[0].extent;
                let dims = [
                    ("heads_kv", c.num_key_value_heads),
                    ("tokens", batch),
                    ("cache", max_tokens),
                    ("d_head", c.head_dim),
                ];
                let k_cache = self.g.input(&format!("model.layers.{layer}.k_cache"), &dims, self.dtype)?;
                let v_cache = self.g.input(&format!("model.layers.{layer}.v_cache"), &dims, self.dtype)?;
                self.kv.push(LayerKv { k, v, cache: Some((k_cache, v_cache)) });
                Ok(self.g.cached_attention(q, k, v, k_cache, v_cache, positions, "tokens", "d_head", None)?)
            }
        }
    }
}

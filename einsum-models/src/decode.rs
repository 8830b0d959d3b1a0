//! The two graphs of generation with a KV cache: the prefill over a batch of prompts, which
//! gives every prompt's next-token logits and every layer's rotated keys and values, and the
//! decode step, which takes one new token per sequence at its position and attends over a
//! cache of those keys and values plus its own.
//!
//! Both share the forward pass of [`llama`](crate::llama) (the same weight inputs, by the
//! same checkpoint names) and rotate by the same frequencies, those of a sequence of the
//! cache's capacity, so the keys the prefill writes into the cache are the ones the decode
//! step would have computed. The cache is a pair of graph inputs per layer,
//! `[heads_kv, tokens, cache, d_head]` (the tokens index is the batch of sequences): it lives
//! on the devices in the decode plan's layout, and the driver writes each step's new keys and
//! values into it (`Executable::write_input`).

use einsum_core::DType;
use einsum_graph::{Graph, Tensor};
use einsum_ops::Packing;

use crate::RopeScaling;
use crate::config::ModelConfig;
use crate::llama::{Attend, Builder, ModelError, Weight, check_window};

/// One layer's keys and values: a graph's outputs `[heads_kv, tokens, d_head]`, saved as
/// `model.layers.N.k` and `...v`.
#[derive(Clone, Copy, Debug)]
pub struct KeysValues {
    /// The rotated keys.
    pub k: Tensor,
    /// The values.
    pub v: Tensor,
}

/// The prefill of a batch of prompts packed end to end.
#[derive(Debug)]
pub struct Prefill {
    /// The computation.
    pub graph: Graph,
    /// The i32 token ids of every prompt, one after another, `[tokens]` (named `tokens`).
    pub tokens: Tensor,
    /// The logits of every prompt's last token, `[prompts, vocab]`, saved as `logits`.
    pub logits: Tensor,
    /// Every layer's keys and values over all the prompts' tokens.
    pub kv: Vec<KeysValues>,
    /// Every weight input.
    pub weights: Vec<Weight>,
    /// Where each prompt starts and ends along `tokens`.
    pub packing: Packing,
}

/// One decode step for a batch of sequences.
#[derive(Debug)]
pub struct Decoder {
    /// The computation.
    pub graph: Graph,
    /// The i32 id of each sequence's new token, `[tokens]` (one per sequence; named `tokens`).
    pub tokens: Tensor,
    /// The i32 position of each new token in its sequence (the tokens before it are in the
    /// cache), `[tokens]`, named `positions`.
    pub positions: Tensor,
    /// The new tokens' logits, `[tokens, vocab]`, saved as `logits`.
    pub logits: Tensor,
    /// Every layer's cache inputs, `[heads_kv, tokens, cache, d_head]`, named
    /// `model.layers.N.k_cache` and `...v_cache`.
    pub caches: Vec<KeysValues>,
    /// Every layer's new keys and values, `[heads_kv, tokens, d_head]`, to write into the
    /// cache at each sequence's position.
    pub kv: Vec<KeysValues>,
    /// Every weight input.
    pub weights: Vec<Weight>,
    /// The cache's capacity: the most tokens a sequence may hold, prompt included.
    pub max_tokens: usize,
}

/// The prefill of prompts of `lengths` tokens for a cache of `max_tokens` tokens per sequence
/// (whose rope frequencies it uses), in `dtype`.
///
/// Errors: no prompt, an empty one, one longer than `max_tokens`; a cache longer than the
/// model's sliding window, or than its context under a `dynamic` rope.
pub fn build_prefill(
    config: &ModelConfig,
    lengths: &[usize],
    max_tokens: usize,
    dtype: DType,
) -> Result<Prefill, ModelError> {
    if lengths.is_empty() || lengths.contains(&0) {
        return Err(ModelError::Prompt("a prefill needs at least one prompt, each of at least one token".into()));
    }
    if let Some(&n) = lengths.iter().find(|&&n| n > max_tokens) {
        return Err(ModelError::Prompt(format!("a prompt of {n} tokens does not fit a cache of {max_tokens}")));
    }
    check_cache(config, max_tokens)?;
    let mut ends = Vec::with_capacity(lengths.len());
    lengths.iter().fold(0, |end, n| {
        ends.push(end + n);
        end + n
    });
    let packing = Packing::new(ends.clone()).map_err(|e| ModelError::Prompt(e.to_string()))?;
    let total = packing.total();
    let mut b = Builder::new(config, dtype)?;
    let ids = b.g.input("tokens", &[("tokens", total)], DType::I32)?;
    let (mut x, embed) = b.embed(ids)?;
    let rope = config.rope_frequencies(max_tokens)?;
    for layer in 0..config.num_hidden_layers {
        x = b.layer(x, layer, &Attend::Prompt { rope: &rope, packing: &packing })?;
    }
    // Only each prompt's last token needs logits: its row of `x`.
    let last: Vec<Tensor> = ends.iter().map(|&end| b.g.slice(x, "tokens", end - 1, end)).collect::<Result<_, _>>()?;
    let x = if let [one] = last[..] { one } else { b.g.concat(&last, "tokens")? };
    let logits = b.head(x, embed)?;
    let kv = save_kv(&mut b.g, &b.kv)?;
    Ok(Prefill { graph: b.g, tokens: ids, logits, kv, weights: b.weights, packing })
}

/// One decode step of `batch` sequences over a cache of `max_tokens` tokens per sequence, in
/// `dtype`.
///
/// Errors: no sequence, no cache, a cache longer than the model's sliding window, or than its
/// context under a `dynamic` rope.
pub fn build_decoder(
    config: &ModelConfig,
    batch: usize,
    max_tokens: usize,
    dtype: DType,
) -> Result<Decoder, ModelError> {
    if batch == 0 || max_tokens == 0 {
        return Err(ModelError::Prompt(
            "a decoder needs at least one sequence and a cache of at least one token".into(),
        ));
    }
    check_cache(config, max_tokens)?;
    let mut b = Builder::new(config, dtype)?;
    let ids = b.g.input("tokens", &[("tokens", batch)], DType::I32)?;
    let positions = b.g.input("positions", &[("tokens", batch)], DType::I32)?;
    let (mut x, embed) = b.embed(ids)?;
    let rope = config.rope_frequencies(max_tokens)?;
    for layer in 0..config.num_hidden_layers {
        x = b.layer(x, layer, &Attend::Cached { rope: &rope, positions, max_tokens })?;
    }
    let logits = b.head(x, embed)?;
    let kv = save_kv(&mut b.g, &b.kv)?;
    let caches = b.kv.iter().filter_map(|l| l.cache.map(|(k, v)| KeysValues { k, v })).collect();
    Ok(Decoder { graph: b.g, tokens: ids, positions, logits, caches, kv, weights: b.weights, max_tokens })
}

/// Refuses a cache the model cannot rotate consistently: longer than its sliding window, or,
/// with a `dynamic` rope, longer than its context (whose frequencies transformers recomputes
/// as a sequence grows past it, so keys already cached would have been rotated by others).
fn check_cache(config: &ModelConfig, max_tokens: usize) -> Result<(), ModelError> {
    check_window(config, max_tokens)?;
    if matches!(config.rope.scaling, RopeScaling::Dynamic { .. }) && max_tokens > config.max_position_embeddings {
        return Err(ModelError::Prompt(format!(
            "a cache of {max_tokens} tokens is longer than the model's context of {}, past which its dynamic rope \
             changes its frequencies as the sequence grows; generation there is not supported",
            config.max_position_embeddings
        )));
    }
    Ok(())
}

/// Saves every layer's keys and values as `model.layers.N.k` and `...v`.
fn save_kv(g: &mut Graph, layers: &[crate::llama::LayerKv]) -> Result<Vec<KeysValues>, ModelError> {
    let mut kv = Vec::with_capacity(layers.len());
    for (n, l) in layers.iter().enumerate() {
        g.save_as(l.k, &format!("model.layers.{n}.k"))?;
        g.save_as(l.v, &format!("model.layers.{n}.v"))?;
        kv.push(KeysValues { k: l.k, v: l.v });
    }
    Ok(kv)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> ModelConfig {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/qwen2/config.json");
        ModelConfig::from_file(dir).unwrap()
    }

    #[test]
    fn the_decoder_declares_a_cache_per_layer_and_saves_each_steps_keys() {
        let c = config();
        let d = build_decoder(&c, 3, 40, DType::F32).unwrap();
        assert_eq!((d.caches.len(), d.kv.len()), (c.num_hidden_layers, c.num_hidden_layers));
        let cache = d.graph.desc(d.caches[0].k).unwrap();
        assert_eq!(cache.shape(), [c.num_key_value_heads, 3, 40, c.head_dim]);
        assert_eq!(d.graph.desc(d.kv[1].v).unwrap().shape(), [c.num_key_value_heads, 3, c.head_dim]);
        assert_eq!(d.graph.desc(d.logits).unwrap().shape(), [3, c.vocab_size]);
        assert_eq!(d.graph.desc(d.positions).unwrap().dtype, DType::I32);
        // The decoder's weights are the forward pass's, name for name.
        let full = crate::llama::build(&c, 4, DType::F32).unwrap();
        let names = |w: &[Weight]| w.iter().map(|w| (w.name.clone(), w.desc.clone())).collect::<Vec<_>>();
        assert_eq!(names(&d.weights), names(&full.weights));
    }

    #[test]
    fn the_prefill_gives_each_prompts_last_logits_and_every_key() {
        let c = config();
        let p = build_prefill(&c, &[5, 2, 7], 16, DType::F32).unwrap();
        assert_eq!(p.graph.desc(p.logits).unwrap().shape(), [3, c.vocab_size]);
        assert_eq!(p.graph.desc(p.kv[0].k).unwrap().shape(), [c.num_key_value_heads, 14, c.head_dim]);
        assert_eq!(p.packing.ends(), [5, 7, 14]);
        let one = build_prefill(&c, &[4], 16, DType::F32).unwrap();
        assert_eq!(one.graph.desc(one.logits).unwrap().shape(), [1, c.vocab_size]);
    }

    #[test]
    fn empty_or_oversized_requests_are_refused() {
        let c = config();
        for lengths in [&[][..], &[3, 0][..], &[17][..]] {
            let err = build_prefill(&c, lengths, 16, DType::F32).unwrap_err();
            assert!(matches!(err, ModelError::Prompt(_)), "{lengths:?}: {err}");
        }
        assert!(build_decoder(&c, 0, 16, DType::F32).is_err());
        assert!(build_decoder(&c, 1, 0, DType::F32).is_err());
    }

    #[test]
    fn a_dynamic_rope_is_refused_past_the_context() {
        let mut c = config();
        c.rope.scaling = RopeScaling::Dynamic { factor: 2.0 };
        let context = c.max_position_embeddings;
        assert!(build_decoder(&c, 1, context, DType::F32).is_ok());
        let err = build_decoder(&c, 1, context + 1, DType::F32).unwrap_err();
        assert!(err.to_string().contains("dynamic rope"), "{err}");
        assert!(build_prefill(&c, &[4], context + 1, DType::F32).is_err());
    }
}

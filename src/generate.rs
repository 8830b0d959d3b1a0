//! Text generation with a KV cache: a prompt's tokens in, new tokens out.
//!
//! A [`Generator`] compiles two plans of one model: the decode step, once, for a batch of
//! sequences and a cache capacity (`max_tokens` per sequence), and the prefill, once per
//! batch of prompt lengths. The prefill computes every prompt's keys and values and its
//! first new token's logits; its keys and values are written into the decode step's cache
//! inputs, which stay resident on the devices in the decode plan's layout. Each decode step
//! then runs the same executable on the new tokens and their positions (nothing is
//! recompiled), and writes the step's keys and values into the cache rows at those positions
//! ([`Executable::write_input`]): a step costs time linear in the prefix, not quadratic.
//!
//! The two plans lay the cache out differently in general; moving it from the prefill's
//! blocks to the decode step's is an exchange, planned and predicted on the machine
//! ([`handoff::handoff`], reported as [`Generation::handoff`]).
//!
//! The cache's memory is the decode plan's: its inputs are counted by the compile's memory
//! check like any other resident input, and a request that would need more than
//! `max_tokens` tokens in a sequence is refused before anything runs ([`Error::CacheFull`]).

pub mod handoff;
mod sampling;
pub mod tokenizer;

use std::time::Instant;

use einsum_core::{HostTensor, Interval, SeededRng, TensorType};
use einsum_models::ModelConfig;
use einsum_models::checkpoint::Checkpoint;
use einsum_models::decode::{Decoder, KeysValues, Prefill, build_decoder, build_prefill};
use einsum_models::llama::load_weights;

pub use handoff::Handoff;
pub use sampling::{Sampling, argmax};
pub use tokenizer::Tokenizer;

use crate::{CompileOptions, DType, Error, Executable, Result, compile};

/// What to generate: how many tokens, where to stop, how to pick them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GenerateOptions {
    /// New tokens per prompt, at most (the prompt's length plus this must fit the cache).
    pub max_new_tokens: usize,
    /// A sequence ends after it generates one of these (kept as its last token).
    pub stop_tokens: Vec<i32>,
    /// How each token is picked.
    pub sampling: Sampling,
}

/// What a [`Generator::generate`] produced, and how long it took.
#[derive(Clone, Debug, PartialEq)]
pub struct Generation {
    /// Each prompt's new tokens, in the prompts' order.
    pub tokens: Vec<Vec<i32>>,
    /// Wall time of the prefill run (its compile excluded), in ms.
    pub prefill_ms: f64,
    /// Wall time of each decode step (the run, the cache writes and the picks), in ms.
    pub decode_ms: Vec<f64>,
    /// The cache's move from the prefill plan's layout to the decode plan's, as planned and
    /// predicted on the machine (`None` when nothing was generated, so nothing moved).
    pub handoff: Option<Handoff>,
}

/// A model's prefill and decode plans, compiled for its checkpoint (see the
/// [module docs](self)).
pub struct Generator {
    config: ModelConfig,
    checkpoint: Checkpoint,
    options: CompileOptions,
    dtype: DType,
    decoder: Decoder,
    decode: Executable,
    /// The prefill last compiled, the prompt lengths it takes, and its cache hand-off.
    prefill: Option<(Vec<usize>, Prefill, Executable, Handoff)>,
    compiles: usize,
}

impl Generator {
    /// Compiles the decode step of `config`'s model for `batch` sequences of at most
    /// `max_tokens` tokens each under `options`, in `dtype`, and loads its weights from
    /// `checkpoint` and an empty cache onto the devices.
    pub fn new(
        config: ModelConfig,
        checkpoint: Checkpoint,
        batch: usize,
        max_tokens: usize,
        dtype: DType,
        options: CompileOptions,
    ) -> Result<Generator> {
        let decoder = build_decoder(&config, batch, max_tokens, dtype)?;
        let mut decode = compile(&decoder.graph, &options)?;
        load_weights(&decoder.weights, &checkpoint, |input, value| decode.load_resident(input, value))?;
        for kv in &decoder.caches {
            for t in [kv.k, kv.v] {
                let desc = decoder.graph.desc(t)?;
                decode.load_resident(t, HostTensor::filled(desc.tensor_type(), desc.dtype, 0.0))?;
            }
        }
        Ok(Generator { config, checkpoint, options, dtype, decoder, decode, prefill: None, compiles: 1 })
    }

    /// The compiled decode step (its plan, its predicted time per token).
    pub fn decoder(&self) -> &Executable {
        &self.decode
    }

    /// The decode step's graph: its inputs, its cache and its outputs (whose values
    /// [`Generator::decoder`] holds after a step).
    pub fn decode_graph(&self) -> &Decoder {
        &self.decoder
    }

    /// Sequences per decode step.
    pub fn batch(&self) -> usize {
        self.decoder.graph.desc(self.decoder.tokens).map_or(0, |d| d.dims[0].extent)
    }

    /// The cache's capacity: the most tokens a sequence may hold, prompt included.
    pub fn max_tokens(&self) -> usize {
        self.decoder.max_tokens
    }

    /// How many plans this generator has compiled: the decode step's, and one prefill per
    /// new batch of prompt lengths.
    pub fn compiles(&self) -> usize {
        self.compiles
    }

    /// Generates up to `options.max_new_tokens` tokens after each of `prompts` (at most
    /// [`Generator::batch`] of them; a batch not full runs padded).
    ///
    /// Errors, before anything runs: no prompt or more than the batch, an empty prompt, an
    /// id outside the vocabulary, bad sampling options, and a prompt whose length plus
    /// `max_new_tokens` exceeds the cache ([`Error::CacheFull`]).
    pub fn generate(&mut self, prompts: &[Vec<i32>], options: &GenerateOptions) -> Result<Generation> {
        self.check(prompts, options)?;
        let mut rng = SeededRng::new(options.sampling.seed);
        let mut out: Vec<Vec<i32>> = vec![Vec::new(); prompts.len()];
        if options.max_new_tokens == 0 {
            return Ok(Generation { tokens: out, prefill_ms: 0.0, decode_ms: Vec::new(), handoff: None });
        }
        // A batch not full is padded with one-token prompts whose tokens are discarded.
        let mut seqs: Vec<Vec<i32>> = prompts.to_vec();
        seqs.resize(self.batch(), vec![0]);
        let started = Instant::now();
        let logits = self.prefill(&seqs)?;
        let prefill_ms = started.elapsed().as_secs_f64() * 1e3;
        let mut positions: Vec<usize> = seqs.iter().map(Vec::len).collect();
        let mut last = self.pick(&logits, &options.sampling, &mut rng)?;
        let mut done = vec![false; prompts.len()];
        let mut decode_ms = Vec::new();
        loop {
            for (b, seq) in out.iter_mut().enumerate() {
                if !done[b] {
                    seq.push(last[b]);
                    done[b] = seq.len() == options.max_new_tokens || options.stop_tokens.contains(&last[b]);
                }
            }
            if done.iter().all(|&d| d) {
                break;
            }
            let started = Instant::now();
            let logits = self.step(&last, &positions)?;
            positions.iter_mut().for_each(|p| *p += 1);
            last = self.pick(&logits, &options.sampling, &mut rng)?;
            decode_ms.push(started.elapsed().as_secs_f64() * 1e3);
        }
        let handoff = self.prefill.as_ref().map(|(.., handoff)| handoff.clone());
        Ok(Generation { tokens: out, prefill_ms, decode_ms, handoff })
    }

    /// The refusals of [`Generator::generate`].
    fn check(&self, prompts: &[Vec<i32>], options: &GenerateOptions) -> Result<()> {
        options.sampling.check()?;
        let (batch, vocab) = (self.batch(), self.config.vocab_size);
        if prompts.is_empty() || prompts.len() > batch {
            return Err(Error::Usage(format!(
                "{} prompts given, the generator runs 1 to {batch} at a time",
                prompts.len()
            )));
        }
        for (n, p) in prompts.iter().enumerate() {
            if p.is_empty() {
                return Err(Error::Usage(format!("prompt {n} is empty: a prompt needs at least one token")));
            }
            if let Some(&id) = p.iter().find(|&&id| id < 0 || id as usize >= vocab) {
                return Err(Error::Usage(format!("prompt {n}: token id {id} is outside the vocabulary of {vocab}")));
            }
            let needed = p.len() + options.max_new_tokens;
            if needed > self.max_tokens() {
                return Err(Error::CacheFull { prompt: n, needed, max_tokens: self.max_tokens() });
            }
        }
        Ok(())
    }

    /// Runs the prefill of `seqs` (compiling it for their lengths unless the last one fits),
    /// writes every layer's keys and values into the decode step's cache, and returns each
    /// sequence's next-token logits.
    fn prefill(&mut self, seqs: &[Vec<i32>]) -> Result<Vec<f32>> {
        let lengths: Vec<usize> = seqs.iter().map(Vec::len).collect();
        let (prefill, mut exe, handoff) = match self.prefill.take() {
            Some((l, prefill, exe, handoff)) if l == lengths => (prefill, exe, handoff),
            _ => {
                let prefill = build_prefill(&self.config, &lengths, self.max_tokens(), self.dtype)?;
                let mut exe = compile(&prefill.graph, &self.options)?;
                self.compiles += 1;
                load_weights(&prefill.weights, &self.checkpoint, |input, value| exe.load_resident(input, value))?;
                let handoff = handoff::handoff(&prefill, &exe, &self.decoder, &self.decode, &self.options.topology)?;
                (prefill, exe, handoff)
            }
        };
        let ids: Vec<i32> = seqs.concat();
        exe.load(prefill.tokens, HostTensor::from_i32(TensorType::zero_bounded(&[ids.len()]), ids)?)?;
        exe.execute()?;
        let packing = &prefill.packing;
        for (kv, cache) in prefill.kv.iter().zip(&self.decoder.caches) {
            for (out, input) in [(kv.k, cache.k), (kv.v, cache.v)] {
                let all = exe.offload(out)?;
                for (b, &end) in packing.ends().iter().enumerate() {
                    let start = packing.start_of(end - 1);
                    self.decode.write_input(input, cache_rows(&all, start..end, b, 0)?)?;
                }
            }
        }
        let logits = exe.offload(prefill.logits)?.to_f32();
        self.prefill = Some((lengths, prefill, exe, handoff));
        Ok(logits)
    }

    /// One decode step: each sequence's token `last[b]` at position `positions[b]`; writes
    /// the step's keys and values into the cache there and returns the next-token logits.
    fn step(&mut self, last: &[i32], positions: &[usize]) -> Result<Vec<f32>> {
        let d = &self.decoder;
        let ty = TensorType::zero_bounded(&[last.len()]);
        self.decode.load(d.tokens, HostTensor::from_i32(ty.clone(), last.to_vec())?)?;
        let at: Vec<i32> = positions.iter().map(|&p| p as i32).collect();
        self.decode.load(d.positions, HostTensor::from_i32(ty, at)?)?;
        self.decode.execute()?;
        for (kv, cache) in d.kv.iter().zip(&d.caches) {
            write_step(&mut self.decode, kv, cache, positions)?;
        }
        Ok(self.decode.offload(d.logits)?.to_f32())
    }

    /// Picks one token per row of `logits` (`[batch, vocab]`).
    fn pick(&self, logits: &[f32], sampling: &Sampling, rng: &mut SeededRng) -> Result<Vec<i32>> {
        let vocab = self.config.vocab_size;
        logits.chunks_exact(vocab).map(|row| Ok(sampling.pick(row, rng)? as i32)).collect()
    }
}

/// Writes one step's keys and values (`[heads_kv, batch, d_head]` outputs of `exe`) into the
/// cache inputs, sequence `b`'s at row `positions[b]`.
fn write_step(exe: &mut Executable, kv: &KeysValues, cache: &KeysValues, positions: &[usize]) -> Result<()> {
    for (out, input) in [(kv.k, cache.k), (kv.v, cache.v)] {
        let all = exe.offload(out)?;
        for (b, &p) in positions.iter().enumerate() {
            let part = cache_rows(&all, b..b + 1, b, p)?;
            exe.write_input(input, part)?;
        }
    }
    Ok(())
}

/// Rows `rows` of `kv: [heads_kv, tokens, d_head]` as the cache region of sequence `seq` from
/// row `at`: `[heads_kv, seq..seq+1, at..at+len, d_head]`, the same elements in the same order.
fn cache_rows(kv: &HostTensor, rows: std::ops::Range<usize>, seq: usize, at: usize) -> Result<HostTensor> {
    let (heads, d) = (kv.ty().dim(0), kv.ty().dim(2));
    let part = kv.slice(&kv.ty().with_dim(1, Interval { lo: rows.start, hi: rows.end }))?;
    let ty = TensorType::new(&[0, seq, at, 0], &[heads.hi, seq + 1, at + rows.len(), d.hi])?;
    Ok(HostTensor::from_ne_bytes(ty, part.dtype(), &part.compact().to_ne_bytes())?)
}

//! `einsummable generate`: a Hugging Face model's new tokens after one or more prompts, with
//! the decode step planned once and run token by token over a KV cache.
//!
//! Prompts are token ids (`--prompt-tokens`) or text (`--prompt`), which the model's
//! tokenizer (`--tokenizer`, or the directory's `tokenizer.json`) encodes; with a tokenizer,
//! the new tokens are also decoded into text.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use einsum_models::checkpoint::Checkpoint;
use einsummable::generate::{GenerateOptions, Generator, Sampling, Tokenizer};
use einsummable::{Error, Result};
use serde::Serialize;

use super::Report;
use super::run::{CompileArgs, median};
use super::source::{Source, Tokens};

/// Arguments of `generate`.
#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("prompts").required(true).args(["prompt_tokens", "prompt"])))]
pub struct Args {
    #[command(flatten)]
    compile: CompileArgs,
    /// A prompt's token ids, `1,2,3`; repeat the flag for a batch of prompts.
    #[arg(long, value_name = "IDS")]
    prompt_tokens: Vec<Tokens>,
    /// A prompt's text, encoded by the tokenizer (with its beginning-of-sequence token where
    /// it adds one); repeat the flag for a batch of prompts.
    #[arg(long, value_name = "TEXT")]
    prompt: Vec<String>,
    /// The tokenizer that encodes --prompt and decodes the new tokens, a Hugging Face
    /// `tokenizer.json` [default: the model directory's tokenizer.json, where it exists].
    #[arg(long, value_name = "FILE")]
    tokenizer: Option<PathBuf>,
    /// New tokens per prompt, at most.
    #[arg(long, default_value_t = 32)]
    max_new_tokens: usize,
    /// The KV cache's tokens per sequence, prompt included [default: the longest prompt plus
    /// --max-new-tokens].
    #[arg(long)]
    max_tokens: Option<usize>,
    /// Sequences per decode step [default: the number of prompts].
    #[arg(long)]
    batch: Option<usize>,
    /// Divides the logits before sampling; 0 is greedy.
    #[arg(long, default_value_t = 0.0)]
    temperature: f32,
    /// Samples among the K likeliest tokens only.
    #[arg(long, value_name = "K")]
    top_k: Option<usize>,
    /// Samples among the likeliest tokens whose probabilities add up to P.
    #[arg(long, value_name = "P")]
    top_p: Option<f32>,
    /// Token ids that end a sequence [default: the config's eos_token_id].
    #[arg(long, value_name = "IDS")]
    stop_tokens: Option<Tokens>,
    /// Generate --max-new-tokens tokens whatever they are, ignoring stop tokens.
    #[arg(long, conflicts_with = "stop_tokens")]
    no_stop: bool,
}

/// The `--json` object of `generate`.
#[derive(Serialize)]
struct GenerateJson<'a> {
    model: &'a str,
    devices: usize,
    topology: &'a str,
    /// Each prompt's new tokens.
    tokens: &'a [Vec<i32>],
    /// The tokenizer's file, where one is in use (lossily, should its name not be UTF-8).
    #[serde(skip_serializing_if = "Option::is_none")]
    tokenizer: Option<String>,
    /// Each prompt's new tokens decoded (special tokens skipped), where a tokenizer is in use.
    #[serde(skip_serializing_if = "Option::is_none")]
    text: Option<&'a [String]>,
    prefill_ms: f64,
    /// The median wall time of a decode step.
    decode_ms_per_token: Option<f64>,
    /// New tokens per second of the decode steps (every sequence's tokens counted).
    decode_tokens_per_s: Option<f64>,
    /// The decode plan's predicted time per step on the topology.
    predicted_decode_ms: f64,
    /// The bytes the KV cache's hand-off from the prefill plan to the decode plan moves
    /// between devices, and its predicted time (absent when nothing was generated).
    handoff_bytes: Option<f64>,
    predicted_handoff_ms: Option<f64>,
    compiles: usize,
}

/// Runs `generate`.
pub fn run(a: Args) -> Result<Report> {
    let c = &a.compile;
    if c.tokens.is_some() {
        return Err(Error::Usage("generate takes its prompts as --prompt-tokens or --prompt, not --tokens".into()));
    }
    let Source::Model { dir, config } = Source::parse(&c.workload)? else {
        return Err(Error::Usage(format!("generate needs a model directory, hf:DIR, not `{}`", c.workload)));
    };
    let tokenizer = tokenizer(a.tokenizer.as_deref(), &dir, !a.prompt.is_empty())?;
    let prompts: Vec<Vec<i32>> = match &tokenizer {
        Some(t) if !a.prompt.is_empty() => {
            let prompts = a.prompt.iter().map(|text| t.encode(text)).collect::<Result<Vec<_>>>()?;
            for (n, ids) in prompts.iter().enumerate() {
                t.check_ids(n, ids, config.vocab_size)?;
            }
            prompts
        }
        _ => a.prompt_tokens.iter().map(|t| t.0.clone()).collect(),
    };
    let longest = prompts.iter().map(Vec::len).max().unwrap_or(0);
    let max_tokens = a.max_tokens.unwrap_or(longest + a.max_new_tokens);
    let batch = a.batch.unwrap_or(prompts.len());
    let stop_tokens = match (&a.stop_tokens, a.no_stop) {
        (_, true) => Vec::new(),
        (Some(t), false) => t.0.clone(),
        (None, false) => config.eos_token_ids.iter().filter_map(|&id| i32::try_from(id).ok()).collect(),
    };
    let sampling = Sampling { temperature: a.temperature, top_k: a.top_k, top_p: a.top_p, seed: c.seed };
    let options = GenerateOptions { max_new_tokens: a.max_new_tokens, stop_tokens, sampling };
    // Bad sampling options before any compile.
    options.sampling.check()?;
    let (compile, topology) = c.options(None)?;
    let checkpoint = Checkpoint::open(&dir)?;
    let mut g = Generator::new(*config, checkpoint, batch, max_tokens, c.dtype, compile)?;
    let out = g.generate(&prompts, &options)?;
    let decoded = match &tokenizer {
        Some(t) => Some(out.tokens.iter().map(|ids| t.decode(ids)).collect::<Result<Vec<_>>>()?),
        None => None,
    };

    let mut steps = out.decode_ms.clone();
    let per_token = (!steps.is_empty()).then(|| median(&mut steps));
    let total_s: f64 = out.decode_ms.iter().sum::<f64>() / 1e3;
    let stepped: usize = out.tokens.iter().map(|t| t.len().saturating_sub(1)).sum();
    let tokens_per_s = (total_s > 0.0).then(|| stepped as f64 / total_s);
    let predicted = g.decoder().predicted_ms();
    let mut text = topology.note.as_ref().map_or_else(String::new, |n| format!("{n}\n"));
    for (n, tokens) in out.tokens.iter().enumerate() {
        let ids: Vec<String> = tokens.iter().map(ToString::to_string).collect();
        let _ = writeln!(text, "prompt {n}: {} new tokens: {}", tokens.len(), ids.join(","));
        if let Some(decoded) = &decoded {
            let _ = writeln!(text, "prompt {n}: new text: {:?}", decoded[n]);
        }
    }
    let _ = write!(text, "prefill {:.3} ms", out.prefill_ms);
    if let (Some(ms), Some(rate)) = (per_token, tokens_per_s) {
        let _ = write!(text, "; decode {ms:.3} ms per step (median of {}), {rate:.1} tokens/s", steps.len());
    }
    let _ = writeln!(
        text,
        " on {} devices; the {} decode plan predicts {predicted:.4} ms per step on {}",
        c.devices,
        g.decoder().plan().optimizer,
        topology.name
    );
    if let Some(h) = &out.handoff {
        let _ = writeln!(
            text,
            "the cache's hand-off from the prefill plan moves {} bytes between devices, predicted {:.4} ms",
            h.bytes, h.predicted_ms
        );
    }
    let json = GenerateJson {
        model: &c.workload,
        devices: c.devices,
        topology: &topology.name,
        tokens: &out.tokens,
        tokenizer: tokenizer.as_ref().map(|t| t.path().display().to_string()),
        text: decoded.as_deref(),
        prefill_ms: out.prefill_ms,
        decode_ms_per_token: per_token,
        decode_tokens_per_s: tokens_per_s,
        predicted_decode_ms: predicted,
        handoff_bytes: out.handoff.as_ref().map(|h| h.bytes),
        predicted_handoff_ms: out.handoff.as_ref().map(|h| h.predicted_ms),
        compiles: g.compiles(),
    };
    Ok(Report::new(&json, text, true))
}

/// The tokenizer in use: `--tokenizer`'s file, else the model directory's `tokenizer.json`
/// where it exists, else none, which is a usage error when prompts are text (`needed`).
fn tokenizer(file: Option<&Path>, dir: &Path, needed: bool) -> Result<Option<Tokenizer>> {
    let default = dir.join("tokenizer.json");
    match file {
        Some(file) => Ok(Some(Tokenizer::from_file(file)?)),
        None if default.is_file() => Ok(Some(Tokenizer::from_file(&default)?)),
        None if needed => Err(Error::Usage(format!(
            "--prompt needs a tokenizer: no --tokenizer FILE given, and no tokenizer at {}",
            default.display()
        ))),
        None => Ok(None),
    }
}

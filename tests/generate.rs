//! Generation with a KV cache on the Hugging Face fixtures of `scripts/make_hf_fixtures.py`:
//! greedy tokens equal transformers' `generate` on 1 to 8 CPU devices (the fixture script
//! chose prompts whose every top-1/top-2 logit margin is at least 1e-3, over 100 times the
//! f32 logit error), a decode step's logits equal a full recomputation's, a batch of prompts
//! of different lengths generates what each prompt does alone, and 100 decode steps compile
//! nothing.

use std::path::{Path, PathBuf};

use einsum_core::{HostTensor, TensorType};
use einsum_models::ModelConfig;
use einsum_models::checkpoint::Checkpoint;
use einsum_models::llama;
use einsummable::generate::{GenerateOptions, Generator, Sampling};
use einsummable::{CompileOptions, DType, Error, compile};

const FAMILIES: [&str; 4] = ["llama3", "llama2", "mistral", "qwen2"];

fn fixture(family: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("einsum-models/tests/fixtures").join(family)
}

/// transformers' `generate` prompt, its 32 greedy tokens and their margins.
fn reference(family: &str) -> (Vec<i32>, Vec<i32>, Vec<f32>) {
    let bytes = std::fs::read(fixture(family).join("reference.safetensors")).unwrap();
    let file = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let ints = |name: &str| -> Vec<i32> {
        let t = file.tensor(name).unwrap();
        t.data().chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().unwrap()) as i32).collect()
    };
    let t = file.tensor("margins").unwrap();
    let margins = t.data().chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
    (ints("generate_prompt"), ints("generated"), margins)
}

fn generator(family: &str, devices: usize, batch: usize, max_tokens: usize) -> Generator {
    let config = ModelConfig::from_file(fixture(family).join("config.json")).unwrap();
    let checkpoint = Checkpoint::open(fixture(family)).unwrap();
    let options = CompileOptions::default().devices(devices);
    Generator::new(config, checkpoint, batch, max_tokens, DType::F32, options).unwrap()
}

fn greedy(max_new_tokens: usize) -> GenerateOptions {
    GenerateOptions { max_new_tokens, stop_tokens: Vec::new(), sampling: Sampling::greedy() }
}

/// ‖a − b‖ / ‖b‖.
fn relative(a: &[f32], b: &[f32]) -> f64 {
    let diff: f64 = a.iter().zip(b).map(|(x, y)| (*x as f64 - *y as f64).powi(2)).sum();
    let norm: f64 = b.iter().map(|y| (*y as f64).powi(2)).sum();
    (diff / norm).sqrt()
}

#[test]
fn greedy_generation_gives_transformers_tokens_on_1_to_8_devices() {
    for family in FAMILIES {
        let (prompt, generated, margins) = reference(family);
        let smallest = margins.iter().fold(f32::INFINITY, |m, &x| m.min(x));
        assert!(smallest >= 1e-3, "{family}: the fixture's smallest margin is {smallest}");
        for devices in [1, 2, 4, 8] {
            let mut g = generator(family, devices, 1, prompt.len() + generated.len());
            let out = g.generate(std::slice::from_ref(&prompt), &greedy(generated.len())).unwrap();
            assert_eq!(out.tokens, std::slice::from_ref(&generated), "{family} on {devices} devices");
            assert_eq!(out.decode_ms.len(), generated.len() - 1);
        }
    }
}

/// The last decode step's logits (for the token after prompt + 7 new ones) equal those of
/// the whole forward pass over those tokens, on 4 devices.
#[test]
fn a_decode_step_matches_a_full_recomputation() {
    for family in FAMILIES {
        let (prompt, _, _) = reference(family);
        let mut g = generator(family, 4, 1, 32);
        let new = g.generate(std::slice::from_ref(&prompt), &greedy(8)).unwrap().tokens.remove(0);
        let step = g.decoder().offload(g.decode_graph().logits).unwrap().to_f32();

        let seq: Vec<i32> = prompt.iter().chain(&new[..7]).copied().collect();
        let config = ModelConfig::from_file(fixture(family).join("config.json")).unwrap();
        let model = llama::build(&config, seq.len(), DType::F32).unwrap();
        let mut exe = compile(&model.graph, &CompileOptions::default().devices(1)).unwrap();
        let checkpoint = Checkpoint::open(fixture(family)).unwrap();
        model.load_weights(&checkpoint, |input, value| exe.load_resident(input, value)).unwrap();
        let ids = HostTensor::from_i32(TensorType::zero_bounded(&[seq.len()]), seq.clone()).unwrap();
        exe.load(model.tokens, ids).unwrap();
        exe.execute().unwrap();
        let all = exe.offload(model.logits).unwrap().to_f32();
        let full = &all[(seq.len() - 1) * config.vocab_size..];
        let err = relative(&step, full);
        println!("{family}: decode step against recomputation {err:.2e}");
        assert!(err < 1e-5, "{family}: {err:.2e}");
    }
}

/// Two prompts of different lengths in one batch of three (one slot padded) generate what
/// each generates alone: the fixture's prompt transformers' tokens.
#[test]
fn a_batch_of_prompts_generates_each_prompts_tokens() {
    let (prompt, generated, _) = reference("qwen2");
    let short = prompt[..3].to_vec();
    let max_tokens = prompt.len() + generated.len();
    let mut alone = generator("qwen2", 2, 1, max_tokens);
    let expected_short = alone.generate(std::slice::from_ref(&short), &greedy(12)).unwrap().tokens.remove(0);
    let mut g = generator("qwen2", 2, 3, max_tokens);
    let out = g.generate(&[prompt.clone(), short.clone()], &greedy(12)).unwrap();
    assert_eq!(out.tokens, [generated[..12].to_vec(), expected_short]);
}

/// 100 decode steps reuse the one decode plan, and a second request of the same prompt
/// length reuses the prefill: two compiles in all. A stop token ends the sequence.
#[test]
fn decoding_never_recompiles_and_stops_at_a_stop_token() {
    let (prompt, generated, _) = reference("llama3");
    let mut g = generator("llama3", 2, 1, prompt.len() + 101);
    let out = g.generate(std::slice::from_ref(&prompt), &greedy(101)).unwrap();
    assert_eq!((out.tokens[0].len(), out.decode_ms.len()), (101, 100));
    assert_eq!(out.tokens[0][..generated.len()], generated[..]);
    assert_eq!(g.compiles(), 2);
    let stop = generated[5];
    let first = generated.iter().position(|&t| t == stop).unwrap();
    let options = GenerateOptions { stop_tokens: vec![stop], ..greedy(32) };
    let out = g.generate(std::slice::from_ref(&prompt), &options).unwrap();
    assert_eq!(out.tokens[0], generated[..=first]);
    assert_eq!(g.compiles(), 2);
}

#[test]
fn requests_beyond_the_cache_or_the_batch_are_refused() {
    let (prompt, _, _) = reference("mistral");
    let mut g = generator("mistral", 1, 1, prompt.len() + 4);
    let err = g.generate(std::slice::from_ref(&prompt), &greedy(5)).unwrap_err();
    assert!(matches!(err, Error::CacheFull { prompt: 0, .. }), "{err}");
    assert!(err.to_string().contains("max_tokens"), "{err}");
    let two = [prompt.clone(), prompt.clone()];
    assert!(g.generate(&two, &greedy(1)).unwrap_err().to_string().contains("1 to 1"));
    assert!(g.generate(&[vec![]], &greedy(1)).unwrap_err().to_string().contains("empty"));
    let err = g.generate(&[vec![1, 100_000]], &greedy(1)).unwrap_err();
    assert!(err.to_string().contains("outside the vocabulary"), "{err}");
    let bad = GenerateOptions { sampling: Sampling { temperature: -1.0, ..Sampling::greedy() }, ..greedy(1) };
    assert!(g.generate(std::slice::from_ref(&prompt), &bad).is_err());
    // The refusals ran nothing: the generator still generates.
    assert_eq!(g.generate(std::slice::from_ref(&prompt), &greedy(4)).unwrap().tokens[0].len(), 4);
}

/// Seeded sampling: equal seeds draw equal tokens, other seeds others, all in the vocabulary.
#[test]
fn seeded_sampling_is_reproducible() {
    let (prompt, _, _) = reference("llama2");
    let mut g = generator("llama2", 2, 1, prompt.len() + 16);
    let sample = |g: &mut Generator, seed| {
        let sampling = Sampling { temperature: 1.5, top_k: Some(50), top_p: Some(0.95), seed };
        let options = GenerateOptions { max_new_tokens: 16, stop_tokens: Vec::new(), sampling };
        g.generate(std::slice::from_ref(&prompt), &options).unwrap().tokens.remove(0)
    };
    let (a, b, c) = (sample(&mut g, 1), sample(&mut g, 1), sample(&mut g, 2));
    assert_eq!(a, b);
    assert_ne!(a, c);
    assert!(a.iter().all(|&t| (0..128).contains(&t)));
}

fn einsummable(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_einsummable")).args(args).output().expect("the binary runs")
}

/// `generate` prints transformers' tokens (`--json`: `tokens`); `plan --decode` plans the
/// Llama-3.1-8B config's decode step alone; a workload or `--tokens` is refused with a reason.
#[test]
fn the_command_line_generates_and_plans_a_decode_step() {
    let (prompt, generated, _) = reference("qwen2");
    let ids: Vec<String> = prompt.iter().map(ToString::to_string).collect();
    let dir = format!("hf:{}", fixture("qwen2").display());
    let args = ["generate", &dir, "--prompt-tokens", &ids.join(","), "--devices", "2", "--no-stop", "--json"];
    let out = einsummable(&args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let tokens: Vec<i32> = v["tokens"][0].as_array().unwrap().iter().map(|t| t.as_i64().unwrap() as i32).collect();
    assert_eq!(tokens, generated);
    assert_eq!(v["compiles"], 2);
    assert!(v["predicted_decode_ms"].as_f64().unwrap() > 0.0, "{v}");
    let (moved, handoff_ms) = (v["handoff_bytes"].as_f64().unwrap(), v["predicted_handoff_ms"].as_f64().unwrap());
    assert_eq!(moved > 0.0, handoff_ms > 0.0, "{v}");

    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("einsum-models/tests/data/Llama-3.1-8B");
    let spec = format!("hf:{}", data.display());
    let args =
        ["plan", &spec, "--decode", "8", "--tokens", "4096", "--devices", "8", "--topology", "dgx-h100", "--json"];
    let out = einsummable(&args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["predicted_ms"].as_f64().unwrap() > 0.0, "{v}");

    for (args, why) in [
        (vec!["generate", "matmul:n=64", "--prompt-tokens", "1,2"], "hf:DIR"),
        (vec!["generate", &dir, "--prompt-tokens", "1,2", "--tokens", "3"], "--prompt-tokens"),
        (vec!["generate", &dir, "--prompt-tokens", "1,2", "--max-tokens", "4", "--max-new-tokens", "8"], "max_tokens"),
        (vec!["plan", "matmul:n=64", "--decode", "2"], "hf:DIR"),
    ] {
        let out = einsummable(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && stderr.contains(why) && !stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}

/// The cache is resident device memory the plan counts: growing `max_tokens` grows the decode
/// plan's resident bytes by exactly the cache's growth (k and v, every layer, in f32).
#[test]
fn the_cache_is_counted_in_the_plans_memory() {
    let resident =
        |max_tokens| -> usize { generator("llama2", 2, 1, max_tokens).decoder().stats().resident_bytes.iter().sum() };
    let config = ModelConfig::from_file(fixture("llama2").join("config.json")).unwrap();
    let per_token = 2 * config.num_hidden_layers * config.num_key_value_heads * config.head_dim * 4;
    assert_eq!(resident(48) - resident(16), 32 * per_token);
}

//! Hugging Face checkpoints (the tiny random-initialised fixtures of
//! `scripts/make_hf_fixtures.py`: LLaMA 3 with llama3 rope scaling and tied embeddings,
//! LLaMA 2 sharded, Mistral, Qwen2 with q/k/v biases) built from their `config.json`, loaded
//! from their safetensors weights, compiled for 1 to 8 CPU devices under several strategies,
//! and run: the logits match transformers' own to 1e-4 relative in f32, and in bf16 err from
//! transformers' f32 logits at most twice as much as transformers' own bf16 run does.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use einsum_core::{HostTensor, TensorType};
use einsum_models::ModelConfig;
use einsum_models::checkpoint::Checkpoint;
use einsum_models::llama;
use einsummable::names::optimizer_by_name;
use einsummable::{CompileOptions, DType, compile};

const FAMILIES: [&str; 4] = ["llama3", "llama2", "mistral", "qwen2"];

fn fixture(family: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("einsum-models/tests/fixtures").join(family)
}

/// transformers' prompt and its f32 and bf16 logits.
struct Reference {
    ids: Vec<i32>,
    logits: Vec<f32>,
    logits_bf16: Vec<f32>,
}

fn reference(family: &str) -> Reference {
    let bytes = std::fs::read(fixture(family).join("reference.safetensors")).unwrap();
    let file = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let f32s = |name: &str| -> Vec<f32> {
        file.tensor(name).unwrap().data().chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()
    };
    let ids = file.tensor("input_ids").unwrap();
    let ids = ids.data().chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().unwrap()) as i32).collect();
    Reference { ids, logits: f32s("logits"), logits_bf16: f32s("logits_bf16") }
}

/// ‖a − b‖ / ‖b‖.
fn relative(a: &[f32], b: &[f32]) -> f64 {
    let diff: f64 = a.iter().zip(b).map(|(x, y)| (*x as f64 - *y as f64).powi(2)).sum();
    let norm: f64 = b.iter().map(|y| (*y as f64).powi(2)).sum();
    (diff / norm).sqrt()
}

/// The model's logits for the reference prompt on `devices` CPU devices under `strategy`.
fn logits(family: &str, dtype: DType, devices: usize, strategy: (&str, u64)) -> Vec<f32> {
    let dir = fixture(family);
    let config = ModelConfig::from_file(dir.join("config.json")).unwrap();
    let r = reference(family);
    let model = llama::build(&config, r.ids.len(), dtype).unwrap();
    let optimizer = Arc::from(optimizer_by_name(strategy.0, strategy.1).unwrap());
    let mut exe = compile(&model.graph, &CompileOptions::default().devices(devices).optimizer(optimizer)).unwrap();
    let checkpoint = Checkpoint::open(&dir).unwrap();
    model
        .load_weights(&checkpoint, |input, value| -> Result<(), Box<dyn std::error::Error>> {
            Ok(exe.load(input, value)?)
        })
        .unwrap();
    let ids = HostTensor::from_i32(TensorType::zero_bounded(&[r.ids.len()]), r.ids).unwrap();
    exe.load(model.tokens, ids).unwrap();
    exe.execute().unwrap();
    exe.outputs()[&model.logits.id()].to_f32()
}

#[test]
fn f32_logits_match_transformers_on_1_to_8_devices() {
    for family in FAMILIES {
        let r = reference(family);
        for devices in [1, 2, 4, 8] {
            for strategy in [("dp", 0), ("megatron", 0), ("random", 1)] {
                let err = relative(&logits(family, DType::F32, devices, strategy), &r.logits);
                println!("{family} f32 on {devices} devices, {strategy:?}: relative error {err:.2e}");
                assert!(err <= 1e-4, "{family} on {devices} devices under {strategy:?}: {err:.2e}");
            }
        }
    }
}

#[test]
fn bf16_logits_err_at_most_twice_transformers_own_bf16() {
    for family in FAMILIES {
        let r = reference(family);
        let theirs = relative(&r.logits_bf16, &r.logits);
        for devices in [1, 4] {
            let ours = relative(&logits(family, DType::BF16, devices, ("dp", 0)), &r.logits);
            println!("{family} bf16 on {devices} devices: {ours:.2e} (transformers' bf16: {theirs:.2e})");
            assert!(ours <= 2.0 * theirs, "{family} bf16 on {devices} devices: {ours:.2e} vs {theirs:.2e}");
        }
    }
}

/// The public Llama-3.1-70B config (no weights) plans and compiles for two DGX H100 nodes
/// (16 GPUs) within their memory, as `plan hf:DIR` does: the model's structure alone is enough.
#[test]
fn a_70b_config_plans_on_two_dgx_h100_without_weights() {
    use einsummable::pipeline::{Request, plan_and_compile};
    use einsummable::{NaiveSynthesizer, Topology, names::cost_model_by_name};
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("einsum-models/tests/data/Llama-3.1-70B");
    let config = ModelConfig::from_file(dir.join("config.json")).unwrap();
    let model = llama::build(&config, 2048, DType::BF16).unwrap();
    let topology = Topology::named("dgx-h100x2").unwrap();
    let strategy = optimizer_by_name("dp", 0).unwrap();
    let cost = cost_model_by_name("time", "dgx-h100x2").unwrap();
    let request = Request {
        comp: model.graph.computation(),
        devices: 16,
        strategy: strategy.as_ref(),
        cost: cost.as_ref(),
        topology: &topology,
        synthesizer: Arc::new(NaiveSynthesizer),
        memory_budget: None,
        host_memory: None,
        refine: 0,
    };
    let planned = plan_and_compile(&request).unwrap();
    let weights: usize = model.weights.iter().map(|w| w.desc.size_bytes()).sum();
    println!(
        "70B: {:.1} GB of bf16 weights, predicted {:.1} ms on 16 H100s",
        weights as f64 / 1e9,
        planned.compiled.predicted_ms
    );
    assert!(weights > 130_000_000_000, "{weights} bytes of weights: not the 70B model");
    assert!(planned.compiled.predicted_ms.is_finite() && planned.compiled.predicted_ms > 0.0);
}

fn einsummable(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_einsummable")).args(args).output().expect("the binary runs")
}

/// `run hf:DIR --tokens ...` prints transformers' top tokens of the last position (in JSON,
/// `top: [[id, logit], ...]`), and `--check` holds; `plan hf:DIR` plans the 70B config alone.
#[test]
fn the_command_line_runs_and_plans_models() {
    let r = reference("qwen2");
    let ids: Vec<String> = r.ids.iter().map(ToString::to_string).collect();
    let dir = format!("hf:{}", fixture("qwen2").display());
    let out = einsummable(&["run", &dir, "--tokens", &ids.join(","), "--devices", "4", "--check", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["ok"], true);
    let vocab = r.logits.len() / r.ids.len();
    let last = &r.logits[r.logits.len() - vocab..];
    let best = (0..vocab).fold(0, |b, i| if last[i] > last[b] { i } else { b });
    let top = v["top"].as_array().unwrap();
    assert_eq!(top.len(), 5);
    assert_eq!(top[0][0].as_u64().unwrap() as usize, best);
    assert!((top[0][1].as_f64().unwrap() - last[best] as f64).abs() < 1e-4);

    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("einsum-models/tests/data/Llama-3.1-70B");
    let spec = format!("hf:{}", data.display());
    let out =
        einsummable(&["plan", &spec, "--devices", "16", "--topology", "dgx-h100x2", "--tokens", "2048", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["predicted_ms"].as_f64().unwrap() > 0.0, "{v}");

    // No config, no weights, a bad id: errors that say what, without a panic.
    let out = einsummable(&["run", "hf:/nonexistent-model", "--devices", "1"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("config.json") && !stderr.contains("panicked"), "{stderr}");
    let bare = std::env::temp_dir().join(format!("einsummable-config-only-{}", std::process::id()));
    std::fs::create_dir_all(&bare).unwrap();
    std::fs::copy(fixture("qwen2").join("config.json"), bare.join("config.json")).unwrap();
    let out = einsummable(&["run", &format!("hf:{}", bare.display()), "--devices", "1", "--tokens", "1,2"]);
    std::fs::remove_dir_all(&bare).ok();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("safetensors") && !stderr.contains("panicked"), "{stderr}");
    let out = einsummable(&["run", &dir, "--devices", "2", "--tokens", "1,100000"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("outside the vocabulary"), "{stderr}");
}

/// Greedy decoding by recomputation (one graph over prompt + 32 positions, the unseen
/// positions padded: attention is causal, so a position's logits ignore the padding) picks
/// exactly the 32 tokens transformers' greedy `generate` picks, whose every top-1/top-2 margin
/// the fixture script made at least 1e-3.
#[test]
fn greedy_decoding_by_recomputation_gives_transformers_tokens() {
    for family in FAMILIES {
        let bytes = std::fs::read(fixture(family).join("reference.safetensors")).unwrap();
        let file = safetensors::SafeTensors::deserialize(&bytes).unwrap();
        let ints = |name: &str| -> Vec<i32> {
            let t = file.tensor(name).unwrap();
            t.data().chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().unwrap()) as i32).collect()
        };
        let (prompt, generated) = (ints("generate_prompt"), ints("generated"));
        let length = prompt.len() + generated.len();
        let config = ModelConfig::from_file(fixture(family).join("config.json")).unwrap();
        let model = llama::build(&config, length, DType::F32).unwrap();
        for devices in [1, 4] {
            let mut exe = compile(&model.graph, &CompileOptions::default().devices(devices)).unwrap();
            let checkpoint = Checkpoint::open(fixture(family)).unwrap();
            model
                .load_weights(&checkpoint, |input, value| -> Result<(), Box<dyn std::error::Error>> {
                    Ok(exe.load_resident(input, value)?)
                })
                .unwrap();
            let mut tokens = prompt.clone();
            while tokens.len() < length {
                let mut padded = tokens.clone();
                padded.resize(length, 0);
                exe.load(model.tokens, HostTensor::from_i32(TensorType::zero_bounded(&[length]), padded).unwrap())
                    .unwrap();
                exe.execute().unwrap();
                let logits = exe.outputs()[&model.logits.id()].to_f32();
                let vocab = config.vocab_size;
                let row = &logits[(tokens.len() - 1) * vocab..tokens.len() * vocab];
                let best = (0..vocab).fold(0, |b, i| if row[i] > row[b] { i } else { b });
                tokens.push(best as i32);
            }
            assert_eq!(&tokens[prompt.len()..], &generated[..], "{family} on {devices} devices");
        }
    }
}

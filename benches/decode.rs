//! One decode step over a KV cache on the CPU backend, at prefixes of 64 to 4096 tokens: the
//! step's time must grow linearly with the prefix (the cache is read up to each sequence's
//! position, never recomputed), not quadratically. A LLaMA-shaped model of 4 layers
//! (d_model 512, 8 query and 2 key/value heads of 64, d_ff 1536, a vocabulary of 1024) with
//! random weights, one sequence, a cache of 4096 tokens, on 1 device.
//! Run with `cargo bench --bench decode`; the per-step times, their ratio to the 64-token
//! step and the least-squares line through them are printed after criterion's report.

use std::hint::black_box;
use std::time::Instant;

use criterion::{Criterion, criterion_group, criterion_main};
use einsum_core::{HostTensor, TensorType};
use einsum_models::ModelConfig;
use einsum_models::decode::build_decoder;
use einsummable::{CompileOptions, DType, Executable, compile};

const CONFIG: &str = r#"{
  "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 512,
  "intermediate_size": 1536, "num_hidden_layers": 4, "num_attention_heads": 8,
  "num_key_value_heads": 2, "head_dim": 64, "vocab_size": 1024, "rms_norm_eps": 1e-5,
  "max_position_embeddings": 4096, "rope_theta": 500000.0, "hidden_act": "silu",
  "tie_word_embeddings": false
}"#;

const MAX_TOKENS: usize = 4096;
const PREFIXES: [usize; 4] = [64, 256, 1024, 4096];

/// The decode step compiled on one device, every input random, the new token at `prefix`.
fn step() -> (Executable, einsummable::Tensor) {
    let config = ModelConfig::from_json_str(CONFIG).expect("the bench's config parses");
    let decoder = build_decoder(&config, 1, MAX_TOKENS, DType::F32).expect("the decoder builds");
    let mut exe = compile(&decoder.graph, &CompileOptions::default().devices(1)).expect("it compiles");
    exe.load_random(0).expect("random inputs load");
    (exe, decoder.positions)
}

fn at(exe: &mut Executable, positions: einsummable::Tensor, prefix: usize) {
    let p = HostTensor::from_i32(TensorType::zero_bounded(&[1]), vec![prefix as i32 - 1]).expect("one position");
    exe.load(positions, p).expect("the position loads");
}

fn bench(c: &mut Criterion) {
    let (mut exe, positions) = step();
    let mut group = c.benchmark_group("decode step");
    group.sample_size(20);
    for prefix in PREFIXES {
        at(&mut exe, positions, prefix);
        group.bench_function(format!("prefix {prefix}"), |b| b.iter(|| black_box(exe.execute().expect("it runs"))));
    }
    group.finish();

    // The same steps timed here, interleaved over rounds so that drift hits every prefix.
    let mut best = [f64::INFINITY; PREFIXES.len()];
    for _ in 0..20 {
        for (i, prefix) in PREFIXES.iter().enumerate() {
            at(&mut exe, positions, *prefix);
            let started = Instant::now();
            exe.execute().expect("it runs");
            best[i] = best[i].min(started.elapsed().as_secs_f64() * 1e3);
        }
    }
    let n = PREFIXES.len() as f64;
    let (mx, my) = (PREFIXES.iter().sum::<usize>() as f64 / n, best.iter().sum::<f64>() / n);
    let sxy: f64 = PREFIXES.iter().zip(&best).map(|(&x, &y)| (x as f64 - mx) * (y - my)).sum();
    let sxx: f64 = PREFIXES.iter().map(|&x| (x as f64 - mx).powi(2)).sum();
    let slope = sxy / sxx;
    let intercept = my - slope * mx;
    println!("\nprefix | ms per step (best of 20) | / 64-token step | line a + b·prefix");
    for (prefix, ms) in PREFIXES.iter().zip(&best) {
        let line = intercept + slope * *prefix as f64;
        println!("{prefix:>6} | {ms:>8.3} | {:>6.2} | {line:>8.3}", ms / best[0]);
    }
    println!("least squares: a = {intercept:.3} ms, b = {:.4} ms per 1000 tokens of prefix", slope * 1e3);
}

criterion_group!(benches, bench);
criterion_main!(benches);

//! CPU reference kernels against a naive baseline measured in the same run, and the cost of
//! enumerating specs. Run with `cargo bench --bench kernels`.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use einsum_core::{DType, HostTensor, TensorDesc};
use einsum_joinagg::{AbstractOperator, enumerate_specs, execute_whole};
use einsum_ops::{
    Packing,
    attention::{Attention, AttentionConfig},
    einsum::Einsum,
};
use einsummable::Workload;

/// The textbook triple loop: the baseline the GEMM-backed einsum kernel is compared with.
fn naive_matmul(a: &[f32], b: &[f32], n: usize) -> Vec<f32> {
    let mut c = vec![0.0f32; n * n];
    for i in 0..n {
        for k in 0..n {
            let aik = a[i * n + k];
            for j in 0..n {
                c[i * n + j] += aik * b[k * n + j];
            }
        }
    }
    c
}

fn matmul(c: &mut Criterion) {
    let n = 256;
    let a = TensorDesc::of(&[("i", n), ("j", n)], DType::F32).unwrap();
    let b = TensorDesc::of(&[("j", n), ("k", n)], DType::F32).unwrap();
    let op = Einsum::matmul(&a, &b).unwrap();
    let inputs =
        [HostTensor::random(a.tensor_type(), DType::F32, 1), HostTensor::random(b.tensor_type(), DType::F32, 2)];
    let (x, y) = (inputs[0].to_f32(), inputs[1].to_f32());
    let mut group = c.benchmark_group("matmul_256");
    group.bench_function("naive_loop", |bench| bench.iter(|| black_box(naive_matmul(&x, &y, n))));
    group.bench_function("einsum_kernel", |bench| bench.iter(|| black_box(execute_whole(&op, &inputs).unwrap())));
    group.finish();
}

fn attention(c: &mut Criterion) {
    let (heads_q, heads_kv, seq, d) = (8, 2, 512, 64);
    let q = TensorDesc::of(&[("heads_q", heads_q), ("seq", seq), ("d_head", d)], DType::F32).unwrap();
    let k = TensorDesc::of(&[("heads_kv", heads_kv), ("seq", seq), ("d_head", d)], DType::F32).unwrap();
    let op = Attention::new(&q, &k, &k, AttentionConfig::new(true, Packing::single(seq))).unwrap();
    let inputs: Vec<HostTensor> = op
        .inputs()
        .iter()
        .enumerate()
        .map(|(i, d)| HostTensor::random(d.tensor_type(), DType::F32, i as u64))
        .collect();
    c.bench_function("attention_causal_gqa_512", |bench| {
        bench.iter(|| black_box(execute_whole(&op, &inputs).unwrap()))
    });
}

fn enumeration(c: &mut Criterion) {
    let graph = Workload::parse("llama-block").unwrap().build(DType::F16).unwrap();
    for p in [8, 64] {
        c.bench_function(&format!("enumerate_llama_block_p{p}"), |bench| {
            bench.iter(|| {
                for (_, op, _) in graph.computation().ops() {
                    black_box(enumerate_specs(op, p).unwrap());
                }
            })
        });
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20);
    targets = matmul, attention, enumeration
}
criterion_main!(benches);

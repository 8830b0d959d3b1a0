//! CPU reference kernels against a naive baseline measured in the same run, and the cost of
//! enumerating specs. Run with `cargo bench --bench kernels`.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use einsum_core::{DType, HostTensor, TensorDesc};
use einsum_joinagg::{AbstractOperator, enumerate_specs, execute_whole};
use einsum_ops::{
    Packing,
    attention::{Attention, AttentionConfig},
    binary::{Binary, BinaryOp},
    einsum::Einsum,
    fused::ElementwiseChain,
    unary::{Unary, UnaryOp},
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

/// A library without kernels, for preparing an empty graph.
struct NoKernels;

impl einsum_core::KernelLibrary for NoKernels {
    fn run(
        &self,
        _: usize,
        _: &[HostTensor],
        _: &[(einsum_core::TensorType, DType)],
    ) -> Result<Vec<HostTensor>, String> {
        Err("no kernels".into())
    }

    fn name(&self, k: usize) -> String {
        format!("kernel {k}")
    }
}

/// A half-precision matmul of the LLaMA block's FFN shape (1024 tokens, d_model 512, d_ff
/// 1536): the kernel converting panels as the GEMM reaches them, against the path before it
/// (both operands converted whole to f32, the f32 kernel, the result rounded), and the f32
/// kernel on the same sizes.
fn half_matmul(c: &mut Criterion) {
    let (m, k, n) = (1024, 512, 1536);
    for dtype in [DType::F16, DType::BF16, DType::F32] {
        let a = TensorDesc::of(&[("i", m), ("j", k)], dtype).unwrap();
        let b = TensorDesc::of(&[("j", k), ("k", n)], dtype).unwrap();
        let op = Einsum::matmul(&a, &b).unwrap();
        let inputs = [HostTensor::random(a.tensor_type(), dtype, 1), HostTensor::random(b.tensor_type(), dtype, 2)];
        let mut group = c.benchmark_group(format!("matmul_{m}x{k}x{n}_{dtype}"));
        group.bench_function("einsum_kernel", |bench| bench.iter(|| black_box(execute_whole(&op, &inputs).unwrap())));
        if dtype != DType::F32 {
            let f32_desc = |d: &TensorDesc| TensorDesc::new(d.dims.clone(), DType::F32).unwrap();
            let op32 = Einsum::matmul(&f32_desc(&a), &f32_desc(&b)).unwrap();
            group.bench_function("whole_operands_converted", |bench| {
                bench.iter(|| {
                    let wide: Vec<HostTensor> = inputs
                        .iter()
                        .map(|t| HostTensor::from_f32(t.ty().clone(), DType::F32, t.to_f32()).unwrap())
                        .collect();
                    let y = execute_whole(&op32, &wide).unwrap();
                    black_box(HostTensor::from_f32(y[0].ty().clone(), dtype, y[0].to_f32()).unwrap())
                })
            });
        }
        group.finish();
    }
}

/// SwiGLU's `silu(g)·u` on a `[2048, 1536]` block: the unary and binary kernels one after
/// the other (an intermediate block between them), against the fused chain's one pass.
fn elementwise_chain(c: &mut Criterion) {
    // As in the CPU backend, freed blocks stay mapped (preparing a graph tunes the
    // allocator), so both sides reuse their buffers' pages instead of faulting fresh ones.
    let empty = einsum_core::taskgraph::TaskGraph::new(1, Vec::new(), Vec::new());
    einsum_cpu::CpuBackend::with_threads(1).executable(&empty, std::sync::Arc::new(NoKernels)).unwrap();
    let dtype = DType::F32;
    let x = TensorDesc::of(&[("t", 2048), ("f", 1536)], dtype).unwrap();
    let silu = Unary::new(&x, UnaryOp::Silu).unwrap();
    let mul = Binary::new(&x, &x, BinaryOp::Mul).unwrap();
    let (g, u) = (HostTensor::random(x.tensor_type(), dtype, 1), HostTensor::random(x.tensor_type(), dtype, 2));
    let chain =
        ElementwiseChain::unary(UnaryOp::Silu, dtype).then(&ElementwiseChain::binary(BinaryOp::Mul, dtype), 0).unwrap();
    let mut group = c.benchmark_group("silu_mul_2048x1536");
    group.bench_function("two_kernels", |bench| {
        bench.iter(|| {
            let s = execute_whole(&silu, std::slice::from_ref(&g)).unwrap();
            black_box(execute_whole(&mul, &[s[0].clone(), u.clone()]).unwrap())
        })
    });
    group.bench_function("fused_chain", |bench| {
        bench.iter(|| black_box(chain.compute(&[g.clone(), u.clone()], &x.tensor_type()).unwrap()))
    });
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
    targets = matmul, half_matmul, elementwise_chain, attention, enumeration
}
criterion_main!(benches);

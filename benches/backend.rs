//! The CPU backend: the einsum kernel's GEMM rate against this machine's measured f32 FMA
//! peak, a LLaMA block on 8 virtual devices against 1, and the block with the backend's
//! blocks in planned arenas against the heap (glibc's, tuned to keep freed blocks), in one
//! run.
//! Run with `cargo bench --bench backend`; the ratios are printed after criterion's report.

use std::{hint::black_box, sync::Arc, time::Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use einsum_core::{DType, HostTensor, TensorDesc};
use einsum_cpu::CpuBackend;
use einsum_joinagg::execute_whole;
use einsum_ops::einsum::Einsum;
use einsummable::{CompileOptions, Workload, compile};

const N: usize = 512;
const LLAMA: &str = "llama-block:tokens=1024,seqs=2,d_model=512,heads_q=8,heads_kv=4,d_head=64,d_ff=1536";

/// One core's f32 FMA throughput in GFLOP/s and the instructions that reached it, measured
/// with ten independent FMA chains of the widest vectors the CPU has (detected at run time):
/// 512-bit with AVX-512F, else 256-bit with AVX2 + FMA; `None` where the CPU has neither.
fn fma_peak_gflops() -> Option<(f64, &'static str)> {
    #[cfg(target_arch = "x86_64")]
    {
        if is_x86_feature_detected!("avx512f") {
            // SAFETY: the feature the function enables was detected above.
            return Some((unsafe { fma_peak_avx512() }, "ten 512-bit chains"));
        }
        if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
            // SAFETY: the features the function enables were detected above.
            return Some((unsafe { fma_peak_avx2() }, "ten 256-bit chains"));
        }
    }
    None
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn fma_peak_avx512() -> f64 {
    use std::arch::x86_64::*;
    const ITERS: usize = 25_000_000;
    let (a, b) = (_mm512_set1_ps(0.999_999), _mm512_set1_ps(1e-7));
    let mut r = [_mm512_set1_ps(1.0); 10];
    let [mut r0, mut r1, mut r2, mut r3, mut r4, mut r5, mut r6, mut r7, mut r8, mut r9] = r;
    let start = Instant::now();
    for _ in 0..ITERS {
        r0 = _mm512_fmadd_ps(r0, a, b);
        r1 = _mm512_fmadd_ps(r1, a, b);
        r2 = _mm512_fmadd_ps(r2, a, b);
        r3 = _mm512_fmadd_ps(r3, a, b);
        r4 = _mm512_fmadd_ps(r4, a, b);
        r5 = _mm512_fmadd_ps(r5, a, b);
        r6 = _mm512_fmadd_ps(r6, a, b);
        r7 = _mm512_fmadd_ps(r7, a, b);
        r8 = _mm512_fmadd_ps(r8, a, b);
        r9 = _mm512_fmadd_ps(r9, a, b);
    }
    let secs = start.elapsed().as_secs_f64();
    r = [r0, r1, r2, r3, r4, r5, r6, r7, r8, r9];
    black_box(r);
    (10 * ITERS * 16 * 2) as f64 / secs / 1e9
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn fma_peak_avx2() -> f64 {
    use std::arch::x86_64::*;
    const ITERS: usize = 50_000_000;
    // Ten independent chains in named registers: enough to cover the FMA latency on both
    // pipes of current x86 cores.
    let (a, b) = (_mm256_set1_ps(0.999_999), _mm256_set1_ps(1e-7));
    let mut r = [_mm256_set1_ps(1.0); 10];
    let [mut r0, mut r1, mut r2, mut r3, mut r4, mut r5, mut r6, mut r7, mut r8, mut r9] = r;
    let start = Instant::now();
    for _ in 0..ITERS {
        r0 = _mm256_fmadd_ps(r0, a, b);
        r1 = _mm256_fmadd_ps(r1, a, b);
        r2 = _mm256_fmadd_ps(r2, a, b);
        r3 = _mm256_fmadd_ps(r3, a, b);
        r4 = _mm256_fmadd_ps(r4, a, b);
        r5 = _mm256_fmadd_ps(r5, a, b);
        r6 = _mm256_fmadd_ps(r6, a, b);
        r7 = _mm256_fmadd_ps(r7, a, b);
        r8 = _mm256_fmadd_ps(r8, a, b);
        r9 = _mm256_fmadd_ps(r9, a, b);
    }
    let secs = start.elapsed().as_secs_f64();
    r = [r0, r1, r2, r3, r4, r5, r6, r7, r8, r9];
    black_box(r);
    (10 * ITERS * 8 * 2) as f64 / secs / 1e9
}

fn gemm(c: &mut Criterion) {
    let a = TensorDesc::of(&[("i", N), ("j", N)], DType::F32).unwrap();
    let b = TensorDesc::of(&[("j", N), ("k", N)], DType::F32).unwrap();
    let op = Einsum::matmul(&a, &b).unwrap();
    let inputs =
        [HostTensor::random(a.tensor_type(), DType::F32, 1), HostTensor::random(b.tensor_type(), DType::F32, 2)];
    c.bench_function("einsum_matmul_512", |bench| bench.iter(|| black_box(execute_whole(&op, &inputs).unwrap())));
    // One timed pass outside criterion for the ratio (criterion does not expose its estimate).
    let reps = 10;
    let start = Instant::now();
    for _ in 0..reps {
        black_box(execute_whole(&op, &inputs).unwrap());
    }
    let gflops = (2 * N * N * N * reps) as f64 / start.elapsed().as_secs_f64() / 1e9;
    match fma_peak_gflops() {
        Some((peak, how)) => println!(
            "GEMM {N}³: {gflops:.1} GFLOP/s; measured FMA peak ({how}) {peak:.1} GFLOP/s; ratio {:.2}",
            gflops / peak
        ),
        None => println!("GEMM {N}³: {gflops:.1} GFLOP/s (no AVX-512 or AVX2/FMA peak to compare with)"),
    }
}

fn llama(c: &mut Criterion) {
    let graph = Workload::parse(LLAMA).unwrap().build(DType::F32).unwrap();
    let mut times = Vec::new();
    let mut group = c.benchmark_group("llama_block_cpu");
    group.sample_size(10);
    for devices in [1, 8] {
        let mut exe = compile(&graph, &CompileOptions { devices, ..CompileOptions::default() }).unwrap();
        exe.load_random(0).unwrap();
        group.bench_function(format!("p{devices}"), |b| b.iter(|| exe.execute().unwrap()));
        let start = Instant::now();
        for _ in 0..5 {
            exe.execute().unwrap();
        }
        times.push(start.elapsed().as_secs_f64() / 5.0 * 1e3);
    }
    group.finish();
    println!("{LLAMA}: p=1 {:.1} ms, p=8 {:.1} ms; p=8 / p=1 = {:.2}", times[0], times[1], times[1] / times[0]);
}

/// The block on 1 and 8 virtual devices with the arenas and without, timed in interleaved
/// rounds (each the median of 5 runs), so that the machine's load falls on both alike.
fn arena(c: &mut Criterion) {
    let graph = Workload::parse(LLAMA).unwrap().build(DType::F32).unwrap();
    let mut group = c.benchmark_group("llama_block_arena");
    group.sample_size(10);
    for devices in [1, 8] {
        let mut exes = Vec::new();
        for arena in [true, false] {
            let backend = Arc::new(CpuBackend::new().with_arena(arena));
            let options = CompileOptions { devices, ..CompileOptions::default() }.backend(backend);
            let mut exe = compile(&graph, &options).unwrap();
            exe.load_random(0).unwrap();
            exe.execute().unwrap();
            group.bench_function(format!("p{devices}_{}", if arena { "arena" } else { "heap" }), |b| {
                b.iter(|| exe.execute().unwrap())
            });
            exes.push(exe);
        }
        let mut rounds: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
        for _ in 0..7 {
            for (exe, times) in exes.iter_mut().zip(&mut rounds) {
                let mut runs: Vec<f64> = (0..5)
                    .map(|_| {
                        let start = Instant::now();
                        exe.execute().unwrap();
                        start.elapsed().as_secs_f64() * 1e3
                    })
                    .collect();
                runs.sort_by(f64::total_cmp);
                times.push(runs[2]);
            }
        }
        let median = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let (with, without) = (median(&mut rounds[0]), median(&mut rounds[1]));
        println!(
            "{LLAMA}, p={devices}: arena {with:.1} ms, heap {without:.1} ms; arena / heap = {:.3}",
            with / without
        );
    }
    group.finish();
}

criterion_group!(benches, gemm, llama, arena);
criterion_main!(benches);

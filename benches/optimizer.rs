//! Logical-optimizer speed: the DP (with spec enumeration) on a LLaMA block and a 32-layer
//! stack at p = 8, 16 and 64, and Greedy as the baseline measured in the same run.
//! Run with `cargo bench --bench optimizer`.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use einsum_logical::{Dp, Greedy, LogicalOptimizer, Machine, Time};
use einsummable::{DType, Workload};

fn optimize(c: &mut Criterion) {
    let model = Time::on(Machine::by_name("dgx-a100").unwrap());
    for workload in ["llama-block:tokens=131072,seqs=1", "llama:layers=32,tokens=8192,seqs=1"] {
        let graph = Workload::parse(workload).unwrap().build(DType::F16).unwrap();
        let short = workload.split(':').next().unwrap();
        let mut group = c.benchmark_group(format!("optimize_{short}"));
        group.sample_size(10);
        for p in [8, 16, 64] {
            group.bench_function(format!("dp_p{p}"), |b| {
                b.iter(|| black_box(Dp.optimize(graph.computation(), p, &model).unwrap()))
            });
            group.bench_function(format!("greedy_p{p}"), |b| {
                b.iter(|| black_box(Greedy.optimize(graph.computation(), p, &model).unwrap()))
            });
        }
        group.finish();
    }
}

criterion_group!(benches, optimize);
criterion_main!(benches);

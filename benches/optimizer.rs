//! Logical-optimizer speed: the DP (with spec enumeration) on a LLaMA block and a 32-layer
//! stack at p = 8, 16 and 64, and Greedy as the baseline measured in the same run; then,
//! on the 32-layer stack at p = 8 and 64, building the [`Problem`] with the layers sharing
//! their enumerated and priced specs (`Problem::new`) against enumerating every operator
//! on its own (`Problem::new_unshared`), alone and followed by the DP.
//! Then the DP under a binding memory budget against the unbudgeted DP; last, the 80-layer
//! 70B-sized stack at p = 72. Run with `cargo bench --bench optimizer` (`-- problem_` for
//! the second part only, `-- budget_` for the third, `-- optimize_llama70b` for the last).

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use einsum_logical::{Dp, Greedy, LogicalOptimizer, Machine, Problem, Time};
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

/// Panics unless the two problems have the same candidates (counts, aliases, specs, tilings)
/// with the same costs to the bit, and the DP picks the same plan in both.
fn assert_same(shared: &Problem, unshared: &Problem) {
    assert_eq!(shared.ops.len(), unshared.ops.len());
    for (a, b) in shared.ops.iter().zip(&unshared.ops) {
        assert_eq!(a.candidates.len(), b.candidates.len(), "{}", a.name);
        for (x, y) in a.candidates.iter().zip(b.candidates.iter()) {
            let bits = |c: &einsum_logical::Candidate| {
                [c.cost.join, c.cost.aggregation, c.cost.compute, c.bytes].map(f64::to_bits)
            };
            assert!(
                x.counts == y.counts
                    && x.aliases == y.aliases
                    && x.spec == y.spec
                    && (&x.outputs, &x.inputs) == (&y.outputs, &y.inputs)
                    && bits(x) == bits(y),
                "{}: candidate {:?} differs",
                a.name,
                x.counts
            );
        }
    }
    assert_eq!(Dp.solve(shared).unwrap(), Dp.solve(unshared).unwrap());
}

/// `Problem::new` (layers share their specs) against `Problem::new_unshared` (the reference,
/// every operator enumerated and priced on its own), alone and with the DP's solve and plan,
/// after checking that both give the same problem and plan.
fn problem(c: &mut Criterion) {
    let model = Time::on(Machine::by_name("dgx-a100").unwrap());
    let graph = Workload::parse("llama:layers=32,tokens=8192,seqs=1").unwrap().build(DType::F16).unwrap();
    let comp = graph.computation();
    let mut group = c.benchmark_group("problem_llama");
    group.sample_size(10);
    for p in [8, 64] {
        assert_same(&Problem::new(comp, p, &model).unwrap(), &Problem::new_unshared(comp, p, &model).unwrap());
        group.bench_function(format!("new_p{p}"), |b| b.iter(|| black_box(Problem::new(comp, p, &model).unwrap())));
        group.bench_function(format!("new_unshared_p{p}"), |b| {
            b.iter(|| black_box(Problem::new_unshared(comp, p, &model).unwrap()))
        });
        group.bench_function(format!("dp_p{p}"), |b| {
            b.iter(|| {
                let problem = Problem::new(comp, p, &model).unwrap();
                black_box(problem.plan(&Dp.solve(&problem).unwrap(), "dp").unwrap())
            })
        });
        group.bench_function(format!("dp_unshared_p{p}"), |b| {
            b.iter(|| {
                let problem = Problem::new_unshared(comp, p, &model).unwrap();
                black_box(problem.plan(&Dp.solve(&problem).unwrap(), "dp").unwrap())
            })
        });
    }
    group.finish();
}

/// The DP under a memory budget that binds (the Lagrangian bisection and the local search)
/// against the unbudgeted DP in the same run, on the LLaMA-3-8B model at p = 8: with 4 GB per
/// device its weights (15 GB) must be split, where the unbudgeted plan replicates them.
fn budget(c: &mut Criterion) {
    let model = Time::on(Machine::by_name("dgx-a100").unwrap());
    let graph = Workload::parse("llama3-8b").unwrap().build(DType::F16).unwrap();
    let comp = graph.computation();
    let free = Dp.optimize(comp, 8, &model).unwrap();
    let tight = Dp.optimize_within(comp, 8, &model, Some(4e9)).unwrap();
    assert!(free.resident_bytes > 4e9 && tight.resident_bytes <= 4e9, "the budget must bind");
    let mut group = c.benchmark_group("budget_llama3_8b");
    group.sample_size(10);
    group.bench_function("dp_p8", |b| b.iter(|| black_box(Dp.optimize(comp, 8, &model).unwrap())));
    group.bench_function("dp_within_4gb_p8", |b| {
        b.iter(|| black_box(Dp.optimize_within(comp, 8, &model, Some(4e9)).unwrap()))
    });
    group.finish();
}

/// The 80-layer LLaMA-3-70B stack (`llama3-70b`: 8192 tokens, one sequence) planned for p = 72 on nvl72 (enumeration, pricing and
/// the DP's exact search, with its elimination report), against Greedy in the same run.
fn deep(c: &mut Criterion) {
    let model = Time::on(Machine::by_name("nvl72").unwrap());
    let graph = Workload::parse("llama3-70b").unwrap().build(DType::F16).unwrap();
    let comp = graph.computation();
    let mut group = c.benchmark_group("optimize_llama70b_80_layers");
    group.sample_size(10);
    group.bench_function("dp_p72", |b| b.iter(|| black_box(Dp.optimize(comp, 72, &model).unwrap())));
    group.bench_function("greedy_p72", |b| b.iter(|| black_box(Greedy.optimize(comp, 72, &model).unwrap())));
    group.finish();
}

criterion_group!(benches, optimize, problem, budget, deep);
criterion_main!(benches);

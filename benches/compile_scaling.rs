//! Compile-time scaling: `plan` (logical DP, then physical compilation with its exchange
//! programs and the whole-plan prediction) of `llama:layers=L,tokens=8192,seqs=1` on `p`
//! identical H100s behind one switch (the `dgx-h100` site, `p` of them), with naive and with
//! searched exchange programs (`SEARCH_ITERATIONS` per program).
//!
//! The default grid finishes in minutes on two cores: naive at p ∈ {8, 16, 32, 64, 72} for
//! L ∈ {1, 8}, and search at p ∈ {8, 16, 32, 64, 72} for L = 1. `EINSUM_SCALING=full` runs
//! the issue's whole grid, p ∈ {8, 16, 32, 64, 72} × L ∈ {1, 8, 32, 80}, both schedules.
//! Run with `cargo bench --bench compile_scaling` (`-- naive` or `-- search` for one).
//! The fitted growth exponents are in `docs/RESULTS.md`.

use std::hint::black_box;
use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use einsum_logical::{Dp, Machine, Time};
use einsummable::pipeline::{Request, plan_and_compile};
use einsummable::{DType, ExchangeSynthesizer, NaiveSynthesizer, SearchSynthesizer, Topology, Workload};

/// `p` dgx-h100 sites behind a non-blocking switch.
fn switched_h100(p: usize) -> Topology {
    Topology::from_json_str(&format!(
        r#"{{"name": "h100-switch-{p}", "sites": {p},
            "site": {{"hbm_gbps": 3350, "hbm_gb": 80, "tflops": {{"f16": 989, "bf16": 989, "f32": 67}},
                      "egress_gbps": 450, "ingress_gbps": 450}},
            "fallback": "switch"}}"#
    ))
    .expect("a valid topology")
}

/// The bench's search iterations per exchange program: the count the compile-time figures of
/// docs/RESULTS.md are measured at, kept so that a run compares with them.
const SEARCH_ITERATIONS: usize = 50;

fn scaling(c: &mut Criterion) {
    let full = std::env::var("EINSUM_SCALING").is_ok_and(|v| v == "full");
    let devices = [8, 16, 32, 64, 72];
    for (name, schedule) in [
        ("naive", Arc::new(NaiveSynthesizer) as Arc<dyn ExchangeSynthesizer>),
        (
            "search",
            Arc::new(SearchSynthesizer { seed: 0, iterations: SEARCH_ITERATIONS, budget: None, naive_fallback: true }),
        ),
    ] {
        let layers: &[usize] = match (full, name) {
            (true, _) => &[1, 8, 32, 80],
            (false, "naive") => &[1, 8],
            (false, _) => &[1],
        };
        let mut group = c.benchmark_group(format!("plan_{name}"));
        group.sample_size(10);
        for &l in layers {
            let graph =
                Workload::parse(&format!("llama:layers={l},tokens=8192,seqs=1")).unwrap().build(DType::F16).unwrap();
            for p in devices {
                let topology = switched_h100(p);
                // The time model on the same machine, as `einsummable plan --topology` builds it.
                let model = Time::on(Machine::from_topology(&topology));
                group.bench_function(format!("L{l}_p{p}"), |b| {
                    b.iter(|| {
                        let request = Request {
                            comp: graph.computation(),
                            devices: p,
                            strategy: &Dp,
                            cost: &model,
                            topology: &topology,
                            synthesizer: schedule.clone(),
                            memory_budget: None,
                            host_memory: None,
                            refine: einsummable::refine::DEFAULT_REFINE,
                        };
                        black_box(plan_and_compile(&request).unwrap().compiled.predicted_ms)
                    })
                });
            }
        }
        group.finish();
    }
}

criterion_group!(benches, scaling);
criterion_main!(benches);

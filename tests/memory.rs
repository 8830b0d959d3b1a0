//! Memory-aware planning end to end: the 70B model on 8×A100-40GB, refusals with their
//! numbers, budgets never exceeded by any strategy, and the planner's memory model against
//! the task graph's own accounting.

use std::process::Command;
use std::sync::Arc;

use einsum_compile::{CompileError, NaiveSynthesizer, PipelineError};
use einsum_logical::{Error as PlanError, Machine, Problem, Random, Time};
use einsum_sim::Topology;
use einsummable::names::optimizer_by_name;
use einsummable::pipeline::{Planned, Request, default_budget, plan_and_compile};
use einsummable::{DType, Workload};
use proptest::prelude::*;

const SMALL_LLAMA: &str = "llama-block:tokens=256,seqs=2,d_model=128,heads_q=8,heads_kv=4,d_head=16,d_ff=384";

fn request<'a>(
    comp: &'a einsummable::Computation,
    devices: usize,
    strategy: &'a dyn einsum_logical::LogicalOptimizer,
    cost: &'a dyn einsum_logical::CostModel,
    topology: &'a Topology,
    memory_budget: Option<f64>,
) -> Request<'a> {
    Request {
        comp,
        devices,
        strategy,
        cost,
        topology,
        synthesizer: Arc::new(NaiveSynthesizer),
        memory_budget,
        host_memory: None,
        refine: einsummable::refine::DEFAULT_REFINE,
    }
}

/// The dgx-a100 topology and the time model on it.
/// The DGX-A100 as the pure fluid and roofline model (`Topology::fluid`): the budgets below
/// were calibrated on the plans the `time` model chooses without latencies.
fn a100() -> (Topology, Time) {
    let topology = Topology::named("dgx-a100").unwrap().fluid();
    let model = Time::on(Machine::from_topology(&topology));
    (topology, model)
}

/// The DP's plan for 8 devices without a budget, and its highest compiled peak.
fn unconstrained_dp(comp: &einsummable::Computation, topology: &Topology, model: &Time) -> (Planned, f64) {
    let dp = optimizer_by_name("dp", 0).unwrap();
    let free = plan_and_compile(&request(comp, 8, dp.as_ref(), model, topology, None)).unwrap();
    let peak = *free.compiled.graph.stats().peak_bytes.iter().max().unwrap() as f64;
    (free, peak)
}

/// The headline case: LLaMA-3-70B (139 GB of f16 weights) on 8×A100-40GB plans and
/// compiles with every device's peak within its 36 GB default budget (40 GB less the
/// reserve); `data` (every weight on every device) is refused with its need; 2 devices are
/// refused with how many would be needed.
#[test]
fn llama3_70b_fits_eight_a100s_and_is_refused_where_it_cannot() {
    let graph = Workload::parse("llama3-70b").unwrap().build(DType::F16).unwrap();
    let comp = graph.computation();
    let (topology, model) = a100();
    let dp = optimizer_by_name("dp", 0).unwrap();
    let planned = plan_and_compile(&request(comp, 8, dp.as_ref(), &model, &topology, None)).unwrap();
    assert_eq!(planned.budget, 36e9);
    let stats = planned.compiled.graph.stats();
    for (d, &peak) in stats.peak_bytes.iter().enumerate() {
        assert!(peak as f64 <= planned.budget, "device {d}: {peak} bytes");
        // Every device holds a share of the weights: at least 139 GB / 8.
        assert!(stats.resident_bytes[d] as f64 >= 139e9 / 8.0, "device {d}: {stats:?}");
    }

    let data = optimizer_by_name("data", 0).unwrap();
    match plan_and_compile(&request(comp, 8, data.as_ref(), &model, &topology, None)) {
        Err(PipelineError::Logical(PlanError::OverBudget { strategy, need, budget, .. })) => {
            assert_eq!(strategy, "data");
            assert!(need > 139e9 && budget == 36e9, "{need} {budget}");
        }
        other => panic!("data must be refused, got {:?}", other.map(|p| p.plan.total)),
    }

    let err = plan_and_compile(&request(comp, 2, dp.as_ref(), &model, &topology, None)).err().unwrap();
    match &err {
        PipelineError::Logical(PlanError::DoesNotFit { need, devices: 2, min_devices: 4, .. }) => {
            assert!(*need > 69e9, "{err}")
        }
        other => panic!("2 devices must not fit: {other}"),
    }
    let text = err.to_string();
    assert!(text.contains("69.5") && text.contains("at least 4 devices"), "{text}");
}

/// A tight budget is never exceeded: every strategy either returns a plan whose compiled
/// peak is within the budget on every device, or a typed memory error.
#[test]
fn no_strategy_exceeds_a_tight_budget() {
    let graph = Workload::parse(SMALL_LLAMA).unwrap().build(DType::F16).unwrap();
    let comp = graph.computation();
    let (topology, model) = a100();
    let (_, free_peak) = unconstrained_dp(comp, &topology, &model);
    let mut fitted = 0;
    for strategy in ["dp", "greedy", "random", "ilp", "data", "megatron", "ulysses", "mesh2d"] {
        let s = optimizer_by_name(strategy, 3).unwrap();
        for fraction in [0.8, 0.6, 0.45] {
            let budget = free_peak * fraction;
            match plan_and_compile(&request(comp, 8, s.as_ref(), &model, &topology, Some(budget))) {
                Ok(planned) => {
                    fitted += 1;
                    for &peak in &planned.compiled.graph.stats().peak_bytes {
                        assert!(peak as f64 <= budget, "{strategy} at {fraction}: {peak} > {budget}");
                    }
                }
                Err(PipelineError::Logical(PlanError::DoesNotFit { .. } | PlanError::OverBudget { .. })) => {}
                Err(PipelineError::Compile(CompileError::OutOfMemory { .. })) => {}
                Err(e) => panic!("{strategy} at {fraction}: not a memory error: {e}"),
            }
        }
    }
    // The budgets bind but are not all impossible: the searching strategies fit most.
    assert!(fitted >= 8, "only {fitted} plans fitted");
}

/// With the budget of the unconstrained plan's peak the DP keeps that plan; one byte per
/// device less and it must choose another (or refuse), which the model prices no lower. The
/// refinement is off: it picks among plans by prediction, not by the model's price.
#[test]
fn the_budget_changes_the_plan_only_when_it_binds() {
    let graph = Workload::parse(SMALL_LLAMA).unwrap().build(DType::F16).unwrap();
    let comp = graph.computation();
    let (topology, model) = a100();
    let dp = optimizer_by_name("dp", 0).unwrap();
    let unrefined = |budget| Request { refine: 0, ..request(comp, 8, dp.as_ref(), &model, &topology, budget) };
    let free = plan_and_compile(&unrefined(None)).unwrap();
    let peak = *free.compiled.graph.stats().peak_bytes.iter().max().unwrap() as f64;
    let same = plan_and_compile(&unrefined(Some(peak))).unwrap();
    assert_eq!(same.plan.choice(), free.plan.choice());
    match plan_and_compile(&unrefined(Some(peak - 1.0))) {
        Ok(tight) => {
            assert_ne!(tight.plan.choice(), free.plan.choice());
            assert!(tight.plan.total >= free.plan.total);
        }
        Err(
            PipelineError::Logical(PlanError::DoesNotFit { .. })
            | PipelineError::Compile(CompileError::OutOfMemory { .. }),
        ) => {}
        Err(e) => panic!("not a memory error: {e}"),
    }
}

#[test]
fn the_default_budget_is_the_hbm_less_the_reserve() {
    let h100 = Topology::named("dgx-h100").unwrap();
    assert_eq!(default_budget(&h100, 8), 72e9);
}

fn einsummable(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_einsummable")).args(args).output().expect("the binary runs")
}

/// `plan --json` reports the memory object; a budget below what any plan needs is an error
/// exit that says how much is needed; a non-positive budget is a usage error.
#[test]
fn plan_reports_memory_and_refuses_what_does_not_fit() {
    let out = einsummable(&["plan", SMALL_LLAMA, "--devices", "4", "--memory-budget", "0.01", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let m = &v["memory"];
    assert_eq!(m["budget_bytes"], 1e7);
    assert_eq!(m["capacity_bytes"], 40e9);
    let peaks = m["peak_bytes"].as_array().unwrap();
    let resident = m["resident_bytes"].as_array().unwrap();
    assert_eq!((peaks.len(), resident.len()), (4, 4));
    for (p, r) in peaks.iter().zip(resident) {
        let (p, r) = (p.as_u64().unwrap(), r.as_u64().unwrap());
        assert!(r > 0 && r <= p && p as f64 <= 1e7, "{m}");
    }

    let out = einsummable(&["plan", SMALL_LLAMA, "--devices", "4", "--memory-budget", "0.0001"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("does not fit") && stderr.contains("devices"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");

    for bad in ["0", "-3", "nan"] {
        let out = einsummable(&["plan", "matmul:n=64", &format!("--memory-budget={bad}")]);
        assert!(!out.status.success());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("--memory-budget"), "{bad}: {stderr}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    /// The planner's resident figure (the sum over operators of the largest block set one
    /// function spec reads of computation inputs) bounds every device's resident bytes in
    /// the compiled task graph, and equals the fullest device's when every input has one
    /// reader and blocks split evenly (the FFN).
    #[test]
    fn the_memory_model_matches_the_task_graph(seed in 0u64..1000, devices in prop::sample::select(vec![2usize, 4, 8])) {
        let (topology, model) = a100();
        for (spec, exact) in [("ffn:tokens=64,d_model=32,d_ff=64", true), (SMALL_LLAMA, false)] {
            let graph = Workload::parse(spec).unwrap().build(DType::F16).unwrap();
            let comp = graph.computation();
            let strategy = Random { seed };
            let planned = plan_and_compile(&request(comp, devices, &strategy, &model, &topology, None)).unwrap();
            let problem = Problem::new(comp, devices, &model).unwrap();
            let bound = problem.resident_bytes(&planned.plan.choice());
            let stats = planned.compiled.graph.stats();
            let fullest = *stats.resident_bytes.iter().max().unwrap() as f64;
            prop_assert!(fullest <= bound, "{spec}: {fullest} > {bound}");
            if exact {
                prop_assert_eq!(fullest, bound, "{}", spec);
            }
            prop_assert_eq!(planned.plan.resident_bytes, bound);
        }
    }
}

/// Host memory: a plan whose estimated planning or compiling footprint exceeds the host
/// limit is refused before allocating, naming the stage, the estimate and the limit; the
/// estimates grow with the device count, and one that fits is planned as before.
#[test]
fn plans_too_large_for_the_host_are_refused_before_allocating() {
    use einsum_compile::footprint::{compile_bytes, planning_bytes};
    let graph = Workload::parse(SMALL_LLAMA).unwrap().build(DType::F16).unwrap();
    let comp = graph.computation();
    let (topology, model) = a100();
    let dp = optimizer_by_name("dp", 0).unwrap();
    let planning = planning_bytes(comp, 8);
    assert!(planning > 0.0 && planning_bytes(comp, 64) > 8.0 * planning);
    let with_limit = |limit: f64| {
        let mut r = request(comp, 8, dp.as_ref(), &model, &topology, None);
        r.host_memory = Some(limit);
        plan_and_compile(&r)
    };
    match with_limit(planning / 2.0) {
        Err(PipelineError::HostMemory { stage: "planning", devices: 8, estimate, limit }) => {
            assert_eq!((estimate, limit), (planning, planning / 2.0));
        }
        other => panic!("expected a planning refusal, got {:?}", other.map(|p| p.rounds)),
    }
    let fits = with_limit(f64::MAX).unwrap();
    let compiling = compile_bytes(comp, &fits.plan.specs(), 8);
    // Every task is counted: the estimate covers the compiled graph's tasks.
    assert!(compiling >= fits.compiled.graph.nodes().len() as f64 * einsum_compile::footprint::BYTES_PER_TASK);
    match with_limit(compiling.max(planning) * 0.999).map(|p| p.rounds) {
        Err(e @ PipelineError::HostMemory { .. }) => {
            let text = e.to_string();
            assert!(text.contains("on 8 devices needs an estimated") && text.contains("of host memory"), "{text}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}

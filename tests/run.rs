//! End to end: compile (logical plan, exchange programs, task graph) and run on the CPU
//! backend's virtual devices; the results equal the single-device reference.

use std::{collections::HashMap, sync::Arc};

use einsum_compile::{ComputationKernels, compile as compile_physical};
use einsum_core::Backend;
use einsum_core::{HostTensor, scaled_error};
use einsum_cpu::CpuBackend;
use einsum_logical::{Machine, PaperProxy, Problem, Time};
use einsum_sim::Topology;
use einsummable::names::optimizer_by_name;
use einsummable::{
    BackendParams, CompileOptions, DType, Error, ExchangeSynthesizer, Graph, NaiveSynthesizer, SearchSynthesizer,
    UnaryOp, Workload, backend_by_name, compile,
};
use proptest::prelude::*;

const SMALL_LLAMA: &str = "llama-block:tokens=32,seqs=2,d_model=32,heads_q=8,heads_kv=4,d_head=8,d_ff=48";

/// The largest error of the saved outputs against `Computation::evaluate` on the same inputs.
fn run_and_compare(graph: &Graph, options: &CompileOptions, seed: u64) -> f32 {
    let mut exe = compile(graph, options).unwrap();
    exe.load_random(seed).unwrap();
    exe.execute().unwrap();
    let reference = graph.computation().evaluate(&exe.loaded_inputs()).unwrap();
    reference.iter().map(|(t, r)| scaled_error(&exe.outputs()[t], r, 1.0)).fold(0.0, f32::max)
}

#[test]
fn llama_block_runs_correctly_on_1_2_4_and_8_devices() {
    let graph = Workload::parse(SMALL_LLAMA).unwrap().build(DType::F32).unwrap();
    for devices in [1, 2, 4, 8] {
        for schedule in [
            Arc::new(NaiveSynthesizer) as Arc<dyn ExchangeSynthesizer>,
            Arc::new(SearchSynthesizer { seed: 1, iterations: 5, budget: None, naive_fallback: false }),
        ] {
            let options = CompileOptions { devices, synthesizer: schedule.clone(), ..CompileOptions::default() };
            let err = run_and_compare(&graph, &options, devices as u64);
            assert!(err <= 1e-4, "p = {devices}, {schedule:?}: error {err}");
        }
    }
}

/// The DeepSpeed-Ulysses shape of Section 6.2 (attention on heads, everything else on
/// tokens, repartitions between), forced on a small block, runs correctly.
#[test]
fn the_ulysses_shaped_plan_runs_correctly() {
    let graph = Workload::parse(SMALL_LLAMA).unwrap().build(DType::F32).unwrap();
    let comp = graph.computation();
    let p = 4;
    let problem = Problem::new(comp, p, &PaperProxy).unwrap();
    let mut specs = HashMap::new();
    for op in &problem.ops {
        let want = if op.kind == "attention" { "heads_kv" } else { "tokens" };
        let pick = op
            .candidates
            .iter()
            .find(|c| op.shardable.iter().zip(&c.counts).all(|(n, &k)| if n == want { k == p } else { k == 1 }))
            .unwrap_or_else(|| panic!("{} has no {want}={p} spec", op.name));
        specs.insert(op.id, pick.spec.clone());
    }
    let options = einsum_compile::PhysicalOptions {
        devices: p,
        synthesizer: Arc::new(NaiveSynthesizer),
        topology: Topology::preset("dgx-a100").unwrap(),
        memory_budget: None,
    };
    let compiled = compile_physical(comp, &specs, &options).unwrap();
    assert!(compiled.graph.stats().tasks["transfer"] > 0);
    let inputs = comp.random_inputs(7);
    let ordered: Vec<HostTensor> = comp.inputs().iter().map(|t| inputs[t].clone()).collect();
    let outs =
        CpuBackend::new().execute(&compiled.graph, &ComputationKernels(comp, &compiled.kernels), &ordered).unwrap();
    let reference = comp.evaluate(&inputs).unwrap();
    let err = scaled_error(&outs[0], &reference[&comp.saved()[0]], 1.0);
    assert!(err <= 1e-4, "error {err}");
}

/// A small DAG: `x` feeds a matmul and a residual add, `h` is both saved and consumed;
/// einsum, elementwise, RMSNorm and softmax operators.
fn mlp(tokens: usize, width: usize, act: UnaryOp) -> Graph {
    let mut g = Graph::new();
    let x = g.input("x", &[("t", tokens), ("d", width)], DType::F32).unwrap();
    let w = g.input("w", &[("d", width), ("f", width + 2)], DType::F32).unwrap();
    let v = g.input("v", &[("f", width + 2), ("d", width)], DType::F32).unwrap();
    let norm = g.input("norm", &[("d", width)], DType::F32).unwrap();
    let n = g.rmsnorm(x, norm, "d", 1e-5).unwrap();
    let h = g.matmul(n, w).unwrap();
    let h = g.unary(h, act).unwrap();
    let y = g.einsum("tf,fd->td", &[h, v]).unwrap();
    let y = g.binary(y, x, einsummable::BinaryOp::Add).unwrap();
    let s = g.softmax(y, "d").unwrap();
    g.save(s).unwrap();
    g.save(h).unwrap();
    g
}

/// A 16-device NVSwitch-like topology (the presets have 8), as a file the options can name.
fn sixteen_devices() -> String {
    let path = std::env::temp_dir().join(format!("einsummable-switch16-{}.json", std::process::id()));
    let text = r#"{"name": "switch-16", "sites": 16, "site": {"hbm_gbps": 1555, "hbm_gb": 40,
        "tflops": {"f16": 312, "bf16": 312, "f32": 19.5}, "egress_gbps": 300, "ingress_gbps": 300},
        "fallback": "switch"}"#;
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_string()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(16))]

    /// Random small computations (a DAG: `x` feeds two operators, two saved outputs) at random
    /// p in 1..=16, under every optimizer and both schedules, give the single-device result.
    #[test]
    fn every_optimizer_and_schedule_gives_the_reference(
        tokens in 4usize..20,
        width in 3usize..7,
        devices in 1usize..=16,
        optimizer in prop::sample::select(vec!["dp", "greedy", "random", "ilp"]),
        search in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let graph = mlp(tokens, width, UnaryOp::Gelu);
        let schedule: Arc<dyn ExchangeSynthesizer> = if search { Arc::new(SearchSynthesizer { seed, iterations: 5, budget: None, naive_fallback: false }) } else { Arc::new(NaiveSynthesizer) };
        let topology = Topology::named(&if devices > 8 { sixteen_devices() } else { "dgx-a100".into() }).unwrap();
        let options = CompileOptions {
            devices,
            synthesizer: schedule.clone(),
            optimizer: Arc::from(optimizer_by_name(optimizer, seed).unwrap()),
            cost: Some(Arc::new(Time::on(Machine::from_topology(&topology)))),
            topology,
            ..CompileOptions::default()
        };
        match compile(&graph, &options) {
            // A device count no spec reaches for these small extents is a typed error.
            Err(Error::Logical(_)) => {}
            Err(e) => prop_assert!(false, "{e}"),
            Ok(_) => {
                let err = run_and_compare(&graph, &options, seed);
                prop_assert!(err <= 1e-4, "error {err}");
            }
        }
    }
}

#[test]
fn misuse_is_a_typed_error() {
    let graph = mlp(8, 4, UnaryOp::Relu);
    let mut exe = compile(&graph, &CompileOptions { devices: 2, ..CompileOptions::default() }).unwrap();
    let x = graph_input(&graph, 0);
    let out = graph_saved(&graph, 0);
    // Executing or offloading before everything is loaded and run.
    assert!(exe.execute().unwrap_err().to_string().contains("not loaded"));
    assert!(exe.offload(out).unwrap_err().to_string().contains("before execute"));
    // A value of the wrong shape.
    let wrong = HostTensor::random(einsum_core::TensorType::zero_bounded(&[8, 5]), DType::F32, 1);
    assert!(exe.load(x, wrong).unwrap_err().to_string().contains("input `x`"));
    // Loading a tensor that is not an input, or one from another graph.
    assert!(exe.load(out, HostTensor::random(einsum_core::TensorType::zero_bounded(&[8, 4]), DType::F32, 1)).is_err());
    let other = mlp(8, 4, UnaryOp::Relu);
    assert!(matches!(
        exe.load(
            graph_input(&other, 0),
            HostTensor::random(einsum_core::TensorType::zero_bounded(&[8, 4]), DType::F32, 1)
        ),
        Err(Error::Graph(einsum_graph::Error::ForeignTensor(_)))
    ));
    // Then a proper run.
    exe.load_random(3).unwrap();
    exe.execute().unwrap();
    let first = exe.offload(out).unwrap();
    assert_eq!(first.ty().shape(), vec![8, 4]);
    // The inputs stay resident: a second run gives the same outputs.
    exe.execute().unwrap();
    assert_eq!(exe.offload(out).unwrap(), first);
    // More devices than the topology has sites, an unknown backend.
    assert!(compile(&graph, &CompileOptions { devices: 16, ..CompileOptions::default() }).is_err());
    assert!(backend_by_name("tpu", &BackendParams::default()).is_err());
    // A graph that saves nothing would compute nothing and return no output.
    let mut unsaved = Graph::new();
    unsaved.input("x", &[("a", 4)], DType::F32).unwrap();
    let e = compile(&unsaved, &CompileOptions { devices: 1, ..CompileOptions::default() }).err().unwrap();
    assert!(e.to_string().contains("saves no tensor"), "{e}");
    assert!(compile(&Graph::new(), &CompileOptions::default()).is_err());
}

#[test]
fn host_memory_need_counts_inputs_devices_outputs_and_the_reference() {
    let graph = mlp(8, 4, UnaryOp::Relu);
    let exe = compile(&graph, &CompileOptions { devices: 2, ..CompileOptions::default() }).unwrap();
    let comp = graph.computation();
    let bytes = |t| comp.desc(t).unwrap().shape().iter().product::<usize>() * 4;
    let inputs: usize = comp.inputs().into_iter().map(bytes).sum();
    let outputs: usize = comp.saved().iter().copied().map(bytes).sum();
    let stats = exe.stats();
    let devices: usize = stats.peak_bytes.iter().sum();
    let resident: usize = stats.resident_bytes.iter().sum();
    let transient: usize = stats.transient_peak_bytes.iter().sum();
    assert_eq!(devices, resident + transient);
    // Every input's block is resident on the CPU devices; the host keeps one copy of each.
    assert!(resident >= inputs);
    assert_eq!(exe.host_bytes_needed(false), inputs + devices + outputs);
    assert!(exe.host_bytes_needed(true) > exe.host_bytes_needed(false));
    exe.check_host_memory(true).unwrap();
}

fn graph_input(g: &Graph, i: usize) -> einsummable::Tensor {
    g.tensor(g.computation().inputs()[i]).unwrap()
}

fn graph_saved(g: &Graph, i: usize) -> einsummable::Tensor {
    g.tensor(g.computation().saved()[i]).unwrap()
}

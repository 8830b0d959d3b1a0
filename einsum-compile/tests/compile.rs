//! Physical compilation end to end: computations built from einsum-ops, compiled with random
//! specs on 1 to 8 devices with both schedules, run by the reference interpreter and compared
//! with the single-device evaluation; Example 5.4; the compile-time errors.

use std::collections::HashMap;
use std::sync::Arc;

use einsum_compile::{
    CompileError, Compiled, ComputationKernels, ExchangeSources, ExchangeSynthesizer, NaiveSynthesizer,
    PhysicalOptions, SearchSynthesizer, compile, lower_exchange,
};
use einsum_core::taskgraph::{BufferId, DeviceId, Task, TaskGraph, interpret};
use einsum_core::{Aggregation, DType, HostTensor, SeededRng, TensorDesc, TensorType, scaled_error};
use einsum_exprog::{DEFAULT_SIZE_GB, Membership, PartitionId, Program, SiteId, Upstream, parse, preamble};
use einsum_joinagg::{Computation, FunctionSpec, JoinAggSpec, OpId, TensorId, enumerate_specs};
use einsum_ops::attention::{Attention, AttentionConfig};
use einsum_ops::einsum::Einsum;
use einsum_ops::rmsnorm::RmsNorm;
use einsum_ops::rope::Rope;
use einsum_ops::softmax::Softmax;
use einsum_ops::unary::{Unary, UnaryOp};
use einsum_ops::{Packing, binary};
use einsum_sim::{ComputeRates, Fallback, Site, Topology};
use proptest::prelude::*;

const F32: DType = DType::F32;

fn desc(dims: &[(&str, usize)]) -> TensorDesc {
    TensorDesc::of(dims, F32).unwrap()
}

/// An NVSwitch-like machine of `n` sites (HBM capacity in GB).
fn switch(n: usize, hbm_gb: f64) -> Topology {
    let site = Site::new(2000.0, hbm_gb, ComputeRates::tflops(100.0, 100.0, 20.0)).with_endpoint_caps(200.0);
    Topology::new("switch", vec![site; n], vec![], Some(Fallback::Switch)).unwrap()
}

/// A random spec of `p` function specs per operator, or `None` when some operator has none.
fn random_specs(comp: &Computation, p: usize, rng: &mut SeededRng) -> Option<HashMap<OpId, JoinAggSpec>> {
    let mut specs = HashMap::new();
    for (id, op, _) in comp.ops() {
        let choices = enumerate_specs(op, p).ok()?;
        specs.insert(id, rng.pick(&choices)?.spec.clone());
    }
    Some(specs)
}

fn run(comp: &Computation, compiled: &Compiled, seed: u64) {
    let inputs = comp.random_inputs(seed);
    let expected = comp.evaluate(&inputs).unwrap();
    let ordered: Vec<HostTensor> = comp.inputs().iter().map(|t| inputs[t].clone()).collect();
    let got = interpret(&compiled.graph, &ComputationKernels(comp, &compiled.kernels), &ordered).unwrap();
    assert_eq!(got.len(), comp.saved().len());
    for (t, g) in comp.saved().iter().zip(&got) {
        let err = scaled_error(g, &expected[t], 1.0);
        assert!(err < 1e-4, "saved {t}: error {err} (relative, absolute below 1)");
    }
}

/// Compiles with random specs for `p` devices and checks the result; false if some
/// operator has no spec for `p`.
fn check(comp: &Computation, p: usize, seed: u64, schedule: Arc<dyn ExchangeSynthesizer>, topology: &Topology) -> bool {
    let mut rng = SeededRng::new(seed);
    let Some(specs) = random_specs(comp, p, &mut rng) else { return false };
    let options =
        PhysicalOptions { devices: p, synthesizer: schedule.clone(), topology: topology.clone(), memory_budget: None };
    let compiled = compile(comp, &specs, &options).unwrap_or_else(|e| panic!("p = {p}, seed {seed}: {e}"));
    assert!(compiled.graph.check_complete().is_ok());
    assert_eq!(compiled.graph.devices(), p);
    assert!(compiled.predicted_ms.is_finite() && compiled.predicted_ms >= 0.0);
    for (id, places) in &compiled.placement {
        let mut sorted = places.clone();
        sorted.sort();
        assert_eq!(sorted, (0..p as u32).map(DeviceId).collect::<Vec<_>>(), "{id:?} is placed on a bijection");
    }
    run(comp, &compiled, seed);
    true
}

/// Every p in 1..=8 with both schedules; at least half the device counts must have specs.
fn check_all(comp: &Computation, seed: u64) {
    let topology = switch(8, 80.0);
    let mut ran = 0;
    for p in 1..=8 {
        let naive = check(comp, p, seed + p as u64, Arc::new(NaiveSynthesizer), &topology);
        let search = check(
            comp,
            p,
            seed + 100 + p as u64,
            Arc::new(SearchSynthesizer { seed, iterations: 10, budget: None, naive_fallback: false }),
            &topology,
        );
        ran += naive as usize + search as usize;
    }
    assert!(ran >= 8, "only {ran} runs had specs");
}

fn matmul_chain() -> Computation {
    let mut c = Computation::new();
    let a = c.add_input("a", desc(&[("i", 8), ("j", 6)]));
    let b = c.add_input("b", desc(&[("j", 6), ("k", 8)]));
    let d = c.add_input("d", desc(&[("k", 8), ("l", 4)]));
    let ab = c
        .add_op(
            "ab",
            Box::new(Einsum::matmul(&desc(&[("i", 8), ("j", 6)]), &desc(&[("j", 6), ("k", 8)])).unwrap()),
            &[a, b],
        )
        .unwrap()[0];
    let abd = c
        .add_op(
            "abd",
            Box::new(Einsum::matmul(&desc(&[("i", 8), ("k", 8)]), &desc(&[("k", 8), ("l", 4)])).unwrap()),
            &[ab, d],
        )
        .unwrap()[0];
    c.save(abd).unwrap();
    c
}

fn ffn() -> Computation {
    let mut c = Computation::new();
    let x = c.add_input("x", desc(&[("t", 8), ("d", 4)]));
    let w1 = c.add_input("w1", desc(&[("d", 4), ("f", 8)]));
    let w2 = c.add_input("w2", desc(&[("f", 8), ("d", 4)]));
    let h = c
        .add_op(
            "up",
            Box::new(Einsum::matmul(&desc(&[("t", 8), ("d", 4)]), &desc(&[("d", 4), ("f", 8)])).unwrap()),
            &[x, w1],
        )
        .unwrap()[0];
    let r =
        c.add_op("relu", Box::new(Unary::new(&desc(&[("t", 8), ("f", 8)]), UnaryOp::Relu).unwrap()), &[h]).unwrap()[0];
    let y = c
        .add_op(
            "down",
            Box::new(Einsum::matmul(&desc(&[("t", 8), ("f", 8)]), &desc(&[("f", 8), ("d", 4)])).unwrap()),
            &[r, w2],
        )
        .unwrap()[0];
    c.save(y).unwrap();
    c
}

/// `x` is read by two operators, and `h` twice by one (h * h), and two tensors are saved.
fn dag() -> Computation {
    let mut c = Computation::new();
    let xd = desc(&[("i", 8), ("j", 8)]);
    let x = c.add_input("x", xd.clone());
    let w = c.add_input("w", xd.clone());
    let h = c.add_op("h", Box::new(Einsum::matmul(&xd, &xd).unwrap()), &[x, w]).unwrap()[0];
    let sq = c
        .add_op(
            "sq",
            Box::new(binary::Binary::new(&xd, &xd, binary::BinaryOp::parse("mul").unwrap()).unwrap()),
            &[h, h],
        )
        .unwrap()[0];
    let e = c.add_op("e", Box::new(Unary::new(&xd, UnaryOp::Relu).unwrap()), &[x]).unwrap()[0];
    let sum = c
        .add_op(
            "sum",
            Box::new(binary::Binary::new(&xd, &xd, binary::BinaryOp::parse("add").unwrap()).unwrap()),
            &[sq, e],
        )
        .unwrap()[0];
    c.save(sum).unwrap();
    c.save(h).unwrap();
    c
}

fn softmax() -> Computation {
    let mut c = Computation::new();
    let a = c.add_input("a", desc(&[("i", 8), ("j", 4)]));
    let b = c.add_input("b", desc(&[("j", 4), ("k", 8)]));
    let ab = c
        .add_op(
            "ab",
            Box::new(Einsum::matmul(&desc(&[("i", 8), ("j", 4)]), &desc(&[("j", 4), ("k", 8)])).unwrap()),
            &[a, b],
        )
        .unwrap()[0];
    let s = c.add_op("softmax", Box::new(Softmax::new(&desc(&[("i", 8), ("k", 8)]), "k").unwrap()), &[ab]).unwrap()[0];
    c.save(s).unwrap();
    c
}

fn rmsnorm() -> Computation {
    let mut c = Computation::new();
    let xd = desc(&[("t", 8), ("d", 8)]);
    let x = c.add_input("x", xd.clone());
    let w = c.add_input("w", desc(&[("d", 8)]));
    let r = c.add_op("relu", Box::new(Unary::new(&xd, UnaryOp::Relu).unwrap()), &[x]).unwrap()[0];
    let n = c.add_op("norm", Box::new(RmsNorm::new(&xd, &desc(&[("d", 8)]), "d", 1e-5).unwrap()), &[r, w]).unwrap()[0];
    c.save(n).unwrap();
    c
}

/// Causal grouped-query attention (4 query heads, 2 KV heads) with RoPE on q and k.
fn attention() -> Computation {
    let mut c = Computation::new();
    let (s, d) = (8, 4);
    let qd = desc(&[("heads_q", 4), ("tokens", s), ("d_head", d)]);
    let kd = desc(&[("heads_kv", 2), ("tokens", s), ("d_head", d)]);
    let vd = desc(&[("heads_v", 2), ("tokens", s), ("e", d)]);
    let q = c.add_input("q", qd.clone());
    let k = c.add_input("k", kd.clone());
    let v = c.add_input("v", vd.clone());
    let rq = c
        .add_op("rope_q", Box::new(Rope::new(&qd, "tokens", "d_head", 10000.0, Packing::single(s)).unwrap()), &[q])
        .unwrap()[0];
    let rk = c
        .add_op("rope_k", Box::new(Rope::new(&kd, "tokens", "d_head", 10000.0, Packing::single(s)).unwrap()), &[k])
        .unwrap()[0];
    let att = Attention::new(&qd, &kd, &vd, AttentionConfig::new(true, Packing::single(s))).unwrap();
    let o = c.add_op("attention", Box::new(att), &[rq, rk, v]).unwrap()[0];
    c.save(o).unwrap();
    c
}

#[test]
fn matmul_chain_runs_correctly() {
    check_all(&matmul_chain(), 1);
}

#[test]
fn ffn_runs_correctly() {
    check_all(&ffn(), 2);
}

#[test]
fn dag_with_a_tensor_read_twice_runs_correctly() {
    check_all(&dag(), 3);
}

#[test]
fn softmax_runs_correctly() {
    check_all(&softmax(), 4);
}

#[test]
fn rmsnorm_runs_correctly() {
    check_all(&rmsnorm(), 5);
}

#[test]
fn gqa_attention_with_rope_runs_correctly() {
    check_all(&attention(), 6);
}

#[test]
fn dgx_v100_with_eight_devices() {
    let v100 = Topology::preset("dgx-v100").unwrap();
    for (i, comp) in [ffn(), softmax(), dag()].iter().enumerate() {
        assert!(check(comp, 8, 40 + i as u64, Arc::new(NaiveSynthesizer), &v100));
        assert!(check(
            comp,
            8,
            50 + i as u64,
            Arc::new(SearchSynthesizer { seed: 7, iterations: 10, budget: None, naive_fallback: false }),
            &v100
        ));
    }
}

fn tt(lo: &[usize], hi: &[usize]) -> TensorType {
    TensorType::new(lo, hi).unwrap()
}

/// Example 5.4, shrunk: the matmul of Example 3.8 (i = k = 8, j = 4) with the four function
/// specs F_mn (m-th half of i, n-th half of j), feeding a softmax over k split into four
/// row blocks.
fn example_5_4() -> (Computation, HashMap<OpId, JoinAggSpec>) {
    let mut c = Computation::new();
    let (ad, bd) = (desc(&[("i", 8), ("j", 4)]), desc(&[("j", 4), ("k", 8)]));
    let a = c.add_input("a", ad.clone());
    let b = c.add_input("b", bd.clone());
    let ab = c.add_op("matmul", Box::new(Einsum::matmul(&ad, &bd).unwrap()), &[a, b]).unwrap()[0];
    let s = c.add_op("softmax", Box::new(Softmax::new(&desc(&[("i", 8), ("k", 8)]), "k").unwrap()), &[ab]).unwrap()[0];
    c.save(s).unwrap();
    let mut matmul = Vec::new();
    for m in 0..2 {
        for n in 0..2 {
            matmul.push(FunctionSpec {
                inputs: vec![tt(&[4 * m, 2 * n], &[4 * m + 4, 2 * n + 2]), tt(&[2 * n, 0], &[2 * n + 2, 8])],
                outputs: vec![tt(&[4 * m, 0], &[4 * m + 4, 8])],
            });
        }
    }
    let rows = (0..4)
        .map(|q| {
            let r = tt(&[2 * q, 0], &[2 * q + 2, 8]);
            FunctionSpec { inputs: vec![r.clone()], outputs: vec![r] }
        })
        .collect();
    let specs = HashMap::from([(ab.op, JoinAggSpec { functions: matmul }), (s.op, JoinAggSpec { functions: rows })]);
    (c, specs)
}

fn without_sizes(p: &Program) -> Program {
    let mut p = p.with_body([]);
    for input in p.inputs.values_mut() {
        input.size_gb = DEFAULT_SIZE_GB;
    }
    p
}

#[test]
fn example_5_4_compiles_to_its_preamble_and_runs() {
    let (comp, specs) = example_5_4();
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../einsum-exprog/examples/example_5_4_preamble.exprog");
    let expected = parse(&std::fs::read_to_string(path).unwrap()).unwrap();
    for schedule in [
        Arc::new(NaiveSynthesizer) as Arc<dyn ExchangeSynthesizer>,
        Arc::new(SearchSynthesizer { seed: 3, iterations: 10, budget: None, naive_fallback: false }),
    ] {
        let options = PhysicalOptions {
            devices: 4,
            synthesizer: schedule.clone(),
            topology: switch(4, 80.0),
            memory_budget: None,
        };
        let compiled = compile(&comp, &specs, &options).unwrap();
        assert_eq!(compiled.programs.len(), 1);
        let program = &compiled.programs[0];
        assert_eq!((program.op, program.input), (OpId(3), 0));
        assert_eq!(without_sizes(&program.program), expected);
        assert!(program.simulated_ms > 0.0 && compiled.predicted_ms >= program.simulated_ms);
        // Every atom is 2 x 8 f32 values.
        assert!(program.program.inputs.values().all(|i| i.size_gb == 64.0 / 1e9));
        // 8 kernels; each softmax block aggregates its two partial copies once.
        assert_eq!(compiled.kernels.len(), 8);
        let stats = compiled.graph.stats();
        assert_eq!(stats.tasks["aggregate"], 4);
        assert_eq!(stats.tasks["load"], 8);
        run(&comp, &compiled, 11);
    }
}

#[test]
fn wrong_spec_counts_and_missing_specs_are_refused() {
    let (comp, specs) = example_5_4();
    let options = PhysicalOptions {
        devices: 2,
        synthesizer: Arc::new(NaiveSynthesizer),
        topology: switch(8, 80.0),
        memory_budget: None,
    };
    let err = compile(&comp, &specs, &options).unwrap_err();
    assert!(matches!(&err, CompileError::SpecCount { expected: 2, got: 4, .. }), "{err}");
    assert!(err.to_string().contains("matmul"), "{err}");
    let mut partial = specs.clone();
    partial.remove(&OpId(3));
    let options = PhysicalOptions { devices: 4, ..options };
    let err = compile(&comp, &partial, &options).unwrap_err();
    assert_eq!(err, CompileError::MissingSpec { op: "softmax".into() });
    let err = compile(&comp, &specs, &PhysicalOptions { devices: 0, ..options }).unwrap_err();
    assert_eq!(err, CompileError::NoDevices);
}

#[test]
fn a_topology_with_too_few_sites_is_refused() {
    let (comp, specs) = example_5_4();
    let options = PhysicalOptions {
        devices: 4,
        synthesizer: Arc::new(NaiveSynthesizer),
        topology: switch(2, 80.0),
        memory_budget: None,
    };
    let err = compile(&comp, &specs, &options).unwrap_err();
    assert!(matches!(err, CompileError::TopologyTooSmall { sites: 2, devices: 4, .. }), "{err}");
}

#[test]
fn a_graph_over_hbm_capacity_is_refused() {
    let (comp, specs) = example_5_4();
    // 200 bytes of HBM per device: one 4 x 8 f32 block alone takes 128.
    let options = PhysicalOptions {
        devices: 4,
        synthesizer: Arc::new(NaiveSynthesizer),
        topology: switch(4, 200e-9),
        memory_budget: None,
    };
    let err = compile(&comp, &specs, &options).unwrap_err();
    let CompileError::OutOfMemory { device, peak, resident, budget } = &err else { panic!("{err}") };
    assert!(*peak as f64 > *budget && *budget == 200.0 && *device < 4 && resident <= peak, "{err}");
    let text = err.to_string();
    assert!(text.contains(&format!("device {device}")) && text.contains(&peak.to_string()), "{text}");
}

/// Two matmuls read the same weight `w` with the same spec: each device loads its block of
/// `w` once, and both kernels read that buffer.
#[test]
fn a_weight_read_by_two_operators_is_loaded_once_per_device_and_block() {
    let xd = desc(&[("i", 8), ("j", 8)]);
    let mut comp = Computation::new();
    let x = comp.add_input("x", xd.clone());
    let w = comp.add_input("w", xd.clone());
    let a = comp.add_op("a", Box::new(Einsum::matmul(&xd, &xd).unwrap()), &[x, w]).unwrap()[0];
    let b = comp.add_op("b", Box::new(Einsum::matmul(&xd, &xd).unwrap()), &[x, w]).unwrap()[0];
    comp.save(a).unwrap();
    comp.save(b).unwrap();
    let p = 2;
    let (_, op, _) = comp.ops().next().unwrap();
    let spec = enumerate_specs(op, p).unwrap()[0].spec.clone();
    let specs: HashMap<OpId, JoinAggSpec> = comp.ops().map(|(id, _, _)| (id, spec.clone())).collect();
    let options = PhysicalOptions {
        devices: p,
        synthesizer: Arc::new(NaiveSynthesizer),
        topology: switch(p, 80.0),
        memory_budget: None,
    };
    let compiled = compile(&comp, &specs, &options).unwrap();
    let g = &compiled.graph;
    let mut loads: Vec<(usize, u32, TensorType)> = g
        .nodes()
        .iter()
        .filter_map(|n| match n.task {
            Task::Load { input, dst } => Some((input, g.buffer(dst).device.0, g.buffer(dst).ty.clone())),
            _ => None,
        })
        .collect();
    let wanted: std::collections::BTreeSet<(usize, u32, TensorType)> = spec
        .functions
        .iter()
        .enumerate()
        .flat_map(|(i, f)| (0..2).map(move |k| (k, i as u32, f.inputs[k].clone())))
        .collect();
    loads.sort();
    assert_eq!(loads, wanted.into_iter().collect::<Vec<_>>(), "one load per (input, device, block)");
    // Every kernel reads resident buffers; the two operators share them.
    let reads = |op: usize| -> Vec<BufferId> {
        g.nodes()
            .iter()
            .filter_map(|n| match &n.task {
                Task::Kernel { kernel, inputs, .. }
                    if compiled.kernels[*kernel].op == comp.ops().nth(op).unwrap().0 =>
                {
                    Some(inputs.clone())
                }
                _ => None,
            })
            .flatten()
            .collect()
    };
    assert_eq!(reads(0), reads(1));
    assert!(reads(0).iter().all(|&b| g.is_resident(b)));
    run(&comp, &compiled, 5);
}

#[test]
fn a_memory_budget_below_the_peak_is_refused() {
    let (comp, specs) = example_5_4();
    let options = PhysicalOptions {
        devices: 4,
        synthesizer: Arc::new(NaiveSynthesizer),
        topology: switch(4, 80.0),
        memory_budget: None,
    };
    let stats = compile(&comp, &specs, &options).unwrap().graph.stats();
    let peak = *stats.peak_bytes.iter().max().unwrap();
    let worst = stats.peak_bytes.iter().position(|&b| b == peak).unwrap();
    let at = PhysicalOptions { memory_budget: Some(peak as f64), ..options.clone() };
    assert!(compile(&comp, &specs, &at).is_ok());
    let above = PhysicalOptions { memory_budget: Some(1e12), ..options.clone() };
    assert!(compile(&comp, &specs, &above).is_ok());
    let below = PhysicalOptions { memory_budget: Some(peak as f64 - 1.0), ..options };
    let err = compile(&comp, &specs, &below).unwrap_err();
    assert_eq!(
        err,
        CompileError::OutOfMemory {
            device: worst,
            peak,
            resident: stats.resident_bytes[worst],
            budget: peak as f64 - 1.0
        }
    );
    let text = err.to_string();
    assert!(text.contains("GB resident") && text.contains("GB transient") && text.contains("budget"), "{text}");
}

#[test]
fn an_aggregate_mixing_atoms_is_refused() {
    let (_, specs) = example_5_4();
    let producer = &specs[&OpId(2)];
    let consumer = &specs[&OpId(3)];
    let gpus: Vec<SiteId> = (0..4).map(SiteId).collect();
    let pre =
        preamble(&Upstream::Spec { spec: producer, output: 0, placement: &gpus }, consumer, 0, F32, &gpus).unwrap();
    // X1 and X2 are copies of different atoms (rows 0..2 and 2..4) on site 0.
    let program = parse(&format!("{}X1+X2 @ 0 -> 1\n", pre.program)).unwrap();
    let membership =
        Membership((0..4).map(|i| (PartitionId::new(&format!("S{}", i + 1)).unwrap(), [SiteId(i)].into())).collect());
    let closure = program.closure(&membership).unwrap();
    let whole = TensorType::zero_bounded(&[8, 8]);
    let io = einsum_core::taskgraph::Boundary { name: "ab".into(), ty: whole, dtype: F32 };
    let mut graph = TaskGraph::new(4, vec![io.clone()], vec![io]);
    let holders: Vec<BufferId> = producer
        .functions
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let b = graph.add_buffer(DeviceId(i as u32), f.outputs[0].clone(), F32);
            graph.push(Task::Load { input: 0, dst: b }, &[], "load").unwrap();
            b
        })
        .collect();
    let placement: Vec<DeviceId> = (0..4).map(DeviceId).collect();
    let sources =
        ExchangeSources { holders: &holders, aggregation: Aggregation::Sum, placement: &placement, label: "test" };
    let err = lower_exchange(&mut graph, &pre, &closure, &sources).unwrap_err();
    assert!(matches!(&err, CompileError::MixedAggregate { aggregate, .. } if aggregate == "X1+X2"), "{err}");
}

/// A random DAG of `n` operators over [8, 8] tensors: matmuls, relus, adds and softmaxes
/// reading random earlier tensors; the last and one random tensor are saved.
fn random_dag(seed: u64, n: usize) -> Computation {
    let mut rng = SeededRng::new(seed);
    let xd = desc(&[("i", 8), ("j", 8)]);
    let mut c = Computation::new();
    let mut tensors: Vec<TensorId> = vec![c.add_input("x", xd.clone()), c.add_input("y", xd.clone())];
    for k in 0..n {
        let a = tensors[rng.below(tensors.len())];
        let b = tensors[rng.below(tensors.len())];
        let name = format!("op{k}");
        let t = match rng.below(4) {
            0 => c.add_op(name, Box::new(Einsum::matmul(&xd, &xd).unwrap()), &[a, b]),
            1 => c.add_op(name, Box::new(Unary::new(&xd, UnaryOp::Relu).unwrap()), &[a]),
            2 => c.add_op(
                name,
                Box::new(binary::Binary::new(&xd, &xd, binary::BinaryOp::parse("add").unwrap()).unwrap()),
                &[a, b],
            ),
            _ => c.add_op(name, Box::new(Softmax::new(&xd, "j").unwrap()), &[a]),
        }
        .unwrap()[0];
        tensors.push(t);
    }
    c.save(*tensors.last().unwrap()).unwrap();
    c.save(tensors[rng.below(tensors.len())]).unwrap();
    c
}

/// The estimate behind the up-front refusal: a row-split matmul feeding one that reads its
/// whole input (split by output columns) is an all-to-all, `p²` intersecting pairs, on top
/// of one kernel and one load per input per function spec; a limit one below either figure
/// refuses the plan naming it, and `compile` builds no more transfers than it counts.
#[test]
fn plans_above_the_size_limits_are_refused_with_the_estimate() {
    use einsum_compile::footprint::{
        BUDGETED_SEARCH_SIMULATIONS, CompileEstimate, CompileLimits, LIMITS, check_size, compile_estimate,
    };
    use std::time::Duration;
    let xd = desc(&[("i", 8), ("j", 8)]);
    let mut comp = Computation::new();
    let x = comp.add_input("x", xd.clone());
    let w = comp.add_input("w", xd.clone());
    let a = comp.add_op("a", Box::new(Einsum::matmul(&xd, &xd).unwrap()), &[x, w]).unwrap()[0];
    let b = comp.add_op("b", Box::new(Einsum::matmul(&xd, &xd).unwrap()), &[a, w]).unwrap()[0];
    comp.save(b).unwrap();
    let p = 4;
    let (_, op, _) = comp.ops().next().unwrap();
    let choices = enumerate_specs(op, p).unwrap();
    let pick = |wanted: fn(&FunctionSpec) -> bool| -> JoinAggSpec {
        choices.iter().find(|c| c.spec.functions.iter().all(wanted)).expect("a spec of that shape").spec.clone()
    };
    // Rows of the output split 4 ways; and the whole first input read by every function.
    let rows = pick(|f| f.outputs[0].shape() == [2, 8]);
    let whole = pick(|f| f.inputs[0].shape() == [8, 8] && f.outputs[0].shape() == [8, 2]);
    let ids: Vec<OpId> = comp.ops().map(|(id, _, _)| id).collect();
    let specs: HashMap<OpId, JoinAggSpec> = HashMap::from([(ids[0], rows), (ids[1], whole)]);
    let estimate = compile_estimate(&comp, &specs, p);
    assert_eq!(estimate, CompileEstimate { tasks: 2 * p * 3 + p * p, largest_exchange: p * p });
    let exact = CompileLimits { tasks: estimate.tasks, exchange_pieces: estimate.largest_exchange };
    assert_eq!(check_size(&comp, &specs, p, &NaiveSynthesizer, &exact), Ok(estimate));
    let err = check_size(&comp, &specs, p, &NaiveSynthesizer, &CompileLimits { tasks: estimate.tasks - 1, ..exact })
        .unwrap_err();
    assert_eq!(
        err,
        CompileError::TooLarge { devices: p, what: "tasks", estimate: estimate.tasks, limit: estimate.tasks - 1 }
    );
    assert!(err.to_string().contains(&format!("estimated {} tasks", estimate.tasks)), "{err}");
    let err =
        check_size(&comp, &specs, p, &NaiveSynthesizer, &CompileLimits { exchange_pieces: 15, ..exact }).unwrap_err();
    assert_eq!(err, CompileError::TooLarge { devices: p, what: "pieces in one exchange", estimate: 16, limit: 15 });
    // A search simulates each program once per iteration and once more: 48 iterations
    // divide the naive limit by 7.
    let search = SearchSynthesizer { seed: 0, iterations: 48, budget: None, naive_fallback: false };
    let pieces = CompileLimits { exchange_pieces: 7 * 16, ..exact };
    assert_eq!(pieces.exchange_pieces_for(&search), 16);
    assert_eq!(check_size(&comp, &specs, p, &search, &pieces), Ok(estimate));
    let err = check_size(&comp, &specs, p, &search, &CompileLimits { exchange_pieces: 7 * 16 - 1, ..exact });
    assert!(matches!(err, Err(CompileError::TooLarge { estimate: 16, limit: 15, .. })), "{err:?}");
    // A budget stops the annealing by time: however high the cap, the search is charged
    // for BUDGETED_SEARCH_SIMULATIONS; without one, the cap counts (and never overflows).
    let budgeted = SearchSynthesizer {
        seed: 0,
        iterations: usize::MAX,
        budget: Some(Duration::from_secs(1)),
        naive_fallback: false,
    };
    let charged = ((BUDGETED_SEARCH_SIMULATIONS + 1) as f64).sqrt();
    assert_eq!(LIMITS.exchange_pieces_for(&budgeted), (LIMITS.exchange_pieces as f64 / charged) as usize);
    let capped = SearchSynthesizer { seed: 0, iterations: usize::MAX, budget: None, naive_fallback: false };
    assert_eq!(LIMITS.exchange_pieces_for(&capped), 0);
    assert!(estimate.tasks < LIMITS.tasks && estimate.largest_exchange < LIMITS.exchange_pieces);
    let options = PhysicalOptions {
        devices: p,
        synthesizer: Arc::new(NaiveSynthesizer),
        topology: switch(p, 80.0),
        memory_budget: None,
    };
    let compiled = compile(&comp, &specs, &options).unwrap();
    let transfers = compiled.graph.nodes().iter().filter(|n| matches!(n.task, Task::Transfer { .. })).count();
    assert!(transfers > 0 && transfers <= p * p, "{transfers} transfers");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn random_dags_compile_and_run_correctly(seed in any::<u64>(), n in 1usize..6, p in 1usize..=8, search in any::<bool>()) {
        let comp = random_dag(seed, n);
        let schedule: Arc<dyn ExchangeSynthesizer> = if search { Arc::new(SearchSynthesizer { seed, iterations: 10, budget: None, naive_fallback: false }) } else { Arc::new(NaiveSynthesizer) };
        prop_assert!(check(&comp, p, seed, schedule, &switch(8, 80.0)));
    }
}

/// A chain of five matmuls `x ← x·wₗ` (x is 8 × 8; even layers read `x(i, j)·w(j, k)`, odd
/// ones `x(i, k)·w(k, j)`), even layers split by rows (`i`) and odd ones by columns (`j`):
/// the exchanges into layers 3 and 4 repeat those into layers 1 and 2 exactly (same producer
/// and consumer specs, same placements), so the compile answers them from the first (one
/// shared program, `Arc::ptr_eq`), while the two different exchanges stay distinct; and the
/// result still computes the chain.
#[test]
fn a_repeated_exchange_request_is_answered_once() {
    let p = 4;
    let mut comp = Computation::new();
    let mut x = comp.add_input("x", desc(&[("i", 8), ("j", 8)]));
    let mut ops = Vec::new();
    for layer in 0..5 {
        let (from, to, split) = if layer % 2 == 0 { ("j", "k", "i") } else { ("k", "j", "j") };
        let x_desc = comp.desc(x).unwrap().clone();
        let w_desc = desc(&[(from, 8), (to, 8)]);
        let w = comp.add_input(format!("w{layer}"), w_desc.clone());
        let mm = Einsum::matmul(&x_desc, &w_desc).unwrap();
        let out = comp.add_op(format!("mm{layer}"), Box::new(mm), &[x, w]).unwrap()[0];
        ops.push((out.op, split));
        x = out;
    }
    comp.save(x).unwrap();
    let mut specs = HashMap::new();
    for (id, op, _) in comp.ops() {
        let split = ops.iter().find(|(o, _)| *o == id).unwrap().1;
        let counts: Vec<usize> = op.shardable().iter().map(|s| if s.name == split { p } else { 1 }).collect();
        specs.insert(id, einsum_joinagg::request_spec(op, &counts).unwrap());
    }
    for schedule in [
        Arc::new(NaiveSynthesizer) as Arc<dyn ExchangeSynthesizer>,
        Arc::new(SearchSynthesizer { seed: 1, iterations: 5, budget: None, naive_fallback: false }),
    ] {
        let options = PhysicalOptions {
            devices: p,
            synthesizer: schedule.clone(),
            topology: switch(p, 80.0),
            memory_budget: None,
        };
        let compiled = compile(&comp, &specs, &options).unwrap();
        let program = |layer: usize| &compiled.programs.iter().find(|e| e.op == ops[layer].0).unwrap().program;
        assert_eq!(compiled.programs.len(), 4, "{schedule:?}");
        assert!(std::sync::Arc::ptr_eq(program(3), program(1)), "{schedule:?}");
        assert!(std::sync::Arc::ptr_eq(program(4), program(2)), "{schedule:?}");
        assert!(!std::sync::Arc::ptr_eq(program(1), program(2)), "{schedule:?}");
        assert_ne!(**program(1), **program(2), "{schedule:?}");
        run(&comp, &compiled, 3);
    }
}

//! Whole-plan prediction against figures computed by hand from the DGX-A100 preset's numbers
//! (312 TFLOP/s dense f16, 1555 GB/s HBM, 300 GB/s NVSwitch ports) and the default roofline
//! efficiencies (0.75 of peak for matmuls, 0.85 of HBM for memory traffic). Nothing is run:
//! the tensors are only types.

use std::collections::HashMap;
use std::sync::Arc;

use einsum_compile::{KernelCall, NaiveSynthesizer, PhysicalOptions, PredictError, compile, predict, predict_ms};
use einsum_core::taskgraph::{Boundary, DeviceId, Task, TaskGraph};
use einsum_core::{DType, TensorDesc, TensorType};
use einsum_joinagg::{Computation, FunctionSpec, JoinAggSpec, OpId};
use einsum_ops::einsum::Einsum;
use einsum_sim::{Roofline, SimError, Topology};

const F16: DType = DType::F16;
const PEAK: f64 = 312e12;
const HBM: f64 = 1555e9;
const PORT: f64 = 300e9;
const MATMUL: f64 = 0.75;
const MEMORY: f64 = 0.85;

fn desc(dims: &[(&str, usize)]) -> TensorDesc {
    TensorDesc::of(dims, F16).unwrap()
}

fn tt(lo: &[usize], hi: &[usize]) -> TensorType {
    TensorType::new(lo, hi).unwrap()
}

/// The DGX-A100 as the pure fluid and roofline model (no latencies, no wave quantization):
/// the figures these tests compute by hand (`einsum-sim`'s tests cover the other terms).
fn a100() -> Topology {
    Topology::preset("dgx-a100").unwrap().fluid()
}

fn options(p: usize) -> PhysicalOptions {
    PhysicalOptions { devices: p, synthesizer: Arc::new(NaiveSynthesizer), topology: a100(), memory_budget: None }
}

/// The roofline time of an `m x k` by `k x n` f16 matmul, by hand.
fn matmul_seconds(m: usize, k: usize, n: usize) -> f64 {
    let flops = 2.0 * (m * k * n) as f64;
    let bytes = 2.0 * (m * k + k * n + m * n) as f64;
    (flops / (PEAK * MATMUL)).max(bytes / (HBM * MEMORY))
}

fn close(got: f64, want: f64) -> bool {
    (got - want).abs() <= 1e-12 * want.abs()
}

/// `x = a b` with `a: i x j`, `b: j x k`, saved.
fn one_matmul(i: usize, j: usize, k: usize) -> (Computation, OpId) {
    let mut c = Computation::new();
    let (ad, bd) = (desc(&[("i", i), ("j", j)]), desc(&[("j", j), ("k", k)]));
    let a = c.add_input("a", ad.clone());
    let b = c.add_input("b", bd.clone());
    let x = c.add_op("x", Box::new(Einsum::matmul(&ad, &bd).unwrap()), &[a, b]).unwrap()[0];
    c.save(x).unwrap();
    (c, x.op)
}

#[test]
fn a_single_matmul_on_one_device_is_its_roofline_time() {
    let n = 1024;
    let (comp, x) = one_matmul(n, n, n);
    let whole =
        FunctionSpec { inputs: vec![tt(&[0, 0], &[n, n]), tt(&[0, 0], &[n, n])], outputs: vec![tt(&[0, 0], &[n, n])] };
    let specs = HashMap::from([(x, JoinAggSpec { functions: vec![whole] })]);
    let compiled = compile(&comp, &specs, &options(1)).unwrap();
    // 2 GFLOP at 0.75 x 312 TFLOP/s = 9.18 us: compute-bound (6 MB at 0.85 x 1555 GB/s = 4.76 us)
    let want = 2.0 * 1024f64.powi(3) / (312e12 * 0.75);
    assert!(want > 6.0 * 1024.0 * 1024.0 / (1555e9 * 0.85));
    assert!(close(compiled.predicted_ms, want * 1e3), "{} vs {}", compiled.predicted_ms, want * 1e3);
}

#[test]
fn a_matmul_split_on_rows_over_two_devices_takes_one_half_time() {
    let n = 1024;
    let (comp, x) = one_matmul(n, n, n);
    let half = |r: usize| FunctionSpec {
        inputs: vec![tt(&[r * n / 2, 0], &[(r + 1) * n / 2, n]), tt(&[0, 0], &[n, n])],
        outputs: vec![tt(&[r * n / 2, 0], &[(r + 1) * n / 2, n])],
    };
    let specs = HashMap::from([(x, JoinAggSpec { functions: vec![half(0), half(1)] })]);
    let compiled = compile(&comp, &specs, &options(2)).unwrap();
    let stats = compiled.graph.stats();
    assert_eq!(stats.bytes_moved, 0, "{:?}", stats.tasks);
    assert_eq!(stats.tasks.get("transfer"), None);
    // each device: 1 GFLOP at 0.75 x 312 TFLOP/s; the two run at once
    let want = 2.0 * 512.0 * 1024.0 * 1024.0 / (312e12 * 0.75);
    assert!(close(compiled.predicted_ms, want * 1e3), "{} vs {}", compiled.predicted_ms, want * 1e3);
    assert!(close(want, matmul_seconds(512, 1024, 1024)));
}

/// Example 5.1's computation and specs (see the test below), with its sizes `(i, j, k, l)`.
fn example_5_1() -> (Computation, HashMap<OpId, JoinAggSpec>, (usize, usize, usize, usize)) {
    let (i, j, k, l) = (256, 512, 256, 1024);
    let mut comp = Computation::new();
    let (ad, bd, cd) = (desc(&[("i", i), ("j", j)]), desc(&[("j", j), ("k", k)]), desc(&[("k", k), ("l", l)]));
    let a = comp.add_input("a", ad.clone());
    let b = comp.add_input("b", bd.clone());
    let c = comp.add_input("c", cd.clone());
    let x = comp.add_op("x", Box::new(Einsum::matmul(&ad, &bd).unwrap()), &[a, b]).unwrap()[0];
    let xd = desc(&[("i", i), ("k", k)]);
    let y = comp.add_op("y", Box::new(Einsum::matmul(&xd, &cd).unwrap()), &[x, c]).unwrap()[0];
    comp.save(y).unwrap();
    let first = |r: usize| FunctionSpec {
        inputs: vec![tt(&[0, r * j / 2], &[i, (r + 1) * j / 2]), tt(&[r * j / 2, 0], &[(r + 1) * j / 2, k])],
        outputs: vec![tt(&[0, 0], &[i, k])],
    };
    let second = |r: usize| FunctionSpec {
        inputs: vec![tt(&[0, 0], &[i, k]), tt(&[0, r * l / 2], &[k, (r + 1) * l / 2])],
        outputs: vec![tt(&[0, r * l / 2], &[i, (r + 1) * l / 2])],
    };
    let specs = HashMap::from([
        (x.op, JoinAggSpec { functions: vec![first(0), first(1)] }),
        (y.op, JoinAggSpec { functions: vec![second(0), second(1)] }),
    ]);
    (comp, specs, (i, j, k, l))
}

/// `y = (a b) c` at p = 2: the first matmul split on its contracted index `j` (each device
/// holds a partial sum of all of `a b`), the second on the columns `l` of `c` (each device
/// needs all of `a b`). The exchange program between them is the paper's Example 5.1: swap
/// the partial sums, aggregate on both devices.
#[test]
fn example_5_1_between_two_matmuls_is_kernel_swap_sum_kernel() {
    let (comp, specs, (i, j, k, l)) = example_5_1();
    let compiled = compile(&comp, &specs, &options(2)).unwrap();
    let stats = compiled.graph.stats();
    assert_eq!(stats.tasks.get("transfer"), Some(&2), "{:?}", stats.tasks);
    assert_eq!(stats.tasks.get("aggregate"), Some(&2), "{:?}", stats.tasks);
    assert_eq!(stats.tasks.get("slice"), None, "{:?}", stats.tasks);

    let block = 2.0 * (i * k) as f64; // bytes of `a b`
    let first_kernel = matmul_seconds(i, j / 2, k);
    let swap = block / PORT; // both directions at once, each on its own ports
    let sum = 3.0 * block / (HBM * MEMORY); // read two partial sums, write one
    let second_kernel = matmul_seconds(i, k, l / 2);
    let want = first_kernel + swap + sum + second_kernel;
    assert!(close(compiled.predicted_ms, want * 1e3), "{} vs {}", compiled.predicted_ms, want * 1e3);

    // the program's own simulated time is the swap and the sum at the full HBM bandwidth
    assert_eq!(compiled.programs.len(), 1);
    let program_ms = (swap + 3.0 * block / HBM) * 1e3;
    assert!(close(compiled.programs[0].simulated_ms, program_ms), "{}", compiled.programs[0].simulated_ms);
}

/// `predict_ms` (what `compile` reports) is `predict`'s traced completion bit for bit, on a
/// machine with latencies and wave quantization (the DGX A100 preset) as on the fluid one,
/// and fails with the same labelled error.
#[test]
fn the_untraced_prediction_is_the_traced_one_bit_for_bit() {
    let (comp, specs, _) = example_5_1();
    for topology in [Topology::preset("dgx-a100").unwrap(), a100()] {
        let options = PhysicalOptions { topology: topology.clone(), ..options(2) };
        let c = compile(&comp, &specs, &options).unwrap();
        let traced = predict(&comp, &c.graph, &c.kernels, &topology, &Roofline::default()).unwrap().completion_ms();
        let alone = predict_ms(&comp, &c.graph, &c.kernels, &topology, &Roofline::default()).unwrap();
        assert_eq!(
            (alone.to_bits(), c.predicted_ms.to_bits()),
            (traced.to_bits(), traced.to_bits()),
            "{}",
            topology.name()
        );
    }
    let (comp, graph, calls) = two_kernels(1);
    let one_site = Topology::new("one", vec![a100().sites()[0]], vec![], None).unwrap();
    let traced = predict(&comp, &graph, &calls, &one_site, &Roofline::default()).unwrap_err();
    assert_eq!(predict_ms(&comp, &graph, &calls, &one_site, &Roofline::default()).unwrap_err(), traced);
}

/// Two independent matmuls of different sizes, by hand in a task graph on two devices:
/// `big` on device 0, `small` on device 0 or 1.
fn two_kernels(small_on: u32) -> (Computation, TaskGraph, Vec<KernelCall>) {
    let mut comp = Computation::new();
    let mut calls = Vec::new();
    let sizes = [("big", 1024, 0), ("small", 512, small_on)];
    let inputs = sizes
        .iter()
        .flat_map(|&(name, n, _)| {
            ["a", "b"].map(|x| Boundary { name: format!("{name}.{x}"), ty: tt(&[0, 0], &[n, n]), dtype: F16 })
        })
        .collect();
    let mut graph = TaskGraph::new(2, inputs, vec![]);
    for (name, n, dev) in sizes {
        let d = desc(&[("i", n), ("j", n)]);
        let a = comp.add_input(format!("{name}.a"), d.clone());
        let b = comp.add_input(format!("{name}.b"), desc(&[("j", n), ("k", n)]));
        let x = comp.add_op(name, Box::new(Einsum::matmul(&d, &desc(&[("j", n), ("k", n)])).unwrap()), &[a, b]);
        let whole = tt(&[0, 0], &[n, n]);
        calls.push(KernelCall {
            op: x.unwrap()[0].op,
            function: FunctionSpec { inputs: vec![whole.clone(), whole.clone()], outputs: vec![whole.clone()] },
        });
        let dev = DeviceId(dev);
        let ins: Vec<_> = (0..2).map(|_| graph.add_buffer(dev, whole.clone(), F16)).collect();
        let first = 2 * (calls.len() - 1);
        graph.push(Task::Load { input: first, dst: ins[0] }, &[], format!("load {name}.a")).unwrap();
        graph.push(Task::Load { input: first + 1, dst: ins[1] }, &[], format!("load {name}.b")).unwrap();
        let out = graph.add_buffer(dev, whole, F16);
        graph.push(Task::Kernel { kernel: calls.len() - 1, inputs: ins, outputs: vec![out] }, &[], name).unwrap();
    }
    (comp, graph, calls)
}

#[test]
fn independent_kernels_overlap_across_devices_and_add_up_on_one() {
    let (big, small) = (matmul_seconds(1024, 1024, 1024), matmul_seconds(512, 512, 512));
    let (comp, graph, calls) = two_kernels(1);
    let apart = predict(&comp, &graph, &calls, &a100(), &Roofline::default()).unwrap();
    assert!(close(apart.completion(), big.max(small)), "{} vs {}", apart.completion(), big.max(small));
    let (comp, graph, calls) = two_kernels(0);
    let together = predict(&comp, &graph, &calls, &a100(), &Roofline::default()).unwrap();
    assert!(close(together.completion(), big + small), "{} vs {}", together.completion(), big + small);
    // while both run on device 0 they share its compute: the small one ends at twice its time
    assert!(close(together.tasks()[5].end, 2.0 * small), "{}", together.tasks()[5].end);
}

#[test]
fn bad_kernel_tables_and_efficiencies_are_typed_errors() {
    let (comp, graph, calls) = two_kernels(1);
    let err = predict(&comp, &graph, &calls[..1], &a100(), &Roofline::default()).unwrap_err();
    assert!(matches!(&err, PredictError::UnknownKernel { kernel: 1, count: 1, label } if label == "small"), "{err}");
    let mut roofline = Roofline::default();
    roofline.matmul.compute = 0.0;
    let err = predict(&comp, &graph, &calls, &a100(), &roofline).unwrap_err();
    assert!(matches!(err, PredictError::Simulate(SimError::InvalidEfficiency { class: "matmul", .. })), "{err}");
    let one_site = Topology::new("one", vec![a100().sites()[0]], vec![], None).unwrap();
    let err = predict(&comp, &graph, &calls, &one_site, &Roofline::default()).unwrap_err();
    assert!(err.to_string().contains("site 1 is out of range"), "{err}");
}

#[test]
fn graphs_with_boundaries_predict_loads_and_stores_as_free() {
    // a saved input loaded and stored: nothing but markers
    let mut comp = Computation::new();
    let a = comp.add_input("a", desc(&[("i", 4)]));
    comp.save(a).unwrap();
    let specs = HashMap::new();
    let compiled = compile(&comp, &specs, &options(1)).unwrap();
    assert_eq!(compiled.predicted_ms, 0.0);
    let ty = tt(&[0], &[4]);
    let boundary = Boundary { name: "a".into(), ty: ty.clone(), dtype: F16 };
    assert_eq!(compiled.graph.inputs(), [boundary]);
}

/// A softmax aggregation (the key split's ⊕, row-wise over partials that carry their
/// statistics column) is charged as an elementwise kernel of its FLOPs (exponentials and a
/// logarithm per row) and its bytes, never less than the same bytes merged as a sum.
#[test]
fn a_softmax_aggregation_is_charged_its_flops_and_bytes() {
    use einsum_core::Aggregation;
    use einsum_sim::{KernelClass, KernelWork, Precision, SiteId, TaskKind};
    let ty = tt(&[0, 0], &[1 << 20, 2]);
    let io = |name: &str| Boundary { name: name.into(), ty: ty.clone(), dtype: F16 };
    let mut g = TaskGraph::new(1, vec![io("a"), io("b")], vec![io("y")]);
    let srcs: Vec<_> = (0..2)
        .map(|i| {
            let b = g.add_buffer(DeviceId(0), ty.clone(), F16);
            g.push(Task::Load { input: i, dst: b }, &[], "load").unwrap();
            b
        })
        .collect();
    let dst = g.add_buffer(DeviceId(0), ty.clone(), F16);
    g.push(Task::Aggregate { srcs, dst, agg: Aggregation::Softmax }, &[], "merge").unwrap();
    g.push(Task::Store { output: 0, src: dst }, &[], "store").unwrap();
    let (topology, roofline) = (a100(), Roofline::default());
    let tasks = einsum_compile::simulator_tasks(&Computation::new(), &g, &[], &topology, &roofline).unwrap();
    let TaskKind::Compute { site, seconds } = tasks[2].kind else { panic!("{:?}", tasks[2].kind) };
    assert_eq!(site, SiteId(0));
    let work = |flops: f64| KernelWork {
        class: KernelClass::Elementwise,
        flops,
        bytes: 3.0 * 2.0 * ty.volume() as f64,
        output_elements: ty.volume() as f64,
        precision: Precision::F16,
    };
    let s = topology.site(SiteId(0)).unwrap();
    assert_eq!(seconds, roofline.kernel_seconds(s, &work(Aggregation::Softmax.flops(2, &ty))));
    assert!(seconds >= roofline.kernel_seconds(s, &work(Aggregation::Sum.flops(2, &ty))));
    assert!(Aggregation::Softmax.flops(2, &ty) > 10.0 * Aggregation::Sum.flops(2, &ty));
}

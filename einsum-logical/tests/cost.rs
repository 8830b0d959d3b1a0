//! Which join, aggregation and repartition the cost models charge: the paper's proxy charges
//! every input's join, the `time` model only that of operator-produced inputs (computation
//! inputs are loaded in each function spec's layout before the run), and of those only the
//! copies beyond the first; its aggregations are reduce-scatters, its repartitions move what
//! two tilings differ by, and traffic between nodes goes over the NICs.

use einsum_core::{DType, TensorDesc};
use einsum_joinagg::{Computation, enumerate_specs};
use einsum_logical::{CostModel, Machine, PaperProxy, Problem, Source, Time};
use einsum_ops::einsum::Einsum;
use einsum_ops::unary::{Unary, UnaryOp};

fn desc(dims: &[(&str, usize)]) -> TensorDesc {
    TensorDesc::of(dims, DType::F32).unwrap()
}

/// `y = relu(x) · w`: the matmul's first input is produced by an operator, its second (the
/// weight) is a computation input.
fn relu_then_matmul() -> Computation {
    let (xd, wd) = (desc(&[("t", 16), ("d", 8)]), desc(&[("d", 8), ("f", 12)]));
    let mut comp = Computation::new();
    let x = comp.add_input("x", xd.clone());
    let w = comp.add_input("w", wd.clone());
    let h = comp.add_op("relu", Box::new(Unary::new(&xd, UnaryOp::Relu).unwrap()), &[x]).unwrap()[0];
    let y = comp.add_op("matmul", Box::new(Einsum::matmul(&xd, &wd).unwrap()), &[h, w]).unwrap()[0];
    comp.save(y).unwrap();
    comp
}

/// A machine's figures without latencies, SM count or HBM time: the bandwidth terms these
/// tests compute by hand (the unit tests of `cost.rs` cover the latency and wave terms).
fn fluid(name: &str) -> Machine {
    let machine = Machine::by_name(name).unwrap();
    Machine {
        sms: None,
        kernel_launch: 0.0,
        node_latency: 0.0,
        network_latency: 0.0,
        hbm_bandwidth: f64::INFINITY,
        ..machine
    }
}

fn a100() -> Machine {
    fluid("dgx-a100")
}

fn time() -> Time {
    Time::on(a100())
}

/// Bytes of input `k`'s blocks summed over the function specs of candidate `n`.
fn join_bytes(problem: &Problem, c: usize, n: usize, k: usize) -> f64 {
    problem.ops[c].candidates[n].spec.functions.iter().map(|f| f.inputs[k].volume() as f64 * 4.0).sum()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-12 * a.abs().max(b.abs())
}

#[test]
fn time_charges_no_join_for_a_resident_weight_and_the_proxy_does() {
    let comp = relu_then_matmul();
    let p = 4;
    let bandwidth = a100().node_bandwidth;
    let time = Problem::new(&comp, p, &time()).unwrap();
    let proxy = Problem::new(&comp, p, &PaperProxy).unwrap();
    let mm = time.ops.iter().position(|o| o.name == "matmul").unwrap();
    assert_eq!(time.ops[mm].sources[0], Source::Op { op: 0, output: 0 });
    assert_eq!(time.ops[mm].sources[1], Source::Input { input: 1 });
    assert!(time.ops[mm].candidates.len() > 1);
    let mut replicated = 0;
    for (n, cand) in time.ops[mm].candidates.iter().enumerate() {
        let (produced, weight) = (join_bytes(&time, mm, n, 0), join_bytes(&time, mm, n, 1));
        // Time: only the produced input's blocks travel, and only the copies beyond the one
        // the producer holds (its distinct blocks tile the 16×8 f32 tensor exactly once).
        let beyond = produced - 16.0 * 8.0 * 4.0;
        assert!(close(cand.cost.join, beyond / (p as f64 * bandwidth)), "{:?}: {}", cand.counts, cand.cost.join);
        // Proxy: both inputs, in elements, as the paper defines sub-cost (2).
        let proxied = &proxy.ops[mm].candidates[n];
        assert_eq!(proxied.counts, cand.counts);
        assert!(close(proxied.cost.join, (produced + weight) / 4.0), "{:?}: {}", cand.counts, proxied.cost.join);
        // The weight's blocks are non-empty in every spec, so the two models really differ.
        assert!(weight > 0.0);
        replicated += usize::from(weight > 8.0 * 12.0 * 4.0);
    }
    // Some spec replicates the weight (e.g. splitting `t`), the case the fix is about.
    assert!(replicated > 0);
}

#[test]
fn time_still_charges_the_join_of_produced_inputs() {
    let comp = relu_then_matmul();
    let problem = Problem::new(&comp, 4, &time()).unwrap();
    let mm = problem.ops.iter().position(|o| o.name == "matmul").unwrap();
    // Charged exactly when some block of the produced input is read by several specs.
    for (n, cand) in problem.ops[mm].candidates.iter().enumerate() {
        let replicated = join_bytes(&problem, mm, n, 0) > 16.0 * 8.0 * 4.0;
        assert_eq!(cand.cost.join > 0.0, replicated, "{:?}: {}", cand.counts, cand.cost.join);
    }
    assert!(problem.ops[mm].candidates.iter().any(|c| c.cost.join > 0.0));
    // The relu reads only a computation input: no join under time, some under the proxy.
    let relu = problem.ops.iter().position(|o| o.name == "relu").unwrap();
    assert!(problem.ops[relu].candidates.iter().all(|c| c.cost.join == 0.0));
    let proxy = Problem::new(&comp, 4, &PaperProxy).unwrap();
    assert!(proxy.ops[relu].candidates.iter().all(|c| c.cost.join == 16.0 * 8.0));
    // Evaluate and total agree with the per-candidate prices.
    let choice = vec![0; problem.ops.len()];
    let costs = problem.evaluate(&choice).unwrap();
    assert_eq!(costs[mm].join, problem.ops[mm].candidates[0].cost.join);
    let total: f64 = costs.iter().map(|c| c.total()).sum();
    assert!(close(problem.total(&choice).unwrap(), total));
}

#[test]
fn a_model_charges_an_input_it_has_no_source_for() {
    let comp = relu_then_matmul();
    let (_, op, _) = comp.ops().find(|(_, op, _)| op.kind() == "matmul").unwrap();
    // A spec that replicates the weight (split `t`): its extra copies are charged only when
    // the model is not told the weight is resident.
    let specs = enumerate_specs(op, 2).unwrap();
    let spec = &specs
        .iter()
        .find(|c| c.spec.functions.iter().map(|f| f.inputs[1].volume()).sum::<usize>() > 8 * 12)
        .unwrap()
        .spec;
    let time = time();
    let both = time.spec(op, spec, 2, &[false, false]);
    let unknown = time.spec(op, spec, 2, &[]);
    let weight = time.spec(op, spec, 2, &[false, true]);
    assert_eq!(unknown.join, both.join);
    assert!(weight.join < both.join);
    assert_eq!((weight.aggregation, weight.compute), (both.aggregation, both.compute));
}

/// `h = x·w1` (`i`=16, `j`=8, `k`=12), then `y = h·w2` (`l`=4), f32: a chain of two matmuls
/// whose second reads the first's output.
fn two_matmuls() -> Computation {
    let (xd, w1d, w2d) = (desc(&[("i", 16), ("j", 8)]), desc(&[("j", 8), ("k", 12)]), desc(&[("k", 12), ("l", 4)]));
    let hd = desc(&[("i", 16), ("k", 12)]);
    let mut comp = Computation::new();
    let x = comp.add_input("x", xd.clone());
    let w1 = comp.add_input("w1", w1d.clone());
    let w2 = comp.add_input("w2", w2d.clone());
    let h = comp.add_op("mm1", Box::new(Einsum::matmul(&xd, &w1d).unwrap()), &[x, w1]).unwrap()[0];
    let y = comp.add_op("mm2", Box::new(Einsum::matmul(&hd, &w2d).unwrap()), &[h, w2]).unwrap()[0];
    comp.save(y).unwrap();
    comp
}

/// The candidate of operator `op` splitting its indices `(name, parts)` (the rest whole).
fn candidate(problem: &Problem, op: usize, splits: &[(&str, usize)]) -> usize {
    let o = &problem.ops[op];
    let mut counts = vec![1; o.shardable.len()];
    for &(name, parts) in splits {
        counts[o.index_of(name).unwrap()] = parts;
    }
    o.find(&counts).unwrap_or_else(|| panic!("no candidate {counts:?} among {:?}", o.shardable))
}

#[test]
fn time_joins_only_the_copies_beyond_the_first() {
    let comp = two_matmuls();
    let p = 4;
    let bw = a100().node_bandwidth;
    let problem = Problem::new(&comp, p, &time()).unwrap();
    let mm2 = problem.ops.iter().position(|o| o.name == "mm2").unwrap();
    // l split 4 ways: every spec reads the whole 16×12 h, one copy exists, three more travel:
    // 3 · 192 elements · 4 bytes over the 4 devices' links.
    let by_l = &problem.ops[mm2].candidates[candidate(&problem, mm2, &[("l", 4)])];
    assert!(close(by_l.cost.join, 3.0 * 192.0 * 4.0 / (4.0 * bw)), "{}", by_l.cost.join);
    // i split 4 ways or i and k 2 ways each: every block of h is read once, nothing beyond
    // the producer's copy travels (the proxy still counts all 192 elements).
    for splits in [&[("i", 4)][..], &[("i", 2), ("k", 2)]] {
        let n = candidate(&problem, mm2, splits);
        assert_eq!(problem.ops[mm2].candidates[n].cost.join, 0.0, "{splits:?}");
        let proxy = Problem::new(&comp, p, &PaperProxy).unwrap();
        assert_eq!(proxy.ops[mm2].candidates[n].cost.join, 192.0 + join_bytes(&problem, mm2, n, 1) / 4.0);
    }
    // i split 2 ways, l 2 ways: each 8×12 half of h is read twice, one extra copy each.
    let n = candidate(&problem, mm2, &[("i", 2), ("l", 2)]);
    assert!(close(problem.ops[mm2].candidates[n].cost.join, 2.0 * 96.0 * 4.0 / (4.0 * bw)));
}

#[test]
fn time_aggregates_by_reduce_scatter() {
    let comp = two_matmuls();
    let bw = a100().node_bandwidth;
    for p in [2, 4] {
        let problem = Problem::new(&comp, p, &time()).unwrap();
        let proxy = Problem::new(&comp, p, &PaperProxy).unwrap();
        let mm2 = problem.ops.iter().position(|o| o.name == "mm2").unwrap();
        // k split p ways: the 16×4 output (64 elements, 256 bytes) is produced p times, and
        // each of the p producers receives (p - 1)/p of it to sum its slice.
        let n = candidate(&problem, mm2, &[("k", p)]);
        let got = problem.ops[mm2].candidates[n].cost.aggregation;
        let want = (p as f64 - 1.0) / p as f64 * 256.0 / bw;
        assert!(close(got, want), "p={p}: {got} vs {want}");
        // The proxy keeps the paper's Σ (m - 1)·|box|.
        assert_eq!(proxy.ops[mm2].candidates[n].cost.aggregation, (p as f64 - 1.0) * 64.0);
    }
    // i and k split 2 ways at p = 4: two 8×4 boxes (128 bytes) made twice each, in parallel.
    let problem = Problem::new(&comp, 4, &time()).unwrap();
    let mm2 = problem.ops.iter().position(|o| o.name == "mm2").unwrap();
    let n = candidate(&problem, mm2, &[("i", 2), ("k", 2)]);
    assert!(close(problem.ops[mm2].candidates[n].cost.aggregation, 64.0 / bw));
    // No split of k: nothing to aggregate.
    let n = candidate(&problem, mm2, &[("i", 4)]);
    assert_eq!(problem.ops[mm2].candidates[n].cost.aggregation, 0.0);
}

/// On two nodes of eight, a box made 16 times is reduced inside each node over NVLink and
/// between the two over all eight NICs of a node; made 8 times, it stays inside one node.
#[test]
fn time_sends_only_what_crosses_nodes_over_the_nics() {
    let comp = two_matmuls();
    let machine = fluid("dgx-a100x2");
    let (node, nic) = (machine.node_bandwidth, machine.network_bandwidth);
    assert!(node > 5.0 * nic, "{machine:?}");
    let time = Time::on(machine);
    let (_, mm2, _) =
        comp.ops().find(|(_, op, _)| op.kind() == "matmul" && op.inputs()[1].dims[1].name == "l").unwrap();
    let specs = enumerate_specs(mm2, 16).unwrap();
    let spec = |counts: &[usize]| &specs.iter().find(|c| c.counts == counts).unwrap().spec;
    let order: Vec<String> = mm2.shardable().into_iter().map(|s| s.name).collect();
    let counts = |splits: &[(&str, usize)]| -> Vec<usize> {
        order.iter().map(|n| splits.iter().find(|s| s.0 == n).map_or(1, |s| s.1)).collect()
    };
    // k split 16 ways... but k has 12 elements; split i 2 ways and k 8 ways instead: 8
    // partials per box, one node's worth. Two 8×4 boxes of 128 bytes.
    let inside = time.spec(mm2, spec(&counts(&[("i", 2), ("k", 8)])), 16, &[false, true]);
    assert!(close(inside.aggregation, (7.0 / 8.0 * 128.0 / node).max(7.0 * 256.0 / (16.0 * node))));
    // i split 16 ways and h read by nobody else: no aggregation, no join.
    let rows = time.spec(mm2, spec(&counts(&[("i", 16)])), 16, &[false, true]);
    assert_eq!((rows.join, rows.aggregation), (0.0, 0.0));
    // l split 4 and i 4 ways: each of the four 4×12 row blocks of h (192 bytes) is read by
    // four specs, which fit in one node: nothing crosses.
    let copies = time.spec(mm2, spec(&counts(&[("i", 4), ("l", 4)])), 16, &[false, true]);
    assert!(close(copies.join, 4.0 * 3.0 * 192.0 / (16.0 * node)), "{}", copies.join);
}

/// A repartition prices what the two tilings differ by: halving the row blocks gathers two
/// pieces per block, turning rows into columns moves three quarters of everything, and the
/// same tiling moves nothing.
#[test]
fn time_repartitions_by_the_tilings() {
    use einsum_core::TensorType;
    let time = time();
    let bw = a100().node_bandwidth;
    let d = desc(&[("i", 8), ("j", 8)]);
    let block = |lo: [usize; 2], hi: [usize; 2]| TensorType::new(&lo, &hi).unwrap();
    let rows = |n: usize| (0..n).map(|r| block([r * 8 / n, 0], [(r + 1) * 8 / n, 8])).collect::<Vec<_>>();
    let cols: Vec<_> = (0..4).map(|c| block([0, 2 * c], [8, 2 * c + 2])).collect();
    // 8 → 4 row blocks: each 64-byte target block holds one 32-byte piece and receives one.
    assert!(close(time.repartition_between(&d, &rows(8), &rows(4), 8), 4.0 * 32.0 / (8.0 * bw)));
    // 4 row blocks → 4 column blocks: each 64-byte target keeps 16 bytes and receives 48.
    assert!(close(time.repartition_between(&d, &rows(4), &cols, 4), 4.0 * 48.0 / (4.0 * bw)));
    assert_eq!(time.repartition_between(&d, &rows(4), &rows(4), 4), 0.0);
}

//! The figures of the paper's Examples 5.1–5.3 (Section 5.2), reproduced within 3%.
//!
//! Atoms are 1 GB. An action `X @ s -> D` is an aggregation at `s` (only when `X` has at
//! least two pieces: read every piece, write the result) followed by its transfers; a
//! local action `X @ s` is just the aggregation.

use einsum_sim::{GB, LinkService, PCIE_BRIDGE, SimGraph, SimTask, SimTaskId, SiteId, Topology, Trace};
use einsum_sim::{all_gather_bound, all_reduce_bound, all_to_all_bound, broadcast_bound, reduce_scatter_bound};

/// The preset `name` without latencies or SM counts: the paper's examples and the presets' figures
/// are the fluid model's (`tests/latency.rs` covers the latencies). The presets serve each
/// ordered pair's transfers in issue order ([`LinkService::Fifo`]); the examples are the same
/// under max-min sharing ([`the_examples_are_the_same_under_both_link_services`]).
fn fluid(name: &str) -> Topology {
    Topology::preset(name).expect("preset").fluid()
}

fn s(i: usize) -> SiteId {
    SiteId(i)
}

/// An aggregation of `pieces` 1 GB pieces into a 1 GB result at `site`.
fn aggregate(label: &str, site: usize, pieces: usize) -> SimTask {
    SimTask::aggregate(label, s(site), pieces as f64 * GB, GB)
}

fn within(actual: f64, expected: f64, tolerance: f64) -> bool {
    (actual - expected).abs() <= tolerance * expected
}

fn assert_ms(what: &str, actual_s: f64, expected_ms: f64) {
    let ms = actual_s * 1e3;
    assert!(within(ms, expected_ms, 0.03), "{what}: simulated {ms:.3} ms, the paper says about {expected_ms} ms");
}

/// Example 5.1: the swap of two atoms and the aggregation at both ends.
fn swap() -> SimGraph {
    let mut g = SimGraph::new();
    let a = g.push(SimTask::transfer("A @ 0 -> 1", s(0), s(1), GB));
    let b = g.push(SimTask::transfer("B @ 1 -> 0", s(1), s(0), GB));
    g.push(aggregate("A+B @ 0", 0, 2).after([b]));
    g.push(aggregate("A+B @ 1", 1, 2).after([a]));
    g
}

#[test]
fn example_5_1_peer_to_peer_swap_on_dgx_h100() {
    let h100 = fluid("dgx-h100");
    let (a, b, at0, at1) = (SimTaskId(0), SimTaskId(1), SimTaskId(2), SimTaskId(3));
    let trace = swap().simulate(&h100).expect("simulate");

    assert_ms("Example 5.1 completion", trace.completion(), 3.1);
    assert_ms("Example 5.1 transfers", trace.transfer_time(), 2.2);
    // exactly: 1 GB at 450 GB/s, then 3 GB through 3350 GB/s of HBM
    let expected = GB / (450.0 * GB) + 3.0 * GB / (3350.0 * GB);
    assert!(within(trace.completion(), expected, 1e-12));
    // the two transfers overlap completely, so they count once
    assert_eq!(trace.task(a).map(|t| t.end), trace.task(b).map(|t| t.end));
    assert!(within(trace.transfer_time(), GB / (450.0 * GB), 1e-12));
    for agg in [at0, at1] {
        let t = trace.task(agg).expect("task");
        assert!(within(t.start, trace.transfer_time(), 1e-12), "aggregations wait for their transfer");
    }
}

/// Example 5.2: recursive doubling over four GPUs of `topology`; returns the trace.
fn recursive_doubling(topology: &Topology) -> Trace {
    let mut g = SimGraph::new();
    let atom = ["A", "B", "C", "D"];
    // round 1: swaps 0<->1 and 2<->3
    let swap: Vec<SimTaskId> = (0..4)
        .map(|i| g.push(SimTask::transfer(format!("{} @ {i} -> {}", atom[i], i ^ 1), s(i), s(i ^ 1), GB)))
        .collect();
    // round 2: every site aggregates its pair's two atoms and sends the partial to site i^2
    let pair = |i: usize| if i < 2 { "A+B" } else { "C+D" };
    let mut partial = Vec::new();
    let mut send = Vec::new();
    for i in 0..4 {
        let agg = g.push(aggregate(&format!("{} @ {i}", pair(i)), i, 2).after([swap[i ^ 1]]));
        partial.push(agg);
        send.push(
            g.push(SimTask::transfer(format!("{} @ {i} -> {}", pair(i), i ^ 2), s(i), s(i ^ 2), GB).after([agg])),
        );
    }
    // the final aggregation combines the local partial and the one received
    for i in 0..4 {
        g.push(aggregate(&format!("A+B+C+D @ {i}"), i, 2).after([partial[i], send[i ^ 2]]));
    }
    g.simulate(topology).expect("simulate")
}

#[test]
fn example_5_2_recursive_doubling_on_dgx_h100() {
    let h100 = fluid("dgx-h100");
    let trace = recursive_doubling(&h100);
    assert_ms("Example 5.2 completion", trace.completion(), 6.2);
    let expected = 2.0 * (GB / (450.0 * GB) + 3.0 * GB / (3350.0 * GB));
    assert!(within(trace.completion(), expected, 1e-12));
}

/// Example 5.3's shape on the DGX-V100: swaps within pairs (0,1), (2,3), (4,5), (6,7),
/// 2-piece aggregations, then every site sends its pair's partial to `partner(site)`, and
/// final 2-piece aggregations. Every group {0,1,4,5} and {2,3,6,7} ends with its total.
fn pairs_then_partners(topology: &Topology, partner: impl Fn(usize) -> usize) -> Trace {
    let atom = ["A", "B", "C", "D", "E", "F", "G", "H"];
    let pair = ["A+B", "A+B", "C+D", "C+D", "E+F", "E+F", "G+H", "G+H"];
    let total = ["A+B+E+F", "A+B+E+F", "C+D+G+H", "C+D+G+H", "A+B+E+F", "A+B+E+F", "C+D+G+H", "C+D+G+H"];
    let mut g = SimGraph::new();
    let swap: Vec<SimTaskId> = (0..8)
        .map(|i| g.push(SimTask::transfer(format!("{} @ {i} -> {}", atom[i], i ^ 1), s(i), s(i ^ 1), GB)))
        .collect();
    let mut partial = Vec::new();
    let mut send = [SimTaskId(usize::MAX); 8];
    for i in 0..8 {
        let agg = g.push(aggregate(&format!("{} @ {i}", pair[i]), i, 2).after([swap[i ^ 1]]));
        partial.push(agg);
        let p = partner(i);
        send[p] = g.push(SimTask::transfer(format!("{} @ {i} -> {p}", pair[i]), s(i), s(p), GB).after([agg]));
    }
    for i in 0..8 {
        g.push(aggregate(&format!("{} @ {i}", total[i]), i, 2).after([partial[i], send[i]]));
    }
    g.simulate(topology).expect("simulate")
}

#[test]
fn example_5_3_topology_aware_placement_on_dgx_v100() {
    let v100 = fluid("dgx-v100");
    // G1 = {0,1,4,5}, G2 = {2,3,6,7}: partners across the sockets 0<->4, 1<->5, 2<->6, 3<->7
    let trace = pairs_then_partners(&v100, |i| i ^ 4);
    assert_ms("Example 5.3 completion", trace.completion(), 67.0);
    assert_eq!(trace.bytes_through(PCIE_BRIDGE), 0.0, "no transfer may use the PCIe bridge");
    // On the real DGX-1V map, (0,1) and (4,5) swap over 25 GB/s single links and cross over
    // 50 GB/s double links; (2,3) and (6,7) are the other way round: 40 + 20 ms of transfers
    // and two 3 GB aggregations at 900 GB/s on every site.
    let expected = GB / (25.0 * GB) + GB / (50.0 * GB) + 2.0 * 3.0 * GB / (900.0 * GB);
    assert!(within(trace.completion(), expected, 1e-12), "{}", trace);
    let nvlink_bytes: f64 =
        trace.resource_usage().iter().filter(|u| u.name.starts_with("link ")).map(|u| u.bytes).sum();
    assert!(within(nvlink_bytes, 16.0 * GB, 1e-12));
}

#[test]
fn example_5_3_placement_through_the_bridge_is_slower() {
    let v100 = fluid("dgx-v100");
    let good = pairs_then_partners(&v100, |i| i ^ 4);
    // Same groups, but each site's partner is an unlinked site of its group's other pair:
    // 0<->5, 1<->4, 2<->7, 3<->6 all go through the one 15.75 GB/s bridge.
    let bad = pairs_then_partners(&v100, |i| i ^ 5);
    for i in 0..8 {
        assert!(!v100.linked(s(i), s(i ^ 5)), "{i} and {} must be unlinked", i ^ 5);
    }
    assert!(within(bad.bytes_through(PCIE_BRIDGE), 8.0 * GB, 1e-12));
    assert!(
        bad.completion() > 5.0 * good.completion(),
        "bridge {} ms vs {} ms",
        bad.completion_ms(),
        good.completion_ms()
    );
    // The bridge is busy from the moment the first partials (of the pairs that swapped over
    // double links, after 20 ms + one aggregation) leave until all 8 GB have crossed it at
    // 15.75 GB/s; then the last aggregation.
    let expected = GB / (50.0 * GB) + 8.0 * GB / (15.75 * GB) + 2.0 * 3.0 * GB / (900.0 * GB);
    assert!(within(bad.completion(), expected, 1e-9), "{}", bad);
}

#[test]
fn multicast_divides_the_source_egress_on_nvswitch() {
    let h100 = fluid("dgx-h100");
    let mut g = SimGraph::new();
    let m = g.push(SimTask::multicast("A @ 0 -> 1, 2, 3", s(0), vec![s(1), s(2), s(3)], GB));
    let trace = g.simulate(&h100).expect("simulate");
    let t = trace.task(m).expect("task");
    assert!(within(t.end, 3.0 * GB / (450.0 * GB), 1e-12));
    assert_eq!(t.deliveries.len(), 3);
    assert!(t.deliveries.iter().all(|&(_, at)| at == t.end));
    // on the V100 the sub-flows use separate links: 0->3 and 0->4 double, 0->1 single
    let v100 = fluid("dgx-v100");
    let mut g = SimGraph::new();
    g.push(SimTask::multicast("A @ 0 -> 1, 3, 4", s(0), vec![s(1), s(3), s(4)], GB));
    let trace = g.simulate(&v100).expect("simulate");
    let t = &trace.tasks()[0];
    assert_eq!(t.deliveries, [(s(1), 0.04), (s(3), 0.02), (s(4), 0.02)]);
}

#[test]
fn lower_bounds_from_design() {
    let (bytes, n, bw) = (8.0 * GB, 8, 300.0 * GB);
    assert!(within(all_reduce_bound(bytes, n, bw), 2.0 * 7.0 / 8.0 * bytes / bw, 1e-15));
    assert!(within(reduce_scatter_bound(bytes, n, bw), 7.0 / 8.0 * bytes / bw, 1e-15));
    assert!(within(all_gather_bound(bytes, n, bw), 7.0 / 8.0 * bytes / bw, 1e-15));
    assert!(within(all_to_all_bound(bytes, n, bw), 7.0 / 8.0 * bytes / bw, 1e-15));
    assert!(within(broadcast_bound(bytes, n, bw), bytes / bw, 1e-15));
    // a ring-free broadcast by multicast from one source meets neither more nor less than
    // its egress allows: n-1 copies through one 450 GB/s port
    let h100 = fluid("dgx-h100");
    let mut g = SimGraph::new();
    g.push(SimTask::multicast("bcast", s(0), (1..8).map(s).collect(), GB));
    let trace = g.simulate(&h100).expect("simulate");
    assert!(trace.completion() >= broadcast_bound(GB, 8, 450.0 * GB));
    assert!(within(trace.completion(), 7.0 * GB / (450.0 * GB), 1e-12));
}

/// The paper's examples put at most one transfer on each ordered pair at a time, so the
/// presets' FIFO service gives them exactly the max-min figures: every task's start and end,
/// bit for bit, under both services.
/// An example's graph, simulated on a topology.
type Example<'a> = &'a dyn Fn(&Topology) -> Trace;

#[test]
fn the_examples_are_the_same_under_both_link_services() {
    let run = |name: &str, f: Example| -> [Vec<(u64, u64)>; 2] {
        LinkService::ALL.map(|service| {
            let t = fluid(name).with_service(service);
            assert_eq!(t.service(), service);
            f(&t).tasks().iter().map(|task| (task.start.to_bits(), task.end.to_bits())).collect()
        })
    };
    let cases: [(&str, Example); 4] = [
        ("dgx-h100", &|t| swap().simulate(t).expect("simulate")),
        ("dgx-h100", &|t| recursive_doubling(t)),
        ("dgx-v100", &|t| pairs_then_partners(t, |i| i ^ 4)),
        ("dgx-v100", &|t| pairs_then_partners(t, |i| i ^ 5)),
    ];
    for (i, (name, f)) in cases.into_iter().enumerate() {
        let [fair, fifo] = run(name, f);
        assert!(!fair.is_empty());
        assert_eq!(fair, fifo, "case {i} on {name}");
    }
    assert_eq!(fluid("dgx-v100").service(), LinkService::Fifo);
}

//! Simulating the programs of Section 5 (checked in under `examples/`) reproduces the
//! paper's figures within 3%: lowering to the simulator's task DAG, membership choice, and
//! the per-action times.

use std::collections::BTreeSet;
use std::path::Path;

use einsum_exprog::{PartitionId, Program, Simulation, SiteId, load, simulate, simulate_with};
use einsum_sim::{GB, PCIE_BRIDGE, TaskKind, Topology};

fn example(name: &str) -> Program {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples").join(name);
    let src = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    load(&src).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The preset as the pure fluid model (no latencies): the paper's figures and the exact
/// sums below are that model's (`einsum-sim/tests/latency.rs` covers the latencies).
fn topology(name: &str) -> Topology {
    Topology::preset(name).unwrap().fluid()
}

fn assert_about(what: &str, actual_ms: f64, paper_ms: f64) {
    assert!(
        (actual_ms - paper_ms).abs() <= 0.03 * paper_ms,
        "{what}: simulated {actual_ms:.3} ms, the paper says about {paper_ms} ms"
    );
}

fn assert_exact(what: &str, actual_ms: f64, expected_s: f64) {
    assert!(
        (actual_ms - expected_s * 1e3).abs() <= 1e-9 * actual_ms,
        "{what}: {actual_ms} ms vs {} ms",
        expected_s * 1e3
    );
}

fn sites(s: &[usize]) -> BTreeSet<SiteId> {
    s.iter().map(|&i| SiteId(i)).collect()
}

fn part(name: &str) -> PartitionId {
    PartitionId::new(name).unwrap()
}

/// The firing of `action` (as printed, with its site) in `s`.
fn firing<'a>(s: &'a Simulation, action: &str, site: usize) -> &'a einsum_exprog::ActionTime {
    s.actions
        .iter()
        .find(|a| a.action.to_string() == action && a.site == SiteId(site))
        .unwrap_or_else(|| panic!("no firing of {action} at {site}"))
}

#[test]
fn example_5_1_swap_on_dgx_h100() {
    let s = simulate(&example("example_5_1_swap.exprog"), &topology("dgx-h100")).unwrap();
    assert!(s.valid && s.invalid.is_none());
    assert_about("completion", s.completion_ms, 3.1);
    assert_about("transfers", s.transfer_ms, 2.2);
    // 1 GB at 450 GB/s, then read 2 GB and write 1 GB through 3350 GB/s of HBM
    assert_exact("completion", s.completion_ms, 1.0 / 450.0 + 3.0 / 3350.0);
    assert_eq!(s.actions.len(), 4);
    let send = firing(&s, "A @ 0 -> 1", 0);
    assert_eq!(send.aggregate, None, "A is at 0 from the start: nothing to aggregate");
    let t = send.transfer.unwrap();
    assert_eq!(t.start_ms, 0.0);
    let local = firing(&s, "A+B @ 0", 0);
    assert_eq!(local.transfer, None);
    let agg = local.aggregate.unwrap();
    assert!((agg.start_ms - t.end_ms).abs() < 1e-12, "the aggregation waits for B to arrive");
    // the lowering: two transfers, two aggregations reading both pieces
    let tasks = s.lowering.graph.tasks();
    assert_eq!(tasks.len(), 4);
    let reads: Vec<f64> = tasks
        .iter()
        .filter_map(|t| match t.kind {
            TaskKind::Aggregate { read_bytes, write_bytes, .. } => Some(read_bytes + write_bytes),
            _ => None,
        })
        .collect();
    assert_eq!(reads, vec![3.0 * GB, 3.0 * GB]);
}

#[test]
fn example_5_2_recursive_doubling_on_dgx_h100() {
    let s = simulate(&example("example_5_2_recursive_doubling.exprog"), &topology("dgx-h100")).unwrap();
    assert!(s.valid);
    assert_about("completion", s.completion_ms, 6.2);
    assert_exact("completion", s.completion_ms, 2.0 * (1.0 / 450.0 + 3.0 / 3350.0));
    // the second round aggregates before sending; the last round aggregates the partials
    let second = firing(&s, "A+B @ 0 -> 2", 0);
    assert!(second.aggregate.is_some() && second.transfer.is_some());
    assert_eq!(firing(&s, "A+B+C+D @ 3", 3).round, 3);
}

#[test]
fn example_5_3_placement_on_dgx_v100() {
    let p = example("example_5_3_v100_placement.exprog");
    let s = simulate(&p, &topology("dgx-v100")).unwrap();
    assert!(s.valid);
    assert_about("completion", s.completion_ms, 67.0);
    assert_exact("completion", s.completion_ms, 1.0 / 25.0 + 1.0 / 50.0 + 2.0 * 3.0 / 900.0);
    assert_eq!(s.membership.sites(&part("G1")), Some(&sites(&[0, 1, 4, 5])));
    assert_eq!(s.membership.sites(&part("G2")), Some(&sites(&[2, 3, 6, 7])));
    assert_eq!(s.trace.bytes_through(PCIE_BRIDGE), 0.0, "no transfer may use the PCIe bridge");
    // `A+B+E+F @ G1` fires at each member of G1
    let finals: BTreeSet<SiteId> =
        s.actions.iter().filter(|a| a.action.to_string() == "A+B+E+F @ G1").map(|a| a.site).collect();
    assert_eq!(finals, sites(&[0, 1, 4, 5]));
    // the same program with the placement written out costs the same
    let explicit = simulate(&example("explicit_partitions.exprog"), &topology("dgx-v100")).unwrap();
    assert_eq!(explicit.completion_ms, s.completion_ms);
    assert_eq!(simulate_with(&p, &s.membership, &topology("dgx-v100")).unwrap().completion_ms, s.completion_ms);
}

#[test]
fn example_5_3_on_the_nvswitch_machines() {
    // Same program, no bridge: both rounds at the endpoint rate.
    let s = simulate(&example("example_5_3_v100_placement.exprog"), &topology("dgx-a100")).unwrap();
    assert_exact("completion", s.completion_ms, 2.0 * (1.0 / 300.0 + 3.0 / 1555.0));
}

#[test]
fn a_multicast_shares_its_source_egress() {
    let p: Program = "IN: A @ 0\nOUT: A @ 1, 2, 3\nA @ 0 -> 1, 2, 3".parse().unwrap();
    let s = simulate(&p, &topology("dgx-h100")).unwrap();
    assert_exact("multicast", s.completion_ms, 3.0 / 450.0);
    assert_eq!(s.lowering.graph.len(), 3, "one transfer per destination, started together");
    // fission into three transfers costs the same on the switch
    let p: Program = "IN: A @ 0\nOUT: A @ 1, 2, 3\nA @ 0 -> 1; A @ 0 -> 2; A @ 0 -> 3".parse().unwrap();
    assert_exact("fission", simulate(&p, &topology("dgx-h100")).unwrap().completion_ms, 3.0 / 450.0);
}

#[test]
fn sizes_come_from_in() {
    // A 0.5 GB pair: the transfer and the aggregation both halve.
    let p: Program =
        "IN: A @ 0 (size: 0.5 GB); B @ 1 (size: 500 MB)\nOUT: A+B @ 1\nA @ 0 -> 1\nA+B @ 1".parse().unwrap();
    let s = simulate(&p, &topology("dgx-h100")).unwrap();
    assert_exact("half", s.completion_ms, 0.5 / 450.0 + 1.5 / 3350.0);
}

#[test]
fn a_preamble_alone_is_simulated_as_invalid() {
    let s = simulate(&example("example_5_4_preamble.exprog"), &topology("dgx-h100")).unwrap();
    assert!(!s.valid);
    assert!(s.invalid.unwrap().to_string().contains("is not met"));
    assert_eq!(s.completion_ms, 0.0);
}

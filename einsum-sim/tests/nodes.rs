//! Machines of several nodes in the simulator: transfers inside a node run at its NVSwitch
//! port, transfers between nodes at the GPUs' own InfiniBand NICs, and the two do not share a
//! resource. Expected times come from the vendor figures, not from the presets' code. These
//! are the bandwidth model's figures, so the presets run without their latencies here
//! (`tests/latency.rs` covers those).

use einsum_sim::{GB, SimGraph, SimTask, SiteId, Topology, Trace};

/// The preset `name` without latencies or SM counts.
fn fluid(name: &str) -> Topology {
    Topology::preset(name).expect("preset").fluid()
}

fn s(i: usize) -> SiteId {
    SiteId(i)
}

/// The DGX A100's NVSwitch gives each GPU 600 GB/s of NVLink, 300 GB/s per direction.
const A100_NVLINK_PER_DIRECTION: f64 = 600.0 / 2.0 * GB;
/// Each DGX A100 GPU has a ConnectX-6 HDR port: 200 Gb/s, 8 bits to the byte.
const A100_NIC_PER_DIRECTION: f64 = 200.0 / 8.0 * GB;
/// Each DGX H100 GPU has a ConnectX-7 NDR port: 400 Gb/s.
const H100_NIC_PER_DIRECTION: f64 = 400.0 / 8.0 * GB;

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-12 * b.abs()
}

fn run(topology: &Topology, tasks: Vec<SimTask>) -> Trace {
    let mut g = SimGraph::new();
    for t in tasks {
        g.push(t);
    }
    g.simulate(topology).expect("simulate")
}

#[test]
fn inter_node_transfers_run_at_the_nic_and_intra_node_ones_at_nvswitch() {
    let t = fluid("dgx-a100x2");
    let bytes = 3.0 * GB;
    // GPU 2 and GPU 6 share node 0: 3 GB / 300 GB/s = 10 ms.
    let inside = run(&t, vec![SimTask::transfer("2->6", s(2), s(6), bytes)]);
    assert!(close(inside.completion(), bytes / A100_NVLINK_PER_DIRECTION), "{}", inside.completion());
    assert!(close(inside.completion(), 0.010));
    // GPU 2 in node 0 to GPU 13 in node 1: 3 GB / 25 GB/s = 120 ms.
    let across = run(&t, vec![SimTask::transfer("2->13", s(2), s(13), bytes)]);
    assert!(close(across.completion(), bytes / A100_NIC_PER_DIRECTION), "{}", across.completion());
    assert!(close(across.completion(), 0.120));
    assert!(close(across.bytes_through("nic-out[2]"), bytes) && close(across.bytes_through("nic-in[13]"), bytes));
    assert_eq!(across.bytes_through("egress[2]"), 0.0);

    let h = fluid("dgx-h100x2");
    let across = run(&h, vec![SimTask::transfer("0->8", s(0), s(8), bytes)]);
    assert!(close(across.completion(), bytes / H100_NIC_PER_DIRECTION), "{}", across.completion());
}

/// The fabric is non-blocking and every GPU has its own NIC: eight GPUs of node 0 each
/// sending to their peer in node 1 take as long as one; two transfers out of one GPU to the
/// other node share its NIC; and a transfer inside the node does not slow one leaving it
/// (GPUDirect RDMA does not cross the NVSwitch).
#[test]
fn nics_are_per_gpu_and_separate_from_nvswitch() {
    let t = fluid("dgx-a100x2");
    let bytes = GB;
    let rails: Vec<SimTask> = (0..8).map(|i| SimTask::transfer("rail", s(i), s(8 + i), bytes)).collect();
    let trace = run(&t, rails);
    for task in trace.tasks() {
        assert!(close(task.end, bytes / A100_NIC_PER_DIRECTION), "{}", task.end);
    }
    let shared =
        run(&t, vec![SimTask::transfer("0->8", s(0), s(8), bytes), SimTask::transfer("0->9", s(0), s(9), bytes)]);
    assert!(close(shared.completion(), 2.0 * bytes / A100_NIC_PER_DIRECTION));
    let both =
        run(&t, vec![SimTask::transfer("0->8", s(0), s(8), bytes), SimTask::transfer("0->1", s(0), s(1), bytes)]);
    assert!(close(both.tasks()[0].end, bytes / A100_NIC_PER_DIRECTION));
    assert!(close(both.tasks()[1].end, bytes / A100_NVLINK_PER_DIRECTION));
}

/// A multicast from node 0 to one GPU of each of three other nodes leaves through the
/// sender's NIC three times.
#[test]
fn a_multicast_across_nodes_is_one_flow_per_destination() {
    let t = fluid("dgx-h100x4");
    let bytes = 0.5 * GB;
    let trace = run(&t, vec![SimTask::multicast("bcast", s(0), vec![s(8), s(16), s(24)], bytes)]);
    assert!(close(trace.completion(), 3.0 * bytes / H100_NIC_PER_DIRECTION), "{}", trace.completion());
}

mod props {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

        /// On N DGX-A100 nodes, a lone transfer runs at 300 GB/s between GPUs `a` and `b`
        /// of one node (`a / 8 == b / 8`) and at 25 GB/s between nodes.
        #[test]
        fn a_lone_transfer_runs_at_nvswitch_or_nic_speed(
            nodes in 1usize..5, a in 0usize..40, b in 0usize..40, gb in 0.001f64..10.0,
        ) {
            let sites = 8 * nodes;
            let (a, b) = (a % sites, b % sites);
            prop_assume!(a != b);
            let t = fluid(&format!("dgx-a100x{nodes}"));
            let trace = run(&t, vec![SimTask::transfer("x", s(a), s(b), gb * GB)]);
            let rate = if a / 8 == b / 8 { A100_NVLINK_PER_DIRECTION } else { A100_NIC_PER_DIRECTION };
            prop_assert!(close(trace.completion(), gb * GB / rate), "{} -> {}: {}", a, b, trace.completion());
        }
    }
}

//! The public API end to end: a two-node DGX split into ranks within a node, and a task graph
//! on its 16 devices whose transfers inside a node, inside a rank, and across ranks are told
//! apart.

use einsum_core::taskgraph::{Boundary, DeviceId, Task, TaskGraph, TaskId};
use einsum_core::{DType, TensorType};
use einsum_dist::{RankLayout, cross_rank, inter_rank_bytes};
use einsum_sim::Topology;

/// 16 devices, input `w: bf16[4, 8]` (64 bytes) loaded on device 0, then sent along the chain
/// 0 -> 1 -> 5 -> 8 -> 15 -> 3: tasks 1..6, one transfer each.
fn chain() -> TaskGraph {
    let w = TensorType::zero_bounded(&[4, 8]);
    let mut g = TaskGraph::new(16, vec![Boundary { name: "w".into(), ty: w.clone(), dtype: DType::BF16 }], vec![]);
    let mut at = g.add_buffer(DeviceId(0), w.clone(), DType::BF16);
    g.push(Task::Load { input: 0, dst: at }, &[], "load w").expect("well-formed");
    for d in [1, 5, 8, 15, 3] {
        let dst = g.add_buffer(DeviceId(d), w.clone(), DType::BF16);
        g.push(Task::Transfer { src: at, dst }, &[], format!("to {d}")).expect("well-formed");
        at = dst;
    }
    g
}

#[test]
fn ranks_per_node_split_the_chain_messages() {
    let t = Topology::preset("dgx-a100x2").expect("preset");
    let g = chain();
    assert_eq!(g.buffers()[0].bytes(), 4 * 8 * 2);

    // One rank per node: 5 -> 8 and 15 -> 3 cross.
    let two = RankLayout::for_topology(&t, 16, 2).expect("a rank per node");
    assert_eq!(cross_rank(&g, &two), Ok(vec![TaskId(3), TaskId(5)]));
    assert_eq!(inter_rank_bytes(&g, &two), Ok(vec![vec![0, 64], vec![64, 0]]));

    // Two ranks per node ({0..4}, {4..8}, {8..12}, {12..16}): 1 -> 5, 5 -> 8, 8 -> 15 and
    // 15 -> 3 cross; 0 -> 1 stays inside rank 0.
    let four = RankLayout::for_topology(&t, 16, 4).expect("two ranks per node");
    assert_eq!(cross_rank(&g, &four), Ok(vec![TaskId(2), TaskId(3), TaskId(4), TaskId(5)]));
    assert_eq!(
        inter_rank_bytes(&g, &four),
        Ok(vec![vec![0, 64, 0, 0], vec![0, 0, 64, 0], vec![0, 0, 0, 64], vec![64, 0, 0, 0]])
    );

    // One rank over both nodes is refused.
    assert!(RankLayout::for_topology(&t, 16, 1).unwrap_err().to_string().contains("span node 0"));
}

//! A workload's size is estimated from its parameters before its graph is built, and one too
//! large is refused from the estimate: the counts agree with the graphs the builders make,
//! the least task count agrees with the compiler's estimate, and a workload whose graph
//! would not fit a given host-memory budget, or whose plan would exceed the compiler's task
//! limit, is refused without building anything (building these would take tens of GB or
//! terabytes, and abort the process).

use std::collections::HashMap;

use einsum_compile::footprint::{LIMITS, compile_estimate};
use einsum_core::DType;
use einsum_experiments::workload::{BYTES_PER_NODE, GraphEstimate, TooLarge};
use einsum_experiments::{Error, Workload};

/// Every workload, with dimensions small enough to build here.
const SMALL: &[&str] = &[
    "matmul:n=8",
    "ffn:tokens=16,d_model=8,d_ff=16",
    "attention:tokens=16,seqs=2,heads_q=4,heads_kv=2,d_head=4",
    "llama-block:tokens=16,seqs=2,d_model=8,heads_q=4,heads_kv=2,d_head=4,d_ff=16",
    "llama:layers=3,tokens=16,seqs=2,d_model=8,heads_q=4,heads_kv=2,d_head=4,d_ff=16",
    "llama3-8b:layers=2,tokens=16,seqs=4,d_model=8,heads_q=4,heads_kv=2,d_head=4,d_ff=16,vocab=32",
    "llama3-70b:layers=1,tokens=16,d_model=8,heads_q=4,heads_kv=2,d_head=4,d_ff=16,vocab=32",
    "chain-a:scale=512",
    "chain-b:scale=512",
    "chain-c:scale=512",
    "chain-d:scale=512",
    "chain-e:scale=512",
];

/// The estimate's counts are those of the graph built: nodes, operators and operands; and
/// its fewest tasks on `p` devices are the compiler's task estimate of the graph with no
/// exchanges (every operator on its devices, no specs), for every workload.
#[test]
fn the_estimate_counts_what_the_builder_builds() {
    for spec in SMALL {
        let w = Workload::parse(spec).unwrap();
        let estimate = w.estimate();
        let graph = w.build(DType::F32).unwrap();
        let comp = graph.computation();
        let ops = comp.ops().count();
        let operands: usize = comp.ops().map(|(_, _, args)| args.len()).sum();
        assert_eq!(
            (estimate.nodes, estimate.ops, estimate.operands),
            (comp.inputs().len() + ops, ops, operands),
            "{spec}"
        );
        assert!(estimate.host_bytes >= estimate.nodes * BYTES_PER_NODE, "{spec}");
        for p in [1, 8, 72] {
            assert_eq!(estimate.min_tasks(p), compile_estimate(comp, &HashMap::new(), p).tasks, "{spec} p = {p}");
        }
    }
}

/// The reproduction: a million LLaMA layers (25 million nodes) is estimated at more
/// than 40 GB and refused under a 16 GB budget, where the default 32 layers build.
#[test]
fn a_million_layers_are_refused_before_building() {
    const BUDGET: usize = 16 << 30;
    let w = Workload::parse("llama:layers=1000000").unwrap();
    let GraphEstimate { nodes, host_bytes, .. } = w.estimate();
    assert_eq!(nodes, 25_000_001);
    assert!(host_bytes > 40_000_000_000, "{host_bytes}");
    match w.build_within(DType::F16, Some(BUDGET)) {
        Err(Error::TooLarge(TooLarge::HostMemory { nodes: n, bytes, available, .. })) => {
            assert_eq!((n, bytes, available), (nodes, host_bytes, BUDGET));
        }
        other => panic!("expected the host-memory refusal, got {:?}", other.map(|_| "a graph")),
    }
    let Err(message) = w.build_within(DType::F16, Some(BUDGET)).map_err(|e| e.to_string()) else {
        panic!("built a million layers")
    };
    assert!(message.contains("llama:") && message.contains("layers=1000000"), "{message}");
    assert!(message.contains("refused before building"), "{message}");
    assert!(Workload::parse("llama").unwrap().build_within(DType::F16, Some(BUDGET)).is_ok());
}

/// `seqs` sizes the packing every attention and RoPE holds: a trillion packed sequences would
/// be terabytes, refused from the estimate whatever the machine (the build would abort).
#[test]
fn a_packing_too_large_to_allocate_is_refused() {
    let w = Workload::parse("attention:tokens=1099511627776,seqs=1099511627776").unwrap();
    let estimate = w.estimate();
    assert!(estimate.host_bytes > 8 << 40, "{}", estimate.host_bytes);
    let Err(err) = w.build_within(DType::F16, Some(1 << 40)) else { panic!("built a graph of 8 TB") };
    assert!(matches!(err, Error::TooLarge(TooLarge::HostMemory { nodes: 4, .. })), "{err}");
    // The bytes grow with the sequences, not only with the nodes.
    let one = Workload::parse("attention:tokens=1099511627776,seqs=1").unwrap().estimate();
    assert_eq!(one.nodes, estimate.nodes);
    assert!(one.host_bytes < 1 << 20, "{}", one.host_bytes);
}

/// The compiler's task limit, applied from the estimate: a million layers on 8 devices is
/// refused naming the count and the limit; the 80-layer LLaMA-3-70B on 72 devices passes.
#[test]
fn the_task_limit_is_checked_before_the_graph_exists() {
    let w = Workload::parse("llama:layers=1000000").unwrap();
    match w.check_tasks(8, LIMITS.tasks) {
        Err(Error::TooLarge(TooLarge::Tasks { devices, ops, tasks, limit, .. })) => {
            assert_eq!((devices, ops, limit), (8, 16_000_000, LIMITS.tasks));
            assert_eq!(tasks, 8 * (16_000_000 + 30_000_000));
        }
        other => panic!("expected the task refusal, got {other:?}"),
    }
    let big = Workload::parse("llama3-70b").unwrap();
    let estimate = big.check_tasks(72, LIMITS.tasks).unwrap();
    assert_eq!(estimate.ops, 80 * 16 + 2);
    // Saturating, not overflowing, at the largest parameters.
    let huge = Workload::parse(&format!("llama:layers={}", usize::MAX)).unwrap();
    assert_eq!(huge.estimate().min_tasks(usize::MAX), usize::MAX);
    assert!(huge.check_tasks(1, LIMITS.tasks).is_err());
}

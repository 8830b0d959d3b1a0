//! Logical plans of whole workloads: the paper's headline plan shapes.

use einsum_logical::{Dp, LogicalOptimizer, Machine, PaperProxy, Time};
use einsummable::{DType, Workload};

/// Section 6.2: on one 128K-token sequence at p = 8 the optimizer derives DeepSpeed-Ulysses:
/// attention split on its 8 key/value heads, everything else split on tokens, joined by
/// repartitions at the attention operator.
#[test]
fn llama_block_on_one_long_sequence_is_deepspeed_ulysses() {
    let graph = Workload::parse("llama-block:tokens=131072,seqs=1").unwrap().build(DType::F16).unwrap();
    let model = Time::on(Machine::by_name("dgx-a100").unwrap());
    let plan = Dp.optimize(graph.computation(), 8, &model).unwrap();
    for op in &plan.ops {
        match op.kind.as_str() {
            "attention" => assert_eq!(op.splits_label(), "heads_kv=8", "{}", op.name),
            "rope" => {}
            _ => assert_eq!(op.splits_label(), "tokens=8", "{} ({})", op.name, op.kind),
        }
    }
    // The token-sharded and head-sharded regions meet through repartitions: the attention
    // output is repartitioned into the output projection, and the projections' outputs are
    // repartitioned on their way into attention (at the rope or at attention itself).
    let repartitioned: Vec<&str> =
        plan.ops.iter().filter(|o| o.cost.repartition > 0.0).map(|o| o.kind.as_str()).collect();
    assert!(repartitioned.contains(&"einsum"), "{repartitioned:?}");
    assert!(repartitioned.iter().any(|k| *k == "rope" || *k == "attention"), "{repartitioned:?}");
    assert_eq!(repartitioned.iter().filter(|k| **k == "binary" || **k == "matmul" || **k == "rmsnorm").count(), 0);
}

/// Section 4.4 through the workload parser: the 3D matmul algorithm.
#[test]
fn square_matmul_gets_the_3d_grid() {
    let n = 4096.0f64;
    for (p, q) in [(8, 2), (27, 3), (64, 4)] {
        let graph = Workload::parse("matmul:n=4096").unwrap().build(DType::F16).unwrap();
        let plan = Dp.optimize(graph.computation(), p, &PaperProxy).unwrap();
        let op = &plan.ops[0];
        assert_eq!(op.splits.iter().map(|(_, c)| *c).collect::<Vec<_>>(), vec![q, q, q], "p = {p}");
        assert_eq!(plan.total, (3 * q - 1) as f64 * n * n, "p = {p}");
    }
}

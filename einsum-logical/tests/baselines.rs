//! The hand-designed baselines pick what their rules say on a small LLaMA-shaped block
//! (built from einsum-ops), refuse graphs they do not apply to, and `mesh2d` searches
//! exactly the mesh-restricted space, never beating the DP on a tree.

use einsum_core::{DType, TensorDesc};
use einsum_joinagg::{AbstractOperator, Computation, JoinAggSpec};
use einsum_logical::{
    BASELINES, CostModel, Data, Dp, Error, LogicalOptimizer, Machine, Megatron, Mesh2d, OPTIMIZERS, PaperProxy,
    Problem, SpecCost, Time, Ulysses, optimizer_by_name,
};
use einsum_ops::Packing;
use einsum_ops::attention::{Attention, AttentionConfig};
use einsum_ops::binary::{Binary, BinaryOp};
use einsum_ops::rmsnorm::RmsNorm;
use einsum_ops::unary::{Unary, UnaryOp};

mod common;
use common::Builder;

/// The sizes of a [`block_of`].
#[derive(Clone, Copy, Debug)]
struct Dims {
    tokens: usize,
    seqs: usize,
    d_model: usize,
    heads_q: usize,
    heads_kv: usize,
    d_head: usize,
    d_ff: usize,
    dtype: DType,
}

/// A small f32 block of [`block_of`] (`d_model = 8`, `d_head = 4`, `d_ff = 16`).
fn block(tokens: usize, seqs: usize, heads_q: usize, heads_kv: usize) -> Computation {
    block_of(Dims { tokens, seqs, d_model: 8, heads_q, heads_kv, d_head: 4, d_ff: 16, dtype: DType::F32 })
}

/// A LLaMA-shaped block without RoPE: pre-norm attention with grouped heads over `seqs`
/// packed sequences, output projection and residual, then a SiLU FFN and residual. Every
/// weight is a computation input.
fn block_of(dims: Dims) -> Computation {
    let Dims { tokens, seqs, d_model, heads_q, heads_kv, d_head, d_ff, dtype } = dims;
    let mut b = Builder::new(dtype);
    let x = b.input("x", &[("tokens", tokens), ("d_model", d_model)]);
    let norm = b.input("norm", &[("d_model", d_model)]);
    let wq = b.input("wq", &[("d_model", d_model), ("heads_q", heads_q), ("d_head", d_head)]);
    let wk = b.input("wk", &[("d_model", d_model), ("heads_kv", heads_kv), ("d_head", d_head)]);
    let wv = b.input("wv", &[("d_model", d_model), ("heads_kv", heads_kv), ("d_head", d_head)]);
    let wo = b.input("wo", &[("heads_q", heads_q), ("d_head", d_head), ("d_model", d_model)]);
    let w_up = b.input("w_up", &[("d_model", d_model), ("d_ff", d_ff)]);
    let w_down = b.input("w_down", &[("d_ff", d_ff), ("d_model", d_model)]);

    let (xd, nd) = (b.desc(x), b.desc(norm));
    let h = b.op("norm", RmsNorm::new(&xd, &nd, "d_model", 1e-5).unwrap(), &[x, norm]);
    let q = b.einsum("q", "td,dhe->hte", &[h, wq]);
    let k = b.einsum("k", "td,dhe->hte", &[h, wk]);
    let v = b.einsum("v", "td,dhe->hte", &[h, wv]);
    let config = AttentionConfig::new(true, Packing::uniform(seqs, tokens / seqs).unwrap());
    let att = Attention::new(&b.desc(q), &b.desc(k), &b.desc(v), config).unwrap();
    let a = b.op("attention", att, &[q, k, v]);
    let o = b.einsum("wo", "hte,hed->td", &[a, wo]);
    let r = b.op("residual", Binary::new(&xd, &xd, BinaryOp::Add).unwrap(), &[x, o]);
    let up = b.einsum("up", "td,df->tf", &[r, w_up]);
    let act = b.op("silu", Unary::new(&b.desc(up), UnaryOp::Silu).unwrap(), &[up]);
    let down = b.einsum("down", "tf,fd->td", &[act, w_down]);
    let y = b.op("residual2", Binary::new(&xd, &xd, BinaryOp::Add).unwrap(), &[r, down]);
    b.comp.save(y).unwrap();
    b.comp
}

/// The matrix chain `A (B C)` (a tree), with dimension names `d0..d3`.
fn chain() -> Computation {
    let mut b = Builder::new(DType::F32);
    let m1 = b.input("M1", &[("d0", 12), ("d1", 8)]);
    let m2 = b.input("M2", &[("d1", 8), ("d2", 16)]);
    let m3 = b.input("M3", &[("d2", 16), ("d3", 4)]);
    let bc = b.einsum("bc", "ij,jk->ik", &[m2, m3]);
    let abc = b.einsum("abc", "ij,jk->ik", &[m1, bc]);
    b.comp.save(abc).unwrap();
    b.comp
}

/// The interval count of every shardable index in operator `name`'s chosen spec, as
/// `(index, count)` for the counts above one. Where the chosen spec is also requested
/// under other counts (an alias), the set of all of them is returned.
fn splits(problem: &Problem, choice: &[usize], name: &str) -> Vec<Vec<(String, usize)>> {
    let (c, op) = problem.ops.iter().enumerate().find(|(_, o)| o.name == name).expect("operator");
    op.candidates[choice[c]]
        .all_counts()
        .map(|counts| op.shardable.iter().cloned().zip(counts.iter().copied()).filter(|(_, k)| *k > 1).collect())
        .collect()
}

/// True when one of the count vectors requesting `name`'s chosen spec splits exactly the
/// indices of `want` (in any order) that many ways.
fn chose(problem: &Problem, choice: &[usize], name: &str, want: &[(&str, usize)]) -> bool {
    let mut want: Vec<(String, usize)> = want.iter().map(|&(n, k)| (n.to_string(), k)).collect();
    want.sort();
    splits(problem, choice, name).into_iter().any(|mut s| {
        s.sort();
        s == want
    })
}

fn assert_chose(problem: &Problem, choice: &[usize], strategy: &str, name: &str, want: &[(&str, usize)]) {
    assert!(
        chose(problem, choice, name, want),
        "{strategy} on p = {}: {name} chose {:?}, expected {want:?}",
        problem.p,
        splits(problem, choice, name)
    );
}

fn time() -> Time {
    Time::on(Machine::by_name("dgx-a100").unwrap())
}

#[test]
fn every_baseline_is_reachable_by_name() {
    assert_eq!(BASELINES, &["data", "megatron", "ulysses", "mesh2d"]);
    for name in BASELINES {
        assert_eq!(optimizer_by_name(name, 0).unwrap().name(), *name);
        assert!(!OPTIMIZERS.contains(name));
    }
    let err = optimizer_by_name("fsdp", 0).err().unwrap().to_string();
    assert!(err.contains("dp, greedy, random, ilp, data, megatron, ulysses, mesh2d"), "{err}");
}

#[test]
fn data_splits_tokens_and_sequences() {
    // Four sequences on four devices: attention by sequence.
    let problem = Problem::new(&block(16, 4, 4, 2), 4, &PaperProxy).unwrap();
    let choice = Data.solve(&problem).unwrap();
    for op in ["norm", "q", "k", "v", "wo", "residual", "up", "silu", "down", "residual2"] {
        assert_chose(&problem, &choice, "data", op, &[("tokens", 4)]);
    }
    assert_chose(&problem, &choice, "data", "attention", &[("tokens", 4)]);
    // One sequence: attention by query blocks that gather keys and values.
    let problem = Problem::new(&block(16, 1, 4, 2), 4, &PaperProxy).unwrap();
    let choice = Data.solve(&problem).unwrap();
    assert_chose(&problem, &choice, "data", "attention", &[("query", 4)]);
    assert!(!chose(&problem, &choice, "attention", &[("tokens", 4)]));
    // Three sequences do not divide among 2 devices evenly: query blocks again.
    let problem = Problem::new(&block(12, 3, 4, 2), 2, &PaperProxy).unwrap();
    let choice = Data.solve(&problem).unwrap();
    assert_chose(&problem, &choice, "data", "attention", &[("query", 2)]);
    assert_chose(&problem, &choice, "data", "q", &[("tokens", 2)]);
}

#[test]
fn data_row_shards_a_chain_and_falls_back_past_small_rows() {
    let problem = Problem::new(&chain(), 4, &PaperProxy).unwrap();
    let choice = Data.solve(&problem).unwrap();
    assert_chose(&problem, &choice, "data", "bc", &[("d1", 4)]);
    assert_chose(&problem, &choice, "data", "abc", &[("d0", 4)]);
    // 16 devices: d0 = 12 takes 8 (the largest divisor of 16 it holds), the remaining 2
    // go to the output columns d3, not to the contraction d1.
    let problem = Problem::new(&chain(), 16, &PaperProxy).unwrap();
    let choice = Data.solve(&problem).unwrap();
    assert_chose(&problem, &choice, "data", "abc", &[("d0", 8), ("d3", 2)]);
    assert_chose(&problem, &choice, "data", "bc", &[("d1", 8), ("d3", 2)]);
}

#[test]
fn ulysses_shards_heads_inside_attention_and_tokens_outside() {
    for (p, heads_kv, seqs, att) in [
        (4, 4, 1, vec![("heads_kv", 4)]),
        (2, 2, 4, vec![("heads_kv", 2)]),
        // Fewer key/value heads than devices: the remaining factor goes to sequences.
        (4, 2, 4, vec![("heads_kv", 2), ("tokens", 2)]),
        // ... or, with one sequence, to query blocks.
        (4, 2, 1, vec![("heads_kv", 2), ("query", 2)]),
    ] {
        let problem = Problem::new(&block(16, seqs, 4, heads_kv), p, &PaperProxy).unwrap();
        let choice = Ulysses.solve(&problem).unwrap();
        assert_chose(&problem, &choice, "ulysses", "attention", &att);
        for op in ["norm", "q", "k", "v", "wo", "residual", "up", "silu", "down"] {
            assert_chose(&problem, &choice, "ulysses", op, &[("tokens", p)]);
        }
    }
}

#[test]
fn megatron_is_column_then_row_parallel() {
    let problem = Problem::new(&block(16, 1, 4, 4), 4, &time()).unwrap();
    let choice = Megatron.solve(&problem).unwrap();
    assert_chose(&problem, &choice, "megatron", "q", &[("heads_q", 4)]);
    assert_chose(&problem, &choice, "megatron", "k", &[("heads_kv", 4)]);
    assert_chose(&problem, &choice, "megatron", "attention", &[("heads_kv", 4)]);
    assert_chose(&problem, &choice, "megatron", "wo", &[("heads_q", 4)]);
    assert_chose(&problem, &choice, "megatron", "up", &[("d_ff", 4)]);
    assert_chose(&problem, &choice, "megatron", "silu", &[("d_ff", 4)]);
    assert_chose(&problem, &choice, "megatron", "down", &[("d_ff", 4)]);
    for op in ["norm", "residual", "residual2"] {
        assert_chose(&problem, &choice, "megatron", op, &[("tokens", 4)]);
    }
    // Row-parallel projections aggregate their partial outputs; the others do not.
    let plan = problem.plan(&choice, "megatron").unwrap();
    let agg = |name: &str| plan.ops.iter().find(|o| o.name == name).unwrap().cost.aggregation;
    assert!(agg("down") > 0.0 && agg("wo") > 0.0);
    assert_eq!(agg("up"), 0.0);
    assert_eq!(agg("q"), 0.0);
}

#[test]
fn megatron_caps_query_heads_at_the_key_value_head_split() {
    // Two key/value heads on four devices: every head index is split twice, the rest by
    // tokens (whole sequences in attention), so the q projection's tiling matches what
    // attention reads.
    let problem = Problem::new(&block(16, 4, 4, 2), 4, &PaperProxy).unwrap();
    let choice = Megatron.solve(&problem).unwrap();
    assert_chose(&problem, &choice, "megatron", "q", &[("tokens", 2), ("heads_q", 2)]);
    assert_chose(&problem, &choice, "megatron", "attention", &[("heads_kv", 2), ("tokens", 2)]);
    assert_chose(&problem, &choice, "megatron", "wo", &[("tokens", 2), ("heads_q", 2)]);
    let att = problem.ops.iter().position(|o| o.name == "attention").unwrap();
    assert!(!problem.needs_repartition(&choice, att, 0), "attention repartitions the megatron q projection");
}

#[test]
fn baselines_refuse_graphs_they_do_not_apply_to() {
    let problem = Problem::new(&chain(), 4, &PaperProxy).unwrap();
    for strategy in [&Megatron as &dyn LogicalOptimizer, &Ulysses] {
        match strategy.solve(&problem) {
            Err(e @ Error::Baseline { .. }) => {
                let msg = e.to_string();
                assert!(msg.contains(strategy.name()) && msg.contains("the graph"), "{msg}");
            }
            other => panic!("{} on a chain: {other:?}", strategy.name()),
        }
    }
    // data and mesh2d plan a chain.
    assert!(Data.solve(&problem).is_ok());
    assert!(Mesh2d.solve(&problem).is_ok());
}

/// Every mesh2d choice maps whole indices onto its mesh, and the plan costs what `total`
/// says; on a tree (where the DP is exact) it never beats the DP.
fn check_mesh2d(comp: &Computation, p: usize, cost: &dyn CostModel, tree: bool) {
    let problem = Problem::new(comp, p, cost).unwrap();
    let (choice, mesh, total) = Mesh2d.solve_with_mesh(&problem).unwrap();
    assert!(Mesh2d::meshes(p).contains(&mesh));
    for (op, &n) in problem.ops.iter().zip(&choice) {
        assert!(
            op.candidates[n].all_counts().any(|c| Mesh2d::fits(c, mesh)),
            "{}: {:?} does not fit the {mesh:?} mesh",
            op.name,
            op.candidates[n].counts
        );
    }
    assert_eq!(total, problem.total(&choice).unwrap());
    let dp = problem.total(&Dp.solve(&problem).unwrap()).unwrap();
    if tree {
        assert!(total >= dp * (1.0 - 1e-12), "p = {p}: mesh2d {total} below dp {dp}");
    }
    // The chosen mesh is the cheapest: solve every mesh's restricted problem here.
    for other in Mesh2d::meshes(p) {
        let keep: Vec<Vec<usize>> = problem
            .ops
            .iter()
            .map(|op| {
                (0..op.candidates.len())
                    .filter(|&n| op.candidates[n].all_counts().any(|c| Mesh2d::fits(c, other)))
                    .collect()
            })
            .collect();
        if keep.iter().any(Vec::is_empty) {
            continue;
        }
        let mut restricted = problem.clone();
        for (op, k) in restricted.ops.iter_mut().zip(&keep) {
            op.candidates = k.iter().map(|&n| op.candidates[n].clone()).collect();
        }
        let sub = Dp.solve(&restricted).unwrap();
        let mapped: Vec<usize> = sub.iter().zip(&keep).map(|(&n, k)| k[n]).collect();
        assert!(problem.total(&mapped).unwrap() >= total, "p = {p}: the {other:?} mesh beats the chosen {mesh:?}");
    }
}

#[test]
fn mesh2d_searches_the_mesh_restricted_space() {
    for p in [2, 4, 8, 16] {
        check_mesh2d(&chain(), p, &PaperProxy, true);
        check_mesh2d(&chain(), p, &time(), true);
    }
    for p in [2, 4, 8] {
        check_mesh2d(&block(16, 4, 4, 2), p, &PaperProxy, false);
        check_mesh2d(&block(16, 4, 8, 4), p, &time(), false);
    }
}

#[test]
fn mesh2d_excludes_three_way_splits() {
    // On 8 devices the chain's products have 2·2·2 candidates, which no 2-D mesh holds.
    let problem = Problem::new(&chain(), 8, &PaperProxy).unwrap();
    let three = problem.ops[0].candidates.iter().filter(|c| c.counts.iter().filter(|&&k| k > 1).count() == 3).count();
    assert!(three > 0);
    let (choice, _, _) = Mesh2d.solve_with_mesh(&problem).unwrap();
    for (op, &n) in problem.ops.iter().zip(&choice) {
        assert!(op.candidates[n].counts.iter().filter(|&&k| k > 1).count() <= 2, "{}", op.name);
    }
}

/// The `time` model as it was before computation inputs were resident: every input's join
/// is charged (each source reported as operator-produced).
#[derive(Debug)]
struct ChargingWeights(Time);

impl CostModel for ChargingWeights {
    fn name(&self) -> &str {
        "time-charging-weights"
    }
    fn unit(&self) -> &'static str {
        self.0.unit()
    }
    fn repartition(&self, desc: &TensorDesc, p: usize) -> f64 {
        self.0.repartition(desc, p)
    }
    fn spec(&self, op: &dyn AbstractOperator, spec: &JoinAggSpec, p: usize, resident: &[bool]) -> SpecCost {
        self.0.spec(op, spec, p, &vec![false; resident.len()])
    }
}

/// At LLaMA-3-8B proportions on one 8K-token sequence (the experiment's 1×8K case), p = 8:
/// with weights resident (the `time` model charges no join for computation inputs), the
/// DP's plan is the Ulysses shape: every projection by tokens, attention by `heads_kv`.
/// Charging the weights' join (as the model did before) makes replicating them look
/// expensive, and the DP splits `d_ff` and the projections' model dimensions instead.
/// Pricing only enumerates specs, so the real sizes allocate nothing. (At toy sizes such
/// as `d_head = 4`, attention's compute is so small that a query-block split wins instead:
/// the proportions matter.)
#[test]
fn dp_finds_the_ulysses_shape_when_weights_are_resident() {
    let dims = Dims {
        tokens: 8192,
        seqs: 1,
        d_model: 4096,
        heads_q: 32,
        heads_kv: 8,
        d_head: 128,
        d_ff: 14336,
        dtype: DType::F16,
    };
    let comp = block_of(dims);
    let problem = Problem::new(&comp, 8, &time()).unwrap();
    let choice = Dp.solve(&problem).unwrap();
    for op in ["norm", "q", "k", "v", "wo", "residual", "up", "silu", "down", "residual2"] {
        assert_chose(&problem, &choice, "dp", op, &[("tokens", 8)]);
    }
    assert_chose(&problem, &choice, "dp", "attention", &[("heads_kv", 8)]);
    let ulysses = Ulysses.solve(&problem).unwrap();
    let (dp, ul) = (problem.total(&choice).unwrap(), problem.total(&ulysses).unwrap());
    assert!((dp - ul).abs() <= 1e-12 * ul, "dp {dp} vs ulysses {ul}");

    let charging = Problem::new(&comp, 8, &ChargingWeights(time())).unwrap();
    let choice = Dp.solve(&charging).unwrap();
    assert!(!chose(&charging, &choice, "up", &[("tokens", 8)]), "up: {:?}", splits(&charging, &choice, "up"));
    // It splits the FFN's hidden index instead (how many ways depends on the rest of the
    // model: d_ff 4 ways before the join counted only copies beyond the first, 2 since).
    let up = splits(&charging, &choice, "up");
    assert!(up.iter().all(|s| s.iter().any(|(n, k)| n == "d_ff" && *k > 1)), "up: {up:?}");
}

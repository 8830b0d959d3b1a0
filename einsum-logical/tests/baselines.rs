//! The hand-designed baselines pick what their rules say on a small LLaMA-shaped block
//! (built from einsum-ops), read roles rather than index names (a block with other names
//! and the same roles gets the same plans), fall back as documented where no role is
//! declared, refuse graphs they do not apply to, and `mesh2d` searches exactly the
//! mesh-restricted space, never beating the DP on a tree.

use einsum_core::{DType, TensorDesc};
use einsum_joinagg::{AbstractOperator, Computation, JoinAggSpec};
use einsum_logical::{
    CostModel, Data, Dp, Error, IndexRole, LogicalOptimizer, Machine, Megatron, Mesh2d, PaperProxy, Problem, SpecCost,
    Time, Ulysses,
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
    block_of(dims_of(tokens, seqs, heads_q, heads_kv))
}

/// The sizes of a [`block`].
fn dims_of(tokens: usize, seqs: usize, heads_q: usize, heads_kv: usize) -> Dims {
    Dims { tokens, seqs, d_model: 8, heads_q, heads_kv, d_head: 4, d_ff: 16, dtype: DType::F32 }
}

/// The index names of a [`block_named`] that differ from block to block.
#[derive(Clone, Copy, Debug)]
struct Names {
    tokens: &'static str,
    heads_q: &'static str,
    heads_kv: &'static str,
    d_ff: &'static str,
}

/// The names the workloads use.
const STANDARD: Names = Names { tokens: "tokens", heads_q: "heads_q", heads_kv: "heads_kv", d_ff: "d_ff" };
/// Other names for the same indices.
const RENAMED: Names = Names { tokens: "seq", heads_q: "qh", heads_kv: "kvh", d_ff: "hidden" };

impl Names {
    /// The name in `self` of the index that [`STANDARD`] calls `name` (others unchanged).
    fn of(&self, name: &str) -> String {
        let pairs = [
            (STANDARD.tokens, self.tokens),
            (STANDARD.heads_q, self.heads_q),
            (STANDARD.heads_kv, self.heads_kv),
            (STANDARD.d_ff, self.d_ff),
        ];
        pairs.iter().find(|(s, _)| *s == name).map_or(name, |(_, n)| n).to_string()
    }
}

/// A LLaMA-shaped block without RoPE, with the standard names and the FFN hidden index
/// declared (as the named workloads do).
fn block_of(dims: Dims) -> Computation {
    block_named(dims, STANDARD, true)
}

/// A LLaMA-shaped block without RoPE: pre-norm attention with grouped heads over `seqs`
/// packed sequences, output projection and residual, then a SiLU FFN and residual. Every
/// weight is a computation input. Attention declares the roles of the token and head
/// indices; the FFN hidden index is declared as such when `declare_ffn` is set.
fn block_named(dims: Dims, names: Names, declare_ffn: bool) -> Computation {
    let Dims { tokens, seqs, d_model, heads_q, heads_kv, d_head, d_ff, dtype } = dims;
    let Names { tokens: tok, heads_q: hq, heads_kv: hkv, d_ff: ff } = names;
    let mut b = Builder::new(dtype);
    if declare_ffn {
        b.comp.declare_role(ff, IndexRole::FfnHidden).unwrap();
    }
    let x = b.input("x", &[(tok, tokens), ("d_model", d_model)]);
    let norm = b.input("norm", &[("d_model", d_model)]);
    let wq = b.input("wq", &[("d_model", d_model), (hq, heads_q), ("d_head", d_head)]);
    let wk = b.input("wk", &[("d_model", d_model), (hkv, heads_kv), ("d_head", d_head)]);
    let wv = b.input("wv", &[("d_model", d_model), (hkv, heads_kv), ("d_head", d_head)]);
    let wo = b.input("wo", &[(hq, heads_q), ("d_head", d_head), ("d_model", d_model)]);
    let w_up = b.input("w_up", &[("d_model", d_model), (ff, d_ff)]);
    let w_down = b.input("w_down", &[(ff, d_ff), ("d_model", d_model)]);
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

/// A two-layer FFN `relu(x·w1)·w2` over `tokens`, `d_model` and `d_ff`, declaring the
/// roles `roles` gives.
fn ffn(roles: &[(&str, IndexRole)]) -> Computation {
    let mut b = Builder::new(DType::F32);
    for &(name, role) in roles {
        b.comp.declare_role(name, role).unwrap();
    }
    let x = b.input("x", &[("tokens", 16), ("d_model", 8)]);
    let w1 = b.input("w1", &[("d_model", 8), ("d_ff", 32)]);
    let w2 = b.input("w2", &[("d_ff", 32), ("d_model", 8)]);
    let up = b.einsum("up", "td,df->tf", &[x, w1]);
    let act = b.op("relu", Unary::new(&b.desc(up), UnaryOp::Relu).unwrap(), &[up]);
    let down = b.einsum("down", "tf,fd->td", &[act, w2]);
    b.comp.save(down).unwrap();
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
/// DP's attention half is the Ulysses shape: every projection by tokens, attention by
/// `heads_kv`, and its plan costs no more than Ulysses' in the model. (Its FFN splits the
/// tokens 4 and `d_ff` 2 ways: the down projection's 1024 rows per device of a token split
/// make 256 output tiles, 2.37 waves on the A100's 108 SMs (79% of the roofline), and 2048
/// rows make 512, 4.74 waves (95%); the model sees the waves, and the whole-plan refinement,
/// not this test, decides whether the aggregation that split needs is worth them.)
/// Charging the weights' join (as the model did before) makes replicating them look
/// expensive, and the DP splits the projections' model dimensions instead. Pricing only
/// enumerates specs, so the real sizes allocate nothing. (At toy sizes such as
/// `d_head = 4`, attention's compute is so small that a query-block split wins instead: the
/// proportions matter.)
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
    for op in ["norm", "q", "k", "v", "wo", "residual", "residual2"] {
        assert_chose(&problem, &choice, "dp", op, &[("tokens", 8)]);
    }
    assert_chose(&problem, &choice, "dp", "attention", &[("heads_kv", 8)]);
    for op in ["up", "silu", "down"] {
        assert_chose(&problem, &choice, "dp", op, &[("tokens", 4), ("d_ff", 2)]);
    }
    let ulysses = Ulysses.solve(&problem).unwrap();
    let (dp, ul) = (problem.total(&choice).unwrap(), problem.total(&ulysses).unwrap());
    assert!(dp <= ul * (1.0 + 1e-12), "dp {dp} vs ulysses {ul}");

    let charging = Problem::new(&comp, 8, &ChargingWeights(time())).unwrap();
    let choice = Dp.solve(&charging).unwrap();
    for op in ["q", "up"] {
        assert!(!chose(&charging, &choice, op, &[("tokens", 8)]), "{op}: {:?}", splits(&charging, &choice, op));
    }
    // It splits the FFN's hidden index further instead.
    let up = splits(&charging, &choice, "up");
    assert!(up.iter().all(|s| s.iter().any(|(n, k)| n == "d_ff" && *k > 2)), "up: {up:?}");
}

/// Per operator (by name), the sorted count vectors of its chosen spec, as [`splits`] gives.
type PlanSplits = Vec<(String, Vec<Vec<(String, usize)>>)>;

/// The splits of every operator's chosen spec, with the index names translated to
/// [`STANDARD`]'s, each as a sorted set of sorted count vectors.
fn standard_splits(problem: &Problem, choice: &[usize], names: Names) -> PlanSplits {
    problem
        .ops
        .iter()
        .map(|op| {
            let mut all: Vec<Vec<(String, usize)>> = splits(problem, choice, &op.name)
                .into_iter()
                .map(|s| {
                    let mut s: Vec<(String, usize)> = s
                        .into_iter()
                        .map(|(n, k)| {
                            let standard =
                                ["tokens", "heads_q", "heads_kv", "d_ff"].into_iter().find(|x| names.of(x) == n);
                            (standard.map_or(n, str::to_string), k)
                        })
                        .collect();
                    s.sort();
                    s
                })
                .collect();
            all.sort();
            (op.name.clone(), all)
        })
        .collect()
}

/// A block whose indices are named `seq`, `qh`, `kvh`, `hidden` but carry the same roles
/// (attention declares the first three, the builder the last) gets, under every baseline,
/// the plan the standard names get: the same splits of the same indices and the same cost.
#[test]
fn renamed_indices_with_the_same_roles_get_the_same_plans() {
    for (tokens, seqs, heads_q, heads_kv, p) in [(16, 4, 4, 2, 4), (16, 1, 4, 4, 4), (12, 3, 4, 2, 2), (16, 2, 8, 4, 8)]
    {
        let dims = dims_of(tokens, seqs, heads_q, heads_kv);
        let standard = Problem::new(&block_named(dims, STANDARD, true), p, &time()).unwrap();
        let renamed = Problem::new(&block_named(dims, RENAMED, true), p, &time()).unwrap();
        for strategy in [&Data as &dyn LogicalOptimizer, &Megatron, &Ulysses, &Mesh2d] {
            let (a, b) = (strategy.solve(&standard).unwrap(), strategy.solve(&renamed).unwrap());
            assert_eq!(
                standard_splits(&standard, &a, STANDARD),
                standard_splits(&renamed, &b, RENAMED),
                "{} on p = {p}, {seqs} sequences, {heads_kv} kv heads",
                strategy.name()
            );
            assert_eq!(standard.total(&a).unwrap(), renamed.total(&b).unwrap(), "{}", strategy.name());
        }
    }
    // The renamed FFN is split over `hidden` by Megatron, as the standard one over `d_ff`.
    let renamed = Problem::new(&block_named(dims_of(16, 1, 4, 4), RENAMED, true), 4, &time()).unwrap();
    let choice = Megatron.solve(&renamed).unwrap();
    assert_chose(&renamed, &choice, "megatron", "up", &[("hidden", 4)]);
    assert_chose(&renamed, &choice, "megatron", "q", &[("qh", 4)]);
    assert_chose(&renamed, &choice, "megatron", "attention", &[("kvh", 4)]);
    assert_chose(&renamed, &choice, "megatron", "norm", &[("seq", 4)]);
}

/// Where a role is not declared, the rules fall back as `baselines` documents: `data`
/// row-shards (the output's first dimension), `megatron` leaves operators without a
/// tensor-parallel role to the `data` rule and refuses a graph with none, naming the roles,
/// and `ulysses` refuses a graph without attention.
#[test]
fn without_declared_roles_the_baselines_fall_back_as_documented() {
    // An FFN with no role: `data` splits the output rows (here the tokens) anyway ...
    let bare = Problem::new(&ffn(&[]), 4, &PaperProxy).unwrap();
    assert!(bare.ops.iter().all(|op| op.roles.iter().all(Option::is_none) && op.op_role.is_none()));
    let choice = Data.solve(&bare).unwrap();
    for op in ["up", "relu", "down"] {
        assert_chose(&bare, &choice, "data", op, &[("tokens", 4)]);
    }
    // ... `megatron` has no tensor-parallel region and says which roles it looked for ...
    match Megatron.solve(&bare) {
        Err(e @ Error::Baseline { .. }) => {
            let msg = e.to_string();
            assert!(msg.contains("megatron") && msg.contains("the graph"), "{msg}");
            assert!(msg.contains("`ffn_hidden`") && msg.contains("`heads_kv`") && msg.contains("`heads_q`"), "{msg}");
        }
        other => panic!("megatron on an FFN without roles: {other:?}"),
    }
    // ... and `ulysses` has no attention.
    assert!(matches!(Ulysses.solve(&bare), Err(Error::Baseline { strategy: "ulysses", .. })));

    // Declaring the roles makes the FFN Megatron's: column- then row-parallel over d_ff.
    let declared = ffn(&[("tokens", IndexRole::Tokens), ("d_ff", IndexRole::FfnHidden)]);
    let declared = Problem::new(&declared, 4, &PaperProxy).unwrap();
    let choice = Megatron.solve(&declared).unwrap();
    for op in ["up", "relu", "down"] {
        assert_chose(&declared, &choice, "megatron", op, &[("d_ff", 4)]);
    }
    assert_eq!(Data.solve(&declared).unwrap(), Data.solve(&bare).unwrap());

    // A block whose FFN hidden index is not declared: attention and the projections still
    // follow Megatron (attention declares the heads), the FFN follows `data` (by tokens).
    let problem = Problem::new(&block_named(dims_of(16, 1, 4, 4), RENAMED, false), 4, &time()).unwrap();
    let choice = Megatron.solve(&problem).unwrap();
    assert_chose(&problem, &choice, "megatron", "attention", &[("kvh", 4)]);
    assert_chose(&problem, &choice, "megatron", "wo", &[("qh", 4)]);
    for op in ["up", "silu", "down"] {
        assert_chose(&problem, &choice, "megatron", op, &[("seq", 4)]);
    }
}

/// A name declared with two roles is a typed error, whoever declares them: the builder
/// twice, or the builder and an operator (attention declares its sequence `tokens`).
#[test]
fn conflicting_role_declarations_are_typed_errors() {
    let mut comp = Computation::new();
    comp.declare_role("tokens", IndexRole::FfnHidden).unwrap();
    let err = comp.declare_role("tokens", IndexRole::Tokens).unwrap_err();
    assert!(matches!(err, einsum_joinagg::Error::RoleConflict { .. }), "{err}");

    let mut b = Builder::new(DType::F32);
    b.comp.declare_role("tokens", IndexRole::FfnHidden).unwrap();
    let q = b.input("q", &[("heads_q", 4), ("tokens", 8), ("d_head", 4)]);
    let k = b.input("k", &[("heads_kv", 2), ("tokens", 8), ("d_head", 4)]);
    let att = Attention::new(&b.desc(q), &b.desc(k), &b.desc(k), AttentionConfig::new(true, Packing::single(8)));
    let err = b.comp.add_op("attention", Box::new(att.unwrap()), &[q, k, k]).unwrap_err();
    match &err {
        einsum_joinagg::Error::RoleConflict { index, first, second, .. } => {
            assert_eq!((index.as_str(), *first, *second), ("tokens", IndexRole::FfnHidden, IndexRole::Tokens));
        }
        other => panic!("expected a role conflict, got {other:?}"),
    }
    let msg = err.to_string();
    assert!(msg.contains("operator `attention`") && msg.contains("builder"), "{msg}");
}

//! The hand-designed baselines end to end: each compiles a small LLaMA block and a matrix
//! chain to valid specs, runs on the CPU backend and matches the single-device reference;
//! their plans follow their rules, which read the roles the graph declares, not its index
//! names; the CLI selects them and refuses graphs they do not apply to with a clear error.

use std::{process::Command, sync::Arc};

use einsum_core::scaled_error;
use einsum_graph::Error as GraphError;
use einsum_joinagg::validate_spec;
use einsum_logical::{LogicalOptimizer, Problem};
use einsummable::names::{cost_model_by_name, optimizer_by_name};
use einsummable::{
    AttentionConfig, BinaryOp, CompileOptions, DType, Error, Graph, IndexRole, Packing, UnaryOp, Workload, compile,
};

const SMALL_LLAMA: &str = "llama-block:tokens=32,seqs=4,d_model=16,heads_q=4,heads_kv=2,d_head=4,d_ff=32";
const CHAIN: &str = "chain-c:scale=1024";

fn einsummable(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_einsummable")).args(args).output().expect("the binary runs")
}

/// The strategy of the `optimizers` table called `name`.
fn named(name: &str) -> Arc<dyn LogicalOptimizer> {
    Arc::from(optimizer_by_name(name, 0).unwrap())
}

fn graph(workload: &str) -> Graph {
    Workload::parse(workload).unwrap().build(DType::F32).unwrap()
}

/// Compiles `graph` under `optimizer` on `devices`, checks every chosen spec against its
/// operator, runs it on the CPU backend and returns the largest error of the saved outputs
/// against `Computation::evaluate` on the same inputs.
fn run_and_compare(graph: &Graph, optimizer: &str, devices: usize, cost: &str) -> f32 {
    let options = CompileOptions {
        devices,
        optimizer: named(optimizer),
        cost: Some(Arc::from(cost_model_by_name(cost, "dgx-a100").unwrap())),
        // The specs are checked against the graph as written.
        rewrites: false,
        ..CompileOptions::default()
    };
    let mut exe = compile(graph, &options).unwrap_or_else(|e| panic!("{optimizer} on {devices}: {e}"));
    let plan = exe.plan();
    assert_eq!(plan.optimizer, optimizer);
    let comp = graph.computation();
    for planned in &plan.ops {
        let (_, op, _) = comp.ops().find(|(id, _, _)| *id == planned.id).expect("planned operator");
        validate_spec(op, &planned.spec, Some(devices))
            .unwrap_or_else(|e| panic!("{optimizer}: {}: {e}", planned.name));
    }
    exe.load_random(devices as u64 + 11).unwrap();
    exe.execute().unwrap();
    let reference = comp.evaluate(&exe.loaded_inputs()).unwrap();
    reference.iter().map(|(t, r)| scaled_error(&exe.outputs()[t], r, 1.0)).fold(0.0, f32::max)
}

#[test]
fn every_baseline_runs_a_llama_block_correctly() {
    let graph = graph(SMALL_LLAMA);
    for optimizer in ["data", "megatron", "ulysses", "mesh2d"] {
        for devices in [2, 4] {
            let err = run_and_compare(&graph, optimizer, devices, "time");
            assert!(err <= 1e-4, "{optimizer} on {devices} devices: error {err}");
        }
    }
}

#[test]
fn data_and_mesh2d_run_a_chain_correctly() {
    let graph = graph(CHAIN);
    for optimizer in ["data", "mesh2d"] {
        for (devices, cost) in [(4, "time"), (2, "proxy")] {
            let err = run_and_compare(&graph, optimizer, devices, cost);
            assert!(err <= 1e-4, "{optimizer} on {devices} devices: error {err}");
        }
    }
}

#[test]
fn megatron_and_ulysses_refuse_a_chain() {
    let graph = graph(CHAIN);
    for optimizer in ["megatron", "ulysses"] {
        let options = CompileOptions { devices: 4, optimizer: named(optimizer), ..CompileOptions::default() };
        match compile(&graph, &options) {
            Err(e @ Error::Logical(einsum_logical::Error::Baseline { .. })) => {
                let msg = e.to_string();
                assert!(msg.contains(optimizer) && msg.contains("the graph"), "{msg}");
            }
            Err(e) => panic!("{optimizer}: unexpected error {e}"),
            Ok(_) => panic!("{optimizer} planned a matrix chain"),
        }
    }
}

#[test]
fn plans_follow_their_rules_on_the_llama_block() {
    let graph = graph(SMALL_LLAMA);
    let plan = |optimizer: &str| {
        // The rules are checked on the graph as written (a fused residual add is no matmul).
        let options =
            CompileOptions { devices: 4, optimizer: named(optimizer), rewrites: false, ..CompileOptions::default() };
        compile(&graph, &options).unwrap().plan().clone()
    };
    // Ulysses: attention by heads (two key/value heads, the remaining factor by sequence),
    // projections and everything else by tokens.
    let ulysses = plan("ulysses");
    for op in &ulysses.ops {
        if op.kind == "attention" {
            assert_eq!(op.split("heads_kv"), 2, "{}", op.splits_label());
        } else {
            assert_eq!(op.split("tokens"), 4, "{}: {}", op.name, op.splits_label());
        }
    }
    // Megatron: the FFN down projection (the matmul that reads d_ff and writes d_model)
    // is row-parallel over d_ff, so it aggregates; gate and up are column-parallel.
    let megatron = plan("megatron");
    let matmuls: Vec<_> = megatron.ops.iter().filter(|o| o.kind == "matmul").collect();
    assert_eq!(matmuls.len(), 3);
    for m in &matmuls {
        assert_eq!(m.split("d_ff"), 4, "{}: {}", m.name, m.splits_label());
    }
    let down = matmuls.last().unwrap();
    assert!(down.cost.aggregation > 0.0, "the down projection does not aggregate");
    assert!(matmuls[..2].iter().all(|m| m.cost.aggregation == 0.0));
    // Data: every operator outside attention by tokens; four sequences on four devices.
    let data = plan("data");
    assert!(data.ops.iter().filter(|o| o.kind != "attention").all(|o| o.split("tokens") == 4));
    // mesh2d at p = 4 never splits an index other than whole onto the mesh.
    let mesh = plan("mesh2d");
    for op in &mesh.ops {
        let mut counts: Vec<usize> = op.splits.iter().map(|(_, c)| *c).filter(|&c| c > 1).collect();
        counts.sort_unstable();
        assert!(counts == [4] || counts == [2, 2], "{}: {}", op.name, op.splits_label());
    }
}

#[test]
fn the_cli_plans_with_a_baseline_and_explains_a_refusal() {
    let out = einsummable(&["plan", SMALL_LLAMA, "--optimizer", "megatron", "--devices", "4", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["optimizer"], "megatron");
    let ops = v["ops"].as_array().unwrap();
    let attention = ops.iter().find(|o| o["kind"] == "attention").unwrap();
    assert_eq!(attention["splits"]["heads_kv"], 2);

    let out = einsummable(&["plan", CHAIN, "--optimizer", "ulysses", "--devices", "4", "--json"]);
    assert!(!out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let msg = v["error"].as_str().unwrap();
    assert!(msg.contains("ulysses") && msg.contains("no attention operator"), "{msg}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.starts_with("error: the ulysses baseline"), "{err}");

    let out = einsummable(&["plan", "matmul:n=64", "--optimizer", "tensor"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("data, megatron, ulysses, mesh2d"), "{err}");
}

/// [`SMALL_LLAMA`]'s block built with the graph builder, its indices called `tokens`,
/// `heads_q`, `heads_kv`, `d_ff` renamed by `rename`; the FFN hidden index is declared as
/// such (attention declares the rest).
fn llama_block_named(rename: &dyn Fn(&str) -> String) -> Graph {
    let (tokens, seqs, d_model, heads_q, heads_kv, d_head, d_ff) = (32, 4, 16, 4, 2, 4, 32);
    let (t, hq, hkv, f) = (rename("tokens"), rename("heads_q"), rename("heads_kv"), rename("d_ff"));
    let dt = DType::F32;
    let mut g = Graph::new();
    g.role(&f, IndexRole::FfnHidden).unwrap();
    let x = g.input("x", &[(&t, tokens), ("d_model", d_model)], dt).unwrap();
    let norm1 = g.input("attn_norm", &[("d_model", d_model)], dt).unwrap();
    let wq = g.input("wq", &[("d_model", d_model), (&hq, heads_q), ("d_head", d_head)], dt).unwrap();
    let wk = g.input("wk", &[("d_model", d_model), (&hkv, heads_kv), ("d_head", d_head)], dt).unwrap();
    let wv = g.input("wv", &[("d_model", d_model), (&hkv, heads_kv), ("d_head", d_head)], dt).unwrap();
    let wo = g.input("wo", &[(&hq, heads_q), ("d_head", d_head), ("d_model", d_model)], dt).unwrap();
    let norm2 = g.input("ffn_norm", &[("d_model", d_model)], dt).unwrap();
    let w_gate = g.input("w_gate", &[("d_model", d_model), (&f, d_ff)], dt).unwrap();
    let w_up = g.input("w_up", &[("d_model", d_model), (&f, d_ff)], dt).unwrap();
    let w_down = g.input("w_down", &[(&f, d_ff), ("d_model", d_model)], dt).unwrap();
    let packing = Packing::uniform(seqs, tokens / seqs).unwrap();
    let h = g.rmsnorm(x, norm1, "d_model", 1e-5).unwrap();
    let q = g.einsum("td,dhe->hte", &[h, wq]).unwrap();
    let k = g.einsum("td,dhe->hte", &[h, wk]).unwrap();
    let v = g.einsum("td,dhe->hte", &[h, wv]).unwrap();
    let q = g.rope(q, &t, "d_head", 500_000.0, packing.clone()).unwrap();
    let k = g.rope(k, &t, "d_head", 500_000.0, packing.clone()).unwrap();
    let a = g.attention(q, k, v, &t, "d_head", AttentionConfig::new(true, packing)).unwrap();
    let o = g.einsum("hte,hed->td", &[a, wo]).unwrap();
    let x = g.binary(x, o, BinaryOp::Add).unwrap();
    let h = g.rmsnorm(x, norm2, "d_model", 1e-5).unwrap();
    let gate = g.matmul(h, w_gate).unwrap();
    let up = g.matmul(h, w_up).unwrap();
    let gate = g.unary(gate, UnaryOp::Silu).unwrap();
    let act = g.binary(gate, up, BinaryOp::Mul).unwrap();
    let down = g.matmul(act, w_down).unwrap();
    let y = g.binary(x, down, BinaryOp::Add).unwrap();
    g.save(y).unwrap();
    g
}

/// Every operator's chosen splits under `optimizer` on 4 devices, by node name, with the
/// index names passed through `back` (to compare graphs that name their indices apart).
fn plan_splits(graph: &Graph, optimizer: &str, back: &dyn Fn(&str) -> String) -> Vec<(String, Vec<(String, usize)>)> {
    let cost = cost_model_by_name("time", "dgx-a100").unwrap();
    let problem = Problem::new(graph.computation(), 4, cost.as_ref()).unwrap();
    let choice = named(optimizer).solve(&problem).unwrap_or_else(|e| panic!("{optimizer}: {e}"));
    let plan = problem.plan(&choice, optimizer).unwrap();
    plan.ops
        .iter()
        .map(|op| {
            let mut splits: Vec<(String, usize)> =
                op.splits.iter().filter(|(_, c)| *c > 1).map(|(n, c)| (back(n), *c)).collect();
            splits.sort();
            (op.name.clone(), splits)
        })
        .collect()
}

/// The builder's block with the standard names plans exactly like the named workload, and
/// the same block with its indices named `seq`, `qh`, `kvh`, `hidden` (same roles) plans
/// the same under every baseline.
#[test]
fn baselines_read_roles_not_index_names() {
    let renames = [("tokens", "seq"), ("heads_q", "qh"), ("heads_kv", "kvh"), ("d_ff", "hidden")];
    let same = |n: &str| n.to_string();
    let to = |n: &str| renames.iter().find(|(a, _)| *a == n).map_or(n, |(_, b)| b).to_string();
    let back = |n: &str| renames.iter().find(|(_, b)| *b == n).map_or(n, |(a, _)| a).to_string();
    let workload = graph(SMALL_LLAMA);
    let standard = llama_block_named(&same);
    let renamed = llama_block_named(&to);
    for optimizer in ["data", "megatron", "ulysses", "mesh2d"] {
        let want = plan_splits(&workload, optimizer, &same);
        assert_eq!(plan_splits(&standard, optimizer, &same), want, "{optimizer}: the builder's block");
        assert_eq!(plan_splits(&renamed, optimizer, &back), want, "{optimizer}: the renamed block");
    }
    // Megatron splits the renamed FFN's hidden index, which only its declared role names.
    let megatron = plan_splits(&renamed, "megatron", &same);
    let matmuls: Vec<_> = megatron.iter().filter(|(name, _)| name.starts_with("matmul")).collect();
    assert_eq!(matmuls.len(), 3);
    assert!(matmuls.iter().all(|(_, s)| s == &[("hidden".to_string(), 4)]), "{matmuls:?}");
}

/// The named workloads declare what the baselines need: the FFN its token and hidden
/// indices (Megatron is column- then row-parallel over `d_ff`), the LLaMA stacks with the
/// model head their FFN hidden index.
#[test]
fn named_workloads_declare_their_roles() {
    let ffn = graph("ffn:tokens=16,d_model=8,d_ff=32");
    let roles = ffn.computation().roles();
    assert_eq!((roles.get("tokens"), roles.get("d_ff")), (Some(IndexRole::Tokens), Some(IndexRole::FfnHidden)));
    let megatron = plan_splits(&ffn, "megatron", &|n: &str| n.to_string());
    assert!(megatron.iter().all(|(_, s)| s == &[("d_ff".to_string(), 4)]), "{megatron:?}");
    let stack = graph("llama3-8b:layers=2,tokens=32,d_model=16,heads_q=4,heads_kv=2,d_head=4,d_ff=32,vocab=8");
    let roles = stack.computation().roles();
    for (name, role) in [
        ("tokens", IndexRole::Tokens),
        ("heads_q", IndexRole::HeadsQ),
        ("heads_kv", IndexRole::HeadsKv),
        ("d_ff", IndexRole::FfnHidden),
    ] {
        assert_eq!(roles.get(name), Some(role), "{name}");
    }
}

/// `Graph::role` refuses a second, different role for a name, and an operator whose own
/// roles contradict the builder's is refused when added; both name the index.
#[test]
fn conflicting_roles_are_errors_of_the_graph() {
    let mut g = Graph::new();
    g.role("tokens", IndexRole::FfnHidden).unwrap();
    g.role("tokens", IndexRole::FfnHidden).unwrap();
    let err = g.role("tokens", IndexRole::Tokens).unwrap_err();
    assert!(matches!(err, GraphError::Role(einsum_joinagg::Error::RoleConflict { .. })), "{err}");
    assert!(err.to_string().contains("`tokens`"), "{err}");
    let q = g.input("q", &[("heads_q", 4), ("tokens", 8), ("d_head", 4)], DType::F32).unwrap();
    let k = g.input("k", &[("heads_kv", 2), ("tokens", 8), ("d_head", 4)], DType::F32).unwrap();
    let err = g.attention(q, k, k, "tokens", "d_head", AttentionConfig::new(true, Packing::single(8))).unwrap_err();
    match &err {
        GraphError::Build { node, source: einsum_joinagg::Error::RoleConflict { index, .. } } => {
            assert!(node.starts_with("attention") && index == "tokens", "{err}");
        }
        other => panic!("expected a role conflict, got {other}"),
    }
}

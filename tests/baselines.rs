//! The hand-designed baselines end to end: each compiles a small LLaMA block and a matrix
//! chain to valid specs, runs on the CPU backend and matches the single-device reference;
//! their plans follow their rules; the CLI selects them and refuses graphs they do not
//! apply to with a clear error.

use std::{process::Command, sync::Arc};

use einsum_core::scaled_error;
use einsum_joinagg::validate_spec;
use einsum_logical::{LogicalOptimizer, cost_model_by_name, optimizer_by_name};
use einsummable::{CompileOptions, DType, Error, Graph, Workload, compile};

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
        let options = CompileOptions { devices: 4, optimizer: named(optimizer), ..CompileOptions::default() };
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

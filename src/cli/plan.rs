//! `einsummable plan`: the logical plan of a workload, compiled physically (exchange
//! programs and task graph, nothing executed) for its predicted time and bytes moved.

use std::time::Instant;

use einsum_exprog::{CompileError, CompileOptions};
use einsum_logical::{cost_model_by_name, optimizer_by_name};
use einsum_sim::Topology;
use einsummable::{Result, Workload};
use serde_json::{Value, json};

use super::{Report, parse_dtype, parse_schedule};

/// Arguments of `plan`.
#[derive(clap::Args)]
pub struct Args {
    /// The workload, `name:key=value,...`.
    workload: String,
    /// Number of devices p.
    #[arg(long, default_value_t = 8)]
    devices: usize,
    /// The strategy: dp, greedy, random or ilp, or a baseline: data, megatron, ulysses or mesh2d.
    #[arg(long, default_value = "dp")]
    optimizer: String,
    /// The cost model: time (predicted seconds) or proxy (the paper's element count).
    #[arg(long, default_value = "time")]
    cost: String,
    /// The machine the time model and the prediction target: a preset or a topology file.
    #[arg(long, default_value = "dgx-a100")]
    topology: String,
    /// Exchange programs of the physical compilation: naive or search.
    #[arg(long, default_value = "naive")]
    schedule: String,
    /// Search iterations per exchange program (with --schedule search).
    #[arg(long, default_value_t = 50)]
    iterations: usize,
    /// Seed of the random strategy and of the search.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Storage dtype: f32, f16 or bf16.
    #[arg(long, default_value = "f16")]
    dtype: String,
}

/// What physical compilation of the plan gave: a prediction, or why the plan cannot be
/// compiled on this machine.
enum Physical {
    /// Predicted ms, bytes moved between devices, compile wall time in ms.
    Predicted { predicted_ms: f64, bytes_moved: usize, compile_ms: f64 },
    /// The plan is valid but does not compile on the topology (too few sites, or a device's
    /// peak memory over its HBM): the reason.
    Refused(String),
}

/// Runs `plan`.
pub fn run(a: Args) -> Result<Report> {
    let graph = Workload::parse(&a.workload)?.build(parse_dtype(&a.dtype)?)?;
    let strategy = optimizer_by_name(&a.optimizer, a.seed)?;
    // The topology first: a missing file is reported as such, not as an unknown preset.
    let topology = Topology::named(&a.topology)?;
    let model = cost_model_by_name(&a.cost, &a.topology)?;
    let schedule = parse_schedule(&a.schedule, a.seed, a.iterations)?;
    let started = Instant::now();
    let plan = strategy.optimize(graph.computation(), a.devices, model.as_ref())?;
    let optimize_ms = started.elapsed().as_secs_f64() * 1e3;

    let options = CompileOptions { devices: a.devices, schedule, topology, memory_budget: None };
    let started = Instant::now();
    let physical = match einsum_exprog::compile(graph.computation(), &plan.specs(), &options) {
        Ok(c) => Physical::Predicted {
            predicted_ms: c.predicted_ms,
            bytes_moved: c.graph.stats().bytes_moved,
            compile_ms: started.elapsed().as_secs_f64() * 1e3,
        },
        Err(e @ (CompileError::TopologyTooSmall { .. } | CompileError::OutOfMemory { .. })) => {
            Physical::Refused(e.to_string())
        }
        Err(e) => return Err(e.into()),
    };

    let mut text = format!(
        "{} on {} devices: {} optimizer, {} cost ({}), {optimize_ms:.1} ms\n",
        a.workload, a.devices, a.optimizer, a.cost, plan.unit
    );
    text += &format!(
        "{:<16} {:<10} {:<28} {:>11} {:>11} {:>11} {:>11}\n",
        "operator", "kind", "split", "repartition", "join", "aggregation", "compute"
    );
    for o in &plan.ops {
        let c = &o.cost;
        text += &format!(
            "{:<16} {:<10} {:<28} {:>11.4e} {:>11.4e} {:>11.4e} {:>11.4e}\n",
            o.name,
            o.kind,
            o.splits_label(),
            c.repartition,
            c.join,
            c.aggregation,
            c.compute
        );
    }
    text += &format!("total {:.6e} {} ({:.4e} bytes moved)\n", plan.total, plan.unit, plan.total_bytes);
    text += &match &physical {
        Physical::Predicted { predicted_ms, bytes_moved, compile_ms } => format!(
            "compiled ({} schedule, {compile_ms:.1} ms): predicted {predicted_ms:.6} ms on {}, {bytes_moved} bytes moved\n",
            a.schedule, a.topology
        ),
        Physical::Refused(why) => format!("not compiled: {why}\n"),
    };

    let ops: Vec<Value> = plan
        .ops
        .iter()
        .map(|o| {
            let splits: serde_json::Map<String, Value> = o.splits.iter().map(|(n, c)| (n.clone(), json!(c))).collect();
            let c = &o.cost;
            json!({
                "name": o.name, "kind": o.kind, "splits": splits,
                "cost": {"repartition": c.repartition, "join": c.join, "aggregation": c.aggregation,
                         "compute": c.compute, "bytes": c.bytes},
            })
        })
        .collect();
    let (predicted_ms, bytes_moved, compile_ms, compile_error) = match physical {
        Physical::Predicted { predicted_ms, bytes_moved, compile_ms } => {
            (json!(predicted_ms), json!(bytes_moved), json!(compile_ms), Value::Null)
        }
        Physical::Refused(why) => (Value::Null, Value::Null, Value::Null, json!(why)),
    };
    let json = json!({
        "workload": a.workload, "devices": a.devices, "optimizer": a.optimizer, "cost_model": a.cost,
        "unit": plan.unit, "total_cost": plan.total, "total_bytes": plan.total_bytes,
        "optimize_ms": optimize_ms, "ops": ops, "topology": a.topology, "schedule": a.schedule,
        "predicted_ms": predicted_ms, "bytes_moved": bytes_moved, "compile_ms": compile_ms,
        "compile_error": compile_error,
    });
    Ok(Report { json, text, ok: true })
}

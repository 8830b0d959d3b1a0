//! `einsummable plan`: the logical plan of a workload.

use std::time::Instant;

use einsum_logical::{cost_model_by_name, optimizer_by_name};
use einsummable::{Result, Workload};
use serde_json::{Value, json};

use super::{Report, parse_dtype};

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
    /// The machine the time model predicts for: a preset or a topology file.
    #[arg(long, default_value = "dgx-a100")]
    topology: String,
    /// Seed of the random strategy.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Storage dtype: f32, f16 or bf16.
    #[arg(long, default_value = "f16")]
    dtype: String,
}

/// Runs `plan`.
pub fn run(a: Args) -> Result<Report> {
    let graph = Workload::parse(&a.workload)?.build(parse_dtype(&a.dtype)?)?;
    let strategy = optimizer_by_name(&a.optimizer, a.seed)?;
    let model = cost_model_by_name(&a.cost, &a.topology)?;
    let started = Instant::now();
    let plan = strategy.optimize(graph.computation(), a.devices, model.as_ref())?;
    let optimize_ms = started.elapsed().as_secs_f64() * 1e3;

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
    let json = json!({
        "workload": a.workload, "devices": a.devices, "optimizer": a.optimizer, "cost_model": a.cost,
        "unit": plan.unit, "total_cost": plan.total, "total_bytes": plan.total_bytes,
        "optimize_ms": optimize_ms, "ops": ops,
    });
    Ok(Report { json, text, ok: true })
}

//! The `einsummable` command line.

use std::{process::ExitCode, time::Instant};

use clap::{Parser, Subcommand};
use einsum_joinagg::enumerate_specs;
use einsum_logical::{cost_model_by_name, optimizer_by_name};
use einsummable::{DType, Error, Result, Workload, check::check_computation};
use serde_json::{Value, json};

/// Automatic multi-device parallelism for AI computations (join-agg specs).
#[derive(Parser)]
#[command(name = "einsummable", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Runs every operator of a workload decomposed over P devices by each of its join-agg
    /// specs, and the whole graph under a random spec per operator, against the
    /// single-device reference on random data.
    Check {
        /// The workload, `name:key=value,...` (matmul, ffn, llama-block, llama).
        workload: String,
        /// Number of devices p.
        #[arg(long, default_value_t = 8)]
        devices: usize,
        /// At most this many specs per operator are run.
        #[arg(long, default_value_t = 16)]
        max_specs: usize,
        /// Seed of the random data and of the random specs.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Storage dtype: f32, f16 or bf16.
        #[arg(long, default_value = "f32")]
        dtype: String,
        /// Print one JSON object on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Chooses a join-agg spec for every operator of a workload (the logical plan) and prints
    /// each operator's split and cost.
    Plan {
        /// The workload, `name:key=value,...`.
        workload: String,
        /// Number of devices p.
        #[arg(long, default_value_t = 8)]
        devices: usize,
        /// The strategy: dp, greedy, random or ilp.
        #[arg(long, default_value = "dp")]
        optimizer: String,
        /// The cost model: time (predicted seconds) or proxy (the paper's element count).
        #[arg(long, default_value = "time")]
        cost: String,
        /// The machine the time model predicts for.
        #[arg(long, default_value = "dgx-a100")]
        topology: String,
        /// Seed of the random strategy.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Storage dtype: f32, f16 or bf16.
        #[arg(long, default_value = "f16")]
        dtype: String,
        /// Print one JSON object on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Lists every join-agg spec each operator of a workload offers on P devices.
    Specs {
        /// The workload, `name:key=value,...`.
        workload: String,
        /// Number of devices p.
        #[arg(long, default_value_t = 8)]
        devices: usize,
        /// Storage dtype: f32, f16 or bf16.
        #[arg(long, default_value = "f32")]
        dtype: String,
        /// Print one JSON object on stdout.
        #[arg(long)]
        json: bool,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let json = match &cli.command {
        Command::Check { json, .. } | Command::Specs { json, .. } | Command::Plan { json, .. } => *json,
    };
    match run(cli.command) {
        Ok((report, text, ok)) => {
            if json {
                println!("{report}");
            } else {
                print!("{text}");
            }
            if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE }
        }
        Err(e) => {
            if json {
                println!("{}", json!({ "error": e.to_string() }));
            }
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Runs a command; returns its JSON report, its human-readable text and whether it passed.
fn run(command: Command) -> Result<(Value, String, bool)> {
    match command {
        Command::Check { workload, devices, max_specs, seed, dtype, .. } => {
            let graph = Workload::parse(&workload)?.build(parse_dtype(&dtype)?)?;
            let report = check_computation(graph.computation(), devices, max_specs, seed)?;
            let mut text = format!("{workload} on {devices} devices ({dtype}), tolerance {:e}\n", report.tolerance);
            text +=
                &format!("{:<16} {:<10} {:>6} {:>8} {:>12}\n", "operator", "kind", "specs", "checked", "max rel err");
            for o in &report.ops {
                text +=
                    &format!("{:<16} {:<10} {:>6} {:>8} {:>12.3e}\n", o.name, o.kind, o.specs, o.checked, o.max_error);
            }
            text += &format!("whole graph, random spec per operator: rel err {:.3e}\n", report.graph_error);
            text += if report.passed() { "PASS\n" } else { "FAIL\n" };
            let ops: Vec<Value> = report
                .ops
                .iter()
                .map(|o| json!({"name": o.name, "kind": o.kind, "specs": o.specs, "checked": o.checked, "max_error": o.max_error}))
                .collect();
            let value = json!({
                "workload": workload, "devices": devices, "dtype": dtype, "tolerance": report.tolerance,
                "ops": ops, "graph_error": report.graph_error, "passed": report.passed(),
            });
            Ok((value, text, report.passed()))
        }
        Command::Plan { workload, devices, optimizer, cost, topology, seed, dtype, .. } => {
            let graph = Workload::parse(&workload)?.build(parse_dtype(&dtype)?)?;
            let strategy = optimizer_by_name(&optimizer, seed)?;
            let model = cost_model_by_name(&cost, &topology)?;
            let started = Instant::now();
            let plan = strategy.optimize(graph.computation(), devices, model.as_ref())?;
            let optimize_ms = started.elapsed().as_secs_f64() * 1e3;
            let mut text = format!(
                "{workload} on {devices} devices: {optimizer} optimizer, {cost} cost ({}), {optimize_ms:.1} ms\n",
                plan.unit
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
                    let splits: serde_json::Map<String, Value> =
                        o.splits.iter().map(|(n, c)| (n.clone(), json!(c))).collect();
                    let c = &o.cost;
                    json!({
                        "name": o.name, "kind": o.kind, "splits": splits,
                        "cost": {"repartition": c.repartition, "join": c.join, "aggregation": c.aggregation,
                                 "compute": c.compute, "bytes": c.bytes},
                    })
                })
                .collect();
            let value = json!({
                "workload": workload, "devices": devices, "optimizer": optimizer, "cost_model": cost,
                "unit": plan.unit, "total_cost": plan.total, "total_bytes": plan.total_bytes,
                "optimize_ms": optimize_ms, "ops": ops,
            });
            Ok((value, text, true))
        }
        Command::Specs { workload, devices, dtype, .. } => {
            let graph = Workload::parse(&workload)?.build(parse_dtype(&dtype)?)?;
            let comp = graph.computation();
            let mut text = String::new();
            let mut ops = Vec::new();
            for (id, op, _) in comp.ops() {
                let name = comp.node(id).map_or("", |n| n.name());
                let shardable = op.shardable();
                let specs = enumerate_specs(op, devices)?;
                text += &format!("{name} ({}): {} specs\n", op.kind(), specs.len());
                let mut listed = Vec::new();
                for choice in &specs {
                    let splits: Vec<String> = shardable
                        .iter()
                        .zip(&choice.counts)
                        .filter(|(_, c)| **c > 1)
                        .map(|(s, c)| format!("{}={c}", s.name))
                        .collect();
                    let flops: Vec<f64> = choice.spec.functions.iter().map(|f| op.flops(f)).collect();
                    let (lo, hi) = flops.iter().fold((f64::INFINITY, 0.0f64), |(lo, hi), &x| (lo.min(x), hi.max(x)));
                    let blocks = choice.spec.output_blocks(0).len();
                    let splits = if splits.is_empty() { "replicated".to_string() } else { splits.join(" ") };
                    text += &format!("  {splits:<32} output blocks {blocks:>3}  flops/device {lo:.3e}..{hi:.3e}\n");
                    let counts: serde_json::Map<String, Value> =
                        shardable.iter().zip(&choice.counts).map(|(s, c)| (s.name.clone(), json!(c))).collect();
                    listed.push(json!({"splits": counts, "output_blocks": blocks, "min_flops": lo, "max_flops": hi}));
                }
                ops.push(json!({"name": name, "kind": op.kind(), "specs": listed}));
            }
            Ok((json!({"workload": workload, "devices": devices, "ops": ops}), text, true))
        }
    }
}

fn parse_dtype(s: &str) -> Result<DType> {
    s.parse::<DType>().map_err(|e| Error::Usage(e.to_string()))
}

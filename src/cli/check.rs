//! `einsummable check`: decomposed runs against the single-device reference.

use einsummable::{DType, Result, Workload, check::check_computation};
use serde_json::{Value, json};

use super::Report;

/// Arguments of `check`.
#[derive(clap::Args)]
pub struct Args {
    /// The workload, `name:key=value,...` (matmul, ffn, llama-block, llama, chain-a..e).
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
    /// Storage dtype.
    #[arg(long, default_value = "f32", value_parser = super::dtype_names())]
    dtype: DType,
}

/// Runs `check`.
pub fn run(a: Args) -> Result<Report> {
    let graph = Workload::parse(&a.workload)?.build(a.dtype)?;
    let report = check_computation(graph.computation(), a.devices, a.max_specs, a.seed)?;
    let mut text = format!("{} on {} devices ({}), tolerance {:e}\n", a.workload, a.devices, a.dtype, report.tolerance);
    text += &format!("{:<16} {:<10} {:>6} {:>8} {:>12}\n", "operator", "kind", "specs", "checked", "max rel err");
    for o in &report.ops {
        text += &format!("{:<16} {:<10} {:>6} {:>8} {:>12.3e}\n", o.name, o.kind, o.specs, o.checked, o.max_error);
    }
    text += &format!("whole graph, random spec per operator: rel err {:.3e}\n", report.graph_error);
    text += if report.passed() { "PASS\n" } else { "FAIL\n" };
    let ops: Vec<Value> = report
        .ops
        .iter()
        .map(|o| json!({"name": o.name, "kind": o.kind, "specs": o.specs, "checked": o.checked, "max_error": o.max_error}))
        .collect();
    let json = json!({
        "workload": a.workload, "devices": a.devices, "dtype": a.dtype.name(), "tolerance": report.tolerance,
        "ops": ops, "graph_error": report.graph_error, "passed": report.passed(),
    });
    Ok(Report { json, text, ok: report.passed() })
}

//! `einsummable check`: decomposed runs against the single-device reference.

use einsummable::{DType, Result, Workload, check::OpCheck, check::check_computation};
use serde::Serialize;

use super::Report;

/// Arguments of `check`.
#[derive(clap::Args)]
pub struct Args {
    /// The workload, `name:key=value,...` (matmul, ffn, llama-block, llama, chain-a..e).
    workload: String,
    /// Number of devices p.
    #[arg(long, default_value_t = einsummable::DEFAULT_DEVICES)]
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
    let mut text = format!(
        "{} on {} devices ({}), tolerance {:e} per operator, {:.3e} for the whole graph\n",
        a.workload, a.devices, a.dtype, report.tolerance, report.graph_tolerance
    );
    text += &format!("{:<16} {:<10} {:>6} {:>8} {:>12}\n", "operator", "kind", "specs", "checked", "max rel err");
    for o in &report.ops {
        text += &format!("{:<16} {:<10} {:>6} {:>8} {:>12.3e}\n", o.name, o.kind, o.specs, o.checked, o.max_error);
        if let Some(why) = &o.mismatch {
            text += &format!("  {why}\n");
        }
    }
    text += &format!("whole graph, random spec per operator: rel err {:.3e}\n", report.graph_error);
    if let Some(why) = &report.graph_mismatch {
        text += &format!("whole graph: {why}\n");
    }
    text += if report.passed() { "PASS\n" } else { "FAIL\n" };
    let json = CheckJson {
        workload: &a.workload,
        devices: a.devices,
        dtype: a.dtype.name(),
        tolerance: report.tolerance.into(),
        graph_tolerance: report.graph_tolerance.into(),
        ops: report.ops.iter().map(CheckedOp::new).collect(),
        graph_error: report.graph_error.into(),
        graph_mismatch: report.graph_mismatch.as_deref(),
        passed: report.passed(),
    };
    Ok(Report::new(&json, text, report.passed()))
}

/// The `--json` object of `check`: per operator, the largest error of its decomposed runs
/// against the single-device reference, and the error of the whole graph.
#[derive(Serialize)]
pub struct CheckJson<'a> {
    /// The workload as given, `name:key=value,...`.
    pub workload: &'a str,
    /// The number of devices p.
    pub devices: usize,
    /// The storage dtype's name.
    pub dtype: &'static str,
    /// The largest error that passes: that of the least precise dtype among the
    /// operators' outputs (an f32 widened to f64, as are the errors).
    pub tolerance: f64,
    /// The largest error of the whole graph that passes: `tolerance` times the square root
    /// of the graph's depth in operators, as `run --check` holds runs to.
    pub graph_tolerance: f64,
    /// Every operator's checks, in the computation's order.
    pub ops: Vec<CheckedOp<'a>>,
    /// The error of the whole graph under a random spec per operator.
    pub graph_error: f64,
    /// Why the whole graph's outputs fail at any tolerance (an output missing or of
    /// another type, a difference that is not finite), or `null`.
    pub graph_mismatch: Option<&'a str>,
    /// Whether every error is within the tolerance (the exit code is 1 otherwise).
    pub passed: bool,
}

/// One operator of [`CheckJson::ops`].
#[derive(Serialize)]
pub struct CheckedOp<'a> {
    /// The operator's name in the graph.
    pub name: &'a str,
    /// Its kind (`matmul`, `attention`, ...).
    pub kind: &'a str,
    /// How many join-agg specs it offers on p devices.
    pub specs: usize,
    /// How many of them were run (at most `--max-specs`).
    pub checked: usize,
    /// The largest error of the runs against the reference.
    pub max_error: f64,
    /// Why a decomposed run fails at any tolerance (a NaN or an infinity where the
    /// reference has none, or the other way, naming the spec, the output and the element),
    /// or `null`.
    pub mismatch: Option<&'a str>,
}

impl<'a> CheckedOp<'a> {
    fn new(o: &'a OpCheck) -> Self {
        CheckedOp {
            name: &o.name,
            kind: &o.kind,
            specs: o.specs,
            checked: o.checked,
            max_error: o.max_error.into(),
            mismatch: o.mismatch.as_deref(),
        }
    }
}

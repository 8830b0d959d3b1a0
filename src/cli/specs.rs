//! `einsummable specs`: every join-agg spec each operator offers.

use std::collections::BTreeMap;

use einsum_joinagg::enumerate_specs;
use einsummable::{DType, Result, Workload};
use serde::Serialize;

use super::Report;

/// Arguments of `specs`.
#[derive(clap::Args)]
pub struct Args {
    /// The workload, `name:key=value,...`.
    workload: String,
    /// Number of devices p.
    #[arg(long, default_value_t = einsummable::DEFAULT_DEVICES)]
    devices: usize,
    /// Storage dtype.
    #[arg(long, default_value = "f32", value_parser = super::dtype_names())]
    dtype: DType,
}

/// Runs `specs`.
pub fn run(a: Args) -> Result<Report> {
    let graph = Workload::parse(&a.workload)?.build(a.dtype)?;
    let comp = graph.computation();
    let mut text = String::new();
    let mut ops = Vec::new();
    for (id, op, _) in comp.ops() {
        let name = comp.node(id).map_or("", |n| n.name());
        let shardable = op.shardable();
        let specs = enumerate_specs(op, a.devices)?;
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
            let counts = shardable.iter().zip(&choice.counts).map(|(s, c)| (s.name.clone(), *c)).collect();
            listed.push(SpecJson { splits: counts, output_blocks: blocks, min_flops: lo, max_flops: hi });
        }
        ops.push(OperatorSpecs { name: name.to_string(), kind: op.kind().to_string(), specs: listed });
    }
    Ok(Report::new(&SpecsJson { workload: &a.workload, devices: a.devices, ops }, text, true))
}

/// The `--json` object of `specs`: every join-agg spec each operator offers on p devices.
#[derive(Serialize)]
pub struct SpecsJson<'a> {
    /// The workload as given, `name:key=value,...`.
    pub workload: &'a str,
    /// The number of devices p.
    pub devices: usize,
    /// Every operator, in the computation's order.
    pub ops: Vec<OperatorSpecs>,
}

/// One operator of [`SpecsJson::ops`] and its specs.
#[derive(Serialize)]
pub struct OperatorSpecs {
    /// The operator's name in the graph.
    pub name: String,
    /// Its kind (`matmul`, `attention`, ...).
    pub kind: String,
    /// Every spec it offers, in enumeration order.
    pub specs: Vec<SpecJson>,
}

/// One join-agg spec of [`OperatorSpecs::specs`].
#[derive(Serialize)]
pub struct SpecJson {
    /// How many ways each shardable index is split (1 included), by index name.
    pub splits: BTreeMap<String, usize>,
    /// How many distinct output blocks the devices write.
    pub output_blocks: usize,
    /// The fewest flops one device computes.
    pub min_flops: f64,
    /// The most flops one device computes.
    pub max_flops: f64,
}

//! `decode`: one token of generation with a KV cache. The decode step of Llama-3.1-8B and 70B
//! (every layer and the vocabulary head, a cache of 4096 tokens per sequence) at batch 1, 8
//! and 64 is planned by every strategy on one and two DGX H100s and an NVL72 rack, compiled
//! with searched exchange programs and predicted; each row compares the default with tensor
//! parallelism (`megatron`, what decode servers are configured with by hand) and with the
//! best baseline.

use super::transformer::strategies;
use super::{BarChart, Case, Cell, Runner, Setup, Strategy, Table, Target};

/// The machines: (label, topology preset, device count). With `--small` only the first.
const MACHINES: &[(&str, &str, usize)] =
    &[("dgx-h100 p=8", "dgx-h100", 8), ("dgx-h100x2 p=16", "dgx-h100x2", 16), ("nvl72 p=72", "nvl72", 72)];

/// Machines kept with `--small`.
const SMALL_MACHINES: usize = 1;

/// The models: (label, workload, shrunk with `--small`: dimensions /16, two layers, a
/// vocabulary of 8016, a cache of 256).
const MODELS: &[(&str, &str, &str)] = &[
    ("8B", "llama3-8b-decode", "llama-decode:layers=2,d_model=256,heads_q=32,heads_kv=8,d_head=8,d_ff=896,cache=256"),
    (
        "70B",
        "llama3-70b-decode",
        "llama-decode:layers=2,d_model=512,heads_q=64,heads_kv=8,d_head=8,d_ff=1792,cache=256",
    ),
];

/// Sequences per decode step.
const BATCHES: &[usize] = &[1, 8, 64];

/// The grid's workloads as (label, workload).
fn workloads(small: bool) -> Vec<(String, String)> {
    MODELS
        .iter()
        .flat_map(|&(label, full, shrunk)| {
            BATCHES.iter().map(move |b| {
                let spec = if small { format!("{shrunk},batch={b}") } else { format!("{full}:batch={b}") };
                (format!("{label} batch {b}"), spec)
            })
        })
        .collect()
}

fn machines(small: bool) -> &'static [(&'static str, &'static str, usize)] {
    if small { &MACHINES[..SMALL_MACHINES] } else { MACHINES }
}

pub(crate) fn run(setup: &Setup, runner: &mut Runner) -> (Table, BarChart) {
    let workloads = workloads(setup.small);
    let machines: Vec<(&str, Target, usize)> =
        machines(setup.small).iter().map(|&(l, t, p)| (l, setup.preset(t), p)).collect();
    let baselines = strategies().len();
    let strategies = &setup.compared(strategies());
    let megatron = strategies.iter().position(|s| s.name() == "megatron").expect("megatron is a baseline");
    let case = |w: &str, t: &Target, p: usize, s: &Strategy| Case::new(w, p, s, setup.search(), t);
    let cases: Vec<Case> = machines
        .iter()
        .flat_map(|(_, t, p)| {
            workloads.iter().flat_map(move |(_, w)| strategies.iter().map(move |s| case(w, t, *p, s)))
        })
        .collect();
    runner.run_all("decode", &cases);

    let caption = format!(
        "Predicted time (ms) of one decode step (one new token per sequence, attending over a KV cache of {} \
         tokens per sequence) of {}, f16, per batch of sequences, planned by each strategy under the time cost \
         model for the machine and compiled with searched exchange programs ({} iterations per program). \
         `dp / megatron`: the default's time over tensor parallelism's; `dp / best baseline`: over the fastest of \
         data, megatron, ulysses and mesh2d.",
        if setup.small { 256 } else { 4096 },
        if setup.small {
            "two-layer models shrunk by --small (dimensions /16, no vocabulary head), on the first machine"
        } else {
            "Llama-3.1-8B (32 layers) and 70B (80 layers) with their vocabulary heads"
        },
        setup.iterations()
    );
    let mut columns = vec!["machine", "model"];
    columns.extend(strategies.iter().map(Strategy::name));
    columns.extend(["dp / megatron", "dp / best baseline"]);
    let mut table = Table::new("decode", caption, &columns);
    let mut over = Vec::new();
    for (label, t, p) in &machines {
        for (wl, w) in &workloads {
            let results: Vec<_> = strategies.iter().map(|s| runner.get(&case(w, t, *p, s))).collect();
            let mut row = vec![Cell::Text(label.to_string()), Cell::Text(wl.clone())];
            row.extend(results.iter().map(|r| Cell::of(r, |m| m.predicted_ms)));
            let best =
                results[1..baselines].iter().filter_map(|r| r.as_ref().ok()).map(|m| m.predicted_ms).reduce(f64::min);
            let ratio = |other: Option<f64>| match (&results[0], other) {
                (Ok(dp), Some(o)) => Cell::Value(dp.predicted_ms / o),
                (Err(e), _) => Cell::Missing(e.clone()),
                (Ok(_), None) => Cell::Missing("no plan to compare with".into()),
            };
            let versus_megatron = ratio(results[megatron].as_ref().ok().map(|m| m.predicted_ms));
            if versus_megatron.value().is_some_and(|r| r > 1.005) {
                over.push(format!("{label} {wl}"));
            }
            row.push(versus_megatron);
            row.push(ratio(best));
            table.rows.push(row);
        }
    }
    table.notes.push(format!(
        "The default predicts more than 0.5% above megatron on {} of {} cells{}.",
        over.len(),
        table.rows.len(),
        if over.is_empty() { String::new() } else { format!(" ({})", over.join(", ")) },
    ));
    let chart = BarChart {
        title: "decode: each strategy's predicted time per step over megatron's".into(),
        y_label: "time / megatron (lower is better)".into(),
        groups: table.rows.iter().map(|r| table.row_label(r)).collect(),
        series: strategies
            .iter()
            .enumerate()
            .map(|(j, s)| {
                let ratios = table.rows.iter().map(|r| Some(r[2 + j].value()? / r[2 + megatron].value()?)).collect();
                (s.name().to_string(), ratios)
            })
            .collect(),
    };
    (table, chart)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_grid_is_the_issues() {
        let full = workloads(false);
        assert_eq!(full.len(), 6);
        assert_eq!(full[0].1, "llama3-8b-decode:batch=1");
        assert_eq!(full[5].1, "llama3-70b-decode:batch=64");
        assert_eq!(machines(false).len(), 3);
        for (_, w) in workloads(true) {
            crate::Workload::parse(&w).unwrap();
        }
    }
}

//! `exchange` (Figures 5 and 6): the DP's plans at the largest `p`, compiled with naive and
//! with searched exchange programs, on the DGX-1V (`dgx-v100`, whose irregular NVLink map is
//! where search pays) and the DGX A100 (`dgx-a100`, fully switched). The searched programs are
//! compiled without the naive fallback (`einsum_compile::Exchanges`), so that a plan they
//! make slower shows as a speedup below 1. The plan is the DP's own, unrefined
//! (`Case::refine` 0): the refinement could pick different plans under the two schedules, and
//! the figures compare exchange programs on one plan.

use einsum_compile::{ExchangeSynthesizer, NaiveSynthesizer};
use std::sync::Arc;

use super::ablation::families;
use super::table::geomean_cell;
use super::{BarChart, Case, Cell, Runner, Setup, Strategy, Table, Target, cell};

/// The topologies compared, whatever `--topology` says.
pub(crate) const TOPOLOGIES: &[&str] = &["dgx-v100", "dgx-a100"];

pub(crate) fn run(setup: &Setup, runner: &mut Runner) -> (Table, BarChart) {
    let p = setup.max_devices();
    let families = families(setup.small);
    let dp = Strategy::dp();
    let targets: Vec<Target> = TOPOLOGIES.iter().map(|t| setup.preset(t)).collect();
    let case = |w: &str, t: &Target, s: Arc<dyn ExchangeSynthesizer>| Case::new(w, p, &dp, s, t).with_refine(0);
    let mut cases = Vec::new();
    for t in &targets {
        for (_, workloads) in &families {
            for (_, w) in workloads {
                cases.extend([case(w, t, Arc::new(NaiveSynthesizer)), case(w, t, setup.searched_programs())]);
            }
        }
    }
    runner.run_all("exchange", &cases);

    let caption = format!(
        "Predicted time (ms) of the DP's plan (time cost model for each machine, unrefined) at p = {p}, compiled with \
         naive exchange programs (gather at each target) and with searched ones ({} iterations per program, \
         kept whatever they cost the plan: the compile's naive fallback, which keeps the naive programs where \
         they predict faster, is off); speedup = naive / search. f16{}. Geometric means of the speedup per topology and family.",
        setup.iterations(),
        if setup.small { ", workloads shrunk by --small" } else { "" }
    );
    let columns = ["topology", "family", "workload", "naive", "search", "speedup"];
    let mut table = Table::new("exchange", caption, &columns);
    for t in &targets {
        for (family, workloads) in &families {
            let first = table.rows.len();
            for (label, w) in workloads {
                let naive = cell(&runner.get(&case(w, t, Arc::new(NaiveSynthesizer))), |m| m.predicted_ms);
                let search = cell(&runner.get(&case(w, t, setup.searched_programs())), |m| m.predicted_ms);
                let speedup = match (naive.value(), search.value()) {
                    (Some(n), Some(s)) if s > 0.0 => Cell::Value(n / s),
                    (Some(_), Some(_)) => Cell::Missing("searched time is zero".into()),
                    _ => Cell::Missing("a schedule did not compile".into()),
                };
                let labels = [t.name().to_string(), family.to_string(), label.clone()];
                let mut row: Vec<Cell> = labels.into_iter().map(Cell::Text).collect();
                row.extend([naive, search, speedup]);
                table.rows.push(row);
            }
            let cells: Vec<&Cell> = table.rows[first..].iter().map(|r| &r[5]).collect();
            let labels = [t.name().to_string(), family.to_string(), "geomean".into()];
            let mut row: Vec<Cell> = labels.into_iter().map(Cell::Text).collect();
            row.extend([Cell::Text(String::new()), Cell::Text(String::new()), geomean_cell(&cells)]);
            table.rows.push(row);
        }
    }

    // One group per (family, workload), one series per topology: the speedup.
    let per_topology = table.rows.len() / TOPOLOGIES.len();
    let groups = table.rows[..per_topology]
        .iter()
        .map(|r| if text(&r[2]) == "geomean" { format!("{} geomean", text(&r[1])) } else { text(&r[2]).to_string() })
        .collect();
    let series = TOPOLOGIES
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let rows = &table.rows[i * per_topology..(i + 1) * per_topology];
            (t.to_string(), rows.iter().map(|r| r[5].value()).collect())
        })
        .collect();
    let chart = BarChart {
        title: format!("exchange programs at p = {p}: naive / searched predicted time"),
        y_label: "speedup of search (higher is better)".into(),
        groups,
        series,
    };
    (table, chart)
}

fn text(cell: &Cell) -> &str {
    match cell {
        Cell::Text(s) => s,
        _ => "",
    }
}

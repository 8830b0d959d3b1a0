//! `transformer` (Figure 1's analogue): a LLaMA-3-8B block on the five token workloads at
//! every `p`, the DP's plan against the hand-designed baselines, with geometric means per
//! (strategy, p).

use super::table::geomean_cell;
use super::{BarChart, Case, Cell, Runner, Setup, Table, cell, transformer_workloads};

/// The strategies compared, ours first.
pub(crate) const STRATEGIES: &[&str] = &["dp", "data", "megatron", "ulysses", "mesh2d"];

pub(crate) fn run(setup: &Setup, runner: &mut Runner) -> (Table, BarChart) {
    let workloads = transformer_workloads(setup.small);
    let what = format!(
        "Predicted time (ms) of one LLaMA-3-8B block (d_model 4096, 32 query and 8 key/value heads of 128, \
         d_ff 14336{}; f16) per token workload (sequences×length), planned by each strategy under the time \
         cost model and compiled with searched exchange programs ({} iterations per program) for {}. \
         Geometric means per strategy and p over the workloads.",
        if setup.small { ", shrunk by --small: dimensions /16, tokens /64" } else { "" },
        setup.iterations(),
        setup.topology
    );
    versus("transformer", setup, runner, &workloads, STRATEGIES, what, true)
}

/// A strategies × (workload, p) table of predicted ms, optionally with geometric-mean rows
/// per p, and its chart (each bar relative to the first strategy's time in its group).
pub(crate) fn versus(
    name: &str,
    setup: &Setup,
    runner: &mut Runner,
    workloads: &[(String, String)],
    strategies: &[&str],
    caption: String,
    geomeans: bool,
) -> (Table, BarChart) {
    let case = |w: &str, p: usize, s: &str| Case::new(w, p, s, setup.search(), &setup.topology);
    let cases: Vec<Case> = setup
        .devices
        .iter()
        .flat_map(|&p| workloads.iter().flat_map(move |(_, w)| strategies.iter().map(move |s| (w, p, *s))))
        .map(|(w, p, s)| case(w, p, s))
        .collect();
    runner.run_all(name, &cases);

    let mut columns = vec!["workload", "p"];
    columns.extend_from_slice(strategies);
    let mut table = Table::new(name, caption, &columns);
    for &p in &setup.devices {
        let first = table.rows.len();
        for (label, w) in workloads {
            let mut row = vec![Cell::Text(label.clone()), Cell::Text(p.to_string())];
            row.extend(strategies.iter().map(|s| cell(&runner.get(&case(w, p, s)), |m| m.predicted_ms)));
            table.rows.push(row);
        }
        if geomeans {
            let mut row = vec![Cell::Text("geomean".into()), Cell::Text(p.to_string())];
            for j in 0..strategies.len() {
                let cells: Vec<&Cell> = table.rows[first..].iter().map(|r| &r[2 + j]).collect();
                row.push(geomean_cell(&cells));
            }
            table.rows.push(row);
        }
    }
    let chart = relative_chart(&table, 2, &format!("{name}: predicted time relative to {}", strategies[0]));
    (table, chart)
}

/// A chart of every row of `table`, one series per value column from `first_value` on,
/// each value divided by the row's first value column (so that it reads as a ratio).
pub(crate) fn relative_chart(table: &Table, first_value: usize, title: &str) -> BarChart {
    let groups = table.rows.iter().map(|r| table.row_label(r)).collect();
    let series = (first_value..table.columns.len())
        .map(|j| {
            let values = table
                .rows
                .iter()
                .map(|r| match (r[first_value].value(), r[j].value()) {
                    (Some(base), Some(v)) if base > 0.0 => Some(v / base),
                    _ => None,
                })
                .collect();
            (table.columns[j].clone(), values)
        })
        .collect();
    BarChart {
        title: title.to_string(),
        y_label: format!("time / {}'s time (lower is better)", table.columns[first_value]),
        groups,
        series,
    }
}

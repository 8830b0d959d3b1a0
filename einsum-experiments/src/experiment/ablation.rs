//! `ablation` (Figures 3 and 4): at the largest `p`, for the transformer workloads and the
//! chains, the DP against greedy, the best and the median of [`RANDOM_DRAWS`] seeded random
//! plans, and the DP's plan compiled with the naive exchange programs (and the setup's own
//! strategies, after greedy); geometric means per family.

use einsum_compile::NaiveSynthesizer;
use std::sync::Arc;

use super::table::geomean_cell;
use super::transformer::relative_chart;
use super::{
    BarChart, Case, Cell, Measurement, RANDOM_DRAWS, Runner, Setup, Strategy, Table, cell, chain_workloads,
    transformer_workloads,
};

/// The two workload families, each as (family, [(label, workload)]).
pub(crate) fn families(small: bool) -> Vec<(&'static str, Vec<(String, String)>)> {
    vec![("transformer", transformer_workloads(small)), ("chains", chain_workloads(small))]
}

/// The random plans of `workload` at `p`, searched schedules (shared with `proxy`).
pub(crate) fn random_cases(setup: &Setup, workload: &str, p: usize) -> Vec<Case> {
    (0..RANDOM_DRAWS).map(|s| Case::new(workload, p, &Strategy::random(s), setup.search(), &setup.topology)).collect()
}

pub(crate) fn run(setup: &Setup, runner: &mut Runner) -> (Table, BarChart) {
    let p = setup.max_devices();
    let families = families(setup.small);
    // The DP, then greedy and the setup's own strategies.
    let searches = setup.compared(vec![Strategy::dp(), Strategy::greedy()]);
    let ours = &searches[0];
    let case = |w: &str, s: &Strategy| Case::new(w, p, s, setup.search(), &setup.topology);
    let naive = |w: &str| Case::new(w, p, ours, Arc::new(NaiveSynthesizer), &setup.topology);
    let mut cases = Vec::new();
    for (_, workloads) in &families {
        for (_, w) in workloads {
            // The project's cases in their order, the setup's own strategies last.
            cases.extend(searches.iter().take(2).map(|s| case(w, s)));
            cases.push(naive(w));
            cases.extend(random_cases(setup, w, p));
            cases.extend(searches.iter().skip(2).map(|s| case(w, s)));
        }
    }
    runner.run_all("ablation", &cases);

    let caption = format!(
        "Predicted time (ms) at p = {p} on {}: the DP's plan, greedy's, the best and the median of {RANDOM_DRAWS} \
         random plans (seeds 0..{RANDOM_DRAWS}), all with searched exchange programs ({} iterations per \
         program), and the DP's plan with naive exchange programs. Time cost model, f16{}. Geometric means \
         per family.",
        setup.topology.name(),
        setup.iterations(),
        if setup.small { ", workloads shrunk by --small" } else { "" }
    );
    let mut columns: Vec<String> = ["family", "workload"].map(String::from).to_vec();
    columns.extend(searches.iter().map(|s| s.name().to_string()));
    columns.extend(["random best", "random median"].map(String::from));
    columns.push(format!("{} naive", ours.name()));
    let columns: Vec<&str> = columns.iter().map(String::as_str).collect();
    let mut table = Table::new("ablation", caption, &columns);
    for (family, workloads) in &families {
        let first = table.rows.len();
        for (label, w) in workloads {
            let draws: Vec<Result<Measurement, String>> =
                random_cases(setup, w, p).iter().map(|c| runner.get(c)).collect();
            let (best, median) = random_summary(&draws);
            table.notes.extend(failed_draws(label, &draws));
            let mut row = vec![Cell::Text(family.to_string()), Cell::Text(label.clone())];
            row.extend(searches.iter().map(|s| cell(&runner.get(&case(w, s)), |m| m.predicted_ms)));
            row.extend([best, median, cell(&runner.get(&naive(w)), |m| m.predicted_ms)]);
            table.rows.push(row);
        }
        let mut row = vec![Cell::Text(family.to_string()), Cell::Text("geomean".into())];
        for j in 2..columns.len() {
            let cells: Vec<&Cell> = table.rows[first..].iter().map(|r| &r[j]).collect();
            row.push(geomean_cell(&cells));
        }
        table.rows.push(row);
    }
    let chart = relative_chart(&table, 2, &format!("ablation at p = {p}: predicted time relative to dp"));
    (table, chart)
}

/// A note saying how many of the random draws of `label` did not compile, and the first
/// reason; `None` when all did.
pub(crate) fn failed_draws(label: &str, draws: &[Result<Measurement, String>]) -> Option<String> {
    let failed: Vec<&String> = draws.iter().filter_map(|d| d.as_ref().err()).collect();
    let first = failed.first()?;
    Some(format!("{label}: {} of {} random draws did not compile ({first})", failed.len(), draws.len()))
}

/// The best and the median predicted time of the random draws that compiled (the median of
/// an even count is the mean of the middle two); missing when none did.
fn random_summary(draws: &[Result<Measurement, String>]) -> (Cell, Cell) {
    let mut times: Vec<f64> = draws.iter().filter_map(|d| d.as_ref().ok()).map(|m| m.predicted_ms).collect();
    if times.is_empty() {
        let reason = draws.iter().find_map(|d| d.as_ref().err()).cloned().unwrap_or_else(|| "no draws".into());
        return (Cell::Missing(reason.clone()), Cell::Missing(reason));
    }
    times.sort_by(f64::total_cmp);
    let n = times.len();
    let median = if n % 2 == 1 { times[n / 2] } else { (times[n / 2 - 1] + times[n / 2]) / 2.0 };
    (Cell::Value(times[0]), Cell::Value(median))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_summary_takes_best_and_median_of_what_compiled() {
        let m = |ms: f64| Ok(Measurement { predicted_ms: ms, ..Measurement::default() });
        let draws = vec![m(4.0), Err("x".to_string()), m(1.0), m(3.0), m(2.0)];
        assert_eq!(random_summary(&draws), (Cell::Value(1.0), Cell::Value(2.5)));
        assert_eq!(random_summary(&draws[..4]), (Cell::Value(1.0), Cell::Value(3.0)));
        assert_eq!(failed_draws("w", &draws).unwrap(), "w: 1 of 5 random draws did not compile (x)");
        assert_eq!(failed_draws("w", &draws[2..]), None);
        let none = random_summary(&[Err("no plan".into())]);
        assert_eq!(none.0, Cell::Missing("no plan".into()));
    }
}

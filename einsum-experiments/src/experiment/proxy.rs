//! `proxy` (Table 1's analogue): how well the paper's communication proxy ranks plans. For
//! each of the ten workloads (five transformer token workloads, five chains) at the largest
//! `p`, the Pearson correlation between the [`PaperProxy`](einsum_logical::PaperProxy) total
//! of each of the [`RANDOM_DRAWS`] random plans and its predicted time (the same plans as
//! `ablation`'s, measured once when both run together). Beside it, the same correlation for
//! the `time` cost model the plans were made under, which prices what the run pays (resident
//! inputs, compute, load imbalance), so the two columns show how much of the proxy's miss a
//! better logical model recovers.

use super::ablation::{failed_draws, families, random_cases};
use super::{BarChart, Cell, RANDOM_DRAWS, Runner, Setup, Table};

pub(crate) fn run(setup: &Setup, runner: &mut Runner) -> (Table, BarChart) {
    let p = setup.max_devices();
    let families = families(setup.small);
    let cases: Vec<_> =
        families.iter().flat_map(|(_, ws)| ws.iter().flat_map(|(_, w)| random_cases(setup, w, p))).collect();
    runner.run_all("proxy", &cases);

    let caption = format!(
        "Pearson correlation r between the paper's communication proxy (PaperProxy total, elements) and the \
         predicted time (ms), and the same for the `time` cost model's total (`time r`), of {RANDOM_DRAWS} random plans per workload (seeds 0..{RANDOM_DRAWS}) at p = {p} on \
         {}, searched exchange programs ({} iterations per program), f16{}. `plans`: how many compiled and \
         were priced by the proxy.",
        setup.topology.name(),
        setup.iterations(),
        if setup.small { ", workloads shrunk by --small" } else { "" }
    );
    let columns = ["family", "workload", "pearson r", "time r", "plans", "proxy min", "proxy max", "ms min", "ms max"];
    let mut table = Table::new("proxy", caption, &columns);
    for (family, workloads) in &families {
        for (label, w) in workloads {
            let results: Vec<_> = random_cases(setup, w, p).iter().map(|c| runner.get(c)).collect();
            table.notes.extend(failed_draws(label, &results));
            let points: Vec<(f64, f64)> = results
                .iter()
                .filter_map(|r| r.as_ref().ok())
                .filter_map(|m| m.proxy_cost.map(|c| (c, m.predicted_ms)))
                .collect();
            let (xs, ys): (Vec<f64>, Vec<f64>) = points.iter().copied().unzip();
            let (ts, ms): (Vec<f64>, Vec<f64>) =
                results.iter().filter_map(|r| r.as_ref().ok()).map(|m| (m.time_cost, m.predicted_ms)).unzip();
            let reason = results
                .iter()
                .find_map(|r| r.as_ref().err())
                .cloned()
                .unwrap_or_else(|| "fewer than two plans, or one of the two is constant".into());
            let value = |v: Option<f64>| v.map_or_else(|| Cell::Missing(reason.clone()), Cell::Value);
            let min = |v: &[f64]| v.iter().copied().reduce(f64::min);
            let max = |v: &[f64]| v.iter().copied().reduce(f64::max);
            table.rows.push(vec![
                Cell::Text(family.to_string()),
                Cell::Text(label.clone()),
                value(pearson(&xs, &ys)),
                value(pearson(&ts, &ms)),
                Cell::Value(points.len() as f64),
                value(min(&xs)),
                value(max(&xs)),
                value(min(&ys)),
                value(max(&ys)),
            ]);
        }
    }
    let chart = BarChart {
        title: format!("cost models vs predicted time over {RANDOM_DRAWS} random plans at p = {p}"),
        y_label: "Pearson r".into(),
        groups: table.rows.iter().map(|r| table.row_label(r)).collect(),
        series: vec![
            ("proxy r".into(), table.rows.iter().map(|r| r[2].value()).collect()),
            ("time r".into(), table.rows.iter().map(|r| r[3].value()).collect()),
        ],
    };
    (table, chart)
}

/// The Pearson correlation coefficient of the pairs `(xs[i], ys[i])`; `None` when the
/// lengths differ, there are fewer than two pairs, or either side is constant.
pub fn pearson(xs: &[f64], ys: &[f64]) -> Option<f64> {
    let n = xs.len();
    if n != ys.len() || n < 2 {
        return None;
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / n as f64;
    let (mx, my) = (mean(xs), mean(ys));
    let (mut sxy, mut sxx, mut syy) = (0.0, 0.0, 0.0);
    for (x, y) in xs.iter().zip(ys) {
        let (dx, dy) = (x - mx, y - my);
        sxy += dx * dy;
        sxx += dx * dx;
        syy += dy * dy;
    }
    if sxx == 0.0 || syy == 0.0 {
        return None;
    }
    Some((sxy / (sxx * syy).sqrt()).clamp(-1.0, 1.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pearson_matches_hand_computed_values() {
        assert_eq!(pearson(&[1.0, 2.0, 3.0], &[2.0, 4.0, 6.0]), Some(1.0));
        assert_eq!(pearson(&[1.0, 2.0, 3.0], &[3.0, 2.0, 1.0]), Some(-1.0));
        // x = 1,2,3,4; y = 1,3,2,4: means 2.5; Σdxdy = 2.25+(-0.25)+(-0.25)+2.25 = 4; Σdx² = Σdy² = 5.
        let r = pearson(&[1.0, 2.0, 3.0, 4.0], &[1.0, 3.0, 2.0, 4.0]).unwrap();
        assert!((r - 0.8).abs() < 1e-12, "{r}");
        assert_eq!(pearson(&[1.0], &[1.0]), None);
        assert_eq!(pearson(&[1.0, 1.0], &[1.0, 2.0]), None);
        assert_eq!(pearson(&[1.0, 2.0], &[1.0]), None);
    }
}

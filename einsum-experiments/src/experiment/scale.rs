//! `scale`: the default strategy against the hand-designed baselines from one server to an
//! NVL72 rack. LLaMA-3-8B- and 70B-sized blocks on four token workloads each are planned by
//! every strategy on four machines (one DGX A100, two, four DGX H100s, an NVL72), compiled
//! with searched exchange programs, and predicted; each row says how the default's time
//! compares with the best baseline's and how far the `time` model's price of the default's
//! plan is from the prediction, and the notes give the model's fidelity over every plan of
//! the grid (Pearson r, the share within ±10% and ±25%, the worst error). The setup's own
//! strategies are columns after the baselines, and are not baselines.

use super::transformer::strategies;
use super::{BarChart, Case, Cell, Measurement, Runner, Setup, Strategy, Table, Target, pearson};

/// The machines: (label, topology preset, device count). With `--small` only the first two.
const MACHINES: &[(&str, &str, usize)] = &[
    ("dgx-a100 p=8", "dgx-a100", 8),
    ("dgx-a100x2 p=16", "dgx-a100x2", 16),
    ("dgx-h100x4 p=32", "dgx-h100x4", 32),
    ("nvl72 p=72", "nvl72", 72),
];

/// Machines kept with `--small` (the first ones: the larger plans take seconds each).
const SMALL_MACHINES: usize = 2;

/// The block shapes: (label, dimensions at full size, dimensions with `--small`: /16).
const MODELS: &[(&str, &str, &str)] = &[
    (
        "8B",
        "d_model=4096,heads_q=32,heads_kv=8,d_head=128,d_ff=14336",
        "d_model=256,heads_q=32,heads_kv=8,d_head=8,d_ff=896",
    ),
    (
        "70B",
        "d_model=8192,heads_q=64,heads_kv=8,d_head=128,d_ff=28672",
        "d_model=512,heads_q=64,heads_kv=8,d_head=8,d_ff=1792",
    ),
];

/// The token workloads per model: (model label, sequences, thousands of tokens each).
const TOKENS: &[(&str, usize, usize)] =
    &[("8B", 1, 1), ("8B", 1, 8), ("8B", 1, 32), ("8B", 8, 1), ("70B", 1, 2), ("70B", 1, 16), ("70B", 16, 1)];

/// Tokens are divided by this with `--small`.
const SMALL_TOKENS: usize = 64;

/// The grid's workloads as (label, workload).
fn workloads(small: bool) -> Vec<(String, String)> {
    TOKENS
        .iter()
        .map(|&(model, seqs, k)| {
            let &(_, full, shrunk) = MODELS.iter().find(|m| m.0 == model).expect("every token workload names a model");
            let (dims, scale) = if small { (shrunk, SMALL_TOKENS) } else { (full, 1) };
            let tokens = seqs * k * 1024 / scale;
            (format!("{model} {seqs}×{k}K"), format!("llama-block:tokens={tokens},seqs={seqs},{dims}"))
        })
        .collect()
}

fn machines(small: bool) -> &'static [(&'static str, &'static str, usize)] {
    if small { &MACHINES[..SMALL_MACHINES] } else { MACHINES }
}

/// How the `time` model's price of plans compares with their whole-plan prediction.
#[derive(Clone, Debug, PartialEq)]
pub struct Fidelity {
    /// Plans compared.
    pub plans: usize,
    /// Pearson r of the model's price against the prediction (`None` below two plans).
    pub pearson: Option<f64>,
    /// Plans priced within ±10% of their prediction.
    pub within_10: usize,
    /// Plans priced within ±25% of their prediction.
    pub within_25: usize,
    /// The relative error `model / predicted - 1` of largest magnitude.
    pub worst: Option<f64>,
}

/// The [`Fidelity`] of `(model ms, predicted ms)` pairs.
pub fn fidelity(points: &[(f64, f64)]) -> Fidelity {
    let errors: Vec<f64> = points.iter().map(|&(model, predicted)| model / predicted - 1.0).collect();
    let within = |bound: f64| errors.iter().filter(|e| e.abs() <= bound).count();
    let (xs, ys): (Vec<f64>, Vec<f64>) = points.iter().copied().unzip();
    Fidelity {
        plans: points.len(),
        pearson: pearson(&xs, &ys),
        within_10: within(0.10),
        within_25: within(0.25),
        worst: errors.iter().copied().reduce(|a, b| if b.abs() > a.abs() { b } else { a }),
    }
}

/// The model's price of a measured plan in ms beside its prediction.
fn priced(m: &Measurement) -> (f64, f64) {
    (m.time_cost * 1e3, m.predicted_ms)
}

pub(crate) fn run(setup: &Setup, runner: &mut Runner) -> (Table, BarChart) {
    let workloads = workloads(setup.small);
    let machines: Vec<(&str, Target, usize)> =
        machines(setup.small).iter().map(|&(l, t, p)| (l, setup.preset(t), p)).collect();
    // The default and the baselines (the best baseline is taken over those), then the
    // setup's own strategies.
    let baselines = strategies().len();
    let strategies = &setup.compared(strategies());
    let case = |w: &str, t: &Target, p: usize, s: &Strategy| Case::new(w, p, s, setup.search(), t);
    let cases: Vec<Case> = machines
        .iter()
        .flat_map(|(_, t, p)| {
            workloads.iter().flat_map(move |(_, w)| strategies.iter().map(move |s| case(w, t, *p, s)))
        })
        .collect();
    runner.run_all("scale", &cases);

    let caption = format!(
        "Predicted time (ms) of one LLaMA-family block (8B: d_model 4096, 32 query and 8 key/value heads of 128, \
         d_ff 14336; 70B: d_model 8192, 64 and 8 heads of 128, d_ff 28672; f16{}) per token workload \
         (sequences×length), planned by each strategy under the time cost model for the machine and compiled with \
         searched exchange programs ({} iterations per program). `dp / best baseline`: the default's time over the \
         fastest of data, megatron, ulysses and mesh2d. `dp model error`: the time model's price of the default's \
         plan against its prediction, in percent.",
        if setup.small { "; dimensions /16 and tokens /64 with --small, on the first two machines" } else { "" },
        setup.iterations()
    );
    let mut columns = vec!["machine", "workload"];
    columns.extend(strategies.iter().map(Strategy::name));
    columns.extend(["dp / best baseline", "dp model error %"]);
    let mut table = Table::new("scale", caption, &columns);
    let mut points = Vec::new();
    let (mut losses, mut wins) = (Vec::new(), 0);
    for (label, t, p) in &machines {
        for (wl, w) in &workloads {
            let results: Vec<_> = strategies.iter().map(|s| runner.get(&case(w, t, *p, s))).collect();
            points.extend(results.iter().filter_map(|r| r.as_ref().ok()).map(priced));
            let mut row = vec![Cell::Text(label.to_string()), Cell::Text(wl.clone())];
            row.extend(results.iter().map(|r| Cell::of(r, |m| m.predicted_ms)));
            let best =
                results[1..baselines].iter().filter_map(|r| r.as_ref().ok()).map(|m| m.predicted_ms).reduce(f64::min);
            row.push(match (&results[0], best) {
                (Ok(dp), Some(best)) => {
                    let ratio = dp.predicted_ms / best;
                    if ratio > 1.005 {
                        losses.push(format!("{label} {wl} ({ratio:.3})"));
                    }
                    wins += usize::from(ratio <= 0.98);
                    Cell::Value(ratio)
                }
                (Err(e), _) => Cell::Missing(e.clone()),
                (Ok(_), None) => Cell::Missing("no baseline has a plan".into()),
            });
            row.push(Cell::of(&results[0], |m| 100.0 * (m.time_cost * 1e3 / m.predicted_ms - 1.0)));
            table.rows.push(row);
        }
    }
    let f = fidelity(&points);
    table.notes.push(format!(
        "The time model over all {} plans of the grid: Pearson r {}; {} within ±10% and {} within ±25% of their \
         prediction; worst {}.",
        f.plans,
        f.pearson.map_or("n/a".into(), |r| format!("{r:.3}")),
        f.within_10,
        f.within_25,
        f.worst.map_or("n/a".into(), |e| format!("{:+.1}%", 100.0 * e)),
    ));
    table.notes.push(format!(
        "The default is more than 0.5% slower than the best baseline on {} of {} cells{}, and at least 2% faster on {wins}.",
        losses.len(),
        table.rows.len(),
        if losses.is_empty() { String::new() } else { format!(" ({})", losses.join(", ")) },
    ));
    let ratio_to_best = |row: &[Cell], j: usize| -> Option<f64> {
        let best = row[3..2 + baselines].iter().filter_map(Cell::value).reduce(f64::min)?;
        row[2 + j].value().map(|v| v / best)
    };
    let chart = BarChart {
        title: "scale: each strategy's predicted time over the best baseline's".into(),
        y_label: "time / best baseline (lower is better)".into(),
        groups: table.rows.iter().map(|r| table.row_label(r)).collect(),
        series: strategies
            .iter()
            .enumerate()
            .map(|(j, s)| (s.name().to_string(), table.rows.iter().map(|r| ratio_to_best(r, j)).collect()))
            .collect(),
    };
    (table, chart)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fidelity_counts_and_the_worst_error() {
        // Errors: +5%, -20%, +30%, 0%.
        let f = fidelity(&[(1.05, 1.0), (0.8, 1.0), (2.6, 2.0), (3.0, 3.0)]);
        assert_eq!((f.plans, f.within_10, f.within_25), (4, 2, 3));
        assert!((f.worst.unwrap() - 0.3).abs() < 1e-12, "{:?}", f.worst);
        assert!(f.pearson.unwrap() > 0.9);
        let none = fidelity(&[]);
        assert_eq!((none.plans, none.pearson, none.worst), (0, None, None));
    }

    #[test]
    fn the_grid_is_the_issues() {
        let full = workloads(false);
        assert_eq!(full.len(), 7);
        assert_eq!(
            full[3].1,
            "llama-block:tokens=8192,seqs=8,d_model=4096,heads_q=32,heads_kv=8,d_head=128,d_ff=14336"
        );
        assert_eq!(
            full[6].1,
            "llama-block:tokens=16384,seqs=16,d_model=8192,heads_q=64,heads_kv=8,d_head=128,d_ff=28672"
        );
        assert_eq!(machines(false).len(), 4);
        assert_eq!(machines(true).len(), 2);
        assert_eq!(
            workloads(true)[0].1,
            "llama-block:tokens=16,seqs=1,d_model=256,heads_q=32,heads_kv=8,d_head=8,d_ff=896"
        );
    }
}

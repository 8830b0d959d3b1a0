//! Memory-aware planning (issue 11): `fit`, the LLaMA-3-70B model on three machines planned
//! by every strategy (refused or fitting), and `budget`, the LLaMA-3-8B model on 8×H100
//! under per-device budgets from the whole HBM down to below the smallest that fits.

use super::{BarChart, Case, Cell, Runner, Setup, Strategy, Table, Target, cell};

/// The machines of `fit`: (label, topology preset, device count).
pub(crate) const MACHINES: &[(&str, &str, usize)] =
    &[("8×A100-40GB", "dgx-a100", 8), ("8×H100-80GB", "dgx-h100", 8), ("4×H100-80GB", "dgx-h100", 4)];

/// The strategies of `fit`, ours first (then the setup's own).
fn strategies() -> Vec<Strategy> {
    vec![
        Strategy::dp(),
        Strategy::greedy(),
        Strategy::data(),
        Strategy::megatron(),
        Strategy::ulysses(),
        Strategy::mesh2d(),
    ]
}

/// The budgets of `budget`, in GB per device.
const BUDGETS_GB: &[f64] = &[80.0, 40.0, 20.0, 10.0, 6.0, 4.0, 3.0, 2.5, 2.25, 2.0, 1.75];

/// With `--small`: the models' layers and the budgets are divided by this.
const SMALL_DIVISOR: usize = 20;

fn workload(model: &str, small: bool) -> String {
    match (model, small) {
        ("70b", false) => "llama3-70b".into(),
        ("70b", true) => format!("llama3-70b:layers={},tokens=512", 80 / SMALL_DIVISOR),
        (_, false) => "llama3-8b".into(),
        (_, true) => format!("llama3-8b:layers={},tokens=1024", 32 / SMALL_DIVISOR),
    }
}

/// The budget of a machine in `fit`: its default (HBM less the reserve), divided by
/// [`SMALL_DIVISOR`] with `--small` (so that a shrunk model meets the same pressure).
fn fit_budget(target: &Target, devices: usize, small: bool) -> Option<u64> {
    if !small {
        return None;
    }
    Some((einsum_compile::pipeline::default_budget(target.topology(), devices) / SMALL_DIVISOR as f64) as u64)
}

fn memory_columns(row: &mut Vec<Cell>, result: &Result<super::Measurement, String>) {
    row.push(match result {
        Ok(m) => Cell::Text(m.weights.clone()),
        Err(e) => Cell::Missing(e.clone()),
    });
    row.push(cell(result, |m| m.resident_bytes as f64 / 1e9));
    row.push(cell(result, |m| m.peak_bytes as f64 / 1e9));
    row.push(cell(result, |m| m.predicted_ms));
}

const VALUE_COLUMNS: [&str; 4] = ["inputs split", "resident GB", "peak GB", "predicted ms"];

pub(crate) fn run_fit(setup: &Setup, runner: &mut Runner) -> (Table, BarChart) {
    let w = workload("70b", setup.small);
    let strategies = setup.compared(strategies());
    let machines: Vec<(&str, Target, usize)> = MACHINES.iter().map(|&(l, t, p)| (l, setup.preset(t), p)).collect();
    let case = |t: &Target, p: usize, s: &Strategy| {
        Case::new(&w, p, s, setup.search(), t).with_budget(fit_budget(t, p, setup.small))
    };
    let cases: Vec<Case> = machines
        .iter()
        .flat_map(|(_, t, p)| strategies.iter().map(move |s| (t, *p, s)))
        .map(|(t, p, s)| case(t, p, s))
        .collect();
    runner.run_all("fit", &cases);
    let caption = format!(
        "`{w}` (f16) planned by each strategy under the time cost model with each machine's default memory budget \
         (HBM less the 10% reserve{}), compiled with searched exchange programs ({} iterations per program). \
         Inputs split: how the first layer's weights, the head's and the embedded tokens `x` are split (`replicated`: whole on every device). \
         Resident and peak: the fullest device's, from the compiled task graph. A refused plan is n/a with the reason.",
        if setup.small { format!(", divided by {SMALL_DIVISOR} with --small") } else { String::new() },
        setup.iterations()
    );
    let mut columns = vec!["machine", "strategy"];
    columns.extend(VALUE_COLUMNS);
    let mut table = Table::new("fit", caption, &columns);
    for (label, t, p) in &machines {
        for s in &strategies {
            let mut row = vec![Cell::Text(label.to_string()), Cell::Text(s.name().to_string())];
            memory_columns(&mut row, &runner.get(&case(t, *p, s)));
            table.rows.push(row);
        }
    }
    let chart = BarChart {
        title: format!("fit: peak GB per device of `{w}`, per machine and strategy"),
        y_label: "peak GB on the fullest device (missing: refused)".into(),
        groups: MACHINES.iter().map(|m| m.0.to_string()).collect(),
        series: strategies
            .iter()
            .enumerate()
            .map(|(j, s)| {
                let values = (0..MACHINES.len()).map(|i| table.rows[i * strategies.len() + j][4].value()).collect();
                (s.name().to_string(), values)
            })
            .collect(),
    };
    (table, chart)
}

pub(crate) fn run_budget(setup: &Setup, runner: &mut Runner) -> (Table, BarChart) {
    let w = workload("8b", setup.small);
    let (topology, p, dp) = (setup.preset("dgx-h100"), 8, Strategy::dp());
    let divisor = if setup.small { SMALL_DIVISOR as f64 } else { 1.0 };
    let budget = |gb: f64| (gb * 1e9 / divisor) as u64;
    let case = |gb: f64| Case::new(&w, p, &dp, setup.search(), &topology).with_budget(Some(budget(gb)));
    let cases: Vec<Case> = BUDGETS_GB.iter().map(|&gb| case(gb)).collect();
    runner.run_all("budget", &cases);
    let caption = format!(
        "`{w}` (f16) on {p}×H100-80GB planned by the DP under the time cost model with a per-device memory budget \
         (`--memory-budget`{}), compiled with searched exchange programs ({} iterations per program): how the plan \
         changes as memory shrinks, down to budgets nothing fits. Resident and peak: the fullest device's.",
        if setup.small { format!(", every budget divided by {SMALL_DIVISOR} with --small") } else { String::new() },
        setup.iterations()
    );
    let mut columns = vec!["budget GB"];
    columns.extend(VALUE_COLUMNS);
    let mut table = Table::new("budget", caption, &columns);
    for &gb in BUDGETS_GB {
        let mut row = vec![Cell::Text(format!("{}", gb / divisor))];
        memory_columns(&mut row, &runner.get(&case(gb)));
        table.rows.push(row);
    }
    let chart = BarChart {
        title: format!("budget: `{w}` on {p}×H100, predicted ms and peak GB per device budget"),
        y_label: "ms / GB (missing: does not fit)".into(),
        groups: BUDGETS_GB.iter().map(|gb| format!("{} GB", gb / divisor)).collect(),
        series: vec![
            ("predicted ms".into(), table.rows.iter().map(|r| r[4].value()).collect()),
            ("peak GB".into(), table.rows.iter().map(|r| r[3].value()).collect()),
        ],
    };
    (table, chart)
}

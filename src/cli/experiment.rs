//! `einsummable experiment NAME`: reproduces a figure or table of Section 6 in simulation
//! (plans and compilation only, nothing is executed) and writes `DIR/NAME.csv`,
//! `DIR/NAME.md` and `DIR/NAME.svg`.

use std::{fmt::Write as _, path::PathBuf};

use std::sync::Arc;

use einsummable::experiment::{Experiment, Runner, Setup, Strategy, TableReport};
use einsummable::rewrite::JointForms;
use einsummable::{Error, Result};
use serde::Serialize;

use super::Report;

/// Arguments of `experiment`.
#[derive(clap::Args)]
pub struct Args {
    /// transformer, chains, ablation, exchange, proxy, fit, budget, scale, decode, or all.
    name: String,
    /// The machine: a topology preset or file (`exchange` always uses dgx-v100 and dgx-a100;
    /// `fit`, `budget` and `scale` their own machines).
    /// Without it, dgx-a100 scaled to enough nodes for the largest device count.
    #[arg(long)]
    topology: Option<String>,
    /// Device counts p, comma-separated; ablation, exchange and proxy use the largest.
    #[arg(long, default_value = "1,4,8")]
    devices: String,
    /// Where the CSV, Markdown and SVG files go.
    #[arg(long, default_value = "results")]
    out: PathBuf,
    /// Shrink every workload (dimensions /16, tokens /64, chains at scale 64) and the
    /// exchange-program search, for a quick look in seconds.
    #[arg(long)]
    small: bool,
}

/// Parses `1,4,8`.
pub fn parse_devices(list: &str) -> Result<Vec<usize>> {
    list.split(',')
        .map(|s| {
            s.trim().parse::<usize>().ok().filter(|&p| p > 0).ok_or_else(|| {
                Error::Usage(format!("--devices: `{s}` is not a positive integer (expected a list like 1,4,8)"))
            })
        })
        .collect()
}

/// The joint optimizer's column in `transformer` and `chains`: the DP on the fastest form
/// of the rewrites ([`JointForms`]).
pub const JOINT: &str = "dp+rewrites";

/// Runs `experiment`.
pub fn run(a: Args) -> Result<Report> {
    let experiments = Experiment::by_name(&a.name)?;
    let devices = parse_devices(&a.devices)?;
    // Before hours of planning: an unwritable output directory fails at once.
    super::prepare_dir("--out", &a.out)?;
    let largest = devices.iter().copied().max().unwrap_or(1);
    let chosen = super::choose_topology(a.topology.as_deref(), largest)?;
    let mut text = chosen.note.map(|n| n + "\n").unwrap_or_default();
    let setup = Setup::new(chosen.name, chosen.topology, devices, a.out, a.small);
    // The joint optimizer of form and decomposition, one more column beside the paper's
    // strategies, which plan the graphs as written.
    let joint = Strategy::dp().with_forms(Arc::new(JointForms::default()), JOINT);
    let mut runner = Runner::new();
    let mut outcomes = Vec::new();
    for e in experiments {
        let setup = match e {
            Experiment::Transformer | Experiment::Chains => setup.clone().with_strategy(joint.clone()),
            _ => setup.clone(),
        };
        let outcome = e.run(&setup, &mut runner)?;
        text += &outcome.table.to_markdown();
        let files: Vec<String> = outcome.files.iter().map(|f| f.display().to_string()).collect();
        let _ = writeln!(text, "\n({:.1} s; wrote {})\n", outcome.wall_s, files.join(", "));
        outcomes.push((outcome, files));
    }
    let _ = writeln!(text, "planning and compiling took {:.1} s in all", runner.compile_s());
    let experiments = outcomes
        .iter()
        .map(|(outcome, files)| ExperimentResult { table: outcome.table.report(), files, wall_s: outcome.wall_s })
        .collect();
    Ok(Report::new(&ExperimentJson { experiments }, text, true))
}

/// The `--json` object of `experiment`: one result per experiment run.
#[derive(Serialize)]
pub struct ExperimentJson<'a> {
    /// The experiments, in the order they ran.
    pub experiments: Vec<ExperimentResult<'a>>,
}

/// One experiment of [`ExperimentJson::experiments`]: its table, followed by the files
/// it wrote and its wall time.
#[derive(Serialize)]
pub struct ExperimentResult<'a> {
    /// The result table (`name`, `caption`, `columns`, `rows`, `notes`), flattened into
    /// this object.
    #[serde(flatten)]
    pub table: TableReport<'a>,
    /// The CSV, Markdown and SVG files written.
    pub files: &'a [String],
    /// The experiment's wall time, in seconds.
    pub wall_s: f64,
}

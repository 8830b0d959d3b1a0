//! `chains` (Figure 2's analogue): the matrix chains A–E at every `p`, the DP's plan against
//! the baselines that apply to a chain of matrix products (`megatron` and `ulysses` are
//! transformer strategies: they report n/a with their reason), and the setup's own.

use super::transformer::versus;
use super::{BarChart, Runner, Setup, Strategy, Table, chain_workloads};

/// The strategies compared, ours first.
pub(crate) fn strategies() -> Vec<Strategy> {
    vec![Strategy::dp(), Strategy::data(), Strategy::mesh2d(), Strategy::megatron(), Strategy::ulysses()]
}

pub(crate) fn run(setup: &Setup, runner: &mut Runner) -> (Table, BarChart) {
    let workloads = chain_workloads(setup.small);
    let what = format!(
        "Predicted time (ms) of the matrix chains A–E of Section 6 (scale {}; f16), planned by each strategy \
         under the time cost model and compiled with searched exchange programs ({} iterations per program) \
         for {}.",
        if setup.small { 64 } else { 1 },
        setup.iterations(),
        setup.topology.name()
    );
    versus("chains", setup, runner, &workloads, &setup.compared(strategies()), what, false)
}

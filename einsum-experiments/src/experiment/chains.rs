//! `chains` (Figure 2's analogue): the matrix chains A–E at every `p`, the DP's plan against
//! the baselines that apply to a chain of matrix products (`megatron` and `ulysses` are
//! transformer strategies: they report n/a with their reason).

use super::transformer::versus;
use super::{BarChart, Runner, Setup, Table, chain_workloads};

/// The strategies compared, ours first.
pub(crate) const STRATEGIES: &[&str] = &["dp", "data", "mesh2d", "megatron", "ulysses"];

pub(crate) fn run(setup: &Setup, runner: &mut Runner) -> (Table, BarChart) {
    let workloads = chain_workloads(setup.small);
    let what = format!(
        "Predicted time (ms) of the matrix chains A–E of Section 6 (scale {}; f16), planned by each strategy \
         under the time cost model and compiled with searched exchange programs ({} iterations per program) \
         for {}.",
        if setup.small { 64 } else { 1 },
        setup.iterations(),
        setup.topology
    );
    versus("chains", setup, runner, &workloads, STRATEGIES, what, false)
}

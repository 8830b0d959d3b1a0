//! `transformer` (Figure 1's analogue): a LLaMA-3-8B block on the five token workloads at
//! every `p`, the DP's plan against the hand-designed baselines (and the setup's own
//! strategies), with geometric means per
//! (strategy, p). On the paper's machine and scale (`dgx-a100`, not `--small`), the table's
//! notes set the DP's predictions against the paper's measured times at each of 1, 4 and 8
//! GPUs the setup runs.

use super::table::{geomean_cell, geometric_mean};
use super::{BarChart, Case, Cell, Runner, Setup, Strategy, Table, cell, transformer_workloads};

/// Figure 1 of the paper as its text gives it: per system and workload, the measured ms at
/// one, four and eight A100s (`None`: JAX did not complete the 128K sequence), plus the 1K
/// sequence at eight GPUs from the text.
///
/// The figure's numbers come out of the paper's text without their bars' labels, so they are
/// assigned here by evidence, which the tests check:
/// - *which system*: each system's five eight-GPU times reproduce the geometric mean the paper
///   states for it (Einsummable 8.97 ms, PyTorch 13.65, vLLM 14.87), and the one- and
///   four-GPU times go with the eight-GPU time the text lists them with;
/// - *which of the 1×8K and 8×1K panels*: the geometric means cannot tell (swapping the two
///   panels swaps every system's two values). The two workloads have the same 8192 tokens and
///   the same GEMMs and elementwise kernels; 1×8K's causal attention has 8 times the FLOPs
///   (549.8 against 68.7 GFLOP), about 2.6 ms more on one A100 at FlashAttention-2's 60% of
///   peak. Read as the text's order suggests, Einsummable, PyTorch and vLLM would all be
///   *slower* on one GPU on the workload with less work (by 3.0, 2.5 and 2.0 ms), and
///   PyTorch's batch-sharded 8×1K (no bytes moved) 2.3 times slower at p = 8 than its
///   sequence-sharded 1×8K, which must gather keys and values; read the other way round, all
///   three are slower on 1×8K by 2.0-3.0 ms on one GPU, as the extra attention predicts, and
///   the paper's "the gap is biggest on the long-sequence workloads" holds (Einsummable beats
///   PyTorch by 50% on 1×8K and by 6% on 8×1K, not the reverse). JAX alone fits the text's
///   order (in ours its 8×1K takes 39.1 ms on one GPU against 14.6 on 1×8K). We take ours.
const FIGURE_1: &[(&str, &str, [Option<f64>; 3])] = &[
    ("Einsummable", "1×8K", [Some(19.2), Some(6.06), Some(4.01)]),
    ("Einsummable", "1×128K", [Some(860.0), Some(269.0), Some(143.0)]),
    ("Einsummable", "8×1K", [Some(16.2), Some(4.16), Some(2.51)]),
    ("Einsummable", "128×1K", [Some(224.0), Some(66.9), Some(33.3)]),
    ("JAX", "1×8K", [Some(14.6), Some(3.84), Some(2.20)]),
    ("JAX", "1×128K", [None, None, None]),
    ("JAX", "8×1K", [Some(39.1), Some(10.5), Some(5.77)]),
    ("JAX", "128×1K", [Some(254.0), Some(58.1), Some(28.9)]),
    ("PyTorch", "1×8K", [Some(19.8), Some(9.52), Some(6.00)]),
    ("PyTorch", "1×128K", [Some(969.0), Some(986.0), Some(506.0)]),
    ("PyTorch", "8×1K", [Some(17.3), Some(4.59), Some(2.65)]),
    ("PyTorch", "128×1K", [Some(273.0), Some(68.5), Some(34.2)]),
    ("vLLM", "1×8K", [Some(21.3), Some(9.20), Some(5.70)]),
    ("vLLM", "1×128K", [Some(991.0), Some(982.0), Some(498.0)]),
    ("vLLM", "8×1K", [Some(19.3), Some(5.18), Some(3.03)]),
    ("vLLM", "128×1K", [Some(306.0), Some(77.3), Some(38.5)]),
];

/// The 1K single sequence at eight GPUs, from the paper's text, per system.
const TEXT_1X1K_AT_8: &[(&str, f64)] = &[("JAX", 0.83), ("Einsummable", 1.21), ("PyTorch", 1.72), ("vLLM", 2.19)];

/// The device counts of Figure 1's bars, in the order of [`FIGURE_1`]'s triples.
const FIGURE_1_DEVICES: [usize; 3] = [1, 4, 8];

/// What `system` measured on `workload` at `p` GPUs in the paper ([`FIGURE_1`], and
/// [`TEXT_1X1K_AT_8`] for the 1K sequence), in ms; `None` where the paper gives no time.
fn paper_ms(system: &str, workload: &str, p: usize) -> Option<f64> {
    if workload == "1×1K" {
        return (p == 8).then(|| TEXT_1X1K_AT_8.iter().find(|(s, _)| *s == system).map(|&(_, ms)| ms)).flatten();
    }
    let i = FIGURE_1_DEVICES.iter().position(|&d| d == p)?;
    FIGURE_1.iter().find(|(s, w, _)| *s == system && *w == workload).and_then(|(_, _, ms)| ms[i])
}

/// The systems of Figure 1.
const SYSTEMS: [&str; 4] = ["Einsummable", "JAX", "PyTorch", "vLLM"];

/// How far a prediction may stray from the paper's measured time and still count as close:
/// ±30% (issue 15's target).
const CLOSE: f64 = 0.3;

/// The strategies compared, ours first.
pub(crate) fn strategies() -> Vec<Strategy> {
    vec![Strategy::dp(), Strategy::data(), Strategy::megatron(), Strategy::ulysses(), Strategy::mesh2d()]
}

pub(crate) fn run(setup: &Setup, runner: &mut Runner) -> (Table, BarChart) {
    let workloads = transformer_workloads(setup.small);
    let what = format!(
        "Predicted time (ms) of one LLaMA-3-8B block (d_model 4096, 32 query and 8 key/value heads of 128, \
         d_ff 14336{}; f16) per token workload (sequences×length), planned by each strategy under the time \
         cost model and compiled with searched exchange programs ({} iterations per program) for {}. \
         Geometric means per strategy and p over the workloads.",
        if setup.small { ", shrunk by --small: dimensions /16, tokens /64" } else { "" },
        setup.iterations(),
        setup.topology.name()
    );
    let (mut table, chart) =
        versus("transformer", setup, runner, &workloads, &setup.compared(strategies()), what, true);
    if setup.topology.name() == "dgx-a100" && !setup.small {
        table.notes.extend(against_paper(setup, runner, &workloads));
    }
    (table, chart)
}

/// The DP's predictions over Einsummable's measured times in the paper at every `p` of the
/// setup that Figure 1 has (1, 4, 8): one note per workload with the ratio and the range the
/// four systems measured, and per `p` the geometric mean of the ratios.
fn against_paper(setup: &Setup, runner: &Runner, workloads: &[(String, String)]) -> Vec<String> {
    let mut notes = Vec::new();
    for &p in setup.devices.iter().filter(|p| FIGURE_1_DEVICES.contains(p)) {
        let mut ratios = Vec::new();
        for (label, w) in workloads {
            let Some(paper) = paper_ms("Einsummable", label, p) else { continue };
            let measured: Vec<f64> = SYSTEMS.iter().filter_map(|s| paper_ms(s, label, p)).collect();
            let (lo, hi) = measured.iter().fold((f64::INFINITY, 0.0_f64), |(lo, hi), &m| (lo.min(m), hi.max(m)));
            let case = Case::new(w, p, &Strategy::dp(), setup.search(), &setup.topology);
            match runner.get(&case) {
                Ok(m) => {
                    let ratio = m.predicted_ms / paper;
                    let verdict = if (ratio - 1.0).abs() <= CLOSE { "within" } else { "outside" };
                    notes.push(format!(
                        "{label}, p = {p}: dp predicts {:.4} ms, Einsummable measured {paper} ms on {p}×A100: ratio \
                         {ratio:.3} ({verdict} ±{:.0}%); the {} systems measured {lo}-{hi} ms",
                        m.predicted_ms,
                        CLOSE * 100.0,
                        measured.len()
                    ));
                    ratios.push(ratio);
                }
                Err(e) => notes.push(format!("{label}, p = {p}: no prediction ({e})")),
            }
        }
        if let Some(g) = geometric_mean(&ratios) {
            notes.push(format!("p = {p}: geometric mean of the {} ratios predicted / measured: {g:.3}", ratios.len()));
        }
    }
    notes
}

/// A strategies × (workload, p) table of predicted ms, optionally with geometric-mean rows
/// per p, and its chart (each bar relative to the first strategy's time in its group).
pub(crate) fn versus(
    name: &str,
    setup: &Setup,
    runner: &mut Runner,
    workloads: &[(String, String)],
    strategies: &[Strategy],
    caption: String,
    geomeans: bool,
) -> (Table, BarChart) {
    let case = |w: &str, p: usize, s: &Strategy| Case::new(w, p, s, setup.search(), &setup.topology);
    let cases: Vec<Case> = setup
        .devices
        .iter()
        .flat_map(|&p| workloads.iter().flat_map(move |(_, w)| strategies.iter().map(move |s| (w, p, s))))
        .map(|(w, p, s)| case(w, p, s))
        .collect();
    runner.run_all(name, &cases);

    let mut columns = vec!["workload", "p"];
    columns.extend(strategies.iter().map(Strategy::name));
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
    let chart = relative_chart(&table, 2, &format!("{name}: predicted time relative to {}", strategies[0].name()));
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

#[cfg(test)]
mod tests {
    use super::*;
    use einsum_sim::{ATTENTION_COMPUTE_EFFICIENCY, Precision, Topology};

    /// Every system's eight-GPU times over the five workloads, in the order of the paper's
    /// geometric means.
    fn at_8(system: &str) -> Vec<f64> {
        ["1×1K", "1×8K", "1×128K", "8×1K", "128×1K"].iter().filter_map(|w| paper_ms(system, w, 8)).collect()
    }

    /// The values read off Figure 1 belong to the systems they are given to: each system's
    /// five eight-GPU times give the geometric mean the paper states for it (Section 6.2 and
    /// the abstract: 8.97, 13.65 and 14.87 ms; the figure's times are rounded to three digits).
    #[test]
    fn figure_1_reproduces_the_geometric_means_the_paper_states() {
        for (system, stated) in [("Einsummable", 8.97), ("PyTorch", 13.65), ("vLLM", 14.87)] {
            let times = at_8(system);
            assert_eq!(times.len(), 5, "{system}");
            let g = geometric_mean(&times).expect("positive times");
            assert!((g / stated - 1.0).abs() < 1e-3, "{system}: {g} against the stated {stated}");
        }
        // JAX did not complete the 128K sequence: no geometric mean to check, four times.
        assert_eq!(at_8("JAX").len(), 4);
        assert_eq!(paper_ms("JAX", "1×128K", 8), None);
    }

    /// The 1×8K and 8×1K panels are told apart by their work (see [`FIGURE_1`]): on one GPU
    /// the two run the same GEMMs and elementwise kernels over 8192 tokens, and 1×8K's causal
    /// attention has eight times the FLOPs. Each system that runs attention as FlashAttention
    /// kernels (all but JAX, which uses cuDNN's) must then be slower on 1×8K by about the
    /// extra attention's time on an A100 at FlashAttention-2's efficiency: here within a
    /// factor of two of it either way. With the panels read the other way round every
    /// difference would be negative.
    #[test]
    fn the_1x8k_panel_is_the_one_with_eight_times_the_attention_work() {
        // 4 · d_head · heads_q FLOPs per causal (query, key) pair, L(L+1)/2 pairs a sequence.
        let attention_flops = |seqs: f64, len: f64| 4.0 * 128.0 * 32.0 * seqs * len * (len + 1.0) / 2.0;
        let extra = attention_flops(1.0, 8192.0) - attention_flops(8.0, 1024.0);
        assert!((extra / 1e9 - 481.0).abs() < 1.0, "{}", extra / 1e9);
        let a100 = Topology::preset("dgx-a100").expect("preset").sites()[0];
        let extra_ms = 1e3 * extra / (a100.compute.rate(Precision::F16) * ATTENTION_COMPUTE_EFFICIENCY);
        for system in ["Einsummable", "PyTorch", "vLLM"] {
            let slower = paper_ms(system, "1×8K", 1).unwrap() - paper_ms(system, "8×1K", 1).unwrap();
            assert!(slower > extra_ms / 2.0 && slower < extra_ms * 2.0, "{system}: {slower} ms against {extra_ms}");
        }
    }

    #[test]
    fn the_1k_sequence_is_known_only_at_eight_gpus() {
        assert_eq!(paper_ms("Einsummable", "1×1K", 8), Some(1.21));
        assert_eq!(paper_ms("JAX", "1×1K", 8), Some(0.83));
        assert_eq!(paper_ms("Einsummable", "1×1K", 4), None);
        assert_eq!(paper_ms("Einsummable", "8×1K", 4), Some(4.16));
        assert_eq!(paper_ms("Einsummable", "8×1K", 2), None);
        assert_eq!(paper_ms("Nobody", "8×1K", 8), None);
    }
}

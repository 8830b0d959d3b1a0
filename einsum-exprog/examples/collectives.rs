//! Naive versus searched exchange programs for the classic collectives over 8 GPUs, next to
//! the bandwidth lower bounds (the paper's Experiment 4, on collectives).
//!
//! ```text
//! cargo run --release -p einsum-exprog --example collectives [-- --iterations N --seed S --show]
//! ```
//!
//! Each site holds 1 GB (all-gather: 1/8 GB, and ends with 1 GB). `--show` prints the
//! searched programs.

use std::process::ExitCode;
use std::time::Instant;

use einsum_exprog::simulate;
use einsum_exprog::synth::collectives::{Collective, per_site_bandwidth};
use einsum_exprog::synth::{SearchOptions, naive, search};
use einsum_sim::{GB, Topology};

const SITES: usize = 8;
const TOTAL_GB: f64 = 1.0;

fn main() -> ExitCode {
    let mut options = SearchOptions::default();
    let mut show = false;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut number = |what: &str| -> Option<u64> {
            let parsed = args.next().and_then(|v| v.parse().ok());
            if parsed.is_none() {
                eprintln!("{what} needs a non-negative integer");
            }
            parsed
        };
        match arg.as_str() {
            "--iterations" => match number("--iterations") {
                Some(n) => options.iterations = n as usize,
                None => return ExitCode::FAILURE,
            },
            "--seed" => match number("--seed") {
                Some(n) => options.seed = n,
                None => return ExitCode::FAILURE,
            },
            "--show" => show = true,
            other => {
                eprintln!("unknown argument {other}; expected --iterations N, --seed S or --show");
                return ExitCode::FAILURE;
            }
        }
    }
    match run(options, show) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(options: SearchOptions, show: bool) -> Result<(), Box<dyn std::error::Error>> {
    println!(
        "{SITES} sites, {TOTAL_GB} GB per site, search seed {} with {} iterations",
        options.seed, options.iterations
    );
    println!(
        "{:<9} {:<15} {:>10} {:>11} {:>9} {:>16} {:>10} {:>8}  best found by",
        "machine", "collective", "naive ms", "searched ms", "bound ms", "searched/naive", "vs bound", "search s"
    );
    for name in ["dgx-a100", "dgx-v100"] {
        let topology = Topology::preset(name)?;
        for c in Collective::ALL {
            let preamble = c.preamble(SITES, TOTAL_GB);
            let naive_ms = simulate(&naive(&preamble)?, &topology)?.completion_ms;
            let start = Instant::now();
            let found = search(&preamble, &topology, options)?;
            let seconds = start.elapsed().as_secs_f64();
            let bound = c.bound_ms(SITES, TOTAL_GB, &topology);
            println!(
                "{:<9} {:<15} {:>10.2} {:>11.2} {:>9.2} {:>16.3} {:>9.2}x {:>8.1}  {} ({} evaluated)",
                name,
                c.name(),
                naive_ms,
                found.completion_ms,
                bound,
                found.completion_ms / naive_ms,
                found.completion_ms / bound,
                seconds,
                found.origin,
                found.evaluated,
            );
            if show {
                println!("{}", found.program);
            }
        }
    }
    let v100 = Topology::preset("dgx-v100")?;
    println!(
        "bound: DESIGN.md's formulas with the per-site bandwidth B = {:.2} GB/s on dgx-v100 (NVLink + the shared \
         bridge), {:.0} GB/s on dgx-a100",
        per_site_bandwidth(&v100, SITES) / GB,
        per_site_bandwidth(&Topology::preset("dgx-a100")?, SITES) / GB
    );
    Ok(())
}

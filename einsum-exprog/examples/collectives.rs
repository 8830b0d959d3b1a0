//! Naive versus searched exchange programs for the classic collectives over 8 GPUs, next to
//! the bandwidth lower bounds (the paper's Experiment 4, on collectives).
//!
//! ```text
//! cargo run --release -p einsum-exprog --example collectives [-- --iterations N --seed S --show]
//! cargo run --release -p einsum-exprog --example collectives -- --topology dgx-a100x2 [...]
//! ```
//!
//! Each site holds 1 GB (all-gather: 1/8 GB, and ends with 1 GB); `all-reduce (whole)` is
//! the all-reduce of one indivisible 1 GB atom per site, which only atom refinement chunks. `--show` prints the
//! searched programs. `--topology NAME` (a machine of several nodes, e.g. `dgx-a100x2`)
//! prints instead, over all its sites, the best flat synthesis (hierarchical seeds off) next
//! to the synthesis with them and the lower bound on the traffic between nodes
//! ([`Collective::inter_node_bound_ms`]).

use std::process::ExitCode;
use std::time::Instant;

use einsum_exprog::simulate;
use einsum_exprog::synth::collectives::{Collective, all_reduce_whole, per_site_bandwidth};
use einsum_exprog::synth::{CORPUS_SEARCH_ITERATIONS, SearchOptions, naive, search};
use einsum_sim::{GB, Topology};

const SITES: usize = 8;
const TOTAL_GB: f64 = 1.0;

fn main() -> ExitCode {
    // The corpus's budget, at which its figures are measured: every walk runs.
    let mut options = SearchOptions { iterations: CORPUS_SEARCH_ITERATIONS, ..SearchOptions::default() };
    let mut show = false;
    let mut topology: Option<String> = None;
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
            "--topology" => match args.next() {
                Some(name) => topology = Some(name),
                None => {
                    eprintln!("--topology needs a preset name");
                    return ExitCode::FAILURE;
                }
            },
            other => {
                eprintln!("unknown argument {other}; expected --iterations N, --seed S, --topology NAME or --show");
                return ExitCode::FAILURE;
            }
        }
    }
    let result = match &topology {
        Some(name) => run_nodes(name, options, show),
        None => run(options, show),
    };
    match result {
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
        "{:<9} {:<18} {:>10} {:>9} {:>11} {:>9} {:>9} {:>6} {:>8}  best found by",
        "machine", "collective", "naive ms", "seed ms", "searched ms", "bound ms", "vs bound", "chunks", "search s"
    );
    for name in ["dgx-a100", "dgx-h100", "dgx-v100"] {
        let topology = Topology::preset(name)?;
        let cases = Collective::ALL
            .into_iter()
            .map(|c| (c.name(), c.preamble(SITES, TOTAL_GB), c.bound_ms(SITES, TOTAL_GB, &topology)))
            .chain([(
                "all-reduce (whole)",
                all_reduce_whole(SITES, TOTAL_GB),
                Collective::AllReduce.bound_ms(SITES, TOTAL_GB, &topology),
            )]);
        for (collective, preamble, bound) in cases {
            let naive_ms = simulate(&naive(&preamble)?, &topology)?.completion_ms;
            let start = Instant::now();
            let found = search(&preamble, &topology, options)?;
            let seconds = start.elapsed().as_secs_f64();
            println!(
                "{:<9} {:<18} {:>10.2} {:>9.2} {:>11.2} {:>9.2} {:>8.2}x {:>6} {:>8.1}  {} ({} evaluated)",
                name,
                collective,
                naive_ms,
                found.seed_ms,
                found.completion_ms,
                bound,
                found.completion_ms / bound,
                found.chunks,
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
        "bound: the bandwidth lower bounds of einsum-sim (bounds.rs) with the per-site bandwidth B = {:.2} GB/s on dgx-v100 (NVLink + the shared \
         bridge), {:.0} GB/s on dgx-a100, {:.0} GB/s on dgx-h100; `all-reduce (whole)`: one indivisible atom per site",
        per_site_bandwidth(&v100, SITES) / GB,
        per_site_bandwidth(&Topology::preset("dgx-a100")?, SITES) / GB,
        per_site_bandwidth(&Topology::preset("dgx-h100")?, SITES) / GB
    );
    Ok(())
}

/// The table of `--topology NAME`: flat best, hierarchical, and the inter-node bound, over
/// every site of a machine of several nodes.
fn run_nodes(name: &str, options: SearchOptions, show: bool) -> Result<(), Box<dyn std::error::Error>> {
    let topology = Topology::preset(name)?;
    let sites = topology.num_sites();
    println!(
        "{name}: {sites} sites in {} nodes, {TOTAL_GB} GB per site, search seed {} with {} iterations",
        topology.num_nodes(),
        options.seed,
        options.iterations
    );
    println!(
        "{:<15} {:>12} {:>16} {:>15} {:>10} {:>10}  best found by",
        "collective", "flat best ms", "hierarchical ms", "inter-node ms", "flat/hier", "vs bound"
    );
    for c in Collective::ALL {
        let preamble = c.preamble(sites, TOTAL_GB);
        let flat = search(&preamble, &topology, SearchOptions { hierarchical: false, ..options })?;
        let hier = search(&preamble, &topology, SearchOptions { hierarchical: true, ..options })?;
        let bound = c
            .inter_node_bound_ms(TOTAL_GB, &topology)
            .ok_or_else(|| format!("{name} is not a machine of equal nodes with a NIC per site"))?;
        println!(
            "{:<15} {:>12.2} {:>16.2} {:>15.2} {:>9.2}x {:>9.2}x  {} (flat: {})",
            c.name(),
            flat.completion_ms,
            hier.completion_ms,
            bound,
            flat.completion_ms / hier.completion_ms,
            hier.completion_ms / bound,
            hier.origin,
            flat.origin,
        );
        if show {
            println!("{}", hier.program);
        }
    }
    println!("inter-node: the bytes that must cross a cut around one node, through its NICs");
    Ok(())
}

//! A corpus of exchange problems taken from real plans, and what the exchange search earns
//! on each over its best seed.
//!
//! ```text
//! cargo run --release -p einsum-experiments --example exchange_corpus [-- --iterations N --seed S --seeds K --write DIR]
//! ```
//!
//! For every workload of the `exchange` experiment's two families (the transformer blocks at
//! the paper's model dimensions and chains A–E, tokens and sizes divided by 8) on `dgx-v100`
//! (8 GPUs) and on `dgx-a100x2` (two nodes, 16 GPUs), the DP's plan is compiled with naive
//! exchange programs, and the two distinct preambles moving the most bytes are kept (a
//! preamble is the program less its body: where the producer's blocks are and what the
//! consumer needs; the second is labelled `#2`); exchanges that are all local are left out. Each is then searched
//! (`einsum_exprog::synth::search`) and the table gives the naive program, the best seed
//! (where the annealing starts, over every chunk count), the searched result and the gain
//! `seed / searched`. The collectives of `einsum_exprog::synth::collectives` on `dgx-v100`
//! close the table. `--write DIR` saves each plan's preamble as an `.exprog` file (the
//! corpus `einsum-exprog/tests/data/corpus/` holds, read by its `tests/corpus.rs`).
//!
//! Whether a walk of the search improves on its seed depends much on its random stream, so
//! one seed's count of wins says little about a change to the search: `--seeds K` searches
//! the corpus again at the seeds `S + 1, ..., S + K - 1` as well and closes with each seed's
//! count and their total (the table is seed `S`'s).
//!
//! A plan's second preamble is sometimes its first up to a renaming of sites that the
//! machine cannot tell apart (`einsum_exprog::Relabelling`: equal canonical forms, and the
//! renaming `preserves` the topology): the same problem again, whose search is the same
//! renamed. Such a case is marked `(= first, renamed)` and the line after the table gives the count
//! with and without them.

use std::process::ExitCode;
use std::sync::Arc;

use einsum_compile::NaiveSynthesizer;
use einsum_core::DType;
use einsum_experiments::Workload;
use einsum_exprog::synth::collectives::{Collective, all_reduce_whole};
use einsum_exprog::synth::{CORPUS_SEARCH_ITERATIONS, SearchOptions, naive, search};
use einsum_exprog::{Program, Relabelling};
use einsum_logical::{Dp, Machine, Time};
use einsum_sim::Topology;

/// The machines and their device counts.
const MACHINES: &[(&str, usize)] = &[("dgx-v100", 8), ("dgx-a100x2", 16)];

/// The logical optimizer whose plans give the exchanges.
const STRATEGY: Dp = Dp;

/// How much the workloads are shrunk: tokens and chain sizes divided by it (the model
/// dimensions are the paper's).
const SCALE: usize = 8;

/// The workloads: the `exchange` experiment's (LLaMA blocks at the paper's dimensions,
/// chains A–E), their tokens and chain sizes divided by [`SCALE`].
fn workloads() -> Vec<(String, String)> {
    let d = "d_model=4096,heads_q=32,heads_kv=8,d_head=128,d_ff=14336";
    let mut w: Vec<(String, String)> = [(1, 1), (1, 8), (1, 128), (8, 1), (128, 1)]
        .iter()
        .map(|&(seqs, k)| {
            let tokens = seqs * k * 1024 / SCALE;
            (format!("llama {seqs}x{k}K"), format!("llama-block:tokens={tokens},seqs={seqs},{d}"))
        })
        .collect();
    w.extend(
        ["a", "b", "c", "d", "e"]
            .iter()
            .map(|c| (format!("chain {}", c.to_uppercase()), format!("chain-{c}:scale={SCALE}"))),
    );
    w
}

/// How many preambles each plan contributes: its [`PER_PLAN`] distinct exchanges moving the
/// most bytes (a plan's largest exchange is often a collective of the same shape as the
/// next, but not always: the second brings the corpus to about twenty plan preambles).
const PER_PLAN: usize = 2;

/// The [`PER_PLAN`] distinct preambles moving the most bytes among the exchange programs of
/// the plan of `workload` on `machine` with `devices` devices, planned by [`STRATEGY`],
/// largest first, leaving out those with nothing to move.
fn largest_preambles(
    workload: &str,
    machine: &str,
    devices: usize,
) -> Result<Vec<Program>, Box<dyn std::error::Error>> {
    let graph = Workload::parse(workload)?.build(DType::F16)?;
    let topology = Topology::named(machine)?;
    let model = Time::on(Machine::from_topology(&topology));
    let planned = einsum_compile::plan_and_compile(&einsum_compile::pipeline::Request {
        comp: graph.computation(),
        devices,
        strategy: &STRATEGY,
        cost: &model,
        topology: &topology,
        synthesizer: Arc::new(NaiveSynthesizer),
        memory_budget: None,
        host_memory: None,
        refine: einsum_compile::refine::DEFAULT_REFINE,
    })?;
    let bytes = |p: &Program| -> f64 { p.inputs.values().map(|i| i.size_gb).sum() };
    let mut preambles: Vec<Program> = Vec::new();
    for e in &planned.compiled.programs {
        let p = e.program.with_body([]);
        if !naive(&p)?.body.is_empty() && !preambles.contains(&p) {
            preambles.push(p);
        }
    }
    preambles.sort_by(|a, b| bytes(b).total_cmp(&bytes(a)));
    preambles.truncate(PER_PLAN);
    Ok(preambles)
}

fn main() -> ExitCode {
    // The corpus's budget, at which its figures are measured: every walk runs.
    let mut options = SearchOptions { iterations: CORPUS_SEARCH_ITERATIONS, ..SearchOptions::default() };
    let mut seeds = 1;
    let mut write: Option<std::path::PathBuf> = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let value = args.next();
        let number = value.as_deref().and_then(|v| v.parse::<u64>().ok());
        match (arg.as_str(), number, value) {
            ("--iterations", Some(n), _) => options.iterations = n as usize,
            ("--seed", Some(s), _) => options.seed = s,
            ("--seeds", Some(k), _) if k > 0 => seeds = k,
            ("--write", _, Some(dir)) => write = Some(dir.into()),
            _ => {
                eprintln!("expected --iterations N, --seed S, --seeds K (at least 1) or --write DIR, got {arg}");
                return ExitCode::FAILURE;
            }
        }
    }
    match run(options, seeds, write.as_deref()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Builds the corpus, writing each plan's preamble to `write` (as
/// `{machine}-{workload}.exprog`) if given, prints the table at `options.seed` and, with
/// `seeds` over 1, the wins at each of the `seeds` seeds from it.
fn run(options: SearchOptions, seeds: u64, write: Option<&std::path::Path>) -> Result<(), Box<dyn std::error::Error>> {
    let mut cases: Vec<(String, String, Program)> = Vec::new();
    for &(machine, devices) in MACHINES {
        for (label, workload) in workloads() {
            match largest_preambles(&workload, machine, devices) {
                Ok(ps) if ps.is_empty() => {
                    eprintln!("{machine} {label}: nothing to move (every atom is where it is needed)")
                }
                Ok(ps) => {
                    for (rank, p) in ps.into_iter().enumerate() {
                        let label = if rank == 0 { label.clone() } else { format!("{label} #{}", rank + 1) };
                        if let Some(dir) = write {
                            let name = format!(
                                "{machine}-{}.exprog",
                                label.replace([' ', '#'], "-").replace("--", "-").to_lowercase()
                            );
                            std::fs::write(dir.join(name), format!("# {workload} on {machine}\n{p}"))?;
                        }
                        cases.push((machine.to_string(), label, p));
                    }
                }
                Err(e) => eprintln!("{machine} {label}: {e}"),
            }
        }
    }
    for c in Collective::ALL {
        cases.push(("dgx-v100".into(), c.name().into(), c.preamble(8, 1.0)));
    }
    cases.push(("dgx-v100".into(), "all-reduce (whole)".into(), all_reduce_whole(8, 1.0)));

    let duplicates = relabelled_duplicates(&cases)?;
    println!("search seed {}, {} iterations", options.seed, options.iterations);
    println!(
        "| machine | case | atoms | GB in | naive ms | best seed ms | searched ms | gain | chunks | best found by |\n\
         |---|---|---|---|---|---|---|---|---|---|"
    );
    let first = judge(&cases, &duplicates, options, true)?;
    println!(
        "search beat its best seed on {} of {} cases ({} of {} without the relabelled duplicates), lost on {}",
        first.wins, first.cases, first.distinct_wins, first.distinct, first.losses
    );
    if seeds > 1 {
        let last = options.seed.saturating_add(seeds - 1);
        let mut all = vec![first];
        for seed in (options.seed..=last).skip(1) {
            all.push(judge(&cases, &duplicates, SearchOptions { seed, ..options }, false)?);
        }
        let counts = |f: fn(&Tally) -> usize| all.iter().map(|t| f(t).to_string()).collect::<Vec<_>>().join(" / ");
        println!(
            "over seeds {}..={last}: wins {} ({} in all), lost {} ({} in all)",
            options.seed,
            counts(|t| t.wins),
            all.iter().map(|t| t.wins).sum::<usize>(),
            counts(|t| t.losses),
            all.iter().map(|t| t.losses).sum::<usize>(),
        );
    }
    Ok(())
}

/// What the search did on the corpus at one seed.
struct Tally {
    /// Cases with something to move once placed.
    cases: usize,
    wins: usize,
    losses: usize,
    /// The same without the relabelled duplicates.
    distinct: usize,
    distinct_wins: usize,
}

/// Searches every case with `options`, printing a table row per case when `print`.
fn judge(
    cases: &[(String, String, Program)],
    duplicates: &[Option<String>],
    options: SearchOptions,
    print: bool,
) -> Result<Tally, Box<dyn std::error::Error>> {
    let mut tally = Tally { cases: 0, wins: 0, losses: 0, distinct: 0, distinct_wins: 0 };
    for ((machine, label, preamble), duplicate) in cases.iter().zip(duplicates) {
        let topology = Topology::named(machine)?;
        let found = search(preamble, &topology, options)?;
        if found.seed_ms <= 0.0 {
            // partitions declared by size: a placement that follows the data moves nothing
            if print {
                eprintln!("{machine} {label}: nothing to move once placed (a seed completes at once)");
            }
            continue;
        }
        tally.cases += 1;
        let won = found.completion_ms < found.seed_ms * (1.0 - 1e-9);
        tally.wins += usize::from(won);
        tally.losses += usize::from(found.completion_ms > found.seed_ms * (1.0 + 1e-9));
        if duplicate.is_none() {
            tally.distinct += 1;
            tally.distinct_wins += usize::from(won);
        }
        if print {
            let label = match duplicate {
                Some(first) => format!("{label} (= {first}, renamed)"),
                None => label.clone(),
            };
            println!(
                "| {machine} | {label} | {} | {:.4} | {:.4} | {:.4} | {:.4} | {:.3} | {} | {} |",
                preamble.inputs.len(),
                preamble.inputs.values().map(|i| i.size_gb).sum::<f64>(),
                found.naive_ms,
                found.seed_ms,
                found.completion_ms,
                found.seed_ms / found.completion_ms,
                found.chunks,
                found.origin,
            );
        }
    }
    Ok(tally)
}

/// For each case, the label of an earlier case on the same machine that it equals up to a
/// renaming of sites the machine cannot tell apart ([`Relabelling::preserves`]), if any.
fn relabelled_duplicates(
    cases: &[(String, String, Program)],
) -> Result<Vec<Option<String>>, Box<dyn std::error::Error>> {
    let canonical: Vec<(Relabelling, Program)> = cases
        .iter()
        .map(|(_, _, p)| {
            let r = Relabelling::canonical(p);
            let form = r.program(p);
            (r, form)
        })
        .collect();
    let mut out = Vec::with_capacity(cases.len());
    for (j, (machine, _, _)) in cases.iter().enumerate() {
        let topology = Topology::named(machine)?;
        let first = (0..j).find(|&i| {
            cases[i].0 == *machine
                && canonical[i].1 == canonical[j].1
                && canonical[i].0.then(&canonical[j].0.inverse()).preserves(&topology)
        });
        out.push(first.map(|i| cases[i].1.clone()));
    }
    Ok(out)
}

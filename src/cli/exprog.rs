//! `einsummable exprog`: check, simulate and synthesize exchange programs (Section 5).

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use einsum_core::fsio::{MAX_INPUT_FILE_BYTES, read_capped};
use einsum_exprog::{
    Membership, load, load_valid, simulate,
    synth::{self, SearchOptions},
};
use einsum_sim::{PCIE_BRIDGE, Topology};
use einsummable::experiment::Progress;
use einsummable::{Error, Result};
use serde::Serialize;

use super::{Report, SynthesizerName};

/// The `exprog` subcommands.
#[derive(clap::Subcommand)]
pub enum Command {
    /// Parses a program, runs the static checks and decides validity (Definition 5.5),
    /// choosing the membership of partitions declared by size.
    Check {
        #[arg(help = file_help(""))]
        file: PathBuf,
    },
    /// Simulates a program on a topology and reports its completion time.
    Simulate {
        #[arg(help = file_help(""))]
        file: PathBuf,
        #[arg(long, help = super::topology_help("the machine"))]
        topology: String,
    },
    /// Synthesizes a body for a program's preamble (its GPUS, PARTITIONS, IN and OUT).
    Synthesize {
        #[arg(help = file_help("; its body, if any, seeds the search"))]
        file: PathBuf,
        #[arg(long, help = super::topology_help("the machine"))]
        topology: String,
        /// How the body is synthesized (`--mode` and `--schedule` are this flag's older names).
        #[arg(long, aliases = ["mode", "schedule"], value_enum, default_value_t = SynthesizerName::Search)]
        synthesizer: SynthesizerName,
        /// Seed of the search.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Iterations of the search.
        #[arg(long, default_value_t = einsummable::DEFAULT_SEARCH_ITERATIONS)]
        iterations: usize,
        /// Wall time in seconds the search may take, on top of the iteration cap.
        #[arg(long, value_name = "SECONDS", default_value_t = super::default_synthesis_budget_s())]
        synthesis_budget: f64,
    },
}

/// Runs an `exprog` subcommand.
pub fn run(command: Command) -> Result<Report> {
    match command {
        Command::Check { file } => {
            let (program, validation) = load_valid(&read(&file)?).map_err(|e| Error::from(e).in_file(&file))?;
            let file = file.display().to_string();
            let text = format!(
                "{file}: valid; {} actions; membership {}\n",
                program.body.len(),
                membership_text(&validation.membership)
            );
            let json = ExprogCheckJson {
                file: &file,
                valid: true,
                actions: program.body.len(),
                membership: membership_json(&validation.membership),
            };
            Ok(Report::new(&json, text, true))
        }
        Command::Simulate { file, topology } => {
            let program = load(&read(&file)?).map_err(|e| Error::from(e).in_file(&file))?;
            let topo = Topology::named(&topology)?;
            let sim = simulate(&program, &topo).map_err(|e| Error::from(e).in_file(&file))?;
            let file = file.display().to_string();
            let bridge = sim.trace.bytes_through(PCIE_BRIDGE);
            let mut text = format!(
                "{file} on {topology}: {} ms ({} ms of transfers), membership {}\n",
                round(sim.completion_ms),
                round(sim.transfer_ms),
                membership_text(&sim.membership)
            );
            if let Some(reason) = &sim.invalid {
                text += &format!("INVALID: {reason}\n");
            }
            let json = ExprogSimulateJson {
                file: &file,
                topology: &topology,
                valid: sim.valid,
                invalid: sim.invalid.as_ref().map(|e| e.to_string()),
                completion_ms: sim.completion_ms,
                transfer_ms: sim.transfer_ms,
                membership: membership_json(&sim.membership),
                bridge_bytes: bridge,
            };
            Ok(Report::new(&json, text, sim.valid))
        }
        Command::Synthesize { file, topology, synthesizer, seed, iterations, synthesis_budget } => {
            let time_limit = Some(super::synthesis_budget(synthesis_budget)?);
            let in_file = |e: Error| e.in_file(&file);
            let preamble = load(&read(&file)?).map_err(|e| in_file(e.into()))?;
            let topo = Topology::named(&topology)?;
            let shown = file.display().to_string();
            let (program, completion_ms, membership, search) = match synthesizer {
                SynthesizerName::Naive => {
                    let program = synth::naive(&preamble).map_err(|e| in_file(e.into()))?;
                    let sim = simulate(&program, &topo).map_err(|e| in_file(e.into()))?;
                    (program, sim.completion_ms, sim.membership, None)
                }
                SynthesizerName::Search => {
                    let options = SearchOptions { seed, iterations, time_limit, ..SearchOptions::default() };
                    // A bar on a terminal only: logs and pipes get the result alone.
                    let mut bar = Progress::new("search", iterations, std::io::stderr().is_terminal());
                    bar.start(&shown);
                    let s = synth::search_observed(&preamble, &topo, options, &mut |_| bar.done())
                        .map_err(|e| in_file(e.into()))?;
                    bar.finish();
                    let search = SearchStatsJson {
                        naive_ms: s.naive_ms,
                        evaluated: s.evaluated,
                        origin: s.origin,
                        fallback: s.fallback.map(|f| f.to_string()),
                    };
                    (s.program, s.completion_ms, s.membership, Some(search))
                }
            };
            let fallback = search.as_ref().and_then(|s| s.fallback.as_ref());
            let text = format!(
                "# {synthesizer} synthesis on {topology}: {} ms, membership {}\n{}{program}\n",
                round(completion_ms),
                membership_text(&membership),
                fallback.map_or_else(String::new, |why| format!("# not searched: {why}\n"))
            );
            let json = ExprogSynthesizeJson {
                file: &shown,
                topology: &topology,
                mode: synthesizer.name(),
                completion_ms,
                membership: membership_json(&membership),
                program: program.to_string(),
                search,
            };
            Ok(Report::new(&json, text, true))
        }
    }
}

/// The help of an `.exprog` file argument, with the size cap and `more` to say.
fn file_help(more: &str) -> String {
    format!("The `.exprog` file (UTF-8 text of at most {} MiB{more})", MAX_INPUT_FILE_BYTES >> 20)
}

/// The text of an `.exprog` file, refused past [`MAX_INPUT_FILE_BYTES`] (so `/dev/zero`
/// or a runaway pipe fails instead of exhausting memory).
fn read(path: &Path) -> Result<String> {
    Ok(read_capped(path, MAX_INPUT_FILE_BYTES)?)
}

fn round(ms: f64) -> String {
    format!("{ms:.3}")
}

/// A membership as JSON: each partition's name and its sites, in ascending order.
fn membership_json(m: &Membership) -> BTreeMap<String, Vec<usize>> {
    m.0.iter().map(|(name, sites)| (name.as_str().to_string(), sites.iter().map(|s| s.0).collect())).collect()
}

fn membership_text(m: &Membership) -> String {
    if m.0.is_empty() { "(no partitions)".to_string() } else { m.to_string() }
}

/// The `--json` object of `exprog check`.
#[derive(Serialize)]
pub struct ExprogCheckJson<'a> {
    /// The `.exprog` file.
    pub file: &'a str,
    /// Always true: an invalid program is an error instead.
    pub valid: bool,
    /// The number of actions in the program's body.
    pub actions: usize,
    /// The sites of each partition, by partition name, as the check chose them.
    pub membership: BTreeMap<String, Vec<usize>>,
}

/// The `--json` object of `exprog simulate`.
#[derive(Serialize)]
pub struct ExprogSimulateJson<'a> {
    /// The `.exprog` file.
    pub file: &'a str,
    /// The topology (a preset's name or a file) it was simulated on.
    pub topology: &'a str,
    /// Whether the program is valid (Definition 5.5; the exit code is 1 otherwise).
    pub valid: bool,
    /// Why it is invalid; `null` when valid.
    pub invalid: Option<String>,
    /// The simulated completion time, in ms.
    pub completion_ms: f64,
    /// The time spent in transfers, in ms.
    pub transfer_ms: f64,
    /// The sites of each partition, by partition name.
    pub membership: BTreeMap<String, Vec<usize>>,
    /// Bytes through the PCIe bridge (a float, as the simulator counts them).
    pub bridge_bytes: f64,
}

/// The `--json` object of `exprog synthesize`; with `--synthesizer search`, the search's
/// statistics follow as `naive_ms`, `evaluated`, `origin` and `fallback` (absent with
/// `naive`).
#[derive(Serialize)]
pub struct ExprogSynthesizeJson<'a> {
    /// The `.exprog` file with the preamble.
    pub file: &'a str,
    /// The topology (a preset's name or a file) the program was synthesised for.
    pub topology: &'a str,
    /// `naive` or `search`.
    pub mode: &'static str,
    /// The synthesised program's simulated completion time, in ms.
    pub completion_ms: f64,
    /// The sites of each partition, by partition name.
    pub membership: BTreeMap<String, Vec<usize>>,
    /// The synthesised program in ExProg syntax.
    pub program: String,
    /// The search's statistics, flattened into this object; absent with `--synthesizer naive`.
    #[serde(flatten)]
    pub search: Option<SearchStatsJson>,
}

/// What the search of `exprog synthesize --synthesizer search` did.
#[derive(Serialize)]
pub struct SearchStatsJson {
    /// The naive program's simulated completion time, in ms (a seed of the search, so
    /// never beaten by `completion_ms`).
    pub naive_ms: f64,
    /// Candidates validated and simulated (seeds and annealing; duplicates count once).
    pub evaluated: usize,
    /// How the best candidate was reached (the seed, or the last move that improved it).
    pub origin: String,
    /// Why the search did not run and the program is the naive one (its state would not fit
    /// the memory it may take); `null` when it ran.
    pub fallback: Option<String>,
}

//! One module per command: its arguments and what it prints.

use std::fmt;
use std::path::Path;

use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
use std::sync::Arc;

use einsummable::{DType, Error, ExchangeSynthesizer, NaiveSynthesizer, Result, SearchSynthesizer, names};
use serde::Serialize;

pub mod check;
pub mod experiment;
pub mod exprog;
pub mod generate;
pub mod job;
pub mod plan;
pub mod run;
pub mod source;
pub mod specs;
#[cfg(test)]
mod tests;
pub mod trace;

/// What a command produced: its JSON object, its text, and whether it succeeded.
pub struct Report {
    /// The object printed with `--json`, serialised from the command's JSON struct (its
    /// keys in the struct's declaration order); empty, like `text`, for a command that
    /// prints nothing (a rank of an MPI job other than 0).
    pub json: String,
    /// The text printed otherwise.
    pub text: String,
    /// False when the command ran but its check failed (exit code 1).
    pub ok: bool,
}

impl Report {
    /// A report whose `--json` object is `json` serialised.
    pub fn new(json: &impl Serialize, text: String, ok: bool) -> Self {
        Report { json: to_json(json), text, ok }
    }

    /// The report of a command that succeeded and prints nothing.
    pub fn silent() -> Self {
        Report { json: String::new(), text: String::new(), ok: true }
    }
}

/// The `--json` object of a failure: stdout still holds exactly one JSON object.
#[derive(Serialize)]
pub struct ErrorJson<'a> {
    /// The error message, as printed on stderr.
    pub error: &'a str,
}

/// The `--json` object of `--help` or `--version`: the text they print without `--json`.
#[derive(Serialize)]
pub struct HelpJson<'a> {
    /// The help or version text.
    pub help: &'a str,
}

/// `value` as one line of JSON. The report structs serialise only strings, numbers, lists
/// and string-keyed maps, which cannot fail; were one to fail, the line is an
/// [`ErrorJson`] saying so rather than a panic.
pub fn to_json(value: &impl Serialize) -> String {
    serde_json::to_string(value).unwrap_or_else(|e| {
        let error = format!("internal error: the JSON report could not be serialised: {e}");
        serde_json::to_string(&ErrorJson { error: &error }).unwrap_or_default()
    })
}

/// A value parser that accepts the names of a registry table, each with its line of help,
/// so the table stays the one source of the names, of `--help` and of the error that lists
/// them.
fn table(entries: impl Iterator<Item = (&'static str, &'static str)>) -> PossibleValuesParser {
    PossibleValuesParser::new(entries.map(|(name, about)| PossibleValue::new(name).help(about)))
}

/// `--rewrites` of `plan`, `run`, `explain` and `generate`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Rewrites {
    /// Also plan the cheapest other forms of the graph's contraction networks and keep the
    /// fastest.
    On,
    /// Plan the graph as written.
    Off,
}

/// The lines saying, per contraction network, which form was planned, per permute whether it
/// was absorbed, per merge site whether its weights were merged and per epilogue site whether
/// its chain was fused (the first [`SITE_LINES`] sites of each rule, then how many more).
pub fn rewrites_text(changes: Option<&[einsummable::rewrite::Change]>) -> String {
    let changes = changes.unwrap_or_default();
    let line = |c: &einsummable::rewrite::Change| match (c.rule.as_str(), c.as_written()) {
        ("association" | "order", true) => {
            format!("rewrites: {} kept as written (the fastest of the forms planned)\n", c.written)
        }
        ("association" | "order", false) => format!("rewrites: {} planned as {}\n", c.written, c.chosen),
        ("transpose", true) => format!("rewrites: {} kept (the fastest of the forms planned)\n", c.written),
        ("transpose", false) => format!("rewrites: {}\n", c.chosen),
        ("epilogue", true) => format!("rewrites: {} kept unfused (the fastest of the forms planned)\n", c.written),
        ("epilogue", false) => format!("rewrites: {} fused into one kernel\n", c.written),
        (_, true) => format!("rewrites: {} kept separate (the fastest of the forms planned)\n", c.written),
        (_, false) => format!("rewrites: merged {} ({})\n", c.written, c.chosen),
    };
    let network = |c: &&einsummable::rewrite::Change| matches!(c.rule.as_str(), "association" | "order" | "transpose");
    let mut text: String = changes.iter().filter(network).map(line).collect();
    // Sites of the other rules (merges, epilogues), at most SITE_LINES each, then a count.
    let mut rules: Vec<&str> = Vec::new();
    for c in changes.iter().filter(|c| !network(c)) {
        if !rules.contains(&c.rule.as_str()) {
            rules.push(&c.rule);
        }
    }
    for rule in rules {
        let sites: Vec<_> = changes.iter().filter(|c| c.rule == rule).collect();
        text.extend(sites.iter().take(SITE_LINES).map(|c| line(c)));
        if sites.len() > SITE_LINES {
            let (done, what) = if rule == "epilogue" { ("fused", "epilogue") } else { ("merged", "merge") };
            let changed = sites.iter().filter(|c| !c.as_written()).count();
            text += &format!(
                "rewrites: ... and {} more {what} sites ({changed} of {} {done} in all)\n",
                sites.len() - SITE_LINES,
                sites.len()
            );
        }
    }
    text
}

/// The sites of each rule (merges, epilogues) [`rewrites_text`] lists one per line.
pub const SITE_LINES: usize = 4;

/// `--optimizer`: a name of the [`names::optimizers`] table.
pub fn optimizer_names() -> PossibleValuesParser {
    table(names::optimizers().iter().map(|e| (e.name, e.about)))
}

/// `--cost`: a name of the [`names::cost_models`] table.
pub fn cost_names() -> PossibleValuesParser {
    table(names::cost_models().iter().map(|e| (e.name, e.about)))
}

/// `--backend`: a name of the [`einsummable::backends`] table.
pub fn backend_names() -> PossibleValuesParser {
    let jobs = [(job::NAME, job::ABOUT), (job::CUDA_NAME, job::CUDA_ABOUT)];
    table(einsummable::backends().iter().map(|e| (e.name, e.about)).chain(jobs))
}

/// The help of `--topology`, from the [`einsum_sim::PRESETS`] and [`einsum_sim::NODE_PRESETS`]
/// tables; `what` says what it is for.
pub fn topology_help(what: &str) -> String {
    format!("A topology preset ({}) or a topology file: {what}", einsum_sim::preset_forms())
}

/// The machine `plan`, `run` and `explain` target without `--topology`, scaled to as many
/// nodes as `--devices` needs.
pub use einsummable::DEFAULT_TOPOLOGY;

/// The help of an optional `--topology` whose default is [`DEFAULT_TOPOLOGY`] scaled to the
/// devices.
pub fn scaled_topology_help(what: &str) -> String {
    format!(
        "{} [default: {DEFAULT_TOPOLOGY}, or {DEFAULT_TOPOLOGY}xN with the fewest nodes N that hold --devices]",
        topology_help(what)
    )
}

/// The topology a command targets, and how it was chosen.
pub struct ChosenTopology {
    /// Its name: `--topology` as given (a preset or a file), or the chosen preset.
    pub name: String,
    /// The machine.
    pub topology: einsum_sim::Topology,
    /// When the default was scaled past one node: a line saying so, for the text output.
    pub note: Option<String>,
}

/// `--topology` as given, or without it [`DEFAULT_TOPOLOGY`] scaled to the fewest nodes
/// that hold `devices` (`dgx-a100x2` for 16). A `--topology` with too few sites is kept:
/// compiling on it fails with the typed error.
pub fn choose_topology(arg: Option<&str>, devices: usize) -> Result<ChosenTopology> {
    let (name, note) = match arg {
        Some(name) => (name.to_string(), None),
        None => match einsum_sim::scaled_preset(DEFAULT_TOPOLOGY, devices) {
            Some(name) if name != DEFAULT_TOPOLOGY => {
                let nodes = devices.div_ceil(einsum_sim::GPUS_PER_NODE);
                let note = format!(
                    "topology {name}: no --topology given, so the default {DEFAULT_TOPOLOGY} scaled to {nodes} nodes \
                     for {devices} devices"
                );
                (name, Some(note))
            }
            _ => (DEFAULT_TOPOLOGY.to_string(), None),
        },
    };
    // A missing file is reported as such, not as an unknown preset.
    let topology = einsum_sim::Topology::named(&name)?;
    Ok(ChosenTopology { name, topology, note })
}

/// `--dtype`: one of [`DType::ALL`], by its name.
pub fn dtype_names() -> impl TypedValueParser<Value = DType> {
    PossibleValuesParser::new(DType::ALL.map(DType::name)).try_map(|name| name.parse::<DType>())
}

/// The name of one of the project's exchange synthesizers: `--synthesizer` on `plan`, `run`,
/// `explain` and `exprog synthesize` (which also take the older `--schedule`, and `--mode` on
/// `exprog synthesize`, as aliases).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum SynthesizerName {
    /// Gather and aggregate at each target.
    Naive,
    /// Simulated annealing from the naive program, timed by the simulator.
    Search,
}

impl SynthesizerName {
    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            SynthesizerName::Naive => "naive",
            SynthesizerName::Search => "search",
        }
    }

    /// The synthesizer a compile takes: with `search`, the seed, the iteration cap and the
    /// wall-time budget (`--synthesis-budget`, seconds) per exchange program, and the naive
    /// fallback.
    pub fn synthesizer(self, seed: u64, iterations: usize, budget_s: f64) -> Result<Arc<dyn ExchangeSynthesizer>> {
        let budget = synthesis_budget(budget_s)?;
        Ok(match self {
            SynthesizerName::Naive => Arc::new(NaiveSynthesizer),
            SynthesizerName::Search => {
                Arc::new(SearchSynthesizer { seed, iterations, budget: Some(budget), naive_fallback: true })
            }
        })
    }
}

impl fmt::Display for SynthesizerName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The default of `--synthesis-budget`, in seconds: the library's
/// [`einsummable::DEFAULT_SYNTHESIS_BUDGET`] (`--iterations 18446744073709551615` returns
/// after this many seconds per program).
pub fn default_synthesis_budget_s() -> f64 {
    einsummable::DEFAULT_SYNTHESIS_BUDGET.as_secs_f64()
}

/// `--synthesis-budget SECONDS` as a duration (see [`seconds`]).
pub fn synthesis_budget(s: f64) -> Result<std::time::Duration> {
    seconds("--synthesis-budget", s)
}

/// The value of the wall-time option `flag` as a duration: positive and finite, and no more
/// than a year (so that it is a `Duration`).
fn seconds(flag: &str, seconds: f64) -> Result<std::time::Duration> {
    const YEAR_S: f64 = 365.0 * 24.0 * 3600.0;
    if seconds.is_finite() && seconds > 0.0 && seconds <= YEAR_S {
        Ok(std::time::Duration::from_secs_f64(seconds))
    } else {
        Err(Error::Usage(format!("{flag}: {seconds} is not a number of seconds in (0, {YEAR_S}]")))
    }
}

/// The strategy `--optimizer` names, with `--seed` and the ILP's limits
/// (`--ilp-time-limit SECONDS`, positive and at most a year; `--ilp-node-limit`, at least 1).
pub fn optimizer(
    name: &str,
    seed: u64,
    ilp_time_limit_s: f64,
    ilp_node_limit: u64,
) -> Result<Box<dyn einsum_logical::LogicalOptimizer>> {
    let entry = names::optimizer_entry(name)?;
    let time_limit = seconds("--ilp-time-limit", ilp_time_limit_s)?;
    if ilp_node_limit == 0 {
        return Err(Error::Usage("--ilp-node-limit must be at least 1 (branch-and-bound nodes)".into()));
    }
    let ilp = einsum_logical::Ilp { time_limit, node_limit: ilp_node_limit };
    Ok((entry.build)(&names::OptimizerParams { seed, ilp }))
}

/// Parses `--memory-budget GB` into bytes per device; it must be positive and finite.
pub fn parse_budget(gb: Option<f64>) -> Result<Option<f64>> {
    match gb {
        None => Ok(None),
        Some(gb) if gb.is_finite() && gb > 0.0 => Ok(Some(gb * 1e9)),
        Some(gb) => Err(Error::Usage(format!("--memory-budget: {gb} is not a positive number of GB"))),
    }
}

/// Creates the output directory `dir` given by `flag` (`--out`, `--dump`) and checks that a
/// file can be written in it, so that a bad path fails before the command's work, with the
/// flag and the reason.
pub fn prepare_dir(flag: &str, dir: &Path) -> Result<()> {
    let io = |what: &str, e: std::io::Error| Error::Io {
        path: dir.display().to_string(),
        message: format!("{flag}: {what}: {e}"),
    };
    std::fs::create_dir_all(dir).map_err(|e| io("cannot create the directory", e))?;
    einsum_core::fsio::check_writable_dir(dir).map_err(|e| Error::Io {
        path: dir.display().to_string(),
        message: format!("{flag}: cannot write in the directory: {}", e.message()),
    })
}

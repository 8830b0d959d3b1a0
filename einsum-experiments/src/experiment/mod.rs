//! Section 6 of the paper reproduced in simulation: `einsummable experiment NAME` plans and
//! compiles workloads (logical plan, exchange programs, task graph; nothing is executed, so
//! full-size models work on a laptop) and tabulates each plan's predicted time.
//!
//! - [`Experiment`]: the registry, one file per experiment (`transformer`, `chains`,
//!   `ablation`, `exchange`, `proxy`, `fit` and `budget` in `memory`, `scale` and `decode`), each building its list of [`Case`]s, measuring them
//!   through a shared [`Runner`] and turning the results into a [`Table`] and a [`BarChart`].
//! - [`Strategy`], [`Target`] and [`CostModels`]: the strategies, machines and cost models
//!   the cases are planned with, as values (this project's by their constructors, a
//!   user's through [`Setup::with_strategy`] and [`Setup::with_cost`]); no name is looked up
//!   here.
//! - [`measure`]: plans and compiles one case and returns its [`Measurement`].
//! - [`Table`] (CSV, Markdown, JSON), [`BarChart`] (SVG), [`Progress`] (stderr).
//!
//! A case that fails (a baseline that has no plan for a workload, say) is a missing cell
//! with its reason, never an aborted experiment.

use std::sync::Arc;
use std::{
    collections::HashMap,
    fmt,
    hash::{Hash, Hasher},
    path::{Path, PathBuf},
    time::Instant,
};

use einsum_compile::{ExchangeSynthesizer, SearchSynthesizer};
use einsum_core::DType;
use einsum_joinagg::Computation;
use einsum_logical::{LogicalPlan, PaperProxy, Problem};
use einsum_sim::Topology;

use crate::{Error, Result, Workload};

mod ablation;
mod chains;
mod chart;
mod decode;
mod exchange;
mod memory;
mod progress;
mod proxy;
mod scale;
mod strategy;
mod table;
mod target;
mod transformer;

pub use chart::BarChart;
pub use progress::Progress;
pub use proxy::pearson;
pub use scale::{Fidelity, fidelity};
pub use strategy::{Forms, Strategy};
pub use table::{Cell, CellReport, RowReport, Table, TableReport, geometric_mean};
pub use target::{CostModels, Target};

/// Annealing iterations per exchange program of the searched schedule at full size: the
/// library's default, so the tables show what `plan --synthesizer search` compiles.
pub const SEARCH_ITERATIONS: usize = einsum_compile::DEFAULT_SEARCH_ITERATIONS;
/// Annealing iterations per exchange program with `--small`: a tenth of the default, for a
/// run of seconds.
pub const SMALL_SEARCH_ITERATIONS: usize = SEARCH_ITERATIONS / 10;
/// Seeds `0..RANDOM_DRAWS` of the random strategy (ablation and proxy).
pub const RANDOM_DRAWS: u64 = 20;

/// What every experiment is run with.
#[derive(Clone, Debug)]
pub struct Setup {
    /// The machine of `transformer`, `chains`, `ablation` and `proxy` (the others fix their
    /// own: [`Experiment::uses_topology`]), with the cost model of [`Setup::cost`] on it.
    pub topology: Target,
    /// The device counts `p`; experiments at a single `p` use the largest.
    pub devices: Vec<usize>,
    /// Where `NAME.csv`, `NAME.md` and `NAME.svg` are written.
    pub out_dir: PathBuf,
    /// Shrink every workload (dimensions /16, tokens /64, chains at scale 64) and the search
    /// budget, so that a run takes seconds.
    pub small: bool,
    /// The cost model the strategies plan under, for each machine (by default
    /// [`CostModels::time`]).
    pub cost: CostModels,
    /// Strategies compared beside the project's own (none by default): one more column each
    /// in `transformer`, `chains`, `ablation` (after `greedy`) and `scale` (after the
    /// baselines), one more row each per machine in `fit`. `exchange` and `budget` plan with
    /// the DP, and `proxy` with the random draws, whatever this says.
    pub strategies: Vec<Strategy>,
}

impl Setup {
    /// The setup for `topology`, called `name` in the tables, under the default cost model
    /// and with the project's strategies only.
    pub fn new(
        name: impl Into<String>,
        topology: Topology,
        devices: Vec<usize>,
        out_dir: PathBuf,
        small: bool,
    ) -> Self {
        let cost = CostModels::default();
        let topology = cost.target(name, topology);
        Setup { topology, devices, out_dir, small, cost, strategies: Vec::new() }
    }

    /// [`Setup::new`] for the topology preset or file `topology` ([`Topology::named`]).
    pub fn named(topology: &str, devices: Vec<usize>, out_dir: PathBuf, small: bool) -> Result<Self> {
        Ok(Self::new(topology, Topology::named(topology)?, devices, out_dir, small))
    }

    /// The same setup planning under `cost` on every machine, [`Setup::topology`] included.
    pub fn with_cost(mut self, cost: CostModels) -> Self {
        self.topology = cost.target(self.topology.name(), self.topology.topology().clone());
        self.cost = cost;
        self
    }

    /// The same setup with `strategy` compared beside the project's own (see
    /// [`Setup::strategies`]).
    pub fn with_strategy(mut self, strategy: Strategy) -> Self {
        self.strategies.push(strategy);
        self
    }

    /// `defaults` followed by the setup's own [`strategies`](Setup::strategies).
    pub(crate) fn compared(&self, defaults: Vec<Strategy>) -> Vec<Strategy> {
        defaults.into_iter().chain(self.strategies.iter().cloned()).collect()
    }

    /// The target of a topology preset an experiment fixes, under the setup's cost model.
    pub(crate) fn preset(&self, name: &str) -> Target {
        self.cost.preset(name)
    }

    /// The largest device count.
    pub fn max_devices(&self) -> usize {
        self.devices.iter().copied().max().unwrap_or(1)
    }

    /// The searched schedule at this setup's budget, as the command line compiles it (naive
    /// programs kept where the whole plan predicts faster with them).
    pub fn search(&self) -> Arc<dyn ExchangeSynthesizer> {
        Arc::new(SearchSynthesizer { seed: 0, iterations: self.iterations(), budget: None, naive_fallback: true })
    }

    /// [`Setup::search`] without the naive fallback: the searched programs whatever they
    /// cost the plan, for the experiment that compares them with naive ones.
    pub fn searched_programs(&self) -> Arc<dyn ExchangeSynthesizer> {
        Arc::new(SearchSynthesizer { seed: 0, iterations: self.iterations(), budget: None, naive_fallback: false })
    }

    /// Annealing iterations per exchange program.
    pub fn iterations(&self) -> usize {
        if self.small { SMALL_SEARCH_ITERATIONS } else { SEARCH_ITERATIONS }
    }

    /// Checks the device counts against `target`: every count at least 1 and at most its
    /// sites.
    fn check(&self, target: &Target) -> Result<()> {
        if self.devices.is_empty() {
            return Err(Error::Usage("--devices needs at least one device count".into()));
        }
        let sites = target.topology().num_sites();
        if let Some(&bad) = self.devices.iter().find(|&&p| p == 0 || p > sites) {
            return Err(Error::Usage(format!(
                "device count {bad} is not in 1..={sites} (topology `{}` has {sites} sites)",
                target.name()
            )));
        }
        Ok(())
    }
}

/// One experiment of Section 6.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Experiment {
    /// Figure 1: the five token workloads at every `p`, our plan against the baselines.
    Transformer,
    /// Figure 2: chains A–E at every `p`.
    Chains,
    /// Figures 3 and 4: DP vs greedy vs random vs the naive schedule at the largest `p`.
    Ablation,
    /// Figures 5 and 6: naive vs searched exchange programs on DGX-1V and DGX A100.
    Exchange,
    /// Table 1: correlation of the communication proxy with the predicted time.
    Proxy,
    /// LLaMA-3-70B on 8×A100-40GB, 8×H100-80GB and 4×H100-80GB, every strategy under the
    /// machines' memory budgets: which plans fit, their peak memory and time.
    Fit,
    /// LLaMA-3-8B on 8×H100 under shrinking memory budgets: the time–memory trade-off.
    Budget,
    /// LLaMA-3-8B- and 70B-sized blocks on one to nine servers' worth of GPUs (dgx-a100 p=8
    /// up to nvl72 p=72): the default strategy against every baseline, and the `time`
    /// model's fidelity over the grid.
    Scale,
    /// One decode step of Llama-3.1-8B and 70B over a KV cache at batch 1, 8 and 64 on one
    /// and two DGX H100s and an NVL72: the default against tensor parallelism and the other
    /// baselines.
    Decode,
}

/// What one experiment produced.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// Which experiment.
    pub experiment: Experiment,
    /// Its result table.
    pub table: Table,
    /// Its chart.
    pub chart: BarChart,
    /// The CSV, Markdown and SVG files written.
    pub files: Vec<PathBuf>,
    /// Wall time of the experiment, in seconds (cached cases cost nothing).
    pub wall_s: f64,
}

impl Experiment {
    /// Every experiment, in the order `all` runs them (ablation before proxy, which reuses
    /// its random plans).
    pub const ALL: [Experiment; 9] = [
        Experiment::Transformer,
        Experiment::Chains,
        Experiment::Ablation,
        Experiment::Exchange,
        Experiment::Proxy,
        Experiment::Fit,
        Experiment::Budget,
        Experiment::Scale,
        Experiment::Decode,
    ];

    /// The experiment's name on the command line and in file names.
    pub fn name(self) -> &'static str {
        match self {
            Experiment::Transformer => "transformer",
            Experiment::Chains => "chains",
            Experiment::Ablation => "ablation",
            Experiment::Exchange => "exchange",
            Experiment::Proxy => "proxy",
            Experiment::Fit => "fit",
            Experiment::Budget => "budget",
            Experiment::Scale => "scale",
            Experiment::Decode => "decode",
        }
    }

    /// The experiments `name` selects: one by its name, or every one for `all`.
    pub fn by_name(name: &str) -> Result<Vec<Experiment>> {
        if name == "all" {
            return Ok(Self::ALL.to_vec());
        }
        Self::ALL.iter().copied().find(|e| e.name() == name).map(|e| vec![e]).ok_or_else(|| {
            let names: Vec<&str> = Self::ALL.iter().map(|e| e.name()).collect();
            Error::Usage(format!("unknown experiment `{name}`; valid: {}, all", names.join(", ")))
        })
    }

    /// Whether the experiment plans for [`Setup::topology`]; the others fix their machines.
    pub fn uses_topology(self) -> bool {
        matches!(self, Experiment::Transformer | Experiment::Chains | Experiment::Ablation | Experiment::Proxy)
    }

    /// Runs the experiment (measuring through `runner`, which caches cases across
    /// experiments) and writes `NAME.csv`, `NAME.md` and `NAME.svg` into `setup.out_dir`.
    pub fn run(self, setup: &Setup, runner: &mut Runner) -> Result<Outcome> {
        let started = Instant::now();
        match self {
            Experiment::Exchange => exchange::TOPOLOGIES.iter().try_for_each(|t| setup.check(&setup.preset(t)))?,
            // Their machines are fixed: `--topology` and `--devices` do not apply.
            Experiment::Fit | Experiment::Budget | Experiment::Scale | Experiment::Decode => {}
            _ => setup.check(&setup.topology)?,
        }
        let (table, chart) = match self {
            Experiment::Transformer => transformer::run(setup, runner),
            Experiment::Chains => chains::run(setup, runner),
            Experiment::Ablation => ablation::run(setup, runner),
            Experiment::Exchange => exchange::run(setup, runner),
            Experiment::Proxy => proxy::run(setup, runner),
            Experiment::Fit => memory::run_fit(setup, runner),
            Experiment::Budget => memory::run_budget(setup, runner),
            Experiment::Scale => scale::run(setup, runner),
            Experiment::Decode => decode::run(setup, runner),
        };
        let files = write_files(&setup.out_dir, self.name(), &table, &chart)?;
        Ok(Outcome { experiment: self, table, chart, files, wall_s: started.elapsed().as_secs_f64() })
    }
}

fn write_files(dir: &Path, name: &str, table: &Table, chart: &BarChart) -> Result<Vec<PathBuf>> {
    let io = |path: &Path, e: std::io::Error| Error::Io { path: path.display().to_string(), message: e.to_string() };
    std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
    let svg = chart.to_svg()?;
    let texts = [("csv", table.to_csv()), ("md", table.to_markdown()), ("svg", svg)];
    let files: Vec<PathBuf> = texts.iter().map(|(ext, _)| dir.join(format!("{name}.{ext}"))).collect();
    // As a set: an error part-way (a full disk) leaves the previous files, never a table
    // without its chart or a truncated file.
    let set: Vec<(&Path, &[u8])> = files.iter().zip(&texts).map(|(p, (_, t))| (p.as_path(), t.as_bytes())).collect();
    einsum_core::fsio::write_set(&set)
        .map_err(|e| Error::Io { path: e.path.display().to_string(), message: e.message() })?;
    Ok(files)
}

/// One point of an experiment: a workload planned by a strategy on `devices` devices and
/// compiled with an exchange synthesizer for a topology. Two cases are equal when their
/// fields are, the synthesizers by their [`identity`](ExchangeSynthesizer::identity).
#[derive(Clone)]
pub struct Case {
    /// The workload, `name:key=value,...`.
    pub workload: String,
    /// The device count `p`.
    pub devices: usize,
    /// The logical strategy (the DP, greedy, a random draw, a baseline, a user's), under
    /// the target's cost model.
    pub strategy: Strategy,
    /// How exchange programs are synthesized.
    pub synthesizer: Arc<dyn ExchangeSynthesizer>,
    /// The machine, with the cost model the strategy plans under.
    pub target: Target,
    /// The per-device memory budget in bytes; `None`: the topology's default
    /// ([`default_budget`](einsum_compile::pipeline::default_budget)).
    pub memory_budget: Option<u64>,
    /// Whole-plan predictions the refinement spends on the strategy's alternatives
    /// ([`DEFAULT_REFINE`](einsum_compile::refine::DEFAULT_REFINE) by default; 0 keeps the
    /// strategy's own plan).
    pub refine: usize,
}

impl fmt::Debug for Case {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Case")
            .field("workload", &self.workload)
            .field("devices", &self.devices)
            .field("strategy", &self.strategy)
            .field("synthesizer", &self.synthesizer.identity())
            .field("target", &self.target)
            .field("memory_budget", &self.memory_budget)
            .field("refine", &self.refine)
            .finish()
    }
}

impl PartialEq for Case {
    fn eq(&self, other: &Self) -> bool {
        self.workload == other.workload
            && self.devices == other.devices
            && self.strategy == other.strategy
            && self.synthesizer.identity() == other.synthesizer.identity()
            && self.target == other.target
            && self.memory_budget == other.memory_budget
            && self.refine == other.refine
    }
}

impl Eq for Case {}

impl Hash for Case {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.workload.hash(state);
        self.devices.hash(state);
        self.strategy.hash(state);
        self.synthesizer.identity().hash(state);
        self.target.hash(state);
        self.memory_budget.hash(state);
        self.refine.hash(state);
    }
}

impl Case {
    /// A case with the default budget and refinement.
    pub fn new(
        workload: &str,
        devices: usize,
        strategy: &Strategy,
        synthesizer: Arc<dyn ExchangeSynthesizer>,
        target: &Target,
    ) -> Self {
        Case {
            workload: workload.to_string(),
            devices,
            strategy: strategy.clone(),
            synthesizer,
            target: target.clone(),
            memory_budget: None,
            refine: einsum_compile::refine::DEFAULT_REFINE,
        }
    }

    /// The same case with another refinement budget (0: the strategy's own plan).
    pub fn with_refine(mut self, refine: usize) -> Self {
        self.refine = refine;
        self
    }

    /// The same case with a per-device memory budget in bytes (`None`: the default).
    pub fn with_budget(mut self, budget: Option<u64>) -> Self {
        self.memory_budget = budget;
        self
    }

    fn key(&self) -> String {
        format!("{self:?}")
    }

    fn label(&self) -> String {
        let budget =
            self.memory_budget.map_or(String::new(), |b| format!(" within {}", einsum_logical::format_gb(b as f64)));
        format!("{} p={} {} on {}{budget}", self.workload, self.devices, self.strategy.label(), self.target.name())
    }
}

/// What planning and compiling one case gives.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Measurement {
    /// The compiled plan's predicted time on the topology, in ms (`Compiled::predicted_ms`).
    pub predicted_ms: f64,
    /// Bytes the task graph moves between devices.
    pub bytes_moved: usize,
    /// The logical plan's total under [`PaperProxy`] (elements), or `None` when a spec of
    /// the plan is not among the candidates the proxy problem enumerates.
    pub proxy_cost: Option<f64>,
    /// The logical plan's total under the cost model it was planned with (seconds under
    /// the default, `time`).
    pub time_cost: f64,
    /// Wall time of planning and compiling, in ms.
    pub compile_ms: f64,
    /// The most bytes of computation inputs resident on one device.
    pub resident_bytes: usize,
    /// The highest peak of a device (resident and transient), in bytes.
    pub peak_bytes: usize,
    /// How the weights of the first layer (operators named `l0.*` inputs) and of the rest
    /// of the model outside the layers are split: `split: weight weight | ...`.
    pub weights: String,
}

/// Plans `case` (its strategy under its target's cost model), compiles it physically
/// (exchange programs and task graph; nothing runs) and measures the result. Workloads are
/// built in f16, the paper's storage type.
pub fn measure(case: &Case) -> Result<Measurement> {
    let graph = Workload::parse(&case.workload)?.build(DType::F16)?;
    let started = Instant::now();
    let plan = |comp: &Computation| {
        einsum_compile::plan_and_compile(&einsum_compile::pipeline::Request {
            comp,
            devices: case.devices,
            strategy: case.strategy.optimizer(),
            cost: case.target.cost(),
            topology: case.target.topology(),
            synthesizer: case.synthesizer.clone(),
            memory_budget: case.memory_budget.map(|b| b as f64),
            host_memory: None,
            refine: case.refine,
        })
    };
    // A joint optimizer plans the graph's other forms too; the others plan it as written.
    let (planned, form) = match case.strategy.forms() {
        Some(forms) => forms.fastest(&graph.snapshot(), &plan).map_err(Error::Forms)?,
        None => (plan(graph.computation())?, graph.snapshot()),
    };
    let comp = form.computation();
    let compile_ms = started.elapsed().as_secs_f64() * 1e3;
    let stats = planned.compiled.graph.stats();
    Ok(Measurement {
        predicted_ms: planned.compiled.predicted_ms,
        bytes_moved: stats.bytes_moved,
        proxy_cost: proxy_total(comp, &planned.plan)?,
        time_cost: planned.plan.total,
        compile_ms,
        resident_bytes: stats.resident_bytes.iter().copied().max().unwrap_or(0),
        peak_bytes: stats.peak_bytes.iter().copied().max().unwrap_or(0),
        weights: einsum_compile::memory_report::weight_splits(comp, &planned.plan),
    })
}

/// The plan's total under [`PaperProxy`]: each operator's spec is looked up among the
/// proxy problem's candidates (same enumeration, so normally at the same index).
fn proxy_total(comp: &Computation, plan: &LogicalPlan) -> Result<Option<f64>> {
    let problem = Problem::new(comp, plan.devices, &PaperProxy)?;
    let mut choice = Vec::with_capacity(problem.ops.len());
    for op in &problem.ops {
        let Some(planned) = plan.ops.iter().find(|o| o.id == op.id) else { return Ok(None) };
        let same = |i: &usize| op.candidates.get(*i).is_some_and(|c| c.spec == planned.spec);
        let found = Some(planned.candidate).filter(same).or_else(|| (0..op.candidates.len()).find(same));
        let Some(index) = found else { return Ok(None) };
        choice.push(index);
    }
    Ok(Some(problem.total(&choice)?))
}

/// Measures cases once each and remembers the results, so that experiments run together
/// share what they have in common (the random plans of `ablation` and `proxy`).
#[derive(Debug, Default)]
pub struct Runner {
    results: HashMap<String, std::result::Result<Measurement, String>>,
    quiet: bool,
}

impl Runner {
    /// An empty runner that prints progress on stderr.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty runner that prints no progress (tests, embedding).
    pub fn quiet() -> Self {
        Runner { quiet: true, ..Self::default() }
    }

    /// Measures every case not measured yet, showing progress labelled `what`.
    pub fn run_all(&mut self, what: &str, cases: &[Case]) {
        let todo: Vec<&Case> = {
            let mut seen = std::collections::HashSet::new();
            cases.iter().filter(|c| !self.results.contains_key(&c.key()) && seen.insert(c.key())).collect()
        };
        let mut progress = Progress::new(what, todo.len(), !self.quiet);
        for case in todo {
            progress.start(&case.label());
            let result = measure(case).map_err(|e| e.to_string());
            self.results.insert(case.key(), result);
            progress.done();
        }
        progress.finish();
    }

    /// The result of a measured case: its measurement, or why it has none.
    pub fn get(&self, case: &Case) -> std::result::Result<Measurement, String> {
        self.results.get(&case.key()).cloned().unwrap_or_else(|| Err(format!("{} was not measured", case.label())))
    }

    /// Total planning and compiling time of every measured case, in seconds.
    pub fn compile_s(&self) -> f64 {
        self.results.values().filter_map(|r| r.as_ref().ok()).map(|m| m.compile_ms).sum::<f64>() / 1e3
    }
}

/// A cell holding `f` of a measurement, or the reason it is missing.
pub(crate) fn cell(result: &std::result::Result<Measurement, String>, f: impl Fn(&Measurement) -> f64) -> Cell {
    Cell::of(result, f)
}

/// The five token workloads of Section 6 as (label, workload): LLaMA-3-8B block dimensions
/// (with `small`: dimensions /16 and tokens /64).
pub(crate) fn transformer_workloads(small: bool) -> Vec<(String, String)> {
    let (dims, scale) = if small {
        ("d_model=256,heads_q=32,heads_kv=8,d_head=8,d_ff=896", 64)
    } else {
        ("d_model=4096,heads_q=32,heads_kv=8,d_head=128,d_ff=14336", 1)
    };
    [(1, 1), (1, 8), (1, 128), (8, 1), (128, 1)]
        .iter()
        .map(|&(seqs, k)| {
            let label = format!("{seqs}×{k}K");
            (label, format!("llama-block:tokens={},seqs={seqs},{dims}", seqs * k * 1024 / scale))
        })
        .collect()
}

/// Chains A–E of Section 6 as (label, workload), at scale 1 (64 with `small`).
pub(crate) fn chain_workloads(small: bool) -> Vec<(String, String)> {
    let scale = if small { 64 } else { 1 };
    ["a", "b", "c", "d", "e"]
        .iter()
        .map(|c| (format!("chain {}", c.to_uppercase()), format!("chain-{c}:scale={scale}")))
        .collect()
}

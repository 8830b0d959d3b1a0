//! `einsummable run` and `einsummable explain`: compile a workload and run it, or show how
//! it would run.

use std::{collections::HashMap, fmt::Write as _, path::PathBuf, sync::Arc, time::Duration};

use einsum_core::taskgraph::Task;
use einsum_sim::chrome_trace::Process;
use einsummable::memory_report::MemoryReport;
use einsummable::names::{self, cost_model_entry};
use einsummable::refine::DEFAULT_REFINE;
use einsummable::report::{GraphReport, SearchJson, explain_text};
use einsummable::{
    BackendParams, CompileOptions, DType, Error, Executable, Result, backend_by_name,
    check::{compare_with_reference, computation_tolerance},
    compile,
    dump::{Dumped, dump},
};
use serde::Serialize;

use super::job::{self, Job};
use super::source::{Built, DEFAULT_MODEL_TOKENS, Source, Tokens};
use super::{ChosenTopology, Report, Rewrites, SynthesizerName, choose_topology, parse_budget};

/// The default workload of `run`: a LLaMA block small enough that the CPU backend compiles
/// and runs it on 8 virtual devices in seconds.
pub const DEFAULT_WORKLOAD: &str =
    "llama-block:tokens=1024,seqs=2,d_model=512,heads_q=8,heads_kv=4,d_head=64,d_ff=1536";

/// What to compile and how.
#[derive(clap::Args)]
pub struct CompileArgs {
    /// The workload, `name:key=value,...`, or a Hugging Face model directory, `hf:DIR` (its
    /// config.json; to run, its safetensors weights).
    #[arg(default_value = DEFAULT_WORKLOAD)]
    pub(super) workload: String,
    /// A model's prompt: token ids, `1,2,3` (their number is the graph's length; `run`
    /// without it draws seeded random ids), or on `explain` a token count, `2048`. Default
    /// length: 128.
    #[arg(long, value_name = "IDS")]
    pub(super) tokens: Option<Tokens>,
    /// Number of (virtual) devices p.
    #[arg(long, default_value_t = einsummable::DEFAULT_DEVICES)]
    pub(super) devices: usize,
    /// The backend that runs the task graph.
    #[arg(long, default_value = "cpu", value_parser = super::backend_names())]
    backend: String,
    /// On the cuda backend: issue every task stream-ordered on each run instead of replaying
    /// one captured CUDA graph (debugging).
    #[arg(long)]
    eager: bool,
    /// On the cuda backend: the stream budget of every GPU, shared by the virtual devices it
    /// hosts (at least one stream each); 1 gives every virtual device a single stream.
    #[arg(long, default_value_t = einsum_cuda::stream_plan::DEFAULT_STREAMS_PER_GPU as u16, value_parser = clap::value_parser!(u16).range(1..))]
    streams_per_gpu: u16,
    /// The logical optimizer.
    #[arg(long, default_value = names::DEFAULT_OPTIMIZER, value_parser = super::optimizer_names())]
    optimizer: String,
    /// Wall time in seconds the ilp optimizer's solver may take per solve before it gives
    /// up with an error (it returns only proven optima).
    #[arg(long, value_name = "SECONDS", default_value_t = einsum_logical::Ilp::DEFAULT_TIME_LIMIT.as_secs_f64())]
    ilp_time_limit: f64,
    /// Branch-and-bound nodes the ilp optimizer's solver may explore per solve: the cap that
    /// does not depend on the machine's speed.
    #[arg(long, value_name = "NODES", default_value_t = einsum_logical::Ilp::DEFAULT_NODE_LIMIT)]
    ilp_node_limit: u64,
    /// The cost model the optimizer minimizes.
    #[arg(long, default_value = names::DEFAULT_COST_MODEL, value_parser = super::cost_names())]
    cost: String,
    /// Exchange programs (`--schedule` is this flag's older name).
    #[arg(long, alias = "schedule", value_enum, default_value_t = SynthesizerName::Naive)]
    synthesizer: SynthesizerName,
    /// Search iterations per exchange program (with --synthesizer search).
    #[arg(long, default_value_t = einsummable::DEFAULT_SEARCH_ITERATIONS)]
    iterations: usize,
    /// Wall time in seconds each exchange program's search may take (with --synthesizer
    /// search), on top of the iteration cap; a search it cuts short depends on the
    /// machine's speed.
    #[arg(long, value_name = "SECONDS", default_value_t = super::default_synthesis_budget_s())]
    synthesis_budget: f64,
    #[arg(long, help = super::scaled_topology_help("at least as many sites as devices"))]
    topology: Option<String>,
    /// Seed of the random data, the random optimizer and the search.
    #[arg(long, default_value_t = 0)]
    pub(super) seed: u64,
    /// Storage dtype.
    #[arg(long, default_value = "f32", value_parser = super::dtype_names())]
    pub(super) dtype: DType,
    /// Memory per device in GB (10^9 bytes) that the plan's peak must fit; default: the
    /// topology's HBM capacity less a 10% reserve.
    #[arg(long, value_name = "GB")]
    memory_budget: Option<f64>,
    /// Whole-plan predictions spent comparing the strategy's plan with its alternatives (the
    /// dp strategy's: its costliest decisions taken the other way); the fastest is kept. 0
    /// keeps the strategy's plan as the cost model chose it.
    #[arg(long, value_name = "PREDICTIONS", default_value_t = DEFAULT_REFINE)]
    refine: usize,
    /// On the mpi backend: seconds a rank waits without any block arriving from the others
    /// before it gives up on the rank it waits for (and ends the job, naming it).
    #[arg(long, value_name = "SECONDS", default_value_t = einsum_dist::DEFAULT_PATIENCE.as_secs_f64())]
    rank_timeout: f64,
    /// Algebraic rewrites: `on` also plans other forms of the graph (contraction networks
    /// reassociated, `x·(A·B)` as `(x·A)·B`; permutes absorbed; Q/K/V and gate/up projections
    /// merged; elementwise chains fused into the einsum producing their input) and runs the
    /// form whose plan predicts fastest; `off` plans the graph as written.
    #[arg(long, value_enum, default_value_t = Rewrites::On)]
    rewrites: Rewrites,
}

impl CompileArgs {
    /// The workload's or model's graph, refused before it is built where its plan on
    /// `devices` could not fit the compiler's task limit (and then where the graph would not
    /// fit in host memory), as `plan` does; a model's over `tokens` positions.
    fn built(&self, tokens: usize) -> Result<Built> {
        let source = Source::parse(&self.workload)?;
        source.check_tasks(self.devices)?;
        source.build(self.dtype, tokens)
    }

    /// The prompt's ids.
    fn ids(&self) -> Option<&[i32]> {
        self.tokens.as_ref().map(|t| t.0.as_slice())
    }

    /// The compile options, and the topology's name with the note on how it was chosen; on
    /// the mpi backend, for the ranks of `job` (which must be given).
    pub(super) fn options(&self, job: Option<&Job>) -> Result<(CompileOptions, ChosenName)> {
        // Every name through its table, in the order `compile` used to check them.
        let params = BackendParams { eager: self.eager, streams_per_gpu: usize::from(self.streams_per_gpu) };
        let backend = match job {
            Some(_) if job::is_job(&self.backend) => None,
            None if job::is_job(&self.backend) => {
                return Err(Error::Usage(format!(
                    "--backend {}: only `run` runs on the ranks of an MPI job; this command plans the same on --backend cpu",
                    self.backend
                )));
            }
            _ => Some(backend_by_name(&self.backend, &params)?),
        };
        let optimizer =
            Arc::from(super::optimizer(&self.optimizer, self.seed, self.ilp_time_limit, self.ilp_node_limit)?);
        // The topology before the cost model, which is built from it.
        let ChosenTopology { name, topology, note } = choose_topology(self.topology.as_deref(), self.devices)?;
        let backend = match (backend, job) {
            (Some(b), _) => b,
            (None, Some(job)) => {
                if !(self.rank_timeout.is_finite() && self.rank_timeout > 0.0) {
                    return Err(Error::Usage(format!(
                        "--rank-timeout {}: a positive number of seconds",
                        self.rank_timeout
                    )));
                }
                job.backend(&topology, self.devices, Duration::from_secs_f64(self.rank_timeout), &params)?
            }
            (None, None) => unreachable!("no backend without a job"),
        };
        let cost = Some(Arc::from((cost_model_entry(&self.cost)?.build)(&topology)));
        let synthesizer = self.synthesizer.synthesizer(self.seed, self.iterations, self.synthesis_budget)?;
        let options = CompileOptions {
            devices: self.devices,
            backend,
            optimizer,
            cost,
            synthesizer,
            topology,
            memory_budget: parse_budget(self.memory_budget)?,
            refine: self.refine,
            rewrites: self.rewrites == Rewrites::On,
            rules: einsummable::rewrite::Rules::default(),
        };
        Ok((options, ChosenName { name, note }))
    }
}

/// The name of the topology a command compiled for, and (when the default was scaled) the
/// line saying so.
pub(super) struct ChosenName {
    pub(super) name: String,
    pub(super) note: Option<String>,
}

/// Arguments of `run`.
#[derive(clap::Args)]
pub struct RunArgs {
    #[command(flatten)]
    compile: CompileArgs,
    /// Also run the single-device reference on the same inputs and report the largest
    /// error; it exits non-zero above `check`'s tolerance (f32 1e-5, f16 1e-2, bf16 6e-2,
    /// relative to the largest output magnitude, times the square root of the graph's depth
    /// in operators), on any NaN or one-sided infinity, and when there is no output to
    /// compare.
    #[arg(long)]
    check: bool,
    /// Write every input and saved output as DIR/NAME.npy, with DIR/manifest.json (each file
    /// atomically, the manifest last). The files an earlier dump's manifest lists are removed
    /// first; other files in DIR are left alone.
    #[arg(long)]
    dump: Option<PathBuf>,
    /// Untimed runs before the timed ones (at most 10 000).
    #[arg(long, default_value_t = 0)]
    warmup: usize,
    /// Timed runs (1 to 10 000); the reported time is their median.
    #[arg(long, default_value_t = 1)]
    repeat: usize,
    /// Write the compiled plan's simulated schedule and, on the cpu backend, the last timed
    /// run's measured one (when each task ran, on which device and worker thread) as Chrome
    /// trace JSON to FILE, the two timelines as two processes (open it in
    /// https://ui.perfetto.dev or chrome://tracing). Recording reads the clock twice per
    /// task, which the measured times include.
    #[arg(long, value_name = "FILE")]
    trace: Option<PathBuf>,
}

/// The most runs `--warmup` and `--repeat` each ask for: far more than a median needs, and a
/// bound on how long a mistyped count keeps the command busy.
const MAX_RUNS: usize = 10_000;

/// Runs `run`; on the mpi backend, as one rank of the MPI job this process was launched in
/// (a rank that fails ends the job).
pub fn run(a: RunArgs) -> Result<Report> {
    if !job::is_job(&a.compile.backend) {
        return run_in(a, None);
    }
    let job = Job::start(&a.compile.backend)?;
    match run_in(a, Some(&job)) {
        Err(e) if job.ranks() > 1 => job.abort(&e),
        other => other,
    }
}

/// Runs `run` in `job` (on the mpi backend) or in this process alone.
fn run_in(a: RunArgs, job: Option<&Job>) -> Result<Report> {
    if a.repeat == 0 || a.repeat > MAX_RUNS {
        return Err(Error::Usage(format!("--repeat {}: the number of timed runs is 1 to {MAX_RUNS}", a.repeat)));
    }
    if a.warmup > MAX_RUNS {
        return Err(Error::Usage(format!("--warmup {}: the number of untimed runs is at most {MAX_RUNS}", a.warmup)));
    }
    // Rank 0 alone reports: it alone dumps, runs the reference and keeps whole inputs.
    let reporting = job.is_none_or(|j| j.rank() == 0);
    if let Some(dir) = a.dump.as_ref().filter(|_| reporting) {
        // Before any work: an unwritable dump directory fails at once, not after the run.
        super::prepare_dir("--dump", dir)?;
    }
    let built = a.compile.built(a.compile.ids().map_or(DEFAULT_MODEL_TOKENS, <[i32]>::len))?;
    let graph = built.graph();
    let (options, topology) = a.compile.options(job)?;
    let mut exe = compile(graph, &options)?;
    let reference = a.check && reporting;
    exe.check_host_memory(reference)?;
    // A model's weights are kept for a reference run; a workload's inputs for a dump too.
    let keep = match &built {
        Built::Model(..) => reference,
        Built::Workload(_) => reporting,
    };
    // Task timings cost a clock read per task: only for a trace.
    let timed = a.trace.is_some() && exe.record_task_timings(true);
    built.load(&mut exe, a.compile.ids(), a.compile.seed, keep)?;
    for _ in 0..a.warmup {
        exe.execute()?;
    }
    let mut times = Vec::new();
    let mut device_times = Vec::new();
    let mut task_timings = None;
    for _ in 0..a.repeat {
        let report = exe.execute()?;
        times.push(report.wall_ms);
        device_times.extend(report.device_ms);
        task_timings = report.task_timings.or(task_timings);
    }
    if !reporting {
        return Ok(Report::silent());
    }
    let wall_ms = median(&mut times);
    // The device time only where the backend measured every timed run.
    let device_ms = (device_times.len() == times.len()).then(|| median(&mut device_times));
    let comp = graph.computation();
    let tolerance = computation_tolerance(comp);
    let check = if a.check { Some(compare_with_reference(&exe)?) } else { None };
    let ok = check.as_ref().is_none_or(|c| c.passes(tolerance));
    if let Some(dir) = &a.dump {
        let inputs = exe.loaded_inputs();
        // Weights loaded without a host copy (a model's, without --check) are not dumped.
        let mut tensors: Vec<(String, &str, &einsum_core::HostTensor)> =
            comp.inputs().iter().filter_map(|t| inputs.get(t).map(|v| (comp.tensor_name(*t), "input", v))).collect();
        for t in comp.saved() {
            tensors.push((comp.tensor_name(*t), "output", &exe.outputs()[t]));
        }
        let dumped: Vec<Dumped<'_>> = tensors.iter().map(|(n, role, v)| Dumped { name: n, role, value: v }).collect();
        dump(dir, &dumped)?;
    }
    let mut text = summary(&a.compile, &topology, &exe);
    if let Some(path) = &a.trace {
        let mut processes =
            vec![super::trace::simulated(exe.planned_computation(), exe.compiled(), &options.topology)?];
        if let Some(timings) = task_timings.as_deref() {
            processes.push(Process::measured(&format!("measured on the {} backend", a.compile.backend), timings));
        }
        let mut about =
            super::trace::about("run", &a.compile.workload, a.compile.devices, &topology.name, exe.predicted_ms());
        about.insert("wall_ms".into(), wall_ms.into());
        super::trace::write(path, &processes, about)?;
        let measured = if timed { " and the measured run's" } else { " (the backend records no task timings)" };
        let _ = writeln!(text, "trace of the simulated schedule{measured} written to {}", path.display());
    }
    let top = match &built {
        Built::Model(model, _, _) => Some(top_tokens(&exe.outputs()[&model.logits.id()], TOP_TOKENS)),
        Built::Workload(_) => None,
    };
    if let Some(top) = &top {
        let listed: Vec<String> = top.iter().map(|(id, logit)| format!("{id} ({logit:.4})")).collect();
        let _ = writeln!(text, "top tokens at the last position: {}", listed.join(", "));
    }
    let runs = if times.len() > 1 { format!(" (median of {} runs)", times.len()) } else { String::new() };
    let device = device_ms.map_or_else(String::new, |d| format!(" ({d:.3} ms on the device)"));
    let _ = writeln!(text, "ran in {wall_ms:.3} ms{device}{runs} on the {} backend", a.compile.backend);
    if let Some(job) = job {
        let _ = writeln!(
            text,
            "over {} ranks of an MPI job, {} devices each; outputs gathered to rank 0",
            job.ranks(),
            a.compile.devices / job.ranks()
        );
    }
    if let Some(c) = &check {
        let _ = writeln!(
            text,
            "max error against the single-device reference: {:.3e}, tolerance {tolerance:.3e} ({})",
            c.max_error,
            if ok { "PASS" } else { "FAIL" }
        );
        if let Some(why) = &c.mismatch {
            let _ = writeln!(text, "FAIL: {why}");
        }
    }
    let json = RunJson {
        workload: &a.compile.workload,
        devices: a.compile.devices,
        topology: &topology.name,
        ok,
        max_rel_error: check.as_ref().map(|c| f64::from(c.max_error)),
        tolerance: check.as_ref().map(|_| f64::from(tolerance)),
        mismatch: check.as_ref().and_then(|c| c.mismatch.clone()),
        wall_ms,
        device_ms,
        runs: times.len(),
        top,
        graph: GraphReport::new(&exe),
    };
    Ok(Report::new(&json, text, ok))
}

/// How many of the last position's tokens `run` lists for a model.
const TOP_TOKENS: usize = 5;

/// The `k` highest logits of the last row of `logits` (`[tokens, vocab]`), as `(id, logit)`,
/// highest first (ties by the lower id; NaN last).
fn top_tokens(logits: &einsum_core::HostTensor, k: usize) -> Vec<(usize, f32)> {
    let vocab = logits.ty().shape().last().copied().unwrap_or(0);
    let values = logits.to_f32();
    let last = &values[values.len().saturating_sub(vocab)..];
    let mut ids: Vec<usize> = (0..last.len()).collect();
    ids.sort_by(|&a, &b| {
        let key = |i: usize| if last[i].is_nan() { f32::NEG_INFINITY } else { last[i] };
        key(b).total_cmp(&key(a)).then(a.cmp(&b))
    });
    ids.into_iter().take(k).map(|i| (i, last[i])).collect()
}

/// The median of `times` (not empty; sorts them).
pub(super) fn median(times: &mut [f64]) -> f64 {
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

/// Arguments of `explain`.
#[derive(clap::Args)]
pub struct ExplainArgs {
    #[command(flatten)]
    compile: CompileArgs,
    /// Also write the task graph in Graphviz format to FILE.
    #[arg(long)]
    dot: Option<PathBuf>,
    #[arg(long, value_name = "FILE", help = super::trace::HELP)]
    trace: Option<PathBuf>,
    /// Explains a model's decode step for this many sequences (one new token each), over a
    /// KV cache of --tokens tokens per sequence, instead of the forward pass over a prompt.
    #[arg(long, value_name = "BATCH")]
    decode: Option<usize>,
}

/// Runs `explain`: the plan, the exchange programs and the task-graph statistics.
pub fn explain(a: ExplainArgs) -> Result<Report> {
    let tokens = a.compile.tokens.as_ref().map_or(DEFAULT_MODEL_TOKENS, Tokens::length);
    let (built, decoded);
    let graph = match a.decode {
        Some(batch) => {
            decoded = Source::parse(&a.compile.workload)?.decode_graph(a.compile.dtype, batch, tokens)?;
            &decoded
        }
        None => {
            built = a.compile.built(tokens)?;
            built.graph()
        }
    };
    let (options, topology) = a.compile.options(None)?;
    let exe = compile(graph, &options)?;
    let comp = graph.computation();
    let mut text = summary(&a.compile, &topology, &exe);
    text += &explain_text(&exe);
    if let Some(path) = &a.dot {
        einsum_core::fsio::write_atomic(path, dot(&exe).as_bytes())?;
        let _ = writeln!(text, "task graph written to {}", path.display());
    }
    if let Some(path) = &a.trace {
        let simulated = super::trace::simulated(exe.planned_computation(), exe.compiled(), &options.topology)?;
        let about =
            super::trace::about("explain", &a.compile.workload, a.compile.devices, &topology.name, exe.predicted_ms());
        super::trace::write(path, &[simulated], about)?;
        let _ = writeln!(text, "trace written to {}", path.display());
    }
    let names: HashMap<_, _> = exe.plan().ops.iter().map(|o| (o.id, o.name.clone())).collect();
    let stats = exe.stats();
    let memory = MemoryReport::new(stats, exe.memory_capacity(), exe.memory_budget());
    let json = ExplainJson {
        workload: &a.compile.workload,
        devices: a.compile.devices,
        topology: &topology.name,
        ops: exe
            .plan()
            .ops
            .iter()
            .map(|o| ExplainedOp { name: &o.name, kind: &o.kind, split: o.splits_label() })
            .collect(),
        search: exe.plan().search.as_ref().map(SearchJson::new),
        programs: exe
            .programs()
            .iter()
            .map(|p| ProgramJson {
                op: names.get(&p.op).cloned(),
                input: p.input,
                simulated_ms: p.simulated_ms,
                program: p.program.to_string(),
            })
            .collect(),
        graph: GraphReport::new(&exe),
        operators: comp.ops().count(),
        memory,
    };
    Ok(Report::new(&json, text, true))
}

/// The first lines of `run` and `explain`: how the topology was chosen (when the default was
/// scaled), then the task graph's size, traffic, peak and predicted time, and the form of
/// each contraction network planned.
fn summary(args: &CompileArgs, topology: &ChosenName, exe: &Executable) -> String {
    let stats = exe.stats();
    let tasks: Vec<String> = stats.tasks.iter().map(|(k, n)| format!("{n} {k}")).collect();
    let peak = stats.peak_bytes.iter().max().copied().unwrap_or(0);
    let note = topology.note.as_ref().map_or_else(String::new, |n| format!("{n}\n"));
    format!(
        "{note}{} on {} devices: {} tasks ({}), {} bytes moved, peak {} bytes on a device, predicted {:.4} ms on {}\n",
        args.workload,
        args.devices,
        stats.tasks.values().sum::<usize>(),
        tasks.join(", "),
        stats.bytes_moved,
        peak,
        exe.predicted_ms(),
        topology.name
    ) + &super::rewrites_text(exe.rewrites())
}

/// The task graph in Graphviz's dot language: one node per task, clustered by device.
fn dot(exe: &Executable) -> String {
    let g = &exe.compiled().graph;
    let mut out = String::from("digraph tasks {\n  node [shape=box, fontsize=10];\n");
    for (i, n) in g.nodes().iter().enumerate() {
        let device = n.task.writes().first().or(n.task.reads().first()).map(|b| g.buffer(*b).device.0);
        let device = device.map_or_else(|| "host".to_string(), |d| d.to_string());
        let label = n.label.replace('"', "'");
        let _ = writeln!(out, "  t{i} [label=\"{}\\n{label}\\ndevice {device}\"];", n.task.kind());
        for d in &n.deps {
            let style = if matches!(n.task, Task::Transfer { .. }) { " [color=blue]" } else { "" };
            let _ = writeln!(out, "  t{} -> t{i}{style};", d.0);
        }
    }
    out.push_str("}\n");
    out
}

/// The `--json` object of `run`: whether the run passed, its time, and the compiled task
/// graph's traffic, memory and tasks.
#[derive(Serialize)]
pub struct RunJson<'a> {
    /// The workload as given, `name:key=value,...`.
    pub workload: &'a str,
    /// The number of (virtual) devices p.
    pub devices: usize,
    /// The topology compiled for: `--topology` as given, or the default preset chosen for
    /// the devices (`dgx-a100x2` for 16).
    pub topology: &'a str,
    /// False only when `--check` failed: an error above the tolerance, or a mismatch.
    pub ok: bool,
    /// With `--check`, the largest error of an output against the single-device reference
    /// (scaled by the reference's magnitude; an f32 widened to f64); `null` without it.
    pub max_rel_error: Option<f64>,
    /// With `--check`, the tolerance it was held to, `check`'s for the whole graph: that of
    /// the least precise dtype of the computation (f32 `1e-5`, f16 `1e-2`, bf16 `6e-2`) times
    /// the square root of its depth in operators; `null` without it.
    pub tolerance: Option<f64>,
    /// With `--check`, why it failed at any tolerance, if it did: no output compared, an
    /// output missing or of another type, a difference that is not finite (a NaN, or an
    /// infinity on one side only); `null` otherwise.
    pub mismatch: Option<String>,
    /// The median wall time of the timed runs, in ms.
    pub wall_ms: f64,
    /// The median device time of the timed runs, in ms, where the backend measures it
    /// (CUDA: events around the launch); `null` otherwise.
    pub device_ms: Option<f64>,
    /// The number of timed runs (`--repeat`).
    pub runs: usize,
    /// For a model, the last position's highest logits, `[[id, logit], ...]`, highest first;
    /// absent for a workload.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top: Option<Vec<(usize, f32)>>,
    /// The compiled task graph's prediction, traffic, memory and tasks.
    #[serde(flatten)]
    pub graph: GraphReport,
}

/// The `--json` object of `explain`: the plan, the exchange programs and the task graph's
/// statistics.
#[derive(Serialize)]
pub struct ExplainJson<'a> {
    /// The workload as given, `name:key=value,...`.
    pub workload: &'a str,
    /// The number of (virtual) devices p.
    pub devices: usize,
    /// The topology compiled for, as in [`RunJson::topology`].
    pub topology: &'a str,
    /// Every operator's split, in the plan's order.
    pub ops: Vec<ExplainedOp<'a>>,
    /// How the optimizer searched, as in `plan --json`; `null` for a strategy that does not
    /// say.
    pub search: Option<SearchJson<'a>>,
    /// Every exchange program of the compiled plan.
    pub programs: Vec<ProgramJson>,
    /// The compiled task graph's prediction, traffic, memory and tasks.
    #[serde(flatten)]
    pub graph: GraphReport,
    /// The number of operators in the computation.
    pub operators: usize,
    /// What each device keeps in memory against the capacity and the budget.
    pub memory: MemoryReport,
}

/// One operator of [`ExplainJson::ops`].
#[derive(Serialize)]
pub struct ExplainedOp<'a> {
    /// The operator's name in the graph.
    pub name: &'a str,
    /// Its kind (`matmul`, `attention`, ...).
    pub kind: &'a str,
    /// Its split as `index=count ...`, or `replicated`.
    pub split: String,
}

/// One exchange program of [`ExplainJson::programs`].
#[derive(Serialize)]
pub struct ProgramJson {
    /// The name of the operator whose input it brings into place (`null` if the plan does
    /// not name it).
    pub op: Option<String>,
    /// Which input of the operator, by position.
    pub input: usize,
    /// Its simulated time on the topology, in ms.
    pub simulated_ms: f64,
    /// The program in ExProg syntax.
    pub program: String,
}

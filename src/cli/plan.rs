//! `einsummable plan`: the logical plan of a workload, compiled physically (exchange
//! programs and task graph, nothing executed) for its predicted time and bytes moved.

use std::path::PathBuf;
use std::time::Instant;

use einsum_compile::Compiled;
use einsum_joinagg::Computation;
use einsum_logical::{CostModel, LogicalOptimizer, LogicalPlan, Problem};
use einsum_sim::Topology;
use einsummable::memory_report::{MemoryReport, memory_text};
use einsummable::names::{self, cost_model_by_name};
use einsummable::pipeline::{Request, capacity, default_budget, plan_and_compile};
use einsummable::refine::{DEFAULT_REFINE, Refinement};
use einsummable::report::{PlanReport, PlannedOpReport, SearchJson, search_line};
use einsummable::rewrite::fastest_form;
use einsummable::{Error, Exchanges, Result};

use einsummable::DType;

use super::source::{DEFAULT_MODEL_TOKENS, Source, Tokens};
use super::{ChosenTopology, Report, Rewrites, SynthesizerName, choose_topology, parse_budget};

/// Arguments of `plan`.
#[derive(clap::Args)]
pub struct Args {
    /// The workload, `name:key=value,...`, or a Hugging Face model directory, `hf:DIR` (its
    /// config.json alone: no weight is read).
    workload: String,
    /// A model's prompt length, `2048` (or its token ids, `1,2,3`, whose number counts).
    /// Default: 128.
    #[arg(long, value_name = "N")]
    tokens: Option<Tokens>,
    /// Plans a model's decode step for this many sequences (one new token each), over a KV
    /// cache of --tokens tokens per sequence, instead of the forward pass over a prompt.
    #[arg(long, value_name = "BATCH")]
    decode: Option<usize>,
    /// Number of devices p.
    #[arg(long, default_value_t = einsummable::DEFAULT_DEVICES)]
    devices: usize,
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
    #[arg(long, help = super::scaled_topology_help("the machine the time model and the prediction target"))]
    topology: Option<String>,
    /// The topology (a preset or a file) whose figures the time model prices, when it should
    /// differ from the one compiled for and predicted on (default: --topology): plans for one
    /// machine and predicts that plan on another, e.g. to ask how a plan chosen without
    /// latencies runs with them.
    #[arg(long, value_name = "TOPOLOGY")]
    cost_topology: Option<String>,
    /// Exchange programs of the physical compilation (`--schedule` is this flag's older name).
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
    /// Seed of the random strategy and of the search.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Storage dtype.
    #[arg(long, default_value = "f16", value_parser = super::dtype_names())]
    dtype: DType,
    /// Memory per device in GB (10^9 bytes) that the plan's peak must fit; default: the
    /// topology's HBM capacity less a 10% reserve.
    #[arg(long, value_name = "GB")]
    memory_budget: Option<f64>,
    /// Whole-plan predictions spent comparing the strategy's plan with its alternatives (the
    /// dp strategy's: its costliest decisions taken the other way); the fastest is kept. 0
    /// keeps the strategy's plan as the cost model chose it.
    #[arg(long, value_name = "PREDICTIONS", default_value_t = DEFAULT_REFINE)]
    refine: usize,
    #[arg(long, value_name = "FILE", help = super::trace::HELP)]
    trace: Option<PathBuf>,
    /// Algebraic rewrites: `on` also plans other forms of the graph (contraction networks
    /// reassociated, `x·(A·B)` as `(x·A)·B`; permutes absorbed; Q/K/V and gate/up projections
    /// merged; elementwise chains fused into the einsum producing their input) and keeps the
    /// form whose plan predicts fastest; `off` plans the graph as written.
    #[arg(long, value_enum, default_value_t = Rewrites::On)]
    rewrites: Rewrites,
}

/// What physical compilation of the plan gave: a prediction, or why the plan cannot be
/// compiled on this machine.
enum Physical {
    /// Predicted ms, bytes moved between devices, compile wall time in ms, the memory
    /// report (text and JSON).
    Predicted {
        predicted_ms: f64,
        exchanges: Exchanges,
        bytes_moved: usize,
        compile_ms: f64,
        memory: (String, MemoryReport),
        refinement: Option<Refinement>,
    },
    /// The plan is valid but the topology has too few sites to compile it: the reason.
    Refused(String),
}

/// Runs `plan`.
pub fn run(a: Args) -> Result<Report> {
    let source = Source::parse(&a.workload)?;
    let strategy = super::optimizer(&a.optimizer, a.seed, a.ilp_time_limit, a.ilp_node_limit)?;
    let ChosenTopology { name: topology_name, topology, note } = choose_topology(a.topology.as_deref(), a.devices)?;
    // A plan that will be compiled must fit the compiler's task limit: refused from the
    // workload's parameters, before its graph is built (and then its host memory, by `build`).
    if a.devices <= topology.num_sites() {
        source.check_tasks(a.devices)?;
    }
    let tokens = a.tokens.as_ref().map_or(DEFAULT_MODEL_TOKENS, Tokens::length);
    let (built, decoded);
    let graph = match a.decode {
        Some(batch) => {
            decoded = source.decode_graph(a.dtype, batch, tokens)?;
            &decoded
        }
        None => {
            built = source.build(a.dtype, tokens)?;
            built.graph()
        }
    };
    let model = cost_model_by_name(&a.cost, a.cost_topology.as_deref().unwrap_or(&topology_name))?;
    let synthesizer = a.synthesizer.synthesizer(a.seed, a.iterations, a.synthesis_budget)?;
    let budget = parse_budget(a.memory_budget)?;
    let comp = graph.computation();
    if a.trace.is_some() && a.devices > topology.num_sites() {
        return Err(Error::Usage(format!(
            "--trace: topology `{topology_name}` has {} sites, fewer than the {} devices, so the plan is not compiled \
             and has no schedule to trace",
            topology.num_sites(),
            a.devices
        )));
    }
    let mut rewrites = None;
    let (plan, physical, optimize_ms) = if a.devices > topology.num_sites() {
        plan_only(comp, a.devices, strategy.as_ref(), model.as_ref(), (&topology_name, &topology), budget)?
    } else {
        let plan = |comp: &Computation, refine: usize| {
            plan_and_predict(&Request {
                comp,
                devices: a.devices,
                strategy: strategy.as_ref(),
                cost: model.as_ref(),
                topology: &topology,
                synthesizer: synthesizer.clone(),
                memory_budget: budget,
                host_memory: None,
                refine,
            })
        };
        let rules = (a.rewrites == Rewrites::On).then(einsummable::rewrite::Rules::default);
        // Forms are weighed without the refinement, which the form kept gets.
        let refined = |c: &Computation| plan(c, a.refine);
        let refined: Option<einsummable::rewrite::Planner<'_, _>> = (a.refine > 0).then_some(&refined);
        let kept = fastest_form(&graph.snapshot(), rules.as_ref(), |c| plan(c, 0), refined, |p| predicted(&p.1))?;
        rewrites = kept.rewrites;
        let best_comp = kept.graph.computation();
        let (plan, physical, optimize_ms, compiled) = kept.planned;
        if let (Some(path), Physical::Predicted { predicted_ms, .. }) = (&a.trace, &physical) {
            let simulated = super::trace::simulated(best_comp, &compiled, &topology)?;
            let about = super::trace::about("plan", &a.workload, a.devices, &topology_name, *predicted_ms);
            super::trace::write(path, &[simulated], about)?;
        }
        (plan, physical, optimize_ms)
    };
    let mut text = plan_text(&a, note, &topology_name, &plan, optimize_ms, &physical);
    text += &super::rewrites_text(rewrites.as_deref());
    if let Some(path) = &a.trace {
        text += &format!("trace written to {}\n", path.display());
    }
    let mut json = plan_json(&a, &topology_name, &plan, optimize_ms, physical);
    json.rewrites = rewrites;
    Ok(Report::new(&json, text, true))
}

/// The predicted time of a compiled plan (infinite for one not compiled).
fn predicted(physical: &Physical) -> f64 {
    match physical {
        Physical::Predicted { predicted_ms, .. } => *predicted_ms,
        Physical::Refused(_) => f64::INFINITY,
    }
}

/// A plan for more devices than the machine has, which is still a plan (under the memory of
/// the machine's devices): it cannot be compiled there, and the output says why. Returns the
/// plan, the refusal and the planning's wall time in ms.
fn plan_only(
    comp: &Computation,
    devices: usize,
    strategy: &dyn LogicalOptimizer,
    model: &dyn CostModel,
    (topology_name, topology): (&str, &Topology),
    budget: Option<f64>,
) -> Result<(LogicalPlan, Physical, f64)> {
    let started = Instant::now();
    let budget = budget.unwrap_or_else(|| default_budget(topology, devices));
    let problem = Problem::new(comp, devices, model)?.with_memory_budget(Some(budget))?;
    let plan = strategy.plan(&problem)?;
    let why =
        format!("topology `{}` has {} sites, fewer than the {} devices", topology_name, topology.num_sites(), devices);
    Ok((plan, Physical::Refused(why), started.elapsed().as_secs_f64() * 1e3))
}

/// The plan of `request`, compiled: the plan, its prediction, the planning's wall time in
/// ms and the compiled plan (for its trace).
fn plan_and_predict(request: &Request<'_>) -> Result<(LogicalPlan, Physical, f64, Compiled)> {
    let planned = plan_and_compile(request)?;
    let stats = &planned.compiled.stats;
    let capacity = capacity(request.topology, request.devices);
    let physical = Physical::Predicted {
        predicted_ms: planned.compiled.predicted_ms,
        exchanges: planned.compiled.exchanges,
        bytes_moved: stats.bytes_moved,
        compile_ms: planned.compile_ms,
        memory: (
            memory_text(&planned.compiled.graph, stats, capacity, planned.budget),
            MemoryReport::new(stats, capacity, planned.budget),
        ),
        refinement: planned.refinement.clone(),
    };
    Ok((planned.plan, physical, planned.optimize_ms, planned.compiled))
}

/// `plan`'s text: how the topology was chosen, every operator's split and cost, the total,
/// how the strategy searched, and what compiling the plan predicted (or why it was not
/// compiled).
fn plan_text(
    a: &Args,
    note: Option<String>,
    topology_name: &str,
    plan: &LogicalPlan,
    optimize_ms: f64,
    physical: &Physical,
) -> String {
    let mut text = note.map_or_else(String::new, |n| format!("{n}\n"));
    if let Some(priced) = &a.cost_topology {
        text +=
            &format!("the cost model prices `{priced}`; the plan is compiled for and predicted on `{topology_name}`\n");
    }
    text += &format!(
        "{} on {} devices: {} optimizer, {} cost ({}), {optimize_ms:.1} ms\n",
        a.workload, a.devices, a.optimizer, a.cost, plan.unit
    );
    text += &format!(
        "{:<16} {:<10} {:<28} {:>11} {:>11} {:>11} {:>11}\n",
        "operator", "kind", "split", "repartition", "join", "aggregation", "compute"
    );
    for o in &plan.ops {
        let c = &o.cost;
        text += &format!(
            "{:<16} {:<10} {:<28} {:>11.4e} {:>11.4e} {:>11.4e} {:>11.4e}\n",
            o.name,
            o.kind,
            o.splits_label(),
            c.repartition,
            c.join,
            c.aggregation,
            c.compute
        );
    }
    text += &format!("total {:.6e} {} ({:.4e} bytes moved)\n", plan.total, plan.unit, plan.total_bytes);
    if let Some(search) = &plan.search {
        text += &search_line(search);
    }
    text += &match physical {
        Physical::Predicted { predicted_ms, exchanges, bytes_moved, compile_ms, memory, refinement } => format!(
            "compiled ({} schedule, {compile_ms:.1} ms): predicted {predicted_ms:.6} ms on {}, {bytes_moved} bytes moved\n{}{}{}",
            a.synthesizer,
            topology_name,
            exchanges.searched_ms().map_or_else(String::new, |ms| format!(
                "kept the naive exchange programs: the plan predicted {ms:.6} ms with the searched ones\n"
            )),
            refinement.as_ref().map_or_else(String::new, refinement_line),
            memory.0
        ),
        Physical::Refused(why) => format!("not compiled: {why}\n"),
    };
    text
}

/// `plan`'s `--json` object.
fn plan_json<'a>(
    a: &'a Args,
    topology_name: &'a str,
    plan: &'a LogicalPlan,
    optimize_ms: f64,
    physical: Physical,
) -> PlanReport<'a> {
    let (predicted_ms, exchanges, bytes_moved, compile_ms, compile_error, memory, refinement) = match physical {
        Physical::Predicted { predicted_ms, exchanges, bytes_moved, compile_ms, memory, refinement } => {
            (Some(predicted_ms), Some(exchanges), Some(bytes_moved), Some(compile_ms), None, Some(memory.1), refinement)
        }
        Physical::Refused(why) => (None, None, None, None, Some(why), None, None),
    };
    PlanReport {
        workload: &a.workload,
        devices: a.devices,
        optimizer: &a.optimizer,
        cost_model: &a.cost,
        unit: plan.unit,
        total_cost: plan.total,
        total_bytes: plan.total_bytes,
        optimize_ms,
        ops: plan.ops.iter().map(PlannedOpReport::new).collect(),
        search: plan.search.as_ref().map(SearchJson::new),
        topology: topology_name,
        schedule: a.synthesizer.name(),
        exchanges: exchanges.map(|e| e.name()),
        searched_ms: exchanges.and_then(|e| e.searched_ms()),
        predicted_ms,
        bytes_moved,
        compile_ms,
        compile_error,
        memory,
        refinement,
        rewrites: None,
    }
}

/// The text line saying what the refinement did.
fn refinement_line(r: &Refinement) -> String {
    let best = r.best_naive_ms.map_or_else(|| "none faster".into(), |ms| format!("the fastest {ms:.6} ms"));
    format!(
        "refined: {} alternatives scored with naive exchange programs against the optimizer's plan's {:.6} ms, {best}; {}\n",
        r.scored,
        r.own_naive_ms,
        if r.replaced { "an alternative replaced the plan" } else { "the optimizer's plan kept" }
    )
}

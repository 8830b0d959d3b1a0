//! The reports of a compiled plan that the command line prints with `--json` and the Python
//! package returns as dicts: one producer for both, so their schemas cannot drift apart.
//! [`PlanReport`] is `plan --json`'s object, [`GraphReport`] the fields `run` and `explain`
//! share, and [`explain_text`] the body of `explain`'s text.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;

use einsum_logical::{PlannedOp, SearchReport};
use serde::Serialize;

use crate::Executable;
use crate::memory_report::{MemoryReport, memory_text};
use crate::refine::Refinement;

/// The `--json` object of `plan`: the logical plan with its cost under the cost model, and
/// what physical compilation of it predicts (every prediction `null` when the plan could
/// not be compiled on the topology, `compile_error` saying why).
#[derive(Serialize)]
pub struct PlanReport<'a> {
    /// The workload as given, `name:key=value,...` (from Python: the workload a graph was
    /// built from, or `graph` for one built call by call).
    pub workload: &'a str,
    /// The number of devices p the plan is for.
    pub devices: usize,
    /// The logical optimizer's name.
    pub optimizer: &'a str,
    /// The cost model's name.
    pub cost_model: &'a str,
    /// The unit of the costs (`total_cost` and every operator's `cost`).
    pub unit: &'static str,
    /// The plan's total cost under the cost model, in `unit`.
    pub total_cost: f64,
    /// The bytes the plan moves between devices, by the cost model's count.
    pub total_bytes: f64,
    /// Wall time of the logical optimizer (and of any replanning under the budget), in ms.
    pub optimize_ms: f64,
    /// Every operator's split and cost, in the plan's order.
    pub ops: Vec<PlannedOpReport<'a>>,
    /// How the optimizer searched (the default strategy's elimination order and width);
    /// `null` for a strategy that does not say (the baselines, greedy, random, the ILP).
    pub search: Option<SearchJson<'a>>,
    /// The topology (a preset's name or a file) the plan is compiled for: `--topology` as
    /// given, or the default preset chosen for the devices (`dgx-a100x2` for 16).
    pub topology: &'a str,
    /// How exchange programs were synthesised: `naive` or `search`.
    pub schedule: &'static str,
    /// The exchange programs the compiled graph runs: `naive`, `searched`, or
    /// `naive-over-searched` (a search was asked, and the whole plan predicted faster with the
    /// naive programs: `searched_ms` is what it predicted with the searched ones); `null` if
    /// not compiled.
    pub exchanges: Option<&'static str>,
    /// With `exchanges` `naive-over-searched`, the plan's predicted time in ms with the
    /// searched programs; otherwise `null`.
    pub searched_ms: Option<f64>,
    /// The compiled plan's predicted time on the topology in ms; `null` if not compiled.
    pub predicted_ms: Option<f64>,
    /// The bytes the compiled task graph moves between devices; `null` if not compiled.
    pub bytes_moved: Option<usize>,
    /// Wall time of the physical compilation in ms; `null` if not compiled.
    pub compile_ms: Option<f64>,
    /// Why the plan was not compiled (the topology has too few sites); `null` if compiled.
    pub compile_error: Option<String>,
    /// What each device keeps in memory; `null` if not compiled.
    pub memory: Option<MemoryReport>,
    /// What the refinement did: the alternatives it scored with naive exchange programs,
    /// the optimizer's own plan's and the fastest one's predictions, and whether one replaced
    /// the plan (`null` when nothing was scored: `--refine 0`, or a strategy without
    /// alternatives, such as the baselines).
    pub refinement: Option<Refinement>,
    /// The algebraic rewrites weighed (`plan --rewrites on`): per contraction network, its
    /// association as written and as kept (equal when the written form predicted fastest);
    /// `null` when none were weighed (rewrites off, or a graph without a network to rewrite).
    pub rewrites: Option<Vec<crate::rewrite::Change>>,
}

/// [`PlanReport::search`] and `explain`'s: how the default strategy searched.
#[derive(Serialize)]
pub struct SearchJson<'a> {
    /// The method (`variable elimination`).
    pub method: &'a str,
    /// The tensors in the order they were eliminated, by their producers' names.
    pub order: &'a [String],
    /// The order's width: the most tensors one table it creates ranges over.
    pub width: usize,
    /// The most entries of one table it creates.
    pub largest_table: usize,
    /// True when the plan is the exact optimum of the cost model (without a memory budget).
    pub exact: bool,
    /// When not exact: the most the plan's cost can exceed the optimum's, relative to it.
    pub gap_bound: Option<f64>,
}

impl<'a> SearchJson<'a> {
    /// The JSON of a strategy's search report.
    pub fn new(r: &'a SearchReport) -> Self {
        SearchJson {
            method: &r.method,
            order: &r.order,
            width: r.width,
            largest_table: r.largest_table,
            exact: r.exact,
            gap_bound: r.gap_bound,
        }
    }
}

/// One line saying how the strategy searched: method, width, exactness and the start of the
/// elimination order.
pub fn search_line(r: &SearchReport) -> String {
    const SHOWN: usize = 8;
    let exact = match r.gap_bound {
        Some(gap) if !r.exact => format!("within {:.2}% of the optimum", gap * 100.0),
        _ if r.exact => "exact".to_string(),
        _ => "not exact".to_string(),
    };
    let more = r.order.len().saturating_sub(SHOWN);
    let order = r.order.iter().take(SHOWN).cloned().collect::<Vec<_>>().join(", ");
    let tail = if more > 0 { format!(", … ({more} more)") } else { String::new() };
    format!(
        "search: {}, width {}, largest table {} entries, {exact}; order: {order}{tail}\n",
        r.method, r.width, r.largest_table
    )
}

/// One operator of [`PlanReport::ops`].
#[derive(Serialize)]
pub struct PlannedOpReport<'a> {
    /// The operator's name in the graph.
    pub name: &'a str,
    /// Its kind (`matmul`, `attention`, ...).
    pub kind: &'a str,
    /// How many ways each of its shardable indices is split, by index name.
    pub splits: BTreeMap<&'a str, usize>,
    /// Its cost under the plan, in the plan's unit.
    pub cost: OpCostReport,
}

impl<'a> PlannedOpReport<'a> {
    /// The report of one planned operator.
    pub fn new(o: &'a PlannedOp) -> Self {
        let c = &o.cost;
        PlannedOpReport {
            name: &o.name,
            kind: &o.kind,
            splits: o.splits.iter().map(|(n, c)| (n.as_str(), *c)).collect(),
            cost: OpCostReport {
                repartition: c.repartition,
                join: c.join,
                aggregation: c.aggregation,
                compute: c.compute,
                bytes: c.bytes,
            },
        }
    }
}

/// The cost of one operator in the plan's unit, split as in Section 4.3, and the bytes it
/// moves.
#[derive(Serialize)]
pub struct OpCostReport {
    /// Sub-cost (1): inputs whose producer's tiling differs from what the spec needs.
    pub repartition: f64,
    /// Sub-cost (2): shipping input blocks to the function specs.
    pub join: f64,
    /// Sub-cost (3): combining partial outputs with the operator's ⊕.
    pub aggregation: f64,
    /// The slowest device's compute (zero under the proxy).
    pub compute: f64,
    /// Bytes the three communication sub-costs move (independent of the model).
    pub bytes: f64,
}

/// The fields `run` and `explain` share (flattened into their objects): the compiled task
/// graph's predicted time, traffic, memory and tasks.
#[derive(Serialize)]
pub struct GraphReport {
    /// The simulator's predicted time on the topology, in ms.
    pub predicted_ms: f64,
    /// Bytes the task graph moves between devices.
    pub bytes_moved: usize,
    /// Per device, the peak bytes: resident plus transient peak.
    pub peak_bytes_per_device: Vec<usize>,
    /// Per device, the bytes of computation inputs resident for the executable's lifetime.
    pub resident_bytes_per_device: Vec<usize>,
    /// Per device, the peak of the buffers freed after their last reader.
    pub transient_peak_bytes_per_device: Vec<usize>,
    /// The number of tasks of each kind (`load`, `transfer`, `kernel`, ...).
    pub tasks: BTreeMap<&'static str, usize>,
}

impl GraphReport {
    /// The report of a compiled executable.
    pub fn new(exe: &Executable) -> Self {
        let stats = exe.stats();
        GraphReport {
            predicted_ms: exe.predicted_ms(),
            bytes_moved: stats.bytes_moved,
            peak_bytes_per_device: stats.peak_bytes.clone(),
            resident_bytes_per_device: stats.resident_bytes.clone(),
            transient_peak_bytes_per_device: stats.transient_peak_bytes.clone(),
            tasks: stats.tasks.clone(),
        }
    }
}

impl<'a> PlanReport<'a> {
    /// The report of an executable compiled from `workload` (the workload's spec, or a name
    /// for a graph built by hand) on `topology` with the exchange programs of `schedule`
    /// (`naive` or `search`): its plan, and what its compilation predicts.
    pub fn compiled(exe: &'a Executable, workload: &'a str, topology: &'a str, schedule: &'static str) -> Self {
        let plan = exe.plan();
        let stats = exe.stats();
        PlanReport {
            workload,
            devices: plan.devices,
            optimizer: &plan.optimizer,
            cost_model: &plan.cost_model,
            unit: plan.unit,
            total_cost: plan.total,
            total_bytes: plan.total_bytes,
            optimize_ms: exe.optimize_ms(),
            ops: plan.ops.iter().map(PlannedOpReport::new).collect(),
            search: plan.search.as_ref().map(SearchJson::new),
            topology,
            schedule,
            exchanges: Some(exe.compiled().exchanges.name()),
            searched_ms: exe.compiled().exchanges.searched_ms(),
            predicted_ms: Some(exe.predicted_ms()),
            bytes_moved: Some(stats.bytes_moved),
            compile_ms: Some(exe.compile_ms()),
            compile_error: None,
            memory: Some(MemoryReport::new(stats, exe.memory_capacity(), exe.memory_budget())),
            refinement: exe.refinement().cloned(),
            rewrites: exe.rewrites().map(<[_]>::to_vec),
        }
    }
}

/// The body of `explain`'s text: every operator's split and devices, every exchange program
/// with its simulated time, and each device's memory against the capacity and the budget.
pub fn explain_text(exe: &Executable) -> String {
    let mut text = String::new();
    let names: HashMap<_, _> = exe.plan().ops.iter().map(|o| (o.id, o.name.clone())).collect();
    let _ = writeln!(text, "\nlogical plan ({} optimizer, {} cost):", exe.plan().optimizer, exe.plan().cost_model);
    if let Some(search) = &exe.plan().search {
        text += "  ";
        text += &search_line(search);
    }
    for o in &exe.plan().ops {
        let place = exe.compiled().placement.get(&o.id).map(|d| d.iter().map(|d| d.0.to_string()).collect::<Vec<_>>());
        let _ = writeln!(
            text,
            "  {:<16} {:<10} {:<28} devices {}",
            o.name,
            o.kind,
            o.splits_label(),
            place.map_or_else(String::new, |p| p.join(","))
        );
    }
    let _ = writeln!(text, "\nexchange programs:");
    for p in exe.programs() {
        let _ = writeln!(
            text,
            "# {} input {} ({:.4} ms simulated)\n{}",
            names.get(&p.op).map_or("", |s| s),
            p.input,
            p.simulated_ms,
            p.program
        );
    }
    let stats = exe.stats();
    let _ = writeln!(text, "\nmemory per device (resident inputs + transient peak = peak):");
    for (d, ((r, t), p)) in
        stats.resident_bytes.iter().zip(&stats.transient_peak_bytes).zip(&stats.peak_bytes).enumerate()
    {
        let _ = writeln!(text, "  device {d}: {r} + {t} = {p} bytes");
    }
    text += &memory_text(&exe.compiled().graph, stats, exe.memory_capacity(), exe.memory_budget());
    text
}

//! Whole-plan prediction: a compiled [`TaskGraph`] replayed in the simulator.
//!
//! Every task of the graph becomes one simulator task on the topology (device `d` is site
//! `d`) with the same dependencies and label, so task `i` of the [`Trace`] is task `i` of the
//! graph:
//!
//! | graph task  | simulator task                                                          |
//! |-------------|-------------------------------------------------------------------------|
//! | `Kernel`    | [`TaskKind::Compute`]: the [`Roofline`] time of its operator on its function spec ([`einsum_logical::kernel_work`]: [`AbstractOperator::flops`], [`AbstractOperator::bytes`], its output elements, class from [`AbstractOperator::kind`], precision from its first output's dtype); the simulator adds the topology's kernel launch latency |
//! | `Transfer`  | [`TaskKind::Transfer`] of the buffer's bytes                            |
//! | `Aggregate` | [`TaskKind::Aggregate`] reading every piece and writing the result; a row-wise ⊕ ([`einsum_core::Aggregation::Softmax`], whose partials carry their statistics column) a [`TaskKind::Compute`] of its [`Roofline`] time as an elementwise kernel of [`einsum_core::Aggregation::flops`] and those bytes |
//! | `Slice`, `Stitch` | [`TaskKind::Aggregate`] (an HBM copy) reading and writing the block |
//! | `Load`, `Store` | a zero-second [`TaskKind::Compute`] marker                         |
//!
//! HBM copies (aggregations, slices, stitches) move `bytes / copy.memory` effective bytes
//! through the site's HBM at full bandwidth, which applies the [`Roofline::copy`] efficiency.
//!
//! **Loads and stores are free.** Weights and inputs are resident on their devices before
//! the run, in whatever tiling the plan reads them in (Section 4.2: inputs may be laid out in
//! any tiling for free), so a `Load` costs nothing. A `Store` is free once its block is on
//! its device: the transfers that gather each saved output's copies are tasks of the graph
//! and are simulated like any other; handing the block to the host is not part of the run.
//!
//! The simulation runs everything as early as the dependencies allow: kernels on different
//! devices overlap, kernels on one device share its compute, and transfers overlap kernels.

use einsum_core::taskgraph::{BufferId, Task, TaskGraph};
use einsum_core::{DType, KernelClass};
use einsum_joinagg::{AbstractOperator, Computation, Node};
use einsum_sim::{KernelWork, Precision, Roofline, SimError, SimTask, SimTaskId, SiteId, TaskKind, Topology, Trace};

use super::KernelCall;

/// Why a task graph could not be predicted.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PredictError {
    /// A `Kernel` task names a kernel the table lacks.
    #[error("task `{label}`: kernel {kernel} is not in the kernel table of {count} kernels")]
    UnknownKernel {
        /// The task's label.
        label: String,
        /// The kernel index.
        kernel: usize,
        /// How many kernels the table has.
        count: usize,
    },
    /// A kernel's vertex is not an operator of the computation.
    #[error("task `{label}`: vertex {vertex} is not an operator of the computation")]
    NotAnOperator {
        /// The task's label.
        label: String,
        /// The vertex.
        vertex: usize,
    },
    /// The roofline parameters are invalid, or the simulator refused the graph (a device
    /// beyond the topology's sites, a non-finite kernel time).
    #[error(transparent)]
    Simulate(#[from] SimError),
}

/// The simulator task graph of `graph` (see the module docs), one task per graph task.
pub fn simulator_tasks(
    comp: &Computation,
    graph: &TaskGraph,
    kernels: &[KernelCall],
    topology: &Topology,
    roofline: &Roofline,
) -> Result<Vec<SimTask>, PredictError> {
    tasks_of(comp, graph, kernels, topology, roofline, true)
}

/// [`simulator_tasks`], with each task's label copied from the graph when `labels` holds and
/// left empty (no allocation) otherwise.
fn tasks_of(
    comp: &Computation,
    graph: &TaskGraph,
    kernels: &[KernelCall],
    topology: &Topology,
    roofline: &Roofline,
    labels: bool,
) -> Result<Vec<SimTask>, PredictError> {
    let site = |b: BufferId| SiteId(graph.buffer(b).device.0 as usize);
    let bytes = |b: BufferId| graph.buffer(b).bytes() as f64;
    let copy = |at: SiteId, read: f64, write: f64| TaskKind::Aggregate {
        site: at,
        read_bytes: roofline.copy_bytes(read),
        write_bytes: roofline.copy_bytes(write),
    };
    let mut tasks = Vec::with_capacity(graph.nodes().len());
    for node in graph.nodes() {
        let kind = match &node.task {
            Task::Load { dst: b, .. } | Task::Store { src: b, .. } => {
                TaskKind::Compute { site: site(*b), seconds: 0.0 }
            }
            Task::Slice { dst, .. } => copy(site(*dst), bytes(*dst), bytes(*dst)),
            Task::Transfer { src, dst } if site(*src) == site(*dst) => copy(site(*dst), bytes(*src), bytes(*dst)),
            Task::Transfer { src, dst } => TaskKind::Transfer { src: site(*src), dst: site(*dst), bytes: bytes(*src) },
            Task::Aggregate { srcs, dst, agg } if !agg.is_elementwise() => {
                let at = site(*dst);
                let seconds = topology.site(at).map_or(0.0, |s| {
                    let (ty, dtype) = (&graph.buffer(*dst).ty, graph.buffer(*dst).dtype);
                    let work = KernelWork {
                        class: KernelClass::Elementwise,
                        flops: agg.flops(srcs.len(), ty),
                        bytes: srcs.iter().map(|&b| bytes(b)).sum::<f64>() + bytes(*dst),
                        output_elements: ty.volume() as f64,
                        precision: match dtype {
                            DType::F16 => Precision::F16,
                            DType::BF16 => Precision::BF16,
                            DType::F32 | DType::I32 => Precision::F32,
                        },
                    };
                    roofline.kernel_seconds(s, &work)
                });
                TaskKind::Compute { site: at, seconds }
            }
            Task::Aggregate { srcs, dst, .. } | Task::Stitch { srcs, dst } => {
                copy(site(*dst), srcs.iter().map(|&b| bytes(b)).sum(), bytes(*dst))
            }
            Task::Kernel { kernel, outputs, inputs } => {
                let call = kernels.get(*kernel).ok_or_else(|| PredictError::UnknownKernel {
                    label: node.label.clone(),
                    kernel: *kernel,
                    count: kernels.len(),
                })?;
                let Some(Node::Op { op, .. }) = comp.node(call.op) else {
                    return Err(PredictError::NotAnOperator { label: node.label.clone(), vertex: call.op.0 as usize });
                };
                let at = outputs.first().or(inputs.first()).map_or(SiteId(0), |&b| site(b));
                TaskKind::Compute { site: at, seconds: kernel_seconds(op.as_ref(), call, topology, at, roofline) }
            }
        };
        let deps = node.deps.iter().map(|d| SimTaskId(d.0 as usize)).collect();
        let label = if labels { node.label.clone() } else { String::new() };
        tasks.push(SimTask { label, kind, deps });
    }
    Ok(tasks)
}

/// The roofline seconds of `call` at `site`; a site beyond the topology gets 0 here and is
/// reported by the simulator's site check.
fn kernel_seconds(
    op: &dyn AbstractOperator,
    call: &KernelCall,
    topology: &Topology,
    site: SiteId,
    roofline: &Roofline,
) -> f64 {
    let Some(s) = topology.site(site) else { return 0.0 };
    roofline.kernel_seconds(s, &einsum_logical::kernel_work(op, &call.function))
}

/// Predicts the run of a compiled graph on `topology` by simulating it once (module docs);
/// [`Trace::completion_ms`] is the predicted time. Fails on invalid roofline parameters, a
/// kernel index outside `kernels`, or a device beyond the topology's sites.
pub fn predict(
    comp: &Computation,
    graph: &TaskGraph,
    kernels: &[KernelCall],
    topology: &Topology,
    roofline: &Roofline,
) -> Result<Trace, PredictError> {
    roofline.validate()?;
    let tasks = simulator_tasks(comp, graph, kernels, topology, roofline)?;
    Ok(einsum_sim::simulate(topology, &tasks)?)
}

/// [`predict()`]'s [`Trace::completion_ms`], bit for bit, without its trace: the simulator
/// tasks carry no labels and the simulation records only when tasks end
/// ([`einsum_sim::simulate_completion`]), which keeps a million-task prediction within a
/// fraction of the memory. Fails as [`predict()`] does, with the same labelled errors (on
/// failure the labelled tasks are built again to say which task failed).
pub fn predict_ms(
    comp: &Computation,
    graph: &TaskGraph,
    kernels: &[KernelCall],
    topology: &Topology,
    roofline: &Roofline,
) -> Result<f64, PredictError> {
    roofline.validate()?;
    let tasks = tasks_of(comp, graph, kernels, topology, roofline, false)?;
    match einsum_sim::simulate_completion(topology, &tasks) {
        Ok(seconds) => Ok(seconds * 1e3),
        // Labels change no check, so the labelled run fails too, naming the task.
        Err(unlabelled) => {
            drop(tasks);
            Err(predict(comp, graph, kernels, topology, roofline).err().unwrap_or(unlabelled.into()))
        }
    }
}

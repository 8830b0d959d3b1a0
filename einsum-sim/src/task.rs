//! The simulator's input: a DAG of labelled transfers, multicasts, aggregations and kernels.

use std::fmt;

use crate::error::SimError;
use crate::simulate::Workspace;
use crate::topology::{SiteId, Topology};
use crate::trace::Trace;

/// A task of a simulator [`SimGraph`], an index into its task list. (Not
/// `einsum_core::taskgraph::TaskId`, a task of the executable task graph: the whole-plan
/// prediction maps one to the other.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SimTaskId(pub usize);

impl fmt::Display for SimTaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", self.0)
    }
}

/// What a task moves or computes. Sizes are bytes, kernel work is seconds.
#[derive(Debug, Clone, PartialEq)]
pub enum TaskKind {
    /// `bytes` from `src` to `dst`, crossing the route's resources.
    Transfer {
        /// The sending site.
        src: SiteId,
        /// The receiving site.
        dst: SiteId,
        /// Bytes sent.
        bytes: f64,
    },
    /// `bytes` from `src` to each of `dsts`: one flow per destination, each crossing its own
    /// route. Where routes share the source's egress cap, the flows share it max-min fairly,
    /// so a multicast to `k` destinations gets `1/k` of the egress per destination. The task
    /// ends when the last destination has everything.
    Multicast {
        /// The sending site.
        src: SiteId,
        /// The receiving sites (distinct, none equal to `src`).
        dsts: Vec<SiteId>,
        /// Bytes sent to each destination.
        bytes: f64,
    },
    /// A local aggregation at `site`: one flow of `read_bytes + write_bytes` through the
    /// site's HBM, shared with the site's other concurrent aggregations.
    Aggregate {
        /// Where the aggregation runs.
        site: SiteId,
        /// Bytes read (every piece combined).
        read_bytes: f64,
        /// Bytes written (the result).
        write_bytes: f64,
    },
    /// A kernel at `site` that takes `seconds` when it has the site's compute to itself (its
    /// roofline time, see [`crate::Roofline`]). It is one flow of `seconds` through the site's
    /// compute resource, of capacity 1: concurrent kernels on one site share it max-min
    /// fairly (two equal kernels each run at half speed), so a site never does more than one
    /// kernel's worth of work per second. Kernels do not contend for HBM with aggregations:
    /// their memory traffic is already in `seconds`.
    Compute {
        /// Where the kernel runs.
        site: SiteId,
        /// Seconds of work at full rate.
        seconds: f64,
    },
}

impl TaskKind {
    /// Whether the task moves data between sites (a transfer or multicast).
    pub fn is_transfer(&self) -> bool {
        matches!(self, TaskKind::Transfer { .. } | TaskKind::Multicast { .. })
    }
}

/// A labelled task and the tasks it waits for. It starts the moment the last of them ends.
#[derive(Debug, Clone, PartialEq)]
pub struct SimTask {
    /// A name for traces and error messages (e.g. the ExProg action it came from).
    pub label: String,
    /// What it moves.
    pub kind: TaskKind,
    /// The tasks that must end before it starts.
    pub deps: Vec<SimTaskId>,
}

impl SimTask {
    /// A transfer of `bytes` from `src` to `dst`, with no dependencies.
    pub fn transfer(label: impl Into<String>, src: SiteId, dst: SiteId, bytes: f64) -> Self {
        SimTask { label: label.into(), kind: TaskKind::Transfer { src, dst, bytes }, deps: Vec::new() }
    }

    /// A multicast of `bytes` from `src` to every site of `dsts`, with no dependencies.
    pub fn multicast(label: impl Into<String>, src: SiteId, dsts: Vec<SiteId>, bytes: f64) -> Self {
        SimTask { label: label.into(), kind: TaskKind::Multicast { src, dsts, bytes }, deps: Vec::new() }
    }

    /// An aggregation at `site` reading `read_bytes` and writing `write_bytes`, with no
    /// dependencies.
    pub fn aggregate(label: impl Into<String>, site: SiteId, read_bytes: f64, write_bytes: f64) -> Self {
        SimTask { label: label.into(), kind: TaskKind::Aggregate { site, read_bytes, write_bytes }, deps: Vec::new() }
    }

    /// A kernel at `site` taking `seconds` at full rate (see [`TaskKind::Compute`]), with no
    /// dependencies. Zero seconds makes a marker that ends the instant it starts.
    pub fn compute(label: impl Into<String>, site: SiteId, seconds: f64) -> Self {
        SimTask { label: label.into(), kind: TaskKind::Compute { site, seconds }, deps: Vec::new() }
    }

    /// The same task, also waiting for `deps`.
    pub fn after(mut self, deps: impl IntoIterator<Item = SimTaskId>) -> Self {
        self.deps.extend(deps);
        self
    }
}

/// A list of tasks; a task's [`SimTaskId`] is its position. Dependencies may point anywhere:
/// [`SimGraph::simulate`] rejects dangling ones and cycles.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SimGraph {
    tasks: Vec<SimTask>,
}

impl SimGraph {
    /// An empty graph.
    pub fn new() -> Self {
        SimGraph::default()
    }

    /// Appends `task` and returns its id.
    pub fn push(&mut self, task: SimTask) -> SimTaskId {
        self.tasks.push(task);
        SimTaskId(self.tasks.len() - 1)
    }

    /// The tasks, indexed by [`SimTaskId`].
    pub fn tasks(&self) -> &[SimTask] {
        &self.tasks
    }

    /// One task, or `None` when out of range.
    pub fn task(&self, id: SimTaskId) -> Option<&SimTask> {
        self.tasks.get(id.0)
    }

    /// How many tasks.
    pub fn len(&self) -> usize {
        self.tasks.len()
    }

    /// Whether there are no tasks.
    pub fn is_empty(&self) -> bool {
        self.tasks.is_empty()
    }

    /// Runs the graph on `topology` (see [`crate::simulate`]).
    pub fn simulate(&self, topology: &Topology) -> Result<Trace, SimError> {
        crate::simulate::simulate(topology, &self.tasks)
    }

    /// When each task ends on `topology`, in seconds, by [`SimTaskId`]: the trace's end times
    /// without the trace (see [`crate::simulate_end_times`]).
    pub fn simulate_end_times(&self, topology: &Topology) -> Result<Vec<f64>, SimError> {
        crate::simulate::simulate_end_times(topology, &self.tasks)
    }

    /// [`SimGraph::simulate_end_times`] in the buffers of `workspace` (see
    /// [`crate::simulate_end_times_in`]).
    pub fn simulate_end_times_in(&self, topology: &Topology, workspace: &mut Workspace) -> Result<Vec<f64>, SimError> {
        crate::simulate::simulate_end_times_in(workspace, topology, &self.tasks)
    }
}

impl From<Vec<SimTask>> for SimGraph {
    fn from(tasks: Vec<SimTask>) -> Self {
        SimGraph { tasks }
    }
}

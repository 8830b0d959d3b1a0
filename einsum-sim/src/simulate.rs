//! The event-driven fluid simulator.
//!
//! Every task becomes one or more *flows*: a transfer is one flow along its route, a
//! multicast one flow per destination, an aggregation one flow of `read + write` bytes
//! through its site's HBM, a kernel one flow of its seconds of work through its site's
//! compute resource (capacity 1). The compute resources come after the topology's own:
//! `compute[s]` has index `topology.resources().len() + s` in [`Trace::resource_usage`]. Between events the set of active flows is fixed and each flow
//! moves at its max-min fair rate over the resources it crosses; at every event (a task
//! starting, a flow finishing) the rates are recomputed, for the flows whose connected
//! component of the flow–resource graph changed only ([`FairShare`]: a kernel finishing
//! on one device does not refill the transfers of another, and a FIFO channel's next
//! transfer entering as the one ahead of it finishes refills nothing). The simulator jumps from one
//! completion to the next, so it takes at most one step per flow; a step costs the
//! components it changed plus one pass over the active flows (their remaining bytes) and
//! the busy resources, never a pass over every resource of the machine.
//!
//! A task starts the instant its last dependency ends; a task with no bytes to move ends
//! the instant it starts, and so can release its dependents at the same instant. A task with
//! a latency ([`Topology::task_latency`], `latency.rs`) waits that long after it starts
//! before its flows enter; the waiting tasks' wake-up times are events like completions.
//!
//! Under [`LinkService::Fifo`] (`service.rs`) a transfer's flow enters only when its
//! channel, the ordered pair of its source and destination, is idle; otherwise it waits in
//! the channel's queue and enters, in issue order, the instant the flow ahead of it finishes
//! (at that same event, before any task the event releases is issued). A multicast has one
//! flow per destination, each in its own channel. Under [`LinkService::Fair`] every flow
//! enters as soon as its task is ready.
//!
//! # Two outputs, one run
//! [`simulate`] records a full [`Trace`] (every task's label, resources and deliveries, every
//! resource's usage); [`simulate_completion`] runs the same event loop recording only when
//! each task ends, for callers that need the completion time alone (the whole-plan
//! prediction of a million-task graph, where the trace would be most of the memory). The loop
//! is one generic function over what it records ([`Record`]), so both give the same times bit
//! for bit.

use std::collections::VecDeque;

use crate::error::SimError;
use crate::latency::Waiting;
use crate::maxmin::FairShare;
use crate::service::{Channels, LinkService};
use crate::task::{SimTask, SimTaskId, TaskKind};
use crate::topology::{ResourceId, SiteId, Topology};
use crate::trace::{ResourceUsage, TaskTrace, Trace, union_length};

/// Flows whose remaining time is within this fraction of the step finish together, so that
/// equal flows end at one instant despite rounding.
const FINISH_TIE: f64 = 1e-9;

/// One flow of a task, of `bytes` (its route is in the [`FairShare`], the bytes it has left
/// to move in the event loop's table by flow id).
struct Flow {
    task: usize,
    bytes: f64,
    /// Index into the task's deliveries, for transfers and multicasts.
    delivery: Option<usize>,
    /// Whether it has moved all its bytes.
    finished: bool,
    /// The channel (source and destination site) of a transfer's flow under FIFO service;
    /// `None` for other flows and under fair sharing.
    channel: Option<(usize, usize)>,
}

/// Simulates `tasks` on `topology`: see the module docs for the model. Fails, without
/// running anything, on a dangling dependency, a dependency cycle, a site the topology lacks,
/// a transfer to its own source, a repeated multicast destination, or a negative, NaN or
/// infinite byte count.
pub fn simulate(topology: &Topology, tasks: &[SimTask]) -> Result<Trace, SimError> {
    check(topology, tasks)?;
    let mut record = Full::new(topology, tasks);
    let times = run(topology, tasks, &mut record, &mut Workspace::default());
    let completion = completion(&times.end);
    let traces: Vec<TaskTrace> = tasks
        .iter()
        .zip(record.details)
        .enumerate()
        .map(|(i, (t, Detail { resources, deliveries }))| TaskTrace {
            label: t.label.clone(),
            kind: t.kind.clone(),
            start: times.start[i],
            end: times.end[i],
            resources,
            deliveries,
        })
        .collect();
    let transfer_time =
        union_length(traces.iter().filter(|t| t.kind.is_transfer()).map(|t| (t.start, t.end)).collect());
    Ok(Trace { completion, transfer_time, tasks: traces, usage: record.usage })
}

/// Seconds until the last of `tasks` ends on `topology` (0 for no tasks): what
/// [`simulate`]'s [`Trace::completion`] is, bit for bit, without recording the trace (no
/// per-task labels, resources, deliveries or resource usage are kept). Fails as
/// [`simulate`] does.
pub fn simulate_completion(topology: &Topology, tasks: &[SimTask]) -> Result<f64, SimError> {
    Ok(completion(&simulate_end_times(topology, tasks)?))
}

/// When each of `tasks` ends on `topology`, in seconds, by task index: [`simulate`]'s
/// [`TaskTrace::end`] times, bit for bit, without recording the rest of the trace (for callers
/// that score many candidate programs by their end times, such as the exchange search).
/// Fails as [`simulate`] does.
pub fn simulate_end_times(topology: &Topology, tasks: &[SimTask]) -> Result<Vec<f64>, SimError> {
    simulate_end_times_in(&mut Workspace::default(), topology, tasks)
}

/// [`simulate_end_times`], in the buffers of `workspace`: a caller that simulates many task
/// graphs one after another (the exchange search scores every candidate) keeps one
/// workspace, and the runs after the first allocate little. The times are the same, bit for
/// bit, whatever the workspace ran before.
pub fn simulate_end_times_in(
    workspace: &mut Workspace,
    topology: &Topology,
    tasks: &[SimTask],
) -> Result<Vec<f64>, SimError> {
    check(topology, tasks)?;
    Ok(run(topology, tasks, &mut Nothing, workspace).end)
}

/// The buffers of the event loop, kept from one run to the next by
/// [`simulate_end_times_in`]: the flows' rates and routes ([`FairShare`]), sized by the
/// resources and flows of the largest run so far.
#[derive(Debug, Default)]
pub struct Workspace {
    share: FairShare,
}

/// The largest end time, folded in task order (as [`simulate`] always has).
fn completion(end: &[f64]) -> f64 {
    end.iter().fold(0.0, |acc, &e| acc.max(e))
}

/// When each task started and ended, in seconds.
struct Times {
    start: Vec<f64>,
    end: Vec<f64>,
}

/// What the event loop reports beyond start and end times; [`Nothing`] for
/// [`simulate_completion`], [`Full`] for [`simulate`].
trait Record {
    /// Task `task` starts a flow over `route`.
    fn route(&mut self, task: usize, route: &[usize]);
    /// Delivery `delivery` of task `task` completed at `at`.
    fn delivered(&mut self, task: usize, delivery: usize, at: f64);
    /// The resources in `busy` carried flows for `step` seconds.
    fn busy(&mut self, busy: &[usize], step: f64);
    /// A flow of `bytes` over `route` finished.
    fn moved(&mut self, route: &[usize], bytes: f64);
}

/// Records nothing.
struct Nothing;

impl Record for Nothing {
    fn route(&mut self, _: usize, _: &[usize]) {}
    fn delivered(&mut self, _: usize, _: usize, _: f64) {}
    fn busy(&mut self, _: &[usize], _: f64) {}
    fn moved(&mut self, _: &[usize], _: f64) {}
}

/// Records every task's resources and deliveries and every resource's usage.
struct Full {
    details: Vec<Detail>,
    usage: Vec<ResourceUsage>,
}

/// What [`Full`] records of one task beyond its times (the fields of its [`TaskTrace`]).
struct Detail {
    resources: Vec<ResourceId>,
    deliveries: Vec<(SiteId, f64)>,
}

impl Full {
    fn new(topology: &Topology, tasks: &[SimTask]) -> Full {
        let usage = topology
            .resources()
            .iter()
            .map(|r| ResourceUsage { name: r.name(), capacity: r.capacity, busy_time: 0.0, bytes: 0.0 })
            .chain((0..topology.num_sites()).map(|s| ResourceUsage {
                name: format!("compute[{s}]"),
                capacity: 1.0,
                busy_time: 0.0,
                bytes: 0.0,
            }))
            .collect();
        let details = tasks
            .iter()
            .map(|t| {
                let deliveries = match &t.kind {
                    TaskKind::Transfer { dst, .. } => vec![(*dst, f64::NAN)],
                    TaskKind::Multicast { dsts, .. } => dsts.iter().map(|d| (*d, f64::NAN)).collect(),
                    TaskKind::Aggregate { .. } | TaskKind::Compute { .. } => Vec::new(),
                };
                Detail { resources: Vec::new(), deliveries }
            })
            .collect();
        Full { details, usage }
    }
}

impl Record for Full {
    fn route(&mut self, task: usize, route: &[usize]) {
        let resources = &mut self.details[task].resources;
        for &r in route {
            if !resources.contains(&ResourceId(r)) {
                resources.push(ResourceId(r));
            }
        }
    }

    fn delivered(&mut self, task: usize, delivery: usize, at: f64) {
        self.details[task].deliveries[delivery].1 = at;
    }

    fn busy(&mut self, busy: &[usize], step: f64) {
        for &r in busy {
            self.usage[r].busy_time += step;
        }
    }

    fn moved(&mut self, route: &[usize], bytes: f64) {
        for &r in route {
            self.usage[r].bytes += bytes;
        }
    }
}

/// Each task's dependents, in one flat array (`list[offset[i]..offset[i + 1]]` for task `i`),
/// in ascending task order: the order in which finishing a task releases them.
struct Dependents {
    offset: Vec<usize>,
    list: Vec<usize>,
}

impl Dependents {
    fn of(tasks: &[SimTask]) -> Dependents {
        let mut offset = vec![0usize; tasks.len() + 1];
        for task in tasks {
            for d in &task.deps {
                offset[d.0 + 1] += 1;
            }
        }
        for i in 0..tasks.len() {
            offset[i + 1] += offset[i];
        }
        let mut next = offset.clone();
        let mut list = vec![0usize; offset[tasks.len()]];
        for (i, task) in tasks.iter().enumerate() {
            for d in &task.deps {
                list[next[d.0]] = i;
                next[d.0] += 1;
            }
        }
        Dependents { offset, list }
    }

    fn of_task(&self, i: usize) -> &[usize] {
        &self.list[self.offset[i]..self.offset[i + 1]]
    }
}

/// The event loop (module docs) over checked `tasks`, reporting to `record`, in the buffers of
/// `workspace`.
fn run(topology: &Topology, tasks: &[SimTask], record: &mut impl Record, workspace: &mut Workspace) -> Times {
    let mut state = EventLoop::new(topology, tasks, record, workspace);
    loop {
        state.issue_ready();
        if state.active.is_empty() && state.waiting.is_empty() {
            break;
        }
        state.advance();
    }
    debug_assert_eq!(state.done, tasks.len(), "the cycle check guarantees every task runs");
    state.times
}

/// The state of one run of the event loop: the tasks released and those under way, the flows
/// moving and those waiting for their FIFO channel, and the time.
struct EventLoop<'a, R: Record> {
    topology: &'a Topology,
    tasks: &'a [SimTask],
    record: &'a mut R,
    dependents: Dependents,
    /// Each task's dependencies that have not ended.
    pending: Vec<usize>,
    times: Times,
    /// The tasks released and not yet issued, in release order.
    ready: VecDeque<usize>,
    /// Each task's flows that have not finished.
    open: Vec<usize>,
    share: &'a mut FairShare,
    // The flows with bytes to move, by id (ids ascend in the order flows start), and the
    // ids of those still moving, ascending.
    flows: Vec<Flow>,
    remaining: Vec<f64>,
    active: Vec<usize>,
    // Each active flow's time to finish at its current rate, by position in `active`: the
    // step is their least, and the flows within the tie of the step finish.
    eta: Vec<f64>,
    waiting: Waiting,
    // Under FIFO service, the flows waiting for their channel, and the channels freed at
    // the current event.
    channels: Channels<(Flow, Vec<usize>)>,
    freed: Vec<(usize, usize)>,
    now: f64,
    done: usize,
}

impl<'a, R: Record> EventLoop<'a, R> {
    /// Time 0: the tasks without dependencies ready, nothing moving.
    fn new(topology: &'a Topology, tasks: &'a [SimTask], record: &'a mut R, workspace: &'a mut Workspace) -> Self {
        let n = tasks.len();
        let dependents = Dependents::of(tasks);
        let pending: Vec<usize> = tasks.iter().map(|t| t.deps.len()).collect();
        let mut capacity: Vec<f64> = topology.resources().iter().map(|r| r.capacity).collect();
        capacity.extend(std::iter::repeat_n(1.0, topology.num_sites()));
        let times = Times { start: vec![f64::NAN; n], end: vec![f64::NAN; n] };
        let ready: VecDeque<usize> = (0..n).filter(|&i| pending[i] == 0).collect();
        let share = &mut workspace.share;
        share.reset(&capacity);
        EventLoop {
            topology,
            tasks,
            record,
            dependents,
            pending,
            times,
            ready,
            open: vec![0usize; n],
            share,
            flows: Vec::new(),
            remaining: Vec::new(),
            active: Vec::new(),
            eta: Vec::new(),
            waiting: Waiting::default(),
            channels: Channels::default(),
            freed: Vec::new(),
            now: 0.0_f64,
            done: 0usize,
        }
    }

    /// Starts a flow: it shares its route from now on.
    fn enter(&mut self, flow: Flow, route: Vec<usize>) {
        let id = self.share.add(&route);
        debug_assert_eq!(id, self.flows.len());
        self.remaining.push(flow.bytes);
        self.flows.push(flow);
        self.active.push(id);
    }

    /// Ends `task` now and queues the dependents it releases.
    fn finish(&mut self, task: usize) {
        self.times.end[task] = self.now;
        for &j in self.dependents.of_task(task) {
            self.pending[j] -= 1;
            if self.pending[j] == 0 {
                self.ready.push_back(j);
            }
        }
        self.done += 1;
    }

    /// Issues the ready tasks in turn: a task with a latency waits for it first; the others
    /// start their flows (under FIFO service, those whose channel is free), and a task
    /// without bytes to move ends at once, releasing its dependents into the same queue.
    fn issue_ready(&mut self) {
        while let Some(i) = self.ready.pop_front() {
            if self.times.start[i].is_nan() {
                self.times.start[i] = self.now;
                let latency = self.topology.task_latency(&self.tasks[i].kind);
                if latency > 0.0 {
                    self.waiting.push(self.now + latency, i);
                    continue;
                }
            }
            for (flow, route) in flows_of(self.topology, i, &self.tasks[i]) {
                self.record.route(i, &route);
                if flow.bytes > 0.0 {
                    self.open[i] += 1;
                    let admitted = match flow.channel {
                        Some(channel) => self.channels.admit(channel, (flow, route)),
                        None => Some((flow, route)),
                    };
                    if let Some((flow, route)) = admitted {
                        self.enter(flow, route);
                    }
                } else if let Some(d) = flow.delivery {
                    self.record.delivered(i, d, self.now);
                }
            }
            if self.open[i] == 0 {
                self.finish(i);
            }
        }
    }

    /// Moves time to the next event, the first flow to finish or task to end its latency:
    /// finishes the flows within the tie of the step, lets the next flow of each freed
    /// channel enter, and releases the tasks whose latency has passed.
    fn advance(&mut self) {
        // Only the components whose flows changed get new rates.
        self.share.update();
        self.eta.clear();
        self.eta.extend(self.active.iter().map(|&f| self.remaining[f] / self.share.rate(f)));
        let mut step = self.eta.iter().copied().fold(f64::INFINITY, f64::min);
        let wake = self.waiting.next().filter(|&at| at - self.now <= step);
        if let Some(at) = wake {
            step = at - self.now;
        }
        self.record.busy(self.share.busy(), step);
        self.now = wake.unwrap_or(self.now + step);

        let mut finished = false;
        for k in 0..self.active.len() {
            let (f, eta) = (self.active[k], self.eta[k]);
            if eta <= step * (1.0 + FINISH_TIE) {
                self.finish_flow(f);
                finished = true;
            } else {
                self.remaining[f] -= self.share.rate(f) * step;
            }
        }
        if finished {
            let flows = &self.flows;
            self.active.retain(|&f| !flows[f].finished);
        }
        // The next flow of each freed channel enters now, ahead of the tasks this event
        // releases (they are issued after it).
        let freed = std::mem::take(&mut self.freed);
        for &channel in &freed {
            if let Some((flow, route)) = self.channels.release(channel) {
                self.enter(flow, route);
            }
        }
        self.freed = freed;
        self.freed.clear();
        let ready = &mut self.ready;
        self.waiting.pop_due(self.now, |i| ready.push_back(i));
    }

    /// Flow `f` finishes now: its delivery is made, its task ends if it was its last flow,
    /// and its channel is freed.
    fn finish_flow(&mut self, f: usize) {
        let flow = &mut self.flows[f];
        self.record.moved(self.share.route(f), flow.bytes);
        flow.finished = true;
        if let Some(d) = flow.delivery {
            self.record.delivered(flow.task, d, self.now);
        }
        let (task, channel) = (flow.task, flow.channel);
        self.open[task] -= 1;
        if self.open[task] == 0 {
            self.finish(task);
        }
        if let Some(channel) = channel {
            self.freed.push(channel);
        }
        self.share.remove(f);
    }
}

/// The flows of task `i` with their routes, in the order of its trace's deliveries.
fn flows_of(topology: &Topology, i: usize, task: &SimTask) -> Vec<(Flow, Vec<usize>)> {
    let route = |src: SiteId, dst: SiteId| -> Vec<usize> {
        topology.route(src, dst).unwrap_or_default().into_iter().map(|r| r.0).collect()
    };
    let fifo = topology.service() == LinkService::Fifo;
    let flow = |bytes: f64, delivery, channel: Option<(usize, usize)>| Flow {
        task: i,
        bytes,
        delivery,
        finished: false,
        channel: channel.filter(|_| fifo),
    };
    match &task.kind {
        TaskKind::Transfer { src, dst, bytes } => {
            vec![(flow(*bytes, Some(0), Some((src.0, dst.0))), route(*src, *dst))]
        }
        TaskKind::Multicast { src, dsts, bytes } => dsts
            .iter()
            .enumerate()
            .map(|(d, dst)| (flow(*bytes, Some(d), Some((src.0, dst.0))), route(*src, *dst)))
            .collect(),
        TaskKind::Aggregate { site, read_bytes, write_bytes } => {
            let hbm = topology.hbm(*site).map(|r| vec![r.0]).unwrap_or_default();
            vec![(flow(read_bytes + write_bytes, None, None), hbm)]
        }
        TaskKind::Compute { site, seconds } => {
            vec![(flow(*seconds, None, None), vec![topology.resources().len() + site.0])]
        }
    }
}

/// Validates sites, byte counts and dependencies, and rejects cycles.
fn check(topology: &Topology, tasks: &[SimTask]) -> Result<(), SimError> {
    let sites = topology.num_sites();
    for (i, task) in tasks.iter().enumerate() {
        let id = SimTaskId(i);
        let label = || task.label.clone();
        let site_ok = |site: SiteId| {
            if site.0 < sites { Ok(()) } else { Err(SimError::UnknownSite { task: id, label: label(), site, sites }) }
        };
        let bytes_ok = |field: &'static str, value: f64| {
            if value.is_finite() && value >= 0.0 {
                Ok(())
            } else {
                Err(SimError::InvalidBytes { task: id, label: label(), field, value })
            }
        };
        match &task.kind {
            TaskKind::Transfer { src, dst, bytes } => {
                site_ok(*src)?;
                site_ok(*dst)?;
                if src == dst {
                    return Err(SimError::SameSite { task: id, label: label(), site: *src });
                }
                bytes_ok("bytes", *bytes)?;
            }
            TaskKind::Multicast { src, dsts, bytes } => {
                site_ok(*src)?;
                for (k, dst) in dsts.iter().enumerate() {
                    site_ok(*dst)?;
                    if dst == src {
                        return Err(SimError::SameSite { task: id, label: label(), site: *src });
                    }
                    if dsts[..k].contains(dst) {
                        return Err(SimError::DuplicateDestination { task: id, label: label(), site: *dst });
                    }
                }
                bytes_ok("bytes", *bytes)?;
            }
            TaskKind::Aggregate { site, read_bytes, write_bytes } => {
                site_ok(*site)?;
                bytes_ok("read_bytes", *read_bytes)?;
                bytes_ok("write_bytes", *write_bytes)?;
            }
            TaskKind::Compute { site, seconds } => {
                site_ok(*site)?;
                bytes_ok("seconds", *seconds)?;
            }
        }
        for &dep in &task.deps {
            if dep.0 >= tasks.len() {
                return Err(SimError::UnknownDependency { task: id, label: label(), dep, count: tasks.len() });
            }
        }
    }
    check_acyclic(tasks)
}

/// Kahn's algorithm; on failure, walks unfinished dependencies from an unfinished task
/// until one repeats, and reports that cycle.
fn check_acyclic(tasks: &[SimTask]) -> Result<(), SimError> {
    let n = tasks.len();
    let mut pending: Vec<usize> = tasks.iter().map(|t| t.deps.len()).collect();
    let dependents = Dependents::of(tasks);
    let mut queue: Vec<usize> = (0..n).filter(|&i| pending[i] == 0).collect();
    let mut finished = vec![false; n];
    while let Some(i) = queue.pop() {
        finished[i] = true;
        for &j in dependents.of_task(i) {
            pending[j] -= 1;
            if pending[j] == 0 {
                queue.push(j);
            }
        }
    }
    let Some(first) = (0..n).find(|&i| !finished[i]) else {
        return Ok(());
    };
    let mut path = vec![first];
    let mut position = vec![usize::MAX; n];
    position[first] = 0;
    let mut at = first;
    // An unfinished task waits for at least one unfinished dependency.
    while let Some(next) = tasks[at].deps.iter().map(|d| d.0).find(|&d| !finished[d]) {
        if position[next] != usize::MAX {
            let cycle = &path[position[next]..];
            return Err(SimError::Cycle {
                tasks: cycle.iter().map(|&i| SimTaskId(i)).collect(),
                labels: cycle.iter().map(|&i| tasks[i].label.clone()).collect(),
            });
        }
        position[next] = path.len();
        path.push(next);
        at = next;
    }
    // Unreachable in theory; report what was found rather than panic.
    Err(SimError::Cycle { tasks: vec![SimTaskId(first)], labels: vec![tasks[first].label.clone()] })
}

#[cfg(test)]
mod tests;

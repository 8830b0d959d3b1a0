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
    let n = tasks.len();
    let dependents = Dependents::of(tasks);
    let mut pending: Vec<usize> = tasks.iter().map(|t| t.deps.len()).collect();
    let mut capacity: Vec<f64> = topology.resources().iter().map(|r| r.capacity).collect();
    capacity.extend(std::iter::repeat_n(1.0, topology.num_sites()));
    let mut times = Times { start: vec![f64::NAN; n], end: vec![f64::NAN; n] };

    let mut ready: VecDeque<usize> = (0..n).filter(|&i| pending[i] == 0).collect();
    let mut open = vec![0usize; n];
    // The flows with bytes to move, by id (ids ascend in the order flows start), and the
    // ids of those still moving, ascending.
    let share = &mut workspace.share;
    share.reset(&capacity);
    let mut flows: Vec<Flow> = Vec::new();
    let mut remaining: Vec<f64> = Vec::new();
    let mut active: Vec<usize> = Vec::new();
    // Each active flow's time to finish at its current rate, by position in `active`: the
    // step is their least, and the flows within the tie of the step finish.
    let mut eta: Vec<f64> = Vec::new();
    let mut waiting = Waiting::default();
    // Under FIFO service, the flows waiting for their channel, and the channels freed at
    // the current event.
    let mut channels: Channels<(Flow, Vec<usize>)> = Channels::default();
    let mut freed: Vec<(usize, usize)> = Vec::new();
    let mut now = 0.0_f64;
    let mut done = 0usize;

    // Starts a flow: it shares its route from now on.
    let enter = |flow: Flow,
                 route: Vec<usize>,
                 share: &mut FairShare,
                 flows: &mut Vec<Flow>,
                 remaining: &mut Vec<f64>,
                 active: &mut Vec<usize>| {
        let id = share.add(&route);
        debug_assert_eq!(id, flows.len());
        remaining.push(flow.bytes);
        flows.push(flow);
        active.push(id);
    };

    // Ends `task` at `now` and queues the dependents it releases.
    let mut finish = |task: usize, now: f64, end: &mut [f64], ready: &mut VecDeque<usize>| {
        end[task] = now;
        for &j in dependents.of_task(task) {
            pending[j] -= 1;
            if pending[j] == 0 {
                ready.push_back(j);
            }
        }
    };

    loop {
        while let Some(i) = ready.pop_front() {
            if times.start[i].is_nan() {
                times.start[i] = now;
                let latency = topology.task_latency(&tasks[i].kind);
                if latency > 0.0 {
                    waiting.push(now + latency, i);
                    continue;
                }
            }
            for (flow, route) in flows_of(topology, i, &tasks[i]) {
                record.route(i, &route);
                if flow.bytes > 0.0 {
                    open[i] += 1;
                    let admitted = match flow.channel {
                        Some(channel) => channels.admit(channel, (flow, route)),
                        None => Some((flow, route)),
                    };
                    if let Some((flow, route)) = admitted {
                        enter(flow, route, share, &mut flows, &mut remaining, &mut active);
                    }
                } else if let Some(d) = flow.delivery {
                    record.delivered(i, d, now);
                }
            }
            if open[i] == 0 {
                finish(i, now, &mut times.end, &mut ready);
                done += 1;
            }
        }
        if active.is_empty() && waiting.is_empty() {
            break;
        }

        // Only the components whose flows changed get new rates.
        share.update();
        eta.clear();
        eta.extend(active.iter().map(|&f| remaining[f] / share.rate(f)));
        let mut step = eta.iter().copied().fold(f64::INFINITY, f64::min);
        let wake = waiting.next().filter(|&at| at - now <= step);
        if let Some(at) = wake {
            step = at - now;
        }
        record.busy(share.busy(), step);
        now = wake.unwrap_or(now + step);

        let mut finished = false;
        for (&f, &eta) in active.iter().zip(&eta) {
            let flow = &mut flows[f];
            if eta <= step * (1.0 + FINISH_TIE) {
                record.moved(share.route(f), flow.bytes);
                flow.finished = true;
                if let Some(d) = flow.delivery {
                    record.delivered(flow.task, d, now);
                }
                open[flow.task] -= 1;
                if open[flow.task] == 0 {
                    finish(flow.task, now, &mut times.end, &mut ready);
                    done += 1;
                }
                if let Some(channel) = flow.channel {
                    freed.push(channel);
                }
                share.remove(f);
                finished = true;
            } else {
                remaining[f] -= share.rate(f) * step;
            }
        }
        if finished {
            active.retain(|&f| !flows[f].finished);
        }
        // The next flow of each freed channel enters now, ahead of the tasks this event
        // releases (they are issued after it).
        for channel in freed.drain(..) {
            if let Some((flow, route)) = channels.release(channel) {
                enter(flow, route, share, &mut flows, &mut remaining, &mut active);
            }
        }
        waiting.pop_due(now, |i| ready.push_back(i));
    }
    debug_assert_eq!(done, n, "the cycle check guarantees every task runs");
    times
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
mod tests {
    use super::*;
    use crate::topology::GB;

    /// The DGX-H100 without latencies: the fluid model's exact figures.
    fn h100() -> Topology {
        Topology::preset("dgx-h100").expect("preset").fluid()
    }

    fn s(i: usize) -> SiteId {
        SiteId(i)
    }

    #[test]
    fn empty_graph_completes_at_zero() {
        let trace = simulate(&h100(), &[]).expect("simulate");
        assert_eq!((trace.completion(), trace.transfer_time()), (0.0, 0.0));
        assert!(trace.resource_usage().iter().all(|u| u.bytes == 0.0 && u.busy_time == 0.0));
    }

    #[test]
    fn zero_byte_tasks_finish_at_once_and_release_dependents() {
        let tasks = vec![
            SimTask::transfer("t", s(0), s(1), GB),
            SimTask::transfer("empty", s(1), s(2), 0.0).after([SimTaskId(0)]),
            SimTask::multicast("nobody", s(2), vec![], GB).after([SimTaskId(1)]),
            SimTask::aggregate("noop", s(2), 0.0, 0.0).after([SimTaskId(2)]),
            SimTask::transfer("last", s(2), s(3), GB).after([SimTaskId(3)]),
        ];
        let trace = simulate(&h100(), &tasks).expect("simulate");
        let one = GB / (450.0 * GB);
        for i in 1..4 {
            assert_eq!((trace.tasks()[i].start, trace.tasks()[i].end), (one, one), "task {i}");
        }
        assert_eq!(trace.tasks()[1].deliveries, [(s(2), one)]);
        assert_eq!(trace.completion(), 2.0 * one);
        assert_eq!(trace.transfer_time(), 2.0 * one);
    }

    #[test]
    fn concurrent_aggregations_share_hbm() {
        let tasks = vec![
            SimTask::aggregate("x", s(0), 2.0 * GB, GB),
            SimTask::aggregate("y", s(0), 2.0 * GB, GB),
            SimTask::aggregate("z", s(1), 2.0 * GB, GB),
        ];
        let trace = simulate(&h100(), &tasks).expect("simulate");
        let alone = 3.0 * GB / (3350.0 * GB);
        assert_eq!(trace.tasks()[0].end, 2.0 * alone);
        assert_eq!(trace.tasks()[1].end, 2.0 * alone);
        assert_eq!(trace.tasks()[2].end, alone);
        assert_eq!(trace.transfer_time(), 0.0);
        assert_eq!(trace.bytes_through("hbm[0]"), 6.0 * GB);
        let hbm0 = h100().hbm(s(0)).expect("hbm");
        assert_eq!(trace.usage(hbm0).map(|u| u.busy_time), Some(2.0 * alone));
    }

    #[test]
    fn kernels_share_their_site_and_overlap_across_sites() {
        let t = h100();
        let tasks = vec![
            SimTask::compute("a", s(0), 0.002),
            SimTask::compute("b", s(0), 0.001),
            SimTask::compute("c", s(1), 0.003),
            SimTask::transfer("t", s(0), s(1), 0.45 * GB).after([SimTaskId(0)]),
            SimTask::compute("d", s(1), 0.001).after([SimTaskId(2), SimTaskId(3)]),
        ];
        let trace = simulate(&t, &tasks).expect("simulate");
        // a and b share compute[0] at half rate each until b ends at 2 ms, then a runs alone
        assert_eq!(trace.tasks()[1].end, 0.002);
        assert_eq!(trace.tasks()[0].end, 0.003);
        assert_eq!(trace.tasks()[2].end, 0.003);
        // the transfer (1 ms at 450 GB/s) does not compete with kernels
        assert!((trace.tasks()[3].end - 0.004).abs() < 1e-15);
        assert!((trace.completion() - 0.005).abs() < 1e-15);
        let n = t.resources().len();
        let compute0 = &trace.resource_usage()[n];
        assert_eq!((compute0.name.as_str(), compute0.capacity, compute0.bytes), ("compute[0]", 1.0, 0.003));
        assert_eq!(trace.bytes_through("compute[1]"), 0.004);
        assert_eq!(trace.tasks()[0].resources, [ResourceId(n)]);
        assert!(trace.to_string().contains("compute[1]"));
        assert!(matches!(
            simulate(&t, &[SimTask::compute("bad", s(0), f64::INFINITY)]),
            Err(SimError::InvalidBytes { field: "seconds", .. })
        ));
        assert!(matches!(simulate(&t, &[SimTask::compute("far", s(8), 1.0)]), Err(SimError::UnknownSite { .. })));
    }

    /// `simulate_completion` and `simulate_end_times` run the event loop of `simulate` and
    /// must give its completion and every task's end bit for bit, here with latencies (tasks
    /// waiting before their flows), shared links, multicasts and zero-byte tasks, on three
    /// machines; and fail alike.
    #[test]
    fn the_completion_alone_is_the_traced_completion_bit_for_bit() {
        let mut tasks = vec![
            SimTask::compute("k0", s(0), 1.3e-4),
            SimTask::compute("k1", s(1), 0.7e-4),
            SimTask::multicast("m", s(0), vec![s(1), s(2), s(3)], 0.3 * GB).after([SimTaskId(0)]),
            SimTask::transfer("empty", s(2), s(1), 0.0).after([SimTaskId(1)]),
        ];
        for i in 0..12 {
            let dep = SimTaskId(tasks.len() - 1 - i % 3);
            tasks.push(
                SimTask::transfer("t", s(i % 4), s((i + 1 + i / 4) % 4), (1 + i) as f64 * 0.01 * GB).after([dep]),
            );
            tasks.push(SimTask::aggregate("a", s(i % 4), 1e8, 5e7).after([SimTaskId(tasks.len() - 1)]));
        }
        for name in ["dgx-h100", "dgx-v100", "dgx-a100x2"] {
            let t = Topology::preset(name).expect("preset");
            assert!(t.latency().kernel_launch > 0.0, "{name}");
            let trace = simulate(&t, &tasks).expect("simulate");
            let traced = trace.completion();
            assert!(traced > 0.0);
            assert_eq!(simulate_completion(&t, &tasks).expect("completion").to_bits(), traced.to_bits(), "{name}");
            let ends: Vec<u64> = trace.tasks().iter().map(|task| task.end.to_bits()).collect();
            let alone: Vec<u64> = simulate_end_times(&t, &tasks).expect("ends").iter().map(|e| e.to_bits()).collect();
            assert_eq!(alone, ends, "{name}");
            assert!(ends.iter().collect::<std::collections::BTreeSet<_>>().len() > tasks.len() / 2, "{name}");
        }
        let bad = vec![SimTask::transfer("x", s(0), s(1), GB).after([SimTaskId(0)])];
        assert_eq!(simulate_completion(&h100(), &bad).unwrap_err(), simulate(&h100(), &bad).unwrap_err());
        assert_eq!(simulate_end_times(&h100(), &bad).unwrap_err(), simulate(&h100(), &bad).unwrap_err());
        assert_eq!(simulate_completion(&h100(), &[]).unwrap(), 0.0);
    }

    /// One workspace reused across graphs and machines of different sizes gives every run's
    /// end times bit for bit as a fresh one does.
    #[test]
    fn a_reused_workspace_changes_no_end_time() {
        let graph = |n: usize, sites: usize| -> Vec<SimTask> {
            let mut tasks = vec![SimTask::compute("k", s(0), 1e-4)];
            for i in 0..n {
                let dep = SimTaskId(tasks.len() - 1 - (i % 2).min(tasks.len() - 1));
                let (a, b) = (i % sites, (i * 3 + 1) % sites);
                let b = if a == b { (b + 1) % sites } else { b };
                tasks.push(SimTask::transfer("t", s(a), s(b), (1 + i % 5) as f64 * 0.01 * GB).after([dep]));
                tasks.push(SimTask::aggregate("a", s(b), 1e8, 5e7).after([SimTaskId(tasks.len() - 1)]));
            }
            tasks
        };
        let mut workspace = Workspace::default();
        for (name, n) in [("dgx-h100", 40), ("dgx-v100", 12), ("dgx-a100x2", 60), ("dgx-h100", 7)] {
            let t = Topology::preset(name).expect("preset");
            let tasks = graph(n, t.num_sites());
            let fresh: Vec<u64> = simulate_end_times(&t, &tasks).expect("fresh").iter().map(|e| e.to_bits()).collect();
            let reused: Vec<u64> = simulate_end_times_in(&mut workspace, &t, &tasks)
                .expect("reused")
                .iter()
                .map(|e| e.to_bits())
                .collect();
            assert_eq!(reused, fresh, "{name}");
        }
    }

    #[test]
    fn a_faster_flow_takes_what_a_slower_one_leaves() {
        // 0->1 and 2->1 share ingress[1]; 2->3 shares egress[2] with 2->1. Max-min: all three
        // at 225 GB/s until the 0.5 GB flows end, then 2->3 alone at 450.
        let tasks = vec![
            SimTask::transfer("a", s(0), s(1), 0.5 * GB),
            SimTask::transfer("b", s(2), s(1), 0.5 * GB),
            SimTask::transfer("c", s(2), s(3), GB),
        ];
        let trace = simulate(&h100(), &tasks).expect("simulate");
        let half = 0.5 * GB / (225.0 * GB);
        assert_eq!(trace.tasks()[0].end, half);
        assert_eq!(trace.tasks()[1].end, half);
        assert!((trace.tasks()[2].end - (half + 0.5 * GB / (450.0 * GB))).abs() < 1e-15);
    }

    /// Two 0.5 GB chunks on one ordered pair: fair sharing gives each half the link, so both
    /// arrive at the end; FIFO serves the first alone, which arrives at half that time, and
    /// then the second, which ends when fair sharing ended both.
    #[test]
    fn fifo_serves_two_chunks_on_one_link_in_order() {
        let tasks = vec![
            SimTask::transfer("c1", s(0), s(1), 0.5 * GB),
            SimTask::transfer("c2", s(0), s(1), 0.5 * GB),
            SimTask::aggregate("sum c1", s(1), 1.0 * GB, 0.5 * GB).after([SimTaskId(0)]),
        ];
        let both = GB / (450.0 * GB);
        let fair = simulate(&h100().with_service(LinkService::Fair), &tasks).expect("fair");
        assert_eq!((fair.tasks()[0].end, fair.tasks()[1].end), (both, both));
        let fifo = simulate(&h100().with_service(LinkService::Fifo), &tasks).expect("fifo");
        assert_eq!(fifo.tasks()[0].end, both / 2.0);
        assert!((fifo.tasks()[1].end - both).abs() < 1e-15 * both.max(1.0));
        // the ⊕ of the first chunk overlaps the second's transfer
        assert_eq!(fifo.tasks()[2].start, both / 2.0);
        assert!(fifo.tasks()[2].end < fair.tasks()[2].end);
        // the queued transfer's task started with the first (it was issued), its bytes later
        assert_eq!(fifo.tasks()[1].start, 0.0);
        assert_eq!(fifo.bytes_through("ingress[1]"), fair.bytes_through("ingress[1]"));
    }

    /// FIFO serves one ordered pair: the reverse direction, another destination and a
    /// multicast's other destinations are other channels and share fairly, and a transfer
    /// issued later (its dependency ended later) waits behind one issued earlier even if it
    /// comes first in the task list.
    #[test]
    fn fifo_channels_are_ordered_pairs_in_issue_order() {
        let t = h100().with_service(LinkService::Fifo);
        let one = GB / (450.0 * GB);
        let tasks = vec![
            SimTask::compute("late", s(0), one / 4.0),
            SimTask::transfer("issued second", s(0), s(1), GB).after([SimTaskId(0)]),
            SimTask::transfer("issued first", s(0), s(1), GB),
            SimTask::transfer("back", s(1), s(0), GB),
        ];
        let trace = simulate(&t, &tasks).expect("simulate");
        // 0->1 alone on its channel: 1 GB at 450 GB/s; the reverse link is its own channel.
        assert_eq!(trace.tasks()[2].end, one);
        assert_eq!(trace.tasks()[3].end, one);
        assert!((trace.tasks()[1].end - 2.0 * one).abs() < 1e-15);
        // a multicast to 1 and 2 plus a transfer to 2: channel 0->2 serves two flows in order,
        // while 0->1 shares the egress with 0->2's head
        let tasks = vec![
            SimTask::multicast("m", s(0), vec![s(1), s(2)], 0.5 * GB),
            SimTask::transfer("t", s(0), s(2), 0.5 * GB),
        ];
        let trace = simulate(&t, &tasks).expect("simulate");
        assert_eq!(trace.tasks()[0].deliveries[0], (s(1), one));
        assert_eq!(trace.tasks()[0].deliveries[1], (s(2), one));
        assert!((trace.tasks()[1].end - one * 1.5).abs() < 1e-15, "{}", trace.tasks()[1].end);
    }

    /// Three rounds of chunks on every ordered pair of a machine with latencies: two issued at
    /// once (each channel queues the second), the third after another pair's second. FIFO
    /// ends every transfer, moves the same bytes, delivers the first round at twice the rate
    /// fair sharing gives it, and ends no later.
    #[test]
    fn fifo_runs_every_transfer_of_a_busy_machine() {
        let t = Topology::preset("dgx-a100").expect("preset");
        assert_eq!(t.service(), LinkService::Fifo);
        let pairs: Vec<(usize, usize)> =
            (0..8).flat_map(|a| (0..8).filter(move |&b| b != a).map(move |b| (a, b))).collect();
        let mut tasks = Vec::new();
        for k in 0..3 {
            for (p, &(a, b)) in pairs.iter().enumerate() {
                let deps = (k == 2).then_some(SimTaskId(pairs.len() + (p + 1) % pairs.len()));
                tasks.push(SimTask::transfer("x", s(a), s(b), 0.01 * GB * (1 + k) as f64).after(deps));
            }
        }
        let fair = simulate(&t.clone().with_service(LinkService::Fair), &tasks).expect("fair");
        let fifo = simulate(&t, &tasks).expect("fifo");
        assert!(fifo.tasks().iter().all(|task| task.end.is_finite() && task.end > 0.0));
        assert_eq!(fifo.bytes_through("egress[3]"), fair.bytes_through("egress[3]"));
        let setup = t.latency().link;
        let (first_fair, first_fifo) = (fair.tasks()[0].end - setup, fifo.tasks()[0].end - setup);
        assert!((first_fair - 2.0 * first_fifo).abs() < 1e-9 * first_fair, "{first_fair} vs {first_fifo}");
        assert!(fifo.completion() <= fair.completion() * (1.0 + 1e-9));
    }

    #[test]
    fn bad_graphs_are_typed_errors() {
        let t = h100();
        let run = |tasks: Vec<SimTask>| simulate(&t, &tasks).unwrap_err();
        assert!(matches!(
            run(vec![SimTask::transfer("x", s(0), s(1), GB).after([SimTaskId(5)])]),
            SimError::UnknownDependency { dep: SimTaskId(5), count: 1, .. }
        ));
        assert!(matches!(
            run(vec![SimTask::transfer("x", s(0), s(8), GB)]),
            SimError::UnknownSite { site: SiteId(8), .. }
        ));
        assert!(matches!(run(vec![SimTask::aggregate("x", s(9), 1.0, 1.0)]), SimError::UnknownSite { .. }));
        assert!(matches!(run(vec![SimTask::transfer("x", s(3), s(3), GB)]), SimError::SameSite { .. }));
        assert!(matches!(run(vec![SimTask::multicast("x", s(3), vec![s(1), s(3)], GB)]), SimError::SameSite { .. }));
        assert!(matches!(
            run(vec![SimTask::multicast("x", s(0), vec![s(1), s(2), s(1)], GB)]),
            SimError::DuplicateDestination { site: SiteId(1), .. }
        ));
        assert!(matches!(
            run(vec![SimTask::aggregate("x", s(0), 1.0, f64::NAN)]),
            SimError::InvalidBytes { field: "write_bytes", .. }
        ));
        assert!(matches!(run(vec![SimTask::transfer("x", s(0), s(1), -1.0)]), SimError::InvalidBytes { .. }));
        assert!(matches!(run(vec![SimTask::transfer("x", s(0), s(1), f64::INFINITY)]), SimError::InvalidBytes { .. }));
    }

    #[test]
    fn cycles_are_reported_with_their_members() {
        let t = h100();
        let self_loop = vec![SimTask::transfer("me", s(0), s(1), GB).after([SimTaskId(0)])];
        let err = simulate(&t, &self_loop).unwrap_err();
        assert_eq!(err, SimError::Cycle { tasks: vec![SimTaskId(0)], labels: vec!["me".into()] });
        assert_eq!(err.to_string(), "dependency cycle: #0 (`me`) needs #0 (`me`)");

        let tasks = vec![
            SimTask::transfer("root", s(0), s(1), GB),
            SimTask::transfer("a", s(0), s(1), GB).after([SimTaskId(0), SimTaskId(3)]),
            SimTask::transfer("b", s(0), s(1), GB).after([SimTaskId(1)]),
            SimTask::transfer("c", s(0), s(1), GB).after([SimTaskId(2)]),
            SimTask::transfer("after", s(0), s(1), GB).after([SimTaskId(3)]),
        ];
        let SimError::Cycle { mut tasks, .. } = simulate(&t, &tasks).unwrap_err() else { panic!("expected a cycle") };
        tasks.sort();
        assert_eq!(tasks, [SimTaskId(1), SimTaskId(2), SimTaskId(3)]);
    }
}

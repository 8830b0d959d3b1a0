//! [`StreamPlan`]: the pure scheduling logic of the CUDA backend: which GPU every virtual
//! device runs on, which stream every task is issued to, which task waits on which other
//! task's event, and where every buffer and scratch area lives in its GPU's pool. (Not to
//! be confused with the exchange synthesizer, `einsum_compile::ExchangeSynthesizer`, which
//! chooses how exchange programs are synthesized.)
//!
//! # Design
//! Virtual device `v` runs on GPU `v mod gpus` (an 8-device plan runs on one GPU). Every
//! virtual device owns one or more streams of its GPU: a GPU's stream budget
//! (`streams_per_gpu`, [`DEFAULT_STREAMS_PER_GPU`]) is shared among the virtual devices it
//! hosts, with at least one stream each (so 8 virtual devices on one GPU keep their 8
//! streams, and one virtual device alone gets all of them; a budget of 1 gives every virtual
//! device exactly one stream). The streams of device `v` are consecutive and stream 0
//! (device 0's first) is the origin that captures and launches start on.
//!
//! Tasks are issued in schedule order. A task goes to one of its device's streams (a
//! transfer to its destination's), chosen from the task graph's dependencies
//! ([`assign_streams`]): it continues the stream whose last issued task is one of its direct
//! predecessors (the latest such, so a chain stays on one stream), else takes a stream not
//! used yet, else the stream whose last task was issued earliest (the one estimated to
//! become free first). So tasks that do not depend on each other, such as the Q, K and V
//! projections of an attention block, land on different streams and overlap, while a chain
//! costs no event.
//!
//! A dependency on the same stream is implied by issue order; one on another stream becomes
//! an event recorded after the producer and waited for before the consumer. Waits already
//! implied transitively are dropped ([`events`]): every task carries a vector clock (for
//! every stream, the last task on it known to be complete when the task starts), and a
//! dependency the clock already covers needs no wait. Memory reuse adds dependencies too: a
//! task writing bytes the pool planner reused waits for every earlier user of those bytes
//! (see [`crate::pool`]), whichever stream they ran on, so reuse stays race-free however
//! the streams interleave. [`crate::race_check`] proves that for a given plan.
//!
//! Load destinations are not in the pools: they live in the resident regions
//! ([`crate::resident`]), filled before any run, so a Load task issues nothing and nobody
//! waits for it.
//!
//! A transfer between two virtual devices on the same GPU copies nothing
//! ([`StreamPlan::elided`]): its destination aliases its source's memory (a pool allocation,
//! or a resident block). That is safe because a task-graph buffer is written once, by one
//! task, before any task reads it, so neither buffer of the pair changes while the other is
//! read. The pool planner sees an alias group (a buffer and every destination transferred
//! from it within its GPU, transitively) as one allocation, written by the source's writer and
//! held until the last read of any buffer of the group. An aliased transfer issues nothing and
//! waits for nothing: a task depending on it depends on what it depended on instead. With
//! [`PlanOptions::alias_transfers`] off, transfers within a GPU are device copies.
//!
//! A rank of a multi-process job ([`StreamPlan::for_rank`]) plans the job's graph in its own
//! issue order ([`RankSchedule`]): its devices map onto its GPUs, other ranks' tasks issue
//! nothing and their buffers take no memory, and its sends and receives take one more stream
//! per GPU, the exchange stream, where each step is one group ([`StreamPlan::steps`]). The
//! operations of a group run together, so the pool holds every buffer a step touches for
//! the whole step, and [`crate::race_check`] counts two of its operations touching the same
//! bytes as a race.

use einsum_core::taskgraph::{BufferId, Task, TaskGraph, TaskId};

use crate::pool::{self, Alloc};
use crate::rank_schedule::{RankSchedule, Role, StepOp, steps_of};
use crate::resident::ResidentPlan;

/// The default stream budget of one GPU (shared by the virtual devices it hosts).
pub const DEFAULT_STREAMS_PER_GPU: usize = 4;

/// Streams, events and memory of a task graph on `gpus` GPUs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamPlan {
    /// Number of GPUs used.
    pub gpus: usize,
    /// GPU of every virtual device.
    pub gpu_of_device: Vec<usize>,
    /// Virtual device every stream belongs to (a device's streams are consecutive; stream 0
    /// is the origin).
    pub stream_device: Vec<usize>,
    /// Stream every task is issued to (an index into `stream_device`).
    pub stream: Vec<usize>,
    /// Tasks on other streams every task waits for (through their events), ascending.
    pub waits: Vec<Vec<TaskId>>,
    /// Whether an event must be recorded after each task (some task on another stream
    /// waits for it).
    pub record: Vec<bool>,
    /// For every task, whether it is a transfer between two virtual devices on one GPU
    /// whose destination shares its source's memory: it issues nothing, and its readers
    /// depend on what it depended on.
    pub elided: Vec<bool>,
    /// Pool offset of every buffer (in its device's GPU pool; an aliased transfer's
    /// destination has its source's); unused for the resident buffers (Load destinations,
    /// and destinations aliasing them), which `resident` places.
    pub buffer_offset: Vec<usize>,
    /// Pool offsets of every task's scratch areas.
    pub scratch_offset: Vec<Vec<usize>>,
    /// Bytes of every GPU's pool.
    pub pool_bytes: Vec<usize>,
    /// Where the Load destinations live, outside the pools.
    pub resident: ResidentPlan,
    /// What every task is to the rank this plan is for ([`Role::Local`] throughout for one
    /// process): another rank's task issues nothing, and its buffers take no memory here.
    pub roles: Vec<Role>,
    /// For every device, whether it is this rank's (every device for one process).
    pub local_device: Vec<bool>,
    /// This rank's sends and receives of every step, in issue order (empty for one
    /// process); each step is issued as one group on its GPU's exchange stream.
    pub steps: Vec<Vec<StepOp>>,
}

/// The virtual device a task runs on: where it writes (a transfer runs on its
/// destination), or where a store reads.
pub fn task_device(graph: &TaskGraph, task: &Task) -> usize {
    let b = task.writes().first().copied().or_else(|| task.reads().first().copied());
    b.map_or(0, |b| graph.buffer(b).device.0 as usize)
}

/// How many streams every virtual device gets: GPU `g`'s budget `per_gpu` split evenly
/// among the devices it hosts (the first ones get the remainder), at least one each.
pub fn streams_per_device(gpu_of_device: &[usize], gpus: usize, per_gpu: usize) -> Vec<usize> {
    let mut hosted = vec![0usize; gpus];
    for &g in gpu_of_device {
        hosted[g] += 1;
    }
    let mut rank = vec![0usize; gpus];
    gpu_of_device
        .iter()
        .map(|&g| {
            let (n, r) = (hosted[g], rank[g]);
            rank[g] += 1;
            (per_gpu / n + usize::from(r < per_gpu % n)).max(1)
        })
        .collect()
}

/// Assigns every task a stream of its device (`lanes[v]`, the range of device `v`'s
/// streams), in schedule order, from `deps[t]` (its dependencies, descending, silent tasks
/// excluded): the stream whose last issued task is the latest direct predecessor, else an
/// unused stream, else the stream whose last task was issued earliest. Silent tasks
/// (`silent`: Loads and aliased transfers) issue nothing; they get their device's first
/// stream and leave the streams' histories alone.
pub fn assign_streams(
    device: &[usize],
    lanes: &[std::ops::Range<usize>],
    deps: &[Vec<usize>],
    silent: &[bool],
) -> Vec<usize> {
    let streams = lanes.iter().map(|l| l.end).max().unwrap_or(0);
    let mut last: Vec<Option<usize>> = vec![None; streams];
    let mut stream = vec![0; device.len()];
    for t in 0..device.len() {
        let lane = lanes[device[t]].clone();
        if silent[t] {
            stream[t] = lane.start;
            continue;
        }
        let s = deps[t]
            .iter()
            .find_map(|&d| lane.clone().find(|&s| last[s] == Some(d)))
            .or_else(|| lane.clone().find(|&s| last[s].is_none()))
            .or_else(|| lane.clone().min_by_key(|&s| last[s]))
            .expect("every device has a stream");
        stream[t] = s;
        last[s] = Some(t);
    }
    stream
}

/// The events: for every task the tasks on other streams it must wait for, and whether an
/// event is recorded after each task. A dependency is waited for unless the task's vector
/// clock (its stream's, joined with the clocks of the tasks it has waited for so far)
/// already covers it; dependencies are taken latest first, so one wait covers the earlier
/// work it implies. Silent tasks (`silent`) issue nothing and wait for nothing.
pub fn events(stream: &[usize], streams: usize, deps: &[Vec<usize>], silent: &[bool]) -> (Vec<Vec<TaskId>>, Vec<bool>) {
    // Clock entries are schedule positions plus one (0: nothing on that stream is known).
    let mut tail: Vec<Vec<usize>> = vec![vec![0; streams]; streams];
    let mut clock: Vec<Vec<usize>> = Vec::with_capacity(stream.len());
    let mut waits = vec![Vec::new(); stream.len()];
    let mut record = vec![false; stream.len()];
    for t in 0..stream.len() {
        if silent[t] {
            clock.push(Vec::new());
            continue;
        }
        let s = stream[t];
        let mut c = tail[s].clone();
        for &d in &deps[t] {
            if c[stream[d]] > d {
                continue;
            }
            waits[t].push(TaskId(d as u32));
            record[d] = true;
            for (x, &y) in c.iter_mut().zip(&clock[d]) {
                *x = (*x).max(y);
            }
        }
        waits[t].sort_unstable();
        c[s] = t + 1;
        tail[s].clone_from(&c);
        clock.push(c);
    }
    (waits, record)
}

/// How to plan streams and memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlanOptions {
    /// The stream budget of every GPU (at least one stream per virtual device).
    pub streams_per_gpu: usize,
    /// Whether a transfer between two virtual devices on the same GPU shares its source's
    /// memory instead of copying (see [`StreamPlan::elided`]).
    pub alias_transfers: bool,
}

impl Default for PlanOptions {
    /// [`DEFAULT_STREAMS_PER_GPU`] streams per GPU, transfers within a GPU aliased.
    fn default() -> Self {
        PlanOptions { streams_per_gpu: DEFAULT_STREAMS_PER_GPU, alias_transfers: true }
    }
}

/// Transfers within one GPU, aliased where `alias` asks: each buffer's alias root (itself
/// unless it is the destination of an aliased transfer), and whether each task is such a
/// transfer, which issues nothing.
fn alias_transfers(graph: &TaskGraph, gpu_of_device: &[usize], roles: &[Role], alias: bool) -> (Vec<usize>, Vec<bool>) {
    let nodes = graph.nodes();
    let gpu_of_buffer = |b: BufferId| gpu_of_device[graph.buffer(b).device.0 as usize];
    // Transfers within one GPU: the destination shares the memory of its source's alias
    // root (the buffer at the start of a chain of such transfers), and the transfer issues
    // nothing. Safe because a task-graph buffer is written once, by one task
    // (`TaskGraph::push` refuses a second writer), before the transfer reads it, and the
    // lowering writes only a task's own outputs and scratch: neither buffer changes while
    // the other is read.
    let mut root: Vec<usize> = (0..graph.buffers().len()).collect();
    let mut elided = vec![false; nodes.len()];
    if alias {
        for (t, n) in nodes.iter().enumerate() {
            if let Task::Transfer { src, dst } = n.task
                && roles[t] == Role::Local
                && gpu_of_buffer(src) == gpu_of_buffer(dst)
            {
                root[dst.0 as usize] = root[src.0 as usize];
                elided[t] = true;
            }
        }
    }
    (root, elided)
}

/// The plan's memory before it is placed in the pools: the allocations with the tasks that
/// touch each, and which allocation holds every buffer and every task's scratch areas.
struct Allocations {
    allocs: Vec<Alloc>,
    /// The tasks that touch each allocation: its writer first, then its readers.
    users: Vec<Vec<usize>>,
    /// The allocation of every buffer (its alias root's); `None` for resident buffers.
    buffer_alloc: Vec<Option<usize>>,
    /// The allocation of each of every task's scratch areas.
    scratch_alloc: Vec<Vec<usize>>,
}

impl Allocations {
    /// The allocations of `graph` with alias roots `root`, tasks that issue nothing `silent`,
    /// its resident buffers, each task's device, each task's `scratch` bytes, the devices
    /// whose buffers take memory here (`local_device`) and the positions each task occupies
    /// (`span`: its own, or its whole step's for a send or receive, which run as one group).
    #[allow(clippy::too_many_arguments)]
    fn of(
        graph: &TaskGraph,
        root: &[usize],
        silent: &[bool],
        resident: &ResidentPlan,
        gpu_of_device: &[usize],
        device: &[usize],
        scratch: &[Vec<usize>],
        local_device: &[bool],
        span: &[(usize, usize)],
    ) -> Allocations {
        let nodes = graph.nodes();
        // Allocations: the pool buffers first (one per alias group, held until the last
        // read of any of its buffers), then scratch areas; `users` lists the tasks touching
        // each. Resident buffers get none.
        let mut allocs = Vec::new();
        let mut users: Vec<Vec<usize>> = Vec::new();
        let mut buffer_alloc: Vec<Option<usize>> = vec![None; graph.buffers().len()];
        let mut readers: Vec<Vec<usize>> = vec![Vec::new(); graph.buffers().len()];
        for (t, n) in nodes.iter().enumerate() {
            for b in n.task.reads() {
                if !silent[t] {
                    readers[root[b.0 as usize]].push(t);
                }
            }
        }
        for (b, buf) in graph.buffers().iter().enumerate() {
            if resident.buffer_block[b].is_some() || root[b] != b || !local_device[buf.device.0 as usize] {
                continue;
            }
            let first = graph.writer(BufferId(b as u32)).map_or(0, |t| span[t.0 as usize].0);
            let last = readers[b].iter().map(|&t| span[t].1).max().map_or(first, |t| t.max(first));
            buffer_alloc[b] = Some(allocs.len());
            allocs.push(Alloc { gpu: gpu_of_device[buf.device.0 as usize], bytes: buf.bytes(), first, last });
            let mut u = vec![first];
            u.extend(&readers[b]);
            users.push(u);
        }
        for (b, &r) in root.iter().enumerate() {
            buffer_alloc[b] = buffer_alloc[r];
        }
        let mut scratch_alloc: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
        for (t, sizes) in scratch.iter().enumerate().take(nodes.len()) {
            for &bytes in sizes {
                scratch_alloc[t].push(allocs.len());
                allocs.push(Alloc { gpu: gpu_of_device[device[t]], bytes, first: t, last: t });
                users.push(vec![t]);
            }
        }
        Allocations { allocs, users, buffer_alloc, scratch_alloc }
    }
}

/// Every task's dependencies in the stream plan (see below), latest first.
fn dependencies(
    graph: &TaskGraph,
    elided: &[bool],
    silent: &[bool],
    memory: &Allocations,
    reuses: &[Vec<usize>],
) -> Vec<Vec<usize>> {
    let nodes = graph.nodes();
    let Allocations { users, buffer_alloc, scratch_alloc, .. } = memory;
    // Dependencies: the graph's, plus every user of the bytes a task's allocations reuse;
    // a silent task stands for its own dependencies (an aliased transfer's readers wait
    // for what the transfer would have), and Load tasks drop out. Latest first.
    let mut deps: Vec<Vec<usize>> = Vec::with_capacity(nodes.len());
    for (t, n) in nodes.iter().enumerate() {
        let mut mine = Vec::new();
        for d in n.deps.iter().map(|d| d.0 as usize) {
            if elided[d] {
                mine.extend(&deps[d]);
            } else if !silent[d] {
                mine.push(d);
            }
        }
        if !silent[t] {
            let written = n.task.writes().into_iter().filter_map(|b| buffer_alloc[b.0 as usize]);
            for a in written.chain(scratch_alloc[t].iter().copied()) {
                for &j in &reuses[a] {
                    mine.extend(users[j].iter().copied().filter(|&u| u < t && !silent[u]));
                }
            }
        }
        mine.sort_unstable_by(|a, b| b.cmp(a));
        mine.dedup();
        deps.push(mine);
    }
    deps
}

impl StreamPlan {
    /// Plans `graph` on `gpus` GPUs (at least 1) with a budget of `streams_per_gpu`
    /// streams per GPU (at least one per virtual device) and transfers within a GPU aliased;
    /// `scratch[t]` lists the scratch bytes task `t` needs during its run (empty for most
    /// tasks; shorter than the task list is fine).
    pub fn new(graph: &TaskGraph, gpus: usize, streams_per_gpu: usize, scratch: &[Vec<usize>]) -> StreamPlan {
        StreamPlan::with_options(graph, gpus, &PlanOptions { streams_per_gpu, ..PlanOptions::default() }, scratch)
    }

    /// Plans `graph` on `gpus` GPUs with `options`; see [`StreamPlan::new`].
    pub fn with_options(graph: &TaskGraph, gpus: usize, options: &PlanOptions, scratch: &[Vec<usize>]) -> StreamPlan {
        let roles = vec![Role::Local; graph.nodes().len()];
        StreamPlan::build(graph, &roles, &vec![true; graph.devices()], gpus, options, scratch)
    }

    /// Plans one rank's share of a multi-process job ([`RankSchedule`]: the job's graph in
    /// the rank's issue order) on `gpus` GPUs of its own: its devices map onto them
    /// round-robin (in device order), other ranks' tasks issue nothing and their buffers take
    /// no memory, and the rank's sends and receives of every step go, one group per step, to
    /// an exchange stream of their GPU (one more stream per GPU that has any), which waits
    /// for the step's producers before the group and records the events its consumers wait
    /// for after it. A step's operations run together, so every buffer one of them touches is
    /// held in the pool for the whole step.
    pub fn for_rank(schedule: &RankSchedule, gpus: usize, options: &PlanOptions, scratch: &[Vec<usize>]) -> StreamPlan {
        let RankSchedule { graph, roles, local_device, .. } = schedule;
        StreamPlan::build(graph, roles, local_device, gpus, options, scratch)
    }

    /// The plan of `graph` for the rank whose tasks' roles are `roles` and whose devices
    /// `local_device` marks.
    fn build(
        graph: &TaskGraph,
        roles: &[Role],
        local_device: &[bool],
        gpus: usize,
        options: &PlanOptions,
        scratch: &[Vec<usize>],
    ) -> StreamPlan {
        let gpus = gpus.max(1);
        let nodes = graph.nodes();
        let mut gpu_of_device = vec![0; graph.devices().max(1)];
        for (k, v) in (0..graph.devices()).filter(|&v| local_device[v]).enumerate() {
            gpu_of_device[v] = k % gpus;
        }
        let local_device: Vec<bool> = (0..gpu_of_device.len()).map(|v| local_device.get(v) != Some(&false)).collect();
        // Streams of the local devices (another rank's device gets none).
        let local: Vec<usize> = (0..gpu_of_device.len()).filter(|&v| local_device[v]).collect();
        let local_gpus: Vec<usize> = local.iter().map(|&v| gpu_of_device[v]).collect();
        let mut counts = vec![0; gpu_of_device.len()];
        for (&v, k) in local.iter().zip(streams_per_device(&local_gpus, gpus, options.streams_per_gpu)) {
            counts[v] = k;
        }
        let mut stream_device = Vec::new();
        let mut lanes = Vec::new();
        for (v, k) in counts.into_iter().enumerate() {
            lanes.push(stream_device.len()..stream_device.len() + k);
            stream_device.extend(std::iter::repeat_n(v, k));
        }
        // A send runs on its source's device, everything else where it writes.
        let device: Vec<usize> = nodes
            .iter()
            .zip(roles)
            .map(|(n, r)| match (r, &n.task) {
                (Role::Send { .. }, Task::Transfer { src, .. }) => graph.buffer(*src).device.0 as usize,
                _ => task_device(graph, &n.task),
            })
            .collect();
        // One exchange stream per GPU with a send or receive, owned by its first local device.
        let mut exchange_stream: Vec<Option<usize>> = vec![None; gpus];
        for (t, r) in roles.iter().enumerate() {
            let g = gpu_of_device[device[t]];
            if r.step().is_some() && exchange_stream[g].is_none() {
                exchange_stream[g] = Some(stream_device.len());
                let owner = local.iter().copied().find(|&v| gpu_of_device[v] == g).unwrap_or(device[t]);
                stream_device.push(owner);
            }
        }
        let (root, elided) = alias_transfers(graph, &gpu_of_device, roles, options.alias_transfers);
        let mut resident = ResidentPlan::of_devices(graph, &gpu_of_device, &local_device, gpus);
        for (b, &r) in root.iter().enumerate() {
            resident.buffer_block[b] = resident.buffer_block[r];
        }
        // Tasks that issue nothing: Loads (their data is resident before the run), aliased
        // transfers and other ranks' tasks.
        let silent: Vec<bool> = nodes
            .iter()
            .zip(&elided)
            .zip(roles)
            .map(|((n, &e), r)| e || *r == Role::Remote || matches!(n.task, Task::Load { .. }))
            .collect();
        // The positions every task occupies: a step's sends and receives all of the step's.
        let steps = steps_of(graph, roles);
        let mut span: Vec<(usize, usize)> = (0..nodes.len()).map(|t| (t, t)).collect();
        for ops in &steps {
            if let (Some(first), Some(last)) = (ops.first(), ops.last()) {
                for o in ops {
                    span[o.op.task.0 as usize] = (first.op.task.0 as usize, last.op.task.0 as usize);
                }
            }
        }
        let memory =
            Allocations::of(graph, &root, &silent, &resident, &gpu_of_device, &device, scratch, &local_device, &span);
        let plan = pool::plan(&memory.allocs, gpus);
        let deps = dependencies(graph, &elided, &silent, &memory, &plan.reuses);
        let Allocations { buffer_alloc, scratch_alloc, .. } = memory;
        // Sends and receives keep out of the compute streams' histories; they take the
        // exchange stream.
        let exchanged: Vec<bool> = silent.iter().zip(roles).map(|(&s, r)| s || r.step().is_some()).collect();
        let mut stream = assign_streams(&device, &lanes, &deps, &exchanged);
        for (t, r) in roles.iter().enumerate() {
            if r.step().is_some() {
                stream[t] = exchange_stream[gpu_of_device[device[t]]].expect("a GPU with a step has its stream");
            } else if *r == Role::Remote {
                stream[t] = 0;
            }
        }
        let (waits, record) = events(&stream, stream_device.len(), &deps, &silent);
        StreamPlan {
            gpus,
            gpu_of_device,
            stream_device,
            stream,
            waits,
            record,
            elided,
            buffer_offset: buffer_alloc.iter().map(|a| a.map_or(0, |a| plan.offsets[a])).collect(),
            scratch_offset: scratch_alloc.iter().map(|v| v.iter().map(|&a| plan.offsets[a]).collect()).collect(),
            pool_bytes: plan.sizes,
            resident,
            roles: roles.to_vec(),
            local_device,
            steps,
        }
    }

    /// Number of streams (over every GPU).
    pub fn streams(&self) -> usize {
        self.stream_device.len()
    }

    /// The GPU stream `s` belongs to.
    pub fn gpu_of_stream(&self, s: usize) -> usize {
        self.gpu_of_device[self.stream_device[s]]
    }
}

#[cfg(test)]
mod tests {
    use einsum_core::taskgraph::examples::{gather_after_a_slice, two_device_gather};
    use einsum_core::taskgraph::{Boundary, DeviceId};
    use einsum_core::{DType, Interval, TensorType};

    use super::*;

    #[test]
    fn virtual_devices_share_gpus_round_robin() {
        let s = StreamPlan::new(&two_device_gather(), 1, 1, &[]);
        assert_eq!(s.gpu_of_device, vec![0, 0]);
        assert_eq!(s.pool_bytes.len(), 1);
        let s = StreamPlan::new(&two_device_gather(), 2, 1, &[]);
        assert_eq!(s.gpu_of_device, vec![0, 1]);
    }

    /// The plan with transfers copying even within a GPU (the behaviour before aliasing).
    fn copying(g: &TaskGraph, gpus: usize, streams_per_gpu: usize, scratch: &[Vec<usize>]) -> StreamPlan {
        StreamPlan::with_options(g, gpus, &PlanOptions { streams_per_gpu, alias_transfers: false }, scratch)
    }

    #[test]
    fn loads_are_resident_and_nobody_waits_for_them() {
        let s = copying(&two_device_gather(), 1, 1, &[]);
        assert_eq!(s.stream, vec![0, 1, 0, 0, 0]);
        // a and b live in the resident region; b0 and y (live together) in the pool.
        assert_eq!(s.resident.buffer_block, vec![Some(0), Some(1), None, None]);
        assert_eq!(s.pool_bytes, vec![2 * crate::pool::ALIGN]);
        assert_ne!(s.buffer_offset[2], s.buffer_offset[3]);
        // The transfer reads b, resident before the run: no event, no wait.
        assert!(s.waits.iter().all(Vec::is_empty), "{:?}", s.waits);
        assert!(s.record.iter().all(|r| !r));
    }

    #[test]
    fn cross_stream_dependencies_become_events() {
        let s = copying(&gather_after_a_slice(), 1, 1, &[]);
        assert_eq!(s.stream, vec![0, 1, 1, 0, 0, 0]);
        // The transfer (stream 0) waits for the slice on stream 1; the stitch's output reuses
        // the bytes of c (dead after the transfer), so it depends on c's writer too, a
        // dependency the transfer's wait already covers (same stream, issued before).
        assert_eq!(s.waits[3], vec![TaskId(2)]);
        assert_eq!(s.buffer_offset[4], s.buffer_offset[2]);
        assert!(s.waits[4].is_empty());
        assert_eq!(s.record, vec![false, false, true, false, false, false]);
    }

    #[test]
    fn a_transfer_within_a_gpu_aliases_its_source_and_issues_nothing() {
        let g = gather_after_a_slice();
        let s = StreamPlan::new(&g, 1, 1, &[]);
        assert_eq!(s.elided, vec![false, false, false, true, false, false]);
        // b0 is c's memory, which now lives until the stitch reads b0: y cannot reuse it.
        assert_eq!(s.buffer_offset[3], s.buffer_offset[2]);
        assert_ne!(s.buffer_offset[4], s.buffer_offset[2]);
        // The stitch depends on the transfer, which stands for the slice it depended on.
        assert_eq!(s.waits[4], vec![TaskId(2)]);
        assert!(s.waits[3].is_empty());
        assert_eq!(s.record, vec![false, false, true, false, false, false]);
        // The same pool as copying: c's bytes were y's before; now b0 needs none.
        assert_eq!(s.pool_bytes, copying(&g, 1, 1, &[]).pool_bytes);
        // A transfer from a resident block aliases the block.
        let s = StreamPlan::new(&two_device_gather(), 1, 1, &[]);
        assert_eq!(s.resident.buffer_block, vec![Some(0), Some(1), Some(1), None]);
        assert_eq!(s.pool_bytes, vec![crate::pool::ALIGN]);
        // Across GPUs a transfer copies.
        assert!(StreamPlan::new(&g, 2, 1, &[]).elided.iter().all(|e| !e));
    }

    #[test]
    fn buffers_live_together_do_not_overlap() {
        let g = gather_after_a_slice();
        let s = StreamPlan::new(&g, 1, 4, &[vec![], vec![], vec![], vec![], vec![100], vec![]]);
        let mut spans: Vec<(usize, usize)> =
            s.buffer_offset.iter().zip(g.buffers()).map(|(&o, b)| (o, o + b.bytes())).collect();
        spans.push((s.scratch_offset[4][0], s.scratch_offset[4][0] + 100));
        // b0, y and the scratch are live when the stitch runs (c is dead by then; a and b are
        // resident, outside the pool).
        for i in [3, 4, 5] {
            for j in [3, 4, 5].into_iter().filter(|&j| j < i) {
                assert!(spans[i].1 <= spans[j].0 || spans[j].1 <= spans[i].0, "{spans:?}");
            }
        }
        assert!(spans.iter().skip(2).all(|&(_, end)| end <= s.pool_bytes[0]));
    }

    /// One device's fan-out: `x` loaded, four independent slices of it (tasks 1-4), then a
    /// stitch of the first three (task 5) and a stitch of that with the fourth (task 6).
    fn fan_out() -> TaskGraph {
        let whole = TensorType::zero_bounded(&[8]);
        let part = |lo: usize| TensorType::from_intervals(vec![Interval { lo, hi: lo + 2 }]);
        let io = |n: &str, ty: &TensorType| Boundary { name: n.into(), ty: ty.clone(), dtype: DType::F32 };
        let six = TensorType::zero_bounded(&[6]);
        let mut g = TaskGraph::new(1, vec![io("x", &whole)], vec![io("y", &whole)]);
        let x = g.add_buffer(DeviceId(0), whole.clone(), DType::F32);
        g.push(Task::Load { input: 0, dst: x }, &[], "load").unwrap();
        let parts: Vec<_> = (0..4).map(|i| g.add_buffer(DeviceId(0), part(2 * i), DType::F32)).collect();
        for &p in &parts {
            g.push(Task::Slice { src: x, dst: p }, &[], "slice").unwrap();
        }
        let first = g.add_buffer(DeviceId(0), six, DType::F32);
        g.push(Task::Stitch { srcs: parts[..3].to_vec(), dst: first }, &[], "stitch3").unwrap();
        let y = g.add_buffer(DeviceId(0), whole, DType::F32);
        g.push(Task::Stitch { srcs: vec![first, parts[3]], dst: y }, &[], "stitch").unwrap();
        g.push(Task::Store { output: 0, src: y }, &[], "store").unwrap();
        g
    }

    #[test]
    fn a_gpu_budget_is_shared_by_its_devices_with_one_stream_at_least() {
        assert_eq!(streams_per_device(&[0], 1, 4), vec![4]);
        assert_eq!(streams_per_device(&[0, 0, 0], 1, 4), vec![2, 1, 1]);
        assert_eq!(streams_per_device(&[0; 8], 1, 4), vec![1; 8]);
        assert_eq!(streams_per_device(&[0, 1, 0, 1], 2, 4), vec![2, 2, 2, 2]);
        assert_eq!(streams_per_device(&[0, 0], 1, 1), vec![1, 1]);
    }

    #[test]
    fn independent_tasks_take_their_own_streams_and_a_chain_stays_on_one() {
        let s = StreamPlan::new(&fan_out(), 1, 4, &[]);
        assert_eq!(s.stream_device, vec![0; 4]);
        // The slices fan out over the four streams; the first stitch continues the stream of
        // its latest input (slice 3's) and waits for slices 1 and 2; the second continues the
        // first stitch's stream and waits for slice 4; the store follows on the same stream.
        assert_eq!(s.stream[1..], [0, 1, 2, 3, 2, 2, 2]);
        assert_eq!(s.waits[5], vec![TaskId(1), TaskId(2)]);
        assert_eq!(s.waits[6], vec![TaskId(4)]);
        assert!(s.waits[7].is_empty());
        // One stream: today's behaviour, everything in issue order, no event.
        let one = StreamPlan::new(&fan_out(), 1, 1, &[]);
        assert!(one.stream.iter().all(|&s| s == 0));
        assert!(one.waits.iter().all(Vec::is_empty) && one.record.iter().all(|r| !r));
    }

    #[test]
    fn a_full_budget_reuses_the_stream_free_earliest() {
        let s = StreamPlan::new(&fan_out(), 1, 3, &[]);
        // Three streams for four slices: the fourth takes the stream of the first (issued
        // earliest).
        assert_eq!(s.stream[1..5], [0, 1, 2, 0]);
    }

    /// Two ranks of one device each swap kernel results in one step: on each rank the block
    /// sent (last read by the send) and the block received are held together for the step,
    /// so the receive cannot reuse the sent block's bytes, as it could were the two run one
    /// after the other; the race checker passes the plan and flags that reuse.
    #[test]
    fn a_step_holds_what_it_sends_and_receives_together() {
        use crate::exchange_steps::Direction;
        use crate::exchange_steps::tests::layered;
        use crate::race_check::{RaceError, check};
        // Tasks 0, 1 load; 2: kernel on 0; 3: kernel on 1; 4: 0 -> 1 of 2's block; 5: 1 -> 0
        // of 3's block; 6: kernel on 0 of what it received; 7: kernel on 1 likewise.
        let g = layered(2, &[(0, 0, 0, 0), (1, 1, 0, 0), (1, 0, 1, 0), (0, 1, 1, 0), (0, 0, 2, 2), (1, 1, 2, 2)]);
        for rank in 0..2 {
            let s = RankSchedule::new(&g, &[0, 1], rank, 2).unwrap();
            let plan = StreamPlan::for_rank(&s, 1, &PlanOptions::default(), &[]);
            assert_eq!(plan.steps.len(), 1);
            let ops = &plan.steps[0];
            assert_eq!(ops.len(), 2, "{ops:?}");
            let buffer = |d| ops.iter().find(|o| o.op.direction == d).unwrap().buffer.0 as usize;
            let (sent, received) = (buffer(Direction::Send), buffer(Direction::Recv));
            // Both on the exchange stream, the last one.
            let exchange = plan.streams() - 1;
            assert!(ops.iter().all(|o| plan.stream[o.op.task.0 as usize] == exchange));
            assert_ne!(plan.buffer_offset[sent], plan.buffer_offset[received]);
            check(&s.graph, &plan, &[]).unwrap_or_else(|e| panic!("rank {rank}: {e}"));
            let mut reused = plan.clone();
            reused.buffer_offset[received] = plan.buffer_offset[sent];
            assert!(matches!(check(&s.graph, &reused, &[]), Err(RaceError::Race { .. })), "rank {rank}");
            // Another rank's buffers take no memory: two pool blocks, the block sent and the
            // block received; the last kernel's result reuses the sent block's bytes.
            assert_eq!(plan.pool_bytes, vec![2 * crate::pool::ALIGN], "rank {rank}");
        }
    }

    #[test]
    fn waits_implied_by_an_earlier_wait_are_dropped() {
        // Stream 1 runs 0 then 1; task 2 (stream 0) depends on both: waiting for 1 covers 0.
        let (waits, record) = events(&[1, 1, 0], 2, &[vec![], vec![0], vec![1, 0]], &[false; 3]);
        assert_eq!(waits, vec![vec![], vec![], vec![TaskId(1)]]);
        assert_eq!(record, vec![false, true, false]);
        // Task 3 on stream 0 depends on 0 on stream 2, which task 1 (stream 1) waited for;
        // task 2 (stream 0) waited for task 1, so task 3 needs no wait of its own.
        let (waits, _) = events(&[2, 1, 0, 0], 3, &[vec![], vec![0], vec![1], vec![2, 0]], &[false; 4]);
        assert_eq!(waits[1], vec![TaskId(0)]);
        assert_eq!(waits[2], vec![TaskId(1)]);
        assert!(waits[3].is_empty(), "{waits:?}");
    }
}

//! [`StreamPlan`]: the pure scheduling logic of the CUDA backend: which GPU every virtual
//! device runs on, which stream every task is issued to, which task waits on which other
//! task's event, and where every buffer and scratch area lives in its GPU's pool. (Named
//! apart from `einsum_compile::Schedule`, which chooses how exchange programs are
//! synthesized.)
//!
//! # Design
//! Virtual device `v` runs on GPU `v mod gpus` (an 8-device plan runs on one GPU) and has a
//! stream of its own, so the virtual devices sharing a GPU still overlap. Tasks are issued
//! in schedule order, each to its device's stream (a transfer to its destination's), so a
//! dependency on the same stream is implied by issue order; a dependency on another stream
//! becomes an event recorded after the producer and waited for before the consumer. Memory
//! reuse adds dependencies too (see [`crate::pool`]).
//!
//! Load destinations are not in the pools: they live in the resident regions
//! ([`crate::resident`]), filled before any run, so a Load task issues nothing and nobody
//! waits for it.

use einsum_core::taskgraph::{Task, TaskGraph, TaskId};

use crate::pool::{self, Alloc};
use crate::resident::ResidentPlan;

/// Streams, events and memory of a task graph on `gpus` GPUs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamPlan {
    /// Number of GPUs used.
    pub gpus: usize,
    /// GPU of every virtual device.
    pub gpu_of_device: Vec<usize>,
    /// Stream (= virtual device) every task is issued to.
    pub stream: Vec<usize>,
    /// Tasks on other streams every task waits for (through their events).
    pub waits: Vec<Vec<TaskId>>,
    /// Whether an event must be recorded after each task (some task on another stream
    /// waits for it).
    pub record: Vec<bool>,
    /// Pool offset of every buffer (in its device's GPU pool); unused for the resident
    /// buffers (Load destinations), which `resident` places.
    pub buffer_offset: Vec<usize>,
    /// Pool offsets of every task's scratch areas.
    pub scratch_offset: Vec<Vec<usize>>,
    /// Bytes of every GPU's pool.
    pub pool_bytes: Vec<usize>,
    /// Where the Load destinations live, outside the pools.
    pub resident: ResidentPlan,
}

/// The virtual device a task runs on: where it writes (a transfer runs on its
/// destination), or where a store reads.
pub fn task_device(graph: &TaskGraph, task: &Task) -> usize {
    let b = task.writes().first().copied().or_else(|| task.reads().first().copied());
    b.map_or(0, |b| graph.buffer(b).device.0 as usize)
}

impl StreamPlan {
    /// Plans `graph` on `gpus` GPUs (at least 1); `scratch[t]` lists the scratch bytes
    /// task `t` needs during its run (empty for most tasks; shorter than the task list is
    /// fine).
    pub fn new(graph: &TaskGraph, gpus: usize, scratch: &[Vec<usize>]) -> StreamPlan {
        let gpus = gpus.max(1);
        let nodes = graph.nodes();
        let gpu_of_device: Vec<usize> = (0..graph.devices()).map(|v| v % gpus).collect();
        let stream: Vec<usize> = nodes.iter().map(|n| task_device(graph, &n.task)).collect();
        let last = graph.last_readers();
        let resident = ResidentPlan::new(graph, &gpu_of_device, gpus);
        let is_load: Vec<bool> = nodes.iter().map(|n| matches!(n.task, Task::Load { .. })).collect();
        // Allocations: the pool buffers first, then scratch areas; `users` lists the tasks
        // touching each. Resident buffers get none.
        let mut allocs = Vec::new();
        let mut users: Vec<Vec<usize>> = Vec::new();
        let mut buffer_alloc: Vec<Option<usize>> = vec![None; graph.buffers().len()];
        let mut readers: Vec<Vec<usize>> = vec![Vec::new(); graph.buffers().len()];
        for (t, n) in nodes.iter().enumerate() {
            for b in n.task.reads() {
                readers[b.0 as usize].push(t);
            }
        }
        for (b, buf) in graph.buffers().iter().enumerate() {
            if resident.buffer_block[b].is_some() {
                continue;
            }
            let first = graph.writer(einsum_core::taskgraph::BufferId(b as u32)).map_or(0, |t| t.0 as usize);
            let last = last[b].map_or(first, |t| (t.0 as usize).max(first));
            buffer_alloc[b] = Some(allocs.len());
            allocs.push(Alloc { gpu: gpu_of_device[buf.device.0 as usize], bytes: buf.bytes(), first, last });
            let mut u = vec![first];
            u.extend(&readers[b]);
            users.push(u);
        }
        let mut scratch_alloc: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
        for (t, sizes) in scratch.iter().enumerate().take(nodes.len()) {
            for &bytes in sizes {
                scratch_alloc[t].push(allocs.len());
                allocs.push(Alloc { gpu: gpu_of_device[stream[t]], bytes, first: t, last: t });
                users.push(vec![t]);
            }
        }
        let plan = pool::plan(&allocs, gpus);
        // Dependencies: the graph's, plus every user of the bytes a task's allocations reuse,
        // less the Load tasks (their data is resident before the run starts).
        let mut waits = vec![Vec::new(); nodes.len()];
        let mut record = vec![false; nodes.len()];
        for (t, n) in nodes.iter().enumerate() {
            let mut deps: Vec<usize> = n.deps.iter().map(|d| d.0 as usize).collect();
            let written = n.task.writes().into_iter().filter_map(|b| buffer_alloc[b.0 as usize]);
            let mine = written.chain(scratch_alloc[t].iter().copied());
            for a in mine {
                for &j in &plan.reuses[a] {
                    deps.extend(users[j].iter().copied().filter(|&u| u < t));
                }
            }
            deps.retain(|&d| !is_load[d]);
            deps.sort_unstable();
            deps.dedup();
            for d in deps {
                if stream[d] != stream[t] {
                    record[d] = true;
                    waits[t].push(TaskId(d as u32));
                }
            }
        }
        StreamPlan {
            gpus,
            gpu_of_device,
            stream,
            waits,
            record,
            buffer_offset: buffer_alloc.iter().map(|a| a.map_or(0, |a| plan.offsets[a])).collect(),
            scratch_offset: scratch_alloc.iter().map(|v| v.iter().map(|&a| plan.offsets[a]).collect()).collect(),
            pool_bytes: plan.sizes,
            resident,
        }
    }
}

#[cfg(test)]
mod tests {
    use einsum_core::taskgraph::examples::two_device_gather;
    use einsum_core::taskgraph::{Boundary, DeviceId};
    use einsum_core::{DType, Interval, TensorType};

    use super::*;

    /// The two-device gather with a slice on device 1 before the send: tasks `0` load a
    /// (device 0), `1` load b (device 1), `2` slice b into c (device 1), `3` move c to b0
    /// (device 0), `4` stitch a and b0 into y, `5` store y. Buffers: a, b, c, b0, y.
    fn gather_after_a_slice() -> TaskGraph {
        let whole = TensorType::zero_bounded(&[4]);
        let half = |lo: usize| TensorType::from_intervals(vec![Interval { lo, hi: lo + 2 }]);
        let io = |n: &str| Boundary { name: n.into(), ty: whole.clone(), dtype: DType::F32 };
        let mut g = TaskGraph::new(2, vec![io("x")], vec![io("y")]);
        let a = g.add_buffer(DeviceId(0), half(0), DType::F32);
        let b = g.add_buffer(DeviceId(1), half(2), DType::F32);
        let c = g.add_buffer(DeviceId(1), half(2), DType::F32);
        let b0 = g.add_buffer(DeviceId(0), half(2), DType::F32);
        let y = g.add_buffer(DeviceId(0), whole, DType::F32);
        let tasks = [
            Task::Load { input: 0, dst: a },
            Task::Load { input: 0, dst: b },
            Task::Slice { src: b, dst: c },
            Task::Transfer { src: c, dst: b0 },
            Task::Stitch { srcs: vec![a, b0], dst: y },
            Task::Store { output: 0, src: y },
        ];
        for task in tasks {
            g.push(task, &[], "t").unwrap();
        }
        g
    }

    #[test]
    fn virtual_devices_share_gpus_round_robin() {
        let s = StreamPlan::new(&two_device_gather(), 1, &[]);
        assert_eq!(s.gpu_of_device, vec![0, 0]);
        assert_eq!(s.pool_bytes.len(), 1);
        let s = StreamPlan::new(&two_device_gather(), 2, &[]);
        assert_eq!(s.gpu_of_device, vec![0, 1]);
    }

    #[test]
    fn loads_are_resident_and_nobody_waits_for_them() {
        let s = StreamPlan::new(&two_device_gather(), 1, &[]);
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
        let s = StreamPlan::new(&gather_after_a_slice(), 1, &[]);
        assert_eq!(s.stream, vec![0, 1, 1, 0, 0, 0]);
        // The transfer (stream 0) waits for the slice on stream 1; the stitch's output reuses
        // the bytes of c (dead after the transfer), so it waits for c's writer too.
        assert_eq!(s.waits[3], vec![TaskId(2)]);
        assert_eq!(s.buffer_offset[4], s.buffer_offset[2]);
        assert_eq!(s.waits[4], vec![TaskId(2)]);
        assert_eq!(s.record, vec![false, false, true, false, false, false]);
    }

    #[test]
    fn buffers_live_together_do_not_overlap() {
        let g = gather_after_a_slice();
        let s = StreamPlan::new(&g, 1, &[vec![], vec![], vec![], vec![], vec![100], vec![]]);
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
}

//! The pure scheduling logic of the CUDA backend: which GPU every virtual device runs on,
//! which stream every task is issued to, which task waits on which other task's event,
//! and where every buffer and scratch area lives in its GPU's pool.
//!
//! # Design
//! Virtual device `v` runs on GPU `v mod gpus` (an 8-device plan runs on one GPU) and has a
//! stream of its own, so the virtual devices sharing a GPU still overlap. Tasks are issued
//! in schedule order, each to its device's stream (a transfer to its destination's), so a
//! dependency on the same stream is implied by issue order; a dependency on another stream
//! becomes an event recorded after the producer and waited for before the consumer. Memory
//! reuse adds dependencies too (see [`crate::pool`]).

use einsum_core::taskgraph::{Task, TaskGraph, TaskId};

use crate::pool::{self, Alloc};

/// Streams, events and memory of a task graph on `gpus` GPUs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Schedule {
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
    /// Pool offset of every buffer (in its device's GPU pool).
    pub buffer_offset: Vec<usize>,
    /// Pool offsets of every task's scratch areas.
    pub scratch_offset: Vec<Vec<usize>>,
    /// Bytes of every GPU's pool.
    pub pool_bytes: Vec<usize>,
}

/// The virtual device a task runs on: where it writes (a transfer runs on its
/// destination), or where a store reads.
pub fn task_device(graph: &TaskGraph, task: &Task) -> usize {
    let b = task.writes().first().copied().or_else(|| task.reads().first().copied());
    b.map_or(0, |b| graph.buffer(b).device.0 as usize)
}

impl Schedule {
    /// Schedules `graph` on `gpus` GPUs (at least 1); `scratch[t]` lists the scratch bytes
    /// task `t` needs during its run (empty for most tasks; shorter than the task list is
    /// fine).
    pub fn new(graph: &TaskGraph, gpus: usize, scratch: &[Vec<usize>]) -> Schedule {
        let gpus = gpus.max(1);
        let nodes = graph.nodes();
        let gpu_of_device: Vec<usize> = (0..graph.devices()).map(|v| v % gpus).collect();
        let stream: Vec<usize> = nodes.iter().map(|n| task_device(graph, &n.task)).collect();
        let last = graph.last_readers();
        // Allocations: buffers first, then scratch areas; `users` lists the tasks touching each.
        let mut allocs = Vec::new();
        let mut users: Vec<Vec<usize>> = Vec::new();
        let mut readers: Vec<Vec<usize>> = vec![Vec::new(); graph.buffers().len()];
        for (t, n) in nodes.iter().enumerate() {
            for b in n.task.reads() {
                readers[b.0 as usize].push(t);
            }
        }
        for (b, buf) in graph.buffers().iter().enumerate() {
            let first = graph.writer(einsum_core::taskgraph::BufferId(b as u32)).map_or(0, |t| t.0 as usize);
            let last = last[b].map_or(first, |t| (t.0 as usize).max(first));
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
        // Dependencies: the graph's, plus every user of the bytes a task's allocations reuse.
        let mut waits = vec![Vec::new(); nodes.len()];
        let mut record = vec![false; nodes.len()];
        for (t, n) in nodes.iter().enumerate() {
            let mut deps: Vec<usize> = n.deps.iter().map(|d| d.0 as usize).collect();
            let mine = n.task.writes().into_iter().map(|b| b.0 as usize).chain(scratch_alloc[t].iter().copied());
            for a in mine {
                for &j in &plan.reuses[a] {
                    deps.extend(users[j].iter().copied().filter(|&u| u < t));
                }
            }
            deps.sort_unstable();
            deps.dedup();
            for d in deps {
                if stream[d] != stream[t] {
                    record[d] = true;
                    waits[t].push(TaskId(d as u32));
                }
            }
        }
        let nb = graph.buffers().len();
        Schedule {
            gpus,
            gpu_of_device,
            stream,
            waits,
            record,
            buffer_offset: plan.offsets[..nb].to_vec(),
            scratch_offset: scratch_alloc.iter().map(|v| v.iter().map(|&a| plan.offsets[a]).collect()).collect(),
            pool_bytes: plan.sizes,
        }
    }
}

#[cfg(test)]
mod tests {
    use einsum_core::taskgraph::examples::two_device_gather;

    use super::*;

    #[test]
    fn virtual_devices_share_gpus_round_robin() {
        let s = Schedule::new(&two_device_gather(), 1, &[]);
        assert_eq!(s.gpu_of_device, vec![0, 0]);
        assert_eq!(s.pool_bytes.len(), 1);
        let s = Schedule::new(&two_device_gather(), 2, &[]);
        assert_eq!(s.gpu_of_device, vec![0, 1]);
    }

    #[test]
    fn cross_stream_dependencies_become_events() {
        let s = Schedule::new(&two_device_gather(), 1, &[]);
        assert_eq!(s.stream, vec![0, 1, 0, 0, 0]);
        // The transfer (stream 0) waits for the load on stream 1; the stitch's output reuses
        // the bytes of b (dead after the transfer), so it waits for b's writer too.
        assert_eq!(s.waits[2], vec![TaskId(1)]);
        assert_eq!(s.buffer_offset[3], s.buffer_offset[1]);
        assert_eq!(s.waits[3], vec![TaskId(1)]);
        assert!(s.waits[4].is_empty());
        assert_eq!(s.record, vec![false, true, false, false, false]);
    }

    #[test]
    fn buffers_live_together_do_not_overlap() {
        let g = two_device_gather();
        let s = Schedule::new(&g, 1, &[vec![], vec![], vec![], vec![100], vec![]]);
        let mut spans: Vec<(usize, usize)> =
            s.buffer_offset.iter().zip(g.buffers()).map(|(&o, b)| (o, o + b.bytes())).collect();
        spans.push((s.scratch_offset[3][0], s.scratch_offset[3][0] + 100));
        // a, b0, y and the scratch are live when the stitch runs (b is dead by then).
        for i in [0, 2, 3, 4] {
            for j in [0, 2, 3, 4].into_iter().filter(|&j| j < i) {
                assert!(spans[i].1 <= spans[j].0 || spans[j].1 <= spans[i].0, "{spans:?}");
            }
        }
        assert!(s.pool_bytes[0] >= g.stats().peak_bytes[0]);
    }
}

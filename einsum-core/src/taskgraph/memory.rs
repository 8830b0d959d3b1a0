//! Static statistics of a task graph: task counts, bytes moved, and memory per device —
//! resident (computation inputs) plus the transient peak of the schedule.

use std::collections::BTreeMap;

use super::{Task, TaskGraph};

/// What a task graph does, counted before running it.
///
/// Memory follows the graph's model (see [the module docs](super)): every `Load` buffer is
/// resident for the executable's lifetime; every other buffer is transient, allocated by its
/// writer and freed after its last reader. So on each device
/// `peak_bytes = resident_bytes + transient_peak_bytes`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MemoryStats {
    /// Number of tasks of each kind.
    pub tasks: BTreeMap<&'static str, usize>,
    /// Bytes sent between devices (the sum over transfers).
    pub bytes_moved: usize,
    /// The most bytes held on each device at once: its resident bytes plus its transient
    /// peak.
    pub peak_bytes: Vec<usize>,
    /// Per device, the bytes of every `Load` destination buffer (the blocks of computation
    /// inputs it holds for the executable's lifetime).
    pub resident_bytes: Vec<usize>,
    /// Per device, the most bytes of transient (non-`Load`) buffers live at once, running
    /// the tasks one at a time in schedule order.
    pub transient_peak_bytes: Vec<usize>,
}

pub(super) fn stats(g: &TaskGraph) -> MemoryStats {
    let n = g.devices();
    let mut s = MemoryStats { resident_bytes: vec![0; n], transient_peak_bytes: vec![0; n], ..MemoryStats::default() };
    let last = g.last_readers();
    let mut live = vec![0usize; n];
    // The buffers freed after each task, flat: those freed after task `i` are
    // `freed[start[i]..start[i + 1]]` (a counting sort by last reader, so no list per task).
    let mut start = vec![0usize; g.nodes().len() + 1];
    for t in last.iter().flatten() {
        start[t.0 as usize + 1] += 1;
    }
    for i in 0..g.nodes().len() {
        start[i + 1] += start[i];
    }
    let mut freed = vec![0usize; start[g.nodes().len()]];
    let mut next = start.clone();
    for (b, l) in last.iter().enumerate() {
        if let Some(t) = l {
            freed[next[t.0 as usize]] = b;
            next[t.0 as usize] += 1;
        }
    }
    for (i, node) in g.nodes().iter().enumerate() {
        *s.tasks.entry(node.task.kind()).or_default() += 1;
        if let Task::Transfer { src, .. } = node.task {
            s.bytes_moved += g.buffer(src).bytes();
        }
        let resident = matches!(node.task, Task::Load { .. });
        for &b in node.task.written_buffers() {
            let buf = g.buffer(b);
            let d = buf.device.0 as usize;
            if resident {
                s.resident_bytes[d] += buf.bytes();
                continue;
            }
            live[d] += buf.bytes();
            s.transient_peak_bytes[d] = s.transient_peak_bytes[d].max(live[d]);
            // A buffer nobody reads is freed at once (it was written for nothing).
            if last[b.0 as usize].is_none() {
                live[d] -= buf.bytes();
            }
        }
        for &b in &freed[start[i]..start[i + 1]] {
            let buf = &g.buffers()[b];
            if !g.is_resident(super::BufferId(b as u32)) {
                live[buf.device.0 as usize] -= buf.bytes();
            }
        }
    }
    s.peak_bytes = s.resident_bytes.iter().zip(&s.transient_peak_bytes).map(|(r, t)| r + t).collect();
    s
}

//! Static statistics of a task graph: task counts, bytes moved, peak memory per device.

use std::collections::BTreeMap;

use super::{Task, TaskGraph};

/// What a task graph does, counted before running it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MemoryStats {
    /// Number of tasks of each kind.
    pub tasks: BTreeMap<&'static str, usize>,
    /// Bytes sent between devices (the sum over transfers).
    pub bytes_moved: usize,
    /// The most bytes resident on each device at once, running the tasks in schedule order.
    pub peak_bytes: Vec<usize>,
}

pub(super) fn stats(g: &TaskGraph) -> MemoryStats {
    let mut s = MemoryStats { peak_bytes: vec![0; g.devices()], ..MemoryStats::default() };
    let last = g.last_readers();
    let mut resident = vec![0usize; g.devices()];
    // Buffers freed after each task.
    let mut frees: Vec<Vec<usize>> = vec![Vec::new(); g.nodes().len()];
    for (b, l) in last.iter().enumerate() {
        if let Some(t) = l {
            frees[t.0 as usize].push(b);
        }
    }
    for (i, n) in g.nodes().iter().enumerate() {
        *s.tasks.entry(n.task.kind()).or_default() += 1;
        if let Task::Transfer { src, .. } = n.task {
            s.bytes_moved += g.buffer(src).bytes();
        }
        for b in n.task.writes() {
            let buf = g.buffer(b);
            let d = buf.device.0 as usize;
            resident[d] += buf.bytes();
            s.peak_bytes[d] = s.peak_bytes[d].max(resident[d]);
            // A buffer nobody reads is freed at once (it was written for nothing).
            if last[b.0 as usize].is_none() {
                resident[d] -= buf.bytes();
            }
        }
        for &b in &frees[i] {
            let buf = &g.buffers()[b];
            resident[buf.device.0 as usize] -= buf.bytes();
        }
    }
    s
}

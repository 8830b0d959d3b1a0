//! The virtual devices' memories: one store of buffers per device, with byte counts, and
//! the reader counts that free a transient buffer once every task reading it is done.
//! Resident buffers (the loaded blocks of computation inputs) are there from the start of a
//! run and never freed.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex, MutexGuard,
        atomic::{AtomicUsize, Ordering},
    },
};

use einsum_core::{
    HostTensor,
    taskgraph::{BufferId, TaskGraph},
};

/// One virtual device's memory: the buffers resident on it, and how many bytes they take.
#[derive(Default)]
struct DeviceMemory {
    buffers: Mutex<HashMap<BufferId, Arc<HostTensor>>>,
    resident: AtomicUsize,
    peak: AtomicUsize,
}

impl DeviceMemory {
    fn buffers(&self) -> MutexGuard<'_, HashMap<BufferId, Arc<HostTensor>>> {
        // Nothing panics while holding the lock, but a poisoned map is still consistent.
        self.buffers.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Every device's memory during one run.
///
/// # Design
/// Buffers are single-assignment and a task runs only after the writers of everything it
/// reads, so the stores need no more than a short lock around insert, lookup and removal;
/// tasks compute on shared [`Arc`] handles outside the lock. A buffer is freed when its
/// last reader finishes. In schedule order that is the task [`TaskGraph::last_readers`]
/// names; run in parallel, independent readers may finish in any order, so each buffer
/// counts its readers down instead, which frees it at the same point when the tasks run one
/// at a time.
pub(crate) struct Memory<'g> {
    graph: &'g TaskGraph,
    devices: Vec<DeviceMemory>,
    /// Per buffer, the number of tasks still to read it.
    readers_left: Vec<AtomicUsize>,
    /// Per buffer, whether it is resident (never freed).
    pinned: Vec<bool>,
}

impl<'g> Memory<'g> {
    /// Memories for every device of `graph` holding the `resident` blocks (per buffer:
    /// `Some` for a loaded resident buffer), counted from the start and never freed.
    pub(crate) fn new(graph: &'g TaskGraph, resident: &[Option<Arc<HostTensor>>]) -> Self {
        let mut readers = vec![0usize; graph.buffers().len()];
        for node in graph.nodes() {
            for b in distinct(node.task.reads()) {
                readers[b.0 as usize] += 1;
            }
        }
        debug_assert!(
            readers.iter().zip(graph.last_readers()).all(|(&r, last)| (r == 0) == last.is_none()),
            "a buffer has readers exactly when it has a last reader"
        );
        let memory = Self {
            graph,
            devices: (0..graph.devices()).map(|_| DeviceMemory::default()).collect(),
            readers_left: readers.into_iter().map(AtomicUsize::new).collect(),
            pinned: resident.iter().map(Option::is_some).collect(),
        };
        for (b, t) in resident.iter().enumerate() {
            if let Some(t) = t {
                let b = BufferId(b as u32);
                let dev = memory.device(b);
                let now = dev.resident.fetch_add(graph.buffer(b).bytes(), Ordering::SeqCst) + graph.buffer(b).bytes();
                dev.peak.fetch_max(now, Ordering::SeqCst);
                dev.buffers().insert(b, Arc::clone(t));
            }
        }
        memory
    }

    fn device(&self, b: BufferId) -> &DeviceMemory {
        &self.devices[self.graph.buffer(b).device.0 as usize]
    }

    /// The resident buffer `b`, from its device's store.
    pub(crate) fn read(&self, b: BufferId) -> Option<Arc<HostTensor>> {
        self.device(b).buffers().get(&b).cloned()
    }

    /// Makes `t` resident as buffer `b` on `b`'s device. A buffer nobody reads is counted
    /// and dropped at once, as [`TaskGraph::stats`] counts it.
    pub(crate) fn write(&self, b: BufferId, t: HostTensor) {
        let dev = self.device(b);
        let bytes = self.graph.buffer(b).bytes();
        let now = dev.resident.fetch_add(bytes, Ordering::SeqCst) + bytes;
        dev.peak.fetch_max(now, Ordering::SeqCst);
        if self.readers_left[b.0 as usize].load(Ordering::SeqCst) == 0 {
            dev.resident.fetch_sub(bytes, Ordering::SeqCst);
        } else {
            dev.buffers().insert(b, Arc::new(t));
        }
    }

    /// Records that a task reading `reads` has finished: frees each transient buffer it was
    /// the last reader of.
    pub(crate) fn release(&self, reads: Vec<BufferId>) {
        for b in distinct(reads) {
            if self.pinned.get(b.0 as usize).copied().unwrap_or(false) {
                continue;
            }
            if self.readers_left[b.0 as usize].fetch_sub(1, Ordering::SeqCst) == 1 {
                let dev = self.device(b);
                if dev.buffers().remove(&b).is_some() {
                    dev.resident.fetch_sub(self.graph.buffer(b).bytes(), Ordering::SeqCst);
                }
            }
        }
    }

    /// The most bytes resident on each device at once so far.
    pub(crate) fn peak_bytes(&self) -> Vec<usize> {
        self.devices.iter().map(|d| d.peak.load(Ordering::SeqCst)).collect()
    }

    /// The bytes resident on each device now.
    pub(crate) fn resident_bytes(&self) -> Vec<usize> {
        self.devices.iter().map(|d| d.resident.load(Ordering::SeqCst)).collect()
    }
}

/// The buffers of `bs`, each once (a task may read one buffer twice).
fn distinct(mut bs: Vec<BufferId>) -> Vec<BufferId> {
    bs.sort();
    bs.dedup();
    bs
}

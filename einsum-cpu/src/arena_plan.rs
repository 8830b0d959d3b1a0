//! The arena plan: one block of memory per device, and an offset in it for every block the
//! backend itself writes (a copying slice or stitch, an aggregation), assigned once, when a
//! graph is prepared, from the task graph's lifetimes.
//!
//! # Design
//! Two blocks may share bytes only if one is dead before the other is written *in every
//! order the scheduler may run the tasks*, not just in schedule order: workers run any
//! ready task, so a block whose last reader is task 10 may still be read while task 11
//! writes, unless task 11 depends (transitively) on task 10. So block `a`, written before
//! `b` in schedule order, may share bytes with `b` only when every task that touches `a`'s
//! memory — its writer and every reader of `a` or of a view of it ([`crate::views`]) —
//! happens before `b`'s writer in the dependency order. The plan computes that order as
//! bitsets of ancestors over those tasks, then places the blocks largest first, each at the
//! lowest offset (cache-line aligned) clear of every placed block it may be live with:
//! greedy offset assignment for interval graphs, here over a partial order.
//!
//! Kernel outputs are not placed: kernels return their own blocks
//! ([`einsum_core::KernelLibrary::run`]); they come from the heap, which keeps freed
//! blocks mapped ([`crate::heap`]). A graph so large that the ancestor bitsets would take
//! more than [`MAX_REACH_BYTES`] gets an empty plan: every block from the heap.

use std::cmp::Reverse;

use einsum_core::{
    LEASE_ALIGN,
    taskgraph::{BufferId, Task, TaskGraph},
};

use crate::views::Views;

/// The most memory the ancestor bitsets of one plan may take (64 MiB).
pub const MAX_REACH_BYTES: usize = 64 << 20;

/// Where one block lives in its device's arena.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot {
    /// Its offset in bytes (a multiple of [`LEASE_ALIGN`]).
    pub offset: usize,
    /// Its size in bytes.
    pub bytes: usize,
}

/// The arena plan of a graph: each device's arena size and each placed block's slot.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ArenaPlan {
    /// Per device, the arena's size in bytes.
    pub device_bytes: Vec<usize>,
    /// Per buffer, its slot in its device's arena (`None`: a view, a resident or kernel
    /// block, or an empty one).
    pub slots: Vec<Option<Slot>>,
    /// Per buffer with a slot, the other buffers whose slots share a byte with it.
    pub(crate) overlaps: Vec<Vec<BufferId>>,
}

impl ArenaPlan {
    /// The same plan for the devices `keep` accepts only: the others get no arena and their
    /// buffers no slot (a process that runs part of the graph builds no block of theirs).
    pub(crate) fn only(mut self, graph: &TaskGraph, keep: impl Fn(usize) -> bool) -> Self {
        for (d, bytes) in self.device_bytes.iter_mut().enumerate() {
            if !keep(d) {
                *bytes = 0;
            }
        }
        for (b, slot) in self.slots.iter_mut().enumerate() {
            if !keep(graph.buffer(BufferId(b as u32)).device.0 as usize) {
                *slot = None;
            }
        }
        self
    }

    /// The plan that places nothing: every block from the heap.
    pub fn empty(graph: &TaskGraph) -> Self {
        let n = graph.buffers().len();
        Self { device_bytes: vec![0; graph.devices()], slots: vec![None; n], overlaps: vec![Vec::new(); n] }
    }

    /// Plans `graph`'s arenas, given its views (see the module docs).
    pub(crate) fn of(graph: &TaskGraph, views: &Views) -> Self {
        let mut plan = Self::empty(graph);
        let placed: Vec<BufferId> =
            (0..graph.buffers().len() as u32).map(BufferId).filter(|&b| placed_here(graph, views, b)).collect();
        if placed.is_empty() {
            return plan;
        }
        let mut index = vec![usize::MAX; graph.buffers().len()];
        for (i, b) in placed.iter().enumerate() {
            index[b.0 as usize] = i;
        }
        let writer: Vec<usize> = placed.iter().map(|&b| graph.writer(b).map_or(0, |t| t.0 as usize)).collect();
        // Every task touching each placed block's memory: its writer and the readers of every
        // buffer viewing it.
        let mut users: Vec<Vec<usize>> = writer.iter().map(|&w| vec![w]).collect();
        for (t, node) in graph.nodes().iter().enumerate() {
            for b in node.task.read_buffers() {
                let i = index[views.root[b.0 as usize].0 as usize];
                if i != usize::MAX && users[i].last() != Some(&t) {
                    users[i].push(t);
                }
            }
        }
        let Some(order) = Order::new(graph, &users) else { return plan };
        let apart = |a: usize, b: usize| {
            let (first, second) = if writer[a] < writer[b] { (a, b) } else { (b, a) };
            users[first].iter().all(|&u| order.precedes(u, writer[second]))
        };

        let aligned = |b: BufferId| graph.buffer(b).bytes().next_multiple_of(LEASE_ALIGN);
        let mut by_size: Vec<usize> = (0..placed.len()).collect();
        by_size.sort_by_key(|&i| (Reverse(aligned(placed[i])), writer[i]));
        // Per device, the blocks placed so far: (offset, end, index).
        let mut on_device: Vec<Vec<(usize, usize, usize)>> = vec![Vec::new(); graph.devices()];
        for i in by_size {
            let b = placed[i];
            let (device, size) = (graph.buffer(b).device.0 as usize, aligned(b));
            let mut busy: Vec<(usize, usize)> =
                on_device[device].iter().filter(|&&(_, _, j)| !apart(i, j)).map(|&(lo, hi, _)| (lo, hi)).collect();
            busy.sort_unstable();
            let mut offset = 0;
            for (lo, hi) in busy {
                if offset + size <= lo {
                    break;
                }
                offset = offset.max(hi);
            }
            on_device[device].push((offset, offset + size, i));
            plan.device_bytes[device] = plan.device_bytes[device].max(offset + size);
            plan.slots[b.0 as usize] = Some(Slot { offset, bytes: graph.buffer(b).bytes() });
        }
        for blocks in &on_device {
            for &(lo, hi, i) in blocks {
                plan.overlaps[placed[i].0 as usize] = blocks
                    .iter()
                    .filter(|&&(l, h, j)| j != i && l < hi && lo < h)
                    .map(|&(_, _, j)| placed[j])
                    .collect();
            }
        }
        plan
    }
}

/// Whether buffer `b` gets a slot: a root of its own memory, not resident, non-empty, and
/// written by the backend itself (a slice, stitch or aggregation that copies).
fn placed_here(graph: &TaskGraph, views: &Views, b: BufferId) -> bool {
    let Some(w) = graph.writer(b) else { return false };
    let backend_writes =
        matches!(graph.nodes()[w.0 as usize].task, Task::Slice { .. } | Task::Stitch { .. } | Task::Aggregate { .. });
    backend_writes && views.is_root(b) && graph.buffer(b).bytes() > 0
}

/// The dependency order restricted to the tasks that touch placed memory: per task, the
/// set of those tasks that finish before it starts (its ancestors), as a bitset.
struct Order {
    /// Per task, its bit in the sets (`usize::MAX` for a task no set holds).
    bit: Vec<usize>,
    words: usize,
    ancestors: Vec<u64>,
}

impl Order {
    /// The order over the tasks of `users`; `None` when the sets would exceed
    /// [`MAX_REACH_BYTES`].
    fn new(graph: &TaskGraph, users: &[Vec<usize>]) -> Option<Self> {
        let n = graph.nodes().len();
        let mut bit = vec![usize::MAX; n];
        let mut next = 0;
        for &t in users.iter().flatten() {
            if bit[t] == usize::MAX {
                bit[t] = next;
                next += 1;
            }
        }
        let words = next.div_ceil(64);
        if n.saturating_mul(words).saturating_mul(8) > MAX_REACH_BYTES {
            return None;
        }
        let mut ancestors = vec![0u64; n * words];
        for (t, node) in graph.nodes().iter().enumerate() {
            let (before, rest) = ancestors.split_at_mut(t * words);
            let mine = &mut rest[..words];
            for d in &node.deps {
                let d = d.0 as usize;
                for (m, a) in mine.iter_mut().zip(&before[d * words..(d + 1) * words]) {
                    *m |= a;
                }
                if bit[d] != usize::MAX {
                    mine[bit[d] / 64] |= 1 << (bit[d] % 64);
                }
            }
        }
        Some(Self { bit, words, ancestors })
    }

    /// Whether task `u` finishes before task `t` starts in every run.
    fn precedes(&self, u: usize, t: usize) -> bool {
        let b = self.bit[u];
        b != usize::MAX && self.ancestors[t * self.words + b / 64] >> (b % 64) & 1 == 1
    }
}

#[cfg(test)]
mod tests {
    use einsum_core::{
        Aggregation, DType, SeededRng, TensorType,
        taskgraph::{Boundary, DeviceId},
    };
    use proptest::prelude::*;

    use super::*;

    fn tt(lo: &[usize], hi: &[usize]) -> TensorType {
        TensorType::new(lo, hi).unwrap()
    }

    fn graph(devices: usize, whole: &TensorType) -> TaskGraph {
        let io = Boundary { name: "x".into(), ty: whole.clone(), dtype: DType::F32 };
        TaskGraph::new(devices, vec![io.clone()], vec![io])
    }

    fn aggregate(g: &mut TaskGraph, srcs: &[BufferId]) -> BufferId {
        let b = g.add_buffer(g.buffer(srcs[0]).device, g.buffer(srcs[0]).ty.clone(), DType::F32);
        g.push(Task::Aggregate { srcs: srcs.to_vec(), dst: b, agg: Aggregation::Sum }, &[], "sum").unwrap();
        b
    }

    /// In a chain, a block dead before the next-but-one is written shares its bytes; two
    /// blocks no dependency orders never do, whatever the schedule order says.
    #[test]
    fn blocks_share_bytes_only_when_ordered() {
        let whole = TensorType::zero_bounded(&[4, 8]);
        let mut g = graph(1, &whole);
        let x = g.add_buffer(DeviceId(0), whole.clone(), DType::F32);
        g.push(Task::Load { input: 0, dst: x }, &[], "load").unwrap();
        let a1 = aggregate(&mut g, &[x, x]);
        let a2 = aggregate(&mut g, &[a1, a1]);
        let a3 = aggregate(&mut g, &[a2, a2]);
        let plan = ArenaPlan::of(&g, &Views::of(&g));
        let slot = |b: BufferId| plan.slots[b.0 as usize].unwrap();
        assert_eq!(slot(a1).offset, slot(a3).offset);
        assert_ne!(slot(a1).offset, slot(a2).offset);
        assert_eq!(plan.device_bytes, vec![256]);
        assert_eq!(plan.overlaps[a1.0 as usize], vec![a3]);

        // b1 and b2 both read x only: b2 comes after b1's reader in schedule order but may
        // run at the same time.
        let mut g = graph(1, &whole);
        let x = g.add_buffer(DeviceId(0), whole.clone(), DType::F32);
        g.push(Task::Load { input: 0, dst: x }, &[], "load").unwrap();
        let b1 = aggregate(&mut g, &[x, x]);
        let k = g.add_buffer(DeviceId(0), whole.clone(), DType::F32);
        g.push(Task::Kernel { kernel: 0, inputs: vec![b1], outputs: vec![k] }, &[], "read b1").unwrap();
        let b2 = aggregate(&mut g, &[x, x]);
        let plan = ArenaPlan::of(&g, &Views::of(&g));
        assert_eq!(plan.slots[k.0 as usize], None, "kernel outputs come from the heap");
        assert_ne!(plan.slots[b1.0 as usize].unwrap().offset, plan.slots[b2.0 as usize].unwrap().offset);
        assert_eq!(plan.device_bytes, vec![256]);
    }

    /// A random graph on 2 devices: loads, then random slices (row ranges, strided boxes),
    /// transfers, kernels, aggregations and stitches of slices of random buffers.
    fn random_graph(seed: u64, steps: usize) -> TaskGraph {
        let whole = TensorType::zero_bounded(&[4, 6]);
        let mut g = graph(2, &whole);
        let mut rng = SeededRng::new(seed);
        let mut pool = Vec::new();
        for d in 0..2 {
            let b = g.add_buffer(DeviceId(d), whole.clone(), DType::F32);
            g.push(Task::Load { input: 0, dst: b }, &[], "load").unwrap();
            pool.push(b);
        }
        let sub_box = |rng: &mut SeededRng, ty: &TensorType| {
            let (lo, hi): (Vec<usize>, Vec<usize>) = ty
                .dims()
                .iter()
                .map(|d| {
                    let lo = d.lo + rng.below(d.len());
                    (lo, lo + 1 + rng.below(d.hi - lo))
                })
                .unzip();
            tt(&lo, &hi)
        };
        for _ in 0..steps {
            let b = pool[rng.below(pool.len())];
            let (device, ty) = (g.buffer(b).device, g.buffer(b).ty.clone());
            let new = match rng.below(5) {
                0 => {
                    let s = g.add_buffer(device, sub_box(&mut rng, &ty), DType::F32);
                    g.push(Task::Slice { src: b, dst: s }, &[], "slice").unwrap();
                    s
                }
                1 => {
                    let t = g.add_buffer(DeviceId(1 - device.0), ty, DType::F32);
                    g.push(Task::Transfer { src: b, dst: t }, &[], "transfer").unwrap();
                    t
                }
                2 => {
                    let k = g.add_buffer(device, ty, DType::F32);
                    g.push(Task::Kernel { kernel: 0, inputs: vec![b], outputs: vec![k] }, &[], "kernel").unwrap();
                    k
                }
                3 => {
                    let same: Vec<BufferId> = pool
                        .iter()
                        .copied()
                        .filter(|&o| g.buffer(o).device == device && g.buffer(o).ty == ty)
                        .collect();
                    let srcs: Vec<BufferId> = (0..2 + rng.below(2)).map(|_| same[rng.below(same.len())]).collect();
                    aggregate(&mut g, &srcs)
                }
                _ => {
                    // Cut `ty` in two along a dimension longer than 1; slice each half out of
                    // a random buffer on the device that holds it.
                    let Some(d) = (0..ty.rank()).find(|&d| ty.dim(d).len() > 1) else { continue };
                    let cut = ty.dim(d).lo + 1 + rng.below(ty.dim(d).len() - 1);
                    let halves = [
                        ty.with_dim(d, einsum_core::Interval::new(ty.dim(d).lo, cut).unwrap()),
                        ty.with_dim(d, einsum_core::Interval::new(cut, ty.dim(d).hi).unwrap()),
                    ];
                    let mut parts = Vec::new();
                    for half in halves {
                        let holders: Vec<BufferId> = pool
                            .iter()
                            .copied()
                            .filter(|&o| g.buffer(o).device == device && half.is_projection_of(&g.buffer(o).ty))
                            .collect();
                        let from = holders[rng.below(holders.len())];
                        let s = g.add_buffer(device, half, DType::F32);
                        g.push(Task::Slice { src: from, dst: s }, &[], "half").unwrap();
                        parts.push(s);
                    }
                    let s = g.add_buffer(device, ty, DType::F32);
                    g.push(Task::Stitch { srcs: parts, dst: s }, &[], "stitch").unwrap();
                    s
                }
            };
            pool.push(new);
        }
        g
    }

    /// Runs `g` in a random order a parallel scheduler may take (any ready task may start,
    /// any running one finish) and fails if a placed block is written while a block sharing
    /// a byte with it is live: written and not yet done with by every task reading it or a
    /// view of it.
    fn check_random_run(g: &TaskGraph, plan: &ArenaPlan, views: &Views, seed: u64) {
        let n = g.nodes().len();
        let nb = g.buffers().len();
        // Per placed block, the tasks that touch its memory.
        let mut users = vec![Vec::new(); nb];
        for (t, node) in g.nodes().iter().enumerate() {
            for &b in node.task.written_buffers() {
                users[b.0 as usize].push(t);
            }
            for &b in node.task.read_buffers() {
                let r = views.root[b.0 as usize].0 as usize;
                if !users[r].contains(&t) {
                    users[r].push(t);
                }
            }
        }
        let mut left = vec![0usize; nb];
        let mut waiting: Vec<usize> = g.nodes().iter().map(|node| node.deps.len()).collect();
        let mut ready: Vec<usize> = (0..n).filter(|&t| waiting[t] == 0).collect();
        let mut running = Vec::new();
        let mut rng = SeededRng::new(seed);
        let overlap = |a: usize, b: usize| match (plan.slots[a], plan.slots[b]) {
            (Some(x), Some(y)) => {
                g.buffers()[a].device == g.buffers()[b].device
                    && x.offset < y.offset + y.bytes
                    && y.offset < x.offset + x.bytes
            }
            _ => false,
        };
        while !ready.is_empty() || !running.is_empty() {
            if !running.is_empty() && (ready.is_empty() || rng.below(2) == 0) {
                let t: usize = running.swap_remove(rng.below(running.len()));
                for b in 0..nb {
                    if users[b].contains(&t) {
                        left[b] -= 1;
                    }
                }
                for (d, node) in g.nodes().iter().enumerate() {
                    if node.deps.iter().any(|x| x.0 as usize == t) {
                        waiting[d] -= 1;
                        if waiting[d] == 0 {
                            ready.push(d);
                        }
                    }
                }
            } else {
                let t = ready.swap_remove(rng.below(ready.len()));
                for &b in g.nodes()[t].task.written_buffers() {
                    let b = b.0 as usize;
                    for live in (0..nb).filter(|&o| left[o] > 0) {
                        assert!(!overlap(b, live), "buffer {b} written over live buffer {live} (task {t})");
                    }
                    left[b] = users[b].len();
                }
                running.push(t);
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

        /// No schedule a parallel run may take writes a placed block over a live one, and
        /// the arena is never larger than the placed blocks side by side.
        #[test]
        fn placed_blocks_never_overwrite_live_ones(seed in any::<u64>(), steps in 1usize..40) {
            let g = random_graph(seed, steps);
            let views = Views::of(&g);
            let plan = ArenaPlan::of(&g, &views);
            for run in 0..4 {
                check_random_run(&g, &plan, &views, seed ^ run);
            }
            for d in 0..g.devices() {
                let side_by_side: usize = plan
                    .slots
                    .iter()
                    .enumerate()
                    .filter(|(b, s)| s.is_some() && g.buffers()[*b].device.0 as usize == d)
                    .map(|(b, _)| g.buffers()[b].bytes().next_multiple_of(LEASE_ALIGN))
                    .sum();
                prop_assert!(plan.device_bytes[d] <= side_by_side);
            }
        }
    }

    /// The random graphs place blocks and reuse bytes (the property above is not vacuous).
    #[test]
    fn random_graphs_reuse_arena_bytes() {
        let (mut placed, mut shared) = (0, 0);
        for seed in 0..20 {
            let g = random_graph(seed, 40);
            let plan = ArenaPlan::of(&g, &Views::of(&g));
            placed += plan.slots.iter().flatten().count();
            shared += plan.overlaps.iter().filter(|o| !o.is_empty()).count();
        }
        assert!(placed > 100 && shared > 20, "{placed} placed, {shared} sharing bytes");
    }
}

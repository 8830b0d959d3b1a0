//! Property: random task graphs — a random 1-3-D tensor loaded in a random tiling over 1 to
//! 8 devices, resharded to another random tiling (slices, transfers, stitches), doubled by
//! kernels, then copied to random devices, transformed again and aggregated with a random
//! ⊕ — give `interpret`'s outputs bit for bit on 1, 2 and 4 threads, and free every buffer;
//! no block planned in an arena ever finds its slot still in use.

mod common;

use common::{ADD, Arith, DOUBLE, assert_bits_eq};
use einsum_core::{
    Aggregation, DType, HostTensor, SeededRng, TensorType, Tiling,
    taskgraph::{Boundary, BufferId, DeviceId, Task, TaskGraph, interpret},
};
use einsum_cpu::CpuBackend;
use proptest::prelude::*;

/// A random grid tiling of `whole`: up to two cuts per dimension.
fn random_tiling(rng: &mut SeededRng, whole: &TensorType) -> Tiling {
    let cuts: Vec<Vec<usize>> =
        whole.shape().iter().map(|&n| (0..rng.below(3)).map(|_| 1 + rng.below(n.max(2) - 1)).collect()).collect();
    Tiling::grid(whole, &cuts).unwrap()
}

struct Builder {
    g: TaskGraph,
    rng: SeededRng,
    devices: usize,
    dtype: DType,
}

impl Builder {
    fn device(&mut self) -> DeviceId {
        DeviceId(self.rng.below(self.devices) as u32)
    }

    fn buffer(&mut self, device: DeviceId, ty: &TensorType) -> BufferId {
        self.g.add_buffer(device, ty.clone(), self.dtype)
    }

    fn push(&mut self, task: Task, label: String) {
        self.g.push(task, &[], label).unwrap();
    }

    /// `b` on `device`: itself, or a copy sent there.
    fn move_to(&mut self, b: BufferId, device: DeviceId) -> BufferId {
        let from = self.g.buffer(b).device;
        if from == device {
            return b;
        }
        let ty = self.g.buffer(b).ty.clone();
        let t = self.buffer(device, &ty);
        self.push(Task::Transfer { src: b, dst: t }, format!("send {} from {from} to {device}", b.0));
        t
    }

    /// A kernel of the same block on the same device: doubling it, or adding it to itself.
    fn double(&mut self, b: BufferId) -> BufferId {
        let (device, ty) = (self.g.buffer(b).device, self.g.buffer(b).ty.clone());
        let out = self.buffer(device, &ty);
        let task = if self.rng.below(2) == 0 {
            Task::Kernel { kernel: DOUBLE, inputs: vec![b], outputs: vec![out] }
        } else {
            Task::Kernel { kernel: ADD, inputs: vec![b, b], outputs: vec![out] }
        };
        self.push(task, format!("double {}", b.0));
        out
    }
}

/// The random graph for (`shape`, `devices`, `dtype`, `seed`). Output `y` is `2x`,
/// resharded; output `z` is, per block of `y`, an aggregation of up to three transformed
/// copies of it on random devices.
fn random_graph(shape: &[usize], devices: usize, dtype: DType, seed: u64) -> TaskGraph {
    let whole = TensorType::zero_bounded(shape);
    let io = |n: &str| Boundary { name: n.into(), ty: whole.clone(), dtype };
    let g = TaskGraph::new(devices, vec![io("x")], vec![io("y"), io("z")]);
    let mut b = Builder { g, rng: SeededRng::new(seed), devices, dtype };

    // Load x in a random tiling, on random devices.
    let first = random_tiling(&mut b.rng, &whole);
    let mut loaded = Vec::new();
    for block in first.blocks() {
        let d = b.device();
        let buf = b.buffer(d, block);
        b.push(Task::Load { input: 0, dst: buf }, format!("load {block} on {d}"));
        loaded.push((block.clone(), buf));
    }

    // Reshard to another random tiling: slice the overlaps, send them, stitch.
    let second = random_tiling(&mut b.rng, &whole);
    for block in second.blocks() {
        let d = b.device();
        let mut pieces = Vec::new();
        for (from, buf) in &loaded {
            let Some(overlap) = from.intersect(block) else { continue };
            if overlap.is_empty() {
                continue;
            }
            let piece = if overlap == *from {
                *buf
            } else {
                let src_device = b.g.buffer(*buf).device;
                let s = b.buffer(src_device, &overlap);
                b.push(Task::Slice { src: *buf, dst: s }, format!("slice {overlap} of {from}"));
                s
            };
            pieces.push(b.move_to(piece, d));
        }
        let here = if pieces.len() == 1 {
            pieces[0]
        } else {
            let s = b.buffer(d, block);
            b.push(Task::Stitch { srcs: pieces, dst: s }, format!("stitch {block}"));
            s
        };
        let y = b.double(here);
        let store_from = b.device();
        let y_stored = b.move_to(y, store_from);
        b.push(Task::Store { output: 0, src: y_stored }, format!("store y {block}"));

        // Partials of z: y itself and up to two transformed copies elsewhere.
        let mut partials = vec![y];
        for _ in 0..b.rng.below(3) {
            let at = b.device();
            let copy = b.move_to(y, at);
            let p = if b.rng.below(3) == 0 { copy } else { b.double(copy) };
            partials.push(p);
        }
        let target = b.device();
        let mut srcs: Vec<BufferId> = partials.into_iter().map(|p| b.move_to(p, target)).collect();
        // Fold in a random order.
        for i in (1..srcs.len()).rev() {
            let j = b.rng.below(i + 1);
            srcs.swap(i, j);
        }
        let z = if srcs.len() == 1 {
            srcs[0]
        } else {
            let agg = [Aggregation::Sum, Aggregation::Max, Aggregation::Min, Aggregation::Product][b.rng.below(4)];
            let z = b.buffer(target, block);
            b.push(Task::Aggregate { srcs, dst: z, agg }, format!("aggregate {block} with {agg}"));
            z
        };
        b.push(Task::Store { output: 1, src: z }, format!("store z {block}"));
    }
    b.g.check_complete().unwrap();
    b.g
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    #[test]
    fn random_graphs_match_the_interpreter(
        shape in prop::collection::vec(1usize..=6, 1..=3),
        devices in 1usize..=8,
        dtype in prop::sample::select(vec![DType::F32, DType::F16, DType::BF16]),
        seed in any::<u64>(),
    ) {
        let g = random_graph(&shape, devices, dtype, seed);
        let x = HostTensor::random(TensorType::zero_bounded(&shape), dtype, seed ^ 0x5eed);
        let want = interpret(&g, &Arith, std::slice::from_ref(&x)).unwrap();
        for threads in [1, 2, 4] {
            let (got, stats) =
                CpuBackend::with_threads(threads).execute_with_stats(&g, &Arith, std::slice::from_ref(&x)).unwrap();
            assert_bits_eq(&got, &want);
            // No planned slot was still read through a tensor when its next block was built.
            prop_assert_eq!(stats.arena_fallbacks, 0);
            prop_assert_eq!(&stats.resident_bytes, &g.stats().resident_bytes);
            if threads == 1 {
                prop_assert_eq!(&stats.peak_bytes, &g.stats().peak_bytes);
            }
        }
    }
}

/// The generator covers every kind of task.
#[test]
fn the_generator_uses_every_task_kind() {
    let mut kinds = std::collections::BTreeSet::new();
    for seed in 0..20 {
        let g = random_graph(&[5, 4], 4, DType::F32, seed);
        kinds.extend(g.stats().tasks.keys().copied());
    }
    let all = ["aggregate", "kernel", "load", "slice", "stitch", "store", "transfer"];
    assert_eq!(kinds.into_iter().collect::<Vec<_>>(), all);
}

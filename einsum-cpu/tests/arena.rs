//! The arenas of a prepared executable: the backend's own blocks (aggregations, copying
//! slices and stitches) are built in planned slots and reused by every run; a slot still
//! read through a tensor a kernel kept is never overwritten; the host never gets a block in
//! an arena.

mod common;

use std::sync::Arc;

use common::{Arith, assert_bits_eq};
use einsum_core::{
    Aggregation, DType, HostTensor, KernelLibrary, TensorType,
    taskgraph::{Boundary, BufferId, DeviceId, Task, TaskGraph, interpret},
};
use einsum_cpu::CpuBackend;

/// Kernel 0 returns its argument itself (a clone sharing its elements), as a kernel that
/// passes a block through may; the others are `Arith`'s.
struct PassThrough;

impl KernelLibrary for PassThrough {
    fn run(
        &self,
        kernel: usize,
        inputs: &[HostTensor],
        outputs: &[(TensorType, DType)],
    ) -> Result<Vec<HostTensor>, String> {
        match kernel {
            0 => Ok(vec![inputs[0].clone()]),
            k => Arith.run(k - 1, inputs, outputs),
        }
    }

    fn name(&self, kernel: usize) -> String {
        format!("kernel {kernel}")
    }
}

fn sum(g: &mut TaskGraph, srcs: &[BufferId], deps: &[einsum_core::taskgraph::TaskId]) -> BufferId {
    let b = g.add_buffer(g.buffer(srcs[0]).device, g.buffer(srcs[0]).ty.clone(), DType::F32);
    g.push(Task::Aggregate { srcs: srcs.to_vec(), dst: b, agg: Aggregation::Sum }, deps, "sum").unwrap();
    b
}

/// `a = x + x` in a slot; a pass-through kernel keeps it as `k`; `b = x + x + x`, ordered
/// after every reader of `a`, is planned over `a`'s slot, but `k` still reads it, so `b` is
/// built on the heap (one fallback per run) and `z = k + b` is right on every run.
#[test]
fn a_slot_a_kernel_kept_is_not_overwritten() {
    let whole = TensorType::zero_bounded(&[4, 16]);
    let io = |n: &str| Boundary { name: n.into(), ty: whole.clone(), dtype: DType::F32 };
    let mut g = TaskGraph::new(1, vec![io("x")], vec![io("z")]);
    let x = g.add_buffer(DeviceId(0), whole.clone(), DType::F32);
    g.push(Task::Load { input: 0, dst: x }, &[], "load").unwrap();
    let a = sum(&mut g, &[x, x], &[]);
    let k = g.add_buffer(DeviceId(0), whole.clone(), DType::F32);
    let keep = g.push(Task::Kernel { kernel: 0, inputs: vec![a], outputs: vec![k] }, &[], "keep a").unwrap();
    let b = sum(&mut g, &[x, x, x], &[keep]);
    let z = sum(&mut g, &[k, b], &[]);
    g.push(Task::Store { output: 0, src: z }, &[], "store").unwrap();
    let x_value = HostTensor::random(whole, DType::F32, 5);
    let want = interpret(&g, &PassThrough, std::slice::from_ref(&x_value)).unwrap();
    for threads in [1, 2] {
        let mut exe = CpuBackend::with_threads(threads).executable(&g, Arc::new(PassThrough)).unwrap();
        let plan = exe.arena_plan().clone();
        assert_eq!(plan.slots[a.0 as usize].map(|s| s.offset), plan.slots[b.0 as usize].map(|s| s.offset));
        exe.load(0, &x_value).unwrap();
        for _ in 0..3 {
            let (got, stats) = exe.run_with_stats().unwrap();
            assert_bits_eq(&got, &want);
            assert_eq!(stats.arena_fallbacks, 1);
            assert!(!got[0].is_lent(), "the host gets its own copy");
            assert_eq!(stats.arena_bytes, plan.device_bytes);
        }
    }
}

/// Four devices' column blocks, doubled and summed on device 0, stitched with the other
/// columns, run three times: every run is bit for bit `interpret`'s, with the arenas on and
/// off, and no block falls back to the heap.
#[test]
fn runs_reuse_the_arenas() {
    let whole = TensorType::zero_bounded(&[8, 6]);
    let io = |n: &str| Boundary { name: n.into(), ty: whole.clone(), dtype: DType::F32 };
    let mut g = TaskGraph::new(4, vec![io("x")], vec![io("y")]);
    let mut parts = Vec::new();
    for d in 0..4 {
        let x = g.add_buffer(DeviceId(d), whole.clone(), DType::F32);
        g.push(Task::Load { input: 0, dst: x }, &[], "load").unwrap();
        // A column block, doubled, sent to device 0.
        let col = TensorType::new(&[0, 0], &[8, 3]).unwrap();
        let s = g.add_buffer(DeviceId(d), col.clone(), DType::F32);
        g.push(Task::Slice { src: x, dst: s }, &[], "columns").unwrap();
        let k = g.add_buffer(DeviceId(d), col.clone(), DType::F32);
        g.push(Task::Kernel { kernel: 1, inputs: vec![s], outputs: vec![k] }, &[], "double").unwrap();
        let on0 = if d == 0 {
            k
        } else {
            let t = g.add_buffer(DeviceId(0), col, DType::F32);
            g.push(Task::Transfer { src: k, dst: t }, &[], "send").unwrap();
            t
        };
        parts.push(on0);
    }
    let total = sum(&mut g, &parts, &[]);
    let rest = g.add_buffer(DeviceId(0), TensorType::new(&[0, 3], &[8, 6]).unwrap(), DType::F32);
    let x0 = BufferId(0);
    g.push(Task::Slice { src: x0, dst: rest }, &[], "other columns").unwrap();
    let y = g.add_buffer(DeviceId(0), whole.clone(), DType::F32);
    g.push(Task::Stitch { srcs: vec![total, rest], dst: y }, &[], "stitch").unwrap();
    g.push(Task::Store { output: 0, src: y }, &[], "store").unwrap();
    let x = HostTensor::random(whole, DType::F32, 9);
    let want = interpret(&g, &PassThrough, std::slice::from_ref(&x)).unwrap();
    for arena in [true, false] {
        let mut exe = CpuBackend::with_threads(2).with_arena(arena).executable(&g, Arc::new(PassThrough)).unwrap();
        exe.load(0, &x).unwrap();
        // The column slices a kernel reads are copied into slots; the aggregation and the
        // stitch (of two roots) too.
        let placed = exe.arena_plan().slots.iter().flatten().count();
        assert_eq!(placed, if arena { 4 + 1 + 1 } else { 0 });
        for _ in 0..3 {
            let (got, stats) = exe.run_with_stats().unwrap();
            assert_bits_eq(&got, &want);
            assert_eq!(stats.arena_fallbacks, 0);
        }
    }
}

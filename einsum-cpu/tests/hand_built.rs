//! Hand-built task graphs (gather, scatter, an all-reduce across four devices, a kernel
//! with two outputs) give `interpret`'s outputs, bit for bit, on any number of threads, and
//! free every transient buffer.

mod common;

use common::{ADD, Arith, COPY_AND_DOUBLE, DOUBLE, assert_bits_eq};
use einsum_core::{
    Aggregation, Backend, DType, HostTensor, TensorType,
    taskgraph::{Boundary, BufferId, DeviceId, Task, TaskGraph, interpret},
};
use einsum_cpu::CpuBackend;

fn tt(lo: &[usize], hi: &[usize]) -> TensorType {
    TensorType::new(lo, hi).unwrap()
}

fn io(name: &str, ty: &TensorType) -> Boundary {
    Boundary { name: name.into(), ty: ty.clone(), dtype: DType::F32 }
}

/// Rows `[2i, 2i+2)` of an 8×3 matrix.
fn quarter(i: usize) -> TensorType {
    tt(&[2 * i, 0], &[2 * i + 2, 3])
}

/// Runs `g` on 1, 2, 4 and 8 threads; each run equals `interpret` bit for bit and leaves
/// only the loaded input blocks resident; on one thread the peak memory is the graph's
/// prediction.
fn check_against_interpret(g: &TaskGraph, inputs: &[HostTensor]) -> Vec<HostTensor> {
    let want = interpret(g, &Arith, inputs).unwrap();
    for threads in [1, 2, 4, 8] {
        let (got, stats) = CpuBackend::with_threads(threads).execute_with_stats(g, &Arith, inputs).unwrap();
        assert_bits_eq(&got, &want);
        assert_eq!(stats.resident_bytes, g.stats().resident_bytes, "{threads} threads free every transient buffer");
        assert_eq!(stats.bytes_moved, g.stats().bytes_moved);
        if threads == 1 {
            assert_eq!(stats.peak_bytes, g.stats().peak_bytes, "one thread runs in schedule order");
        }
    }
    want
}

/// Four devices each load a quarter of `x`, send it to device 0, which stitches the
/// quarters, doubles the whole and stores it.
#[test]
fn gather_to_one_device() {
    let whole = TensorType::zero_bounded(&[8, 3]);
    let mut g = TaskGraph::new(4, vec![io("x", &whole)], vec![io("y", &whole)]);
    let mut parts = Vec::new();
    for i in 0..4 {
        let b = g.add_buffer(DeviceId(i as u32), quarter(i), DType::F32);
        g.push(Task::Load { input: 0, dst: b }, &[], format!("load q{i}")).unwrap();
        if i == 0 {
            parts.push(b);
        } else {
            let b0 = g.add_buffer(DeviceId(0), quarter(i), DType::F32);
            g.push(Task::Transfer { src: b, dst: b0 }, &[], format!("send q{i}")).unwrap();
            parts.push(b0);
        }
    }
    let all = g.add_buffer(DeviceId(0), whole.clone(), DType::F32);
    let y = g.add_buffer(DeviceId(0), whole.clone(), DType::F32);
    g.push(Task::Stitch { srcs: parts, dst: all }, &[], "stitch").unwrap();
    g.push(Task::Kernel { kernel: DOUBLE, inputs: vec![all], outputs: vec![y] }, &[], "double").unwrap();
    g.push(Task::Store { output: 0, src: y }, &[], "store").unwrap();
    g.check_complete().unwrap();

    let x = HostTensor::random(whole.clone(), DType::F32, 1);
    let got = check_against_interpret(&g, std::slice::from_ref(&x));
    let twice: Vec<f32> = x.to_f32().iter().map(|v| 2.0 * v).collect();
    assert_eq!(got[0].to_f32(), twice);
    assert_eq!(g.stats().bytes_moved, 3 * 2 * 3 * 4);
}

/// Device 0 loads all of `x` and sends quarter `i` to device `i`, which doubles it and
/// stores it: the output is tiled across the devices.
#[test]
fn scatter_from_one_device() {
    let whole = TensorType::zero_bounded(&[8, 3]);
    let mut g = TaskGraph::new(4, vec![io("x", &whole)], vec![io("y", &whole)]);
    let x0 = g.add_buffer(DeviceId(0), whole.clone(), DType::F32);
    g.push(Task::Load { input: 0, dst: x0 }, &[], "load x").unwrap();
    for i in 0..4 {
        let d = DeviceId(i as u32);
        let q = g.add_buffer(DeviceId(0), quarter(i), DType::F32);
        g.push(Task::Slice { src: x0, dst: q }, &[], format!("slice q{i}")).unwrap();
        let here = if i == 0 {
            q
        } else {
            let qi = g.add_buffer(d, quarter(i), DType::F32);
            g.push(Task::Transfer { src: q, dst: qi }, &[], format!("send q{i}")).unwrap();
            qi
        };
        let y = g.add_buffer(d, quarter(i), DType::F32);
        g.push(Task::Kernel { kernel: DOUBLE, inputs: vec![here], outputs: vec![y] }, &[], format!("double q{i}"))
            .unwrap();
        g.push(Task::Store { output: 0, src: y }, &[], format!("store q{i}")).unwrap();
    }
    g.check_complete().unwrap();

    let x = HostTensor::random(whole, DType::F32, 2);
    let got = check_against_interpret(&g, std::slice::from_ref(&x));
    let twice: Vec<f32> = x.to_f32().iter().map(|v| 2.0 * v).collect();
    assert_eq!(got[0].to_f32(), twice);
}

/// Device `i` holds the partial `(i + 1) · x`; a reduce-scatter (quarter `j` of every
/// partial goes to device `j`, which sums them in device order) and an all-gather (every
/// device stitches all reduced quarters) leave `10 · x` on every device, each stored as its
/// own output.
fn all_reduce(agg: Aggregation, dtype: DType) -> TaskGraph {
    let n = 4;
    let whole = TensorType::zero_bounded(&[8, 3]);
    let b = |name: String| Boundary { name, ty: whole.clone(), dtype };
    let outputs = (0..n).map(|i| b(format!("y{i}"))).collect();
    let mut g = TaskGraph::new(n, vec![b("x".into())], outputs);
    let dev = |i: usize| DeviceId(i as u32);
    // Partials.
    let mut partial = Vec::new();
    for i in 0..n {
        let x = g.add_buffer(dev(i), whole.clone(), dtype);
        g.push(Task::Load { input: 0, dst: x }, &[], format!("load x on {i}")).unwrap();
        let p = g.add_buffer(dev(i), whole.clone(), dtype);
        let k = Task::Kernel { kernel: ADD, inputs: vec![x; i + 1], outputs: vec![p] };
        g.push(k, &[], format!("partial {i}")).unwrap();
        partial.push(p);
    }
    // Reduce-scatter.
    let mut reduced = Vec::new();
    for j in 0..n {
        let mut pieces = Vec::new();
        for (i, &p) in partial.iter().enumerate() {
            let s = g.add_buffer(dev(i), quarter(j), dtype);
            g.push(Task::Slice { src: p, dst: s }, &[], format!("slice {j} of partial {i}")).unwrap();
            if i == j {
                pieces.push(s);
            } else {
                let t = g.add_buffer(dev(j), quarter(j), dtype);
                g.push(Task::Transfer { src: s, dst: t }, &[], format!("send {j} of partial {i}")).unwrap();
                pieces.push(t);
            }
        }
        let r = g.add_buffer(dev(j), quarter(j), dtype);
        g.push(Task::Aggregate { srcs: pieces, dst: r, agg }, &[], format!("reduce {j}")).unwrap();
        reduced.push(r);
    }
    // All-gather.
    for i in 0..n {
        let parts: Vec<BufferId> = (0..n)
            .map(|j| {
                if i == j {
                    return reduced[j];
                }
                let t = g.add_buffer(dev(i), quarter(j), dtype);
                g.push(Task::Transfer { src: reduced[j], dst: t }, &[], format!("send reduced {j} to {i}")).unwrap();
                t
            })
            .collect();
        let y = g.add_buffer(dev(i), whole.clone(), dtype);
        g.push(Task::Stitch { srcs: parts, dst: y }, &[], format!("gather on {i}")).unwrap();
        g.push(Task::Store { output: i, src: y }, &[], format!("store y{i}")).unwrap();
    }
    g.check_complete().unwrap();
    g
}

#[test]
fn all_reduce_across_four_devices() {
    for (agg, dtype) in [
        (Aggregation::Sum, DType::F32),
        (Aggregation::Sum, DType::F16),
        (Aggregation::Max, DType::BF16),
        (Aggregation::Product, DType::F32),
        (Aggregation::Min, DType::F32),
    ] {
        let g = all_reduce(agg, dtype);
        let x = HostTensor::random(TensorType::zero_bounded(&[8, 3]), dtype, 3);
        let got = check_against_interpret(&g, std::slice::from_ref(&x));
        for y in &got[1..] {
            assert_bits_eq(std::slice::from_ref(y), std::slice::from_ref(&got[0]));
        }
        if (agg, dtype) == (Aggregation::Sum, DType::F32) {
            for (y, x) in got[0].to_f32().iter().zip(x.to_f32()) {
                assert!((y - 10.0 * x).abs() <= 1e-5 * (1.0 + x.abs()), "{y} vs 10 · {x}");
            }
        }
    }
}

/// A kernel that writes two buffers; a buffer nobody reads is freed at once.
#[test]
fn kernel_with_two_outputs_and_an_unread_buffer() {
    let whole = TensorType::zero_bounded(&[5]);
    let mut g = TaskGraph::new(2, vec![io("x", &whole)], vec![io("copy", &whole), io("double", &whole)]);
    let x = g.add_buffer(DeviceId(1), whole.clone(), DType::F32);
    let c = g.add_buffer(DeviceId(1), whole.clone(), DType::F32);
    let d = g.add_buffer(DeviceId(1), whole.clone(), DType::F32);
    let d0 = g.add_buffer(DeviceId(0), whole.clone(), DType::F32);
    let unused = g.add_buffer(DeviceId(1), whole.clone(), DType::F32);
    g.push(Task::Load { input: 0, dst: x }, &[], "load").unwrap();
    g.push(Task::Kernel { kernel: COPY_AND_DOUBLE, inputs: vec![x], outputs: vec![c, d] }, &[], "both").unwrap();
    g.push(Task::Kernel { kernel: DOUBLE, inputs: vec![c], outputs: vec![unused] }, &[], "wasted").unwrap();
    g.push(Task::Transfer { src: d, dst: d0 }, &[], "send").unwrap();
    g.push(Task::Store { output: 0, src: c }, &[], "store copy").unwrap();
    g.push(Task::Store { output: 1, src: d0 }, &[], "store double").unwrap();
    let x = HostTensor::random(whole, DType::F32, 4);
    let got = check_against_interpret(&g, std::slice::from_ref(&x));
    assert_eq!(got[0], x);
}

#[test]
fn an_empty_graph_returns_nothing() {
    let g = TaskGraph::new(3, Vec::new(), Vec::new());
    assert_eq!(CpuBackend::new().execute(&g, &Arith, &[]).unwrap(), Vec::<HostTensor>::new());
}

#[test]
fn construction() {
    assert_eq!(CpuBackend::new().name(), "cpu");
    assert!(CpuBackend::new().threads() >= 1);
    assert_eq!(CpuBackend::with_threads(0).threads(), 1);
    assert_eq!(CpuBackend::with_threads(3).threads(), 3);
    // Usable as a trait object.
    let b: Box<dyn Backend> = Box::new(CpuBackend::default());
    assert_eq!(b.name(), "cpu");
}

//! A prepared executable: inputs loaded once and kept resident, runs repeated; its memory is
//! the graph's model (resident blocks plus the transient peak).

mod common;

use std::sync::Arc;

use common::{ADD, Arith, DOUBLE, assert_bits_eq};
use einsum_core::{
    Backend, BackendError, DType, HostTensor, Prepared, TensorType,
    taskgraph::{Boundary, DeviceId, Task, TaskGraph, interpret},
};
use einsum_cpu::CpuBackend;

fn tt(lo: &[usize], hi: &[usize]) -> TensorType {
    TensorType::new(lo, hi).unwrap()
}

/// Device 0 loads `w` and reads it twice (`b = w + 2w`); device 1 loads `x` in two halves
/// and sends them to device 0, which stitches them and stores `y = b + x`.
fn graph() -> TaskGraph {
    let whole = TensorType::zero_bounded(&[4, 2]);
    let io = |n: &str| Boundary { name: n.into(), ty: whole.clone(), dtype: DType::F32 };
    let mut g = TaskGraph::new(2, vec![io("w"), io("x")], vec![io("y")]);
    let (d0, d1) = (DeviceId(0), DeviceId(1));
    let w = g.add_buffer(d0, whole.clone(), DType::F32);
    g.push(Task::Load { input: 0, dst: w }, &[], "load w").unwrap();
    let a = g.add_buffer(d0, whole.clone(), DType::F32);
    g.push(Task::Kernel { kernel: DOUBLE, inputs: vec![w], outputs: vec![a] }, &[], "a = 2w").unwrap();
    let b = g.add_buffer(d0, whole.clone(), DType::F32);
    g.push(Task::Kernel { kernel: ADD, inputs: vec![w, a], outputs: vec![b] }, &[], "b = w + a").unwrap();
    let mut halves = Vec::new();
    for (i, half) in [tt(&[0, 0], &[2, 2]), tt(&[2, 0], &[4, 2])].into_iter().enumerate() {
        let x = g.add_buffer(d1, half.clone(), DType::F32);
        g.push(Task::Load { input: 1, dst: x }, &[], format!("load x{i}")).unwrap();
        let x0 = g.add_buffer(d0, half, DType::F32);
        g.push(Task::Transfer { src: x, dst: x0 }, &[], format!("send x{i}")).unwrap();
        halves.push(x0);
    }
    let c = g.add_buffer(d0, whole.clone(), DType::F32);
    g.push(Task::Stitch { srcs: halves, dst: c }, &[], "stitch x").unwrap();
    let y = g.add_buffer(d0, whole, DType::F32);
    g.push(Task::Kernel { kernel: ADD, inputs: vec![b, c], outputs: vec![y] }, &[], "y = b + x").unwrap();
    g.push(Task::Store { output: 0, src: y }, &[], "store y").unwrap();
    g
}

fn values(seed: u64) -> Vec<HostTensor> {
    (0..2).map(|i| HostTensor::random(TensorType::zero_bounded(&[4, 2]), DType::F32, seed + i)).collect()
}

#[test]
fn runs_repeat_on_the_resident_inputs() {
    let g = graph();
    let stats = g.stats();
    // w (32 B) on device 0, x (32 B) on device 1.
    assert_eq!(stats.resident_bytes, vec![32, 32]);
    let inputs = values(1);
    let want = interpret(&g, &Arith, &inputs).unwrap();
    for threads in [1, 2, 4] {
        let mut exe = CpuBackend::with_threads(threads).executable(&g, Arc::new(Arith)).unwrap();
        for (i, v) in inputs.iter().enumerate() {
            exe.load(i, v).unwrap();
        }
        for _ in 0..2 {
            let (got, run) = exe.run_with_stats().unwrap();
            assert_bits_eq(&got, &want);
            assert_eq!(run.resident_bytes, stats.resident_bytes, "only the loaded blocks stay");
            assert_eq!(run.tasks, g.nodes().len() - 3, "the three loads are not run again");
            assert_eq!(run.bytes_moved, stats.bytes_moved);
            if threads == 1 {
                assert_eq!(run.peak_bytes, stats.peak_bytes, "one thread runs in schedule order");
            }
        }
        // Loading a new value replaces the resident blocks.
        let other = values(7);
        exe.load(1, &other[1]).unwrap();
        let want = interpret(&g, &Arith, &[inputs[0].clone(), other[1].clone()]).unwrap();
        assert_bits_eq(&exe.run_with_stats().unwrap().0, &want);
    }
}

#[test]
fn an_input_never_loaded_is_a_typed_error() {
    let g = graph();
    let mut exe = CpuBackend::with_threads(2).executable(&g, Arc::new(Arith)).unwrap();
    exe.load(0, &values(1)[0]).unwrap();
    let err = exe.run_with_stats().unwrap_err();
    assert_eq!(err, BackendError::NotLoaded { index: 1, name: "x".into() });
    assert!(err.to_string().contains("`x`"), "{err}");
}

#[test]
fn a_value_of_the_wrong_type_is_refused_on_load() {
    let g = graph();
    let mut exe = CpuBackend::with_threads(2).executable(&g, Arc::new(Arith)).unwrap();
    let wrong = HostTensor::random(TensorType::zero_bounded(&[4, 3]), DType::F32, 1);
    let err = exe.load(1, &wrong).unwrap_err();
    assert!(matches!(&err, BackendError::Input { index: 1, name, .. } if name == "x"), "{err:?}");
    let f16 = HostTensor::random(TensorType::zero_bounded(&[4, 2]), DType::F16, 1);
    assert!(matches!(exe.load(0, &f16).unwrap_err(), BackendError::Input { index: 0, .. }));
    assert!(matches!(exe.load(2, &f16).unwrap_err(), BackendError::Input { index: 2, .. }));
    // Nothing was loaded.
    assert!(matches!(exe.run_with_stats().unwrap_err(), BackendError::NotLoaded { index: 0, .. }));
}

/// Through the core contract (`Box<dyn Backend>`, `Box<dyn Prepared>`), as a driver holds
/// it: the same outputs as `interpret`, runs repeated on inputs loaded once.
#[test]
fn the_core_contract_prepares_loads_and_runs() {
    let g = graph();
    let inputs = values(3);
    let want = interpret(&g, &Arith, &inputs).unwrap();
    let backend: Box<dyn Backend> = Box::new(CpuBackend::with_threads(2));
    assert_eq!(backend.name(), "cpu");
    assert!(backend.check_available().is_ok());
    assert_eq!(backend.host_bytes(&g), g.stats().peak_bytes.iter().sum::<usize>());
    let mut exe: Box<dyn Prepared> = backend.prepare(&g, Arc::new(Arith)).unwrap();
    assert!(matches!(exe.run().unwrap_err(), BackendError::NotLoaded { index: 0, .. }));
    exe.load_all(&inputs).unwrap();
    for _ in 0..2 {
        assert_bits_eq(&exe.run().unwrap(), &want);
    }
    assert_bits_eq(&backend.execute(&g, &Arith, &inputs).unwrap(), &want);
}

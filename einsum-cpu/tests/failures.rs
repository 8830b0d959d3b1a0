//! Failures are clear errors naming the task, never a hang and never partial results: a
//! kernel error, a panicking kernel, a kernel returning the wrong type, wrong and missing
//! inputs.

mod common;

use common::{Arith, DOUBLE, FAIL, PANIC, PANIC_STRING, WRONG_TYPE};
use einsum_core::{
    Backend, BackendError, DType, HostTensor, TensorType,
    taskgraph::{Boundary, DeviceId, Task, TaskGraph, TaskId, interpret},
};
use einsum_cpu::CpuBackend;

/// Eight devices each load `x` and run a chain of four doublings; on device `bad_device`
/// the third kernel of the chain is `bad_kernel`. Every device stores its result as its
/// own output. Returns the graph and the id of the bad task (`u32::MAX` when there is none).
fn chains(bad_device: usize, bad_kernel: usize) -> (TaskGraph, TaskId) {
    let whole = TensorType::zero_bounded(&[4, 2]);
    let b = |name: String| Boundary { name, ty: whole.clone(), dtype: DType::F32 };
    let mut g = TaskGraph::new(8, vec![b("x".into())], (0..8).map(|d| b(format!("y{d}"))).collect());
    let mut bad = None;
    for d in 0..8 {
        let dev = DeviceId(d as u32);
        let mut cur = g.add_buffer(dev, whole.clone(), DType::F32);
        g.push(Task::Load { input: 0, dst: cur }, &[], format!("load on {d}")).unwrap();
        for step in 0..4 {
            let next = g.add_buffer(dev, whole.clone(), DType::F32);
            let kernel = if d == bad_device && step == 2 { bad_kernel } else { DOUBLE };
            let id = g
                .push(
                    Task::Kernel { kernel, inputs: vec![cur], outputs: vec![next] },
                    &[],
                    format!("step {step} on {d}"),
                )
                .unwrap();
            if kernel == bad_kernel {
                bad = Some(id);
            }
            cur = next;
        }
        g.push(Task::Store { output: d, src: cur }, &[], format!("store on {d}")).unwrap();
    }
    (g, bad.unwrap_or(TaskId(u32::MAX)))
}

fn x() -> HostTensor {
    HostTensor::random(TensorType::zero_bounded(&[4, 2]), DType::F32, 11)
}

#[test]
fn a_kernel_error_names_the_task() {
    for (device, threads) in [(0, 1), (5, 2), (7, 4), (3, 8)] {
        let (g, bad) = chains(device, FAIL);
        let err = CpuBackend::with_threads(threads).execute(&g, &Arith, &[x()]).unwrap_err();
        let label = format!("step 2 on {device}");
        assert!(
            matches!(&err, BackendError::Task { task, label: l, reason } if *task == bad && *l == label && reason.contains("fail: deliberate failure")),
            "{err:?}"
        );
        assert_eq!(err, interpret(&g, &Arith, &[x()]).unwrap_err());
        let text = err.to_string();
        assert!(text.contains(&format!("task {}", bad.0)) && text.contains(&label), "{text}");
    }
}

#[test]
fn a_panicking_kernel_is_reported_and_the_process_is_fine() {
    for (kernel, message) in [(PANIC, "deliberate panic in a kernel"), (PANIC_STRING, "deliberate panic number 42")] {
        for threads in [1, 3, 8] {
            let (g, bad) = chains(6, kernel);
            let err = CpuBackend::with_threads(threads).execute(&g, &Arith, &[x()]).unwrap_err();
            assert_eq!(
                err,
                BackendError::Panic { task: bad, label: "step 2 on 6".into(), message: message.into() },
                "{threads} threads"
            );
        }
    }
    // The backend (and the process) still work afterwards.
    let (g, _) = chains(usize::MAX, FAIL);
    let got = CpuBackend::with_threads(4).execute(&g, &Arith, &[x()]).unwrap();
    assert_eq!(got, interpret(&g, &Arith, &[x()]).unwrap());
}

#[test]
fn a_kernel_returning_the_wrong_type_is_refused() {
    let (g, bad) = chains(1, WRONG_TYPE);
    let err = CpuBackend::with_threads(2).execute(&g, &Arith, &[x()]).unwrap_err();
    match &err {
        BackendError::Task { task, reason, .. } => {
            assert_eq!(*task, bad);
            assert!(reason.contains("wrong-type") && reason.contains("output 0 is"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(err, interpret(&g, &Arith, &[x()]).unwrap_err());
}

#[test]
fn an_unknown_kernel_is_an_error() {
    let (g, _) = chains(2, 99);
    let err = CpuBackend::new().execute(&g, &Arith, &[x()]).unwrap_err();
    assert!(err.to_string().contains("no kernel 99"), "{err}");
}

#[test]
fn wrong_inputs_are_refused_before_running() {
    let (g, _) = chains(usize::MAX, FAIL);
    let backend = CpuBackend::with_threads(2);
    let wrong_shape = HostTensor::random(TensorType::zero_bounded(&[4, 3]), DType::F32, 1);
    let err = backend.execute(&g, &Arith, &[wrong_shape]).unwrap_err();
    assert!(
        matches!(&err, BackendError::Input { index: 0, name, reason } if name == "x" && reason.contains("expected")),
        "{err:?}"
    );
    let wrong_dtype = HostTensor::random(TensorType::zero_bounded(&[4, 2]), DType::F16, 1);
    assert!(matches!(backend.execute(&g, &Arith, &[wrong_dtype]).unwrap_err(), BackendError::Input { index: 0, .. }));
    let missing = backend.execute(&g, &Arith, &[]).unwrap_err();
    assert!(
        matches!(&missing, BackendError::Input { index: 0, name, reason } if name == "x" && reason.contains("0 inputs given")),
        "{missing:?}"
    );
    let extra = backend.execute(&g, &Arith, &[x(), x()]).unwrap_err();
    assert!(matches!(extra, BackendError::Input { index: 1, .. }), "{extra:?}");
}

/// A graph whose stored blocks do not cover its output: the run fails at the end rather
/// than returning a partial tensor.
#[test]
fn an_output_not_covered_is_an_error() {
    let whole = TensorType::zero_bounded(&[4]);
    let io = |n: &str| Boundary { name: n.into(), ty: whole.clone(), dtype: DType::F32 };
    let mut g = TaskGraph::new(1, vec![io("x")], vec![io("y")]);
    let half = g.add_buffer(DeviceId(0), TensorType::new(&[0], &[2]).unwrap(), DType::F32);
    g.push(Task::Load { input: 0, dst: half }, &[], "load half").unwrap();
    g.push(Task::Store { output: 0, src: half }, &[], "store half").unwrap();
    let x = HostTensor::random(whole, DType::F32, 5);
    let err = CpuBackend::with_threads(2).execute(&g, &Arith, std::slice::from_ref(&x)).unwrap_err();
    assert!(matches!(&err, BackendError::Task { label, .. } if label.contains("output `y`")), "{err:?}");
    assert_eq!(err, interpret(&g, &Arith, &[x]).unwrap_err());
}

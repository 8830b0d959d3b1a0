//! The reference executor: runs a task graph's tasks one at a time, in schedule order, on
//! the host. Slow and simple; backends are checked against it.

use crate::{BackendError, HostTensor, KernelLibrary, TensorType};

use super::{Task, TaskGraph, TaskId};

/// Runs `graph` sequentially and returns its saved outputs; keeps every resident (`Load`)
/// buffer and frees each transient one after its last reader, as a backend would.
pub fn interpret(
    graph: &TaskGraph,
    kernels: &dyn KernelLibrary,
    inputs: &[HostTensor],
) -> Result<Vec<HostTensor>, BackendError> {
    check_inputs(graph, inputs)?;
    let last = graph.last_readers();
    let mut store: Vec<Option<HostTensor>> = vec![None; graph.buffers().len()];
    let mut outputs: Vec<Vec<HostTensor>> = vec![Vec::new(); graph.outputs().len()];
    for (i, node) in graph.nodes().iter().enumerate() {
        let id = TaskId(i as u32);
        let fail = |reason: String| BackendError::Task { task: id, label: node.label.clone(), reason };
        let get = |store: &[Option<HostTensor>], b: super::BufferId| -> Result<HostTensor, BackendError> {
            store[b.0 as usize].clone().ok_or_else(|| fail(format!("buffer {} is not resident", b.0)))
        };
        let written: Vec<HostTensor> = match &node.task {
            Task::Load { input, dst } => {
                vec![inputs[*input].slice(&graph.buffer(*dst).ty).map_err(|e| fail(e.to_string()))?]
            }
            Task::Slice { src, dst } => {
                vec![get(&store, *src)?.slice(&graph.buffer(*dst).ty).map_err(|e| fail(e.to_string()))?]
            }
            Task::Transfer { src, .. } => vec![get(&store, *src)?],
            Task::Aggregate { srcs, agg, .. } => {
                let mut acc = get(&store, srcs[0])?;
                for s in &srcs[1..] {
                    acc = acc.aggregate(&get(&store, *s)?, *agg).map_err(|e| fail(e.to_string()))?;
                }
                vec![acc]
            }
            Task::Stitch { srcs, dst } => {
                let parts = srcs.iter().map(|s| get(&store, *s)).collect::<Result<Vec<_>, _>>()?;
                vec![HostTensor::stitch(&graph.buffer(*dst).ty, &parts).map_err(|e| fail(e.to_string()))?]
            }
            Task::Kernel { kernel, inputs: args, outputs: outs } => {
                let args = args.iter().map(|s| get(&store, *s)).collect::<Result<Vec<_>, _>>()?;
                let want: Vec<(TensorType, crate::DType)> =
                    outs.iter().map(|b| (graph.buffer(*b).ty.clone(), graph.buffer(*b).dtype)).collect();
                let got =
                    kernels.run(*kernel, &args, &want).map_err(|e| fail(format!("{}: {e}", kernels.name(*kernel))))?;
                check_kernel_outputs(&got, &want).map_err(|e| fail(format!("{}: {e}", kernels.name(*kernel))))?;
                got
            }
            Task::Store { output, src } => {
                outputs[*output].push(get(&store, *src)?);
                Vec::new()
            }
        };
        for (b, t) in node.task.writes().into_iter().zip(written) {
            store[b.0 as usize] = Some(t);
        }
        for b in node.task.reads() {
            if last[b.0 as usize] == Some(id) && !graph.is_resident(b) {
                store[b.0 as usize] = None;
            }
        }
    }
    stitch_outputs(graph, outputs)
}

/// Checks the computation inputs against the graph's declared inputs.
pub fn check_inputs(graph: &TaskGraph, inputs: &[HostTensor]) -> Result<(), BackendError> {
    if inputs.len() != graph.inputs().len() {
        let (index, name) = match graph.inputs().get(inputs.len()) {
            Some(b) => (inputs.len(), b.name.clone()),
            None => (graph.inputs().len(), "(extra)".into()),
        };
        return Err(BackendError::Input {
            index,
            name,
            reason: format!("{} inputs given, the graph takes {}", inputs.len(), graph.inputs().len()),
        });
    }
    for (index, (t, b)) in inputs.iter().zip(graph.inputs()).enumerate() {
        if *t.ty() != b.ty || t.dtype() != b.dtype {
            return Err(BackendError::Input {
                index,
                name: b.name.clone(),
                reason: format!("expected {} {}, got {} {}", b.ty, b.dtype, t.ty(), t.dtype()),
            });
        }
    }
    Ok(())
}

/// Checks that a kernel returned blocks of exactly the requested types and dtypes.
pub fn check_kernel_outputs(got: &[HostTensor], want: &[(TensorType, crate::DType)]) -> Result<(), String> {
    if got.len() != want.len() {
        return Err(format!("returned {} outputs, expected {}", got.len(), want.len()));
    }
    for (j, (g, (ty, dtype))) in got.iter().zip(want).enumerate() {
        if g.ty() != ty || g.dtype() != *dtype {
            return Err(format!("output {j} is {} {}, expected {ty} {dtype}", g.ty(), g.dtype()));
        }
    }
    Ok(())
}

/// Stitches the stored blocks of every saved output into the whole tensor.
pub fn stitch_outputs(graph: &TaskGraph, outputs: Vec<Vec<HostTensor>>) -> Result<Vec<HostTensor>, BackendError> {
    graph
        .outputs()
        .iter()
        .zip(outputs)
        .enumerate()
        .map(|(o, (b, parts))| {
            HostTensor::stitch(&b.ty, &parts).map_err(|e| BackendError::Task {
                task: TaskId(graph.nodes().len() as u32),
                label: format!("output `{}`", b.name),
                reason: format!("stored blocks of output {o}: {e}"),
            })
        })
        .collect()
}

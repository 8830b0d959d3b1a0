//! [`CudaExecutable`]: a compiled computation prepared once on the GPUs (kernels compiled,
//! pools allocated, constants uploaded, the whole run captured as a CUDA graph) and run any
//! number of times.

use cudarc::cublas::CudaBlas;
use cudarc::driver::CudaGraph;
use einsum_core::taskgraph::{Boundary, TaskId};
use einsum_core::{BackendError, DType, HostTensor};
use einsum_exprog::Compiled;
use einsum_joinagg::Computation;

use crate::availability::check_cuda;
use crate::device::{DeviceMemory, Gpu, HostMemory, enable_peer_access};
use crate::executor::{CUBLAS_WORKSPACE_BYTES, Runtime, bind_workspace, label};
use crate::graph_capture::capture;
use crate::lower::lower;
use crate::schedule::{Schedule, task_device};

/// How to prepare a [`CudaExecutable`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CudaOptions {
    /// Issue the tasks stream-ordered on every run instead of capturing them once as a CUDA
    /// graph (for debugging: errors surface at the task that caused them).
    pub eager: bool,
    /// Use at most this many GPUs (`None`: every GPU the driver sees). Virtual devices map
    /// onto the GPUs used round-robin.
    pub max_gpus: Option<usize>,
}

/// What preparing decided, for reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CudaSummary {
    /// GPUs used.
    pub gpus: usize,
    /// Virtual devices (streams).
    pub devices: usize,
    /// Pool bytes per GPU.
    pub pool_bytes: Vec<usize>,
    /// Whether runs replay a captured graph.
    pub captured: bool,
}

/// A computation prepared on the GPUs; see the module docs.
///
/// # Design
/// The CPU backend is a stateless [`einsum_core::Backend`]; a CUDA graph must be captured
/// once and replayed, so this is a prepared object instead: [`CudaExecutable::prepare`] does
/// everything that does not depend on input values, [`CudaExecutable::run`] copies inputs
/// into pinned memory, launches, and copies outputs back. The type exists whether or not a
/// GPU is present; without one, `prepare` returns [`BackendError::Unavailable`].
pub struct CudaExecutable {
    // Field order is drop order: the graph and handles go before the memory and contexts.
    graph: Option<CudaGraph>,
    rt: Runtime,
    inputs: Vec<Boundary>,
    outputs: Vec<Boundary>,
    summary: CudaSummary,
}

fn task_error(labels: &[String], t: usize, reason: String) -> BackendError {
    BackendError::Task { task: TaskId(t as u32), label: label(labels, t), reason }
}

fn setup(reason: String) -> BackendError {
    BackendError::Unavailable(format!("CUDA setup failed: {reason}"))
}

impl CudaExecutable {
    /// Prepares `compiled` (the physical compilation of `comp`) on the GPUs. Fails with
    /// [`BackendError::Unavailable`] when there is no usable CUDA driver ("no CUDA driver
    /// found ..."), with [`BackendError::Task`] naming the kernel task whose operator the
    /// backend has no kernel for, and with `Unavailable("CUDA setup failed: ...")` when a
    /// driver, NVRTC or cuBLAS call fails.
    pub fn prepare(comp: &Computation, compiled: &Compiled, options: &CudaOptions) -> Result<Self, BackendError> {
        let graph = &compiled.graph;
        let labels: Vec<String> = graph.nodes().iter().map(|n| n.label.clone()).collect();
        // The driver check comes first, so a machine without a GPU says so before anything else.
        let available = check_cuda()?;
        let lowered = lower(graph, comp, &compiled.kernels).map_err(|(t, e)| task_error(&labels, t, e))?;
        let gpus = options.max_gpus.unwrap_or(available).clamp(1, available);
        let schedule = Schedule::new(graph, gpus.min(graph.devices().max(1)), &lowered.scratch);
        let gpus: Vec<Gpu> = (0..schedule.gpus)
            .map(|g| Gpu::open(g, &lowered.head_dims, schedule.pool_bytes[g]))
            .collect::<Result<_, _>>()
            .map_err(setup)?;
        enable_peer_access(&gpus);
        let mut streams = Vec::new();
        let mut blas = Vec::new();
        let mut blas_workspaces = Vec::new();
        for v in 0..graph.devices().max(1) {
            let gpu = &gpus[schedule.gpu_of_device.get(v).copied().unwrap_or(0)];
            let s = gpu.ctx.new_stream().map_err(|e| setup(format!("creating a stream: {e}")))?;
            let handle = CudaBlas::new(s.clone()).map_err(|e| setup(format!("creating a cuBLAS handle: {e:?}")))?;
            let workspace = DeviceMemory::new(&gpu.ctx, CUBLAS_WORKSPACE_BYTES).map_err(setup)?;
            bind_workspace(&handle, &workspace).map_err(setup)?;
            blas.push(handle);
            blas_workspaces.push(workspace);
            streams.push(s);
        }
        let mut events = Vec::new();
        for (t, n) in graph.nodes().iter().enumerate() {
            events.push(if schedule.record[t] {
                let dev = task_device(graph, &n.task);
                let ctx = &gpus[schedule.gpu_of_device[dev]].ctx;
                Some(ctx.new_event(None).map_err(|e| setup(format!("creating an event: {e}")))?)
            } else {
                None
            });
        }
        let bytes = |b: &Boundary| b.ty.volume() * b.dtype.size_bytes();
        let ctx0 = gpus[0].ctx.clone();
        let host_inputs: Vec<HostMemory> =
            graph.inputs().iter().map(|b| HostMemory::new(&ctx0, bytes(b))).collect::<Result<_, _>>().map_err(setup)?;
        let host_outputs: Vec<HostMemory> = graph
            .outputs()
            .iter()
            .map(|b| HostMemory::new(&ctx0, bytes(b)))
            .collect::<Result<_, _>>()
            .map_err(setup)?;
        let consts: Vec<DeviceMemory> = lowered
            .consts
            .iter()
            .map(|(dev, data)| DeviceMemory::from_bytes(&gpus[schedule.gpu_of_device[*dev]].ctx, &data.bytes()))
            .collect::<Result<_, _>>()
            .map_err(setup)?;
        let summary = CudaSummary {
            gpus: schedule.gpus,
            devices: graph.devices(),
            pool_bytes: schedule.pool_bytes.clone(),
            captured: !options.eager,
        };
        let rt = Runtime {
            gpus,
            streams,
            blas,
            blas_workspaces,
            events,
            host_inputs,
            host_outputs,
            consts,
            lowered,
            schedule,
            buffer_device: graph.buffers().iter().map(|b| b.device.0 as usize).collect(),
            labels,
        };
        let captured = if options.eager {
            None
        } else {
            Some(capture(&rt).map_err(|(t, e)| match t {
                Some(t) => task_error(&rt.labels, t, e),
                None => setup(e),
            })?)
        };
        Ok(CudaExecutable {
            graph: captured,
            rt,
            inputs: graph.inputs().to_vec(),
            outputs: graph.outputs().to_vec(),
            summary,
        })
    }

    /// What preparing decided.
    pub fn summary(&self) -> &CudaSummary {
        &self.summary
    }

    /// Runs once: `inputs` are the whole computation inputs in the task graph's order; returns
    /// the whole saved outputs in its order.
    pub fn run(&mut self, inputs: &[HostTensor]) -> Result<Vec<HostTensor>, BackendError> {
        if inputs.len() != self.inputs.len() {
            return Err(BackendError::Input {
                index: inputs.len().min(self.inputs.len()),
                name: self.inputs.get(inputs.len()).map_or_else(String::new, |b| b.name.clone()),
                reason: format!("{} inputs given, the graph has {}", inputs.len(), self.inputs.len()),
            });
        }
        for (i, (x, b)) in inputs.iter().zip(&self.inputs).enumerate() {
            if *x.ty() != b.ty || x.dtype() != b.dtype {
                return Err(BackendError::Input {
                    index: i,
                    name: b.name.clone(),
                    reason: format!("expected {} {}, got {} {}", b.ty, b.dtype, x.ty(), x.dtype()),
                });
            }
            self.rt.host_inputs[i].write(&to_bytes(x));
        }
        match &self.graph {
            Some(g) => {
                g.launch().map_err(|e| setup(format!("launching the CUDA graph: {e}")))?;
            }
            None => self.rt.issue().map_err(|(t, e)| task_error(&self.rt.labels, t, e))?,
        }
        self.rt.synchronize().map_err(|e| BackendError::Unavailable(format!("CUDA run failed: {e}")))?;
        self.outputs
            .iter()
            .zip(&self.rt.host_outputs)
            .map(|(b, m)| from_bytes(b, &m.read()))
            .collect::<Result<_, _>>()
            .map_err(|e| BackendError::Unavailable(format!("reading an output back: {e}")))
    }
}

/// The raw storage bytes of a host tensor (f16/bf16 as their bit patterns).
pub fn to_bytes(x: &HostTensor) -> Vec<u8> {
    let v = x.to_f32();
    match x.dtype() {
        DType::F32 => v.iter().flat_map(|f| f.to_ne_bytes()).collect(),
        DType::F16 => v.iter().flat_map(|f| half::f16::from_f32(*f).to_bits().to_ne_bytes()).collect(),
        DType::BF16 => v.iter().flat_map(|f| half::bf16::from_f32(*f).to_bits().to_ne_bytes()).collect(),
    }
}

/// A whole tensor of `b`'s type from its raw storage bytes.
pub fn from_bytes(b: &Boundary, bytes: &[u8]) -> Result<HostTensor, String> {
    let v: Vec<f32> = match b.dtype {
        DType::F32 => bytes.chunks_exact(4).map(|c| f32::from_ne_bytes([c[0], c[1], c[2], c[3]])).collect(),
        DType::F16 => {
            bytes.chunks_exact(2).map(|c| half::f16::from_bits(u16::from_ne_bytes([c[0], c[1]])).to_f32()).collect()
        }
        DType::BF16 => {
            bytes.chunks_exact(2).map(|c| half::bf16::from_bits(u16::from_ne_bytes([c[0], c[1]])).to_f32()).collect()
        }
    };
    HostTensor::from_f32(b.ty.clone(), b.dtype, v).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use einsum_core::TensorType;

    use super::*;

    #[test]
    fn storage_bytes_round_trip_in_every_dtype() {
        for dtype in [DType::F32, DType::F16, DType::BF16] {
            let ty = TensorType::zero_bounded(&[3, 5]);
            let x = HostTensor::random(ty.clone(), dtype, 7);
            let b = Boundary { name: "x".into(), ty, dtype };
            let bytes = to_bytes(&x);
            assert_eq!(bytes.len(), 15 * dtype.size_bytes());
            assert_eq!(from_bytes(&b, &bytes).unwrap(), x);
        }
    }
}

//! The CPU backend: runs a [`TaskGraph`] on virtual devices, in parallel across the
//! machine's cores.
//!
//! Each virtual device of the graph has its own memory (a store of resident buffers); a
//! transfer copies a block out of the source device's store into the destination's, a load
//! copies a block of a computation input into a device, a store copies a block back to the
//! host. Kernels come from the [`KernelLibrary`] the graph was compiled with. Results equal
//! [`interpret`](einsum_core::taskgraph::interpret)'s bit for bit: every task does the same
//! operations on the same blocks (an aggregation folds its sources left to right).
//!
//! ```
//! use einsum_core::{Backend, DType, HostTensor, KernelLibrary, TensorType};
//! use einsum_core::taskgraph::{Boundary, DeviceId, Task, TaskGraph};
//! use einsum_cpu::CpuBackend;
//!
//! struct NoKernels;
//! impl KernelLibrary for NoKernels {
//!     fn run(&self, _: usize, _: &[HostTensor], _: &[(TensorType, DType)]) -> Result<Vec<HostTensor>, String> {
//!         Err("no kernels".into())
//!     }
//!     fn name(&self, k: usize) -> String {
//!         format!("kernel {k}")
//!     }
//! }
//!
//! // Device 1 loads a vector, sends it to device 0, which hands it back.
//! let whole = TensorType::zero_bounded(&[4]);
//! let io = |n: &str| Boundary { name: n.into(), ty: whole.clone(), dtype: DType::F32 };
//! let mut g = TaskGraph::new(2, vec![io("x")], vec![io("y")]);
//! let a = g.add_buffer(DeviceId(1), whole.clone(), DType::F32);
//! let b = g.add_buffer(DeviceId(0), whole.clone(), DType::F32);
//! g.push(Task::Load { input: 0, dst: a }, &[], "load").unwrap();
//! g.push(Task::Transfer { src: a, dst: b }, &[], "send").unwrap();
//! g.push(Task::Store { output: 0, src: b }, &[], "store").unwrap();
//!
//! let x = HostTensor::random(whole, DType::F32, 7);
//! let y = CpuBackend::with_threads(2).execute(&g, &NoKernels, std::slice::from_ref(&x)).unwrap();
//! assert_eq!(y, vec![x]);
//! ```
//!
//! **Architecture invariant:** this crate knows nothing about operators or plans: it runs
//! whatever task graph and kernel library it is given.
#![warn(missing_docs)]

mod memory;
mod schedule;

use std::sync::{
    Mutex,
    atomic::{AtomicUsize, Ordering},
};

use einsum_core::{
    Backend, BackendError, DType, HostTensor, KernelLibrary, TensorType,
    taskgraph::{BufferId, Task, TaskGraph, TaskId, check_inputs, check_kernel_outputs, stitch_outputs},
};

use memory::Memory;

/// Runs task graphs on the CPU: one memory per virtual device, tasks spread over a pool of
/// worker threads.
///
/// # Design
/// Devices are memory spaces, not threads. A pool of `threads` OS threads pulls ready tasks
/// (all dependencies finished) from one queue, lowest task id first, whatever device they
/// belong to. Against one thread per device behind a semaphore, this
/// - uses every core when the work is uneven (one device holding most of the tasks still
///   gets all the threads), and never oversubscribes when there are more virtual devices
///   than cores (8 devices on a 2-core machine run on 2 threads);
/// - with one thread, runs the tasks exactly in schedule order (a task's dependencies come
///   before it, so the lowest ready id is always the next one), so peak memory per device
///   is exactly what [`TaskGraph::stats`] predicts; with more threads, lowest id first
///   keeps the run close to that order.
///
/// Tasks on one device may run concurrently, as the graph's dependencies allow: buffers are
/// single-assignment, so two tasks never write the same memory.
#[derive(Clone, Debug)]
pub struct CpuBackend {
    threads: usize,
}

/// What one run did, measured.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunStats {
    /// Worker threads used.
    pub threads: usize,
    /// Tasks run.
    pub tasks: usize,
    /// Bytes copied between devices by the transfers (equal to [`TaskGraph::stats`]'s).
    pub bytes_moved: usize,
    /// The most bytes resident on each device at once (equal to
    /// [`TaskGraph::stats`]'s prediction when run on one thread).
    pub peak_bytes: Vec<usize>,
    /// Bytes still resident on each device at the end (zero: every buffer was freed after
    /// its last reader).
    pub resident_bytes: Vec<usize>,
}

impl Default for CpuBackend {
    fn default() -> Self {
        Self::new()
    }
}

impl CpuBackend {
    /// A backend with one worker thread per available core.
    pub fn new() -> Self {
        Self::with_threads(std::thread::available_parallelism().map_or(1, |n| n.get()))
    }

    /// A backend with `threads` worker threads (at least one).
    pub fn with_threads(threads: usize) -> Self {
        Self { threads: threads.max(1) }
    }

    /// The number of worker threads.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Runs `graph` like [`Backend::execute`] and also returns what the run did.
    pub fn execute_with_stats(
        &self,
        graph: &TaskGraph,
        kernels: &dyn KernelLibrary,
        inputs: &[HostTensor],
    ) -> Result<(Vec<HostTensor>, RunStats), BackendError> {
        check_inputs(graph, inputs)?;
        let memory = Memory::new(graph);
        // Blocks handed to the host: (task, output, block).
        let stored: Mutex<Vec<(TaskId, usize, HostTensor)>> = Mutex::new(Vec::new());
        let moved = AtomicUsize::new(0);
        let threads = self.threads.min(graph.nodes().len()).max(1);
        schedule::run_all(graph, threads, |id| {
            let node = &graph.nodes()[id.0 as usize];
            let fail = |reason: String| BackendError::Task { task: id, label: node.label.clone(), reason };
            let ctx = Context { graph, kernels, inputs, memory: &memory };
            match ctx.run(&node.task).map_err(fail)? {
                Done::Wrote(blocks) => {
                    if let Task::Transfer { src, .. } = node.task {
                        moved.fetch_add(graph.buffer(src).bytes(), Ordering::Relaxed);
                    }
                    for (b, t) in node.task.writes().into_iter().zip(blocks) {
                        memory.write(b, t);
                    }
                }
                Done::Stored(output, block) => {
                    stored.lock().unwrap_or_else(|e| e.into_inner()).push((id, output, block));
                }
            }
            memory.release(node.task.reads());
            Ok(())
        })?;
        let mut stored = stored.into_inner().unwrap_or_else(|e| e.into_inner());
        // The host receives each output's blocks in schedule order, as `interpret` does.
        stored.sort_by_key(|(id, ..)| *id);
        let mut outputs: Vec<Vec<HostTensor>> = vec![Vec::new(); graph.outputs().len()];
        for (_, o, block) in stored {
            outputs[o].push(block);
        }
        let outputs = stitch_outputs(graph, outputs)?;
        let stats = RunStats {
            threads,
            tasks: graph.nodes().len(),
            bytes_moved: moved.into_inner(),
            peak_bytes: memory.peak_bytes(),
            resident_bytes: memory.resident_bytes(),
        };
        Ok((outputs, stats))
    }
}

impl Backend for CpuBackend {
    fn name(&self) -> &str {
        "cpu"
    }

    fn execute(
        &self,
        graph: &TaskGraph,
        kernels: &dyn KernelLibrary,
        inputs: &[HostTensor],
    ) -> Result<Vec<HostTensor>, BackendError> {
        self.execute_with_stats(graph, kernels, inputs).map(|(outputs, _)| outputs)
    }
}

/// What a task produced.
enum Done {
    /// Blocks for the task's written buffers, in [`Task::writes`] order.
    Wrote(Vec<HostTensor>),
    /// A block of saved output `.0`, for the host.
    Stored(usize, HostTensor),
}

/// Everything a task can touch.
struct Context<'a> {
    graph: &'a TaskGraph,
    kernels: &'a dyn KernelLibrary,
    inputs: &'a [HostTensor],
    memory: &'a Memory<'a>,
}

impl Context<'_> {
    fn get(&self, b: BufferId) -> Result<std::sync::Arc<HostTensor>, String> {
        self.memory.read(b).ok_or_else(|| format!("buffer {} is not resident on {}", b.0, self.graph.buffer(b).device))
    }

    /// Runs one task, the same operations as `interpret`.
    fn run(&self, task: &Task) -> Result<Done, String> {
        let ty = |b: BufferId| &self.graph.buffer(b).ty;
        let one = |t: HostTensor| Done::Wrote(vec![t]);
        Ok(match task {
            Task::Load { input, dst } => one(self.inputs[*input].slice(ty(*dst)).map_err(|e| e.to_string())?),
            Task::Slice { src, dst } => one(self.get(*src)?.slice(ty(*dst)).map_err(|e| e.to_string())?),
            // A genuine copy: the destination device gets its own block.
            Task::Transfer { src, .. } => one(HostTensor::clone(&*self.get(*src)?)),
            Task::Aggregate { srcs, agg, .. } => {
                let mut acc = HostTensor::clone(&*self.get(srcs[0])?);
                for s in &srcs[1..] {
                    acc = acc.aggregate(&*self.get(*s)?, *agg).map_err(|e| e.to_string())?;
                }
                one(acc)
            }
            Task::Stitch { srcs, dst } => {
                let parts =
                    srcs.iter().map(|s| self.get(*s).map(|t| HostTensor::clone(&*t))).collect::<Result<Vec<_>, _>>()?;
                one(HostTensor::stitch(ty(*dst), &parts).map_err(|e| e.to_string())?)
            }
            Task::Kernel { kernel, inputs, outputs } => {
                let args = inputs
                    .iter()
                    .map(|s| self.get(*s).map(|t| HostTensor::clone(&*t)))
                    .collect::<Result<Vec<_>, _>>()?;
                let want: Vec<(TensorType, DType)> =
                    outputs.iter().map(|b| (ty(*b).clone(), self.graph.buffer(*b).dtype)).collect();
                let name = || self.kernels.name(*kernel);
                let got = self.kernels.run(*kernel, &args, &want).map_err(|e| format!("{}: {e}", name()))?;
                check_kernel_outputs(&got, &want).map_err(|e| format!("{}: {e}", name()))?;
                Done::Wrote(got)
            }
            Task::Store { output, src } => Done::Stored(*output, HostTensor::clone(&*self.get(*src)?)),
        })
    }
}

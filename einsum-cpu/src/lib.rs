//! The CPU backend: runs a [`TaskGraph`] on virtual devices, in parallel across the
//! machine's cores.
//!
//! Each virtual device of the graph has its own memory (a store of buffers); a transfer
//! puts a block of the source device's store into the destination's, a load slices a
//! block of a computation input into a device, a store hands a block back to the host.
//! Blocks are immutable [`HostTensor`]s, whose clones share their elements: a transfer, a
//! kernel's argument or a stored block costs no copy, and slices and stitches are views
//! where their readers can read them so (`views`). The blocks the backend writes itself
//! (copying slices and stitches, aggregations) are built in per-device arenas planned from
//! the graph's lifetimes when it is prepared ([`ArenaPlan`]) and reused by every run. A
//! kernel started while other workers are idle is lent their cores
//! ([`einsum_core::intra_op`]).
//!
//! Computation inputs are resident, as the task graph's memory model says: a
//! [`CpuExecutable`] ([`CpuBackend::executable`], or boxed through the core contract,
//! [`Backend::prepare`]) performs an input's `Load` tasks once, when the input is given
//! ([`CpuExecutable::load`]), keeps those blocks for its lifetime, and every run
//! ([`CpuExecutable::run_with_stats`], [`Prepared::run`]) runs the other tasks on them.
//! [`Backend::execute`] is prepare, load every input, run. Kernels come from the
//! [`KernelLibrary`] the graph was compiled with, whose host kernels run every operator: the
//! CPU backend refuses no operator ([`Backend::check_operator`] keeps its default). A backend
//! given fusion rules ([`CpuBackend::with_fusion`]) first fuses chains of kernels into single
//! tasks when it prepares a graph (`fuse.rs`), which the rules must keep bit-exact. Results
//! equal [`interpret`](einsum_core::taskgraph::interpret)'s bit for bit: every task does the
//! same operations on the same blocks (an aggregation folds its sources left to right).
//!
//! ```
//! use std::sync::Arc;
//!
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
//! assert_eq!(y, vec![x.clone()]);
//!
//! // Prepared once, the input loaded once (and kept on device 1), run as often as needed.
//! let mut exe = CpuBackend::with_threads(2).executable(&g, Arc::new(NoKernels)).unwrap();
//! exe.load(0, &x).unwrap();
//! for _ in 0..2 {
//!     let (y, stats) = exe.run_with_stats().unwrap();
//!     assert_eq!(y, vec![x.clone()]);
//!     assert_eq!(stats.resident_bytes, vec![0, 16]);
//! }
//! ```
//!
//! **Architecture invariant:** this crate knows nothing about operators or plans: it runs
//! whatever task graph and kernel library it is given.
#![warn(missing_docs)]

mod arena;
mod arena_plan;
mod fuse;
mod heap;
mod memory;
mod peers;
mod schedule;
mod views;

use std::fmt;
use std::sync::{
    Arc, Mutex,
    atomic::{AtomicUsize, Ordering},
};
use std::time::Instant;

use einsum_core::{
    Backend, BackendError, DType, HostTensor, KernelLibrary, Prepared, TaskTiming, TensorType,
    taskgraph::{
        Boundary, BufferId, DeviceId, Task, TaskGraph, TaskId, check_inputs, check_kernel_outputs, fuse::Rule,
        stitch_outputs,
    },
};

use arena::{Arenas, Place};
pub use arena_plan::{ArenaPlan, MAX_REACH_BYTES, Slot};
use memory::Memory;
pub use peers::Peers;
use schedule::{Arrivals, Role};
use views::Views;

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
///
/// Preparing an executable tunes the process's allocator (glibc only) to keep freed blocks
/// mapped, so repeated runs reuse their buffers' pages instead of faulting in new ones.
#[derive(Clone, Debug)]
pub struct CpuBackend {
    threads: usize,
    /// The kernel fusion rules applied when a graph is prepared (none by default).
    fusion: &'static [Rule],
    /// Whether prepared executables build the backend's own blocks in planned arenas.
    arena: bool,
    /// The fault to inject, in tests of the checks only.
    #[cfg(any(test, feature = "fault-injection"))]
    fault: Option<Fault>,
}

/// A wrong result the CPU backend produces on purpose, so that a test can show that a
/// check catches it. It exists only in this crate's tests and with the `fault-injection`
/// feature (which the workspace's tests enable): no build of the command line has it.
#[cfg(any(test, feature = "fault-injection"))]
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The first `Aggregate` task with several sources (in task id order) leaves out its
    /// last source: one partial sum of a split contraction is lost.
    DropAggregationInput,
}

/// What one run did, measured.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunStats {
    /// Worker threads used.
    pub threads: usize,
    /// Tasks run (every task but the loads, which were done when the inputs were loaded).
    pub tasks: usize,
    /// Bytes copied between devices by the transfers (equal to [`TaskGraph::stats`]'s).
    pub bytes_moved: usize,
    /// The most bytes held on each device at once, its resident input blocks included
    /// (equal to [`TaskGraph::stats`]'s prediction when run on one thread).
    pub peak_bytes: Vec<usize>,
    /// Bytes still held on each device at the end: its resident input blocks (equal to
    /// [`TaskGraph::stats`]'s `resident_bytes`), every transient buffer having been freed
    /// after its last reader.
    pub resident_bytes: Vec<usize>,
    /// Per device, the bytes of its arena ([`ArenaPlan::device_bytes`]; zeros without one).
    pub arena_bytes: Vec<usize>,
    /// Blocks built on the heap although the plan gave them a slot, because a tensor still
    /// read a slot sharing bytes with it: 0 unless a kernel returned (a view of) its
    /// argument, or another run of the same executable ran at the same time.
    pub arena_fallbacks: usize,
    /// When each task ran, in the order the tasks ended, where the executable records task
    /// timings ([`CpuExecutable::set_task_timing`]);
    /// `None` otherwise (the default).
    pub task_timings: Option<Vec<TaskTiming>>,
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
        Self {
            threads: threads.max(1),
            fusion: &[],
            arena: true,
            #[cfg(any(test, feature = "fault-injection"))]
            fault: None,
        }
    }

    /// The same backend, fusing kernel chains with `rules` when it prepares a graph (see
    /// `einsum_core::taskgraph::fuse`; the driver passes `einsum_ops::fused::RULES`, which
    /// run chains of elementwise kernels in one pass). Results are unchanged bit for bit
    /// as long as each rule's fused kernel computes what its kernels did.
    #[must_use]
    pub fn with_fusion(mut self, rules: &'static [Rule]) -> Self {
        self.fusion = rules;
        self
    }

    /// The same backend, building its own blocks in planned arenas (`true`, the default) or
    /// on the heap (`false`, to measure one against the other).
    #[must_use]
    pub fn with_arena(mut self, arena: bool) -> Self {
        self.arena = arena;
        self
    }

    /// The same backend, injecting `fault` into every run (tests of the checks only).
    #[cfg(any(test, feature = "fault-injection"))]
    #[doc(hidden)]
    #[must_use]
    pub fn with_fault(mut self, fault: Fault) -> Self {
        self.fault = Some(fault);
        self
    }

    /// The task whose last aggregation source every run leaves out: none, but under an
    /// injected [`Fault::DropAggregationInput`].
    fn dropped_source(&self, graph: &TaskGraph) -> Option<TaskId> {
        #[cfg(any(test, feature = "fault-injection"))]
        if self.fault == Some(Fault::DropAggregationInput) {
            return graph
                .nodes()
                .iter()
                .position(|n| matches!(&n.task, Task::Aggregate { srcs, .. } if srcs.len() > 1))
                .map(|t| TaskId(t as u32));
        }
        let _ = graph;
        None
    }

    /// The number of worker threads.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Prepares `graph`, whose kernels are `kernels`, to run on this backend: an executable
    /// that holds no input yet ([`Backend::prepare`] boxes the same).
    pub fn executable<'k>(
        &self,
        graph: &TaskGraph,
        kernels: Arc<dyn KernelLibrary + 'k>,
    ) -> Result<CpuExecutable<'k>, BackendError> {
        heap::keep_freed_memory();
        let (graph, kernels) = fuse::fuse_chains(graph, kernels, self.fusion)?;
        let views = Views::of(&graph);
        let plan = if self.arena { ArenaPlan::of(&graph, &views) } else { ArenaPlan::empty(&graph) };
        Ok(CpuExecutable {
            views: Arc::new(views),
            arenas: Arc::new(Arenas::new(plan)),
            resident: vec![None; graph.buffers().len()],
            loaded: vec![false; graph.inputs().len()],
            dropped_source: self.dropped_source(&graph),
            graph,
            kernels,
            threads: self.threads,
            timing: false,
            timings: None,
            peers: None,
        })
    }

    /// Runs `graph` like [`Backend::execute`] and also returns what the run did: prepares
    /// it, loads every input and runs it once.
    pub fn execute_with_stats(
        &self,
        graph: &TaskGraph,
        kernels: &dyn KernelLibrary,
        inputs: &[HostTensor],
    ) -> Result<(Vec<HostTensor>, RunStats), BackendError> {
        check_inputs(graph, inputs)?;
        let mut exe = self.executable(graph, Arc::new(kernels))?;
        exe.load_all(inputs)?;
        exe.run_with_stats()
    }
}

/// A task graph prepared for the CPU backend: the blocks of its computation inputs are
/// loaded once ([`CpuExecutable::load`]) and stay resident on their devices; each
/// run ([`CpuExecutable::run_with_stats`]) runs every other task on them, calling the
/// kernel library it was prepared with.
///
/// # Design
/// Inputs (weights) do not change between runs, so slicing them into their devices' blocks
/// belongs to loading, not to running: a run then costs only the computation, and its
/// memory is the graph's model — resident blocks plus the schedule's transient peak.
#[derive(Clone)]
pub struct CpuExecutable<'k> {
    graph: TaskGraph,
    /// Which buffers are views of which.
    views: Arc<Views>,
    /// The arenas the backend's own blocks are built in, shared by clones.
    arenas: Arc<Arenas>,
    kernels: Arc<dyn KernelLibrary + 'k>,
    threads: usize,
    /// Per buffer, the resident block once its input is loaded (`None` for transient ones).
    resident: Vec<Option<Arc<HostTensor>>>,
    /// Per input, whether it has been loaded.
    loaded: Vec<bool>,
    /// The `Aggregate` task that leaves out its last source: always `None` outside tests
    /// of the checks (see `Fault`).
    dropped_source: Option<TaskId>,
    /// Whether runs record when each task ran.
    timing: bool,
    /// The task timings of the last [`Prepared::run`], until taken.
    timings: Option<Vec<TaskTiming>>,
    /// The processes that run the devices this one does not (`None`: it runs them all).
    peers: Option<Arc<dyn Peers>>,
}

/// A block of a saved output that a run handed back ([`CpuExecutable::run_blocks`]).
#[derive(Clone, Debug, PartialEq)]
pub struct StoredBlock {
    /// The `Store` task that handed it back.
    pub task: TaskId,
    /// The output it is a block of (its index in the graph's outputs).
    pub output: usize,
    /// The block, at its absolute position in the output.
    pub block: HostTensor,
}

impl fmt::Debug for CpuExecutable<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CpuExecutable")
            .field("graph", &self.graph)
            .field("threads", &self.threads)
            .field("loaded", &self.loaded)
            .finish_non_exhaustive()
    }
}

impl CpuExecutable<'_> {
    /// The prepared graph (after kernel fusion, when the backend fuses).
    pub fn graph(&self) -> &TaskGraph {
        &self.graph
    }

    /// Makes every later run record when each task ran ([`RunStats::task_timings`]: device,
    /// worker thread, start and end from one origin), or (`on` false) stop recording. Off by
    /// default: a run that records nothing reads no clock per task.
    pub fn set_task_timing(&mut self, on: bool) {
        self.timing = on;
    }

    /// The same executable, running only the tasks of the devices `peers` calls local: it
    /// loads only their blocks, sends the blocks of transfers to other processes' devices
    /// through `peers`, and waits for those of transfers from them (see [`Peers`]). Its runs
    /// hand back the output blocks of its own devices ([`CpuExecutable::run_blocks`]);
    /// stitching whole outputs ([`CpuExecutable::run_with_stats`]) is for an executable that
    /// runs every device. Set before loading any input.
    #[must_use]
    pub fn with_peers(mut self, peers: Arc<dyn Peers>) -> Self {
        // Arenas for this process's devices only.
        let plan = self.arenas.plan().clone().only(&self.graph, |d| peers.is_local(DeviceId(d as u32)));
        self.arenas = Arc::new(Arenas::new(plan));
        self.peers = Some(peers);
        self
    }

    /// Whether this process holds buffer `b` (its device is local).
    fn holds(&self, b: BufferId) -> bool {
        self.holds_device(self.graph.buffer(b).device)
    }

    /// Who finishes each task in this process ([`Role`]).
    fn roles(&self) -> Vec<Role> {
        let graph = &self.graph;
        graph
            .nodes()
            .iter()
            .map(|node| match node.task {
                Task::Transfer { src, dst } => match (self.holds(src), self.holds(dst)) {
                    (true, _) => Role::Run,
                    (false, true) => Role::Arrives,
                    (false, false) => Role::Elsewhere,
                },
                ref task if self.holds_device(task_device(graph, task)) => Role::Run,
                _ => Role::Elsewhere,
            })
            .collect()
    }

    /// Whether this process runs `device`'s tasks.
    fn holds_device(&self, device: DeviceId) -> bool {
        self.peers.as_ref().is_none_or(|p| p.is_local(device))
    }

    /// Where the blocks the backend writes itself live: each device's arena and each placed
    /// buffer's slot.
    pub fn arena_plan(&self) -> &ArenaPlan {
        self.arenas.plan()
    }

    /// Gives computation input `input` the value `value` (the whole tensor): checks its type
    /// and dtype against the graph's input, then performs that input's `Load` tasks, keeping
    /// every block resident on its device until the input is loaded again.
    pub fn load(&mut self, input: usize, value: &HostTensor) -> Result<(), BackendError> {
        let graph = &self.graph;
        let b = boundary(graph, input)?;
        if *value.ty() != b.ty || value.dtype() != b.dtype {
            return Err(BackendError::Input {
                index: input,
                name: b.name.clone(),
                reason: format!("expected {} {}, got {} {}", b.ty, b.dtype, value.ty(), value.dtype()),
            });
        }
        for (t, node) in graph.nodes().iter().enumerate() {
            if let Task::Load { input: i, dst } = node.task
                && i == input
                && self.holds(dst)
            {
                let block = value.slice(&graph.buffer(dst).ty).map_err(|e| BackendError::Task {
                    task: TaskId(t as u32),
                    label: node.label.clone(),
                    reason: e.to_string(),
                })?;
                self.resident[dst.0 as usize] = Some(Arc::new(block));
            }
        }
        self.loaded[input] = true;
        Ok(())
    }

    /// The distinct types of input `input`'s blocks this executable keeps, where it runs part
    /// of the graph ([`CpuExecutable::with_peers`]): its own devices' `Load` blocks; `None`
    /// where it runs every device (and needs the whole value).
    pub fn needed_parts(&self, input: usize) -> Option<Vec<TensorType>> {
        self.peers.as_ref()?;
        let mut parts: Vec<TensorType> = Vec::new();
        for node in self.graph.nodes() {
            if let Task::Load { input: i, dst } = node.task
                && i == input
                && self.holds(dst)
                && !parts.contains(&self.graph.buffer(dst).ty)
            {
                parts.push(self.graph.buffer(dst).ty.clone());
            }
        }
        Some(parts)
    }

    /// Gives input `input` its value from `parts` (projections of its type, in its dtype):
    /// each of its `Load` tasks on this process's devices takes its block from a part that
    /// contains it. Fails with [`BackendError::Input`] for an unknown input, a part of
    /// another dtype or outside the input, or a block no part contains, touching nothing.
    pub fn load_parts(&mut self, input: usize, parts: &[HostTensor]) -> Result<(), BackendError> {
        let b = boundary(&self.graph, input)?;
        let refuse = |reason: String| BackendError::Input { index: input, name: b.name.clone(), reason };
        if let Some(p) = parts.iter().find(|p| p.dtype() != b.dtype || !p.ty().is_projection_of(&b.ty)) {
            return Err(refuse(format!("expected parts of {} {}, got {} {}", b.ty, b.dtype, p.ty(), p.dtype())));
        }
        let mut blocks = Vec::new();
        for node in self.graph.nodes() {
            let Task::Load { input: i, dst } = node.task else { continue };
            if i != input || !self.holds(dst) {
                continue;
            }
            let ty = &self.graph.buffer(dst).ty;
            let part = parts
                .iter()
                .find(|p| ty.is_projection_of(p.ty()))
                .ok_or_else(|| refuse(format!("no part given contains the block {ty} of {}", node.label)))?;
            blocks.push((dst, part.slice(ty).map_err(|e| refuse(e.to_string()))?));
        }
        for (dst, block) in blocks {
            self.resident[dst.0 as usize] = Some(Arc::new(block));
        }
        self.loaded[input] = true;
        Ok(())
    }

    /// Overwrites the elements of loaded input `input` that `part` covers (its type a
    /// projection of the input's, its dtype the input's) in every resident block holding
    /// some of them: the block of each of the input's `Load` tasks, so a replicated block on
    /// each of its devices ([`Prepared::write`]). Other elements keep their values. Fails
    /// with [`BackendError::Input`] for an unknown input or a part of another type or dtype,
    /// and with [`BackendError::NotLoaded`] before the input is loaded, touching nothing.
    ///
    /// A block still sharing its elements with something else (the value it was loaded from,
    /// of which it may be a view; a clone of this executable; an output of an earlier run) is
    /// first copied, so none of them changes ([`HostTensor::overwrite`]); later writes are in
    /// place and cost the part alone.
    pub fn write(&mut self, input: usize, part: &HostTensor) -> Result<(), BackendError> {
        let graph = &self.graph;
        let b = boundary(graph, input)?;
        if !part.ty().is_projection_of(&b.ty) || part.dtype() != b.dtype {
            return Err(BackendError::Input {
                index: input,
                name: b.name.clone(),
                reason: format!("expected a part of {} {}, got {} {}", b.ty, b.dtype, part.ty(), part.dtype()),
            });
        }
        if !self.loaded[input] {
            return Err(BackendError::NotLoaded { index: input, name: b.name.clone() });
        }
        for (t, node) in graph.nodes().iter().enumerate() {
            let Task::Load { input: i, dst } = node.task else { continue };
            if i != input || !self.holds(dst) {
                continue;
            }
            let (Some(region), Some(block)) =
                (graph.buffer(dst).ty.intersect(part.ty()), self.resident[dst.0 as usize].as_mut())
            else {
                continue;
            };
            part.view(&region).and_then(|piece| Arc::make_mut(block).overwrite(&piece)).map_err(|e| {
                BackendError::Task { task: TaskId(t as u32), label: node.label.clone(), reason: e.to_string() }
            })?;
        }
        Ok(())
    }

    /// Runs every task but the loads (done by [`CpuExecutable::load`]) on the resident
    /// blocks and returns the saved outputs (whole tensors, in the graph's output order) and
    /// what the run did. Fails with [`BackendError::NotLoaded`] if an input was never
    /// loaded, and with [`BackendError::Unavailable`] for an executable that runs part of the
    /// graph ([`CpuExecutable::with_peers`]), which has blocks of the outputs, not all of
    /// them. The resident blocks are untouched, so runs may be repeated.
    pub fn run_with_stats(&self) -> Result<(Vec<HostTensor>, RunStats), BackendError> {
        if self.peers.is_some() {
            return Err(BackendError::Unavailable(
                "this executable runs some of the graph's devices: its runs give their output blocks (run_blocks)"
                    .into(),
            ));
        }
        let (blocks, stats) = self.run_blocks()?;
        Ok((stitch_blocks(&self.graph, blocks)?, stats))
    }

    /// Runs the tasks of this process's devices (every device but where the executable runs
    /// part of the graph, [`CpuExecutable::with_peers`]) but the loads, and returns the
    /// output blocks they handed back, in task order (the order `interpret` stitches them
    /// in), with what the run did. Fails as [`CpuExecutable::run_with_stats`] does, and
    /// when a block from another process does not arrive within the peers' patience (naming
    /// the transfer waited for and who should have sent it).
    pub fn run_blocks(&self) -> Result<(Vec<StoredBlock>, RunStats), BackendError> {
        let graph = &self.graph;
        let kernels: &dyn KernelLibrary = &*self.kernels;
        if let Some(index) = self.loaded.iter().position(|l| !l) {
            return Err(BackendError::NotLoaded { index, name: graph.inputs()[index].name.clone() });
        }
        let memory = Memory::new(graph, &self.resident);
        let roles = self.roles();
        // Blocks handed to the host.
        let stored: Mutex<Vec<StoredBlock>> = Mutex::new(Vec::new());
        let moved = AtomicUsize::new(0);
        let busy = AtomicUsize::new(0);
        let threads = self.threads.min(graph.nodes().len()).max(1);
        // Only when asked: the origin of every task's times, and the times.
        let origin = self.timing.then(Instant::now);
        let timings: Mutex<Vec<TaskTiming>> = Mutex::new(Vec::new());
        let peers = self.peers.as_deref();
        let mut arrivals = peers.map(|peers| Arriving::new(graph, &memory, &roles, peers));
        let arrivals = arrivals.as_mut().map(|a| a as &mut dyn Arrivals);
        let run = |id: TaskId, worker: usize| {
            let started = origin.map(|o| o.elapsed().as_secs_f64());
            let node = &graph.nodes()[id.0 as usize];
            let fail = |reason: String| BackendError::Task { task: id, label: node.label.clone(), reason };
            let ctx = Context {
                graph,
                kernels,
                memory: &memory,
                views: &self.views,
                arenas: &self.arenas,
                busy: &busy,
                peers,
                id,
            };
            let task = match &node.task {
                Task::Aggregate { srcs, dst, agg } if self.dropped_source == Some(id) => {
                    &Task::Aggregate { srcs: srcs[..srcs.len() - 1].to_vec(), dst: *dst, agg: *agg }
                }
                task => task,
            };
            match ctx.run(task).map_err(fail)? {
                Done::Resident => {}
                Done::Sent => {
                    if let Task::Transfer { src, .. } = node.task {
                        moved.fetch_add(graph.buffer(src).bytes(), Ordering::Relaxed);
                    }
                }
                Done::Wrote(blocks) => {
                    if let Task::Transfer { src, .. } = node.task {
                        moved.fetch_add(graph.buffer(src).bytes(), Ordering::Relaxed);
                    }
                    for (b, t) in node.task.writes().into_iter().zip(blocks) {
                        memory.write(b, t);
                    }
                }
                Done::Stored(output, block) => {
                    stored.lock().unwrap_or_else(|e| e.into_inner()).push(StoredBlock { task: id, output, block });
                }
            }
            memory.release(node.task.reads());
            if let (Some(origin), Some(start)) = (origin, started) {
                let end = origin.elapsed().as_secs_f64();
                let timing = TaskTiming {
                    task: id,
                    label: node.label.clone(),
                    kind: node.task.kind(),
                    device: task_device(graph, &node.task),
                    worker,
                    start,
                    end,
                };
                timings.lock().unwrap_or_else(|e| e.into_inner()).push(timing);
            }
            Ok(())
        };
        schedule::run_part(graph, threads, &roles, run, arrivals)?;
        let mut stored = stored.into_inner().unwrap_or_else(|e| e.into_inner());
        // The host receives each output's blocks in schedule order, as `interpret` does.
        stored.sort_by_key(|b| b.task);
        let own = |(n, r): (&einsum_core::taskgraph::Node, &Role)| {
            *r != Role::Elsewhere && !matches!(n.task, Task::Load { .. })
        };
        let stats = RunStats {
            threads,
            tasks: graph.nodes().iter().zip(&roles).filter(|&t| own(t)).count(),
            bytes_moved: moved.into_inner(),
            peak_bytes: memory.peak_bytes(),
            resident_bytes: memory.resident_bytes(),
            arena_bytes: self.arena_plan().device_bytes.clone(),
            arena_fallbacks: busy.into_inner(),
            task_timings: origin.map(|_| timings.into_inner().unwrap_or_else(|e| e.into_inner())),
        };
        Ok((stored, stats))
    }
}

/// The whole outputs of `graph` from the output blocks its `Store` tasks handed back (in any
/// order: each output's blocks are stitched in task order, as `interpret` receives them).
/// Fails naming the output whose blocks do not tile it.
pub fn stitch_blocks(graph: &TaskGraph, mut blocks: Vec<StoredBlock>) -> Result<Vec<HostTensor>, BackendError> {
    blocks.sort_by_key(|b| b.task);
    let mut outputs: Vec<Vec<HostTensor>> = vec![Vec::new(); graph.outputs().len()];
    for b in blocks {
        outputs[b.output].push(b.block);
    }
    stitch_outputs(graph, outputs)
}

/// The device a task runs on: that of the first buffer it writes, or for a store the one it
/// reads (device 0 for a task with neither, which a graph built by `TaskGraph::push` has not).
fn task_device(graph: &TaskGraph, task: &Task) -> DeviceId {
    task.written_buffers().first().or(task.read_buffers().first()).map_or(DeviceId(0), |&b| graph.buffer(b).device)
}

/// Computation input `input` of `graph`, or [`BackendError::Input`] saying how many there are.
fn boundary(graph: &TaskGraph, input: usize) -> Result<&Boundary, BackendError> {
    graph.inputs().get(input).ok_or_else(|| BackendError::Input {
        index: input,
        name: "(unknown)".into(),
        reason: format!("the graph takes {} inputs", graph.inputs().len()),
    })
}

impl Prepared for CpuExecutable<'_> {
    fn load(&mut self, input: usize, value: &HostTensor) -> Result<(), BackendError> {
        CpuExecutable::load(self, input, value)
    }

    fn write(&mut self, input: usize, part: &HostTensor) -> Result<(), BackendError> {
        CpuExecutable::write(self, input, part)
    }

    fn run(&mut self) -> Result<Vec<HostTensor>, BackendError> {
        let (outputs, stats) = self.run_with_stats()?;
        self.timings = stats.task_timings;
        Ok(outputs)
    }

    fn record_task_timings(&mut self, on: bool) -> bool {
        self.set_task_timing(on);
        true
    }

    fn take_task_timings(&mut self) -> Option<Vec<TaskTiming>> {
        self.timings.take()
    }

    fn needed_parts(&self, input: usize) -> Option<Vec<TensorType>> {
        CpuExecutable::needed_parts(self, input)
    }

    fn load_parts(&mut self, input: usize, parts: &[HostTensor]) -> Result<(), BackendError> {
        CpuExecutable::load_parts(self, input, parts)
    }
}

/// The core contract. The CPU backend runs every operator through the host kernel of the
/// library it is given, so it refuses no operator (the default
/// [`Backend::check_operator`]) and is always available.
impl Backend for CpuBackend {
    fn name(&self) -> &str {
        "cpu"
    }

    /// The devices are host memory: every device's predicted peak
    /// ([`TaskGraph::stats`]), resident input blocks included.
    fn host_bytes(&self, graph: &TaskGraph) -> usize {
        graph.stats().peak_bytes.iter().fold(0usize, |a, &b| a.saturating_add(b))
    }

    fn prepare<'k>(
        &self,
        graph: &TaskGraph,
        kernels: Arc<dyn KernelLibrary + 'k>,
    ) -> Result<Box<dyn Prepared + 'k>, BackendError> {
        Ok(Box::new(self.executable(graph, kernels)?))
    }
}

/// What a task produced.
enum Done {
    /// Nothing: a load, whose block is already resident.
    Resident,
    /// Blocks for the task's written buffers, in [`Task::writes`] order.
    Wrote(Vec<HostTensor>),
    /// A block of saved output `.0`, for the host.
    Stored(usize, HostTensor),
    /// Nothing here: a transfer's block handed to the process of its destination.
    Sent,
}

/// Everything a task can touch.
struct Context<'a> {
    graph: &'a TaskGraph,
    kernels: &'a dyn KernelLibrary,
    memory: &'a Memory<'a>,
    views: &'a Views,
    arenas: &'a Arenas,
    /// Blocks built on the heap because their slot was busy.
    busy: &'a AtomicUsize,
    /// The other processes, where this one runs part of the graph.
    peers: Option<&'a dyn Peers>,
    /// The task being run.
    id: TaskId,
}

impl Context<'_> {
    fn get(&self, b: BufferId) -> Result<std::sync::Arc<HostTensor>, String> {
        self.memory.read(b).ok_or_else(|| format!("buffer {} is not resident on {}", b.0, self.graph.buffer(b).device))
    }

    /// The lease to build buffer `b` in, if its slot is free.
    fn lease(&self, b: BufferId) -> Option<einsum_core::Lease> {
        let place = self.arenas.place(b, self.graph.buffer(b).device.0 as usize);
        if matches!(place, Place::Busy) {
            self.busy.fetch_add(1, Ordering::Relaxed);
        }
        place.lease()
    }

    /// Runs one task: the same operations as `interpret`, on views where they copy nothing.
    fn run(&self, task: &Task) -> Result<Done, String> {
        let ty = |b: BufferId| &self.graph.buffer(b).ty;
        let one = |t: HostTensor| Done::Wrote(vec![t]);
        let err = |e: einsum_core::CoreError| e.to_string();
        Ok(match task {
            // Done by `CpuExecutable::load`: the block is resident.
            Task::Load { .. } => Done::Resident,
            Task::Slice { src, dst } => {
                let view = self.get(*src)?.view(ty(*dst)).map_err(err)?;
                if self.views.slice_view[dst.0 as usize] {
                    one(view)
                } else {
                    one(view.compact_in(self.lease(*dst)).map_err(err)?)
                }
            }
            // Blocks are immutable and every device is host memory: the destination shares
            // the source's elements (`bytes_moved` still counts what an interconnect moves).
            Task::Transfer { src, dst } => {
                let block = HostTensor::clone(&*self.get(*src)?);
                match self.peers {
                    Some(peers) if !peers.is_local(self.graph.buffer(*dst).device) => {
                        peers.send(self.id, block)?;
                        Done::Sent
                    }
                    _ => one(block),
                }
            }
            Task::Aggregate { srcs, agg, dst } => {
                let parts =
                    srcs.iter().map(|s| self.get(*s).map(|t| HostTensor::clone(&*t))).collect::<Result<Vec<_>, _>>()?;
                one(HostTensor::aggregate_in(&parts[0], &parts[1..], *agg, self.lease(*dst)).map_err(err)?)
            }
            Task::Stitch { srcs, dst } => {
                let parts =
                    srcs.iter().map(|s| self.get(*s).map(|t| HostTensor::clone(&*t))).collect::<Result<Vec<_>, _>>()?;
                one(HostTensor::stitch_in(ty(*dst), &parts, self.lease(*dst)).map_err(err)?)
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
            // The host keeps what it is given: a block in an arena leaves it first.
            Task::Store { output, src } => {
                let block = self.get(*src)?;
                Done::Stored(*output, if block.is_lent() { block.compact() } else { HostTensor::clone(&*block) })
            }
        })
    }
}

/// The blocks this process waits for, as they arrive from the others ([`Peers::receive`]):
/// each checked against the transfer it completes and put into memory.
struct Arriving<'a> {
    graph: &'a TaskGraph,
    memory: &'a Memory<'a>,
    peers: &'a dyn Peers,
    /// Per task, whether it is a transfer whose block has yet to arrive.
    awaited: Vec<bool>,
    /// When a block last arrived (or the run began).
    progress: Instant,
}

impl<'a> Arriving<'a> {
    fn new(graph: &'a TaskGraph, memory: &'a Memory<'a>, roles: &[Role], peers: &'a dyn Peers) -> Self {
        let awaited = roles.iter().map(|r| *r == Role::Arrives).collect();
        Arriving { graph, memory, peers, awaited, progress: Instant::now() }
    }

    /// The error for a block `task` delivered that does not fit it.
    fn misfit(&self, task: TaskId, why: String) -> BackendError {
        let label =
            self.graph.nodes().get(task.0 as usize).map_or_else(|| "(no such task)".into(), |n| n.label.clone());
        BackendError::Task { task, label, reason: why }
    }
}

impl Arrivals for Arriving<'_> {
    fn next(&mut self) -> Result<Option<TaskId>, BackendError> {
        let first_awaited = || self.awaited.iter().position(|&a| a).map(|t| TaskId(t as u32));
        let got = self.peers.receive(schedule::POLL).map_err(|reason| {
            let task = first_awaited().unwrap_or(TaskId(0));
            self.misfit(task, format!("receiving a block: {reason}"))
        })?;
        let Some((task, block)) = got else {
            let waited = self.progress.elapsed();
            if waited > self.peers.patience() {
                let task = first_awaited().unwrap_or(TaskId(0));
                let from = match self.graph.nodes()[task.0 as usize].task {
                    Task::Transfer { src, .. } => self.graph.buffer(src).device,
                    _ => DeviceId(0),
                };
                let who = self.peers.owner(from);
                return Err(self.misfit(
                    task,
                    format!(
                        "no block arrived in {:.1} s; this transfer waits for {who} (device {}), which may have failed",
                        waited.as_secs_f64(),
                        from.0
                    ),
                ));
            }
            return Ok(None);
        };
        if !self.awaited.get(task.0 as usize).copied().unwrap_or(false) {
            return Err(self.misfit(task, "a block arrived for a task that awaits none (or already has it)".into()));
        }
        let Task::Transfer { dst, .. } = self.graph.nodes()[task.0 as usize].task else {
            unreachable!("only transfers arrive")
        };
        let want = self.graph.buffer(dst);
        if *block.ty() != want.ty || block.dtype() != want.dtype {
            let why =
                format!("expected {} {}, a block of {} {} arrived", want.ty, want.dtype, block.ty(), block.dtype());
            return Err(self.misfit(task, why));
        }
        self.memory.write(dst, block);
        self.awaited[task.0 as usize] = false;
        self.progress = Instant::now();
        Ok(Some(task))
    }
}

#[cfg(test)]
mod tests {
    use einsum_core::{Aggregation, taskgraph::Boundary};

    use super::*;

    struct NoKernels;
    impl KernelLibrary for NoKernels {
        fn run(&self, _: usize, _: &[HostTensor], _: &[(TensorType, DType)]) -> Result<Vec<HostTensor>, String> {
            Err("no kernels".into())
        }
        fn name(&self, k: usize) -> String {
            format!("kernel {k}")
        }
    }

    /// Device 0 sums three inputs (two sent by device 1); the fault loses the last one, in
    /// that task only.
    #[test]
    fn the_injected_fault_drops_the_last_source_of_the_first_aggregation() {
        let ty = TensorType::zero_bounded(&[2]);
        let io = |n: &str| Boundary { name: n.into(), ty: ty.clone(), dtype: DType::F32 };
        let mut g = TaskGraph::new(2, vec![io("a"), io("b"), io("c")], vec![io("s"), io("t")]);
        let local = g.add_buffer(DeviceId(0), ty.clone(), DType::F32);
        let (b1, c1) =
            (g.add_buffer(DeviceId(1), ty.clone(), DType::F32), g.add_buffer(DeviceId(1), ty.clone(), DType::F32));
        let (b0, c0) =
            (g.add_buffer(DeviceId(0), ty.clone(), DType::F32), g.add_buffer(DeviceId(0), ty.clone(), DType::F32));
        let (s, t) =
            (g.add_buffer(DeviceId(0), ty.clone(), DType::F32), g.add_buffer(DeviceId(0), ty.clone(), DType::F32));
        g.push(Task::Load { input: 0, dst: local }, &[], "load a").unwrap();
        g.push(Task::Load { input: 1, dst: b1 }, &[], "load b").unwrap();
        g.push(Task::Load { input: 2, dst: c1 }, &[], "load c").unwrap();
        g.push(Task::Transfer { src: b1, dst: b0 }, &[], "send b").unwrap();
        g.push(Task::Transfer { src: c1, dst: c0 }, &[], "send c").unwrap();
        g.push(Task::Aggregate { srcs: vec![local, b0, c0], dst: s, agg: Aggregation::Sum }, &[], "a+b+c").unwrap();
        g.push(Task::Aggregate { srcs: vec![b0, c0], dst: t, agg: Aggregation::Sum }, &[], "b+c").unwrap();
        g.push(Task::Store { output: 0, src: s }, &[], "store s").unwrap();
        g.push(Task::Store { output: 1, src: t }, &[], "store t").unwrap();
        let value = |x: f32| HostTensor::from_f32(ty.clone(), DType::F32, vec![x, 10.0 * x]).unwrap();
        let inputs = [value(1.0), value(2.0), value(4.0)];
        let honest = CpuBackend::with_threads(2).execute(&g, &NoKernels, &inputs).unwrap();
        assert_eq!(honest, vec![value(7.0), value(6.0)]);
        let faulty = CpuBackend::with_threads(2).with_fault(Fault::DropAggregationInput);
        assert_eq!(faulty.execute(&g, &NoKernels, &inputs).unwrap(), vec![value(3.0), value(6.0)]);
    }

    /// `x` (4×6) split by rows over devices 0 and 1 and replicated whole on device 2, with
    /// device 1 holding a replica of device 0's rows too; device 0 gathers the halves into
    /// `y`, and `z` (device 2's whole) and `r` (device 1's replica) are stored as they are.
    fn split_and_replicated() -> TaskGraph {
        let tt = |lo: &[usize], hi: &[usize]| TensorType::new(lo, hi).unwrap();
        let whole = tt(&[0, 0], &[4, 6]);
        let (top, bottom) = (tt(&[0, 0], &[2, 6]), tt(&[2, 0], &[4, 6]));
        let io = |n: &str, ty: &TensorType| Boundary { name: n.into(), ty: ty.clone(), dtype: DType::F32 };
        let mut g = TaskGraph::new(3, vec![io("x", &whole)], vec![io("y", &whole), io("z", &whole), io("r", &top)]);
        let mut load = |d: u32, ty: &TensorType| {
            let b = g.add_buffer(DeviceId(d), ty.clone(), DType::F32);
            g.push(Task::Load { input: 0, dst: b }, &[], format!("load {ty} on {d}")).unwrap();
            b
        };
        let (x0, x1, x2, r) = (load(0, &top), load(1, &bottom), load(2, &whole), load(1, &top));
        let sent = g.add_buffer(DeviceId(0), bottom.clone(), DType::F32);
        g.push(Task::Transfer { src: x1, dst: sent }, &[], "send bottom").unwrap();
        let y = g.add_buffer(DeviceId(0), whole, DType::F32);
        g.push(Task::Stitch { srcs: vec![x0, sent], dst: y }, &[], "stitch").unwrap();
        g.push(Task::Store { output: 0, src: y }, &[], "store y").unwrap();
        g.push(Task::Store { output: 1, src: x2 }, &[], "store z").unwrap();
        g.push(Task::Store { output: 2, src: r }, &[], "store r").unwrap();
        g
    }

    /// Writing parts (a strided box across the split, then one row) into a loaded input gives
    /// the outputs of a fresh executable loaded with the overwritten whole value, on every
    /// block and replica; the value it was loaded from, an earlier run's outputs and a clone
    /// of the executable keep their values; the resident bytes stay what they were.
    #[test]
    fn a_written_part_reaches_every_block_and_replica() {
        let g = split_and_replicated();
        let tt = |lo: &[usize], hi: &[usize]| TensorType::new(lo, hi).unwrap();
        let x = HostTensor::random(tt(&[0, 0], &[4, 6]), DType::F32, 1);
        let snapshot = x.compact_in(None).unwrap();
        let backend = CpuBackend::with_threads(2);
        let mut exe = backend.executable(&g, Arc::new(NoKernels)).unwrap();
        exe.load(0, &x).unwrap();
        let (first, stats) = exe.run_with_stats().unwrap();
        let clone = exe.clone();
        let mut want = x.clone();
        for (seed, part) in [tt(&[1, 2], &[3, 5]), tt(&[0, 0], &[1, 6]), tt(&[3, 5], &[4, 6])].into_iter().enumerate() {
            let part = HostTensor::random(part, DType::F32, 10 + seed as u64);
            exe.write(0, &part).unwrap();
            want.overwrite(&part).unwrap();
            let mut fresh = backend.executable(&g, Arc::new(NoKernels)).unwrap();
            fresh.load(0, &want).unwrap();
            let (got, run) = exe.run_with_stats().unwrap();
            assert_eq!(got, fresh.run_with_stats().unwrap().0, "after writing {}", part.ty());
            assert_eq!(got[0], want);
            assert_eq!(run.resident_bytes, stats.resident_bytes);
        }
        assert_eq!(x, snapshot);
        assert_eq!(first[0], snapshot);
        assert_eq!(clone.run_with_stats().unwrap().0, first);
    }

    /// Task timings are recorded only when asked: then one per task of the prepared graph,
    /// each on its task's device and a worker of the pool, its start no later than its end
    /// and after every dependency's end; through the core contract too.
    #[test]
    fn task_timings_only_when_asked() {
        let g = split_and_replicated();
        let x = HostTensor::random(TensorType::new(&[0, 0], &[4, 6]).unwrap(), DType::F32, 1);
        let mut quiet = CpuBackend::with_threads(2).executable(&g, Arc::new(NoKernels)).unwrap();
        quiet.load(0, &x).unwrap();
        assert_eq!(quiet.run_with_stats().unwrap().1.task_timings, None);
        let mut exe = CpuBackend::with_threads(2).executable(&g, Arc::new(NoKernels)).unwrap();
        exe.set_task_timing(true);
        exe.load(0, &x).unwrap();
        let timings = exe.run_with_stats().unwrap().1.task_timings.expect("timings were asked for");
        assert_eq!(timings.len(), g.nodes().len());
        let mut by_task: Vec<Option<&TaskTiming>> = vec![None; g.nodes().len()];
        for t in &timings {
            assert!(by_task[t.task.0 as usize].replace(t).is_none(), "task {} timed twice", t.task);
        }
        for (i, node) in g.nodes().iter().enumerate() {
            let t = by_task[i].expect("every task is timed");
            assert_eq!(t.label, node.label);
            assert_eq!(t.kind, node.task.kind());
            assert_eq!(t.device, task_device(&g, &node.task));
            assert!(t.worker < 2, "worker {}", t.worker);
            assert!(t.start.is_finite() && 0.0 <= t.start && t.start <= t.end, "{t:?}");
            for d in &node.deps {
                assert!(by_task[d.0 as usize].expect("timed").end <= t.start, "task {i} before its dependency {d}");
            }
        }
        // The stored `y` is on device 0, the replica `r` on device 1.
        assert_eq!(by_task[g.nodes().len() - 1].map(|t| t.device), Some(DeviceId(1)));
        let mut prepared: Box<dyn Prepared> = Box::new(quiet);
        assert!(prepared.record_task_timings(true));
        assert_eq!(prepared.take_task_timings(), None, "nothing before a run");
        prepared.run().unwrap();
        assert_eq!(prepared.take_task_timings().map(|t| t.len()), Some(g.nodes().len()));
        assert_eq!(prepared.take_task_timings(), None, "taken once");
        assert!(prepared.record_task_timings(false));
        prepared.run().unwrap();
        assert_eq!(prepared.take_task_timings(), None);
    }

    /// Processes over channels: process `p` runs the devices `owner` gives it.
    struct Channels {
        me: usize,
        owner: Vec<usize>,
        /// Per transfer task, its destination device.
        dst: Vec<Option<DeviceId>>,
        to: Vec<std::sync::mpsc::Sender<(TaskId, HostTensor)>>,
        inbox: Mutex<std::sync::mpsc::Receiver<(TaskId, HostTensor)>>,
        patience: std::time::Duration,
    }

    impl Peers for Channels {
        fn is_local(&self, device: DeviceId) -> bool {
            self.owner[device.0 as usize] == self.me
        }
        fn send(&self, task: TaskId, block: HostTensor) -> Result<(), String> {
            let dst = self.dst[task.0 as usize].ok_or("not a transfer")?;
            self.to[self.owner[dst.0 as usize]].send((task, block)).map_err(|e| e.to_string())
        }
        fn receive(&self, wait: std::time::Duration) -> Result<Option<(TaskId, HostTensor)>, String> {
            Ok(self.inbox.lock().unwrap().recv_timeout(wait).ok())
        }
        fn owner(&self, device: DeviceId) -> String {
            format!("process {}", self.owner[device.0 as usize])
        }
        fn patience(&self) -> std::time::Duration {
            self.patience
        }
    }

    /// One `Channels` per process of `owner`.
    fn processes(g: &TaskGraph, owner: &[usize], patience_ms: u64) -> Vec<Channels> {
        let n = owner.iter().max().map_or(0, |m| m + 1);
        let (to, inboxes): (Vec<_>, Vec<_>) = (0..n).map(|_| std::sync::mpsc::channel()).unzip();
        let dst: Vec<Option<DeviceId>> = g
            .nodes()
            .iter()
            .map(|node| match node.task {
                Task::Transfer { dst, .. } => Some(g.buffer(dst).device),
                _ => None,
            })
            .collect();
        inboxes
            .into_iter()
            .enumerate()
            .map(|(me, inbox)| Channels {
                me,
                owner: owner.to_vec(),
                dst: dst.clone(),
                to: to.clone(),
                inbox: Mutex::new(inbox),
                patience: std::time::Duration::from_millis(patience_ms),
            })
            .collect()
    }

    /// Devices {0} and {1, 2} in two processes (each on its own thread) hand back the blocks
    /// the whole graph's run stitches, bit for bit: device 1's bottom rows travel to device
    /// 0 as a message; each process loads and stores only its own devices' blocks.
    #[test]
    fn two_processes_give_the_whole_runs_blocks() {
        let g = split_and_replicated();
        let x = HostTensor::random(TensorType::new(&[0, 0], &[4, 6]).unwrap(), DType::F32, 5);
        let whole = CpuBackend::with_threads(2).execute(&g, &NoKernels, std::slice::from_ref(&x)).unwrap();
        let procs = processes(&g, &[0, 1, 1], 10_000);
        let runs: Vec<(Vec<StoredBlock>, RunStats)> = std::thread::scope(|scope| {
            let handles: Vec<_> = procs
                .into_iter()
                .map(|p| {
                    let (g, x) = (&g, &x);
                    scope.spawn(move || {
                        let mut exe = CpuBackend::with_threads(2)
                            .executable(g, Arc::new(NoKernels))
                            .unwrap()
                            .with_peers(Arc::new(p));
                        exe.load(0, x).unwrap();
                        assert!(matches!(exe.run_with_stats(), Err(BackendError::Unavailable(_))));
                        exe.run_blocks().unwrap()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        // Process 0 stores y; process 1 stores z (device 2) and r (device 1).
        let outputs: Vec<Vec<usize>> = runs.iter().map(|(b, _)| b.iter().map(|b| b.output).collect()).collect();
        assert_eq!(outputs, [vec![0], vec![1, 2]]);
        assert_eq!(runs[0].0[0].block, whole[0]);
        assert_eq!(runs[1].0[0].block, whole[1]);
        assert_eq!(runs[1].0[1].block, whole[2]);
        // Process 0 holds its rows of x; process 1 the bottom rows and the top replica on
        // device 1 and all of x on device 2 (4 * 6 * 4 bytes).
        assert_eq!(runs[0].1.resident_bytes, vec![48, 0, 0]);
        assert_eq!(runs[1].1.resident_bytes, vec![0, 96, 96]);
        // The message counts as moved by its sender.
        assert_eq!((runs[0].1.bytes_moved, runs[1].1.bytes_moved), (0, 48));
        // Each process has arenas for its own devices only: device 0's (the stitch of y) is
        // process 0's alone.
        let whole = CpuBackend::with_threads(1).executable(&g, Arc::new(NoKernels)).unwrap();
        assert_eq!(whole.arena_plan().device_bytes, [128, 0, 0]);
        assert_eq!((runs[0].1.arena_bytes.clone(), runs[1].1.arena_bytes.clone()), (vec![128, 0, 0], vec![0, 0, 0]));
    }

    /// A process lists the blocks of its own devices as the parts of an input it needs, and
    /// loads from parts that contain them (refusing parts that leave one out); one that runs
    /// every device needs the whole value.
    #[test]
    fn a_process_needs_and_loads_its_own_parts() {
        let g = split_and_replicated();
        let tt = |lo: &[usize], hi: &[usize]| TensorType::new(lo, hi).unwrap();
        let x = HostTensor::random(tt(&[0, 0], &[4, 6]), DType::F32, 5);
        let whole = CpuBackend::with_threads(1).executable(&g, Arc::new(NoKernels)).unwrap();
        assert_eq!(whole.needed_parts(0), None);
        let p1 = processes(&g, &[0, 1, 1], 1000).pop().unwrap();
        let mut exe = CpuBackend::with_threads(1).executable(&g, Arc::new(NoKernels)).unwrap().with_peers(Arc::new(p1));
        // Device 1: the bottom rows and a replica of the top ones; device 2: all of x.
        let (top, bottom) = (tt(&[0, 0], &[2, 6]), tt(&[2, 0], &[4, 6]));
        assert_eq!(exe.needed_parts(0), Some(vec![bottom.clone(), x.ty().clone(), top.clone()]));
        let halves = [x.slice(&top).unwrap(), x.slice(&bottom).unwrap()];
        let e = exe.load_parts(0, &halves).unwrap_err();
        assert!(e.to_string().contains("no part given contains the block [0..4, 0..6]"), "{e}");
        assert!(matches!(exe.load_parts(0, &[x.cast(DType::F16)]), Err(BackendError::Input { .. })));
        exe.load_parts(0, std::slice::from_ref(&x)).unwrap();
        let mut loaded = CpuBackend::with_threads(1).executable(&g, Arc::new(NoKernels)).unwrap();
        loaded.load(0, &x).unwrap();
        assert_eq!(exe.resident[1..], loaded.resident[1..], "device 1 and 2's blocks");
        assert!(exe.resident[0].is_none(), "device 0's block is another process's");
    }

    /// A process whose peer never sends gives up after its patience, naming the transfer it
    /// waited for and who should have sent it; a block of the wrong type is refused.
    #[test]
    fn a_missing_or_misfit_block_is_an_error() {
        let g = split_and_replicated();
        let x = HostTensor::random(TensorType::new(&[0, 0], &[4, 6]).unwrap(), DType::F32, 5);
        let mut procs = processes(&g, &[0, 1, 1], 100);
        let sender = procs.pop().unwrap();
        let p0 = Arc::new(procs.pop().unwrap());
        let mut exe = CpuBackend::with_threads(1).executable(&g, Arc::new(NoKernels)).unwrap().with_peers(p0.clone());
        exe.load(0, &x).unwrap();
        let e = exe.run_blocks().unwrap_err();
        let BackendError::Task { task, label, reason } = &e else { panic!("{e}") };
        assert_eq!((task.0, label.as_str()), (4, "send bottom"));
        assert!(reason.contains("waits for process 1 (device 1)"), "{e}");
        // The right transfer, a block of the wrong rows.
        let top = x.slice(&TensorType::new(&[0, 0], &[2, 6]).unwrap()).unwrap();
        sender.send(TaskId(4), top).unwrap();
        let e = exe.run_blocks().unwrap_err();
        assert!(e.to_string().contains("expected [2..4, 0..6] f32, a block of [0..2, 0..6] f32 arrived"), "{e}");
        // A block for a task that awaits none (the stitch), then the right one.
        sender.to[0].send((TaskId(5), x.clone())).unwrap();
        let e = exe.run_blocks().unwrap_err();
        assert!(e.to_string().contains("awaits none"), "{e}");
        sender.send(TaskId(4), x.slice(&TensorType::new(&[2, 0], &[4, 6]).unwrap()).unwrap()).unwrap();
        let (blocks, _) = exe.run_blocks().unwrap();
        assert_eq!(blocks[0].block, x);
    }

    /// An unknown input, a part outside the input or of another dtype, and an input not
    /// loaded yet are refused with typed errors.
    #[test]
    fn a_write_is_checked() {
        let g = split_and_replicated();
        let tt = |lo: &[usize], hi: &[usize]| TensorType::new(lo, hi).unwrap();
        let mut exe = CpuBackend::with_threads(1).executable(&g, Arc::new(NoKernels)).unwrap();
        let part = HostTensor::random(tt(&[0, 0], &[1, 6]), DType::F32, 2);
        assert!(matches!(exe.write(0, &part), Err(BackendError::NotLoaded { index: 0, .. })));
        exe.load(0, &HostTensor::random(tt(&[0, 0], &[4, 6]), DType::F32, 1)).unwrap();
        assert!(matches!(exe.write(1, &part), Err(BackendError::Input { index: 1, .. })));
        let outside = HostTensor::random(tt(&[3, 0], &[5, 6]), DType::F32, 2);
        assert!(matches!(exe.write(0, &outside), Err(BackendError::Input { index: 0, .. })));
        let err = exe.write(0, &part.cast(DType::F16)).unwrap_err();
        assert!(matches!(&err, BackendError::Input { name, .. } if name == "x"), "{err}");
        assert!(exe.write(0, &part).is_ok());
    }
}

//! The task graph: the backend-independent executable IR (the analogue of the paper's CUDA
//! graph). Per device it holds buffers (blocks with absolute types) and tasks — load a
//! block of a computation input, slice a resident block into an atom, transfer between
//! devices, aggregate with ⊕, stitch atoms into a kernel's input block, run a kernel on one
//! function spec, store a block of a saved output — with explicit dependencies.
//!
//! # Design
//! A graph is built in dependency order: a task may depend only on tasks added before it,
//! so every graph is acyclic by construction and the insertion order is a valid schedule.
//! Each task writes exactly one buffer (or, for a kernel, its output buffers) that nothing
//! else writes, so buffers are single-assignment and a backend may free a buffer as soon
//! as its last reader has finished ([`TaskGraph::last_readers`]).
//!
//! # Memory model
//! Computation inputs (weights) are **resident**: a `Load` buffer
//! ([`TaskGraph::is_resident`]) holds its block of the input on its device for the
//! executable's lifetime — a backend performs the loads once, when the inputs are given,
//! and every run reads them — so it is never freed, and one input's block is loaded at most
//! once per device ([`TaskGraph::push`] refuses a duplicate). Every other buffer is
//! **transient**: written by its task during a run and freed after its last reader. A
//! device's peak is its resident bytes plus the transient peak of the schedule on it
//! ([`MemoryStats`]). [`TaskGraph::push`]
//! checks every invariant a backend relies on (devices, types, dtypes, single writer), so a
//! backend never has to.

pub mod examples;
pub mod fuse;
mod interpret;
mod memory;

use std::collections::HashMap;
use std::fmt;

use crate::{Aggregation, DType, TensorType, check_tiling};

pub use interpret::{check_inputs, check_kernel_outputs, interpret, stitch_outputs};
pub use memory::MemoryStats;

/// A device (a virtual device on the CPU backend, a GPU on CUDA).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DeviceId(pub u32);

/// A buffer of a task graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BufferId(pub u32);

/// A task of a task graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TaskId(pub u32);

impl fmt::Display for DeviceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "device {}", self.0)
    }
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "task {}", self.0)
    }
}

/// A block resident on one device: its absolute type and storage dtype.
#[derive(Clone, Debug, PartialEq)]
pub struct Buffer {
    /// Where it lives.
    pub device: DeviceId,
    /// Its index box, in the coordinates of the whole tensor.
    pub ty: TensorType,
    /// Its storage dtype.
    pub dtype: DType,
}

impl Buffer {
    /// Bytes of storage.
    pub fn bytes(&self) -> usize {
        self.ty.volume() * self.dtype.size_bytes()
    }
}

/// What a task does. Every task writes only its destination buffer(s).
#[derive(Clone, Debug, PartialEq)]
pub enum Task {
    /// Fills `dst` with the block of computation input `input` that `dst`'s type selects.
    Load {
        /// Index of the computation input (in the graph's input list).
        input: usize,
        /// The block to fill.
        dst: BufferId,
    },
    /// Copies the part of `src` that `dst`'s type selects (same device).
    Slice {
        /// The resident block.
        src: BufferId,
        /// The sub-block.
        dst: BufferId,
    },
    /// Copies `src` to `dst` on another device (same type and dtype).
    Transfer {
        /// The block sent.
        src: BufferId,
        /// Its copy on the destination device.
        dst: BufferId,
    },
    /// `dst = srcs[0] ⊕ srcs[1] ⊕ ...` (same device, type and dtype).
    Aggregate {
        /// The pieces, at least two.
        srcs: Vec<BufferId>,
        /// The result.
        dst: BufferId,
        /// The ⊕.
        agg: Aggregation,
    },
    /// Stitches `srcs`, which tile `dst`'s type, into `dst` (same device and dtype).
    Stitch {
        /// The pieces.
        srcs: Vec<BufferId>,
        /// The whole block.
        dst: BufferId,
    },
    /// Runs kernel `kernel` (an index into the executable's kernel table) on one function
    /// spec: the inputs' and outputs' types are the function spec's boxes (same device).
    Kernel {
        /// Which kernel.
        kernel: usize,
        /// The input blocks.
        inputs: Vec<BufferId>,
        /// The output blocks it writes.
        outputs: Vec<BufferId>,
    },
    /// Hands `src` to the host as (part of) saved output `output`; the blocks stored for one
    /// output tile it.
    Store {
        /// Index of the saved output (in the graph's output list).
        output: usize,
        /// The block.
        src: BufferId,
    },
}

impl Task {
    /// The buffers the task reads.
    pub fn reads(&self) -> Vec<BufferId> {
        self.read_buffers().to_vec()
    }

    /// The buffers the task writes.
    pub fn writes(&self) -> Vec<BufferId> {
        self.written_buffers().to_vec()
    }

    /// [`Task::reads`] without allocating: graph building and statistics look at every
    /// task's buffers several times, so they borrow them.
    pub fn read_buffers(&self) -> &[BufferId] {
        match self {
            Task::Load { .. } => &[],
            Task::Slice { src, .. } | Task::Transfer { src, .. } | Task::Store { src, .. } => std::slice::from_ref(src),
            Task::Aggregate { srcs, .. } | Task::Stitch { srcs, .. } => srcs,
            Task::Kernel { inputs, .. } => inputs,
        }
    }

    /// [`Task::writes`] without allocating.
    pub fn written_buffers(&self) -> &[BufferId] {
        match self {
            Task::Load { dst, .. }
            | Task::Slice { dst, .. }
            | Task::Transfer { dst, .. }
            | Task::Aggregate { dst, .. }
            | Task::Stitch { dst, .. } => std::slice::from_ref(dst),
            Task::Kernel { outputs, .. } => outputs,
            Task::Store { .. } => &[],
        }
    }

    /// A short name of the task's kind.
    pub fn kind(&self) -> &'static str {
        match self {
            Task::Load { .. } => "load",
            Task::Slice { .. } => "slice",
            Task::Transfer { .. } => "transfer",
            Task::Aggregate { .. } => "aggregate",
            Task::Stitch { .. } => "stitch",
            Task::Kernel { .. } => "kernel",
            Task::Store { .. } => "store",
        }
    }
}

/// A task and the tasks it waits for.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    /// What it does.
    pub task: Task,
    /// Tasks that must finish first (all added earlier).
    pub deps: Vec<TaskId>,
    /// A readable label (operator and function spec, atom, ...).
    pub label: String,
}

/// A tensor that crosses the graph's boundary: a computation input or a saved output.
#[derive(Clone, Debug, PartialEq)]
pub struct Boundary {
    /// Its name.
    pub name: String,
    /// Its whole (zero-bounded) type.
    pub ty: TensorType,
    /// Its dtype.
    pub dtype: DType,
}

/// A malformed task: what is wrong with it, for the compiler author.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("task `{label}` ({kind}): {reason}")]
pub struct TaskGraphError {
    /// The task's label.
    pub label: String,
    /// Its kind.
    pub kind: &'static str,
    /// What is wrong.
    pub reason: String,
}

/// The executable IR: devices, buffers, tasks in a valid schedule order, and the graph's
/// inputs and outputs.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TaskGraph {
    devices: usize,
    buffers: Vec<Buffer>,
    writer: Vec<Option<TaskId>>,
    nodes: Vec<Node>,
    inputs: Vec<Boundary>,
    outputs: Vec<Boundary>,
    /// Every `Load` so far, by (input, device, block): its destination buffer. A map, not
    /// a list, so that refusing a duplicate resident copy costs a lookup per load instead
    /// of a scan of every earlier load (quadratic in the loads of a many-layer graph).
    loads: HashMap<(usize, DeviceId, TensorType), BufferId>,
}

impl TaskGraph {
    /// An empty graph over `devices` devices with the given inputs and saved outputs.
    pub fn new(devices: usize, inputs: Vec<Boundary>, outputs: Vec<Boundary>) -> Self {
        Self { devices, inputs, outputs, ..Self::default() }
    }

    /// Number of devices.
    pub fn devices(&self) -> usize {
        self.devices
    }

    /// The computation inputs.
    pub fn inputs(&self) -> &[Boundary] {
        &self.inputs
    }

    /// The saved outputs.
    pub fn outputs(&self) -> &[Boundary] {
        &self.outputs
    }

    /// Every buffer.
    pub fn buffers(&self) -> &[Buffer] {
        &self.buffers
    }

    /// The buffer `id`.
    pub fn buffer(&self, id: BufferId) -> &Buffer {
        &self.buffers[id.0 as usize]
    }

    /// Every task, in a valid schedule order.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// The task that writes `id`, once it has been added.
    pub fn writer(&self, id: BufferId) -> Option<TaskId> {
        self.writer.get(id.0 as usize).copied().flatten()
    }

    /// Whether `id` is resident: written by a `Load`, so it holds a block of a computation
    /// input for the executable's lifetime and is never freed.
    pub fn is_resident(&self, id: BufferId) -> bool {
        self.writer(id).is_some_and(|t| matches!(self.nodes[t.0 as usize].task, Task::Load { .. }))
    }

    /// Declares a buffer; it must then be written by exactly one task.
    pub fn add_buffer(&mut self, device: DeviceId, ty: TensorType, dtype: DType) -> BufferId {
        self.buffers.push(Buffer { device, ty, dtype });
        self.writer.push(None);
        BufferId(self.buffers.len() as u32 - 1)
    }

    /// Adds a task after checking it; `deps` are completed by the writers of the buffers it
    /// reads, so callers name only extra ordering constraints (usually none).
    ///
    /// Refuses a malformed task, and a second `Load` of the same input into a buffer of the
    /// same device and block (a duplicate resident copy: reuse the first buffer instead).
    pub fn push(&mut self, task: Task, deps: &[TaskId], label: impl Into<String>) -> Result<TaskId, TaskGraphError> {
        let label = label.into();
        let id = TaskId(self.nodes.len() as u32);
        self.check(&task, &label)?;
        let mut all: Vec<TaskId> = deps.to_vec();
        for &b in task.read_buffers() {
            all.push(self.writer(b).expect("checked: every read buffer has a writer"));
        }
        if let Some(bad) = all.iter().find(|d| d.0 >= id.0) {
            return Err(TaskGraphError {
                label,
                kind: task.kind(),
                reason: format!("depends on {bad}, not added yet"),
            });
        }
        all.sort();
        all.dedup();
        for &b in task.written_buffers() {
            self.writer[b.0 as usize] = Some(id);
        }
        if let Task::Load { input, dst } = &task {
            let buf = &self.buffers[dst.0 as usize];
            self.loads.insert((*input, buf.device, buf.ty.clone()), *dst);
        }
        self.nodes.push(Node { task, deps: all, label });
        Ok(id)
    }

    /// Checks `task` before it is pushed: its buffers ([`TaskGraph::check_buffers`]) and
    /// what its kind asks of them ([`TaskGraph::check_kind`]); the error names the task.
    fn check(&self, task: &Task, label: &str) -> Result<(), TaskGraphError> {
        self.check_buffers(task).and_then(|()| self.check_kind(task)).map_err(|reason| TaskGraphError {
            label: label.to_string(),
            kind: task.kind(),
            reason,
        })
    }

    /// Every buffer `task` names exists on a device of the graph, every buffer it reads has
    /// been written, and none it writes has (single assignment).
    fn check_buffers(&self, task: &Task) -> Result<(), String> {
        for &b in task.read_buffers().iter().chain(task.written_buffers()) {
            if b.0 as usize >= self.buffers.len() {
                return Err(format!("unknown buffer {}", b.0));
            }
            if self.buffer(b).device.0 as usize >= self.devices {
                return Err(format!(
                    "buffer {} is on {}, the graph has {} devices",
                    b.0,
                    self.buffer(b).device,
                    self.devices
                ));
            }
        }
        for &b in task.read_buffers() {
            if self.writer(b).is_none() {
                return Err(format!("reads buffer {} before any task writes it", b.0));
            }
        }
        for &b in task.written_buffers() {
            if self.writer(b).is_some() {
                return Err(format!("buffer {} is already written", b.0));
            }
        }
        Ok(())
    }

    /// What `task`'s kind asks of its buffers: a Load a block of its input not yet resident
    /// there, slices, aggregations, stitches and kernels on one device, a transfer between
    /// two, blocks of matching types and dtypes, and a Store a block of its output.
    fn check_kind(&self, task: &Task) -> Result<(), String> {
        let buf = |b: &BufferId| self.buffer(*b);
        let same_device = |bs: &[BufferId]| bs.windows(2).all(|w| buf(&w[0]).device == buf(&w[1]).device);
        match task {
            Task::Load { input, dst } => match self.inputs.get(*input) {
                None => Err(format!("unknown input {input}")),
                Some(i) if !buf(dst).ty.is_projection_of(&i.ty) || buf(dst).dtype != i.dtype => Err(format!(
                    "block {} {} is not a block of input `{}` {} {}",
                    buf(dst).ty,
                    buf(dst).dtype,
                    i.name,
                    i.ty,
                    i.dtype
                )),
                Some(i) => match self.loads.get(&(*input, buf(dst).device, buf(dst).ty.clone())) {
                    Some(b) => Err(format!(
                        "block {} of input `{}` is already resident on {} as buffer {}",
                        buf(dst).ty,
                        i.name,
                        buf(dst).device,
                        b.0
                    )),
                    None => Ok(()),
                },
            },
            Task::Slice { src, dst } => {
                if !same_device(&[*src, *dst]) || buf(src).dtype != buf(dst).dtype {
                    Err("slice across devices or dtypes".into())
                } else if !buf(dst).ty.is_projection_of(&buf(src).ty) {
                    Err(format!("{} is not inside {}", buf(dst).ty, buf(src).ty))
                } else {
                    Ok(())
                }
            }
            Task::Transfer { src, dst } => {
                if buf(src).device == buf(dst).device {
                    Err(format!("transfer within {}", buf(src).device))
                } else if buf(src).ty != buf(dst).ty || buf(src).dtype != buf(dst).dtype {
                    Err(format!("transfer changes the block: {} to {}", buf(src).ty, buf(dst).ty))
                } else {
                    Ok(())
                }
            }
            Task::Aggregate { srcs, dst, .. } => {
                let mut all = srcs.clone();
                all.push(*dst);
                if srcs.len() < 2 {
                    Err(format!("aggregates {} pieces", srcs.len()))
                } else if !same_device(&all) {
                    Err("aggregates across devices".into())
                } else if all.iter().any(|b| buf(b).ty != buf(dst).ty || buf(b).dtype != buf(dst).dtype) {
                    Err("aggregates blocks of different types".into())
                } else {
                    Ok(())
                }
            }
            Task::Stitch { srcs, dst } => {
                let mut all = srcs.clone();
                all.push(*dst);
                if !same_device(&all) || all.iter().any(|b| buf(b).dtype != buf(dst).dtype) {
                    return Err("stitches across devices or dtypes".into());
                }
                let parts: Vec<TensorType> = srcs.iter().map(|b| buf(b).ty.clone()).collect();
                check_tiling(&buf(dst).ty, &parts).map_err(|e| e.to_string())
            }
            Task::Kernel { inputs, outputs, .. } => {
                let all: Vec<BufferId> = inputs.iter().chain(outputs).copied().collect();
                if outputs.is_empty() {
                    Err("a kernel with no output".into())
                } else if !same_device(&all) {
                    Err("kernel buffers on several devices".into())
                } else {
                    Ok(())
                }
            }
            Task::Store { output, src } => match self.outputs.get(*output) {
                None => Err(format!("unknown output {output}")),
                Some(o) if !buf(src).ty.is_projection_of(&o.ty) || buf(src).dtype != o.dtype => {
                    Err(format!("block {} is not a block of output `{}` {}", buf(src).ty, o.name, o.ty))
                }
                _ => Ok(()),
            },
        }
    }

    /// For each buffer, the last task (in schedule order) that reads it, if any: after it,
    /// a transient buffer can be freed (a resident one never is).
    pub fn last_readers(&self) -> Vec<Option<TaskId>> {
        let mut last = vec![None; self.buffers.len()];
        for (i, n) in self.nodes.iter().enumerate() {
            for &b in n.task.read_buffers() {
                last[b.0 as usize] = Some(TaskId(i as u32));
            }
        }
        last
    }

    /// Task counts, bytes moved between devices, and memory per device: the resident bytes
    /// (every `Load` buffer, held for the executable's lifetime) plus the transient peak when
    /// the other tasks run one at a time in schedule order, each transient buffer allocated
    /// by its writer and freed after its last reader.
    pub fn stats(&self) -> MemoryStats {
        memory::stats(self)
    }

    /// Checks that every declared buffer is written and every output is covered by stored
    /// blocks that tile it.
    pub fn check_complete(&self) -> Result<(), TaskGraphError> {
        let fail = |reason: String| Err(TaskGraphError { label: "graph".into(), kind: "graph", reason });
        if let Some(b) = self.writer.iter().position(Option::is_none) {
            return fail(format!("buffer {b} is never written"));
        }
        for (o, out) in self.outputs.iter().enumerate() {
            let blocks: Vec<TensorType> = self
                .nodes
                .iter()
                .filter_map(|n| match n.task {
                    Task::Store { output, src } if output == o => Some(self.buffer(src).ty.clone()),
                    _ => None,
                })
                .collect();
            if let Err(e) = check_tiling(&out.ty, &blocks) {
                return fail(format!("output `{}`: {e}", out.name));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::examples::two_device_gather;
    use super::*;

    fn tt(lo: &[usize], hi: &[usize]) -> TensorType {
        TensorType::new(lo, hi).unwrap()
    }

    #[test]
    fn dependencies_follow_the_buffers() {
        let g = two_device_gather();
        assert_eq!(g.nodes()[2].deps, vec![TaskId(1)]);
        assert_eq!(g.nodes()[3].deps, vec![TaskId(0), TaskId(2)]);
        assert!(g.check_complete().is_ok());
        assert_eq!(g.last_readers()[1], Some(TaskId(2)));
    }

    #[test]
    fn stats_count_bytes_and_peaks() {
        let s = two_device_gather().stats();
        assert_eq!(s.bytes_moved, 8);
        assert_eq!(s.tasks["transfer"], 1);
        // Loads a (device 0) and b (device 1) are resident, 8 B each; device 0 holds the
        // transient b0 (8 B) and y (16 B) at once.
        assert_eq!(s.resident_bytes, vec![8, 8]);
        assert_eq!(s.transient_peak_bytes, vec![24, 0]);
        assert_eq!(s.peak_bytes, vec![32, 8]);
    }

    /// Device 0 loads `w` (16 B) and `x` (8 B, read by nothing), runs two kernels on `w`,
    /// aggregates their results and stores the sum; device 1 loads half of `w` (8 B).
    fn two_readers() -> TaskGraph {
        let w = TensorType::zero_bounded(&[4]);
        let io = |n: &str, ty: &TensorType| Boundary { name: n.into(), ty: ty.clone(), dtype: DType::F32 };
        let mut g = TaskGraph::new(2, vec![io("w", &w), io("x", &tt(&[0], &[2]))], vec![io("y", &w)]);
        let w0 = g.add_buffer(DeviceId(0), w.clone(), DType::F32);
        let x0 = g.add_buffer(DeviceId(0), tt(&[0], &[2]), DType::F32);
        let a = g.add_buffer(DeviceId(0), w.clone(), DType::F32);
        let b = g.add_buffer(DeviceId(0), w.clone(), DType::F32);
        let c = g.add_buffer(DeviceId(0), w.clone(), DType::F32);
        let w1 = g.add_buffer(DeviceId(1), tt(&[0], &[2]), DType::F32);
        g.push(Task::Load { input: 0, dst: w0 }, &[], "load w").unwrap();
        g.push(Task::Load { input: 1, dst: x0 }, &[], "load x").unwrap();
        g.push(Task::Kernel { kernel: 0, inputs: vec![w0], outputs: vec![a] }, &[], "double a").unwrap();
        g.push(Task::Kernel { kernel: 0, inputs: vec![w0], outputs: vec![b] }, &[], "double b").unwrap();
        g.push(Task::Aggregate { srcs: vec![a, b], dst: c, agg: crate::Aggregation::Sum }, &[], "sum").unwrap();
        g.push(Task::Store { output: 0, src: c }, &[], "store").unwrap();
        g.push(Task::Load { input: 0, dst: w1 }, &[], "load half w").unwrap();
        g
    }

    #[test]
    fn loads_are_resident_and_the_rest_transient() {
        let g = two_readers();
        assert!(g.is_resident(BufferId(0)) && g.is_resident(BufferId(1)) && g.is_resident(BufferId(5)));
        assert!(!g.is_resident(BufferId(2)) && !g.is_resident(BufferId(4)));
        let s = g.stats();
        // Device 0: w (16) + x (8) resident; a (16), b (16) and c (16) live at once during
        // the aggregation, then a and b are freed; w stays though both kernels read it.
        // Device 1: half of w (8), nothing transient.
        assert_eq!(s.resident_bytes, vec![24, 8]);
        assert_eq!(s.transient_peak_bytes, vec![48, 0]);
        assert_eq!(s.peak_bytes, vec![72, 8]);
        let w = crate::HostTensor::random(TensorType::zero_bounded(&[4]), DType::F32, 5);
        let x = crate::HostTensor::random(tt(&[0], &[2]), DType::F32, 6);
        let y = interpret(&g, &Doubler, &[w.clone(), x]).unwrap();
        let want: Vec<f32> = w.to_f32().iter().map(|v| 2.0 * v + 2.0 * v).collect();
        assert_eq!(y[0].to_f32(), want);
    }

    #[test]
    fn a_second_resident_copy_is_refused() {
        let mut g = two_readers();
        let dup = g.add_buffer(DeviceId(0), TensorType::zero_bounded(&[4]), DType::F32);
        let err = g.push(Task::Load { input: 0, dst: dup }, &[], "again").unwrap_err();
        assert!(err.reason.contains("already resident on device 0 as buffer 0"), "{err}");
        // Another block of the input, or the same block on another device, is a new copy.
        let half = g.add_buffer(DeviceId(0), tt(&[0], &[2]), DType::F32);
        g.push(Task::Load { input: 0, dst: half }, &[], "half on 0").unwrap();
        let whole = g.add_buffer(DeviceId(1), TensorType::zero_bounded(&[4]), DType::F32);
        g.push(Task::Load { input: 0, dst: whole }, &[], "whole on 1").unwrap();
    }

    /// Kernel 0 doubles its input; anything else fails.
    struct Doubler;

    impl crate::KernelLibrary for Doubler {
        fn run(
            &self,
            kernel: usize,
            inputs: &[crate::HostTensor],
            outputs: &[(TensorType, DType)],
        ) -> Result<Vec<crate::HostTensor>, String> {
            if kernel != 0 {
                return Err("no such kernel".into());
            }
            let data = inputs[0].to_f32().iter().map(|x| 2.0 * x).collect();
            crate::HostTensor::from_f32(outputs[0].0.clone(), outputs[0].1, data)
                .map_err(|e| e.to_string())
                .map(|t| vec![t])
        }

        fn name(&self, kernel: usize) -> String {
            format!("doubler {kernel}")
        }
    }

    #[test]
    fn interpreting_a_gather_returns_the_input() {
        let g = two_device_gather();
        let x = crate::HostTensor::random(TensorType::zero_bounded(&[4]), DType::F32, 3);
        assert_eq!(interpret(&g, &Doubler, std::slice::from_ref(&x)).unwrap(), vec![x.clone()]);
        let wrong = crate::HostTensor::random(TensorType::zero_bounded(&[5]), DType::F32, 3);
        assert!(matches!(interpret(&g, &Doubler, &[wrong]), Err(crate::BackendError::Input { index: 0, .. })));
        assert!(matches!(interpret(&g, &Doubler, &[]), Err(crate::BackendError::Input { .. })));
    }

    #[test]
    fn kernel_errors_name_the_task() {
        let whole = TensorType::zero_bounded(&[2]);
        let io = |n: &str| Boundary { name: n.into(), ty: whole.clone(), dtype: DType::F32 };
        let mut g = TaskGraph::new(1, vec![io("x")], vec![io("y")]);
        let a = g.add_buffer(DeviceId(0), whole.clone(), DType::F32);
        let b = g.add_buffer(DeviceId(0), whole.clone(), DType::F32);
        let c = g.add_buffer(DeviceId(0), whole.clone(), DType::F32);
        g.push(Task::Load { input: 0, dst: a }, &[], "load").unwrap();
        g.push(Task::Kernel { kernel: 0, inputs: vec![a], outputs: vec![b] }, &[], "double").unwrap();
        g.push(Task::Kernel { kernel: 1, inputs: vec![b], outputs: vec![c] }, &[], "broken").unwrap();
        g.push(Task::Store { output: 0, src: c }, &[], "store").unwrap();
        let x = crate::HostTensor::random(whole, DType::F32, 1);
        let err = interpret(&g, &Doubler, &[x]).unwrap_err().to_string();
        assert!(err.contains("broken") && err.contains("no such kernel") && err.contains("task 2"), "{err}");
    }

    #[test]
    fn malformed_tasks_are_refused() {
        let mut g = two_device_gather();
        let c = g.add_buffer(DeviceId(0), tt(&[0], &[2]), DType::F32);
        let d = g.add_buffer(DeviceId(1), tt(&[0], &[2]), DType::F16);
        let e = g.add_buffer(DeviceId(5), tt(&[0], &[2]), DType::F32);
        let err = g.push(Task::Transfer { src: BufferId(0), dst: c }, &[], "same device").unwrap_err();
        assert!(err.reason.contains("within"), "{err}");
        assert!(g.push(Task::Transfer { src: BufferId(0), dst: d }, &[], "dtype").is_err());
        assert!(g.push(Task::Load { input: 0, dst: e }, &[], "device").unwrap_err().reason.contains("2 devices"));
        assert!(
            g.push(Task::Slice { src: c, dst: BufferId(0) }, &[], "unwritten").unwrap_err().reason.contains("before")
        );
        assert!(
            g.push(Task::Load { input: 0, dst: BufferId(0) }, &[], "twice").unwrap_err().reason.contains("already")
        );
        assert!(g.push(Task::Load { input: 3, dst: c }, &[], "input").is_err());
        assert!(g.push(Task::Load { input: 0, dst: c }, &[TaskId(99)], "future").is_err());
        let mut h = two_device_gather();
        h.add_buffer(DeviceId(0), tt(&[0], &[1]), DType::F32);
        assert!(h.check_complete().unwrap_err().reason.contains("never written"));
    }
}

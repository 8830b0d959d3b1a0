//! A host emulator of lowered operations, with the GPU executable's structure: prepared once
//! ([`Emulator::new`]), inputs loaded once into resident regions ([`Emulator::load`]), run
//! any number of times ([`Emulator::run`]). It runs [`Lowered`] operations in schedule order,
//! or ([`Emulator::run_interleaved`]) in a random order that respects only what a GPU
//! guarantees (each stream's issue order and the event waits), on byte arrays laid out
//! exactly as on the GPUs (one pool and one resident region per GPU at the stream plan's
//! offsets, an aliased transfer's destination sharing its source's bytes and issuing nothing,
//! pinned outputs, constant tables), each operation computing what its CUDA kernel computes
//! ([`crate::work::DeviceWork::emulate`], beside the code that issues it). It checks the lowering, the pool and resident plans and the
//! GEMM mapping against the reference on machines without a GPU; the CUDA C itself is
//! checked by the GPU tests. It also checks the kernel variants [`crate::addressing`] chose
//! against the layout: a vector-path pointer must be 16-byte aligned, a 32-bit kernel must
//! never compute an offset past 2³¹ − 1 (it panics otherwise, as for a resident write).

use std::collections::HashMap;

use einsum_core::taskgraph::{TaskGraph, TaskId};
use einsum_core::{BackendError, DType, HostTensor};

use crate::addressing::{Access, Index, NARROW_LIMIT, VECTOR_BYTES, offsets};
use crate::exchange_steps::Direction;
use crate::executable::from_bytes;
use crate::inputs::InputSlots;
use crate::lower::{Dims, Lowered, Ptr, Space};
use crate::rank_schedule::RankSchedule;
use crate::stream_plan::{DEFAULT_STREAMS_PER_GPU, PlanOptions, StreamPlan};

/// The emulated GPUs' memory: every space as bytes, laid out as on the devices. Device work
/// reads and writes it through symbolic pointers ([`EmulatedMemory::ld`], [`EmulatedMemory::st`]),
/// as its kernels do through addresses.
pub struct EmulatedMemory {
    pools: Vec<Vec<u8>>,
    resident: Vec<Vec<u8>>,
    outputs: Vec<Vec<u8>>,
    consts: Vec<Vec<u8>>,
    plan: StreamPlan,
    buffer_device: Vec<usize>,
}

impl EmulatedMemory {
    /// The array and byte offset a pointer addresses. A run only reads the resident regions:
    /// an operation writing one is a bug in the resident plan, and panics here.
    fn locate(&mut self, p: Ptr, write: bool) -> (&mut Vec<u8>, usize) {
        let s = &self.plan;
        match p.space {
            Space::Buffer(b) => match s.resident.location(b as usize) {
                Some((gpu, offset)) => {
                    assert!(!write, "a run writes resident buffer {b}");
                    (&mut self.resident[gpu], offset + p.offset)
                }
                None => {
                    let gpu = s.gpu_of_device[self.buffer_device[b as usize]];
                    (&mut self.pools[gpu], s.buffer_offset[b as usize] + p.offset)
                }
            },
            Space::Scratch { task, index } => {
                let gpu = s.gpu_of_stream(s.stream[task]);
                (&mut self.pools[gpu], s.scratch_offset[task][index] + p.offset)
            }
            Space::HostOutput(o) => (&mut self.outputs[o], p.offset),
            Space::Const(c) => (&mut self.consts[c], p.offset),
        }
    }

    /// Element `i` of dtype `dt` at `p`, as f32.
    pub fn ld(&mut self, p: Ptr, i: usize, dt: DType) -> f32 {
        let (v, base) = self.locate(p, false);
        let at = base + i * dt.size_bytes();
        match dt {
            DType::F32 => f32::from_ne_bytes(v[at..at + 4].try_into().expect("4 bytes")),
            DType::F16 => half::f16::from_bits(u16::from_ne_bytes([v[at], v[at + 1]])).to_f32(),
            DType::BF16 => half::bf16::from_bits(u16::from_ne_bytes([v[at], v[at + 1]])).to_f32(),
            DType::I32 => i32::from_ne_bytes(v[at..at + 4].try_into().expect("4 bytes")) as f32,
        }
    }

    /// Stores `x` rounded to dtype `dt` as element `i` at `p`.
    pub fn st(&mut self, p: Ptr, i: usize, dt: DType, x: f32) {
        let (v, base) = self.locate(p, true);
        let at = base + i * dt.size_bytes();
        match dt {
            DType::F32 => v[at..at + 4].copy_from_slice(&x.to_ne_bytes()),
            DType::F16 => v[at..at + 2].copy_from_slice(&half::f16::from_f32(x).to_bits().to_ne_bytes()),
            DType::BF16 => v[at..at + 2].copy_from_slice(&half::bf16::from_f32(x).to_bits().to_ne_bytes()),
            DType::I32 => v[at..at + 4].copy_from_slice(&(x as i32).to_ne_bytes()),
        }
    }

    /// The `i32` at index `i` from `p` (a constant table's entry).
    pub fn ld_i32(&mut self, p: Ptr, i: usize) -> i32 {
        let (v, base) = self.locate(p, false);
        let at = base + 4 * i;
        i32::from_ne_bytes(v[at..at + 4].try_into().expect("4 bytes"))
    }

    /// `len` bytes from `offset` bytes past `p`.
    pub fn read_bytes(&mut self, p: Ptr, offset: usize, len: usize) -> Vec<u8> {
        let (v, base) = self.locate(p, false);
        v[base + offset..base + offset + len].to_vec()
    }

    /// Writes `data` at `offset` bytes past `p`.
    pub fn write_bytes(&mut self, p: Ptr, offset: usize, data: &[u8]) {
        let (w, base) = self.locate(p, true);
        w[base + offset..base + offset + data.len()].copy_from_slice(data);
    }
}

/// Checks a vector-path decision against the emulated layout: every pointer 16-byte aligned
/// (pool, resident and output bases are aligned on the device, so the emulated byte offset is
/// the device address modulo 16).
pub(crate) fn check_vector(m: &mut EmulatedMemory, ptrs: &[Ptr]) {
    for p in ptrs {
        let (_, at) = m.locate(*p, false);
        assert_eq!(at % VECTOR_BYTES, 0, "a vector-path pointer {p:?} is not {VECTOR_BYTES}-byte aligned");
    }
}

/// The index width of a copy or binary operation over the tensors at `ptrs`, after checking a
/// vector-path choice: rank 1, unit strides in every tensor, aligned pointers. (The vector
/// kernels' index arithmetic is 64-bit.)
pub(crate) fn checked_index(m: &mut EmulatedMemory, access: Access, d: &Dims, ptrs: &[Ptr]) -> Index {
    match access {
        Access::Vector => {
            let strides = [d.s0[0], d.s1[0], d.s2[0]];
            assert!(
                d.rank == 1 && strides[..ptrs.len()].iter().all(|&s| s == 1),
                "a vector-path space is not contiguous: {d:?}"
            );
            check_vector(m, ptrs);
            Index::I64
        }
        Access::Strided(index) => index,
    }
}

/// The offsets of element `i` of `d`, checked against the index width the lowering chose: a
/// 32-bit kernel must never compute an index or offset past [`NARROW_LIMIT`].
pub(crate) fn offsets_of(d: &Dims, i: usize, index: Index) -> [usize; 3] {
    let o = offsets(d, i);
    if index == Index::I32 {
        let limit = NARROW_LIMIT as usize;
        assert!(i <= limit && o.iter().all(|&x| x <= limit), "a 32-bit kernel reaches {o:?} at {i} in {d:?}");
    }
    o
}

/// Writes an uploaded block into the emulated resident regions (`resident[gpu]`, at `offset`).
fn copy_into(resident: &mut [Vec<u8>]) -> impl FnMut(usize, usize, &[u8]) -> Result<(), String> + '_ {
    |gpu, offset, bytes| {
        resident[gpu][offset..offset + bytes.len()].copy_from_slice(bytes);
        Ok(())
    }
}

/// A lowered task graph prepared on emulated GPUs; see the module docs.
pub struct Emulator<'a> {
    graph: &'a TaskGraph,
    lowered: &'a Lowered,
    slots: InputSlots,
    memory: EmulatedMemory,
    /// For every task, its id in the job's graph (the key of a send's bytes in
    /// [`run_ranks`]); `None` for one process.
    original: Option<&'a [TaskId]>,
}

impl<'a> Emulator<'a> {
    /// Prepares `lowered` (the lowering of `graph`) on `gpus` emulated GPUs with the
    /// default stream budget ([`DEFAULT_STREAMS_PER_GPU`], as [`crate::CudaOptions`]'s).
    pub fn new(graph: &'a TaskGraph, lowered: &'a Lowered, gpus: usize) -> Emulator<'a> {
        Emulator::with_streams(graph, lowered, gpus, DEFAULT_STREAMS_PER_GPU)
    }

    /// Prepares `lowered` (the lowering of `graph`) on `gpus` emulated GPUs with
    /// `streams_per_gpu` streams per GPU: plans the streams, pools and resident regions,
    /// fills the pools with garbage (`0xff`: a read before a write shows up as NaN), uploads
    /// the constant tables.
    pub fn with_streams(
        graph: &'a TaskGraph,
        lowered: &'a Lowered,
        gpus: usize,
        streams_per_gpu: usize,
    ) -> Emulator<'a> {
        Emulator::with_plan(graph, lowered, StreamPlan::new(graph, gpus, streams_per_gpu, &lowered.scratch), None)
    }

    /// Prepares one rank's share of a multi-process job (`lowered` the lowering of
    /// `schedule`, [`crate::lower::lower_rank`]) on `gpus` emulated GPUs with
    /// `streams_per_gpu` streams per GPU, as [`crate::CudaExecutable::prepare_rank`] plans it.
    /// A share that exchanges with other ranks runs only together with them, in
    /// [`run_ranks`].
    pub fn for_rank(
        schedule: &'a RankSchedule,
        lowered: &'a Lowered,
        gpus: usize,
        streams_per_gpu: usize,
    ) -> Emulator<'a> {
        let options = PlanOptions { streams_per_gpu, ..PlanOptions::default() };
        let plan = StreamPlan::for_rank(schedule, gpus, &options, &lowered.scratch);
        Emulator::with_plan(&schedule.graph, lowered, plan, Some(&schedule.original))
    }

    fn with_plan(
        graph: &'a TaskGraph,
        lowered: &'a Lowered,
        plan: StreamPlan,
        original: Option<&'a [TaskId]>,
    ) -> Emulator<'a> {
        let memory = EmulatedMemory {
            pools: plan.pool_bytes.iter().map(|&b| vec![0xffu8; b]).collect(),
            resident: plan.resident.bytes.iter().map(|&b| vec![0xffu8; b]).collect(),
            outputs: graph.outputs().iter().map(|b| vec![0u8; b.ty.volume() * b.dtype.size_bytes()]).collect(),
            consts: lowered.consts.iter().map(|(_, c)| c.bytes()).collect(),
            buffer_device: graph.buffers().iter().map(|b| b.device.0 as usize).collect(),
            plan,
        };
        Emulator { graph, lowered, slots: InputSlots::new(graph.inputs()), memory, original }
    }

    /// The stream plan, with its pool and resident plans.
    pub fn stream_plan(&self) -> &StreamPlan {
        &self.memory.plan
    }

    /// Loads input `input` into the resident regions, as [`crate::CudaExecutable::load`] does.
    pub fn load(&mut self, input: usize, value: &HostTensor) -> Result<(), BackendError> {
        let EmulatedMemory { plan, resident, .. } = &mut self.memory;
        self.slots.load(&plan.resident, input, value, copy_into(resident))
    }

    /// Overwrites the part `part` of loaded input `input` in the resident regions, as
    /// [`crate::CudaExecutable::write`] does.
    pub fn write(&mut self, input: usize, part: &HostTensor) -> Result<(), BackendError> {
        let EmulatedMemory { plan, resident, .. } = &mut self.memory;
        self.slots.write(&plan.resident, input, part, copy_into(resident))
    }

    /// Loads every input, in the task graph's order.
    pub fn load_all(&mut self, inputs: &[HostTensor]) -> Result<(), BackendError> {
        let EmulatedMemory { plan, resident, .. } = &mut self.memory;
        self.slots.load_all(&plan.resident, inputs, copy_into(resident))
    }

    /// Runs once on the loaded inputs and returns the whole saved outputs; fails naming the
    /// first input not loaded.
    pub fn run(&mut self) -> Result<Vec<HostTensor>, BackendError> {
        self.slots.require_all()?;
        self.alone("an emulated run")?;
        self.run_tasks(0..self.lowered.ops.len());
        Ok(self.outputs())
    }

    /// Refuses `operation` on a rank's share that exchanges blocks with other ranks: it runs
    /// only together with them ([`run_ranks`]).
    fn alone(&self, operation: &str) -> Result<(), BackendError> {
        if self.memory.plan.steps.is_empty() {
            return Ok(());
        }
        Err(BackendError::Device {
            operation: operation.into(),
            reason: "this rank's share exchanges blocks with other ranks: run the ranks together (`run_ranks`)".into(),
        })
    }

    /// Runs the operations of tasks `tasks` in schedule order (other ranks' tasks, sends and
    /// receives have none).
    fn run_tasks(&mut self, tasks: std::ops::Range<usize>) {
        for t in tasks {
            if !self.memory.plan.elided[t] {
                for op in &self.lowered.ops[t] {
                    op.work().emulate(&mut self.memory);
                }
            }
        }
    }

    /// The position of this rank's first operation of step `step`, if it has any.
    fn step_start(&self, step: usize) -> Option<usize> {
        self.memory.plan.steps.get(step)?.first().map(|o| o.op.task.0 as usize)
    }

    /// Step `step`'s sends: the bytes of every source, by the transfer's id in the job's
    /// graph, into `mailbox`.
    fn send(&mut self, step: usize, mailbox: &mut HashMap<TaskId, Vec<u8>>) {
        let original = self.original.expect("a rank's share");
        for o in self.memory.plan.steps[step].clone() {
            if o.op.direction == Direction::Send {
                let bytes = self.memory.read_bytes(Ptr::at(Space::Buffer(o.buffer.0)), 0, o.op.bytes);
                mailbox.insert(original[o.op.task.0 as usize], bytes);
            }
        }
    }

    /// Step `step`'s receives, from `mailbox`; fails naming a transfer nobody sent.
    fn receive(&mut self, step: usize, mailbox: &mut HashMap<TaskId, Vec<u8>>) -> Result<(), String> {
        let original = self.original.expect("a rank's share");
        for o in self.memory.plan.steps[step].clone() {
            if o.op.direction == Direction::Recv {
                let task = original[o.op.task.0 as usize];
                let bytes = mailbox
                    .remove(&task)
                    .ok_or_else(|| format!("step {step}: rank {} sent nothing for {task}", o.op.peer))?;
                if bytes.len() != o.op.bytes {
                    return Err(format!("step {step}: {task} sent {} bytes, {} expected", bytes.len(), o.op.bytes));
                }
                self.memory.write_bytes(Ptr::at(Space::Buffer(o.buffer.0)), 0, &bytes);
            }
        }
        Ok(())
    }

    /// Runs once on the loaded inputs, one operation at a time in a random order (seeded by
    /// `seed`) that respects only each stream's issue order and the event waits of the stream
    /// plan, as the GPU may run them, and returns the whole saved outputs. A plan that misses
    /// a dependency then reads garbage or overwritten bytes; a wait that can never be met is
    /// an error naming the tasks stuck.
    pub fn run_interleaved(&mut self, seed: u64) -> Result<Vec<HostTensor>, BackendError> {
        self.slots.require_all()?;
        self.alone("an emulated interleaved run")?;
        let plan = &self.memory.plan;
        let counts: Vec<usize> =
            self.lowered.ops.iter().zip(&plan.elided).map(|(ops, &e)| if e { 0 } else { ops.len() }).collect();
        let order = interleaving(plan, &counts, seed)
            .map_err(|reason| BackendError::Device { operation: "an emulated interleaved run".into(), reason })?;
        for (t, i) in order {
            self.lowered.ops[t][i].work().emulate(&mut self.memory);
        }
        Ok(self.outputs())
    }

    fn outputs(&self) -> Vec<HostTensor> {
        let outputs = self.graph.outputs().iter().zip(&self.memory.outputs);
        outputs.map(|(b, bytes)| from_bytes(b, bytes).expect("sizes match")).collect()
    }
}

/// A random order (seeded by `seed`) of every operation `(task, index)`, task `t` having
/// `ops[t]` of them, that a GPU could follow under `plan`: each stream runs its tasks'
/// operations in issue order, and a task starts only once every task it waits for has
/// finished. Fails, naming the stuck tasks, when no stream can proceed.
pub fn interleaving(plan: &StreamPlan, ops: &[usize], seed: u64) -> Result<Vec<(usize, usize)>, String> {
    let mut queues: Vec<std::collections::VecDeque<usize>> = vec![Default::default(); plan.streams()];
    for (t, &s) in plan.stream.iter().enumerate().take(ops.len()) {
        queues[s].push_back(t);
    }
    let mut next_op = vec![0usize; plan.streams()];
    let mut done = vec![false; ops.len()];
    let mut rng = einsum_core::SeededRng::new(seed);
    let mut order = Vec::with_capacity(ops.iter().sum());
    loop {
        // A stream is ready when its head task is under way or every task it waits for is done.
        let ready: Vec<usize> = (0..queues.len())
            .filter(|&s| {
                queues[s].front().is_some_and(|&t| next_op[s] > 0 || plan.waits[t].iter().all(|w| done[w.0 as usize]))
            })
            .collect();
        let Some(&s) = rng.pick(&ready) else { break };
        let t = queues[s][0];
        if next_op[s] < ops[t] {
            order.push((t, next_op[s]));
            next_op[s] += 1;
        }
        if next_op[s] == ops[t] {
            done[t] = true;
            queues[s].pop_front();
            next_op[s] = 0;
        }
    }
    let stuck: Vec<usize> = queues.iter().filter_map(|q| q.front().copied()).collect();
    if stuck.is_empty() { Ok(order) } else { Err(format!("tasks {stuck:?} wait for events that are never recorded")) }
}

/// Runs the shares of every rank of a multi-process job together, once, on their loaded
/// inputs, as their GPUs would: each rank runs its tasks in schedule order up to its next
/// step; then every rank in the step posts its sends (their sources' bytes, by transfer) and
/// takes its receives, the steps in order. Returns every rank's outputs (each filled with its
/// own devices' stored blocks, zero elsewhere). Fails naming the first input a rank has not
/// loaded, or a receive nobody sent.
pub fn run_ranks(ranks: &mut [Emulator<'_>]) -> Result<Vec<Vec<HostTensor>>, BackendError> {
    for e in ranks.iter() {
        e.slots.require_all()?;
    }
    let failed = |reason: String| BackendError::Device { operation: "an emulated multi-rank run".into(), reason };
    let steps = ranks.iter().map(|e| e.memory.plan.steps.len()).max().unwrap_or(0);
    let mut next = vec![0usize; ranks.len()];
    let mut mailbox = HashMap::new();
    for step in 0..steps {
        let taking: Vec<usize> = (0..ranks.len()).filter(|&r| ranks[r].step_start(step).is_some()).collect();
        for &r in &taking {
            let start = ranks[r].step_start(step).expect("taking part");
            ranks[r].run_tasks(next[r]..start);
            ranks[r].send(step, &mut mailbox);
        }
        for &r in &taking {
            ranks[r].receive(step, &mut mailbox).map_err(failed)?;
            let last = ranks[r].memory.plan.steps[step].last().expect("taking part").op.task.0 as usize;
            next[r] = last + 1;
        }
        if let Some(task) = mailbox.keys().min() {
            return Err(failed(format!("step {step}: {task} was sent and never received")));
        }
    }
    for (r, e) in ranks.iter_mut().enumerate() {
        e.run_tasks(next[r]..e.lowered.ops.len());
    }
    Ok(ranks.iter().map(Emulator::outputs).collect())
}

/// Runs `lowered` for `graph` on `gpus` emulated GPUs with the given whole inputs (loaded
/// once) and returns the whole saved outputs. Panics on inputs that do not match the graph.
pub fn run(graph: &TaskGraph, lowered: &Lowered, gpus: usize, inputs: &[HostTensor]) -> Vec<HostTensor> {
    let mut e = Emulator::new(graph, lowered, gpus);
    e.load_all(inputs).unwrap_or_else(|err| panic!("{err}"));
    e.run().unwrap_or_else(|err| panic!("{err}"))
}

#[cfg(test)]
mod tests {
    use einsum_core::taskgraph::{Boundary, DeviceId, Task};
    use einsum_core::{KernelLibrary, TensorType};

    use super::*;
    use crate::KernelRegistry;
    use crate::lower::lower;

    struct NoKernels;
    impl KernelLibrary for NoKernels {
        fn run(&self, _: usize, _: &[HostTensor], _: &[(TensorType, DType)]) -> Result<Vec<HostTensor>, String> {
            Err("no kernels".into())
        }
        fn name(&self, k: usize) -> String {
            format!("kernel {k}")
        }
    }

    fn tt(lo: &[usize], hi: &[usize]) -> TensorType {
        TensorType::new(lo, hi).unwrap()
    }

    /// `x` (3×4×6, f16) split along its middle dimension over devices 0 and 1 and replicated
    /// whole on device 2, device 1 holding a replica of device 0's half too; device 0
    /// gathers the halves into `y`, and `z` (device 2's whole) and `r` (device 1's replica)
    /// are stored as they are.
    fn split_and_replicated() -> TaskGraph {
        let whole = tt(&[0, 0, 0], &[3, 4, 6]);
        let (front, back) = (tt(&[0, 0, 0], &[3, 2, 6]), tt(&[0, 2, 0], &[3, 4, 6]));
        let io = |n: &str, ty: &TensorType| Boundary { name: n.into(), ty: ty.clone(), dtype: DType::F16 };
        let outputs = vec![io("y", &whole), io("z", &whole), io("r", &front)];
        let mut g = TaskGraph::new(3, vec![io("x", &whole)], outputs);
        let mut load = |d: u32, ty: &TensorType| {
            let b = g.add_buffer(DeviceId(d), ty.clone(), DType::F16);
            g.push(Task::Load { input: 0, dst: b }, &[], format!("load {ty} on {d}")).unwrap();
            b
        };
        let (x0, x1, x2, r) = (load(0, &front), load(1, &back), load(2, &whole), load(1, &front));
        let sent = g.add_buffer(DeviceId(0), back, DType::F16);
        g.push(Task::Transfer { src: x1, dst: sent }, &[], "send back").unwrap();
        let y = g.add_buffer(DeviceId(0), whole, DType::F16);
        g.push(Task::Stitch { srcs: vec![x0, sent], dst: y }, &[], "stitch").unwrap();
        g.push(Task::Store { output: 0, src: y }, &[], "store y").unwrap();
        g.push(Task::Store { output: 1, src: x2 }, &[], "store z").unwrap();
        g.push(Task::Store { output: 2, src: r }, &[], "store r").unwrap();
        g
    }

    /// Writing parts (one row of the middle dimension, a box across the split, one element)
    /// into the loaded input, then running, gives what loading the overwritten whole value
    /// gives, on 1 to 3 GPUs (replicas sharing a GPU held once, or not); the bytes written are
    /// the parts' on each block they meet.
    #[test]
    fn a_written_part_runs_as_the_whole_overwritten_value() {
        let g = split_and_replicated();
        let lowered = lower(&g, &NoKernels, &KernelRegistry::default()).unwrap();
        let x = HostTensor::random(tt(&[0, 0, 0], &[3, 4, 6]), DType::F16, 1);
        let parts = [tt(&[0, 1, 0], &[3, 2, 6]), tt(&[1, 1, 2], &[3, 3, 5]), tt(&[2, 3, 5], &[3, 4, 6])];
        for gpus in 1..=3 {
            let mut e = Emulator::new(&g, &lowered, gpus);
            e.load(0, &x).unwrap();
            assert_eq!(e.run().unwrap()[1], x);
            let mut want = x.clone();
            for (seed, p) in parts.iter().enumerate() {
                let part = HostTensor::random(p.clone(), DType::F16, 10 + seed as u64);
                let written: usize = e.stream_plan().resident.writes(0, &part).map(|w| w.unwrap().2.len()).sum();
                let blocks = &e.stream_plan().resident.blocks;
                let met: usize = blocks.iter().filter_map(|b| b.ty.intersect(p)).map(|r| r.volume() * 2).sum();
                assert_eq!(written, met, "{p} on {gpus} GPUs");
                e.write(0, &part).unwrap();
                want.overwrite(&part).unwrap();
                assert_eq!(
                    e.run().unwrap(),
                    run(&g, &lowered, gpus, std::slice::from_ref(&want)),
                    "{p} on {gpus} GPUs"
                );
                assert_eq!(e.run_interleaved(seed as u64).unwrap()[0], want);
            }
        }
    }

    /// A write before the load, or of a part outside the input, is refused and writes nothing.
    #[test]
    fn a_write_is_checked_before_any_byte_moves() {
        let g = split_and_replicated();
        let lowered = lower(&g, &NoKernels, &KernelRegistry::default()).unwrap();
        let mut e = Emulator::new(&g, &lowered, 2);
        let row = HostTensor::random(tt(&[0, 1, 0], &[3, 2, 6]), DType::F16, 2);
        assert!(matches!(e.write(0, &row), Err(BackendError::NotLoaded { index: 0, .. })));
        let x = HostTensor::random(tt(&[0, 0, 0], &[3, 4, 6]), DType::F16, 1);
        e.load(0, &x).unwrap();
        let outside = HostTensor::random(tt(&[0, 3, 0], &[3, 5, 6]), DType::F16, 2);
        assert!(matches!(e.write(0, &outside), Err(BackendError::Input { index: 0, .. })));
        assert!(matches!(e.write(0, &row.cast(DType::F32)), Err(BackendError::Input { index: 0, .. })));
        assert_eq!(e.run().unwrap()[1], x);
    }
}

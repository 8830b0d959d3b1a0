//! A host emulator of lowered operations, with the GPU executable's structure: prepared once
//! ([`Emulator::new`]), inputs loaded once into resident regions ([`Emulator::load`]), run
//! any number of times ([`Emulator::run`]). It runs [`Lowered`] operations in schedule order,
//! or ([`Emulator::run_interleaved`]) in a random order that respects only what a GPU
//! guarantees (each stream's issue order and the event waits), on byte arrays laid out
//! exactly as on the GPUs (one pool and one resident region per GPU at the stream plan's
//! offsets, an aliased transfer's destination sharing its source's bytes and issuing nothing,
//! pinned outputs, constant tables), with each operation computing
//! what its CUDA kernel computes. It checks the lowering, the pool and resident plans and the
//! GEMM mapping against the reference on machines without a GPU; the CUDA C itself is
//! checked by the GPU tests. It also checks the kernel variants [`crate::addressing`] chose
//! against the layout: a vector-path pointer must be 16-byte aligned, a 32-bit kernel must
//! never compute an offset past 2³¹ − 1 (it panics otherwise, as for a resident write).

use einsum_core::taskgraph::TaskGraph;
use einsum_core::{BackendError, DType, HostTensor};
use einsum_ops::binary::BinaryOp;
use einsum_ops::reduce::ReduceOp;

use crate::addressing::{Access, Index, NARROW_LIMIT, VECTOR_BYTES, offsets};
use crate::executable::from_bytes;
use crate::inputs::InputSlots;
use crate::kernels::attention::{self, AttentionShape};
use crate::lower::{Dims, Lowered, MAX_AGG_SOURCES, Op, Ptr, RowKernel, Space};
use crate::stream_plan::{DEFAULT_STREAMS_PER_GPU, StreamPlan};

/// Emulated memory: every space as bytes.
struct Memory {
    pools: Vec<Vec<u8>>,
    resident: Vec<Vec<u8>>,
    outputs: Vec<Vec<u8>>,
    consts: Vec<Vec<u8>>,
    plan: StreamPlan,
    buffer_device: Vec<usize>,
}

impl Memory {
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

    fn ld(&mut self, p: Ptr, i: usize, dt: DType) -> f32 {
        let (v, base) = self.locate(p, false);
        let at = base + i * dt.size_bytes();
        match dt {
            DType::F32 => f32::from_ne_bytes(v[at..at + 4].try_into().expect("4 bytes")),
            DType::F16 => half::f16::from_bits(u16::from_ne_bytes([v[at], v[at + 1]])).to_f32(),
            DType::BF16 => half::bf16::from_bits(u16::from_ne_bytes([v[at], v[at + 1]])).to_f32(),
        }
    }

    fn st(&mut self, p: Ptr, i: usize, dt: DType, x: f32) {
        let (v, base) = self.locate(p, true);
        let at = base + i * dt.size_bytes();
        match dt {
            DType::F32 => v[at..at + 4].copy_from_slice(&x.to_ne_bytes()),
            DType::F16 => v[at..at + 2].copy_from_slice(&half::f16::from_f32(x).to_bits().to_ne_bytes()),
            DType::BF16 => v[at..at + 2].copy_from_slice(&half::bf16::from_f32(x).to_bits().to_ne_bytes()),
        }
    }

    fn ld_i32(&mut self, p: Ptr, i: usize) -> i32 {
        let (v, base) = self.locate(p, false);
        let at = base + 4 * i;
        i32::from_ne_bytes(v[at..at + 4].try_into().expect("4 bytes"))
    }
}

/// Checks a vector-path decision against the emulated layout: every pointer 16-byte aligned
/// (pool, resident and output bases are aligned on the device, so the emulated byte offset is
/// the device address modulo 16).
fn check_vector(m: &mut Memory, ptrs: &[Ptr]) {
    for p in ptrs {
        let (_, at) = m.locate(*p, false);
        assert_eq!(at % VECTOR_BYTES, 0, "a vector-path pointer {p:?} is not {VECTOR_BYTES}-byte aligned");
    }
}

/// The index width of a copy or binary operation over the tensors at `ptrs`, after checking a
/// vector-path choice: rank 1, unit strides in every tensor, aligned pointers. (The vector
/// kernels' index arithmetic is 64-bit.)
fn checked_index(m: &mut Memory, access: Access, d: &Dims, ptrs: &[Ptr]) -> Index {
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
fn offsets_of(d: &Dims, i: usize, index: Index) -> [usize; 3] {
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
    memory: Memory,
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
        let plan = StreamPlan::new(graph, gpus, streams_per_gpu, &lowered.scratch);
        let memory = Memory {
            pools: plan.pool_bytes.iter().map(|&b| vec![0xffu8; b]).collect(),
            resident: plan.resident.bytes.iter().map(|&b| vec![0xffu8; b]).collect(),
            outputs: graph.outputs().iter().map(|b| vec![0u8; b.ty.volume() * b.dtype.size_bytes()]).collect(),
            consts: lowered.consts.iter().map(|(_, c)| c.bytes()).collect(),
            buffer_device: graph.buffers().iter().map(|b| b.device.0 as usize).collect(),
            plan,
        };
        Emulator { graph, lowered, slots: InputSlots::new(graph.inputs()), memory }
    }

    /// The stream plan, with its pool and resident plans.
    pub fn stream_plan(&self) -> &StreamPlan {
        &self.memory.plan
    }

    /// Loads input `input` into the resident regions, as [`crate::CudaExecutable::load`] does.
    pub fn load(&mut self, input: usize, value: &HostTensor) -> Result<(), BackendError> {
        let Memory { plan, resident, .. } = &mut self.memory;
        self.slots.load(&plan.resident, input, value, copy_into(resident))
    }

    /// Loads every input, in the task graph's order.
    pub fn load_all(&mut self, inputs: &[HostTensor]) -> Result<(), BackendError> {
        let Memory { plan, resident, .. } = &mut self.memory;
        self.slots.load_all(&plan.resident, inputs, copy_into(resident))
    }

    /// Runs once on the loaded inputs and returns the whole saved outputs; fails naming the
    /// first input not loaded.
    pub fn run(&mut self) -> Result<Vec<HostTensor>, BackendError> {
        self.slots.require_all()?;
        for (t, ops) in self.lowered.ops.iter().enumerate() {
            if !self.memory.plan.elided[t] {
                for op in ops {
                    apply(&mut self.memory, op);
                }
            }
        }
        Ok(self.outputs())
    }

    /// Runs once on the loaded inputs, one operation at a time in a random order (seeded by
    /// `seed`) that respects only each stream's issue order and the event waits of the stream
    /// plan, as the GPU may run them, and returns the whole saved outputs. A plan that misses
    /// a dependency then reads garbage or overwritten bytes; a wait that can never be met is
    /// an error naming the tasks stuck.
    pub fn run_interleaved(&mut self, seed: u64) -> Result<Vec<HostTensor>, BackendError> {
        self.slots.require_all()?;
        let plan = &self.memory.plan;
        let counts: Vec<usize> =
            self.lowered.ops.iter().zip(&plan.elided).map(|(ops, &e)| if e { 0 } else { ops.len() }).collect();
        let order = interleaving(plan, &counts, seed)
            .map_err(|reason| BackendError::Device { operation: "an emulated interleaved run".into(), reason })?;
        for (t, i) in order {
            apply(&mut self.memory, &self.lowered.ops[t][i]);
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

/// Runs `lowered` for `graph` on `gpus` emulated GPUs with the given whole inputs (loaded
/// once) and returns the whole saved outputs. Panics on inputs that do not match the graph.
pub fn run(graph: &TaskGraph, lowered: &Lowered, gpus: usize, inputs: &[HostTensor]) -> Vec<HostTensor> {
    let mut e = Emulator::new(graph, lowered, gpus);
    e.load_all(inputs).unwrap_or_else(|err| panic!("{err}"));
    e.run().unwrap_or_else(|err| panic!("{err}"))
}

fn apply(m: &mut Memory, op: &Op) {
    match op {
        Op::Copy { src, dst, dtype, dims, access } => {
            let index = checked_index(m, *access, dims, &[*src, *dst]);
            for i in 0..dims.volume() {
                let [a, b, _] = offsets_of(dims, i, index);
                let es = dtype.size_bytes();
                let (v, base) = m.locate(*src, false);
                let bytes: Vec<u8> = v[base + a * es..base + (a + 1) * es].to_vec();
                let (w, base) = m.locate(*dst, true);
                w[base + b * es..base + (b + 1) * es].copy_from_slice(&bytes);
            }
        }
        Op::Memcpy { src, dst, bytes } => {
            let (v, base) = m.locate(*src, false);
            let data = v[base..base + bytes].to_vec();
            let (w, base) = m.locate(*dst, true);
            w[base..base + bytes].copy_from_slice(&data);
        }
        Op::Aggregate { .. } => apply_aggregate(m, op),
        Op::Unary { x, y, dtype, op, n, vector } => {
            if *vector {
                check_vector(m, &[*x, *y]);
            }
            for i in 0..*n {
                let v = op.apply(m.ld(*x, i, *dtype));
                m.st(*y, i, *dtype, v);
            }
        }
        Op::Binary { a, b, y, dtype, op, dims, access } => {
            let index = checked_index(m, *access, dims, &[*a, *b, *y]);
            for i in 0..dims.volume() {
                let [oa, ob, oy] = offsets_of(dims, i, index);
                let v = op.apply(m.ld(*a, oa, *dtype), m.ld(*b, ob, *dtype));
                m.st(*y, oy, *dtype, v);
            }
        }
        Op::UnaryBinary { x, b, y, dtype, unary, binary, unary_first, n, vector } => {
            if *vector {
                check_vector(m, &[*x, *b, *y]);
            }
            // fused.cu: f(x) stays in f32, one rounding at the store.
            for i in 0..*n {
                let (u, v) = (unary.apply(m.ld(*x, i, *dtype)), m.ld(*b, i, *dtype));
                let r = if *unary_first { binary.apply(u, v) } else { binary.apply(v, u) };
                m.st(*y, i, *dtype, r);
            }
        }
        Op::BinaryRmsNorm { .. } => apply_binary_rmsnorm(m, op),
        Op::Rows { .. } => apply_rows(m, op),
        Op::Rope { .. } => apply_rope(m, op),
        Op::Reduce { .. } => apply_reduce(m, op),
        Op::Attention { .. } => apply_attention(m, op),
        Op::Gemm { .. } => apply_gemm(m, op),
    }
}

/// The ⊕ of the sources, in aggregate.cu's order.
fn apply_aggregate(m: &mut Memory, op: &Op) {
    let Op::Aggregate { srcs, accumulate, out, dtype, agg, n, vector } = op else {
        unreachable!("apply_aggregate of another operation");
    };
    assert!(!srcs.is_empty() && srcs.len() <= MAX_AGG_SOURCES, "{} aggregation sources", srcs.len());
    if *vector {
        check_vector(m, srcs);
        check_vector(m, &[*out]);
    }
    // The order of aggregate.cu: a left fold from the first source (or from `out`),
    // in f32, rounded to the element type once.
    let (start, rest) = if *accumulate { (*out, &srcs[..]) } else { (srcs[0], &srcs[1..]) };
    for i in 0..*n {
        let mut acc = m.ld(start, i, *dtype);
        for s in rest {
            acc = agg.apply(acc, m.ld(*s, i, *dtype));
        }
        m.st(*out, i, *dtype, acc);
    }
}

/// A binary fused with the RMS norm of its result, as rows.cu's `binary_rmsnorm`.
fn apply_binary_rmsnorm(m: &mut Memory, op: &Op) {
    let Op::BinaryRmsNorm { a, b, w, sum, y, dtype, binary, outer, n, inner, eps } = op else {
        unreachable!("apply_binary_rmsnorm of another operation");
    };
    // `binary_rmsnorm` of rows.cu: a ⊙ b in f32, rounded only where it is stored.
    for o in 0..*outer {
        for inn in 0..*inner {
            let at = |j: usize| o * n * inner + j * inner + inn;
            let vs: Vec<f32> =
                (0..*n).map(|j| binary.apply(m.ld(*a, at(j), *dtype), m.ld(*b, at(j), *dtype))).collect();
            if let Some(sum) = sum {
                for (j, &v) in vs.iter().enumerate() {
                    m.st(*sum, at(j), *dtype, v);
                }
            }
            let s: f32 = vs.iter().map(|v| v * v).sum();
            let scale = 1.0 / (s / *n as f32 + eps).sqrt();
            for (j, &v) in vs.iter().enumerate() {
                let r = v * scale * m.ld(*w, j, *dtype);
                m.st(*y, at(j), *dtype, r);
            }
        }
    }
}

/// A row kernel (softmax, RMS norm, layer norm), as rows.cu computes it.
fn apply_rows(m: &mut Memory, op: &Op) {
    let Op::Rows { kernel, x, w, b, y, dtype, outer, n, inner, eps } = op else {
        unreachable!("apply_rows of another operation");
    };
    for o in 0..*outer {
        for inn in 0..*inner {
            let at = |j: usize| o * n * inner + j * inner + inn;
            let xs: Vec<f32> = (0..*n).map(|j| m.ld(*x, at(j), *dtype)).collect();
            let ys: Vec<f32> = match kernel {
                RowKernel::Softmax => {
                    // rows.cu's nan_max: a NaN in the row makes the maximum NaN.
                    let mx = xs.iter().fold(f32::NEG_INFINITY, |m, &v| BinaryOp::Max.apply(m, v));
                    let s: f32 = xs.iter().map(|v| (v - mx).exp()).sum();
                    xs.iter().map(|v| (v - mx).exp() / s).collect()
                }
                RowKernel::RmsNorm => {
                    let s: f32 = xs.iter().map(|v| v * v).sum();
                    let scale = 1.0 / (s / *n as f32 + eps).sqrt();
                    let wp = w.expect("a weight");
                    (0..*n).map(|j| xs[j] * scale * m.ld(wp, j, *dtype)).collect()
                }
                RowKernel::LayerNorm => {
                    let mean = xs.iter().sum::<f32>() / *n as f32;
                    let var = xs.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / *n as f32;
                    let scale = 1.0 / (var + eps).sqrt();
                    let (wp, bp) = (w.expect("a weight"), b.expect("a bias"));
                    (0..*n).map(|j| (xs[j] - mean) * scale * m.ld(wp, j, *dtype) + m.ld(bp, j, *dtype)).collect()
                }
            };
            for (j, v) in ys.into_iter().enumerate() {
                m.st(*y, at(j), *dtype, v);
            }
        }
    }
}

/// Rotary position embedding, as `rope` computes it.
fn apply_rope(m: &mut Memory, op: &Op) {
    let Op::Rope { x, y, dtype, table, seq, feat, half, rows, dims } = op else {
        unreachable!("apply_rope of another operation");
    };
    for i in 0..dims.volume() {
        let mut rem = i;
        let (mut a, mut row, mut k) = (0usize, 0usize, 0usize);
        for q in (0..dims.rank as usize).rev() {
            let e = rem % dims.shape[q] as usize;
            rem /= dims.shape[q] as usize;
            a += e * dims.s0[q] as usize;
            if q == *seq {
                row = e;
            }
            if q == *feat {
                k = e;
            }
        }
        let b = a + half * dims.s0[*feat] as usize;
        let c = m.ld(*table, row * half + k, DType::F32);
        let s = m.ld(*table, rows * half + row * half + k, DType::F32);
        let (va, vb) = (m.ld(*x, a, *dtype), m.ld(*x, b, *dtype));
        m.st(*y, a, *dtype, va * c - vb * s);
        m.st(*y, b, *dtype, vb * c + va * s);
    }
}

/// A sum or maximum over the `over` box, as reduce.cu computes it.
fn apply_reduce(m: &mut Memory, op: &Op) {
    let Op::Reduce { x, y, dtype, op, keep, over, index } = op else {
        unreachable!("apply_reduce of another operation");
    };
    for i in 0..keep.volume() {
        let [bx, by, _] = offsets_of(keep, i, *index);
        let (mut sum, mut mx) = (0.0f64, f32::NEG_INFINITY);
        for j in 0..over.volume() {
            let ox = offsets_of(over, j, *index)[0];
            if *index == Index::I32 {
                assert!(bx + ox <= NARROW_LIMIT as usize, "a 32-bit reduction reaches {}", bx + ox);
            }
            let v = m.ld(*x, bx + ox, *dtype);
            sum += v as f64;
            // reduce.cu's nan_max(mx, v), which BinaryOp::Max applies.
            mx = BinaryOp::Max.apply(mx, v);
        }
        let r = match op {
            ReduceOp::Sum => sum as f32,
            ReduceOp::Max => mx,
        };
        m.st(*y, by, *dtype, r);
    }
}

/// Attention, through the kernel's own emulation ([`attention::emulate`]).
fn apply_attention(m: &mut Memory, op: &Op) {
    let Op::Attention {
        kernel,
        q,
        k,
        v,
        o,
        dtype,
        bounds,
        heads,
        nq,
        nk,
        heads_lo,
        kv_lo,
        keys_lo,
        group,
        scale_log2,
        head_dim,
    } = op
    else {
        unreachable!("apply_attention of another operation");
    };
    let d = *head_dim;
    let kv_heads = (heads_lo + heads - 1) / group - kv_lo + 1;
    let mut read = |p: Ptr, n: usize| (0..n).map(|i| m.ld(p, i, *dtype)).collect::<Vec<f32>>();
    let (qv, kv, vv) = (read(*q, heads * nq * d), read(*k, kv_heads * nk * d), read(*v, kv_heads * nk * d));
    let rows: Vec<(usize, usize)> =
        (0..*nq).map(|r| (m.ld_i32(*bounds, 2 * r) as usize, m.ld_i32(*bounds, 2 * r + 1) as usize)).collect();
    let shape = AttentionShape {
        heads: *heads,
        nq: *nq,
        nk: *nk,
        head_dim: d,
        heads_lo: *heads_lo,
        kv_lo: *kv_lo,
        keys_lo: *keys_lo,
        group: *group,
        scale_log2: *scale_log2,
        bounds: &rows,
    };
    for (i, x) in attention::emulate(*kernel, *dtype, &shape, &qv, &kv, &vv).into_iter().enumerate() {
        m.st(*o, i, *dtype, x);
    }
}

/// The batched GEMM, one f32 accumulation per output element in `k` order.
fn apply_gemm(m: &mut Memory, op: &Op) {
    let Op::Gemm { a, b, c, dtype, gemm: g } = op else {
        unreachable!("apply_gemm of another operation");
    };
    for bi in 0..g.batch {
        for i in 0..g.m {
            for j in 0..g.n {
                let mut acc = 0.0f32;
                for l in 0..g.k {
                    let ai = bi * g.stride_a + if g.trans_a { l * g.m + i } else { i * g.k + l };
                    let bj = bi * g.stride_b + if g.trans_b { j * g.k + l } else { l * g.n + j };
                    acc += m.ld(*a, ai, *dtype) * m.ld(*b, bj, *dtype);
                }
                m.st(*c, bi * g.stride_c + i * g.n + j, *dtype, acc);
            }
        }
    }
}

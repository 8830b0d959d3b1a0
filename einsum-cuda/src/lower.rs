//! Lowering a task graph to device operations: every task becomes a short list of
//! [`Op`]s (kernel launches, GEMMs, copies) over symbolic pointers, before any GPU is
//! touched. A kernel task's operator comes from the kernel library
//! ([`KernelLibrary::info`]) and its lowering from the table of CUDA kernels by operator
//! type ([`crate::kernels::registry`]); an operator with no entry is a typed error
//! ([`LowerError::Unsupported`]) here, at prepare time, before any device call.

use einsum_core::taskgraph::{Task, TaskGraph, TaskId};
use einsum_core::{Aggregation, BackendError, DType, KernelLibrary, TensorType};

use crate::addressing::Access;
use crate::kernels::attention::AttentionModule;
use crate::kernels::gemm_plan::Permute;
use crate::kernels::registry::{KernelArgs, KernelRegistry};
use crate::kernels::sources::{FIXED, Module};
use crate::rank_schedule::{RankSchedule, Role};
use crate::work::{Aggregate, BoxCopy, Memcpy, Op, SoftmaxAggregate};

/// Largest rank a strided kernel iterates (`MAX_RANK` of `common.cuh`).
pub const MAX_RANK: usize = 8;

/// Most sources one `aggregate` launch reads (`MAX_AGG_SOURCES` of `aggregate.cu`): an
/// aggregation of more chains launches over groups of at most this many.
pub const MAX_AGG_SOURCES: usize = 8;

/// A strided iteration space, laid out as the CUDA `Dims` struct of `common.cuh`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dims {
    /// Number of dimensions used.
    pub rank: i32,
    /// Padding (the C struct aligns the arrays to 8 bytes).
    pub pad: i32,
    /// Extents, iterated row-major.
    pub shape: [i64; MAX_RANK],
    /// Strides in the first tensor addressed.
    pub s0: [i64; MAX_RANK],
    /// Strides in the second.
    pub s1: [i64; MAX_RANK],
    /// Strides in the third.
    pub s2: [i64; MAX_RANK],
}

// SAFETY: `Dims` is `repr(C)`, plain old data, and matches `struct Dims` in common.cuh.
unsafe impl cudarc::driver::DeviceRepr for Dims {}

impl Dims {
    /// The space of `shape` with up to three stride vectors (missing ones are zero).
    pub fn new(shape: &[usize], strides: [&[usize]; 3]) -> Result<Dims, String> {
        if shape.len() > MAX_RANK {
            return Err(format!("rank {} exceeds the CUDA kernels' maximum of {MAX_RANK}", shape.len()));
        }
        let mut d = Dims {
            rank: shape.len() as i32,
            pad: 0,
            shape: [1; MAX_RANK],
            s0: [0; MAX_RANK],
            s1: [0; MAX_RANK],
            s2: [0; MAX_RANK],
        };
        for (i, &n) in shape.iter().enumerate() {
            d.shape[i] = n as i64;
            d.s0[i] = strides[0].get(i).copied().unwrap_or(0) as i64;
            d.s1[i] = strides[1].get(i).copied().unwrap_or(0) as i64;
            d.s2[i] = strides[2].get(i).copied().unwrap_or(0) as i64;
        }
        Ok(d)
    }

    /// Number of elements iterated.
    pub fn volume(&self) -> usize {
        self.shape[..self.rank as usize].iter().product::<i64>() as usize
    }
}

/// Where a pointer points, before addresses exist.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Space {
    /// A task-graph buffer: in its GPU's pool, or, for a Load destination, in its GPU's
    /// resident region (see [`crate::resident`]).
    Buffer(u32),
    /// Scratch area `index` of task `task` (in the task's GPU pool).
    Scratch {
        /// The task.
        task: usize,
        /// Which of its scratch areas.
        index: usize,
    },
    /// The pinned, device-mapped host copy of saved output `o`.
    HostOutput(usize),
    /// Constant table `i` (uploaded once at prepare time, on the task's GPU).
    Const(usize),
}

/// A symbolic pointer: a space and a byte offset into it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ptr {
    /// The space.
    pub space: Space,
    /// Bytes from its start.
    pub offset: usize,
}

impl Ptr {
    /// The start of `space`.
    pub fn at(space: Space) -> Ptr {
        Ptr { space, offset: 0 }
    }
}

/// A constant table uploaded once per prepared executable.
#[derive(Clone, Debug, PartialEq)]
pub enum ConstData {
    /// f32 values.
    F32(Vec<f32>),
    /// i32 values.
    I32(Vec<i32>),
}

impl ConstData {
    /// The bytes, native-endian.
    pub fn bytes(&self) -> Vec<u8> {
        match self {
            ConstData::F32(v) => v.iter().flat_map(|x| x.to_ne_bytes()).collect(),
            ConstData::I32(v) => v.iter().flat_map(|x| x.to_ne_bytes()).collect(),
        }
    }
}

/// A lowered task graph.
#[derive(Clone, Debug, Default)]
pub struct Lowered {
    /// The operations of every task, in schedule order.
    pub ops: Vec<Vec<Op>>,
    /// Scratch bytes of every task.
    pub scratch: Vec<Vec<usize>>,
    /// Constant tables and the virtual device each belongs to.
    pub consts: Vec<(usize, ConstData)>,
    /// The attention modules used (compiled per GPU at prepare).
    pub attention: Vec<AttentionModule>,
    /// The modules of users' kernels launched ([`crate::work::Launch`]; compiled per GPU at
    /// prepare, like the library's fixed modules).
    pub modules: Vec<Module>,
}

impl Lowered {
    /// Records that a user's `module` must be compiled. Its kernel names must not clash with
    /// the library's or another module's, since kernels are found by name on each GPU.
    fn add_module(&mut self, module: &Module) -> Result<(), String> {
        if self.modules.contains(module) {
            return Ok(());
        }
        for other in FIXED.iter().chain(&self.modules) {
            if other.name == module.name {
                return Err(format!("two different kernel modules are named `{}`", module.name));
            }
            if let Some(k) = module.kernels.iter().find(|k| other.kernels.contains(k)) {
                return Err(format!(
                    "kernel `{k}` of module `{}` is also defined by module `{}`",
                    module.name, other.name
                ));
            }
        }
        self.modules.push(*module);
        Ok(())
    }
}

/// Row-major strides of `shape`.
pub(crate) fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * shape[d + 1];
    }
    s
}

/// Elements from the start of `outer` to the start of `inner` (a sub-box of it).
fn offset_in(outer: &TensorType, inner: &TensorType) -> usize {
    let s = outer.strides();
    (0..outer.rank()).map(|d| (inner.dim(d).lo - outer.dim(d).lo) * s[d]).sum()
}

/// The copy of the sub-box `part` between two enclosing boxes.
fn box_copy(
    src: Ptr,
    src_ty: &TensorType,
    dst: Ptr,
    dst_ty: &TensorType,
    part: &TensorType,
    dtype: DType,
) -> Result<Op, String> {
    let es = dtype.size_bytes();
    let src = Ptr { offset: src.offset + offset_in(src_ty, part) * es, ..src };
    let dst = Ptr { offset: dst.offset + offset_in(dst_ty, part) * es, ..dst };
    let dims = Dims::new(&part.shape(), [&src_ty.strides(), &dst_ty.strides(), &[]])?;
    Ok(Op::Copy(BoxCopy { src, dst, dtype, dims, access: Access::GENERAL }))
}

/// The copy that applies permutation `p` from `src` to `dst`.
pub(crate) fn permute_op(src: Ptr, dst: Ptr, p: &Permute, dtype: DType) -> Result<Op, String> {
    let dims = Dims::new(&p.dst_shape, [&p.src_strides, &strides(&p.dst_shape), &[]])?;
    Ok(Op::Copy(BoxCopy { src, dst, dtype, dims, access: Access::GENERAL }))
}

/// The launches of an aggregation of `srcs` into `out`: one pass per group of at most
/// [`MAX_AGG_SOURCES`] sources, the first writing `out` and each later one folding its
/// sources into it, so the sources are folded left to right in order.
///
/// A row-wise ⊕ ([`Aggregation::Softmax`]) chains [`SoftmaxAggregate`] launches alike over
/// the rows of `ty`'s last index (its statistics column last).
fn aggregate_ops(srcs: &[Ptr], out: Ptr, dtype: DType, agg: Aggregation, ty: &TensorType) -> Result<Vec<Op>, String> {
    if srcs.is_empty() {
        return Err("an aggregation of no sources".into());
    }
    let n = ty.volume();
    if !agg.is_elementwise() {
        let Some(last) = ty.rank().checked_sub(1) else {
            return Err(format!("the {agg} aggregation merges rows, and {ty} has no index"));
        };
        let width = ty.dim(last).len();
        let rows = n.checked_div(width).unwrap_or(0);
        return Ok(srcs
            .chunks(MAX_AGG_SOURCES)
            .enumerate()
            .map(|(g, group)| {
                Op::SoftmaxAggregate(SoftmaxAggregate {
                    srcs: group.to_vec(),
                    accumulate: g > 0,
                    out,
                    dtype,
                    rows,
                    width,
                })
            })
            .collect());
    }
    Ok(srcs
        .chunks(MAX_AGG_SOURCES)
        .enumerate()
        .map(|(g, group)| {
            Op::Aggregate(Aggregate { srcs: group.to_vec(), accumulate: g > 0, out, dtype, agg, n, vector: false })
        })
        .collect())
}

/// Why a task graph could not be lowered.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LowerError {
    /// A kernel task whose operator has no CUDA kernel (no entry in
    /// [`crate::kernels::registry`]).
    #[error("the CUDA backend has no kernel for operator `{operator}` (kind `{kind}`)")]
    Unsupported {
        /// The operator's vertex name.
        operator: String,
        /// Its kind.
        kind: String,
    },
    /// A task that cannot be lowered (a block the kernel cannot handle, a rank over
    /// [`MAX_RANK`], a kernel the library does not describe).
    #[error("task {task}: {reason}")]
    Task {
        /// The task's position in the graph.
        task: usize,
        /// Why.
        reason: String,
    },
}

impl LowerError {
    /// The backend error, naming the task by its label in `graph`.
    pub fn into_backend_error(self, graph: &TaskGraph) -> BackendError {
        match self {
            LowerError::Unsupported { operator, kind } => {
                BackendError::Unsupported { backend: "cuda".into(), operator, kind }
            }
            LowerError::Task { task, reason } => BackendError::Task {
                task: TaskId(task as u32),
                label: graph.nodes().get(task).map_or_else(String::new, |n| n.label.clone()),
                reason,
            },
        }
    }
}

/// Lowers every task of `graph`, whose kernel tasks run `kernels`: each kernel's operator
/// ([`KernelLibrary::info`]) is looked up by type in `registry`.
pub fn lower(graph: &TaskGraph, kernels: &dyn KernelLibrary, registry: &KernelRegistry) -> Result<Lowered, LowerError> {
    lower_roles(graph, &vec![Role::Local; graph.nodes().len()], kernels, registry)
}

/// Lowers one rank's share of a multi-process job ([`RankSchedule`]): its own tasks as
/// [`lower`] does; another rank's task, and a send or receive (issued by the executor as one
/// group per step, [`crate::executor`]), get no operation.
pub fn lower_rank(
    schedule: &RankSchedule,
    kernels: &dyn KernelLibrary,
    registry: &KernelRegistry,
) -> Result<Lowered, LowerError> {
    lower_roles(&schedule.graph, &schedule.roles, kernels, registry)
}

fn lower_roles(
    graph: &TaskGraph,
    roles: &[Role],
    kernels: &dyn KernelLibrary,
    registry: &KernelRegistry,
) -> Result<Lowered, LowerError> {
    let mut out = Lowered::default();
    for (t, node) in graph.nodes().iter().enumerate() {
        if roles[t] != Role::Local {
            out.ops.push(Vec::new());
            out.scratch.push(Vec::new());
            continue;
        }
        let task_error = |reason: String| LowerError::Task { task: t, reason };
        let buf = |b: einsum_core::taskgraph::BufferId| graph.buffer(b);
        let at = |b: einsum_core::taskgraph::BufferId| Ptr::at(Space::Buffer(b.0));
        let mut scratch = Vec::new();
        let mut ops = match &node.task {
            // The destination is resident, filled once by `load` (see `crate::resident`): a run
            // has nothing to do.
            Task::Load { .. } => Vec::new(),
            Task::Store { output, src } => {
                let whole = &graph.outputs()[*output].ty;
                let s = buf(*src);
                vec![
                    box_copy(at(*src), &s.ty, Ptr::at(Space::HostOutput(*output)), whole, &s.ty, s.dtype)
                        .map_err(task_error)?,
                ]
            }
            Task::Slice { src, dst } => {
                let (s, d) = (buf(*src), buf(*dst));
                vec![box_copy(at(*src), &s.ty, at(*dst), &d.ty, &d.ty, d.dtype).map_err(task_error)?]
            }
            Task::Stitch { srcs, dst } => {
                let d = buf(*dst);
                srcs.iter()
                    .map(|s| box_copy(at(*s), &buf(*s).ty, at(*dst), &d.ty, &buf(*s).ty, d.dtype))
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(task_error)?
            }
            Task::Transfer { src, dst } => {
                vec![Op::Memcpy(Memcpy { src: at(*src), dst: at(*dst), bytes: buf(*src).bytes() })]
            }
            Task::Aggregate { srcs, dst, agg } => {
                let d = buf(*dst);
                let srcs: Vec<Ptr> = srcs.iter().map(|s| at(*s)).collect();
                aggregate_ops(&srcs, at(*dst), d.dtype, *agg, &d.ty).map_err(task_error)?
            }
            Task::Kernel { kernel, inputs, outputs } => {
                let info = kernels.info(*kernel).ok_or_else(|| {
                    task_error(format!(
                        "the kernel library does not describe {}; the CUDA backend needs every kernel's operator",
                        kernels.name(*kernel)
                    ))
                })?;
                let op = info.operator;
                let entry = registry
                    .find(op.value)
                    .ok_or_else(|| LowerError::Unsupported { operator: op.name.into(), kind: op.kind.into() })?;
                let ins: Vec<Ptr> = inputs.iter().map(|b| at(*b)).collect();
                let outs: Vec<Ptr> = outputs.iter().map(|b| at(*b)).collect();
                let device = graph.buffer(outputs[0]).device.0 as usize;
                let mut ctx = KernelCtx { task: t, device, scratch: &mut scratch, lowered: &mut out };
                let args = KernelArgs { inputs: info.inputs, outputs: info.outputs, ins: &ins, outs: &outs };
                let ops = entry
                    .lower(op.value, &args, &mut ctx)
                    .map_err(|e| task_error(format!("operator `{}` ({}): {e}", op.name, op.kind)))?;
                for launch in ops.iter().filter_map(|o| if let Op::Launch(l) = o { Some(l) } else { None }) {
                    out.add_module(launch.module()).map_err(task_error)?;
                }
                ops
            }
        };
        ops.iter_mut().for_each(Op::specialize);
        out.ops.push(ops);
        out.scratch.push(scratch);
    }
    Ok(out)
}

/// What a kernel lowering may add to the lowered graph: scratch areas of its task and
/// constant tables on its device.
pub struct KernelCtx<'a> {
    task: usize,
    device: usize,
    scratch: &'a mut Vec<usize>,
    lowered: &'a mut Lowered,
}

impl KernelCtx<'_> {
    /// A scratch area of `bytes` in the task's GPU pool, live for the task.
    pub fn scratch(&mut self, bytes: usize) -> Ptr {
        self.scratch.push(bytes);
        Ptr::at(Space::Scratch { task: self.task, index: self.scratch.len() - 1 })
    }

    /// A constant table, uploaded once at prepare time on the task's GPU.
    pub fn constant(&mut self, data: ConstData) -> Ptr {
        self.lowered.consts.push((self.device, data));
        Ptr::at(Space::Const(self.lowered.consts.len() - 1))
    }

    /// Records that attention module `m` must be compiled.
    pub fn use_attention(&mut self, m: AttentionModule) {
        if !self.lowered.attention.contains(&m) {
            self.lowered.attention.push(m);
        }
    }
}

#[cfg(test)]
mod tests {
    use einsum_core::taskgraph::{Boundary, DeviceId};
    use einsum_core::{HostTensor, TensorType};

    use einsum_ops::binary::BinaryOp;
    use einsum_ops::reduce::ReduceOp;
    use einsum_ops::unary::UnaryOp;

    use super::*;
    use crate::addressing::Index;
    use crate::emulate;
    use crate::work::{Binary, Reduce, Unary, UnaryBinary};

    /// A library for graphs without kernel tasks.
    struct NoKernels;

    impl KernelLibrary for NoKernels {
        fn run(&self, _: usize, _: &[HostTensor], _: &[(TensorType, DType)]) -> Result<Vec<HostTensor>, String> {
            Err("no kernels".into())
        }
        fn name(&self, kernel: usize) -> String {
            format!("kernel {kernel}")
        }
    }

    /// `y = x₀ ⊕ … ⊕ xₖ₋₁` of tensors of `shape` on one device: k loads, one aggregate, one
    /// store.
    fn aggregation(k: usize, shape: &[usize], dtype: DType, agg: Aggregation) -> TaskGraph {
        let ty = TensorType::zero_bounded(shape);
        let io = |name: String| Boundary { name, ty: ty.clone(), dtype };
        let mut g = TaskGraph::new(1, (0..k).map(|i| io(format!("x{i}"))).collect(), vec![io("y".into())]);
        let srcs: Vec<_> = (0..k)
            .map(|i| {
                let b = g.add_buffer(DeviceId(0), ty.clone(), dtype);
                g.push(Task::Load { input: i, dst: b }, &[], format!("load {i}")).unwrap();
                b
            })
            .collect();
        let dst = g.add_buffer(DeviceId(0), ty.clone(), dtype);
        g.push(Task::Aggregate { srcs, dst, agg }, &[], "aggregate").unwrap();
        g.push(Task::Store { output: 0, src: dst }, &[], "store").unwrap();
        g
    }

    fn aggregate_ops_of(lowered: &Lowered) -> Vec<&Op> {
        lowered.ops.iter().flatten().filter(|op| matches!(op, Op::Aggregate(_))).collect()
    }

    #[test]
    fn a_three_source_aggregate_is_one_vector_launch() {
        let g = aggregation(3, &[40], DType::F32, Aggregation::Sum);
        let lowered = lower(&g, &NoKernels, &KernelRegistry::default()).unwrap();
        let aggs = aggregate_ops_of(&lowered);
        assert_eq!(aggs.len(), 1, "{aggs:?}");
        let Op::Aggregate(Aggregate { srcs, accumulate, vector, n, .. }) = aggs[0] else { unreachable!() };
        assert_eq!((srcs.len(), *accumulate, *vector, *n), (3, false, true, 40));
        assert_eq!(aggs[0].kernel_name(), Some("aggregate_vec"));
    }

    /// Eighteen bf16 sources chain in groups of eight (8 + 8 + 2 launches, the later ones
    /// accumulating), and the emulator folds them in the kernel's order: left to right in f32
    /// within a launch, rounded to bf16 between launches.
    #[test]
    fn many_sources_chain_in_groups_folded_in_order() {
        let (k, n) = (18, 37);
        let g = aggregation(k, &[n], DType::BF16, Aggregation::Sum);
        let lowered = lower(&g, &NoKernels, &KernelRegistry::default()).unwrap();
        let groups: Vec<(usize, bool)> = aggregate_ops_of(&lowered)
            .into_iter()
            .map(|op| match op {
                Op::Aggregate(a) => (a.srcs.len(), a.accumulate),
                _ => unreachable!(),
            })
            .collect();
        assert_eq!(groups, [(8, false), (8, true), (2, true)]);
        let ty = TensorType::zero_bounded(&[n]);
        let inputs: Vec<HostTensor> = (0..k).map(|i| HostTensor::random(ty.clone(), DType::BF16, i as u64)).collect();
        let got = emulate::run(&g, &lowered, 1, &inputs)[0].to_f32();
        let values: Vec<Vec<f32>> = inputs.iter().map(HostTensor::to_f32).collect();
        let bf16 = |x: f32| half::bf16::from_f32(x).to_f32();
        for (i, &y) in got.iter().enumerate() {
            let mut acc = values[0][i];
            for (j, v) in values.iter().enumerate().skip(1) {
                if j % MAX_AGG_SOURCES == 0 {
                    acc = bf16(acc);
                }
                acc += v[i];
            }
            assert_eq!(y.to_bits(), bf16(acc).to_bits(), "element {i}");
        }
    }

    /// The softmax aggregation lowers to `aggregate_softmax` launches (chained over groups of
    /// eight sources), and the emulated kernel merges the partial rows as einsum-core's
    /// reference does, the non-finite cases (an empty partial, every score −∞ in one part,
    /// a NaN statistic) included, in f32 and bf16.
    #[test]
    fn softmax_partials_merge_row_by_row_on_the_emulator() {
        let (rows, width) = (7, 5);
        for (k, dtype) in [(2, DType::F32), (3, DType::F32), (11, DType::F32), (4, DType::BF16)] {
            let g = aggregation(k, &[rows, width], dtype, Aggregation::Softmax);
            let lowered = lower(&g, &NoKernels, &KernelRegistry::default()).unwrap();
            let ops: Vec<&SoftmaxAggregate> = lowered
                .ops
                .iter()
                .flatten()
                .filter_map(|op| if let Op::SoftmaxAggregate(a) = op { Some(a) } else { None })
                .collect();
            assert_eq!(ops.len(), k.div_ceil(MAX_AGG_SOURCES));
            // The first launch writes `out`, each later one merges into it.
            assert!(ops.iter().enumerate().all(|(g, a)| a.rows == rows && a.width == width && a.accumulate == (g > 0)));
            assert_eq!(lowered.ops.iter().flatten().find_map(|o| o.kernel_name()), Some("aggregate_softmax"));
            let ty = TensorType::zero_bounded(&[rows, width]);
            let inputs: Vec<HostTensor> = (0..k)
                .map(|i| {
                    let mut v = HostTensor::random(ty.clone(), DType::F32, 40 + i as u64).to_f32();
                    for (r, row) in v.chunks_exact_mut(width).enumerate() {
                        // Statistics: finite, with −∞ (an empty partial, or all scores −∞
                        // and NaN values) and NaN in some rows of some sources.
                        row[width - 1] *= 3.0;
                        match (r, i % 3) {
                            (1, 0) => row.fill(0.0),
                            (2, 1) => row[..width - 1].fill(f32::NAN),
                            (3, _) => row[..width - 1].fill(f32::NAN),
                            (4, 2) => row[width - 1] = f32::NAN,
                            _ => {}
                        }
                        if matches!((r, i % 3), (1, 0) | (2, 1) | (3, _)) {
                            row[width - 1] = f32::NEG_INFINITY;
                        }
                    }
                    HostTensor::from_f32(ty.clone(), dtype, v).unwrap()
                })
                .collect();
            let got = emulate::run(&g, &lowered, 1, &inputs)[0].to_f32();
            let want = HostTensor::aggregate_in(&inputs[0], &inputs[1..], Aggregation::Softmax, None).unwrap().to_f32();
            let tol = if dtype == DType::F32 { 1e-5 } else { 3e-2 };
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                let ok = (g.is_nan() && w.is_nan()) || g == w || (g - w).abs() <= tol * w.abs().max(1.0);
                assert!(ok, "k {k} {dtype}: element {i} is {g}, the reference {w}");
            }
            // Row 3 saw only −∞ scores everywhere: NaN values, −∞ statistic; row 4 has a NaN
            // statistic where k > 2.
            assert!(
                got[3 * width..4 * width - 1].iter().all(|x| x.is_nan()) && got[4 * width - 1] == f32::NEG_INFINITY
            );
            if k > 2 {
                assert!(got[4 * width..5 * width].iter().all(|x| x.is_nan()));
            }
        }
    }

    /// A stitch of two halves of six f16 values: the first half starts the destination
    /// (aligned, contiguous: vector), the second starts 6 bytes in (misaligned: scalar).
    #[test]
    fn a_misaligned_stitch_piece_keeps_the_scalar_path() {
        let whole = TensorType::zero_bounded(&[6]);
        let half = |lo: usize| TensorType::new(&[lo], &[lo + 3]).unwrap();
        let io = |name: &str| Boundary { name: name.into(), ty: whole.clone(), dtype: DType::F16 };
        let mut g = TaskGraph::new(1, vec![io("x")], vec![io("y")]);
        let (a, b) = (g.add_buffer(DeviceId(0), half(0), DType::F16), g.add_buffer(DeviceId(0), half(3), DType::F16));
        let y = g.add_buffer(DeviceId(0), whole.clone(), DType::F16);
        g.push(Task::Load { input: 0, dst: a }, &[], "a").unwrap();
        g.push(Task::Load { input: 0, dst: b }, &[], "b").unwrap();
        g.push(Task::Stitch { srcs: vec![a, b], dst: y }, &[], "stitch").unwrap();
        g.push(Task::Store { output: 0, src: y }, &[], "store").unwrap();
        let lowered = lower(&g, &NoKernels, &KernelRegistry::default()).unwrap();
        let stitch: Vec<Option<&str>> = lowered.ops[2].iter().map(Op::kernel_name).collect();
        assert_eq!(stitch, [Some("copy_vec"), Some("box_copy32")]);
        assert_eq!(lowered.ops[3][0].kernel_name(), Some("copy_vec"));
        let x = HostTensor::random(whole, DType::F16, 3);
        assert_eq!(emulate::run(&g, &lowered, 1, std::slice::from_ref(&x))[0], x);
    }

    /// A slice whose source row is 2³¹ elements long addresses offsets past 2³¹: 64-bit;
    /// the same slice of a short row: 32-bit. (Lowered only; nothing is allocated.)
    #[test]
    fn an_offset_past_2_31_keeps_64_bit_indexing() {
        let slice_kernel = |row: usize| {
            let whole = TensorType::zero_bounded(&[2, row]);
            let part = TensorType::zero_bounded(&[2, 4]);
            let mut g = TaskGraph::new(
                1,
                vec![Boundary { name: "x".into(), ty: whole.clone(), dtype: DType::F16 }],
                vec![Boundary { name: "y".into(), ty: part.clone(), dtype: DType::F16 }],
            );
            let src = g.add_buffer(DeviceId(0), whole, DType::F16);
            let dst = g.add_buffer(DeviceId(0), part, DType::F16);
            g.push(Task::Load { input: 0, dst: src }, &[], "load").unwrap();
            g.push(Task::Slice { src, dst }, &[], "slice").unwrap();
            g.push(Task::Store { output: 0, src: dst }, &[], "store").unwrap();
            lower(&g, &NoKernels, &KernelRegistry::default()).unwrap().ops[1][0].kernel_name()
        };
        assert_eq!(slice_kernel(1 << 31), Some("box_copy"));
        assert_eq!(slice_kernel(1 << 10), Some("box_copy32"));
    }

    /// Every kernel a memory-bound operation can name is an entry of a compiled module.
    #[test]
    fn every_variant_names_a_compiled_kernel() {
        let compiled: Vec<&str> =
            crate::kernels::sources::FIXED.iter().flat_map(|m| m.kernels.iter().copied()).collect();
        let p = Ptr::at(Space::Buffer(0));
        let d = Dims::new(&[4], [&[1], &[1], &[1]]).unwrap();
        let mut ops = Vec::new();
        for access in [Access::Strided(Index::I64), Access::Strided(Index::I32), Access::Vector] {
            ops.push(Op::Copy(BoxCopy { src: p, dst: p, dtype: DType::F32, dims: d, access }));
            ops.push(Op::Binary(Binary { a: p, b: p, y: p, dtype: DType::F32, op: BinaryOp::Add, dims: d, access }));
        }
        for index in [Index::I64, Index::I32] {
            let (op, count) = (ReduceOp::Sum, 1.0);
            ops.push(Op::Reduce(Reduce { x: p, y: p, dtype: DType::F32, op, keep: d, over: d, index, count }));
        }
        for vector in [false, true] {
            ops.push(Op::Unary(Unary { x: p, y: p, dtype: DType::F32, op: UnaryOp::Relu, n: 4, vector }));
            let (unary, binary, unary_first) = (UnaryOp::Silu, BinaryOp::Mul, true);
            let fused = UnaryBinary { x: p, b: p, y: p, dtype: DType::F32, unary, binary, unary_first, n: 4, vector };
            ops.push(Op::UnaryBinary(fused));
            let (dtype, agg) = (DType::F32, Aggregation::Sum);
            ops.push(Op::Aggregate(Aggregate { srcs: vec![p], accumulate: false, out: p, dtype, agg, n: 4, vector }));
        }
        let mut names: Vec<&str> = ops.iter().map(|op| op.kernel_name().expect("a memory-bound op")).collect();
        assert!(names.iter().all(|n| compiled.contains(n)), "{names:?} vs {compiled:?}");
        names.sort();
        names.dedup();
        assert_eq!(names.len(), ops.len(), "two variants share a kernel: {names:?}");
    }

    /// A user's module is recorded once, and refused when its name or a kernel name is the
    /// library's or another module's (kernels are found by name on each GPU).
    #[test]
    fn a_users_module_may_not_shadow_another_kernel() {
        let module = |name, kernels| Module { name, kernels, source: "" };
        let mut lowered = Lowered::default();
        lowered.add_module(&module("mine", &["my_kernel"])).unwrap();
        lowered.add_module(&module("mine", &["my_kernel"])).unwrap();
        assert_eq!(lowered.modules.len(), 1);
        let err = lowered.add_module(&module("mine", &["other"])).unwrap_err();
        assert!(err.contains("two different kernel modules are named `mine`"), "{err}");
        let err = lowered.add_module(&module("yours", &["rope"])).unwrap_err();
        assert!(err.contains("kernel `rope` of module `yours` is also defined by module `rope`"), "{err}");
        assert!(lowered.add_module(&module("theirs", &["my_kernel"])).is_err());
    }

    /// The limits Rust and CUDA C share are spelled the same in both.
    #[test]
    fn the_kernel_limits_match_the_cuda_sources() {
        use crate::kernels::sources::{AGGREGATE, COMMON};
        assert!(COMMON.contains(&format!("#define MAX_RANK {MAX_RANK}\n")));
        assert!(AGGREGATE.source.contains(&format!("#define MAX_AGG_SOURCES {MAX_AGG_SOURCES}\n")));
    }
}

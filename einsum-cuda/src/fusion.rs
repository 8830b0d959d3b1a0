//! Kernel fusion on the task graph, before lowering: where a kernel task's only output is
//! read by a kernel task on the same device that a [`Rule`] can fuse it with, the pair
//! becomes one kernel task (a fused SiLU·mul, an add + RMSNorm) and the intermediate buffer
//! disappears, or, when it has later readers and the rule can write it, is written by the
//! fused task.
//!
//! # Design
//! The rewrite is on the task graph, not on the lowered operations, because the memory plan
//! ([`crate::stream_plan`], [`crate::pool`]), the streams and events are all planned from the
//! task graph: a fused task is an ordinary kernel task, so a dropped intermediate is never
//! allocated and buffer lifetimes stay exact. A fused task's kernel must be describable to
//! the lowering, so [`FusedKernels`] wraps the kernel library and appends one synthetic
//! kernel id per fused task whose [`KernelLibrary::info`] is a fused operator
//! ([`crate::kernels::fused`]) found by type in [`crate::kernels::registry`]; its
//! [`KernelLibrary::run`] runs the two original kernels in turn, so the wrapped library is
//! still a complete library. The patterns are data ([`RULES`]): a rule names what it fuses
//! and builds the fused operator from the two kernels' descriptions, and the pass itself
//! knows no operator.
//!
//! A pair is fused when: both are kernel tasks the library describes; the first has exactly
//! one output, read exactly once by the second; every buffer of both has one dtype; no task
//! between them depends on the first; and the intermediate has no other reader, or the rule
//! writes it too and every other reader comes after the second. The fused task takes the
//! second's place in the schedule (all of its inputs are written by then), reads the first's
//! inputs then the second's others, and writes the second's outputs then, if kept, the
//! intermediate. Fused tasks are not fused again.

use std::any::Any;

use einsum_core::taskgraph::{BufferId, Node, Task, TaskGraph, TaskGraphError, TaskId};
use einsum_core::{DType, HostTensor, KernelInfo, KernelLibrary, OperatorRef, TensorType};
use einsum_joinagg::AbstractOperator;
use einsum_ops::binary::Binary;
use einsum_ops::rmsnorm::RmsNorm;
use einsum_ops::unary::Unary;

use crate::kernels::fused::{BinaryRmsNorm, UnaryBinary};

/// A fused operator value, as a kernel description hands it to the lowering.
pub type FusedOperator = Box<dyn Any + Send + Sync>;

/// Two adjacent kernels as a rule sees them: the first (its result is the intermediate),
/// the second, and which of the second's inputs the intermediate is.
#[derive(Clone, Copy, Debug)]
pub struct Pair<'a> {
    /// The first kernel.
    pub first: KernelInfo<'a>,
    /// The second kernel.
    pub second: KernelInfo<'a>,
    /// The position of the intermediate among the second's inputs.
    pub operand: usize,
    /// The element type of every buffer of both.
    pub dtype: DType,
}

/// One fusion pattern.
#[derive(Clone, Copy, Debug)]
pub struct Rule {
    /// The fused operator's kind (for names and messages).
    pub kind: &'static str,
    /// Whether the fused kernel can also write the intermediate, so that the pair is fused
    /// even when later tasks read it.
    pub keeps_intermediate: bool,
    /// The fused operator for `pair`, or `None` when this rule does not apply to it.
    pub fuse: fn(&Pair<'_>) -> Option<FusedOperator>,
}

/// The fusion patterns, tried in order.
pub const RULES: [Rule; 2] = [
    Rule { kind: "unary-binary", keeps_intermediate: false, fuse: unary_binary },
    Rule { kind: "binary-rmsnorm", keeps_intermediate: true, fuse: binary_rmsnorm },
];

/// The index names of a descriptor, in order.
fn names(d: &einsum_core::TensorDesc) -> Vec<&str> {
    d.dims.iter().map(|d| d.name.as_str()).collect()
}

/// A binary whose operands and result are laid out alike (the same index names in the same
/// order: no broadcast, no transposition), over blocks that are one box.
fn aligned_binary<'a>(info: &KernelInfo<'a>) -> Option<&'a Binary> {
    let b = info.operator.value.downcast_ref::<Binary>()?;
    let y = names(&b.outputs()[0]);
    let alike = b.inputs().iter().all(|d| names(d) == y);
    let one_box = info.inputs.len() == 2 && info.inputs.iter().chain(info.outputs).all(|t| *t == info.outputs[0]);
    (alike && one_box).then_some(b)
}

/// A unary (any [`einsum_ops::unary::UnaryOp`]) whose result is one operand of an aligned
/// binary over the same block.
fn unary_binary(pair: &Pair<'_>) -> Option<FusedOperator> {
    let unary = pair.first.operator.value.downcast_ref::<Unary>()?;
    let binary = aligned_binary(&pair.second)?;
    if pair.first.inputs.first() != pair.second.outputs.first() {
        return None;
    }
    let op = UnaryBinary { unary: unary.op(), binary: binary.op(), unary_first: pair.operand == 0, dtype: pair.dtype };
    Some(Box::new(op))
}

/// An aligned binary whose result is the input of an RMSNorm (over whole rows of the block).
fn binary_rmsnorm(pair: &Pair<'_>) -> Option<FusedOperator> {
    let binary = aligned_binary(&pair.first)?;
    let norm = pair.second.operator.value.downcast_ref::<RmsNorm>()?;
    let x = &norm.inputs()[0];
    let axis = x.position(norm.index())?;
    let block = &pair.first.outputs[0];
    let rows_whole = pair.second.outputs.first() == Some(block) && block.dim(axis).len() == x.dims[axis].extent;
    if pair.operand != 0 || names(x) != names(&binary.outputs()[0]) || !rows_whole {
        return None;
    }
    let op =
        BinaryRmsNorm { binary: binary.op(), axis, extent: x.dims[axis].extent, eps: norm.eps(), dtype: pair.dtype };
    Some(Box::new(op))
}

/// One fused kernel: its operator and blocks, and how to run it as the two original kernels.
struct Fused {
    operator: FusedOperator,
    kind: &'static str,
    name: String,
    inputs: Vec<TensorType>,
    outputs: Vec<TensorType>,
    first: usize,
    second: usize,
    /// Inputs of the first kernel (the fused kernel's first inputs).
    first_inputs: usize,
    operand: usize,
    /// The intermediate's block and dtype.
    mid: (TensorType, DType),
    keep: bool,
}

/// A kernel library with the fused kernels appended: ids below `first_fused` are the
/// wrapped library's, `first_fused + i` is fused kernel `i`.
pub struct FusedKernels<'k> {
    base: &'k dyn KernelLibrary,
    first_fused: usize,
    fused: Vec<Fused>,
}

impl FusedKernels<'_> {
    fn fused(&self, kernel: usize) -> Option<&Fused> {
        kernel.checked_sub(self.first_fused).and_then(|i| self.fused.get(i))
    }
}

impl KernelLibrary for FusedKernels<'_> {
    /// A fused kernel runs the first kernel, then the second on its result (rounded to the
    /// storage dtype in between, as unfused); the others run in the wrapped library.
    fn run(
        &self,
        kernel: usize,
        inputs: &[HostTensor],
        outputs: &[(TensorType, DType)],
    ) -> Result<Vec<HostTensor>, String> {
        let Some(f) = self.fused(kernel) else {
            return self.base.run(kernel, inputs, outputs);
        };
        let want = f.inputs.len();
        if inputs.len() != want || outputs.len() != f.outputs.len() {
            return Err(format!(
                "fused kernel {}: {} inputs and {} outputs, expected {want} and {}",
                f.name,
                inputs.len(),
                outputs.len(),
                f.outputs.len()
            ));
        }
        let mid = self.base.run(f.first, &inputs[..f.first_inputs], std::slice::from_ref(&f.mid))?;
        let mid = mid.into_iter().next().ok_or_else(|| format!("{} returned no output", self.base.name(f.first)))?;
        let mut second: Vec<HostTensor> = inputs[f.first_inputs..].to_vec();
        second.insert(f.operand, mid);
        let n = outputs.len() - usize::from(f.keep);
        let mut outs = self.base.run(f.second, &second, &outputs[..n])?;
        if f.keep {
            outs.push(second.swap_remove(f.operand));
        }
        Ok(outs)
    }

    fn name(&self, kernel: usize) -> String {
        match self.fused(kernel) {
            Some(f) => f.name.clone(),
            None => self.base.name(kernel),
        }
    }

    fn info(&self, kernel: usize) -> Option<KernelInfo<'_>> {
        let Some(f) = self.fused(kernel) else {
            return self.base.info(kernel);
        };
        let value: &dyn Any = f.operator.as_ref();
        Some(KernelInfo {
            operator: OperatorRef { value, name: &f.name, kind: f.kind },
            inputs: &f.inputs,
            outputs: &f.outputs,
        })
    }
}

/// A task graph after fusion, with the library its kernel tasks run.
pub struct Fusion<'k> {
    /// The rewritten graph.
    pub graph: TaskGraph,
    /// The wrapped library (the fused kernels appended).
    pub kernels: FusedKernels<'k>,
}

impl Fusion<'_> {
    /// Number of fused tasks.
    pub fn fused(&self) -> usize {
        self.kernels.fused.len()
    }
}

/// A pair found fusable: the first task, the intermediate's position among the second's
/// inputs, and the fused kernel.
struct Plan {
    first: usize,
    operand: usize,
    kernel: Fused,
}

/// Fuses every pair of `graph`'s kernel tasks that one of [`RULES`] applies to (see the
/// module docs); `kernels` is the library the graph's kernel tasks run. A graph with nothing
/// to fuse comes back unchanged. Fails only if the rewritten graph is refused by
/// [`TaskGraph::push`], which would be a bug of this pass.
pub fn fuse<'k>(graph: &TaskGraph, kernels: &'k dyn KernelLibrary) -> Result<Fusion<'k>, TaskGraphError> {
    fuse_with(graph, kernels, &RULES)
}

/// [`fuse`] with the given rules.
pub fn fuse_with<'k>(
    graph: &TaskGraph,
    kernels: &'k dyn KernelLibrary,
    rules: &[Rule],
) -> Result<Fusion<'k>, TaskGraphError> {
    let nodes = graph.nodes();
    let first_fused = nodes
        .iter()
        .filter_map(|n| match n.task {
            Task::Kernel { kernel, .. } => Some(kernel + 1),
            _ => None,
        })
        .max()
        .unwrap_or(0);
    let mut scan = Scan {
        graph,
        kernels,
        rules,
        readers: vec![Vec::new(); graph.buffers().len()],
        dependents: vec![Vec::new(); nodes.len()],
    };
    for (t, n) in nodes.iter().enumerate() {
        for b in n.task.reads() {
            scan.readers[b.0 as usize].push(t);
        }
        for d in &n.deps {
            scan.dependents[d.0 as usize].push(t);
        }
    }
    let mut taken = vec![false; nodes.len()];
    let mut plans: Vec<Option<Plan>> = (0..nodes.len()).map(|_| None).collect();
    let mut fused = Vec::new();
    for b in 0..nodes.len() {
        if taken[b] {
            continue;
        }
        let Some(plan) = scan.pair(&taken, b) else {
            continue;
        };
        taken[b] = true;
        taken[plan.first] = true;
        plans[b] = Some(plan);
    }
    // Rebuild: every buffer but the dropped intermediates, every task but the fused firsts.
    let mut dropped = vec![false; graph.buffers().len()];
    let mut absorbed = vec![false; nodes.len()];
    for p in plans.iter().flatten() {
        absorbed[p.first] = true;
        if !p.kernel.keep {
            dropped[intermediate(&nodes[p.first]).0 as usize] = true;
        }
    }
    let mut out = TaskGraph::new(graph.devices(), graph.inputs().to_vec(), graph.outputs().to_vec());
    let buffers: Vec<Option<BufferId>> = graph
        .buffers()
        .iter()
        .enumerate()
        .map(|(i, b)| (!dropped[i]).then(|| out.add_buffer(b.device, b.ty.clone(), b.dtype)))
        .collect();
    let buf = |b: &BufferId| buffers[b.0 as usize].expect("a dropped intermediate is read only by its fused task");
    let bufs = |bs: &[BufferId]| bs.iter().map(buf).collect::<Vec<_>>();
    let mut ids: Vec<Option<TaskId>> = vec![None; nodes.len()];
    for (t, node) in nodes.iter().enumerate() {
        if absorbed[t] {
            continue;
        }
        let (task, deps, label, first) = match plans[t].take() {
            Some(plan) => {
                let first = &nodes[plan.first];
                let (
                    Task::Kernel { inputs: a_in, outputs: a_out, .. },
                    Task::Kernel { inputs: b_in, outputs: b_out, .. },
                ) = (&first.task, &node.task)
                else {
                    unreachable!("a fused pair is two kernel tasks");
                };
                let mut inputs = bufs(a_in);
                inputs.extend(b_in.iter().enumerate().filter(|(i, _)| *i != plan.operand).map(|(_, b)| buf(b)));
                let mut outputs = bufs(b_out);
                if plan.kernel.keep {
                    outputs.push(buf(&a_out[0]));
                }
                let task = Task::Kernel { kernel: first_fused + fused.len(), inputs, outputs };
                let deps: Vec<TaskId> =
                    first.deps.iter().chain(&node.deps).filter(|d| d.0 as usize != plan.first).copied().collect();
                fused.push(plan.kernel);
                (task, deps, format!("{} + {}", first.label, node.label), Some(plan.first))
            }
            None => (remap(&node.task, &buf), node.deps.clone(), node.label.clone(), None),
        };
        let deps: Vec<TaskId> = deps.iter().map(|d| ids[d.0 as usize].expect("dependencies come first")).collect();
        let id = out.push(task, &deps, label)?;
        ids[t] = Some(id);
        // The absorbed first task now stands for the fused one: its later dependents wait
        // for the fused task.
        if let Some(f) = first {
            ids[f] = Some(id);
        }
    }
    Ok(Fusion { graph: out, kernels: FusedKernels { base: kernels, first_fused, fused } })
}

/// The only output of a fusable first task.
fn intermediate(node: &Node) -> BufferId {
    match &node.task {
        Task::Kernel { outputs, .. } => outputs[0],
        _ => unreachable!("a fused first task is a kernel task"),
    }
}

/// `task` with its buffers renamed by `buf`.
fn remap(task: &Task, buf: &impl Fn(&BufferId) -> BufferId) -> Task {
    let bufs = |bs: &[BufferId]| bs.iter().map(buf).collect::<Vec<_>>();
    match task {
        Task::Load { input, dst } => Task::Load { input: *input, dst: buf(dst) },
        Task::Slice { src, dst } => Task::Slice { src: buf(src), dst: buf(dst) },
        Task::Transfer { src, dst } => Task::Transfer { src: buf(src), dst: buf(dst) },
        Task::Aggregate { srcs, dst, agg } => Task::Aggregate { srcs: bufs(srcs), dst: buf(dst), agg: *agg },
        Task::Stitch { srcs, dst } => Task::Stitch { srcs: bufs(srcs), dst: buf(dst) },
        Task::Kernel { kernel, inputs, outputs } => {
            Task::Kernel { kernel: *kernel, inputs: bufs(inputs), outputs: bufs(outputs) }
        }
        Task::Store { output, src } => Task::Store { output: *output, src: buf(src) },
    }
}

/// What the pass knows of the graph while it looks for pairs.
struct Scan<'g, 'k> {
    graph: &'g TaskGraph,
    kernels: &'k dyn KernelLibrary,
    rules: &'g [Rule],
    /// The tasks reading each buffer, in schedule order (a task once per read).
    readers: Vec<Vec<usize>>,
    /// The tasks naming each task among their dependencies.
    dependents: Vec<Vec<usize>>,
}

impl Scan<'_, '_> {
    /// The pair whose second task is `b`, if one of the rules fuses it (see the module docs
    /// for the conditions); `taken` marks the tasks already in a pair.
    fn pair(&self, taken: &[bool], b: usize) -> Option<Plan> {
        let graph = self.graph;
        let Task::Kernel { kernel: kb, inputs: b_in, .. } = &graph.nodes()[b].task else {
            return None;
        };
        for (operand, m) in b_in.iter().enumerate() {
            let a = graph.writer(*m)?.0 as usize;
            let Task::Kernel { kernel: ka, inputs: a_in, outputs: a_out } = &graph.nodes()[a].task else {
                continue;
            };
            if taken[a] || a_out.len() != 1 || b_in.iter().filter(|x| *x == m).count() != 1 {
                continue;
            }
            let (Some(first), Some(second)) = (self.kernels.info(*ka), self.kernels.info(*kb)) else {
                continue;
            };
            let b_out = graph.nodes()[b].task.writes();
            let (dtype, device) = (graph.buffer(*m).dtype, graph.buffer(*m).device);
            if a_in
                .iter()
                .chain(b_in)
                .chain(&b_out)
                .any(|x| graph.buffer(*x).dtype != dtype || graph.buffer(*x).device != device)
            {
                continue;
            }
            if self.dependents[a].iter().any(|&t| t != b && t < b) {
                continue;
            }
            let others: Vec<usize> = self.readers[m.0 as usize].iter().copied().filter(|&t| t != b).collect();
            let pair = Pair { first, second, operand, dtype };
            for rule in self.rules {
                let keep = !others.is_empty();
                if keep && (!rule.keeps_intermediate || others.iter().any(|&t| t < b)) {
                    continue;
                }
                let Some(operator) = (rule.fuse)(&pair) else {
                    continue;
                };
                let mut inputs: Vec<TensorType> = first.inputs.to_vec();
                inputs.extend(second.inputs.iter().enumerate().filter(|(i, _)| *i != operand).map(|(_, t)| t.clone()));
                let mut outputs = second.outputs.to_vec();
                if keep {
                    outputs.push(first.outputs[0].clone());
                }
                let kernel = Fused {
                    operator,
                    kind: rule.kind,
                    name: format!("{} ({} then {})", rule.kind, self.kernels.name(*ka), self.kernels.name(*kb)),
                    inputs,
                    outputs,
                    first: *ka,
                    second: *kb,
                    first_inputs: first.inputs.len(),
                    operand,
                    mid: (first.outputs[0].clone(), dtype),
                    keep,
                };
                return Some(Plan { first: a, operand, kernel });
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use einsum_core::TensorDesc;
    use einsum_core::taskgraph::{Boundary, DeviceId};
    use einsum_ops::binary::BinaryOp;
    use einsum_ops::unary::UnaryOp;

    use super::*;

    /// Kernel 0: `silu` of a `[4, 8]` block; kernel 1: the product of two.
    struct Library {
        unary: Unary,
        binary: Binary,
        block: Vec<TensorType>,
    }

    impl Library {
        fn new() -> Library {
            let x = TensorDesc::of(&[("t", 4), ("f", 8)], DType::F32).unwrap();
            Library {
                unary: Unary::new(&x, UnaryOp::Silu).unwrap(),
                binary: Binary::new(&x, &x, BinaryOp::Mul).unwrap(),
                block: vec![TensorType::zero_bounded(&[4, 8]); 2],
            }
        }
    }

    impl KernelLibrary for Library {
        fn run(&self, _: usize, _: &[HostTensor], _: &[(TensorType, DType)]) -> Result<Vec<HostTensor>, String> {
            Err("not run here".into())
        }
        fn name(&self, kernel: usize) -> String {
            ["silu", "mul"][kernel].into()
        }
        fn info(&self, kernel: usize) -> Option<KernelInfo<'_>> {
            let (value, kind, inputs): (&dyn Any, &str, usize) = match kernel {
                0 => (&self.unary, "unary", 1),
                _ => (&self.binary, "binary", 2),
            };
            let operator = OperatorRef { value, name: kind, kind };
            Some(KernelInfo { operator, inputs: &self.block[..inputs], outputs: &self.block[..1] })
        }
    }

    /// `y = silu(g) · u`, with a copy of `u` between the two kernels that waits for the
    /// first when `ordered` (an explicit dependency, no buffer between them).
    fn graph(ordered: bool) -> TaskGraph {
        let ty = TensorType::zero_bounded(&[4, 8]);
        let io = |name: &str| Boundary { name: name.into(), ty: ty.clone(), dtype: DType::F32 };
        let mut g = TaskGraph::new(1, vec![io("g"), io("u")], vec![io("y"), io("v")]);
        let buffer = |g: &mut TaskGraph| g.add_buffer(DeviceId(0), ty.clone(), DType::F32);
        let (gb, ub, s, v, y) = (buffer(&mut g), buffer(&mut g), buffer(&mut g), buffer(&mut g), buffer(&mut g));
        g.push(Task::Load { input: 0, dst: gb }, &[], "load g").unwrap();
        g.push(Task::Load { input: 1, dst: ub }, &[], "load u").unwrap();
        let silu = g.push(Task::Kernel { kernel: 0, inputs: vec![gb], outputs: vec![s] }, &[], "silu").unwrap();
        let deps = if ordered { vec![silu] } else { Vec::new() };
        g.push(Task::Slice { src: ub, dst: v }, &deps, "copy u").unwrap();
        g.push(Task::Kernel { kernel: 1, inputs: vec![s, ub], outputs: vec![y] }, &[], "mul").unwrap();
        g.push(Task::Store { output: 0, src: y }, &[], "store y").unwrap();
        g.push(Task::Store { output: 1, src: v }, &[], "store v").unwrap();
        g
    }

    /// The pair fuses (kernel id 2 appended, described as a `UnaryBinary`) unless a task
    /// between them waits for the first: the fused task, at the second's place, would run
    /// after it.
    #[test]
    fn a_task_between_that_waits_for_the_first_prevents_fusion() {
        let lib = Library::new();
        let f = fuse(&graph(false), &lib).unwrap();
        assert_eq!(f.fused(), 1);
        let kernels: Vec<&Task> = f.graph.nodes().iter().map(|n| &n.task).filter(|t| t.kind() == "kernel").collect();
        assert!(
            matches!(kernels[..], [Task::Kernel { kernel: 2, inputs, outputs }] if inputs.len() == 2 && outputs.len() == 1)
        );
        let info = f.kernels.info(2).unwrap();
        let op = info.operator.value.downcast_ref::<UnaryBinary>().unwrap();
        assert_eq!((op.unary, op.binary, op.unary_first), (UnaryOp::Silu, BinaryOp::Mul, true));
        assert_eq!(f.kernels.name(1), "mul");
        let ordered = graph(true);
        let f = fuse(&ordered, &lib).unwrap();
        assert_eq!(f.fused(), 0);
        assert_eq!(f.graph, ordered);
    }
}

//! Kernel fusion on the task graph, before lowering: where a kernel task's only output is
//! read by a kernel task on the same device that one of [`RULES`] can fuse it with, the
//! pair becomes one kernel task (a fused SiLU·mul, an add + RMSNorm) and the intermediate
//! buffer disappears, or, when it has later readers and the rule can write it, is written by
//! the fused task.
//!
//! # Design
//! The pass itself is backend independent and lives in `einsum-core`
//! ([`einsum_core::taskgraph::fuse`], shared with the CPU backend's chain fusion): it finds
//! the pairs, rewrites the graph and wraps the kernel library so that each fused task's
//! kernel is described by a fused operator. This module holds the CUDA backend's patterns:
//! each rule builds one of [`crate::kernels::fused`]'s operators, found by type in
//! [`crate::kernels::registry`] by the lowering, so the memory plan, the streams and the
//! emulator treat a fused task like any other kernel task. These operators have no host
//! kernel of their own: the wrapped library's reference run is the two original kernels in
//! turn. Fused tasks are not fused again (no rule reads a fused operator).

use einsum_core::taskgraph::TaskGraph;
use einsum_core::taskgraph::fuse;
use einsum_core::{KernelInfo, KernelLibrary, TaskGraphError};
use einsum_joinagg::AbstractOperator;
use einsum_ops::binary::Binary;
use einsum_ops::rmsnorm::RmsNorm;
use einsum_ops::unary::Unary;

pub use einsum_core::taskgraph::fuse::{FusedOp, FusedOperator, Pair, Rule};

use crate::kernels::fused::{BinaryRmsNorm, UnaryBinary};

/// The kernel library of a fused graph: the borrowed library with the fused kernels appended.
pub type FusedKernels<'k> = fuse::FusedKernels<&'k dyn KernelLibrary>;

/// A task graph after fusion, with the library its kernel tasks run.
pub type Fusion<'k> = fuse::Fusion<&'k dyn KernelLibrary>;

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

/// An aligned binary whose result is the input of an RMSNorm (over whole rows of the block),
/// the norm's output block being that block: an RMSNorm writing only a slice of the rows (an
/// output-only split of its axis) is not fused, and lowers alone to `rmsnorm_slice`.
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

/// Fuses every pair of `graph`'s kernel tasks that one of [`RULES`] applies to (see
/// [`einsum_core::taskgraph::fuse`]); `kernels` is the library the graph's kernel tasks run.
/// A graph with nothing to fuse comes back unchanged. Fails only if the rewritten graph is
/// refused by [`TaskGraph::push`], which would be a bug of the pass.
pub fn fuse<'k>(graph: &TaskGraph, kernels: &'k dyn KernelLibrary) -> Result<Fusion<'k>, TaskGraphError> {
    fuse_with(graph, kernels, &RULES)
}

/// [`fuse`] with the given rules.
pub fn fuse_with<'k>(
    graph: &TaskGraph,
    kernels: &'k dyn KernelLibrary,
    rules: &[Rule],
) -> Result<Fusion<'k>, TaskGraphError> {
    fuse::fuse_with(graph, kernels, rules)
}

#[cfg(test)]
mod tests {
    use std::any::Any;

    use einsum_core::taskgraph::{Boundary, DeviceId, Task};
    use einsum_core::{DType, HostTensor, OperatorRef, TensorDesc, TensorType};
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

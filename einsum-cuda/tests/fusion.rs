//! Kernel fusion on small task graphs: which pairs fuse (a unary and the binary reading it,
//! either operand; a binary and the RMSNorm reading it, its sum kept or not) and which do not
//! (an intermediate with a second reader the rule cannot write), what the rewritten graph
//! holds, and that the fused graph runs, on the emulator and through the wrapped library's
//! reference `run`, to what the unfused one computes.

use std::collections::HashMap;
use std::sync::Arc;

use einsum_compile::{Compiled, ComputationKernels, NaiveSynthesizer, compile};
use einsum_core::taskgraph::{Task, TaskGraph, interpret};
use einsum_core::{DType, HostTensor, KernelLibrary, TensorDesc, scaled_error};
use einsum_cuda::KernelRegistry;
use einsum_cuda::emulate;
use einsum_cuda::fusion::{Fusion, fuse};
use einsum_cuda::lower::lower;
use einsum_cuda::work::{BinaryRmsNorm, Op, UnaryBinary};
use einsum_joinagg::{Computation, TensorId, enumerate_specs};
use einsum_ops::binary::{Binary, BinaryOp};
use einsum_ops::rmsnorm::RmsNorm;
use einsum_ops::unary::{Unary, UnaryOp};
use einsum_sim::Topology;

fn desc(dims: &[(&str, usize)], dtype: DType) -> TensorDesc {
    TensorDesc::of(dims, dtype).unwrap()
}

/// Compiles `comp` on one device (every operator whole).
fn compiled(comp: &Computation) -> Compiled {
    let specs = comp.ops().map(|(id, op, _)| (id, enumerate_specs(op, 1).unwrap()[0].spec.clone())).collect();
    let options = einsum_compile::PhysicalOptions {
        devices: 1,
        synthesizer: Arc::new(NaiveSynthesizer),
        topology: Topology::preset("dgx-a100").unwrap(),
        memory_budget: None,
    };
    compile(comp, &specs, &options).unwrap()
}

fn unary(c: &mut Computation, name: &str, x: TensorId, op: UnaryOp) -> TensorId {
    let op = Unary::new(c.desc(x).unwrap(), op).unwrap();
    c.add_op(name, Box::new(op), &[x]).unwrap()[0]
}

fn binary(c: &mut Computation, name: &str, a: TensorId, b: TensorId, op: BinaryOp) -> TensorId {
    let op = Binary::new(c.desc(a).unwrap(), c.desc(b).unwrap(), op).unwrap();
    c.add_op(name, Box::new(op), &[a, b]).unwrap()[0]
}

fn rmsnorm(c: &mut Computation, x: TensorId, w: TensorId) -> TensorId {
    let op = RmsNorm::new(c.desc(x).unwrap(), c.desc(w).unwrap(), "d", 1e-5).unwrap();
    c.add_op("norm", Box::new(op), &[x, w]).unwrap()[0]
}

/// The reference values, and the inputs in the computation's order.
fn inputs(comp: &Computation) -> (Vec<HostTensor>, HashMap<TensorId, HostTensor>) {
    let values = comp.random_inputs(5);
    let ordered = comp.inputs().iter().map(|t| values[t].clone()).collect();
    (ordered, comp.evaluate(&values).unwrap())
}

/// The saved outputs of `graph` run on the emulator (one GPU).
fn emulated(graph: &TaskGraph, kernels: &dyn KernelLibrary, ins: &[HostTensor]) -> Vec<HostTensor> {
    let lowered = lower(graph, kernels, &KernelRegistry::default()).unwrap_or_else(|e| panic!("{e}"));
    emulate::run(graph, &lowered, 1, ins)
}

/// The fused tasks of `f` (their kernels are the appended ones): inputs and outputs.
fn fused_tasks(f: &Fusion<'_>) -> Vec<(usize, usize)> {
    f.graph
        .nodes()
        .iter()
        .filter(|n| n.label.contains(" + "))
        .map(|n| match &n.task {
            Task::Kernel { inputs, outputs, .. } => (inputs.len(), outputs.len()),
            other => panic!("a fused task is a {}", other.kind()),
        })
        .collect()
}

/// Checks `f` against the unfused graph: the emulated outputs match the reference (and,
/// in f32, the unfused emulation bit for bit: rounding an f32 intermediate to f32 is
/// nothing), and the wrapped library's reference run gives exactly the unfused results.
fn check_outputs(comp: &Computation, c: &Compiled, f: &Fusion<'_>, dt: DType) {
    let kernels = ComputationKernels(comp, &c.kernels);
    let (ins, reference) = inputs(comp);
    let unfused = emulated(&c.graph, &kernels, &ins);
    let fused = emulated(&f.graph, &f.kernels, &ins);
    let tolerance = if dt == DType::F32 { 1e-5 } else { 2e-2 };
    for ((t, a), b) in comp.saved().iter().zip(&fused).zip(&unfused) {
        let err = scaled_error(a, &reference[t], 1.0);
        assert!(err <= tolerance, "{dt}: error {err}");
        if dt == DType::F32 {
            assert_eq!(a, b, "f32: the fused kernel must compute what the unfused pair does");
        }
    }
    let interpreted = interpret(&f.graph, &f.kernels, &ins).unwrap();
    assert_eq!(interpreted, interpret(&c.graph, &kernels, &ins).unwrap());
}

/// `silu(g) ⊙ u` and `u − silu(g)` (the unary's result on either side) fuse into one task
/// of two inputs launching one `unary_binary` kernel; the intermediate buffer is gone.
#[test]
fn a_unary_and_the_binary_reading_it_fuse_on_either_side() {
    for dt in [DType::F32, DType::BF16] {
        for (op, unary_first) in [(BinaryOp::Mul, true), (BinaryOp::Sub, false)] {
            let mut comp = Computation::new();
            let x = desc(&[("t", 6), ("f", 20)], dt);
            let (g, u) = (comp.add_input("g", x.clone()), comp.add_input("u", x));
            let s = unary(&mut comp, "silu", g, UnaryOp::Silu);
            let y = if unary_first { binary(&mut comp, "y", s, u, op) } else { binary(&mut comp, "y", u, s, op) };
            comp.save(y).unwrap();
            let c = compiled(&comp);
            let kernels = ComputationKernels(&comp, &c.kernels);
            let f = fuse(&c.graph, &kernels).unwrap();
            assert_eq!(f.fused(), 1);
            assert_eq!(fused_tasks(&f), [(2, 1)]);
            assert_eq!(f.graph.nodes().len(), c.graph.nodes().len() - 1);
            assert_eq!(f.graph.buffers().len(), c.graph.buffers().len() - 1);
            let lowered = lower(&f.graph, &f.kernels, &KernelRegistry::default()).unwrap();
            let ops: Vec<&Op> = lowered.ops.iter().flatten().filter(|o| o.kernel_name().is_some()).collect();
            assert!(
                ops.iter().all(|o| !matches!(o, Op::Unary(_) | Op::Binary(_))),
                "an unfused launch is left: {ops:?}"
            );
            let fused: Vec<_> = ops.iter().filter(|o| matches!(o, Op::UnaryBinary(_))).collect();
            assert!(
                matches!(fused[..], [Op::UnaryBinary(UnaryBinary { unary: UnaryOp::Silu, binary, unary_first: first, .. })]
                    if *binary == op && *first == unary_first),
                "{fused:?}"
            );
            check_outputs(&comp, &c, &f, dt);
        }
    }
}

/// The intermediate of a unary read by two binaries: the unary-binary rule does not write
/// it, so nothing fuses and the graph is unchanged.
#[test]
fn an_intermediate_with_a_second_reader_is_not_fused_away() {
    let mut comp = Computation::new();
    let x = desc(&[("t", 4), ("f", 8)], DType::F32);
    let (g, u) = (comp.add_input("g", x.clone()), comp.add_input("u", x));
    let s = unary(&mut comp, "silu", g, UnaryOp::Silu);
    let y = binary(&mut comp, "y", s, u, BinaryOp::Mul);
    let z = binary(&mut comp, "z", s, u, BinaryOp::Add);
    comp.save(y).unwrap();
    comp.save(z).unwrap();
    let c = compiled(&comp);
    let kernels = ComputationKernels(&comp, &c.kernels);
    let f = fuse(&c.graph, &kernels).unwrap();
    assert_eq!(f.fused(), 0);
    assert_eq!(f.graph, c.graph);
}

/// `rmsnorm(a + b)`: alone, the sum disappears (one output); read again later (`a + b` added
/// to the norm), the fused task writes it too (two outputs) and no buffer is dropped. Both
/// launch `binary_rmsnorm` instead of a binary and a row kernel.
#[test]
fn a_residual_add_and_its_rmsnorm_fuse_keeping_the_sum_when_it_is_read_later() {
    for dt in [DType::F32, DType::BF16] {
        for reused in [false, true] {
            let mut comp = Computation::new();
            let x = desc(&[("t", 5), ("d", 48)], dt);
            let (a, b) = (comp.add_input("a", x.clone()), comp.add_input("b", x));
            let w = comp.add_input("w", desc(&[("d", 48)], dt));
            let s = binary(&mut comp, "sum", a, b, BinaryOp::Add);
            let y = rmsnorm(&mut comp, s, w);
            let out = if reused { binary(&mut comp, "residual", s, y, BinaryOp::Add) } else { y };
            comp.save(out).unwrap();
            let c = compiled(&comp);
            let kernels = ComputationKernels(&comp, &c.kernels);
            let f = fuse(&c.graph, &kernels).unwrap();
            assert_eq!(f.fused(), 1, "reused {reused}");
            assert_eq!(fused_tasks(&f), [(3, 1 + usize::from(reused))]);
            assert_eq!(f.graph.nodes().len(), c.graph.nodes().len() - 1);
            assert_eq!(f.graph.buffers().len(), c.graph.buffers().len() - usize::from(!reused));
            let lowered = lower(&f.graph, &f.kernels, &KernelRegistry::default()).unwrap();
            let norms: Vec<&Op> = lowered.ops.iter().flatten().filter(|o| matches!(o, Op::BinaryRmsNorm(_))).collect();
            assert!(
                matches!(norms[..], [Op::BinaryRmsNorm(BinaryRmsNorm { binary: BinaryOp::Add, sum, n: 48, outer: 5, inner: 1, .. })]
                    if sum.is_some() == reused),
                "{norms:?}"
            );
            assert!(!lowered.ops.iter().flatten().any(|o| matches!(o, Op::Rows(_))));
            check_outputs(&comp, &c, &f, dt);
        }
    }
}

//! The CPU backend's kernel fusion (issue 18): chains of elementwise kernels whose
//! intermediates have one reader run as one task, and every result equals the unfused
//! graph's, as the reference interpreter computes it, bit for bit in every dtype.

use std::{collections::HashMap, sync::Arc};

use einsum_compile::{Compiled, ComputationKernels, compile as compile_physical};
use einsum_core::Prepared;
use einsum_core::taskgraph::{Task, TaskGraph, interpret};
use einsum_logical::{PaperProxy, Problem};
use einsum_ops::fused::RULES;
use einsum_sim::Topology;
use einsummable::{BinaryOp, Computation, CpuBackend, DType, Graph, HostTensor, NaiveSynthesizer, UnaryOp, Workload};

/// Every operator split `p` ways along `index` (and nowhere else), compiled.
fn split_along(comp: &Computation, p: usize, index: &str) -> Compiled {
    let problem = Problem::new(comp, p, &PaperProxy).unwrap();
    let mut specs = HashMap::new();
    for op in &problem.ops {
        let pick = op
            .candidates
            .iter()
            .find(|c| op.shardable.iter().zip(&c.counts).all(|(n, &k)| if n == index { k == p } else { k == 1 }))
            .or_else(|| op.candidates.iter().find(|c| c.counts.iter().all(|&k| k == 1)))
            .unwrap_or_else(|| panic!("{} has no spec along {index}", op.name));
        specs.insert(op.id, pick.spec.clone());
    }
    let options = einsum_compile::PhysicalOptions {
        devices: p,
        synthesizer: Arc::new(NaiveSynthesizer),
        topology: Topology::preset("dgx-a100").unwrap(),
        memory_budget: None,
    };
    compile_physical(comp, &specs, &options).unwrap()
}

fn kernel_tasks(graph: &TaskGraph) -> usize {
    graph.nodes().iter().filter(|n| matches!(n.task, Task::Kernel { .. })).count()
}

/// Prepares `compiled` on a fusing CPU backend of two threads: the prepared graph's kernel
/// tasks, and whether its outputs equal the interpreter's on the unfused graph bit for bit.
fn fused_run(comp: &Computation, compiled: &Compiled, seed: u64) -> (usize, Vec<HostTensor>, Vec<HostTensor>) {
    let kernels = ComputationKernels(comp, &compiled.kernels);
    let inputs = comp.random_inputs(seed);
    let ordered: Vec<HostTensor> = comp.inputs().iter().map(|t| inputs[t].clone()).collect();
    let backend = CpuBackend::with_threads(2).with_fusion(&RULES);
    let mut exe = backend.executable(&compiled.graph, Arc::new(kernels)).unwrap();
    exe.load_all(&ordered).unwrap();
    let (fused, _) = exe.run_with_stats().unwrap();
    let unfused = interpret(&compiled.graph, &kernels, &ordered).unwrap();
    (kernel_tasks(exe.graph()), fused, unfused)
}

/// `y = (r + silu(g)·u)·0.5` and `z = y − neg(u)`: five elementwise kernels per device
/// chained through single-reader intermediates, except `y`, which is saved and read again.
fn chain(dtype: DType) -> Graph {
    let mut g = Graph::new();
    let dims = [("t", 64), ("f", 40)];
    let (x, u, r) = (g.input("g", &dims, dtype).unwrap(), g.input("u", &dims, dtype).unwrap(), {
        g.input("r", &dims, dtype).unwrap()
    });
    let s = g.unary(x, UnaryOp::Silu).unwrap();
    let m = g.binary(s, u, BinaryOp::Mul).unwrap();
    let a = g.binary(r, m, BinaryOp::Add).unwrap();
    let y = g.unary(a, UnaryOp::Scale(0.5)).unwrap();
    let n = g.unary(u, UnaryOp::Neg).unwrap();
    let z = g.binary(y, n, BinaryOp::Sub).unwrap();
    g.save(y).unwrap();
    g.save(z).unwrap();
    g
}

/// Split two ways along the tokens, each device's silu → mul → add → scale becomes one task
/// (`y` has a second reader, the subtraction, so the chain stops there), and neg → sub
/// another: 12 kernel tasks become 4. The outputs equal the unfused graph's bit for bit in
/// f32, f16 and bf16.
#[test]
fn elementwise_chains_run_as_one_task_and_change_no_bit() {
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        let graph = chain(dtype);
        let comp = graph.computation();
        let compiled = split_along(comp, 2, "t");
        assert_eq!(kernel_tasks(&compiled.graph), 12);
        let (kernels, fused, unfused) = fused_run(comp, &compiled, 3);
        assert_eq!(kernels, 4, "{dtype}");
        assert_eq!(fused, unfused, "{dtype}: the fused chains must compute what the kernels did");
    }
}

/// On a small LLaMA block on one device, the FFN's `silu(gate)·up` fuses (one kernel task
/// fewer) and the block's outputs are unchanged bit for bit.
#[test]
fn the_llama_block_fuses_its_swiglu_and_changes_no_bit() {
    let spec = "llama-block:tokens=32,seqs=2,d_model=32,heads_q=8,heads_kv=4,d_head=8,d_ff=48";
    for dtype in [DType::F32, DType::BF16] {
        let graph = Workload::parse(spec).unwrap().build(dtype).unwrap();
        let comp = graph.computation();
        let compiled = split_along(comp, 1, "tokens");
        let (kernels, fused, unfused) = fused_run(comp, &compiled, 5);
        assert_eq!(kernels, kernel_tasks(&compiled.graph) - 1, "{dtype}");
        assert_eq!(fused, unfused, "{dtype}");
    }
}

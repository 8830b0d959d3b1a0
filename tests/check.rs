//! The check of a run against the single-device reference (`run --check`) cannot be fooled:
//! it holds runs to `check`'s tolerance, so one lost partial sum in bf16 fails; a NaN or a
//! one-sided infinity fails at any tolerance; comparing nothing fails.

use std::{collections::HashMap, sync::Arc};

use einsum_core::TensorType;
use einsum_joinagg::{OpId, TensorId};
use einsum_logical::{LogicalOptimizer, Problem};
use einsummable::check::{Comparison, compare_with_reference, computation_tolerance, depth, tensor_error, tolerance};
use einsummable::{CompileOptions, CpuBackend, DType, Executable, Graph, HostTensor, Workload, compile};

/// Splits every operator's aggregated indices (those of no output) `p` ways where it can,
/// so that each output element is a sum of `p` partial sums, one per device.
struct SplitContraction;

impl LogicalOptimizer for SplitContraction {
    fn name(&self) -> &str {
        "split-contraction"
    }

    fn solve(&self, problem: &Problem) -> einsum_logical::Result<Vec<usize>> {
        Ok(problem
            .ops
            .iter()
            .map(|op| {
                let aggregated = |c: &einsum_logical::Candidate| -> usize {
                    op.shardable
                        .iter()
                        .zip(&c.counts)
                        .filter(|(name, _)| !op.output_dims.iter().flatten().any(|d| d == *name))
                        .map(|(_, &k)| k)
                        .product()
                };
                op.candidates.iter().position(|c| aggregated(c) == problem.p).unwrap_or(0)
            })
            .collect())
    }
}

/// `graph` on 8 devices, each operator holding one eighth of its contraction where it can,
/// run on `backend` (which may inject a fault) on seeded random inputs.
fn run_split_matmul(graph: &Graph, backend: CpuBackend) -> Executable {
    let options = CompileOptions::new().devices(8).optimizer(Arc::new(SplitContraction)).backend(Arc::new(backend));
    let mut exe = compile(graph, &options).expect("compiles");
    assert!(
        exe.compiled().graph.nodes().iter().any(|n| n.task.kind() == "aggregate"),
        "the plan aggregates partial sums"
    );
    exe.load_random(5).expect("loads");
    exe.execute().expect("runs");
    exe
}

#[test]
fn run_check_fails_in_bf16_when_one_partial_sum_is_dropped() {
    let graph = Workload::parse("matmul:n=64").unwrap().build(DType::BF16).unwrap();
    let tol = computation_tolerance(graph.computation());
    assert_eq!(tol, tolerance(DType::BF16));

    // Honest: every partial sum arrives, and the run is well within the tolerance.
    let honest = compare_with_reference(&run_split_matmul(&graph, CpuBackend::new())).unwrap();
    assert!(honest.passes(tol), "{honest:?}");
    assert_eq!(honest.compared, 1);

    // One of the 8 partial sums lost: above `check`'s tolerance, though within the ten
    // times larger one `run --check` used to apply.
    let faulty = CpuBackend::new().with_fault(einsum_cpu::Fault::DropAggregationInput);
    let broken = compare_with_reference(&run_split_matmul(&graph, faulty)).unwrap();
    assert!(broken.mismatch.is_none(), "{broken:?}");
    println!("honest {honest:?}, one partial sum dropped {broken:?}");
    assert!(!broken.passes(tol), "a lost partial sum passed: {broken:?}");
    assert!(broken.max_error <= 10.0 * tol, "the old tolerance would have caught it: {broken:?}");
}

/// In a LLaMA block (12 operators deep, so held to `6e-2 · sqrt(12)`), one lost partial sum
/// of its first split contraction still fails the check, and the honest run passes.
#[test]
fn run_check_fails_in_bf16_when_a_block_loses_one_partial_sum() {
    let block = "llama-block:tokens=32,d_model=32,heads_q=4,heads_kv=2,d_head=8,d_ff=48";
    let graph = Workload::parse(block).unwrap().build(DType::BF16).unwrap();
    let comp = graph.computation();
    assert_eq!(depth(comp), 12);
    let tol = computation_tolerance(comp);
    assert_eq!(tol, tolerance(DType::BF16) * 12f32.sqrt());
    let honest = compare_with_reference(&run_split_matmul(&graph, CpuBackend::new())).unwrap();
    assert!(honest.passes(tol), "{honest:?}");
    let faulty = CpuBackend::new().with_fault(einsum_cpu::Fault::DropAggregationInput);
    let broken = compare_with_reference(&run_split_matmul(&graph, faulty)).unwrap();
    println!("block: honest {honest:?}, one partial sum dropped {broken:?}, tolerance {tol}");
    assert!(!broken.passes(tol), "a lost partial sum passed: {broken:?}");
}

fn vector(values: &[f32]) -> HostTensor {
    HostTensor::from_f32(TensorType::zero_bounded(&[values.len()]), DType::F32, values.to_vec()).unwrap()
}

#[test]
fn non_finite_differences_fail_at_any_tolerance() {
    let finite = vector(&[1.0, 2.0, 3.0]);
    // A reference holding an infinity where the run is finite: the old measure divided
    // infinity by infinity and the maximum dropped the NaN.
    for (got, want) in [
        (&finite, vector(&[1.0, f32::INFINITY, 3.0])),
        (&finite, vector(&[1.0, 2.0, f32::NAN])),
        (&vector(&[f32::NEG_INFINITY, 2.0, 3.0]), vector(&[f32::INFINITY, 2.0, 3.0])),
        (&vector(&[1.0, f32::NAN, 3.0]), finite.clone()),
    ] {
        let err = tensor_error(got, &want).expect_err("not comparable");
        assert!(err.contains("the reference holds"), "{err}");
    }
    // Equal infinities agree; the scale is the largest finite magnitude.
    let inf = vector(&[f32::INFINITY, 4.0, 0.0]);
    assert_eq!(tensor_error(&vector(&[f32::INFINITY, 3.0, 0.0]), &inf), Ok(0.25));
    // Another type is a mismatch, not an error of some size.
    assert!(tensor_error(&vector(&[1.0, 2.0]), &finite).unwrap_err().starts_with("is "));

    let t = TensorId { op: OpId(1), output: 0 };
    let name = |_| "y".to_string();
    let c = Comparison::new(&HashMap::from([(t, finite.clone())]), &HashMap::from([(t, inf.clone())]), name);
    assert!(!c.passes(f32::INFINITY), "{c:?}");
    assert!(
        c.mismatch.as_deref().is_some_and(|m| m == "output `y` element 0 (row-major) is 1, the reference holds inf"),
        "{c:?}"
    );
    assert_eq!(c.compared, 0);
}

#[test]
fn comparing_nothing_fails() {
    let empty = HashMap::new();
    let c = Comparison::new(&empty, &empty, |t| t.to_string());
    assert_eq!(c.mismatch.as_deref(), Some("there is no output to compare"));
    assert!(!c.passes(f32::INFINITY));

    // An output the run did not produce fails too.
    let t = TensorId { op: OpId(3), output: 0 };
    let c = Comparison::new(&empty, &HashMap::from([(t, vector(&[1.0]))]), |_| "y".into());
    assert_eq!(c.mismatch.as_deref(), Some("output `y` is missing from the run's outputs"));
}

#[test]
fn tolerances_are_those_of_check_per_dtype() {
    // The README's table; `run --check` and `check` both read `tolerance`.
    assert_eq!([DType::F32, DType::F16, DType::BF16].map(tolerance), [1e-5, 1e-2, 6e-2]);
}

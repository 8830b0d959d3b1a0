//! Decomposed runs equal the single-device reference, for whole workloads.

use std::collections::HashMap;

use einsum_core::relative_error;
use einsum_joinagg::{Error as JoinAggError, enumerate_specs};
use einsummable::{DType, Error, Workload, check::check_computation};

const SMALL_LLAMA: &str = "llama-block:tokens=24,seqs=3,d_model=16,heads_q=4,heads_kv=2,d_head=4,d_ff=24";

#[test]
fn every_operator_of_a_small_llama_block_decomposes_exactly() {
    let g = Workload::parse(SMALL_LLAMA).unwrap().build(DType::F32).unwrap();
    for p in [1, 2, 3, 4, 6, 8] {
        let report = check_computation(g.computation(), p, 6, p as u64).unwrap();
        assert!(report.passed(), "p = {p}: {report:?}");
    }
}

#[test]
fn ffn_decomposes_exactly_in_f16_within_its_tolerance() {
    let g = Workload::parse("ffn:tokens=16,d_model=8,d_ff=24").unwrap().build(DType::F16).unwrap();
    let report = check_computation(g.computation(), 4, 8, 3).unwrap();
    assert!(report.passed(), "{report:?}");
}

#[test]
fn every_spec_combination_of_the_ffn_matches_the_reference() {
    // Exhaustive over the specs of both matmuls at p = 4 (the relu between them cycles through
    // its specs).
    let g = Workload::parse("ffn:tokens=8,d_model=4,d_ff=12").unwrap().build(DType::F32).unwrap();
    let comp = g.computation();
    let inputs = comp.random_inputs(11);
    let reference = comp.evaluate(&inputs).unwrap();
    let ops: Vec<_> = comp.ops().map(|(id, op, _)| (id, enumerate_specs(op, 4).unwrap())).collect();
    let mut runs = 0;
    for a in &ops[0].1 {
        for c in &ops[2].1 {
            let b = &ops[1].1[runs % ops[1].1.len()];
            let specs =
                HashMap::from([(ops[0].0, a.spec.clone()), (ops[1].0, b.spec.clone()), (ops[2].0, c.spec.clone())]);
            let out = comp.evaluate_with_specs(&inputs, &specs).unwrap();
            for (t, r) in &reference {
                assert!(relative_error(&out[t], r) <= 1e-5);
            }
            runs += 1;
        }
    }
}

#[test]
fn a_device_count_no_spec_reaches_is_an_error() {
    // A 2×3 · 3×5 matmul offers 2·3·5 = 30 blocks at most; p = 7 is prime and larger.
    let g = Workload::parse("matmul:m=2,k=3,n=5").unwrap().build(DType::F32).unwrap();
    let err = check_computation(g.computation(), 7, 4, 0).unwrap_err();
    assert!(matches!(err, Error::JoinAgg(JoinAggError::NoSpec { p: 7, .. })), "{err}");
    assert!(err.to_string().contains("p = 7"), "{err}");
    let err = check_computation(g.computation(), 0, 4, 0).unwrap_err();
    assert!(err.to_string().contains("at least 1"), "{err}");
}

//! Attention against a naive reference that materialises the scores, whole and decomposed.

use einsum_core::{DType, HostTensor, TensorDesc, relative_error};
use einsum_joinagg::{
    AbstractOperator, Error, decomposition_error, enumerate_specs, execute_spec, execute_whole, request_spec,
};
use einsum_ops::{
    Packing,
    attention::{Attention, AttentionConfig},
};
use proptest::prelude::*;

fn attention(hkv: usize, group: usize, d: usize, causal: bool, ends: &[usize], dtype: DType) -> Attention {
    let s = *ends.last().expect("at least one sequence");
    let q = TensorDesc::of(&[("heads_q", hkv * group), ("tokens", s), ("d_head", d)], dtype).unwrap();
    let k = TensorDesc::of(&[("heads_kv", hkv), ("tokens", s), ("d_head", d)], dtype).unwrap();
    let v = TensorDesc::of(&[("heads_v", hkv), ("tokens", s), ("e", d)], dtype).unwrap();
    Attention::new(&q, &k, &v, AttentionConfig::new(causal, Packing::new(ends.to_vec()).unwrap())).unwrap()
}

fn random_inputs(op: &Attention, seed: u64) -> Vec<HostTensor> {
    op.inputs().iter().enumerate().map(|(n, d)| HostTensor::random(d.tensor_type(), d.dtype, seed + n as u64)).collect()
}

/// Softmax over the full score row of every query (masked keys get no weight), in f64.
fn naive(op: &Attention, ins: &[HostTensor]) -> HostTensor {
    let q = &op.inputs()[0];
    let (hq, s, d) = (q.dims[0].extent, q.dims[1].extent, q.dims[2].extent);
    let group = hq / op.inputs()[1].dims[0].extent;
    let cfg = op.config();
    let scale = 1.0 / (d as f64).sqrt();
    let at = |t: &HostTensor, idx: [usize; 3]| t.get(&idx).unwrap() as f64;
    let mut out = Vec::with_capacity(hq * s * d);
    for h in 0..hq {
        for i in 0..s {
            let scores: Vec<f64> = (0..s)
                .map(|j| {
                    let same = cfg.packing.start_of(i) == cfg.packing.start_of(j);
                    if same && (!cfg.causal || j <= i) {
                        scale * (0..d).map(|e| at(&ins[0], [h, i, e]) * at(&ins[1], [h / group, j, e])).sum::<f64>()
                    } else {
                        f64::NEG_INFINITY
                    }
                })
                .collect();
            let max = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let weights: Vec<f64> = scores.iter().map(|x| (x - max).exp()).collect();
            let total: f64 = weights.iter().sum();
            for e in 0..d {
                let y: f64 = weights.iter().enumerate().map(|(j, w)| w * at(&ins[2], [h / group, j, e])).sum();
                out.push((y / total) as f32);
            }
        }
    }
    HostTensor::from_f32(q.tensor_type(), DType::F32, out).unwrap()
}

/// Whole-tensor and several decompositions against the naive reference; sequences longer
/// than one kernel tile (64 rows).
fn check_against_naive(causal: bool) {
    let op = attention(2, 2, 4, causal, &[40, 100, 150], DType::F32);
    let ins = random_inputs(&op, 17);
    let want = naive(&op, &ins);
    let whole = execute_whole(&op, &ins).unwrap();
    assert!(relative_error(&whole[0], &want) <= 1e-5, "whole: {}", relative_error(&whole[0], &want));
    for counts in [[2, 1, 1], [1, 3, 1], [1, 2, 1], [1, 1, 5], [2, 1, 7], [2, 3, 1], [1, 1, 150]] {
        let spec = request_spec(&op, &counts).unwrap();
        let got = execute_spec(&op, &spec, &ins).unwrap();
        let err = relative_error(&got[0], &want);
        assert!(err <= 1e-5, "causal {causal} counts {counts:?}: {err}");
    }
}

#[test]
fn causal_gqa_packed_attention_matches_naive() {
    check_against_naive(true);
}

#[test]
fn non_causal_gqa_packed_attention_matches_naive() {
    check_against_naive(false);
}

#[test]
fn explicit_scale_is_used() {
    let q = TensorDesc::of(&[("h", 1), ("s", 6), ("d", 4)], DType::F32).unwrap();
    let cfg = AttentionConfig { causal: false, packing: Packing::single(6), scale: Some(0.0) };
    let op = Attention::new(&q, &q, &q, cfg).unwrap();
    assert_eq!(op.scale(), 0.0);
    // With every score 0, each output row is the mean of the values.
    let ins = random_inputs(&op, 3);
    let out = execute_whole(&op, &ins).unwrap();
    for e in 0..4 {
        let mean: f32 = (0..6).map(|j| ins[2].get(&[0, j, e]).unwrap()).sum::<f32>() / 6.0;
        for i in 0..6 {
            assert!((out[0].get(&[0, i, e]).unwrap() - mean).abs() < 1e-6);
        }
    }
}

#[test]
fn impossible_device_counts_have_no_spec() {
    // heads_kv = 1, a single sequence of 3 tokens: at most 3 parts in all.
    let op = attention(1, 2, 2, true, &[3], DType::F32);
    assert!(matches!(enumerate_specs(&op, 4), Err(Error::NoSpec { p: 4, .. })));
    assert!(matches!(enumerate_specs(&op, 0), Err(Error::NoSpec { .. })));
    assert_eq!(enumerate_specs(&op, 3).unwrap().len(), 1);
}

#[test]
fn f16_case_with_fitted_tolerances() {
    // Whole and split both compute in f32 from the same f16 inputs; they can differ only by
    // f32 summation order before rounding to f16: at most one f16 ulp of the output. Against
    // the f64 reference, the f16 result is off by its rounding, half an ulp, plus f32 noise.
    let eps = DType::F16.epsilon();
    for causal in [true, false] {
        let op = attention(2, 2, 8, causal, &[7, 20, 33], DType::F16);
        for p in [2, 3, 4, 6, 8] {
            for choice in enumerate_specs(&op, p).unwrap() {
                let err = decomposition_error(&op, &choice.spec, 9).unwrap();
                assert!(err <= eps, "causal {causal} counts {:?}: {err} > {eps}", choice.counts);
            }
        }
        let ins = random_inputs(&op, 21);
        let got = execute_whole(&op, &ins).unwrap();
        assert_eq!(got[0].dtype(), DType::F16);
        let err = relative_error(&got[0], &naive(&op, &ins));
        assert!(err <= 0.5 * eps + 1e-5, "against the naive reference: {err}");
    }
}

fn attention_case() -> impl Strategy<Value = (usize, usize, Vec<usize>, usize, bool, usize, prop::sample::Index, u64)> {
    (
        1usize..=3,
        1usize..=3,
        prop::collection::vec(1usize..=9, 1..=3),
        prop::sample::select(vec![2usize, 4, 6, 8]),
        any::<bool>(),
        1usize..=16,
        any::<prop::sample::Index>(),
        any::<u64>(),
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn every_enumerated_spec_decomposes_exactly((hkv, group, lens, d, causal, p, pick, seed) in attention_case()) {
        let ends: Vec<usize> = lens.iter().scan(0, |end, len| { *end += len; Some(*end) }).collect();
        let op = attention(hkv, group, d, causal, &ends, DType::F32);
        let choices = match enumerate_specs(&op, p) {
            Ok(c) => c,
            Err(Error::NoSpec { .. }) => return Ok(()),
            Err(e) => return Err(TestCaseError::fail(e.to_string())),
        };
        let choice = pick.get(&choices);
        let err = decomposition_error(&op, &choice.spec, seed).unwrap();
        prop_assert!(err <= 1e-5, "counts {:?}: {}", choice.counts, err);
        // The split's FLOPs add up to the whole operator's.
        let total: f64 = choice.spec.functions.iter().map(|f| op.flops(f)).sum();
        let whole = op.flops(&einsum_joinagg::whole_spec(&op));
        prop_assert_eq!(total, whole);
    }
}

//! The output-only splits of RMSNorm (its normalised index), RoPE at positions (its features)
//! and cached attention (`d_head`): every function reads its input whole along the index and
//! writes its slice of the output. A decode step has one token, so without them these
//! operators have no spec on more devices than their other indices allow; with them every
//! device count up to the index's extent has one, and every spec computes the whole
//! operator's output exactly.

use einsum_core::{DType, Interval, TensorDesc};
use einsum_joinagg::{
    AbstractOperator, decomposition_error, enumerate_specs, execute_whole, request_spec, validate_spec,
};
use einsum_ops::{cached_attention::CachedAttention, rmsnorm::RmsNorm, rope::RopeFrequencies, rope_at::RopeAt};

const DEVICES: [usize; 5] = [1, 2, 3, 4, 8];

fn desc(dims: &[(&str, usize)]) -> TensorDesc {
    TensorDesc::of(dims, DType::F32).unwrap()
}

fn rmsnorm(dims: &[(&str, usize)], index: &str) -> RmsNorm {
    let x = desc(dims);
    let n = x.dims[x.position(index).unwrap()].extent;
    RmsNorm::new(&x, &desc(&[(index, n)]), index, 1e-5).unwrap()
}

fn rope_at(dims: &[(&str, usize)]) -> RopeAt {
    let x = desc(dims);
    let (n, d) = (x.dims[x.position("tokens").unwrap()].extent, x.dims[x.position("d_head").unwrap()].extent);
    let positions = TensorDesc::of(&[("tokens", n)], DType::I32).unwrap();
    let frequencies = RopeFrequencies::from_theta(10000.0, d).unwrap();
    RopeAt::new(&x, &positions, "tokens", "d_head", frequencies, 128).unwrap()
}

fn cached_attention(hq: usize, hkv: usize, batch: usize, cache: usize, d: usize) -> CachedAttention {
    let kv = desc(&[("heads_kv", hkv), ("batch", batch), ("d_head", d)]);
    let caches = desc(&[("heads_kv", hkv), ("batch", batch), ("cache", cache), ("d_head", d)]);
    CachedAttention::named(
        &desc(&[("heads_q", hq), ("batch", batch), ("d_head", d)]),
        &kv,
        &kv,
        &caches,
        &caches,
        &TensorDesc::of(&[("batch", batch)], DType::I32).unwrap(),
        "batch",
        "d_head",
        None,
    )
    .unwrap()
}

/// Every spec at every device count of [`DEVICES`] is a valid join-agg spec of `p` functions
/// that computes the whole kernel's output exactly, on random inputs, and reads the
/// operator's `whole` input (by position) whole along dimension `axis`.
fn every_spec_is_exact(op: &dyn AbstractOperator, whole: (usize, usize)) {
    let (input, axis) = whole;
    let extent = op.inputs()[input].dims[axis].extent;
    for p in DEVICES {
        let choices = enumerate_specs(op, p).unwrap_or_else(|e| panic!("{} on {p}: {e}", op.kind()));
        for (seed, choice) in choices.iter().enumerate() {
            validate_spec(op, &choice.spec, Some(p)).unwrap();
            assert!(choice.spec.functions.iter().all(|f| f.inputs[input].dim(axis) == Interval::full(extent)));
            let err = decomposition_error(op, &choice.spec, (p * 100 + seed) as u64).unwrap();
            // Exact but for an aggregation (cached attention's key split merges softmax
            // partials, to rounding).
            let aggregated =
                (0..op.outputs().len()).any(|j| choice.spec.output_multiplicities(j).iter().any(|(_, m)| *m > 1));
            if aggregated {
                assert!(err <= 1e-6, "{} on {p}, counts {:?}: {err}", op.kind(), choice.counts);
            } else {
                assert_eq!(err, 0.0, "{} on {p}, counts {:?}", op.kind(), choice.counts);
            }
        }
    }
}

#[test]
fn rmsnorm_specs_are_exact_with_and_without_the_output_split() {
    every_spec_is_exact(&rmsnorm(&[("tokens", 1), ("d_model", 64)], "d_model"), (0, 1));
    every_spec_is_exact(&rmsnorm(&[("tokens", 12), ("d_model", 16)], "d_model"), (0, 1));
    every_spec_is_exact(&rmsnorm(&[("batch", 1), ("d_model", 24), ("tokens", 1)], "d_model"), (0, 1));
    every_spec_is_exact(&rmsnorm(&[("batch", 2), ("d_model", 10), ("tokens", 4)], "d_model"), (0, 1));
}

#[test]
fn rope_at_specs_are_exact_with_and_without_the_output_split() {
    every_spec_is_exact(&rope_at(&[("heads", 2), ("tokens", 1), ("d_head", 16)]), (0, 2));
    every_spec_is_exact(&rope_at(&[("heads", 1), ("tokens", 1), ("d_head", 8)]), (0, 2));
    every_spec_is_exact(&rope_at(&[("heads", 4), ("tokens", 6), ("d_head", 8)]), (0, 2));
    every_spec_is_exact(&rope_at(&[("d_head", 12), ("tokens", 1), ("heads", 3)]), (0, 0));
}

#[test]
fn cached_attention_specs_are_exact_with_and_without_the_output_split() {
    // q, k, v and both caches stay whole along d_head in every spec.
    for (hq, hkv, batch, cache, d) in [(4, 2, 1, 8, 16), (2, 1, 1, 5, 8), (8, 4, 6, 6, 8)] {
        let op = cached_attention(hq, hkv, batch, cache, d);
        for input in 0..5 {
            every_spec_is_exact(&op, (input, op.inputs()[input].rank() - 1));
        }
    }
}

/// A decode step's operators on 8 devices: one token, too few heads, so 8 devices need the
/// output split.
#[test]
fn a_decode_step_has_specs_on_eight_devices() {
    let norm = rmsnorm(&[("tokens", 1), ("d_model", 64)], "d_model");
    let specs = enumerate_specs(&norm, 8).unwrap();
    assert_eq!(specs.iter().map(|c| c.counts.clone()).collect::<Vec<_>>(), [vec![1, 8]]);
    let rope = rope_at(&[("heads", 2), ("tokens", 1), ("d_head", 16)]);
    let specs = enumerate_specs(&rope, 8).unwrap();
    assert!(specs.iter().all(|c| c.counts[2] >= 4), "{:?}", specs.iter().map(|c| &c.counts).collect::<Vec<_>>());
    // Without a key split (the cache's index, last), cached attention needs the output split.
    let attention = cached_attention(4, 2, 1, 32, 16);
    let specs = enumerate_specs(&attention, 8).unwrap();
    let unsplit: Vec<_> = specs.iter().filter(|c| c.counts[3] == 1).collect();
    assert!(!unsplit.is_empty() && specs.len() > unsplit.len());
    assert!(unsplit.iter().all(|c| c.counts[2] >= 4), "{:?}", specs.iter().map(|c| &c.counts).collect::<Vec<_>>());
}

/// The indices the operators had keep their positions: a request without the new index's
/// split means what it meant, and its spec is the grid it was.
#[test]
fn earlier_requests_keep_their_meaning() {
    let norm = rmsnorm(&[("tokens", 4), ("d_model", 8)], "d_model");
    let names: Vec<String> = norm.shardable().into_iter().map(|s| s.name).collect();
    assert_eq!(names, ["tokens", "d_model"]);
    let spec = request_spec(&norm, &[2, 1]).unwrap();
    for f in &spec.functions {
        assert_eq!(f.inputs[0], f.outputs[0]);
        assert_eq!(f.inputs[1], norm.inputs()[1].tensor_type());
    }
    let attention = cached_attention(4, 2, 2, 4, 8);
    let spec = request_spec(&attention, &[2, 2, 1, 1]).unwrap();
    assert!(spec.functions.iter().all(|f| f.inputs[0] == f.outputs[0]));
    let x = rope_at(&[("heads", 2), ("tokens", 3), ("d_head", 4)]);
    let spec = request_spec(&x, &[2, 3, 1]).unwrap();
    assert!(spec.functions.iter().all(|f| f.inputs[0] == f.outputs[0]));
    // The whole operator on the same inputs as before: execute_whole is unchanged.
    let ins: Vec<_> = norm
        .inputs()
        .iter()
        .enumerate()
        .map(|(k, d)| einsum_core::HostTensor::random(d.tensor_type(), d.dtype, k as u64))
        .collect();
    assert_eq!(execute_whole(&norm, &ins).unwrap()[0].ty(), &norm.outputs()[0].tensor_type());
}

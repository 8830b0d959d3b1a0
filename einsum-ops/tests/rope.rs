//! RoPE: sharded blocks rotate as the same rows of the whole tensor; packed sequences count
//! positions from their own start.

use einsum_core::{DType, HostTensor, TensorDesc, TensorType};
use einsum_joinagg::{AbstractOperator, Error, decomposition_error, enumerate_specs, execute_whole, request_spec};
use einsum_ops::{Packing, rope::Rope};
use proptest::prelude::*;

#[test]
fn a_sequence_sharded_block_is_the_slice_of_the_whole_result() {
    let x = TensorDesc::of(&[("heads", 2), ("seq", 12), ("d", 8)], DType::F32).unwrap();
    let op = Rope::new(&x, "seq", "d", 10000.0, Packing::single(12)).unwrap();
    let input = HostTensor::random(x.tensor_type(), DType::F32, 5);
    let whole = execute_whole(&op, std::slice::from_ref(&input)).unwrap().remove(0);
    let spec = request_spec(&op, &[1, 3]).unwrap();
    assert_eq!(spec.functions[1].inputs[0], TensorType::new(&[0, 4, 0], &[2, 8, 8]).unwrap());
    for f in &spec.functions {
        let block = op.compute(f, &[input.slice(&f.inputs[0]).unwrap()]).unwrap().remove(0);
        assert_eq!(block, whole.slice(&f.outputs[0]).unwrap());
    }
}

#[test]
fn the_first_token_of_each_packed_sequence_is_unrotated() {
    let x = TensorDesc::of(&[("seq", 9), ("d", 6)], DType::F32).unwrap();
    let input = HostTensor::random(x.tensor_type(), DType::F32, 8);
    let packed = Rope::new(&x, "seq", "d", 10000.0, Packing::new(vec![4, 9]).unwrap()).unwrap();
    let single = Rope::new(&x, "seq", "d", 10000.0, Packing::single(9)).unwrap();
    let out = execute_whole(&packed, std::slice::from_ref(&input)).unwrap().remove(0);
    let unpacked = execute_whole(&single, std::slice::from_ref(&input)).unwrap().remove(0);
    let row = |t: &HostTensor, s: usize| t.slice(&TensorType::new(&[s, 0], &[s + 1, 6]).unwrap()).unwrap().to_f32();
    assert_eq!(row(&out, 0), row(&input, 0));
    assert_eq!(row(&out, 4), row(&input, 4));
    assert_ne!(row(&unpacked, 4), row(&input, 4));
    // Token 4 + t of the second sequence is rotated like token t of an unpacked sequence.
    let mut moved = input.to_f32();
    moved.copy_within(4 * 6..8 * 6, 0);
    let moved = HostTensor::from_f32(x.tensor_type(), DType::F32, moved).unwrap();
    let moved_out = execute_whole(&single, &[moved]).unwrap().remove(0);
    for t in 0..4 {
        assert_eq!(row(&out, 4 + t), row(&moved_out, t));
    }
}

#[test]
fn impossible_device_counts_have_no_spec() {
    let x = TensorDesc::of(&[("seq", 3), ("d", 4)], DType::F32).unwrap();
    let op = Rope::new(&x, "seq", "d", 10000.0, Packing::single(3)).unwrap();
    assert!(matches!(enumerate_specs(&op, 4), Err(Error::NoSpec { p: 4, .. })));
    assert_eq!(enumerate_specs(&op, 3).unwrap().len(), 1);
}

#[test]
fn f16_decomposes_exactly() {
    // Every block computes its elements exactly as the whole kernel does.
    let x = TensorDesc::of(&[("b", 3), ("seq", 10), ("d", 8)], DType::F16).unwrap();
    let op = Rope::new(&x, "seq", "d", 10000.0, Packing::new(vec![3, 10]).unwrap()).unwrap();
    for p in [2, 3, 5, 6, 10] {
        for choice in enumerate_specs(&op, p).unwrap() {
            let err = decomposition_error(&op, &choice.spec, 4).unwrap();
            assert!(err <= DType::F16.epsilon(), "counts {:?}: {err}", choice.counts);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn every_enumerated_spec_decomposes_exactly(
        heads in 1usize..=3,
        lens in prop::collection::vec(1usize..=9, 1..=3),
        d in prop::sample::select(vec![2usize, 4, 6, 8]),
        feature_first in any::<bool>(),
        p in 1usize..=16,
        pick in any::<prop::sample::Index>(),
        seed in any::<u64>(),
    ) {
        let ends: Vec<usize> = lens.iter().scan(0, |end, len| { *end += len; Some(*end) }).collect();
        let s = *ends.last().unwrap();
        let dims: Vec<(&str, usize)> =
            if feature_first { vec![("d", d), ("h", heads), ("s", s)] } else { vec![("h", heads), ("s", s), ("d", d)] };
        let x = TensorDesc::of(&dims, DType::F32).unwrap();
        let op = Rope::new(&x, "s", "d", 10000.0, Packing::new(ends).unwrap()).unwrap();
        let choices = match enumerate_specs(&op, p) {
            Ok(c) => c,
            Err(Error::NoSpec { .. }) => return Ok(()),
            Err(e) => return Err(TestCaseError::fail(e.to_string())),
        };
        let choice = pick.get(&choices);
        let err = decomposition_error(&op, &choice.spec, seed).unwrap();
        prop_assert!(err <= 1e-5, "counts {:?}: {}", choice.counts, err);
    }
}

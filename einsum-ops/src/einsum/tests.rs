//! Unit tests of the einsum operator: its specs, its kernel in every dtype and
//! layout against a naive contraction, and its decompositions, in a file of their own so that
//! `einsum.rs` holds the operator alone.

use einsum_core::DType;
use einsum_joinagg::{decomposition_error, enumerate_specs, request_spec};

use super::*;

fn desc(dims: &[(&str, usize)]) -> TensorDesc {
    TensorDesc::of(dims, DType::F32).unwrap()
}

fn tt(lo: &[usize], hi: &[usize]) -> TensorType {
    TensorType::new(lo, hi).unwrap()
}

fn example_matmul() -> Einsum {
    Einsum::matmul(&desc(&[("i", 256), ("j", 512)]), &desc(&[("j", 512), ("k", 256)])).unwrap()
}

#[test]
fn example_3_8_splits_the_contracted_index() {
    let op = example_matmul();
    assert_eq!(op.kind(), "matmul");
    let names: Vec<String> = op.shardable().into_iter().map(|s| s.name).collect();
    assert_eq!(names, ["i", "j", "k"]);
    let spec = request_spec(&op, &[1, 2, 1]).unwrap();
    assert_eq!(spec.len(), 2);
    let c = tt(&[0, 0], &[256, 256]);
    let (f1, f2) = (&spec.functions[0], &spec.functions[1]);
    assert_eq!(f1.inputs, vec![tt(&[0, 0], &[256, 256]), tt(&[0, 0], &[256, 256])]);
    assert_eq!(f2.inputs, vec![tt(&[0, 256], &[256, 512]), tt(&[256, 0], &[512, 256])]);
    assert_eq!(f1.outputs, vec![c.clone()]);
    assert_eq!(f2.outputs, vec![c.clone()]);
    assert_eq!(spec.output_multiplicities(0), vec![(c, 2)]);
    assert!(decomposition_error(&op, &spec, 1).unwrap() <= 1e-5);
}

#[test]
fn example_3_9_four_function_specs_in_order() {
    let op = example_matmul();
    let i = vec![Interval { lo: 0, hi: 128 }, Interval { lo: 128, hi: 256 }];
    let j = vec![Interval { lo: 0, hi: 256 }, Interval { lo: 256, hi: 512 }];
    let k = vec![Interval { lo: 0, hi: 256 }];
    let spec = op.join_agg_spec(&[i, j, k]).unwrap();
    assert_eq!(spec, request_spec(&op, &[2, 2, 1]).unwrap());
    let (c1, c2) = (tt(&[0, 0], &[128, 256]), tt(&[128, 0], &[256, 256]));
    let expect = [
        // F11, F12, F21, F22: m-th interval of i, n-th interval of j.
        (tt(&[0, 0], &[128, 256]), tt(&[0, 0], &[256, 256]), &c1),
        (tt(&[0, 256], &[128, 512]), tt(&[256, 0], &[512, 256]), &c1),
        (tt(&[128, 0], &[256, 256]), tt(&[0, 0], &[256, 256]), &c2),
        (tt(&[128, 256], &[256, 512]), tt(&[256, 0], &[512, 256]), &c2),
    ];
    assert_eq!(spec.len(), 4);
    for (f, (a, b, c)) in spec.functions.iter().zip(expect) {
        assert_eq!(f.inputs, vec![a, b]);
        assert_eq!(f.outputs, vec![c.clone()]);
    }
    assert_eq!(spec.output_multiplicities(0), vec![(c1, 2), (c2, 2)]);
    assert!(decomposition_error(&op, &spec, 2).unwrap() <= 1e-5);
    // Each block is a 128×256×256 product.
    assert_eq!(op.flops(&spec.functions[0]), 2.0 * 128.0 * 256.0 * 256.0);
}

#[test]
fn cube_split_has_eight_specs_and_four_output_boxes() {
    let n = 8;
    let op = Einsum::matmul(&desc(&[("i", n), ("j", n)]), &desc(&[("j", n), ("k", n)])).unwrap();
    let spec = request_spec(&op, &[2, 2, 2]).unwrap();
    assert_eq!(spec.len(), 8);
    let mult = spec.output_multiplicities(0);
    assert_eq!(mult.len(), 4);
    assert!(mult.iter().all(|(_, m)| *m == 2));
    assert!(decomposition_error(&op, &spec, 3).unwrap() <= 1e-5);
    assert!(enumerate_specs(&op, 8).unwrap().iter().any(|c| c.counts == [2, 2, 2]));
}

#[test]
fn names_follow_first_occurrence_and_collisions_are_marked() {
    // td,dhe->hte: shardable t, d, h, e; output [heads, tokens, head_dim].
    let x = desc(&[("tokens", 6), ("d_model", 8)]);
    let w = desc(&[("d_model", 8), ("heads", 2), ("head_dim", 4)]);
    let op = Einsum::new("td, dhe -> hte", &[x, w]).unwrap();
    assert_eq!(op.equation(), "td,dhe->hte");
    let names: Vec<String> = op.shardable().into_iter().map(|s| s.name).collect();
    assert_eq!(names, ["tokens", "d_model", "heads", "head_dim"]);
    assert_eq!(op.outputs()[0], desc(&[("heads", 2), ("tokens", 6), ("head_dim", 4)]));

    // Square matrices named alike: j and k both come from a dim named `col`.
    let a = desc(&[("row", 3), ("col", 3)]);
    let op = Einsum::new("ij,jk->ik", &[a.clone(), a.clone()]).unwrap();
    let names: Vec<String> = op.shardable().into_iter().map(|s| s.name).collect();
    assert_eq!(names, ["row", "col(j)", "col(k)"]);
    assert_eq!(op.outputs()[0], desc(&[("row", 3), ("col", 3)]));
    // A batched product whose output keeps two dims named `col`.
    let op = Einsum::new("ij,kj->ik", &[a.clone(), a]).unwrap();
    assert_eq!(op.outputs()[0], desc(&[("row(i)", 3), ("row(k)", 3)]));
}

#[test]
fn bad_inputs_are_typed_errors() {
    let a = desc(&[("i", 4), ("j", 5)]);
    let b = desc(&[("j", 5), ("k", 6)]);
    let shape_err = |r: Result<Einsum>, letter: &str| match r {
        Err(Error::Shape { op, index, reason }) => {
            assert_eq!(op, "einsum");
            assert_eq!(index, letter);
            reason
        }
        other => panic!("expected a shape error for `{letter}`, got {other:?}"),
    };
    let invalid = |r: Result<Einsum>| match r {
        Err(Error::Invalid { op, reason }) => {
            assert!(op == "einsum" || op == "matmul");
            reason
        }
        other => panic!("expected an invalid-argument error, got {other:?}"),
    };
    // Wrong operand count, rank mismatch, malformed equations.
    assert!(invalid(Einsum::new("ij,jk->ik", std::slice::from_ref(&a))).contains("2 input terms"));
    assert!(invalid(Einsum::new("ijk,jk->ik", &[a.clone(), b.clone()])).contains("rank 2"));
    for bad in ["ij,jk", "ij,jk->i->k", "ij,j1->i", "...ij,jk->ik", "ij,jk->i,k"] {
        assert!(invalid(Einsum::new(bad, &[a.clone(), b.clone()])).contains("malformed"), "{bad}");
    }
    // A letter bound to two extents names both dims.
    let b7 = desc(&[("jj", 7), ("k", 6)]);
    let reason = shape_err(Einsum::new("ij,jk->ik", &[a.clone(), b7]), "j");
    assert!(reason.contains("`j`=5") && reason.contains("`jj`=7"), "{reason}");
    // An output letter found in no input.
    assert!(shape_err(Einsum::new("ij,jk->iz", &[a.clone(), b.clone()]), "z").contains("no input"));
    // Repeated letters: diagonals and traces.
    let sq = desc(&[("i", 4), ("i2", 4)]);
    assert!(shape_err(Einsum::new("ii->i", std::slice::from_ref(&sq)), "i").contains("diagonals"));
    assert!(shape_err(Einsum::new("ij->ii", std::slice::from_ref(&sq)), "i").contains("output"));
    // Mixed dtypes.
    let b16 = TensorDesc::of(&[("j", 5), ("k", 6)], DType::F16).unwrap();
    assert!(invalid(Einsum::new("ij,jk->ik", &[a.clone(), b16])).contains("dtype"));
    // Empty dims.
    // Built literally: `TensorDesc::new` itself refuses extent 0.
    let z = TensorDesc { dims: vec![einsum_core::Dim::new("i", 0), einsum_core::Dim::new("j", 5)], dtype: DType::F32 };
    assert!(shape_err(Einsum::new("ij,jk->ik", &[z, b.clone()]), "i").contains("extent 0"));
    // Matmul of mismatched inner extents.
    match Einsum::matmul(&a, &desc(&[("j", 4), ("k", 6)])) {
        Err(Error::Shape { op, index, .. }) => assert_eq!((op.as_str(), index.as_str()), ("matmul", "j")),
        other => panic!("{other:?}"),
    }
    assert!(matches!(Einsum::matmul(&a, &desc(&[("j", 5)])), Err(Error::Invalid { .. })));
}

#[test]
fn impossible_p_has_no_spec() {
    let op = Einsum::new("ij,jk->ik", &[desc(&[("i", 2), ("j", 1)]), desc(&[("j", 1), ("k", 3)])]).unwrap();
    // At most 2 · 1 · 3 = 6 parts, and 5 or 7 factor into none.
    for p in [5, 7, 12] {
        assert!(matches!(enumerate_specs(&op, p), Err(Error::NoSpec { .. })), "p = {p}");
    }
    assert!(enumerate_specs(&op, 6).is_ok());
}

#[test]
fn kernel_rejects_inconsistent_blocks() {
    let op = Einsum::matmul(&desc(&[("i", 4), ("j", 6)]), &desc(&[("j", 6), ("k", 2)])).unwrap();
    let a = tt(&[0, 0], &[4, 3]);
    let b = tt(&[3, 0], &[6, 2]);
    let f = FunctionSpec { inputs: vec![a.clone(), b.clone()], outputs: vec![tt(&[0, 0], &[4, 2])] };
    let args = [HostTensor::random(a.clone(), DType::F32, 1), HostTensor::random(b.clone(), DType::F32, 2)];
    match op.compute(&f, &args) {
        Err(Error::Kernel { reason, .. }) => assert!(reason.contains("`j`"), "{reason}"),
        other => panic!("{other:?}"),
    }
    // Input data whose type is not the spec's box.
    let f = FunctionSpec { inputs: vec![a.clone(), tt(&[0, 0], &[3, 2])], outputs: vec![tt(&[0, 0], &[4, 2])] };
    assert!(matches!(op.compute(&f, &args), Err(Error::Kernel { .. })));
    // An output box that disagrees with the inputs.
    let b0 = tt(&[0, 0], &[3, 2]);
    let f = FunctionSpec { inputs: vec![a.clone(), b0.clone()], outputs: vec![tt(&[0, 0], &[2, 2])] };
    let args = [HostTensor::random(a, DType::F32, 1), HostTensor::random(b0, DType::F32, 2)];
    assert!(matches!(op.compute(&f, &args), Err(Error::Kernel { .. })));
    assert!(matches!(op.compute(&f, &args[..1]), Err(Error::Kernel { .. })));
    // A block outside its tensor (`j` runs to 7 of 6), and a letter with an empty interval.
    let kernel_reason = |a: TensorType, b: TensorType, c: TensorType| {
        let args = [HostTensor::random(a.clone(), DType::F32, 1), HostTensor::random(b.clone(), DType::F32, 2)];
        match op.compute(&FunctionSpec { inputs: vec![a, b], outputs: vec![c] }, &args) {
            Err(Error::Kernel { op, reason }) => {
                assert_eq!(op, "matmul");
                reason
            }
            other => panic!("{other:?}"),
        }
    };
    let reason = kernel_reason(tt(&[0, 0], &[4, 7]), tt(&[0, 0], &[7, 2]), tt(&[0, 0], &[4, 2]));
    assert!(reason.contains("input block") && reason.contains("not a projection"), "{reason}");
    let reason = kernel_reason(tt(&[0, 3], &[4, 3]), tt(&[3, 0], &[3, 2]), tt(&[0, 0], &[4, 2]));
    assert!(reason.contains("`j`") && reason.contains("empty"), "{reason}");
}

#[test]
fn absolute_blocks_compute_their_own_range() {
    // One block of a 1×4 by 4×1 product: the kernel sums only over its j range.
    let op = Einsum::matmul(&desc(&[("i", 1), ("j", 4)]), &desc(&[("j", 4), ("k", 1)])).unwrap();
    let a = HostTensor::from_f32(tt(&[0, 2], &[1, 4]), DType::F32, vec![1.0, 2.0]).unwrap();
    let b = HostTensor::from_f32(tt(&[2, 0], &[4, 1]), DType::F32, vec![3.0, 4.0]).unwrap();
    let f = FunctionSpec { inputs: vec![a.ty().clone(), b.ty().clone()], outputs: vec![tt(&[0, 0], &[1, 1])] };
    assert_eq!(op.compute(&f, &[a, b]).unwrap()[0].to_f32(), vec![11.0]);
}

#[test]
fn plans_and_flops_of_chains_and_sums() {
    let op = Einsum::new(
        "ab,bc,cd->ad",
        &[desc(&[("a", 2), ("b", 3)]), desc(&[("b", 3), ("c", 4)]), desc(&[("c", 4), ("d", 5)])],
    )
    .unwrap();
    let whole = einsum_joinagg::whole_spec(&op);
    // (ab,bc->ac): 2·2·3·4; (ac,cd->ad): 2·2·4·5.
    assert_eq!(op.flops(&whole), 48.0 + 80.0);
    let sum = Einsum::new("ij->j", &[desc(&[("i", 3), ("j", 5)])]).unwrap();
    assert_eq!(sum.flops(&einsum_joinagg::whole_spec(&sum)), 15.0);
    let x = HostTensor::from_f32(tt(&[0, 0], &[3, 5]), DType::F32, (0..15).map(|v| v as f32).collect()).unwrap();
    let out = einsum_joinagg::execute_whole(&sum, &[x]).unwrap();
    assert_eq!(out[0].to_f32(), vec![15.0, 18.0, 21.0, 24.0, 27.0]);
}

/// Batched products of odd shapes (a batch split, a row split, one-row matrices, a
/// transposed operand read through strides) give the same bits with and without helper
/// threads, and agree with a naive f64 product.
#[test]
fn helper_threads_change_no_bit_and_match_a_naive_product() {
    use einsum_core::intra_op;
    use einsum_joinagg::execute_whole;
    for (eq, nb, m, k, n) in [
        ("bij,bjk->bik", 3, 131, 7, 67),
        ("bij,bjk->bik", 1, 257, 33, 5),
        ("bij,bjk->bik", 2, 1, 9, 3),
        ("bji,bjk->bik", 2, 130, 11, 17),
    ] {
        let transposed = eq.starts_with("bji");
        let a_dims = if transposed { [nb, k, m] } else { [nb, m, k] };
        let a = desc(&[("b", nb), ("x", a_dims[1]), ("y", a_dims[2])]);
        let b = desc(&[("b", nb), ("j", k), ("k", n)]);
        let op = Einsum::new(eq, &[a, b]).unwrap();
        let ta = HostTensor::random(TensorType::zero_bounded(&a_dims), DType::F32, 1);
        let tb = HostTensor::random(TensorType::zero_bounded(&[nb, k, n]), DType::F32, 2);
        let args = [ta.clone(), tb.clone()];
        let alone = execute_whole(&op, &args).unwrap();
        for helpers in [1, 3] {
            let lent = intra_op::with_helpers(helpers, || execute_whole(&op, &args)).unwrap();
            assert_eq!(alone, lent, "{eq} {nb}×{m}×{k}×{n}, {helpers} helpers");
        }
        for (bi, i, j) in [(0, 0, 0), (nb - 1, m - 1, n - 1), (nb / 2, m / 2, n / 3)] {
            let at = |p: usize| if transposed { [bi, p, i] } else { [bi, i, p] };
            let terms: Vec<f64> =
                (0..k).map(|p| ta.get(&at(p)).unwrap() as f64 * tb.get(&[bi, p, j]).unwrap() as f64).collect();
            let want: f64 = terms.iter().sum();
            let scale: f64 = terms.iter().map(|t| t.abs()).sum::<f64>().max(1e-30);
            let got = alone[0].get(&[bi, i, j]).unwrap() as f64;
            assert!((got - want).abs() <= 1e-6 * scale, "{eq} at {bi},{i},{j}: {got} vs {want}");
        }
    }
}

/// f16 and bf16 matmuls (B read transposed in place in one case) go through the panel
/// GEMM: on every element the output is within the dtype's own rounding (half an ulp of
/// the result) plus the f32 accumulation bound of an f64 product of the same inputs; the
/// old path (whole operands converted, an f32 kernel, the result rounded) meets the same
/// bound; and helper threads change no bit.
#[test]
fn half_precision_matmuls_accumulate_in_f32_within_the_dtype_rounding() {
    use einsum_core::intra_op;
    use einsum_joinagg::execute_whole;
    // The unit roundoff, and half the smallest subnormal's spacing (f16 results near 0).
    for (dtype, unit, tiny) in [(DType::F16, 2f64.powi(-11), 2f64.powi(-25)), (DType::BF16, 2f64.powi(-8), 0.0)] {
        for (eq, m, k, n) in [("ij,jk->ik", 70, 300, 50), ("ij,kj->ik", 129, 260, 33)] {
            let transposed = eq == "ij,kj->ik";
            let b_dims = if transposed { [n, k] } else { [k, n] };
            let a = TensorDesc::of(&[("i", m), ("j", k)], dtype).unwrap();
            let b = TensorDesc::of(&[("x", b_dims[0]), ("y", b_dims[1])], dtype).unwrap();
            let op = Einsum::new(eq, &[a.clone(), b.clone()]).unwrap();
            let args = [HostTensor::random(a.tensor_type(), dtype, 5), HostTensor::random(b.tensor_type(), dtype, 6)];
            let got = execute_whole(&op, &args).unwrap();
            assert_eq!(got[0].dtype(), dtype);
            let lent = intra_op::with_helpers(1, || execute_whole(&op, &args)).unwrap();
            assert_eq!(got, lent, "{dtype} {eq}: helper threads changed a bit");
            // The old path: both operands converted whole, the f32 kernel, rounded once.
            let f32_desc = |d: &TensorDesc| TensorDesc::new(d.dims.clone(), DType::F32).unwrap();
            let op32 = Einsum::new(eq, &[f32_desc(&a), f32_desc(&b)]).unwrap();
            let widened: Vec<HostTensor> =
                args.iter().map(|t| HostTensor::from_f32(t.ty().clone(), DType::F32, t.to_f32()).unwrap()).collect();
            let old = execute_whole(&op32, &widened).unwrap()[0].to_f32();
            let old = HostTensor::from_f32(got[0].ty().clone(), dtype, old).unwrap();
            for i in 0..m {
                for j in 0..n {
                    let b_at = |p: usize| if transposed { [j, p] } else { [p, j] };
                    let terms: Vec<f64> = (0..k)
                        .map(|p| f64::from(args[0].get(&[i, p]).unwrap()) * f64::from(args[1].get(&b_at(p)).unwrap()))
                        .collect();
                    let want: f64 = terms.iter().sum();
                    let scale: f64 = terms.iter().map(|t| t.abs()).sum();
                    let acc = k as f64 * f64::from(f32::EPSILON) / 2.0 * scale;
                    let bound = unit * (want.abs() + acc) + acc + tiny;
                    for (path, t) in [("panels", &got[0]), ("old", &old)] {
                        let y = f64::from(t.get(&[i, j]).unwrap());
                        assert!((y - want).abs() <= bound, "{dtype} {eq} {path} at {i},{j}: {y} vs {want}");
                    }
                }
            }
        }
    }
}

#[test]
fn permute_moves_axes() {
    // A 2×3 matrix transposed, and a 2×3×2 array with its axes rotated.
    let data: Vec<f32> = (0..6).map(|v| v as f32).collect();
    assert_eq!(permute(&data, &[2, 3], &[1, 0]), vec![0.0, 3.0, 1.0, 4.0, 2.0, 5.0]);
    let data: Vec<f32> = (0..12).map(|v| v as f32).collect();
    let out = permute(&data, &[2, 3, 2], &[2, 0, 1]);
    // out[c][a][b] = data[a][b][c] = 6a + 2b + c.
    assert_eq!(out[0..6], [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);
    assert_eq!(out[6..12], [1.0, 3.0, 5.0, 7.0, 9.0, 11.0]);
}

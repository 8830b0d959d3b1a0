//! Unit tests of the attention operator: its specs, its reference kernel against a
//! naive one, and its decompositions, in a file of their own so that `attention.rs` holds the
//! operator alone.

use einsum_core::DType;
use einsum_joinagg::{decomposition_error, enumerate_specs, execute_whole, request_spec};

use super::*;

fn desc(dims: &[(&str, usize)]) -> TensorDesc {
    TensorDesc::of(dims, DType::F32).unwrap()
}

fn op(hkv: usize, group: usize, d: usize, causal: bool, ends: Vec<usize>) -> Attention {
    let s = *ends.last().unwrap();
    let q = desc(&[("heads_q", hkv * group), ("sequence", s), ("d_head", d)]);
    let kv = desc(&[("heads_kv", hkv), ("sequence", s), ("d_head", d)]);
    Attention::new(&q, &kv, &kv, AttentionConfig::new(causal, Packing::new(ends).unwrap())).unwrap()
}

/// Materialises the scores of every head: the reference the kernel must match.
fn naive(op: &Attention, q: &HostTensor, k: &HostTensor, v: &HostTensor) -> Vec<f32> {
    let (hq, s, d, g) = (op.heads_q(), op.seq(), op.d_head(), op.group());
    let mut out = vec![0.0f32; hq * s * d];
    for h in 0..hq {
        for i in 0..s {
            let (lo, hi) = op.visible(i);
            let scores: Vec<f32> = (lo..hi)
                .map(|j| {
                    op.scale * (0..d).map(|e| q.get(&[h, i, e]).unwrap() * k.get(&[h / g, j, e]).unwrap()).sum::<f32>()
                })
                .collect();
            let max = scores.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
            let w: Vec<f32> = scores.iter().map(|x| (x - max).exp()).collect();
            let total: f32 = w.iter().sum();
            for e in 0..d {
                let y: f32 = (lo..hi).zip(&w).map(|(j, w)| w * v.get(&[h / g, j, e]).unwrap()).sum();
                out[(h * s + i) * d + e] = y / total;
            }
        }
    }
    out
}

fn inputs(op: &Attention, seed: u64) -> Vec<HostTensor> {
    op.inputs().iter().enumerate().map(|(n, d)| HostTensor::random(d.tensor_type(), d.dtype, seed + n as u64)).collect()
}

#[test]
fn example_3_10_heads_kv_split_shards_query_heads_in_groups() {
    let q = desc(&[("heads_q", 32), ("sequence", 4096), ("d_head", 128)]);
    let kv = desc(&[("heads_kv", 8), ("sequence", 4096), ("d_head", 128)]);
    let packing = Packing::new(vec![1024, 2560, 4096]).unwrap();
    let op = Attention::new(&q, &kv, &kv, AttentionConfig::new(true, packing)).unwrap();
    let shardable = op.shardable();
    assert_eq!(shardable.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(), ["heads_kv", "sequence", "query"]);
    assert_eq!(shardable[1].max_parts(), 3);

    let heads: Vec<Interval> = (0..8).map(|m| Interval { lo: m, hi: m + 1 }).collect();
    let whole = vec![Interval::full(4096)];
    let spec = op.join_agg_spec(&[heads, whole.clone(), whole.clone()]).unwrap();
    assert_eq!(spec.len(), 8);
    for (m, f) in spec.functions.iter().enumerate() {
        let kv = TensorType::new(&[m, 0, 0], &[m + 1, 4096, 128]).unwrap();
        let qo = TensorType::new(&[4 * m, 0, 0], &[4 * m + 4, 4096, 128]).unwrap();
        assert_eq!(f.inputs, vec![qo.clone(), kv.clone(), kv]);
        assert_eq!(f.outputs, vec![qo]);
    }
    einsum_joinagg::validate_spec(&op, &spec, Some(8)).unwrap();

    // The sequence index may be cut only at sequence ends.
    let at_2048 = vec![Interval { lo: 0, hi: 2048 }, Interval { lo: 2048, hi: 4096 }];
    let err = op.join_agg_spec(&[vec![Interval::full(8)], at_2048, whole.clone()]).unwrap_err();
    assert!(matches!(&err, Error::BadIntervals { index, .. } if index == "sequence"), "{err}");
    assert!(err.to_string().contains("2048"));
    let at_ends = vec![Interval { lo: 0, hi: 1024 }, Interval { lo: 1024, hi: 4096 }];
    let spec = op.join_agg_spec(&[vec![Interval::full(8)], at_ends, whole]).unwrap();
    assert_eq!(spec.functions[1].inputs[1], TensorType::new(&[0, 1024, 0], &[8, 4096, 128]).unwrap());
}

#[test]
fn query_split_sees_the_keys_of_its_sequences() {
    let causal = op(1, 1, 2, true, vec![4, 10]);
    let whole = |n| vec![Interval::full(n)];
    let query = vec![Interval { lo: 0, hi: 6 }, Interval { lo: 6, hi: 10 }];
    let spec = causal.join_agg_spec(&[whole(1), whole(10), query.clone()]).unwrap();
    assert_eq!(spec.functions[0].inputs[1].dim(1), Interval { lo: 0, hi: 6 });
    assert_eq!(spec.functions[1].inputs[1].dim(1), Interval { lo: 4, hi: 10 });
    let full = op(1, 1, 2, false, vec![4, 10]);
    let spec = full.join_agg_spec(&[whole(1), whole(10), query]).unwrap();
    assert_eq!(spec.functions[0].inputs[1].dim(1), Interval { lo: 0, hi: 10 });
    let spec = full.join_agg_spec(&[whole(1), whole(10), vec![Interval { lo: 0, hi: 3 }, Interval { lo: 3, hi: 10 }]]);
    assert_eq!(spec.unwrap().functions[0].inputs[1].dim(1), Interval { lo: 0, hi: 4 });
}

#[test]
fn sequence_and_query_splits_do_not_combine() {
    let a = op(1, 2, 2, true, vec![4, 8]);
    let err = request_spec(&a, &[1, 2, 2]).unwrap_err();
    assert!(matches!(err, Error::Unsupported { .. }), "{err}");
    // p = 4 exists only through the query split (sequence has two parts at most).
    let specs = enumerate_specs(&a, 4).unwrap();
    assert_eq!(specs.iter().map(|c| c.counts.clone()).collect::<Vec<_>>(), vec![vec![1, 1, 4]]);
    let b = op(1, 1, 2, true, vec![3]);
    assert!(matches!(enumerate_specs(&b, 5), Err(Error::NoSpec { p: 5, .. })));
}

#[test]
fn small_tiles_match_the_naive_reference() {
    for causal in [true, false] {
        let a = op(2, 3, 4, causal, vec![5, 7, 19]);
        let ins = inputs(&a, 11);
        let want = naive(&a, &ins[0], &ins[1], &ins[2]);
        let (qb, kb) = (a.inputs[0].tensor_type(), a.inputs[1].tensor_type());
        let (q, k, v) = (ins[0].to_f32(), ins[1].to_f32(), ins[2].to_f32());
        for tiles in [(1, 1), (3, 2), (4, 5), (64, 64), (19, 19)] {
            let got = a.flash(&q, &k, &v, &qb, &kb, tiles);
            let err = got.iter().zip(&want).map(|(x, y)| (x - y).abs()).fold(0.0f32, f32::max);
            assert!(err < 1e-5, "causal {causal} tiles {tiles:?}: {err}");
        }
        let whole = execute_whole(&a, &ins).unwrap();
        let err = whole[0].to_f32().iter().zip(&want).map(|(x, y)| (x - y).abs()).fold(0.0f32, f32::max);
        assert!(err < 1e-5, "{err}");
        // Heads spread over helper threads: the same bits.
        for helpers in [1, 5] {
            let lent = einsum_core::intra_op::with_helpers(helpers, || execute_whole(&a, &ins)).unwrap();
            assert_eq!(lent, whole, "causal {causal}, {helpers} helpers");
        }
    }
}

#[test]
fn every_spec_on_a_few_devices_decomposes_exactly() {
    for causal in [true, false] {
        let a = op(2, 2, 4, causal, vec![3, 8, 13]);
        for p in 1..=6 {
            for choice in enumerate_specs(&a, p).unwrap() {
                let err = decomposition_error(&a, &choice.spec, 5).unwrap();
                assert!(err <= 1e-5, "p {p} counts {:?}: {err}", choice.counts);
            }
        }
    }
}

#[test]
fn visible_pairs_match_brute_force() {
    for causal in [true, false] {
        let a = op(1, 1, 2, causal, vec![3, 4, 9, 12]);
        for (r0, r1, k0, k1) in (0..12).flat_map(|r0| {
            (r0 + 1..=12).flat_map(move |r1| (0..12).flat_map(move |k0| (k0 + 1..=12).map(move |k1| (r0, r1, k0, k1))))
        }) {
            let brute: usize = (r0..r1)
                .map(|i| {
                    let (lo, hi) = a.visible(i);
                    (lo.max(k0)..hi.min(k1)).len()
                })
                .sum();
            let got = a.visible_pairs(Interval { lo: r0, hi: r1 }, Interval { lo: k0, hi: k1 });
            assert_eq!(got, brute as u128, "causal {causal} rows {r0}..{r1} keys {k0}..{k1}");
        }
    }
}

#[test]
fn causal_query_split_is_imbalanced() {
    let causal = op(2, 2, 8, true, vec![64]);
    let spec = request_spec(&causal, &[1, 1, 4]).unwrap();
    let flops: Vec<f64> = spec.functions.iter().map(|f| causal.flops(f)).collect();
    // Rows [16m, 16m + 16) see sum (i + 1) keys, times 4 · d_head · 4 query heads.
    assert_eq!(flops[0], (4 * 8 * 4 * 136) as f64);
    assert!(flops[3] > flops[0]);
    assert!(flops.windows(2).all(|w| w[0] < w[1]));
    let whole = causal.flops(&einsum_joinagg::whole_spec(&causal));
    assert_eq!(flops.iter().sum::<f64>(), whole);

    let full = op(2, 2, 8, false, vec![64]);
    let spec = request_spec(&full, &[1, 1, 4]).unwrap();
    let flops: Vec<f64> = spec.functions.iter().map(|f| full.flops(f)).collect();
    assert!(flops.iter().all(|&x| x == flops[0]));
    assert_eq!(flops[0], (4 * 8 * 4 * 16 * 64) as f64);
}

#[test]
fn construction_errors_name_the_index() {
    let q = desc(&[("hq", 6), ("s", 8), ("e", 4)]);
    let kv = desc(&[("hkv", 2), ("t", 8), ("f", 4)]);
    let cfg = AttentionConfig::new(true, Packing::single(8));
    let shape_index = |r: Result<Attention>| match r {
        Err(Error::Shape { index, .. }) => index,
        other => panic!("expected a shape error, got {other:?}"),
    };
    assert!(Attention::new(&q, &kv, &kv, cfg.clone()).is_ok());
    let kv4 = desc(&[("hkv", 4), ("t", 8), ("f", 4)]);
    assert_eq!(shape_index(Attention::new(&q, &kv4, &kv4, cfg.clone())), "hq");
    assert_eq!(shape_index(Attention::new(&q, &kv, &desc(&[("hv", 3), ("t", 8), ("f", 4)]), cfg.clone())), "hv");
    assert_eq!(shape_index(Attention::new(&q, &desc(&[("hkv", 2), ("t", 9), ("f", 4)]), &kv, cfg.clone())), "t");
    assert_eq!(shape_index(Attention::new(&q, &kv, &desc(&[("hkv", 2), ("t", 8), ("g", 3)]), cfg.clone())), "g");
    let bad_packing = AttentionConfig::new(true, Packing::new(vec![3, 9]).unwrap());
    assert_eq!(shape_index(Attention::new(&q, &kv, &kv, bad_packing)), "s");
    assert_eq!(
        shape_index(Attention::new(
            &TensorDesc {
                dims: vec![
                    einsum_core::Dim::new("hq", 0),
                    einsum_core::Dim::new("s", 8),
                    einsum_core::Dim::new("e", 4)
                ],
                dtype: DType::F32
            },
            &kv,
            &kv,
            cfg.clone()
        )),
        "hq"
    );
    let query_named = desc(&[("hq", 6), ("query", 8), ("e", 4)]);
    assert_eq!(shape_index(Attention::new(&query_named, &kv, &kv, cfg.clone())), "query");
    let clash = desc(&[("s", 2), ("t", 8), ("f", 4)]);
    assert_eq!(shape_index(Attention::new(&q, &clash, &clash, cfg.clone())), "s");
    let rank2 = desc(&[("s", 8), ("e", 4)]);
    assert!(matches!(Attention::new(&rank2, &kv, &kv, cfg.clone()), Err(Error::Invalid { .. })));
    let half = TensorDesc::of(&[("hkv", 2), ("t", 8), ("f", 4)], DType::F16).unwrap();
    let err = Attention::new(&q, &kv, &half, cfg.clone()).unwrap_err();
    assert!(err.to_string().contains("mixed dtypes"), "{err}");
    let nan = AttentionConfig { scale: Some(f32::NAN), ..cfg };
    assert!(matches!(Attention::new(&q, &kv, &kv, nan), Err(Error::Invalid { .. })));
}

#[test]
fn attention_declares_the_roles_of_its_indices() {
    let q = desc(&[("qh", 4), ("seq", 8), ("e", 4)]);
    let kv = desc(&[("kvh", 2), ("seq", 8), ("e", 4)]);
    let att = Attention::new(&q, &kv, &kv, AttentionConfig::new(true, Packing::single(8))).unwrap();
    assert_eq!(att.op_role(), Some(OpRole::Attention));
    let roles = att.index_roles();
    let role = |n: &str| roles.iter().find(|(name, _)| name == n).map(|(_, r)| *r);
    assert_eq!(role("seq"), Some(IndexRole::Tokens));
    assert_eq!(role(QUERY_INDEX), Some(IndexRole::QueryBlocks));
    assert_eq!(role("kvh"), Some(IndexRole::HeadsKv));
    assert_eq!(role("qh"), Some(IndexRole::HeadsQ));
    assert_eq!(roles.len(), 4);
    // Plain multi-head attention with one head name: that index is the key/value heads.
    let mha = desc(&[("h", 2), ("seq", 8), ("e", 4)]);
    let att = Attention::new(&mha, &mha, &mha, AttentionConfig::new(false, Packing::single(8))).unwrap();
    let roles = att.index_roles();
    assert!(roles.contains(&("h".to_string(), IndexRole::HeadsKv)));
    assert!(!roles.iter().any(|(_, r)| *r == IndexRole::HeadsQ), "{roles:?}");
    // A query head index named like the query split is refused when built.
    let clash = desc(&[(QUERY_INDEX, 4), ("seq", 8), ("e", 4)]);
    let err = Attention::new(&clash, &kv, &kv, AttentionConfig::new(true, Packing::single(8))).unwrap_err();
    assert!(matches!(err, Error::Shape { ref index, .. } if index == QUERY_INDEX), "{err}");
}

#[test]
fn kernel_rejects_blocks_that_miss_visible_keys() {
    let a = op(2, 2, 4, false, vec![4, 8]);
    let ins = inputs(&a, 1);
    let q = TensorType::new(&[0, 4, 0], &[2, 8, 4]).unwrap();
    let short = TensorType::new(&[0, 4, 0], &[1, 7, 4]).unwrap();
    let f = FunctionSpec { inputs: vec![q.clone(), short.clone(), short.clone()], outputs: vec![q.clone()] };
    let blocks: Vec<HostTensor> = f.inputs.iter().zip(&ins).map(|(b, t)| t.slice(b).unwrap()).collect();
    let err = a.compute(&f, &blocks).unwrap_err();
    assert!(err.to_string().contains("see keys"), "{err}");

    let other_head = TensorType::new(&[1, 4, 0], &[2, 8, 4]).unwrap();
    let f = FunctionSpec { inputs: vec![q.clone(), other_head.clone(), other_head], outputs: vec![q.clone()] };
    let blocks: Vec<HostTensor> = f.inputs.iter().zip(&ins).map(|(b, t)| t.slice(b).unwrap()).collect();
    assert!(a.compute(&f, &blocks).unwrap_err().to_string().contains("key/value heads"));

    let kv = TensorType::new(&[0, 4, 0], &[1, 8, 4]).unwrap();
    let f = FunctionSpec { inputs: vec![q.clone(), kv.clone(), kv], outputs: vec![q] };
    let blocks: Vec<HostTensor> = f.inputs.iter().zip(&ins).map(|(b, t)| t.slice(b).unwrap()).collect();
    assert!(a.compute(&f, &blocks).is_ok());
    // A block that splits d_head.
    let (q2, kv2) =
        (TensorType::new(&[0, 4, 0], &[2, 8, 2]).unwrap(), TensorType::new(&[0, 4, 0], &[1, 8, 2]).unwrap());
    let f2 = FunctionSpec { inputs: vec![q2.clone(), kv2.clone(), kv2], outputs: vec![q2] };
    let blocks2: Vec<HostTensor> = f2.inputs.iter().zip(&ins).map(|(b, t)| t.slice(b).unwrap()).collect();
    assert!(a.compute(&f2, &blocks2).unwrap_err().to_string().contains("d_head `d_head` must be whole"));
    assert!(matches!(a.compute(&f, &blocks[..2]), Err(Error::Kernel { .. })));
    assert!(matches!(
        a.compute(&f, &[blocks[0].clone(), blocks[0].clone(), blocks[2].clone()]),
        Err(Error::Kernel { .. })
    ));
}

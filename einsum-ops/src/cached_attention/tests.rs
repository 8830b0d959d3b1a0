//! Unit tests of cached attention: its kernel against a naive one, its decompositions, its
//! agreement with the last row of a causal [`Attention`] over the same keys, and its errors,
//! in a file of their own so that `cached_attention.rs` holds the operator alone.

use einsum_core::DType;
use einsum_joinagg::{decomposition_error, enumerate_specs, execute_whole, request_spec};

use super::*;
use crate::Packing;
use crate::attention::{Attention, AttentionConfig};

fn desc(dims: &[(&str, usize)]) -> TensorDesc {
    TensorDesc::of(dims, DType::F32).unwrap()
}

/// The six operand descriptors of a cached attention of `hkv · group` query heads, `batch`
/// sequences and a cache of `cache` rows, in `dtype`.
fn descs(hkv: usize, group: usize, batch: usize, cache: usize, d: usize, dtype: DType) -> Vec<TensorDesc> {
    let of = |dims: &[(&str, usize)]| TensorDesc::of(dims, dtype).unwrap();
    vec![
        of(&[("heads_q", hkv * group), ("batch", batch), ("d_head", d)]),
        of(&[("heads_kv", hkv), ("batch", batch), ("d_head", d)]),
        of(&[("heads_kv", hkv), ("batch", batch), ("d_head", d)]),
        of(&[("heads_kv", hkv), ("batch", batch), ("cache", cache), ("d_head", d)]),
        of(&[("heads_kv", hkv), ("batch", batch), ("cache", cache), ("d_head", d)]),
        TensorDesc::of(&[("batch", batch)], DType::I32).unwrap(),
    ]
}

fn build(ds: &[TensorDesc], scale: Option<f32>) -> Result<CachedAttention> {
    CachedAttention::named(&ds[0], &ds[1], &ds[2], &ds[3], &ds[4], &ds[5], "batch", "d_head", scale)
}

fn op(hkv: usize, group: usize, batch: usize, cache: usize, d: usize) -> CachedAttention {
    build(&descs(hkv, group, batch, cache, d, DType::F32), None).unwrap()
}

/// Random inputs (uniform in `[-1, 1)`, never zeros) with the given positions.
fn inputs(op: &CachedAttention, positions: &[i32], seed: u64) -> Vec<HostTensor> {
    let mut ins: Vec<HostTensor> = op.inputs()[..5]
        .iter()
        .enumerate()
        .map(|(n, d)| HostTensor::random(d.tensor_type(), d.dtype, seed + n as u64))
        .collect();
    ins.push(HostTensor::from_i32(op.inputs()[POSITIONS].tensor_type(), positions.to_vec()).unwrap());
    ins
}

/// The softmax of every (query head, sequence) over its `p + 1` keys, written out.
fn naive(op: &CachedAttention, ins: &[HostTensor]) -> Vec<f32> {
    let (hq, nb, d, g) = (op.heads_q(), op.batch(), op.d_head(), op.group());
    let positions = ins[POSITIONS].to_i32();
    let mut out = vec![0.0f32; hq * nb * d];
    for h in 0..hq {
        for b in 0..nb {
            let p = positions[b] as usize;
            let key = |j: usize, e: usize| {
                if j < p { ins[K_CACHE].get(&[h / g, b, j, e]) } else { ins[K].get(&[h / g, b, e]) }.unwrap()
            };
            let value = |j: usize, e: usize| {
                if j < p { ins[V_CACHE].get(&[h / g, b, j, e]) } else { ins[V].get(&[h / g, b, e]) }.unwrap()
            };
            let scores: Vec<f32> = (0..=p)
                .map(|j| op.scale * (0..d).map(|e| ins[Q].get(&[h, b, e]).unwrap() * key(j, e)).sum::<f32>())
                .collect();
            let max = scores.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
            let w: Vec<f32> = scores.iter().map(|x| (x - max).exp()).collect();
            let total: f32 = w.iter().sum();
            for e in 0..d {
                let y: f32 = w.iter().enumerate().map(|(j, w)| w * value(j, e)).sum();
                out[(h * nb + b) * d + e] = y / total;
            }
        }
    }
    out
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0f32, f32::max)
}

/// Equal as values, NaN equal to NaN; relative error below `tol` otherwise.
fn assert_close(got: &[f32], want: &[f32], tol: f32, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (n, (&x, &y)) in got.iter().zip(want).enumerate() {
        if y.is_nan() || !y.is_finite() {
            assert!(x.is_nan() == y.is_nan() && (y.is_nan() || x == y), "{what} element {n}: {x} vs {y}");
        } else {
            assert!((x - y).abs() <= tol * y.abs().max(1e-3), "{what} element {n}: {x} vs {y}");
        }
    }
}

#[test]
fn the_kernel_matches_the_naive_reference() {
    // GQA (3 query heads per key/value head), positions 0, the capacity, and between.
    for (hkv, group, positions) in [(2, 3, vec![0, 5, 2, 3]), (1, 1, vec![5, 0, 1, 4]), (3, 2, vec![1, 1, 5, 0])] {
        let a = op(hkv, group, 4, 5, 6);
        let ins = inputs(&a, &positions, 3);
        let want = naive(&a, &ins);
        let got = execute_whole(&a, &ins).unwrap();
        let err = max_abs_diff(&got[0].to_f32(), &want);
        assert!(err < 1e-5, "hkv {hkv} group {group}: {err}");
        // Units spread over helper threads: the same bits.
        for helpers in [1, 3] {
            let lent = einsum_core::intra_op::with_helpers(helpers, || execute_whole(&a, &ins)).unwrap();
            assert_eq!(lent, got, "{helpers} helpers");
        }
    }
}

#[test]
fn half_precision_inputs_give_an_output_of_their_dtype() {
    for dtype in [DType::BF16, DType::F16] {
        let a = build(&descs(2, 2, 3, 4, 8, dtype), Some(0.5)).unwrap();
        let ins = inputs(&a, &[4, 0, 2], 1);
        let got = execute_whole(&a, &ins).unwrap();
        assert_eq!(got[0].dtype(), dtype);
        let err = max_abs_diff(&got[0].to_f32(), &naive(&a, &ins));
        assert!(err < 1e-2, "{dtype}: {err}");
    }
}

#[test]
fn every_spec_on_a_few_devices_decomposes_exactly() {
    let a = op(2, 2, 3, 4, 4);
    assert_eq!(
        a.shardable().iter().map(|s| s.name.as_str()).collect::<Vec<_>>(),
        ["heads_kv", "batch", "d_head", "cache"]
    );
    assert_eq!(a.index_bound(POSITIONS), Some(5));
    assert!((0..POSITIONS).all(|k| a.index_bound(k).is_none()));
    // Two key/value heads times three sequences: 5 devices have no spec.
    assert!(matches!(enumerate_specs(&a, 5), Err(Error::NoSpec { .. })));
    for p in [1, 2, 3, 4, 6] {
        for (seed, choice) in enumerate_specs(&a, p).unwrap().iter().enumerate() {
            let err = decomposition_error(&a, &choice.spec, seed as u64).unwrap();
            assert!(err <= 1e-6, "p {p} counts {:?}: {err}", choice.counts);
        }
    }
}

#[test]
fn a_heads_kv_split_shards_query_heads_in_groups_and_batch_rows_follow() {
    let a = op(4, 2, 6, 10, 8);
    let spec = request_spec(&a, &[2, 3, 1, 1]).unwrap();
    assert_eq!(spec.len(), 6);
    let f = &spec.functions[5];
    assert_eq!(f.inputs[Q], TensorType::new(&[4, 4, 0], &[8, 6, 8]).unwrap());
    assert_eq!(f.inputs[K], TensorType::new(&[2, 4, 0], &[4, 6, 8]).unwrap());
    assert_eq!(f.inputs[V], f.inputs[K]);
    assert_eq!(f.inputs[K_CACHE], TensorType::new(&[2, 4, 0, 0], &[4, 6, 10, 8]).unwrap());
    assert_eq!(f.inputs[V_CACHE], f.inputs[K_CACHE]);
    assert_eq!(f.inputs[POSITIONS], TensorType::new(&[4], &[6]).unwrap());
    assert_eq!(f.outputs, vec![f.inputs[Q].clone()]);
    einsum_joinagg::validate_spec(&a, &spec, Some(6)).unwrap();
    // The capacity is charged, whatever the positions.
    let whole = a.flops(&einsum_joinagg::whole_spec(&a));
    assert_eq!(whole, (4 * 8 * 8 * 6 * 11) as f64);
    let parts: f64 = spec.functions.iter().map(|f| a.flops(f)).sum();
    assert_eq!(parts, whole);
}

/// Runs a causal attention over the `p + 1` tokens of sequence `b`: keys and values the cache
/// rows `0..p` then the new ones, queries random but the last, which is the sequence's `q`.
/// Returns its last output row, `[heads_q, d_head]`.
fn causal_last_row(a: &CachedAttention, ins: &[HostTensor], b: usize, p: usize, seed: u64) -> Vec<f32> {
    let (hq, hkv, d) = (a.heads_q(), a.heads_kv(), a.d_head());
    let s = p + 1;
    let filler = HostTensor::random(TensorType::new(&[0, 0, 0], &[hq, s, d]).unwrap(), DType::F32, seed);
    let q: Vec<f32> = (0..hq)
        .flat_map(|h| (0..s).flat_map(move |i| (0..d).map(move |e| (h, i, e))))
        .map(|(h, i, e)| if i < p { filler.get(&[h, i, e]).unwrap() } else { ins[Q].get(&[h, b, e]).unwrap() })
        .collect();
    let rows = |new: usize, cache: usize| -> Vec<f32> {
        (0..hkv)
            .flat_map(|h| (0..s).flat_map(move |j| (0..d).map(move |e| (h, j, e))))
            .map(|(h, j, e)| if j < p { ins[cache].get(&[h, b, j, e]) } else { ins[new].get(&[h, b, e]) }.unwrap())
            .collect()
    };
    let qd = desc(&[("heads_q", hq), ("sequence", s), ("d_head", d)]);
    let kvd = desc(&[("heads_kv", hkv), ("sequence", s), ("d_head", d)]);
    let config = AttentionConfig { scale: Some(a.scale()), ..AttentionConfig::new(true, Packing::single(s)) };
    let att = Attention::new(&qd, &kvd, &kvd, config).unwrap();
    let t = |desc: &TensorDesc, data: Vec<f32>| HostTensor::from_f32(desc.tensor_type(), DType::F32, data).unwrap();
    let out = execute_whole(&att, &[t(&qd, q), t(&kvd, rows(K, K_CACHE)), t(&kvd, rows(V, V_CACHE))]).unwrap();
    let last = TensorType::new(&[0, p, 0], &[hq, s, d]).unwrap();
    out[0].slice(&last).unwrap().to_f32()
}

/// Sequence `b`'s rows of the output, `[heads_q, d_head]`.
fn sequence_rows(out: &HostTensor, b: usize) -> Vec<f32> {
    let [hq, _, d] = out.ty().shape()[..] else { panic!("rank 3") };
    out.slice(&TensorType::new(&[0, b, 0], &[hq, b + 1, d]).unwrap()).unwrap().to_f32()
}

/// Replaces the cache rows from each sequence's position on by `value`.
fn fill_unseen(a: &CachedAttention, ins: &mut [HostTensor], value: f32) {
    let positions = ins[POSITIONS].to_i32();
    for cache in [K_CACHE, V_CACHE] {
        let ty = ins[cache].ty().clone();
        let [hkv, nb, c, d] = ty.shape()[..] else { panic!("rank 4") };
        let mut data = ins[cache].to_f32();
        for h in 0..hkv {
            for (b, &p) in positions.iter().enumerate().take(nb) {
                for j in p as usize..c {
                    data[((h * nb + b) * c + j) * d..][..d].fill(value);
                }
            }
        }
        ins[cache] = HostTensor::from_f32(ty, a.inputs()[cache].dtype, data).unwrap();
    }
}

/// The property decoding rests on: with the cache holding rows `0..p` of a sequence's keys
/// and values and the new key and value at row `p`, the output is row `p` of a causal
/// attention over the `p + 1` tokens; and what the cache holds from row `p` on (NaN here)
/// changes nothing.
#[test]
fn each_sequence_is_the_last_row_of_a_causal_attention_over_its_prefix() {
    let a = op(2, 3, 5, 7, 8);
    let positions = [3, 0, 7, 1, 5];
    let mut ins = inputs(&a, &positions, 21);
    let got = execute_whole(&a, &ins).unwrap();
    for (b, &p) in positions.iter().enumerate() {
        let want = causal_last_row(&a, &ins, b, p as usize, 40 + b as u64);
        assert_close(&sequence_rows(&got[0], b), &want, 1e-5, &format!("sequence {b} at {p}"));
    }
    fill_unseen(&a, &mut ins, f32::NAN);
    let unseen_nan = execute_whole(&a, &ins).unwrap();
    assert_eq!(unseen_nan, got);
    fill_unseen(&a, &mut ins, f32::INFINITY);
    assert_eq!(execute_whole(&a, &ins).unwrap(), got);
}

/// Non-finite values that the token sees follow attention's semantics: a −∞ score gets weight
/// 0, an infinite value reaches its column, a NaN key makes its heads' rows NaN.
#[test]
fn seen_non_finite_values_behave_as_in_attention() {
    let a = op(2, 2, 3, 4, 4);
    let positions = [3, 2, 4];
    let mut ins = inputs(&a, &positions, 5);
    let set = |t: &mut HostTensor, at: &[usize], x: f32| {
        let ty = t.ty().clone();
        let mut data = t.to_f32();
        let offset = at.iter().zip(ty.shape()).fold(0, |o, (&i, n)| o * n + i);
        data[offset] = x;
        *t = HostTensor::from_f32(ty, DType::F32, data).unwrap();
    };
    // Sequence 0: key 1 of head 0 scores −∞ for positive queries (then weight 0).
    set(&mut ins[K_CACHE], &[0, 0, 1, 0], f32::NEG_INFINITY);
    set(&mut ins[Q], &[0, 0, 0], 0.5);
    set(&mut ins[Q], &[1, 0, 0], 0.75);
    // Sequence 1: an infinite value at row 0 of head 1, column 2.
    set(&mut ins[V_CACHE], &[1, 1, 0, 2], f32::INFINITY);
    // Sequence 2: a NaN in the new key of head 0.
    set(&mut ins[K], &[0, 2, 3], f32::NAN);
    let got = execute_whole(&a, &ins).unwrap();
    for (b, &p) in positions.iter().enumerate() {
        let want = causal_last_row(&a, &ins, b, p as usize, 7);
        assert_close(&sequence_rows(&got[0], b), &want, 1e-5, &format!("sequence {b}"));
    }
    let rows = sequence_rows(&got[0], 0);
    assert!(rows.iter().all(|x| x.is_finite()), "{rows:?}");
    let rows = sequence_rows(&got[0], 1);
    assert!(rows[2 * 4 + 2] == f32::INFINITY && rows[..2 * 4].iter().all(|x| x.is_finite()), "{rows:?}");
    let rows = sequence_rows(&got[0], 2);
    assert!(rows[..2 * 4].iter().all(|x| x.is_nan()) && rows[2 * 4..].iter().all(|x| x.is_finite()), "{rows:?}");
}

/// Infinite scores: every seen score −∞ makes the row NaN, as does one +∞ score.
#[test]
fn infinite_scores_make_the_row_nan_as_in_attention() {
    let a = op(1, 1, 1, 3, 4);
    for sign in [-1.0f32, 1.0] {
        let mut ins = inputs(&a, &[2], 8);
        let mut cache = ins[K_CACHE].to_f32();
        cache[0] = sign;
        cache[4] = sign;
        ins[K_CACHE] = HostTensor::from_f32(ins[K_CACHE].ty().clone(), DType::F32, cache).unwrap();
        let mut key = ins[K].to_f32();
        key[0] = sign;
        ins[K] = HostTensor::from_f32(ins[K].ty().clone(), DType::F32, key).unwrap();
        let mut q = ins[Q].to_f32();
        q[0] = f32::INFINITY;
        ins[Q] = HostTensor::from_f32(ins[Q].ty().clone(), DType::F32, q).unwrap();
        let got = execute_whole(&a, &ins).unwrap()[0].to_f32();
        assert!(got.iter().all(|x| x.is_nan()), "sign {sign}: {got:?}");
        assert_close(&got, &causal_last_row(&a, &ins, 0, 2, 3), 1e-5, "against attention");
    }
}

#[test]
fn a_position_outside_the_cache_is_an_error_naming_the_sequence() {
    let a = op(1, 2, 3, 4, 4);
    for bad in [-1, 5] {
        let ins = inputs(&a, &[0, 4, bad], 2);
        let err = execute_whole(&a, &ins).unwrap_err();
        assert!(matches!(err, Error::Kernel { .. }), "{err}");
        let msg = err.to_string();
        assert!(msg.contains(&format!("position {bad} of sequence 2")) && msg.contains("0..=4"), "{msg}");
    }
}

#[test]
fn construction_errors_name_the_index() {
    let ok = descs(2, 3, 4, 5, 8, DType::F32);
    assert!(build(&ok, None).is_ok());
    let with = |n: usize, t: TensorDesc| {
        let mut ds = ok.clone();
        ds[n] = t;
        ds
    };
    let shape_error = |ds: &[TensorDesc], batch: &str, d_head: &str| match CachedAttention::named(
        &ds[0], &ds[1], &ds[2], &ds[3], &ds[4], &ds[5], batch, d_head, None,
    ) {
        Err(Error::Shape { index, reason, .. }) => (index, reason),
        other => panic!("expected a shape error, got {other:?}"),
    };
    let index = |ds: &[TensorDesc]| shape_error(ds, "batch", "d_head");
    let i32s = |dims: &[(&str, usize)]| TensorDesc::of(dims, DType::I32).unwrap();

    // Missing indices and other layouts name the index and the operand.
    assert_eq!(shape_error(&ok, "seq", "d_head").0, "seq");
    assert_eq!(shape_error(&ok, "batch", "e").0, "e");
    assert_eq!(shape_error(&ok, "batch", "batch").0, "batch");
    let (i, reason) = index(&with(0, desc(&[("batch", 4), ("heads_q", 6), ("d_head", 8)])));
    assert!(i == "batch" && reason.contains("q is [batch=4"), "{i}: {reason}");
    let (i, reason) = index(&with(1, desc(&[("heads_kv", 2), ("batch", 4), ("x", 1), ("d_head", 8)])));
    assert!(i == "batch" && reason.contains("k is"), "{i}: {reason}");
    let (i, reason) = index(&with(3, desc(&[("heads_kv", 2), ("batch", 4), ("d_head", 8)])));
    assert!(i == "batch" && reason.contains("k_cache is"), "{i}: {reason}");
    let (i, reason) = index(&with(3, desc(&[("heads_kv", 2), ("batch", 4), ("d_head", 8), ("cache", 5)])));
    assert!(i == "d_head" && reason.contains("k_cache is"), "{i}: {reason}");
    let (i, reason) = index(&with(4, desc(&[("heads_kv", 2), ("cache", 5), ("batch", 4), ("d_head", 8)])));
    assert!(i == "batch" && reason.contains("v_cache"), "{i}: {reason}");
    // Head and cache names.
    assert_eq!(index(&with(2, desc(&[("hv", 2), ("batch", 4), ("d_head", 8)]))).0, "hv");
    assert_eq!(index(&with(3, desc(&[("hc", 2), ("batch", 4), ("cache", 5), ("d_head", 8)]))).0, "hc");
    assert_eq!(index(&with(4, desc(&[("heads_kv", 2), ("batch", 4), ("rows", 5), ("d_head", 8)]))).0, "rows");
    let q_named_cache = with(0, desc(&[("cache", 6), ("batch", 4), ("d_head", 8)]));
    assert_eq!(index(&q_named_cache).0, "cache");
    // Positions.
    assert_eq!(index(&with(5, i32s(&[("seq", 4)]))).0, "batch");
    assert_eq!(index(&with(5, i32s(&[("batch", 4), ("x", 1)]))).0, "batch");
    assert_eq!(index(&with(5, i32s(&[("batch", 3)]))).0, "batch");
    let (i, reason) = index(&with(5, desc(&[("batch", 4)])));
    assert!(i == "batch" && reason.contains("i32"), "{i}: {reason}");
    // Extents.
    assert_eq!(index(&with(1, desc(&[("heads_kv", 2), ("batch", 3), ("d_head", 8)]))).0, "batch");
    assert_eq!(index(&with(2, desc(&[("heads_kv", 2), ("batch", 4), ("d_head", 4)]))).0, "d_head");
    assert_eq!(index(&with(2, desc(&[("heads_kv", 3), ("batch", 4), ("d_head", 8)]))).0, "heads_kv");
    assert_eq!(index(&with(3, desc(&[("heads_kv", 2), ("batch", 4), ("cache", 5), ("d_head", 6)]))).0, "d_head");
    assert_eq!(index(&with(4, desc(&[("heads_kv", 2), ("batch", 4), ("cache", 6), ("d_head", 8)]))).0, "cache");
    let (i, reason) = index(&with(0, desc(&[("heads_q", 5), ("batch", 4), ("d_head", 8)])));
    assert!(i == "heads_q" && reason.contains("multiple"), "{i}: {reason}");
    let zero = TensorDesc {
        dims: vec![
            einsum_core::Dim::new("heads_kv", 2),
            einsum_core::Dim::new("batch", 4),
            einsum_core::Dim::new("cache", 0),
            einsum_core::Dim::new("d_head", 8),
        ],
        dtype: DType::F32,
    };
    let (i, reason) = index(&with(3, zero));
    assert!(i == "cache" && reason.contains("zero extent"), "{i}: {reason}");
    // Dtypes.
    let half = TensorDesc::of(&[("heads_kv", 2), ("batch", 4), ("d_head", 8)], DType::BF16).unwrap();
    let (i, reason) = index(&with(2, half));
    assert!(i == "d_head" && reason.contains("v is bf16"), "{i}: {reason}");
    let ints = i32s(&[("heads_q", 6), ("batch", 4), ("d_head", 8)]);
    let all_int: Vec<TensorDesc> =
        vec![ints.clone(), i32s(&[("heads_kv", 2), ("batch", 4), ("d_head", 8)]), ok[2].clone()];
    assert_eq!(index(&[&all_int[..], &ok[3..]].concat()).0, "d_head");
    // The scale.
    for bad in [f32::NAN, f32::INFINITY] {
        assert!(matches!(build(&ok, Some(bad)), Err(Error::Invalid { .. })));
    }
    assert_eq!(build(&ok, Some(0.25)).unwrap().scale(), 0.25);
    assert_eq!(build(&ok, None).unwrap().scale(), 1.0 / 8f32.sqrt());
}

#[test]
fn cached_attention_declares_the_roles_of_its_indices() {
    let a = op(2, 2, 3, 4, 4);
    assert_eq!(a.op_role(), Some(OpRole::Attention));
    let roles = a.index_roles();
    assert!(roles.contains(&("batch".to_string(), IndexRole::Tokens)));
    assert!(roles.contains(&("heads_kv".to_string(), IndexRole::HeadsKv)));
    assert!(roles.contains(&("heads_q".to_string(), IndexRole::HeadsQ)));
    assert_eq!(roles.len(), 3);
    // Multi-head attention with one head name: that index is the key/value heads.
    let ds = descs(2, 1, 3, 4, 4, DType::F32);
    let mha = with_head_name(&ds[0], "heads_kv");
    let a = CachedAttention::named(&mha, &ds[1], &ds[2], &ds[3], &ds[4], &ds[5], "batch", "d_head", None).unwrap();
    assert!(!a.index_roles().iter().any(|(_, r)| *r == IndexRole::HeadsQ));
}

fn with_head_name(t: &TensorDesc, name: &str) -> TensorDesc {
    let mut t = t.clone();
    t.dims[0] = einsum_core::Dim::new(name, t.dims[0].extent);
    t
}

#[test]
fn kernel_rejects_blocks_it_cannot_compute_on() {
    let a = op(2, 2, 3, 4, 4);
    let ins = inputs(&a, &[1, 2, 3], 1);
    let run = |f: &FunctionSpec| {
        let blocks: Vec<HostTensor> = f.inputs.iter().zip(&ins).map(|(b, t)| t.slice(b).unwrap()).collect();
        a.compute(f, &blocks)
    };
    let whole = einsum_joinagg::whole_spec(&a);
    assert!(run(&whole).is_ok());
    // Query heads that split a group.
    let mut f = whole.clone();
    f.inputs[Q] = TensorType::new(&[1, 0, 0], &[3, 3, 4]).unwrap();
    f.outputs[0] = f.inputs[Q].clone();
    assert!(run(&f).unwrap_err().to_string().contains("whole groups"));
    // A cache block missing rows is a function of a key split: its partial is one column
    // wider. One with no row is refused.
    let mut f = whole.clone();
    let short = TensorType::new(&[0, 0, 0, 0], &[2, 3, 3, 4]).unwrap();
    f.inputs[K_CACHE] = short.clone();
    f.inputs[V_CACHE] = short;
    assert_eq!(*run(&f).unwrap()[0].ty(), TensorType::new(&[0, 0, 0], &[4, 3, 5]).unwrap());
    let mut f = whole.clone();
    let none = TensorType::new(&[0, 0, 2, 0], &[2, 3, 2, 4]).unwrap();
    f.inputs[K_CACHE] = none.clone();
    f.inputs[V_CACHE] = none;
    assert!(run(&f).is_err());
    // Positions of other sequences.
    let mut f = whole.clone();
    f.inputs[POSITIONS] = TensorType::new(&[1], &[3]).unwrap();
    assert!(run(&f).unwrap_err().to_string().contains("batch rows"));
    // Key/value heads the queries do not read.
    let mut f = whole.clone();
    for n in [K, V] {
        f.inputs[n] = TensorType::new(&[1, 0, 0], &[2, 3, 4]).unwrap();
    }
    for n in [K_CACHE, V_CACHE] {
        f.inputs[n] = TensorType::new(&[1, 0, 0, 0], &[2, 3, 4, 4]).unwrap();
    }
    assert!(run(&f).unwrap_err().to_string().contains("key/value heads"));
    // An output block on other query heads than the q block's, and one split along d_head
    // from a q block that is too.
    let mut f = whole.clone();
    f.outputs[0] = TensorType::new(&[2, 0, 0], &[4, 3, 4]).unwrap();
    assert!(run(&f).unwrap_err().to_string().contains("is not the q block"));
    let mut f = whole.clone();
    f.inputs[Q] = TensorType::new(&[0, 0, 0], &[4, 3, 2]).unwrap();
    f.outputs[0] = f.inputs[Q].clone();
    assert!(run(&f).unwrap_err().to_string().contains("must be whole"));
    assert!(matches!(a.compute(&whole, &ins[..5]), Err(Error::Kernel { .. })));
}

/// A split of d_head on the output: every function reads q, k, v and the caches whole along
/// d_head and writes its slice of the features, the same values as the whole kernel's to the
/// bit; the flops charge the scores in full and the weighted values by the slice.
#[test]
fn a_d_head_split_writes_slices_of_the_features_from_whole_operands() {
    let a = op(2, 2, 1, 6, 8);
    let spec = request_spec(&a, &[1, 1, 4, 1]).unwrap();
    einsum_joinagg::validate_spec(&a, &spec, Some(4)).unwrap();
    let whole = einsum_joinagg::whole_spec(&a);
    for (n, f) in spec.functions.iter().enumerate() {
        assert_eq!(f.inputs, whole.inputs, "function {n}");
        assert_eq!(f.outputs[0], TensorType::new(&[0, 0, 2 * n], &[4, 1, 2 * n + 2]).unwrap());
        // Scores: 2 · 8 per key, values: 2 · 2 per key, for 4 query heads and 7 keys.
        assert_eq!(a.flops(f), (2.0 * 8.0 + 2.0 * 2.0) * 4.0 * 7.0);
    }
    assert_eq!(a.flops(&whole), 4.0 * 8.0 * 4.0 * 7.0);
    let ins = inputs(&a, &[4], 3);
    let want = execute_whole(&a, &ins).unwrap();
    let got = einsum_joinagg::execute_spec(&a, &spec, &ins).unwrap();
    assert_eq!(got, want);
}

/// `got` and `want` agree: both NaN, equal, or within `tol` (relative above 1).
fn assert_nan_close(got: &[f32], want: &[f32], tol: f32, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let ok = (g.is_nan() && w.is_nan()) || g == w || (g - w).abs() <= tol * w.abs().max(1.0);
        assert!(ok, "{what}: element {i} is {g}, the whole kernel's {w}");
    }
}

/// The key split: every combination of a cache split (2 and 4 blocks) with heads, batch and
/// d_head splits equals the whole kernel, with positions at 0, inside a block, at block
/// boundaries and at the cache's end; each function's partial is the widened box.
#[test]
fn key_splits_combine_partials_into_the_whole_softmax() {
    let a = op(2, 2, 6, 8, 4);
    let positions = [0, 3, 4, 8, 6, 2];
    let ins = inputs(&a, &positions, 7);
    let want = execute_whole(&a, &ins).unwrap();
    for counts in
        [[1, 1, 1, 2], [1, 1, 1, 4], [1, 1, 1, 8], [2, 1, 1, 2], [1, 2, 1, 4], [1, 1, 2, 2], [2, 3, 2, 2], [1, 6, 1, 4]]
    {
        let spec = request_spec(&a, &counts).unwrap();
        einsum_joinagg::validate_spec(&a, &spec, None).unwrap();
        let types = einsum_joinagg::partial_types(&a, &spec);
        for (f, t) in spec.functions.iter().zip(&types) {
            let ob = &f.outputs[0];
            assert_eq!(t[0].dim(2).hi, ob.dim(2).hi + 1, "{counts:?}: {ob} widens to {}", t[0]);
        }
        let got = einsum_joinagg::execute_spec(&a, &spec, &ins).unwrap();
        assert_eq!(got[0].ty(), want[0].ty());
        assert_nan_close(&got[0].to_f32(), &want[0].to_f32(), 1e-5, &format!("{counts:?}"));
    }
    // Flops: the blocks' rows, the new key charged to the last block.
    let spec = request_spec(&a, &[1, 1, 1, 2]).unwrap();
    let whole = a.flops(&einsum_joinagg::whole_spec(&a));
    let parts: f64 = spec.functions.iter().map(|f| a.flops(f)).sum();
    assert_eq!(parts, whole);
    assert_eq!(a.aggregation(), Aggregation::Softmax);
}

/// Non-finite scores under a key split behave as in the whole kernel: a NaN or `+∞` score
/// makes the row NaN, `−∞` scores in one block get weight 0 when another block saw a finite
/// score, and a row whose every seen score is `−∞` is NaN.
#[test]
fn key_splits_keep_the_non_finite_semantics() {
    let a = op(1, 2, 1, 8, 4);
    let ninf = f32::NEG_INFINITY;
    let key = |v: f32| [v, 0.0, 0.0, 0.0];
    // q = 1 everywhere, so a key [x, 0, 0, 0] scores exactly scale · x.
    let case = |p: i32, rows: &[(usize, [f32; 4])], new_key: Option<[f32; 4]>| {
        let mut ins = inputs(&a, &[p], 11);
        ins[Q] = HostTensor::from_f32(ins[Q].ty().clone(), DType::F32, vec![1.0; 8]).unwrap();
        let mut cache = ins[K_CACHE].to_f32();
        for &(j, k) in rows {
            cache[j * 4..][..4].copy_from_slice(&k);
        }
        ins[K_CACHE] = HostTensor::from_f32(ins[K_CACHE].ty().clone(), DType::F32, cache).unwrap();
        if let Some(k) = new_key {
            ins[K] = HostTensor::from_f32(ins[K].ty().clone(), DType::F32, k.to_vec()).unwrap();
        }
        ins
    };
    let all_ninf: Vec<(usize, [f32; 4])> = (0..8).map(|j| (j, key(ninf))).collect();
    let cases = [
        ("NaN score", case(6, &[(1, key(f32::NAN))], None), Some(true)),
        ("+inf score", case(6, &[(5, key(f32::INFINITY))], None), Some(true)),
        ("-inf in the first block, finite in the second", case(6, &all_ninf[..4], None), Some(false)),
        ("-inf in the second block, finite in the first", case(8, &all_ninf[4..], Some(key(ninf))), Some(false)),
        ("every score -inf", case(6, &all_ninf, Some(key(ninf))), Some(true)),
        ("every score -inf at the cache's end", case(8, &all_ninf, Some(key(ninf))), Some(true)),
        ("position 0, the new key alone", case(0, &all_ninf, None), Some(false)),
    ];
    for (what, ins, nan) in cases {
        let want = execute_whole(&a, &ins).unwrap()[0].to_f32();
        if let Some(nan) = nan {
            assert_eq!(want.iter().all(|x| x.is_nan()), nan, "{what}: the whole kernel gives {want:?}");
            assert!(nan || want.iter().all(|x| x.is_finite()), "{what}: {want:?}");
        }
        for counts in [[1, 1, 1, 2], [1, 1, 1, 4], [1, 1, 2, 8]] {
            let spec = request_spec(&a, &counts).unwrap();
            let got = einsum_joinagg::execute_spec(&a, &spec, &ins).unwrap()[0].to_f32();
            assert_nan_close(&got, &want, 1e-5, &format!("{what} {counts:?}"));
        }
    }
}

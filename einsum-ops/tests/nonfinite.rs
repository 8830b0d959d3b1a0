//! NaN and the infinities pass through every operator's CPU kernel as NumPy passes them
//! through the operator's formula: `np.maximum` and `np.max` propagate NaN (so `relu`,
//! which is `maximum(x, 0)`, does too), a softmax row is `exp(x - max) / sum` with the NaN
//! of `inf - inf` where NumPy has it, and attention is that softmax over the keys a query
//! sees. A key a query does not see contributes nothing, not even a NaN of its value: that
//! is what makes a decomposed attention (whose blocks hold only the keys their queries
//! need) equal the whole one.

use einsum_core::{DType, HostTensor, TensorDesc, TensorType};
use einsum_joinagg::{AbstractOperator, execute_spec, execute_whole, request_spec};
use einsum_ops::{
    Packing,
    attention::{Attention, AttentionConfig},
    binary::{Binary, BinaryOp},
    einsum::Einsum,
    fused::ElementwiseChain,
    layernorm::LayerNorm,
    reduce::{Reduce, ReduceOp},
    rmsnorm::RmsNorm,
    rope::Rope,
    softmax::Softmax,
    unary::{Unary, UnaryOp},
};

const NAN: f32 = f32::NAN;
const INF: f32 = f32::INFINITY;

fn desc(dims: &[(&str, usize)]) -> TensorDesc {
    TensorDesc::of(dims, DType::F32).unwrap()
}

fn tensor(d: &TensorDesc, data: Vec<f32>) -> HostTensor {
    HostTensor::from_f32(d.tensor_type(), d.dtype, data).unwrap()
}

fn run(op: &dyn AbstractOperator, inputs: &[HostTensor]) -> Vec<f32> {
    execute_whole(op, inputs).unwrap().remove(0).to_f32()
}

/// Equal as NumPy's `assert_array_equal` compares: NaN equals NaN, and an infinity only
/// itself.
fn same(got: &[f32], want: &[f32]) -> bool {
    got.len() == want.len() && got.iter().zip(want).all(|(g, w)| g == w || (g.is_nan() && w.is_nan()))
}

/// As [`same`], with finite values within `tol` (relative to `max(|want|, 1)`).
fn close(got: &[f32], want: &[f32], tol: f32) -> bool {
    got.len() == want.len()
        && got.iter().zip(want).all(|(g, w)| {
            g == w || (g.is_nan() && w.is_nan()) || (w.is_finite() && (g - w).abs() <= tol * w.abs().max(1.0))
        })
}

#[test]
fn unary_operations_keep_nan_and_follow_their_formula_at_the_infinities() {
    let x = desc(&[("i", 6)]);
    let data = vec![NAN, -INF, INF, -1.0, 2.0, -0.0];
    let cases: [(UnaryOp, [f32; 6]); 6] = [
        // maximum(x, 0): NaN stays NaN, as np.maximum(np.nan, 0); maximum(-0, 0) is -0.
        (UnaryOp::Relu, [NAN, 0.0, INF, 0.0, 2.0, -0.0]),
        // 0.5·x·(1 + tanh(..)) as written: -inf · (1 + tanh(-inf)) = -inf · 0 is NaN.
        (UnaryOp::Gelu, [NAN, NAN, INF, UnaryOp::Gelu.apply(-1.0), UnaryOp::Gelu.apply(2.0), -0.0]),
        // x / (1 + e^-x): -inf / inf is NaN.
        (UnaryOp::Silu, [NAN, NAN, INF, UnaryOp::Silu.apply(-1.0), UnaryOp::Silu.apply(2.0), -0.0]),
        (UnaryOp::Exp, [NAN, 0.0, INF, UnaryOp::Exp.apply(-1.0), UnaryOp::Exp.apply(2.0), 1.0]),
        (UnaryOp::Neg, [NAN, INF, -INF, 1.0, -2.0, 0.0]),
        (UnaryOp::Scale(0.0), [NAN, NAN, NAN, -0.0, 0.0, -0.0]),
    ];
    for (op, want) in cases {
        let got = run(&Unary::new(&x, op).unwrap(), &[tensor(&x, data.clone())]);
        assert!(same(&got, &want), "{}: {got:?}, want {want:?}", op.name());
        for (v, w) in data.iter().zip(want) {
            assert!(same(&[op.apply(*v)], &[w]), "{}.apply({v})", op.name());
        }
    }
    // The same bits through a fused chain (relu, then max with a NaN).
    let t = TensorType::zero_bounded(&[6]);
    let chain = ElementwiseChain::unary(UnaryOp::Relu, DType::F32)
        .then(&ElementwiseChain::binary(BinaryOp::Max, DType::F32), 0)
        .unwrap();
    let b = vec![0.5, NAN, 0.5, 0.5, NAN, 0.5];
    let ins = [tensor(&x, data.clone()), tensor(&x, b)];
    let got = chain.compute(&ins, &t).unwrap().to_f32();
    assert!(same(&got, &[NAN, NAN, INF, 0.5, NAN, 0.5]), "{got:?}");
}

#[test]
fn binary_max_propagates_nan_from_either_side_on_every_path() {
    let a = vec![NAN, 1.0, NAN, -INF, INF, 3.0, -0.0, 0.0];
    let b = vec![1.0, NAN, NAN, 2.0, NAN, -INF, 0.0, -0.0];
    let want_max = [NAN, NAN, NAN, 2.0, NAN, 3.0, -0.0, 0.0];
    for (op, want) in [
        (BinaryOp::Max, want_max),
        (BinaryOp::Add, [NAN, NAN, NAN, -INF, NAN, -INF, 0.0, 0.0]),
        (BinaryOp::Sub, [NAN, NAN, NAN, -INF, NAN, INF, -0.0, 0.0]),
        (BinaryOp::Mul, [NAN, NAN, NAN, -INF, NAN, -INF, -0.0, -0.0]),
        (BinaryOp::Div, [NAN, NAN, NAN, -INF, NAN, -0.0, NAN, NAN]),
    ] {
        // Same shapes (the flat loop), and a transposed operand (the strided loop).
        let x = desc(&[("i", 2), ("j", 4)]);
        let got = run(&Binary::new(&x, &x, op).unwrap(), &[tensor(&x, a.clone()), tensor(&x, b.clone())]);
        assert!(same(&got, &want), "{}: {got:?}", op.name());
        let xt = desc(&[("j", 4), ("i", 2)]);
        let bt: Vec<f32> = (0..8).map(|n| b[(n % 2) * 4 + n / 2]).collect();
        let got = run(&Binary::new(&x, &xt, op).unwrap(), &[tensor(&x, a.clone()), tensor(&xt, bt)]);
        assert!(same(&got, &want), "{} strided: {got:?}", op.name());
    }
    // max(0, -0) is 0 and max(-0, 0) is -0, as np.maximum picks its first operand on a tie.
    assert!(BinaryOp::Max.apply(-0.0, 0.0).is_sign_negative());
    assert!(BinaryOp::Max.apply(0.0, -0.0).is_sign_positive());
    // A NaN bias row reaches every token.
    let (x, bias) = (desc(&[("t", 3), ("d", 2)]), desc(&[("d", 2)]));
    let op = Binary::new(&x, &bias, BinaryOp::Max).unwrap();
    let got = run(&op, &[tensor(&x, vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]), tensor(&bias, vec![NAN, 0.0])]);
    assert!(same(&got, &[NAN, 2.0, NAN, 4.0, NAN, 6.0]), "{got:?}");
}

#[test]
fn reductions_keep_nan_and_infinities_whole_and_over_kept_splits() {
    // Rows longer than the 16 lanes of the vectorised maximum, a NaN at every position of
    // a lane and of the remainder.
    let n = 37;
    let x = desc(&[("r", 5), ("k", n)]);
    let mut data: Vec<f32> = (0..5 * n).map(|i| ((i * 7919) % 101) as f32 - 50.0).collect();
    data[3] = NAN; // row 0, first lanes
    data[n + 35] = NAN; // row 1, the remainder
    data[2 * n + 20] = INF; // row 2
    data[3 * n..4 * n].fill(-INF); // row 3
    data[4 * n + 36] = NAN; // row 4, with an infinity of each sign
    data[4 * n] = INF;
    data[4 * n + 1] = -INF;
    let t = tensor(&x, data.clone());
    let max = Reduce::new(&x, &["k"], ReduceOp::Max).unwrap();
    let got = run(&max, std::slice::from_ref(&t));
    assert!(same(&got, &[NAN, NAN, INF, -INF, NAN]), "{got:?}");
    let sum = Reduce::new(&x, &["k"], ReduceOp::Sum).unwrap();
    let got = run(&sum, std::slice::from_ref(&t));
    assert!(got[0].is_nan() && got[1].is_nan() && got[2] == INF && got[3] == -INF && got[4].is_nan(), "{got:?}");
    // Splitting only the kept index: each block's own maximum.
    let spec = request_spec(&max, &[5, 1]).unwrap();
    let got = execute_spec(&max, &spec, &[t]).unwrap().remove(0).to_f32();
    assert!(same(&got, &[NAN, NAN, INF, -INF, NAN]), "{got:?}");
    // Over a strided (non-last) index.
    let y = desc(&[("k", 3), ("c", 2)]);
    let got =
        run(&Reduce::new(&y, &["k"], ReduceOp::Max).unwrap(), &[tensor(&y, vec![1.0, -INF, NAN, -INF, 2.0, -INF])]);
    assert!(same(&got, &[NAN, -INF]), "{got:?}");
}

/// Softmax of each row of `rows` (given row-major, length `n` each) along its last
/// dimension and, transposed, along its first: NumPy's `exp(x - max) / sum`.
fn softmax_both_ways(rows: &[Vec<f32>]) -> (Vec<Vec<f32>>, Vec<Vec<f32>>) {
    let (r, n) = (rows.len(), rows[0].len());
    let x = desc(&[("r", r), ("k", n)]);
    let last = run(&Softmax::new(&x, "k").unwrap(), &[tensor(&x, rows.concat())]);
    let xt = desc(&[("k", n), ("r", r)]);
    let transposed: Vec<f32> = (0..n * r).map(|i| rows[i % r][i / r]).collect();
    let first = run(&Softmax::new(&xt, "k").unwrap(), &[tensor(&xt, transposed)]);
    let last = last.chunks(n).map(<[f32]>::to_vec).collect();
    let first = (0..r).map(|row| (0..n).map(|k| first[k * r + row]).collect()).collect();
    (last, first)
}

#[test]
fn softmax_follows_the_max_subtracted_formula() {
    let n = 19;
    let finite: Vec<f32> = (0..n).map(|i| i as f32 / 4.0).collect();
    let with = |at: usize, v: f32| {
        let mut r = finite.clone();
        r[at] = v;
        r
    };
    let rows = vec![
        finite.clone(),
        with(17, NAN), // max is NaN: every weight NaN
        with(3, INF),  // max is inf: inf - inf is NaN, and NaN / NaN everywhere
        with(5, -INF), // e^-inf = 0: that weight is 0, the others those of the rest
        vec![-INF; n], // max is -inf: -inf - -inf is NaN
        vec![INF; n],  // inf - inf: NaN
    ];
    let (last, first) = softmax_both_ways(&rows);
    for got in [&last, &first] {
        let total: f32 = got[0].iter().sum();
        assert!((total - 1.0).abs() < 1e-5, "{:?}", got[0]);
        for r in [1, 2, 4, 5] {
            assert!(got[r].iter().all(|v| v.is_nan()), "row {r}: {:?}", got[r]);
        }
        // Row 3: weight 0 at the -inf, the others a softmax of the remaining 18.
        let rest: Vec<f32> = finite.iter().enumerate().filter(|(i, _)| *i != 5).map(|(_, v)| *v).collect();
        let m = rest.iter().copied().fold(f32::MIN, f32::max);
        let s: f32 = rest.iter().map(|v| (v - m).exp()).sum();
        let want: Vec<f32> =
            finite.iter().enumerate().map(|(i, v)| if i == 5 { 0.0 } else { (v - m).exp() / s }).collect();
        assert!(close(&got[3], &want, 1e-5), "{:?}", got[3]);
    }
}

#[test]
fn norms_follow_their_formula() {
    let n = 20;
    let row = |i: usize| -> Vec<f32> { (0..n).map(|k| (k as f32 - 9.5) / 3.0 + i as f32).collect() };
    let mut rows: Vec<Vec<f32>> = (0..4).map(row).collect();
    rows[1][7] = NAN;
    rows[2][18] = INF;
    let x = desc(&[("t", 4), ("d", n)]);
    let w = desc(&[("d", n)]);
    let mut weight: Vec<f32> = vec![1.5; n];
    weight[11] = NAN;
    let ins = [tensor(&x, rows.concat()), tensor(&w, weight.clone())];
    // RMSNorm: x / sqrt(mean(x²) + eps) · w. A NaN row is NaN; a row with inf has mean square
    // inf, so its finite elements are x / inf · w = 0 and the inf one inf / inf = NaN; the
    // NaN weight makes its column NaN.
    let y = run(&RmsNorm::new(&x, &w, "d", 1e-6).unwrap(), &ins);
    for (t, out) in y.chunks(n).enumerate() {
        for (k, v) in out.iter().enumerate() {
            let nan = k == 11 || t == 1 || (t == 2 && k == 18);
            assert_eq!(v.is_nan(), nan, "rmsnorm [{t}, {k}] = {v}");
            if t == 2 && !nan {
                assert_eq!(*v, 0.0, "rmsnorm [{t}, {k}]");
            }
            assert!(nan || v.is_finite());
        }
    }
    // LayerNorm: (x - mean) / sqrt(var + eps) · w + b. An inf makes the mean inf and
    // inf - inf NaN: the whole row is NaN, as is a NaN row; and the NaN weight's column.
    let b = desc(&[("d", n)]);
    let ins = [tensor(&x, rows.concat()), tensor(&w, weight), tensor(&b, vec![0.25; n])];
    let y = run(&LayerNorm::new(&x, &w, &b, "d", 1e-6).unwrap(), &ins);
    for (t, out) in y.chunks(n).enumerate() {
        for (k, v) in out.iter().enumerate() {
            assert_eq!(v.is_nan(), k == 11 || t == 1 || t == 2, "layernorm [{t}, {k}] = {v}");
        }
    }
}

#[test]
fn rope_mixes_a_nan_only_into_its_pair() {
    let x = desc(&[("s", 3), ("f", 4)]);
    let mut data: Vec<f32> = (0..12).map(|i| i as f32 / 5.0).collect();
    data[4] = NAN; // position 1, feature 0: pairs with feature 2
    data[1] = INF; // position 0 (angle 0): x·1 - y·0 stays inf, y·1 + x·0 is NaN
    let y = run(&Rope::new(&x, "s", "f", 10_000.0, Packing::single(3)).unwrap(), &[tensor(&x, data)]);
    let nan: Vec<usize> = y.iter().enumerate().filter(|(_, v)| v.is_nan()).map(|(i, _)| i).collect();
    assert_eq!(nan, [3, 4, 6], "{y:?}");
    assert_eq!(y[1], INF);
    assert!(y.iter().enumerate().all(|(i, v)| nan.contains(&i) || i == 1 || v.is_finite()), "{y:?}");
}

#[test]
fn einsum_propagates_nan_and_inf_times_zero() {
    let (a, b) = (desc(&[("i", 3), ("k", 4)]), desc(&[("k", 4), ("j", 2)]));
    let mut av: Vec<f32> = (0..12).map(|i| i as f32).collect();
    av[1] = NAN; // row 0
    av[8] = INF; // row 2, k = 0
    let mut bv = vec![1.0f32; 8];
    bv[1] = 0.0; // k = 0, j = 1: inf · 0
    let y = run(&Einsum::new("ik,kj->ij", &[a.clone(), b.clone()]).unwrap(), &[tensor(&a, av), tensor(&b, bv)]);
    assert!(same(&y, &[NAN, NAN, 22.0, 18.0, INF, NAN]), "{y:?}");
}

/// Attention over one head with scale 1, `q`, `k`, `v` of `[1, s, d]` given row-major.
fn attention_case(s: usize, causal: bool, q: Vec<f32>, k: Vec<f32>, v: Vec<f32>) -> Vec<f32> {
    let d = q.len() / s;
    let (qd, kd) = (desc(&[("h", 1), ("s", s), ("e", d)]), desc(&[("hk", 1), ("s", s), ("e", d)]));
    let config = AttentionConfig { causal, packing: Packing::single(s), scale: Some(1.0) };
    let op = Attention::new(&qd, &kd, &kd, config).unwrap();
    run(&op, &[tensor(&qd, q), tensor(&kd, k), tensor(&kd, v)])
}

#[test]
fn attention_scores_follow_the_softmax_and_unseen_keys_contribute_nothing() {
    // Causal, 6 keys in one kernel tile, d = 2; q·k = 1 for every pair unless made otherwise.
    let (s, d) = (6, 2);
    let ones = vec![1.0f32; s * d];
    let half = vec![0.5f32; s * d];
    let v: Vec<f32> = (0..s * d).map(|i| i as f32).collect();
    // Uniform weights over keys 0..=i: the mean of their values.
    let mean = |i: usize, e: usize| (0..=i).map(|j| v[j * d + e]).sum::<f32>() / (i + 1) as f32;
    let base = attention_case(s, true, ones.clone(), half.clone(), v.clone());
    for i in 0..s {
        for e in 0..d {
            assert!((base[i * d + e] - mean(i, e)).abs() < 1e-5, "[{i}, {e}] {}", base[i * d + e]);
        }
    }
    // A NaN value at key 3, column 1: the queries that see key 3 get NaN in column 1 only;
    // queries 0..3 do not see it, and stay as they were (a dense masked P·V would give
    // them 0 · NaN).
    let mut vn = v.clone();
    vn[3 * d + 1] = NAN;
    let got = attention_case(s, true, ones.clone(), half.clone(), vn);
    for i in 0..s {
        assert!(close(&got[i * d..][..1], &base[i * d..][..1], 1e-6), "row {i}: {got:?}");
        assert_eq!(got[i * d + 1].is_nan(), i >= 3, "row {i}: {got:?}");
        if i < 3 {
            assert!(close(&got[i * d + 1..][..1], &base[i * d + 1..][..1], 1e-6), "row {i}: {got:?}");
        }
    }
    // An infinite value at the last key, which only the last query sees (causal): the
    // rows before it unchanged, the last one inf in that column.
    let mut vi = v.clone();
    vi[5 * d] = INF;
    let got = attention_case(s, true, ones.clone(), half.clone(), vi);
    assert!(close(&got[..5 * d], &base[..5 * d], 1e-6), "{got:?}");
    assert_eq!(got[5 * d], INF);
    // A NaN key 2: its score is NaN, so the max of every row that sees it is NaN and the
    // whole row is NaN; rows 0 and 1 do not see it.
    let mut kn = half.clone();
    kn[2 * d] = NAN;
    let got = attention_case(s, true, ones.clone(), kn, v.clone());
    for i in 0..s {
        let row = &got[i * d..][..d];
        assert_eq!(row.iter().all(|x| x.is_nan()), i >= 2, "row {i}: {got:?}");
        if i < 2 {
            assert!(close(row, &base[i * d..][..d], 1e-6), "row {i}: {got:?}");
        }
    }
    // A NaN query: its row only.
    let mut qn = ones.clone();
    qn[4 * d + 1] = NAN;
    let got = attention_case(s, true, qn, half.clone(), v.clone());
    for i in 0..s {
        let row = &got[i * d..][..d];
        assert_eq!(row.iter().all(|x| x.is_nan()), i == 4, "row {i}: {got:?}");
    }
    // A score of +inf (key 1 infinite): the max is inf and inf - inf is NaN, for every row
    // that sees key 1.
    let mut ki = half.clone();
    ki[d] = INF;
    let got = attention_case(s, true, ones.clone(), ki, v.clone());
    for i in 0..s {
        assert_eq!(got[i * d..][..d].iter().all(|x| x.is_nan()), i >= 1, "row {i}: {got:?}");
    }
    // A score of -inf (key 0): weight 0 for the rows with another key; row 0 sees only
    // that key, max - max is NaN, so row 0 is NaN.
    let mut kmi = half.clone();
    kmi[0] = -INF;
    let got = attention_case(s, true, ones.clone(), kmi, v.clone());
    assert!(got[..d].iter().all(|x| x.is_nan()), "{got:?}");
    for i in 1..s {
        for e in 0..d {
            let want = (1..=i).map(|j| v[j * d + e]).sum::<f32>() / i as f32;
            assert!((got[i * d + e] - want).abs() < 1e-5, "[{i}, {e}] {got:?}");
        }
    }
}

#[test]
fn attention_over_several_key_tiles_starts_after_a_tile_of_minus_infinity() {
    // 130 keys: the kernel's first key tile (128 keys) scores -inf for every query, the
    // last two keys 0. NumPy: the max is 0, the first 128 weights e^-inf = 0, so each
    // query (non-causal) averages the values of keys 128 and 129.
    let (s, d) = (130, 2);
    let q = vec![1.0f32; s * d];
    let k: Vec<f32> = (0..s * d).map(|i| if i < 128 * d { if i % 2 == 0 { -INF } else { 0.0 } } else { 0.0 }).collect();
    let v: Vec<f32> = (0..s * d).map(|i| (i % 7) as f32).collect();
    let got = attention_case(s, false, q, k, v.clone());
    for i in 0..s {
        for e in 0..d {
            let want = (v[128 * d + e] + v[129 * d + e]) / 2.0;
            assert!((got[i * d + e] - want).abs() < 1e-5, "[{i}, {e}]: {}", got[i * d + e]);
        }
    }
}

//! Property tests of the pointwise operators: for random shapes and device counts, every
//! spec the operator offers computes what the whole kernel computes.

use einsum_core::{DType, TensorDesc};
use einsum_joinagg::{AbstractOperator, Error, decomposition_error, enumerate_specs};
use einsum_ops::binary::{Binary, BinaryOp};
use einsum_ops::layernorm::LayerNorm;
use einsum_ops::rmsnorm::RmsNorm;
use einsum_ops::softmax::Softmax;
use einsum_ops::unary::{Unary, UnaryOp};
use proptest::prelude::*;
use proptest::sample::Index;

const POOL: [&str; 4] = ["i", "j", "k", "l"];

/// Index names (rank 1-3, drawn from the pool in random order) with extents 1..=10.
fn shape() -> impl Strategy<Value = Vec<(&'static str, usize)>> {
    (proptest::sample::subsequence(POOL.to_vec(), 1..=3).prop_shuffle(), prop::collection::vec(1..=10usize, 3))
        .prop_map(|(names, extents)| names.into_iter().zip(extents).collect())
}

fn desc(dims: &[(&str, usize)]) -> TensorDesc {
    TensorDesc::of(dims, DType::F32).expect("pool names are distinct")
}

/// Draws one spec of `op` on `p` devices and checks it against the whole kernel; a `p`
/// the operator cannot be split over is skipped.
fn check(op: &dyn AbstractOperator, p: usize, pick: Index, seed: u64) -> Result<(), TestCaseError> {
    let choices = match enumerate_specs(op, p) {
        Ok(c) => c,
        Err(Error::NoSpec { .. }) => return Ok(()),
        Err(e) => return Err(TestCaseError::fail(e.to_string())),
    };
    let choice = pick.get(&choices);
    prop_assert_eq!(choice.spec.len(), p);
    let err = decomposition_error(op, &choice.spec, seed).map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert!(err <= 1e-5, "{} counts {:?}: error {}", op.kind(), choice.counts, err);
    Ok(())
}

fn unary_op() -> impl Strategy<Value = UnaryOp> {
    prop_oneof![
        Just(UnaryOp::Relu),
        Just(UnaryOp::Gelu),
        Just(UnaryOp::Silu),
        Just(UnaryOp::Sigmoid),
        Just(UnaryOp::Tanh),
        Just(UnaryOp::Exp),
        Just(UnaryOp::Neg),
        (-4.0f32..4.0).prop_map(UnaryOp::Scale),
    ]
}

fn binary_op() -> impl Strategy<Value = BinaryOp> {
    prop_oneof![Just(BinaryOp::Add), Just(BinaryOp::Sub), Just(BinaryOp::Mul), Just(BinaryOp::Div), Just(BinaryOp::Max)]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    #[test]
    fn unary_specs_match(
        dims in shape(),
        op in unary_op(),
        p in 1..=16usize,
        pick in any::<Index>(),
        seed in any::<u64>(),
    ) {
        let op = Unary::new(&desc(&dims), op).unwrap();
        check(&op, p, pick, seed)?;
    }

    #[test]
    fn binary_specs_match(
        extents in prop::collection::vec(1..=10usize, 4),
        a in proptest::sample::subsequence(POOL.to_vec(), 1..=3).prop_shuffle(),
        b in proptest::sample::subsequence(POOL.to_vec(), 1..=3).prop_shuffle(),
        op in binary_op(),
        p in 1..=16usize,
        pick in any::<Index>(),
        seed in any::<u64>(),
    ) {
        // One extent per pool name, so shared names always agree.
        let extent = |n: &str| extents[POOL.iter().position(|&q| q == n).unwrap()];
        let da: Vec<(&str, usize)> = a.iter().map(|&n| (n, extent(n))).collect();
        let db: Vec<(&str, usize)> = b.iter().map(|&n| (n, extent(n))).collect();
        let op = Binary::outer(&desc(&da), &desc(&db), op).unwrap();
        prop_assume!(op.outputs()[0].tensor_type().volume() <= 4000);
        check(&op, p, pick, seed)?;
    }

    #[test]
    fn softmax_specs_match(
        dims in shape(),
        at in any::<Index>(),
        p in 1..=16usize,
        pick in any::<Index>(),
        seed in any::<u64>(),
    ) {
        let op = Softmax::new(&desc(&dims), at.get(&dims).0).unwrap();
        check(&op, p, pick, seed)?;
    }

    #[test]
    fn rmsnorm_specs_match(
        dims in shape(),
        at in any::<Index>(),
        p in 1..=16usize,
        pick in any::<Index>(),
        seed in any::<u64>(),
    ) {
        let &(name, n) = at.get(&dims);
        let op = RmsNorm::new(&desc(&dims), &desc(&[(name, n)]), name, 1e-5).unwrap();
        check(&op, p, pick, seed)?;
    }

    #[test]
    fn layernorm_specs_match(
        dims in shape(),
        at in any::<Index>(),
        p in 1..=16usize,
        pick in any::<Index>(),
        seed in any::<u64>(),
    ) {
        let &(name, n) = at.get(&dims);
        let param = desc(&[(name, n)]);
        let op = LayerNorm::new(&desc(&dims), &param, &param, name, 1e-5).unwrap();
        check(&op, p, pick, seed)?;
    }

    #[test]
    fn binary_rejects_clashing_extents(
        a in shape(),
        at in any::<Index>(),
        delta in 1..=5usize,
    ) {
        let &(name, n) = at.get(&a);
        let b = desc(&[(name, n + delta)]);
        match Binary::new(&desc(&a), &b, BinaryOp::Add) {
            Err(Error::Shape { op, index, .. }) => {
                prop_assert_eq!(op, "binary");
                prop_assert_eq!(index, name);
            }
            other => prop_assert!(false, "expected a shape error, got {:?}", other),
        }
    }
}

#[test]
fn unknown_indices_are_errors_naming_them() {
    let x = desc(&[("i", 3), ("j", 4)]);
    let w = desc(&[("j", 4)]);
    for err in [
        Softmax::new(&x, "z").unwrap_err(),
        RmsNorm::new(&x, &w, "z", 1e-5).unwrap_err(),
        LayerNorm::new(&x, &w, &w, "z", 1e-5).unwrap_err(),
    ] {
        assert!(matches!(&err, Error::Shape { index, .. } if index == "z"), "{err}");
        assert!(err.to_string().contains("`z`"), "{err}");
    }
}

#[test]
fn impossible_device_counts_have_no_spec() {
    let x = desc(&[("i", 3), ("j", 4)]);
    let w = desc(&[("j", 4)]);
    let ops: Vec<Box<dyn AbstractOperator>> = vec![
        Box::new(Unary::new(&x, UnaryOp::Relu).unwrap()),
        Box::new(Binary::new(&x, &w, BinaryOp::Add).unwrap()),
        Box::new(Softmax::new(&x, "j").unwrap()),
        Box::new(RmsNorm::new(&x, &w, "j", 1e-5).unwrap()),
        Box::new(LayerNorm::new(&x, &w, &w, "j", 1e-5).unwrap()),
    ];
    for op in &ops {
        assert!(matches!(enumerate_specs(op.as_ref(), 13), Err(Error::NoSpec { p: 13, .. })), "{}", op.kind());
        assert!(matches!(enumerate_specs(op.as_ref(), 0), Err(Error::NoSpec { .. })), "{}", op.kind());
    }
    // Softmax and LayerNorm cannot split their normalised index: 3 rows, not 4 devices.
    for op in [&ops[2], &ops[4]] {
        assert!(matches!(enumerate_specs(op.as_ref(), 4), Err(Error::NoSpec { .. })), "{}", op.kind());
    }
    // RMSNorm splits it on its output only (every function reads whole rows of x).
    let norm = enumerate_specs(ops[3].as_ref(), 4).unwrap();
    assert!(
        !norm.is_empty() && norm.iter().all(|c| c.counts[1] > 1),
        "{:?}",
        norm.iter().map(|c| &c.counts).collect::<Vec<_>>()
    );
}

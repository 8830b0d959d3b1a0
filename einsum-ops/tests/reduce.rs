//! Property tests of the reduce operator: every spec it enumerates for a random `p`
//! reproduces the whole-tensor result, for sums and maxima.

use einsum_core::{DType, TensorDesc};
use einsum_joinagg::{AbstractOperator, Error, decomposition_error, enumerate_specs};
use einsum_ops::reduce::{Reduce, ReduceOp};
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::{Config, RngSeed};

/// Deterministic runs: a case that fails once fails every time, so CI is reproducible.
/// (`decomposition_error` floors its scale at 1, so outputs that cancel to near zero are
/// judged on absolute error and do not fail spuriously.)
fn config() -> Config {
    Config { cases: 48, rng_seed: RngSeed::Fixed(0x5eed_0ed0), failure_persistence: None, ..Config::default() }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn reductions_decompose(
        ext in prop::collection::vec(1usize..=12, 1..=3),
        over in prop::collection::vec(any::<bool>(), 3),
        first in any::<Index>(),
        max in any::<bool>(),
        p in 1usize..=16,
        pick in any::<Index>(),
        seed in any::<u64>(),
    ) {
        let names = ["batch", "tokens", "d_model"];
        let dims: Vec<(&str, usize)> = names.iter().copied().zip(ext.iter().copied()).collect();
        let x = TensorDesc::of(&dims, DType::F32).unwrap();
        // A non-empty set of reduced indices: the flagged ones, or one drawn at random.
        let mut reduced: Vec<&str> = dims.iter().zip(&over).filter(|(_, o)| **o).map(|(d, _)| d.0).collect();
        if reduced.is_empty() {
            reduced.push(dims[first.index(dims.len())].0);
        }
        let op = if max { ReduceOp::Max } else { ReduceOp::Sum };
        let r = Reduce::new(&x, &reduced, op).unwrap();
        prop_assert_eq!(r.outputs()[0].rank(), dims.len() - reduced.len());
        let choices = match enumerate_specs(&r, p) {
            Err(Error::NoSpec { .. }) => return Ok(()),
            other => other.unwrap(),
        };
        let choice = &choices[pick.index(choices.len())];
        prop_assert_eq!(choice.spec.len(), p);
        let err = decomposition_error(&r, &choice.spec, seed).unwrap();
        prop_assert!(err <= 1e-5, "{:?} over {:?}, counts {:?}: relative error {}", op, reduced, choice.counts, err);
    }
}

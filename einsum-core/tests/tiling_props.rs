//! Invariants of tilings and host tensors, on random shapes.

use einsum_core::{DType, HostTensor, TensorType, Tiling, check_tiling};
use proptest::prelude::*;

/// A random shape of rank 1..=3 and, per dimension, random cut points inside it.
fn shape_and_cuts() -> impl Strategy<Value = (Vec<usize>, Vec<Vec<usize>>, Vec<Vec<usize>>)> {
    prop::collection::vec(1usize..=9, 1..=3).prop_flat_map(|shape| {
        let cuts = |shape: &Vec<usize>| shape.iter().map(|&n| prop::collection::vec(0..=n, 0..=3)).collect::<Vec<_>>();
        (Just(shape.clone()), cuts(&shape), cuts(&shape))
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn overlay_tiles_and_refines_both((shape, a, b) in shape_and_cuts()) {
        let whole = TensorType::zero_bounded(&shape);
        let ta = Tiling::grid(&whole, &a).unwrap();
        let tb = Tiling::grid(&whole, &b).unwrap();
        let atoms = ta.overlay(&tb).unwrap();
        prop_assert!(check_tiling(&whole, atoms.blocks()).is_ok());
        for block in ta.blocks().iter().chain(tb.blocks()) {
            let inside: usize = atoms.blocks_within(block).map(TensorType::volume).sum();
            prop_assert_eq!(inside, block.volume());
        }
        prop_assert_eq!(ta.overlay(&tb).unwrap(), tb.overlay(&ta).unwrap());
    }

    #[test]
    fn stitching_the_slices_of_a_tiling_restores_the_tensor((shape, a, _) in shape_and_cuts(), seed in any::<u64>()) {
        let whole = TensorType::zero_bounded(&shape);
        let t = HostTensor::random(whole.clone(), DType::BF16, seed);
        let tiling = Tiling::grid(&whole, &a).unwrap();
        let parts: Vec<HostTensor> = tiling.blocks().iter().map(|b| t.slice(b).unwrap()).collect();
        prop_assert_eq!(HostTensor::stitch(&whole, &parts).unwrap(), t);
    }
}

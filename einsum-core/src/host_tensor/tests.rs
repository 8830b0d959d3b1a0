//! Unit tests of `HostTensor` (views, slices, stitching, aggregation, dtype
//! conversions, lent memory), in a file of their own so that `host_tensor.rs` holds the type
//! alone.

use super::*;

fn tt(lo: &[usize], hi: &[usize]) -> TensorType {
    TensorType::new(lo, hi).unwrap()
}

/// The slice conversions (vectorized where the CPU has F16C) round exactly as the scalar
/// conversions do, over every f16 and bf16 bit pattern and over f32 values spanning
/// subnormals, ties, overflow, infinities and NaN (NaN compared as NaN).
#[test]
fn slice_conversions_equal_the_scalar_ones() {
    let halves: Vec<f16> = (0..=u16::MAX).map(f16::from_bits).collect();
    let brains: Vec<bf16> = (0..=u16::MAX).map(bf16::from_bits).collect();
    let same = |a: f32, b: f32| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan());
    for (h, w) in halves.iter().zip(widen(&halves)) {
        assert!(same(h.to_f32(), w), "{h:?}");
    }
    for (h, w) in brains.iter().zip(widen(&brains)) {
        assert!(same(h.to_f32(), w), "{h:?}");
    }
    let mut values: Vec<f32> = (0..200_000u32).map(|i| f32::from_bits(i.wrapping_mul(2_654_435_761))).collect();
    values.extend([
        0.0,
        -0.0,
        65504.0,
        65520.0,
        65519.99,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        5.960_464_5e-8,
        2.980_232_2e-8,
    ]);
    let narrowed: Vec<f16> = narrow(&values);
    for (&v, n) in values.iter().zip(narrowed) {
        assert!(same(f16::from_f32(v).to_f32(), n.to_f32()), "{v:e}");
    }
    let narrowed: Vec<bf16> = narrow(&values);
    for (&v, n) in values.iter().zip(narrowed) {
        assert!(same(bf16::from_f32(v).to_f32(), n.to_f32()), "{v:e}");
    }
}

/// Clones, whole slices, slices of whole rows, one-part stitches and stitches of views of
/// one tensor share the elements; a slice across columns and a stitch of separate
/// tensors make their own.
#[test]
fn contiguous_blocks_share_their_elements() {
    let t = HostTensor::random(tt(&[0, 0], &[4, 6]), DType::F32, 3);
    let at = |x: &HostTensor| x.as_f32().unwrap().as_ptr();
    assert_eq!(at(&t.clone()), at(&t));
    let whole = t.slice(t.ty()).unwrap();
    assert_eq!((at(&whole), &whole), (at(&t), &t));
    let stitched = HostTensor::stitch(t.ty(), std::slice::from_ref(&t)).unwrap();
    assert_eq!(at(&stitched), at(&t));
    let (top, bottom) = (t.slice(&tt(&[0, 0], &[2, 6])).unwrap(), t.slice(&tt(&[2, 0], &[4, 6])).unwrap());
    assert_eq!(at(&top), at(&t));
    assert_eq!(at(&bottom), at(&t).wrapping_add(12));
    assert_eq!(top.to_f32(), t.to_f32()[..12]);
    let again = HostTensor::stitch(t.ty(), &[top.clone(), bottom.clone()]).unwrap();
    assert!(again.shares_elements(&t));
    assert_eq!(again, t);
    let left = t.slice(&tt(&[0, 0], &[4, 2])).unwrap();
    assert!(left.is_contiguous() && !left.shares_elements(&t));
    let copy = t.cast(DType::F16).cast(DType::F32);
    let mixed = HostTensor::stitch(t.ty(), &[top, copy.slice(&tt(&[2, 0], &[4, 6])).unwrap()]).unwrap();
    assert!(!mixed.shares_elements(&t) && !mixed.shares_elements(&copy));
    assert_eq!(mixed.slice(&tt(&[0, 0], &[2, 6])).unwrap().to_f32(), t.to_f32()[..12]);
}

/// A strided view reads the same elements as a compact slice, through every accessor, in
/// every dtype; stitching strided views of one tensor back is a view of it.
#[test]
fn strided_views_read_like_compact_slices() {
    for dtype in DType::ALL {
        let t = HostTensor::random(tt(&[1, 0, 2], &[4, 5, 6]), dtype, 11);
        let part = tt(&[2, 1, 3], &[4, 4, 5]);
        let (view, compact) = (t.view(&part).unwrap(), t.slice(&part).unwrap());
        assert!(!view.is_contiguous() && compact.is_contiguous());
        assert!(view.shares_elements(&t) && !compact.shares_elements(&t));
        assert_eq!(view, compact);
        assert_eq!((view.len(), view.size_bytes()), (compact.len(), compact.size_bytes()));
        assert_eq!(view.to_f32(), compact.to_f32());
        assert_eq!(view.to_ne_bytes(), compact.to_ne_bytes());
        assert_eq!(view.get(&[3, 2, 4]), compact.get(&[3, 2, 4]));
        assert_eq!(view.get(&[1, 2, 4]), None);
        assert!(view.as_f32().is_none());
        assert_eq!(view.compact(), compact);
        assert_eq!(view.cast(DType::F32), compact.cast(DType::F32));
        let sub = tt(&[3, 2, 3], &[4, 3, 5]);
        assert_eq!(view.view(&sub).unwrap(), compact.slice(&sub).unwrap());
        assert!(view.view(&tt(&[1, 1, 3], &[4, 4, 5])).is_err());
        let tiling = crate::Tiling::grid(t.ty(), &[vec![2], vec![3], vec![4]]).unwrap();
        let parts: Vec<_> = tiling.blocks().iter().map(|b| t.view(b).unwrap()).collect();
        let back = HostTensor::stitch(t.ty(), &parts).unwrap();
        assert!(back.shares_elements(&t));
        assert_eq!(back, t);
        let compacts: Vec<_> = parts.iter().map(HostTensor::compact).collect();
        assert_eq!(HostTensor::stitch(t.ty(), &compacts).unwrap(), t);
        // Aggregations read strided views in place, with the bits of compact blocks.
        let other = HostTensor::random(t.ty().clone(), dtype, 12);
        let (w, wc) = (other.view(&part).unwrap(), other.slice(&part).unwrap());
        for agg in [Aggregation::Sum, Aggregation::Max, Aggregation::Min, Aggregation::Product] {
            let strided = HostTensor::aggregate_in(&view, &[w.clone(), view.clone()], agg, None).unwrap();
            let stepwise = compact.aggregate(&wc, agg).unwrap().aggregate(&compact, agg).unwrap();
            assert_eq!(strided.to_ne_bytes(), stepwise.to_ne_bytes(), "{agg:?} {dtype}");
        }
    }
}

/// Zeroed, cache-line-aligned memory and a keeper, as a backend's arena lends them.
fn lent(bytes: usize) -> (Vec<u64>, Lease, std::sync::Weak<dyn std::any::Any + Send + Sync>) {
    let mut mem = vec![0u64; bytes.div_ceil(8) + 8];
    let skip = mem.as_ptr().align_offset(crate::LEASE_ALIGN);
    let ptr = std::ptr::NonNull::new(mem[skip..].as_mut_ptr().cast::<u8>()).unwrap();
    // SAFETY: `mem` outlives every use in the tests below, and only the lease touches it.
    let lease = unsafe { Lease::new(ptr, bytes, Arc::new(())) }.unwrap();
    let keeper = lease.keeper();
    (mem, lease, keeper)
}

/// Stitches and aggregations write into lent memory when given a lease, with the same
/// bits as on the heap; the lease's keeper lives exactly as long as the result (and its
/// views), and a compact copy leaves it.
#[test]
fn lent_memory_holds_results_until_the_last_view_is_dropped() {
    for dtype in DType::ALL {
        let whole = tt(&[0, 0], &[4, 6]);
        let a = HostTensor::random(whole.clone(), dtype, 1);
        let b = HostTensor::random(whole.clone(), dtype, 2);
        let c = HostTensor::random(whole.clone(), dtype, 3);
        let parts = [a.slice(&tt(&[0, 0], &[4, 3])).unwrap(), b.view(&tt(&[0, 3], &[4, 6])).unwrap()];
        let (mem, lease, keeper) = lent(whole.volume() * dtype.size_bytes());
        let stitched = HostTensor::stitch_in(&whole, &parts, Some(lease)).unwrap();
        assert!(stitched.is_lent());
        assert_eq!(stitched, HostTensor::stitch(&whole, &parts).unwrap());
        let view = stitched.view(&tt(&[1, 1], &[2, 5])).unwrap();
        let compact = view.compact();
        drop(stitched);
        assert!(keeper.upgrade().is_some(), "a view keeps the lease");
        assert!(!compact.is_lent());
        assert_eq!(view, compact);
        drop(view);
        assert!(keeper.upgrade().is_none());
        drop(mem);

        let (mem, lease, keeper) = lent(whole.volume() * dtype.size_bytes());
        let sum = HostTensor::aggregate_in(&a, &[b.clone(), c.clone()], Aggregation::Sum, Some(lease)).unwrap();
        let stepwise = a.aggregate(&b, Aggregation::Sum).unwrap().aggregate(&c, Aggregation::Sum).unwrap();
        assert!(sum.is_lent());
        assert_eq!(sum.to_ne_bytes(), stepwise.to_ne_bytes());
        drop(sum);
        assert!(keeper.upgrade().is_none());
        drop(mem);

        let (_mem, small, _) = lent(whole.volume() * dtype.size_bytes() - 1);
        let err = HostTensor::stitch_in(&whole, &parts, Some(small)).unwrap_err();
        assert!(matches!(err, CoreError::DataLength { expected: 24, .. }), "{err}");
    }
    let mut mem = [0u64; 16];
    let skip = mem.as_ptr().align_offset(crate::LEASE_ALIGN) + 1;
    let odd = std::ptr::NonNull::new(mem[skip..].as_mut_ptr().cast::<u8>()).unwrap();
    // SAFETY: refused, so never used.
    assert!(unsafe { Lease::new(odd, 8, Arc::new(())) }.is_none());
}

#[test]
fn slice_keeps_absolute_position() {
    let whole = TensorType::zero_bounded(&[3, 4]);
    let t = HostTensor::from_f32(whole, DType::F32, (0..12).map(|x| x as f32).collect()).unwrap();
    let s = t.slice(&tt(&[1, 2], &[3, 4])).unwrap();
    assert_eq!(s.to_f32(), vec![6.0, 7.0, 10.0, 11.0]);
    assert_eq!(s.get(&[2, 3]), Some(11.0));
    assert_eq!(s.get(&[0, 0]), None);
    let s2 = s.slice(&tt(&[2, 2], &[3, 3])).unwrap();
    assert_eq!(s2.to_f32(), vec![10.0]);
    assert!(s.slice(&tt(&[0, 0], &[1, 1])).is_err());
}

#[test]
fn stitch_inverts_slice_for_every_dtype() {
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        let whole = TensorType::zero_bounded(&[5, 3, 4]);
        let t = HostTensor::random(whole.clone(), dtype, 7);
        let tiling = crate::Tiling::grid(&whole, &[vec![2], vec![1], vec![3]]).unwrap();
        let parts: Vec<_> = tiling.blocks().iter().map(|b| t.slice(b).unwrap()).collect();
        assert_eq!(HostTensor::stitch(&whole, &parts).unwrap(), t);
        assert!(HostTensor::stitch(&whole, &parts[1..]).is_err());
    }
}

/// Storage bytes round-trip every bit pattern in every dtype (a pass through f32 would
/// quiet a signalling NaN), and a wrong length is a typed error.
#[test]
fn storage_bytes_round_trip_bit_exactly() {
    let ty = tt(&[2, 0], &[4, 3]);
    for dtype in DType::ALL {
        let x = HostTensor::random(ty.clone(), dtype, 9);
        let bytes = x.to_ne_bytes();
        assert_eq!(bytes.len(), x.size_bytes());
        assert_eq!(HostTensor::from_ne_bytes(ty.clone(), dtype, &bytes).unwrap(), x);
        let short = HostTensor::from_ne_bytes(ty.clone(), dtype, &bytes[1..]).unwrap_err();
        assert!(matches!(short, CoreError::DataLength { expected: 6, got: 6, .. }), "{short}");
    }
    let snan = 0x7c01u16; // f16 signalling NaN with payload 1
    let mut bytes = Vec::new();
    for _ in 0..6 {
        bytes.extend_from_slice(&snan.to_ne_bytes());
    }
    let x = HostTensor::from_ne_bytes(ty, DType::F16, &bytes).unwrap();
    assert_eq!(x.to_ne_bytes(), bytes);
}

/// The borrowed bytes of a contiguous tensor (whole, or a view of rows) are its storage
/// bytes; a strided view has none. A block filled in place from bytes equals the one
/// decoded from them, and a fill's error comes back as it is.
#[test]
fn bytes_are_borrowed_and_filled_in_place() {
    let whole = tt(&[0, 0], &[4, 3]);
    for dtype in DType::ALL {
        let x = HostTensor::random(whole.clone(), dtype, 3);
        assert_eq!(x.contiguous_ne_bytes(), Some(x.to_ne_bytes().as_slice()));
        let rows = x.view(&tt(&[1, 0], &[3, 3])).unwrap();
        assert_eq!(rows.contiguous_ne_bytes(), Some(rows.to_ne_bytes().as_slice()));
        assert_eq!(x.view(&tt(&[0, 1], &[4, 2])).unwrap().contiguous_ne_bytes(), None);
        let bytes = rows.to_ne_bytes();
        let filled = HostTensor::from_ne_bytes_with(rows.ty().clone(), dtype, |b: &mut [u8]| {
            assert_eq!(b.len(), bytes.len());
            b.copy_from_slice(&bytes);
            Ok::<(), ()>(())
        });
        assert_eq!(filled, Ok(rows.clone()));
        assert_eq!(HostTensor::from_ne_bytes_with(whole.clone(), dtype, |_| Err("lost")), Err("lost"));
    }
}

#[test]
fn aggregate_applies_the_operation() {
    let ty = TensorType::zero_bounded(&[2]);
    let a = HostTensor::from_f32(ty.clone(), DType::F32, vec![1.0, 5.0]).unwrap();
    let b = HostTensor::from_f32(ty.clone(), DType::F32, vec![3.0, 2.0]).unwrap();
    assert_eq!(a.aggregate(&b, Aggregation::Sum).unwrap().to_f32(), vec![4.0, 7.0]);
    assert_eq!(a.aggregate(&b, Aggregation::Max).unwrap().to_f32(), vec![3.0, 5.0]);
    assert_eq!(a.aggregate(&b, Aggregation::Min).unwrap().to_f32(), vec![1.0, 2.0]);
    assert_eq!(a.aggregate(&b, Aggregation::Product).unwrap().to_f32(), vec![3.0, 10.0]);
    assert!(a.aggregate(&b.cast(DType::F16), Aggregation::Sum).is_err());
    // Past one chunk of the fold, in several.
    let big = TensorType::zero_bounded(&[3, 3001]);
    let xs: Vec<HostTensor> = (0..3).map(|s| HostTensor::random(big.clone(), DType::F32, s)).collect();
    let v: Vec<Vec<f32>> = xs.iter().map(HostTensor::to_f32).collect();
    let want: Vec<f32> = (0..big.volume()).map(|i| (v[0][i] + v[1][i]) + v[2][i]).collect();
    assert_eq!(HostTensor::aggregate_in(&xs[0], &xs[1..], Aggregation::Sum, None).unwrap().to_f32(), want);
    assert!(HostTensor::from_f32(ty, DType::F32, vec![1.0]).is_err());
}

#[test]
fn random_is_reproducible_and_nonzero() {
    let ty = TensorType::zero_bounded(&[64]);
    let a = HostTensor::random(ty.clone(), DType::F32, 1);
    assert_eq!(a, HostTensor::random(ty.clone(), DType::F32, 1));
    assert_ne!(a, HostTensor::random(ty, DType::F32, 2));
    assert!(a.to_f32().iter().any(|&x| x != 0.0));
}

/// Partial maxima and minima combine as NumPy's `maximum`/`minimum`: a NaN on either side
/// is kept (`f32::max` would return the other operand), in every dtype.
#[test]
fn aggregating_keeps_nan() {
    let ty = TensorType::zero_bounded(&[3]);
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        let a = HostTensor::from_f32(ty.clone(), dtype, vec![f32::NAN, 1.0, 2.0]).unwrap();
        let b = HostTensor::from_f32(ty.clone(), dtype, vec![5.0, f32::NAN, 1.0]).unwrap();
        for agg in [Aggregation::Max, Aggregation::Min] {
            for (x, y) in [(&a, &b), (&b, &a)] {
                let out = x.aggregate(y, agg).unwrap().to_f32();
                assert!(out[0].is_nan() && out[1].is_nan(), "{agg:?} {dtype}: {out:?}");
                assert_eq!(out[2], if agg == Aggregation::Max { 2.0 } else { 1.0 });
            }
        }
    }
}

#[test]
fn relative_error_is_normwise() {
    let ty = TensorType::zero_bounded(&[2]);
    let a = HostTensor::from_f32(ty.clone(), DType::F32, vec![1.0, 2.0]).unwrap();
    let b = HostTensor::from_f32(ty, DType::F32, vec![1.0, 2.2]).unwrap();
    assert!((relative_error(&a, &b) - 0.2 / 2.2).abs() < 1e-6);
    assert!((scaled_error(&a, &b, 4.0) - 0.2 / 4.0).abs() < 1e-6);
    let nan = HostTensor::from_f32(TensorType::zero_bounded(&[2]), DType::F32, vec![f32::NAN, 2.0]).unwrap();
    assert_eq!(relative_error(&nan, &b), f32::INFINITY);
    // An infinite reference against a finite result used to give ∞/∞ = NaN, which a
    // `max` fold over several outputs drops.
    let inf = HostTensor::from_f32(TensorType::zero_bounded(&[2]), DType::F32, vec![f32::INFINITY, 2.0]).unwrap();
    assert_eq!(scaled_error(&a, &inf, 1.0), f32::INFINITY);
    assert_eq!(scaled_error(&inf, &inf, 1.0), f32::INFINITY);
    assert_eq!([0.5, scaled_error(&a, &inf, 1.0)].into_iter().fold(0.0, f32::max), f32::INFINITY);
}

/// Indices (i32) keep every value exactly through views, slices, stitches and bytes, where a
/// trip through f32 would lose values past 2^24.
#[test]
fn i32_indices_stay_exact_through_views_slices_stitches_and_bytes() {
    let whole = tt(&[0, 0], &[2, 3]);
    let values = vec![0, 1, (1 << 24) + 1, -7, i32::MAX, i32::MIN];
    let t = HostTensor::from_i32(whole.clone(), values.clone()).unwrap();
    assert_eq!(t.dtype(), DType::I32);
    assert_eq!(t.to_i32(), values);
    // A column view is strided; reading it gathers exactly.
    let column = tt(&[0, 2], &[2, 3]);
    assert_eq!(t.view(&column).unwrap().to_i32(), [(1 << 24) + 1, i32::MIN]);
    assert_eq!(t.slice(&column).unwrap().to_i32(), [(1 << 24) + 1, i32::MIN]);
    let (left, right) = (tt(&[0, 0], &[2, 1]), tt(&[0, 1], &[2, 3]));
    let parts = [t.slice(&left).unwrap(), t.slice(&right).unwrap()];
    assert_eq!(HostTensor::stitch(&whole, &parts).unwrap(), t);
    let back = HostTensor::from_ne_bytes(whole.clone(), DType::I32, &t.to_ne_bytes()).unwrap();
    assert_eq!(back.to_i32(), values);
    assert!(HostTensor::from_i32(whole, vec![1, 2]).is_err());
}

#[test]
fn random_indices_lie_below_their_bound_and_repeat_by_seed() {
    let ty = tt(&[0], &[1000]);
    let ids = HostTensor::random_indices(ty.clone(), 7, 3);
    let values = ids.to_i32();
    assert!(values.iter().all(|&v| (0..7).contains(&v)), "{values:?}");
    assert!((0..7).all(|v| values.contains(&v)), "every id is drawn");
    assert_eq!(HostTensor::random_indices(ty, 7, 3), ids);
}

#[test]
fn a_reshape_keeps_the_row_major_elements() {
    let flat = HostTensor::from_f32(tt(&[0, 0], &[6, 2]), DType::BF16, (0..12).map(|x| x as f32).collect()).unwrap();
    let shaped = flat.clone().reshaped(tt(&[0, 0, 0], &[2, 3, 2])).unwrap();
    assert_eq!(shaped.ty().shape(), [2, 3, 2]);
    assert_eq!(shaped.to_f32(), flat.to_f32());
    // A view is compacted first; an unshared compact tensor moves.
    let rows = flat.view(&tt(&[2, 0], &[5, 2])).unwrap();
    assert_eq!(rows.reshaped(tt(&[0], &[6])).unwrap().to_f32(), [4.0, 5.0, 6.0, 7.0, 8.0, 9.0]);
    let ids = HostTensor::from_i32(tt(&[0], &[4]), vec![1, 2, 3, 4]).unwrap();
    assert_eq!(ids.reshaped(tt(&[0, 0], &[2, 2])).unwrap().to_i32(), [1, 2, 3, 4]);
    assert!(flat.reshaped(tt(&[0], &[5])).is_err());
}

/// The softmax aggregation merges rows along the last index (values, then the statistics
/// column), in every dtype, on views as on compact blocks, and a rank-0 block is refused.
#[test]
fn softmax_aggregation_merges_rows() {
    let ty = TensorType::new(&[0, 4], &[2, 7]).unwrap();
    let ninf = f32::NEG_INFINITY;
    // Row 0: lse 0 and ln 3 → weights 1/4 and 3/4. Row 1: the second part saw no key.
    let a = vec![1.0, 2.0, 0.0, 5.0, 6.0, 0.5];
    let b = vec![3.0, 6.0, 3f32.ln(), 0.0, 0.0, ninf];
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        let (x, y) = (
            HostTensor::from_f32(ty.clone(), dtype, a.clone()).unwrap(),
            HostTensor::from_f32(ty.clone(), dtype, b.clone()).unwrap(),
        );
        for (l, r) in [(&x, &y), (&y, &x)] {
            let out = l.aggregate(r, Aggregation::Softmax).unwrap().to_f32();
            let tol = if dtype == DType::F32 { 1e-6 } else { 2e-2 };
            for (g, w) in out.iter().zip([2.5, 5.0, 4f32.ln(), 5.0, 6.0, 0.5]) {
                assert!((g - w).abs() <= tol * (1.0 + w.abs()), "{dtype}: {out:?}");
            }
        }
    }
    // Views are read in place: the rows of a wider block.
    let wide = HostTensor::from_f32(
        TensorType::new(&[0, 3], &[2, 7]).unwrap(),
        DType::F32,
        vec![9.0, 1.0, 2.0, 0.0, 9.0, 5.0, 6.0, 0.5],
    )
    .unwrap();
    let view = wide.view(&ty).unwrap();
    let compact = HostTensor::from_f32(ty.clone(), DType::F32, a.clone()).unwrap();
    let other = HostTensor::from_f32(ty.clone(), DType::F32, b.clone()).unwrap();
    assert_eq!(
        HostTensor::aggregate_in(&view, std::slice::from_ref(&other), Aggregation::Softmax, None).unwrap(),
        compact.aggregate(&other, Aggregation::Softmax).unwrap()
    );
    let scalar = HostTensor::from_f32(TensorType::zero_bounded(&[]), DType::F32, vec![1.0]).unwrap();
    assert!(scalar.aggregate(&scalar, Aggregation::Softmax).is_err());
}

//! A vectorized `exp` for the kernels' softmax loops (softmax, attention, SiLU), and the
//! NaN-propagating maximum ([`maximum`], [`max`]) every kernel takes where NumPy's
//! `maximum` and `max` would.
//!
//! # Design
//! `f32::exp` calls libm once per element, which no compiler vectorizes. [`exp`] is a
//! branch-free polynomial the compiler turns into SIMD code: `x = n·ln 2 + r` with `n` the
//! nearest integer to `x / ln 2` (found with the 1.5·2²³ rounding trick) and `|r| ≤ ln 2 / 2`,
//! `eʳ` by Cephes' degree-7 minimax polynomial, and `2ⁿ` built from exponent bits in two
//! halves so that results in the subnormal range round once. Its error is at most 2 ulps
//! over the whole range (tested), NaN gives NaN, `+∞` gives `+∞`, below −104 it is 0.
//!
//! The slice functions are compiled three times, for AVX-512, AVX2 with FMA, and the
//! baseline target, and pick one at run time: the body is the same Rust, with no fused
//! multiply-add (Rust never contracts `a * b + c`) and the same 16 lane sums, so every
//! path gives the same bits and a kernel's result does not depend on the machine.

/// `eˣ` to within 2 ulps (see the module doc).
#[inline(always)]
pub(crate) fn exp(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    // ln 2 split so that n·LN2_HI is exact for |n| ≤ 2⁹ (Cephes).
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    // Adding 1.5·2²³ rounds to the nearest integer and leaves it in the low mantissa bits.
    const ROUND: f32 = 12_582_912.0;
    let xc = x.clamp(-104.0, 89.0);
    let t = xc * LOG2E + ROUND;
    let n = t - ROUND;
    let ni = t.to_bits() as i32 - ROUND.to_bits() as i32;
    let r = xc - n * LN2_HI - n * LN2_LO;
    let mut p = 1.987_569_1e-4f32;
    p = p * r + 1.398_199_9e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 1.666_666_5e-1;
    p = p * r + 0.5;
    let y = p * (r * r) + r + 1.0;
    // 2ⁿ as two powers of two in the normal range (n ∈ [−150, 128]).
    let pow2 = |k: i32| f32::from_bits(((k + 127) as u32) << 23);
    let (n1, n2) = (ni >> 1, ni - (ni >> 1));
    let e = y * pow2(n1) * pow2(n2);
    if x < -104.0 { 0.0 } else { e }
}

/// Lanes of the partial sums: as many as an AVX-512 register holds, the same on every path.
pub(crate) const LANES: usize = 16;

/// `xs[i] ← e^(xs[i] − shift)` for every element; returns their sum (added in 16 lanes,
/// then the lanes in order).
pub(crate) fn exp_shifted_sum(xs: &mut [f32], shift: f32) -> f32 {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU has AVX-512F (checked just above).
            return unsafe { exp_shifted_sum_avx512(xs, shift) };
        }
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
            // SAFETY: the CPU has AVX2 and FMA (checked just above).
            return unsafe { exp_shifted_sum_avx2(xs, shift) };
        }
    }
    exp_shifted_sum_body(xs, shift)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn exp_shifted_sum_avx512(xs: &mut [f32], shift: f32) -> f32 {
    exp_shifted_sum_body(xs, shift)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn exp_shifted_sum_avx2(xs: &mut [f32], shift: f32) -> f32 {
    exp_shifted_sum_body(xs, shift)
}

#[inline(always)]
fn exp_shifted_sum_body(xs: &mut [f32], shift: f32) -> f32 {
    let mut acc = [0.0f32; LANES];
    let mut chunks = xs.chunks_exact_mut(LANES);
    for c in &mut chunks {
        for (a, x) in acc.iter_mut().zip(c.iter_mut()) {
            *x = exp(*x - shift);
            *a += *x;
        }
    }
    for (a, x) in acc.iter_mut().zip(chunks.into_remainder()) {
        *x = exp(*x - shift);
        *a += *x;
    }
    acc.iter().sum()
}

/// NumPy's `maximum(a, b)`: `a` where `a >= b` or `a` is NaN, else `b`. A NaN on either
/// side is the result (`f32::max` returns the other operand instead), and of two equal
/// values, `-0` and `+0`, the first. Compiles to a compare and a blend, which the compiler
/// vectorizes.
#[inline(always)]
pub(crate) fn maximum(a: f32, b: f32) -> f32 {
    if a >= b || a.is_nan() { a } else { b }
}

/// NumPy's `max` of `xs`: NaN where any element is NaN, else the largest element (−∞ for an
/// empty slice). Kept in 16 lanes, which the compiler holds in vector registers: each lane
/// takes an element that is larger or NaN, so a NaN, once in, stays (a maximum that drops
/// NaN, `f32::max`, would hide it), then the lanes are combined by [`maximum`].
pub(crate) fn max(xs: &[f32]) -> f32 {
    #[inline(always)]
    fn step(m: &mut f32, x: f32) {
        if x > *m || x.is_nan() {
            *m = x;
        }
    }
    let mut lanes = [f32::NEG_INFINITY; LANES];
    let mut chunks = xs.chunks_exact(LANES);
    for c in &mut chunks {
        lanes.iter_mut().zip(c).for_each(|(m, &x)| step(m, x));
    }
    lanes.iter_mut().zip(chunks.remainder()).for_each(|(m, &x)| step(m, x));
    lanes.into_iter().fold(f32::NEG_INFINITY, maximum)
}

/// `xs[i] ← xs[i] / (1 + e^(−xs[i]))` (SiLU) for every element.
pub(crate) fn silu_in_place(xs: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU has AVX-512F (checked just above).
            return unsafe { silu_avx512(xs) };
        }
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
            // SAFETY: the CPU has AVX2 and FMA (checked just above).
            return unsafe { silu_avx2(xs) };
        }
    }
    silu_body(xs)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn silu_avx512(xs: &mut [f32]) {
    silu_body(xs)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn silu_avx2(xs: &mut [f32]) {
    silu_body(xs)
}

#[inline(always)]
fn silu_body(xs: &mut [f32]) {
    xs.iter_mut().for_each(|x| *x /= 1.0 + exp(-*x));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Distance in units in the last place between two finite f32 of one sign (or zero).
    fn ulps(a: f32, b: f32) -> u32 {
        (a.to_bits() as i64 - b.to_bits() as i64).unsigned_abs() as u32
    }

    #[test]
    fn exp_is_within_two_ulps_of_the_rounded_exact_value_over_its_whole_range() {
        let mut worst = (0u32, 0.0f32);
        let mut x = -110.0f32;
        while x < 95.0 {
            let want = (x as f64).exp() as f32;
            let got = exp(x);
            let d = ulps(got, want);
            if d > worst.0 {
                worst = (d, x);
            }
            x += 1.3e-3;
        }
        // Dense around 0, where r is tiny and 1 + r dominates.
        for i in -20_000..20_000 {
            let x = i as f32 * 1e-6;
            let d = ulps(exp(x), (x as f64).exp() as f32);
            if d > worst.0 {
                worst = (d, x);
            }
        }
        assert!(worst.0 <= 2, "{} ulps at x = {}", worst.0, worst.1);
    }

    #[test]
    fn exp_handles_extremes_and_nan() {
        assert_eq!(exp(0.0), 1.0);
        assert_eq!(exp(-0.0), 1.0);
        assert_eq!(exp(f32::INFINITY), f32::INFINITY);
        assert_eq!(exp(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp(f32::MIN), 0.0);
        assert_eq!(exp(-104.5), 0.0);
        assert_eq!(exp(88.8), f32::INFINITY, "past ln(f32::MAX) = 88.72284");
        assert_eq!(exp(f32::MAX), f32::INFINITY);
        assert!(exp(88.72).is_finite());
        assert!(exp(f32::NAN).is_nan());
        // Subnormal results: e^-100 ≈ 3.7e-44 is 26 steps of the smallest subnormal.
        let sub = exp(-100.0);
        assert!(sub > 0.0 && !sub.is_normal());
        assert!(ulps(sub, (-100.0f64).exp() as f32) <= 1);
    }

    #[test]
    fn maxima_propagate_nan_from_any_position() {
        assert!(maximum(f32::NAN, 1.0).is_nan() && maximum(1.0, f32::NAN).is_nan());
        assert_eq!(maximum(-1.0, f32::NEG_INFINITY), -1.0);
        assert!(maximum(-0.0, 0.0).is_sign_negative() && maximum(0.0, -0.0).is_sign_positive());
        assert_eq!(max(&[]), f32::NEG_INFINITY);
        let xs: Vec<f32> = (0..53).map(|i| ((i * 37) % 53) as f32 - 20.0).collect();
        assert_eq!(max(&xs), 32.0);
        // A NaN in any lane, in the remainder, first or last.
        for at in 0..xs.len() {
            let mut ys = xs.clone();
            ys[at] = f32::NAN;
            assert!(max(&ys).is_nan(), "NaN at {at}");
            ys[at] = f32::INFINITY;
            assert_eq!(max(&ys), f32::INFINITY, "inf at {at}");
        }
        assert_eq!(max(&[f32::NEG_INFINITY; 20]), f32::NEG_INFINITY);
    }

    #[test]
    fn slice_paths_agree_with_the_scalar_function_bit_for_bit() {
        let xs: Vec<f32> = (0..1000).map(|i| (i as f32 * 0.37).sin() * 30.0).collect();
        let mut a = xs.clone();
        let sum = exp_shifted_sum(&mut a, 2.5);
        let mut b = xs.clone();
        let portable = exp_shifted_sum_body(&mut b, 2.5);
        assert_eq!(a, b, "the dispatched path equals the baseline build");
        assert_eq!(sum.to_bits(), portable.to_bits());
        for (x, y) in xs.iter().zip(&a) {
            assert_eq!(*y, exp(x - 2.5));
        }
        let exact: f64 = xs.iter().map(|&x| (x as f64 - 2.5).exp()).sum();
        assert!(((sum as f64 - exact) / exact).abs() < 1e-6);
        let mut s = xs.clone();
        silu_in_place(&mut s);
        for (x, y) in xs.iter().zip(&s) {
            let want = *x as f64 / (1.0 + (-*x as f64).exp());
            assert!((*y as f64 - want).abs() <= 4.0 * f32::EPSILON as f64 * want.abs().max(1e-30), "silu({x})");
        }
    }
}

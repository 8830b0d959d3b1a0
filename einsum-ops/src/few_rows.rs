//! Matrix products with few rows of `A`: a decode step's one token per sequence times a
//! weight matrix, `C[m, n] = Σ_k A[m, k] · B[k, n]` with `m ≤` [`MAX_ROWS`].
//!
//! A general GEMM (`sgemm`) packs panels of `B` before multiplying them; with one row of `A`
//! each packed element is used once, so the packing doubles the traffic of a product whose
//! cost is reading `B`, and a `B` stored transposed (a Hugging Face weight `[d_out, d_in]`
//! read as `x · wᵀ`) is packed by strided gathers. Here `B` is streamed once, in its own
//! layout, over the threads the backend lends the kernel:
//!
//! - `B` with `k` contiguous (`w[n, k]`): every `C[i, j]` is the dot product of row `i` of
//!   `A` and row `j` of `B`; each thread takes a range of `j`.
//! - `B` with `n` contiguous (`w[k, n]`): each thread takes a range of columns and adds
//!   `A[i, kk] · B[kk, range]` into `C[i, range]` for every `kk`, in order.
//!
//! Every element of `C` is computed by one thread with the same operations whatever the
//! split, so results do not depend on the thread count. Other layouts of `B` are left to
//! `sgemm`.

use crate::parallel;
use crate::vexp::LANES;

/// The most rows of `A` a product may have to take this path: up to eight, a row of `B`
/// read from memory once is reused from L1 for every row of `A`, and the products stay
/// bound by reading `B`.
pub(crate) const MAX_ROWS: usize = 8;

/// Columns of `C` per thread at the least: fewer are not worth a thread.
const MIN_COLUMNS: usize = 64;

/// `C = A · B` for `m ≤ MAX_ROWS` rows, `A` with strides `(rsa, csa)`, `B` with strides
/// `(rsb, csb)`, `C` row-major `m × n`. Returns false (and leaves `C` alone) when `B` has
/// neither `k` nor `n` contiguous, or `m` is over [`MAX_ROWS`].
pub(crate) fn gemm(
    (m, k, n): (usize, usize, usize),
    (a, rsa, csa): (&[f32], usize, usize),
    (b, rsb, csb): (&[f32], usize, usize),
    c: &mut [f32],
) -> bool {
    let dot_form = rsb == 1 && (csb == k || n == 1);
    let axpy_form = csb == 1 && (rsb == n || k == 1);
    if m == 0 || m > MAX_ROWS || !(dot_form || axpy_form) || c.len() != m * n {
        return false;
    }
    // The rows of A, contiguous (m · k elements: small beside B).
    let rows: Vec<f32> = (0..m).flat_map(|i| (0..k).map(move |kk| a[i * rsa + kk * csa])).collect();
    let threads = parallel::parts(n, MIN_COLUMNS);
    let c_ptr = c.as_mut_ptr() as usize;
    parallel::for_ranges(n, threads, |cols| {
        let mut out = vec![0.0f32; m * cols.len()];
        if dot_form {
            for (jj, j) in cols.clone().enumerate() {
                let row = &b[j * k..(j + 1) * k];
                for i in 0..m {
                    out[i * cols.len() + jj] = dot(&rows[i * k..(i + 1) * k], row);
                }
            }
        } else {
            for kk in 0..k {
                let row = &b[kk * n + cols.start..kk * n + cols.end];
                for i in 0..m {
                    axpy(&mut out[i * cols.len()..(i + 1) * cols.len()], rows[i * k + kk], row);
                }
            }
        }
        for i in 0..m {
            // SAFETY: C holds m · n elements (checked above) and this part writes columns
            // `cols` of each row, which no other part writes.
            let dst =
                unsafe { std::slice::from_raw_parts_mut((c_ptr as *mut f32).add(i * n + cols.start), cols.len()) };
            dst.copy_from_slice(&out[i * cols.len()..(i + 1) * cols.len()]);
        }
    });
    true
}

/// `Σ x[i] · y[i]`, added in [`LANES`] lanes, then the lanes in order.
fn dot(x: &[f32], y: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU has AVX-512F (checked just above).
            return unsafe { dot_avx512(x, y) };
        }
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
            // SAFETY: the CPU has AVX2 and FMA (checked just above).
            return unsafe { dot_avx2(x, y) };
        }
    }
    dot_body(x, y)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn dot_avx512(x: &[f32], y: &[f32]) -> f32 {
    dot_body(x, y)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn dot_avx2(x: &[f32], y: &[f32]) -> f32 {
    dot_body(x, y)
}

#[inline(always)]
fn dot_body(x: &[f32], y: &[f32]) -> f32 {
    let mut acc = [0.0f32; LANES];
    let (xc, yc) = (x.chunks_exact(LANES), y.chunks_exact(LANES));
    let (xr, yr) = (xc.remainder(), yc.remainder());
    for (xs, ys) in xc.zip(yc) {
        for ((a, &p), &q) in acc.iter_mut().zip(xs).zip(ys) {
            *a += p * q;
        }
    }
    for ((a, &p), &q) in acc.iter_mut().zip(xr).zip(yr) {
        *a += p * q;
    }
    acc.iter().sum()
}

/// `y[i] += alpha · x[i]`.
fn axpy(y: &mut [f32], alpha: f32, x: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU has AVX-512F (checked just above).
            return unsafe { axpy_avx512(y, alpha, x) };
        }
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
            // SAFETY: the CPU has AVX2 and FMA (checked just above).
            return unsafe { axpy_avx2(y, alpha, x) };
        }
    }
    axpy_body(y, alpha, x)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn axpy_avx512(y: &mut [f32], alpha: f32, x: &[f32]) {
    axpy_body(y, alpha, x)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn axpy_avx2(y: &mut [f32], alpha: f32, x: &[f32]) {
    axpy_body(y, alpha, x)
}

#[inline(always)]
fn axpy_body(y: &mut [f32], alpha: f32, x: &[f32]) {
    y.iter_mut().zip(x).for_each(|(y, &x)| *y += alpha * x);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `C = A · B` in f64, for strides as `gemm` takes them.
    fn reference(
        (m, k, n): (usize, usize, usize),
        (a, rsa, csa): (&[f32], usize, usize),
        (b, rsb, csb): (&[f32], usize, usize),
    ) -> Vec<f32> {
        let mut c = vec![0.0f32; m * n];
        for i in 0..m {
            for j in 0..n {
                c[i * n + j] =
                    (0..k).map(|kk| a[i * rsa + kk * csa] as f64 * b[kk * rsb + j * csb] as f64).sum::<f64>() as f32;
            }
        }
        c
    }

    fn random(len: usize, seed: u64) -> Vec<f32> {
        let mut s = seed;
        (0..len)
            .map(|_| {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect()
    }

    #[test]
    fn both_layouts_of_b_and_both_of_a_match_the_f64_product() {
        for (m, k, n) in [(1, 1, 1), (1, 37, 5), (3, 100, 130), (8, 17, 257), (2, 64, 1), (5, 1, 40)] {
            let a = random(m * k, 1);
            let b = random(k * n, 2);
            for (rsa, csa) in [(k, 1), (1, m)] {
                for (rsb, csb) in [(n, 1), (1, k)] {
                    let mut c = vec![f32::NAN; m * n];
                    assert!(gemm((m, k, n), (&a, rsa, csa), (&b, rsb, csb), &mut c), "{m}×{k}×{n}");
                    let want = reference((m, k, n), (&a, rsa, csa), (&b, rsb, csb));
                    for (got, want) in c.iter().zip(&want) {
                        assert!((got - want).abs() <= 1e-5 * (1.0 + want.abs()), "{m}×{k}×{n}: {got} vs {want}");
                    }
                }
            }
        }
    }

    #[test]
    fn other_shapes_and_layouts_are_left_to_sgemm() {
        let (a, b) = (random(9 * 4, 3), random(4 * 6, 4));
        let mut c = vec![7.0f32; 9 * 6];
        assert!(!gemm((9, 4, 6), (&a, 4, 1), (&b, 6, 1), &mut c), "nine rows");
        let mut c = vec![7.0f32; 2 * 3];
        // B with neither k nor n contiguous (a strided view).
        assert!(!gemm((2, 4, 3), (&a, 4, 1), (&b, 6, 2), &mut c));
        assert!(c.iter().all(|&x| x == 7.0), "C untouched");
    }

    #[test]
    fn nan_and_infinity_reach_their_outputs() {
        let a = [1.0, f32::NAN, 2.0];
        let b = [1.0f32; 3 * 2];
        let mut c = [0.0f32; 2];
        assert!(gemm((1, 3, 2), (&a, 3, 1), (&b, 2, 1), &mut c));
        assert!(c.iter().all(|x| x.is_nan()));
        let a = [f32::INFINITY, 1.0];
        let b = [1.0, 1.0, 0.0, 1.0];
        let mut c = [0.0f32; 2];
        assert!(gemm((1, 2, 2), (&a, 2, 1), (&b, 1, 2), &mut c));
        assert_eq!(c[0], f32::INFINITY);
        assert!(c[1].is_nan(), "∞ · 0");
    }
}

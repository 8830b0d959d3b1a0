//! GEMM on f16/bf16 operands with f32 accumulation, converting the operands panel by panel
//! as the product reaches them instead of converting whole operands first.
//!
//! # Design
//! `matrixmultiply` multiplies f32 only, and before this path the einsum kernel converted
//! each half-precision operand whole into a new f32 array (`HostTensor::to_f32`): for a
//! `4096 × 1024` activation that is 16 MiB written and read back before the first flop. Here
//! the product walks the contraction in blocks of [`KC`] and the columns in blocks of [`NC`]:
//! each step converts one `KC × NC` panel of B and one `MC × KC` panel of A (each element of
//! either operand converted once when the columns fit one block) into small f32 buffers
//! that stay in cache, and multiplies them into C with `sgemm`, accumulating in f32 (the
//! first block writes C, later ones add to it). The buffers are allocated once per call;
//! the operands are read in place in their storage dtype ([`einsum_core::Elements`]), with
//! any row and column strides, so a transposed operand needs no copy either.

use einsum_core::Elements;
use half::slice::HalfFloatSliceExt;

/// Contraction block: rows of a B panel, columns of an A panel.
pub(crate) const KC: usize = 256;
/// Column block of B and C.
pub(crate) const NC: usize = 2048;
/// Row block of A and C.
pub(crate) const MC: usize = 256;

/// A matrix read in place: element `(i, j)` is `data[offset + i·rs + j·cs]`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Strided<'a> {
    pub data: Elements<'a>,
    pub offset: usize,
    pub rs: usize,
    pub cs: usize,
}

impl Strided<'_> {
    /// Writes rows `rows` and columns `cols` as f32, row-major, into `dst`
    /// (`rows.len() × cols.len()` elements).
    fn convert(&self, rows: std::ops::Range<usize>, cols: std::ops::Range<usize>, dst: &mut [f32]) {
        let width = cols.len();
        for (r, i) in rows.enumerate() {
            let out = &mut dst[r * width..][..width];
            let start = self.offset + i * self.rs + cols.start * self.cs;
            match (self.data, self.cs) {
                (Elements::F32(v), 1) => out.copy_from_slice(&v[start..start + width]),
                // Whole rows through `half`'s slice conversion (F16C where present).
                (Elements::F16(v), 1) => v[start..start + width].convert_to_f32_slice(out),
                (Elements::BF16(v), 1) => v[start..start + width].convert_to_f32_slice(out),
                (Elements::F32(v), cs) => out.iter_mut().enumerate().for_each(|(j, o)| *o = v[start + j * cs]),
                (Elements::F16(v), cs) => out.iter_mut().enumerate().for_each(|(j, o)| *o = v[start + j * cs].to_f32()),
                (Elements::BF16(v), cs) => {
                    out.iter_mut().enumerate().for_each(|(j, o)| *o = v[start + j * cs].to_f32())
                }
                (Elements::I32(v), cs) => out.iter_mut().enumerate().for_each(|(j, o)| *o = v[start + j * cs] as f32),
            }
        }
    }

    /// The largest element index the `m × n` matrix addresses, plus one (0 when empty).
    fn extent(&self, m: usize, n: usize) -> usize {
        if m == 0 || n == 0 { 0 } else { self.offset + (m - 1) * self.rs + (n - 1) * self.cs + 1 }
    }

    fn len(&self) -> usize {
        self.data.len()
    }
}

/// `C = A · B` for an `m × k` A and a `k × n` B read in place in any storage dtype, into
/// the row-major `m × n` f32 `c` (row stride `n`), accumulating in f32 over blocks of the
/// contraction. Fails, saying which, when an operand's strides address elements it lacks.
pub(crate) fn gemm(m: usize, k: usize, n: usize, a: Strided<'_>, b: Strided<'_>, c: &mut [f32]) -> Result<(), String> {
    if a.extent(m, k) > a.len() || b.extent(k, n) > b.len() || c.len() < m * n {
        return Err(format!(
            "operands of {} and {} elements do not hold a ({m}×{k})·({k}×{n}) product",
            a.len(),
            b.len()
        ));
    }
    if k == 0 {
        c[..m * n].fill(0.0);
        return Ok(());
    }
    let mut a_panel = vec![0.0f32; MC.min(m) * KC.min(k)];
    let mut b_panel = vec![0.0f32; KC.min(k) * NC.min(n)];
    for k0 in (0..k).step_by(KC) {
        let kc = KC.min(k - k0);
        // The first block writes C, later ones add to it.
        let beta = if k0 == 0 { 0.0 } else { 1.0 };
        for j0 in (0..n).step_by(NC) {
            let nc = NC.min(n - j0);
            b.convert(k0..k0 + kc, j0..j0 + nc, &mut b_panel);
            for i0 in (0..m).step_by(MC) {
                let mc = MC.min(m - i0);
                a.convert(i0..i0 + mc, k0..k0 + kc, &mut a_panel);
                // SAFETY: the A panel holds mc×kc and the B panel kc×nc row-major elements
                // (both sized for the largest block), and C's block starts at row i0, column
                // j0 of an m×n row-major array of at least m·n elements (checked above), so
                // every address sgemm forms lies in its slice; C does not alias the panels.
                unsafe {
                    matrixmultiply::sgemm(
                        mc,
                        kc,
                        nc,
                        1.0,
                        a_panel.as_ptr(),
                        kc as isize,
                        1,
                        b_panel.as_ptr(),
                        nc as isize,
                        1,
                        beta,
                        c.as_mut_ptr().add(i0 * n + j0),
                        n as isize,
                        1,
                    );
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use half::{bf16, f16};

    use super::*;
    use einsum_core::SeededRng;

    /// The f64 product and, per element, `Σ_p |a_ip|·|b_pj|` (the scale of its rounding error).
    fn reference(m: usize, k: usize, n: usize, a: &[f64], b: &[f64]) -> (Vec<f64>, Vec<f64>) {
        let (mut c, mut abs) = (vec![0.0; m * n], vec![0.0; m * n]);
        for i in 0..m {
            for p in 0..k {
                for j in 0..n {
                    c[i * n + j] += a[i * k + p] * b[p * n + j];
                    abs[i * n + j] += (a[i * k + p] * b[p * n + j]).abs();
                }
            }
        }
        (c, abs)
    }

    /// Random half-precision products, sizes crossing every block edge (B transposed in
    /// place for half of them), against an f64 product of the same rounded inputs: the
    /// error of an f32 accumulation over `k` terms, far below the inputs' own precision.
    #[test]
    fn half_products_match_an_f64_reference_within_f32_accumulation_error() {
        let mut rng = SeededRng::new(11);
        for (m, k, n) in [(3, 5, 7), (MC + 9, KC * 2 + 3, 40), (17, KC + 1, NC + 5)] {
            let a: Vec<f32> = (0..m * k).map(|_| rng.uniform(-1.0, 1.0)).collect();
            let b: Vec<f32> = (0..k * n).map(|_| rng.uniform(-1.0, 1.0)).collect();
            let (ah, bh): (Vec<f16>, Vec<f16>) =
                (a.iter().map(|&x| f16::from_f32(x)).collect(), b.iter().map(|&x| f16::from_f32(x)).collect());
            let (ab, bb): (Vec<bf16>, Vec<bf16>) =
                (a.iter().map(|&x| bf16::from_f32(x)).collect(), b.iter().map(|&x| bf16::from_f32(x)).collect());
            // B stored transposed (n × k) for the strided case.
            let bt: Vec<bf16> = (0..n * k).map(|i| bb[(i % k) * n + i / k]).collect();
            // (A, B, B stored transposed, A and B in f64)
            type Case<'a> = (Elements<'a>, Elements<'a>, bool, Vec<f64>, Vec<f64>);
            let cases: [Case<'_>; 3] = [
                (
                    Elements::F16(&ah),
                    Elements::F16(&bh),
                    false,
                    ah.iter().map(|x| x.to_f64()).collect(),
                    bh.iter().map(|x| x.to_f64()).collect(),
                ),
                (
                    Elements::BF16(&ab),
                    Elements::BF16(&bb),
                    false,
                    ab.iter().map(|x| x.to_f64()).collect(),
                    bb.iter().map(|x| x.to_f64()).collect(),
                ),
                (
                    Elements::BF16(&ab),
                    Elements::BF16(&bt),
                    true,
                    ab.iter().map(|x| x.to_f64()).collect(),
                    bb.iter().map(|x| x.to_f64()).collect(),
                ),
            ];
            for (ea, eb, transposed, a64, b64) in cases {
                let sa = Strided { data: ea, offset: 0, rs: k, cs: 1 };
                let sb = if transposed {
                    Strided { data: eb, offset: 0, rs: 1, cs: k }
                } else {
                    Strided { data: eb, offset: 0, rs: n, cs: 1 }
                };
                let mut c = vec![f32::NAN; m * n];
                gemm(m, k, n, sa, sb, &mut c).unwrap();
                let (want, scale) = reference(m, k, n, &a64, &b64);
                // The products of half-precision inputs are exact in f32; each of the k
                // f32 additions errs by at most 2⁻²⁴ of a partial sum, bounded by the sum of
                // absolute terms: the textbook bound k·u·Σ|a||b|.
                for ((g, w), s) in c.iter().zip(&want).zip(&scale) {
                    let bound = k as f64 * f64::from(f32::EPSILON) / 2.0 * s;
                    assert!((f64::from(*g) - w).abs() <= bound, "{m}×{k}×{n}: {g} vs {w}");
                }
            }
        }
    }

    #[test]
    fn operands_too_small_for_their_strides_are_errors() {
        let a = vec![f16::ONE; 6];
        let s = Strided { data: Elements::F16(&a), offset: 0, rs: 3, cs: 1 };
        let mut c = vec![0.0; 9];
        assert!(gemm(3, 3, 3, s, s, &mut c).unwrap_err().contains("do not hold"));
    }
}

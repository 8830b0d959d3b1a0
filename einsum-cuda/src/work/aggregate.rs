//! The k-way ⊕ of an aggregation task's blocks (`aggregate`, `aggregate_vec` of
//! `aggregate.cu`), and the row-wise merge of softmax partials (`aggregate_softmax`).

use cudarc::driver::{DeviceRepr, PushKernelArg};
use einsum_core::{Aggregation, DType};

use super::DeviceWork;
use super::grid::{elementwise, launch_err, linear};
use crate::addressing::aligned;
use crate::emulate::{EmulatedMemory, check_vector};
use crate::executor::IssueCtx;
use crate::kernels::codes::OpCode;
use crate::lower::{MAX_AGG_SOURCES, Ptr};

/// `out = s₀ ⊕ s₁ ⊕ … ⊕ sₖ₋₁` (folded left to right in f32, rounded to the element type
/// once), or `out = out ⊕ s₀ ⊕ … ⊕ sₖ₋₁` when `accumulate`: one pass over `k ≤`
/// [`MAX_AGG_SOURCES`] sources.
#[derive(Clone, Debug, PartialEq)]
pub struct Aggregate {
    /// The sources, in order (at least one, at most [`MAX_AGG_SOURCES`]).
    pub srcs: Vec<Ptr>,
    /// Whether `out` already holds a partial result to fold the sources into.
    pub accumulate: bool,
    /// Result (no source).
    pub out: Ptr,
    /// Element type.
    pub dtype: DType,
    /// The ⊕.
    pub agg: Aggregation,
    /// Elements.
    pub n: usize,
    /// 16 bytes per thread (every pointer aligned, see [`crate::addressing`]).
    pub vector: bool,
}

/// The `Sources` argument of the `aggregate` kernels (`aggregate.cu`): the source addresses by
/// value, unused entries null.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AggSources {
    /// The addresses.
    pub p: [u64; MAX_AGG_SOURCES],
}

// SAFETY: `AggSources` is `repr(C)`, plain old data, and matches `struct Sources` in
// aggregate.cu (an array of MAX_AGG_SOURCES device pointers).
unsafe impl DeviceRepr for AggSources {}

impl AggSources {
    /// The struct of up to [`MAX_AGG_SOURCES`] addresses.
    pub fn new(addrs: impl ExactSizeIterator<Item = u64>) -> Result<AggSources, String> {
        if addrs.len() == 0 || addrs.len() > MAX_AGG_SOURCES {
            return Err(format!("an aggregate launch of {} sources (1 to {MAX_AGG_SOURCES})", addrs.len()));
        }
        let mut p = [0u64; MAX_AGG_SOURCES];
        for (slot, a) in p.iter_mut().zip(addrs) {
            *slot = a;
        }
        Ok(AggSources { p })
    }
}

impl DeviceWork for Aggregate {
    fn issue(&self, ctx: &IssueCtx<'_>) -> Result<(), String> {
        if self.n == 0 {
            return Ok(());
        }
        let sources = AggSources::new(self.srcs.iter().map(|p| ctx.addr(*p)))?;
        let (k, acc) = (self.srcs.len() as i32, i32::from(self.accumulate));
        let (outp, dt, code, nn) = (ctx.addr(self.out), self.dtype.code(), self.agg.code(), self.n as i64);
        let f = ctx.library_kernel(self)?;
        let mut b = ctx.stream().launch_builder(f);
        b.arg(&sources).arg(&k).arg(&acc).arg(&outp).arg(&dt).arg(&code).arg(&nn);
        // SAFETY: matches `aggregate`'s and `aggregate_vec`'s signature (`Sources` by
        // value, as `AggSources`); k sources and `out` of n elements each, 16-byte
        // aligned on the vector path.
        unsafe { b.launch(elementwise(self.n, self.dtype, self.vector)) }.map_err(launch_err)?;
        Ok(())
    }

    /// The ⊕ of the sources, in aggregate.cu's order.
    fn emulate(&self, m: &mut EmulatedMemory) {
        let Aggregate { srcs, accumulate, out, dtype, agg, n, vector } = self;
        assert!(!srcs.is_empty() && srcs.len() <= MAX_AGG_SOURCES, "{} aggregation sources", srcs.len());
        if *vector {
            check_vector(m, srcs);
            check_vector(m, &[*out]);
        }
        // The order of aggregate.cu: a left fold from the first source (or from `out`),
        // in f32, rounded to the element type once.
        let (start, rest) = if *accumulate { (*out, &srcs[..]) } else { (srcs[0], &srcs[1..]) };
        for i in 0..*n {
            let mut acc = m.ld(start, i, *dtype);
            for s in rest {
                acc = agg.apply(acc, m.ld(*s, i, *dtype));
            }
            m.st(*out, i, *dtype, acc);
        }
    }

    fn kernel_name(&self) -> Option<&'static str> {
        Some(["aggregate", "aggregate_vec"][usize::from(self.vector)])
    }

    fn specialize(&mut self) {
        self.vector = aligned(&self.out) && self.srcs.iter().all(aligned);
    }
}

/// The row-wise merge of softmax partials ([`Aggregation::Softmax`]) of `k ≤`
/// [`MAX_AGG_SOURCES`] sources into `out` (or of `out` and the sources, when `accumulate`):
/// `rows` rows of `width` elements, the values then the log-sum-exp column
/// (`aggregate_softmax` of `aggregate.cu`: one thread per row).
#[derive(Clone, Debug, PartialEq)]
pub struct SoftmaxAggregate {
    /// The sources, in order (at least one, at most [`MAX_AGG_SOURCES`]).
    pub srcs: Vec<Ptr>,
    /// Whether `out` already holds a partial result to merge the sources into (the first
    /// row merged).
    pub accumulate: bool,
    /// Result (no source).
    pub out: Ptr,
    /// Element type.
    pub dtype: DType,
    /// Rows.
    pub rows: usize,
    /// Elements per row, the statistics column included (at least 1).
    pub width: usize,
}

/// The coefficient of each row merged and the merged log-sum-exp, from the rows' `lse`s in
/// merge order, as `aggregate_softmax` computes them: pairwise as
/// [`einsum_core::merge_softmax_rows`], each earlier coefficient scaled by the accumulated
/// row's weight, a coefficient whose weight is exactly 0 set to 0 (the row dropped).
pub fn softmax_coefficients(lses: &[f32]) -> (Vec<f32>, f32) {
    let nan_max = |a: f32, b: f32| if a.is_nan() || b.is_nan() { f32::NAN } else { a.max(b) };
    let mut c = vec![0.0f32; lses.len()];
    let Some((&first, rest)) = lses.split_first() else { return (c, f32::NEG_INFINITY) };
    let mut lse = first;
    c[0] = 1.0;
    for (j, &lb) in rest.iter().enumerate() {
        let mx = nan_max(lse, lb);
        if mx == f32::NEG_INFINITY {
            c[j + 1] = 1.0;
            continue;
        }
        let l = mx + ((lse - mx).exp() + (lb - mx).exp()).ln();
        let (wa, wb) = ((lse - l).exp(), (lb - l).exp());
        for ci in &mut c[..=j] {
            *ci = if wa == 0.0 || *ci == 0.0 { 0.0 } else { *ci * wa };
        }
        c[j + 1] = wb;
        lse = l;
    }
    (c, lse)
}

impl DeviceWork for SoftmaxAggregate {
    fn issue(&self, ctx: &IssueCtx<'_>) -> Result<(), String> {
        if self.rows == 0 || self.width == 0 {
            return Ok(());
        }
        let sources = AggSources::new(self.srcs.iter().map(|p| ctx.addr(*p)))?;
        let (k, acc) = (self.srcs.len() as i32, i32::from(self.accumulate));
        let (outp, dt, rows, width) = (ctx.addr(self.out), self.dtype.code(), self.rows as i64, self.width as i64);
        let f = ctx.library_kernel(self)?;
        let mut b = ctx.stream().launch_builder(f);
        b.arg(&sources).arg(&k).arg(&acc).arg(&outp).arg(&dt).arg(&rows).arg(&width);
        // SAFETY: matches `aggregate_softmax`'s signature (`Sources` by value, as
        // `AggSources`); k sources and `out` of rows · width elements each.
        unsafe { b.launch(linear(self.rows)) }.map_err(launch_err)?;
        Ok(())
    }

    /// The merge of aggregate.cu's `aggregate_softmax`: per row, the coefficients from the
    /// `lse`s in order ([`softmax_coefficients`]), then each value the sum over the rows
    /// kept of coefficient · value, in f32, rounded to the element type once.
    fn emulate(&self, m: &mut EmulatedMemory) {
        let SoftmaxAggregate { srcs, accumulate, out, dtype, rows, width } = self;
        assert!(!srcs.is_empty() && srcs.len() <= MAX_AGG_SOURCES, "{} aggregation sources", srcs.len());
        if *width == 0 {
            return;
        }
        let order: Vec<Ptr> =
            if *accumulate { std::iter::once(*out).chain(srcs.iter().copied()).collect() } else { srcs.clone() };
        let v = width - 1;
        for r in 0..*rows {
            let base = r * width;
            let lses: Vec<f32> = order.iter().map(|p| m.ld(*p, base + v, *dtype)).collect();
            let (c, lse) = softmax_coefficients(&lses);
            for e in 0..v {
                let mut acc = 0.0f32;
                for (p, &ci) in order.iter().zip(&c) {
                    if ci != 0.0 {
                        acc += ci * m.ld(*p, base + e, *dtype);
                    }
                }
                m.st(*out, base + e, *dtype, acc);
            }
            m.st(*out, base + v, *dtype, lse);
        }
    }

    fn kernel_name(&self) -> Option<&'static str> {
        Some("aggregate_softmax")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The coefficients reproduce the pairwise merge of einsum-core on rows of one value,
    /// the non-finite cases included.
    #[test]
    fn softmax_coefficients_follow_the_pairwise_merge() {
        let (ninf, nan) = (f32::NEG_INFINITY, f32::NAN);
        let cases: [&[(f32, f32)]; 5] = [
            &[(1.0, 0.0), (2.0, 1.0), (-1.0, -0.5)],
            &[(nan, ninf), (2.0, 1.0), (0.0, ninf)],
            &[(0.0, ninf), (nan, ninf)],
            &[(3.0, 0.5), (nan, f32::NAN)],
            &[(0.0, ninf), (1.5, 0.25), (nan, ninf), (0.0, ninf)],
        ];
        for rows in cases {
            let mut want = vec![rows[0].0, rows[0].1];
            for &(o, l) in &rows[1..] {
                einsum_core::merge_softmax_rows(&mut want, &[o, l]);
            }
            let (c, lse) = softmax_coefficients(&rows.iter().map(|r| r.1).collect::<Vec<_>>());
            let o: f32 = rows.iter().zip(&c).filter(|(_, c)| **c != 0.0).map(|(r, c)| c * r.0).sum();
            let same = |a: f32, b: f32| (a.is_nan() && b.is_nan()) || a == b || (a - b).abs() < 1e-6;
            assert!(same(o, want[0]) && same(lse, want[1]), "{rows:?}: {o} {lse} vs {want:?}");
        }
    }

    #[test]
    fn aggregate_sources_fill_the_struct_in_order_and_refuse_too_many() {
        let s = AggSources::new([10u64, 20, 30].into_iter()).unwrap();
        assert_eq!(&s.p[..4], &[10, 20, 30, 0]);
        assert_eq!(std::mem::size_of::<AggSources>(), 8 * MAX_AGG_SOURCES);
        assert!(AggSources::new(std::iter::empty()).is_err());
        assert!(AggSources::new(vec![1u64; MAX_AGG_SOURCES + 1].into_iter()).unwrap_err().contains("sources"));
    }
}

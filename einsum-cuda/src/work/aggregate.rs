//! The k-way ⊕ of an aggregation task's blocks (`aggregate`, `aggregate_vec` of
//! `aggregate.cu`).

use cudarc::driver::{DeviceRepr, PushKernelArg};
use einsum_core::{Aggregation, DType};

use super::DeviceWork;
use super::grid::{elementwise, launch_err};
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aggregate_sources_fill_the_struct_in_order_and_refuse_too_many() {
        let s = AggSources::new([10u64, 20, 30].into_iter()).unwrap();
        assert_eq!(&s.p[..4], &[10, 20, 30, 0]);
        assert_eq!(std::mem::size_of::<AggSources>(), 8 * MAX_AGG_SOURCES);
        assert!(AggSources::new(std::iter::empty()).is_err());
        assert!(AggSources::new(vec![1u64; MAX_AGG_SOURCES + 1].into_iter()).unwrap_err().contains("sources"));
    }
}

//! Sum, max and mean reductions over some indices (`reduce`, `reduce32` of `reduce.cu`).

use cudarc::driver::PushKernelArg;
use einsum_core::DType;
use einsum_ops::binary::BinaryOp;
use einsum_ops::reduce::ReduceOp;

use super::DeviceWork;
use super::grid::{launch_err, linear};
use crate::addressing::{self, Index, NARROW_LIMIT};
use crate::emulate::{EmulatedMemory, offsets_of};
use crate::executor::IssueCtx;
use crate::kernels::codes::OpCode;
use crate::lower::{Dims, Ptr};

/// Sum, max or mean over `over` for every element of `keep`.
#[derive(Clone, Debug, PartialEq)]
pub struct Reduce {
    /// Input.
    pub x: Ptr,
    /// Output.
    pub y: Ptr,
    /// Element type.
    pub dtype: DType,
    /// The reduction.
    pub op: ReduceOp,
    /// Output space (s0: strides in x, s1: in y).
    pub keep: Dims,
    /// Reduced space (s0: strides in x).
    pub over: Dims,
    /// The index width (see [`crate::addressing`]).
    pub index: Index,
    /// What a mean divides its sum by: the whole tensor's count of reduced elements, not
    /// the block's, so that partial means over a split reduced index add up to the mean.
    /// Sum and max ignore it (1).
    pub count: f64,
}

impl DeviceWork for Reduce {
    fn issue(&self, ctx: &IssueCtx<'_>) -> Result<(), String> {
        let n = self.keep.volume();
        if n == 0 {
            return Ok(());
        }
        let code = self.op.code();
        let (xp, yp, dt) = (ctx.addr(self.x), ctx.addr(self.y), self.dtype.code());
        let f = ctx.library_kernel(self)?;
        let mut b = ctx.stream().launch_builder(f);
        b.arg(&xp).arg(&yp).arg(&dt).arg(&code).arg(&self.keep).arg(&self.over).arg(&self.count);
        // SAFETY: matches `reduce`'s and `reduce32`'s signature.
        unsafe { b.launch(linear(n)) }.map_err(launch_err)?;
        Ok(())
    }

    /// As reduce.cu computes it: the sum in f64, the maximum NaN-propagating, the mean the
    /// f64 sum over `count`.
    fn emulate(&self, m: &mut EmulatedMemory) {
        let Reduce { x, y, dtype, op, keep, over, index, count } = self;
        for i in 0..keep.volume() {
            let [bx, by, _] = offsets_of(keep, i, *index);
            let (mut sum, mut mx) = (0.0f64, f32::NEG_INFINITY);
            for j in 0..over.volume() {
                let ox = offsets_of(over, j, *index)[0];
                if *index == Index::I32 {
                    assert!(bx + ox <= NARROW_LIMIT as usize, "a 32-bit reduction reaches {}", bx + ox);
                }
                let v = m.ld(*x, bx + ox, *dtype);
                sum += v as f64;
                // reduce.cu's nan_max(mx, v), which BinaryOp::Max applies.
                mx = BinaryOp::Max.apply(mx, v);
            }
            let r = match op {
                ReduceOp::Sum => sum as f32,
                ReduceOp::Max => mx,
                ReduceOp::Mean => (sum / count) as f32,
            };
            m.st(*y, by, *dtype, r);
        }
    }

    fn kernel_name(&self) -> Option<&'static str> {
        Some(match self.index {
            Index::I64 => "reduce",
            Index::I32 => "reduce32",
        })
    }

    fn specialize(&mut self) {
        self.keep = addressing::coalesce(&self.keep);
        self.over = addressing::coalesce(&self.over);
        self.index = addressing::reduce_index_width(&self.keep, &self.over);
    }
}

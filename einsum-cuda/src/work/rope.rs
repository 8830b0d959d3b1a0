//! Rotary position embedding (`rope.cu`), with the block's cos/sin table as a constant.

use cudarc::driver::PushKernelArg;
use einsum_core::DType;

use super::DeviceWork;
use super::grid::{launch_err, linear};
use crate::emulate::EmulatedMemory;
use crate::executor::IssueCtx;
use crate::kernels::codes::OpCode;
use crate::lower::{Dims, Ptr};

/// Rotary embedding (`table`: cos then sin, f32 `[rows, half]`).
#[derive(Clone, Debug, PartialEq)]
pub struct Rope {
    /// Input.
    pub x: Ptr,
    /// Output.
    pub y: Ptr,
    /// Element type.
    pub dtype: DType,
    /// The cos/sin table.
    pub table: Ptr,
    /// Sequence axis.
    pub seq: usize,
    /// Feature axis.
    pub feat: usize,
    /// Half the feature extent.
    pub half: usize,
    /// Rows of the block along the sequence axis.
    pub rows: usize,
    /// The block with its feature axis halved (s0: the block's strides).
    pub dims: Dims,
}

impl DeviceWork for Rope {
    fn issue(&self, ctx: &IssueCtx<'_>) -> Result<(), String> {
        let n = self.dims.volume();
        if n == 0 {
            return Ok(());
        }
        let (xp, yp, tp, dt) = (ctx.addr(self.x), ctx.addr(self.y), ctx.addr(self.table), self.dtype.code());
        let (sq, ft, h, r) = (self.seq as i32, self.feat as i32, self.half as i64, self.rows as i64);
        let f = ctx.function("rope")?;
        let mut b = ctx.stream().launch_builder(f);
        b.arg(&xp).arg(&yp).arg(&dt).arg(&tp).arg(&sq).arg(&ft).arg(&h).arg(&r).arg(&self.dims);
        // SAFETY: matches `rope`'s signature; the table holds 2 · rows · half floats.
        unsafe { b.launch(linear(n)) }.map_err(launch_err)?;
        Ok(())
    }

    fn emulate(&self, m: &mut EmulatedMemory) {
        let Rope { x, y, dtype, table, seq, feat, half, rows, dims } = self;
        for i in 0..dims.volume() {
            let mut rem = i;
            let (mut a, mut row, mut k) = (0usize, 0usize, 0usize);
            for q in (0..dims.rank as usize).rev() {
                let e = rem % dims.shape[q] as usize;
                rem /= dims.shape[q] as usize;
                a += e * dims.s0[q] as usize;
                if q == *seq {
                    row = e;
                }
                if q == *feat {
                    k = e;
                }
            }
            let b = a + half * dims.s0[*feat] as usize;
            let c = m.ld(*table, row * half + k, DType::F32);
            let s = m.ld(*table, rows * half + row * half + k, DType::F32);
            let (va, vb) = (m.ld(*x, a, *dtype), m.ld(*x, b, *dtype));
            m.st(*y, a, *dtype, va * c - vb * s);
            m.st(*y, b, *dtype, vb * c + va * s);
        }
    }
}

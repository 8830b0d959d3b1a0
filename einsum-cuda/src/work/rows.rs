//! Row kernels (`rows.cu`: one warp per fibre): softmax, RMSNorm and LayerNorm over one axis,
//! RMSNorm writing a slice of each row (`rmsnorm_slice`), and the RMSNorm of a binary's
//! result fused with the binary (`binary_rmsnorm`).

use cudarc::driver::PushKernelArg;
use einsum_core::DType;
use einsum_ops::binary::BinaryOp;

use super::DeviceWork;
use super::grid::{launch_err, rows_launch};
use crate::emulate::EmulatedMemory;
use crate::executor::IssueCtx;
use crate::kernels::codes::OpCode;
use crate::lower::Ptr;

/// Which row-wise normalisation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RowKernel {
    /// Softmax.
    Softmax,
    /// RMSNorm (one weight).
    RmsNorm,
    /// LayerNorm (weight and bias).
    LayerNorm,
}

/// Softmax / RMSNorm / LayerNorm over the middle axis of `[outer, n, inner]`; an RMSNorm may
/// write only a slice of each row ([`Rows::slice`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Rows {
    /// Which.
    pub kernel: RowKernel,
    /// Input.
    pub x: Ptr,
    /// Weight (RMSNorm, LayerNorm).
    pub w: Option<Ptr>,
    /// Bias (LayerNorm).
    pub b: Option<Ptr>,
    /// Output.
    pub y: Ptr,
    /// Element type.
    pub dtype: DType,
    /// Product of the extents before the axis.
    pub outer: usize,
    /// The axis' extent.
    pub n: usize,
    /// Product of the extents after it.
    pub inner: usize,
    /// Epsilon (norms).
    pub eps: f32,
    /// RMSNorm only: the columns `(lo, hi)` of each row that are written, when not the whole
    /// row (an output-only split of the axis, launched as `rmsnorm_slice`). Each row's scale
    /// still comes from all `n` elements of `x`, but the weight holds only those `hi - lo`
    /// columns and the output is `[outer, hi - lo, inner]`. `None`: whole rows (`rmsnorm`).
    pub slice: Option<(usize, usize)>,
}

impl Rows {
    /// The `rmsnorm_slice` launch of a sliced RMSNorm.
    fn issue_slice(&self, ctx: &IssueCtx<'_>, (lo, hi): (usize, usize)) -> Result<(), String> {
        if self.kernel != RowKernel::RmsNorm || lo > hi || hi > self.n {
            return Err(format!("a {:?} row kernel cannot write columns {lo}..{hi} of {}", self.kernel, self.n));
        }
        let Some(cfg) = rows_launch(self.outer * self.inner, hi - lo)? else {
            return Ok(());
        };
        let (xp, yp, dt) = (ctx.addr(self.x), ctx.addr(self.y), self.dtype.code());
        let wp = self.w.map(|p| ctx.addr(p)).ok_or("a sliced RMSNorm without a weight")?;
        let (o, nn, i) = (self.outer as i64, self.n as i64, self.inner as i64);
        let (lo, m) = (lo as i64, (hi - lo) as i64);
        let f = ctx.function("rmsnorm_slice")?;
        let mut b = ctx.stream().launch_builder(f);
        b.arg(&xp).arg(&wp).arg(&yp).arg(&dt).arg(&o).arg(&nn).arg(&i).arg(&self.eps).arg(&lo).arg(&m);
        // SAFETY: matches `rmsnorm_slice`'s signature (rows.cu).
        unsafe { b.launch(cfg) }.map_err(launch_err)?;
        Ok(())
    }

    /// As rows.cu's `rmsnorm_slice`: each row's scale from its `n` elements of `x`, columns
    /// `lo..hi` normalised by the weight's `hi - lo` and stored to `hi - lo` wide rows.
    fn emulate_slice(&self, m: &mut EmulatedMemory, (lo, hi): (usize, usize)) {
        let Rows { kernel, x, w, y, dtype, outer, n, inner, eps, .. } = self;
        assert!(*kernel == RowKernel::RmsNorm && lo <= hi && hi <= *n, "{kernel:?} writing columns {lo}..{hi} of {n}");
        let (wp, width) = (w.expect("a weight"), hi - lo);
        for o in 0..*outer {
            for inn in 0..*inner {
                let at = |j: usize| o * n * inner + j * inner + inn;
                let xs: Vec<f32> = (0..*n).map(|j| m.ld(*x, at(j), *dtype)).collect();
                let s: f32 = xs.iter().map(|v| v * v).sum();
                let scale = 1.0 / (s / *n as f32 + eps).sqrt();
                for j in 0..width {
                    let v = xs[lo + j] * scale * m.ld(wp, j, *dtype);
                    m.st(*y, o * width * inner + j * inner + inn, *dtype, v);
                }
            }
        }
    }
}

impl DeviceWork for Rows {
    fn issue(&self, ctx: &IssueCtx<'_>) -> Result<(), String> {
        if let Some(slice) = self.slice {
            return self.issue_slice(ctx, slice);
        }
        let Some(cfg) = rows_launch(self.outer * self.inner, self.n)? else {
            return Ok(());
        };
        let (xp, yp, dt) = (ctx.addr(self.x), ctx.addr(self.y), self.dtype.code());
        let (o, nn, i) = (self.outer as i64, self.n as i64, self.inner as i64);
        let wp = self.w.map(|p| ctx.addr(p)).unwrap_or(0);
        let bp = self.b.map(|p| ctx.addr(p)).unwrap_or(0);
        let name = match self.kernel {
            RowKernel::Softmax => "softmax",
            RowKernel::RmsNorm => "rmsnorm",
            RowKernel::LayerNorm => "layernorm",
        };
        let f = ctx.function(name)?;
        let mut b = ctx.stream().launch_builder(f);
        b.arg(&xp);
        match self.kernel {
            RowKernel::Softmax => {
                b.arg(&yp).arg(&dt).arg(&o).arg(&nn).arg(&i);
            }
            RowKernel::RmsNorm => {
                b.arg(&wp).arg(&yp).arg(&dt).arg(&o).arg(&nn).arg(&i).arg(&self.eps);
            }
            RowKernel::LayerNorm => {
                b.arg(&wp).arg(&bp).arg(&yp).arg(&dt).arg(&o).arg(&nn).arg(&i).arg(&self.eps);
            }
        }
        // SAFETY: matches the row kernels' signatures (see rows.cu).
        unsafe { b.launch(cfg) }.map_err(launch_err)?;
        Ok(())
    }

    /// As rows.cu computes it.
    fn emulate(&self, m: &mut EmulatedMemory) {
        if let Some(slice) = self.slice {
            return self.emulate_slice(m, slice);
        }
        let Rows { kernel, x, w, b, y, dtype, outer, n, inner, eps, slice: _ } = self;
        for o in 0..*outer {
            for inn in 0..*inner {
                let at = |j: usize| o * n * inner + j * inner + inn;
                let xs: Vec<f32> = (0..*n).map(|j| m.ld(*x, at(j), *dtype)).collect();
                let ys: Vec<f32> = match kernel {
                    RowKernel::Softmax => {
                        // rows.cu's nan_max: a NaN in the row makes the maximum NaN.
                        let mx = xs.iter().fold(f32::NEG_INFINITY, |m, &v| BinaryOp::Max.apply(m, v));
                        let s: f32 = xs.iter().map(|v| (v - mx).exp()).sum();
                        xs.iter().map(|v| (v - mx).exp() / s).collect()
                    }
                    RowKernel::RmsNorm => {
                        let s: f32 = xs.iter().map(|v| v * v).sum();
                        let scale = 1.0 / (s / *n as f32 + eps).sqrt();
                        let wp = w.expect("a weight");
                        (0..*n).map(|j| xs[j] * scale * m.ld(wp, j, *dtype)).collect()
                    }
                    RowKernel::LayerNorm => {
                        let mean = xs.iter().sum::<f32>() / *n as f32;
                        let var = xs.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / *n as f32;
                        let scale = 1.0 / (var + eps).sqrt();
                        let (wp, bp) = (w.expect("a weight"), b.expect("a bias"));
                        (0..*n).map(|j| (xs[j] - mean) * scale * m.ld(wp, j, *dtype) + m.ld(bp, j, *dtype)).collect()
                    }
                };
                for (j, v) in ys.into_iter().enumerate() {
                    m.st(*y, at(j), *dtype, v);
                }
            }
        }
    }
}

/// RMSNorm over the middle axis of `[outer, n, inner]` of `a ⊙ b` (in f32, not rounded
/// before the norm), also storing `a ⊙ b` to `sum` when it has later readers: a binary and
/// the RMSNorm reading its result, fused ([`crate::fusion`]).
#[derive(Clone, Debug, PartialEq)]
pub struct BinaryRmsNorm {
    /// Left operand.
    pub a: Ptr,
    /// Right operand.
    pub b: Ptr,
    /// The norm's weight (`[n]`).
    pub w: Ptr,
    /// Where `a ⊙ b` is also stored, if anything else reads it.
    pub sum: Option<Ptr>,
    /// The normalized rows.
    pub y: Ptr,
    /// Element type.
    pub dtype: DType,
    /// The ⊙.
    pub binary: BinaryOp,
    /// Product of the extents before the axis.
    pub outer: usize,
    /// The axis' extent.
    pub n: usize,
    /// Product of the extents after it.
    pub inner: usize,
    /// Epsilon.
    pub eps: f32,
}

impl DeviceWork for BinaryRmsNorm {
    fn issue(&self, ctx: &IssueCtx<'_>) -> Result<(), String> {
        let Some(cfg) = rows_launch(self.outer * self.inner, self.n)? else {
            return Ok(());
        };
        let (ap, bp, wp, yp) = (ctx.addr(self.a), ctx.addr(self.b), ctx.addr(self.w), ctx.addr(self.y));
        let (dt, code) = (self.dtype.code(), self.binary.code());
        let sp = self.sum.map(|p| ctx.addr(p)).unwrap_or(0);
        let (o, nn, i) = (self.outer as i64, self.n as i64, self.inner as i64);
        let f = ctx.function("binary_rmsnorm")?;
        let mut b = ctx.stream().launch_builder(f);
        b.arg(&ap).arg(&bp).arg(&wp).arg(&sp).arg(&yp).arg(&dt).arg(&code).arg(&o).arg(&nn).arg(&i).arg(&self.eps);
        // SAFETY: matches `binary_rmsnorm`'s signature (rows.cu); a null `sum` stores
        // nothing.
        unsafe { b.launch(cfg) }.map_err(launch_err)?;
        Ok(())
    }

    /// As rows.cu's `binary_rmsnorm`: a ⊙ b in f32, rounded only where it is stored.
    fn emulate(&self, m: &mut EmulatedMemory) {
        let BinaryRmsNorm { a, b, w, sum, y, dtype, binary, outer, n, inner, eps } = self;
        for o in 0..*outer {
            for inn in 0..*inner {
                let at = |j: usize| o * n * inner + j * inner + inn;
                let vs: Vec<f32> =
                    (0..*n).map(|j| binary.apply(m.ld(*a, at(j), *dtype), m.ld(*b, at(j), *dtype))).collect();
                if let Some(sum) = sum {
                    for (j, &v) in vs.iter().enumerate() {
                        m.st(*sum, at(j), *dtype, v);
                    }
                }
                let s: f32 = vs.iter().map(|v| v * v).sum();
                let scale = 1.0 / (s / *n as f32 + eps).sqrt();
                for (j, &v) in vs.iter().enumerate() {
                    let r = v * scale * m.ld(*w, j, *dtype);
                    m.st(*y, at(j), *dtype, r);
                }
            }
        }
    }
}

//! Elementwise work: a unary (`unary.cu`), a binary with broadcasting by index name
//! (`binary.cu`), and a unary fused with the binary reading it (`fused.cu`).

use cudarc::driver::PushKernelArg;
use einsum_core::DType;
use einsum_ops::binary::BinaryOp;
use einsum_ops::unary::UnaryOp;

use super::DeviceWork;
use super::grid::{elementwise, launch_err, linear};
use crate::addressing::{self, Access, aligned};
use crate::emulate::{EmulatedMemory, check_vector, checked_index, offsets_of};
use crate::executor::IssueCtx;
use crate::kernels::codes::{OpCode, unary_scalar};
use crate::lower::{Dims, Ptr};

/// Elementwise unary over `n` contiguous elements.
#[derive(Clone, Debug, PartialEq)]
pub struct Unary {
    /// Input.
    pub x: Ptr,
    /// Output.
    pub y: Ptr,
    /// Element type.
    pub dtype: DType,
    /// The operation.
    pub op: UnaryOp,
    /// Elements.
    pub n: usize,
    /// 16 bytes per thread (both pointers aligned, see [`crate::addressing`]).
    pub vector: bool,
}

impl DeviceWork for Unary {
    fn issue(&self, ctx: &IssueCtx<'_>) -> Result<(), String> {
        if self.n == 0 {
            return Ok(());
        }
        let (code, scale) = (self.op.code(), unary_scalar(self.op));
        let (xp, yp, dt, nn) = (ctx.addr(self.x), ctx.addr(self.y), self.dtype.code(), self.n as i64);
        let f = ctx.library_kernel(self)?;
        let mut b = ctx.stream().launch_builder(f);
        b.arg(&xp).arg(&yp).arg(&dt).arg(&code).arg(&scale).arg(&nn);
        // SAFETY: matches the signature shared by `unary` and `unary_vec`.
        unsafe { b.launch(elementwise(self.n, self.dtype, self.vector)) }.map_err(launch_err)?;
        Ok(())
    }

    fn emulate(&self, m: &mut EmulatedMemory) {
        if self.vector {
            check_vector(m, &[self.x, self.y]);
        }
        for i in 0..self.n {
            let v = self.op.apply(m.ld(self.x, i, self.dtype));
            m.st(self.y, i, self.dtype, v);
        }
    }

    fn kernel_name(&self) -> Option<&'static str> {
        Some(["unary", "unary_vec"][usize::from(self.vector)])
    }

    fn specialize(&mut self) {
        self.vector = aligned(&self.x) && aligned(&self.y);
    }
}

/// Elementwise binary with broadcasting (s0: a, s1: b, s2: y).
#[derive(Clone, Debug, PartialEq)]
pub struct Binary {
    /// Left.
    pub a: Ptr,
    /// Right.
    pub b: Ptr,
    /// Output.
    pub y: Ptr,
    /// Element type.
    pub dtype: DType,
    /// The operation.
    pub op: BinaryOp,
    /// The output's iteration space.
    pub dims: Dims,
    /// The kernel variant (see [`crate::addressing`]).
    pub access: Access,
}

impl DeviceWork for Binary {
    fn issue(&self, ctx: &IssueCtx<'_>) -> Result<(), String> {
        let n = self.dims.volume();
        if n == 0 {
            return Ok(());
        }
        let (ap, bp, yp) = (ctx.addr(self.a), ctx.addr(self.b), ctx.addr(self.y));
        let (dt, code) = (self.dtype.code(), self.op.code());
        let f = ctx.library_kernel(self)?;
        let mut b = ctx.stream().launch_builder(f);
        b.arg(&ap).arg(&bp).arg(&yp).arg(&dt).arg(&code);
        match self.access {
            Access::Vector => {
                let nn = n as i64;
                b.arg(&nn);
                // SAFETY: matches `binary_vec(a, b, y, dt, op, n)`; the three pointers
                // are 16-byte aligned and address n contiguous elements.
                unsafe { b.launch(elementwise(n, self.dtype, true)) }.map_err(launch_err)?;
            }
            Access::Strided(_) => {
                b.arg(&self.dims);
                // SAFETY: matches `binary`'s and `binary32`'s signature.
                unsafe { b.launch(linear(n)) }.map_err(launch_err)?;
            }
        }
        Ok(())
    }

    fn emulate(&self, m: &mut EmulatedMemory) {
        let index = checked_index(m, self.access, &self.dims, &[self.a, self.b, self.y]);
        for i in 0..self.dims.volume() {
            let [oa, ob, oy] = offsets_of(&self.dims, i, index);
            let v = self.op.apply(m.ld(self.a, oa, self.dtype), m.ld(self.b, ob, self.dtype));
            m.st(self.y, oy, self.dtype, v);
        }
    }

    fn kernel_name(&self) -> Option<&'static str> {
        Some(addressing::strided_name(self.access, "binary", "binary32", "binary_vec"))
    }

    fn specialize(&mut self) {
        self.dims = addressing::coalesce(&self.dims);
        self.access = addressing::access(&self.dims, 3, &[&self.a, &self.b, &self.y]);
    }
}

/// `y = f(x) ⊙ b` (`unary_first`) or `y = b ⊙ f(x)` over `n` contiguous elements of one
/// shape, `f(x)` kept in f32 (one rounding, at the store): a unary and the binary reading its
/// result, fused ([`crate::fusion`]).
#[derive(Clone, Debug, PartialEq)]
pub struct UnaryBinary {
    /// The unary's input.
    pub x: Ptr,
    /// The binary's other operand.
    pub b: Ptr,
    /// Output.
    pub y: Ptr,
    /// Element type.
    pub dtype: DType,
    /// The unary f.
    pub unary: UnaryOp,
    /// The binary ⊙.
    pub binary: BinaryOp,
    /// Whether `f(x)` is the binary's left operand.
    pub unary_first: bool,
    /// Elements.
    pub n: usize,
    /// 16 bytes per thread (the three pointers aligned, see [`crate::addressing`]).
    pub vector: bool,
}

impl DeviceWork for UnaryBinary {
    fn issue(&self, ctx: &IssueCtx<'_>) -> Result<(), String> {
        if self.n == 0 {
            return Ok(());
        }
        let (uop, scale) = (self.unary.code(), unary_scalar(self.unary));
        let (bop, first) = (self.binary.code(), i32::from(self.unary_first));
        let (xp, bp, yp) = (ctx.addr(self.x), ctx.addr(self.b), ctx.addr(self.y));
        let (dt, nn) = (self.dtype.code(), self.n as i64);
        let f = ctx.library_kernel(self)?;
        let mut b = ctx.stream().launch_builder(f);
        b.arg(&xp).arg(&bp).arg(&yp).arg(&dt).arg(&uop).arg(&scale).arg(&bop).arg(&first).arg(&nn);
        // SAFETY: matches the signature shared by `unary_binary` and `unary_binary_vec`
        // (fused.cu); three blocks of n elements, 16-byte aligned on the vector path.
        unsafe { b.launch(elementwise(self.n, self.dtype, self.vector)) }.map_err(launch_err)?;
        Ok(())
    }

    fn emulate(&self, m: &mut EmulatedMemory) {
        if self.vector {
            check_vector(m, &[self.x, self.b, self.y]);
        }
        // fused.cu: f(x) stays in f32, one rounding at the store.
        for i in 0..self.n {
            let (u, v) = (self.unary.apply(m.ld(self.x, i, self.dtype)), m.ld(self.b, i, self.dtype));
            let r = if self.unary_first { self.binary.apply(u, v) } else { self.binary.apply(v, u) };
            m.st(self.y, i, self.dtype, r);
        }
    }

    fn kernel_name(&self) -> Option<&'static str> {
        Some(["unary_binary", "unary_binary_vec"][usize::from(self.vector)])
    }

    fn specialize(&mut self) {
        self.vector = aligned(&self.x) && aligned(&self.b) && aligned(&self.y);
    }
}

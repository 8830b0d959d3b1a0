//! Copies: a box between two layouts (`box_copy`, `box_copy32`, `copy_vec` of `copy.cu`),
//! and a transfer's contiguous bytes between buffers (a device or peer memcpy).

use cudarc::driver::{PushKernelArg, result};
use einsum_core::DType;

use super::DeviceWork;
use super::grid::{elementwise, launch_err, linear};
use crate::addressing::{self, Access};
use crate::emulate::{EmulatedMemory, checked_index, offsets_of};
use crate::executor::IssueCtx;
use crate::kernels::codes::OpCode;
use crate::lower::{Dims, Ptr, Space};

/// A strided copy (s0 in the source, s1 in the destination); `copy_vec` on the vector path.
#[derive(Clone, Debug, PartialEq)]
pub struct BoxCopy {
    /// Source.
    pub src: Ptr,
    /// Destination.
    pub dst: Ptr,
    /// Element type.
    pub dtype: DType,
    /// The iteration space.
    pub dims: Dims,
    /// The kernel variant (see [`crate::addressing`]).
    pub access: Access,
}

impl DeviceWork for BoxCopy {
    fn issue(&self, ctx: &IssueCtx<'_>) -> Result<(), String> {
        let n = self.dims.volume();
        if n == 0 {
            return Ok(());
        }
        let (sp, dp, dt) = (ctx.addr(self.src), ctx.addr(self.dst), self.dtype.code());
        let f = ctx.library_kernel(self)?;
        let mut b = ctx.stream().launch_builder(f);
        match self.access {
            Access::Vector => {
                let bytes = (n * self.dtype.size_bytes()) as i64;
                b.arg(&sp).arg(&dp).arg(&bytes);
                // SAFETY: matches `copy_vec(src, dst, bytes)`; both pointers are 16-byte
                // aligned (addressing.rs) and address `bytes` bytes the plan sized.
                unsafe { b.launch(elementwise(n, self.dtype, true)) }.map_err(launch_err)?;
            }
            Access::Strided(_) => {
                let zero = 0i64;
                b.arg(&sp).arg(&zero).arg(&dp).arg(&zero).arg(&dt).arg(&self.dims);
                // SAFETY: the arguments match `box_copy`'s and `box_copy32`'s signature;
                // the pointers address pool, resident, host or constant memory sized by
                // the plan (and every offset fits 31 bits for `box_copy32`).
                unsafe { b.launch(linear(n)) }.map_err(launch_err)?;
            }
        }
        Ok(())
    }

    fn emulate(&self, m: &mut EmulatedMemory) {
        let index = checked_index(m, self.access, &self.dims, &[self.src, self.dst]);
        let es = self.dtype.size_bytes();
        for i in 0..self.dims.volume() {
            let [a, b, _] = offsets_of(&self.dims, i, index);
            let bytes = m.read_bytes(self.src, a * es, es);
            m.write_bytes(self.dst, b * es, &bytes);
        }
    }

    fn kernel_name(&self) -> Option<&'static str> {
        Some(addressing::strided_name(self.access, "box_copy", "box_copy32", "copy_vec"))
    }

    fn specialize(&mut self) {
        self.dims = addressing::coalesce(&self.dims);
        self.access = addressing::access(&self.dims, 2, &[&self.src, &self.dst]);
    }
}

/// A contiguous byte copy between two buffers (a transfer), on one GPU or between two.
#[derive(Clone, Debug, PartialEq)]
pub struct Memcpy {
    /// Source (on the source buffer's GPU).
    pub src: Ptr,
    /// Destination.
    pub dst: Ptr,
    /// Bytes.
    pub bytes: usize,
}

impl DeviceWork for Memcpy {
    fn issue(&self, ctx: &IssueCtx<'_>) -> Result<(), String> {
        if self.bytes == 0 {
            return Ok(());
        }
        let (Space::Buffer(sb), Space::Buffer(db)) = (self.src.space, self.dst.space) else {
            return Err("a transfer between non-buffers".into());
        };
        let (sg, dg) = (ctx.gpu_of_buffer(sb), ctx.gpu_of_buffer(db));
        dg.ctx.bind_to_thread().map_err(|e| e.to_string())?;
        let (src, dst, bytes, stream) = (ctx.addr(self.src), ctx.addr(self.dst), self.bytes, ctx.stream().cu_stream());
        // SAFETY: both ranges lie in their pools (the source possibly in its resident
        // region); the stream belongs to the destination.
        let r = unsafe {
            if sg.ctx.ordinal() == dg.ctx.ordinal() {
                result::memcpy_dtod_async(dst, src, bytes, stream)
            } else {
                result::memcpy_peer_async(dg.ctx.cu_ctx(), dst, sg.ctx.cu_ctx(), src, bytes, stream)
            }
        };
        r.map_err(|e| format!("copying {bytes} bytes between GPUs: {e}"))
    }

    fn emulate(&self, m: &mut EmulatedMemory) {
        let data = m.read_bytes(self.src, 0, self.bytes);
        m.write_bytes(self.dst, 0, &data);
    }
}

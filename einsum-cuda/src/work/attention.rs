//! Attention on one block, FlashAttention-2's tiling (the kernels and their host mirror are
//! in [`crate::kernels::attention`]).

use cudarc::driver::{LaunchConfig, PushKernelArg};
use einsum_core::DType;

use super::DeviceWork;
use super::grid::{MAX_GRID_X, MAX_GRID_YZ, grid, launch_err};
use crate::emulate::EmulatedMemory;
use crate::executor::IssueCtx;
use crate::kernels::attention::{self, AttentionKernel, AttentionShape};
use crate::kernels::codes::OpCode;
use crate::lower::Ptr;

/// Attention on one block of query heads and rows against its keys and values.
#[derive(Clone, Debug, PartialEq)]
pub struct Attention {
    /// Which kernel (tensor cores or not) and its blocking.
    pub kernel: AttentionKernel,
    /// Queries `[heads, nq, d]`.
    pub q: Ptr,
    /// Keys `[kv_heads, nk, d]`.
    pub k: Ptr,
    /// Values, like keys.
    pub v: Ptr,
    /// Output, like queries.
    pub o: Ptr,
    /// Element type.
    pub dtype: DType,
    /// Visible key range per query row (i32 pairs, absolute).
    pub bounds: Ptr,
    /// Query heads in the block.
    pub heads: usize,
    /// Query rows in the block.
    pub nq: usize,
    /// Key rows in the block.
    pub nk: usize,
    /// Absolute first query head.
    pub heads_lo: usize,
    /// Absolute first key/value head.
    pub kv_lo: usize,
    /// Absolute first key row.
    pub keys_lo: usize,
    /// Query heads per key/value head.
    pub group: usize,
    /// The score scale times log2(e) (the kernels work in the log2 domain).
    pub scale_log2: f32,
    /// The head dimension (selects the compiled module).
    pub head_dim: usize,
}

impl DeviceWork for Attention {
    /// Launches the entry its dtype and head dimension chose when lowering.
    fn issue(&self, ctx: &IssueCtx<'_>) -> Result<(), String> {
        let (kernel, head_dim) = (self.kernel, self.head_dim);
        if self.nq == 0 || self.heads == 0 {
            return Ok(());
        }
        let entry = kernel.entry(self.dtype);
        let f = ctx.attention(entry, head_dim).ok_or_else(|| {
            format!(
                "no `{entry}` kernel for head dimension {head_dim} on this GPU (the tensor-core \
                 attention kernel needs compute capability 8.0 or later)"
            )
        })?;
        let (qp, kp, vp, op) = (ctx.addr(self.q), ctx.addr(self.k), ctx.addr(self.v), ctx.addr(self.o));
        let (bp, dt) = (ctx.addr(self.bounds), self.dtype.code());
        let ints = [self.nq, self.nk, self.heads_lo, self.kv_lo, self.keys_lo, self.group].map(|x| x as i64);
        let hpb = kernel.heads_per_block() as i64;
        let mut b = ctx.stream().launch_builder(f);
        b.arg(&qp).arg(&kp).arg(&vp).arg(&op).arg(&dt).arg(&bp);
        for x in &ints {
            b.arg(x);
        }
        b.arg(&hpb).arg(&self.scale_log2);
        let cfg = LaunchConfig {
            grid_dim: (
                grid(self.nq.div_ceil(kernel.positions_per_block(head_dim)), MAX_GRID_X, "attention query tiles")?,
                grid(self.heads / kernel.heads_per_block(), MAX_GRID_YZ, "attention heads")?,
                1,
            ),
            block_dim: (kernel.threads() as u32, 1, 1),
            shared_mem_bytes: kernel.shared_bytes(head_dim) as u32,
        };
        // SAFETY: matches the signature every attention entry shares; blocks were
        // checked and the kernel chosen (alignment, head dim, dtype) when lowering.
        unsafe { b.launch(cfg) }.map_err(launch_err)?;
        Ok(())
    }

    /// Through the kernel's own emulation ([`attention::emulate`]).
    fn emulate(&self, m: &mut EmulatedMemory) {
        let (d, dtype, heads, nq) = (self.head_dim, self.dtype, self.heads, self.nq);
        let kv_heads = (self.heads_lo + heads - 1) / self.group - self.kv_lo + 1;
        let mut read = |p: Ptr, n: usize| (0..n).map(|i| m.ld(p, i, dtype)).collect::<Vec<f32>>();
        let (qv, kv, vv) =
            (read(self.q, heads * nq * d), read(self.k, kv_heads * self.nk * d), read(self.v, kv_heads * self.nk * d));
        let rows: Vec<(usize, usize)> = (0..nq)
            .map(|r| (m.ld_i32(self.bounds, 2 * r) as usize, m.ld_i32(self.bounds, 2 * r + 1) as usize))
            .collect();
        let shape = AttentionShape {
            heads,
            nq,
            nk: self.nk,
            head_dim: d,
            heads_lo: self.heads_lo,
            kv_lo: self.kv_lo,
            keys_lo: self.keys_lo,
            group: self.group,
            scale_log2: self.scale_log2,
            bounds: &rows,
        };
        for (i, x) in attention::emulate(self.kernel, dtype, &shape, &qv, &kv, &vv).into_iter().enumerate() {
            m.st(self.o, i, dtype, x);
        }
    }
}

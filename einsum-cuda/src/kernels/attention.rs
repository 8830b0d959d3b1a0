//! The attention kernels: their tile configurations (the one source of the sizes the CUDA C
//! is compiled with), the choice between them, and the host mirror of their tile algorithm,
//! which the emulator runs so that tests without a GPU check the blocking the GPU uses.
//!
//! Two kernels, one algorithm (FlashAttention-2's online softmax over key tiles, rescaled
//! once per tile, in the log2 domain):
//! - [`AttentionKernel::Mma`] (`cuda/attention_mma.cu`): tensor cores (`mma.sync`, sm_80+)
//!   for f16/bf16 at head dims 64 and 128, with 16-byte aligned operands. A block holds
//!   [`MMA_ROWS`] query rows, `heads_per_block` heads of one GQA group at a time (the K/V
//!   tiles are loaded once for all of them), and walks key tiles of [`mma_keys`]. P is
//!   rounded to the storage dtype before P·V, as FlashAttention-2 does.
//! - [`AttentionKernel::Simt`] (`cuda/attention_simt.cu`): CUDA cores, any dtype and head
//!   dim up to [`MAX_HEAD_DIM`]; blocks of [`simt_tile`]'s rows and keys, P kept in f32.

use einsum_core::DType;
use einsum_ops::binary::BinaryOp;

use super::sources::{ATTENTION_MMA, ATTENTION_SIMT, Module};

/// The largest head dimension the kernels take.
pub const MAX_HEAD_DIM: usize = 256;
/// Warps per block of the tensor-core kernel.
pub const MMA_WARPS: usize = 4;
/// Row tiles of 16 query rows per warp of the tensor-core kernel: each K or V fragment a
/// warp reads from shared memory feeds `2 * MMA_WARP_M` `mma` instructions, so two halve
/// the shared-memory reads per multiply of one (the accumulators of both stay in registers).
pub const MMA_WARP_M: usize = 2;
/// Query rows per block of the tensor-core kernel.
pub const MMA_ROWS: usize = 16 * MMA_WARP_M * MMA_WARPS;
/// Keys per tile of the tensor-core kernel at head dim `head_dim`: 64, or 32 at head dim 128,
/// where the scores of 64 keys and the output accumulators of two row tiles would not fit
/// in a thread's 255 registers (ptxas puts them in local memory).
pub fn mma_keys(head_dim: usize) -> usize {
    if head_dim > 64 { 32 } else { 64 }
}
/// Head dimensions the tensor-core kernel is compiled for.
pub const MMA_HEAD_DIMS: [usize; 2] = [64, 128];
/// Warps per block of the CUDA-core kernel.
pub const SIMT_WARPS: usize = 4;
/// Bytes every operand of the tensor-core kernel must be aligned to (`cp.async` of 16 bytes).
pub const MMA_ALIGN: usize = 16;

/// Query rows per block and keys per tile of the CUDA-core kernel at head dim `d`: its
/// query, key (padded) and value tiles, in f32, stay within 48 KiB of shared memory.
pub fn simt_tile(d: usize) -> (usize, usize) {
    if d > 128 { (8, 16) } else { (16, 32) }
}

/// Which attention kernel runs a block.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AttentionKernel {
    /// CUDA cores.
    Simt,
    /// Tensor cores, `heads_per_block` (1, 2 or 4) heads of one GQA group per block.
    Mma {
        /// Heads sharing each block's K/V tiles.
        heads_per_block: usize,
    },
}

/// A module to compile: which kernel at which head dimension.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AttentionModule {
    /// Tensor cores or not.
    pub tensor_cores: bool,
    /// The head dimension.
    pub head_dim: usize,
}

impl AttentionModule {
    /// Bytes of dynamic shared memory a block of this module's kernels takes: the
    /// tensor-core kernel's Q, K and V tiles in 16-bit storage (64 KiB at head dim 128, over
    /// the 48 KiB of static shared memory, so [`crate::device::Gpu::open`] raises the
    /// kernels' limit), none for the CUDA-core kernel (its tiles are static).
    pub fn shared_bytes(&self) -> usize {
        if self.tensor_cores { (MMA_ROWS + 2 * mma_keys(self.head_dim)) * self.head_dim * 2 } else { 0 }
    }

    /// The source and its defines (tile sizes and head dimension).
    pub fn source(&self) -> (&'static Module, Vec<(&'static str, String)>) {
        let d = ("HEAD_DIM", self.head_dim.to_string());
        if self.tensor_cores {
            let defines = vec![
                d,
                ("MMA_ROWS", MMA_ROWS.to_string()),
                ("MMA_KEYS", mma_keys(self.head_dim).to_string()),
                ("MMA_WARPS", MMA_WARPS.to_string()),
                ("MMA_WARP_M", MMA_WARP_M.to_string()),
            ];
            (&ATTENTION_MMA, defines)
        } else {
            let (rows, keys) = simt_tile(self.head_dim);
            let defines = vec![
                d,
                ("SIMT_ROWS", rows.to_string()),
                ("SIMT_KEYS", keys.to_string()),
                ("SIMT_WARPS", SIMT_WARPS.to_string()),
            ];
            (&ATTENTION_SIMT, defines)
        }
    }
}

impl AttentionKernel {
    /// The kernel for a block: tensor cores for f16/bf16 at head dims 64 and 128 when every
    /// operand offset is [`MMA_ALIGN`]-aligned (pool, resident and constant allocations are
    /// 256-byte aligned), grouping as many heads of one GQA group per block as divide the
    /// group, the block's first head and its head count; CUDA cores otherwise.
    pub fn choose(
        dtype: DType,
        head_dim: usize,
        offsets: [usize; 4],
        group: usize,
        heads_lo: usize,
        heads: usize,
    ) -> Self {
        let sixteen_bit = matches!(dtype, DType::F16 | DType::BF16);
        if !sixteen_bit || !MMA_HEAD_DIMS.contains(&head_dim) || offsets.iter().any(|o| !o.is_multiple_of(MMA_ALIGN)) {
            return AttentionKernel::Simt;
        }
        let heads_per_block = [4, 2, 1]
            .into_iter()
            .find(|&n| group.is_multiple_of(n) && heads_lo.is_multiple_of(n) && heads.is_multiple_of(n))
            .unwrap_or(1);
        AttentionKernel::Mma { heads_per_block }
    }

    /// The module this kernel comes from at head dim `d`.
    pub fn module(self, head_dim: usize) -> AttentionModule {
        AttentionModule { tensor_cores: matches!(self, AttentionKernel::Mma { .. }), head_dim }
    }

    /// The CUDA entry point for `dtype`.
    pub fn entry(self, dtype: DType) -> &'static str {
        match (self, dtype) {
            (AttentionKernel::Simt, _) => "attention_simt",
            (AttentionKernel::Mma { .. }, DType::BF16) => "attention_mma_bf16",
            (AttentionKernel::Mma { .. }, _) => "attention_mma_f16",
        }
    }

    /// Query positions per block (per head).
    pub fn positions_per_block(self, head_dim: usize) -> usize {
        match self {
            AttentionKernel::Simt => simt_tile(head_dim).0,
            AttentionKernel::Mma { heads_per_block } => MMA_ROWS / heads_per_block,
        }
    }

    /// Keys per tile.
    pub fn keys_per_tile(self, head_dim: usize) -> usize {
        match self {
            AttentionKernel::Simt => simt_tile(head_dim).1,
            AttentionKernel::Mma { .. } => mma_keys(head_dim),
        }
    }

    /// Heads per block.
    pub fn heads_per_block(self) -> usize {
        match self {
            AttentionKernel::Simt => 1,
            AttentionKernel::Mma { heads_per_block } => heads_per_block,
        }
    }

    /// Bytes of dynamic shared memory a block takes at head dim `head_dim` (see
    /// [`AttentionModule::shared_bytes`]).
    pub fn shared_bytes(self, head_dim: usize) -> usize {
        self.module(head_dim).shared_bytes()
    }

    /// Threads per block.
    pub fn threads(self) -> usize {
        32 * match self {
            AttentionKernel::Simt => SIMT_WARPS,
            AttentionKernel::Mma { .. } => MMA_WARPS,
        }
    }
}

/// One block's attention problem, as the kernels see it (see `Op::Attention`).
#[derive(Clone, Copy, Debug)]
pub struct AttentionShape<'a> {
    /// Query heads in the block.
    pub heads: usize,
    /// Query rows in the block.
    pub nq: usize,
    /// Key rows in the block.
    pub nk: usize,
    /// The head dimension.
    pub head_dim: usize,
    /// Absolute first query head.
    pub heads_lo: usize,
    /// Absolute first key/value head.
    pub kv_lo: usize,
    /// Absolute first key row.
    pub keys_lo: usize,
    /// Query heads per key/value head.
    pub group: usize,
    /// Score scale times log2(e): the kernels work in the log2 domain.
    pub scale_log2: f32,
    /// Visible key range `[lo, hi)` of every query row (absolute), growing with the row.
    pub bounds: &'a [(usize, usize)],
}

/// The host mirror of `kernel` on one block: `q` `[heads, nq, d]`, `k` and `v`
/// `[kv_heads, nk, d]` hold the storage values as f32; the result is the output in f32
/// before it is rounded to the storage dtype. It follows the kernels' blocking exactly (the
/// same blocks of rows, the same key range per block, the same key tiles, one rescale per
/// tile, P rounded to `dtype` on tensor cores); only the order of some f32 sums and the
/// exp2 approximation differ from the GPU.
pub fn emulate(
    kernel: AttentionKernel,
    dtype: DType,
    s: &AttentionShape<'_>,
    q: &[f32],
    k: &[f32],
    v: &[f32],
) -> Vec<f32> {
    let d = s.head_dim;
    let (positions, tile) = (kernel.positions_per_block(d), kernel.keys_per_tile(d));
    let round = |p: f32| match (kernel, dtype) {
        (AttentionKernel::Mma { .. }, DType::F16) => half::f16::from_f32(p).to_f32(),
        (AttentionKernel::Mma { .. }, DType::BF16) => half::bf16::from_f32(p).to_f32(),
        _ => p,
    };
    let mut out = vec![0.0f32; s.heads * s.nq * d];
    for h in 0..s.heads {
        let kv = ((s.heads_lo + h) / s.group - s.kv_lo) * s.nk * d;
        for p0 in (0..s.nq).step_by(positions.max(1)) {
            let p1 = (p0 + positions).min(s.nq);
            let first = s.bounds[p0].0.max(s.keys_lo);
            let last = s.bounds[p1 - 1].1.min(s.keys_lo + s.nk);
            for r in p0..p1 {
                let (lo, hi) = s.bounds[r];
                let qr = &q[(h * s.nq + r) * d..][..d];
                let (mut m, mut l, mut acc) = (f32::NEG_INFINITY, 0.0f32, vec![0.0f32; d]);
                for j0 in (first..last).step_by(tile) {
                    let keys = j0..(j0 + tile).min(last);
                    let x: Vec<f32> = keys
                        .clone()
                        .map(|key| {
                            if key < lo || key >= hi {
                                return f32::NEG_INFINITY;
                            }
                            let kr = &k[kv + (key - s.keys_lo) * d..][..d];
                            qr.iter().zip(kr).fold(0.0f32, |a, (x, y)| x.mul_add(*y, a)) * s.scale_log2
                        })
                        .collect();
                    // nan_max: a NaN score makes the row's maximum NaN.
                    let mn = x.iter().fold(m, |m, &x| BinaryOp::Max.apply(m, x));
                    let used = if mn == f32::NEG_INFINITY { 0.0 } else { mn };
                    let corr = (m - used).exp2();
                    let p: Vec<f32> = x.iter().map(|x| (x - used).exp2()).collect();
                    m = mn;
                    l = l * corr + p.iter().sum::<f32>();
                    for a in acc.iter_mut() {
                        *a *= corr;
                    }
                    for (key, &pj) in keys.zip(&p) {
                        // The CUDA-core kernel adds only the keys the row sees; the tensor-core
                        // one multiplies the whole tile (a masked key adds 0 · v).
                        if kernel == AttentionKernel::Simt && (key < lo || key >= hi) {
                            continue;
                        }
                        let (pj, vr) = (round(pj), &v[kv + (key - s.keys_lo) * d..][..d]);
                        for (a, y) in acc.iter_mut().zip(vr) {
                            *a = pj.mul_add(*y, *a);
                        }
                    }
                }
                // A maximum still −∞: every seen score was −∞, and −∞ − (−∞) is NaN.
                let inv = if m == f32::NEG_INFINITY { f32::NAN } else { 1.0 / l };
                for (o, a) in out[(h * s.nq + r) * d..][..d].iter_mut().zip(&acc) {
                    *o = a * inv;
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use einsum_core::SeededRng;

    /// Softmax attention computed directly, in f64, from the definition.
    fn reference(s: &AttentionShape<'_>, q: &[f32], k: &[f32], v: &[f32], scale: f64) -> Vec<f32> {
        let d = s.head_dim;
        let mut out = vec![0.0f32; s.heads * s.nq * d];
        for h in 0..s.heads {
            let kv = ((s.heads_lo + h) / s.group - s.kv_lo) * s.nk * d;
            for r in 0..s.nq {
                let (lo, hi) = s.bounds[r];
                let qr = &q[(h * s.nq + r) * d..][..d];
                let scores: Vec<f64> = (lo..hi)
                    .map(|key| {
                        let kr = &k[kv + (key - s.keys_lo) * d..][..d];
                        qr.iter().zip(kr).map(|(a, b)| *a as f64 * *b as f64).sum::<f64>() * scale
                    })
                    .collect();
                let mx = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let w: Vec<f64> = scores.iter().map(|x| (x - mx).exp()).collect();
                let total: f64 = w.iter().sum();
                for c in 0..d {
                    let y: f64 = (lo..hi).zip(&w).map(|(key, w)| w * v[kv + (key - s.keys_lo) * d + c] as f64).sum();
                    out[(h * s.nq + r) * d + c] = (y / total) as f32;
                }
            }
        }
        out
    }

    fn rounded(dtype: DType, n: usize, rng: &mut SeededRng) -> Vec<f32> {
        (0..n)
            .map(|_| {
                let x = rng.uniform(-1.0, 1.0);
                match dtype {
                    DType::F16 => half::f16::from_f32(x).to_f32(),
                    DType::BF16 => half::bf16::from_f32(x).to_f32(),
                    DType::F32 | DType::I32 => x,
                }
            })
            .collect()
    }

    /// Causal attention over packed sequences of the given lengths, the block covering
    /// query rows `rows` and every key of their sequences.
    fn causal_bounds(lens: &[usize]) -> Vec<(usize, usize)> {
        let mut out = Vec::new();
        let mut start = 0;
        for &n in lens {
            for i in start..start + n {
                out.push((start, i + 1));
            }
            start += n;
        }
        out
    }

    /// A block holding every query and key row of `bounds`, from head 0 and key 0.
    fn whole(bounds: &[(usize, usize)], heads: usize, group: usize, d: usize, scale: f64) -> AttentionShape<'_> {
        AttentionShape {
            heads,
            nq: bounds.len(),
            nk: bounds.len(),
            head_dim: d,
            heads_lo: 0,
            kv_lo: 0,
            keys_lo: 0,
            group,
            scale_log2: (scale * std::f64::consts::LOG2_E) as f32,
            bounds,
        }
    }

    fn check(kernel: AttentionKernel, dtype: DType, d: usize, heads: usize, group: usize, lens: &[usize], tol: f32) {
        let mut rng = SeededRng::new(7 + d as u64 + heads as u64);
        let bounds = causal_bounds(lens);
        let n = bounds.len();
        let kv_heads = heads / group;
        let scale = 1.0 / (d as f64).sqrt();
        let shape = whole(&bounds, heads, group, d, scale);
        let q = rounded(dtype, heads * n * d, &mut rng);
        let k = rounded(dtype, kv_heads * n * d, &mut rng);
        let v = rounded(dtype, kv_heads * n * d, &mut rng);
        let got = emulate(kernel, dtype, &shape, &q, &k, &v);
        let want = reference(&shape, &q, &k, &v, scale);
        let norm = want.iter().map(|x| x * x).sum::<f32>().sqrt();
        let err = got.iter().zip(&want).map(|(a, b)| (a - b) * (a - b)).sum::<f32>().sqrt() / norm;
        assert!(err < tol, "{kernel:?} {dtype:?} d={d}: relative error {err}");
    }

    #[test]
    fn both_tilings_match_the_definition_of_attention() {
        // Packed sequences that straddle blocks and tiles, GQA groups of 1, 2 and 4.
        let lens = [70, 1, 130, 33];
        check(AttentionKernel::Simt, DType::F32, 128, 2, 1, &lens, 1e-5);
        check(AttentionKernel::Simt, DType::F32, 256, 2, 2, &lens, 1e-5);
        check(AttentionKernel::Simt, DType::F32, 48, 1, 1, &lens, 1e-5);
        // P rounded to 16 bits costs about one ulp of the dtype.
        check(AttentionKernel::Mma { heads_per_block: 4 }, DType::BF16, 128, 8, 4, &lens, 1e-2);
        check(AttentionKernel::Mma { heads_per_block: 2 }, DType::F16, 64, 4, 2, &lens, 2e-3);
        check(AttentionKernel::Mma { heads_per_block: 1 }, DType::F16, 128, 3, 1, &lens, 2e-3);
    }

    #[test]
    fn the_tensor_core_kernel_takes_aligned_16_bit_blocks_at_head_dims_64_and_128() {
        let ok = [0, 256, 4096, 16];
        assert_eq!(
            AttentionKernel::choose(DType::BF16, 128, ok, 4, 0, 32),
            AttentionKernel::Mma { heads_per_block: 4 }
        );
        assert_eq!(AttentionKernel::choose(DType::F16, 64, ok, 2, 2, 6), AttentionKernel::Mma { heads_per_block: 2 });
        // Heads of one block must share their key/value head: a first head at 2 in groups
        // of 4 allows 2 per block, an odd one 1.
        assert_eq!(AttentionKernel::choose(DType::F16, 64, ok, 4, 2, 8), AttentionKernel::Mma { heads_per_block: 2 });
        assert_eq!(AttentionKernel::choose(DType::F16, 64, ok, 4, 3, 5), AttentionKernel::Mma { heads_per_block: 1 });
        assert_eq!(AttentionKernel::choose(DType::F32, 128, ok, 1, 0, 8), AttentionKernel::Simt);
        assert_eq!(AttentionKernel::choose(DType::BF16, 96, ok, 1, 0, 8), AttentionKernel::Simt);
        assert_eq!(AttentionKernel::choose(DType::BF16, 128, [0, 8, 0, 0], 1, 0, 8), AttentionKernel::Simt);
    }

    #[test]
    fn p_rounding_is_what_separates_the_tensor_core_path() {
        // The same problem through both tilings differs, in bf16, by about the rounding of
        // P: so the emulator really runs the tensor-core blocking, not the CUDA-core one.
        let bounds = causal_bounds(&[200]);
        let (d, n) = (64, 200);
        let shape = whole(&bounds, 1, 1, d, 0.125);
        let mut rng = SeededRng::new(3);
        let (q, k, v) = (
            rounded(DType::BF16, n * d, &mut rng),
            rounded(DType::BF16, n * d, &mut rng),
            rounded(DType::BF16, n * d, &mut rng),
        );
        let mma = emulate(AttentionKernel::Mma { heads_per_block: 1 }, DType::BF16, &shape, &q, &k, &v);
        let simt = emulate(AttentionKernel::Simt, DType::BF16, &shape, &q, &k, &v);
        let diff = mma.iter().zip(&simt).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
        assert!(diff > 1e-5 && diff < 2e-2, "max difference {diff}");
    }
}

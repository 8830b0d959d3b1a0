//! Size-dependent kernel efficiency: wave quantization of tiled kernels.
//!
//! A GEMM or a fused attention kernel splits its output into tiles, one thread block per
//! tile, and the GPU runs one block per streaming multiprocessor (SM) at a time: the blocks
//! run in *waves* of `sms`. A kernel of `t` tiles takes `⌈t / sms⌉` waves whatever the last
//! wave's fill, so it reaches only
//!
//! ```text
//! t / (⌈t / sms⌉ · sms)
//! ```
//!
//! of the throughput a full device would give: a GEMM with fewer tiles than SMs leaves SMs
//! idle (64 tiles on the A100's 108 SMs reach 59%), and a partial last wave costs a whole
//! wave (109 tiles take two waves, 50%). For large kernels the factor tends to 1. NVIDIA's
//! "Matrix Multiplication Background User's Guide" (Deep Learning Performance
//! documentation) describes exactly this tile and wave quantization.
//!
//! The model takes a tile of [`TILE_ELEMENTS`] = 128 × 128 output elements and one block
//! per SM per wave, for both classes it applies to:
//! - [`KernelClass::Matmul`]: cuBLAS's tensor-core GEMMs on the A100 and H100 commonly use
//!   128×128 (and 256×128) output tiles per block (the same guide's examples use 128×128);
//! - [`KernelClass::Attention`]: FlashAttention-2's forward pass gives each block one head
//!   and 128 query rows (Dao, 2023), so with a head size of 128 a block writes 128 × 128
//!   output elements as well.
//!
//! Elementwise, normalization and copy kernels are memory-bound and launch many small blocks,
//! so they are not quantized. The factor scales the compute term only: a kernel bound by
//! its HBM traffic is taken to reach the memory efficiency at any size. Libraries choose
//! smaller tiles (or split the reduction) for small problems to fill more SMs, so the factor
//! is a pessimistic bound for the smallest GEMMs; it is a first-order model, set from the
//! hardware's SM count ([`crate::Site::sms`]) and not fitted to any measured time.

use crate::roofline::KernelClass;

/// Output elements one thread block computes: a 128 × 128 tile (module docs).
pub const TILE_ELEMENTS: f64 = 128.0 * 128.0;

/// Streaming multiprocessors of an A100 (SXM4): 108 (NVIDIA A100 Tensor Core GPU
/// Architecture whitepaper).
pub const A100_SMS: usize = 108;
/// Streaming multiprocessors of an H100 SXM5: 132 (NVIDIA H100 Tensor Core GPU Architecture
/// whitepaper).
pub const H100_SMS: usize = 132;
/// Streaming multiprocessors of a Tesla V100 (SXM2): 80 (NVIDIA Tesla V100 GPU Architecture
/// whitepaper).
pub const V100_SMS: usize = 80;
/// Streaming multiprocessors of one Blackwell B200 GPU of a GB200 superchip: 148 (two dies
/// of 74 enabled SMs, as third-party listings of the B200 give it; NVIDIA's Blackwell
/// architecture brief does not tabulate it).
pub const B200_SMS: usize = 148;

/// Whether kernels of `class` are tiled over their output and so quantized in waves.
pub fn is_tiled(class: KernelClass) -> bool {
    matches!(class, KernelClass::Matmul | KernelClass::Attention)
}

/// The tiles of a kernel writing `output_elements`: `⌈output_elements / TILE_ELEMENTS⌉`,
/// at least one.
pub fn output_tiles(output_elements: f64) -> f64 {
    (output_elements / TILE_ELEMENTS).ceil().max(1.0)
}

/// The fraction of the device's throughput that `tiles` tiles reach on `sms` SMs:
/// `tiles / (⌈tiles / sms⌉ · sms)` (module docs); 1 when `sms` is 0.
pub fn wave_efficiency(tiles: f64, sms: usize) -> f64 {
    if sms == 0 || tiles <= 0.0 {
        return 1.0;
    }
    let sms = sms as f64;
    tiles / ((tiles / sms).ceil() * sms)
}

/// The wave efficiency of a kernel of `class` writing `output_elements` on a device of
/// `sms` SMs: [`wave_efficiency`] of its [`output_tiles`] for tiled classes, 1 for the
/// others and when the SM count is unknown.
pub fn kernel_wave_efficiency(class: KernelClass, output_elements: f64, sms: Option<usize>) -> f64 {
    match sms {
        Some(sms) if is_tiled(class) => wave_efficiency(output_tiles(output_elements), sms),
        _ => 1.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fewer_tiles_than_sms_and_partial_waves_lose_throughput() {
        assert_eq!(wave_efficiency(108.0, A100_SMS), 1.0);
        assert_eq!(wave_efficiency(216.0, A100_SMS), 1.0);
        assert_eq!(wave_efficiency(54.0, A100_SMS), 0.5);
        assert_eq!(wave_efficiency(109.0, A100_SMS), 109.0 / 216.0);
        // Many waves: the last one's loss fades.
        assert!(wave_efficiency(100.0 * 108.0 + 1.0, A100_SMS) > 0.99);
        assert_eq!(wave_efficiency(5.0, 0), 1.0);
    }

    #[test]
    fn tiles_are_128_by_128_outputs_and_only_tiled_classes_quantize() {
        // A 1024 × 1024 GEMM output: 8 × 8 tiles.
        assert_eq!(output_tiles(1024.0 * 1024.0), 64.0);
        assert_eq!(output_tiles(1.0), 1.0);
        assert_eq!(output_tiles(0.0), 1.0);
        let e = kernel_wave_efficiency(KernelClass::Matmul, 1024.0 * 1024.0, Some(A100_SMS));
        assert_eq!(e, 64.0 / 108.0);
        assert_eq!(kernel_wave_efficiency(KernelClass::Attention, 1024.0 * 1024.0, Some(A100_SMS)), e);
        assert_eq!(kernel_wave_efficiency(KernelClass::Elementwise, 1.0, Some(A100_SMS)), 1.0);
        assert_eq!(kernel_wave_efficiency(KernelClass::Copy, 1.0, Some(A100_SMS)), 1.0);
        assert_eq!(kernel_wave_efficiency(KernelClass::Matmul, 1.0, None), 1.0);
    }
}

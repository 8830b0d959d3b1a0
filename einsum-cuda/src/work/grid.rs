//! Launch geometry shared by the kernels' work: grid-stride launches, row-kernel launches,
//! and CUDA's grid limits as errors rather than truncations.

use cudarc::driver::LaunchConfig;
use einsum_core::DType;

use crate::addressing::VECTOR_BYTES;

/// Largest `gridDim.x`.
pub const MAX_GRID_X: usize = (1 << 31) - 1;
/// Largest `gridDim.y` and `gridDim.z`.
pub const MAX_GRID_YZ: usize = 65535;

/// A grid-stride launch over `n` elements.
pub fn linear(n: usize) -> LaunchConfig {
    let blocks = n.div_ceil(256).clamp(1, 65536) as u32;
    LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 }
}

/// The launch over `n` elements of `dtype`: a thread per element, or on the vector path a
/// thread per 16 bytes (`lanes` of `common.cuh` elements).
pub fn elementwise(n: usize, dtype: DType, vector: bool) -> LaunchConfig {
    linear(if vector { n.div_ceil(VECTOR_BYTES / dtype.size_bytes()) } else { n })
}

/// A grid extent of `n` blocks, or an error naming `what` when it exceeds `max` (a plain `as
/// u32` would wrap and launch a truncated grid).
pub fn grid(n: usize, max: usize, what: &str) -> Result<u32, String> {
    if n > max {
        return Err(format!("{what}: {n} blocks exceed CUDA's grid limit of {max}"));
    }
    Ok(n as u32)
}

/// The launch of a row kernel (`rows.cu`: one warp per fibre, 8 per block) over `fibres`
/// rows of `n` elements; `None` when there is nothing to do.
pub fn rows_launch(fibres: usize, n: usize) -> Result<Option<LaunchConfig>, String> {
    if fibres == 0 || n == 0 {
        return Ok(None);
    }
    Ok(Some(LaunchConfig {
        grid_dim: (grid(fibres.div_ceil(8), MAX_GRID_X, "row kernel")?, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    }))
}

/// The message of a failed kernel launch.
pub(crate) fn launch_err(e: cudarc::driver::DriverError) -> String {
    format!("kernel launch: {e}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grids_past_the_cuda_limits_are_errors_not_truncations() {
        assert_eq!(grid(65535, MAX_GRID_YZ, "heads"), Ok(65535));
        let err = grid(65536, MAX_GRID_YZ, "attention heads").unwrap_err();
        assert!(err.contains("attention heads") && err.contains("65535"), "{err}");
        assert!(grid(1 << 31, MAX_GRID_X, "rows").is_err());
        let blocks = linear(usize::MAX / 2).grid_dim.0;
        assert!(blocks as usize <= MAX_GRID_X && blocks > 0);
    }

    /// The 32-bit kernels' grid-stride index stays below 2³² (see `addressing::NARROW_LIMIT`):
    /// a grid has at most 2³² − 1 − NARROW_LIMIT threads.
    #[test]
    fn a_grid_stride_cannot_wrap_a_32_bit_index() {
        let c = linear(usize::MAX / 2);
        let threads = c.grid_dim.0 as u64 * c.block_dim.0 as u64;
        assert!(threads <= u32::MAX as u64 - crate::addressing::NARROW_LIMIT, "{threads} threads");
    }
}

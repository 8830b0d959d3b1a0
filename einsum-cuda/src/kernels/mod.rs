//! The CUDA kernels, one concept per file: the contraction planner (pure Rust), the CUDA C
//! sources compiled at run time with NVRTC, and the lowering of an operator call to
//! launches.

pub mod compile;
pub mod gemm_plan;
pub mod sources;

//! The CUDA backend: runs a compiled task graph on NVIDIA GPUs through `cudarc`.
#![warn(missing_docs)]

pub mod availability;
pub mod kernels;
pub mod pool;
pub mod schedule;

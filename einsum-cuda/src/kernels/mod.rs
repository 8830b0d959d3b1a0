//! The CUDA kernels, one concept per file: the contraction planner (pure Rust), the
//! attention kernels' tilings and their host mirror ([`attention`]), the CUDA C
//! sources compiled at run time with NVRTC (with their operation codes generated from the
//! Rust enums, [`codes`]), the table of kernels by operator type
//! ([`registry`]) and the lowering of each operator's call to launches ([`operators`]), and the operators
//! the fusion pass makes with theirs ([`fused`]).

pub mod attention;
pub mod codes;
pub mod compile;
pub mod fused;
pub mod gemm_plan;
pub mod operators;
pub mod registry;
pub mod sources;

//! The CUDA backend: runs a compiled task graph on NVIDIA GPUs through `cudarc`.
//!
//! [`CudaExecutable::prepare`] lowers every task of a physical compilation to device
//! operations ([`lower`]): cuBLAS strided-batched GEMMs for contractions (planned in
//! [`kernels::gemm_plan`]), NVRTC-compiled CUDA C kernels for everything else
//! ([`kernels::sources`]), box copies for loads, slices, stitches and stores, peer copies for
//! transfers. [`schedule`] maps virtual devices onto GPUs round-robin with one stream each
//! and plans one allocation pool per GPU ([`pool`]); [`executor`] issues the work with
//! events between streams, and [`graph_capture`] captures it once as a CUDA graph that every
//! [`CudaExecutable::run`] replays (or, with [`CudaOptions::eager`], issues it again).
//!
//! The crate links no CUDA library: cudarc loads them at run time, and
//! [`availability::check_cuda`] turns their absence into
//! [`einsum_core::BackendError::Unavailable`] ("no CUDA driver found ..."), so every public
//! type exists, and every entry point fails cleanly, on a machine without a GPU.
#![warn(missing_docs)]

pub mod availability;
pub mod device;
pub mod emulate;
pub mod executable;
pub mod executor;
pub mod graph_capture;
pub mod kernels;
pub mod lower;
pub mod pool;
pub mod schedule;

pub use executable::{CudaExecutable, CudaOptions, CudaSummary};

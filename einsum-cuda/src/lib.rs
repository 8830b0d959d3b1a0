//! The CUDA backend: runs a compiled task graph on NVIDIA GPUs through `cudarc`.
//!
//! [`CudaBackend`] implements the core contract ([`einsum_core::Backend`]); its prepared
//! executable is a [`CudaExecutable`]. [`CudaExecutable::prepare`] refuses, before any CUDA
//! call, a graph with an operator that has no CUDA kernel (kernels are found by operator
//! type in a [`KernelRegistry`], a value users extend with their own operators' kernels), fuses adjacent kernel tasks on the task graph
//! ([`fusion`]: a unary and the binary reading it, a binary and the RMSNorm reading it; off
//! with [`CudaOptions::fuse`]), then lowers every task to device operations ([`lower`]):
//! cuBLAS strided-batched GEMMs for contractions (planned in [`kernels::gemm_plan`]),
//! NVRTC-compiled CUDA C kernels for everything else
//! ([`kernels::sources`]), box copies for slices, stitches and stores, peer copies for
//! transfers; the memory-bound kernels' variants (coalesced dimensions, 32-bit indexing,
//! 16-byte vector accesses) are chosen at lowering by [`addressing`]. [`stream_plan`] maps
//! virtual devices onto GPUs round-robin, spreads each device's independent tasks over
//! several streams (a per-GPU budget, [`CudaOptions::streams_per_gpu`]), lets a transfer
//! between virtual devices of one GPU share its source's memory instead of copying, and plans
//! one allocation pool per GPU ([`pool`]) for the per-run activations, and one resident region
//! per GPU ([`resident`]) for the blocks of the computation inputs that the Load tasks select.
//! [`CudaExecutable::load`] checks an input against its slot ([`inputs`]) and uploads its
//! blocks once, in their storage dtype; they stay on the GPUs, so a Load task
//! issues nothing. Every kind of device work ([`work`]) is one value that both issues itself
//! and says what it computes on the host, including launches of a user's own CUDA C
//! ([`work::Launch`]). [`executor`] issues the work with events between streams, and
//! [`graph_capture`] captures it once as a CUDA graph that every [`CudaExecutable::run`]
//! replays (or, with [`CudaOptions::eager`], issues it again), timed by events around the
//! launch; [`setup_lock`] keeps another thread's preparing, loading or dropping of an executable
//! from breaking a capture. [`emulate`] runs the same plan, load once and run many, on the host, in schedule
//! order or with the streams interleaved at random; [`race_check`] proves a plan's streams
//! and events order every conflicting memory access. [`exchange_steps`] groups the transfers
//! between the ranks of a multi-process job into the steps NCCL issues them in;
//! [`rank_schedule`] puts a job's graph in one rank's issue order, so that
//! [`CudaExecutable::prepare_rank`] plans, lowers and issues only that rank's share, its steps
//! each one group on an exchange stream through an [`executor::Exchange`] (feature `nccl`:
//! `nccl::NcclRank`); [`emulate::run_ranks`] runs every rank's share together on the host.
//!
//! The crate links no CUDA library: cudarc loads them at run time, and
//! [`availability::check_cuda`] turns their absence into
//! [`einsum_core::BackendError::Unavailable`] ("no CUDA driver found ..."), so every public
//! type exists, and every entry point fails cleanly, on a machine without a GPU.
#![warn(missing_docs)]

pub mod addressing;
pub mod availability;
pub mod backend;
pub mod device;
pub mod emulate;
pub mod exchange_steps;
pub mod executable;
pub mod executor;
pub mod fusion;
pub mod graph_capture;
pub mod inputs;
pub mod kernels;
pub mod lower;
#[cfg(feature = "nccl")]
pub mod nccl;
pub mod pool;
pub mod race_check;
pub mod rank_schedule;
pub mod resident;
pub mod setup_lock;
pub mod stream_plan;
pub mod work;

pub use backend::CudaBackend;
pub use executable::{CudaExecutable, CudaOptions, CudaSummary, RankShare};
pub use kernels::registry::KernelRegistry;

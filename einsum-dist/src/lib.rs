//! A plan's devices split over the ranks of a multi-process job (the MPI backend's first,
//! MPI-free piece).
//!
//! Each rank of an `mpirun` job owns a contiguous set of the plan's devices and runs their
//! tasks; a transfer between devices of different ranks becomes a point-to-point message.
//! [`RankLayout`] says which rank owns which device; [`cross_rank`] lists the transfers that
//! become messages (a message's tag is its position in that list) and [`inter_rank_bytes`]
//! sums their bytes per pair of ranks. [`RankBackend`] runs the ranks' tasks on the CPU over
//! a [`Transport`] (MPI's, feature `mpi`); `CudaRankBackend` (feature `nccl`) runs them on
//! one GPU per rank, the crossing transfers over NCCL.

mod backend;
#[cfg(feature = "nccl")]
mod cuda;
mod executable;
mod handshake;
mod job;
mod layout;
mod messages;
#[cfg(feature = "mpi")]
mod mpi;
mod peers;
mod traffic;
mod transport;

pub use backend::{DEFAULT_PATIENCE, RankBackend};
#[cfg(feature = "nccl")]
pub use cuda::{CudaRankBackend, CudaRankExecutable};
pub use executable::RankExecutable;
pub use layout::{LayoutError, RankLayout};
#[cfg(feature = "mpi")]
pub use mpi::{CHUNK_BYTES, MpiTransport};
pub use traffic::{TrafficError, cross_rank, inter_rank_bytes};
pub use transport::{Envelope, Local, Shape, Transport, TransportError};

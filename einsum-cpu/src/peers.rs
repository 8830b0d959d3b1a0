//! The other processes of a job that spreads one task graph's devices over several
//! processes (the ranks of an MPI job): what an executable that runs only its own devices'
//! tasks ([`CpuExecutable::with_peers`](crate::CpuExecutable::with_peers)) needs of them.
//!
//! A transfer whose two devices are in one process stays a copy-free hand-over. One from a
//! local device to another process's is a send: the worker that runs it hands the block to
//! [`Peers::send`] and goes on. One from another process's device to a local one finishes
//! when its block arrives ([`Peers::receive`]), which one thread of the run waits for while
//! the workers run whatever else is ready. Every other task runs where its device is.

use std::time::Duration;

use einsum_core::{
    HostTensor,
    taskgraph::{DeviceId, TaskId},
};

/// The processes that run the devices of a graph this one does not (see the module docs).
pub trait Peers: Send + Sync {
    /// Whether this process runs the tasks of `device`.
    fn is_local(&self, device: DeviceId) -> bool;

    /// Starts sending `block`, the source block of transfer `task`, whose destination device
    /// another process runs; returns without waiting for the delivery (the peers keep the
    /// block meanwhile, which shares its elements).
    fn send(&self, task: TaskId, block: HostTensor) -> Result<(), String>;

    /// Waits at most `wait` for the next block another process sent this one: the transfer
    /// it completes (whose destination device is local) and the block, of the destination
    /// buffer's type and dtype; `None` when nothing arrived in time.
    fn receive(&self, wait: Duration) -> Result<Option<(TaskId, HostTensor)>, String>;

    /// Who runs `device` (`rank 3`), for errors that name the process a run waited for.
    fn owner(&self, device: DeviceId) -> String;

    /// How long a run waits without any block arriving before it gives up on the process
    /// that should have sent the next one (it may have failed).
    fn patience(&self) -> Duration;
}

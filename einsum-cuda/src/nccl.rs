//! NCCL between the ranks of a multi-process job (feature `nccl`): the communicator of one
//! rank on its GPU, and the issue of one step of [`crate::exchange_steps`] as one group of
//! sends and receives on a stream.
//!
//! NCCL is loaded at run time, like every CUDA library here: [`nccl_present`] asks first, and
//! a missing library is [`BackendError::Unavailable`], never a panic. The communicator is
//! made from a [`UniqueId`] that rank 0 creates and every other rank receives as its 128
//! bytes, through whatever the job already talks over (MPI).

use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaStream};
use cudarc::nccl::{result, sys};
use einsum_core::BackendError;
use einsum_core::taskgraph::TaskId;

use crate::availability::check_cuda;
use crate::exchange_steps::{Direction, RankOp};

/// Whether the NCCL library (`libnccl.so`) can be loaded.
pub fn nccl_present() -> bool {
    // SAFETY: only tries to open the shared library; no symbol is called.
    unsafe { sys::is_culib_present() }
}

/// [`BackendError::Unavailable`] unless NCCL can be loaded.
fn check_nccl() -> Result<(), BackendError> {
    if nccl_present() {
        Ok(())
    } else {
        Err(BackendError::Unavailable("no NCCL library found (libnccl.so could not be loaded)".into()))
    }
}

/// An NCCL call that failed, as a device error naming the call.
fn failed(call: &str, e: result::NcclError) -> BackendError {
    BackendError::Device { operation: call.into(), reason: format!("{e:?}") }
}

/// The id every rank's communicator is made from: rank 0 creates it, the others receive its
/// bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UniqueId([u8; 128]);

impl UniqueId {
    /// A new id (`ncclGetUniqueId`), on rank 0.
    pub fn new() -> Result<Self, BackendError> {
        check_nccl()?;
        let id = result::get_uniqueid().map_err(|e| failed("ncclGetUniqueId", e))?;
        Ok(UniqueId(id.internal.map(|c| c as u8)))
    }

    /// The id whose bytes are `bytes` (what rank 0's [`UniqueId::to_bytes`] gave).
    pub fn from_bytes(bytes: [u8; 128]) -> Self {
        UniqueId(bytes)
    }

    /// The id's bytes, to send to the other ranks.
    pub fn to_bytes(&self) -> [u8; 128] {
        self.0
    }
}

/// One rank's NCCL communicator, on one GPU.
///
/// It holds the GPU's (primary) context, the one the CUDA executable of that GPU uses, so the
/// context outlives the communicator, and binds it before every NCCL call, since NCCL works on
/// the calling thread's current device.
#[derive(Debug)]
pub struct NcclRank {
    comm: sys::ncclComm_t,
    ctx: Arc<CudaContext>,
    rank: usize,
    ranks: usize,
}

// SAFETY: an NCCL communicator is a handle that any thread may use (one at a time, which the
// executable issuing the steps guarantees: `NcclRank` is not `Sync`); it owns no thread-local
// state, and every call binds the GPU's context first.
unsafe impl Send for NcclRank {}

impl NcclRank {
    /// Joins the communicator of `id` as rank `rank` of `ranks`, on GPU `gpu` of this process
    /// (`ncclCommInitRank`, which returns once every rank has joined).
    ///
    /// Checks first, without panicking, that NCCL and the CUDA driver load and that `gpu`
    /// exists ([`BackendError::Unavailable`] otherwise: "no NCCL library found ...", "no CUDA
    /// driver found ..."); a rank outside the job or a failed NCCL call is a
    /// [`BackendError::Device`].
    pub fn init(id: &UniqueId, rank: usize, ranks: usize, gpu: usize) -> Result<Self, BackendError> {
        check_nccl()?;
        let gpus = check_cuda()?;
        if gpu >= gpus {
            return Err(BackendError::Unavailable(format!("no GPU {gpu} for NCCL rank {rank} ({gpus} GPUs here)")));
        }
        if rank >= ranks {
            return Err(BackendError::Device {
                operation: "ncclCommInitRank".into(),
                reason: format!("rank {rank} is not in a job of {ranks} ranks"),
            });
        }
        let setup = |e: cudarc::driver::DriverError| BackendError::Device {
            operation: format!("opening GPU {gpu} for NCCL"),
            reason: e.to_string(),
        };
        let ctx = CudaContext::new(gpu).map_err(setup)?;
        ctx.bind_to_thread().map_err(setup)?;
        let mut comm = std::mem::MaybeUninit::uninit();
        let raw = sys::ncclUniqueId { internal: id.0.map(|b| b as std::ffi::c_char) };
        // SAFETY: `comm` is written by the call; the id is a unique id's bytes; the GPU's
        // context is current on this thread.
        let comm = unsafe {
            result::comm_init_rank(comm.as_mut_ptr(), ranks as i32, raw, rank as i32)
                .map_err(|e| failed("ncclCommInitRank", e))?;
            comm.assume_init()
        };
        Ok(NcclRank { comm, ctx, rank, ranks })
    }

    /// The GPU's context the communicator works in (streams given to
    /// [`NcclRank::issue_step`] must be of it).
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The job's ranks.
    pub fn ranks(&self) -> usize {
        self.ranks
    }

    /// Issues one step's operations on `stream` as one NCCL group: each send reads and each
    /// receive writes `op.bytes` bytes at the device address `address(op.task)` gives
    /// (the transfer's source buffer on a send, its destination on a receive).
    ///
    /// # Safety
    /// `stream` is a stream of [`NcclRank::context`]. Every op's peer is another rank of the
    /// job, and the peer posts the matching receive or send in the same step, in the same
    /// order ([`crate::exchange_steps::rank_steps`] lists them so). Every address is device
    /// memory of this communicator's GPU holding at least the op's
    /// bytes, which stays allocated (and, for a receive, unread and unwritten by other work)
    /// until the stream has passed the step.
    pub unsafe fn issue_step(
        &self,
        stream: &CudaStream,
        ops: &[RankOp],
        address: &dyn Fn(TaskId) -> u64,
    ) -> Result<(), BackendError> {
        self.ctx.bind_to_thread().map_err(|e| BackendError::Device {
            operation: format!("binding GPU {} for NCCL", self.ctx.ordinal()),
            reason: e.to_string(),
        })?;
        let stream = stream.cu_stream() as sys::cudaStream_t;
        result::group_start().map_err(|e| failed("ncclGroupStart", e))?;
        let mut outcome = Ok(());
        for op in ops {
            let at = address(op.task);
            // SAFETY: the caller's contract on `address`.
            let issued = unsafe {
                match op.direction {
                    Direction::Send => result::send(
                        at as *const std::ffi::c_void,
                        op.bytes,
                        sys::ncclDataType_t::ncclUint8,
                        op.peer as i32,
                        self.comm,
                        stream,
                    ),
                    Direction::Recv => result::recv(
                        at as *mut std::ffi::c_void,
                        op.bytes,
                        sys::ncclDataType_t::ncclUint8,
                        op.peer as i32,
                        self.comm,
                        stream,
                    ),
                }
            };
            if let Err(e) = issued {
                outcome = Err(failed(&format!("ncclSend/ncclRecv of {} with rank {}", op.task, op.peer), e));
                break;
            }
        }
        // A group once started must end, whatever failed inside it.
        let ended = result::group_end().map_err(|e| failed("ncclGroupEnd", e));
        outcome.and(ended.map(drop))
    }
}

impl crate::executor::Exchange for NcclRank {
    unsafe fn issue_step(
        &self,
        stream: &CudaStream,
        ops: &[RankOp],
        address: &dyn Fn(TaskId) -> u64,
    ) -> Result<(), String> {
        // SAFETY: the trait's contract is this method's.
        unsafe { NcclRank::issue_step(self, stream, ops, address) }.map_err(|e| e.to_string())
    }
}

impl Drop for NcclRank {
    fn drop(&mut self) {
        // Best effort: a drop cannot report a failure, and the communicator goes either way.
        let _ = self.ctx.bind_to_thread();
        // SAFETY: the communicator was made by `init` and is not used after this.
        let _ = unsafe { result::comm_destroy(self.comm) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The id's bytes go out and come back unchanged.
    #[test]
    fn an_id_is_its_bytes() {
        let bytes: [u8; 128] = std::array::from_fn(|i| (i * 7) as u8);
        assert_eq!(UniqueId::from_bytes(bytes).to_bytes(), bytes);
    }

    /// Where NCCL is missing (this machine), creating an id or a communicator is a typed
    /// error, not a panic.
    #[test]
    fn without_nccl_every_entry_point_is_unavailable() {
        if nccl_present() {
            return;
        }
        let e = UniqueId::new().unwrap_err();
        assert!(matches!(&e, BackendError::Unavailable(m) if m.contains("no NCCL library")), "{e}");
        let id = UniqueId::from_bytes([0; 128]);
        let e = NcclRank::init(&id, 0, 2, 0).unwrap_err();
        assert!(matches!(&e, BackendError::Unavailable(m) if m.contains("no NCCL library")), "{e}");
    }

    /// Two ranks, threads of one process on GPUs 0 and 1, exchange a block in one step each
    /// way; what arrives is bit-equal to what was sent.
    #[test]
    #[ignore = "needs two GPUs and NCCL"]
    fn two_gpus_exchange_a_block() {
        let id = UniqueId::new().expect("NCCL");
        let n = 1 << 20;
        let results: Vec<Vec<u8>> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..2usize)
                .map(|rank| {
                    scope.spawn(move || {
                        let comm = NcclRank::init(&id, rank, 2, rank).expect("joined, a GPU per rank");
                        let stream = comm.context().new_stream().expect("a stream");
                        let mine: Vec<u8> = (0..n).map(|i| (i * (rank + 3)) as u8).collect();
                        let src = stream.clone_htod(&mine).expect("uploaded");
                        let mut dst = stream.alloc_zeros::<u8>(n).expect("allocated");
                        let (s, _g1) = cudarc::driver::DevicePtr::device_ptr(&src, &stream);
                        let (d, _g2) = cudarc::driver::DevicePtrMut::device_ptr_mut(&mut dst, &stream);
                        let ops = [
                            RankOp { task: TaskId(0), peer: 1 - rank, direction: Direction::Send, bytes: n },
                            RankOp { task: TaskId(1), peer: 1 - rank, direction: Direction::Recv, bytes: n },
                        ];
                        // SAFETY: both buffers are this GPU's, n bytes, alive until synced.
                        unsafe { comm.issue_step(&stream, &ops, &|t| if t.0 == 0 { s } else { d }) }.expect("issued");
                        drop((_g1, _g2));
                        stream.synchronize().expect("done");
                        stream.clone_dtoh(&dst).expect("downloaded")
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().expect("a rank")).collect()
        });
        for (rank, got) in results.iter().enumerate() {
            let sent: Vec<u8> = (0..n).map(|i| (i * (1 - rank + 3)) as u8).collect();
            assert!(*got == sent, "rank {rank} received rank {}'s block", 1 - rank);
        }
    }
}

//! Messages between the ranks of a job: the [`Transport`] contract, and [`Local`], its
//! implementation over channels between threads of one process (for tests, and for a job of
//! one rank).
//!
//! A message is one block, tagged. Sending never waits for the receiver: the transport
//! keeps the block (a clone, which shares its elements) until it is delivered, so the sender
//! goes on with its tasks. Receiving takes whatever message has arrived first, from any rank;
//! the receiver names the block's type from the envelope, and the transport writes the bytes
//! straight into a new block of that type ([`HostTensor::from_ne_bytes_with`]). Messages from
//! one rank with one tag arrive in the order they were sent (MPI's non-overtaking rule).

use std::{
    sync::{
        Mutex,
        mpsc::{self, Receiver, RecvTimeoutError, Sender},
    },
    time::Duration,
};

use einsum_core::{DType, HostTensor, TensorType};
use thiserror::Error;

/// Who sent a message, its tag, and its length in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Envelope {
    /// The sending rank.
    pub from: usize,
    /// The tag the sender gave it.
    pub tag: u32,
    /// Its length in bytes.
    pub bytes: usize,
}

/// Why a message could not be sent or received.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TransportError {
    /// A rank outside the job.
    #[error("rank {rank} is not in a job of {ranks} ranks")]
    NoSuchRank {
        /// The rank named.
        rank: usize,
        /// The job's ranks.
        ranks: usize,
    },
    /// A rank that is gone: its end of the transport was dropped (it failed or finished).
    #[error("rank {rank} is gone: {why}")]
    Gone {
        /// The rank.
        rank: usize,
        /// What was being done.
        why: String,
    },
    /// A message the receiver did not expect, or whose length does not fit what it expected.
    #[error("unexpected message from rank {} (tag {}, {} bytes): {why}", envelope.from, envelope.tag, envelope.bytes)]
    Unexpected {
        /// The message's envelope.
        envelope: Envelope,
        /// Why it does not fit.
        why: String,
    },
    /// A call of the message-passing library that failed.
    #[error("{call} failed: {reason}")]
    Library {
        /// The call (`MPI_Isend`, ...).
        call: String,
        /// The library's error text.
        reason: String,
    },
    /// Sends not delivered in time.
    #[error("{pending} sends still not delivered after {waited:?}")]
    Undelivered {
        /// How many.
        pending: usize,
        /// How long the sender waited.
        waited: Duration,
    },
}

/// The type a receiver gives a message's block, from its envelope ([`Transport::receive`]).
pub type Shape<'a> = &'a dyn Fn(&Envelope) -> Result<(TensorType, DType), TransportError>;

/// Point-to-point messages between the ranks of one job (see the module docs).
///
/// Implementations: [`Local`] (threads of one process) and, with the `mpi` feature, the MPI
/// transport over the job's world communicator.
pub trait Transport: Send + Sync {
    /// This process's rank.
    fn rank(&self) -> usize;

    /// The number of ranks in the job.
    fn ranks(&self) -> usize;

    /// The name of the host this rank runs on (`MPI_Get_processor_name`): ranks with equal
    /// names share a machine.
    fn host(&self) -> String;

    /// Starts sending `block` to rank `to` with tag `tag` and returns without waiting for the
    /// receiver; the transport keeps `block` until it is delivered. A contiguous block is
    /// sent from its own memory ([`HostTensor::contiguous_ne_bytes`]).
    fn send(&self, to: usize, tag: u32, block: HostTensor) -> Result<(), TransportError>;

    /// Waits at most `wait` for a message from any rank. When one has arrived, `shape` gives
    /// the type and dtype of its block from its envelope (or refuses it), and the block is
    /// received into new memory of that type; `None` when nothing arrived in time. A message
    /// whose length is not its shape's is [`TransportError::Unexpected`].
    fn receive(&self, wait: Duration, shape: Shape<'_>) -> Result<Option<(Envelope, HostTensor)>, TransportError>;

    /// Waits at most `wait` until every block sent so far has been delivered (to the
    /// receiver's memory, or to the library's buffers).
    fn flush(&self, wait: Duration) -> Result<(), TransportError>;

    /// Ends the whole job now, on every rank, with exit code `code` (`MPI_Abort`): what a
    /// rank does when it cannot go on, so that no other rank waits for it.
    fn abort(&self, code: i32) -> !;
}

/// The [`Envelope`] of `block` sent by `from` with `tag`.
fn envelope(from: usize, tag: u32, block: &HostTensor) -> Envelope {
    Envelope { from, tag, bytes: block.size_bytes() }
}

/// Checks that `block` (the message of `envelope`) has the type `shape` gives it, and
/// returns it as that type's block; the in-process stand-in for receiving bytes into it.
fn reshape(envelope: Envelope, block: HostTensor, shape: Shape<'_>) -> Result<HostTensor, TransportError> {
    let (ty, dtype) = shape(&envelope)?;
    let want = ty.volume() * dtype.size_bytes();
    if want != envelope.bytes {
        return Err(TransportError::Unexpected { envelope, why: format!("expected {want} bytes for {ty} {dtype}") });
    }
    if block.dtype() == dtype && *block.ty() == ty {
        return Ok(block);
    }
    // The same bytes as another type: what a byte transport would deliver.
    let bytes = block.to_ne_bytes();
    HostTensor::from_ne_bytes_with(ty, dtype, |b| {
        b.copy_from_slice(&bytes);
        Ok(())
    })
}

/// A message in flight between threads: its tag, and the block.
type Message = (Envelope, HostTensor);

/// The ranks of a job as threads of one process: every rank's [`Local`] holds a sender to
/// every rank and its own receiver. Blocks move without a copy (a clone shares the elements).
/// Dropping a rank's transport makes sends to it fail with [`TransportError::Gone`] and,
/// once every sender to a rank is gone, its receives too.
pub struct Local {
    rank: usize,
    host: String,
    to: Vec<Sender<Message>>,
    inbox: Mutex<Receiver<Message>>,
}

impl Local {
    /// The transports of a job of `ranks` ranks, rank `r`'s at index `r`.
    pub fn job(ranks: usize) -> Vec<Local> {
        let (senders, receivers): (Vec<_>, Vec<_>) = (0..ranks).map(|_| mpsc::channel()).unzip();
        receivers
            .into_iter()
            .enumerate()
            .map(|(rank, inbox)| Local {
                rank,
                host: "localhost".into(),
                to: senders.clone(),
                inbox: Mutex::new(inbox),
            })
            .collect()
    }

    /// The same rank, saying it runs on `host` ([`Transport::host`]; `localhost` by
    /// default): a job of threads standing for ranks on several machines.
    #[must_use]
    pub fn on_host(mut self, host: &str) -> Self {
        self.host = host.into();
        self
    }
}

impl Transport for Local {
    fn rank(&self) -> usize {
        self.rank
    }

    fn ranks(&self) -> usize {
        self.to.len()
    }

    fn host(&self) -> String {
        self.host.clone()
    }

    fn send(&self, to: usize, tag: u32, block: HostTensor) -> Result<(), TransportError> {
        let sender = self.to.get(to).ok_or(TransportError::NoSuchRank { rank: to, ranks: self.to.len() })?;
        sender
            .send((envelope(self.rank, tag, &block), block))
            .map_err(|_| TransportError::Gone { rank: to, why: format!("sending tag {tag}") })
    }

    fn receive(&self, wait: Duration, shape: Shape<'_>) -> Result<Option<(Envelope, HostTensor)>, TransportError> {
        let inbox = self.inbox.lock().unwrap_or_else(|e| e.into_inner());
        match inbox.recv_timeout(wait) {
            Ok((envelope, block)) => Ok(Some((envelope, reshape(envelope, block, shape)?))),
            Err(RecvTimeoutError::Timeout) => Ok(None),
            Err(RecvTimeoutError::Disconnected) => {
                Err(TransportError::Gone { rank: self.rank, why: "every sender to this rank is gone".into() })
            }
        }
    }

    /// A channel delivers at once.
    fn flush(&self, _: Duration) -> Result<(), TransportError> {
        Ok(())
    }

    /// Threads share one process: the process ends.
    fn abort(&self, code: i32) -> ! {
        std::process::exit(code)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(n: usize, seed: u64) -> HostTensor {
        HostTensor::random(TensorType::zero_bounded(&[n]), DType::F32, seed)
    }

    #[test]
    fn a_block_reaches_its_rank_with_its_envelope() {
        let job = Local::job(3);
        assert_eq!((job[2].rank(), job[2].ranks()), (2, 3));
        let x = block(5, 1);
        job[0].send(2, 7, x.clone()).unwrap();
        let shape = |e: &Envelope| {
            assert_eq!(*e, Envelope { from: 0, tag: 7, bytes: 20 });
            Ok((TensorType::zero_bounded(&[5]), DType::F32))
        };
        assert_eq!(job[2].receive(Duration::from_millis(100), &shape).unwrap(), Some((envelope(0, 7, &x), x)));
        assert_eq!(job[1].receive(Duration::from_millis(1), &shape).unwrap(), None);
        job[0].flush(Duration::ZERO).unwrap();
    }

    /// The receiver's shape decides the block's type (the same bytes), and a length that does
    /// not fit it is refused with the envelope.
    #[test]
    fn the_receiver_shapes_the_block() {
        let job = Local::job(2);
        let x = block(6, 2);
        job[1].send(0, 1, x.clone()).unwrap();
        job[1].send(0, 2, x.clone()).unwrap();
        let as_matrix = |_: &Envelope| Ok((TensorType::zero_bounded(&[2, 3]), DType::F32));
        let (_, m) = job[0].receive(Duration::from_millis(100), &as_matrix).unwrap().unwrap();
        assert_eq!((m.ty().shape(), m.to_f32()), (vec![2, 3], x.to_f32()));
        let too_big = |_: &Envelope| Ok((TensorType::zero_bounded(&[7]), DType::F32));
        let e = job[0].receive(Duration::from_millis(100), &too_big).unwrap_err();
        assert!(
            matches!(e, TransportError::Unexpected { envelope: Envelope { from: 1, tag: 2, bytes: 24 }, .. }),
            "{e}"
        );
        assert!(e.to_string().contains("expected 28 bytes"), "{e}");
    }

    #[test]
    fn a_rank_outside_the_job_or_gone_is_an_error() {
        let mut job = Local::job(2);
        assert_eq!(job[0].send(2, 0, block(1, 0)), Err(TransportError::NoSuchRank { rank: 2, ranks: 2 }));
        let last = job.pop().unwrap();
        drop(job);
        assert!(matches!(last.send(0, 3, block(1, 0)), Err(TransportError::Gone { rank: 0, .. })));
        let any = |_: &Envelope| Ok((TensorType::zero_bounded(&[1]), DType::F32));
        // Rank 1 still holds a sender to itself, so it waits in vain rather than failing.
        assert_eq!(last.receive(Duration::from_millis(1), &any), Ok(None));
    }
}

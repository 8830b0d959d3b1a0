//! The [`Transport`] of an MPI job: point-to-point messages over the world communicator of
//! the MPI library the process was launched with (`mpirun`), through its C API.
//!
//! # Design
//! - Sends are `MPI_Isend` straight from the block's memory (a contiguous block is not
//!   copied; a strided view is compacted once). The transport keeps the block with its
//!   requests until `MPI_Test` says they completed, so the memory outlives the send.
//! - Receives match with `MPI_Improbe` (any source, any tag), so that the receiver learns the
//!   envelope before it names the block's type, then `MPI_Imrecv` straight into the new
//!   block's memory ([`HostTensor::from_ne_bytes_with`]).
//! - Nothing blocks inside MPI: every wait is a loop of tests that releases the lock between
//!   tries and backs off from spinning to short sleeps, so workers sending and the thread
//!   receiving share the library, and ranks oversubscribed on a few cores still progress.
//!   One lock around every call makes `MPI_THREAD_SERIALIZED` enough.
//! - MPI counts are `int`: a block over [`CHUNK_BYTES`] goes as a head message (its tag and
//!   length, on a tag of its own, the library's largest) followed by its chunks, messages of
//!   the block's tag. The receiver learns the block's whole length from the head before it
//!   names the block's type, so a misfit is refused (and all its chunks drained) as surely
//!   as for a block of one message. MPI never lets a message overtake an earlier one of the
//!   same sender that matches the same receive, and a probe of any tag matches every
//!   message: so a head arrives in its place among its sender's messages, and the chunks
//!   that follow it are the next messages of its tag from its sender.
//! - The world communicator returns errors instead of aborting (`MPI_ERRORS_RETURN`), so a
//!   failed call is a [`TransportError::Library`] naming it.

use std::{
    ffi::c_void,
    sync::{Mutex, MutexGuard},
    thread,
    time::{Duration, Instant},
};

use einsum_core::HostTensor;
use mpi::{
    Threading,
    environment::Universe,
    ffi::{self, MPI_Message, MPI_Request, MPI_Status},
};

use crate::{Envelope, Shape, Transport, TransportError};

/// The most bytes one MPI message carries (MPI counts are `int`); larger blocks are split.
pub const CHUNK_BYTES: usize = 1 << 30;

/// How long a receiver waits for the chunks of a block whose head arrived (or for a matched
/// message to complete): the sender posted them all at once, so only a failed sender makes
/// them late.
const CHUNK_PATIENCE: Duration = Duration::from_secs(60);

/// The transport of an MPI job (see the module docs). Creating it initialises MPI; dropping
/// it waits for the pending sends and finalises MPI, so a process holds one, for its life.
pub struct MpiTransport {
    /// The sends not known to be complete, behind the lock every MPI call takes.
    pending: Mutex<Vec<Pending>>,
    rank: usize,
    ranks: usize,
    /// The largest tag a block may have: one below the library's largest (`MPI_TAG_UB`),
    /// which heads of chunked blocks use.
    tag_ub: u32,
    /// The tag of the heads of chunked blocks (`MPI_TAG_UB`).
    head_tag: i32,
    /// The bytes of one message at most ([`CHUNK_BYTES`], lower in tests).
    chunk: usize,
    /// The MPI environment: finalised when dropped, after everything else.
    universe: Option<Universe>,
}

// SAFETY: the raw MPI handles (requests) live behind `pending`'s lock, and every MPI call
// is made holding that lock, with MPI initialised for at least MPI_THREAD_SERIALIZED; the
// blocks kept with the requests are shared, immutable host memory.
unsafe impl Send for MpiTransport {}
// SAFETY: as above.
unsafe impl Sync for MpiTransport {}

/// A send in flight: its requests (one per message) and the memory they read.
struct Pending {
    /// The requests not known to be complete.
    requests: Vec<MPI_Request>,
    /// The block, kept until every request completed.
    _block: HostTensor,
    /// The head of a chunked block (its tag and length), boxed so that it stays in place.
    _head: Option<Box<[u64; 2]>>,
}

/// The bytes of a chunked block's head: its tag and its length, as two native `u64`s.
const HEAD_BYTES: usize = 16;

/// The library's text for error code `code`.
fn error_text(code: i32) -> String {
    let mut buf = vec![0u8; ffi::MPI_MAX_ERROR_STRING as usize + 1];
    let mut len = 0;
    // SAFETY: the buffer holds MPI_MAX_ERROR_STRING characters, as the call requires.
    let got = unsafe { ffi::MPI_Error_string(code, buf.as_mut_ptr().cast(), &mut len) };
    if got != ffi::MPI_SUCCESS as i32 {
        return format!("MPI error code {code}");
    }
    buf.truncate(len.max(0) as usize);
    String::from_utf8_lossy(&buf).into_owned()
}

/// `Ok` for `MPI_SUCCESS`, the library's error naming `call` otherwise.
fn check(call: &str, code: i32) -> Result<(), TransportError> {
    if code == ffi::MPI_SUCCESS as i32 {
        Ok(())
    } else {
        Err(TransportError::Library { call: call.into(), reason: error_text(code) })
    }
}

/// The world communicator.
fn world() -> ffi::MPI_Comm {
    // SAFETY: a constant of the library, valid once MPI is initialised (the transport exists).
    unsafe { ffi::RSMPI_COMM_WORLD }
}

/// A pause between tries that grows from a spin to 200 µs.
struct Backoff(u32);

impl Backoff {
    fn pause(&mut self) {
        if self.0 < 16 {
            std::hint::spin_loop();
        } else {
            thread::sleep(Duration::from_micros(u64::from((self.0 - 15).min(20)) * 10));
        }
        self.0 = self.0.saturating_add(1);
    }
}

impl MpiTransport {
    /// Initialises MPI (`MPI_Init_thread`, asking for `MPI_THREAD_MULTIPLE` and needing
    /// `MPI_THREAD_SERIALIZED`) and joins the world communicator. A process started without
    /// `mpirun` is a job of one rank. Refused when MPI is already initialised in this process
    /// or offers too low a thread level.
    pub fn init() -> Result<Self, TransportError> {
        Self::with_chunk_bytes(CHUNK_BYTES)
    }

    /// [`MpiTransport::init`] splitting blocks into messages of at most `chunk` bytes (tests
    /// of the split use small chunks; a block of more than `i32::MAX` bytes needs it).
    #[doc(hidden)]
    pub fn with_chunk_bytes(chunk: usize) -> Result<Self, TransportError> {
        let library = |reason: &str| TransportError::Library { call: "MPI_Init_thread".into(), reason: reason.into() };
        let (universe, level) =
            mpi::initialize_with_threading(Threading::Multiple).ok_or_else(|| library("MPI is already initialised"))?;
        if level < Threading::Serialized {
            return Err(library(&format!("the library offers {level:?} threading; the transport needs Serialized")));
        }
        let (mut rank, mut ranks) = (0, 0);
        // SAFETY: MPI is initialised; the outputs are plain integers.
        unsafe {
            check("MPI_Comm_set_errhandler", ffi::MPI_Comm_set_errhandler(world(), ffi::RSMPI_ERRORS_RETURN))?;
            check("MPI_Comm_rank", ffi::MPI_Comm_rank(world(), &mut rank))?;
            check("MPI_Comm_size", ffi::MPI_Comm_size(world(), &mut ranks))?;
        }
        let mut value: *mut i32 = std::ptr::null_mut();
        let mut found = 0;
        // SAFETY: MPI_TAG_UB's attribute value is a pointer to an int owned by the library.
        let library_ub = unsafe {
            check(
                "MPI_Comm_get_attr",
                ffi::MPI_Comm_get_attr(
                    world(),
                    ffi::MPI_TAG_UB as i32,
                    (&mut value as *mut *mut i32).cast::<c_void>(),
                    &mut found,
                ),
            )?;
            if found != 0 && !value.is_null() { (*value).max(0) as u32 } else { 32767 }
        };
        Ok(MpiTransport {
            pending: Mutex::new(Vec::new()),
            rank: rank as usize,
            ranks: ranks as usize,
            tag_ub: library_ub.saturating_sub(1),
            head_tag: library_ub as i32,
            chunk: chunk.clamp(1, i32::MAX as usize),
            universe: Some(universe),
        })
    }

    /// The largest tag a block may have: one below the largest this job's library accepts
    /// (which the transport keeps for the heads of chunked blocks).
    pub fn tag_bound(&self) -> u32 {
        self.tag_ub
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Pending>> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Drops the pending sends whose requests all completed (holding the lock).
    fn progress(pending: &mut Vec<Pending>) -> Result<(), TransportError> {
        let mut failure = None;
        pending.retain_mut(|p| {
            p.requests.retain_mut(|r| {
                let mut done = 0;
                // SAFETY: `r` is a live request of this transport (completed ones are removed,
                // and MPI_Test sets a completed request to MPI_REQUEST_NULL).
                let code = unsafe { ffi::MPI_Test(r, &mut done, ffi::RSMPI_STATUS_IGNORE) };
                if code != ffi::MPI_SUCCESS as i32 {
                    failure.get_or_insert(code);
                    return false;
                }
                done == 0
            });
            !p.requests.is_empty()
        });
        failure.map_or(Ok(()), |code| check("MPI_Test", code))
    }

    /// Waits (testing, not blocking in MPI) until receive `request` completes or `deadline`
    /// passes, progressing the pending sends between tests.
    ///
    /// The request writes into memory its caller frees on return, so no error leaves it
    /// live: a receive that is late, or whose wait meets a failed send, is cancelled and
    /// settled ([`MpiTransport::settle`]) before the error is returned.
    fn wait_request(&self, request: &mut MPI_Request, deadline: Instant, what: &str) -> Result<(), TransportError> {
        let mut backoff = Backoff(0);
        loop {
            let mut done = 0;
            let sends = {
                let mut pending = self.lock();
                // SAFETY: a live request of this receive.
                let code = unsafe { ffi::MPI_Test(request, &mut done, ffi::RSMPI_STATUS_IGNORE) };
                // A failed test completes the request (MPI frees it and reports the error).
                check("MPI_Test", code)?;
                Self::progress(&mut pending)
            };
            if done != 0 {
                return sends;
            }
            let late = Instant::now() >= deadline;
            if sends.is_err() || late {
                self.settle(request);
                sends?;
                return Err(TransportError::Library {
                    call: "MPI_Imrecv".into(),
                    reason: format!("{what}: not complete in time"),
                });
            }
            backoff.pause();
        }
    }

    /// Cancels receive `request` and tests it until it completes (cancelled, or received
    /// after all: MPI may refuse to cancel a transfer under way), without a deadline, since
    /// returning earlier would leave the library writing into freed memory. Errors are
    /// dropped: the caller already returns one.
    fn settle(&self, request: &mut MPI_Request) {
        {
            let _lock = self.lock();
            // SAFETY: a live request of this receive.
            unsafe { ffi::MPI_Cancel(request) };
        }
        let mut backoff = Backoff(0);
        loop {
            let mut done = 0;
            {
                let _lock = self.lock();
                // SAFETY: a live request of this receive; a completed request becomes
                // MPI_REQUEST_NULL.
                let code = unsafe { ffi::MPI_Test(request, &mut done, ffi::RSMPI_STATUS_IGNORE) };
                // A failed test completes (frees) the request too.
                if done != 0 || code != ffi::MPI_SUCCESS as i32 {
                    return;
                }
            }
            backoff.pause();
        }
    }

    /// A matched message from `source` with `tag` (any, with the library's wildcards), if
    /// one has arrived: its handle, sender, tag and byte count.
    fn probe(&self, source: i32, tag: i32) -> Result<Option<(MPI_Message, Envelope)>, TransportError> {
        let mut pending = self.lock();
        Self::progress(&mut pending)?;
        let mut found = 0;
        // SAFETY: MPI_Message and MPI_Status are plain handles/structs the call fills.
        let mut message: MPI_Message = unsafe { std::mem::zeroed() };
        let mut status: MPI_Status = unsafe { std::mem::zeroed() };
        // SAFETY: the outputs are valid for writes; the communicator is the world's.
        check("MPI_Improbe", unsafe { ffi::MPI_Improbe(source, tag, world(), &mut found, &mut message, &mut status) })?;
        if found == 0 {
            return Ok(None);
        }
        let mut count = 0;
        // SAFETY: `status` was filled by the matching probe.
        check("MPI_Get_count", unsafe { ffi::MPI_Get_count(&status, ffi::RSMPI_UINT8_T, &mut count) })?;
        let envelope =
            Envelope { from: status.MPI_SOURCE as usize, tag: status.MPI_TAG as u32, bytes: count.max(0) as usize };
        Ok(Some((message, envelope)))
    }

    /// Receives matched `message` into `into` (exactly its length).
    fn receive_into(&self, mut message: MPI_Message, into: &mut [u8], what: &str) -> Result<(), TransportError> {
        // SAFETY: MPI_Request is a plain handle the call fills.
        let mut request: MPI_Request = unsafe { std::mem::zeroed() };
        {
            let _lock = self.lock();
            // SAFETY: `into` is valid for `into.len()` bytes until the request completes,
            // which `wait_request` waits for (or, on an error, cancels and settles) before
            // this returns.
            check("MPI_Imrecv", unsafe {
                ffi::MPI_Imrecv(
                    into.as_mut_ptr().cast(),
                    into.len() as i32,
                    ffi::RSMPI_UINT8_T,
                    &mut message,
                    &mut request,
                )
            })?;
        }
        self.wait_request(&mut request, Instant::now() + CHUNK_PATIENCE, what)
    }

    /// The next matched message from `from` with `tag` (a block's next chunk), waiting at
    /// most [`CHUNK_PATIENCE`].
    fn next_chunk(&self, from: usize, tag: u32) -> Result<(MPI_Message, Envelope), TransportError> {
        let deadline = Instant::now() + CHUNK_PATIENCE;
        let mut backoff = Backoff(0);
        loop {
            if let Some(m) = self.probe(from as i32, tag as i32)? {
                return Ok(m);
            }
            if Instant::now() >= deadline {
                return Err(TransportError::Gone {
                    rank: from,
                    why: format!("the rest of the block of tag {tag} never came"),
                });
            }
            backoff.pause();
        }
    }

    /// Receives the head of a chunked block (matched `message`, whose envelope is `head`)
    /// and returns the block's envelope: its sender, tag and whole length.
    fn receive_head(&self, message: MPI_Message, head: Envelope) -> Result<Envelope, TransportError> {
        let what = format!("a chunked block's head from rank {}", head.from);
        if head.bytes != HEAD_BYTES {
            self.receive_into(message, &mut vec![0u8; head.bytes], &what)?;
            let why = format!("the tag of chunked blocks' heads, whose heads have {HEAD_BYTES} bytes");
            return Err(TransportError::Unexpected { envelope: head, why });
        }
        let mut words = [0u64; 2];
        let mut bytes = [0u8; HEAD_BYTES];
        self.receive_into(message, &mut bytes, &what)?;
        for (w, b) in words.iter_mut().zip(bytes.chunks_exact(8)) {
            *w = u64::from_ne_bytes(b.try_into().expect("8 bytes"));
        }
        let [tag, total] = words;
        match (u32::try_from(tag), usize::try_from(total)) {
            (Ok(tag), Ok(bytes)) => Ok(Envelope { from: head.from, tag, bytes }),
            _ => Err(TransportError::Unexpected { envelope: head, why: format!("a head of tag {tag}, {total} bytes") }),
        }
    }

    /// Receives the chunks of the block of `envelope` (whose head was received), in order,
    /// into `into` (its whole length), or drains them when `into` is `None`. The chunks are
    /// the next messages of the block's tag from its sender, whatever their size: the
    /// sender's chunk size is not the receiver's business, only that they add up.
    fn receive_chunks(
        &self,
        envelope: Envelope,
        mut into: Option<&mut [u8]>,
        what: &str,
    ) -> Result<(), TransportError> {
        let mut at = 0;
        while at < envelope.bytes {
            let (next, e) = self.next_chunk(envelope.from, envelope.tag)?;
            let fits = e.bytes > 0 && e.bytes <= envelope.bytes - at;
            match into.as_deref_mut() {
                Some(into) if fits => self.receive_into(next, &mut into[at..at + e.bytes], what)?,
                _ => self.receive_into(next, &mut vec![0u8; e.bytes], what)?,
            }
            if !fits {
                let why = format!("a chunk at byte {at} of a block of {} bytes", envelope.bytes);
                return Err(TransportError::Unexpected { envelope: e, why });
            }
            at += e.bytes;
        }
        Ok(())
    }
}

impl Transport for MpiTransport {
    fn rank(&self) -> usize {
        self.rank
    }

    fn ranks(&self) -> usize {
        self.ranks
    }

    fn host(&self) -> String {
        let _lock = self.lock();
        // SAFETY: a constant of the library.
        let max = unsafe { ffi::RSMPI_MAX_PROCESSOR_NAME } as usize;
        let mut buf = vec![0u8; max + 1];
        let mut len = 0;
        // SAFETY: the buffer holds MPI_MAX_PROCESSOR_NAME characters, as the call requires.
        let code = unsafe { ffi::MPI_Get_processor_name(buf.as_mut_ptr().cast(), &mut len) };
        if code != ffi::MPI_SUCCESS as i32 {
            return format!("(unknown host of rank {})", self.rank);
        }
        buf.truncate(len.max(0) as usize);
        String::from_utf8_lossy(&buf).into_owned()
    }

    fn send(&self, to: usize, tag: u32, block: HostTensor) -> Result<(), TransportError> {
        if to >= self.ranks {
            return Err(TransportError::NoSuchRank { rank: to, ranks: self.ranks });
        }
        if tag > self.tag_ub {
            return Err(TransportError::Library {
                call: "MPI_Isend".into(),
                reason: format!("tag {tag} is above this library's largest tag, {}", self.tag_ub),
            });
        }
        // A strided view is gathered once; anything else goes from its own memory.
        let block = if block.contiguous_ne_bytes().is_some() { block } else { block.compact() };
        let bytes = block.contiguous_ne_bytes().expect("a compact block is contiguous");
        // A block of one message (an empty one too, so that the receiver sees it), or a head
        // followed by the chunks.
        let head = (bytes.len() > self.chunk).then(|| Box::new([u64::from(tag), bytes.len() as u64]));
        let mut messages: Vec<(*const u8, usize, i32)> = Vec::new();
        if let Some(head) = &head {
            messages.push((head.as_ptr().cast(), HEAD_BYTES, self.head_tag));
            messages.extend(bytes.chunks(self.chunk).map(|c| (c.as_ptr(), c.len(), tag as i32)));
        } else {
            messages.push((bytes.as_ptr(), bytes.len(), tag as i32));
        }
        let mut pending = self.lock();
        let mut requests = Vec::new();
        for (at, len, tag) in messages {
            // SAFETY: MPI_Request is a plain handle the call fills.
            let mut request: MPI_Request = unsafe { std::mem::zeroed() };
            // SAFETY: the memory belongs to `block` or to the boxed `head`, both kept with
            // the request (in `pending`) until MPI_Test reports the send complete; the count
            // is at most the chunk size, which fits an int.
            let code = unsafe {
                ffi::MPI_Isend(at.cast(), len as i32, ffi::RSMPI_UINT8_T, to as i32, tag, world(), &mut request)
            };
            if code != ffi::MPI_SUCCESS as i32 {
                // The messages already posted still read the memory: keep it with them.
                pending.push(Pending { requests, _block: block.clone(), _head: head });
                return check("MPI_Isend", code);
            }
            requests.push(request);
        }
        pending.push(Pending { requests, _block: block.clone(), _head: head });
        Self::progress(&mut pending)
    }

    fn receive(&self, wait: Duration, shape: Shape<'_>) -> Result<Option<(Envelope, HostTensor)>, TransportError> {
        let deadline = Instant::now() + wait;
        let mut backoff = Backoff(0);
        // SAFETY: constants of the library.
        let (any_source, any_tag) = unsafe { (ffi::RSMPI_ANY_SOURCE, ffi::RSMPI_ANY_TAG) };
        let (message, first) = loop {
            if let Some(m) = self.probe(any_source, any_tag)? {
                break m;
            }
            if Instant::now() >= deadline {
                return Ok(None);
            }
            backoff.pause();
        };
        // The envelope of the whole block: the message's own, or the one its head gives.
        let (envelope, chunked) =
            if first.tag == self.head_tag as u32 { (self.receive_head(message, first)?, true) } else { (first, false) };
        let what = format!("the block of tag {} from rank {}", envelope.tag, envelope.from);
        let fits = shape(&envelope).and_then(|(ty, dtype)| {
            let want = ty.volume() * dtype.size_bytes();
            if envelope.bytes == want {
                Ok((ty, dtype))
            } else {
                Err(TransportError::Unexpected { envelope, why: format!("expected {want} bytes for {ty} {dtype}") })
            }
        });
        let (ty, dtype) = match fits {
            Ok(f) => f,
            Err(e) => {
                // The block is matched: receive it anyway, so that it does not linger.
                if chunked {
                    self.receive_chunks(envelope, None, &what)?;
                } else {
                    self.receive_into(message, &mut vec![0u8; envelope.bytes], &what)?;
                }
                return Err(e);
            }
        };
        let block = HostTensor::from_ne_bytes_with(ty, dtype, |bytes| {
            debug_assert_eq!(bytes.len(), envelope.bytes);
            if chunked {
                self.receive_chunks(envelope, Some(bytes), &what)
            } else {
                self.receive_into(message, bytes, &what)
            }
        })?;
        Ok(Some((envelope, block)))
    }

    fn flush(&self, wait: Duration) -> Result<(), TransportError> {
        let deadline = Instant::now() + wait;
        let mut backoff = Backoff(0);
        loop {
            let left = {
                let mut pending = self.lock();
                Self::progress(&mut pending)?;
                pending.len()
            };
            if left == 0 {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(TransportError::Undelivered { pending: left, waited: wait });
            }
            backoff.pause();
        }
    }

    fn abort(&self, code: i32) -> ! {
        let _lock = self.lock();
        // SAFETY: MPI is initialised; MPI_Abort ends every process of the job.
        unsafe { ffi::MPI_Abort(world(), code) };
        std::process::exit(code)
    }
}

impl Drop for MpiTransport {
    /// Waits (a minute at most) for the pending sends, then finalises MPI.
    fn drop(&mut self) {
        let _ = self.flush(Duration::from_secs(60));
        drop(self.universe.take());
    }
}

//! Memory a backend lends to one host tensor: a slot of an arena it planned itself.
//!
//! # Design
//! A [`HostTensor`](crate::HostTensor) normally owns its elements in a vector from the heap.
//! A backend that plans its buffers ahead (one arena per device, offsets assigned from the
//! task graph's lifetimes) instead hands the tensor a [`Lease`]: a pointer into the arena,
//! its length, and a keep-alive handle. The tensor's elements are written into the slot once,
//! while it is built, and only read afterwards. The handle is an `Arc` the backend made for
//! this lease alone: while any tensor built on the lease (or any view of it) lives, the
//! handle lives, so the backend, holding a `Weak` to it, can tell when the slot is free again
//! ([`Lease::keeper`]) and never writes memory that a tensor still reads.

use std::{
    any::Any,
    fmt,
    ptr::NonNull,
    sync::{Arc, Weak},
};

/// The alignment every lease's memory has (a cache line), enough for every dtype.
pub const LEASE_ALIGN: usize = 64;

/// A region of memory lent to the tensor built on it (see the module docs).
pub struct Lease {
    ptr: NonNull<u8>,
    bytes: usize,
    keeper: Arc<dyn Any + Send + Sync>,
}

// SAFETY: a lease is the exclusive right to its bytes (the contract of `Lease::new`); the
// tensor built on it writes them once, before it is shared, and only reads them afterwards.
unsafe impl Send for Lease {}
// SAFETY: as above: shared access only reads.
unsafe impl Sync for Lease {}

impl Lease {
    /// Lends the `bytes` bytes at `ptr`. `keeper` keeps the memory allocated; the lease and
    /// every tensor built on it hold it. `None` when `ptr` is not aligned to [`LEASE_ALIGN`].
    ///
    /// # Safety
    /// The bytes are initialised (zeroed, say), stay allocated while `keeper` lives, and nothing but the tensor built on
    /// this lease reads or writes them while the lease or that tensor (or a view of it) lives:
    /// the lender waits until its `Weak` to `keeper` no longer upgrades before lending any of
    /// them again.
    pub unsafe fn new(ptr: NonNull<u8>, bytes: usize, keeper: Arc<dyn Any + Send + Sync>) -> Option<Self> {
        (ptr.as_ptr() as usize).is_multiple_of(LEASE_ALIGN).then_some(Self { ptr, bytes, keeper })
    }

    /// The number of bytes lent.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// A weak handle to the keeper: it no longer upgrades once the lease and everything built
    /// on it are gone.
    pub fn keeper(&self) -> Weak<dyn Any + Send + Sync> {
        Arc::downgrade(&self.keeper)
    }

    /// The first `len` elements of type `T`, read-only.
    ///
    /// # Safety
    /// `len * size_of::<T>() <= self.bytes()` and `T` is a plain number type, for which every
    /// (initialised) bit pattern is a value.
    pub(crate) unsafe fn slice<T>(&self, len: usize) -> &[T] {
        debug_assert!(len * size_of::<T>() <= self.bytes);
        // SAFETY: the caller's contract and `Lease::new`'s (aligned, allocated, exclusive).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().cast::<T>(), len) }
    }

    /// The first `len` elements of type `T`, to write while the tensor is built.
    ///
    /// # Safety
    /// As [`Lease::slice`], for the tensor being built on this lease (nothing reads it yet).
    pub(crate) unsafe fn slice_mut<T>(&mut self, len: usize) -> &mut [T] {
        debug_assert!(len * size_of::<T>() <= self.bytes);
        // SAFETY: as above; `&mut self` makes this the only access through the lease.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr().cast::<T>(), len) }
    }
}

impl fmt::Debug for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lease").field("ptr", &self.ptr).field("bytes", &self.bytes).finish_non_exhaustive()
    }
}

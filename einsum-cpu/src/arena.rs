//! The arenas of a prepared executable: one zeroed allocation per device, sized by the
//! [`ArenaPlan`], allocated once and reused by every run. A block the plan places is built in
//! its slot ([`einsum_core::Lease`]) instead of a fresh heap allocation.
//!
//! # Design
//! The plan proves, from the dependencies, that a slot's earlier occupant is dead before the
//! next is written. The arena also checks it where it is cheap to: every lease it hands out
//! carries a keeper of its own, which lives while any tensor built on the lease (a view, a
//! clone a kernel kept) does; a slot is lent only when the keepers of every slot sharing a
//! byte with it (itself included, from an earlier run or another clone of the executable
//! running at the same time) are gone, all under one lock. When one is not, the block comes
//! from the heap instead and the run counts a fallback: memory is never written while a
//! tensor reads it, whatever a kernel does with its arguments.

use std::{
    alloc::{Layout, alloc_zeroed, dealloc},
    any::Any,
    ptr::NonNull,
    sync::{Arc, Mutex, Weak},
};

use einsum_core::{LEASE_ALIGN, Lease, taskgraph::BufferId};

use crate::arena_plan::ArenaPlan;

/// One device's arena: zeroed memory, aligned to [`LEASE_ALIGN`].
struct DeviceArena {
    ptr: NonNull<u8>,
    layout: Option<Layout>,
}

// SAFETY: the arena is plain memory; who may touch which bytes is decided by the leases.
unsafe impl Send for DeviceArena {}
// SAFETY: as above.
unsafe impl Sync for DeviceArena {}

impl DeviceArena {
    /// `bytes` zeroed bytes (none for 0). Fails like `Vec` when the allocation fails.
    fn new(bytes: usize) -> Self {
        if bytes == 0 {
            return Self { ptr: NonNull::<u64>::dangling().cast(), layout: None };
        }
        let layout = Layout::from_size_align(bytes, LEASE_ALIGN).expect("arena sizes are far below isize::MAX");
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        let Some(ptr) = NonNull::new(ptr) else { std::alloc::handle_alloc_error(layout) };
        Self { ptr, layout: Some(layout) }
    }
}

impl Drop for DeviceArena {
    fn drop(&mut self) {
        if let Some(layout) = self.layout {
            // SAFETY: allocated in `new` with this layout; nothing refers to it any more (every
            // lease's keeper holds the arena).
            unsafe { dealloc(self.ptr.as_ptr(), layout) }
        }
    }
}

/// The arenas of one executable, shared by its clones.
pub(crate) struct Arenas {
    plan: ArenaPlan,
    devices: Vec<Arc<DeviceArena>>,
    /// Per buffer, the keeper of the last lease of its slot.
    keepers: Mutex<Vec<Option<Weak<dyn Any + Send + Sync>>>>,
}

/// Where a block the backend writes is built.
pub(crate) enum Place {
    /// On the heap: the plan gives it no slot.
    Heap,
    /// In its slot.
    Slot(Lease),
    /// On the heap although the plan gives it a slot: a tensor still reads a slot sharing
    /// bytes with it.
    Busy,
}

impl Place {
    /// The lease to build in, if any.
    pub(crate) fn lease(self) -> Option<Lease> {
        match self {
            Place::Slot(lease) => Some(lease),
            Place::Heap | Place::Busy => None,
        }
    }
}

impl Arenas {
    /// Allocates the arenas `plan` sizes.
    pub(crate) fn new(plan: ArenaPlan) -> Self {
        let devices = plan.device_bytes.iter().map(|&b| Arc::new(DeviceArena::new(b))).collect();
        let keepers = Mutex::new(vec![None; plan.slots.len()]);
        Self { plan, devices, keepers }
    }

    /// The plan.
    pub(crate) fn plan(&self) -> &ArenaPlan {
        &self.plan
    }

    /// Where to build buffer `b` (on `device`): in its slot when the plan gives it one and
    /// every slot sharing bytes with it is free.
    pub(crate) fn place(&self, b: BufferId, device: usize) -> Place {
        let Some(slot) = self.plan.slots[b.0 as usize] else { return Place::Heap };
        let arena = &self.devices[device];
        let mut keepers = self.keepers.lock().unwrap_or_else(|e| e.into_inner());
        let live = |o: &BufferId| keepers[o.0 as usize].as_ref().is_some_and(|k| k.strong_count() > 0);
        if live(&b) || self.plan.overlaps[b.0 as usize].iter().any(live) {
            return Place::Busy;
        }
        let keeper: Arc<dyn Any + Send + Sync> = Arc::clone(arena) as Arc<dyn Any + Send + Sync>;
        // One keeper per lease: a new `Arc` wrapping the arena's.
        let keeper: Arc<dyn Any + Send + Sync> = Arc::new(keeper);
        keepers[b.0 as usize] = Some(Arc::downgrade(&keeper));
        // SAFETY: the slot lies in the arena (the plan sized it), which the keeper keeps
        // allocated and which is zeroed at allocation; no tensor built on an overlapping
        // slot lives (checked above, under the lock that every lease takes).
        let lease = unsafe { Lease::new(arena.ptr.add(slot.offset), slot.bytes, keeper) };
        // Every offset is a multiple of the alignment of the arena's base.
        lease.map_or(Place::Busy, Place::Slot)
    }
}

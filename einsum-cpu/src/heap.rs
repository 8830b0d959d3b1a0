//! Keeping freed buffers in the process heap, so that a run reuses the memory of the run
//! before instead of faulting fresh pages in.
//!
//! # Design
//! Every task writes a new block and every transient block is freed after its last reader,
//! so a run allocates and frees the same sizes over and over. glibc's `malloc` serves
//! blocks above its mmap threshold (128 KiB at first) with fresh `mmap`s and returns freed
//! heap tops to the kernel above its trim threshold: each run then pays a page fault (and
//! the kernel's zeroing) for every 4 KiB it writes, measured at 17% of a run's time. Raising
//! both thresholds once per process makes the allocator the pool: freed blocks stay mapped
//! and the next run's blocks of the same sizes reuse them. The task graph's memory plan
//! bounds what stays held (its peak per device).

/// Raises glibc's mmap threshold to its maximum (32 MiB on 64-bit targets) and its trim
/// threshold to 1 GiB, once per process. Elsewhere (other C libraries, other systems) it
/// does nothing.
pub(crate) fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| {
            // From glibc's <malloc.h>.
            const M_TRIM_THRESHOLD: i32 = -1;
            const M_MMAP_THRESHOLD: i32 = -3;
            unsafe extern "C" {
                fn mallopt(param: i32, value: i32) -> i32;
            }
            // SAFETY: `mallopt` only changes the allocator's tuning parameters; glibc
            // serialises it with allocation. A refused value (return 0) leaves the default.
            unsafe {
                mallopt(M_MMAP_THRESHOLD, 32 << 20);
                mallopt(M_TRIM_THRESHOLD, 1 << 30);
            }
        });
    }
}

//! One process-wide lock around the CUDA work that must not overlap another thread's stream
//! capture.
//!
//! While a stream is captured into a CUDA graph, a context-wide synchronization in any
//! thread (the one [`crate::device::DeviceMemory::write_at`] makes after a copy from
//! pageable memory, and those that freeing memory and unloading modules imply) fails with
//! `CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED` and invalidates the capture: two executables
//! prepared, loaded or dropped in different threads of one process broke each other (seen on
//! an H200: a captured cuBLAS GEMM failed with `CUBLAS_STATUS_EXECUTION_FAILED`, a load with
//! "operation not permitted when stream is capturing"). Preparing an executable (which
//! captures), loading its inputs and dropping it hold this lock; runs do not (a graph launch
//! and its own streams' synchronization are legal beside a capture), so the runs of prepared
//! executables still overlap.
//!
//! The guard is `Send` (unlike a `MutexGuard`), so an executable can hold it in a field while
//! its CUDA resources drop.

use std::sync::{Condvar, Mutex, PoisonError};

/// Whether the lock is held, and the condition its waiters sleep on.
static HELD: Mutex<bool> = Mutex::new(false);
static FREED: Condvar = Condvar::new();

/// The lock, held until this drops.
#[derive(Debug)]
pub struct SetupGuard(());

/// Waits for the lock and takes it.
pub fn hold() -> SetupGuard {
    let mut held = HELD.lock().unwrap_or_else(PoisonError::into_inner);
    while *held {
        held = FREED.wait(held).unwrap_or_else(PoisonError::into_inner);
    }
    *held = true;
    SetupGuard(())
}

impl Drop for SetupGuard {
    fn drop(&mut self) {
        *HELD.lock().unwrap_or_else(PoisonError::into_inner) = false;
        FREED.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// At most one holder at a time, across threads, and every waiter gets its turn.
    #[test]
    fn one_holder_at_a_time() {
        let inside = Arc::new(AtomicUsize::new(0));
        let turns = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let (inside, turns) = (inside.clone(), turns.clone());
                std::thread::spawn(move || {
                    for _ in 0..50 {
                        let _guard = hold();
                        assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two holders at once");
                        std::thread::yield_now();
                        inside.fetch_sub(1, Ordering::SeqCst);
                        turns.fetch_add(1, Ordering::SeqCst);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(turns.load(Ordering::SeqCst), 200);
    }
}

//! Intra-operator parallelism on the host: how many extra threads the kernel running on the
//! current thread may use, lent by the backend that runs it.
//!
//! # Design
//! A CPU backend runs one task per worker thread; when fewer tasks are ready than it has
//! workers (a chain of kernels on one virtual device, say), the idle workers' cores would
//! sit unused. The backend's scheduler knows that count when it starts a task, the kernel
//! knows how to split its work: this thread-local carries the number from one to the other
//! without the kernel library's interface ([`KernelLibrary`](crate::KernelLibrary)) knowing
//! about threads. A kernel run anywhere else (the reference interpreter, a test) sees 0
//! and runs on its own thread alone.

use std::cell::Cell;

thread_local! {
    static HELPERS: Cell<usize> = const { Cell::new(0) };
}

/// The number of extra threads (beyond the calling one) that the kernel running on this
/// thread may use: 0 unless a backend lent some through [`with_helpers`].
pub fn helpers() -> usize {
    HELPERS.with(Cell::get)
}

/// Runs `f` with [`helpers`] equal to `n` on this thread, restoring the previous value after
/// (also when `f` unwinds).
pub fn with_helpers<R>(n: usize, f: impl FnOnce() -> R) -> R {
    struct Restore(usize);
    impl Drop for Restore {
        fn drop(&mut self) {
            HELPERS.with(|h| h.set(self.0));
        }
    }
    let _restore = Restore(HELPERS.with(|h| h.replace(n)));
    f()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn helpers_are_lent_for_the_call_only_and_per_thread() {
        assert_eq!(helpers(), 0);
        let inner = with_helpers(3, || {
            let other = std::thread::spawn(helpers).join().unwrap();
            (helpers(), with_helpers(1, helpers), helpers(), other)
        });
        assert_eq!(inner, (3, 1, 3, 0));
        assert_eq!(helpers(), 0);
        let unwound = std::panic::catch_unwind(|| with_helpers(2, || panic!("kernel failed")));
        assert!(unwound.is_err());
        assert_eq!(helpers(), 0, "restored after a panic");
    }
}

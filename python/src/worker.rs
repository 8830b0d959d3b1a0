//! Long calls (`compile`, `Executable.run`, `experiment`) off the calling thread, so that the
//! caller can be interrupted: the work runs on a thread of its own while the caller waits
//! with the GIL released, waking every [`POLL`] to check for signals (Ctrl-C raises
//! `KeyboardInterrupt` at once, not when the work ends).
//!
//! # Design
//! The Rust pipeline has no cancellation point, so interrupted work cannot be stopped: the
//! caller stops waiting, marks the call [`Cancel`]led (work that can look, such as a Python
//! strategy or the progress callback, stops calling Python) and leaves the thread to finish
//! and drop its result. A panic on the thread is caught there and reaches Python as
//! `EinsummableError`, never as `PanicException`.

use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, sync_channel};
use std::thread;
use std::time::Duration;

use pyo3::prelude::*;

use crate::errors::EinsummableError;

/// How often a waiting caller checks for signals: the longest a Ctrl-C waits to be noticed.
const POLL: Duration = Duration::from_millis(20);

/// Stack of a thread that compiles or runs: the main thread's usual 8 MiB, twice over (the
/// spawned default of 2 MiB is less than the command line's compile gets).
pub const STACK_BYTES: usize = 16 << 20;

/// Set once the caller of a call has stopped waiting for it (interrupted); work still under
/// way on its thread checks it where it can, to stop calling back into Python.
#[derive(Clone, Debug, Default)]
pub struct Cancel(Arc<AtomicBool>);

impl Cancel {
    /// Marks the call abandoned.
    pub fn cancel(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    /// Whether the call was abandoned.
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// What a thread sends back: the work's value, or the message of the panic that ended it.
pub type Reply<R> = Result<R, String>;

/// `f`'s value, or the message of its panic (the panic does not unwind further).
pub fn catch<R>(f: impl FnOnce() -> R) -> Reply<R> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|panic| panic_message(&*panic))
}

/// `f`'s result on this thread, with a panic (a bug in the Rust crates, reached by some input)
/// as `EinsummableError` naming `what` instead of `PanicException`, which `except Exception`
/// does not catch.
pub fn guarded<R>(what: &str, f: impl FnOnce() -> PyResult<R>) -> PyResult<R> {
    catch(f).unwrap_or_else(|panic| Err(EinsummableError::new_err(format!("internal error: {what} panicked: {panic}"))))
}

/// The text a panic carries (`panic!`'s formatted message), or a placeholder.
fn panic_message(panic: &(dyn Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic without a message".to_string()
    }
}

/// Waits for the one reply `rx` brings, with the GIL released, checking for signals every
/// [`POLL`] and once the reply is in. A signal's exception (`KeyboardInterrupt` for Ctrl-C)
/// is returned at once with `cancel` set, the reply (if any) dropped: a call during which
/// Ctrl-C came raises, however near its end; a panic of the work is `EinsummableError`
/// naming `what`.
pub fn wait<R: Send>(py: Python<'_>, rx: Receiver<Reply<R>>, cancel: &Cancel, what: &str) -> PyResult<R> {
    let mut rx = rx;
    loop {
        let (back, got) = py.detach(move || {
            let got = rx.recv_timeout(POLL);
            (rx, got)
        });
        rx = back;
        if let Err(e) = py.check_signals() {
            cancel.cancel();
            return Err(e);
        }
        match got {
            Ok(Ok(value)) => return Ok(value),
            Ok(Err(panic)) => {
                return Err(EinsummableError::new_err(format!("internal error: {what} panicked: {panic}")));
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => {
                return Err(EinsummableError::new_err(format!(
                    "internal error: {what} ended without an answer (its thread stopped)"
                )));
            }
        }
    }
}

/// A channel for one reply: the sender for the thread, the receiver for [`wait`].
pub fn reply_channel<R>() -> (SyncSender<Reply<R>>, Receiver<Reply<R>>) {
    sync_channel(1)
}

/// Runs `f` on a new thread named `einsummable <what>` and waits for it ([`wait`]): its
/// value, `KeyboardInterrupt` (and `cancel` set) on Ctrl-C, or `EinsummableError` if it
/// panicked.
pub fn run_detached<R: Send + 'static>(
    py: Python<'_>,
    what: &str,
    cancel: &Cancel,
    f: impl FnOnce() -> R + Send + 'static,
) -> PyResult<R> {
    // A Ctrl-C not yet seen (calls made by C code, such as `map`) stops the call first.
    py.check_signals()?;
    let (tx, rx) = reply_channel();
    thread::Builder::new()
        .name(format!("einsummable {what}"))
        .stack_size(STACK_BYTES)
        .spawn(move || {
            // The caller may have stopped waiting: then nobody reads the value.
            let _ = tx.send(catch(f));
        })
        .map_err(|e| EinsummableError::new_err(format!("{what}: cannot start a thread: {e}")))?;
    wait(py, rx, cancel, what)
}

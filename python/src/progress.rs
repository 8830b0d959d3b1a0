//! Progress of long calls (`compile`, `experiment`): the pipeline's `tracing` events at info
//! level (each stage's outcome, as `-v` prints them on the command line), one line each,
//! passed to a Python callable.

use std::io;
use std::sync::Arc;

use pyo3::prelude::*;

use crate::worker::Cancel;

/// The progress callback of a long call, checked callable before any work starts (it is
/// called later, on the work's thread, where an error could only be reported as unraisable).
pub fn callback(py: Python<'_>, progress: Option<Py<PyAny>>) -> PyResult<Option<Arc<Py<PyAny>>>> {
    match progress {
        Some(p) if !p.bind(py).is_callable() => Err(crate::errors::EinsummableError::new_err(format!(
            "progress: {} is not callable; give a function that takes one line (a str)",
            p.bind(py).repr()?
        ))),
        p => Ok(p.map(Arc::new)),
    }
}

/// Runs `f` with the `tracing` events of this thread at info level and above passed, one
/// formatted line each, to `callback`; without one, `f` runs as it is. An exception the
/// callback raises is reported as unraisable (`sys.unraisablehook`), not propagated: the
/// work goes on. Once `cancel` is set (the caller was interrupted and stopped waiting, while
/// the work finishes on its thread), no line is passed on.
pub fn with_progress<R>(callback: Option<Arc<Py<PyAny>>>, cancel: &Cancel, f: impl FnOnce() -> R) -> R {
    let Some(callback) = callback else { return f() };
    let cancel = cancel.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::INFO)
        .without_time()
        .with_target(false)
        .with_writer(move || Line { callback: Arc::clone(&callback), cancel: cancel.clone(), bytes: Vec::new() })
        .finish();
    tracing::subscriber::with_default(subscriber, f)
}

/// One event's formatted text, sent to the callback when the formatter drops it.
struct Line {
    callback: Arc<Py<PyAny>>,
    cancel: Cancel,
    bytes: Vec<u8>,
}

impl io::Write for Line {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.bytes.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for Line {
    fn drop(&mut self) {
        let text = String::from_utf8_lossy(&self.bytes);
        let text = text.trim();
        if text.is_empty() || self.cancel.is_cancelled() {
            return;
        }
        // The work runs on a thread of its own, which may outlive the interpreter (work left
        // running at exit): then the line is dropped.
        Python::try_attach(|py| {
            if let Err(e) = self.callback.call1(py, (text,)) {
                e.write_unraisable(py, Some(self.callback.bind(py)));
            }
        });
    }
}

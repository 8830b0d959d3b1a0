//! Capturing the whole issue once as a CUDA graph and replaying it (the paper's execution
//! model: one graph launch per run).
//!
//! The capture begins on the origin stream (virtual device 0's first); every other stream, of
//! every virtual device and GPU, joins it by waiting on an event recorded there (fork), the
//! tasks are issued exactly as in eager mode, and every other stream's final event is waited
//! for by the origin before the capture ends (join), so the graph holds the work of every
//! stream and GPU.

use cudarc::driver::{CudaGraph, sys};

use crate::executor::{IssueError, Runtime};

/// Why a capture failed: a task that could not be issued, or a step of the capture itself.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CaptureError {
    /// Issuing a task failed.
    #[error(transparent)]
    Issue(#[from] IssueError),
    /// The fork, join, end of capture or upload failed (or, in eager mode, the fork or join).
    #[error("{what}: {reason}")]
    Capture {
        /// The step.
        what: &'static str,
        /// The driver's reason.
        reason: String,
    },
}

/// A captured, instantiated CUDA graph, owned by one executable.
pub struct CapturedGraph(CudaGraph);

// SAFETY: the graph and its executable instance are driver handles, not bound to a thread:
// every use (`launch`, `upload`) makes the graph's context current first. The CUDA driver
// forbids only concurrent use of one graph, which `Send` without `Sync` rules out.
unsafe impl Send for CapturedGraph {}

impl CapturedGraph {
    /// Launches the graph on the stream it was captured from.
    pub fn launch(&self) -> Result<(), cudarc::driver::DriverError> {
        self.0.launch()
    }
}

/// Captures `rt`'s issue as an instantiated graph. On failure the capture is ended and the
/// error names the task being issued, or the step of the capture that failed.
pub fn capture(rt: &Runtime) -> Result<CapturedGraph, CaptureError> {
    let origin = rt.origin();
    origin
        .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED)
        .map_err(fail("beginning the stream capture"))?;
    let issued = fork_issue_join(rt);
    let flags = sys::CUgraphInstantiate_flags::CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH;
    let ended = origin.end_capture(flags);
    issued?;
    match ended {
        Ok(Some(g)) => {
            g.upload().map_err(fail("uploading the graph"))?;
            Ok(CapturedGraph(g))
        }
        Ok(None) => Err(CaptureError::Capture {
            what: "ending the stream capture",
            reason: "the stream capture produced no graph".into(),
        }),
        Err(e) => Err(fail("ending the stream capture")(e)),
    }
}

/// Issues every task with every stream forked from the origin (each waits for an event
/// recorded there first) and joined back (the origin waits for each one's final event), so
/// that work on the origin after this call follows every stream's work: under a capture this
/// puts every stream in the graph; in eager mode it lets events on the origin bracket the
/// whole run.
pub fn fork_issue_join(rt: &Runtime) -> Result<(), CaptureError> {
    let origin = rt.origin();
    let fork = origin.context().new_event(None).map_err(fail("creating the fork event"))?;
    fork.record(origin).map_err(fail("recording the fork event"))?;
    for s in &rt.streams[1..] {
        s.wait(&fork).map_err(fail("joining a stream to the capture"))?;
    }
    rt.issue()?;
    for s in &rt.streams[1..] {
        let join = s.context().new_event(None).map_err(fail("creating a join event"))?;
        join.record(s).map_err(fail("recording a join event"))?;
        origin.wait(&join).map_err(fail("joining a stream back"))?;
    }
    Ok(())
}

fn fail(what: &'static str) -> impl Fn(cudarc::driver::DriverError) -> CaptureError {
    move |e| CaptureError::Capture { what, reason: e.to_string() }
}

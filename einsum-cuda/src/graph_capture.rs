//! Capturing the whole issue once as a CUDA graph and replaying it (the paper's execution
//! model: one graph launch per run).
//!
//! The capture begins on the origin stream (virtual device 0's); every other stream joins it
//! by waiting on an event recorded there (fork), the tasks are issued exactly as in eager
//! mode, and every other stream's final event is waited for by the origin before the
//! capture ends (join), so the graph holds the work of every stream and GPU.

use cudarc::driver::{CudaGraph, sys};

use crate::executor::{IssueError, Runtime};

/// Captures `rt`'s issue as an instantiated graph. On failure the capture is ended and the
/// error names the task being issued (or `None` for the fork, join or instantiation).
pub fn capture(rt: &Runtime) -> Result<CudaGraph, (Option<usize>, String)> {
    let origin = rt.origin();
    fn fail(what: &'static str) -> impl Fn(cudarc::driver::DriverError) -> (Option<usize>, String) {
        move |e| (None, format!("{what}: {e}"))
    }
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
            Ok(g)
        }
        Ok(None) => Err((None, "the stream capture produced no graph".into())),
        Err(e) => Err((None, format!("ending the stream capture: {e}"))),
    }
}

fn fork_issue_join(rt: &Runtime) -> Result<(), (Option<usize>, String)> {
    let origin = rt.origin();
    let fork = origin.context().new_event(None).map_err(|e| (None, format!("creating the fork event: {e}")))?;
    fork.record(origin).map_err(|e| (None, format!("recording the fork event: {e}")))?;
    for s in &rt.streams[1..] {
        s.wait(&fork).map_err(|e| (None, format!("joining a stream to the capture: {e}")))?;
    }
    rt.issue().map_err(|(t, e): IssueError| (Some(t), e))?;
    for s in &rt.streams[1..] {
        let join = s.context().new_event(None).map_err(|e| (None, format!("creating a join event: {e}")))?;
        join.record(s).map_err(|e| (None, format!("recording a join event: {e}")))?;
        origin.wait(&join).map_err(|e| (None, format!("joining a stream back: {e}")))?;
    }
    Ok(())
}

//! Fusing kernel chains when a graph is prepared: the CPU backend runs the backend-independent
//! fusion pass ([`einsum_core::taskgraph::fuse`]) with the rules it was given
//! ([`crate::CpuBackend::with_fusion`]) until no pair is left, so that a chain of kernels
//! whose intermediates have one reader (SwiGLU's `silu(g)·u`, a scale then a residual add)
//! runs as one task, with no intermediate buffer, through the fused operator's one-pass
//! host kernel.
//!
//! # Design
//! One pass fuses disjoint pairs (a task joins at most one), so a chain of `n` kernels takes
//! about `log₂ n` passes, each wrapping the previous pass's library; the rules see a fused
//! kernel like any other and compose it again. This crate still knows no operator: which
//! kernels fuse, and how the fused one runs, is the rules' business.

use std::sync::Arc;

use einsum_core::taskgraph::TaskGraph;
use einsum_core::taskgraph::fuse::{Rule, fuse_with};
use einsum_core::{BackendError, KernelLibrary};

/// `graph` with every chain `rules` fuse made one task, and the library its kernel tasks
/// run (the passes' fused libraries around `kernels`). With no rules, or nothing to fuse,
/// the graph comes back as it was.
pub(crate) fn fuse_chains<'k>(
    graph: &TaskGraph,
    kernels: Arc<dyn KernelLibrary + 'k>,
    rules: &[Rule],
) -> Result<(TaskGraph, Arc<dyn KernelLibrary + 'k>), BackendError> {
    let failed = |e: einsum_core::TaskGraphError| BackendError::Device {
        operation: "CPU kernel fusion".into(),
        reason: e.to_string(),
    };
    let (mut graph, mut kernels) = (graph.clone(), kernels);
    if rules.is_empty() {
        return Ok((graph, kernels));
    }
    loop {
        // Each pass that fuses removes at least one kernel task, so this ends.
        let f = fuse_with(&graph, kernels.clone(), rules).map_err(failed)?;
        if f.fused() == 0 {
            return Ok((graph, kernels));
        }
        graph = f.graph;
        kernels = Arc::new(f.kernels);
    }
}

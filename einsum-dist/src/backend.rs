//! The backend of a multi-process job: [`RankBackend`], the core contract's [`Backend`]
//! over any [`Transport`] (MPI's in a real job, [`Local`](crate::Local) in tests).

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use einsum_core::{Backend, BackendError, KernelLibrary, Prepared, taskgraph::TaskGraph};
use einsum_cpu::CpuBackend;
use einsum_sim::Topology;

use crate::{RankExecutable, RankLayout, Transport, job::Job};

/// How long a rank waits, by default, without any message arriving before it gives up on
/// the rank it waits for.
pub const DEFAULT_PATIENCE: Duration = Duration::from_secs(60);

/// Runs a task graph over the ranks of a job: every rank prepares the same graph, owns a
/// contiguous block of its devices ([`RankLayout`]), runs their tasks with the CPU
/// backend's kernels and carries the transfers between ranks as messages of `transport`;
/// rank 0 gathers the outputs ([`RankExecutable`]).
///
/// Every rank must build the same graph (the same command, the same plan), and the ranks of
/// one simulated node must run on one host: preparing checks both (`handshake.rs`).
#[derive(Clone)]
pub struct RankBackend {
    job: Job,
    cpu: CpuBackend,
    /// Bytes of crossing transfers sent to each rank by every executable prepared so far.
    sent: Arc<[AtomicU64]>,
}

impl RankBackend {
    /// A backend named `name` over `transport`, each rank running its tasks on `cpu`.
    pub fn new(name: &str, transport: Arc<dyn Transport>, cpu: CpuBackend) -> Self {
        let sent = (0..transport.ranks()).map(|_| AtomicU64::new(0)).collect();
        RankBackend { job: Job::new(name, transport), cpu, sent }
    }

    /// The same backend, refusing a layout whose rank would own devices of two nodes of
    /// `topology` ([`RankLayout::for_topology`]).
    #[must_use]
    pub fn for_topology(mut self, topology: Topology) -> Self {
        self.job.topology = Some(topology);
        self
    }

    /// The same backend, waiting at most `patience` without any message arriving before a
    /// rank gives up on the one it waits for ([`DEFAULT_PATIENCE`] by default).
    #[must_use]
    pub fn with_patience(mut self, patience: Duration) -> Self {
        self.job.patience = patience;
        self
    }

    /// The transport (this process's rank, the job's ranks).
    pub fn transport(&self) -> &Arc<dyn Transport> {
        &self.job.transport
    }

    /// Bytes of crossing transfers this rank has sent to each rank, over every run of every
    /// executable this backend (or a clone) prepared: the messages between devices of two
    /// ranks, without the output blocks gathered to rank 0.
    pub fn bytes_sent(&self) -> Vec<u64> {
        self.sent.iter().map(|b| b.load(Ordering::Relaxed)).collect()
    }

    /// The layout of a graph of `devices` devices over this job's ranks, checked against the
    /// topology where one was given: what `prepare` uses, for a caller to check first.
    pub fn layout(&self, devices: usize) -> Result<RankLayout, BackendError> {
        self.job.layout(devices)
    }

    /// Prepares `graph` on this rank ([`Backend::prepare`] boxes the same).
    pub fn executable<'k>(
        &self,
        graph: &TaskGraph,
        kernels: Arc<dyn KernelLibrary + 'k>,
    ) -> Result<RankExecutable<'k>, BackendError> {
        let layout = self.layout(graph.devices())?;
        let inner = self.cpu.executable(graph, kernels)?;
        let peers = self.job.connect(inner.graph(), layout, self.sent.clone())?;
        Ok(RankExecutable::new(inner.with_peers(peers.clone()), peers))
    }
}

impl Backend for RankBackend {
    fn name(&self) -> &str {
        &self.job.name
    }

    /// This rank's devices' predicted peaks ([`TaskGraph::stats`]), resident blocks included.
    fn host_bytes(&self, graph: &TaskGraph) -> usize {
        let peaks = graph.stats().peak_bytes;
        match self.layout(graph.devices()) {
            Ok(l) => l.devices_of(self.job.transport.rank()).map(|d| peaks[d]).fold(0usize, usize::saturating_add),
            Err(_) => peaks.iter().fold(0usize, |a, &b| a.saturating_add(b)),
        }
    }

    fn prepare<'k>(
        &self,
        graph: &TaskGraph,
        kernels: Arc<dyn KernelLibrary + 'k>,
    ) -> Result<Box<dyn Prepared + 'k>, BackendError> {
        Ok(Box::new(self.executable(graph, kernels)?))
    }
}

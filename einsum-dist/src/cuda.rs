//! The CUDA backend over the ranks of a job (feature `nccl`): [`CudaRankBackend`] prepares on
//! every rank the CUDA executable of its own devices ([`CudaExecutable::prepare_rank`]) on
//! its GPU, whose transfers to and from other ranks' devices go over NCCL, one group per
//! step; the [`Transport`] (MPI) carries only the handshake, NCCL's unique id and the output
//! blocks gathered to rank 0.
//!
//! Preparing checks first that this process has a CUDA driver, a GPU to start from and NCCL
//! (a typed [`BackendError::Unavailable`] otherwise, before talking to any rank), then runs
//! the handshake of the CPU ranks (same graph everywhere, one node on one host), then rank 0
//! makes the communicator's unique id and sends it to the others, and every rank joins the
//! communicator on its GPU (`ncclCommInitRank`, which returns once all have joined; a rank
//! that fails before joining ends the job through the driver's `MPI_Abort`, so no rank waits
//! there for ever).

use std::{collections::HashMap, sync::Arc, time::Duration};

use einsum_core::{
    Backend, BackendError, HostTensor, KernelLibrary, Prepared, TensorType,
    taskgraph::{Task, TaskGraph, TaskId},
};
use einsum_cpu::StoredBlock;
use einsum_cuda::{
    CudaBackend, CudaExecutable, CudaOptions, RankShare,
    nccl::{NcclRank, UniqueId, nccl_present},
};
use einsum_sim::Topology;

use crate::{RankLayout, Transport, handshake::share_id, job::Job, peers::RankPeers};

/// Runs a task graph over the ranks of a job on their GPUs, one GPU per rank; see the module
/// docs.
#[derive(Clone)]
pub struct CudaRankBackend {
    job: Job,
    options: CudaOptions,
}

impl CudaRankBackend {
    /// A backend named `name` over `transport`, each rank preparing its executable with
    /// `options` on GPU `options.first_gpu` alone.
    pub fn new(name: &str, transport: Arc<dyn Transport>, options: CudaOptions) -> Self {
        let options = CudaOptions { max_gpus: Some(1), ..options };
        CudaRankBackend { job: Job::new(name, transport), options }
    }

    /// The same backend, refusing a layout whose rank would own devices of two nodes of
    /// `topology`.
    #[must_use]
    pub fn for_topology(mut self, topology: Topology) -> Self {
        self.job.topology = Some(topology);
        self
    }

    /// The same backend, waiting at most `patience` for another rank's message.
    #[must_use]
    pub fn with_patience(mut self, patience: Duration) -> Self {
        self.job.patience = patience;
        self
    }

    /// The layout of a graph of `devices` devices over this job's ranks (as
    /// [`crate::RankBackend::layout`]).
    pub fn layout(&self, devices: usize) -> Result<RankLayout, BackendError> {
        self.job.layout(devices)
    }

    /// Prepares `graph` on this rank (see the module docs).
    pub fn executable(
        &self,
        graph: &TaskGraph,
        kernels: &dyn KernelLibrary,
    ) -> Result<CudaRankExecutable, BackendError> {
        let layout = self.layout(graph.devices())?;
        self.check_available()?;
        let (rank, ranks) = (self.job.transport.rank(), self.job.transport.ranks());
        let sent = (0..ranks).map(|_| Default::default()).collect();
        let peers = self.job.connect(graph, layout.clone(), sent)?;
        let id = share_id(&peers, || UniqueId::new().map(|id| id.to_bytes()))?;
        let nccl = NcclRank::init(&UniqueId::from_bytes(id), rank, ranks, self.options.first_gpu)?;
        let device_rank = (0..graph.devices()).map(|d| layout.rank_of(d)).collect();
        let share = RankShare { device_rank, rank, ranks, exchange: Box::new(nccl) };
        let inner = CudaExecutable::prepare_rank(graph, kernels, &self.options, share)?;
        // Each block the executable stores is the block of one Store task of `graph`, whose
        // tag carries it to rank 0.
        let stores: HashMap<(usize, &TensorType), TaskId> = graph
            .nodes()
            .iter()
            .enumerate()
            .filter_map(|(t, n)| match n.task {
                Task::Store { output, src } => Some(((output, &graph.buffer(src).ty), TaskId(t as u32))),
                _ => None,
            })
            .collect();
        let stored =
            inner.stored_blocks().iter().map(|(output, ty)| (stores[&(*output, ty)], *output, ty.clone())).collect();
        Ok(CudaRankExecutable { inner, peers, graph: graph.clone(), stored })
    }
}

impl Backend for CudaRankBackend {
    fn name(&self) -> &str {
        &self.job.name
    }

    /// A CUDA driver, a GPU from [`CudaOptions::first_gpu`] on, and NCCL.
    fn check_available(&self) -> Result<(), BackendError> {
        let gpus = einsum_cuda::availability::check_cuda()?;
        if self.options.first_gpu >= gpus {
            return Err(BackendError::Unavailable(format!(
                "rank {} would use GPU {}, and this host has {gpus}",
                self.job.transport.rank(),
                self.options.first_gpu
            )));
        }
        if !nccl_present() {
            return Err(BackendError::Unavailable("no NCCL library found (libnccl.so could not be loaded)".into()));
        }
        Ok(())
    }

    /// The whole inputs staged on the host on their way to the GPU, as the CUDA backend's.
    fn host_bytes(&self, graph: &TaskGraph) -> usize {
        CudaBackend::new(self.options.clone()).host_bytes(graph)
    }

    fn prepare<'k>(
        &self,
        graph: &TaskGraph,
        kernels: Arc<dyn KernelLibrary + 'k>,
    ) -> Result<Box<dyn Prepared + 'k>, BackendError> {
        Ok(Box::new(self.executable(graph, &*kernels)?))
    }
}

/// One rank's CUDA executable in a job ([`CudaRankBackend`]): its devices' tasks on its GPU,
/// the crossing transfers over NCCL, its output blocks sent to rank 0, whose
/// [`Prepared::run`] returns the whole outputs (the other ranks return none).
pub struct CudaRankExecutable {
    inner: CudaExecutable,
    peers: Arc<RankPeers>,
    /// The graph the messages' tags come from.
    graph: TaskGraph,
    /// The output blocks this rank's run fills: the Store task of each, its output and type.
    stored: Vec<(TaskId, usize, TensorType)>,
}

impl CudaRankExecutable {
    /// This process's rank.
    pub fn rank(&self) -> usize {
        self.peers.rank()
    }

    /// The CUDA executable of this rank's devices.
    pub fn inner(&self) -> &CudaExecutable {
        &self.inner
    }

    /// Runs this rank's part and returns its own output blocks, without gathering them.
    pub fn run_sharded(&mut self) -> Result<Vec<StoredBlock>, BackendError> {
        let outputs = self.inner.run()?;
        self.stored
            .iter()
            .map(|(task, output, ty)| {
                let block = outputs[*output].slice(ty).map_err(|e| BackendError::Device {
                    operation: format!("rank {}: reading an output block back", self.rank()),
                    reason: e.to_string(),
                })?;
                Ok(StoredBlock { task: *task, output: *output, block })
            })
            .collect()
    }
}

impl Prepared for CudaRankExecutable {
    /// Uploads the blocks of this rank's devices only.
    fn load(&mut self, input: usize, value: &HostTensor) -> Result<(), BackendError> {
        self.inner.load(input, value)
    }

    fn load_all(&mut self, inputs: &[HostTensor]) -> Result<(), BackendError> {
        self.inner.load_all(inputs)
    }

    fn write(&mut self, input: usize, part: &HostTensor) -> Result<(), BackendError> {
        self.inner.write(input, part)
    }

    /// On rank 0 the whole outputs; on every other rank, none (its blocks went to rank 0).
    fn run(&mut self) -> Result<Vec<HostTensor>, BackendError> {
        let mut blocks = self.run_sharded()?;
        let flush = |peers: &RankPeers| {
            peers.transport.flush(peers.patience).map_err(|e| BackendError::Device {
                operation: format!("rank {}: delivering its messages", peers.rank()),
                reason: e.to_string(),
            })
        };
        if self.rank() == 0 {
            blocks.extend(self.peers.gathered_blocks(&self.graph)?);
            return einsum_cpu::stitch_blocks(&self.graph, blocks);
        }
        for b in blocks {
            self.peers.send_for(b.task, b.block).map_err(|e| BackendError::Task {
                task: b.task,
                label: self.graph.nodes()[b.task.0 as usize].label.clone(),
                reason: format!("sending the output block to rank 0: {e}"),
            })?;
        }
        flush(&self.peers)?;
        Ok(Vec::new())
    }

    fn last_run_device_seconds(&self) -> Option<f64> {
        self.inner.last_run_device_seconds()
    }
}

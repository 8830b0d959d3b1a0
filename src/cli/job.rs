//! `--backend mpi` and `--backend mpi-cuda`: the MPI job a command runs in, one process per
//! rank, launched by `mpirun` (`mpirun -np 4 einsummable run --backend mpi --devices 8
//! --check`). Every rank compiles the same plan and runs the tasks of its own devices: on the
//! CPU, exchanging blocks with the others as MPI messages ([`einsum_dist::RankBackend`]), or
//! on one GPU per rank, exchanging them over NCCL ([`einsum_dist::CudaRankBackend`], feature
//! `nccl`); rank 0 gathers the outputs and reports, the other ranks print nothing. A rank
//! that fails ends the whole job (`MPI_Abort`), so that no rank waits for it.

use std::{sync::Arc, time::Duration};

use einsum_core::Backend;
use einsum_cpu::CpuBackend;
use einsum_dist::{RankBackend, Transport};
use einsum_sim::Topology;
use einsummable::{BackendParams, Error, Result};

/// The CPU job backend's name on the command line.
pub const NAME: &str = "mpi";

/// Its line of help.
pub const ABOUT: &str =
    "the ranks of an MPI job launched by mpirun, each running its devices' tasks on the CPU (needs the `mpi` feature)";

/// The GPU job backend's name on the command line.
pub const CUDA_NAME: &str = "mpi-cuda";

/// Its line of help.
pub const CUDA_ABOUT: &str = "the ranks of an MPI job launched by mpirun, one GPU each, exchanging blocks over NCCL \
                              (needs the `nccl` feature)";

/// What the GPU job needs besides Open MPI, for [`missing`].
const GPU_NEEDS: &str = "and, at run time, the CUDA driver and NCCL";

/// Whether `backend` names a job backend, whose `run` joins the MPI job it was launched in.
pub fn is_job(backend: &str) -> bool {
    backend == NAME || backend == CUDA_NAME
}

/// This process's place in an MPI job.
pub struct Job {
    transport: Arc<dyn Transport>,
    /// Whether the ranks run on their GPUs (`mpi-cuda`).
    cuda: bool,
}

impl Job {
    /// Joins the MPI job this process was launched in for job backend `backend`
    /// (`MPI_Init`; a process started without `mpirun` is a job of one rank).
    #[cfg(feature = "mpi")]
    pub fn start(backend: &str) -> Result<Job> {
        let cuda = backend == CUDA_NAME;
        if cuda && !cfg!(feature = "nccl") {
            return Err(missing(backend, "nccl", GPU_NEEDS));
        }
        let transport = einsum_dist::MpiTransport::init()
            .map_err(|e| Error::Usage(format!("--backend {backend}: joining the MPI job: {e}")))?;
        Ok(Job { transport: Arc::new(transport), cuda })
    }

    /// Without the `mpi` feature there is no MPI job to join.
    #[cfg(not(feature = "mpi"))]
    pub fn start(backend: &str) -> Result<Job> {
        Err(if backend == CUDA_NAME { missing(backend, "nccl", GPU_NEEDS) } else { missing(backend, "mpi", "") })
    }

    /// This process's rank.
    pub fn rank(&self) -> usize {
        self.transport.rank()
    }

    /// The job's ranks.
    pub fn ranks(&self) -> usize {
        self.transport.ranks()
    }

    /// The backend of a plan of `devices` devices on `topology` over this job's ranks, each
    /// waiting at most `patience` for the others (a GPU job's ranks with the CUDA `params`);
    /// a rank count that does not divide the devices, or a rank whose devices would span two
    /// nodes of `topology`, is refused here, before anything is compiled.
    pub fn backend(
        &self,
        topology: &Topology,
        devices: usize,
        patience: Duration,
        params: &BackendParams,
    ) -> Result<Arc<dyn Backend>> {
        if self.cuda {
            return self.cuda_backend(topology, devices, patience, params);
        }
        let cpu = CpuBackend::with_threads(threads_per_rank()).with_fusion(&einsum_ops::fused::RULES);
        let backend =
            RankBackend::new(NAME, self.transport.clone(), cpu).for_topology(topology.clone()).with_patience(patience);
        backend.layout(devices)?;
        Ok(Arc::new(backend))
    }

    /// The GPU job's backend: each rank on the GPU of its local rank (modulo the GPUs of its
    /// host), as `mpirun` places one rank per GPU.
    #[cfg(feature = "nccl")]
    fn cuda_backend(
        &self,
        topology: &Topology,
        devices: usize,
        patience: Duration,
        params: &BackendParams,
    ) -> Result<Arc<dyn Backend>> {
        let local = std::env::var("OMPI_COMM_WORLD_LOCAL_RANK").ok().and_then(|v| v.parse::<usize>().ok());
        let gpus = einsum_cuda::availability::check_cuda().unwrap_or(1).max(1);
        let options = einsum_cuda::CudaOptions {
            eager: params.eager,
            streams_per_gpu: params.streams_per_gpu,
            first_gpu: local.unwrap_or(0) % gpus,
            ..einsum_cuda::CudaOptions::default()
        };
        let backend = einsum_dist::CudaRankBackend::new(CUDA_NAME, self.transport.clone(), options)
            .for_topology(topology.clone())
            .with_patience(patience);
        backend.layout(devices)?;
        Ok(Arc::new(backend))
    }

    /// Without the `nccl` feature no job runs on GPUs (`start` refused it already).
    #[cfg(not(feature = "nccl"))]
    fn cuda_backend(&self, _: &Topology, _: usize, _: Duration, _: &BackendParams) -> Result<Arc<dyn Backend>> {
        Err(missing(CUDA_NAME, "nccl", GPU_NEEDS))
    }

    /// Ends the job on every rank now, after saying why on this rank's stderr.
    pub fn abort(&self, why: &dyn std::fmt::Display) -> ! {
        eprintln!("error: rank {} of {}: {why}", self.rank(), self.ranks());
        self.transport.abort(1)
    }
}

/// The error of job backend `backend` in a binary built without `feature`, saying how to
/// build and launch it (`needs`: what else it needs).
fn missing(backend: &str, feature: &str, needs: &str) -> Error {
    let needs = if needs.is_empty() { String::new() } else { format!(" {needs}") };
    Error::Usage(format!(
        "--backend {backend}: this binary was built without the `{feature}` feature; build it with \
         `cargo build --release --features {feature}` (it needs Open MPI: libopenmpi-dev, openmpi-bin, libclang-dev{needs}) \
         and launch it with `mpirun -np RANKS target/release/einsummable run --backend {backend}`"
    ))
}

/// The cores of this host shared by the ranks on it (Open MPI says how many there are in
/// `OMPI_COMM_WORLD_LOCAL_SIZE`), so that ranks sharing a host do not oversubscribe it.
fn threads_per_rank() -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let local = std::env::var("OMPI_COMM_WORLD_LOCAL_SIZE").ok().and_then(|v| v.parse::<usize>().ok());
    (cores / local.unwrap_or(1).max(1)).max(1)
}

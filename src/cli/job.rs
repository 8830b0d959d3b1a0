//! `--backend mpi`: the MPI job a command runs in, one process per rank, launched by
//! `mpirun` (`mpirun -np 4 einsummable run --backend mpi --devices 8 --check`). Every rank
//! compiles the same plan, runs the tasks of its own devices and exchanges blocks with the
//! others ([`einsum_dist::RankBackend`]); rank 0 gathers the outputs and reports, the other
//! ranks print nothing. A rank that fails ends the whole job (`MPI_Abort`), so that no rank
//! waits for it.

use std::{sync::Arc, time::Duration};

use einsum_core::Backend;
use einsum_cpu::CpuBackend;
use einsum_dist::{RankBackend, Transport};
use einsum_sim::Topology;
use einsummable::{Error, Result};

/// The backend's name on the command line.
pub const NAME: &str = "mpi";

/// Its line of help.
pub const ABOUT: &str =
    "the ranks of an MPI job launched by mpirun, each running its devices' tasks on the CPU (needs the `mpi` feature)";

/// This process's place in an MPI job.
pub struct Job {
    transport: Arc<dyn Transport>,
}

impl Job {
    /// Joins the MPI job this process was launched in (`MPI_Init`; a process started
    /// without `mpirun` is a job of one rank).
    #[cfg(feature = "mpi")]
    pub fn start() -> Result<Job> {
        let transport = einsum_dist::MpiTransport::init()
            .map_err(|e| Error::Usage(format!("--backend {NAME}: joining the MPI job: {e}")))?;
        Ok(Job { transport: Arc::new(transport) })
    }

    /// Without the `mpi` feature there is no MPI job to join.
    #[cfg(not(feature = "mpi"))]
    pub fn start() -> Result<Job> {
        Err(Error::Usage(format!(
            "--backend {NAME}: this binary was built without the `mpi` feature; build it with \
             `cargo build --release --features mpi` (it needs Open MPI: libopenmpi-dev, openmpi-bin, libclang-dev) \
             and launch it with `mpirun -np RANKS target/release/einsummable run --backend {NAME}`"
        )))
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
    /// waiting at most `patience` for the others; a rank count that does not divide the
    /// devices, or a rank whose devices would span two nodes of `topology`, is refused here,
    /// before anything is compiled.
    pub fn backend(&self, topology: &Topology, devices: usize, patience: Duration) -> Result<Arc<dyn Backend>> {
        let cpu = CpuBackend::with_threads(threads_per_rank()).with_fusion(&einsum_ops::fused::RULES);
        let backend =
            RankBackend::new(NAME, self.transport.clone(), cpu).for_topology(topology.clone()).with_patience(patience);
        backend.layout(devices)?;
        Ok(Arc::new(backend))
    }

    /// Ends the job on every rank now, after saying why on this rank's stderr.
    pub fn abort(&self, why: &dyn std::fmt::Display) -> ! {
        eprintln!("error: rank {} of {}: {why}", self.rank(), self.ranks());
        self.transport.abort(1)
    }
}

/// The cores of this host shared by the ranks on it (Open MPI says how many there are in
/// `OMPI_COMM_WORLD_LOCAL_SIZE`), so that ranks sharing a host do not oversubscribe it.
fn threads_per_rank() -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let local = std::env::var("OMPI_COMM_WORLD_LOCAL_SIZE").ok().and_then(|v| v.parse::<usize>().ok());
    (cores / local.unwrap_or(1).max(1)).max(1)
}

//! What a backend over the ranks of a job knows of the job, shared by the CPU backend
//! ([`crate::RankBackend`]) and the GPU one (`CudaRankBackend`): its name, the transport, the
//! topology whose nodes a rank must not split, and how long a rank waits for another; and
//! the two steps both take before running anything: the layout of a graph's devices over the
//! ranks, and the peers of this rank once the handshake has passed.

use std::sync::{Arc, atomic::AtomicU64};
use std::time::Duration;

use einsum_core::{BackendError, taskgraph::TaskGraph};
use einsum_sim::Topology;

use crate::{DEFAULT_PATIENCE, RankLayout, Transport, handshake::handshake, messages::Messages, peers::RankPeers};

/// A job's ranks as a backend sees them; see the module docs.
#[derive(Clone)]
pub(crate) struct Job {
    /// The backend's name, for messages.
    pub name: String,
    pub transport: Arc<dyn Transport>,
    /// Where given, a layout whose rank would own devices of two of its nodes is refused.
    pub topology: Option<Topology>,
    /// How long a rank waits without any message arriving before it gives up.
    pub patience: Duration,
}

impl Job {
    /// The job of backend `name` over `transport`, with no topology and [`DEFAULT_PATIENCE`].
    pub fn new(name: &str, transport: Arc<dyn Transport>) -> Job {
        Job { name: name.into(), transport, topology: None, patience: DEFAULT_PATIENCE }
    }

    /// The layout of a graph of `devices` devices over the job's ranks, one node of the
    /// topology (where given) never split over two ranks; refused naming the backend
    /// otherwise.
    pub fn layout(&self, devices: usize) -> Result<RankLayout, BackendError> {
        let ranks = self.transport.ranks();
        let layout = match &self.topology {
            Some(t) => RankLayout::for_topology(t, devices, ranks),
            None => RankLayout::contiguous(devices, ranks),
        };
        layout.map_err(|e| BackendError::Unavailable(format!("the {} backend's {ranks} ranks: {e}", self.name)))
    }

    /// This rank's peers for `graph` laid out as `layout` (counting the bytes sent to each
    /// rank in `sent`), once the handshake has checked that every rank prepares the same
    /// graph and, where the topology has nodes, that the ranks of one node share a host.
    pub fn connect(
        &self,
        graph: &TaskGraph,
        layout: RankLayout,
        sent: Arc<[AtomicU64]>,
    ) -> Result<Arc<RankPeers>, BackendError> {
        let messages = Messages::of(graph, &layout).map_err(|e| BackendError::Unavailable(e.to_string()))?;
        let peers = Arc::new(RankPeers::new(self.transport.clone(), layout, messages, self.patience, sent));
        let node_of = |d: usize| self.topology.as_ref().and_then(|t| t.node(einsum_sim::SiteId(d))).unwrap_or(0);
        let nodes = self.topology.as_ref().is_some_and(|t| t.nodes().is_some());
        handshake(graph, &peers, nodes.then_some(&node_of as &dyn Fn(usize) -> usize))?;
        Ok(peers)
    }
}

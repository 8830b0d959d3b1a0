//! One rank's prepared executable: the CPU backend's, running the tasks of the rank's
//! devices, with the outputs gathered to rank 0.

use std::sync::Arc;

use einsum_core::{BackendError, HostTensor, Prepared, TaskTiming, TensorType, taskgraph::TaskGraph};
use einsum_cpu::{CpuExecutable, RunStats, StoredBlock, stitch_blocks};

use crate::peers::RankPeers;

/// A task graph prepared on one rank of a job ([`RankBackend`](crate::RankBackend)): it
/// holds the blocks of its own devices' inputs, runs their tasks, exchanges the crossing
/// transfers' blocks with the other ranks, and sends its output blocks to rank 0, whose
/// [`Prepared::run`] returns the whole outputs. On the other ranks a run returns no output
/// (they are rank 0's); [`RankExecutable::run_sharded`] keeps every rank's blocks where
/// they are instead.
pub struct RankExecutable<'k> {
    inner: CpuExecutable<'k>,
    peers: Arc<RankPeers>,
    /// What the last run did on this rank.
    stats: Option<RunStats>,
}

impl<'k> RankExecutable<'k> {
    pub(crate) fn new(inner: CpuExecutable<'k>, peers: Arc<RankPeers>) -> Self {
        RankExecutable { inner, peers, stats: None }
    }

    /// This process's rank.
    pub fn rank(&self) -> usize {
        self.peers.rank()
    }

    /// The prepared graph (after kernel fusion), the same on every rank.
    pub fn graph(&self) -> &TaskGraph {
        self.inner.graph()
    }

    /// What the last run did on this rank (its devices only), if one ran.
    pub fn last_stats(&self) -> Option<&RunStats> {
        self.stats.as_ref()
    }

    /// Runs this rank's part and returns the output blocks of its own devices, in task
    /// order, without gathering them: the outputs kept sharded over the ranks.
    pub fn run_sharded(&mut self) -> Result<Vec<StoredBlock>, BackendError> {
        let (blocks, stats) = self.inner.run_blocks()?;
        self.stats = Some(stats);
        self.flush()?;
        Ok(blocks)
    }

    /// Waits until every block this rank sent has been delivered.
    fn flush(&self) -> Result<(), BackendError> {
        self.peers.transport.flush(self.peers.patience).map_err(|e| BackendError::Device {
            operation: format!("rank {}: delivering its messages", self.rank()),
            reason: e.to_string(),
        })
    }

    /// Rank 0's whole outputs: its own blocks and those every other rank sent, stitched.
    fn gather(&self, mut blocks: Vec<StoredBlock>) -> Result<Vec<HostTensor>, BackendError> {
        blocks.extend(self.peers.gathered_blocks(self.inner.graph())?);
        stitch_blocks(self.inner.graph(), blocks)
    }
}

impl Prepared for RankExecutable<'_> {
    /// Loads the blocks of this rank's devices only.
    fn load(&mut self, input: usize, value: &HostTensor) -> Result<(), BackendError> {
        self.inner.load(input, value)
    }

    fn write(&mut self, input: usize, part: &HostTensor) -> Result<(), BackendError> {
        self.inner.write(input, part)
    }

    /// The blocks of this rank's devices.
    fn needed_parts(&self, input: usize) -> Option<Vec<TensorType>> {
        self.inner.needed_parts(input)
    }

    fn load_parts(&mut self, input: usize, parts: &[HostTensor]) -> Result<(), BackendError> {
        self.inner.load_parts(input, parts)
    }

    /// On rank 0 the whole outputs; on every other rank, none (its blocks went to rank 0).
    fn run(&mut self) -> Result<Vec<HostTensor>, BackendError> {
        let blocks = self.run_sharded()?;
        if self.rank() == 0 {
            return self.gather(blocks);
        }
        for b in blocks {
            self.peers.send_for(b.task, b.block).map_err(|e| BackendError::Task {
                task: b.task,
                label: self.inner.graph().nodes()[b.task.0 as usize].label.clone(),
                reason: format!("sending the output block to rank 0: {e}"),
            })?;
        }
        self.flush()?;
        Ok(Vec::new())
    }

    fn record_task_timings(&mut self, on: bool) -> bool {
        self.inner.set_task_timing(on);
        true
    }

    fn take_task_timings(&mut self) -> Option<Vec<TaskTiming>> {
        self.stats.as_mut().and_then(|s| s.task_timings.take())
    }
}

//! One rank's view of the others: the CPU backend's [`Peers`] over a [`Transport`], with
//! the tags of [`Messages`], and the messages that arrived before their turn kept aside.
//!
//! A rank takes messages in two phases of a run (the crossing transfers, then, on rank 0,
//! the gathered outputs) and, once, those of the handshake (`handshake.rs`). Ranks are not in step: a rank
//! that finished its part of run `k` may already send its gathered blocks, or its first
//! transfers of run `k + 1`, while rank 0 still waits for the transfers of run `k`. Every
//! tag's block type is known from the graph, so such a message is received all the same
//! and kept aside, by tag, until the phase that wants it asks; messages of one tag stay in
//! the order they were sent.

use std::{
    collections::{HashMap, VecDeque},
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use einsum_core::{
    BackendError, DType, HostTensor, TensorType,
    taskgraph::{DeviceId, TaskGraph, TaskId},
};
use einsum_cpu::{Peers, StoredBlock};

use crate::{
    Envelope, RankLayout, Transport, TransportError,
    handshake::{self, HANDSHAKE},
    messages::{Kind, Messages},
};

/// One rank's side of a job running one task graph (see the module docs).
pub(crate) struct RankPeers {
    pub(crate) transport: Arc<dyn Transport>,
    pub(crate) layout: RankLayout,
    pub(crate) messages: Messages,
    /// Messages received before their phase asked for them, by tag.
    early: Mutex<HashMap<u32, VecDeque<(usize, HostTensor)>>>,
    /// Bytes sent to each rank (crossing transfers only), shared with the backend.
    sent: Arc<[AtomicU64]>,
    pub(crate) patience: Duration,
}

impl RankPeers {
    pub(crate) fn new(
        transport: Arc<dyn Transport>,
        layout: RankLayout,
        messages: Messages,
        patience: Duration,
        sent: Arc<[AtomicU64]>,
    ) -> Self {
        RankPeers { transport, layout, messages, early: Mutex::new(HashMap::new()), sent, patience }
    }

    /// This rank.
    pub(crate) fn rank(&self) -> usize {
        self.transport.rank()
    }

    /// The type and dtype of `envelope`'s block, from its tag, or why it is not expected.
    fn shape(&self, envelope: &Envelope) -> Result<(TensorType, DType), TransportError> {
        let unexpected = |why: String| TransportError::Unexpected { envelope: *envelope, why };
        if envelope.tag == HANDSHAKE {
            return if (envelope.from == 0) != (self.rank() == 0) {
                handshake::shape(envelope)
            } else {
                Err(unexpected("the handshake goes between rank 0 and each other rank".into()))
            };
        }
        let m = self.messages.incoming(envelope.tag).ok_or_else(|| {
            unexpected(format!("the graph's messages have tags {HANDSHAKE} to {}", self.messages.max_tag()))
        })?;
        if (m.from, m.to) != (envelope.from, self.rank()) {
            return Err(unexpected(format!(
                "tag {} goes from rank {} to rank {} (task {})",
                envelope.tag, m.from, m.to, m.task
            )));
        }
        Ok((m.ty.clone(), m.dtype))
    }

    /// Waits at most `wait` for a message whose tag `wanted` accepts: one kept aside, or the
    /// next to arrive (those `wanted` refuses are kept aside meanwhile): its sender, tag
    /// and block. `None` when none came in time.
    pub(crate) fn take(
        &self,
        wait: Duration,
        wanted: impl Fn(u32) -> bool,
    ) -> Result<Option<(usize, u32, HostTensor)>, TransportError> {
        let mut early = self.early.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((&tag, queue)) = early.iter_mut().find(|(t, q)| wanted(**t) && !q.is_empty()) {
            let (from, block) = queue.pop_front().expect("not empty");
            return Ok(Some((from, tag, block)));
        }
        let deadline = Instant::now() + wait;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let Some((envelope, block)) = self.transport.receive(left, &|e| self.shape(e))? else {
                return Ok(None);
            };
            if wanted(envelope.tag) {
                return Ok(Some((envelope.from, envelope.tag, block)));
            }
            early.entry(envelope.tag).or_default().push_back((envelope.from, block));
            if left.is_zero() {
                return Ok(None);
            }
        }
    }

    /// On rank 0, the output blocks every other rank sends after a run of `graph` (the graph
    /// the messages were made from), waiting at most the patience for each; fails naming
    /// the `Store` task whose block did not come, and the rank that owes it.
    pub(crate) fn gathered_blocks(&self, graph: &TaskGraph) -> Result<Vec<StoredBlock>, BackendError> {
        let mut missing: Vec<(u32, TaskId, usize)> = self
            .messages
            .gathered()
            .map(|(tag, m)| {
                let Kind::Output(output) = m.kind else { unreachable!("gathered messages are outputs") };
                (tag, m.task, output)
            })
            .collect();
        let mut blocks = Vec::with_capacity(missing.len());
        while let Some(&(first_tag, first, _)) = missing.first() {
            let fail = |reason: String| BackendError::Task {
                task: first,
                label: graph.nodes()[first.0 as usize].label.clone(),
                reason,
            };
            let wanted = |tag: u32| missing.iter().any(|m| m.0 == tag);
            let got = self.take(self.patience, wanted).map_err(|e| fail(format!("gathering: {e}")))?;
            let Some((_, tag, block)) = got else {
                let from = self.messages.incoming(first_tag).map_or(0, |m| m.from);
                return Err(fail(format!(
                    "rank 0 waited {:.1} s for this output block from rank {from}, which may have failed",
                    self.patience.as_secs_f64()
                )));
            };
            let at = missing.iter().position(|m| m.0 == tag).expect("wanted");
            let (_, task, output) = missing.swap_remove(at);
            blocks.push(StoredBlock { task, output, block });
        }
        Ok(blocks)
    }

    /// Sends `block` for `task` (a crossing transfer or a `Store`) to the rank its tag goes to.
    pub(crate) fn send_for(&self, task: TaskId, block: HostTensor) -> Result<(), TransportError> {
        let tag = self.messages.tag_of(task).expect("a crossing transfer or a store");
        let m = self.messages.incoming(tag).expect("a tag of the graph");
        if m.kind == Kind::Transfer {
            self.sent[m.to].fetch_add(block.size_bytes() as u64, Ordering::Relaxed);
        }
        self.transport.send(m.to, tag, block)
    }
}

impl Peers for RankPeers {
    fn is_local(&self, device: DeviceId) -> bool {
        self.layout.rank_of(device.0 as usize) == self.rank()
    }

    fn send(&self, task: TaskId, block: HostTensor) -> Result<(), String> {
        self.send_for(task, block).map_err(|e| e.to_string())
    }

    fn receive(&self, wait: Duration) -> Result<Option<(TaskId, HostTensor)>, String> {
        let transfer = |tag: u32| self.messages.incoming(tag).is_some_and(|m| m.kind == Kind::Transfer);
        let got = self.take(wait, transfer).map_err(|e| e.to_string())?;
        Ok(got.map(|(_, tag, block)| (self.messages.incoming(tag).expect("wanted").task, block)))
    }

    fn owner(&self, device: DeviceId) -> String {
        format!("rank {}", self.layout.rank_of(device.0 as usize))
    }

    fn patience(&self) -> Duration {
        self.patience
    }
}

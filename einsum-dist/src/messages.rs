//! Every message of one run of a task graph over a rank layout, with its tag: what each
//! rank sends, and what each tag it receives carries.
//!
//! Tags are derived from the graph alone, so every rank agrees on them without talking:
//! tag 0 is the handshake's before the first run (`handshake.rs`); tags `1..=c` the `c` crossing transfers in task order ([`cross_rank`]); the tags after
//! them the output blocks gathered to rank 0, one per `Store` task in task order.

use std::collections::HashMap;

use einsum_core::{
    DType, TensorType,
    taskgraph::{BufferId, Task, TaskGraph, TaskId},
};

use crate::{RankLayout, TrafficError, cross_rank};

/// What a tag's message carries, for its receiver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Incoming {
    /// The rank that sends it.
    pub(crate) from: usize,
    /// The rank that receives it.
    pub(crate) to: usize,
    /// The task it completes: a crossing transfer, or the `Store` of a gathered block.
    pub(crate) task: TaskId,
    /// Its block's type and dtype.
    pub(crate) ty: TensorType,
    pub(crate) dtype: DType,
    /// What it is.
    pub(crate) kind: Kind,
}

/// The two kinds of message of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// The block of a transfer between devices of two ranks.
    Transfer,
    /// A block of saved output `.0`, gathered to rank 0.
    Output(usize),
}

/// The messages of a graph over a layout (see the module docs).
#[derive(Debug, Clone)]
pub(crate) struct Messages {
    /// Per tag (`tag - 1`), what it carries.
    by_tag: Vec<Incoming>,
    /// Per crossing transfer and per `Store` task, its tag.
    tag_of: HashMap<TaskId, u32>,
}

impl Messages {
    /// The messages of `graph` over `layout`; refused when a task uses a device the layout
    /// does not have.
    pub(crate) fn of(graph: &TaskGraph, layout: &RankLayout) -> Result<Self, TrafficError> {
        let rank = |b: BufferId| layout.rank_of(graph.buffer(b).device.0 as usize);
        let mut by_tag = Vec::new();
        for task in cross_rank(graph, layout)? {
            let Task::Transfer { src, dst } = graph.nodes()[task.0 as usize].task else {
                unreachable!("cross_rank lists transfers")
            };
            let b = graph.buffer(dst);
            let (ty, dtype) = (b.ty.clone(), b.dtype);
            by_tag.push(Incoming { from: rank(src), to: rank(dst), task, ty, dtype, kind: Kind::Transfer });
        }
        for (t, node) in graph.nodes().iter().enumerate() {
            if let Task::Store { output, src } = node.task {
                let b = graph.buffer(src);
                let (ty, dtype) = (b.ty.clone(), b.dtype);
                let task = TaskId(t as u32);
                by_tag.push(Incoming { from: rank(src), to: 0, task, ty, dtype, kind: Kind::Output(output) });
            }
        }
        let tag_of = by_tag.iter().enumerate().map(|(i, m)| (m.task, i as u32 + 1)).collect();
        Ok(Messages { by_tag, tag_of })
    }

    /// What `tag` carries (`None` for the handshake's tag and unknown tags).
    pub(crate) fn incoming(&self, tag: u32) -> Option<&Incoming> {
        tag.checked_sub(1).and_then(|i| self.by_tag.get(i as usize))
    }

    /// The tag of crossing transfer or `Store` task `task`.
    pub(crate) fn tag_of(&self, task: TaskId) -> Option<u32> {
        self.tag_of.get(&task).copied()
    }

    /// The largest tag.
    pub(crate) fn max_tag(&self) -> u32 {
        self.by_tag.len() as u32
    }

    /// The gathered output blocks rank 0 receives from other ranks, with their tags.
    pub(crate) fn gathered(&self) -> impl Iterator<Item = (u32, &Incoming)> {
        (1..).zip(&self.by_tag).filter(|(_, m)| matches!(m.kind, Kind::Output(_)) && m.from != 0)
    }
}

#[cfg(test)]
mod tests {
    use einsum_core::taskgraph::examples;

    use super::*;

    /// The two-device gather: device 1's block travels to device 0, which stores the whole.
    #[test]
    fn the_gather_example_has_one_transfer_and_one_store() {
        let g = examples::two_device_gather();
        let m = Messages::of(&g, &RankLayout::contiguous(2, 2).expect("even")).expect("devices in the layout");
        assert_eq!(m.max_tag(), 2);
        let transfer = m.incoming(1).expect("tag 1");
        assert_eq!((transfer.from, transfer.to, transfer.task, transfer.kind), (1, 0, TaskId(2), Kind::Transfer));
        assert_eq!(m.tag_of(TaskId(2)), Some(1));
        let store = m.incoming(2).expect("tag 2");
        assert_eq!((store.from, store.to, store.kind), (0, 0, Kind::Output(0)));
        assert_eq!(m.tag_of(store.task), Some(2));
        // Rank 0 stores the output itself: nothing to gather.
        assert_eq!(m.gathered().count(), 0);
        assert_eq!((m.incoming(0), m.incoming(3)), (None, None));
    }
}

//! How transfers that share a channel are served: all at once, sharing fairly, or one at a
//! time in the order they were issued.
//!
//! A [`Topology`](crate::Topology) carries a [`LinkService`]. Under [`LinkService::Fair`]
//! (the paper's model, Section 5.2, and the default of a topology file) every flow is active
//! as soon as its task starts and shares every resource it crosses max-min fairly with every
//! other flow. Under [`LinkService::Fifo`] the transfers from one site to another (one
//! *channel* per ordered pair of sites) are served one at a time, in the order they were
//! issued: the first holds the channel until its last byte arrives, and the next waits in
//! the channel's queue meanwhile. Flows of *different* channels still share every resource
//! max-min fairly, so a site sending to seven peers at once divides its egress seven ways,
//! as before; only the flows of one pair stop dividing their share among themselves.
//!
//! # Why a FIFO per ordered pair of sites
//! Both ways a GPU moves bytes to a peer serve one pair's transfers in order:
//!
//! - *Copy engines and streams.* "A stream is a sequence of commands (possibly issued by
//!   different host threads) that execute in order" (CUDA C++ Programming Guide, "Streams");
//!   a runtime that issues a pair's peer copies (`cudaMemcpyPeerAsync`) on one stream, as
//!   one stream per peer does, runs them one after the other, each at the copy engine's full
//!   rate, never interleaved.
//! - *NCCL channels.* An NCCL connection between two ranks on one channel is a FIFO of
//!   `NCCL_STEPS` (8) buffer slots: the sender fills slot after slot and advances its `tail`,
//!   the receiver consumes them in order and advances its `head` (`src/include/device.h`,
//!   `ncclConnInfo`; the primitives in `src/device/prims_simple.h`). A collective's chunks
//!   cross a connection in the order the algorithm issues them, so chunk `c` of a ring or a
//!   tree arrives whole before chunk `c + 1` starts, and the reduction of chunk `c` at the
//!   next rank overlaps the transfer of chunk `c + 1`: the pipelining that lets NCCL's ring
//!   reach the bus bandwidth.
//!
//! Under max-min sharing instead, `k` equal chunks issued together on one pair each get
//! `1/k` of it and all arrive at the end, so nothing downstream of the first chunk can start
//! early, whatever the chunk count (`einsum-exprog/tests/fluid_lockstep.rs` shows the
//! consequence: a reduce-scatter's ⊕ can only follow its last transfer).
//!
//! # Issue order
//! A transfer is *issued* when its task is ready to move bytes: its dependencies have ended
//! and its setup latency has passed ([`Latency`](crate::Latency)). Transfers issued at the
//! same instant are issued in task order (the order of the [`SimGraph`](crate::SimGraph), and
//! for an exchange program the order its lowering emits them). A queued transfer's setup
//! overlaps the transfer ahead of it, as a command queued behind another is already
//! submitted. The queue is work-conserving (a channel is idle only when nothing is queued on
//! it) and never waits on a task that is not yet ready, so it cannot deadlock: it delays
//! flows, it never adds a dependency.
//!
//! # The paper's examples
//! The exact figures of Section 5 (Examples 5.1, 5.2, 5.3) are the same under both
//! services: none of them has two transfers on one ordered pair at once (each round of the
//! swap, of recursive doubling and of the V100 placement sends one atom per pair), so a
//! channel never holds more than one flow, and the FIFO changes nothing
//! (`tests/paper_examples.rs` checks both). The paper's derivations assume only that
//! *different* pairs sharing an endpoint split it, which both services do.

use std::collections::VecDeque;

use einsum_core::FastMap;

/// How the transfers of one ordered pair of sites are served (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum LinkService {
    /// Every flow is active from the start of its task and shares every resource max-min
    /// fairly: the paper's model, and a topology file's default.
    #[default]
    Fair,
    /// The transfers from one site to another are served one at a time in issue order;
    /// different pairs share fairly. The presets' service.
    Fifo,
}

impl LinkService {
    /// Both services, [`LinkService::Fair`] first.
    pub const ALL: [LinkService; 2] = [LinkService::Fair, LinkService::Fifo];

    /// The name the topology file format gives it: `"fair"` or `"fifo"`.
    pub fn name(self) -> &'static str {
        match self {
            LinkService::Fair => "fair",
            LinkService::Fifo => "fifo",
        }
    }

    /// The service of a name as [`LinkService::name`] spells it.
    pub fn from_name(name: &str) -> Option<LinkService> {
        LinkService::ALL.into_iter().find(|s| s.name() == name)
    }
}

/// One FIFO per busy channel (an ordered pair of sites): the items waiting behind the one
/// being served. A channel absent from the map is idle. The map is looked up once per
/// transfer issued and finished and never iterated, so it is a [`FastMap`].
#[derive(Debug)]
pub(crate) struct Channels<T> {
    waiting: FastMap<(usize, usize), VecDeque<T>>,
}

impl<T> Default for Channels<T> {
    fn default() -> Self {
        Channels { waiting: FastMap::default() }
    }
}

impl<T> Channels<T> {
    /// Offers `item` to `channel`: `Some(item)` when the channel was idle (the item now holds
    /// it and should be served), `None` when it is queued behind the items issued before it.
    pub(crate) fn admit(&mut self, channel: (usize, usize), item: T) -> Option<T> {
        match self.waiting.get_mut(&channel) {
            Some(queue) => {
                queue.push_back(item);
                None
            }
            None => {
                self.waiting.insert(channel, VecDeque::new());
                Some(item)
            }
        }
    }

    /// The item holding `channel` is done: the next in issue order, which now holds the
    /// channel, or `None` when nothing waits (the channel becomes idle).
    pub(crate) fn release(&mut self, channel: (usize, usize)) -> Option<T> {
        let next = self.waiting.get_mut(&channel).and_then(VecDeque::pop_front);
        if next.is_none() {
            self.waiting.remove(&channel);
        }
        next
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_channel_serves_in_issue_order_and_frees_when_empty() {
        let mut c = Channels::default();
        assert_eq!(c.admit((0, 1), "a"), Some("a"));
        assert_eq!(c.admit((0, 1), "b"), None);
        assert_eq!(c.admit((1, 0), "x"), Some("x"), "the reverse direction is another channel");
        assert_eq!(c.admit((0, 1), "c"), None);
        assert_eq!(c.release((0, 1)), Some("b"));
        assert_eq!(c.release((0, 1)), Some("c"));
        assert_eq!(c.release((0, 1)), None);
        assert_eq!(c.admit((0, 1), "d"), Some("d"), "an emptied channel is idle again");
    }

    #[test]
    fn names_round_trip() {
        for s in LinkService::ALL {
            assert_eq!(LinkService::from_name(s.name()), Some(s));
        }
        assert_eq!(LinkService::from_name("lifo"), None);
        assert_eq!(LinkService::default(), LinkService::Fair);
    }
}

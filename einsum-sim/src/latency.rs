//! Latencies: the fixed time a task waits before it moves its first byte or does its first
//! FLOP, on top of the fluid model's `bytes / rate`.
//!
//! A machine's [`Latency`] has one figure per kind of work: launching a kernel (kernels,
//! and local aggregations and copies, which are kernels too), and setting up a transfer per
//! kind of path (a direct link or a switch such as NVSwitch, a shared bus such as the
//! DGX-1V's PCIe bridge, the network between nodes). [`Topology::task_latency`] gives the
//! latency of one task; the simulator holds each task for that long after its last
//! dependency ends, and only then starts its flows.
//!
//! # Why a delay before the flow
//! A task with latency `L` and `bytes` alone on its route takes `L + bytes / rate`. Under
//! max-min sharing the two parts behave differently: during `L` the task is being set up
//! (a copy or kernel is launched, a doorbell rung, a handshake done, the first bytes cross
//! the wire) and takes no bandwidth from anyone; once its bytes flow, it shares every
//! resource it crosses. Modelling the latency as a delay before the flow gets both right:
//! concurrent tiny transfers each pay their latency once, at the same time, without slowing
//! each other, and a large transfer that shares a link is slowed only by the bytes of the
//! others. Charging the latency as `L × bandwidth` extra bytes instead would be wrong under
//! sharing: the latency of one transfer would take bandwidth from the others, and its own
//! latency would grow with the number of flows sharing its link.
//!
//! A task with nothing to do (no bytes, no seconds) has no latency: nothing is launched.
//! Kernels independent of each other on one site overlap their launches (a CUDA graph
//! launches independent branches concurrently); a chain of dependent kernels pays one
//! launch per kernel.
//!
//! # The figures
//! Every field defaults to zero: a topology without a `latency` object is the pure fluid
//! model, and reproduces every figure computed before latencies existed. The presets carry
//! the figures of [`A100_LATENCY`], [`H100_LATENCY`], [`V100_LATENCY`] and
//! [`NVL72_LATENCY`], built from the public constants below. They are order-of-magnitude
//! figures from vendor documents and public microbenchmarks, never fitted to the paper's
//! end-to-end times.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use crate::error::TopologyError;
use crate::task::TaskKind;
use crate::topology::{Fallback, SiteId, Topology};

/// One microsecond in seconds.
pub const US: f64 = 1e-6;

/// Launching one kernel from a CUDA graph on a recent data-center GPU: 2 µs. The gap
/// between dependent kernels replayed from a graph is about 0.5 µs (NVIDIA, "Getting
/// Started with CUDA Graphs", 2019: 20 dependent kernels of about 2.9 µs each take about
/// 3.4 µs apiece from a graph against 3.8 µs launched one by one on a stream), and a kernel
/// that does almost nothing still takes 1.1–1.3 µs from launch to completion (PyTorch issue
/// #161104: the add of two 1024-element tensors measured at 1.1–1.3 µs), the grid's ramp-up
/// and drain that a roofline time leaves out. Together about 2 µs per kernel.
pub const CUDA_GRAPH_KERNEL_LAUNCH_US: f64 = 2.0;

/// Setting up one peer-to-peer copy over NVLink, directly or through an NVSwitch: 3 µs.
/// The CUDA samples' `p2pBandwidthLatencyTest` reports GPU-to-GPU latencies of about
/// 2–3 µs between NVLink peers with P2P enabled on DGX machines, and a copy issued from a
/// graph adds its launch; we take 3 µs.
pub const NVLINK_TRANSFER_US: f64 = 3.0;

/// Setting up one copy between GPUs that only a PCIe bridge joins: 10 µs. Over PCIe
/// switches with P2P enabled a single-cacheline remote read takes 4.1 µs isolated and 6.1 µs
/// under load (the `p2pmark` benchmark, github.com/lukealonso/p2pmark); the DGX-1V's
/// unlinked pairs also cross the CPU sockets, where P2P is unavailable and copies are staged
/// through host memory, which the `p2pBandwidthLatencyTest` P2P=Disabled rows put at 10 µs
/// and more. We take 10 µs.
pub const PCIE_BRIDGE_TRANSFER_US: f64 = 10.0;

/// Setting up one GPUDirect RDMA transfer between nodes over InfiniBand (HDR or NDR): 5 µs.
/// The adapters themselves add about a microsecond (ConnectX-6/7 product briefs: sub-µs
/// port-to-port latency; `ib_write_lat` measures 1–2 µs host to host); posting the work
/// request from the GPU's stream through a proxy thread, a switch hop and the completion
/// add a few more, so we take 5 µs.
pub const INFINIBAND_TRANSFER_US: f64 = 5.0;

/// Per-machine latencies in seconds (the JSON format writes them in µs; see the crate
/// docs). All zero by default ([`Latency::ZERO`], the pure fluid model).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Latency {
    /// Launching one kernel, aggregation or local copy on a site.
    pub kernel_launch: f64,
    /// Setting up a transfer between sites of one node joined by a link, or by a switch
    /// fallback ([`Fallback::Switch`], an NVSwitch).
    pub link: f64,
    /// Setting up a transfer through a shared fallback ([`Fallback::Shared`], a bus).
    pub bus: f64,
    /// Setting up a transfer between sites of different nodes (through their NICs).
    pub network: f64,
}

/// The DGX A100's latencies: graph-launched kernels, NVSwitch, HDR InfiniBand.
pub const A100_LATENCY: Latency = Latency {
    kernel_launch: CUDA_GRAPH_KERNEL_LAUNCH_US * US,
    link: NVLINK_TRANSFER_US * US,
    bus: PCIE_BRIDGE_TRANSFER_US * US,
    network: INFINIBAND_TRANSFER_US * US,
};

/// The DGX H100's latencies: the same figures as the A100's (NDR InfiniBand's published
/// latency is no lower than HDR's at this resolution).
pub const H100_LATENCY: Latency = A100_LATENCY;

/// The DGX-1V's latencies: NVLink between linked pairs, the PCIe bridge between the others.
pub const V100_LATENCY: Latency = A100_LATENCY;

/// The GB200 NVL72's latencies: NVLink switches throughout.
pub const NVL72_LATENCY: Latency = A100_LATENCY;

impl Latency {
    /// No latency anywhere: the pure fluid model.
    pub const ZERO: Latency = Latency { kernel_launch: 0.0, link: 0.0, bus: 0.0, network: 0.0 };

    /// Each field in seconds, with the name the JSON format gives it (in µs there).
    pub fn fields(&self) -> [(&'static str, f64); 4] {
        [
            ("kernel_launch_us", self.kernel_launch),
            ("link_us", self.link),
            ("bus_us", self.bus),
            ("network_us", self.network),
        ]
    }

    /// Checks that every latency is finite and not negative; the error names the field as
    /// the JSON format spells it (`latency.link_us`).
    pub fn validate(&self) -> Result<(), TopologyError> {
        for (field, value) in self.fields() {
            if !(value.is_finite() && value >= 0.0) {
                return Err(TopologyError::field(
                    format!("latency.{field}"),
                    format!("expected a finite number of µs, zero or more, got {}", value / US),
                ));
            }
        }
        Ok(())
    }
}

impl Topology {
    /// The setup latency of a transfer from `src` to `dst`: [`Latency::network`] between
    /// nodes, [`Latency::link`] over a link or a switch fallback, [`Latency::bus`] through a
    /// shared fallback. `None` when either site is out of range or they are the same site.
    pub fn transfer_latency(&self, src: SiteId, dst: SiteId) -> Option<f64> {
        let (a, b) = (self.node(src)?, self.node(dst)?);
        if src == dst {
            return None;
        }
        let latency = self.latency();
        Some(if a != b {
            latency.network
        } else if self.linked(src, dst) {
            latency.link
        } else {
            match self.fallback() {
                Some(Fallback::Shared { .. }) => latency.bus,
                Some(Fallback::Switch) | None => latency.link,
            }
        })
    }

    /// How long a task of `kind` waits, once ready, before its flows start (module docs): a
    /// transfer its route's [`Topology::transfer_latency`], a multicast the largest over its
    /// destinations, a kernel or aggregation the [`Latency::kernel_launch`]; zero for a task
    /// with nothing to move or compute, and for sites out of range (the simulator reports
    /// those).
    pub fn task_latency(&self, kind: &TaskKind) -> f64 {
        let latency = self.latency();
        match kind {
            TaskKind::Transfer { src, dst, bytes } if *bytes > 0.0 => self.transfer_latency(*src, *dst).unwrap_or(0.0),
            TaskKind::Multicast { src, dsts, bytes } if *bytes > 0.0 => {
                dsts.iter().filter_map(|d| self.transfer_latency(*src, *d)).fold(0.0, f64::max)
            }
            TaskKind::Aggregate { read_bytes, write_bytes, .. } if read_bytes + write_bytes > 0.0 => {
                latency.kernel_launch
            }
            TaskKind::Compute { seconds, .. } if *seconds > 0.0 => latency.kernel_launch,
            _ => 0.0,
        }
    }

    /// The largest [`Topology::transfer_latency`] over every ordered pair of distinct sites:
    /// what a cost model that summarises the machine by its slowest pair charges per
    /// transfer. Zero on a machine of one site.
    pub fn max_transfer_latency(&self) -> f64 {
        let n = self.num_sites();
        (0..n).flat_map(|a| (0..n).filter_map(move |b| self.transfer_latency(SiteId(a), SiteId(b)))).fold(0.0, f64::max)
    }
}

/// Tasks in their latency: each wakes at its time, earliest first (ties by task index, so
/// that runs are deterministic).
#[derive(Debug, Default)]
pub(crate) struct Waiting {
    heap: BinaryHeap<Wake>,
}

#[derive(Debug, Clone, Copy)]
struct Wake {
    at: f64,
    task: usize,
}

impl PartialEq for Wake {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Wake {}

impl PartialOrd for Wake {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Wake {
    /// Reversed, so that the max-heap pops the earliest wake first.
    fn cmp(&self, other: &Self) -> Ordering {
        other.at.total_cmp(&self.at).then_with(|| other.task.cmp(&self.task))
    }
}

impl Waiting {
    /// Holds `task` until `at`.
    pub(crate) fn push(&mut self, at: f64, task: usize) {
        self.heap.push(Wake { at, task });
    }

    /// When the earliest held task wakes.
    pub(crate) fn next(&self) -> Option<f64> {
        self.heap.peek().map(|w| w.at)
    }

    /// Whether no task is held.
    pub(crate) fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// Releases, in order, every task that wakes at or before `now`.
    pub(crate) fn pop_due(&mut self, now: f64, mut release: impl FnMut(usize)) {
        while let Some(w) = self.heap.peek().copied() {
            if w.at > now {
                break;
            }
            self.heap.pop();
            release(w.task);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waiting_pops_earliest_first_and_ties_by_task() {
        let mut w = Waiting::default();
        w.push(3.0, 1);
        w.push(1.0, 7);
        w.push(1.0, 2);
        w.push(2.0, 0);
        assert_eq!(w.next(), Some(1.0));
        let mut out = Vec::new();
        w.pop_due(2.0, |t| out.push(t));
        assert_eq!(out, [2, 7, 0]);
        assert_eq!(w.next(), Some(3.0));
        w.pop_due(2.5, |t| out.push(t));
        assert_eq!(out.len(), 3);
        w.pop_due(3.0, |t| out.push(t));
        assert!(w.is_empty() && out == [2, 7, 0, 1]);
    }

    #[test]
    fn negative_and_non_finite_latencies_are_refused_by_name() {
        assert_eq!(Latency::ZERO.validate(), Ok(()));
        assert_eq!(A100_LATENCY.validate(), Ok(()));
        let bad = Latency { link: -US, ..Latency::ZERO };
        let e = bad.validate().unwrap_err().to_string();
        assert!(e.starts_with("latency.link_us: ") && e.contains("-1"), "{e}");
        let e = Latency { network: f64::INFINITY, ..Latency::ZERO }.validate().unwrap_err().to_string();
        assert!(e.starts_with("latency.network_us: "), "{e}");
        let e = Latency { kernel_launch: f64::NAN, ..Latency::ZERO }.validate().unwrap_err().to_string();
        assert!(e.starts_with("latency.kernel_launch_us: "), "{e}");
    }
}

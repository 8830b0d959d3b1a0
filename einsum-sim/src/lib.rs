//! Machine topologies and an event-driven fluid simulator of data movement on them
//! (the cost model of Section 5.2 of the paper).
//!
//! - [`Topology`]: sites (GPUs) with HBM bandwidth and capacity, compute rates and optional
//!   endpoint caps; directed links; a fallback for unlinked pairs (a non-blocking switch, or
//!   one shared resource such as the DGX-V100's PCIe bridge); optionally several nodes
//!   ([`Nodes`]) whose sites reach each other through per-site NICs and a [`Fabric`]; and a
//!   route (the list of resources crossed) for every ordered pair of distinct sites. Presets
//!   by name ([`Topology::preset`], [`PRESETS`], [`NODE_PRESETS`] such as `dgx-h100x4`) or
//!   JSON files ([`Topology::load`]).
//! - [`simulate`]: runs a DAG of [`SimTask`]s (transfers, multicasts, local aggregations,
//!   kernels) as fluid flows that share every resource they cross max-min fairly,
//!   recomputing rates at each start and finish, and returns a [`Trace`]. Kernels are flows
//!   through a per-site compute resource, so kernels on one site share it. Under the
//!   topology's [`LinkService::Fifo`] (the presets'), the transfers of one ordered pair of
//!   sites are served one at a time in issue order, as a CUDA stream or an NCCL channel
//!   serves them, so pipelined chunks arrive one after the other (`service.rs`).
//! - [`Roofline`]: kernel times from FLOPs, bytes and per-class efficiencies, with the wave
//!   quantization of tiled kernels on the site's SMs (`efficiency.rs`), for predicting whole
//!   plans.
//! - [`Latency`]: what a task waits before its flows start: kernel launch, and transfer
//!   setup per kind of path (link or switch, shared bus, network). Zero unless a topology
//!   sets it; the presets carry public figures (`latency.rs`).
//! - Lower bounds for collectives ([`all_reduce_bound`] and friends).
//! - [`chrome_trace`]: a [`Trace`] (and a backend's measured task timings) as Chrome trace
//!   JSON, for Perfetto.
//!
//! Units: sizes in bytes with [`GB`] = 1e9 bytes, bandwidths in bytes/s, times in seconds
//! (constructors such as [`Link::gbps`] take GB/s).
//!
//! **Architecture invariant:** this crate knows nothing about operators, specs or exchange
//! programs. It moves bytes between sites and runs kernels given their FLOPs and bytes; what
//! they mean is its callers' business.
//!
//! # Example: the paper's Example 5.1 on a DGX-H100
//!
//! ```
//! use einsum_sim::{GB, SiteId, SimTask, SimGraph, Topology};
//!
//! let h100 = Topology::preset("dgx-h100")?;
//! let mut g = SimGraph::new();
//! let a = g.push(SimTask::transfer("A @ 0 -> 1", SiteId(0), SiteId(1), GB));
//! let b = g.push(SimTask::transfer("B @ 1 -> 0", SiteId(1), SiteId(0), GB));
//! g.push(SimTask::aggregate("A+B @ 0", SiteId(0), 2.0 * GB, GB).after([b]));
//! g.push(SimTask::aggregate("A+B @ 1", SiteId(1), 2.0 * GB, GB).after([a]));
//! let trace = g.simulate(&h100)?;
//! assert!((trace.completion_ms() - 3.1).abs() < 0.03 * 3.1);
//! assert!((trace.transfer_time_ms() - 2.2).abs() < 0.03 * 2.2);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # The topology file format
//!
//! A JSON object in human units (GB/s, GB, TFLOP/s); the presets ship as examples under
//! `einsum-sim/topologies/`.
//!
//! ```json
//! {
//!   "name": "my-box",
//!   "sites": 4,
//!   "site": {"hbm_gbps": 900, "hbm_gb": 32, "tflops": {"f16": 125, "bf16": 15.7, "f32": 15.7}, "sms": 80},
//!   "links": [
//!     {"a": 0, "b": 1, "gbps": 50},
//!     {"a": 2, "b": 3, "gbps": 25}
//!   ],
//!   "fallback": {"shared": "pcie-bridge", "gbps": 15.75},
//!   "latency": {"kernel_launch_us": 2, "link_us": 3, "bus_us": 10, "network_us": 5},
//!   "service": "fifo"
//! }
//! ```
//!
//! - `name` (required): a string.
//! - `sites` (required): a count `n`, every site being `site`; or an array of `n` site
//!   objects, each field of which overrides `site`.
//! - `site` (required when `sites` is a count): a site object: `hbm_gbps` (HBM bandwidth),
//!   `hbm_gb` (HBM capacity), `tflops` (`{"f16", "bf16", "f32"}`, dense peak), and optional
//!   `egress_gbps` / `ingress_gbps` (caps on everything the site sends / receives, like an
//!   NVSwitch port) and `sms` (its streaming multiprocessors, a positive integer: tiled
//!   kernels with fewer output tiles than a whole number of waves lose throughput; without
//!   it kernels reach their roofline at any size).
//! - `links` (default `[]`): `{"a", "b", "gbps"}` joins distinct sites `a` and `b` (0-based;
//!   each pair once) with `gbps` in *each* direction.
//! - `fallback` (optional): what carries traffic between sites of one node that no link
//!   joins: `"switch"` (a non-blocking switch; only endpoint caps limit it) or
//!   `{"shared": NAME, "gbps": G}` (one resource of `G` GB/s total shared by all such
//!   transfers; on a machine of several nodes, one per node, named `NAME@nodeK`). Without it
//!   every pair of one node must be linked, and an unlinked pair is an error.
//! - `nodes` (optional): a count `k` of nodes, sites `i·n/k .. (i+1)·n/k` in node `i` (`k`
//!   must divide `n`); or an array giving each site's node, numbered from 0 without gaps.
//!   Without it (or with 1) the machine is one node. With several nodes, every site needs a
//!   `nic_gbps` (its NIC, in each direction: everything it sends to or receives from
//!   other nodes crosses it), links may join only sites of one node, and `fabric` is
//!   required: `"non-blocking"` (only the two NICs limit a transfer between nodes) or
//!   `{"shared": NAME, "gbps": G}` (one resource of `G` GB/s total that all traffic between
//!   nodes also crosses).
//! - `latency` (optional): `{"kernel_launch_us", "link_us", "bus_us", "network_us"}`, each
//!   optional, in µs, zero or more, **0 by default** (a file without `latency` is the pure
//!   fluid model): the launch of every kernel, aggregation or local copy; the setup of a
//!   transfer over a link or a `"switch"` fallback; through a shared fallback; between
//!   nodes. A task waits its latency before its bytes start to flow ([`Latency`]).
//! - `service` (optional): `"fair"` (**the default**: every transfer shares every resource
//!   it crosses max-min fairly, the paper's model) or `"fifo"` (the transfers from one site
//!   to another are served one at a time, in issue order; different pairs share fairly; see
//!   [`LinkService`]).
//!
//! Two DGX-H100 nodes, as the `dgx-h100x2` preset:
//!
//! ```json
//! {
//!   "name": "dgx-h100x2",
//!   "sites": 16,
//!   "site": {"hbm_gbps": 3350, "hbm_gb": 80, "tflops": {"f16": 989, "bf16": 989, "f32": 67},
//!            "egress_gbps": 450, "ingress_gbps": 450, "nic_gbps": 50, "sms": 132},
//!   "fallback": "switch",
//!   "nodes": 2,
//!   "fabric": "non-blocking",
//!   "latency": {"kernel_launch_us": 2, "link_us": 3, "bus_us": 10, "network_us": 5},
//!   "service": "fifo"
//! }
//! ```
//!
//! Every physical value must lie in its plausible range ([`plausible`]: bandwidths
//! 1e-3 to 1e7 GB/s, capacities 1e-3 to 1e5 GB, compute rates 1e-3 to 1e5 TFLOP/s,
//! latencies 0 to 1e6 µs, SM counts 1 to 1e5), which refuses zero (but for latencies), negative, overflowing and
//! absurd values; unknown and repeated fields are errors; every error names its field, as in
//! `links[3].gbps: -1 GB/s is out of range: a bandwidth must lie in [0.001, 1e7] GB/s`. [`Topology::to_json_string`]
//! writes this format and loading it back gives an equal topology.
#![warn(missing_docs)]

mod bounds;
pub mod chrome_trace;
mod efficiency;
mod error;
mod json;
mod latency;
mod maxmin;
mod nodes;
pub mod plausible;
mod presets;
mod roofline;
mod service;
mod simulate;
mod task;
mod topology;
mod trace;

pub use bounds::{all_gather_bound, all_reduce_bound, all_to_all_bound, broadcast_bound, reduce_scatter_bound};
pub use efficiency::{
    A100_SMS, B200_SMS, H100_SMS, TILE_ELEMENTS, V100_SMS, is_tiled, kernel_wave_efficiency, output_tiles,
    wave_efficiency,
};
pub use error::{SimError, TopologyError};
pub use latency::{
    A100_LATENCY, CUDA_GRAPH_KERNEL_LAUNCH_US, H100_LATENCY, INFINIBAND_TRANSFER_US, Latency, NVL72_LATENCY,
    NVLINK_TRANSFER_US, PCIE_BRIDGE_TRANSFER_US, US, V100_LATENCY,
};
pub use nodes::{Fabric, Nodes};
pub use presets::{
    GPUS_PER_NODE, NODE_PRESETS, PCIE_BRIDGE, PRESETS, V100_DOUBLE_LINKS, V100_SINGLE_LINKS, preset_forms,
    scaled_preset,
};
pub use roofline::{
    ATTENTION_COMPUTE_EFFICIENCY, ELEMENTWISE_COMPUTE_EFFICIENCY, Efficiency, KernelClass, KernelWork,
    MATMUL_COMPUTE_EFFICIENCY, MEMORY_EFFICIENCY, Roofline,
};
pub use service::LinkService;
pub use simulate::{Workspace, simulate, simulate_completion, simulate_end_times, simulate_end_times_in};
pub use task::{SimGraph, SimTask, SimTaskId, TaskKind};
pub use topology::{
    ComputeRates, Fallback, GB, Link, MAX_SITES, Precision, Resource, ResourceId, ResourceKind, Site, SiteId, TFLOP,
    Topology,
};
pub use trace::{ResourceUsage, TaskTrace, Trace};

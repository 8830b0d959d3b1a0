//! Cost models: what a spec costs, split so that optimizers can separate the part that
//! depends on how the inputs arrive (repartition) from the part that does not.

use std::fmt;
use std::sync::Arc;

use einsum_core::{Aggregation, DType, TensorDesc, TensorType};
use einsum_joinagg::{AbstractOperator, FunctionSpec, JoinAggSpec};
use einsum_sim::{ComputeRates, KernelWork, Precision, Roofline, Site, SiteId, Topology};

use crate::{Error, Result};

/// The tiling-independent cost of one spec, in the model's unit.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SpecCost {
    /// Sub-cost (2): shipping every function spec its input blocks, summed over the inputs
    /// the model charges (see [`CostModel::spec`]; [`Time`] counts only the copies of a
    /// block beyond the first, which the producer already holds).
    pub join: f64,
    /// Sub-cost (3): combining the partial outputs that share an output box.
    pub aggregation: f64,
    /// Running the slowest device's kernel (zero in models that ignore compute).
    pub compute: f64,
}

impl SpecCost {
    /// The sum of the parts.
    pub fn total(&self) -> f64 {
        self.join + self.aggregation + self.compute
    }
}

/// Prices specs and repartitions.
///
/// # Design
/// The paper's cost (Section 4.3) is a sum of one term per input that depends only on
/// whether the producer's tiling equals the blocks the spec needs (repartition), plus terms
/// of the spec alone. Every model keeps that shape, which is what lets the dynamic program
/// minimise input by input. A model therefore answers two questions: what does moving a
/// tensor from one tiling into another cost (by default the same for every pair of
/// tilings, [`repartition`](Self::repartition)), and what does a spec cost by itself.
///
/// # Extending
/// A model from any crate implements this trait and is handed to the driver as a value
/// (`einsummable::CompileOptions::cost` takes an `Arc<dyn CostModel>`, and the experiments
/// take cost models as values too); the driver's `einsummable::names::cost_models` table
/// only names this crate's models for the command line and the Python package.
///
/// # Example
/// A model in bytes: a repartition moves the whole tensor once, and a spec's join ships
/// every function spec the bytes of its input blocks, resident inputs included.
///
/// ```
/// use einsum_core::TensorDesc;
/// use einsum_joinagg::{AbstractOperator, JoinAggSpec};
/// use einsum_logical::{CostModel, Dp, LogicalOptimizer, SpecCost};
/// use einsum_ops::einsum::Einsum;
///
/// #[derive(Debug)]
/// struct Bytes;
///
/// impl CostModel for Bytes {
///     fn name(&self) -> &str {
///         "bytes"
///     }
///
///     fn unit(&self) -> &'static str {
///         "bytes"
///     }
///
///     fn repartition(&self, desc: &TensorDesc, _p: usize) -> f64 {
///         desc.size_bytes() as f64
///     }
///
///     fn spec(&self, op: &dyn AbstractOperator, spec: &JoinAggSpec, _p: usize, _resident: &[bool]) -> SpecCost {
///         let block_bytes = |k: usize, f: &einsum_joinagg::FunctionSpec| {
///             (f.inputs[k].volume() * op.inputs()[k].dtype.size_bytes()) as f64
///         };
///         let join = spec.functions.iter().map(|f| (0..op.inputs().len()).map(|k| block_bytes(k, f)).sum::<f64>()).sum();
///         SpecCost { join, ..SpecCost::default() }
///     }
/// }
///
/// let mut comp = einsum_joinagg::Computation::new();
/// let a = TensorDesc::of(&[("i", 64), ("k", 64)], einsum_core::DType::F32)?;
/// let b = TensorDesc::of(&[("k", 64), ("j", 64)], einsum_core::DType::F32)?;
/// let (ai, bi) = (comp.add_input("a", a.clone()), comp.add_input("b", b.clone()));
/// comp.add_op("mm", Box::new(Einsum::matmul(&a, &b)?), &[ai, bi])?;
///
/// let plan = Dp.optimize(&comp, 2, &Bytes)?;
/// assert_eq!((plan.cost_model.as_str(), plan.unit), ("bytes", "bytes"));
/// // Splitting i (or j) ships half of one operand and all of the other to each device,
/// // 2 × (8 KiB + 16 KiB); splitting k ships half of each, 2 × (8 KiB + 8 KiB), and this
/// // model does not charge the aggregation that split needs, so the DP takes it.
/// assert_eq!(plan.total, 2.0 * (8192.0 + 8192.0));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait CostModel: fmt::Debug + Send + Sync {
    /// The model's name, as given on the command line (`proxy`, `time`).
    fn name(&self) -> &str;

    /// The unit of its costs (`elements`, `seconds`).
    fn unit(&self) -> &'static str;

    /// Sub-cost (1): repartitioning a whole tensor of type `desc` over `p` devices, when
    /// the model does not look at the two tilings (see
    /// [`repartition_between`](Self::repartition_between)).
    fn repartition(&self, desc: &TensorDesc, p: usize) -> f64;

    /// Sub-cost (1) between two tilings: moving a tensor of type `desc` from the distinct
    /// blocks `from` (a producer's output tiling, one copy of each block) to the distinct
    /// blocks `to` (what a consumer's spec needs, one copy of each; the join sub-cost prices
    /// further copies). By default the tilings are ignored and this is
    /// [`repartition`](Self::repartition). [`Problem::new`](crate::Problem::new) asks once
    /// per pair of block sets and dtype, so the answer must depend on nothing else of `desc`.
    fn repartition_between(&self, desc: &TensorDesc, from: &[TensorType], to: &[TensorType], p: usize) -> f64 {
        let _ = (from, to);
        self.repartition(desc, p)
    }

    /// Sub-costs (2) and (3), and compute, of running `spec` of `op` on `p` devices, where
    /// `resident[k]` says that input `k` of `op` is a computation input ([`Source::Input`](crate::Source::Input)),
    /// loaded in the spec's layout before the run, rather than an operator's output. The
    /// model decides per input whether its join is charged: the paper's proxy charges every
    /// input, the [`Time`] model skips resident ones. An input without an entry is not
    /// resident (a model never assumes an input it was not told about is).
    ///
    /// This is all a model learns of where inputs come from (a spec's cost cannot depend on
    /// the producer's tiling, which the optimizer charges as repartitioning), so operators
    /// that are equal and read equally resident inputs cost the same, and
    /// [`Problem::new`](crate::Problem::new) prices such operators once.
    fn spec(&self, op: &dyn AbstractOperator, spec: &JoinAggSpec, p: usize, resident: &[bool]) -> SpecCost;

    /// Other pricings of the same machine, for what the model cannot decide by itself: a
    /// strategy's optimum under each is scored by whole-plan prediction beside its own plan
    /// and its alternatives (`einsum_compile`'s refinement), so that where the machine
    /// behaves as a variant says, the variant's plan wins there. None by default; the
    /// [`Time`] model offers one ([`Time::one_round_gathers`]).
    fn variants(&self) -> Vec<Arc<dyn CostModel>> {
        Vec::new()
    }
}

/// Σ over function specs of the elements of their input blocks, per input.
pub(crate) fn join_elements(spec: &JoinAggSpec, inputs: usize) -> Vec<f64> {
    (0..inputs).map(|k| spec.functions.iter().map(|f| f.inputs[k].volume() as f64).sum()).collect()
}

/// Per output, its distinct boxes and how many function specs produce each
/// ([`JoinAggSpec::output_multiplicities`]), computed once for the sums below.
pub(crate) fn multiplicities(spec: &JoinAggSpec, outputs: usize) -> Vec<Vec<(TensorType, usize)>> {
    (0..outputs).map(|j| spec.output_multiplicities(j)).collect()
}

/// Σ over distinct output boxes appearing `m` times of `(m - 1)·|partial|`, per output, from
/// the [`multiplicities`]: `|partial|` is the box's volume, or under a row-wise `agg`
/// ([`Aggregation::Softmax`]) that of the partial the box's copies are, its statistics column
/// included ([`Aggregation::partial_type`]).
pub(crate) fn aggregation_elements(multiplicities: &[Vec<(TensorType, usize)>], agg: Aggregation) -> Vec<f64> {
    multiplicities
        .iter()
        .map(|boxes| boxes.iter().map(|(b, m)| ((m - 1) * agg.partial_type(b, *m > 1).volume()) as f64).sum())
        .collect()
}

/// One function spec of `op` as the roofline times it ([`Roofline::kernel_seconds`]): its
/// class, FLOPs and HBM bytes as the operator gives them, the elements of all its output
/// blocks (how many tiles it runs as), at the precision of its first output's dtype. The
/// whole-plan prediction (`einsum_compile::predict`) and the [`Time`] model both build their
/// kernels with it, so they time every kernel alike.
pub fn kernel_work(op: &dyn AbstractOperator, f: &FunctionSpec) -> KernelWork {
    let dtype = op.outputs().first().map_or(DType::F32, |d| d.dtype);
    KernelWork {
        class: op.kernel_class(),
        flops: op.flops(f),
        bytes: op.bytes(f),
        output_elements: f.outputs.iter().map(|o| o.volume() as f64).sum(),
        precision: precision(dtype),
    }
}

/// The compute rate a kernel storing `dtype` runs at (an index-producing kernel, such as an
/// argmax, computes in f32).
fn precision(dtype: DType) -> Precision {
    match dtype {
        DType::F32 | DType::I32 => Precision::F32,
        DType::F16 => Precision::F16,
        DType::BF16 => Precision::BF16,
    }
}

/// The paper's communication proxy (Section 4.3), in numbers of elements: repartition
/// `|T|`, join `Σ_F Σ_k |T̂_k|`, aggregation `Σ (m - 1)·|box|`. It assumes every spec is
/// load-balanced and ignores compute, and it charges the join of every input, computation
/// inputs included, exactly as the paper defines it.
#[derive(Clone, Copy, Debug, Default)]
pub struct PaperProxy;

impl CostModel for PaperProxy {
    fn name(&self) -> &str {
        "proxy"
    }

    fn unit(&self) -> &'static str {
        "elements"
    }

    fn repartition(&self, desc: &TensorDesc, _p: usize) -> f64 {
        desc.shape().iter().product::<usize>() as f64
    }

    fn spec(&self, op: &dyn AbstractOperator, spec: &JoinAggSpec, _p: usize, _resident: &[bool]) -> SpecCost {
        SpecCost {
            join: join_elements(spec, op.inputs().len()).iter().sum(),
            aggregation: aggregation_elements(&multiplicities(spec, op.outputs().len()), op.aggregation()).iter().sum(),
            compute: 0.0,
        }
    }
}

/// The per-device figures of a topology that the [`Time`] model needs: the slowest device's
/// compute rates, HBM bandwidth and SM count, its bandwidth inside its node and to other
/// nodes (each direction), the node size, and the machine's kernel launch and transfer setup
/// latencies.
#[derive(Clone, Debug, PartialEq)]
pub struct Machine {
    /// The topology's name.
    pub name: String,
    /// Dense FLOP/s of the slowest device, per precision.
    pub compute: ComputeRates,
    /// HBM bytes per second of the slowest device.
    pub hbm_bandwidth: f64,
    /// Streaming multiprocessors of the device with the fewest (`None` when some device's
    /// count is not given: kernels are then not quantized in waves).
    pub sms: Option<usize>,
    /// Seconds to launch one kernel ([`einsum_sim::Latency::kernel_launch`]).
    pub kernel_launch: f64,
    /// Devices in the smallest node (every device on a machine of one node).
    pub node_size: usize,
    /// Bytes per second the slowest device sends to the other devices of its node, each
    /// direction ([`Topology::node_injection_bandwidth`]); infinite on a machine of one
    /// device, which never communicates.
    pub node_bandwidth: f64,
    /// Bytes per second of the slowest device's NIC to other nodes
    /// ([`Topology::network_bandwidth`]); infinite on a machine of one node.
    pub network_bandwidth: f64,
    /// Seconds to set up one transfer inside a node, on its slowest kind of path
    /// ([`Topology::transfer_latency`]); zero on a machine of one device.
    pub node_latency: f64,
    /// Seconds to set up one transfer between nodes ([`einsum_sim::Latency::network`]);
    /// zero on a machine of one node.
    pub network_latency: f64,
}

/// The topology preset called `name` or, when `name` is the path of a file, the custom
/// topology it describes ([`Topology::named`]).
fn load_topology(name: &str) -> Result<Topology> {
    Topology::named(name).map_err(|e| Error::Topology(e.to_string()))
}

impl Machine {
    /// The figures of a topology read from `einsum-sim`: the slowest device's compute rates,
    /// HBM bandwidth, SM count, [`Topology::node_injection_bandwidth`] and
    /// [`Topology::network_bandwidth`], the smallest node, and the topology's latencies.
    pub fn from_topology(topology: &Topology) -> Machine {
        let sites = topology.sites();
        let n = sites.len();
        let slowest = |f: fn(&ComputeRates) -> f64| sites.iter().map(|s| f(&s.compute)).fold(f64::INFINITY, f64::min);
        let least =
            |f: &dyn Fn(SiteId) -> Option<f64>| (0..n).filter_map(|i| f(SiteId(i))).fold(f64::INFINITY, f64::min);
        let node_latency = (0..n)
            .flat_map(|a| (0..n).map(move |b| (SiteId(a), SiteId(b))))
            .filter(|&(a, b)| a != b && topology.node(a) == topology.node(b))
            .filter_map(|(a, b)| topology.transfer_latency(a, b))
            .fold(0.0, f64::max);
        let several = topology.num_nodes() > 1;
        Machine {
            name: topology.name().to_string(),
            compute: ComputeRates { f16: slowest(|c| c.f16), bf16: slowest(|c| c.bf16), f32: slowest(|c| c.f32) },
            hbm_bandwidth: sites.iter().map(|s| s.hbm_bandwidth).fold(f64::INFINITY, f64::min),
            sms: sites.iter().map(|s| s.sms).collect::<Option<Vec<_>>>().and_then(|v| v.into_iter().min()),
            kernel_launch: topology.latency().kernel_launch,
            node_size: topology.nodes().and_then(|nodes| nodes.sizes().into_iter().min()).unwrap_or(n),
            node_bandwidth: least(&|s| topology.node_injection_bandwidth(s)),
            network_bandwidth: least(&|s| topology.network_bandwidth(s)),
            node_latency,
            network_latency: if several { topology.latency().network } else { 0.0 },
        }
    }

    /// The slowest device as a [`Site`], for [`Roofline::kernel_seconds`] (its HBM capacity,
    /// which no kernel time reads, is left at zero).
    pub fn device(&self) -> Site {
        Site {
            hbm_bandwidth: self.hbm_bandwidth,
            hbm_capacity: 0.0,
            compute: self.compute,
            egress: None,
            ingress: None,
            nic: None,
            sms: self.sms,
        }
    }

    /// The machine of a topology preset (see `einsum_sim::PRESETS` and `NODE_PRESETS`) or,
    /// when `name` is the path of a file, of the custom topology it describes.
    pub fn by_name(name: &str) -> Result<Machine> {
        Ok(Machine::from_topology(&load_topology(name)?))
    }

    /// FLOP/s of one device for kernels storing `dtype`.
    pub fn flops(&self, dtype: DType) -> f64 {
        self.compute.rate(precision(dtype))
    }
}

/// Predicted seconds on a machine: what the whole-plan prediction charges, priced operator
/// by operator. Its figures come from the topology ([`Machine`]); its formulas are those of
/// the bandwidth-optimal collectives that the searched exchange programs approach (the
/// searched synthesis seeds hierarchical reductions and multicasts, `einsum_exprog::synth`),
/// so that the optimizer minimises what the plan will be predicted to take.
///
/// **Kernels are timed by the same roofline as the whole-plan prediction**
/// ([`Roofline::kernel_seconds`] of [`kernel_work`], its documented efficiencies by
/// default): the slowest function spec's FLOPs over the efficient share of the device's peak
/// (scaled by the wave quantization of its output tiles on the device's SMs) or its HBM
/// bytes over the efficient share of the bandwidth, whichever is larger, plus the kernel
/// launch. So a causal query-block split of attention pays for its last, largest block.
///
/// **Communication is priced on the machine's hierarchy.** An exchange phase moves bytes
/// over the devices' links inside their nodes (NVLink through a switch) and over their NICs
/// between nodes; both are spread over the `p` devices and pipeline, so a phase takes the
/// setup latency of the paths it uses plus the larger of `node bytes / (p · node
/// bandwidth)` and `network bytes / (p · NIC bandwidth)`, and never less than what its
/// busiest receiver takes in at its node bandwidth. Groups of devices that exchange (the
/// readers of one block, the partial producers of one box) are assumed packed into as few
/// nodes as their size allows, as the searched placements do where they can.
///
/// **Repartitions move what the two tilings differ by**
/// ([`CostModel::repartition_between`]): each target block is assembled on the device that
/// can already hold the source block overlapping it most, and receives the rest; when its
/// pieces come from more holders than a node has devices, those beyond cross between nodes.
/// Target blocks that overlap each other (the key/value prefixes of a causal query split)
/// are received unevenly: the largest whole by one device, and what crosses into a node is
/// shared by its devices.
///
/// **Joins move the copies beyond the first.** A computation input ([`Source::Input`](crate::Source::Input):
/// weights, the matrices of a chain) is resident, loaded in every block a function spec
/// reads before the run (the prediction treats loads as free), so its join costs nothing.
/// For a produced input, the first copy of each block is the repartition's (or the
/// producer's, when the tilings agree) and every further copy travels: `Σ (m - 1)·|block|`
/// over the node links for a block read by `m` function specs, and once to each further node
/// its readers span.
///
/// **Aggregations are reduce-scatters.** The `m` partial copies of a box are combined by
/// their producers in parallel with the other boxes: inside a node each holds and sums a
/// slice (`(m - 1)/m·|box|` received per device), across `n` nodes the node partials meet
/// over all the node's NICs (`(n - 1)/n·|box| / g` per NIC, `g` devices per node), and each
/// device's sum reads the partial slices and writes its own through HBM. The consumer's
/// tiling is the repartition's business, as everywhere.
///
/// **Gathers into copies: one setup or two.** A consumer that reads copies of blocks the
/// producer left in other pieces (an all-gather: each device reads the whole tensor) pays
/// the repartition's setup and its join's. One exchange program moves both, and how many
/// setups the run pays depends on how its transfers queue on the links, which the model
/// does not see: on one DGX H100 a decode step's gathers cost about one setup each, on two
/// they cost more. So the default charges two, and [`CostModel::variants`] offers the model
/// that charges one ([`Time::one_round_gathers`]), whose optimum the refinement scores.
#[derive(Clone, Debug)]
pub struct Time {
    /// The machine whose figures are used.
    pub machine: Machine,
    /// How close each class of kernel gets to the machine's peaks.
    pub roofline: Roofline,
    /// Whether a repartition into blocks the consumer reads as copies rides in its join's
    /// exchange, paying no setup of its own (see the type's docs).
    pub one_round_gathers: bool,
}

impl Time {
    /// The model for a machine, with the default [`Roofline`] efficiencies.
    pub fn on(machine: Machine) -> Self {
        Self { machine, roofline: Roofline::default(), one_round_gathers: false }
    }

    /// One exchange phase moving `node` bytes over the devices' links inside their nodes and
    /// `network` bytes over their NICs, each spread over the `p` devices, while one device
    /// receives `busiest` bytes: the setups of the paths it uses and the slowest of the three
    /// (they pipeline); nothing when it moves nothing.
    fn exchange(&self, node: f64, network: f64, busiest: f64, p: usize) -> f64 {
        if node == 0.0 && network == 0.0 {
            return 0.0;
        }
        let (m, p) = (&self.machine, p as f64);
        let setup = m.node_latency + if network > 0.0 { m.network_latency } else { 0.0 };
        let spread = (node / (p * m.node_bandwidth)).max(network / (p * m.network_bandwidth));
        setup + spread.max(busiest / m.node_bandwidth)
    }

    /// A local sum or copy moving `bytes` through one device's HBM, with its launch (nothing
    /// when it moves nothing).
    fn copy(&self, bytes: f64) -> f64 {
        if bytes == 0.0 {
            return 0.0;
        }
        self.machine.kernel_launch + self.roofline.copy_bytes(bytes) / self.machine.hbm_bandwidth
    }

    /// A kernel's seconds: its launch and its roofline time on the machine's slowest device.
    fn kernel(&self, work: &KernelWork) -> f64 {
        self.machine.kernel_launch + self.roofline.kernel_seconds(&self.machine.device(), work)
    }

    /// How many nodes a group of `m` devices packed into nodes spans.
    fn nodes(&self, m: usize) -> f64 {
        m.div_ceil(self.machine.node_size.max(1)) as f64
    }

    /// The join sub-cost (see the type's docs).
    fn join(&self, op: &dyn AbstractOperator, spec: &JoinAggSpec, p: usize, resident: &[bool]) -> f64 {
        let several = p > self.machine.node_size;
        let (mut node, mut network) = (0.0, 0.0);
        let mut received = vec![0.0; spec.functions.len()];
        for (k, d) in op.inputs().iter().enumerate() {
            if resident.get(k).copied().unwrap_or(false) {
                continue;
            }
            let width = d.dtype.size_bytes() as f64;
            for (block, m) in spec.input_multiplicities(k) {
                let bytes = block.volume() as f64 * width;
                node += (m - 1) as f64 * bytes;
                if several {
                    network += (self.nodes(m) - 1.0) * bytes;
                }
            }
            // What a function spec reads beyond its share of the tensor arrives at its device.
            let share = d.shape().iter().product::<usize>() as f64 / p as f64;
            for (r, f) in received.iter_mut().zip(&spec.functions) {
                *r += (f.inputs[k].volume() as f64 - share).max(0.0) * width;
            }
        }
        self.exchange(node, network, received.into_iter().fold(0.0, f64::max), p)
    }

    /// The aggregation sub-cost (see the type's docs).
    fn aggregation(&self, op: &dyn AbstractOperator, spec: &JoinAggSpec, p: usize) -> f64 {
        let g = self.machine.node_size.max(1) as f64;
        let (mut volume, mut slowest, mut summed, mut crosses) = (0.0, 0.0_f64, 0.0_f64, false);
        for (j, d) in op.outputs().iter().enumerate() {
            for (b, m) in spec.output_multiplicities(j).into_iter().filter(|&(_, m)| m > 1) {
                // The partials' bytes: a row-wise ⊕'s carry their statistics column.
                let bytes = (op.aggregation().partial_type(&b, true).volume() * d.dtype.size_bytes()) as f64;
                let (inside, n) = ((m as f64).min(g), self.nodes(m));
                volume += (m - 1) as f64 * bytes;
                crosses |= n > 1.0;
                slowest = slowest
                    .max((inside - 1.0) / inside * bytes / self.machine.node_bandwidth)
                    .max((n - 1.0) / n * bytes / (g * self.machine.network_bandwidth));
                summed = summed.max(bytes * (1.0 + 1.0 / m as f64));
            }
        }
        if volume == 0.0 {
            return 0.0;
        }
        let setup = self.machine.node_latency + if crosses { self.machine.network_latency } else { 0.0 };
        setup + slowest.max(volume / (p as f64 * self.machine.node_bandwidth)) + self.copy(summed)
    }
}

impl CostModel for Time {
    fn name(&self) -> &str {
        "time"
    }

    fn unit(&self) -> &'static str {
        "seconds"
    }

    /// The whole tensor once over the node links: what a pair of tilings the problem did not
    /// price costs ([`repartition_between`](CostModel::repartition_between) prices the rest).
    fn repartition(&self, desc: &TensorDesc, p: usize) -> f64 {
        self.exchange(desc.size_bytes() as f64, 0.0, 0.0, p)
    }

    fn repartition_between(&self, desc: &TensorDesc, from: &[TensorType], to: &[TensorType], p: usize) -> f64 {
        let width = desc.dtype.size_bytes() as f64;
        let g = self.machine.node_size.max(1);
        let (mut node, mut network, mut busiest) = (0.0, 0.0, 0.0_f64);
        for cover in crate::overlap::covers(from, to) {
            let received = (cover.volume - cover.largest) as f64 * width;
            node += received;
            busiest = busiest.max(received);
            if cover.pieces > g {
                network += received * (cover.pieces - g) as f64 / (cover.pieces - 1) as f64;
            }
        }
        let whole = desc.shape().iter().product::<usize>();
        let seconds = if to.iter().map(TensorType::volume).sum::<usize>() > whole {
            self.exchange(node, network / g as f64, busiest, p)
        } else {
            self.exchange(node, network, 0.0, p)
        };
        // Every spec has one function per device, so fewer target blocks than devices means
        // the consumer reads copies, and its join pays a setup.
        if self.one_round_gathers && to.len() < p && seconds > 0.0 {
            seconds - self.machine.node_latency
        } else {
            seconds
        }
    }

    fn variants(&self) -> Vec<Arc<dyn CostModel>> {
        if self.one_round_gathers {
            return Vec::new();
        }
        vec![Arc::new(Time { one_round_gathers: true, ..self.clone() })]
    }

    fn spec(&self, op: &dyn AbstractOperator, spec: &JoinAggSpec, p: usize, resident: &[bool]) -> SpecCost {
        SpecCost {
            join: self.join(op, spec, p, resident),
            aggregation: self.aggregation(op, spec, p),
            compute: spec.functions.iter().map(|f| self.kernel(&kernel_work(op, f))).fold(0.0, f64::max),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn machines_come_from_the_simulators_topologies() {
        let a100 = Machine::by_name("dgx-a100").unwrap();
        assert_eq!((a100.node_size, a100.node_bandwidth, a100.network_bandwidth), (8, 300e9, f64::INFINITY));
        assert_eq!(a100.flops(DType::F16), 312e12);
        assert_eq!(a100.flops(DType::F32), 19.5e12);
        assert_eq!(a100.hbm_bandwidth, 1555e9);
        // A DGX-1V GPU has six NVLink lanes of 25 GB/s (two double links, two single).
        let v100 = Machine::by_name("dgx-v100").unwrap();
        assert!((v100.node_bandwidth - 150e9).abs() < 1.0, "{}", v100.node_bandwidth);
        // Two DGX H100s: NVLink at 450 GB/s inside each, a 400 Gb/s NIC per GPU between.
        let h100 = Machine::by_name("dgx-h100x2").unwrap();
        assert_eq!((h100.node_size, h100.node_bandwidth, h100.network_bandwidth), (8, 450e9, 50e9));
        assert!(h100.network_latency > h100.node_latency, "{h100:?}");
        let err = Machine::by_name("dgx-b200").unwrap_err().to_string();
        assert!(err.contains("dgx-b200") && err.contains("dgx-a100"), "{err}");
    }

    /// The `time` model sees the simulator's latencies and wave quantization: a repartition
    /// pays one transfer setup, a kernel its launch, and a GEMM of 64 tiles on 108 SMs runs at
    /// 64/108 of its roofline; on the same machine without latencies only the waves remain.
    #[test]
    fn time_charges_launches_setups_and_waves() {
        use einsum_ops::einsum::Einsum;
        let a100 = Topology::preset("dgx-a100").unwrap();
        let machine = Machine::from_topology(&a100);
        assert_eq!((machine.sms, machine.kernel_launch, machine.node_latency), (Some(108), 2e-6, 3e-6));
        let time = Time::on(machine);
        let fluid = Time::on(Machine::from_topology(&a100.with_latency(einsum_sim::Latency::ZERO).unwrap()));
        let d = TensorDesc::of(&[("i", 8)], DType::F16).unwrap();
        assert_eq!(fluid.repartition(&d, 8), 16.0 / (8.0 * 300e9));
        assert_eq!(time.repartition(&d, 8), 3e-6 + 16.0 / (8.0 * 300e9));

        let a = TensorDesc::of(&[("i", 1024), ("k", 4096)], DType::F16).unwrap();
        let b = TensorDesc::of(&[("k", 4096), ("j", 1024)], DType::F16).unwrap();
        let mm = Einsum::matmul(&a, &b).unwrap();
        let whole = einsum_joinagg::request_spec(&mm, &vec![1; mm.shardable().len()]).unwrap();
        let roofline = 2.0 * 1024.0 * 1024.0 * 4096.0 / (312e12 * 0.75);
        let waves = 108.0 / 64.0;
        let fluid_compute = fluid.spec(&mm, &whole, 1, &[true, true]).compute;
        assert!((fluid_compute / (roofline * waves) - 1.0).abs() < 1e-12, "{fluid_compute}");
        let compute = time.spec(&mm, &whole, 1, &[true, true]).compute;
        assert!((compute - (2e-6 + roofline * waves)).abs() < 1e-15, "{compute}");
    }

    /// Under [`Time::one_round_gathers`], gathering eight slices into the whole tensor that
    /// all eight function specs read pays no setup of its own (the join pays one), while
    /// gathering them into two halves read once each does; the default pays it in both.
    #[test]
    fn one_round_gathers_drop_the_setup_where_the_join_pays_one() {
        use einsum_core::Tiling;
        let time = Time::on(Machine::by_name("dgx-a100").unwrap());
        let [variant] = &time.variants()[..] else { panic!("one variant") };
        assert!(variant.variants().is_empty(), "the variant offers none of its own");
        let desc = TensorDesc::of(&[("i", 64)], DType::F16).unwrap();
        let whole = desc.tensor_type();
        let slices = Tiling::grid(&whole, &[vec![8, 16, 24, 32, 40, 48, 56]]).unwrap().blocks().to_vec();
        let halves = Tiling::grid(&whole, &[vec![32]]).unwrap().blocks().to_vec();
        let (into_copies, into_halves) = (56.0 * 2.0 / (8.0 * 300e9), 3e-6 + 48.0 * 2.0 / (2.0 * 300e9));
        let copies = |m: &dyn CostModel| m.repartition_between(&desc, &slices, std::slice::from_ref(&whole), 8);
        assert!((copies(variant.as_ref()) - into_copies).abs() < 1e-18);
        assert!((copies(&time) - (3e-6 + into_copies)).abs() < 1e-18);
        for m in [variant.as_ref(), &time as &dyn CostModel] {
            assert!((m.repartition_between(&desc, &slices, &halves, 2) - into_halves).abs() < 1e-18);
        }
    }

    #[test]
    fn a_single_device_machine_never_pays_for_communication() {
        let site = einsum_sim::Site::new(1000.0, 16.0, ComputeRates::tflops(100.0, 100.0, 10.0));
        let one = Topology::new("one", vec![site], vec![], None).unwrap();
        let machine = Machine::from_topology(&one);
        assert_eq!((machine.node_bandwidth, machine.node_latency), (f64::INFINITY, 0.0));
        let time = Time::on(machine);
        let d = TensorDesc::of(&[("i", 8)], DType::F32).unwrap();
        assert_eq!(time.repartition(&d, 1), 0.0);
    }
}

//! Cost models: what a spec costs, split so that optimizers can separate the part that
//! depends on how the inputs arrive (repartition) from the part that does not.

use std::fmt;

use einsum_core::{DType, TensorDesc, TensorType};
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
/// whole tensor into a new tiling cost, and what does a spec cost by itself.
///
/// # Extending
/// A model from any crate implements this trait and is handed to the driver as a value
/// (`einsummable::CompileOptions::cost` takes an `Arc<dyn CostModel>`); the
/// [`cost_models`] table only names this crate's models for the command line.
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

    /// Sub-cost (1): repartitioning a whole tensor of type `desc` over `p` devices.
    fn repartition(&self, desc: &TensorDesc, p: usize) -> f64;

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
}

/// Σ over function specs of the elements of their input blocks, per input.
pub(crate) fn join_elements(spec: &JoinAggSpec, inputs: usize) -> Vec<f64> {
    (0..inputs).map(|k| spec.functions.iter().map(|f| f.inputs[k].volume() as f64).sum()).collect()
}

/// Σ over the distinct blocks of each input of `(m - 1)·|block|`, where `m` is how many
/// function specs read the block: the volume shipped beyond one copy of every block, per
/// input (what [`Time`] charges for the join of a produced input).
pub(crate) fn replica_elements(spec: &JoinAggSpec, inputs: usize) -> Vec<f64> {
    join_elements(spec, inputs)
        .into_iter()
        .enumerate()
        .map(|(k, all)| all - spec.input_blocks(k).iter().map(|b| b.volume() as f64).sum::<f64>())
        .collect()
}

/// Per output, its distinct boxes and how many function specs produce each
/// ([`JoinAggSpec::output_multiplicities`]), computed once for the sums below.
pub(crate) fn multiplicities(spec: &JoinAggSpec, outputs: usize) -> Vec<Vec<(TensorType, usize)>> {
    (0..outputs).map(|j| spec.output_multiplicities(j)).collect()
}

/// Σ over distinct output boxes appearing `m` times of `(m - 1)·|box|`, per output, from
/// the [`multiplicities`].
pub(crate) fn aggregation_elements(multiplicities: &[Vec<(TensorType, usize)>]) -> Vec<f64> {
    multiplicities.iter().map(|boxes| boxes.iter().map(|(b, m)| ((m - 1) * b.volume()) as f64).sum()).collect()
}

/// `⌈log₂ m⌉`: the rounds of a tree that combines `m` whole copies.
fn tree_rounds(m: usize) -> f64 {
    f64::from(usize::BITS - m.saturating_sub(1).leading_zeros())
}

/// The most [`tree_rounds`] any output box needs (0 when no box is produced twice), from the
/// [`multiplicities`].
fn aggregation_rounds(multiplicities: &[Vec<(TensorType, usize)>]) -> f64 {
    multiplicities.iter().flatten().map(|(_, m)| tree_rounds(*m)).fold(0.0, f64::max)
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

/// The compute rate a kernel storing `dtype` runs at.
fn precision(dtype: DType) -> Precision {
    match dtype {
        DType::F32 => Precision::F32,
        DType::F16 => Precision::F16,
        DType::BF16 => Precision::BF16,
    }
}

/// Per output, the largest `⌈log₂ m⌉·|box|` over its distinct boxes produced `m` times: the
/// elements one device must receive, one after another, to ⊕-combine the `m` copies of a box
/// when they travel whole. A tree reduction (the fastest way to combine whole copies) takes
/// `⌈log₂ m⌉` rounds, each of which moves a full copy over some device's link; rounds of one
/// box cannot overlap, so no spreading over the `p` devices' links can beat it.
pub(crate) fn aggregation_round_elements(multiplicities: &[Vec<(TensorType, usize)>]) -> Vec<f64> {
    multiplicities
        .iter()
        .map(|boxes| boxes.iter().map(|(b, m)| tree_rounds(*m) * b.volume() as f64).fold(0.0, f64::max))
        .collect()
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
            aggregation: aggregation_elements(&multiplicities(spec, op.outputs().len())).iter().sum(),
            compute: 0.0,
        }
    }
}

/// The per-device figures of a topology that the [`Time`] model needs: the slowest
/// device's compute rates, HBM bandwidth, SM count and interconnect bandwidth (each
/// direction), and the machine's kernel launch and slowest transfer setup latencies.
#[derive(Clone, Debug, PartialEq)]
pub struct Machine {
    /// The topology's name.
    pub name: String,
    /// Dense FLOP/s of the slowest device, per precision.
    pub compute: ComputeRates,
    /// HBM bytes per second of the slowest device.
    pub hbm_bandwidth: f64,
    /// Interconnect bytes per second of the slowest device, each direction (see
    /// [`Machine::from_topology`]); infinite on a machine of one device.
    pub link_bandwidth: f64,
    /// Streaming multiprocessors of the device with the fewest (`None` when some device's
    /// count is not given: kernels are then not quantized in waves).
    pub sms: Option<usize>,
    /// Seconds to launch one kernel ([`einsum_sim::Latency::kernel_launch`]).
    pub kernel_launch: f64,
    /// Seconds to set up one transfer on the slowest kind of path
    /// ([`Topology::max_transfer_latency`]); zero on a machine of one device.
    pub transfer_latency: f64,
}

/// The topology preset called `name` or, when `name` is the path of a file, the custom
/// topology it describes.
fn load_topology(name: &str) -> Result<Topology> {
    let topology = if std::path::Path::new(name).is_file() { Topology::load(name) } else { Topology::preset(name) };
    topology.map_err(|e| Error::Topology(e.to_string()))
}

impl Machine {
    /// The figures of a topology read from `einsum-sim`: the smallest of every device's
    /// [`Topology::injection_bandwidth`] (infinite on a single-device machine, which never
    /// communicates), the slowest device's compute rates, HBM bandwidth and SM count, and the
    /// topology's latencies (its slowest kind of transfer path).
    pub fn from_topology(topology: &Topology) -> Machine {
        let sites = topology.sites();
        let link_bandwidth =
            (0..sites.len()).filter_map(|i| topology.injection_bandwidth(SiteId(i))).fold(f64::INFINITY, f64::min);
        let slowest = |f: fn(&ComputeRates) -> f64| sites.iter().map(|s| f(&s.compute)).fold(f64::INFINITY, f64::min);
        Machine {
            name: topology.name().to_string(),
            compute: ComputeRates { f16: slowest(|c| c.f16), bf16: slowest(|c| c.bf16), f32: slowest(|c| c.f32) },
            hbm_bandwidth: sites.iter().map(|s| s.hbm_bandwidth).fold(f64::INFINITY, f64::min),
            link_bandwidth,
            sms: sites.iter().map(|s| s.sms).collect::<Option<Vec<_>>>().and_then(|v| v.into_iter().min()),
            kernel_launch: topology.latency().kernel_launch,
            transfer_latency: topology.max_transfer_latency(),
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

/// Predicted seconds on a machine: the slowest function spec's kernel time plus the three
/// communication sub-costs in bytes, spread over the `p` devices' links
/// (`bytes / (p · bandwidth)`). Unlike the proxy, it sees that a causal query-block split of
/// attention leaves one device with most of the work.
///
/// **Kernels are timed by the same roofline as the whole-plan prediction**
/// ([`Roofline::kernel_seconds`] of [`kernel_work`], its documented efficiencies by
/// default): the larger of the function spec's FLOPs over the efficient share of the
/// device's peak rate (scaled by the wave quantization of its output tiles on the device's
/// SMs) and its HBM bytes ([`AbstractOperator::bytes`]) over the efficient share of its
/// bandwidth, plus the machine's kernel launch latency, so that the optimizer and the
/// prediction agree on what compute costs (a memory-bound normalization is not priced at
/// tensor-core speed, and a kernel split into slivers pays its launch and its idle SMs).
///
/// **Every communication phase pays a transfer setup.** A repartition, a join and an
/// aggregation that move bytes each add the machine's slowest transfer setup latency
/// ([`Machine::transfer_latency`]) once (their transfers run in parallel), and the
/// aggregation's tree of whole copies adds it once per round; the simulator charges the same
/// latency per transfer (`einsum_sim::Latency`).
///
/// **Computation inputs are resident.** The join sub-cost is charged only for inputs an
/// operator produces ([`Source::Op`](crate::Source::Op)); a computation input ([`Source::Input`](crate::Source::Input): weights, the
/// matrices of a chain) costs nothing to join, because the compiled task graph `Load`s it
/// directly into the block each function spec reads, on that spec's device, before the run,
/// and the whole-plan prediction (`einsum_compile::compile`, `predict.rs`) treats loads as
/// free (Section 4.2: inputs may be laid out in any tiling). Charging it would price traffic
/// the run never pays, e.g. replicating a transformer block's weights to every device, and
/// steer the optimizer away from data-parallel splits that are in fact the fastest.
///
/// **A produced input's join counts only the copies beyond the first.** The producer leaves
/// one copy of each of its blocks in place, and the consumer's function specs are placed
/// where their exchange program finds their blocks (`einsum_compile::compile`), so a spec
/// whose blocks the producer already holds moves nothing for them; what must travel is every
/// additional copy: `Σ_blocks (m - 1)·|block|` for a block read by `m` function specs (e.g.
/// the all-gather of a row-split matrix to 8 devices moves 7 copies, not 8). When the
/// producer's tiling differs, the repartition sub-cost pays for laying out that first copy.
///
/// **An aggregation cannot be faster than its tree of whole copies.** Besides the volume
/// `Σ (m - 1)·|box|` spread over all links, a box produced `m` times needs `⌈log₂ m⌉`
/// sequential transfers of a whole copy (exchange programs move each partial block as a whole
/// atom when the consumer reads the box whole), so the aggregation sub-cost is the larger of
/// the two: `max(Σ (m - 1)·|box| / (p · bandwidth), max_box ⌈log₂ m⌉·|box| / bandwidth)`.
/// Spreading alone priced e.g. the four partial sums of a 6144² f16 product split over the
/// contracted index at a quarter of the two rounds the run needs.
#[derive(Clone, Debug)]
pub struct Time {
    /// The machine whose figures are used.
    pub machine: Machine,
    /// How close each class of kernel gets to the machine's peaks.
    pub roofline: Roofline,
}

impl Time {
    /// The model for a machine, with the default [`Roofline`] efficiencies.
    pub fn on(machine: Machine) -> Self {
        Self { machine, roofline: Roofline::default() }
    }

    /// One communication phase moving `bytes` spread over `p` devices' links: its setup
    /// latency and its bytes (nothing when it moves nothing).
    fn seconds(&self, bytes: f64, p: usize) -> f64 {
        if bytes == 0.0 {
            0.0
        } else {
            self.machine.transfer_latency + bytes / (p as f64 * self.machine.link_bandwidth)
        }
    }

    /// A kernel's seconds: its launch and its roofline time on the machine's slowest device.
    fn kernel(&self, work: &KernelWork) -> f64 {
        self.machine.kernel_launch + self.roofline.kernel_seconds(&self.machine.device(), work)
    }
}

impl CostModel for Time {
    fn name(&self) -> &str {
        "time"
    }

    fn unit(&self) -> &'static str {
        "seconds"
    }

    fn repartition(&self, desc: &TensorDesc, p: usize) -> f64 {
        self.seconds(desc.size_bytes() as f64, p)
    }

    fn spec(&self, op: &dyn AbstractOperator, spec: &JoinAggSpec, p: usize, resident: &[bool]) -> SpecCost {
        let width = |d: &TensorDesc| d.dtype.size_bytes() as f64;
        let resident = |k: usize| resident.get(k).copied().unwrap_or(false);
        let join: f64 = replica_elements(spec, op.inputs().len())
            .iter()
            .zip(op.inputs())
            .enumerate()
            .filter(|&(k, _)| !resident(k))
            .map(|(_, (e, d))| e * width(d))
            .sum();
        let boxes = multiplicities(spec, op.outputs().len());
        let aggregation: f64 = aggregation_elements(&boxes).iter().zip(op.outputs()).map(|(e, d)| e * width(d)).sum();
        let rounds: f64 =
            aggregation_round_elements(&boxes).iter().zip(op.outputs()).map(|(e, d)| e * width(d)).fold(0.0, f64::max);
        // The tree's rounds each pay a setup; `seconds` already charges the first.
        let tree_setups = (aggregation_rounds(&boxes) - 1.0).max(0.0) * self.machine.transfer_latency;
        let tree = if rounds == 0.0 { 0.0 } else { self.seconds(rounds, 1) + tree_setups };
        SpecCost {
            join: self.seconds(join, p),
            aggregation: self.seconds(aggregation, p).max(tree),
            compute: spec.functions.iter().map(|f| self.kernel(&kernel_work(op, f))).fold(0.0, f64::max),
        }
    }
}

/// One cost model of the [`cost_models`] table: its command-line name, a one-line
/// description, and how to build it for a machine.
#[derive(Clone, Copy, Debug)]
pub struct CostModelEntry {
    /// The name on the command line.
    pub name: &'static str,
    /// One line on what the model prices.
    pub about: &'static str,
    /// Builds the model for the topology its predictions target (a model that prices no
    /// machine ignores it).
    pub build: fn(&Topology) -> Box<dyn CostModel>,
}

const COST_MODELS: &[CostModelEntry] = &[
    CostModelEntry {
        name: "time",
        about: "predicted seconds on the topology, load imbalance and compute included",
        build: |t| Box::new(Time::on(Machine::from_topology(t))),
    },
    CostModelEntry {
        name: "proxy",
        about: "the paper's communication proxy of Section 4.3, in elements",
        build: |_| Box::new(PaperProxy),
    },
];

/// The cost models of this crate, by name: the one table the command line, its help and
/// [`cost_model_by_name`] read. A model from another crate implements [`CostModel`] and is
/// handed to the driver as a value; it needs no entry here.
pub fn cost_models() -> &'static [CostModelEntry] {
    COST_MODELS
}

/// The [`cost_models`] entry called `name`; an unknown name is an error listing the table.
pub fn cost_model_entry(name: &str) -> Result<&'static CostModelEntry> {
    COST_MODELS.iter().find(|e| e.name == name).ok_or_else(|| Error::UnknownName {
        what: "cost model",
        name: name.to_string(),
        valid: COST_MODELS.iter().map(|e| e.name).collect::<Vec<_>>().join(", "),
    })
}

/// The cost model called `name` in the [`cost_models`] table, for the topology `machine`
/// (a preset name or a topology file, as [`Machine::by_name`] reads it).
pub fn cost_model_by_name(name: &str, machine: &str) -> Result<Box<dyn CostModel>> {
    let entry = cost_model_entry(name)?;
    Ok((entry.build)(&load_topology(machine)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn machines_come_from_the_simulators_topologies() {
        let a100 = Machine::by_name("dgx-a100").unwrap();
        assert_eq!(a100.link_bandwidth, 300e9);
        assert_eq!(a100.flops(DType::F16), 312e12);
        assert_eq!(a100.flops(DType::F32), 19.5e12);
        assert_eq!(a100.hbm_bandwidth, 1555e9);
        // A DGX-1V GPU has six NVLink lanes of 25 GB/s (two double links, two single).
        let v100 = Machine::by_name("dgx-v100").unwrap();
        assert!((v100.link_bandwidth - 150e9).abs() < 1.0, "{}", v100.link_bandwidth);
        let err = Machine::by_name("dgx-b200").unwrap_err().to_string();
        assert!(err.contains("dgx-b200") && err.contains("dgx-a100"), "{err}");
        assert!(cost_model_by_name("flops", "dgx-a100").is_err());
    }

    /// The `time` model sees the simulator's latencies and wave quantization: a repartition
    /// pays one transfer setup, a kernel its launch, and a GEMM of 64 tiles on 108 SMs runs at
    /// 64/108 of its roofline; on the same machine without latencies only the waves remain.
    #[test]
    fn time_charges_launches_setups_and_waves() {
        use einsum_ops::einsum::Einsum;
        let a100 = Topology::preset("dgx-a100").unwrap();
        let machine = Machine::from_topology(&a100);
        assert_eq!((machine.sms, machine.kernel_launch, machine.transfer_latency), (Some(108), 2e-6, 3e-6));
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

    #[test]
    fn a_single_device_machine_never_pays_for_communication() {
        let site = einsum_sim::Site::new(1000.0, 16.0, ComputeRates::tflops(100.0, 100.0, 10.0));
        let one = Topology::new("one", vec![site], vec![], None).unwrap();
        let machine = Machine::from_topology(&one);
        assert_eq!(machine.link_bandwidth, f64::INFINITY);
        let time = Time::on(machine);
        let d = TensorDesc::of(&[("i", 8)], DType::F32).unwrap();
        assert_eq!(time.repartition(&d, 1), 0.0);
    }
}

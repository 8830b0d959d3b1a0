//! Cost models: what a spec costs, split so that optimizers can separate the part that
//! depends on how the inputs arrive (repartition) from the part that does not.

use std::fmt;

use einsum_core::{DType, TensorDesc};
use einsum_joinagg::{AbstractOperator, JoinAggSpec};

use crate::{Error, Result};

/// The tiling-independent cost of one spec, in the model's unit.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SpecCost {
    /// Sub-cost (2): shipping every function spec its input blocks.
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
pub trait CostModel: fmt::Debug + Send + Sync {
    /// The model's name, as given on the command line (`proxy`, `time`).
    fn name(&self) -> &str;

    /// The unit of its costs (`elements`, `seconds`).
    fn unit(&self) -> &'static str;

    /// Sub-cost (1): repartitioning a whole tensor of type `desc` over `p` devices.
    fn repartition(&self, desc: &TensorDesc, p: usize) -> f64;

    /// Sub-costs (2) and (3), and compute, of running `spec` of `op` on `p` devices.
    fn spec(&self, op: &dyn AbstractOperator, spec: &JoinAggSpec, p: usize) -> SpecCost;
}

/// Σ over function specs of the elements of their input blocks, per input.
pub(crate) fn join_elements(spec: &JoinAggSpec, inputs: usize) -> Vec<f64> {
    (0..inputs).map(|k| spec.functions.iter().map(|f| f.inputs[k].volume() as f64).sum()).collect()
}

/// Σ over distinct output boxes appearing `m` times of `(m - 1)·|box|`, per output.
pub(crate) fn aggregation_elements(spec: &JoinAggSpec, outputs: usize) -> Vec<f64> {
    (0..outputs)
        .map(|j| spec.output_multiplicities(j).iter().map(|(b, m)| ((m - 1) * b.volume()) as f64).sum())
        .collect()
}

/// The paper's communication proxy (Section 4.3), in numbers of elements: repartition
/// `|T|`, join `Σ_F Σ_k |T̂_k|`, aggregation `Σ (m - 1)·|box|`. It assumes every spec is
/// load-balanced and ignores compute.
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

    fn spec(&self, op: &dyn AbstractOperator, spec: &JoinAggSpec, _p: usize) -> SpecCost {
        SpecCost {
            join: join_elements(spec, op.inputs().len()).iter().sum(),
            aggregation: aggregation_elements(spec, op.outputs().len()).iter().sum(),
            compute: 0.0,
        }
    }
}

/// The figures of a machine that the [`Time`] model needs: per-device compute rates and
/// the per-device interconnect bandwidth (each direction).
#[derive(Clone, Debug, PartialEq)]
pub struct Machine {
    /// The preset's name.
    pub name: &'static str,
    /// Dense f16/bf16 FLOP/s of one device.
    pub half_flops: f64,
    /// Dense f32 FLOP/s of one device.
    pub f32_flops: f64,
    /// Interconnect bytes per second of one device, each direction.
    pub link_bandwidth: f64,
}

/// The machine presets (a small table until the simulator crate provides topologies).
pub const MACHINES: &[Machine] = &[
    Machine { name: "dgx-a100", half_flops: 312e12, f32_flops: 19.5e12, link_bandwidth: 300e9 },
    Machine { name: "dgx-h100", half_flops: 989e12, f32_flops: 67e12, link_bandwidth: 450e9 },
    Machine { name: "dgx-v100", half_flops: 125e12, f32_flops: 15.7e12, link_bandwidth: 150e9 },
];

impl Machine {
    /// The preset called `name`.
    pub fn by_name(name: &str) -> Result<Machine> {
        MACHINES.iter().find(|m| m.name == name).cloned().ok_or_else(|| Error::UnknownName {
            what: "machine",
            name: name.to_string(),
            valid: MACHINES.iter().map(|m| m.name).collect::<Vec<_>>().join(", "),
        })
    }

    /// FLOP/s of one device for kernels storing `dtype`.
    pub fn flops(&self, dtype: DType) -> f64 {
        match dtype {
            DType::F32 => self.f32_flops,
            DType::F16 | DType::BF16 => self.half_flops,
        }
    }
}

/// Predicted seconds on a machine: the slowest device's compute (its function spec's FLOPs
/// over the device's rate) plus the three communication sub-costs in bytes, spread over the
/// `p` devices' links (`bytes / (p · bandwidth)`). Unlike the proxy, it sees that a causal
/// query-block split of attention leaves one device with most of the work.
#[derive(Clone, Debug)]
pub struct Time {
    /// The machine whose figures are used.
    pub machine: Machine,
}

impl Time {
    /// The model for a machine preset.
    pub fn on(machine: Machine) -> Self {
        Self { machine }
    }

    fn seconds(&self, bytes: f64, p: usize) -> f64 {
        bytes / (p as f64 * self.machine.link_bandwidth)
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

    fn spec(&self, op: &dyn AbstractOperator, spec: &JoinAggSpec, p: usize) -> SpecCost {
        let width = |d: &TensorDesc| d.dtype.size_bytes() as f64;
        let join: f64 = join_elements(spec, op.inputs().len()).iter().zip(op.inputs()).map(|(e, d)| e * width(d)).sum();
        let aggregation: f64 =
            aggregation_elements(spec, op.outputs().len()).iter().zip(op.outputs()).map(|(e, d)| e * width(d)).sum();
        let dtype = op.outputs().first().map_or(DType::F32, |d| d.dtype);
        let slowest = spec.functions.iter().map(|f| op.flops(f)).fold(0.0, f64::max);
        SpecCost {
            join: self.seconds(join, p),
            aggregation: self.seconds(aggregation, p),
            compute: slowest / self.machine.flops(dtype),
        }
    }
}

/// The cost model called `name` (`proxy` or `time`); `time` uses the machine `machine`.
pub fn cost_model_by_name(name: &str, machine: &str) -> Result<Box<dyn CostModel>> {
    match name {
        "proxy" => Ok(Box::new(PaperProxy)),
        "time" => Ok(Box::new(Time::on(Machine::by_name(machine)?))),
        other => Err(Error::UnknownName { what: "cost model", name: other.to_string(), valid: "proxy, time".into() }),
    }
}

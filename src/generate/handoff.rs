//! The KV cache's hand-off from the prefill plan to the decode plan, planned and priced.
//!
//! The prefill leaves each layer's keys and values `[heads_kv, tokens, d_head]` (the prompts
//! packed along `tokens`) in the blocks of its plan: each block on the device of a function
//! spec that produced it. The decode step reads its cache inputs `[heads_kv, batch, cache,
//! d_head]` in the blocks of its own plan: each block on the device of a function spec that
//! reads it. The two plans are chosen for different work (a compute-bound prefill, a
//! bandwidth-bound decode), so the layouts differ in general, and moving the cache from one
//! to the other is an exchange: for every block a decode device reads, the elements of the
//! prompts' rows it covers come from the prefill block that holds them, unless that block is
//! on the same device. [`handoff`] lists those transfers (bytes per ordered pair of devices)
//! and predicts the exchange on the machine's topology with the simulator, as the compile
//! predicts any exchange: the cost a generation pays between its prefill and its first step.

use std::collections::BTreeMap;

use einsum_core::TensorType;
use einsum_core::taskgraph::DeviceId;
use einsum_graph::Tensor;
use einsum_joinagg::TensorId;
use einsum_models::decode::{Decoder, Prefill};
use einsum_sim::{SimTask, SiteId, Topology, simulate_completion};

use crate::{Error, Executable, Result};

/// The cache's hand-off between a prefill and a decode plan (see the [module docs](self)).
#[derive(Clone, Debug, PartialEq)]
pub struct Handoff {
    /// Bytes that cross between devices, all layers' keys and values together.
    pub bytes: f64,
    /// Ordered pairs of devices that exchange.
    pub pairs: usize,
    /// The exchange's predicted time on the topology, in ms.
    pub predicted_ms: f64,
}

/// The hand-off of `prefill`'s keys and values (compiled as `from`) into `decoder`'s caches
/// (compiled as `to`), predicted on `topology`.
pub fn handoff(
    prefill: &Prefill,
    from: &Executable,
    decoder: &Decoder,
    to: &Executable,
    topology: &Topology,
) -> Result<Handoff> {
    let mut moved: BTreeMap<(u32, u32), f64> = BTreeMap::new();
    let ends = prefill.packing.ends();
    for (kv, cache) in prefill.kv.iter().zip(&decoder.caches) {
        for (out, input) in [(kv.k, cache.k), (kv.v, cache.v)] {
            let width = from.planned_computation().desc(from.planned_tensor(out)?)?.dtype.size_bytes() as f64;
            let held = held_blocks(from, out)?;
            for (needed, dst) in read_blocks(to, input)? {
                let sequences = needed.dim(1);
                for &end in &ends[sequences.lo.min(ends.len())..sequences.hi.min(ends.len())] {
                    let start = prefill.packing.start_of(end - 1);
                    // The prompt's rows this block reads, as token rows of the prefill.
                    let rows = needed.dim(2);
                    let (lo, hi) = (start + rows.lo.min(end - start), start + rows.hi.min(end - start));
                    for (block, holders) in &held {
                        if holders.contains(&dst) {
                            continue;
                        }
                        let tokens = block.dim(1);
                        let (h, e) = (overlap(block.dim(0), needed.dim(0)), overlap(block.dim(2), needed.dim(3)));
                        let t = hi.min(tokens.hi).saturating_sub(lo.max(tokens.lo));
                        let bytes = (h * t * e) as f64 * width;
                        if bytes > 0.0 {
                            *moved.entry((holders[0].0, dst.0)).or_default() += bytes;
                        }
                    }
                }
            }
        }
    }
    let tasks: Vec<SimTask> = moved
        .iter()
        .map(|(&(src, dst), &bytes)| {
            SimTask::transfer(format!("cache {src} -> {dst}"), SiteId(src as usize), SiteId(dst as usize), bytes)
        })
        .collect();
    let seconds = simulate_completion(topology, &tasks).map_err(|e| Error::Simulate(e.into()))?;
    Ok(Handoff { bytes: moved.values().fold(0.0, |a, b| a + b), pairs: moved.len(), predicted_ms: seconds * 1e3 })
}

/// The distinct blocks of `tensor` that `exe`'s plan leaves on the devices, each with the
/// devices of the function specs that produce it.
fn held_blocks(exe: &Executable, tensor: Tensor) -> Result<Vec<(TensorType, Vec<DeviceId>)>> {
    // The plan names the form's vertices.
    let TensorId { op, output } = exe.planned_tensor(tensor)?;
    let spec = &planned(exe, op)?.spec;
    let devices = placement(exe, op)?;
    let mut held: Vec<(TensorType, Vec<DeviceId>)> = Vec::new();
    for (f, &device) in spec.functions.iter().zip(devices) {
        let block = &f.outputs[output];
        match held.iter_mut().find(|(b, _)| b == block) {
            Some((_, holders)) => holders.push(device),
            None => held.push((block.clone(), vec![device])),
        }
    }
    Ok(held)
}

/// Every block of the computation input `tensor` that a function spec of `exe`'s plan reads,
/// with the function spec's device (once per block and device).
fn read_blocks(exe: &Executable, tensor: Tensor) -> Result<Vec<(TensorType, DeviceId)>> {
    let mut read: Vec<(TensorType, DeviceId)> = Vec::new();
    for (op, k) in exe.planned_computation().consumers(exe.planned_tensor(tensor)?) {
        let spec = &planned(exe, op)?.spec;
        for (f, &device) in spec.functions.iter().zip(placement(exe, op)?) {
            let pair = (f.inputs[k].clone(), device);
            if !read.contains(&pair) {
                read.push(pair);
            }
        }
    }
    Ok(read)
}

fn planned(exe: &Executable, op: einsum_joinagg::OpId) -> Result<&einsum_logical::PlannedOp> {
    exe.plan().ops.iter().find(|o| o.id == op).ok_or_else(|| internal(format!("operator {op:?} has no planned spec")))
}

fn placement(exe: &Executable, op: einsum_joinagg::OpId) -> Result<&[DeviceId]> {
    exe.compiled()
        .placement
        .get(&op)
        .map(Vec::as_slice)
        .ok_or_else(|| internal(format!("operator {op:?} is not placed")))
}

/// Elements two intervals share.
fn overlap(a: einsum_core::Interval, b: einsum_core::Interval) -> usize {
    a.intersect(&b).map_or(0, |i| i.len())
}

/// A plan that lacks what its compile always records: a bug, reported as the lowering's.
fn internal(reason: String) -> Error {
    einsum_compile::CompileError::Lowering { label: "the cache hand-off".into(), reason }.into()
}

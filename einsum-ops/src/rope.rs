//! Rotary position embedding (RoPE) in the LLaMA "rotate half" convention.
//!
//! Feature `i < d/2` is paired with feature `i + d/2` and the pair is rotated by the angle
//! `position · theta^(-2i/d)`, where the position of a token counts from the start of its
//! packed sequence. The position is read from the block's absolute lower bound, so a block of
//! a sequence-sharded tensor is rotated exactly as the same rows of the whole tensor.

use einsum_core::{HostTensor, Interval, KernelClass, TensorDesc};
use einsum_joinagg::{AbstractOperator, DimIndex, Error, FunctionSpec, JoinAggSpec, Result, ShardableIndex, grid_spec};

use crate::Packing;
use crate::common::{kernel_error, row_dims, row_shardable};

const KIND: &str = "rope";

/// Rotary position embedding of one tensor along a `sequence` and a `feature` index.
///
/// Every index but `feature` is shardable anywhere (named after the index); `feature` stays
/// whole, because each rotation mixes feature `i` with feature `i + d/2`.
#[derive(Clone, Debug)]
pub struct Rope {
    inputs: Vec<TensorDesc>,
    seq_dim: usize,
    feature_dim: usize,
    theta: f32,
    packing: Packing,
}

impl Rope {
    /// RoPE of `x` with positions along `sequence` and rotated pairs along `feature`, base
    /// frequency `theta` (10000 in LLaMA), and sequences packed as `packing` says.
    ///
    /// Errors name the offending index: an index `x` lacks, `sequence == feature`, an odd
    /// feature extent, or a packing whose total is not the sequence extent; a non-positive
    /// or non-finite `theta` is [`Error::Invalid`].
    pub fn new(x: &TensorDesc, sequence: &str, feature: &str, theta: f32, packing: Packing) -> Result<Rope> {
        let shape = |index: &str, reason: String| Error::Shape { op: KIND.into(), index: index.into(), reason };
        let find = |name: &str| {
            x.position(name).ok_or_else(|| shape(name, format!("not an index of the input [{}]", x.dims_string())))
        };
        let seq_dim = find(sequence)?;
        let feature_dim = find(feature)?;
        if seq_dim == feature_dim {
            return Err(shape(sequence, "the sequence and feature indices must differ".into()));
        }
        let d = x.dims[feature_dim].extent;
        if d == 0 || !d.is_multiple_of(2) {
            return Err(shape(feature, format!("the feature extent must be even and positive, got {d}")));
        }
        let s = x.dims[seq_dim].extent;
        if packing.total() != s {
            return Err(shape(
                sequence,
                format!("the packed sequences end at {}, the sequence extent is {s}", packing.total()),
            ));
        }
        if !(theta.is_finite() && theta > 0.0) {
            return Err(Error::Invalid { op: KIND.into(), reason: format!("theta must be positive, got {theta}") });
        }
        Ok(Rope { inputs: vec![x.clone()], seq_dim, feature_dim, theta, packing })
    }

    /// The packed sequences along the sequence index.
    pub fn packing(&self) -> &Packing {
        &self.packing
    }

    /// The base frequency.
    pub fn theta(&self) -> f32 {
        self.theta
    }

    /// Position of the sequence index in `x` (a GPU kernel needs it to find positions).
    pub fn sequence_axis(&self) -> usize {
        self.seq_dim
    }

    /// Position of the rotated feature index in `x`.
    pub fn feature_axis(&self) -> usize {
        self.feature_dim
    }
}

impl AbstractOperator for Rope {
    fn kind(&self) -> &str {
        KIND
    }

    fn kernel_class(&self) -> KernelClass {
        KernelClass::Elementwise
    }

    fn inputs(&self) -> &[TensorDesc] {
        &self.inputs
    }

    fn outputs(&self) -> &[TensorDesc] {
        &self.inputs
    }

    fn shardable(&self) -> Vec<ShardableIndex> {
        row_shardable(&self.inputs[0], self.feature_dim)
    }

    fn join_agg_spec(&self, intervals: &[Vec<Interval>]) -> Result<JoinAggSpec> {
        let dims: DimIndex = vec![row_dims(self.inputs[0].rank(), self.feature_dim); 2];
        grid_spec(KIND, &self.inputs, &self.inputs, &self.shardable(), &dims, intervals)
    }

    /// Three operations per output element: `x_i · cos ∓ x_j · sin`.
    fn flops(&self, f: &FunctionSpec) -> f64 {
        3.0 * f.outputs.first().map_or(0, |t| t.volume()) as f64
    }

    fn compute(&self, f: &FunctionSpec, inputs: &[HostTensor]) -> Result<Vec<HostTensor>> {
        let x_desc = &self.inputs[0];
        if inputs.len() != 1 || f.inputs.len() != 1 || f.outputs.len() != 1 {
            return Err(kernel_error(
                KIND,
                format!(
                    "expects one input and one output, got {} input tensors and a spec of {} inputs and {} outputs",
                    inputs.len(),
                    f.inputs.len(),
                    f.outputs.len()
                ),
            ));
        }
        let (x, block) = (&inputs[0], &f.inputs[0]);
        if x.ty() != block || f.outputs[0] != *block {
            return Err(kernel_error(
                KIND,
                format!("input {} and output {} must both have the block type {block}", x.ty(), f.outputs[0]),
            ));
        }
        if !block.is_projection_of(&x_desc.tensor_type()) {
            return Err(kernel_error(KIND, format!("block {block} lies outside {}", x_desc.tensor_type())));
        }
        let d = x_desc.dims[self.feature_dim].extent;
        if block.dim(self.feature_dim) != Interval::full(d) {
            return Err(kernel_error(
                KIND,
                format!(
                    "the feature index `{}` must be whole, the block has {}",
                    x_desc.dims[self.feature_dim].name,
                    block.dim(self.feature_dim)
                ),
            ));
        }

        let half = d / 2;
        let rows = block.dim(self.seq_dim);
        // cos and sin of every (row, pair) in the block; angles in f64 so that they are
        // accurate for long sequences.
        let inv_freq: Vec<f64> = (0..half).map(|i| (self.theta as f64).powf(-2.0 * i as f64 / d as f64)).collect();
        let mut cos = Vec::with_capacity(rows.len() * half);
        let mut sin = Vec::with_capacity(rows.len() * half);
        for s in rows.lo..rows.hi {
            let pos = (s - self.packing.start_of(s)) as f64;
            for &w in &inv_freq {
                let (sn, cs) = (pos * w).sin_cos();
                cos.push(cs as f32);
                sin.push(sn as f32);
            }
        }

        let data = x.to_f32();
        let mut out = vec![0.0f32; data.len()];
        if out.is_empty() {
            return Ok(vec![HostTensor::from_f32(block.clone(), x_desc.dtype, out)?]);
        }
        let shape = block.shape();
        let strides = block.strides();
        let fs = strides[self.feature_dim];
        // Odometer over every dimension but `feature`: one feature fiber per position.
        let mut idx = vec![0usize; shape.len()];
        'fibers: loop {
            let base: usize = idx.iter().zip(&strides).map(|(i, s)| i * s).sum();
            let row = idx[self.seq_dim] * half;
            for i in 0..half {
                let (a, b) = (base + i * fs, base + (i + half) * fs);
                let (c, s) = (cos[row + i], sin[row + i]);
                out[a] = data[a] * c - data[b] * s;
                out[b] = data[b] * c + data[a] * s;
            }
            for dim in (0..shape.len()).rev() {
                if dim == self.feature_dim {
                    continue;
                }
                idx[dim] += 1;
                if idx[dim] < shape[dim] {
                    continue 'fibers;
                }
                idx[dim] = 0;
            }
            break;
        }
        Ok(vec![HostTensor::from_f32(block.clone(), x_desc.dtype, out)?])
    }
}

#[cfg(test)]
mod tests {
    use einsum_core::{DType, TensorType};
    use einsum_joinagg::{execute_whole, request_spec};

    use super::*;

    fn desc(dims: &[(&str, usize)]) -> TensorDesc {
        TensorDesc::of(dims, DType::F32).unwrap()
    }

    #[test]
    fn rotates_pairs_by_position() {
        let x = desc(&[("s", 3), ("f", 4)]);
        let op = Rope::new(&x, "s", "f", 100.0, Packing::single(3)).unwrap();
        let input = HostTensor::from_f32(x.tensor_type(), DType::F32, (1..=12).map(|v| v as f32).collect()).unwrap();
        let out = execute_whole(&op, std::slice::from_ref(&input)).unwrap();
        for s in 0..3 {
            for i in 0..2 {
                let angle = s as f64 * 100f64.powf(-2.0 * i as f64 / 4.0);
                let (a, b) = (input.get(&[s, i]).unwrap() as f64, input.get(&[s, i + 2]).unwrap() as f64);
                let want_a = a * angle.cos() - b * angle.sin();
                let want_b = b * angle.cos() + a * angle.sin();
                assert!((out[0].get(&[s, i]).unwrap() as f64 - want_a).abs() < 1e-5);
                assert!((out[0].get(&[s, i + 2]).unwrap() as f64 - want_b).abs() < 1e-5);
            }
        }
        // Position 0 is the identity.
        assert_eq!(out[0].slice(&TensorType::new(&[0, 0], &[1, 4]).unwrap()).unwrap().to_f32(), vec![1., 2., 3., 4.]);
    }

    #[test]
    fn feature_may_come_first_and_stays_whole() {
        let x = desc(&[("f", 6), ("b", 2), ("s", 5)]);
        let op = Rope::new(&x, "s", "f", 10000.0, Packing::new(vec![2, 5]).unwrap()).unwrap();
        let names: Vec<String> = op.shardable().into_iter().map(|s| s.name).collect();
        assert_eq!(names, vec!["b", "s"]);
        let spec = request_spec(&op, &[2, 3]).unwrap();
        assert_eq!(spec.len(), 6);
        assert!(spec.functions.iter().all(|f| f.inputs[0].dim(0) == Interval::full(6)));
        let err = einsum_joinagg::decomposition_error(&op, &spec, 3).unwrap();
        assert!(err <= 1e-6, "{err}");
    }

    #[test]
    fn construction_errors_name_the_index() {
        let x = desc(&[("s", 4), ("f", 6)]);
        let p = Packing::single(4);
        let msg = |r: Result<Rope>| r.unwrap_err().to_string();
        assert!(msg(Rope::new(&x, "t", "f", 1e4, p.clone())).contains("`t`"));
        assert!(msg(Rope::new(&x, "s", "g", 1e4, p.clone())).contains("`g`"));
        assert!(msg(Rope::new(&x, "s", "s", 1e4, p.clone())).contains("`s`"));
        assert!(msg(Rope::new(&desc(&[("s", 4), ("f", 5)]), "s", "f", 1e4, p.clone())).contains("`f`"));
        assert!(msg(Rope::new(&x, "s", "f", 1e4, Packing::single(5))).contains("`s`"));
        assert!(matches!(Rope::new(&x, "s", "f", -1.0, p), Err(Error::Invalid { .. })));
    }

    #[test]
    fn kernel_rejects_inconsistent_blocks() {
        let x = desc(&[("s", 4), ("f", 4)]);
        let op = Rope::new(&x, "s", "f", 1e4, Packing::single(4)).unwrap();
        let half_f = TensorType::new(&[0, 0], &[4, 2]).unwrap();
        let f = FunctionSpec { inputs: vec![half_f.clone()], outputs: vec![half_f.clone()] };
        let t = HostTensor::random(half_f, DType::F32, 1);
        assert!(matches!(op.compute(&f, &[t]), Err(Error::Kernel { .. })));
        let whole = x.tensor_type();
        let f = FunctionSpec { inputs: vec![whole.clone()], outputs: vec![whole.clone()] };
        let wrong = HostTensor::random(TensorType::new(&[1, 0], &[4, 4]).unwrap(), DType::F32, 1);
        assert!(matches!(op.compute(&f, &[wrong]), Err(Error::Kernel { .. })));
        assert!(matches!(op.compute(&f, &[]), Err(Error::Kernel { .. })));
    }
}

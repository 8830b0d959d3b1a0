//! Rotary position embedding (RoPE) in the LLaMA "rotate half" convention.
//!
//! Feature `i < d/2` is paired with feature `i + d/2` and the pair is rotated by the angle
//! `position · inv_freq[i]`, where the position of a token counts from the start of its
//! packed sequence; cos and sin are then scaled by an attention factor. The frequencies are a
//! value, [`RopeFrequencies`]: the plain `theta^(-2i/d)` of the original RoPE
//! ([`RopeFrequencies::from_theta`]) or any scaled variant a model family computes (LLaMA 3.1's,
//! YaRN's, ...). The position is read from the block's absolute lower bound, so a block of a
//! sequence-sharded tensor is rotated exactly as the same rows of the whole tensor.

use einsum_core::{HostTensor, Interval, KernelClass, TensorDesc};
use einsum_joinagg::{AbstractOperator, DimIndex, Error, FunctionSpec, JoinAggSpec, Result, ShardableIndex, grid_spec};

use crate::Packing;
use crate::common::{for_each_fiber, kernel_error, row_dims, row_shardable};

const KIND: &str = "rope";

/// The rotation frequencies of a RoPE: one inverse frequency per rotated pair (`d/2` of
/// them) and the factor that scales cos and sin (1 but for YaRN-like scalings).
///
/// This is what transformers' `rope_init_fn` returns (`inv_freq`, `attention_scaling`); kept
/// in f64 so that angles stay accurate for long sequences.
#[derive(Clone, Debug, PartialEq)]
pub struct RopeFrequencies {
    inv_freq: Vec<f64>,
    attention_factor: f64,
}

impl RopeFrequencies {
    /// Frequencies as given. Errors ([`Error::Invalid`]): no frequency, a negative or
    /// non-finite one, or an attention factor that is not positive and finite.
    pub fn new(inv_freq: Vec<f64>, attention_factor: f64) -> Result<RopeFrequencies> {
        let invalid = |reason: String| Error::Invalid { op: KIND.into(), reason };
        if inv_freq.is_empty() {
            return Err(invalid("a rope needs at least one frequency".into()));
        }
        if let Some((i, w)) = inv_freq.iter().enumerate().find(|(_, w)| !(w.is_finite() && **w >= 0.0)) {
            return Err(invalid(format!("inverse frequency {i} must be finite and non-negative, got {w}")));
        }
        if !(attention_factor.is_finite() && attention_factor > 0.0) {
            return Err(invalid(format!("the attention factor must be positive and finite, got {attention_factor}")));
        }
        Ok(RopeFrequencies { inv_freq, attention_factor })
    }

    /// The original RoPE's frequencies for a rotated dimension `d` (even, positive):
    /// `theta^(-2i/d)` for `i < d/2`, attention factor 1. Errors ([`Error::Invalid`]): a
    /// non-positive or non-finite `theta`, an odd or zero `d`.
    pub fn from_theta(theta: f64, d: usize) -> Result<RopeFrequencies> {
        if !(theta.is_finite() && theta > 0.0) {
            return Err(Error::Invalid { op: KIND.into(), reason: format!("theta must be positive, got {theta}") });
        }
        if d == 0 || !d.is_multiple_of(2) {
            return Err(Error::Invalid {
                op: KIND.into(),
                reason: format!("the rotated dimension must be even and positive, got {d}"),
            });
        }
        let inv_freq = (0..d / 2).map(|i| theta.powf(-2.0 * i as f64 / d as f64)).collect();
        RopeFrequencies::new(inv_freq, 1.0)
    }

    /// One inverse frequency per rotated pair.
    pub fn inv_freq(&self) -> &[f64] {
        &self.inv_freq
    }

    /// The factor scaling cos and sin.
    pub fn attention_factor(&self) -> f64 {
        self.attention_factor
    }

    /// The rotated dimension: twice the number of frequencies.
    pub fn rotary_dim(&self) -> usize {
        2 * self.inv_freq.len()
    }

    /// cos and sin (each times the attention factor) of every position, row-major
    /// `[position][pair]`: the one place where a rotation's table is computed, shared by the
    /// CPU kernel and the GPU lowerings.
    pub fn cos_sin(&self, positions: impl IntoIterator<Item = usize>) -> (Vec<f32>, Vec<f32>) {
        let (mut cos, mut sin) = (Vec::new(), Vec::new());
        for pos in positions {
            let pos = pos as f64;
            for &w in &self.inv_freq {
                let (sn, cs) = (pos * w).sin_cos();
                cos.push((cs * self.attention_factor) as f32);
                sin.push((sn * self.attention_factor) as f32);
            }
        }
        (cos, sin)
    }
}

/// Rotary position embedding of one tensor along a `sequence` and a `feature` index.
///
/// Every index but `feature` is shardable anywhere (named after the index); `feature` stays
/// whole, because each rotation mixes feature `i` with feature `i + d/2`.
#[derive(Clone, Debug)]
pub struct Rope {
    inputs: Vec<TensorDesc>,
    seq_dim: usize,
    feature_dim: usize,
    frequencies: RopeFrequencies,
    packing: Packing,
}

impl Rope {
    /// RoPE of `x` with positions along `sequence` and rotated pairs along `feature`, base
    /// frequency `theta` (10000 in LLaMA), and sequences packed as `packing` says: the
    /// frequencies of [`RopeFrequencies::from_theta`].
    ///
    /// Errors name the offending index: an index `x` lacks, `sequence == feature`, an odd
    /// feature extent, or a packing whose total is not the sequence extent; a non-positive
    /// or non-finite `theta` is [`Error::Invalid`].
    pub fn new(x: &TensorDesc, sequence: &str, feature: &str, theta: f32, packing: Packing) -> Result<Rope> {
        let (seq_dim, feature_dim) = Rope::locate(x, sequence, feature, &packing)?;
        let frequencies = RopeFrequencies::from_theta(theta as f64, x.dims[feature_dim].extent)?;
        Ok(Rope { inputs: vec![x.clone()], seq_dim, feature_dim, frequencies, packing })
    }

    /// RoPE of `x` as [`Rope::new`], rotating by the given frequencies (a scaled RoPE).
    /// Besides [`Rope::new`]'s index errors, a frequency count that is not half the feature
    /// extent is an error naming `feature`.
    pub fn with_frequencies(
        x: &TensorDesc,
        sequence: &str,
        feature: &str,
        frequencies: RopeFrequencies,
        packing: Packing,
    ) -> Result<Rope> {
        let (seq_dim, feature_dim) = Rope::locate(x, sequence, feature, &packing)?;
        let d = x.dims[feature_dim].extent;
        if frequencies.rotary_dim() != d {
            return Err(Error::Shape {
                op: KIND.into(),
                index: feature.into(),
                reason: format!(
                    "{} frequencies rotate {} features, the extent is {d}",
                    frequencies.inv_freq.len(),
                    frequencies.rotary_dim()
                ),
            });
        }
        Ok(Rope { inputs: vec![x.clone()], seq_dim, feature_dim, frequencies, packing })
    }

    /// The positions of `sequence` and `feature` in `x`, checked as [`Rope::new`] documents.
    fn locate(x: &TensorDesc, sequence: &str, feature: &str, packing: &Packing) -> Result<(usize, usize)> {
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
        Ok((seq_dim, feature_dim))
    }

    /// The packed sequences along the sequence index.
    pub fn packing(&self) -> &Packing {
        &self.packing
    }

    /// The rotation frequencies.
    pub fn frequencies(&self) -> &RopeFrequencies {
        &self.frequencies
    }

    /// cos and sin of the rows `rows` of the sequence index (positions counted within each
    /// packed sequence), row-major `[row][pair]`: what the CPU kernel and the GPU lowering
    /// rotate a block by.
    pub fn cos_sin_table(&self, rows: Interval) -> (Vec<f32>, Vec<f32>) {
        self.frequencies.cos_sin((rows.lo..rows.hi).map(|s| s - self.packing.start_of(s)))
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
        let (cos, sin) = self.cos_sin_table(block.dim(self.seq_dim));

        let data = x.to_f32();
        let mut out = vec![0.0f32; data.len()];
        if out.is_empty() {
            return Ok(vec![HostTensor::from_f32(block.clone(), x_desc.dtype, out)?]);
        }
        let shape = block.shape();
        let strides = block.strides();
        let fs = strides[self.feature_dim];
        // One feature fiber per position.
        for_each_fiber(&shape, self.feature_dim, |idx| {
            let base: usize = idx.iter().zip(&strides).map(|(i, s)| i * s).sum();
            let row = idx[self.seq_dim] * half;
            for i in 0..half {
                let (a, b) = (base + i * fs, base + (i + half) * fs);
                let (c, s) = (cos[row + i], sin[row + i]);
                out[a] = data[a] * c - data[b] * s;
                out[b] = data[b] * c + data[a] * s;
            }
        });
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
    fn from_theta_is_the_original_formula_bit_for_bit() {
        for (theta, d) in [(10000.0f32, 128usize), (500_000.0, 64), (100.0, 4), (1e6, 16)] {
            let f = RopeFrequencies::from_theta(theta as f64, d).unwrap();
            let want: Vec<f64> = (0..d / 2).map(|i| (theta as f64).powf(-2.0 * i as f64 / d as f64)).collect();
            assert_eq!(f.inv_freq(), want.as_slice());
            assert_eq!(f.attention_factor(), 1.0);
            assert_eq!(f.rotary_dim(), d);
        }
        assert!(matches!(RopeFrequencies::from_theta(0.0, 8), Err(Error::Invalid { .. })));
        assert!(matches!(RopeFrequencies::from_theta(f64::NAN, 8), Err(Error::Invalid { .. })));
        assert!(matches!(RopeFrequencies::from_theta(1e4, 7), Err(Error::Invalid { .. })));
    }

    #[test]
    fn frequencies_must_be_finite_and_match_the_feature_extent() {
        assert!(matches!(RopeFrequencies::new(vec![], 1.0), Err(Error::Invalid { .. })));
        let err = RopeFrequencies::new(vec![1.0, f64::INFINITY], 1.0).unwrap_err().to_string();
        assert!(err.contains("inverse frequency 1"), "{err}");
        assert!(matches!(RopeFrequencies::new(vec![1.0, -0.5], 1.0), Err(Error::Invalid { .. })));
        assert!(matches!(RopeFrequencies::new(vec![1.0], 0.0), Err(Error::Invalid { .. })));
        assert!(matches!(RopeFrequencies::new(vec![1.0], f64::NAN), Err(Error::Invalid { .. })));
        let x = desc(&[("s", 4), ("f", 6)]);
        let three = RopeFrequencies::new(vec![1.0, 0.1, 0.01], 1.0).unwrap();
        assert!(Rope::with_frequencies(&x, "s", "f", three.clone(), Packing::single(4)).is_ok());
        let two = RopeFrequencies::new(vec![1.0, 0.1], 1.0).unwrap();
        let err = Rope::with_frequencies(&x, "s", "f", two, Packing::single(4)).unwrap_err().to_string();
        assert!(err.contains("`f`"), "{err}");
        let err = Rope::with_frequencies(&x, "t", "f", three, Packing::single(4)).unwrap_err().to_string();
        assert!(err.contains("`t`"), "{err}");
    }

    #[test]
    fn new_and_with_from_theta_frequencies_are_the_same_operator() {
        let x = desc(&[("h", 2), ("s", 5), ("f", 8)]);
        let p = Packing::new(vec![2, 5]).unwrap();
        let a = Rope::new(&x, "s", "f", 500_000.0, p.clone()).unwrap();
        let freq = RopeFrequencies::from_theta(500_000.0, 8).unwrap();
        let b = Rope::with_frequencies(&x, "s", "f", freq, p).unwrap();
        let input = HostTensor::random(x.tensor_type(), DType::F32, 11);
        let ya = execute_whole(&a, std::slice::from_ref(&input)).unwrap();
        let yb = execute_whole(&b, std::slice::from_ref(&input)).unwrap();
        assert_eq!(ya, yb);
    }

    #[test]
    fn scaled_frequencies_rotate_by_their_own_angles_and_scale_by_the_attention_factor() {
        let x = desc(&[("s", 4), ("f", 4)]);
        let (w, af) = ([0.5f64, 0.03], 1.25f64);
        let op =
            Rope::with_frequencies(&x, "s", "f", RopeFrequencies::new(w.to_vec(), af).unwrap(), Packing::single(4))
                .unwrap();
        let input = HostTensor::random(x.tensor_type(), DType::F32, 3);
        let out = execute_whole(&op, std::slice::from_ref(&input)).unwrap();
        for s in 0..4 {
            for (i, w) in w.iter().enumerate() {
                let angle = s as f64 * w;
                let (a, b) = (input.get(&[s, i]).unwrap() as f64, input.get(&[s, i + 2]).unwrap() as f64);
                let want_a = af * (a * angle.cos() - b * angle.sin());
                let want_b = af * (b * angle.cos() + a * angle.sin());
                assert!((out[0].get(&[s, i]).unwrap() as f64 - want_a).abs() < 1e-5);
                assert!((out[0].get(&[s, i + 2]).unwrap() as f64 - want_b).abs() < 1e-5);
            }
        }
    }

    /// LLaMA 3.1's scaled frequencies (factor 8, low/high frequency factors 1 and 4, an
    /// original context of 64 so that a 16-wide head has all three bands), written out from
    /// transformers' `_compute_llama3_parameters`.
    fn llama3_frequencies(d: usize) -> RopeFrequencies {
        let (factor, low, high, old) = (8.0f64, 1.0f64, 4.0f64, 64.0f64);
        let inv: Vec<f64> = (0..d / 2)
            .map(|i| {
                let w = 10000f64.powf(-2.0 * i as f64 / d as f64);
                let wavelen = 2.0 * std::f64::consts::PI / w;
                if wavelen < old / high {
                    w
                } else if wavelen > old / low {
                    w / factor
                } else {
                    let smooth = (old / wavelen - low) / (high - low);
                    (1.0 - smooth) * w / factor + smooth * w
                }
            })
            .collect();
        RopeFrequencies::new(inv, 1.0).unwrap()
    }

    #[test]
    fn a_llama3_scaled_rope_decomposes_over_devices_as_its_whole_kernel() {
        let x = desc(&[("h", 2), ("s", 12), ("f", 16)]);
        let freq = llama3_frequencies(16);
        let plain = RopeFrequencies::from_theta(10000.0, 16).unwrap();
        // All three bands are present: unchanged, divided by the factor, and in between.
        let bands = freq.inv_freq().iter().zip(plain.inv_freq()).map(|(a, b)| a / b);
        assert!(bands.clone().any(|r| r == 1.0) && bands.clone().any(|r| r == 0.125));
        assert!(bands.clone().any(|r| r > 0.125 && r < 1.0));
        let op = Rope::with_frequencies(&x, "s", "f", freq, Packing::new(vec![5, 12]).unwrap()).unwrap();
        for p in [2, 3, 4, 6] {
            for choice in einsum_joinagg::enumerate_specs(&op, p).unwrap() {
                let err = einsum_joinagg::decomposition_error(&op, &choice.spec, 7).unwrap();
                assert!(err <= 1e-6, "{p} devices, counts {:?}: {err}", choice.counts);
            }
        }
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

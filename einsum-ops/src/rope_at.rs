//! Rotary position embedding at given positions: [`Rope`](crate::rope::Rope)'s rotation, with
//! the position of every token read from an i32 input rather than from its row.
//!
//! Generation with a KV cache embeds a few new tokens per step, each at its own absolute
//! position (how many tokens its sequence already holds), which no block bound or packing
//! of the token rows can tell. So the positions are a tensor, `positions[t]` for token `t`,
//! and the rotation is exactly `Rope`'s "rotate half": feature `i < d/2` is paired with
//! feature `i + d/2` and the pair is rotated by the angle `positions[t] · inv_freq[i]`
//! (computed in f64), cos and sin scaled by the attention factor
//! ([`RopeFrequencies::cos_sin`], the one table both share). Given positions `0..n`, it is
//! `Rope` over one sequence of `n` tokens, to the bit.
//!
//! Every index of `x` but `feature` is shardable anywhere, in `x`'s order, and the positions
//! block follows the `tokens` interval. `feature` is shardable last, anywhere, on the output
//! only: each rotation mixes feature `i` with feature `i + d/2`, so every function reads
//! whole feature fibers of `x` and writes its slice of the rotated features. That split lets
//! a decode step, one token on few heads, spread the rotation over more devices than its
//! other indices allow; the output blocks still tile the output, with no aggregation. A
//! position outside `0..max_positions` is an error of the kernel naming its token and value,
//! whatever the split.

use einsum_core::{DType, HostTensor, Interval, KernelClass, TensorDesc};
use einsum_joinagg::{AbstractOperator, DimIndex, Error, FunctionSpec, JoinAggSpec, Result, ShardableIndex, grid_spec};

use crate::common::{check_call, check_row_slice, f32s, for_each_fiber, kernel_error, row_dims, row_shardable};
use crate::rope::RopeFrequencies;

const KIND: &str = "rope_at";

/// Rotary position embedding of `x` along `tokens` and `feature`, token `t` at position
/// `positions[t]` (see the [module docs](self)).
#[derive(Clone, Debug)]
pub struct RopeAt {
    inputs: Vec<TensorDesc>,
    outputs: Vec<TensorDesc>,
    tokens_dim: usize,
    feature_dim: usize,
    frequencies: RopeFrequencies,
    max_positions: usize,
}

impl RopeAt {
    /// RoPE of `x` (any rank) with its token rows along `tokens` and its rotated pairs along
    /// `feature`, token `t` rotated to position `positions[t]`: `positions` is i32 with the
    /// one index `tokens`, of `x`'s extent, and every position lies in `0..max_positions`
    /// (the bound random inputs draw below; the kernel refuses any other).
    ///
    /// Errors name the offending index: an index `x` lacks, `tokens == feature`, frequencies
    /// that do not rotate the whole feature extent (as [`Rope::with_frequencies`]), or
    /// positions laid out otherwise than `[tokens]` of `x`'s extent. Positions that are not
    /// i32, an `x` that is not floating point, or `max_positions == 0` are
    /// [`Error::Invalid`].
    ///
    /// [`Rope::with_frequencies`]: crate::rope::Rope::with_frequencies
    pub fn new(
        x: &TensorDesc,
        positions: &TensorDesc,
        tokens: &str,
        feature: &str,
        frequencies: RopeFrequencies,
        max_positions: usize,
    ) -> Result<RopeAt> {
        let shape = |index: &str, reason: String| Error::Shape { op: KIND.into(), index: index.into(), reason };
        let invalid = |reason: String| Error::Invalid { op: KIND.into(), reason };
        let find = |name: &str| {
            x.position(name).ok_or_else(|| shape(name, format!("not an index of x [{}]", x.dims_string())))
        };
        let tokens_dim = find(tokens)?;
        let feature_dim = find(feature)?;
        if tokens_dim == feature_dim {
            return Err(shape(tokens, "the tokens and feature indices must differ".into()));
        }
        let d = x.dims[feature_dim].extent;
        if frequencies.rotary_dim() != d {
            return Err(shape(
                feature,
                format!(
                    "{} frequencies rotate {} features, the extent is {d}",
                    frequencies.inv_freq().len(),
                    frequencies.rotary_dim()
                ),
            ));
        }
        if !x.dtype.is_float() {
            return Err(invalid(format!("x [{}] must be floating point, not {}", x.dims_string(), x.dtype)));
        }
        let n = x.dims[tokens_dim].extent;
        if positions.rank() != 1 || positions.dims[0].name != tokens || positions.dims[0].extent != n {
            return Err(shape(
                tokens,
                format!(
                    "the positions must be the one index `{tokens}` of extent {n} (that of x [{}]), got [{}]",
                    x.dims_string(),
                    positions.dims_string()
                ),
            ));
        }
        if positions.dtype != DType::I32 {
            return Err(invalid(format!(
                "the positions [{}] must be i32, not {}",
                positions.dims_string(),
                positions.dtype
            )));
        }
        if max_positions == 0 {
            return Err(invalid("max_positions must be positive: no position lies in 0..0".into()));
        }
        Ok(RopeAt {
            inputs: vec![x.clone(), positions.clone()],
            outputs: vec![x.clone()],
            tokens_dim,
            feature_dim,
            frequencies,
            max_positions,
        })
    }

    /// The rotation frequencies.
    pub fn frequencies(&self) -> &RopeFrequencies {
        &self.frequencies
    }

    /// The bound of the positions: every one lies in `0..max_positions`.
    pub fn max_positions(&self) -> usize {
        self.max_positions
    }

    /// Position of the tokens index in `x` (a GPU kernel needs it to find each row's
    /// position).
    pub fn tokens_axis(&self) -> usize {
        self.tokens_dim
    }

    /// Position of the rotated feature index in `x`.
    pub fn feature_axis(&self) -> usize {
        self.feature_dim
    }
}

impl AbstractOperator for RopeAt {
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
        &self.outputs
    }

    /// The positions are input 1.
    fn index_bound(&self, input: usize) -> Option<usize> {
        (input == 1).then_some(self.max_positions)
    }

    /// Every index of `x` but `feature`, in `x`'s order, then `feature` (output only, see the
    /// [module docs](self)), appended last so that the requests of the others keep their
    /// meaning.
    fn shardable(&self) -> Vec<ShardableIndex> {
        let x = &self.inputs[0];
        let mut indices = row_shardable(x, self.feature_dim);
        let feature = &x.dims[self.feature_dim];
        indices.push(ShardableIndex::any(feature.name.clone(), feature.extent));
        indices
    }

    /// A grid: `x`'s blocks hold whole feature fibers, the positions block follows `tokens`,
    /// and the output's feature dimension follows the last shardable index.
    fn join_agg_spec(&self, intervals: &[Vec<Interval>]) -> Result<JoinAggSpec> {
        let rank = self.inputs[0].rank();
        let x = row_dims(rank, self.feature_dim);
        let mut y = x.clone();
        y[self.feature_dim] = Some(rank - 1);
        let dims: DimIndex = vec![x.clone(), vec![x[self.tokens_dim]], y];
        grid_spec(KIND, &self.inputs, &self.outputs, &self.shardable(), &dims, intervals)
    }

    /// Three operations per output element, as [`Rope`](crate::rope::Rope): `x_i · cos ∓
    /// x_j · sin`.
    fn flops(&self, f: &FunctionSpec) -> f64 {
        3.0 * f.outputs.first().map_or(0, |t| t.volume()) as f64
    }

    fn compute(&self, f: &FunctionSpec, inputs: &[HostTensor]) -> Result<Vec<HostTensor>> {
        check_call(self, f, inputs)?;
        let x_desc = &self.inputs[0];
        let (block, pos_block, out_block) = (&f.inputs[0], &f.inputs[1], &f.outputs[0]);
        let d = x_desc.dims[self.feature_dim].extent;
        let slice = check_row_slice(KIND, block, out_block, self.feature_dim, d).map_err(|_| {
            kernel_error(
                KIND,
                format!(
                    "the x block {block} must hold the feature index `{}` whole, and the output block {out_block} \
                     agree with it but for its slice of the features",
                    x_desc.dims[self.feature_dim].name
                ),
            )
        })?;
        let rows = block.dim(self.tokens_dim);
        if pos_block.dim(0) != rows {
            return Err(kernel_error(
                KIND,
                format!(
                    "the positions block {pos_block} does not follow the tokens rows {rows} of the x block {block}"
                ),
            ));
        }
        let positions = inputs[1].to_i32();
        for (i, &p) in positions.iter().enumerate() {
            if p < 0 || p as usize >= self.max_positions {
                return Err(kernel_error(
                    KIND,
                    format!("position {p} of token {} is outside 0..{}", rows.lo + i, self.max_positions),
                ));
            }
        }
        let mut out = vec![0.0f32; out_block.volume()];
        if out.is_empty() {
            return Ok(vec![HostTensor::from_f32(out_block.clone(), x_desc.dtype, out)?]);
        }
        let half = d / 2;
        let (cos, sin) = self.frequencies.cos_sin(positions.iter().map(|&p| p as usize));
        let data = f32s(&inputs[0]);
        let shape = block.shape();
        let (strides, out_strides) = (block.strides(), out_block.strides());
        let (fs, out_fs) = (strides[self.feature_dim], out_strides[self.feature_dim]);
        // One feature fiber per element, each rotated by its token's row of the table; only
        // the output's slice of it is written.
        for_each_fiber(&shape, self.feature_dim, |idx| {
            let base: usize = idx.iter().zip(&strides).map(|(i, s)| i * s).sum();
            let out_base: usize = idx.iter().zip(&out_strides).map(|(i, s)| i * s).sum();
            let row = idx[self.tokens_dim] * half;
            for (k, e) in (slice.lo..slice.hi).enumerate() {
                // Feature `e` of the pair (i, i + d/2): the first rotates to x_i·cos − x_j·sin,
                // the second to x_j·cos + x_i·sin.
                let i = if e < half { e } else { e - half };
                let (a, b) = (base + i * fs, base + (i + half) * fs);
                let (c, s) = (cos[row + i], sin[row + i]);
                out[out_base + k * out_fs] =
                    if e < half { data[a] * c - data[b] * s } else { data[b] * c + data[a] * s };
            }
        });
        Ok(vec![HostTensor::from_f32(out_block.clone(), x_desc.dtype, out)?])
    }
}

#[cfg(test)]
mod tests {
    use einsum_core::TensorType;
    use einsum_joinagg::{decomposition_error, enumerate_specs, execute_whole};

    use super::*;
    use crate::Packing;
    use crate::rope::Rope;

    fn desc(dims: &[(&str, usize)]) -> TensorDesc {
        TensorDesc::of(dims, DType::F32).unwrap()
    }

    fn positions(name: &str, values: Vec<i32>) -> HostTensor {
        let n = values.len();
        HostTensor::from_i32(TensorDesc::of(&[(name, n)], DType::I32).unwrap().tensor_type(), values).unwrap()
    }

    fn freq(d: usize) -> RopeFrequencies {
        RopeFrequencies::from_theta(10000.0, d).unwrap()
    }

    /// Positions `0..n` rotate as `Rope` over one sequence of `n` tokens, to the bit, with the
    /// feature index first, last or between.
    #[test]
    fn positions_from_zero_are_rope_over_one_sequence() {
        let layouts = [
            desc(&[("heads", 2), ("tokens", 5), ("f", 8)]),
            desc(&[("f", 6), ("tokens", 4), ("batch", 3)]),
            desc(&[("tokens", 3), ("f", 4), ("heads", 2)]),
        ];
        for x in layouts {
            let (n, d) = (x.dims[x.position("tokens").unwrap()].extent, x.dims[x.position("f").unwrap()].extent);
            let pos = positions("tokens", (0..n as i32).collect());
            let input = HostTensor::random(x.tensor_type(), DType::F32, 5);
            let at = RopeAt::new(&x, &TensorDesc::of(&[("tokens", n)], DType::I32).unwrap(), "tokens", "f", freq(d), n)
                .unwrap();
            let rope = Rope::with_frequencies(&x, "tokens", "f", freq(d), Packing::single(n)).unwrap();
            let got = execute_whole(&at, &[input.clone(), pos]).unwrap();
            let want = execute_whole(&rope, &[input]).unwrap();
            assert_eq!(got, want, "[{}]", x.dims_string());
        }
    }

    /// Tokens at positions `o..o + n` rotate as rows `o..o + n` of a `Rope` over `o + n`
    /// tokens: a decode step continues the prefill's rotation.
    #[test]
    fn offset_positions_continue_a_longer_rope() {
        let (o, n, d) = (7, 3, 8);
        let long = desc(&[("heads", 2), ("tokens", o + n), ("f", d)]);
        let input = HostTensor::random(long.tensor_type(), DType::F32, 9);
        let rope = Rope::with_frequencies(&long, "tokens", "f", freq(d), Packing::single(o + n)).unwrap();
        let want = execute_whole(&rope, std::slice::from_ref(&input)).unwrap();
        let tail = TensorType::new(&[0, o, 0], &[2, o + n, d]).unwrap();
        let want = want[0].slice(&tail).unwrap().to_f32();

        let x = desc(&[("heads", 2), ("tokens", n), ("f", d)]);
        let rows = HostTensor::from_f32(x.tensor_type(), DType::F32, input.slice(&tail).unwrap().to_f32()).unwrap();
        let pos_desc = TensorDesc::of(&[("tokens", n)], DType::I32).unwrap();
        let at = RopeAt::new(&x, &pos_desc, "tokens", "f", freq(d), 64).unwrap();
        let got = execute_whole(&at, &[rows, positions("tokens", (o as i32..(o + n) as i32).collect())]).unwrap();
        assert_eq!(got[0].to_f32(), want);
    }

    #[test]
    fn every_spec_equals_the_whole() {
        let x = desc(&[("heads", 2), ("tokens", 6), ("f", 4)]);
        let pos = TensorDesc::of(&[("tokens", 6)], DType::I32).unwrap();
        let op = RopeAt::new(&x, &pos, "tokens", "f", freq(4), 1000).unwrap();
        let names: Vec<String> = op.shardable().into_iter().map(|s| s.name).collect();
        assert_eq!(names, ["heads", "tokens", "f"]);
        assert_eq!(op.index_bound(1), Some(1000));
        assert_eq!(op.index_bound(0), None);
        for p in 1..=4 {
            for (seed, choice) in enumerate_specs(&op, p).unwrap().iter().enumerate() {
                assert!(choice.spec.functions.iter().all(|f| f.inputs[1].dim(0) == f.inputs[0].dim(1)));
                assert!(choice.spec.functions.iter().all(|f| f.inputs[0].dim(2) == Interval::full(4)));
                let err = decomposition_error(&op, &choice.spec, seed as u64).unwrap();
                assert_eq!(err, 0.0, "p {p} counts {:?}", choice.counts);
            }
        }
    }

    /// A split of the features on the output: each function reads whole feature fibers and
    /// writes its slice, across the halves' boundary or within one half.
    #[test]
    fn output_split_of_the_features() {
        let x = desc(&[("tokens", 1), ("heads", 3), ("f", 8)]);
        let pos = TensorDesc::of(&[("tokens", 1)], DType::I32).unwrap();
        let op = RopeAt::new(&x, &pos, "tokens", "f", freq(8), 64).unwrap();
        for parts in [2, 3, 5, 8] {
            let spec = einsum_joinagg::request_spec(&op, &[1, 1, parts]).unwrap();
            einsum_joinagg::validate_spec(&op, &spec, Some(parts)).unwrap();
            for f in &spec.functions {
                assert_eq!(f.inputs[0], x.tensor_type());
                assert_eq!((f.outputs[0].dim(0), f.outputs[0].dim(1)), (Interval::full(1), Interval::full(3)));
            }
            assert_eq!(decomposition_error(&op, &spec, parts as u64).unwrap(), 0.0);
        }
    }

    #[test]
    fn a_position_out_of_range_is_an_error_naming_its_token() {
        let x = desc(&[("tokens", 3), ("f", 4)]);
        let pos = TensorDesc::of(&[("tokens", 3)], DType::I32).unwrap();
        let op = RopeAt::new(&x, &pos, "tokens", "f", freq(4), 16).unwrap();
        let input = HostTensor::random(x.tensor_type(), DType::F32, 1);
        for bad in [-1, 16] {
            let err = execute_whole(&op, &[input.clone(), positions("tokens", vec![0, 2, bad])]).unwrap_err();
            assert!(matches!(err, Error::Kernel { .. }), "{err}");
            let msg = err.to_string();
            assert!(msg.contains(&format!("position {bad} of token 2")) && msg.contains("0..16"), "{msg}");
        }
        assert!(execute_whole(&op, &[input, positions("tokens", vec![0, 15, 3])]).is_ok());
    }

    #[test]
    fn construction_errors_name_the_index() {
        let x = desc(&[("tokens", 4), ("f", 6)]);
        let pos = TensorDesc::of(&[("tokens", 4)], DType::I32).unwrap();
        let shape_index = |r: Result<RopeAt>| match r {
            Err(Error::Shape { index, .. }) => index,
            other => panic!("expected a shape error, got {other:?}"),
        };
        assert!(RopeAt::new(&x, &pos, "tokens", "f", freq(6), 8).is_ok());
        assert_eq!(shape_index(RopeAt::new(&x, &pos, "t", "f", freq(6), 8)), "t");
        assert_eq!(shape_index(RopeAt::new(&x, &pos, "tokens", "g", freq(6), 8)), "g");
        assert_eq!(shape_index(RopeAt::new(&x, &pos, "tokens", "tokens", freq(6), 8)), "tokens");
        assert_eq!(shape_index(RopeAt::new(&x, &pos, "tokens", "f", freq(4), 8)), "f");
        let other_name = TensorDesc::of(&[("seq", 4)], DType::I32).unwrap();
        assert_eq!(shape_index(RopeAt::new(&x, &other_name, "tokens", "f", freq(6), 8)), "tokens");
        let other_extent = TensorDesc::of(&[("tokens", 5)], DType::I32).unwrap();
        assert_eq!(shape_index(RopeAt::new(&x, &other_extent, "tokens", "f", freq(6), 8)), "tokens");
        let rank2 = TensorDesc::of(&[("tokens", 4), ("b", 1)], DType::I32).unwrap();
        assert_eq!(shape_index(RopeAt::new(&x, &rank2, "tokens", "f", freq(6), 8)), "tokens");
        let floats = desc(&[("tokens", 4)]);
        let err = RopeAt::new(&x, &floats, "tokens", "f", freq(6), 8).unwrap_err();
        assert!(matches!(err, Error::Invalid { .. }) && err.to_string().contains("i32"), "{err}");
        assert!(matches!(RopeAt::new(&x, &pos, "tokens", "f", freq(6), 0), Err(Error::Invalid { .. })));
        let ints = TensorDesc::of(&[("tokens", 4), ("f", 6)], DType::I32).unwrap();
        assert!(matches!(RopeAt::new(&ints, &pos, "tokens", "f", freq(6), 8), Err(Error::Invalid { .. })));
    }

    #[test]
    fn kernel_rejects_inconsistent_blocks() {
        let x = desc(&[("tokens", 4), ("f", 4)]);
        let pos = TensorDesc::of(&[("tokens", 4)], DType::I32).unwrap();
        let op = RopeAt::new(&x, &pos, "tokens", "f", freq(4), 8).unwrap();
        let xs = HostTensor::random(x.tensor_type(), DType::F32, 1);
        let ps = positions("tokens", vec![1, 2, 3, 4]);
        let half_f = TensorType::new(&[0, 0], &[4, 2]).unwrap();
        let f = FunctionSpec { inputs: vec![half_f.clone(), pos.tensor_type()], outputs: vec![half_f.clone()] };
        assert!(matches!(op.compute(&f, &[xs.slice(&half_f).unwrap(), ps.clone()]), Err(Error::Kernel { .. })));
        let rows = TensorType::new(&[0, 0], &[2, 4]).unwrap();
        let f = FunctionSpec { inputs: vec![rows.clone(), pos.tensor_type()], outputs: vec![rows.clone()] };
        let err = op.compute(&f, &[xs.slice(&rows).unwrap(), ps.clone()]).unwrap_err();
        assert!(err.to_string().contains("does not follow"), "{err}");
        // An output block on other rows than the x block's, or beyond the features.
        let other_rows = TensorType::new(&[2, 0], &[4, 2]).unwrap();
        let f = FunctionSpec { inputs: vec![rows.clone(), pos.tensor_type()], outputs: vec![other_rows] };
        assert!(matches!(op.compute(&f, &[xs.slice(&rows).unwrap(), ps]), Err(Error::Kernel { .. })));
    }
}

//! A range of positions along one named index: `y = x[.., lo..hi, ..]`, the index keeping
//! its name with extent `hi - lo` (the last tokens of a sequence, one half of a fused
//! projection's output).
//!
//! Every index is shardable anywhere, the sliced one included: an output block holding
//! positions `a..b` of it reads the input block `a + lo..b + lo`, the same interval shifted.
//! Function specs share no output box, so the aggregation never runs, and every split gives
//! the whole result bit for bit.

use einsum_core::{HostTensor, Interval, KernelClass, TensorDesc, TensorType};
use einsum_joinagg::{AbstractOperator, DimIndex, Error, FunctionSpec, JoinAggSpec, Result, ShardableIndex, grid_spec};

use crate::common::{check_call, every_index, kernel_error};

const KIND: &str = "slice";

/// Positions `lo..hi` of `x` along one index; the output has `x`'s indices, in order, and
/// dtype.
#[derive(Clone, Debug)]
pub struct Slice {
    inputs: Vec<TensorDesc>,
    outputs: Vec<TensorDesc>,
    axis: usize,
    lo: usize,
}

impl Slice {
    /// `x[.., lo..hi, ..]` along `index`. Fails with an [`Error::Shape`] naming `index` when
    /// `x` lacks it or `lo..hi` is empty or reaches past its extent, and with
    /// [`Error::Invalid`] when `x` holds i32 indices rather than values.
    pub fn new(x: &TensorDesc, index: &str, lo: usize, hi: usize) -> Result<Slice> {
        Self::renamed(x, index, lo, hi, index)
    }

    /// [`Slice::new`] with the sliced index called `name` in the output (a part of a merged
    /// projection's output index takes back the name its part had: `heads_q` of
    /// `heads_q+heads_kv+heads_kv`). Fails as `new` does, and with an [`Error::Shape`] when
    /// another index of `x` is called `name`.
    pub fn renamed(x: &TensorDesc, index: &str, lo: usize, hi: usize, name: &str) -> Result<Slice> {
        let shape = |reason: String| Error::Shape { op: KIND.into(), index: index.into(), reason };
        let axis = x.position(index).ok_or_else(|| shape(format!("not an index of x [{}]", x.dims_string())))?;
        let extent = x.dims[axis].extent;
        if lo >= hi || hi > extent {
            return Err(shape(format!("the range {lo}..{hi} is empty or not within 0..{extent}")));
        }
        if !x.dtype.is_float() {
            return Err(Error::Invalid {
                op: KIND.into(),
                reason: format!("x [{}] has dtype {}, not a floating-point one", x.dims_string(), x.dtype),
            });
        }
        if name != index && x.position(name).is_some() {
            return Err(shape(format!("cannot rename it `{name}`, another index of x [{}]", x.dims_string())));
        }
        let mut y = x.clone();
        y.dims[axis].extent = hi - lo;
        y.dims[axis].name = name.to_string();
        Ok(Slice { inputs: vec![x.clone()], outputs: vec![y], axis, lo })
    }

    /// The name of the sliced index.
    pub fn index(&self) -> &str {
        &self.inputs[0].dims[self.axis].name
    }

    /// The range of positions kept, `lo..hi`.
    pub fn range(&self) -> std::ops::Range<usize> {
        self.lo..self.lo + self.outputs[0].dims[self.axis].extent
    }

    /// The input block an output block reads: the same box, shifted by `lo` along the
    /// sliced index.
    fn source(&self, out: &TensorType) -> TensorType {
        let mut dims: Vec<Interval> = (0..out.rank()).map(|d| out.dim(d)).collect();
        let s = dims[self.axis];
        dims[self.axis] = Interval { lo: s.lo + self.lo, hi: s.hi + self.lo };
        TensorType::from_intervals(dims)
    }
}

impl AbstractOperator for Slice {
    fn kind(&self) -> &str {
        KIND
    }

    fn kernel_class(&self) -> KernelClass {
        KernelClass::Copy
    }

    fn inputs(&self) -> &[TensorDesc] {
        &self.inputs
    }

    fn outputs(&self) -> &[TensorDesc] {
        &self.outputs
    }

    /// The output's indices, the sliced one at its new extent.
    fn shardable(&self) -> Vec<ShardableIndex> {
        every_index(&self.outputs[0])
    }

    /// The grid over the output's indices, each input box the output box shifted by `lo`
    /// along the sliced index ([`grid_spec`] places the input box at the output's
    /// positions, which this then moves).
    fn join_agg_spec(&self, intervals: &[Vec<Interval>]) -> Result<JoinAggSpec> {
        let all: Vec<Option<usize>> = (0..self.outputs[0].rank()).map(Some).collect();
        let dims: DimIndex = vec![all.clone(), all];
        // The output's extents on both sides: the input's box is moved after.
        let mut spec = grid_spec(KIND, &self.outputs, &self.outputs, &self.shardable(), &dims, intervals)?;
        for f in &mut spec.functions {
            f.inputs[0] = self.source(&f.outputs[0]);
        }
        Ok(spec)
    }

    /// None: a slice moves bytes.
    fn flops(&self, _: &FunctionSpec) -> f64 {
        0.0
    }

    fn compute(&self, f: &FunctionSpec, inputs: &[HostTensor]) -> Result<Vec<HostTensor>> {
        check_call(self, f, inputs)?;
        let (x, y) = (&f.inputs[0], &f.outputs[0]);
        // The input block may hold more than the output needs (the whole input, for one
        // call on whole tensors), never less.
        let source = self.source(y);
        if !source.is_projection_of(x) {
            return Err(kernel_error(
                KIND,
                format!(
                    "input block {x} does not hold {source}, output block {y} shifted by {} along `{}`",
                    self.lo,
                    self.index()
                ),
            ));
        }
        // The same elements in the same order, relabelled: every bit kept, in every dtype.
        let part = inputs[0].slice(&source)?;
        Ok(vec![HostTensor::from_ne_bytes(y.clone(), self.outputs[0].dtype, &part.to_ne_bytes())?])
    }
}

#[cfg(test)]
mod tests {
    use einsum_core::DType;
    use einsum_joinagg::{decomposition_error, enumerate_specs, execute_whole, request_spec};

    use super::*;

    fn x(dtype: DType) -> TensorDesc {
        TensorDesc::of(&[("b", 2), ("t", 7), ("d", 3)], dtype).unwrap()
    }

    /// Positions 2..6 of t of the tensor whose element is 100b + 10t + d.
    #[test]
    fn keeps_the_range_of_the_index() {
        let op = Slice::new(&x(DType::F32), "t", 2, 6).unwrap();
        assert_eq!(op.outputs()[0].dims_string(), "b=2, t=4, d=3");
        assert_eq!((op.index(), op.range()), ("t", 2..6));
        let values = |b: usize, t: usize, d: usize| (100 * b + 10 * t + d) as f32;
        let mut data = Vec::new();
        for b in 0..2 {
            for t in 0..7 {
                for d in 0..3 {
                    data.push(values(b, t, d));
                }
            }
        }
        let input = HostTensor::from_f32(x(DType::F32).tensor_type(), DType::F32, data).unwrap();
        let y = execute_whole(&op, &[input]).unwrap();
        let mut want = Vec::new();
        for b in 0..2 {
            for t in 2..6 {
                for d in 0..3 {
                    want.push(values(b, t, d));
                }
            }
        }
        assert_eq!(y[0].to_f32(), want);
    }

    /// Every spec on 1 to 4 devices, splitting the sliced index too, gives the whole slice
    /// exactly, in f32 and bf16, for ranges at either end, in the middle and whole.
    #[test]
    fn every_spec_equals_the_whole_slice() {
        for dtype in [DType::F32, DType::BF16] {
            for (lo, hi) in [(0, 3), (2, 6), (4, 7), (0, 7)] {
                let op = Slice::new(&x(dtype), "t", lo, hi).unwrap();
                for p in 1..=4 {
                    for (seed, choice) in enumerate_specs(&op, p).unwrap().iter().enumerate() {
                        let err = decomposition_error(&op, &choice.spec, seed as u64).unwrap();
                        assert_eq!(err, 0.0, "{dtype} {lo}..{hi} counts {:?}", choice.counts);
                    }
                }
            }
        }
        // Split three ways along t: the input boxes are the output's shifted by 2.
        let op = Slice::new(&x(DType::F32), "t", 2, 6).unwrap();
        let spec = request_spec(&op, &[1, 3, 1]).unwrap();
        let along_t: Vec<(usize, usize)> = spec.input_blocks(0).iter().map(|b| (b.dim(1).lo, b.dim(1).hi)).collect();
        assert_eq!(along_t, [(2, 3), (3, 4), (4, 6)]);
    }

    /// A renamed slice keeps the elements and positions and names the output index anew;
    /// a name another index has is refused.
    #[test]
    fn a_renamed_slice_names_its_index_anew() {
        let op = Slice::renamed(&x(DType::F32), "t", 2, 6, "u").unwrap();
        assert_eq!(op.outputs()[0].dims_string(), "b=2, u=4, d=3");
        assert_eq!((op.index(), op.range()), ("t", 2..6));
        let input = HostTensor::random(x(DType::F32).tensor_type(), DType::F32, 4);
        let want =
            execute_whole(&Slice::new(&x(DType::F32), "t", 2, 6).unwrap(), std::slice::from_ref(&input)).unwrap();
        let got = execute_whole(&op, &[input]).unwrap();
        assert_eq!(got[0].to_f32(), want[0].to_f32());
        for p in 1..=3 {
            for (seed, choice) in enumerate_specs(&op, p).unwrap().iter().enumerate() {
                assert_eq!(decomposition_error(&op, &choice.spec, seed as u64).unwrap(), 0.0);
            }
        }
        assert!(Slice::renamed(&x(DType::F32), "t", 2, 6, "d").is_err());
    }

    /// NaN and the infinities are copied as they are, bit for bit.
    #[test]
    fn nan_and_infinities_are_copied() {
        let x = TensorDesc::of(&[("i", 4)], DType::F16).unwrap();
        let t =
            HostTensor::from_f32(x.tensor_type(), DType::F16, vec![1.0, f32::NAN, f32::NEG_INFINITY, -0.0]).unwrap();
        let y = execute_whole(&Slice::new(&x, "i", 1, 4).unwrap(), std::slice::from_ref(&t)).unwrap();
        assert_eq!(y[0].to_ne_bytes(), t.to_ne_bytes()[2..]);
    }

    #[test]
    fn bad_ranges_and_indices_are_refused_naming_the_index() {
        let shape = |r: Result<Slice>| match r {
            Err(Error::Shape { op, index, reason }) => {
                assert_eq!(op, "slice");
                (index, reason)
            }
            other => panic!("expected a shape error, got {other:?}"),
        };
        let (index, reason) = shape(Slice::new(&x(DType::F32), "tokens", 0, 1));
        assert!(index == "tokens" && reason.contains("t=7"), "{reason}");
        for (lo, hi) in [(3, 3), (4, 2), (5, 8)] {
            let (index, reason) = shape(Slice::new(&x(DType::F32), "t", lo, hi));
            assert!(index == "t" && reason.contains(&format!("{lo}..{hi}")) && reason.contains("0..7"), "{reason}");
        }
        let ids = TensorDesc::of(&[("tokens", 4)], DType::I32).unwrap();
        assert!(matches!(Slice::new(&ids, "tokens", 0, 2), Err(Error::Invalid { .. })));
    }

    #[test]
    fn an_input_block_without_the_shifted_box_is_a_kernel_error() {
        let op = Slice::new(&x(DType::F32), "t", 2, 6).unwrap();
        let y = op.outputs()[0].tensor_type();
        let t = HostTensor::random(y.clone(), DType::F32, 1);
        let f = FunctionSpec { inputs: vec![y.clone()], outputs: vec![y] };
        let e = op.compute(&f, &[t]).unwrap_err().to_string();
        assert!(e.contains("shifted by 2") && e.contains("[0..2, 2..6, 0..3]"), "{e}");
    }
}

//! The position of the largest value along one named index, as `torch.argmax` and
//! `numpy.argmax` give it: the first position of the maximum, and the first NaN where the
//! row holds one (NumPy's maximum propagates NaN). The result is i32 (an index: the top token
//! of each position's logits, say).
//!
//! The index stays whole in every block (a row needs all of itself); every other index is
//! shardable anywhere.

use einsum_core::{DType, HostTensor, Interval, KernelClass, TensorDesc};
use einsum_joinagg::{AbstractOperator, DimIndex, Error, FunctionSpec, JoinAggSpec, Result, ShardableIndex, grid_spec};

use crate::common::{check_call, f32s, kernel_error, row_axis, row_dims, row_shardable, split_rows};

const KIND: &str = "argmax";

/// The argmax of a tensor along one index: the output has the other indices, in order, and
/// dtype i32.
#[derive(Clone, Debug)]
pub struct Argmax {
    inputs: Vec<TensorDesc>,
    outputs: Vec<TensorDesc>,
    axis: usize,
}

impl Argmax {
    /// The argmax of `x` along `index`; fails naming `index` when `x` lacks it or it is
    /// empty, and with [`Error::Invalid`] when `x` holds indices rather than values or
    /// `index` has more positions than an i32 can name.
    pub fn new(x: &TensorDesc, index: &str) -> Result<Argmax> {
        let axis = row_axis(KIND, x, index)?;
        if !x.dtype.is_float() {
            return Err(Error::Invalid {
                op: KIND.into(),
                reason: format!("x [{}] must be floating point", x.dims_string()),
            });
        }
        if x.dims[axis].extent > i32::MAX as usize {
            return Err(Error::Shape {
                op: KIND.into(),
                index: index.into(),
                reason: "too long for i32 positions".into(),
            });
        }
        let dims = x.dims.iter().enumerate().filter(|(a, _)| *a != axis).map(|(_, d)| d.clone()).collect();
        let y = TensorDesc::new(dims, DType::I32)?;
        Ok(Argmax { inputs: vec![x.clone()], outputs: vec![y], axis })
    }

    /// The name of the index the maximum is taken along.
    pub fn index(&self) -> &str {
        &self.inputs[0].dims[self.axis].name
    }
}

impl AbstractOperator for Argmax {
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

    fn shardable(&self) -> Vec<ShardableIndex> {
        row_shardable(&self.inputs[0], self.axis)
    }

    fn join_agg_spec(&self, intervals: &[Vec<Interval>]) -> Result<JoinAggSpec> {
        let x = row_dims(self.inputs[0].rank(), self.axis);
        let dims: DimIndex = vec![x, (0..self.outputs[0].rank()).map(Some).collect()];
        grid_spec(KIND, &self.inputs, &self.outputs, &self.shardable(), &dims, intervals)
    }

    /// One comparison per input element.
    fn flops(&self, f: &FunctionSpec) -> f64 {
        f.inputs.first().map_or(0.0, |t| t.volume() as f64)
    }

    fn compute(&self, f: &FunctionSpec, inputs: &[HostTensor]) -> Result<Vec<HostTensor>> {
        check_call(self, f, inputs)?;
        let n = self.inputs[0].dims[self.axis].extent;
        let row = f.inputs[0].dim(self.axis);
        if row.lo != 0 || row.len() != n {
            return Err(kernel_error(KIND, format!("block {} does not hold whole rows", f.inputs[0])));
        }
        let x = f32s(&inputs[0]);
        let (outer, n, inner) = split_rows(&f.inputs[0].shape(), self.axis);
        let mut out = Vec::with_capacity(outer * inner);
        for o in 0..outer {
            for i in 0..inner {
                let at = |k: usize| x[(o * n + k) * inner + i];
                let mut best = 0;
                for k in 1..n {
                    let (b, v) = (at(best), at(k));
                    if !b.is_nan() && (v > b || v.is_nan()) {
                        best = k;
                    }
                }
                out.push(best as i32);
            }
        }
        Ok(vec![HostTensor::from_i32(f.outputs[0].clone(), out)?])
    }
}

#[cfg(test)]
mod tests {
    use einsum_joinagg::{decomposition_error, enumerate_specs, execute_whole};

    use super::*;

    fn argmax_of(values: Vec<f32>) -> i32 {
        let x = TensorDesc::of(&[("vocab", values.len())], DType::F32).unwrap();
        let op = Argmax::new(&x, "vocab").unwrap();
        let t = HostTensor::from_f32(x.tensor_type(), DType::F32, values).unwrap();
        execute_whole(&op, &[t]).unwrap()[0].to_i32()[0]
    }

    #[test]
    fn the_first_maximum_or_the_first_nan_as_numpy() {
        assert_eq!(argmax_of(vec![1.0, 3.0, 2.0, 3.0]), 1);
        assert_eq!(argmax_of(vec![f32::NEG_INFINITY, -5.0]), 1);
        assert_eq!(argmax_of(vec![1.0, f32::NAN, 9.0, f32::NAN]), 1);
        assert_eq!(argmax_of(vec![f32::NAN, 9.0]), 0);
        assert_eq!(argmax_of(vec![-0.0, 0.0]), 0);
    }

    /// Along a middle index, with every spec on 1 to 4 devices: the same positions.
    #[test]
    fn every_spec_gives_the_whole_positions() {
        let x = TensorDesc::of(&[("seqs", 3), ("vocab", 7), ("tokens", 4)], DType::BF16).unwrap();
        let op = Argmax::new(&x, "vocab").unwrap();
        assert_eq!(op.outputs()[0].dims_string(), "seqs=3, tokens=4");
        assert_eq!(op.outputs()[0].dtype, DType::I32);
        for p in 1..=4 {
            for (seed, choice) in enumerate_specs(&op, p).unwrap().iter().enumerate() {
                assert_eq!(decomposition_error(&op, &choice.spec, seed as u64).unwrap(), 0.0, "{:?}", choice.counts);
            }
        }
    }

    #[test]
    fn an_unknown_index_or_integer_input_is_refused() {
        let x = TensorDesc::of(&[("vocab", 7)], DType::F32).unwrap();
        assert!(Argmax::new(&x, "tokens").unwrap_err().to_string().contains("tokens"));
        let ids = TensorDesc::of(&[("vocab", 7)], DType::I32).unwrap();
        assert!(Argmax::new(&ids, "vocab").unwrap_err().to_string().contains("floating point"));
    }
}

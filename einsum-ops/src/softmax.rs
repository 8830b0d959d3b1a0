//! Softmax along one named index: `y[.., k, ..] = e^(x[.., k, ..] − m) / Σ_k' e^(x[.., k', ..] − m)`
//! with `m` the maximum of the row, for numerical stability.
//!
//! Non-finite inputs follow that formula as NumPy evaluates it: `m` is NaN when the row
//! holds a NaN, so the whole row is NaN; a `+∞` makes `m = +∞` and `∞ − ∞` NaN, so the row
//! is NaN too; a `−∞` gets weight `e^−∞ = 0` while the row holds a larger value, and a row
//! of `−∞` only is NaN (`−∞ − (−∞)`).
//!
//! The softmax index stays whole in every block (a row needs all of itself); every other
//! index is shardable anywhere. This file also holds the row helpers the norms share: a
//! row-wise kernel sees its block as `(outer, n, inner)`, with the normalised index of
//! extent `n` at any position, and works on one `n × inner` slab at a time.

use einsum_core::{HostTensor, Interval, KernelClass, TensorDesc};
use einsum_joinagg::{AbstractOperator, DimIndex, FunctionSpec, JoinAggSpec, Result, ShardableIndex, grid_spec};

use crate::{
    common::{check_call, check_rows, f32s, row_axis, row_dims, row_shardable, split_rows},
    parallel, vexp,
};

const KIND: &str = "softmax";

/// Softmax along one index of a tensor of any rank. The output has `x`'s indices and dtype.
#[derive(Clone, Debug)]
pub struct Softmax {
    inputs: Vec<TensorDesc>,
    outputs: Vec<TensorDesc>,
    axis: usize,
}

impl Softmax {
    /// Softmax of `x` along `index`; fails with an [`Error::Shape`] naming `index` when `x`
    /// has no such index or it is empty.
    pub fn new(x: &TensorDesc, index: &str) -> Result<Softmax> {
        let axis = row_axis(KIND, x, index)?;
        Ok(Softmax { inputs: vec![x.clone()], outputs: vec![x.clone()], axis })
    }

    /// The name of the softmax index.
    pub fn index(&self) -> &str {
        &self.inputs[0].dims[self.axis].name
    }
}

impl AbstractOperator for Softmax {
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
        let dims: DimIndex = vec![x.clone(), x];
        grid_spec(KIND, &self.inputs, &self.outputs, &self.shardable(), &dims, intervals)
    }

    /// Five per element: max, subtract, exp, sum, divide.
    fn flops(&self, f: &FunctionSpec) -> f64 {
        5.0 * f.outputs.first().map_or(0.0, |t| t.volume() as f64)
    }

    fn compute(&self, f: &FunctionSpec, inputs: &[HostTensor]) -> Result<Vec<HostTensor>> {
        check_call(self, f, inputs)?;
        let n = self.inputs[0].dims[self.axis].extent;
        check_rows(KIND, &f.inputs[0], &f.outputs[0], self.axis, n)?;
        let x = f32s(&inputs[0]);
        let (_, n, inner) = split_rows(&f.inputs[0].shape(), self.axis);
        let mut y = vec![0.0; x.len()];
        if !x.is_empty() {
            if inner == 1 {
                // Softmax over the last dimension: each row is contiguous, and rows are
                // spread over the kernel's helper threads.
                parallel::for_chunks_mut(&mut y, n, |r, ys| {
                    let xs = &x[r * n..(r + 1) * n];
                    let m = vexp::max(xs);
                    ys.copy_from_slice(xs);
                    let s = vexp::exp_shifted_sum(ys, m);
                    ys.iter_mut().for_each(|o| *o /= s);
                });
                return Ok(vec![HostTensor::from_f32(f.outputs[0].clone(), self.outputs[0].dtype, y)?]);
            }
            let (mut max, mut sum) = (vec![0.0f32; inner], vec![0.0f32; inner]);
            for (xs, ys) in x.chunks_exact(n * inner).zip(y.chunks_exact_mut(n * inner)) {
                max.fill(f32::NEG_INFINITY);
                for row in xs.chunks_exact(inner) {
                    max.iter_mut().zip(row).for_each(|(m, &v)| *m = vexp::maximum(*m, v));
                }
                sum.fill(0.0);
                for (row, out) in xs.chunks_exact(inner).zip(ys.chunks_exact_mut(inner)) {
                    for (((o, &v), &m), s) in out.iter_mut().zip(row).zip(&max).zip(sum.iter_mut()) {
                        *o = vexp::exp(v - m);
                        *s += *o;
                    }
                }
                for out in ys.chunks_exact_mut(inner) {
                    out.iter_mut().zip(&sum).for_each(|(o, &s)| *o /= s);
                }
            }
        }
        Ok(vec![HostTensor::from_f32(f.outputs[0].clone(), self.outputs[0].dtype, y)?])
    }
}

#[cfg(test)]
mod tests {
    use einsum_core::{DType, TensorType, relative_error};
    use einsum_joinagg::{Error, decomposition_error, enumerate_specs, execute_whole};

    use super::*;

    /// Over the last dimension (contiguous rows, longer than the 16 lanes of the vectorized
    /// sum, with large and tiny scores): an f64 reference, and the same bits on helper threads.
    #[test]
    fn last_dimension_rows_match_f64_on_any_number_of_threads() {
        let (rows, n) = (23, 41);
        let x = TensorDesc::of(&[("t", rows), ("k", n)], DType::F32).unwrap();
        let op = Softmax::new(&x, "k").unwrap();
        let data: Vec<f32> = (0..rows * n).map(|i| ((i * 7919) % 1000) as f32 / 10.0 - 50.0).collect();
        let t = HostTensor::from_f32(x.tensor_type(), DType::F32, data).unwrap();
        let alone = execute_whole(&op, std::slice::from_ref(&t)).unwrap();
        for helpers in [1, 3] {
            let lent =
                einsum_core::intra_op::with_helpers(helpers, || execute_whole(&op, std::slice::from_ref(&t))).unwrap();
            assert_eq!(lent, alone, "{helpers} helpers");
        }
        for r in [0, rows / 2, rows - 1] {
            let row: Vec<f64> = (0..n).map(|k| t.get(&[r, k]).unwrap() as f64).collect();
            let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let total: f64 = row.iter().map(|v| (v - m).exp()).sum();
            for (k, v) in row.iter().enumerate() {
                let want = (v - m).exp() / total;
                let got = alone[0].get(&[r, k]).unwrap() as f64;
                assert!((got - want).abs() <= 1e-6 * want.max(1e-30) + 1e-30, "row {r}, {k}: {got} vs {want}");
            }
        }
    }

    #[test]
    fn rows_sum_to_one_at_every_position() {
        let x = TensorDesc::of(&[("a", 3), ("b", 4), ("c", 5)], DType::F32).unwrap();
        for index in ["a", "b", "c"] {
            let op = Softmax::new(&x, index).unwrap();
            assert_eq!(op.index(), index);
            let t = HostTensor::random(x.tensor_type(), DType::F32, 2);
            let y = execute_whole(&op, &[t]).unwrap().remove(0);
            let axis = x.index_of(index).unwrap();
            let shape = x.shape();
            for i in 0..shape[0] {
                for j in 0..shape[1] {
                    for k in 0..shape[2] {
                        let mut at = [i, j, k];
                        if at[axis] != 0 {
                            continue;
                        }
                        let sum: f32 = (0..shape[axis])
                            .map(|r| {
                                at[axis] = r;
                                y.get(&at).unwrap()
                            })
                            .sum();
                        assert!((sum - 1.0).abs() < 1e-6, "{index}: {sum}");
                    }
                }
            }
        }
    }

    #[test]
    fn known_values_and_stability() {
        let x = TensorDesc::of(&[("n", 3)], DType::F32).unwrap();
        let op = Softmax::new(&x, "n").unwrap();
        let t = HostTensor::from_f32(x.tensor_type(), DType::F32, vec![1.0, 2.0, 3.0]).unwrap();
        let y = execute_whole(&op, &[t]).unwrap()[0].to_f32();
        let e = [1.0f32.exp(), 2.0f32.exp(), 3.0f32.exp()];
        let s: f32 = e.iter().sum();
        for (got, want) in y.iter().zip(e.iter().map(|v| v / s)) {
            assert!((got - want).abs() < 1e-6);
        }
        // Large inputs would overflow without subtracting the max.
        let t = HostTensor::from_f32(x.tensor_type(), DType::F32, vec![1000.0, 1000.0, 1000.0]).unwrap();
        let y = execute_whole(&op, &[t]).unwrap()[0].to_f32();
        assert!(y.iter().all(|v| (v - 1.0 / 3.0).abs() < 1e-6), "{y:?}");
    }

    #[test]
    fn the_softmax_index_stays_whole() {
        let x = TensorDesc::of(&[("q", 4), ("k", 6), ("h", 2)], DType::F32).unwrap();
        let op = Softmax::new(&x, "k").unwrap();
        let names: Vec<String> = op.shardable().into_iter().map(|s| s.name).collect();
        assert_eq!(names, vec!["q", "h"]);
        for p in [1, 2, 4, 8] {
            for choice in enumerate_specs(&op, p).unwrap() {
                assert!(choice.spec.functions.iter().all(|f| f.inputs[0].dim(1) == Interval::full(6)));
                assert_eq!(decomposition_error(&op, &choice.spec, 7).unwrap(), 0.0);
            }
        }
        assert!(matches!(enumerate_specs(&op, 5), Err(Error::NoSpec { .. })));
        let only = Softmax::new(&TensorDesc::of(&[("k", 6)], DType::F32).unwrap(), "k").unwrap();
        assert!(matches!(enumerate_specs(&only, 2), Err(Error::NoSpec { .. })));
    }

    #[test]
    fn unknown_index_and_partial_rows_are_errors() {
        let x = TensorDesc::of(&[("t", 4), ("d", 6)], DType::F32).unwrap();
        let err = Softmax::new(&x, "e").unwrap_err();
        assert!(matches!(&err, Error::Shape { index, .. } if index == "e"));
        assert!(err.to_string().contains("softmax"), "{err}");
        let op = Softmax::new(&x, "d").unwrap();
        let half = TensorType::new(&[0, 0], &[4, 3]).unwrap();
        let f = FunctionSpec { inputs: vec![half.clone()], outputs: vec![half.clone()] };
        let t = HostTensor::random(half, DType::F32, 1);
        assert!(matches!(op.compute(&f, &[t]), Err(Error::Kernel { .. })));
    }

    #[test]
    fn bf16_storage_stays_within_its_precision() {
        let x = TensorDesc::of(&[("t", 6), ("d", 16)], DType::BF16).unwrap();
        let op = Softmax::new(&x, "d").unwrap();
        for choice in enumerate_specs(&op, 3).unwrap() {
            assert!(decomposition_error(&op, &choice.spec, 1).unwrap() <= 2.0 * DType::BF16.epsilon());
        }
        let t = HostTensor::random(x.tensor_type(), DType::BF16, 4);
        let y = execute_whole(&op, std::slice::from_ref(&t)).unwrap();
        let op32 = Softmax::new(&TensorDesc { dtype: DType::F32, ..x }, "d").unwrap();
        let y32 = execute_whole(&op32, &[t.cast(DType::F32)]).unwrap();
        assert!(relative_error(&y[0], &y32[0]) <= DType::BF16.epsilon());
    }

    #[test]
    fn helpers_split_rows() {
        assert_eq!(split_rows(&[2, 3, 4], 1), (2, 3, 4));
        assert_eq!(split_rows(&[5], 0), (1, 5, 1));
        assert_eq!(row_dims(3, 1), vec![Some(0), None, Some(1)]);
        assert_eq!(row_dims(2, 0), vec![None, Some(0)]);
    }
}

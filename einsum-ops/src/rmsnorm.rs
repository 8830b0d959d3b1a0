//! RMSNorm along one named index: `y = x / √(mean_index(x²) + eps) · w`.
//!
//! Every index of `x` but the normalised one is shardable anywhere, in `x`'s order, and the
//! normalised index is shardable last, anywhere, on the output only: every function reads
//! whole rows of `x` (each row's scale needs all of it), the weight's slice, and writes its
//! slice of the output rows. That is the tensor-parallel replicated norm; it is what lets a
//! decode step, whose `x` has one token, spread a norm over devices at all. The output
//! blocks still tile the output, so nothing is aggregated. The parameter checks here are
//! shared with [`LayerNorm`](crate::layernorm::LayerNorm).

use einsum_core::{HostTensor, Interval, KernelClass, TensorDesc};
use einsum_joinagg::{AbstractOperator, DimIndex, FunctionSpec, JoinAggSpec, Result, ShardableIndex, grid_spec};

use crate::{
    common::{
        check_call, check_eps, check_param, check_row_slice, f32s, kernel_error, row_axis, row_dims, row_shardable,
        split_rows,
    },
    parallel,
};

const KIND: &str = "rmsnorm";

/// RMSNorm of a tensor of any rank along one index, scaled by a rank-1 weight. The output
/// has `x`'s indices and dtype.
#[derive(Clone, Debug)]
pub struct RmsNorm {
    inputs: Vec<TensorDesc>,
    outputs: Vec<TensorDesc>,
    axis: usize,
    eps: f32,
}

impl RmsNorm {
    /// `y = x / √(mean_index(x²) + eps) · weight`. The weight has rank 1, the extent of
    /// `x`'s `index` and `x`'s dtype (else an error naming the index); `eps` is finite and
    /// non-negative.
    pub fn new(x: &TensorDesc, weight: &TensorDesc, index: &str, eps: f32) -> Result<RmsNorm> {
        let axis = row_axis(KIND, x, index)?;
        check_param(KIND, x, axis, weight, "weight")?;
        check_eps(KIND, eps)?;
        Ok(RmsNorm { inputs: vec![x.clone(), weight.clone()], outputs: vec![x.clone()], axis, eps })
    }

    /// The name of the normalised index.
    pub fn index(&self) -> &str {
        &self.inputs[0].dims[self.axis].name
    }

    /// The `eps` added to the mean square.
    pub fn eps(&self) -> f32 {
        self.eps
    }
}

impl AbstractOperator for RmsNorm {
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

    /// Every index of `x` but the normalised one, in `x`'s order, then the normalised index
    /// (output only, see the [module docs](self)), appended last so that the requests of the
    /// other indices keep their meaning.
    fn shardable(&self) -> Vec<ShardableIndex> {
        let x = &self.inputs[0];
        let mut indices = row_shardable(x, self.axis);
        let row = &x.dims[self.axis];
        indices.push(ShardableIndex::any(row.name.clone(), row.extent));
        indices
    }

    /// A grid: `x`'s blocks hold whole rows, the weight and the output's normalised
    /// dimension follow the last shardable index.
    fn join_agg_spec(&self, intervals: &[Vec<Interval>]) -> Result<JoinAggSpec> {
        let rank = self.inputs[0].rank();
        let x = row_dims(rank, self.axis);
        let mut y = x.clone();
        y[self.axis] = Some(rank - 1);
        let dims: DimIndex = vec![x, vec![Some(rank - 1)], y];
        grid_spec(KIND, &self.inputs, &self.outputs, &self.shardable(), &dims, intervals)
    }

    /// Per row the function reads, two per element of the whole row (square, sum) and three
    /// more (mean, add eps, reciprocal square root); per output element, two (normalise,
    /// weight). Unsplit rows make it four per element and three per row.
    fn flops(&self, f: &FunctionSpec) -> f64 {
        let Some(y) = f.outputs.first().filter(|y| y.rank() == self.inputs[0].rank()) else {
            return 0.0;
        };
        let (volume, slice) = (y.volume() as f64, y.dim(self.axis).len());
        let rows = y.volume().checked_div(slice).unwrap_or(0) as f64;
        let n = self.inputs[0].dims[self.axis].extent as f64;
        2.0 * volume + 2.0 * rows * n + 3.0 * rows
    }

    fn compute(&self, f: &FunctionSpec, inputs: &[HostTensor]) -> Result<Vec<HostTensor>> {
        check_call(self, f, inputs)?;
        let n = self.inputs[0].dims[self.axis].extent;
        let slice = check_row_slice(KIND, &f.inputs[0], &f.outputs[0], self.axis, n)?;
        if f.inputs[1].dim(0) != slice {
            return Err(kernel_error(
                KIND,
                format!("weight block {} is not the output's slice {slice} of the rows", f.inputs[1]),
            ));
        }
        let (x, w) = (f32s(&inputs[0]), f32s(&inputs[1]));
        let (_, n, inner) = split_rows(&f.inputs[0].shape(), self.axis);
        // Each row's scale comes from the whole row of `x`; only the slice `lo..lo + m` of
        // it is normalised and written.
        let (lo, m) = (slice.lo, slice.len());
        let mut y = vec![0.0; f.outputs[0].volume()];
        if !y.is_empty() && inner == 1 {
            // Normalizing over the last dimension: each row is contiguous, and rows are
            // spread over the kernel's helper threads.
            parallel::for_chunks_mut(&mut y, m, |r, out| {
                let row = &x[r * n..(r + 1) * n];
                let s = 1.0 / (sum_of_squares(row) / n as f32 + self.eps).sqrt();
                for ((o, &v), &wk) in out.iter_mut().zip(&row[lo..]).zip(w.iter()) {
                    *o = v * s * wk;
                }
            });
        } else if !y.is_empty() {
            let mut scale = vec![0.0f32; inner];
            for (xs, ys) in x.chunks_exact(n * inner).zip(y.chunks_exact_mut(m * inner)) {
                scale.fill(0.0);
                for row in xs.chunks_exact(inner) {
                    scale.iter_mut().zip(row).for_each(|(s, &v)| *s += v * v);
                }
                scale.iter_mut().for_each(|s| *s = 1.0 / (*s / n as f32 + self.eps).sqrt());
                let rows = xs.chunks_exact(inner).skip(lo);
                for ((row, out), &wk) in rows.zip(ys.chunks_exact_mut(inner)).zip(w.iter()) {
                    for ((o, &v), &s) in out.iter_mut().zip(row).zip(&scale) {
                        *o = v * s * wk;
                    }
                }
            }
        }
        Ok(vec![HostTensor::from_f32(f.outputs[0].clone(), self.outputs[0].dtype, y)?])
    }
}

/// `Σ xᵢ²`, added in 16 lanes (which the compiler keeps in vector registers), then the
/// lanes in order.
fn sum_of_squares(xs: &[f32]) -> f32 {
    let mut acc = [0.0f32; 16];
    let mut chunks = xs.chunks_exact(16);
    for c in &mut chunks {
        acc.iter_mut().zip(c).for_each(|(a, &v)| *a += v * v);
    }
    acc.iter_mut().zip(chunks.remainder()).for_each(|(a, &v)| *a += v * v);
    acc.iter().sum()
}

#[cfg(test)]
mod tests {
    use einsum_core::{DType, TensorType, relative_error};
    use einsum_joinagg::{Error, decomposition_error, enumerate_specs, execute_whole};

    use super::*;

    fn tensor(desc: &TensorDesc, data: Vec<f32>) -> HostTensor {
        HostTensor::from_f32(desc.tensor_type(), desc.dtype, data).unwrap()
    }

    #[test]
    fn known_vector() {
        let x = TensorDesc::of(&[("d", 4)], DType::F32).unwrap();
        let w = TensorDesc::of(&[("d", 4)], DType::F32).unwrap();
        let op = RmsNorm::new(&x, &w, "d", 0.0).unwrap();
        assert_eq!((op.kind(), op.index(), op.eps()), ("rmsnorm", "d", 0.0));
        // mean(x²) = (1 + 9 + 9 + 1) / 4 = 5.
        let y =
            execute_whole(&op, &[tensor(&x, vec![1.0, 3.0, -3.0, 1.0]), tensor(&w, vec![1.0, 2.0, 1.0, 0.5])]).unwrap();
        let r = 5.0f32.sqrt();
        let want = [1.0 / r, 6.0 / r, -3.0 / r, 0.5 / r];
        for (got, want) in y[0].to_f32().iter().zip(want) {
            assert!((got - want).abs() < 1e-6, "{got} vs {want}");
        }
    }

    #[test]
    fn index_at_any_position() {
        let w = TensorDesc::of(&[("h", 5)], DType::F32).unwrap();
        let x = TensorDesc::of(&[("a", 3), ("h", 5), ("b", 4)], DType::F32).unwrap();
        let op = RmsNorm::new(&x, &w, "h", 1e-5).unwrap();
        let tx = HostTensor::random(x.tensor_type(), DType::F32, 1);
        let tw = HostTensor::random(w.tensor_type(), DType::F32, 2);
        let y = execute_whole(&op, &[tx.clone(), tw.clone()]).unwrap().remove(0);
        for a in 0..3 {
            for b in 0..4 {
                let ms: f32 = (0..5).map(|h| tx.get(&[a, h, b]).unwrap().powi(2)).sum::<f32>() / 5.0;
                for h in 0..5 {
                    let want = tx.get(&[a, h, b]).unwrap() / (ms + 1e-5).sqrt() * tw.get(&[h]).unwrap();
                    assert!((y.get(&[a, h, b]).unwrap() - want).abs() < 1e-5);
                }
            }
        }
        let names: Vec<String> = op.shardable().into_iter().map(|s| s.name).collect();
        assert_eq!(names, ["a", "b", "h"]);
        for p in [2, 3, 4, 5, 6, 12] {
            for choice in enumerate_specs(&op, p).unwrap() {
                for f in &choice.spec.functions {
                    // x holds whole rows; the weight is the output's slice of them.
                    assert_eq!(f.inputs[0].dim(1), Interval::full(5));
                    assert_eq!(f.inputs[1].dim(0), f.outputs[0].dim(1));
                }
                assert_eq!(decomposition_error(&op, &choice.spec, 3).unwrap(), 0.0);
            }
        }
        assert!(matches!(enumerate_specs(&op, 7), Err(Error::NoSpec { .. })));
    }

    /// Over the last dimension (the row-parallel path, rows of odd length): an f64
    /// reference, and the same bits on any number of helper threads.
    #[test]
    fn last_dimension_rows_on_helper_threads() {
        let (rows, d) = (37, 53);
        let w = TensorDesc::of(&[("d", d)], DType::F32).unwrap();
        let x = TensorDesc::of(&[("t", rows), ("d", d)], DType::F32).unwrap();
        let op = RmsNorm::new(&x, &w, "d", 1e-5).unwrap();
        let args =
            [HostTensor::random(x.tensor_type(), DType::F32, 7), HostTensor::random(w.tensor_type(), DType::F32, 8)];
        let alone = execute_whole(&op, &args).unwrap();
        for helpers in [1, 4] {
            let lent = einsum_core::intra_op::with_helpers(helpers, || execute_whole(&op, &args)).unwrap();
            assert_eq!(lent, alone, "{helpers} helpers");
        }
        for t in [0, 17, rows - 1] {
            let ms = (0..d).map(|i| (args[0].get(&[t, i]).unwrap() as f64).powi(2)).sum::<f64>() / d as f64;
            for i in [0, d / 2, d - 1] {
                let want =
                    args[0].get(&[t, i]).unwrap() as f64 / (ms + 1e-5).sqrt() * args[1].get(&[i]).unwrap() as f64;
                let got = alone[0].get(&[t, i]).unwrap() as f64;
                assert!((got - want).abs() <= 1e-5 * want.abs().max(1.0), "row {t}, {i}: {got} vs {want}");
            }
        }
    }

    #[test]
    fn bad_arguments_are_errors() {
        let x = TensorDesc::of(&[("t", 4), ("d", 8)], DType::F32).unwrap();
        let w = TensorDesc::of(&[("d", 8)], DType::F32).unwrap();
        let err = RmsNorm::new(&x, &w, "e", 1e-5).unwrap_err();
        assert!(matches!(&err, Error::Shape { op, index, .. } if op == "rmsnorm" && index == "e"), "{err}");
        let short = TensorDesc::of(&[("d", 7)], DType::F32).unwrap();
        let err = RmsNorm::new(&x, &short, "d", 1e-5).unwrap_err();
        assert!(matches!(&err, Error::Shape { index, .. } if index == "d"), "{err}");
        let wide = TensorDesc::of(&[("t", 4), ("d", 8)], DType::F32).unwrap();
        assert!(matches!(RmsNorm::new(&x, &wide, "d", 1e-5), Err(Error::Shape { .. })));
        let half = TensorDesc::of(&[("d", 8)], DType::F16).unwrap();
        assert!(matches!(RmsNorm::new(&x, &half, "d", 1e-5), Err(Error::Invalid { .. })));
        assert!(RmsNorm::new(&x, &w, "d", -1.0).is_err());
        assert!(RmsNorm::new(&x, &w, "d", f32::NAN).is_err());
    }

    #[test]
    fn partial_weight_or_rows_are_kernel_errors() {
        let x = TensorDesc::of(&[("t", 2), ("d", 4)], DType::F32).unwrap();
        let w = TensorDesc::of(&[("d", 4)], DType::F32).unwrap();
        let op = RmsNorm::new(&x, &w, "d", 1e-5).unwrap();
        let (xb, wb) = (x.tensor_type(), TensorType::new(&[0], &[2]).unwrap());
        let f = FunctionSpec { inputs: vec![xb.clone(), wb.clone()], outputs: vec![xb.clone()] };
        let ins = [HostTensor::random(xb, DType::F32, 1), HostTensor::random(wb, DType::F32, 2)];
        assert!(matches!(op.compute(&f, &ins), Err(Error::Kernel { .. })));
        let xb = TensorType::new(&[0, 1], &[2, 4]).unwrap();
        let f = FunctionSpec { inputs: vec![xb.clone(), w.tensor_type()], outputs: vec![xb.clone()] };
        let ins = [HostTensor::random(xb, DType::F32, 1), HostTensor::random(w.tensor_type(), DType::F32, 2)];
        assert!(matches!(op.compute(&f, &ins), Err(Error::Kernel { .. })));
    }

    /// A split of the normalised index on the output: each function reads whole rows and the
    /// weight's slice, writes its slice, and the flops charge every row's scale in full.
    #[test]
    fn output_split_of_the_normalised_index() {
        let x = TensorDesc::of(&[("t", 3), ("d", 8), ("b", 2)], DType::F32).unwrap();
        let w = TensorDesc::of(&[("d", 8)], DType::F32).unwrap();
        let op = RmsNorm::new(&x, &w, "d", 1e-5).unwrap();
        let spec = einsum_joinagg::request_spec(&op, &[1, 1, 4]).unwrap();
        let f = &spec.functions[1];
        assert_eq!(f.inputs[0], x.tensor_type());
        assert_eq!(f.inputs[1], TensorType::new(&[2], &[4]).unwrap());
        assert_eq!(f.outputs[0], TensorType::new(&[0, 2, 0], &[3, 4, 2]).unwrap());
        einsum_joinagg::validate_spec(&op, &spec, Some(4)).unwrap();
        assert_eq!(decomposition_error(&op, &spec, 5).unwrap(), 0.0);
        // Six rows: each function computes their six scales from 8 elements, and normalises 2.
        assert_eq!(op.flops(f), 2.0 * 12.0 + 6.0 * (2.0 * 8.0 + 3.0));
        let whole = op.flops(&einsum_joinagg::whole_spec(&op));
        assert_eq!(whole, 4.0 * 48.0 + 3.0 * 6.0);
    }

    #[test]
    fn output_blocks_that_do_not_follow_x_are_kernel_errors() {
        let x = TensorDesc::of(&[("t", 2), ("d", 4)], DType::F32).unwrap();
        let w = TensorDesc::of(&[("d", 4)], DType::F32).unwrap();
        let op = RmsNorm::new(&x, &w, "d", 1e-5).unwrap();
        let ins =
            [HostTensor::random(x.tensor_type(), DType::F32, 1), HostTensor::random(w.tensor_type(), DType::F32, 2)];
        let half = TensorType::new(&[2], &[4]).unwrap();
        let w_half = ins[1].slice(&half).unwrap();
        // Other rows than x's.
        let y = TensorType::new(&[1, 2], &[2, 4]).unwrap();
        let f = FunctionSpec { inputs: vec![x.tensor_type(), half.clone()], outputs: vec![y] };
        let err = op.compute(&f, &[ins[0].clone(), w_half.clone()]).unwrap_err();
        assert!(matches!(&err, Error::Kernel { .. }) && err.to_string().contains("differ"), "{err}");
        // A weight slice other than the output's.
        let y = TensorType::new(&[0, 0], &[2, 2]).unwrap();
        let f = FunctionSpec { inputs: vec![x.tensor_type(), half], outputs: vec![y] };
        let err = op.compute(&f, &[ins[0].clone(), w_half]).unwrap_err();
        assert!(matches!(&err, Error::Kernel { .. }) && err.to_string().contains("weight block"), "{err}");
    }

    #[test]
    fn bf16_storage_stays_within_its_precision() {
        let x = TensorDesc::of(&[("t", 6), ("d", 16)], DType::BF16).unwrap();
        let w = TensorDesc::of(&[("d", 16)], DType::BF16).unwrap();
        let op = RmsNorm::new(&x, &w, "d", 1e-6).unwrap();
        for choice in enumerate_specs(&op, 6).unwrap() {
            assert!(decomposition_error(&op, &choice.spec, 1).unwrap() <= 2.0 * DType::BF16.epsilon());
        }
        let ins =
            [HostTensor::random(x.tensor_type(), DType::BF16, 3), HostTensor::random(w.tensor_type(), DType::BF16, 4)];
        let y = execute_whole(&op, &ins).unwrap();
        assert_eq!(y[0].dtype(), DType::BF16);
        let (x32, w32) = (TensorDesc { dtype: DType::F32, ..x }, TensorDesc { dtype: DType::F32, ..w });
        let op32 = RmsNorm::new(&x32, &w32, "d", 1e-6).unwrap();
        let y32 = execute_whole(&op32, &[ins[0].cast(DType::F32), ins[1].cast(DType::F32)]).unwrap();
        assert!(relative_error(&y[0], &y32[0]) <= DType::BF16.epsilon());
    }
}

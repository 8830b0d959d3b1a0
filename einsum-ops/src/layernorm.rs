//! LayerNorm along one named index: `y = (x − mean) / √(var + eps) · w + b`, with the
//! biased variance `var = mean((x − mean)²)`.
//!
//! The normalised index stays whole in every block and the weight and bias are read whole
//! by every function spec; every other index of `x` is shardable anywhere.

use einsum_core::{HostTensor, Interval, KernelClass, TensorDesc};
use einsum_joinagg::{AbstractOperator, DimIndex, FunctionSpec, JoinAggSpec, Result, ShardableIndex, grid_spec};

use crate::common::{
    check_call, check_eps, check_param, check_rows, check_whole_param, f32s, row_axis, row_dims, row_shardable,
    split_rows,
};

const KIND: &str = "layernorm";

/// LayerNorm of a tensor of any rank along one index, with a rank-1 weight and bias. The
/// output has `x`'s indices and dtype.
#[derive(Clone, Debug)]
pub struct LayerNorm {
    inputs: Vec<TensorDesc>,
    outputs: Vec<TensorDesc>,
    axis: usize,
    eps: f32,
}

impl LayerNorm {
    /// `y = (x − mean) / √(var + eps) · weight + bias` along `index`. The weight and bias
    /// have rank 1, the extent of `x`'s `index` and `x`'s dtype (else an error naming the
    /// index); `eps` is finite and non-negative.
    pub fn new(x: &TensorDesc, weight: &TensorDesc, bias: &TensorDesc, index: &str, eps: f32) -> Result<LayerNorm> {
        let axis = row_axis(KIND, x, index)?;
        check_param(KIND, x, axis, weight, "weight")?;
        check_param(KIND, x, axis, bias, "bias")?;
        check_eps(KIND, eps)?;
        Ok(LayerNorm { inputs: vec![x.clone(), weight.clone(), bias.clone()], outputs: vec![x.clone()], axis, eps })
    }

    /// The name of the normalised index.
    pub fn index(&self) -> &str {
        &self.inputs[0].dims[self.axis].name
    }

    /// The `eps` added to the variance.
    pub fn eps(&self) -> f32 {
        self.eps
    }
}

impl AbstractOperator for LayerNorm {
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
        let dims: DimIndex = vec![x.clone(), vec![None], vec![None], x];
        grid_spec(KIND, &self.inputs, &self.outputs, &self.shardable(), &dims, intervals)
    }

    /// Seven per element (sum, subtract, square, sum, normalise, weight, bias) and four
    /// per row (two means, add eps, reciprocal square root).
    fn flops(&self, f: &FunctionSpec) -> f64 {
        let volume = f.outputs.first().map_or(0.0, |t| t.volume() as f64);
        let n = self.inputs[0].dims[self.axis].extent as f64;
        7.0 * volume + 4.0 * volume / n
    }

    fn compute(&self, f: &FunctionSpec, inputs: &[HostTensor]) -> Result<Vec<HostTensor>> {
        check_call(self, f, inputs)?;
        let n = self.inputs[0].dims[self.axis].extent;
        check_rows(KIND, &f.inputs[0], &f.outputs[0], self.axis, n)?;
        check_whole_param(KIND, f, 1, &self.inputs[1])?;
        check_whole_param(KIND, f, 2, &self.inputs[2])?;
        let (x, w, b) = (f32s(&inputs[0]), f32s(&inputs[1]), f32s(&inputs[2]));
        let (_, n, inner) = split_rows(&f.inputs[0].shape(), self.axis);
        let mut y = vec![0.0; x.len()];
        if !x.is_empty() {
            let (mut mean, mut scale) = (vec![0.0f32; inner], vec![0.0f32; inner]);
            for (xs, ys) in x.chunks_exact(n * inner).zip(y.chunks_exact_mut(n * inner)) {
                mean.fill(0.0);
                for row in xs.chunks_exact(inner) {
                    mean.iter_mut().zip(row).for_each(|(m, &v)| *m += v);
                }
                mean.iter_mut().for_each(|m| *m /= n as f32);
                scale.fill(0.0);
                for row in xs.chunks_exact(inner) {
                    for ((s, &v), &m) in scale.iter_mut().zip(row).zip(&mean) {
                        *s += (v - m) * (v - m);
                    }
                }
                scale.iter_mut().for_each(|s| *s = 1.0 / (*s / n as f32 + self.eps).sqrt());
                let params = w.iter().zip(b.iter());
                for ((row, out), (&wk, &bk)) in xs.chunks_exact(inner).zip(ys.chunks_exact_mut(inner)).zip(params) {
                    for (((o, &v), &m), &s) in out.iter_mut().zip(row).zip(&mean).zip(&scale) {
                        *o = (v - m) * s * wk + bk;
                    }
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

    fn tensor(desc: &TensorDesc, data: Vec<f32>) -> HostTensor {
        HostTensor::from_f32(desc.tensor_type(), desc.dtype, data).unwrap()
    }

    #[test]
    fn rows_have_mean_zero_and_variance_one_before_the_weight() {
        // Normalise along `d`, the first index, so each row is strided.
        let x = TensorDesc::of(&[("d", 16), ("t", 3)], DType::F32).unwrap();
        let p = TensorDesc::of(&[("d", 16)], DType::F32).unwrap();
        let op = LayerNorm::new(&x, &p, &p, "d", 0.0).unwrap();
        assert_eq!((op.kind(), op.index(), op.eps()), ("layernorm", "d", 0.0));
        let tx = HostTensor::random(x.tensor_type(), DType::F32, 5);
        let y = execute_whole(&op, &[tx, tensor(&p, vec![1.0; 16]), tensor(&p, vec![0.0; 16])]).unwrap().remove(0);
        for t in 0..3 {
            let row: Vec<f32> = (0..16).map(|d| y.get(&[d, t]).unwrap()).collect();
            let mean = row.iter().sum::<f32>() / 16.0;
            let var = row.iter().map(|v| (v - mean).powi(2)).sum::<f32>() / 16.0;
            assert!(mean.abs() < 1e-6, "{mean}");
            assert!((var - 1.0).abs() < 1e-5, "{var}");
        }
    }

    #[test]
    fn known_vector_with_weight_and_bias() {
        let x = TensorDesc::of(&[("d", 2)], DType::F32).unwrap();
        let op = LayerNorm::new(&x, &x, &x, "d", 0.0).unwrap();
        // mean 2, biased variance 1: normalised [-1, 1].
        let y =
            execute_whole(&op, &[tensor(&x, vec![1.0, 3.0]), tensor(&x, vec![2.0, 3.0]), tensor(&x, vec![0.5, -1.0])])
                .unwrap();
        assert_eq!(y[0].to_f32(), vec![-1.5, 2.0]);
    }

    #[test]
    fn every_spec_matches_and_params_stay_whole() {
        let x = TensorDesc::of(&[("b", 2), ("t", 6), ("d", 8)], DType::F32).unwrap();
        let p = TensorDesc::of(&[("d", 8)], DType::F32).unwrap();
        let op = LayerNorm::new(&x, &p, &p, "d", 1e-5).unwrap();
        let names: Vec<String> = op.shardable().into_iter().map(|s| s.name).collect();
        assert_eq!(names, vec!["b", "t"]);
        for q in [1, 2, 3, 4, 6, 12] {
            for choice in enumerate_specs(&op, q).unwrap() {
                for f in &choice.spec.functions {
                    assert_eq!((&f.inputs[1], &f.inputs[2]), (&p.tensor_type(), &p.tensor_type()));
                    assert_eq!(f.inputs[0].dim(2), Interval::full(8));
                }
                assert_eq!(decomposition_error(&op, &choice.spec, 9).unwrap(), 0.0);
            }
        }
        assert!(matches!(enumerate_specs(&op, 7), Err(Error::NoSpec { .. })));
    }

    #[test]
    fn bad_arguments_are_errors() {
        let x = TensorDesc::of(&[("t", 4), ("d", 8)], DType::F32).unwrap();
        let p = TensorDesc::of(&[("d", 8)], DType::F32).unwrap();
        let err = LayerNorm::new(&x, &p, &p, "k", 1e-5).unwrap_err();
        assert!(matches!(&err, Error::Shape { op, index, .. } if op == "layernorm" && index == "k"), "{err}");
        let short = TensorDesc::of(&[("d", 4)], DType::F32).unwrap();
        let err = LayerNorm::new(&x, &p, &short, "d", 1e-5).unwrap_err();
        assert!(matches!(&err, Error::Shape { index, .. } if index == "d"), "{err}");
        assert!(err.to_string().contains("bias"), "{err}");
        let bf = TensorDesc::of(&[("d", 8)], DType::BF16).unwrap();
        assert!(matches!(LayerNorm::new(&x, &bf, &p, "d", 1e-5), Err(Error::Invalid { .. })));
        assert!(LayerNorm::new(&x, &p, &p, "d", f32::INFINITY).is_err());
        // Kernel: a bias block that is not whole.
        let op = LayerNorm::new(&x, &p, &p, "d", 1e-5).unwrap();
        let part = TensorType::new(&[0], &[4]).unwrap();
        let f = FunctionSpec {
            inputs: vec![x.tensor_type(), p.tensor_type(), part.clone()],
            outputs: vec![x.tensor_type()],
        };
        let ins = [
            HostTensor::random(x.tensor_type(), DType::F32, 1),
            HostTensor::random(p.tensor_type(), DType::F32, 2),
            HostTensor::random(part, DType::F32, 3),
        ];
        assert!(matches!(op.compute(&f, &ins), Err(Error::Kernel { .. })));
    }

    #[test]
    fn bf16_storage_stays_within_its_precision() {
        let x = TensorDesc::of(&[("t", 6), ("d", 16)], DType::BF16).unwrap();
        let p = TensorDesc::of(&[("d", 16)], DType::BF16).unwrap();
        let op = LayerNorm::new(&x, &p, &p, "d", 1e-5).unwrap();
        for choice in enumerate_specs(&op, 2).unwrap() {
            assert!(decomposition_error(&op, &choice.spec, 1).unwrap() <= 2.0 * DType::BF16.epsilon());
        }
        let ins = [
            HostTensor::random(x.tensor_type(), DType::BF16, 3),
            HostTensor::random(p.tensor_type(), DType::BF16, 4),
            HostTensor::random(p.tensor_type(), DType::BF16, 5),
        ];
        let y = execute_whole(&op, &ins).unwrap();
        assert_eq!(y[0].dtype(), DType::BF16);
        let (x32, p32) = (TensorDesc { dtype: DType::F32, ..x }, TensorDesc { dtype: DType::F32, ..p });
        let op32 = LayerNorm::new(&x32, &p32, &p32, "d", 1e-5).unwrap();
        let ins32: Vec<HostTensor> = ins.iter().map(|t| t.cast(DType::F32)).collect();
        let y32 = execute_whole(&op32, &ins32).unwrap();
        assert!(relative_error(&y[0], &y32[0]) <= DType::BF16.epsilon());
    }
}

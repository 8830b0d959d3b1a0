//! A change of storage dtype: `y = x` held as f32, f16 or bf16, rounded to nearest, ties to
//! even (what `torch.Tensor.to` and NumPy's `astype` do), so a model can keep its weights in
//! bf16 and compute its logits or its norms in f32.
//!
//! Every index is shardable anywhere and no two function specs share an output box, so the
//! aggregation never runs. Each element is rounded once, from its exact value (an f16 or bf16
//! value widens to f32 exactly), so every split gives the whole result bit for bit.

use einsum_core::{DType, HostTensor, Interval, KernelClass, TensorDesc};
use einsum_joinagg::{AbstractOperator, DimIndex, Error, FunctionSpec, JoinAggSpec, Result, ShardableIndex, grid_spec};

use crate::common::{check_call, every_index, kernel_error};

const KIND: &str = "cast";

/// `x` in another floating-point dtype: the output has `x`'s indices and the dtype `to`.
#[derive(Clone, Debug)]
pub struct Cast {
    inputs: Vec<TensorDesc>,
    outputs: Vec<TensorDesc>,
}

impl Cast {
    /// `x` stored as `to`. Casting to `x`'s own dtype is the identity. Fails with
    /// [`Error::Invalid`], naming the dtype, when `x` or `to` is not floating point (i32
    /// indices are not values to round).
    pub fn new(x: &TensorDesc, to: DType) -> Result<Cast> {
        let invalid = |reason: String| Error::Invalid { op: KIND.into(), reason };
        if !x.dtype.is_float() {
            return Err(invalid(format!("x [{}] has dtype {}, not a floating-point one", x.dims_string(), x.dtype)));
        }
        if !to.is_float() {
            return Err(invalid(format!(
                "cannot cast x [{}] to {to}: only f32, f16 and bf16 are targets",
                x.dims_string()
            )));
        }
        let y = TensorDesc::new(x.dims.clone(), to)?;
        Ok(Cast { inputs: vec![x.clone()], outputs: vec![y] })
    }

    /// The dtype the output is stored in.
    pub fn to(&self) -> DType {
        self.outputs[0].dtype
    }
}

impl AbstractOperator for Cast {
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

    fn shardable(&self) -> Vec<ShardableIndex> {
        every_index(&self.inputs[0])
    }

    fn join_agg_spec(&self, intervals: &[Vec<Interval>]) -> Result<JoinAggSpec> {
        let all: Vec<Option<usize>> = (0..self.inputs[0].rank()).map(Some).collect();
        let dims: DimIndex = vec![all.clone(), all];
        grid_spec(KIND, &self.inputs, &self.outputs, &self.shardable(), &dims, intervals)
    }

    /// None: a conversion moves (and rounds) bytes.
    fn flops(&self, _: &FunctionSpec) -> f64 {
        0.0
    }

    fn compute(&self, f: &FunctionSpec, inputs: &[HostTensor]) -> Result<Vec<HostTensor>> {
        check_call(self, f, inputs)?;
        if f.inputs[0] != f.outputs[0] {
            return Err(kernel_error(
                KIND,
                format!("input block {} and output block {} differ", f.inputs[0], f.outputs[0]),
            ));
        }
        Ok(vec![inputs[0].cast(self.to())])
    }
}

#[cfg(test)]
mod tests {
    use einsum_core::TensorType;
    use einsum_joinagg::{decomposition_error, enumerate_specs, execute_whole};
    use half::{bf16, f16};

    use super::*;

    const FLOATS: [DType; 3] = [DType::F32, DType::F16, DType::BF16];

    fn cast(values: &[f32], from: DType, to: DType) -> HostTensor {
        let x = TensorDesc::of(&[("i", values.len())], from).unwrap();
        let t = HostTensor::from_f32(x.tensor_type(), from, values.to_vec()).unwrap();
        let y = execute_whole(&Cast::new(&x, to).unwrap(), &[t]).unwrap().remove(0);
        assert_eq!(y.dtype(), to);
        y
    }

    /// Rounds to nearest, ties to even, against values worked out by hand: in bf16 (8
    /// significant bits) 1 + 2⁻⁸ is halfway between 1 and 1 + 2⁻⁷ and goes to the even 1,
    /// 1 + 3·2⁻⁸ to the even 1 + 2⁻⁶; in f16 (11 bits) 1 + 2⁻¹¹ goes to 1, and 65520 (halfway
    /// to the next binade) overflows to +∞.
    #[test]
    fn rounds_to_nearest_even() {
        let (a, b) = (1.0 + 2f32.powi(-8), 1.0 + 3.0 * 2f32.powi(-8));
        assert_eq!(cast(&[a, b, -a], DType::F32, DType::BF16).to_f32(), [1.0, 1.0 + 2f32.powi(-6), -1.0]);
        let c = 1.0 + 2f32.powi(-11);
        assert_eq!(cast(&[c, 65504.0, 65520.0], DType::F32, DType::F16).to_f32(), [1.0, 65504.0, f32::INFINITY]);
        // bf16 → f16: 1 + 2⁻⁷ is exact in both, 2⁻²⁰ is an exact f16 subnormal, and 2⁻²⁶ lies
        // below 2⁻²⁵, half f16's smallest subnormal 2⁻²⁴: it rounds to 0.
        let y = cast(&[1.0 + 2f32.powi(-7), 2f32.powi(-20), 2f32.powi(-26)], DType::BF16, DType::F16);
        assert_eq!(y.to_f32(), [1.0 + 2f32.powi(-7), 2f32.powi(-20), 0.0]);
        // Against `half`'s own round-to-nearest-even conversions, over a spread of values.
        let values: Vec<f32> = (0..2000).map(|k| (k as f32 - 1000.0) * 0.013_7 + (k as f32).sin()).collect();
        let want16: Vec<f32> = values.iter().map(|&v| f16::from_f32(v).to_f32()).collect();
        let want_b: Vec<f32> = values.iter().map(|&v| bf16::from_f32(v).to_f32()).collect();
        assert_eq!(cast(&values, DType::F32, DType::F16).to_f32(), want16);
        assert_eq!(cast(&values, DType::F32, DType::BF16).to_f32(), want_b);
        // Widening is exact.
        assert_eq!(cast(&want_b, DType::BF16, DType::F32).to_f32(), want_b);
    }

    /// NaN stays NaN and the infinities stay, in every direction, as NumPy's `astype`.
    #[test]
    fn nan_and_infinities_survive_every_direction() {
        let values = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, -0.0];
        for from in FLOATS {
            for to in FLOATS {
                let y = cast(&values, from, to).to_f32();
                assert!(y[0].is_nan(), "{from} → {to}");
                assert_eq!(y[1..3], [f32::INFINITY, f32::NEG_INFINITY], "{from} → {to}");
                assert_eq!(y[3].to_bits(), (-0.0f32).to_bits(), "{from} → {to}");
            }
        }
    }

    /// Every spec on 1 to 4 devices gives the whole cast bit for bit, in every direction.
    #[test]
    fn every_spec_equals_the_whole_cast() {
        for from in FLOATS {
            for to in FLOATS {
                let x = TensorDesc::of(&[("t", 5), ("d", 6)], from).unwrap();
                let op = Cast::new(&x, to).unwrap();
                assert_eq!(op.outputs()[0].dims, x.dims);
                for p in 1..=4 {
                    for (seed, choice) in enumerate_specs(&op, p).unwrap().iter().enumerate() {
                        let err = decomposition_error(&op, &choice.spec, seed as u64).unwrap();
                        assert_eq!(err, 0.0, "{from} → {to} counts {:?}", choice.counts);
                    }
                }
            }
        }
    }

    #[test]
    fn integer_dtypes_are_refused_naming_them() {
        let ids = TensorDesc::of(&[("tokens", 4)], DType::I32).unwrap();
        let e = Cast::new(&ids, DType::F32).unwrap_err();
        assert!(matches!(e, Error::Invalid { .. }) && e.to_string().contains("i32"), "{e}");
        let x = TensorDesc::of(&[("tokens", 4)], DType::BF16).unwrap();
        let e = Cast::new(&x, DType::I32).unwrap_err().to_string();
        assert!(e.contains("i32") && e.contains("tokens"), "{e}");
        assert_eq!(Cast::new(&x, DType::F32).unwrap().to(), DType::F32);
    }

    #[test]
    fn mismatched_blocks_are_kernel_errors() {
        let x = TensorDesc::of(&[("i", 4)], DType::F32).unwrap();
        let op = Cast::new(&x, DType::F16).unwrap();
        let (lo, hi) = (TensorType::new(&[0], &[2]).unwrap(), TensorType::new(&[2], &[4]).unwrap());
        let t = HostTensor::random(lo.clone(), DType::F32, 1);
        let f = FunctionSpec { inputs: vec![lo], outputs: vec![hi] };
        assert!(matches!(op.compute(&f, &[t]), Err(Error::Kernel { .. })));
    }
}

//! Elementwise unary operators: `y[i..] = op(x[i..])`.
//!
//! Every index is shardable anywhere and no two function specs share an output box, so
//! the aggregation never runs. This file also holds the call checks that every pointwise
//! kernel of the crate shares (`check_call`).

use einsum_core::{HostTensor, Interval, KernelClass, TensorDesc};
use einsum_joinagg::{AbstractOperator, DimIndex, Error, FunctionSpec, JoinAggSpec, Result, ShardableIndex, grid_spec};

use crate::{
    common::{check_call, every_index, kernel_error},
    parallel, vexp,
};

const KIND: &str = "unary";

/// The error of parsing an unknown unary operation name: it lists the valid names.
fn unknown_unary_op(name: &str) -> Error {
    use strum::VariantNames;
    Error::Invalid {
        op: KIND.into(),
        reason: format!("unknown unary operation `{name}` (expected one of {})", UnaryOp::VARIANTS.join(", ")),
    }
}

/// An elementwise function of one scalar.
///
/// Its names are the lowercase variants, derived: [`name`](Self::name), `VARIANTS`
/// ([`strum::VariantNames`], the names [`parse`](Self::parse) accepts, in declaration
/// order) and `FromStr` (which gives `scale` the factor 0; [`parse`](Self::parse) takes
/// the factor and checks it).
#[derive(Clone, Copy, Debug, PartialEq, strum::IntoStaticStr, strum::EnumString, strum::VariantNames)]
#[strum(serialize_all = "lowercase", parse_err_ty = Error, parse_err_fn = unknown_unary_op)]
pub enum UnaryOp {
    /// `max(x, 0)`, as NumPy's `maximum(x, 0)`: NaN stays NaN, `-0` stays `-0`.
    Relu,
    /// GELU in its tanh approximation: `0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))`,
    /// evaluated as written, so `gelu(+∞) = +∞` and `gelu(−∞) = −∞·0 = NaN`.
    Gelu,
    /// SiLU (swish): `x·σ(x) = x / (1 + e⁻ˣ)`, evaluated as written: `silu(+∞) = +∞`,
    /// `silu(−∞) = −∞/∞ = NaN`.
    Silu,
    /// The logistic function `σ(x) = 1 / (1 + e⁻ˣ)`, evaluated stably: `eˣ / (1 + eˣ)` for
    /// `x < 0`, so neither side overflows; `σ(+∞) = 1`, `σ(−∞) = 0`.
    Sigmoid,
    /// The hyperbolic tangent (`f32::tanh`): `tanh(±∞) = ±1`.
    Tanh,
    /// `eˣ`.
    Exp,
    /// `−x`.
    Neg,
    /// `s·x` for the given finite scalar `s`.
    Scale(f32),
}

impl UnaryOp {
    /// The operation named `name` (`relu`, `gelu`, `silu`, `sigmoid`, `tanh`, `exp`, `neg`
    /// or `scale`);
    /// `scalar` is the factor of `scale` and is ignored otherwise. An unknown name, or a
    /// non-finite scale factor, is an [`Error::Invalid`] that lists the valid names.
    pub fn parse(name: &str, scalar: f32) -> Result<UnaryOp> {
        let op = match name.parse()? {
            UnaryOp::Scale(_) => UnaryOp::Scale(scalar),
            op => op,
        };
        op.check()?;
        Ok(op)
    }

    /// The lowercase name, as [`parse`](Self::parse) accepts it.
    pub fn name(self) -> &'static str {
        self.into()
    }

    /// Applies the operation to one scalar. `Exp`, `Silu` and `Sigmoid` use the kernels' vectorized
    /// `exp` (within 2 ulps of the exact value), so this equals what the kernel computes.
    /// Every operation maps NaN to NaN; at the infinities each gives what NumPy's
    /// evaluation of its formula gives (see the variants).
    pub fn apply(self, x: f32) -> f32 {
        match self {
            UnaryOp::Relu => vexp::maximum(x, 0.0),
            UnaryOp::Gelu => {
                // √(2/π)
                const C: f32 = 0.797_884_6;
                0.5 * x * (1.0 + (C * (x + 0.044_715 * x * x * x)).tanh())
            }
            UnaryOp::Silu => x / (1.0 + vexp::exp(-x)),
            UnaryOp::Sigmoid => {
                // e^-|x| ≤ 1 never overflows; NaN stays NaN through it.
                let e = vexp::exp(-x.abs());
                if x < 0.0 { e / (1.0 + e) } else { 1.0 / (1.0 + e) }
            }
            UnaryOp::Tanh => x.tanh(),
            UnaryOp::Exp => vexp::exp(x),
            UnaryOp::Neg => -x,
            UnaryOp::Scale(s) => s * x,
        }
    }

    /// Floating-point operations per element, counting a transcendental (exp, tanh) as one.
    pub fn flops_per_element(self) -> f64 {
        match self {
            UnaryOp::Relu | UnaryOp::Exp | UnaryOp::Neg | UnaryOp::Scale(_) | UnaryOp::Tanh => 1.0,
            // |x|, negate, exp, add, divide
            UnaryOp::Sigmoid => 5.0,
            // negate, exp, add, divide
            UnaryOp::Silu => 4.0,
            // x³ (2), ·0.044715, +x, ·√(2/π), tanh, +1, ·x, ·0.5
            UnaryOp::Gelu => 9.0,
        }
    }

    fn check(self) -> Result<()> {
        match self {
            UnaryOp::Scale(s) if !s.is_finite() => {
                Err(Error::Invalid { op: KIND.into(), reason: format!("scale factor must be finite, got {s}") })
            }
            _ => Ok(()),
        }
    }
}

/// An elementwise unary operator over a tensor of any rank. The output has `x`'s
/// indices and dtype; every index is shardable `any` under its own name.
#[derive(Clone, Debug)]
pub struct Unary {
    op: UnaryOp,
    inputs: Vec<TensorDesc>,
    outputs: Vec<TensorDesc>,
}

impl Unary {
    /// `y = op(x)` elementwise. Fails on a non-finite scale factor.
    pub fn new(x: &TensorDesc, op: UnaryOp) -> Result<Unary> {
        op.check()?;
        Ok(Unary { op, inputs: vec![x.clone()], outputs: vec![x.clone()] })
    }

    /// The elementwise operation.
    pub fn op(&self) -> UnaryOp {
        self.op
    }

    fn dim_index(&self) -> DimIndex {
        let all: Vec<Option<usize>> = (0..self.inputs[0].rank()).map(Some).collect();
        vec![all.clone(), all]
    }
}

impl AbstractOperator for Unary {
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
        every_index(&self.inputs[0])
    }

    fn join_agg_spec(&self, intervals: &[Vec<Interval>]) -> Result<JoinAggSpec> {
        grid_spec(KIND, &self.inputs, &self.outputs, &self.shardable(), &self.dim_index(), intervals)
    }

    fn flops(&self, f: &FunctionSpec) -> f64 {
        f.outputs.first().map_or(0.0, |t| t.volume() as f64) * self.op.flops_per_element()
    }

    fn compute(&self, f: &FunctionSpec, inputs: &[HostTensor]) -> Result<Vec<HostTensor>> {
        check_call(self, f, inputs)?;
        if f.inputs[0] != f.outputs[0] {
            return Err(kernel_error(
                KIND,
                format!("input block {} and output block {} differ", f.inputs[0], f.outputs[0]),
            ));
        }
        let mut data = inputs[0].to_f32();
        // Spread over the kernel's helper threads; SiLU through the same operations as
        // `apply`, compiled for the CPU's vector width.
        let op = self.op;
        parallel::for_chunks_mut(&mut data, 1 << 15, |_, chunk| match op {
            UnaryOp::Silu => vexp::silu_in_place(chunk),
            op => chunk.iter_mut().for_each(|x| *x = op.apply(*x)),
        });
        Ok(vec![HostTensor::from_f32(f.outputs[0].clone(), self.outputs[0].dtype, data)?])
    }
}

#[cfg(test)]
mod tests {
    use einsum_core::{DType, TensorType};
    use einsum_joinagg::{decomposition_error, enumerate_specs, execute_whole};

    use super::*;

    fn close(a: f32, b: f32) -> bool {
        (a - b).abs() <= 1e-6 * (1.0 + b.abs())
    }

    #[test]
    fn known_values() {
        assert_eq!(UnaryOp::Relu.apply(-2.0), 0.0);
        assert_eq!(UnaryOp::Relu.apply(3.5), 3.5);
        assert_eq!(UnaryOp::Gelu.apply(0.0), 0.0);
        // Reference values of the tanh approximation.
        assert!(close(UnaryOp::Gelu.apply(1.0), 0.841_192));
        assert!(close(UnaryOp::Gelu.apply(-1.0), -0.158_808));
        assert!(close(UnaryOp::Gelu.apply(2.0), 1.954_598));
        assert_eq!(UnaryOp::Silu.apply(0.0), 0.0);
        assert!(close(UnaryOp::Silu.apply(1.0), 0.731_058_6));
        assert!(close(UnaryOp::Silu.apply(-2.0), -0.238_405_84));
        assert_eq!(UnaryOp::Exp.apply(0.0), 1.0);
        assert!(close(UnaryOp::Exp.apply(1.0), std::f32::consts::E));
        assert_eq!(UnaryOp::Neg.apply(2.5), -2.5);
        assert_eq!(UnaryOp::Scale(0.5).apply(3.0), 1.5);
    }

    #[test]
    fn parse_accepts_the_names_and_lists_them_otherwise() {
        for name in <UnaryOp as strum::VariantNames>::VARIANTS {
            assert_eq!(UnaryOp::parse(name, 2.0).unwrap().name(), *name);
        }
        assert_eq!(UnaryOp::parse("scale", 0.25).unwrap(), UnaryOp::Scale(0.25));
        let err = UnaryOp::parse("softplus", 0.0).unwrap_err();
        assert!(matches!(err, Error::Invalid { .. }));
        let msg = err.to_string();
        assert!(msg.contains("softplus") && msg.contains("relu") && msg.contains("sigmoid"), "{msg}");
        assert!(msg.contains("tanh") && msg.contains("scale"), "{msg}");
        assert!(UnaryOp::parse("scale", f32::NAN).is_err());
        let x = TensorDesc::of(&[("i", 2)], DType::F32).unwrap();
        assert!(Unary::new(&x, UnaryOp::Scale(f32::INFINITY)).is_err());
    }

    #[test]
    fn whole_kernel_applies_the_op() {
        let x = TensorDesc::of(&[("i", 2), ("j", 2)], DType::F32).unwrap();
        let op = Unary::new(&x, UnaryOp::Relu).unwrap();
        assert_eq!(op.kind(), "unary");
        assert_eq!(op.op(), UnaryOp::Relu);
        let t = HostTensor::from_f32(x.tensor_type(), DType::F32, vec![-1.0, 2.0, 0.5, -3.0]).unwrap();
        let y = execute_whole(&op, &[t]).unwrap();
        assert_eq!(y[0].to_f32(), vec![0.0, 2.0, 0.5, 0.0]);
    }

    #[test]
    fn every_spec_matches_the_whole_kernel() {
        let x = TensorDesc::of(&[("t", 6), ("d", 5)], DType::F32).unwrap();
        for kind in [UnaryOp::Gelu, UnaryOp::Silu, UnaryOp::Sigmoid, UnaryOp::Tanh, UnaryOp::Scale(-1.5)] {
            let op = Unary::new(&x, kind).unwrap();
            for p in [1, 2, 3, 4, 6] {
                for choice in enumerate_specs(&op, p).unwrap() {
                    assert_eq!(choice.spec.len(), p);
                    assert!(decomposition_error(&op, &choice.spec, 3).unwrap() <= 1e-6);
                }
            }
        }
        let op = Unary::new(&x, UnaryOp::Exp).unwrap();
        assert!(matches!(enumerate_specs(&op, 7), Err(Error::NoSpec { p: 7, .. })));
    }

    #[test]
    fn spec_order_and_flops() {
        let x = TensorDesc::of(&[("a", 4), ("b", 6)], DType::F32).unwrap();
        let op = Unary::new(&x, UnaryOp::Gelu).unwrap();
        let ivs = vec![Interval::split_even(4, 2).unwrap(), Interval::split_even(6, 3).unwrap()];
        let spec = op.join_agg_spec(&ivs).unwrap();
        assert_eq!(spec.len(), 6);
        // First shardable index varies slowest.
        assert_eq!(spec.functions[1].outputs[0], TensorType::new(&[0, 2], &[2, 4]).unwrap());
        assert_eq!(spec.functions[3].outputs[0], TensorType::new(&[2, 0], &[4, 2]).unwrap());
        assert_eq!(op.flops(&spec.functions[0]), 4.0 * 9.0);
        assert!(op.join_agg_spec(&ivs[..1]).is_err());
    }

    #[test]
    fn inconsistent_blocks_are_kernel_errors() {
        let x = TensorDesc::of(&[("i", 4)], DType::F32).unwrap();
        let op = Unary::new(&x, UnaryOp::Neg).unwrap();
        let lo = TensorType::new(&[0], &[2]).unwrap();
        let hi = TensorType::new(&[2], &[4]).unwrap();
        let t = HostTensor::random(lo.clone(), DType::F32, 1);
        let f = FunctionSpec { inputs: vec![lo.clone()], outputs: vec![hi.clone()] };
        assert!(matches!(op.compute(&f, std::slice::from_ref(&t)), Err(Error::Kernel { .. })));
        let f = FunctionSpec { inputs: vec![hi.clone()], outputs: vec![hi] };
        assert!(matches!(op.compute(&f, std::slice::from_ref(&t)), Err(Error::Kernel { .. })));
        let out_of_range = TensorType::new(&[2], &[6]).unwrap();
        let f = FunctionSpec { inputs: vec![out_of_range.clone()], outputs: vec![out_of_range.clone()] };
        let t = HostTensor::random(out_of_range, DType::F32, 1);
        assert!(matches!(op.compute(&f, &[t]), Err(Error::Kernel { .. })));
        let f = FunctionSpec { inputs: vec![lo.clone()], outputs: vec![lo] };
        assert!(matches!(op.compute(&f, &[]), Err(Error::Kernel { .. })));
    }

    #[test]
    fn bf16_storage_stays_within_its_precision() {
        let x = TensorDesc::of(&[("t", 8), ("d", 12)], DType::BF16).unwrap();
        let x32 = TensorDesc::of(&[("t", 8), ("d", 12)], DType::F32).unwrap();
        let op = Unary::new(&x, UnaryOp::Silu).unwrap();
        let op32 = Unary::new(&x32, UnaryOp::Silu).unwrap();
        for choice in enumerate_specs(&op, 4).unwrap() {
            assert!(decomposition_error(&op, &choice.spec, 5).unwrap() <= 2.0 * DType::BF16.epsilon());
        }
        let t = HostTensor::random(x.tensor_type(), DType::BF16, 9);
        let y = execute_whole(&op, std::slice::from_ref(&t)).unwrap();
        assert_eq!(y[0].dtype(), DType::BF16);
        let y32 = execute_whole(&op32, &[t.cast(DType::F32)]).unwrap();
        assert!(einsum_core::relative_error(&y[0], &y32[0]) <= DType::BF16.epsilon());
    }

    /// σ and tanh of the whole kernel against f64 formulas, over a range that overflows a
    /// naive `1 / (1 + e⁻ˣ)` at the negative end, in f32 and (within its precision) bf16.
    #[test]
    fn sigmoid_and_tanh_match_their_f64_formulas() {
        let values: Vec<f32> = (-400..=400).map(|k| k as f32 * 0.25).collect();
        let sigmoid = |x: f64| 1.0 / (1.0 + (-x).exp());
        for dtype in [DType::F32, DType::BF16] {
            let x = TensorDesc::of(&[("i", values.len())], dtype).unwrap();
            let t = HostTensor::from_f32(x.tensor_type(), dtype, values.clone()).unwrap();
            let stored = t.to_f32();
            let tol = if dtype == DType::F32 { 1e-6 } else { DType::BF16.epsilon() };
            let cases: [(UnaryOp, &dyn Fn(f64) -> f64); 2] =
                [(UnaryOp::Sigmoid, &sigmoid), (UnaryOp::Tanh, &f64::tanh)];
            for (op, formula) in cases {
                let y = execute_whole(&Unary::new(&x, op).unwrap(), std::slice::from_ref(&t)).unwrap();
                for (v, got) in stored.iter().zip(y[0].to_f32()) {
                    let want = formula(*v as f64);
                    let err = (got as f64 - want).abs();
                    // Relative near zero too: σ(−100) is 3.7e−44, not 0.
                    assert!(
                        err <= tol as f64 * want.abs().max(1e-30) || err <= 1e-38,
                        "{}({v}) = {got}, want {want}",
                        op.name()
                    );
                }
            }
        }
        assert_eq!(UnaryOp::Sigmoid.apply(0.0), 0.5);
        assert_eq!(UnaryOp::Sigmoid.apply(-0.0), 0.5);
        assert_eq!(UnaryOp::Tanh.apply(-0.0).to_bits(), (-0.0f32).to_bits());
    }

    /// As NumPy: NaN stays NaN, `1 / (1 + exp(-x))` is 1 at +∞ and 0 at −∞, `tanh(±∞) = ±1`;
    /// no overflow at ±1000.
    #[test]
    fn sigmoid_and_tanh_at_nan_and_the_infinities() {
        let (nan, inf) = (f32::NAN, f32::INFINITY);
        let x = TensorDesc::of(&[("i", 5)], DType::F32).unwrap();
        let t = HostTensor::from_f32(x.tensor_type(), DType::F32, vec![nan, -inf, inf, -1000.0, 1000.0]).unwrap();
        for (op, want) in [(UnaryOp::Sigmoid, [0.0, 1.0, 0.0, 1.0]), (UnaryOp::Tanh, [-1.0, 1.0, -1.0, 1.0])] {
            let y = execute_whole(&Unary::new(&x, op).unwrap(), std::slice::from_ref(&t)).unwrap()[0].to_f32();
            assert!(y[0].is_nan(), "{}(NaN) = {}", op.name(), y[0]);
            assert_eq!(y[1..], want, "{}", op.name());
            assert!(op.apply(nan).is_nan());
        }
    }
}

//! `check` and `run --check` against NaN and the infinities: an output element that is NaN
//! or infinite where the single-device reference is finite (or the other way) fails at any
//! tolerance, naming the output, the first element and how many there are, while a NaN the
//! reference holds too agrees (the kernels propagate NaN as NumPy does).

use std::collections::HashMap;

use einsum_core::{HostTensor, Interval, KernelClass, TensorDesc, TensorType};
use einsum_joinagg::{AbstractOperator, Computation, FunctionSpec, JoinAggSpec, OpId, ShardableIndex, TensorId};
use einsum_ops::unary::{Unary, UnaryOp};
use einsummable::DType;
use einsummable::check::{Comparison, check_computation, tensor_error};

fn vector(values: &[f32]) -> HostTensor {
    HostTensor::from_f32(TensorType::zero_bounded(&[values.len()]), DType::F32, values.to_vec()).unwrap()
}

#[test]
fn nan_where_the_reference_is_finite_fails_naming_the_first_and_the_count() {
    let (nan, inf) = (f32::NAN, f32::INFINITY);
    // The same NaNs and infinities as the reference: compared on the finite elements.
    let want = vector(&[nan, 2.0, inf, -inf, 4.0]);
    assert_eq!(tensor_error(&vector(&[nan, 2.0, inf, -inf, 3.0]), &want), Ok(0.25));
    // NaN against a finite value is no error of some size, however small the tolerance is
    // not: the message names the first and the count.
    let err = tensor_error(&vector(&[1.0, nan, 3.0, nan, -inf]), &vector(&[1.0, 2.0, 3.0, 4.0, 5.0])).unwrap_err();
    assert_eq!(
        err,
        "element 1 (row-major) is NaN, the reference holds 2 (the first of 3 elements not finite on one side \
         only, or of other infinities)"
    );
    // The other way, NaN against an infinity, and infinities of opposite signs.
    assert!(tensor_error(&vector(&[1.0]), &vector(&[nan])).unwrap_err().starts_with("element 0 (row-major) is 1"));
    assert!(tensor_error(&vector(&[nan]), &vector(&[inf])).is_err());
    assert!(tensor_error(&vector(&[-inf]), &vector(&[inf])).is_err());

    let t = TensorId { op: OpId(2), output: 0 };
    let got = HashMap::from([(t, vector(&[nan, 1.0]))]);
    let c = Comparison::new(&got, &HashMap::from([(t, vector(&[0.5, 1.0]))]), |_| "logits".to_string());
    assert!(!c.passes(f32::INFINITY), "{c:?}");
    assert_eq!(c.mismatch.as_deref(), Some("output `logits` element 0 (row-major) is NaN, the reference holds 0.5"));
    let c = Comparison::new(&got, &HashMap::from([(t, vector(&[nan, 1.0]))]), |_| "logits".to_string());
    assert!(c.passes(0.0), "{c:?}");
}

/// `neg`, except that a block smaller than the whole tensor writes NaN into its first
/// element: a decomposition that is wrong only by a NaN.
#[derive(Debug)]
struct NanWhenSplit(Unary);

impl AbstractOperator for NanWhenSplit {
    fn kind(&self) -> &str {
        "nan-when-split"
    }
    fn kernel_class(&self) -> KernelClass {
        KernelClass::Elementwise
    }
    fn inputs(&self) -> &[TensorDesc] {
        self.0.inputs()
    }
    fn outputs(&self) -> &[TensorDesc] {
        self.0.outputs()
    }
    fn shardable(&self) -> Vec<ShardableIndex> {
        self.0.shardable()
    }
    fn join_agg_spec(&self, intervals: &[Vec<Interval>]) -> einsum_joinagg::Result<JoinAggSpec> {
        self.0.join_agg_spec(intervals)
    }
    fn flops(&self, f: &FunctionSpec) -> f64 {
        self.0.flops(f)
    }
    fn compute(&self, f: &FunctionSpec, inputs: &[HostTensor]) -> einsum_joinagg::Result<Vec<HostTensor>> {
        let mut out = self.0.compute(f, inputs)?;
        if f.outputs[0] != self.0.outputs()[0].tensor_type() {
            let mut v = out[0].to_f32();
            v[0] = f32::NAN;
            out[0] = HostTensor::from_f32(f.outputs[0].clone(), DType::F32, v).unwrap();
        }
        Ok(out)
    }
}

#[test]
fn check_fails_an_operator_whose_split_run_has_a_nan_the_reference_lacks() {
    let x = TensorDesc::of(&[("t", 4), ("d", 6)], DType::F32).unwrap();
    let mut comp = Computation::new();
    let input = comp.add_input("x", x.clone());
    let op = NanWhenSplit(Unary::new(&x, UnaryOp::Neg).unwrap());
    let y = comp.add_op("poisoned", Box::new(op), &[input]).unwrap()[0];
    comp.save(y).unwrap();
    let report = check_computation(&comp, 2, 4, 7).unwrap();
    assert!(!report.passed());
    let o = &report.ops[0];
    assert_eq!(o.max_error, f32::INFINITY);
    let why = o.mismatch.as_deref().expect("a mismatch");
    assert!(why.contains("the output element 0 (row-major) is NaN, the reference holds"), "{why}");
    assert!(why.starts_with("the spec of device counts ["), "{why}");
    // One device: no split, nothing to fail.
    let report = check_computation(&comp, 1, 4, 7).unwrap();
    assert!(report.passed() && report.ops[0].mismatch.is_none(), "{:?}", report.ops);
}

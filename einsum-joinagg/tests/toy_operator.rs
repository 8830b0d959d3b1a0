//! The spec machinery on a toy operator: `y[i] = Σ_j x[i, j]` with both indices shardable.

use einsum_core::{DType, HostTensor, Interval, KernelClass, TensorDesc, TensorType, Tiling};
use einsum_joinagg::{
    AbstractOperator, Computation, Error, FunctionSpec, IndexRole, JoinAggSpec, Result, ShardableIndex,
    enumerate_specs, execute_spec, execute_whole, grid_spec, validate_spec,
};

#[derive(Debug)]
struct RowSum {
    inputs: Vec<TensorDesc>,
    outputs: Vec<TensorDesc>,
    /// The roles it declares (none unless a test sets them).
    roles: Vec<(String, IndexRole)>,
}

impl RowSum {
    fn new(n: usize, m: usize) -> Self {
        Self {
            inputs: vec![TensorDesc::of(&[("i", n), ("j", m)], DType::F32).unwrap()],
            outputs: vec![TensorDesc::of(&[("i", n)], DType::F32).unwrap()],
            roles: Vec::new(),
        }
    }
}

impl AbstractOperator for RowSum {
    fn kind(&self) -> &str {
        "rowsum"
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
        vec![
            ShardableIndex::any("i", self.inputs[0].dims[0].extent),
            ShardableIndex::any("j", self.inputs[0].dims[1].extent),
        ]
    }
    fn join_agg_spec(&self, intervals: &[Vec<Interval>]) -> Result<JoinAggSpec> {
        let dims = vec![vec![Some(0), Some(1)], vec![Some(0)]];
        grid_spec("rowsum", &self.inputs, &self.outputs, &self.shardable(), &dims, intervals)
    }
    fn flops(&self, f: &FunctionSpec) -> f64 {
        f.inputs[0].volume() as f64
    }
    fn index_roles(&self) -> Vec<(String, IndexRole)> {
        self.roles.clone()
    }
    fn compute(&self, f: &FunctionSpec, inputs: &[HostTensor]) -> Result<Vec<HostTensor>> {
        let x = inputs[0].to_f32();
        let cols = f.inputs[0].dim(1).len();
        let y = x.chunks(cols).map(|row| row.iter().sum()).collect();
        Ok(vec![HostTensor::from_f32(f.outputs[0].clone(), DType::F32, y)?])
    }
}

fn tt(lo: &[usize], hi: &[usize]) -> TensorType {
    TensorType::new(lo, hi).unwrap()
}

#[test]
fn enumeration_covers_every_factorisation() {
    let op = RowSum::new(6, 4);
    let specs = enumerate_specs(&op, 4).unwrap();
    let counts: Vec<Vec<usize>> = specs.iter().map(|s| s.counts.clone()).collect();
    assert_eq!(counts, vec![vec![1, 4], vec![2, 2], vec![4, 1]]);
    let x = HostTensor::random(op.inputs[0].tensor_type(), DType::F32, 5);
    let whole = execute_whole(&op, std::slice::from_ref(&x)).unwrap();
    for s in &specs {
        let split = execute_spec(&op, &s.spec, std::slice::from_ref(&x)).unwrap();
        assert!(einsum_core::relative_error(&split[0], &whole[0]) < 1e-6);
    }
    // The (1, 4) spec aggregates four partial sums into one block.
    assert_eq!(specs[0].spec.output_multiplicities(0), vec![(tt(&[0], &[6]), 4)]);
}

#[test]
fn impossible_device_counts_are_errors() {
    let op = RowSum::new(2, 3);
    let err = enumerate_specs(&op, 5).unwrap_err();
    assert!(matches!(err, Error::NoSpec { p: 5, .. }), "{err}");
    assert!(err.to_string().contains("i (at most 2 parts)"), "{err}");
    assert!(matches!(enumerate_specs(&op, 0), Err(Error::NoSpec { p: 0, .. })));
}

#[test]
fn validation_names_the_broken_condition() {
    let op = RowSum::new(4, 2);
    let f =
        |lo: usize, hi: usize| FunctionSpec { inputs: vec![tt(&[lo, 0], &[hi, 2])], outputs: vec![tt(&[lo], &[hi])] };
    let good = JoinAggSpec { functions: vec![f(0, 2), f(2, 4)] };
    assert!(validate_spec(&op, &good, Some(2)).is_ok());
    let msg = validate_spec(&op, &good, Some(3)).unwrap_err().to_string();
    assert!(msg.contains("exactly p = 3"), "{msg}");
    let overlapping = JoinAggSpec { functions: vec![f(0, 3), f(2, 4)] };
    let msg = validate_spec(&op, &overlapping, None).unwrap_err().to_string();
    assert!(msg.contains("overlap"), "{msg}");
    let gap = JoinAggSpec { functions: vec![f(0, 1), f(2, 4)] };
    assert!(validate_spec(&op, &gap, None).unwrap_err().to_string().contains("cover 3 of its 4"));
    let outside = JoinAggSpec { functions: vec![f(0, 2), f(2, 5)] };
    assert!(validate_spec(&op, &outside, None).unwrap_err().to_string().contains("function spec 1: input 0"));
}

#[test]
fn bad_requests_are_rejected_before_building() {
    let op = RowSum::new(4, 2);
    let halves = vec![Interval::new(0, 2).unwrap(), Interval::new(2, 4).unwrap()];
    assert!(matches!(op.join_agg_spec(std::slice::from_ref(&halves)), Err(Error::Invalid { .. })));
    let gap = vec![Interval::new(0, 1).unwrap(), Interval::new(2, 4).unwrap()];
    let msg = op.join_agg_spec(&[gap, vec![Interval::full(2)]]).unwrap_err().to_string();
    assert!(msg.contains("shardable index `i`"), "{msg}");
    assert_eq!(op.join_agg_spec(&[halves, vec![Interval::full(2)]]).unwrap().len(), 2);
}

#[test]
fn executing_with_wrong_inputs_is_an_error() {
    let op = RowSum::new(4, 2);
    let wrong = HostTensor::random(TensorType::zero_bounded(&[4, 3]), DType::F32, 1);
    assert!(matches!(execute_whole(&op, &[wrong]), Err(Error::InputMismatch { input: 0, .. })));
    assert!(execute_whole(&op, &[]).is_err());
}

#[test]
fn output_blocks_of_a_spec_form_a_tiling() {
    let op = RowSum::new(6, 4);
    for s in enumerate_specs(&op, 6).unwrap() {
        assert!(Tiling::new(op.outputs[0].tensor_type(), s.spec.output_blocks(0)).is_ok());
    }
}

/// An operator's roles join the computation's table when it is added; a role that conflicts
/// with the builder's (or with another operator's) refuses the operator, naming both.
#[test]
fn operator_roles_reach_the_computation_and_conflicts_are_refused() {
    let mut c = Computation::new();
    let x = c.add_input("x", TensorDesc::of(&[("i", 4), ("j", 2)], DType::F32).unwrap());
    // The default: no role.
    c.add_op("plain", Box::new(RowSum::new(4, 2)), &[x]).unwrap();
    assert!(c.roles().is_empty());
    c.declare_role("j", IndexRole::FfnHidden).unwrap();
    let rows = RowSum { roles: vec![("i".into(), IndexRole::Tokens)], ..RowSum::new(4, 2) };
    c.add_op("rows", Box::new(rows), &[x]).unwrap();
    assert_eq!(c.roles().get("i"), Some(IndexRole::Tokens));
    // The same role again is fine, from the builder or an operator.
    c.declare_role("i", IndexRole::Tokens).unwrap();
    let clash = RowSum { roles: vec![("j".into(), IndexRole::HeadsQ)], ..RowSum::new(4, 2) };
    let before = c.len();
    match c.add_op("clash", Box::new(clash), &[x]) {
        Err(e @ Error::RoleConflict { .. }) => {
            let msg = e.to_string();
            assert!(msg.contains("`j`") && msg.contains("heads_q") && msg.contains("ffn_hidden"), "{msg}");
            assert!(msg.contains("operator `clash`") && msg.contains("builder"), "{msg}");
        }
        other => panic!("expected a role conflict, got {other:?}"),
    }
    assert_eq!(c.len(), before, "a refused operator is not added");
    assert!(matches!(c.declare_role("i", IndexRole::HeadsKv), Err(Error::RoleConflict { .. })));
    assert_eq!(c.roles().get("i"), Some(IndexRole::Tokens));
}

//! Random small computations over `n×n` tensors, shared by the ILP and memory tests
//! (included with `#[path]`, so each test crate uses what it needs).
#![allow(dead_code)]

use einsum_core::{DType, TensorDesc};
use einsum_joinagg::{AbstractOperator, Computation, TensorId, enumerate_specs};
use einsum_logical::{CostModel, Machine, PaperProxy, Time};
use einsum_ops::binary::{Binary, BinaryOp};
use einsum_ops::einsum::Einsum;
use einsum_ops::unary::{Unary, UnaryOp};
use proptest::prelude::*;

/// One operator of a random computation: its kind and two seeds that pick its arguments.
#[derive(Clone, Debug)]
pub struct OpRecipe {
    pub kind: u8,
    pub args: [usize; 2],
}

/// A random computation over `n×n` tensors: a tree (every tensor consumed at most once)
/// or a DAG (any earlier tensor may be read again).
#[derive(Clone, Debug)]
pub struct Recipe {
    pub p: usize,
    pub n: usize,
    pub dag: bool,
    pub time: bool,
    pub ops: Vec<OpRecipe>,
}

pub fn recipe(dag: bool) -> impl Strategy<Value = Recipe> {
    recipe_of(dag, 2..7)
}

pub fn recipe_of(dag: bool, ops: std::ops::Range<usize>) -> impl Strategy<Value = Recipe> {
    (
        prop::sample::select(vec![2usize, 3, 4, 6, 8]),
        prop::sample::select(vec![4usize, 6, 8, 12]),
        any::<bool>(),
        prop::collection::vec((0u8..5, any::<usize>(), any::<usize>()), ops),
    )
        .prop_map(move |(p, n, time, ops)| Recipe {
            p,
            n,
            dag,
            time,
            ops: ops.into_iter().map(|(kind, a, b)| OpRecipe { kind, args: [a, b] }).collect(),
        })
}

pub fn operator(kind: u8, d: &TensorDesc) -> Box<dyn AbstractOperator> {
    match kind {
        0 => Box::new(Einsum::matmul(d, d).expect("matmul")),
        1 => Box::new(Einsum::new("ij,kj->ik", &[d.clone(), d.clone()]).expect("einsum")),
        2 => Box::new(Einsum::new("ij->ji", std::slice::from_ref(d)).expect("transpose")),
        3 => Box::new(Unary::new(d, UnaryOp::Relu).expect("relu")),
        _ => Box::new(Binary::new(d, d, BinaryOp::Add).expect("add")),
    }
}

/// Builds the computation, adding operators while the product of candidate counts stays
/// within [`MAX_ASSIGNMENTS`].
pub fn build(r: &Recipe, max_assignments: usize) -> Computation {
    let d = TensorDesc::of(&[("i", r.n), ("j", r.n)], DType::F32).expect("desc");
    let mut comp = Computation::new();
    let mut available: Vec<TensorId> = vec![comp.add_input("x0", d.clone())];
    let mut inputs = 1;
    let mut assignments = 1usize;
    let mut last = None;
    for (i, o) in r.ops.iter().enumerate() {
        let op = operator(o.kind, &d);
        let count = enumerate_specs(op.as_ref(), r.p).expect("specs").len();
        if assignments.saturating_mul(count) > max_assignments {
            break;
        }
        assignments = assignments.saturating_mul(count);
        let mut args = Vec::new();
        for &seed in &o.args[..op.inputs().len()] {
            let pick = seed % (available.len() + 1);
            if pick == available.len() {
                args.push(comp.add_input(format!("x{inputs}"), d.clone()));
                inputs += 1;
            } else if r.dag {
                args.push(available[pick]);
            } else {
                args.push(available.remove(pick));
            }
        }
        let out = comp.add_op(format!("op{i}"), op, &args).expect("add op")[0];
        available.push(out);
        last = Some(out);
    }
    if let Some(t) = last {
        comp.save(t).expect("save");
    }
    comp
}

pub fn model(time: bool) -> Box<dyn CostModel> {
    if time { Box::new(Time::on(Machine::by_name("dgx-a100").expect("machine"))) } else { Box::new(PaperProxy) }
}

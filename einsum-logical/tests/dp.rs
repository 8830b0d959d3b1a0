//! The DP, greedy and random strategies on real operators: the 3D matmul of Section 4.4,
//! data parallelism for an FFN, and exhaustive optimality checks on random trees and DAGs.

use einsum_core::{DType, HostTensor, Interval, KernelClass, SeededRng, TensorDesc};
use einsum_joinagg::{
    AbstractOperator, Computation, FunctionSpec, JoinAggSpec, Node, ShardableIndex, TensorId, enumerate_specs,
    grid_spec, validate_spec,
};
use einsum_logical::{
    CostModel, Dp, Greedy, LogicalOptimizer, LogicalPlan, Machine, PaperProxy, Problem, Random, Time,
};
use einsum_ops::{
    binary::{Binary, BinaryOp},
    einsum::Einsum,
    softmax::Softmax,
    unary::{Unary, UnaryOp},
};
use proptest::prelude::*;

/// The most assignments an exhaustive check enumerates.
const MAX_ASSIGNMENTS: usize = 20_000;

fn desc(dims: &[(&str, usize)]) -> TensorDesc {
    TensorDesc::of(dims, DType::F32).unwrap()
}

/// Every chosen spec is a valid join-agg spec of its operator on `p` devices.
fn assert_valid(comp: &Computation, plan: &LogicalPlan) {
    for planned in &plan.ops {
        let Some(Node::Op { op, .. }) = comp.node(planned.id) else { panic!("{} is not an operator", planned.name) };
        validate_spec(op.as_ref(), &planned.spec, Some(plan.devices)).unwrap();
    }
}

/// The least total over every assignment of candidates.
fn brute_force(problem: &Problem) -> f64 {
    let sizes: Vec<usize> = problem.ops.iter().map(|o| o.candidates.len()).collect();
    let mut choice = vec![0; sizes.len()];
    let mut best = f64::INFINITY;
    loop {
        best = best.min(problem.total(&choice).unwrap());
        let Some(i) = (0..sizes.len()).find(|&i| choice[i] + 1 < sizes[i]) else { return best };
        choice[i] += 1;
        choice[..i].iter_mut().for_each(|c| *c = 0);
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs())
}

/// Section 4.4: a single N×N×N matmul on p = q³ devices gets the q×q×q grid at (3q − 1)·N².
#[test]
fn the_3d_matmul_is_recovered() {
    for n in [64, 4096] {
        for (p, q) in [(8, 2), (27, 3), (64, 4)] {
            let mut comp = Computation::new();
            let a = comp.add_input("a", desc(&[("i", n), ("k", n)]));
            let b = comp.add_input("b", desc(&[("k", n), ("j", n)]));
            let mm = Einsum::matmul(&desc(&[("i", n), ("k", n)]), &desc(&[("k", n), ("j", n)])).unwrap();
            let c = comp.add_op("mm", Box::new(mm), &[a, b]).unwrap()[0];
            comp.save(c).unwrap();
            let plan = Dp.optimize(&comp, p, &PaperProxy).unwrap();
            let op = &plan.ops[0];
            assert!(op.splits.iter().all(|(_, c)| *c == q), "N={n} p={p}: {}", op.splits_label());
            assert_eq!(plan.total, ((3 * q - 1) * n * n) as f64, "N={n} p={p}");
            assert_eq!(op.cost.repartition, 0.0);
            assert_valid(&comp, &plan);
        }
    }
}

/// x[tokens, d_model] @ w1 → relu → @ w2 with tokens ≫ d_model, d_ff: data parallelism.
#[test]
fn a_tall_ffn_is_data_parallel() {
    let (t, d, f) = (4096, 16, 32);
    let mut comp = Computation::new();
    let (xd, w1d, w2d) = (
        desc(&[("tokens", t), ("d_model", d)]),
        desc(&[("d_model", d), ("d_ff", f)]),
        desc(&[("d_ff", f), ("d_model", d)]),
    );
    let x = comp.add_input("x", xd.clone());
    let w1 = comp.add_input("w1", w1d.clone());
    let w2 = comp.add_input("w2", w2d.clone());
    let up = Einsum::matmul(&xd, &w1d).unwrap();
    let hd = up.outputs()[0].clone();
    let h = comp.add_op("up", Box::new(up), &[x, w1]).unwrap()[0];
    let r = comp.add_op("relu", Box::new(Unary::new(&hd, UnaryOp::Relu).unwrap()), &[h]).unwrap()[0];
    let y = comp.add_op("down", Box::new(Einsum::matmul(&hd, &w2d).unwrap()), &[r, w2]).unwrap()[0];
    comp.save(y).unwrap();
    let plan = Dp.optimize(&comp, 8, &PaperProxy).unwrap();
    for op in &plan.ops {
        assert_eq!(op.split("tokens"), 8, "{}: {}", op.name, op.splits_label());
        assert_eq!(op.splits_label(), "tokens=8", "{}", op.name);
        assert_eq!(op.cost.repartition, 0.0, "{}", op.name);
    }
    assert_valid(&comp, &plan);
    let time = Time::on(Machine::by_name("dgx-a100").unwrap());
    let plan = Dp.optimize(&comp, 8, &time).unwrap();
    assert_valid(&comp, &plan);
}

/// A chain of `layers` matmuls, each with a fresh weight, alternating `[a, b]` and `[a, c]`.
fn matmul_chain(layers: usize, extent: usize) -> Computation {
    let mut comp = Computation::new();
    let mut x = comp.add_input("x", desc(&[("a", extent), ("b", extent)]));
    for layer in 0..layers {
        let xd = comp.desc(x).unwrap().clone();
        let (v, w) = if xd.dims[1].name == "b" { ("b", "c") } else { ("c", "b") };
        let wd = desc(&[(v, extent), (w, extent)]);
        let weight = comp.add_input(format!("w{layer}"), wd.clone());
        x = comp.add_op(format!("mm{layer}"), Box::new(Einsum::matmul(&xd, &wd).unwrap()), &[x, weight]).unwrap()[0];
    }
    comp.save(x).unwrap();
    comp
}

/// Random is reproducible for a seed, differs across seeds, and never beats the DP on a tree.
#[test]
fn random_is_reproducible_and_seeded() {
    let comp = matmul_chain(6, 16);
    let problem = Problem::new(&comp, 8, &PaperProxy).unwrap();
    assert!(problem.ops.iter().all(|o| o.candidates.len() == 10));
    let once = Random { seed: 7 }.solve(&problem).unwrap();
    assert_eq!(once, Random { seed: 7 }.solve(&problem).unwrap());
    assert_ne!(once, Random { seed: 8 }.solve(&problem).unwrap());
    assert!(once.iter().zip(&problem.ops).all(|(c, op)| *c < op.candidates.len()));
    let dp = problem.total(&Dp.solve(&problem).unwrap()).unwrap();
    for seed in 0..8 {
        assert!(problem.total(&Random { seed }.solve(&problem).unwrap()).unwrap() >= dp);
    }
    let plan = Random { seed: 7 }.optimize(&comp, 8, &PaperProxy).unwrap();
    assert_eq!((plan.optimizer.as_str(), plan.choice()), ("random", once));
    assert_valid(&comp, &plan);
}

/// Greedy takes each operator's cheapest spec alone, ties to the lowest index.
#[test]
fn greedy_takes_the_cheapest_spec_per_operator() {
    let comp = matmul_chain(3, 16);
    let problem = Problem::new(&comp, 8, &PaperProxy).unwrap();
    let choice = Greedy.solve(&problem).unwrap();
    for (c, op) in choice.iter().zip(&problem.ops) {
        let least = op.candidates.iter().map(|k| k.cost.total()).fold(f64::INFINITY, f64::min);
        assert_eq!(op.candidates[*c].cost.total(), least);
        assert!(op.candidates[..*c].iter().all(|k| k.cost.total() > least));
    }
    let plan = Greedy.optimize(&comp, 8, &PaperProxy).unwrap();
    assert_eq!(plan.optimizer, "greedy");
    assert!(plan.total >= Dp.optimize(&comp, 8, &PaperProxy).unwrap().total);
    assert_valid(&comp, &plan);
}

/// A toy operator with two outputs of different tilings: `y0[u, v] = x`, `y1[u] = Σ_v x`.
#[derive(Debug)]
struct Fork {
    inputs: Vec<TensorDesc>,
    outputs: Vec<TensorDesc>,
}

impl Fork {
    fn new(x: &TensorDesc) -> Fork {
        let y1 = TensorDesc::new(vec![x.dims[0].clone()], x.dtype).unwrap();
        Fork { inputs: vec![x.clone()], outputs: vec![x.clone(), y1] }
    }
}

impl AbstractOperator for Fork {
    fn kind(&self) -> &str {
        "fork"
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
        self.inputs[0].dims.iter().map(|d| ShardableIndex::any(d.name.clone(), d.extent)).collect()
    }
    fn join_agg_spec(&self, intervals: &[Vec<Interval>]) -> einsum_joinagg::Result<JoinAggSpec> {
        let dims = vec![vec![Some(0), Some(1)], vec![Some(0), Some(1)], vec![Some(0)]];
        grid_spec("fork", &self.inputs, &self.outputs, &self.shardable(), &dims, intervals)
    }
    fn flops(&self, f: &FunctionSpec) -> f64 {
        f.inputs[0].volume() as f64
    }
    fn compute(&self, f: &FunctionSpec, inputs: &[HostTensor]) -> einsum_joinagg::Result<Vec<HostTensor>> {
        let x = inputs[0].to_f32();
        let cols = f.inputs[0].dim(1).len();
        let sums = x.chunks(cols).map(|row| row.iter().sum()).collect();
        Ok(vec![
            HostTensor::from_f32(f.outputs[0].clone(), DType::F32, x)?,
            HostTensor::from_f32(f.outputs[1].clone(), DType::F32, sums)?,
        ])
    }
}

/// One random construction step: an operator kind (or a new input), which pool tensor it reads, a partner
/// for two-input operators, and (in DAGs) whether the tensors read stay available.
type Step = (u8, usize, usize, bool);

/// A random computation on `p` devices over the axes `a`, `b`, `c`: each step applies an
/// operator to tensors of a pool of unconsumed tensors. In trees every operator's outputs go
/// to at most one operator; DAGs may keep what they read, so tensors get several consumers. Operators without a spec on `p` devices,
/// or that would push the number of assignments past [`MAX_ASSIGNMENTS`], are skipped.
fn random_computation(p: usize, extents: [usize; 3], steps: &[Step], dag: bool) -> Computation {
    let axes = ["a", "b", "c"];
    let extent = |name: &str| extents[axes.iter().position(|a| *a == name).unwrap()];
    let mut comp = Computation::new();
    let mut pool = vec![comp.add_input("x", desc(&[("a", extents[0]), ("b", extents[1])]))];
    let mut assignments = 1usize;
    for (n, &(kind, pick, other, keep)) in steps.iter().enumerate() {
        if pool.is_empty() {
            break;
        }
        if kind % 10 >= 8 {
            // A new branch: a fresh input over two of the axes.
            let (u, v) = (axes[pick % 3], axes[(pick + 1 + other % 2) % 3]);
            pool.push(comp.add_input(format!("in{n}"), desc(&[(u, extent(u)), (v, extent(v))])));
            continue;
        }
        let t = pool[pick % pool.len()];
        let td = comp.desc(t).unwrap().clone();
        let names: Vec<String> = td.dims.iter().map(|d| d.name.clone()).collect();
        let third = axes.iter().find(|a| !names.iter().any(|n| n == *a)).map(|a| a.to_string());
        // A pool tensor other than `t` of the wanted dims, if any.
        let partner = |want: &[&str]| -> Option<TensorId> {
            let matching: Vec<TensorId> = pool
                .iter()
                .copied()
                .filter(|&s| {
                    s != t && comp.desc(s).unwrap().dims.iter().map(|d| d.name.as_str()).eq(want.iter().copied())
                })
                .collect();
            (!matching.is_empty()).then(|| matching[other % matching.len()])
        };
        let two_d = td.rank() == 2;
        let (op, partner): (Box<dyn AbstractOperator>, Option<TensorId>) = match kind % 8 {
            1 => {
                // A partner whose indices are among t's (the same shape, or a fork's row sums
                // beside its copy), broadcast over the rest; else a fresh input.
                let fits: Vec<TensorId> = pool
                    .iter()
                    .copied()
                    .filter(|&s| s != t && comp.desc(s).unwrap().dims.iter().all(|d| td.has(&d.name)))
                    .collect();
                let s = (!fits.is_empty()).then(|| fits[other % fits.len()]);
                let sd = s.map_or_else(|| td.clone(), |s| comp.desc(s).unwrap().clone());
                (Box::new(Binary::new(&td, &sd, BinaryOp::Add).unwrap()), s)
            }
            2 => (Box::new(Binary::new(&td, &td, BinaryOp::Mul).unwrap()), Some(t)),
            3 | 7 if two_d => {
                let (v, w) = (names[1].as_str(), third.clone().unwrap());
                let wd = desc(&[(v, extent(v)), (&w, extent(&w))]);
                let s = if kind % 8 == 7 { partner(&[v, &w]) } else { None };
                (Box::new(Einsum::matmul(&td, &wd).unwrap()), s)
            }
            4 if two_d => (Box::new(Einsum::new("ij->ji", std::slice::from_ref(&td)).unwrap()), None),
            5 => (Box::new(Softmax::new(&td, &names[0]).unwrap()), None),
            6 if two_d => (Box::new(Fork::new(&td)), None),
            0 => (Box::new(Unary::new(&td, UnaryOp::Relu).unwrap()), None),
            _ => (Box::new(Unary::new(&td, UnaryOp::Exp).unwrap()), None),
        };
        let Ok(specs) = enumerate_specs(op.as_ref(), p) else { continue };
        if assignments * specs.len() > MAX_ASSIGNMENTS {
            continue;
        }
        assignments *= specs.len();
        let mut args = vec![t];
        if op.inputs().len() == 2 {
            let s = partner.unwrap_or_else(|| comp.add_input(format!("in{n}"), op.inputs()[1].clone()));
            args.push(s);
        }
        if !dag {
            // Trees: an operator's outputs all go to one consumer, so reading one output of
            // a fork drops its others.
            pool.retain(|s| !args.iter().any(|a| a.op == s.op));
        } else if !keep {
            pool.retain(|s| !args.contains(s));
        }
        let outs = comp.add_op(format!("op{n}"), op, &args).unwrap();
        pool.extend(outs);
    }
    for t in pool {
        comp.save(t).unwrap();
    }
    comp
}

fn time() -> Time {
    Time::on(Machine::by_name("dgx-a100").unwrap())
}

fn check_tree(comp: &Computation, p: usize, cost: &dyn CostModel) -> Result<(), TestCaseError> {
    let problem = Problem::new(comp, p, cost).unwrap();
    let (choice, total) = Dp.solve_with_total(&problem).unwrap();
    let evaluated = problem.total(&choice).unwrap();
    prop_assert!(close(total, evaluated), "DP says {total}, the plan costs {evaluated}");
    let least = brute_force(&problem);
    prop_assert!(close(evaluated, least), "DP {evaluated} but the optimum is {least}");
    let greedy = problem.total(&Greedy.solve(&problem).unwrap()).unwrap();
    prop_assert!(greedy >= least || close(greedy, least), "greedy {greedy} beats the optimum {least}");
    let random = problem.total(&Random { seed: 3 }.solve(&problem).unwrap()).unwrap();
    prop_assert!(random >= least || close(random, least), "random {random} beats the optimum {least}");
    assert_valid(comp, &problem.plan(&choice, "dp").unwrap());
    Ok(())
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    prop::collection::vec((0u8..10, 0usize..16, 0usize..16, any::<bool>()), 1..11)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    /// On trees (every tensor read by at most one operator) the DP is exact.
    #[test]
    fn dp_is_optimal_on_trees(
        p in prop::sample::select(vec![2usize, 3, 4, 6, 8]),
        extents in prop::array::uniform3(2usize..13),
        steps in steps(),
    ) {
        let comp = random_computation(p, extents, &steps, false);
        check_tree(&comp, p, &PaperProxy)?;
        check_tree(&comp, p, &time())?;
    }

    /// On DAGs too the DP is exact (variable elimination over the tensors): its total is the
    /// plan's and the optimum's, and it reports its elimination order, one entry per tensor.
    /// The tree-cut DP it falls back on fails this (it is a heuristic on DAGs).
    #[test]
    fn dp_is_optimal_on_dags(
        p in prop::sample::select(vec![2usize, 3, 4, 6, 8]),
        extents in prop::array::uniform3(2usize..13),
        steps in steps(),
    ) {
        let comp = random_computation(p, extents, &steps, true);
        for cost in [&PaperProxy as &dyn CostModel, &time()] {
            let problem = Problem::new(&comp, p, cost).unwrap();
            let (choice, total) = Dp.solve_with_total(&problem).unwrap();
            let evaluated = problem.total(&choice).unwrap();
            prop_assert!(close(total, evaluated), "DP says {total}, the plan costs {evaluated}");
            let least = brute_force(&problem);
            prop_assert!(close(evaluated, least), "DP {evaluated} but the optimum is {least}");
            let report = Dp::report(&problem).unwrap();
            prop_assert!(report.exact && report.gap_bound.is_none(), "{report:?}");
            let outputs: usize = problem.ops.iter().map(|o| o.candidates[0].outputs.len()).sum();
            prop_assert_eq!(report.order.len(), outputs);
            prop_assert!(report.width <= outputs.saturating_sub(1), "{report:?}");
            assert_valid(&comp, &problem.plan(&choice, "dp").unwrap());
        }
    }
}

/// A tensor read by two operators: the DP's plan is the optimum, found by eliminating one
/// reader's output, the shared tensor, then the other reader's (width 1); the fallback's
/// trees are cut at the shared tensor.
#[test]
fn shared_tensors_are_cut() {
    let mut comp = Computation::new();
    let xd = desc(&[("a", 8), ("b", 8)]);
    let x = comp.add_input("x", xd.clone());
    let h = comp.add_op("relu", Box::new(Unary::new(&xd, UnaryOp::Relu).unwrap()), &[x]).unwrap()[0];
    let t = comp.add_op("t", Box::new(Einsum::new("ij->ji", std::slice::from_ref(&xd)).unwrap()), &[h]).unwrap()[0];
    let s = comp.add_op("s", Box::new(Softmax::new(&xd, "b").unwrap()), &[h]).unwrap()[0];
    comp.save(t).unwrap();
    comp.save(s).unwrap();
    let problem = Problem::new(&comp, 4, &PaperProxy).unwrap();
    assert_eq!(Dp::trees(&problem).unwrap(), vec![vec![0], vec![1], vec![2]]);
    let (choice, total) = Dp.solve_with_total(&problem).unwrap();
    assert_eq!(problem.total(&choice).unwrap(), total);
    assert!(close(total, brute_force(&problem)));
    let report = Dp::report(&problem).unwrap();
    assert_eq!((report.order, report.width, report.exact), (vec!["t".into(), "relu".into(), "s".into()], 1, true));
    assert_eq!(Dp.name(), "dp");
}

#[test]
fn seeds_drive_the_stream() {
    // Random draws exactly one `below` per operator from SeededRng(seed).
    let comp = matmul_chain(4, 16);
    let problem = Problem::new(&comp, 8, &PaperProxy).unwrap();
    let mut rng = SeededRng::new(11);
    let expected: Vec<usize> = problem.ops.iter().map(|o| rng.below(o.candidates.len())).collect();
    assert_eq!(Random { seed: 11 }.solve(&problem).unwrap(), expected);
}

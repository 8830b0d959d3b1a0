//! The ILP strategy: exact against exhaustive enumeration on small trees and DAGs, the
//! cross-check of the DP (both exact: equal on trees and DAGs), and the 3D
//! matrix multiply of Section 4.4.

use einsum_core::{DType, TensorDesc};
use einsum_joinagg::Computation;
use einsum_logical::{Dp, Error, Greedy, Ilp, LogicalOptimizer, PaperProxy, Problem};
use einsum_ops::einsum::Einsum;
use proptest::prelude::*;

/// The most assignments an exhaustive check enumerates.
const MAX_ASSIGNMENTS: usize = 20_000;

#[path = "common/recipe.rs"]
mod recipe;
use recipe::{OpRecipe, Recipe, build, model, recipe, recipe_of};

/// The minimum of `problem.total` over every assignment.
fn exhaustive_minimum(problem: &Problem) -> f64 {
    let radix: Vec<usize> = problem.ops.iter().map(|o| o.candidates.len()).collect();
    let mut choice = vec![0; radix.len()];
    let mut best = f64::INFINITY;
    loop {
        best = best.min(problem.total(&choice).expect("total"));
        let Some(pos) = (0..radix.len()).find(|&i| choice[i] + 1 < radix[i]) else { return best };
        choice[pos] += 1;
        choice[..pos].iter_mut().for_each(|c| *c = 0);
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(f64::MIN_POSITIVE)
}

fn check_exact(r: &Recipe) -> Result<(), TestCaseError> {
    let comp = build(r, MAX_ASSIGNMENTS);
    let cost = model(r.time);
    let problem = Problem::new(&comp, r.p, cost.as_ref()).expect("problem");
    let choice = Ilp::default().solve(&problem).expect("ilp");
    let ilp = problem.total(&choice).expect("total");
    let best = exhaustive_minimum(&problem);
    prop_assert!(close(ilp, best), "ilp {ilp} vs exhaustive {best} ({} ops)", problem.ops.len());
    Ok(())
}

/// The DP against the ILP on computations too large to enumerate: both exact, so equal on
/// trees and DAGs alike. Greedy never beats the DP.
fn check_dp_against_ilp(r: &Recipe) -> Result<(), TestCaseError> {
    let comp = build(r, usize::MAX);
    let cost = model(r.time);
    let problem = Problem::new(&comp, r.p, cost.as_ref()).expect("problem");
    let ilp = problem.total(&Ilp::default().solve(&problem).expect("ilp")).expect("total");
    let dp = problem.total(&Dp.solve(&problem).expect("dp")).expect("total");
    prop_assert!(close(ilp, dp), "ilp {ilp} vs dp {dp} (DAG: {})", r.dag);
    let greedy = problem.total(&Greedy.solve(&problem).expect("greedy")).expect("total");
    prop_assert!(greedy >= dp * (1.0 - 1e-9), "greedy {greedy} < dp {dp}");
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn ilp_is_exact_on_trees(r in recipe(false)) {
        check_exact(&r)?;
    }

    #[test]
    fn ilp_is_exact_on_dags(r in recipe(true)) {
        check_exact(&r)?;
    }

    #[test]
    fn dp_equals_ilp_on_trees(r in recipe_of(false, 6..14)) {
        check_dp_against_ilp(&r)?;
    }

    #[test]
    fn dp_equals_ilp_on_dags(r in recipe_of(true, 6..14)) {
        check_dp_against_ilp(&r)?;
    }
}

/// A single `N×N×N` matmul whose inputs are computation inputs.
fn matmul(n: usize) -> Computation {
    let d = TensorDesc::of(&[("i", n), ("j", n)], DType::F32).expect("desc");
    let mut comp = Computation::new();
    let a = comp.add_input("a", d.clone());
    let b = comp.add_input("b", d.clone());
    let c = comp.add_op("mm", Box::new(Einsum::matmul(&d, &d).expect("matmul")), &[a, b]).expect("op")[0];
    comp.save(c).expect("save");
    comp
}

/// Section 4.4: `p = q³` devices get the `q×q×q` grid at `(3q − 1)·N²`.
#[test]
fn matmul_gets_the_3d_grid() {
    let n = 12;
    for (p, q) in [(8, 2), (27, 3)] {
        let plan = Ilp::default().optimize(&matmul(n), p, &PaperProxy).expect("plan");
        assert_eq!(plan.optimizer, "ilp");
        let splits: Vec<usize> = plan.ops[0].splits.iter().map(|(_, c)| *c).collect();
        assert_eq!(splits, vec![q; 3], "p = {p}");
        assert_eq!(plan.total, ((3 * q - 1) * n * n) as f64, "p = {p}");
    }
}

/// A transpose read three times (twice by one matmul, once by an add): the ILP charges each
/// read's repartition and still matches enumeration.
#[test]
fn tensor_read_three_times_matches_enumeration() {
    let r = Recipe {
        p: 4,
        n: 8,
        dag: true,
        time: false,
        ops: vec![
            OpRecipe { kind: 2, args: [1, 0] },
            OpRecipe { kind: 0, args: [1, 1] },
            OpRecipe { kind: 4, args: [1, 2] },
        ],
    };
    let problem = Problem::new(&build(&r, MAX_ASSIGNMENTS), r.p, &PaperProxy).expect("problem");
    assert_eq!(problem.ops[0].consumers[0], vec![(1, 0), (1, 1), (2, 0)]);
    check_exact(&r).expect("exact");
}

#[test]
fn same_problem_same_choice() {
    let r = Recipe {
        p: 8,
        n: 8,
        dag: true,
        time: true,
        ops: (0..4).map(|k| OpRecipe { kind: k, args: [k as usize, 2 * k as usize + 1] }).collect(),
    };
    let problem = Problem::new(&build(&r, MAX_ASSIGNMENTS), r.p, model(r.time).as_ref()).expect("problem");
    assert_eq!(Ilp::default().solve(&problem).expect("first"), Ilp::default().solve(&problem).expect("second"));
}

#[test]
fn computation_without_operators_has_an_empty_plan() {
    let mut comp = Computation::new();
    let x = comp.add_input("x", TensorDesc::of(&[("i", 4)], DType::F32).expect("desc"));
    comp.save(x).expect("save");
    let problem = Problem::new(&comp, 2, &PaperProxy).expect("problem");
    assert_eq!(Ilp::default().solve(&problem).expect("solve"), Vec::<usize>::new());
}

#[test]
fn non_finite_cost_is_a_solver_error() {
    let mut problem = Problem::new(&matmul(4), 2, &PaperProxy).expect("problem");
    let mut candidates = problem.ops[0].candidates.to_vec();
    candidates[0].cost.join = f64::NAN;
    problem.ops[0].candidates = candidates.into();
    assert!(matches!(Ilp::default().solve(&problem), Err(Error::Solver(_))));
}

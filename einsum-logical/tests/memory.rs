//! Memory as a constraint: the resident bytes of a candidate by hand, every searching
//! strategy within a budget on random problems (the DP near the ILP's exact optimum), the
//! errors of budgets nothing meets, and a budget that forces the DP off its optimum.

use einsum_core::{DType, SeededRng, TensorDesc};
use einsum_joinagg::Computation;
use einsum_logical::{
    Data, Dp, Error, Greedy, Ilp, LogicalOptimizer, PaperProxy, Problem, Random, ResidentInput, format_gb,
};
use einsum_ops::binary::{Binary, BinaryOp};
use einsum_ops::einsum::Einsum;
use einsum_ops::rmsnorm::RmsNorm;
use einsum_ops::unary::{Unary, UnaryOp};
use proptest::prelude::*;

mod common;
use common::Builder;

#[path = "common/recipe.rs"]
mod recipe;
use recipe::{OpRecipe, Recipe, build, model, recipe_of};

/// The most the budgeted DP's plan may cost over the ILP's exact budgeted optimum on a
/// tree (the budget's Lagrangian search is a heuristic; without a budget the two are equal).
/// `measure_the_dp_gap` (708 budgeted random trees) measured at most 1.0908 (35 trees worse
/// at all); the tolerance leaves room for cases proptest draws beyond those.
const DP_OVER_ILP_ON_TREES: f64 = 1.15;

/// The same on DAGs: `measure_the_dp_gap` (669 budgeted random DAGs) measured at most 1.0952
/// (21 worse at all).
const DP_OVER_ILP_ON_DAGS: f64 = 1.15;

fn f16(dims: &[(&str, usize)]) -> TensorDesc {
    TensorDesc::of(dims, DType::F16).unwrap()
}

fn f32(dims: &[(&str, usize)]) -> TensorDesc {
    TensorDesc::of(dims, DType::F32).unwrap()
}

/// relu(x[t, k]) @ w[k, n], all f16: the matmul's only computation input is the weight.
fn relu_then_matmul(t: usize, k: usize, n: usize) -> Computation {
    let (xd, wd) = (f16(&[("t", t), ("k", k)]), f16(&[("k", k), ("n", n)]));
    let mut comp = Computation::new();
    let x = comp.add_input("x", xd.clone());
    let w = comp.add_input("w", wd.clone());
    let h = comp.add_op("relu", Box::new(Unary::new(&xd, UnaryOp::Relu).unwrap()), &[x]).unwrap()[0];
    let y = comp.add_op("matmul", Box::new(Einsum::matmul(&xd, &wd).unwrap()), &[h, w]).unwrap()[0];
    comp.save(y).unwrap();
    comp
}

/// The candidate of operator `op` that splits the named indices as given (others whole).
fn candidate(problem: &Problem, op: usize, splits: &[(&str, usize)]) -> usize {
    let o = &problem.ops[op];
    let mut counts = vec![1; o.shardable.len()];
    for &(name, c) in splits {
        counts[o.index_of(name).unwrap_or_else(|| panic!("{} has no index {name}", o.name))] = c;
    }
    o.find(&counts).unwrap_or_else(|| panic!("{}: no candidate {counts:?}", o.name))
}

#[test]
fn resident_bytes_are_the_weight_blocks_one_function_spec_reads() {
    let (t, k, n) = (16, 8, 12);
    let problem = Problem::new(&relu_then_matmul(t, k, n), 4, &PaperProxy).unwrap();
    assert_eq!(
        problem.inputs,
        vec![
            ResidentInput { name: "x".into(), bytes: (t * k * 2) as f64 },
            ResidentInput { name: "w".into(), bytes: (k * n * 2) as f64 },
        ]
    );
    assert_eq!(problem.input_bytes_total(), ((t * k + k * n) * 2) as f64);
    let mm = &problem.ops[1];
    let weight = |splits: &[(&str, usize)]| mm.candidates[candidate(&problem, 1, splits)].resident_bytes;
    // The weight split by columns: a quarter each; by rows of the activation: whole.
    assert_eq!(weight(&[("n", 4)]), (k * n / 4 * 2) as f64);
    assert_eq!(weight(&[("t", 4)]), (k * n * 2) as f64);
    assert_eq!(weight(&[("k", 4)]), (k / 4 * n * 2) as f64);
    assert_eq!(weight(&[("t", 2), ("n", 2)]), (k * n / 2 * 2) as f64);
    // The relu reads x, a computation input, in blocks of its split.
    let relu = candidate(&problem, 0, &[("t", 4)]);
    assert_eq!(problem.ops[0].candidates[relu].resident_bytes, (t / 4 * k * 2) as f64);
    let choice = vec![relu, candidate(&problem, 1, &[("n", 4)])];
    assert_eq!(problem.resident_bytes(&choice), ((t / 4 * k + k * n / 4) * 2) as f64);
    // The least: both split four ways (every candidate of an operator reads p blocks).
    assert_eq!(problem.min_resident_bytes(), ((t * k + k * n) / 4 * 2) as f64);
    assert_eq!(problem.resident_bytes(&problem.min_resident_choice()), problem.min_resident_bytes());
    let plan = Dp.plan(&problem).unwrap();
    assert_eq!(plan.resident_bytes, problem.resident_bytes(&plan.choice()));
    assert_eq!(plan.memory_budget, None);
}

fn within(bytes: f64, budget: f64) -> bool {
    bytes <= budget * (1.0 + 1e-9)
}

/// The random problem of `r` with a budget `frac` of the way from the least resident bytes
/// to the unconstrained DP plan's; `None` when the two are equal (nothing to constrain).
fn budgeted(r: &Recipe, frac: f64) -> Option<(Problem, Vec<usize>)> {
    let comp = build(r, usize::MAX);
    let problem = Problem::new(&comp, r.p, model(r.time).as_ref()).unwrap();
    let free = Dp.solve(&problem).unwrap();
    let (lo, hi) = (problem.min_resident_bytes(), problem.resident_bytes(&free));
    (hi > lo).then(|| (problem.with_memory_budget(Some(lo + frac * (hi - lo))).unwrap(), free))
}

fn check_budgeted(r: &Recipe, frac: f64) -> Result<(), TestCaseError> {
    let Some((problem, _)) = budgeted(r, frac) else { return Ok(()) };
    let budget = problem.memory_budget.unwrap();
    let mut totals = Vec::new();
    let strategies: [&dyn LogicalOptimizer; 4] = [&Dp, &Ilp::default(), &Greedy, &Random { seed: 7 }];
    for s in strategies {
        let plan = s.plan(&problem).unwrap();
        prop_assert!(within(plan.resident_bytes, budget), "{}: {} > {budget}", s.name(), plan.resident_bytes);
        prop_assert_eq!(plan.memory_budget, Some(budget));
        totals.push(plan.total);
    }
    let (dp, ilp) = (totals[0], totals[1]);
    prop_assert!(ilp <= dp * (1.0 + 1e-9), "the ILP ({ilp}) is exact, the DP found {dp}");
    let tolerance = if r.dag { DP_OVER_ILP_ON_DAGS } else { DP_OVER_ILP_ON_TREES };
    prop_assert!(dp <= ilp * tolerance + 1e-12, "dp {dp} vs ilp {ilp} (dag: {})", r.dag);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    #[test]
    fn every_searching_strategy_plans_within_the_budget(
        r in prop_oneof![recipe_of(false, 3..12), recipe_of(true, 3..12)],
        frac in 0.0..1.0f64,
    ) {
        check_budgeted(&r, frac)?;
    }

    /// A budget the unconstrained DP plan meets changes nothing.
    #[test]
    fn a_budget_the_dp_plan_meets_changes_nothing(r in recipe_of(true, 3..10), extra in 0.0..1.0f64) {
        let comp = build(&r, usize::MAX);
        let problem = Problem::new(&comp, r.p, model(r.time).as_ref()).unwrap();
        let free = Dp.plan(&problem).unwrap();
        let budget = free.resident_bytes * (1.0 + extra) + 1.0;
        let planned = Dp.plan(&problem.clone().with_memory_budget(Some(budget)).unwrap()).unwrap();
        prop_assert_eq!(planned.choice(), free.choice());
        prop_assert_eq!(planned.total, free.total);
    }
}

#[test]
fn a_budget_below_the_least_plan_does_not_fit_anywhere() {
    let problem = Problem::new(&relu_then_matmul(16, 8, 12), 4, &PaperProxy).unwrap();
    let least = problem.min_resident_bytes();
    let problem = problem.with_memory_budget(Some(least * 0.5)).unwrap();
    let strategies: [&dyn LogicalOptimizer; 5] = [&Dp, &Ilp::default(), &Greedy, &Random { seed: 1 }, &Data];
    for s in strategies {
        let err = s.plan(&problem).unwrap_err();
        let Error::DoesNotFit { need, budget, devices, min_devices } = err else { panic!("{}: {err}", s.name()) };
        assert_eq!((need, budget, devices), (least, least * 0.5, 4), "{}", s.name());
        // The inputs split evenly need 8 devices; more than the 4 given in any case.
        assert!(min_devices > 4, "{}: {min_devices}", s.name());
        assert_eq!(min_devices, 8);
    }
    for s in [&Dp as &dyn LogicalOptimizer, &Ilp::default(), &Greedy, &Random { seed: 1 }] {
        assert!(matches!(s.solve(&problem), Err(Error::DoesNotFit { .. })), "{}", s.name());
    }
}

#[test]
fn does_not_fit_says_what_and_how_many_devices() {
    let err = Error::DoesNotFit { need: 17.41e9, budget: 8e9, devices: 2, min_devices: 5 };
    assert_eq!(
        err.to_string(),
        "the computation does not fit: the plan needing the least memory needs 17.41 GB per device on 2 devices, \
         over the budget of 8.00 GB per device; at least 5 devices of this memory would be needed"
    );
    assert_eq!(format_gb(137.2e9), "137.20 GB");
}

/// `data` replicates the weight; the least plan splits it, and a budget between the two
/// refuses `data` by name while the DP plans within it.
#[test]
fn a_baseline_over_the_budget_is_refused_by_name() {
    let problem = Problem::new(&relu_then_matmul(16, 8, 12), 4, &PaperProxy).unwrap();
    let data = Data.solve(&problem).unwrap();
    let (least, need) = (problem.min_resident_bytes(), problem.resident_bytes(&data));
    assert!(need > least);
    let problem = problem.with_memory_budget(Some(least)).unwrap();
    assert_eq!(Data.solve(&problem).unwrap(), data, "the rule ignores memory");
    let err = Data.plan(&problem).unwrap_err();
    assert_eq!(err, Error::OverBudget { strategy: "data".into(), device: 0, need, budget: least });
    assert!(err.to_string().starts_with("the `data` plan needs"), "{err}");
    assert!(within(Dp.plan(&problem).unwrap().resident_bytes, least));
}

#[test]
fn invalid_budgets_are_refused() {
    let problem = Problem::new(&relu_then_matmul(4, 4, 4), 2, &PaperProxy).unwrap();
    for bad in [0.0, -1.0, f64::INFINITY] {
        assert_eq!(problem.clone().with_memory_budget(Some(bad)).unwrap_err(), Error::InvalidBudget(bad));
    }
    assert!(matches!(problem.clone().with_memory_budget(Some(f64::NAN)), Err(Error::InvalidBudget(b)) if b.is_nan()));
    assert!(problem.clone().with_memory_budget(None).is_ok());
    let comp = relu_then_matmul(4, 4, 4);
    assert!(matches!(Dp.optimize_within(&comp, 2, &PaperProxy, Some(0.0)), Err(Error::InvalidBudget(_))));
}

/// Section 4.4's single N×N×N matmul on 8 devices: the unconstrained optimum, the 2×2×2
/// grid, keeps a quarter of both inputs (2·N²·4/4 bytes); a budget of 1.5·N² bytes forces
/// another spec, and the budgeted DP must find the cheapest that fits.
#[test]
fn a_budget_moves_the_dp_off_the_3d_grid() {
    let n = 16;
    let d = f32(&[("i", n), ("j", n)]);
    let mut comp = Computation::new();
    let a = comp.add_input("a", d.clone());
    let b = comp.add_input("b", d.clone());
    let c = comp.add_op("mm", Box::new(Einsum::matmul(&d, &d).unwrap()), &[a, b]).unwrap()[0];
    comp.save(c).unwrap();
    let free = Dp.optimize(&comp, 8, &PaperProxy).unwrap();
    assert!(free.ops[0].splits.iter().all(|(_, c)| *c == 2), "{}", free.ops[0].splits_label());
    assert_eq!(free.resident_bytes, (2 * n * n) as f64);
    let budget = 1.5 * (n * n) as f64;
    let planned = Dp.optimize_within(&comp, 8, &PaperProxy, Some(budget)).unwrap();
    assert!(planned.resident_bytes <= budget, "{}", planned.resident_bytes);
    assert_ne!(planned.choice(), free.choice());
    assert!(planned.total > free.total);
    let problem = Problem::new(&comp, 8, &PaperProxy).unwrap();
    let cheapest_fitting = problem.ops[0]
        .candidates
        .iter()
        .filter(|c| c.resident_bytes <= budget)
        .map(|c| c.cost.total())
        .fold(f64::INFINITY, f64::min);
    assert_eq!(planned.total, cheapest_fitting);
    assert_eq!(Ilp::default().optimize_within(&comp, 8, &PaperProxy, Some(budget)).unwrap().total, cheapest_fitting);
}

/// `layers` pre-norm gated FFN blocks with residuals, in f16, each with its own weights.
fn ffn_stack(layers: usize) -> Computation {
    let (tokens, d_model, d_ff) = (64, 16, 32);
    let mut b = Builder::new(DType::F16);
    let mut x = b.input("x", &[("tokens", tokens), ("d_model", d_model)]);
    for l in 0..layers {
        let w = |name: &str| format!("l{l}.{name}");
        let norm = b.input(&w("norm"), &[("d_model", d_model)]);
        let w_gate = b.input(&w("w_gate"), &[("d_model", d_model), ("d_ff", d_ff)]);
        let w_up = b.input(&w("w_up"), &[("d_model", d_model), ("d_ff", d_ff)]);
        let w_down = b.input(&w("w_down"), &[("d_ff", d_ff), ("d_model", d_model)]);
        let (xd, nd) = (b.desc(x), b.desc(norm));
        let h = b.op(&w("norm"), RmsNorm::new(&xd, &nd, "d_model", 1e-5).unwrap(), &[x, norm]);
        let gate = b.einsum(&w("gate"), "td,df->tf", &[h, w_gate]);
        let up = b.einsum(&w("up"), "td,df->tf", &[h, w_up]);
        let gd = b.desc(gate);
        let act = b.op(&w("silu"), Unary::new(&gd, UnaryOp::Silu).unwrap(), &[gate]);
        let hidden = b.op(&w("mul"), Binary::new(&gd, &gd, BinaryOp::Mul).unwrap(), &[act, up]);
        let down = b.einsum(&w("down"), "tf,fd->td", &[hidden, w_down]);
        x = b.op(&w("residual"), Binary::new(&xd, &xd, BinaryOp::Add).unwrap(), &[x, down]);
    }
    b.comp.save(x).unwrap();
    b.comp
}

/// A stack whose unconstrained plan replicates weights (data parallel over many tokens)
/// planned halfway between the least resident bytes and the unconstrained plan's: every
/// searching strategy fits, the budget costs the DP something, and `data` is refused.
#[test]
fn an_ffn_stack_plans_within_a_budget() {
    let comp = ffn_stack(4);
    let problem = Problem::new(&comp, 4, &PaperProxy).unwrap();
    let free = Dp.plan(&problem).unwrap();
    let least = problem.min_resident_bytes();
    assert!(free.resident_bytes > least, "{} vs {least}", free.resident_bytes);
    let budget = 0.5 * (least + free.resident_bytes);
    let problem = problem.with_memory_budget(Some(budget)).unwrap();
    let strategies: [&dyn LogicalOptimizer; 3] = [&Dp, &Greedy, &Random { seed: 3 }];
    for s in strategies {
        let plan = s.plan(&problem).unwrap();
        assert!(within(plan.resident_bytes, budget), "{}: {} > {budget}", s.name(), plan.resident_bytes);
    }
    let dp = Dp.plan(&problem).unwrap();
    assert!(dp.total >= free.total);
    assert!(dp.total <= Greedy.plan(&problem).unwrap().total, "the DP should beat repaired greedy here");
    assert!(matches!(Data.plan(&problem), Err(Error::OverBudget { .. })));
}

/// The experiment behind [`DP_OVER_ILP`] (and the DP's doc): the budgeted DP against the
/// ILP on 1500 random trees and DAGs of 6–13 operators (those where a budget binds). Run with
/// `cargo test -p einsum-logical --release --test memory -- --ignored --nocapture`.
#[test]
#[ignore = "an experiment: prints the DP's gap to the ILP under a budget"]
fn measure_the_dp_gap() {
    let mut rng = SeededRng::new(2026);
    // Per shape (trees, DAGs): worst ratio, problems worse, problems.
    let mut stats = [(1.0f64, 0, 0); 2];
    // Per shape: the worst ratio of the unconstrained DP to the unconstrained ILP, and the
    // problems where the DP is worse.
    let mut unconstrained = [(1.0f64, 0); 2];
    for case in 0..1500 {
        let ops = 6 + rng.below(8);
        let r = Recipe {
            p: *rng.pick(&[2, 3, 4, 6, 8]).unwrap(),
            n: *rng.pick(&[4, 6, 8, 12]).unwrap(),
            dag: case % 2 == 1,
            time: rng.below(2) == 1,
            ops: (0..ops)
                .map(|_| OpRecipe {
                    kind: rng.below(5) as u8,
                    args: [rng.next_u64() as usize, rng.next_u64() as usize],
                })
                .collect(),
        };
        let Some((problem, free)) = budgeted(&r, rng.unit()) else { continue };
        let unbudgeted = problem.clone().with_memory_budget(None).unwrap();
        let free_ilp = unbudgeted.total(&Ilp::default().solve(&unbudgeted).unwrap()).unwrap();
        let free_ratio = unbudgeted.total(&free).unwrap() / free_ilp.max(f64::MIN_POSITIVE);
        let (free_worst, free_worse) = &mut unconstrained[usize::from(r.dag)];
        *free_worst = free_worst.max(free_ratio);
        *free_worse += usize::from(free_ratio > 1.0 + 1e-9);
        let dp = problem.total(&Dp.solve(&problem).unwrap()).unwrap();
        let ilp = problem.total(&Ilp::default().solve(&problem).unwrap()).unwrap();
        let (worst, worse, count) = &mut stats[usize::from(r.dag)];
        *count += 1;
        let ratio = if ilp > 0.0 {
            dp / ilp
        } else if dp > 0.0 {
            f64::INFINITY
        } else {
            1.0
        };
        if ratio > 1.0 + 1e-9 {
            *worse += 1;
        }
        *worst = worst.max(ratio);
    }
    for (((worst, worse, count), (free, free_worse)), shape) in stats.iter().zip(unconstrained).zip(["trees", "DAGs"]) {
        println!(
            "{count} budgeted {shape}: the DP is worse than the ILP on {worse}, by at most {worst:.4}x \
             (without the budget, on {free_worse}, by at most {free:.4}x)"
        );
    }
}

//! Unit tests of the DP strategy, on chains, trees and DAGs against exhaustive
//! search, in a file of their own so that `dp.rs` holds the strategy alone.

use super::*;
use crate::{Candidate, OpProblem, SpecCost};
use einsum_joinagg::{JoinAggSpec, OpId};

/// A hand-made operator with candidates `(cost, output tilings, input tilings)`.
fn op(name: &str, sources: Vec<Source>, repartition: Vec<f64>, cands: &[(f64, Vec<u32>, Vec<u32>)]) -> OpProblem {
    OpProblem {
        id: OpId(0),
        name: name.into(),
        kind: "toy".into(),
        op_role: None,
        shardable: Vec::new(),
        roles: Vec::new(),
        max_parts: Vec::new(),
        output_dims: Vec::new(),
        input_bytes: vec![0.0; sources.len()],
        consumers: Vec::new(),
        sources,
        repartition,
        repartition_pairs: Vec::new(),
        candidates: cands
            .iter()
            .map(|(cost, outs, ins)| Candidate {
                counts: Vec::new(),
                aliases: Vec::new(),
                spec: JoinAggSpec { functions: Vec::new() },
                outputs: outs.iter().map(|&t| TilingId(t)).collect(),
                inputs: ins.iter().map(|&t| TilingId(t)).collect(),
                cost: SpecCost { join: *cost, aggregation: 0.0, compute: 0.0 },
                bytes: 0.0,
                resident_bytes: 0.0,
            })
            .collect(),
    }
}

fn problem(ops: Vec<OpProblem>) -> Problem {
    Problem { p: 1, ops, cost_model: "toy".into(), unit: "units", inputs: Vec::new(), memory_budget: None }
}

fn brute_force(problem: &Problem) -> f64 {
    let sizes: Vec<usize> = problem.ops.iter().map(|o| o.candidates.len()).collect();
    let mut choice = vec![0; sizes.len()];
    let mut best = f64::INFINITY;
    loop {
        best = best.min(problem.total(&choice).unwrap());
        let mut i = 0;
        while i < sizes.len() {
            choice[i] += 1;
            if choice[i] < sizes[i] {
                break;
            }
            choice[i] = 0;
            i += 1;
        }
        if i == sizes.len() {
            return best;
        }
    }
}

#[test]
fn a_chain_pays_a_repartition_only_when_it_is_cheaper() {
    // a: tiling 1 costs 1, tiling 2 costs 5. b needs tiling 2 cheaply (1) or 1 dearly (10).
    let a = op("a", vec![Source::Input { input: 0 }], vec![100.0], &[(1.0, vec![1], vec![0]), (5.0, vec![2], vec![0])]);
    let b =
        op("b", vec![Source::Op { op: 0, output: 0 }], vec![3.0], &[(1.0, vec![3], vec![2]), (10.0, vec![4], vec![1])]);
    let pr = problem(vec![a, b]);
    let (choice, total) = Dp.solve_with_total(&pr).unwrap();
    // Options: (a1, b-tiling2) = 1 + 3 + 1 = 5; (a2, b-tiling2) = 5 + 1 = 6; (a1, b1) = 11.
    assert_eq!(choice, vec![0, 0]);
    assert_eq!(total, 5.0);
    assert_eq!(pr.total(&choice).unwrap(), 5.0);
}

#[test]
fn a_consumer_reading_two_outputs_picks_one_entry() {
    // a has two outputs; its entries are (1,2) at cost 0 and (3,4) at cost 1. b reads both
    // and needs (1,4) or (3,2): independent choice per output would wrongly cost 0.
    let a = op("a", vec![], vec![], &[(0.0, vec![1, 2], vec![]), (1.0, vec![3, 4], vec![])]);
    let b = op(
        "b",
        vec![Source::Op { op: 0, output: 0 }, Source::Op { op: 0, output: 1 }],
        vec![10.0, 20.0],
        &[(0.0, vec![9], vec![1, 4]), (0.0, vec![9], vec![3, 2])],
    );
    let pr = problem(vec![a, b]);
    let (choice, total) = Dp.solve_with_total(&pr).unwrap();
    // (a0, b0): 0 + 20; (a1, b1): 1 + 20; (a0, b1): 0 + 10; (a1, b0): 1 + 10.
    assert_eq!(total, 10.0);
    assert_eq!(choice, vec![0, 1]);
    assert_eq!(brute_force(&pr), 10.0);
}

#[test]
fn shared_tensors_are_cut_and_charged_once() {
    // a feeds b and c, so every tree has one operator; they are ordered by elements (all
    // zero here), then position: a, b, c.
    let a = op("a", vec![Source::Input { input: 0 }], vec![1.0], &[(0.0, vec![1], vec![0]), (2.0, vec![2], vec![0])]);
    let b = op("b", vec![Source::Op { op: 0, output: 0 }], vec![5.0], &[(0.0, vec![7], vec![2])]);
    let c = op("c", vec![Source::Op { op: 0, output: 0 }], vec![5.0], &[(0.0, vec![8], vec![2])]);
    let pr = problem(vec![a, b, c]);
    assert_eq!(Dp::trees(&pr).unwrap(), vec![vec![0], vec![1], vec![2]]);
    let (choice, total) = Dp.solve_with_total(&pr).unwrap();
    // a is fixed first, alone: tiling 1 (cost 0); b and c then each pay 5 (total 10).
    // The sweep optimises a again with b and c fixed: tiling 2 costs 2 and saves both
    // repartitions, the optimum.
    assert_eq!(choice, vec![1, 0, 0]);
    assert_eq!(total, 2.0);
    assert_eq!(pr.total(&choice).unwrap(), 2.0);
    assert_eq!(brute_force(&pr), 2.0);
}

#[test]
fn a_root_pays_for_its_fixed_consumers() {
    // x -> y (a chain of two, optimised first) reads s; s is also read by z. s's tree is
    // optimised after y's, so s pays y's repartition for each of its tilings.
    let s = op("s", vec![], vec![], &[(0.0, vec![1], vec![]), (1.0, vec![2], vec![])]);
    let z = op("z", vec![Source::Op { op: 0, output: 0 }], vec![0.5], &[(0.0, vec![5], vec![1])]);
    let x = op("x", vec![Source::Input { input: 0 }], vec![0.0], &[(0.0, vec![6], vec![0])]);
    let y = op(
        "y",
        vec![Source::Op { op: 2, output: 0 }, Source::Op { op: 0, output: 0 }],
        vec![0.0, 4.0],
        &[(0.0, vec![7], vec![6, 2])],
    );
    let pr = problem(vec![s, z, x, y]);
    let trees = Dp::trees(&pr).unwrap();
    assert_eq!(trees, vec![vec![2, 3], vec![0], vec![1]]);
    let (choice, total) = Dp.solve_with_total(&pr).unwrap();
    // s = 2 costs 1 and saves y's 4, then z pays 0.5.
    assert_eq!(choice, vec![1, 0, 0, 0]);
    assert_eq!(total, 1.5);
    assert_eq!(pr.total(&choice).unwrap(), 1.5);
}

/// A diamond (a feeds b and c, both read by d) with every table capped at one entry:
/// elimination is relaxed, and the search reports a lower bound and a gap bound that
/// hold against enumeration, with a plan no dearer than the tree-cut DP's.
#[test]
fn relaxed_elimination_bounds_the_gap() {
    let a = op("a", vec![], vec![], &[(0.0, vec![1], vec![]), (1.0, vec![2], vec![]), (3.0, vec![3], vec![])]);
    let b =
        op("b", vec![Source::Op { op: 0, output: 0 }], vec![4.0], &[(0.0, vec![5], vec![2]), (2.0, vec![6], vec![1])]);
    let c =
        op("c", vec![Source::Op { op: 0, output: 0 }], vec![6.0], &[(0.0, vec![7], vec![3]), (1.0, vec![8], vec![2])]);
    let d = op(
        "d",
        vec![Source::Op { op: 1, output: 0 }, Source::Op { op: 2, output: 0 }],
        vec![5.0, 5.0],
        &[(0.0, vec![9], vec![5, 8]), (3.0, vec![9], vec![6, 7])],
    );
    let pr = problem(vec![a, b, c, d]);
    let optimum = brute_force(&pr);
    let exact = Dp::report(&pr).unwrap();
    assert!(exact.exact && exact.gap_bound.is_none() && exact.width == 2, "{exact:?}");
    assert_eq!(Dp.solve_with_total(&pr).unwrap().1, optimum);
    let search = Search::new(&pr, 1).unwrap();
    let outcome = search.run(0.0);
    assert!(!search.elimination.exact());
    assert!(
        outcome.lower <= optimum && optimum <= outcome.objective,
        "{} {optimum} {}",
        outcome.lower,
        outcome.objective
    );
    assert_eq!(pr.total(&outcome.choice).unwrap(), outcome.objective);
    assert!(outcome.objective <= tree_cut(&pr, &search.shape, &Tables::of(&pr), 0.0).1);
    let relaxed = search.report();
    let gap = relaxed.gap_bound.expect("a bound");
    assert!(!relaxed.exact && outcome.objective <= optimum * (1.0 + gap) + 1e-12, "{relaxed:?}");
}

#[test]
fn malformed_problems_are_errors() {
    let a = op("a", vec![Source::Op { op: 0, output: 0 }], vec![1.0], &[(0.0, vec![1], vec![1])]);
    assert!(Dp.solve(&problem(vec![a])).is_err());
    let empty = op("e", vec![], vec![], &[]);
    assert!(Dp.solve(&problem(vec![empty])).unwrap_err().to_string().contains("no candidate"));
    assert_eq!(Dp.solve(&problem(Vec::new())).unwrap(), Vec::<usize>::new());
}

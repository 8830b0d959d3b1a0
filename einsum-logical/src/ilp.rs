//! The ILP strategy: the exact optimum of [`Problem::total`] over the whole DAG, found by a
//! mixed-integer linear program solved through `good_lp`.
//!
//! It is exact by a different route than the default strategy's variable elimination
//! ([`Dp`](crate::Dp)), and the two are checked against each other; it needs a solver and
//! its time is unpredictable (branch and bound), so it is the reference rather than the
//! default, and the exact strategy under a memory budget (where the DP's Lagrangian search
//! is a heuristic).
//!
//! # Formulation
//! - One binary `x[o][J]` per operator `o` and candidate `J`, with `Σ_J x[o][J] = 1`: the
//!   chosen candidate.
//! - One continuous `z ∈ [0, 1]` per edge `e` (producer output → consumer input `k`) and pair
//!   of tilings `(f, t)`, `f` one the producer's candidates make and `t` one the consumer's
//!   need, whose repartition costs something: `c(f, t)`,
//!   [`OpProblem::repartition_cost`](crate::OpProblem::repartition_cost) (zero when `f = t`).
//! - Minimise `Σ_o Σ_J cost(J)·x[o][J] + Σ c(f, t)·z`, where `cost(J)` is the candidate's
//!   tiling-independent [`SpecCost::total`](crate::SpecCost::total).
//! - For every such pair:
//!   `z ≥ Σ_{producer J' with out(J') = f} x + Σ_{consumer J with in_k(J) = t} x − 1`.
//! - With a [memory budget](Problem::memory_budget) `B`:
//!   `Σ_o Σ_J resident_bytes(J)·x[o][J] ≤ B`, the plan's [`Problem::resident_bytes`] (a sum
//!   of one term per operator, so linear in `x`). A budget below
//!   [`Problem::min_resident_bytes`] is [`Error::DoesNotFit`] before any solving.
//!
//! # Why the linearisation is exact
//! At an integral point exactly one consumer candidate (needing tiling `t_c`) and one
//! producer candidate (producing `t_p`) are chosen. The constraint of the pair `(t_p, t_c)`
//! reads `z ≥ 1`, and every other pair's `z ≥ 0` or `z ≥ −1`. Since each `z` is minimised at a
//! non-negative price, an optimum sets the pair's to 1 and the others to 0, so the objective
//! equals [`Problem::total`] of the chosen candidates, and every assignment of candidates is
//! feasible that way: the ILP's optimum is the exact minimum of the total. Every coefficient
//! of the constraints is ±1 (costs only appear in the objective), which keeps the LP well
//! conditioned for the solvers. No product variables `x·x'` are needed because one candidate
//! per operator is chosen: "both sides chosen" is a sum minus one.
//!
//! # Numerics
//! Solvers work with absolute tolerances near 1e-9, while costs are elements (up to ~1e9)
//! or seconds (down to ~1e-9). The objective is therefore divided by the total of the
//! cheapest-candidate-per-operator assignment (its tiling-independent costs, a quantity of
//! the plan's own scale), so the solver's tolerances become relative to the plan's cost. The MIP gap
//! is zero. The memory constraint is divided by the budget for the same reason (bytes run
//! from hundreds in tests to 10¹¹ on real models, so no fixed unit such as GB keeps its
//! coefficients near 1), and its right-hand side carries the 1e-9 relative slack of
//! [`Problem::fits`]; should the solver's rounding still leave the plan over budget, it is
//! [repaired](Problem::repair). Assignments whose totals differ by less than about 1e-9 relative may be taken as
//! ties; the model is built in a fixed order (problem order, tilings sorted by id), so the
//! same problem always yields the same choice.
//!
//! # Solvers
//! With the cargo feature `highs`, HiGHS (fast, built from C++ source); without it, the
//! pure-Rust `microlp`, so the strategy exists on every build.
//!
//! # Budgets
//! Branch and bound can take exponential time: microlp ran over 300 s on a 2-layer stack at
//! p = 6 that the DP plans in 1 ms. Every solve therefore has a wall-clock budget
//! ([`Ilp::time_limit`], default [`Ilp::DEFAULT_TIME_LIMIT`], 60 s) and a deterministic cap
//! on branch-and-bound nodes ([`Ilp::node_limit`], default [`Ilp::DEFAULT_NODE_LIMIT`]),
//! given to either solver. A solve stopped by either before proving the optimum is
//! [`Error::SolverLimit`], naming the limit: the strategy's contract is the exact optimum,
//! so it returns no plan it cannot vouch for.

use std::collections::BTreeMap;
use std::time::Duration;

use good_lp::{Expression, ProblemVariables, SolverModel, Variable, variable};

use crate::{Error, LogicalOptimizer, Problem, Result, Source};

/// The exact optimum of [`Problem::total`] over the whole DAG, by integer linear programming:
/// a binary per (operator, candidate), one chosen per operator, and per edge a continuous
/// `r_e ∈ [0, 1]` bounded below by "the consumer needs tiling `t` and the producer does not
/// produce it", which an optimum sets to exactly the repartition indicator. Solved by HiGHS
/// with the `highs` feature, else by the pure-Rust microlp, within a time limit and a node
/// cap; a solver failure is [`Error::Solver`], a limit reached [`Error::SolverLimit`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ilp {
    /// Wall-clock budget of one solve (a plan under a memory budget may solve more than once).
    pub time_limit: Duration,
    /// The most branch-and-bound nodes one solve may explore: the budget that does not
    /// depend on the machine's speed.
    pub node_limit: u64,
}

impl Ilp {
    /// The default [`time_limit`](Self::time_limit): 60 s.
    pub const DEFAULT_TIME_LIMIT: Duration = Duration::from_secs(60);
    /// The default [`node_limit`](Self::node_limit): 100 000 nodes.
    pub const DEFAULT_NODE_LIMIT: u64 = 100_000;
}

impl Default for Ilp {
    /// The default limits.
    fn default() -> Self {
        Ilp { time_limit: Self::DEFAULT_TIME_LIMIT, node_limit: Self::DEFAULT_NODE_LIMIT }
    }
}

impl LogicalOptimizer for Ilp {
    fn name(&self) -> &str {
        "ilp"
    }

    fn solve(&self, problem: &Problem) -> Result<Vec<usize>> {
        problem.check_min_fits()?;
        if problem.ops.is_empty() {
            return Ok(Vec::new());
        }
        check_costs(problem)?;
        let scale = objective_scale(problem)?;

        // Every variable in creation order (the solvers' column order): the `x` first.
        let mut vars = ProblemVariables::new();
        let mut columns = Vec::new();
        let x: Vec<Vec<(usize, Variable)>> = problem
            .ops
            .iter()
            .map(|op| {
                op.candidates
                    .iter()
                    .map(|_| {
                        columns.push(vars.add(variable().binary()));
                        (columns.len() - 1, columns[columns.len() - 1])
                    })
                    .collect()
            })
            .collect();
        let mut objective = Expression::from(0.0);
        for (op, xs) in problem.ops.iter().zip(&x) {
            for (cand, &(_, v)) in op.candidates.iter().zip(xs) {
                objective.add_mul(cand.cost.total() / scale, v);
            }
        }

        // One indicator per edge and pair of tilings (what the producer makes, what the
        // consumer needs) that costs something, with the candidates on both sides.
        let mut pairs = Vec::new();
        for (c, op) in problem.ops.iter().enumerate() {
            for (k, source) in op.sources.iter().enumerate() {
                let Source::Op { op: producer, output } = *source else { continue };
                let mut needed: BTreeMap<_, Vec<usize>> = BTreeMap::new();
                for (n, cand) in op.candidates.iter().enumerate() {
                    needed.entry(cand.inputs[k]).or_default().push(n);
                }
                let mut produced: BTreeMap<_, Vec<usize>> = BTreeMap::new();
                for (n, cand) in problem.ops[producer].candidates.iter().enumerate() {
                    produced.entry(cand.outputs[output]).or_default().push(n);
                }
                for (&t, consumers) in &needed {
                    for (&f, producers) in &produced {
                        let cost = op.repartition_cost(k, f, t);
                        if cost == 0.0 {
                            continue;
                        }
                        let z = vars.add(variable().min(0.0).max(1.0));
                        columns.push(z);
                        objective.add_mul(cost / scale, z);
                        pairs.push((z, c, consumers.clone(), producer, producers.clone()));
                    }
                }
            }
        }

        let mut model = solver(vars.minimise(objective))?;
        for xs in &x {
            model.add_constraint(xs.iter().map(|&(_, v)| v).sum::<Expression>().eq(1.0));
        }
        if let Some(budget) = problem.memory_budget {
            let mut resident = Expression::from(0.0);
            for (op, xs) in problem.ops.iter().zip(&x) {
                for (cand, &(_, v)) in op.candidates.iter().zip(xs) {
                    resident.add_mul(cand.resident_bytes / budget, v);
                }
            }
            model.add_constraint(resident.leq(1.0 + crate::memory::SLACK));
        }
        for (z, c, consumers, producer, producers) in &pairs {
            let chosen: Expression =
                consumers.iter().map(|&n| x[*c][n].1).chain(producers.iter().map(|&n| x[*producer][n].1)).sum();
            model.add_constraint((chosen - 1.0).leq(*z));
        }

        let solution = solve(model, self, &columns)?;
        let choice: Vec<usize> = problem
            .ops
            .iter()
            .zip(&x)
            .map(|(op, xs)| {
                let values: Vec<f64> = xs.iter().map(|&(i, _)| solution[i]).collect();
                values
                    .iter()
                    .position(|&v| v > 0.5)
                    .ok_or_else(|| Error::Solver(format!("no candidate of {} is chosen (values {values:?})", op.name)))
            })
            .collect::<Result<_>>()?;
        Ok(if problem.fits(&choice) { choice } else { problem.repair(&choice) })
    }
}

/// Rejects costs the linear program cannot represent (NaN, infinite, negative).
fn check_costs(problem: &Problem) -> Result<()> {
    for op in &problem.ops {
        let pairs = op.repartition_pairs.iter().flatten().flat_map(|pairs| pairs.values().copied());
        let costs = op.candidates.iter().map(|c| c.cost.total()).chain(op.repartition.iter().copied()).chain(pairs);
        if let Some(bad) = costs.into_iter().find(|c| !c.is_finite() || *c < 0.0) {
            return Err(Error::Solver(format!("{}: cost {bad} is not a finite non-negative number", op.name)));
        }
    }
    Ok(())
}

/// The divisor of the objective: the total of the cheapest candidate per operator (a cost
/// of the plan's own scale), or 1 when that is zero.
fn objective_scale(problem: &Problem) -> Result<f64> {
    let cheapest: Vec<usize> = problem
        .ops
        .iter()
        .map(|op| {
            (0..op.candidates.len())
                .min_by(|&a, &b| op.candidates[a].cost.total().total_cmp(&op.candidates[b].cost.total()))
                .unwrap_or(0)
        })
        .collect();
    let total = problem.total(&cheapest)?;
    Ok(if total > 0.0 { total } else { 1.0 })
}

/// The HiGHS model, with a zero MIP gap (its defaults stop at 0.01 %).
#[cfg(feature = "highs")]
fn solver(unsolved: good_lp::variable::UnsolvedProblem) -> Result<good_lp::solvers::highs::HighsProblem> {
    let gap = |e: good_lp::solvers::MipGapError| Error::Solver(e.to_string());
    good_lp::highs(unsolved).set_mip_rel_gap(0.0).map_err(gap)?.set_mip_abs_gap(0.0).map_err(gap)
}

/// HiGHS's integrality and primal feasibility tolerances. Its defaults (1e-6 and 1e-7) let a
/// candidate's indicator sit 1e-6 below 1, which lowers the pair indicator `z ≥ x + x' − 1`
/// by as much: on an objective scaled to about 1, HiGHS then took an assignment 1e-6
/// (relative) dearer than the optimum for the optimum. 1e-9 keeps such solutions within the
/// ties the module doc allows.
#[cfg(feature = "highs")]
const INTEGRALITY_TOLERANCE: f64 = 1e-9;

/// Solves on HiGHS within `limits` (its `time_limit` and `mip_max_nodes` options): every
/// column's value, in creation order, when the optimum is proven.
///
/// HiGHS proves an optimum with model status `Optimal`, which good_lp reports as
/// [`SolutionStatus::GapLimit`](good_lp::SolutionStatus::GapLimit) whenever the final gap is
/// positive, even by rounding, with our zero gap tolerances; both mean HiGHS finished its
/// search. A limit reached (time, nodes, iterations) is `TimeLimit` in good_lp's terms.
#[cfg(feature = "highs")]
fn solve(model: good_lp::solvers::highs::HighsProblem, limits: &Ilp, columns: &[Variable]) -> Result<Vec<f64>> {
    use good_lp::{Solution, SolutionStatus};
    let nodes = i32::try_from(limits.node_limit).unwrap_or(i32::MAX);
    let model = model
        .set_time_limit(limits.time_limit.as_secs_f64())
        .set_option("mip_max_nodes", nodes)
        .set_option("mip_feasibility_tolerance", INTEGRALITY_TOLERANCE)
        .set_option("primal_feasibility_tolerance", INTEGRALITY_TOLERANCE);
    let limit = || Error::SolverLimit {
        solver: "HiGHS",
        limit: format!(
            "time limit of {} s or cap of {} branch-and-bound nodes",
            limits.time_limit.as_secs_f64(),
            limits.node_limit
        ),
    };
    let started = std::time::Instant::now();
    match model.solve() {
        Ok(solution) if matches!(solution.status(), SolutionStatus::Optimal | SolutionStatus::GapLimit) => {
            Ok(columns.iter().map(|&v| solution.value(v)).collect())
        }
        Ok(_) => Err(limit()),
        // HiGHS stopped by a limit with no feasible point has no solution to return.
        Err(_) if started.elapsed() >= limits.time_limit => Err(limit()),
        Err(e) => Err(Error::Solver(e.to_string())),
    }
}

/// The microlp model (its MIP gap is zero unless set).
#[cfg(not(feature = "highs"))]
fn solver(unsolved: good_lp::variable::UnsolvedProblem) -> Result<good_lp::solvers::microlp::MicroLpProblem> {
    Ok(good_lp::microlp(unsolved))
}

/// Solves on microlp within `limits` (`good_lp` passes a time limit but no node cap, so the
/// model it built is solved directly): every column's value, in creation order — the order
/// `good_lp` created microlp's variables in — when the optimum is proven.
#[cfg(not(feature = "highs"))]
fn solve(model: good_lp::solvers::microlp::MicroLpProblem, limits: &Ilp, columns: &[Variable]) -> Result<Vec<f64>> {
    use microlp::TerminationReason;
    let mut options = microlp::SolveOptions::default();
    options.time_limit = Some(limits.time_limit);
    options.node_limit = Some(limits.node_limit);
    let outcome = model.as_inner().clone().solve_with(options).map_err(|e| Error::Solver(e.to_string()))?;
    let limit = match outcome.termination_reason() {
        TerminationReason::TimeLimit => format!("time limit of {} s", limits.time_limit.as_secs_f64()),
        TerminationReason::NodeLimit => format!("cap of {} branch-and-bound nodes", limits.node_limit),
        // With a zero gap, stopping at the gap is the optimum.
        TerminationReason::ProvenOptimal | TerminationReason::MipGap => {
            let microlp::SolveOutcome::Solution(solution) = outcome else {
                return Err(Error::Solver("an optimal outcome without a solution".into()));
            };
            let values: Vec<f64> = solution.iter().map(|(_, v)| v).collect();
            if values.len() != columns.len() {
                return Err(Error::Solver(format!("{} values for {} variables", values.len(), columns.len())));
            }
            return Ok(values);
        }
        other => return Err(Error::Solver(format!("stopped for an unknown reason: {other:?}"))),
    };
    Err(Error::SolverLimit { solver: "microlp", limit })
}

//! Simulator-in-the-loop refinement: a strategy's plan against its own alternatives, judged
//! by the whole-plan prediction instead of the cost model.
//!
//! The cost model prices operators one at a time; the simulator runs the whole task graph
//! (every transfer on its links, every kernel at its roofline time). Where they disagree
//! (past one server they do by tens of percent), the model's optimum is not the machine's.
//! A strategy offers a few alternatives to its plan
//! ([`LogicalOptimizer::alternatives`](einsum_logical::LogicalOptimizer::alternatives); the DP's
//! take the other side of its costliest decisions); each is compiled with naive exchange
//! programs (cheap and deterministic) and predicted, and the fastest is compiled as asked.
//! When the schedule searches exchange programs, the strategy's own plan is compiled the
//! same way too and kept unless the alternative is faster: refinement never returns a plan
//! slower than the strategy's under the requested schedule.
//!
//! The budget is counted in whole-plan predictions ([`Request::refine`](crate::pipeline::Request::refine)),
//! never in seconds, so the plan a machine gets does not depend on its speed.

use einsum_joinagg::Computation;
use einsum_logical::{LogicalOptimizer, LogicalPlan, Problem};

use crate::{CompileError, CompileOptions, Compiled, Schedule};

/// Whole-plan predictions spent by default on a strategy's alternatives.
pub const DEFAULT_REFINE: usize = 8;

/// Alternatives scored per step of the descent, the model's cheapest first.
pub const PER_STEP: usize = 4;

/// What a refinement did (`plan --json`'s `"refinement"`).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Refinement {
    /// Alternatives the strategy offered and that compiled.
    pub scored: usize,
    /// The strategy's own plan, predicted with naive exchange programs, in ms.
    pub own_naive_ms: f64,
    /// The fastest plan the descent reached, likewise (`None` when no alternative was
    /// faster than the strategy's own).
    pub best_naive_ms: Option<f64>,
    /// Whether an alternative replaced the strategy's plan.
    pub replaced: bool,
}

/// The plan to compile and its compilation: `plan` (the choice of `strategy` on `problem`)
/// or the fastest plan a descent through the strategy's alternatives reaches with at most
/// `limit` whole-plan predictions: the fastest alternative of the current plan replaces it
/// while it predicts faster, and offers its own alternatives.
/// `admissible` refuses a plan before it is compiled (the host-memory estimate). The
/// refinement is `None` when nothing was scored (`limit` 0, no alternatives, or the plan
/// itself does not compile with naive programs: its error then comes from the requested
/// compile).
pub(crate) fn refined(
    comp: &Computation,
    strategy: &dyn LogicalOptimizer,
    problem: &Problem,
    plan: LogicalPlan,
    options: &CompileOptions,
    limit: usize,
    admissible: &dyn Fn(&LogicalPlan) -> bool,
) -> einsum_logical::Result<(LogicalPlan, Result<Compiled, CompileError>, Option<Refinement>)> {
    let compile = |p: &LogicalPlan, o: &CompileOptions| crate::compile(comp, &p.specs(), o);
    let naive = CompileOptions { schedule: Schedule::Naive, ..options.clone() };
    let first = if limit == 0 { Vec::new() } else { strategy.alternatives(problem, &plan.choice(), PER_STEP)? };
    let own = if first.is_empty() { None } else { compile(&plan, &naive).ok() };
    let Some(own) = own else {
        let result = compile(&plan, options);
        return Ok((plan, result, None));
    };
    // A descent: of the current plan's [`PER_STEP`] cheapest alternatives, the fastest
    // replaces it while it predicts faster and offers alternatives of its own, until `limit`
    // predictions are spent.
    let mut current_ms = own.predicted_ms;
    let mut best: Option<(LogicalPlan, Compiled)> = None;
    let (mut scored, mut alternatives) = (0, first);
    while scored < limit && !alternatives.is_empty() {
        let mut step: Option<(LogicalPlan, Compiled)> = None;
        for choice in alternatives.iter().take(PER_STEP.min(limit - scored)) {
            let alternative = problem.plan(choice, strategy.name())?;
            if !admissible(&alternative) {
                continue;
            }
            let Ok(compiled) = compile(&alternative, &naive) else { continue };
            scored += 1;
            if step.as_ref().is_none_or(|(_, s)| compiled.predicted_ms < s.predicted_ms) {
                step = Some((alternative, compiled));
            }
        }
        match step {
            Some((alternative, compiled)) if compiled.predicted_ms < current_ms => {
                current_ms = compiled.predicted_ms;
                alternatives = strategy
                    .alternatives(problem, &alternative.choice(), PER_STEP)?
                    .into_iter()
                    .filter(|c| *c != plan.choice())
                    .collect();
                best = Some((alternative, compiled));
            }
            _ => break,
        }
    }
    let mut refinement = Refinement {
        scored,
        own_naive_ms: own.predicted_ms,
        best_naive_ms: best.as_ref().map(|(_, c)| c.predicted_ms),
        replaced: false,
    };
    let naive_schedule = options.schedule == Schedule::Naive;
    let (plan, result) = match best {
        Some((alternative, compiled)) if compiled.predicted_ms < own.predicted_ms => {
            if naive_schedule {
                refinement.replaced = true;
                (alternative, Ok(compiled))
            } else {
                // Both as asked; the alternative only where it is faster there too.
                let theirs = compile(&alternative, options);
                let mine = compile(&plan, options);
                match (&theirs, &mine) {
                    (Ok(t), Ok(m)) if t.predicted_ms < m.predicted_ms => {
                        refinement.replaced = true;
                        (alternative, theirs)
                    }
                    (Ok(_), Err(_)) => {
                        refinement.replaced = true;
                        (alternative, theirs)
                    }
                    _ => (plan, mine),
                }
            }
        }
        _ if naive_schedule => (plan, Ok(own)),
        _ => {
            let result = compile(&plan, options);
            (plan, result)
        }
    };
    tracing::info!(
        scored = refinement.scored,
        own_ms = refinement.own_naive_ms,
        best_ms = refinement.best_naive_ms,
        replaced = refinement.replaced,
        "refined the plan by whole-plan prediction"
    );
    Ok((plan, result, Some(refinement)))
}

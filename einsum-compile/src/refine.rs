//! Simulator-in-the-loop refinement: a strategy's plan against its own alternatives, judged
//! by the whole-plan prediction instead of the cost model.
//!
//! The cost model prices operators one at a time; the simulator runs the whole task graph
//! (every transfer on its links, every kernel at its roofline time). Where they disagree
//! (past one server they do by tens of percent), the model's optimum is not the machine's.
//! A strategy offers a few alternatives to its plan
//! ([`LogicalOptimizer::alternatives`]; the DP's
//! take the other side of its decisions), and the strategy's optima under the cost model's
//! variants ([`CostModel::variants`](einsum_logical::CostModel::variants)), which price
//! what the model is unsure of the other way, join them; each is compiled with naive exchange
//! programs (cheap and deterministic) and predicted. When the schedule searches exchange
//! programs, the [`FINALISTS`] fastest of them and the cost model's cheapest of the others
//! are compiled that way too, beside the
//! strategy's own plan, which is kept unless one of them is faster: refinement never returns
//! a plan slower than the strategy's under the requested schedule. All these compiles share
//! their exchange programs ([`SynthesisMemo`]), since the plans differ in a few operators.
//!
//! A strategy's plan past the compiler's limits (`CompileError::TooLarge`: the model does not
//! see them) is replaced by its cheapest alternative that compiles, from which the
//! refinement goes on as from the strategy's own plan.
//!
//! The budget is counted in whole-plan predictions, never in seconds, so the plan a machine
//! gets does not depend on its speed: at most [`Request::refine`](crate::pipeline::Request::refine)
//! alternatives with naive programs, then, under a searched schedule, at most [`FINALISTS`]
//! and one more of them and the strategy's plan with searched ones.

use std::sync::Arc;

use einsum_joinagg::Computation;
use einsum_logical::{LogicalOptimizer, LogicalPlan, Problem};

use crate::{CompileError, Compiled, NaiveSynthesizer, PhysicalOptions, SynthesisMemo};

/// Whole-plan predictions spent by default on a strategy's alternatives.
pub const DEFAULT_REFINE: usize = 8;

/// Alternatives scored per step of the descent after the first, the model's cheapest first
/// (on a graph of up to [`WIDE_FIRST_STEP_OPS`] operators the first step scores up to the
/// whole budget: the model's near-ties to its own plan, which only the prediction can order,
/// are all among them).
pub const PER_STEP: usize = 4;

/// The most operators a graph may have for the descent's first step to score up to the
/// whole budget rather than [`PER_STEP`] (a transformer block has 16; a prediction of an
/// 80-layer stack takes seconds).
pub const WIDE_FIRST_STEP_OPS: usize = 256;

/// Under a searched schedule, how many of the scored alternatives, the fastest with naive
/// programs, are compiled as asked beside the strategy's own plan (with one more, the model's
/// cheapest of the others, see `finalists`): searched programs gain more on some plans than
/// on others, so the naive ranking is checked on these.
pub const FINALISTS: usize = 4;

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
    /// Whether an alternative replaced the strategy's plan (under a searched schedule, one of
    /// the finalists, which may be slower than the plan with naive programs).
    pub replaced: bool,
}

/// The plan to compile and its compilation: `plan` (the choice of `strategy` on `problem`)
/// or a faster one among its alternatives. With naive programs, a descent through at most
/// `limit` of them (the fastest alternative of the current plan replaces it while it predicts
/// faster, and offers [`PER_STEP`] alternatives of its own) gives the plan; under a searched schedule the
/// [`FINALISTS`] fastest alternatives it scored and the model's cheapest of the others are
/// compiled as asked beside `plan`, and the fastest of those is the plan.
/// `variants` gives the strategy's optima under the cost model's variants (see the module
/// docs), called only when the strategy offers alternatives; they are scored first, each one prediction beyond `limit`, when the strategy offers
/// alternatives at all (a strategy without any, such as a baseline, is not refined).
/// `admissible` refuses a plan before it is compiled (the host-memory estimate). The
/// refinement is `None` when nothing was scored (`limit` 0, no alternatives, or the plan
/// itself does not compile with naive programs: its error then comes from the requested
/// compile).
#[allow(clippy::too_many_arguments)]
pub(crate) fn refined(
    comp: &Computation,
    strategy: &dyn LogicalOptimizer,
    problem: &Problem,
    plan: LogicalPlan,
    variants: &dyn Fn() -> Vec<Vec<usize>>,
    options: &PhysicalOptions,
    limit: usize,
    admissible: &dyn Fn(&LogicalPlan) -> bool,
) -> einsum_logical::Result<(LogicalPlan, Result<Compiled, CompileError>, Option<Refinement>)> {
    // Every compile shares one memo: the alternatives ask mostly the same exchange problems.
    let mut memo = SynthesisMemo::default();
    // `naive_ms`: the plan's naive prediction, where already known (see `compile_sharing`).
    let mut compile = |p: &LogicalPlan, o: &PhysicalOptions, naive_ms: Option<f64>| {
        crate::compile_sharing(comp, &p.specs(), o, &mut memo, naive_ms)
    };
    let naive = PhysicalOptions { synthesizer: Arc::new(NaiveSynthesizer), ..options.clone() };
    // The first step scores up to the whole budget on a graph of a few layers, where a
    // prediction takes milliseconds; on a deep stack, [`PER_STEP`] like the later steps.
    let width = if problem.ops.len() <= WIDE_FIRST_STEP_OPS { limit } else { PER_STEP };
    let mut first = if limit == 0 { Vec::new() } else { strategy.alternatives(problem, &plan.choice(), width)? };
    let mut extra: Vec<Vec<usize>> = Vec::new();
    for v in if first.is_empty() { Vec::new() } else { variants() } {
        if v != plan.choice() && !first.contains(&v) && !extra.contains(&v) {
            extra.push(v);
        }
    }
    let (limit, width) = (limit + extra.len(), width + extra.len());
    first.splice(0..0, extra);
    let (mut plan, mut stood_in) = (plan, false);
    let own = if first.is_empty() { None } else { Some(compile(&plan, &naive, None)) };
    let own = match own {
        None => None,
        // The strategy's plan is past the compiler's limits: the model's cheapest alternative
        // that compiles stands in for it.
        Some(Err(CompileError::TooLarge { .. })) => {
            let mut stand_in = None;
            for (i, choice) in first.iter().enumerate() {
                let mut alternative = problem.plan(choice, strategy.name())?;
                alternative.search = plan.search.clone();
                if !admissible(&alternative) {
                    continue;
                }
                if let Ok(compiled) = compile(&alternative, &naive, None) {
                    stand_in = Some((i, alternative, compiled));
                    break;
                }
            }
            stand_in.map(|(i, alternative, compiled)| {
                first.remove(i);
                (plan, stood_in) = (alternative, true);
                compiled
            })
        }
        Some(result) => result.ok(),
    };
    let Some(own) = own else {
        let result = compile(&plan, options, None);
        return Ok((plan, result, None));
    };
    // A descent: of the current plan's cheapest alternatives (up to `limit` of the plan's
    // own, then [`PER_STEP`] of each replacement's), the fastest replaces it while it
    // predicts faster and offers alternatives of its own, until `limit` predictions are spent.
    // One graph at most is held beside the one being compiled: the fastest so far, and only
    // under a naive schedule, which returns it as it is (a searched one compiles its
    // finalists again); a plan of millions of tasks takes gigabytes.
    let keep = options.synthesizer.is_naive();
    let own_ms = own.predicted_ms;
    let mut fastest: (Option<LogicalPlan>, f64, Option<Compiled>) = (None, own_ms, Some(own).filter(|_| keep));
    // Every scored alternative with its naive prediction, for the finalists.
    let mut seen: Vec<(LogicalPlan, f64)> = Vec::new();
    let (mut scored, mut alternatives, mut width) = (0, first, width);
    while scored < limit && !alternatives.is_empty() {
        let mut improved = false;
        for choice in alternatives.iter().take(width.min(limit - scored)) {
            let mut alternative = problem.plan(choice, strategy.name())?;
            alternative.search = plan.search.clone();
            if !admissible(&alternative) {
                continue;
            }
            let Ok(compiled) = compile(&alternative, &naive, None) else { continue };
            scored += 1;
            let ms = compiled.predicted_ms;
            seen.push((alternative.clone(), ms));
            // The step's fastest replaces the plan when it is faster: ties go to the earlier.
            if ms < fastest.1 {
                fastest = (Some(alternative), ms, Some(compiled).filter(|_| keep));
                improved = true;
            }
        }
        let Some(replacement) = fastest.0.as_ref().filter(|_| improved) else { break };
        alternatives = strategy
            .alternatives(problem, &replacement.choice(), PER_STEP)?
            .into_iter()
            .filter(|c| *c != plan.choice())
            .collect();
        width = PER_STEP;
    }
    let mut refinement = Refinement {
        scored,
        own_naive_ms: own_ms,
        best_naive_ms: fastest.0.as_ref().map(|_| fastest.1),
        replaced: stood_in,
    };
    let (plan, result) = match fastest {
        (best, _, Some(compiled)) => {
            refinement.replaced |= best.is_some();
            (best.unwrap_or(plan), Ok(compiled))
        }
        (_, _, None) => {
            let (plan, result, replaced) = fastest_as_asked(&mut compile, options, plan, own_ms, seen);
            refinement.replaced |= replaced;
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

/// A compile of a plan under some options, given the plan's naive prediction where known.
type CompileFn<'a> = dyn FnMut(&LogicalPlan, &PhysicalOptions, Option<f64>) -> Result<Compiled, CompileError> + 'a;

/// The [`finalists`] of `seen` compiled as asked, beside the strategy's own `plan` (naive
/// prediction `own_ms`), which wins ties: the fastest plan, its compile, and whether an
/// alternative replaced the strategy's plan.
fn fastest_as_asked(
    compile: &mut CompileFn<'_>,
    options: &PhysicalOptions,
    plan: LogicalPlan,
    own_ms: f64,
    seen: Vec<(LogicalPlan, f64)>,
) -> (LogicalPlan, Result<Compiled, CompileError>, bool) {
    let mut replaced = false;
    let mut kept = (compile(&plan, options, Some(own_ms)), plan);
    for (alternative, naive_ms) in finalists(seen) {
        let theirs = compile(&alternative, options, Some(naive_ms));
        let faster = match (&theirs, &kept.0) {
            (Ok(t), Ok(k)) => t.predicted_ms < k.predicted_ms,
            (Ok(_), Err(_)) => true,
            _ => false,
        };
        if faster {
            kept = (theirs, alternative);
            replaced = true;
        }
    }
    (kept.1, kept.0, replaced)
}

/// The finalists among the scored alternatives: the [`FINALISTS`] fastest with naive
/// programs, and the cheapest of the others under the strategy's cost model. The model
/// prices what searched programs do, which naive programs can rank otherwise (a join's
/// gathers cost naive programs more than the collectives searched ones approach), so a plan
/// the naive ranking puts last may still be the fastest with searched programs.
fn finalists(mut seen: Vec<(LogicalPlan, f64)>) -> Vec<(LogicalPlan, f64)> {
    seen.sort_by(|a, b| a.1.total_cmp(&b.1));
    let rest = seen.split_off(FINALISTS.min(seen.len()));
    seen.extend(rest.into_iter().min_by(|a, b| a.0.total.total_cmp(&b.0.total)));
    seen
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(total: f64) -> LogicalPlan {
        LogicalPlan {
            optimizer: "dp".into(),
            cost_model: "time".into(),
            unit: "s",
            devices: 1,
            ops: Vec::new(),
            total,
            total_bytes: 0.0,
            resident_bytes: 0.0,
            memory_budget: None,
            search: None,
        }
    }

    /// The fastest with naive programs, then the model's cheapest of the rest, even when it
    /// is the slowest with naive programs.
    #[test]
    fn finalists_are_the_naive_fastest_and_the_models_cheapest() {
        // (model total, naive prediction), the first FINALISTS the fastest with naive programs.
        let seen = [(5.0, 1.0), (6.0, 2.0), (7.0, 3.0), (8.0, 4.0), (4.0, 9.0), (3.5, 6.0), (9.0, 5.0)];
        let picked: Vec<(f64, f64)> = finalists(seen.iter().map(|&(t, ms)| (plan(t), ms)).collect())
            .into_iter()
            .map(|(p, ms)| (p.total, ms))
            .collect();
        assert_eq!(picked[..FINALISTS], seen[..FINALISTS]);
        assert_eq!(picked[FINALISTS..], [(3.5, 6.0)]);
        assert_eq!(finalists(vec![(plan(1.0), 1.0)]).len(), 1);
    }
}

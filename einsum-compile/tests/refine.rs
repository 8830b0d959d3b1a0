//! The refinement (`einsum_compile::refine`): a strategy's alternatives to its plan judged by
//! whole-plan prediction, on a 64³ matmul over 8 devices, which the paper's proxy prices
//! best split 2×2×2 (k included) and the simulator predicts fastest split over m and n only.

use einsum_compile::pipeline::{Planned, Request, plan_and_compile};
use einsum_compile::refine::DEFAULT_REFINE;
use einsum_compile::{ExchangeSynthesizer, NaiveSynthesizer, SearchSynthesizer};
use einsum_core::{DType, TensorDesc};
use einsum_joinagg::Computation;
use einsum_logical::{Dp, LogicalOptimizer, PaperProxy, Problem, Result};
use einsum_ops::einsum::Einsum;
use einsum_sim::Topology;
use std::sync::Arc;

fn matmul() -> Computation {
    let mut comp = Computation::new();
    let a = TensorDesc::of(&[("m", 64), ("k", 64)], DType::F32).unwrap();
    let b = TensorDesc::of(&[("k", 64), ("n", 64)], DType::F32).unwrap();
    let (ai, bi) = (comp.add_input("a", a.clone()), comp.add_input("b", b.clone()));
    let c = comp.add_op("mm", Box::new(Einsum::matmul(&a, &b).unwrap()), &[ai, bi]).unwrap()[0];
    comp.save(c).unwrap();
    comp
}

fn planned(
    comp: &Computation,
    strategy: &dyn LogicalOptimizer,
    refine: usize,
    schedule: Arc<dyn ExchangeSynthesizer>,
) -> Planned {
    let topology = Topology::preset("dgx-a100").unwrap();
    plan_and_compile(&Request {
        comp,
        devices: 8,
        strategy,
        cost: &PaperProxy,
        topology: &topology,
        synthesizer: schedule.clone(),
        memory_budget: None,
        host_memory: None,
        refine,
    })
    .unwrap()
}

fn search() -> Arc<dyn ExchangeSynthesizer> {
    Arc::new(SearchSynthesizer { seed: 0, iterations: 10, budget: None, naive_fallback: true })
}

#[test]
fn an_alternative_predicted_faster_replaces_the_plan() {
    let comp = matmul();
    let own = planned(&comp, &Dp, 0, Arc::new(NaiveSynthesizer));
    assert_eq!(own.refinement, None);
    let refined = planned(&comp, &Dp, DEFAULT_REFINE, Arc::new(NaiveSynthesizer));
    let r = refined.refinement.as_ref().expect("the DP offers alternatives");
    assert!(r.replaced && r.scored >= 1, "{r:?}");
    assert_eq!(r.own_naive_ms, own.compiled.predicted_ms);
    assert_eq!(r.best_naive_ms, Some(refined.compiled.predicted_ms));
    assert!(refined.compiled.predicted_ms < 0.5 * own.compiled.predicted_ms);
    // The proxy prices the replacement above its own optimum: the simulator decided.
    assert!(refined.plan.total > own.plan.total);
    assert_eq!(refined.plan.optimizer, "dp");
}

#[test]
fn under_a_searched_schedule_the_alternative_is_kept_where_it_is_faster_there_too() {
    let comp = matmul();
    let own = planned(&comp, &Dp, 0, search());
    let refined = planned(&comp, &Dp, DEFAULT_REFINE, search());
    assert!(refined.refinement.as_ref().is_some_and(|r| r.replaced));
    assert!(refined.compiled.predicted_ms < own.compiled.predicted_ms);
    assert_ne!(refined.plan.choice(), own.plan.choice());
}

/// Plays `fast` and offers `slow` as its only alternative.
struct Offers {
    fast: Vec<usize>,
    slow: Vec<usize>,
}

impl LogicalOptimizer for Offers {
    fn name(&self) -> &str {
        "offers"
    }

    fn solve(&self, _: &Problem) -> Result<Vec<usize>> {
        Ok(self.fast.clone())
    }

    fn alternatives(&self, _: &Problem, _: &[usize], _: usize) -> Result<Vec<Vec<usize>>> {
        Ok(vec![self.slow.clone()])
    }
}

#[test]
fn a_plan_whose_alternatives_predict_slower_is_kept() {
    let comp = matmul();
    let slow = planned(&comp, &Dp, 0, Arc::new(NaiveSynthesizer)).plan.choice();
    let fast = planned(&comp, &Dp, DEFAULT_REFINE, Arc::new(NaiveSynthesizer)).plan.choice();
    assert_ne!(fast, slow);
    for schedule in [Arc::new(NaiveSynthesizer) as Arc<dyn ExchangeSynthesizer>, search()] {
        let kept = planned(&comp, &Offers { fast: fast.clone(), slow: slow.clone() }, DEFAULT_REFINE, schedule);
        assert_eq!(kept.plan.choice(), fast);
        let r = kept.refinement.expect("one alternative was scored");
        assert_eq!((r.scored, r.replaced, r.best_naive_ms), (1, false, None));
    }
}

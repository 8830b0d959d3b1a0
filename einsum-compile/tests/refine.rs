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

/// Two elementwise operators over a `[512, 512]` tensor on 512 devices.
fn relu_chain() -> Computation {
    use einsum_ops::unary::{Unary, UnaryOp};
    let mut comp = Computation::new();
    let d = TensorDesc::of(&[("i", 512), ("j", 512)], DType::F32).unwrap();
    let x = comp.add_input("x", d.clone());
    let a = comp.add_op("a", Box::new(Unary::new(&d, UnaryOp::Relu).unwrap()), &[x]).unwrap()[0];
    let b = comp.add_op("b", Box::new(Unary::new(&d, UnaryOp::Relu).unwrap()), &[a]).unwrap()[0];
    comp.save(b).unwrap();
    comp
}

/// A strategy's plan past the compiler's limits (rows split, then columns: every block of the
/// first meets every block of the second, 512² pieces in one exchange) is replaced by its
/// alternative that compiles (rows split in both).
#[test]
fn an_alternative_stands_in_for_a_plan_past_the_compilers_limits() {
    let comp = relu_chain();
    let topology = Topology::preset("dgx-a100x64").unwrap();
    let problem = Problem::new(&comp, 512, &PaperProxy).unwrap();
    let split =
        |op: usize, counts: &[usize]| problem.ops[op].candidates.iter().position(|c| c.counts == counts).unwrap();
    let (rows, cols) = ([512, 1], [1, 512]);
    let too_large = vec![split(0, &rows), split(1, &cols)];
    let fits = vec![split(0, &rows), split(1, &rows)];
    let plan = |strategy: &dyn LogicalOptimizer, refine: usize| {
        plan_and_compile(&Request {
            comp: &comp,
            devices: 512,
            strategy,
            cost: &PaperProxy,
            topology: &topology,
            synthesizer: Arc::new(NaiveSynthesizer),
            memory_budget: None,
            host_memory: None,
            refine,
        })
    };
    let strategy = Offers { fast: too_large, slow: fits.clone() };
    let err = plan(&strategy, 0).map(|_| ()).unwrap_err().to_string();
    assert!(err.contains("pieces"), "without refinement the plan is refused: {err}");
    let planned = plan(&strategy, DEFAULT_REFINE).unwrap();
    assert_eq!(planned.plan.choice(), fits);
    assert!(planned.refinement.is_some_and(|r| r.replaced));
}

/// A refined compile holds two graphs, so the host-memory check charges it
/// `REFINING_FACTOR` times one compile: a limit between the two is enough for the plan alone
/// and refused, before anything is compiled, when the plan is to be refined.
#[test]
fn the_host_memory_check_charges_a_refinement_two_graphs() {
    use einsum_compile::footprint::{REFINING_FACTOR, compile_bytes, planning_bytes};
    use einsum_compile::pipeline::PipelineError;
    // Forty equal matmuls: planned once (their candidates are shared), compiled forty times.
    let mut comp = Computation::new();
    let d = TensorDesc::of(&[("m", 64), ("k", 64)], DType::F32).unwrap();
    let mut x = comp.add_input("x", d.clone());
    for i in 0..40 {
        let w = comp.add_input(format!("w{i}"), d.clone());
        x = comp.add_op("mm", Box::new(Einsum::new("ab,bc->ac", &[d.clone(), d.clone()]).unwrap()), &[x, w]).unwrap()
            [0];
    }
    comp.save(x).unwrap();
    let own = planned(&comp, &Dp, 0, Arc::new(NaiveSynthesizer));
    let one = compile_bytes(&comp, &own.plan.specs(), 8);
    let limit = one * (1.0 + REFINING_FACTOR) / 2.0;
    assert!(planning_bytes(&comp, 8) < limit, "planning {} over {limit}", planning_bytes(&comp, 8));
    let topology = Topology::preset("dgx-a100").unwrap();
    let request = |refine| Request {
        comp: &comp,
        devices: 8,
        strategy: &Dp,
        cost: &PaperProxy,
        topology: &topology,
        synthesizer: Arc::new(NaiveSynthesizer),
        memory_budget: None,
        host_memory: Some(limit),
        refine,
    };
    assert!(plan_and_compile(&request(0)).is_ok());
    match plan_and_compile(&request(DEFAULT_REFINE)) {
        Err(PipelineError::HostMemory { stage, estimate, .. }) => {
            assert_eq!(stage, "compiling");
            assert_eq!(estimate, REFINING_FACTOR * one);
        }
        other => panic!("expected the compile refused for host memory, got {:?}", other.map(|p| p.rounds)),
    }
}

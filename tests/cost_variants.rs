//! The `time` model's variant in the refinement: on one DGX H100 a decode step's gathers pay
//! about one transfer setup each, which the variant that charges one prices right; the
//! strategy's optimum under it is scored beside the default's own plan and alternatives and
//! wins there, while a model without variants keeps the slower plan.

use std::sync::Arc;

use einsum_core::DType;
use einsum_experiments::Workload;
use einsum_joinagg::{AbstractOperator, JoinAggSpec};
use einsum_logical::{CostModel, Machine, SpecCost, Time};
use einsum_sim::Topology;
use einsummable::{CompileOptions, compile};

/// The `time` model without its variants.
#[derive(Debug)]
struct Alone(Time);

impl CostModel for Alone {
    fn name(&self) -> &str {
        self.0.name()
    }
    fn unit(&self) -> &'static str {
        self.0.unit()
    }
    fn repartition(&self, desc: &einsum_core::TensorDesc, p: usize) -> f64 {
        self.0.repartition(desc, p)
    }
    fn repartition_between(
        &self,
        desc: &einsum_core::TensorDesc,
        from: &[einsum_core::TensorType],
        to: &[einsum_core::TensorType],
        p: usize,
    ) -> f64 {
        self.0.repartition_between(desc, from, to, p)
    }
    fn spec(&self, op: &dyn AbstractOperator, spec: &JoinAggSpec, p: usize, resident: &[bool]) -> SpecCost {
        self.0.spec(op, spec, p, resident)
    }
}

#[test]
fn the_variants_optimum_is_scored_and_wins_a_one_node_decode_step() {
    let graph = Workload::parse("llama-decode:batch=1").unwrap().build(DType::F16).unwrap();
    let topology = Topology::preset("dgx-h100").unwrap();
    // The graph as written: the refinement is compared on one form.
    let options = CompileOptions::default().devices(8).topology(topology.clone()).rewrites(false);
    let with = compile(&graph, &options).unwrap();
    let time = Time::on(Machine::from_topology(&topology));
    assert_eq!(time.variants().len(), 1, "the time model offers one variant");
    let alone = compile(&graph, &CompileOptions { cost: Some(Arc::new(Alone(time))), ..options }).unwrap();
    let (r, r_alone) = (with.refinement().unwrap(), alone.refinement().unwrap());
    assert_eq!(r.scored, r_alone.scored + 1, "the variant's optimum is one prediction more: {r:?} {r_alone:?}");
    assert_eq!(r.own_naive_ms, r_alone.own_naive_ms, "the same plan of the strategy's own");
    assert!(
        with.predicted_ms() < 0.97 * alone.predicted_ms(),
        "{} ms with the variant against {} ms without",
        with.predicted_ms(),
        alone.predicted_ms()
    );
}

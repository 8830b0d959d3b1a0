//! Which join the cost models charge: the paper's proxy charges every input's join, the
//! `time` model only that of operator-produced inputs, because computation inputs are loaded
//! in each function spec's layout before the run.

use einsum_core::{DType, TensorDesc};
use einsum_joinagg::{Computation, enumerate_specs};
use einsum_logical::{CostModel, Machine, PaperProxy, Problem, Source, Time};
use einsum_ops::einsum::Einsum;
use einsum_ops::unary::{Unary, UnaryOp};

fn desc(dims: &[(&str, usize)]) -> TensorDesc {
    TensorDesc::of(dims, DType::F32).unwrap()
}

/// `y = relu(x) · w`: the matmul's first input is produced by an operator, its second (the
/// weight) is a computation input.
fn relu_then_matmul() -> Computation {
    let (xd, wd) = (desc(&[("t", 16), ("d", 8)]), desc(&[("d", 8), ("f", 12)]));
    let mut comp = Computation::new();
    let x = comp.add_input("x", xd.clone());
    let w = comp.add_input("w", wd.clone());
    let h = comp.add_op("relu", Box::new(Unary::new(&xd, UnaryOp::Relu).unwrap()), &[x]).unwrap()[0];
    let y = comp.add_op("matmul", Box::new(Einsum::matmul(&xd, &wd).unwrap()), &[h, w]).unwrap()[0];
    comp.save(y).unwrap();
    comp
}

fn time() -> Time {
    Time::on(Machine::by_name("dgx-a100").unwrap())
}

/// Bytes of input `k`'s blocks summed over the function specs of candidate `n`.
fn join_bytes(problem: &Problem, c: usize, n: usize, k: usize) -> f64 {
    problem.ops[c].candidates[n].spec.functions.iter().map(|f| f.inputs[k].volume() as f64 * 4.0).sum()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-12 * a.abs().max(b.abs())
}

#[test]
fn time_charges_no_join_for_a_resident_weight_and_the_proxy_does() {
    let comp = relu_then_matmul();
    let p = 4;
    let bandwidth = Machine::by_name("dgx-a100").unwrap().link_bandwidth;
    let time = Problem::new(&comp, p, &time()).unwrap();
    let proxy = Problem::new(&comp, p, &PaperProxy).unwrap();
    let mm = time.ops.iter().position(|o| o.name == "matmul").unwrap();
    assert_eq!(time.ops[mm].sources[0], Source::Op { op: 0, output: 0 });
    assert_eq!(time.ops[mm].sources[1], Source::Input);
    assert!(time.ops[mm].candidates.len() > 1);
    let mut replicated = 0;
    for (n, cand) in time.ops[mm].candidates.iter().enumerate() {
        let (produced, weight) = (join_bytes(&time, mm, n, 0), join_bytes(&time, mm, n, 1));
        // Time: only the produced input's blocks travel.
        assert!(close(cand.cost.join, produced / (p as f64 * bandwidth)), "{:?}: {}", cand.counts, cand.cost.join);
        // Proxy: both inputs, in elements, as the paper defines sub-cost (2).
        let proxied = &proxy.ops[mm].candidates[n];
        assert_eq!(proxied.counts, cand.counts);
        assert!(close(proxied.cost.join, (produced + weight) / 4.0), "{:?}: {}", cand.counts, proxied.cost.join);
        // The weight's blocks are non-empty in every spec, so the two models really differ.
        assert!(weight > 0.0);
        replicated += usize::from(weight > 8.0 * 12.0 * 4.0);
    }
    // Some spec replicates the weight (e.g. splitting `t`), the case the fix is about.
    assert!(replicated > 0);
}

#[test]
fn time_still_charges_the_join_of_produced_inputs() {
    let comp = relu_then_matmul();
    let problem = Problem::new(&comp, 4, &time()).unwrap();
    let mm = problem.ops.iter().position(|o| o.name == "matmul").unwrap();
    assert!(problem.ops[mm].candidates.iter().all(|c| c.cost.join > 0.0));
    // The relu reads only a computation input: no join under time, some under the proxy.
    let relu = problem.ops.iter().position(|o| o.name == "relu").unwrap();
    assert!(problem.ops[relu].candidates.iter().all(|c| c.cost.join == 0.0));
    let proxy = Problem::new(&comp, 4, &PaperProxy).unwrap();
    assert!(proxy.ops[relu].candidates.iter().all(|c| c.cost.join == 16.0 * 8.0));
    // Evaluate and total agree with the per-candidate prices.
    let choice = vec![0; problem.ops.len()];
    let costs = problem.evaluate(&choice).unwrap();
    assert_eq!(costs[mm].join, problem.ops[mm].candidates[0].cost.join);
    let total: f64 = costs.iter().map(|c| c.total()).sum();
    assert!(close(problem.total(&choice).unwrap(), total));
}

#[test]
fn a_model_charges_an_input_it_has_no_source_for() {
    let comp = relu_then_matmul();
    let (_, op, _) = comp.ops().find(|(_, op, _)| op.kind() == "matmul").unwrap();
    let spec = &enumerate_specs(op, 2).unwrap()[0].spec;
    let time = time();
    let produced = Source::Op { op: 0, output: 0 };
    let both = time.spec(op, spec, 2, &[produced, produced]);
    let unknown = time.spec(op, spec, 2, &[]);
    let weight = time.spec(op, spec, 2, &[produced, Source::Input]);
    assert_eq!(unknown.join, both.join);
    assert!(weight.join < both.join);
    assert_eq!((weight.aggregation, weight.compute), (both.aggregation, both.compute));
}

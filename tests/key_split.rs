//! The key split of cached attention end to end: a decode step's attention whose cache rows
//! are split over 2 and 4 devices (alone, and with heads, batch and d_head splits), its
//! softmax partials (one statistics column wider) aggregated by the exchange programs and by
//! the saved output's gather, its consumer reading any split of the result, compiled and run
//! on the CPU backend and by the reference interpreter: both equal the single-device
//! evaluation.

use std::collections::HashMap;
use std::sync::Arc;

use einsum_compile::{ComputationKernels, ExchangeSynthesizer, NaiveSynthesizer, PhysicalOptions, SearchSynthesizer};
use einsum_core::taskgraph::{Task, interpret};
use einsum_core::{Aggregation, Backend, DType, HostTensor, TensorDesc, scaled_error};
use einsum_cpu::CpuBackend;
use einsum_joinagg::{Computation, JoinAggSpec, OpId, enumerate_specs, request_spec};
use einsum_ops::cached_attention::CachedAttention;
use einsum_ops::unary::{Unary, UnaryOp};
use einsum_sim::Topology;

fn desc(dims: &[(&str, usize)]) -> TensorDesc {
    TensorDesc::of(dims, DType::F32).unwrap()
}

/// Cached attention (4 query heads on 2 key/value heads, 4 sequences, 8 cache rows, d_head
/// 8) whose output is saved and scaled by 2 (saved too); returns the computation and the
/// ids of the attention and the scale.
fn decode_step() -> (Computation, OpId, OpId) {
    let mut c = Computation::new();
    let (hq, hkv, b, cache, d) = (4, 2, 4, 8, 8);
    let qd = desc(&[("heads_q", hq), ("batch", b), ("d_head", d)]);
    let kvd = desc(&[("heads_kv", hkv), ("batch", b), ("d_head", d)]);
    let cd = desc(&[("heads_kv", hkv), ("batch", b), ("cache", cache), ("d_head", d)]);
    let pd = TensorDesc::of(&[("batch", b)], DType::I32).unwrap();
    let ins = [
        c.add_input("q", qd.clone()),
        c.add_input("k", kvd.clone()),
        c.add_input("v", kvd.clone()),
        c.add_input("k_cache", cd.clone()),
        c.add_input("v_cache", cd.clone()),
        c.add_input("positions", pd.clone()),
    ];
    let op = CachedAttention::named(&qd, &kvd, &kvd, &cd, &cd, &pd, "batch", "d_head", None).unwrap();
    let o = c.add_op("attention", Box::new(op), &ins).unwrap()[0];
    let y = c.add_op("scale", Box::new(Unary::new(&qd, UnaryOp::Scale(2.0)).unwrap()), &[o]).unwrap()[0];
    c.save(o).unwrap();
    c.save(y).unwrap();
    (c, o.op, y.op)
}

/// Random inputs with the positions at 0, inside a block, at a block boundary and at the
/// cache's end.
fn inputs(comp: &Computation, seed: u64) -> HashMap<einsum_joinagg::TensorId, HostTensor> {
    let mut inputs = comp.random_inputs(seed);
    let positions = comp.inputs()[5];
    inputs.insert(positions, HostTensor::from_i32(inputs[&positions].ty().clone(), vec![0, 3, 4, 8]).unwrap());
    inputs
}

#[test]
fn key_splits_compile_and_run_as_the_single_device_reference() {
    let (comp, attention, scale) = decode_step();
    let attention_op = comp.ops().find(|(id, _, _)| *id == attention).unwrap().1;
    let scale_op = comp.ops().find(|(id, _, _)| *id == scale).unwrap().1;
    let topology = Topology::preset("dgx-a100").unwrap();
    let ins = inputs(&comp, 3);
    let reference = comp.evaluate(&ins).unwrap();
    let ordered: Vec<HostTensor> = comp.inputs().iter().map(|t| ins[t].clone()).collect();
    let mut runs = 0;
    for p in [2, 4] {
        // heads_kv, batch, d_head, cache: the key split alone and combined.
        let counts: Vec<[usize; 4]> =
            if p == 2 { vec![[1, 1, 1, 2]] } else { vec![[1, 1, 1, 4], [2, 1, 1, 2], [1, 2, 1, 2], [1, 1, 2, 2]] };
        for (n, c) in counts.iter().enumerate() {
            let spec: JoinAggSpec = request_spec(attention_op, c).unwrap();
            for (m, consumer) in enumerate_specs(scale_op, p).unwrap().iter().enumerate() {
                let synthesizer: Arc<dyn ExchangeSynthesizer> = if (n + m) % 2 == 0 {
                    Arc::new(NaiveSynthesizer)
                } else {
                    Arc::new(SearchSynthesizer { seed: 5, iterations: 5, budget: None, naive_fallback: false })
                };
                let specs = HashMap::from([(attention, spec.clone()), (scale, consumer.spec.clone())]);
                let options =
                    PhysicalOptions { devices: p, synthesizer, topology: topology.clone(), memory_budget: None };
                let what = format!("p {p}, attention {c:?}, scale {:?}", consumer.counts);
                let compiled =
                    einsum_compile::compile(&comp, &specs, &options).unwrap_or_else(|e| panic!("{what}: {e}"));
                assert!(compiled.predicted_ms.is_finite() && compiled.predicted_ms > 0.0, "{what}");
                let softmax_aggregates = compiled
                    .graph
                    .nodes()
                    .iter()
                    .filter(|n| matches!(n.task, Task::Aggregate { agg: Aggregation::Softmax, .. }))
                    .count();
                assert!(softmax_aggregates > 0, "{what}: no softmax aggregation");
                let kernels = ComputationKernels(&comp, &compiled.kernels);
                let cpu = CpuBackend::new().execute(&compiled.graph, &kernels, &ordered).unwrap();
                let interpreted = interpret(&compiled.graph, &kernels, &ordered).unwrap();
                for (k, t) in comp.saved().iter().enumerate() {
                    for (who, got) in [("cpu", &cpu[k]), ("interpreter", &interpreted[k])] {
                        let err = scaled_error(got, &reference[t], 1.0);
                        assert!(err <= 1e-5, "{what}: {who} output {k} error {err}");
                    }
                }
                runs += 1;
            }
        }
    }
    assert!(runs >= 10, "{runs} runs");
}

//! A RoPE with scaled frequencies (LLaMA 3.1's bands and a YaRN-like attention factor): the
//! CUDA lowering's cos/sin table follows the operator's frequencies, so the emulated lowering
//! matches the CPU reference on every spec over 1, 2 and 4 devices sharing 1 or 2 GPUs.

use std::collections::HashMap;
use std::sync::Arc;

use einsum_compile::{ComputationKernels, NaiveSynthesizer, compile};
use einsum_core::{DType, TensorDesc, scaled_error};
use einsum_cuda::KernelRegistry;
use einsum_cuda::emulate;
use einsum_cuda::lower::lower;
use einsum_joinagg::{Computation, enumerate_specs};
use einsum_ops::Packing;
use einsum_ops::rope::{Rope, RopeFrequencies};
use einsum_sim::Topology;

/// LLaMA 3.1-style frequencies for a head of 8 (theta 10000, factor 8, low/high frequency
/// factors 1 and 4 over an original context of 64: one pair kept, one smoothed, two divided,
/// as transformers' `_compute_llama3_parameters` computes them) with YaRN's attention factor
/// for a factor of 4, so that the lowering's table must use both.
fn scaled_frequencies() -> RopeFrequencies {
    let (factor, old) = (8.0f64, 64.0f64);
    let inv = (0..4)
        .map(|i| {
            let w = 10000f64.powf(-2.0 * i as f64 / 8.0);
            let wavelen = 2.0 * std::f64::consts::PI / w;
            if wavelen < old / 4.0 {
                w
            } else if wavelen > old {
                w / factor
            } else {
                let smooth = (old / wavelen - 1.0) / 3.0;
                (1.0 - smooth) * w / factor + smooth * w
            }
        })
        .collect();
    RopeFrequencies::new(inv, 0.1 * 4f64.ln() + 1.0).unwrap()
}

#[test]
fn the_emulated_lowering_of_a_scaled_rope_matches_the_reference_on_every_spec() {
    let mut runs = 0;
    for (dt, tolerance) in [(DType::F32, 1e-4f32), (DType::BF16, 1e-1)] {
        let x = TensorDesc::of(&[("h", 2), ("s", 6), ("e", 8)], dt).unwrap();
        let op = Rope::with_frequencies(&x, "s", "e", scaled_frequencies(), Packing::new(vec![2, 6]).unwrap()).unwrap();
        let plain = Rope::new(&x, "s", "e", 10000.0, Packing::new(vec![2, 6]).unwrap()).unwrap();
        let mut comp = Computation::new();
        let input = comp.add_input("x", x.clone());
        let out = comp.add_op("rope", Box::new(op), &[input]).unwrap();
        comp.save(out[0]).unwrap();
        let values = comp.random_inputs(3);
        let ins = vec![values[&input].clone()];
        let reference = comp.evaluate(&values).unwrap().remove(&comp.saved()[0]).unwrap();
        // The scaled reference is far from the plain rotation (in f32 by orders of magnitude
        // more than the tolerance): a lowering that ignored the frequencies would fail.
        let unscaled = einsum_joinagg::execute_whole(&plain, &ins).unwrap().remove(0);
        let apart = scaled_error(&unscaled, &reference, 1.0);
        assert!(apart > 0.1, "{dt}: the scaled rope is only {apart} from the plain one");
        let (id, op, _) = comp.ops().next().unwrap();
        for p in [1, 2, 4] {
            for choice in enumerate_specs(op, p).unwrap() {
                let options = einsum_compile::PhysicalOptions {
                    devices: p,
                    synthesizer: Arc::new(NaiveSynthesizer),
                    topology: Topology::preset("dgx-a100").unwrap(),
                    memory_budget: None,
                };
                let c = compile(&comp, &HashMap::from([(id, choice.spec)]), &options).unwrap();
                let lowered =
                    lower(&c.graph, &ComputationKernels(&comp, &c.kernels), &KernelRegistry::default()).unwrap();
                for gpus in [1, 2] {
                    let out = emulate::run(&c.graph, &lowered, gpus, &ins);
                    let err = scaled_error(&out[0], &reference, 1.0);
                    assert!(err <= tolerance, "{dt} p={p} counts {:?} on {gpus} GPUs: error {err}", choice.counts);
                    runs += 1;
                }
            }
        }
    }
    assert!(runs >= 2 * 3 * 2, "only {runs} runs");
}

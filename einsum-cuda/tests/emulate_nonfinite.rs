//! NaN and the infinities on the emulated lowering: every operator's NaNs and infinities land
//! where the CPU reference puts them (NumPy's semantics, see einsum-ops/tests/nonfinite.rs),
//! on one device and split over several, whose partial maxima the aggregation combines.

use std::collections::HashMap;
use std::sync::Arc;

use einsum_compile::{ComputationKernels, NaiveSynthesizer, compile};
use einsum_core::{DType, HostTensor, TensorDesc};
use einsum_cuda::KernelRegistry;
use einsum_cuda::emulate;
use einsum_cuda::lower::lower;
use einsum_joinagg::{AbstractOperator, Computation, enumerate_specs};
use einsum_ops::Packing;
use einsum_ops::attention::{Attention, AttentionConfig};
use einsum_ops::binary::{Binary, BinaryOp};
use einsum_ops::reduce::{Reduce, ReduceOp};
use einsum_ops::softmax::Softmax;
use einsum_ops::unary::{Unary, UnaryOp};
use einsum_sim::Topology;

const NAN: f32 = f32::NAN;
const INF: f32 = f32::INFINITY;

fn desc(dims: &[(&str, usize)]) -> TensorDesc {
    TensorDesc::of(dims, DType::F32).unwrap()
}

/// Emulates `op` on `values` with every spec on 1, 2 and 4 devices and compares with the
/// reference: the same NaNs, the same infinities, finite values within 1e-4. Returns the
/// reference.
fn check(name: &str, op: Box<dyn AbstractOperator>, values: Vec<Vec<f32>>) -> Vec<f32> {
    let mut comp = Computation::new();
    let descs = op.inputs().to_vec();
    let ids: Vec<_> = descs.iter().enumerate().map(|(i, d)| comp.add_input(format!("in{i}"), d.clone())).collect();
    let out = comp.add_op(name, op, &ids).unwrap()[0];
    comp.save(out).unwrap();
    let ins: Vec<HostTensor> =
        descs.iter().zip(values).map(|(d, v)| HostTensor::from_f32(d.tensor_type(), d.dtype, v).unwrap()).collect();
    let by_id = ids.iter().copied().zip(ins.iter().cloned()).collect();
    let want = comp.evaluate(&by_id).unwrap().remove(&out).unwrap().to_f32();
    let (op_id, op, _) = comp.ops().next().unwrap();
    let mut runs = 0;
    for p in [1, 2, 4] {
        let Ok(specs) = enumerate_specs(op, p) else { continue };
        for choice in specs {
            let options = einsum_compile::PhysicalOptions {
                devices: p,
                synthesizer: Arc::new(NaiveSynthesizer),
                topology: Topology::preset("dgx-a100").unwrap(),
                memory_budget: None,
            };
            let c = compile(&comp, &HashMap::from([(op_id, choice.spec.clone())]), &options).unwrap();
            let lowered = lower(&c.graph, &ComputationKernels(&comp, &c.kernels), &KernelRegistry::default()).unwrap();
            let got = emulate::run(&c.graph, &lowered, 1, &ins).remove(0).to_f32();
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                let ok =
                    g == w || (g.is_nan() && w.is_nan()) || (w.is_finite() && (g - w).abs() <= 1e-4 * w.abs().max(1.0));
                assert!(ok, "{name} p={p} counts {:?}: element {i} is {g}, the reference {w}", choice.counts);
            }
            runs += 1;
        }
    }
    assert!(runs > 1, "{name}: {runs} runs");
    want
}

#[test]
fn relu_and_max_keep_nan() {
    let x = desc(&[("i", 4), ("j", 2)]);
    let a = vec![NAN, -1.0, 2.0, -INF, INF, 0.5, -2.0, NAN];
    let want = check("relu", Box::new(Unary::new(&x, UnaryOp::Relu).unwrap()), vec![a.clone()]);
    assert!(want[0].is_nan() && want[7].is_nan() && want[3] == 0.0 && want[4] == INF, "{want:?}");
    let b = vec![1.0, NAN, NAN, 3.0, -INF, 0.25, -3.0, 1.0];
    let want = check("max", Box::new(Binary::new(&x, &x, BinaryOp::Max).unwrap()), vec![a, b]);
    assert_eq!(want.iter().filter(|v| v.is_nan()).count(), 4, "{want:?}");
}

#[test]
fn reduce_max_keeps_nan_across_partial_maxima() {
    // Splitting the reduced index t makes partial maxima that the aggregation combines: a
    // NaN in any part must reach the result.
    let x = desc(&[("t", 8), ("d", 3)]);
    let mut v: Vec<f32> = (0..24).map(|i| i as f32 - 12.0).collect();
    v[3 * 3] = NAN; // d = 0, t = 3
    v[7 * 3 + 1] = INF; // d = 1, t = 7
    for t in 0..8 {
        v[t * 3 + 2] = -INF; // d = 2: all -inf
    }
    let want = check("reduce-max", Box::new(Reduce::new(&x, &["t"], ReduceOp::Max).unwrap()), vec![v]);
    assert!(want[0].is_nan() && want[1] == INF && want[2] == -INF, "{want:?}");
}

#[test]
fn softmax_rows_with_nan_or_inf_are_nan() {
    let x = desc(&[("r", 4), ("k", 5)]);
    let mut v: Vec<f32> = (0..20).map(|i| i as f32 / 7.0).collect();
    v[6] = NAN; // row 1
    v[12] = INF; // row 2
    v[15] = -INF; // row 3: weight 0
    let want = check("softmax", Box::new(Softmax::new(&x, "k").unwrap()), vec![v]);
    assert!(want[5..15].iter().all(|v| v.is_nan()) && want[15] == 0.0, "{want:?}");
    assert!(want[..5].iter().chain(&want[16..]).all(|v| v.is_finite()), "{want:?}");
}

#[test]
fn attention_on_cuda_cores_adds_only_the_keys_a_query_sees() {
    // f32 takes the CUDA-core kernel. Causal over 6 positions: a NaN value at key 3 reaches
    // queries 3.. only; a NaN query makes its row NaN.
    let (s, d) = (6, 4);
    let q = desc(&[("h", 2), ("s", s), ("e", d)]);
    let kv = desc(&[("g", 1), ("s", s), ("e", d)]);
    let op = Attention::new(&q, &kv, &kv, AttentionConfig::new(true, Packing::single(s))).unwrap();
    let mut qv: Vec<f32> = (0..2 * s * d).map(|i| ((i * 7) % 11) as f32 / 11.0).collect();
    qv[(s + 1) * d] = NAN; // head 1, query 1
    let kvals: Vec<f32> = (0..s * d).map(|i| ((i * 5) % 13) as f32 / 13.0).collect();
    let mut vvals: Vec<f32> = (0..s * d).map(|i| i as f32 / 3.0).collect();
    vvals[3 * d + 2] = NAN;
    let want = check("attention", Box::new(op), vec![qv, kvals, vvals]);
    for h in 0..2 {
        for i in 0..s {
            let row = &want[(h * s + i) * d..][..d];
            let nan: Vec<bool> = row.iter().map(|v| v.is_nan()).collect();
            let expect: Vec<bool> = (0..d).map(|e| (h == 1 && i == 1) || (i >= 3 && e == 2)).collect();
            assert_eq!(nan, expect, "head {h} query {i}: {row:?}");
        }
    }
}

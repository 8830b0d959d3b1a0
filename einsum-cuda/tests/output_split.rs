//! RMSNorm split along its normalised index on the output only (each function reads whole
//! rows of `x`, the weight's slice, and writes its slice of the rows): the lowering launches
//! `rmsnorm_slice` for such a block (whole output rows still launch `rmsnorm`, unchanged),
//! the fusion pass leaves a binary and such a norm apart, and the emulated plans compute
//! what the CPU reference does, and in f32 what the unsplit plan's emulation does to the bit.

use std::collections::HashMap;
use std::sync::Arc;

use einsum_compile::{Compiled, ComputationKernels, NaiveSynthesizer, compile};
use einsum_core::{DType, HostTensor, TensorDesc, scaled_error};
use einsum_cuda::KernelRegistry;
use einsum_cuda::emulate;
use einsum_cuda::fusion::fuse;
use einsum_cuda::lower::{Lowered, lower};
use einsum_cuda::work::{Op, RowKernel, Rows};
use einsum_joinagg::{Computation, JoinAggSpec, OpId, TensorId, enumerate_specs};
use einsum_ops::binary::{Binary, BinaryOp};
use einsum_ops::rmsnorm::RmsNorm;
use einsum_sim::Topology;

fn desc(dims: &[(&str, usize)], dtype: DType) -> TensorDesc {
    TensorDesc::of(dims, dtype).unwrap()
}

fn tolerance(dt: DType) -> f32 {
    match dt {
        DType::F32 => 1e-5,
        DType::F16 => 2e-2,
        _ => 1e-1,
    }
}

/// `rmsnorm(x, w)` over `axis` of `x`.
fn rmsnorm(c: &mut Computation, x: TensorId, w: TensorId, axis: &str) -> TensorId {
    let op = RmsNorm::new(c.desc(x).unwrap(), c.desc(w).unwrap(), axis, 1e-5).unwrap();
    c.add_op("norm", Box::new(op), &[x, w]).unwrap()[0]
}

fn binary(c: &mut Computation, name: &str, a: TensorId, b: TensorId, op: BinaryOp) -> TensorId {
    let op = Binary::new(c.desc(a).unwrap(), c.desc(b).unwrap(), op).unwrap();
    c.add_op(name, Box::new(op), &[a, b]).unwrap()[0]
}

/// Compiles `comp` on `p` devices with the given spec of every operator.
fn compiled(comp: &Computation, p: usize, specs: HashMap<OpId, JoinAggSpec>) -> Compiled {
    let options = einsum_compile::PhysicalOptions {
        devices: p,
        synthesizer: Arc::new(NaiveSynthesizer),
        topology: Topology::preset("dgx-a100").unwrap(),
        memory_budget: None,
    };
    compile(comp, &specs, &options).unwrap()
}

/// Every combination of the operators' specs on `p` devices.
fn spec_combinations(comp: &Computation, p: usize) -> Vec<HashMap<OpId, JoinAggSpec>> {
    let mut out = vec![HashMap::new()];
    for (id, op, _) in comp.ops() {
        let choices = enumerate_specs(op, p).unwrap();
        out = out
            .into_iter()
            .flat_map(|m| {
                choices.iter().map(move |c| {
                    let mut m = m.clone();
                    m.insert(id, c.spec.clone());
                    m
                })
            })
            .collect();
    }
    out
}

/// The inputs in the computation's order and the reference value of its first saved tensor.
fn inputs(comp: &Computation, seed: u64) -> (Vec<HostTensor>, HostTensor) {
    let values = comp.random_inputs(seed);
    let ordered = comp.inputs().iter().map(|t| values[t].clone()).collect();
    let reference = comp.evaluate(&values).unwrap().remove(&comp.saved()[0]).unwrap();
    (ordered, reference)
}

/// The RMSNorm row launches of `lowered`.
fn row_ops(lowered: &Lowered) -> Vec<&Rows> {
    lowered
        .ops
        .iter()
        .flatten()
        .filter_map(|o| match o {
            Op::Rows(r) => Some(r),
            _ => None,
        })
        .collect()
}

/// `x`'s dimensions, the normalised index and its extent.
type Shape = (&'static [(&'static str, usize)], &'static str, usize);

/// `rmsnorm` of `x: [tokens=1, d_model=64]` (and of a `[t=3, d=16, b=2]` block normalised over
/// its middle index, strided rows) on 2 and 4 devices: the only spec splits the normalised
/// index on the output, each device launches `rmsnorm_slice` on whole rows of `x` writing
/// its slice, and the emulated output matches the CPU reference, in f32 bit for bit what
/// the one-device plan (one `rmsnorm` over whole rows) emulates.
#[test]
fn an_output_split_rmsnorm_writes_slices_of_whole_rows() {
    let shapes: [Shape; 2] =
        [(&[("tokens", 1), ("d_model", 64)], "d_model", 64), (&[("t", 3), ("d", 16), ("b", 2)], "d", 16)];
    for dt in [DType::F32, DType::F16, DType::BF16] {
        for (dims, axis, n) in shapes {
            let mut comp = Computation::new();
            let x = comp.add_input("x", desc(dims, dt));
            let w = comp.add_input("w", desc(&[(axis, n)], dt));
            let y = rmsnorm(&mut comp, x, w, axis);
            comp.save(y).unwrap();
            let (ins, reference) = inputs(&comp, 7);
            let one = compiled(&comp, 1, spec_combinations(&comp, 1).remove(0));
            let one_kernels = ComputationKernels(&comp, &one.kernels);
            let one_lowered = lower(&one.graph, &one_kernels, &KernelRegistry::default()).unwrap();
            assert!(matches!(row_ops(&one_lowered)[..], [Rows { slice: None, kernel: RowKernel::RmsNorm, .. }]));
            let whole = emulate::run(&one.graph, &one_lowered, 1, &ins);
            for p in [2, 4] {
                let combos = spec_combinations(&comp, p);
                if dims.len() == 2 {
                    // One token: splitting d_model on the output is the only spec.
                    assert_eq!(combos.len(), 1, "{dt} p={p}");
                }
                let mut sliced = 0;
                for specs in combos {
                    let c = compiled(&comp, p, specs);
                    let kernels = ComputationKernels(&comp, &c.kernels);
                    let lowered = lower(&c.graph, &kernels, &KernelRegistry::default())
                        .unwrap_or_else(|e| panic!("{dt} p={p}: {e}"));
                    for r in row_ops(&lowered) {
                        assert_eq!(r.n, n);
                        if let Some((lo, hi)) = r.slice {
                            assert!(lo < hi && hi - lo < n && hi <= n, "{r:?}");
                            sliced += 1;
                        }
                    }
                    for gpus in [1, 2] {
                        let out = emulate::run(&c.graph, &lowered, gpus, &ins);
                        let err = scaled_error(&out[0], &reference, 1.0);
                        assert!(err <= tolerance(dt), "{dims:?} {dt} p={p} on {gpus} GPUs: error {err}");
                        if dt == DType::F32 {
                            assert_eq!(out, whole, "{dims:?} p={p}: the slices differ from the whole rows");
                        }
                    }
                }
                assert!(sliced >= p, "{dims:?} {dt} p={p}: {sliced} sliced launches");
            }
        }
    }
}

/// A residual add then its RMSNorm over one token on 4 devices (its sum read again or not):
/// every spec of the norm splits d_model on the output, so any plan, the planner's too,
/// writes slices. The fusion pass leaves the add and the sliced norm apart (the fused kernel
/// writes whole rows), the norm lowers to `rmsnorm_slice`, and the fused graph's emulation
/// matches the CPU reference.
#[test]
fn a_residual_add_and_an_output_split_rmsnorm_run_unfused() {
    for dt in [DType::F32, DType::BF16] {
        for reused in [false, true] {
            let mut comp = Computation::new();
            let x = desc(&[("tokens", 1), ("d_model", 64)], dt);
            let (a, b) = (comp.add_input("a", x.clone()), comp.add_input("b", x));
            let w = comp.add_input("w", desc(&[("d_model", 64)], dt));
            let s = binary(&mut comp, "sum", a, b, BinaryOp::Add);
            let y = rmsnorm(&mut comp, s, w, "d_model");
            let out = if reused { binary(&mut comp, "residual", s, y, BinaryOp::Add) } else { y };
            comp.save(out).unwrap();
            let (ins, reference) = inputs(&comp, 9);
            let (_, norm, _) = comp.ops().find(|(_, op, _)| op.kind() == "rmsnorm").unwrap();
            for choice in enumerate_specs(norm, 4).unwrap() {
                for f in &choice.spec.functions {
                    assert_eq!(f.inputs[0].dim(1).len(), 64);
                    assert_eq!(f.outputs[0].dim(1).len(), 16, "{}", f.outputs[0]);
                }
            }
            for specs in spec_combinations(&comp, 4) {
                let c = compiled(&comp, 4, specs);
                let kernels = ComputationKernels(&comp, &c.kernels);
                let f = fuse(&c.graph, &kernels).unwrap();
                assert_eq!(f.fused(), 0, "{dt} reused {reused}: a sliced norm was fused");
                let lowered = lower(&f.graph, &f.kernels, &KernelRegistry::default())
                    .unwrap_or_else(|e| panic!("{dt} reused {reused}: {e}"));
                assert!(!lowered.ops.iter().flatten().any(|o| matches!(o, Op::BinaryRmsNorm(_))));
                let rows = row_ops(&lowered);
                assert_eq!(rows.len(), 4);
                assert!(rows.iter().all(|r| matches!(r.slice, Some((lo, hi)) if hi - lo == 16 && lo % 16 == 0)));
                for gpus in [1, 2] {
                    let out = emulate::run(&f.graph, &lowered, gpus, &ins);
                    let err = scaled_error(&out[0], &reference, 1.0);
                    assert!(err <= tolerance(dt), "{dt} reused {reused} on {gpus} GPUs: error {err}");
                }
            }
        }
    }
}

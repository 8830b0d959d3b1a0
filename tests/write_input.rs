//! Writing part of a loaded input in place (`Executable::write_input`): a key-value cache
//! resident on 4 CPU devices gets a new row, and the next run gives the outputs of a fresh
//! load of the overwritten cache.

use einsum_core::{HostTensor, TensorType, taskgraph::Task};
use einsummable::{CompileOptions, DType, Error, Graph, Tensor, compile};

const HEADS: usize = 4;
const SEQ: usize = 16;
const D: usize = 8;

/// One attention step against a cache: `scores[h,s] = Σ_e q[h,e]·k[h,s,e]`, `out[h,e] =
/// Σ_s scores[h,s]·v[h,s,e]`.
fn attention() -> (Graph, [Tensor; 4]) {
    let mut g = Graph::new();
    let q = g.input("q", &[("h", HEADS), ("e", D)], DType::F32).unwrap();
    let k = g.input("k", &[("h", HEADS), ("s", SEQ), ("e", D)], DType::F32).unwrap();
    let v = g.input("v", &[("h", HEADS), ("s", SEQ), ("e", D)], DType::F32).unwrap();
    let scores = g.einsum("he,hse->hs", &[q, k]).unwrap();
    let out = g.einsum("hs,hse->he", &[scores, v]).unwrap();
    g.save(out).unwrap();
    (g, [q, k, v, out])
}

/// The cache's row `s` (every head, every element of it).
fn row(s: usize, seed: u64) -> HostTensor {
    HostTensor::random(TensorType::new(&[0, s, 0], &[HEADS, s + 1, D]).unwrap(), DType::F32, seed)
}

/// load → execute → write_input (a row of k and of v, twice) → execute gives, bit for bit,
/// what loading the overwritten whole cache gives, and the kept values are the
/// overwritten ones.
#[test]
fn a_written_row_runs_as_a_fresh_load_of_the_overwritten_cache() {
    let (g, [q, k, v, out]) = attention();
    let mut exe = compile(&g, &CompileOptions::new().devices(4)).unwrap();
    let loads = exe.compiled().graph.nodes().iter().filter(|n| matches!(n.task, Task::Load { .. })).count();
    assert!(loads > 3, "the plan splits or replicates the inputs ({loads} loads)");
    let ty = |t: Tensor| g.desc(t).unwrap().tensor_type();
    let (qv, mut kv, mut vv) = (
        HostTensor::random(ty(q), DType::F32, 1),
        HostTensor::random(ty(k), DType::F32, 2),
        HostTensor::random(ty(v), DType::F32, 3),
    );
    exe.load(q, qv.clone()).unwrap();
    exe.load(k, kv.clone()).unwrap();
    exe.load(v, vv.clone()).unwrap();
    exe.execute().unwrap();
    let before = exe.offload(out).unwrap();
    for (step, s) in [5, 11].into_iter().enumerate() {
        let seed = 10 * (step as u64 + 1);
        let (krow, vrow) = (row(s, seed), row(s, seed + 1));
        exe.write_input(k, krow.clone()).unwrap();
        exe.write_input(v, vrow.clone()).unwrap();
        kv.overwrite(&krow).unwrap();
        vv.overwrite(&vrow).unwrap();
        exe.execute().unwrap();
        let written = exe.offload(out).unwrap();
        assert_ne!(written, before);

        let kept = exe.loaded_inputs();
        assert_eq!(kept[&g.own_tensor(k).unwrap()], kv);
        assert_eq!(kept[&g.own_tensor(v).unwrap()], vv);

        let mut fresh = compile(&g, &CompileOptions::new().devices(4)).unwrap();
        fresh.load(q, qv.clone()).unwrap();
        fresh.load(k, kv.clone()).unwrap();
        fresh.load(v, vv.clone()).unwrap();
        fresh.execute().unwrap();
        assert_eq!(fresh.offload(out).unwrap(), written, "after writing row {s}");
    }
}

/// A tensor that is not an input, an input not loaded, a part outside the input and a part
/// of another dtype are usage errors naming what is wrong.
#[test]
fn a_write_is_checked() {
    let (g, [q, k, _, out]) = attention();
    let mut exe = compile(&g, &CompileOptions::new().devices(4)).unwrap();
    let usage = |r: einsummable::Result<()>| match r {
        Err(Error::Usage(m)) => m,
        other => panic!("expected a usage error, got {other:?}"),
    };
    let m = usage(exe.write_input(k, row(0, 1)));
    assert!(m.contains("`k`") && m.contains("not loaded"), "{m}");
    exe.load_random(1).unwrap();
    let m = usage(exe.write_input(out, row(0, 1)));
    assert!(m.contains("not an input") && m.contains("cannot be written"), "{m}");
    let m = usage(exe.write_input(q, row(0, 1)));
    assert!(m.contains("`q`"), "{m}");
    let outside = HostTensor::random(TensorType::new(&[0, SEQ, 0], &[HEADS, SEQ + 1, D]).unwrap(), DType::F32, 1);
    let m = usage(exe.write_input(k, outside));
    assert!(m.contains("`k`") && m.contains("not a part"), "{m}");
    let m = usage(exe.write_input(k, row(0, 1).cast(DType::F16)));
    assert!(m.contains("`k`") && m.contains("f16"), "{m}");
    assert!(exe.write_input(k, row(0, 1)).is_ok());
}

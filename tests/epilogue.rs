//! Elementwise chains fused into the einsum producing their input (`rewrite::epilogue`):
//! the fused graph computes the written outputs bit for bit on random inputs (a proptest over
//! einsums and chains), a wrong fusion does not, a chain that is saved, read twice or
//! broadcast is left as written, and a LLaMA block runs fused on the CPU backend at p = 1, 2
//! and 8 and passes its check against the written graph's reference.

use std::collections::HashMap;

use einsum_ops::binary::BinaryOp;
use einsum_ops::einsum::Einsum;
use einsum_ops::epilogue::{Epilogue, Stage};
use einsum_ops::unary::UnaryOp;
use einsum_sim::Topology;
use einsummable::rewrite::{Change, Fuse, Rules, epilogue};
use einsummable::{CompileOptions, DType, Graph, HostTensor, Workload, compile};

/// The saved outputs of `g` on random inputs drawn by input name (so two graphs with the same
/// inputs get the same values), by name.
fn outputs(g: &Graph, seed: u64) -> HashMap<String, HostTensor> {
    let comp = g.computation();
    let mut names: Vec<(String, einsum_joinagg::TensorId)> =
        comp.inputs().into_iter().map(|t| (comp.tensor_name(t), t)).collect();
    names.sort();
    let values = names
        .iter()
        .enumerate()
        .map(|(i, (_, t))| {
            let desc = comp.desc(*t).unwrap();
            (*t, HostTensor::random(desc.tensor_type(), desc.dtype, seed + i as u64))
        })
        .collect();
    let out = comp.evaluate(&values).unwrap();
    comp.saved().iter().map(|t| (comp.tensor_name(*t), out[t].clone())).collect()
}

/// `g` with every epilogue site fused, and the sites.
fn fused(g: &Graph) -> (Graph, Vec<epilogue::Site>) {
    let sites = Fuse::epilogues().sites(g.computation());
    (epilogue::fused(g.computation(), &sites).unwrap(), sites)
}

const UNARIES: [UnaryOp; 5] = [UnaryOp::Silu, UnaryOp::Gelu, UnaryOp::Relu, UnaryOp::Tanh, UnaryOp::Scale(0.5)];
const BINARIES: [BinaryOp; 4] = [BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Max];

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 32, ..Default::default() })]

    /// An einsum (its result's indices in either order) followed by a chain of one to four
    /// unaries and aligned binaries (the running result on either side), saved at its end:
    /// fused into one operator, it computes the written outputs bit for bit in f32 and bf16.
    #[test]
    fn a_fused_chain_computes_the_written_outputs(
        (t, d, f) in (1usize..9, 1usize..9, 1usize..9),
        transposed in proptest::bool::ANY,
        stages in proptest::collection::vec((0usize..9, proptest::bool::ANY), 1..5),
        bf16 in proptest::bool::ANY,
    ) {
        let dtype = if bf16 { DType::BF16 } else { DType::F32 };
        let mut g = Graph::new();
        let x = g.input("x", &[("t", t), ("d", d)], dtype).unwrap();
        let w = g.input("w", &[("d", d), ("f", f)], dtype).unwrap();
        let mut y = g.einsum(if transposed { "td,df->ft" } else { "td,df->tf" }, &[x, w]).unwrap();
        let dims: &[(&str, usize)] = if transposed { &[("f", f), ("t", t)] } else { &[("t", t), ("f", f)] };
        for (i, &(k, first)) in stages.iter().enumerate() {
            y = if k < UNARIES.len() {
                g.unary(y, UNARIES[k]).unwrap()
            } else {
                let other = g.input(&format!("b{i}"), dims, dtype).unwrap();
                let op = BINARIES[k - UNARIES.len()];
                if first { g.binary(y, other, op).unwrap() } else { g.binary(other, y, op).unwrap() }
            };
        }
        g.save_as(y, "y").unwrap();
        let (form, sites) = fused(&g);
        proptest::prop_assert_eq!(sites.len(), 1);
        proptest::prop_assert_eq!(sites[0].ops.len(), stages.len());
        // One operator: the fused einsum.
        let ops = form.computation().topo_order().into_iter()
            .filter(|&op| matches!(form.computation().node(op), Some(einsum_joinagg::Node::Op { .. })))
            .count();
        proptest::prop_assert_eq!(ops, 1);
        proptest::prop_assert_eq!(outputs(&form, 3), outputs(&g, 3));
    }
}

/// A fusion with the operands of a subtraction swapped, or a residual added before the
/// activation instead of after, is caught: the check above can fail.
#[test]
fn a_wrong_fusion_fails_the_check() {
    let mut g = Graph::new();
    let x = g.input("x", &[("t", 4), ("d", 6)], DType::F32).unwrap();
    let w = g.input("w", &[("d", 6), ("f", 5)], DType::F32).unwrap();
    let r = g.input("r", &[("t", 4), ("f", 5)], DType::F32).unwrap();
    let y = g.matmul(x, w).unwrap();
    let s = g.binary(r, y, BinaryOp::Sub).unwrap();
    let z = g.unary(s, UnaryOp::Silu).unwrap();
    g.save_as(z, "z").unwrap();
    let (form, _) = fused(&g);
    assert_eq!(outputs(&form, 1), outputs(&g, 1));
    let desc = |t| g.desc(t).unwrap().clone();
    let (dx, dw, dr) = (desc(x), desc(w), desc(r));
    let wrongs = [
        vec![Stage::Binary { op: BinaryOp::Sub, operand: dr.clone(), result_first: true }, Stage::Unary(UnaryOp::Silu)],
        vec![
            Stage::Unary(UnaryOp::Silu),
            Stage::Binary { op: BinaryOp::Sub, operand: dr.clone(), result_first: false },
        ],
    ];
    for stages in wrongs {
        let mut wrong = Graph::new();
        let x = wrong.input("x", &[("t", 4), ("d", 6)], DType::F32).unwrap();
        let w = wrong.input("w", &[("d", 6), ("f", 5)], DType::F32).unwrap();
        let r = wrong.input("r", &[("t", 4), ("f", 5)], DType::F32).unwrap();
        let einsum = Einsum::matmul(&dx, &dw).unwrap();
        let op = Epilogue::new(einsum, stages.clone()).unwrap();
        let z = wrong.op(Box::new(op), &[x, w, r]).unwrap()[0];
        wrong.save_as(z, "z").unwrap();
        let (got, want) = (outputs(&wrong, 1), outputs(&g, 1));
        let err = einsum_core::scaled_error(&got["z"], &want["z"], 1e-3);
        assert!(err > 1e-2, "{stages:?} passes: {err}");
    }
}

/// A chain stops before a result that is saved or read twice, and at a binary that
/// broadcasts or reads the result on both sides; an einsum read only so is no site.
#[test]
fn saved_shared_and_broadcast_results_end_the_chain() {
    let mut g = Graph::new();
    let x = g.input("x", &[("t", 4), ("d", 6)], DType::F32).unwrap();
    let w = g.input("w", &[("d", 6), ("f", 5)], DType::F32).unwrap();
    let bias = g.input("bias", &[("f", 5)], DType::F32).unwrap();
    // Saved after one stage: the chain is that stage.
    let a = g.matmul(x, w).unwrap();
    let a1 = g.unary(a, UnaryOp::Relu).unwrap();
    let a2 = g.unary(a1, UnaryOp::Neg).unwrap();
    g.save_as(a1, "a1").unwrap();
    g.save_as(a2, "a2").unwrap();
    // Read twice: no site.
    let b = g.matmul(x, w).unwrap();
    let b2 = g.binary(b, b, BinaryOp::Mul).unwrap();
    g.save_as(b2, "b2").unwrap();
    // A broadcast bias: no site.
    let c = g.matmul(x, w).unwrap();
    let c2 = g.binary(c, bias, BinaryOp::Add).unwrap();
    g.save_as(c2, "c2").unwrap();
    // The einsum's own result saved: no site.
    let d = g.matmul(x, w).unwrap();
    let d2 = g.unary(d, UnaryOp::Exp).unwrap();
    g.save_as(d, "d").unwrap();
    g.save_as(d2, "d2").unwrap();
    let (form, sites) = fused(&g);
    assert_eq!(sites.len(), 1, "{sites:?}");
    assert_eq!(sites[0].describe(g.computation()), "`matmul #1` then relu");
    assert_eq!(outputs(&form, 2), outputs(&g, 2));
}

fn options(devices: usize) -> CompileOptions {
    CompileOptions::new().devices(devices).topology(Topology::preset("dgx-a100").unwrap())
}

/// A LLaMA block of small dimensions (f32) planned with only the epilogue rule on: at p = 1,
/// 2 and 8 the form kept fuses its chains (SiLU and the gate's product, both residual
/// adds), runs on the CPU backend and passes its check against the written graph's
/// single-device reference; with `--rewrites off` nothing is fused.
#[test]
fn a_fused_llama_block_runs_and_passes_its_check() {
    use einsummable::check::{compare_with_reference, computation_tolerance};
    let g = Workload::parse("llama-block:tokens=32,seqs=2,d_model=32,heads_q=4,heads_kv=2,d_head=8,d_ff=48")
        .unwrap()
        .build(DType::F32)
        .unwrap();
    let tolerance = computation_tolerance(g.computation());
    let only_epilogues =
        Rules { contraction: Vec::new(), orders: None, transposes: None, merges: Vec::new(), ..Rules::default() };
    for devices in [1, 2, 8] {
        let mut exe = compile(&g, &options(devices).rewrites(true).rules(only_epilogues.clone())).expect("compiles");
        let fused: Vec<&Change> = exe.rewrites().expect("weighed").iter().filter(|c| !c.as_written()).collect();
        assert!(fused.iter().all(|c| c.rule == "epilogue"), "{fused:?}");
        assert_eq!(fused.len(), 3, "p = {devices}: {fused:?}");
        assert!(exe.plan().ops.iter().any(|o| o.name.starts_with("einsum-epilogue")), "p = {devices}");
        exe.load_random(5).unwrap();
        exe.execute().unwrap();
        let check = compare_with_reference(&exe).expect("a reference");
        assert!(check.passes(tolerance), "p = {devices}: error {}", check.max_error);
        let off = compile(&g, &options(devices).rewrites(false)).unwrap();
        assert!(off.rewrites().is_none());
        assert!(exe.predicted_ms() < off.predicted_ms(), "p = {devices}: fusion kept though not faster");
    }
}

//! The forms of a graph under the contraction rules (`einsummable::rewrite`): every form
//! computes the written graph's outputs; on the paper's chains B and C the best form planned
//! on 8 devices predicts as fast as the best of every association planned; a low-rank product
//! written `x·(A·B)` is reordered and predicts much faster.

use std::collections::HashMap;

use einsum_sim::Topology;
use einsummable::rewrite::{Form, default_forms};
use einsummable::{CompileOptions, DType, Graph, HostTensor, Tensor, Workload, compile};

/// Options that plan each form as it is (the comparisons below weigh the forms themselves).
fn options(devices: usize) -> CompileOptions {
    CompileOptions::new().devices(devices).topology(Topology::preset("dgx-a100").expect("a preset")).rewrites(false)
}

/// The predicted time of `g`'s plan, or infinity where no plan fits the devices' memory (a
/// form with an outer product, say).
fn predicted(g: &Graph, devices: usize) -> f64 {
    match compile(g, &options(devices)) {
        Ok(exe) => exe.predicted_ms(),
        Err(einsummable::Error::Compile(einsum_compile::CompileError::OutOfMemory { .. })) => f64::INFINITY,
        Err(e) => panic!("{e}"),
    }
}

/// The saved outputs of `g` on seeded random inputs, by name.
fn outputs(g: &Graph, seed: u64) -> HashMap<String, HostTensor> {
    let comp = g.computation();
    // Inputs drawn by name, so that two graphs with the same inputs get the same values.
    let mut by_name: Vec<(String, einsum_joinagg::TensorId)> =
        comp.inputs().into_iter().map(|t| (comp.tensor_name(t), t)).collect();
    by_name.sort();
    let values: HashMap<_, _> = by_name
        .iter()
        .enumerate()
        .map(|(i, (_, t))| {
            let desc = comp.desc(*t).expect("an input");
            (*t, HostTensor::random(desc.tensor_type(), desc.dtype, seed + i as u64))
        })
        .collect();
    let out = comp.evaluate(&values).expect("evaluates");
    comp.saved().iter().map(|t| (comp.tensor_name(*t), out[t].clone())).collect()
}

/// The chain of `dims` multiplied in the association `tree` gives, as a graph.
fn chain_as(dims: &[usize], tree: &einsum_rewrite::Tree) -> Graph {
    let mut g = Graph::new();
    let mats: Vec<Tensor> = (1..dims.len())
        .map(|i| {
            g.input(&format!("M{i}"), &[(&format!("d{}", i - 1), dims[i - 1]), (&format!("d{i}"), dims[i])], DType::F32)
                .expect("an input")
        })
        .collect();
    fn build(g: &mut Graph, mats: &[Tensor], t: &einsum_rewrite::Tree) -> Tensor {
        match t {
            einsum_rewrite::Tree::Leaf(n) => mats[*n],
            einsum_rewrite::Tree::Contract(a, b) => {
                let (a, b) = (build(g, mats, a), build(g, mats, b));
                g.matmul(a, b).expect("a product")
            }
        }
    }
    let product = build(&mut g, &mats, tree);
    g.save_as(product, "product").expect("saved");
    g
}

#[test]
fn every_form_computes_the_written_outputs() {
    for w in ["chain-b:scale=512", "chain-c:scale=512", "chain-a:scale=1024"] {
        let g = Workload::parse(w).unwrap().build(DType::F32).unwrap();
        let want = outputs(&g, 3);
        let forms = default_forms(&g.snapshot(), 6).expect("forms");
        assert!(forms.len() > 1, "{w}: only the written form");
        assert_eq!(
            forms[0].changes.iter().map(|c| &c.written).collect::<Vec<_>>(),
            forms[0].changes.iter().map(|c| &c.chosen).collect::<Vec<_>>()
        );
        for Form { graph, changes } in &forms {
            let got = outputs(graph, 3);
            for (name, w_) in &want {
                let err = einsum_core::scaled_error(&got[name], w_, 1.0);
                assert!(err < 1e-4, "{w} as {changes:?}: `{name}` off by {err}");
            }
        }
    }
}

/// Chains B (5 matrices) and C (3) at p = 8, written as the paper writes them and in their
/// costliest association: the best of the forms, each planned, predicts the best time of
/// every association planned; the association chosen is printed.
#[test]
fn on_chains_b_and_c_the_best_form_is_the_best_association() {
    for (w, dims) in
        [("chain-b", vec![9216, 20480, 5120, 20480, 5120, 9216]), ("chain-c", vec![10240, 12288, 32768, 2048])]
    {
        let all: Vec<(f64, einsum_rewrite::Tree)> = einsum_rewrite::Tree::associations(0, dims.len() - 1)
            .into_iter()
            .map(|t| (predicted(&chain_as(&dims, &t), 8), t))
            .collect();
        let exhaustive = all.iter().map(|a| a.0).fold(f64::INFINITY, f64::min);
        let worst =
            all.iter().filter(|a| a.0.is_finite()).max_by(|a, b| a.0.total_cmp(&b.0)).expect("one fits").1.clone();
        let paper = Workload::parse(w).unwrap().build(DType::F32).unwrap();
        for (written, g) in
            [("as the paper writes it", paper), ("in its costliest association", chain_as(&dims, &worst))]
        {
            let forms = default_forms(&g.snapshot(), 8).expect("forms");
            let timed: Vec<(f64, String)> = forms
                .iter()
                .map(|f| (predicted(&f.graph, 8), f.changes.iter().map(|c| c.chosen.clone()).collect()))
                .collect();
            let (best, chosen) = timed.iter().cloned().min_by(|a, b| a.0.total_cmp(&b.0)).expect("forms");
            println!(
                "{w} {written}: {:.3} ms; chosen {chosen}: {best:.3} ms; best association {exhaustive:.3} ms",
                timed[0].0
            );
            assert!(best <= exhaustive * (1.0 + 1e-9), "{w} {written}: {best} against {exhaustive}");
        }
    }
}

/// `x·(A·B)` with a rank-16 `A·B` (a merged LoRA adapter as often written): reordered to
/// `(x·A)·B`, at least twice as fast predicted on 4 devices.
#[test]
fn a_low_rank_product_written_in_a_costly_order_is_reordered() {
    let mut g = Graph::new();
    let x = g.input("x", &[("tokens", 2048), ("d_model", 8192)], DType::F32).unwrap();
    let a = g.input("A", &[("d_model", 8192), ("rank", 16)], DType::F32).unwrap();
    let b = g.input("B", &[("rank", 16), ("d_out", 8192)], DType::F32).unwrap();
    let ab = g.matmul(a, b).unwrap();
    let y = g.matmul(x, ab).unwrap();
    g.save_as(y, "y").unwrap();
    let forms = default_forms(&g.snapshot(), 4).expect("forms");
    let written = predicted(&forms[0].graph, 4);
    let (best, form) =
        forms.iter().map(|f| (predicted(&f.graph, 4), f)).min_by(|p, q| p.0.total_cmp(&q.0)).expect("forms");
    println!("written {written:.3} ms as {}, best {best:.3} ms as {}", form.changes[0].written, form.changes[0].chosen);
    assert_eq!(form.changes[0].chosen, "((x A) B)");
    assert!(written / best >= 2.0, "{written} against {best}");
}

/// `compile` weighs the forms by default: a chain written in a costly association runs
/// in another form on the CPU backend at p = 1, 2 and 8, and its outputs pass the check
/// against the written graph's single-device reference; with rewrites off it runs as
/// written.
#[test]
fn a_rewritten_graph_runs_and_passes_its_check() {
    use einsum_rewrite::Tree;
    use einsummable::check::{compare_with_reference, computation_tolerance};
    // Thin and wide matrices alternate: right to left, every product is 2048x2048.
    let dims = [16, 2048, 16, 2048, 16, 2048];
    let leaf = |n| Box::new(Tree::Leaf(n));
    let worst = Tree::Contract(
        leaf(0),
        Box::new(Tree::Contract(
            leaf(1),
            Box::new(Tree::Contract(leaf(2), Box::new(Tree::Contract(leaf(3), leaf(4))))),
        )),
    );
    let g = chain_as(&dims, &worst);
    let tolerance = computation_tolerance(g.computation());
    for devices in [1, 2, 8] {
        let mut exe = compile(&g, &options(devices).rewrites(true)).expect("compiles");
        let changes = exe.rewrites().expect("one network weighed").to_vec();
        assert_ne!(changes[0].chosen, changes[0].written, "p = {devices}: the costliest association is kept");
        exe.load_random(5).unwrap();
        exe.execute().unwrap();
        let check = compare_with_reference(&exe).expect("a reference");
        assert!(check.passes(tolerance), "p = {devices}: error {}", check.max_error);
        let as_written = compile(&g, &options(devices)).expect("compiles");
        assert!(as_written.rewrites().is_none());
        assert!(exe.predicted_ms() < as_written.predicted_ms(), "p = {devices}");
    }
}

/// A tree whose first einsum sums a result index early (`ij,jk->k`, then `k,ki->i`) is not
/// the network `Σ A·B·C` the rules reassociate: it is left as written. Keeping the index
/// (`ij,jk->ik`, then `ik,ki->i`) makes it one, and its other form computes the same.
#[test]
fn a_tree_that_sums_early_is_left_as_written() {
    let build = |first: &str, second: &str| {
        let mut g = Graph::new();
        let a = g.input("A", &[("i", 4), ("j", 5)], DType::F32).unwrap();
        let b = g.input("B", &[("j", 5), ("k", 6)], DType::F32).unwrap();
        let c = g.input("C", &[("k", 6), ("i", 4)], DType::F32).unwrap();
        let ab = g.einsum(first, &[a, b]).unwrap();
        let y = g.einsum(second, &[ab, c]).unwrap();
        g.save_as(y, "y").unwrap();
        g
    };
    let early = build("ij,jk->k", "k,ki->i");
    // Left as written: no network, so no form at all.
    assert!(default_forms(&early.snapshot(), 4).unwrap().is_empty(), "left as written");
    let kept = build("ij,jk->ik", "ik,ki->i");
    let forms = default_forms(&kept.snapshot(), 4).unwrap();
    assert!(forms.len() > 1);
    let want = outputs(&kept, 9);
    for f in &forms {
        let err = einsum_core::scaled_error(&outputs(&f.graph, 9)["y"], &want["y"], 1.0);
        assert!(err < 1e-5, "{:?}: {err}", f.changes);
    }
}

//! The forms of a graph under the rewrite rules (`einsummable::rewrite`): every form
//! computes the written graph's outputs; on the paper's chains B and C the best form planned
//! on 8 devices predicts as fast as the best of every association planned; a low-rank product
//! written `x·(A·B)` is reordered and predicts much faster; merged projections compute the
//! written outputs (and a wrong merge does not), and a merged LLaMA block runs and passes its
//! check with its weights loaded separately; a three-operand einsum written in a costly order
//! is reordered, a transposed weight's permute is absorbed, both compute the written outputs
//! (and wrong ones do not).

use std::collections::HashMap;

use einsum_sim::Topology;
use einsummable::rewrite::{Change, Derived, Form, Rules, default_forms};
use einsummable::{CompileOptions, DType, Graph, HostTensor, Tensor, TensorType, Workload, compile};

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
        for Form { graph, changes, .. } in &forms {
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

/// Priced on a machine (`Rules::machine`), extraction weighs the bytes of the parts and
/// results too: the chain of `M1` 1x3, `M2` 3x10 and `M3` 10x3 written `M1 (M2 M3)` costs
/// more flops than `(M1 M2) M3` (2·99 against 2·60) but moves fewer elements (its
/// intermediate is 3x3, the other's 1x10, and on a DGX A100 in f32 an element costs ~50
/// flops): with flops alone the other form is the cheapest and is weighed; priced on the
/// machine the written form is the cheapest, and no other is weighed.
#[test]
fn a_machine_prices_the_bytes_a_form_moves() {
    use einsum_rewrite::Tree;
    let leaf = |n| Box::new(Tree::Leaf(n));
    let g = chain_as(&[1, 3, 10, 3], &Tree::Contract(leaf(0), Box::new(Tree::Contract(leaf(1), leaf(2)))));
    let forms = |machine| {
        let rules = Rules { forms: 2, machine, ..Rules::default() };
        einsummable::rewrite::graph_forms(&g.snapshot(), &rules).unwrap()
    };
    let by_flops = forms(None);
    assert_eq!(by_flops.len(), 2);
    assert_eq!(by_flops[1].changes[0].chosen, "((M1 M2) M3)");
    let machine = einsum_logical::Machine::from_topology(&Topology::preset("dgx-a100").unwrap());
    let priced = forms(Some(machine));
    assert_eq!(priced.len(), 1, "{:?}", priced.iter().map(|f| &f.changes).collect::<Vec<_>>());
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

/// The values of `graph`'s inputs drawn by name with `seed` (every value non-zero: drawn in
/// `[-1, 1)` and moved away from 0).
fn named_values(graph: &Graph, seed: u64) -> HashMap<String, HostTensor> {
    let comp = graph.computation();
    let mut names: Vec<(String, einsum_joinagg::TensorId)> =
        comp.inputs().into_iter().map(|t| (comp.tensor_name(t), t)).collect();
    names.sort();
    names
        .into_iter()
        .enumerate()
        .map(|(i, (name, t))| {
            let desc = comp.desc(t).expect("an input");
            let v = HostTensor::random(desc.tensor_type(), desc.dtype, seed + i as u64);
            let data: Vec<f32> = v.to_f32().into_iter().map(|x| if x < 0.0 { x - 0.1 } else { x + 0.1 }).collect();
            (name, HostTensor::from_f32(desc.tensor_type(), desc.dtype, data).expect("values"))
        })
        .collect()
}

/// `parts` concatenated along `axis`, element by element (independently of the executable's
/// own building of a merged weight).
fn concatenated(parts: &[HostTensor], axis: usize) -> HostTensor {
    let shapes: Vec<Vec<usize>> = parts.iter().map(|p| p.ty().shape()).collect();
    let mut shape = shapes[0].clone();
    shape[axis] = shapes.iter().map(|s| s[axis]).sum();
    let (outer, inner): (usize, usize) = (shape[..axis].iter().product(), shape[axis + 1..].iter().product());
    let mut data = Vec::new();
    for o in 0..outer {
        for (p, s) in parts.iter().zip(&shapes) {
            let values = p.to_f32();
            let run = s[axis] * inner;
            data.extend_from_slice(&values[o * run..(o + 1) * run]);
        }
    }
    HostTensor::from_f32(TensorType::zero_bounded(&shape), parts[0].dtype(), data).expect("concatenated")
}

/// The largest scaled error of `form`'s saved outputs against `written`'s on the same
/// non-zero random inputs (a derived input the concatenation of its parts' values).
fn merged_error(written: &Graph, form: &Graph, derived: &[Derived], seed: u64) -> f32 {
    let values = named_values(written, seed);
    let evaluate = |g: &Graph, values: &HashMap<String, HostTensor>| {
        let comp = g.computation();
        let inputs = comp.inputs().into_iter().map(|t| (t, values[&comp.tensor_name(t)].clone())).collect();
        let out = comp.evaluate(&inputs).expect("evaluates");
        comp.saved().iter().map(|t| (comp.tensor_name(*t), out[t].clone())).collect::<HashMap<_, _>>()
    };
    let want = evaluate(written, &values);
    let mut form_values = values.clone();
    let comp = written.computation();
    for d in derived {
        let parts: Vec<HostTensor> = d.parts.iter().map(|t| values[&comp.tensor_name(*t)].clone()).collect();
        form_values.insert(d.name.clone(), concatenated(&parts, d.axis));
    }
    let got = evaluate(form, &form_values);
    want.iter().map(|(name, w)| einsum_core::scaled_error(&got[name], w, 1e-3)).fold(0.0, f32::max)
}

/// Projections of one activation `x` (`tokens` x `d_model`), one per entry of `features`
/// (its extent; all called `f` where `same_name`, else `f0`, `f1`, ...), each with a second
/// output index `h`; the weight is the einsum's second operand or (`weight_first`) its first.
/// Each result is saved through a negation.
fn projections(
    tokens: usize,
    d_model: usize,
    h: usize,
    features: &[usize],
    same_name: bool,
    weight_first: bool,
) -> Graph {
    let mut g = Graph::new();
    let x = g.input("x", &[("tokens", tokens), ("d_model", d_model)], DType::F32).unwrap();
    let x = g.unary(x, einsummable::UnaryOp::Silu).unwrap();
    for (i, &f) in features.iter().enumerate() {
        let name = if same_name { "f".to_string() } else { format!("f{i}") };
        let w = g.input(&format!("w{i}"), &[("d_model", d_model), (&name, f), ("h", h)], DType::F32).unwrap();
        let y = if weight_first { g.einsum("dfh,td->fth", &[w, x]) } else { g.einsum("td,dfh->fth", &[x, w]) }.unwrap();
        let y = g.unary(y, einsummable::UnaryOp::Neg).unwrap();
        g.save_as(y, &format!("y{i}")).unwrap();
    }
    g
}

/// The form of `g` with its merges (the first with a derived input).
fn merged_form(g: &Graph) -> Form {
    default_forms(&g.snapshot(), 1).expect("forms").into_iter().find(|f| !f.derived.is_empty()).expect("a merged form")
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 16, ..Default::default() })]

    /// Merged projections compute the written outputs, whatever the parts' extents, names,
    /// operand order and count.
    #[test]
    fn merged_projections_compute_the_written_outputs(
        tokens in 1usize..9,
        d_model in 1usize..9,
        h in 1usize..4,
        features in proptest::collection::vec(1usize..6, 2..4),
        same_name: bool,
        weight_first: bool,
        seed in 0u64..1000,
    ) {
        let g = projections(tokens, d_model, h, &features, same_name, weight_first);
        let form = merged_form(&g);
        proptest::prop_assert_eq!(form.derived.len(), 1);
        proptest::prop_assert_eq!(form.derived[0].parts.len(), features.len());
        let err = merged_error(&g, &form.graph, &form.derived, seed);
        proptest::prop_assert!(err < 1e-5, "off by {}", err);
    }
}

/// A wrong merge, its slices swapped, fails the check the merge passes.
#[test]
fn a_merge_with_its_slices_swapped_fails_the_check() {
    let g = projections(6, 5, 2, &[3, 3], false, false);
    let form = merged_form(&g);
    assert!(merged_error(&g, &form.graph, &form.derived, 1) < 1e-5);
    // The same merge by hand, the two slices swapped.
    let mut wrong = Graph::new();
    let x = wrong.input("x", &[("tokens", 6), ("d_model", 5)], DType::F32).unwrap();
    let w = wrong.input("w0+w1", &[("d_model", 5), ("f0+f1", 6), ("h", 2)], DType::F32).unwrap();
    let x = wrong.unary(x, einsummable::UnaryOp::Silu).unwrap();
    let y = wrong.einsum("td,dfh->fth", &[x, w]).unwrap();
    for (i, (lo, name)) in [(3, "f0"), (0, "f1")].into_iter().enumerate() {
        let part = wrong.slice_as(y, "f0+f1", lo, lo + 3, name).unwrap();
        let part = wrong.unary(part, einsummable::UnaryOp::Neg).unwrap();
        wrong.save_as(part, &format!("y{i}")).unwrap();
    }
    let err = merged_error(&g, &wrong, &form.derived, 1);
    assert!(err > 1e-2, "the swapped merge passes: {err}");
}

/// A weight that another operator reads too, or that is saved, is not merged; the others
/// of its group still are.
#[test]
fn a_weight_read_elsewhere_is_not_merged() {
    let mut g = projections(4, 3, 2, &[2, 3, 2], false, false);
    let w2 = g.computation().inputs().into_iter().find(|t| g.computation().tensor_name(*t) == "w2").unwrap();
    let w2 = g.tensor(w2).unwrap();
    let doubled = g.unary(w2, einsummable::UnaryOp::Neg).unwrap();
    g.save_as(doubled, "w2 again").unwrap();
    let form = merged_form(&g);
    let names: Vec<String> = form.derived[0].parts.iter().map(|t| g.computation().tensor_name(*t)).collect();
    assert_eq!(names, ["w0", "w1"]);
    assert!(merged_error(&g, &form.graph, &form.derived, 3) < 1e-5);
}

/// A small LLaMA block (f32) with its Q, K, V and gate, up projections merged (forced: too
/// small for a merge to pay) runs on the CPU backend at p = 1, 2 and 8 and passes the check
/// against the written graph's single-device reference, its weights loaded separately by
/// their handles.
#[test]
fn a_merged_llama_block_runs_and_passes_its_check() {
    use einsummable::check::{compare_with_reference, computation_tolerance};
    let g = small_block();
    let tolerance = computation_tolerance(g.computation());
    for devices in [1, 2, 8] {
        let mut exe = compile(&g, &forced(devices)).expect("compiles");
        let merged: Vec<&Change> =
            exe.rewrites().expect("rewrites weighed").iter().filter(|c| !c.as_written()).collect();
        assert_eq!(merged.len(), 2, "p = {devices}: {merged:?}");
        assert!(merged.iter().all(|c| c.rule == "merge"));
        assert_eq!(merged[0].written, "wq, wk, wv");
        assert!(
            exe.plan().ops.iter().any(|o| o.name.starts_with("slice")),
            "p = {devices}: the merged form is planned"
        );
        exe.load_random(5).unwrap();
        exe.execute().unwrap();
        let check = compare_with_reference(&exe).expect("a reference");
        assert!(check.passes(tolerance), "p = {devices}: error {}", check.max_error);
    }
}

/// Every way to load or write a merged weight's part reaches the merged input: loaded
/// whole (kept or resident, or as its one whole part), loaded again after the merged input
/// is built, and written in part; the outputs are the written graph's on the final values.
#[test]
fn every_load_path_builds_the_merged_weight() {
    use einsummable::check::computation_tolerance;
    let g = small_block();
    let comp = g.computation();
    let handle =
        |name: &str| g.tensor(comp.inputs().into_iter().find(|t| comp.tensor_name(*t) == name).unwrap()).unwrap();
    let mut exe = compile(&g, &forced(2)).expect("compiles");
    let mut values = comp.random_inputs(11);
    // Separately, each part in its own way; `wv` last, so the merged input is built then.
    for (t, v) in &values {
        let name = comp.tensor_name(*t);
        let h = g.tensor(*t).unwrap();
        match name.as_str() {
            "wv" => continue,
            "wk" => exe.load_resident(h, v.clone()).unwrap(),
            "w_up" => exe.load_resident_parts(h, std::slice::from_ref(v)).unwrap(),
            _ => exe.load(h, v.clone()).unwrap(),
        }
    }
    assert!(exe.execute().is_err(), "wv is not loaded");
    assert_eq!(exe.needed_parts(handle("wq")).unwrap(), None);
    let wv = values.iter().find(|(t, _)| comp.tensor_name(**t) == "wv").map(|(t, v)| (*t, v.clone())).unwrap();
    assert!(
        exe.load_resident_parts(handle("wv"), &[wv.1.clone(), wv.1.clone()]).is_err(),
        "two parts of a merged weight"
    );
    exe.load(handle("wv"), wv.1).unwrap();
    // Loaded again after the merged input is built, and written in part.
    let wq = handle("wq");
    let desc = g.desc(wq).unwrap().clone();
    let new_wq = HostTensor::random(desc.tensor_type(), desc.dtype, 99);
    exe.load(wq, new_wq.clone()).unwrap();
    values.insert(comp.inputs().into_iter().find(|t| comp.tensor_name(*t) == "wq").unwrap(), new_wq);
    let wk = comp.inputs().into_iter().find(|t| comp.tensor_name(*t) == "wk").unwrap();
    let kd = g.desc(g.tensor(wk).unwrap()).unwrap().clone();
    let mut part_ty = kd.tensor_type();
    let rows: Vec<einsum_core::Interval> = (0..part_ty.rank())
        .map(|a| if a == 0 { einsum_core::Interval { lo: 2, hi: 5 } } else { part_ty.dim(a) })
        .collect();
    part_ty = TensorType::from_intervals(rows);
    let part = HostTensor::random(part_ty, kd.dtype, 7);
    exe.write_input(g.tensor(wk).unwrap(), part.clone()).unwrap();
    values.get_mut(&wk).unwrap().overwrite(&part).unwrap();
    exe.execute().unwrap();
    let want = comp.evaluate(&values).unwrap();
    let tolerance = computation_tolerance(comp);
    for t in comp.saved() {
        let err = einsum_core::scaled_error(&exe.outputs()[t], &want[t], 1.0);
        assert!(err <= tolerance, "`{}` off by {err}", comp.tensor_name(*t));
    }
    // The form planned stands in for the graph's inputs but the merged ones, and its outputs.
    let form = exe.planned_computation();
    assert!(exe.planned_tensor(wq).is_err(), "wq is read only as part of the merged weight");
    let wo = exe.planned_tensor(handle("wo")).unwrap();
    assert_eq!(form.tensor_name(wo), "wo");
    let out = exe.planned_tensor(g.tensor(comp.saved()[0]).unwrap()).unwrap();
    assert_eq!(form.saved(), [out]);
}

/// A LLaMA block of small dimensions, f32.
fn small_block() -> Graph {
    Workload::parse("llama-block:tokens=32,seqs=2,d_model=32,heads_q=4,heads_kv=2,d_head=8,d_ff=48")
        .unwrap()
        .build(DType::F32)
        .unwrap()
}

/// Options on `devices` devices that keep the form with every merge site merged.
fn forced(devices: usize) -> CompileOptions {
    options(devices).rewrites(true).rules(Rules { force_merges: true, ..Rules::default() })
}

/// The number of operators of `comp` (its inputs left out).
fn operators(comp: &einsum_joinagg::Computation) -> usize {
    comp.topo_order().into_iter().filter(|&op| matches!(comp.node(op), Some(einsum_joinagg::Node::Op { .. }))).count()
}

/// A low-rank product written as one einsum in a costly order, `A·B·x` (`A` is `d_out` x
/// `rank`, `B` is `rank` x `d_model`, `x` is `d_model` x `tokens`: `yᵀ` of a merged LoRA
/// adapter), which the kernel contracts left to right: the `d_out` x `d_model` product first.
fn low_rank_einsum(d_out: usize, rank: usize, d_model: usize, tokens: usize) -> Graph {
    let mut g = Graph::new();
    let a = g.input("A", &[("d_out", d_out), ("rank", rank)], DType::F32).unwrap();
    let b = g.input("B", &[("rank", rank), ("d_model", d_model)], DType::F32).unwrap();
    let x = g.input("x", &[("d_model", d_model), ("tokens", tokens)], DType::F32).unwrap();
    let y = g.einsum("ij,jk,kl->il", &[a, b, x]).unwrap();
    g.save_as(y, "y").unwrap();
    g
}

/// A three-operand einsum written in its costly order is reordered (rule `order`) and
/// predicts at least twice as fast on 4 devices as with rewrites off.
#[test]
fn a_multi_operand_einsum_in_a_costly_order_is_reordered() {
    let g = low_rank_einsum(8192, 16, 8192, 2048);
    let exe = compile(&g, &options(4).rewrites(true)).expect("compiles");
    let off = compile(&g, &options(4)).expect("compiles");
    let change = &exe.rewrites().expect("one network weighed")[0];
    println!(
        "{} planned as {}: {:.3} ms, as written {:.3} ms",
        change.written,
        change.chosen,
        exe.predicted_ms(),
        off.predicted_ms()
    );
    assert_eq!((change.rule.as_str(), change.written.as_str()), ("order", "((A B) x)"));
    assert_eq!(change.chosen, "(A (B x))");
    assert!(off.predicted_ms() / exe.predicted_ms() >= 2.0, "{} against {}", off.predicted_ms(), exe.predicted_ms());
    // The kept form: two two-operand einsums, not the three-operand one.
    assert_eq!(operators(exe.planned_computation()), 2);
}

/// The reordered einsum runs on the CPU backend at p = 1, 2 and 8 and passes its check.
#[test]
fn a_reordered_einsum_runs_and_passes_its_check() {
    use einsummable::check::{compare_with_reference, computation_tolerance};
    let g = low_rank_einsum(512, 4, 512, 256);
    let tolerance = computation_tolerance(g.computation());
    for devices in [1, 2, 8] {
        let mut exe = compile(&g, &options(devices).rewrites(true)).expect("compiles");
        let change = exe.rewrites().expect("one network weighed")[0].clone();
        assert_eq!(change.chosen, "(A (B x))", "p = {devices}");
        exe.load_random(5).unwrap();
        exe.execute().unwrap();
        let check = compare_with_reference(&exe).expect("a reference");
        assert!(check.passes(tolerance), "p = {devices}: error {}", check.max_error);
    }
}

/// A matmul reading a transposed weight (`einsum(ij->ji)`, then the product):
/// `x` is `tokens` x `d_model`, `w` is stored `d_out` x `d_model`.
fn transposed_weight(tokens: usize, d_model: usize, d_out: usize) -> Graph {
    let mut g = Graph::new();
    let x = g.input("x", &[("tokens", tokens), ("d_model", d_model)], DType::F32).unwrap();
    let w = g.input("w", &[("d_out", d_out), ("d_model", d_model)], DType::F32).unwrap();
    let wt = g.einsum("ij->ji", &[w]).unwrap();
    let y = g.einsum("td,de->te", &[x, wt]).unwrap();
    g.save_as(y, "y").unwrap();
    g
}

/// The permute of a transposed weight is absorbed (rule `transpose`): the kept form has one
/// operator fewer, predicts faster, and passes its check at p = 1, 2 and 8.
#[test]
fn a_transposed_weight_is_absorbed_and_passes_its_check() {
    use einsummable::check::{compare_with_reference, computation_tolerance};
    let g = transposed_weight(256, 512, 384);
    let tolerance = computation_tolerance(g.computation());
    for devices in [1, 2, 8] {
        let mut exe = compile(&g, &options(devices).rewrites(true)).expect("compiles");
        let changes = exe.rewrites().expect("one network weighed").to_vec();
        assert_eq!(changes.len(), 1, "p = {devices}: {changes:?}");
        assert_eq!(changes[0].rule, "transpose");
        assert!(changes[0].chosen.starts_with("absorbed `"), "p = {devices}: {changes:?}");
        assert!(changes[0].written.ends_with("= einsum(ij->ji)`"), "{changes:?}");
        assert_eq!(operators(exe.planned_computation()), operators(g.computation()) - 1, "p = {devices}");
        let off = compile(&g, &options(devices)).expect("compiles");
        println!(
            "p = {devices}: {} {:.4} ms, as written {:.4} ms",
            changes[0].chosen,
            exe.predicted_ms(),
            off.predicted_ms()
        );
        assert!(exe.predicted_ms() < off.predicted_ms(), "p = {devices}");
        exe.load_random(7).unwrap();
        exe.execute().unwrap();
        let check = compare_with_reference(&exe).expect("a reference");
        assert!(check.passes(tolerance), "p = {devices}: error {}", check.max_error);
    }
}

/// Every form of `g` computes its outputs on non-zero random inputs, relative error within
/// f32's reach; at least one form is rewritten with a change of `rule`.
fn forms_compute_the_written_outputs(g: &Graph, rule: &str) -> Result<(), proptest::test_runner::TestCaseError> {
    let forms = default_forms(&g.snapshot(), 4).expect("forms");
    proptest::prop_assert!(
        forms.iter().any(|f| f.changes.iter().any(|c| c.rule == rule && !c.as_written())),
        "no form rewritten by `{}`: {:?}",
        rule,
        forms.iter().map(|f| &f.changes).collect::<Vec<_>>()
    );
    for f in &forms {
        let err = merged_error(g, &f.graph, &f.derived, 11);
        proptest::prop_assert!(err < 1e-4, "{:?}: off by {}", f.changes, err);
    }
    Ok(())
}

/// The letters `a`.. of `indices`, each term's in a random order (`flips`).
fn chain_terms(n: usize, flips: &[bool]) -> Vec<String> {
    (0..n)
        .map(|i| {
            let (a, b) = ((b'a' + i as u8) as char, (b'a' + i as u8 + 1) as char);
            if flips[i] { format!("{b}{a}") } else { format!("{a}{b}") }
        })
        .collect()
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 24, ..Default::default() })]

    /// A chain of 3 or 4 matrices written as one einsum, each operand stored either way round
    /// and the result in either order, optionally followed by a product with one more matrix
    /// (a network mixing a multi-operand einsum and a two-operand one): every order weighed
    /// computes the written outputs.
    #[test]
    fn multi_operand_orders_compute_the_written_outputs(
        extents in proptest::collection::vec(1usize..7, 4..6),
        flips in proptest::collection::vec(proptest::bool::ANY, 5),
        out_flipped in proptest::bool::ANY,
        then in proptest::bool::ANY,
    ) {
        let n = extents.len() - 1;
        let mut g = Graph::new();
        let terms = chain_terms(n, &flips);
        let names: Vec<String> = (0..=n).map(|i| format!("i{i}")).collect();
        let mats: Vec<Tensor> = (0..n)
            .map(|i| {
                let dims = [(names[i].as_str(), extents[i]), (names[i + 1].as_str(), extents[i + 1])];
                let dims = if flips[i] { [dims[1], dims[0]] } else { dims };
                g.input(&format!("M{i}"), &dims, DType::F32).unwrap()
            })
            .collect();
        let (first, last) = ('a', (b'a' + n as u8) as char);
        let out = if out_flipped { format!("{last}{first}") } else { format!("{first}{last}") };
        let mut y = g.einsum(&format!("{}->{out}", terms.join(",")), &mats).unwrap();
        if then {
            let e = g.input("E", &[(names[n].as_str(), extents[n]), ("o", 3)], DType::F32).unwrap();
            y = g.matmul(y, e).unwrap();
        }
        g.save_as(y, "y").unwrap();
        forms_compute_the_written_outputs(&g, "order")?;
    }

    /// A product `x·w` or `w·x` reading `w` through a permute, optionally followed by a
    /// product with a third matrix and by a permute of the result: every form, with the
    /// permutes absorbed, computes the written outputs in the written order.
    #[test]
    fn absorbed_transposes_compute_the_written_outputs(
        extents in proptest::collection::vec(1usize..7, 4),
        w_first in proptest::bool::ANY,
        third in proptest::bool::ANY,
        permuted_result in proptest::bool::ANY,
    ) {
        let mut g = Graph::new();
        let x = g.input("x", &[("t", extents[0]), ("d", extents[1])], DType::F32).unwrap();
        let w = g.input("w", &[("e", extents[2]), ("d", extents[1])], DType::F32).unwrap();
        let wt = g.einsum("ed->de", &[w]).unwrap();
        let mut y = if w_first { g.einsum("de,td->et", &[wt, x]) } else { g.einsum("td,de->te", &[x, wt]) }.unwrap();
        if third {
            let c = g.input("c", &[("e", extents[2]), ("o", extents[3])], DType::F32).unwrap();
            y = g.matmul(y, c).unwrap();
        }
        if permuted_result {
            y = g.einsum("ab->ba", &[y]).unwrap();
        }
        g.save_as(y, "y").unwrap();
        forms_compute_the_written_outputs(&g, "transpose")?;
        let forms = default_forms(&g.snapshot(), 4).expect("forms");
        let absorbed = 1 + usize::from(permuted_result);
        for f in &forms[1..] {
            let changes = f.changes.iter().filter(|c| c.rule == "transpose" && !c.as_written()).count();
            proptest::prop_assert_eq!(changes, absorbed);
            proptest::prop_assert_eq!(operators(f.graph.computation()), operators(g.computation()) - absorbed);
        }
    }
}

/// Wrong rewrites fail the check the rewrites pass: a permute absorbed with its indices
/// swapped (the weight read as if stored the other way round), and a reordered einsum whose
/// rebuilt result has its dimensions the other way round.
#[test]
fn wrong_absorptions_and_orders_fail_the_check() {
    let g = transposed_weight(5, 4, 4);
    let forms = default_forms(&g.snapshot(), 4).unwrap();
    assert!(forms.len() > 1);
    assert!(merged_error(&g, &forms[1].graph, &[], 3) < 1e-5);
    let mut wrong = Graph::new();
    let x = wrong.input("x", &[("tokens", 5), ("d_model", 4)], DType::F32).unwrap();
    // `w` is stored `d_out` x `d_model`: read as `d_model` x `d_out`, it is transposed.
    let w = wrong.input("w", &[("d_model", 4), ("d_out", 4)], DType::F32).unwrap();
    let y = wrong.einsum("td,de->te", &[x, w]).unwrap();
    wrong.save_as(y, "y").unwrap();
    let err = merged_error(&g, &wrong, &[], 3);
    assert!(err > 1e-2, "the swapped absorption passes: {err}");

    let g = low_rank_einsum(4, 2, 3, 4);
    let forms = default_forms(&g.snapshot(), 4).unwrap();
    let reordered = forms.iter().find(|f| f.changes[0].chosen == "(A (B x))").expect("reordered");
    assert!(merged_error(&g, &reordered.graph, &[], 3) < 1e-5);
    let mut wrong = Graph::new();
    let a = wrong.input("A", &[("d_out", 4), ("rank", 2)], DType::F32).unwrap();
    let b = wrong.input("B", &[("rank", 2), ("d_model", 3)], DType::F32).unwrap();
    let x = wrong.input("x", &[("d_model", 3), ("tokens", 4)], DType::F32).unwrap();
    let bx = wrong.einsum("jk,kl->jl", &[b, x]).unwrap();
    // The result `tokens` x `d_out`, where the written one is `d_out` x `tokens`.
    let y = wrong.einsum("ij,jl->li", &[a, bx]).unwrap();
    wrong.save_as(y, "y").unwrap();
    let err = merged_error(&g, &wrong, &[], 3);
    assert!(err > 1e-2, "the transposed order passes: {err}");
}

/// Each rule can be switched off: without [`Rules::orders`] a three-operand einsum is left as
/// written, without [`Rules::transposes`] a permute is kept (neither graph then has a form to
/// weigh); with them both are rewritten.
#[test]
fn orders_and_transposes_can_be_switched_off() {
    let (einsum, transposed) = (low_rank_einsum(4, 2, 3, 4), transposed_weight(5, 4, 3));
    let none = |g: &Graph, rules: Rules| einsummable::rewrite::graph_forms(&g.snapshot(), &rules).unwrap().is_empty();
    assert!(none(&einsum, Rules { orders: None, ..Rules::default() }));
    assert!(none(&transposed, Rules { transposes: None, ..Rules::default() }));
    assert!(!none(&einsum, Rules { transposes: None, ..Rules::default() }));
    assert!(!none(&transposed, Rules { orders: None, ..Rules::default() }));
}

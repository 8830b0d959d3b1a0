//! The graph builder: shapes flow through, and bad inputs are typed errors that name the
//! operator and the index.

use einsum_core::DType;
use einsum_graph::{Error, Graph};
use einsum_ops::{Packing, attention::AttentionConfig, binary::BinaryOp, reduce::ReduceOp, unary::UnaryOp};

fn ffn() -> Graph {
    let mut g = Graph::new();
    let x = g.input("x", &[("tokens", 16), ("d_model", 8)], DType::F32).unwrap();
    let w1 = g.input("w1", &[("d_model", 8), ("d_ff", 32)], DType::F32).unwrap();
    let w2 = g.input("w2", &[("d_ff", 32), ("d_model", 8)], DType::F32).unwrap();
    let act = g.matmul(x, w1).unwrap();
    let hidden = g.unary(act, UnaryOp::Relu).unwrap();
    let y = g.matmul(hidden, w2).unwrap();
    g.save(y).unwrap();
    g
}

#[test]
fn section_2_ffn_builds() {
    let g = ffn();
    let comp = g.computation();
    assert_eq!(comp.ops().count(), 3);
    assert_eq!(comp.inputs().len(), 3);
    let y = comp.saved()[0];
    assert_eq!(comp.desc(y).unwrap().shape(), vec![16, 8]);
}

#[test]
fn matmul_with_mismatched_inner_index_names_operator_and_index() {
    let mut g = Graph::new();
    let a = g.input("a", &[("i", 4), ("j", 5)], DType::F32).unwrap();
    let b = g.input("b", &[("j", 6), ("k", 7)], DType::F32).unwrap();
    let err = g.matmul(a, b).unwrap_err();
    assert!(matches!(err, Error::Build { .. }));
    let msg = err.to_string();
    assert!(msg.contains("matmul"), "{msg}");
    assert!(msg.contains('j'), "{msg}");
}

#[test]
fn unknown_index_names_are_errors() {
    let mut g = Graph::new();
    let x = g.input("x", &[("tokens", 4), ("d_model", 8)], DType::F32).unwrap();
    let msg = g.softmax(x, "d_ff").unwrap_err().to_string();
    assert!(msg.contains("softmax") && msg.contains("d_ff"), "{msg}");
    let msg = g.reduce(x, &["heads"], ReduceOp::Sum).unwrap_err().to_string();
    assert!(msg.contains("reduce") && msg.contains("heads"), "{msg}");
}

#[test]
fn broadcasting_clash_names_the_index() {
    let mut g = Graph::new();
    let a = g.input("a", &[("tokens", 4), ("d_model", 8)], DType::F32).unwrap();
    let b = g.input("b", &[("d_model", 9)], DType::F32).unwrap();
    let msg = g.binary(a, b, BinaryOp::Add).unwrap_err().to_string();
    assert!(msg.contains("d_model"), "{msg}");
    let c = g.input("c", &[("d_model", 8)], DType::F32).unwrap();
    let sum = g.binary(a, c, BinaryOp::Add).unwrap();
    assert_eq!(g.desc(sum).unwrap().shape(), vec![4, 8]);
}

#[test]
fn attention_rejects_heads_that_do_not_group() {
    let mut g = Graph::new();
    let q = g.input("q", &[("heads_q", 6), ("seq", 8), ("d_head", 4)], DType::F32).unwrap();
    let k = g.input("k", &[("heads_kv", 4), ("seq", 8), ("d_head", 4)], DType::F32).unwrap();
    let v = g.input("v", &[("heads_kv", 4), ("seq", 8), ("d_head", 4)], DType::F32).unwrap();
    let config = AttentionConfig { causal: true, packing: Packing::single(8), scale: None };
    let msg = g.attention(q, k, v, "seq", "d_head", config).unwrap_err().to_string();
    assert!(msg.contains("attention"), "{msg}");
}

#[test]
fn duplicate_input_index_is_an_error() {
    let mut g = Graph::new();
    let msg = g.input("x", &[("i", 2), ("i", 3)], DType::F32).unwrap_err().to_string();
    assert!(msg.contains("`i`") && msg.contains("input `x`"), "{msg}");
}

/// A matmul binds its operands by index name: a weight stored `[d_out, d_model]` (Hugging
/// Face's layout) is contracted over `d_model`, giving `x · wᵀ` named `[tokens, d_out]`, checked
/// against the product by hand on random-looking data; operands that share no index name, or
/// both, are refused naming their indices.
#[test]
fn matmul_binds_operands_by_name() {
    use einsum_core::HostTensor;
    let mut g = Graph::new();
    let x = g.input("x", &[("tokens", 2), ("d_model", 3)], DType::F32).unwrap();
    let w = g.input("w", &[("d_out", 3), ("d_model", 3)], DType::F32).unwrap();
    let y = g.matmul(x, w).unwrap();
    g.save(y).unwrap();
    let comp = g.computation();
    let out = comp.desc(comp.saved()[0]).unwrap();
    assert_eq!(out.dims_string(), "tokens=2, d_out=3");
    let xs: Vec<f32> = vec![0.5, -1.25, 2.0, 3.0, 0.75, -0.5];
    let ws: Vec<f32> = vec![1.5, -2.0, 0.25, 0.5, 1.0, -3.0, -1.0, 2.5, 4.0];
    let inputs = comp.inputs();
    let feed = |i: usize, data: &[f32]| {
        let desc = comp.desc(inputs[i]).unwrap();
        (inputs[i], HostTensor::from_f32(desc.tensor_type(), DType::F32, data.to_vec()).unwrap())
    };
    let values = comp.evaluate(&[feed(0, &xs), feed(1, &ws)].into_iter().collect()).unwrap();
    let got = values[&comp.saved()[0]].to_f32();
    for t in 0..2 {
        for o in 0..3 {
            let want: f32 = (0..3).map(|d| xs[t * 3 + d] * ws[o * 3 + d]).sum();
            assert!(
                (got[t * 3 + o] - want).abs() <= 1e-5 * want.abs().max(1.0),
                "[{t}, {o}]: {} vs {want}",
                got[t * 3 + o]
            );
        }
    }
    let v = g.input("v", &[("a", 3), ("b", 3)], DType::F32).unwrap();
    let e = g.matmul(x, v).unwrap_err().to_string();
    assert!(e.contains("share no index name") && e.contains("tokens") && e.contains("a=3"), "{e}");
    let square = g.input("s", &[("tokens", 2), ("d_model", 3)], DType::F32).unwrap();
    let e = g.matmul(x, square).unwrap_err().to_string();
    assert!(e.contains("share both index names"), "{e}");
}

/// An einsum letter must name one index: `d` binding `d_model` in one operand and `d_out` in
/// the other (same extent) is refused naming the letter and both names.
#[test]
fn einsum_letters_name_one_index() {
    let mut g = Graph::new();
    let x = g.input("x", &[("tokens", 2), ("d_model", 3)], DType::F32).unwrap();
    let w = g.input("w", &[("d_out", 3), ("k", 4)], DType::F32).unwrap();
    let e = g.einsum("td,dk->tk", &[x, w]).unwrap_err().to_string();
    assert!(e.contains("`d_model` in operand 0 and `d_out` in operand 1"), "{e}");
    let v = g.input("v", &[("d_model", 3), ("k", 4)], DType::F32).unwrap();
    assert!(g.einsum("td,dk->tk", &[x, v]).is_ok());
}

/// Inputs are bound by name, so a second input of one name is refused, naming it.
#[test]
fn a_duplicate_input_name_is_refused() {
    let mut g = Graph::new();
    g.input("x", &[("i", 2)], DType::F32).unwrap();
    let e = g.input("x", &[("j", 3)], DType::F16).unwrap_err();
    assert!(matches!(&e, Error::DuplicateInput(name) if name == "x"), "{e}");
    assert!(e.to_string().contains("input `x`"), "{e}");
    assert!(g.input("y", &[("i", 2)], DType::F32).is_ok());
}

#[test]
fn tensors_of_another_graph_are_rejected() {
    let mut other = Graph::new();
    let _ = other.input("a", &[("i", 2)], DType::F32).unwrap();
    let foreign = other.input("b", &[("i", 2)], DType::F32).unwrap();
    // The same node index exists in `g`: the handle must still be refused.
    let mut g = Graph::new();
    let a = g.input("a", &[("i", 2)], DType::F32).unwrap();
    let _ = g.input("b", &[("i", 2)], DType::F32).unwrap();
    assert!(matches!(g.save(foreign), Err(Error::ForeignTensor(_))));
    assert!(matches!(g.binary(a, foreign, BinaryOp::Add), Err(Error::ForeignTensor(_))));
    assert!(matches!(g.desc(foreign), Err(Error::ForeignTensor(_))));
    assert!(g.binary(a, a, BinaryOp::Add).is_ok());
}

#[test]
fn attention_finds_sequence_and_d_head_by_name() {
    let mut g = Graph::new();
    let causal = || AttentionConfig::new(true, Packing::single(8));
    // Hugging Face's [tokens, heads, d_head] is refused, naming q and its layout, where a
    // positional read would take the 8 tokens for heads.
    let q = g.input("q", &[("tokens", 8), ("heads", 8), ("d_head", 4)], DType::F32).unwrap();
    let k = g.input("k", &[("tokens", 8), ("heads", 8), ("d_head", 4)], DType::F32).unwrap();
    let msg = g.attention(q, k, k, "tokens", "d_head", causal()).unwrap_err().to_string();
    assert!(msg.contains("q is [tokens=8, heads=8, d_head=4]") && msg.contains("permute"), "{msg}");
    // A name that is not an index of an operand.
    let q = g.input("q2", &[("heads", 8), ("tokens", 8), ("d_head", 4)], DType::F32).unwrap();
    let k = g.input("k2", &[("heads", 8), ("seq", 8), ("d_head", 4)], DType::F32).unwrap();
    let msg = g.attention(q, k, k, "tokens", "d_head", causal()).unwrap_err().to_string();
    assert!(msg.contains("`tokens`") && msg.contains("not an index of k"), "{msg}");
    // k and v must name their heads alike.
    let k = g.input("k3", &[("heads_kv", 2), ("tokens", 8), ("d_head", 4)], DType::F32).unwrap();
    let v = g.input("v3", &[("kv_heads", 2), ("tokens", 8), ("d_head", 4)], DType::F32).unwrap();
    let msg = g.attention(q, k, v, "tokens", "d_head", causal()).unwrap_err().to_string();
    assert!(msg.contains("name their head index differently"), "{msg}");
    // The canonical layout builds.
    let v = g.input("v4", &[("heads_kv", 2), ("tokens", 8), ("d_head", 4)], DType::F32).unwrap();
    let a = g.attention(q, k, v, "tokens", "d_head", causal()).unwrap();
    assert_eq!(g.desc(a).unwrap().shape(), vec![8, 8, 4]);
}

#[test]
fn binary_broadcasts_only_where_asked() {
    let mut g = Graph::new();
    let a = g.input("a", &[("tokens", 4), ("d_model", 8)], DType::F32).unwrap();
    let typo = g.input("typo", &[("tokens", 4), ("d_modle", 8)], DType::F32).unwrap();
    let err = g.binary(a, typo, BinaryOp::Add).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("a: d_model; b: d_modle") && msg.contains("Binary::outer"), "{msg}");
    // A bias over an index the other operand lacks is the same mistake.
    let bias = g.input("bias", &[("d_modle", 8)], DType::F32).unwrap();
    assert!(g.binary(a, bias, BinaryOp::Add).is_err());
    // Either side may be the broadcast one; the outer broadcast is there when asked for.
    let scale = g.input("scale", &[("tokens", 4)], DType::F32).unwrap();
    let y = g.binary(scale, a, BinaryOp::Mul).unwrap();
    assert_eq!(g.desc(y).unwrap().shape(), vec![4, 8]);
    let i = g.input("i", &[("i", 3)], DType::F32).unwrap();
    let j = g.input("j", &[("j", 5)], DType::F32).unwrap();
    let outer = g.binary_outer(i, j, BinaryOp::Mul).unwrap();
    assert_eq!(g.desc(outer).unwrap().shape(), vec![3, 5]);
}

#[test]
fn norm_parameters_bind_by_name() {
    let mut g = Graph::new();
    let x = g.input("x", &[("tokens", 4), ("d_model", 8)], DType::F32).unwrap();
    // Same extent, another index: a d_ff weight of a model whose d_ff equals d_model.
    let w = g.input("w", &[("d_ff", 8)], DType::F32).unwrap();
    let msg = g.rmsnorm(x, w, "d_model", 1e-5).unwrap_err().to_string();
    assert!(msg.contains("the one index `d_model`") && msg.contains("d_ff=8"), "{msg}");
    let b = g.input("b", &[("d_model", 8)], DType::F32).unwrap();
    assert!(g.layernorm(x, b, w, "d_model", 1e-5).unwrap_err().to_string().contains("bias"));
    assert!(g.layernorm(x, b, b, "d_model", 1e-5).is_ok());
}

#[test]
fn a_snapshot_stays_as_taken_while_the_graph_grows() {
    let mut g = ffn();
    let snapshot = g.snapshot();
    let y = g.tensor(g.computation().saved()[0]).unwrap();
    let z = g.unary(y, UnaryOp::Relu).unwrap();
    g.save(z).unwrap();
    // The graph grew; the snapshot did not.
    assert_eq!(g.computation().ops().count(), 4);
    assert_eq!(snapshot.computation().ops().count(), 3);
    assert_eq!(snapshot.computation().saved().len(), 1);
    // The graph's handles are the snapshot's, as far as it goes.
    assert_eq!(snapshot.own_tensor(y).unwrap(), y.id());
    assert_eq!(snapshot.desc(y).unwrap().shape(), vec![16, 8]);
    assert!(matches!(snapshot.desc(z), Err(Error::ForeignTensor(_))));
    assert!(matches!(ffn().snapshot().own_tensor(y), Err(Error::ForeignTensor(_))));
    // Node names keep counting in the graph.
    assert_eq!(g.computation().node(z.id().op).unwrap().name(), "unary #4");
}

/// Token ids (i32) in, the top token of each position out: an embedding, a projection to
/// the vocabulary and an argmax, evaluated on random ids below the vocabulary.
#[test]
fn token_ids_embed_and_logits_argmax() {
    let mut g = Graph::new();
    let ids = g.input("ids", &[("tokens", 6)], DType::I32).unwrap();
    let table = g.input("table", &[("vocab", 10), ("d_model", 4)], DType::F32).unwrap();
    let x = g.embedding(table, ids, "vocab").unwrap();
    let logits = g.einsum("td,vd->tv", &[x, table]).unwrap();
    let top = g.argmax(logits, "vocab").unwrap();
    g.save(top).unwrap();
    assert_eq!(g.desc(top).unwrap().dtype, DType::I32);
    let comp = g.computation();
    let inputs = comp.random_inputs(5);
    let out = &comp.evaluate(&inputs).unwrap()[&top.id()];
    let (ids, table) = (inputs[&ids.id()].to_i32(), inputs[&table.id()].to_f32());
    for (t, &top) in out.to_i32().iter().enumerate() {
        let row = |v: usize| &table[v * 4..v * 4 + 4];
        let score = |v: usize| row(ids[t] as usize).iter().zip(row(v)).map(|(a, b)| a * b).sum::<f32>();
        let best = (0..10).fold(0, |b, v| if score(v) > score(b) { v } else { b });
        assert_eq!(top as usize, best, "position {t}");
    }
    // Indices are not values: an elementwise operator on them is refused.
    let more = g.input("more_ids", &[("tokens", 3)], DType::I32).unwrap();
    let e = g.unary(more, UnaryOp::Relu).unwrap_err().to_string();
    assert!(e.contains("i32"), "{e}");
}

#[test]
fn outputs_are_named_apart_from_inputs_and_each_other() {
    let mut g = ffn();
    let x = g.computation().inputs()[0];
    let x = g.tensor(x).unwrap();
    let y = g.unary(x, UnaryOp::Relu).unwrap();
    let z = g.unary(x, UnaryOp::Exp).unwrap();
    let comp_name = |g: &Graph, t: einsum_graph::Tensor| g.computation().tensor_name(t.id());
    assert_eq!(comp_name(&g, y), "unary #4");
    g.save_as(y, "hidden").unwrap();
    assert_eq!(comp_name(&g, y), "hidden");
    assert!(g.computation().saved().contains(&y.id()));
    assert!(matches!(g.save_as(z, "hidden"), Err(Error::DuplicateOutput(n)) if n == "hidden"));
    assert!(matches!(g.save_as(z, "x"), Err(Error::DuplicateOutput(_))));
    g.save_as(y, "relu").unwrap();
    assert_eq!(comp_name(&g, y), "relu");
    g.save_as(z, "hidden").unwrap();
}

/// The operators real models need besides the matrix products: a bf16 input cast to f32,
/// the last positions of a sequence sliced off, joined to a new one, squashed by sigmoid and
/// tanh and averaged; the values checked against the formulas on the evaluated inputs.
#[test]
fn cast_slice_concat_sigmoid_tanh_and_mean_build_and_evaluate() {
    let mut g = Graph::new();
    let cache = g.input("cache", &[("s", 5), ("d", 3)], DType::BF16).unwrap();
    let new = g.input("new", &[("d", 3), ("s", 2)], DType::F32).unwrap();
    let wide = g.cast(cache, DType::F32).unwrap();
    let recent = g.slice(wide, "s", 2, 5).unwrap();
    let keys = g.concat(&[recent, new], "s").unwrap();
    assert_eq!(g.desc(keys).unwrap().dims_string(), "s=5, d=3");
    let gate = g.unary(keys, UnaryOp::Sigmoid).unwrap();
    let squashed = g.unary(gate, UnaryOp::Tanh).unwrap();
    let mean = g.reduce(squashed, &["s"], ReduceOp::Mean).unwrap();
    g.save(mean).unwrap();
    assert_eq!((g.desc(wide).unwrap().dtype, g.desc(mean).unwrap().dims_string()), (DType::F32, "d=3".into()));
    let comp = g.computation();
    let inputs = comp.random_inputs(11);
    let out = comp.evaluate(&inputs).unwrap()[&mean.id()].to_f32();
    let (c, n) = (inputs[&cache.id()].to_f32(), inputs[&new.id()].to_f32());
    for (d, got) in out.iter().enumerate() {
        // Rows 2..5 of the cache, then the new keys (stored [d, s]).
        let column = (2..5).map(|s| c[s * 3 + d]).chain((0..2).map(|s| n[d * 2 + s]));
        let want = column.map(|v| (1.0 / (1.0 + (-v as f64).exp())).tanh()).sum::<f64>() / 5.0;
        assert!((*got as f64 - want).abs() < 1e-6, "d = {d}: {got}, want {want}");
    }
}

#[test]
fn cast_slice_and_concat_errors_name_the_dtype_and_index() {
    let mut g = Graph::new();
    let x = g.input("x", &[("s", 4), ("d", 2)], DType::F32).unwrap();
    let ids = g.input("ids", &[("s", 4)], DType::I32).unwrap();
    let msg = g.cast(x, DType::I32).unwrap_err().to_string();
    assert!(msg.contains("cast") && msg.contains("i32"), "{msg}");
    let msg = g.cast(ids, DType::F32).unwrap_err().to_string();
    assert!(msg.contains("cast") && msg.contains("i32"), "{msg}");
    let msg = g.slice(x, "s", 3, 6).unwrap_err().to_string();
    assert!(msg.contains("slice") && msg.contains("3..6"), "{msg}");
    let msg = g.slice(x, "t", 0, 1).unwrap_err().to_string();
    assert!(msg.contains("slice") && msg.contains('t'), "{msg}");
    let y = g.input("y", &[("s", 4), ("d", 3)], DType::F32).unwrap();
    let msg = g.concat(&[x, y], "s").unwrap_err().to_string();
    assert!(msg.contains("concat") && msg.contains("d=3"), "{msg}");
    let msg = g.concat(&[x], "s").unwrap_err().to_string();
    assert!(msg.contains("two or more"), "{msg}");
    let h = g.input("h", &[("s", 4), ("d", 2)], DType::BF16).unwrap();
    let msg = g.concat(&[x, h], "s").unwrap_err().to_string();
    assert!(msg.contains("bf16"), "{msg}");
}

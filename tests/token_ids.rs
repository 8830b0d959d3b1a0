//! Token ids (i32) through planning, exchange and the CPU backend: an embedding, a projection
//! to the vocabulary and an argmax, compiled on 1 to 8 devices under several strategies
//! (random plans split the embedding by tokens, by `d_model` and by vocabulary), give
//! exactly the single-device positions and logits.

use std::sync::Arc;

use einsum_core::scaled_error;
use einsummable::names::optimizer_by_name;
use einsummable::{CompileOptions, DType, Graph, compile};

fn model() -> (Graph, einsummable::Tensor, einsummable::Tensor) {
    let mut g = Graph::new();
    let ids = g.input("ids", &[("tokens", 12)], DType::I32).unwrap();
    let table = g.input("table", &[("vocab", 40), ("d_model", 16)], DType::F32).unwrap();
    let head = g.input("head", &[("vocab", 40), ("d_model", 16)], DType::F32).unwrap();
    let x = g.embedding(table, ids, "vocab").unwrap();
    let logits = g.einsum("td,vd->tv", &[x, head]).unwrap();
    let top = g.argmax(logits, "vocab").unwrap();
    g.save(logits).unwrap();
    g.save(top).unwrap();
    (g, logits, top)
}

#[test]
fn token_ids_run_split_as_on_one_device() {
    let (g, logits, top) = model();
    for devices in [1, 2, 4, 8] {
        for (strategy, seed) in [("dp", 0), ("random", 1), ("random", 2), ("random", 3)] {
            let optimizer = Arc::from(optimizer_by_name(strategy, seed).unwrap());
            let options = CompileOptions::default().devices(devices).optimizer(optimizer);
            let mut exe = compile(&g, &options).unwrap();
            exe.load_random(7).unwrap();
            exe.execute().unwrap();
            let reference = g.computation().evaluate(&exe.loaded_inputs()).unwrap();
            let at = format!("{strategy} {seed} on {devices} devices");
            assert!(scaled_error(&exe.outputs()[&logits.id()], &reference[&logits.id()], 1.0) <= 1e-5, "{at}");
            assert_eq!(exe.outputs()[&top.id()].to_i32(), reference[&top.id()].to_i32(), "{at}");
        }
    }
}

//! `Problem::new` shares one enumeration and pricing among equal operators (the repeated
//! layers of a transformer stack); the result must be exactly what enumerating every
//! operator on its own (`Problem::new_unshared`) gives, and the sharing must happen.

use std::sync::atomic::{AtomicUsize, Ordering};

use einsum_core::{DType, TensorDesc};
use einsum_joinagg::{AbstractOperator, Computation, JoinAggSpec};
use einsum_logical::{CostModel, Dp, LogicalOptimizer, Machine, PaperProxy, Problem, SpecCost, Time};
use einsum_ops::Packing;
use einsum_ops::attention::{Attention, AttentionConfig};
use einsum_ops::binary::{Binary, BinaryOp};
use einsum_ops::rmsnorm::RmsNorm;
use einsum_ops::rope::Rope;
use einsum_ops::unary::{Unary, UnaryOp};

mod common;
use common::Builder;

/// One layer of a stack: what differs from layer to layer.
#[derive(Clone, Copy)]
struct Layer {
    d_ff: usize,
    activation: UnaryOp,
}

/// A LLaMA-shaped stack (16 tokens in 2 packed sequences, `d_model = 8`, 4 query heads
/// over 2 key/value heads of width 4), one pre-norm block with RoPE and a gated FFN per
/// entry of `layers`, each layer reading the previous one's output and its own weights
/// (the FFN's up projection reads the layer's input rather than the attention residual).
fn stack(layers: &[Layer]) -> Computation {
    let (tokens, d_model, heads_q, heads_kv, d_head) = (16, 8, 4, 2, 4);
    let packing = Packing::uniform(2, tokens / 2).unwrap();
    let mut b = Builder::new(DType::F16);
    let mut x = b.input("x", &[("tokens", tokens), ("d_model", d_model)]);
    for (l, layer) in layers.iter().enumerate() {
        let w = |name: &str| format!("l{l}.{name}");
        let norm = b.input(&w("norm"), &[("d_model", d_model)]);
        let wq = b.input(&w("wq"), &[("d_model", d_model), ("heads_q", heads_q), ("d_head", d_head)]);
        let wk = b.input(&w("wk"), &[("d_model", d_model), ("heads_kv", heads_kv), ("d_head", d_head)]);
        let wv = b.input(&w("wv"), &[("d_model", d_model), ("heads_kv", heads_kv), ("d_head", d_head)]);
        let wo = b.input(&w("wo"), &[("heads_q", heads_q), ("d_head", d_head), ("d_model", d_model)]);
        let w_gate = b.input(&w("w_gate"), &[("d_model", d_model), ("d_ff", layer.d_ff)]);
        let w_up = b.input(&w("w_up"), &[("d_model", d_model), ("d_ff", layer.d_ff)]);
        let w_down = b.input(&w("w_down"), &[("d_ff", layer.d_ff), ("d_model", d_model)]);

        let (xd, nd) = (b.desc(x), b.desc(norm));
        let h = b.op(&w("norm"), RmsNorm::new(&xd, &nd, "d_model", 1e-5).unwrap(), &[x, norm]);
        let q = b.einsum(&w("q"), "td,dhe->hte", &[h, wq]);
        let k = b.einsum(&w("k"), "td,dhe->hte", &[h, wk]);
        let v = b.einsum(&w("v"), "td,dhe->hte", &[h, wv]);
        let rope = |d: &TensorDesc| Rope::new(d, "tokens", "d_head", 500_000.0, packing.clone()).unwrap();
        let q = b.op(&w("rope_q"), rope(&b.desc(q)), &[q]);
        let k = b.op(&w("rope_k"), rope(&b.desc(k)), &[k]);
        let config = AttentionConfig::new(true, packing.clone());
        let att = Attention::new(&b.desc(q), &b.desc(k), &b.desc(v), config).unwrap();
        let a = b.op(&w("attention"), att, &[q, k, v]);
        let o = b.einsum(&w("wo"), "hte,hed->td", &[a, wo]);
        let r = b.op(&w("residual"), Binary::new(&xd, &xd, BinaryOp::Add).unwrap(), &[x, o]);
        let gate = b.einsum(&w("gate"), "td,df->tf", &[r, w_gate]);
        // Reads the layer input, not the residual: in the first layer a computation input
        // that specs splitting `d_ff` replicate, which the `time` model charges only when an
        // operator produces it (so the first layer's `up` must not share with `gate`).
        let up = b.einsum(&w("up"), "td,df->tf", &[x, w_up]);
        let gd = b.desc(gate);
        let act = b.op(&w("act"), Unary::new(&gd, layer.activation).unwrap(), &[gate]);
        let gated = b.op(&w("gated"), Binary::new(&gd, &gd, BinaryOp::Mul).unwrap(), &[act, up]);
        let down = b.einsum(&w("down"), "tf,fd->td", &[gated, w_down]);
        x = b.op(&w("residual2"), Binary::new(&xd, &xd, BinaryOp::Add).unwrap(), &[r, down]);
    }
    b.comp.save(x).unwrap();
    b.comp
}

fn uniform(n: usize) -> Vec<Layer> {
    vec![Layer { d_ff: 16, activation: UnaryOp::Silu }; n]
}

/// Asserts that two problems are identical: operators, sources, candidates (counts, aliases,
/// specs, tilings) and every cost to the bit.
fn assert_same(shared: &Problem, unshared: &Problem, what: &str) {
    assert_eq!(shared.ops.len(), unshared.ops.len(), "{what}");
    for (a, b) in shared.ops.iter().zip(&unshared.ops) {
        let at = format!("{what}, {}", a.name);
        assert_eq!((&a.name, &a.sources, &a.consumers), (&b.name, &b.sources, &b.consumers), "{at}");
        assert_eq!(a.candidates.len(), b.candidates.len(), "{at}");
        for (n, (x, y)) in a.candidates.iter().zip(b.candidates.iter()).enumerate() {
            assert_eq!((&x.counts, &x.aliases), (&y.counts, &y.aliases), "{at}, candidate {n}");
            assert!(x.spec == y.spec, "{at}, candidate {n}: specs differ");
            assert_eq!((&x.outputs, &x.inputs), (&y.outputs, &y.inputs), "{at}, candidate {n}");
            let bits = |c: &SpecCost, bytes: f64| {
                [c.join.to_bits(), c.aggregation.to_bits(), c.compute.to_bits(), bytes.to_bits()]
            };
            assert_eq!(bits(&x.cost, x.bytes), bits(&y.cost, y.bytes), "{at}, candidate {n}");
        }
    }
    // Everything else, including what the loop does not name.
    assert_eq!(format!("{shared:?}"), format!("{unshared:?}"), "{what}");
}

/// On stacks of equal layers, and of layers that differ in FFN width or activation (equal
/// shapes but different FLOPs: sharing those would misprice them), at several device
/// counts under both cost models: the same problem and the same DP plan as without sharing.
#[test]
fn sharing_changes_neither_the_problem_nor_the_plan() {
    let silu = Layer { d_ff: 16, activation: UnaryOp::Silu };
    let gelu = Layer { d_ff: 16, activation: UnaryOp::Gelu };
    let wide = Layer { d_ff: 32, activation: UnaryOp::Silu };
    let time = Time::on(Machine::by_name("dgx-a100").unwrap());
    let models: [&dyn CostModel; 2] = [&PaperProxy, &time];
    for (label, layers) in [("uniform", uniform(4)), ("mixed", vec![silu, gelu, wide, silu, gelu])] {
        let comp = stack(&layers);
        for p in [1, 2, 4, 8] {
            for model in models {
                let what = format!("{label} stack, p = {p}, {}", model.name());
                let shared = Problem::new(&comp, p, model).unwrap();
                let unshared = Problem::new_unshared(&comp, p, model).unwrap();
                assert_same(&shared, &unshared, &what);
                let (a, b) = (Dp.solve(&shared).unwrap(), Dp.solve(&unshared).unwrap());
                assert_eq!(a, b, "{what}");
                let (a, b) = (shared.plan(&a, "dp").unwrap(), unshared.plan(&b, "dp").unwrap());
                assert_eq!(a.total.to_bits(), b.total.to_bits(), "{what}");
                assert_eq!(Dp.optimize(&comp, p, model).unwrap().total.to_bits(), a.total.to_bits(), "{what}");
            }
        }
    }
}

/// The `time` model, counting the specs it prices.
#[derive(Debug)]
struct Counting {
    model: Time,
    priced: AtomicUsize,
}

impl Counting {
    fn new() -> Counting {
        Counting { model: Time::on(Machine::by_name("dgx-a100").unwrap()), priced: AtomicUsize::new(0) }
    }

    /// The specs priced while building a problem for `comp` on `p` devices.
    fn count(
        &self,
        build: fn(&Computation, usize, &dyn CostModel) -> einsum_logical::Result<Problem>,
        comp: &Computation,
        p: usize,
    ) -> usize {
        let before = self.priced.load(Ordering::Relaxed);
        build(comp, p, self).unwrap();
        self.priced.load(Ordering::Relaxed) - before
    }
}

impl CostModel for Counting {
    fn name(&self) -> &str {
        "counting"
    }
    fn unit(&self) -> &'static str {
        self.model.unit()
    }
    fn repartition(&self, desc: &TensorDesc, p: usize) -> f64 {
        self.model.repartition(desc, p)
    }
    fn spec(&self, op: &dyn AbstractOperator, spec: &JoinAggSpec, p: usize, resident: &[bool]) -> SpecCost {
        self.priced.fetch_add(1, Ordering::Relaxed);
        self.model.spec(op, spec, p, resident)
    }
}

/// The first layer reads the computation input `x` where later layers read the previous
/// layer's output, so it is priced on its own; every later layer equals the second. Shared,
/// a stack of 5 layers therefore prices exactly as many specs as a stack of 2; unshared,
/// every layer beyond the first prices as many specs again.
#[test]
fn equal_layers_are_enumerated_and_priced_once() {
    let model = Counting::new();
    let stacks = [stack(&uniform(1)), stack(&uniform(2)), stack(&uniform(5))];
    for p in [4, 8] {
        let shared: Vec<usize> = stacks.iter().map(|c| model.count(Problem::new, c, p)).collect();
        let unshared: Vec<usize> = stacks.iter().map(|c| model.count(Problem::new_unshared, c, p)).collect();
        let layer = unshared[1] - unshared[0];
        assert!(layer > 0, "p = {p}");
        assert_eq!(unshared[2], unshared[1] + 3 * layer, "p = {p}: {unshared:?} unshared");
        // Within one layer, k and v already share (and gate and up, past the first layer).
        assert!(shared[0] < unshared[0], "p = {p}: {shared:?} shared, {unshared:?} unshared");
        assert!(shared[1] > shared[0], "p = {p}: the second layer differs from the first");
        assert_eq!(shared[2], shared[1], "p = {p}: the 3 extra layers were priced again");
    }
}

//! The user-facing graph builder: the Rust counterpart of the paper's Section 2 example.
//!
//! ```
//! use einsum_core::DType;
//! use einsum_graph::Graph;
//! use einsum_ops::unary::UnaryOp;
//! let mut g = Graph::new();
//! let x = g.input("x", &[("tokens", 8), ("d_model", 4)], DType::F32)?;
//! let w1 = g.input("w1", &[("d_model", 4), ("d_ff", 16)], DType::F32)?;
//! let w2 = g.input("w2", &[("d_ff", 16), ("d_model", 4)], DType::F32)?;
//! let act = g.matmul(x, w1)?;
//! let hidden = g.unary(act, UnaryOp::Relu)?;
//! let y = g.matmul(hidden, w2)?;
//! g.save(y)?;
//! assert_eq!(g.desc(y)?.shape(), vec![8, 4]);
//! # Ok::<(), einsum_graph::Error>(())
//! ```

use std::sync::{
    Arc,
    atomic::{AtomicU64, Ordering},
};

use einsum_core::{DType, TensorDesc};
use einsum_joinagg::{AbstractOperator, Computation, IndexRole, TensorId};
use einsum_ops::{
    Packing,
    argmax::Argmax,
    attention::{Attention, AttentionConfig},
    binary::{Binary, BinaryOp},
    cached_attention::CachedAttention,
    cast::Cast,
    concat::Concat,
    einsum::Einsum,
    embedding::Embedding,
    layernorm::LayerNorm,
    reduce::{Reduce, ReduceOp},
    rmsnorm::RmsNorm,
    rope::{Rope, RopeFrequencies},
    rope_at::RopeAt,
    slice::Slice,
    softmax::Softmax,
    unary::{Unary, UnaryOp},
};

use crate::{Error, Result};

/// A handle to a tensor of one [`Graph`]; using it with another graph is an error.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Tensor {
    graph: u64,
    id: TensorId,
}

impl Tensor {
    /// The tensor's id in the graph's [`Computation`].
    pub fn id(&self) -> TensorId {
        self.id
    }
}

/// Source of distinct graph ids, so a tensor handle remembers which graph made it.
static NEXT_GRAPH: AtomicU64 = AtomicU64::new(0);

/// A graph as it stood when [`Graph::snapshot`] took it: frozen, cheap to take and to clone
/// (it shares the computation), and the graph's tensor handles are its handles. What
/// `compile` keeps, so that the graph may grow afterwards.
#[derive(Clone, Debug)]
pub struct Snapshot {
    id: u64,
    comp: Arc<Computation>,
}

impl Snapshot {
    /// The computation as it stood.
    pub fn computation(&self) -> &Computation {
        &self.comp
    }

    /// The tensor's id in [`Snapshot::computation`], if the handle was made by its graph.
    pub fn own_tensor(&self, t: Tensor) -> Result<TensorId> {
        if t.graph == self.id { Ok(t.id) } else { Err(Error::ForeignTensor(t.id.to_string())) }
    }

    /// The type of a tensor.
    pub fn desc(&self, t: Tensor) -> Result<&TensorDesc> {
        let id = self.own_tensor(t)?;
        self.comp.desc(id).map_err(|_| Error::ForeignTensor(id.to_string()))
    }

    /// The handle of tensor `id` of [`Snapshot::computation`].
    pub fn tensor(&self, id: TensorId) -> Result<Tensor> {
        self.comp.desc(id).map_err(|_| Error::ForeignTensor(id.to_string()))?;
        Ok(Tensor { graph: self.id, id })
    }
}

impl From<&Graph> for Snapshot {
    fn from(graph: &Graph) -> Self {
        graph.snapshot()
    }
}

/// A computation under construction: inputs, abstract operators and saved outputs. No
/// device, sharding or communication appears here; `compile` decides all of that.
#[derive(Debug)]
pub struct Graph {
    /// The graph's identity and its computation so far, shared with the snapshots taken of
    /// it until the graph grows again (copy-on-write).
    state: Snapshot,
    ops_added: usize,
}

impl Default for Graph {
    fn default() -> Self {
        let state = Snapshot { id: NEXT_GRAPH.fetch_add(1, Ordering::Relaxed), comp: Arc::default() };
        Self { state, ops_added: 0 }
    }
}

impl Graph {
    /// An empty graph.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds an input tensor with named dimensions, e.g. `&[("tokens", 4096), ("d_model", 4096)]`.
    /// Its name must be new to the graph: inputs are loaded and bound by name.
    pub fn input(&mut self, name: &str, dims: &[(&str, usize)], dtype: DType) -> Result<Tensor> {
        let comp = self.computation();
        if comp.inputs().iter().any(|t| comp.node(t.op).is_some_and(|n| n.name() == name)) {
            return Err(Error::DuplicateInput(name.to_string()));
        }
        let desc = TensorDesc::of(dims, dtype)
            .map_err(|e| Error::Build { node: format!("input `{name}`"), source: e.into() })?;
        let id = self.comp_mut().add_input(name, desc);
        Ok(self.handle(id))
    }

    /// A general contraction written as index strings, e.g. `"td,dhe->hte"`; a letter must
    /// name one index in every operand it appears in ([`Einsum::new_named`]).
    pub fn einsum(&mut self, equation: &str, inputs: &[Tensor]) -> Result<Tensor> {
        let descs = self.descs(inputs)?;
        self.add("einsum", Einsum::new_named(equation, &descs), inputs)
    }

    /// Matrix multiply of two rank-2 tensors, bound by index name: the one index they share
    /// is contracted, wherever it sits (`[tokens, d_model] × [d_out, d_model] → [tokens,
    /// d_out]`), and operands that share none or both are an error naming their indices
    /// ([`Einsum::matmul_named`]).
    pub fn matmul(&mut self, a: Tensor, b: Tensor) -> Result<Tensor> {
        let op = Einsum::matmul_named(self.desc(a)?, self.desc(b)?);
        self.add("matmul", op, &[a, b])
    }

    /// An elementwise unary operation.
    pub fn unary(&mut self, x: Tensor, op: UnaryOp) -> Result<Tensor> {
        let op = Unary::new(self.desc(x)?, op);
        self.add("unary", op, &[x])
    }

    /// An elementwise binary operation, matching indices by name and broadcasting an
    /// operand whose indices the other has (`[tokens, d] + [d]`); operands that each have an
    /// index the other lacks are an error naming them ([`Binary::new`]).
    pub fn binary(&mut self, a: Tensor, b: Tensor, op: BinaryOp) -> Result<Tensor> {
        let op = Binary::new(self.desc(a)?, self.desc(b)?, op);
        self.add("binary", op, &[a, b])
    }

    /// An elementwise binary operation broadcasting each operand over the indices it lacks,
    /// the outer broadcast asked for explicitly (`[i] * [j]` → `[i, j]`, [`Binary::outer`]).
    pub fn binary_outer(&mut self, a: Tensor, b: Tensor, op: BinaryOp) -> Result<Tensor> {
        let op = Binary::outer(self.desc(a)?, self.desc(b)?, op);
        self.add("binary", op, &[a, b])
    }

    /// Softmax over the named index.
    pub fn softmax(&mut self, x: Tensor, index: &str) -> Result<Tensor> {
        let op = Softmax::new(self.desc(x)?, index);
        self.add("softmax", op, &[x])
    }

    /// RMSNorm over the named index, with a weight over that index.
    pub fn rmsnorm(&mut self, x: Tensor, weight: Tensor, index: &str, eps: f32) -> Result<Tensor> {
        let op = RmsNorm::new(self.desc(x)?, self.desc(weight)?, index, eps);
        self.add("rmsnorm", op, &[x, weight])
    }

    /// LayerNorm over the named index, with a weight and a bias over that index.
    pub fn layernorm(&mut self, x: Tensor, weight: Tensor, bias: Tensor, index: &str, eps: f32) -> Result<Tensor> {
        let op = LayerNorm::new(self.desc(x)?, self.desc(weight)?, self.desc(bias)?, index, eps);
        self.add("layernorm", op, &[x, weight, bias])
    }

    /// Rotary position embedding along `sequence`, rotating pairs of `feature`; positions
    /// count from the start of each packed sequence.
    pub fn rope(&mut self, x: Tensor, sequence: &str, feature: &str, theta: f32, packing: Packing) -> Result<Tensor> {
        let op = Rope::new(self.desc(x)?, sequence, feature, theta, packing);
        self.add("rope", op, &[x])
    }

    /// [`Graph::rope`] rotating by given frequencies (a scaled rope: LLaMA 3.1's, YaRN, ...)
    /// rather than by a base `theta`.
    pub fn rope_with_frequencies(
        &mut self,
        x: Tensor,
        sequence: &str,
        feature: &str,
        frequencies: RopeFrequencies,
        packing: Packing,
    ) -> Result<Tensor> {
        let op = Rope::with_frequencies(self.desc(x)?, sequence, feature, frequencies, packing);
        self.add("rope", op, &[x])
    }

    /// [`Graph::rope_with_frequencies`] with each token's position given at run time: token
    /// `t` of `x`'s `tokens` index is rotated to position `positions[t]` (an i32 tensor of the
    /// one index `tokens`, each value in `0..max_positions`), as a decode step with a KV
    /// cache needs ([`RopeAt`]).
    ///
    /// ```
    /// use einsum_core::DType;
    /// use einsum_graph::Graph;
    /// use einsum_ops::rope::RopeFrequencies;
    /// let mut g = Graph::new();
    /// let q = g.input("q", &[("heads", 4), ("batch", 2), ("d_head", 16)], DType::F32)?;
    /// let positions = g.input("positions", &[("batch", 2)], DType::I32)?;
    /// let freq = RopeFrequencies::from_theta(10000.0, 16).expect("even and positive");
    /// let rotated = g.rope_at(q, positions, "batch", "d_head", freq, 4096)?;
    /// assert_eq!(g.desc(rotated)?, g.desc(q)?);
    /// # Ok::<(), einsum_graph::Error>(())
    /// ```
    pub fn rope_at(
        &mut self,
        x: Tensor,
        positions: Tensor,
        tokens: &str,
        feature: &str,
        frequencies: RopeFrequencies,
        max_positions: usize,
    ) -> Result<Tensor> {
        let op = RopeAt::new(self.desc(x)?, self.desc(positions)?, tokens, feature, frequencies, max_positions);
        self.add("rope_at", op, &[x, positions])
    }

    /// Attention of `q: [heads_q, sequence, d_head]` over `k, v: [heads_kv, sequence,
    /// d_head]` (grouped-query when `heads_q > heads_kv`), the `sequence` and `d_head`
    /// indices found by name: an operand laid out otherwise, or lacking one, is an error
    /// naming it ([`Attention::named`]).
    pub fn attention(
        &mut self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        sequence: &str,
        d_head: &str,
        config: AttentionConfig,
    ) -> Result<Tensor> {
        let op = Attention::named(self.desc(q)?, self.desc(k)?, self.desc(v)?, sequence, d_head, config);
        self.add("attention", op, &[q, k, v])
    }

    /// Decode-time attention of one new token per sequence over a KV cache
    /// ([`CachedAttention`]): `q: [heads_q, batch, d_head]` and the new `k, v: [heads_kv,
    /// batch, d_head]`; the caches `k_cache, v_cache: [heads_kv, batch, cache, d_head]`;
    /// `positions: [batch]` (i32), sequence `b`'s new token at position `positions[b]`
    /// seeing the cache rows below it and its own key. `scale` multiplies `q · k` (`None`:
    /// `1 / sqrt(d_head)`). The indices are found by name: an operand laid out otherwise is
    /// an error naming it.
    ///
    /// ```
    /// use einsum_core::DType;
    /// use einsum_graph::Graph;
    /// let mut g = Graph::new();
    /// let q = g.input("q", &[("heads_q", 8), ("batch", 2), ("d_head", 16)], DType::F32)?;
    /// let new = [("heads_kv", 2), ("batch", 2), ("d_head", 16)];
    /// let (k, v) = (g.input("k", &new, DType::F32)?, g.input("v", &new, DType::F32)?);
    /// let cache = [("heads_kv", 2), ("batch", 2), ("cache", 64), ("d_head", 16)];
    /// let k_cache = g.input("k_cache", &cache, DType::F32)?;
    /// let v_cache = g.input("v_cache", &cache, DType::F32)?;
    /// let positions = g.input("positions", &[("batch", 2)], DType::I32)?;
    /// let y = g.cached_attention(q, k, v, k_cache, v_cache, positions, "batch", "d_head", None)?;
    /// assert_eq!(g.desc(y)?, g.desc(q)?);
    /// # Ok::<(), einsum_graph::Error>(())
    /// ```
    #[allow(clippy::too_many_arguments)]
    pub fn cached_attention(
        &mut self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        k_cache: Tensor,
        v_cache: Tensor,
        positions: Tensor,
        batch: &str,
        d_head: &str,
        scale: Option<f32>,
    ) -> Result<Tensor> {
        let op = CachedAttention::named(
            self.desc(q)?,
            self.desc(k)?,
            self.desc(v)?,
            self.desc(k_cache)?,
            self.desc(v_cache)?,
            self.desc(positions)?,
            batch,
            d_head,
            scale,
        );
        self.add("cached_attention", op, &[q, k, v, k_cache, v_cache, positions])
    }

    /// The rows of `table` (indexed by `vocab`) that the i32 `ids` name: `[ids' indices...,
    /// table's other indices...]` in the table's dtype ([`Embedding`]); shardable by tokens,
    /// by the table's other indices, or by vocabulary with summed partial lookups.
    pub fn embedding(&mut self, table: Tensor, ids: Tensor, vocab: &str) -> Result<Tensor> {
        let op = Embedding::new(self.desc(table)?, self.desc(ids)?, vocab);
        self.add("embedding", op, &[table, ids])
    }

    /// The i32 position of the maximum of `x` along `index` (the first one, or the first NaN),
    /// over `x`'s other indices ([`Argmax`]).
    pub fn argmax(&mut self, x: Tensor, index: &str) -> Result<Tensor> {
        let op = Argmax::new(self.desc(x)?, index);
        self.add("argmax", op, &[x])
    }

    /// A reduction over the named indices (sum, max, or mean: [`ReduceOp`]).
    pub fn reduce(&mut self, x: Tensor, over: &[&str], op: ReduceOp) -> Result<Tensor> {
        let op = Reduce::new(self.desc(x)?, over, op);
        self.add("reduce", op, &[x])
    }

    /// `x` stored in another floating-point dtype, rounded to nearest even ([`Cast`]).
    pub fn cast(&mut self, x: Tensor, dtype: DType) -> Result<Tensor> {
        let op = Cast::new(self.desc(x)?, dtype);
        self.add("cast", op, &[x])
    }

    /// Positions `lo..hi` of `x` along `index`, which keeps its name ([`Slice`]).
    pub fn slice(&mut self, x: Tensor, index: &str, lo: usize, hi: usize) -> Result<Tensor> {
        let op = Slice::new(self.desc(x)?, index, lo, hi);
        self.add("slice", op, &[x])
    }

    /// [`Graph::slice`] with the sliced index called `name` in the result
    /// ([`Slice::renamed`]).
    pub fn slice_as(&mut self, x: Tensor, index: &str, lo: usize, hi: usize, name: &str) -> Result<Tensor> {
        let op = Slice::renamed(self.desc(x)?, index, lo, hi, name);
        self.add("slice", op, &[x])
    }

    /// Two or more tensors joined end to end along `index`, agreeing on every other index by
    /// name ([`Concat`]).
    pub fn concat(&mut self, xs: &[Tensor], index: &str) -> Result<Tensor> {
        let descs = xs.iter().map(|&t| self.desc(t).cloned()).collect::<Result<Vec<TensorDesc>>>()?;
        let op = Concat::new(&descs, index);
        self.add("concat", op, xs)
    }

    /// Declares that the dimension called `index` has `role` throughout the graph (before or
    /// after the operators that use it), for the baselines that follow a model's structure:
    /// the roles no operator can know, e.g. `g.role("d_ff", IndexRole::FfnHidden)` or, in a
    /// graph without attention, `g.role("tokens", IndexRole::Tokens)`. Attention declares
    /// its own. A name declared with another role than it already has is an error.
    ///
    /// ```
    /// use einsum_graph::Graph;
    /// use einsum_joinagg::IndexRole;
    /// let mut g = Graph::new();
    /// g.role("hidden", IndexRole::FfnHidden)?;
    /// assert!(g.role("hidden", IndexRole::Tokens).is_err());
    /// # Ok::<(), einsum_graph::Error>(())
    /// ```
    pub fn role(&mut self, index: &str, role: IndexRole) -> Result<()> {
        self.comp_mut().declare_role(index, role).map_err(Error::Role)
    }

    /// Marks a tensor as an output that must remain after execution.
    pub fn save(&mut self, t: Tensor) -> Result<()> {
        let id = self.own(t)?;
        self.comp_mut().save(id).map_err(|_| Error::ForeignTensor(id.to_string()))
    }

    /// [`Graph::save`] under `name` (`logits`), the name reports, dumps and bindings give the
    /// output instead of its operator's (`matmul #31`). A name an input or another output has
    /// is [`Error::DuplicateOutput`].
    pub fn save_as(&mut self, t: Tensor, name: &str) -> Result<()> {
        let id = self.own(t)?;
        self.comp_mut().save_as(id, name).map_err(|e| match e {
            einsum_joinagg::Error::NameTaken(name) => Error::DuplicateOutput(name),
            _ => Error::ForeignTensor(id.to_string()),
        })
    }

    /// The type of a tensor.
    pub fn desc(&self, t: Tensor) -> Result<&TensorDesc> {
        self.state.desc(t)
    }

    fn handle(&self, id: TensorId) -> Tensor {
        Tensor { graph: self.state.id, id }
    }

    /// The handle of tensor `id` of [`Graph::computation`] (for example a workload's inputs).
    pub fn tensor(&self, id: TensorId) -> Result<Tensor> {
        self.state.tensor(id)
    }

    /// The tensor's id in [`Graph::computation`], if the handle was made by this graph.
    pub fn own_tensor(&self, t: Tensor) -> Result<TensorId> {
        self.own(t)
    }

    /// The tensor's id, if the handle was made by this graph.
    fn own(&self, t: Tensor) -> Result<TensorId> {
        self.state.own_tensor(t)
    }

    /// The computation built so far.
    pub fn computation(&self) -> &Computation {
        self.state.computation()
    }

    /// The graph as it stands, frozen: cheap (the computation is shared, and copied the next
    /// time the graph grows, if a snapshot still holds it), with the graph's tensor handles
    /// valid in it. `compile` takes one, so the graph may keep growing afterwards.
    pub fn snapshot(&self) -> Snapshot {
        self.state.clone()
    }

    /// Consumes the builder, returning its computation.
    pub fn into_computation(self) -> Computation {
        Arc::unwrap_or_clone(self.state.comp)
    }

    /// The computation to grow: the graph's own, copied first if a snapshot shares it.
    fn comp_mut(&mut self) -> &mut Computation {
        Arc::make_mut(&mut self.state.comp)
    }

    fn descs(&self, ts: &[Tensor]) -> Result<Vec<TensorDesc>> {
        ts.iter().map(|&t| self.desc(t).cloned()).collect()
    }

    /// Adds any operator, including one defined outside `einsum-ops`, applied to `inputs`
    /// (in the order of [`AbstractOperator::inputs`]), and returns its outputs in the order
    /// of [`AbstractOperator::outputs`]. The node is named after the operator's kind, e.g.
    /// `unary #3`, and errors name it. The typed helpers ([`Graph::matmul`] and friends)
    /// are shorthands for this.
    ///
    /// ```
    /// use einsum_core::DType;
    /// use einsum_graph::Graph;
    /// use einsum_ops::unary::{Unary, UnaryOp};
    /// let mut g = Graph::new();
    /// let x = g.input("x", &[("tokens", 8), ("d_model", 4)], DType::F32)?;
    /// let relu = Unary::new(g.desc(x)?, UnaryOp::Relu)?;
    /// let outs = g.op(Box::new(relu), &[x])?;
    /// assert_eq!(g.desc(outs[0])?.shape(), vec![8, 4]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn op(&mut self, op: Box<dyn AbstractOperator>, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        self.ops_added += 1;
        let node = format!("{} #{}", op.kind(), self.ops_added);
        let ids = inputs.iter().map(|&t| self.own(t)).collect::<Result<Vec<TensorId>>>()?;
        let outs = self.comp_mut().add_op(node.clone(), op, &ids).map_err(|source| Error::Build { node, source })?;
        Ok(outs.into_iter().map(|id| self.handle(id)).collect())
    }

    /// [`Graph::op`] for an operator shared with another graph (one that a rewrite of that
    /// graph keeps as it is).
    pub fn op_shared(&mut self, op: Arc<dyn AbstractOperator>, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        self.ops_added += 1;
        let node = format!("{} #{}", op.kind(), self.ops_added);
        let ids = inputs.iter().map(|&t| self.own(t)).collect::<Result<Vec<TensorId>>>()?;
        let outs =
            self.comp_mut().add_shared_op(node.clone(), op, &ids).map_err(|source| Error::Build { node, source })?;
        Ok(outs.into_iter().map(|id| self.handle(id)).collect())
    }

    fn add<O: AbstractOperator + 'static>(
        &mut self,
        kind: &str,
        op: einsum_joinagg::Result<O>,
        inputs: &[Tensor],
    ) -> Result<Tensor> {
        self.ops_added += 1;
        let node = format!("{kind} #{}", self.ops_added);
        let op = op.map_err(|source| Error::Build { node: node.clone(), source })?;
        let ids = inputs.iter().map(|&t| self.own(t)).collect::<Result<Vec<TensorId>>>()?;
        let outs =
            self.comp_mut().add_op(node.clone(), Box::new(op), &ids).map_err(|source| Error::Build { node, source })?;
        Ok(self.handle(outs[0]))
    }
}

//! Decode-time grouped-query attention over a KV cache: one new token per sequence of a
//! batch attends to the keys its sequence has cached and to its own new key.
//!
//! Inputs, in this order: `q: [heads_q, batch, d_head]`, the new token's `k, v: [heads_kv,
//! batch, d_head]`, the caches `k_cache, v_cache: [heads_kv, batch, cache, d_head]`, and
//! `positions: [batch]` (i32). The output has `q`'s type. Query head `h` reads key/value head
//! `h / g`, `g = heads_q / heads_kv`. Sequence `b`'s new token stands at the absolute position
//! `p = positions[b]`: it sees the cache rows `0..p` of its sequence and then its own key at
//! position `p`, `p + 1` keys in all. The cache rows from `p` on are never read, whatever
//! they hold (NaN, a previous sequence's keys), so a cache allocated once at its capacity
//! serves every step. `p` must lie in `0..=cache`; any other is an error of the kernel naming
//! the sequence and the value.
//!
//! It is row `p` of a causal [`Attention`](crate::attention::Attention) over the `p + 1`
//! tokens whose keys and values are the cache rows `0..p` and the new ones, with the same
//! non-finite semantics: the output is NumPy's `softmax(s) @ v[seen]` over the scores
//! `s_j = scale · q · k_j` of the seen keys. So a NaN score makes the whole output row NaN;
//! a `+∞` score does too; a `−∞` score gets weight 0 unless every seen score is `−∞`, when
//! the row is NaN; a NaN or infinity in a seen value reaches that column.
//!
//! Four shardable indices, in this order:
//! 0. `heads_kv` (named after `k`'s head index), anywhere: sharding it shards `heads_q` in
//!    groups of `g`, as attention does.
//! 1. `batch`, anywhere: every tensor's batch rows follow the interval (the positions too).
//! 2. `d_head` (named after the d_head index), anywhere, on the output only: every score
//!    needs every feature of `q` and `k`, so `q`, `k`, `v` and the caches stay whole along
//!    it, and each function writes its slice of the output's features, weighting only that
//!    slice of the values. That lets a decode step of one sequence on few key/value heads
//!    spread over more devices; the output blocks still tile the output, with no
//!    aggregation, at the price of every function computing the same scores.
//! 3. `cache` (named after the caches' row index), anywhere: the key split of
//!    flash-decoding. A function with cache interval `lo..hi` reads rows `lo..hi` of its
//!    sequences' caches and sees the rows `j < p` among them; the new token's own key and
//!    value belong to exactly one function, the one whose interval holds `p` (the last one,
//!    `hi == cache`, when `p == cache`). Its functions share their output box, and their
//!    partials combine with the operator's aggregation, [`Aggregation::Softmax`]: a function
//!    of a split cache returns the partial one column wider along `d_head` (its slice of the
//!    normalized weighted values over the keys it saw, then their scores' log-sum-exp;
//!    `o = 0`, `lse = −∞` when it saw no key), which the aggregation merges as the softmax
//!    of the union of the keys. A function over the whole cache (no key split) returns the
//!    plain output block: its box is not shared, so it is final.
//!
//! Roles: the operator is [`OpRole::Attention`]; `batch` has [`IndexRole::Tokens`],
//! `heads_kv` [`IndexRole::HeadsKv`], and `q`'s head index [`IndexRole::HeadsQ`] unless it
//! has `k`'s name. The cache index has no role: no baseline splits keys (their rules take
//! the roles they know, then the output's indices, and a cache split comes last, so a
//! baseline's plan never picks it).
//!
//! The CPU kernel takes one key/value head and one sequence at a time, with its `g` query
//! heads together, so each cache row it reads is read once; its work is linear in `p`.

use einsum_core::{Aggregation, DType, HostTensor, Interval, KernelClass, TensorDesc, TensorType};
use einsum_joinagg::{
    AbstractOperator, Error, FunctionSpec, IndexRole, JoinAggSpec, OpRole, Result, ShardableIndex, check_request,
    combinations,
};

use crate::{
    common::{check_call, f32s, kernel_error},
    parallel, vexp,
};

const KIND: &str = "cached_attention";

/// Input positions, in the operator's order.
const Q: usize = 0;
const K: usize = 1;
const V: usize = 2;
const K_CACHE: usize = 3;
const V_CACHE: usize = 4;
const POSITIONS: usize = 5;

/// Grouped-query attention of one new token per sequence over its KV cache (see the
/// [module docs](self)).
#[derive(Clone, Debug)]
pub struct CachedAttention {
    inputs: Vec<TensorDesc>,
    outputs: Vec<TensorDesc>,
    scale: f32,
}

impl CachedAttention {
    /// Cached attention bound by index name: `q`, `k` and `v` are exactly `[<heads>, batch,
    /// d_head]`, `k_cache` and `v_cache` exactly `[<heads_kv>, batch, <cache>, d_head]` with
    /// `k`'s head index name and one cache index name, `positions` exactly `[batch]` in i32.
    /// `scale` multiplies `q · k`; `None` means `1 / sqrt(d_head)`.
    ///
    /// An operand laid out otherwise, a missing index, extents that differ, a zero extent,
    /// `heads_q` not a multiple of `heads_kv`, operands that do not share one floating-point
    /// dtype (or positions not i32), or a cache index named like `q`'s heads are an
    /// [`Error::Shape`] naming the index and the operand; a non-finite scale is
    /// [`Error::Invalid`].
    #[allow(clippy::too_many_arguments)]
    pub fn named(
        q: &TensorDesc,
        k: &TensorDesc,
        v: &TensorDesc,
        k_cache: &TensorDesc,
        v_cache: &TensorDesc,
        positions: &TensorDesc,
        batch: &str,
        d_head: &str,
        scale: Option<f32>,
    ) -> Result<CachedAttention> {
        let shape = |index: &str, reason: String| Error::Shape { op: KIND.into(), index: index.into(), reason };
        if batch == d_head {
            return Err(shape(batch, "names both the batch and the d_head index".into()));
        }
        // Layouts, by name.
        let layouts = [
            ("q", q, 3, "[heads, batch, d_head]"),
            ("k", k, 3, "[heads, batch, d_head]"),
            ("v", v, 3, "[heads, batch, d_head]"),
            ("k_cache", k_cache, 4, "[heads_kv, batch, cache, d_head]"),
            ("v_cache", v_cache, 4, "[heads_kv, batch, cache, d_head]"),
        ];
        for (role, t, rank, layout) in layouts {
            for (pos, name) in [(1, batch), (rank - 1, d_head)] {
                match t.position(name) {
                    None => return Err(shape(name, format!("not an index of {role} [{}]", t.dims_string()))),
                    Some(p) if p != pos || t.rank() != rank => {
                        return Err(shape(
                            name,
                            format!(
                                "{role} is [{}]; cached attention reads {role} as {layout} with batch `{batch}` and \
                                 d_head `{d_head}`, so permute it first",
                                t.dims_string()
                            ),
                        ));
                    }
                    Some(_) => {}
                }
            }
        }
        let heads_kv = &k.dims[0].name;
        for (role, t) in [("v", v), ("k_cache", k_cache), ("v_cache", v_cache)] {
            if t.dims[0].name != *heads_kv {
                return Err(shape(
                    &t.dims[0].name,
                    format!(
                        "{role} [{}] names its head index differently from k [{}]; key and value heads are one index",
                        t.dims_string(),
                        k.dims_string()
                    ),
                ));
            }
        }
        let cache_name = &k_cache.dims[2].name;
        if v_cache.dims[2].name != *cache_name {
            return Err(shape(
                &v_cache.dims[2].name,
                format!(
                    "v_cache [{}] names its cache index differently from k_cache [{}]",
                    v_cache.dims_string(),
                    k_cache.dims_string()
                ),
            ));
        }
        if q.dims[0].name == *cache_name {
            return Err(shape(cache_name, "names both the query heads of q and the cache rows of the caches".into()));
        }
        if positions.rank() != 1 || positions.dims[0].name != batch {
            return Err(shape(batch, format!("positions must be [{batch}], got [{}]", positions.dims_string())));
        }
        if positions.dtype != DType::I32 {
            return Err(shape(
                batch,
                format!("positions [{}] must be i32, not {}", positions.dims_string(), positions.dtype),
            ));
        }
        // Extents.
        let all = [("q", q), ("k", k), ("v", v), ("k_cache", k_cache), ("v_cache", v_cache), ("positions", positions)];
        for (role, t) in all {
            if let Some(dim) = t.dims.iter().find(|d| d.extent == 0) {
                return Err(shape(&dim.name, format!("{role} [{}] has a zero extent", t.dims_string())));
            }
        }
        let (nb, d, hkv) = (q.dims[1].extent, q.dims[2].extent, k.dims[0].extent);
        // Every operand but q and positions has batch at 1 and d_head last (checked above).
        for (role, t) in &all[1..5] {
            let (b_ext, d_ext) = (t.dims[1].extent, t.dims[t.rank() - 1].extent);
            if b_ext != nb {
                return Err(shape(batch, format!("{role} has batch extent {b_ext}, q has {nb}")));
            }
            if d_ext != d {
                return Err(shape(d_head, format!("{role} has d_head extent {d_ext}, q has {d}")));
            }
        }
        if positions.dims[0].extent != nb {
            return Err(shape(batch, format!("positions has batch extent {}, q has {nb}", positions.dims[0].extent)));
        }
        for (role, t) in [("v", v), ("k_cache", k_cache), ("v_cache", v_cache)] {
            if t.dims[0].extent != hkv {
                return Err(shape(heads_kv, format!("{role} has {} heads, k has {hkv}", t.dims[0].extent)));
            }
        }
        if v_cache.dims[2].extent != k_cache.dims[2].extent {
            return Err(shape(
                cache_name,
                format!("v_cache holds {} rows, k_cache {}", v_cache.dims[2].extent, k_cache.dims[2].extent),
            ));
        }
        let hq = q.dims[0].extent;
        if !hq.is_multiple_of(hkv) {
            return Err(shape(
                &q.dims[0].name,
                format!("q's {hq} query heads are not a multiple of k's {hkv} key/value heads"),
            ));
        }
        // One floating-point dtype.
        for (role, t) in &all[..5] {
            if !t.dtype.is_float() || t.dtype != q.dtype {
                return Err(shape(
                    d_head,
                    format!(
                        "{role} is {}, q is {}: q, k, v and the caches share one floating-point dtype",
                        t.dtype, q.dtype
                    ),
                ));
            }
        }
        let scale = match scale {
            Some(s) if !s.is_finite() => {
                return Err(Error::Invalid { op: KIND.into(), reason: format!("the scale must be finite, got {s}") });
            }
            Some(s) => s,
            None => 1.0 / (d as f32).sqrt(),
        };
        Ok(CachedAttention {
            inputs: [q, k, v, k_cache, v_cache, positions].into_iter().cloned().collect(),
            outputs: vec![q.clone()],
            scale,
        })
    }

    /// The factor applied to `q · k` (the configured one, or `1 / sqrt(d_head)`).
    pub fn scale(&self) -> f32 {
        self.scale
    }

    /// The cache's capacity: the rows it holds per sequence and key/value head (every
    /// position lies in `0..=capacity`).
    pub fn cache_capacity(&self) -> usize {
        self.inputs[K_CACHE].dims[2].extent
    }

    fn heads_q(&self) -> usize {
        self.inputs[Q].dims[0].extent
    }

    fn heads_kv(&self) -> usize {
        self.inputs[K].dims[0].extent
    }

    /// Query heads per key/value head.
    fn group(&self) -> usize {
        self.heads_q() / self.heads_kv()
    }

    fn batch(&self) -> usize {
        self.inputs[Q].dims[1].extent
    }

    fn d_head(&self) -> usize {
        self.inputs[Q].dims[2].extent
    }

    fn kernel_error(reason: String) -> Error {
        kernel_error(KIND, reason)
    }

    /// Checks that `f` and `inputs` are blocks this kernel can compute on: the generic checks
    /// of [`check_call`], then `d_head` whole in every input block, equal k and v blocks and
    /// equal cache blocks, the output block the q block but for its slice of `d_head`, every
    /// block on the q block's batch rows, and the q block's heads whole groups whose
    /// key/value heads the k/v and cache blocks hold. Returns the output's slice of `d_head`
    /// and the cache block's rows (the keys of the function).
    fn check_blocks(&self, f: &FunctionSpec, inputs: &[HostTensor]) -> Result<(Interval, Interval)> {
        check_call(self, f, inputs)?;
        for (n, (block, desc)) in f.inputs.iter().zip(&self.inputs).enumerate().take(POSITIONS) {
            let axis = block.rank() - 1;
            if block.dim(axis) != Interval::full(self.d_head()) {
                return Err(Self::kernel_error(format!(
                    "input {n} block {block}: d_head `{}` must be whole",
                    desc.dims[axis].name
                )));
            }
        }
        let (qb, kb, kcb) = (&f.inputs[Q], &f.inputs[K], &f.inputs[K_CACHE]);
        if f.inputs[V] != *kb {
            return Err(Self::kernel_error(format!("k block {kb} and v block {} differ", f.inputs[V])));
        }
        if f.inputs[V_CACHE] != *kcb {
            return Err(Self::kernel_error(format!(
                "k_cache block {kcb} and v_cache block {} differ",
                f.inputs[V_CACHE]
            )));
        }
        let ob = &f.outputs[0];
        if ob.dim(0) != qb.dim(0) || ob.dim(1) != qb.dim(1) {
            return Err(Self::kernel_error(format!(
                "output block {ob} is not the q block {qb} (but for its slice of d_head)"
            )));
        }
        let (slice, keys) = (ob.dim(2), kcb.dim(2));
        if keys.is_empty() {
            return Err(Self::kernel_error(format!(
                "k_cache block {kcb}: the cache index `{}` holds no row",
                self.inputs[K_CACHE].dims[2].name
            )));
        }
        let rows = qb.dim(1);
        for (role, block, axis) in [("k", kb, 1), ("k_cache", kcb, 1), ("positions", &f.inputs[POSITIONS], 0)] {
            if block.dim(axis) != rows {
                return Err(Self::kernel_error(format!(
                    "{role} block {block} does not hold the batch rows {rows} of the q block {qb}"
                )));
            }
        }
        if kcb.dim(0) != kb.dim(0) {
            return Err(Self::kernel_error(format!("k block {kb} and k_cache block {kcb} hold different heads")));
        }
        let (heads, g) = (qb.dim(0), self.group());
        if heads.is_empty() || rows.is_empty() {
            return Ok((slice, keys));
        }
        if !heads.lo.is_multiple_of(g) || !heads.hi.is_multiple_of(g) {
            return Err(Self::kernel_error(format!("query heads {heads} are not whole groups of {g}")));
        }
        let need = Interval { lo: heads.lo / g, hi: heads.hi / g };
        if !need.is_within(&kb.dim(0)) {
            return Err(Self::kernel_error(format!(
                "query heads {heads} need key/value heads {need}, the k/v block has {}",
                kb.dim(0)
            )));
        }
        Ok((slice, keys))
    }

    /// The kernel on checked blocks: for every (key/value head, sequence) of the block, on
    /// the helper threads, the scores of its `g` query heads against the cache rows it sees
    /// among `keys` (those below `p`, each read once) and, where the new token's key is its
    /// own (module docs), the new key, their softmax, and the weighted sum of the values'
    /// features in `slice` (each read once, that slice alone). Returns the output block's
    /// elements; with `partial`, each output row is followed by the log-sum-exp of its
    /// scores (the [`Aggregation::Softmax`] partial: `o = 0` and `lse = −∞` for a row that
    /// saw no key, `o` NaN and `lse = −∞` for one whose scores were all `−∞`, both NaN for a
    /// NaN or `+∞` score).
    fn decode(
        &self,
        f: &FunctionSpec,
        inputs: &[HostTensor],
        slice: Interval,
        keys: Interval,
        partial: bool,
    ) -> Result<Vec<f32>> {
        let (qb, kb) = (&f.inputs[Q], &f.inputs[K]);
        let (d, g, cache) = (self.d_head(), self.group(), self.cache_capacity());
        let m = slice.len();
        // The width of an output row: the slice, and the statistics column of a partial.
        let w = m + usize::from(partial);
        let (heads, rows) = (qb.dim(0), qb.dim(1));
        let nb = rows.len();
        let (kv_lo, nkv) = (heads.lo / g, heads.len() / g);
        let mut prefix = Vec::with_capacity(nb);
        for (i, &p) in inputs[POSITIONS].to_i32().iter().enumerate() {
            if p < 0 || p as usize > cache {
                return Err(Self::kernel_error(format!(
                    "position {p} of sequence {} is outside 0..={cache} (the cache holds {cache} rows)",
                    rows.lo + i
                )));
            }
            prefix.push(p as usize);
        }
        // The cache rows each (key/value head, sequence) reads, as views: only rows
        // `keys.lo..min(keys.hi, p)` are ever converted or read, and of the values only the
        // output's slice of features.
        let mut seen = Vec::with_capacity(nkv * nb);
        for u in 0..nkv {
            for (i, &p) in prefix.iter().enumerate() {
                let (h, b) = (kv_lo + u, rows.lo + i);
                let part = |features: Interval| {
                    TensorType::from_intervals(vec![
                        Interval { lo: h, hi: h + 1 },
                        Interval { lo: b, hi: b + 1 },
                        Interval { lo: keys.lo, hi: p.clamp(keys.lo, keys.hi) },
                        features,
                    ])
                };
                seen.push((inputs[K_CACHE].view(&part(Interval::full(d)))?, inputs[V_CACHE].view(&part(slice))?));
            }
        }
        let (q, k, v) = (f32s(&inputs[Q]), f32s(&inputs[K]), f32s(&inputs[V]));
        let k_heads_lo = kb.dim(0).lo;
        let scale = self.scale;
        // The output of unit (u, i) as its g query heads' rows of the slice (and their
        // statistics), [kv head, sequence, g, w].
        let mut grouped = vec![0.0f32; nkv * nb * g * w];
        parallel::for_chunks_mut(&mut grouped, g * w, |unit, acc| {
            let (u, i) = (unit / nb, unit % nb);
            let p = prefix[i];
            // The new token's key is this function's when its rows hold p (the last
            // function's when p is the cache's end).
            let own = keys.contains(p) || (p == cache && keys.hi == cache);
            let (k_seen, v_seen) = (f32s(&seen[unit].0), f32s(&seen[unit].1));
            let n = k_seen.len() / d + usize::from(own);
            if n == 0 {
                // No key seen: the empty partial, o = 0 and lse = −∞.
                for out in acc.chunks_exact_mut(w) {
                    out[m..].fill(f32::NEG_INFINITY);
                }
                return;
            }
            let kv_row = ((kv_lo + u - k_heads_lo) * nb + i) * d;
            let (k_new, v_new) = (&k[kv_row..][..d], &v[kv_row + slice.lo..][..m]);
            let new_key = own.then_some(k_new);
            let new_value = own.then_some(v_new);
            let q_row = |r: usize| &q[((u * g + r) * nb + i) * d..][..d];
            // Scores: row r holds query head r's scores against the seen cache rows, then the
            // new key where it is this function's.
            let mut s = vec![0.0f32; g * n];
            for (j, key) in k_seen.chunks_exact(d).chain(new_key).enumerate() {
                for r in 0..g {
                    s[r * n + j] = scale * dot(q_row(r), key);
                }
            }
            let mut inv = vec![0.0f32; g];
            let mut lse = vec![0.0f32; g];
            for (r, row) in s.chunks_exact_mut(n).enumerate() {
                // A NaN score makes the maximum NaN, and every weight with it; a +∞ one makes
                // the weights e^(∞ − ∞) = NaN. While every score is −∞, shift by 0 rather
                // than by −∞ (whose e^(−∞ − (−∞)) is NaN): the weights are 0 and the row is
                // NaN through its factor.
                let max = vexp::max(row);
                let shift = if max == f32::NEG_INFINITY { 0.0 } else { max };
                let sum = vexp::exp_shifted_sum(row, shift);
                inv[r] = if max == f32::NEG_INFINITY { f32::NAN } else { 1.0 / sum };
                lse[r] = if max == f32::NEG_INFINITY { f32::NEG_INFINITY } else { max + sum.ln() };
            }
            for (j, value) in v_seen.chunks_exact(m).chain(new_value).enumerate() {
                for (r, out) in acc.chunks_exact_mut(w).enumerate() {
                    let wt = s[r * n + j];
                    out[..m].iter_mut().zip(value).for_each(|(o, &x)| *o += wt * x);
                }
            }
            for ((out, &f), &l) in acc.chunks_exact_mut(w).zip(&inv).zip(&lse) {
                out[..m].iter_mut().for_each(|x| *x *= f);
                if partial {
                    out[m] = l;
                }
            }
        });
        // [kv head, sequence, g, w] to the output's [query head, sequence, w].
        let mut out = vec![0.0f32; grouped.len()];
        for (unit, rows_g) in grouped.chunks_exact(g * w).enumerate() {
            let (u, i) = (unit / nb, unit % nb);
            for (r, row) in rows_g.chunks_exact(w).enumerate() {
                out[((u * g + r) * nb + i) * w..][..w].copy_from_slice(row);
            }
        }
        Ok(out)
    }
}

/// `a · b`, added in 8 lanes (which the compiler keeps in a vector register) and then the
/// lanes in order.
fn dot(a: &[f32], b: &[f32]) -> f32 {
    const LANES: usize = 8;
    let mut lanes = [0.0f32; LANES];
    let (ca, cb) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let tail: f32 = ca.remainder().iter().zip(cb.remainder()).map(|(x, y)| x * y).sum();
    for (x, y) in ca.zip(cb) {
        for l in 0..LANES {
            lanes[l] += x[l] * y[l];
        }
    }
    lanes.iter().sum::<f32>() + tail
}

impl AbstractOperator for CachedAttention {
    fn kind(&self) -> &str {
        KIND
    }

    fn kernel_class(&self) -> KernelClass {
        KernelClass::Attention
    }

    fn inputs(&self) -> &[TensorDesc] {
        &self.inputs
    }

    fn outputs(&self) -> &[TensorDesc] {
        &self.outputs
    }

    /// The positions (input 5) lie in `0..=cache`.
    fn index_bound(&self, input: usize) -> Option<usize> {
        (input == POSITIONS).then(|| self.cache_capacity() + 1)
    }

    /// `heads_kv`, `batch`, `d_head` (output only), then the cache's rows (the key split;
    /// see the [module docs](self)).
    fn shardable(&self) -> Vec<ShardableIndex> {
        vec![
            ShardableIndex::any(self.inputs[K].dims[0].name.clone(), self.heads_kv()),
            ShardableIndex::any(self.inputs[Q].dims[1].name.clone(), self.batch()),
            ShardableIndex::any(self.inputs[Q].dims[2].name.clone(), self.d_head()),
            ShardableIndex::any(self.inputs[K_CACHE].dims[2].name.clone(), self.cache_capacity()),
        ]
    }

    /// [`Aggregation::Softmax`]: the partials of a key split are softmax-weighted averages
    /// over disjoint keys.
    fn aggregation(&self) -> Aggregation {
        Aggregation::Softmax
    }

    fn index_roles(&self) -> Vec<(String, IndexRole)> {
        let (q, k) = (&self.inputs[Q], &self.inputs[K]);
        let mut roles = vec![(q.dims[1].name.clone(), IndexRole::Tokens), (k.dims[0].name.clone(), IndexRole::HeadsKv)];
        if q.dims[0].name != k.dims[0].name {
            roles.push((q.dims[0].name.clone(), IndexRole::HeadsQ));
        }
        roles
    }

    fn op_role(&self) -> Option<OpRole> {
        Some(OpRole::Attention)
    }

    fn join_agg_spec(&self, intervals: &[Vec<Interval>]) -> Result<JoinAggSpec> {
        check_request(KIND, &self.shardable(), intervals)?;
        let (g, d) = (self.group(), Interval::full(self.d_head()));
        let functions = combinations(intervals)
            .into_iter()
            .map(|combo| {
                let (kv_heads, batch, features, cache) = (combo[0], combo[1], combo[2], combo[3]);
                let q_heads = Interval { lo: kv_heads.lo * g, hi: kv_heads.hi * g };
                let q = TensorType::from_intervals(vec![q_heads, batch, d]);
                let kv = TensorType::from_intervals(vec![kv_heads, batch, d]);
                let caches = TensorType::from_intervals(vec![kv_heads, batch, cache, d]);
                let positions = TensorType::from_intervals(vec![batch]);
                let out = TensorType::from_intervals(vec![q_heads, batch, features]);
                FunctionSpec { inputs: vec![q, kv.clone(), kv, caches.clone(), caches, positions], outputs: vec![out] }
            })
            .collect();
        Ok(JoinAggSpec { functions })
    }

    /// `(2 · d_head + 2 · slice) · heads_q · batch · keys` for the block's query heads and
    /// sequences, `slice` the output's features: `q Kᵀ` takes two operations per key and
    /// feature of the whole `d_head` in every function, `P V` two per key and feature of the
    /// slice (`4 · d_head` unsplit). A sequence reads `p + 1` keys, but its position is
    /// known only at run time, so the plan charges the cache block's rows, every step's most
    /// (`keys` is the block's row count, plus the new key for the last block, the whole
    /// cache's `cache + 1` without a key split).
    fn flops(&self, f: &FunctionSpec) -> f64 {
        let Some(qb) = f.inputs.first().filter(|b| b.rank() == 3) else {
            return 0.0;
        };
        let slice = f.outputs.first().filter(|b| b.rank() == 3).map_or(self.d_head(), |b| b.dim(2).len());
        let cache = self.cache_capacity();
        let rows = f.inputs.get(K_CACHE).filter(|b| b.rank() == 4).map_or(Interval::full(cache), |b| b.dim(2));
        let keys = (rows.len() + usize::from(rows.hi == cache)) as f64;
        (2.0 * self.d_head() as f64 + 2.0 * slice as f64) * qb.dim(0).len() as f64 * qb.dim(1).len() as f64 * keys
    }

    /// The output block, or (for a function of a key split, whose box is shared) its
    /// [`Aggregation::Softmax`] partial, one column wider along `d_head`.
    fn compute(&self, f: &FunctionSpec, inputs: &[HostTensor]) -> Result<Vec<HostTensor>> {
        let (slice, keys) = self.check_blocks(f, inputs)?;
        let partial = keys != Interval::full(self.cache_capacity());
        let ob = self.aggregation().partial_type(&f.outputs[0], partial);
        let out = if ob.is_empty() { Vec::new() } else { self.decode(f, inputs, slice, keys, partial)? };
        Ok(vec![HostTensor::from_f32(ob, self.outputs[0].dtype, out)?])
    }
}

#[cfg(test)]
mod tests;

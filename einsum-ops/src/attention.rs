//! Scaled dot-product attention: grouped-query, optionally causal, over packed sequences
//! (Example 3.10), with a FlashAttention-style CPU kernel.
//!
//! Inputs are `q: [heads_q, sequence, d_head]`, `k, v: [heads_kv, sequence, d_head]`;
//! [`Attention::named`] finds `sequence` and `d_head` by name and refuses other layouts,
//! [`Attention::new`] reads them by position. The output has `q`'s type. Query head `h` reads
//! key/value head `h / (heads_q / heads_kv)`. Key `j` is visible to query `i` iff both lie in
//! the same packed sequence and, when causal, `j <= i`.
//!
//! Non-finite values: query `i`'s output is NumPy's `softmax(s) @ v[visible]` over the scores
//! `s_j = scale · q_i · k_j` of the keys `j` it sees, `softmax(s) = e^(s − max s) / Σ e^(s − max s)`.
//! So a NaN score (a NaN in `q_i` or in a seen `k_j`) makes the whole output row NaN; a `+∞`
//! score does too (`∞ − ∞`); a `−∞` score gets weight 0 unless every seen score is `−∞`,
//! when the row is NaN; a NaN or infinity in a seen `v_j` reaches that column (`0 · ∞` is
//! NaN where its weight underflows to 0). A key the query does not see contributes nothing,
//! whatever its `k` and `v` hold, so a decomposed run (whose blocks hold only the keys their
//! queries see) equals the whole one.
//!
//! Three shardable indices, in this order:
//! 0. `heads_kv` (named after `k`'s first index), anywhere: sharding it shards `heads_q` in
//!    groups of `heads_q / heads_kv`.
//! 1. `sequence` (named after `q`'s second index), only at the ends of packed sequences:
//!    every tensor's sequence rows follow the interval.
//! 2. `query`, anywhere over the sequence extent: the query rows `[a, b)` and the output rows
//!    `[a, b)`, with every key and value row those queries can see. Never combined with a
//!    split of `sequence`. A causal query split is load-imbalanced, and [`flops`] shows it.
//!
//! Roles (for strategies that follow a model's structure): the operator is
//! [`OpRole::Attention`]; `sequence` has [`IndexRole::Tokens`], `query`
//! [`IndexRole::QueryBlocks`], `heads_kv` [`IndexRole::HeadsKv`], and `q`'s head index
//! [`IndexRole::HeadsQ`] (unless it has `k`'s name, as in plain multi-head attention, where
//! the one head index is `heads_kv`).
//!
//! [`flops`]: AbstractOperator::flops

use einsum_core::{HostTensor, Interval, KernelClass, TensorDesc, TensorType};
use einsum_joinagg::{
    AbstractOperator, Error, FunctionSpec, IndexRole, JoinAggSpec, OpRole, Result, ShardableIndex, check_request,
    combinations,
};

use crate::Packing;
use crate::{
    common::{check_call, f32s, kernel_error},
    parallel, vexp,
};

const KIND: &str = "attention";

/// Name of the shardable index that splits the query rows.
pub const QUERY_INDEX: &str = "query";

/// Query rows per kernel tile.
const TILE_Q: usize = 128;
/// Key rows per kernel tile.
const TILE_K: usize = 128;

/// How attention masks and scales its scores.
#[derive(Clone, Debug, PartialEq)]
pub struct AttentionConfig {
    /// Query `i` sees only keys `j <= i` (within its packed sequence).
    pub causal: bool,
    /// Where the packed sequences along the sequence index end; attention never crosses one.
    pub packing: Packing,
    /// The factor applied to `q · k`; `None` means `1 / sqrt(d_head)`.
    pub scale: Option<f32>,
}

impl AttentionConfig {
    /// A configuration with the default scale `1 / sqrt(d_head)`.
    pub fn new(causal: bool, packing: Packing) -> Self {
        Self { causal, packing, scale: None }
    }
}

/// Grouped-query attention over packed sequences (see the [module docs](self)).
#[derive(Clone, Debug)]
pub struct Attention {
    inputs: Vec<TensorDesc>,
    outputs: Vec<TensorDesc>,
    config: AttentionConfig,
    scale: f32,
}

impl Attention {
    /// Attention of `q: [heads_q, sequence, d_head]` over `k, v: [heads_kv, sequence,
    /// d_head]`.
    ///
    /// Errors name the offending index: a zero extent, `heads_q` not a multiple of
    /// `heads_kv`, `k` and `v` with different head counts, sequence or `d_head` extents that
    /// differ, a packing whose total is not the sequence extent, or shardable indices whose
    /// names clash (`k`'s heads named like `q`'s sequence, or either named
    /// [`QUERY_INDEX`]). A rank other than 3, mixed dtypes or a non-finite scale are
    /// [`Error::Invalid`].
    pub fn new(q: &TensorDesc, k: &TensorDesc, v: &TensorDesc, config: AttentionConfig) -> Result<Attention> {
        Self::build(q, k, v, config)
    }

    /// Attention bound by index name: `sequence` and `d_head` name those indices in each of
    /// `q`, `k` and `v`, and `k` and `v` name their head index alike. The kernel reads
    /// `[heads, sequence, d_head]`, so an operand laid out otherwise (Hugging Face's
    /// `[tokens, heads, d_head]`) is an [`Error::Shape`] naming it and its indices rather
    /// than a positional guess that would take tokens for heads; so is a missing index.
    /// Then as [`Attention::new`].
    pub fn named(
        q: &TensorDesc,
        k: &TensorDesc,
        v: &TensorDesc,
        sequence: &str,
        d_head: &str,
        config: AttentionConfig,
    ) -> Result<Attention> {
        let shape = |index: &str, reason: String| Error::Shape { op: KIND.into(), index: index.into(), reason };
        for (role, t) in [("q", q), ("k", k), ("v", v)] {
            for (pos, name) in [(1, sequence), (2, d_head)] {
                match t.position(name) {
                    None => return Err(shape(name, format!("not an index of {role} [{}]", t.dims_string()))),
                    Some(p) if p != pos || t.rank() != 3 => {
                        return Err(shape(
                            name,
                            format!(
                                "{role} is [{}]; attention reads [heads, {sequence}, {d_head}], so permute it \
                                 first (an einsum such as \"thd->htd\")",
                                t.dims_string()
                            ),
                        ));
                    }
                    Some(_) => {}
                }
            }
        }
        if k.dims[0].name != v.dims[0].name {
            return Err(shape(
                &v.dims[0].name,
                format!(
                    "k [{}] and v [{}] name their head index differently; key and value heads are one index",
                    k.dims_string(),
                    v.dims_string()
                ),
            ));
        }
        Self::build(q, k, v, config)
    }

    fn build(q: &TensorDesc, k: &TensorDesc, v: &TensorDesc, config: AttentionConfig) -> Result<Attention> {
        let shape = |index: &str, reason: String| Error::Shape { op: KIND.into(), index: index.into(), reason };
        let invalid = |reason: String| Error::Invalid { op: KIND.into(), reason };
        let tensors = [("q", q), ("k", k), ("v", v)];
        for (role, t) in tensors {
            if t.rank() != 3 {
                return Err(invalid(format!(
                    "{role} must have rank 3 ([heads, sequence, d_head]), got [{}]",
                    t.dims_string()
                )));
            }
            if let Some(dim) = t.dims.iter().find(|d| d.extent == 0) {
                return Err(shape(&dim.name, format!("{role} has a zero extent")));
            }
        }
        if q.dtype != k.dtype || q.dtype != v.dtype {
            return Err(invalid(format!("mixed dtypes: q {}, k {}, v {}", q.dtype, k.dtype, v.dtype)));
        }
        let (hq, hkv) = (q.dims[0].extent, k.dims[0].extent);
        if v.dims[0].extent != hkv {
            return Err(shape(&v.dims[0].name, format!("v has {} heads, k has {hkv}", v.dims[0].extent)));
        }
        if !hq.is_multiple_of(hkv) {
            return Err(shape(
                &q.dims[0].name,
                format!("{hq} query heads are not a multiple of {hkv} key/value heads"),
            ));
        }
        for (pos, what) in [(1, "sequence"), (2, "d_head")] {
            for (role, t) in &tensors[1..] {
                if t.dims[pos].extent != q.dims[pos].extent {
                    return Err(shape(
                        &t.dims[pos].name,
                        format!("{role} has {what} extent {}, q has {}", t.dims[pos].extent, q.dims[pos].extent),
                    ));
                }
            }
        }
        // The shardable indices are reported by name, so their names must differ.
        let (heads_name, seq_name) = (&k.dims[0].name, &q.dims[1].name);
        // `q`'s head index is not shardable, but its role is declared by name (see
        // `index_roles`), so it must not take the query-split's name either.
        for name in [heads_name, seq_name, &q.dims[0].name] {
            if name == QUERY_INDEX {
                return Err(shape(name, format!("`{QUERY_INDEX}` names the query-split shardable index")));
            }
        }
        if heads_name == seq_name {
            return Err(shape(seq_name, "names both the key/value heads of k and the sequence of q".into()));
        }
        let seq = q.dims[1].extent;
        if config.packing.total() != seq {
            return Err(shape(
                &q.dims[1].name,
                format!("the packed sequences end at {}, the sequence extent is {seq}", config.packing.total()),
            ));
        }
        let scale = match config.scale {
            Some(s) if !s.is_finite() => return Err(invalid(format!("the scale must be finite, got {s}"))),
            Some(s) => s,
            None => 1.0 / (q.dims[2].extent as f32).sqrt(),
        };
        Ok(Attention { inputs: vec![q.clone(), k.clone(), v.clone()], outputs: vec![q.clone()], config, scale })
    }

    /// The masking configuration.
    pub fn config(&self) -> &AttentionConfig {
        &self.config
    }

    /// The factor applied to `q · k` (the configured one, or `1 / sqrt(d_head)`).
    pub fn scale(&self) -> f32 {
        self.scale
    }

    fn heads_q(&self) -> usize {
        self.inputs[0].dims[0].extent
    }

    fn heads_kv(&self) -> usize {
        self.inputs[1].dims[0].extent
    }

    /// Query heads per key/value head.
    fn group(&self) -> usize {
        self.heads_q() / self.heads_kv()
    }

    fn seq(&self) -> usize {
        self.inputs[0].dims[1].extent
    }

    fn d_head(&self) -> usize {
        self.inputs[0].dims[2].extent
    }

    /// The keys query `i` sees, `[start, end)`.
    fn visible(&self, i: usize) -> (usize, usize) {
        let p = &self.config.packing;
        (p.start_of(i), if self.config.causal { i + 1 } else { p.end_of(i) })
    }

    /// The keys some query of the non-empty `rows` sees: one interval, because visibility
    /// bounds grow with the query position.
    fn visible_keys(&self, rows: Interval) -> Interval {
        Interval { lo: self.visible(rows.lo).0, hi: self.visible(rows.hi - 1).1 }
    }

    /// Number of visible (query, key) pairs with the query in `rows` and the key in `keys`.
    fn visible_pairs(&self, rows: Interval, keys: Interval) -> u128 {
        let p = &self.config.packing;
        let mut total = 0u128;
        let mut start = if rows.is_empty() { rows.hi } else { p.start_of(rows.lo) };
        while start < rows.hi {
            let end = p.end_of(start);
            let (r0, r1) = (rows.lo.max(start) as u128, rows.hi.min(end) as u128);
            let lo = keys.lo.max(start) as u128;
            if self.config.causal {
                // Row i sees keys [lo, min(i + 1, keys.hi)); with c = i + 1 in (r0, r1]:
                // 0 for c <= lo, c - lo up to c = keys.hi, then keys.hi - lo.
                let hi = keys.hi as u128;
                let (a, b) = ((r0 + 1).max(lo + 1), r1.min(hi));
                if a <= b {
                    total += (b - a + 1) * (a - lo + b - lo) / 2;
                }
                let c = (r0 + 1).max(hi + 1);
                if hi > lo && c <= r1 {
                    total += (r1 - c + 1) * (hi - lo);
                }
            } else {
                let hi = keys.hi.min(end) as u128;
                total += (r1 - r0) * hi.saturating_sub(lo);
            }
            start = end;
        }
        total
    }

    fn kernel_error(reason: String) -> Error {
        kernel_error(KIND, reason)
    }

    /// Checks that `f` and `inputs` are blocks this kernel can compute on: the generic
    /// checks of [`check_call`], then the attention-specific ones (`d_head` whole, equal k
    /// and v blocks, the output block the q block, and every key/value head and key the
    /// queries need inside the k/v block).
    fn check_blocks(&self, f: &FunctionSpec, inputs: &[HostTensor]) -> Result<()> {
        check_call(self, f, inputs)?;
        for (n, (block, desc)) in f.inputs.iter().zip(&self.inputs).enumerate() {
            if block.dim(2) != Interval::full(self.d_head()) {
                return Err(Self::kernel_error(format!(
                    "input {n} block {block}: d_head `{}` must be whole",
                    desc.dims[2].name
                )));
            }
        }
        let (qb, kb) = (&f.inputs[0], &f.inputs[1]);
        if f.inputs[2] != *kb {
            return Err(Self::kernel_error(format!("k block {kb} and v block {} differ", f.inputs[2])));
        }
        if f.outputs[0] != *qb {
            return Err(Self::kernel_error(format!("output block {} is not the q block {qb}", f.outputs[0])));
        }
        let (heads, rows) = (qb.dim(0), qb.dim(1));
        if heads.is_empty() || rows.is_empty() {
            return Ok(());
        }
        let g = self.group();
        let need_heads = Interval { lo: heads.lo / g, hi: (heads.hi - 1) / g + 1 };
        if !need_heads.is_within(&kb.dim(0)) {
            return Err(Self::kernel_error(format!(
                "query heads {heads} need key/value heads {need_heads}, the k/v block has {}",
                kb.dim(0)
            )));
        }
        let need_keys = self.visible_keys(rows);
        if !need_keys.is_within(&kb.dim(1)) {
            return Err(Self::kernel_error(format!(
                "query rows {rows} see keys {need_keys}, the k/v block has rows {}",
                kb.dim(1)
            )));
        }
        Ok(())
    }

    /// The FlashAttention-style kernel on checked blocks: for every query head and tile of
    /// `tile_q` query rows, walks the visible key tiles of `tile_k` rows keeping a running
    /// maximum and sum per row (online softmax), so no full score matrix is ever formed.
    /// Non-finite values follow the module doc's semantics whatever the tiling.
    fn flash(
        &self,
        q: &[f32],
        k: &[f32],
        v: &[f32],
        qb: &TensorType,
        kb: &TensorType,
        tiles: (usize, usize),
    ) -> Vec<f32> {
        let (tile_q, tile_k) = (tiles.0.max(1), tiles.1.max(1));
        let (d, g) = (self.d_head(), self.group());
        let (heads, rows, kv_heads, keys) = (qb.dim(0), qb.dim(1), kb.dim(0), kb.dim(1));
        let (nq, nk) = (rows.len(), keys.len());
        // Visible key range of every query row, absolute.
        let bounds: Vec<(usize, usize)> = (rows.lo..rows.hi).map(|i| self.visible(i)).collect();
        // For every key/value head and key of the block: whether its value row holds a NaN
        // or an infinity (one pass over v, against the nq · nk · d of the products).
        // (An exponent of all ones is an infinity or a NaN; the or-fold vectorizes.)
        let non_finite = |x: f32| x.to_bits() & 0x7f80_0000 == 0x7f80_0000;
        let v_bad: Vec<bool> =
            v.chunks_exact(d.max(1)).map(|row| row.iter().fold(false, |b, &x| b | non_finite(x))).collect();
        let mut out = vec![0.0f32; heads.len() * nq * d];
        // Heads are independent: spread them over the kernel's helper threads, each with
        // its own scratch.
        parallel::for_chunks_mut(&mut out, nq * d, |i, out_h| {
            let h = heads.lo + i;
            let mut scores = vec![0.0f32; tile_q * tile_k];
            let (mut run_max, mut run_sum) = (vec![0.0f32; tile_q], vec![0.0f32; tile_q]);
            let kvh = h / g - kv_heads.lo;
            let q_h = &q[i * nq * d..][..nq * d];
            let k_h = &k[kvh * nk * d..][..nk * d];
            let v_h = &v[kvh * nk * d..][..nk * d];
            let v_bad = &v_bad[kvh * nk..][..nk];
            for t0 in (0..nq).step_by(tile_q) {
                let t1 = (t0 + tile_q).min(nq);
                let tq = t1 - t0;
                let acc = &mut out_h[t0 * d..t1 * d];
                run_max[..tq].fill(f32::NEG_INFINITY);
                run_sum[..tq].fill(0.0);
                let first = bounds[t0].0.max(keys.lo);
                let last = bounds[t1 - 1].1.min(keys.hi);
                for j0 in (first..last).step_by(tile_k) {
                    let j1 = (j0 + tile_k).min(last);
                    let tk = j1 - j0;
                    let tile_bounds = &bounds[t0..t1];
                    if !tile_bounds.iter().any(|&(lo, hi)| lo < j1 && j0 < hi) {
                        continue;
                    }
                    let s = &mut scores[..tq * tk];
                    let k_tile = &k_h[(j0 - keys.lo) * d..(j1 - keys.lo) * d];
                    let v_tile = &v_h[(j0 - keys.lo) * d..(j1 - keys.lo) * d];
                    // S = scale · Q Kᵀ (Kᵀ read through swapped strides).
                    gemm(
                        (tq, d, tk),
                        self.scale,
                        Mat { data: &q_h[t0 * d..t1 * d], rs: d, cs: 1 },
                        Mat { data: k_tile, rs: 1, cs: d },
                        0.0,
                        MatMut { data: s, rs: tk },
                    );
                    for (r, &(lo, hi)) in tile_bounds.iter().enumerate() {
                        let row = &mut s[r * tk..(r + 1) * tk];
                        let (a, b) = (lo.max(j0), hi.min(j1));
                        if a >= b {
                            row.fill(0.0);
                            continue;
                        }
                        let (a, b) = (a - j0, b - j0);
                        row[..a].fill(0.0);
                        row[b..].fill(0.0);
                        // The tile's maximum through `f32::max`, which the compiler vectorizes
                        // and which drops a NaN: the NaN still reaches the output, as its weight
                        // e^(NaN − m) is NaN, which makes the row's sum and P V NaN for good
                        // (NaN · rescale, NaN + s), as NumPy's NaN maximum would. (A NaN-keeping
                        // maximum measured slower here, on tiles of up to 128 scores.)
                        let tile_max = row[a..b].iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
                        let new_max = vexp::maximum(run_max[r], tile_max);
                        // While every score seen is −∞, shift by 0 rather than by −∞ (whose
                        // e^(−∞ − (−∞)) is NaN): those scores get weight 0, and a later finite
                        // score takes over as the maximum (the rescale of the empty past is 0).
                        let shift = if new_max == f32::NEG_INFINITY { 0.0 } else { new_max };
                        let rescale = if run_max[r] == f32::NEG_INFINITY { 0.0 } else { vexp::exp(run_max[r] - shift) };
                        let sum = vexp::exp_shifted_sum(&mut row[a..b], shift);
                        run_sum[r] = run_sum[r] * rescale + sum;
                        run_max[r] = new_max;
                        if rescale != 1.0 {
                            acc[r * d..(r + 1) * d].iter_mut().for_each(|x| *x *= rescale);
                        }
                    }
                    if v_bad[j0 - keys.lo..j1 - keys.lo].iter().any(|&bad| bad) {
                        // A value that is not finite: P V over the whole tile would carry it
                        // as 0 · NaN (or 0 · ∞) into the rows that do not see its key, so
                        // each row adds only the keys it sees.
                        for (r, &(lo, hi)) in tile_bounds.iter().enumerate() {
                            let out = &mut acc[r * d..(r + 1) * d];
                            for j in lo.max(j0)..hi.min(j1) {
                                let (p, vj) = (s[r * tk + j - j0], &v_tile[(j - j0) * d..][..d]);
                                out.iter_mut().zip(vj).for_each(|(o, &x)| *o += p * x);
                            }
                        }
                    } else {
                        // acc += P V.
                        gemm(
                            (tq, tk, d),
                            1.0,
                            Mat { data: s, rs: tk, cs: 1 },
                            Mat { data: v_tile, rs: d, cs: 1 },
                            1.0,
                            MatMut { data: acc, rs: d },
                        );
                    }
                }
                for (r, &sum) in run_sum[..tq].iter().enumerate() {
                    // Every row sees a key; a maximum still −∞ means every score it saw was
                    // −∞, where the softmax is NaN (−∞ − (−∞)). Otherwise the key at the
                    // maximum has weight 1, and the sum is at least 1 (or NaN).
                    let inv = if run_max[r] == f32::NEG_INFINITY { f32::NAN } else { 1.0 / sum };
                    acc[r * d..(r + 1) * d].iter_mut().for_each(|x| *x *= inv);
                }
            }
        });
        out
    }
}

impl AbstractOperator for Attention {
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

    fn shardable(&self) -> Vec<ShardableIndex> {
        let seq = self.seq();
        vec![
            ShardableIndex::any(self.inputs[1].dims[0].name.clone(), self.heads_kv()),
            ShardableIndex::at(self.inputs[0].dims[1].name.clone(), seq, self.config.packing.interior_cuts().to_vec()),
            ShardableIndex::any(QUERY_INDEX, seq),
        ]
    }

    fn index_roles(&self) -> Vec<(String, IndexRole)> {
        let (q, k) = (&self.inputs[0], &self.inputs[1]);
        let mut roles = vec![
            (q.dims[1].name.clone(), IndexRole::Tokens),
            (QUERY_INDEX.to_string(), IndexRole::QueryBlocks),
            (k.dims[0].name.clone(), IndexRole::HeadsKv),
        ];
        if q.dims[0].name != k.dims[0].name {
            roles.push((q.dims[0].name.clone(), IndexRole::HeadsQ));
        }
        roles
    }

    fn op_role(&self) -> Option<OpRole> {
        Some(OpRole::Attention)
    }

    fn join_agg_spec(&self, intervals: &[Vec<Interval>]) -> Result<JoinAggSpec> {
        let shardable = self.shardable();
        check_request(KIND, &shardable, intervals)?;
        if intervals[1].len() > 1 && intervals[2].len() > 1 {
            return Err(Error::Unsupported {
                op: KIND.into(),
                reason: format!(
                    "`{}` ({} intervals) and `{}` ({} intervals) both split the sequence rows",
                    shardable[1].name,
                    intervals[1].len(),
                    shardable[2].name,
                    intervals[2].len()
                ),
            });
        }
        let (g, d) = (self.group(), Interval::full(self.d_head()));
        let functions = combinations(intervals)
            .into_iter()
            .map(|combo| {
                let (kv_heads, seq, query) = (combo[0], combo[1], combo[2]);
                // One of `seq` and `query` is whole, so this is the other one.
                let rows = Interval { lo: seq.lo.max(query.lo), hi: seq.hi.min(query.hi) };
                let q_heads = Interval { lo: kv_heads.lo * g, hi: kv_heads.hi * g };
                let q = TensorType::from_intervals(vec![q_heads, rows, d]);
                let kv = TensorType::from_intervals(vec![kv_heads, self.visible_keys(rows), d]);
                FunctionSpec { inputs: vec![q.clone(), kv.clone(), kv], outputs: vec![q] }
            })
            .collect();
        Ok(JoinAggSpec { functions })
    }

    /// `4 · d_head · (visible (query, key) pairs) · (query heads)`: `Q Kᵀ` and `P V` each
    /// take two operations per pair and feature, so a causal query block late in a sequence
    /// costs more than an early one.
    fn flops(&self, f: &FunctionSpec) -> f64 {
        let (Some(qb), Some(kb)) = (f.inputs.first(), f.inputs.get(1)) else {
            return 0.0;
        };
        if qb.rank() != 3 || kb.rank() != 3 {
            return 0.0;
        }
        let pairs = self.visible_pairs(qb.dim(1), kb.dim(1)) as f64;
        4.0 * self.d_head() as f64 * pairs * qb.dim(0).len() as f64
    }

    fn compute(&self, f: &FunctionSpec, inputs: &[HostTensor]) -> Result<Vec<HostTensor>> {
        self.check_blocks(f, inputs)?;
        let (qb, kb) = (&f.inputs[0], &f.inputs[1]);
        let out = if qb.is_empty() {
            Vec::new()
        } else {
            let (q, k, v) = (f32s(&inputs[0]), f32s(&inputs[1]), f32s(&inputs[2]));
            self.flash(&q, &k, &v, qb, kb, (TILE_Q, TILE_K))
        };
        Ok(vec![HostTensor::from_f32(qb.clone(), self.outputs[0].dtype, out)?])
    }
}

/// A read-only row-major view: element `(r, c)` at `data[r * rs + c * cs]`.
struct Mat<'a> {
    data: &'a [f32],
    rs: usize,
    cs: usize,
}

/// A writable view with unit column stride: element `(r, c)` at `data[r * rs + c]`.
struct MatMut<'a> {
    data: &'a mut [f32],
    rs: usize,
}

/// `C ← alpha · A B + beta · C` for `A: m × k`, `B: k × n`, `C: m × n`, through
/// `matrixmultiply::sgemm`, after checking every view stays inside its slice.
fn gemm((m, k, n): (usize, usize, usize), alpha: f32, a: Mat<'_>, b: Mat<'_>, beta: f32, c: MatMut<'_>) {
    if m == 0 || n == 0 {
        return;
    }
    let last = |rows: usize, cols: usize, rs: usize, cs: usize| (rows - 1) * rs + (cols.max(1) - 1) * cs;
    assert!(k == 0 || last(m, k, a.rs, a.cs) < a.data.len(), "gemm: A view exceeds its slice");
    assert!(k == 0 || last(k, n, b.rs, b.cs) < b.data.len(), "gemm: B view exceeds its slice");
    assert!(last(m, n, c.rs, 1) < c.data.len(), "gemm: C view exceeds its slice");
    let s = |x: usize| x as isize;
    // SAFETY: the assertions above keep every element sgemm reads of A and B and writes of
    // C inside the borrowed slices; C is exclusively borrowed, so it aliases neither A nor B.
    unsafe {
        matrixmultiply::sgemm(
            m,
            k,
            n,
            alpha,
            a.data.as_ptr(),
            s(a.rs),
            s(a.cs),
            b.data.as_ptr(),
            s(b.rs),
            s(b.cs),
            beta,
            c.data.as_mut_ptr(),
            s(c.rs),
            1,
        );
    }
}

#[cfg(test)]
mod tests {
    use einsum_core::DType;
    use einsum_joinagg::{decomposition_error, enumerate_specs, execute_whole, request_spec};

    use super::*;

    fn desc(dims: &[(&str, usize)]) -> TensorDesc {
        TensorDesc::of(dims, DType::F32).unwrap()
    }

    fn op(hkv: usize, group: usize, d: usize, causal: bool, ends: Vec<usize>) -> Attention {
        let s = *ends.last().unwrap();
        let q = desc(&[("heads_q", hkv * group), ("sequence", s), ("d_head", d)]);
        let kv = desc(&[("heads_kv", hkv), ("sequence", s), ("d_head", d)]);
        Attention::new(&q, &kv, &kv, AttentionConfig::new(causal, Packing::new(ends).unwrap())).unwrap()
    }

    /// Materialises the scores of every head: the reference the kernel must match.
    fn naive(op: &Attention, q: &HostTensor, k: &HostTensor, v: &HostTensor) -> Vec<f32> {
        let (hq, s, d, g) = (op.heads_q(), op.seq(), op.d_head(), op.group());
        let mut out = vec![0.0f32; hq * s * d];
        for h in 0..hq {
            for i in 0..s {
                let (lo, hi) = op.visible(i);
                let scores: Vec<f32> = (lo..hi)
                    .map(|j| {
                        op.scale
                            * (0..d).map(|e| q.get(&[h, i, e]).unwrap() * k.get(&[h / g, j, e]).unwrap()).sum::<f32>()
                    })
                    .collect();
                let max = scores.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
                let w: Vec<f32> = scores.iter().map(|x| (x - max).exp()).collect();
                let total: f32 = w.iter().sum();
                for e in 0..d {
                    let y: f32 = (lo..hi).zip(&w).map(|(j, w)| w * v.get(&[h / g, j, e]).unwrap()).sum();
                    out[(h * s + i) * d + e] = y / total;
                }
            }
        }
        out
    }

    fn inputs(op: &Attention, seed: u64) -> Vec<HostTensor> {
        op.inputs()
            .iter()
            .enumerate()
            .map(|(n, d)| HostTensor::random(d.tensor_type(), d.dtype, seed + n as u64))
            .collect()
    }

    #[test]
    fn example_3_10_heads_kv_split_shards_query_heads_in_groups() {
        let q = desc(&[("heads_q", 32), ("sequence", 4096), ("d_head", 128)]);
        let kv = desc(&[("heads_kv", 8), ("sequence", 4096), ("d_head", 128)]);
        let packing = Packing::new(vec![1024, 2560, 4096]).unwrap();
        let op = Attention::new(&q, &kv, &kv, AttentionConfig::new(true, packing)).unwrap();
        let shardable = op.shardable();
        assert_eq!(shardable.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(), ["heads_kv", "sequence", "query"]);
        assert_eq!(shardable[1].max_parts(), 3);

        let heads: Vec<Interval> = (0..8).map(|m| Interval { lo: m, hi: m + 1 }).collect();
        let whole = vec![Interval::full(4096)];
        let spec = op.join_agg_spec(&[heads, whole.clone(), whole.clone()]).unwrap();
        assert_eq!(spec.len(), 8);
        for (m, f) in spec.functions.iter().enumerate() {
            let kv = TensorType::new(&[m, 0, 0], &[m + 1, 4096, 128]).unwrap();
            let qo = TensorType::new(&[4 * m, 0, 0], &[4 * m + 4, 4096, 128]).unwrap();
            assert_eq!(f.inputs, vec![qo.clone(), kv.clone(), kv]);
            assert_eq!(f.outputs, vec![qo]);
        }
        einsum_joinagg::validate_spec(&op, &spec, Some(8)).unwrap();

        // The sequence index may be cut only at sequence ends.
        let at_2048 = vec![Interval { lo: 0, hi: 2048 }, Interval { lo: 2048, hi: 4096 }];
        let err = op.join_agg_spec(&[vec![Interval::full(8)], at_2048, whole.clone()]).unwrap_err();
        assert!(matches!(&err, Error::BadIntervals { index, .. } if index == "sequence"), "{err}");
        assert!(err.to_string().contains("2048"));
        let at_ends = vec![Interval { lo: 0, hi: 1024 }, Interval { lo: 1024, hi: 4096 }];
        let spec = op.join_agg_spec(&[vec![Interval::full(8)], at_ends, whole]).unwrap();
        assert_eq!(spec.functions[1].inputs[1], TensorType::new(&[0, 1024, 0], &[8, 4096, 128]).unwrap());
    }

    #[test]
    fn query_split_sees_the_keys_of_its_sequences() {
        let causal = op(1, 1, 2, true, vec![4, 10]);
        let whole = |n| vec![Interval::full(n)];
        let query = vec![Interval { lo: 0, hi: 6 }, Interval { lo: 6, hi: 10 }];
        let spec = causal.join_agg_spec(&[whole(1), whole(10), query.clone()]).unwrap();
        assert_eq!(spec.functions[0].inputs[1].dim(1), Interval { lo: 0, hi: 6 });
        assert_eq!(spec.functions[1].inputs[1].dim(1), Interval { lo: 4, hi: 10 });
        let full = op(1, 1, 2, false, vec![4, 10]);
        let spec = full.join_agg_spec(&[whole(1), whole(10), query]).unwrap();
        assert_eq!(spec.functions[0].inputs[1].dim(1), Interval { lo: 0, hi: 10 });
        let spec =
            full.join_agg_spec(&[whole(1), whole(10), vec![Interval { lo: 0, hi: 3 }, Interval { lo: 3, hi: 10 }]]);
        assert_eq!(spec.unwrap().functions[0].inputs[1].dim(1), Interval { lo: 0, hi: 4 });
    }

    #[test]
    fn sequence_and_query_splits_do_not_combine() {
        let a = op(1, 2, 2, true, vec![4, 8]);
        let err = request_spec(&a, &[1, 2, 2]).unwrap_err();
        assert!(matches!(err, Error::Unsupported { .. }), "{err}");
        // p = 4 exists only through the query split (sequence has two parts at most).
        let specs = enumerate_specs(&a, 4).unwrap();
        assert_eq!(specs.iter().map(|c| c.counts.clone()).collect::<Vec<_>>(), vec![vec![1, 1, 4]]);
        let b = op(1, 1, 2, true, vec![3]);
        assert!(matches!(enumerate_specs(&b, 5), Err(Error::NoSpec { p: 5, .. })));
    }

    #[test]
    fn small_tiles_match_the_naive_reference() {
        for causal in [true, false] {
            let a = op(2, 3, 4, causal, vec![5, 7, 19]);
            let ins = inputs(&a, 11);
            let want = naive(&a, &ins[0], &ins[1], &ins[2]);
            let (qb, kb) = (a.inputs[0].tensor_type(), a.inputs[1].tensor_type());
            let (q, k, v) = (ins[0].to_f32(), ins[1].to_f32(), ins[2].to_f32());
            for tiles in [(1, 1), (3, 2), (4, 5), (64, 64), (19, 19)] {
                let got = a.flash(&q, &k, &v, &qb, &kb, tiles);
                let err = got.iter().zip(&want).map(|(x, y)| (x - y).abs()).fold(0.0f32, f32::max);
                assert!(err < 1e-5, "causal {causal} tiles {tiles:?}: {err}");
            }
            let whole = execute_whole(&a, &ins).unwrap();
            let err = whole[0].to_f32().iter().zip(&want).map(|(x, y)| (x - y).abs()).fold(0.0f32, f32::max);
            assert!(err < 1e-5, "{err}");
            // Heads spread over helper threads: the same bits.
            for helpers in [1, 5] {
                let lent = einsum_core::intra_op::with_helpers(helpers, || execute_whole(&a, &ins)).unwrap();
                assert_eq!(lent, whole, "causal {causal}, {helpers} helpers");
            }
        }
    }

    #[test]
    fn every_spec_on_a_few_devices_decomposes_exactly() {
        for causal in [true, false] {
            let a = op(2, 2, 4, causal, vec![3, 8, 13]);
            for p in 1..=6 {
                for choice in enumerate_specs(&a, p).unwrap() {
                    let err = decomposition_error(&a, &choice.spec, 5).unwrap();
                    assert!(err <= 1e-5, "p {p} counts {:?}: {err}", choice.counts);
                }
            }
        }
    }

    #[test]
    fn visible_pairs_match_brute_force() {
        for causal in [true, false] {
            let a = op(1, 1, 2, causal, vec![3, 4, 9, 12]);
            for (r0, r1, k0, k1) in (0..12).flat_map(|r0| {
                (r0 + 1..=12)
                    .flat_map(move |r1| (0..12).flat_map(move |k0| (k0 + 1..=12).map(move |k1| (r0, r1, k0, k1))))
            }) {
                let brute: usize = (r0..r1)
                    .map(|i| {
                        let (lo, hi) = a.visible(i);
                        (lo.max(k0)..hi.min(k1)).len()
                    })
                    .sum();
                let got = a.visible_pairs(Interval { lo: r0, hi: r1 }, Interval { lo: k0, hi: k1 });
                assert_eq!(got, brute as u128, "causal {causal} rows {r0}..{r1} keys {k0}..{k1}");
            }
        }
    }

    #[test]
    fn causal_query_split_is_imbalanced() {
        let causal = op(2, 2, 8, true, vec![64]);
        let spec = request_spec(&causal, &[1, 1, 4]).unwrap();
        let flops: Vec<f64> = spec.functions.iter().map(|f| causal.flops(f)).collect();
        // Rows [16m, 16m + 16) see sum (i + 1) keys, times 4 · d_head · 4 query heads.
        assert_eq!(flops[0], (4 * 8 * 4 * 136) as f64);
        assert!(flops[3] > flops[0]);
        assert!(flops.windows(2).all(|w| w[0] < w[1]));
        let whole = causal.flops(&einsum_joinagg::whole_spec(&causal));
        assert_eq!(flops.iter().sum::<f64>(), whole);

        let full = op(2, 2, 8, false, vec![64]);
        let spec = request_spec(&full, &[1, 1, 4]).unwrap();
        let flops: Vec<f64> = spec.functions.iter().map(|f| full.flops(f)).collect();
        assert!(flops.iter().all(|&x| x == flops[0]));
        assert_eq!(flops[0], (4 * 8 * 4 * 16 * 64) as f64);
    }

    #[test]
    fn construction_errors_name_the_index() {
        let q = desc(&[("hq", 6), ("s", 8), ("e", 4)]);
        let kv = desc(&[("hkv", 2), ("t", 8), ("f", 4)]);
        let cfg = AttentionConfig::new(true, Packing::single(8));
        let shape_index = |r: Result<Attention>| match r {
            Err(Error::Shape { index, .. }) => index,
            other => panic!("expected a shape error, got {other:?}"),
        };
        assert!(Attention::new(&q, &kv, &kv, cfg.clone()).is_ok());
        let kv4 = desc(&[("hkv", 4), ("t", 8), ("f", 4)]);
        assert_eq!(shape_index(Attention::new(&q, &kv4, &kv4, cfg.clone())), "hq");
        assert_eq!(shape_index(Attention::new(&q, &kv, &desc(&[("hv", 3), ("t", 8), ("f", 4)]), cfg.clone())), "hv");
        assert_eq!(shape_index(Attention::new(&q, &desc(&[("hkv", 2), ("t", 9), ("f", 4)]), &kv, cfg.clone())), "t");
        assert_eq!(shape_index(Attention::new(&q, &kv, &desc(&[("hkv", 2), ("t", 8), ("g", 3)]), cfg.clone())), "g");
        let bad_packing = AttentionConfig::new(true, Packing::new(vec![3, 9]).unwrap());
        assert_eq!(shape_index(Attention::new(&q, &kv, &kv, bad_packing)), "s");
        assert_eq!(
            shape_index(Attention::new(
                &TensorDesc {
                    dims: vec![
                        einsum_core::Dim::new("hq", 0),
                        einsum_core::Dim::new("s", 8),
                        einsum_core::Dim::new("e", 4)
                    ],
                    dtype: DType::F32
                },
                &kv,
                &kv,
                cfg.clone()
            )),
            "hq"
        );
        let query_named = desc(&[("hq", 6), ("query", 8), ("e", 4)]);
        assert_eq!(shape_index(Attention::new(&query_named, &kv, &kv, cfg.clone())), "query");
        let clash = desc(&[("s", 2), ("t", 8), ("f", 4)]);
        assert_eq!(shape_index(Attention::new(&q, &clash, &clash, cfg.clone())), "s");
        let rank2 = desc(&[("s", 8), ("e", 4)]);
        assert!(matches!(Attention::new(&rank2, &kv, &kv, cfg.clone()), Err(Error::Invalid { .. })));
        let half = TensorDesc::of(&[("hkv", 2), ("t", 8), ("f", 4)], DType::F16).unwrap();
        let err = Attention::new(&q, &kv, &half, cfg.clone()).unwrap_err();
        assert!(err.to_string().contains("mixed dtypes"), "{err}");
        let nan = AttentionConfig { scale: Some(f32::NAN), ..cfg };
        assert!(matches!(Attention::new(&q, &kv, &kv, nan), Err(Error::Invalid { .. })));
    }

    #[test]
    fn attention_declares_the_roles_of_its_indices() {
        let q = desc(&[("qh", 4), ("seq", 8), ("e", 4)]);
        let kv = desc(&[("kvh", 2), ("seq", 8), ("e", 4)]);
        let att = Attention::new(&q, &kv, &kv, AttentionConfig::new(true, Packing::single(8))).unwrap();
        assert_eq!(att.op_role(), Some(OpRole::Attention));
        let roles = att.index_roles();
        let role = |n: &str| roles.iter().find(|(name, _)| name == n).map(|(_, r)| *r);
        assert_eq!(role("seq"), Some(IndexRole::Tokens));
        assert_eq!(role(QUERY_INDEX), Some(IndexRole::QueryBlocks));
        assert_eq!(role("kvh"), Some(IndexRole::HeadsKv));
        assert_eq!(role("qh"), Some(IndexRole::HeadsQ));
        assert_eq!(roles.len(), 4);
        // Plain multi-head attention with one head name: that index is the key/value heads.
        let mha = desc(&[("h", 2), ("seq", 8), ("e", 4)]);
        let att = Attention::new(&mha, &mha, &mha, AttentionConfig::new(false, Packing::single(8))).unwrap();
        let roles = att.index_roles();
        assert!(roles.contains(&("h".to_string(), IndexRole::HeadsKv)));
        assert!(!roles.iter().any(|(_, r)| *r == IndexRole::HeadsQ), "{roles:?}");
        // A query head index named like the query split is refused when built.
        let clash = desc(&[(QUERY_INDEX, 4), ("seq", 8), ("e", 4)]);
        let err = Attention::new(&clash, &kv, &kv, AttentionConfig::new(true, Packing::single(8))).unwrap_err();
        assert!(matches!(err, Error::Shape { ref index, .. } if index == QUERY_INDEX), "{err}");
    }

    #[test]
    fn kernel_rejects_blocks_that_miss_visible_keys() {
        let a = op(2, 2, 4, false, vec![4, 8]);
        let ins = inputs(&a, 1);
        let q = TensorType::new(&[0, 4, 0], &[2, 8, 4]).unwrap();
        let short = TensorType::new(&[0, 4, 0], &[1, 7, 4]).unwrap();
        let f = FunctionSpec { inputs: vec![q.clone(), short.clone(), short.clone()], outputs: vec![q.clone()] };
        let blocks: Vec<HostTensor> = f.inputs.iter().zip(&ins).map(|(b, t)| t.slice(b).unwrap()).collect();
        let err = a.compute(&f, &blocks).unwrap_err();
        assert!(err.to_string().contains("see keys"), "{err}");

        let other_head = TensorType::new(&[1, 4, 0], &[2, 8, 4]).unwrap();
        let f = FunctionSpec { inputs: vec![q.clone(), other_head.clone(), other_head], outputs: vec![q.clone()] };
        let blocks: Vec<HostTensor> = f.inputs.iter().zip(&ins).map(|(b, t)| t.slice(b).unwrap()).collect();
        assert!(a.compute(&f, &blocks).unwrap_err().to_string().contains("key/value heads"));

        let kv = TensorType::new(&[0, 4, 0], &[1, 8, 4]).unwrap();
        let f = FunctionSpec { inputs: vec![q.clone(), kv.clone(), kv], outputs: vec![q] };
        let blocks: Vec<HostTensor> = f.inputs.iter().zip(&ins).map(|(b, t)| t.slice(b).unwrap()).collect();
        assert!(a.compute(&f, &blocks).is_ok());
        // A block that splits d_head.
        let (q2, kv2) =
            (TensorType::new(&[0, 4, 0], &[2, 8, 2]).unwrap(), TensorType::new(&[0, 4, 0], &[1, 8, 2]).unwrap());
        let f2 = FunctionSpec { inputs: vec![q2.clone(), kv2.clone(), kv2], outputs: vec![q2] };
        let blocks2: Vec<HostTensor> = f2.inputs.iter().zip(&ins).map(|(b, t)| t.slice(b).unwrap()).collect();
        assert!(a.compute(&f2, &blocks2).unwrap_err().to_string().contains("d_head `d_head` must be whole"));
        assert!(matches!(a.compute(&f, &blocks[..2]), Err(Error::Kernel { .. })));
        assert!(matches!(
            a.compute(&f, &[blocks[0].clone(), blocks[0].clone(), blocks[2].clone()]),
            Err(Error::Kernel { .. })
        ));
    }
}

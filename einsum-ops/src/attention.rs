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
                    softmax_tile(s, tile_bounds, (j0, j1), &mut run_max[..tq], &mut run_sum[..tq], acc, d);
                    if v_bad[j0 - keys.lo..j1 - keys.lo].iter().any(|&bad| bad) {
                        // A value that is not finite: each row adds only the keys it sees.
                        add_seen_keys(s, tile_bounds, (j0, j1), v_tile, acc, d);
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

/// The online softmax of one tile of scores `s` (query rows × keys `j0..j1`) for the flash
/// kernel: every row's scores outside the keys it sees are zeroed, the rest replaced by their
/// weights e^(x − m) against the row's running maximum `run_max`, which moves on, with the
/// running sum `run_sum` and the row's accumulated output in `acc` (rows of `d`) rescaled.
fn softmax_tile(
    s: &mut [f32],
    tile_bounds: &[(usize, usize)],
    (j0, j1): (usize, usize),
    run_max: &mut [f32],
    run_sum: &mut [f32],
    acc: &mut [f32],
    d: usize,
) {
    let tk = j1 - j0;
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
}

/// `acc += P V` over the keys `j0..j1` of a tile whose values hold a NaN or an infinity:
/// P V over the whole tile would carry it as 0 · NaN (or 0 · ∞) into the rows that do not
/// see its key, so each row adds only the keys it sees.
fn add_seen_keys(
    s: &[f32],
    tile_bounds: &[(usize, usize)],
    (j0, j1): (usize, usize),
    v_tile: &[f32],
    acc: &mut [f32],
    d: usize,
) {
    let tk = j1 - j0;
    for (r, &(lo, hi)) in tile_bounds.iter().enumerate() {
        let out = &mut acc[r * d..(r + 1) * d];
        for j in lo.max(j0)..hi.min(j1) {
            let (p, vj) = (s[r * tk + j - j0], &v_tile[(j - j0) * d..][..d]);
            out.iter_mut().zip(vj).for_each(|(o, &x)| *o += p * x);
        }
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
mod tests;

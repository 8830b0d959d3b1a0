//! Einsum: any contraction written as index strings (`ij,jk->ik`, `td,dhe->hte`,
//! `bij,bjk->bik`, `ij->j`, `ab,bc,cd->ad`), and matmul as its most common case.
//!
//! Every distinct letter is a shardable index that may be cut anywhere (Example 3.9): a
//! letter kept in the output passes its intervals through to the output tiling, a letter
//! contracted away makes partial outputs that are summed (⊕ = +). The kernel runs the
//! contraction pairwise, left to right, as batched GEMMs through `matrixmultiply::sgemm`,
//! spread over the threads the backend lends the kernel ([`einsum_core::intra_op`]): by
//! batch element when there are enough, else by rows of the output (each output element
//! is computed by the same operations either way, so the split never changes a bit).
//! f16/bf16 operands are not converted whole: a GEMM reads them in place and converts
//! cache-sized panels as it reaches them, accumulating in f32 ([`crate::panels`]); only an
//! operand that must be permuted or summed first is converted to f32 whole.

use std::borrow::Cow;

use einsum_core::{Dim, Elements, HostTensor, Interval, KernelClass, TensorDesc, TensorType, widen};
use einsum_joinagg::{AbstractOperator, DimIndex, Error, FunctionSpec, JoinAggSpec, Result, ShardableIndex, grid_spec};

use crate::{
    common::{check_call, kernel_error},
    panels::{self, Strided},
    parallel,
};

/// An einsum contraction over named-index tensors: `C = Σ_{contracted letters} A · B · ...`.
///
/// Letters map to tensor dimensions by position; letters absent from the output are summed
/// out. Three or more operands are contracted pairwise left to right, keeping the letters
/// that a later operand or the output still needs. Diagonals and traces (a letter repeated
/// inside one term) are not supported.
#[derive(Clone, Debug)]
pub struct Einsum {
    kind: &'static str,
    equation: String,
    /// The distinct letters, in order of first appearance in the input terms.
    letters: Vec<char>,
    /// The shardable index name of every letter.
    names: Vec<String>,
    /// The extent of every letter.
    extents: Vec<usize>,
    /// The letters (as ids into `letters`) of every input term.
    terms: Vec<Vec<usize>>,
    /// The letters of the output term.
    out: Vec<usize>,
    inputs: Vec<TensorDesc>,
    outputs: Vec<TensorDesc>,
    dims: DimIndex,
    plan: Plan,
}

/// How the kernel evaluates the equation, fixed at construction.
#[derive(Clone, Debug)]
struct Plan {
    steps: Vec<Step>,
    /// The accumulator's letters after the last step (operand 0's for a unary einsum).
    last: Vec<usize>,
    /// Letters of `last` summed out before the final permutation (unary einsums only).
    final_sum: Vec<usize>,
}

/// One pairwise contraction of the accumulator (left) with the next operand (right).
#[derive(Clone, Debug)]
struct Step {
    /// The right operand.
    operand: usize,
    /// The accumulator's letters before this step.
    left: Vec<usize>,
    /// Letters summed out of the accumulator first (in it only, and needed no more).
    sum_left: Vec<usize>,
    /// Letters summed out of the right operand first.
    sum_right: Vec<usize>,
    /// In both and needed later: batch dimensions.
    batch: Vec<usize>,
    /// In the accumulator only, needed later: GEMM rows.
    m: Vec<usize>,
    /// In the right operand only, needed later: GEMM columns.
    n: Vec<usize>,
    /// In both, needed no more: contracted.
    k: Vec<usize>,
}

impl Einsum {
    /// The contraction `equation` (e.g. `td,dhe->hte`) over `inputs`, one tensor per input
    /// term. Fails, naming the offending letter where there is one, on a malformed
    /// equation, a wrong operand count, a term whose length differs from its tensor's rank,
    /// a letter repeated in one term, a letter bound to different extents, an output letter
    /// found in no input, an extent of 0, or operands of different dtypes.
    pub fn new(equation: &str, inputs: &[TensorDesc]) -> Result<Einsum> {
        Self::build("einsum", equation, inputs)
    }

    /// The matrix multiply `ij,jk->ik` of Example 3.4 (kind `matmul`).
    pub fn matmul(a: &TensorDesc, b: &TensorDesc) -> Result<Einsum> {
        Self::build("matmul", "ij,jk->ik", &[a.clone(), b.clone()])
    }

    /// [`new`](Self::new) for operands whose indices are named: every letter must bind
    /// indices of one name in every operand it appears in, since a letter that binds
    /// `d_model` in one operand and `d_out` in another contracts them by position, a silently
    /// wrong result when the names say they differ. Refused naming the letter, both names
    /// and their operands.
    pub fn new_named(equation: &str, inputs: &[TensorDesc]) -> Result<Einsum> {
        let einsum = Self::build("einsum", equation, inputs)?;
        // Per letter: the first operand binding it, and the index name it binds there.
        let mut named: Vec<Option<(usize, &str)>> = vec![None; einsum.letters.len()];
        for (k, term) in einsum.terms.iter().enumerate() {
            for (&id, dim) in term.iter().zip(&inputs[k].dims) {
                match named[id] {
                    None => named[id] = Some((k, &dim.name)),
                    Some((k0, name0)) if name0 != dim.name => {
                        return Err(Error::Shape {
                            op: "einsum".to_string(),
                            index: einsum.letters[id].to_string(),
                            reason: format!(
                                "binds `{name0}` in operand {k0} and `{}` in operand {k}: operands are bound by \
                                 index name, so one letter must name one index",
                                dim.name
                            ),
                        });
                    }
                    Some(_) => {}
                }
            }
        }
        Ok(einsum)
    }

    /// The matrix multiply of two rank-2 tensors bound by index name (kind `matmul`): the
    /// one index name they share is contracted, and the output has `a`'s other index, then
    /// `b`'s. So `x[tokens, d_model]` times a weight stored `[d_out, d_model]` (Hugging Face's
    /// layout) is `x · wᵀ`, `[tokens, d_out]`. Operands that share no index name, or both,
    /// are refused naming their indices: a positional guess would be a silently wrong result.
    pub fn matmul_named(a: &TensorDesc, b: &TensorDesc) -> Result<Einsum> {
        let invalid = |reason: String| Error::Invalid { op: "matmul".to_string(), reason };
        if a.rank() != 2 || b.rank() != 2 {
            return Err(invalid(format!(
                "operands [{}] and [{}]: a matmul takes two rank-2 tensors (einsum takes any)",
                a.dims_string(),
                b.dims_string()
            )));
        }
        let shared: Vec<usize> = (0..2).filter(|&i| b.dims.iter().any(|d| d.name == a.dims[i].name)).collect();
        let [j] = shared[..] else {
            let what = if shared.is_empty() { "share no index name to contract" } else { "share both index names" };
            return Err(invalid(format!(
                "operands [{}] and [{}] {what}: a matmul contracts the one index they share (use einsum to say more)",
                a.dims_string(),
                b.dims_string()
            )));
        };
        // `j` names the contracted index in both terms, wherever it sits.
        let jb = usize::from(b.dims[1].name == a.dims[j].name);
        let a_term: String = (0..2).map(|k| if k == j { 'j' } else { 'i' }).collect();
        let b_term: String = (0..2).map(|k| if k == jb { 'j' } else { 'k' }).collect();
        Self::build("matmul", &format!("{a_term},{b_term}->ik"), &[a.clone(), b.clone()])
    }

    /// The equation, whitespace removed.
    pub fn equation(&self) -> &str {
        &self.equation
    }

    fn build(kind: &'static str, equation: &str, inputs: &[TensorDesc]) -> Result<Einsum> {
        let (term_chars, out_chars, equation) = parse(kind, equation)?;
        let invalid = |reason: String| Error::Invalid { op: kind.to_string(), reason };
        let shape =
            |letter: char, reason: String| Error::Shape { op: kind.to_string(), index: letter.to_string(), reason };
        if term_chars.len() != inputs.len() {
            return Err(invalid(format!(
                "equation `{equation}` has {} input terms but {} tensors were given",
                term_chars.len(),
                inputs.len()
            )));
        }
        for (k, (term, desc)) in term_chars.iter().zip(inputs).enumerate() {
            if term.len() != desc.rank() {
                let term: String = term.iter().collect();
                return Err(invalid(format!(
                    "operand {k}: term `{term}` has {} letters but tensor [{}] has rank {}",
                    term.len(),
                    desc.dims_string(),
                    desc.rank()
                )));
            }
        }
        let repeated = |term: &[char], what: String| -> Result<()> {
            for (i, c) in term.iter().enumerate() {
                if term[..i].contains(c) {
                    let t: String = term.iter().collect();
                    return Err(shape(
                        *c,
                        format!("repeated in {what} term `{t}`: diagonals and traces are not supported"),
                    ));
                }
            }
            Ok(())
        };
        for (k, term) in term_chars.iter().enumerate() {
            repeated(term, format!("operand {k}"))?;
        }
        repeated(&out_chars, "the output".into())?;

        let Binding { letters, first, terms } = bind_letters(kind, &term_chars, inputs)?;
        let out = out_chars
            .iter()
            .map(|&c| {
                letters
                    .iter()
                    .position(|&l| l == c)
                    .ok_or_else(|| shape(c, format!("appears in the output of `{equation}` but in no input term")))
            })
            .collect::<Result<Vec<usize>>>()?;
        if let Some((k, d)) = inputs.iter().enumerate().skip(1).find(|(_, d)| d.dtype != inputs[0].dtype) {
            return Err(invalid(format!(
                "operand {k} has dtype {}, operand 0 has {}: all operands must share one dtype",
                d.dtype, inputs[0].dtype
            )));
        }

        let dim_name = |id: usize| &inputs[first[id].0].dims[first[id].1].name;
        let extents: Vec<usize> = (0..letters.len()).map(|id| inputs[first[id].0].dims[first[id].1].extent).collect();
        let all: Vec<usize> = (0..letters.len()).collect();
        let names = disambiguate(&all, &letters, dim_name);
        let out_names = disambiguate(&out, &letters, dim_name);
        let dtype = inputs.first().map(|d| d.dtype).unwrap_or_default();
        let output =
            TensorDesc::new(out.iter().zip(out_names).map(|(&id, name)| Dim::new(name, extents[id])).collect(), dtype)?;
        let dims: DimIndex =
            terms.iter().chain(std::iter::once(&out)).map(|t| t.iter().map(|&id| Some(id)).collect()).collect();
        let plan = plan(&terms, &out);
        Ok(Einsum {
            kind,
            equation,
            letters,
            names,
            extents,
            terms,
            out,
            inputs: inputs.to_vec(),
            outputs: vec![output],
            dims,
            plan,
        })
    }

    /// The interval of every letter in the block `f`, checked against the input blocks:
    /// the generic checks of [`check_call`], then that every letter covers one non-empty
    /// interval wherever it appears.
    fn block_intervals(&self, f: &FunctionSpec, inputs: &[HostTensor]) -> Result<Vec<Interval>> {
        check_call(self, f, inputs)?;
        let kernel = |reason: String| kernel_error(self.kind, reason);
        let mut ivs: Vec<Option<(Interval, usize)>> = vec![None; self.letters.len()];
        // `check_call` made every block a projection of its tensor, so of its term's rank.
        for (k, (term, block)) in self.terms.iter().zip(&f.inputs).enumerate() {
            for (&id, &iv) in term.iter().zip(block.dims()) {
                let name = &self.names[id];
                if iv.is_empty() {
                    return Err(kernel(format!("input {k}: `{name}` covers {iv}, which is empty")));
                }
                match ivs[id] {
                    Some((seen, k0)) if seen != iv => {
                        return Err(kernel(format!(
                            "`{name}` (letter `{}`) covers {seen} in input {k0} but {iv} in input {k}",
                            self.letters[id]
                        )));
                    }
                    Some(_) => {}
                    None => ivs[id] = Some((iv, k)),
                }
            }
        }
        // Every letter appears in some input (checked at construction).
        let ivs: Vec<Interval> = ivs.into_iter().map(|iv| iv.map_or(Interval::full(0), |(iv, _)| iv)).collect();
        let want = TensorType::from_intervals(self.out.iter().map(|&id| ivs[id]).collect());
        if f.outputs[0] != want {
            return Err(kernel(format!(
                "output block {} does not match the input blocks, which give {want}",
                f.outputs[0]
            )));
        }
        Ok(ivs)
    }

    /// The extent of every letter in `f` (first occurrence wins), for work estimates.
    fn block_extents(&self, f: &FunctionSpec) -> Vec<usize> {
        let mut ext: Vec<Option<usize>> = vec![None; self.letters.len()];
        for (term, block) in self.terms.iter().zip(&f.inputs) {
            for (&id, iv) in term.iter().zip(block.dims()) {
                ext[id].get_or_insert(iv.len());
            }
        }
        ext.iter().zip(&self.extents).map(|(e, &whole)| e.unwrap_or(whole)).collect()
    }
}

impl AbstractOperator for Einsum {
    fn kind(&self) -> &str {
        self.kind
    }

    fn kernel_class(&self) -> KernelClass {
        KernelClass::Matmul
    }

    fn inputs(&self) -> &[TensorDesc] {
        &self.inputs
    }

    fn outputs(&self) -> &[TensorDesc] {
        &self.outputs
    }

    fn shardable(&self) -> Vec<ShardableIndex> {
        self.names.iter().zip(&self.extents).map(|(name, &extent)| ShardableIndex::any(name.clone(), extent)).collect()
    }

    fn join_agg_spec(&self, intervals: &[Vec<Interval>]) -> Result<JoinAggSpec> {
        grid_spec(self.kind, &self.inputs, &self.outputs, &self.shardable(), &self.dims, intervals)
    }

    /// `2 · Π extents` of each pairwise GEMM (batch, rows, columns and contracted letters),
    /// plus one add per element read when a letter is summed out of a single operand.
    fn flops(&self, f: &FunctionSpec) -> f64 {
        let ext = self.block_extents(f);
        let vol = |ls: &[usize]| ls.iter().map(|&l| ext[l] as f64).product::<f64>();
        let summed = |ls: &[usize], sum: &[usize]| if sum.is_empty() { 0.0 } else { vol(ls) };
        let mut total = summed(&self.plan.last, &self.plan.final_sum);
        for s in &self.plan.steps {
            total += summed(&s.left, &s.sum_left) + summed(&self.terms[s.operand], &s.sum_right);
            total += 2.0 * vol(&s.batch) * vol(&s.m) * vol(&s.n) * vol(&s.k);
        }
        total
    }

    fn compute(&self, f: &FunctionSpec, inputs: &[HostTensor]) -> Result<Vec<HostTensor>> {
        let ivs = self.block_intervals(f, inputs)?;
        let ext: Vec<usize> = ivs.iter().map(Interval::len).collect();
        // f32 operands are read in place; f16/bf16 ones too, converted panel by panel as
        // the GEMM reaches them (`panels`), unless a permutation or a sum needs them whole.
        let operand = |k: usize| Dense::new(&self.terms[k], Data::of(&inputs[k]));
        let mut acc = operand(0);
        for s in &self.plan.steps {
            let left = acc.summed(&s.sum_left, &ext);
            let right = operand(s.operand).summed(&s.sum_right, &ext);
            acc = batched_gemm(self.kind, left, right, s, &ext)?;
        }
        let acc = acc.summed(&self.plan.final_sum, &ext).permuted(&self.out, &ext);
        Ok(vec![HostTensor::from_f32(f.outputs[0].clone(), self.outputs[0].dtype, acc.data.into_f32().into_owned())?])
    }
}

/// The letters of an equation bound to tensor dimensions.
struct Binding {
    /// The distinct letters, in order of first appearance.
    letters: Vec<char>,
    /// The (operand, dimension) of every letter's first occurrence.
    first: Vec<(usize, usize)>,
    /// Every input term as letter ids.
    terms: Vec<Vec<usize>>,
}

/// Binds every letter to its first occurrence (operand, dimension), checking that every
/// later occurrence has the same extent.
fn bind_letters(kind: &str, term_chars: &[Vec<char>], inputs: &[TensorDesc]) -> Result<Binding> {
    let shape = |letter: char, reason: String| Error::Shape { op: kind.to_string(), index: letter.to_string(), reason };
    let mut letters: Vec<char> = Vec::new();
    let mut first: Vec<(usize, usize)> = Vec::new();
    let mut terms: Vec<Vec<usize>> = Vec::new();
    for (k, (term, desc)) in term_chars.iter().zip(inputs).enumerate() {
        let mut ids = Vec::with_capacity(term.len());
        for (d, &c) in term.iter().enumerate() {
            let id = match letters.iter().position(|&l| l == c) {
                Some(id) => {
                    let (k0, d0) = first[id];
                    let (was, now) = (&inputs[k0].dims[d0], &desc.dims[d]);
                    if was.extent != now.extent {
                        return Err(shape(
                            c,
                            format!(
                                "bound to different extents: `{}`={} (operand {k0}, dim {d0}) and `{}`={} \
                                 (operand {k}, dim {d})",
                                was.name, was.extent, now.name, now.extent
                            ),
                        ));
                    }
                    id
                }
                None => {
                    if desc.dims[d].extent == 0 {
                        return Err(shape(
                            c,
                            format!(
                                "`{}` (operand {k}, dim {d}) has extent 0: empty tensors are not supported",
                                desc.dims[d].name
                            ),
                        ));
                    }
                    letters.push(c);
                    first.push((k, d));
                    letters.len() - 1
                }
            };
            ids.push(id);
        }
        terms.push(ids);
    }
    Ok(Binding { letters, first, terms })
}

/// Splits `equation` into its input terms and its output term; returns also the equation
/// with whitespace removed.
fn parse(op: &str, equation: &str) -> Result<(Vec<Vec<char>>, Vec<char>, String)> {
    let eq: String = equation.chars().filter(|c| !c.is_whitespace()).collect();
    let malformed = |reason: String| Error::Invalid {
        op: op.to_string(),
        reason: format!("malformed equation `{equation}`: {reason}"),
    };
    let Some((lhs, rhs)) = eq.split_once("->") else {
        return Err(malformed("expected `inputs->output`, e.g. `ij,jk->ik`".into()));
    };
    if rhs.contains("->") {
        return Err(malformed("more than one `->`".into()));
    }
    if rhs.contains(',') {
        return Err(malformed("the output must be a single term".into()));
    }
    let letters = |term: &str| -> Result<Vec<char>> {
        match term.chars().find(|c| !c.is_alphabetic()) {
            Some(c) => Err(malformed(format!(
                "unexpected `{c}` in term `{term}`: terms are letters only (no `...` broadcasting)"
            ))),
            None => Ok(term.chars().collect()),
        }
    };
    let terms = lhs.split(',').map(letters).collect::<Result<Vec<_>>>()?;
    let out = letters(rhs)?;
    Ok((terms, out, eq))
}

/// The dim name of every letter in `ids`, written `name(letter)` for letters whose names
/// would collide.
fn disambiguate<'a>(ids: &[usize], letters: &[char], name: impl Fn(usize) -> &'a String) -> Vec<String> {
    ids.iter()
        .map(|&id| {
            let n = name(id);
            if ids.iter().filter(|&&other| name(other) == n).count() > 1 {
                format!("{n}({})", letters[id])
            } else {
                n.clone()
            }
        })
        .collect()
}

/// The pairwise, left-to-right evaluation order of the terms.
fn plan(terms: &[Vec<usize>], out: &[usize]) -> Plan {
    let mut acc = terms.first().cloned().unwrap_or_default();
    let mut steps = Vec::new();
    for r in 1..terms.len() {
        let right = &terms[r];
        let needed = |l: &usize| terms[r + 1..].iter().any(|t| t.contains(l)) || out.contains(l);
        let select = |from: &[usize], other: &[usize], shared: bool, need: bool| -> Vec<usize> {
            from.iter().filter(|l| other.contains(l) == shared && needed(l) == need).copied().collect()
        };
        let step = Step {
            operand: r,
            left: acc.clone(),
            sum_left: select(&acc, right, false, false),
            sum_right: select(right, &acc, false, false),
            batch: select(&acc, right, true, true),
            m: select(&acc, right, false, true),
            n: select(right, &acc, false, true),
            k: select(&acc, right, true, false),
        };
        acc = [step.batch.as_slice(), &step.m, &step.n].concat();
        steps.push(step);
    }
    let final_sum = acc.iter().filter(|l| !out.contains(l)).copied().collect();
    Plan { steps, last: acc, final_sum }
}

/// A block's elements: f32 (an input borrowed as it is, or a block the kernel computed), or
/// an f16/bf16 input borrowed in its storage dtype.
#[derive(Debug)]
enum Data<'a> {
    F32(Cow<'a, [f32]>),
    Half(Elements<'a>),
}

impl<'a> Data<'a> {
    /// Input `t`'s elements, borrowed where they are contiguous.
    fn of(t: &'a HostTensor) -> Self {
        match t.elements() {
            Some(Elements::F32(v)) => Data::F32(Cow::Borrowed(v)),
            Some(half) => Data::Half(half),
            // A strided view (a stitch of views) is gathered once.
            None => Data::F32(Cow::Owned(t.to_f32())),
        }
    }

    /// The elements as f32, converting half-precision ones whole.
    fn into_f32(self) -> Cow<'a, [f32]> {
        match self {
            Data::F32(v) => v,
            Data::Half(Elements::F32(v)) => Cow::Borrowed(v),
            Data::Half(Elements::F16(v)) => Cow::Owned(widen(v)),
            Data::Half(Elements::BF16(v)) => Cow::Owned(widen(v)),
        }
    }

    /// The elements as read in place.
    fn elements(&self) -> Elements<'_> {
        match self {
            Data::F32(v) => Elements::F32(v),
            Data::Half(e) => *e,
        }
    }

    fn len(&self) -> usize {
        match self.elements() {
            Elements::F32(v) => v.len(),
            Elements::F16(v) => v.len(),
            Elements::BF16(v) => v.len(),
        }
    }
}

/// A dense block whose dimensions follow `letters`, row-major.
#[derive(Debug)]
struct Dense<'a> {
    letters: Vec<usize>,
    data: Data<'a>,
}

impl<'a> Dense<'a> {
    fn new(letters: &[usize], data: Data<'a>) -> Self {
        Dense { letters: letters.to_vec(), data }
    }

    fn shape(&self, ext: &[usize]) -> Vec<usize> {
        self.letters.iter().map(|&l| ext[l]).collect()
    }

    /// The same block with its dimensions in the order `to` (a permutation of its letters).
    fn permuted(self, to: &[usize], ext: &[usize]) -> Dense<'a> {
        if self.letters == to {
            return self;
        }
        let perm: Vec<usize> = to
            .iter()
            .map(|l| self.letters.iter().position(|m| m == l).expect("a permutation of the letters"))
            .collect();
        let shape = self.shape(ext);
        let data = permute(&self.data.into_f32(), &shape, &perm);
        Dense { letters: to.to_vec(), data: Data::F32(Cow::Owned(data)) }
    }

    /// The block with the letters `drop` summed out.
    fn summed(self, drop: &[usize], ext: &[usize]) -> Dense<'a> {
        if drop.is_empty() {
            return self;
        }
        let keep: Vec<usize> = self.letters.iter().filter(|l| !drop.contains(l)).copied().collect();
        let order = [keep.as_slice(), drop].concat();
        let chunk: usize = drop.iter().map(|&l| ext[l]).product();
        let moved = self.permuted(&order, ext);
        let data = moved
            .data
            .into_f32()
            .chunks_exact(chunk.max(1))
            .map(|c| c.iter().map(|&x| x as f64).sum::<f64>() as f32)
            .collect();
        Dense { letters: keep, data: Data::F32(Cow::Owned(data)) }
    }
}

/// `C[batch, m, n] = Σ_k A[batch, m, k] · B[batch, k, n]` for one step: the operands are
/// laid out (by permutation when their order does not already allow a strided GEMM) and
/// multiplied by `sgemm`, one call per batch element, or per batch element and band of
/// rows when the kernel has helper threads and fewer batch elements than threads.
fn batched_gemm<'a>(op: &str, a: Dense<'a>, b: Dense<'a>, s: &Step, ext: &[usize]) -> Result<Dense<'a>> {
    let size = |ls: &[usize]| ls.iter().map(|&l| ext[l]).product::<usize>();
    let (nb, m, n, k) = (size(&s.batch), size(&s.m), size(&s.n), size(&s.k));
    let a_rows = [s.batch.as_slice(), &s.m, &s.k].concat();
    let a_cols = [s.batch.as_slice(), &s.k, &s.m].concat();
    let (a, rsa, csa) =
        if a.letters != a_rows && a.letters == a_cols { (a, 1, m) } else { (a.permuted(&a_rows, ext), k, 1) };
    let b_rows = [s.batch.as_slice(), &s.k, &s.n].concat();
    let b_cols = [s.batch.as_slice(), &s.n, &s.k].concat();
    let (b, rsb, csb) =
        if b.letters != b_rows && b.letters == b_cols { (b, 1, k) } else { (b.permuted(&b_rows, ext), n, 1) };
    if a.data.len() != nb * m * k || b.data.len() != nb * k * n {
        return Err(kernel_error(
            op,
            format!(
                "operand sizes {} and {} do not fit a {nb}×({m}×{k})·({k}×{n}) batched product",
                a.data.len(),
                b.data.len()
            ),
        ));
    }
    let mut c = vec![0.0f32; nb * m * n];
    if let (Data::F32(a_data), Data::F32(b_data)) = (&a.data, &b.data) {
        f32_gemm(nb, (m, k, n), (a_data, rsa, csa), (b_data, rsb, csb), &mut c);
    } else {
        half_gemm(op, nb, (m, k, n), (a.data.elements(), rsa, csa), (b.data.elements(), rsb, csb), &mut c)?;
    }
    Ok(Dense { letters: [s.batch.as_slice(), &s.m, &s.n].concat(), data: Data::F32(Cow::Owned(c)) })
}

/// The bands of rows of C (over all `nb` batch elements of `m` rows) to split a GEMM into,
/// and the threads to run them on: a band never crosses a batch element; bands of at least
/// 64 rows, or whole batch elements when there are enough of them. Band `band` is rows
/// `rows` of batch element `batch`.
fn bands(nb: usize, m: usize) -> (usize, usize) {
    let threads = parallel::parts(nb * m, 64.min(m.max(1)));
    let bands = if nb >= threads { nb } else { threads.div_ceil(nb.max(1)) * nb };
    (bands, threads)
}

/// The batch element and rows of band `band` of `bands` (see [`bands`]).
fn band_rows(band: usize, bands: usize, nb: usize, m: usize) -> (usize, std::ops::Range<usize>) {
    let (batch, part, per_batch) = (band * nb / bands, band % (bands / nb), bands / nb);
    (batch, part * m / per_batch..(part + 1) * m / per_batch)
}

/// Half-precision operands (either or both): each band multiplied by [`panels::gemm`],
/// which converts the operands panel by panel and accumulates in f32.
fn half_gemm(
    op: &str,
    nb: usize,
    (m, k, n): (usize, usize, usize),
    (a, rsa, csa): (Elements<'_>, usize, usize),
    (b, rsb, csb): (Elements<'_>, usize, usize),
    c: &mut [f32],
) -> Result<()> {
    let (bands, threads) = bands(nb, m);
    let c_ptr = c.as_mut_ptr() as usize;
    let failed = std::sync::Mutex::new(None);
    parallel::for_ranges(bands, threads, |range| {
        for band in range {
            let (batch, rows) = band_rows(band, bands, nb, m);
            let a = Strided { data: a, offset: batch * m * k + rows.start * rsa, rs: rsa, cs: csa };
            let b = Strided { data: b, offset: batch * k * n, rs: rsb, cs: csb };
            // SAFETY: C holds nb·m·n elements and a band writes rows `rows` of one batch
            // element's C, which no other band writes, so these slices are disjoint.
            let c = unsafe {
                std::slice::from_raw_parts_mut((c_ptr as *mut f32).add(batch * m * n + rows.start * n), rows.len() * n)
            };
            if let Err(e) = panels::gemm(rows.len(), k, n, a, b, c) {
                *failed.lock().unwrap_or_else(|e| e.into_inner()) = Some(e);
            }
        }
    });
    match failed.into_inner().unwrap_or_else(|e| e.into_inner()) {
        Some(e) => Err(kernel_error(op, e)),
        None => Ok(()),
    }
}

/// f32 operands: each band multiplied by `sgemm` in place.
fn f32_gemm(
    nb: usize,
    (m, k, n): (usize, usize, usize),
    (a, rsa, csa): (&[f32], usize, usize),
    (b, rsb, csb): (&[f32], usize, usize),
    c: &mut [f32],
) {
    let (bands, threads) = bands(nb, m);
    let (a_ptr, b_ptr, c_ptr) = (a.as_ptr() as usize, b.as_ptr() as usize, c.as_mut_ptr() as usize);
    parallel::for_ranges(bands, threads, |range| {
        for band in range {
            let (batch, rows) = band_rows(band, bands, nb, m);
            // SAFETY: A holds nb·m·k elements, B nb·k·n and C nb·m·n (checked above); each
            // batch element's matrices lie in their own contiguous slab, every stride pair
            // addresses exactly the m×k, k×n and m×n elements of that slab, and a band
            // writes rows `rows` of one batch element's C, which no other band writes.
            unsafe {
                matrixmultiply::sgemm(
                    rows.len(),
                    k,
                    n,
                    1.0,
                    (a_ptr as *const f32).add(batch * m * k + rows.start * rsa),
                    rsa as isize,
                    csa as isize,
                    (b_ptr as *const f32).add(batch * k * n),
                    rsb as isize,
                    csb as isize,
                    0.0,
                    (c_ptr as *mut f32).add(batch * m * n + rows.start * n),
                    n as isize,
                    1,
                );
            }
        }
    });
}

/// Transposes a row-major array of `shape`: output dimension `d` is input dimension
/// `perm[d]`.
pub(crate) fn permute(data: &[f32], shape: &[usize], perm: &[usize]) -> Vec<f32> {
    let rank = shape.len();
    let total: usize = shape.iter().product();
    if rank == 0 || total == 0 || perm.iter().enumerate().all(|(d, &p)| d == p) {
        return data.to_vec();
    }
    let mut strides = vec![1usize; rank];
    for d in (0..rank - 1).rev() {
        strides[d] = strides[d + 1] * shape[d + 1];
    }
    let out_shape: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
    let st: Vec<usize> = perm.iter().map(|&p| strides[p]).collect();
    let (inner, inner_st) = (out_shape[rank - 1], st[rank - 1]);
    let mut out = Vec::with_capacity(total);
    let mut idx = vec![0usize; rank - 1];
    let mut base = 0usize;
    loop {
        out.extend((0..inner).map(|i| data[base + i * inner_st]));
        // Advance the odometer over the outer output dimensions.
        let mut d = rank - 1;
        loop {
            if d == 0 {
                return out;
            }
            d -= 1;
            idx[d] += 1;
            base += st[d];
            if idx[d] < out_shape[d] {
                break;
            }
            base -= st[d] * out_shape[d];
            idx[d] = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use einsum_core::DType;
    use einsum_joinagg::{decomposition_error, enumerate_specs, request_spec};

    use super::*;

    fn desc(dims: &[(&str, usize)]) -> TensorDesc {
        TensorDesc::of(dims, DType::F32).unwrap()
    }

    fn tt(lo: &[usize], hi: &[usize]) -> TensorType {
        TensorType::new(lo, hi).unwrap()
    }

    fn example_matmul() -> Einsum {
        Einsum::matmul(&desc(&[("i", 256), ("j", 512)]), &desc(&[("j", 512), ("k", 256)])).unwrap()
    }

    #[test]
    fn example_3_8_splits_the_contracted_index() {
        let op = example_matmul();
        assert_eq!(op.kind(), "matmul");
        let names: Vec<String> = op.shardable().into_iter().map(|s| s.name).collect();
        assert_eq!(names, ["i", "j", "k"]);
        let spec = request_spec(&op, &[1, 2, 1]).unwrap();
        assert_eq!(spec.len(), 2);
        let c = tt(&[0, 0], &[256, 256]);
        let (f1, f2) = (&spec.functions[0], &spec.functions[1]);
        assert_eq!(f1.inputs, vec![tt(&[0, 0], &[256, 256]), tt(&[0, 0], &[256, 256])]);
        assert_eq!(f2.inputs, vec![tt(&[0, 256], &[256, 512]), tt(&[256, 0], &[512, 256])]);
        assert_eq!(f1.outputs, vec![c.clone()]);
        assert_eq!(f2.outputs, vec![c.clone()]);
        assert_eq!(spec.output_multiplicities(0), vec![(c, 2)]);
        assert!(decomposition_error(&op, &spec, 1).unwrap() <= 1e-5);
    }

    #[test]
    fn example_3_9_four_function_specs_in_order() {
        let op = example_matmul();
        let i = vec![Interval { lo: 0, hi: 128 }, Interval { lo: 128, hi: 256 }];
        let j = vec![Interval { lo: 0, hi: 256 }, Interval { lo: 256, hi: 512 }];
        let k = vec![Interval { lo: 0, hi: 256 }];
        let spec = op.join_agg_spec(&[i, j, k]).unwrap();
        assert_eq!(spec, request_spec(&op, &[2, 2, 1]).unwrap());
        let (c1, c2) = (tt(&[0, 0], &[128, 256]), tt(&[128, 0], &[256, 256]));
        let expect = [
            // F11, F12, F21, F22: m-th interval of i, n-th interval of j.
            (tt(&[0, 0], &[128, 256]), tt(&[0, 0], &[256, 256]), &c1),
            (tt(&[0, 256], &[128, 512]), tt(&[256, 0], &[512, 256]), &c1),
            (tt(&[128, 0], &[256, 256]), tt(&[0, 0], &[256, 256]), &c2),
            (tt(&[128, 256], &[256, 512]), tt(&[256, 0], &[512, 256]), &c2),
        ];
        assert_eq!(spec.len(), 4);
        for (f, (a, b, c)) in spec.functions.iter().zip(expect) {
            assert_eq!(f.inputs, vec![a, b]);
            assert_eq!(f.outputs, vec![c.clone()]);
        }
        assert_eq!(spec.output_multiplicities(0), vec![(c1, 2), (c2, 2)]);
        assert!(decomposition_error(&op, &spec, 2).unwrap() <= 1e-5);
        // Each block is a 128×256×256 product.
        assert_eq!(op.flops(&spec.functions[0]), 2.0 * 128.0 * 256.0 * 256.0);
    }

    #[test]
    fn cube_split_has_eight_specs_and_four_output_boxes() {
        let n = 8;
        let op = Einsum::matmul(&desc(&[("i", n), ("j", n)]), &desc(&[("j", n), ("k", n)])).unwrap();
        let spec = request_spec(&op, &[2, 2, 2]).unwrap();
        assert_eq!(spec.len(), 8);
        let mult = spec.output_multiplicities(0);
        assert_eq!(mult.len(), 4);
        assert!(mult.iter().all(|(_, m)| *m == 2));
        assert!(decomposition_error(&op, &spec, 3).unwrap() <= 1e-5);
        assert!(enumerate_specs(&op, 8).unwrap().iter().any(|c| c.counts == [2, 2, 2]));
    }

    #[test]
    fn names_follow_first_occurrence_and_collisions_are_marked() {
        // td,dhe->hte: shardable t, d, h, e; output [heads, tokens, head_dim].
        let x = desc(&[("tokens", 6), ("d_model", 8)]);
        let w = desc(&[("d_model", 8), ("heads", 2), ("head_dim", 4)]);
        let op = Einsum::new("td, dhe -> hte", &[x, w]).unwrap();
        assert_eq!(op.equation(), "td,dhe->hte");
        let names: Vec<String> = op.shardable().into_iter().map(|s| s.name).collect();
        assert_eq!(names, ["tokens", "d_model", "heads", "head_dim"]);
        assert_eq!(op.outputs()[0], desc(&[("heads", 2), ("tokens", 6), ("head_dim", 4)]));

        // Square matrices named alike: j and k both come from a dim named `col`.
        let a = desc(&[("row", 3), ("col", 3)]);
        let op = Einsum::new("ij,jk->ik", &[a.clone(), a.clone()]).unwrap();
        let names: Vec<String> = op.shardable().into_iter().map(|s| s.name).collect();
        assert_eq!(names, ["row", "col(j)", "col(k)"]);
        assert_eq!(op.outputs()[0], desc(&[("row", 3), ("col", 3)]));
        // A batched product whose output keeps two dims named `col`.
        let op = Einsum::new("ij,kj->ik", &[a.clone(), a]).unwrap();
        assert_eq!(op.outputs()[0], desc(&[("row(i)", 3), ("row(k)", 3)]));
    }

    #[test]
    fn bad_inputs_are_typed_errors() {
        let a = desc(&[("i", 4), ("j", 5)]);
        let b = desc(&[("j", 5), ("k", 6)]);
        let shape_err = |r: Result<Einsum>, letter: &str| match r {
            Err(Error::Shape { op, index, reason }) => {
                assert_eq!(op, "einsum");
                assert_eq!(index, letter);
                reason
            }
            other => panic!("expected a shape error for `{letter}`, got {other:?}"),
        };
        let invalid = |r: Result<Einsum>| match r {
            Err(Error::Invalid { op, reason }) => {
                assert!(op == "einsum" || op == "matmul");
                reason
            }
            other => panic!("expected an invalid-argument error, got {other:?}"),
        };
        // Wrong operand count, rank mismatch, malformed equations.
        assert!(invalid(Einsum::new("ij,jk->ik", std::slice::from_ref(&a))).contains("2 input terms"));
        assert!(invalid(Einsum::new("ijk,jk->ik", &[a.clone(), b.clone()])).contains("rank 2"));
        for bad in ["ij,jk", "ij,jk->i->k", "ij,j1->i", "...ij,jk->ik", "ij,jk->i,k"] {
            assert!(invalid(Einsum::new(bad, &[a.clone(), b.clone()])).contains("malformed"), "{bad}");
        }
        // A letter bound to two extents names both dims.
        let b7 = desc(&[("jj", 7), ("k", 6)]);
        let reason = shape_err(Einsum::new("ij,jk->ik", &[a.clone(), b7]), "j");
        assert!(reason.contains("`j`=5") && reason.contains("`jj`=7"), "{reason}");
        // An output letter found in no input.
        assert!(shape_err(Einsum::new("ij,jk->iz", &[a.clone(), b.clone()]), "z").contains("no input"));
        // Repeated letters: diagonals and traces.
        let sq = desc(&[("i", 4), ("i2", 4)]);
        assert!(shape_err(Einsum::new("ii->i", std::slice::from_ref(&sq)), "i").contains("diagonals"));
        assert!(shape_err(Einsum::new("ij->ii", std::slice::from_ref(&sq)), "i").contains("output"));
        // Mixed dtypes.
        let b16 = TensorDesc::of(&[("j", 5), ("k", 6)], DType::F16).unwrap();
        assert!(invalid(Einsum::new("ij,jk->ik", &[a.clone(), b16])).contains("dtype"));
        // Empty dims.
        // Built literally: `TensorDesc::new` itself refuses extent 0.
        let z =
            TensorDesc { dims: vec![einsum_core::Dim::new("i", 0), einsum_core::Dim::new("j", 5)], dtype: DType::F32 };
        assert!(shape_err(Einsum::new("ij,jk->ik", &[z, b.clone()]), "i").contains("extent 0"));
        // Matmul of mismatched inner extents.
        match Einsum::matmul(&a, &desc(&[("j", 4), ("k", 6)])) {
            Err(Error::Shape { op, index, .. }) => assert_eq!((op.as_str(), index.as_str()), ("matmul", "j")),
            other => panic!("{other:?}"),
        }
        assert!(matches!(Einsum::matmul(&a, &desc(&[("j", 5)])), Err(Error::Invalid { .. })));
    }

    #[test]
    fn impossible_p_has_no_spec() {
        let op = Einsum::new("ij,jk->ik", &[desc(&[("i", 2), ("j", 1)]), desc(&[("j", 1), ("k", 3)])]).unwrap();
        // At most 2 · 1 · 3 = 6 parts, and 5 or 7 factor into none.
        for p in [5, 7, 12] {
            assert!(matches!(enumerate_specs(&op, p), Err(Error::NoSpec { .. })), "p = {p}");
        }
        assert!(enumerate_specs(&op, 6).is_ok());
    }

    #[test]
    fn kernel_rejects_inconsistent_blocks() {
        let op = Einsum::matmul(&desc(&[("i", 4), ("j", 6)]), &desc(&[("j", 6), ("k", 2)])).unwrap();
        let a = tt(&[0, 0], &[4, 3]);
        let b = tt(&[3, 0], &[6, 2]);
        let f = FunctionSpec { inputs: vec![a.clone(), b.clone()], outputs: vec![tt(&[0, 0], &[4, 2])] };
        let args = [HostTensor::random(a.clone(), DType::F32, 1), HostTensor::random(b.clone(), DType::F32, 2)];
        match op.compute(&f, &args) {
            Err(Error::Kernel { reason, .. }) => assert!(reason.contains("`j`"), "{reason}"),
            other => panic!("{other:?}"),
        }
        // Input data whose type is not the spec's box.
        let f = FunctionSpec { inputs: vec![a.clone(), tt(&[0, 0], &[3, 2])], outputs: vec![tt(&[0, 0], &[4, 2])] };
        assert!(matches!(op.compute(&f, &args), Err(Error::Kernel { .. })));
        // An output box that disagrees with the inputs.
        let b0 = tt(&[0, 0], &[3, 2]);
        let f = FunctionSpec { inputs: vec![a.clone(), b0.clone()], outputs: vec![tt(&[0, 0], &[2, 2])] };
        let args = [HostTensor::random(a, DType::F32, 1), HostTensor::random(b0, DType::F32, 2)];
        assert!(matches!(op.compute(&f, &args), Err(Error::Kernel { .. })));
        assert!(matches!(op.compute(&f, &args[..1]), Err(Error::Kernel { .. })));
        // A block outside its tensor (`j` runs to 7 of 6), and a letter with an empty interval.
        let kernel_reason = |a: TensorType, b: TensorType, c: TensorType| {
            let args = [HostTensor::random(a.clone(), DType::F32, 1), HostTensor::random(b.clone(), DType::F32, 2)];
            match op.compute(&FunctionSpec { inputs: vec![a, b], outputs: vec![c] }, &args) {
                Err(Error::Kernel { op, reason }) => {
                    assert_eq!(op, "matmul");
                    reason
                }
                other => panic!("{other:?}"),
            }
        };
        let reason = kernel_reason(tt(&[0, 0], &[4, 7]), tt(&[0, 0], &[7, 2]), tt(&[0, 0], &[4, 2]));
        assert!(reason.contains("input block") && reason.contains("not a projection"), "{reason}");
        let reason = kernel_reason(tt(&[0, 3], &[4, 3]), tt(&[3, 0], &[3, 2]), tt(&[0, 0], &[4, 2]));
        assert!(reason.contains("`j`") && reason.contains("empty"), "{reason}");
    }

    #[test]
    fn absolute_blocks_compute_their_own_range() {
        // One block of a 1×4 by 4×1 product: the kernel sums only over its j range.
        let op = Einsum::matmul(&desc(&[("i", 1), ("j", 4)]), &desc(&[("j", 4), ("k", 1)])).unwrap();
        let a = HostTensor::from_f32(tt(&[0, 2], &[1, 4]), DType::F32, vec![1.0, 2.0]).unwrap();
        let b = HostTensor::from_f32(tt(&[2, 0], &[4, 1]), DType::F32, vec![3.0, 4.0]).unwrap();
        let f = FunctionSpec { inputs: vec![a.ty().clone(), b.ty().clone()], outputs: vec![tt(&[0, 0], &[1, 1])] };
        assert_eq!(op.compute(&f, &[a, b]).unwrap()[0].to_f32(), vec![11.0]);
    }

    #[test]
    fn plans_and_flops_of_chains_and_sums() {
        let op = Einsum::new(
            "ab,bc,cd->ad",
            &[desc(&[("a", 2), ("b", 3)]), desc(&[("b", 3), ("c", 4)]), desc(&[("c", 4), ("d", 5)])],
        )
        .unwrap();
        let whole = einsum_joinagg::whole_spec(&op);
        // (ab,bc->ac): 2·2·3·4; (ac,cd->ad): 2·2·4·5.
        assert_eq!(op.flops(&whole), 48.0 + 80.0);
        let sum = Einsum::new("ij->j", &[desc(&[("i", 3), ("j", 5)])]).unwrap();
        assert_eq!(sum.flops(&einsum_joinagg::whole_spec(&sum)), 15.0);
        let x = HostTensor::from_f32(tt(&[0, 0], &[3, 5]), DType::F32, (0..15).map(|v| v as f32).collect()).unwrap();
        let out = einsum_joinagg::execute_whole(&sum, &[x]).unwrap();
        assert_eq!(out[0].to_f32(), vec![15.0, 18.0, 21.0, 24.0, 27.0]);
    }

    /// Batched products of odd shapes (a batch split, a row split, one-row matrices, a
    /// transposed operand read through strides) give the same bits with and without helper
    /// threads, and agree with a naive f64 product.
    #[test]
    fn helper_threads_change_no_bit_and_match_a_naive_product() {
        use einsum_core::intra_op;
        use einsum_joinagg::execute_whole;
        for (eq, nb, m, k, n) in [
            ("bij,bjk->bik", 3, 131, 7, 67),
            ("bij,bjk->bik", 1, 257, 33, 5),
            ("bij,bjk->bik", 2, 1, 9, 3),
            ("bji,bjk->bik", 2, 130, 11, 17),
        ] {
            let transposed = eq.starts_with("bji");
            let a_dims = if transposed { [nb, k, m] } else { [nb, m, k] };
            let a = desc(&[("b", nb), ("x", a_dims[1]), ("y", a_dims[2])]);
            let b = desc(&[("b", nb), ("j", k), ("k", n)]);
            let op = Einsum::new(eq, &[a, b]).unwrap();
            let ta = HostTensor::random(TensorType::zero_bounded(&a_dims), DType::F32, 1);
            let tb = HostTensor::random(TensorType::zero_bounded(&[nb, k, n]), DType::F32, 2);
            let args = [ta.clone(), tb.clone()];
            let alone = execute_whole(&op, &args).unwrap();
            for helpers in [1, 3] {
                let lent = intra_op::with_helpers(helpers, || execute_whole(&op, &args)).unwrap();
                assert_eq!(alone, lent, "{eq} {nb}×{m}×{k}×{n}, {helpers} helpers");
            }
            for (bi, i, j) in [(0, 0, 0), (nb - 1, m - 1, n - 1), (nb / 2, m / 2, n / 3)] {
                let at = |p: usize| if transposed { [bi, p, i] } else { [bi, i, p] };
                let terms: Vec<f64> =
                    (0..k).map(|p| ta.get(&at(p)).unwrap() as f64 * tb.get(&[bi, p, j]).unwrap() as f64).collect();
                let want: f64 = terms.iter().sum();
                let scale: f64 = terms.iter().map(|t| t.abs()).sum::<f64>().max(1e-30);
                let got = alone[0].get(&[bi, i, j]).unwrap() as f64;
                assert!((got - want).abs() <= 1e-6 * scale, "{eq} at {bi},{i},{j}: {got} vs {want}");
            }
        }
    }

    /// f16 and bf16 matmuls (B read transposed in place in one case) go through the panel
    /// GEMM: on every element the output is within the dtype's own rounding (half an ulp of
    /// the result) plus the f32 accumulation bound of an f64 product of the same inputs; the
    /// old path (whole operands converted, an f32 kernel, the result rounded) meets the same
    /// bound; and helper threads change no bit.
    #[test]
    fn half_precision_matmuls_accumulate_in_f32_within_the_dtype_rounding() {
        use einsum_core::intra_op;
        use einsum_joinagg::execute_whole;
        // The unit roundoff, and half the smallest subnormal's spacing (f16 results near 0).
        for (dtype, unit, tiny) in [(DType::F16, 2f64.powi(-11), 2f64.powi(-25)), (DType::BF16, 2f64.powi(-8), 0.0)] {
            for (eq, m, k, n) in [("ij,jk->ik", 70, 300, 50), ("ij,kj->ik", 129, 260, 33)] {
                let transposed = eq == "ij,kj->ik";
                let b_dims = if transposed { [n, k] } else { [k, n] };
                let a = TensorDesc::of(&[("i", m), ("j", k)], dtype).unwrap();
                let b = TensorDesc::of(&[("x", b_dims[0]), ("y", b_dims[1])], dtype).unwrap();
                let op = Einsum::new(eq, &[a.clone(), b.clone()]).unwrap();
                let args =
                    [HostTensor::random(a.tensor_type(), dtype, 5), HostTensor::random(b.tensor_type(), dtype, 6)];
                let got = execute_whole(&op, &args).unwrap();
                assert_eq!(got[0].dtype(), dtype);
                let lent = intra_op::with_helpers(1, || execute_whole(&op, &args)).unwrap();
                assert_eq!(got, lent, "{dtype} {eq}: helper threads changed a bit");
                // The old path: both operands converted whole, the f32 kernel, rounded once.
                let f32_desc = |d: &TensorDesc| TensorDesc::new(d.dims.clone(), DType::F32).unwrap();
                let op32 = Einsum::new(eq, &[f32_desc(&a), f32_desc(&b)]).unwrap();
                let widened: Vec<HostTensor> = args
                    .iter()
                    .map(|t| HostTensor::from_f32(t.ty().clone(), DType::F32, t.to_f32()).unwrap())
                    .collect();
                let old = execute_whole(&op32, &widened).unwrap()[0].to_f32();
                let old = HostTensor::from_f32(got[0].ty().clone(), dtype, old).unwrap();
                for i in 0..m {
                    for j in 0..n {
                        let b_at = |p: usize| if transposed { [j, p] } else { [p, j] };
                        let terms: Vec<f64> = (0..k)
                            .map(|p| {
                                f64::from(args[0].get(&[i, p]).unwrap()) * f64::from(args[1].get(&b_at(p)).unwrap())
                            })
                            .collect();
                        let want: f64 = terms.iter().sum();
                        let scale: f64 = terms.iter().map(|t| t.abs()).sum();
                        let acc = k as f64 * f64::from(f32::EPSILON) / 2.0 * scale;
                        let bound = unit * (want.abs() + acc) + acc + tiny;
                        for (path, t) in [("panels", &got[0]), ("old", &old)] {
                            let y = f64::from(t.get(&[i, j]).unwrap());
                            assert!((y - want).abs() <= bound, "{dtype} {eq} {path} at {i},{j}: {y} vs {want}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn permute_moves_axes() {
        // A 2×3 matrix transposed, and a 2×3×2 array with its axes rotated.
        let data: Vec<f32> = (0..6).map(|v| v as f32).collect();
        assert_eq!(permute(&data, &[2, 3], &[1, 0]), vec![0.0, 3.0, 1.0, 4.0, 2.0, 5.0]);
        let data: Vec<f32> = (0..12).map(|v| v as f32).collect();
        let out = permute(&data, &[2, 3, 2], &[2, 0, 1]);
        // out[c][a][b] = data[a][b][c] = 6a + 2b + c.
        assert_eq!(out[0..6], [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);
        assert_eq!(out[6..12], [1.0, 3.0, 5.0, 7.0, 9.0, 11.0]);
    }
}

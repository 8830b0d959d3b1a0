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
    few_rows,
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

/// An einsum's letters as ids ([`Einsum::letter_ids`]).
pub(crate) struct Letters<'a> {
    /// The letters of every input term.
    pub terms: &'a [Vec<usize>],
    /// The letters of the output term.
    pub out: &'a [usize],
    /// Every letter's shardable index name.
    pub names: &'a [String],
    /// Every letter's extent.
    pub extents: &'a [usize],
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

    /// The letters of every input term and of the output term, as ids (`0..` in order of
    /// first appearance), and each id's shardable index name and extent.
    pub(crate) fn letter_ids(&self) -> Letters<'_> {
        Letters { terms: &self.terms, out: &self.out, names: &self.names, extents: &self.extents }
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
            Data::Half(Elements::I32(v)) => Cow::Owned(v.iter().map(|&x| x as f32).collect()),
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
        self.elements().len()
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
        // One product of few rows (a decode step's tokens times a weight) streams B once;
        // `few_rows::gemm` declines other layouts without writing C.
        let streamed = nb == 1 && few_rows::gemm((m, k, n), (a_data, rsa, csa), (b_data, rsb, csb), &mut c);
        if !streamed {
            f32_gemm(nb, (m, k, n), (a_data, rsa, csa), (b_data, rsb, csb), &mut c);
        }
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
mod tests;

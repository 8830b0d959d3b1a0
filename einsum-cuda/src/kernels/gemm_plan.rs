//! Planning a contraction for cuBLAS: einsum letters → optional permutations of the
//! operands, one strided-batched GEMM, and an optional permutation of its result.
//!
//! # Design
//! cuBLAS multiplies `batch` pairs of matrices laid out at a fixed stride from one another.
//! An einsum `A, B -> C` is such a product once its letters are grouped: *batch* letters
//! (in A, B and C), *m* letters (A and C), *n* letters (B and C) and *k* letters (A and B,
//! summed). A letter in only one operand and not in C is summed too: it becomes a k letter
//! along which the other operand is broadcast (the permutation reads it with stride 0), so
//! every two-operand einsum is one GEMM. An operand whose letters already read
//! `batch ++ m ++ k` (or `batch ++ k ++ m`, a transposed GEMM operand) is used in place;
//! otherwise a permutation kernel copies it into that layout first. The planner tries both
//! operand roles and both k orders and keeps the plan with the fewest elements copied.
//! A one-operand einsum (`ij->j`) is a permutation to `kept ++ summed` and a row sum.
//!
//! Everything here is plain Rust so that it is tested on the CPU against the operator's
//! reference kernel, with a host emulator of the plan.

use std::collections::HashMap;

/// Why a contraction cannot be planned.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PlanError {
    /// The equation is malformed or the backend does not support its form.
    #[error("einsum `{equation}`: {reason}")]
    Unsupported {
        /// The equation.
        equation: String,
        /// Why.
        reason: String,
    },
}

/// A copy of a row-major tensor into a new row-major layout: destination element
/// `(i_0, ..., i_{r-1})` reads source element `Σ i_d · src_strides[d]` (a stride of 0
/// broadcasts).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Permute {
    /// Shape of the destination.
    pub dst_shape: Vec<usize>,
    /// For every destination dimension, its stride in the source (elements).
    pub src_strides: Vec<usize>,
}

impl Permute {
    /// Elements written.
    pub fn volume(&self) -> usize {
        self.dst_shape.iter().product()
    }

    /// True when the copy reads the source in order (the permutation is the identity).
    fn is_identity(&self) -> bool {
        let mut expect = 1;
        for (&n, &s) in self.dst_shape.iter().zip(&self.src_strides).rev() {
            if n != 1 && s != expect {
                return false;
            }
            expect *= n;
        }
        true
    }
}

/// One strided-batched GEMM in row-major terms: for every batch `b`,
/// `C_b[m×n] = A_b · B_b`, where `A_b` is stored `[m, k]` (or `[k, m]` when `trans_a`) at
/// element offset `b · stride_a`, likewise `B_b` (`[k, n]` or `[n, k]`), and `C_b` is `[m, n]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gemm {
    /// Number of matrix products.
    pub batch: usize,
    /// Rows of C.
    pub m: usize,
    /// Columns of C.
    pub n: usize,
    /// The contracted extent.
    pub k: usize,
    /// A is stored `[k, m]`.
    pub trans_a: bool,
    /// B is stored `[n, k]`.
    pub trans_b: bool,
    /// Elements between consecutive A matrices.
    pub stride_a: usize,
    /// Elements between consecutive B matrices.
    pub stride_b: usize,
    /// Elements between consecutive C matrices.
    pub stride_c: usize,
}

/// A two-operand contraction: which input plays A, the permutations, the GEMM, and the
/// permutation of the GEMM's result into the output block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GemmPlan {
    /// The einsum operand (0 or 1) that plays A; the other plays B.
    pub a_operand: usize,
    /// Copy of A into the GEMM layout, if it is not in it already.
    pub permute_a: Option<Permute>,
    /// Copy of B into the GEMM layout, if needed.
    pub permute_b: Option<Permute>,
    /// The GEMM.
    pub gemm: Gemm,
    /// Copy of the `[batch, m, n]` result into the output layout, if they differ.
    pub permute_c: Option<Permute>,
}

/// A one-operand einsum: copy to `[kept..., summed...]`, then sum rows of `row` elements.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SumPlan {
    /// Copy into `[kept ++ summed]` order, if needed.
    pub permute: Option<Permute>,
    /// Number of output elements.
    pub rows: usize,
    /// Elements summed into each output element (1: a pure permutation).
    pub row: usize,
}

/// How the CUDA backend evaluates one einsum call on blocks of given shapes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ContractionPlan {
    /// Two operands: permutations and one batched GEMM.
    Gemm(GemmPlan),
    /// One operand: a permutation and a row sum.
    Sum(SumPlan),
}

impl GemmPlan {
    /// Elements copied by the plan's permutations (what the planner minimises).
    pub fn copied(&self) -> usize {
        [&self.permute_a, &self.permute_b, &self.permute_c].iter().filter_map(|p| p.as_ref()).map(|p| p.volume()).sum()
    }
}

/// Splits `ab,bc->ac` into its input terms and output term.
pub fn parse_equation(equation: &str) -> Result<(Vec<Vec<char>>, Vec<char>), PlanError> {
    let bad = |reason: &str| PlanError::Unsupported { equation: equation.to_string(), reason: reason.to_string() };
    let eq: String = equation.chars().filter(|c| !c.is_whitespace()).collect();
    let (lhs, rhs) = eq.split_once("->").ok_or_else(|| bad("no `->`"))?;
    let terms: Vec<Vec<char>> = lhs.split(',').map(|t| t.chars().collect()).collect();
    let out: Vec<char> = rhs.chars().collect();
    for t in terms.iter().chain(std::iter::once(&out)) {
        if t.iter().any(|c| !c.is_ascii_alphabetic()) {
            return Err(bad("letters must be ASCII letters"));
        }
        if t.iter().enumerate().any(|(i, c)| t[..i].contains(c)) {
            return Err(bad("a letter repeated in one term"));
        }
    }
    Ok((terms, out))
}

/// Plans `equation` on operand blocks of shapes `shapes` producing a block of shape
/// `out_shape`. Fails on more than two operands, on letters whose extents disagree, and on
/// an output letter found in no operand.
pub fn plan(equation: &str, shapes: &[Vec<usize>], out_shape: &[usize]) -> Result<ContractionPlan, PlanError> {
    let bad = |reason: String| PlanError::Unsupported { equation: equation.to_string(), reason };
    let (terms, out) = parse_equation(equation)?;
    if terms.len() != shapes.len() {
        return Err(bad(format!("{} terms, {} operand blocks", terms.len(), shapes.len())));
    }
    if out.len() != out_shape.len() {
        return Err(bad(format!("output term has {} letters, the block has rank {}", out.len(), out_shape.len())));
    }
    let mut extent: HashMap<char, usize> = HashMap::new();
    let out_vec = out_shape.to_vec();
    let pairs = terms.iter().zip(shapes).chain(std::iter::once((&out, &out_vec)));
    for (term, shape) in pairs {
        if term.len() != shape.len() {
            return Err(bad(format!("a term has {} letters, its block has rank {}", term.len(), shape.len())));
        }
        for (&c, &n) in term.iter().zip(shape) {
            if let Some(&e) = extent.get(&c)
                && e != n
            {
                return Err(bad(format!("letter `{c}` has extent {e} in one block and {n} in another")));
            }
            extent.insert(c, n);
        }
    }
    if let Some(c) = out.iter().find(|c| !terms.iter().any(|t| t.contains(c))) {
        return Err(bad(format!("output letter `{c}` is in no operand")));
    }
    match terms.len() {
        1 => Ok(ContractionPlan::Sum(plan_sum(&terms[0], &out, &extent))),
        2 => Ok(ContractionPlan::Gemm(plan_gemm(&terms[0], &terms[1], &out, &extent))),
        n => Err(bad(format!("{n} operands; the CUDA backend runs einsums of one or two operands"))),
    }
}

fn product(letters: &[char], extent: &HashMap<char, usize>) -> usize {
    letters.iter().map(|c| extent[c]).product()
}

/// Row-major strides of the letters of `term` with the given extents.
fn strides(term: &[char], extent: &HashMap<char, usize>) -> HashMap<char, usize> {
    let mut s = HashMap::new();
    let mut acc = 1;
    for &c in term.iter().rev() {
        s.insert(c, acc);
        acc *= extent[&c];
    }
    s
}

/// The copy of a tensor with letters `src` into the letter order `dst` (letters of `dst`
/// missing from `src` are broadcast), or `None` when `src` already is `dst`.
fn permute(src: &[char], dst: &[char], extent: &HashMap<char, usize>) -> Option<Permute> {
    let s = strides(src, extent);
    let p = Permute {
        dst_shape: dst.iter().map(|c| extent[c]).collect(),
        src_strides: dst.iter().map(|c| s.get(c).copied().unwrap_or(0)).collect(),
    };
    let broadcasts = dst.iter().any(|c| !src.contains(c) && extent[c] != 1);
    let same_letters = src.iter().all(|c| dst.contains(c) || extent[c] == 1);
    if !broadcasts && same_letters && p.is_identity() { None } else { Some(p) }
}

fn plan_sum(term: &[char], out: &[char], extent: &HashMap<char, usize>) -> SumPlan {
    let summed: Vec<char> = term.iter().copied().filter(|c| !out.contains(c)).collect();
    let order: Vec<char> = out.iter().chain(&summed).copied().collect();
    SumPlan { permute: permute(term, &order, extent), rows: product(out, extent), row: product(&summed, extent) }
}

/// The layout an operand of letters `term` takes as a GEMM operand with `batch`, `rows`
/// (m for A, n for B) and `k`: in place (possibly transposed) or through a permutation.
fn operand(
    term: &[char],
    batch: &[char],
    rows: &[char],
    k: &[char],
    extent: &HashMap<char, usize>,
) -> (bool, Option<Permute>) {
    let plain: Vec<char> = batch.iter().chain(rows).chain(k).copied().collect();
    let Some(p) = permute(term, &plain, extent) else { return (false, None) };
    let trans: Vec<char> = batch.iter().chain(k).chain(rows).copied().collect();
    match permute(term, &trans, extent) {
        None => (true, None),
        Some(_) => (false, Some(p)),
    }
}

fn plan_gemm(t0: &[char], t1: &[char], out: &[char], extent: &HashMap<char, usize>) -> GemmPlan {
    let mut best: Option<GemmPlan> = None;
    for a_operand in [0, 1] {
        let (ta, tb) = if a_operand == 0 { (t0, t1) } else { (t1, t0) };
        let batch: Vec<char> = out.iter().copied().filter(|c| ta.contains(c) && tb.contains(c)).collect();
        let m: Vec<char> = out.iter().copied().filter(|c| ta.contains(c) && !tb.contains(c)).collect();
        let n: Vec<char> = out.iter().copied().filter(|c| tb.contains(c) && !ta.contains(c)).collect();
        let summed = |first: &[char], second: &[char]| -> Vec<char> {
            let mut k: Vec<char> = first.iter().copied().filter(|c| !out.contains(c)).collect();
            k.extend(second.iter().copied().filter(|c| !out.contains(c) && !first.contains(c)));
            k
        };
        for k in [summed(ta, tb), summed(tb, ta)] {
            let (trans_a, permute_a) = operand(ta, &batch, &m, &k, extent);
            // B's natural layout is [k, n]: `operand` calls [n, k] plain, which is trans_b.
            let (b_is_kn, permute_b) = operand(tb, &batch, &n, &k, extent);
            let trans_b = !b_is_kn;
            let c_letters: Vec<char> = batch.iter().chain(&m).chain(&n).copied().collect();
            let (bs, ms, ns, ks) =
                (product(&batch, extent), product(&m, extent), product(&n, extent), product(&k, extent));
            let gemm = Gemm {
                batch: bs,
                m: ms,
                n: ns,
                k: ks,
                trans_a,
                trans_b,
                stride_a: ms * ks,
                stride_b: ns * ks,
                stride_c: ms * ns,
            };
            let candidate =
                GemmPlan { a_operand, permute_a, permute_b, gemm, permute_c: permute(&c_letters, out, extent) };
            if best.as_ref().is_none_or(|b| candidate.copied() < b.copied()) {
                best = Some(candidate);
            }
        }
    }
    best.expect("at least one candidate")
}

#[cfg(test)]
mod tests {
    use einsum_core::{DType, HostTensor, TensorDesc, TensorType, scaled_error};
    use einsum_joinagg::AbstractOperator;
    use einsum_ops::einsum::Einsum;

    use super::*;

    /// The host emulator of a permutation.
    fn run_permute(p: &Option<Permute>, src: Vec<f32>) -> Vec<f32> {
        let Some(p) = p else { return src };
        let mut out = Vec::with_capacity(p.volume());
        let rank = p.dst_shape.len();
        let mut idx = vec![0; rank];
        for _ in 0..p.volume() {
            out.push(src[idx.iter().zip(&p.src_strides).map(|(i, s)| i * s).sum::<usize>()]);
            for d in (0..rank).rev() {
                idx[d] += 1;
                if idx[d] < p.dst_shape[d] {
                    break;
                }
                idx[d] = 0;
            }
        }
        out
    }

    /// The host emulator of a batched GEMM, with the layouts the plan describes.
    fn run_gemm(g: &Gemm, a: &[f32], b: &[f32]) -> Vec<f32> {
        let mut c = vec![0.0f32; g.batch * g.stride_c];
        for bi in 0..g.batch {
            for i in 0..g.m {
                for j in 0..g.n {
                    let mut acc = 0.0;
                    for l in 0..g.k {
                        let av = a[bi * g.stride_a + if g.trans_a { l * g.m + i } else { i * g.k + l }];
                        let bv = b[bi * g.stride_b + if g.trans_b { j * g.k + l } else { l * g.n + j }];
                        acc += av * bv;
                    }
                    c[bi * g.stride_c + i * g.n + j] = acc;
                }
            }
        }
        c
    }

    fn emulate(plan: &ContractionPlan, inputs: &[Vec<f32>]) -> Vec<f32> {
        match plan {
            ContractionPlan::Sum(s) => {
                let x = run_permute(&s.permute, inputs[0].clone());
                x.chunks(s.row.max(1)).map(|r| r.iter().sum()).take(s.rows).collect()
            }
            ContractionPlan::Gemm(p) => {
                let (a, b) = (&inputs[p.a_operand], &inputs[1 - p.a_operand]);
                let a = run_permute(&p.permute_a, a.clone());
                let b = run_permute(&p.permute_b, b.clone());
                run_permute(&p.permute_c, run_gemm(&p.gemm, &a, &b))
            }
        }
    }

    /// Plans and emulates `equation` on random blocks of the given shapes and compares with
    /// the reference einsum; returns the plan.
    fn check(equation: &str, shapes: &[&[usize]], seed: u64) -> ContractionPlan {
        let (terms, out) = parse_equation(equation).unwrap();
        let descs: Vec<TensorDesc> = terms
            .iter()
            .zip(shapes)
            .map(|(t, s)| {
                let dims: Vec<(String, usize)> = t.iter().map(|c| c.to_string()).zip(s.iter().copied()).collect();
                let dims: Vec<(&str, usize)> = dims.iter().map(|(n, e)| (n.as_str(), *e)).collect();
                TensorDesc::of(&dims, DType::F32).unwrap()
            })
            .collect();
        let op = Einsum::new(equation, &descs).unwrap();
        let whole: Vec<TensorType> = descs.iter().map(|d| d.tensor_type()).collect();
        let f = einsum_joinagg::FunctionSpec { inputs: whole.clone(), outputs: vec![op.outputs()[0].tensor_type()] };
        let xs: Vec<HostTensor> =
            whole.iter().enumerate().map(|(i, t)| HostTensor::random(t.clone(), DType::F32, seed + i as u64)).collect();
        let reference = op.compute(&f, &xs).unwrap().remove(0);
        // Two orders of summing k products differ by at most 2·k·u·Σ|a·b| (u = 2⁻²⁴), so the
        // error is judged against the same einsum of the magnitudes, not the (cancelling) result.
        let magnitudes: Vec<HostTensor> = xs
            .iter()
            .map(|x| HostTensor::from_f32(x.ty().clone(), DType::F32, x.to_f32().iter().map(|v| v.abs()).collect()))
            .collect::<Result<_, _>>()
            .unwrap();
        let scale = op.compute(&f, &magnitudes).unwrap().remove(0).to_f32().into_iter().fold(0.0f32, f32::max);
        let summed: usize = terms
            .iter()
            .zip(shapes)
            .flat_map(|(t, s)| t.iter().zip(s.iter()))
            .filter(|(c, _)| !out.contains(c))
            .map(|(c, &e)| (*c, e))
            .collect::<HashMap<char, usize>>()
            .values()
            .product();
        let out_shape = reference.ty().shape();
        assert_eq!(out_shape.len(), out.len());
        let shapes: Vec<Vec<usize>> = shapes.iter().map(|s| s.to_vec()).collect();
        let plan = plan(equation, &shapes, &out_shape).unwrap();
        let got = emulate(&plan, &xs.iter().map(HostTensor::to_f32).collect::<Vec<_>>());
        let got = HostTensor::from_f32(reference.ty().clone(), DType::F32, got).unwrap();
        let err = scaled_error(&got, &reference, scale);
        let tolerance = (summed + 1) as f32 * f32::EPSILON;
        assert!(err <= tolerance, "{equation} {shapes:?}: error {err} > {tolerance}, plan {plan:?}");
        plan
    }

    #[test]
    fn matmul_needs_no_copy() {
        let ContractionPlan::Gemm(p) = check("ij,jk->ik", &[&[3, 4], &[4, 5]], 1) else { panic!("gemm") };
        assert_eq!(p.copied(), 0);
        assert_eq!((p.gemm.m, p.gemm.n, p.gemm.k, p.gemm.batch), (3, 5, 4, 1));
    }

    #[test]
    fn transposed_operands_are_read_in_place() {
        let ContractionPlan::Gemm(p) = check("ji,jk->ik", &[&[4, 3], &[4, 5]], 2) else { panic!("gemm") };
        assert_eq!(p.copied(), 0);
        assert!(p.gemm.trans_a);
        let ContractionPlan::Gemm(p) = check("ij,kj->ik", &[&[3, 4], &[5, 4]], 3) else { panic!("gemm") };
        assert_eq!(p.copied(), 0);
        assert!(p.gemm.trans_b);
        // C = A Bᵀ with the output transposed: swapping the roles avoids every copy.
        let ContractionPlan::Gemm(p) = check("ij,jk->ki", &[&[3, 4], &[4, 5]], 4) else { panic!("gemm") };
        assert_eq!(p.copied(), 0);
        assert_eq!(p.a_operand, 1);
    }

    #[test]
    fn llama_projections_and_attention_shapes() {
        check("td,dhe->hte", &[&[6, 8], &[8, 2, 3]], 5);
        check("hte,hed->td", &[&[2, 6, 3], &[2, 3, 8]], 6);
        check("bij,bjk->bik", &[&[3, 2, 4], &[3, 4, 5]], 7);
        check("ibj,bjk->bki", &[&[2, 3, 4], &[3, 4, 5]], 8);
        check("hqd,hkd->hqk", &[&[2, 5, 3], &[2, 4, 3]], 9);
        check("abc,cbd->da", &[&[2, 3, 4], &[4, 3, 5]], 10);
    }

    #[test]
    fn letters_summed_out_of_one_operand_are_broadcast_k() {
        let ContractionPlan::Gemm(p) = check("ijx,jk->ik", &[&[3, 4, 2], &[4, 5]], 11) else { panic!("gemm") };
        assert!(p.permute_a.is_some() || p.permute_b.is_some());
        check("ij,jky->ik", &[&[3, 4], &[4, 5, 3]], 12);
        check("ij,k->ik", &[&[3, 4], &[5]], 13);
        check("i,i->", &[&[7], &[7]], 14);
        // A result that cancels: judged against Σ|a·b|, not its own tiny magnitude.
        check("d,cb->d", &[&[2], &[1, 3]], 53);
        check("ij,ij->ij", &[&[3, 4], &[3, 4]], 15);
    }

    #[test]
    fn one_operand_sums_and_permutes() {
        let ContractionPlan::Sum(s) = check("ij->j", &[&[3, 4]], 16) else { panic!("sum") };
        assert_eq!((s.rows, s.row), (4, 3));
        check("ijk->ki", &[&[2, 3, 4]], 17);
        let ContractionPlan::Sum(s) = check("ij->ij", &[&[3, 4]], 18) else { panic!("sum") };
        assert!(s.permute.is_none());
    }

    #[test]
    fn unit_extents_are_harmless() {
        check("td,dhe->hte", &[&[1, 8], &[8, 1, 3]], 19);
        check("bij,bjk->bik", &[&[1, 1, 4], &[1, 4, 1]], 20);
    }

    #[test]
    fn unsupported_forms_are_errors() {
        assert!(plan("ab,bc,cd->ad", &[vec![2, 2], vec![2, 2], vec![2, 2]], &[2, 2]).is_err());
        assert!(plan("ij,jk->ik", &[vec![2, 3], vec![4, 2]], &[2, 2]).unwrap_err().to_string().contains("`j`"));
        assert!(plan("ij,jk->iz", &[vec![2, 3], vec![3, 2]], &[2, 2]).is_err());
        assert!(plan("ij,jk", &[vec![2, 3], vec![3, 2]], &[2, 2]).is_err());
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(32))]
        /// Random two-operand einsums over the letters a..e with random extents.
        #[test]
        fn random_einsums_match_the_reference(
            a_mask in 1u8..32, b_mask in 1u8..32, o_mask in 0u8..32, ext in proptest::collection::vec(1usize..4, 5),
            rot in 0usize..5, seed in 0u64..1000,
        ) {
            let letters = ['a', 'b', 'c', 'd', 'e'];
            let pick = |mask: u8, r: usize| -> Vec<char> {
                let mut v: Vec<char> = (0..5).filter(|i| mask >> i & 1 == 1).map(|i| letters[i]).collect();
                let len = v.len();
                if len > 0 { v.rotate_left(r % len); }
                v
            };
            let (ta, tb) = (pick(a_mask, rot), pick(b_mask, rot + 1));
            let out: Vec<char> = pick(o_mask, rot + 2).into_iter().filter(|c| ta.contains(c) || tb.contains(c)).collect();
            let eq = format!("{},{}->{}", ta.iter().collect::<String>(), tb.iter().collect::<String>(), out.iter().collect::<String>());
            let shape = |t: &[char]| -> Vec<usize> { t.iter().map(|c| ext[(*c as u8 - b'a') as usize]).collect() };
            let (sa, sb) = (shape(&ta), shape(&tb));
            check(&eq, &[&sa, &sb], seed);
        }
    }
}

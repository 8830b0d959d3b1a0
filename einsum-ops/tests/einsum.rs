//! Property tests of the einsum operator: every spec it enumerates for a random `p`
//! reproduces the whole-tensor result, and the whole-tensor GEMM kernel agrees with a naive
//! loop over every letter assignment.

use einsum_core::{DType, HostTensor, SeededRng, TensorDesc};
use einsum_joinagg::{AbstractOperator, Error, decomposition_error, enumerate_specs, execute_whole};
use einsum_ops::einsum::Einsum;
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::{Config, RngSeed, TestCaseError};

const LETTERS: [char; 4] = ['a', 'b', 'c', 'd'];

/// Deterministic runs: a case that fails once fails every time, so CI is reproducible.
/// (`decomposition_error` floors its scale at 1, so outputs that cancel to near zero are
/// judged on absolute error and do not fail spuriously.)
fn config() -> Config {
    Config { cases: 48, rng_seed: RngSeed::Fixed(0x5eed_e1a5), failure_persistence: None, ..Config::default() }
}

fn shuffled<T>(mut v: Vec<T>, rng: &mut SeededRng) -> Vec<T> {
    for i in (1..v.len()).rev() {
        v.swap(i, rng.below(i + 1));
    }
    v
}

/// Shrinks the largest extents until their product is at most `cap`, so no tensor and no
/// naive loop exceeds a few thousand elements.
fn capped(mut ext: Vec<usize>, cap: usize) -> Vec<usize> {
    while ext.iter().product::<usize>() > cap {
        if let Some(m) = ext.iter_mut().max() {
            *m -= 1;
        }
    }
    ext
}

/// An equation over `terms -> out` and tensor descs with the letters' extents. With
/// `positional`, every tensor names its dims `x0, x1, ...`, so names collide across tensors
/// and the operator must disambiguate them.
fn build(
    terms: &[Vec<char>],
    out: &[char],
    ext: &[usize],
    positional: bool,
    dtype: DType,
) -> (String, Vec<TensorDesc>) {
    let extent = |c: char| ext[LETTERS.iter().position(|&l| l == c).expect("a known letter")];
    let term_strings: Vec<String> = terms.iter().map(|t| t.iter().collect()).collect();
    let equation = format!("{}->{}", term_strings.join(","), out.iter().collect::<String>());
    let descs = terms
        .iter()
        .map(|t| {
            let dims: Vec<(String, usize)> = t
                .iter()
                .enumerate()
                .map(|(d, &c)| (if positional { format!("x{d}") } else { c.to_string() }, extent(c)))
                .collect();
            let dims: Vec<(&str, usize)> = dims.iter().map(|(n, e)| (n.as_str(), *e)).collect();
            TensorDesc::of(&dims, dtype).expect("distinct names within a tensor")
        })
        .collect();
    (equation, descs)
}

/// A binary contraction: each letter gets a role (batch, row, column, contracted, or
/// summed out of one operand only), and every term is shuffled.
fn binary(roles: &[u8], rng: &mut SeededRng) -> (Vec<Vec<char>>, Vec<char>) {
    let (mut a, mut b, mut out) = (Vec::new(), Vec::new(), Vec::new());
    for (&c, &role) in LETTERS.iter().zip(roles) {
        let (in_a, in_b, in_out) = match role {
            0 => (true, true, true),   // batch
            1 => (true, false, true),  // M
            2 => (false, true, true),  // N
            3 => (true, true, false),  // K
            4 => (true, false, false), // summed out of A
            _ => (false, true, false), // summed out of B
        };
        if in_a {
            a.push(c);
        }
        if in_b {
            b.push(c);
        }
        if in_out {
            out.push(c);
        }
    }
    (vec![shuffled(a, rng), shuffled(b, rng)], shuffled(out, rng))
}

/// A unary einsum: a sum over the letters left out of the output, then a permutation.
fn unary(n: usize, keep: &[bool], rng: &mut SeededRng) -> (Vec<Vec<char>>, Vec<char>) {
    let letters = LETTERS[..n].to_vec();
    let out = letters.iter().zip(keep).filter(|(_, k)| **k).map(|(c, _)| *c).collect();
    (vec![shuffled(letters, rng)], shuffled(out, rng))
}

/// Three operands, each holding a random subset of the letters; the output keeps a random
/// subset of the letters that occur.
fn ternary(n: usize, masks: &[u8], keep: u8, rng: &mut SeededRng) -> (Vec<Vec<char>>, Vec<char>) {
    let term = |mask: u8| -> Vec<char> { (0..n).filter(|&l| mask >> l & 1 == 1).map(|l| LETTERS[l]).collect() };
    let terms: Vec<Vec<char>> = masks.iter().map(|&m| shuffled(term(m), rng)).collect();
    let used: u8 = masks.iter().fold(0, |u, m| u | m);
    (terms, shuffled(term(used & keep), rng))
}

/// Draws a spec of `op` for `p` devices (none: nothing to check) and checks that it
/// reproduces the whole-tensor result.
fn check_decomposition(op: &dyn AbstractOperator, p: usize, pick: Index, seed: u64) -> Result<(), TestCaseError> {
    let choices = match enumerate_specs(op, p) {
        Err(Error::NoSpec { .. }) => return Ok(()),
        other => other.map_err(|e| TestCaseError::fail(e.to_string()))?,
    };
    let choice = &choices[pick.index(choices.len())];
    prop_assert_eq!(choice.spec.len(), p);
    let err = decomposition_error(op, &choice.spec, seed).map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert!(err <= 1e-5, "{:?} with counts {:?}: relative error {}", op, choice.counts, err);
    Ok(())
}

fn einsum(terms: &[Vec<char>], out: &[char], ext: &[usize], positional: bool) -> Result<Einsum, TestCaseError> {
    let (equation, descs) = build(terms, out, ext, positional, DType::F32);
    Einsum::new(&equation, &descs).map_err(|e| TestCaseError::fail(format!("{equation}: {e}")))
}

/// The contraction by a loop over every assignment of the letters, accumulated in f64, and
/// for each output element the sum of the magnitudes of its terms (the scale of the
/// rounding error any summation order may make).
fn naive(terms: &[Vec<char>], out: &[char], ext: &[usize], inputs: &[HostTensor]) -> (Vec<f64>, Vec<f64>) {
    let letters: Vec<char> = LETTERS.iter().copied().filter(|c| terms.iter().any(|t| t.contains(c))).collect();
    let extent = |c: char| ext[LETTERS.iter().position(|&l| l == c).expect("a known letter")];
    let size: usize = out.iter().map(|&c| extent(c)).product();
    let (mut value, mut scale) = (vec![0.0f64; size], vec![0.0f64; size]);
    let mut at = vec![0usize; letters.len()];
    let pos = |at: &[usize], c: char| at[letters.iter().position(|&l| l == c).expect("a used letter")];
    loop {
        let mut prod = 1.0f64;
        for (t, x) in terms.iter().zip(inputs) {
            let idx: Vec<usize> = t.iter().map(|&c| pos(&at, c)).collect();
            prod *= x.get(&idx).expect("in bounds") as f64;
        }
        let o = out.iter().fold(0, |o, &c| o * extent(c) + pos(&at, c));
        value[o] += prod;
        scale[o] += prod.abs();
        // Advance the odometer over the letters.
        let mut d = letters.len();
        loop {
            if d == 0 {
                return (value, scale);
            }
            d -= 1;
            at[d] += 1;
            if at[d] < extent(letters[d]) {
                break;
            }
            at[d] = 0;
        }
    }
}

fn check_against_naive(terms: &[Vec<char>], out: &[char], ext: &[usize], seed: u64) -> Result<(), TestCaseError> {
    let op = einsum(terms, out, ext, false)?;
    let inputs: Vec<HostTensor> = op
        .inputs()
        .iter()
        .enumerate()
        .map(|(k, d)| HostTensor::random(d.tensor_type(), d.dtype, seed + k as u64))
        .collect();
    let got = execute_whole(&op, &inputs).map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert_eq!(got[0].ty(), &op.outputs()[0].tensor_type());
    let (want, scale) = naive(terms, out, ext, &inputs);
    for (i, ((g, w), s)) in got[0].to_f32().iter().zip(&want).zip(&scale).enumerate() {
        prop_assert!(
            (*g as f64 - w).abs() <= 1e-5 * s + 1e-30,
            "{}: element {} is {}, the naive loop gives {} (scale {})",
            op.equation(),
            i,
            g,
            w,
            s
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn binary_contractions_decompose(
        roles in prop::collection::vec(0u8..6, 2..=4),
        ext in prop::collection::vec(1usize..=12, 4),
        shuffle in any::<u64>(),
        positional in any::<bool>(),
        p in 1usize..=16,
        pick in any::<Index>(),
        seed in any::<u64>(),
    ) {
        let (terms, out) = binary(&roles, &mut SeededRng::new(shuffle));
        let op = einsum(&terms, &out, &capped(ext, 4096), positional)?;
        check_decomposition(&op, p, pick, seed)?;
    }

    #[test]
    fn unary_sums_decompose(
        n in 1usize..=4,
        keep in prop::collection::vec(any::<bool>(), 4),
        ext in prop::collection::vec(1usize..=12, 4),
        shuffle in any::<u64>(),
        p in 1usize..=16,
        pick in any::<Index>(),
        seed in any::<u64>(),
    ) {
        let (terms, out) = unary(n, &keep, &mut SeededRng::new(shuffle));
        let op = einsum(&terms, &out, &capped(ext, 4096), false)?;
        check_decomposition(&op, p, pick, seed)?;
    }

    #[test]
    fn three_operand_einsums_decompose(
        n in 2usize..=4,
        masks in prop::collection::vec(0u8..16, 3),
        keep in 0u8..16,
        ext in prop::collection::vec(1usize..=12, 4),
        shuffle in any::<u64>(),
        p in 1usize..=16,
        pick in any::<Index>(),
        seed in any::<u64>(),
    ) {
        let (terms, out) = ternary(n, &masks, keep, &mut SeededRng::new(shuffle));
        let op = einsum(&terms, &out, &capped(ext, 4096), false)?;
        check_decomposition(&op, p, pick, seed)?;
    }

    #[test]
    fn matrix_chains_decompose(
        ext in prop::collection::vec(1usize..=12, 4),
        p in 1usize..=16,
        pick in any::<Index>(),
        seed in any::<u64>(),
    ) {
        let terms = vec![vec!['a', 'b'], vec!['b', 'c'], vec!['c', 'd']];
        let op = einsum(&terms, &['a', 'd'], &ext, false)?;
        check_decomposition(&op, p, pick, seed)?;
    }

    #[test]
    fn gemm_kernel_matches_a_naive_loop(
        kind in 0u8..3,
        roles in prop::collection::vec(0u8..6, 2..=4),
        masks in prop::collection::vec(0u8..16, 3),
        keep in prop::collection::vec(any::<bool>(), 4),
        ext in prop::collection::vec(1usize..=12, 4),
        shuffle in any::<u64>(),
        seed in any::<u64>(),
    ) {
        let mut rng = SeededRng::new(shuffle);
        let (terms, out) = match kind {
            0 => binary(&roles, &mut rng),
            1 => unary(roles.len(), &keep, &mut rng),
            _ => ternary(4, &masks, keep.iter().rev().fold(0, |m, &k| m << 1 | k as u8), &mut rng),
        };
        check_against_naive(&terms, &out, &capped(ext, 4096), seed)?;
    }
}

#[test]
fn f16_matmul_decomposes_within_half_precision() {
    let a = TensorDesc::of(&[("tokens", 24), ("d_model", 40)], DType::F16).unwrap();
    let b = TensorDesc::of(&[("d_model", 40), ("d_ff", 16)], DType::F16).unwrap();
    let op = Einsum::matmul(&a, &b).unwrap();
    assert_eq!(op.outputs()[0].dtype, DType::F16);
    for p in [2, 4, 8] {
        for (n, choice) in enumerate_specs(&op, p).unwrap().iter().enumerate() {
            let err = decomposition_error(&op, &choice.spec, n as u64).unwrap();
            assert!(err <= 1e-2, "p = {p}, counts {:?}: relative error {err}", choice.counts);
        }
    }
}

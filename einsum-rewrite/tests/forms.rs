//! The forms saturation finds: every association of a chain, and only those, cheapest first
//! with the costs an exhaustive enumeration gives (in flops, or in flops, elements moved and
//! launches); every form computes the written form's
//! numbers (a proptest per rule set); an unsound rule is caught.

use std::collections::{BTreeSet, HashMap};

use egg::rewrite;
use einsum_rewrite::{Cost, FormsError, Limits, Network, Rule, Tree, forms, forms_by, rules};
use proptest::prelude::*;

/// A chain of `dims.len() - 1` matrices, matrix `m` of `dims[m] x dims[m + 1]`.
fn chain(dims: &[usize]) -> Network {
    let names: Vec<String> = (0..dims.len()).map(|i| format!("i{i}")).collect();
    let leaves: Vec<Vec<&str>> = (0..dims.len() - 1).map(|m| vec![names[m].as_str(), names[m + 1].as_str()]).collect();
    let leaves: Vec<&[&str]> = leaves.iter().map(Vec::as_slice).collect();
    let extents: Vec<(&str, usize)> = names.iter().map(String::as_str).zip(dims.iter().copied()).collect();
    Network::new(&leaves, &extents, &[names[0].as_str(), names[dims.len() - 1].as_str()]).expect("a chain")
}

/// Every parenthesisation of tensors `lo..hi`, canonical.
fn all_associations(lo: usize, hi: usize) -> Vec<Tree> {
    Tree::associations(lo, hi).into_iter().map(Tree::canonical).collect()
}

fn catalan(n: usize) -> usize {
    (0..n).fold(1, |c, i| c * 2 * (2 * i + 1) / (i + 2))
}

/// Chains of 3 to 7 matrices: association alone finds exactly the Catalan number of forms,
/// with the flops of an exhaustive enumeration, cheapest first.
#[test]
fn association_finds_every_parenthesisation_and_no_other_form() {
    for dims in [
        vec![30, 35, 15, 5, 10, 20],
        vec![10, 100, 5, 50],
        vec![4, 9, 2, 7, 3],
        vec![5, 3, 8, 2, 6, 4, 7],
        vec![2, 6, 3, 9, 4, 8, 5, 7],
    ] {
        let n = chain(&dims);
        let matrices = dims.len() - 1;
        let found = forms(&n, &Tree::left_to_right(matrices), &rules::association(), usize::MAX, Limits::default())
            .expect("sound rules");
        assert!(found.saturated, "{dims:?}");
        let mut want: Vec<(f64, Tree)> = all_associations(0, matrices).into_iter().map(|t| (t.flops(&n), t)).collect();
        want.sort_by(|x, y| x.0.total_cmp(&y.0).then_with(|| x.1.cmp(&y.1)));
        assert_eq!(found.trees.len(), catalan(matrices - 1), "{dims:?}");
        assert_eq!(found.trees, want, "{dims:?}");
    }
    // The textbook case (CLRS 15.2): 6 matrices, best 15125 scalar multiplications.
    let n = chain(&[30, 35, 15, 5, 10, 20, 25]);
    let found = forms(&n, &Tree::left_to_right(6), &rules::association(), 1, Limits::default()).expect("sound");
    assert_eq!(found.trees[0].0, 2.0 * 15125.0);
    assert_eq!(
        found.trees[0].1,
        all_associations(0, 6).into_iter().min_by(|a, b| a.flops(&n).total_cmp(&b.flops(&n))).unwrap()
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    /// Under a cost of flops, elements moved and launches, the cheapest form extracted is the
    /// cheapest of an exhaustive enumeration under that cost, and the forms come cheapest first.
    #[test]
    fn extraction_by_cost_finds_the_exhaustive_best(
        dims in proptest::collection::vec(1usize..64, 4..8),
        (element, launch) in (0.0f64..50.0, 0.0f64..5000.0),
    ) {
        let n = chain(&dims);
        let matrices = dims.len() - 1;
        let cost = Cost { flop: 1.0, element, launch };
        let found = forms_by(&n, &Tree::left_to_right(matrices), &rules::association(), 3, Limits::default(), cost)
            .expect("sound");
        let best = all_associations(0, matrices).iter().map(|t| t.cost(&n, &cost)).fold(f64::INFINITY, f64::min);
        prop_assert!((found.trees[0].0 - best).abs() <= 1e-9 * best, "{} against {}", found.trees[0].0, best);
        prop_assert!((found.trees[0].1.cost(&n, &cost) - found.trees[0].0).abs() <= 1e-9 * best);
        prop_assert!(found.trees.windows(2).all(|w| w[0].0 <= w[1].0));
    }
}

/// With commutation too, the cheapest form of a chain is still the best parenthesisation
/// (an outer product is never cheaper here), and `k` limits the forms returned.
#[test]
fn commutation_keeps_the_best_and_k_bounds_the_list() {
    let n = chain(&[30, 35, 15, 5, 10, 20]);
    let exhaustive = all_associations(0, 5).iter().map(|t| t.flops(&n)).fold(f64::INFINITY, f64::min);
    let found = forms(&n, &Tree::left_to_right(5), &rules::contraction_rules(), 4, Limits::default()).expect("sound");
    assert_eq!(found.trees.len(), 4);
    assert_eq!(found.trees[0].0, exhaustive);
    assert!(found.trees.windows(2).all(|w| w[0].0 <= w[1].0));
}

/// The node limit bounds the e-graph (the search stops unsaturated, still with forms); a
/// form over a tensor the network lacks is refused.
#[test]
fn the_limits_bound_the_search() {
    let n = chain(&[2, 6, 3, 9, 4, 8, 5, 7, 3, 5]);
    let limits = Limits { nodes: 200, iterations: 30 };
    let found = forms(&n, &Tree::left_to_right(9), &rules::contraction_rules(), 2, limits).expect("sound");
    assert!(!found.saturated && !found.trees.is_empty());
    let e = forms(&n, &Tree::Leaf(9), &rules::association(), 1, Limits::default()).unwrap_err();
    assert_eq!(e, FormsError::NoSuchLeaf { form: "t9".into(), leaf: 9, leaves: 9 });
}

/// A dense tensor over some of the network's indices: row-major over `indices` in order.
#[derive(Clone, Debug)]
struct Dense {
    indices: Vec<usize>,
    data: Vec<f64>,
}

fn offset(n: &Network, indices: &[usize], at: &HashMap<usize, usize>) -> usize {
    indices.iter().fold(0, |o, i| o * n.extent(*i) + at[i])
}

/// The assignment of `indices` numbered `flat`, row-major.
fn assignment(n: &Network, indices: &[usize], flat: usize) -> HashMap<usize, usize> {
    let mut rest = flat;
    let mut at = HashMap::new();
    for &i in indices.iter().rev() {
        at.insert(i, rest % n.extent(i));
        rest /= n.extent(i);
    }
    at
}

/// Evaluates `tree` on `leaves` by naive loops; the result over the network's result indices.
fn evaluate(n: &Network, tree: &Tree, leaves: &[Dense]) -> Vec<f64> {
    fn go(n: &Network, tree: &Tree, leaves: &[Dense]) -> Dense {
        match tree {
            Tree::Leaf(k) => leaves[*k].clone(),
            Tree::Contract(a, b) => {
                let (a, b) = (go(n, a, leaves), go(n, b, leaves));
                let sa: BTreeSet<usize> = a.indices.iter().copied().collect();
                let sb: BTreeSet<usize> = b.indices.iter().copied().collect();
                let out: Vec<usize> = n.joined(&sa, &sb).into_iter().collect();
                let all: Vec<usize> = sa.union(&sb).copied().collect();
                let mut data = vec![0.0; out.iter().map(|i| n.extent(*i)).product()];
                let total: usize = all.iter().map(|i| n.extent(*i)).product();
                for flat in 0..total {
                    let at = assignment(n, &all, flat);
                    data[offset(n, &out, &at)] +=
                        a.data[offset(n, &a.indices, &at)] * b.data[offset(n, &b.indices, &at)];
                }
                Dense { indices: out, data }
            }
        }
    }
    let d = go(n, tree, leaves);
    (0..d.data.len()).map(|flat| d.data[offset(n, &d.indices, &assignment(n, n.output(), flat))]).collect()
}

/// Random values for the network's tensors.
fn random_leaves(n: &Network, seed: u64) -> Vec<Dense> {
    let mut state = seed;
    let mut next = move || {
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((state >> 33) as f64 / (1u64 << 31) as f64) * 2.0 - 1.0
    };
    (0..n.leaves())
        .map(|k| {
            let indices = n.leaf_indices(k).to_vec();
            let len = indices.iter().map(|i| n.extent(*i)).product();
            Dense { indices, data: (0..len).map(|_| next()).collect() }
        })
        .collect()
}

/// Whether every form `rules` finds from `start` computes `start`'s numbers (relative error
/// 1e-9), or why not.
fn sound_on(n: &Network, start: &Tree, rules: &[Rule], seed: u64) -> Result<(), String> {
    let found = forms(n, start, rules, usize::MAX, Limits::default()).map_err(|e| e.to_string())?;
    let leaves = random_leaves(n, seed);
    let want = evaluate(n, start, &leaves);
    let scale = want.iter().fold(1e-12f64, |m, v| m.max(v.abs()));
    for (_, form) in &found.trees {
        let got = evaluate(n, form, &leaves);
        let err = got.iter().zip(&want).fold(0.0f64, |m, (g, w)| m.max((g - w).abs())) / scale;
        if err > 1e-9 {
            return Err(format!("{form} differs from {start} by {err:e}"));
        }
    }
    Ok(())
}

/// A random binary tree over tensors `lo..hi` (its shape from `bits`).
fn random_tree(lo: usize, hi: usize, bits: &mut impl Iterator<Item = usize>) -> Tree {
    if hi - lo == 1 {
        return Tree::Leaf(lo);
    }
    let split = lo + 1 + bits.next().unwrap_or(0) % (hi - lo - 1);
    Tree::Contract(Box::new(random_tree(lo, split, bits)), Box::new(random_tree(split, hi, bits)))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Per rule set, on random chains written in random associations: every form found
    /// computes the same numbers.
    #[test]
    fn every_rule_is_sound(
        dims in proptest::collection::vec(1usize..4, 3..6),
        shape in proptest::collection::vec(0usize..8, 8),
        seed in any::<u64>(),
    ) {
        let n = chain(&dims);
        let start = random_tree(0, dims.len() - 1, &mut shape.into_iter());
        for (name, rules) in [("association", rules::association()), ("commutation", rules::commutation()), ("both", rules::contraction_rules())] {
            prop_assert_eq!(sound_on(&n, &start, &rules, seed), Ok(()), "{}", name);
        }
    }
}

/// A rule that does not hold fails the same check: one that drops a tensor merges parts
/// with different indices (in this language a rewrite that keeps every part's indices keeps
/// its tensors, so the index check is what catches a wrong rule; the numbers are checked
/// too).
#[test]
fn an_unsound_rule_fails_its_check() {
    let n = chain(&[2, 3, 4, 2]);
    let drop_one: Vec<Rule> = vec![rewrite!("drop"; "(* ?a ?b)" => "?a")];
    assert!(sound_on(&n, &Tree::left_to_right(3), &drop_one, 1).unwrap_err().contains("unsound"));
    assert!(matches!(forms(&n, &Tree::left_to_right(3), &drop_one, 1, Limits::default()), Err(FormsError::Unsound(_))));
}

//! Properties of the join-agg machinery on random small operators: every spec enumerated for
//! `p` devices validates and is one of the factorisations of `p`; executing a spec by
//! Definition 3.7 (join, aggregate, recompose) equals running the kernel once on the whole
//! tensors; a spec's blocks form the grid its interval counts say; the role table keeps the
//! first declaration and changes nothing on a conflict.
//!
//! The operator is a generalised einsum written here: each tensor follows some of up to four
//! named indices, and every index of no output is aggregated with ⊕ (sum, max, min or
//! product) over the product of the inputs. Case counts are sized for a 2-core machine; CI
//! sets `PROPTEST_RNG_SEED`.

use std::collections::{BTreeMap, HashSet};

use einsum_core::{Aggregation, DType, HostTensor, Interval, KernelClass, TensorDesc, Tiling};
use einsum_joinagg::{
    AbstractOperator, Error, FunctionSpec, IndexRole, JoinAggSpec, Result, Roles, ShardableIndex, enumerate_specs,
    execute_spec, execute_whole, factorizations, grid_spec, validate_spec,
};
use proptest::prelude::*;

/// The index names, in their fixed order.
const NAMES: [&str; 4] = ["a", "b", "c", "d"];

/// `out[o] = ⊕_{aggregated} Π_k in_k[...]`: inputs and the output each follow a list of
/// indices (positions into `extents`); every index of some input, none repeated in a tensor.
#[derive(Debug)]
struct Einsum {
    extents: Vec<usize>,
    input_indices: Vec<Vec<usize>>,
    output_indices: Vec<usize>,
    agg: Aggregation,
    inputs: Vec<TensorDesc>,
    outputs: Vec<TensorDesc>,
}

impl Einsum {
    fn new(extents: Vec<usize>, input_indices: Vec<Vec<usize>>, output_indices: Vec<usize>, agg: Aggregation) -> Self {
        let desc = |ix: &[usize]| {
            let dims: Vec<(&str, usize)> = ix.iter().map(|&i| (NAMES[i], extents[i])).collect();
            TensorDesc::of(&dims, DType::F32).expect("valid dims")
        };
        let inputs = input_indices.iter().map(|ix| desc(ix)).collect();
        let outputs = vec![desc(&output_indices)];
        Einsum { extents, input_indices, output_indices, agg, inputs, outputs }
    }

    /// The indices of no output: those ⊕ aggregates over.
    fn aggregated(&self) -> Vec<usize> {
        (0..self.extents.len()).filter(|i| !self.output_indices.contains(i)).collect()
    }
}

impl AbstractOperator for Einsum {
    fn kind(&self) -> &str {
        "toy-einsum"
    }
    fn kernel_class(&self) -> KernelClass {
        KernelClass::Elementwise
    }
    fn inputs(&self) -> &[TensorDesc] {
        &self.inputs
    }
    fn outputs(&self) -> &[TensorDesc] {
        &self.outputs
    }
    fn aggregation(&self) -> Aggregation {
        self.agg
    }
    fn shardable(&self) -> Vec<ShardableIndex> {
        self.extents.iter().enumerate().map(|(i, &e)| ShardableIndex::any(NAMES[i], e)).collect()
    }
    fn join_agg_spec(&self, intervals: &[Vec<Interval>]) -> Result<JoinAggSpec> {
        let dims: Vec<Vec<Option<usize>>> = self
            .input_indices
            .iter()
            .chain(std::iter::once(&self.output_indices))
            .map(|ix| ix.iter().map(|&i| Some(i)).collect())
            .collect();
        grid_spec("toy-einsum", &self.inputs, &self.outputs, &self.shardable(), &dims, intervals)
    }
    fn flops(&self, f: &FunctionSpec) -> f64 {
        f.inputs.iter().map(|t| t.volume() as f64).sum()
    }
    /// The kernel on one box: every index ranges over the interval its inputs' boxes give
    /// it; each output element folds ⊕ over the aggregated indices, starting from the first
    /// product (so that no identity such as -inf enters a result).
    fn compute(&self, f: &FunctionSpec, inputs: &[HostTensor]) -> Result<Vec<HostTensor>> {
        let mut range = vec![Interval::full(0); self.extents.len()];
        for (ix, b) in self.input_indices.iter().zip(&f.inputs) {
            for (d, &i) in ix.iter().enumerate() {
                range[i] = b.dim(d);
            }
        }
        let out_box = &f.outputs[0];
        let mut values = Vec::with_capacity(out_box.volume());
        let aggregated = self.aggregated();
        let mut at = vec![0; self.extents.len()];
        for flat in 0..out_box.volume() {
            // The output element's position, row-major.
            let mut rest = flat;
            for (d, &i) in self.output_indices.iter().enumerate().rev() {
                let iv = out_box.dim(d);
                at[i] = iv.lo + rest % iv.len();
                rest /= iv.len();
            }
            let mut acc: Option<f32> = None;
            for combo in 0..aggregated.iter().map(|&i| range[i].len()).product::<usize>() {
                let mut rest = combo;
                for &i in aggregated.iter().rev() {
                    at[i] = range[i].lo + rest % range[i].len();
                    rest /= range[i].len();
                }
                let product: f32 = self
                    .input_indices
                    .iter()
                    .zip(inputs)
                    .map(|(ix, t)| {
                        let pos: Vec<usize> = ix.iter().map(|&i| at[i]).collect();
                        t.get(&pos).expect("the position lies in the block")
                    })
                    .product();
                acc = Some(acc.map_or(product, |a| self.agg.apply(a, product)));
            }
            values.push(acc.expect("every aggregated range is non-empty"));
        }
        Ok(vec![HostTensor::from_f32(out_box.clone(), DType::F32, values)?])
    }
}

/// A random small einsum: 1 to 4 indices of extent 1 to 4; 1 or 2 inputs, each following a
/// non-empty subset of the indices in a random order, together following them all; an
/// output following a subset (possibly empty: a full reduction) in a random order.
fn einsum() -> impl Strategy<Value = Einsum> {
    (1usize..=4)
        .prop_flat_map(|n| {
            let subset = proptest::sample::subsequence((0..n).collect::<Vec<_>>(), 0..=n).prop_shuffle();
            (
                proptest::collection::vec(1usize..=4, n),
                proptest::collection::vec(subset.clone(), 1..=2),
                subset,
                prop_oneof![
                    Just(Aggregation::Sum),
                    Just(Aggregation::Max),
                    Just(Aggregation::Min),
                    Just(Aggregation::Product)
                ],
            )
        })
        .prop_map(|(extents, mut inputs, output, agg)| {
            // Every index is followed by some input, and no input is a scalar.
            let covered: HashSet<usize> = inputs.iter().flatten().copied().collect();
            let missing: Vec<usize> = (0..extents.len()).filter(|i| !covered.contains(i)).collect();
            inputs[0].extend(missing);
            for ix in &mut inputs {
                if ix.is_empty() {
                    ix.push(0);
                }
            }
            Einsum::new(extents, inputs, output, agg)
        })
}

/// Seeded inputs in [0.5, 1.5): products of a few of them stay near 1, so sums, products
/// and their reorderings compare within f32 rounding.
fn inputs(op: &Einsum, seed: u64) -> Vec<HostTensor> {
    op.inputs
        .iter()
        .enumerate()
        .map(|(k, d)| {
            let r = HostTensor::random(d.tensor_type(), DType::F32, seed.wrapping_add(k as u64));
            let shifted = r.to_f32().iter().map(|x| 1.0 + 0.5 * x).collect();
            HostTensor::from_f32(d.tensor_type(), DType::F32, shifted).expect("same type")
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    /// The specs enumerated for p are exactly the factorisations of p within the extents,
    /// each with p function specs, and each validates.
    #[test]
    fn enumerated_specs_are_the_factorisations_and_validate(op in einsum(), p in 1usize..=8) {
        let max: Vec<usize> = op.extents.clone();
        let expected = factorizations(p, &max);
        match enumerate_specs(&op, p) {
            Err(Error::NoSpec { .. }) => prop_assert!(expected.is_empty(), "no spec, but {expected:?}"),
            Err(e) => return Err(TestCaseError::fail(format!("{e}"))),
            Ok(specs) => {
                let counts: Vec<Vec<usize>> = specs.iter().map(|s| s.counts.clone()).collect();
                prop_assert_eq!(&counts, &expected);
                for s in &specs {
                    prop_assert_eq!(s.spec.len(), p);
                    prop_assert!(validate_spec(&op, &s.spec, Some(p)).is_ok());
                }
            }
        }
    }

    /// A spec's blocks form the grid of its counts: the output blocks tile the output, each
    /// aggregating as many partial results as the aggregated indices have parts; each
    /// input has one distinct block per combination of its indices' parts.
    #[test]
    fn spec_blocks_form_the_grid_of_their_counts(op in einsum(), p in 1usize..=8) {
        let Ok(specs) = enumerate_specs(&op, p) else { return Ok(()) };
        for s in specs {
            let parts = |ix: &[usize]| ix.iter().map(|&i| s.counts[i]).product::<usize>();
            prop_assert!(Tiling::new(op.outputs[0].tensor_type(), s.spec.output_blocks(0)).is_ok());
            let fan_in = parts(&op.aggregated());
            let multiplicities = s.spec.output_multiplicities(0);
            prop_assert_eq!(multiplicities.len(), parts(&op.output_indices));
            prop_assert!(multiplicities.iter().all(|(_, m)| *m == fan_in), "{multiplicities:?}");
            for (k, ix) in op.input_indices.iter().enumerate() {
                let distinct: HashSet<_> = s.spec.input_blocks(k).into_iter().collect();
                prop_assert_eq!(distinct.len(), parts(ix));
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Definition 3.7 on random data equals the kernel run once on the whole tensors, for
    /// every spec of p devices.
    #[test]
    fn the_decomposed_computation_equals_the_direct_one(op in einsum(), p in 1usize..=6, seed in any::<u64>()) {
        let Ok(specs) = enumerate_specs(&op, p) else { return Ok(()) };
        let x = inputs(&op, seed);
        let whole = execute_whole(&op, &x).expect("whole");
        for s in specs {
            let split = execute_spec(&op, &s.spec, &x).expect("split");
            let err = einsum_core::scaled_error(&split[0], &whole[0], 1.0);
            // Max and min are exact; sums and products of up to 64 terms near 1 reorder
            // within a few f32 rounding units of their magnitude.
            prop_assert!(err <= 1e-5, "{:?} counts {:?}: error {err}", op.agg, s.counts);
        }
    }

    /// The role table against a model: the first declaration of a name holds, the same
    /// role again changes nothing, another role is a conflict naming both declarers and
    /// changes nothing; `declare_all` applies every pair or, on a conflict, none.
    #[test]
    fn roles_keep_the_first_declaration(
        steps in proptest::collection::vec(
            (proptest::collection::vec((0usize..4, 0usize..3), 1..4), any::<bool>()),
            1..12,
        ),
    ) {
        const ROLES: [IndexRole; 3] = [IndexRole::Tokens, IndexRole::HeadsQ, IndexRole::FfnHidden];
        let mut roles = Roles::new();
        let mut model: BTreeMap<&str, (IndexRole, String)> = BTreeMap::new();
        for (n, (pairs, all)) in steps.into_iter().enumerate() {
            let by = format!("declarer {n}");
            let pairs: Vec<(String, IndexRole)> =
                pairs.into_iter().map(|(i, r)| (NAMES[i].to_string(), ROLES[r])).collect();
            if all {
                // The model: the pairs in order against a copy; any conflict drops the copy.
                let mut next = model.clone();
                let conflict = pairs.iter().any(|(name, role)| {
                    match next.get(name.as_str()) {
                        Some((first, _)) => first != role,
                        None => {
                            let name = NAMES.iter().find(|n| **n == name.as_str()).expect("a name");
                            next.insert(name, (*role, by.clone()));
                            false
                        }
                    }
                });
                let result = roles.declare_all(&pairs, &by);
                prop_assert_eq!(result.is_err(), conflict);
                if !conflict {
                    model = next;
                }
            } else {
                let (name, role) = &pairs[0];
                let result = roles.declare(name, *role, &by);
                match model.get(name.as_str()) {
                    Some((first, first_by)) if first != role => {
                        let e = result.expect_err("a conflict");
                        let message = e.to_string();
                        prop_assert!(message.contains(first_by.as_str()) && message.contains(&by), "{message}");
                    }
                    Some(_) => prop_assert!(result.is_ok()),
                    None => {
                        prop_assert!(result.is_ok());
                        let name = NAMES.iter().find(|n| **n == name.as_str()).expect("a name");
                        model.insert(name, (*role, by.clone()));
                    }
                }
            }
            let table: Vec<(&str, IndexRole)> = roles.iter().collect();
            let expected: Vec<(&str, IndexRole)> = model.iter().map(|(n, (r, _))| (*n, *r)).collect();
            prop_assert_eq!(table, expected);
        }
    }

    /// Factorisations are every ordered tuple within the bounds whose product is p, each
    /// once (checked against brute force).
    #[test]
    fn factorizations_are_exactly_the_bounded_tuples(p in 0usize..=24, max in proptest::collection::vec(1usize..=6, 0..4)) {
        let got = factorizations(p, &max);
        let mut brute = vec![Vec::new()];
        for &m in &max {
            brute = brute.into_iter().flat_map(|t: Vec<usize>| (1..=m).map(move |c| [t.clone(), vec![c]].concat())).collect();
        }
        let expected: Vec<Vec<usize>> =
            brute.into_iter().filter(|t| p > 0 && t.iter().product::<usize>() == p).collect();
        let mut sorted = got.clone();
        sorted.sort();
        sorted.dedup();
        prop_assert_eq!(sorted.len(), got.len(), "a tuple is listed twice");
        let mut expected_sorted = expected;
        expected_sorted.sort();
        prop_assert_eq!(sorted, expected_sorted);
    }
}

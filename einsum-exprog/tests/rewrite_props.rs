//! Property tests of the rewrites: soundness on random valid programs, the always-permitted
//! rules never refusing, and Theorem 5.6's insert-then-delete path.

mod common;

use common::{Partitions, Rng, naive, random_preamble, random_rewrite, random_valid_program, walk};
use einsum_exprog::rewrite::{self, Refusal};
use einsum_exprog::{Action, Program};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    /// Every rewrite applied to a random valid program yields a valid program; the rules the
    /// paper calls always permitted are never refused for validity.
    #[test]
    fn rewrites_are_sound(seed in any::<u64>()) {
        let mut rng = Rng::new(seed);
        let mut p = random_valid_program(&mut rng, Partitions::Any, 6);
        prop_assert!(p.validate().is_ok(), "generator produced an invalid program:\n{p}");
        for _ in 0..12 {
            let Some((rule, result)) = random_rewrite(&mut rng, &p) else { continue };
            match result {
                Ok(q) => {
                    prop_assert!(q.validate().is_ok(), "{rule} broke validity:\n{p}\n=>\n{q}");
                    let text = q.to_string();
                    prop_assert_eq!(einsum_exprog::parse(&text).ok(), Some(q.clone()));
                    p = q;
                }
                Err(Refusal::WouldBeInvalid(e)) | Err(Refusal::WouldBeIllFormed(e)) => {
                    prop_assert!(
                        !matches!(rule, "fission" | "fusion" | "introduce_relay"),
                        "{rule} is always permitted but was refused on\n{p}\n{e}"
                    );
                }
                Err(_) => {}
            }
        }
    }

    /// Theorem 5.6: from valid P to valid Q (same IN, OUT and membership) by inserting
    /// Q \ P in a firing order of Q, then deleting P \ Q latest-firing first; every step is
    /// permitted and every intermediate program is valid.
    #[test]
    fn insert_then_delete_reaches_any_valid_program(seed in any::<u64>()) {
        let mut rng = Rng::new(seed);
        let (preamble, membership) = random_preamble(&mut rng, Partitions::Explicit);
        let start = naive(&preamble, &membership);
        // The theorem fixes the membership; resolving it makes every action fire at one site.
        let p = walk(&mut rng, start.clone(), 8).resolve(&membership);
        let q = walk(&mut rng, start, 8).resolve(&membership);
        prop_assert!(p.validate().is_ok() && q.validate().is_ok());

        let q_closure = q.validate_with(&membership).unwrap().closure;
        let order: Vec<Action> = q_closure.firing_order().into_iter().cloned().collect();
        prop_assert_eq!(order.len(), q.body.len());
        let mut current: Program = p.clone();
        for a in order.into_iter().filter(|a| !p.body.contains(a)) {
            current = match rewrite::insert(&current, a.clone()) {
                Ok(next) => next,
                Err(r) => return Err(TestCaseError::fail(format!("insert {a} refused: {r}\n{current}"))),
            };
            prop_assert!(current.validate().is_ok());
        }
        let union_closure = current.validate_with(&membership).unwrap().closure;
        let mut doomed: Vec<&Action> = p.body.iter().filter(|a| !q.body.contains(a)).collect();
        doomed.sort_by_key(|a| std::cmp::Reverse(union_closure.last_round(a)));
        for a in doomed {
            current = match rewrite::delete(&current, a) {
                Ok(next) => next,
                Err(r) => return Err(TestCaseError::fail(format!("delete {a} refused: {r}\n{current}"))),
            };
            prop_assert!(current.validate().is_ok());
        }
        prop_assert_eq!(current, q);
    }
}

#[test]
fn generator_produces_varied_programs() {
    // Guards against a generator that silently stops exercising the rules.
    let mut applied = std::collections::BTreeMap::<&str, usize>::new();
    let mut rng = Rng::new(7);
    for _ in 0..40 {
        let mut p = random_valid_program(&mut rng, Partitions::Any, 4);
        for _ in 0..10 {
            if let Some((rule, Ok(q))) = random_rewrite(&mut rng, &p) {
                *applied.entry(rule).or_default() += 1;
                p = q;
            }
        }
    }
    for rule in common::RULES {
        assert!(applied.get(rule).copied().unwrap_or(0) > 0, "{rule} never applied: {applied:?}");
    }
}

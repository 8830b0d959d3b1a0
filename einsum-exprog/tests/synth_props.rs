//! Properties of synthesis on random preambles: the naive program is valid, and the searched
//! program is valid, keeps the preamble (cut into chunks), is never slower than the naive one, and is a function
//! of the seed.

mod common;

use common::{Partitions, Rng, random_preamble};
use einsum_exprog::synth::{SearchOptions, naive, search};
use einsum_exprog::{refine, refinement_of, simulate};
use einsum_sim::Topology;
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn searched_programs_are_valid_and_no_slower_than_naive(seed in any::<u64>()) {
        let mut rng = Rng::new(seed);
        let (preamble, _) = random_preamble(&mut rng, Partitions::Any);
        let topology = Topology::preset(if seed % 2 == 0 { "dgx-v100" } else { "dgx-a100" }).unwrap();

        let baseline = naive(&preamble).unwrap();
        prop_assert!(baseline.validate().is_ok(), "{}", baseline);
        let naive_ms = simulate(&baseline, &topology).unwrap().completion_ms;

        let options = SearchOptions { seed, iterations: 12, ..SearchOptions::default() };
        let found = search(&preamble, &topology, options).unwrap();
        prop_assert!(found.program.validate_with(&found.membership).is_ok(), "{}", found.program);
        prop_assert!(found.program.validate().is_ok());
        // the preamble, its atoms cut into the chunks the search chose
        prop_assert_eq!(refinement_of(&preamble, &found.program), Ok(found.chunks));
        prop_assert_eq!(found.program.with_body([]), refine(&preamble, found.chunks).unwrap());
        prop_assert!(found.completion_ms <= naive_ms, "{} > {}\n{}", found.completion_ms, naive_ms, found.program);
        let again = simulate(&found.program, &topology).unwrap();
        prop_assert!(again.valid);
        prop_assert!((again.completion_ms - found.completion_ms).abs() <= 1e-9 * found.completion_ms.max(1.0));

        let twice = search(&preamble, &topology, options).unwrap();
        prop_assert_eq!(twice.program, found.program);
    }
}

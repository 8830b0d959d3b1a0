//! The exchange corpus: preambles taken from real plans (`tests/data/corpus/`, written by
//! `cargo run --release -p einsum-experiments --example exchange_corpus -- --write DIR`: the
//! largest exchange of the DP's plan of the LLaMA block 1×1K and chains A–D on `dgx-v100`
//! and `dgx-a100x2`). On each, the search at the corpus's budget ([`CORPUS_SEARCH_ITERATIONS`])
//! must never lose to its best seed, must beat it on at least half of the cases (five of the
//! ten, one more than at 400 iterations), must beat it on chain B on `dgx-v100`, where deleting a
//! transfer that no seed leaves out pays, and must find a program almost twice as fast as
//! every seed on chain C on `dgx-v100` (the search's closing descent, `synth/search.rs`).

use std::path::PathBuf;

use einsum_exprog::synth::{CORPUS_SEARCH_ITERATIONS, SearchOptions, search};
use einsum_sim::Topology;

/// Every corpus file, with its machine (the file name up to the workload).
fn corpus() -> Vec<(String, String, String)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/corpus");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    files
        .into_iter()
        .map(|path| {
            let name = path.file_stem().unwrap().to_string_lossy().to_string();
            let machine = ["dgx-v100", "dgx-a100x2"].into_iter().find(|m| name.starts_with(&format!("{m}-"))).unwrap();
            (name.clone(), machine.to_string(), std::fs::read_to_string(&path).unwrap())
        })
        .collect()
}

#[test]
fn the_search_earns_its_iterations_on_the_corpus() {
    let cases = corpus();
    assert_eq!(cases.len(), 10);
    let options = SearchOptions { seed: 0, iterations: CORPUS_SEARCH_ITERATIONS, ..SearchOptions::default() };
    let mut wins = Vec::new();
    for (name, machine, src) in &cases {
        let preamble = einsum_exprog::load(src).unwrap_or_else(|e| panic!("{name}: {e}"));
        let topology = Topology::preset(machine).unwrap();
        let found = search(&preamble, &topology, options).unwrap();
        assert!(found.program.validate_with(&found.membership).is_ok(), "{name}");
        assert!(
            found.completion_ms <= found.seed_ms,
            "{name}: {} after a {} ms seed",
            found.completion_ms,
            found.seed_ms
        );
        if found.completion_ms < found.seed_ms * (1.0 - 1e-9) {
            wins.push(name.clone());
        }
        if name == "dgx-v100-chain-c" {
            // no seed comes near it: the closing descent's deletions halve the best seed's
            // time (9.9 -> 5.0 us at seed 0)
            assert!(
                found.completion_ms < 0.6 * found.seed_ms,
                "{name}: {} from {} ms",
                found.completion_ms,
                found.seed_ms
            );
        }
    }
    // 4 of the 10 at 400 iterations before the interned evaluation; 6 at seed 0 now
    assert!(wins.len() >= 5, "the search beat its best seed only on {wins:?}");
    assert!(wins.iter().any(|w| w == "dgx-v100-chain-b"), "{wins:?}");
}

#[test]
fn the_second_walk_starts_from_another_placement_and_beats_the_best_seed() {
    // The largest exchange of the LLaMA block 1×1K on `dgx-v100` with its partitions free (the
    // example's corpus, `tests/data/placement/`): the best seed (0.0441 ms) is under one
    // placement, and no walk from it improves on it at seeds 0–3; the best seed under the
    // canonical placement is 1.17× slower, and the walk from it passes the best seed (0.0437
    // ms at seed 0).
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/placement/dgx-v100-llama-1x1k-free.exprog");
    let preamble = einsum_exprog::load(&std::fs::read_to_string(path).unwrap()).unwrap();
    let topology = Topology::preset("dgx-v100").unwrap();
    let options = SearchOptions { iterations: CORPUS_SEARCH_ITERATIONS, ..SearchOptions::default() };
    let found = search(&preamble, &topology, options).unwrap();
    assert!(found.program.validate_with(&found.membership).is_ok());
    assert!(
        found.completion_ms < found.seed_ms * (1.0 - 1e-6),
        "{} ms from a {} ms seed",
        found.completion_ms,
        found.seed_ms
    );
}

//! The search's bounds: its state is estimated from the preamble before anything of it is
//! built, and a preamble whose state would not fit the memory it may take is not searched
//! (the naive program, with the reason); a chunk count whose state would not fit is not
//! tried; and its wall-clock budget counts from its start, seeds included. Memory limits are
//! given explicitly, so nothing depends on the machine's memory; no test bounds a time.

use std::collections::BTreeSet;
use std::time::Duration;

use einsum_exprog::Program;
use einsum_exprog::synth::collectives::{Collective, all_reduce};
use einsum_exprog::synth::{Fallback, SearchOptions, naive, naive_route_pairs, search, search_state_bytes};
use einsum_sim::Topology;

/// `atoms` atoms at site 0, each needed at sites 1 to 7.
fn broadcast(atoms: usize) -> Program {
    let inputs: Vec<String> = (0..atoms).map(|i| format!("A{i} @ 0")).collect();
    let outputs: Vec<String> = (0..atoms).flat_map(|i| (1..8).map(move |s| format!("A{i} @ {s}"))).collect();
    format!("GPUS: 0, 1, 2, 3, 4, 5, 6, 7\nIN: {}\nOUT: {}\n", inputs.join("; "), outputs.join("; ")).parse().unwrap()
}

fn options(iterations: usize, memory_limit: Option<usize>) -> SearchOptions {
    SearchOptions { seed: 1, iterations, memory_limit, ..SearchOptions::default() }
}

/// The state of a broadcast of `atoms` atoms from site 0 to the 7 others of a DGX.
fn broadcast_state(atoms: usize) -> usize {
    search_state_bytes(atoms, atoms, 8, naive_route_pairs(&broadcast(atoms)).unwrap())
}

/// The estimate grows with the square of the sends on one route: the issue's 10 000-atom
/// broadcast, which asked for 12.9 GB in one allocation on top of 6.4 GB before it aborted,
/// is estimated above 18 GB; the 1 000-atom one, which peaks at 0.18 GB, is under 1 GB.
#[test]
fn the_state_estimate_grows_with_the_square_of_the_sends_on_a_route() {
    assert_eq!(naive_route_pairs(&broadcast(100)).unwrap(), 7 * 100 * 100);
    let issue = broadcast_state(10_000);
    assert!(issue > 18_000_000_000, "{issue}");
    let small = broadcast_state(1_000);
    assert!(small > 180_000_000 && small < 1_000_000_000, "{small}");
    let ratio = broadcast_state(2_000) as f64 / broadcast_state(1_000) as f64;
    assert!(ratio > 3.0, "{ratio}");
    assert_eq!(search_state_bytes(usize::MAX, usize::MAX, 8, usize::MAX), usize::MAX, "saturates");
}

/// An all-gather spreads its sends over every route, so the same atoms take a fraction of a
/// broadcast's state: 72 sites each holding 72 of 5 184 atoms that every site needs (a
/// tensor-parallel all-gather on an NVL72) is estimated under 8 GB, where counting every
/// aggregate as leaving one site (groups² · sites) gave 68 GB and kept it from being searched.
#[test]
fn an_all_gather_spreads_its_pairs_over_every_route() {
    let sites = 72;
    let atoms = 72 * sites;
    let inputs: Vec<String> = (0..atoms).map(|i| format!("A{i} @ {}", i / 72)).collect();
    let all: Vec<String> = (0..sites).map(|s| s.to_string()).collect();
    let outputs: Vec<String> = (0..atoms).map(|i| format!("A{i} @ {}", all.join(", "))).collect();
    let preamble: Program = format!("IN: {}\nOUT: {}\n", inputs.join("; "), outputs.join("; ")).parse().unwrap();
    let pairs = naive_route_pairs(&preamble).unwrap();
    assert_eq!(pairs, sites * (sites - 1) * 72 * 72);
    let state = search_state_bytes(atoms, atoms, sites, pairs);
    assert!(state < 8_000_000_000, "{state}");
}

/// Under a limit below its estimate the search returns the naive program, saying why; over
/// it, the same preamble is searched and beats the naive program.
#[test]
fn a_search_that_would_not_fit_falls_back_to_the_naive_program() {
    let h100 = Topology::preset("dgx-h100").unwrap();
    let preamble = broadcast(200);
    let estimate = broadcast_state(200);
    let limit = estimate / 2;
    let found = search(&preamble, &h100, options(20, Some(limit))).unwrap();
    assert_eq!(found.fallback, Some(Fallback::Memory { atoms: 200, groups: 200, sites: 8, estimate, limit }));
    assert_eq!(found.program, naive(&preamble).unwrap());
    assert_eq!((found.evaluated, found.iterations, found.chunks), (1, 0, 1));
    assert_eq!(found.completion_ms, found.naive_ms);
    let reason = found.fallback.unwrap().to_string();
    assert!(reason.contains("kept the naive program") && reason.contains(&limit.to_string()), "{reason}");

    let searched = search(&preamble, &h100, options(20, Some(estimate))).unwrap();
    assert_eq!(searched.fallback, None);
    assert!(searched.completion_ms < searched.naive_ms / 2.0, "{} vs {}", searched.completion_ms, searched.naive_ms);
}

/// The all-reduce on the DGX-V100 is searched over chunked atoms without a limit; with a
/// limit that fits the whole atoms' state and not twice the atoms, no chunk count is tried.
#[test]
fn chunk_counts_whose_state_would_not_fit_are_not_tried() {
    let v100 = Topology::preset("dgx-v100").unwrap();
    let preamble = Collective::AllReduce.preamble(8, 1.0);
    let free = search(&preamble, &v100, options(0, None)).unwrap();
    assert!(free.chunks > 1, "{}", free.chunks);
    let atoms = preamble.inputs.len();
    let groups = preamble.outputs.iter().map(|r| &r.aggregate).collect::<BTreeSet<_>>().len();
    let pairs = naive_route_pairs(&preamble).unwrap();
    let limit = search_state_bytes(atoms, groups, 8, pairs);
    assert!(search_state_bytes(2 * atoms, 2 * groups, 8, 4 * pairs) > limit);
    let bounded = search(&preamble, &v100, options(0, Some(limit))).unwrap();
    assert_eq!((bounded.chunks, bounded.fallback), (1, None));
}

/// The wall-clock budget counts from the search's start: a budget already spent scores the
/// naive program, the first seed, and nothing else (the seeds used to run whatever it was,
/// and a zero budget kept the best of them), on one machine and on another.
#[test]
fn a_spent_budget_ends_the_search_after_the_first_seed() {
    let cases = [(broadcast(16), "dgx-h100"), (all_reduce(4, 1.0), "dgx-v100")];
    for (preamble, machine) in cases {
        let topology = Topology::preset(machine).unwrap();
        let spent = SearchOptions { time_limit: Some(Duration::ZERO), ..options(1000, None) };
        let found = search(&preamble, &topology, spent).unwrap();
        assert_eq!((found.evaluated, found.iterations, found.fallback), (1, 0, None), "{machine}");
        assert_eq!(found.origin, "naive", "{machine}");
        assert_eq!(found.completion_ms, found.naive_ms, "{machine}");
        let free = search(&preamble, &topology, options(10, None)).unwrap();
        assert!(free.evaluated > 1 && free.completion_ms < free.naive_ms, "{machine}");
    }
}

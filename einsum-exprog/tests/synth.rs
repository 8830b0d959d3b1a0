//! Synthesis: the naive program, the searched one (against the paper's examples and the
//! collectives), determinism, and errors.

use std::collections::BTreeSet;
use std::path::Path;

use einsum_exprog::synth::collectives::{Collective, all_reduce};
use einsum_exprog::synth::{SearchOptions, SynthError, canonical_membership, naive, search, search_observed};
use einsum_exprog::{PartitionId, Program, SimulateError, SiteId, load, simulate};
use einsum_sim::{PCIE_BRIDGE, Topology};

fn example(name: &str) -> Program {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples").join(name);
    load(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

fn preamble(name: &str) -> Program {
    example(name).with_body([])
}

fn topology(name: &str) -> Topology {
    Topology::preset(name).unwrap()
}

fn options(iterations: usize) -> SearchOptions {
    SearchOptions { seed: 1, iterations, ..SearchOptions::default() }
}

fn sites(s: &[usize]) -> BTreeSet<SiteId> {
    s.iter().map(|&i| SiteId(i)).collect()
}

fn part(name: &str) -> PartitionId {
    PartitionId::new(name).unwrap()
}

#[test]
fn naive_for_example_5_1_is_example_5_1() {
    let p = naive(&preamble("example_5_1_swap.exprog")).unwrap();
    assert_eq!(p, example("example_5_1_swap.exprog"));
}

#[test]
fn naive_is_valid_for_every_preamble() {
    let mut preambles: Vec<Program> = [
        "example_5_1_swap.exprog",
        "example_5_2_recursive_doubling.exprog",
        "example_5_3_v100_placement.exprog",
        "example_5_4_preamble.exprog",
        "explicit_partitions.exprog",
    ]
    .iter()
    .map(|n| preamble(n))
    .collect();
    preambles.extend(Collective::ALL.iter().map(|c| c.preamble(8, 1.0)));
    for p in preambles {
        let n = naive(&p).unwrap();
        let v = n.validate_with(&canonical_membership(&p).unwrap()).unwrap_or_else(|e| panic!("{e}\n{n}"));
        assert!(n.validate().is_ok());
        assert_eq!(n.with_body([]), p, "naive keeps the preamble");
        // placement-blind: the sized partitions take the sites in order
        assert_eq!(v.membership, canonical_membership(&p).unwrap());
        // no routing: every transfer leaves an atom's IN site, and only atoms move
        for a in n.body.iter().filter(|a| !a.is_local()) {
            assert_eq!(a.aggregate.len(), 1, "{a}");
            let atom = a.aggregate.atoms().iter().next().unwrap();
            assert_eq!(a.source_site(), Some(p.inputs[atom].site), "{a}");
        }
    }
}

#[test]
fn naive_placement_for_example_5_3_crosses_the_bridge() {
    let p = preamble("example_5_3_v100_placement.exprog");
    let s = simulate(&naive(&p).unwrap(), &topology("dgx-v100")).unwrap();
    assert_eq!(s.membership.sites(&part("G1")), Some(&sites(&[0, 1, 2, 3])));
    assert!(s.trace.bytes_through(PCIE_BRIDGE) > 0.0);
    assert!(s.completion_ms > 5.0 * 67.0);
}

#[test]
fn search_finds_the_papers_placement_for_example_5_3() {
    // The example is about whole atoms: cut into chunks, the atoms can take other routes (on
    // the FIFO preset, a faster program through G1 = {0,1,2,3} that sends a few chunks over
    // the bridge).
    let v100 = topology("dgx-v100");
    let whole = SearchOptions { max_chunks: 1, ..options(20) };
    let found = search(&preamble("example_5_3_v100_placement.exprog"), &v100, whole).unwrap();
    assert!(found.completion_ms <= 67.0 * 1.03, "{} ms\n{}", found.completion_ms, found.program);
    assert_eq!(found.membership.sites(&part("G1")), Some(&sites(&[0, 1, 4, 5])));
    assert_eq!(found.simulation.trace.bytes_through(PCIE_BRIDGE), 0.0);
    assert!(found.program.validate_with(&found.membership).is_ok());
    assert!(found.program.has_size_partitions(), "the preamble is kept");
}

#[test]
fn search_matches_recursive_doubling_for_example_5_2() {
    let found = search(&preamble("example_5_2_recursive_doubling.exprog"), &topology("dgx-h100"), options(20)).unwrap();
    assert!(found.completion_ms <= 6.2 * 1.03, "{} ms\n{}", found.completion_ms, found.program);
    assert!(found.completion_ms < found.naive_ms);
}

#[test]
fn search_places_example_5_4() {
    let p = preamble("example_5_4_preamble.exprog");
    for name in ["dgx-h100", "dgx-v100"] {
        let found = search(&p, &topology(name), options(20)).unwrap();
        assert!(found.program.validate().is_ok());
        assert!(found.completion_ms <= found.naive_ms);
        // each S_j is one site, the union of the S_j all four
        let placed: BTreeSet<SiteId> = found.membership.0.values().flatten().copied().collect();
        assert_eq!(placed, sites(&[0, 1, 2, 3]));
    }
}

#[test]
fn searched_beats_naive_on_the_collectives() {
    let options = options(10);
    for name in ["dgx-a100", "dgx-v100"] {
        let t = topology(name);
        for c in Collective::ALL {
            let p = c.preamble(8, 1.0);
            let naive_ms = simulate(&naive(&p).unwrap(), &t).unwrap().completion_ms;
            let found = search(&p, &t, options).unwrap();
            assert!(found.program.validate().is_ok());
            assert_eq!(found.naive_ms, naive_ms);
            assert!(found.completion_ms <= naive_ms, "{name} {}: {} > {naive_ms}", c.name(), found.completion_ms);
            assert!(found.completion_ms >= c.bound_ms(8, 1.0, &t) * (1.0 - 1e-9), "below the lower bound");
            if name == "dgx-v100" {
                assert!(found.completion_ms < naive_ms / 10.0, "{}: {} vs {naive_ms}", c.name(), found.completion_ms);
            }
        }
    }
    // all-reduce on the A100: a reduce-scatter then an all-gather, well below naive
    let a100 = topology("dgx-a100");
    let found = search(&all_reduce(8, 1.0), &a100, options).unwrap();
    assert!(found.completion_ms < 0.5 * found.naive_ms);
}

#[test]
fn search_is_deterministic_for_a_seed() {
    let p = all_reduce(4, 1.0);
    let v100 = topology("dgx-v100");
    let a = search(&p, &v100, options(40)).unwrap();
    let b = search(&p, &v100, options(40)).unwrap();
    assert_eq!(a.program, b.program);
    assert_eq!(a.completion_ms, b.completion_ms);
    assert_eq!((a.evaluated, a.iterations, a.refused), (b.evaluated, b.iterations, b.refused));
    assert_eq!(a.iterations, 40);
    assert!(a.evaluated > 0);
    assert!(a.completion_ms <= a.naive_ms);
}

/// The observer hears every annealing iteration, in order, and changes nothing.
#[test]
fn an_observed_search_reports_each_iteration_and_finds_the_same() {
    let p = all_reduce(4, 1.0);
    let v100 = topology("dgx-v100");
    let mut heard = Vec::new();
    let observed = search_observed(&p, &v100, options(40), &mut |n| heard.push(n)).unwrap();
    let plain = search(&p, &v100, options(40)).unwrap();
    assert_eq!(heard, (1..=40).collect::<Vec<_>>());
    assert_eq!((observed.program, observed.completion_ms), (plain.program, plain.completion_ms));
}

#[test]
fn a_given_body_is_a_seed() {
    // Example 5.2's body is recursive doubling: the search can only keep or beat it.
    let p = example("example_5_2_recursive_doubling.exprog");
    let given = simulate(&p, &topology("dgx-h100")).unwrap().completion_ms;
    let found = search(&p, &topology("dgx-h100"), options(0)).unwrap();
    assert!(found.completion_ms <= given);
}

#[test]
fn bad_preambles_are_typed_errors() {
    let p: Program = "GPUS: 0, 1\nIN: A @ 0\nOUT: A @ 2".parse().unwrap();
    assert!(matches!(naive(&p), Err(SynthError::Check(_))));
    assert!(matches!(search(&p, &topology("dgx-h100"), options(1)), Err(SynthError::Check(_))));
    let p: Program = "IN: A @ 0\nOUT: A @ 9".parse().unwrap();
    let e = search(&p, &topology("dgx-h100"), options(1)).unwrap_err();
    assert!(matches!(e, SynthError::Simulate(SimulateError::SiteOutOfRange { .. })), "{e}");
    assert!(e.to_string().contains("site 9"), "{e}");
}

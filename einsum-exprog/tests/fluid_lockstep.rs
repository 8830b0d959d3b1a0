//! Why the reduce-scatter stays above its bandwidth bound on the NVSwitch machines: in the
//! fluid (max-min) model, equal flows that start together end together, so every partial
//! reaches its root at the same instant and the roots' ⊕ cannot overlap any transfer, and
//! cutting the atoms into chunks does not change that (docs/RESULTS.md, "Synthesised
//! collectives"). These tests check the diagnosis on the simulator itself: if the model ever
//! let an aggregation start before the last transfer ended, they fail.

use einsum_exprog::synth::collectives::Collective;
use einsum_exprog::synth::naive;
use einsum_exprog::{Program, Simulation, refine, simulate};
use einsum_sim::Topology;

/// The naive reduce-scatter of 8 sites and 1 GB per site (every partial sent straight to its
/// root, the best seed on dgx-a100), its atoms cut into `chunks` chunks, simulated on the
/// pure fluid dgx-a100.
fn reduce_scatter(chunks: usize) -> Simulation {
    let preamble: Program = refine(&Collective::ReduceScatter.preamble(8, 1.0), chunks).unwrap();
    let topology = Topology::preset("dgx-a100").unwrap().fluid();
    simulate(&naive(&preamble).unwrap(), &topology).unwrap()
}

/// The first and last transfer ends, in ms.
fn transfer_ends(s: &Simulation) -> (f64, f64) {
    let ends: Vec<f64> = s.actions.iter().filter_map(|a| a.transfer.map(|t| t.end_ms)).collect();
    (ends.iter().copied().fold(f64::INFINITY, f64::min), ends.iter().copied().fold(0.0, f64::max))
}

#[test]
fn equal_transfers_that_start_together_end_together() {
    for chunks in [1, 4] {
        let s = reduce_scatter(chunks);
        let (first, last) = transfer_ends(&s);
        assert!(first > 0.0, "{chunks} chunks: some transfer ended at once");
        assert!((last - first).abs() <= 1e-9 * last, "{chunks} chunks: transfers end between {first} and {last} ms");
        // and the roots' aggregations all wait for them: the ⊕ is a tail after the transfers
        let aggregations: Vec<f64> =
            s.actions.iter().filter(|a| a.transfer.is_none()).filter_map(|a| a.aggregate.map(|t| t.start_ms)).collect();
        assert!(!aggregations.is_empty(), "{chunks} chunks: the roots aggregate nothing");
        assert!(
            aggregations.iter().all(|&start| start >= last * (1.0 - 1e-9)),
            "{chunks} chunks: an aggregation starts before the last transfer ends ({aggregations:?}, {last} ms)"
        );
        assert!(
            s.completion_ms > last * 1.1,
            "{chunks} chunks: the ⊕ tail is {} of {} ms",
            s.completion_ms - last,
            last
        );
    }
}

#[test]
fn more_chunks_arrive_no_earlier() {
    let whole = reduce_scatter(1);
    let chunked = reduce_scatter(4);
    let (_, whole_last) = transfer_ends(&whole);
    let (_, chunked_last) = transfer_ends(&chunked);
    assert!((whole_last - chunked_last).abs() <= 1e-9 * whole_last, "{whole_last} vs {chunked_last} ms");
    assert!(
        (whole.completion_ms - chunked.completion_ms).abs() <= 1e-6 * whole.completion_ms,
        "whole {} ms, 4 chunks {} ms",
        whole.completion_ms,
        chunked.completion_ms
    );
}

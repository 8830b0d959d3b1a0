//! Why the reduce-scatter stayed above its bandwidth bound on the NVSwitch machines under
//! max-min sharing, and how serving each channel in issue order removes the cause
//! (docs/RESULTS.md, "Synthesised collectives"; `einsum-sim/src/service.rs`).
//!
//! Under [`LinkService::Fair`] equal flows that start together end together, so every
//! partial reaches its root at the same instant and the roots' ⊕ cannot overlap any
//! transfer, and cutting the atoms into chunks does not change that. Under
//! [`LinkService::Fifo`] (the presets' service) the chunks of one pair go one after the
//! other, so chunk 1 arrives at full share and its ⊕ overlaps chunk 2's transfer. These tests
//! check both on the simulator itself: if fair sharing ever let an aggregation start before
//! the last transfer ended, or FIFO stopped pipelining the chunks, they fail.

use einsum_exprog::synth::collectives::Collective;
use einsum_exprog::synth::naive;
use einsum_exprog::{Program, Simulation, refine, simulate};
use einsum_sim::{LinkService, Topology};

/// The naive reduce-scatter of 8 sites and 1 GB per site (every partial sent straight to its
/// root), its atoms cut into `chunks` chunks, simulated on the pure fluid dgx-a100 with
/// `service`.
fn reduce_scatter(chunks: usize, service: LinkService) -> Simulation {
    let preamble: Program = refine(&Collective::ReduceScatter.preamble(8, 1.0), chunks).unwrap();
    let topology = Topology::preset("dgx-a100").unwrap().fluid().with_service(service);
    simulate(&naive(&preamble).unwrap(), &topology).unwrap()
}

/// The first and last transfer ends, in ms.
fn transfer_ends(s: &Simulation) -> (f64, f64) {
    let ends: Vec<f64> = s.actions.iter().filter_map(|a| a.transfer.map(|t| t.end_ms)).collect();
    (ends.iter().copied().fold(f64::INFINITY, f64::min), ends.iter().copied().fold(0.0, f64::max))
}

/// When the roots' aggregations start, in ms.
fn aggregation_starts(s: &Simulation) -> Vec<f64> {
    s.actions.iter().filter(|a| a.transfer.is_none()).filter_map(|a| a.aggregate.map(|t| t.start_ms)).collect()
}

#[test]
fn equal_transfers_that_start_together_end_together_under_fair_sharing() {
    for chunks in [1, 4] {
        let s = reduce_scatter(chunks, LinkService::Fair);
        let (first, last) = transfer_ends(&s);
        assert!(first > 0.0, "{chunks} chunks: some transfer ended at once");
        assert!((last - first).abs() <= 1e-9 * last, "{chunks} chunks: transfers end between {first} and {last} ms");
        // and the roots' aggregations all wait for them: the ⊕ is a tail after the transfers
        let aggregations = aggregation_starts(&s);
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
fn more_chunks_arrive_no_earlier_under_fair_sharing() {
    let whole = reduce_scatter(1, LinkService::Fair);
    let chunked = reduce_scatter(4, LinkService::Fair);
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

/// Under FIFO the 4 chunks of each pair arrive one after the other, the first at a quarter of
/// the transfers' span; every root's ⊕ of chunk `c` starts when chunk `c` arrives, before the
/// last transfer ends; and only the last chunk's ⊕ (a quarter of the whole ⊕) is left after
/// the transfers. Whole atoms are no different from fair sharing: one flow per pair.
#[test]
fn fifo_pipelines_the_chunks_and_hides_all_but_the_last_aggregation() {
    let fair = reduce_scatter(4, LinkService::Fair);
    let whole = reduce_scatter(1, LinkService::Fifo);
    assert_eq!(whole.completion_ms, reduce_scatter(1, LinkService::Fair).completion_ms);
    let s = reduce_scatter(4, LinkService::Fifo);
    let (first, last) = transfer_ends(&s);
    let (_, fair_last) = transfer_ends(&fair);
    assert!((last - fair_last).abs() <= 1e-9 * last, "the same bytes through the same ports: {last} vs {fair_last}");
    assert!((first - last / 4.0).abs() <= 1e-9 * last, "first chunk at {first} of {last} ms");
    let early = aggregation_starts(&s).into_iter().filter(|&start| start < last * (1.0 - 1e-9)).count();
    assert_eq!(early, 8 * 3, "the ⊕ of the first three chunks at each of the 8 roots starts before the last transfer");
    let fair_tail = fair.completion_ms - fair_last;
    let tail = s.completion_ms - last;
    assert!(
        (tail - fair_tail / 4.0).abs() <= 1e-6 * fair_tail,
        "tail {tail} ms against {fair_tail} under fair sharing"
    );
}

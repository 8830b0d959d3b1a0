//! Synthesis of program bodies (Section 5.4): given a preamble (`GPUS`, `PARTITIONS`, `IN`,
//! `OUT`), find a valid body that the simulator says is fast.
//!
//! - [`naive`]: gather every atom of each required aggregate at each site that needs it and
//!   aggregate there (the baseline of the paper's Experiment 4).
//! - [`search`]: a seeded, deterministic simulated-annealing search over placements
//!   (memberships of partitions declared by size) and rewrites of the action set; every
//!   candidate is validity-checked and costed by [`crate::simulate`]; the cheapest is kept.
//!   Its files: `search/mod.rs` (options, result, the entry points), `search/seeds.rs`,
//!   `search/walk.rs` (annealing and descent), `search/moves.rs`, `search/state.rs`, and
//!   `budget.rs` (the wall-clock budget).
//! - [`rewrites`]: the Section 5.4 rewrites the search draws, each a value ([`Rewrite`]: a
//!   name, a weight and `propose`), the list in [`SearchOptions::rewrites`] ([`REWRITES`] by
//!   default), so a rule of another crate is one more value in it.
//! - `stripes`: the multi-ring seed (the groups dealt to the machine's directed rings).
//! - `hierarchical`: the seed bodies that know a multi-node machine's nodes (one of the
//!   search's seeds; the plan is in its docs).
//! - [`collectives`]: the requirements of all-reduce, all-gather and reduce-scatter as
//!   preambles, to compare the two against the bandwidth lower bounds
//!   (`cargo run --release -p einsum-exprog --example collectives` prints the table; with
//!   `-- --topology dgx-a100x2`, flat against hierarchical against the inter-node bound).
//!
//! # The search
//!
//! The state is a membership and a body of site-sourced actions (the preamble resolved under
//! the membership). OUT is first split into *groups*: one per distinct required aggregate,
//! with every site that needs it and the atoms each site holds.
//!
//! 0. **Chunk counts.** The preamble is tried whole and with every atom cut into `k` chunks
//!    ([`crate::refine`]) for `k` in 2, 4, 8 and the count that stripes the groups over the
//!    machine's rings (`stripes.rs`: on the DGX-V100, 48 chunks of one atom per site), up to
//!    [`SearchOptions::max_chunks`], at most [`MAX_REFINED_ATOMS`] atoms and no chunk under
//!    [`MIN_CHUNK_GB`] (a pure fluid topology, one without latencies, would make any cut
//!    look free). The seeds below are built for each count; the annealing continues with the
//!    count whose best seed is fastest (a tie keeps fewer chunks). Chunks let chains
//!    pipeline and let a reduce-scatter exist where the preamble has one indivisible atom
//!    per site; the result's program is over the chunks ([`Searched::chunks`]).
//! 1. **Seeds**, all validated and simulated: the naive program; the given body, if the
//!    preamble came with a valid one; and, under two placements (the placement-blind one of
//!    [`canonical_membership`], and one that puts each partition where its atoms already are),
//!    structured bodies in which every group has the same plan: a star reduction to a root and
//!    a multicast from it (with distinct roots, an all-reduce becomes a reduce-scatter then an
//!    all-gather), the machine's fastest-path trees, congestion-aware trees (each group's trees
//!    routed around the load the earlier groups put on the topology's resources), pipelines
//!    (chains) and binomial trees along ring orders of the machine (the sites in order, the
//!    Hamiltonian cycle with the widest bottleneck, the best cycle disjoint from it, and their
//!    reverses: the ring collectives), and recursive doubling (Example 5.2); each with and
//!    without relays around routes slower than a two-hop alternative; and striped rings
//!    (`stripes.rs`): the groups dealt to the directed rings that share no link, in
//!    proportion to their bandwidth, each reduced and spread by a chain along its ring.
//!    On a machine of several nodes, when some group's sites span nodes, two more seeds per
//!    placement: the bodies of `hierarchical.rs` (reduce inside each node to the site with
//!    the root's local index, by a star or, in the root's node, a chain; cross between
//!    corresponding GPUs only; spread inside each node), so that the search does not start
//!    only from flat seeds, whose rings and trees load a few NICs.
//!    [`SearchOptions::hierarchical`] turns them off (to measure the gain); on a machine of
//!    one node they are never built, so the search there is unchanged.
//! 2. **Walks.** The iterations are split between independent walks (two of at least 500
//!    iterations each; a smaller budget runs one), each with its own stretch of the random
//!    stream, annealing then descending (below); the best over the walks is kept. The first
//!    starts from the best seed; the second from the best seed under another placement when
//!    that is within 1.25× of the best (another basin close enough for a walk to pass the best
//!    seed from it), else from the best seed again. On the exchange corpus whether a walk
//!    improves on its seed depends much on its stream (a case won at one seed is lost at
//!    another), and two walks of 500 iterations win more cases, at every seed tried, than one
//!    of 1000; starting the second from another placement wins a case no walk from the best
//!    seed reaches (the dgx-v100 1×1K block, whose best program is under the placement of a
//!    worse seed).
//!
//!    **Simulated annealing** from the best seed. Each iteration proposes one move:
//!    - re-plan one group (35%): change its root, the shape of its reduction or of its
//!      spreading, its ring order, its relaying, or hang one site of one of its trees under
//!      another parent (relay introduction and elimination, and aggregation pushdown, on the
//!      tree's edges); the group's actions are replaced by the new plan's;
//!    - re-plan every group (7%) with one shape, or with congestion-aware trees laid out in a
//!      random group order;
//!    - a placement move (8%, with two or more partitions declared by size): swap two sites
//!      between partitions and rebuild the body from the plans (how Example 5.3's placement is
//!      found when the seeds miss it), half the time on a machine with slow routes then
//!      sending every transfer that has a faster two-hop detour through it (a placement
//!      change combined with relays);
//!    - a decongesting move (8%, on a machine whose routes differ; `decongest.rs`): the
//!      resource (link or PCIe bridge) with the most bytes per capacity under the body's
//!      transfers sheds one of its transfers, relayed through the site, or sent from the other
//!      holder of its aggregate, whose new route is least loaded, if that is under the
//!      resource's load;
//!    - otherwise a Section 5.4 rewrite of [`crate::rewrite`] at a random place: relay
//!      introduction (aimed at slow routes), relay elimination, multicast fission and fusion,
//!      aggregation pushdown and pullup, source substitution, or deletion; or a composite
//!      move that two rewrites make together, reaching programs whose intermediate step the
//!      walk may have refused: a relay chain (a transfer through two sites in a row),
//!      relay-and-combine (`X @ r -> d`, `Y @ q -> d` become `Y @ q -> r`, `X+Y @ r -> d`:
//!      relay introduction then a pushdown across rounds, a partial sum neither forms
//!      alone), or every slow route through its detour.
//!
//!    Every candidate is checked once for validity and every valid one is simulated
//!    (results are cached by a 64-bit digest of membership and body); the search applies
//!    the rewrites without their own validity guard (`rewrite::unguarded`), and scores
//!    through `eval.rs`, which computes what [`crate::Program::validate_with`],
//!    [`crate::lower`] and the simulator give, bit for bit, over atoms interned once per
//!    search (a candidate carries the body only, so a move does not clone the preamble). A candidate is accepted by the Metropolis rule on an
//!    objective that adds half the mean task end time to the completion time, so that moves
//!    shortening paths other than the critical one count as progress on a makespan plateau;
//!    the temperature decays geometrically to 1% of [`SearchOptions::temperature`]; after a
//!    stretch without improvement the walk restarts from the best. The best candidate by
//!    completion time is returned, so the result is never slower than the best seed
//!    ([`Searched::seed_ms`] says how fast that was, and so what the iterations earned).
//!
//!    The last quarter of a walk's iterations is a **descent** from its best program: every
//!    deletion, relay elimination, fusion, source substitution and pushdown of it, in a
//!    seeded random order, one per iteration, the first that improves the best taken and the
//!    list rebuilt around it; at a local optimum of those the annealing resumes with the
//!    iterations left.
//!    Sampling finds the one useful deletion among a few hundred actions only by luck; the
//!    descent tries each (on chain C of the corpus, a deletion no seed and no sampled move
//!    found halves the best seed's time).
//! 3. **Determinism**: every choice comes from a `SeededRng` stream seeded with
//!    [`SearchOptions::seed`], the budget is an iteration count, and iteration order is that of
//!    ordered collections; the optional wall-clock cap is the only source of variation.
//!
//! # Bounds
//!
//! Before anything of the search is built, its state is estimated from the preamble's atoms,
//! required aggregates and sites and its naive seed's routes ([`search_state_bytes`]: a move's
//! candidate lists grow with the square of the sends one route carries,
//! [`naive_route_pairs`]); a preamble whose state would exceed
//! [`SearchOptions::memory_limit`] (by default the `1 / SEARCH_MEMORY_SHARE` of the host
//! memory available) is not searched: the result is its naive program, and
//! [`Searched::fallback`] says why (a broadcast of 10 000 atoms on 8 sites, about 20 GB).
//! The wall-clock cap ([`SearchOptions::time_limit`]) counts from the search's start and
//! bounds the seeds and chunk counts as well as the walks: no step starts once the time spent
//! and the longest step so far reach it.
//!
//! # Why not `egg`
//!
//! Equality saturation (the `egg` crate) was evaluated for this search and does not fit:
//!
//! - *A body is a set of actions.* In an e-graph it would be a term built with an
//!   associative-commutative operator, and egg matches patterns syntactically, with no AC
//!   matching; the commutativity and associativity rewrites that would stand in for it are the
//!   known blow-up (egg issue #334, "Simple set of addition rewrites already explodes"; egglog
//!   issue #410). Here a body is a `BTreeSet`, canonical by construction, and a rewrite is a
//!   direct set edit.
//! - *The rules are not equalities.* Each rewrite of Section 5.4 is guarded by the validity of
//!   the whole program (its closure under Definition 5.5, and for pullup, relay elimination
//!   and source substitution, materialisations that other actions or `OUT` rely on). An egg
//!   conditional applier sees one match and the e-class analyses, not a whole candidate
//!   program, and extraction may combine choices from different e-classes that were never
//!   checked together.
//! - *The cost is global.* egg's `Extractor` needs a cost that each e-node computes from its
//!   children's costs, and `LpExtractor` a linear per-node cost; ours is the makespan of a
//!   max-min fair fluid simulation of the whole program, in which any two concurrent actions
//!   can contend for a link, so it does not decompose. Extracting from an e-graph would mean
//!   enumerating the programs it represents and simulating each: a search, with the e-graph
//!   adding only memory.
//! - *The space does not saturate:* a relay can be inserted through any site, on any
//!   transfer, indefinitely.
//!
//! So the search is a canonical action-set rewriter driven by simulated annealing (a beam
//! search over the same moves would also fit; annealing needs one candidate per step, which
//! keeps a fixed iteration budget meaningful).
//!
//! ```
//! use einsum_exprog::synth::{SearchOptions, collectives, naive, search};
//! use einsum_sim::Topology;
//!
//! let v100 = Topology::preset("dgx-v100")?;
//! let preamble = collectives::all_gather(8, 1.0);
//! let baseline = einsum_exprog::simulate(&naive(&preamble)?, &v100)?;
//! let found = search(&preamble, &v100, SearchOptions { iterations: 10, ..SearchOptions::default() })?;
//! assert!(found.program.validate().is_ok());
//! assert!(found.completion_ms < baseline.completion_ms / 2.0); // no more PCIe bridge
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod budget;
pub mod collectives;
mod decongest;
mod eval;
mod hierarchical;
mod naive;
mod owners;
mod plan;
pub mod rewrites;
mod search;
mod stripes;

use std::collections::{BTreeMap, BTreeSet};

pub use naive::{naive, naive_validated};
pub use rewrites::{REWRITES, Rewrite, RewriteSite, Rewrites};
pub use search::{
    CORPUS_SEARCH_ITERATIONS, DEFAULT_SEARCH_ITERATIONS, Fallback, MAX_CHUNKS, MAX_REFINED_ATOMS, MIN_CHUNK_GB,
    SEARCH_MEMORY_SHARE, SearchOptions, Searched, naive_route_pairs, search, search_observed, search_state_bytes,
};

use crate::check::CheckError;
use crate::cost::SimulateError;
use crate::ids::SiteId;
use crate::membership::Membership;
use crate::program::Program;
use crate::target::Target;
use crate::validity::ValidityError;

/// Why a body could not be synthesized.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SynthError {
    /// The preamble fails a static check.
    #[error(transparent)]
    Check(#[from] CheckError),
    /// The partitions cannot be given sites.
    #[error("cannot place the partitions: {0}")]
    Placement(String),
    /// The naive program is not valid: `OUT` cannot be met (it always can for a preamble
    /// that passes the checks, so this would be a bug).
    #[error("the naive program is not valid: {0}")]
    Unsatisfiable(ValidityError),
    /// The preamble cannot be simulated on the topology (e.g. a site it lacks).
    #[error(transparent)]
    Simulate(#[from] SimulateError),
}

/// The preamble alone (body dropped), after the static checks.
pub(crate) fn checked_preamble(preamble: &Program) -> Result<Program, SynthError> {
    let p = preamble.with_body([]);
    p.check()?;
    Ok(p)
}

/// The sites no explicit partition holds, ascending.
fn free_sites(preamble: &Program) -> Vec<SiteId> {
    let taken: BTreeSet<SiteId> = preamble.declared_membership().0.values().flatten().copied().collect();
    preamble.sites().difference(&taken).copied().collect()
}

/// The placement-blind membership: explicit partitions as declared, then the partitions
/// declared by size, in name order, each taking the next free sites in ascending order.
pub fn canonical_membership(preamble: &Program) -> Result<Membership, SynthError> {
    let mut membership = preamble.declared_membership();
    let mut free = free_sites(preamble).into_iter();
    for (name, k) in preamble.sized_partitions() {
        let sites: BTreeSet<SiteId> = free.by_ref().take(k).collect();
        if sites.len() != k {
            return Err(SynthError::Placement(format!("partition {name} needs {k} sites, too few are free")));
        }
        membership.0.insert(name, sites);
    }
    Ok(membership)
}

/// A placement that follows the data: the partitions declared by size, in name order, each
/// take the free sites that already hold the most bytes of the atoms required at that
/// partition (ties to the lower site).
pub(crate) fn affinity_membership(preamble: &Program) -> Result<Membership, SynthError> {
    let mut membership = preamble.declared_membership();
    let mut free: BTreeSet<SiteId> = free_sites(preamble).into_iter().collect();
    for (name, k) in preamble.sized_partitions() {
        let mut score: BTreeMap<SiteId, f64> = free.iter().map(|s| (*s, 0.0)).collect();
        for r in preamble.outputs.iter().filter(|r| r.target == Target::Partition(name.clone())) {
            for atom in r.aggregate.atoms() {
                if let Some(input) = preamble.inputs.get(atom)
                    && let Some(v) = score.get_mut(&input.site)
                {
                    *v += input.size_gb;
                }
            }
        }
        let mut ranked: Vec<(SiteId, f64)> = score.into_iter().collect();
        ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        let sites: BTreeSet<SiteId> = ranked.into_iter().take(k).map(|(s, _)| s).collect();
        if sites.len() != k {
            return Err(SynthError::Placement(format!("partition {name} needs {k} sites, too few are free")));
        }
        free.retain(|s| !sites.contains(s));
        membership.0.insert(name, sites);
    }
    Ok(membership)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::PartitionId;

    #[test]
    fn memberships_for_example_5_3() {
        let p: Program = "GPUS: 0, 1, 2, 3, 4, 5, 6, 7\nPARTITIONS: G1 {size 4} G2 {size 4}\n\
                          IN: A @ 0; B @ 1; C @ 2; D @ 3; E @ 4; F @ 5; G @ 6; H @ 7\n\
                          OUT: A+B+E+F @ G1; C+D+G+H @ G2"
            .parse()
            .unwrap();
        let g = |m: &Membership, name: &str| m.sites(&PartitionId::new(name).unwrap()).cloned().unwrap();
        let sites = |s: &[usize]| s.iter().map(|i| SiteId(*i)).collect::<BTreeSet<_>>();
        let canonical = canonical_membership(&p).unwrap();
        assert_eq!(g(&canonical, "G1"), sites(&[0, 1, 2, 3]));
        let affinity = affinity_membership(&p).unwrap();
        assert_eq!(g(&affinity, "G1"), sites(&[0, 1, 4, 5]));
        assert_eq!(g(&affinity, "G2"), sites(&[2, 3, 6, 7]));
    }
}

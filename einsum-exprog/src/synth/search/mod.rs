//! The searched synthesis: simulated annealing over (membership, action set) pairs. The
//! algorithm and its justification are in the docs of [`crate::synth`].

mod moves;
mod seeds;
mod state;
#[cfg(test)]
mod tests;
mod walk;

use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;
use std::time::{Duration, Instant};

use super::owners::Owners;

use einsum_sim::Topology;

use super::budget::Budget;
use super::eval::Evaluator;
use super::naive::naive_sends;
use super::plan::{SiteRoutes, groups};
use super::rewrites::Rewrites;
use super::{SynthError, canonical_membership, checked_preamble, naive_validated};
use crate::cost::{Simulation, check_sites, run};
use crate::ids::SiteId;
use crate::membership::Membership;
use crate::program::Program;
use einsum_core::SeededRng as Rng;
use einsum_core::host_memory::available_host_memory;
use seeds::{Seeding, chunk_counts};
use state::Score;

/// How [`search`] runs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SearchOptions {
    /// Seed of the random choices: equal seeds and iteration budgets give equal results.
    pub seed: u64,
    /// Iterations after the seeds, each proposing one candidate (the budget), split between
    /// independent walks from the best seed, each annealing, then descending in its last
    /// quarter (see [`crate::synth`]).
    pub iterations: usize,
    /// An optional wall-clock budget on the whole search, counted from its start: no seed,
    /// chunk count or iteration starts once the time spent and the longest step so far (a
    /// candidate's scoring, or an iteration) reach it, so that it overruns by at most one
    /// step, the last simulation of the best program keeping the room of the step reserved
    /// (the naive program, the first seed, is always scored). When it cuts the search short
    /// the result depends on the machine's speed, so tests leave it `None`, or give it zero.
    pub time_limit: Option<Duration>,
    /// Initial temperature, relative: a candidate `x` times slower than the current one is
    /// accepted with probability `exp(-(x - 1) / t)`; `t` decays geometrically to 1% of it.
    pub temperature: f64,
    /// Whether to seed with the hierarchical plans (`synth/hierarchical.rs`) on a machine of
    /// several nodes (they are never built on a machine of one). Off, the seeds are the flat
    /// ones only: how the gain of knowing the nodes is measured.
    pub hierarchical: bool,
    /// The most chunks an atom may be cut into ([`crate::refine`]); 1 keeps atoms whole. The
    /// search tries a few chunk counts up to it (see [`crate::synth`]) and keeps the one of
    /// the best seed. A caller whose atoms are tensor cells passes
    /// [`crate::Preamble::max_chunks`], so that every chunk is a non-empty slice.
    pub max_chunks: usize,
    /// The bytes the search's state may take ([`search_state_bytes`]); `None`: the
    /// `1 / SEARCH_MEMORY_SHARE` of the host memory this process can still allocate
    /// ([`available_host_memory`]; no limit where the system reports none). A preamble whose
    /// state would not fit is not searched: the result is its naive program, with
    /// [`Searched::fallback`] saying why; a chunk count whose state would not fit is not
    /// tried.
    pub memory_limit: Option<usize>,
    /// The Section 5.4 rewrites the annealing draws from, by weight, in order
    /// ([`super::rewrites`]); by default [`super::REWRITES`].
    pub rewrites: Rewrites,
}

impl Default for SearchOptions {
    /// Seed 0, [`DEFAULT_SEARCH_ITERATIONS`], no time limit, temperature 0.05, hierarchical
    /// seeds, atoms cut into up to [`MAX_CHUNKS`] chunks, state bounded by the host's memory,
    /// the default rewrites.
    fn default() -> Self {
        SearchOptions {
            seed: 0,
            iterations: DEFAULT_SEARCH_ITERATIONS,
            time_limit: None,
            temperature: 0.05,
            hierarchical: true,
            max_chunks: MAX_CHUNKS,
            memory_limit: None,
            rewrites: Rewrites::default(),
        }
    }
}

/// The default [`SearchOptions::iterations`] of every search of one exchange program, and so
/// of `--iterations` on `plan`, `run`, `explain` and `exprog synthesize`, of the Python
/// binding's `compile` and of the experiments (whose tables are measured at it). A compile
/// searches each exchange program of its plan, so the cap is what a whole plan affords:
/// `plan llama3-70b --devices 72 --topology nvl72` takes 77 s of CPU at 100 iterations against
/// 71 s at 50, and 1000 nearly 4× the CPU of 100 on `run`'s default workload. Under
/// [`CORPUS_SEARCH_ITERATIONS`] the search runs one walk.
pub const DEFAULT_SEARCH_ITERATIONS: usize = 100;

/// The iterations the exchange corpus is measured and tuned at (`tests/corpus.rs`, the
/// `collectives` and `exchange_corpus` examples): the fewest that run every walk (see
/// [`crate::synth`]), which the search of one program affords where a whole plan's does not.
pub const CORPUS_SEARCH_ITERATIONS: usize = walk::WALKS * walk::MIN_WALK;

/// The default [`SearchOptions::max_chunks`]: enough for the DGX-V100's six directed ring
/// units times eight roots from one indivisible atom per site.
pub const MAX_CHUNKS: usize = 48;

/// The smallest chunk the search cuts, in GB (4 MB). A transfer costs a few microseconds to
/// set up, which at NVLink rates (hundreds of GB/s) is the time of a megabyte or so, so chunks
/// of at least 4 MB keep that cost to a fraction of each transfer. The presets' latencies
/// (`einsum_sim::Latency`) charge it, but a topology without a `latency` object is the pure
/// fluid model, on which any cut looks free; the floor also bounds the candidates the search
/// simulates.
pub const MIN_CHUNK_GB: f64 = 4e-3;

/// The most atoms a refined preamble may have: chunk counts that would exceed it are not
/// tried (the cost of evaluating a candidate grows with its actions).
pub const MAX_REFINED_ATOMS: usize = 512;

/// The share of the host memory available ([`available_host_memory`]) the search's state may
/// take by default: a half, since the search runs inside a compile whose task graph, other
/// programs and simulator are live beside it, and its estimate ([`search_state_bytes`]) can
/// be exceeded by a shape it was not measured on.
pub const SEARCH_MEMORY_SHARE: usize = 2;

/// Bytes of one entry of the search's largest move lists: two actions and a site (the
/// pushdown candidates of [`Search::rewrite`], 24 bytes), or a step of the descent (32).
const BYTES_PER_MOVE: usize = 32;

/// Bytes the search keeps per atom or group and site: the bodies of the seeds and of the
/// walks' states, the evaluator's interned atoms and the memo of scores.
const BYTES_PER_ATOM_SITE: usize = 8192;

/// The bytes the search's state takes at most for a preamble of `atoms` atoms, `groups`
/// distinct required aggregates and `sites` sites whose naive seed has `route_pairs` pairs of
/// sends sharing a source and a destination ([`naive_route_pairs`]), estimated before
/// anything of the search is built.
///
/// Dominant is a move's candidate list: pushdown and fusion pair the actions of one source
/// that share a destination, so the list (and the descent's list of steps) holds up to the
/// seed's pairs per source and destination, `route_pairs / 2`, at [`BYTES_PER_MOVE`] each,
/// twice while a `Vec` grows: `BYTES_PER_MOVE · route_pairs`. A broadcast's star puts every
/// send on the routes out of one site (`route_pairs` = destinations · atoms²); an all-gather
/// spreads them over every route (sites² · (atoms / sites)²), a factor of the sites fewer.
/// Besides that, [`BYTES_PER_ATOM_SITE`] per atom or group and site. Measured peak resident
/// memory of `exprog synthesize` on `dgx-h100` (8 sites) against the estimate: a broadcast
/// from one site of 1 000 atoms 0.18 GB (estimate 0.35 GB), of 4 000 atoms 2.3 GB (4.1 GB),
/// of 10 000 atoms past 18 GB when it aborted (24 GB); an all-gather of 2 000 atoms 0.54 GB,
/// of 4 000 atoms 2.0 GB; an all-reduce of 500 groups of 8 atoms 0.20 GB.
pub fn search_state_bytes(atoms: usize, groups: usize, sites: usize, route_pairs: usize) -> usize {
    let moves = BYTES_PER_MOVE.saturating_mul(route_pairs);
    let states = BYTES_PER_ATOM_SITE.saturating_mul(atoms.saturating_add(groups)).saturating_mul(sites);
    moves.saturating_add(states)
}

/// The sum, over every source and destination site, of the squared number of the naive
/// seed's sends from one to the other ([`super::naive`]: each atom of a required aggregate
/// sent once from its `IN` site to each target site lacking it), counted without building
/// the seed. Partitions resolve by the placement-blind canonical membership.
pub fn naive_route_pairs(preamble: &Program) -> Result<usize, SynthError> {
    let membership = canonical_membership(preamble)?;
    let mut routes: BTreeMap<(SiteId, SiteId), usize> = BTreeMap::new();
    for ((_, from), dests) in naive_sends(preamble, &membership)? {
        for to in dests {
            *routes.entry((from, to)).or_default() += 1;
        }
    }
    Ok(routes.values().fold(0usize, |sum, &n| sum.saturating_add(n.saturating_mul(n))))
}

/// Why [`search`] returned the naive program without searching ([`Searched::fallback`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Fallback {
    /// The search's state would not fit its memory limit ([`SearchOptions::memory_limit`]).
    #[error(
        "the search's state would take about {estimate} bytes ({atoms} atoms, {groups} required aggregates, {sites} sites), more than its limit of {limit} bytes: kept the naive program"
    )]
    Memory {
        /// Atoms of the preamble.
        atoms: usize,
        /// Distinct required aggregates (the search's groups).
        groups: usize,
        /// Sites of the preamble.
        sites: usize,
        /// [`search_state_bytes`] of them.
        estimate: usize,
        /// The limit.
        limit: usize,
    },
}

/// The result of [`search`].
#[derive(Clone, Debug)]
pub struct Searched {
    /// The preamble as given (partitions still declared by size), cut into
    /// [`Searched::chunks`] chunks per atom, with the best body found; every action of the
    /// body is sourced at a site.
    pub program: Program,
    /// Its simulated completion time.
    pub completion_ms: f64,
    /// How many chunks every atom was cut into ([`crate::refine`]; 1: none). The program is
    /// over the chunks: its preamble is [`crate::refine`] of the given one with this count.
    pub chunks: usize,
    /// The membership it was costed under (valid for it).
    pub membership: Membership,
    /// The naive program's simulated completion time (a seed, so never beaten by
    /// `completion_ms`).
    pub naive_ms: f64,
    /// The best seed's simulated completion time, over every chunk count tried: where the
    /// annealing started, so `seed_ms - completion_ms` is what its iterations earned.
    pub seed_ms: f64,
    /// Candidates validated and simulated (seeds and annealing; duplicates count once).
    pub evaluated: usize,
    /// Iterations run (annealing and descent).
    pub iterations: usize,
    /// Proposals refused: a rewrite that did not apply or would have been invalid, or a
    /// re-plan that was invalid or changed nothing.
    pub refused: usize,
    /// How the best candidate was reached (the seed, or the last move that improved it).
    pub origin: String,
    /// The best program's simulation.
    pub simulation: Simulation,
    /// Why the search did not run, where it did not: the program is then the naive one.
    pub fallback: Option<Fallback>,
}

/// Everything the search carries between candidates.
struct Search<'a> {
    /// The preamble, its atoms cut into `chunks` chunks each.
    preamble: Program,
    topology: &'a Topology,
    chunks: usize,
    machine: SiteRoutes,
    rng: Rng,
    /// The score of every candidate simulated so far (`None`: not valid), by the
    /// [`fingerprint`] of its membership and body.
    cache: HashMap<u64, Option<Score>>,
    /// Scores candidates (validity, lowering, end times) over the preamble's interned atoms.
    eval: Evaluator,
    /// The index of the groups' atoms under each membership met (the groups are a function
    /// of the membership: [`Search::groups_under`]).
    owners: HashMap<Membership, Rc<Owners>>,
    /// Whether to score through the general path instead (`validate_with`, `lower`, the
    /// simulator), which [`Search::eval`] must match bit for bit: for the tests.
    reference: bool,
    evaluated: usize,
    refused: usize,
    budget: Budget,
    /// The rules a rewrite move draws from ([`SearchOptions::rewrites`]).
    rewrites: Rewrites,
}

/// Synthesizes a body for `preamble` on `topology` by a seeded simulated-annealing search over
/// placements, structured plans and the rewrites of Section 5.4 (the algorithm, and why it is
/// not an e-graph, are in [`crate::synth`]). The preamble's body, if valid, is one of the
/// seeds; otherwise it is ignored. Deterministic for a given seed and iteration budget.
pub fn search(preamble: &Program, topology: &Topology, options: SearchOptions) -> Result<Searched, SynthError> {
    search_observed(preamble, topology, options, &mut |_| {})
}

/// [`search`], calling `progress(n)` after each annealing iteration with the number run so
/// far (out of [`SearchOptions::iterations`]), for a caller that shows how far a long
/// search got. The observer sees nothing of the search's state, so the result is the same.
pub fn search_observed(
    preamble: &Program,
    topology: &Topology,
    options: SearchOptions,
    progress: &mut dyn FnMut(usize),
) -> Result<Searched, SynthError> {
    search_with(preamble, topology, options, progress, false)
}

/// [`search_observed`], scoring candidates through the general path when `reference`
/// (see [`Search::reference`]).
fn search_with(
    preamble: &Program,
    topology: &Topology,
    options: SearchOptions,
    progress: &mut dyn FnMut(usize),
    reference: bool,
) -> Result<Searched, SynthError> {
    let budget = Budget { clock: Instant::now(), limit: options.time_limit, step: Duration::ZERO };
    let given = preamble;
    let preamble = checked_preamble(given)?;
    check_sites(&preamble, topology)?;
    let machine = SiteRoutes::new(&preamble.sites(), topology);
    let canonical = canonical_membership(&preamble)?;
    let group_count = groups(&preamble, &canonical).map_or(0, |gs| gs.len());

    // The state's size, before anything of the search is built: a preamble too large is not
    // searched, and a chunk count too large is not tried.
    let (atoms, sites) = (preamble.inputs.len(), machine.sites.len());
    let limit = options.memory_limit.or_else(|| available_host_memory().map(|b| b / SEARCH_MEMORY_SHARE));
    // Cutting every atom into k chunks multiplies the sends on every route by k.
    let pairs = naive_route_pairs(&preamble)?;
    let state = |k: usize| {
        let (atoms, groups) = (atoms.saturating_mul(k), group_count.saturating_mul(k));
        search_state_bytes(atoms, groups, sites, pairs.saturating_mul(k.saturating_mul(k)))
    };
    if let Some(limit) = limit.filter(|&l| state(1) > l) {
        let fallback = Fallback::Memory { atoms, groups: group_count, sites, estimate: state(1), limit };
        return naive_fallback(&preamble, topology, fallback);
    }
    let mut counts = chunk_counts(&preamble, group_count, &machine, options.max_chunks);
    counts.retain(|&k| limit.is_none_or(|l| state(k) <= l));
    let seeding = Seeding { preamble: &preamble, given, topology, machine: &machine, canonical: &canonical, reference };
    let (chosen, naive_ms, budget) = seeding.over(counts, &options, budget)?;
    let Some((mut s, (seed, alternate))) = chosen.and_then(|(s, seeds)| Some((s, seeds.starts()?))) else {
        return Err(SynthError::Placement("no seed program could be simulated".to_string()));
    };
    let seed_ms = seed.cost.completion;
    s.budget = budget;
    let (best, iterations) = s.walks(&seed, alternate.as_ref(), &options, progress);

    let program = s.preamble.with_body(best.program.body.iter().cloned());
    let validation = program.validate_with(&best.membership).map_err(SynthError::Unsatisfiable)?;
    let simulation = run(&program, validation, topology, None)?;
    tracing::debug!(
        naive_ms,
        completion_ms = simulation.completion_ms,
        evaluated = s.evaluated,
        origin = %best.origin,
        "searched an exchange program"
    );
    Ok(Searched {
        program,
        completion_ms: simulation.completion_ms,
        chunks: s.chunks,
        membership: best.membership,
        naive_ms,
        seed_ms,
        evaluated: s.evaluated,
        iterations,
        refused: s.refused,
        origin: best.origin,
        simulation,
        fallback: None,
    })
}

/// The naive program of `preamble` as the search's result, when `fallback` says why the
/// search did not run (logged as a warning too).
fn naive_fallback(preamble: &Program, topology: &Topology, fallback: Fallback) -> Result<Searched, SynthError> {
    tracing::warn!(%fallback, "exchange program not searched");
    let (program, validation) = naive_validated(preamble)?;
    let membership = validation.membership.clone();
    let simulation = run(&program, validation, topology, None)?;
    let ms = simulation.completion_ms;
    Ok(Searched {
        program,
        completion_ms: ms,
        chunks: 1,
        membership,
        naive_ms: ms,
        seed_ms: ms,
        evaluated: 1,
        iterations: 0,
        refused: 0,
        origin: "naive".to_string(),
        simulation,
        fallback: Some(fallback),
    })
}

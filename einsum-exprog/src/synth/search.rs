//! The searched synthesis: simulated annealing over (membership, action set) pairs. The
//! algorithm and its justification are in the docs of [`crate::synth`].

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::{Hash, Hasher};
use std::ops::Range;
use std::rc::Rc;
use std::time::{Duration, Instant};

use einsum_sim::Topology;

use super::decongest::decongest;
use super::eval::Evaluator;
use super::owners::Owners;
use super::plan::{
    Group, Kind, Load, Plan, SHAPES, Shape, SiteRoutes, build, congestion_aware, groups, pruned, reparent,
};
use super::{
    SynthError, affinity_membership, canonical_membership, checked_preamble, hierarchical, naive, naive_validated,
    stripes,
};
use crate::action::Action;
use crate::aggregate::Aggregate;
use crate::cost::{Simulation, check_sites, run};
use crate::ids::{AtomId, SiteId};
use crate::lower::lower;
use crate::membership::Membership;
use crate::program::Program;
use crate::refine::refine;
use crate::rewrite::{Refusal, unguarded};
use crate::target::Target;
use einsum_core::SeededRng as Rng;
use einsum_core::host_memory::available_host_memory;

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
    /// [`Synthesis::fallback`] saying why; a chunk count whose state would not fit is not
    /// tried.
    pub memory_limit: Option<usize>,
}

impl Default for SearchOptions {
    /// Seed 0, 1000 iterations, no time limit, temperature 0.05, hierarchical seeds, atoms cut
    /// into up to [`MAX_CHUNKS`] chunks, state bounded by the host's memory.
    fn default() -> Self {
        SearchOptions {
            seed: 0,
            iterations: 1000,
            time_limit: None,
            temperature: 0.05,
            hierarchical: true,
            max_chunks: MAX_CHUNKS,
            memory_limit: None,
        }
    }
}

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
/// distinct required aggregates and `sites` sites, estimated before anything is built.
///
/// Dominant is a move's candidate list: pushdown and fusion pair the actions of one source
/// that share a destination, and a seed whose every group leaves one site (a broadcast's
/// star, a chain's every hop) gives that site one action per group, so the list (and the
/// descent's list of steps) holds up to `groups² / 2` pairs per destination; over `sites`
/// destinations, at [`BYTES_PER_MOVE`] each, twice while a `Vec` grows:
/// `BYTES_PER_MOVE · groups² · sites`. Besides that, [`BYTES_PER_ATOM_SITE`] per atom or
/// group and site. Measured peak resident memory of `exprog synthesize` on `dgx-h100`
/// (8 sites) against the estimate: a broadcast from one site of 1 000 atoms 0.18 GB
/// (estimate 0.39 GB), of 4 000 atoms 2.3 GB (4.6 GB), of 10 000 atoms past 18 GB when it
/// aborted (26.9 GB); an all-gather of 2 000 atoms 0.54 GB (1.3 GB), of 4 000 atoms 2.0 GB
/// (4.6 GB); an all-reduce of 500 groups of 8 atoms 0.20 GB (0.36 GB).
pub fn search_state_bytes(atoms: usize, groups: usize, sites: usize) -> usize {
    let moves = BYTES_PER_MOVE.saturating_mul(groups.saturating_mul(groups)).saturating_mul(sites);
    let states = BYTES_PER_ATOM_SITE.saturating_mul(atoms.saturating_add(groups)).saturating_mul(sites);
    moves.saturating_add(states)
}

/// Why [`search`] returned the naive program without searching ([`Synthesis::fallback`]).
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

/// How many items of a move list, or pairs behind it, are formed between two looks at the
/// clock ([`within`]).
const CHECK_EVERY: usize = 1 << 16;

/// `items`, ending once `budget` is over (looked at every [`CHECK_EVERY`] items), with `cut`
/// set then. The lists of pairs a move draws from grow with the square of one site's actions
/// (seconds to list at a few thousand), so a step must be able to give up inside one for the
/// search to keep its budget; without a limit the items are all of them.
fn within<'a, T: 'a>(
    items: impl Iterator<Item = T> + 'a,
    budget: Budget,
    cut: &'a mut bool,
) -> impl Iterator<Item = T> + 'a {
    items
        .enumerate()
        .take_while(move |(n, _)| {
            let over = n % CHECK_EVERY == CHECK_EVERY - 1 && budget.over();
            *cut |= over;
            !over
        })
        .map(|(_, item)| item)
}

/// The annealing's iterations are followed by a descent that spends the last
/// `1 / POLISH_SHARE` of them (see `Polish`).
const POLISH_SHARE: usize = 4;

/// Independent walks the iterations are split into, each with its own stretch of the random
/// stream (see [`crate::synth`]): whether a walk finds an improvement depends much on its
/// stream, and two shorter walks find one more often than one long one. The first starts from
/// the best seed; the second from the best seed under another placement when that one is
/// within [`ALTERNATE_WITHIN`] of it (another basin), else from the best seed again.
const WALKS: usize = 2;

/// How much slower than the best seed another placement's best seed may be and still start a
/// walk: a walk's gains over its start stay under 1.25× on the corpus (its largest, 1.23×), so
/// a start further behind would spend its walk without reaching the best seed.
const ALTERNATE_WITHIN: f64 = 1.25;

/// The fewest iterations a walk gets: budgets under `WALKS` times it run one walk.
const MIN_WALK: usize = 500;

/// The result of [`search`].
#[derive(Clone, Debug)]
pub struct Synthesis {
    /// The preamble as given (partitions still declared by size), cut into
    /// [`Synthesis::chunks`] chunks per atom, with the best body found; every action of the
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

/// The search's wall-time budget ([`SearchOptions::time_limit`]): the clock started with the
/// search, and the longest step seen, whose room is kept.
#[derive(Clone, Copy, Debug)]
struct Budget {
    clock: Instant,
    limit: Option<Duration>,
    step: Duration,
}

impl Budget {
    /// Whether the next step would cross the limit: the time spent and the longest step so
    /// far reach it.
    fn spent(&self) -> bool {
        self.limit.is_some_and(|limit| self.clock.elapsed() + self.step >= limit)
    }

    /// Whether the limit has passed: a step in progress gives up.
    fn over(&self) -> bool {
        self.limit.is_some_and(|limit| self.clock.elapsed() >= limit)
    }

    /// A step that began at `since` has ended.
    fn record(&mut self, since: Instant) {
        self.step = self.step.max(since.elapsed());
    }
}

/// A point of the search: a membership, the plan last used for each group, and the program:
/// a body of site-sourced actions, with only `GPUS` of the preamble ([`Search::candidate`]),
/// so that a move clones the body and not the preamble (its `IN` and `OUT` are as large as a
/// body); the preamble is the search's, resolved under the membership where needed.
#[derive(Clone, Debug)]
struct State {
    membership: Membership,
    /// The groups under the membership, shared by every state of that membership.
    groups: Rc<Vec<Group>>,
    plans: Vec<Plan>,
    program: Program,
    cost: Score,
    origin: String,
}

/// How good a candidate is: its simulated completion, and the annealing's objective, which
/// adds a little of the mean task end time so that moves that shorten paths other than the
/// critical one (a plateau of the makespan) still count as progress.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Score {
    completion: f64,
    objective: f64,
}

impl Score {
    /// Weight of the mean task end time in the objective.
    const SPREAD: f64 = 0.5;

    /// Better: a shorter completion, ties broken by the objective.
    fn better(&self, other: &Score) -> bool {
        self.completion < other.completion || (self.completion == other.completion && self.objective < other.objective)
    }
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
}

/// Synthesizes a body for `preamble` on `topology` by a seeded simulated-annealing search over
/// placements, structured plans and the rewrites of Section 5.4 (the algorithm, and why it is
/// not an e-graph, are in [`crate::synth`]). The preamble's body, if valid, is one of the
/// seeds; otherwise it is ignored. Deterministic for a given seed and iteration budget.
pub fn search(preamble: &Program, topology: &Topology, options: SearchOptions) -> Result<Synthesis, SynthError> {
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
) -> Result<Synthesis, SynthError> {
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
) -> Result<Synthesis, SynthError> {
    let mut budget = Budget { clock: Instant::now(), limit: options.time_limit, step: Duration::ZERO };
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
    let state = |k: usize| search_state_bytes(atoms.saturating_mul(k), group_count.saturating_mul(k), sites);
    if let Some(limit) = limit.filter(|&l| state(1) > l) {
        let fallback = Fallback::Memory { atoms, groups: group_count, sites, estimate: state(1), limit };
        return naive_fallback(&preamble, topology, fallback);
    }
    let mut counts = chunk_counts(&preamble, group_count, &machine, options.max_chunks);
    counts.retain(|&k| limit.is_none_or(|l| state(k) <= l));
    let naive_program = naive(&preamble)?;

    // Seeds, for every chunk count tried: naive and the given body (whole atoms only), and
    // structured plans under two placements. The search goes on with the best seed's count.
    let mut naive_ms = f64::INFINITY;
    let mut chosen: Option<(Search<'_>, Seeds)> = None;
    for chunks in counts {
        // the whole atoms are always seeded; more chunks only while the budget lasts
        if chunks > 1 && budget.spent() {
            break;
        }
        let Ok(refined) = refine(&preamble, chunks) else { continue };
        let mut s = Search {
            machine: machine.clone(),
            eval: Evaluator::new(&refined),
            preamble: refined,
            topology,
            chunks,
            rng: Rng::new(options.seed),
            cache: HashMap::new(),
            owners: HashMap::new(),
            reference,
            evaluated: 0,
            refused: 0,
            budget,
        };
        let mut seeds = Seeds::default();
        if chunks == 1 {
            let since = Instant::now();
            let st = s.state_of_body(&canonical, naive_program.body.clone(), "naive")?;
            s.budget.record(since);
            naive_ms = st.as_ref().map_or(f64::INFINITY, |st| st.cost.completion);
            seeds.consider(st);
            if !given.body.is_empty()
                && !s.budget.spent()
                && let Ok(v) = given.validate()
            {
                let body = given.resolve(&v.membership).body;
                seeds.consider(s.state_of_body(&v.membership, body, "the given body")?);
            }
        }
        s.seed(&canonical, options.hierarchical, &mut seeds)?;
        budget = s.budget;
        let evaluated = chosen.as_ref().map_or(0, |(c, _)| c.evaluated);
        match (seeds.best(), &mut chosen) {
            // more chunks only for a shorter completion: a tie keeps the fewer, larger atoms
            (Some(b), Some((c, cb)))
                if cb.best().is_none_or(|cb| b.cost.completion < cb.cost.completion * (1.0 - 1e-9)) =>
            {
                s.evaluated += evaluated;
                chosen = Some((s, seeds));
            }
            (Some(_), None) => chosen = Some((s, seeds)),
            (_, Some((c, _))) => c.evaluated += s.evaluated,
            (None, None) => {}
        }
    }
    let Some((mut s, (seed, alternate))) = chosen.and_then(|(s, seeds)| Some((s, seeds.starts()?))) else {
        return Err(SynthError::Placement("no seed program could be simulated".to_string()));
    };
    let seed_ms = seed.cost.completion;
    s.budget = budget;

    // Independent walks (see `WALKS`), each annealing then descending: the first from the best
    // seed, the second from the alternate start if there is one.
    let walks = if options.iterations >= WALKS * MIN_WALK { WALKS } else { 1 };
    let mut iterations = 0;
    let mut best = seed.clone();
    for w in 0..walks {
        let budget = options.iterations / walks + if w == 0 { options.iterations % walks } else { 0 };
        let start = if w == 0 { &seed } else { alternate.as_ref().unwrap_or(&seed) };
        let found = s.walk(start, budget, &options, &mut |done| progress(iterations + done));
        iterations += found.1;
        if found.0.cost.better(&best.cost) {
            best = found.0;
        }
    }

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
    Ok(Synthesis {
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
fn naive_fallback(preamble: &Program, topology: &Topology, fallback: Fallback) -> Result<Synthesis, SynthError> {
    tracing::warn!(%fallback, "exchange program not searched");
    let (program, validation) = naive_validated(preamble)?;
    let membership = validation.membership.clone();
    let simulation = run(&program, validation, topology, None)?;
    let ms = simulation.completion_ms;
    Ok(Synthesis {
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

impl Search<'_> {
    /// One walk of `budget` iterations from `start`: annealing, then a descent from the best
    /// found (see `Polish`) in the last `1 / POLISH_SHARE` of them. Returns the best state and
    /// the iterations run (fewer when the search's budget, [`SearchOptions::time_limit`], cuts
    /// it).
    fn walk(
        &mut self,
        start: &State,
        budget: usize,
        options: &SearchOptions,
        progress: &mut dyn FnMut(usize),
    ) -> (State, usize) {
        let mut best = start.clone();
        let mut cur = best.clone();
        let patience = (budget / 5).max(20);
        let polish_from = budget - budget / POLISH_SHARE;
        let mut polish: Option<Polish> = None;
        let mut since_best = 0;
        let mut iterations = 0;
        let mut started: Option<Instant> = None;
        for it in 0..budget {
            if let Some(since) = started {
                self.budget.record(since);
            }
            if self.budget.spent() {
                break;
            }
            started = Some(Instant::now());
            iterations += 1;
            progress(iterations);
            if it >= polish_from {
                if polish.is_none() {
                    // listing the descent's steps is quadratic too: it gives up when the budget
                    // is over, and so does the walk
                    polish = Polish::around(&best, &mut self.rng, &self.budget);
                }
                let Some(queue) = polish.as_mut() else { break };
                if let Some(step) = queue.steps.pop() {
                    match self.apply(&best, &queue.body, step) {
                        Some(candidate) if candidate.cost.better(&best.cost) => {
                            best = candidate;
                            cur = best.clone();
                            polish = None;
                        }
                        Some(_) => {}
                        None => self.refused += 1,
                    }
                    continue;
                }
                // the best is a local optimum of the descent's rewrites: the annealing goes on
                // from its current candidate (and back to the best after `patience`)
            }
            let temperature = options.temperature * 0.01f64.powf(it as f64 / budget as f64);
            match self.propose(&cur) {
                None => self.refused += 1,
                Some(candidate) => {
                    let delta = (candidate.cost.objective - cur.cost.objective) / cur.cost.objective.max(1e-12);
                    if delta <= 0.0 || self.rng.unit() < (-delta / temperature.max(1e-12)).exp() {
                        cur = candidate;
                    }
                }
            }
            if cur.cost.better(&best.cost) {
                best = cur.clone();
                since_best = 0;
                polish = None;
            } else {
                since_best += 1;
                if since_best >= patience {
                    cur = best.clone();
                    since_best = 0;
                }
            }
        }
        (best, iterations)
    }

    /// Adds to `seeds` the structured seeds under the canonical placement and the one that
    /// follows the data: the uniform plans, striped rings and, with `hierarchical`, the
    /// hierarchical bodies.
    fn seed(&mut self, canonical: &Membership, hierarchical: bool, seeds: &mut Seeds) -> Result<(), SynthError> {
        let mut placements = vec![canonical.clone()];
        let affinity = affinity_membership(&self.preamble)?;
        if affinity != *canonical {
            placements.push(affinity);
        }
        // Each seed is one step of the budget: none starts once it is spent.
        for m in &placements {
            if self.budget.spent() {
                return Ok(());
            }
            let gs = Rc::new(self.groups_under(m)?);
            for (plans, origin) in self.seed_plans(&gs) {
                if self.budget.spent() {
                    return Ok(());
                }
                let since = Instant::now();
                let st = self.state_of_plans(m, gs.clone(), plans, origin);
                self.budget.record(since);
                seeds.consider(st);
            }
            for reduction in hierarchical::RootReduction::ALL.into_iter().filter(|_| hierarchical) {
                if self.budget.spent() {
                    return Ok(());
                }
                let since = Instant::now();
                let roots = balanced_roots(&gs);
                if let Some(body) = hierarchical::body(&gs, &roots, &self.machine.sites, self.topology, reduction) {
                    let st = self.state_of_body(m, body, &format!("seed: hierarchical, {reduction:?} to the root"))?;
                    seeds.consider(st);
                }
                self.budget.record(since);
            }
        }
        Ok(())
    }

    /// A candidate with `body`: a program with the preamble's `GPUS` only (its sites, where
    /// it declares none: the sites the search routes over), which is all the rewrites read
    /// of a preamble (a relay must be a declared site); [`Search::cost`] scores it against
    /// the preamble.
    fn candidate(&self, body: BTreeSet<Action>) -> Program {
        let gpus = self.preamble.gpus.clone().unwrap_or_else(|| self.machine.sites.iter().copied().collect());
        Program { gpus: Some(gpus), body, ..Program::default() }
    }

    fn groups_under(&self, membership: &Membership) -> Result<Vec<Group>, SynthError> {
        groups(&self.preamble, membership)
            .ok_or_else(|| SynthError::Placement(format!("{membership} leaves a required partition without sites")))
    }

    /// The index of `groups`' atoms, the groups of `membership`.
    fn owners(&mut self, membership: &Membership, groups: &[Group]) -> Rc<Owners> {
        self.owners.entry(membership.clone()).or_insert_with(|| Rc::new(Owners::new(groups))).clone()
    }

    /// The score of `program`'s body (with the preamble resolved under `membership`), or
    /// `None` if it is not valid. The one place a candidate is validated: the rewrites the
    /// search applies are the unguarded ones ([`crate::rewrite::unguarded`]), so the closure is
    /// computed once per distinct candidate, and not at all for one seen before.
    fn cost(&mut self, program: &Program, membership: &Membership) -> Option<Score> {
        let key = fingerprint(membership, &program.body);
        if let Some(c) = self.cache.get(&key) {
            return *c;
        }
        let end = if self.reference {
            let program = self.preamble.resolve(membership).with_body(program.body.iter().cloned());
            let closure = program.validate_with(membership).ok().map(|v| v.closure);
            closure.and_then(|c| lower(&program, &c).graph.simulate_end_times(self.topology).ok())
        } else {
            self.eval.end_times(&program.body, membership, self.topology)
        };
        let cost = end.map(|end| {
            let completion_ms = 1e3 * end.iter().fold(0.0, |acc: f64, &e| acc.max(e));
            let mean_ms = 1e3 * end.iter().sum::<f64>() / end.len().max(1) as f64;
            Score { completion: completion_ms, objective: completion_ms + Score::SPREAD * mean_ms }
        });
        if cost.is_some() {
            self.evaluated += 1;
        }
        self.cache.insert(key, cost);
        cost
    }

    /// A state from an explicit body (plans default to balanced stars).
    fn state_of_body(
        &mut self,
        membership: &Membership,
        body: BTreeSet<Action>,
        origin: &str,
    ) -> Result<Option<State>, SynthError> {
        let gs = Rc::new(self.groups_under(membership)?);
        let roots = balanced_roots(&gs);
        let plans = roots.iter().map(|&root| star(root)).collect();
        let program = self.candidate(body);
        Ok(self.cost(&program, membership).map(|cost| State {
            membership: membership.clone(),
            groups: gs,
            plans,
            program,
            cost,
            origin: origin.to_string(),
        }))
    }

    /// A state whose body is the union of the groups' plans.
    fn state_of_plans(
        &mut self,
        membership: &Membership,
        gs: Rc<Vec<Group>>,
        plans: Vec<Plan>,
        origin: String,
    ) -> Option<State> {
        let body: BTreeSet<Action> = gs.iter().zip(&plans).flat_map(|(g, p)| build(g, p, &self.machine)).collect();
        let program = self.candidate(body);
        let cost = self.cost(&program, membership)?;
        Some(State { membership: membership.clone(), groups: gs, plans, program, cost, origin })
    }

    /// The uniform structured seeds: every group with the same shape, roots balanced.
    fn seed_plans(&self, gs: &[Group]) -> Vec<(Vec<Plan>, String)> {
        let roots = balanced_roots(gs);
        let relays: &[bool] = if self.machine.uniform { &[false] } else { &[false, true] };
        let mut seeds = Vec::new();
        let forward: Vec<usize> = (0..gs.len()).collect();
        let backward: Vec<usize> = forward.iter().rev().copied().collect();
        for (sequence, name) in
            [(forward, "seed: congestion-aware trees"), (backward, "seed: congestion-aware trees, reversed")]
        {
            seeds.push((congestion_aware(gs, &roots, &sequence, &self.machine), name.to_string()));
        }
        if let Some(plans) = stripes::striped(gs, &self.machine) {
            seeds.push((plans, "seed: striped rings".to_string()));
        }
        for &relay in relays {
            let uniform = |kind: &dyn Fn(SiteId) -> Kind, order: usize| -> Vec<Plan> {
                roots.iter().map(|&root| Plan { kind: kind(root), order, relay, salt: 0 }).collect()
            };
            let rooted = |reduce, spread| move |root| Kind::Rooted { root, reduce, spread };
            for kind in [rooted(Shape::Star, Shape::Star), rooted(Shape::Fastest, Shape::Fastest)] {
                let plans = uniform(&kind, 0);
                seeds.push((plans.clone(), format!("seed: {}", plans.first().map_or(String::new(), Plan::describe))));
            }
            for order in 0..self.machine.orders.len() {
                for kind in [rooted(Shape::Chain, Shape::Chain), rooted(Shape::Tree, Shape::Tree)] {
                    let plans = uniform(&kind, order);
                    seeds.push((
                        plans.clone(),
                        format!("seed: {}", plans.first().map_or(String::new(), Plan::describe)),
                    ));
                }
                if gs.iter().any(Group::butterfly_applies) {
                    let plans = uniform(&|_| Kind::Butterfly, order);
                    seeds
                        .push((plans, format!("seed: butterfly, ring {order}{}", if relay { ", relays" } else { "" })));
                }
            }
        }
        seeds
    }

    /// One random move from `cur`: `None` when it does not apply, is refused, or is invalid.
    fn propose(&mut self, cur: &State) -> Option<State> {
        let r = self.rng.unit();
        let swappable = self.preamble.sized_partitions().len() >= 2;
        if r < 0.35 {
            self.replan_one(cur)
        } else if r < 0.42 {
            self.replan_all(cur)
        } else if r < 0.50 && swappable {
            self.swap(cur)
        } else if r < 0.58 && !self.machine.uniform {
            self.decongested(cur)
        } else {
            self.rewrite(cur)
        }
    }

    /// Re-plans one group with one field of its plan changed.
    fn replan_one(&mut self, cur: &State) -> Option<State> {
        let g = self.rng.below(cur.groups.len());
        let group = cur.groups.get(g)?;
        let plan = self.mutate(&cur.plans[g], group);
        let owners = self.owners(&cur.membership, &cur.groups);
        let (owned, mut body): (Vec<&Action>, Vec<&Action>) =
            cur.program.body.iter().partition(|a| owners.sole_owner(&a.aggregate, &cur.groups) == Some(g));
        let built: BTreeSet<Action> = build(group, &plan, &self.machine).into_iter().collect();
        // the body stays the same exactly when the group's actions are rebuilt as they were
        if owned.iter().all(|a| built.contains(a)) && built.iter().all(|a| cur.program.body.contains(a)) {
            return None;
        }
        body.extend(&built);
        let program = cur.program.with_body(body.into_iter().cloned());
        let cost = self.cost(&program, &cur.membership)?;
        let mut plans = cur.plans.clone();
        plans[g] = plan.clone();
        let origin = format!("re-planned {} as {}", group.aggregate, plan.describe());
        Some(State { membership: cur.membership.clone(), groups: cur.groups.clone(), plans, program, cost, origin })
    }

    /// `cur` with one transfer moved off its most loaded resource ([`decongest`]).
    fn decongested(&mut self, cur: &State) -> Option<State> {
        let program = decongest(&cur.program, &self.preamble, &self.machine, &mut self.rng).ok()?;
        self.successor(cur, program, "decongested the busiest link".to_string())
    }

    /// `cur` with its body replaced by `program`'s (same membership, groups and plans), scored;
    /// `None` if it is not valid.
    fn successor(&mut self, cur: &State, program: Program, origin: String) -> Option<State> {
        let cost = self.cost(&program, &cur.membership)?;
        Some(State {
            membership: cur.membership.clone(),
            groups: cur.groups.clone(),
            plans: cur.plans.clone(),
            program,
            cost,
            origin,
        })
    }

    /// Re-plans every group (keeping each group's root): all with one random shape, or all
    /// with congestion-aware trees laid out in a random sequence of groups.
    fn replan_all(&mut self, cur: &State) -> Option<State> {
        let roots: Vec<SiteId> = cur
            .plans
            .iter()
            .zip(balanced_roots(&cur.groups))
            .map(|(p, balanced)| p.kind.root().unwrap_or(balanced))
            .collect();
        if self.rng.below(3) == 0 {
            let mut sequence: Vec<usize> = (0..cur.groups.len()).collect();
            for i in (1..sequence.len()).rev() {
                sequence.swap(i, self.rng.below(i + 1));
            }
            let plans = congestion_aware(&cur.groups, &roots, &sequence, &self.machine);
            let origin = "re-planned every group as congestion-aware trees".to_string();
            return self.state_of_plans(&cur.membership, cur.groups.clone(), plans, origin);
        }
        let order = self.rng.below(self.machine.orders.len());
        let relay = !self.machine.uniform && self.rng.below(2) == 1;
        let butterfly = self.rng.below(5) == 0;
        let (reduce, spread) = (SHAPES[self.rng.below(SHAPES.len())], SHAPES[self.rng.below(SHAPES.len())]);
        let plans: Vec<Plan> = roots
            .into_iter()
            .map(|root| {
                let kind = if butterfly { Kind::Butterfly } else { Kind::Rooted { root, reduce, spread } };
                Plan { kind, order, relay, salt: self.rng.next_u64() }
            })
            .collect();
        let origin = format!("re-planned every group as {}", plans.first().map_or(String::new(), Plan::describe));
        self.state_of_plans(&cur.membership, cur.groups.clone(), plans, origin)
    }

    /// `best` rewritten by one step of the descent (`body`: its body as the step indexes it),
    /// scored; `None` if the rule refuses or the result is not valid.
    fn apply(&mut self, best: &State, body: &[Action], step: Step) -> Option<State> {
        let p = &best.program;
        let (name, result) = match step {
            Step::Delete(i) => ("delete", unguarded::delete(p, &body[i])),
            Step::Eliminate(i, j, d) => ("eliminate_relay", unguarded::eliminate_relay(p, &body[i], &body[j], d)),
            Step::Fusion(i, j) => ("fusion", unguarded::fusion(p, &body[i], &body[j])),
            Step::Substitute(i, d, w) => ("substitute_source", unguarded::substitute_source(p, &body[i], d, w)),
            Step::Pushdown(i, j, d) => ("pushdown", unguarded::pushdown(p, &body[i], &body[j], d)),
        };
        self.successor(best, result.ok()?, format!("descent: {name}"))
    }

    /// `action`'s transfer from `source` to `dest` through two relays in a row,
    /// `source -> w1 -> w2 -> dest` (each the fastest two-hop detour of its leg half the
    /// time, any other site otherwise): a route two single relay introductions reach only
    /// through the intermediate program, which the annealing may have refused.
    fn relay_chain(&mut self, p: &Program, action: &Action, source: SiteId, dest: SiteId) -> Result<Program, Refusal> {
        let refuse = || Refusal::NotApplicable(format!("no relays for {action} to {dest}"));
        let pick = |from: SiteId, avoid: &[SiteId], rng: &mut Rng| -> Option<SiteId> {
            match self.machine.relay(from, dest) {
                Some(w) if !avoid.contains(&w) && rng.below(2) == 0 => Some(w),
                _ => {
                    let others: Vec<SiteId> =
                        self.machine.sites.iter().copied().filter(|w| !avoid.contains(w)).collect();
                    rng.pick(&others).copied()
                }
            }
        };
        let w1 = pick(source, &[source, dest], &mut self.rng).ok_or_else(refuse)?;
        let w2 = pick(w1, &[source, dest, w1], &mut self.rng).ok_or_else(refuse)?;
        let first = unguarded::introduce_relay(p, action, dest, w1)?;
        unguarded::introduce_relay(&first, &Action::new(action.aggregate.clone(), w1, [dest]), dest, w2)
    }

    /// Every transfer along a route that has a faster two-hop detour
    /// ([`SiteRoutes::relay`]) sent through it instead; refused if there is none.
    fn relay_slow_routes(&self, p: &Program) -> Result<Program, Refusal> {
        let slow: Vec<(Action, SiteId, SiteId)> = p
            .body
            .iter()
            .filter_map(|a| a.source_site().map(|s| (a, s)))
            .flat_map(|(a, s)| a.dests.iter().filter_map(move |&d| self.machine.relay(s, d).map(|w| (a.clone(), d, w))))
            .collect();
        if slow.is_empty() {
            return Err(Refusal::NotApplicable("no transfer has a faster detour".to_string()));
        }
        let mut result = p.clone();
        for (a, d, w) in slow {
            // an earlier relay may have split `a`'s destinations already
            let current = result
                .body
                .iter()
                .find(|b| b.aggregate == a.aggregate && b.source == a.source && b.dests.contains(&d))
                .cloned();
            if let Some(current) = current {
                result = unguarded::introduce_relay(&result, &current, d, w)?;
            }
        }
        Ok(result)
    }

    /// Swaps two sites between two partitions declared by size and rebuilds from the plans
    /// (half the time on a machine with slow routes, then sends every transfer that has a
    /// faster detour through it: a placement change combined with relays).
    fn swap(&mut self, cur: &State) -> Option<State> {
        let sized = self.preamble.sized_partitions();
        let i = self.rng.below(sized.len());
        let j = (i + 1 + self.rng.below(sized.len() - 1)) % sized.len();
        let (p, q) = (&sized[i].0, &sized[j].0);
        let ps: Vec<SiteId> = cur.membership.sites(p)?.iter().copied().collect();
        let qs: Vec<SiteId> = cur.membership.sites(q)?.iter().copied().collect();
        let (a, b) = (*self.rng.pick(&ps)?, *self.rng.pick(&qs)?);
        let mut membership = cur.membership.clone();
        membership.0.get_mut(p)?.remove(&a);
        membership.0.get_mut(p)?.insert(b);
        membership.0.get_mut(q)?.remove(&b);
        membership.0.get_mut(q)?.insert(a);
        let gs = Rc::new(groups(&self.preamble, &membership)?);
        let balanced = balanced_roots(&gs);
        let plans: Vec<Plan> = cur
            .plans
            .iter()
            .zip(gs.iter())
            .zip(balanced)
            .map(|((plan, g), fallback)| match (&plan.kind, plan.kind.root()) {
                (Kind::Rooted { reduce, spread, .. }, Some(root)) if !g.root_candidates().contains(&root) => {
                    Plan { kind: Kind::Rooted { root: fallback, reduce: *reduce, spread: *spread }, ..plan.clone() }
                }
                (Kind::Trees { .. }, Some(root)) if !g.root_candidates().contains(&root) => Plan {
                    kind: Kind::Rooted { root: fallback, reduce: Shape::Fastest, spread: Shape::Fastest },
                    ..plan.clone()
                },
                _ => plan.clone(),
            })
            .collect();
        if self.machine.uniform || self.rng.below(2) == 0 {
            return self.state_of_plans(&membership, gs, plans, format!("placed {membership}"));
        }
        let body: BTreeSet<Action> = gs.iter().zip(&plans).flat_map(|(g, p)| build(g, p, &self.machine)).collect();
        let program = self.relay_slow_routes(&self.candidate(body)).ok()?;
        let cost = self.cost(&program, &membership)?;
        let origin = format!("placed {membership}, slow routes relayed");
        Some(State { membership, groups: gs, plans, program, cost, origin })
    }

    /// A plan with one thing changed at random: the root, a phase's shape, the ring order,
    /// relaying, the salt, one site's parent in a tree, or the structure.
    fn mutate(&mut self, plan: &Plan, group: &Group) -> Plan {
        let mut next = plan.clone();
        let roots = group.root_candidates();
        let root = plan.kind.root().or_else(|| roots.first().copied()).unwrap_or(SiteId(0));
        let (reduce, spread) = match plan.kind {
            Kind::Rooted { reduce, spread, .. } => (reduce, spread),
            _ => (Shape::Fastest, Shape::Fastest),
        };
        let shape = |rng: &mut Rng| SHAPES[rng.below(SHAPES.len())];
        match self.rng.below(8) {
            0 => {
                let root = self.rng.pick(&roots).copied().unwrap_or(root);
                next.kind = Kind::Rooted { root, reduce, spread };
            }
            1 => next.kind = Kind::Rooted { root, reduce: shape(&mut self.rng), spread },
            2 => next.kind = Kind::Rooted { root, reduce, spread: shape(&mut self.rng) },
            3 => next.order = self.rng.below(self.machine.orders.len()),
            4 if !self.machine.uniform => next.relay = !plan.relay,
            5 => {
                next.salt = self.rng.next_u64();
                next.kind = Kind::Rooted { root, reduce, spread };
            }
            6 | 7 => next.kind = self.reparented(plan, group, root),
            _ if group.butterfly_applies() && plan.kind != Kind::Butterfly => next.kind = Kind::Butterfly,
            _ => next.kind = Kind::Rooted { root, reduce: shape(&mut self.rng), spread: shape(&mut self.rng) },
        }
        next
    }

    /// Explicit trees for `plan` (its own, or the fastest-path trees of its root) with one
    /// site of one tree hung under another parent: relay introduction or elimination (and,
    /// while reducing, aggregation pushdown) on the tree's edges.
    fn reparented(&mut self, plan: &Plan, group: &Group, root: SiteId) -> Kind {
        let (mut reduce, mut spread) = match &plan.kind {
            Kind::Trees { reduce, spread, .. } => (reduce.clone(), spread.clone()),
            _ => {
                let none = Load::new();
                (
                    self.machine.tree(root, true, plan.salt, &none, group.bytes),
                    self.machine.tree(root, false, plan.salt, &none, group.bytes),
                )
            }
        };
        let inbound = self.rng.below(2) == 0;
        let (tree, ends): (&mut BTreeMap<SiteId, SiteId>, Vec<SiteId>) = if inbound {
            (&mut reduce, group.holders.keys().copied().collect())
        } else {
            (&mut spread, group.targets.iter().copied().collect())
        };
        let used: Vec<SiteId> = pruned(tree, root, ends.into_iter()).into_iter().map(|(s, _)| s).collect();
        if let Some(&v) = self.rng.pick(&used) {
            let parents: Vec<SiteId> = self
                .machine
                .sites
                .iter()
                .copied()
                .filter(|&p| {
                    p != v && if inbound { self.machine.bandwidth(v, p) } else { self.machine.bandwidth(p, v) } > 0.0
                })
                .collect();
            if let Some(&p) = self.rng.pick(&parents)
                && let Some(t) = reparent(tree, root, v, p)
            {
                *tree = t;
            }
        }
        Kind::Trees { root, reduce, spread }
    }

    /// One Section 5.4 rewrite at a random place, aimed where it is likely to pay off.
    fn rewrite(&mut self, cur: &State) -> Option<State> {
        let p = &cur.program;
        let body: Vec<&Action> = p.body.iter().collect();
        let sends: Vec<(&Action, SiteId, SiteId)> = body
            .iter()
            .filter_map(|a| a.source_site().map(|s| (*a, s)))
            .flat_map(|(a, s)| a.dests.iter().map(move |d| (a, s, *d)))
            .collect();
        let sites: Vec<SiteId> = self.machine.sites.clone();
        let (name, result): (&str, Result<Program, Refusal>) = match self.rng.below(23) {
            // relay introduction, preferably around a slow route, through its best relay
            0..=4 => {
                let slow: Vec<(&Action, SiteId, SiteId)> =
                    sends.iter().copied().filter(|(_, s, d)| self.machine.relay(*s, *d).is_some()).collect();
                let pool = if !slow.is_empty() && self.rng.below(4) != 0 { &slow } else { &sends };
                let &(a, s, d) = self.rng.pick(pool)?;
                let relay = match self.machine.relay(s, d) {
                    Some(w) if self.rng.below(2) == 0 => w,
                    _ => {
                        let others: Vec<SiteId> = sites.iter().copied().filter(|w| *w != s && *w != d).collect();
                        *self.rng.pick(&others)?
                    }
                };
                ("introduce_relay", unguarded::introduce_relay(p, a, d, relay))
            }
            5 => {
                let runs = aggregate_runs(&body);
                let (body, runs) = (&body, &runs);
                let pairs: Vec<(&Action, &Action, SiteId)> = (0..body.len())
                    .flat_map(|i| body[runs[i].clone()].iter().map(move |b| (body[i], *b)))
                    .filter(|(a, _)| a.source_site().is_some())
                    .filter_map(|(a, b)| b.source_site().filter(|r| a.dests.contains(r)).map(|_| (a, b)))
                    .flat_map(|(a, b)| b.dests.iter().map(move |d| (a, b, *d)))
                    .collect();
                let &(a, b, d) = self.rng.pick(&pairs)?;
                ("eliminate_relay", unguarded::eliminate_relay(p, a, b, d))
            }
            6..=8 => {
                let multi: Vec<&Action> = body.iter().copied().filter(|a| a.dests.len() >= 2).collect();
                let a = *self.rng.pick(&multi)?;
                let dests: Vec<SiteId> = a.dests.iter().copied().collect();
                let first: BTreeSet<SiteId> = if self.rng.below(2) == 0 {
                    BTreeSet::from([*self.rng.pick(&dests)?])
                } else {
                    dests[..dests.len() / 2].iter().copied().collect()
                };
                ("fission", unguarded::fission(p, a, &first))
            }
            9..=10 => {
                let runs = aggregate_runs(&body);
                let (body, runs) = (&body, &runs);
                let pairs: Vec<(&Action, &Action)> = (0..body.len())
                    .flat_map(|i| body[i + 1..runs[i].end].iter().map(move |b| (body[i], *b)))
                    .filter(|(a, b)| a.source == b.source)
                    .collect();
                let &(a, b) = self.rng.pick(&pairs)?;
                ("fusion", unguarded::fusion(p, a, b))
            }
            11..=12 => {
                // the pairs `a < b` of one source, in the order of the pairs of the body
                let of_source = source_index(&body);
                let (body, of_source) = (&body, &of_source);
                let pairs = (0..body.len()).flat_map(|i| {
                    let same = &of_source[&body[i].source];
                    same[same.partition_point(|&j| j <= i)..].iter().map(move |&j| (body[i], body[j]))
                });
                let mut cut = false;
                let triples: Vec<(&Action, &Action, SiteId)> = within(pairs, self.budget, &mut cut)
                    .filter(|(a, b)| a.aggregate.is_disjoint(&b.aggregate))
                    .flat_map(|(a, b)| a.dests.intersection(&b.dests).map(move |d| (a, b, *d)))
                    .collect();
                if cut {
                    return None;
                }
                let &(a, b, d) = self.rng.pick(&triples)?;
                ("pushdown", unguarded::pushdown(p, a, b, d))
            }
            13 => {
                let big: Vec<(&Action, SiteId, SiteId)> =
                    sends.iter().copied().filter(|(a, _, _)| a.aggregate.len() >= 2).collect();
                let &(a, _, d) = self.rng.pick(&big)?;
                let atoms: Vec<AtomId> = a.aggregate.atoms().iter().cloned().collect();
                let cut = 1 + self.rng.below(atoms.len() - 1);
                let part = Aggregate::new(atoms[..cut].iter().cloned()).ok()?;
                ("pullup", unguarded::pullup(p, a, d, &part, true))
            }
            14..=16 => {
                let &(a, s, d) = self.rng.pick(&sends)?;
                // sites where the aggregate is likely materialised: sources and destinations
                // of the actions that move it
                let holders: Vec<SiteId> = body
                    .iter()
                    .filter(|b| b.aggregate == a.aggregate)
                    .flat_map(|b| b.source_site().into_iter().chain(b.dests.iter().copied()))
                    .filter(|w| *w != s && *w != d)
                    .collect::<BTreeSet<_>>()
                    .into_iter()
                    .collect();
                let new_source = *self.rng.pick(&holders)?;
                ("substitute_source", unguarded::substitute_source(p, a, d, new_source))
            }
            17..=19 => {
                let a = *self.rng.pick(&body)?;
                ("delete", unguarded::delete(p, a))
            }
            20 => {
                let &(a, s, d) = self.rng.pick(&sends)?;
                ("relay chain", self.relay_chain(p, a, s, d))
            }
            21 => {
                // two transfers into one site from different sources, of disjoint aggregates;
                // in the order of the pairs of `sends`, but only the pairs into one site are
                // formed (`O(sends × sends into a site)`, not `O(sends²)`)
                let mut into: HashMap<SiteId, Vec<usize>> = HashMap::new();
                for (i, &(_, _, d)) in sends.iter().enumerate() {
                    into.entry(d).or_default().push(i);
                }
                let (sends, into) = (&sends, &into);
                let all = sends.iter().flat_map(|&(x, r, d)| into[&d].iter().map(move |&j| (x, r, d, sends[j])));
                let mut cut = false;
                let pairs: Vec<(&Action, &Action, SiteId)> = within(all, self.budget, &mut cut)
                    .filter(|&(x, r, _, (y, q, _))| r != q && x.aggregate.is_disjoint(&y.aggregate))
                    .map(|(x, _, d, (y, _, _))| (x, y, d))
                    .collect();
                if cut {
                    return None;
                }
                let &(x, y, d) = self.rng.pick(&pairs)?;
                ("relay and combine", relay_and_combine(p, x, y, d))
            }
            _ => ("relay the slow routes", self.relay_slow_routes(p)),
        };
        self.successor(cur, result.ok()?, format!("rewrite: {name}"))
    }
}

/// `y`'s transfer to `dest` relayed through `x`'s source and combined there with `x`'s
/// (`X @ r -> d`, `Y @ q -> d` become `Y @ q -> r`, `X+Y @ r -> d`): relay introduction
/// followed by an aggregation pushdown across rounds, which adds a partial sum at `r` that
/// neither rule alone forms.
fn relay_and_combine(p: &Program, x: &Action, y: &Action, dest: SiteId) -> Result<Program, Refusal> {
    let r = x
        .source_site()
        .ok_or_else(|| Refusal::NotApplicable(format!("{x} is sourced at a partition; the move needs a site")))?;
    let relayed = unguarded::introduce_relay(p, y, dest, r)?;
    // `x` is untouched (its source is not `y`'s), and the relay added `Y @ r -> dest`
    unguarded::pushdown(&relayed, x, &Action::new(y.aggregate.clone(), r, [dest]), dest)
}

/// For each action of `body` (a program's body in order, so sorted by aggregate first),
/// the range of the actions with its aggregate: the pairs of actions of one aggregate that
/// the rewrites look for, without comparing every pair of the body.
fn aggregate_runs(body: &[&Action]) -> Vec<Range<usize>> {
    let mut runs = Vec::with_capacity(body.len());
    let mut start = 0;
    for i in 1..=body.len() {
        if i == body.len() || body[i].aggregate != body[start].aggregate {
            runs.extend(std::iter::repeat_n(start..i, i - start));
            start = i;
        }
    }
    runs
}

/// The positions in `body` of the actions of each source, ascending.
fn source_index<'a>(body: &[&'a Action]) -> HashMap<&'a Target, Vec<usize>> {
    let mut of_source: HashMap<&Target, Vec<usize>> = HashMap::new();
    for (i, a) in body.iter().enumerate() {
        of_source.entry(&a.source).or_default().push(i);
    }
    of_source
}

/// A 64-bit digest of a candidate (its membership and body), the key of the search's cache
/// of scores: hashing a body is cheaper than cloning it into the key, which allocated every
/// action of every candidate again. Two distinct candidates share a digest with probability
/// about 2^-64 per pair; even then the result stays true, since the best program is
/// validated and simulated afresh before it is returned.
fn fingerprint(membership: &Membership, body: &BTreeSet<Action>) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    membership.hash(&mut h);
    body.hash(&mut h);
    h.finish()
}

/// One rewrite of the descent, by index into [`Polish::body`].
#[derive(Clone, Copy, Debug)]
enum Step {
    /// Delete an action.
    Delete(usize),
    /// Eliminate the relay of the first action through the second's source, for this destination.
    Eliminate(usize, usize, SiteId),
    /// Fuse two actions of the same aggregate and source.
    Fusion(usize, usize),
    /// Send the action's aggregate to the destination from another site that holds it.
    Substitute(usize, SiteId, SiteId),
    /// Combine two transfers of disjoint aggregates from one source to the destination.
    Pushdown(usize, usize, SiteId),
}

/// The descent that ends the search: every rewrite of the best program that removes work or a
/// hop (deleting an action, eliminating a relay, fusing, substituting a source, pushing an
/// aggregation down), tried in a random order, one per iteration, taking the first that
/// improves on the best and starting over from it. Annealing samples these moves among many
/// others and may never try the one improving rewrite of a program of a few hundred actions;
/// the descent tries each, so it ends at a local optimum of them or when the iterations run
/// out (at a local optimum the annealing goes on with the iterations left).
struct Polish {
    /// The best program's body when the steps were listed.
    body: Vec<Action>,
    /// The steps not yet tried, the next last.
    steps: Vec<Step>,
}

impl Polish {
    /// Every step of the descent around `best`, shuffled by `rng`; `None` when `budget` is
    /// over before they are all listed.
    fn around(best: &State, rng: &mut Rng, budget: &Budget) -> Option<Polish> {
        let body: Vec<Action> = best.program.body.iter().cloned().collect();
        let refs: Vec<&Action> = body.iter().collect();
        let runs = aggregate_runs(&refs);
        let of_source = source_index(&refs);
        let mut steps: Vec<Step> = (0..body.len()).map(Step::Delete).collect();
        for (i, a) in body.iter().enumerate() {
            if budget.over() {
                return None;
            }
            let Some(s) = a.source_site() else { continue };
            let holders: BTreeSet<SiteId> = body[runs[i].clone()]
                .iter()
                .flat_map(|b| b.source_site().into_iter().chain(b.dests.iter().copied()))
                .collect();
            for &d in &a.dests {
                steps.extend(holders.iter().filter(|&&w| w != s && w != d).map(|&w| Step::Substitute(i, d, w)));
            }
            // the actions a step pairs `a` with, in body order: those of its aggregate, and
            // the later ones of its source
            let same = &of_source[&a.source];
            let mut partners: Vec<usize> = runs[i]
                .clone()
                .filter(|&j| j != i)
                .chain(same[same.partition_point(|&j| j <= i)..].iter().copied())
                .collect();
            partners.sort_unstable();
            partners.dedup();
            for (j, b) in partners.into_iter().map(|j| (j, &body[j])) {
                if b.aggregate == a.aggregate && b.source_site().is_some_and(|r| a.dests.contains(&r)) {
                    steps.extend(b.dests.iter().map(|&d| Step::Eliminate(i, j, d)));
                }
                if i < j && b.source == a.source {
                    if b.aggregate == a.aggregate {
                        steps.push(Step::Fusion(i, j));
                    } else if a.aggregate.is_disjoint(&b.aggregate) {
                        steps.extend(a.dests.intersection(&b.dests).map(|&d| Step::Pushdown(i, j, d)));
                    }
                }
            }
        }
        for i in (1..steps.len()).rev() {
            if i % CHECK_EVERY == 0 && budget.over() {
                return None;
            }
            steps.swap(i, rng.below(i + 1));
        }
        Some(Polish { body, steps })
    }
}

/// The best seed under each placement met, in the order met.
#[derive(Default)]
struct Seeds {
    per_placement: Vec<State>,
}

impl Seeds {
    /// Keeps `st` if it is the best of its placement so far.
    fn consider(&mut self, st: Option<State>) {
        let Some(st) = st else { return };
        match self.per_placement.iter_mut().find(|b| b.membership == st.membership) {
            Some(b) if st.cost.better(&b.cost) => *b = st,
            Some(_) => {}
            None => self.per_placement.push(st),
        }
    }

    /// The best seed over every placement.
    fn best(&self) -> Option<&State> {
        self.per_placement.iter().reduce(|a, b| if b.cost.better(&a.cost) { b } else { a })
    }

    /// Where the walks start: the best seed, and the best seed under another placement
    /// within [`ALTERNATE_WITHIN`] of it (the best such), if any; `None` without seeds.
    fn starts(self) -> Option<(State, Option<State>)> {
        let mut seeds = self.per_placement;
        seeds.sort_by(|a, b| {
            a.cost.completion.total_cmp(&b.cost.completion).then(a.cost.objective.total_cmp(&b.cost.objective))
        });
        let mut seeds = seeds.into_iter();
        let best = seeds.next()?;
        let alternate = seeds.next().filter(|s| s.cost.completion <= best.cost.completion * ALTERNATE_WITHIN);
        Some((best, alternate))
    }
}

/// The chunk counts the search tries, ascending: 1 (whole atoms), 2, 4 and 8 (pipelining),
/// and the count that stripes the groups over the machine's rings
/// ([`stripes::chunks_to_stripe`]), each at most `max_chunks` and leaving at most
/// [`MAX_REFINED_ATOMS`] atoms and no chunk under [`MIN_CHUNK_GB`].
fn chunk_counts(preamble: &Program, groups: usize, machine: &SiteRoutes, max_chunks: usize) -> Vec<usize> {
    let atoms = preamble.inputs.len().max(1);
    let smallest = preamble.inputs.values().map(|i| i.size_gb).fold(f64::INFINITY, f64::min);
    let mut counts: BTreeSet<usize> = [2, 4, 8, stripes::chunks_to_stripe(groups, machine)].into_iter().collect();
    counts.retain(|&k| k <= max_chunks && atoms * k <= MAX_REFINED_ATOMS && smallest / k as f64 >= MIN_CHUNK_GB);
    counts.insert(1);
    counts.into_iter().collect()
}

/// A star plan (reduce to `root`, multicast from it) along the first order.
fn star(root: SiteId) -> Plan {
    Plan { kind: Kind::Rooted { root, reduce: Shape::Star, spread: Shape::Star }, order: 0, relay: false, salt: 0 }
}

/// One root per group, spreading the work: each group takes, among its targets (its holders
/// if it has none), a site holding some of its atoms if possible, then the one rooting the
/// fewest groups so far, then the lowest. Distinct roots turn an all-reduce into a
/// reduce-scatter and an all-gather.
fn balanced_roots(gs: &[Group]) -> Vec<SiteId> {
    let mut load: HashMap<SiteId, usize> = HashMap::new();
    gs.iter()
        .map(|g| {
            let candidates: Vec<SiteId> = if g.targets.is_empty() {
                g.holders.keys().copied().collect()
            } else {
                g.targets.iter().copied().collect()
            };
            let root = candidates
                .into_iter()
                .min_by_key(|c| (!g.holders.contains_key(c), load.get(c).copied().unwrap_or(0), *c))
                .unwrap_or(SiteId(0));
            *load.entry(root).or_default() += 1;
            root
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cost::simulate;
    use crate::refine::refinement_of;
    use crate::synth::collectives::{Collective, all_reduce_whole};

    fn options(iterations: usize) -> SearchOptions {
        SearchOptions { seed: 3, iterations, ..SearchOptions::default() }
    }

    /// Recursive doubling (Example 5.2) of the whole atoms along every ring order of the
    /// machine, with and without relays: the fastest such program's time.
    fn recursive_doubling_ms(preamble: &Program, topology: &Topology) -> f64 {
        let machine = SiteRoutes::new(&preamble.sites(), topology);
        let gs = groups(preamble, &preamble.declared_membership()).unwrap();
        let mut best = f64::INFINITY;
        for order in 0..machine.orders.len() {
            for relay in [false, true] {
                let plan = Plan { kind: Kind::Butterfly, order, relay, salt: 0 };
                let program = preamble.with_body(gs.iter().flat_map(|g| build(g, &plan, &machine)));
                best = best.min(simulate(&program, topology).unwrap().completion_ms);
            }
        }
        best
    }

    #[test]
    fn indivisible_all_reduce_is_chunked_to_near_its_bound() {
        let p = all_reduce_whole(8, 1.0);
        for (name, within) in [("dgx-a100", 1.2), ("dgx-v100", 1.4)] {
            let t = Topology::preset(name).unwrap();
            let found = search(&p, &t, options(0)).unwrap();
            let bound = Collective::AllReduce.bound_ms(8, 1.0, &t);
            assert!(found.completion_ms <= within * bound, "{name}: {} ms, bound {bound}", found.completion_ms);
            assert!(found.chunks > 1, "{name}: whole atoms cannot come near the bound");
            assert_eq!(refinement_of(&p, &found.program), Ok(found.chunks));
            assert!(found.program.validate_with(&found.membership).is_ok());
            let rd = recursive_doubling_ms(&p, &t);
            assert!(found.completion_ms < rd, "{name}: {} ms, recursive doubling {rd} ms", found.completion_ms);
        }
    }

    #[test]
    fn whole_atoms_stay_whole_when_chunks_are_refused() {
        let p = all_reduce_whole(8, 1.0);
        let t = Topology::preset("dgx-a100").unwrap();
        let found = search(&p, &t, SearchOptions { max_chunks: 1, ..options(0) }).unwrap();
        assert_eq!(found.chunks, 1);
        assert_eq!(found.program.with_body([]), p);
        // without chunks an all-reduce of whole atoms is far from its bound
        assert!(found.completion_ms > 2.0 * Collective::AllReduce.bound_ms(8, 1.0, &t));
    }

    #[test]
    fn the_annealing_beats_every_seed_on_the_fair_v100_reduce_scatter() {
        // Under max-min fair sharing no seed routes around the chains' lockstep; a rewrite the
        // annealing applies does (2.0% faster with the preset's latencies, 4.0% on the pure
        // fluid model). The preset serves FIFO, where there is no lockstep to route around.
        let p = Collective::ReduceScatter.preamble(8, 1.0);
        let t = Topology::preset("dgx-v100").unwrap().with_service(einsum_sim::LinkService::Fair);
        let found = search(&p, &t, SearchOptions { seed: 0, iterations: 400, ..SearchOptions::default() }).unwrap();
        assert!(
            found.completion_ms < 0.99 * found.seed_ms,
            "{} ms from a {} ms seed",
            found.completion_ms,
            found.seed_ms
        );
        assert!(found.program.validate_with(&found.membership).is_ok());
        let again = simulate(&found.program, &t).unwrap();
        assert!((again.completion_ms - found.completion_ms).abs() <= 1e-9 * found.completion_ms);
    }

    #[test]
    fn decongesting_finds_the_best_v100_all_reduce() {
        // the chunked all-reduce under FIFO links: the best program found at the default
        // budget is a decongesting move's (12.19 ms from a 12.50 ms seed at seed 0; without
        // the move the search stops at 12.23 ms)
        let p = Collective::AllReduce.preamble(8, 1.0);
        let t = Topology::preset("dgx-v100").unwrap();
        let found = search(&p, &t, SearchOptions::default()).unwrap();
        assert!(found.completion_ms < 0.98 * found.seed_ms, "{} ms from {} ms", found.completion_ms, found.seed_ms);
        assert_eq!(found.origin, "decongested the busiest link");
        assert!(found.program.validate_with(&found.membership).is_ok());
    }

    #[test]
    fn the_evaluator_leaves_every_search_unchanged() {
        // the interned evaluation (`synth/eval.rs`) against the general path, on whole and
        // chunked atoms, one node and two, with a placement to search
        let example = crate::load(
            "GPUS: 0, 1, 2, 3, 4, 5, 6, 7\nPARTITIONS: G1 {size 4} G2 {size 4}\n\
             IN: A @ 0; B @ 1; C @ 2; D @ 3; E @ 4; F @ 5; G @ 6; H @ 7\nOUT: A+B+E+F @ G1; C+D+G+H @ G2",
        )
        .unwrap();
        let cases = [
            ("dgx-v100", Collective::ReduceScatter.preamble(8, 1.0), 60),
            ("dgx-v100", example, 120),
            ("dgx-a100", all_reduce_whole(8, 1.0), 40),
            ("dgx-a100x2", Collective::AllReduce.preamble(16, 0.25), 30),
        ];
        for (machine, p, iterations) in cases {
            let t = Topology::preset(machine).unwrap();
            let o = SearchOptions { seed: 5, iterations, ..SearchOptions::default() };
            let fast = search_with(&p, &t, o, &mut |_| {}, false).unwrap();
            let slow = search_with(&p, &t, o, &mut |_| {}, true).unwrap();
            assert_eq!(fast.completion_ms.to_bits(), slow.completion_ms.to_bits(), "{machine}");
            assert_eq!(fast.seed_ms.to_bits(), slow.seed_ms.to_bits(), "{machine}");
            assert_eq!((fast.evaluated, fast.refused, &fast.origin), (slow.evaluated, slow.refused, &slow.origin));
            assert_eq!((&fast.program, &fast.membership, fast.chunks), (&slow.program, &slow.membership, slow.chunks));
        }
    }

    /// The action of `p`'s body written `text` (as the printer writes it).
    fn action(p: &Program, text: &str) -> Action {
        p.body.iter().find(|a| a.to_string() == text).unwrap_or_else(|| panic!("no {text} in {p}")).clone()
    }

    #[test]
    fn relay_and_combine_forms_a_partial_sum_on_the_way() {
        let p = crate::load("IN: A @ 0; B @ 1; C @ 2\nOUT: A+B+C @ 2\nA @ 0 -> 2; B @ 1 -> 2\nA+B+C @ 2\n").unwrap();
        let (a, b) = (action(&p, "A @ 0 -> 2"), action(&p, "B @ 1 -> 2"));
        let combined = relay_and_combine(&p, &b, &a, SiteId(2)).unwrap();
        let expected =
            crate::load("IN: A @ 0; B @ 1; C @ 2\nOUT: A+B+C @ 2\nA @ 0 -> 1; A+B @ 1 -> 2\nA+B+C @ 2\n").unwrap();
        assert_eq!(combined.body, expected.body);
        assert!(combined.validate().is_ok());
        // overlapping aggregates cannot be summed
        let q = crate::load("IN: A @ 0; B @ 1\nOUT: A+B @ 2\nA @ 0 -> 2; A @ 0 -> 1; A+B @ 1 -> 2\nA+B @ 2\n").unwrap();
        let (x, y) = (action(&q, "A+B @ 1 -> 2"), action(&q, "A @ 0 -> 2"));
        assert!(matches!(relay_and_combine(&q, &x, &y, SiteId(2)), Err(Refusal::NotApplicable(_))));
    }

    #[test]
    fn relay_chains_take_two_hops_and_slow_routes_take_their_detour() {
        let t = Topology::preset("dgx-v100").unwrap();
        let gpus = "GPUS: 0, 1, 2, 3, 4, 5, 6, 7\nIN: A @ 0\nOUT: A @ 5\n";
        let p = crate::load(&format!("{gpus}A @ 0 -> 5\n")).unwrap();
        let mut s = Search {
            preamble: p.with_body([]),
            topology: &t,
            chunks: 1,
            machine: SiteRoutes::new(&p.sites(), &t),
            rng: Rng::new(1),
            cache: HashMap::new(),
            owners: HashMap::new(),
            eval: Evaluator::new(&p),
            reference: false,
            evaluated: 0,
            refused: 0,
            budget: Budget { clock: Instant::now(), limit: None, step: Duration::ZERO },
        };
        let a = action(&p, "A @ 0 -> 5");
        for _ in 0..8 {
            let chained = s.relay_chain(&p, &a, SiteId(0), SiteId(5)).unwrap();
            assert!(chained.validate().is_ok(), "{chained}");
            assert_eq!(chained.body.len(), 3, "{chained}");
            let hops: Vec<(SiteId, SiteId)> =
                chained.body.iter().flat_map(|b| b.dests.iter().map(|d| (b.source_site().unwrap(), *d))).collect();
            assert!(hops.iter().all(|(x, y)| x != y), "{chained}");
            assert!(hops.iter().any(|(x, _)| *x == SiteId(0)) && hops.iter().any(|(_, y)| *y == SiteId(5)));
        }
        // sites 0 and 5 share no NVLink on the DGX-V100: the detour replaces the bridge
        let relay = s.machine.relay(SiteId(0), SiteId(5)).unwrap();
        let detoured = s.relay_slow_routes(&p).unwrap();
        assert_eq!(detoured.body, crate::load(&format!("{gpus}A @ 0 -> {relay}; A @ {relay} -> 5\n")).unwrap().body);
        assert!(simulate(&detoured, &t).unwrap().completion_ms < simulate(&p, &t).unwrap().completion_ms);
        assert!(matches!(s.relay_slow_routes(&detoured), Err(Refusal::NotApplicable(_))));
    }

    #[test]
    fn chunk_counts_respect_the_limits() {
        let t = Topology::preset("dgx-v100").unwrap();
        let p = all_reduce_whole(8, 1.0);
        let machine = SiteRoutes::new(&p.sites(), &t);
        assert_eq!(chunk_counts(&p, 1, &machine, 48), vec![1, 2, 4, 8, 48]);
        assert_eq!(chunk_counts(&p, 1, &machine, 8), vec![1, 2, 4, 8]);
        // 64 atoms: at most 8 chunks each; 2 MB atoms are never cut
        assert_eq!(chunk_counts(&Collective::AllReduce.preamble(8, 1.0), 8, &machine, 48), vec![1, 2, 4, 6, 8]);
        assert_eq!(chunk_counts(&all_reduce_whole(8, 0.002), 1, &machine, 48), vec![1]);
    }
}

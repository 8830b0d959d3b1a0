//! Simulating a program on a machine: validate, choose the membership, lower, simulate.
//!
//! [`simulate`] validates the program (Definition 5.5), lowers its closure to a task DAG
//! ([`crate::lower()`]) and runs it on an [`einsum_sim::Topology`]. With partitions declared
//! by size, every membership that makes the program valid is a legal placement, and when the
//! body fires actions at partitions their costs differ; so the valid memberships the search
//! can enumerate (at most [`MAX_SIMULATED_MEMBERSHIPS`] of them, after at most
//! [`crate::MAX_EVALUATIONS`] tries) are all simulated and the fastest is kept. A body whose
//! actions all have site sources costs the same under every membership, so only the first
//! valid one is simulated.
//!
//! A program that is well-formed but not valid (its `OUT` is not met) is still simulated and
//! reported with `valid: false` and the reason; one that is not even well-formed is an error.

use std::collections::BTreeSet;

use einsum_sim::{SimError, Topology, Trace};

use crate::action::Action;
use crate::ids::{PartitionId, SiteId};
use crate::lower::{Lowering, lower};
use crate::membership::Membership;
use crate::membership_search::{MAX_EVALUATIONS, next_combination};
use crate::program::Program;
use crate::target::Target;
use crate::validity::{Validation, ValidityError};

/// Valid memberships [`simulate`] simulates at most, keeping the fastest.
pub const MAX_SIMULATED_MEMBERSHIPS: usize = 32;

/// Why a program could not be simulated.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SimulateError {
    /// The program fails a static check or is not well-formed under any membership tried.
    #[error(transparent)]
    Invalid(#[from] ValidityError),
    /// The program uses a site the machine does not have.
    #[error("site {site} is not a site of {topology}, which has sites 0 to {last}")]
    SiteOutOfRange {
        /// The site.
        site: SiteId,
        /// The topology's name.
        topology: String,
        /// Its last site.
        last: usize,
    },
    /// The simulator rejected the lowered task graph (for example a site the topology lacks).
    #[error("the simulator rejected the lowered program: {0}")]
    Sim(#[from] SimError),
}

/// An interval of simulated time, in milliseconds from the start of the program.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TimeSpan {
    /// Start.
    pub start_ms: f64,
    /// End.
    pub end_ms: f64,
}

/// When one firing (an action at one site) aggregated and sent.
#[derive(Clone, Debug, PartialEq)]
pub struct ActionTime {
    /// The action as written (its source may be a partition).
    pub action: Action,
    /// The site it fired at.
    pub site: SiteId,
    /// The closure round it fired in (from 1).
    pub round: usize,
    /// Its local aggregation, if the aggregate was not yet at the site.
    pub aggregate: Option<TimeSpan>,
    /// Its transfers, if it has destinations: from the first start to the last end.
    pub transfer: Option<TimeSpan>,
}

/// A simulated program.
#[derive(Clone, Debug)]
pub struct Simulation {
    /// Whether the program is valid (Definition 5.5) under [`Simulation::membership`].
    pub valid: bool,
    /// Why not, when it is not (it is then well-formed, or it could not be simulated).
    pub invalid: Option<ValidityError>,
    /// Simulated completion time.
    pub completion_ms: f64,
    /// Time during which at least one transfer was running.
    pub transfer_ms: f64,
    /// The membership simulated: the fastest valid one found.
    pub membership: Membership,
    /// How many memberships were simulated to choose it.
    pub memberships_simulated: usize,
    /// Every firing's times, in firing order.
    pub actions: Vec<ActionTime>,
    /// The lowered task graph.
    pub lowering: Lowering,
    /// The simulator's trace of that graph.
    pub trace: Trace,
}

/// Simulates `program` on `topology`: validates it (Definition 5.5), lowers its closure to a
/// task DAG (an aggregation where an action forms its aggregate, a transfer or multicast of
/// its size to its destinations, each waiting for the tasks that produced its pieces), runs
/// the fluid simulator, and reports the completion and transfer times, per-action times and
/// the trace. With partitions declared by size and actions fired at partitions, every valid
/// membership found (up to [`MAX_SIMULATED_MEMBERSHIPS`]) is simulated and the fastest kept.
/// A well-formed program whose `OUT` is not met is simulated with `valid: false`; one that is
/// not well-formed, fails a static check or uses a site the topology lacks is an error.
pub fn simulate(program: &Program, topology: &Topology) -> Result<Simulation, SimulateError> {
    check_sites(program, topology)?;
    let first = match program.validate() {
        Ok(v) => v,
        Err(e @ ValidityError::Invalid(_)) => {
            return match program.well_formed() {
                Ok(v) => run(program, v, topology, Some(e)),
                Err(_) => Err(SimulateError::Invalid(e)),
            };
        }
        Err(e) => return Err(SimulateError::Invalid(e)),
    };
    let partition_sourced = program.body.iter().any(|a| matches!(a.source, Target::Partition(_)));
    let others = if partition_sourced && program.has_size_partitions() {
        valid_memberships(program, &first.membership, MAX_SIMULATED_MEMBERSHIPS - 1)
    } else {
        Vec::new()
    };
    let mut best = run(program, first, topology, None)?;
    let mut count = 1;
    for v in others {
        let s = run(program, v, topology, None)?;
        count += 1;
        if s.completion_ms < best.completion_ms {
            best = s;
        }
    }
    best.memberships_simulated = count;
    Ok(best)
}

/// Simulates `program` under a given `membership` (which must fit its partitions). Like
/// [`simulate`], a program valid under it is reported valid, one only well-formed under it
/// is simulated with `valid: false`, and anything else is an error.
pub fn simulate_with(
    program: &Program,
    membership: &Membership,
    topology: &Topology,
) -> Result<Simulation, SimulateError> {
    check_sites(program, topology)?;
    match program.validate_with(membership) {
        Ok(v) => run(program, v, topology, None),
        Err(e @ ValidityError::Invalid(_)) => match program.well_formed_with(membership) {
            Ok(v) => run(program, v, topology, Some(e)),
            Err(_) => Err(SimulateError::Invalid(e)),
        },
        Err(e) => Err(SimulateError::Invalid(e)),
    }
}

/// The simulated completion time of `program` in ms, given its validation: what
/// [`simulate_with`] reports as [`Simulation::completion_ms`] under that validation's
/// membership, bit for bit, without validating again or recording the trace.
pub fn completion_ms(program: &Program, validation: &Validation, topology: &Topology) -> Result<f64, SimulateError> {
    check_sites(program, topology)?;
    let lowering = lower(program, &validation.closure);
    Ok(einsum_sim::simulate_completion(topology, lowering.graph.tasks())? * 1e3)
}

/// Every site the program names or declares must be a site of the topology.
pub(crate) fn check_sites(program: &Program, topology: &Topology) -> Result<(), SimulateError> {
    let n = topology.num_sites();
    let mut sites = program.sites();
    sites.extend(program.mentioned_sites());
    match sites.into_iter().find(|s| s.0 >= n) {
        Some(site) => Err(SimulateError::SiteOutOfRange {
            site,
            topology: topology.name().to_string(),
            last: n.saturating_sub(1),
        }),
        None => Ok(()),
    }
}

/// Lowers and simulates a program under a validation (or well-formedness) result.
pub(crate) fn run(
    program: &Program,
    validation: Validation,
    topology: &Topology,
    invalid: Option<ValidityError>,
) -> Result<Simulation, SimulateError> {
    let lowering = lower(program, &validation.closure);
    let trace = lowering.graph.simulate(topology)?;
    let span = |t: Option<einsum_sim::SimTaskId>| {
        t.and_then(|id| trace.task(id)).map(|t| TimeSpan { start_ms: t.start * 1e3, end_ms: t.end * 1e3 })
    };
    let actions = validation
        .closure
        .firings()
        .iter()
        .zip(&lowering.firings)
        .map(|(f, t)| ActionTime {
            action: f.action.clone(),
            site: f.site,
            round: f.round,
            aggregate: span(t.aggregate),
            transfer: t
                .transfers
                .iter()
                .filter_map(|(_, id)| span(Some(*id)))
                .reduce(|a, b| TimeSpan { start_ms: a.start_ms.min(b.start_ms), end_ms: a.end_ms.max(b.end_ms) }),
        })
        .collect();
    Ok(Simulation {
        valid: invalid.is_none(),
        invalid,
        completion_ms: trace.completion_ms(),
        transfer_ms: trace.transfer_time_ms(),
        membership: validation.membership,
        memberships_simulated: 1,
        actions,
        lowering,
        trace,
    })
}

/// Up to `limit` valid memberships other than `first`, in enumeration order: the sized
/// partitions that the body or `OUT` names take combinations of the eligible free sites (as
/// in [`Program::validate`]'s search, pruned by the closure in which every sized partition
/// holds every free site), the unnamed ones the leftover sites in order. Stops after
/// [`MAX_EVALUATIONS`] memberships tried.
fn valid_memberships(program: &Program, first: &Membership, limit: usize) -> Vec<Validation> {
    let declared = program.declared_membership();
    let sized: Vec<(PartitionId, usize)> = program.sized_partitions();
    let taken: BTreeSet<SiteId> = declared.0.values().flatten().copied().collect();
    let pool: Vec<SiteId> = program.sites().difference(&taken).copied().collect();
    let mut over = declared.clone();
    for (name, _) in &sized {
        over.0.insert(name.clone(), pool.iter().copied().collect());
    }
    let Ok(upper) = program.closure(&over) else { return Vec::new() };
    let named: BTreeSet<Target> =
        program.body.iter().map(|a| a.source.clone()).chain(program.outputs.iter().map(|r| r.target.clone())).collect();
    let (searched, unnamed): (Vec<_>, Vec<_>) =
        sized.into_iter().partition(|(name, _)| named.contains(&Target::Partition(name.clone())));
    let eligible: Vec<Vec<SiteId>> = searched
        .iter()
        .map(|(name, _)| {
            let target = Target::Partition(name.clone());
            pool.iter()
                .copied()
                .filter(|s| {
                    !upper.not_enabled().iter().any(|(a, site)| a.source == target && site == s)
                        && program
                            .outputs
                            .iter()
                            .filter(|r| r.target == target)
                            .all(|r| upper.contains(&r.aggregate, *s))
                })
                .collect()
        })
        .collect();

    let mut enumeration = Enumeration {
        program,
        first,
        pool: &pool,
        searched: &searched,
        unnamed: &unnamed,
        eligible: &eligible,
        limit,
        tried: 0,
        found: Vec::new(),
    };
    enumeration.descend(declared, &mut BTreeSet::new());
    enumeration.found
}

/// The depth-first enumeration of memberships behind [`valid_memberships`].
struct Enumeration<'a> {
    program: &'a Program,
    first: &'a Membership,
    pool: &'a [SiteId],
    searched: &'a [(PartitionId, usize)],
    unnamed: &'a [(PartitionId, usize)],
    eligible: &'a [Vec<SiteId>],
    limit: usize,
    tried: usize,
    found: Vec<Validation>,
}

impl Enumeration<'_> {
    fn done(&self) -> bool {
        self.found.len() >= self.limit || self.tried >= MAX_EVALUATIONS
    }

    fn descend(&mut self, membership: Membership, used: &mut BTreeSet<SiteId>) {
        if self.done() {
            return;
        }
        let depth = membership.0.len() - (self.program.partitions.len() - self.searched.len() - self.unnamed.len());
        if depth == self.searched.len() {
            let mut full = membership;
            let mut leftover = self.pool.iter().copied().filter(|s| !used.contains(s));
            for (name, k) in self.unnamed {
                full.0.insert(name.clone(), leftover.by_ref().take(*k).collect());
            }
            if &full == self.first {
                return;
            }
            self.tried += 1;
            if let Ok(v) = self.program.validate_with(&full) {
                self.found.push(v);
            }
            return;
        }
        let (name, k) = &self.searched[depth];
        let candidates: Vec<SiteId> = self.eligible[depth].iter().copied().filter(|s| !used.contains(s)).collect();
        if *k > candidates.len() {
            return;
        }
        let mut combo: Vec<usize> = (0..*k).collect();
        loop {
            let chosen: BTreeSet<SiteId> = combo.iter().map(|&i| candidates[i]).collect();
            used.extend(chosen.iter().copied());
            let mut next = membership.clone();
            next.0.insert(name.clone(), chosen.clone());
            self.descend(next, used);
            for s in &chosen {
                used.remove(s);
            }
            if self.done() || !next_combination(&mut combo, candidates.len()) {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h100() -> Topology {
        Topology::preset("dgx-h100").unwrap()
    }

    #[test]
    fn the_fastest_valid_membership_is_kept() {
        // S can be 1 (found first: A reaches 1 through 2) or 2 (A and the small B arrive
        // there directly, sooner).
        let p: Program = "GPUS: 0, 1, 2\nPARTITIONS: S {size 1} T {size 2}\nIN: A @ 0; B @ 1 (size: 0.1 GB)\n\
                          OUT: A+B @ S\nA @ 0 -> 2\nB @ 1 -> 2\nA @ 2 -> 1\nA+B @ S"
            .parse()
            .unwrap();
        let s = simulate(&p, &h100()).unwrap();
        assert!(s.valid);
        assert!(s.memberships_simulated >= 2, "{}", s.memberships_simulated);
        let part = |n: &str| PartitionId::new(n).unwrap();
        assert_eq!(p.validate().unwrap().membership.sites(&part("S")), Some(&BTreeSet::from([SiteId(1)])));
        assert_eq!(s.membership.sites(&part("S")), Some(&BTreeSet::from([SiteId(2)])));
    }

    /// The completion alone equals the traced simulation's, bit for bit, on the collectives
    /// of three machines (the naive programs of an all-gather and an all-reduce), and a site
    /// the machine lacks stays an error.
    #[test]
    fn completion_alone_equals_the_traced_simulation() {
        use crate::synth::collectives::{Collective, all_reduce_whole};
        use crate::synth::naive_validated;
        for preset in ["dgx-a100", "dgx-h100", "dgx-v100"] {
            let t = Topology::preset(preset).unwrap();
            for preamble in [Collective::AllGather.preamble(8, 0.25), all_reduce_whole(8, 0.5)] {
                let (program, validation) = naive_validated(&preamble).unwrap();
                let traced = simulate_with(&program, &validation.membership, &t).unwrap();
                assert_eq!(completion_ms(&program, &validation, &t).unwrap().to_bits(), traced.completion_ms.to_bits());
            }
        }
        let (program, validation) = naive_validated(&all_reduce_whole(16, 0.5)).unwrap();
        let eight = Topology::preset("dgx-a100").unwrap();
        assert!(matches!(completion_ms(&program, &validation, &eight), Err(SimulateError::SiteOutOfRange { .. })));
    }

    #[test]
    fn out_of_range_sites_and_ill_formed_programs_are_errors() {
        let p: Program = "IN: A @ 0\nA @ 0 -> 9".parse().unwrap();
        let e = simulate(&p, &h100()).unwrap_err();
        assert!(e.to_string().contains("site 9 is not a site of dgx-h100"), "{e}");
        let p: Program = "IN: A @ 0\nB @ 0 -> 1".parse().unwrap();
        assert!(matches!(simulate(&p, &h100()), Err(SimulateError::Invalid(ValidityError::Check(_)))));
        let p: Program = "IN: A @ 0; B @ 1\nOUT: A+B @ 1\nA+B @ 0 -> 1".parse().unwrap();
        assert!(matches!(simulate(&p, &h100()), Err(SimulateError::Invalid(ValidityError::Invalid(_)))));
    }

    #[test]
    fn well_formed_but_unmet_out_is_simulated_as_invalid() {
        let p: Program = "IN: A @ 0; B @ 1\nOUT: A+B @ 1\nA @ 0 -> 1".parse().unwrap();
        let s = simulate(&p, &h100()).unwrap();
        assert!(!s.valid);
        assert!(s.invalid.as_ref().unwrap().to_string().contains("A+B @ 1 is not met"));
        assert!(s.completion_ms > 0.0);
    }
}
